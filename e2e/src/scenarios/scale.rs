//! Admission at scale: thousands of 8-GPU nodes in blocks and racks, twenty leaf queues under one
//! parent, and TrainJobs created in four bursts at 35-56 a second (70% one pod, 25% four pods
//! preferring a rack, 5% sixteen pods requiring a block). Reports creation to admission and to
//! JobSet, the admission rate against the creation rate, reconciles and retries per admission,
//! API requests per admission by verb and resource, and trainyard's CPU and peak memory; checks
//! that nothing is over (hosts, queues), every block request is kept, every TrainJob is admitted
//! or waits with a reason, and one JobSet stands per admission. The kill variant SIGKILLs the
//! controller in the middle of the third burst and checks that nothing was lost or doubled.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use futures::StreamExt;
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::kube_util::{name_of, wait_for};
use crate::standins::nodes::FakeNode;
use crate::suite::{Checks, Suite, secs};
use crate::world::{ADMISSION, BLOCK, RACK, World};
use crate::{Options, ScaleSize};

use super::invariants::{audit, settled_from};
use super::scale_figures::{Usage, metric_sum, most_waiting, per_admission, percentile, requests_total, usage};

/// The shape of one run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    blocks: u32,
    racks: u32,
    hosts: u32,
    jobs: u32,
    leaves: u32,
    leaf_gpus: u32,
}

impl Shape {
    /// The full size: 10,000 nodes (10 blocks of 25 racks of 40), 2,000 TrainJobs.
    const FULL: Shape = Shape { blocks: 10, racks: 25, hosts: 40, jobs: 2000, leaves: 20, leaf_gpus: 1800 };
    /// A tenth: 1,000 nodes (10 blocks of 5 racks of 20), 200 TrainJobs, the same rate.
    const TENTH: Shape = Shape { blocks: 10, racks: 5, hosts: 20, jobs: 200, leaves: 20, leaf_gpus: 180 };

    fn of(size: ScaleSize) -> Shape {
        match size {
            ScaleSize::Full => Shape::FULL,
            ScaleSize::Tenth => Shape::TENTH,
        }
    }

    fn nodes(&self) -> u32 {
        self.blocks * self.racks * self.hosts
    }
}

/// Bursts of creation, and their rates (TrainJobs a second), in turn.
const BURSTS: u32 = 4;
const RATES: [f64; BURSTS as usize] = [35.0, 56.0, 42.0, 48.0];
/// Quiet time between two bursts.
const GAP: Duration = Duration::from_secs(7);
/// The target for creation to JobSet, p99.
const P99_BOUND: Duration = Duration::from_secs(2);

/// One TrainJob of the mix.
struct Made {
    name: String,
    pods: u32,
    block: bool,
    body: Value,
}

/// The mix: a fixed pseudo-random sequence, so that every run creates the same TrainJobs.
fn mix(w: &World<'_>, shape: &Shape, queues: &[String]) -> Vec<Made> {
    let mut seed: u64 = 7;
    (0..shape.jobs)
        .map(|i| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let roll = (seed >> 33) % 100;
            let queue = queues[((seed >> 17) % queues.len() as u64) as usize].clone();
            let name = format!("j{i:04}");
            let (pods, annotation) = match roll {
                0..70 => (1, None),
                70..95 => (4, Some(("kueue.x-k8s.io/podset-preferred-topology", RACK))),
                _ => (16, Some(("kueue.x-k8s.io/podset-required-topology", BLOCK))),
            };
            let mut body = w.trainjob(&name, &queue, pods, 8);
            if let Some((key, level)) = annotation {
                body["metadata"]["annotations"] = json!({ key: level });
            }
            Made { name, pods, block: pods == 16, body }
        })
        .collect()
}

/// The namespace's objects of one kind as a watch shows them, and when each first matched.
#[derive(Default)]
struct Mirror {
    objects: HashMap<String, Value>,
    first: HashMap<String, Instant>,
}

type Shared = Arc<Mutex<Mirror>>;

