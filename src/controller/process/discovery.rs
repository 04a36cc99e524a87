//! What the API server serves, looked for at start (the gang API version, DRA) and, for the
//! binders' PodGroup kinds, again every 30 s, so that installing a CRD needs no restart.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::mpsc;

use super::run::Ctx;
use crate::controller::acting::binders::{BinderKind, BinderSupport};
use crate::controller::acting::gang_api::GangApi;
use crate::controller::watching::caches::served;
use crate::controller::watching::live::Change;

/// How often the binders' PodGroup kinds are looked for again: an administrator who installs a
/// binder's CRDs sees the TrainJobs waiting for it admitted without restarting trainyard.
const BINDERS_LOOK_AGAIN: Duration = Duration::from_secs(30);

/// Looks for the binders again every [`BINDERS_LOOK_AGAIN`]; a change goes to the reconcilers
/// (through `ctx`) and to the scheduling loop, whose TrainJobs are read again.
pub(super) async fn follow_binders(client: Client, ctx: Arc<Ctx>, tx: mpsc::Sender<Change>) {
    let mut tick = tokio::time::interval(BINDERS_LOOK_AGAIN);
    tick.tick().await;
    loop {
        tick.tick().await;
        let current = ctx.binders();
        let now = BinderSupport::new(current.default, &discover_binders(&client).await);
        if now == current {
            continue;
        }
        tracing::info!(served = ?BinderKind::ALL.iter().filter(|b| now.serves(**b)).map(|b| b.name()).collect::<Vec<_>>(), "binders changed");
        *ctx.binders.lock().expect("lock") = now;
        if tx.send(Change::Binders(now)).await.is_err() {
            return;
        }
    }
}

/// The gang API version the server offers, by a versioned discovery of `scheduling.k8s.io` (the
/// group's preferred version is v1 PriorityClass, so the alpha and beta versions must be asked for).
pub(super) async fn discover_gang_api(client: &Client) -> Option<GangApi> {
    let group = kube::discovery::group(client, crate::controller::acting::gang_api::GROUP).await.ok()?;
    let served: Vec<(String, Vec<String>)> = group
        .versions()
        .map(|v| (v.to_string(), group.versioned_resources(v).into_iter().map(|(ar, _)| ar.plural).collect()))
        .collect();
    GangApi::pick(&served)
}

/// The binders whose PodGroup the server serves (a list of one object each).
pub(super) async fn discover_binders(client: &Client) -> Vec<BinderKind> {
    let mut served_kinds = Vec::new();
    for kind in BinderKind::ALL {
        let gvk = kube::api::GroupVersionKind::gvk(kind.group(), kind.version(), "PodGroup");
        if served(client, &kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups")).await {
            served_kinds.push(kind);
        }
    }
    served_kinds
}

/// Whether the server serves `resource.k8s.io/v1` ResourceSlices (DRA, GA since 1.34).
pub(super) async fn dra_served(client: &Client) -> bool {
    let gvk = kube::api::GroupVersionKind::gvk("resource.k8s.io", "v1", "ResourceSlice");
    served(client, &kube::api::ApiResource::from_gvk_with_plural(&gvk, "resourceslices")).await
}
