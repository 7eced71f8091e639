//! `mragent eval`: [`EvalJob`], the evaluation settings and the judge.

use super::{Env, ModelChoice, ModelSettings, ProjectPaths, dataset_kind};
use crate::cli::{EvalArgs, JudgeProtocolArg};
use crate::eval::EvalSettings;
use crate::eval::judge::JudgeProtocol;

/// `mragent eval`, resolved.
#[derive(Debug, Clone)]
pub struct EvalJob {
    /// What to score and how (`judge_model` set when there is a judge).
    pub settings: EvalSettings,
    /// The endpoint; `--model` names the result files.
    pub models: ModelSettings,
    /// The judge model (`--judge-model`), if any.
    pub judge: Option<ModelChoice>,
    /// The twin run to compare with (`--paired-with`), a checked tag.
    pub paired_with: Option<String>,
}

impl EvalJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &EvalArgs,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let models = ModelSettings::resolve(&args.model, |name| env.var(name))?;
        // The tag names the eval folder: it passes the one id rule, as `run`'s does.
        let file = crate::fsutil::safe_name(&args.file, '-');
        crate::names::check_name(crate::names::NameKind::Tag, &file)
            .map_err(|error| anyhow::anyhow!("--file: {error}"))?;
        let mut settings = EvalSettings::new(
            &paths.root,
            dataset_kind(args.data),
            &models.build_model.alias,
            &file,
        );
        let paired_with = args
            .paired_with
            .as_deref()
            .map(|tag| {
                let tag = crate::fsutil::safe_name(tag, '-');
                crate::names::check_name(crate::names::NameKind::Tag, &tag)
                    .map_err(|error| anyhow::anyhow!("--paired-with: {error}"))?;
                if tag == settings.file {
                    anyhow::bail!("--paired-with names the run --file already names ({tag})");
                }
                Ok(tag)
            })
            .transpose()?;
        if let Some(file) = &args.data_file {
            settings.data_file = paths.under_root(file);
        }
        settings.sample = args.sample.clone();
        settings.question_type =
            args.ca.map(crate::dataset::LongMemEvalType::from_ca_index).transpose()?;
        settings.partial = args.partial;
        settings.judge_runs = args.judge_runs;
        settings.concurrency = args.judge_workers as usize;
        settings.protocol = match args.judge_protocol {
            JudgeProtocolArg::Mem0 => JudgeProtocol::Mem0,
            JudgeProtocolArg::Strict => JudgeProtocol::Strict,
        };
        settings.judge_prompt = args.judge_prompt.as_deref().map(|file| paths.under_root(file));
        settings.audit_file = match (&args.audit_file, args.no_audit) {
            (_, true) => None,
            (Some(file), false) => Some(paths.under_root(file)),
            (None, false) => settings.audit_file,
        };
        settings.overall_with_adversarial = args.overall_with_adversarial;
        let judge = args.judge_model.as_deref().map(ModelChoice::resolve);
        settings.judge_model = judge.as_ref().map(|choice| choice.id.clone());
        Ok(Self { settings, models, judge, paired_with })
    }
}
