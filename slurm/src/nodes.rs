//! Slurm nodes, from slurmrestd's `nodes` or `sinfo --json`.

use serde_json::Value;

use crate::error::SlurmError;

/// One Slurm node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// CPUs.
    pub cpus: u64,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// GPUs from its GRES (`gpu:8`, `gpu:h100:8`, `gpu:h100:8(S:0-1)`, summed over types).
    pub gpus: u64,
    /// The GPU type, when the GRES names one (`h100` in `gpu:h100:8`).
    pub gpu_type: Option<String>,
    /// State words (`idle`, `mixed`, `drain`, ...), lower case.
    pub state: Vec<String>,
    /// Features (`AvailableFeatures`).
    pub features: Vec<String>,
    /// Partitions it belongs to.
    pub partitions: Vec<String>,
}

impl NodeInfo {
    /// Whether jobs can start on it (not down, drained, failing or in maintenance).
    pub fn usable(&self) -> bool {
        !self.state.iter().any(|s| {
            matches!(
                s.as_str(),
                "down" | "drain" | "drained" | "draining" | "fail" | "failing" | "maint" | "future" | "inval"
            )
        })
    }
}

/// The `nodes` array of a slurmrestd or `sinfo --json` answer.
pub fn parse_nodes(body: &Value) -> Result<Vec<NodeInfo>, SlurmError> {
    let bad = |message: String| SlurmError::BadAnswer { what: "nodes".into(), message };
    let nodes = body.get("nodes").and_then(Value::as_array).ok_or_else(|| bad("no `nodes` array".into()))?;
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let name = n.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("nodes[{i}] has no name")))?;
            let words = |key: &str| -> Vec<String> {
                match n.get(key) {
                    Some(Value::String(s)) => {
                        s.split([',', '+']).filter(|w| !w.is_empty()).map(|w| w.to_ascii_lowercase()).collect()
                    }
                    Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase).collect(),
                    _ => vec![],
                }
            };
            let mut state = words("state");
            state.extend(words("state_flags"));
            let gres = n.get("gres").and_then(Value::as_str).unwrap_or_default();
            let (gpus, gpu_type) = gpus_of(gres);
            let features = match n.get("features") {
                Some(Value::String(s)) => s.split(',').filter(|w| !w.is_empty()).map(str::to_string).collect(),
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
                _ => vec![],
            };
            Ok(NodeInfo {
                name: name.to_string(),
                cpus: n.get("cpus").and_then(Value::as_u64).unwrap_or(0),
                memory_mib: n.get("real_memory").and_then(Value::as_u64).unwrap_or(0),
                gpus,
                gpu_type,
                state,
                features,
                partitions: words("partitions").into_iter().collect(),
            })
        })
        .collect()
}

/// GPUs in a GRES string: `gpu:2`, `gpu:a100:4(S:0)`, `gpu:a100:2,gpu:v100:2`, `shard:8,gpu:1`.
pub fn gpus_of(gres: &str) -> (u64, Option<String>) {
    let mut total = 0;
    let mut kind = None;
    for entry in gres.split(',') {
        let entry = entry.split('(').next().unwrap_or_default();
        let parts: Vec<&str> = entry.split(':').collect();
        if parts.first() != Some(&"gpu") {
            continue;
        }
        match parts.as_slice() {
            [_, n] => total += n.parse::<u64>().unwrap_or(0),
            [_, t, n] => {
                total += n.parse::<u64>().unwrap_or(0);
                kind.get_or_insert_with(|| t.to_string());
            }
            _ => {}
        }
    }
    (total, kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gres_strings_give_gpus_and_type() {
        assert_eq!(gpus_of("gpu:2"), (2, None));
        assert_eq!(gpus_of("gpu:a100:4(S:0-1)"), (4, Some("a100".into())));
        assert_eq!(gpus_of("shard:8,gpu:a100:2,gpu:a100:2"), (4, Some("a100".into())));
        assert_eq!(gpus_of(""), (0, None));
    }

    #[test]
    fn rest_nodes_are_read() {
        let body = json!({"nodes": [
            {"name": "n1", "state": "idle", "state_flags": [], "cpus": 4, "real_memory": 4000,
             "gres": "gpu:2", "partitions": ["debug"], "features": "ib,nvlink"},
            {"name": "n2", "state": "down", "state_flags": ["DRAIN"], "cpus": 4, "real_memory": 4000, "gres": ""},
        ]});
        let nodes = parse_nodes(&body).unwrap();
        assert_eq!((nodes[0].gpus, nodes[0].memory_mib, nodes[0].usable()), (2, 4000, true));
        assert_eq!(nodes[0].features, vec!["ib", "nvlink"]);
        assert!(!nodes[1].usable());
    }
}
