//! `mragent retrieve`: the retrieval benchmark harness. It runs the methods of
//! [`crate::retrieval`] over a dataset and scores them (memgas.md §7.1); `retrieval` is the
//! library it measures and never imports this module.
//!
//! For every conversation the units are embedded with the local embedder (through the on-disk
//! [`TextVectorCache`](crate::retrieval::TextVectorCache), so reruns embed nothing), a
//! [`MemoryIndex`](crate::retrieval::MemoryIndex) is grown session by session, and every question
//! is ranked by every requested method and scored with [`metrics`]. Results go to
//! `eval/<dataset>/retrieve/`: `summary.md` (the tables), `summary.json` (all aggregates) and
//! `<method>.jsonl` (per question: top ids and metrics). Offline, no key. [`folds`] tunes the
//! methods' settings honestly, leave-one-conversation-out (`retrieve --folds`).

mod embed;
pub mod folds;
pub mod gate;
mod markdown;
pub mod metrics;
mod progress;
mod steps;
pub mod update;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::Context;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

pub use folds::{FoldsOutcome, run_retrieval_folds};
pub use markdown::render_markdown;
use steps::session_units;

use self::metrics::MetricTable;
use crate::dataset::{self, DatasetKind, LoadOptions, LongMemEvalType};
use crate::embedding::LOCAL_EMBEDDER_NAME;
use crate::ingest::BuildSettings;
use crate::retrieval::index::{IndexNeeds, IndexOptions, Method};
use crate::retrieval::units::Granularity;
use embed::Embedding;
use steps::{Scoreboard, read_llm_units};
use update::{PreferNewerMode, PreferNewerReport, SameTopic, SessionContext, UpdateTable};

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
    /// LongMemEval only (`--ca`): keep only conversations asking this question type.
    pub question_type: Option<LongMemEvalType>,
    /// LongMemEval only (`--drop-assistant-turns`): index the user's turns alone.
    pub drop_assistant_turns: bool,
    /// Draw a progress bar on stderr while embedding (progress also goes to the log).
    pub progress: bool,
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
    /// `--prefer-newer`: reorder sessions so that the newer of two about the same thing comes
    /// first ([`update`]); `None` ranks as the methods do.
    #[serde(default)]
    pub prefer_newer: Option<PreferNewerMode>,
    /// `--same-topic`: what makes two sessions about the same thing for `--prefer-newer`.
    #[serde(default)]
    pub same_topic: SameTopic,
    /// `--stored-vectors`: rank over the memory's vectors as the store keeps them (8 bits and
    /// one scale per row, `store::vectors`), as own memory does, instead of the embedder's f32.
    /// Questions and their words stay f32 (they are never stored).
    #[serde(default)]
    pub stored_vectors: bool,
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
            question_type: None,
            drop_assistant_turns: false,
            progress: false,
            embed_model_dir: None,
            embed_threads: 0,
            llm_units: None,
            granules: None,
            index: IndexOptions::default(),
            prefer_newer: None,
            same_topic: SameTopic::default(),
            stored_vectors: false,
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
    /// Knowledge-update questions: the updating session above the outdated one ([`update`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge_update: Option<UpdateTable>,
    /// With `--prefer-newer`: the settings used and the scores without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_newer: Option<PreferNewerReport>,
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
    /// Conversations selected; more than `n_conversations` when the run was stopped.
    pub n_selected: usize,
    /// What the index held: which vectors were embedded, whether the graph was built.
    pub built: IndexNeeds,
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

/// Run every requested method over the dataset and write the report files.
pub fn run_retrieval_eval(settings: &RetrieveSettings) -> anyhow::Result<RetrieveReport> {
    run_retrieval_eval_until(settings, &AtomicBool::new(false))
}

