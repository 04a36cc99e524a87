//! Gangs submitted and confirmed per second against a local Slurm, through slurmrestd and sbatch.
//!
//! Run inside `scripts/slurm/with-slurm.sh cargo bench -p trainyard-slurm --features client
//! --bench submit` (add `-- --quick` for 20 gangs per client). Each gang is one `Bridge::submit`
//! (which first looks for an existing job of the gang, so it costs a job listing plus the
//! submission) followed by a status lookup that must find the job: "confirmed". Jobs are tiny
//! 1-node `true` scripts; all are cancelled at the end. Without a local Slurm it says so and exits.

use std::time::{Duration, Instant};

use trainyard_bridges::slurm::parse_gang;
use trainyard_slurm::bridge::{Bridge, Retry};
use trainyard_slurm::rest::{RestClient, RestConfig};

async fn run(bridge: &Bridge, label: &str, count: usize, dir: &str) -> Result<f64, String> {
    let mut latencies = Vec::with_capacity(count);
    let start = Instant::now();
    for i in 0..count {
        let yaml = format!(
            "name: bench\ngang: bench/{label}-{}-{i}\nnodes: 1\ncommand: [\"true\"]\nworkdir: {dir}\noutput: /dev/null\n",
            std::process::id()
        );
        let gang = parse_gang(&yaml, "bench").map_err(|e| e.to_string())?;
        let t = Instant::now();
        let submitted = bridge.submit(&gang).await.map_err(|e| e.to_string())?;
        let confirmed = bridge.status(&gang.gang).await.map_err(|e| e.to_string())?;
        if confirmed.map(|j| j.id) != Some(submitted.job_id) {
            return Err(format!("{label}: gang {i} not confirmed"));
        }
        latencies.push(t.elapsed());
    }
    let total = start.elapsed();
    latencies.sort();
    let rate = count as f64 / total.as_secs_f64();
    println!(
        "{label:<8} {count:>5} gangs  {:>8.2} s  {rate:>8.1} gangs/s  p50 {:>7.1} ms  p99 {:>7.1} ms",
        total.as_secs_f64(),
        latencies[count / 2].as_secs_f64() * 1e3,
        latencies[(count * 99 / 100).min(count - 1)].as_secs_f64() * 1e3,
    );
    Ok(rate)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let quick = std::env::args().any(|a| a == "--quick") || !std::env::args().any(|a| a == "--bench");
    let Ok(state) = std::env::var("TRAINYARD_SLURM_STATE") else {
        println!("no local Slurm (TRAINYARD_SLURM_STATE unset): run through scripts/slurm/with-slurm.sh");
        return Ok(());
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = format!("{state}/jobs/bench");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let count = if quick { 20 } else { 200 };
    let config = RestConfig::from_env()?.ok_or("SLURMRESTD_URL unset")?;
    let rest = RestClient::connect(config).await.map_err(|e| e.to_string())?;
    let retry = Retry { attempts: 3, first_wait: Duration::from_millis(100), max_wait: Duration::from_secs(1) };
    println!("# submit + confirm, one gang at a time, 4-node local Slurm 22.05 ({} API)", rest.api());
    let via_rest = run(&Bridge::new(Some(rest), retry), "rest", count, &dir).await?;
    let via_sbatch = run(&Bridge::new(None, retry), "sbatch", count, &dir).await?;
    println!("rest / sbatch: {:.2}x", via_rest / via_sbatch);
    let _ = std::process::Command::new("scancel").args(["--name", "bench"]).status();
    Ok(())
}
