//! The text units of one session at every granularity (MemGAS §3.1), and how their embeddings
//! are assembled.
//!
//! A session contributes one *session* unit, one *turn* unit per dialogue turn, and — when an
//! LLM has written them — one *summary* and one *keyword* unit. Summary and keyword text is
//! plain text handed in by the caller ([`SessionUnits::with_summary`],
//! [`SessionUnits::with_keywords`]); this module never calls a model. Without them retrieval runs
//! on sessions and turns only.
//!
//! MemGAS embeds a whole session as one text, which all-MiniLM-L6-v2 truncates at 256 word
//! pieces (most of a LoCoMo session is lost, memgas.md §10.9). We can instead split the session
//! into consecutive chunks of whole turns and average their unit vectors
//! ([`UnitTextOptions::session_chunk_chars`]).

use serde::{Deserialize, Serialize};

use crate::dataset::{Conversation, Session};

/// A retrieval granularity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// A whole session.
    Session,
    /// One dialogue turn.
    Turn,
    /// An LLM summary of the session.
    Summary,
    /// LLM keywords of the session.
    Keyword,
}

impl std::fmt::Display for Granularity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Granularity {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Session => "session",
            Granularity::Turn => "turn",
            Granularity::Summary => "summary",
            Granularity::Keyword => "keyword",
        }
    }
}

/// How unit texts are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitTextOptions {
    /// Preceding turns of the same session prepended to a turn's embedding text (0: the turn
    /// alone). A reply such as "Yes, last Friday!" only makes sense after the question it answers.
    pub turn_context: usize,
    /// Following turns of the same session appended to a turn's embedding text.
    pub turn_context_after: usize,
    /// Index turns for BM25 with the same context as their embedding text (otherwise the turn
    /// alone).
    pub lexical_turn_context: bool,
    /// Split the session text into chunks of whole turns of at most this many characters and
    /// average their vectors; 0 embeds the session as one (truncated) text, as MemGAS does.
    pub session_chunk_chars: usize,
}

impl Default for UnitTextOptions {
    fn default() -> Self {
        Self {
            turn_context: 2,
            turn_context_after: 0,
            lexical_turn_context: true,
            session_chunk_chars: 1000,
        }
    }
}

/// One turn as a retrieval unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnUnit {
    /// `D<session>:<turn>`.
    pub dia_id: String,
    /// Speaker name.
    pub speaker: String,
    /// The turn as shown to models (`speaker: text`, plus the image caption).
    pub text: String,
}

impl TurnUnit {
    /// The text without a leading `speaker: ` (the speaker is not what the turn says).
    pub fn text_without_speaker(&self) -> &str {
        self.text
            .strip_prefix(self.speaker.as_str())
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(&self.text)
    }
}

/// The units of one session, as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionUnits {
    /// Session id `D<n>`.
    pub session_id: String,
    /// The session's date as the dataset gives it.
    pub date: Option<String>,
    /// Turns in order.
    pub turns: Vec<TurnUnit>,
    /// LLM summary, when available.
    pub summary: Option<String>,
    /// LLM keywords (one string, e.g. `a; b; c`), when available.
    pub keywords: Option<String>,
}

impl SessionUnits {
    /// Units of a dataset session (no summary or keywords).
    pub fn from_session(session: &Session) -> Self {
        Self {
            session_id: session.id(),
            date: session.date_time.clone(),
            turns: session
                .turns
                .iter()
                .map(|turn| TurnUnit {
                    dia_id: turn.dia_id.clone(),
                    speaker: turn.speaker.clone(),
                    text: turn.display(),
                })
                .collect(),
            summary: None,
            keywords: None,
        }
    }

    /// The units of every session of `conversation`, each with the LLM units `extra` gives for
    /// its session id (a summary and a keyword text), if any. The one place the indexes of
    /// `run`, `retrieve` and the snapshot take their units from.
    pub fn of_conversation(
        conversation: &Conversation,
        extra: impl Fn(&str) -> Option<(Option<String>, Option<String>)>,
    ) -> Vec<Self> {
        conversation
            .sessions
            .iter()
            .map(|session| {
                let mut units = Self::from_session(session);
                if let Some((summary, keywords)) = extra(&units.session_id) {
                    (units.summary, units.keywords) = (summary, keywords);
                }
                units
            })
            .collect()
    }

