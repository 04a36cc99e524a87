//! The sweep file: parsed and checked, then expanded into its points in a fixed order.

use serde::Deserialize;
use serde_saphyr::Spanned;
use trainyard_topology::{InputError, PlacementPolicy};

/// Values of one point's axes as the file gives them (any may be left to `base` or the default).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AxesFile {
    cluster: Option<String>,
    policy: Option<String>,
    placement: Option<String>,
    load: Option<f64>,
    estimate_error: Option<f64>,
    seed: Option<u64>,
    mtbf: Option<String>,
}

/// Lists of values per axis; the sweep takes every combination.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GridFile {
    cluster: Option<Spanned<Vec<String>>>,
    policy: Option<Spanned<Vec<String>>>,
    placement: Option<Spanned<Vec<String>>>,
    load: Option<Spanned<Vec<f64>>>,
    estimate_error: Option<Spanned<Vec<f64>>>,
    seed: Option<Spanned<Vec<u64>>>,
    mtbf: Option<Spanned<Vec<String>>>,
}

/// How failing hosts are repaired and gangs restart, for points with an `mtbf`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailuresFile {
    repair: Option<Spanned<String>>,
    checkpoint_interval: Option<Spanned<String>>,
    restart_cost: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    trace: Option<Spanned<String>>,
    format: Option<String>,
    estimates: Option<Spanned<String>>,
    #[serde(default)]
    base: Option<Spanned<AxesFile>>,
    grid: Option<Spanned<GridFile>>,
    #[serde(default)]
    points: Vec<Spanned<AxesFile>>,
    failures: Option<Spanned<FailuresFile>>,
}

/// One point of a sweep: a full set of values.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Position in the sweep, from 0.
    pub index: usize,
    /// A cluster file (relative to the sweep file) or `demo`, the built-in cluster.
    pub cluster: String,
    /// A built-in policy name or a policy file (relative to the sweep file).
    pub policy: String,
    /// Placement policy overriding the policy's own.
    pub placement: Option<PlacementPolicy>,
    /// Arrivals come this many times as fast (gaps between submissions divided by it).
    pub load: f64,
    /// Runtime estimates are the actual runtime times a factor drawn uniformly from
    /// `[1 - e, 1 + e]` (at least one second); 0 keeps the trace's estimates.
    pub estimate_error: f64,
    /// Seed of the estimate errors and of host failures: points differing only in it are
    /// repetitions.
    pub seed: u64,
    /// Hosts fail after this mean time (as written, and in seconds); no failures when `None`.
    pub mtbf: Option<(String, u64)>,
    /// Line of the sweep file the point comes from.
    pub line: u64,
}

impl Point {
    /// The point's values in a fixed order, e.g. `cluster=demo policy=fifo load=1 seed=3`:
    /// names it in tables, files and errors.
    pub fn label(&self) -> String {
        format!("{} seed={}", self.group_label(), self.seed)
    }

    /// The label without the seed: points that differ only in their seed form one group.
    pub fn group_label(&self) -> String {
        let mut text = format!("cluster={} policy={}", self.cluster, self.policy);
        if let Some(p) = self.placement {
            text.push_str(&format!(" placement={p}"));
        }
        text.push_str(&format!(" load={} estimate_error={}", self.load, self.estimate_error));
        if let Some((mtbf, _)) = &self.mtbf {
            text.push_str(&format!(" mtbf={mtbf}"));
        }
        text
    }
}

/// A checked sweep file.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSpec {
    /// The trace file (relative to the sweep file); the built-in synthetic trace when absent.
    pub trace: Option<String>,
    /// The line of the sweep file that names the trace (0 without one).
    pub trace_line: u64,
    /// The trace's format, when given.
    pub format: Option<String>,
    /// Estimates from each job's actual runtime instead of the trace's.
    pub actual_estimates: bool,
    /// Every point, in order: the grid's combinations (last axis fastest), then `points`.
    pub points: Vec<Point>,
    /// Repair and restart of the points with an `mtbf`.
    pub failures: FailureSettings,
}

/// The failure model's settings a sweep shares (defaults as `trainyard simulate`'s flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailureSettings {
    /// Mean time to repair a host, seconds (default 8h).
    pub repair_s: u64,
    /// Checkpoint interval, seconds (default 1h).
    pub checkpoint_interval_s: u64,
    /// Restart cost, seconds (default 10m).
    pub restart_s: u64,
}

