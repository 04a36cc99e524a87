//! The fleet manager's decide path at scale: how long a new TrainJob takes from its watch event to
//! the copy the manager writes to a worker cluster, and what one worker's node change costs, on a
//! fleet of 3 workers x 5,000 nodes with 5,000 TrainJobs pending; against one standalone cluster
//! of the same 15,000 nodes and the same TrainJobs, measured in the same run.
//!
//! Each worker (east, west, north) has 5,000 nodes of 8 GPUs (5 blocks x 25 racks x 40 hosts),
//! listed through one `FleetMerge` into the live picture (manager mode puts a cluster level on
//! top). 80% of each worker is held by running gangs of 8 nodes adopted from admission records in
//! fleet names; pending are 2,500 TrainJobs of a queue whose quota is used up and 2,500 of 4,000
//! nodes each that fit a worker but wait for capacity. A sample is a high-priority TrainJob of one
//! node: its event applied, a cycle, and its reconcile's plan up to `Action::Dispatch` (manager)
//! or the JobSet (single cluster); it is deleted again outside the timing. A node change is a free
//! node's readiness or a label flipped, through the merge in the fleet, and a cycle after it. The
//! two sides take turns of 25 samples, each opened by one untimed sample. `cargo bench --bench
//! fleet_manager` runs the full size; without `--bench` (as `cargo test --benches` does) a tenth.

