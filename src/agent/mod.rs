//! The answer engine: per-question retrieval, the tool-calling loop and resumable runs.

pub mod question;
pub mod render;
pub mod resume;
pub mod retrieve;
pub mod run;
pub mod tools;
pub mod trace;
