//! Which hosts a gang may use, as kube-scheduler decides it: taints and tolerations, node
//! selectors and required node affinity, evaluated on a host's labels and taints.
//!
//! The rules follow kube-scheduler's filter plugins. `TaintToleration`: every taint with effect
//! `NoSchedule` or `NoExecute` must be tolerated (`PreferNoSchedule` only scores). `NodeAffinity`:
//! every `nodeSelector` pair must match, and when required affinity is given, at least one of its
//! terms must match, a term matching when all of its requirements do (an empty term matches
//! nothing). `NodeUnschedulable`: a cordoned node is left alone unless the pod tolerates
//! `node.kubernetes.io/unschedulable:NoSchedule`; trainyard models the cordon as that taint.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The taint kube-scheduler's `NodeUnschedulable` filter stands for (`spec.unschedulable`).
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New pods are not scheduled there.
    NoSchedule,
    /// Only a preference; never filters.
    PreferNoSchedule,
    /// New pods are not scheduled there and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The effect as the API spells it; `None` for anything else.
    pub fn parse(text: &str) -> Option<TaintEffect> {
        match text {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }

    /// Whether kube-scheduler filters nodes by it.
    pub fn filters(self) -> bool {
        !matches!(self, TaintEffect::PreferNoSchedule)
    }
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// How a toleration compares values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Key and value must equal the taint's (the API default).
    #[default]
    Equal,
    /// Any value; with an empty key, any taint.
    Exists,
}

/// The toleration rule node and device taints share (kube's `ToleratesTaint`): `(key, operator,
/// value)` of the toleration against `(key, value)` of a taint whose effect it covers or not.
pub(crate) fn tolerates(
    toleration: (&str, TolerationOperator, &str),
    effect_covered: bool,
    taint: (&str, &str),
) -> bool {
    let (key, operator, value) = toleration;
    effect_covered
        && (key.is_empty() || key == taint.0)
        && match operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => value == taint.1,
        }
}

/// A pod's toleration.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Toleration {
    /// Taint key; empty with `Exists` matches every key.
    pub key: String,
    /// Comparison.
    pub operator: TolerationOperator,
    /// Value for `Equal`.
    pub value: String,
    /// Effect it tolerates; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration covers `taint` (kube's `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect = self.effect.is_none_or(|e| e == taint.effect);
        tolerates((&self.key, self.operator, &self.value), effect, (&taint.key, &taint.value))
    }
}

/// A label requirement of a node selector term.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Requirement {
    /// The label is one of the values.
    In(String, Vec<String>),
    /// The label is absent or none of the values.
    NotIn(String, Vec<String>),
    /// The label is present.
    Exists(String),
    /// The label is absent.
    DoesNotExist(String),
    /// The label is an integer greater than the bound.
    Gt(String, i64),
    /// The label is an integer less than the bound.
    Lt(String, i64),
    /// The node's name (`matchFields` on `metadata.name`) is one of the values.
    NameIn(Vec<String>),
    /// The node's name is none of the values.
    NameNotIn(Vec<String>),
}

impl Requirement {
    fn matches(&self, host: &HostAttrs) -> bool {
        let label = |key: &str| host.labels.get(key);
        match self {
            Requirement::In(key, values) => label(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => label(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::DoesNotExist(key) => label(key).is_none(),
            Requirement::Gt(key, bound) => label(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *bound),
            Requirement::Lt(key, bound) => label(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *bound),
            Requirement::NameIn(names) => names.contains(&host.node_name),
            Requirement::NameNotIn(names) => !names.contains(&host.node_name),
        }
    }
}

/// One term of required node affinity: all of its requirements hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SelectorTerm {
    /// ANDed requirements; an empty term matches no node, as in Kubernetes.
    pub requirements: Vec<Requirement>,
}

impl SelectorTerm {
    /// Whether every requirement holds on `host` (an empty term matches no node).
    pub fn matches(&self, host: &HostAttrs) -> bool {
        !self.requirements.is_empty() && self.requirements.iter().all(|r| r.matches(host))
    }
}

/// What kube-scheduler looks at on a node to decide whether a pod may go there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAttrs {
    /// The Node object's name (what `matchFields` compare).
    pub node_name: String,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Node taints (a cordon included, as [`UNSCHEDULABLE_TAINT`]).
    pub taints: Vec<Taint>,
}

