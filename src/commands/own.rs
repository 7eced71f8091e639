//! The own-conversation commands (`memory …`, `ask`, `serve`): resolve the store, the models
//! and the embedder, then call the [`MemoryService`].

use std::io::Read as _;

use anyhow::Context as _;

use crate::cli::{
    AskArgs, MemoryAddArgs, MemoryForgetArgs, MemorySearchArgs, ServeArgs, StoreEmbedArgs,
};
use crate::embedding::load_local_async;
use crate::llm::Client;
use crate::service::{
    AddReport, AskReport, LOCAL_EMBEDDER, MemoryService, OwnEmbedder, SearchHit, ServiceSettings,
};
use crate::settings::{ModelSettings, ProjectPaths};
use crate::store::Store;

/// The service over the project's store, with `spec` as the embedder (`local` or a model id).
pub async fn service(
    paths: &ProjectPaths,
    models: &ModelSettings,
    spec: &str,
    embed: &StoreEmbedArgs,
) -> anyhow::Result<MemoryService<Client, OwnEmbedder>> {
    let store = open_store(paths)?;
    let embedder = if spec == LOCAL_EMBEDDER {
        let data_dir = paths.root.join("data");
        OwnEmbedder::Local(load_local_async(embed.embed_model_dir.clone(), data_dir).await?)
    } else {
        let config = models.llm_config(&models.build_model);
        let embedder = crate::llm::EmbedderConfig { model: spec.to_string(), batch_size: 96 };
        OwnEmbedder::Api(Box::new(
            crate::llm::build_embedder(&config, &embedder)
                .context("building the embedding client")?,
        ))
    };
    let chat = crate::llm::build_chat_model(&models.llm_config(&models.build_model))
        .context("building the model client")?;
    let mut settings =
        ServiceSettings::new(&paths.root, spec, &models.build_model.alias, &models.build_model.id);
    settings.answer_model = models.answer_model.id.clone();
    Ok(MemoryService::new(store, settings, chat, embedder))
}

/// The project's store (`data/store/mragent.sqlite`).
pub fn open_store(paths: &ProjectPaths) -> anyhow::Result<Store> {
    let path = Store::default_path(&paths.root);
    Store::open(&path).with_context(|| format!("opening the store {}", path.display()))
}

/// The embedder recorded for an existing conversation (an error naming the stored ones when
/// it does not exist).
fn recorded_embedder(paths: &ProjectPaths, conversation: &str) -> anyhow::Result<String> {
    let store = open_store(paths)?;
    match store.info(conversation)? {
        Some(info) => Ok(info.embedder),
        None => Err(crate::store::StoreError::UnknownConversation(conversation.to_string()).into()),
    }
}

/// `memory add`: parse first (a bad file changes nothing), then add.
pub async fn memory_add(
    paths: &ProjectPaths,
    args: &MemoryAddArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<AddReport> {
    let text = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading messages from stdin")?;
        text
    } else {
        std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?
    };
    let messages = crate::convo::parse(&text)
        .with_context(|| format!("{} is not a usable conversation", args.file.display()))?;
    crate::store::check_conversation_id(&args.conversation)?;
    crate::service::check_limits(&messages)
        .with_context(|| format!("{} cannot be added", args.file.display()))?;
    let models = ModelSettings::resolve(&args.models.model, env)?;
    models.require_key()?;
    let spec = match open_store(paths)?.info(&args.conversation)? {
        Some(info) => info.embedder,
        None => args.models.embed.embedder.clone(),
    };
    let mut service = service(paths, &models, &spec, &args.models.embed).await?;
    service.settings_mut().session_gap = args.session_gap;
    service.settings_mut().workers = args.workers as usize;
    Ok(service.add(&args.conversation, messages).await?)
}

/// What `memory forget` removed.
#[derive(Debug)]
pub enum Forgotten {
    /// A whole conversation.
    Conversation(crate::store::ConversationInfo),
    /// One message, and the rebuild of its session.
    Message(crate::store::ForgottenMessage, AddReport),
}

