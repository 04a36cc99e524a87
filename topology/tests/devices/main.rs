//! DRA devices end to end on the fixtures of tests/fixtures/dra: pools, selectors, claims, and
//! per-host and per-gang allocation, checked by value.

use trainyard_topology::devices::allocate::ClaimResult;
use trainyard_topology::devices::cel::CelError;
use trainyard_topology::devices::objects::ClaimSpec;
use trainyard_topology::devices::{
    AllocationError, Claim, ClaimError, DeviceId, DeviceResult, DraObjects, InUse, PodAllocation, PodClaims, PoolView,
    SelectorOwner, Selectors, allocate_gang, allocate_pod, parse_objects, resolve_claim,
};
use trainyard_topology::eligibility::HostAttrs;

mod cluster;
mod prop;
mod sync;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dra");

fn load() -> DraObjects {
    let mut all = DraObjects::default();
    for file in ["slices-gpu.yaml", "slices-nic.yaml", "slices-partitionable.json", "classes.yaml", "claims.yaml"] {
        let text = std::fs::read_to_string(format!("{DIR}/{file}")).expect("fixture");
        all.extend(parse_objects(&text, file).expect("fixture parses"));
    }
    all
}

struct Fixture {
    objects: DraObjects,
    view: PoolView,
    selectors: Selectors,
}

impl Fixture {
    fn new() -> Fixture {
        let objects = load();
        let view = PoolView::build(&objects.slices);
        Fixture { objects, view, selectors: Selectors::new() }
    }

    /// A claim made from the template `template`, named `name`.
    fn claim(&mut self, template: &str, name: &str) -> Claim {
        let spec = &self.objects.claims.iter().find(|c| c.name == template).expect("template").spec;
        resolve_claim(name, spec, &self.objects.classes, &mut self.selectors).expect("claim resolves")
    }

    fn inline(&mut self, name: &str, yaml: &str) -> Result<Claim, ClaimError> {
        let spec: ClaimSpec = serde_saphyr::from_str(yaml).expect("inline claim spec");
        resolve_claim(name, &spec, &self.objects.classes, &mut self.selectors)
    }

    fn pod(&mut self, node: &str, claims: &[Claim], in_use: &InUse) -> Result<PodAllocation, AllocationError> {
        allocate_pod(&self.view, node, claims, in_use, &mut self.selectors)
    }

    /// Marks devices of `node` in use by name (`gpu.nvidia.com`'s `gpu-3`, `nic.example.com`'s `nic-1`).
    fn in_use(&self, node: &str, names: &[&str]) -> InUse {
        let mut in_use = InUse::default();
        for device in self.view.host(node).devices {
            if names.contains(&device.id.device.as_str()) {
                in_use.take(device);
            }
        }
        assert_eq!(in_use.devices.len(), names.len(), "every named device exists on {node}");
        in_use
    }
}

fn id(driver: &str, pool: &str, device: &str) -> DeviceId {
    DeviceId::new(driver, pool, device)
}

fn result(request: &str, driver: &str, pool: &str, device: &str) -> DeviceResult {
    DeviceResult { request: request.to_string(), device: id(driver, pool, device) }
}

fn gpus(request: &str, pool: &str, indices: &[u32]) -> Vec<DeviceResult> {
    indices.iter().map(|i| result(request, "gpu.nvidia.com", pool, &format!("gpu-{i}"))).collect()
}

