//! trainyard's cluster-scoped `Queue`: one node of the quota tree, in the vocabulary of the policy file.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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
    fn to_policy(&self) -> Value {
        json!({"gpus": self.gpus, "cpus": self.cpus, "memory_gib": self.memory_gib})
    }
}

impl Queue {
    /// The queue as an entry of the policy file's `queues:` list, so that a Queue object is checked
    /// by exactly the rules the file is (parents, cycles, lending limits, weights).
    pub fn to_policy_entry(&self) -> Value {
        let spec = &self.spec;
        let mut entry = json!({
            "name": self.metadata.name.clone().unwrap_or_default(),
            "nominal": spec.nominal.to_policy(),
        });
        if let Some(parent) = &spec.parent {
            entry["parent"] = json!(parent);
        }
        if let Some(b) = &spec.borrowing_limit {
            entry["borrowing_limit"] = b.to_policy();
        }
        if let Some(l) = &spec.lending_limit {
            entry["lending_limit"] = l.to_policy();
        }
        if let Some(w) = spec.weight {
            entry["weight"] = json!(w);
        }
        if !spec.nominal_domains.is_empty() {
            entry["nominal_domains"] = json!(spec.nominal_domains);
        }
        if let Some(f) = &spec.flavor {
            entry["flavor"] = json!(f);
        }
        strip_nulls(&mut entry);
        entry
    }
}

/// Drops unset amounts: the policy file reads a missing resource as "not accounted", not as null.
fn strip_nulls(value: &mut Value) {
    if let Value::Object(map) = value {
        map.retain(|_, v| !v.is_null());
        map.values_mut().for_each(strip_nulls);
    }
}