/// `memory forget`: a conversation (no model needed), or one message (its session is rebuilt,
/// which needs the model).
pub async fn memory_forget(
    paths: &ProjectPaths,
    args: &MemoryForgetArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Forgotten> {
    let Some(message) = &args.message else {
        let store = open_store(paths)?;
        let _lock = store.lock_conversation(&args.conversation)?;
        return Ok(Forgotten::Conversation(store.forget(&args.conversation)?));
    };
    let spec = recorded_embedder(paths, &args.conversation)?;
    let models = ModelSettings::resolve(&args.models.model, env)?;
    models.require_key()?;
    let service = service(paths, &models, &spec, &args.models.embed).await?;
    let (forgotten, report) = service.forget_message(&args.conversation, message).await?;
    Ok(Forgotten::Message(forgotten, report))
}

/// `memory search`.
pub async fn memory_search(
    paths: &ProjectPaths,
    args: &MemorySearchArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Vec<SearchHit>> {
    let spec = recorded_embedder(paths, &args.conversation)?;
    let models = ModelSettings::resolve(&args.models.model, env)?;
    if spec != LOCAL_EMBEDDER {
        models.require_key()?;
    }
    let service = service(paths, &models, &spec, &args.models.embed).await?;
    Ok(service.search(&args.conversation, &args.query, args.k).await?)
}

/// `ask`.
pub async fn ask(
    paths: &ProjectPaths,
    args: &AskArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<AskReport> {
    let spec = recorded_embedder(paths, &args.conversation)?;
    let models = ModelSettings::resolve(&args.models.model, env)?;
    models.require_key()?;
    let service = service(paths, &models, &spec, &args.models.embed).await?;
    Ok(service.ask(&args.conversation, &args.question).await?)
}

/// `serve`: the service with the embedder for new conversations, then the HTTP server until
/// Ctrl-C.
pub async fn serve(
    paths: &ProjectPaths,
    args: &ServeArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    let token = env(crate::serve::TOKEN_ENV).filter(|token| !token.is_empty());
    let models = ModelSettings::resolve(&args.models.model, &env)?;
    models.require_key()?;
    let mut service =
        service(paths, &models, &args.models.embed.embedder, &args.models.embed).await?;
    service.settings_mut().session_gap = args.session_gap;
    service.settings_mut().workers = args.workers as usize;
    let options = crate::serve::ServeOptions {
        token,
        max_body_bytes: args.max_body_bytes,
        max_concurrency: args.max_concurrency as usize,
    };
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .with_context(|| format!("binding {}", args.bind))?;
    tracing::info!(address = %args.bind, auth = options.token.is_some(), "serving");
    eprintln!("serving on http://{} (OpenAPI at /openapi.json)", args.bind);
    let shutdown = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    crate::serve::serve(listener, std::sync::Arc::new(service), options, shutdown).await
}

/// `memory show`: the sessions and messages of a conversation, as text or JSON.
pub fn render_conversation(
    stored: &crate::store::StoredConversation,
    json: bool,
) -> anyhow::Result<String> {
    let sessions: Vec<serde_json::Value> = stored
        .sessions
        .iter()
        .map(|session| {
            serde_json::json!({
                "session": format!("D{}", session.number),
                "key": session.key,
                "date": session.to_session().date_time,
                "built": session.outputs.is_some(),
                "failure": session.failure,
                "messages": session.messages,
            })
        })
        .collect();
    if json {
        let value = serde_json::json!({"conversation": stored.info, "sessions": sessions});
        return Ok(format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut out = format!(
        "{}: {} messages in {} sessions ({} built), embedder {}\n",
        stored.info.id,
        stored.info.messages,
        stored.info.sessions,
        stored.info.built_sessions,
        stored.info.embedder
    );
    for session in &stored.sessions {
        let date = session.to_session().date_time.unwrap_or_else(|| "no date".into());
        let built = match (&session.outputs, &session.failure) {
            (Some(_), _) => String::new(),
            (None, Some(failure)) => format!(
                " (not built: failed {} time(s), last: {}; the next add retries it)",
                failure.attempts, failure.error
            ),
            (None, None) => " (not built yet; the next add builds it)".to_string(),
        };
        out.push_str(&format!("D{} {date}{built}\n", session.number));
        for (position, message) in session.messages.iter().enumerate() {
            out.push_str(&format!(
                "  D{}:{} {}: {}  [id {}]\n",
                session.number,
                position + 1,
                message.speaker,
                message.text,
                message.id
            ));
        }
    }
    Ok(out)
}
