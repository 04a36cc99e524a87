//! Slowdown model: a gang spread over a wider topology domain runs slower than one kept close.
//!
//! A [`Slowdown`] is what the user wrote (`rack=1.05,cluster=1.25`); resolved against a
//! cluster it becomes a [`SlowdownTable`] with one factor per depth. Factors are kept in
//! millionths so that `ceil(runtime x factor)` is exact integer arithmetic: `100 x 1.1` must
//! give 110 seconds, not 111 after a floating-point `110.00000000000001`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use trainyard_topology::Topology;

/// Factors are stored in millionths.
const ONE: u64 = 1_000_000;

/// Largest accepted factor; more is surely a typo and would overflow the virtual clock.
const MAX_FACTOR: f64 = 1000.0;

/// The name [`Topology::level_name`] gives the root domain.
const CLUSTER_LEVEL: &str = "cluster";

/// A bad slowdown specification.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlowdownError {
    /// One `LEVEL=FACTOR` entry cannot be used.
    #[error("bad slowdown entry `{entry}`: {message}")]
    Entry {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        message: String,
    },
    /// The entry names a level the cluster does not have.
    #[error("slowdown level `{level}` is not a level of cluster `{cluster}`; known levels: {known}")]
    UnknownLevel {
        /// The level asked for.
        level: String,
        /// The cluster's name.
        cluster: String,
        /// `cluster` and the cluster's levels, outermost first, comma separated.
        known: String,
    },
}

/// Runtime factors by topology level, as the user gave them (no cluster needed yet).
///
/// A gang's factor is the one of the level of the smallest domain holding all its pods.
/// Levels not listed take the factor of the nearest listed level inside them, 1.0 if none.
/// The default, [`Slowdown::none`], changes no runtime.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slowdown {
    /// `(level, factor in millionths)` in the order written.
    entries: Vec<(String, u64)>,
}

impl Slowdown {
    /// No slowdown at all: every gang runs exactly its trace runtime.
    pub fn none() -> Slowdown {
        Slowdown::default()
    }

    /// True when no level is listed.
    pub fn is_none(&self) -> bool {
        self.entries.is_empty()
    }

    /// The factor listed for `level`, if it is listed.
    pub fn listed(&self, level: &str) -> Option<f64> {
        self.entries.iter().find(|(l, _)| l == level).map(|&(_, m)| to_f64(m))
    }

    /// One factor per depth of `topo`, or an error naming a listed level it does not have.
    pub fn resolve(&self, topo: &Topology) -> Result<SlowdownTable, SlowdownError> {
        let names: Vec<&str> = std::iter::once(CLUSTER_LEVEL).chain(topo.levels().iter().map(String::as_str)).collect();
        for (level, _) in &self.entries {
            if !names.contains(&level.as_str()) {
                return Err(SlowdownError::UnknownLevel {
                    level: level.clone(),
                    cluster: topo.name().to_string(),
                    known: names.join(", "),
                });
            }
        }
        // Walk from the host level outwards so that an unlisted level inherits from inside.
        let mut levels = Vec::with_capacity(names.len());
        let mut inherited: Option<(&str, u64)> = None;
        for &name in names.iter().rev() {
            let own = self.entries.iter().find(|(l, _)| l == name).map(|&(_, m)| m);
            if let Some(m) = own {
                inherited = Some((name, m));
            }
            let (from, millionths) = inherited.unwrap_or(("default", ONE));
            levels.push(LevelFactor { level: name.to_string(), factor: to_f64(millionths), from: from.to_string() });
        }
        levels.reverse();
        let millionths = levels.iter().map(|l| to_millionths(l.factor)).collect();
        Ok(SlowdownTable { levels, millionths })
    }
}

impl FromStr for Slowdown {
    type Err = SlowdownError;

