//! PROVISIONAL stage-output types, to be replaced by `crate::memory::input` from the graph
//! branch as soon as it lands (then this file goes away).

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

/// A rewritten, self-contained sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sentence {
    /// `D<s>:<t>-<k>`.
    pub id: String,
    /// `D<s>:<t>`.
    pub origin: String,
    /// Rewritten text.
    pub text: String,
    /// Event date.
    pub date: Option<NaiveDate>,
    /// Short tag.
    pub tag: String,
    /// Global topic ids `D<i>:t<k>`.
    pub topic_ids: Vec<String>,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topic {
    /// `D<i>:t<k>`.
    pub id: String,
    /// Topic sentence.
    pub text: String,
}

/// A personal fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonalFact {
    /// `D<i>:p<k>`.
    pub id: String,
    /// Person.
    pub person: String,
    /// Aspect.
    pub aspect: String,
    /// Fact.
    pub fact: String,
    /// Source dia_ids.
    pub origins: Vec<String>,
}

/// Keywords of one sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentenceKeywords {
    /// Sentence id.
    pub sentence_id: String,
    /// Keywords.
    pub keywords: Vec<String>,
}