/// Watches the namespace's objects of a kind, keeping the latest of each and noting when each
/// first matched `matched`.
async fn mirror(
    w: &World<'_>,
    api_version: &str,
    kind: &str,
    matched: fn(&Value) -> bool,
) -> Result<(Shared, tokio::task::JoinHandle<()>)> {
    let api = w.kube().api(api_version, kind, Some(&w.ns)).await?;
    let shared: Shared = Arc::default();
    let task = tokio::spawn({
        let shared = shared.clone();
        async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let (object, deleted) = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                    Ok(watcher::Event::Delete(o)) => (o, true),
                    _ => continue,
                };
                let value = serde_json::to_value(&object).unwrap_or_default();
                let name = name_of(&value);
                let mut m = shared.lock().expect("lock");
                if deleted {
                    m.objects.remove(&name);
                    continue;
                }
                if matched(&value) {
                    m.first.entry(name.clone()).or_insert_with(Instant::now);
                }
                m.objects.insert(name, value);
            }
        }
    });
    Ok((shared, task))
}

fn has_admission(tj: &Value) -> bool {
    tj.pointer(&format!("/metadata/annotations/{}", ADMISSION.replace('/', "~1"))).is_some()
}

/// What one burst measured, to set against a baseline's.
#[derive(Clone, Copy, Debug)]
struct Measured {
    to_jobset_p50: Duration,
    to_jobset_p99: Duration,
    admission_rate: f64,
    creation_rate: f64,
    reconciles_per_admission: f64,
    requests_per_admission: f64,
    cpu_share: f64,
    peak_mib: u64,
}

/// The measured burst; with `--scale-baseline`, first the same burst with the baseline binary
/// on the same control plane, and the two set side by side.
pub async fn run(suite: &mut Suite, options: &Options) -> Result<Checks> {
    let Some(baseline) = options.scale_baseline.clone() else {
        return burst(suite, options, Variant::Measured).await.map(|(c, _)| c);
    };
    let under_test = std::mem::replace(&mut suite.binary, baseline);
    let before = burst(suite, options, Variant::Baseline).await;
    suite.binary = under_test;
    let (c_before, before) = before?;
    // The baseline's namespace goes with thousands of pods and Jobs for kube-controller-manager
    // to delete: measured alongside that, the second burst would pay for the first.
    let quiet = Instant::now();
    let ns = format!("e2e-{}", Variant::Baseline.tag());
    wait_for("the baseline's namespace gone", Duration::from_secs(900), || {
        let (kube, ns) = (suite.kube.clone(), ns.clone());
        async move {
            match kube.get("v1", "Namespace", None, &ns).await? {
                None => Ok(Some(())),
                Some(_) => Err(anyhow!("namespace {ns} is still there")),
            }
        }
    })
    .await?;
    let quiet = quiet.elapsed();
    let (mut c, after) = burst(suite, options, Variant::Measured)
        .await
        .map_err(|e| e.context(format!("baseline: {}", c_before.figures().join("; "))))?;
    c.figure(format!("the baseline's namespace was gone {} after its burst", secs(quiet)));
    for f in c_before.figures().to_vec() {
        c.figure(format!("baseline: {f}"));
    }
    for _ in 0..c_before.passed() {
        c.done();
    }
    c.figure(format!(
        "after / baseline: creation to JobSet p99 {} / {}, p50 {} / {}; admissions/s {:.1} / {:.1} (created at {:.1}/s); reconciles per admission {:.2} / {:.2}; requests per admission {:.2} / {:.2}; CPU {:.0}% / {:.0}%; peak memory {} / {} MiB",
        secs(after.to_jobset_p99),
        secs(before.to_jobset_p99),
        secs(after.to_jobset_p50),
        secs(before.to_jobset_p50),
        after.admission_rate,
        before.admission_rate,
        after.creation_rate,
        after.reconciles_per_admission,
        before.reconciles_per_admission,
        after.requests_per_admission,
        before.requests_per_admission,
        100.0 * after.cpu_share,
        100.0 * before.cpu_share,
        after.peak_mib,
        before.peak_mib
    ));
    Ok(c)
}

/// The burst with a SIGKILL of the controller in its middle.
pub async fn with_kill(suite: &mut Suite, options: &Options) -> Result<Checks> {
    burst(suite, options, Variant::Kill).await.map(|(c, _)| c)
}

