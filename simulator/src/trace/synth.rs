//! A synthetic, seeded training-cluster trace: a plausible job mix for tests and demos.
//!
//! The mix, per job (independent draws from a SplitMix64 stream):
//!
//! - **size**: 70% 1 GPU; 8% 2, 7% 4 and 7% 8 GPUs on one host; 4%, 2.5%
//!   and 1.5% gangs of 2, 4 and 8 whole hosts of `gpus_per_host` GPUs (16, 32
//!   and 64 GPUs with 8-GPU hosts). A single-host size larger than a host is
//!   shaped by [`shape_gang`].
//! - **CPU and memory**: 4 cores and 16 GiB per GPU of the pod; 5% of the
//!   jobs ask for GPUs only (no CPU, no memory).
//! - **runtime**: log-normal with median 15 min (sigma 1.7), clamped to
//!   60 s .. 2 days.
//! - **arrivals**: exponential inter-arrival times with the configured mean;
//!   the first job is submitted at 0.
//! - **tenants** `team-a`, `team-b`, ... with Zipf-like weights 1, 1/2, 1/3, ...
//! - **priority** 10 for 15% of jobs, else 0.
//! - **topology**: gangs of more than one pod ask for `preferred:<rack_level>`,
//!   and about a third of those that have at most 8 pods for
//!   `required:<rack_level>`; single-pod jobs are unconstrained.
//! - **runtime estimate**: for half of the jobs, the runtime rounded up to the
//!   next 15 minutes; none for the others.
//! - **rich gangs** (`rich_percent` of the jobs, none by default): a gang of an even
//!   number of hosts is cut into slices of 2 hosts, each inside one domain of the rack
//!   level; any other job gets a second pod set, a 1-GPU `leader` (4 cores, 16 GiB) that is
//!   placed with it. With 0 the stream of draws, and so the trace, is the one of earlier
//!   versions.
//! - **GPU layouts** (`gpu_layout_percent` of the one-set jobs whose pods ask for 1, 2 or 4
//!   GPUs, none by default): pods of 1 or 2 GPUs ask for one PCIe switch, pods of 4 for one
//!   NUMA node. With 0 the trace is the one of earlier versions.
//!
//! The generator uses only integer arithmetic and IEEE basic operations (its
//! own `ln`/`exp`, no platform maths library), so a seed gives the same jobs,
//! and a byte-identical CSV, on every platform. Job `i` gets id
//! `synth-{i:06}` and `line = i + 2`, the line it occupies when written with
//! [`write_csv`](super::write_csv).

use trainyard_topology::rng::SplitMix64;
use trainyard_topology::{GangShape, GpuLayout, PodSetShape, Resources, SliceRequest, TopologyRequest};

use super::shape::shape_gang;
use crate::job::TraceJob;

/// Parameters of [`synthesize`].
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    /// Seed of the random stream; the same seed gives the same trace.
    pub seed: u64,
    /// Number of jobs.
    pub jobs: usize,
    /// Number of tenants (at least 1 is used).
    pub tenants: usize,
    /// Mean seconds between submissions (non-positive: everything at 0).
    pub mean_interarrival_s: f64,
    /// GPUs per host, for multi-host gangs (at least 1 is used).
    pub gpus_per_host: u32,
    /// Topology level named by multi-host gangs' requests (empty: `rack`).
    pub rack_level: String,
    /// Percent of jobs (0-100) made rich: sliced, or with a leader pod set.
    pub rich_percent: u32,
    /// Percent of one-set jobs of 1-, 2- or 4-GPU pods (0-100) that ask for a GPU layout.
    pub gpu_layout_percent: u32,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            seed: 42,
            jobs: 2_000,
            tenants: 4,
            mean_interarrival_s: 30.0,
            gpus_per_host: 8,
            rack_level: "rack".to_string(),
            rich_percent: 0,
            gpu_layout_percent: 0,
        }
    }
}

