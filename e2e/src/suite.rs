//! What every scenario shares (the control plane, the stand-ins, the binary under test, the
//! kubeconfig the controller runs with) and how a scenario reports: checks that either hold or
//! end the scenario with the sentence that failed, and figures worth printing.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::assets::UpstreamCrds;
use crate::kube_util::Kube;
use crate::plane::Plane;
use crate::standins::nodes::Nodes;

/// The shared state of one run.
pub struct Suite {
    /// The control plane.
    pub plane: Plane,
    /// The control plane's binaries (scenarios start more planes from them).
    pub assets: crate::assets::Assets,
    /// The harness's client (system:masters).
    pub kube: Kube,
    /// Fake nodes' Lease renewals.
    pub nodes: Nodes,
    /// The trainyard binary.
    pub binary: PathBuf,
    /// The repository (charts, scripts).
    pub repo: PathBuf,
    /// This run's folder (logs, kubeconfigs, files scenarios write).
    pub run_dir: PathBuf,
    /// The upstream CRDs.
    pub crds: UpstreamCrds,
    /// The kubeconfig controllers run with: the chart's ServiceAccount once the chart scenario
    /// installed it, the harness's until then.
    pub controller_kubeconfig: PathBuf,
    /// Whether `controller_kubeconfig` is the chart's ServiceAccount.
    pub chart_rbac: bool,
    /// Where controllers keep their leader Lease (the chart's release namespace, whose Role lets
    /// its ServiceAccount write Leases).
    pub lease_namespace: String,
    /// The Python with the Helm SDK, when it could be set up.
    pub python: Option<PathBuf>,
}

/// What a scenario found.
#[derive(Debug, Default)]
pub struct Checks {
    passed: usize,
    figures: Vec<String>,
}

impl Checks {
    /// One check: holds, or ends the scenario with `what` (and what was seen).
    pub fn that(&mut self, holds: bool, what: impl AsRef<str>) -> Result<()> {
        if !holds {
            bail!("{}", what.as_ref());
        }
        self.passed += 1;
        Ok(())
    }

    /// Counts a check that a helper already made (a wait that ended in time).
    pub fn done(&mut self) {
        self.passed += 1;
    }

    /// A figure for the summary (a latency, a count).
    pub fn figure(&mut self, text: impl Into<String>) {
        self.figures.push(text.into());
    }

    /// How many checks held.
    pub fn passed(&self) -> usize {
        self.passed
    }

    /// The figures, in order.
    pub fn figures(&self) -> &[String] {
        &self.figures
    }
}

/// Seconds with two decimals, for figures.
pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The median, smallest and largest of some durations.
pub fn spread(mut d: Vec<Duration>) -> String {
    if d.is_empty() {
        return "none".into();
    }
    d.sort();
    format!("median {} (min {}, max {}, n={})", secs(d[d.len() / 2]), secs(d[0]), secs(d[d.len() - 1]), d.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_check_ends_with_its_sentence() {
        let mut c = Checks::default();
        c.that(true, "fine").unwrap();
        let err = c.that(false, "pod p0 is on n2, recorded n1").unwrap_err().to_string();
        assert_eq!(err, "pod p0 is on n2, recorded n1");
        assert_eq!(c.passed(), 1);
    }

    #[test]
    fn spreads_show_the_median() {
        let s = spread(vec![Duration::from_millis(300), Duration::from_millis(100), Duration::from_millis(200)]);
        assert_eq!(s, "median 0.20 s (min 0.10 s, max 0.30 s, n=3)");
    }
}
