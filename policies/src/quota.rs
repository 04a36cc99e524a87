//! Tenant queues and their GPU usage against a nominal quota (no borrowing yet).

use std::collections::BTreeMap;

use trainyard_topology::Resources;

use crate::{PolicyConfig, UndeclaredQueues};

/// Index of a queue inside [`Quotas`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueIdx(pub usize);

/// One queue's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueState {
    /// Name.
    pub name: String,
    /// Quota in GPUs; `None` is unlimited.
    pub nominal_gpus: Option<u64>,
    /// GPUs held by the queue's running gangs.
    pub used_gpus: u64,
    /// Everything its running gangs hold.
    pub used: Resources,
}

/// All queues.
#[derive(Clone, Debug)]
pub struct Quotas {
    queues: Vec<QueueState>,
    by_name: BTreeMap<String, QueueIdx>,
    undeclared: UndeclaredQueues,
}

impl Quotas {
    /// Queues declared by the policy.
    pub fn new(config: &PolicyConfig) -> Quotas {
        let mut q = Quotas { queues: Vec::new(), by_name: BTreeMap::new(), undeclared: config.undeclared_queues };
        for queue in &config.queues {
            q.add(&queue.name, queue.nominal.gpus);
        }
        q
    }

    fn add(&mut self, name: &str, nominal_gpus: Option<u64>) -> QueueIdx {
        let idx = QueueIdx(self.queues.len());
        self.queues.push(QueueState { name: name.to_string(), nominal_gpus, used_gpus: 0, used: Resources::ZERO });
        self.by_name.insert(name.to_string(), idx);
        idx
    }

    /// Finds a queue, creating an unlimited one for an undeclared name when the policy allows.
    pub fn resolve(&mut self, name: &str) -> Option<QueueIdx> {
        if let Some(&idx) = self.by_name.get(name) {
            return Some(idx);
        }
        match self.undeclared {
            UndeclaredQueues::Unlimited => Some(self.add(name, None)),
            UndeclaredQueues::Reject => None,
        }
    }

    /// A queue's state.
    pub fn get(&self, idx: QueueIdx) -> &QueueState {
        &self.queues[idx.0]
    }

    /// Every queue, in declaration then first-use order.
    pub fn all(&self) -> &[QueueState] {
        &self.queues
    }

    /// A queue's fair-share weight (1 for every queue of a flat configuration).
    pub fn weight(&self, _idx: QueueIdx) -> f64 {
        1.0
    }

    /// Whether `gpus` more fit under the queue's quota given `used` GPUs in use.
    pub fn admits(&self, idx: QueueIdx, used: u64, gpus: u64) -> bool {
        self.queues[idx.0].nominal_gpus.is_none_or(|n| used.saturating_add(gpus) <= n)
    }

    pub(crate) fn charge(&mut self, idx: QueueIdx, total: Resources) {
        let q = &mut self.queues[idx.0];
        q.used = q.used.checked_add(&total).expect("usage cannot overflow u64");
        q.used_gpus = q.used.gpus;
    }

    pub(crate) fn refund(&mut self, idx: QueueIdx, total: Resources) {
        let q = &mut self.queues[idx.0];
        q.used = q.used.checked_sub(&total).expect("a queue never refunds more than it was charged");
        q.used_gpus = q.used.gpus;
    }
}
