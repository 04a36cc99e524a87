//! Leadership over time: a standby serves its endpoints (Ready, not acting) and looks at the
//! lease every second; the leader renews it and exits when it cannot; a graceful stop gives the
//! lease up so that a standby takes over at once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::Client;

use crate::controller::serving::http::Health;
use crate::controller::serving::lease::LeaseLock;
use crate::controller::serving::metrics::Metrics;

/// How often a standby looks at the lease: a released lease is taken within about this long.
const STANDBY_LOOK: Duration = Duration::from_secs(1);

/// Blocks until this replica holds the lease, then keeps renewing it in the background; a replica
/// that cannot renew before the lease runs out exits so that it never acts without the lease.
pub async fn acquire(client: Client, lock: LeaseLock, metrics: Arc<Metrics>, health: Arc<Health>) {
    health.standby.store(true, Ordering::Relaxed);
    loop {
        match lock.try_acquire(client.clone(), Timestamp::now()).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "lease"),
        }
        tokio::time::sleep(STANDBY_LOOK).await;
    }
    health.standby.store(false, Ordering::Relaxed);
    tracing::info!(identity = %lock.identity, "leading");
    metrics.leader.set(1);
    let renew_every = Duration::from_secs(u64::try_from(lock.duration_s / 3).unwrap_or(5).max(1));
    // Give up well before another replica may take over (at renewal + duration), and never let a
    // hung request stretch that: each attempt is bounded by what is left of the deadline.
    let renew_deadline = Duration::from_millis(u64::try_from(lock.duration_s).unwrap_or(15) * 2000 / 3);
    tokio::spawn(async move {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(renew_every).await;
            let left = renew_deadline.saturating_sub(last_renewal.elapsed());
            match tokio::time::timeout(left, lock.try_acquire(client.clone(), Timestamp::now())).await {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!("lost the lease to another replica; exiting");
                    std::process::exit(1);
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => tracing::warn!("lease renewal timed out"),
            }
            if last_renewal.elapsed() >= renew_deadline {
                tracing::error!("could not renew the lease in time; exiting");
                std::process::exit(1);
            }
        }
    });
}

/// Gives the lease up on a graceful stop (bounded: a stop never hangs on the API server).
pub async fn release(client: Client, lock: &LeaseLock) {
    match tokio::time::timeout(Duration::from_secs(3), lock.release(client, Timestamp::now())).await {
        Ok(Ok(true)) => tracing::info!(identity = %lock.identity, "lease released"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "lease not released; a standby takes over when it expires"),
        Err(_) => tracing::warn!("releasing the lease timed out; a standby takes over when it expires"),
    }
}
