//! The quota tree on small cohorts with exact numbers: borrowing, lending, limits, reclaim.

use trainyard_policies::{PolicyConfig, QueueIdx, QuotaBlock, QuotaLimit, QuotaTree, Reclaim};
use trainyard_topology::Resources;

/// A tree whose top-level queues share the implicit root as one cohort, so that the borrowing
/// rules can be seen on two levels of queues.
fn tree(queues_yaml: &str) -> QuotaTree {
    let text = format!("root_cohort: true\nqueues:\n{queues_yaml}");
    QuotaTree::new(&PolicyConfig::from_yaml(&text, "q.yaml").unwrap_or_else(|e| panic!("{e}")))
}

/// A tree as the default has it: each top-level queue is capped at its own quota.
fn capped_tree(queues_yaml: &str) -> QuotaTree {
    QuotaTree::new(
        &PolicyConfig::from_yaml(&format!("queues:\n{queues_yaml}"), "q.yaml").unwrap_or_else(|e| panic!("{e}")),
    )
}

#[test]
fn a_queue_without_a_parent_is_capped_at_its_nominal() {
    let two = "  - {name: a, nominal: {gpus: 16}}\n  - {name: b, nominal: {gpus: 32}}\n";
    let mut t = capped_tree(two);
    let (a, b) = (q(&t, "a"), q(&t, "b"));
    assert_eq!(t.available(a).gpus, 16, "b's idle 32 are not a's to borrow");
    assert_eq!(t.ceiling(a).gpus, 16);
    assert_eq!(t.check(a, gpus(17)), Err(block(a, QuotaLimit::Nominal, 17, 16)));
    t.charge(a, gpus(16));
    assert_eq!(t.available(b).gpus, 32);
    // The explicit setting brings back one pool for the top level.
    let mut pooled = tree(two);
    assert_eq!(pooled.available(q(&pooled, "a")).gpus, 48);
    pooled.charge(q(&pooled, "a"), gpus(40));
    assert_eq!(pooled.available(q(&pooled, "b")).gpus, 8);
    // Inside a cohort, queues still borrow from one another.
    let cohort = capped_tree(COHORT);
    assert_eq!(cohort.available(q(&cohort, "team-a")).gpus, 128);
    t.audit().unwrap();
}

fn q(t: &QuotaTree, name: &str) -> QueueIdx {
    t.find(name).unwrap_or_else(|| panic!("no queue {name}"))
}

fn gpus(n: u64) -> Resources {
    Resources::gpus(n)
}

fn block(queue: QueueIdx, kind: QuotaLimit, needed: u64, available: u64) -> QuotaBlock {
    QuotaBlock { queue, kind, resource: "gpus", needed, available }
}

const COHORT: &str = "  - {name: research}\n  - {name: team-a, parent: research, nominal: {gpus: 64}}\n  - {name: team-b, parent: research, nominal: {gpus: 64}}\n";

#[test]
fn a_team_borrows_idle_nominal_and_the_owner_is_blocked_by_the_cohort() {
    let mut t = tree(COHORT);
    let (research, a, b) = (q(&t, "research"), q(&t, "team-a"), q(&t, "team-b"));
    assert_eq!((t.subtree_quota(research).gpus, t.subtree_quota(t.root()).gpus), (128, 128));
    assert_eq!(t.available(b).gpus, 128);
    assert_eq!(t.check(b, gpus(100)), Ok(()));
    t.charge(b, gpus(100));
    assert_eq!(t.borrowed(b).gpus, 36);
    assert!(t.over_nominal(b) && !t.over_nominal(a));
    assert_eq!(t.borrowed(research).gpus, 0, "the cohort as a whole stays within its quota");
    assert_eq!(t.usage(research).gpus, 100);
    assert_eq!(t.lent_out(a).gpus, 36, "team-b uses 36 of team-a's 64");
    assert_eq!(t.lent_out(b).gpus, 0);
    assert_eq!(t.available(a).gpus, 28);
    assert_eq!(t.check(a, gpus(28)), Ok(()));
    // The owner asks for its own nominal: the shared pool (here the root's) is used up.
    assert_eq!(t.check(a, gpus(64)), Err(block(t.root(), QuotaLimit::Cohort, 64, 28)));
    assert_eq!(
        t.reclaimable_for(a, gpus(64)),
        Reclaim::Borrowers { victims: vec![b], block: block(t.root(), QuotaLimit::Cohort, 64, 28) }
    );
    t.refund(b, gpus(36));
    assert_eq!(t.check(a, gpus(64)), Ok(()));
    assert_eq!(t.lent_out(a).gpus, 0);
    t.audit().unwrap();
}

