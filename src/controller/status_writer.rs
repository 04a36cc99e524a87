//! The one status writer: TrainJob and Queue status reach the API server through it, never from
//! the scheduling loop's path. Each object's latest status wins (a newer one replaces one not yet
//! written), writes go out with bounded parallelism, and a failed write is retried with backoff
//! unless a newer status came meanwhile.

use std::collections::BTreeMap;
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
    wake: Notify,
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

    /// How many statuses wait to be written.
    pub fn backlog(&self) -> usize {
        self.inner.pending.lock().expect("lock").len()
    }

    /// Writes statuses until the process ends, `parallel` at a time. A status whose write failed
    /// waits out its own backoff; the others go on meanwhile.
    pub async fn run(self, client: Client, parallel: usize) {
        loop {
            let now = tokio::time::Instant::now();
            let (batch, next) = {
                let mut pending = self.inner.pending.lock().expect("lock");
                let due: Vec<Target> = pending
                    .iter()
                    .filter(|(_, p)| p.not_before.is_none_or(|t| t <= now))
                    .map(|(t, _)| t.clone())
                    .collect();
                let batch: Vec<(Target, Pending)> =
                    due.into_iter().filter_map(|t| pending.remove(&t).map(|p| (t, p))).collect();
                let next = pending.values().filter_map(|p| p.not_before).min();
                (batch, next)
            };
            if batch.is_empty() {
                match next {
                    Some(at) => {
                        tokio::select! {
                            () = self.inner.wake.notified() => {}
                            () = tokio::time::sleep_until(at) => {}
                        }
                    }
                    None => self.inner.wake.notified().await,
                }
                continue;
            }
            let results: Vec<(Target, Pending, Result<(), kube::Error>)> = futures::stream::iter(batch)
                .map(|(target, pending)| {
                    let client = client.clone();
                    async move {
                        let result = write(&client, &target, &pending.body).await;
                        (target, pending, result)
                    }
                })
                .buffer_unordered(parallel.max(1))
                .collect()
                .await;
            for (target, pending, result) in results {
                match result {
                    Ok(()) => {}
                    // The object went: nothing to write any more.
                    Err(kube::Error::Api(s)) if s.is_not_found() => {}
                    Err(e) => {
                        let failures = pending.failures + 1;
                        tracing::warn!(?target, error = %e, failures, "status not written; retrying");
                        let wait = super::run::backoff(failures).min(Duration::from_secs(30));
                        let not_before = Some(tokio::time::Instant::now() + wait);
                        // A newer status sent meanwhile wins over the one that failed.
                        self.inner.pending.lock().expect("lock").entry(target).or_insert(Pending {
                            body: pending.body,
                            failures,
                            not_before,
                        });
                    }
                }
            }
        }
    }
}

/// One status write: a server-side apply of the status subresource by field manager `trainyard`.
pub async fn write(client: &Client, target: &Target, body: &Value) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match target {
        Target::Queue(name) => {
            Api::<Queue>::all(client.clone()).patch_status(name, &params, &Patch::Apply(body)).await?;
        }
        Target::TrainJob(ns, name) => {
            Api::<TrainJob>::namespaced(client.clone(), ns).patch_status(name, &params, &Patch::Apply(body)).await?;
        }
    }
    Ok(())
}
