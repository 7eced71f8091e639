//! Test support for the answer engine: a memory built mechanically from a conversation (no
//! model), and a responder for the scripted endpoint (`llm::scripted`) that plays a plausible
//! answering agent, with fault injection.
//!
//! Used by the integration tests, the `run` benchmark and offline demos; nothing in the
//! pipeline calls it. The mechanical memory stands in for the three LLM build stages: one
//! sentence per turn (dated with its session), one topic per session, one personal fact per
//! turn, keywords = the turn's content words, hashed bag-of-words embeddings (the same vectors
//! the scripted endpoint returns for `/v1/embeddings`). The agent answers every answer-stage
//! prompt by content: question keywords from the question's words, a re-rank that keeps the
//! candidates sharing most words with the question, tag scores, and a loop that calls tools for
//! two rounds (all seven tools get used across questions) and then answers with the event that
//! best overlaps the question.
//!
//! Layout: `memory` (the mechanical memory), `agent` (faults, request routing and the retrieval
//! replies), `loop_reply` (the tool loop's replies), `words` (the text helpers both share).

mod agent;
mod loop_reply;
mod memory;
#[cfg(test)]
mod tests;
mod words;

pub use self::agent::{AgentScript, Fault, is_answer_request, plausible_agent};
pub use self::memory::mechanical_memory;
pub use self::words::cue_words;