#[test]
fn a_cohort_without_borrowing_reports_its_own_pool() {
    let mut t = tree(&COHORT.replace("{name: research}", "{name: research, borrowing_limit: {gpus: 0}}"));
    let (research, a, b) = (q(&t, "research"), q(&t, "team-a"), q(&t, "team-b"));
    t.charge(b, gpus(100));
    assert_eq!(t.check(a, gpus(64)), Err(block(research, QuotaLimit::Cohort, 64, 28)));
    assert!(matches!(t.reclaimable_for(a, gpus(64)), Reclaim::Borrowers { victims, .. } if victims == vec![b]));
    // team-b asking for more would itself borrow beyond what research may: a hard block.
    let expected = block(research, QuotaLimit::Borrowing, 29, 28);
    assert_eq!(t.check(b, gpus(29)), Err(expected));
    assert_eq!(t.reclaimable_for(b, gpus(29)), Reclaim::Blocked(expected));
}

#[test]
fn a_lending_limit_keeps_part_of_the_nominal_private() {
    let mut t = tree(&COHORT.replace(
        "nominal: {gpus: 64}}\n  - {name: team-b",
        "nominal: {gpus: 64}, lending_limit: {gpus: 16}}\n  - {name: team-b",
    ));
    let (a, b) = (q(&t, "team-a"), q(&t, "team-b"));
    assert_eq!(t.guaranteed(a).gpus, 48);
    assert_eq!(t.demand(a).gpus, 48, "an unused guarantee counts as taken");
    assert_eq!((t.available(b).gpus, t.ceiling(b).gpus), (80, 80));
    t.charge(b, gpus(80));
    assert_eq!(t.check(b, gpus(1)), Err(block(t.root(), QuotaLimit::Cohort, 1, 0)));
    assert_eq!(t.lent_out(a).gpus, 16, "only the lendable part is ever lent");
    // team-a gets its 48 private GPUs at once, the other 16 only back from team-b.
    assert_eq!(t.available(a).gpus, 48);
    assert_eq!(t.check(a, gpus(49)), Err(block(t.root(), QuotaLimit::Cohort, 49, 48)));
    assert!(matches!(t.reclaimable_for(a, gpus(64)), Reclaim::Borrowers { victims, .. } if victims == vec![b]));
    t.charge(a, gpus(48));
    assert_eq!(t.demand(a).gpus, 48);
    assert_eq!(t.usage(t.root()).gpus, 128);
    t.audit().unwrap();
}

#[test]
fn a_borrowing_limit_caps_a_team() {
    let mut t =
        tree("  - {name: a, nominal: {gpus: 64}, borrowing_limit: {gpus: 32}}\n  - {name: b, nominal: {gpus: 64}}\n");
    let (a, b) = (q(&t, "a"), q(&t, "b"));
    assert_eq!(t.limit(a).gpus, 96);
    assert_eq!((t.available(a).gpus, t.ceiling(a).gpus), (96, 96));
    assert_eq!((t.available(b).gpus, t.ceiling(b).gpus), (128, 128), "b has no borrowing limit");
    t.charge(a, gpus(96));
    let own = block(a, QuotaLimit::Nominal, 1, 0);
    assert_eq!(t.check(a, gpus(1)), Err(own));
    assert_eq!(t.reclaimable_for(a, gpus(1)), Reclaim::Blocked(own));
    assert_eq!(t.available(b).gpus, 32);
    assert_eq!(
        t.reclaimable_for(b, gpus(33)),
        Reclaim::Borrowers { victims: vec![a], block: block(t.root(), QuotaLimit::Cohort, 33, 32) }
    );
    // b asking beyond its own nominal would borrow from a full pool: no reclaim for that.
    assert!(matches!(t.reclaimable_for(b, gpus(65)), Reclaim::Blocked(QuotaBlock { kind: QuotaLimit::Cohort, .. })));
}

