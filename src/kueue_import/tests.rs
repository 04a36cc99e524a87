//! The importer on small hand-made objects: quotas over flavors, limits, rounding, cohorts,
//! what is noted and what is refused.

use serde_json::{Value, json};

use super::{ImportOptions, Imported, Sourced, import};

fn sourced(values: Vec<Value>) -> Vec<Sourced> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Sourced { origin: format!("in.yaml:{}", i * 10 + 1), value })
        .collect()
}

fn run(values: Vec<Value>) -> Imported {
    import(&sourced(values), &ImportOptions::default()).expect("imports")
}

fn cq(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})
}

fn flavor(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec})
}

/// One resource group of GPUs: `(flavor, nominal, borrowing limit)`.
fn gpu_groups(flavors: &[(&str, u64, Option<u64>)]) -> Value {
    let flavors: Vec<Value> = flavors
        .iter()
        .map(|(name, nominal, borrow)| {
            let mut r = json!({"name": "nvidia.com/gpu", "nominalQuota": nominal});
            if let Some(b) = borrow {
                r["borrowingLimit"] = json!(b);
            }
            json!({"name": name, "resources": [r]})
        })
        .collect();
    json!([{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}])
}

fn notes(imported: &Imported) -> Vec<String> {
    imported.notes.iter().map(|n| format!("{}: {}", n.object, n.message)).collect()
}

#[test]
fn gpu_quotas_add_up_over_flavors_and_a_flavor_without_a_limit_leaves_borrowing_unlimited() {
    let limited = run(vec![cq(
        "a",
        json!({"cohortName": "org", "resourceGroups": gpu_groups(&[("h100", 8, Some(2)), ("a100", 8, Some(4))])}),
    )]);
    let a = &limited.queues[1].spec;
    assert_eq!((a.nominal.gpus, a.borrowing_limit.as_ref().and_then(|b| b.gpus)), (Some(16), Some(6)));
    let unlimited = run(vec![cq(
        "a",
        json!({"cohortName": "org", "resourceGroups": gpu_groups(&[("h100", 8, Some(2)), ("a100", 8, None)])}),
    )]);
    assert_eq!(unlimited.queues[1].spec.borrowing_limit, None, "a100 may borrow without limit");
    assert!(notes(&unlimited).iter().any(|n| n.contains("GPUs of flavors h100, a100 are pooled")));
}

#[test]
fn a_cohort_becomes_the_parent_queue_and_a_cohort_object_brings_its_own_pool_and_parent() {
    let cohort = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "org"},
        "spec": {"parentName": "company", "resourceGroups": gpu_groups(&[("any", 4, None)]), "fairSharing": {"weight": "2"}}});
    let imported =
        run(vec![cq("a", json!({"cohortName": "org", "resourceGroups": gpu_groups(&[("x", 8, None)])})), cohort]);
    let names: Vec<(String, Option<String>)> =
        imported.queues.iter().map(|q| (q.metadata.name.clone().unwrap(), q.spec.parent.clone())).collect();
    assert_eq!(
        names,
        vec![("company".into(), None), ("org".into(), Some("company".into())), ("a".into(), Some("org".into()))],
        "parents before children"
    );
    assert_eq!((imported.queues[1].spec.nominal.gpus, imported.queues[1].spec.weight), (Some(4), Some(2.0)));
}

#[test]
fn fractional_cpus_and_memory_are_rounded_down_with_a_note_and_pods_are_noted() {
    let groups = json!([{"coveredResources": ["cpu", "memory", "pods"], "flavors": [{"name": "f", "resources": [
        {"name": "cpu", "nominalQuota": "2500m"}, {"name": "memory", "nominalQuota": "1536Mi"}, {"name": "pods", "nominalQuota": 5}]}]}]);
    let imported = run(vec![flavor("f", json!({})), cq("a", json!({"resourceGroups": groups}))]);
    let spec = &imported.queues[0].spec;
    assert_eq!((spec.nominal.cpus, spec.nominal.memory_gib, spec.nominal.gpus), (Some(2), Some(1), None));
    let notes = notes(&imported);
    assert!(notes.iter().any(|n| n.contains("2500 millicores is rounded down to 2 CPUs")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("1536 MiB is rounded down to 1 GiB")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("resource `pods`")), "{notes:?}");
}

