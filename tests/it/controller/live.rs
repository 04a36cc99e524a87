//! The controller sees the cluster kube-scheduler sees, by value: foreign pods, taints, node
//! affinity, cordoned, NotReady and deleted nodes under running gangs, relists and restarts. Each
//! scenario also checks that a controller restarted in the middle decides the same.

use trainyard::controller::deciding::scheduling_loop::Decision;

use super::cluster::*;

fn nodes(n: usize) -> Vec<k8s_openapi::api::core::v1::Node> {
    (0..n).map(|i| node(&format!("n{i}"), 8)).collect()
}

fn plain() -> std::sync::Arc<trainyard::controller::watching::scheduler_inputs::Runtimes> {
    runtimes(&[runtime_yaml("gpu", "")])
}

/// A restarted controller holds the same hosts and makes the same decisions.
fn restart_agrees(h: &Harness, names: &[&str]) {
    let restarted = h.restarted();
    assert_eq!(Harness::hosts(&restarted), Harness::hosts(&h.live), "hosts after a restart");
    for name in names {
        let key = format!("team/{name}");
        let (a, b) = (h.live.decision(&key), restarted.decision(&key));
        // A decided admission not yet recorded is decided again after a restart, maybe elsewhere.
        if !matches!(a, Some(Decision::Admit(_))) {
            assert_eq!(a, b, "{name} after a restart");
        }
    }
}

#[test]
fn a_foreign_8_gpu_pod_takes_its_node() {
    let mut h = Harness::new(&nodes(3), plain());
    h.pod(pod("foreign", "n0", 8, None));
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let r = h.admitted("g1");
    assert!(!hosts_of(&r).contains(&"n0".to_string()), "n0 is full of another workload's pod: {r:?}");
    h.admit("g1");
    // Nothing is left: a second gang of one pod waits, and gets n0 once the foreign pod is gone.
    h.job(trainjob("g2", "gpu", "team", 1, 8, 1));
    h.cycle();
    assert!(matches!(h.decision("g2"), Some(Decision::Pending { reason, .. }) if reason == "InsufficientCapacity"));
    restart_agrees(&h, &["g1", "g2"]);
    h.delete_pod("foreign");
    h.cycle();
    assert_eq!(hosts_of(&h.admitted("g2")), vec!["n0"]);
    let report = h.live.scheduling_loop().hosts_report();
    assert_eq!(report.foreign_gpus, 0);
}

#[test]
fn a_pod_on_a_node_not_known_yet_counts_when_the_node_comes() {
    let mut h = Harness::new(&nodes(1), plain());
    h.pod(pod("early", "n1", 6, None));
    h.node(node("n1", 8));
    assert_eq!(h.live.scheduling_loop().hosts_report().foreign_gpus, 6);
    h.job(trainjob("g1", "gpu", "team", 3, 4, 0));
    h.cycle();
    // n0 takes two pods of 4 and n1, with 2 GPUs left, none: without the early pod it would fit.
    assert!(matches!(h.decision("g1"), Some(Decision::Pending { .. })), "{:?}", h.decision("g1"));
}

#[test]
fn a_tainted_node_is_for_gangs_that_tolerate_it() {
    let toleration =
        "                tolerations: [{key: dedicated, operator: Equal, value: vision, effect: NoSchedule}]\n";
    let rts = runtimes(&[runtime_yaml("gpu", ""), runtime_yaml("vision", toleration)]);
    let mut all = nodes(2);
    all[0] = tainted(all[0].clone(), "dedicated", "vision", "NoSchedule");
    let mut h = Harness::new(&all, rts);
    h.job(trainjob("plain", "gpu", "team", 2, 8, 0));
    h.job(trainjob("seer", "vision", "team", 1, 8, 1));
    h.cycle();
    // Without the toleration two nodes are too few: only n1 takes it.
    assert!(
        matches!(h.decision("plain"), Some(Decision::Unschedulable { reason, .. }) if reason == "NeverFits"),
        "{:?}",
        h.decision("plain")
    );
    assert_eq!(hosts_of(&h.admitted("seer")), vec!["n0"], "the tolerating gang goes to the tainted node first");
    restart_agrees(&h, &["plain", "seer"]);
    // The taint goes: the gang that could never fit is looked at again.
    h.node(node("n0", 8));
    h.cycle();
    assert!(matches!(h.decision("plain"), Some(Decision::Pending { .. })), "{:?}", h.decision("plain"));
}

#[test]
fn a_required_node_affinity_keeps_a_gang_on_its_nodes() {
    let affinity = "                affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [H100]}]}]}}}\n";
    let rts = runtimes(&[runtime_yaml("h100", affinity)]);
    let all = vec![
        labelled(node("a100-0", 8), "nvidia.com/gpu.product", "A100"),
        labelled(node("h100-0", 8), "nvidia.com/gpu.product", "H100"),
        labelled(node("h100-1", 8), "nvidia.com/gpu.product", "H100"),
    ];
    let mut h = Harness::new(&all, rts);
    h.job(trainjob("g1", "h100", "team", 2, 8, 0));
    h.cycle();
    let mut hosts = hosts_of(&h.admitted("g1"));
    hosts.sort();
    assert_eq!(hosts, vec!["h100-0", "h100-1"]);
    h.admit("g1");
    h.job(trainjob("g2", "h100", "team", 1, 8, 1));
    h.cycle();
    assert!(matches!(h.decision("g2"), Some(Decision::Pending { .. })), "the A100 node is free but not for it");
    restart_agrees(&h, &["g1", "g2"]);
}

