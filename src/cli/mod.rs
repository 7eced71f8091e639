//! Command-line interface: clap derive types only. Doc comments are the help text.
//!
//! Arguments are resolved into typed settings by `settings`; nothing here reads the
//! environment beyond what clap's `env` attributes do.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod eval;
mod learn;
mod own;
mod record;
mod retrieve;

pub use self::eval::{CompareArgs, EvalArgs, EvalProtocolArg, JudgeProtocolArg, ScoringArgs};
pub use self::learn::LearnArgs;
pub use self::own::{
    AskArgs, McpArgs, MemoryAddArgs, MemoryArgs, MemoryCommand, MemoryCorrectArgs, MemoryFactsArgs,
    MemoryForgetArgs, MemoryHistoryArgs, MemoryJobsArgs, MemoryListArgs, MemorySearchArgs,
    MemoryShowArgs, MemoryUndoArgs, ScopeArgs, ServeArgs, ServiceArgs, StoreEmbedArgs,
    StoreModelArgs,
};
pub use self::record::{ExportArgs, ReplayArgs, VerifyArgs};
pub use self::retrieve::RetrieveArgs;

/// Long-term conversational memory for LLM agents: build a graph memory of a dialogue, answer
/// questions from it with a tool-calling loop, and score the answers.
#[derive(Debug, Parser)]
#[command(name = "mragent", version = crate::provenance::VERSION_LINE, about, long_about = None)]
pub struct Cli {
    /// Options shared by every command.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// More log output on stderr (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Project directory holding data/, result/, log/ and eval/.
    #[arg(long, global = true, env = "MRAGENT_ROOT", default_value = ".")]
    pub root: PathBuf,
    /// The own-data store (`memory`, `serve`, `mcp`): `postgres://user:password@host:port/db`
    /// for a PostgreSQL database shared by several processes, or `sqlite:PATH`; default: the
    /// SQLite file data/store/mragent.sqlite under the root.
    #[arg(
        long,
        global = true,
        env = "MRAGENT_STORE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the memory of every selected conversation: rewrite, keywords, embeddings (each
    /// cached under data/<dataset>/ and resumable per session), then the graph.
    Build(BuildArgs),
    /// The main job: build the memory (cached) and answer every question with the tool-calling
    /// loop; one result line per question, resumable, traces under log/.
    Run(RunCommandArgs),
    /// Score a run's answers against the dataset it answered: official LoCoMo F1 and exact
    /// match, evidence recall, and optionally an LLM judge (LoCoMo: the Mem0 J protocol or our
    /// strict one; LongMemEval: its per-type rules). Missing, foreign or duplicate questions
    /// are an error unless --partial.
    #[command(after_help = crate::eval::report::COLUMNS_HELP)]
    Eval(EvalArgs),
    /// Re-run a recorded run from its recorded model calls, sending nothing: the same command
    /// line as the run, `replay` for `run`. Stops at the first request never recorded, naming
    /// its question (--fill sends it), and compares every result line with the run's.
    Replay(ReplayArgs),
    /// Write one archive of a run: manifest, results, traces, recorded calls, eval tables, the
    /// dataset and the memory caches it answered from, with the SHA-256 of every file.
    Export(ExportArgs),
    /// Check an archive offline: every hash, F1 and exact match, the judge tables from the
    /// recorded judge calls, and every result line by replaying the answers. Prints VERIFIED or
    /// the first mismatch.
    Verify(VerifyArgs),
    /// Compare two runs of the same dataset selection question by question: per category the
    /// difference in F1 and (with --judge-model) judge accuracy J with a 95% paired bootstrap
    /// interval, saying when it is inside the noise, the questions that flip each way, and
    /// each run's mean answer length and tokens per question.
    #[command(after_help = crate::eval::compare::COLUMNS_NOTE)]
    Compare(CompareArgs),
    /// Learn rules on how to use memory (MetaMem) from judged attempts on training folds, keep
    /// a rule set only when held-out validation questions improve, and answer the test folds
    /// with and without it. Prints its estimated cost first (--dry-run stops there).
    Learn(LearnArgs),
    /// Evaluate retrieval offline (no key needed): MemGAS and baselines ranked against the gold
    /// evidence; session recall_all/recall_any/NDCG and turn recall at k = 1, 3, 5, 10.
    Retrieve(RetrieveArgs),
    /// Show a question's trace (prompts, tool calls, results, tokens) as a timeline.
    Trace(TraceArgs),
    /// Send one tiny request to the configured model endpoint and report latency and tokens.
    Ping(PingArgs),
    /// Your own conversations: add messages to the persistent store, search, list, show,
    /// forget (see `mragent memory --help`).
    Memory(MemoryArgs),
    /// Answer one question about a stored conversation with the same tool loop as `run`.
    Ask(AskArgs),
    /// Serve the store as a JSON HTTP API (add, search, ask, list, delete; /openapi.json).
    Serve(ServeArgs),
    /// Serve the store as MCP tools on standard input and output, for an MCP client to start
    /// (`serve` also answers MCP, at /mcp).
    Mcp(McpArgs),
    /// The own-data store itself: `store copy` moves a whole store between SQLite and
    /// PostgreSQL.
    Store(StoreArgs),
    /// API keys for `serve` and its /mcp: `keys create` prints a new key once (stored only as
    /// its hash), `keys list`, `keys revoke`. A key may be bound to one user (and agent) and
    /// limited to reading.
    Keys(KeysArgs),
}

