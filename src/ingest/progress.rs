//! The build's progress bar: sessions done out of the total, tokens spent, failures, repairs
//! (re-asked units, verbatim turns, deterministic keywords) once there are any, ETA.
//!
//! Counters are atomics so that concurrent units can report without a lock; the bar itself
//! (indicatif) is internally synchronised. A hidden bar keeps the counters for tests and for
//! `--quiet` runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::ingest::{Repair, Stage};
use crate::llm::Usage;

/// Progress of one build.
#[derive(Debug)]
pub(crate) struct BuildProgress {
    bar: ProgressBar,
    tokens: AtomicU64,
    failures: AtomicU64,
    /// Turns entered verbatim so far.
    verbatim: AtomicU64,
    /// Sentences given deterministic keywords so far.
    deterministic: AtomicU64,
    /// Units (per stage) that needed a focused re-ask so far.
    reasked: AtomicU64,
}

impl BuildProgress {
    /// A bar over `total_sessions`, drawn on stderr when `visible`.
    pub(crate) fn new(total_sessions: u64, visible: bool) -> Self {
        let target =
            if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = ProgressBar::with_draw_target(Some(total_sessions), target);
        let template = "{spinner} building [{elapsed_precise}] {wide_bar} {pos}/{len} sessions · {msg} · ETA {eta}";
        // The template is a literal known to be valid; fall back to the default style anyway.
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        if visible {
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        let progress = Self {
            bar,
            tokens: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            verbatim: AtomicU64::new(0),
            deterministic: AtomicU64::new(0),
            reasked: AtomicU64::new(0),
        };
        progress.refresh();
        progress
    }

    /// Draw the bar (when visible) as one of `bars`, beside other progress bars.
    pub(crate) fn join(&self, bars: &indicatif::MultiProgress) {
        if !self.bar.is_hidden() {
            bars.add(self.bar.clone());
        }
    }

    /// Sessions taken from the cache, counted before any work starts.
    pub(crate) fn reused(&self, sessions: usize) {
        self.bar.inc(sessions as u64);
        // Cached sessions arrive all at once; keep them out of the rate behind the ETA.
        self.bar.reset_eta();
    }

    /// Sessions finished (successfully or not).
    pub(crate) fn done(&self, sessions: usize) {
        self.bar.inc(sessions as u64);
    }

    /// Tokens spent by a call.
    pub(crate) fn tokens(&self, usage: Usage) {
        self.tokens.fetch_add(usage.total(), Ordering::Relaxed);
        self.refresh();
    }

    /// A unit failed.
    pub(crate) fn failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.refresh();
    }

    /// A unit's stage answer needed repair (re-asks, or items filled without the model).
    pub(crate) fn repaired(&self, stage: Stage, repair: &Repair) {
        let filled = if stage == Stage::Keywords { &self.deterministic } else { &self.verbatim };
        filled.fetch_add(repair.fallback.len() as u64, Ordering::Relaxed);
        if repair.reasks > 0 {
            self.reasked.fetch_add(1, Ordering::Relaxed);
        }
        self.refresh();
    }

    /// Remove the bar from the terminal.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn refresh(&self) {
        let tokens = self.tokens.load(Ordering::Relaxed);
        let failures = self.failures.load(Ordering::Relaxed);
        let mut message = format!("{} tokens · {failures} failed", human_count(tokens));
        let reasked = self.reasked.load(Ordering::Relaxed);
        let verbatim = self.verbatim.load(Ordering::Relaxed);
        let deterministic = self.deterministic.load(Ordering::Relaxed);
        if reasked + verbatim + deterministic > 0 {
            message.push_str(&format!(
                " · {reasked} re-asked · {verbatim} turns verbatim · {deterministic} sentences with deterministic keys"
            ));
        }
        self.bar.set_message(message);
    }
}

/// `1234567` → `1.2M`.
pub(crate) fn human_count(value: u64) -> String {
    match value {
        0..1_000 => value.to_string(),
        1_000..1_000_000 => format!("{:.1}k", value as f64 / 1e3),
        _ => format!("{:.1}M", value as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_well() {
        assert_eq!(human_count(999), "999");
        assert_eq!(human_count(12_345), "12.3k");
        assert_eq!(human_count(2_500_000), "2.5M");
    }

    #[test]
    fn a_hidden_bar_still_counts() {
        let progress = BuildProgress::new(5, false);
        progress.reused(2);
        progress.done(1);
        progress.tokens(Usage { prompt_tokens: 1500, completion_tokens: 0 });
        progress.failure();
        assert_eq!(progress.bar.position(), 3);
        assert_eq!(progress.bar.message(), "1.5k tokens · 1 failed");
        let repair =
            Repair { reasks: 2, salvaged: vec!["D1:1".into()], fallback: vec!["D1:2".into()] };
        progress.repaired(Stage::Rewrite, &repair);
        progress.repaired(
            Stage::Keywords,
            &Repair { fallback: vec!["D1:1-1".into()], ..Repair::default() },
        );
        assert_eq!(
            progress.bar.message(),
            "1.5k tokens · 1 failed · 1 re-asked · 1 turns verbatim · 1 sentences with deterministic keys"
        );
    }
}
