//! The shadow comparison summed up: per policy totals, head-to-head counts against trainyard,
//! and every gang on which trainyard did worse than a baseline.

use serde::Serialize;
use trainyard_topology::{PlacementPolicy, Topology};

use super::shadow::{Answer, ShadowGang};
use crate::{Fate, JobOutcome};

/// At most this many gangs where trainyard did worse are listed; all of them are counted.
pub const MAX_LISTED_LOSSES: usize = 50;

/// Domains used at one level, summed over gangs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LevelDomains {
    /// Level name, outermost first; the host level last.
    pub level: String,
    /// Domains of that level used, summed over the gangs.
    pub domains: u64,
}

/// One policy's placements of the gangs trainyard admitted, on the same free capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShadowPolicy {
    /// Placement policy name.
    pub policy: String,
    /// Gangs it found a placement for.
    pub placed: u64,
    /// Gangs it found no placement for although trainyard did.
    pub not_placed: u64,
    /// Sum of its costs over the gangs it placed.
    pub total_cost: u64,
    /// Sum of trainyard's costs over the same gangs, for a like-for-like total.
    pub trainyard_total_cost: u64,
    /// `total_cost / placed`, rounded to 3 decimals.
    pub mean_cost: f64,
    /// Domains used per level, summed over the gangs it placed.
    pub domains_per_level: Vec<LevelDomains>,
    /// Domains used above the host level, summed over the gangs it placed.
    pub domains_above_hosts: u64,
    /// The same sum for trainyard over the same gangs.
    pub trainyard_domains_above_hosts: u64,
    /// Gangs kept within one domain of the level just above hosts (a rack or ToR).
    pub confined_to_one_rack: u64,
    /// Gangs on which trainyard's cost is higher than this policy's.
    pub trainyard_costlier: u64,
    /// Gangs on which trainyard's cost is lower.
    pub trainyard_cheaper: u64,
    /// Gangs on which trainyard uses more domains above the host level.
    pub trainyard_spans_more: u64,
    /// Gangs on which trainyard uses fewer domains above the host level.
    pub trainyard_spans_fewer: u64,
}

/// One placement as a loss report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlacementView {
    /// Cost under the cost model.
    pub cost: u64,
    /// Path of the smallest domain holding every pod.
    pub domain: String,
    /// Level of that domain (`cluster` for the root).
    pub level: String,
    /// Free GPUs of that domain before the gang was placed.
    pub domain_free_gpus: u64,
    /// Domains used per level, outermost first.
    pub spans: Vec<u32>,
    /// `host x pods`, sorted by host.
    pub hosts: Vec<String>,
}

/// A gang on which trainyard did worse than a baseline, with what both chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Loss {
    /// Job identifier from the trace.
    pub job: String,
    /// Line of the trace the job came from.
    pub line: u64,
    /// When it was admitted, seconds of virtual time.
    pub start_s: u64,
    /// Pods of the gang.
    pub pods: u32,
    /// GPUs of each pod.
    pub pod_gpus: u64,
    /// The baseline that did better.
    pub baseline: String,
    /// Trainyard's cost was higher.
    pub costlier: bool,
    /// Trainyard used more domains above the host level.
    pub spans_more: bool,
    /// `trainyard` is the placement the engine committed after EASY backfill moved the gang
    /// off reserved hosts, not trainyard's answer to the question the baseline was asked.
    pub moved_by_reservation: bool,
    /// Free GPUs of the cluster before the gang was placed.
    pub free_gpus: u64,
    /// Hosts with nothing allocated before the gang was placed.
    pub idle_hosts: u64,
    /// Trainyard's placement.
    pub trainyard: PlacementView,
    /// What the baseline would have done.
    pub other: PlacementView,
}

