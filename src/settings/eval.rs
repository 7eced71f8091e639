//! `mragent eval` and `mragent compare`: [`EvalJob`], [`CompareJob`], the evaluation settings
//! and the judge, resolved by one shared path ([`Scoring::resolve`]).

use super::{Env, ModelChoice, ModelSettings, ProjectPaths, dataset_kind};
use crate::cli::{CompareArgs, EvalArgs, EvalProtocolArg, ScoringArgs};
use crate::eval::EvalSettings;
use crate::eval::judge::JudgeProtocol;

/// What `eval` and `compare` share, resolved: the settings of run A, the endpoint, the judge.
#[derive(Debug, Clone)]
pub struct Scoring {
    /// What to score and how (`judge_model` set when there is a judge; `protocol` is the first
    /// of `protocols`).
    pub settings: EvalSettings,
    /// The endpoint; `--model` names the result files.
    pub models: ModelSettings,
    /// The judge model (`--judge-model`), if any.
    pub judge: Option<ModelChoice>,
    /// The judge protocols (`--judge-protocol`), at least one, each applying to the dataset.
    pub protocols: Vec<JudgeProtocol>,
}

/// `mragent eval`, resolved.
#[derive(Debug, Clone)]
pub struct EvalJob {
    /// The run (`--file`), its judge and protocols.
    pub scoring: Scoring,
    /// The twin run to compare with (`--paired-with`), a checked tag.
    pub paired_with: Option<String>,
}

/// `mragent compare`, resolved.
#[derive(Debug, Clone)]
pub struct CompareJob {
    /// Run A (`settings.file`), its judge and its one protocol.
    pub scoring: Scoring,
    /// Run B, a checked tag other than A's.
    pub run_b: String,
}

/// A run tag as a file-name-safe, checked name; `flag` names it in errors.
fn checked_tag(tag: &str, flag: &str) -> anyhow::Result<String> {
    let tag = crate::fsutil::safe_name(tag, '-');
    crate::names::check_name(crate::names::NameKind::Tag, &tag)
        .map_err(|error| anyhow::anyhow!("{flag}: {error}"))?;
    Ok(tag)
}

/// Run B's tag, checked, and not run A's (`run_a`, given as `a_flag`).
fn other_tag(tag: &str, flag: &str, run_a: &str, a_flag: &str) -> anyhow::Result<String> {
    let tag = checked_tag(tag, flag)?;
    if tag == run_a {
        anyhow::bail!("{flag} names the run {a_flag} already names ({tag})");
    }
    Ok(tag)
}

impl Scoring {
    /// Resolve the shared arguments for run `file` (an unchecked tag; `flag` names it in
    /// errors).
    fn resolve(
        paths: &ProjectPaths,
        args: &ScoringArgs,
        file: &str,
        flag: &str,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let models = ModelSettings::resolve(&args.model, |name| env.var(name))?;
        // The tag names the eval folder: it passes the one id rule, as `run`'s does.
        let file = checked_tag(file, flag)?;
        let dataset = dataset_kind(args.data);
        let mut settings =
            EvalSettings::new(&paths.root, dataset, &models.build_model.alias, &file);
        if let Some(file) = &args.data_file {
            settings.data_file = paths.under_root(file);
        }
        settings.sample = args.sample.clone();
        settings.question_type =
            args.ca.map(crate::dataset::LongMemEvalType::from_ca_index).transpose()?;
        settings.partial = args.partial;
        settings.judge_runs = args.judge_runs;
        settings.concurrency = args.judge_workers as usize;
        let protocols: Vec<JudgeProtocol> = if args.judge_protocol.is_empty() {
            vec![JudgeProtocol::default_for(dataset)]
        } else {
            args.judge_protocol.iter().map(|protocol| protocol_of(*protocol)).collect()
        };
        for protocol in &protocols {
            protocol.check_dataset(dataset)?;
        }
        settings.protocol = protocols[0];
        settings.judge_prompt = args.judge_prompt.as_deref().map(|file| paths.under_root(file));
        settings.audit_file = match (&args.audit_file, args.no_audit) {
            (_, true) => None,
            (Some(file), false) => Some(paths.under_root(file)),
            (None, false) => settings.audit_file,
        };
        let judge = args.judge_model.as_deref().map(ModelChoice::resolve);
        settings.judge_model = judge.as_ref().map(|choice| choice.id.clone());
        Ok(Self { settings, models, judge, protocols })
    }
}

fn protocol_of(protocol: EvalProtocolArg) -> JudgeProtocol {
    match protocol {
        EvalProtocolArg::Mem0 => JudgeProtocol::Mem0,
        EvalProtocolArg::Strict => JudgeProtocol::Strict,
        EvalProtocolArg::LongMemEval => JudgeProtocol::LongMemEval,
    }
}

impl EvalJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &EvalArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let mut scoring = Scoring::resolve(paths, &args.scoring, &args.file, "--file", env)?;
        scoring.settings.overall_with_adversarial = args.overall_with_adversarial;
        let paired_with = args
            .paired_with
            .as_deref()
            .map(|tag| other_tag(tag, "--paired-with", &scoring.settings.file, "--file"))
            .transpose()?;
        if paired_with.is_some() && scoring.protocols.len() > 1 {
            anyhow::bail!(
                "--paired-with compares under one judge protocol: give one --judge-protocol"
            );
        }
        Ok(Self { scoring, paired_with })
    }
}

impl CompareJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &CompareArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let scoring = Scoring::resolve(paths, &args.scoring, &args.run_a, "RUN_A", env)?;
        let run_b = other_tag(&args.run_b, "RUN_B", &scoring.settings.file, "RUN_A")?;
        if scoring.protocols.len() > 1 {
            anyhow::bail!("compare judges under one judge protocol: give one --judge-protocol");
        }
        Ok(Self { scoring, run_b })
    }
}
