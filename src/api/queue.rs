//! trainyard's cluster-scoped `Queue`: one node of the quota tree, in the vocabulary of the policy file.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trainyard_policies::{QueueConfig, QuotaAmounts};

/// A queue of the quota tree. Leaves take TrainJobs (label `trainyard.io/queue: <name>`); inner
/// queues group leaves into cohorts that lend and borrow.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "trainyard.io",
    version = "v1alpha1",
    kind = "Queue",
    doc = "A trainyard queue: one node of the quota tree that TrainJobs are charged to.",
    plural = "queues",
    status = "QueueStatus",
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parent"}"#,
    printcolumn = r#"{"name":"GPUs","type":"integer","jsonPath":".spec.nominal.gpus"}"#,
    printcolumn = r#"{"name":"Used","type":"integer","jsonPath":".status.usage.gpus"}"#,
    printcolumn = r#"{"name":"Pending","type":"integer","jsonPath":".status.pending"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// The parent queue; none for a root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The queue's own quota.
    #[serde(default)]
    pub nominal: Amounts,
    /// How much more than nominal it may borrow from its cohort; unlimited when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Amounts>,
    /// How much of its nominal quota it may lend; all of it when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Amounts>,
    /// Weight under fair sharing; 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub weight: Option<f64>,
    /// Nominal GPUs stated as whole topology domains, e.g. `{rack: 2}`; replaces `nominal.gpus`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nominal_domains: BTreeMap<String, u64>,
    /// GPU flavor (node `nvidia.com/gpu.product`) the queue's gangs must run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    /// Run this queue's gangs as Slurm jobs on the controller's Slurm cluster instead of as JobSets.
    /// Every queue of its quota tree must then be a Slurm queue too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmTarget>,
}

/// Where and how a Slurm queue's gangs run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlurmTarget {
    /// Slurm partition; the cluster's default partition when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub partition: Option<String>,
    /// Slurm account the jobs are charged to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub account: Option<String>,
    /// Slurm quality of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub qos: Option<String>,
    /// Absolute working directory of the jobs on the Slurm nodes (a shared filesystem).
    #[schemars(length(min = 1), regex(pattern = "^/"))]
    pub workdir: String,
}

/// An amount of each resource, in the policy file's units; an unset resource is not limited by this entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Amounts {
    /// GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u64>,
    /// Whole CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
    /// Memory, GiB.
    #[serde(default, rename = "memoryGiB", skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<u64>,
}

/// What the queue holds and waits for, as of trainyard's last cycle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Resources charged to the queue by admitted gangs (its own and its children's).
    #[serde(default)]
    pub usage: Amounts,
    /// TrainJobs waiting in the queue.
    #[serde(default)]
    pub pending: u64,
    /// TrainJobs admitted and running.
    #[serde(default)]
    pub admitted: u64,
    /// `Active` (True once the queue is part of a valid quota tree) with the reason when not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Amounts {
    /// The amounts in the engine's units (GPUs, millicores, MiB); `field` names them in errors.
    fn to_engine(&self, field: &str) -> Result<QuotaAmounts, String> {
        let scale = |v: Option<u64>, by: u64, unit: &str| -> Result<Option<u64>, String> {
            v.map(|v| v.checked_mul(by).ok_or_else(|| format!("{field}.{unit}: {v} is too large"))).transpose()
        };
        Ok(QuotaAmounts {
            gpus: self.gpus,
            cpu_milli: scale(self.cpus, 1000, "cpus")?,
            memory_mib: scale(self.memory_gib, 1024, "memoryGiB")?,
        })
    }
}

impl Queue {
    /// The queue as the engine's typed queue, with errors that name the field. The tree rules
    /// (parents, cycles, lending limits) are checked on the merged list by [`check_tree`].
    ///
    /// [`check_tree`]: trainyard_policies::check_tree
    pub fn to_queue_config(&self) -> Result<QueueConfig, String> {
        let spec = &self.spec;
        let nominal_domains = match spec.nominal_domains.len() {
            0 => None,
            1 => spec.nominal_domains.iter().next().map(|(level, &n)| (level.clone(), n)),
            _ => return Err("spec.nominalDomains: give one level and a count, e.g. {rack: 2}".into()),
        };
        let unnamed = QuotaAmounts::UNNAMED;
        Ok(QueueConfig {
            name: self.metadata.name.clone().unwrap_or_default(),
            parent: spec.parent.clone(),
            nominal: spec.nominal.to_engine("spec.nominal")?,
            borrowing_limit: spec
                .borrowing_limit
                .as_ref()
                .map_or(Ok(unnamed), |b| b.to_engine("spec.borrowingLimit"))?,
            lending_limit: spec.lending_limit.as_ref().map_or(Ok(unnamed), |l| l.to_engine("spec.lendingLimit"))?,
            weight: spec.weight.unwrap_or(1.0),
            nominal_domains,
            flavor: spec.flavor.clone(),
        })
    }
}