/// The hosts a gang's pods may go to: the pod template's tolerations, `nodeSelector` and
/// required node affinity. The default filter has no tolerations and no selector: every host
/// without a filtering taint.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostFilter {
    /// Tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// `nodeSelector`: every pair must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms (ORed); empty means no affinity requirement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affinity: Vec<SelectorTerm>,
}

impl HostFilter {
    /// The filter in a canonical form (sorted, deduplicated), so that equal constraints written in
    /// another order share one eligibility class.
    pub fn canonical(mut self) -> HostFilter {
        self.tolerations.sort();
        self.tolerations.dedup();
        for term in &mut self.affinity {
            for r in &mut term.requirements {
                match r {
                    Requirement::In(_, v)
                    | Requirement::NotIn(_, v)
                    | Requirement::NameIn(v)
                    | Requirement::NameNotIn(v) => {
                        v.sort();
                        v.dedup();
                    }
                    _ => {}
                }
            }
            term.requirements.sort();
            term.requirements.dedup();
        }
        self.affinity.sort();
        self.affinity.dedup();
        self
    }

    /// Whether pods with this filter may be scheduled on `host`.
    pub fn admits(&self, host: &HostAttrs) -> bool {
        self.first_refusal(host).is_none()
    }

    /// Why pods with this filter may not go to `host`, as kube-scheduler would put it; `None` if
    /// they may.
    pub fn first_refusal(&self, host: &HostAttrs) -> Option<Refusal> {
        if let Some(t) = host.taints.iter().find(|t| t.effect.filters() && !self.tolerates(t)) {
            return Some(Refusal::Taint(t.clone()));
        }
        if let Some((k, v)) = self.node_selector.iter().find(|(k, v)| host.labels.get(*k) != Some(v)) {
            return Some(Refusal::NodeSelector(k.clone(), v.clone()));
        }
        if !self.affinity.is_empty() && !self.affinity.iter().any(|t| t.matches(host)) {
            return Some(Refusal::Affinity);
        }
        None
    }

    /// Whether running pods with this filter would be evicted from `host` (a `NoExecute` taint
    /// they do not tolerate).
    pub fn evicted_from<'h>(&self, host: &'h HostAttrs) -> Option<&'h Taint> {
        host.taints.iter().find(|t| t.effect == TaintEffect::NoExecute && !self.tolerates(t))
    }

    fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|t| t.tolerates(taint))
    }
}

