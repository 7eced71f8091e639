//! `mragent retrieve`: [`RetrieveJob`], the offline retrieval evaluation's settings.

use anyhow::Context as _;

use super::{DataSettings, ModelChoice, ProjectPaths};
use crate::cli::RetrieveArgs;
use crate::dataset::DatasetKind;
use crate::ingest::BuildSettings;
use crate::retrieval::Method;
use crate::tune::RetrieveSettings;

/// `mragent retrieve`, resolved.
#[derive(Debug, Clone)]
pub struct RetrieveJob {
    /// What to evaluate, on which data, with which embedder.
    pub settings: RetrieveSettings,
    /// `--folds`: leave-one-conversation-out tuning instead of one evaluation.
    pub folds: bool,
}

impl RetrieveJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &RetrieveArgs,
        quiet: bool,
    ) -> anyhow::Result<Self> {
        let data = DataSettings::resolve(paths, &args.data);
        Ok(Self { settings: retrieve_settings(paths, &data, args, quiet)?, folds: args.folds })
    }
}

/// The settings of `retrieve` from its arguments.
fn retrieve_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    args: &RetrieveArgs,
    quiet: bool,
) -> anyhow::Result<RetrieveSettings> {
    let mut settings = RetrieveSettings::new(&paths.root, data.kind);
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
fn retrieve_selection(data: &DataSettings, settings: &mut RetrieveSettings) -> anyhow::Result<()> {
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
