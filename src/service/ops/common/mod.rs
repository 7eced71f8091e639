//! What every operation is made of: who may do what (`access`), the one error every door
//! answers (`error`), the optional fields the requests share (`fields`), what an HTTP route is
//! and the one rule per path placeholder (`http`), the schemas' pieces and the validator that
//! holds a body to its published schema (`schema`).

pub(crate) mod access;
pub(crate) mod error;
pub(crate) mod fields;
pub(crate) mod http;
pub(crate) mod schema;

#[cfg(test)]
mod tests;
