//! Per-caller rate limits: a token bucket per key (a user, or the peer address of calls that
//! have not proven who they are), refilled continuously. Time is passed in, so the limiter is
//! tested by value.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Calls per second and the burst a caller may spend at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// Sustained calls per second.
    pub per_second: f64,
    /// Calls allowed at once after a quiet spell.
    pub burst: u32,
}

impl Default for Limit {
    fn default() -> Limit {
        Limit { per_second: 10.0, burst: 40 }
    }
}

/// Buckets untouched this long are forgotten (they would be full again anyway).
const FORGET_AFTER: Duration = Duration::from_secs(300);
/// Buckets kept before the forgotten ones are swept.
const SWEEP_AT: usize = 10_000;

/// One bucket per key.
#[derive(Debug)]
pub struct RateLimiter {
    limit: Limit,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter giving every key `limit`.
    pub fn new(limit: Limit) -> RateLimiter {
        RateLimiter { limit, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one call from `key`'s bucket at `now`; `Err` carries how long until one is free.
    pub fn take(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let burst = f64::from(self.limit.burst.max(1));
        let mut buckets = self.buckets.lock().expect("lock");
        if buckets.len() >= SWEEP_AT {
            buckets.retain(|_, (_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
        }
        let (tokens, at) = buckets.entry(key.to_string()).or_insert((burst, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() * self.limit.per_second;
        *tokens = (*tokens + refill).min(burst);
        *at = now.max(*at);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        let rate = self.limit.per_second.max(f64::MIN_POSITIVE);
        Err(Duration::from_secs_f64(((1.0 - *tokens) / rate).min(3600.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_spent_then_calls_come_back_at_the_rate() {
        let limiter = RateLimiter::new(Limit { per_second: 2.0, burst: 3 });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take("alice", t0).is_ok());
        }
        let wait = limiter.take("alice", t0).expect_err("the burst is spent");
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500), "{wait:?}");
        // Another caller is not held back by alice.
        assert!(limiter.take("bob", t0).is_ok());
        // Half a second later one call is free again, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert!(limiter.take("alice", t1).is_ok());
        assert!(limiter.take("alice", t1).is_err());
        // A long pause refills up to the burst, never beyond.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limiter.take("alice", t2).is_ok());
        }
        assert!(limiter.take("alice", t2).is_err());
    }
}
