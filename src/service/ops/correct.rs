//! `correct`: give one fact a new value from now on (logged, undoable).
//! `POST /v1/facts/{fact}/correct`.

use std::sync::{Arc, LazyLock};

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::http::{Answer, BODY_ERRORS, HttpReply, HttpRequest, Route, reply, route, typed};
use super::schema::{NON_BLANK_PATTERN, Validator};
use super::{Access, ApiError, Body, Operation, Service, fields};
use crate::service::EditEntry;

pub(crate) const OPERATION: Operation = Operation {
    name: "correct",
    routes: &[Route {
        body: Some(typed::<CorrectRequest>()),
        ..route(
            "post",
            "/v1/facts/{fact}/correct",
            "correct",
            &[reply(200, "the correction's row in the audit log", typed::<EditEntry>())],
            BODY_ERRORS,
            http,
        )
    }],
    tool: None,
};

/// The body of a correction.
#[derive(Debug, Clone)]
pub(crate) struct CorrectRequest {
    /// The fact's value from now on.
    pub(crate) value: String,
}

impl PartialSchema for CorrectRequest {
    fn schema() -> RefOr<Schema> {
        let value = ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("the fact's value from now on"))
            .min_length(Some(1))
            .max_length(Some(crate::names::MAX_MESSAGE_CHARS))
            .pattern(Some(NON_BLANK_PATTERN));
        ObjectBuilder::new().property("value", value).required("value").into()
    }
}

impl ToSchema for CorrectRequest {}

/// The compiled body schema.
pub(crate) static VALIDATOR: LazyLock<Validator> = LazyLock::new(Validator::of::<CorrectRequest>);

impl CorrectRequest {
    /// The body: its field, then the whole body against the published schema.
    pub(crate) fn read(map: Body) -> Result<Self, ApiError> {
        VALIDATOR.read(map, |map| {
            let value = fields::text(map, "value", crate::names::MAX_MESSAGE_CHARS)?
                .ok_or_else(|| ApiError::bad("value", "missing"))?;
            Ok(Self { value })
        })
    }
}

/// Corrects `fact` for `access`: the correction's row in the audit log.
pub(crate) async fn run(
    service: &Service,
    access: &Access,
    fact: i64,
    request: CorrectRequest,
) -> Result<EditEntry, ApiError> {
    access.write()?;
    access.fact(service, fact).await?;
    Ok(service.correct_fact(fact, &request.value, &access.actor()).await?.into())
}

fn http<'a>(service: &'a Arc<Service>, access: &'a Access, request: HttpRequest) -> Answer<'a> {
    Box::pin(async move {
        let fact = request.path.number("fact")?;
        access.write()?;
        let body = CorrectRequest::read(request.body?)?;
        HttpReply::ok(run(service, access, fact, body).await?)
    })
}
