//! Command implementations that glue settings, data and the pipeline stages together.
//!
//! Each function here is what one CLI subcommand does after settings are resolved; `main.rs`
//! only dispatches and prints. Orchestration errors are `anyhow` with context.

pub mod own;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;

mod guard;
mod manifest;
mod run;

pub use self::guard::{LockHolder, RunLock, host_name};
pub use self::manifest::{Manifest, endpoint_host, sha256_hex};
pub use self::run::{RunOutcome, run, select_shard};

use crate::cli::{DataArg, EmbedArgs, EvalArgs, RetrieveArgs};
use crate::dataset::Conversation;
use crate::dataset::DatasetKind;
use crate::eval::{EvalSettings, EvalSummary};
use crate::ingest::{BuildSettings, BuildSummary, GranuleSummary};
use crate::llm::fatal::{AfterFatal, FatalLatch, Latched};
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

/// What the ping prompt asks the model to answer: "forty-two" in digits. The digits are not
/// in the prompt, so a server that echoes the prompt (or answers without a chat model) fails.
pub const PING_ANSWER: &str = "42";

/// Send one tiny request to the answering model through the full client stack and check that
/// the reply says what the prompt asked for.
pub async fn ping(settings: &ModelSettings) -> anyhow::Result<PingReport> {
    let config = settings.llm_config(&settings.answer_model);
    let client = crate::llm::build_chat_model(&config).context("building the model client")?;
    let text = crate::prompts::PING.render(&[]).context("rendering the ping prompt")?;
    let mut request = ChatRequest::new(config.model.clone(), vec![Message::user(text)]);
    request.max_tokens = client.max_tokens(crate::llm::Step::Ping);
    request.temperature = Some(0.0);
    let started = Instant::now();
    let response =
        client.chat(&request).await.with_context(|| format!("calling {}", config.model))?;
    let reply = response.message.content.unwrap_or_default().trim().to_string();
    check_ping_reply(&reply).map_err(|problem| {
        anyhow::anyhow!(
            "{} at {} answered, but not as asked: {problem}; check --model (MRAGENT_MODEL) and that the server runs an instruction-following chat model",
            config.model,
            settings.base_url
        )
    })?;
    Ok(PingReport {
        base_url: settings.base_url.clone(),
        model: config.model,
        reply,
        latency_ms: started.elapsed().as_millis(),
        usage: response.usage,
    })
}

/// Whether a ping reply is the asked-for [`PING_ANSWER`]: a short reply holding it as a word
/// of its own (`42`, `42.`, `"42"`, `The answer is 42`), not an echo of the prompt.
pub fn check_ping_reply(reply: &str) -> Result<(), String> {
    const MAX_WORDS: usize = 8;
    let prompt_words = ["connectivity", "mragent", "forty-two", "digits"];
    let lower = reply.to_lowercase();
    if prompt_words.iter().any(|word| lower.contains(word)) {
        return Err(format!("the reply {reply:?} repeats the prompt instead of answering it"));
    }
    let words: Vec<&str> = crate::text::alphanumeric_runs(reply).collect();
    if words.len() > MAX_WORDS || !words.contains(&PING_ANSWER) {
        return Err(format!("expected the reply {PING_ANSWER:?}, got {reply:?}"));
    }
    Ok(())
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
    // The first refused key or unknown model stops the whole evaluation with one message; the
    // judgements already made are cached and a rerun keeps them.
    let latch = Arc::new(FatalLatch::default());
    let judge = judge
        .as_ref()
        .map(|client| Latched::sharing(client, &latch, models.key_variable, AfterFatal::Wait));
    tokio::select! {
        biased;
        cause = latch.tripped() => Err(anyhow::anyhow!("judging stopped: {cause}")),
        summary = crate::eval::evaluate(&settings, judge.as_ref()) => summary,
    }
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

/// Evaluate retrieval methods offline with the local embedder; stops (writing the tables of the
/// conversations finished) when `stop` is set.
pub fn retrieve(
    paths: &ProjectPaths,
    data: &DataSettings,
    args: &RetrieveArgs,
    quiet: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<crate::tune::RetrieveReport> {
    crate::tune::run_retrieval_eval_until(&retrieve_settings(paths, data, args, quiet)?, stop)
}

/// `retrieve --folds`: leave-one-conversation-out tuning and held-out scores.
pub fn retrieve_folds(
    paths: &ProjectPaths,
    data: &DataSettings,
    args: &RetrieveArgs,
    quiet: bool,
) -> anyhow::Result<crate::tune::FoldsOutcome> {
    crate::tune::run_retrieval_folds(&retrieve_settings(paths, data, args, quiet)?)
}

/// The settings of `retrieve` from its arguments.
fn retrieve_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    args: &RetrieveArgs,
    quiet: bool,
) -> anyhow::Result<crate::tune::RetrieveSettings> {
    use crate::retrieval::Method;
    let mut settings = crate::tune::RetrieveSettings::new(&paths.root, data.kind);
    settings.data_path = data.file.clone();
    settings.samples = data.sample.iter().cloned().collect();
    retrieve_selection(data, &mut settings)?;
    settings.progress = !quiet;
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
    Ok(settings)
}

/// The dataset flags `run` shares with `retrieve`: honoured where they mean something for
/// retrieval, refused with the reason where they do not (never silently ignored).
fn retrieve_selection(
    data: &DataSettings,
    settings: &mut crate::tune::RetrieveSettings,
) -> anyhow::Result<()> {
    if data.lm_batch != 1 {
        anyhow::bail!(
            "--lm-batch groups sessions into one LLM rewrite call in `build`/`run`; `retrieve` calls no LLM, so it has no effect here: drop it"
        );
    }
    if data.kind == DatasetKind::Locomo {
        if data.question_type.is_some() {
            anyhow::bail!(
                "--ca selects a LongMemEval question type; LoCoMo questions have categories, not types: drop --ca or use --data LM"
            );
        }
        if data.drop_assistant_turns {
            anyhow::bail!(
                "--drop-assistant-turns is for LongMemEval (user/assistant sessions); LoCoMo has two human speakers: drop it or use --data LM"
            );
        }
    }
    settings.question_type =
        data.question_type.map(crate::dataset::LongMemEvalType::from_ca_index).transpose()?;
    settings.drop_assistant_turns = data.drop_assistant_turns;
    Ok(())
}
