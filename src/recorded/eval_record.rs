//! How a run was last judged (`RunFiles::eval_record`): the settings of its judged evaluation
//! that decide the tables, what `verify` recomputes them with from the recorded judge calls;
//! and how two runs were compared (`RunFiles::comparison_record`).

use serde::{Deserialize, Serialize};

/// The settings of a judged evaluation that decide its tables: what `verify` recomputes them
/// with, from the recorded judge calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// Judge model id.
    pub judge_model: String,
    /// Judge runs.
    pub judge_runs: u32,
    /// The judge protocols, in order (the first is `summary.json`'s).
    pub protocols: Vec<crate::eval::judge::JudgeProtocol>,
    /// The run's `--sample`.
    pub sample: Option<String>,
    /// The run's `--ca`.
    pub question_type: Option<crate::dataset::LongMemEvalType>,
    /// Scored with missing questions.
    pub partial: bool,
    /// The audit file, relative to the project when inside it (`None`: no audit).
    pub audit_file: Option<String>,
    /// The official overall over categories 1–5 too.
    pub overall_with_adversarial: bool,
}

impl EvalRecord {
    pub(crate) fn of(
        settings: &crate::eval::EvalSettings,
        protocols: &[crate::eval::judge::JudgeProtocol],
    ) -> Self {
        if settings.judge_prompt.is_some() {
            tracing::warn!("a run judged with --judge-prompt cannot be verified from its archive");
        }
        // Relative to the project when inside it, else as it is: `export` archives the file.
        let audit_file = settings
            .audit_file
            .as_ref()
            .map(|path| path.strip_prefix(&settings.root).unwrap_or(path).display().to_string());
        Self {
            judge_model: settings.judge_model.clone().unwrap_or_default(),
            judge_runs: settings.judge_runs,
            protocols: protocols.to_vec(),
            sample: settings.sample.clone(),
            question_type: settings.question_type,
            partial: settings.partial,
            audit_file,
            overall_with_adversarial: settings.overall_with_adversarial,
        }
    }

    /// The record as an archive names it: its audit file by the member that holds it
    /// ([`audit_member`]).
    pub fn archived(mut self) -> Self {
        self.audit_file = self.audit_file.as_deref().map(audit_member);
        self
    }

    /// Applies the record to `settings`.
    pub fn apply(&self, settings: &mut crate::eval::EvalSettings) {
        settings.judge_model = Some(self.judge_model.clone());
        settings.judge_runs = self.judge_runs;
        if let Some(first) = self.protocols.first() {
            settings.protocol = *first;
        }
        settings.sample.clone_from(&self.sample);
        settings.question_type = self.question_type;
        settings.partial = self.partial;
        settings.audit_file = self.audit_file.as_ref().map(|file| settings.root.join(file));
        settings.overall_with_adversarial = self.overall_with_adversarial;
    }
}

/// `data/audit/<file name>`: the member an archive holds the audit file `path` as (the record
/// names the project's path, or the judging host's).
pub fn audit_member(path: &str) -> String {
    let name = std::path::Path::new(path).file_name().unwrap_or_default().to_string_lossy();
    format!("data/audit/{name}")
}

/// How run A was compared with run B (`compare A B`, `eval --file A --paired-with B`): what
/// `verify` recomputes the comparison with, from the comparison's recorded judge calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRecord {
    /// Run B's tag.
    pub run_b: String,
    /// Whether a judge scored both runs (else F1 alone is compared).
    pub judged: bool,
    /// The scoring settings both runs were scored with (one protocol; the judge model is empty
    /// when not judged).
    pub settings: EvalRecord,
    /// How the intervals were bootstrapped.
    pub bootstrap: crate::eval::paired::BootstrapSettings,
}

impl CompareRecord {
    pub(crate) fn of(
        settings: &crate::eval::EvalSettings,
        run_b: &str,
        bootstrap: crate::eval::paired::BootstrapSettings,
    ) -> Self {
        Self {
            run_b: run_b.to_string(),
            judged: settings.judge_model.is_some(),
            settings: EvalRecord::of(settings, &[settings.protocol]),
            bootstrap,
        }
    }

    /// Applies the record to `settings`.
    pub fn apply(&self, settings: &mut crate::eval::EvalSettings) {
        self.settings.apply(settings);
        if !self.judged {
            settings.judge_model = None;
        }
    }
}
