//! Why a pending gang waits, and what would let it start: counterfactuals computed on a
//! copy of the cluster, so explaining never changes a decision.
//!
//! - **Waiting for**: running gangs are released in order of their expected end until the
//!   gang fits; it could start then, when the last of them ends.
//! - **Preempting**: the cheapest set of running gangs (any queue, any priority) whose
//!   removal lets it fit inside one domain, found by the same search preemption uses.
//! - **More hosts**: for a gang held by its required level, how many pods and hosts the best
//!   domain of that level lacks.
//! - **Quota**: how many GPUs its queue would have to free.

use std::fmt;

use serde::Serialize;

use trainyard_topology::{Cluster, Demand, HostId, Resources};

use crate::gangs::record::GangState;
use crate::gangs::table::GangTable;
use crate::preemption::victims::{self, Candidate};
use crate::state::State;
use crate::{GangId, PendingReason, PendingStatus};

/// Something that would let a pending gang start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Counterfactual {
    /// It fits once these running gangs have ended, at their expected ends.
    WaitingFor {
        /// When it would fit, seconds.
        at: u64,
        /// The gang whose end makes it fit.
        last: GangId,
        /// How many running gangs must end first, `last` included.
        gangs: usize,
    },
    /// It fits inside `domain` if these gangs are preempted.
    Preempting {
        /// Path of the domain it would run in.
        domain: String,
        /// The cheapest victims.
        victims: Vec<GangId>,
    },
    /// No domain of the required level is big enough now.
    MoreHosts {
        /// The level.
        level: String,
        /// Pods the best domain there lacks.
        pods_short: u64,
        /// Hosts of the cluster's largest size that would cover them.
        hosts_short: u64,
    },
    /// This many GPUs must be freed under the blocking quota first.
    QuotaShort {
        /// The queue.
        queue: String,
        /// GPUs missing under its quota.
        gpus_short: u64,
    },
}

/// A pending gang's reason and the counterfactuals that would change it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The gang.
    pub gang: GangId,
    /// Why it waits, as of the last cycle.
    pub status: PendingStatus,
    /// What would let it start, cheapest first.
    pub counterfactuals: Vec<Counterfactual>,
}

impl fmt::Display for Counterfactual {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Counterfactual::WaitingFor { at, last, gangs } => {
                write!(f, "fits at t={at}s when gang {last} ends ({gangs} running gang(s) ending first)")
            }
            Counterfactual::Preempting { domain, victims } => {
                let names: Vec<String> = victims.iter().map(|v| v.to_string()).collect();
                write!(f, "fits in {domain} if gang(s) {} are preempted", names.join(", "))
            }
            Counterfactual::MoreHosts { level, pods_short, hosts_short } => {
                write!(f, "needs {hosts_short} more host(s) ({pods_short} pods) in one {level}")
            }
            Counterfactual::QuotaShort { queue, gpus_short } => {
                write!(f, "queue `{queue}` must free {gpus_short} GPU(s) of its quota")
            }
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gang {}: {}", self.gang, self.status.reason)?;
        for c in &self.counterfactuals {
            write!(f, "; {c}")?;
        }
        Ok(())
    }
}