    /// Parses `LEVEL=FACTOR[,LEVEL=FACTOR...]`; an empty string or `none` is no slowdown.
    fn from_str(text: &str) -> Result<Slowdown, SlowdownError> {
        let text = text.trim();
        if text.is_empty() || text == "none" {
            return Ok(Slowdown::none());
        }
        let mut entries: Vec<(String, u64)> = Vec::new();
        for raw in text.split(',') {
            let bad = |message: String| SlowdownError::Entry { entry: raw.trim().to_string(), message };
            if raw.trim().is_empty() {
                return Err(bad("empty entry (a stray comma?)".to_string()));
            }
            let Some((level, factor)) = raw.split_once('=') else {
                return Err(bad("expected LEVEL=FACTOR, e.g. rack=1.05".to_string()));
            };
            let (level, factor) = (level.trim(), factor.trim());
            if level.is_empty() {
                return Err(bad("the level name is empty".to_string()));
            }
            let value: f64 = factor.parse().map_err(|_| bad(format!("factor `{factor}` is not a number")))?;
            if !value.is_finite() {
                return Err(bad(format!("factor `{factor}` is not finite")));
            }
            if value < 1.0 {
                return Err(bad(format!("factor {factor} is below 1.0; a wider span never runs faster")));
            }
            if value > MAX_FACTOR {
                return Err(bad(format!("factor {factor} is above the limit of {MAX_FACTOR}")));
            }
            if entries.iter().any(|(l, _)| l == level) {
                return Err(bad(format!("level `{level}` is listed twice")));
            }
            entries.push((level.to_string(), to_millionths(value)));
        }
        Ok(Slowdown { entries })
    }
}

impl fmt::Display for Slowdown {
    /// The canonical text form, which [`Slowdown::from_str`] reads back; `none` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("none");
        }
        for (i, (level, m)) in self.entries.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{level}={}", to_f64(*m))?;
        }
        Ok(())
    }
}

/// The factor in force at one level of a cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelFactor {
    /// Level name; `cluster` for the whole cluster.
    pub level: String,
    /// Runtime factor of gangs whose smallest enclosing domain is at this level.
    pub factor: f64,
    /// The level whose listed factor this is (the level itself when listed), or `default`.
    pub from: String,
}

/// A [`Slowdown`] resolved against one cluster: a factor for every depth.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowdownTable {
    /// Index = depth: `cluster` first, the host level last.
    levels: Vec<LevelFactor>,
    millionths: Vec<u64>,
}

impl Default for SlowdownTable {
    /// The table of a cluster with no levels and no slowdown: only `cluster` at 1.0.
    fn default() -> SlowdownTable {
        let cluster = LevelFactor { level: CLUSTER_LEVEL.to_string(), factor: 1.0, from: "default".to_string() };
        SlowdownTable { levels: vec![cluster], millionths: vec![ONE] }
    }
}

impl SlowdownTable {
    /// Every level with its factor, `cluster` first and the host level last.
    pub fn levels(&self) -> &[LevelFactor] {
        &self.levels
    }

    /// The entry of a domain at `depth` (0 = the whole cluster); the innermost one beyond.
    pub fn at_depth(&self, depth: u8) -> &LevelFactor {
        &self.levels[usize::from(depth).min(self.levels.len() - 1)]
    }

    /// The factor of a level name, if the cluster has that level.
    pub fn factor_of(&self, level: &str) -> Option<f64> {
        self.levels.iter().find(|l| l.level == level).map(|l| l.factor)
    }

    /// True when every factor is 1.0.
    pub fn is_identity(&self) -> bool {
        self.millionths.iter().all(|&m| m == ONE)
    }

    /// `ceil(runtime x factor)` for a gang spanning a domain at `depth`, saturating.
    pub fn apply(&self, runtime: u64, depth: u8) -> u64 {
        let m = self.millionths[usize::from(depth).min(self.millionths.len() - 1)];
        if m == ONE {
            return runtime;
        }
        let scaled = (u128::from(runtime) * u128::from(m)).div_ceil(u128::from(ONE));
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }
}

