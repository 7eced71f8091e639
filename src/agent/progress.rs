//! The progress bar of a run: questions done/total, errors, tokens, estimated cost, ETA.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::agent::settings::AnswerSettings;
use crate::llm::Usage;

/// The progress bar: questions done/total, errors, tokens, estimated cost, ETA.
pub(super) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub(super) fn new(settings: &AnswerSettings, total: u64, done: u64) -> Self {
        let bar = if settings.progress {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        let style = ProgressStyle::with_template(
            "{spinner} answering [{bar:30}] {pos}/{len} questions · {msg} · {elapsed} elapsed, ETA {eta}",
        )
        .map(|style| style.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_position(done);
        bar.reset_eta();
        bar.set_message("0 errors · 0 tokens");
        bar.enable_steady_tick(Duration::from_millis(250));
        Self { bar }
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
