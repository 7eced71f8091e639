//! Arguments of the own-conversation commands: `memory …`, `ask`, `serve`, `mcp`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::ModelArgs;

/// Which embedder new conversations use, and where the local model lives.
#[derive(Debug, Clone, Args)]
pub struct StoreEmbedArgs {
    /// Embedder of new conversations: `local` (all-MiniLM-L6-v2 on this machine, no key) or an
    /// embedding model id served by the endpoint. A conversation keeps the embedder it was
    /// created with.
    #[arg(long, env = "MRAGENT_STORE_EMBEDDER", default_value = "local")]
    pub embedder: String,
    /// Directory holding the local model files (default: installed under data/models/).
    #[arg(long, env = "MRAGENT_EMBED_MODEL_DIR")]
    pub embed_model_dir: Option<PathBuf>,
}

/// The endpoint, models and embedder of the own-conversation commands (`memory add`, `memory
/// search`, `ask`, `serve`): the same options, flattened into each.
#[derive(Debug, Clone, Args)]
pub struct StoreModelArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub embed: StoreEmbedArgs,
}

/// `mragent memory …`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: MemoryCommand,
}

/// The `memory` subcommands.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Add messages (JSON or JSONL file, `-` for stdin) to a conversation; only new sessions
    /// are rewritten, keyworded and embedded; re-adding the same messages is a no-op.
    Add(MemoryAddArgs),
    /// Ranked memory lines for a query, with dates and message ids (no chat model).
    Search(MemorySearchArgs),
    /// The stored conversations.
    List(MemoryListArgs),
    /// One conversation's sessions and messages.
    Show(MemoryShowArgs),
    /// Delete a conversation and everything stored for it, or (`--message ID`) one message,
    /// whose session is then rebuilt from the messages left (logged; `memory undo` reverts it).
    Forget(MemoryForgetArgs),
    /// The personal facts of a user's conversations or of one conversation, with validity.
    Facts(MemoryFactsArgs),
    /// Correct one fact's value (logged; `memory undo` reverts it).
    Correct(MemoryCorrectArgs),
    /// The audit log of single edits (forgotten messages, corrected facts, undos).
    History(MemoryHistoryArgs),
    /// Revert one edit of the audit log.
    Undo(MemoryUndoArgs),
    /// Background build jobs (`memory add --no-wait`, `"wait": false`): list them, show one,
    /// or (`--run`) build the unfinished ones now.
    Jobs(MemoryJobsArgs),
}

/// `mragent memory jobs`.
#[derive(Debug, Args)]
pub struct MemoryJobsArgs {
    /// One job (else the newest jobs).
    pub job: Option<i64>,
    /// Only jobs of this conversation.
    #[arg(long, value_parser = crate::names::conversation_id, conflicts_with = "job")]
    pub conversation: Option<String>,
    /// Only queued and running jobs.
    #[arg(long, conflicts_with = "job")]
    pub unfinished: bool,
    /// Build the unfinished jobs (of conversations with this `--embedder`) now, then exit:
    /// what a worker of `memory add --no-wait` runs, and how to finish jobs a killed worker
    /// left.
    #[arg(long, conflicts_with = "job")]
    pub run: bool,
    /// Sessions built at once, per job.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub models: StoreModelArgs,
}

impl StoreModelArgs {
    /// These options as the environment variables that set them, so that a worker process
    /// started with them resolves the same endpoint, models and embedder (the key is not
    /// among them: the worker reads it from the environment or `.env`, as this process did).
    pub fn as_env(&self) -> Vec<(&'static str, String)> {
        let model = &self.model;
        let mut env = vec![
            ("MRAGENT_MODEL", model.model.clone()),
            ("MRAGENT_TIMEOUT", model.timeout.to_string()),
            ("MRAGENT_STORE_EMBEDDER", self.embed.embedder.clone()),
        ];
        let optional = [
            ("MRAGENT_RE_MODEL", model.re_model.clone()),
            ("MRAGENT_BASE_URL", model.base_url.clone()),
            ("MRAGENT_RPM", model.rpm.map(|rpm| rpm.to_string())),
            ("MRAGENT_TPM", model.tpm.map(|tpm| tpm.to_string())),
            ("MRAGENT_MAX_TOKENS", model.max_tokens.clone()),
            ("MRAGENT_STRUCTURED_OUTPUT", model.structured_output.then(|| "true".to_string())),
            ("MRAGENT_NO_HEDGE", model.no_hedge.then(|| "true".to_string())),
            (
                "MRAGENT_EMBED_MODEL_DIR",
                self.embed.embed_model_dir.as_ref().map(|dir| dir.display().to_string()),
            ),
        ];
        env.extend(optional.into_iter().filter_map(|(name, value)| Some((name, value?))));
        env
    }
}

