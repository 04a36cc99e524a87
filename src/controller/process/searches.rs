//! Standalone mode's search controller: the trials of each OptimizationJob made as TrainJobs, at
//! most `parallelTrials` of them live, and the search's status written from what its trials show.
//! What to do is decided by `trainyard_bridges::search`; this reads the trials and acts. The
//! trials are ordinary TrainJobs of the template's queue, admitted by the scheduling loop.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;
use trainyard_bridges::search::{self, trials::SEARCH_LABEL};

use crate::api::{FIELD_MANAGER, OptimizationJob, TrainJob};

/// How often a controller whose API server does not serve OptimizationJobs looks again.
const LOOK_AGAIN: Duration = Duration::from_secs(30);

/// Why a search could not be moved on this time (it is tried again).
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The API server refused or failed a request.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// The object did not read as an OptimizationJob.
    #[error("{0}")]
    Decode(#[from] serde_json::Error),
}

struct Ctx {
    client: Client,
}

/// Runs searches until `stop`, once the API server serves the kind (looked for every 30 s, so
/// installing the CRD is enough).
pub async fn run(client: Client, stop: Arc<Notify>) {
    let ar = kube::api::ApiResource::erase::<OptimizationJob>(&());
    while !crate::controller::watching::caches::served(&client, &ar).await {
        tokio::select! {
            () = tokio::time::sleep(LOOK_AGAIN) => {}
            () = stop.notified() => return,
        }
    }
    tracing::info!("running OptimizationJobs");
    Controller::new(Api::<OptimizationJob>::all(client.clone()), watcher::Config::default())
        .owns(Api::<TrainJob>::all(client.clone()), watcher::Config::default().labels(SEARCH_LABEL))
        .graceful_shutdown_on(async move { stop.notified().await })
        .run(reconcile, error_policy, Arc::new(Ctx { client }))
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "search reconcile");
            }
        })
        .await;
}

fn ended(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
}

async fn reconcile(object: Arc<OptimizationJob>, ctx: Arc<Ctx>) -> Result<Action, SearchError> {
    let previous = object.status.clone().unwrap_or(Value::Null);
    // Deleting the search deletes its trials (they are its own); an ended one makes no more.
    if object.meta().deletion_timestamp.is_some() || ended(&previous) {
        return Ok(Action::await_change());
    }
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let uid = object.uid().unwrap_or_default();
    let searches: Api<OptimizationJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let now = Timestamp::now().to_string();
    let job = object.to_bridge()?;
    let status = match search::validate(&job.spec, &uid) {
        Err(refusal) => search::trials::refused(&refusal, &previous, &now),
        Ok(found) => {
            let trials: Api<TrainJob> = Api::namespaced(ctx.client.clone(), &namespace);
            let selector = format!("{SEARCH_LABEL}={}", search::trials::short_name(&name, &uid));
            let seen: Vec<search::Trial> = trials
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .iter()
                .filter_map(|t| search::observe(&found, &uid, &serde_json::to_value(t).ok()?))
                .collect();
            let step = search::step(&found, &seen, &previous, &now);
            let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            let mut status = step.status;
            for index in &step.create {
                let Some(body) = search::trial_object(&job, &found, *index) else { continue };
                let trial: TrainJob = serde_json::from_value(body)?;
                match trials.create(&params, &trial).await {
                    // Made by an earlier reconcile whose answer was lost (the same trial), or
                    // someone else's TrainJob of that name, which the search must not take.
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        let name = trial.name_any();
                        let existing = trials.get_opt(&name).await?;
                        let ours = existing.as_ref().is_none_or(|t| t.owner_references().iter().any(|o| o.uid == uid));
                        if !ours {
                            status = search::trials::name_taken(&name, &previous, &now);
                            break;
                        }
                    }
                    other => drop(other?),
                }
            }
            status
        }
    };
    if status != previous {
        let patch = Patch::Merge(json!({"status": status}));
        searches
            .patch_status(
                &name,
                &PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() },
                &patch,
            )
            .await?;
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<OptimizationJob>, error: &SearchError, _: Arc<Ctx>) -> Action {
    tracing::warn!(%error, "search");
    Action::requeue(Duration::from_secs(5))
}
