//! Adaptive concurrency: [`AdaptiveLimit`] bounds the requests in flight to one endpoint with
//! AIMD, the congestion control of TCP. Every success raises the limit additively (by
//! `increase / limit`, i.e. about `increase` per round of `limit` requests); an overload reply
//! (429, 503) halves it (`decrease`), down to `min`. Only the first overload of each "epoch"
//! counts: requests that were already in flight when the limit was cut report the same
//! congestion and must not cut it again, so the limit falls by one factor per round trip, not
//! per reply. When the overloads stop, successes raise the limit back to `max`.
//!
//! An isolated overload does not cut: a cut needs `confirm` (default 2) overloads within one
//! round (the last `limit` replies). A provider that is really over its limit refuses many
//! requests of a round; a lone 429 among dozens of successes (a blip, or a retried request that
//! waits out its Retry-After anyway) would otherwise halve the pool again and again: with one
//! 429 in 75 replies, cutting on each held a 10-worker run near 5 requests in flight and made a
//! 5%-fault run 1.9× slower than the clean one.
//!
//! Hand-written on `tokio::sync::Semaphore` rather than taken from a crate: the crates that
//! implement adaptive limits (e.g. `congestion-limiter`) are pre-1.0 with little use, or
//! come with a tower/HTTP-layer model that does not fit our decorator stack; the semaphore
//! gives fair FIFO waiting, and the AIMD arithmetic is a dozen lines. The semaphore holds
//! `floor(limit)` permits in total: raising adds permits, cutting forgets free permits at once
//! and retires busy ones as they are released (the `debt`).

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::{Semaphore, SemaphorePermit};

/// The AIMD parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AimdPolicy {
    /// Limit at start.
    pub initial: usize,
    /// The limit never falls below this (at least 1).
    pub min: usize,
    /// The limit never rises above this.
    pub max: usize,
    /// Additive increase per round of `limit` successes.
    pub increase: f64,
    /// Multiplicative factor on an overload (0 < decrease < 1).
    pub decrease: f64,
    /// Overloads within one round (the last `limit` replies) that make a cut (at least 1).
    pub confirm: usize,
}

impl Default for AimdPolicy {
    /// Start at 64 in flight (more than any default worker count, so nothing is throttled
    /// until the endpoint pushes back), halve on a second overload within a round down to 1,
    /// grow back to 256.
    fn default() -> Self {
        Self { initial: 64, min: 1, max: 256, increase: 1.0, decrease: 0.5, confirm: 2 }
    }
}

/// The shared, adaptive bound on requests in flight (see the module docs).
#[derive(Debug)]
pub struct AdaptiveLimit {
    policy: AimdPolicy,
    semaphore: Semaphore,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The current limit (fractional, so that additive increase can be spread over a round).
    limit: f64,
    /// Permits the semaphore holds in total, free or busy: `floor(limit)` once debts are paid.
    granted: usize,
    /// Busy permits to retire when they are released (a cut larger than the free permits).
    debt: usize,
    /// Bumped on every cut; a permit from an older epoch does not cut again.
    epoch: u64,
    /// Cuts so far.
    decreases: u64,
    /// Replies in the current round (it ends after `limit` replies or at a cut).
    round_replies: usize,
    /// Overloads in the current round.
    round_overloads: usize,
}

impl State {
    /// Counts a reply in the round, starting a new round once `limit` replies are in.
    fn reply(&mut self, overload: bool) {
        if self.round_replies >= self.limit.floor() as usize {
            self.round_replies = 0;
            self.round_overloads = 0;
        }
        self.round_replies += 1;
        self.round_overloads += usize::from(overload);
    }
}

/// A slot in flight; give it back through [`AdaptiveLimit::success`] /
/// [`AdaptiveLimit::overload`], or just drop it (a neutral outcome).
#[derive(Debug)]
pub struct LimitSlot<'a> {
    permit: Option<SemaphorePermit<'a>>,
    limiter: &'a AdaptiveLimit,
    epoch: u64,
}

impl AdaptiveLimit {
    /// A limit following `policy` (its bounds are sanitised: `1 ≤ min ≤ initial ≤ max`).
    pub fn new(policy: AimdPolicy) -> Self {
        let min = policy.min.max(1);
        let max = policy.max.max(min);
        let initial = policy.initial.clamp(min, max);
        let policy = AimdPolicy { initial, min, max, ..policy };
        Self {
            policy,
            semaphore: Semaphore::new(initial),
            state: Mutex::new(State {
                limit: initial as f64,
                granted: initial,
                debt: 0,
                epoch: 0,
                decreases: 0,
                round_replies: 0,
                round_overloads: 0,
            }),
        }
    }

    /// The current limit (whole requests).
    pub fn limit(&self) -> usize {
        self.lock().limit.floor() as usize
    }

    /// How many times the limit was cut.
    pub fn decreases(&self) -> u64 {
        self.lock().decreases
    }

