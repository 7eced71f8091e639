//! `mragent learn`: plan the folds, print them and the estimated cost before anything is sent
//! (`--dry-run` stops there), build the memories (cached), learn (see `crate::learn`), and
//! print the kept rules, the report and the command that scores the test folds. Every model
//! call goes through the learn run's tape (`recorded::LearnFiles::calls`), recording: a
//! request it holds (a rerun's, a resumed run's) is answered from it and not sent again.

use std::sync::Arc;

use anyhow::Context as _;

use super::build::api_embedder;
use super::interrupt::watch;
use super::output::outln;
use super::{Outcome, chat_client};
use crate::dataset::Conversation;
use crate::learn::estimate::{Estimate, Shape};
use crate::learn::folds::FoldPlan;
use crate::learn::{Learner, Spend, Stopped};
use crate::llm::models::estimate_cost_usd;
use crate::llm::tape::{CallStore, Tape, TapeMode, TapedChat, TapedEmbedder};
use crate::llm::{Client, EmbedClient};
use crate::recorded::LearnFiles;
use crate::recorded::manifest::{Manifest, endpoint_host};
use crate::recorded::tape::{CallsRecord, recording};
use crate::settings::LearnJob;
use crate::snapshot::{CacheSource, MemgasCaches, Snapshot};

/// Runs the job (see the module documentation).
pub async fn execute(job: &LearnJob) -> anyhow::Result<Outcome> {
    let conversations = job.data.load()?;
    for conversation in &conversations {
        crate::names::check_name(crate::names::NameKind::Sample, &conversation.sample_id)
            .with_context(|| format!("{}: fix it in the input", job.data.file.display()))?;
    }
    let plan = crate::learn::plan(&job.learn, &conversations)?;
    print_plan(job, &plan)?;
    let estimate = estimate(job, &plan);
    outln!("{}", estimate.table())?;
    outln!("(building memories not yet built costs extra, as in `mragent run`)")?;
    if job.dry_run {
        outln!("dry run: nothing was sent")?;
        return Ok(Outcome::Success);
    }
    // A rerun with other settings is refused here, before any memory is built.
    crate::learn::record_plan(&job.learn, &plan)?;
    job.models.require_key()?;
    let files = LearnFiles::new(&job.learn.dir());
    let mut manifest = start_manifest(job, &files)?;
    let clients = Clients::new(job)?;
    let tape = recording(&files.calls())?;
    // The step records rest on every reply the steps met: none is ever asked again.
    tape.keep_failures();
    let (stop, _watcher) = watch(
        "interrupted: finishing the answers in flight (press Ctrl-C again to stop at once); rerun the same command to resume",
        || eprintln!("stopped at once: finished work is saved; rerun the same command to resume"),
    );
    let learned = learn(job, (&clients, &tape), conversations, &plan, stop.receiver()).await;
    manifest.calls = Some(CallsRecord::of(&tape)?);
    manifest.endpoint_usage = clients.endpoint_usage();
    match learned {
        Ok(outcome) => {
            manifest.end("complete", 0);
            manifest.write()?;
            print_outcome(job, &outcome)?;
            print_tape(&tape)?;
            Ok(Outcome::Success)
        }
        Err(error) if error.downcast_ref::<Stopped>().is_some() => {
            manifest.end("partial", 2);
            manifest.write()?;
            let spent = clients.spend(job);
            eprintln!(
                "stopped: {error}; {} tokens spent; finished steps and answers are saved: run the same command again to resume",
                spent.usage.prompt_tokens + spent.usage.completion_tokens
            );
            Ok(Outcome::Partial)
        }
        Err(error) => {
            manifest.error = Some(format!("{error:#}"));
            manifest.end("failed", 1);
            manifest.write()?;
            Err(error)
        }
    }
}

/// `verify`: the learning of `job` (its `replay` set, its folder holding the archived calls)
/// played back from its recorded calls, sending nothing and printing nothing. `Ok(Err(what))`
/// when a request was not on the tape or the learning failed.
pub(super) async fn replay_silently(job: &LearnJob) -> anyhow::Result<Result<(), String>> {
    let conversations = job.data.load()?;
    let plan = crate::learn::plan(&job.learn, &conversations)?;
    crate::learn::record_plan(&job.learn, &plan)?;
    let calls = LearnFiles::new(&job.learn.dir()).calls();
    let tape = Tape::new(Arc::new(CallStore::open(&calls)?), TapeMode::Replay { fill: false });
    let clients = Clients::new(job)?;
    let (_never, stop) = tokio::sync::watch::channel(false);
    let learned = learn(job, (&clients, &tape), conversations, &plan, stop).await;
    // A request missing from the tape may have been counted as a wrong answer and the
    // learning gone on: it is the mismatch, whatever followed.
    if let Some(what) = tape.first_unrecorded() {
        return Ok(Err(format!("a call was never recorded: {what}")));
    }
    Ok(learned.map(|_| ()).map_err(|error| format!("{error:#}")))
}

