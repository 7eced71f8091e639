//! The own-conversation commands, `memory …`, `ask`, `serve` and `mcp`: [`OwnSettings`] (the store,
//! the models, the embedders) and one job per command.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{Env, MetaRules, ModelSettings, ProjectPaths};
use crate::cli::{
    AskArgs, McpArgs, MemoryAddArgs, MemoryCommand, MemoryFactsArgs, MemoryJobsArgs,
    MemorySearchArgs, ScopeArgs, ServeArgs, ServiceArgs, StoreModelArgs,
};
use crate::embedding::ModelSource;
use crate::serve::ServeOptions;
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
        if let Some(seconds) = env.var("MRAGENT_JOB_LEASE") {
            let seconds: u64 = seconds
                .trim()
                .parse()
                .ok()
                .filter(|seconds| (1..=3600).contains(seconds))
                .with_context(|| {
                    format!("MRAGENT_JOB_LEASE={seconds:?}: expected seconds from 1 to 3600")
                })?;
            service.job_lease = std::time::Duration::from_secs(seconds);
        }
        if let Some(seconds) = env.var("MRAGENT_ADD_WAIT") {
            let seconds: u64 = seconds
                .trim()
                .parse()
                .ok()
                .filter(|seconds| (1..=600).contains(seconds))
                .with_context(|| {
                    format!("MRAGENT_ADD_WAIT={seconds:?}: expected seconds from 1 to 600")
                })?;
            service.add_wait = std::time::Duration::from_secs(seconds);
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

/// What `memory add` adds.
#[derive(Debug, Clone)]
pub enum AddInput {
    /// The messages of `file` to `conversation`.
    One {
        /// Conversation id.
        conversation: String,
        /// The messages file.
        file: PathBuf,
        /// The conversation's user and agent, and the messages' tags.
        scope: AddScope,
    },
    /// A batch file: `{"conversations": [{"conversation", "messages", …}]}`.
    Batch {
        /// The file.
        file: PathBuf,
    },
}

/// `mragent memory …`, resolved.
#[derive(Debug, Clone)]
pub enum MemoryJob {
    /// Add the messages of one file, or a batch (`-`: standard input).
    Add {
        /// What to add.
        input: AddInput,
        /// Whether to build before returning (else: queue a job and start a worker).
        wait: bool,
        /// The endpoint, model and embedder options as environment variables, for a worker.
        worker_env: Vec<(&'static str, String)>,
        /// Print the report as JSON.
        json: bool,
        /// Store and models (with the session gap and the workers of the build).
        own: OwnSettings,
    },
    /// List or show background jobs, or build the unfinished ones.
    Jobs {
        /// One job.
        job: Option<i64>,
        /// Only jobs of this conversation.
        conversation: Option<String>,
        /// Only unfinished jobs.
        unfinished: bool,
        /// Build the unfinished jobs now.
        run: bool,
        /// Print JSON.
        json: bool,
        /// Store and models.
        own: OwnSettings,
    },
    /// Rank memory lines for `query`.
    Search {
        /// A conversation, or a user's conversations.
        scope: Scope,
        /// Which lines may come back.
        filters: SearchFilters,
        /// What to look for.
        query: String,
        /// How many lines.
        k: usize,
        /// Print JSON.
        json: bool,
        /// Store and models.
        own: OwnSettings,
    },
    /// List the stored conversations.
    List {
        /// The project.
        paths: ProjectPaths,
        /// Only this user's.
        user: Option<String>,
        /// Print JSON.
        json: bool,
    },
    /// Show one conversation.
    Show {
        /// The project.
        paths: ProjectPaths,
        /// Conversation id.
        conversation: String,
        /// Print JSON.
        json: bool,
    },
    /// Forget a conversation, or one message of it.
    Forget {
        /// The project.
        paths: ProjectPaths,
        /// Conversation id.
        conversation: String,
        /// The message to forget and what rebuilding its session takes (`None`: the whole
        /// conversation, which needs no model, so none is resolved).
        message: Option<(String, OwnSettings)>,
    },
    /// List facts.
    Facts {
        /// The project.
        paths: ProjectPaths,
        /// Which facts.
        query: FactQuery,
        /// Print JSON.
        json: bool,
    },
    /// Correct one fact.
    Correct {
        /// The project.
        paths: ProjectPaths,
        /// The fact's id.
        fact: i64,
        /// Its new value.
        value: String,
        /// Print JSON.
        json: bool,
    },
    /// Show the audit log.
    History {
        /// The project.
        paths: ProjectPaths,
        /// Only this user's conversations.
        user: Option<String>,
        /// Only this conversation.
        conversation: Option<String>,
        /// Print JSON.
        json: bool,
    },
    /// Revert one edit (an undone forget rebuilds the session, which needs the model).
    Undo {
        /// The edit's id.
        edit: i64,
        /// Print JSON.
        json: bool,
        /// Store and models.
        own: OwnSettings,
    },
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

impl MemoryJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        command: MemoryCommand,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        Ok(match command {
            MemoryCommand::Add(args) => Self::add(paths, args, env)?,
            MemoryCommand::Jobs(args) => Self::jobs(paths, args, env)?,
            MemoryCommand::Search(args) => Self::search(paths, args, env)?,
            MemoryCommand::List(args) => {
                Self::List { paths: paths.clone(), user: args.user, json: args.json }
            }
            MemoryCommand::Facts(args) => Self::facts(paths, args),
            MemoryCommand::Correct(args) => Self::Correct {
                paths: paths.clone(),
                fact: args.fact,
                value: args.value,
                json: args.json,
            },
            MemoryCommand::History(args) => Self::History {
                paths: paths.clone(),
                user: args.user,
                conversation: args.conversation,
                json: args.json,
            },
            MemoryCommand::Undo(args) => Self::Undo {
                own: OwnSettings::resolve(paths, &args.models, env)?,
                edit: args.edit,
                json: args.json,
            },
            MemoryCommand::Show(args) => Self::Show {
                paths: paths.clone(),
                conversation: args.conversation,
                json: args.json,
            },
            MemoryCommand::Forget(args) => Self::Forget {
                paths: paths.clone(),
                message: match args.message {
                    Some(message) => {
                        Some((message, OwnSettings::resolve(paths, &args.models, env)?))
                    }
                    None => None,
                },
                conversation: args.conversation,
            },
        })
    }

    /// `memory add`: one file or a batch, the build's settings, and a worker's environment.
    fn add(paths: &ProjectPaths, args: MemoryAddArgs, env: &impl Env) -> anyhow::Result<Self> {
        let mut own = OwnSettings::resolve(paths, &args.models, env)?;
        own.service.session_gap = args.session_gap;
        own.service.workers = args.workers as usize;
        let scope =
            AddScope { user: args.user, agent: args.agent, tags: args.tags.into_iter().collect() };
        let mut worker_env = args.models.as_env();
        worker_env.push(("MRAGENT_WORKERS", args.workers.to_string()));
        let input = match (args.batch, args.conversation, args.file) {
            (Some(file), _, _) => AddInput::Batch { file },
            (None, Some(conversation), Some(file)) => AddInput::One { conversation, file, scope },
            // clap requires both unless `--batch` is given.
            _ => anyhow::bail!("memory add needs --conversation and a file, or --batch"),
        };
        Ok(Self::Add { input, wait: !args.no_wait, worker_env, json: args.json, own })
    }

    /// `memory jobs`: which jobs to list or run, with the build's workers.
    fn jobs(paths: &ProjectPaths, args: MemoryJobsArgs, env: &impl Env) -> anyhow::Result<Self> {
        let mut own = OwnSettings::resolve(paths, &args.models, env)?;
        own.service.workers = args.workers as usize;
        Ok(Self::Jobs {
            job: args.job,
            conversation: args.conversation,
            unfinished: args.unfinished,
            run: args.run,
            json: args.json,
            own,
        })
    }

    /// `memory search`: the scope and the filters of the lines that may come back.
    fn search(
        paths: &ProjectPaths,
        args: MemorySearchArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let (scope, conversation) = scope_of(args.scope);
        let filters = SearchFilters {
            speaker: args.speaker,
            from: args.from.and_then(|from| time_bound(&from, false)),
            to: args.to.and_then(|to| time_bound(&to, true)),
            conversation,
            tags: args.tags.into_iter().collect(),
        };
        Ok(Self::Search {
            own: OwnSettings::resolve(paths, &args.models, env)?,
            scope,
            filters,
            query: args.query,
            k: args.k,
            json: args.json,
        })
    }

    /// `memory facts`: which facts, as known when.
    fn facts(paths: &ProjectPaths, args: MemoryFactsArgs) -> Self {
        let (user, conversation) = (args.scope.user, args.scope.conversation);
        let query = FactQuery {
            user,
            conversation,
            person: args.person,
            aspect: args.aspect,
            history: args.history,
            as_of: args.as_of.and_then(|at| time_bound(&at, true)),
        };
        Self::Facts { paths: paths.clone(), query, json: args.json }
    }
}

/// `mragent ask`, resolved.
#[derive(Debug, Clone)]
pub struct AskJob {
    /// A conversation, or a user's conversations.
    pub scope: Scope,
    /// Answer as known at this time (RFC 3339 UTC).
    pub as_of: Option<String>,
    /// The question.
    pub question: String,
    /// Print the report as JSON.
    pub json: bool,
    /// Store and models (with the rules of `--meta-rules` in `own.service.rules`).
    pub own: OwnSettings,
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
        Ok(Self { scope, as_of, question: args.question, json: args.json, own })
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