#[test]
fn pools_keep_the_newest_generation_and_report_incomplete_ones() {
    let fixture = Fixture::new();
    let view = &fixture.view;
    let node_a = &view.pools[&("gpu.nvidia.com".to_string(), "node-a".to_string())];
    assert_eq!((node_a.generation, node_a.devices.len()), (2, 8));
    assert!(!node_a.devices.iter().any(|d| d.id.device == "gpu-99"));
    let gpu0 = &node_a.devices[0];
    assert_eq!(gpu0.id.to_string(), "gpu.nvidia.com/node-a/gpu-0");
    assert_eq!(gpu0.pcie_root(), Some("pci0000:15"));
    assert!(gpu0.attributes.contains_key("gpu.nvidia.com/productName"));
    assert!(gpu0.capacity.contains_key("gpu.nvidia.com/memory"));
    let roots: Vec<_> = node_a.devices.iter().map(|d| d.pcie_root().unwrap_or("")).collect();
    assert_eq!(
        roots,
        [
            "pci0000:15",
            "pci0000:15",
            "pci0000:37",
            "pci0000:37",
            "pci0000:97",
            "pci0000:97",
            "pci0000:b7",
            "pci0000:b7"
        ]
    );

    // node-e's NIC pool has one slice of two: reported, and its device never offered.
    assert_eq!(view.reports.len(), 1, "{:?}", view.reports);
    assert_eq!(view.reports[0].subject, "nic.example.com/node-e");
    assert!(view.reports[0].reason.contains("1 of 2 slices"), "{}", view.reports[0].reason);
    let node_e = view.host("node-e");
    assert_eq!(node_e.incomplete, ["nic.example.com/node-e"]);
    assert_eq!(node_e.devices.iter().map(|d| d.id.to_string()).collect::<Vec<_>>(), ["gpu.nvidia.com/node-e/gpu-0"]);

    // The partitionable GPU's counters come from a slice of their own.
    let node_d = &view.pools[&("gpu.nvidia.com".to_string(), "node-d".to_string())];
    assert_eq!(node_d.counters[&("gpu-0-counter-set".to_string(), "multiprocessors".to_string())], 132_000);
    assert_eq!(node_d.devices.len(), 10);
    assert_eq!(view.host("node-a").devices.len(), 16, "8 GPUs and 8 NICs");
}

#[test]
fn gpu_and_nic_pairs_share_a_pcie_root() {
    let mut fixture = Fixture::new();
    let claims = [fixture.claim("gpu-nic-pair", "pair-0"), fixture.claim("gpu-nic-pair", "pair-1")];
    let allocation = fixture.pod("node-a", &claims, &InUse::default()).expect("fits");
    let pair = |claim: &str, i: u32| ClaimResult {
        claim: claim.to_string(),
        results: vec![
            result("gpu", "gpu.nvidia.com", "node-a", &format!("gpu-{i}")),
            result("nic", "nic.example.com", "node-a", &format!("nic-{i}")),
        ],
    };
    // Both pairs on the first root: the pod spans one root.
    assert_eq!(
        allocation,
        PodAllocation { node: "node-a".to_string(), claims: vec![pair("pair-0", 0), pair("pair-1", 1)] }
    );

    // Root pci0000:15's GPUs taken, and nic-2 of pci0000:37: the first solution in id order
    // (gpu-3+nic-3, gpu-4+nic-4) spans two roots; pci0000:97 holds both pairs.
    let in_use = fixture.in_use("node-a", &["gpu-0", "gpu-1", "nic-2"]);
    let allocation = fixture.pod("node-a", &claims, &in_use).expect("fits");
    assert_eq!(allocation.claims, vec![pair("pair-0", 4), pair("pair-1", 5)]);
}

#[test]
fn distinct_attribute_spreads_over_roots() {
    let mut fixture = Fixture::new();
    let claims = [fixture.claim("gpus-spread", "spread")];
    let allocation = fixture.pod("node-a", &claims, &InUse::default()).expect("fits");
    assert_eq!(allocation.claims[0].results, gpus("gpus", "node-a", &[0, 2, 4, 6]));

    let in_use = fixture.in_use("node-a", &["gpu-0", "gpu-1"]);
    let error = fixture.pod("node-a", &claims, &in_use).unwrap_err();
    assert_eq!(
        error,
        AllocationError::Unsatisfiable {
            claim: "spread".into(),
            request: "gpus".into(),
            reason: "gpus: 6 free devices of class gpu.nvidia.com match, but no 4 of them meet the constraints and \
                     shared counters together with the pod's other requests"
                .into(),
        }
    );
}

