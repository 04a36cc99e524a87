//! Condition reasons for the engine's outcomes, and the admission record of a placement.

use trainyard_policies::{Engine, GangId, PendingReason, Unschedulable};
use trainyard_topology::{DomainId, Placement, Topology};

use super::Decision;
use crate::api::QUEUE_LABEL;
use crate::api::worker_cluster::{CLUSTER_LEVEL_LABEL, WORKER_CLUSTER_ANNOTATION};
use crate::controller::acting::admission_record::{AdmissionRecord, SlotDevices};
use crate::controller::deciding::intent::GangIntent;

/// A CamelCase condition reason for a pending reason.
pub(super) fn reason_code(reason: &PendingReason) -> String {
    use PendingReason as R;
    match reason {
        R::NotYetScheduled => "NotYetScheduled",
        R::Quota { .. } => "QuotaExceeded",
        R::Capacity { .. } => "InsufficientCapacity",
        R::Topology { .. } => "TopologyUnavailable",
        R::Reservation { .. } => "WaitingForReservation",
        R::QueuedBehind { .. } => "QueuedBehind",
        R::Backoff { .. } => "Backoff",
        R::BadSlice { .. } => "BadSlice",
        R::NodeLost { .. } => "NodeLost",
        R::TpuSlices { .. } => "TpuSlicesUnavailable",
        R::Devices { .. } => "DevicesUnavailable",
    }
    .to_string()
}

/// What a TrainJob's condition says of a pending reason: the engine's words without the amounts
/// that move while it waits (they would rewrite every waiting TrainJob's status at every
/// admission), with gangs named by their TrainJob.
pub(super) fn pending_message(reason: &PendingReason, name: &dyn Fn(GangId) -> String) -> String {
    use PendingReason as R;
    match reason {
        R::Quota { queue, requested_gpus, blocked_by, .. } => {
            format!("quota: {blocked_by} does not leave queue `{queue}` the {requested_gpus} GPUs the gang needs now")
        }
        R::Capacity { requested, .. } => {
            format!("capacity: the gang needs {requested} in total, more than is free now")
        }
        R::Topology { level, pods, .. } => {
            format!("topology: the gang needs {pods} pods in one {level}; no {level} has room for them now")
        }
        R::Reservation { holder, .. } => {
            format!("reservation: starting now would delay {}, which holds the reservation", name(*holder))
        }
        R::QueuedBehind { head } => format!("queued behind {} (strict FIFO)", name(*head)),
        R::TpuSlices { shape, slices, .. } => {
            format!("tpu: the gang needs {slices} free {shape} slice(s) on the tori; not all of them are free now")
        }
        other => other.to_string(),
    }
}

/// A CamelCase condition reason for a gang that can never run.
pub(super) fn unschedulable_code(why: &Unschedulable) -> String {
    use Unschedulable as U;
    match why {
        U::EmptyGang => "EmptyGang",
        U::UnknownLevel { .. } => "UnknownTopologyLevel",
        U::UnknownQueue { .. } => "UnknownQueue",
        U::ExceedsQuota { .. } => "ExceedsQuota",
        U::NeverFits(_) => "NeverFits",
        U::InvalidShape { .. } => "InvalidPodSets",
    }
    .to_string()
}

/// A TrainJob naming a queue that does not exist waits for it, saying which label to fix.
pub(super) fn unknown_queue(queue: &str) -> Decision {
    Decision::Pending {
        reason: "QueueNotFound".into(),
        message: format!(
            "no Queue named {queue:?} (label {QUEUE_LABEL}); the TrainJob waits until one exists or the label names another"
        ),
    }
}

/// A gang the engine refuses, as its decision: a queue, or in a fleet a worker cluster, that does
/// not exist is waited for, naming it; anything else can never run as asked.
pub(super) fn refusal_decision(why: &Unschedulable, intent: &GangIntent, topo: &Topology) -> Decision {
    if let Unschedulable::UnknownQueue { queue } = why {
        return unknown_queue(queue);
    }
    if let Some(worker) = intent.hosts.node_selector.get(CLUSTER_LEVEL_LABEL)
        && let Some(workers) = fleet_workers(topo)
        && !workers.contains(worker)
    {
        return Decision::Pending {
            reason: "WorkerClusterNotFound".into(),
            message: format!(
                "no worker cluster named {worker:?} has nodes in the fleet (annotation {WORKER_CLUSTER_ANNOTATION}; the fleet has {}); the TrainJob waits until it does or the annotation names another",
                if workers.is_empty() { "none".to_string() } else { workers.join(", ") }
            ),
        };
    }
    Decision::Unschedulable { reason: unschedulable_code(why), message: why.to_string() }
}

