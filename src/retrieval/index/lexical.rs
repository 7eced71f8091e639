//! Lexical ranking: BM25 over turns and over whole session documents.

use super::ranking::Ranking;
use super::{MemoryIndex, ranked};
use crate::retrieval::units::SessionUnits;

impl MemoryIndex {
    /// Add a session's texts to the BM25 indexes: each turn (with its context when
    /// [`UnitTextOptions::lexical_turn_context`](crate::retrieval::UnitTextOptions) is set) and
    /// the whole session with its LLM summary and keywords.
    pub(super) fn index_lexical(&mut self, units: &SessionUnits) {
        for (position, turn) in units.turns.iter().enumerate() {
            if self.options.units.lexical_turn_context {
                self.bm25_turns.add(&units.turn_embedding_text(position, &self.options.units));
            } else {
                self.bm25_turns.add(&turn.text);
            }
        }
        let mut lexical = units.session_text();
        for extra in units.summary.iter().chain(units.keywords.iter()) {
            lexical.push('\n');
            lexical.push_str(extra);
        }
        self.bm25_sessions.add(&lexical);
    }

    /// BM25 over turns (turn ranking) and over whole sessions (session ranking).
    pub(super) fn bm25(&self, query_text: &str) -> Ranking {
        Ranking {
            sessions: ranked(&self.bm25_sessions.scores(query_text)),
            turns: Some(ranked(&self.bm25_turns.scores(query_text))),
            router_weights: Vec::new(),
        }
    }
}