#[test]
fn first_available_falls_back_to_the_second_class() {
    let mut fixture = Fixture::new();
    let claims = [fixture.claim("h200-or-h100", "gpus")];
    let on_h200 = fixture.pod("node-c", &claims, &InUse::default()).expect("fits");
    assert_eq!(on_h200.claims[0].results, gpus("gpus/h200", "node-c", &[0, 1, 2, 3, 4, 5, 6, 7]));
    let on_h100 = fixture.pod("node-a", &claims, &InUse::default()).expect("fits");
    assert_eq!(on_h100.claims[0].results, gpus("gpus/h100", "node-a", &[0, 1, 2, 3, 4, 5, 6, 7]));
    // One H200 taken: neither alternative has 8.
    let in_use = fixture.in_use("node-c", &["gpu-5"]);
    let error = fixture.pod("node-c", &claims, &in_use).unwrap_err();
    let AllocationError::Unsatisfiable { reason, .. } = error else { panic!("{error:?}") };
    assert_eq!(
        reason,
        "gpus/h200: needs 8 devices of class h200.gpu.example.com, 8 match and 7 of those are free; \
         gpus/h100: needs 8 devices of class gpu.nvidia.com, 0 match and 0 of those are free"
    );
}

#[test]
fn all_takes_every_nic_and_refuses_busy_or_incomplete_pools() {
    let mut fixture = Fixture::new();
    let claims = [fixture.claim("all-nics", "nics")];
    let allocation = fixture.pod("node-a", &claims, &InUse::default()).expect("fits");
    let expected: Vec<_> = (0..8).map(|i| result("nics", "nic.example.com", "node-a", &format!("nic-{i}"))).collect();
    assert_eq!(allocation.claims[0].results, expected);

    let in_use = fixture.in_use("node-a", &["nic-3"]);
    let error = fixture.pod("node-a", &claims, &in_use).unwrap_err();
    let all_busy = "nics: All needs every matching device and nic.example.com/node-a/nic-3 is in use";
    assert_eq!(
        error,
        AllocationError::Unsatisfiable { claim: "nics".into(), request: "nics".into(), reason: all_busy.into() }
    );
    let error = fixture.pod("node-e", &claims, &InUse::default()).unwrap_err();
    let incomplete = "nics: All needs every pool complete, and pool nic.example.com/node-e is incomplete";
    assert_eq!(
        error,
        AllocationError::Unsatisfiable { claim: "nics".into(), request: "nics".into(), reason: incomplete.into() }
    );
}

#[test]
fn shared_counters_limit_partitions() {
    let mut fixture = Fixture::new();
    let two = [fixture.claim("two-mig-slices", "mig")];
    let mig = |names: &[&str]| -> Vec<DeviceResult> {
        names.iter().map(|n| result("slices", "gpu.nvidia.com", "node-d", n)).collect()
    };
    let allocation = fixture.pod("node-d", &two, &InUse::default()).expect("fits");
    assert_eq!(allocation.claims[0].results, mig(&["gpu-0-mig-1g.10gb-19-0", "gpu-0-mig-1g.10gb-19-1"]));

    // A 3g.40gb on memory slices 0-3 leaves the 1g slices that start at 4 and later.
    let in_use = fixture.in_use("node-d", &["gpu-0-mig-3g.40gb-9-0"]);
    let allocation = fixture.pod("node-d", &two, &in_use).expect("fits");
    assert_eq!(allocation.claims[0].results, mig(&["gpu-0-mig-1g.10gb-19-4", "gpu-0-mig-1g.10gb-19-5"]));

    // The full GPU consumes every counter, so once any partition is taken it no longer fits; with
    // both 3g.40gb partitions taken every memory slice is gone and no further partition fits.
    let whole =
        fixture.inline("whole", "devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}");
    let whole = [whole.expect("claim")];
    let error = fixture.pod("node-d", &whole, &in_use).unwrap_err();
    assert!(matches!(&error, AllocationError::Unsatisfiable { request, .. } if request == "gpu"), "{error:?}");
    assert_eq!(fixture.pod("node-d", &whole, &InUse::default()).expect("fits").claims[0].results.len(), 1);
    let both = fixture.in_use("node-d", &["gpu-0-mig-3g.40gb-9-0", "gpu-0-mig-3g.40gb-9-4"]);
    let one = [fixture
        .inline("one", "devices: {requests: [{name: s, exactly: {deviceClassName: mig.nvidia.com}}]}")
        .expect("claim")];
    assert!(fixture.pod("node-d", &one, &both).is_err(), "every memory slice is taken");
}

