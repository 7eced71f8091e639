//! The steps of a retrieval evaluation: inputs, embedding, index building, ranking every question
//! with every method, and the per-method aggregates.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use indexmap::IndexMap;
use serde::Serialize;

use super::{LlmUnit, LlmUnits, MethodReport, RetrieveSettings};
use crate::dataset::{Category, Conversation};
use crate::ingest::{ConversationGranules, load_granules};
use crate::retrieval::index::{IndexError, MemoryIndex, Method, QueryWords, ranking_ids};
use crate::retrieval::newer::PreferNewer;
use crate::retrieval::units::{Granularity, SessionUnits};
use crate::tune::metrics::{Evidence, MetricTable, QuestionMetrics};
use crate::tune::update::{
    PlainScores, PreferNewerReport, SessionContext, UpdateOutcome, UpdateTable, Variant, choose,
    update_outcome,
};

/// One question's line in `<method>.jsonl`.
#[derive(Serialize)]
struct QuestionLine {
    question_id: String,
    category: Category,
    question: String,
    evidence: Vec<String>,
    top_sessions: Vec<String>,
    top_turns: Option<Vec<String>>,
    metrics: QuestionMetrics,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    router_weights: Vec<(Granularity, f64)>,
    /// Knowledge-update questions: where the updating and outdated sessions rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    knowledge_update: Option<UpdateOutcome>,
}

/// A question ranked by one method: its line (filled in with the reported variant) and its
/// variants (plain first, then one per `--prefer-newer` candidate).
struct Pending {
    line: QuestionLine,
    variants: Vec<Variant>,
}

/// The `--llm-units` file, or no units.
pub(super) fn read_llm_units(settings: &RetrieveSettings) -> anyhow::Result<LlmUnits> {
    Ok(match &settings.llm_units {
        Some(path) => serde_json::from_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?,
        None => LlmUnits::new(),
    })
}

/// What the run has gathered so far; per-method vectors are indexed by the method's position
/// in [`RetrieveSettings::methods`].
pub(super) struct Scoreboard {
    pending: Vec<Vec<Pending>>,
    candidates: Vec<PreferNewer>,
    skipped: Vec<Option<String>>,
    query_seconds: Vec<f64>,
    pub(super) granularities: Option<Vec<Granularity>>,
    pub(super) graph_nodes: usize,
    pub(super) graph_edges: usize,
    pub(super) n_questions: usize,
    pub(super) n_conversations: usize,
    pub(super) notes: Vec<String>,
    granule_sessions: usize,
    all_sessions: usize,
}

impl Scoreboard {
    /// Nothing gathered yet, for `n_methods` methods and the `--prefer-newer` candidates.
    pub(super) fn new(n_methods: usize, candidates: Vec<PreferNewer>) -> Self {
        Self {
            pending: (0..n_methods).map(|_| Vec::new()).collect(),
            candidates,
            skipped: vec![None; n_methods],
            query_seconds: vec![0.0; n_methods],
            granularities: None,
            graph_nodes: 0,
            graph_edges: 0,
            n_questions: 0,
            n_conversations: 0,
            notes: Vec::new(),
            granule_sessions: 0,
            all_sessions: 0,
        }
    }

    /// The conversation's LLM granules when the run reads them, noting what is missing.
    pub(super) fn granules(
        &mut self,
        settings: &RetrieveSettings,
        conversation: &Conversation,
    ) -> anyhow::Result<Option<ConversationGranules>> {
        let granules = match &settings.granules {
            Some(build) => load_granules(build, conversation)?,
            None => None,
        };
        if let Some(build) = &settings.granules {
            let sample = &conversation.sample_id;
            match &granules {
                None => self.notes.push(format!(
                    "{sample}: no LLM granules in {}.",
                    build.granules_path(sample).display()
                )),
                Some(found) if !found.is_complete() => self
                    .notes
                    .push(format!("{sample}: no LLM granules for {}.", found.missing.join(", "))),
                Some(_) => {}
            }
            self.granule_sessions += granules.as_ref().map_or(0, |found| found.sessions.len());
            self.all_sessions += conversation.sessions.len();
        }
        Ok(granules)
    }

