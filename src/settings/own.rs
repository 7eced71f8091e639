//! The own-conversation commands, `memory …`, `ask` and `serve`: [`OwnSettings`] (the store,
//! the models, the embedders) and one job per command.

use std::path::{Path, PathBuf};

use super::{Env, MetaRules, ModelSettings, ProjectPaths};
use crate::cli::{AskArgs, MemoryCommand, ServeArgs, StoreModelArgs};
use crate::embedding::ModelSource;
use crate::serve::ServeOptions;
use crate::service::ServiceSettings;

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
        let local_model = ModelSource {
            explicit_dir: args.embed.embed_model_dir.clone(),
            models_root: paths.root.join("data").join("models"),
        };
        Ok(Self { paths: paths.clone(), models, service, local_model })
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

/// `mragent memory …`, resolved.
#[derive(Debug, Clone)]
pub enum MemoryJob {
    /// Add the messages of `file` (`-`: standard input).
    Add {
        /// Conversation id.
        conversation: String,
        /// The messages file.
        file: PathBuf,
        /// Print the report as JSON.
        json: bool,
        /// Store and models (with the session gap and the workers of the build).
        own: OwnSettings,
    },
    /// Rank memory lines for `query`.
    Search {
        /// Conversation id.
        conversation: String,
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
}

impl MemoryJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        command: MemoryCommand,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        Ok(match command {
            MemoryCommand::Add(args) => {
                let mut own = OwnSettings::resolve(paths, &args.models, env)?;
                own.service.session_gap = args.session_gap;
                own.service.workers = args.workers as usize;
                let (conversation, file, json) = (args.conversation, args.file, args.json);
                Self::Add { conversation, file, json, own }
            }
            MemoryCommand::Search(args) => Self::Search {
                own: OwnSettings::resolve(paths, &args.models, env)?,
                conversation: args.conversation,
                query: args.query,
                k: args.k,
                json: args.json,
            },
            MemoryCommand::List(args) => Self::List { paths: paths.clone(), json: args.json },
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
}

/// `mragent ask`, resolved.
#[derive(Debug, Clone)]
pub struct AskJob {
    /// Conversation id.
    pub conversation: String,
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
        Ok(Self { conversation: args.conversation, question: args.question, json: args.json, own })
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
        let mut own = OwnSettings::resolve(paths, &args.models, env)?;
        own.service.session_gap = args.session_gap;
        own.service.workers = args.workers as usize;
        own.with_rules(paths, args.meta_rules.as_deref())?;
        let options = ServeOptions {
            token,
            max_body_bytes: args.max_body_bytes,
            max_concurrency: args.max_concurrency as usize,
        };
        Ok(Self { bind: args.bind, options, own })
    }
}