/// `mragent keys …`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// The `keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a key and print it once (it cannot be shown again).
    Create(KeysCreateArgs),
    /// The keys: name, id, user, agent, scope, expiry, revocation (never the secrets).
    List(KeysListArgs),
    /// Revoke a key (by name or id): every server refuses it at its next request.
    Revoke(KeysRevokeArgs),
}

/// `mragent keys create`.
#[derive(Debug, Args)]
pub struct KeysCreateArgs {
    /// Its name (the audit log records it with the key's id).
    #[arg(long, value_parser = crate::names::user_id)]
    pub name: String,
    /// Reach only this user's conversations.
    #[arg(long, value_parser = crate::names::user_id)]
    pub user: Option<String>,
    /// Reach only this agent's conversations.
    #[arg(long, value_parser = crate::names::user_id)]
    pub agent: Option<String>,
    /// `read` (search, ask, list, show, facts, history, jobs), `write` (also add, forget,
    /// correct, undo) or `admin` (everything, every user's; never bound).
    #[arg(long, value_parser = ["read", "write", "admin"])]
    pub scope: String,
    /// Stop working after this long: like 30d, 12h, 90m, 2w.
    #[arg(long, value_parser = crate::store::parse_lifetime)]
    pub expires: Option<chrono::TimeDelta>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mragent keys list`.
#[derive(Debug, Args)]
pub struct KeysListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mragent keys revoke`.
#[derive(Debug, Args)]
pub struct KeysRevokeArgs {
    /// The key's name or id.
    pub key: String,
}

/// `mragent store …`.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: StoreCommand,
}

/// The `store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every row of one store into an empty one (SQLite to PostgreSQL or back), then check
    /// that each table has the same row count and content hash on both sides.
    Copy(StoreCopyArgs),
}

/// `mragent store copy`.
#[derive(Debug, Args)]
pub struct StoreCopyArgs {
    /// The store to copy: `sqlite:PATH` or `postgres://user:password@host:port/database`
    /// (better from the environment, `MRAGENT_COPY_FROM`: arguments are visible to every
    /// user of the machine in `ps`).
    #[arg(long, value_name = "URL", env = "MRAGENT_COPY_FROM", hide_env_values = true)]
    pub from: String,
    /// The empty store to copy into (created and migrated if new); or `MRAGENT_COPY_TO`.
    #[arg(long, value_name = "URL", env = "MRAGENT_COPY_TO", hide_env_values = true)]
    pub to: String,
    /// One JSON object with the tables copied, instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// Which benchmark to work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataArg {
    /// LoCoMo (10 conversations, 1,986 questions).
    #[value(name = "locomo")]
    Locomo,
    /// LongMemEval (`data/dataset_LM.json`).
    #[value(name = "LM", alias = "lm")]
    Lm,
}

