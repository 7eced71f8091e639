//! The own-conversation commands, `memory …`, `ask`, `serve` and `mcp`: [`OwnSettings`] (the store,
//! the models, the embedders) and one job per command.

use std::path::Path;

use anyhow::Context as _;

use super::{Env, MetaRules, ModelSettings, ProjectPaths};
use crate::cli::{
    AskArgs, McpArgs, MemoryAddArgs, MemoryCommand, MemoryFactsArgs, MemoryJobsArgs,
    MemorySearchArgs, ScopeArgs, ServeArgs, ServiceArgs, StoreModelArgs,
};
use crate::embedding::ModelSource;
use crate::serve::ServeOptions;
use crate::service::ops::{
    ApiError, Body, add::AddRequest, add_batch::BatchRequest, ask::AskRequest,
    correct::CorrectRequest, history::HistoryRequest, jobs::JobsRequest, list::ListRequest,
    search::SearchRequest,
};
use crate::service::{FactQuery, Scope, SearchFilters, ServiceSettings, time_bound};
use crate::store::AddScope;

/// What an own-conversation command that may call a model works with.
#[derive(Debug, Clone)]
pub struct OwnSettings {
    /// The project: the store is `data/store/mragent.sqlite` under it.
    pub paths: ProjectPaths,
    /// Endpoint and models.
    pub models: ModelSettings,
    /// The service's settings. Its `embedder` is the one of new conversations (`--embedder`);
    /// a command on an existing conversation takes [`OwnSettings::for_embedder`] of the one
    /// recorded with it.
    pub service: ServiceSettings,
    /// Where the local embedder's files are (`--embed-model-dir`, else installed under
    /// `data/models/`).
    pub local_model: ModelSource,
}

impl OwnSettings {
    fn resolve(
        paths: &ProjectPaths,
        args: &StoreModelArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let models = ModelSettings::resolve(&args.model, |name| env.var(name))?;
        let mut service = ServiceSettings::new(
            &paths.root,
            &args.embed.embedder,
            &models.build_model.alias,
            &models.build_model.id,
        );
        service.answer_model = models.answer_model.id.clone();
        if let Some(seconds) = seconds(env, "MRAGENT_JOB_LEASE", 3600)? {
            service.job_lease = seconds;
        }
        if let Some(seconds) = seconds(env, "MRAGENT_ADD_WAIT", 600)? {
            service.add_wait = seconds;
        }
        let local_model = ModelSource {
            explicit_dir: args.embed.embed_model_dir.clone(),
            models_root: paths.root.join("data").join("models"),
        };
        Ok(Self { paths: paths.clone(), models, service, local_model })
    }

    /// The settings of the long-running service (`serve`, `mcp`): its session gap, build
    /// workers and the rules every ask uses.
    fn for_service(
        paths: &ProjectPaths,
        args: &ServiceArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let mut own = Self::resolve(paths, &args.models, env)?;
        own.service.session_gap = args.session_gap;
        own.service.workers = args.workers as usize;
        own.service.cache = crate::service::CacheBudget::mb(args.cache_mb);
        own.service.answer = args.answer.gate(crate::agent::OWN_ANSWER_MODE);
        own.with_rules(paths, args.meta_rules.as_deref())?;
        Ok(own)
    }

    /// Loads the rules of `--meta-rules` (when given) into the service's asks.
    fn with_rules(&mut self, paths: &ProjectPaths, file: Option<&Path>) -> anyhow::Result<()> {
        if let Some(meta) = MetaRules::resolve(paths, file)? {
            self.service.rules = meta.rules;
        }
        Ok(())
    }

    /// The service settings for conversations embedded with `embedder` (`local` or a model id).
    pub fn for_embedder(&self, embedder: &str) -> ServiceSettings {
        ServiceSettings { embedder: embedder.to_string(), ..self.service.clone() }
    }
}

/// Variable `name`'s seconds, from 1 to `max`, when set.
fn seconds(env: &impl Env, name: &str, max: u64) -> anyhow::Result<Option<std::time::Duration>> {
    let Some(text) = env.var(name) else { return Ok(None) };
    let seconds = text.trim().parse().ok().filter(|seconds| (1..=max).contains(seconds));
    let seconds =
        seconds.with_context(|| format!("{name}={text:?}: expected seconds from 1 to {max}"))?;
    Ok(Some(std::time::Duration::from_secs(seconds)))
}

/// `mragent memory …`, resolved: the operation it runs (`service::ops`) with its request, and
/// how its reply is printed.
#[derive(Debug, Clone)]
pub struct MemoryJob {
    /// The project (its store).
    pub(crate) paths: ProjectPaths,
    /// The operation.
    pub(crate) op: MemoryOp,
    /// Print the reply as JSON.
    pub(crate) json: bool,
}