const THREE_LEVELS: &str = "  - {name: org-1, borrowing_limit: {gpus: 16}}\n  - {name: t1, parent: org-1, nominal: {gpus: 32}}\n  - {name: t2, parent: org-1, nominal: {gpus: 32}}\n  - {name: org-2}\n  - {name: t3, parent: org-2, nominal: {gpus: 64}}\n";

#[test]
fn three_levels_borrow_inside_the_org_first_then_across() {
    let mut t = tree(THREE_LEVELS);
    let (org1, t1, t2, t3) = (q(&t, "org-1"), q(&t, "t1"), q(&t, "t2"), q(&t, "t3"));
    assert_eq!(t.parent(org1), Some(t.root()));
    assert_eq!(t.children(org1), &[t1, t2]);
    assert!(!t.is_leaf(org1) && t.is_leaf(t1));
    assert_eq!(t.ceiling(t1).gpus, 80, "org-1's 64 plus its borrowing limit of 16");
    t.charge(t1, gpus(60));
    assert_eq!((t.borrowed(t1).gpus, t.borrowed(org1).gpus), (28, 0));
    t.charge(t1, gpus(20));
    assert_eq!((t.borrowed(t1).gpus, t.borrowed(org1).gpus), (48, 16));
    assert_eq!(t.lent_out(t3).gpus, 16, "org-1 borrows 16 of t3's 64");
    assert_eq!(t.check(t1, gpus(1)), Err(block(org1, QuotaLimit::Borrowing, 1, 0)));
    // t2's own nominal is taken by its sibling: reclaim inside org-1.
    assert_eq!(t.check(t2, gpus(32)), Err(block(org1, QuotaLimit::Cohort, 32, 0)));
    assert!(matches!(t.reclaimable_for(t2, gpus(32)), Reclaim::Borrowers { victims, .. } if victims == vec![t1]));
    // t3's nominal is partly lent to org-1.
    assert_eq!(t.check(t3, gpus(64)), Err(block(t.root(), QuotaLimit::Cohort, 64, 48)));
    assert!(matches!(t.reclaimable_for(t3, gpus(64)), Reclaim::Borrowers { victims, .. } if victims == vec![t1]));
    t.refund(t1, gpus(16));
    assert_eq!(t.check(t3, gpus(64)), Ok(()));
    t.audit().unwrap();
}

#[test]
fn a_guarantee_of_another_org_is_never_borrowed() {
    let t = tree(&THREE_LEVELS.replace("{name: org-2}", "{name: org-2, lending_limit: {gpus: 0}}"));
    assert_eq!(t.guaranteed(q(&t, "org-2")).gpus, 64);
    assert_eq!(t.ceiling(q(&t, "t1")).gpus, 64, "org-1 may borrow 16, but nobody lends");
}

#[test]
fn queues_and_resources_outside_every_pool_are_unlimited() {
    let mut config = PolicyConfig::from_yaml("queues:\n  - {name: a, nominal_gpus: 8}\n", "q.yaml").unwrap();
    let mut t = QuotaTree::new(&config);
    let a = q(&t, "a");
    assert_eq!(t.nominal(a), Resources { gpus: 8, cpu_milli: u64::MAX, memory_mib: u64::MAX });
    assert_eq!(t.check(a, Resources { gpus: 8, cpu_milli: 1 << 40, memory_mib: 1 << 40 }), Ok(()));
    assert_eq!(t.check(a, gpus(9)), Err(block(a, QuotaLimit::Nominal, 9, 8)));
    let free = t.resolve("stranger").unwrap();
    assert_eq!(t.parent(free), Some(t.root()));
    assert_eq!(t.available(free), Resources { gpus: u64::MAX, cpu_milli: u64::MAX, memory_mib: u64::MAX });
    t.charge(free, gpus(1000));
    assert_eq!(t.available(a).gpus, 8, "an undeclared queue is in nobody's pool");
    assert_eq!(t.usage(t.root()).gpus, 1000);
    assert_eq!(t.resolve("stranger"), Some(free));
    t.audit().unwrap();
    config.undeclared_queues = trainyard_policies::UndeclaredQueues::Reject;
    let mut t = QuotaTree::new(&config);
    assert_eq!(t.resolve("stranger"), None);
    assert_eq!(t.resolve("a"), Some(a));
}

