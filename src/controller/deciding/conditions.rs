//! TrainJob conditions: Kubeflow's Suspended / Complete / Failed and trainyard's Queued / Admitted.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Kubeflow: the TrainJob is suspended.
pub const SUSPENDED: &str = "Suspended";
/// Kubeflow: the TrainJob completed.
pub const COMPLETE: &str = "Complete";
/// Kubeflow: the TrainJob failed.
pub const FAILED: &str = "Failed";
/// trainyard: waiting in a queue (True) or unable to wait (False, with the reason).
pub const QUEUED: &str = "Queued";
/// trainyard: admitted and placed.
pub const ADMITTED: &str = "Admitted";
/// trainyard: every node under an admitted gang is usable (False names the lost ones).
pub const NODES_READY: &str = "NodesReady";

/// The conditions trainyard writes itself in standalone mode; in companion mode only its own.
pub const STANDALONE_OWNED: [&str; 6] = [QUEUED, ADMITTED, NODES_READY, SUSPENDED, COMPLETE, FAILED];
/// The conditions trainyard writes in companion mode (Kubeflow Trainer writes the rest).
pub const COMPANION_OWNED: [&str; 3] = [QUEUED, ADMITTED, NODES_READY];

/// A condition to set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Want {
    /// Condition type.
    pub type_: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

impl Want {
    /// A condition with the given values.
    pub fn new(type_: &'static str, status: bool, reason: impl Into<String>, message: impl Into<String>) -> Want {
        Want { type_, status, reason: reason.into(), message: message.into() }
    }
}

/// The owned conditions after setting `wants` on `current`: untouched owned conditions stay, and a
/// condition keeps its transition time unless its status flips. `None` when nothing would change.
pub fn merge(
    current: &[Condition],
    owned: &[&str],
    wants: &[Want],
    generation: Option<i64>,
    now: &Time,
) -> Option<Vec<Condition>> {
    let mut out: Vec<Condition> = current.iter().filter(|c| owned.contains(&c.type_.as_str())).cloned().collect();
    let before = out.clone();
    for want in wants {
        let status = if want.status { "True" } else { "False" };
        let reason = if want.reason.is_empty() { want.type_.to_string() } else { want.reason.clone() };
        match out.iter_mut().find(|c| c.type_ == want.type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = now.clone();
                }
                c.status = status.to_string();
                c.reason = reason;
                c.message = want.message.clone();
                c.observed_generation = generation.or(c.observed_generation);
            }
            None => out.push(Condition {
                type_: want.type_.to_string(),
                status: status.to_string(),
                reason,
                message: want.message.clone(),
                last_transition_time: now.clone(),
                observed_generation: generation,
            }),
        }
    }
    (out != before).then_some(out)
}

/// Whether `type_` is `True` in `conditions`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// The reason of `type_`, if the condition exists.
pub fn reason_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let first = merge(&[], &STANDALONE_OWNED, &[Want::new(QUEUED, true, "QuotaExceeded", "m")], None, &at(1))
            .expect("a new condition is a change");
        assert_eq!(first[0].last_transition_time, at(1));
        let same = merge(&first, &STANDALONE_OWNED, &[Want::new(QUEUED, true, "QuotaExceeded", "m")], None, &at(2));
        assert_eq!(same, None, "setting the same condition again is no change");
        let reason =
            merge(&first, &STANDALONE_OWNED, &[Want::new(QUEUED, true, "Capacity", "m")], None, &at(3)).unwrap();
        assert_eq!(reason[0].last_transition_time, at(1));
        let flip = merge(&first, &STANDALONE_OWNED, &[Want::new(QUEUED, false, "Admitted", "")], None, &at(4)).unwrap();
        assert_eq!(flip[0].last_transition_time, at(4));
        assert_eq!(flip[0].reason, "Admitted");
    }

    #[test]
    fn conditions_of_other_owners_are_not_sent() {
        let foreign = Condition {
            type_: "Created".into(),
            status: "True".into(),
            reason: "x".into(),
            message: String::new(),
            last_transition_time: at(0),
            observed_generation: None,
        };
        let out = merge(&[foreign], &COMPANION_OWNED, &[Want::new(ADMITTED, true, "Admitted", "")], None, &at(1));
        assert_eq!(out.unwrap().iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(), vec![ADMITTED]);
    }
}
