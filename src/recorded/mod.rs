//! A recorded run on disk: where its files are ([`RunFiles`], the one owner of the layout;
//! [`LearnFiles`] for a `learn` run's folder), its recorded model calls ([`tape`]), its lock
//! ([`lock`]), its manifest ([`manifest`]), how it was judged ([`eval_record`]), its archive
//! ([`archive`], [`run_archive`], [`learn_archive`]: what `export` writes) and the offline checks of an archive
//! ([`verify`]).
//!
//! The commands read and write a run only through this room: `run` takes its lock, writes its
//! manifest and records through its tape; `eval` records the judge; `export` archives;
//! `verify` has [`verify::verify`] check an archive. The room names no command: the replays of
//! a run and of a learning, which are the commands' pipelines, come in through
//! [`verify::Replayer`].

pub mod archive;
pub mod eval_record;
pub mod learn_archive;
pub mod lock;
pub mod manifest;
pub mod run_archive;
pub mod tape;
pub mod verify;

use std::path::{Path, PathBuf};

/// The files of one run (`<model>_<tag>` of a dataset) in a project, or inside an archive
/// (a relative root: `RunFiles::in_archive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFiles {
    root: PathBuf,
    dataset: String,
    model: String,
    tag: String,
}

impl RunFiles {
    /// The run `<model>_<tag>` of `dataset` in the project at `root`.
    pub fn new(root: &Path, dataset: &str, model: &str, tag: &str) -> Self {
        Self {
            root: root.to_path_buf(),
            dataset: dataset.to_string(),
            model: model.to_string(),
            tag: tag.to_string(),
        }
    }

    /// The files of the run `job` makes (its shard's tag).
    pub fn of_run(job: &crate::settings::RunJob) -> Self {
        let model = &job.models.build_model.alias;
        Self::new(&job.paths.root, job.data.kind.as_str(), model, &job.run.tag())
    }

    /// The files of the run an evaluation scores (`eval`, `compare`'s run A).
    pub fn of_eval(settings: &crate::eval::EvalSettings) -> Self {
        Self::new(&settings.root, settings.dataset.as_str(), &settings.model, &settings.file)
    }

    /// The files of the recorded run `from` that `job` replays (the same shard).
    pub fn of_replayed(job: &crate::settings::RunJob, from: &str) -> Self {
        let tag = crate::settings::RunSettings::tag_of(from, job.run.shard);
        Self::new(&job.paths.root, job.data.kind.as_str(), &job.models.build_model.alias, &tag)
    }

    /// The same run as its archive names its members (paths relative to the project).
    pub fn in_archive(dataset: &str, model: &str, tag: &str) -> Self {
        Self::new(Path::new(""), dataset, model, tag)
    }

    /// `result/<dataset>/`: the result files, the manifest and the lock.
    pub fn results_dir(&self) -> PathBuf {
        self.root.join("result").join(&self.dataset)
    }

    /// `result/<dataset>/<model>_<tag>.manifest.json`.
    pub fn manifest(&self) -> PathBuf {
        self.results_dir().join(format!("{}_{}.manifest.json", self.model, self.tag))
    }

    /// `result/<dataset>/.<model>_<tag>.lock`: held while the run goes on.
    pub fn lock(&self) -> PathBuf {
        self.results_dir().join(format!(".{}_{}.lock", self.model, self.tag))
    }

    /// The result file of `sample`.
    pub fn results(&self, sample: &str) -> PathBuf {
        crate::results::result_path(&self.root, &self.dataset, sample, &self.model, &self.tag)
    }

    /// `record/<dataset>/<model>_<tag>.calls.sqlite`: the calls the run sent.
    pub fn calls(&self) -> PathBuf {
        self.record(".calls.sqlite")
    }

    /// `record/<dataset>/<model>_<tag>.judge.sqlite`: the calls the judge made on the run.
    pub fn judge_calls(&self) -> PathBuf {
        self.record(".judge.sqlite")
    }

    /// `record/<dataset>/<model>_<tag>_vs_<other>.judge.sqlite`: the calls the judge made
    /// comparing the run with run `other` (`compare`, `eval --paired-with`).
    pub fn comparison_judge_calls(&self, other: &str) -> PathBuf {
        self.record(&format!("_vs_{other}.judge.sqlite"))
    }

    /// `record/<dataset>/<model>_<tag>_vs_<other>.compare.json`: how the run was compared
    /// with run `other` ([`eval_record::CompareRecord`]).
    pub fn comparison_record(&self, other: &str) -> PathBuf {
        self.record(&format!("_vs_{other}.compare.json"))
    }

    /// `<model>_<tag>_vs_<other>`: the name of the comparison with run `other`, beside the runs
    /// in `eval/<dataset>/`: its folder (each run scored for it) and its page and table
    /// (`.md`, `.json`).
    pub fn comparison_stem(&self, other: &str) -> String {
        format!("{}_{}_vs_{other}", self.model, self.tag)
    }