/// A `memory` subcommand as an operation's request. Those that may call a model carry `own`
/// (models and embedders); the others run on the store alone and need no key.
#[derive(Debug, Clone)]
pub(crate) enum MemoryOp {
    /// Each conversation's add (a file: one; `--batch`: a batch add's body), and the
    /// environment of the worker that builds those that do not wait.
    Add {
        adds: Vec<(String, AddRequest)>,
        batch: bool,
        worker_env: Vec<(&'static str, String)>,
        own: OwnSettings,
    },
    Search(Scope, SearchRequest, OwnSettings),
    List(ListRequest),
    /// A conversation's sessions and messages.
    Show(String),
    /// A whole conversation (no model).
    Forget(String),
    /// A conversation's message; its session is rebuilt with the model.
    ForgetMessage(String, String, OwnSettings),
    Facts(Scope, FactQuery),
    /// A fact, and its new value.
    Correct(i64, CorrectRequest),
    History(HistoryRequest),
    /// An edit (an undone forget rebuilds its session, with the model).
    Undo(i64, OwnSettings),
    Job(i64),
    Jobs(JobsRequest),
    /// `jobs --run`: build the unfinished jobs now (a worker's loop, no operation).
    RunJobs(OwnSettings),
}

/// The scope of `--conversation` / `--user`: with both, the user's conversations narrowed to
/// the one named.
fn scope_of(args: ScopeArgs) -> (Scope, Option<String>) {
    match (args.user, args.conversation) {
        (Some(user), only) => (Scope::User(user), only),
        (None, Some(conversation)) => (Scope::Conversation(conversation), None),
        // clap's group requires one of them.
        (None, None) => (Scope::Conversation(String::new()), None),
    }
}

/// A parser's error, naming its field.
fn invalid(error: ApiError) -> anyhow::Error {
    anyhow::anyhow!("{}: {error}", error.detail.field)
}

impl MemoryJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        command: MemoryCommand,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let own = |models: &StoreModelArgs| OwnSettings::resolve(paths, models, env);
        let (op, json) = match command {
            MemoryCommand::Add(args) => {
                let json = args.json;
                (add(own(&args.models)?, args)?, json)
            }
            MemoryCommand::Jobs(args) => (jobs(&args, own)?, args.json),
            MemoryCommand::Search(args) => {
                let json = args.json;
                (search(args, own)?, json)
            }
            MemoryCommand::List(args) => {
                (MemoryOp::List(ListRequest { user: args.user }), args.json)
            }
            MemoryCommand::Show(args) => (MemoryOp::Show(args.conversation), args.json),
            MemoryCommand::Forget(args) => match args.message {
                Some(message) => {
                    let own = own(&args.models)?;
                    (MemoryOp::ForgetMessage(args.conversation, message, own), false)
                }
                None => (MemoryOp::Forget(args.conversation), false),
            },
            MemoryCommand::Facts(args) => {
                let json = args.json;
                (facts(args), json)
            }
            MemoryCommand::Correct(args) => {
                let body = Body::from_iter([("value".to_string(), args.value.into())]);
                let request = CorrectRequest::read(body).map_err(invalid)?;
                (MemoryOp::Correct(args.fact, request), args.json)
            }
            MemoryCommand::History(args) => {
                let (user, conversation) = (args.user, args.conversation);
                (MemoryOp::History(HistoryRequest { user, conversation }), args.json)
            }
            MemoryCommand::Undo(args) => (MemoryOp::Undo(args.edit, own(&args.models)?), args.json),
        };
        Ok(Self { paths: paths.clone(), op, json })
    }
}

/// `memory add`: one file or a batch, read and checked here (a bad file changes nothing), the
/// build's settings, and a worker's environment.
fn add(mut own: OwnSettings, args: MemoryAddArgs) -> anyhow::Result<MemoryOp> {
    own.service.session_gap = args.session_gap;
    own.service.workers = args.workers as usize;
    let mut worker_env = args.models.as_env();
    worker_env.push(("MRAGENT_WORKERS", args.workers.to_string()));
    let wait = !args.no_wait;
    let (adds, batch) = match (args.batch, args.conversation, args.file) {
        (Some(file), _, _) => (read_batch(&file, wait)?, true),
        (None, Some(conversation), Some(file)) => {
            let tags = args.tags.into_iter().collect();
            let scope = AddScope { user: args.user, agent: args.agent, tags };
            let messages = crate::convo::parse(&read_text(&file)?)
                .with_context(|| format!("{} is not a usable conversation", file.display()))?;
            crate::service::check_limits(&messages)
                .with_context(|| format!("conversation {conversation} cannot be added"))?;
            (vec![(conversation, AddRequest { messages, scope, wait })], false)
        }
        // clap requires both unless `--batch` is given.
        _ => anyhow::bail!("memory add needs --conversation and a file, or --batch"),
    };
    Ok(MemoryOp::Add { adds, batch, worker_env, own })
}

/// The text of `file` (`-`: standard input).
fn read_text(file: &Path) -> anyhow::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

