//! Command implementations that glue settings, data and the pipeline stages together.
//!
//! Each function here is what one CLI subcommand does after settings are resolved; `main.rs`
//! only dispatches and prints. Orchestration errors are `anyhow` with context.

use std::time::Instant;

use anyhow::Context as _;

use crate::agent::{AnswerSettings, MemgasMemory, RunSummary, SampleMemory};
use crate::cli::{DataArg, EmbedArgs, EvalArgs, RetrieveArgs, RunCommandArgs};
use crate::dataset::Conversation;
use crate::dataset::DatasetKind;
use crate::eval::{EvalSettings, EvalSummary};
use crate::ingest::{BuildSettings, BuildSummary, GranuleSummary};
use crate::llm::{ChatModel as _, ChatRequest, Client, Message};
use crate::settings::{DataSettings, ModelChoice, ModelSettings, ProjectPaths};

/// What `ping` found out.
#[derive(Debug, Clone, PartialEq)]
pub struct PingReport {
    /// Endpoint base URL.
    pub base_url: String,
    /// Model id asked.
    pub model: String,
    /// The model's reply, trimmed.
    pub reply: String,
    /// Round-trip time in milliseconds.
    pub latency_ms: u128,
    /// Tokens of the call.
    pub usage: crate::llm::Usage,
}

impl std::fmt::Display for PingReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {}: replied {:?} in {} ms ({} prompt + {} completion tokens)",
            self.model,
            self.base_url,
            self.reply,
            self.latency_ms,
            self.usage.prompt_tokens,
            self.usage.completion_tokens
        )
    }
}

/// Send one tiny request to the answering model through the full client stack.
pub async fn ping(settings: &ModelSettings) -> anyhow::Result<PingReport> {
    let config = settings.llm_config(&settings.answer_model);
    let client = crate::llm::build_chat_model(&config).context("building the model client")?;
    let text = crate::prompts::PING.render(&[]).context("rendering the ping prompt")?;
    let mut request = ChatRequest::new(config.model.clone(), vec![Message::user(text)]);
    request.max_tokens = Some(16);
    request.temperature = Some(0.0);
    let started = Instant::now();
    let response =
        client.chat(&request).await.with_context(|| format!("calling {}", config.model))?;
    Ok(PingReport {
        base_url: settings.base_url.clone(),
        model: config.model,
        reply: response.message.content.unwrap_or_default().trim().to_string(),
        latency_ms: started.elapsed().as_millis(),
        usage: response.usage,
    })
}

/// Score a run's result files, with the LLM judge when a judge model is given.
pub async fn eval(
    paths: &ProjectPaths,
    args: &EvalArgs,
    models: &ModelSettings,
) -> anyhow::Result<EvalSummary> {
    let dataset = match args.data {
        DataArg::Locomo => DatasetKind::Locomo,
        DataArg::Lm => DatasetKind::LongMemEval,
    };
    let mut settings = EvalSettings::new(
        &paths.root,
        dataset,
        &models.build_model.alias,
        &crate::fsutil::safe_name(&args.file, '-'),
    );
    let under_root = |path: &std::path::Path| {
        if path.is_absolute() { path.to_path_buf() } else { paths.root.join(path) }
    };
    if let Some(file) = &args.data_file {
        settings.data_file = under_root(file);
    }
    settings.sample = args.sample.clone();
    settings.question_type =
        args.ca.map(crate::dataset::LongMemEvalType::from_ca_index).transpose()?;
    settings.partial = args.partial;
    settings.judge_runs = args.judge_runs;
    settings.concurrency = args.judge_workers as usize;
    settings.protocol = match args.judge_protocol {
        crate::cli::JudgeProtocolArg::Mem0 => crate::eval::judge::JudgeProtocol::Mem0,
        crate::cli::JudgeProtocolArg::Strict => crate::eval::judge::JudgeProtocol::Strict,
    };
    settings.judge_prompt = args.judge_prompt.as_deref().map(under_root);
    settings.audit_file = match (&args.audit_file, args.no_audit) {
        (_, true) => None,
        (Some(file), false) => Some(under_root(file)),
        (None, false) => settings.audit_file,
    };
    settings.overall_with_adversarial = args.overall_with_adversarial;
    let judge: Option<Client> = match &args.judge_model {
        Some(name) => {
            models.require_key()?;
            let choice = ModelChoice::resolve(name);
            settings.judge_model = Some(choice.id.clone());
            Some(
                crate::llm::build_chat_model(&models.llm_config(&choice))
                    .context("building the judge client")?,
            )
        }
        None => None,
    };
    crate::eval::evaluate(&settings, judge.as_ref()).await
}

