//! Recorded runs: `mragent replay` ([`RunJob::resolve_replay`]), `export` ([`ExportJob`]) and
//! `verify` ([`VerifyJob`]), and the arguments a manifest keeps to replay its run
//! ([`replay_args`]).

use std::path::PathBuf;

use super::{Env, ProjectPaths, RunJob, dataset_kind};
use crate::cli::{ExportArgs, ReplayArgs, RunCommandArgs, VerifyArgs};
use crate::dataset::DatasetKind;

/// What `replay` plays back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaySettings {
    /// The recorded run's tag (`--file`).
    pub from: String,
    /// Send and record what was never recorded (`--fill`).
    pub fill: bool,
}

impl RunJob {
    /// `mragent replay`: the run job of the recorded run, writing under the `--to` tag.
    pub(super) fn resolve_replay(
        paths: &ProjectPaths,
        args: &ReplayArgs,
        quiet: bool,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let mut job = Self::resolve(paths, &args.run, quiet, env)?;
        let from = job.run.file.clone();
        let to = args.to.clone().unwrap_or_else(|| format!("{from}-replay"));
        let to = crate::fsutil::safe_name(&to, '-');
        crate::names::check_name(crate::names::NameKind::Tag, &to)
            .map_err(|error| anyhow::anyhow!("--to: {error}"))?;
        if to == from {
            anyhow::bail!(
                "--to names the recorded run itself ({from}); give the replay its own tag"
            );
        }
        job.run.file.clone_from(&to);
        job.answer.file = to;
        job.replay = Some(ReplaySettings { from, fill: args.fill });
        Ok(job)
    }
}

/// The arguments of `run` that decide what a run sends to its models: dataset selection,
/// models, token caps, structured output, the embedder, the tag, MemGAS, the seed and the
/// rules. Left out: the endpoint, rate limits, timeouts, workers, folders and `--data-file`
/// (an archive carries its own copy of the dataset).
pub fn replay_args(args: &RunCommandArgs) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        out.push(flag.to_string());
        out.extend(value);
    };
    let data = match args.data.data {
        crate::cli::DataArg::Locomo => "locomo",
        crate::cli::DataArg::Lm => "LM",
    };
    push("--data", Some(data.into()));
    if let Some(sample) = &args.data.sample {
        push("--sample", Some(sample.clone()));
    }
    if let Some(ca) = args.data.ca {
        push("--ca", Some(ca.to_string()));
    }
    push("--lm-batch", Some(args.data.lm_batch.to_string()));
    if args.data.drop_assistant_turns {
        push("--drop-assistant-turns", None);
    }
    push("--model", Some(args.model.model.clone()));
    if let Some(re_model) = &args.model.re_model {
        push("--re-model", Some(re_model.clone()));
    }
    if let Some(max_tokens) = &args.model.max_tokens {
        push("--max-tokens", Some(max_tokens.clone()));
    }
    if args.model.structured_output {
        push("--structured-output", None);
    }
    push("--file", Some(args.run.file.clone()));
    if let Some(shard) = &args.run.shard {
        push("--shard", Some(shard.clone()));
    }
    push("--embed-model", Some(args.embed.embed_model.clone()));
    push("--embed-batch", Some(args.embed.embed_batch.to_string()));
    if args.no_memgas {
        push("--no-memgas", None);
    }
    push("--seed", Some(args.seed.to_string()));
    if let Some(mode) = args.answer.answer {
        push("--answer", Some(mode.as_str().to_string()));
    }
    if let Some(threshold) = args.answer.gate_threshold {
        push("--gate-threshold", Some(threshold.to_string()));
    }
    if args.no_traces {
        push("--no-traces", None);
    }
    if let Some(rules) = &args.meta_rules {
        push("--meta-rules", Some(rules.display().to_string()));
    }
    out
}

/// `mragent export`, resolved.
#[derive(Debug, Clone)]
pub struct ExportJob {
    /// The project.
    pub paths: ProjectPaths,
    /// Dataset of the run.
    pub dataset: DatasetKind,
    /// Build model alias (names the result files).
    pub model: String,
    /// Run tag.
    pub file: String,
    /// Archive to write.
    pub output: PathBuf,
}

impl ExportJob {
    pub(super) fn resolve(paths: &ProjectPaths, args: &ExportArgs) -> anyhow::Result<Self> {
        let check = |flag: &str, kind, value: &str| {
            crate::names::check_name(kind, value)
                .map_err(|error| anyhow::anyhow!("{flag}: {error}"))
        };
        check("--file", crate::names::NameKind::Tag, &args.file)?;
        // The alias the run named its files with (`local/tiny` → `local-tiny`).
        let model = crate::fsutil::safe_name(&args.model, '-');
        check("--model", crate::names::NameKind::Tag, &model)?;
        let dataset = dataset_kind(args.data);
        let output = args.output.as_deref().map_or_else(
            || {
                paths
                    .root
                    .join("export")
                    .join(dataset.as_str())
                    .join(format!("{}_{}.tar.zst", model, args.file))
            },
            |output| paths.under_root(output),
        );
        Ok(Self { paths: paths.clone(), dataset, model, file: args.file.clone(), output })
    }
}

/// `mragent verify`, resolved.
#[derive(Debug, Clone)]
pub struct VerifyJob {
    /// The archive.
    pub archive: PathBuf,
    /// Where to unpack and recompute (`None`: a temporary folder, removed afterwards).
    pub keep: Option<PathBuf>,
}

impl VerifyJob {
    /// The archive and `--keep` are taken from the current directory, never from `--root` or
    /// `MRAGENT_ROOT`: nothing of the verifier's environment decides what is verified.
    pub(super) fn resolve(args: &VerifyArgs) -> anyhow::Result<Self> {
        let here = std::env::current_dir()
            .map_err(|error| anyhow::anyhow!("reading the current directory: {error}"))?;
        Ok(Self {
            archive: here.join(&args.archive),
            keep: args.keep.as_ref().map(|keep| here.join(keep)),
        })
    }
}
