//! `mragent retrieve`: [`RetrieveJob`], the offline retrieval evaluation's settings.

use anyhow::Context as _;

use super::{DataSettings, ModelChoice, ProjectPaths};
use crate::cli::RetrieveArgs;
use crate::dataset::DatasetKind;
use crate::ingest::BuildSettings;
use crate::retrieval::Method;
use crate::retrieval::PreferNewer;
use crate::tune::RetrieveSettings;
use crate::tune::update::{PreferNewerMode, SameTopic};

/// `mragent retrieve`, resolved.
#[derive(Debug, Clone)]
pub struct RetrieveJob {
    /// What to evaluate, on which data, with which embedder.
    pub settings: RetrieveSettings,
    /// `--folds`: leave-one-conversation-out tuning instead of one evaluation.
    pub folds: bool,
    /// `--gate`: choose the answer gate on evidence instead of one evaluation.
    pub gate: bool,
}

impl RetrieveJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &RetrieveArgs,
        quiet: bool,
    ) -> anyhow::Result<Self> {
        let data = DataSettings::resolve(paths, &args.data);
        let mut settings = retrieve_settings(paths, &data, args, quiet)?;
        if let Some(text) = &args.prefer_newer {
            if args.folds {
                anyhow::bail!(
                    "--prefer-newer is measured by one evaluation (held out within it), not by --folds: drop one of them"
                );
            }
            settings.prefer_newer = Some(parse_prefer_newer(text)?);
        }
        settings.same_topic =
            if args.same_topic == "words" { SameTopic::Words } else { SameTopic::Vector };
        settings.stored_vectors = args.stored_vectors;
        Ok(Self { settings, folds: args.folds, gate: args.gate })
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

/// `--prefer-newer held-out` or `--prefer-newer MARGIN,THRESHOLD`.
fn parse_prefer_newer(text: &str) -> anyhow::Result<PreferNewerMode> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("held-out") {
        return Ok(PreferNewerMode::HeldOut);
    }
    let parsed = text.split_once(',').and_then(|(margin, threshold)| {
        Some((margin.trim().parse::<f64>().ok()?, threshold.trim().parse::<f64>().ok()?))
    });
    match parsed {
        Some((margin, threshold)) if margin.is_finite() && threshold.is_finite() => {
            Ok(PreferNewerMode::Fixed(PreferNewer { margin, threshold }))
        }
        _ => anyhow::bail!(
            "--prefer-newer takes `held-out` or `MARGIN,THRESHOLD` (two numbers, e.g. 0.2,0.6), not `{text}`"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn prefer_newer_parses_held_out_and_fixed_settings() {
        assert_eq!(parse_prefer_newer("held-out").unwrap(), PreferNewerMode::HeldOut);
        assert_eq!(
            parse_prefer_newer("0.2, 0.6").unwrap(),
            PreferNewerMode::Fixed(PreferNewer { margin: 0.2, threshold: 0.6 })
        );
        assert!(parse_prefer_newer("0.2").is_err());
        assert!(parse_prefer_newer("nan,0.5").is_err());
    }
}
