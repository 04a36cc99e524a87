//! Shadow comparison: before each gang trainyard admits, every baseline is asked where it
//! would put the same gang on the same free capacity.
//!
//! The observer runs after each scheduling cycle, when the cycle's admissions are already
//! committed. A private mirror of the cluster is first brought to the engine's free state
//! (host by host, so no clone of the topology per cycle); then the admissions are released in
//! reverse order, so that admission `i` is judged on exactly the capacity the engine saw when
//! it placed that gang.

use trainyard_policies::{Cycle, Engine};
use trainyard_topology::{Cluster, Demand, HostId, Placement, PlacementPolicy, Resources, Spans};

use crate::{SimError, TraceJob};

/// One policy's placement of one gang, judged on the free capacity just before the gang was
/// admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Cost under the cluster's cost model on that free capacity.
    pub cost: u64,
    /// Domains used per level (outermost first, hosts last).
    pub spans: Spans,
    /// Depth of the smallest domain holding every pod (0 = the whole cluster).
    pub depth: u8,
    /// Free GPUs of that domain before the gang was placed.
    pub domain_free_gpus: u64,
    /// The placement itself.
    pub placement: Placement,
}

/// One gang trainyard admitted, and where each baseline would have put it instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShadowGang {
    /// Index of the job in the replayed trace.
    pub job: usize,
    /// Free GPUs of the cluster before the gang was placed.
    pub free_gpus: u64,
    /// Hosts with nothing allocated before the gang was placed.
    pub idle_hosts: u64,
    /// Trainyard's answer on this free capacity: the same question every baseline is asked.
    pub trainyard: Answer,
    /// What the engine committed, when it differs from `trainyard`: EASY backfill moved the
    /// gang off hosts reserved for a blocked gang, a constraint the baselines are not given.
    pub moved: Option<Answer>,
    /// Trainyard's answer carries a lower bound equal to its cost: proven optimal.
    pub proven_optimal: bool,
    /// Each baseline's answer, in the order of the baselines; `None` when it found no room.
    pub baselines: Vec<Option<Answer>>,
}

/// Watches a trainyard replay and records a [`ShadowGang`] for every admission.
pub(crate) struct ShadowObserver<'a> {
    mirror: Cluster,
    jobs: &'a [TraceJob],
    baselines: &'a [PlacementPolicy],
    /// Every admission so far, in admission order.
    pub(crate) gangs: Vec<ShadowGang>,
    /// The first failure; later cycles are then ignored and the caller reports it.
    pub(crate) error: Option<SimError>,
}

impl<'a> ShadowObserver<'a> {
    /// An observer over an empty copy of `cluster`.
    pub(crate) fn new(cluster: &Cluster, jobs: &'a [TraceJob], baselines: &'a [PlacementPolicy]) -> Self {
        let mut mirror = Cluster::new(cluster.topology().clone());
        mirror.set_placement_policy(PlacementPolicy::Trainyard);
        ShadowObserver { mirror, jobs, baselines, gangs: Vec::new(), error: None }
    }

    /// Records the admissions of one cycle; the hook given to the replay.
    pub(crate) fn observe(&mut self, engine: &Engine, cycle: &Cycle) {
        if self.error.is_some() || cycle.admitted.is_empty() {
            return;
        }
        if let Err(e) = self.record(engine, cycle) {
            self.error = Some(e);
        }
    }

    fn record(&mut self, engine: &Engine, cycle: &Cycle) -> Result<(), SimError> {
        self.sync(engine.cluster())?;
        let start = self.gangs.len();
        for admission in cycle.admitted.iter().rev() {
            let job = admission.id.0 as usize;
            let shape = &self.jobs[job].gang;
            let topo = self.mirror.topology();
            let demand = topo.demand(shape, None, trainyard_topology::HostClass::DEFAULT).map_err(engine_error)?;
            self.mirror.release_placement(&admission.placement).map_err(engine_error)?;
            let committed = answer(&self.mirror, admission.placement.clone());
            // The baselines place one pod shape and know no GPU layout inside hosts nor DRA
            // devices (the mirror follows free counts, not GPU indices or devices): such gangs are
            // shown as placed.
            let single = match demand {
                Demand::Single(request) if shape.layout_need().is_none() && shape.claims().is_none() => Some(request),
                _ => None,
            };
            let Some(request) = single else {
                let proven_optimal = committed.placement.lower_bound == Some(committed.cost);
                let baselines = self.baselines.iter().map(|_| None).collect();
                self.gangs.push(ShadowGang {
                    job,
                    free_gpus: self.mirror.total_free().gpus,
                    idle_hosts: idle_hosts(&self.mirror),
                    trainyard: committed,
                    moved: None,
                    proven_optimal,
                    baselines,
                });
                continue;
            };
            // The engine placed this gang on this very state, so trainyard finds a placement
            // here too; should it not, the committed one stands in.
            let (trainyard, moved) = match self.mirror.place_with(PlacementPolicy::Trainyard, &request) {
                Ok(fresh) if fresh.per_host() != admission.placement.per_host() => {
                    (answer(&self.mirror, fresh), Some(committed))
                }
                _ => (committed, None),
            };
            let proven_optimal = trainyard.placement.lower_bound == Some(trainyard.cost);
            let baselines = self
                .baselines
                .iter()
                .map(|&p| self.mirror.place_with(p, &request).ok().map(|pl| answer(&self.mirror, pl)))
                .collect();
            self.gangs.push(ShadowGang {
                job,
                free_gpus: self.mirror.total_free().gpus,
                idle_hosts: idle_hosts(&self.mirror),
                trainyard,
                moved,
                proven_optimal,
                baselines,
            });
        }
        self.gangs[start..].reverse();
        Ok(())
    }

    /// Makes the mirror's free capacity equal to `live`'s, host by host.
    fn sync(&mut self, live: &Cluster) -> Result<(), SimError> {
        let hosts: Vec<HostId> = live.topology().hosts().collect();
        for host in hosts {
            let (want, have) = (live.host_free(host), self.mirror.host_free(host));
            if want == have {
                continue;
            }
            let capacity = live.topology().host_capacity(host);
            let used = |free: Resources| capacity.checked_sub(&free).unwrap_or(Resources::ZERO);
            self.mirror.release(host, used(have)).map_err(engine_error)?;
            self.mirror.allocate(host, used(want)).map_err(engine_error)?;
        }
        Ok(())
    }
}

/// A topology error met while mirroring the engine: the engine accepted the same operation,
/// so this is a bug, reported like the engine's own.
fn engine_error(e: trainyard_topology::Error) -> SimError {
    SimError::Engine(e.into())
}

/// Judges `placement` on `cluster`'s current free capacity.
fn answer(cluster: &Cluster, placement: Placement) -> Answer {
    let topo = cluster.topology();
    let cost = cluster.cost_model().usage_cost(topo, cluster.free_all(), &placement.per_host_usage());
    let spans = Spans::of(topo, placement.hosts.iter().copied());
    let domain_free_gpus = cluster.free(placement.domain).gpus;
    Answer { cost, spans, depth: placement.depth, domain_free_gpus, placement }
}

/// Hosts whose whole capacity is free.
fn idle_hosts(cluster: &Cluster) -> u64 {
    let topo = cluster.topology();
    topo.hosts().filter(|&h| cluster.host_free(h) == topo.host_capacity(h)).count() as u64
}
