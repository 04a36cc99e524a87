//! The one status writer: TrainJob and Queue status reach the API server through it, never from
//! the scheduling loop's path. Each object's latest status wins (a newer one replaces one not yet
//! written), writes go out with bounded parallelism, and a failed write is retried with backoff
//! unless a newer status came meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;
use tokio::sync::Notify;

use crate::api::{FIELD_MANAGER, Queue, TrainJob};

/// Whose status.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// A cluster-scoped Queue, by name.
    Queue(String),
    /// A TrainJob, by namespace and name.
    TrainJob(String, String),
}

/// A status waiting to be written, with how often writing it failed and when to try again.
#[derive(Clone, Debug)]
struct Pending {
    body: Value,
    failures: u32,
    not_before: Option<tokio::time::Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    pending: Mutex<BTreeMap<Target, Pending>>,
    /// The last status written to each object: the digest of its body and the resourceVersion
    /// the write left.
    written: Mutex<HashMap<Target, (u64, u64)>>,
    wake: Notify,
}

fn digest(body: &Value) -> u64 {
    trainyard_topology::rng::fnv1a(body.to_string().as_bytes())
}

/// The handle that takes statuses; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct StatusWriter {
    inner: Arc<Inner>,
}

impl StatusWriter {
    /// Sends the status `body` (a server-side apply body with `apiVersion`, `kind` and `status`)
    /// of `target`; it replaces one not written yet. Never waits.
    pub fn send(&self, target: Target, body: Value) {
        self.inner.pending.lock().expect("lock").insert(target, Pending { body, failures: 0, not_before: None });
        self.inner.wake.notify_one();
    }

    /// Whether `body` is what this writer last wrote to `target` and the caller read the object
    /// at a version older than that write (its cache has not seen the write yet): sending it
    /// again would write the same thing. A version that cannot be compared is never an echo.
    pub fn echo(&self, target: &Target, body: &Value, read_version: Option<&str>) -> bool {
        let Some(read) = read_version.and_then(|v| v.parse::<u64>().ok()) else { return false };
        if self.inner.pending.lock().expect("lock").contains_key(target) {
            return false;
        }
        self.inner.written.lock().expect("lock").get(target).is_some_and(|(d, at)| *d == digest(body) && read < *at)
    }

    /// Forgets what was written to an object that is going away.
    pub fn forget(&self, target: &Target) {
        self.inner.written.lock().expect("lock").remove(target);
    }

    /// How many statuses wait to be written.
    pub fn backlog(&self) -> usize {
        self.inner.pending.lock().expect("lock").len()
    }

    /// Writes statuses until the process ends, up to `parallel` at once: a slot that frees is
    /// filled at once, each write is bounded in time, and a status whose write failed waits out
    /// its own backoff while the others go on. A refusal that writing again cannot mend (the
    /// server finds the status invalid or forbidden) is logged and dropped.
    pub async fn run(self, client: Client, parallel: usize) {
        let mut in_flight = futures::stream::FuturesUnordered::new();
        loop {
            let now = tokio::time::Instant::now();
            let next = {
                let mut pending = self.inner.pending.lock().expect("lock");
                let room = parallel.max(1).saturating_sub(in_flight.len());
                let due: Vec<Target> = pending
                    .iter()
                    .filter(|(_, p)| p.not_before.is_none_or(|t| t <= now))
                    .map(|(t, _)| t.clone())
                    .take(room)
                    .collect();
                for target in due {
                    let Some(p) = pending.remove(&target) else { continue };
                    let client = client.clone();
                    in_flight.push(async move {
                        let result = tokio::time::timeout(WRITE_TIMEOUT, write(&client, &target, &p.body)).await;
                        (target, p, result)
                    });
                }
                pending.values().filter_map(|p| p.not_before).min()
            };
            let wait = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((target, pending, result)) = in_flight.next(), if !in_flight.is_empty() => {
                    self.settle(target, pending, result);
                }
                () = self.inner.wake.notified() => {}
                () = wait => {}
            }
        }
    }

    /// What follows one write.
    fn settle(
        &self,
        target: Target,
        pending: Pending,
        result: Result<Result<Option<String>, kube::Error>, tokio::time::error::Elapsed>,
    ) {
        let (error, transient) = match result {
            Ok(Ok(version)) => {
                if let Some(v) = version.and_then(|v| v.parse::<u64>().ok()) {
                    self.inner.written.lock().expect("lock").insert(target, (digest(&pending.body), v));
                }
                return;
            }
            // The object went: nothing to write any more.
            Ok(Err(kube::Error::Api(s))) if s.is_not_found() => {
                self.forget(&target);
                return;
            }
            Ok(Err(kube::Error::Api(s))) if matches!(s.code, 400 | 403 | 422) => {
                tracing::error!(?target, error = %s, "status refused; not written");
                return;
            }
            Ok(Err(e)) => (e.to_string(), crate::controller::process::retry::transient(&e)),
            Err(_) => (format!("no answer in {} s", WRITE_TIMEOUT.as_secs()), true),
        };
        let failures = pending.failures + 1;
        tracing::warn!(?target, error = %error, failures, "status not written; retrying");
        // While the API server is away, the write is tried again every couple of seconds, so
        // that conditions follow within moments of its return.
        let wait = crate::controller::process::retry::after(failures, transient).min(Duration::from_secs(30));
        let not_before = Some(tokio::time::Instant::now() + wait);
        // A newer status sent meanwhile wins over the one that failed.
        self.inner.pending.lock().expect("lock").entry(target).or_insert(Pending {
            body: pending.body,
            failures,
            not_before,
        });
    }
}

/// The longest one status write may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// One status write: a server-side apply of the status subresource by field manager `trainyard`.
/// Returns the resourceVersion it left.
pub async fn write(client: &Client, target: &Target, body: &Value) -> Result<Option<String>, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let version = match target {
        Target::Queue(name) => {
            Api::<Queue>::all(client.clone())
                .patch_status(name, &params, &Patch::Apply(body))
                .await?
                .metadata
                .resource_version
        }
        Target::TrainJob(ns, name) => {
            Api::<TrainJob>::namespaced(client.clone(), ns)
                .patch_status(name, &params, &Patch::Apply(body))
                .await?
                .metadata
                .resource_version
        }
    };
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A status is an echo only while the reader's version is older than the write that left it,
    /// and only for the very body written.
    #[test]
    fn only_a_write_the_cache_has_not_seen_yet_is_an_echo() {
        let writer = StatusWriter::default();
        let target = Target::TrainJob("team".into(), "llm".into());
        let body = json!({"status": {"conditions": [{"type": "Admitted", "status": "True"}]}});
        assert!(!writer.echo(&target, &body, Some("9")), "nothing written yet");
        let written = Pending { body: body.clone(), failures: 0, not_before: None };
        writer.settle(target.clone(), written, Ok(Ok(Some("10".into()))));
        assert!(writer.echo(&target, &body, Some("9")), "read before the write");
        assert!(!writer.echo(&target, &body, Some("10")), "read at the write: the status differs from what it shows");
        assert!(!writer.echo(&target, &json!({"status": {}}), Some("9")), "another body");
        assert!(!writer.echo(&target, &body, Some("not-a-number")), "versions that cannot be compared");
        writer.send(target.clone(), json!({"status": {"x": 1}}));
        assert!(!writer.echo(&target, &body, Some("9")), "a newer status waits to be written");
        writer.forget(&target);
        writer.inner.pending.lock().unwrap().clear();
        assert!(!writer.echo(&target, &body, Some("9")), "forgotten");
    }
}
