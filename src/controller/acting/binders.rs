//! The gang object of the cluster's own binder (scheduler-plugins' coscheduling, Volcano, KAI),
//! made beside trainyard's placement so that whichever scheduler binds the pods holds them together.
//!
//! trainyard still decides the hosts and lifts the pods' gates; the binder only binds. The object
//! is shaped as Kubeflow Trainer's `coscheduling` and `volcano` plugins shape theirs (named after
//! the TrainJob, owned by it, `minMember` and `minResources` of the gang) and as KAI's pod grouper
//! shapes its own, so a cluster that ran Trainer with one of them sees what it saw before.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use trainyard_bridges::GANG_LABEL;
use trainyard_bridges::trainer::TrainingRuntimeSpec;

use crate::controller::acting::pod_request::{format_milli, pod_request};
use crate::controller::acting::workload_objects::ObjectRef;

/// Pod label that puts a pod in scheduler-plugins' PodGroup of that name.
pub const COSCHEDULING_POD_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Pod annotation that puts a pod in Volcano's PodGroup of that name.
pub const VOLCANO_POD_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Annotation (on the runtime template or the TrainJob) naming the Volcano queue.
pub const VOLCANO_QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// Pod annotation that puts a pod in KAI's PodGroup of that name.
pub const KAI_POD_ANNOTATION: &str = "pod-group-name";
/// Label naming the KAI queue (on the TrainJob, copied to the pods).
pub const KAI_QUEUE_LABEL: &str = "kai.scheduler/queue";
/// The queue KAI puts pods in when none is named.
pub const KAI_DEFAULT_QUEUE: &str = "default-queue";
/// Annotation on the workload and its pods that keeps KAI's pod grouper from making a second group.
pub const KAI_SKIP_GROUPER: &str = "kai.scheduler/skip-podgrouper";
/// TrainJob annotation naming the scheduler that binds its pods (Trainer has no field for it).
pub const SCHEDULER_NAME_ANNOTATION: &str = "trainyard.io/scheduler-name";

/// A scheduler with gang objects of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BinderKind {
    /// scheduler-plugins' coscheduling: `scheduling.x-k8s.io/v1alpha1` PodGroup.
    Coscheduling,
    /// Volcano: `scheduling.volcano.sh/v1beta1` PodGroup.
    Volcano,
    /// NVIDIA's KAI scheduler: `scheduling.run.ai/v2alpha2` PodGroup.
    Kai,
}

impl BinderKind {
    /// Every binder.
    pub const ALL: [BinderKind; 3] = [BinderKind::Coscheduling, BinderKind::Volcano, BinderKind::Kai];

    /// The name used in flags, values and messages.
    pub fn name(self) -> &'static str {
        match self {
            BinderKind::Coscheduling => "coscheduling",
            BinderKind::Volcano => "volcano",
            BinderKind::Kai => "kai",
        }
    }

    /// Reads a name given in a flag or values file.
    pub fn parse(text: &str) -> Option<BinderKind> {
        BinderKind::ALL.into_iter().find(|b| b.name() == text)
    }

    /// API group of its PodGroup.
    pub fn group(self) -> &'static str {
        match self {
            BinderKind::Coscheduling => "scheduling.x-k8s.io",
            BinderKind::Volcano => "scheduling.volcano.sh",
            BinderKind::Kai => "scheduling.run.ai",
        }
    }

    /// API version of its PodGroup.
    pub fn version(self) -> &'static str {
        match self {
            BinderKind::Coscheduling => "v1alpha1",
            BinderKind::Volcano => "v1beta1",
            BinderKind::Kai => "v2alpha2",
        }
    }

    /// `group/version`.
    pub fn api_version(self) -> String {
        format!("{}/{}", self.group(), self.version())
    }

    /// Its scheduler's usual name, which pods get when neither their template nor the TrainJob
    /// names one.
    pub fn scheduler_name(self) -> &'static str {
        match self {
            BinderKind::Coscheduling => "scheduler-plugins-scheduler",
            BinderKind::Volcano => "volcano",
            BinderKind::Kai => "kai-scheduler",
        }
    }
}

/// What the controller knows of binders: the cluster's default and which the API server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BinderSupport {
    /// The binder of gangs whose runtime names none.
    pub default: Option<BinderKind>,
    /// Served PodGroup kinds, by [`BinderKind::ALL`] position.
    served: [bool; 3],
}

impl BinderSupport {
    /// Offline: no default, and every binder taken as served.
    pub const ANY: BinderSupport = BinderSupport { default: None, served: [true; 3] };

    /// `default`, with the binders in `served` served.
    pub fn new(default: Option<BinderKind>, served: &[BinderKind]) -> BinderSupport {
        let mut s = [false; 3];
        for kind in served {
            s[*kind as usize] = true;
        }
        BinderSupport { default, served: s }
    }

