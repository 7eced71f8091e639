//! Who a question is about: LoCoMo-style questions name a participant ("What did Caroline
//! research?"), and the evidence is that participant's own turns in most cases (about 96 % of
//! the evidence turns of LoCoMo's multi-hop, temporal, open-domain and single-hop questions that
//! name one participant). Fusion can add a flat bonus to the named participant's turns
//! ([`FusionOptions::speaker`](super::FusionOptions::speaker)). Pure word matching: a speaker is
//! named when the first word of their name is a word of the question (case-insensitive, so
//! "Caroline's" names Caroline).

use std::collections::BTreeSet;

use super::MemoryIndex;

/// Lowercase alphanumeric words of `text`.
fn words(text: &str) -> BTreeSet<String> {
    crate::text::words(text).collect()
}

/// The first word of a speaker's name, lowercase (`None` for an empty name).
fn first_name(speaker: &str) -> Option<String> {
    crate::text::words(speaker).next()
}

impl MemoryIndex {
    /// Per turn: 1 when its speaker is named in `query_text`, else 0. All zeros when the
    /// question names every speaker of the memory or none of them (nothing to tell apart).
    pub(super) fn named_speaker_turns(&self, query_text: &str) -> Vec<f64> {
        let query = words(query_text);
        let named: Vec<f64> = self
            .sessions
            .iter()
            .flat_map(|session| session.units.turns.iter())
            .map(|turn| {
                let hit = first_name(&turn.speaker).is_some_and(|name| query.contains(&name));
                if hit { 1.0 } else { 0.0 }
            })
            .collect();
        let hits = named.iter().filter(|&&v| v > 0.0).count();
        if hits == 0 || hits == named.len() {
            return vec![0.0; named.len()];
        }
        named
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::retrieval::index::{FusionOptions, IndexOptions, Method, QueryWords};
    use crate::retrieval::units::{SessionUnits, TurnUnit, UnitVectors};

    #[test]
    fn names_match_whole_words_case_insensitively() {
        assert_eq!(first_name("Caroline"), Some("caroline".to_string()));
        assert_eq!(first_name("Mary Ann"), Some("mary".to_string()));
        assert_eq!(first_name(""), None);
        let w = words("What did Caroline's friend Jon do?");
        assert!(w.contains("caroline") && w.contains("jon"));
        assert!(!w.contains("john"));
    }

    /// Two sessions with one turn each, equal text and vector, spoken by Mel (D1) and Caro (D2).
    fn twin_index(fusion: FusionOptions) -> MemoryIndex {
        let mut index = MemoryIndex::new(IndexOptions { fusion, ..IndexOptions::default() });
        for (n, speaker) in [(1, "Mel"), (2, "Caro")] {
            let units = SessionUnits {
                session_id: format!("D{n}"),
                date: None,
                turns: vec![TurnUnit {
                    dia_id: format!("D{n}:1"),
                    speaker: speaker.into(),
                    text: "I went camping by the lake".into(),
                }],
                summary: None,
                keywords: None,
            };
            let vector = vec![1.0, 0.0, 0.0];
            let vectors = UnitVectors {
                session: vector.clone(),
                turns: vec![vector],
                summary: None,
                keywords: None,
                hybrid: None,
            };
            index.add_session(units, vectors).unwrap();
        }
        index.set_test_word_vectors();
        index
    }

    fn top_turn(index: &MemoryIndex, question: &str) -> String {
        let ranking = index.rank(Method::Fusion, question, &[1.0, 0.0, 0.0]).unwrap();
        index.turn_id(ranking.turns.unwrap()[0].index).to_string()
    }

    #[test]
    fn named_speaker_flags_only_their_turns() {
        let index = twin_index(FusionOptions::default());
        assert_eq!(index.named_speaker_turns("Where did Caro go camping?"), [0.0, 1.0]);
        // Both named, or neither: nothing to tell apart.
        assert_eq!(index.named_speaker_turns("Did Mel and Caro camp?"), [0.0, 0.0]);
        assert_eq!(index.named_speaker_turns("Who went camping?"), [0.0, 0.0]);
    }

    #[test]
    fn the_speaker_bonus_lifts_the_named_speakers_turn() {
        let question = "Where did Caro go camping?";
        // Without the bonus the tie goes to the earlier turn (Mel's).
        let plain = twin_index(FusionOptions { speaker: 0.0, ..FusionOptions::default() });
        assert_eq!(top_turn(&plain, question), "D1:1");
        let bonus = twin_index(FusionOptions { speaker: 0.25, ..FusionOptions::default() });
        assert_eq!(top_turn(&bonus, question), "D2:1");
        assert_eq!(top_turn(&bonus, "Where did Mel go camping?"), "D1:1");
        // Sessions keep their order: the bonus ranks turns only.
        let sessions = |index: &MemoryIndex| {
            let ranking = index.rank(Method::Fusion, question, &[1.0, 0.0, 0.0]).unwrap();
            ranking.sessions.iter().map(|hit| hit.index).collect::<Vec<_>>()
        };
        assert_eq!(sessions(&plain), sessions(&bonus));
    }

    #[test]
    fn cached_channels_rank_like_a_fresh_query() {
        let index = twin_index(FusionOptions::default());
        let query = [0.6, 0.8, 0.0];
        let question = "Where did Caro go camping by the lake?";
        let channels = index
            .query_channels(&FusionOptions::default(), question, &query, &QueryWords::new())
            .unwrap();
        for speaker in [0.0, 0.25] {
            let weights = FusionOptions { speaker, prf_weight: 0.5, ..FusionOptions::default() };
            assert_eq!(
                index.fusion_cached(&weights, question, &query, &channels),
                index.fusion_with(&weights, question, &query, &QueryWords::new()).unwrap()
            );
        }
    }
}