#[test]
fn inner_queues_take_no_gangs() {
    let mut t = tree(THREE_LEVELS);
    assert_eq!(t.resolve("org-1"), None);
    assert!(t.find("org-1").is_some());
    assert_eq!(t.leaves().map(|l| t.name(l).to_string()).collect::<Vec<_>>(), ["t1", "t2", "t3"]);
}

#[test]
fn a_cohort_naming_a_resource_accounts_it_for_its_whole_subtree() {
    let t = tree(
        "  - {name: org, nominal: {cpus: 10}, borrowing_limit: {cpus: 0}}\n  - {name: a, parent: org, nominal: {gpus: 8}}\n  - {name: b, nominal: {gpus: 8}}\n",
    );
    let (org, a, b) = (q(&t, "org"), q(&t, "a"), q(&t, "b"));
    assert_eq!(t.nominal(a).cpu_milli, 0, "a may only borrow CPUs from org");
    assert_eq!(t.available(a).cpu_milli, 10_000);
    let over = Resources { gpus: 0, cpu_milli: 10_001, memory_mib: 0 };
    assert_eq!(
        t.check(a, over),
        Err(QuotaBlock {
            queue: org,
            kind: QuotaLimit::Borrowing,
            resource: "cpu_milli",
            needed: 10_001,
            available: 10_000
        })
    );
    assert_eq!(t.nominal(b).cpu_milli, u64::MAX, "b names no CPU and no cohort above it does");
    assert_eq!(t.check(b, over), Ok(()));
}

#[test]
fn the_lowest_block_is_reported_first() {
    let mut t = tree(
        "  - {name: org, borrowing_limit: {gpus: 0, cpus: 0}}\n  - {name: a, parent: org, nominal: {gpus: 4, cpus: 4}, borrowing_limit: {gpus: 0}}\n  - {name: b, parent: org, nominal: {gpus: 4, cpus: 4}}\n",
    );
    let (org, a, b) = (q(&t, "org"), q(&t, "a"), q(&t, "b"));
    t.charge(b, Resources { gpus: 0, cpu_milli: 8000, memory_mib: 0 });
    // a breaks its own GPU limit (depth 0) and org's CPU pool (depth 1): the leaf comes first.
    let request = Resources { gpus: 5, cpu_milli: 1000, memory_mib: 0 };
    assert_eq!(t.check(a, request), Err(block(a, QuotaLimit::Nominal, 5, 4)));
    let cpu = t.check(a, Resources { gpus: 4, cpu_milli: 1000, memory_mib: 0 }).unwrap_err();
    assert_eq!((cpu.queue, cpu.kind, cpu.resource, cpu.available), (org, QuotaLimit::Cohort, "cpu_milli", 0));
    assert!(t.describe(&cpu).contains("`org`"), "{}", t.describe(&cpu));
}

#[test]
#[should_panic(expected = "never releases more")]
fn refunding_more_than_charged_is_a_bug() {
    let mut t = tree(COHORT);
    let a = q(&t, "team-a");
    t.charge(a, gpus(2));
    t.refund(a, gpus(3));
}

