//! What the decide benches share: a gang ends when its runtime is up after it started, and a
//! preempted gang's end is forgotten.

use std::collections::BTreeSet;

use trainyard_policies::{Cycle, Engine, GangId};

/// When each running gang ends, by gang id's runtime.
pub struct Ends {
    ends: BTreeSet<(u64, u64)>,
    runtimes: Vec<u64>,
}

impl Ends {
    /// No gang running yet; `runtimes[id]` is gang `id`'s runtime.
    pub fn new(runtimes: Vec<u64>) -> Ends {
        Ends { ends: BTreeSet::new(), runtimes }
    }

    /// Finishes every gang due by `now`.
    pub fn finish_due(&mut self, engine: &mut Engine, now: u64) {
        while let Some(&(end, id)) = self.ends.first() {
            if end > now {
                break;
            }
            self.ends.pop_first();
            engine.finish(GangId(id), now).expect("running");
        }
    }

    /// Books the gangs `cycle` started at `now` and forgets those it preempted; returns how many
    /// it started and preempted.
    pub fn record(&mut self, cycle: &Cycle, now: u64) -> (usize, usize) {
        for p in &cycle.preempted {
            self.ends.retain(|&(_, id)| id != p.victim.0);
        }
        for a in &cycle.admitted {
            self.ends.insert((now + self.runtimes[a.id.0 as usize], a.id.0));
        }
        (cycle.admitted.len(), cycle.preempted.len())
    }
}
