//! The controller's inputs, at the boundary where API objects become what the engine reads:
//! a TrainJob with its runtime made into a gang intent and rendered (as `render` and the
//! controller do), and Node objects read into typed facts and a cluster tree. An object the API
//! server would store in any shape the CRD allows must end in a problem that names its field.

use k8s_openapi::api::core::v1::Node;
use trainyard::api::{QUEUE_LABEL, Queue, Topology, TopologySpec, TrainJob};
use trainyard::controller::acting::workload_objects;
use trainyard::controller::deciding::intent::IntentContext;
use trainyard::controller::watching::facts::{Levels, NodeView, read_node};
use trainyard::controller::watching::scheduler_inputs::{
    Runtimes, Side, cluster_from_nodes, intent_of, policy_with_queues,
};
use trainyard_bridges::trainer as bridge;
use trainyard_policies::PolicyConfig;

use super::{Target, Verdict, seed, text};

/// A TrainJob fixture with the runtime it names.
const PAIRS: [(&str, &str); 4] = [
    (
        include_str!("../../../bridges/tests/fixtures/torch_multinode.trainjob.yaml"),
        include_str!("../../../bridges/tests/fixtures/torch_multinode.runtime.yaml"),
    ),
    (
        include_str!("../../../bridges/tests/fixtures/mpi_deepspeed.trainjob.yaml"),
        include_str!("../../../bridges/tests/fixtures/mpi_deepspeed.runtime.yaml"),
    ),
    (
        include_str!("../../../bridges/tests/fixtures/torch_lws.trainjob.yaml"),
        include_str!("../../../bridges/tests/fixtures/torch_lws.runtime.yaml"),
    ),
    (
        include_str!("../../../bridges/tests/fixtures/jax.trainjob.yaml"),
        include_str!("../../../bridges/tests/fixtures/jax.runtime.yaml"),
    ),
];

pub(super) fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "trainjob",
            source: "fuzz-trainjob.yaml",
            seeds: || PAIRS.iter().map(|(job, _)| ("a TrainJob fixture", job.as_bytes().to_vec())).collect(),
            generate: None,
            run: |bytes| {
                // Each mutated TrainJob meets every runtime: the one it names, and the others.
                let runtimes: Vec<&str> = PAIRS.iter().map(|(_, r)| *r).collect();
                trainjob(bytes, &runtimes)
            },
        },
        Target {
            name: "runtime",
            source: "fuzz-runtime.yaml",
            seeds: || PAIRS.iter().map(|(_, runtime)| ("a runtime fixture", runtime.as_bytes().to_vec())).collect(),
            generate: None,
            run: runtime,
        },
        Target {
            name: "queue-objects",
            source: "fuzz-queues.yaml",
            seeds: || vec![seed!("examples/kubernetes/queues.yaml"), seed!("examples/slurm/queues.yaml")],
            generate: None,
            run: queue_objects,
        },
        Target {
            name: "topology-object",
            source: "fuzz-topology.yaml",
            seeds: || {
                vec![seed!("examples/kubernetes/topology.yaml"), seed!("tests/fixtures/render/gke-tpu.cluster.yaml")]
            },
            generate: None,
            run: topology_object,
        },
        Target {
            name: "node-objects",
            source: "fuzz-nodes.json",
            seeds: || {
                vec![
                    seed!("topology/tests/fixtures/k8s/gke-a3-mega.json", 4000),
                    seed!("topology/tests/fixtures/k8s/broken-quantity.json"),
                    seed!("topology/tests/fixtures/k8s/gb200-nvl72.yaml", 600),
                ]
            },
            generate: None,
            run: node_objects,
        },
    ]
}

