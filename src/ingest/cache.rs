//! Per-sample stage caches for the rewrite and keyword stages, kept per unit (session).
//!
//! One JSON file per sample and stage (`data/<dataset>/rewrite_<model>/<sample>_rewrite.json`,
//! `…/keyword_<model>/<sample>_keyword.json`). The header records what the content depends on:
//! the model and the versions of every prompt upstream of it. Each unit entry records a hash of
//! its input, so a unit is reused only for exactly the input it was made from.
//!
//! The file is rewritten whole after every finished unit, through a temporary file and a rename
//! in the same directory: a crash leaves either the old or the new file, never half of one, and
//! every unit finished before the crash survives it. A header that does not match the current
//! model or prompt versions discards the whole file with a message; units of two prompt versions
//! are never mixed in one file. This module does no model calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::llm::Usage;

/// Version of the on-disk layout; bump when the file format changes.
pub(crate) const FORMAT: u32 = 1;

/// What a cache's content depends on; stored in its header and compared on open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StageProvenance {
    /// Stage name (`rewrite`, `keywords`, `embeddings`).
    pub(crate) stage: String,
    /// Sample id.
    pub(crate) sample_id: String,
    /// Model (or embedder) that produced the content.
    pub(crate) model: String,
    /// Prompt name → version for this stage's prompt and every prompt upstream of it.
    pub(crate) versions: BTreeMap<String, String>,
}

/// How a unit ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum StageLookup<T> {
    /// Valid output.
    Done {
        /// The validated, normalised output.
        output: T,
    },
    /// Still invalid (or the call failed) after the allowed re-asks. Kept for the report;
    /// a failed unit is retried by the next build.
    Failed {
        /// Why.
        error: String,
    },
}

/// One unit's entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UnitEntry<T> {
    /// Unit key (`session_3`).
    pub(crate) unit: String,
    /// First session number; orders the entries.
    pub(crate) first_session: u32,
    /// Hash of the input the entry was made from.
    pub(crate) input_hash: String,
    /// Model calls spent (including re-asks).
    pub(crate) attempts: u32,
    /// Tokens spent.
    pub(crate) usage: Usage,
    /// Result.
    #[serde(flatten)]
    pub(crate) outcome: StageLookup<T>,
}

/// The file as stored.
#[derive(Debug, Serialize, Deserialize)]
struct StageFile<T> {
    format: u32,
    #[serde(flatten)]
    provenance: StageProvenance,
    units: Vec<UnitEntry<T>>,
}

/// What a unit must match to be reused: its key, first session and input hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlannedUnit {
    /// Unit key.
    pub(crate) key: String,
    /// First session number.
    pub(crate) first_session: u32,
    /// Input hash.
    pub(crate) input_hash: String,
}

/// An open stage cache: the entries in memory, written back after each change.
#[derive(Debug)]
pub(crate) struct StageCache<T> {
    path: PathBuf,
    provenance: StageProvenance,
    /// Entries by first session number (so the file lists them in dialogue order).
    units: BTreeMap<u32, UnitEntry<T>>,
}

