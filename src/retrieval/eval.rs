//! `mragent retrieve`: run retrieval methods over a dataset and score them (memgas.md §7.1).
//!
//! For every conversation the units are embedded with the local embedder (through the on-disk
//! [`EmbeddingCache`], so reruns embed nothing), a [`MemoryIndex`] is grown session by session,
//! and every question is ranked by every requested method. Results go to
//! `eval/<dataset>/retrieve/`: `summary.md` (the tables), `summary.json` (all aggregates) and
//! `<method>.jsonl` (per question: top ids and metrics). Offline, no key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::cache::EmbeddingCache;
use super::index::{IndexError, IndexOptions, MemoryIndex, Method, ranking_ids};
use super::metrics::{CUTOFFS, Evidence, MetricTable, QuestionMetrics};
use super::units::{Granularity, SessionUnits};
use crate::dataset::{self, Category, Conversation, DatasetKind, LoadOptions};
use crate::embedding::{LOCAL_EMBEDDER_NAME, LocalEmbedder, LocalEmbedderOptions, ModelSource};
use crate::ingest::{BuildSettings, ConversationGranules, load_granules};

/// Resolved settings of a retrieval evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveSettings {
    /// Dataset kind (`--data locomo`).
    pub dataset: DatasetKind,
    /// Dataset file (default `data/dataset_<name>.json`).
    pub data_path: PathBuf,
    /// Root of derived data: embedding caches (`<data_dir>/<dataset>/embedding/…`) and the
    /// automatically installed model (`<data_dir>/models`).
    pub data_dir: PathBuf,
    /// Root of evaluation outputs; results go to `<eval_dir>/<dataset>/retrieve/`.
    pub eval_dir: PathBuf,
    /// Methods to run, in report order (`--method`, repeatable or `all`).
    pub methods: Vec<Method>,
    /// Samples to keep (`--sample`); empty keeps all.
    pub samples: Vec<String>,
    /// A directory with the embedding model files (`--embed-model-dir` /
    /// `MRAGENT_EMBED_MODEL_DIR`); `None` installs the model under `data_dir/models` on first use.
    pub embed_model_dir: Option<PathBuf>,
    /// Embedding threads (0 = all cores).
    pub embed_threads: usize,
    /// Optional LLM summary/keyword units: JSON `{sample_id: {session_id: {"summary": …,
    /// "keywords": …}}}` (`--llm-units`). Without it the summary, keyword and hybrid methods are
    /// skipped and MemGAS runs on sessions and turns.
    pub llm_units: Option<PathBuf>,
    /// LLM summary/keyword units from the granule cache of [`crate::ingest::build_granules`]:
    /// the build settings (data directory, dataset, model) they were made with. Sessions that
    /// `llm_units` covers keep those.
    pub granules: Option<BuildSettings>,
    /// Index, graph, router and fusion options.
    pub index: IndexOptions,
}

impl RetrieveSettings {
    /// Defaults for a repository root: the dataset's default file, `data/`, `eval/`, all methods.
    pub fn new(root: &Path, dataset: DatasetKind) -> Self {
        Self {
            dataset,
            data_path: dataset::default_path(root, dataset),
            data_dir: root.join("data"),
            eval_dir: root.join("eval"),
            methods: Method::ALL.to_vec(),
            samples: Vec::new(),
            embed_model_dir: None,
            embed_threads: 0,
            llm_units: None,
            granules: None,
            index: IndexOptions::default(),
        }
    }

    /// The output directory, `<eval_dir>/<dataset>/retrieve`.
    pub fn output_dir(&self) -> PathBuf {
        self.eval_dir.join(self.dataset.as_str()).join("retrieve")
    }
}

/// Scores of one method.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodReport {
    /// The method.
    pub method: Method,
    /// Why it did not run (missing units), if it did not.
    pub skipped: Option<String>,
    /// All questions.
    pub overall: MetricTable,
    /// Per category, in category order, keyed by category name.
    pub by_category: IndexMap<String, MetricTable>,
    /// Seconds spent ranking (all questions).
    pub query_seconds: f64,
}

