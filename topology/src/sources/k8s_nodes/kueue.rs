//! Level keys from a Kueue `Topology` object (`kubectl get topology NAME -o yaml` or `-o json`).

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{check_level_keys, decode, invalid};
use crate::Result;

/// API versions that have served `Topology` with `spec.levels[].nodeLabel`: current manifests say
/// v1beta1 or v1beta2, but v1alpha1 (where the object started) and v1 carry the same schema.
const VERSIONS: [&str; 4] = ["v1alpha1", "v1beta1", "v1beta2", "v1"];
const GROUP: &str = "kueue.x-k8s.io";

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TopologyObject {
    api_version: Option<String>,
    kind: Option<String>,
    spec: Option<TopologySpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TopologySpec {
    levels: Option<Vec<Spanned<TopologyLevel>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TopologyLevel {
    node_label: Option<String>,
}

/// The node label keys of a Kueue `Topology`, outermost first, ready for
/// [`super::NodeListOptions::level_keys`]. Checks what Kueue's admission checks: 1 to 16 levels,
/// distinct, valid label keys, `kubernetes.io/hostname` only last.
pub fn level_keys_from_kueue_topology(text: &str, source_name: &str) -> Result<Vec<String>> {
    let object: TopologyObject = decode(text, source_name)?;
    match object.api_version.as_deref() {
        Some(v) if v.strip_prefix(GROUP).and_then(|r| r.strip_prefix('/')).is_some_and(|r| VERSIONS.contains(&r)) => {}
        found => {
            let found = found.map_or("none".to_string(), |v| format!("`{v}`"));
            let message = format!("expected {GROUP}/v1beta1 or {GROUP}/v1beta2, found {found}");
            return Err(invalid(source_name, None, "apiVersion", message));
        }
    }
    if object.kind.as_deref() != Some("Topology") {
        let found = object.kind.map_or("none".to_string(), |k| format!("`{k}`"));
        return Err(invalid(source_name, None, "kind", format!("expected `Topology`, found {found}")));
    }
    let levels = object.spec.and_then(|s| s.levels).unwrap_or_default();
    let mut keys = Vec::with_capacity(levels.len());
    for (i, level) in levels.into_iter().enumerate() {
        let line = Some(level.referenced.line()).filter(|&l| l > 0);
        match level.value.node_label {
            Some(key) if !key.trim().is_empty() => keys.push(key),
            _ => {
                let field = format!("spec.levels[{i}].nodeLabel");
                return Err(invalid(source_name, line, field, "missing; every level names a node label".into()));
            }
        }
    }
    check_level_keys(&keys, source_name, "spec.levels", |i| format!("spec.levels[{i}].nodeLabel"))?;
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GKE: &str = "\
apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata:
  name: gke-default
spec:
  levels:
  - nodeLabel: cloud.google.com/gce-topology-block
  - nodeLabel: cloud.google.com/gce-topology-subblock
  - nodeLabel: cloud.google.com/gce-topology-host
  - nodeLabel: kubernetes.io/hostname
";

    #[test]
    fn reads_levels_from_yaml_and_json() {
        let keys = level_keys_from_kueue_topology(GKE, "topology.yaml").unwrap();
        assert_eq!(
            keys,
            [
                "cloud.google.com/gce-topology-block",
                "cloud.google.com/gce-topology-subblock",
                "cloud.google.com/gce-topology-host",
                "kubernetes.io/hostname"
            ]
        );
        let json = r#"{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": "topology.k8s.aws/network-node-layer-1"},
                                {"nodeLabel": "topology.k8s.aws/network-node-layer-2"}]}}"#;
        let keys = level_keys_from_kueue_topology(json, "topology.json").unwrap();
        assert_eq!(keys, ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2"]);
    }

    fn error(text: &str) -> String {
        level_keys_from_kueue_topology(text, "t.yaml").unwrap_err().to_string()
    }

    #[test]
    fn rejects_other_objects_and_versions() {
        let err = error("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nspec: {}\n");
        assert_eq!(err, "t.yaml: field `kind`: expected `Topology`, found `ResourceFlavor`");
        let err = error("apiVersion: kueue.x-k8s.io/v9\nkind: Topology\n");
        assert!(err.contains("field `apiVersion`") && err.contains("found `kueue.x-k8s.io/v9`"), "{err}");
        let err = error("apiVersion: other.io/v1beta1\nkind: Topology\n");
        assert!(err.contains("field `apiVersion`"), "{err}");
        let err = error("kind: Topology\n");
        assert!(err.contains("found none"), "{err}");
    }

    #[test]
    fn checks_levels_as_kueue_does() {
        let head = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nspec:\n  levels:\n";
        let err = error("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nspec:\n  levels: []\n");
        assert!(err.contains("field `spec.levels`: no levels"), "{err}");
        let err = error(&format!("{head}  - nodeLabel: kubernetes.io/hostname\n  - nodeLabel: rack\n"));
        assert!(err.contains("`spec.levels[0].nodeLabel`: `kubernetes.io/hostname` can only be the last"), "{err}");
        let err = error(&format!("{head}  - nodeLabel: rack\n  - nodeLabel: rack\n"));
        assert!(err.contains("`spec.levels[1].nodeLabel`: `rack` appears twice"), "{err}");
        let err = error(&format!("{head}  - nodeLabel: rack\n  - {{}}\n"));
        assert!(err.contains("line 6: field `spec.levels[1].nodeLabel`: missing"), "{err}");
        let err = error(&format!("{head}  - nodeLabel: \"my rack\"\n"));
        assert!(err.contains("`my rack` is not a node label key"), "{err}");
        let many: String = (0..17).map(|i| format!("  - nodeLabel: level-{i}\n")).collect();
        let err = error(&format!("{head}{many}"));
        assert!(err.contains("17 levels; Kueue allows at most 16"), "{err}");
        let sixteen: String = (0..16).map(|i| format!("  - nodeLabel: example.com/level-{i}\n")).collect();
        assert_eq!(level_keys_from_kueue_topology(&format!("{head}{sixteen}"), "t.yaml").unwrap().len(), 16);
    }

    #[test]
    fn syntax_errors_keep_the_parser_position() {
        let err = error("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Topology\nspec:\n  levels: [\n");
        assert!(err.starts_with("t.yaml: ") && err.contains("line"), "{err}");
        let err = level_keys_from_kueue_topology("{\"kind\": \"Topology\",\n \"spec\": [}", "t.json").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }
}