#[test]
fn taints_block_unless_tolerated() {
    let mut fixture = Fixture::new();
    let others: Vec<String> = (0..7).map(|i| format!("gpu-{i}")).collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    let in_use = fixture.in_use("node-b", &others);
    let plain = [fixture
        .inline("plain", "devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}")
        .expect("claim")];
    let error = fixture.pod("node-b", &plain, &in_use).unwrap_err();
    let reason = "gpu: needs 1 device of class gpu.nvidia.com, 7 match and 0 of those are free";
    assert_eq!(
        error,
        AllocationError::Unsatisfiable { claim: "plain".into(), request: "gpu".into(), reason: reason.into() }
    );
    let burn_in = [fixture.claim("burn-in", "burn-in")];
    let allocation = fixture.pod("node-b", &burn_in, &in_use).expect("tolerated");
    assert_eq!(allocation.claims[0].results, gpus("gpu", "node-b", &[7]));
    // Free devices first: lowest id.
    let allocation = fixture.pod("node-b", &burn_in, &InUse::default()).expect("fits");
    assert_eq!(allocation.claims[0].results, gpus("gpu", "node-b", &[0]));
}

#[test]
fn a_gang_gets_all_its_devices_or_none() {
    let mut fixture = Fixture::new();
    let eight = fixture.claim("trainer-8gpu", "gpus");
    let pods = |nodes: &[&str]| -> Vec<PodClaims> {
        nodes
            .iter()
            .enumerate()
            .map(|(i, node)| PodClaims {
                pod: format!("worker-{i}"),
                node: node.to_string(),
                claims: vec![eight.clone()],
            })
            .collect()
    };
    let mut in_use = fixture.in_use("node-a", &["nic-0"]);
    let before = in_use.clone();
    // node-b has a tainted GPU, so worker-1 cannot get 8: nothing is given to worker-0 either.
    let error =
        allocate_gang(&fixture.view, &pods(&["node-a", "node-b"]), &mut in_use, &mut fixture.selectors).unwrap_err();
    assert_eq!((error.pod.as_str(), error.node.as_str()), ("worker-1", "node-b"));
    assert!(matches!(&*error.error, AllocationError::Unsatisfiable { request, .. } if request == "gpus"));
    assert_eq!(in_use, before);

    let allocations =
        allocate_gang(&fixture.view, &pods(&["node-a", "node-c"]), &mut in_use, &mut fixture.selectors).expect("fits");
    assert_eq!(allocations.len(), 2);
    assert_eq!(allocations[1].claims[0].results, gpus("gpus", "node-c", &[0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(in_use.devices.len(), 17);
    // Earlier pods' devices count as in use for later ones (and for later gangs).
    let error = allocate_gang(&fixture.view, &pods(&["node-c"]), &mut in_use, &mut fixture.selectors).unwrap_err();
    assert_eq!(error.pod, "worker-0");
}

#[test]
fn gang_pods_on_one_node_share_its_pairs() {
    let mut fixture = Fixture::new();
    let pairs: Vec<Claim> = (0..4).map(|i| fixture.claim("gpu-nic-pair", &format!("pair-{i}"))).collect();
    let pods: Vec<PodClaims> = (0..3)
        .map(|i| PodClaims { pod: format!("worker-{i}"), node: "node-a".into(), claims: pairs.clone() })
        .collect();
    let mut in_use = InUse::default();
    let error = allocate_gang(&fixture.view, &pods, &mut in_use, &mut fixture.selectors).unwrap_err();
    assert_eq!(error.pod, "worker-2");
    assert!(in_use.devices.is_empty());
    let allocations = allocate_gang(&fixture.view, &pods[..2], &mut in_use, &mut fixture.selectors).expect("fits");
    // Each pod on two whole roots.
    let gpus_of =
        |a: &PodAllocation| -> Vec<String> { a.claims.iter().map(|c| c.results[0].device.device.clone()).collect() };
    assert_eq!(gpus_of(&allocations[0]), ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]);
    assert_eq!(gpus_of(&allocations[1]), ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]);
    assert_eq!(in_use.devices.len(), 16);
}

#[test]
fn selector_errors_name_class_request_and_expression() {
    let mut fixture = Fixture::new();
    let mut classes = fixture.objects.classes.clone();
    classes.push(trainyard_topology::devices::objects::DeviceClass {
        name: "broken.example.com".into(),
        selectors: vec!["device.driver == ".into()],
        extended_resource_name: None,
    });
    let spec: ClaimSpec =
        serde_saphyr::from_str("devices: {requests: [{name: x, exactly: {deviceClassName: broken.example.com}}]}")
            .expect("spec");
    let error = resolve_claim("c", &spec, &classes, &mut fixture.selectors).unwrap_err();
    let ClaimError::Cel(CelError::Compile { owner, expression, .. }) = &error else { panic!("{error:?}") };
    assert_eq!((owner, expression.as_str()), (&SelectorOwner::Class("broken.example.com".into()), "device.driver == "));
    let text = error.to_string();
    assert!(
        text.starts_with("DeviceClass broken.example.com: CEL expression \"device.driver == \" does not compile"),
        "{text}"
    );

    let missing = fixture.inline("c", "devices: {requests: [{name: x, exactly: {deviceClassName: tpu.example.com}}]}");
    assert_eq!(missing.unwrap_err().to_string(), "claim c request x: DeviceClass tpu.example.com not found");

    let long = format!("device.driver == '{}'", "x".repeat(10 * 1024));
    let yaml = format!(
        "devices: {{requests: [{{name: x, exactly: {{deviceClassName: gpu.nvidia.com, selectors: [{{cel: {{expression: \"{long}\"}}}}]}}}}]}}"
    );
    let error = fixture.inline("c", &yaml).unwrap_err();
    let owner = SelectorOwner::Request { claim: "c".into(), request: "x".into() };
    assert_eq!(error, ClaimError::Cel(CelError::TooLong { owner: owner.clone(), bytes: long.len() }));

    // Four nested loops over 40-element lists: 40^4 iterations, over the 1,000,000 budget.
    let list = format!("[{}]", (0..40).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
    let costly = format!("{list}.all(a, {list}.all(b, {list}.all(c, {list}.all(d, a + b + c + d >= 0))))");
    let yaml = format!(
        "devices: {{requests: [{{name: x, exactly: {{deviceClassName: gpu.nvidia.com, selectors: [{{cel: {{expression: \"{costly}\"}}}}]}}}}]}}"
    );
    let error = fixture.inline("c", &yaml).unwrap_err();
    assert!(matches!(&error, ClaimError::Cel(CelError::TooCostly { cost, .. }) if *cost > 1_000_000), "{error:?}");
    // Three levels fit.
    let cheap = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
    let yaml = format!(
        "devices: {{requests: [{{name: x, exactly: {{deviceClassName: gpu.nvidia.com, selectors: [{{cel: {{expression: \"{cheap}\"}}}}]}}}}]}}"
    );
    assert!(fixture.inline("c", &yaml).is_ok());
}

#[test]
fn an_evaluation_error_fails_the_claim() {
    let mut fixture = Fixture::new();
    let yaml = "devices: {requests: [{name: x, exactly: {deviceClassName: gpu.nvidia.com, selectors: \
                [{cel: {expression: \"device.attributes['gpu.nvidia.com'].noSuchField == 1\"}}]}}]}";
    let claims = [fixture.inline("c", yaml).expect("compiles")];
    let error = fixture.pod("node-a", &claims, &InUse::default()).unwrap_err();
    let AllocationError::Cel { claim, request, error } = error else { panic!("{error:?}") };
    assert_eq!((claim.as_str(), request.as_str()), ("c", "x"));
    let CelError::Eval { device, .. } = *error else { panic!() };
    assert_eq!(device, "gpu.nvidia.com/node-a/gpu-0");

    // An unknown domain is an empty map, not an error; Kubernetes functions work on capacities.
    let yaml = "devices: {requests: [{name: x, exactly: {deviceClassName: gpu.nvidia.com, selectors: [\
                {cel: {expression: \"!('x' in device.attributes['other.example.com'])\"}},\
                {cel: {expression: \"device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('140Gi'))\"}},\
                {cel: {expression: \"device.attributes['gpu.nvidia.com'].driverVersion.major() == 570\"}}]}}]}";
    let claims = [fixture.inline("c", yaml).expect("compiles")];
    assert!(fixture.pod("node-a", &claims, &InUse::default()).is_err(), "H100s have 80Gi");
    assert_eq!(fixture.pod("node-c", &claims, &InUse::default()).expect("H200s").claims[0].results.len(), 1);
}

#[test]
fn objects_name_their_errors() {
    let text = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: x\n        exactly: {count: 2}\n";
    let error = parse_objects(text, "claims.yaml").unwrap_err().to_string();
    assert!(
        error.starts_with("claims.yaml: field `ResourceClaimTemplate/t: spec.spec.devices.requests[0]`"),
        "{error}"
    );
    assert!(error.contains("deviceClassName"), "{error}");
    let old = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceSlice\nmetadata: {name: s}\nspec: {}\n";
    assert_eq!(
        parse_objects(old, "old.yaml").unwrap_err().to_string(),
        "old.yaml: field `ResourceSlice/s: apiVersion`: resource.k8s.io/v1beta1 has another shape; read the objects \
         through resource.k8s.io/v1"
    );
    let error = parse_objects("kind: Pod\nmetadata: {name: p}\n", "pods.yaml").unwrap_err().to_string();
    assert!(error.contains("Pod/p: kind"), "{error}");
    let too_many = "devices: {requests: [{name: x, exactly: {deviceClassName: gpu.nvidia.com, count: 33}}]}";
    let mut fixture = Fixture::new();
    assert_eq!(
        fixture.inline("big", too_many).unwrap_err(),
        ClaimError::TooManyDevices { claim: "big".into(), devices: 33 }
    );
}

#[test]
fn node_reach_is_read_or_reported() {
    let text = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: fabric}
spec:
  driver: fabric.example.com
  allNodes: true
  pool: {name: fabric, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: link-0, attributes: {type: {string: link}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: rack-3}
spec:
  driver: fabric.example.com
  nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: rack, operator: In, values: ["3"]}]}]}
  pool: {name: rack-3, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: switch-0}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: rack-9}