/// Millionths of a factor; exact for factors written with up to six decimals.
fn to_millionths(factor: f64) -> u64 {
    // The factor is checked to lie in [1, MAX_FACTOR], so the product fits easily.
    (factor * ONE as f64).round() as u64
}

fn to_f64(millionths: u64) -> f64 {
    millionths as f64 / ONE as f64
}

#[cfg(test)]
mod tests {
    use trainyard_topology::Cluster;

    use super::*;

    fn topo() -> Topology {
        let yaml = "name: demo\nlevels: [block, rack, host]\ngenerate:\n  counts: [2, 2, 2]\n  node: {gpus: 8}\n";
        Cluster::from_yaml(yaml, "demo.yaml").unwrap().topology().clone()
    }

    fn factors(spec: &str) -> Vec<(String, f64, String)> {
        let table = spec.parse::<Slowdown>().unwrap().resolve(&topo()).unwrap();
        table.levels().iter().map(|l| (l.level.clone(), l.factor, l.from.clone())).collect()
    }

    fn entry_error(spec: &str) -> (String, String) {
        match spec.parse::<Slowdown>() {
            Err(SlowdownError::Entry { entry, message }) => (entry, message),
            other => panic!("{spec:?}: expected an entry error, got {other:?}"),
        }
    }

    #[test]
    fn parses_and_prints_back() {
        let s: Slowdown = "rack=1.05, block=1.15 ,cluster=1.25".parse().unwrap();
        assert_eq!(s.listed("rack"), Some(1.05));
        assert_eq!(s.listed("block"), Some(1.15));
        assert_eq!(s.listed("cluster"), Some(1.25));
        assert_eq!(s.listed("host"), None);
        assert_eq!(s.to_string(), "rack=1.05,block=1.15,cluster=1.25");
        assert_eq!(s.to_string().parse::<Slowdown>().unwrap(), s);
        for empty in ["", "  ", "none"] {
            assert!(empty.parse::<Slowdown>().unwrap().is_none(), "{empty:?}");
        }
        assert_eq!(Slowdown::none().to_string(), "none");
        assert_eq!("host=1".parse::<Slowdown>().unwrap().listed("host"), Some(1.0));
    }

    #[test]
    fn bad_entries_are_named() {
        let cases = [
            ("rack=1.05,rack", "rack", "expected LEVEL=FACTOR"),
            ("rack=fast", "rack=fast", "factor `fast` is not a number"),
            ("=1.2", "=1.2", "level name is empty"),
            ("rack=1.1,", "", "empty entry"),
            ("cluster=0.9", "cluster=0.9", "below 1.0"),
            ("cluster=-2", "cluster=-2", "below 1.0"),
            ("cluster=inf", "cluster=inf", "not finite"),
            ("cluster=NaN", "cluster=NaN", "not finite"),
            ("cluster=1e9", "cluster=1e9", "above the limit"),
            ("rack=1.1, rack=1.2", "rack=1.2", "listed twice"),
        ];
        for (spec, entry, needle) in cases {
            let (got_entry, message) = entry_error(spec);
            assert_eq!(got_entry, entry, "{spec:?}");
            assert!(message.contains(needle), "{spec:?}: {message}");
        }
        let shown = "rack=slow".parse::<Slowdown>().unwrap_err().to_string();
        assert_eq!(shown, "bad slowdown entry `rack=slow`: factor `slow` is not a number");
    }

