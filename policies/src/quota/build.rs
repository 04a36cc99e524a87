//! Building the quota tree from the policy, adding undeclared leaves, and the from-scratch audit.

use std::collections::BTreeMap;

use super::{Amounts, Node, QueueIdx, QuotaTree, R, RESOURCE_NAMES, UNLIMITED};
use crate::PolicyConfig;

/// Name shown for the implicit root.
const ROOT_NAME: &str = "<root>";

impl QuotaTree {
    /// The tree of the policy's queues, nothing running. [`PolicyConfig::from_yaml`] rejects
    /// unknown parents, cycles, duplicate names and bad weights; a configuration built by hand
    /// is taken leniently instead: a queue with an unknown parent or on a cycle of parents
    /// goes under the root, a repeated name only finds its first queue, and a weight that is
    /// not a finite positive number counts as 1.
    pub fn new(config: &PolicyConfig) -> QuotaTree {
        let n = config.queues.len() + 1;
        let mut by_name = BTreeMap::new();
        for (i, q) in config.queues.iter().enumerate() {
            by_name.entry(q.name.clone()).or_insert(QueueIdx(i + 1));
        }
        let mut parent: Vec<Option<usize>> = vec![None; n];
        for (i, q) in config.queues.iter().enumerate() {
            let p = q.parent.as_ref().and_then(|p| by_name.get(p)).map_or(0, |p| p.0);
            parent[i + 1] = Some(p);
        }
        // A chain longer than the number of queues never reaches the root: cut it here.
        for i in 1..n {
            let mut at = parent[i];
            let mut steps = 0;
            while let Some(p) = at {
                steps += 1;
                if steps > n {
                    parent[i] = Some(0);
                    break;
                }
                at = parent[p];
            }
        }
        let mut children: Vec<Vec<QueueIdx>> = vec![Vec::new(); n];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(QueueIdx(i));
            }
        }
        let names = |i: usize| -> [bool; R] {
            if i == 0 {
                return [false; R];
            }
            let q = &config.queues[i - 1];
            let (a, b, c) = (q.nominal.as_array(), q.borrowing_limit.as_array(), q.lending_limit.as_array());
            std::array::from_fn(|r| a[r].is_some() || b[r].is_some() || c[r].is_some())
        };
        let order = top_down(&parent);
        // Named by the queue or a declared ancestor...
        let mut accounted: Vec<[bool; R]> = (0..n).map(names).collect();
        for &i in &order {
            if let Some(p) = parent[i] {
                accounted[i] = std::array::from_fn(|r| accounted[i][r] || accounted[p][r]);
            }
        }
        // ...or by a descendant.
        for &i in order.iter().rev() {
            if let Some(p) = parent[i] {
                accounted[p] = std::array::from_fn(|r| accounted[p][r] || accounted[i][r]);
            }
        }
        let mut nodes: Vec<Node> = (0..n)
            .map(|i| {
                let config = (i > 0).then(|| &config.queues[i - 1]);
                Node {
                    children: std::mem::take(&mut children[i]),
                    leaf: false,
                    weight: config.map(|q| q.weight).filter(|w| w.is_finite() && *w > 0.0).unwrap_or(1.0),
                    accounted: accounted[i],
                    nominal: config.map_or([0; R], |q| q.nominal.as_array().map(|a| a.unwrap_or(0))),
                    ..Node::blank(config.map_or(ROOT_NAME, |q| q.name.as_str()), parent[i].map(QueueIdx))
                }
            })
            .collect();
        for &i in order.iter().rev() {
            let quota: Amounts = std::array::from_fn(|r| {
                let below = nodes[i].children.iter().map(|c| nodes[c.0].quota[r]);
                below.fold(nodes[i].nominal[r], u64::saturating_add)
            });
            let top_level = parent[i] == Some(0);
            let root_cohort = config.root_cohort;
            let config = (i > 0).then(|| &config.queues[i - 1]);
            // A queue without a parent borrows from nobody unless the top level is one cohort.
            let borrowing = match config {
                Some(_) if top_level && !root_cohort => [Some(0); R],
                Some(q) => q.borrowing_limit.as_array(),
                None => [Some(0); R],
            };
            let lending = config.map_or([None; R], |q| q.lending_limit.as_array());
            let node = &mut nodes[i];
            node.leaf = i > 0 && node.children.is_empty();
            for r in 0..R {
                if !node.accounted[r] {
                    node.nominal[r] = 0;
                    continue;
                }
                node.quota[r] = quota[r];
                node.limit[r] = borrowing[r].map_or(UNLIMITED, |b| quota[r].saturating_add(b));
                node.lendable[r] = lending[r].map_or(quota[r], |l| l.min(quota[r]));
                node.guaranteed[r] = quota[r] - node.lendable[r];
            }
        }
        let mut tree = QuotaTree { nodes, by_name, undeclared: config.undeclared_queues.clone(), version: 0 };
        let idle = tree.recompute_demands(|_, _| [0; R]);
        for (node, idle) in tree.nodes.iter_mut().zip(idle) {
            (node.idle_demand, node.demand) = (idle, idle);
        }
        tree
    }

    /// A leaf without any quota under the root, for a name no queue declares.
    pub(super) fn add_unlimited_leaf(&mut self, name: &str) -> QueueIdx {
        let q = QueueIdx(self.nodes.len());
        self.version += 1;
        self.nodes.push(Node::blank(name, Some(self.root())));
        self.nodes[0].children.push(q);
        self.by_name.insert(name.to_string(), q);
        q
    }

    /// `D` of every queue recomputed bottom-up, with the leaves' `D` given by `leaf_demand`
    /// (only read where the leaf is accounted).
    pub(super) fn recompute_demands(&self, leaf_demand: impl Fn(QueueIdx, &Node) -> Amounts) -> Vec<Amounts> {
        let mut demand: Vec<Amounts> = vec![[0; R]; self.nodes.len()];
        for &i in top_down(&self.parents()).iter().rev() {
            let n = &self.nodes[i];
            if n.leaf {
                let d = leaf_demand(QueueIdx(i), n);
                demand[i] = std::array::from_fn(|r| if n.accounted[r] { d[r] } else { 0 });
                continue;
            }
            let mut sum = [0u64; R];
            for c in &n.children {
                let child = &self.nodes[c.0];
                for (r, total) in sum.iter_mut().enumerate() {
                    if child.accounted[r] {
                        *total = total.saturating_add(demand[c.0][r].max(child.guaranteed[r]));
                    }
                }
            }
            demand[i] = sum;
        }
        demand
    }

    fn parents(&self) -> Vec<Option<usize>> {
        self.nodes.iter().map(|n| n.parent.map(|p| p.0)).collect()
    }

    /// Recomputes every cached usage and demand from the leaves' usage, and says which
    /// differs first. O(queues); for tests and debugging. `Ok` on a consistent tree.
    pub fn audit(&self) -> Result<(), String> {
        let mut usage: Vec<Amounts> = vec![[0; R]; self.nodes.len()];
        for &i in top_down(&self.parents()).iter().rev() {
            let n = &self.nodes[i];
            if n.leaf {
                usage[i] = n.usage;
            }
            if let Some(p) = n.parent {
                let below = usage[i];
                for (total, u) in usage[p.0].iter_mut().zip(below) {
                    *total += u;
                }
            }
        }
        let demand = self.recompute_demands(|_, n| n.usage);
        for (i, n) in self.nodes.iter().enumerate() {
            for r in 0..R {
                let what = RESOURCE_NAMES[r];
                if usage[i][r] != n.usage[r] {
                    return Err(format!("queue `{}`: cached usage {what} {} != {}", n.name, n.usage[r], usage[i][r]));
                }
                if demand[i][r] != n.demand[r] {
                    return Err(format!(
                        "queue `{}`: cached demand {what} {} != {}",
                        n.name, n.demand[r], demand[i][r]
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Indices ordered so that every parent comes before its children (breadth first from the root).
fn top_down(parent: &[Option<usize>]) -> Vec<usize> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); parent.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[*p].push(i);
        }
    }
    let mut order = vec![0];
    let mut k = 0;
    while k < order.len() {
        order.extend_from_slice(&children[order[k]]);
        k += 1;
    }
    order
}

impl Node {
    /// A leaf with no quota, limit or usage: nothing accounted.
    fn blank(name: &str, parent: Option<QueueIdx>) -> Node {
        Node {
            name: name.to_string(),
            parent,
            children: Vec::new(),
            leaf: true,
            weight: 1.0,
            accounted: [false; R],
            nominal: [0; R],
            quota: [0; R],
            limit: [0; R],
            lendable: [0; R],
            guaranteed: [0; R],
            usage: [0; R],
            demand: [0; R],
            idle_demand: [0; R],
        }
    }
}
