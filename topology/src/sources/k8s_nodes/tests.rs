//! Unit tests of the node list reader on small hand-made lists; fixture lists are in `tests/k8s_nodes.rs`.

use super::*;

const BLOCK: &str = "cloud.google.com/gce-topology-block";
const SUBBLOCK: &str = "cloud.google.com/gce-topology-subblock";

/// One node as `kubectl get nodes -o json` prints it, reduced to the fields the reader looks at.
fn node_json(name: &str, labels: &[(&str, &str)], ready: &str, unschedulable: bool) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
    format!(
        r#"{{"apiVersion": "v1", "kind": "Node",
  "metadata": {{"name": "{name}", "labels": {{{}}}}},
  "spec": {{"unschedulable": {unschedulable}}},
  "status": {{"allocatable": {{"cpu": "7910m", "memory": "32Gi", "nvidia.com/gpu": "8"}},
             "conditions": [{{"type": "MemoryPressure", "status": "False"}}, {{"type": "Ready", "status": "{ready}"}}]}}}}"#,
        labels.join(", ")
    )
}

fn list(nodes: &[String]) -> String {
    format!(r#"{{"apiVersion": "v1", "kind": "List", "items": [{}]}}"#, nodes.join(",\n"))
}

fn gke_options() -> NodeListOptions {
    NodeListOptions { level_keys: vec![BLOCK.into(), SUBBLOCK.into()], ..NodeListOptions::default() }
}

fn ready(name: &str, block: &str, subblock: &str) -> String {
    node_json(name, &[(BLOCK, block), (SUBBLOCK, subblock), (HOSTNAME_KEY, name)], "True", false)
}

#[test]
fn host_level_is_appended_and_nodes_come_out_sorted() {
    let text = list(&[ready("n2", "b1", "s1"), ready("n1", "b1", "s2"), ready("n3", "b2", "s1")]);
    let loaded = parse(&text, "nodes.json", &gke_options()).unwrap();
    assert_eq!(loaded.spec.name, "nodes.json");
    assert_eq!(loaded.spec.levels, [BLOCK, SUBBLOCK, HOSTNAME_KEY]);
    let paths: Vec<String> = loaded.spec.nodes.iter().map(|n| n.path.join("/")).collect();
    assert_eq!(paths, ["b1/s2/n1", "b1/s1/n2", "b2/s1/n3"]);
    assert_eq!(loaded.spec.nodes[0].capacity, Resources { gpus: 8, cpu_milli: 7910, memory_mib: 32 * 1024 });
    assert!(loaded.warnings.is_empty());
}

#[test]
fn unusable_nodes_are_reported_in_source_order_and_left_out() {
    let text = list(&[
        node_json("down", &[(BLOCK, "b1"), (SUBBLOCK, "s1")], "False", false),
        ready("ok", "b1", "s1"),
        node_json("cordoned", &[(BLOCK, "b1"), (SUBBLOCK, "s1")], "True", true),
        node_json("lost", &[(BLOCK, "b1"), (SUBBLOCK, "s1")], "Unknown", true),
        node_json("nosub", &[(BLOCK, "b1")], "True", false),
    ]);
    let loaded = parse(&text, "nodes.json", &gke_options()).unwrap();
    assert_eq!(loaded.spec.nodes.len(), 1);
    let warnings: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        [
            "nodes.json: node down: not Ready (Ready is \"False\"); left out, as Kueue does",
            "nodes.json: node cordoned: unschedulable (cordoned); left out, as Kueue does",
            "nodes.json: node lost: not Ready (Ready is \"Unknown\") and unschedulable (cordoned); left out, as Kueue does",
            "nodes.json: node nosub: no label `cloud.google.com/gce-topology-subblock`; node left out",
        ]
    );
    assert!(loaded.warnings.iter().all(|w| w.line.is_none()), "JSON has no line numbers");
}