    /// Attach an LLM summary.
    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = Some(summary.into());
        self
    }

    /// Attach LLM keywords.
    pub fn with_keywords(mut self, keywords: impl Into<String>) -> Self {
        self.keywords = Some(keywords.into());
        self
    }

    /// The whole session as one text: turns joined by newlines (memgas.md §3.1).
    pub fn session_text(&self) -> String {
        self.turns.iter().map(|turn| turn.text.as_str()).collect::<Vec<_>>().join("\n")
    }

    /// MemGAS's hybrid text (summary, keywords, session), when both LLM units exist.
    pub fn hybrid_text(&self) -> Option<String> {
        match (&self.summary, &self.keywords) {
            (Some(summary), Some(keywords)) => {
                Some(format!("{summary} {keywords} {}", self.session_text()))
            }
            _ => None,
        }
    }

    /// The texts to embed for this session, in the order [`SessionUnits::assemble`] expects:
    /// session chunks, turns, then summary, keywords and hybrid when present.
    pub fn texts_to_embed(&self, options: &UnitTextOptions) -> Vec<String> {
        self.texts_for(options, &VectorNeeds::ALL)
    }

    /// The texts to embed for the vectors `needs` asks for, in the order
    /// [`SessionUnits::assemble_for`] expects: session chunks, turns, summary, keywords, hybrid
    /// (each only when asked for and present).
    pub fn texts_for(&self, options: &UnitTextOptions, needs: &VectorNeeds) -> Vec<String> {
        let mut texts = if needs.session { self.session_chunks(options) } else { Vec::new() };
        if needs.turns {
            texts.extend(
                (0..self.turns.len()).map(|index| self.turn_embedding_text(index, options)),
            );
        }
        texts.extend(self.summary.iter().filter(|_| needs.summary).cloned());
        texts.extend(self.keywords.iter().filter(|_| needs.keywords).cloned());
        texts.extend(self.hybrid_text().filter(|_| needs.hybrid));
        texts
    }

    /// Build the unit vectors from the embeddings of [`SessionUnits::texts_to_embed`].
    /// Returns `None` when the count does not match.
    pub fn assemble(
        &self,
        options: &UnitTextOptions,
        vectors: Vec<Vec<f32>>,
    ) -> Option<UnitVectors> {
        let parts = self.assemble_for(options, &VectorNeeds::ALL, vectors)?;
        Some(UnitVectors {
            session: parts.session?,
            turns: parts.turns?,
            summary: parts.summary,
            keywords: parts.keywords,
            hybrid: parts.hybrid,
        })
    }

    /// Build the vectors `needs` asks for from the embeddings of [`SessionUnits::texts_for`].
    /// Returns `None` when the count does not match.
    pub fn assemble_for(
        &self,
        options: &UnitTextOptions,
        needs: &VectorNeeds,
        vectors: Vec<Vec<f32>>,
    ) -> Option<SessionVectors> {
        let n_chunks = if needs.session { self.session_chunks(options).len() } else { 0 };
        let n_turns = if needs.turns { self.turns.len() } else { 0 };
        let summary = needs.summary && self.summary.is_some();
        let keywords = needs.keywords && self.keywords.is_some();
        let hybrid = needs.hybrid && self.hybrid_text().is_some();
        let expected =
            n_chunks + n_turns + usize::from(summary) + usize::from(keywords) + usize::from(hybrid);
        if vectors.len() != expected {
            return None;
        }
        let mut rest = vectors.into_iter();
        let chunks: Vec<Vec<f32>> = rest.by_ref().take(n_chunks).collect();
        Some(SessionVectors {
            session: needs.session.then(|| normalised_mean(&chunks)),
            turns: needs.turns.then(|| rest.by_ref().take(n_turns).collect()),
            summary: if summary { rest.next() } else { None },
            keywords: if keywords { rest.next() } else { None },
            hybrid: if hybrid { rest.next() } else { None },
        })
    }

    /// The text embedded for turn `index`: up to `turn_context` preceding turns, the turn, then
    /// up to `turn_context_after` following turns.
    pub fn turn_embedding_text(&self, index: usize, options: &UnitTextOptions) -> String {
        let start = index.saturating_sub(options.turn_context);
        let end = (index + options.turn_context_after).min(self.turns.len() - 1);
        self.turns[start..=end].iter().map(|turn| turn.text.as_str()).collect::<Vec<_>>().join("\n")
    }

    /// The session text in chunks of whole turns (one chunk when chunking is off).
    fn session_chunks(&self, options: &UnitTextOptions) -> Vec<String> {
        if options.session_chunk_chars == 0 || self.turns.is_empty() {
            return vec![self.session_text()];
        }
        let mut chunks = Vec::new();
        let mut current = String::new();
        for turn in &self.turns {
            if !current.is_empty()
                && current.len() + 1 + turn.text.len() > options.session_chunk_chars
            {
                chunks.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push('\n');
            }
            current.push_str(&turn.text);
        }
        chunks.push(current);
        chunks
    }
}

