//! A unit of model calls (one judgement: a request and its re-asks) that succeeds or fails as
//! a whole: [`afresh_on_failure`] says whether any of its chat calls was sent or all were
//! answered from the tape, and does not let a failure recorded on a tape (a reply that could
//! not be read) be replayed forever: when every call of a failed unit was answered from a
//! recording tape, those calls are taken off it and the unit is asked once more.
//!
//! A failed unit keeps its calls on the tape until the next run asks it again, so a replay of
//! the run that failed (`verify`) meets the same failure.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use super::CallStore;
use crate::llm::Usage;

tokio::task_local! {
    static UNIT: RefCell<UnitSeen>;
}

/// A call answered from a recording tape.
#[derive(Debug)]
pub(super) struct Replayed {
    /// The tape's store.
    pub store: Arc<CallStore>,
    /// The call's key.
    pub key: String,
    /// The reply it was answered with.
    pub reply: Vec<u8>,
    /// Whether the call was recorded before this tape was opened (by an earlier run), not by
    /// this run: only such a call may be taken off the tape, since this run's own verdicts
    /// rest on the calls it recorded.
    pub earlier: bool,
}

/// What the chat calls of one unit did, as the tape saw them.
#[derive(Debug, Default)]
struct UnitSeen {
    /// Calls answered from a recording tape.
    replayed: Vec<Replayed>,
    /// Calls sent to the endpoint (a send that failed included).
    sent: u64,
    /// Tokens of the replies obtained by sending.
    usage_sent: Usage,
}

/// What the calls of a unit did, as the tapes they went through saw them (a model with no
/// tape sees nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnitCalls {
    /// Chat calls answered from a recording tape.
    pub replayed: u64,
    /// Chat calls a tape sent to the endpoint.
    pub sent: u64,
    /// Tokens of the replies a tape obtained by sending.
    pub usage_sent: Usage,
}

impl UnitCalls {
    /// Whether the unit was answered from a tape alone, sending nothing.
    pub fn from_tape(&self) -> bool {
        self.replayed > 0 && self.sent == 0
    }

    /// Whether no tape saw the unit's calls (an untaped model).
    pub fn untaped(&self) -> bool {
        self.replayed == 0 && self.sent == 0
    }
}

impl UnitSeen {
    fn calls(&self) -> UnitCalls {
        UnitCalls {
            replayed: self.replayed.len() as u64,
            sent: self.sent,
            usage_sent: self.usage_sent,
        }
    }
}

/// Notes that a chat call was answered from a recording tape.
pub(super) fn note_replayed(call: Replayed) {
    let _ = UNIT.try_with(|unit| unit.borrow_mut().replayed.push(call));
}

/// Notes that a chat call is being sent.
pub(super) fn note_sent() {
    let _ = UNIT.try_with(|unit| unit.borrow_mut().sent += 1);
}

/// Notes the tokens of a reply obtained by sending.
pub(super) fn note_usage(usage: Usage) {
    let _ = UNIT.try_with(|unit| unit.borrow_mut().usage_sent += usage);
}

/// Runs `future` as a unit: its output and what its calls did.
async fn in_unit<T>(future: impl Future<Output = T>) -> (T, UnitSeen) {
    UNIT.scope(RefCell::new(UnitSeen::default()), async {
        let output = future.await;
        let unit = UNIT.try_with(RefCell::take).unwrap_or_default();
        (output, unit)
    })
    .await
}

/// Runs the unit `attempt`; when it fails with every chat call answered from a recording tape,
/// takes those calls off the tape and runs it once more, so that it is sent afresh (see the
/// module documentation). Says what the calls of the run that counts did.
pub async fn afresh_on_failure<T, E, F, Fut>(attempt: F) -> (Result<T, E>, UnitCalls)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let (first, unit) = in_unit(attempt()).await;
    let calls = unit.calls();
    // A failure this run already met (a call it recorded itself, or shares with a unit that
    // sent it) is kept: asking again would give two units of one run two replies to one key.
    let earlier = unit.replayed.iter().all(|call| call.earlier);
    if first.is_ok() || unit.sent > 0 || unit.replayed.is_empty() || !earlier {
        return (first, calls);
    }
    if let Err(error) = forget(unit.replayed).await {
        tracing::warn!(error = %error, "could not take a failed call off the tape; it is replayed");
        return (first, calls);
    }
    let (second, unit) = in_unit(attempt()).await;
    (second, unit.calls())
}

/// Takes the calls `replayed` off their stores, each only while its recorded reply is the one
/// replayed (a unit sharing the key may have asked it afresh already).
async fn forget(replayed: Vec<Replayed>) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for call in &replayed {
            call.store.forget_reply(&call.key, &call.reply)?;
        }
        Ok(())
    })
    .await
    .map_err(|error| anyhow::anyhow!("forgetting recorded calls: {error}"))?
}
