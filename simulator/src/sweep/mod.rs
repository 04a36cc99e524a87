//! What-if sweeps: a small YAML file names variations of one replay (cluster, policy,
//! placement, load on arrivals, runtime-estimate error, seed); the sweep is every combination
//! of its `grid` lists plus the `points` it lists. Pure: the caller reads the files, runs the
//! points (in any order, on any machine) and hands the results back for the comparison.
//!
//! ```yaml
//! trace: ../../data/traces/helios-excerpt.csv   # relative to this file; built-in synthetic trace when absent
//! format: dirlab                                # detected when absent
//! estimates: actual                             # trace (default) or actual
//! base: {estimate_error: 0.5}                   # values every point starts from
//! grid:
//!   cluster: [../clusters/helios-512.yaml, ../clusters/helios-704.yaml]
//!   policy: [fifo, easy-backfill]
//!   seed: [1, 2, 3, 4]
//! points:                                       # more points, each on top of `base`
//!   - {cluster: demo, policy: easy-backfill, load: 1.5}
//!   - {mtbf: 2000h}                             # hosts fail (any axis may list mtbf values or none)
//! failures: {repair: 8h, checkpoint_interval: 1h, restart_cost: 10m}   # for points with an mtbf
//! ```

mod compare;
mod spec;
mod vary;

pub use compare::{Comparison, GroupRow, MetricCi, PointResult, compare, confidence_half_width};
pub use spec::{FailureSettings, Point, SweepSpec};
pub use vary::vary_trace;
