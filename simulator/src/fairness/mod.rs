//! Fairness across tenants: per-tenant service and delay, Jain indices and finish-time fairness.
//!
//! Three views, all computed from the outcomes of a replay alone:
//!
//! - **Normalised service.** Up to a horizon `H` (the last submission of the trace: after it
//!   no new work arrives and every queue only drains, so all tenants would end equal), a job
//!   asks for `gpus x min(runtime, H - submit)` GPU-seconds: what it could have run by `H` had
//!   it started on submission. It receives the share of its trace runtime it had completed by
//!   `H` (its run is stretched evenly by the placement slowdown), times its GPUs. A tenant's
//!   `service_ratio` is the sum received over the sum asked for, in `[0, 1]`: 1 means every
//!   GPU-second it asked for was delivered as soon as it asked. Unschedulable jobs ask and
//!   receive nothing, so a policy that turns a tenant away shows up here.
//! - **Slowdown.** Per finished job `(wait + run) / run`, with `run` the time it actually ran;
//!   a tenant's `mean_slowdown` is the mean over its finished jobs. The ratio is unbounded for
//!   short jobs: a 1 s job that waited an hour has slowdown 3601.
//! - **Finish-time fairness** (Themis, Mahajan et al., NSDI'20): `ρ = T_shared / T_alone`, the
//!   time a job took in the shared cluster over the time it would have taken had its tenant run
//!   alone on a `1/N` share of the cluster. `ρ <= 1` means sharing did not hurt it. Here the
//!   share is a private partition of `floor(cluster_gpus / N)` GPUs (at least 1), `N` the
//!   tenants of the replay, and `T_alone` is the job's completion time when all of its tenant's
//!   jobs run there in submission order under strict FIFO, GPUs counted without topology; a gang
//!   wider than the partition holds all of it for `runtime x gpus / partition`. The reference
//!   uses trace runtimes and submissions only, so it is the same under every policy and two
//!   replays' `ρ` differ only by their completion times. Unlike slowdown, `ρ` credits a tenant
//!   for its own backlog: a job queued behind its tenant's earlier jobs would have queued in the
//!   private partition as well. `N` counts every tenant of the replay, also those active only
//!   part of the time, so the share is that of a static partition of the cluster.
//!
//! Jain's index over values `x_1..x_n` is `(Σx)² / (n · Σx²)`: 1 when all are equal, `1/n`
//! when one tenant gets everything. It is taken over the tenants' `service_ratio` (tenants that
//! asked for no GPU time before the horizon are left out) and over their `mean_slowdown`
//! (tenants without a finished job are left out). All values equal to zero count as equal (1).
//!
//! Deterministic: tenants are kept sorted by name and every float is rounded.

mod render;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde::{Deserialize, Serialize};

use crate::job::{Fate, JobOutcome};
use crate::metrics::Distribution;

pub use render::render_table;

/// What one tenant got from a replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantStats {
    /// Tenant (queue) name.
    pub name: String,
    /// Jobs of the tenant in the trace.
    pub jobs: u64,
    /// Of those, how many finished.
    pub finished: u64,
    /// GPU-hours its finished jobs held (start to end), rounded to 3 decimals.
    pub gpu_hours: f64,
    /// GPU-hours its jobs asked for (`gpus x runtime` over all its jobs), rounded to 3 decimals.
    pub gpu_hours_demanded: f64,
    /// Seconds from submission to start, over its finished jobs.
    pub queueing_delay: Distribution,
    /// Mean seconds from submission to end over its finished jobs, rounded to 3 decimals.
    pub mean_jct_s: f64,
    /// GPU time received by the horizon over GPU time asked for by then, rounded to 6
    /// decimals; `None` when it asked for none.
    pub service_ratio: Option<f64>,
    /// Mean `(wait + run) / run` of its finished jobs, rounded to 6 decimals.
    pub mean_slowdown: Option<f64>,
    /// Mean finish-time fairness `ρ` of its finished jobs, rounded to 6 decimals.
    pub mean_rho: Option<f64>,
    /// Largest `ρ` of its finished jobs, rounded to 6 decimals.
    pub max_rho: Option<f64>,
}