/// Wall-clock costs of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Loading the model.
    pub model_load_seconds: f64,
    /// Embedding units and questions (cache misses only).
    pub embed_seconds: f64,
    /// Texts embedded (cache misses).
    pub texts_embedded: usize,
    /// Texts served from the cache.
    pub texts_cached: usize,
    /// Building the indexes (graph, BM25).
    pub index_seconds: f64,
    /// Whole run.
    pub total_seconds: f64,
}

/// The outcome of [`run_retrieval_eval`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveReport {
    /// Dataset name.
    pub dataset: String,
    /// Embedder name.
    pub embedder: String,
    /// Conversations evaluated.
    pub n_conversations: usize,
    /// Questions evaluated.
    pub n_questions: usize,
    /// Granularities of the indexes.
    pub granularities: Vec<Granularity>,
    /// Graph size summed over conversations (nodes, undirected edges).
    pub graph_nodes: usize,
    /// Undirected association edges, summed over conversations.
    pub graph_edges: usize,
    /// Per method, in the order requested.
    pub methods: Vec<MethodReport>,
    /// Remarks printed under the tables (skipped methods, missing units).
    pub notes: Vec<String>,
    /// Costs.
    pub timings: Timings,
    /// The settings used.
    pub settings: RetrieveSettings,
    /// The markdown written to `summary.md`.
    pub markdown: String,
    /// Where `summary.md` was written.
    pub markdown_path: PathBuf,
    /// Where `summary.json` was written.
    pub json_path: PathBuf,
}

/// Per-session LLM units as read from `--llm-units`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LlmUnit {
    /// Session summary text.
    pub summary: Option<String>,
    /// Session keywords as one text.
    pub keywords: Option<String>,
}

type LlmUnits = BTreeMap<String, BTreeMap<String, LlmUnit>>;

/// One question's line in `<method>.jsonl`.
#[derive(Serialize)]
struct QuestionLine<'a> {
    question_id: &'a str,
    category: &'a Category,
    question: &'a str,
    evidence: &'a [String],
    top_sessions: Vec<String>,
    top_turns: Option<Vec<String>>,
    metrics: &'a QuestionMetrics,
}

