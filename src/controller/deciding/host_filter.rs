//! The hosts a gang's pods may use, from their pod template: tolerations, `nodeSelector` and
//! required node affinity, read into the engine's typed filter with errors naming the field.

use k8s_openapi::api::core::v1::{Affinity, NodeSelectorRequirement, Toleration as K8sToleration};
use trainyard_bridges::pod::PodSpec;
use trainyard_topology::eligibility::{
    HostFilter, Requirement, SelectorTerm, TaintEffect, Toleration, TolerationOperator,
};

use crate::controller::deciding::intent::Problem;

/// The filter of a gang pod template; `field` prefixes error fields (`replicatedJobs[node]...`).
pub fn host_filter(spec: &PodSpec, field: &str) -> Result<HostFilter, Problem> {
    let bad = |at: String, message: String| Problem {
        reason: "InvalidSpec",
        field: format!("{field}.{at}"),
        message,
        terminal: true,
    };
    let mut filter =
        HostFilter { node_selector: spec.node_selector.clone().into_iter().collect(), ..HostFilter::default() };
    if let Some(value) = spec.rest.get("tolerations").filter(|v| !v.is_null()) {
        let list: Vec<K8sToleration> =
            serde_json::from_value(value.clone()).map_err(|e| bad("tolerations".into(), e.to_string()))?;
        for (i, t) in list.iter().enumerate() {
            let operator = match t.operator.as_deref() {
                None | Some("Equal") => TolerationOperator::Equal,
                Some("Exists") => TolerationOperator::Exists,
                Some(other) => {
                    return Err(bad(format!("tolerations[{i}].operator"), format!("{other:?} is not Equal or Exists")));
                }
            };
            let effect = match t.effect.as_deref().filter(|e| !e.is_empty()) {
                None => None,
                Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
                    bad(
                        format!("tolerations[{i}].effect"),
                        format!("{e:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
                    )
                })?),
            };
            let key = t.key.clone().unwrap_or_default();
            filter.tolerations.push(Toleration { key, operator, value: t.value.clone().unwrap_or_default(), effect });
        }
    }
    if let Some(value) = spec.rest.get("affinity").filter(|v| !v.is_null()) {
        let affinity: Affinity =
            serde_json::from_value(value.clone()).map_err(|e| bad("affinity".into(), e.to_string()))?;
        let required = affinity.node_affinity.and_then(|n| n.required_during_scheduling_ignored_during_execution);
        for (i, term) in required.map(|r| r.node_selector_terms).unwrap_or_default().iter().enumerate() {
            let at = |kind: &str, j: usize| {
                format!(
                    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].{kind}[{j}]"
                )
            };
            let mut requirements = Vec::new();
            for (j, r) in term.match_expressions.iter().flatten().enumerate() {
                requirements.push(label_requirement(r).map_err(|m| bad(at("matchExpressions", j), m))?);
            }
            for (j, r) in term.match_fields.iter().flatten().enumerate() {
                requirements.push(field_requirement(r).map_err(|m| bad(at("matchFields", j), m))?);
            }
            filter.affinity.push(SelectorTerm { requirements });
        }
    }
    Ok(filter.canonical())
}

fn label_requirement(r: &NodeSelectorRequirement) -> Result<Requirement, String> {
    let values = r.values.clone().unwrap_or_default();
    let bound = || -> Result<i64, String> {
        match values.as_slice() {
            [one] => one.parse().map_err(|_| format!("{one:?} is not an integer")),
            _ => Err(format!("{} takes exactly one value", r.operator)),
        }
    };
    Ok(match r.operator.as_str() {
        "In" => Requirement::In(r.key.clone(), values),
        "NotIn" => Requirement::NotIn(r.key.clone(), values),
        "Exists" => Requirement::Exists(r.key.clone()),
        "DoesNotExist" => Requirement::DoesNotExist(r.key.clone()),
        "Gt" => Requirement::Gt(r.key.clone(), bound()?),
        "Lt" => Requirement::Lt(r.key.clone(), bound()?),
        other => return Err(format!("operator {other:?} is not In, NotIn, Exists, DoesNotExist, Gt or Lt")),
    })
}

fn field_requirement(r: &NodeSelectorRequirement) -> Result<Requirement, String> {
    if r.key != "metadata.name" {
        return Err(format!("field {:?}: only metadata.name can be matched", r.key));
    }
    let values = r.values.clone().unwrap_or_default();
    Ok(match r.operator.as_str() {
        "In" => Requirement::NameIn(values),
        "NotIn" => Requirement::NameNotIn(values),
        other => return Err(format!("operator {other:?} is not In or NotIn for metadata.name")),
    })
}
