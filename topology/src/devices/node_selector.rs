//! A ResourceSlice's `spec.nodeSelector` (a core `NodeSelector`): its terms, read into the
//! requirements eligibility evaluates on node labels and names.

use serde_json::Value;

use crate::eligibility::{Requirement, SelectorTerm};

/// The terms of a `NodeSelector` object; the error says which term and requirement is wrong.
pub fn node_selector_terms(selector: &Value) -> Result<Vec<SelectorTerm>, String> {
    let terms = selector.get("nodeSelectorTerms").and_then(Value::as_array).ok_or("nodeSelectorTerms is missing")?;
    let mut out = Vec::with_capacity(terms.len());
    for (i, term) in terms.iter().enumerate() {
        let mut requirements = Vec::new();
        for (list, names) in [("matchExpressions", false), ("matchFields", true)] {
            let items = term.get(list).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            for (j, item) in items.iter().enumerate() {
                let at = |message: &str| format!("nodeSelectorTerms[{i}].{list}[{j}]: {message}");
                requirements.push(requirement(item, names).map_err(|m| at(&m))?);
            }
        }
        out.push(SelectorTerm { requirements });
    }
    Ok(out)
}

fn requirement(item: &Value, names: bool) -> Result<Requirement, String> {
    let key = item.get("key").and_then(Value::as_str).ok_or("key is missing")?.to_string();
    let operator = item.get("operator").and_then(Value::as_str).ok_or("operator is missing")?;
    let values: Vec<String> = item
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let bound = || -> Result<i64, String> {
        match values.as_slice() {
            [one] => one.parse().map_err(|_| format!("{operator} needs an integer, not {one:?}")),
            _ => Err(format!("{operator} needs exactly one value")),
        }
    };
    if names {
        if key != "metadata.name" {
            return Err(format!("matchFields supports metadata.name only, not {key:?}"));
        }
        return match operator {
            "In" => Ok(Requirement::NameIn(values)),
            "NotIn" => Ok(Requirement::NameNotIn(values)),
            other => Err(format!("operator {other:?} on metadata.name; use In or NotIn")),
        };
    }
    match operator {
        "In" => Ok(Requirement::In(key, values)),
        "NotIn" => Ok(Requirement::NotIn(key, values)),
        "Exists" => Ok(Requirement::Exists(key)),
        "DoesNotExist" => Ok(Requirement::DoesNotExist(key)),
        "Gt" => Ok(Requirement::Gt(key, bound()?)),
        "Lt" => Ok(Requirement::Lt(key, bound()?)),
        other => Err(format!("unknown operator {other:?}")),
    }
}