/// Fairness across the tenants of a replay (see the module documentation for definitions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TenantFairness {
    /// Tenants with at least one job.
    pub tenants: u64,
    /// The horizon of the service ratios: the last submission, seconds of virtual time.
    pub service_horizon_s: u64,
    /// Jain's index over the tenants' `service_ratio`, rounded to 6 decimals.
    pub jain_service: Option<f64>,
    /// Jain's index over the tenants' `mean_slowdown`, rounded to 6 decimals.
    pub jain_slowdown: Option<f64>,
    /// Largest `ρ` of any finished job, rounded to 6 decimals.
    pub max_rho: Option<f64>,
    /// Share of finished jobs with `ρ <= 1`, rounded to 6 decimals (0 when none finished).
    pub rho_at_most_one_share: f64,
    /// One entry per tenant, sorted by name.
    pub by_tenant: Vec<TenantStats>,
}

/// Running totals of one tenant while the outcomes are scanned.
#[derive(Default)]
struct Acc {
    jobs: u64,
    gpu_seconds: u128,
    demanded_gpu_seconds: u128,
    asked_by_horizon: f64,
    received_by_horizon: f64,
    delays: Vec<u64>,
    jct_sum: u128,
    slowdowns: Vec<f64>,
    rhos: Vec<f64>,
}

impl TenantFairness {
    /// Fairness of a replay on a cluster of `cluster_gpus` GPUs.
    pub fn new(outcomes: &[JobOutcome], cluster_gpus: u64) -> TenantFairness {
        let horizon = outcomes.iter().map(|o| o.job.submit).max().unwrap_or(0);
        let alone = alone_jcts(outcomes, cluster_gpus);
        let mut tenants: BTreeMap<&str, Acc> = BTreeMap::new();
        let (mut finished, mut fair_jobs) = (0u64, 0u64);
        let mut max_rho: Option<f64> = None;
        for (outcome, &alone) in outcomes.iter().zip(&alone) {
            let job = &outcome.job;
            let gpus = job.gpus();
            let acc = tenants.entry(job.tenant.as_str()).or_default();
            acc.jobs += 1;
            acc.demanded_gpu_seconds += u128::from(gpus) * u128::from(job.runtime);
            acc.asked_by_horizon += gpus as f64 * job.runtime.min(horizon.saturating_sub(job.submit)) as f64;
            let Fate::Finished { start, end, .. } = outcome.fate else { continue };
            let run = end.saturating_sub(start).max(1);
            let jct = end.saturating_sub(job.submit).max(1);
            acc.gpu_seconds += u128::from(gpus) * u128::from(end.saturating_sub(start));
            if start < horizon {
                let ran_by_horizon = (end.min(horizon) - start) as f64 / run as f64;
                acc.received_by_horizon += gpus as f64 * job.runtime as f64 * ran_by_horizon;
            }
            acc.delays.push(start.saturating_sub(job.submit));
            acc.jct_sum += u128::from(jct);
            acc.slowdowns.push(jct as f64 / run as f64);
            let rho = jct as f64 / alone as f64;
            acc.rhos.push(rho);
            finished += 1;
            fair_jobs += u64::from(rho <= 1.0);
            max_rho = Some(max_rho.map_or(rho, |m| m.max(rho)));
        }
        let by_tenant: Vec<TenantStats> = tenants.into_iter().map(|(name, acc)| acc.into_stats(name)).collect();
        let services: Vec<f64> = by_tenant.iter().filter_map(|t| t.service_ratio).collect();
        let slowdowns: Vec<f64> = by_tenant.iter().filter_map(|t| t.mean_slowdown).collect();
        TenantFairness {
            tenants: by_tenant.len() as u64,
            service_horizon_s: horizon,
            jain_service: jain(&services).map(round6),
            jain_slowdown: jain(&slowdowns).map(round6),
            max_rho: max_rho.map(round6),
            rho_at_most_one_share: if finished == 0 { 0.0 } else { round6(fair_jobs as f64 / finished as f64) },
            by_tenant,
        }
    }

    /// [`TenantFairness::new`] when the outcomes name at least two tenants; `None` otherwise,
    /// since fairness among one tenant says nothing.
    pub fn when_shared(outcomes: &[JobOutcome], cluster_gpus: u64) -> Option<TenantFairness> {
        let first = &outcomes.first()?.job.tenant;
        outcomes.iter().any(|o| &o.job.tenant != first).then(|| TenantFairness::new(outcomes, cluster_gpus))
    }
}

