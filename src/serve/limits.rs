//! Per-key request rates (`serve --key-rate-per-minute`): one GCRA limiter per token or key
//! name (`governor`'s keyed limiter), so one key's burst never slows another's. A request past
//! its key's rate is answered 429 `rate_limited` with `Retry-After`, and counted in `/metrics`
//! by key name.
//!
//! Bounded: the limiter holds one entry per name that passed authentication (the operator's
//! tokens and the store's keys, never a guessed token), and [`KeyLimits::check`] drops the
//! entries of idle keys once there are more than [`MAX_TRACKED`].

use std::num::NonZeroU32;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

/// Names tracked before idle ones are dropped (an idle key's entry is the same as none).
pub(crate) const MAX_TRACKED: usize = 10_000;

/// The limiters of every key.
pub(crate) struct KeyLimits {
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

impl KeyLimits {
    /// `per_minute` requests a minute per key, in bursts of up to `per_minute`.
    pub(crate) fn new(per_minute: NonZeroU32) -> Self {
        Self {
            limiter: governor::RateLimiter::keyed(Quota::per_minute(per_minute)),
            clock: DefaultClock::default(),
        }
    }

    /// `Ok` when `key` may make a request now; else the seconds to wait (at least 1).
    pub(crate) fn check(&self, key: &str) -> Result<(), u64> {
        if self.limiter.len() > MAX_TRACKED {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&key.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }

    /// Names tracked now.
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_has_its_own_budget_and_a_refusal_says_how_long_to_wait() {
        let limits = KeyLimits::new(NonZeroU32::new(3).unwrap());
        for _ in 0..3 {
            assert!(limits.check("alice").is_ok());
        }
        let wait = limits.check("alice").unwrap_err();
        assert!((1..=20).contains(&wait), "{wait}");
        assert!(limits.check("bob").is_ok(), "bob's budget is his own");
        assert_eq!(limits.tracked(), 2);
    }
}