/// Two gangs of two nodes on three nodes, the first running on two of them.
fn running_gang() -> (Harness, Vec<String>) {
    let mut h = Harness::new(&nodes(3), plain());
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let r = h.admit("g1");
    (h, hosts_of(&r))
}

fn lost_under_a_running_gang(lose: impl Fn(&mut Harness, &str), what: &str) {
    let (mut h, hosts) = running_gang();
    let lost = hosts[0].clone();
    lose(&mut h, &lost);
    h.job(trainjob("g2", "gpu", "team", 2, 8, 1));
    h.cycle();
    match h.decision("g1") {
        Some(Decision::Degraded { nodes, message }) => {
            assert_eq!(nodes, vec![lost.clone()]);
            assert!(message.contains(what), "{message}");
        }
        other => panic!("g1 should say which node it lost: {other:?}"),
    }
    // g1 still holds both hosts: the third node alone cannot take g2.
    assert!(matches!(h.decision("g2"), Some(Decision::Pending { .. })), "{:?}", h.decision("g2"));
    let free: u64 = Harness::hosts(&h.live).values().map(|(free, _, _)| free).sum();
    assert_eq!(free, 8, "only the third node is free");
    restart_agrees(&h, &["g1", "g2"]);
    // The node comes back: g1 is whole again, and g2 still never gets g1's hosts.
    h.node(node(&lost, 8));
    h.cycle();
    assert_eq!(h.decision("g1"), Some(Decision::Running));
    assert!(matches!(h.decision("g2"), Some(Decision::Pending { .. })));
}

#[test]
fn a_cordon_under_a_running_gang_never_double_books_its_hosts() {
    lost_under_a_running_gang(|h, n| h.node(cordoned(node(n, 8))), "cordoned");
}

#[test]
fn a_not_ready_node_under_a_running_gang_never_double_books_its_hosts() {
    lost_under_a_running_gang(|h, n| h.node(not_ready(node(n, 8))), "not ready");
}

#[test]
fn a_deleted_node_stays_charged_until_the_gang_ends() {
    lost_under_a_running_gang(|h, n| h.delete_node(n), "removed");
}

#[test]
fn the_gang_is_charged_on_a_lost_node_until_its_pods_are_gone() {
    let policy = format!("{POLICY}node_loss: {{action: requeue, grace: 30s}}\n");
    let mut h = Harness::with_policy(&policy, &nodes(3), plain());
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let hosts = hosts_of(&h.admit("g1"));
    for (i, host) in hosts.iter().enumerate() {
        h.pod(pod(&format!("g1-{i}"), host, 8, Some("g1")));
    }
    h.node(cordoned(node(&hosts[0], 8)));
    h.advance(10);
    assert!(
        matches!(h.decision("g1"), Some(Decision::Degraded { .. })),
        "within the grace it waits: {:?}",
        h.decision("g1")
    );
    h.advance(30);
    assert!(
        matches!(h.decision("g1"), Some(Decision::Requeue { reason, .. }) if reason == "NodeLost"),
        "{:?}",
        h.decision("g1")
    );
    // Requeued: its pods still run until the JobSet is deleted, and they keep their nodes charged.
    h.job(trainjob("g2", "gpu", "team", 1, 8, 1));
    h.cycle();
    let r = h.admitted("g2");
    assert_eq!(hosts_of(&r), vec![h.nodes.keys().find(|n| !hosts.contains(n)).unwrap().clone()]);
    assert_eq!(h.live.scheduling_loop().hosts_report().foreign_gpus, 16, "the requeued gang's pods are charged");
    h.delete_pod("g1-0");
    h.delete_pod("g1-1");
    assert_eq!(h.live.scheduling_loop().hosts_report().foreign_gpus, 0);
}

#[test]
fn a_lost_node_is_replaced_inside_the_gangs_domain() {
    let policy = format!("{POLICY}node_loss: {{action: replace, grace: 0s}}\n");
    let mut h = Harness::with_policy(&policy, &nodes(3), plain());
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let r = h.admit("g1");
    let hosts = hosts_of(&r);
    let spare = h.nodes.keys().find(|n| !hosts.contains(n)).unwrap().clone();
    h.delete_node(&hosts[0]);
    h.cycle();
    let Some(Decision::Move(moved)) = h.decision("g1") else { panic!("{:?}", h.decision("g1")) };
    assert_eq!(
        moved.slots(),
        vec![spare.as_str(), hosts[1].as_str()],
        "the lost slot goes to the spare node, the other stays"
    );
    // The record is written: the gang runs on its new hosts.
    h.record("g1", &moved);
    h.cycle();
    assert_eq!(h.decision("g1"), Some(Decision::Running));
    restart_agrees(&h, &["g1"]);
}