impl Acc {
    fn into_stats(self, name: &str) -> TenantStats {
        let finished = self.delays.len() as u64;
        let mean = |v: &[f64]| (!v.is_empty()).then(|| round6(v.iter().sum::<f64>() / v.len() as f64));
        TenantStats {
            name: name.to_string(),
            jobs: self.jobs,
            finished,
            gpu_hours: round_to(self.gpu_seconds as f64 / 3600.0, 3),
            gpu_hours_demanded: round_to(self.demanded_gpu_seconds as f64 / 3600.0, 3),
            queueing_delay: Distribution::from_samples(&self.delays),
            mean_jct_s: if finished == 0 { 0.0 } else { round_to(self.jct_sum as f64 / finished as f64, 3) },
            service_ratio: (self.asked_by_horizon > 0.0)
                .then(|| round6(self.received_by_horizon / self.asked_by_horizon)),
            mean_slowdown: mean(&self.slowdowns),
            mean_rho: mean(&self.rhos),
            max_rho: self.rhos.iter().copied().reduce(f64::max).map(round6),
        }
    }
}

/// Each job's completion time when its tenant runs alone, under strict FIFO in submission
/// order, on a private partition of `floor(cluster_gpus / tenants)` GPUs (at least 1); every
/// job's own runtime when the cluster has no GPUs. At least 1 s each, in input order.
fn alone_jcts(outcomes: &[JobOutcome], cluster_gpus: u64) -> Vec<u64> {
    let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, o) in outcomes.iter().enumerate() {
        by_tenant.entry(o.job.tenant.as_str()).or_default().push(i);
    }
    let mut jcts = vec![0; outcomes.len()];
    let partition = (cluster_gpus / (by_tenant.len() as u64).max(1)).max(1);
    for mut jobs in by_tenant.into_values() {
        jobs.sort_by_key(|&i| (outcomes[i].job.submit, outcomes[i].job.line, i));
        let fifo: Vec<(u64, u64, u64)> =
            jobs.iter().map(|&i| (outcomes[i].job.submit, outcomes[i].job.runtime, outcomes[i].job.gpus())).collect();
        let ends = if cluster_gpus == 0 {
            fifo.iter().map(|&(s, r, _)| s.saturating_add(r)).collect()
        } else {
            fifo_ends(&fifo, partition)
        };
        for ((&i, &(submit, _, _)), end) in jobs.iter().zip(&fifo).zip(ends) {
            jcts[i] = end.saturating_sub(submit).max(1);
        }
    }
    jcts
}

/// End times of `(submit, runtime, gpus)` jobs, sorted by submission, run under strict FIFO
/// (none starts before the one ahead of it) on `capacity` GPUs. A job wider than the capacity
/// waits for all of it and runs `runtime x gpus / capacity`, rounded up.
fn fifo_ends(jobs: &[(u64, u64, u64)], capacity: u64) -> Vec<u64> {
    let mut running: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let (mut now, mut used) = (0u64, 0u64);
    let mut ends = Vec::with_capacity(jobs.len());
    for &(submit, runtime, gpus) in jobs {
        now = now.max(submit);
        let (held, run) = if gpus > capacity {
            let stretched = (u128::from(runtime) * u128::from(gpus)).div_ceil(u128::from(capacity));
            (capacity, u64::try_from(stretched).unwrap_or(u64::MAX))
        } else {
            (gpus, runtime)
        };
        while let Some(&Reverse((end, g))) = running.peek() {
            if end > now && used + held <= capacity {
                break;
            }
            running.pop();
            used -= g;
            now = now.max(end);
        }
        let end = now.saturating_add(run.max(1));
        if held > 0 {
            running.push(Reverse((end, held)));
            used += held;
        }
        ends.push(end);
    }
    ends
}

/// Jain's fairness index `(Σx)² / (n · Σx²)` of non-negative values; `None` for no values,
/// 1 when all are zero.
pub fn jain(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        return Some(1.0);
    }
    Some(sum * sum / (values.len() as f64 * squares))
}

fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

fn round6(x: f64) -> f64 {
    round_to(x, 6)
}