/// A user and optionally one of their conversations, or one conversation.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = true)]
pub struct ScopeArgs {
    /// Conversation id (with `--user`: only this conversation of the user's).
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: Option<String>,
    /// A user: all of the user's conversations.
    #[arg(long, value_parser = crate::names::user_id)]
    pub user: Option<String>,
}

/// `key=value`, both names.
fn tag(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or("expected key=value")?;
    for part in [key, value] {
        crate::names::check_name(crate::names::NameKind::Tag, part).map_err(|e| e.to_string())?;
    }
    Ok((key.to_string(), value.to_string()))
}

/// A time bound: RFC 3339, `YYYY-MM-DD HH:MM[:SS]` (UTC) or `YYYY-MM-DD`.
fn time(text: &str) -> Result<String, String> {
    crate::convo::Timestamp::parse(text)
        .map(|_| text.to_string())
        .ok_or_else(|| "expected RFC 3339, YYYY-MM-DD HH:MM[:SS] or YYYY-MM-DD".to_string())
}

/// `mragent memory facts`.
#[derive(Debug, Args)]
pub struct MemoryFactsArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Only facts about this person.
    #[arg(long)]
    pub person: Option<String>,
    /// Only this aspect.
    #[arg(long)]
    pub aspect: Option<String>,
    /// Earlier values too, with the dates they held.
    #[arg(long)]
    pub history: bool,
    /// As known at this time (a date: its end).
    #[arg(long, value_parser = time)]
    pub as_of: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mragent memory correct`.
#[derive(Debug, Args)]
pub struct MemoryCorrectArgs {
    /// The fact's id, as `memory facts` lists it.
    #[arg(long)]
    pub fact: i64,
    /// Its value from now on.
    pub value: String,
    /// Print JSON (the edit's row in the audit log).
    #[arg(long)]
    pub json: bool,
}

/// `mragent memory history`.
#[derive(Debug, Args)]
pub struct MemoryHistoryArgs {
    /// Only edits of this user's conversations.
    #[arg(long, value_parser = crate::names::user_id)]
    pub user: Option<String>,
    /// Only edits of this conversation.
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mragent memory undo`.
#[derive(Debug, Args)]
pub struct MemoryUndoArgs {
    /// The edit's id, as `memory history` lists it.
    pub edit: i64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub models: StoreModelArgs,
}

/// `mragent memory add`.
#[derive(Debug, Args)]
pub struct MemoryAddArgs {
    /// Conversation id (created on first add): 1-128 ASCII letters, digits and . _ - : @ +.
    #[arg(long, value_parser = crate::names::conversation_id, required_unless_present = "batch")]
    pub conversation: Option<String>,
    /// The messages: a JSON or JSONL file, or `-` for stdin (format: data/examples/README.md).
    #[arg(required_unless_present = "batch")]
    pub file: Option<PathBuf>,
    /// Many conversations at once, built concurrently: a JSON file (or `-`) of the body of
    /// `POST /v1/conversations`, `{"conversations": [{"conversation", "messages", "user",
    /// "agent", "tags"}]}`.
    #[arg(long, conflicts_with_all = ["conversation", "file", "user", "agent", "tags"])]
    pub batch: Option<PathBuf>,
    /// Store the messages and queue their build as a job, then return at once; a worker
    /// process builds it in the background (`memory jobs` shows its progress).
    #[arg(long)]
    pub no_wait: bool,
    /// The user the conversation belongs to (set when it is created).
    #[arg(long, value_parser = crate::names::user_id)]
    pub user: Option<String>,
    /// The agent the conversation belongs to (set when it is created).
    #[arg(long, value_parser = crate::names::user_id)]
    pub agent: Option<String>,
    /// A tag every message of this add carries, `key=value` (repeatable; search filters on it).
    #[arg(long = "tag", value_parser = tag)]
    pub tags: Vec<(String, String)>,
    /// A gap without messages that starts a new session (for messages without a session id).
    #[arg(long, default_value = "4h", value_parser = crate::convo::parse_gap)]
    pub session_gap: chrono::TimeDelta,
    /// Sessions built at once.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub models: StoreModelArgs,
}

