//! Progress of a retrieval evaluation's embedding: a bar on stderr (unless quiet) and a line in
//! the log every half minute, both with an ETA from the embedding rate so far.
//!
//! Texts served from the cache count as done at once and stay out of the rate, so a resumed run
//! estimates from the texts it really embeds.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a progress line goes to the log.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Embedding progress over a whole run.
pub(super) struct EmbedProgress {
    bar: ProgressBar,
    total: u64,
    done: u64,
    embedded: u64,
    embed_seconds: f64,
    last_log: Instant,
}

impl EmbedProgress {
    /// Progress over `total` texts (the count is corrected as conversations reveal theirs),
    /// drawn on stderr when `visible`.
    pub(super) fn new(total: u64, visible: bool) -> Self {
        let target =
            if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        let template =
            "{spinner} embedding [{elapsed_precise}] {wide_bar} {pos}/{len} texts · {msg}";
        bar.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        if visible {
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        Self { bar, total, done: 0, embedded: 0, embed_seconds: 0.0, last_log: Instant::now() }
    }

    /// A conversation needs `planned` texts where `expected` were counted up front.
    pub(super) fn recount(&mut self, expected: usize, planned: usize) {
        self.total = (self.total + planned as u64).saturating_sub(expected as u64);
        self.bar.set_length(self.total);
    }

    /// Texts found in the cache.
    pub(super) fn cached(&mut self, texts: usize) {
        self.done += texts as u64;
        self.bar.set_position(self.done);
    }

    /// Texts embedded in `seconds`.
    pub(super) fn embedded(&mut self, texts: usize, seconds: f64) {
        self.done += texts as u64;
        self.embedded += texts as u64;
        self.embed_seconds += seconds;
        self.bar.set_position(self.done);
        let status = self.status();
        self.bar.set_message(status.clone());
        if self.last_log.elapsed() >= LOG_EVERY {
            self.last_log = Instant::now();
            tracing::info!("embedding: {}/{} texts · {status}", self.done, self.total);
        }
    }

    /// Remove the bar.
    pub(super) fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn status(&self) -> String {
        let remaining = self.total.saturating_sub(self.done);
        match eta_seconds(self.embedded, self.embed_seconds, remaining) {
            Some(eta) => format!(
                "{:.0} texts/s · ETA {}",
                self.embedded as f64 / self.embed_seconds,
                human_duration(eta)
            ),
            None => "ETA unknown".to_string(),
        }
    }
}

/// Seconds left for `remaining` texts at the rate `embedded` texts in `seconds`; `None` before
/// anything was embedded.
fn eta_seconds(embedded: u64, seconds: f64, remaining: u64) -> Option<f64> {
    (embedded > 0 && seconds > 0.0).then(|| remaining as f64 * seconds / embedded as f64)
}

/// `3725.0` → `1h02m`; `95.0` → `1m35s`; `7.0` → `7s`.
fn human_duration(seconds: f64) -> String {
    let total = seconds.round() as u64;
    let (hours, minutes, secs) = (total / 3600, total % 3600 / 60, total % 60);
    match (hours, minutes) {
        (0, 0) => format!("{secs}s"),
        (0, _) => format!("{minutes}m{secs:02}s"),
        _ => format!("{hours}h{minutes:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_follows_the_embedding_rate_and_ignores_the_cache() {
        assert_eq!(eta_seconds(0, 0.0, 100), None);
        assert_eq!(eta_seconds(50, 10.0, 100), Some(20.0));
        let mut progress = EmbedProgress::new(1000, false);
        progress.cached(500);
        progress.embedded(100, 10.0);
        // 400 left at 10 texts/s.
        assert_eq!(progress.status(), "10 texts/s · ETA 40s");
        progress.recount(100, 400);
        assert_eq!(progress.total, 1300);
        assert_eq!(human_duration(3725.0), "1h02m");
        assert_eq!(human_duration(95.0), "1m35s");
    }
}