impl Default for FailureSettings {
    fn default() -> FailureSettings {
        FailureSettings { repair_s: 8 * 3600, checkpoint_interval_s: 3600, restart_s: 600 }
    }
}

impl SweepSpec {
    /// A point's failure model: none without an `mtbf`; failures drawn with the point's seed, so
    /// seeds repeat a variation with other failures too.
    pub fn failure_model(&self, point: &Point) -> Option<crate::failures::FailureModel> {
        point.mtbf.as_ref().map(|(_, mtbf_s)| crate::failures::FailureModel {
            mtbf_s: *mtbf_s,
            repair_s: self.failures.repair_s,
            checkpoint_interval_s: self.failures.checkpoint_interval_s,
            restart_s: self.failures.restart_s,
            seed: point.seed,
        })
    }
}

/// Points one file may make (a typo such as a seed list of a million is refused, not run).
const MAX_POINTS: usize = 100_000;

impl SweepSpec {
    /// Parses and checks a sweep file; every error names `source_name`, and the line where
    /// it has one.
    pub fn parse(text: &str, source_name: &str) -> Result<SweepSpec, InputError> {
        let file: SweepFile = trainyard_topology::input_text::yaml(text, source_name)?;
        let bad =
            |line: u64, field: &str, message: String| InputError::invalid(source_name, Some(line), field, message);
        let actual_estimates = match &file.estimates {
            None => false,
            Some(s) if s.value == "trace" => false,
            Some(s) if s.value == "actual" => true,
            Some(s) => {
                return Err(bad(s.referenced.line(), "estimates", format!("`{}`: use trace or actual", s.value)));
            }
        };
        let (base, base_line) = match file.base {
            Some(b) => (b.value, b.referenced.line()),
            None => (AxesFile::default(), 1),
        };
        let mut points = Vec::new();
        if let Some(grid) = &file.grid {
            let line = grid.referenced.line();
            let g = &grid.value;
            // Each axis: its values as partial points, or the one "not varied" value.
            let mut axes: Vec<Vec<AxesFile>> = Vec::new();
            let mut add = |name: &str, values: Option<Vec<AxesFile>>, at: u64| -> Result<(), InputError> {
                match values {
                    Some(v) if v.is_empty() => {
                        Err(bad(at, &format!("grid.{name}"), "an empty list: give at least one value".into()))
                    }
                    Some(v) => {
                        // The same value twice would run the same point twice under two indices.
                        let labels: Vec<String> = v.iter().map(axis_value).collect();
                        if let Some((i, dup)) = labels.iter().enumerate().find(|(i, l)| labels[..*i].contains(l)) {
                            return Err(bad(
                                at,
                                &format!("grid.{name}"),
                                format!(
                                    "`{dup}` is listed twice (values {} and {})",
                                    labels.iter().position(|l| l == dup).unwrap_or(0) + 1,
                                    i + 1
                                ),
                            ));
                        }
                        axes.push(v);
                        Ok(())
                    }
                    None => Ok(()),
                }
            };
            macro_rules! axis {
                ($field:ident) => {
                    add(
                        stringify!($field),
                        g.$field.as_ref().map(|s| {
                            s.value
                                .iter()
                                .map(|v| AxesFile { $field: Some(v.clone()), ..AxesFile::default() })
                                .collect()
                        }),
                        g.$field.as_ref().map_or(line, |s| s.referenced.line()),
                    )?
                };
            }
            axis!(cluster);
            axis!(policy);
            axis!(placement);
            axis!(load);
            axis!(estimate_error);
            axis!(seed);
            axis!(mtbf);
            if axes.is_empty() {
                return Err(bad(
                    line,
                    "grid",
                    "no axis listed: give cluster, policy, placement, load, estimate_error, seed or mtbf".into(),
                ));
            }
            let count = axes.iter().try_fold(1usize, |n, a| n.checked_mul(a.len())).unwrap_or(usize::MAX);
            if count > MAX_POINTS {
                return Err(bad(line, "grid", format!("{count} points; at most {MAX_POINTS}")));
            }
            for combination in 0..count {
                let mut values = base.clone();
                let mut rest = combination;
                for axis in axes.iter().rev() {
                    overlay(&mut values, &axis[rest % axis.len()]);
                    rest /= axis.len();
                }
                points.push(check_point(values, points.len(), line, &bad)?);
            }
        }
        for extra in file.points {
            let mut values = base.clone();
            overlay(&mut values, &extra.value);
            points.push(check_point(values, points.len(), extra.referenced.line(), &bad)?);
        }
        if points.is_empty() {
            return Err(bad(base_line, "grid", "the sweep has no points: give a grid or points".into()));
        }
        if points.len() > MAX_POINTS {
            return Err(bad(base_line, "points", format!("{} points; at most {MAX_POINTS}", points.len())));
        }
        let mut failures = FailureSettings::default();
        if let Some(f) = &file.failures {
            let duration = |value: &Option<Spanned<String>>, field: &str, into: &mut u64| -> Result<(), InputError> {
                let Some(v) = value else { return Ok(()) };
                match trainyard_policies::parse_duration(&v.value) {
                    Some(s) if s > 0 => {
                        *into = s;
                        Ok(())
                    }
                    _ => Err(bad(
                        v.referenced.line(),
                        &format!("failures.{field}"),
                        format!("`{}`: a duration above zero (e.g. 30m, 8h, 2d)", v.value),
                    )),
                }
            };
            duration(&f.value.repair, "repair", &mut failures.repair_s)?;
            duration(&f.value.checkpoint_interval, "checkpoint_interval", &mut failures.checkpoint_interval_s)?;
            duration(&f.value.restart_cost, "restart_cost", &mut failures.restart_s)?;
        }
        let (trace, trace_line) = match file.trace {
            Some(t) => (Some(t.value), t.referenced.line()),
            None => (None, 0),
        };
        let spec = SweepSpec { trace, trace_line, format: file.format, actual_estimates, points, failures };
        for point in &spec.points {
            let names = crate::failures::SettingNames::SWEEP_FIELDS;
            if let Some(Err(why)) = spec.failure_model(point).map(|m| m.check(&names)) {
                return Err(bad(point.line, "mtbf", format!("point {}: {why}", point.index)));
            }
        }
        Ok(spec)
    }
}

