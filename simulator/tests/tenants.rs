//! The shipped tenant quota files: regenerated from `data/tenants/` and compared byte for byte,
//! checked against the policy schema and the tenants of the trace excerpts, and replayed with
//! the Philly excerpt to check the report's Tenants section.
//!
//! After changing the generator or its inputs, rewrite the shipped files with
//! `TRAINYARD_BLESS=1 cargo test -p trainyard-simulator --test tenants`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use trainyard_policies::{BackfillMode, PolicyConfig, UndeclaredQueues};
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::tenants::{VENUS_SNAPSHOT_DATE, philly_policy_yaml, venus_policy_yaml};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{Fate, ReplayOptions, TraceJob, replay};
use trainyard_topology::Cluster;

const PHILLY_CSV: &str = include_str!("../../data/tenants/philly_vc.csv");
const VENUS_CSV: &str = include_str!("../../data/tenants/venus_cluster_gpu_number.csv");
const PHILLY_YAML: &str = include_str!("../../examples/policies/philly-vcs.yaml");
const VENUS_YAML: &str = include_str!("../../examples/policies/helios-venus-vcs.yaml");

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// Fails when `shipped` is not what the generator makes now, or rewrites it when blessing.
fn check_fresh(path: &str, shipped: &str, generated: &str) {
    if shipped == generated {
        return;
    }
    if std::env::var_os("TRAINYARD_BLESS").is_some() {
        std::fs::write(repo_file(path), generated).unwrap();
        return;
    }
    panic!(
        "{path} is stale; regenerate it with `TRAINYARD_BLESS=1 cargo test -p trainyard-simulator --test tenants`.\n\
         generated:\n{generated}"
    );
}

fn philly_policy() -> PolicyConfig {
    PolicyConfig::from_yaml(PHILLY_YAML, "examples/policies/philly-vcs.yaml").unwrap()
}

fn queue_names(policy: &PolicyConfig) -> BTreeSet<&str> {
    policy.queues.iter().map(|q| q.name.as_str()).collect()
}

fn excerpt(path: &str, format: TraceFormat) -> Vec<TraceJob> {
    let file = std::fs::File::open(repo_file(path)).unwrap();
    read_trace(format, file, path, &ReadOptions::default()).unwrap().jobs
}

#[test]
fn shipped_policy_files_are_what_the_generator_makes() {
    let philly = philly_policy_yaml(PHILLY_CSV, "data/tenants/philly_vc.csv").unwrap();
    check_fresh("examples/policies/philly-vcs.yaml", PHILLY_YAML, &philly);
    let venus = venus_policy_yaml(VENUS_CSV, "data/tenants/venus_cluster_gpu_number.csv", VENUS_SNAPSHOT_DATE).unwrap();
    check_fresh("examples/policies/helios-venus-vcs.yaml", VENUS_YAML, &venus);
}

#[test]
fn policy_files_parse_with_one_queue_per_vc() {
    let philly = philly_policy();
    assert_eq!(philly.name, "philly-vcs");
    assert_eq!((philly.backfill, philly.undeclared_queues), (BackfillMode::Easy, UndeclaredQueues::Unlimited));
    // 11 VCs of 8 to 64 nodes: 352 nodes of 8 GPUs.
    assert_eq!(philly.queues.len(), 11);
    assert_eq!(philly.queues.iter().map(|q| q.nominal.gpus.unwrap_or(0)).sum::<u64>(), 2816);
    assert_eq!((philly.queues[0].name.as_str(), philly.queues[0].nominal.gpus.unwrap_or(0)), ("6214e9", 512));
    // Hex names that read as numbers when bare stay strings.
    assert!(philly.queues.iter().any(|q| q.name == "0e4a51" && q.nominal.gpus.unwrap_or(0) == 256));

    let venus = PolicyConfig::from_yaml(VENUS_YAML, "examples/policies/helios-venus-vcs.yaml").unwrap();
    assert_eq!(venus.name, "helios-venus-vcs");
    // Lucid's Venus configuration (vc_config.csv, nodes of 8 GPUs) is the same 15 VCs.
    let lucid = [
        ("vcEwI", 9),
        ("vcWoR", 5),
        ("vcHvQ", 8),
        ("vcvGl", 20),
        ("vc8Gr", 6),
        ("vcKeu", 12),
        ("vcKrE", 4),
        ("vcYVn", 11),
        ("vchbv", 4),
        ("vcLTP", 8),
        ("vchA3", 3),
        ("vcJsw", 32),
        ("vcefl", 10),
        ("vcvlY", 2),
        ("vcgkz", 1),
    ];
    let got: Vec<(&str, u64)> = venus.queues.iter().map(|q| (q.name.as_str(), q.nominal.gpus.unwrap_or(0))).collect();
    let want: Vec<(&str, u64)> = lucid.iter().map(|&(n, nodes)| (n, nodes * 8)).collect();
    assert_eq!(got, want);
    assert_eq!(got.iter().map(|(_, g)| g).sum::<u64>(), 1080);
}

