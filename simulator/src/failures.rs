//! Host failures for capacity planning: each host fails after an exponentially distributed
//! time (mean: the MTBF) and is repaired after another (mean: the repair time). A gang on a
//! failed host crashes: it loses the work done since its last checkpoint and pays a restart
//! cost when it runs again. What happens to it in between is the policy's `node_loss` action:
//! wait for the repair, requeue after the grace, or replace the host with a spare.
//!
//! Every host draws from its own stream (seed and host index), so a host's failures do not
//! depend on what the rest of the replay does, and the same seed gives the same failures.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::{Deserialize, Serialize};
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::{Cluster, HostId};

/// The failure model of a replay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FailureModel {
    /// Mean time between failures of one host, seconds.
    pub mtbf_s: u64,
    /// Mean time to repair a failed host, seconds.
    pub repair_s: u64,
    /// Gangs save their work every this many seconds of running.
    pub checkpoint_interval_s: u64,
    /// Seconds a gang spends after a crash before it computes again (restore, warm-up).
    pub restart_s: u64,
    /// Seed of the failure times.
    pub seed: u64,
}

/// What the four settings a [`FailureModel::check`] may blame are called where they were given.
#[derive(Clone, Copy, Debug)]
pub struct SettingNames {
    /// The mean time between failures.
    pub mtbf: &'static str,
    /// The checkpoint interval.
    pub checkpoint_interval: &'static str,
    /// The restart cost.
    pub restart: &'static str,
    /// The mean time to repair.
    pub repair: &'static str,
}

impl SettingNames {
    /// As `trainyard simulate` takes them.
    pub const FLAGS: SettingNames = SettingNames {
        mtbf: "--mtbf",
        checkpoint_interval: "--checkpoint-interval",
        restart: "--restart-cost",
        repair: "--repair",
    };
    /// As a sweep file gives them.
    pub const SWEEP_FIELDS: SettingNames = SettingNames {
        mtbf: "mtbf",
        checkpoint_interval: "failures.checkpoint_interval",
        restart: "failures.restart_cost",
        repair: "failures.repair",
    };
}

impl FailureModel {
    /// Why this model cannot be replayed, if it cannot, in the words of `names`: a host that
    /// fails, on average, before a gang on it has restored its checkpoint and saved the next one
    /// lets no work progress, and one down as long as up has the replay follow failures rather
    /// than work; either would run without end.
    pub fn check(&self, names: &SettingNames) -> Result<(), String> {
        let d = crate::report::human_duration_long;
        let SettingNames { mtbf, checkpoint_interval, restart, repair } = *names;
        if self.mtbf_s == 0 {
            return Err(format!("{mtbf} must be longer than 0s"));
        }
        let cycle_s = self.checkpoint_interval_s.saturating_add(self.restart_s);
        if self.mtbf_s <= cycle_s {
            return Err(format!(
                "{mtbf} {} is not longer than {checkpoint_interval} {} plus {restart} {}: a host would \
                 fail, on average, before a gang on it saved any work, and no gang would finish; a real \
                 host's MTBF is thousands of hours",
                d(self.mtbf_s),
                d(self.checkpoint_interval_s),
                d(self.restart_s),
            ));
        }
        if self.repair_s >= self.mtbf_s {
            return Err(format!(
                "{repair} {} is not shorter than {mtbf} {}: a host would be down at least as long as up, \
                 and the replay would follow failures rather than work",
                d(self.repair_s),
                d(self.mtbf_s),
            ));
        }
        Ok(())
    }
}

/// What failures cost a replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureSummary {
    /// The model's mean time between failures per host, seconds.
    pub mtbf_s: u64,
    /// The model's mean repair time, seconds.
    pub repair_s: u64,
    /// The model's checkpoint interval, seconds.
    pub checkpoint_interval_s: u64,
    /// The model's restart cost, seconds.
    pub restart_s: u64,
    /// Host failures while work remained.
    pub host_failures: u64,
    /// Times a running gang crashed because a host under it failed.
    pub gang_interruptions: u64,
    /// Crashed gangs that waited for the repair and ran again on the same hosts.
    pub resumed_in_place: u64,
    /// Crashed gangs whose failed hosts were replaced by spare ones.
    pub replaced: u64,
    /// Crashed gangs sent back to the queue.
    pub requeued: u64,
    /// GPU-hours of work lost since the last checkpoint, plus restart time, rounded to 0.1.
    pub lost_gpu_hours: f64,
    /// GPU-hours of hosts down, rounded to 0.1.
    pub down_gpu_hours: f64,
    /// Share of the cluster's GPU-time down, over the replay, 6 decimals.
    pub down_share: f64,
}

