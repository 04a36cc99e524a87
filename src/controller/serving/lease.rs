//! Leader election with a `coordination.k8s.io/v1` Lease: only the holder runs the scheduling loop.
//!
//! The decision is pure ([`decide`]); [`LeaseLock`] carries it out with optimistic concurrency
//! (every update names the resourceVersion it read), so two candidates never both win a round.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};

/// What a candidate does with the lease it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStep {
    /// No lease exists: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Its holder stopped renewing (or released it): take it over.
    TakeOver,
    /// Someone else holds it.
    Follow {
        /// The holder's identity.
        holder: String,
    },
}

/// Decides from the lease as read, at `now`.
pub fn decide(lease: Option<&Lease>, me: &str, now: Timestamp) -> LeaseStep {
    let Some(lease) = lease else { return LeaseStep::Create };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == me {
        return LeaseStep::Renew;
    }
    if holder.is_empty() {
        return LeaseStep::TakeOver;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()).map(|t| t.0);
    match renewed {
        Some(at) if at + duration > now => LeaseStep::Follow { holder },
        _ => LeaseStep::TakeOver,
    }
}

/// The lease after carrying out `step` (for `Create`, `Renew` and `TakeOver`).
pub fn next_lease(current: Option<&Lease>, step: &LeaseStep, lock: &LeaseLock, now: Timestamp) -> Lease {
    let mut lease = current.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(lock.name.clone()),
            namespace: Some(lock.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let mut spec = lease.spec.take().unwrap_or_default();
    let stamp = MicroTime(now);
    if *step != LeaseStep::Renew {
        spec.acquire_time = Some(stamp.clone());
        if *step == LeaseStep::TakeOver {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        } else {
            spec.lease_transitions = Some(0);
        }
    }
    spec.holder_identity = Some(lock.identity.clone());
    spec.lease_duration_seconds = Some(lock.duration_s);
    spec.renew_time = Some(stamp);
    lease.spec = Some(LeaseSpec { ..spec });
    lease
}

/// One candidate's handle on the lease.
#[derive(Clone, Debug)]
pub struct LeaseLock {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This candidate (the pod name).
    pub identity: String,
    /// Seconds a lease is valid after its last renewal.
    pub duration_s: i32,
}

impl LeaseLock {
    /// Reads the lease and takes, renews or follows it. `Ok(true)` when we hold it afterwards; a lost
    /// race (409 Conflict) is `Ok(false)`, to be tried again next round.
    pub async fn try_acquire(&self, client: Client, now: Timestamp) -> Result<bool, kube::Error> {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let current = api.get_opt(&self.name).await?;
        let step = decide(current.as_ref(), &self.identity, now);
        let result = match step {
            LeaseStep::Follow { .. } => return Ok(false),
            LeaseStep::Create => api.create(&PostParams::default(), &next_lease(None, &step, self, now)).await,
            LeaseStep::Renew | LeaseStep::TakeOver => {
                api.replace(&self.name, &PostParams::default(), &next_lease(current.as_ref(), &step, self, now)).await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl LeaseLock {
    /// Gives the lease up (a graceful stop): the holder is cleared and the lease marked as
    /// expiring now, with the resourceVersion read, so that a standby takes over at its next look
    /// instead of waiting out the duration. A lease held by someone else is left alone.
    pub async fn release(&self, client: Client, now: Timestamp) -> Result<bool, kube::Error> {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let Some(mut lease) = api.get_opt(&self.name).await? else { return Ok(false) };
        let Some(spec) = lease.spec.as_mut() else { return Ok(false) };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(now));
        match api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(identity: &str) -> LeaseLock {
        LeaseLock { namespace: "ns".into(), name: "trainyard".into(), identity: identity.into(), duration_s: 15 }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn a_fresh_lease_is_followed_and_an_expired_one_taken() {
        let held = next_lease(None, &LeaseStep::Create, &lock("a"), at(100));
        assert_eq!(decide(Some(&held), "a", at(105)), LeaseStep::Renew);
        assert_eq!(decide(Some(&held), "b", at(110)), LeaseStep::Follow { holder: "a".into() });
        assert_eq!(decide(Some(&held), "b", at(115)), LeaseStep::TakeOver);
        let taken = next_lease(Some(&held), &LeaseStep::TakeOver, &lock("b"), at(115));
        let spec = taken.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(decide(None, "a", at(0)), LeaseStep::Create);
    }
}
