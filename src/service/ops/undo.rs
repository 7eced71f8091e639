//! `undo`: revert one edit of the audit log. `POST /v1/edits/{edit}/undo`.

use super::{Access, ApiError, Operation, Service, route};
use crate::service::UndoReport;

pub(crate) const OPERATION: Operation = Operation {
    name: "undo",
    routes: &[route("post", "/v1/edits/{edit}/undo", "undo")],
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