    /// Count the index's graph and the conversation's questions; keep the granularities every
    /// index so far has.
    pub(super) fn record_index(&mut self, index: &MemoryIndex, conversation: &Conversation) {
        let present = index.granularities();
        self.granularities = Some(match self.granularities.take() {
            Some(seen) => seen.into_iter().filter(|g| present.contains(g)).collect(),
            None => present,
        });
        self.graph_nodes += index.graph().n_nodes();
        self.graph_edges += index.graph().n_edges();
        self.n_questions += conversation.questions.len();
        self.n_conversations += 1;
    }

    /// Rank every question of the conversation with the method in `slot` and score it (under
    /// every `--prefer-newer` candidate too); a method whose units the index lacks is marked
    /// skipped.
    pub(super) fn rank_questions(
        &mut self,
        slot: usize,
        method: Method,
        (index, context): (&MemoryIndex, &SessionContext),
        conversation: &Conversation,
        (question_vectors, query_words): (&[Vec<f32>], &QueryWords),
    ) -> anyhow::Result<()> {
        let query_started = Instant::now();
        for (question, vector) in conversation.questions.iter().zip(question_vectors) {
            let ranked = index.rank_with_words(method, &question.question, vector, query_words);
            let ranking = match ranked {
                Ok(ranking) => ranking,
                Err(IndexError::Unavailable { granularity, .. }) => {
                    self.skipped[slot] =
                        Some(format!("no {} units (they come from an LLM)", granularity.as_str()));
                    break;
                }
                Err(err) => {
                    return Err(err).with_context(|| format!("ranking {}", question.id));
                }
            };
            let (sessions, turns) = ranking_ids(index, &ranking);
            let evidence = Evidence::parse(&question.evidence);
            let variant = |sessions: Vec<String>| {
                let time_of = |id: &str| context.time_of(index, id);
                Variant {
                    metrics: QuestionMetrics::score(&evidence, &sessions, turns.as_deref()),
                    update: update_outcome(
                        &question.category,
                        &evidence.sessions,
                        &sessions,
                        time_of,
                    ),
                    top_sessions: sessions.into_iter().take(10).collect(),
                }
            };
            let mut variants = vec![variant(sessions)];
            for &setting in &self.candidates {
                let reordered = context.reorder(&ranking.sessions, setting);
                variants.push(variant(
                    reordered.iter().map(|hit| index.session_id(hit.index).to_string()).collect(),
                ));
            }
            let line = QuestionLine {
                question_id: question.id.clone(),
                category: question.category.clone(),
                question: question.question.clone(),
                evidence: question.evidence.clone(),
                top_sessions: Vec::new(),
                top_turns: turns.map(|turns| turns.into_iter().take(10).collect()),
                metrics: variants[0].metrics.clone(),
                router_weights: ranking.router_weights.clone(),
                knowledge_update: None,
            };
            self.pending[slot].push(Pending { line, variants });
        }
        self.query_seconds[slot] += query_started.elapsed().as_secs_f64();
        Ok(())
    }

    /// One report per method (noting the skipped ones); writes `<method>.jsonl` for the others.
    pub(super) fn method_reports(
        &mut self,
        settings: &RetrieveSettings,
        output_dir: &Path,
    ) -> anyhow::Result<Vec<MethodReport>> {
        let mut methods = Vec::new();
        for (slot, &method) in settings.methods.iter().enumerate() {
            if let Some(reason) = &self.skipped[slot] {
                self.notes.push(format!("`{method}` skipped: {reason}."));
                methods.push(MethodReport {
                    method,
                    skipped: Some(reason.clone()),
                    overall: MetricTable::default(),
                    by_category: IndexMap::new(),
                    query_seconds: 0.0,
                    knowledge_update: None,
                    prefer_newer: None,
                });
                continue;
            }
            let pending = std::mem::take(&mut self.pending[slot]);
            let (report, lines) = reported(settings, pending)?;
            methods.push(MethodReport {
                method,
                query_seconds: self.query_seconds[slot],
                ..report
            });
            let path = output_dir.join(format!("{method}.jsonl"));
            crate::fsutil::write_atomic(&path, &lines)?;
        }
        Ok(methods)
    }

