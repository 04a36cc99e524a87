//! A point's variation of the trace: arrivals compressed by the load factor, runtime
//! estimates drawn around the actual runtimes.

use trainyard_topology::rng::SplitMix64;

use crate::TraceJob;

/// The jobs as a point replays them: gaps between submissions divided by `load` (the first
/// submission stays), and, with `estimate_error` e > 0, each estimate the actual runtime times
/// a factor drawn uniformly from `[1 - e, 1 + e]` (at least one second), in job order from
/// `seed`. The order of the jobs does not change.
pub fn vary_trace(jobs: &[TraceJob], load: f64, estimate_error: f64, seed: u64) -> Vec<TraceJob> {
    let first = jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    let mut rng = SplitMix64::new(seed);
    jobs.iter()
        .map(|job| {
            let mut job = job.clone();
            if load != 1.0 {
                job.submit = first + ((job.submit - first) as f64 / load).round() as u64;
            }
            if estimate_error > 0.0 {
                let factor = 1.0 + estimate_error * (2.0 * rng.unit() - 1.0);
                job.runtime_estimate = Some(((job.runtime as f64 * factor).round() as u64).max(1));
            }
            job
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_topology::{GangShape, Resources, TopologyRequest};

    fn jobs() -> Vec<TraceJob> {
        (0..50u64)
            .map(|i| TraceJob {
                id: format!("j{i}"),
                line: i + 2,
                submit: 100 + i * 10,
                runtime: 1000,
                runtime_estimate: None,
                tenant: "t".into(),
                priority: 0,
                gang: GangShape::single(1, Resources::gpus(1), TopologyRequest::Unconstrained),
                trial: None,
            })
            .collect()
    }

    #[test]
    fn load_compresses_gaps_and_estimates_stay_within_the_error() {
        let base = jobs();
        let twice = vary_trace(&base, 2.0, 0.0, 7);
        assert_eq!(twice.iter().map(|j| j.submit).take(3).collect::<Vec<_>>(), vec![100, 105, 110]);
        assert!(twice.iter().all(|j| j.runtime_estimate.is_none()), "no error: the trace's estimates");
        let noisy = vary_trace(&base, 1.0, 0.5, 7);
        assert_eq!(
            noisy.iter().map(|j| j.submit).collect::<Vec<_>>(),
            base.iter().map(|j| j.submit).collect::<Vec<_>>()
        );
        let estimates: Vec<u64> = noisy.iter().map(|j| j.runtime_estimate.unwrap()).collect();
        assert!(estimates.iter().all(|&e| (500..=1500).contains(&e)), "{estimates:?}");
        assert!(estimates.iter().any(|&e| e != estimates[0]), "the factor varies per job");
        assert_eq!(vary_trace(&base, 1.0, 0.5, 7), noisy, "the same seed, the same estimates");
        assert_ne!(vary_trace(&base, 1.0, 0.5, 8), noisy, "another seed, other estimates");
    }
}
