//! Adaptive concurrency: [`AdaptiveLimit`] bounds the requests in flight to one endpoint with
//! AIMD, the congestion control of TCP. Every success raises the limit additively (by
//! `increase / limit`, i.e. about `increase` per round of `limit` requests); an overload reply
//! (429, 503) halves it (`decrease`), down to `min`. Only the first overload of each "epoch"
//! counts: requests that were already in flight when the limit was cut report the same
//! congestion and must not cut it again, so the limit falls by one factor per round trip, not
//! per reply. When the overloads stop, successes raise the limit back to `max`.
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
}

impl Default for AimdPolicy {
    /// Start at 64 in flight (more than any default worker count, so nothing is throttled
    /// until the endpoint pushes back), halve on overload down to 1, grow back to 256.
    fn default() -> Self {
        Self { initial: 64, min: 1, max: 256, increase: 1.0, decrease: 0.5 }
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
}

/// A slot in flight; give it back through [`AdaptiveLimit::success`] /
/// [`AdaptiveLimit::overload`], or just drop it (a neutral outcome).
#[derive(Debug)]
pub struct Slot<'a> {
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
    pub async fn acquire(&self) -> Slot<'_> {
        // The semaphore is owned by `self` and never closed, so `acquire` cannot fail; a
        // closed semaphore would only mean "no limit", which is what `None` gives.
        let permit = self.semaphore.acquire().await.ok();
        let epoch = self.lock().epoch;
        Slot { permit, limiter: self, epoch }
    }

    /// The request in `slot` succeeded: additive increase.
    pub fn success(&self, slot: Slot<'_>) {
        let mut state = self.lock();
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

    /// The request in `slot` was refused as overload (429, 503): multiplicative decrease,
    /// once per epoch.
    pub fn overload(&self, slot: Slot<'_>) {
        let mut state = self.lock();
        if slot.epoch == state.epoch {
            let target = ((state.limit * self.policy.decrease).floor() as usize)
                .clamp(self.policy.min, self.policy.max);
            state.limit = target as f64;
            state.epoch += 1;
            state.decreases += 1;
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
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent before it could panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot<'_> {
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

    fn policy(initial: usize, max: usize) -> AimdPolicy {
        AimdPolicy { initial, min: 1, max, ..AimdPolicy::default() }
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
