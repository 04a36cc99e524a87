//! When running gangs may be displaced, and what a displaced gang loses.

/// When running gangs may be displaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreemptionRules {
    /// A gang may preempt lower-priority gangs of its own queue.
    pub within_queue: bool,
    /// A gang within its queue's quota may preempt gangs of borrowing queues.
    pub reclaim: bool,
    /// Work is saved this often; a victim loses the time since its last checkpoint (all of
    /// its run when `None`).
    pub checkpoint_interval_s: Option<u64>,
}

impl PreemptionRules {
    /// Seconds of work lost by a gang that ran `ran_s` seconds.
    pub fn lost(&self, ran_s: u64) -> u64 {
        match self.checkpoint_interval_s {
            Some(every) if every > 0 => ran_s % every,
            _ => ran_s,
        }
    }
}