impl FailureSummary {
    /// The report's lines for a terminal.
    pub fn render(&self) -> String {
        let h = crate::report::human_duration;
        format!(
            "Failures (MTBF {} per host, repair {}, checkpoint every {}, restart {})\n  \
             host failures {}, gangs crashed {} (resumed in place {}, replaced {}, requeued {})\n  \
             work lost {:.1} GPU-hours; GPUs down {:.1} GPU-hours ({:.2}% of GPU-time)\n",
            h(self.mtbf_s as f64),
            h(self.repair_s as f64),
            h(self.checkpoint_interval_s as f64),
            h(self.restart_s as f64),
            self.host_failures,
            self.gang_interruptions,
            self.resumed_in_place,
            self.replaced,
            self.requeued,
            self.lost_gpu_hours,
            self.down_gpu_hours,
            self.down_share * 100.0
        )
    }
}

/// A host's next change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Change {
    /// The host fails.
    Fail,
    /// The host is back.
    Repair,
}

/// The hosts' failures and repairs in time order, drawn as the replay reaches them.
#[derive(Clone, Debug)]
pub(crate) struct Failures {
    model: FailureModel,
    hosts: Vec<HostId>,
    streams: Vec<SplitMix64>,
    gpus: Vec<u64>,
    events: BinaryHeap<Reverse<(u64, usize, Change)>>,
    /// Hosts down now; a host alternates between failing and repair, so this is a count.
    down_hosts: usize,
    down_gpus: u64,
    /// Last time the down GPUs changed, for the down GPU-seconds.
    since: u64,
    down_gpu_s: u128,
    pub(crate) summary: FailureSummary,
    /// GPU-seconds of work and restart lost, accumulated by the replay.
    pub(crate) lost_gpu_s: u128,
}

