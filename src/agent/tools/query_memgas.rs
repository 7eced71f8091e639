//! `query_memgas`: MemGAS multi-granularity retrieval over the whole conversation, offered when
//! the conversation has a MemGAS index. [`query_memgas`] is the one MemGAS query: the tool and
//! `memory search` (`service::query`) both call it.

use serde::Deserialize;
use serde_json::{Value, json};

use super::args::{ArgSpec, ArgType, clean, typed};
use super::{Applied, Tool, ToolContext, ToolError};
use crate::retrieval::{IndexError, MemgasHits, MemoryIndex, QueryWords};
use crate::snapshot::QueryEmbedder;

/// The tool's name.
pub(super) const NAME: &str = "query_memgas";

/// Default `k` of `query_memgas`.
pub const MEMGAS_DEFAULT_K: usize = 5;
/// Largest `k` of `query_memgas`.
pub const MEMGAS_MAX_K: usize = 10;

/// Its arguments, as offered to the model (`k` between 1 and [`MEMGAS_MAX_K`]).
pub(super) const ARGUMENTS: &[ArgSpec] =
    &[("query", ArgType::String, true), ("k", ArgType::Integer, false)];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    query: String,
    #[serde(default)]
    k: Option<usize>,
}

/// The typed call; `k` defaults to [`MEMGAS_DEFAULT_K`].
pub(super) fn parse(value: Value) -> Result<Tool, ToolError> {
    let args: Args = typed(NAME, value)?;
    let k = args.k.unwrap_or(MEMGAS_DEFAULT_K);
    if !(1..=MEMGAS_MAX_K).contains(&k) {
        return Err(ToolError::InvalidArguments {
            tool: NAME.to_string(),
            message: format!("`k` must be between 1 and {MEMGAS_MAX_K}, got {k}"),
        });
    }
    Ok(Tool::QueryMemgas { query: clean(NAME, "query", args.query)?, k })
}

/// [`Applied::Memgas`] for the driver (which calls [`call`]), when the conversation has an
/// index.
pub(super) fn apply(
    context: &ToolContext<'_>,
    query: &str,
    k: usize,
) -> Result<Applied, ToolError> {
    if context.memgas.is_none() {
        return Err(ToolError::NotFound(format!(
            "{NAME} is not available for this conversation (it has no MemGAS index)"
        )));
    }
    Ok(Applied::Memgas { query: query.to_string(), k })
}

/// Why [`query_memgas`] found nothing.
#[derive(Debug, thiserror::Error)]
pub enum MemgasQueryError {
    /// Embedding the query (or its words) failed.
    #[error("{0}")]
    Embed(crate::llm::Error),
    /// The index could not rank the query.
    #[error("{0}")]
    Retrieve(IndexError),
}

/// The one MemGAS query: the top `k` sessions and turns of `index` for `query`, ranked by the
/// index's query method. The query and the words the index has no vectors for are embedded by
/// `embedder` (the index's own) in one request.
pub async fn query_memgas(
    index: &MemoryIndex,
    embedder: &dyn QueryEmbedder,
    query: &str,
    k: usize,
) -> Result<MemgasHits, MemgasQueryError> {
    let missing = index.query_words_missing(query);
    let (vector, words) =
        embedder.embed_query_and_words(query, &missing).await.map_err(MemgasQueryError::Embed)?;
    let words: QueryWords = missing.into_iter().zip(words).collect();
    rank(index, query, &vector, &words, k)
}

/// One index's top `k` for `query`, embedded as `vector`, with the vectors of the query words
/// it lacks.
fn rank(
    index: &MemoryIndex,
    query: &str,
    vector: &[f32],
    words: &QueryWords,
    k: usize,
) -> Result<MemgasHits, MemgasQueryError> {
    let method = index.options().query_method;
    index.query_with(method, query, vector, words, k).map_err(MemgasQueryError::Retrieve)
}

/// [`query_memgas`] over several indices sharing one embedder (the conversations of one user),
/// each with its own `k`: the query and the union of the words they lack are embedded in one
/// request, then each index ranks with the words it lacks. The hits in `indices`' order.
pub async fn query_memgas_each(
    indices: &[(&MemoryIndex, usize)],
    embedder: &dyn QueryEmbedder,
    query: &str,
) -> Result<Vec<MemgasHits>, MemgasQueryError> {
    let lacking: Vec<Vec<String>> =
        indices.iter().map(|(index, _)| index.query_words_missing(query)).collect();
    let mut missing: Vec<String> = Vec::new();
    for word in lacking.iter().flatten() {
        if !missing.contains(word) {
            missing.push(word.clone());
        }
    }
    let (vector, words) =
        embedder.embed_query_and_words(query, &missing).await.map_err(MemgasQueryError::Embed)?;
    let words: QueryWords = missing.into_iter().zip(words).collect();
    indices
        .iter()
        .zip(&lacking)
        .map(|((index, k), lacks)| {
            let own: QueryWords = lacks
                .iter()
                .filter_map(|word| Some((word.clone(), words.get(word)?.clone())))
                .collect();
            rank(index, query, &vector, &own, *k)
        })
        .collect()
}

/// The tool message of an [`Applied::Memgas`] call: the index loaded (on the first call),
/// then [`query_memgas`]; a failure is an error the model reads.
pub(crate) async fn call(context: &ToolContext<'_>, query: &str, k: usize) -> String {
    let Some(memgas) = context.memgas else {
        return ToolError::NotFound(format!("{NAME} is not available for this conversation"))
            .to_tool_result();
    };
    let loaded = match memgas.get().await {
        Ok(loaded) => loaded,
        Err(error) => {
            return ToolError::NotFound(format!("MemGAS is not available: {error}"))
                .to_tool_result();
        }
    };
    match query_memgas(&loaded.index, loaded.embedder.as_ref(), query, k).await {
        Ok(hits) => memgas_result(&hits).to_string(),
        Err(MemgasQueryError::Embed(error)) => {
            ToolError::NotFound(format!("embedding the query failed: {error}")).to_tool_result()
        }
        Err(MemgasQueryError::Retrieve(error)) => {
            ToolError::NotFound(format!("MemGAS retrieval failed: {error}")).to_tool_result()
        }
    }
}

/// The `query_memgas` result: the top sessions (id, date) and turns (`<dia_id>:<text>`, with
/// the session date), best first.
fn memgas_result(hits: &MemgasHits) -> Value {
    let sessions: Vec<Value> = hits
        .sessions
        .iter()
        .map(|hit| json!({ "session": hit.session_id, "date": hit.date }))
        .collect();
    let turns: Vec<String> = hits
        .turns
        .iter()
        .map(|hit| match &hit.date {
            Some(date) => format!("{}:{} (session date: {date})", hit.dia_id, hit.text),
            None => format!("{}:{}", hit.dia_id, hit.text),
        })
        .collect();
    json!({ "sessions": sessions, "turns": turns })
}