mod fleet;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use trainyard::api::worker_cluster::FLEET_MANAGED_BY;
use trainyard::api::{ADMISSION_ANNOTATION, ClusterTrainingRuntime, PRIORITY_CLASS_LABEL, Topology, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::intent::IntentContext;
use trainyard::controller::deciding::plan::{Action, FleetInputs, Mode, acting_on, plan};
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::fleet::merge::{FleetMerge, WorkerEvent, fleet_name};
use trainyard::controller::watching::live::{Change, Initial, Live, LiveSettings};
use trainyard::controller::watching::scheduler_inputs::{Runtimes, intent_of};
use trainyard_topology::rng::SplitMix64;

const CLUSTERS: [&str; 3] = ["east", "west", "north"];
/// Running gangs hold this many nodes each, inside one rack.
const GANG_NODES: usize = 8;
/// Samples of one side in a row. The sides take turns, so that load from elsewhere on the machine
/// falls on both alike; each turn opens with one untimed sample, so that no timed one runs on the
/// caches the other side's turn left.
const TURN: usize = 25;
/// The target for creation to worker write.
const TARGET_P99: Duration = Duration::from_millis(100);

/// A TrainJob of `nodes` nodes of 8 GPUs in `queue`; a manager schedules only those MultiKueue
/// hands it, so the fleet's TrainJobs say so.
fn job(template: &TrainJob, name: &str, queue: &str, nodes: i32, created: i64, manager: bool) -> TrainJob {
    let mut job = sized_job(template, name, queue, nodes, created);
    job.spec.0.managed_by = manager.then(|| FLEET_MANAGED_BY.into());
    job
}

fn listed<K: Clone>(wrap: fn(Box<Event<K>>) -> Change, items: Vec<K>) -> Vec<Change> {
    let mut out = vec![wrap(Box::new(Event::Init))];
    out.extend(items.into_iter().map(|i| wrap(Box::new(Event::InitApply(i)))));
    out.push(wrap(Box::new(Event::InitDone)));
    out
}

struct Size {
    per_cluster: usize,
    pending: usize,
    samples: usize,
    changes: usize,
}

impl Size {
    /// Gangs running in each worker (80% of its nodes).
    fn busy(&self) -> usize {
        self.per_cluster * 8 / 10 / GANG_NODES
    }
}

/// Where nodes are: node `k` of worker `c` is the single cluster's node `c * per_cluster + k`, so
/// both sides hold the same racks, the same gangs and the same free nodes.
#[derive(Clone, Copy)]
struct Layout {
    manager: bool,
    per_cluster: usize,
}

impl Layout {
    fn mode(self) -> Mode {
        if self.manager { Mode::Manager } else { Mode::Standalone }
    }

    /// Node `k` of worker `c` as its own watch shows it.
    fn node(self, c: usize, k: usize) -> Node {
        if self.manager { node(k) } else { node(c * self.per_cluster + k) }
    }

    /// Node `k` of worker `c` as the live picture names it.
    fn name(self, c: usize, k: usize) -> String {
        if self.manager {
            fleet_name(CLUSTERS[c], &format!("gpu-{k:05}"))
        } else {
            format!("gpu-{:05}", c * self.per_cluster + k)
        }
    }

    /// Nodes of each worker the running gangs hold (the first ones).
    fn busy_nodes(self) -> usize {
        self.per_cluster * 8 / 10 / GANG_NODES * GANG_NODES
    }

    /// Whether a node the live picture names is one no running gang holds.
    fn is_free(self, name: &str) -> bool {
        let local = if self.manager { name.split_once('/').map_or("", |(_, n)| n) } else { name };
        let index: Option<usize> = local.strip_prefix("gpu-").and_then(|i| i.parse().ok());
        index.is_some_and(|i| i % self.per_cluster >= self.busy_nodes())
    }

    /// The free nodes, worker by worker in turn, so that consecutive changes hit different workers.
    fn free_nodes(self) -> Vec<(usize, usize)> {
        (self.busy_nodes()..self.per_cluster).flat_map(|k| (0..CLUSTERS.len()).map(move |c| (c, k))).collect()
    }
}

/// One side of the comparison: the manager's fleet, or one standalone cluster of the same nodes.
struct Side {
    at: Layout,
    live: Live,
    merge: Option<FleetMerge>,
    build: Duration,
}

impl Side {
    /// One node event as its worker saw it, through the merge on the fleet.
    fn node_event(&mut self, c: usize, node: Node, t: u64) {
        match &mut self.merge {
            Some(merge) => {
                for change in merge.apply(CLUSTERS[c], WorkerEvent::Node(Box::new(Event::Apply(node)))) {
                    self.live.apply(change, t);
                }
            }
            None => {
                self.live.apply(Change::Node(Box::new(Event::Apply(node))), t);
            }
        }
    }
}

fn build(manager: bool, size: &Size, template: &TrainJob, runtimes: &Arc<Runtimes>, now: i64) -> Result<Side, String> {
    let at = Layout { manager, per_cluster: size.per_cluster };
    let total = CLUSTERS.len() * size.per_cluster;
    let mut jobs = Vec::new();
    for (c, cluster) in CLUSTERS.iter().enumerate() {
        for g in 0..size.busy() {
            let name = format!("run-{cluster}-{g:05}");
            let mut j = job(template, &name, "research", GANG_NODES as i32, EPOCH + g as i64, manager);
            let slots = (0..GANG_NODES).map(|k| (at.name(c, g * GANG_NODES + k), 1)).collect();
            let record = AdmissionRecord {
                nodes: slots,
                domain: None,
                at: now as u64,
                cost: 0,
                slurm: false,
                devices: Vec::new(),
            };
            j.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ADMISSION_ANNOTATION.into(), record.encode());
            jobs.push(j);
        }
    }
    let mut rng = SplitMix64::new(7);
    for p in 0..size.pending {
        // Vision's gangs fit in one worker but not in the free nodes of any (nor of all together).
        let (queue, n) = if p % 2 == 0 {
            ("research", 1 + rng.below(8) as i32)
        } else {
            ("vision", (size.per_cluster * 4 / 5) as i32)
        };
        jobs.push(job(template, &format!("wait-{p:05}"), queue, n, EPOCH + 20_000 + p as i64, manager));
    }
    let workers: Vec<Vec<Node>> =
        (0..CLUSTERS.len()).map(|c| (0..size.per_cluster).map(|k| at.node(c, k)).collect()).collect();

    let started = Instant::now();
    let mut initial = Initial::default();
    let mut fleet_merge = None;
    if manager {
        let (mut merge, mut changes) = FleetMerge::new(CLUSTERS.map(String::from), false);
        for (cluster, nodes) in CLUSTERS.iter().zip(workers) {
            let mut feed = |e| changes.extend(merge.apply(cluster, e));
            feed(WorkerEvent::Node(Box::new(Event::Init)));
            for n in nodes {
                feed(WorkerEvent::Node(Box::new(Event::InitApply(n))));
            }
            feed(WorkerEvent::Node(Box::new(Event::InitDone)));
            feed(WorkerEvent::Pod(Box::new(Event::Init)));
            feed(WorkerEvent::Pod(Box::new(Event::InitDone)));
        }
        if !merge.started() {
            return Err("the merged first list did not complete".into());
        }
        changes.into_iter().for_each(|c| initial.take(c));
        fleet_merge = Some(merge);
    } else {
        let nodes = workers.into_iter().flatten().collect();
        listed(Change::Node, nodes).into_iter().chain(listed(Change::Pod, Vec::new())).for_each(|c| initial.take(c));
    }
    let topology_object = Topology::new("default", topology());
    listed(Change::Job, jobs)
        .into_iter()
        .chain(listed(Change::Queue, Vec::new()))
        .chain(listed(Change::Topology, vec![topology_object]))
        .for_each(|c| initial.take(c));
    initial.take(Change::Runtimes(runtimes.clone()));
    let (mut live, notes) = Live::start(initial, settings(manager, total), now as u64).map_err(|e| e.to_string())?;
    if !notes.is_empty() {
        return Err(format!("{notes:?}"));
    }
    let (first, _) = live.cycle(now as u64);
    let build = started.elapsed();
    // The cycle's own stats leave the counts out (they walk the whole table); asked for here.
    let (by_queue, by_reason) = live.scheduling_loop().pending_counts();
    let pending = by_queue.values().sum::<u64>() as usize;
    if pending != size.pending {
        return Err(format!("manager {manager}: {pending} pending, want {}: {by_reason:?}", size.pending));
    }
    if first.len() != size.pending + size.busy() * CLUSTERS.len() {
        return Err(format!("manager {manager}: {} decisions after the first cycle", first.len()));
    }
    let report = live.scheduling_loop().hosts_report();
    if report.eligible as usize != total || !report.problems.is_empty() {
        return Err(format!("manager {manager}: {} of {total} hosts eligible: {:?}", report.eligible, report.problems));
    }
    Ok(Side { at, live, merge: fleet_merge, build })
}

