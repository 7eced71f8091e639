//! What retrieval reads and returns: the knobs, one question's input, how the structured calls
//! are made, the result handed to the loop, and the question-similarity lookup.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::question::PreparedQuestion;
use crate::dataset::DatasetKind;
use crate::ingest::SampleEmbeddings;
use crate::llm::Usage;
use crate::memory::MemoryGraph;
use crate::retrieval::vector::dot;

/// Numeric knobs of retrieval (spec §16).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetrievalSettings {
    /// Coarse cap: candidates kept by embedding similarity before the re-rank (`K1`).
    pub k1: usize,
    /// Fine cap: events kept after the re-rank (`K2`); also the `edges_by_tag` cut.
    pub k2: usize,
    /// Topics shown (`TOPIC_K`).
    pub topic_k: usize,
    /// Keys with more tags than this get their tags scored by the model (`TAG_MAX`).
    pub tag_max: usize,
    /// Tags kept after scoring (`TAG_LIMIT`).
    pub tag_limit: usize,
    /// Scored tags at or above this have their events fetched up front.
    pub tag_fetch_threshold: f64,
    /// A date window with fewer events than this is shown whole (`TIME_EVENT_LIMIT`).
    pub time_event_limit: usize,
    /// Partial keyword matches need at least this many matched question keywords (main route).
    pub min_matched_keys: usize,
    /// Re-asks allowed for each structured retrieval call (each call has its own budget).
    pub max_reasks: u32,
}

impl Default for RetrievalSettings {
    fn default() -> Self {
        Self {
            k1: 80,
            k2: 20,
            topic_k: 8,
            tag_max: 15,
            tag_limit: 10,
            tag_fetch_threshold: 0.7,
            time_event_limit: 50,
            min_matched_keys: 2,
            max_reasks: 2,
        }
    }
}

/// Everything retrieval reads for one question.
#[derive(Debug, Clone, Copy)]
pub struct RetrieveInput<'a> {
    /// The conversation's memory.
    pub graph: &'a MemoryGraph,
    /// Its embeddings.
    pub vectors: &'a SampleEmbeddings,
    /// The question's embedding.
    pub question_vector: &'a [f32],
    /// The prepared question.
    pub question: &'a PreparedQuestion,
    /// Dataset (selects the temporal route).
    pub dataset: DatasetKind,
    /// Knobs.
    pub settings: &'a RetrievalSettings,
    /// How the retrieval calls are made.
    pub call: CallSettings<'a>,
}

/// How the structured model calls of the answer stage are made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallSettings<'a> {
    /// Model id.
    pub model: &'a str,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Provider seed.
    pub seed: Option<i64>,
    /// Re-asks allowed when the reply breaks its schema.
    pub max_reasks: u32,
}

/// What retrieval hands to the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieved {
    /// The user message of the loop (`question`, `key_sentences`, `keys_candidates`, ...).
    pub payload: Value,
    /// Normalised keys already shown (question keywords and key candidates).
    pub seen_keys: BTreeSet<String>,
    /// Tokens of the retrieval calls.
    pub usage: Usage,
}

/// The question's similarity to an event (`f32::MIN` when the event has no vector).
pub(super) fn similarity(input: &RetrieveInput<'_>, event_id: &str) -> f32 {
    input
        .vectors
        .sentences
        .get(event_id)
        .map_or(f32::MIN, |vector| dot(vector, input.question_vector))
}