#[test]
fn dominant_share_takes_the_scarcest_resource_and_the_weight() {
    let mut t = tree("  - {name: a, nominal: {gpus: 8}, weight: 2}\n");
    let a = q(&t, "a");
    t.charge(a, Resources { gpus: 4, cpu_milli: 30_000, memory_mib: 5 });
    let capacity = Resources { gpus: 16, cpu_milli: 60_000, memory_mib: 0 };
    assert_eq!(t.dominant_share(a, capacity), 0.5);
    assert_eq!(t.weighted_share(a, capacity), 0.25);
    assert_eq!(t.dominant_share(a, Resources::ZERO), 0.0);
}

mod random_trees {
    //! Random trees (<= 3 levels under the root, <= 8 leaves) against a direct model of the rules.

    use proptest::prelude::*;
    use proptest::sample::Index;
    use trainyard_policies::{PolicyConfig, QueueConfig, QueueIdx, QuotaAmounts, QuotaTree, Reclaim};
    use trainyard_topology::Resources;

    /// One queue; amounts are `[gpus, cpu_milli]` (memory is never named).
    #[derive(Clone, Debug)]
    struct Spec {
        parent: Option<usize>,
        nominal: [Option<u64>; 2],
        borrowing: [Option<u64>; 2],
        lending: [Option<u64>; 2],
    }

    fn amounts() -> impl Strategy<Value = [Option<u64>; 2]> {
        [prop::option::weighted(0.7, 0u64..=16), prop::option::weighted(0.4, 0u64..=16)]
    }

    fn spec(parent: Option<usize>) -> impl Strategy<Value = Spec> {
        (amounts(), amounts(), amounts()).prop_map(move |(nominal, borrowing, lending)| Spec {
            parent,
            nominal,
            borrowing,
            lending,
        })
    }

    /// Up to 3 queues at level 1, up to 3 at level 2 under them, then 1..=8 leaves anywhere.
    fn arb_tree() -> impl Strategy<Value = Vec<Spec>> {
        (
            0usize..=3,
            prop::collection::vec(any::<Option<Index>>(), 0..=3),
            prop::collection::vec(any::<Option<Index>>(), 1..=8),
        )
            .prop_flat_map(|(n1, level2, leaves)| {
                let mut parents: Vec<Option<usize>> = vec![None; n1];
                for p in &level2 {
                    parents.push(p.filter(|_| n1 > 0).map(|p| p.index(n1)));
                }
                let inner = parents.len();
                for p in &leaves {
                    parents.push(p.filter(|_| inner > 0).map(|p| p.index(inner)));
                }
                parents.into_iter().map(spec).collect::<Vec<_>>()
            })
    }

    fn config(specs: &[Spec]) -> PolicyConfig {
        let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
        let q = |a: [Option<u64>; 2]| QuotaAmounts { gpus: a[0], cpu_milli: a[1], memory_mib: None };
        p.queues = specs
            .iter()
            .enumerate()
            .map(|(i, s)| QueueConfig {
                name: format!("q{i}"),
                parent: s.parent.map(|p| format!("q{p}")),
                nominal: q(s.nominal),
                borrowing_limit: q(s.borrowing),
                lending_limit: q(s.lending),
                weight: 1.0,
                nominal_domains: None,
                flavor: None,
            })
            .collect();
        // The model below pools the top level under the root.
        p.root_cohort = true;
        p
    }

    /// The rules of `quota_tree`, computed directly and recursively.
    struct Model {
        specs: Vec<Spec>,
        children: Vec<Vec<usize>>,
        accounted: Vec<[bool; 2]>,
        quota: Vec<[u64; 2]>,
        guaranteed: Vec<[u64; 2]>,
    }

