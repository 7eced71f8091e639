//! [`Counts`]: what a question's trace counts (fallbacks, rejected replies, skipped calls,
//! retries, hedges) and a run sums. One struct carries them everywhere: the trace writer counts
//! into it, a question's `finish` trace record holds it, the run adds every question's into
//! one shared total, and the run summary (printed at the end, written to the manifest) holds
//! that total.
//!
//! Adding a counter: a field here (the compiler then points at the lists below that name every
//! field), and the place that counts it (usually `TraceWriter::write`).

use serde::{Deserialize, Serialize, Serializer};

use crate::llm::CallLog;

/// The counts of a question or of a run. Serialised as a question's `finish` trace record
/// writes them: `fallbacks` always, the others only when not zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Retrieval steps that fell back to a deterministic substitute for the model's reply
    /// (question keywords, re-rank, tag scoring); each is a `fallback` trace record.
    #[serde(default)]
    pub fallbacks: u64,
    /// Model replies rejected (re-asked, or replaced by a fallback once the re-asks ran out);
    /// each is a `rejected` trace record.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rejected: u64,
    /// Model calls not needed and not made (tag scoring of keys whose unseen tags are few);
    /// each is a `skipped` trace record.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
    /// Failed attempts the client retried, over every model call (for a call that failed in
    /// the end, every attempt after the first).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u64,
    /// Hedging requests sent for slow model calls.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hedges: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        let Counts { fallbacks, rejected, skipped, retries, hedges } = other;
        self.fallbacks += fallbacks;
        self.rejected += rejected;
        self.skipped += skipped;
        self.retries += retries;
        self.hedges += hedges;
    }
}

impl Counts {
    /// Counts the retries and hedges of one model call.
    pub fn count_calls(&mut self, calls: &CallLog) {
        let retried = u64::try_from(calls.retries.len()).unwrap_or(u64::MAX);
        self.retries += retried.max(u64::from(calls.attempts.saturating_sub(1)));
        self.hedges += u64::from(calls.hedges);
    }

    /// Every count with what a question's finish line (`mragent trace`) calls it, in order.
    pub fn labelled(&self) -> [(u64, &'static str); 5] {
        let Counts { fallbacks, rejected, skipped, retries, hedges } = *self;
        [
            (fallbacks, "fallbacks"),
            (rejected, "rejected"),
            (skipped, "skipped calls"),
            (retries, "retries"),
            (hedges, "hedges"),
        ]
    }

    /// The counts of a run's summary line: `; N retrieval fallbacks` always, the others when
    /// not zero. Retries and hedges are left out: the endpoint lines after it report them per
    /// client.
    pub fn run_line(&self) -> String {
        let Counts { fallbacks, rejected, skipped, retries: _, hedges: _ } = *self;
        let mut line = format!("; {fallbacks} retrieval fallbacks");
        if rejected > 0 {
            line.push_str(&format!("; {rejected} model replies rejected"));
        }
        if skipped > 0 {
            line.push_str(&format!("; {skipped} model calls skipped"));
        }
        line
    }

    /// Serialises a run's counts as the run manifest writes them: `fallbacks`, `rejected` and
    /// `skipped`, each even when zero (retries and hedges are in the manifest's
    /// `endpoint_usage`, per client).
    pub fn serialize_run<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct RunCounts {
            fallbacks: u64,
            rejected: u64,
            skipped: u64,
        }
        let Counts { fallbacks, rejected, skipped, retries: _, hedges: _ } = *self;
        RunCounts { fallbacks, rejected, skipped }.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_writes_its_nonzero_counts_and_a_run_its_three() -> anyhow::Result<()> {
        let counts = Counts { fallbacks: 0, rejected: 2, hedges: 1, ..Counts::default() };
        assert_eq!(serde_json::to_string(&counts)?, r#"{"fallbacks":0,"rejected":2,"hedges":1}"#);
        let mut run = serde_json::Serializer::new(Vec::new());
        counts.serialize_run(&mut run)?;
        assert_eq!(
            String::from_utf8(run.into_inner())?,
            r#"{"fallbacks":0,"rejected":2,"skipped":0}"#
        );
        assert_eq!(counts.run_line(), "; 0 retrieval fallbacks; 2 model replies rejected");
        let read: Counts = serde_json::from_str("{}")?;
        assert_eq!(read, Counts::default());
        Ok(())
    }

    #[test]
    fn calls_count_their_retries_and_hedges() {
        use crate::llm::RetryRecord;
        let mut counts = Counts::default();
        let retry = RetryRecord { attempt: 1, reason: "status 500".into(), wait_ms: 12 };
        counts.count_calls(&CallLog {
            attempts: 2,
            retries: vec![retry],
            hedges: 1,
            hedge_won: true,
        });
        // A call that failed after three attempts reports no retry records.
        counts.count_calls(&CallLog { attempts: 3, ..CallLog::default() });
        counts += Counts { fallbacks: 1, ..Counts::default() };
        assert_eq!(counts, Counts { fallbacks: 1, retries: 3, hedges: 1, ..Counts::default() });
    }
}
