//! The reason a quota block gives a waiting gang: which queue, how much it asks, holds and could
//! have, and which limit (the queue's own or a pool above it) blocks.

use crate::PendingReason;
use crate::quota::{QueueIdx, QuotaBlock, QuotaTree};

impl QuotaTree {
    /// The reason a quota block gives now, reusing the words of `kept` (the same limit's last
    /// reason) when there is one.
    pub(crate) fn blocked_reason(
        &self,
        queue: QueueIdx,
        gpus: u64,
        block: &QuotaBlock,
        kept: Option<PendingReason>,
    ) -> PendingReason {
        let (used, available) = (self.usage(queue).gpus, self.available(queue).gpus);
        match kept {
            Some(PendingReason::Quota { queue, requested_gpus, limit, blocked_by, .. }) => PendingReason::Quota {
                queue,
                requested_gpus,
                used_gpus: used,
                available_gpus: available,
                limit,
                blocked_by,
            },
            _ => PendingReason::Quota {
                queue: self.name(queue).to_string(),
                requested_gpus: gpus,
                used_gpus: used,
                available_gpus: available,
                limit: self.describe(block),
                blocked_by: self.limit_name(block),
            },
        }
    }
}
