//! mragent: long-term conversational memory for LLM agents.

pub mod agent;
pub mod dataset;
pub mod llm;
pub mod prompts;
pub mod results;