    /// Whether the API server serves `kind`'s PodGroup.
    pub fn serves(&self, kind: BinderKind) -> bool {
        self.served[kind as usize]
    }

    /// Why a gang run with `runtime` (called `runtime_name`) cannot launch yet: its binder's
    /// PodGroup is not served. The problem names where the binder was named and the kind.
    pub fn problem(&self, runtime: &TrainingRuntimeSpec, runtime_name: &str) -> Option<(String, String)> {
        let binder = binder_of(runtime, runtime_name, self.default)?;
        (!self.serves(binder.kind)).then(|| {
            let message = format!(
                "the API server serves no {} PodGroup: install the binder's CRDs (trainyard looks for them every 30 s)",
                binder.kind.api_version()
            );
            (binder.named_by, message)
        })
    }
}

/// The binder of one TrainJob and what its runtime asks of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Binder {
    /// Which scheduler.
    pub kind: BinderKind,
    /// Where it was named: a runtime field or the controller's `--binder`.
    pub named_by: String,
    /// coscheduling: `scheduleTimeoutSeconds` (60 when the runtime gives none, as Trainer's CRD
    /// defaults it).
    pub schedule_timeout_seconds: i32,
    /// Volcano: the runtime's `networkTopology`.
    pub network_topology: Option<Value>,
}

/// The binder of a TrainJob run with `runtime` (called `runtime_name`): the runtime's
/// `podGroupPolicy` when it names one, else the cluster's `default`.
pub fn binder_of(runtime: &TrainingRuntimeSpec, runtime_name: &str, default: Option<BinderKind>) -> Option<Binder> {
    let named = |what: &str| format!("spec.podGroupPolicy.{what} of runtime {runtime_name}");
    let policy = runtime.pod_group_policy.as_ref();
    if let Some(c) = policy.and_then(|p| p.coscheduling.as_ref()) {
        return Some(Binder {
            kind: BinderKind::Coscheduling,
            named_by: named("coscheduling"),
            schedule_timeout_seconds: c.schedule_timeout_seconds.unwrap_or(60),
            network_topology: None,
        });
    }
    if let Some(v) = policy.and_then(|p| p.volcano.as_ref()) {
        return Some(Binder {
            kind: BinderKind::Volcano,
            named_by: named("volcano"),
            schedule_timeout_seconds: 60,
            network_topology: v.get("networkTopology").cloned(),
        });
    }
    default.map(|kind| Binder {
        kind,
        named_by: format!("the controller's --binder {}", kind.name()),
        schedule_timeout_seconds: 60,
        network_topology: None,
    })
}

impl Binder {
    /// The PodGroup of the TrainJob `name` in `namespace`.
    pub fn group_ref(&self, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: self.kind.api_version(),
            kind: "PodGroup".into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The PodGroup for a gang whose pod templates are `templates` (each with its pod count),
    /// owned by `owner`, in the queue `meta` names (Volcano, KAI).
    pub fn pod_group(
        &self,
        namespace: &str,
        name: &str,
        owner: &Value,
        templates: &[(&Value, u32)],
        meta: &QueueHints,
    ) -> Value {
        let members: u32 = templates.iter().map(|(_, n)| n).sum();
        let mut spec = Map::new();
        spec.insert("minMember".into(), json!(members));
        match self.kind {
            BinderKind::Coscheduling => {
                spec.insert("minResources".into(), Value::Object(min_resources(templates)));
                spec.insert("scheduleTimeoutSeconds".into(), json!(self.schedule_timeout_seconds));
            }
            BinderKind::Volcano => {
                spec.insert("minResources".into(), Value::Object(min_resources(templates)));
                if let Some(queue) = &meta.volcano_queue {
                    spec.insert("queue".into(), json!(queue));
                }
                if let Some(class) = priority_class(templates) {
                    spec.insert("priorityClassName".into(), json!(class));
                }
                if let Some(topology) = &self.network_topology {
                    let mode = topology.get("mode").and_then(Value::as_str).unwrap_or("hard");
                    let tier = topology.get("highestTierAllowed").and_then(Value::as_i64).unwrap_or(1);
                    spec.insert("networkTopology".into(), json!({"mode": mode, "highestTierAllowed": tier}));
                }
            }
            BinderKind::Kai => {
                spec.insert("queue".into(), json!(meta.kai_queue()));
                if let Some(class) = priority_class(templates) {
                    spec.insert("priorityClassName".into(), json!(class));
                }
            }
        }
        json!({
            "apiVersion": self.kind.api_version(),
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {GANG_LABEL: name},
                "ownerReferences": [owner],
            },
            "spec": spec,
        })
    }