/// Dataset selection.
#[derive(Debug, Clone, Args)]
pub struct DataArgs {
    /// Dataset.
    #[arg(long, value_enum, default_value = "locomo")]
    pub data: DataArg,
    /// Dataset file (default: data/dataset_<data>.json).
    #[arg(long)]
    pub data_file: Option<PathBuf>,
    /// Only this sample: `26` or `conv-26` (LoCoMo), a question id (LongMemEval).
    #[arg(long)]
    pub sample: Option<String>,
    /// LongMemEval question type, numbered as the Python reference does: 0 multi-session,
    /// 1 single-session-user, 2 temporal-reasoning, 3 single-session-preference,
    /// 4 knowledge-update, 5 single-session-assistant.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=5))]
    pub ca: Option<u8>,
    /// LongMemEval: sessions merged into one rewrite call.
    #[arg(long = "lm-batch", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub lm_batch: u32,
    /// LongMemEval: drop assistant turns, as the Python reference does (kept by default).
    #[arg(long)]
    pub drop_assistant_turns: bool,
}

/// Model endpoint and limits.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model for building memory (alias: gemini, claude, gpt4o, gpt4omini, gpt4.1mini, qwen;
    /// anything else is sent as a model id).
    #[arg(long, env = "MRAGENT_MODEL", default_value = "gemini")]
    pub model: String,
    /// Model for answering (default: --model).
    #[arg(long = "re-model", env = "MRAGENT_RE_MODEL")]
    pub re_model: Option<String>,
    /// OpenAI-compatible base URL (default: OpenRouter).
    #[arg(long, env = "MRAGENT_BASE_URL")]
    pub base_url: Option<String>,
    /// Requests per minute across all workers, for providers that publish such a limit
    /// (default: none; concurrency adapts to the endpoint's 429s instead).
    #[arg(long, env = "MRAGENT_RPM")]
    pub rpm: Option<u32>,
    /// Tokens per minute across all workers (estimated from prompt size), for providers that
    /// publish such a limit (default: none).
    #[arg(long, env = "MRAGENT_TPM")]
    pub tpm: Option<u32>,
    /// Completion token caps per step, e.g. `rewrite=4096,answer=1024` (`none`: no cap).
    /// Steps: rewrite, keywords, granules, question_keywords, rerank, tag_scores, answer,
    /// judge, learn, ping, facts. Unnamed steps keep their defaults.
    #[arg(long = "max-tokens", env = "MRAGENT_MAX_TOKENS", value_name = "STEP=N,…")]
    pub max_tokens: Option<String>,
    /// Per-request timeout in seconds.
    #[arg(long, env = "MRAGENT_TIMEOUT", default_value_t = 120)]
    pub timeout: u64,
    /// Send JSON Schemas as `response_format` (for models that support structured output).
    #[arg(long, env = "MRAGENT_STRUCTURED_OUTPUT")]
    pub structured_output: bool,
    /// Never race a slow request with a second one. For a local server that is busy anyway:
    /// a hedge doubles its load, and the tokens of the cancelled request are unknown to us.
    #[arg(long, env = "MRAGENT_NO_HEDGE")]
    pub no_hedge: bool,
}

/// Run tagging and concurrency.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Run tag, part of result and log file names.
    #[arg(long, default_value = "0")]
    pub file: String,
    /// Questions in flight at once, across all samples.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Only shard K of N (`K/N`, K counted from 0): every N-th conversation in dataset order,
    /// starting at the K-th. Shards share nothing but the result folder.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
}

/// How questions are answered (`run`, `ask`, `serve`, `mcp`).
#[derive(Debug, Clone, Args)]
pub struct AnswerArgs {
    /// `loop`: the tool loop, as MRAgent answers; `single`: one retrieval pass and one model
    /// call; `adaptive`: the single pass when the retrieval is sure, else the loop (and the loop
    /// after a single pass that found nothing). Default: `loop` for `run`, `adaptive` for `ask`,
    /// `serve` and `mcp` (docs/answering.md).
    #[arg(long = "answer", value_enum, value_name = "MODE")]
    pub answer: Option<crate::agent::AnswerMode>,
    /// `adaptive`: the confidence (0 to 1) at or above which a question takes the single path;
    /// the default was chosen held out on LoCoMo evidence (`retrieve --gate`).
    #[arg(long, value_parser = unit_interval, value_name = "CONFIDENCE")]
    pub gate_threshold: Option<f64>,
}