/// Explains a pending gang; `None` when it is not pending.
pub(crate) fn explain(s: &State, id: GangId) -> Option<Explanation> {
    let status = s.pending_status(id)?;
    let gang = &s.gangs[&id];
    let request = gang.demand.clone();
    let mut counterfactuals = Vec::new();
    match &status.reason {
        PendingReason::Quota { queue, requested_gpus, available_gpus, .. } => {
            let gpus_short = requested_gpus.saturating_sub(*available_gpus);
            counterfactuals.push(Counterfactual::QuotaShort { queue: queue.clone(), gpus_short });
        }
        PendingReason::Topology { level, pods, best_domain_fit } => {
            let pods_short = u64::from(*pods).saturating_sub(*best_domain_fit);
            let topo = s.cluster.topology();
            let host_gpus = topo.hosts().map(|h| topo.host_capacity(h).gpus).max().unwrap_or(1).max(1);
            let hosts_short = (pods_short * gang.request.shape.largest_pod().gpus).div_ceil(host_gpus).max(1);
            counterfactuals.push(Counterfactual::MoreHosts { level: level.clone(), pods_short, hosts_short });
        }
        _ => {}
    }
    let mut cluster = s.cluster.clone();
    if cluster.place_demand(&request).is_err() {
        if let Some(fit) = fit_after_ends(&mut cluster, &s.gangs, &request, gang.total) {
            counterfactuals.push(Counterfactual::WaitingFor { at: fit.end, last: fit.last, gangs: fit.index + 1 });
        }
        let candidates: Vec<Candidate> = s
            .gangs
            .running_by_end()
            .iter()
            .filter_map(|&(_, other)| match &s.gangs[&other].state {
                GangState::Running { placement, .. } => Some(Candidate {
                    id: other,
                    queue: s.gangs[&other].queue,
                    total: s.gangs[&other].total,
                    placement,
                    priority: s.gangs[&other].request.priority,
                    lost_work: 0,
                }),
                GangState::Pending { .. } => None,
            })
            .collect();
        if let Some(set) = victims::choose_victims(&mut cluster, &request, &candidates, &|_| true) {
            let topo = cluster.topology();
            let domain = if topo.depth(set.domain) == 0 { "the cluster".to_string() } else { topo.path(set.domain) };
            counterfactuals.push(Counterfactual::Preempting { domain, victims: set.victims });
        }
    }
    Some(Explanation { gang: id, status, counterfactuals })
}

/// Where releasing running gangs by expected end first lets a gang fit (see [`fit_after_ends`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FitAfterEnds {
    /// Position in the running gangs by expected end of the gang whose end makes it fit.
    pub(crate) index: usize,
    /// That gang's expected end.
    pub(crate) end: u64,
    /// That gang.
    pub(crate) last: GangId,
}

/// When a gang asking `request` (`total` in all) fits `cluster` as the running gangs end at
/// their expected ends: they are released one by one in that order on a transaction, undone
/// before returning; `None` when it does not fit even once every running gang has ended.
/// Explaining ([`Counterfactual::WaitingFor`]) and the lower bound of a start-time estimate
/// ([`crate::Engine::eta`]) both read it.
///
/// A placement is searched only once the free capacity could hold the gang (its total, and as
/// many of its pods as it has, host by host, for a gang of one pod shape): the bounds the
/// reservation's replay uses. A search skipped that way would have failed, so the answer is
/// the one a search after every release gives, at a fraction of the searches on a full cluster.
pub(crate) fn fit_after_ends(
    cluster: &mut Cluster,
    gangs: &GangTable,
    request: &Demand,
    total: Resources,
) -> Option<FitAfterEnds> {
    let fit_pod = request.uniform_pod();
    let fit_count = |cluster: &Cluster, h: HostId| fit_pod.map_or(0, |pod| cluster.host_free(h).fit_count(&pod));
    let mut fits = fit_pod.map_or(u64::MAX, |pod| cluster.fit_count(&pod));
    let txn = cluster.begin();
    let mut found = None;
    for (index, &(end, other)) in gangs.running_by_end().iter().enumerate() {
        let GangState::Running { placement, .. } = &gangs[&other].state else { continue };
        let hosts = placement.per_host();
        let before: u64 = hosts.iter().map(|&(h, _)| fit_count(cluster, h)).sum();
        if cluster.release_placement(placement).is_err() {
            continue;
        }
        let after: u64 = hosts.iter().map(|&(h, _)| fit_count(cluster, h)).sum();
        fits = fits.saturating_add(after).saturating_sub(before);
        if !cluster.total_free().covers(&total) || fits < u64::from(request.pods()) {
            continue;
        }
        if cluster.place_demand(request).is_ok() {
            found = Some(FitAfterEnds { index, end, last: other });
            break;
        }
    }
    cluster.rollback(txn);
    found
}