    #[test]
    fn unknown_level_lists_the_known_ones() {
        let err = "rack=1.1,row=1.2".parse::<Slowdown>().unwrap().resolve(&topo()).unwrap_err();
        assert_eq!(
            err,
            SlowdownError::UnknownLevel {
                level: "row".into(),
                cluster: "demo".into(),
                known: "cluster, block, rack, host".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "slowdown level `row` is not a level of cluster `demo`; known levels: cluster, block, rack, host"
        );
    }

    #[test]
    fn unlisted_levels_inherit_from_the_nearest_listed_level_inside() {
        let d = |s: &str| s.to_string();
        assert_eq!(
            factors("rack=1.05,cluster=1.25"),
            [
                (d("cluster"), 1.25, d("cluster")),
                (d("block"), 1.05, d("rack")),
                (d("rack"), 1.05, d("rack")),
                (d("host"), 1.0, d("default")),
            ]
        );
        // Nothing listed inside `block`: it and everything inside stay at 1.0.
        assert_eq!(
            factors("cluster=1.3"),
            [
                (d("cluster"), 1.3, d("cluster")),
                (d("block"), 1.0, d("default")),
                (d("rack"), 1.0, d("default")),
                (d("host"), 1.0, d("default")),
            ]
        );
        // A listed host factor is inherited all the way out.
        let all: Vec<f64> = factors("host=1.01,block=1.2").iter().map(|l| l.1).collect();
        assert_eq!(all, [1.2, 1.2, 1.01, 1.01]);
        assert!(Slowdown::none().resolve(&topo()).unwrap().is_identity());
        assert!(!"rack=1.05".parse::<Slowdown>().unwrap().resolve(&topo()).unwrap().is_identity());
    }

    #[test]
    fn runtimes_are_ceiled_exactly() {
        let table = "rack=1.05,block=1.1,cluster=1.25".parse::<Slowdown>().unwrap().resolve(&topo()).unwrap();
        assert_eq!(table.at_depth(0).level, "cluster");
        assert_eq!(table.at_depth(3).level, "host");
        assert_eq!(table.factor_of("block"), Some(1.1));
        assert_eq!(table.factor_of("row"), None);
        // Depth: 0 cluster, 1 block, 2 rack, 3 host.
        assert_eq!(table.apply(100, 0), 125);
        assert_eq!(table.apply(101, 0), 127); // 126.25
        assert_eq!(table.apply(10, 1), 11); // 11.000000000000002 in f64
        assert_eq!(table.apply(100, 2), 105);
        assert_eq!(table.apply(101, 2), 107); // 106.05
        assert_eq!(table.apply(101, 3), 101);
        assert_eq!(table.apply(1, 2), 2);
        assert_eq!(table.apply(u64::MAX, 0), u64::MAX);
        assert_eq!(table.apply(7, 9), 7, "deeper than the hosts counts as the host level");
    }

    proptest::proptest! {
        /// For any factor written with up to six decimals, the runtime is the exact ceiling
        /// of the decimal product, computed here from the digits alone.
        #[test]
        fn apply_is_the_exact_ceiling_of_the_written_factor(
            whole in 1u64..1000,
            frac in 0u64..1_000_000,
            runtime in 0u64..(1 << 40),
        ) {
            let spec = format!("cluster={whole}.{frac:06}");
            let table = spec.parse::<Slowdown>().unwrap().resolve(&topo()).unwrap();
            let exact = (u128::from(runtime) * u128::from(whole * 1_000_000 + frac)).div_ceil(1_000_000);
            proptest::prop_assert_eq!(u128::from(table.apply(runtime, 0)), exact);
            proptest::prop_assert_eq!(table.apply(runtime, 3), runtime);
            let shown = spec.parse::<Slowdown>().unwrap().to_string();
            proptest::prop_assert_eq!(shown.parse::<Slowdown>().unwrap(), spec.parse::<Slowdown>().unwrap());
        }
    }

    #[test]
    fn identity_changes_no_runtime() {
        let table = SlowdownTable::default();
        assert!(table.is_identity());
        for runtime in [0, 1, 59, 3600, u64::MAX] {
            for depth in 0..4 {
                assert_eq!(table.apply(runtime, depth), runtime);
            }
        }
    }
}
