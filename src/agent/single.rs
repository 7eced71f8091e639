//! The single path of `--answer single|adaptive`: one retrieval pass and one model call.
//!
//! The gate ([`gate`]) ranks the question with the conversation's MemGAS index (fusion, the
//! ranking `query_memgas` uses) and computes a confidence from the rankings alone
//! ([`crate::retrieval::gate`]), before any model call. `single` always takes the single path;
//! `adaptive` takes it when the confidence reaches the threshold and runs the tool loop below
//! it. The single path shows the model the top turns ([`crate::retrieval::gate::SINGLE_CONTEXT`]:
//! the loop's whole reach, wider than the head the gate judges), the dated sentences written from them,
//! the personal facts drawn from them and the dates of their sessions ([`context`]), and reads
//! one answer with the loop's final-round contract (re-asked like the loop's last round). Under
//! `adaptive`, an answer that says it found nothing (`No information available`) or cannot be
//! read starts the loop (the question's path is then `escalated`). A conversation without a
//! MemGAS index always takes the loop, and the trace says why. Every decision is a `gate`
//! retrieval record in the trace.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::agent::mode::{AnswerGate, AnswerMode};
use crate::agent::question::PreparedQuestion;
use crate::agent::rules::RuleSet;
use crate::agent::run::{AnswerOutcome, AnswerRun, RunLimits, RunSetup};
use crate::agent::settings::{AnswerSettings, RunShared};
use crate::agent::tool_loop::{self, QuestionTools};
use crate::agent::tools::ToolState;
use crate::agent::trace::{TraceEvent, TraceWriter};
use crate::dataset::DatasetKind;
use crate::llm::{ChatModel, Embedder, Usage};
use crate::memory::MemoryGraph;
use crate::prompts;
use crate::retrieval::TurnHit;
use crate::retrieval::gate::{ContextSize, GATE_HEAD, assess, context_turns};
use crate::snapshot::Snapshot;

/// The answer `adaptive` reads as "the single pass found nothing".
pub const NOTHING_FOUND: &str = "No information available";

/// The gate's decision.
pub(super) enum Gate {
    /// Run the loop.
    Loop,
    /// Answer from these turns, best first.
    Single(Vec<TurnHit>),
}

/// Decides the question's path (see the module docs), recording a `gate` trace record.
pub(super) async fn gate(
    settings: &AnswerSettings,
    sample: &Snapshot,
    question: &str,
    trace: &mut TraceWriter,
) -> Gate {
    let gate = settings.answer;
    let mut detail =
        json!({ "mode": gate.mode.as_str(), "k": gate.context.k, "window": gate.context.window });
    if gate.mode == AnswerMode::Adaptive {
        detail["threshold"] = json!(gate.threshold);
    }
    let decided = decide(gate, sample, question, &mut detail).await;
    detail["path"] = json!(match decided {
        Gate::Loop => "loop",
        Gate::Single(_) => "single",
    });
    trace.record(TraceEvent::Retrieval { step: "gate".into(), detail });
    decided
}

async fn decide(gate: AnswerGate, sample: &Snapshot, question: &str, detail: &mut Value) -> Gate {
    let Some(memgas) = &sample.memgas else {
        detail["reason"] = json!("the conversation has no MemGAS index");
        return Gate::Loop;
    };
    let loaded = match memgas.get().await {
        Ok(loaded) => loaded,
        Err(error) => {
            detail["reason"] = json!(format!("the MemGAS index is not available: {error}"));
            return Gate::Loop;
        }
    };
    let index = &loaded.index;
    let missing = index.query_words_missing(question);
    let (vector, words) = match loaded.embedder.embed_query_and_words(question, &missing).await {
        Ok(embedded) => embedded,
        Err(error) => {
            detail["reason"] = json!(format!("embedding the question failed: {error}"));
            return Gate::Loop;
        }
    };
    let words = missing.into_iter().zip(words).collect();
    let assessed = match assess(index, question, &vector, &words, GATE_HEAD.k) {
        Ok(assessed) => assessed,
        Err(error) => {
            detail["reason"] = json!(format!("ranking failed: {error}"));
            return Gate::Loop;
        }
    };
    let confidence = assessed.confidence();
    detail["confidence"] = json!(round4(confidence));
    detail["coverage"] = json!(round4(assessed.signals.coverage));
    detail["margin"] = json!(round4(assessed.signals.margin));
    detail["agreement"] = json!(round4(assessed.signals.agreement));
    if gate.mode == AnswerMode::Adaptive && confidence < gate.threshold {
        detail["reason"] = json!("the confidence is below the threshold");
        return Gate::Loop;
    }
    let ContextSize { k, window } = gate.context;
    let turns: Vec<TurnHit> = context_turns(index, &assessed.turns, k, window)
        .into_iter()
        .map(|hit| index.turn_hit(hit))
        .collect();
    if turns.is_empty() {
        detail["reason"] = json!("the memory has no turns");
        return Gate::Loop;
    }
    Gate::Single(turns)
}