/// Which unit vectors to compute and keep: only what the requested methods read
/// ([`crate::retrieval::index::IndexNeeds`] derives it from the methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorNeeds {
    /// The session vector (mean of its chunks).
    pub session: bool,
    /// One vector per turn.
    pub turns: bool,
    /// The LLM summary, where there is one.
    pub summary: bool,
    /// The LLM keywords, where there are some.
    pub keywords: bool,
    /// The hybrid text, where there is one.
    pub hybrid: bool,
}

impl VectorNeeds {
    /// Every vector.
    pub const ALL: VectorNeeds =
        VectorNeeds { session: true, turns: true, summary: true, keywords: true, hybrid: true };
    /// No vector at all (lexical methods only: nothing is embedded).
    pub const NONE: VectorNeeds = VectorNeeds {
        session: false,
        turns: false,
        summary: false,
        keywords: false,
        hybrid: false,
    };

    /// Whether any vector is needed (and so an embedder and question vectors).
    pub fn any(&self) -> bool {
        self.session || self.turns || self.summary || self.keywords || self.hybrid
    }

    /// Everything either asks for.
    pub fn union(self, other: VectorNeeds) -> VectorNeeds {
        VectorNeeds {
            session: self.session || other.session,
            turns: self.turns || other.turns,
            summary: self.summary || other.summary,
            keywords: self.keywords || other.keywords,
            hybrid: self.hybrid || other.hybrid,
        }
    }

    /// Whether everything `other` asks for is here.
    pub fn covers(&self, other: &VectorNeeds) -> bool {
        self.union(*other) == *self
    }
}

/// The vectors of one session that a [`VectorNeeds`] asked for (the others are `None`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionVectors {
    /// The session (mean of its chunk vectors, renormalised).
    pub session: Option<Vec<f32>>,
    /// One per turn.
    pub turns: Option<Vec<Vec<f32>>>,
    /// The summary.
    pub summary: Option<Vec<f32>>,
    /// The keywords.
    pub keywords: Option<Vec<f32>>,
    /// The hybrid text.
    pub hybrid: Option<Vec<f32>>,
}

impl From<UnitVectors> for SessionVectors {
    fn from(vectors: UnitVectors) -> Self {
        Self {
            session: Some(vectors.session),
            turns: Some(vectors.turns),
            summary: vectors.summary,
            keywords: vectors.keywords,
            hybrid: vectors.hybrid,
        }
    }
}

/// Embeddings of one session's units (unit length when the embedder normalises).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitVectors {
    /// The session (mean of its chunk vectors, renormalised).
    pub session: Vec<f32>,
    /// One per turn.
    pub turns: Vec<Vec<f32>>,
    /// The summary.
    pub summary: Option<Vec<f32>>,
    /// The keywords.
    pub keywords: Option<Vec<f32>>,
    /// The hybrid text (baseline only; not a graph node).
    pub hybrid: Option<Vec<f32>>,
}

