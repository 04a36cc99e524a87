//! Decayed usage history and the hierarchical DRF order, with exact numbers.

use std::cmp::Ordering;

use trainyard_policies::{FairShare, PolicyConfig, QuotaTree};
use trainyard_topology::Resources;

const EPS: f64 = 1e-12;

fn tree(queues_yaml: &str) -> QuotaTree {
    QuotaTree::new(&PolicyConfig::from_yaml(&format!("queues:\n{queues_yaml}"), "q.yaml").unwrap())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < EPS
}

#[test]
fn history_integrates_and_halves_every_half_life() {
    let mut t = tree("  - {name: a, nominal: {gpus: 16}, weight: 2}\n  - {name: b, nominal: {gpus: 16}}\n");
    let (a, b) = (t.find("a").unwrap(), t.find("b").unwrap());
    let capacity = Resources::gpus(16);
    let mut fs = FairShare::new(Some(100));
    fs.advance(&t, 0);
    t.charge(a, Resources::gpus(8));
    fs.advance(&t, 100);
    // ∫0^100 8 · 2^(-(100-s)/100) ds = 8 · (100 / ln 2) · (1 - 1/2).
    let tau = 100.0 / std::f64::consts::LN_2;
    assert!(close(fs.history(a)[0], 4.0 * tau), "{:?}", fs.history(a));
    assert!(close(fs.history_share(a, capacity), 0.25));
    // (0.5 current + 0.25 history) / weight 2.
    assert!(close(fs.share(&t, a, capacity), 0.375));
    t.refund(a, Resources::gpus(8));
    fs.advance(&t, 200);
    assert!(close(fs.history_share(a, capacity), 0.125), "halved after one idle half-life");
    assert!(close(fs.share(&t, a, capacity), 0.0625));
    assert_eq!(fs.history(b), [0.0; 3]);
    // Many small steps give the same history as one big one.
    let mut stepwise = FairShare::new(Some(100));
    let mut t2 = t.clone();
    stepwise.advance(&t2, 0);
    t2.charge(b, Resources::gpus(4));
    for now in 1..=300 {
        stepwise.advance(&t2, now);
    }
    let mut once = FairShare::new(Some(100));
    once.advance(&t2, 0);
    once.advance(&t2, 300);
    assert!((stepwise.history(b)[0] - once.history(b)[0]).abs() < 1e-9);
}

#[test]
fn a_long_run_at_a_fraction_of_the_cluster_converges_to_that_fraction() {
    let mut t = tree("  - {name: a, nominal: {gpus: 16}}\n");
    let a = t.find("a").unwrap();
    let mut fs = FairShare::new(Some(60));
    fs.advance(&t, 0);
    t.charge(a, Resources::gpus(4));
    fs.advance(&t, 60 * 60);
    assert!((fs.history_share(a, Resources::gpus(16)) - 0.25).abs() < 1e-9);
}

#[test]
fn without_a_half_life_only_current_usage_counts() {
    let mut t = tree("  - {name: a, nominal: {gpus: 16}}\n");
    let a = t.find("a").unwrap();
    let mut fs = FairShare::new(None);
    fs.advance(&t, 0);
    t.charge(a, Resources::gpus(4));
    fs.advance(&t, 1000);
    assert_eq!(fs.history_share(a, Resources::gpus(16)), 0.0);
    assert_eq!(fs.share(&t, a, Resources::gpus(16)), 0.25);
    // Time going backwards adds nothing.
    let mut h = FairShare::new(Some(10));
    h.advance(&t, 50);
    h.advance(&t, 40);
    assert_eq!(h.history(a), [0.0; 3]);
}

#[test]
fn drf_order_compares_the_subtrees_where_the_paths_part() {
    let mut t = tree(
        "  - {name: org-1}\n  - {name: t1, parent: org-1, nominal: {gpus: 8}}\n  - {name: t2, parent: org-1, nominal: {gpus: 8}}\n  - {name: org-2}\n  - {name: t3, parent: org-2, nominal: {gpus: 8}}\n",
    );
    let [t1, t2, t3] = ["t1", "t2", "t3"].map(|n| t.find(n).unwrap());
    let capacity = Resources::gpus(24);
    let fs = FairShare::new(None);
    assert_eq!(fs.compare(&t, t1, t2, capacity), Ordering::Less, "equal shares go by index");
    t.charge(t1, Resources::gpus(12));
    t.charge(t3, Resources::gpus(4));
    // t2 uses nothing, but its org uses 12 against org-2's 4: t3 goes first.
    assert_eq!(fs.compare(&t, t2, t3, capacity), Ordering::Greater);
    assert_eq!(fs.compare(&t, t2, t1, capacity), Ordering::Less);
    assert_eq!(fs.compare(&t, t1, t1, capacity), Ordering::Equal);
    let mut leaves: Vec<_> = t.leaves().collect();
    leaves.sort_by(|&x, &y| fs.compare(&t, x, y, capacity));
    assert_eq!(leaves, vec![t3, t2, t1]);
}
