//! What a build reports and returns: [`Stage`], [`FailedUnit`], [`SampleSummary`],
//! [`BuildSummary`] and [`BuiltMemory`].

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::dataset::Conversation;
use crate::ingest::embed::SampleEmbeddings;
use crate::ingest::progress::human_count;
use crate::llm::Usage;
use crate::memory::MemoryGraph;
use crate::memory::input::{SessionKeywords, SessionRewrite};

/// A build stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Stage 1: dialogue → sentences, topics, personal facts.
    Rewrite,
    /// Stage 2: sentences → keywords.
    Keywords,
    /// Stage 3: sentences, topics and questions → vectors.
    Embeddings,
    /// MemGAS granules: session → LLM summary and keywords ([`build_granules`]; not part of
    /// the memory build).
    Granules,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Rewrite => "rewrite",
            Stage::Keywords => "keywords",
            Stage::Embeddings => "embeddings",
            Stage::Granules => "granules",
        })
    }
}

/// A unit that has no valid output for some stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedUnit {
    /// Sample id.
    pub sample_id: String,
    /// Unit key (`session_3`, `session_1-session_10`, or `questions` for question embeddings).
    pub unit: String,
    /// Session numbers covered (empty for questions).
    pub sessions: Vec<u32>,
    /// The stage that failed.
    pub stage: Stage,
    /// Why.
    pub error: String,
    /// Model calls made for it in this build.
    pub attempts: u32,
}

/// Everything the stages produced for one conversation, in dialogue order: what the graph
/// store is built from. Only units whose rewrite is valid contribute; keywords only where the
/// keyword stage finished for exactly that rewrite.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageOutputs {
    /// One record per unit with a valid rewrite.
    pub rewrites: Vec<SessionRewrite>,
    /// One record per unit whose keywords match its current rewrite.
    pub keywords: Vec<SessionKeywords>,
}

/// What a build made of one conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SampleSummary {
    /// Sample id.
    pub sample_id: String,
    /// Sessions with turns.
    pub sessions: usize,
    /// The dataset fields of sessions without turns, left out of the memory
    /// ([`Conversation::empty_sessions`]).
    pub empty_sessions: Vec<String>,
    /// Of those, sessions all of whose stages came from the caches.
    pub sessions_reused: usize,
    /// Episode events (rewritten sentences).
    pub events: usize,
    /// Distinct keys (keywords and speakers).
    pub keys: usize,
    /// Topics.
    pub topics: usize,
    /// Distinct persons with personal facts.
    pub persons: usize,
    /// Distinct event dates.
    pub dates: usize,
    /// Units without valid output for some stage.
    pub failed: Vec<FailedUnit>,
    /// Keyword answers' sentence ids that matched no sentence (dropped with a warning).
    pub dropped_keyword_ids: usize,
    /// What had to be repaired in the model's answers (salvaged, re-asked, filled in).
    pub repairs: RepairCounts,
    /// Tokens spent on this conversation in this build (chat and embeddings).
    pub usage: Usage,
    /// Model calls made for this conversation in this build (chat, including re-asks).
    pub chat_calls: u32,
}

/// What the build repaired in the model's answers, from the stage records (see
/// [`Repair`](crate::ingest::Repair)). Every turn and sentence is in memory either way; these
/// say how much of it the model did not give at the first try.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RepairCounts {
    /// Turns of units whose first rewrite reply was incomplete that a reply did cover (kept
    /// from the partial reply or recovered by a focused re-ask).
    pub salvaged_turns: usize,
    /// Turns no rewrite reply covered: entered verbatim (the turn's own text, session date).
    pub verbatim_turns: usize,
    /// Units that needed at least one focused re-ask (rewrite or keywords).
    pub reasked_units: usize,
    /// Sentences of incomplete keyword replies that a reply did cover.
    pub salvaged_keyword_sentences: usize,
    /// Sentences no keyword reply covered: given deterministic keywords (no model).
    pub deterministic_keyword_sentences: usize,
}

impl std::ops::AddAssign for RepairCounts {
    fn add_assign(&mut self, other: Self) {
        self.salvaged_turns += other.salvaged_turns;
        self.verbatim_turns += other.verbatim_turns;
        self.reasked_units += other.reasked_units;
        self.salvaged_keyword_sentences += other.salvaged_keyword_sentences;
        self.deterministic_keyword_sentences += other.deterministic_keyword_sentences;
    }
}

impl fmt::Display for RepairCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} salvaged turns, {} verbatim turns, {} re-asked units, {} salvaged keyword sentences, {} deterministic-keyword sentences",
            self.salvaged_turns,
            self.verbatim_turns,
            self.reasked_units,
            self.salvaged_keyword_sentences,
            self.deterministic_keyword_sentences
        )
    }
}

/// What a unit-by-unit run did, for the command's report: [`BuildSummary`] for a build,
/// [`GranuleSummary`](crate::ingest::GranuleSummary) for the MemGAS granules.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitRunSummary<S> {
    /// Per conversation, in input order.
    pub samples: Vec<S>,
    /// Notices about caches that were discarded (a changed prompt or model), one per file.
    pub notices: Vec<String>,
    /// Tokens spent in this run.
    pub usage: Usage,
    /// Wall time.
    pub elapsed: Duration,
}