/// Mean of vectors scaled to unit length (a zero vector stays zero).
pub fn normalised_mean(vectors: &[Vec<f32>]) -> Vec<f32> {
    let dims = vectors.first().map_or(0, Vec::len);
    let mut mean = vec![0.0f32; dims];
    for vector in vectors {
        for (m, v) in mean.iter_mut().zip(vector) {
            *m += v;
        }
    }
    let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for m in &mut mean {
            *m /= norm;
        }
    }
    mean
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn units(texts: &[&str]) -> SessionUnits {
        SessionUnits {
            session_id: "D1".into(),
            date: None,
            turns: texts
                .iter()
                .enumerate()
                .map(|(i, t)| TurnUnit {
                    dia_id: format!("D1:{}", i + 1),
                    speaker: "A".into(),
                    text: t.to_string(),
                })
                .collect(),
            summary: None,
            keywords: None,
        }
    }

    #[test]
    fn texts_and_assembly_line_up() {
        let session = units(&["aaaa", "bbbb", "cccc"]).with_summary("sum").with_keywords("k1; k2");
        let options = UnitTextOptions {
            turn_context: 1,
            session_chunk_chars: 9,
            ..UnitTextOptions::default()
        };
        let texts = session.texts_to_embed(&options);
        assert_eq!(
            texts,
            vec![
                "aaaa\nbbbb",
                "cccc",
                "aaaa",
                "aaaa\nbbbb",
                "bbbb\ncccc",
                "sum",
                "k1; k2",
                "sum k1; k2 aaaa\nbbbb\ncccc"
            ]
        );
        let vectors: Vec<Vec<f32>> = (0..texts.len()).map(|i| vec![i as f32 + 1.0, 0.0]).collect();
        let assembled = session.assemble(&options, vectors.clone()).unwrap();
        assert_eq!(assembled.session, vec![1.0, 0.0]);
        assert_eq!(assembled.turns.len(), 3);
        assert_eq!(assembled.turns[0], vec![3.0, 0.0]);
        assert_eq!(assembled.summary, Some(vec![6.0, 0.0]));
        assert_eq!(assembled.hybrid, Some(vec![8.0, 0.0]));
        assert!(session.assemble(&options, vectors[..3].to_vec()).is_none());
    }

    #[test]
    fn without_chunking_the_session_is_one_text() {
        let session = units(&["x", "y"]);
        let options = UnitTextOptions {
            turn_context: 0,
            session_chunk_chars: 0,
            ..UnitTextOptions::default()
        };
        assert_eq!(session.texts_to_embed(&options), vec!["x\ny", "x", "y"]);
        assert_eq!(normalised_mean(&[vec![3.0, 0.0], vec![0.0, 4.0]]), vec![0.6, 0.8]);
    }

    #[test]
    fn only_the_needed_texts_are_embedded_and_assembled() {
        let session = units(&["x", "y"]).with_summary("s").with_keywords("k");
        let options = UnitTextOptions::default();
        assert!(session.texts_for(&options, &VectorNeeds::NONE).is_empty());
        assert!(
            session.assemble_for(&options, &VectorNeeds::NONE, Vec::new()).unwrap()
                == SessionVectors::default()
        );
        let turns_only = VectorNeeds { turns: true, ..VectorNeeds::NONE };
        let texts = session.texts_for(&options, &turns_only);
        assert_eq!(texts, vec!["x", "x\ny"]);
        let parts =
            session.assemble_for(&options, &turns_only, vec![vec![1.0], vec![2.0]]).unwrap();
        assert_eq!(parts.turns, Some(vec![vec![1.0], vec![2.0]]));
        assert_eq!((parts.session, parts.summary), (None, None));
        assert!(session.assemble_for(&options, &turns_only, vec![vec![1.0]]).is_none());
        assert!(VectorNeeds::ALL.covers(&turns_only) && !turns_only.covers(&VectorNeeds::ALL));
        assert!(!VectorNeeds::NONE.any());
    }
}
