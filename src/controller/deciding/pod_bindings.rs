//! Which gated pod goes to which node: the ungating half of trainyard's placement.
//!
//! A gang's pods are created gated. Once its admission is recorded, each pod is given its host as a
//! `kubernetes.io/hostname` node selector and its gate is removed in the same patch, as Kueue's
//! topology ungater does. Pods map to hosts by their ordinal in the gang (replicated job, job index,
//! completion index), so a pod the Job controller recreates lands where its predecessor was.

use std::collections::BTreeMap;

use trainyard_bridges::TOPOLOGY_GATE;

/// Pod label JobSet puts on its pods: the replicated job.
pub const RJOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Pod label JobSet puts on its pods: the job index within the replicated job.
pub const JOB_INDEX_LABEL: &str = "jobset.sigs.k8s.io/job-index";
/// Pod label of Indexed Jobs: the completion index.
pub const COMPLETION_INDEX_LABEL: &str = "batch.kubernetes.io/job-completion-index";
/// Pod label of LeaderWorkerSet pods: 0 for the leader, 1.. for workers.
pub const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// The node label every node carries with its name.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// What the planner needs to know of one pod of a gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Names of its scheduling gates, in order.
    pub gates: Vec<String>,
    /// Whether `spec.nodeSelector` exists (a patch must create it otherwise).
    pub has_node_selector: bool,
    /// The node it is bound to, once kube-scheduler bound it.
    pub node_name: Option<String>,
    /// When it was created, seconds since the epoch.
    pub created: Option<i64>,
    /// Its claims made from templates.
    pub claims: Vec<PodClaim>,
}

/// One `spec.resourceClaims[]` entry made from a template, and the claim made for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodClaim {
    /// The entry's name.
    pub name: String,
    /// `resourceClaimTemplateName`.
    pub template: String,
    /// The ResourceClaim kube-controller-manager made from the template
    /// (`status.resourceClaimStatuses[].resourceClaimName`), once it did.
    pub claim: Option<String>,
}

/// How pod ordinals are counted for a gang's workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GangLayout {
    /// JobSet: the gang's replicated jobs in order, with `(name, replicas, pods per job)`.
    JobSet(Vec<(String, u32, u32)>),
    /// LeaderWorkerSet: whether the leader (worker index 0) is one of the gang's pods.
    LeaderWorkerSet {
        /// The leader is a node pod (no separate launcher).
        leader_in_gang: bool,
    },
}

impl GangLayout {
    /// The pod's place in the gang, or `None` for a pod outside it or with labels that do not parse.
    pub fn ordinal(&self, labels: &BTreeMap<String, String>) -> Option<u32> {
        let number = |key: &str| labels.get(key)?.parse::<u32>().ok();
        match self {
            GangLayout::JobSet(rjobs) => {
                let rjob = labels.get(RJOB_LABEL)?;
                let mut offset = 0u32;
                for (name, replicas, per_job) in rjobs {
                    if name == rjob {
                        let (job, completion) = (number(JOB_INDEX_LABEL)?, number(COMPLETION_INDEX_LABEL)?);
                        if job >= *replicas || completion >= *per_job {
                            return None;
                        }
                        return Some(offset + job * per_job + completion);
                    }
                    offset += replicas * per_job;
                }
                None
            }
            GangLayout::LeaderWorkerSet { leader_in_gang } => {
                let worker = number(WORKER_INDEX_LABEL)?;
                if *leader_in_gang { Some(worker) } else { worker.checked_sub(1) }
            }
        }
    }
}

/// One gate removal: give `pod` the node selector `kubernetes.io/hostname=node` and drop the gate at
/// `gate_index` (checked by the patch, so a concurrent change makes it fail instead of removing another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ungate {
    /// Pod name.
    pub pod: String,
    /// Host it goes to.
    pub node: String,
    /// Position of trainyard's gate in `spec.schedulingGates`.
    pub gate_index: usize,
    /// Whether `spec.nodeSelector` exists already.
    pub has_node_selector: bool,
}

/// The gate removals for the gated pods of a gang placed on `slots` (one host per ordinal). Pods
/// whose ordinal is outside the placement keep their gate: they are not part of what was admitted.
pub fn ungate(layout: &GangLayout, slots: &[&str], pods: &[PodView]) -> Vec<Ungate> {
    let mut out: Vec<Ungate> = pods
        .iter()
        .filter_map(|p| {
            let gate_index = p.gates.iter().position(|g| g == TOPOLOGY_GATE)?;
            let ordinal = layout.ordinal(&p.labels)? as usize;
            let node = slots.get(ordinal)?;
            Some(Ungate {
                pod: p.name.clone(),
                node: node.to_string(),
                gate_index,
                has_node_selector: p.has_node_selector,
            })
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, rjob: &str, job: u32, index: u32, gated: bool) -> PodView {
        let labels = [
            (RJOB_LABEL, rjob.to_string()),
            (JOB_INDEX_LABEL, job.to_string()),
            (COMPLETION_INDEX_LABEL, index.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let gates = if gated { vec!["other".to_string(), TOPOLOGY_GATE.to_string()] } else { vec![] };
        PodView {
            name: name.into(),
            labels,
            gates,
            has_node_selector: false,
            node_name: None,
            created: None,
            claims: Vec::new(),
        }
    }

    #[test]
    fn pods_go_to_the_slot_of_their_ordinal() {
        let layout = GangLayout::JobSet(vec![("node".into(), 1, 4)]);
        let slots = ["a", "a", "b", "b"];
        let pods = vec![pod("p3", "node", 0, 3, true), pod("p0", "node", 0, 0, true), pod("p1", "node", 0, 1, false)];
        let plan = ungate(&layout, &slots, &pods);
        assert_eq!(plan.len(), 2, "the ungated pod is left alone");
        assert_eq!((plan[0].pod.as_str(), plan[0].node.as_str(), plan[0].gate_index), ("p0", "a", 1));
        assert_eq!((plan[1].pod.as_str(), plan[1].node.as_str()), ("p3", "b"));
    }

    #[test]
    fn pods_outside_the_gang_or_placement_keep_their_gate() {
        let layout = GangLayout::JobSet(vec![("node".into(), 1, 2)]);
        let pods = vec![pod("x", "launcher", 0, 0, true), pod("y", "node", 0, 5, true)];
        assert!(ungate(&layout, &["a", "b"], &pods).is_empty());
    }

    #[test]
    fn leader_worker_set_ordinals_skip_a_separate_leader() {
        let labels = |w: &str| [(WORKER_INDEX_LABEL.to_string(), w.to_string())].into_iter().collect();
        let separate = GangLayout::LeaderWorkerSet { leader_in_gang: false };
        assert_eq!(separate.ordinal(&labels("0")), None);
        assert_eq!(separate.ordinal(&labels("1")), Some(0));
        let inside = GangLayout::LeaderWorkerSet { leader_in_gang: true };
        assert_eq!(inside.ordinal(&labels("0")), Some(0));
    }
}
