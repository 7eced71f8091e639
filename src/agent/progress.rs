//! The progress bar of a run: questions done/total, errors, tokens, estimated cost, ETA.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::agent::settings::AnswerSettings;
use crate::llm::Usage;

/// The progress bar: questions done/total, errors, tokens, estimated cost, ETA.
pub(super) struct AnswerProgress {
    bar: ProgressBar,
}

impl AnswerProgress {
    /// A bar over `total` questions, drawn among `bars` when given.
    pub(super) fn new(
        settings: &AnswerSettings,
        total: u64,
        bars: Option<&indicatif::MultiProgress>,
    ) -> Self {
        let bar = match (settings.progress, bars) {
            (false, _) => ProgressBar::hidden(),
            (true, None) => {
                ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
            }
            (true, Some(bars)) => bars.add(ProgressBar::new(total)),
        };
        let style = ProgressStyle::with_template(
            "{spinner} answering [{bar:30}] {pos}/{len} questions · {msg} · {elapsed} elapsed, ETA {eta}",
        )
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.reset_eta();
        bar.set_message("0 errors · 0 tokens");
        bar.enable_steady_tick(Duration::from_millis(250));
        Self { bar }
    }

    /// Questions of an arrived conversation answered by earlier runs.
    pub(super) fn resumed(&self, questions: u64) {
        self.bar.inc(questions);
        // They arrive all at once; keep them out of the rate behind the ETA.
        self.bar.reset_eta();
    }

    /// Questions of an arrived conversation that wait for its memory: out of this run.
    pub(super) fn waiting(&self, questions: u64) {
        self.bar.set_length(self.bar.length().unwrap_or(0).saturating_sub(questions));
    }

    pub(super) fn update(&self, errors: usize, usage: Usage, cost: Option<f64>) {
        self.bar.inc(1);
        let cost = cost.map(|cost| format!(" · ~${cost:.2}")).unwrap_or_default();
        self.bar
            .set_message(format!("{errors} errors · {} tokens{cost}", human_tokens(usage.total())));
    }

    pub(super) fn println(&self, message: &str) {
        if self.bar.is_hidden() {
            tracing::warn!("{message}");
        } else {
            self.bar.println(message);
        }
    }

    pub(super) fn finish(&self) {
        self.bar.finish();
    }
}

fn human_tokens(tokens: u64) -> String {
    match tokens {
        0..1_000 => tokens.to_string(),
        1_000..1_000_000 => format!("{:.1}k", tokens as f64 / 1e3),
        _ => format!("{:.2}M", tokens as f64 / 1e6),
    }
}