/// Reads `text` as a runtime object of either kind into `runtimes`; with `as_names`, also
/// under each of those names (so that every TrainJob fixture finds a mutated runtime).
fn add_runtime(runtimes: &mut Runtimes, text: &str, source: &str, as_names: &[(String, String)]) -> Result<(), String> {
    let value: serde_json::Value = trainyard_topology::input_text::yaml(text, source).map_err(|e| e.to_string())?;
    let runtime: bridge::TrainingRuntime =
        serde_json::from_value(value.clone()).map_err(|e| format!("{source}: not a TrainingRuntime: {e}"))?;
    let name = runtime.metadata.name.clone().unwrap_or_default();
    for (ns, other) in as_names {
        runtimes.cluster.insert(other.clone(), runtime.clone());
        runtimes.namespaced.insert((ns.clone(), other.clone()), runtime.clone());
    }
    match value["kind"].as_str() {
        Some(bridge::CLUSTER_TRAINING_RUNTIME) => {
            runtimes.cluster.insert(name, runtime);
        }
        _ => {
            let ns = runtime.metadata.namespace.clone().unwrap_or_default();
            runtimes.namespaced.insert((ns, name), runtime);
        }
    }
    Ok(())
}

/// A TrainJob made a gang intent and rendered, as the controller does on every reconcile.
fn admit_and_render(job_text: &str, job_source: &str, runtimes: &Runtimes) -> Verdict {
    let mut job: TrainJob = match trainyard_topology::input_text::yaml(job_text, job_source) {
        Ok(j) => j,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    // As `render` does: a TrainJob without a queue is charged to `default`.
    job.metadata.labels.get_or_insert_with(Default::default).entry(QUEUE_LABEL.into()).or_insert("default".into());
    job.metadata.namespace.get_or_insert_with(|| "default".into());
    let policy = PolicyConfig::builtin("easy-backfill").expect("a built-in policy");
    let ctx = IntentContext::new(&policy, "nvidia.com/gpu");
    let (intent, runtime) = intent_of(&job, runtimes, &ctx);
    let intent = match intent {
        Ok(i) => i,
        Err(p) => return Verdict::Refused(format!("field {}: {} ({})", p.field, p.message, p.reason)),
    };
    let Some(runtime) = runtime else {
        return Verdict::Broken("an intent without the runtime it was made from".into());
    };
    let bridge_job = match job.to_bridge() {
        Ok(j) => j,
        Err(e) => return Verdict::Broken(format!("an admitted TrainJob does not convert: {e}")),
    };
    let opts = trainyard_bridges::RenderOptions::default();
    match workload_objects::render(&bridge_job, runtime, intent.kind, opts, None, None) {
        Ok(_) => Verdict::Accepted,
        Err(e) => Verdict::Refused(format!("field {}: {e}", e.field())),
    }
}

fn trainjob(bytes: &[u8], runtime_texts: &[&str]) -> Verdict {
    let job_text = match text(bytes, "fuzz-trainjob.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let mut runtimes = Runtimes::default();
    for r in runtime_texts {
        if let Err(e) = add_runtime(&mut runtimes, r, "a runtime fixture", &[]) {
            return Verdict::Broken(format!("a runtime fixture does not read: {e}"));
        }
    }
    admit_and_render(&job_text, "fuzz-trainjob.yaml", &runtimes)
}

fn runtime(bytes: &[u8]) -> Verdict {
    let runtime_text = match text(bytes, "fuzz-runtime.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let mut runtimes = Runtimes::default();
    let names: Vec<(String, String)> = PAIRS.iter().filter_map(|(job, _)| referenced_runtime(job)).collect();
    if let Err(e) = add_runtime(&mut runtimes, &runtime_text, "fuzz-runtime.yaml", &names) {
        return Verdict::Refused(e);
    }
    // Every TrainJob fixture against the mutated runtime (each was written for one runtime, so
    // one that renders is enough); a break counts at once.
    let mut refusal = None;
    for (job, _) in PAIRS {
        match admit_and_render(job, "a TrainJob fixture", &runtimes) {
            Verdict::Accepted => return Verdict::Accepted,
            Verdict::Refused(why) => {
                refusal.get_or_insert(why);
            }
            broken => return broken,
        }
    }
    Verdict::Refused(refusal.unwrap_or_default())
}

/// Node objects as the controller's caches hold them: each read into facts, then all of them
/// into the cluster tree.
fn node_objects(bytes: &[u8]) -> Verdict {
    let text = match text(bytes, "fuzz-nodes.json") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let value: serde_json::Value = match trainyard_topology::input_text::yaml(&text, "fuzz-nodes.json") {
        Ok(v) => v,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    let items = value.get("items").and_then(serde_json::Value::as_array).cloned().unwrap_or_default();
    // What the API server would not store as a Node never reaches the controller.
    let nodes: Vec<Node> = items.into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let spec = r#"{"levels": [{"nodeLabel": "cloud.google.com/gce-topology-block"},
        {"nodeLabel": "cloud.google.com/gce-topology-subblock"}]}"#;
    let topology: TopologySpec = serde_json::from_str(spec).expect("a Topology spec");
    let levels = Levels::of(&topology, &refs);
    for node in &nodes {
        if let NodeView::Bad(problem) = read_node(node, &levels) {
            let name = node.metadata.name.clone().unwrap_or_default();
            // A node left out must say which field; an empty one names nothing.
            if problem.field.trim().is_empty() {
                return Verdict::Broken(format!("node {name} left out without a field: {}", problem.message));
            }
        }
    }
    match cluster_from_nodes(&refs, &topology) {
        Ok(_) => Verdict::Accepted,
        Err(e) => Verdict::Refused(e),
    }
}

/// The namespace of a TrainJob fixture and the runtime it names.
fn referenced_runtime(job: &str) -> Option<(String, String)> {
    let value: serde_json::Value = trainyard_topology::input_text::yaml(job, "a TrainJob fixture").ok()?;
    let ns = value.pointer("/metadata/namespace").and_then(serde_json::Value::as_str).unwrap_or("default");
    Some((ns.to_string(), value.pointer("/spec/runtimeRef/name")?.as_str()?.to_string()))
}

/// Queue objects made the quota tree of each loop, over the built-in EASY policy, as the
/// controller does with the Queues it watches.
fn queue_objects(bytes: &[u8]) -> Verdict {
    let text = match text(bytes, "fuzz-queues.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let mut queues: Vec<Queue> = Vec::new();
    for (line, body) in trainyard_topology::input_text::yaml_documents(&text) {
        match trainyard_topology::input_text::yaml(&body, &format!("fuzz-queues.yaml (document from line {line})")) {
            Ok(q) => queues.push(q),
            Err(e) => return Verdict::Refused(e.to_string()),
        }
    }
    let refs: Vec<&Queue> = queues.iter().collect();
    for side in [Side::Kubernetes, Side::Slurm] {
        if let Err(e) = policy_with_queues("", "easy-backfill", &refs, side) {
            return Verdict::Refused(e);
        }
    }
    Verdict::Accepted
}

/// A Topology object read and used on the node fixture, as the controller builds its tree.
fn topology_object(bytes: &[u8]) -> Verdict {
    let text = match text(bytes, "fuzz-topology.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let topology: Topology = match trainyard_topology::input_text::yaml(&text, "fuzz-topology.yaml") {
        Ok(t) => t,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    let nodes = include_str!("../../../topology/tests/fixtures/k8s/gke-a3-mega.json");
    let list: serde_json::Value = serde_json::from_str(nodes).expect("the node fixture");
    let nodes: Vec<Node> =
        list["items"].as_array().into_iter().flatten().filter_map(|v| serde_json::from_value(v.clone()).ok()).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    let levels = Levels::of(&topology.spec, &refs);
    for node in &nodes {
        if let NodeView::Bad(problem) = read_node(node, &levels)
            && problem.field.trim().is_empty()
        {
            return Verdict::Broken(format!("a node left out without a field: {}", problem.message));
        }
    }
    match cluster_from_nodes(&refs, &topology.spec) {
        Ok(_) => Verdict::Accepted,
        Err(e) => Verdict::Refused(e),
    }
}