    impl Model {
        fn new(specs: &[Spec]) -> Model {
            let n = specs.len();
            let mut children = vec![Vec::new(); n];
            for (i, s) in specs.iter().enumerate() {
                if let Some(p) = s.parent {
                    children[p].push(i);
                }
            }
            let names = |i: usize, r: usize| {
                let s = &specs[i];
                s.nominal[r].is_some() || s.borrowing[r].is_some() || s.lending[r].is_some()
            };
            fn up(specs: &[Spec], names: &dyn Fn(usize, usize) -> bool, i: usize, r: usize) -> bool {
                names(i, r) || specs[i].parent.is_some_and(|p| up(specs, names, p, r))
            }
            fn down(children: &[Vec<usize>], names: &dyn Fn(usize, usize) -> bool, i: usize, r: usize) -> bool {
                names(i, r) || children[i].iter().any(|&c| down(children, names, c, r))
            }
            let accounted: Vec<[bool; 2]> = (0..n)
                .map(|i| std::array::from_fn(|r| up(specs, &names, i, r) || down(&children, &names, i, r)))
                .collect();
            fn quota(specs: &[Spec], ch: &[Vec<usize>], acc: &[[bool; 2]], i: usize, r: usize) -> u64 {
                let below: u64 = ch[i].iter().filter(|&&c| acc[c][r]).map(|&c| quota(specs, ch, acc, c, r)).sum();
                specs[i].nominal[r].unwrap_or(0) + below
            }
            let quota: Vec<[u64; 2]> =
                (0..n).map(|i| std::array::from_fn(|r| quota(specs, &children, &accounted, i, r))).collect();
            let guaranteed = (0..n)
                .map(|i| {
                    std::array::from_fn(|r| quota[i][r] - specs[i].lending[r].unwrap_or(u64::MAX).min(quota[i][r]))
                })
                .collect();
            Model { specs: specs.to_vec(), children, accounted, quota, guaranteed }
        }

        fn demand(&self, usage: &[[u64; 2]], i: usize, r: usize) -> u64 {
            if self.children[i].is_empty() {
                return usage[i][r];
            }
            self.children[i]
                .iter()
                .filter(|&&c| self.accounted[c][r])
                .map(|&c| self.demand(usage, c, r).max(self.guaranteed[c][r]))
                .sum()
        }

        /// The first limit `usage` breaks, if any.
        fn violation(&self, usage: &[[u64; 2]]) -> Option<String> {
            for r in 0..2 {
                let mut root = (0, 0);
                for i in 0..self.specs.len() {
                    if !self.accounted[i][r] {
                        continue;
                    }
                    let d = self.demand(usage, i, r);
                    if let Some(b) = self.specs[i].borrowing[r]
                        && d > self.quota[i][r] + b
                    {
                        return Some(format!("q{i} resource {r}: {d} > {} + {b}", self.quota[i][r]));
                    }
                    if self.specs[i].parent.is_none() {
                        root.0 += d.max(self.guaranteed[i][r]);
                        root.1 += self.quota[i][r];
                    }
                }
                if root.0 > root.1 {
                    return Some(format!("root resource {r}: {} > {}", root.0, root.1));
                }
            }
            None
        }
    }