/// A batch file: the body of a batch add, read by its parser; its entries wait unless it or
/// `--no-wait` says not to.
fn read_batch(file: &Path, wait: bool) -> anyhow::Result<Vec<(String, AddRequest)>> {
    let unusable = || format!("{} is not a usable batch", file.display());
    let body: Body = serde_json::from_str(&read_text(file)?)
        .context("expected a JSON object with a `conversations` array")
        .with_context(unusable)?;
    let request = BatchRequest::read(body).map_err(invalid).with_context(unusable)?;
    let wait = wait && request.wait;
    let adds = request.adds.into_iter().map(|(id, add)| (id, AddRequest { wait, ..add }));
    Ok(adds.collect())
}

/// `memory jobs`: one job, the listing, or (`--run`) a build of the unfinished ones.
fn jobs(
    args: &MemoryJobsArgs,
    own: impl FnOnce(&StoreModelArgs) -> anyhow::Result<OwnSettings>,
) -> anyhow::Result<MemoryOp> {
    Ok(match args.job {
        _ if args.run => {
            let mut own = own(&args.models)?;
            own.service.workers = args.workers as usize;
            MemoryOp::RunJobs(own)
        }
        Some(id) => MemoryOp::Job(id),
        None => MemoryOp::Jobs(JobsRequest {
            conversation: args.conversation.clone(),
            unfinished: args.unfinished,
        }),
    })
}

/// `memory search`: the scope and the filters of the lines that may come back.
fn search(
    args: MemorySearchArgs,
    own: impl FnOnce(&StoreModelArgs) -> anyhow::Result<OwnSettings>,
) -> anyhow::Result<MemoryOp> {
    let (scope, conversation) = scope_of(args.scope);
    let filters = SearchFilters {
        speaker: args.speaker,
        from: args.from.and_then(|from| time_bound(&from, false)),
        to: args.to.and_then(|to| time_bound(&to, true)),
        conversation,
        tags: args.tags.into_iter().collect(),
    };
    let request = SearchRequest { query: args.query, k: args.k as u64, filters };
    Ok(MemoryOp::Search(scope, request, own(&args.models)?))
}

/// `memory facts`: which facts, as known when.
fn facts(args: MemoryFactsArgs) -> MemoryOp {
    let (scope, conversation) = scope_of(args.scope);
    let query = FactQuery {
        user: None,
        conversation,
        person: args.person,
        aspect: args.aspect,
        history: args.history,
        as_of: args.as_of.and_then(|at| time_bound(&at, true)),
    };
    MemoryOp::Facts(scope, query)
}

/// `mragent ask`, resolved.
#[derive(Debug, Clone)]
pub struct AskJob {
    /// A conversation, or a user's conversations.
    pub(crate) scope: Scope,
    /// The question, and the time to answer as of.
    pub(crate) request: AskRequest,
    /// Print the report as JSON.
    pub(crate) json: bool,
    /// Store and models (with the rules of `--meta-rules` in `own.service.rules`).
    pub(crate) own: OwnSettings,
}

impl AskJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: AskArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let mut own = OwnSettings::resolve(paths, &args.models, env)?;
        own.with_rules(paths, args.meta_rules.as_deref())?;
        own.service.answer = args.answer.gate(crate::agent::OWN_ANSWER_MODE);
        let scope = match (args.user, args.conversation) {
            (Some(user), _) => Scope::User(user),
            (None, conversation) => Scope::Conversation(conversation.unwrap_or_default()),
        };
        let as_of = args.as_of.and_then(|at| time_bound(&at, true));
        let request = AskRequest { question: args.question, stream: false, as_of };
        Ok(Self { scope, request, json: args.json, own })
    }
}

/// `mragent serve`, resolved.
#[derive(Debug, Clone)]
pub struct ServeJob {
    /// Address to listen on.
    pub bind: std::net::SocketAddr,
    /// Token (from `MRAGENT_SERVE_TOKEN`; empty is none), body limit, concurrency.
    pub options: ServeOptions,
    /// Store and models (with the session gap and the workers of each add, and the rules of
    /// `--meta-rules` that every ask uses in `own.service.rules`).
    pub own: OwnSettings,
}

impl ServeJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &ServeArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let token = env.var(crate::serve::TOKEN_ENV).filter(|token| !token.is_empty());
        let own = OwnSettings::for_service(paths, &args.service, env)?;
        let named_tokens = match env.var(crate::serve::TOKENS_ENV) {
            Some(text) => crate::serve::parse_named_tokens(&text).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        };
        let options = ServeOptions {
            token,
            named_tokens,
            max_body_bytes: args.max_body_bytes,
            max_concurrency: args.max_concurrency as usize,
            key_rate_per_minute: args.key_rate_per_minute,
            tls: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => {
                    Some(crate::serve::TlsFiles { cert: cert.clone(), key: key.clone() })
                }
                _ => None,
            },
        };
        Ok(Self { bind: args.bind, options, own })
    }
}

/// `mragent mcp`, resolved.
#[derive(Debug, Clone)]
pub struct McpJob {
    /// Store and models, as for `serve`.
    pub own: OwnSettings,
}

impl McpJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &McpArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        Ok(Self { own: OwnSettings::for_service(paths, &args.service, env)? })
    }
}
