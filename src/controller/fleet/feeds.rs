//! A worker's watches forwarded into the fleet merge: its nodes and pods, and its ResourceSlices
//! and ResourceClaims when it serves DRA (a worker that does not lists none of them).

use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;

use super::merge::WorkerEvent;
use crate::controller::process::retry::WatchBackoff;
use crate::controller::watching::caches::without_managed_fields;

/// Forwards one watch of a worker into the merge.
pub(super) fn spawn_feed<K, S>(
    stream: S,
    merge: mpsc::UnboundedSender<(String, WorkerEvent)>,
    wrap: impl Fn(watcher::Event<K>) -> (String, WorkerEvent) + Send + 'static,
    cluster: &str,
) -> tokio::task::AbortHandle
where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    tokio::spawn(feed(stream, merge, wrap, cluster.to_string())).abort_handle()
}

async fn feed<K, S>(
    stream: S,
    merge: mpsc::UnboundedSender<(String, WorkerEvent)>,
    wrap: impl Fn(watcher::Event<K>) -> (String, WorkerEvent),
    cluster: String,
) where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut events = std::pin::pin!(stream.backoff(WatchBackoff::default()));
    while let Some(event) = events.next().await {
        match event {
            Ok(e) => {
                if merge.send(wrap(e)).is_err() {
                    return;
                }
            }
            Err(e) => tracing::debug!(%cluster, error = %e, "worker watch failed; retrying"),
        }
    }
}

/// Forwards a worker's ResourceSlices and ResourceClaims into the merge; a worker that does not
/// serve `resource.k8s.io/v1`, or whose kubeconfig may not list them, lists none (asked until it
/// answers, so an unreachable worker is not taken for one without devices).
pub(super) async fn feed_devices(client: Client, merge: mpsc::UnboundedSender<(String, WorkerEvent)>, cluster: String) {
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
    let mut backoff = Duration::from_millis(500);
    let served = loop {
        let one = ListParams::default().limit(1);
        let asked = match Api::<ResourceSlice>::all(client.clone()).list_metadata(&one).await {
            Ok(_) => Api::<ResourceClaim>::all(client.clone()).list_metadata(&one).await.map(|_| ()),
            Err(e) => Err(e),
        };
        match asked {
            Ok(()) => break true,
            Err(kube::Error::Api(s)) if s.is_not_found() => break false,
            // Devices are optional: a kubeconfig that may not list them leaves them out.
            Err(kube::Error::Api(s)) if s.is_forbidden() => {
                tracing::warn!(%cluster, reason = %s.message, "the worker's kubeconfig may not list ResourceSlices and ResourceClaims; its DRA devices are left out");
                break false;
            }
            Err(e) => tracing::debug!(%cluster, error = %e, "asking whether the worker serves DRA; trying again"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    };
    tracing::info!(%cluster, served, "worker's resource.k8s.io/v1 (DRA)");
    if !served {
        let slices = [watcher::Event::Init, watcher::Event::InitDone];
        let claims = [watcher::Event::Init, watcher::Event::InitDone];
        for (slice, claim) in slices.into_iter().zip(claims) {
            let _ = merge.send((cluster.clone(), WorkerEvent::Slice(Box::new(slice))));
            let _ = merge.send((cluster.clone(), WorkerEvent::Claim(Box::new(claim))));
        }
        return;
    }
    let slices =
        watcher(Api::<ResourceSlice>::all(client.clone()), watcher::Config::default()).modify(without_managed_fields);
    let claims = watcher(Api::<ResourceClaim>::all(client), watcher::Config::default()).modify(without_managed_fields);
    let (c1, c2) = (cluster.clone(), cluster.clone());
    futures::join!(
        feed(slices, merge.clone(), move |e| (c1.clone(), WorkerEvent::Slice(Box::new(e))), cluster.clone()),
        feed(claims, merge, move |e| (c2.clone(), WorkerEvent::Claim(Box::new(e))), cluster),
    );
}
