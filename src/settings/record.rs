//! Recorded runs: `mragent replay` ([`RunJob::resolve_replay`]), `export` ([`ExportJob`]) and
//! `verify` ([`VerifyJob`]), and the arguments a manifest keeps to replay its run
//! ([`replay_args`]).

use std::path::PathBuf;

use super::{Env, ProjectPaths, RunJob, dataset_kind};
use crate::cli::{ExportArgs, LearnArgs, ReplayArgs, RunCommandArgs, VerifyArgs};
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
    let mut out = Args::default();
    out.data_and_model(&args.data, &args.model);
    out.push("--file", Some(args.run.file.clone()));
    if let Some(shard) = &args.run.shard {
        out.push("--shard", Some(shard.clone()));
    }
    out.embedder(&args.embed, args.no_memgas);
    out.push("--seed", Some(args.seed.to_string()));
    if let Some(mode) = args.answer.answer {
        out.push("--answer", Some(mode.as_str().to_string()));
    }
    if let Some(threshold) = args.answer.gate_threshold {
        out.push("--gate-threshold", Some(threshold.to_string()));
    }
    if args.no_traces {
        out.push("--no-traces", None);
    }
    if let Some(rules) = &args.meta_rules {
        out.push("--meta-rules", Some(rules.display().to_string()));
    }
    out.0
}

/// The arguments of `learn` that decide what it sends to its models (as [`replay_args`] for
/// `run`), and the worker count (the passes' answers are the same with any, but it is what
/// was run). Left out besides: `--fold` (`verify` replays each fold the run has), the budget,
/// `--dry-run` and the local embedding model's folder.
pub fn learn_replay_args(args: &LearnArgs) -> Vec<String> {
    let mut out = Args::default();
    out.data_and_model(&args.data, &args.model);
    out.embedder(&args.embed, args.no_memgas);
    out.push("--judge-model", Some(args.judge_model.clone()));
    let protocol = match args.judge_protocol {
        crate::cli::JudgeProtocolArg::Mem0 => "mem0",
        crate::cli::JudgeProtocolArg::Strict => "strict",
    };
    out.push("--judge-protocol", Some(protocol.into()));
    out.push("--folds", Some(args.folds.to_string()));
    out.push("--epochs", Some(args.epochs.to_string()));
    if let Some(steps) = args.steps {
        out.push("--steps", Some(steps.to_string()));
    }
    for (flag, value) in [
        ("--samples", args.samples),
        ("--batch", args.batch),
        ("--validation", args.validation),
        ("--max-rules", args.max_rules),
        ("--workers", args.workers),
    ] {
        out.push(flag, Some(value.to_string()));
    }
    out.push("--temperature", Some(args.temperature.to_string()));
    out.push("--name", Some(args.name.clone()));
    out.push("--seed", Some(args.seed.to_string()));
    if args.no_test {
        out.push("--no-test", None);
    }
    out.0
}

/// Every flag [`learn_replay_args`] may write: `verify` refuses a learning manifest with
/// another (a forged `--embed-model-dir` would point the replay at a folder of the host).
pub const LEARN_REPLAY_FLAGS: &[&str] = &[
    "--data",
    "--sample",
    "--ca",
    "--lm-batch",
    "--drop-assistant-turns",
    "--model",
    "--re-model",
    "--max-tokens",
    "--structured-output",
    "--embed-model",
    "--embed-batch",
    "--no-memgas",
    "--judge-model",
    "--judge-protocol",
    "--folds",
    "--epochs",
    "--steps",
    "--samples",
    "--batch",
    "--validation",
    "--max-rules",
    "--workers",
    "--temperature",
    "--name",
    "--seed",
    "--no-test",
];

/// Arguments being written out, flag by flag.
#[derive(Default)]
struct Args(Vec<String>);

impl Args {
    fn push(&mut self, flag: &str, value: Option<String>) {
        self.0.push(flag.to_string());
        self.0.extend(value);
    }

