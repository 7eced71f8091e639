//! The dataset commands that call models, `build` and `run`: [`BuildJob`] and [`RunJob`], with
//! the build and answer settings of the layers they drive filled in.

use super::{DataSettings, Env, MetaRules, ModelSettings, ProjectPaths};
use crate::agent::AnswerSettings;
use crate::cli::{BuildArgs, EmbedArgs, RunArgs, RunCommandArgs};
use crate::embedding::ModelSource;
use crate::ingest::BuildSettings;
use crate::llm::EmbedderConfig;

/// `mragent build`, resolved.
#[derive(Debug, Clone)]
pub struct BuildJob {
    /// Dataset selection.
    pub data: DataSettings,
    /// Endpoint and models.
    pub models: ModelSettings,
    /// The build (and the granules'): caches, workers, a progress bar unless `-q`.
    pub build: BuildSettings,
    /// The API embedder.
    pub embedder: EmbedderConfig,
    /// Also generate the MemGAS granules.
    pub granules: bool,
}

impl BuildJob {
    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &BuildArgs,
        quiet: bool,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let data = DataSettings::resolve(paths, &args.data);
        let models = ModelSettings::resolve(&args.model, |name| env.var(name))?;
        Ok(Self {
            build: build_settings(paths, &data, &models, args.workers, quiet),
            embedder: embedder_config(&args.embed),
            granules: args.granules,
            data,
            models,
        })
    }
}

/// `mragent run`, resolved.
#[derive(Debug, Clone)]
pub struct RunJob {
    /// The project: results, the run lock and the manifest go under `result/`.
    pub paths: ProjectPaths,
    /// Dataset selection.
    pub data: DataSettings,
    /// Endpoint and models.
    pub models: ModelSettings,
    /// Run tag, concurrency and shard.
    pub run: RunSettings,
    /// The build phase.
    pub build: BuildSettings,
    /// The answer phase.
    pub answer: AnswerSettings,
    /// The API embedder of the memory.
    pub embedder: EmbedderConfig,
    /// Where the local embedder of the MemGAS tool comes from (`None`: `--no-memgas`).
    pub memgas: Option<ModelSource>,
    /// The rules of `--meta-rules`: what every question is answered with ([`RunJob::pass`]),
    /// and the manifest's record of them.
    pub meta_rules: Option<MetaRules>,
    /// `-q`: no progress bars and no build report.
    pub quiet: bool,
    /// `replay`: the recorded run played back (`None`: an ordinary run, recorded).
    pub replay: Option<super::ReplaySettings>,
    /// The arguments that replay this run ([`super::replay_args`]), for the manifest.
    pub replay_args: Vec<String>,
}

impl RunJob {
    /// What the run answers with: the rules of `--meta-rules` (none without), every question.
    pub fn pass(&self) -> crate::agent::AnswerPass {
        let rules = self.meta_rules.as_ref().map(|meta| meta.rules.clone()).unwrap_or_default();
        crate::agent::AnswerPass::with_rules(rules)
    }

    pub(super) fn resolve(
        paths: &ProjectPaths,
        args: &RunCommandArgs,
        quiet: bool,
        env: &impl Env,
    ) -> anyhow::Result<Self> {
        let data = DataSettings::resolve(paths, &args.data);
        let models = ModelSettings::resolve(&args.model, |name| env.var(name))?;
        let run = RunSettings::resolve(&args.run)?;
        let meta_rules = MetaRules::resolve(paths, args.meta_rules.as_deref())?;
        let build = build_settings(paths, &data, &models, run.workers as u32, quiet);
        let mut answer = AnswerSettings::new(
            &paths.root,
            data.kind,
            &models.build_model.alias,
            &models.answer_model.id,
            &run.file,
        );
        answer.workers = run.workers;
        answer.seed = args.seed;
        answer.progress = !quiet;
        answer.traces = !args.no_traces;
        answer.answer = args.answer.gate(crate::agent::AnswerMode::Loop);
        answer.key_variable = models.key_variable.to_string();
        let memgas = (!args.no_memgas).then(|| ModelSource {
            explicit_dir: args.embed_model_dir.clone(),
            models_root: paths.root.join("data").join("models"),
        });
        Ok(Self {
            paths: paths.clone(),
            embedder: embedder_config(&args.embed),
            data,
            models,
            run,
            build,
            answer,
            memgas,
            meta_rules,
            quiet,
            replay: None,
            replay_args: super::replay_args(args),
        })
    }
}