fn settings(manager: bool, nodes: usize) -> LiveSettings {
    LiveSettings {
        mode: if manager { Mode::Manager } else { Mode::Standalone },
        policy_text: bench_policy(nodes),
        policy_name: "bench".into(),
        topology: "default".into(),
        slurm_configured: false,
        binders: trainyard::controller::acting::binders::BinderSupport::ANY,
    }
}

/// Creation to write on one side, sample by sample: total, the cycle's part, the plan's part.
#[derive(Default)]
struct Admissions {
    total: Vec<Duration>,
    cycle: Vec<Duration>,
    plan: Vec<Duration>,
    /// Copies written, by worker (manager only).
    by_cluster: BTreeMap<String, usize>,
}

/// Sample `s`: a new high-priority TrainJob of one node, from its event to the write its plan
/// makes (the copy on the fleet, the JobSet on the single cluster); deleted again untimed.
fn admission(
    side: &mut Side,
    acc: &mut Admissions,
    template: &TrainJob,
    runtimes: &Runtimes,
    s: usize,
    t: u64,
) -> Result<(), String> {
    let policy_cfg = side.live.policy().0.clone();
    let ctx = IntentContext::new(&policy_cfg, GPU);
    let stamp = Time(Timestamp::from_second(t as i64).expect("time in range"));
    let mut j = job(template, &format!("new-{s:04}"), "prod", 1, t as i64, side.at.manager);
    j.metadata.labels.get_or_insert_with(BTreeMap::new).insert(PRIORITY_CLASS_LABEL.into(), "high".into());

    let began = Instant::now();
    side.live.apply(Change::Job(Box::new(Event::Apply(j.clone()))), t);
    let cycled = Instant::now();
    let (changed, _) = side.live.cycle(t);
    let cycle_time = cycled.elapsed();
    let Some(Some(decision @ Decision::Admit(record))) = changed.get(&j.key()) else {
        return Err(format!("sample {s}: {:?}", changed.get(&j.key())));
    };
    let planning = Instant::now();
    let (intent, rt) = intent_of(&j, runtimes, &ctx);
    // As a reconcile looks (fleet/workers.rs): the worker the decision places the gang in, reached,
    // with the runtime.
    let fleet = if side.at.manager {
        acting_on(&j, Some(decision)).map(|cluster| FleetInputs { cluster, reachable: true, ..Default::default() })
    } else {
        None
    };
    let inputs = first_look(&j, rt, &intent, Some(decision), side.at.mode(), &stamp, fleet);
    let actions = plan(&inputs);
    let written = actions.iter().find_map(|a| match a {
        Action::Dispatch { cluster, .. } if side.at.manager => Some(cluster.clone()),
        Action::Apply(v) if !side.at.manager && v["kind"] == "JobSet" => Some(String::new()),
        _ => None,
    });
    let Some(cluster) = written else {
        return Err(format!("sample {s}: nothing written in {actions:?}"));
    };
    acc.plan.push(planning.elapsed());
    acc.total.push(began.elapsed());
    acc.cycle.push(cycle_time);

    // The record is the commit point: a copy written before it could run twice.
    let at = |f: fn(&Action) -> bool| actions.iter().position(f);
    let record_at = at(|a| matches!(a, Action::RecordAdmission(_)));
    let dispatch_at = at(|a| matches!(a, Action::Dispatch { .. }));
    if side.at.manager && !matches!((record_at, dispatch_at), (Some(r), Some(d)) if r < d) {
        return Err(format!("sample {s}: the copy is not written after the record: {actions:?}"));
    }
    if !record.nodes.iter().all(|(n, _)| side.at.is_free(n)) {
        return Err(format!("sample {s}: placed on a busy node: {:?}", record.nodes));
    }
    if side.at.manager {
        *acc.by_cluster.entry(cluster).or_insert(0) += 1;
    }
    side.live.apply(Change::Job(Box::new(Event::Delete(j))), t);
    side.live.cycle(t);
    Ok(())
}