impl<T: Serialize + DeserializeOwned + Clone> StageCache<T> {
    /// Open the cache at `path`, keeping only what is valid for `provenance`.
    ///
    /// Returns the cache and the notices worth showing the user (an invalidated file). A file
    /// that cannot be parsed is an error naming it: it was not written by this format, and
    /// silently rebuilding it could cost a lot of model calls.
    pub(crate) fn open(
        path: &Path,
        provenance: StageProvenance,
    ) -> anyhow::Result<(Self, Vec<String>)> {
        let mut notices = Vec::new();
        let mut units = BTreeMap::new();
        match std::fs::read(path) {
            Ok(bytes) => {
                let file: StageFile<T> = serde_json::from_slice(&bytes).with_context(|| {
                    format!(
                        "cannot read the {} cache (delete it to rebuild): {}",
                        provenance.stage,
                        path.display()
                    )
                })?;
                match mismatch(file.format, &file.provenance, &provenance) {
                    Some(reason) => notices.push(format!(
                        "{} cache {} is stale ({reason}): rebuilding the {} stage and the stages after it",
                        provenance.stage,
                        path.display(),
                        provenance.stage
                    )),
                    None => {
                        units = file.units.into_iter().map(|entry| (entry.first_session, entry)).collect();
                    }
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                return Err(error).with_context(|| format!("reading {}", path.display()));
            }
        }
        Ok((Self { path: path.to_path_buf(), provenance, units }, notices))
    }

    /// The output for `planned`, if an entry finished with exactly this input.
    pub(crate) fn done(&self, planned: &PlannedUnit) -> Option<&T> {
        let entry = self.units.get(&planned.first_session)?;
        if entry.unit != planned.key || entry.input_hash != planned.input_hash {
            return None;
        }
        match &entry.outcome {
            StageLookup::Done { output } => Some(output),
            StageLookup::Failed { .. } => None,
        }
    }

    /// Drop entries for units that are not in `plan` (the dataset or the batch size changed),
    /// so the file only ever describes the current plan.
    pub(crate) fn retain_planned(&mut self, plan: &[PlannedUnit]) {
        self.units.retain(|first, entry| {
            plan.iter().any(|unit| unit.first_session == *first && unit.key == entry.unit)
        });
    }

    /// Record a unit's result (replacing any earlier one) and write the file.
    pub(crate) async fn record(&mut self, entry: UnitEntry<T>) -> anyhow::Result<()> {
        self.units.insert(entry.first_session, entry);
        let file = StageFile {
            format: FORMAT,
            provenance: self.provenance.clone(),
            units: self.units.values().cloned().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).context("serialising a stage cache")?;
        crate::fsutil::write_atomic_async(self.path.clone(), bytes).await
    }

    /// Done outputs in dialogue order (the build reads outputs unit by unit, by plan).
    #[cfg(test)]
    pub(crate) fn outputs(&self) -> impl Iterator<Item = (&UnitEntry<T>, &T)> {
        self.units.values().filter_map(|entry| match &entry.outcome {
            StageLookup::Done { output } => Some((entry, output)),
            StageLookup::Failed { .. } => None,
        })
    }

    /// Where the cache lives.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Why a stored header does not fit the expected one, in words; `None` when it fits.
pub(crate) fn mismatch(
    format: u32,
    stored: &StageProvenance,
    expected: &StageProvenance,
) -> Option<String> {
    if format != FORMAT {
        return Some(format!("file format {format}, this build writes format {FORMAT}"));
    }
    if stored.sample_id != expected.sample_id {
        return Some(format!("it belongs to sample {}", stored.sample_id));
    }
    if stored.model != expected.model {
        return Some(format!(
            "made with model {}, the build now uses {}",
            stored.model, expected.model
        ));
    }
    for (name, version) in &expected.versions {
        match stored.versions.get(name) {
            Some(old) if old == version => {}
            Some(old) => {
                return Some(format!(
                    "made with prompt `{name}` version {old}, the current version is {version}"
                ));
            }
            None => {
                return Some(format!(
                    "it does not record which version of `{name}` it was made with"
                ));
            }
        }
    }
    if let Some(extra) = stored.versions.keys().find(|name| !expected.versions.contains_key(*name))
    {
        return Some(format!("it depends on `{extra}`, which this build does not use"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance(version: &str) -> StageProvenance {
        StageProvenance {
            stage: "rewrite".into(),
            sample_id: "conv-1".into(),
            model: "m".into(),
            versions: BTreeMap::from([("rewrite".to_string(), version.to_string())]),
        }
    }

    fn planned(first: u32, hash: &str) -> PlannedUnit {
        PlannedUnit {
            key: format!("session_{first}"),
            first_session: first,
            input_hash: hash.into(),
        }
    }

    fn entry(first: u32, hash: &str, outcome: StageLookup<String>) -> UnitEntry<String> {
        UnitEntry {
            unit: format!("session_{first}"),
            first_session: first,
            input_hash: hash.into(),
            attempts: 1,
            usage: Usage { prompt_tokens: 3, completion_tokens: 4 },
            outcome,
        }
    }

    #[tokio::test]
    async fn entries_survive_reopening_and_match_on_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/conv-1_rewrite.json");
        let (mut cache, notices) = StageCache::<String>::open(&path, provenance("v1")).unwrap();
        assert!(notices.is_empty());
        cache.record(entry(2, "h2", StageLookup::Done { output: "two".into() })).await.unwrap();
        cache.record(entry(1, "h1", StageLookup::Failed { error: "bad".into() })).await.unwrap();
        cache.record(entry(10, "h10", StageLookup::Done { output: "ten".into() })).await.unwrap();

        let (cache, notices) = StageCache::<String>::open(&path, provenance("v1")).unwrap();
        assert!(notices.is_empty());
        assert_eq!(cache.done(&planned(2, "h2")).map(String::as_str), Some("two"));
        assert_eq!(cache.done(&planned(2, "other")), None, "a changed input is not reused");
        assert_eq!(cache.done(&planned(1, "h1")), None, "a failed unit is retried");
        let order: Vec<u32> = cache.outputs().map(|(entry, _)| entry.first_session).collect();
        assert_eq!(order, [2, 10]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"status\": \"failed\""), "{text}");
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1,
            "no temporary files left"
        );
    }

    #[tokio::test]
    async fn a_changed_prompt_version_discards_the_file_with_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let (mut cache, _) = StageCache::<String>::open(&path, provenance("v1")).unwrap();
        cache.record(entry(1, "h1", StageLookup::Done { output: "one".into() })).await.unwrap();
        let (cache, notices) = StageCache::<String>::open(&path, provenance("v2")).unwrap();
        assert_eq!(cache.done(&planned(1, "h1")), None);
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0].contains("prompt `rewrite` version v1, the current version is v2"),
            "{}",
            notices[0]
        );
    }

    #[test]
    fn an_unreadable_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, "{not json").unwrap();
        let error = StageCache::<String>::open(&path, provenance("v1")).unwrap_err();
        assert!(format!("{error:#}").contains("broken.json"), "{error:#}");
    }

    #[tokio::test]
    async fn retain_planned_drops_units_of_another_plan() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let (mut cache, _) = StageCache::<String>::open(&path, provenance("v1")).unwrap();
        cache.record(entry(1, "h1", StageLookup::Done { output: "one".into() })).await.unwrap();
        cache.record(entry(2, "h2", StageLookup::Done { output: "two".into() })).await.unwrap();
        cache.retain_planned(&[planned(2, "h2")]);
        assert_eq!(cache.outputs().count(), 1);
    }

    #[test]
    fn mismatch_names_what_changed() {
        let mut stored = provenance("v1");
        assert_eq!(mismatch(FORMAT, &stored, &provenance("v1")), None);
        stored.model = "other".into();
        assert!(mismatch(FORMAT, &stored, &provenance("v1")).unwrap().contains("model other"));
        assert!(
            mismatch(FORMAT + 1, &provenance("v1"), &provenance("v1")).unwrap().contains("format")
        );
        let mut extra = provenance("v1");
        extra.versions.insert("keywords".into(), "k".into());
        assert!(mismatch(FORMAT, &extra, &provenance("v1")).unwrap().contains("`keywords`"));
        assert!(mismatch(FORMAT, &provenance("v1"), &extra).unwrap().contains("`keywords`"));
    }
}
