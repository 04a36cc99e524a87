//! The engine's side of fair sharing (`cycle/order.rs`, `quota/fair_share.rs`): turning it on,
//! and a queue's share.

use crate::cycle::order::scaled_share;
use crate::quota::{FairShare, QueueIdx};
use crate::{Engine, FairSharing};

impl Engine {
    /// Turns fair sharing on (with an optional half-life for past usage) or off.
    pub fn set_fair_sharing(&mut self, fair: Option<FairSharing>) {
        self.state.fair = fair;
        self.state.fair_share = FairShare::new(fair.and_then(|f| f.half_life_s));
    }

    /// A queue's weighted dominant share now (with its decayed history when fair sharing has
    /// a half-life), scaled to an integer (10^9 is a share of 1).
    pub fn share(&self, queue: QueueIdx) -> u64 {
        scaled_share(&self.state.fair_share, &self.state.quotas, self.state.cluster.total_capacity(), queue)
    }
}
