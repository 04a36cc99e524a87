//! Reconcile planning throughput: TrainJobs per second from watch event to rendered JobSet, 10,000 nodes cached.
//!
//! Everything the controller does between its caches and its API writes, in memory and on one
//! thread: the cluster read from 10,000 `Node` objects, each TrainJob's gang intent (which renders
//! its JobSet once, unplaced), one scheduling cycle over all of them, and the lifecycle plan of each
//! admitted TrainJob (record, placed JobSet, status). The baseline renders the same TrainJobs'
//! JobSets without placement, as Kubeflow Trainer alone would, so the cost of scheduling shows as a
//! ratio. `cargo bench --bench reconcile` runs 5,000 TrainJobs; `-- --quick`, or any run without
//! `--bench` (such as `cargo test --benches`), runs 500.

mod fleet;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleet::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use trainyard::api::{ClusterTrainingRuntime, SlurmTarget, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::acting::workload_objects;
use trainyard::controller::deciding::intent::{GangIntent, IntentContext, Problem};
use trainyard::controller::deciding::plan::{Action, Inputs, Mode, plan};
use trainyard::controller::deciding::scheduling_loop::{Decision, JobEntry, SchedulingLoop};
use trainyard::controller::slurm::cluster_view::SlurmSnapshot;
use trainyard::controller::watching::scheduler_inputs::{Runtimes, cluster_from_nodes, intent_of, job_entry};
use trainyard_bridges::RenderOptions;
use trainyard_bridges::slurm::render_sbatch;
use trainyard_bridges::trainer::TrainingRuntime;
use trainyard_policies::PolicyConfig;
use trainyard_topology::rng::SplitMix64;

const SLURM_TRAINJOB: &str = include_str!("../examples/slurm/trainjob.yaml");
const SLURM_RUNTIME: &str = include_str!("../examples/kubernetes/runtime.yaml");

/// Eight queues whose nominal quotas add up to the cluster; idle quota may be borrowed.
fn policy() -> PolicyConfig {
    let per_queue = (NODES as u64 * 8) / QUEUES;
    let mut yaml = String::from("name: bench\nbackfill: easy\nqueues:\n");
    for q in 0..QUEUES {
        yaml.push_str(&format!("  - {{name: team-{q}, nominal: {{gpus: {per_queue}}}}}\n"));
    }
    PolicyConfig::from_yaml(&yaml, "bench policy").expect("valid generated policy")
}

fn is_jobset(action: &Action) -> bool {
    matches!(action, Action::Apply(v) if v["kind"] == "JobSet")
}

/// A reconcile of `job` in standalone mode before anything was created for it.
fn inputs<'a>(
    job: &'a TrainJob,
    runtime: &'a TrainingRuntime,
    intent: &'a Result<GangIntent, Problem>,
    decision: Option<&'a Decision>,
    now: &'a Time,
) -> Inputs<'a> {
    first_look(job, Some(runtime), intent, decision, Mode::Standalone, now, None)
}

