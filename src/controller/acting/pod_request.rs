//! A pod's resource request, exactly, as kube-scheduler counts it, and the Kubernetes quantities it
//! is written in (thousandths of a unit, in integers: no rounding of bytes or millicores).

use std::collections::BTreeMap;

use serde_json::Value;
use trainyard_topology::sources::k8s_nodes::quantity::parse_millis;

/// A pod's request per resource in thousandths, as kube-scheduler counts it: the containers and
/// sidecars summed, against each init container with the sidecars started before it, whichever
/// is larger, with pod-level cpu and memory requests winning where given, plus the pod overhead.
/// A container that gives only a limit requests the limit (the API server defaults it so). The
/// same rule as the live picture's `facts::pod_requests`, for every resource name rather than
/// the three the engine counts.
pub fn pod_request(spec: &Value) -> BTreeMap<String, i128> {
    let mut running: BTreeMap<String, i128> = BTreeMap::new();
    let mut peak: BTreeMap<String, i128> = BTreeMap::new();
    let mut sidecars: BTreeMap<String, i128> = BTreeMap::new();
    let raise = |peak: &mut BTreeMap<String, i128>, with: &BTreeMap<String, i128>| {
        for (k, v) in with {
            let slot = peak.entry(k.clone()).or_default();
            *slot = (*slot).max(*v);
        }
    };
    for init in spec["initContainers"].as_array().into_iter().flatten() {
        let own = container_request(init);
        if init["restartPolicy"].as_str() == Some("Always") {
            // A sidecar starts beside the sidecars before it and runs on beside everything after.
            add(&mut sidecars, &own);
            add(&mut running, &own);
            raise(&mut peak, &sidecars);
        } else {
            // An init container runs alone but for the sidecars started before it.
            let mut at_start = sidecars.clone();
            add(&mut at_start, &own);
            raise(&mut peak, &at_start);
        }
    }
    for container in spec["containers"].as_array().into_iter().flatten() {
        add(&mut running, &container_request(container));
    }
    for (k, v) in peak {
        let slot = running.entry(k).or_default();
        *slot = (*slot).max(v);
    }
    // Pod-level requests (cpu and memory) win where given, as in the live picture's facts.
    for (k, v) in spec["resources"]["requests"].as_object().into_iter().flatten() {
        if let Some(milli) = v.as_str().and_then(parse_milli).filter(|_| k == "cpu" || k == "memory") {
            running.insert(k.clone(), milli);
        }
    }
    if let Some(overhead) = spec["overhead"].as_object() {
        let extra: BTreeMap<String, i128> =
            overhead.iter().filter_map(|(k, v)| Some((k.clone(), parse_milli(v.as_str()?)?))).collect();
        add(&mut running, &extra);
    }
    running.retain(|_, v| *v > 0);
    running
}