#[test]
fn a_node_without_a_ready_condition_does_not_count() {
    let text = list(&[ready("ok", "b", "s"), ready("fresh", "b", "s").replace(r#""type": "Ready""#, r#""type": "X""#)]);
    let loaded = parse(&text, "n.json", &gke_options()).unwrap();
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(loaded.warnings[0].message, "not Ready (no Ready condition); left out, as Kueue does");
}

#[test]
fn an_empty_label_counts_as_missing() {
    let text = list(&[ready("ok", "b", "s"), ready("blank", "b", "")]);
    let loaded = parse(&text, "n.json", &gke_options()).unwrap();
    assert_eq!(loaded.spec.nodes.len(), 1);
    assert_eq!(loaded.warnings[0].item, "node blank");
}

#[test]
fn hostname_as_last_key_names_hosts_by_its_value() {
    let options = NodeListOptions {
        level_keys: vec![BLOCK.into(), HOSTNAME_KEY.into()],
        clique_key: None,
        gpu_resource: DEFAULT_GPU_RESOURCE.into(),
    };
    let a = node_json("node-a", &[(BLOCK, "b1"), (HOSTNAME_KEY, "host-a")], "True", false);
    let b = node_json("node-b", &[(BLOCK, "b1")], "True", false);
    let loaded = parse(&list(&[a.clone(), b]), "n.json", &options).unwrap();
    assert_eq!(loaded.spec.levels, [BLOCK, HOSTNAME_KEY]);
    assert_eq!(loaded.spec.nodes[0].path, ["b1", "host-a"]);
    assert_eq!(loaded.warnings[0].message, "no label `kubernetes.io/hostname`; node left out");

    let twin = node_json("node-c", &[(BLOCK, "b1"), (HOSTNAME_KEY, "host-a")], "True", false);
    let err = parse(&list(&[a, twin]), "n.json", &options).unwrap_err().to_string();
    assert!(err.contains("nodes node-a and node-c both have `kubernetes.io/hostname` = `host-a`"), "{err}");
}

fn clique_node(name: &str, subblock: &str, clique: Option<&str>) -> String {
    let mut labels = vec![(BLOCK, "b1"), (SUBBLOCK, subblock), (HOSTNAME_KEY, name)];
    labels.extend(clique.map(|c| (DEFAULT_CLIQUE_KEY, c)));
    node_json(name, &labels, "True", false)
}

const UUID: &str = "5c3e4f2a-9b1d-4e7a-8c6f-0a1b2c3d4e5f";

#[test]
fn the_clique_level_sits_above_the_host_and_needs_the_label() {
    let c1 = format!("{UUID}.1");
    let text =
        list(&[clique_node("g1", "s1", Some(&c1)), clique_node("g2", "s1", Some(&c1)), clique_node("cpu", "s1", None)]);
    let loaded = parse(&text, "n.json", &gke_options()).unwrap();
    assert_eq!(loaded.spec.levels, [BLOCK, SUBBLOCK, DEFAULT_CLIQUE_KEY, HOSTNAME_KEY]);
    assert_eq!(loaded.spec.nodes[0].path, ["b1", "s1", c1.as_str(), "g1"]);
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(loaded.warnings[0].message, "no label `nvidia.com/gpu.clique`; node left out");

    // Without a clique key, or with one no usable node carries, there is no clique level.
    let options = NodeListOptions { clique_key: None, ..gke_options() };
    assert_eq!(parse(&text, "n.json", &options).unwrap().spec.levels, [BLOCK, SUBBLOCK, HOSTNAME_KEY]);
    let text = list(&[clique_node("g1", "s1", None)]);
    assert_eq!(parse(&text, "n.json", &gke_options()).unwrap().spec.levels, [BLOCK, SUBBLOCK, HOSTNAME_KEY]);
}

#[test]
fn a_clique_listed_among_the_level_keys_is_not_inserted_twice() {
    let c1 = format!("{UUID}.1");
    let options = NodeListOptions { level_keys: vec![DEFAULT_CLIQUE_KEY.into()], ..NodeListOptions::default() };
    let loaded = parse(&list(&[clique_node("g1", "s1", Some(&c1))]), "n.json", &options).unwrap();
    assert_eq!(loaded.spec.levels, [DEFAULT_CLIQUE_KEY, HOSTNAME_KEY]);
}

#[test]
fn a_clique_split_across_subblocks_is_an_error() {
    let c1 = format!("{UUID}.1");
    let text = list(&[
        clique_node("g1", "s1", Some(&c1)),
        clique_node("g2", "s1", Some(&c1)),
        clique_node("g3", "s2", Some(&c1)),
    ]);
    let err = parse(&text, "n.json", &gke_options()).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "n.json: field `items[2].metadata.labels.nvidia.com/gpu.clique`: NVLink clique `{c1}` spans two \
             parent domains: node g1 is under `b1/s1`, node g3 under `b1/s2`"
        )
    );
    // Also when the level keys list the clique themselves, as a Kueue Topology for GB200 may.
    let keys = [BLOCK, SUBBLOCK, DEFAULT_CLIQUE_KEY, HOSTNAME_KEY].map(String::from).to_vec();
    let options = NodeListOptions { level_keys: keys, ..NodeListOptions::default() };
    let err = parse(&text, "n.json", &options).unwrap_err().to_string();
    assert!(err.contains("spans two parent domains"), "{err}");
}

#[test]
fn duplicate_names_and_unknown_keys_are_errors() {
    let err = parse(&list(&[ready("n1", "b", "s"), ready("n1", "b", "t")]), "n.json", &gke_options()).unwrap_err();
    assert_eq!(err.to_string(), "n.json: field `items[1].metadata.name`: node n1 is listed twice");
    let options = NodeListOptions { level_keys: vec!["cloud.google.com/gce-topology-blok".into()], ..gke_options() };
    let err = parse(&list(&[ready("n1", "b", "s")]), "n.json", &options).unwrap_err().to_string();
    assert!(err.contains("field `level_keys[0]`: no node in the list carries the label"), "{err}");
    let options = NodeListOptions { level_keys: vec![], ..gke_options() };
    let err = parse(&list(&[ready("n1", "b", "s")]), "n.json", &options).unwrap_err().to_string();
    assert!(err.contains("field `level_keys`: no levels"), "{err}");
    let options = NodeListOptions { level_keys: vec![HOSTNAME_KEY.into(), BLOCK.into()], ..gke_options() };
    let err = parse(&list(&[ready("n1", "b", "s")]), "n.json", &options).unwrap_err().to_string();
    assert!(err.contains("field `level_keys[0]`: `kubernetes.io/hostname` can only be the last"), "{err}");
    let err = parse(&list(&[ready("", "b", "s")]), "n.json", &gke_options()).unwrap_err().to_string();
    assert!(err.contains("field `items[0].metadata.name`: a node needs a name"), "{err}");
}

#[test]
fn no_usable_node_is_an_error_that_says_why() {
    let text = list(&[
        node_json("a", &[(BLOCK, "b")], "False", false),
        node_json("b", &[(BLOCK, "b")], "True", true),
        node_json("c", &[(BLOCK, "b")], "True", false),
        node_json("d", &[(BLOCK, "b")], "True", false),
        node_json("e", &[(BLOCK, "b")], "True", false),
    ]);
    let options = NodeListOptions { level_keys: vec![BLOCK.into(), SUBBLOCK.into()], ..gke_options() };
    let options_ok = NodeListOptions { level_keys: vec![BLOCK.into()], ..gke_options() };
    assert_eq!(parse(&text, "n.json", &options_ok).unwrap().spec.nodes.len(), 3);
    let text = text.replace(r#""labels": {"cloud.google.com/gce-topology-block": "b"}"#, r#""labels": {}"#);
    let err = parse(&text, "n.json", &options_ok).unwrap_err().to_string();
    assert!(err.contains("no node in the list carries the label `cloud.google.com/gce-topology-block`"), "{err}");
    let text = list(&[
        node_json("a", &[(BLOCK, "b"), (SUBBLOCK, "s")], "False", false),
        node_json("b", &[(BLOCK, "b")], "True", true),
        node_json("c", &[(BLOCK, "b")], "True", false),
        node_json("d", &[(BLOCK, "b")], "True", false),
        node_json("e", &[(BLOCK, "b")], "True", false),
    ]);
    let err = parse(&text, "n.json", &options).unwrap_err().to_string();
    assert_eq!(
        err,
        "n.json: field `items`: all 5 nodes were left out: node a: not Ready (Ready is \"False\"); left out, as \
         Kueue does; node b: unschedulable (cordoned); left out, as Kueue does; node c: no label \
         `cloud.google.com/gce-topology-subblock`; node left out; and 2 more"
    );
}

#[test]
fn quantities_are_checked_per_node_and_field() {
    let bad = ready("gpu-3", "b", "s").replace(r#""8""#, r#""1.5""#);
    let err = parse(&list(&[ready("gpu-1", "b", "s"), bad]), "n.json", &gke_options()).unwrap_err().to_string();
    assert_eq!(
        err,
        "n.json: field `items[1].status.allocatable.nvidia.com/gpu`: node gpu-3: \"1.5\" is not a whole number"
    );
    // Another resource name for GPUs; nodes without it have none.
    let options = NodeListOptions { gpu_resource: "amd.com/gpu".into(), ..gke_options() };
    let loaded = parse(&list(&[ready("gpu-1", "b", "s")]), "n.json", &options).unwrap();
    assert_eq!(loaded.spec.nodes[0].capacity.gpus, 0);
    let options = NodeListOptions { gpu_resource: " ".into(), ..gke_options() };
    assert!(parse(&list(&[ready("gpu-1", "b", "s")]), "n.json", &options).is_err());
}

#[test]
fn only_node_lists_and_nodes_are_accepted() {
    let err = parse(r#"{"kind": "PodList", "items": []}"#, "n.json", &gke_options()).unwrap_err().to_string();
    assert_eq!(err, "n.json: field `kind`: expected a NodeList, a List of Nodes or a Node, found kind `PodList`");
    let err = parse(r#"{"kind": "List", "items": []}"#, "n.json", &gke_options()).unwrap_err().to_string();
    assert_eq!(err, "n.json: field `items`: the list has no nodes");
    let err = parse(r#"{"kind": "List", "items": [{"kind": "Pod"}]}"#, "n.json", &gke_options()).unwrap_err();
    assert_eq!(err.to_string(), "n.json: field `items[0].kind`: expected a Node, found `Pod`");
    let err = parse("{\"kind\": \"List\",\n \"items\": [\n}", "n.json", &gke_options()).unwrap_err().to_string();
    assert!(err.starts_with("n.json: ") && err.contains("line 3"), "{err}");
}

#[test]
fn a_single_node_in_yaml_with_defaults() {
    let yaml = "\
apiVersion: v1
kind: Node
metadata:
  name: worker-0
  labels:
    kubernetes.io/hostname: worker-0
spec: {}
status:
  allocatable:
    cpu: '4'
    memory: 16329284Ki
  conditions:
  - type: Ready
    status: 'True'
";
    let loaded = parse(yaml, "node.yaml", &NodeListOptions::default()).unwrap();
    assert_eq!(loaded.spec.levels, [HOSTNAME_KEY]);
    assert_eq!(loaded.spec.nodes[0].path, ["worker-0"]);
    assert_eq!(loaded.spec.nodes[0].capacity, Resources { gpus: 0, cpu_milli: 4000, memory_mib: 15946 });
}

#[test]
fn yaml_items_carry_their_line() {
    let yaml = "\
apiVersion: v1
kind: List
items:
- metadata:
    name: a
    labels: {kubernetes.io/hostname: a}
  status:
    conditions: [{type: Ready, status: 'True'}]
- metadata:
    name: b
    labels: {kubernetes.io/hostname: b}
  status:
    allocatable: {memory: 12Qi}
";
    let err = parse(yaml, "n.yaml", &NodeListOptions::default()).unwrap_err().to_string();
    assert_eq!(
        err,
        "n.yaml: line 9: field `items[1].status.allocatable.memory`: node b: \"12Qi\" is not a quantity (unknown suffix \"Qi\")"
    );
    let yaml = yaml.replace("12Qi", "1Gi");
    let loaded = parse(&yaml, "n.yaml", &NodeListOptions::default()).unwrap();
    assert_eq!(loaded.warnings[0].line, Some(9));
    assert_eq!(
        loaded.warnings[0].to_string(),
        "n.yaml: line 9: node b: not Ready (no Ready condition); left out, as Kueue does"
    );
    let err = parse("kind: List\nitems:\n- metadata: [\n", "n.yaml", &NodeListOptions::default()).unwrap_err();
    assert!(err.to_string().starts_with("n.yaml: ") && err.to_string().contains("line"), "{err}");
}

#[test]
fn label_keys_are_checked_like_kubernetes_does() {
    for key in ["kubernetes.io/hostname", "rack", "a.b-c/x_y.z", "topology.k8s.aws/network-node-layer-1", "A9"] {
        assert!(is_label_key(key), "{key}");
    }
    for key in ["", "/rack", "Example.com/rack", "a/b/c", "-rack", "rack-", "my rack", "a..b/c", &"x".repeat(64)] {
        assert!(!is_label_key(key), "{key}");
    }
}

#[test]
fn hand_written_yaml_may_leave_numbers_and_booleans_unquoted() {
    let yaml = "kind: Node\nmetadata: {name: a, labels: {kubernetes.io/hostname: a}}\nstatus:\n  allocatable: {cpu: 4, \
                nvidia.com/gpu: 8}\n  conditions: [{type: Ready, status: True}]\n";
    let loaded = parse(yaml, "n.yaml", &NodeListOptions::default()).unwrap();
    assert_eq!(loaded.spec.nodes[0].capacity, Resources { gpus: 8, cpu_milli: 4000, memory_mib: 0 });
    assert!(loaded.warnings.is_empty());
}
