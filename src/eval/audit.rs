//! The LoCoMo audit corrections (dial481/locomo-audit, CC BY-NC 4.0), compiled in from
//! `data/locomo_audit.json`, a compact derived copy of the audit's `errors.json`.
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
use std::sync::LazyLock;

use serde::Deserialize;

/// The derived audit file, compiled in so that neither tests nor users need the original.
const AUDIT_JSON: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/locomo_audit.json"));

/// What the audit means for one question's score.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
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

#[derive(Deserialize)]
struct AuditFile {
    items: Vec<AuditEntry>,
}

static AUDIT: LazyLock<Result<BTreeMap<String, AuditEntry>, String>> = LazyLock::new(|| {
    let file: AuditFile = serde_json::from_str(AUDIT_JSON)
        .map_err(|error| format!("invalid data/locomo_audit.json: {error}"))?;
    Ok(file.items.into_iter().map(|entry| (entry.question_id.clone(), entry)).collect())
});

/// Every audited question, by our question id.
pub fn locomo_audit() -> anyhow::Result<&'static BTreeMap<String, AuditEntry>> {
    AUDIT.as_ref().map_err(|message| anyhow::anyhow!("{message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_file_parses_with_expected_counts() {
        let audit = locomo_audit().unwrap();
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
        let audit = locomo_audit().unwrap();
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
}
