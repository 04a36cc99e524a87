//! The policy file schema: queue trees, priority classes, fair sharing, preemption, starvation,
//! admission timeouts, and an error naming file, line, field and queue for each bad input.

use trainyard_policies::{
    AdmissionTimeoutConfig, FairSharingConfig, PolicyConfig, PreemptionConfig, PriorityClass, QueueConfig,
    QuotaAmounts, StarvationConfig, UndeclaredQueues,
};

fn parse(yaml: &str) -> PolicyConfig {
    PolicyConfig::from_yaml(yaml, "p.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn err(yaml: &str) -> String {
    PolicyConfig::from_yaml(yaml, "p.yaml").expect_err("must be rejected").to_string()
}

/// The error names the file, the line, the field and every given word (queue names).
fn assert_names(error: &str, line: u64, field: &str, words: &[&str]) {
    let prefix = format!("p.yaml: line {line}: field `{field}`: ");
    assert!(error.starts_with(&prefix), "expected `{prefix}...`, got: {error}");
    for w in words {
        assert!(error.contains(w), "`{w}` missing from: {error}");
    }
}

#[test]
fn every_example_policy_parses() {
    for (name, text) in [
        ("fifo.yaml", include_str!("../../examples/policies/fifo.yaml")),
        ("easy-backfill.yaml", include_str!("../../examples/policies/easy-backfill.yaml")),
        ("teams.yaml", include_str!("../../examples/policies/teams.yaml")),
        ("cohorts.yaml", include_str!("../../examples/policies/cohorts.yaml")),
    ] {
        PolicyConfig::from_yaml(text, name).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn the_cohorts_example_reads_as_written() {
    let p = PolicyConfig::from_yaml(include_str!("../../examples/policies/cohorts.yaml"), "cohorts.yaml").unwrap();
    assert_eq!(p.name, "cohorts");
    assert_eq!(p.queues.len(), 6);
    assert_eq!(
        p.queues[0],
        QueueConfig {
            name: "research".into(),
            parent: None,
            nominal: QuotaAmounts::UNNAMED,
            borrowing_limit: QuotaAmounts::gpus(64),
            lending_limit: QuotaAmounts::UNNAMED,
            weight: 1.0,
            nominal_domains: None,
            flavor: None,
        }
    );
    assert_eq!(
        p.queues[1],
        QueueConfig {
            name: "team-a".into(),
            parent: Some("research".into()),
            nominal: QuotaAmounts::gpus(192),
            borrowing_limit: QuotaAmounts::UNNAMED,
            lending_limit: QuotaAmounts::gpus(96),
            weight: 2.0,
            nominal_domains: None,
            flavor: None,
        }
    );
    assert_eq!(p.undeclared_queues, UndeclaredQueues::Reject);
    assert_eq!(p.priority_classes[2], PriorityClass { name: "high".into(), value: 100 });
    assert_eq!(p.priority_value(None), Some(50), "the class called `default`");
    assert_eq!(p.priority_value(Some("low")), Some(0));
    assert_eq!(p.priority_value(Some("urgent")), None);
    assert_eq!(p.fair_sharing, FairSharingConfig { enabled: true, half_life_s: Some(86_400) });
    assert_eq!(p.preemption, PreemptionConfig { within_queue: true, reclaim: true, checkpoint_interval_s: Some(3600) });
    assert_eq!(p.starvation, StarvationConfig { max_wait_s: Some(43_200) });
    assert_eq!(p.admission_timeout, Some(AdmissionTimeoutConfig { wait_s: 600, backoff_s: 60, max_backoff_s: 1800 }));
}

#[test]
fn the_old_flat_form_means_gpus_only_and_no_borrowing() {
    let p = parse("queues:\n  - {name: a, nominal_gpus: 8}\n");
    assert_eq!(p.queues, vec![QueueConfig::flat("a", 8)]);
    assert_eq!(p.queues[0].borrowing_limit, QuotaAmounts::gpus(0));
    // An explicit borrowing limit overrides the old default.
    let p = parse("queues:\n  - {name: a, nominal_gpus: 8, borrowing_limit: {gpus: 4}}\n");
    assert_eq!(p.queues[0].borrowing_limit, QuotaAmounts::gpus(4));
}

#[test]
fn resources_are_read_in_cores_and_gib_and_stored_in_engine_units() {
    let p = parse(
        "queues:\n  - name: a\n    nominal: {gpus: 64, cpus: 512, memory_gib: 4096}\n    lending_limit: {cpus: 2}\n",
    );
    let q = &p.queues[0];
    assert_eq!(q.nominal, QuotaAmounts { gpus: Some(64), cpu_milli: Some(512_000), memory_mib: Some(4_194_304) });
    assert_eq!(q.lending_limit, QuotaAmounts { gpus: None, cpu_milli: Some(2000), memory_mib: None });
    assert_eq!(q.borrowing_limit, QuotaAmounts::UNNAMED, "omitted: unlimited");
}

#[test]
fn a_parent_may_be_listed_after_its_children() {
    let p = parse(
        "queues:\n  - {name: a, parent: org, nominal: {gpus: 8}}\n  - {name: b, parent: org, nominal: {gpus: 8}}\n  - {name: org, lending_limit: {gpus: 16}}\n",
    );
    assert_eq!(p.queues[0].parent.as_deref(), Some("org"));
    // The inner queue's lending limit is measured against its subtree quota (8 + 8).
    assert_eq!(p.queues[2].lending_limit, QuotaAmounts::gpus(16));
}

#[test]
fn builtins_are_flat_unlimited_and_plain() {
    for name in ["fifo", "easy-backfill"] {
        let p = PolicyConfig::builtin(name).unwrap();
        assert!(p.queues.is_empty());
        assert_eq!(p.undeclared_queues, UndeclaredQueues::Unlimited);
        assert!(!p.fair_sharing.enabled && !p.preemption.within_queue && !p.preemption.reclaim);
        assert_eq!((p.starvation.max_wait_s, p.admission_timeout), (None, None));
        assert_eq!(p.priority_value(None), Some(0));
    }
}

#[test]
fn sections_have_their_defaults() {
    let p = parse("fair_sharing: {}\npreemption: {reclaim: true}\nadmission_timeout: {wait: 5m}\n");
    assert_eq!(p.fair_sharing, FairSharingConfig { enabled: true, half_life_s: None });
    assert_eq!(p.preemption, PreemptionConfig { within_queue: false, reclaim: true, checkpoint_interval_s: None });
    assert_eq!(p.admission_timeout, Some(AdmissionTimeoutConfig { wait_s: 300, backoff_s: 60, max_backoff_s: 1800 }));
    let p = parse("fair_sharing: {enabled: false, half_life: 1h}\n");
    assert!(!p.fair_sharing.enabled);
    let p = parse("priority_classes: [{name: low, value: -5}, {name: high, value: 9}]\ndefault_priority_class: low\n");
    assert_eq!(p.priority_value(None), Some(-5));
}

#[test]
fn duplicate_queue_names_are_rejected() {
    let e = err("queues:\n  - {name: a, nominal_gpus: 8}\n  - name: b\n  - {name: a, nominal: {gpus: 4}}\n");
    assert_eq!(e, "p.yaml: line 4: field `queues[2].name`: queue `a` is declared twice");
}

#[test]
fn an_unknown_parent_is_named() {
    let e = err("queues:\n  - name: research\n  - name: team-a\n    parent: resarch\n");
    assert_names(&e, 4, "queues[1].parent", &["`team-a`", "`resarch`", "not declared"]);
}

#[test]
fn a_cycle_of_parents_names_every_queue_on_it() {
    let e = err(
        "queues:\n  - {name: top}\n  - {name: a, parent: c}\n  - {name: b, parent: a}\n  - {name: c, parent: b}\n  - {name: d, parent: a}\n",
    );
    assert_names(&e, 3, "queues[1].parent", &["`a` -> `c` -> `b` -> `a`", "cycle"]);
    assert!(!e.contains("`d`") && !e.contains("`top`"), "{e}");
    let e = err("queues:\n  - {name: x}\n  - {name: self, parent: self}\n");
    assert_names(&e, 3, "queues[1].parent", &["`self` -> `self`"]);
}

#[test]
fn lending_more_than_the_nominal_is_rejected() {
    let e = err("queues:\n  - name: a\n    nominal: {gpus: 16}\n    lending_limit: {gpus: 17}\n");
    assert_names(&e, 4, "queues[0].lending_limit.gpus", &["`a`", "lends more than its nominal", "17", "16"]);
    // A resource the nominal does not name counts as a nominal of 0.
    let e = err("queues:\n  - {name: a, nominal_gpus: 8, lending_limit: {cpus: 1}}\n");
    assert_names(&e, 2, "queues[0].lending_limit.cpus", &["`a`", "lends more than its nominal"]);
    // An inner queue may lend up to its subtree quota, not more.
    let e = err("queues:\n  - {name: org, lending_limit: {gpus: 9}}\n  - {name: a, parent: org, nominal: {gpus: 8}}\n");
    assert_names(&e, 2, "queues[0].lending_limit.gpus", &["`org`", "lends more than its nominal", "children"]);
}

#[test]
fn weights_must_be_positive_and_finite() {
    for (w, shown) in [("0", "0"), ("-1", "-1"), (".inf", "inf"), (".nan", "NaN")] {
        let e = err(&format!("queues:\n  - name: a\n    nominal: {{gpus: 1}}\n    weight: {w}\n"));
        assert_names(&e, 4, "queues[0].weight", &["`a`", shown, "above 0"]);
    }
}

#[test]
fn the_old_and_new_nominal_cannot_be_mixed() {
    let e = err("queues:\n  - {name: a, nominal_gpus: 8, nominal: {gpus: 8}}\n");
    assert_names(&e, 2, "queues[0].nominal_gpus", &["`a`", "nominal"]);
}

#[test]
fn empty_names_and_unknown_fields_are_rejected() {
    let e = err("queues:\n  - {name: ' '}\n");
    assert_names(&e, 2, "queues[0].name", &["empty"]);
    let e = err("queues:\n  - name: a\n    nominal: {gpu: 8}\n");
    assert!(e.contains("line 3") && e.contains("gpu"), "{e}");
    let e = err("queues:\n  - name: a\n    lend: {gpus: 8}\n");
    assert!(e.contains("line 3") && e.contains("lend"), "{e}");
}

#[test]
fn priority_classes_are_checked() {
    let e = err("priority_classes:\n  - {name: low, value: 0}\n  - {name: low, value: 1}\n");
    assert_names(&e, 3, "priority_classes[1].name", &["`low`", "twice"]);
    let e = err("priority_classes:\n  - {name: '', value: 0}\n");
    assert_names(&e, 2, "priority_classes[0].name", &["empty"]);
    let e = err(
        "priority_classes:\n  - {name: low, value: 0}\n  - {name: high, value: 1}\ndefault_priority_class: urgent\n",
    );
    assert_names(&e, 4, "default_priority_class", &["`urgent`", "low, high"]);
    let e = err("default_priority_class: normal\n");
    assert_names(&e, 1, "default_priority_class", &["`normal`", "no class is declared"]);
}

#[test]
fn durations_must_be_positive() {
    let cases = [
        ("fair_sharing:\n  half_life: 0s\n", 2, "fair_sharing.half_life"),
        ("fair_sharing: {half_life: soon}\n", 1, "fair_sharing.half_life"),
        ("preemption:\n  checkpoint_interval: 0\n", 2, "preemption.checkpoint_interval"),
        ("starvation: {max_wait: 12x}\n", 1, "starvation.max_wait"),
        ("admission_timeout: {wait: 0m}\n", 1, "admission_timeout.wait"),
        ("admission_timeout:\n  wait: 1m\n  backoff: 0\n", 3, "admission_timeout.backoff"),
    ];
    for (yaml, line, field) in cases {
        assert_names(&err(yaml), line, field, &["positive duration"]);
    }
    let e = err("admission_timeout:\n  wait: 10m\n  backoff: 5m\n  max_backoff: 1m\n");
    assert_names(&e, 4, "admission_timeout.max_backoff", &["60s", "300s"]);
    let e = err("admission_timeout: {backoff: 1m}\n");
    assert!(e.contains("wait"), "{e}");
}

#[test]
fn quotas_in_topology_units_become_whole_domains_of_gpus() {
    use trainyard_topology::Cluster;
    let yaml = "queues:\n  - {name: a, nominal_domains: {rack: 2}}\n  - {name: b, nominal: {gpus: 8}}\n";
    let mut p = PolicyConfig::from_yaml(yaml, "units.yaml").unwrap();
    assert_eq!(p.queues[0].nominal_domains, Some(("rack".to_string(), 2)));
    // Racks of 2 x 8 GPUs and one of 1 x 8: a rack is guaranteed to be at least 8 GPUs.
    let cluster = Cluster::from_yaml(
        "name: t\nlevels: [rack, host]\nnodes:\n  - {name: h0, at: {rack: r0}, gpus: 8}\n  - {name: h1, at: {rack: r0}, gpus: 8}\n  - {name: h2, at: {rack: r1}, gpus: 8}\n  - {name: h3, at: {rack: r1}, gpus: 8}\n  - {name: h4, at: {rack: r2}, gpus: 8}\n",
        "t.yaml",
    )
    .unwrap();
    p.resolve_topology(cluster.topology()).unwrap();
    assert_eq!(p.queues[0].nominal.gpus, Some(16));
    let mut too_many =
        PolicyConfig::from_yaml("queues:\n  - {name: a, nominal_domains: {rack: 4}}\n", "u.yaml").unwrap();
    let err = too_many.resolve_topology(cluster.topology()).unwrap_err().to_string();
    assert!(
        err.contains("queues[0].nominal_domains") && err.contains("asks for 4 rack domains; the cluster has 3"),
        "{err}"
    );
    let mut unknown = PolicyConfig::from_yaml("queues:\n  - {name: a, nominal_domains: {row: 1}}\n", "u.yaml").unwrap();
    let err = unknown.resolve_topology(cluster.topology()).unwrap_err().to_string();
    assert!(err.contains("unknown topology level `row`"), "{err}");
    let twice =
        PolicyConfig::from_yaml("queues:\n  - {name: a, nominal_gpus: 8, nominal_domains: {rack: 1}}\n", "u.yaml");
    assert!(twice.unwrap_err().to_string().contains("line 2: field `queues[0].nominal_domains`"));
}