/// A TrainJob of a Slurm queue, admitted: its plan up to the Slurm job's batch script, as the
/// reconciler builds it before handing it to the bridge (which then spends tens of ms in Slurm).
fn slurm_plans(n: usize, stamp: &Time) -> Result<(Phase, usize), String> {
    let runtime: ClusterTrainingRuntime = serde_saphyr::from_str(SLURM_RUNTIME).map_err(|e| e.to_string())?;
    let runtimes = Runtimes::index([], [&runtime]);
    let policy = PolicyConfig::builtin("fifo").ok_or("no fifo policy")?;
    let target = SlurmTarget { partition: Some("gpu".into()), account: None, qos: None, workdir: "/shared".into() };
    let queues = BTreeMap::from([("hpc-llm".to_string(), target)]);
    let ctx = IntentContext { slurm_queues: &queues, slurm_configured: true, ..IntentContext::new(&policy, GPU) };
    let snapshot = SlurmSnapshot { jobs: Some(BTreeMap::new()), ..SlurmSnapshot::default() };
    let at = u64::try_from(stamp.0.as_second()).unwrap_or(0);
    let mut cases = Vec::with_capacity(n);
    for i in 0..n {
        let mut job: TrainJob = serde_saphyr::from_str(SLURM_TRAINJOB).map_err(|e| e.to_string())?;
        job.metadata.name = Some(format!("llama-{i:05}"));
        job.metadata.uid = Some(format!("uid-{i}"));
        let (intent, _) = intent_of(&job, &runtimes, &ctx);
        let pods = intent.as_ref().map_err(|p| p.describe())?.shape.pods();
        let nodes = (0..pods).map(|h| (format!("gpu-{:05}", (i * 2 + h as usize) % NODES), 1)).collect();
        let record = AdmissionRecord { nodes, domain: None, at, cost: 0, slurm: true, devices: Vec::new() };
        cases.push((job, intent, Decision::Admit(record)));
    }
    let resolved = runtimes.cluster.values().next().ok_or("the runtime did not index")?;
    let (phase, scripts) = Phase::each(&cases, |(job, intent, decision)| {
        let inp = Inputs { slurm: Some(&snapshot), ..inputs(job, resolved, intent, Some(decision), stamp) };
        plan(&inp).iter().find_map(|a| match a {
            Action::SubmitSlurm(gang) => Some(render_sbatch(gang).len()),
            _ => None,
        })
    });
    Ok((phase, scripts.iter().flatten().count()))
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench");
    let n = if quick { 500 } else { 5_000 };
    println!(
        "# Reconcile planning: {NODES} Ready nodes x 8 GPUs ({BLOCKS} blocks x {RACKS_PER_BLOCK} racks x \
         {HOSTS_PER_RACK} hosts), {n} TrainJobs of 1-16 nodes (torch_multinode fixture, one \
         ClusterTrainingRuntime), {QUEUES} queues, 1 in 4 required in one rack; standalone mode, one thread."
    );
    println!(
        "# intent = intent_of + job_entry (renders the JobSet once, unplaced); scheduling = one \
         SchedulingLoop::cycle over all; plan = plan() of each admitted TrainJob with its Admit decision.\n"
    );

    let nodes: Vec<Node> = (0..NODES).map(node).collect();
    let node_refs: Vec<&Node> = nodes.iter().collect();
    let spec = topology();
    let policy = policy();
    let started = Instant::now();
    let cluster = cluster_from_nodes(&node_refs, &spec)?;
    let mut looped = SchedulingLoop::new(cluster, policy.clone()).map_err(|e| e.to_string())?;
    let build = Phase::once(1, started.elapsed());

    let runtime: ClusterTrainingRuntime = serde_saphyr::from_str(RUNTIME).expect("fixture runtime parses");
    let runtimes = Runtimes::index([], [&runtime]);
    let gpu_resource = spec.node_list_options().gpu_resource;
    let ctx = IntentContext::new(&policy, &gpu_resource);
    let jobs = train_jobs(n, &mut SplitMix64::new(42));

    // Watch event -> gang intent and the loop's entry, as the scheduling loop builds them.
    let (intent_phase, intents) = Phase::each(&jobs, |job| {
        let (intent, runtime) = intent_of(job, &runtimes, &ctx);
        let entry = job_entry(job, &intent, Mode::Standalone, 0);
        (intent, runtime, entry)
    });
    if let Some((job, (Err(p), ..))) = jobs.iter().zip(&intents).find(|(_, (i, ..))| i.is_err()) {
        return Err(format!("generated TrainJob {} has no intent: {}", job.key(), p.describe()));
    }
    let entries: Vec<JobEntry> = intents.iter().map(|(_, _, e)| e.clone()).collect();

    let now = (EPOCH + n as i64 + 1) as u64;
    let started = Instant::now();
    let (decisions, stats) = looped.cycle(&entries, now);
    let scheduling = Phase::once(n, started.elapsed());

    // The admitted TrainJobs, in creation order, with what plan() needs.
    type Admitted<'a> = (&'a TrainJob, &'a Result<GangIntent, Problem>, &'a Decision);
    let admitted: Vec<Admitted<'_>> = jobs
        .iter()
        .zip(&intents)
        .filter_map(|(job, (intent, ..))| match decisions.get(&job.key()) {
            Some(d @ Decision::Admit(_)) => Some((job, intent, d)),
            _ => None,
        })
        .collect();
    let run_runtime = intents.first().and_then(|(_, r, _)| *r).ok_or("the runtime did not resolve")?;
    let stamp = Time(Timestamp::from_second(now as i64).expect("time in range"));
    // Each closure inspects its output and drops it inside the timed region, as a reconciler does
    // once it has carried the steps out; keeping thousands of JobSets alive would skew later phases.
    let (plan_phase, checks) = Phase::each(&admitted, |(job, intent, d)| {
        let actions = plan(&inputs(job, run_runtime, intent, Some(*d), &stamp));
        (actions.iter().any(is_jobset), actions.iter().any(|a| matches!(a, Action::RecordAdmission(_))))
    });
    let rendered = checks.iter().filter(|(jobset, _)| *jobset).count();
    let recorded = checks.iter().filter(|(_, record)| *record).count();
    if rendered != admitted.len() || recorded != admitted.len() {
        return Err(format!("of {} admitted plans, {rendered} apply a JobSet, {recorded} record", admitted.len()));
    }

    // Baselines over the same TrainJobs: the JobSet as Kubeflow Trainer renders it (no placement),
    // and plan() without a decision, which only reports Queued and renders nothing.
    let (unplaced, renders) = Phase::each(&admitted, |(job, intent, _)| {
        let kind = intent.as_ref().map(|i| i.kind).expect("checked above");
        let bridge_job = job.to_bridge().expect("generated TrainJob converts");
        let rendered = workload_objects::render(
            &bridge_job,
            run_runtime,
            kind,
            RenderOptions { placement: workload_objects::placement_of("", None), ..Default::default() },
            None,
            None,
        );
        rendered.is_ok_and(|r| r.workload["kind"] == "JobSet")
    });
    if renders.iter().any(|ok| !ok) {
        return Err("an unplaced render failed".into());
    }
    let (no_decision, _) =
        Phase::each(&admitted, |(job, intent, _)| plan(&inputs(job, run_runtime, intent, None, &stamp)));

    let (slurm_phase, scripts) = slurm_plans(n, &stamp)?;
    if scripts != n {
        return Err(format!("of {n} Slurm plans, {scripts} submit a job"));
    }

    let e2e = Phase::once(n, intent_phase.total + scheduling.total + plan_phase.total);
    println!("{:<38} {:>6} {:>11} {:>10} {:>10} {:>10}", "phase", "count", "total", "per s", "p50", "p99");
    build.print("1. cluster build (10k nodes + loop)", "cluster_from_nodes + SchedulingLoop::new");
    intent_phase.print("2. intent", "intent_of + job_entry");
    let note = format!("admitted {} of {n}, {} pending", stats.admitted, stats.pending_by_queue.values().sum::<u64>());
    scheduling.print("3. scheduling (one cycle)", &note);
    plan_phase.print("4. plan, admitted (placed JobSet)", &format!("{rendered} JobSets, {recorded} records"));
    e2e.print("end to end (2 + 3 + 4)", "TrainJobs per second of intent + scheduling + plan");
    unplaced.print("baseline: render unplaced (Kubeflow)", "to_bridge + workload_objects::render, no placement");
    no_decision.print("baseline: plan, no decision", "status only; renders nothing");
    slurm_phase.print("5. plan, admitted on Slurm", "examples/slurm TrainJob -> SubmitSlurm + sbatch script");
    println!();
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "placed plan / unplaced render, per TrainJob: {:.2}x ({} vs {})",
        ratio(plan_phase.mean(), unplaced.mean()),
        us(plan_phase.mean()),
        us(unplaced.mean())
    );
    // What trainyard does for one TrainJob it launches (its intent, its share of the cycle, its plan)
    // against Kubeflow Trainer's one render of it.
    let launched = intent_phase.mean() + scheduling.mean() + plan_phase.mean();
    println!(
        "trainyard per launched TrainJob / unplaced render: {:.2}x ({} = intent {} + cycle share {} + plan {}, vs {})",
        ratio(launched, unplaced.mean()),
        us(launched),
        us(intent_phase.mean()),
        us(scheduling.mean()),
        us(plan_phase.mean()),
        us(unplaced.mean())
    );
    Ok(())
}
