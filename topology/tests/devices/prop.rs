//! Random gangs of pods with random claims on the fixture hosts: whatever happens, no device is
//! given twice, shared counters never go past what the pools have, and a gang that fails leaves
//! the in-use set exactly as it was.

use std::collections::BTreeSet;

use proptest::prelude::*;
use trainyard_topology::devices::{Claim, DeviceId, InUse, PodClaims, allocate_gang};

use super::Fixture;

const NODES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];

fn claim_kinds(fixture: &mut Fixture) -> Vec<Claim> {
    let mut kinds = Vec::new();
    for template in ["gpu-nic-pair", "two-mig-slices", "burn-in", "gpus-spread", "all-nics"] {
        kinds.push(fixture.claim(template, template));
    }
    for (name, yaml) in [
        ("one-gpu", "devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}"),
        ("one-mig", "devices: {requests: [{name: mig, exactly: {deviceClassName: mig.nvidia.com}}]}"),
        (
            "mig-or-gpu",
            "devices: {requests: [{name: x, firstAvailable: [{name: mig, deviceClassName: mig.nvidia.com, count: 2}, \
             {name: gpu, deviceClassName: gpu.nvidia.com}]}]}",
        ),
    ] {
        kinds.push(fixture.inline(name, yaml).expect("claim"));
    }
    kinds
}

/// Pods as (node, claim kinds); gangs as lists of pods.
fn gangs() -> impl Strategy<Value = Vec<Vec<(usize, Vec<usize>)>>> {
    let pod = (0..NODES.len(), prop::collection::vec(0..8usize, 1..4));
    prop::collection::vec(prop::collection::vec(pod, 1..4), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn devices_are_never_given_twice_and_failed_gangs_leave_no_trace(gangs in gangs()) {
        let mut fixture = Fixture::new();
        let kinds = claim_kinds(&mut fixture);
        let mut in_use = InUse::default();
        for (g, gang) in gangs.iter().enumerate() {
            let pods: Vec<PodClaims> = gang
                .iter()
                .enumerate()
                .map(|(p, (node, claims))| PodClaims {
                    pod: format!("gang-{g}-pod-{p}"),
                    node: NODES[*node].to_string(),
                    claims: claims.iter().enumerate().map(|(c, k)| Claim { name: format!("c{c}"), ..kinds[*k].clone() }).collect(),
                })
                .collect();
            let before = in_use.clone();
            match allocate_gang(&fixture.view, &pods, &mut in_use, &mut fixture.selectors) {
                Err(_) => prop_assert_eq!(&in_use, &before),
                Ok(allocations) => {
                    prop_assert_eq!(allocations.len(), pods.len());
                    let mut given: BTreeSet<DeviceId> = BTreeSet::new();
                    for (pod, allocation) in pods.iter().zip(&allocations) {
                        prop_assert_eq!(&allocation.node, &pod.node);
                        let host = fixture.view.host(&pod.node);
                        for claim in &allocation.claims {
                            prop_assert!(claim.results.len() <= 32);
                            for result in &claim.results {
                                prop_assert!(host.devices.iter().any(|d| d.id == result.device), "{} not on {}", result.device, pod.node);
                                prop_assert!(!before.devices.contains(&result.device), "{} was in use", result.device);
                                prop_assert!(given.insert(result.device.clone()), "{} given twice", result.device);
                            }
                        }
                    }
                    let expected: BTreeSet<DeviceId> = before.devices.union(&given).cloned().collect();
                    prop_assert_eq!(&in_use.devices, &expected);
                }
            }
            for ((driver, pool, set, counter), taken) in &in_use.counters {
                let available = fixture.view.counter(driver, pool, &(set.clone(), counter.clone()));
                prop_assert!(available.is_some_and(|a| *taken <= a), "{driver}/{pool} {set}/{counter}: {taken} taken of {available:?}");
            }
        }
    }
}