/// Run every requested method over the dataset and write the report files.
pub fn run_retrieval_eval(settings: &RetrieveSettings) -> anyhow::Result<RetrieveReport> {
    let started = Instant::now();
    let conversations = dataset::load(
        settings.dataset,
        &settings.data_path,
        &LoadOptions { samples: settings.samples.clone(), ..LoadOptions::default() },
    )
    .with_context(|| format!("loading {}", settings.data_path.display()))?;
    let llm_units: LlmUnits = match &settings.llm_units {
        Some(path) => serde_json::from_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?,
        None => LlmUnits::new(),
    };

    let mut timings = Timings::default();
    let load_started = Instant::now();
    let source = ModelSource {
        explicit_dir: settings.embed_model_dir.clone(),
        models_root: settings.data_dir.join("models"),
    };
    let embedder = LocalEmbedder::from_source(
        &source,
        LocalEmbedderOptions { threads: settings.embed_threads, ..LocalEmbedderOptions::default() },
    )
    .context("loading the local embedder")?;
    timings.model_load_seconds = load_started.elapsed().as_secs_f64();
    let cache =
        EmbeddingCache::new(&settings.data_dir, settings.dataset.as_str(), LOCAL_EMBEDDER_NAME);

    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    let mut method_lines: Vec<Vec<u8>> = vec![Vec::new(); settings.methods.len()];
    let mut per_question: Vec<Vec<(Category, QuestionMetrics)>> =
        vec![Vec::new(); settings.methods.len()];
    let mut skipped: Vec<Option<String>> = vec![None; settings.methods.len()];
    let mut query_seconds = vec![0.0; settings.methods.len()];
    let mut granularities: Option<Vec<Granularity>> = None;
    let (mut graph_nodes, mut graph_edges, mut n_questions) = (0, 0, 0);
    let mut notes = Vec::new();
    let (mut granule_sessions, mut all_sessions) = (0, 0);

    for conversation in &conversations {
        let granules = match &settings.granules {
            Some(build) => load_granules(build, conversation)?,
            None => None,
        };
        if let Some(build) = &settings.granules {
            let sample = &conversation.sample_id;
            match &granules {
                None => notes.push(format!(
                    "{sample}: no LLM granules in {}.",
                    build.granules_path(sample).display()
                )),
                Some(found) if !found.is_complete() => notes
                    .push(format!("{sample}: no LLM granules for {}.", found.missing.join(", "))),
                Some(_) => {}
            }
            granule_sessions += granules.as_ref().map_or(0, |found| found.sessions.len());
            all_sessions += conversation.sessions.len();
        }
        let units =
            session_units(conversation, llm_units.get(&conversation.sample_id), granules.as_ref());
        let index = build_index(settings, conversation, &units, &embedder, &cache, &mut timings)?;
        let questions: Vec<String> =
            conversation.questions.iter().map(|q| q.question.clone()).collect();
        let embed_started = Instant::now();
        let (question_vectors, embedded) =
            cache.get_or_embed(&conversation.sample_id, &questions, |texts| {
                Ok(embedder.embed_blocking(texts)?)
            })?;
        timings.embed_seconds += embed_started.elapsed().as_secs_f64();
        timings.texts_embedded += embedded;
        timings.texts_cached += questions.len() - embedded;

        let present = index.granularities();
        granularities = Some(match granularities {
            Some(seen) => seen.into_iter().filter(|g| present.contains(g)).collect(),
            None => present,
        });
        graph_nodes += index.graph().n_nodes();
        graph_edges += index.graph().n_edges();
        n_questions += conversation.questions.len();

        for (slot, &method) in settings.methods.iter().enumerate() {
            let query_started = Instant::now();
            for (question, vector) in conversation.questions.iter().zip(&question_vectors) {
                let ranking = match index.rank(method, &question.question, vector) {
                    Ok(ranking) => ranking,
                    Err(IndexError::Unavailable { granularity, .. }) => {
                        skipped[slot] = Some(format!(
                            "no {} units (they come from an LLM)",
                            granularity.as_str()
                        ));
                        break;
                    }
                    Err(err) => {
                        return Err(err).with_context(|| format!("ranking {}", question.id));
                    }
                };
                let (sessions, turns) = ranking_ids(&index, &ranking);
                let evidence = Evidence::parse(&question.evidence);
                let metrics = QuestionMetrics::score(&evidence, &sessions, turns.as_deref());
                let line = QuestionLine {
                    question_id: &question.id,
                    category: &question.category,
                    question: &question.question,
                    evidence: &question.evidence,
                    top_sessions: sessions.into_iter().take(10).collect(),
                    top_turns: turns.map(|turns| turns.into_iter().take(10).collect()),
                    metrics: &metrics,
                };
                serde_json::to_writer(&mut method_lines[slot], &line)?;
                method_lines[slot].push(b'\n');
                per_question[slot].push((question.category.clone(), metrics));
            }
            query_seconds[slot] += query_started.elapsed().as_secs_f64();
        }
    }

    let mut methods = Vec::new();
    for (slot, &method) in settings.methods.iter().enumerate() {
        if let Some(reason) = &skipped[slot] {
            notes.push(format!("`{method}` skipped: {reason}."));
            methods.push(MethodReport {
                method,
                skipped: Some(reason.clone()),
                overall: MetricTable::default(),
                by_category: IndexMap::new(),
                query_seconds: 0.0,
            });
            continue;
        }
        let questions = &per_question[slot];
        let mut categories: Vec<&Category> = questions.iter().map(|(c, _)| c).collect();
        categories.sort();
        categories.dedup();
        let by_category = categories
            .into_iter()
            .map(|category| {
                let table = MetricTable::average(
                    questions.iter().filter(|(c, _)| c == category).map(|(_, m)| m),
                );
                (category_label(category), table)
            })
            .collect();
        methods.push(MethodReport {
            method,
            skipped: None,
            overall: MetricTable::average(questions.iter().map(|(_, m)| m)),
            by_category,
            query_seconds: query_seconds[slot],
        });
        let path = output_dir.join(format!("{method}.jsonl"));
        crate::fsutil::write_atomic(&path, &method_lines[slot])?;
    }
    let granularities = granularities.unwrap_or_default();
    if let Some(build) = &settings.granules {
        notes.push(format!(
            "LLM granules of model `{}`: {granule_sessions} of {all_sessions} sessions.",
            build.model
        ));
    }
    if !granularities.contains(&Granularity::Summary) {
        notes.push(
            "No LLM summary/keyword units were given: MemGAS ran on session and turn units only."
                .to_string(),
        );
    }
    timings.total_seconds = started.elapsed().as_secs_f64();
    let mut report = RetrieveReport {
        dataset: settings.dataset.as_str().to_string(),
        embedder: LOCAL_EMBEDDER_NAME.to_string(),
        n_conversations: conversations.len(),
        n_questions,
        granularities,
        graph_nodes,
        graph_edges,
        methods,
        notes,
        timings,
        settings: settings.clone(),
        markdown: String::new(),
        markdown_path: output_dir.join("summary.md"),
        json_path: output_dir.join("summary.json"),
    };
    report.markdown = render_markdown(&report);
    crate::fsutil::write_atomic(&report.markdown_path, report.markdown.as_bytes())?;
    crate::fsutil::write_atomic(&report.json_path, &serde_json::to_vec_pretty(&report)?)?;
    Ok(report)
}

