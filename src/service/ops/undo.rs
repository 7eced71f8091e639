//! `undo`: revert one edit of the audit log. `POST /v1/edits/{edit}/undo`.

use std::sync::Arc;

use super::http::{Answer, BODY_ERRORS, HttpReply, HttpRequest, reply, route, typed};
use super::{Access, ApiError, Operation, Service};
use crate::service::UndoReport;

pub(crate) const OPERATION: Operation = Operation {
    name: "undo",
    routes: &[route(
        "post",
        "/v1/edits/{edit}/undo",
        "undo",
        &[reply(
            200,
            "the undo's row in the audit log, and the rebuild of a restored message's session",
            typed::<UndoReport>(),
        )],
        BODY_ERRORS,
        http,
    )],
    tool: None,
};

/// Reverts `edit` for `access`: the undo's row, and the rebuild of a restored message's
/// session.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    edit: i64,
) -> Result<UndoReport, ApiError> {
    access.write()?;
    access.edit(service, edit).await?;
    Ok(service.undo(edit, &access.actor()).await?)
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(
        async move { HttpReply::ok(run(service, access, request.path.number("edit")?).await?) },
    )
}