/// The build settings for the selected data and models.
pub fn build_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    workers: u32,
) -> BuildSettings {
    let mut settings = BuildSettings::new(
        paths.root.join("data"),
        data.kind,
        &models.build_model.alias,
        &models.build_model.id,
    );
    settings.lm_batch = data.lm_batch as usize;
    settings.workers = workers.max(1) as usize;
    settings
}

/// The API embedder for the endpoint in `models`.
pub fn api_embedder(
    models: &ModelSettings,
    embed: &EmbedArgs,
) -> anyhow::Result<crate::llm::EmbedClient> {
    let config = models.llm_config(&models.build_model);
    let embedder = crate::llm::EmbedderConfig {
        model: embed.embed_model.clone(),
        batch_size: embed.embed_batch as usize,
    };
    crate::llm::build_embedder(&config, &embedder).context("building the embedding client")
}

/// Build (or resume building) the memory of every conversation.
pub async fn build(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    embed: &EmbedArgs,
    workers: u32,
    quiet: bool,
    conversations: &[Conversation],
) -> anyhow::Result<BuildSummary> {
    let mut settings = build_settings(paths, data, models, workers);
    settings.progress = !quiet;
    let chat = crate::llm::build_chat_model(&models.llm_config(&models.build_model))
        .context("building the model client")?;
    let embedder = api_embedder(models, embed)?;
    crate::ingest::build(&settings, &chat, &embedder, conversations).await
}

/// Generate (or resume) the MemGAS granules of every conversation.
pub async fn build_granules(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    workers: u32,
    quiet: bool,
    conversations: &[Conversation],
) -> anyhow::Result<GranuleSummary> {
    let mut settings = build_settings(paths, data, models, workers);
    settings.progress = !quiet;
    let chat = crate::llm::build_chat_model(&models.llm_config(&models.build_model))
        .context("building the model client")?;
    crate::ingest::build_granules(&settings, &chat, conversations).await
}