/// The units of every session, with LLM units attached where given (`--llm-units` first, then
/// the granule cache).
pub fn session_units(
    conversation: &Conversation,
    llm: Option<&BTreeMap<String, LlmUnit>>,
    granules: Option<&ConversationGranules>,
) -> Vec<SessionUnits> {
    conversation
        .sessions
        .iter()
        .map(|session| {
            let mut units = SessionUnits::from_session(session);
            if let Some(extra) = llm.and_then(|map| map.get(&units.session_id)) {
                units.summary = extra.summary.clone();
                units.keywords = extra.keywords.clone();
            } else if let Some(found) = granules.and_then(|found| found.get(&units.session_id)) {
                units.summary = Some(found.summary.clone());
                units.keywords = Some(found.keyword_text());
            }
            units
        })
        .collect()
}

fn build_index(
    settings: &RetrieveSettings,
    conversation: &Conversation,
    units: &[SessionUnits],
    embedder: &LocalEmbedder,
    cache: &EmbeddingCache,
    timings: &mut Timings,
) -> anyhow::Result<MemoryIndex> {
    let text_options = settings.index.units;
    let per_session: Vec<Vec<String>> =
        units.iter().map(|u| u.texts_to_embed(&text_options)).collect();
    let all: Vec<String> = per_session.iter().flatten().cloned().collect();
    let embed_started = Instant::now();
    let (vectors, embedded) = cache
        .get_or_embed(&conversation.sample_id, &all, |texts| Ok(embedder.embed_blocking(texts)?))?;
    timings.embed_seconds += embed_started.elapsed().as_secs_f64();
    timings.texts_embedded += embedded;
    timings.texts_cached += all.len() - embedded;

    let index_started = Instant::now();
    let mut index = MemoryIndex::new(settings.index);
    let mut rest = vectors.into_iter();
    for (session_units, texts) in units.iter().zip(&per_session) {
        let session_vectors: Vec<Vec<f32>> = rest.by_ref().take(texts.len()).collect();
        let assembled =
            session_units.assemble(&text_options, session_vectors).with_context(|| {
                format!(
                    "{} {}: embedding count mismatch",
                    conversation.sample_id, session_units.session_id
                )
            })?;
        index
            .add_session(session_units.clone(), assembled)
            .with_context(|| format!("indexing {}", conversation.sample_id))?;
    }
    timings.index_seconds += index_started.elapsed().as_secs_f64();
    Ok(index)
}

fn category_label(category: &Category) -> String {
    match category {
        Category::Locomo(_) => format!("{} {}", category, category.name()),
        Category::LongMemEval(name) => name.clone(),
    }
}

