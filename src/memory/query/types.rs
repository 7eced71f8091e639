//! The result and error types of the memory queries, serde-serialisable and shown to the model
//! through their `Display` forms.

use std::fmt;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

/// A query that names something the memory does not hold. The message is written for the
/// answering model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// No key normalises like the one asked for.
    #[error("unknown key {0:?}")]
    UnknownKey(String),
    /// The key exists but has no edge with this tag.
    #[error("key {key:?} has no tag {tag:?}; its tags: {}", tags.join(", "))]
    UnknownTag {
        /// The key.
        key: String,
        /// The tag asked for.
        tag: String,
        /// The key's tags.
        tags: Vec<String>,
    },
    /// No episode or turn has this id.
    #[error("unknown event id {0:?}; expected D<session>:<turn> or D<session>:<turn>-<n>")]
    UnknownEvent(String),
    /// The event exists but its conversation date is unknown.
    #[error("no conversation time known for {0:?}")]
    NoConversationTime(String),
    /// No person has this name.
    #[error("unknown person {person:?}; known persons: {}", known.join(", "))]
    UnknownPerson {
        /// The name asked for.
        person: String,
        /// Names of the persons in memory.
        known: Vec<String>,
    },
    /// The person has no facts under this aspect.
    #[error("{person} has no aspect {aspect:?}; aspects: {}", aspects.join(", "))]
    UnknownAspect {
        /// The person.
        person: String,
        /// The aspect asked for.
        aspect: String,
        /// The person's aspects.
        aspects: Vec<String>,
    },
    /// No topic has this id.
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
}

/// An episode as the model sees it: its id and the raw turn text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventHit {
    /// Sentence id (`D3:5-1`).
    pub event_id: String,
    /// Raw turn text.
    pub text: String,
}

impl fmt::Display for EventHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.event_id, self.text)
    }
}

/// A key with all of its tags (in order of first appearance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyTags {
    /// The key (display form; any spelling that normalises alike finds it again).
    pub key: String,
    /// Tags.
    pub tags: Vec<String>,
}

/// When the conversation containing an event took place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationTime {
    /// The id asked about.
    pub event_id: String,
    /// Session date.
    pub date: NaiveDate,
}

impl fmt::Display for ConversationTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Conversation_time:{}:{}", self.event_id, self.date)
    }
}

/// A raw turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RawTurn {
    /// Dia_id.
    pub dia_id: String,
    /// `Speaker: text`.
    pub text: String,
}

impl fmt::Display for RawTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.dia_id, self.text)
    }
}

/// A person and the aspects facts are stored under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PersonAspects {
    /// Name.
    pub person: String,
    /// Aspects in order of first appearance.
    pub aspects: Vec<String>,
}

/// One fact about a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FactHit {
    /// Fact id (`D3:p1`).
    pub fact_id: String,
    /// Source dia_ids.
    pub origins: Vec<String>,
    /// The fact.
    pub text: String,
    /// When a later fact replaced it, if one did (an earlier value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earlier_until: Option<String>,
    /// Since when an earlier value held, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earlier_since: Option<String>,
}

impl fmt::Display for FactHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.origins.join(","), self.text)?;
        match (&self.earlier_since, &self.earlier_until) {
            (Some(since), Some(until)) => {
                write!(f, " (earlier value, held from {since}, replaced on {until})")?
            }
            (None, Some(until)) => write!(f, " (earlier value, replaced on {until})")?,
            _ => {}
        }
        Ok(())
    }
}

/// An episode on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatedEvent {
    /// Event date.
    pub date: NaiveDate,
    /// Sentence id.
    pub event_id: String,
    /// Raw turn text.
    pub text: String,
}

/// A question keyword with alternative phrasings (the answer stage extracts these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryKeyword {
    /// The keyword.
    pub id: String,
    /// Other phrasings that count as the same keyword.
    #[serde(default)]
    pub alternatives: Vec<String>,
}

/// The graph keys one question keyword matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeywordKeys {
    /// The question keyword (its `id`).
    pub keyword: String,
    /// Matched graph keys, alphabetical.
    pub keys: Vec<String>,
}

/// An episode reached by some of the question keywords.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventMatch {
    /// Sentence id.
    pub event_id: String,
    /// Origin dia_id.
    pub origin: String,
    /// Raw turn text.
    pub text: String,
    /// Question keywords (ids) that reach it, in question order.
    pub matched_keywords: Vec<String>,
    /// Graph keys through which it was reached, alphabetical.
    pub matched_keys: Vec<String>,
    /// Number of usable question keywords.
    pub total_keywords: usize,
    /// `matched_keywords.len() / total_keywords`.
    pub coverage: f64,
}

/// Result of [`match_keywords`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeywordMatches {
    /// Per question keyword, the keys it matched (question order).
    pub keys: Vec<KeywordKeys>,
    /// Episodes reached by every keyword, in natural id order.
    pub full: Vec<EventMatch>,
    /// Episodes reached by some keywords, by coverage (descending) then natural id order.
    pub partial: Vec<EventMatch>,
}