/// The one value a grid axis's entry gives, as the file wrote it.
fn axis_value(values: &AxesFile) -> String {
    let AxesFile { cluster, policy, placement, load, estimate_error, seed, mtbf } = values;
    [
        cluster.clone(),
        policy.clone(),
        placement.clone(),
        load.map(|v| v.to_string()),
        estimate_error.map(|v| v.to_string()),
        seed.map(|v| v.to_string()),
        mtbf.clone(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(",")
}

/// Values given in `top` replace those of `values`.
fn overlay(values: &mut AxesFile, top: &AxesFile) {
    let AxesFile { cluster, policy, placement, load, estimate_error, seed, mtbf } = top.clone();
    values.cluster = cluster.or(values.cluster.take());
    values.policy = policy.or(values.policy.take());
    values.placement = placement.or(values.placement.take());
    values.load = load.or(values.load);
    values.estimate_error = estimate_error.or(values.estimate_error);
    values.seed = seed.or(values.seed);
    values.mtbf = mtbf.or(values.mtbf.take());
}

/// A full point from its values, with the defaults filled in; bad values name the point.
fn check_point(
    values: AxesFile,
    index: usize,
    line: u64,
    bad: &impl Fn(u64, &str, String) -> InputError,
) -> Result<Point, InputError> {
    let load = values.load.unwrap_or(1.0);
    if !(load.is_finite() && load > 0.0) {
        return Err(bad(line, "load", format!("point {index}: {load}: a load factor is a positive number")));
    }
    let estimate_error = values.estimate_error.unwrap_or(0.0);
    if !(estimate_error.is_finite() && estimate_error >= 0.0) {
        return Err(bad(line, "estimate_error", format!("point {index}: {estimate_error}: an error is 0 or more")));
    }
    let placement = match values.placement {
        None => None,
        Some(name) => {
            Some(name.parse::<PlacementPolicy>().map_err(|e| bad(line, "placement", format!("point {index}: {e}")))?)
        }
    };
    let mtbf = match values.mtbf {
        None => None,
        Some(text) if text == "none" => None,
        Some(text) => match trainyard_policies::parse_duration(&text) {
            Some(s) if s > 0 => Some((text, s)),
            _ => {
                return Err(bad(
                    line,
                    "mtbf",
                    format!("point {index}: `{text}`: a duration above zero (e.g. 2000h, 90d) or none"),
                ));
            }
        },
    };
    Ok(Point {
        index,
        cluster: values.cluster.unwrap_or_else(|| "demo".into()),
        policy: values.policy.unwrap_or_else(|| "easy-backfill".into()),
        placement,
        load,
        estimate_error,
        seed: values.seed.unwrap_or(0),
        mtbf,
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_gives_every_combination_last_axis_fastest_then_the_listed_points() {
        let text = "base: {estimate_error: 0.5}\ngrid:\n  policy: [fifo, easy-backfill]\n  seed: [1, 2, 3]\npoints:\n  - {cluster: big.yaml, load: 2}\n";
        let spec = SweepSpec::parse(text, "s.yaml").unwrap();
        let labels: Vec<String> = spec.points.iter().map(Point::label).collect();
        assert_eq!(labels.len(), 7);
        assert_eq!(labels[0], "cluster=demo policy=fifo load=1 estimate_error=0.5 seed=1");
        assert_eq!(labels[1], "cluster=demo policy=fifo load=1 estimate_error=0.5 seed=2");
        assert_eq!(labels[3], "cluster=demo policy=easy-backfill load=1 estimate_error=0.5 seed=1");
        assert_eq!(labels[6], "cluster=big.yaml policy=easy-backfill load=2 estimate_error=0.5 seed=0");
        assert_eq!(spec.points[6].line, 6);
        assert_eq!(spec.points.iter().map(|p| p.index).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn mtbf_is_an_axis_and_failures_share_their_settings() {
        let text = "grid:\n  mtbf: [none, 2000h]\n  seed: [1, 2]\nfailures: {repair: 4h, restart_cost: 5m}\n";
        let spec = SweepSpec::parse(text, "s.yaml").unwrap();
        let labels: Vec<String> = spec.points.iter().map(Point::label).collect();
        assert_eq!(labels[0], "cluster=demo policy=easy-backfill load=1 estimate_error=0 seed=1");
        assert_eq!(labels[3], "cluster=demo policy=easy-backfill load=1 estimate_error=0 mtbf=2000h seed=2");
        assert_eq!(spec.failure_model(&spec.points[0]), None);
        let model = spec.failure_model(&spec.points[3]).unwrap();
        assert_eq!(
            (model.mtbf_s, model.repair_s, model.checkpoint_interval_s, model.restart_s),
            (7_200_000, 14_400, 3600, 300)
        );
        assert_eq!(model.seed, 2);
    }

    #[test]
    fn bad_files_are_refused_with_the_file_line_and_point() {
        let err = |text: &str| SweepSpec::parse(text, "s.yaml").unwrap_err().to_string();
        let unknown = err("grid:\n  policy: [fifo]\n  sed: [1]\n");
        assert!(unknown.starts_with("s.yaml: ") && unknown.contains("sed") && unknown.contains("line 3"), "{unknown}");
        let empty = err("grid:\n  seed: []\n");
        assert!(empty.contains("line 2") && empty.contains("grid.seed") && empty.contains("empty"), "{empty}");
        let none = err("trace: t.csv\n");
        assert!(none.contains("no points"), "{none}");
        let no_axis = err("grid: {}\n");
        assert!(no_axis.contains("no axis"), "{no_axis}");
        let load = err("grid:\n  seed: [1]\npoints:\n  - {load: 0}\n");
        assert!(load.contains("line 4") && load.contains("point 1") && load.contains("load"), "{load}");
        let placement = err("grid:\n  placement: [greedy, bestest]\n");
        assert!(placement.contains("point 1") && placement.contains("bestest"), "{placement}");
        let estimates = err("estimates: guess\ngrid: {seed: [1]}\n");
        assert!(estimates.contains("line 1") && estimates.contains("guess"), "{estimates}");
        let mtbf = err("grid:\n  mtbf: [2000h, sometimes]\n");
        assert!(mtbf.contains("line 2") && mtbf.contains("point 1") && mtbf.contains("sometimes"), "{mtbf}");
        let repair = err("grid: {seed: [1]}\nfailures: {repair: 0}\n");
        assert!(repair.contains("line 2") && repair.contains("failures.repair"), "{repair}");
        let huge = err(
            "grid:\n  seed: [1,2,3,4,5,6,7,8,9,10]\n  load: [1,2,3,4,5,6,7,8,9,10]\n  estimate_error: [0,1,2,3,4,5,6,7,8,9]\n  cluster: [a,b,c,d,e,f,g,h,i,j]\n  policy: [a,b,c,d,e,f,g,h,i,j,k]\n",
        );
        assert!(huge.contains("110000 points"), "{huge}");
    }
}
