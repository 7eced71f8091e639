//! The LoCoMo audit corrections (dial481/locomo-audit, CC BY-NC 4.0), read at run time from a
//! JSON file (by default `data/locomo_audit.json`, a compact derived copy of the audit's
//! `errors.json`). Replacing the file changes the audited scores; nothing is compiled in.
//!
//! The audit lists 156 LoCoMo QA items with problems. Our copy keeps, per item, our question id
//! (`<sample_id>:q<n>`, n 1-based; the audit's own ids are `locomo_<conv>_qa<i>`, both
//! 0-based) and what the problem means for scoring:
//! - `corrected`: the gold answer is wrong; a short corrected answer (the audit's, with its
//!   commentary removed) replaces it in the audited scores;
//! - `excluded`: the question's premise is wrong, or the audit finds it ambiguous or
//!   unanswerable; the item leaves the audited scores;
//! - `evidence_only`: the answer is right but the cited evidence is not.
//!
//! Where the audit names different evidence, it replaces the gold evidence in audited recall.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the audit means for one question's score.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum AuditAction {
    /// Score against this corrected gold answer instead.
    Corrected {
        /// The corrected answer.
        answer: String,
    },
    /// Leave the question out of audited scores.
    Excluded,
    /// The answer stands; only the evidence was wrong.
    EvidenceOnly,
}

/// One audited question.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AuditEntry {
    /// Our question id, `<sample_id>:q<n>`.
    pub question_id: String,
    /// The audit's id, `locomo_<conv>_qa<i>` (0-based).
    pub audit_id: String,
    /// LoCoMo category number.
    pub category: u8,
    /// The audit's error type, lowercase (`hallucination`, `temporal_error`, ...).
    pub error_type: String,
    /// What it means for scoring.
    #[serde(flatten)]
    pub action: AuditAction,
    /// Corrected gold evidence, when the audit names different evidence.
    #[serde(default)]
    pub evidence: Option<Vec<String>>,
}

/// Every audited question, by our question id.
pub type Audit = BTreeMap<String, AuditEntry>;

/// An audit file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file could not be read.
    #[error("reading the audit file {}: {error} (pass --no-audit to score without it)", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error (part of the message, so not also the error's `source`).
        error: std::io::Error,
    },
    /// The file is not the expected JSON.
    #[error("invalid audit file {}: {error}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error (part of the message, so not also the error's `source`).
        error: serde_json::Error,
    },
    /// Two entries name the same question.
    #[error("audit file {}: question {question_id} is listed twice", path.display())]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The repeated id.
        question_id: String,
    },
}

#[derive(Deserialize)]
struct AuditFile {
    items: Vec<AuditEntry>,
}

/// Read and parse an audit file.
pub fn load_audit(path: &Path) -> Result<Audit, AuditError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| AuditError::Io { path: path.to_path_buf(), error })?;
    parse_audit(path, &text)
}

/// Parse audit JSON; `path` is only used in error messages.
pub fn parse_audit(path: &Path, text: &str) -> Result<Audit, AuditError> {
    let file: AuditFile = serde_json::from_str(text)
        .map_err(|error| AuditError::Json { path: path.to_path_buf(), error })?;
    let mut audit = Audit::new();
    for entry in file.items {
        let question_id = entry.question_id.clone();
        if audit.insert(question_id.clone(), entry).is_some() {
            return Err(AuditError::Duplicate { path: path.to_path_buf(), question_id });
        }
    }
    Ok(audit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> Audit {
        load_audit(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data/locomo_audit.json")).unwrap()
    }

    #[test]
    fn audit_file_parses_with_expected_counts() {
        let audit = shipped();
        assert_eq!(audit.len(), 156);
        let count = |wanted: fn(&AuditAction) -> bool| {
            audit.values().filter(|entry| wanted(&entry.action)).count()
        };
        assert_eq!(count(|action| matches!(action, AuditAction::EvidenceOnly)), 57);
        assert_eq!(
            count(|action| matches!(action, AuditAction::Corrected { .. }))
                + count(|action| matches!(action, AuditAction::Excluded)),
            99
        );
    }

    #[test]
    fn audit_ids_map_to_one_based_question_ids() {
        let audit = shipped();
        // locomo_0_qa1 is conv-26's second question ("When did Melanie paint a sunrise?").
        let entry = &audit["conv-26:q2"];
        assert_eq!(entry.audit_id, "locomo_0_qa1");
        assert_eq!(entry.action, AuditAction::EvidenceOnly);
        assert_eq!(entry.evidence.as_deref(), Some(&["D1:14".to_string()][..]));
        // locomo_1_qa31: "How long did it take for Jon to open his studio?" six → five months.
        assert_eq!(
            audit["conv-30:q32"].action,
            AuditAction::Corrected { answer: "five months".into() }
        );
        for entry in audit.values() {
            let (conv, index) =
                entry.audit_id.trim_start_matches("locomo_").split_once("_qa").unwrap();
            let index: usize = index.parse().unwrap();
            assert!(entry.question_id.ends_with(&format!(":q{}", index + 1)), "{entry:?}");
            assert!(conv.parse::<usize>().unwrap() < 10);
        }
    }

    #[test]
    fn broken_files_are_errors_naming_the_file() {
        let path = Path::new("elsewhere/audit.json");
        let error = parse_audit(path, "{\"items\": 3}").unwrap_err().to_string();
        assert!(error.contains("elsewhere/audit.json"), "{error}");
        let twice = r#"{"items": [
            {"question_id": "conv-26:q2", "audit_id": "locomo_0_qa1", "category": 2, "error_type": "x", "action": "excluded"},
            {"question_id": "conv-26:q2", "audit_id": "locomo_0_qa1", "category": 2, "error_type": "x", "action": "excluded"}]}"#;
        let error = parse_audit(path, twice).unwrap_err().to_string();
        assert!(error.contains("conv-26:q2") && error.contains("twice"), "{error}");
        let missing = load_audit(Path::new("/nonexistent/audit.json")).unwrap_err().to_string();
        assert!(missing.contains("--no-audit"), "{missing}");
    }
}
