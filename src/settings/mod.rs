//! Resolved settings: command-line arguments plus environment, decided once, in one place.
//!
//! [`resolve`] turns the parsed command and the environment into a [`Resolved`]: everything that
//! command needs as typed values, the settings of the layers it drives (`BuildSettings`,
//! `AnswerSettings`, `EvalSettings`, `RetrieveSettings`, `ServiceSettings`, …) filled in.
//! Paths are made absolute, model aliases resolved, the endpoint and key chosen. Commands
//! receive their job and never read arguments or the environment themselves; what depends on
//! the data (the embedder a stored conversation was made with, whether a key is needed for
//! it) they decide as they go.
//!
//! One file per group of commands: `data` and `models` (shared), `batch` (`build`, `run`),
//! `eval`, `retrieve`, `own` (`memory`, `ask`, `serve`, `mcp`), `rules` (their
//! `--meta-rules`); `ping` and `trace` are resolved here.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::cli::{Command, TraceArgs};

mod batch;
mod data;
mod eval;
mod learn;
mod models;
mod own;
mod record;
mod retrieve;
mod rules;

pub use self::batch::{BuildJob, RunJob, RunSettings};
pub use self::data::{DataSettings, dataset_kind};
pub use self::eval::{CompareJob, EvalJob, Scoring};
pub use self::learn::LearnJob;
pub use self::models::{ModelChoice, ModelSettings, OPENROUTER_BASE_URL};
pub(crate) use self::own::MemoryOp;
pub use self::own::{AskJob, McpJob, MemoryJob, OwnSettings, ServeJob};
pub use self::record::{
    ExportJob, LEARN_REPLAY_FLAGS, ReplaySettings, VerifyJob, learn_replay_args, replay_args,
};
pub use self::retrieve::RetrieveJob;
pub use self::rules::MetaRules;

/// The environment as settings read it.
pub trait Env {
    /// The value of `name`, when it is set (and Unicode).
    fn var(&self, name: &str) -> Option<String>;
    /// Whether `name` is set at all, to any value.
    fn is_set(&self, name: &str) -> bool;
}

/// The environment of this process (after `.env` is loaded).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn is_set(&self, name: &str) -> bool {
        std::env::var_os(name).is_some()
    }
}

/// `RUST_LOG`, when set and not empty: it overrides the log levels of `-v`/`-q` (`logging`).
pub fn log_directive() -> Option<String> {
    ProcessEnv.var("RUST_LOG").filter(|value| !value.is_empty())
}

/// The machine's host name (`/etc/hostname`, else `$HOSTNAME`, else `unknown`): who holds a
/// run's lock (`recorded::lock`; the file first, since `$HOSTNAME` is often not exported and
/// two processes of one machine must name it alike).
pub fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .or_else(|| ProcessEnv.var("HOSTNAME"))
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// This process's host as a job runner names it: `$HOSTNAME` when set (the pod's name under
/// Kubernetes; what tests give two replicas on one machine), else [`host_name`].
pub fn runner_host() -> String {
    ProcessEnv.var("HOSTNAME").filter(|name| !name.trim().is_empty()).unwrap_or_else(host_name)
}

/// The malloc arenas `serve` and `mcp` cap the allocator at (`heap::cap_arenas`): one per
/// core, at least two; `None` when the operator set `MALLOC_ARENA_MAX` (glibc has read it).
pub fn malloc_arenas() -> Option<usize> {
    if ProcessEnv.is_set("MALLOC_ARENA_MAX") {
        return None;
    }
    Some(std::thread::available_parallelism().map_or(2, usize::from).max(2))
}

/// Where the local embedding model comes from for tools without arguments of their own (tests,
/// benches): [`crate::embedding::MODEL_DIR_ENV`] when set and not empty, else the install under
/// `<data_dir>/models`.
pub fn model_source(data_dir: &Path) -> crate::embedding::ModelSource {
    let explicit_dir = ProcessEnv
        .var(crate::embedding::MODEL_DIR_ENV)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    crate::embedding::ModelSource {
        explicit_dir,
        ..crate::embedding::ModelSource::under_data_dir(data_dir)
    }
}

/// No environment at all: what `verify` resolves an archived run's replay with, so that the
/// verifier's variables cannot change the verdict.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEnv;

impl Env for NoEnv {
    fn var(&self, _name: &str) -> Option<String> {
        None
    }

    fn is_set(&self, _name: &str) -> bool {
        false
    }
}

/// Where the project keeps its inputs and outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectPaths {
    /// Absolute project directory.
    pub root: PathBuf,
    /// The own-data store's URL (`--store`), when not the SQLite file under the root.
    pub store: Option<String>,
}

