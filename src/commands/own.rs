//! What the own-conversation commands (`memory …`, `ask`, `serve`) share: the project's store,
//! the embedder a conversation was recorded with, the [`MemoryService`] over the store (with
//! its models, or the store alone), and who the command line is to the operations.

use anyhow::Context as _;

use super::chat_client;
use crate::embedding::load_local_source;
use crate::llm::Client;
use crate::service::ops::{Access, Service};
use crate::service::{LOCAL_EMBEDDER, MemoryService, OwnEmbedder, Scope, ServiceSettings};
use crate::settings::{OwnSettings, ProjectPaths};
use crate::store::Store;

/// The service over the project's store, with `spec` as the embedder (`local` or a model id).
pub(super) async fn service(
    own: &OwnSettings,
    spec: &str,
) -> anyhow::Result<MemoryService<Client, OwnEmbedder>> {
    let store = open_store(&own.paths)?;
    let models = &own.models;
    let embedder = if spec == LOCAL_EMBEDDER {
        OwnEmbedder::Local(load_local_source(own.local_model.clone()).await?)
    } else {
        let config = models.llm_config(&models.build_model);
        let embedder = crate::llm::EmbedderConfig { model: spec.to_string(), batch_size: 96 };
        OwnEmbedder::Api(Box::new(
            crate::llm::build_embedder(&config, &embedder)
                .context("building the embedding client")?,
        ))
    };
    let chat = chat_client(models, &models.build_model)?;
    Ok(MemoryService::new(store, own.for_embedder(spec), chat, embedder))
}

/// The command line to the operations: the store's operator, reaching everything, its edits
/// logged as `cli`.
pub(super) fn operator() -> Access {
    Access::admin("cli")
}

/// Where the store-only service's clients point: nowhere (nothing it runs calls them; an
/// operation that did would fail with the connection refused on this port, and belongs with
/// the commands that build a full service).
const NO_ENDPOINT: &str = "http://127.0.0.1:9/v1";

/// The service over the store alone, for the operations that call no model (list, show,
/// forget, facts, correct, history, job, jobs, the undo of a correction): no embedder is
/// loaded and no key is needed. `spec` is the embedder it answers for (a conversation's facts
/// are checked against the one recorded with it).
pub(super) fn store_service(paths: &ProjectPaths, spec: &str) -> anyhow::Result<Service> {
    let config = crate::llm::LlmConfig::new(NO_ENDPOINT, Default::default(), "none");
    let chat = crate::llm::build_chat_model(&config).context("building the model client")?;
    let embedder = crate::llm::EmbedderConfig { model: spec.to_string(), batch_size: 1 };
    let embedder =
        crate::llm::build_embedder(&config, &embedder).context("building the embedding client")?;
    let settings = ServiceSettings::new(&paths.root, spec, "none", "none");
    let store = open_store(paths)?;
    Ok(MemoryService::new(store, settings, chat, OwnEmbedder::Api(Box::new(embedder))))
}

/// The project's store: `--store` (a PostgreSQL or SQLite URL), else the SQLite file
/// `data/store/mragent.sqlite`.
pub(super) fn open_store(paths: &ProjectPaths) -> anyhow::Result<Store> {
    if let Some(url) = &paths.store {
        return Store::open_url(url)
            .with_context(|| format!("opening the store {}", crate::store::shown_url(url)));
    }
    let path = Store::default_path(&paths.root);
    Store::open(&path).with_context(|| format!("opening the store {}", path.display()))
}

/// The embedder recorded for an existing conversation (an error naming the stored ones when
/// it does not exist).
pub(super) fn recorded_embedder(
    paths: &ProjectPaths,
    conversation: &str,
) -> anyhow::Result<String> {
    let store = open_store(paths)?;
    match store.info(conversation)? {
        Some(info) => Ok(info.embedder),
        None => Err(crate::store::StoreError::UnknownConversation(conversation.to_string()).into()),
    }
}

/// The embedder of a scope: its conversation's, or the first of the user's conversations'
/// (a query over a user needs all of them embedded alike; the service checks).
pub(super) fn scope_embedder(paths: &ProjectPaths, scope: &Scope) -> anyhow::Result<String> {
    match scope {
        Scope::Conversation(conversation) => recorded_embedder(paths, conversation),
        Scope::User(user) => match open_store(paths)?.list_of(Some(user))?.into_iter().next() {
            Some(info) => Ok(info.embedder),
            None => Err(crate::service::ServiceError::UnknownUser(user.clone()).into()),
        },
    }
}
