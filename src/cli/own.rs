//! Arguments of the own-conversation commands: `memory …`, `ask`, `serve`.

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
    /// whose session is then rebuilt from the messages left.
    Forget(MemoryForgetArgs),
}

/// `mragent memory add`.
#[derive(Debug, Args)]
pub struct MemoryAddArgs {
    /// Conversation id (created on first add): 1-128 ASCII letters, digits and . _ - : @ +.
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: String,
    /// The messages: a JSON or JSONL file, or `-` for stdin (format: data/examples/README.md).
    pub file: PathBuf,
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
    /// Conversation id.
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: String,
    /// What to look for.
    pub query: String,
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
    #[arg(long, value_parser = crate::names::conversation_id)]
    pub conversation: String,
    /// The question.
    pub question: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The rules file `mragent learn` writes (data/<dataset>/meta/<name>/rules.json): its rules
    /// go as one block at the end of the answer loop's system prompt.
    #[arg(long, value_name = "FILE")]
    pub meta_rules: Option<PathBuf>,
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
    /// A gap without messages that starts a new session.
    #[arg(long, default_value = "4h", value_parser = crate::convo::parse_gap)]
    pub session_gap: chrono::TimeDelta,
    /// Sessions built at once per add.
    #[arg(long, env = "MRAGENT_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// The rules file `mragent learn` writes (data/<dataset>/meta/<name>/rules.json): its rules
    /// go as one block at the end of the answer loop's system prompt (every ask over HTTP).
    #[arg(long, value_name = "FILE")]
    pub meta_rules: Option<PathBuf>,
    #[command(flatten)]
    pub models: StoreModelArgs,
}
