//! Manager mode's writes to a worker cluster: a gang's copy created, and withdrawn. Each is one
//! request, two when a TrainJob of the name is already there.

use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::api::{FIELD_MANAGER, TrainJob};
use crate::controller::acting::actor::ActError;
use crate::controller::fleet::copies::{admitted_at, origin_of};

/// Creates the copy on the worker. A copy of this placement already there (a reconcile that
/// ran twice) is done; any other TrainJob of the name (an earlier placement's copy still being
/// deleted, a TrainJob that is no copy of this one) fails the step, naming it, and is tried again.
pub async fn dispatch(worker: &Client, cluster: &str, copy: &Value) -> Result<(), ActError> {
    let body: TrainJob = serde_json::from_value(copy.clone()).map_err(|e| ActError::Foreign(e.to_string()))?;
    let (ns, name) = (body.namespace().unwrap_or_default(), body.name_any());
    let api: Api<TrainJob> = Api::namespaced(worker.clone(), &ns);
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PostParams::default() };
    match api.create(&params, &body).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let Some(existing) = api.get_opt(&name).await? else {
        return Err(ActError::Foreign(format!("TrainJob {ns}/{name} on worker cluster {cluster} went while written")));
    };
    if origin_of(&existing) != origin_of(&body) {
        return Err(ActError::Foreign(format!(
            "worker cluster {cluster} has a TrainJob {ns}/{name} that is not this TrainJob's copy"
        )));
    }
    if existing.metadata.deletion_timestamp.is_some() || admitted_at(&existing) != admitted_at(&body) {
        return Err(ActError::Foreign(format!(
            "the copy on worker cluster {cluster} of an earlier placement of {ns}/{name} is still there"
        )));
    }
    Ok(())
}

/// Deletes the copy of `job` on the worker, if it is there and copies this TrainJob.
pub async fn withdraw(worker: &Client, job: &TrainJob) -> Result<(), ActError> {
    let (ns, name) = (job.namespace().unwrap_or_default(), job.name_any());
    let api: Api<TrainJob> = Api::namespaced(worker.clone(), &ns);
    let Some(copy) = api.get_opt(&name).await? else { return Ok(()) };
    if origin_of(&copy) != job.metadata.uid.as_deref() || copy.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: copy.uid(), resource_version: None }),
        ..DeleteParams::background()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
