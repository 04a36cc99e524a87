//! Prometheus metrics: queue depth, admission latency, placement cost, preemptions, reconcile errors,
//! and the Slurm link.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of per-queue series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Queue name.
    pub queue: String,
}

/// Label of per-worker-cluster series (manager mode).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    /// The WorkerCluster's name.
    pub cluster: String,
}

/// Labels of pending TrainJobs by queue and reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PendingLabel {
    /// Queue name.
    pub queue: String,
    /// Condition reason (`QuotaExceeded`, `InsufficientCapacity`, ...).
    pub reason: String,
}

/// Label of per-state series of Slurm gangs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// The gang state (`pending`, `running`, `completed`, ...).
    pub state: String,
}

/// How a reconcile of a TrainJob ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `acted` (it wrote), `idle` (nothing to do), `conflict` (planned again at once) or `error`
    /// (retried with backoff).
    pub outcome: String,
}

/// A stage on the way from a TrainJob's creation to its workload.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    /// `seen_to_decided` (the watch event to the scheduling loop's admission),
    /// `decided_to_recorded` (to the admission record written: the reconcile's queue wait and
    /// its requests) or `recorded_to_launched` (to the JobSet or LeaderWorkerSet applied).
    pub stage: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn stage_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// All of trainyard's metrics, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Pending TrainJobs per queue after the last cycle.
    pub queue_depth: Family<QueueLabel, Gauge>,
    /// Seconds from TrainJob creation to admission.
    pub admission_latency: Histogram,
    /// Placement cost of each admission under trainyard's cost model.
    pub placement_cost: Histogram,
    /// Admissions.
    pub admissions: Counter,
    /// Preemptions.
    pub preemptions: Counter,
    /// Reconciles that failed (retried with backoff).
    pub reconcile_errors: Counter,
    /// Duration of one scheduling cycle, seconds.
    pub cycle_seconds: Histogram,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    /// 1 when the last look at Slurm answered, 0 when it did not (and without --slurm).
    pub slurm_up: Gauge,
    /// trainyard's gangs Slurm reports, by state, as of the last answer.
    pub slurm_gangs: Family<StateLabel, Gauge>,
    /// Seconds from trainyard first seeing a TrainJob to its JobSet or LeaderWorkerSet applied.
    pub launch_latency: Histogram,
    /// Times the scheduling engine was built (once per process: every change after start-up is
    /// applied in place).
    pub engine_builds: Counter,
    /// Hosts offered to gangs.
    pub hosts_eligible: Gauge,
    /// Hosts of the cluster that are unusable now (cordoned, not ready, removed while held).
    pub hosts_unusable: Gauge,
    /// GPUs requested by pods trainyard does not place, on known nodes.
    pub foreign_gpus: Gauge,
    /// Pending TrainJobs by queue and reason.
    pub pending: Family<PendingLabel, Gauge>,
    /// GPUs charged to each queue.
    pub queue_used_gpus: Family<QueueLabel, Gauge>,
    /// Each queue's nominal GPU quota.
    pub queue_nominal_gpus: Family<QueueLabel, Gauge>,
    /// GPUs of the cluster's hosts.
    pub cluster_gpus: Gauge,
    /// GPUs free on usable hosts.
    pub cluster_free_gpus: Gauge,
    /// Manager mode: GPUs of each worker cluster's hosts.
    pub worker_gpus: Family<ClusterLabel, Gauge>,
    /// Manager mode: GPUs free on each worker cluster's usable hosts.
    pub worker_free_gpus: Family<ClusterLabel, Gauge>,
    /// Writes of a decision refused because the TrainJob changed since it was read (planned again).
    pub conflicts: Counter,
    /// Statuses waiting for the status writer.
    pub status_backlog: Gauge,
    /// TrainJob reconciles by how they ended.
    pub reconciles: Family<OutcomeLabel, Counter>,
    /// Seconds each admission spent in each stage.
    pub admission_stages: HistogramFamily<StageLabel>,
    /// Requests to the API server by verb and resource (the client's layer writes them).
    pub api_requests: std::sync::Arc<super::api_requests::ApiRequests>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("trainyard");
        let m = Metrics {
            queue_depth: Family::default(),
            admission_latency: Histogram::new(exponential_buckets(1.0, 2.0, 20)),
            placement_cost: Histogram::new(exponential_buckets(64.0, 4.0, 12)),
            admissions: Counter::default(),
            preemptions: Counter::default(),
            reconcile_errors: Counter::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 20)),
            leader: Gauge::default(),
            slurm_up: Gauge::default(),
            slurm_gangs: Family::default(),
            launch_latency: Histogram::new(exponential_buckets(0.005, 2.0, 16)),
            engine_builds: Counter::default(),
            hosts_eligible: Gauge::default(),
            hosts_unusable: Gauge::default(),
            foreign_gpus: Gauge::default(),
            pending: Family::default(),
            queue_used_gpus: Family::default(),
            queue_nominal_gpus: Family::default(),
            cluster_gpus: Gauge::default(),
            cluster_free_gpus: Gauge::default(),
            worker_gpus: Family::default(),
            worker_free_gpus: Family::default(),
            conflicts: Counter::default(),
            status_backlog: Gauge::default(),
            reconciles: Family::default(),
            admission_stages: Family::new_with_constructor(stage_histogram),
            api_requests: std::sync::Arc::default(),
            registry: Registry::default(),
        };
        registry.register("queue_pending", "Pending TrainJobs per queue", m.queue_depth.clone());
        registry.register("admission_latency_seconds", "TrainJob creation to admission", m.admission_latency.clone());
        registry.register("placement_cost", "Placement cost of admitted gangs", m.placement_cost.clone());
        registry.register("admissions", "Gangs admitted", m.admissions.clone());
        registry.register("preemptions", "Gangs preempted", m.preemptions.clone());
        registry.register("reconcile_errors", "Failed reconciles (retried)", m.reconcile_errors.clone());
        registry.register("cycle_duration_seconds", "Scheduling cycle duration", m.cycle_seconds.clone());
        registry.register("leader", "1 while this replica holds the lease", m.leader.clone());
        registry.register("slurm_up", "1 when Slurm answered the last look", m.slurm_up.clone());
        registry.register("slurm_gangs", "trainyard gangs Slurm reports, by state", m.slurm_gangs.clone());
        registry.register(
            "launch_latency_seconds",
            "TrainJob first seen to its workload applied",
            m.launch_latency.clone(),
        );
        registry.register("engine_builds", "Times the scheduling engine was built", m.engine_builds.clone());
        registry.register("hosts_eligible", "Hosts offered to gangs", m.hosts_eligible.clone());
        registry.register(
            "hosts_unusable",
            "Hosts cordoned, not ready or removed while held",
            m.hosts_unusable.clone(),
        );
        registry.register("foreign_gpus", "GPUs requested by pods trainyard does not place", m.foreign_gpus.clone());
        registry.register("pending", "Pending TrainJobs by queue and reason", m.pending.clone());
        registry.register("queue_used_gpus", "GPUs charged to each queue", m.queue_used_gpus.clone());
        registry.register("worker_gpus", "GPUs of each worker cluster (manager mode)", m.worker_gpus.clone());
        registry.register(
            "worker_free_gpus",
            "GPUs free on each worker cluster's usable hosts (manager mode)",
            m.worker_free_gpus.clone(),
        );
        registry.register("queue_nominal_gpus", "Nominal GPU quota of each queue", m.queue_nominal_gpus.clone());
        registry.register("cluster_gpus", "GPUs of the cluster's hosts", m.cluster_gpus.clone());
        registry.register("cluster_free_gpus", "GPUs free on usable hosts", m.cluster_free_gpus.clone());
        registry.register("conflicts", "Decision writes refused on a changed TrainJob", m.conflicts.clone());
        registry.register("status_backlog", "Statuses waiting to be written", m.status_backlog.clone());
        registry.register("reconciles", "TrainJob reconciles by outcome", m.reconciles.clone());
        registry.register(
            "admission_stage_seconds",
            "Seconds of each stage from a TrainJob seen to its workload applied",
            m.admission_stages.clone(),
        );
        registry.register("api_requests", "Requests to the API server", m.api_requests.sent.clone());
        registry.register(
            "api_request_seconds",
            "Seconds until the API server answered",
            m.api_requests.seconds.clone(),
        );
        registry.register(
            "api_requests_refused",
            "Requests the API server refused or failed",
            m.api_requests.refused.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Counts one reconcile.
    pub fn reconciled(&self, outcome: &str) {
        self.reconciles.get_or_create(&OutcomeLabel { outcome: outcome.to_string() }).inc();
    }

    /// Times one stage of an admission.
    pub fn stage(&self, stage: &str, seconds: f64) {
        self.admission_stages.get_or_create(&StageLabel { stage: stage.to_string() }).observe(seconds);
    }

    /// Reports what the last look at Slurm found; the gang counts keep their last values while
    /// Slurm does not answer.
    pub fn observe_slurm(&self, snapshot: &crate::controller::slurm::cluster_view::SlurmSnapshot) {
        self.slurm_up.set(i64::from(snapshot.unreachable.is_none() && snapshot.jobs.is_some()));
        if snapshot.unreachable.is_some() {
            return;
        }
        self.slurm_gangs.clear();
        for (state, n) in snapshot.gang_states() {
            self.slurm_gangs.get_or_create(&StateLabel { state }).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_with_the_prefix() {
        let m = Metrics::default();
        m.admissions.inc();
        m.queue_depth.get_or_create(&QueueLabel { queue: "team-a".into() }).set(3);
        let text = m.render();
        assert!(text.contains("trainyard_admissions_total 1"), "{text}");
        assert!(text.contains("trainyard_queue_pending{queue=\"team-a\"} 3"), "{text}");
    }

    #[test]
    fn every_series_the_dashboard_reads_is_exported() {
        let m = Metrics::default();
        // Families show up in the text once they have a series.
        let cluster = ClusterLabel { cluster: "east".into() };
        m.worker_gpus.get_or_create(&cluster).set(8);
        m.worker_free_gpus.get_or_create(&cluster).set(8);
        m.queue_depth.get_or_create(&QueueLabel { queue: "q".into() }).set(0);
        m.queue_used_gpus.get_or_create(&QueueLabel { queue: "q".into() }).set(0);
        m.queue_nominal_gpus.get_or_create(&QueueLabel { queue: "q".into() }).set(0);
        m.pending.get_or_create(&PendingLabel { queue: "q".into(), reason: "r".into() }).set(0);
        let text = m.render();
        let exported: std::collections::BTreeSet<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ").and_then(|t| t.split_whitespace().next())).collect();
        let dashboard = include_str!("../../../charts/trainyard/dashboards/trainyard.json");
        let mut read = std::collections::BTreeSet::new();
        for (i, _) in dashboard.match_indices("trainyard_") {
            let name: String = dashboard[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let family = ["_bucket", "_total"].iter().fold(name.as_str(), |n, s| n.strip_suffix(s).unwrap_or(n));
            read.insert(family.to_string());
        }
        let missing: Vec<&String> = read.iter().filter(|n| !exported.contains(n.as_str())).collect();
        assert!(!read.is_empty() && missing.is_empty(), "the dashboard reads series never exported: {missing:?}");
    }

    #[test]
    fn the_slurm_link_is_reported() {
        use crate::controller::slurm::cluster_view::SlurmSnapshot;
        let m = Metrics::default();
        let job = |id: u64, gang: &str, state: &str| trainyard_slurm::JobInfo {
            id,
            name: "j".into(),
            gang: Some(gang.into()),
            slurm_state: state.into(),
            state: trainyard_bridges::slurm::slurm_state(state),
            reason: String::new(),
            nodes: String::new(),
            exit_code: None,
            partition: String::new(),
            node_count: 1,
            array: None,
        };
        let mut snapshot = SlurmSnapshot::default();
        snapshot.observed(&[job(1, "a", "RUNNING"), job(2, "b", "RUNNING"), job(3, "c", "PENDING")], None);
        m.observe_slurm(&snapshot);
        let text = m.render();
        assert!(text.contains("trainyard_slurm_up 1"), "{text}");
        assert!(text.contains("trainyard_slurm_gangs{state=\"running\"} 2"), "{text}");
        assert!(text.contains("trainyard_slurm_gangs{state=\"pending\"} 1"), "{text}");
        snapshot.unreachable = Some("connection refused".into());
        m.observe_slurm(&snapshot);
        let text = m.render();
        assert!(text.contains("trainyard_slurm_up 0"), "{text}");
        assert!(text.contains("trainyard_slurm_gangs{state=\"running\"} 2"), "last known counts stay: {text}");
    }
}
