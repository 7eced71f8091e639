//! mragent: long-term conversational memory for LLM agents.

pub mod dataset;
pub mod embedding;
pub mod llm;
pub mod memory;
pub mod results;
pub mod retrieval;
