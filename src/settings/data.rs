//! Which dataset and which part of it: [`DataSettings`] from the dataset arguments.

use std::path::PathBuf;

use super::ProjectPaths;
use crate::cli::{DataArg, DataArgs};
use crate::dataset::DatasetKind;

/// The dataset `--data` names (the one mapping of [`DataArg`]).
pub fn dataset_kind(data: DataArg) -> DatasetKind {
    match data {
        DataArg::Locomo => DatasetKind::Locomo,
        DataArg::Lm => DatasetKind::LongMemEval,
    }
}

/// Which dataset and which part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSettings {
    /// Dataset kind.
    pub kind: DatasetKind,
    /// Input file.
    pub file: PathBuf,
    /// Sample selector as typed (`26`, `conv-26`, a LongMemEval id).
    pub sample: Option<String>,
    /// LongMemEval question-type index.
    pub question_type: Option<u8>,
    /// LongMemEval sessions per rewrite call.
    pub lm_batch: u32,
    /// LongMemEval: drop assistant turns.
    pub drop_assistant_turns: bool,
}

impl DataSettings {
    /// Resolve dataset arguments; the default file is `data/dataset_<name>.json`.
    pub fn resolve(paths: &ProjectPaths, args: &DataArgs) -> Self {
        let kind = dataset_kind(args.data);
        let file = match &args.data_file {
            Some(path) => paths.under_root(path),
            None => paths.root.join("data").join(format!("dataset_{}.json", kind.as_str())),
        };
        Self {
            kind,
            file,
            sample: args.sample.clone(),
            question_type: args.ca,
            lm_batch: args.lm_batch,
            drop_assistant_turns: args.drop_assistant_turns,
        }
    }

    /// Load the selected conversations (and only their questions of the selected type).
    pub fn load(&self) -> anyhow::Result<Vec<crate::dataset::Conversation>> {
        if !self.file.exists() {
            anyhow::bail!(
                "dataset file not found: {} (see data/README.md for where to get it, or pass --data-file)",
                self.file.display()
            );
        }
        let question_type =
            self.question_type.map(crate::dataset::LongMemEvalType::from_ca_index).transpose()?;
        let options = crate::dataset::LoadOptions {
            samples: self.sample.iter().cloned().collect(),
            question_type,
            drop_assistant_turns: self.drop_assistant_turns,
        };
        let conversations = crate::dataset::load(self.kind, &self.file, &options)?;
        if conversations.is_empty() {
            anyhow::bail!("no conversation in {} matches the selection", self.file.display());
        }
        Ok(conversations)
    }
}