/// Free nodes made not Ready and Ready again, in pairs.
fn readiness_flips(at: Layout, n: usize) -> Vec<(usize, Node)> {
    let free = at.free_nodes();
    (0..n)
        .map(|i| {
            let (c, k) = free[(i / 2) % free.len()];
            let mut node = at.node(c, k);
            let ready = if i % 2 == 0 { "False" } else { "True" };
            for cond in node.status.as_mut().and_then(|s| s.conditions.as_mut()).into_iter().flatten() {
                cond.status = ready.into();
            }
            (c, node)
        })
        .collect()
}

/// Free nodes given a new value of a label the tree does not read (eligibility judged again).
fn relabels(at: Layout, n: usize) -> Vec<(usize, Node)> {
    let free = at.free_nodes();
    (0..n)
        .map(|i| {
            let (c, k) = free[i % free.len()];
            let mut node = at.node(c, k);
            let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.insert("example.com/maintenance".into(), format!("w{}", i / free.len()));
            (c, node)
        })
        .collect()
}

/// Node changes applied one at a time, the sides taking turns: the apply alone (merge + live
/// picture), and with the cycle after it; per side.
fn node_changes(
    sides: &mut [Side; 2],
    make: fn(Layout, usize) -> Vec<(usize, Node)>,
    n: usize,
    t: u64,
) -> [(Phase, Phase); 2] {
    let warm_ups = n.div_ceil(TURN);
    let mut changes = sides.each_ref().map(|s| make(s.at, n + warm_ups).into_iter());
    let mut times: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for start in (0..n).step_by(TURN) {
        for ((side, change), (applied, cycled)) in sides.iter_mut().zip(&mut changes).zip(&mut times) {
            for (i, (c, node)) in change.by_ref().take(TURN.min(n - start) + 1).enumerate() {
                let began = Instant::now();
                side.node_event(c, node, t);
                let apply_time = began.elapsed();
                black_box(side.live.cycle(t));
                if i > 0 {
                    applied.push(apply_time);
                    cycled.push(began.elapsed());
                }
            }
        }
    }
    times.map(|(a, c)| (phase(a), phase(c)))
}

fn phase(items: Vec<Duration>) -> Phase {
    Phase { count: items.len(), total: items.iter().sum(), items }
}

fn q(p: &Phase, at: f64) -> Duration {
    p.quantile(at).unwrap_or_default()
}

fn max(p: &Phase) -> Duration {
    p.items.iter().copied().max().unwrap_or_default()
}