    /// The dataset selection and the models, with their token caps and output mode.
    fn data_and_model(&mut self, data: &crate::cli::DataArgs, model: &crate::cli::ModelArgs) {
        let kind = match data.data {
            crate::cli::DataArg::Locomo => "locomo",
            crate::cli::DataArg::Lm => "LM",
        };
        self.push("--data", Some(kind.into()));
        if let Some(sample) = &data.sample {
            self.push("--sample", Some(sample.clone()));
        }
        if let Some(ca) = data.ca {
            self.push("--ca", Some(ca.to_string()));
        }
        self.push("--lm-batch", Some(data.lm_batch.to_string()));
        if data.drop_assistant_turns {
            self.push("--drop-assistant-turns", None);
        }
        self.push("--model", Some(model.model.clone()));
        if let Some(re_model) = &model.re_model {
            self.push("--re-model", Some(re_model.clone()));
        }
        if let Some(max_tokens) = &model.max_tokens {
            self.push("--max-tokens", Some(max_tokens.clone()));
        }
        if model.structured_output {
            self.push("--structured-output", None);
        }
    }

    /// The embedder and whether MemGAS runs.
    fn embedder(&mut self, embed: &crate::cli::EmbedArgs, no_memgas: bool) {
        self.push("--embed-model", Some(embed.embed_model.clone()));
        self.push("--embed-batch", Some(embed.embed_batch.to_string()));
        if no_memgas {
            self.push("--no-memgas", None);
        }
    }
}

/// `mragent export`, resolved.
#[derive(Debug, Clone)]
pub struct ExportJob {
    /// The project.
    pub paths: ProjectPaths,
    /// Dataset of the run.
    pub dataset: DatasetKind,
    /// Build model alias (names the result files; a learn run's is in its manifest).
    pub model: String,
    /// Run tag (a learn run: its name).
    pub file: String,
    /// `--learn`: the run is a learning run, named `file`.
    pub learn: bool,
    /// `--vs B`: the comparison of the run with run B, archived with both runs.
    pub vs: Option<String>,
    /// Archive to write.
    pub output: PathBuf,
}

impl ExportJob {
    pub(super) fn resolve(paths: &ProjectPaths, args: &ExportArgs) -> anyhow::Result<Self> {
        let check = |flag: &str, kind, value: &str| {
            crate::names::check_name(kind, value)
                .map_err(|error| anyhow::anyhow!("{flag}: {error}"))
        };
        let (flag, file) = match (&args.file, &args.learn) {
            (_, Some(name)) => ("--learn", name),
            (Some(file), None) => ("--file", file),
            (None, None) => anyhow::bail!("name the run: --file TAG, or --learn NAME"),
        };
        check(flag, crate::names::NameKind::Tag, file)?;
        // The alias the run named its files with (`local/tiny` → `local-tiny`).
        let model = crate::fsutil::safe_name(&args.model, '-');
        check("--model", crate::names::NameKind::Tag, &model)?;
        let dataset = dataset_kind(args.data);
        let learn = args.learn.is_some();
        if let Some(other) = &args.vs {
            check("--vs", crate::names::NameKind::Tag, other)?;
            if other == file {
                anyhow::bail!("--vs names the run --file already names ({other})");
            }
        }
        let default_name = match (learn, &args.vs) {
            (true, _) => format!("learn_{file}.tar.zst"),
            (false, Some(other)) => format!("{model}_{file}_vs_{other}.tar.zst"),
            (false, None) => format!("{model}_{file}.tar.zst"),
        };
        let output = args.output.as_deref().map_or_else(
            || paths.root.join("export").join(dataset.as_str()).join(default_name),
            |output| paths.under_root(output),
        );
        let vs = args.vs.clone();
        Ok(Self { paths: paths.clone(), dataset, model, file: file.clone(), learn, vs, output })
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