    fn two(r: Resources) -> [u64; 2] {
        [r.gpus, r.cpu_milli]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn checked_charges_keep_every_limit_and_the_caches_exact(
            specs in arb_tree(),
            ops in prop::collection::vec((any::<Index>(), 0u64..=12, 0u64..=12, 0u64..=3, any::<bool>(), any::<Index>()), 1..60),
        ) {
            let model = Model::new(&specs);
            let mut tree = QuotaTree::new(&config(&specs));
            for (i, s) in specs.iter().enumerate() {
                let q = tree.find(&format!("q{i}")).unwrap();
                prop_assert_eq!(tree.is_leaf(q), model.children[i].is_empty());
                prop_assert_eq!(tree.parent(q), Some(s.parent.map_or(tree.root(), |p| QueueIdx(p + 1))));
                let expected: [u64; 2] =
                    std::array::from_fn(|r| if model.accounted[i][r] { model.quota[i][r] } else { u64::MAX });
                prop_assert_eq!(two(tree.subtree_quota(q)), expected);
            }
            // Spec index of each leaf, and `None` for an undeclared queue outside every pool.
            let mut leaves: Vec<(QueueIdx, Option<usize>)> =
                (0..specs.len()).filter(|&i| model.children[i].is_empty()).map(|i| (QueueIdx(i + 1), Some(i))).collect();
            leaves.push((tree.resolve("undeclared").unwrap(), None));
            let mut usage = vec![[0u64; 2]; specs.len()];
            let mut running: Vec<(QueueIdx, Option<usize>, Resources)> = Vec::new();
            for (pick, g, c, m, refund, which) in ops {
                let (leaf, at) = leaves[pick.index(leaves.len())];
                let request = Resources { gpus: g, cpu_milli: c, memory_mib: m };
                if refund && !running.is_empty() {
                    let (q, at, r) = running.swap_remove(which.index(running.len()));
                    tree.refund(q, r);
                    if let Some(i) = at {
                        usage[i] = [usage[i][0] - r.gpus, usage[i][1] - r.cpu_milli];
                    }
                } else {
                    let mut after = usage.clone();
                    if let Some(i) = at {
                        after[i] = [after[i][0] + g, after[i][1] + c];
                    }
                    let checked = tree.check(leaf, request);
                    prop_assert_eq!(checked.is_ok(), model.violation(&after).is_none(), "{:?} {:?}", checked, model.violation(&after));
                    match tree.reclaimable_for(leaf, request) {
                        Reclaim::Fits => prop_assert!(checked.is_ok()),
                        Reclaim::Borrowers { victims, block } => {
                            prop_assert_eq!(Err(block), checked);
                            let mut freed = tree.clone();
                            for v in victims {
                                prop_assert!(v != leaf && tree.over_nominal(v));
                                freed.refund(v, tree.usage(v));
                            }
                            prop_assert_eq!(freed.check(leaf, request), Ok(()));
                        }
                        Reclaim::Blocked(_) => {
                            prop_assert!(checked.is_err());
                            let mut capped = tree.clone();
                            for &(other, _) in &leaves {
                                let (u, sq) = (tree.usage(other), tree.subtree_quota(other));
                                if other != leaf {
                                    capped.refund(other, u.checked_sub(&u.component_min(&sq)).unwrap());
                                }
                            }
                            prop_assert!(capped.check(leaf, request).is_err());
                        }
                    }
                    if checked.is_ok() {
                        tree.charge(leaf, request);
                        running.push((leaf, at, request));
                        usage = after;
                    }
                }
                // (1) and (2): every leaf and inner queue within its limits; (3) caches exact.
                prop_assert_eq!(model.violation(&usage), None);
                prop_assert_eq!(tree.audit(), Ok(()));
                if let Some(i) = at {
                    prop_assert_eq!(two(tree.usage(leaf)), usage[i]);
                }
                // Idle quota is either available now or lent out, and only the lendable part is lent.
                let available = tree.available(leaf);
                let (lent, sq, u) = (two(tree.lent_out(leaf)), two(tree.subtree_quota(leaf)), two(tree.usage(leaf)));
                let (demand, guaranteed) = (two(tree.demand(leaf)), two(tree.guaranteed(leaf)));
                for r in 0..2 {
                    prop_assert!(lent[r] <= sq[r].saturating_sub(demand[r]).min(sq[r] - guaranteed[r].min(sq[r])));
                    prop_assert!(two(available)[r] >= sq[r].saturating_sub(u[r]).saturating_sub(lent[r]));
                }
                // `available` is exactly the largest amount `check` accepts, per resource.
                for (r, one) in [Resources::gpus(1), Resources { gpus: 0, cpu_milli: 1, memory_mib: 0 }].iter().enumerate() {
                    let a = two(available)[r];
                    if a != u64::MAX {
                        prop_assert!(tree.check(leaf, one.checked_mul(a).unwrap()).is_ok());
                        prop_assert!(tree.check(leaf, one.checked_mul(a + 1).unwrap()).is_err());
                    }
                }
            }
            // (4) refunding everything returns every queue to zero usage and the initial demand.
            for (q, _, r) in running.drain(..) {
                tree.refund(q, r);
            }
            prop_assert_eq!(tree.audit(), Ok(()));
            for q in tree.queues() {
                prop_assert_eq!(tree.usage(q), Resources::ZERO);
                prop_assert_eq!(tree.borrowed(q), Resources::ZERO);
            }
            for &(leaf, _) in &leaves {
                prop_assert_eq!(tree.available(leaf), tree.ceiling(leaf));
            }
        }
    }
}