/// Generates the trace described in the module documentation, sorted by submit time.
pub fn synthesize(cfg: &SynthConfig) -> Vec<TraceJob> {
    let mut rng = SplitMix64::new(cfg.seed);
    let host = cfg.gpus_per_host.max(1);
    let tenants: Vec<String> = (0..cfg.tenants.max(1)).map(tenant_name).collect();
    let weight_sum: f64 = (1..=tenants.len()).map(|k| 1.0 / k as f64).sum();
    let mean = if cfg.mean_interarrival_s.is_finite() && cfg.mean_interarrival_s > 0.0 {
        cfg.mean_interarrival_s
    } else {
        0.0
    };
    let level = match cfg.rack_level.trim() {
        "" => "rack".to_string(),
        l => l.to_string(),
    };
    let mu = ln(MEDIAN_RUNTIME_S);
    let mut clock = 0.0f64;
    let mut jobs = Vec::with_capacity(cfg.jobs);
    for i in 0..cfg.jobs {
        // Fixed number of draws per job, whatever the branches.
        let u_gap = rng.unit();
        let u_size = rng.unit();
        let u_cpu_free = rng.unit();
        let z = rng.standard_normal();
        let u_estimate = rng.unit();
        let u_tenant = rng.unit();
        let u_priority = rng.unit();
        let u_topology = rng.unit();
        // Drawn only when asked for, so that traces without rich gangs stay as they were.
        let rich = cfg.rich_percent > 0 && rng.unit() * 100.0 < f64::from(cfg.rich_percent.min(100));
        let layout = cfg.gpu_layout_percent > 0 && rng.unit() * 100.0 < f64::from(cfg.gpu_layout_percent.min(100));

        if i > 0 {
            clock += -mean * ln(1.0 - u_gap);
        }
        let (pods, gpus_per_pod) = size(u_size, host);
        let pod = if u_cpu_free < 0.05 {
            Resources::gpus(gpus_per_pod)
        } else {
            Resources { gpus: gpus_per_pod, cpu_milli: 4_000 * gpus_per_pod, memory_mib: 16_384 * gpus_per_pod }
        };
        let runtime = (exp(mu + SIGMA * z).clamp(60.0, 172_800.0)).round() as u64;
        let runtime_estimate = (u_estimate < 0.5).then(|| runtime.div_ceil(900) * 900);
        let topology = if pods <= 1 {
            TopologyRequest::Unconstrained
        } else if pods <= 8 && u_topology < 1.0 / 3.0 {
            TopologyRequest::Required(level.clone())
        } else {
            TopologyRequest::Preferred(level.clone())
        };
        jobs.push(TraceJob {
            id: format!("synth-{i:06}"),
            submit: clock.round() as u64,
            runtime,
            runtime_estimate,
            tenant: pick_tenant(&tenants, u_tenant * weight_sum).to_string(),
            priority: if u_priority < 0.15 { 10 } else { 0 },
            gang: if rich {
                rich_gang(pods, pod, topology, &level)
            } else {
                let mut gang = GangShape::single(pods, pod, topology);
                gang.sets[0].gpu_layout = match pod.gpus {
                    1 | 2 if layout => Some(GpuLayout::Switch),
                    4 if layout => Some(GpuLayout::Numa),
                    _ => None,
                };
                gang
            },
            line: i as u64 + 2,
            trial: None,
        });
    }
    jobs
}

/// A job's gang made rich: slices of 2 hosts for an even multi-host gang, else a leader set.
fn rich_gang(pods: u32, pod: Resources, topology: TopologyRequest, level: &str) -> GangShape {
    let mut gang = GangShape::single(pods, pod, topology);
    if pods >= 2 && pods.is_multiple_of(2) {
        gang.sets[0].slice = Some(SliceRequest { level: level.to_string(), size: 2 });
    } else {
        gang.sets.push(PodSetShape::new("leader", 1, Resources { gpus: 1, cpu_milli: 4_000, memory_mib: 16_384 }));
    }
    gang
}

/// Median runtime of the log-normal, in seconds.
const MEDIAN_RUNTIME_S: f64 = 900.0;
/// Shape of the log-normal runtime.
const SIGMA: f64 = 1.7;

/// (pods, GPUs per pod) for a size draw.
fn size(u: f64, host: u32) -> (u32, u64) {
    let single = |gpus: u64| match shape_gang(gpus, None, 0, host) {
        Ok((pods, pod)) => (pods, pod.gpus),
        Err(_) => (1, gpus),
    };
    let hosts = |n: u32| (n, u64::from(host));
    match u {
        u if u < 0.70 => single(1),
        u if u < 0.78 => single(2),
        u if u < 0.85 => single(4),
        u if u < 0.92 => single(8),
        u if u < 0.96 => hosts(2),
        u if u < 0.985 => hosts(4),
        _ => hosts(8),
    }
}

