//! What a run was, written beside its results: `result/<dataset>/<model>_<tag>.manifest.json`.
//!
//! Written when the run starts (`status: "running"`), and again when it ends, however it ends:
//! finished, partial, interrupted, stopped by a fatal endpoint error, or killed by a second
//! Ctrl-C. It holds the dataset path and SHA-256, the crate version and the git commit and
//! dirty flag the binary was built from, the models and endpoint host (never the key), every prompt
//! version, the settings, the meta-memory rules (when given), start and end times, the counts
//! and the exit status.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;

use crate::agent::AnswerSummary;
use crate::llm::UsageTotals;

/// The manifest of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// `running`, `complete`, `partial`, `interrupted`, `failed` or `killed`.
    pub status: String,
    /// The exit code the process ends with (absent while running).
    pub exit_code: Option<u8>,
    /// Dataset kind.
    pub dataset: String,
    /// Dataset file.
    pub dataset_file: PathBuf,
    /// SHA-256 of the dataset file.
    pub dataset_sha256: String,
    /// Crate version.
    pub version: String,
    /// The commit the binary was built from (embedded at build time), when built in a
    /// checkout.
    pub git_commit: Option<String>,
    /// Whether that tree had uncommitted changes.
    pub git_dirty: Option<bool>,
    /// Build and answer model ids.
    pub models: BTreeMap<String, String>,
    /// Endpoint host (scheme, host and port only).
    pub endpoint_host: String,
    /// Every prompt's version.
    pub prompt_versions: BTreeMap<String, String>,
    /// The settings of the run (no secrets).
    pub settings: BTreeMap<String, serde_json::Value>,
    /// The meta-memory rules the loop was given (`--meta-rules`); absent without rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta_rules: Option<MetaRulesRecord>,
    /// When the run started (RFC 3339).
    pub started_at: String,
    /// When it ended.
    pub ended_at: Option<String>,
    /// The run's counts, once it has answered.
    pub summary: Option<AnswerSummary>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// What each client sent to the endpoint (the run command's `RunOutcome::endpoint_usage`).
    pub endpoint_usage: BTreeMap<String, UsageTotals>,
    /// The arguments that replay the run (`mragent replay`, `verify`): see
    /// [`crate::settings::replay_args`].
    pub replay_args: Vec<String>,
    /// `replay`: the tag of the run it played back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    /// The run's recorded calls (`record/<dataset>/<model>_<tag>.calls.sqlite`).
    pub calls: Option<super::tape::CallsRecord>,
    #[serde(skip)]
    path: PathBuf,
}

impl Manifest {
    /// A manifest for a run whose dataset is `dataset_file`, to be written at `path`.
    pub fn start(path: PathBuf, dataset: &str, dataset_file: &Path) -> anyhow::Result<Self> {
        let bytes = std::fs::read(dataset_file)
            .with_context(|| format!("reading {}", dataset_file.display()))?;
        let prompt_versions = crate::prompts::ALL
            .iter()
            .map(|prompt| (prompt.name.to_string(), prompt.version()))
            .collect();
        let build = crate::provenance::Build::of_this_binary();
        Ok(Self {
            status: "running".into(),
            exit_code: None,
            dataset: dataset.to_string(),
            dataset_file: dataset_file.to_path_buf(),
            dataset_sha256: sha256_hex(&bytes),
            version: build.version,
            git_commit: build.git_commit,
            git_dirty: build.git_dirty,
            models: BTreeMap::new(),
            endpoint_host: String::new(),
            prompt_versions,
            settings: BTreeMap::new(),
            meta_rules: None,
            started_at: chrono::Utc::now().to_rfc3339(),
            ended_at: None,
            summary: None,
            error: None,
            endpoint_usage: BTreeMap::new(),
            replay_args: Vec::new(),
            replay_of: None,
            calls: None,
            path,
        })
    }

    /// Where the manifest is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records one setting.
    pub fn set(&mut self, name: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.settings.insert(name.to_string(), value);
    }

    /// Marks the run as ended with `status` and `exit_code`.
    pub fn end(&mut self, status: &str, exit_code: u8) {
        self.status = status.to_string();
        self.exit_code = Some(exit_code);
        self.ended_at = Some(chrono::Utc::now().to_rfc3339());
    }

    /// Writes the manifest (atomically).
    pub fn write(&self) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("serialising the run manifest")?;
        crate::fsutil::write_atomic(&self.path, text)
    }
}

/// The rules file of a run, as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetaRulesRecord {
    /// Hash of the block the model sees (the `meta_rules` of every result line).
    pub hash: String,
    /// The file as given on the command line.
    pub file: PathBuf,
    /// How many rules it holds.
    pub rules: usize,
}

impl MetaRulesRecord {
    /// The record of `meta`.
    pub fn of(meta: &crate::settings::MetaRules) -> Self {
        Self { hash: meta.hash(), file: meta.given.clone(), rules: meta.rules.rules.len() }
    }
}

/// Scheme, host and port of `url`, without any user info, path or query.
pub fn endpoint_host(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if scheme.is_empty() { host.to_string() } else { format!("{scheme}://{host}") }
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_host_drops_credentials_and_paths() {
        assert_eq!(
            endpoint_host("https://user:sk-x@openrouter.ai/api/v1"),
            "https://openrouter.ai"
        );
        assert_eq!(endpoint_host("http://127.0.0.1:8080/v1?x=1"), "http://127.0.0.1:8080");
    }

    #[test]
    fn a_manifest_outside_a_checkout_names_the_binary_s_commit() {
        let directory = tempfile::tempdir().unwrap();
        let data = directory.path().join("d.json");
        std::fs::write(&data, b"[]").unwrap();
        let path = directory.path().join("result/locomo/x.manifest.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut manifest = Manifest::start(path.clone(), "locomo", &data).unwrap();
        manifest.set("workers", 3);
        manifest.end("complete", 0);
        manifest.write().unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(value["dataset_sha256"], sha256_hex(b"[]"));
        assert_eq!(value["settings"]["workers"], 3);
        assert_eq!(value["exit_code"], 0);
        // The commit is the binary's, embedded at build time, wherever the project is.
        let build = crate::provenance::Build::of_this_binary();
        assert_eq!(value["git_commit"], serde_json::json!(build.git_commit));
        assert_eq!(value["git_dirty"], serde_json::json!(build.git_dirty));
        assert_eq!(value["version"], crate::provenance::VERSION);
        assert!(value.get("meta_rules").is_none(), "no rules, no record");
        assert!(value["prompt_versions"]["rewrite"].is_string());
    }
}