/// Evaluate retrieval methods offline with the local embedder.
pub fn retrieve(
    paths: &ProjectPaths,
    data: &DataSettings,
    args: &RetrieveArgs,
) -> anyhow::Result<crate::retrieval::eval::RetrieveReport> {
    use crate::retrieval::Method;
    let mut settings = crate::retrieval::eval::RetrieveSettings::new(&paths.root, data.kind);
    settings.data_path = data.file.clone();
    settings.samples = data.sample.iter().cloned().collect();
    settings.embed_model_dir = args.embed_model_dir.clone();
    settings.embed_threads = args.embed_threads;
    settings.llm_units = args.llm_units.clone();
    if !args.method.iter().any(|name| name.trim().eq_ignore_ascii_case("all")) {
        settings.methods = args
            .method
            .iter()
            .map(|name| {
                Method::parse(name).with_context(|| {
                    let known: Vec<&str> =
                        Method::ALL.iter().map(|method| method.as_str()).collect();
                    format!("unknown retrieval method `{name}`; known: {}, all", known.join(", "))
                })
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(model) = &args.granules {
        let choice = ModelChoice::resolve(model);
        settings.granules =
            Some(BuildSettings::new(paths.root.join("data"), data.kind, &choice.alias, &choice.id));
    }
    crate::retrieval::eval::run_retrieval_eval(&settings)
}

/// The main job: build every selected conversation's memory (cached), index it for MemGAS, and
/// answer its questions; Ctrl-C stops taking new questions and lets in-flight ones finish.
pub async fn run(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    args: &RunCommandArgs,
    quiet: bool,
    conversations: Vec<Conversation>,
) -> anyhow::Result<RunSummary> {
    let run = crate::settings::RunSettings::resolve(&args.run)?;
    let build_settings = {
        let mut settings = build_settings(paths, data, models, run.workers as u32);
        settings.progress = !quiet;
        settings
    };
    let build_chat = crate::llm::build_chat_model(&models.llm_config(&models.build_model))
        .context("building the model client")?;
    let embedder = api_embedder(models, &args.embed)?;
    let built =
        crate::ingest::build(&build_settings, &build_chat, &embedder, &conversations).await?;
    if !built.is_complete() {
        tracing::warn!(
            failed = built.failed().count(),
            "some sessions failed to build; their turns are missing from the memory until a rerun builds them"
        );
    }

    let local = local_embedder(paths, args).await?;
    let embedder_name = crate::llm::Embedder::name(&embedder).to_string();
    let samples =
        load_samples(paths, data, &build_settings, &embedder_name, local.as_ref(), conversations)
            .await?;

    let mut settings = AnswerSettings::new(
        &paths.root,
        data.kind,
        &models.build_model.alias,
        &models.answer_model.id,
        &run.file,
    );
    settings.workers = run.workers;
    settings.seed = args.seed;
    settings.progress = !quiet;
    settings.traces = !args.no_traces;
    let answer_chat = crate::llm::build_chat_model(&models.llm_config(&models.answer_model))
        .context("building the model client")?;
    let stop = async {
        // An error installing the handler means no Ctrl-C support; never stop early then.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        eprintln!("interrupted: finishing the questions in flight, starting no new ones");
    };
    crate::agent::answer_all(&settings, &samples, &answer_chat, &embedder, stop).await
}

/// The local embedder MemGAS indexes with, unless `--no-memgas`.
async fn local_embedder(
    paths: &ProjectPaths,
    args: &RunCommandArgs,
) -> anyhow::Result<Option<crate::embedding::LocalEmbedder>> {
    if args.no_memgas {
        return Ok(None);
    }
    let source = crate::embedding::ModelSource {
        explicit_dir: args.embed_model_dir.clone(),
        models_root: paths.root.join("data").join("models"),
    };
    let embedder = tokio::task::spawn_blocking(move || {
        crate::embedding::LocalEmbedder::from_source(
            &source,
            crate::embedding::LocalEmbedderOptions::default(),
        )
    })
    .await
    .context("loading the local embedder")??;
    Ok(Some(embedder))
}

/// Every conversation's memory from its finished build (`embedder_name` names the build's
/// embedder), with a MemGAS index when a `local` embedder is given.
async fn load_samples(
    paths: &ProjectPaths,
    data: &DataSettings,
    build_settings: &BuildSettings,
    embedder_name: &str,
    local: Option<&crate::embedding::LocalEmbedder>,
    conversations: Vec<Conversation>,
) -> anyhow::Result<Vec<SampleMemory>> {
    let cache = crate::retrieval::EmbeddingCache::new(
        &paths.root.join("data"),
        data.kind.as_str(),
        crate::embedding::LOCAL_EMBEDDER_NAME,
    );
    let mut samples = Vec::with_capacity(conversations.len());
    for conversation in conversations {
        let memory = crate::ingest::load_memory(build_settings, embedder_name, &conversation)
            .with_context(|| format!("loading the memory of {}", conversation.sample_id))?;
        let memgas = match local {
            Some(local) => {
                let granules = crate::ingest::load_granules(build_settings, &conversation)?;
                let units =
                    crate::retrieval::eval::session_units(&conversation, None, granules.as_ref());
                let index = crate::retrieval::build_index(
                    units,
                    local,
                    Some((&cache, &conversation.sample_id)),
                    crate::retrieval::IndexOptions::default(),
                )
                .await
                .with_context(|| format!("indexing {} for MemGAS", conversation.sample_id))?;
                Some(MemgasMemory::new(index, local.clone()))
            }
            None => None,
        };
        let mut sample = SampleMemory::from_built(conversation, memory);
        sample.memgas = memgas;
        samples.push(sample);
    }
    Ok(samples)
}
