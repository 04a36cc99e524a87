//! Replays on a fleet: every gang runs inside one member cluster, one too big for any member is
//! unschedulable though the fleet has the GPUs, and the report breaks usage down per cluster.

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::{Fate, ReplayOptions, TraceJob, replay};
use trainyard_topology::fleet::{Member, resolve_fleet};
use trainyard_topology::{Cluster, ClusterSpec, Resources};

fn fleet() -> Cluster {
    let member = |name: &str, racks: u32| Member {
        name: name.into(),
        spec: ClusterSpec::from_yaml(
            &format!(
                "name: {name}\nlevels: [rack, host]\ngenerate: {{counts: [{racks}, 2], node: {{gpus: 8, cpus: 64}}}}\n"
            ),
            name,
        )
        .unwrap(),
        source: format!("{name}.yaml"),
    };
    let resolved = resolve_fleet("pair", &[member("east", 2), member("west", 1)], "pair.yaml").unwrap();
    Cluster::from_fleet(&resolved, |_| None).unwrap()
}

fn job(id: &str, submit: u64, runtime: u64, pods: u32) -> TraceJob {
    TraceJob::recorded(id.into(), submit, runtime, "default".into(), (pods, Resources::gpus(8)), 1)
}

#[test]
fn gangs_stay_in_one_cluster_and_the_report_shows_each() {
    // East has 4 hosts, west 2: 5 hosts fit no member.
    let jobs = vec![job("a", 0, 100, 4), job("b", 0, 100, 2), job("c", 10, 50, 2), job("big", 20, 10, 5)];
    let policy = PolicyConfig::builtin("fifo").unwrap();
    let result = replay(fleet(), policy, &jobs, ReplayOptions::default(), &mut |_| {}).unwrap();
    let fate = |id: &str| &result.outcomes.iter().find(|o| o.job.id == id).unwrap().fate;
    assert!(matches!(fate("big"), Fate::Unschedulable { .. }), "{:?}", fate("big"));
    // a fills east, b fills west: c waits for one of them instead of spanning.
    let Fate::Finished { start, .. } = fate("c") else { panic!("c did not run") };
    assert_eq!(*start, 100, "c waits for b's 2 hosts in west (or a's in east)");
    let fleet = result.fleet.clone().expect("a fleet replay has per-cluster usage");
    let names: Vec<&str> = fleet.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["east", "west"]);
    assert_eq!(fleet.clusters[0].gpus, 32);
    assert_eq!(fleet.clusters[1].gpus, 16);
    assert_eq!(fleet.clusters.iter().map(|c| c.jobs).sum::<u64>(), 3, "a, b and c each counted once");
    let report = Report::new(ReportContext::default(), &result.outcomes, 48).with_fleet(result.fleet.clone());
    let text = report.render_table();
    assert!(text.contains("Clusters of the fleet") && text.contains("east") && text.contains("west"), "{text}");
    assert!(report.to_json().contains("\"fleet\""));
}
