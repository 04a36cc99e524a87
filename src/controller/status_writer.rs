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

/// A status waiting to be written, with how often writing it failed.
#[derive(Clone, Debug)]
struct Pending {
    body: Value,
    failures: u32,
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
        self.inner.pending.lock().expect("lock").insert(target, Pending { body, failures: 0 });
        self.inner.wake.notify_one();
    }

    /// How many statuses wait to be written.
    pub fn backlog(&self) -> usize {
        self.inner.pending.lock().expect("lock").len()
    }

    /// Writes statuses until the process ends, `parallel` at a time.
    pub async fn run(self, client: Client, parallel: usize) {
        loop {
            let batch: Vec<(Target, Pending)> =
                std::mem::take(&mut *self.inner.pending.lock().expect("lock")).into_iter().collect();
            if batch.is_empty() {
                self.inner.wake.notified().await;
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
            let mut retry = Duration::ZERO;
            for (target, pending, result) in results {
                match result {
                    Ok(()) => {}
                    // The object went: nothing to write any more.
                    Err(kube::Error::Api(s)) if s.is_not_found() => {}
                    Err(e) => {
                        let failures = pending.failures + 1;
                        tracing::warn!(?target, error = %e, failures, "status not written; retrying");
                        retry = retry.max(super::run::backoff(failures));
                        // A newer status sent meanwhile wins over the one that failed.
                        self.inner
                            .pending
                            .lock()
                            .expect("lock")
                            .entry(target)
                            .or_insert(Pending { body: pending.body, failures });
                    }
                }
            }
            if !retry.is_zero() {
                tokio::time::sleep(retry.min(Duration::from_secs(30))).await;
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