impl Failures {
    /// The failures of `cluster`'s hosts from `start` on.
    pub(crate) fn new(model: FailureModel, cluster: &Cluster, start: u64) -> Failures {
        let topo = cluster.topology();
        let hosts: Vec<HostId> = topo.hosts().collect();
        let mut failures = Failures {
            model,
            hosts: hosts.clone(),
            streams: hosts
                .iter()
                .map(|h| SplitMix64::new(model.seed ^ (h.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
                .collect(),
            gpus: hosts.iter().map(|&h| topo.host_capacity(h).gpus).collect(),
            events: BinaryHeap::new(),
            down_hosts: 0,
            down_gpus: 0,
            since: start,
            down_gpu_s: 0,
            summary: FailureSummary {
                mtbf_s: model.mtbf_s,
                repair_s: model.repair_s,
                checkpoint_interval_s: model.checkpoint_interval_s,
                restart_s: model.restart_s,
                ..FailureSummary::default()
            },
            lost_gpu_s: 0,
        };
        for i in 0..hosts.len() {
            let after = failures.draw(i, model.mtbf_s);
            failures.events.push(Reverse((start.saturating_add(after), i, Change::Fail)));
        }
        failures
    }

    /// An exponentially distributed duration with this mean, at least one second.
    fn draw(&mut self, host: usize, mean_s: u64) -> u64 {
        let u = self.streams[host].unit();
        ((-(1.0 - u).ln()) * mean_s as f64).round().max(1.0) as u64
    }

    /// When the next failure or repair happens.
    pub(crate) fn next_at(&self) -> Option<u64> {
        self.events.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Takes the next change if it happens at `now`: the host and what happens to it. Its
    /// following change is drawn.
    pub(crate) fn take_due(&mut self, now: u64) -> Option<(HostId, Change)> {
        let &Reverse((t, host, change)) = self.events.peek()?;
        if t != now {
            return None;
        }
        self.events.pop();
        self.account(now);
        let (mean, next) = match change {
            Change::Fail => {
                self.down_hosts += 1;
                self.down_gpus += self.gpus[host];
                self.summary.host_failures += 1;
                (self.model.repair_s, Change::Repair)
            }
            Change::Repair => {
                self.down_hosts -= 1;
                self.down_gpus -= self.gpus[host];
                (self.model.mtbf_s, Change::Fail)
            }
        };
        let after = self.draw(host, mean);
        self.events.push(Reverse((now.saturating_add(after), host, next)));
        Some((self.hosts[host], change))
    }

    /// GPUs on failed hosts now.
    pub(crate) fn down_gpus(&self) -> u64 {
        self.down_gpus
    }

    /// Whether some host is down.
    pub(crate) fn any_down(&self) -> bool {
        self.down_hosts > 0
    }

    fn account(&mut self, now: u64) {
        self.down_gpu_s += u128::from(now.saturating_sub(self.since)) * u128::from(self.down_gpus);
        self.since = self.since.max(now);
    }

    /// The summary at the end of the replay (`end`), over `cluster_gpus` GPUs since `start`.
    pub(crate) fn finish(mut self, start: u64, end: u64, cluster_gpus: u64) -> FailureSummary {
        self.account(end);
        let round1 = |x: f64| (x * 10.0).round() / 10.0;
        self.summary.lost_gpu_hours = round1(self.lost_gpu_s as f64 / 3600.0);
        self.summary.down_gpu_hours = round1(self.down_gpu_s as f64 / 3600.0);
        let total = u128::from(end.saturating_sub(start)) * u128::from(cluster_gpus);
        self.summary.down_share =
            if total == 0 { 0.0 } else { (self.down_gpu_s as f64 / total as f64 * 1e6).round() / 1e6 };
        self.summary
    }

    /// The model in force.
    pub(crate) fn model(&self) -> &FailureModel {
        &self.model
    }
}

/// Work a crashed run keeps: the seconds of running (after its restart) up to its last
/// checkpoint, and the seconds it loses (the rest, plus the restart it had paid).
pub(crate) fn crash(ran_s: u64, restart_paid_s: u64, checkpoint_interval_s: u64) -> (u64, u64) {
    let computing = ran_s.saturating_sub(restart_paid_s);
    let kept = if checkpoint_interval_s == 0 { computing } else { computing - computing % checkpoint_interval_s };
    (kept, ran_s - kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(hosts: u64) -> Cluster {
        let yaml = format!("name: t\nlevels: [host]\ngenerate:\n  counts: [{hosts}]\n  node: {{gpus: 8, cpus: 64}}\n");
        Cluster::from_yaml(&yaml, "t.yaml").unwrap()
    }

    fn model(seed: u64) -> FailureModel {
        FailureModel { mtbf_s: 1000, repair_s: 100, checkpoint_interval_s: 60, restart_s: 30, seed }
    }

    /// Every change up to `until`.
    fn run(f: &mut Failures, until: u64) -> Vec<(u64, HostId, Change)> {
        let mut out = Vec::new();
        while let Some(t) = f.next_at().filter(|t| *t <= until) {
            while let Some((h, c)) = f.take_due(t) {
                out.push((t, h, c));
            }
        }
        out
    }

    #[test]
    fn hosts_alternate_between_failing_and_repair_and_the_same_seed_repeats() {
        let c = cluster(8);
        let mut a = Failures::new(model(7), &c, 0);
        let changes = run(&mut a, 200_000);
        for h in 0..8 {
            let mine: Vec<Change> = changes.iter().filter(|(_, x, _)| x.0 as usize == h).map(|(_, _, c)| *c).collect();
            assert!(mine.windows(2).all(|w| w[0] != w[1]), "host {h} alternates: {mine:?}");
            assert_eq!(mine.first(), Some(&Change::Fail));
        }
        let mut b = Failures::new(model(7), &c, 0);
        assert_eq!(run(&mut b, 200_000), changes);
        let mut other = Failures::new(model(8), &c, 0);
        assert_ne!(run(&mut other, 200_000), changes);
        // 8 hosts x 200,000 s / (1,000 + 100) s a cycle: about 1,450 failures.
        let fails = changes.iter().filter(|(_, _, c)| *c == Change::Fail).count();
        assert!((1_100..1_800).contains(&fails), "{fails} failures");
    }

    #[test]
    fn down_time_is_counted_while_hosts_are_down() {
        let c = cluster(4);
        let mut f = Failures::new(model(3), &c, 0);
        let changes = run(&mut f, 50_000);
        let mut expected: u128 = 0;
        let mut failed_at = [None; 4];
        for (t, h, change) in &changes {
            match change {
                Change::Fail => failed_at[h.0 as usize] = Some(*t),
                Change::Repair => expected += u128::from(t - failed_at[h.0 as usize].take().unwrap()) * 8,
            }
        }
        let end = changes.last().unwrap().0;
        for at in failed_at.iter().flatten() {
            expected += u128::from(end - at) * 8;
        }
        let summary = f.finish(0, end, 32);
        assert_eq!(summary.down_gpu_hours, (expected as f64 / 3600.0 * 10.0).round() / 10.0);
        assert!(summary.down_share > 0.0 && summary.down_share < 0.5, "{}", summary.down_share);
    }

    #[test]
    fn a_crash_keeps_the_work_up_to_the_last_checkpoint() {
        // 30 s of restart, then 150 s of computing: checkpoints at 60 and 120 keep 120 s.
        assert_eq!(crash(180, 30, 60), (120, 60));
        // Still restarting: nothing kept.
        assert_eq!(crash(20, 30, 60), (0, 20));
        assert_eq!(crash(100, 0, 0), (100, 0));
    }
}
