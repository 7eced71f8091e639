//! Scaffolding the integration modules share, written once: paths and conversations of the
//! repository's fixtures, the scripted endpoint playing the build stages and the answering
//! agent, the real client stack pointed at it, build settings under a temporary root, the
//! release binary with a clean model environment, and result files read back.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mragent::agent::scripted::{AgentScript, is_answer_request, plausible_agent};
use mragent::dataset::{Conversation, DatasetKind, load_locomo};
use mragent::ingest::BuildSettings;
use mragent::llm::retry::RetryPolicy;
use mragent::llm::scripted::{RecordedRequest, ScriptedReply, ScriptedServer};
use mragent::llm::{EmbedClient, EmbedderConfig, LlmConfig, Secret, build_embedder};
use mragent::results::ResultLine;
use serde_json::Value;

/// The embedding model id the scripted endpoint is asked for.
pub(crate) const EMBEDDER: &str = "test-embedding";

/// `relative` under the repository root.
pub(crate) fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The conversations of a LoCoMo-format file of the repository.
pub(crate) fn load_fixture(relative: &str) -> Vec<Conversation> {
    load_locomo(&repo_path(relative)).unwrap()
}

/// One conversation of the full LoCoMo dataset.
pub(crate) fn locomo(sample: &str) -> Conversation {
    load_fixture("data/dataset_locomo.json")
        .into_iter()
        .find(|conversation| conversation.sample_id == sample)
        .unwrap()
}

/// A responder playing the whole pipeline: the answering agent for answer-stage requests
/// (embeddings included), otherwise `build`'s reply or, where it returns `None`, a valid build
/// answer generated from the prompt.
pub(crate) fn build_and_answer(
    build: impl Fn(&RecordedRequest) -> Option<ScriptedReply> + Send + Sync + 'static,
) -> impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    let agent = plausible_agent(AgentScript::default());
    move |request| {
        if is_answer_request(request) {
            agent(request)
        } else {
            build(request)
                .unwrap_or_else(|| ScriptedReply::json(&crate::ingest::good_answer(request)))
        }
    }
}

/// The client configuration of the build and store tests: a test key and model, two attempts
/// 5 ms apart.
pub(crate) fn client_config(server: &ScriptedServer) -> LlmConfig {
    let mut config = LlmConfig::new(server.base_url(), Secret::new("test-key"), "test-model");
    config.retry = RetryPolicy {
        max_attempts: 2,
        base_delay: Duration::from_millis(5),
        ..RetryPolicy::default()
    };
    config
}

/// The real embedding client for [`EMBEDDER`] at `config`'s endpoint.
pub(crate) fn embedder(config: &LlmConfig, batch_size: usize) -> EmbedClient {
    build_embedder(config, &EmbedderConfig { model: EMBEDDER.into(), batch_size }).unwrap()
}

/// LoCoMo build settings with their caches under `root`/data, no progress bars.
pub(crate) fn build_settings(root: &Path) -> BuildSettings {
    let mut settings =
        BuildSettings::new(root.join("data"), DatasetKind::Locomo, "test", "test-model");
    settings.progress = false;
    settings
}

/// The built binary in `dir` (a project directory) with a clean model environment.
pub(crate) fn mragent_command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mragent"));
    command.args(args).current_dir(dir);
    for variable in [
        "OPENROUTER_API_KEY",
        "OPENAI_API_KEY",
        "MRAGENT_BASE_URL",
        "MRAGENT_MODEL",
        "MRAGENT_ROOT",
        "RUST_LOG",
        "MRAGENT_WORKERS",
        "MRAGENT_STORE_URL",
        "MRAGENT_JOB_LEASE",
    ] {
        command.env_remove(variable);
    }
    command
}

/// A new project directory holding `dataset.json`: the LoCoMo-format fixture `relative`,
/// changed by `edit`.
pub(crate) fn project_with(
    relative: &str,
    edit: impl FnOnce(&mut Value),
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut data: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_path(relative)).unwrap()).unwrap();
    edit(&mut data);
    let path = dir.path().join("dataset.json");
    std::fs::write(&path, serde_json::to_string(&data).unwrap()).unwrap();
    (dir, path)
}

/// The lines of a result file (none when it does not exist).
pub(crate) fn read_lines(path: &Path) -> Vec<ResultLine> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// The first sessions of the units a unit cache file (`rewrite`, `granules`) holds as `done`.
pub(crate) fn done_in_cache(path: &Path) -> BTreeSet<u32> {
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["units"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|unit| unit["status"] == "done")
        .map(|unit| unit["first_session"].as_u64().unwrap() as u32)
        .collect()
}

/// Test certificates in `dir`, made with the `openssl` program: a self-signed CA `<ca>.pem`
/// (key `<ca>.key`) for each of `cas`, and `server.pem` (key `server.key`) for `/CN=localhost`
/// with the subject alternative names `san` (as `subjectAltName=` takes them), signed by the
/// first CA.
pub(crate) fn tls_certificates(dir: &Path, cas: &[&str], san: &str) {
    let openssl = |args: &[&str]| {
        let out =
            std::process::Command::new("openssl").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    for ca in cas {
        let (key, pem, subject) =
            (format!("{ca}.key"), format!("{ca}.pem"), format!("/CN=mragent test {ca}"));
        openssl(&[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &pem,
            "-days", "2", "-subj", &subject,
        ]);
    }
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("san.ext"), format!("subjectAltName={san}\n")).unwrap();
    let (ca_pem, ca_key) = (format!("{}.pem", cas[0]), format!("{}.key", cas[0]));
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        &ca_pem,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
}