fn round4(value: f64) -> f64 {
    (value * 10_000.0).round() / 10_000.0
}

/// Answers from `turns` in one model call (re-asked like the loop's final round).
pub(super) async fn answer<M: ChatModel, E: Embedder>(
    shared: &RunShared<'_, M, E>,
    sample: &Snapshot,
    prepared: &PreparedQuestion,
    question_vector: &[f32],
    turns: &[TurnHit],
    trace: &mut TraceWriter,
    usage: &mut Usage,
) -> AnswerOutcome {
    let settings = shared.settings;
    let payload = context(&sample.graph, prepared, turns);
    let run = AnswerRun::new(setup(settings, &shared.pass.rules, payload.to_string()));
    let context = tool_loop::tool_context(settings, sample, question_vector, prepared);
    let tools = QuestionTools {
        context,
        state: ToolState { seen_keys: BTreeSet::new() },
        shown: BTreeSet::new(),
    };
    tool_loop::drive(shared, run, tools, trace, usage).await
}

/// Whether a single-path outcome sends an `adaptive` question to the loop: no readable answer,
/// or the answer that nothing was found.
pub(super) fn found_nothing(outcome: &AnswerOutcome) -> bool {
    match &outcome.answer {
        Err(_) => true,
        Ok(answer) => {
            let text = answer.answer.trim().trim_end_matches('.').to_lowercase();
            text == NOTHING_FOUND.to_lowercase()
        }
    }
}

/// One request with no tools: the final-answer round alone.
fn setup(settings: &AnswerSettings, rules: &RuleSet, user: String) -> RunSetup {
    let dataset_rules = match settings.dataset {
        DatasetKind::Locomo => "",
        DatasetKind::LongMemEval | DatasetKind::Own => {
            prompts::ANSWER_RULES_LONGMEMEVAL.text.trim()
        }
    };
    // The template and its value are fixed at compile time (the prompt tests render it); the
    // raw template is still a usable prompt.
    let system = prompts::ANSWER_SINGLE
        .render(&[("dataset_rules", dataset_rules)])
        .unwrap_or_else(|_| prompts::ANSWER_SINGLE.text.to_string())
        .trim_end()
        .to_string();
    RunSetup {
        model: settings.model.clone(),
        system: rules.extend_system(&system),
        final_instructions: prompts::ANSWER_FINAL.text.trim().to_string(),
        user,
        tools: Vec::new(),
        limits: RunLimits { max_rounds: 1, ..settings.limits },
        time_nudge: false,
        temperature: settings.temperature,
        seed: settings.provider_seed(),
        structured_output: true,
    }
}

/// The single-pass context: the question, the turns (as `query_memgas` shows them), the
/// sentences written from them, the personal facts drawn from them, and their sessions' dates.
pub fn context(graph: &MemoryGraph, prepared: &PreparedQuestion, turns: &[TurnHit]) -> Value {
    let lines: Vec<String> = turns
        .iter()
        .map(|hit| match &hit.date {
            Some(date) => format!("{}:{} (session date: {date})", hit.dia_id, hit.text),
            None => format!("{}:{}", hit.dia_id, hit.text),
        })
        .collect();
    let mut events = Vec::new();
    let mut facts = Vec::new();
    let mut seen_facts = BTreeSet::new();
    for hit in turns {
        for episode in graph.episodes_of_turn(&hit.dia_id) {
            events.push(match episode.date {
                Some(date) => format!("{}:{} (on {date})", episode.id, episode.sentence),
                None => format!("{}:{}", episode.id, episode.sentence),
            });
        }
        for fact in graph.facts_of_turn(&hit.dia_id) {
            if !seen_facts.insert(fact.id.clone()) {
                continue;
            }
            let mut line = format!("{}:{}, {}: {}", fact.id, fact.person, fact.aspect, fact.text);
            if let Some(until) = &fact.earlier_until {
                line.push_str(&format!(" (earlier value, replaced on {until})"));
            }
            facts.push(line);
        }
    }
    let mut sessions: Vec<(u32, String)> = turns
        .iter()
        .filter_map(|hit| {
            let number = hit.session_id.strip_prefix('D')?.parse::<u32>().ok()?;
            Some((number, format!("{}: {}", hit.session_id, hit.date.as_deref().unwrap_or("?"))))
        })
        .collect();
    sessions.sort();
    sessions.dedup();
    let mut payload = json!({
        "question": prepared.text,
        "turns": lines,
        "events": events,
        "facts": facts,
        "sessions": sessions.into_iter().map(|(_, line)| line).collect::<Vec<_>>(),
    });
    if let Some(date) = &prepared.current_date {
        payload["current_date"] = json!(date);
    }
    payload
}
