//! kube-scheduler's own gang objects (`scheduling.k8s.io` Workload and PodGroup), when the server has them.
//!
//! The API changed shape in every release that has it, so the version is found by discovery and
//! the objects are written for that version. The pods name their group in the pod template; with
//! the group's `minCount` equal to the gang, kube-scheduler binds the pods together once trainyard
//! lifts their gates.

use serde_json::{Value, json};

/// API group of the gang objects.
pub const GROUP: &str = "scheduling.k8s.io";
/// The one pod group of a trainyard gang.
pub const TEMPLATE: &str = "gang";

/// A served version of the gang API, newest first in preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GangApi {
    /// Kubernetes 1.37 (beta): Workload templates, PodGroup with `workloadRef`.
    V1beta1,
    /// Kubernetes 1.36: Workload templates, separate PodGroup, pods name it in `schedulingGroup`.
    V1alpha2,
    /// Kubernetes 1.35: Workload with embedded pod groups, pods name it in `workloadRef`.
    V1alpha1,
}

impl GangApi {
    /// The versions in order of preference.
    pub const PREFERENCE: [GangApi; 3] = [GangApi::V1beta1, GangApi::V1alpha2, GangApi::V1alpha1];

    /// The version string.
    pub fn version(self) -> &'static str {
        match self {
            GangApi::V1beta1 => "v1beta1",
            GangApi::V1alpha2 => "v1alpha2",
            GangApi::V1alpha1 => "v1alpha1",
        }
    }

    /// The best version among those the server lists for `workloads` (and `podgroups`, where needed).
    pub fn pick(served: &[(String, Vec<String>)]) -> Option<GangApi> {
        GangApi::PREFERENCE.into_iter().find(|api| {
            served.iter().any(|(version, resources)| {
                version == api.version()
                    && resources.iter().any(|r| r == "workloads")
                    && (*api == GangApi::V1alpha1 || resources.iter().any(|r| r == "podgroups"))
            })
        })
    }

    fn api_version(self) -> String {
        format!("{GROUP}/{}", self.version())
    }

    /// The Workload and (from v1alpha2) PodGroup of a gang of `pods` pods, owned by the TrainJob.
    /// `shared` are the claims every pod of the gang names by `resourceClaimName`: from v1alpha2
    /// they go on the PodGroup, which is then reserved for them once for the whole gang
    /// (`DRAWorkloadResourceClaims`; a server without that gate drops the field).
    pub fn objects(self, namespace: &str, name: &str, owner: &Value, pods: u32, shared: &[Value]) -> Vec<Value> {
        let metadata =
            |object_name: &str| json!({"name": object_name, "namespace": namespace, "ownerReferences": [owner]});
        let controller_ref = json!({"apiGroup": "trainer.kubeflow.org", "kind": "TrainJob", "name": name});
        let gang = json!({"gang": {"minCount": pods}});
        let group_name = pod_group_name(name);
        match self {
            GangApi::V1alpha1 => vec![json!({
                "apiVersion": self.api_version(),
                "kind": "Workload",
                "metadata": metadata(name),
                "spec": {"controllerRef": controller_ref, "podGroups": [{"name": TEMPLATE, "policy": gang}]},
            })],
            GangApi::V1alpha2 | GangApi::V1beta1 => {
                let workload = json!({
                    "apiVersion": self.api_version(),
                    "kind": "Workload",
                    "metadata": metadata(name),
                    "spec": {
                        "controllerRef": controller_ref,
                        "podGroupTemplates": [{"name": TEMPLATE, "schedulingPolicy": gang}],
                    },
                });
                let template_ref = if self == GangApi::V1alpha2 {
                    json!({"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": TEMPLATE}}})
                } else {
                    json!({"workloadRef": {"workloadName": name, "templateName": TEMPLATE}})
                };
                let mut spec = template_ref;
                spec["schedulingPolicy"] = gang;
                if !shared.is_empty() {
                    spec["resourceClaims"] = Value::Array(shared.to_vec());
                }
                let group = json!({
                    "apiVersion": self.api_version(),
                    "kind": "PodGroup",
                    "metadata": metadata(&group_name),
                    "spec": spec,
                });
                vec![workload, group]
            }
        }
    }

    /// The pod spec field that puts a pod in the gang's group.
    pub fn pod_link(self, name: &str) -> (&'static str, Value) {
        match self {
            GangApi::V1alpha1 => ("workloadRef", json!({"name": name, "podGroup": TEMPLATE})),
            GangApi::V1alpha2 | GangApi::V1beta1 => ("schedulingGroup", json!({"podGroupName": pod_group_name(name)})),
        }
    }
}

/// Name of a TrainJob's PodGroup.
pub fn pod_group_name(name: &str) -> String {
    format!("{name}-{TEMPLATE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(list: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        list.iter().map(|(v, r)| (v.to_string(), r.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn the_newest_complete_version_is_picked() {
        assert_eq!(GangApi::pick(&served(&[("v1", &["priorityclasses"])])), None);
        let both = served(&[("v1", &["priorityclasses"]), ("v1alpha2", &["workloads", "podgroups"])]);
        assert_eq!(GangApi::pick(&both), Some(GangApi::V1alpha2));
        let beta = served(&[("v1beta1", &["workloads", "podgroups"]), ("v1alpha3", &["workloads"])]);
        assert_eq!(GangApi::pick(&beta), Some(GangApi::V1beta1));
        assert_eq!(GangApi::pick(&served(&[("v1alpha2", &["workloads"])])), None, "v1alpha2 needs podgroups");
    }

    #[test]
    fn v1alpha2_objects_link_the_group_to_its_template() {
        let owner = json!({"kind": "TrainJob", "name": "tj"});
        let objects = GangApi::V1alpha2.objects("ns", "tj", &owner, 4, &[]);
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0]["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"], 4);
        assert_eq!(objects[1]["metadata"]["name"], "tj-gang");
        assert_eq!(objects[1]["spec"]["podGroupTemplateRef"]["workload"]["workloadName"], "tj");
        assert_eq!(GangApi::V1alpha2.pod_link("tj").1, json!({"podGroupName": "tj-gang"}));
        assert!(objects[1]["spec"].get("resourceClaims").is_none());
    }

    #[test]
    fn claims_the_whole_gang_shares_go_on_the_pod_group() {
        let owner = json!({"kind": "TrainJob", "name": "tj"});
        let shared = [json!({"name": "imex", "resourceClaimName": "tj-channel"})];
        for api in [GangApi::V1alpha2, GangApi::V1beta1] {
            let objects = api.objects("ns", "tj", &owner, 4, &shared);
            assert_eq!(objects[1]["spec"]["resourceClaims"], json!(shared), "{api:?}");
            assert!(objects[0]["spec"].get("resourceClaims").is_none(), "not on the Workload");
        }
        let v1 = GangApi::V1alpha1.objects("ns", "tj", &owner, 4, &shared);
        assert!(v1[0].to_string().find("resourceClaims").is_none(), "1.35 has no PodGroup claims");
    }
}
