//! The engine follows a live cluster: hosts come, change and go, other pods take and give back
//! capacity, and the quota tree is replaced, each change applied in place (O(depth) per host
//! change, O(gangs) for a new quota tree) while every gang, the fair-share history, backoffs
//! and lost-host times stay. Nothing here rebuilds the engine.

use trainyard_topology::{HostId, HostSpec, Removal, Resources};

use crate::gangs::record::GangState;
use crate::quota::{FairShare, QuotaTree};
use crate::state::State;
use crate::{GangId, PolicyConfig, Result, Unschedulable};

/// Adds a host (a node joined, or a removed one that gangs still held came back).
pub(crate) fn add_host(s: &mut State, spec: HostSpec, now: u64) -> Result<HostId> {
    let had_flavors = s.cluster.topology().flavors().len();
    let h = s.cluster.add_host(spec)?;
    if s.cluster.topology().flavors().len() != had_flavors {
        refresh_flavors(s);
    }
    s.refresh_host(h, now);
    s.dirty = true;
    Ok(h)
}

/// Brings a host to `spec` (labels, taints, capacity, readiness); its gangs stay on it.
pub(crate) fn update_host(s: &mut State, host: HostId, spec: HostSpec, now: u64) -> Result<()> {
    let had_flavors = s.cluster.topology().flavors().len();
    s.cluster.update_host(host, spec)?;
    if s.cluster.topology().flavors().len() != had_flavors {
        refresh_flavors(s);
    }
    s.refresh_host(host, now);
    s.dirty = true;
    Ok(())
}

/// Makes domain `d` a TPU torus of `spec`, or no longer one.
pub(crate) fn set_torus(
    s: &mut State,
    d: trainyard_topology::DomainId,
    spec: Option<trainyard_topology::torus::TorusSpec>,
) -> Result<()> {
    if s.cluster.topology().torus(d) != spec.as_ref() {
        s.cluster.set_torus(d, spec)?;
        s.dirty = true;
    }
    Ok(())
}

/// Marks a host schedulable and ready, or not.
pub(crate) fn set_host_ready(s: &mut State, host: HostId, ready: bool, now: u64) -> Result<()> {
    s.cluster.set_ready(host, ready)?;
    s.refresh_host(host, now);
    s.dirty = true;
    Ok(())
}

/// Removes a host. Gangs on it keep it charged (and it is offered to nobody) until they end
/// or move off it; it is lost to them from `now`.
pub(crate) fn remove_host(s: &mut State, host: HostId, now: u64) -> Result<Removal> {
    let removal = s.cluster.remove_host(host)?;
    s.refresh_host(host, now);
    s.dirty = true;
    Ok(removal)
}

/// Replaces the cluster's DRA objects while gangs hold devices
/// ([`trainyard_topology::Cluster::replace_devices`]); returns what was left out. Gangs the
/// old devices refused are looked at again.
pub(crate) fn replace_devices(
    s: &mut State,
    objects: trainyard_topology::devices::DraObjects,
) -> Result<Vec<trainyard_topology::devices::PoolReport>> {
    let reports = s.cluster.replace_devices(objects)?;
    s.dirty = true;
    Ok(reports)
}

/// Puts node-local pools at what their slices publish now
/// ([`trainyard_topology::Cluster::replace_pools`]); `None` when the devices must be replaced
/// whole instead.
pub(crate) fn replace_pools(
    s: &mut State,
    keys: &[trainyard_topology::devices::PoolKey],
    slices: &[trainyard_topology::devices::objects::ResourceSlice],
) -> Option<(std::collections::BTreeSet<String>, Vec<trainyard_topology::devices::PoolReport>)> {
    let done = s.cluster.replace_pools(keys, slices)?;
    s.dirty = true;
    Some(done)
}

/// Sets the devices the cluster's own claims hold
/// ([`trainyard_topology::Cluster::set_observed_devices`]).
pub(crate) fn set_observed_devices(
    s: &mut State,
    ids: std::collections::HashSet<trainyard_topology::devices::DeviceId>,
) {
    s.cluster.set_observed_devices(ids);
    s.dirty = true;
}

/// Whole GPUs each node's devices give ([`trainyard_topology::Cluster::gpu_devices`]).
pub(crate) fn gpu_devices(
    s: &mut State,
    only: Option<&std::collections::BTreeSet<String>>,
) -> std::collections::BTreeMap<String, u64> {
    s.cluster.gpu_devices_of(only)
}

