//! A worker's DRA objects under fleet names: its ResourceSlices and ResourceClaims renamed so
//! that pools, nodes and claims of different workers never meet in the manager's one picture,
//! and a pool reaches only the nodes of its own worker. Pure.
//!
//! DeviceClasses and ResourceClaimTemplates are the manager's own (the TrainJobs' runtimes name
//! them there); each worker must have the same ones, as it must have the runtimes.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};

use super::merge::{HOSTNAME_LABEL, fleet_name, split_fleet_name};
use crate::api::worker_cluster::CLUSTER_LEVEL_LABEL;

/// A worker's slice in the fleet: its name, pool and node qualified by the worker; a pool of
/// every node (`allNodes`) reaches every node of that worker only, and a node selector matches
/// only that worker's nodes (its host names and node names in their fleet form).
pub fn qualify_slice(cluster: &str, slice: &ResourceSlice) -> ResourceSlice {
    let mut q = slice.clone();
    q.metadata.name = slice.metadata.name.as_deref().map(|n| fleet_name(cluster, n));
    q.metadata.uid = slice.metadata.uid.as_deref().map(|u| fleet_name(cluster, u));
    let spec = &mut q.spec;
    spec.pool.name = fleet_name(cluster, &spec.pool.name);
    qualify_reach(cluster, &mut spec.node_name, &mut spec.all_nodes, &mut spec.node_selector);
    for device in spec.devices.iter_mut().flatten() {
        qualify_reach(cluster, &mut device.node_name, &mut device.all_nodes, &mut device.node_selector);
    }
    q
}

/// The nodes a slice (or one device of it) reaches, made the worker's nodes in fleet names.
fn qualify_reach(
    cluster: &str,
    node_name: &mut Option<String>,
    all_nodes: &mut Option<bool>,
    selector: &mut Option<NodeSelector>,
) {
    if let Some(node) = node_name.as_mut() {
        *node = fleet_name(cluster, node);
    }
    if *all_nodes == Some(true) {
        *all_nodes = None;
        *selector = Some(NodeSelector { node_selector_terms: vec![NodeSelectorTerm::default()] });
    }
    if let Some(selector) = selector.as_mut() {
        for term in &mut selector.node_selector_terms {
            qualify_term(cluster, term);
        }
    }
}

/// A node selector term of a worker, matching the same nodes of that worker in the fleet.
fn qualify_term(cluster: &str, term: &mut NodeSelectorTerm) {
    let qualify_values = |r: &mut NodeSelectorRequirement| {
        for v in r.values.iter_mut().flatten() {
            *v = fleet_name(cluster, v);
        }
    };
    for r in term.match_expressions.iter_mut().flatten().filter(|r| r.key == HOSTNAME_LABEL) {
        qualify_values(r);
    }
    for r in term.match_fields.iter_mut().flatten().filter(|r| r.key == "metadata.name") {
        qualify_values(r);
    }
    term.match_expressions.get_or_insert_with(Vec::new).push(NodeSelectorRequirement {
        key: CLUSTER_LEVEL_LABEL.to_string(),
        operator: "In".to_string(),
        values: Some(vec![cluster.to_string()]),
    });
}

/// A worker's claim in the fleet: its uid, the uids of the pods that own it and the pools of its
/// allocation qualified by the worker, as the worker's pods and slices are.
pub fn qualify_claim(cluster: &str, claim: &ResourceClaim) -> ResourceClaim {
    let mut q = claim.clone();
    q.metadata.uid = claim.metadata.uid.as_deref().map(|u| fleet_name(cluster, u));
    for owner in q.metadata.owner_references.iter_mut().flatten() {
        owner.uid = fleet_name(cluster, &owner.uid);
    }
    let allocation = q.status.as_mut().and_then(|s| s.allocation.as_mut());
    if let Some(devices) = allocation.and_then(|a| a.devices.as_mut()) {
        for result in devices.results.iter_mut().flatten() {
            result.pool = fleet_name(cluster, &result.pool);
        }
    }
    q
}