    /// Marks the workload object itself: KAI's pod grouper looks at a pod's owners and would make
    /// a second group unless they say to skip.
    pub fn mark_workload(&self, workload: &mut Value) {
        if self.kind == BinderKind::Kai {
            workload["metadata"]["annotations"][KAI_SKIP_GROUPER] = json!("true");
        }
    }

    /// Puts a gang pod template in the PodGroup of `name` and names the scheduler that binds it:
    /// the TrainJob's `scheduler` when given, else the template's own, else the binder's usual one.
    pub fn mark_pod(&self, template: &mut Value, name: &str, scheduler: Option<&str>, meta: &QueueHints) {
        let metadata = &mut template["metadata"];
        match self.kind {
            BinderKind::Coscheduling => metadata["labels"][COSCHEDULING_POD_LABEL] = json!(name),
            BinderKind::Volcano => metadata["annotations"][VOLCANO_POD_ANNOTATION] = json!(name),
            BinderKind::Kai => {
                metadata["annotations"][KAI_POD_ANNOTATION] = json!(name);
                metadata["annotations"][KAI_SKIP_GROUPER] = json!("true");
                metadata["labels"][KAI_QUEUE_LABEL] = json!(meta.kai_queue());
            }
        }
        let spec = &mut template["spec"];
        let own = spec.get("schedulerName").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let chosen = scheduler.map(str::to_owned).or(own).unwrap_or_else(|| self.kind.scheduler_name().to_owned());
        spec["schedulerName"] = json!(chosen);
    }
}

/// Where a TrainJob names its binder queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueHints {
    /// `scheduling.volcano.sh/queue-name` of the runtime template (as the JobSet carries it), else
    /// of the TrainJob.
    pub volcano_queue: Option<String>,
    /// The TrainJob's `kai.scheduler/queue` label.
    pub kai_queue: Option<String>,
}

impl QueueHints {
    /// Reads the hints from the rendered workload's and the TrainJob's metadata.
    pub fn of(
        workload_meta: &Value,
        job_annotations: &BTreeMap<String, String>,
        job_labels: &BTreeMap<String, String>,
    ) -> QueueHints {
        let from_workload = workload_meta["annotations"][VOLCANO_QUEUE_ANNOTATION].as_str().map(str::to_owned);
        QueueHints {
            volcano_queue: from_workload.or_else(|| job_annotations.get(VOLCANO_QUEUE_ANNOTATION).cloned()),
            kai_queue: job_labels.get(KAI_QUEUE_LABEL).cloned(),
        }
    }

    fn kai_queue(&self) -> &str {
        self.kai_queue.as_deref().unwrap_or(KAI_DEFAULT_QUEUE)
    }
}

/// The last priority class a gang pod template names, as Trainer's Volcano plugin takes it.
fn priority_class(templates: &[(&Value, u32)]) -> Option<String> {
    templates
        .iter()
        .filter_map(|(t, _)| t["spec"]["priorityClassName"].as_str().filter(|s| !s.is_empty()))
        .next_back()
        .map(str::to_owned)
}

