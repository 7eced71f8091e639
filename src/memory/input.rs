//! What the LLM build stages hand to the graph store: plain serde records, one per session (or
//! per LongMemEval batch of sessions).
//!
//! Stage 1 (rewrite) produces a [`SessionRewrite`]: self-contained sentences tied to the dia_id
//! they come from, the session's topics, and personal facts. Stage 2 (keywords) produces a
//! [`SessionKeywords`]: cue words per sentence. The stages validate what the model returned
//! (ids, dates, topic references) before writing these records; the graph builder still checks
//! the links it relies on and reports what it had to skip. Dates are calendar days; stage code
//! turns the model's date strings into days with [`crate::memory::parse_event_date`].
//!
//! Id grammar (kept from the reference): dia_id `D<s>:<t>`, sentence `D<s>:<t>-<k>` (the origin
//! dia_id plus a 1-based counter), topic `D<s>:t<k>`, personal fact `D<s>:p<k>`.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

/// Stage-1 output for one session (or one LongMemEval batch of sessions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRewrite {
    /// The session this record covers (`D3`), or a batch label (`D1-D10`); used in messages.
    pub session: String,
    /// The session date as the rewrite model understood it. The graph prefers the dataset's
    /// parsed session date and uses this only when the dataset has none.
    #[serde(default)]
    pub conversation_time: Option<NaiveDate>,
    /// Rewritten sentences in dialogue order.
    pub sentences: Vec<RewrittenSentence>,
    /// The session's topics.
    #[serde(default)]
    pub topics: Vec<TopicInput>,
    /// Facts about the people in the session.
    #[serde(default)]
    pub personal_facts: Vec<PersonalFact>,
}

/// One self-contained sentence rewritten from a turn (pronouns resolved, dates made absolute).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewrittenSentence {
    /// `D3:5-1`: the origin dia_id, `-`, and a counter per origin.
    pub id: String,
    /// The dia_id of the turn the sentence comes from (`D3:5`).
    pub origin: String,
    /// The rewritten sentence (used for keywords and embeddings; the answering model sees the
    /// raw turn).
    pub text: String,
    /// When the event happened (absolute date resolved by the rewrite model), if known.
    #[serde(default)]
    pub date: Option<NaiveDate>,
    /// Short noun phrase (at most two words) naming what the sentence is about; becomes the
    /// label of every Key → Episode edge of this sentence.
    pub tag: String,
    /// Topic ids (`D3:t1`) this sentence belongs to.
    #[serde(default)]
    pub topic_ids: Vec<String>,
}

/// One topic of a session: a short sentence summarising a thread of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicInput {
    /// `D3:t1`.
    pub id: String,
    /// The topic sentence.
    pub text: String,
}

/// One stable fact about a person (preference, role, schedule, background, relation…).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonalFact {
    /// `D3:p1`.
    pub id: String,
    /// The person the fact is about (a speaker or someone they mention).
    pub person: String,
    /// The aspect label (`hobby`, `job`, `family`…); becomes the Person → Fact edge label.
    pub aspect: String,
    /// The fact as a short normalised statement.
    pub fact: String,
    /// Dia_ids the fact was drawn from.
    #[serde(default, alias = "origin")]
    pub origins: Vec<String>,
}

/// Stage-2 output for one session (or batch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionKeywords {
    /// The session or batch label, as in the matching [`SessionRewrite`].
    pub session: String,
    /// Keywords per sentence.
    pub sentences: Vec<SentenceKeywords>,
}

/// The cue words of one rewritten sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SentenceKeywords {
    /// The sentence id (`D3:5-1`).
    pub sentence_id: String,
    /// Keywords as the model wrote them; the graph normalises them.
    pub keywords: Vec<String>,
}