/// A pool's name in the worker `cluster` (its fleet name without the worker), or `None` when the
/// pool is not of that worker.
pub fn local_pool<'p>(cluster: &str, pool: &'p str) -> Option<&'p str> {
    split_fleet_name(pool).filter(|(c, _)| *c == cluster).map(|(_, local)| local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(spec: serde_json::Value) -> ResourceSlice {
        serde_json::from_value(json!({"metadata": {"name": "s1", "uid": "u1"}, "spec": spec})).unwrap()
    }

    fn terms(s: &ResourceSlice) -> serde_json::Value {
        serde_json::to_value(s.spec.node_selector.as_ref().unwrap()).unwrap()["nodeSelectorTerms"].clone()
    }

    #[test]
    fn a_node_local_slice_names_its_worker_in_its_name_pool_and_node() {
        let s = slice(json!({"driver": "gpu.example.com", "nodeName": "h1",
            "pool": {"name": "h1", "generation": 3, "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]}));
        let q = qualify_slice("east", &s);
        assert_eq!(q.metadata.name.as_deref(), Some("east/s1"));
        assert_eq!(q.spec.pool.name, "east/h1");
        assert_eq!(q.spec.pool.generation, 3);
        assert_eq!(q.spec.node_name.as_deref(), Some("east/h1"));
        assert_eq!(q.spec.node_selector, None);
        assert_eq!(q.spec.devices.as_ref().unwrap()[0].name, "gpu-0", "device names stay");
    }

    #[test]
    fn a_pool_of_every_node_reaches_every_node_of_its_worker_only() {
        let q = qualify_slice(
            "west",
            &slice(json!({"driver": "nic.example.com", "allNodes": true,
            "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1}})),
        );
        assert_eq!(q.spec.all_nodes, None);
        assert_eq!(
            terms(&q),
            json!([{"matchExpressions": [{"key": CLUSTER_LEVEL_LABEL, "operator": "In", "values": ["west"]}]}])
        );
    }

    #[test]
    fn a_node_selector_keeps_its_meaning_inside_its_worker() {
        let s = slice(json!({"driver": "nic.example.com",
            "pool": {"name": "rack-a", "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]},
                                      {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["h9"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h1", "h2"]}]}]}}));
        let q = qualify_slice("east", &s);
        assert_eq!(
            terms(&q),
            json!([
                {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]},
                                      {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["east/h9"]},
                                      {"key": CLUSTER_LEVEL_LABEL, "operator": "In", "values": ["east"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["east/h1", "east/h2"]}],
                 "matchExpressions": [{"key": CLUSTER_LEVEL_LABEL, "operator": "In", "values": ["east"]}]}
            ])
        );
    }

    #[test]
    fn a_claim_is_keyed_owned_and_allocated_in_fleet_names() {
        let claim: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "cu",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "pu"}]},
            "spec": {"devices": {}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "gpu.example.com", "pool": "h1", "device": "gpu-0"}]}}}
        }))
        .unwrap();
        let q = qualify_claim("east", &claim);
        assert_eq!(q.metadata.uid.as_deref(), Some("east/cu"));
        assert_eq!(q.metadata.owner_references.as_ref().unwrap()[0].uid, "east/pu");
        let results = &q
            .status
            .as_ref()
            .unwrap()
            .allocation
            .as_ref()
            .unwrap()
            .devices
            .as_ref()
            .unwrap()
            .results
            .as_ref()
            .unwrap();
        assert_eq!((results[0].pool.as_str(), results[0].device.as_str()), ("east/h1", "gpu-0"));
        assert_eq!(q.metadata.name.as_deref(), Some("c"), "the claim's name and namespace stay");
    }

    #[test]
    fn pools_go_back_to_their_workers_names() {
        assert_eq!(local_pool("east", "east/h1"), Some("h1"));
        assert_eq!(local_pool("east", "east/fabric/a"), Some("fabric/a"), "a pool name may hold slashes");
        assert_eq!(local_pool("east", "west/h1"), None);
    }
}