spec:
  driver: fabric.example.com
  nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: rack, operator: Near, values: ["9"]}]}]}
  pool: {name: rack-9, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: switch-0}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: rack-7}
spec:
  driver: fabric.example.com
  nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [node-q]}]}]}
  pool: {name: rack-7, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: switch-0}
"#;
    let objects = parse_objects(text, "fabric.yaml").expect("parses");
    let mut view = PoolView::build(&objects.slices);
    let node = |name: &str, rack: &str| HostAttrs {
        node_name: name.into(),
        labels: [("rack".to_string(), rack.to_string())].into(),
        taints: Vec::new(),
    };
    let unreached = view.select_nodes(&[node("node-a", "3"), node("node-b", "3"), node("node-z", "1")]);
    let ids = |node: &str| -> Vec<String> { view.host(node).devices.iter().map(|d| d.id.to_string()).collect() };
    // allNodes reaches every node; the rack-3 pool the nodes its selector matches, by labels.
    assert_eq!(ids("node-a"), ["fabric.example.com/fabric/link-0", "fabric.example.com/rack-3/switch-0"]);
    assert_eq!(ids("node-b"), ids("node-a"));
    assert_eq!(ids("node-z"), ["fabric.example.com/fabric/link-0"]);
    let reach = view.reach();
    assert_eq!(reach.selected.len(), 2);
    assert_eq!(reach.by_node.keys().collect::<Vec<_>>(), ["node-a", "node-b"]);
    // A selector that does not read is reported with its slice; one that matches no node too.
    assert_eq!(view.reports.len(), 1);
    assert_eq!(view.reports[0].subject, "fabric.example.com/rack-9");
    assert_eq!(
        view.reports[0].reason,
        "slice rack-9: nodeSelector: nodeSelectorTerms[0].matchExpressions[0]: unknown operator \"Near\"; its devices are left out"
    );
    assert_eq!(unreached.len(), 1);
    assert_eq!(unreached[0].subject, "fabric.example.com/rack-7");
    assert_eq!(unreached[0].reason, "its nodeSelector matches no node of the cluster");
}

