//! A seeded mix of the faults real endpoints produce, put in front of any responder: a share
//! of the requests gets a 429, a 500, a hung reply or a truncated 200 body instead of the
//! responder's answer.
//!
//! Deterministic: whether a request gets a fault, and which, depends only on the seed, the
//! request (path and body) and how many identical requests came before it (a retry or a hedge
//! of a request is the next occurrence of the same body, and gets its own draw). So a run
//! with many concurrent workers sees the same faults on the same requests every time, whatever
//! the arrival order.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{RecordedRequest, ScriptedReply};

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum InjectedFault {
    /// 429 (with `Retry-After` when the mix names one).
    RateLimited,
    /// 500.
    ServerError,
    /// The responder's reply, but only after the mix's `hang`.
    Hang,
    /// 200 with a truncated JSON body.
    Truncated,
}

impl InjectedFault {
    const ALL: [InjectedFault; 4] =
        [Self::RateLimited, Self::ServerError, Self::Hang, Self::Truncated];
}

/// The fault mix (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultMix {
    /// Seed of every draw.
    pub seed: u64,
    /// Share of requests that get a fault (0..=1), the four kinds equally likely.
    pub rate: f64,
    /// How long a hung reply takes (longer than the hedging deadline, or the client timeout).
    pub hang: Duration,
    /// `Retry-After` seconds of the injected 429s (`None`: no header).
    pub retry_after: Option<u64>,
    /// Whether embedding requests may hang too (by default they get the other three kinds:
    /// the client hedges chat requests only).
    pub hang_embeddings: bool,
}

impl FaultMix {
    /// `rate` of the requests faulty, hangs of `hang`, 429s without `Retry-After`.
    pub fn new(seed: u64, rate: f64, hang: Duration) -> Self {
        Self { seed, rate, hang, retry_after: None, hang_embeddings: false }
    }

    /// The fault for the `occurrence`-th (0-based) request whose path and body hash to `key`.
    pub fn draw(&self, key: u64, occurrence: u64, embeddings: bool) -> Option<InjectedFault> {
        let bits = mix(self.seed ^ mix(key ^ mix(occurrence.wrapping_add(0x5eed))));
        let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
        if unit >= self.rate.clamp(0.0, 1.0) {
            return None;
        }
        let kinds: &[InjectedFault] = if embeddings && !self.hang_embeddings {
            &[InjectedFault::RateLimited, InjectedFault::ServerError, InjectedFault::Truncated]
        } else {
            &InjectedFault::ALL
        };
        Some(kinds[(mix(bits) % kinds.len() as u64) as usize])
    }

    /// A responder that answers like `responder` except for the faults of this mix, and the
    /// log of what it injected.
    pub fn wrap<F>(
        self,
        responder: F,
    ) -> (impl Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static, Arc<FaultLog>)
    where
        F: Fn(&RecordedRequest) -> ScriptedReply + Send + Sync + 'static,
    {
        let log = Arc::new(FaultLog::default());
        let seen: Mutex<BTreeMap<u64, u64>> = Mutex::default();
        let shared = Arc::clone(&log);
        let wrapped = move |request: &RecordedRequest| {
            let key = fnv1a(request.path.as_bytes()) ^ fnv1a(request.body.to_string().as_bytes());
            let occurrence = {
                let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                let count = seen.entry(key).or_default();
                *count += 1;
                *count - 1
            };
            shared.requests.fetch_add(1, Ordering::Relaxed);
            let Some(fault) = self.draw(key, occurrence, request.is_embeddings()) else {
                return responder(request);
            };
            shared.record(fault);
            if fault == InjectedFault::Hang {
                shared.record_hang(key, occurrence);
            }
            match fault {
                InjectedFault::RateLimited => ScriptedReply::RateLimited {
                    retry_after: self.retry_after.map(|seconds| seconds.to_string()),
                },
                InjectedFault::ServerError => ScriptedReply::server_error(500),
                InjectedFault::Hang => responder(request).delayed(self.hang),
                InjectedFault::Truncated => ScriptedReply::MalformedJson,
            }
        };
        (wrapped, log)
    }
}

/// What a [`FaultMix`] injected, counted as it happens.
#[derive(Debug, Default)]
pub struct FaultLog {
    requests: AtomicUsize,
    counts: [AtomicUsize; 4],
    hangs: Mutex<Vec<HungRequest>>,
}