    /// Wait for a slot (FIFO).
    pub async fn acquire(&self) -> LimitSlot<'_> {
        // The semaphore is owned by `self` and never closed, so `acquire` cannot fail; a
        // closed semaphore would only mean "no limit", which is what `None` gives.
        let permit = self.semaphore.acquire().await.ok();
        let epoch = self.lock().epoch;
        LimitSlot { permit, limiter: self, epoch }
    }

    /// The request in `slot` succeeded: additive increase.
    pub fn success(&self, slot: LimitSlot<'_>) {
        let mut state = self.lock();
        state.reply(false);
        let limit = state.limit;
        state.limit = (limit + self.policy.increase / limit).min(self.policy.max as f64);
        let target = state.limit.floor() as usize;
        while state.granted < target {
            state.granted += 1;
            if state.debt > 0 {
                state.debt -= 1;
            } else {
                self.semaphore.add_permits(1);
            }
        }
        drop(state);
        drop(slot);
    }

    /// The request in `slot` was refused as overload (429, 503): multiplicative decrease once
    /// `confirm` overloads are in the round, once per epoch. Returns whether the overload is
    /// confirmed: this one cut the limit, or an earlier one of the same congestion did.
    pub fn overload(&self, slot: LimitSlot<'_>) -> bool {
        let mut state = self.lock();
        state.reply(true);
        let confirmed =
            slot.epoch != state.epoch || state.round_overloads >= self.policy.confirm.max(1);
        if slot.epoch == state.epoch && confirmed {
            let target = ((state.limit * self.policy.decrease).floor() as usize)
                .clamp(self.policy.min, self.policy.max);
            state.limit = target as f64;
            state.epoch += 1;
            state.decreases += 1;
            state.round_replies = 0;
            state.round_overloads = 0;
            if state.granted > target {
                let surplus = state.granted - target;
                state.granted = target;
                let forgotten = self.semaphore.forget_permits(surplus);
                state.debt += surplus - forgotten;
            }
            tracing::debug!(limit = target, "endpoint overloaded: concurrency limit cut");
        }
        drop(state);
        drop(slot);
        confirmed
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before it could panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for LimitSlot<'_> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else { return };
        let mut state = self.limiter.lock();
        if state.debt > 0 {
            state.debt -= 1;
            permit.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cuts on every overload (the AIMD mechanics); `confirm` has its own test.
    fn policy(initial: usize, max: usize) -> AimdPolicy {
        AimdPolicy { initial, min: 1, max, confirm: 1, ..AimdPolicy::default() }
    }

    #[tokio::test]
    async fn an_isolated_overload_does_not_cut_two_in_a_round_do() {
        let limit = AdaptiveLimit::new(AimdPolicy { initial: 8, max: 8, ..AimdPolicy::default() });
        // One 429 per round of 8 replies, for 10 rounds: never cut.
        for _ in 0..10 {
            let slot = limit.acquire().await;
            limit.overload(slot);
            for _ in 0..7 {
                let slot = limit.acquire().await;
                limit.success(slot);
            }
        }
        assert_eq!((limit.limit(), limit.decreases()), (8, 0));
        // A storm: every request of a round refused; the second overload cuts, once.
        let slots: Vec<_> = futures::future::join_all((0..8).map(|_| limit.acquire())).await;
        for slot in slots {
            limit.overload(slot);
        }
        assert_eq!((limit.limit(), limit.decreases()), (4, 1));
        // The next round's second overload cuts again.
        for _ in 0..2 {
            let slot = limit.acquire().await;
            limit.overload(slot);
        }
        assert_eq!((limit.limit(), limit.decreases()), (2, 2));
    }

    #[tokio::test]
    async fn one_cut_per_epoch_and_busy_permits_retire() {
        let limit = AdaptiveLimit::new(policy(8, 8));
        let mut slots = Vec::new();
        for _ in 0..8 {
            slots.push(limit.acquire().await);
        }
        // All eight in flight get a 429: one cut, to 4.
        for slot in slots.drain(..) {
            limit.overload(slot);
        }
        assert_eq!((limit.limit(), limit.decreases()), (4, 1));
        assert_eq!(limit.semaphore.available_permits(), 4);
        // A new-epoch overload cuts again.
        let slot = limit.acquire().await;
        limit.overload(slot);
        assert_eq!(limit.limit(), 2);
        assert_eq!(limit.semaphore.available_permits(), 2);
    }

    #[tokio::test]
    async fn cut_while_busy_pays_the_debt_on_release() {
        let limit = AdaptiveLimit::new(policy(4, 4));
        let slots: Vec<_> = futures::future::join_all((0..4).map(|_| limit.acquire())).await;
        let mut slots = slots.into_iter();
        let first = slots.next().unwrap();
        limit.overload(first);
        assert_eq!(limit.limit(), 2);
        // Three still busy, two of them must retire.
        drop(slots);
        assert_eq!(limit.semaphore.available_permits(), 2);
        assert_eq!(limit.lock().debt, 0);
    }

    #[tokio::test]
    async fn successes_recover_the_limit_up_to_max() {
        let limit = AdaptiveLimit::new(policy(8, 8));
        let slot = limit.acquire().await;
        limit.overload(slot);
        let slot = limit.acquire().await;
        limit.overload(slot);
        assert_eq!(limit.limit(), 2);
        for _ in 0..200 {
            let slot = limit.acquire().await;
            limit.success(slot);
        }
        assert_eq!(limit.limit(), 8);
        assert_eq!(limit.semaphore.available_permits(), 8);
    }

    #[tokio::test]
    async fn never_below_min() {
        let limit = AdaptiveLimit::new(AimdPolicy { min: 2, ..policy(4, 4) });
        for _ in 0..5 {
            let slot = limit.acquire().await;
            limit.overload(slot);
        }
        assert_eq!(limit.limit(), 2);
    }
}