/// 60 devices with 19 values of one attribute, 20 of them asked with distinct values: no
/// solution, and far too many combinations to try them all. The budget ends the search, the
/// same way every time.
#[test]
fn the_search_budget_ends_hopeless_searches() {
    let devices: Vec<String> =
        (0..60).map(|i| format!("  - {{name: d-{i}, attributes: {{lane: {{int: {}}}}}}}", i % 19)).collect();
    let text = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: s}}\nspec:\n  driver: lanes.example.com\n  \
         nodeName: host-1\n  pool: {{name: host-1, generation: 1, resourceSliceCount: 1}}\n  devices:\n{}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: lanes}}\nspec:\n  selectors:\n  \
         - cel: {{expression: \"device.driver == 'lanes.example.com'\"}}\n",
        devices.join("\n")
    );
    let objects = parse_objects(&text, "lanes.yaml").expect("parses");
    let view = PoolView::build(&objects.slices);
    let mut selectors = Selectors::new();
    let spec: ClaimSpec = serde_saphyr::from_str(
        "devices: {requests: [{name: x, exactly: {deviceClassName: lanes, count: 20}}], \
         constraints: [{distinctAttribute: lanes.example.com/lane}]}",
    )
    .expect("spec");
    let claim = resolve_claim("c", &spec, &objects.classes, &mut selectors).expect("claim");
    let started = std::time::Instant::now();
    let error =
        allocate_pod(&view, "host-1", std::slice::from_ref(&claim), &InUse::default(), &mut selectors).unwrap_err();
    assert_eq!(
        error,
        AllocationError::BudgetExhausted {
            claim: "c".into(),
            request: "x".into(),
            budget: trainyard_topology::devices::SEARCH_BUDGET
        }
    );
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    // 19 distinct lanes are there for the asking.
    let spec: ClaimSpec = serde_saphyr::from_str(
        "devices: {requests: [{name: x, exactly: {deviceClassName: lanes, count: 19}}], \
         constraints: [{distinctAttribute: lanes.example.com/lane}]}",
    )
    .expect("spec");
    let claim = resolve_claim("c", &spec, &objects.classes, &mut selectors).expect("claim");
    let allocation = allocate_pod(&view, "host-1", &[claim], &InUse::default(), &mut selectors).expect("fits");
    let names: Vec<String> = allocation.claims[0].results.iter().map(|r| r.device.device.clone()).collect();
    let expected: Vec<String> = (0..19).map(|i| format!("d-{i}")).collect();
    assert_eq!(names, expected);
}