#[test]
fn a_relist_converges_to_a_fresh_start() {
    let (mut h, hosts) = running_gang();
    h.pod(pod("foreign", &h.nodes.keys().find(|n| !hosts.contains(n)).unwrap().clone(), 4, None));
    h.node(cordoned(node(&hosts[1], 8)));
    h.job(trainjob("g2", "gpu", "team", 1, 8, 1));
    h.cycle();
    // While the watch was down, the foreign pod went, a node was deleted and another joined.
    h.pods.clear();
    let gone = hosts[0].clone();
    h.nodes.remove(&gone);
    h.nodes.insert("n9".into(), node("n9", 8));
    h.relist();
    h.cycle();
    assert_eq!(Harness::hosts(&h.live), Harness::hosts(&h.restarted()));
    assert_eq!(h.live.scheduling_loop().hosts_report().foreign_gpus, 0);
    for name in ["g1", "g2"] {
        let key = format!("team/{name}");
        let fresh = h.restarted();
        if !matches!(h.live.decision(&key), Some(Decision::Admit(_))) {
            assert_eq!(h.live.decision(&key), fresh.decision(&key), "{name}");
        }
    }
}

#[test]
fn a_malformed_node_is_left_out_and_named() {
    let mut bad = node("broken", 8);
    bad.status
        .as_mut()
        .unwrap()
        .allocatable
        .as_mut()
        .unwrap()
        .insert("cpu".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()));
    let mut h = Harness::new(&nodes(1), plain());
    h.node(bad);
    let report = h.live.scheduling_loop().hosts_report();
    let problem = report.problems.get("broken").expect("the node is reported");
    assert!(problem.contains("status.allocatable[\"cpu\"]"), "{problem}");
    assert_eq!(report.eligible, 1, "and left out");
}

#[test]
fn a_trainjob_naming_a_queue_that_does_not_exist_waits_for_it() {
    let mut h = Harness::new(&nodes(2), plain());
    h.job(trainjob("typo", "gpu", "team-aa", 1, 8, 0));
    h.cycle();
    match h.decision("typo") {
        Some(Decision::Pending { reason, message }) => {
            assert_eq!(reason, "QueueNotFound");
            assert!(message.contains("team-aa") && message.contains("trainyard.io/queue"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn trainjobs_created_in_the_same_second_go_in_the_order_first_seen() {
    let mut h = Harness::new(&nodes(1), plain());
    // Both created at the same second; `b` is seen first.
    h.job(trainjob("b", "gpu", "team", 1, 8, 5));
    h.job(trainjob("a", "gpu", "team", 1, 8, 5));
    h.cycle();
    assert!(matches!(h.decision("b"), Some(Decision::Admit(_))), "{:?}", h.decision("b"));
    assert!(matches!(h.decision("a"), Some(Decision::Pending { .. })));
}

#[test]
fn the_chart_default_policy_is_one_the_controller_takes() {
    let values: serde_json::Value =
        serde_saphyr::from_str(include_str!("../../../charts/trainyard/values.yaml")).expect("values.yaml parses");
    let policy = serde_json::to_string(&values["policy"]).unwrap();
    let config =
        trainyard_policies::PolicyConfig::from_yaml(&policy, "values.yaml policy").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.undeclared_queues,
        trainyard_policies::UndeclaredQueues::Reject,
        "a mistyped queue never runs unlimited"
    );
    assert!(!config.root_cohort);
}

#[test]
fn the_engine_is_built_once_whatever_changes() {
    let mut h = Harness::new(&nodes(4), plain());
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.job(trainjob("big", "gpu", "team", 8, 8, 1));
    h.cycle();
    h.admit("g1");
    let waiting = h.decision("big");
    // Node churn, a relist, pods coming and going, a Queue object and a Topology selector change.
    h.node(cordoned(node("n3", 8)));
    h.delete_node("n2");
    h.node(node("n9", 8));
    h.pod(pod("f", "n9", 2, None));
    h.relist();
    let queue: trainyard::api::Queue = serde_saphyr::from_str(
        "apiVersion: trainyard.io/v1alpha1\nkind: Queue\nmetadata: {name: extra, generation: 1}\nspec: {nominal: {gpus: 8}}\n",
    )
    .unwrap();
    h.live.apply(
        trainyard::controller::watching::live::Change::Queue(Box::new(kube::runtime::watcher::Event::Apply(queue))),
        h.now,
    );
    h.advance(5);
    assert_eq!(h.live.engine_builds(), 1);
    // The same engine: the waiting gang kept its place and reason, the running one its hosts.
    assert_eq!(h.decision("big"), waiting);
    assert!(matches!(h.decision("g1"), Some(Decision::Running | Decision::Degraded { .. })));
}