fn add(into: &mut BTreeMap<String, i128>, more: &BTreeMap<String, i128>) {
    for (k, v) in more {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn container_request(container: &Value) -> BTreeMap<String, i128> {
    let resources = &container["resources"];
    let mut out: BTreeMap<String, i128> = BTreeMap::new();
    for key in ["limits", "requests"] {
        // Requests win over limits for a resource that has both.
        for (name, quantity) in resources[key].as_object().into_iter().flatten() {
            if let Some(milli) =
                quantity.as_str().and_then(parse_milli).or_else(|| quantity.as_i64().map(|n| i128::from(n) * 1000))
            {
                out.insert(name.clone(), milli);
            }
        }
    }
    out
}

/// A Kubernetes quantity in thousandths of its unit (`500m` is 500, `2` is 2000, `1Ki` is
/// 1,024,000), read exactly by the project's quantity parser; `None` for text that is not one.
pub fn parse_milli(text: &str) -> Option<i128> {
    parse_millis(text.trim()).ok().map(i128::from)
}

/// Thousandths back into a quantity: `<n>Gi` or `<n>Mi` for a whole number of those (bytes, in
/// practice: no count of CPUs or devices is a multiple of 2^20), a whole number where it is one,
/// else `<n>m`.
pub fn format_milli(milli: i128) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let whole = milli / 1000;
    match whole {
        0 => "0".into(),
        w if w % (1 << 30) == 0 => format!("{}Gi", w >> 30),
        w if w % (1 << 20) == 0 => format!("{}Mi", w >> 20),
        w => w.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_are_read_exactly() {
        assert_eq!(parse_milli("500m"), Some(500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("1Ki"), Some(1_024_000));
        assert_eq!(parse_milli("1.5Gi"), Some(1_610_612_736_000));
        assert_eq!(parse_milli("2k"), Some(2_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("5e-3"), Some(5));
        assert_eq!(parse_milli("eight"), None);
        assert_eq!(parse_milli("8Qi"), None);
        assert_eq!(format_milli(1_610_612_736_000), "1536Mi");
        assert_eq!(format_milli((512i128 << 30) * 1000), "512Gi");
        assert_eq!(format_milli(64_000), "64");
        assert_eq!(format_milli(1500), "1500m");
    }

    #[test]
    fn a_pod_request_counts_init_containers_and_sidecars_as_the_scheduler_does() {
        let spec = json!({
            "initContainers": [
                {"name": "fetch", "resources": {"requests": {"cpu": "4"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "warm", "resources": {"requests": {"cpu": "2"}}},
            ],
            "containers": [
                {"name": "node", "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "16"}, "requests": {"cpu": "8"}}},
                {"name": "log", "resources": {"requests": {"memory": "512Mi"}}},
            ],
            "overhead": {"cpu": "250m"},
        });
        let r = pod_request(&spec);
        assert_eq!(r["nvidia.com/gpu"], 8000, "a limit alone is the request");
        assert_eq!(r["cpu"], 9250, "8 + the 1 of the sidecar (above any init step) + 250m overhead");
        assert_eq!(r["memory"], (1536i128 << 20) * 1000);
    }

    #[test]
    fn pod_level_requests_win_for_cpu_and_memory() {
        let spec = json!({
            "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
            "containers": [{"name": "node", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "8"}}}],
        });
        let r = pod_request(&spec);
        assert_eq!((r["cpu"], r["memory"], r["nvidia.com/gpu"]), (4000, (8i128 << 30) * 1000, 8000));
    }

    #[test]
    fn an_init_container_larger_than_the_pod_sets_its_request() {
        let spec = json!({
            "initContainers": [{"name": "unpack", "resources": {"requests": {"cpu": "32"}}}],
            "containers": [{"name": "node", "resources": {"requests": {"cpu": "8"}}}],
        });
        assert_eq!(pod_request(&spec)["cpu"], 32_000);
    }

    proptest::proptest! {
        /// Any quantity the formatter writes reads back as the same amount.
        #[test]
        fn a_formatted_quantity_reads_back_exactly(milli in 0i128..i128::from(u64::MAX)) {
            proptest::prop_assert_eq!(parse_milli(&format_milli(milli)), Some(milli));
        }

        /// A pod asks at least what its containers and sidecars ask together, and at least what
        /// any one init container asks: whatever the mix, no part of it is lost.
        #[test]
        fn a_pod_request_covers_every_part(
            containers in proptest::collection::vec(0u32..64_000, 1..4),
            inits in proptest::collection::vec((0u32..64_000, proptest::bool::ANY), 0..4),
        ) {
            let cpu = |m: u32| json!({"resources": {"requests": {"cpu": format!("{m}m")}}});
            let init = |(m, sidecar): (u32, bool)| {
                let mut c = cpu(m);
                if sidecar {
                    c["restartPolicy"] = json!("Always");
                }
                c
            };
            let spec = json!({
                "containers": containers.iter().map(|m| cpu(*m)).collect::<Vec<_>>(),
                "initContainers": inits.iter().map(|i| init(*i)).collect::<Vec<_>>(),
            });
            let got = pod_request(&spec).get("cpu").copied().unwrap_or(0);
            let sidecars: i128 = inits.iter().filter(|(_, s)| *s).map(|(m, _)| i128::from(*m)).sum();
            let steady: i128 = containers.iter().map(|m| i128::from(*m)).sum::<i128>() + sidecars;
            proptest::prop_assert!(got >= steady, "{got} < {steady}");
            for (m, _) in &inits {
                proptest::prop_assert!(got >= i128::from(*m), "{got} < init {m}");
            }
            proptest::prop_assert!(got <= steady + inits.iter().map(|(m, _)| i128::from(*m)).sum::<i128>());
        }
    }
}