/// [`run_retrieval_eval`] that stops when `stop` is set (between embedding batches and between
/// conversations): what was embedded stays cached, and the tables cover the conversations
/// finished, marked partial.
pub fn run_retrieval_eval_until(
    settings: &RetrieveSettings,
    stop: &AtomicBool,
) -> anyhow::Result<RetrieveReport> {
    let started = Instant::now();
    let options = LoadOptions {
        samples: settings.samples.clone(),
        question_type: settings.question_type,
        drop_assistant_turns: settings.drop_assistant_turns,
    };
    let conversations = dataset::load(settings.dataset, &settings.data_path, &options)?;
    let llm_units = read_llm_units(settings)?;
    let mut needs = IndexNeeds::for_methods(&settings.methods, &settings.index);
    if settings.prefer_newer.is_some() && settings.same_topic == SameTopic::Vector {
        needs.vectors.session = true;
    }
    tracing::info!(
        dataset = settings.dataset.as_str(),
        file = %settings.data_path.display(),
        conversations = conversations.len(),
        methods = ?settings.methods,
        vectors = ?needs.vectors,
        graph = needs.graph,
        "retrieve: starting"
    );

    let mut timings = Timings::default();
    let mut embedding = Embedding::new(settings, needs, &conversations, stop);
    let output_dir = settings.output_dir();
    std::fs::create_dir_all(&output_dir)
        .with_context(|| format!("creating {}", output_dir.display()))?;
    let mut board =
        Scoreboard::new(settings.methods.len(), update::candidates(settings.prefer_newer));

    for conversation in &conversations {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let granules = board.granules(settings, conversation)?;
        let units =
            session_units(conversation, llm_units.get(&conversation.sample_id), granules.as_ref());
        let Some(index) = embedding.index(conversation, &units, &mut timings)? else { break };
        let Some((question_vectors, query_words)) =
            embedding.questions(conversation, &index, &mut timings)?
        else {
            break;
        };
        board.record_index(&index, conversation);
        let reorders = settings.prefer_newer.is_some();
        let context = SessionContext::new(&index, conversation, settings.same_topic, reorders);
        for (slot, &method) in settings.methods.iter().enumerate() {
            let questions = (&question_vectors[..], &query_words);
            board.rank_questions(slot, method, (&index, &context), conversation, questions)?;
        }
        tracing::debug!(sample = %conversation.sample_id, "retrieve: conversation done");
    }
    embedding.finish();
    write_report(settings, needs, board, timings, started, conversations.len())
}

/// Aggregate, render and write `summary.md`, `summary.json` and the per-method files.
fn write_report(
    settings: &RetrieveSettings,
    needs: IndexNeeds,
    mut board: Scoreboard,
    mut timings: Timings,
    started: Instant,
    n_selected: usize,
) -> anyhow::Result<RetrieveReport> {
    let output_dir = settings.output_dir();
    if board.n_conversations < n_selected {
        board.notes.insert(
            0,
            format!(
                "PARTIAL: stopped after {} of {n_selected} conversations; these tables cover those only. The same command resumes (embeddings are cached).",
                board.n_conversations
            ),
        );
    }
    let methods = board.method_reports(settings, &output_dir)?;
    let granularities = board.granularities.take().unwrap_or_default();
    board.final_notes(settings, &granularities);
    timings.total_seconds = started.elapsed().as_secs_f64();
    let mut report = RetrieveReport {
        dataset: settings.dataset.as_str().to_string(),
        embedder: LOCAL_EMBEDDER_NAME.to_string(),
        n_conversations: board.n_conversations,
        n_selected,
        built: needs,
        n_questions: board.n_questions,
        granularities,
        graph_nodes: board.graph_nodes,
        graph_edges: board.graph_edges,
        methods,
        notes: board.notes,
        timings,
        settings: settings.clone(),
        markdown: String::new(),
        markdown_path: output_dir.join("summary.md"),
        json_path: output_dir.join("summary.json"),
    };
    report.markdown = render_markdown(&report);
    crate::fsutil::write_atomic(&report.markdown_path, report.markdown.as_bytes())?;
    crate::fsutil::write_atomic(&report.json_path, &serde_json::to_vec_pretty(&report)?)?;
    tracing::info!(
        conversations = report.n_conversations,
        selected = n_selected,
        questions = report.n_questions,
        texts_embedded = report.timings.texts_embedded,
        texts_cached = report.timings.texts_cached,
        seconds = report.timings.total_seconds,
        summary = %report.markdown_path.display(),
        "retrieve: finished"
    );
    Ok(report)
}