/// `mragent memory search`.
#[derive(Debug, Args)]
pub struct MemorySearchArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// What to look for.
    pub query: String,
    /// Only lines said by this speaker.
    #[arg(long)]
    pub speaker: Option<String>,
    /// Only lines sent at or after this time (a date: its first second).
    #[arg(long, value_parser = time)]
    pub from: Option<String>,
    /// Only lines sent at or before this time (a date: its last second).
    #[arg(long, value_parser = time)]
    pub to: Option<String>,
    /// Only lines added with this tag, `key=value` (repeatable: all must hold).
    #[arg(long = "tag", value_parser = tag)]
    pub tags: Vec<(String, String)>,
    /// How many lines.
    #[arg(short, long, default_value_t = 10)]
    pub k: usize,
    /// Print JSON (one array of hits).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub models: StoreModelArgs,
}

/// `mragent memory list`.
#[derive(Debug, Args)]
pub struct MemoryListArgs {
    /// Only this user's conversations.
    #[arg(long, value_parser = crate::names::user_id)]
    pub user: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mragent memory show`.
#[derive(Debug, Args)]
pub struct MemoryShowArgs {
    /// Conversation id.
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mragent memory forget`.
#[derive(Debug, Args)]
pub struct MemoryForgetArgs {
    /// Conversation id.
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: String,
    /// Forget only this message (its id, as `memory show` lists it); its session is rebuilt
    /// with the model, so this needs the endpoint.
    #[arg(long)]
    pub message: Option<String>,
    #[command(flatten)]
    pub models: StoreModelArgs,
}

/// `mragent ask`.
#[derive(Debug, Args)]
pub struct AskArgs {
    /// Conversation id.
    #[arg(long, value_parser = crate::names::conversation_id, required_unless_present = "user", conflicts_with = "user")]
    pub conversation: Option<String>,
    /// A user: the question is answered over all of the user's conversations.
    #[arg(long, value_parser = crate::names::user_id)]
    pub user: Option<String>,
    /// Answer from what was known at this time: later messages are invisible, facts valid
    /// then are current (a date: its end).
    #[arg(long, value_parser = time)]
    pub as_of: Option<String>,
    /// The question.
    pub question: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The rules file `mragent learn` writes (data/<dataset>/meta/<name>/rules.json): its rules
    /// go as one block at the end of the answer loop's system prompt.
    #[arg(long, value_name = "FILE")]
    pub meta_rules: Option<PathBuf>,
    /// How the question is answered.
    #[command(flatten)]
    pub answer: super::AnswerArgs,
    #[command(flatten)]
    pub models: StoreModelArgs,
}

/// `mragent serve`. Set `MRAGENT_SERVE_TOKEN` to require `Authorization: Bearer <token>`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "MRAGENT_SERVE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: std::net::SocketAddr,
    /// Requests handled at once (more wait in line).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrency: u32,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Requests per minute each token or key may make (bursts up to the same number); past
    /// it, 429 with Retry-After. Default: no limit.
    #[arg(long, env = "MRAGENT_KEY_RATE_PER_MINUTE")]
    pub key_rate_per_minute: Option<std::num::NonZeroU32>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key. Without
    /// it the server speaks plain HTTP (behind a TLS-terminating proxy).
    #[arg(long, env = "MRAGENT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "MRAGENT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// `mragent mcp`: the memory tools over MCP on standard input and output.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// The memory service that `serve` and `mcp` run: how adds build, how asks answer, and the
/// endpoint, models and embedder.
#[derive(Debug, Args)]
pub struct ServiceArgs {
    /// A gap without messages that starts a new session.
    #[arg(long, default_value = "4h", value_parser = crate::convo::parse_gap)]
    pub session_gap: chrono::TimeDelta,
    /// Sessions built at once per add.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Memory, in MiB, for the conversations kept between queries (stored conversation, index,
    /// snapshot) and the query vectors (a sixteenth of it): the least recently used are dropped
    /// beyond it, and loaded again when next queried. Weighed by an estimate of their bytes.
    #[arg(long, env = "MRAGENT_CACHE_MB", default_value_t = crate::service::CacheBudget::DEFAULT_MB, value_parser = clap::value_parser!(u64).range(1..=1024 * 1024))]
    pub cache_mb: u64,
    /// The rules file `mragent learn` writes (data/<dataset>/meta/<name>/rules.json): its rules
    /// go as one block at the end of the answer loop's system prompt (every ask).
    #[arg(long, value_name = "FILE")]
    pub meta_rules: Option<PathBuf>,
    /// How every ask is answered.
    #[command(flatten)]
    pub answer: super::AnswerArgs,
    #[command(flatten)]
    pub models: StoreModelArgs,
}