/// Why a filter refuses a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A taint the pods do not tolerate.
    Taint(Taint),
    /// A `nodeSelector` pair the node does not carry.
    NodeSelector(String, String),
    /// No required affinity term matches.
    Affinity,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Taint(t) if t.value.is_empty() => write!(f, "untolerated taint {}:{:?}", t.key, t.effect),
            Refusal::Taint(t) => write!(f, "untolerated taint {}={}:{:?}", t.key, t.value, t.effect),
            Refusal::NodeSelector(k, v) => write!(f, "node selector {k}={v} does not match"),
            Refusal::Affinity => f.write_str("no required node affinity term matches"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(labels: &[(&str, &str)], taints: &[(&str, &str, TaintEffect)]) -> HostAttrs {
        HostAttrs {
            node_name: "n1".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            taints: taints
                .iter()
                .map(|(k, v, e)| Taint { key: k.to_string(), value: v.to_string(), effect: *e })
                .collect(),
        }
    }

    fn exists(key: &str) -> Toleration {
        Toleration { key: key.into(), operator: TolerationOperator::Exists, ..Toleration::default() }
    }

    #[test]
    fn taints_are_tolerated_as_kube_scheduler_tolerates_them() {
        let gpu = host(&[], &[("nvidia.com/gpu", "present", TaintEffect::NoSchedule)]);
        assert!(!HostFilter::default().admits(&gpu));
        let f = HostFilter { tolerations: vec![exists("nvidia.com/gpu")], ..HostFilter::default() };
        assert!(f.admits(&gpu));
        let equal = Toleration { key: "nvidia.com/gpu".into(), value: "present".into(), ..Toleration::default() };
        assert!(equal.tolerates(&gpu.taints[0]));
        let wrong_value = Toleration { value: "absent".into(), ..equal.clone() };
        assert!(!wrong_value.tolerates(&gpu.taints[0]));
        let wrong_effect = Toleration { effect: Some(TaintEffect::NoExecute), ..equal };
        assert!(!wrong_effect.tolerates(&gpu.taints[0]));
        let everything = Toleration { operator: TolerationOperator::Exists, ..Toleration::default() };
        assert!(everything.tolerates(&gpu.taints[0]), "an empty key with Exists tolerates every taint");
        let soft = host(&[], &[("spot", "", TaintEffect::PreferNoSchedule)]);
        assert!(HostFilter::default().admits(&soft), "PreferNoSchedule only scores");
        let evicting = host(&[], &[("maintenance", "", TaintEffect::NoExecute)]);
        assert_eq!(HostFilter::default().evicted_from(&evicting).map(|t| t.key.as_str()), Some("maintenance"));
        assert!(HostFilter::default().evicted_from(&gpu).is_none(), "NoSchedule does not evict");
    }

    #[test]
    fn selectors_and_affinity_pick_hosts() {
        let h100 = host(&[("gpu", "h100"), ("rack", "7")], &[]);
        let sel = |k: &str, v: &str| HostFilter {
            node_selector: [(k.to_string(), v.to_string())].into(),
            ..HostFilter::default()
        };
        assert!(sel("gpu", "h100").admits(&h100));
        assert_eq!(sel("gpu", "a100").first_refusal(&h100), Some(Refusal::NodeSelector("gpu".into(), "a100".into())));
        let term = |r: Vec<Requirement>| SelectorTerm { requirements: r };
        let affinity = |terms: Vec<SelectorTerm>| HostFilter { affinity: terms, ..HostFilter::default() };
        assert!(
            affinity(vec![term(vec![Requirement::In("gpu".into(), vec!["a100".into(), "h100".into()])])]).admits(&h100)
        );
        assert!(!affinity(vec![term(vec![Requirement::NotIn("gpu".into(), vec!["h100".into()])])]).admits(&h100));
        assert!(
            affinity(vec![term(vec![Requirement::Gt("rack".into(), 5), Requirement::Lt("rack".into(), 8)])])
                .admits(&h100)
        );
        assert!(!affinity(vec![term(vec![Requirement::DoesNotExist("rack".into())])]).admits(&h100));
        assert!(!affinity(vec![term(vec![])]).admits(&h100), "an empty term matches no node");
        let either = affinity(vec![
            term(vec![Requirement::Exists("zone".into())]),
            term(vec![Requirement::NameIn(vec!["n1".into()])]),
        ]);
        assert!(either.admits(&h100), "terms are ORed");
        assert!(!affinity(vec![term(vec![Requirement::NameNotIn(vec!["n1".into()])])]).admits(&h100));
    }

    #[test]
    fn equal_filters_are_one_class() {
        let a = HostFilter { tolerations: vec![exists("b"), exists("a"), exists("a")], ..HostFilter::default() };
        let b = HostFilter { tolerations: vec![exists("a"), exists("b")], ..HostFilter::default() };
        assert_eq!(a.canonical(), b.canonical());
    }
}