/// Builds the memories through the tape and learns over them.
async fn learn(
    job: &LearnJob,
    (clients, tape): (&Clients, &Arc<Tape>),
    conversations: Vec<Conversation>,
    plan: &FoldPlan,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<crate::learn::LearnOutcome> {
    let taped = Taped::new(clients, tape);
    let snapshots = build(job, &taped, conversations).await?;
    let spend = |/* what this invocation spent */| clients.spend(job);
    let learner = Learner::new(
        &job.learn,
        snapshots,
        &taped.answer,
        &taped.judge,
        &taped.embedder,
        &spend,
        stop,
    )?;
    learner.learn(plan).await
}

/// The learning's manifest (`manifest.json` in its folder), written as it starts: the
/// dataset and its hash, the build, the models, the settings and the arguments that replay it.
fn start_manifest(job: &LearnJob, files: &LearnFiles) -> anyhow::Result<Manifest> {
    let mut manifest = Manifest::start(files.manifest(), job.data.kind.as_str(), &job.data.file)?;
    let models = &job.models;
    manifest.models.insert("build".into(), models.build_model.id.clone());
    manifest.models.insert("answer".into(), models.answer_model.id.clone());
    manifest.models.insert("judge".into(), job.judge.id.clone());
    manifest.models.insert("embedding".into(), job.embedder.model.clone());
    manifest.endpoint_host = endpoint_host(&models.base_url);
    if let serde_json::Value::Object(fingerprint) = job.learn.fingerprint() {
        for (name, value) in fingerprint {
            manifest.set(&name, value);
        }
    }
    manifest.set("name", &job.learn.name);
    manifest.set("model_alias", &models.build_model.alias);
    manifest.set("fold", job.learn.only_fold);
    manifest.set("test", job.learn.test);
    manifest.set("memgas", job.memgas.is_some());
    manifest.set("workers", job.learn.answer.workers);
    manifest.replay_args.clone_from(&job.replay_args);
    manifest.write()?;
    Ok(manifest)
}

/// The clients of a learning run: one per model, so that each one's spend is known.
struct Clients {
    build: Client,
    embedder: EmbedClient,
    answer: Client,
    judge: Client,
}

impl Clients {
    /// What each client sent to the endpoint, for the manifest.
    fn endpoint_usage(&self) -> std::collections::BTreeMap<String, crate::llm::UsageTotals> {
        [
            ("build", self.build.usage()),
            ("embedding", self.embedder.usage()),
            ("answer", self.answer.usage()),
            ("judge", self.judge.usage()),
        ]
        .into_iter()
        .map(|(name, usage)| (name.to_string(), usage))
        .collect()
    }

    fn new(job: &LearnJob) -> anyhow::Result<Self> {
        Ok(Self {
            build: chat_client(&job.models, &job.models.build_model)?,
            embedder: api_embedder(&job.models, &job.embedder)?,
            answer: chat_client(&job.models, &job.models.answer_model)?,
            judge: chat_client(&job.models, &job.judge)?,
        })
    }

    /// What every client has sent: tokens, and their price when every used model's is known.
    fn spend(&self, job: &LearnJob) -> Spend {
        let parts = [
            (&job.models.build_model.id, self.build.usage().usage),
            (&job.embedder.model, self.embedder.usage().usage),
            (&job.models.answer_model.id, self.answer.usage().usage),
            (&job.judge.id, self.judge.usage().usage),
        ];
        let mut spend = Spend { cost_usd: Some(0.0), ..Spend::default() };
        for (model, usage) in parts {
            spend.usage += usage;
            if usage.prompt_tokens + usage.completion_tokens > 0 {
                spend.cost_usd =
                    spend.cost_usd.zip(estimate_cost_usd(model, usage)).map(|(a, b)| a + b);
            }
        }
        spend
    }
}

/// The clients of a learning run recording on its tape.
struct Taped<'a> {
    tape: Arc<Tape>,
    build: TapedChat<&'a Client>,
    embedder: TapedEmbedder<&'a EmbedClient>,
    answer: TapedChat<&'a Client>,
    judge: TapedChat<&'a Client>,
}

impl<'a> Taped<'a> {
    fn new(clients: &'a Clients, tape: &Arc<Tape>) -> Self {
        Self {
            tape: Arc::clone(tape),
            build: TapedChat::new(&clients.build, Arc::clone(tape)),
            embedder: TapedEmbedder::new(&clients.embedder, Arc::clone(tape)),
            answer: TapedChat::new(&clients.answer, Arc::clone(tape)),
            judge: TapedChat::new(&clients.judge, Arc::clone(tape)),
        }
    }
}