/// The worker clusters with nodes, when the tree is a fleet's (its top level the cluster label).
fn fleet_workers(topo: &Topology) -> Option<Vec<String>> {
    (topo.levels().first().map(String::as_str) == Some(CLUSTER_LEVEL_LABEL)).then(|| {
        let members = topo.children(DomainId::ROOT).iter().map(|&c| DomainId(c));
        members.filter(|&d| !topo.capacity(d).is_zero()).map(|d| topo.domain(d).name.clone()).collect()
    })
}

/// The admission record of a placement at `now`; `domain_level` set for a gang whose pods get the
/// node selector of that level's domain instead of one host each.
pub(super) fn record_of(
    engine: &Engine,
    domain_level: Option<&str>,
    placement: &Placement,
    sliced: &[bool],
    now: u64,
    slurm: bool,
) -> AdmissionRecord {
    let topo = engine.cluster().topology();
    let order = slot_order(placement, sliced);
    let mut nodes: Vec<(String, u32)> = Vec::new();
    for &i in &order {
        let name = topo.host_name(placement.hosts[i]);
        match nodes.last_mut() {
            Some((last, n)) if last == name => *n += 1,
            _ => nodes.push((name.to_string(), 1)),
        }
    }
    let devices = order
        .iter()
        .enumerate()
        .filter_map(|(slot, &i)| {
            let pod = placement.devices.get(i)?.as_ref()?;
            let claims = pod
                .claims
                .iter()
                .map(|c| {
                    let results = c
                        .results
                        .iter()
                        .map(|r| {
                            let d = &r.device;
                            [r.request.clone(), d.driver.clone(), d.pool.clone(), d.device.clone()]
                        })
                        .collect();
                    (c.claim.clone(), results)
                })
                .collect();
            Some(SlotDevices { slot: slot as u32, claims })
        })
        .collect();
    // Levels are named by their node label keys, so each enclosing domain is a selector term.
    let domain = domain_level.and_then(|level| {
        let depth = topo.level_depth(level).ok()?;
        let host = topo.host_domain(*placement.hosts.first()?);
        let selector = (1..=depth)
            .map(|d| (topo.levels()[usize::from(d) - 1].clone(), topo.domain(topo.ancestor_at(host, d)).name.clone()))
            .collect();
        Some(selector)
    });
    AdmissionRecord { nodes, domain, at: now, cost: placement.cost, slurm, devices }.bounded()
}

/// The placement's pod indices in the order pods are counted (set after set). A set's pods go
/// to its hosts in host order, except in a set cut into slices, whose pods keep the placement's
/// order: consecutive ordinals share a slice's domain.
fn slot_order(placement: &Placement, sliced: &[bool]) -> Vec<usize> {
    let mut order = Vec::with_capacity(placement.hosts.len());
    let mut offset = 0;
    for k in 0..placement.sets.len() {
        let len = placement.set_hosts(k).len();
        let mut pods: Vec<usize> = (offset..offset + len).collect();
        if !sliced.get(k).copied().unwrap_or(false) {
            pods.sort_by_key(|&i| placement.hosts[i]);
        }
        order.extend(pods);
        offset += len;
    }
    order
}

/// The record of a gang moved off a lost host: the old record's slots in order, the lost host's
/// slots taken by the new hosts one by one, so that every pod still bound keeps its slot and a pod
/// recreated for a lost slot goes to its new host.
pub(super) fn moved_record(
    engine: &Engine,
    old: &AdmissionRecord,
    moved: &trainyard_policies::Replacement,
    lost_name: String,
) -> AdmissionRecord {
    let topo = engine.cluster().topology();
    let mut fresh = moved.with.iter().map(|&h| topo.host_name(h).to_string());
    let slots: Vec<String> = old
        .slots()
        .into_iter()
        .map(|s| if s == lost_name { fresh.next().unwrap_or_else(|| s.to_string()) } else { s.to_string() })
        .collect();
    let mut nodes: Vec<(String, u32)> = Vec::new();
    for s in slots {
        match nodes.last_mut() {
            Some((last, n)) if *last == s => *n += 1,
            _ => nodes.push((s, 1)),
        }
    }
    // Pods of the lost slots are made again with new claims: kube-scheduler allocates those.
    let old_slots = old.slots();
    let devices =
        old.devices.iter().filter(|d| old_slots.get(d.slot as usize) != Some(&lost_name.as_str())).cloned().collect();
    AdmissionRecord {
        nodes,
        domain: old.domain.clone(),
        at: old.at,
        cost: moved.placement.cost,
        slurm: old.slurm,
        devices,
    }
}
