//! Run-wide token accounting: a [`UsageMeter`] that the client stack updates on every HTTP
//! attempt, so a run can report total requests and tokens at the end.
//!
//! Per-question totals are not kept here: callers sum [`ChatResponse::usage`] of the calls they
//! made (see `structured::StructuredResponse::usage` for re-asks).
//!
//! [`ChatResponse::usage`]: super::ChatResponse::usage

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::Usage;

/// Thread-safe counters shared (through `Arc`) by every clone of one client stack.
///
/// Held by `OpenAiChat` / `OpenAiEmbedder`, which record each attempt they send; read by the
/// run driver via [`UsageMeter::totals`]. Relaxed atomics suffice: the counters are independent
/// tallies and are only read for reporting.
#[derive(Debug, Default)]
pub struct UsageMeter {
    requests: AtomicU64,
    failed_requests: AtomicU64,
    hedges: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

/// A snapshot of a [`UsageMeter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// HTTP requests sent (every attempt, including retried ones).
    pub requests: u64,
    /// Requests that did not produce a usable response (error status, timeout, bad body,
    /// empty answer).
    pub failed_requests: u64,
    /// Hedging requests sent because a request was slow (included in `requests`).
    #[serde(default)]
    pub hedges: u64,
    /// Tokens reported by the endpoint over every request whose body carried a usage block,
    /// including unusable replies that were retried.
    pub usage: Usage,
}

impl UsageMeter {
    /// A meter with all counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count one request about to be sent.
    pub fn record_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one request that failed.
    pub fn record_failure(&self) {
        self.failed_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one hedging request.
    pub fn record_hedge(&self) {
        self.hedges.fetch_add(1, Ordering::Relaxed);
    }

    /// Add the tokens of one response (usable or not).
    pub fn record_usage(&self, usage: Usage) {
        self.prompt_tokens.fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.completion_tokens.fetch_add(usage.completion_tokens, Ordering::Relaxed);
    }

    /// Current totals.
    pub fn totals(&self) -> UsageTotals {
        UsageTotals {
            requests: self.requests.load(Ordering::Relaxed),
            failed_requests: self.failed_requests.load(Ordering::Relaxed),
            hedges: self.hedges.load(Ordering::Relaxed),
            usage: Usage {
                prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
                completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn counts_from_many_threads() {
        let meter = Arc::new(UsageMeter::new());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let meter = Arc::clone(&meter);
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        meter.record_request();
                        meter.record_usage(Usage { prompt_tokens: 3, completion_tokens: 1 });
                    }
                    meter.record_failure();
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        let totals = meter.totals();
        assert_eq!(totals.requests, 400);
        assert_eq!(totals.failed_requests, 4);
        assert_eq!(totals.usage, Usage { prompt_tokens: 1200, completion_tokens: 400 });
    }
}
