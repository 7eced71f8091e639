//! `mragent learn`: [`LearnJob`], the learning settings with the build, answer and judge
//! settings they drive.

use super::batch::{build_settings, embedder_config};
use super::{DataSettings, Env, ModelChoice, ModelSettings, ProjectPaths};
use crate::agent::AnswerSettings;
use crate::cli::{JudgeProtocolArg, LearnArgs};
use crate::embedding::ModelSource;
use crate::eval::judge::{JudgeProtocol, JudgeSettings};
use crate::ingest::BuildSettings;
use crate::learn::LearnSettings;
use crate::llm::EmbedderConfig;

/// `mragent learn`, resolved.
#[derive(Debug, Clone)]
pub struct LearnJob {
    /// Dataset selection.
    pub data: DataSettings,
    /// Endpoint and models (`build_model` builds, `answer_model` answers and learns).
    pub models: ModelSettings,
    /// The judge model.
    pub judge: ModelChoice,
    /// The build of the memories (cached).
    pub build: BuildSettings,
    /// The API embedder of the memory.
    pub embedder: EmbedderConfig,
    /// Where the local embedder of the MemGAS tool comes from (`None`: `--no-memgas`).
    pub memgas: Option<ModelSource>,
    /// The learning run.
    pub learn: LearnSettings,
    /// Print the plan and the estimate only.
    pub dry_run: bool,
    /// `-q`.
    pub quiet: bool,
    /// The arguments that replay this learning ([`super::learn_replay_args`]), for its
    /// manifest.
    pub replay_args: Vec<String>,
    /// Play the learning back from its recorded calls, sending nothing (`verify`; no command
    /// line sets it).
    pub replay: bool,
}

impl LearnJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &LearnArgs,
        quiet: bool,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let data = DataSettings::resolve(paths, &args.data);
        let models = ModelSettings::resolve(&args.model, |name| env.var(name))?;
        check_args(args)?;
        let judge = ModelChoice::resolve(&args.judge_model);
        let build = build_settings(paths, &data, &models, args.workers, quiet);
        let answer = answer_settings(paths, &data, &models, args.workers, quiet);
        let judge_settings = judge_settings(&judge, &data, args);
        let learn = learn_settings(paths, &data, args, quiet, answer, judge_settings);
        let memgas = (!args.no_memgas).then(|| ModelSource {
            explicit_dir: args.embed_model_dir.clone(),
            models_root: paths.root.join("data").join("models"),
        });
        let embedder = embedder_config(&args.embed);
        if let Some(max) = args.max_cost {
            check_prices(max, &models, &judge, &embedder)?;
        }
        Ok(Self {
            embedder,
            data,
            models,
            judge,
            build,
            memgas,
            learn,
            dry_run: args.dry_run,
            quiet,
            replay_args: super::learn_replay_args(args),
            replay: false,
        })
    }
}

/// Refuses a bad run name, a fold out of range, a temperature outside 0 to 2 and a budget that
/// is not a positive amount.
fn check_args(args: &LearnArgs) -> anyhow::Result<()> {
    crate::names::check_name(crate::names::NameKind::Tag, &args.name)
        .map_err(|error| anyhow::anyhow!("--name: {error}"))?;
    if let Some(fold) = args.fold.filter(|fold| *fold >= args.folds) {
        anyhow::bail!("--fold {fold}: folds are numbered 0 to {}", args.folds - 1);
    }
    if !(0.0..=2.0).contains(&args.temperature) {
        anyhow::bail!("--temperature {}: use a value from 0 to 2", args.temperature);
    }
    if args.max_cost.is_some_and(|max| max.is_nan() || max <= 0.0) {
        anyhow::bail!("--max-cost must be a positive amount of USD");
    }
    Ok(())
}

/// The answer settings of the rollouts and validations (`learn`'s results).
fn answer_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    workers: u32,
    quiet: bool,
) -> AnswerSettings {
    let mut answer = AnswerSettings::new(
        &paths.root,
        data.kind,
        &models.build_model.alias,
        &models.answer_model.id,
        "learn",
    );
    answer.workers = workers as usize;
    answer.progress = !quiet;
    answer.key_variable = models.key_variable.to_string();
    answer
}

/// The judge of the rollouts: one run per answer, `--judge-protocol`.
fn judge_settings(judge: &ModelChoice, data: &DataSettings, args: &LearnArgs) -> JudgeSettings {
    JudgeSettings {
        model: judge.id.clone(),
        runs: 1,
        concurrency: args.workers as usize,
        dataset: data.kind,
        protocol: match args.judge_protocol {
            JudgeProtocolArg::Mem0 => JudgeProtocol::Mem0,
            JudgeProtocolArg::Strict => JudgeProtocol::Strict,
        },
        custom: None,
    }
}

/// The learning run: folds, steps, batches, limits and budget.
fn learn_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    args: &LearnArgs,
    quiet: bool,
    answer: AnswerSettings,
    judge: JudgeSettings,
) -> LearnSettings {
    LearnSettings {
        root: paths.root.clone(),
        dataset: data.kind,
        name: args.name.clone(),
        folds: args.folds,
        only_fold: args.fold,
        epochs: args.epochs,
        steps: args.steps,
        samples: args.samples,
        batch: args.batch as usize,
        validation: args.validation as usize,
        max_rules: args.max_rules as usize,
        temperature: args.temperature,
        seed: args.seed,
        test: !args.no_test,
        progress: !quiet,
        answer,
        judge,
        max_cost_usd: args.max_cost,
        max_tokens_total: args.max_tokens_total,
    }
}

/// Under `--max-cost max`, refuses a model without a known price: it would spend without the
/// budget seeing it, so the run is refused before anything is sent rather than run unbounded.
fn check_prices(
    max: f64,
    models: &ModelSettings,
    judge: &ModelChoice,
    embedder: &EmbedderConfig,
) -> anyhow::Result<()> {
    let used = [
        ("--model (build)", models.build_model.id.as_str()),
        ("--model (answers)", models.answer_model.id.as_str()),
        ("--judge-model", judge.id.as_str()),
        ("--embed-model", embedder.model.as_str()),
    ];
    if let Some((flag, model)) =
        used.iter().find(|(_, model)| crate::llm::models::model_price(model).is_none())
    {
        anyhow::bail!(
            "--max-cost {max}: the price of {model} ({flag}) is not known, so its spend cannot be counted in dollars; bound the run with --max-tokens-total instead"
        );
    }
    Ok(())
}