/// One request that was given a hung reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HungRequest {
    /// Hash of the request's path and body: identical requests (a retry, a hedge) share it.
    pub key: u64,
    /// How many identical requests came before it.
    pub occurrence: u64,
    /// When it arrived.
    pub at: Instant,
}

impl FaultLog {
    fn record(&self, fault: InjectedFault) {
        if let Some(index) = InjectedFault::ALL.iter().position(|kind| *kind == fault) {
            self.counts[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn record_hang(&self, key: u64, occurrence: u64) {
        let hung = HungRequest { key, occurrence, at: Instant::now() };
        self.hangs.lock().unwrap_or_else(PoisonError::into_inner).push(hung);
    }

    /// Every hung request, in arrival order.
    pub fn hangs(&self) -> Vec<HungRequest> {
        self.hangs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Hung requests that were themselves the race of an identical request hung less than
    /// `within` before them (a hedge that hung too): no client can race those.
    pub fn hung_behind_a_hang(&self, within: Duration) -> usize {
        let hangs = self.hangs();
        hangs
            .iter()
            .filter(|hung| {
                hangs.iter().any(|earlier| {
                    earlier.key == hung.key
                        && earlier.occurrence < hung.occurrence
                        && hung.at.saturating_duration_since(earlier.at) < within
                })
            })
            .count()
    }

    /// Requests seen.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Faults of `kind` injected.
    pub fn count(&self, kind: InjectedFault) -> usize {
        InjectedFault::ALL
            .iter()
            .position(|known| *known == kind)
            .map_or(0, |index| self.counts[index].load(Ordering::Relaxed))
    }

    /// Faults injected in all.
    pub fn total(&self) -> usize {
        InjectedFault::ALL.iter().map(|kind| self.count(*kind)).sum()
    }
}

impl fmt::Display for FaultLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} faults in {} requests ({} × 429, {} × 500, {} hangs, {} truncated bodies)",
            self.total(),
            self.requests(),
            self.count(InjectedFault::RateLimited),
            self.count(InjectedFault::ServerError),
            self.count(InjectedFault::Hang),
            self.count(InjectedFault::Truncated)
        )
    }
}

/// FNV-1a, 64 bits: a stable hash of a request (the standard hasher may change between
/// releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64's finaliser: spreads every input bit over the output.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_seeded_and_near_the_rate() {
        let mix = FaultMix::new(7, 0.05, Duration::from_secs(1));
        let draws: Vec<Option<InjectedFault>> =
            (0..20_000).map(|key| mix.draw(fnv1a(&u64::to_le_bytes(key)), 0, false)).collect();
        let again: Vec<Option<InjectedFault>> =
            (0..20_000).map(|key| mix.draw(fnv1a(&u64::to_le_bytes(key)), 0, false)).collect();
        assert_eq!(draws, again);
        let faults = draws.iter().flatten().count();
        assert!((800..1200).contains(&faults), "{faults} of 20000");
        for kind in InjectedFault::ALL {
            let count = draws.iter().flatten().filter(|fault| **fault == kind).count();
            assert!(count > 150, "{kind:?}: {count}");
        }
        let other = FaultMix { seed: 8, ..mix.clone() };
        assert_ne!(
            draws,
            (0..20_000)
                .map(|key| other.draw(fnv1a(&u64::to_le_bytes(key)), 0, false))
                .collect::<Vec<_>>()
        );
        // A retry of the same request gets its own draw; embeddings never hang by default.
        assert!((0..2000).any(|key| mix.draw(key, 0, false) != mix.draw(key, 1, false)));
        assert!((0..20_000).all(|key| mix.draw(key, 0, true) != Some(InjectedFault::Hang)));
    }

    #[test]
    fn a_hang_right_behind_an_identical_hang_is_a_hung_hedge() {
        let log = FaultLog::default();
        let now = Instant::now();
        let hang = |key, occurrence, after_ms| HungRequest {
            key,
            occurrence,
            at: now + Duration::from_millis(after_ms),
        };
        log.hangs.lock().unwrap().extend([
            hang(1, 0, 0),
            hang(1, 1, 500),    // the hedge of the first, hung too
            hang(1, 2, 5_600),  // the retry after the hedge's timeout: a fresh hang
            hang(2, 0, 200),    // another request
            hang(2, 3, 10_000), // much later
        ]);
        assert_eq!(log.hung_behind_a_hang(Duration::from_secs(5)), 1);
        assert_eq!(log.hung_behind_a_hang(Duration::from_secs(6)), 2);
    }
}