/// The shadow comparison of one replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shadow {
    /// Gangs admitted (each judged by every policy).
    pub gangs: u64,
    /// Trainyard answers proven optimal under the cost model.
    pub proven_optimal: u64,
    /// Trainyard first, then each baseline; trainyard's answers on the same free capacity.
    pub policies: Vec<ShadowPolicy>,
    /// (gang, baseline) pairs where trainyard's answer cost more than the baseline's.
    pub costlier_pairs: u64,
    /// (gang, baseline) pairs where trainyard's answer used more domains above the hosts.
    pub spans_more_pairs: u64,
    /// The first [`MAX_LISTED_LOSSES`] of those pairs, in admission then baseline order.
    pub losses: Vec<Loss>,
    /// Admissions EASY backfill moved off hosts reserved for a blocked gang.
    pub moved_by_reservation: u64,
    /// (gang, baseline) pairs where such a moved placement cost more than the baseline's
    /// unconstrained answer.
    pub moved_costlier_pairs: u64,
    /// (gang, baseline) pairs where a moved placement used more domains above the hosts.
    pub moved_spans_more_pairs: u64,
    /// The first [`MAX_LISTED_LOSSES`] of those pairs.
    pub moved_losses: Vec<Loss>,
    /// Every admission with every policy's answer; not serialised (large).
    #[serde(skip)]
    pub detail: Vec<ShadowGang>,
}

/// Counts and the first listed pairs of one kind of loss.
#[derive(Default)]
struct Losses {
    costlier: u64,
    spans_more: u64,
    listed: Vec<Loss>,
}

impl Losses {
    /// Counts (and lists while there is room) `mine` against `theirs`; `moved` says `mine` is
    /// the placement backfill moved, not trainyard's answer.
    fn judge(&mut self, context: &Context<'_>, gang: &ShadowGang, (mine, moved): (&Answer, bool), theirs: &Answer) {
        let costlier = mine.cost > theirs.cost;
        let spans_more = mine.spans.above_hosts() > theirs.spans.above_hosts();
        self.costlier += u64::from(costlier);
        self.spans_more += u64::from(spans_more);
        if (costlier || spans_more) && self.listed.len() < MAX_LISTED_LOSSES {
            let outcome = &context.outcomes[gang.job];
            let start_s = match outcome.fate {
                Fate::Finished { start, .. } => start,
                Fate::Unschedulable { .. } => 0,
            };
            self.listed.push(Loss {
                job: outcome.job.id.clone(),
                line: outcome.job.line,
                start_s,
                pods: outcome.job.gang.pods(),
                pod_gpus: outcome.job.gang.largest_pod().gpus,
                baseline: context.policy.name().to_string(),
                costlier,
                spans_more,
                moved_by_reservation: moved,
                free_gpus: gang.free_gpus,
                idle_hosts: gang.idle_hosts,
                trainyard: view(context.topo, mine),
                other: view(context.topo, theirs),
            });
        }
    }
}

/// What loss reports need besides the gang.
struct Context<'a> {
    topo: &'a Topology,
    policy: PlacementPolicy,
    outcomes: &'a [JobOutcome],
}

/// Accumulates one policy's column.
struct Column {
    row: ShadowPolicy,
    per_level: Vec<u64>,
}

impl Column {
    fn new(policy: PlacementPolicy, levels: usize) -> Column {
        let row = ShadowPolicy {
            policy: policy.name().to_string(),
            placed: 0,
            not_placed: 0,
            total_cost: 0,
            trainyard_total_cost: 0,
            mean_cost: 0.0,
            domains_per_level: Vec::new(),
            domains_above_hosts: 0,
            trainyard_domains_above_hosts: 0,
            confined_to_one_rack: 0,
            trainyard_costlier: 0,
            trainyard_cheaper: 0,
            trainyard_spans_more: 0,
            trainyard_spans_fewer: 0,
        };
        Column { row, per_level: vec![0; levels] }
    }