/// The build settings for the selected data and models.
pub(super) fn build_settings(
    paths: &ProjectPaths,
    data: &DataSettings,
    models: &ModelSettings,
    workers: u32,
    quiet: bool,
) -> BuildSettings {
    let mut settings = BuildSettings::new(
        paths.root.join("data"),
        data.kind,
        &models.build_model.alias,
        &models.build_model.id,
    );
    settings.lm_batch = data.lm_batch as usize;
    settings.workers = workers.max(1) as usize;
    settings.progress = !quiet;
    settings
}

/// The API embedder named by `--embed-model`, `--embed-batch` texts a request.
pub(super) fn embedder_config(embed: &EmbedArgs) -> EmbedderConfig {
    EmbedderConfig { model: embed.embed_model.clone(), batch_size: embed.embed_batch as usize }
}

/// Run tag, concurrency and shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSettings {
    /// Run tag.
    pub file: String,
    /// Questions in flight.
    pub workers: usize,
    /// Shard `(k, n)`: this run takes every `n`-th conversation starting at the `k`-th.
    pub shard: Option<(u32, u32)>,
}

impl RunSettings {
    /// Resolve run arguments.
    pub fn resolve(args: &RunArgs) -> anyhow::Result<Self> {
        let file = crate::fsutil::safe_name(&args.file, '-');
        crate::names::check_name(crate::names::NameKind::Tag, &file)
            .map_err(|error| anyhow::anyhow!("--file: {error}"))?;
        let shard = args.shard.as_deref().map(parse_shard).transpose()?;
        Ok(Self { file, workers: args.workers as usize, shard })
    }

    /// The tag in lock and manifest names: `--file`, plus `-shard-K-of-N` for a shard, so that
    /// shards run side by side. Result files and traces keep `--file`: they are per sample, and
    /// a sample belongs to one shard.
    pub fn tag(&self) -> String {
        Self::tag_of(&self.file, self.shard)
    }

    /// The tag of run `file` under `shard` (see [`RunSettings::tag`]).
    pub fn tag_of(file: &str, shard: Option<(u32, u32)>) -> String {
        match shard {
            Some((k, n)) => format!("{file}-shard-{k}-of-{n}"),
            None => file.to_string(),
        }
    }
}

/// `K/N` with `0 <= K < N`.
fn parse_shard(text: &str) -> anyhow::Result<(u32, u32)> {
    let parsed = text
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse::<u32>().ok()?, n.trim().parse::<u32>().ok()?)));
    match parsed {
        Some((k, n)) if k < n => Ok((k, n)),
        _ => anyhow::bail!(
            "--shard {text:?} is not K/N with 0 <= K < N (e.g. 0/4 … 3/4; K is JOB_COMPLETION_INDEX in a Kubernetes Indexed Job)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_and_tags_are_checked() {
        let args = |file: &str, shard: Option<&str>| RunArgs {
            file: file.into(),
            workers: 2,
            shard: shard.map(str::to_string),
        };
        let settings = RunSettings::resolve(&args("t", Some("1/4"))).unwrap();
        assert_eq!((settings.shard, settings.tag()), (Some((1, 4)), "t-shard-1-of-4".into()));
        for bad in ["4/4", "1", "a/b", "1/0", "-1/3"] {
            assert!(RunSettings::resolve(&args("t", Some(bad))).is_err(), "{bad}");
        }
        let message = RunSettings::resolve(&args("..", None)).unwrap_err().to_string();
        assert!(message.contains("--file"), "{message}");
        // A traversal is refused, not rewritten into a name that still holds `..`.
        let message = RunSettings::resolve(&args("../x", None)).unwrap_err().to_string();
        assert!(message.contains("--file") && message.contains(".."), "{message}");
    }
}
