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

use crate::engine::GangState;
use crate::preempt::{self, Candidate};
use crate::{Engine, GangId, PendingReason, PendingStatus};

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

impl Engine {
    /// Explains a pending gang; `None` when it is not pending.
    pub fn explain(&self, id: GangId) -> Option<Explanation> {
        let status = self.pending_status(id)?;
        let gang = &self.gangs[&id];
        let request = gang.demand.clone();
        let mut counterfactuals = Vec::new();
        match &status.reason {
            PendingReason::Quota { queue, requested_gpus, available_gpus, .. } => {
                let gpus_short = requested_gpus.saturating_sub(*available_gpus);
                counterfactuals.push(Counterfactual::QuotaShort { queue: queue.clone(), gpus_short });
            }
            PendingReason::Topology { level, pods, best_domain_fit } => {
                let pods_short = u64::from(*pods).saturating_sub(*best_domain_fit);
                let topo = self.cluster.topology();
                let host_gpus = topo.hosts().map(|h| topo.host_capacity(h).gpus).max().unwrap_or(1).max(1);
                let hosts_short = (pods_short * gang.request.shape.largest_pod().gpus).div_ceil(host_gpus).max(1);
                counterfactuals.push(Counterfactual::MoreHosts { level: level.clone(), pods_short, hosts_short });
            }
            _ => {}
        }
        let mut cluster = self.cluster.clone();
        if cluster.place_demand(&request).is_err() {
            let running: Vec<(u64, GangId)> = self.gangs.running_by_end().iter().copied().collect();
            let txn = cluster.begin();
            for (i, &(end, other)) in running.iter().enumerate() {
                let g = &self.gangs[&other];
                if let GangState::Running { placement, .. } = &g.state
                    && cluster.release_placement(placement).is_ok()
                    && cluster.place_demand(&request).is_ok()
                {
                    counterfactuals.push(Counterfactual::WaitingFor { at: end, last: other, gangs: i + 1 });
                    break;
                }
            }
            cluster.rollback(txn);
            let candidates: Vec<Candidate> = self
                .gangs
                .running_by_end()
                .iter()
                .filter_map(|&(_, other)| match &self.gangs[&other].state {
                    GangState::Running { placement, .. } => Some(Candidate {
                        id: other,
                        queue: self.gangs[&other].queue,
                        total: self.gangs[&other].total,
                        placement,
                        priority: self.gangs[&other].request.priority,
                        lost_work: 0,
                    }),
                    GangState::Pending { .. } => None,
                })
                .collect();
            if let Some(set) = preempt::choose_victims(&mut cluster, &request, &candidates, &|_| true) {
                let topo = cluster.topology();
                let domain =
                    if topo.depth(set.domain) == 0 { "the cluster".to_string() } else { topo.path(set.domain) };
                counterfactuals.push(Counterfactual::Preempting { domain, victims: set.victims });
            }
        }
        Some(Explanation { gang: id, status, counterfactuals })
    }
}
