//! A trial of a hyperparameter search (Kubeflow Trainer's OptimizationJob): the search it
//! belongs to, how many of that search's trials may run at once, and the objective it reports.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The most trials of one search that may be live at once.
pub const MAX_PARALLEL: u32 = 100;

/// Which objective wins a search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The smallest objective is best (a loss).
    #[default]
    Min,
    /// The largest objective is best (an accuracy).
    Max,
}

impl Direction {
    /// The word the trace uses.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Min => "min",
            Direction::Max => "max",
        }
    }
}

/// The search a trial belongs to: its name, its limit of live trials and which objective wins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Search {
    /// Name of the search, shared by all its trials.
    pub name: String,
    /// At most this many of its trials are submitted and not yet finished at once (1 to 100).
    pub parallel: u32,
    /// Whether a larger or a smaller objective is better.
    #[serde(default)]
    pub direction: Direction,
}

impl Search {
    /// The trace's text form, `<name>:<parallel>[:max|min]`; empty means the row is no trial.
    pub fn parse(text: &str) -> Result<Option<Search>, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let parts: Vec<&str> = text.split(':').map(str::trim).collect();
        let (name, parallel, direction) = match parts[..] {
            [name, parallel] => (name, parallel, Direction::Min),
            [name, parallel, "min"] => (name, parallel, Direction::Min),
            [name, parallel, "max"] => (name, parallel, Direction::Max),
            [_, _, other] => return Err(format!("{text:?}: the direction must be max or min, found {other:?}")),
            _ => {
                return Err(format!(
                    "{text:?} is not a search; write <name>:<parallel trials>[:max|min], e.g. lr-sweep:2"
                ));
            }
        };
        if name.is_empty() {
            return Err(format!("{text:?}: the search name must not be empty"));
        }
        let parallel = match parallel.parse::<u32>() {
            Ok(n) if (1..=MAX_PARALLEL).contains(&n) => n,
            _ => {
                return Err(format!(
                    "{text:?}: parallel trials must be a whole number from 1 to {MAX_PARALLEL}, found {parallel:?}"
                ));
            }
        };
        Ok(Some(Search { name: name.to_string(), parallel, direction }))
    }
}

impl fmt::Display for Search {
    /// What [`Search::parse`] reads; `min` is the default and left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.parallel)?;
        if self.direction == Direction::Max {
            f.write_str(":max")?;
        }
        Ok(())
    }
}

/// A metric value a trial reports: always finite. Kept as the number itself rather than its
/// text, so that `0.50` and `0.5` are the same objective; finiteness makes `==` an equivalence
/// (no NaN), which is what lets [`crate::TraceJob`] stay `Eq`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Objective(f64);

impl Eq for Objective {}

impl Objective {
    /// The objective, if `value` is finite.
    pub fn new(value: f64) -> Option<Objective> {
        // -0 and 0 are one objective, written the same way.
        value.is_finite().then_some(Objective(value + 0.0))
    }

    /// The trace's text form, a finite number; empty means the trial reported none.
    pub fn parse(text: &str) -> Result<Option<Objective>, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let bad = || format!("expected a finite number, found {text:?}");
        text.parse::<f64>().ok().and_then(Objective::new).map(Some).ok_or_else(bad)
    }

    /// The value.
    pub fn value(self) -> f64 {
        self.0
    }

    /// Whether `self` beats `other` in a search of `direction` (a tie does not).
    pub fn beats(self, other: Objective, direction: Direction) -> bool {
        match direction {
            Direction::Min => self.0 < other.0,
            Direction::Max => self.0 > other.0,
        }
    }
}

impl TryFrom<f64> for Objective {
    type Error = String;

    fn try_from(value: f64) -> Result<Objective, String> {
        Objective::new(value).ok_or_else(|| format!("an objective must be a finite number, not {value}"))
    }
}

impl From<Objective> for f64 {
    fn from(o: Objective) -> f64 {
        o.0
    }
}

impl fmt::Display for Objective {
    /// The shortest text that reads back as the same number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A job that is a trial of a search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trial {
    /// The search it belongs to.
    pub search: Search,
    /// What it reported when it finished, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<Objective>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_read_and_write_back() {
        let lr = Search::parse(" lr-sweep : 2 ").unwrap().unwrap();
        assert_eq!((lr.name.as_str(), lr.parallel, lr.direction), ("lr-sweep", 2, Direction::Min));
        assert_eq!(lr.to_string(), "lr-sweep:2");
        let acc = Search::parse("acc:100:max").unwrap().unwrap();
        assert_eq!((acc.parallel, acc.direction), (100, Direction::Max));
        assert_eq!(acc.to_string(), "acc:100:max");
        assert_eq!(Search::parse("lr:3:min").unwrap().unwrap().to_string(), "lr:3");
        assert_eq!(Search::parse("  ").unwrap(), None);
    }

    #[test]
    fn bad_searches_say_what_is_wrong() {
        let err = |t: &str| Search::parse(t).unwrap_err();
        assert_eq!(err("lr"), "\"lr\" is not a search; write <name>:<parallel trials>[:max|min], e.g. lr-sweep:2");
        assert_eq!(err(":2"), "\":2\": the search name must not be empty");
        assert_eq!(err("lr:0"), "\"lr:0\": parallel trials must be a whole number from 1 to 100, found \"0\"");
        assert_eq!(err("lr:101"), "\"lr:101\": parallel trials must be a whole number from 1 to 100, found \"101\"");
        assert_eq!(err("lr:two"), "\"lr:two\": parallel trials must be a whole number from 1 to 100, found \"two\"");
        assert_eq!(err("lr:2:best"), "\"lr:2:best\": the direction must be max or min, found \"best\"");
        assert!(err("a:b:2:max").contains("is not a search"));
    }

    #[test]
    fn objectives_are_finite_numbers_compared_by_value() {
        let o = |t: &str| Objective::parse(t).unwrap().unwrap();
        assert_eq!(o("0.50"), o("0.5"));
        assert_eq!(o("-0").to_string(), "0");
        assert_eq!(o("1e-3").to_string(), "0.001");
        assert_eq!(Objective::parse("").unwrap(), None);
        for bad in ["NaN", "inf", "-infinity", "1e400", "x", "0.5.1"] {
            assert_eq!(Objective::parse(bad).unwrap_err(), format!("expected a finite number, found {bad:?}"));
        }
        assert!(o("0.1").beats(o("0.2"), Direction::Min) && o("0.2").beats(o("0.1"), Direction::Max));
        assert!(!o("0.1").beats(o("0.1"), Direction::Min));
        let back: Objective = serde_json::from_str(&serde_json::to_string(&o("2.25")).unwrap()).unwrap();
        assert_eq!(back, o("2.25"));
    }
}