    /// `eval/<dataset>/<model>_<tag>_vs_<other>/`: both runs scored for the comparison.
    pub fn comparison_folder(&self, other: &str) -> PathBuf {
        self.eval_dir().join(self.comparison_stem(other))
    }

    /// `eval/<dataset>/<model>_<tag>_vs_<other>.md` and `.json`: the comparison's page and its
    /// table.
    pub fn comparison_outputs(&self, other: &str) -> [PathBuf; 2] {
        let stem = self.comparison_stem(other);
        ["md", "json"].map(|extension| self.eval_dir().join(format!("{stem}.{extension}")))
    }

    /// `record/<dataset>/<model>_<tag>.eval.json`: how the run was last judged.
    pub fn eval_record(&self) -> PathBuf {
        self.record(".eval.json")
    }

    /// `log/<dataset>/<tag>/`: the run's traces.
    pub fn traces(&self) -> PathBuf {
        self.root.join("log").join(&self.dataset).join(&self.tag)
    }

    /// `eval/<dataset>/<tag>/`: the run's eval folder.
    pub fn eval_folder(&self) -> PathBuf {
        self.eval_dir().join(&self.tag)
    }

    fn eval_dir(&self) -> PathBuf {
        self.root.join("eval").join(&self.dataset)
    }

    /// `data/<dataset>/`: the memory caches its conversations were answered from.
    pub fn memory_dir(&self) -> PathBuf {
        self.root.join("data").join(&self.dataset)
    }

    fn record(&self, suffix: &str) -> PathBuf {
        self.root
            .join("record")
            .join(&self.dataset)
            .join(format!("{}_{}{suffix}", self.model, self.tag))
    }
}

/// The files of a `learn` run, in its folder `data/<dataset>/meta/<name>/` (the learn settings
/// name it: `learn::LearnSettings::dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnFiles {
    dir: PathBuf,
}

impl LearnFiles {
    /// The learn run in `dir`.
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf() }
    }

    /// The learn run `name` of `dataset` in the project at `root`.
    pub fn named(root: &Path, dataset: &str, name: &str) -> Self {
        Self::new(&root.join("data").join(dataset).join("meta").join(name))
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `calls.sqlite`: every model call the learn run sent (building, answering, judging,
    /// reviewing, proposing, consolidating), each with its work item; the run's one memo.
    pub fn calls(&self) -> PathBuf {
        self.dir.join("calls.sqlite")
    }

    /// `manifest.json`: what the last invocation was (a run's manifest, with the arguments
    /// that replay the learning).
    pub fn manifest(&self) -> PathBuf {
        self.dir.join("manifest.json")
    }

    /// `plan.json`: the folds and the settings they were drawn with.
    pub fn plan(&self) -> PathBuf {
        self.dir.join("plan.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_a_run_is_named_by_its_dataset_model_and_tag() {
        let files = RunFiles::new(Path::new("/p"), "locomo", "gpt", "t1");
        assert_eq!(files.manifest(), Path::new("/p/result/locomo/gpt_t1.manifest.json"));
        assert_eq!(files.lock(), Path::new("/p/result/locomo/.gpt_t1.lock"));
        assert_eq!(files.calls(), Path::new("/p/record/locomo/gpt_t1.calls.sqlite"));
        assert_eq!(files.judge_calls(), Path::new("/p/record/locomo/gpt_t1.judge.sqlite"));
        assert_eq!(files.eval_record(), Path::new("/p/record/locomo/gpt_t1.eval.json"));
        assert_eq!(
            files.comparison_judge_calls("t2"),
            Path::new("/p/record/locomo/gpt_t1_vs_t2.judge.sqlite")
        );
        assert_eq!(
            files.comparison_record("t2"),
            Path::new("/p/record/locomo/gpt_t1_vs_t2.compare.json")
        );
        assert_eq!(files.comparison_folder("t2"), Path::new("/p/eval/locomo/gpt_t1_vs_t2"));
        assert_eq!(
            files.comparison_outputs("t2"),
            [
                PathBuf::from("/p/eval/locomo/gpt_t1_vs_t2.md"),
                PathBuf::from("/p/eval/locomo/gpt_t1_vs_t2.json")
            ]
        );
        assert_eq!(files.traces(), Path::new("/p/log/locomo/t1"));
        assert_eq!(files.eval_folder(), Path::new("/p/eval/locomo/t1"));
        let learn = LearnFiles::named(Path::new("/p"), "locomo", "m");
        assert_eq!(learn.calls(), Path::new("/p/data/locomo/meta/m/calls.sqlite"));
        assert_eq!(learn.manifest(), Path::new("/p/data/locomo/meta/m/manifest.json"));
        let inside = RunFiles::in_archive("locomo", "gpt", "t1");
        assert_eq!(inside.manifest(), Path::new("result/locomo/gpt_t1.manifest.json"));
    }
}