impl ProjectPaths {
    /// Resolve `root` against the current directory.
    pub fn resolve(root: &Path) -> anyhow::Result<Self> {
        let root = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir().context("reading the current directory")?.join(root)
        };
        Ok(Self { root, store: None })
    }

    /// The same paths with the own-data store at `store` (`None`: the SQLite file).
    pub fn with_store(self, store: Option<String>) -> Self {
        Self { store, ..self }
    }

    /// `path` as given when absolute, else under the project root.
    pub fn under_root(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.root.join(path) }
    }
}

/// One command, resolved: what `main` hands to `commands::<command>::execute`.
#[derive(Debug)]
pub enum Resolved {
    /// `mragent ping`: the endpoint and the model to ask.
    Ping(ModelSettings),
    /// `mragent build`.
    Build(BuildJob),
    /// `mragent run`.
    Run(Box<RunJob>),
    /// `mragent eval`.
    Eval(EvalJob),
    /// `mragent compare`.
    Compare(CompareJob),
    /// `mragent learn`.
    Learn(Box<LearnJob>),
    /// `mragent retrieve`.
    Retrieve(RetrieveJob),
    /// `mragent trace`.
    Trace(TraceJob),
    /// `mragent memory …`.
    Memory(MemoryJob),
    /// `mragent ask`.
    Ask(AskJob),
    /// `mragent serve`.
    Serve(ServeJob),
    /// `mragent mcp`.
    Mcp(McpJob),
    /// `mragent store copy` (its arguments need no resolving).
    StoreCopy(crate::cli::StoreCopyArgs),
    /// `mragent keys …`: the command, on the project's store.
    Keys(ProjectPaths, crate::cli::KeysCommand),
    /// `mragent export`.
    Export(ExportJob),
    /// `mragent verify`.
    Verify(VerifyJob),
}

/// Resolves `command` under `paths` with `env` (`quiet`: `-q`, no progress bars or reports).
pub fn resolve(
    command: Command,
    paths: &ProjectPaths,
    quiet: bool,
    env: &impl Env,
) -> anyhow::Result<Resolved> {
    Ok(match command {
        Command::Ping(args) => {
            Resolved::Ping(ModelSettings::resolve(&args.model, |name| env.var(name))?)
        }
        Command::Build(args) => Resolved::Build(BuildJob::resolve(paths, &args, quiet, env)?),
        Command::Run(args) => Resolved::Run(Box::new(RunJob::resolve(paths, &args, quiet, env)?)),
        Command::Eval(args) => Resolved::Eval(EvalJob::resolve(paths, &args, env)?),
        Command::Compare(args) => Resolved::Compare(CompareJob::resolve(paths, &args, env)?),
        Command::Learn(args) => {
            Resolved::Learn(Box::new(LearnJob::resolve(paths, &args, quiet, env)?))
        }
        Command::Retrieve(args) => Resolved::Retrieve(RetrieveJob::resolve(paths, &args, quiet)?),
        Command::Trace(args) => Resolved::Trace(TraceJob::resolve(paths, args, env)),
        Command::Memory(args) => Resolved::Memory(MemoryJob::resolve(paths, args.command, env)?),
        Command::Ask(args) => Resolved::Ask(AskJob::resolve(paths, args, env)?),
        Command::Serve(args) => Resolved::Serve(ServeJob::resolve(paths, &args, env)?),
        Command::Mcp(args) => Resolved::Mcp(McpJob::resolve(paths, &args, env)?),
        Command::Store(args) => match args.command {
            crate::cli::StoreCommand::Copy(copy) => Resolved::StoreCopy(copy),
        },
        Command::Keys(args) => Resolved::Keys(paths.clone(), args.command),
        Command::Replay(args) => {
            Resolved::Run(Box::new(RunJob::resolve_replay(paths, &args, quiet, env)?))
        }
        Command::Export(args) => Resolved::Export(ExportJob::resolve(paths, &args)?),
        Command::Verify(args) => Resolved::Verify(VerifyJob::resolve(&args)?),
    })
}

/// `mragent trace`, resolved.
#[derive(Debug, Clone)]
pub struct TraceJob {
    /// The project root the traces are under.
    pub root: PathBuf,
    /// A question id or a result file.
    pub target: String,
    /// How to render (colour when standard output is a terminal and `NO_COLOR` is unset).
    pub options: crate::agent::render::RenderOptions,
}

impl TraceJob {
    fn resolve(paths: &ProjectPaths, args: TraceArgs, env: &impl Env) -> Self {
        use std::io::IsTerminal as _;
        let options = crate::agent::render::RenderOptions {
            json: args.json,
            color: std::io::stdout().is_terminal() && !env.is_set("NO_COLOR"),
            dataset: args.data,
            file: args.file,
            max_chars: args.max_chars,
        };
        Self { root: paths.root.clone(), target: args.target, options }
    }
}

#[cfg(test)]
mod tests;
