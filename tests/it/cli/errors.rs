//! Error messages state their cause (and the file) once: an empty or truncated dataset file through the
//! binary, and each error type whose message includes its cause (which is therefore not also
//! its `source`, or `{:#}` would print it twice).

use mragent::eval::audit::parse_audit;
use mragent::service::ServiceError;
use mragent::store::StoreError;

use super::mragent_in;

/// `retrieve` with bm25 only: the dataset is loaded and nothing needs a model or a key.
async fn retrieve_stderr(contents: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.json");
    std::fs::write(&file, contents).unwrap();
    let file = file.to_str().unwrap().to_string();
    let args = ["retrieve", "--data-file", &file, "--method", "bm25", "-q"];
    let output = mragent_in(dir.path(), &args, &[]).await;
    assert_eq!(output.status.code(), Some(1));
    (String::from_utf8(output.stderr).unwrap(), file)
}

#[tokio::test]
async fn an_empty_dataset_file_names_the_file_and_its_cause_once() {
    let (stderr, file) = retrieve_stderr("").await;
    assert_eq!(stderr.matches(&file).count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("EOF while parsing a value at line 1 column 0").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn a_truncated_dataset_file_names_the_file_and_its_cause_once() {
    let (stderr, file) = retrieve_stderr("[{\"sample_id\": \"conv-1\", \"conversation\": {").await;
    assert_eq!(stderr.matches(&file).count(), 1, "{stderr}");
    assert_eq!(stderr.matches("EOF while parsing").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("line 1 column").count(), 1, "{stderr}");
}

/// How `main` prints an error: the message and its chain of sources.
fn printed(error: impl Into<anyhow::Error>) -> String {
    format!("{:#}", error.into())
}

#[test]
fn errors_that_quote_their_cause_print_it_once() {
    let cause = "disk on fire";
    let store = StoreError::Io(std::io::Error::other(cause));
    assert_eq!(printed(store), "store files: disk on fire");
    let service = ServiceError::from(anyhow::anyhow!(cause).context("saving"));
    assert_eq!(printed(service), "saving: disk on fire");
    let service = ServiceError::Store(StoreError::Io(std::io::Error::other(cause)));
    assert_eq!(printed(service), "store files: disk on fire");
    let audit = parse_audit(std::path::Path::new("audit.json"), "").unwrap_err();
    assert_eq!(printed(audit).matches("EOF while parsing").count(), 1);
    let missing = std::path::Path::new("/nonexistent/judge.txt");
    let prompt = mragent::eval::judge::CustomPrompt::load(missing).unwrap_err();
    let message = printed(prompt);
    assert_eq!(message.matches("No such file").count(), 1, "{message}");
}
