//! The path parameters of the HTTP routes, as the OpenAPI document declares them (the bodies,
//! their schemas and the replies are the operations', in `service::ops`).

use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterIn};

use crate::service::ops::schema::{id_number, name_parameter, name_schema, path_parameter};

/// Path parameters, each a type for utoipa's `params(…)`.
macro_rules! path_params {
    ($($(#[$doc:meta])* $name:ident => [$($parameter:expr),+];)+) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub(super) struct $name;

            impl IntoParams for $name {
                fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
                    vec![$($parameter),+]
                }
            }
        )+
    };
}

path_params! {
    /// `{id}`: a conversation id.
    ConversationId => [name_parameter("id", "conversation id")];
    /// `{id}` and `{message}`: a conversation id and one of its message ids.
    MessagePath => [
        name_parameter("id", "conversation id"),
        name_parameter("message", "message id (its content hash, as `memory show` lists it)")
    ];
    /// `{user}`.
    UserPath => [path_parameter("user", "user id", name_schema("user id"))];
    /// `{fact}`.
    FactPath => [path_parameter("fact", "fact id, as the facts listing gives it", id_number())];
    /// `{edit}`.
    EditPath => [path_parameter("edit", "edit id, as the audit log gives it", id_number())];
    /// `{job}`.
    JobPath => [path_parameter("job", "job id, as the add that queued it answered", id_number())];
}
