//! What a run finds in the result files as each conversation arrives: questions done by an
//! earlier run, questions to answer, and conversations whose memory is incomplete.

use std::path::PathBuf;

use serde::Serialize;

use crate::agent::resume;
use crate::agent::settings::{AnswerPass, AnswerSettings};
use crate::snapshot::Snapshot;

/// A conversation whose questions wait for its memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PendingSample {
    /// Sample id.
    pub sample: String,
    /// Sessions missing from its memory.
    pub missing_sessions: Vec<u32>,
    /// Its questions not answered.
    pub questions: usize,
}

/// The running totals over the conversations arrived so far.
#[derive(Default)]
pub(super) struct Scan {
    /// Questions with a successful line that still holds (skipped).
    pub(super) resumed: usize,
    /// Conversations whose memory is incomplete.
    pub(super) waiting: Vec<PendingSample>,
    /// Result files, one per complete conversation.
    pub(super) result_files: Vec<PathBuf>,
    /// The sessions without turns of every arrived conversation, as `<sample> <field>`.
    pub(super) empty_sessions: Vec<String>,
}

/// What one arrived conversation adds to the run.
pub(super) enum Arrival {
    /// Its memory is incomplete: this many questions wait for a rerun.
    Waiting(usize),
    /// Its memory is complete: questions done earlier, and the indices of those to answer.
    Ready { resumed: usize, pending: Vec<usize> },
}

impl Scan {
    /// Reads (and repairs) the result file of `sample` when its memory is complete: questions
    /// with a successful line that still holds are done.
    pub(super) fn add(
        &mut self,
        settings: &AnswerSettings,
        pass: &AnswerPass,
        sample: &Snapshot,
    ) -> anyhow::Result<Arrival> {
        let conversation = &sample.conversation;
        let id = &conversation.sample_id;
        self.empty_sessions.extend(conversation.empty_sessions.iter().map(|f| format!("{id} {f}")));
        let questions = &conversation.questions;
        let in_scope: Vec<usize> =
            (0..questions.len()).filter(|&index| pass.in_scope(&questions[index].id)).collect();
        if !sample.memory.is_complete() {
            self.waiting.push(PendingSample {
                sample: sample.conversation.sample_id.clone(),
                missing_sessions: sample.memory.missing_sessions.clone(),
                questions: in_scope.len(),
            });
            return Ok(Arrival::Waiting(in_scope.len()));
        }
        let path = settings.result_path(&sample.conversation.sample_id);
        let current = settings.provenance(sample, &pass.rules);
        let state = resume::load_results(&path, |line| {
            let asked = questions.iter().find(|question| question.id == line.question_id);
            let text = asked.map_or(line.question.as_str(), |question| question.question.as_str());
            line.provenance.stale_reason(&line.question, &current, text)
        })?;
        if state.dropped_errors + state.superseded > 0 {
            tracing::info!(
                file = %path.display(),
                failed = state.dropped_errors,
                stale = state.superseded,
                "failed and stale questions will be answered again"
            );
        }
        let (done, pending): (Vec<usize>, Vec<usize>) =
            in_scope.into_iter().partition(|&index| state.done.contains(&questions[index].id));
        self.resumed += done.len();
        self.result_files.push(path);
        Ok(Arrival::Ready { resumed: done.len(), pending })
    }
}