#[test]
fn a_flavor_naming_one_gpu_model_gives_the_queue_its_flavor() {
    let imported = run(vec![
        flavor("h100", json!({"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}})),
        cq("a", json!({"resourceGroups": gpu_groups(&[("h100", 16, None)])})),
    ]);
    assert_eq!(imported.queues[0].spec.flavor.as_deref(), Some("NVIDIA-H100-80GB-HBM3"));
    assert!(imported.notes.is_empty(), "{:?}", notes(&imported));
}

#[test]
fn nothing_is_left_out_silently() {
    let imported = run(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "prov"}, "spec": {}}),
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000}),
        cq(
            "a",
            json!({"namespaceSelector": {"matchLabels": {"team": "a"}}, "stopPolicy": "Hold", "queueingStrategy": "StrictFIFO",
            "fairSharing": {"weight": 0}}),
        ),
    ]);
    let notes = notes(&imported);
    for needle in [
        "Namespace team-a: not a Kueue object",
        "AdmissionCheck prov: kind `AdmissionCheck` has no equivalent",
        "{name: high, value: 1000}",
        "namespaceSelector has no equivalent",
        "spec.stopPolicy has no equivalent",
        "queueingStrategy StrictFIFO",
        "weight 0 has no equivalent",
    ] {
        assert!(notes.iter().any(|n| n.contains(needle)), "no note has {needle:?}: {notes:?}");
    }
}

#[test]
fn bad_objects_are_refused_naming_the_file_the_object_and_the_field() {
    let groups = json!([{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "lots"}]}]}]);
    let err =
        import(&sourced(vec![cq("a", json!({"resourceGroups": groups}))]), &ImportOptions::default()).unwrap_err();
    assert_eq!((err.origin.as_str(), err.object.as_str()), ("in.yaml:1", "ClusterQueue a"));
    assert_eq!(err.field, "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota");
    assert!(err.message.contains("\"lots\""), "{err}");

    let cycle = |name: &str, parent: &str| json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": {"parentName": parent}});
    let err = import(&sourced(vec![cycle("x", "y"), cycle("y", "x")]), &ImportOptions::default()).unwrap_err();
    assert!(err.message.contains("cycle of cohort parents"), "{err}");

    let clash =
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "a"}, "spec": {}});
    let err = import(&sourced(vec![clash, cq("a", json!({}))]), &ImportOptions::default()).unwrap_err();
    assert!(err.message.contains("Cohort a at in.yaml:1 has this name too"), "{err}");

    let lending = json!([{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "f", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 4, "lendingLimit": 8}]}]}]);
    let err = import(
        &sourced(vec![cq("a", json!({"cohortName": "c", "resourceGroups": lending}))]),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert_eq!((err.object.as_str(), err.field.as_str()), ("ClusterQueue a", "lending_limit.gpus"), "{err}");
}

#[test]
fn the_output_reads_back_as_the_same_trainyard_objects() {
    let imported = run(vec![
        json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": "rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}),
        cq("a", json!({"cohort": "org", "resourceGroups": gpu_groups(&[("x", 8, Some(8))])})),
    ]);
    let text = imported.to_yaml().unwrap();
    let docs: Vec<&str> = text.split("\n---\n").skip(1).collect();
    let topology: crate::api::Topology = serde_saphyr::from_str(docs[0]).unwrap();
    assert_eq!(topology.spec.levels.len(), 2);
    let queues: Vec<crate::api::Queue> = docs[1..].iter().map(|d| serde_saphyr::from_str(d).unwrap()).collect();
    let specs = |qs: &[crate::api::Queue]| -> Vec<(Option<String>, crate::api::QueueSpec)> {
        qs.iter().map(|q| (q.metadata.name.clone(), q.spec.clone())).collect()
    };
    assert_eq!(specs(&queues), specs(&imported.queues));
}