/// Charges usage of pods trainyard does not place on a host.
pub(crate) fn charge_foreign(s: &mut State, host: HostId, amount: Resources) -> Result<()> {
    s.cluster.charge_foreign(host, amount)?;
    s.dirty = true;
    Ok(())
}

/// Releases usage charged by [`crate::Engine::charge_foreign`].
pub(crate) fn release_foreign(s: &mut State, host: HostId, amount: Resources) -> Result<()> {
    s.cluster.release_foreign(host, amount)?;
    s.dirty = true;
    Ok(())
}

/// Hosts dropped from the cluster since the last call (removed hosts their gangs released).
pub(crate) fn take_reaped_hosts(s: &mut State) -> Vec<HostId> {
    s.cluster.take_reaped()
}

/// Replaces the policy (queues, quotas and every setting) in place. Running gangs stay and
/// are charged to their queues in the new tree (a queue that went keeps its running gangs
/// in an unlimited leaf of its name); the fair-share history of queues that stay is kept.
/// Pending gangs whose queue went or whose gang now exceeds its queue's ceiling leave the
/// engine and are returned with the reason.
pub(crate) fn replace_policy(s: &mut State, mut config: PolicyConfig) -> Result<Vec<(GangId, Unschedulable)>> {
    config.resolve_topology(s.cluster.topology())?;
    let old_tree = std::mem::replace(&mut s.quotas, QuotaTree::new(&config));
    // A new tree starts its versions anew: a kept reservation plan could not tell. Its
    // ceilings are new too.
    s.plan_memo = None;
    s.unlimited_queues.clear();
    let now = s.fair_share.last().unwrap_or(0);
    let mut history = FairShare::new(config.fair_sharing.enabled.then_some(config.fair_sharing.half_life_s).flatten());
    history.carry_over(&s.fair_share, &old_tree, &s.quotas, now);
    s.fair_share = history;
    s.fair = config.fair_sharing.enabled.then_some(crate::FairSharing { half_life_s: config.fair_sharing.half_life_s });
    s.apply_settings(&config);
    s.config = config;
    s.flavor_of = crate::state::flavors_of(&s.config, s.cluster.topology());
    let mut dropped = Vec::new();
    // In id order: a queue kept for running gangs only gets its index in a fixed order.
    let mut queue_of: std::collections::HashMap<GangId, crate::quota::QueueIdx> = Default::default();
    for id in s.gangs.ids() {
        let gang = &s.gangs[&id];
        let (name, total) = (gang.request.queue.clone(), gang.total);
        match gang.state {
            GangState::Running { .. } => {
                let q = s.quotas.keep(&name);
                s.quotas.charge(q, total);
                queue_of.insert(id, q);
            }
            GangState::Pending { .. } => match s.quotas.resolve(&name) {
                None => dropped.push((id, Unschedulable::UnknownQueue { queue: name })),
                Some(q) if !s.quotas.ceiling(q).covers(&total) => {
                    let nominal_gpus = s.quotas.ceiling(q).gpus;
                    dropped.push((
                        id,
                        Unschedulable::ExceedsQuota { queue: name, requested_gpus: total.gpus, nominal_gpus },
                    ));
                }
                Some(q) => {
                    queue_of.insert(id, q);
                }
            },
        }
    }
    let flavor_of = &s.flavor_of;
    s.gangs.refile(|g| {
        let flavor = flavor_of.get(&g.request.queue).copied();
        (queue_of.get(&g.request.id).copied().unwrap_or(g.queue), g.demand.with_flavor(flavor))
    });
    for (id, _) in &dropped {
        s.cancel_pending(*id)?;
    }
    s.never_fits.clear();
    s.failed_at.clear();
    s.dirty = true;
    if s.follows_changes {
        s.changed.extend(s.gangs.pending().ids());
    }
    Ok(dropped)
}

/// The flavor each queue is bound to, looked up again (a node brought a new flavor), and
/// the pending gangs' requests with it.
fn refresh_flavors(s: &mut State) {
    s.flavor_of = crate::state::flavors_of(&s.config, s.cluster.topology());
    let flavor_of = &s.flavor_of;
    s.gangs.refile(|g| (g.queue, g.demand.with_flavor(flavor_of.get(&g.request.queue).copied())));
}