    /// The closing notes: how many sessions had granules, and whether MemGAS lacked LLM units.
    pub(super) fn final_notes(
        &mut self,
        settings: &RetrieveSettings,
        granularities: &[Granularity],
    ) {
        if let Some(build) = &settings.granules {
            self.notes.push(format!(
                "LLM granules of model `{}`: {} of {} sessions.",
                build.model, self.granule_sessions, self.all_sessions
            ));
        }
        if settings.methods.contains(&Method::Memgas)
            && !granularities.contains(&Granularity::Summary)
        {
            self.notes.push(
                "No LLM summary/keyword units were given: MemGAS ran on session and turn units only."
                    .to_string(),
            );
        }
    }
}

/// A method's report (without its timing) and its `<method>.jsonl`, each question under the
/// variant [`choose`] picks; with `--prefer-newer`, the plain ranking's scores beside.
fn reported(
    settings: &RetrieveSettings,
    pending: Vec<Pending>,
) -> anyhow::Result<(MethodReport, Vec<u8>)> {
    let all_variants: Vec<&[Variant]> = pending.iter().map(|p| p.variants.as_slice()).collect();
    let (chosen, chosen_settings) = choose(settings.prefer_newer, &all_variants);
    let scores = |pick: &dyn Fn(usize) -> usize| {
        let metrics: Vec<(Category, QuestionMetrics)> = pending
            .iter()
            .enumerate()
            .map(|(q, p)| (p.line.category.clone(), p.variants[pick(q)].metrics.clone()))
            .collect();
        let outcomes = pending.iter().enumerate().filter_map(|(q, p)| p.variants[pick(q)].update);
        let outcomes: Vec<UpdateOutcome> = outcomes.collect();
        PlainScores {
            overall: MetricTable::average(metrics.iter().map(|(_, m)| m)),
            by_category: by_category(&metrics),
            knowledge_update: UpdateTable::average(&outcomes),
        }
    };
    let with = scores(&|q| chosen[q]);
    let prefer_newer = settings.prefer_newer.map(|_| PreferNewerReport {
        settings: chosen_settings,
        same_topic: settings.same_topic,
        plain: scores(&|_| 0),
    });
    let mut lines = Vec::new();
    for (q, mut question) in pending.into_iter().enumerate() {
        let variant = question.variants.swap_remove(chosen[q]);
        question.line.metrics = variant.metrics;
        question.line.top_sessions = variant.top_sessions;
        question.line.knowledge_update = variant.update;
        serde_json::to_writer(&mut lines, &question.line)?;
        lines.push(b'\n');
    }
    let report = MethodReport {
        method: Method::Session,
        skipped: None,
        overall: with.overall,
        by_category: with.by_category,
        query_seconds: 0.0,
        knowledge_update: with.knowledge_update,
        prefer_newer,
    };
    Ok((report, lines))
}

/// Average metrics per category, in category order, keyed by category label.
pub(super) fn by_category(
    questions: &[(Category, QuestionMetrics)],
) -> IndexMap<String, MetricTable> {
    let mut categories: Vec<&Category> = questions.iter().map(|(c, _)| c).collect();
    categories.sort();
    categories.dedup();
    categories
        .into_iter()
        .map(|category| {
            let table = MetricTable::average(
                questions.iter().filter(|(c, _)| c == category).map(|(_, m)| m),
            );
            (category_label(category), table)
        })
        .collect()
}

/// The units of every session, with LLM units attached where given (`--llm-units` first, then
/// the granule cache).
pub(super) fn session_units(
    conversation: &Conversation,
    llm: Option<&BTreeMap<String, LlmUnit>>,
    granules: Option<&ConversationGranules>,
) -> Vec<SessionUnits> {
    SessionUnits::of_conversation(conversation, |session| {
        match llm.and_then(|map| map.get(session)) {
            Some(extra) => Some((extra.summary.clone(), extra.keywords.clone())),
            None => granules.and_then(|found| found.units_of(session)),
        }
    })
}

fn category_label(category: &Category) -> String {
    match category {
        Category::Locomo(_) => format!("{} {}", category, category.name()),
        Category::LongMemEval(name) => name.clone(),
    }
}
