//! A snapshot from the store of own conversations: the memory graph and stage-3 vectors made
//! from the stored outputs of the built sessions, with the MemGAS index built from the same
//! store (the service keeps it between queries and shares it, not a copy).

use std::sync::Arc;

use indexmap::IndexMap;

use super::{LoadedMemgas, MemgasMemory, Snapshot};
use crate::ingest::SampleEmbeddings;
use crate::llm::Embedder;
use crate::memory::input::PersonalFact;
use crate::retrieval::MemoryIndex;
use crate::store::{StoredConversation, StoredFact, StoredOutputs};

/// Vectors by id, in order.
type IdVectors = Vec<(String, Vec<f32>)>;

impl Snapshot {
    /// `stored` ready to answer, with `index` (its MemGAS index) queried through `embedder`
    /// (the conversation's embedder). Sessions without outputs are left out and not counted as
    /// missing: unlike `run`, which leaves a question pending while a session is missing, `ask`
    /// answers from the sessions that are built and names the missing ones in its report. The
    /// snapshot holds no questions (`ask` brings its own). `Err` says why the graph could not
    /// be built.
    pub fn from_store<E: Embedder + 'static>(
        stored: &StoredConversation,
        index: Arc<MemoryIndex>,
        embedder: E,
    ) -> Result<Self, String> {
        let built: Vec<&StoredOutputs> =
            stored.sessions.iter().filter_map(|session| session.outputs.as_ref()).collect();
        // The facts are the store's rows (corrections applied), not the rewrite's own list.
        let rewrites: Vec<_> = stored
            .sessions
            .iter()
            .filter_map(|session| {
                let mut rewrite = session.outputs.as_ref()?.rewrite.clone();
                rewrite.personal_facts = session.facts.iter().map(personal_fact).collect();
                Some(rewrite)
            })
            .collect();
        let keywords: Vec<_> =
            built.iter().map(|outputs| outputs.keywords.keywords.clone()).collect();
        let vectors = |pick: fn(&StoredOutputs) -> &IdVectors| {
            built
                .iter()
                .flat_map(|outputs| pick(outputs).iter().cloned())
                .collect::<IndexMap<_, _>>()
        };
        let sentences = vectors(|outputs| &outputs.sentence_vectors);
        let embeddings = SampleEmbeddings {
            embedder: embedder.name().to_string(),
            dims: sentences.values().next().map_or(0, Vec::len),
            sentences,
            topics: vectors(|outputs| &outputs.topic_vectors),
            questions: IndexMap::new(),
        };
        let mut snapshot =
            Self::from_stage_outputs(stored.to_conversation(), &rewrites, &keywords, embeddings)
                .map_err(|error| format!("building the memory graph: {error}"))?;
        let facts: Vec<_> = stored.sessions.iter().flat_map(|session| &session.facts).collect();
        let value_of = |id: i64| {
            facts.iter().find(|fact| fact.id == id).map(|fact| fact.value.trim().to_lowercase())
        };
        for fact in &facts {
            // A fact closed by a later one saying the same is a restatement, not an earlier
            // value: the model is not told it was replaced.
            let restated = fact
                .superseded_by
                .is_some_and(|next| value_of(next) == Some(fact.value.trim().to_lowercase()));
            if let (Some(until), false) = (&fact.valid_to, restated) {
                let day = |time: &String| time.chars().take(10).collect::<String>();
                snapshot.graph.mark_earlier(
                    &fact.key,
                    fact.valid_from.as_ref().map(day),
                    day(until),
                );
            }
        }
        let loaded = LoadedMemgas { index, embedder: Arc::new(embedder) };
        snapshot.memgas = Some(MemgasMemory::ready(loaded));
        Ok(snapshot)
    }
}

/// A stored fact as the memory graph takes it.
fn personal_fact(fact: &StoredFact) -> PersonalFact {
    PersonalFact {
        id: fact.key.clone(),
        person: fact.person.clone(),
        aspect: fact.aspect.clone(),
        fact: fact.value.clone(),
        origins: fact.origins.clone(),
    }
}