/// What a build did, for the command's report.
pub type BuildSummary = UnitRunSummary<SampleSummary>;

/// A conversation's part of a [`UnitRunSummary`]: its failed units.
pub trait SampleFailures {
    /// Units of this conversation without valid output.
    fn failures(&self) -> &[FailedUnit];
}

impl SampleFailures for SampleSummary {
    fn failures(&self) -> &[FailedUnit] {
        &self.failed
    }
}

impl<S: SampleFailures> UnitRunSummary<S> {
    /// Every failed unit.
    pub fn failed(&self) -> impl Iterator<Item = &FailedUnit> {
        self.samples.iter().flat_map(|sample| sample.failures().iter())
    }

    /// Whether every unit of every conversation has valid output for every stage.
    pub fn is_complete(&self) -> bool {
        self.failed().next().is_none()
    }

    /// The `failed:` and `note:` lines that end the report.
    pub(super) fn write_failures_and_notices(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for unit in self.failed() {
            writeln!(
                f,
                "failed: {} {} ({}): {}",
                unit.sample_id, unit.unit, unit.stage, unit.error
            )?;
        }
        for notice in &self.notices {
            writeln!(f, "note: {notice}")?;
        }
        Ok(())
    }
}

impl BuildSummary {
    /// Sessions without turns, over all conversations: (sample id, dataset field).
    pub fn empty_sessions(&self) -> impl Iterator<Item = (&str, &str)> {
        self.samples.iter().flat_map(|sample| {
            sample.empty_sessions.iter().map(|field| (sample.sample_id.as_str(), field.as_str()))
        })
    }

    /// The repair counts of all conversations.
    pub fn repairs(&self) -> RepairCounts {
        let mut total = RepairCounts::default();
        for sample in &self.samples {
            total += sample.repairs;
        }
        total
    }
}

impl fmt::Display for BuildSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sessions: usize = self.samples.iter().map(|sample| sample.sessions).sum();
        let reused: usize = self.samples.iter().map(|sample| sample.sessions_reused).sum();
        let failed = self.failed().count();
        let empty = self.empty_sessions().count();
        writeln!(
            f,
            "built {} conversations, {sessions} sessions ({reused} from cache), {empty} empty sessions skipped, {failed} failed units, {} tokens, {:.1}s",
            self.samples.len(),
            human_count(self.usage.total()),
            self.elapsed.as_secs_f64()
        )?;
        writeln!(
            f,
            "tokens: {} prompt + {} completion (chat and embeddings, failed calls included)",
            self.usage.prompt_tokens, self.usage.completion_tokens
        )?;
        writeln!(f, "repaired: {}", self.repairs())?;
        writeln!(
            f,
            "{:<24} {:>8} {:>7} {:>6} {:>6} {:>7} {:>5} {:>6} {:>8} {:>8} {:>7} {:>8}",
            "sample",
            "sessions",
            "events",
            "keys",
            "topics",
            "persons",
            "dates",
            "failed",
            "salvaged",
            "verbatim",
            "reasked",
            "det-keys"
        )?;
        for sample in &self.samples {
            let repairs = &sample.repairs;
            writeln!(
                f,
                "{:<24} {:>8} {:>7} {:>6} {:>6} {:>7} {:>5} {:>6} {:>8} {:>8} {:>7} {:>8}",
                sample.sample_id,
                sample.sessions,
                sample.events,
                sample.keys,
                sample.topics,
                sample.persons,
                sample.dates,
                sample.failed.len(),
                repairs.salvaged_turns,
                repairs.verbatim_turns,
                repairs.reasked_units,
                repairs.deterministic_keyword_sentences
            )?;
        }
        for (sample, field) in self.empty_sessions() {
            writeln!(f, "skipped: {sample} {field}: no turns, so nothing to remember")?;
        }
        self.write_failures_and_notices(f)
    }
}

/// One conversation's memory, as built or read back from the caches.
#[derive(Debug, Clone)]
pub struct BuiltMemory {
    /// The memory graph built from the stage outputs.
    pub graph: MemoryGraph,
    /// Stage outputs.
    pub outputs: StageOutputs,
    /// Vectors of sentences, topics and questions.
    pub embeddings: SampleEmbeddings,
    /// Counts and failures.
    pub summary: SampleSummary,
}

/// The summary of a conversation's build: counts from its memory graph.
pub(super) fn summarise(
    conversation: &Conversation,
    graph: &MemoryGraph,
    failed: Vec<FailedUnit>,
    sessions_reused: usize,
    usage: Usage,
    chat_calls: u32,
) -> SampleSummary {
    let stats = graph.stats();
    SampleSummary {
        sample_id: conversation.sample_id.clone(),
        sessions: conversation.sessions.iter().filter(|session| !session.turns.is_empty()).count(),
        empty_sessions: conversation.empty_sessions.clone(),
        sessions_reused,
        events: stats.episodes,
        keys: stats.keys,
        topics: stats.topics,
        persons: stats.persons,
        dates: stats.dates,
        failed,
        dropped_keyword_ids: 0,
        repairs: RepairCounts::default(),
        usage,
        chat_calls,
    }
}