/// The gang's whole request: each template's pod request times its pods, summed per resource.
fn min_resources(templates: &[(&Value, u32)]) -> Map<String, Value> {
    let mut total: BTreeMap<String, i128> = BTreeMap::new();
    for (template, count) in templates {
        for (resource, milli) in pod_request(&template["spec"]) {
            *total.entry(resource).or_default() += milli * i128::from(*count);
        }
    }
    total.into_iter().map(|(k, milli)| (k, Value::String(format_milli(milli)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(gpus: &str) -> Value {
        json!({"metadata": {}, "spec": {"containers": [{"name": "node", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
    }

    #[test]
    fn coscheduling_groups_the_whole_gang_with_its_timeout() {
        let binder = Binder {
            kind: BinderKind::Coscheduling,
            named_by: "test".into(),
            schedule_timeout_seconds: 90,
            network_topology: None,
        };
        let (a, b) = (template("8"), template("4"));
        let owner = json!({"kind": "TrainJob", "name": "tj", "controller": true});
        let group = binder.pod_group("ml", "tj", &owner, &[(&a, 4), (&b, 1)], &QueueHints::default());
        assert_eq!(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
        assert_eq!(group["spec"]["minMember"], 5);
        assert_eq!(group["spec"]["minResources"]["nvidia.com/gpu"], "36");
        assert_eq!(group["spec"]["scheduleTimeoutSeconds"], 90);
        assert_eq!(group["metadata"]["ownerReferences"][0], owner);
        let mut pod = template("8");
        binder.mark_pod(&mut pod, "tj", None, &QueueHints::default());
        assert_eq!(pod["metadata"]["labels"][COSCHEDULING_POD_LABEL], "tj");
        assert_eq!(pod["spec"]["schedulerName"], "scheduler-plugins-scheduler");
    }

    #[test]
    fn volcano_takes_queue_priority_and_topology_from_the_runtime() {
        let binder = Binder {
            kind: BinderKind::Volcano,
            named_by: "test".into(),
            schedule_timeout_seconds: 60,
            network_topology: Some(json!({"mode": "soft"})),
        };
        let mut a = template("8");
        a["spec"]["priorityClassName"] = json!("high");
        a["spec"]["schedulerName"] = json!("volcano-gpu");
        let hints = QueueHints::of(
            &json!({"annotations": {VOLCANO_QUEUE_ANNOTATION: "research"}}),
            &BTreeMap::new(),
            &BTreeMap::new(),
        );
        let group = binder.pod_group("ml", "tj", &json!({}), &[(&a, 2)], &hints);
        assert_eq!(group["spec"]["queue"], "research");
        assert_eq!(group["spec"]["priorityClassName"], "high");
        assert_eq!(group["spec"]["networkTopology"], json!({"mode": "soft", "highestTierAllowed": 1}));
        binder.mark_pod(&mut a, "tj", None, &hints);
        assert_eq!(a["metadata"]["annotations"][VOLCANO_POD_ANNOTATION], "tj");
        assert_eq!(a["spec"]["schedulerName"], "volcano-gpu", "the template's own scheduler stays");
        binder.mark_pod(&mut a, "tj", Some("volcano-b"), &hints);
        assert_eq!(a["spec"]["schedulerName"], "volcano-b", "the TrainJob's choice wins");
    }

    #[test]
    fn kai_pods_name_their_group_and_queue_and_skip_its_grouper() {
        let binder = binder_of(&TrainingRuntimeSpec::default(), "torch", Some(BinderKind::Kai)).expect("the default");
        assert!(binder.named_by.contains("--binder kai"));
        let labels = BTreeMap::from([(KAI_QUEUE_LABEL.to_owned(), "team-a".to_owned())]);
        let hints = QueueHints::of(&json!({}), &BTreeMap::new(), &labels);
        let a = template("8");
        let group = binder.pod_group("ml", "tj", &json!({}), &[(&a, 2)], &hints);
        assert_eq!(group["apiVersion"], "scheduling.run.ai/v2alpha2");
        assert_eq!(group["spec"]["queue"], "team-a");
        assert_eq!(group["spec"]["minMember"], 2);
        let mut pod = a.clone();
        binder.mark_pod(&mut pod, "tj", None, &hints);
        assert_eq!(pod["metadata"]["annotations"][KAI_POD_ANNOTATION], "tj");
        assert_eq!(pod["metadata"]["annotations"][KAI_SKIP_GROUPER], "true");
        assert_eq!(pod["metadata"]["labels"][KAI_QUEUE_LABEL], "team-a");
        assert_eq!(pod["spec"]["schedulerName"], "kai-scheduler");
    }

    #[test]
    fn the_runtime_policy_wins_over_the_cluster_default() {
        let spec: TrainingRuntimeSpec =
            serde_json::from_value(json!({"podGroupPolicy": {"coscheduling": {}}})).expect("a runtime spec");
        let binder = binder_of(&spec, "torch", Some(BinderKind::Volcano)).expect("a binder");
        assert_eq!(binder.kind, BinderKind::Coscheduling);
        assert_eq!(binder.schedule_timeout_seconds, 60);
        assert_eq!(binder.named_by, "spec.podGroupPolicy.coscheduling of runtime torch");
        assert_eq!(binder_of(&TrainingRuntimeSpec::default(), "torch", None), None);
        assert_eq!(BinderKind::parse("volcano"), Some(BinderKind::Volcano));
        assert_eq!(BinderKind::parse("yunikorn"), None);
    }

    #[test]
    fn a_binder_the_server_does_not_serve_is_a_problem_naming_field_and_kind() {
        let spec: TrainingRuntimeSpec =
            serde_json::from_value(json!({"podGroupPolicy": {"volcano": {}}})).expect("a runtime spec");
        let support = BinderSupport::new(None, &[BinderKind::Coscheduling]);
        let (field, message) = support.problem(&spec, "torch-volcano").expect("a problem");
        assert_eq!(field, "spec.podGroupPolicy.volcano of runtime torch-volcano");
        assert!(message.contains("scheduling.volcano.sh/v1beta1 PodGroup"), "{message}");
        assert_eq!(BinderSupport::new(None, &[BinderKind::Volcano]).problem(&spec, "torch-volcano"), None);
        assert_eq!(BinderSupport::ANY.problem(&spec, "torch-volcano"), None);
        let plain = TrainingRuntimeSpec::default();
        assert_eq!(support.problem(&plain, "torch"), None, "no binder, nothing to serve");
        let kai_default = BinderSupport::new(Some(BinderKind::Kai), &[]);
        assert!(kai_default.problem(&plain, "torch").is_some_and(|(f, _)| f.contains("--binder kai")));
    }
}
