//! Turning a trace job's totals (GPUs, nodes, CPUs) into a gang of identical pods.
//!
//! Traces record what a job asked for in total, sometimes with the number of
//! nodes it ran on; trainyard schedules gangs of identical pods. The rules of
//! [`shape_gang`]`(gpus, nodes, cpus, gpus_per_host)`, in order:
//!
//! 1. `gpus_per_host == 0` is an error.
//! 2. **CPU-only** (`gpus == 0`): `max(nodes, 1)` pods, each with
//!    `ceil(cpus / pods)` cores. A job with no GPUs and no CPUs is an error
//!    ("job asks for no GPUs and no CPUs").
//! 3. **Node count honoured**: when `nodes = Some(n)` with `n > 0`, `n`
//!    divides `gpus` and `gpus / n <= gpus_per_host`, the gang is `n` pods of
//!    `gpus / n` GPUs (so Philly's 8 GPUs on 4 nodes stays 4 x 2).
//! 4. **Otherwise** the fewest equal pods that fit a host: start at
//!    `n = ceil(gpus / gpus_per_host)` and take the smallest `n' >= n` that
//!    divides `gpus`; the gang is `n'` pods of `gpus / n'` GPUs (12 GPUs on
//!    8-GPU hosts is 2 x 6; 9 GPUs is 3 x 3; a prime count above a host
//!    becomes 1-GPU pods).
//! 5. CPUs in the GPU cases: `ceil(cpus / pods)` cores per pod (0 when the
//!    trace has none). Memory is never set: the traces do not record it.
//!
//! Totals above `u32::MAX` GPUs, or CPU amounts that overflow millicores, are
//! errors rather than panics.

use trainyard_topology::Resources;

/// Shapes a job of `total_gpus` GPUs and `total_cpus` cores, optionally
/// known to have run on `nodes` nodes, into `(pods, per-pod resources)` for
/// hosts of `gpus_per_host` GPUs. See the module documentation for the rules.
pub fn shape_gang(
    total_gpus: u64,
    nodes: Option<u32>,
    total_cpus: u64,
    gpus_per_host: u32,
) -> Result<(u32, Resources), String> {
    if gpus_per_host == 0 {
        return Err("gpus_per_host must be at least 1".to_string());
    }
    if total_gpus == 0 {
        if total_cpus == 0 {
            return Err("job asks for no GPUs and no CPUs".to_string());
        }
        let pods = nodes.unwrap_or(1).max(1);
        return Ok((pods, Resources { gpus: 0, cpu_milli: cpu_milli_per_pod(total_cpus, pods)?, memory_mib: 0 }));
    }
    if total_gpus > u64::from(u32::MAX) {
        return Err(format!("job asks for {total_gpus} GPUs, more than can be shaped (at most {})", u32::MAX));
    }
    let host = u64::from(gpus_per_host);
    let pods = match nodes {
        Some(n) if n > 0 && total_gpus.is_multiple_of(u64::from(n)) && total_gpus / u64::from(n) <= host => {
            u64::from(n)
        }
        _ => smallest_divisor_at_least(total_gpus, total_gpus.div_ceil(host)),
    };
    // pods <= total_gpus <= u32::MAX, checked above.
    let pods = u32::try_from(pods).map_err(|_| format!("job needs {pods} pods, too many"))?;
    let gpus = total_gpus / u64::from(pods);
    Ok((pods, Resources { gpus, cpu_milli: cpu_milli_per_pod(total_cpus, pods)?, memory_mib: 0 }))
}

/// `ceil(total_cpus / pods)` cores in millicores.
fn cpu_milli_per_pod(total_cpus: u64, pods: u32) -> Result<u64, String> {
    total_cpus
        .div_ceil(u64::from(pods.max(1)))
        .checked_mul(1000)
        .ok_or_else(|| format!("job asks for {total_cpus} CPUs, too many to express in millicores"))
}

/// The smallest divisor of `n` (> 0) that is at least `min` (clamped to
/// `1..=n`), found by trial division up to the square root so that it stays
/// cheap for any `n < 2^32`.
fn smallest_divisor_at_least(n: u64, min: u64) -> u64 {
    let min = min.clamp(1, n);
    let mut best = n;
    let mut d = 1u64;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            for candidate in [d, n / d] {
                if candidate >= min && candidate < best {
                    best = candidate;
                }
            }
        }
        d += 1;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_pods(gpus: u64, nodes: Option<u32>, host: u32) -> (u32, u64) {
        let (pods, pod) = shape_gang(gpus, nodes, 0, host).unwrap();
        assert_eq!(pod.cpu_milli, 0);
        (pods, pod.gpus)
    }

    #[test]
    fn node_counts_are_honoured_when_they_divide_evenly_and_fit() {
        assert_eq!(gpu_pods(16, Some(2), 8), (2, 8));
        assert_eq!(gpu_pods(24, Some(3), 8), (3, 8));
        assert_eq!(gpu_pods(8, Some(4), 8), (4, 2));
        assert_eq!(gpu_pods(160, Some(20), 8), (20, 8));
    }

    #[test]
    fn otherwise_the_fewest_equal_pods_that_fit_a_host() {
        assert_eq!(gpu_pods(12, None, 8), (2, 6));
        assert_eq!(gpu_pods(7, None, 8), (1, 7));
        assert_eq!(gpu_pods(9, None, 8), (3, 3));
        assert_eq!(gpu_pods(13, None, 8), (13, 1));
        assert_eq!(gpu_pods(1, None, 8), (1, 1));
        assert_eq!(gpu_pods(64, None, 8), (8, 8));
        // Node counts that do not divide, or overfill a host, fall back to the rule.
        assert_eq!(gpu_pods(16, Some(3), 8), (2, 8));
        assert_eq!(gpu_pods(16, Some(1), 8), (2, 8));
        assert_eq!(gpu_pods(16, Some(0), 8), (2, 8));
        assert_eq!(gpu_pods(12, None, 4), (3, 4));
    }

    #[test]
    fn cpus_are_spread_over_the_pods() {
        let (pods, pod) = shape_gang(0, Some(2), 16, 8).unwrap();
        assert_eq!((pods, pod), (2, Resources { gpus: 0, cpu_milli: 8_000, memory_mib: 0 }));
        let (pods, pod) = shape_gang(0, None, 3, 8).unwrap();
        assert_eq!((pods, pod.cpu_milli), (1, 3_000));
        let (pods, pod) = shape_gang(0, Some(0), 5, 8).unwrap();
        assert_eq!((pods, pod.cpu_milli), (1, 5_000));
        let (pods, pod) = shape_gang(16, Some(2), 9, 8).unwrap();
        assert_eq!((pods, pod), (2, Resources { gpus: 8, cpu_milli: 5_000, memory_mib: 0 }));
    }

    #[test]
    fn impossible_shapes_are_errors() {
        assert_eq!(shape_gang(0, Some(2), 0, 8), Err("job asks for no GPUs and no CPUs".to_string()));
        assert_eq!(shape_gang(0, None, 0, 8), Err("job asks for no GPUs and no CPUs".to_string()));
        assert_eq!(shape_gang(8, None, 0, 0), Err("gpus_per_host must be at least 1".to_string()));
        assert!(shape_gang(u64::MAX, None, 0, 8).is_err());
        assert!(shape_gang(0, None, u64::MAX, 8).is_err());
        // A large prime stays fast and becomes 1-GPU pods.
        assert_eq!(gpu_pods(4_294_967_291, None, 8), (4_294_967_291, 1));
    }
}
