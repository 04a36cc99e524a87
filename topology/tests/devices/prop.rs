//! Random gangs of pods with random claims on the fixture hosts: whatever happens, no device is
//! given twice, shared counters never go past what the pools have, and a gang that fails leaves
//! the in-use set exactly as it was.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use trainyard_topology::devices::objects::DeviceTaintEffect;
use trainyard_topology::devices::{
    Claim, ConstraintKind, Device, DeviceId, DeviceResult, InUse, PodClaims, allocate_gang,
};

use super::Fixture;

const NODES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];
/// Indices into `claim_kinds` of claims for the full-GPU hosts and for the MIG host.
const GPU_KINDS: [usize; 6] = [0, 2, 3, 4, 5, 7];
const MIG_KINDS: [usize; 4] = [1, 6, 7, 5];

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

/// What the claim asked holds of the devices it got: one alternative per request with its count,
/// taints tolerated, constraints met.
fn check_claim(devices: &[&Device], claim: &Claim, results: &[DeviceResult]) -> Result<(), TestCaseError> {
    let device = |id: &DeviceId| devices.iter().find(|d| d.id == *id).copied();
    for request in &claim.requests {
        let used: Vec<_> =
            request.alternatives.iter().filter(|a| results.iter().any(|r| r.request == a.name)).collect();
        prop_assert_eq!(used.len(), 1, "request {} got devices for {} alternatives", request.name, used.len());
        let alternative = used[0];
        let mine: Vec<&DeviceResult> = results.iter().filter(|r| r.request == alternative.name).collect();
        if let Some(count) = alternative.count {
            prop_assert_eq!(mine.len(), count);
        }
        for result in mine {
            let Some(device) = device(&result.device) else { return Err(TestCaseError::fail("device not on host")) };
            for taint in device.taints.iter().filter(|t| t.effect != DeviceTaintEffect::None) {
                prop_assert!(alternative.tolerations.iter().any(|t| t.tolerates(taint)), "{} tainted", device.id);
            }
        }
    }
    for constraint in &claim.constraints {
        let values: Vec<_> = results
            .iter()
            .filter(|r| constraint.covers(&r.request))
            .map(|r| device(&r.device).and_then(|d| d.attribute(constraint.attribute())))
            .collect();
        prop_assert!(values.iter().all(Option::is_some), "a device lacks {}", constraint.attribute());
        let distinct: BTreeSet<_> = values.iter().collect();
        match constraint.kind {
            ConstraintKind::Match(_) => prop_assert!(distinct.len() <= 1, "{:?}", values),
            ConstraintKind::Distinct(_) => prop_assert_eq!(distinct.len(), values.len(), "{:?}", values),
        }
    }
    Ok(())
}

/// Pods as (node, claim kinds); gangs as lists of pods.
fn gangs() -> impl Strategy<Value = Vec<Vec<(usize, Vec<usize>)>>> {
    let pod = (0..NODES.len(), prop::collection::vec(0..9usize, 1..4));
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
                    claims: claims
                        .iter()
                        .enumerate()
                        .map(|(c, k)| {
                            // Mostly claims the node can serve (MIG on node-d, GPUs and NICs
                            // elsewhere), now and then one it cannot.
                            let fitting = if *node == 3 { &MIG_KINDS[..] } else { &GPU_KINDS[..] };
                            let kind = if *k < 7 { fitting[*k % fitting.len()] } else { *k % kinds.len() };
                            Claim { name: format!("c{c}"), ..kinds[kind].clone() }
                        })
                        .collect(),
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
                        for (claim, asked) in allocation.claims.iter().zip(&pod.claims) {
                            prop_assert!(claim.results.len() <= 32);
                            check_claim(&host.devices, asked, &claim.results)?;
                            for result in &claim.results {
                                prop_assert!(host.devices.iter().any(|d| d.id == result.device), "{} not on {}", result.device, pod.node);
                                prop_assert!(!before.devices.contains(&result.device), "{} was in use", result.device);
                                prop_assert!(given.insert(result.device.clone()), "{} given twice", result.device);
                            }
                        }
                    }
                    let expected: std::collections::HashSet<DeviceId> = before.devices.iter().chain(&given).cloned().collect();
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