#[test]
fn invalid_pools_and_unknown_counters_are_reported() {
    let text = r#"
kind: ResourceSlice
metadata: {name: twice-0}
spec:
  driver: gpu.nvidia.com
  nodeName: node-x
  pool: {name: node-x, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu-0}]
---
kind: ResourceSlice
metadata: {name: twice-1}
spec:
  driver: gpu.nvidia.com
  nodeName: node-x
  pool: {name: node-x, generation: 1, resourceSliceCount: 2}
  devices: [{name: gpu-0}]
---
kind: ResourceSlice
metadata: {name: mig}
spec:
  driver: gpu.nvidia.com
  nodeName: node-y
  pool: {name: node-y, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0-mig-0
    consumesCounters: [{counterSet: gpu-0-counter-set, counters: {memory: {value: 10Gi}}}]
"#;
    let view = PoolView::build(&parse_objects(text, "bad.yaml").expect("parses").slices);
    let reports: Vec<(String, String)> = view.reports.iter().map(|r| (r.subject.clone(), r.reason.clone())).collect();
    assert_eq!(
        reports,
        [
            ("gpu.nvidia.com/node-x".into(), "invalid: device gpu-0 is listed twice; its devices are not used".into()),
            (
                "gpu.nvidia.com/node-y/gpu-0-mig-0".into(),
                "consumes counter gpu-0-counter-set/memory, which the pool does not publish; never allocatable".into()
            ),
        ]
    );
    assert_eq!(view.host("node-x").incomplete, ["gpu.nvidia.com/node-x"]);
    assert!(view.host("node-x").devices.is_empty());
}