/// Builds every conversation's memory (cached) and loads it; an incomplete memory stops the
/// run, since learning over it would teach from missing evidence.
async fn build(
    job: &LearnJob,
    clients: &Taped<'_>,
    conversations: Vec<Conversation>,
) -> anyhow::Result<Vec<Arc<Snapshot>>> {
    let bars = (!job.quiet).then(indicatif::MultiProgress::new);
    let built = crate::ingest::build_each(
        &job.build,
        &clients.build,
        &clients.embedder,
        &conversations,
        bars.as_ref(),
        |_| {},
    )
    .await?;
    if !built.is_complete() {
        anyhow::bail!(
            "{} sessions failed to build; run the same command again to retry them before learning",
            built.failed().count()
        );
    }
    let memgas = job.memgas.as_ref().map(|model| {
        let data_dir = job.learn.root.join("data");
        MemgasCaches::new(&data_dir, job.data.kind, model.explicit_dir.clone(), &job.build)
            .with_tape(Arc::clone(&clients.tape))
    });
    let source =
        CacheSource::new(&job.build, crate::llm::Embedder::name(&clients.embedder), memgas);
    let mut snapshots = Vec::new();
    for conversation in conversations {
        snapshots.push(Arc::new(Snapshot::from_caches(&source, conversation).await?));
    }
    Ok(snapshots)
}

/// What the tape did: calls sent and recorded, and calls it answered without sending.
fn print_tape(tape: &Tape) -> anyhow::Result<()> {
    let totals = tape.totals();
    outln!(
        "model calls: {} sent and recorded, {} answered from the tape ({})",
        totals.recorded,
        totals.reused,
        tape.store().path().display()
    )?;
    Ok(())
}

/// The folds, as the run will use them.
fn print_plan(job: &LearnJob, plan: &FoldPlan) -> anyhow::Result<()> {
    outln!("folds (seed {}):", plan.seed)?;
    for fold in &plan.folds {
        let skipped = job.learn.only_fold.is_some_and(|only| only != fold.index);
        outln!(
            "  fold {}{}: test {} ({} questions), validation {} questions from {}, training {} questions from {} conversations, {} steps",
            fold.index,
            if skipped { " (not run)" } else { "" },
            fold.test_samples.join(","),
            fold.test.len(),
            fold.validation.len(),
            fold.validation_samples.join(","),
            fold.train.len(),
            fold.train_samples.len(),
            job.learn.steps_for(fold.train.len())
        )?;
    }
    Ok(())
}

/// The estimate for the folds that will run.
fn estimate(job: &LearnJob, plan: &FoldPlan) -> Estimate {
    let learn = &job.learn;
    let running: Vec<_> =
        plan.folds.iter().filter(|f| learn.only_fold.is_none_or(|only| only == f.index)).collect();
    let folds = running.len().max(1) as u64;
    let mean = |size: &dyn Fn(&crate::learn::folds::Fold) -> usize| {
        running.iter().map(|f| size(f) as u64).sum::<u64>().div_ceil(folds)
    };
    let steps = mean(&|f| learn.steps_for(f.train.len()) as usize);
    let shape = Shape {
        folds,
        steps,
        batch: mean(&|f| f.train.len().min(learn.batch)),
        samples: u64::from(learn.samples),
        validation: mean(&|f| f.validation.len()),
        test: if learn.test { running.iter().map(|f| f.test.len() as u64).sum() } else { 0 },
    };
    Estimate::new(shape, &job.models.answer_model.id, &job.judge.id)
}

/// The kept rules and where everything went.
fn print_outcome(job: &LearnJob, outcome: &crate::learn::LearnOutcome) -> anyhow::Result<()> {
    for fold in &outcome.folds {
        outln!(
            "fold {}: kept step {} ({} rules), validation {:.1} → {:.1} ({:+.1})",
            fold.fold,
            fold.chosen,
            fold.chosen_record().rules.rules.len(),
            fold.steps[0].validation.accuracy,
            fold.chosen_record().validation.accuracy,
            fold.gain()
        )?;
    }
    outln!("rules ({}): {}", outcome.rules.rules.len(), outcome.rules_file.display())?;
    for rule in &outcome.rules.rules {
        outln!("  {}: {}", rule.id, rule.text)?;
    }
    outln!("report: {}", outcome.report_file.display())?;
    outln!(
        "answer with them: mragent run --data {} --model {} --meta-rules {}",
        job.data.kind.as_str(),
        job.models.build_model.alias,
        outcome.rules_file.display()
    )?;
    if job.learn.test {
        outln!(
            "score the test folds: mragent eval --data {} --model {} --file {} --paired-with {} --judge-model {} --partial",
            job.data.kind.as_str(),
            job.models.build_model.alias,
            crate::learn::test_tag(&job.learn.name, false),
            crate::learn::test_tag(&job.learn.name, true),
            job.judge.alias
        )?;
    }
    Ok(())
}