/// `team-a` .. `team-z`, then `team-aa`, `team-ab`, ...
fn tenant_name(index: usize) -> String {
    let mut letters = Vec::new();
    let mut n = index;
    loop {
        letters.push(b'a' + (n % 26) as u8);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    letters.reverse();
    format!("team-{}", String::from_utf8_lossy(&letters))
}

/// The tenant whose weight interval (1, 1/2, 1/3, ...) contains `x`.
fn pick_tenant(tenants: &[String], x: f64) -> &str {
    let mut acc = 0.0;
    for (k, t) in tenants.iter().enumerate() {
        acc += 1.0 / (k + 1) as f64;
        if x < acc {
            return t;
        }
    }
    tenants.last().map_or("team-a", String::as_str)
}

/// Draws for the generator beyond what the shared stream offers.
trait Normal {
    /// Approximately standard normal.
    fn standard_normal(&mut self) -> f64;
}

impl Normal for SplitMix64 {
    /// Approximately standard normal: the Irwin-Hall sum of 12 uniforms, minus 6.
    fn standard_normal(&mut self) -> f64 {
        (0..12).map(|_| self.unit()).sum::<f64>() - 6.0
    }
}

const LN_2: f64 = std::f64::consts::LN_2;

/// Natural logarithm from basic operations only (portable bit-for-bit);
/// accurate to a few ulps for positive normal numbers. `ln(0)` is `-inf`.
fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    let bits = x.to_bits();
    if (bits >> 52) & 0x7ff == 0 {
        // Subnormal: scale into the normal range first.
        return ln(x * (1u64 << 54) as f64) - 54.0 * LN_2;
    }
    let mut exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // Mantissa in [1, 2).
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m /= 2.0;
        exponent += 1;
    }
    // ln(m) = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut term = s;
    let mut sum = 0.0;
    let mut k = 1.0;
    while k < 40.0 {
        sum += term / k;
        term *= s2;
        k += 2.0;
    }
    exponent as f64 * LN_2 + 2.0 * sum
}