#[test]
fn a_request_prefers_one_pcie_root_over_the_lowest_ids() {
    let mut fixture = Fixture::new();
    let two = [fixture
        .inline("two", "devices: {requests: [{name: gpus, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}]}")
        .expect("claim")];
    // gpu-0 taken: gpu-1 + gpu-2 would be the lowest ids (upstream's first fit) but span two roots.
    let in_use = fixture.in_use("node-a", &["gpu-0"]);
    let allocation = fixture.pod("node-a", &two, &in_use).expect("fits");
    assert_eq!(allocation.claims[0].results, gpus("gpus", "node-a", &[2, 3]));
    // Every root half taken: no single root has two, so the lowest ids win.
    let in_use = fixture.in_use("node-a", &["gpu-0", "gpu-2", "gpu-4", "gpu-6"]);
    let allocation = fixture.pod("node-a", &two, &in_use).expect("fits");
    assert_eq!(allocation.claims[0].results, gpus("gpus", "node-a", &[1, 3]));
}

#[test]
fn claims_and_capacity_requests() {
    let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "big-memory", "namespace": "ml"},
       "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
         "capacity": {"requests": {"memory": "100Gi"}}}}]}},
       "status": {"allocation": {"devices": {"results": []}}}}]}"#;
    let objects = parse_objects(text, "claim.json").expect("parses");
    assert_eq!((objects.claims[0].name.as_str(), objects.claims[0].namespace.as_str()), ("big-memory", "ml"));
    let mut fixture = Fixture::new();
    let claim = resolve_claim("big-memory", &objects.claims[0].spec, &fixture.objects.classes, &mut fixture.selectors)
        .expect("claim");
    // Only H200s (143771Mi) offer 100Gi.
    assert!(fixture.pod("node-a", std::slice::from_ref(&claim), &InUse::default()).is_err());
    let allocation = fixture.pod("node-c", &[claim], &InUse::default()).expect("fits");
    assert_eq!(allocation.claims[0].results, gpus("gpu", "node-c", &[0]));
    // Selectors are compiled once per text: the fixture's classes share one expression.
    let before = fixture.selectors.evaluations();
    let again = fixture.claim("trainer-8gpu", "again");
    let _ = fixture.pod("node-c", &[again], &InUse::default()).expect("fits");
    assert_eq!(fixture.selectors.evaluations(), before, "results cached per (expression, device)");
}