#[test]
fn vc_names_against_the_tenants_of_the_excerpts() {
    let philly = philly_policy();
    let quotas = queue_names(&philly);
    let jobs = excerpt("data/traces/philly-excerpt.csv", TraceFormat::Philly);
    let tenants: BTreeSet<&str> = jobs.iter().map(|j| j.tenant.as_str()).collect();
    // Every VC with a quota has jobs in the excerpt; one VC of the excerpt has no quota.
    assert_eq!(quotas.difference(&tenants).count(), 0);
    assert_eq!(tenants.difference(&quotas).copied().collect::<Vec<_>>(), ["23dbec"]);
    let without_quota = jobs.iter().filter(|j| !quotas.contains(j.tenant.as_str())).count();
    assert_eq!(without_quota, 2);

    // The Helios excerpt names users, not VCs: none of its jobs meets a Venus quota.
    let venus = PolicyConfig::from_yaml(VENUS_YAML, "helios-venus-vcs.yaml").unwrap();
    let venus_vcs = queue_names(&venus);
    let helios = excerpt("data/traces/helios-excerpt.csv", TraceFormat::DirLab);
    assert_eq!(helios.len(), 15_000);
    assert_eq!(helios.iter().filter(|j| !venus_vcs.contains(j.tenant.as_str())).count(), 15_000);
    assert!(helios.iter().all(|j| j.tenant.starts_with("user-")));
}

#[test]
fn philly_excerpt_with_vc_quotas_reports_tenant_fairness() {
    let jobs = excerpt("data/traces/philly-excerpt.csv", TraceFormat::Philly);
    let text = std::fs::read_to_string(repo_file("examples/clusters/philly-2490.yaml")).unwrap();
    let cluster = Cluster::from_yaml(&text, "philly-2490").unwrap();
    let gpus = cluster.total_capacity().gpus;
    assert_eq!(gpus, 2490);
    for (label, backfill) in [("fifo", BackfillMode::None), ("easy-backfill", BackfillMode::Easy)] {
        let policy = PolicyConfig { backfill, ..philly_policy() };
        let result = replay(cluster.clone(), policy, &jobs, ReplayOptions::default(), &mut |_| {}).unwrap();
        let context = ReportContext { policy: label.into(), cluster_gpus: gpus, ..ReportContext::default() };
        let report = Report::new(context, &result.outcomes, gpus);
        let tenants = report.tenants.as_ref().expect("the Philly excerpt has 12 VCs");
        assert_eq!(tenants.tenants, 12, "{label}");
        assert_eq!(tenants.by_tenant.iter().map(|t| t.jobs).sum::<u64>(), jobs.len() as u64, "{label}");
        assert_eq!(tenants.by_tenant.iter().map(|t| t.finished).sum::<u64>(), report.summary.finished, "{label}");
        for index in [tenants.jain_service, tenants.jain_slowdown] {
            let index = index.expect("every VC finished jobs");
            assert!(index > 0.0 && index <= 1.0, "{label}: Jain {index}");
        }
        assert!(tenants.max_rho.unwrap() > 0.0);
        assert!(tenants.rho_at_most_one_share > 0.0 && tenants.rho_at_most_one_share <= 1.0);
        let table = report.render_table();
        assert!(table.contains("\nTenants (12; "), "{label}:\n{table}");
        assert!(table.contains("\n  Jain index "), "{label}");
        let text = report.to_json();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["tenants"]["by_tenant"].as_array().unwrap().len(), 12);
        assert!(text.find("\"unschedulable\"").unwrap() < text.find("\"tenants\"").unwrap(), "appended last");
    }

    // With undeclared VCs rejected, the two jobs of the VC without a quota cannot run.
    let policy = PolicyConfig { undeclared_queues: UndeclaredQueues::Reject, ..philly_policy() };
    let result = replay(cluster.clone(), policy, &jobs, ReplayOptions::default(), &mut |_| {}).unwrap();
    let rejected: Vec<&str> = result
        .outcomes
        .iter()
        .filter(|o| matches!(o.fate, Fate::Unschedulable { .. }))
        .map(|o| o.job.tenant.as_str())
        .collect();
    assert_eq!(rejected, ["23dbec", "23dbec"]);
}

#[test]
fn a_congested_cluster_shows_unequal_service() {
    // The Philly excerpt on the 512-GPU demo cluster under strict FIFO queues for days.
    let jobs = excerpt("data/traces/philly-excerpt.csv", TraceFormat::Philly);
    let text = std::fs::read_to_string(repo_file("examples/clusters/demo.yaml")).unwrap();
    let cluster = Cluster::from_yaml(&text, "demo").unwrap();
    let policy = PolicyConfig { backfill: BackfillMode::None, ..philly_policy() };
    let result = replay(cluster, policy, &jobs, ReplayOptions::default(), &mut |_| {}).unwrap();
    let tenants = Report::new(ReportContext::default(), &result.outcomes, 512).tenants.unwrap();
    let (service, slowdown) = (tenants.jain_service.unwrap(), tenants.jain_slowdown.unwrap());
    assert!(service > 0.0 && service < 0.9, "service Jain {service}");
    assert!(slowdown > 0.0 && slowdown < 0.5, "slowdown Jain {slowdown}");
    assert!(tenants.max_rho.unwrap() > 100.0);
    assert!(tenants.rho_at_most_one_share < 0.9);
    // The biggest VC queued behind its own jobs: alone on 512 / 12 GPUs it would have waited
    // longer still, so its ρ is far below its slowdown.
    let big = tenants.by_tenant.iter().find(|t| t.name == "6214e9").unwrap();
    assert!(big.mean_rho.unwrap() < big.mean_slowdown.unwrap() / 2.0, "{big:?}");
}
