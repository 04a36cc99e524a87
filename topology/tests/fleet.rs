//! Fleets: members under a `cluster` level, and no placement, under any policy, spanning two.

use proptest::prelude::*;
use trainyard_topology::fleet::{FleetSpec, Member, resolve_fleet};
use trainyard_topology::{
    Cluster, ClusterSpec, DomainId, PlacementPolicy, PlacementRequest, Resources, TopologyRequest,
};

fn member(name: &str, yaml: &str) -> Member {
    Member { name: name.into(), spec: ClusterSpec::from_yaml(yaml, name).unwrap(), source: format!("{name}.yaml") }
}

/// East: 2 racks of `east_hosts` 8-GPU hosts in one block; west: racks of 8-GPU hosts, no blocks.
fn fleet(east_hosts: u32, west_racks: u32, west_hosts: u32) -> Cluster {
    let east = member(
        "east",
        &format!(
            "name: east\nlevels: [block, rack, host]\ngenerate: {{counts: [1, 2, {east_hosts}], node: {{gpus: 8, cpus: 64}}}}\n"
        ),
    );
    let west = member(
        "west",
        &format!(
            "name: west\nlevels: [rack, host]\ngenerate: {{counts: [{west_racks}, {west_hosts}], node: {{gpus: 8, cpus: 64}}, flavor: a100}}\n"
        ),
    );
    let resolved = resolve_fleet("fleet", &[east, west], "fleet.yaml").unwrap();
    Cluster::from_fleet(&resolved, |_| None).unwrap()
}

#[test]
fn members_sit_under_the_cluster_level_and_missing_levels_take_the_members_name() {
    let cluster = fleet(2, 2, 2);
    let topo = cluster.topology();
    assert_eq!(topo.levels(), ["cluster", "block", "rack", "host"]);
    assert_eq!(topo.span_ceiling(), 1);
    // West names no blocks: its hosts sit in one block named after it.
    let west: Vec<String> =
        topo.hosts().map(|h| topo.path(topo.host_domain(h))).filter(|p| p.starts_with("west/")).collect();
    assert_eq!(west.len(), 4, "{west:?}");
    assert!(west.iter().all(|p| p.starts_with("west/west/")), "{west:?}");
    let names: Vec<&str> = topo.children(DomainId(0)).iter().map(|&d| topo.domain(DomainId(d)).name.as_str()).collect();
    assert_eq!(names, ["east", "west"]);
    assert_eq!(cluster.total_capacity().gpus, 8 * 8);
}

#[test]
fn a_gang_bigger_than_any_member_never_runs_though_the_fleet_has_room() {
    let mut cluster = fleet(1, 1, 2);
    // 2 hosts a member, 4 in the fleet: 3 hosts' worth fits only across members.
    for request in [TopologyRequest::Unconstrained, TopologyRequest::Preferred("rack".into())] {
        let constraint = cluster.topology().resolve(&request).unwrap();
        for policy in [PlacementPolicy::Greedy, PlacementPolicy::Trainyard] {
            let found = cluster.place_with(policy, &PlacementRequest::new(3, Resources::gpus(8), constraint));
            assert!(found.is_err(), "{request} under {policy:?} spanned clusters: {found:?}");
        }
    }
    let constraint = cluster.topology().resolve(&TopologyRequest::Unconstrained).unwrap();
    assert!(cluster.place(&PlacementRequest::new(2, Resources::gpus(8), constraint)).is_ok());
}

#[test]
fn members_that_order_their_levels_differently_are_refused_by_name() {
    let a = member("a", "name: a\nlevels: [block, rack, host]\ngenerate: {counts: [1, 1, 1], node: {gpus: 8}}\n");
    let b = member("b", "name: b\nlevels: [rack, block, host]\ngenerate: {counts: [1, 1, 1], node: {gpus: 8}}\n");
    let err = resolve_fleet("f", &[a.clone(), b], "fleet.yaml").unwrap_err().to_string();
    assert!(err.contains("fleet.yaml") && err.contains("`b`: rack, block"), "{err}");
    let twice = resolve_fleet("f", &[a.clone(), a.clone()], "fleet.yaml").unwrap_err().to_string();
    assert!(twice.contains("clusters[1].name"), "{twice}");
    let own = member("c", "name: c\nlevels: [cluster, host]\ngenerate: {counts: [1, 1], node: {gpus: 8}}\n");
    let err = resolve_fleet("f", &[own], "fleet.yaml").unwrap_err().to_string();
    assert!(err.contains("c.yaml") && err.contains("`cluster`"), "{err}");
}

#[test]
fn a_fleet_file_is_told_from_a_cluster_file() {
    assert!(FleetSpec::is_fleet("name: f\nclusters:\n  - {name: a, file: a.yaml}\n"));
    assert!(!FleetSpec::is_fleet("name: demo\nlevels: [host]\ngenerate: {counts: [2], node: {gpus: 8}}\n"));
    let err = FleetSpec::from_yaml("name: f\nclusters:\n  - {name: a, fil: a.yaml}\n", "fleet.yaml").unwrap_err();
    assert!(err.to_string().contains("fleet.yaml"), "{err}");
}

proptest! {
    /// Whatever is already running and whatever a gang asks, every placement in a fleet stays
    /// inside one member cluster.
    #[test]
    fn no_placement_spans_two_clusters(
        east_hosts in 1u32..4, west_racks in 1u32..3, west_hosts in 1u32..4,
        gangs in proptest::collection::vec((1u32..8, 1u64..9, 0u8..3), 1..12),
    ) {
        let mut cluster = fleet(east_hosts, west_racks, west_hosts);
        for (pods, gpus, ask) in gangs {
            let request = match ask {
                0 => TopologyRequest::Unconstrained,
                1 => TopologyRequest::Preferred("rack".into()),
                _ => TopologyRequest::Required("rack".into()),
            };
            let constraint = cluster.topology().resolve(&request).unwrap();
            let Ok(mut placement) = cluster.place(&PlacementRequest::new(pods, Resources::gpus(gpus), constraint)) else {
                continue;
            };
            let topo = cluster.topology();
            let members: std::collections::BTreeSet<u32> =
                placement.hosts.iter().map(|&h| topo.ancestor_at(topo.host_domain(h), 1).0).collect();
            prop_assert_eq!(members.len(), 1, "{} spans {:?}", request, members);
            cluster.allocate_placement(&mut placement).unwrap();
            for h in cluster.topology().hosts().collect::<Vec<_>>() {
                prop_assert!(cluster.host_free(h).gpus <= 8);
            }
        }
    }
}

#[test]
fn levels_merge_in_the_one_order_every_member_agrees_with_whatever_the_members_order() {
    let member = |name: &str, levels: &str| {
        let counts = vec!["1"; levels.split(',').count()].join(", ");
        let yaml = format!("name: {name}\nlevels: [{levels}]\ngenerate: {{counts: [{counts}], node: {{gpus: 8}}}}\n");
        Member { name: name.into(), spec: ClusterSpec::from_yaml(&yaml, name).unwrap(), source: format!("{name}.yaml") }
    };
    // a > c, b > c and a > b: only a, b, c fits, and the first two members alone do not say it.
    let members = [member("x", "zone, row, host"), member("y", "hall, row, host"), member("z", "zone, hall, host")];
    let levels = resolve_fleet("f", &members, "fleet.yaml").unwrap().spec.levels;
    assert_eq!(levels, ["cluster", "zone", "hall", "row", "host"]);
    let mut reversed = members.to_vec();
    reversed.reverse();
    assert_eq!(resolve_fleet("f", &reversed, "fleet.yaml").unwrap().spec.levels, levels);
}
