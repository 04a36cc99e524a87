//! How soon the controller tries again after the API server failed it. An API server that is
//! away (restarted, upgraded, failed over) comes back within seconds, and everything the
//! controller does waits on it: so a watch reconnects, a reconcile and a status write are tried
//! again, at most a second apart while it is away, never the tens of seconds an
//! exponential backoff reaches after a 15 s outage. A refusal that repeating cannot mend (4xx)
//! keeps its own, longer backoff.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// The longest wait between two attempts while the API server is away.
pub const MAX_OUTAGE_WAIT: Duration = Duration::from_secs(1);

/// The backoff of every watch: 100 ms, doubling, at most [`MAX_OUTAGE_WAIT`]; reset by any
/// event that arrives (kube's `StreamBackoff` resets it on every `Ok`).
#[derive(Clone, Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = Duration::from_millis(100u64.saturating_mul(1 << self.failures.min(16)));
        self.failures = self.failures.saturating_add(1);
        Some(wait.min(MAX_OUTAGE_WAIT))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// Whether an error says the API server is away or overloaded (so trying again soon may work),
/// rather than that it refused the request.
pub fn transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => false,
        _ => true,
    }
}

/// The wait before attempt `failures + 1`: the exponential one (1 s, 2 s, 4 s ... 5 min) for
/// refusals, at most [`MAX_OUTAGE_WAIT`] while the server is away.
pub fn after(failures: u32, transient: bool) -> Duration {
    let exponential = Duration::from_secs(1u64.checked_shl(failures.saturating_sub(1)).unwrap_or(u64::MAX).min(300));
    if transient { exponential.min(MAX_OUTAGE_WAIT) } else { exponential }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_waits_at_most_a_second_and_starts_over_after_an_event() {
        let mut b = WatchBackoff::default();
        let waits: Vec<u64> = (0..8).map(|_| b.next().unwrap().as_millis() as u64).collect();
        assert_eq!(waits, vec![100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn an_outage_is_retried_within_seconds_a_refusal_backs_off() {
        assert_eq!(after(1, false), Duration::from_secs(1));
        assert_eq!(after(6, false), Duration::from_secs(32));
        assert_eq!(after(6, true), MAX_OUTAGE_WAIT);
        assert_eq!(after(40, false), Duration::from_secs(300));
    }

    #[test]
    fn server_errors_are_transient_refusals_are_not() {
        let status = |code| kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }));
        assert!(transient(&status(503)));
        assert!(transient(&status(429)));
        assert!(!transient(&status(422)));
        assert!(!transient(&status(403)));
    }
}