/// Which burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// Measured, held to the targets with `--scale-targets`.
    Measured,
    /// The baseline binary's run, reported only.
    Baseline,
    /// With a SIGKILL in the middle; correctness only.
    Kill,
}

impl Variant {
    /// The world's tag: its namespace is `e2e-<tag>`.
    fn tag(self) -> &'static str {
        match self {
            Variant::Measured => "sc",
            Variant::Baseline => "sb",
            Variant::Kill => "sk",
        }
    }
}

async fn burst(suite: &mut Suite, options: &Options, variant: Variant) -> Result<(Checks, Measured)> {
    let shape = Shape::of(options.scale);
    let kill = variant == Variant::Kill;
    let mut c = Checks::default();
    let tag = variant.tag();
    let mut w = World::new(suite, tag).await?;
    let t = Instant::now();
    let mut nodes = Vec::with_capacity(shape.nodes() as usize);
    for b in 0..shape.blocks {
        for r in 0..shape.racks {
            for h in 0..shape.hosts {
                let (block, rack) = (format!("{}-b{b}", w.tag), format!("{}-b{b}r{r}", w.tag));
                nodes.push(FakeNode::gpu_host(&format!("{rack}h{h}"), &[(BLOCK, &block), (RACK, &rack)]));
            }
        }
    }
    w.add_nodes_quietly(nodes).await?;
    w.topology(&[BLOCK, RACK]).await?;
    let registered = t.elapsed();
    // A cohort with no quota of its own: the leaves lend to and borrow from one another, and
    // together never hold more than the sum of their quotas (audit checks that).
    w.queue("all", 0, None).await?;
    let mut queues = Vec::new();
    for i in 0..shape.leaves {
        queues.push(w.queue(&format!("q{i:02}"), shape.leaf_gpus, Some("all")).await?);
    }
    w.torch_runtime().await?;
    let workers = options.scale_workers.map(|n| n.to_string());
    let extra: Vec<&str> = workers.iter().flat_map(|n| ["--workers", n.as_str()]).collect();
    w.start_trainyard(&extra).await?;
    let made = mix(&w, &shape, &queues);

    let (trainjobs, tj_watch) = mirror(&w, "trainer.kubeflow.org/v1alpha1", "TrainJob", has_admission).await?;
    let (jobsets, js_watch) = mirror(&w, "jobset.x-k8s.io/v1alpha2", "JobSet", |_| true).await?;
    let before = w.replicas[0].metrics().await;
    let pid = w.replicas[0].process.pid();
    let cpu_before = pid.and_then(|p| usage(p).ok());

    // Each creation starts at its tick whatever the previous one took, as independent clients do.
    let created_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let started = Instant::now();
    let mut creations = tokio::task::JoinSet::new();
    let per_burst = made.len().div_ceil(BURSTS as usize);
    let mut at = Duration::ZERO;
    let mut killed = None;
    for (i, m) in made.iter().enumerate() {
        let (burst, within) = (i / per_burst, i % per_burst);
        if within == 0 && burst > 0 {
            at += GAP;
        }
        at += Duration::from_secs_f64(1.0 / RATES[burst]);
        tokio::time::sleep_until((started + at).into()).await;
        if kill && killed.is_none() && burst == 2 && within == per_burst / 2 {
            let replica = &mut w.replicas[0];
            replica.process.kill().await;
            replica.process.restart()?;
            killed = Some(started.elapsed());
        }
        let (kube, body, name, created_at) = (w.kube().clone(), m.body.clone(), m.name.clone(), created_at.clone());
        creations.spawn(async move {
            kube.create(&body).await?;
            created_at.lock().expect("lock").insert(name, Instant::now());
            anyhow::Ok(())
        });
    }
    while let Some(done) = creations.join_next().await {
        done??;
    }
    let creation_span = started.elapsed();

    // Settled: every TrainJob admitted or waiting with a reason, read from the watch (a list of
    // thousands of TrainJobs ten times a second would load the API server being measured).
    let limit = Duration::from_secs(60 + u64::from(shape.jobs) / 4);
    let expected = made.len();
    let settled = wait_for(&format!("{} TrainJobs admitted or waiting with a reason", shape.jobs), limit, || {
        let jobs: Vec<Value> = trainjobs.lock().expect("lock").objects.values().cloned().collect();
        async move { settled_from(&jobs, expected, started).map(Some) }
    })
    .await?;
    c.done();
    // Every admission's JobSet seen.
    wait_for("a JobSet for every admitted TrainJob", Duration::from_secs(60), || {
        let seen = &jobsets.lock().expect("lock").first;
        let missing: Vec<&String> = settled.admitted.keys().filter(|n| !seen.contains_key(*n)).take(5).collect();
        let answer = if missing.is_empty() { Ok(Some(())) } else { Err(anyhow!("no JobSet yet for {missing:?}")) };
        async move { answer }
    })
    .await?;
    c.done();
    let busy = started.elapsed();
    let after = w.replicas[0].metrics().await;
    let cpu_after = w.replicas[0].process.pid().and_then(|p| usage(p).ok());
    tj_watch.abort();
    js_watch.abort();

    // Nothing over, nothing lost, nothing doubled.
    let total_quota = u64::from(shape.leaf_gpus * shape.leaves);
    for _ in 0..audit(&w, &settled, total_quota, Duration::from_secs(60 + u64::from(shape.jobs) / 2)).await? {
        c.done();
    }
    let by_name: BTreeMap<&str, &Made> = made.iter().map(|m| (m.name.as_str(), m)).collect();
    for name in settled.admitted.keys() {
        c.that(by_name.contains_key(name.as_str()), format!("admitted TrainJob {name} was made here"))?;
    }
    for name in settled.admitted.keys() {
        let m = by_name[name.as_str()];
        if !m.block {
            continue;
        }
        let slots = w.slots(name).await?;
        let blocks: std::collections::BTreeSet<&str> =
            slots.iter().map(|s| s.split_once('r').map_or(s.as_str(), |(b, _)| b)).collect();
        c.that(slots.len() == m.pods as usize && blocks.len() == 1, format!("{name} needs one block, got {blocks:?}"))?;
    }
    c.that(w.replicas[0].panics().is_empty(), format!("no panic: {:?}", w.replicas[0].panics()))?;

    // The figures.
    let created = created_at.lock().expect("lock").clone();
    let admitted = trainjobs.lock().expect("lock").first.clone();
    let jobset_seen = jobsets.lock().expect("lock").first.clone();
    let lag = |seen: &HashMap<String, Instant>| -> Vec<Duration> {
        settled.admitted.keys().filter_map(|n| Some(seen.get(n)?.saturating_duration_since(*created.get(n)?))).collect()
    };
    let (to_admission, to_jobset) = (lag(&admitted), lag(&jobset_seen));
    let n = settled.admitted.len();
    let span = |times: Vec<Instant>| -> Duration {
        match (times.iter().min(), times.iter().max()) {
            (Some(a), Some(b)) => b.saturating_duration_since(*a),
            _ => Duration::ZERO,
        }
    };
    let created_span = span(settled.admitted.keys().filter_map(|k| created.get(k).copied()).collect());
    let admitted_span = span(settled.admitted.keys().filter_map(|k| admitted.get(k).copied()).collect());
    let rate = |d: Duration| if d.is_zero() { f64::INFINITY } else { n as f64 / d.as_secs_f64() };
    let (creation_rate, admission_rate) = (rate(created_span), rate(admitted_span));
    let waits: Vec<(Instant, Instant)> =
        settled.admitted.keys().filter_map(|k| Some((*created.get(k)?, *admitted.get(k)?))).collect();
    let backlog = most_waiting(&waits);
    let reconciles =
        metric_sum(&after, "trainyard_reconciles_total", "") - metric_sum(&before, "trainyard_reconciles_total", "");
    let retries = ["conflict", "error"]
        .iter()
        .map(|o| {
            let label = format!("outcome=\"{o}\"");
            metric_sum(&after, "trainyard_reconciles_total", &label)
                - metric_sum(&before, "trainyard_reconciles_total", &label)
        })
        .sum::<f64>();
    let requests = per_admission(&before, &after, n);
    c.figure(format!(
        "{} nodes registered in {}; {} TrainJobs created in {} ({:.1}/s over the admitted ones); {} admitted, {} waiting",
        shape.nodes(),
        secs(registered),
        made.len(),
        secs(creation_span),
        creation_rate,
        n,
        settled.waiting.len()
    ));
    c.figure(format!(
        "creation to admission p50 {} p99 {} max {}; to JobSet p50 {} p99 {} max {}; {:.1} admissions/s over {} (creations over {}), at most {backlog} created and not yet admitted at once",
        secs(percentile(&to_admission, 50)),
        secs(percentile(&to_admission, 99)),
        secs(percentile(&to_admission, 100)),
        secs(percentile(&to_jobset, 50)),
        secs(percentile(&to_jobset, 99)),
        secs(percentile(&to_jobset, 100)),
        admission_rate,
        secs(admitted_span),
        secs(created_span),
    ));
    let stage = |name: &str| {
        let label = format!("stage=\"{name}\"");
        let sum = metric_sum(&after, "trainyard_admission_stage_seconds_sum", &label)
            - metric_sum(&before, "trainyard_admission_stage_seconds_sum", &label);
        let count = metric_sum(&after, "trainyard_admission_stage_seconds_count", &label)
            - metric_sum(&before, "trainyard_admission_stage_seconds_count", &label);
        Duration::from_secs_f64(if count > 0.0 { sum / count } else { 0.0 })
    };
    if !kill {
        // A restarted controller counts from zero: these are whole only without a kill.
        c.figure(format!(
            "{reconciles:.0} reconciles ({:.2} per admission), {retries:.0} retried ({:.1}%); mean seen to decided {}, decided to recorded {}, recorded to launched {}; API requests per admission: {requests}",
            reconciles / n.max(1) as f64,
            100.0 * retries / reconciles.max(1.0),
            secs(stage("seen_to_decided")),
            secs(stage("decided_to_recorded")),
            secs(stage("recorded_to_launched")),
        ));
    }
    let mut missed: Vec<String> = Vec::new();
    let mut measured = Measured {
        to_jobset_p50: percentile(&to_jobset, 50),
        to_jobset_p99: percentile(&to_jobset, 99),
        admission_rate,
        creation_rate,
        reconciles_per_admission: reconciles / n.max(1) as f64,
        requests_per_admission: requests_total(&before, &after) / n.max(1) as f64,
        cpu_share: 0.0,
        peak_mib: 0,
    };
    if let (Some(Usage { cpu: c0, .. }), Some(Usage { cpu: c1, peak_rss })) = (cpu_before, cpu_after)
        && !kill
    {
        measured.cpu_share = (c1 - c0).as_secs_f64() / busy.as_secs_f64();
        measured.peak_mib = peak_rss / (1024 * 1024);
        c.figure(format!(
            "trainyard {:.0}% of a core over {}, peak memory {} MiB",
            100.0 * measured.cpu_share,
            secs(busy),
            measured.peak_mib
        ));
        if options.scale_targets && variant == Variant::Measured && measured.peak_mib > 300 {
            missed.push(format!("peak memory {} MiB > 300 MiB", measured.peak_mib));
        }
    }
    if let Some(k) = killed {
        c.figure(format!("SIGKILL at {} into the burst; nothing lost or doubled", secs(k)));
    }
    if options.scale_targets && variant == Variant::Measured {
        // Admissions keep pace when they spread over no longer than the creations plus the
        // latency bound: the span of admissions ends with the last one's latency, so the two
        // rates can be equal only up to it, and a backlog that grew would stretch it further.
        if admitted_span > created_span + P99_BOUND {
            missed.push(format!(
                "admissions/s {admission_rate:.1} < creations/s {creation_rate:.1}: admitted over {} against created over {}",
                secs(admitted_span),
                secs(created_span)
            ));
        }
        let p99 = percentile(&to_jobset, 99);
        if p99 > P99_BOUND {
            missed.push(format!("creation to JobSet p99 {} > 2 s", secs(p99)));
        }
        if retries > 0.05 * reconciles {
            missed.push(format!("retries {retries:.0} > 5% of {reconciles:.0} reconciles"));
        }
    }
    w.teardown().await?;
    // A missed target fails the scenario with every figure, so that the run still says how far.
    if !missed.is_empty() {
        return Err(anyhow!("targets missed: {}; figures: {}", missed.join(", "), c.figures().join("; ")));
    }
    Ok((c, measured))
}