/// `e^x` from basic operations only (portable bit-for-bit); saturates to 0
/// and infinity outside about -700..700.
fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 700.0 {
        return f64::INFINITY;
    }
    if x < -700.0 {
        return 0.0;
    }
    // Cody-Waite reduction: k * LN2_HI is exact for |k| < 2^11.
    // (fdlibm's split: ln 2 = LN2_HI + LN2_LO, LN2_HI with 11 trailing zero bits.)
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    let k = (x / LN_2).round();
    let r = (x - k * LN2_HI) - k * LN2_LO; // |r| <= 0.35
    let mut term = 1.0;
    let mut sum = 1.0;
    for n in 1..25 {
        term *= r / f64::from(n);
        sum += term;
    }
    // 2^k for |k| <= 1010, built from its bits in two steps to stay normal.
    let half = (k / 2.0).trunc();
    let pow2 = |e: f64| f64::from_bits(((e as i64 + 1023) as u64) << 52);
    sum * pow2(half) * pow2(k - half)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ReadOptions, TraceFormat, read_trace, write_csv};

    fn csv_bytes(jobs: &[TraceJob]) -> Vec<u8> {
        let mut out = Vec::new();
        write_csv(jobs, &mut out).unwrap();
        out
    }

    #[test]
    fn same_seed_same_trace_byte_for_byte() {
        let cfg = SynthConfig::default();
        let a = synthesize(&cfg);
        let b = synthesize(&cfg);
        assert_eq!(a, b);
        assert_eq!(csv_bytes(&a), csv_bytes(&b));
        let other = synthesize(&SynthConfig { seed: 43, ..cfg });
        assert_ne!(csv_bytes(&a), csv_bytes(&other));
    }

    #[test]
    fn jobs_are_well_formed_and_plausible() {
        let cfg = SynthConfig::default();
        let jobs = synthesize(&cfg);
        assert_eq!(jobs.len(), 2_000);
        assert_eq!(jobs[0].submit, 0);
        let mut ids = std::collections::HashSet::new();
        for w in jobs.windows(2) {
            assert!(w[0].submit <= w[1].submit);
        }
        for job in &jobs {
            assert!(ids.insert(job.id.clone()), "duplicate {}", job.id);
            assert!(job.gang.pods() >= 1);
            assert!(!job.gang.sets[0].pod.is_zero());
            assert!((60..=172_800).contains(&job.runtime), "{}", job.runtime);
            if let Some(est) = job.runtime_estimate {
                assert!(est >= job.runtime && est % 900 == 0 && est - job.runtime < 900);
            }
            assert!(matches!(job.priority, 0 | 10));
            assert!(["team-a", "team-b", "team-c", "team-d"].contains(&job.tenant.as_str()));
            if job.gang.pods() > 1 {
                assert_eq!(job.gang.sets[0].pod.gpus, 8);
                assert_eq!(job.gang.topology.level(), Some("rack"));
            } else {
                assert_eq!(job.gang.topology, TopologyRequest::Unconstrained);
            }
        }
        let n = jobs.len() as f64;
        let share = |f: &dyn Fn(&TraceJob) -> bool| jobs.iter().filter(|j| f(j)).count() as f64 / n;
        assert!((0.66..0.74).contains(&share(&|j| j.gpus() == 1)));
        assert!((0.05..0.11).contains(&share(&|j| j.gang.pods() > 1)));
        assert!((0.01..0.10).contains(&share(&|j| j.gang.sets[0].pod.cpu_milli == 0)));
        assert!((0.45..0.55).contains(&share(&|j| j.runtime_estimate.is_some())));
        assert!((0.10..0.20).contains(&share(&|j| j.priority == 10)));
        assert!(share(&|j| matches!(j.gang.topology, TopologyRequest::Required(_))) > 0.01);
        let mut runtimes: Vec<u64> = jobs.iter().map(|j| j.runtime).collect();
        runtimes.sort_unstable();
        let median = runtimes[runtimes.len() / 2];
        assert!((600..1_400).contains(&median), "median {median}");
        assert!(runtimes[runtimes.len() - 1] > 86_400);
        let mean_gap = jobs[jobs.len() - 1].submit as f64 / (n - 1.0);
        assert!((26.0..34.0).contains(&mean_gap), "mean gap {mean_gap}");
    }

    #[test]
    fn written_trace_reads_back_identically() {
        let cfg = SynthConfig { jobs: 300, gpus_per_host: 4, rack_level: "block".into(), ..SynthConfig::default() };
        let jobs = synthesize(&cfg);
        let bytes = csv_bytes(&jobs);
        let read = read_trace(TraceFormat::Csv, bytes.as_slice(), "synth.csv", &ReadOptions::default()).unwrap();
        assert_eq!(read.jobs, jobs);
        assert!(jobs.iter().any(|j| j.gang.topology == TopologyRequest::Preferred("block".into())));
    }

    #[test]
    fn degenerate_configs_do_not_panic() {
        let cfg = SynthConfig {
            jobs: 50,
            tenants: 0,
            mean_interarrival_s: f64::NAN,
            gpus_per_host: 0,
            rack_level: " ".into(),
            seed: 0,
            rich_percent: 0,
            gpu_layout_percent: 0,
        };
        let jobs = synthesize(&cfg);
        assert!(jobs.iter().all(|j| j.submit == 0 && j.tenant == "team-a" && j.gang.sets[0].pod.gpus <= 1));
        assert!(synthesize(&SynthConfig { jobs: 0, ..SynthConfig::default() }).is_empty());
    }

    #[test]
    fn rich_gangs_are_mixed_in_on_request_and_leave_other_traces_alone() {
        let plain = synthesize(&SynthConfig::default());
        assert!(plain.iter().all(|j| j.gang.is_simple()));
        let rich = synthesize(&SynthConfig { rich_percent: 30, ..SynthConfig::default() });
        let rich_count = rich.iter().filter(|j| !j.gang.is_simple()).count();
        assert!((450..750).contains(&rich_count), "about 30% of 2,000: {rich_count}");
        assert!(rich.iter().any(|j| j.gang.sets.len() == 2));
        assert!(rich.iter().any(|j| j.gang.sets[0].slice.is_some()));
        assert!(rich.iter().all(|j| j.gang.validate().is_ok()));
        let bytes = csv_bytes(&rich);
        let read = read_trace(TraceFormat::Csv, bytes.as_slice(), "synth.csv", &ReadOptions::default()).unwrap();
        assert_eq!(read.jobs, rich, "rich gangs survive the CSV format");
    }

    #[test]
    fn tenant_names_continue_past_z() {
        assert_eq!(tenant_name(0), "team-a");
        assert_eq!(tenant_name(25), "team-z");
        assert_eq!(tenant_name(26), "team-aa");
        assert_eq!(tenant_name(27), "team-ab");
    }

    #[test]
    fn portable_ln_and_exp_match_the_platform() {
        for x in [1e-300, 1e-10, 0.001, 0.5, 0.999_999, 1.0, 1.5, 2.0, 900.0, 1e10, 1e300, 5e-324] {
            let (ours, std) = (ln(x), x.ln());
            assert!((ours - std).abs() <= 1e-14 * std.abs().max(1.0), "ln({x}) = {ours} vs {std}");
        }
        for x in [-700.0, -20.0, -1.0, -1e-9, 0.0, 0.3, 1.0, 6.8, 12.0, 100.0, 700.0] {
            let (ours, std) = (exp(x), x.exp());
            assert!((ours - std).abs() <= 1e-14 * std, "exp({x}) = {ours} vs {std}");
        }
        assert_eq!(ln(0.0), f64::NEG_INFINITY);
        assert_eq!(exp(800.0), f64::INFINITY);
    }
}