/// Milliseconds to the hundredth: the admissions take a few.
fn ms2(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn main() -> Result<(), String> {
    let full = std::env::args().any(|a| a == "--bench");
    let size = if full {
        Size { per_cluster: 5_000, pending: 5_000, samples: 200, changes: 200 }
    } else {
        Size { per_cluster: 500, pending: 500, samples: 30, changes: 30 }
    };
    let total = CLUSTERS.len() * size.per_cluster;
    let now = EPOCH + 10_000;
    println!(
        "# Fleet manager: {} workers x {} nodes x 8 GPUs against one cluster of {total}; {} running gangs of {GANG_NODES} \
         nodes (80%), {} TrainJobs pending (half over quota, half of {} nodes waiting for capacity); one thread, \
         the two sides taking turns of {TURN} samples.\n",
        CLUSTERS.len(),
        size.per_cluster,
        size.busy() * CLUSTERS.len(),
        size.pending,
        size.per_cluster * 4 / 5
    );
    let template: TrainJob = serde_saphyr::from_str(TRAINJOB).expect("fixture TrainJob parses");
    let runtime: ClusterTrainingRuntime = serde_saphyr::from_str(RUNTIME).expect("fixture runtime parses");
    let runtimes = Arc::new(Runtimes::index([], [&runtime]));

    let mut sides = [build(true, &size, &template, &runtimes, now)?, build(false, &size, &template, &runtimes, now)?];
    let mut admit: [Admissions; 2] = Default::default();
    for start in (0..size.samples).step_by(TURN) {
        for (side, acc) in sides.iter_mut().zip(&mut admit) {
            let warm_up = size.samples + start / TURN;
            admission(side, &mut Admissions::default(), &template, &runtimes, warm_up, now as u64 + start as u64 + 1)?;
            for s in start..(start + TURN).min(size.samples) {
                admission(side, acc, &template, &runtimes, s, now as u64 + s as u64 + 1)?;
            }
        }
    }
    let t = now as u64 + size.samples as u64 + 1;
    let ready = node_changes(&mut sides, readiness_flips, size.changes, t);
    let label = node_changes(&mut sides, relabels, size.changes, t);
    for side in &sides {
        let eligible = side.live.scheduling_loop().hosts_report().eligible as usize;
        if eligible != total {
            return Err(format!("manager {}: {eligible} of {total} hosts eligible after the flips", side.at.manager));
        }
    }

    let [fleet, single] = admit;
    let times = |a: &Admissions| [&a.total, &a.cycle, &a.plan].map(|v| phase(v.clone()));
    let [[fa, fc, fp], [sa, sc, sp]] = [&fleet, &single].map(times);
    println!("{:<38} {:>6} {:>11} {:>10} {:>10} {:>10}", "phase", "count", "total", "per s", "p50", "p99");
    let applied = "event applied (fleet: through the merge)";
    for (i, (name, write, total, cycle, planned)) in
        [("manager", "Dispatch", &fa, &fc, &fp), ("single", "JobSet", &sa, &sc, &sp)].into_iter().enumerate()
    {
        Phase::once(1, sides[i].build).print(&format!("{name}: start"), "lists, engine built, first cycle");
        total.print(&format!("{name}: creation to {write}"), "event + cycle + plan");
        cycle.print(&format!("{name}:   the cycle"), "");
        planned.print(&format!("{name}:   the plan"), "intent + plan");
        ready[i].0.print(&format!("{name}: readiness flip"), applied);
        ready[i].1.print(&format!("{name}: readiness flip + cycle"), "");
        label[i].0.print(&format!("{name}: new label"), applied);
        label[i].1.print(&format!("{name}: new label + cycle"), "");
    }
    println!();
    let copies: Vec<String> = fleet.by_cluster.iter().map(|(c, n)| format!("{c} {n}")).collect();
    println!("copies written by worker: {}", copies.join(", "));

    let p99 = q(&fa, 0.99);
    println!();
    println!("| measure | manager ({} x {}) | single ({total}) | manager / single |", CLUSTERS.len(), size.per_cluster);
    println!("|---|---|---|---|");
    let row = |label: &str, a: Duration, b: Duration, unit: fn(Duration) -> String| {
        println!("| {label} | {} | {} | {:.2} |", unit(a), unit(b), ratio(a, b));
    };
    row("start (lists, engine, first cycle)", sides[0].build, sides[1].build, ms2);
    row("creation to write, p50", q(&fa, 0.5), q(&sa, 0.5), ms2);
    row("creation to write, p99", p99, q(&sa, 0.99), ms2);
    row("creation to write, max", max(&fa), max(&sa), ms2);
    row("  the cycle, p50", q(&fc, 0.5), q(&sc, 0.5), ms2);
    row("  the plan, p50", q(&fp, 0.5), q(&sp, 0.5), us);
    for (label, f, s) in [("readiness flip", &ready[0], &ready[1]), ("new label", &label[0], &label[1])] {
        row(&format!("{label}, applied, mean"), f.0.mean(), s.0.mean(), us);
        row(&format!("{label}, applied, p99"), q(&f.0, 0.99), q(&s.0, 0.99), us);
        row(&format!("{label} + cycle, mean"), f.1.mean(), s.1.mean(), us);
        row(&format!("{label} + cycle, p99"), q(&f.1, 0.99), q(&s.1, 0.99), us);
    }
    println!();
    let verdict = if p99 < TARGET_P99 { "holds" } else { "does NOT hold" };
    println!("target: creation to worker write p99 < {} ms: {verdict} ({})", TARGET_P99.as_millis(), ms(p99));
    Ok(())
}
