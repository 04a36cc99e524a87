//! A small strategic-merge-patch over JSON values, with the merge keys of the pod and JobSet lists.

use serde_json::Value;

/// The list-merge key Kubernetes declares for a field, or `None` when the list is replaced whole.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "replicatedJobs" | "containers" | "initContainers" | "env" | "volumes" | "imagePullSecrets"
        | "schedulingGates" | "resourceClaims" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// Merges `patch` into `target`: maps merge recursively, `null` deletes a key, keyed lists merge item by
/// item (new items appended, so the original order is kept), every other value is replaced.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value, field: &str) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else if let Some(existing) = target.get_mut(key) {
                    strategic_merge(existing, value, key);
                } else {
                    target.insert(key.clone(), value.clone());
                }
            }
        }
        (Value::Array(target), Value::Array(patch)) if merge_key(field).is_some() => {
            let key = merge_key(field).unwrap_or("name");
            for item in patch {
                let id = item.get(key);
                match target.iter_mut().find(|t| id.is_some() && t.get(key) == id) {
                    Some(existing) => strategic_merge(existing, item, ""),
                    None => target.push(item.clone()),
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keyed_lists_merge_and_others_replace() {
        let mut target = json!({
            "containers": [{"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]}, {"name": "b"}],
            "tolerations": [{"key": "t1"}],
            "nodeSelector": {"keep": "1", "drop": "2"}
        });
        let patch = json!({
            "containers": [{"name": "b", "image": "y"}, {"name": "a", "env": [{"name": "K", "value": "2"}, {"name": "L", "value": "3"}]}],
            "tolerations": [{"key": "t2"}],
            "nodeSelector": {"drop": null, "new": "3"}
        });
        strategic_merge(&mut target, &patch, "");
        assert_eq!(
            target,
            json!({
                "containers": [
                    {"name": "a", "image": "x", "env": [{"name": "K", "value": "2"}, {"name": "L", "value": "3"}]},
                    {"name": "b", "image": "y"}
                ],
                "tolerations": [{"key": "t2"}],
                "nodeSelector": {"keep": "1", "new": "3"}
            })
        );
    }
}