/// The tables of `summary.md`.
pub fn render_markdown(report: &RetrieveReport) -> String {
    let mut out = String::new();
    let push = |out: &mut String, line: String| {
        out.push_str(&line);
        out.push('\n');
    };
    push(
        &mut out,
        format!(
            "# Retrieval on {}: {} questions, {} conversations\n",
            report.dataset, report.n_questions, report.n_conversations
        ),
    );
    let granularities: Vec<&str> = report.granularities.iter().map(|g| g.as_str()).collect();
    push(
        &mut out,
        format!(
            "Embedder `{}`; granularities: {}; association graph: {} nodes, {} edges. Scores ×100.\n",
            report.embedder,
            granularities.join(", "),
            report.graph_nodes,
            report.graph_edges
        ),
    );
    let ran: Vec<&MethodReport> = report.methods.iter().filter(|m| m.skipped.is_none()).collect();
    let ks: Vec<String> = CUTOFFS.iter().map(|k| k.to_string()).collect();

    push(&mut out, "## Session level\n".to_string());
    let mut header = vec!["method".to_string()];
    for metric in ["R_all", "R_any", "NDCG"] {
        header.extend(ks.iter().map(|k| format!("{metric}@{k}")));
    }
    header.push("query s".to_string());
    table_header(&mut out, &header);
    for method in &ran {
        let mut row = vec![method.method.to_string()];
        for metric in ["recall_all", "recall_any", "ndcg_any"] {
            row.extend(CUTOFFS.iter().map(|&k| fmt(method.overall.session_at(metric, k))));
        }
        row.push(format!("{:.2}", method.query_seconds));
        table_row(&mut out, &row);
    }

    push(&mut out, "\n## Turn level (evidence dia_ids)\n".to_string());
    let mut header = vec!["method".to_string()];
    for metric in ["R_any", "R_all", "NDCG"] {
        header.extend(ks.iter().map(|k| format!("{metric}@{k}")));
    }
    table_header(&mut out, &header);
    for method in ran.iter().filter(|m| !m.overall.turn.is_empty()) {
        let mut row = vec![method.method.to_string()];
        for metric in ["recall_any", "recall_all", "ndcg_any"] {
            row.extend(CUTOFFS.iter().map(|&k| fmt(method.overall.turn_at(metric, k))));
        }
        table_row(&mut out, &row);
    }

    let categories: Vec<(String, usize)> = ran
        .first()
        .map(|m| {
            m.by_category.iter().map(|(name, table)| (name.clone(), table.n_questions)).collect()
        })
        .unwrap_or_default();
    for (title, level, metric, k) in [
        ("Session recall_all@3", "session", "recall_all", 3),
        ("Turn recall_any@10", "turn", "recall_any", 10),
    ] {
        push(&mut out, format!("\n## {title} by category\n"));
        let mut header = vec!["method".to_string()];
        header.extend(categories.iter().map(|(name, n)| format!("{name} ({n})")));
        header.push(format!("all ({})", report.n_questions));
        table_header(&mut out, &header);
        for method in &ran {
            let value = |table: &MetricTable| {
                if level == "session" {
                    table.session_at(metric, k)
                } else {
                    table.turn_at(metric, k)
                }
            };
            if value(&method.overall).is_none() {
                continue;
            }
            let mut row = vec![method.method.to_string()];
            row.extend(
                categories
                    .iter()
                    .map(|(name, _)| fmt(method.by_category.get(name).and_then(value))),
            );
            row.push(fmt(value(&method.overall)));
            table_row(&mut out, &row);
        }
    }

    let t = &report.timings;
    push(
        &mut out,
        format!(
            "\nTimings: model load {:.1} s; embedding {:.1} s ({} texts embedded, {} from cache); index build {:.2} s; total {:.1} s.",
            t.model_load_seconds,
            t.embed_seconds,
            t.texts_embedded,
            t.texts_cached,
            t.index_seconds,
            t.total_seconds
        ),
    );
    for note in &report.notes {
        push(&mut out, format!("\n{note}"));
    }
    out
}

fn fmt(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.2}"))
}

fn table_header(out: &mut String, cells: &[String]) {
    table_row(out, cells);
    table_row(out, &cells.iter().map(|_| "---".to_string()).collect::<Vec<_>>());
}

fn table_row(out: &mut String, cells: &[String]) {
    out.push_str("| ");
    out.push_str(&cells.join(" | "));
    out.push_str(" |\n");
}