impl AnswerArgs {
    /// The gate these arguments ask for, `default` being the command's mode.
    pub fn gate(&self, default: crate::agent::AnswerMode) -> crate::agent::AnswerGate {
        let mut gate = crate::agent::AnswerGate::with_mode(self.answer.unwrap_or(default));
        if let Some(threshold) = self.gate_threshold {
            gate.threshold = threshold;
        }
        gate
    }
}

/// A number from 0 to 1.
fn unit_interval(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|value| (0.0..=1.0).contains(value))
        .ok_or_else(|| format!("expected a number from 0 to 1, got {text:?}"))
}

/// `mragent ping`.
#[derive(Debug, Args)]
pub struct PingArgs {
    /// Model and endpoint.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Which embedder to use for sentences, topics and questions.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct EmbedArgs {
    /// Embedding model on the endpoint.
    #[arg(long, env = "MRAGENT_EMBED_MODEL", default_value = "openai/text-embedding-3-large")]
    pub embed_model: String,
    /// Texts per embedding request.
    #[arg(long, default_value_t = 96, value_parser = clap::value_parser!(u32).range(1..=2048))]
    pub embed_batch: u32,
}

/// `mragent build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Dataset selection.
    #[command(flatten)]
    pub data: DataArgs,
    /// Model and endpoint.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Embedder.
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Sessions in flight at once, across all conversations.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Also generate the MemGAS granules (an LLM summary and keywords per session) that
    /// `retrieve --granules` and the `query_memgas` tool use.
    #[arg(long)]
    pub granules: bool,
}

/// `mragent run`.
#[derive(Debug, Args)]
pub struct RunCommandArgs {
    /// Dataset selection.
    #[command(flatten)]
    pub data: DataArgs,
    /// Model and endpoint.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Run tag and concurrency.
    #[command(flatten)]
    pub run: RunArgs,
    /// Embedder of the memory.
    #[command(flatten)]
    pub embed: EmbedArgs,
    /// Do not offer the MemGAS retrieval tool (`query_memgas`), which embeds locally.
    #[arg(long)]
    pub no_memgas: bool,
    /// Directory with all-MiniLM-L6-v2 for the MemGAS tool (default: installed automatically
    /// into data/models/ on first use).
    #[arg(long, env = "MRAGENT_EMBED_MODEL_DIR")]
    pub embed_model_dir: Option<PathBuf>,
    /// Seed of the category-5 option order and of provider sampling.
    #[arg(long, default_value_t = 66)]
    pub seed: u64,
    /// Do not write per-question traces under log/.
    #[arg(long)]
    pub no_traces: bool,
    /// How questions are answered.
    #[command(flatten)]
    pub answer: AnswerArgs,
    /// The rules file `mragent learn` writes (data/<dataset>/meta/<name>/rules.json): its rules
    /// go as one block at the end of the answer loop's system prompt. Lines answered under other
    /// rules (or none) are answered again.
    #[arg(long, value_name = "FILE")]
    pub meta_rules: Option<PathBuf>,
}

/// `mragent trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// A question id (`conv-26:q3`) or a result file (every question in it).
    pub target: String,
    /// Print the trace records as JSON lines instead of a timeline.
    #[arg(long)]
    pub json: bool,
    /// Only traces of this run tag.
    #[arg(long)]
    pub file: Option<String>,
    /// Only traces of this dataset (`locomo`, `LM`).
    #[arg(long)]
    pub data: Option<String>,
    /// Characters shown of long texts (0: 400).
    #[arg(long, default_value_t = 0)]
    pub max_chars: usize,
}

#[cfg(test)]
mod help_tests {
    use clap::Args as _;

    /// `--max-tokens` names every step a cap can be set for (`Step::ALL`).
    #[test]
    fn max_tokens_help_lists_every_step() {
        let command = super::ModelArgs::augment_args(clap::Command::new("x"));
        let help = command
            .get_arguments()
            .find(|argument| argument.get_id() == "max_tokens")
            .and_then(|argument| argument.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let listed = help.split_once("Steps:").map(|(_, steps)| steps).unwrap_or_default();
        for step in crate::llm::Step::ALL {
            let named = listed.split([',', '.', ' ']).any(|word| word.trim() == step.name());
            assert!(named, "--max-tokens help does not list {}: {help}", step.name());
        }
    }
}