    fn add(&mut self, answer: Option<&Answer>, trainyard: &Answer, rack_depth: u8) {
        let Some(a) = answer else {
            self.row.not_placed += 1;
            return;
        };
        let r = &mut self.row;
        r.placed += 1;
        r.total_cost += a.cost;
        r.trainyard_total_cost += trainyard.cost;
        for (sum, &n) in self.per_level.iter_mut().zip(&a.spans.per_level) {
            *sum += u64::from(n);
        }
        let (mine, theirs) = (trainyard.spans.above_hosts(), a.spans.above_hosts());
        r.domains_above_hosts += u64::from(theirs);
        r.trainyard_domains_above_hosts += u64::from(mine);
        r.confined_to_one_rack += u64::from(a.depth >= rack_depth);
        r.trainyard_costlier += u64::from(trainyard.cost > a.cost);
        r.trainyard_cheaper += u64::from(trainyard.cost < a.cost);
        r.trainyard_spans_more += u64::from(mine > theirs);
        r.trainyard_spans_fewer += u64::from(mine < theirs);
    }

    fn finish(mut self, topo: &Topology) -> ShadowPolicy {
        let r = &mut self.row;
        r.mean_cost = if r.placed == 0 { 0.0 } else { (r.total_cost as f64 / r.placed as f64 * 1e3).round() / 1e3 };
        r.domains_per_level = topo
            .levels()
            .iter()
            .zip(&self.per_level)
            .map(|(level, &domains)| LevelDomains { level: level.clone(), domains })
            .collect();
        self.row
    }
}

/// Depth of the level just above hosts: a gang whose smallest domain is this deep or deeper
/// sits in one rack (or ToR).
pub(crate) fn rack_depth(topo: &Topology) -> u8 {
    topo.host_depth().saturating_sub(1)
}

/// Sums up the recorded gangs. `outcomes` (of the same replay) give the start times.
pub(crate) fn summarise(
    topo: &Topology,
    baselines: &[PlacementPolicy],
    detail: Vec<ShadowGang>,
    outcomes: &[JobOutcome],
) -> Shadow {
    let levels = topo.levels().len();
    let rack = rack_depth(topo);
    let mut own = Column::new(PlacementPolicy::Trainyard, levels);
    let mut columns: Vec<Column> = baselines.iter().map(|&p| Column::new(p, levels)).collect();
    let (mut answers, mut moved) = (Losses::default(), Losses::default());
    for gang in &detail {
        own.add(Some(&gang.trainyard), &gang.trainyard, rack);
        for ((column, answer), &policy) in columns.iter_mut().zip(&gang.baselines).zip(baselines) {
            column.add(answer.as_ref(), &gang.trainyard, rack);
            let Some(theirs) = answer else { continue };
            let context = Context { topo, policy, outcomes };
            answers.judge(&context, gang, (&gang.trainyard, false), theirs);
            if let Some(committed) = &gang.moved {
                moved.judge(&context, gang, (committed, true), theirs);
            }
        }
    }
    let mut policies = vec![own.finish(topo)];
    policies.extend(columns.into_iter().map(|c| c.finish(topo)));
    Shadow {
        gangs: detail.len() as u64,
        proven_optimal: detail.iter().filter(|g| g.proven_optimal).count() as u64,
        policies,
        costlier_pairs: answers.costlier,
        spans_more_pairs: answers.spans_more,
        losses: answers.listed,
        moved_by_reservation: detail.iter().filter(|g| g.moved.is_some()).count() as u64,
        moved_costlier_pairs: moved.costlier,
        moved_spans_more_pairs: moved.spans_more,
        moved_losses: moved.listed,
        detail,
    }
}

fn view(topo: &Topology, a: &Answer) -> PlacementView {
    let path = topo.path(a.placement.domain);
    PlacementView {
        cost: a.cost,
        domain: if path.is_empty() { topo.name().to_string() } else { path },
        level: topo.level_name(a.placement.domain).to_string(),
        domain_free_gpus: a.domain_free_gpus,
        spans: a.spans.per_level.clone(),
        hosts: a.placement.per_host().into_iter().map(|(h, n)| format!("{} x{n}", topo.host_name(h))).collect(),
    }
}
