//! TPU torus slices: boxes are valid and disjoint, `find` agrees with brute force, real v5p shapes
//! fit, and multi-slice pool placement is all or nothing.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use trainyard_topology::torus::{Rotation, SliceShape, SubMesh, Torus, TorusError, TorusFailure, TorusSpec, TpuPool};

fn shape(text: &str) -> SliceShape {
    text.parse().unwrap()
}

fn mesh(origin: &[u32], extent: &[u32]) -> SubMesh {
    SubMesh { origin: origin.to_vec(), extent: extent.to_vec() }
}

/// Chips of a box walked with modulo arithmetic, independently of the library; `None` when the
/// box is larger than the torus, starts outside it, or crosses the end of an unwrapped dimension.
fn walk(spec: &TorusSpec, m: &SubMesh) -> Option<Vec<Vec<u32>>> {
    let rank = spec.dims.len();
    if m.origin.len() != rank || m.extent.len() != rank {
        return None;
    }
    for i in 0..rank {
        let (o, e, n) = (m.origin[i], m.extent[i], spec.dims[i]);
        if e == 0 || e > n || o >= n || (!spec.wrap[i] && o + e > n) {
            return None;
        }
    }
    let mut chips: Vec<Vec<u32>> = vec![vec![]];
    for i in 0..rank {
        let mut longer = Vec::new();
        for c in &chips {
            for k in 0..m.extent[i] {
                let mut c = c.clone();
                c.push((m.origin[i] + k) % spec.dims[i]);
                longer.push(c);
            }
        }
        chips = longer;
    }
    Some(chips)
}

/// Whether a box covers whole hosts, or lies inside one host at an offset that is a multiple of
/// its extent.
fn on_whole_hosts(spec: &TorusSpec, m: &SubMesh) -> bool {
    let b = &spec.host_block;
    let rank = b.len();
    let whole = (0..rank).all(|i| m.extent[i].is_multiple_of(b[i]) && m.origin[i].is_multiple_of(b[i]));
    let inside_one = (0..rank).all(|i| b[i].is_multiple_of(m.extent[i]) && m.origin[i].is_multiple_of(m.extent[i]));
    whole || inside_one
}

/// Faces on the box surface touching a busy chip, an unwrapped border, or the box itself.
fn contact(spec: &TorusSpec, busy: &BTreeSet<Vec<u32>>, m: &SubMesh) -> u64 {
    let chips = walk(spec, m).unwrap();
    let inside: BTreeSet<&Vec<u32>> = chips.iter().collect();
    let mut total = 0;
    for c in &chips {
        for i in 0..spec.dims.len() {
            let n = i64::from(spec.dims[i]);
            let offset = (i64::from(c[i]) - i64::from(m.origin[i])).rem_euclid(n);
            for dir in [-1i64, 1] {
                let on_face = if dir < 0 { offset == 0 } else { offset == i64::from(m.extent[i]) - 1 };
                if !on_face {
                    continue;
                }
                let q = i64::from(c[i]) + dir;
                if !(0..n).contains(&q) && !spec.wrap[i] {
                    total += 1;
                    continue;
                }
                let mut neighbour = c.clone();
                neighbour[i] = q.rem_euclid(n) as u32;
                if inside.contains(&neighbour) || busy.contains(&neighbour) {
                    total += 1;
                }
            }
        }
    }
    total
}

fn permutations(rank: usize) -> Vec<Vec<usize>> {
    match rank {
        2 => vec![vec![0, 1], vec![1, 0]],
        _ => vec![vec![0, 1, 2], vec![0, 2, 1], vec![1, 0, 2], vec![1, 2, 0], vec![2, 0, 1], vec![2, 1, 0]],
    }
}

fn all_origins(dims: &[u32]) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = vec![vec![]];
    for &n in dims {
        out = out.into_iter().flat_map(|o| (0..n).map(move |c| [o.as_slice(), &[c]].concat())).collect();
    }
    out
}

/// Brute force over every orientation and origin: whether any orientation is allowed at all on
/// an empty torus, and the free box with the most contact (lowest origin, then orientation).
fn brute(spec: &TorusSpec, busy: &BTreeSet<Vec<u32>>, want: &[u32], rotation: Rotation) -> (bool, Option<SubMesh>) {
    let mut orientations: Vec<Vec<u32>> = Vec::new();
    let perms = permutations(spec.dims.len());
    let perms = if rotation == Rotation::Fixed { &perms[..1] } else { &perms[..] };
    for p in perms {
        let e: Vec<u32> = p.iter().map(|&i| want[i]).collect();
        if !orientations.contains(&e) {
            orientations.push(e);
        }
    }
    let mut allowed = false;
    let mut best: Option<(u64, Vec<u32>, usize)> = None;
    for (k, e) in orientations.iter().enumerate() {
        for origin in all_origins(&spec.dims) {
            let m = mesh(&origin, e);
            let Some(chips) = walk(spec, &m) else { continue };
            if !on_whole_hosts(spec, &m) {
                continue;
            }
            allowed = true;
            if chips.iter().any(|c| busy.contains(c)) {
                continue;
            }
            let score = contact(spec, busy, &m);
            let better = match &best {
                None => true,
                Some((s, o, bk)) => score > *s || (score == *s && (&origin, k) < (o, *bk)),
            };
            if better {
                best = Some((score, origin, k));
            }
        }
    }
    (allowed, best.map(|(_, o, k)| mesh(&o, &orientations[k])))
}

/// A small random torus: 2-D up to 6x6 or 3-D up to 4x4x4, random wrap, host block 1 or 2.
fn arb_spec() -> impl Strategy<Value = TorusSpec> {
    (
        any::<bool>(),
        prop::array::uniform3(1u32..=6),
        prop::array::uniform3(any::<bool>()),
        prop::array::uniform3(any::<bool>()),
    )
        .prop_map(|(three, dims, wrap, halve)| {
            let rank = if three { 3 } else { 2 };
            let dims: Vec<u32> = dims[..rank].iter().map(|&d| if three { 1 + (d - 1) % 4 } else { d }).collect();
            let host_block =
                dims.iter().zip(halve).map(|(&d, h)| if h && d.is_multiple_of(2) { 2 } else { 1 }).collect();
            TorusSpec { dims, wrap: wrap[..rank].to_vec(), host_block }
        })
}

fn busy_set(t: &Torus) -> BTreeSet<Vec<u32>> {
    all_origins(&t.spec().dims).into_iter().filter(|c| t.is_busy(c) == Some(true)).collect()
}

proptest! {
    #[test]
    fn placed_slices_are_disjoint_boxes_and_counts_stay_exact(
        spec in arb_spec(),
        ops in prop::collection::vec((any::<bool>(), prop::array::uniform3(1u32..=4), any::<usize>()), 1..40),
    ) {
        let mut t = Torus::new(spec.clone()).unwrap();
        let total = spec.dims.iter().product::<u32>() as usize;
        let mut owner: BTreeMap<Vec<u32>, usize> = BTreeMap::new();
        let mut live: Vec<SubMesh> = Vec::new();
        for (step, (place, want, pick)) in ops.into_iter().enumerate() {
            if place || live.is_empty() {
                let s = SliceShape(want[..spec.dims.len()].to_vec());
                match t.find(&s) {
                    Ok(Ok(m)) => {
                        let chips = walk(&spec, &m).expect("a contiguous box that respects unwrapped borders");
                        let distinct: BTreeSet<&Vec<u32>> = chips.iter().collect();
                        prop_assert_eq!(distinct.len() as u64, s.chips());
                        let (mut a, mut b) = (m.extent.clone(), s.0.clone());
                        a.sort_unstable();
                        b.sort_unstable();
                        prop_assert_eq!(a, b, "extent is a rotation of the request");
                        prop_assert!(on_whole_hosts(&spec, &m));
                        prop_assert!(chips.iter().all(|c| !owner.contains_key(c)), "overlaps a live slice");
                        t.allocate(&m).unwrap();
                        let is_busy_error = matches!(t.allocate(&m), Err(TorusError::Busy { .. }));
                        prop_assert!(is_busy_error);
                        for c in chips {
                            owner.insert(c, step);
                        }
                        live.push(m);
                    }
                    Ok(Err(TorusFailure::NotEnoughChips { needed, free })) => {
                        prop_assert_eq!(free, t.free_chips());
                        prop_assert!(needed > free);
                    }
                    Ok(Err(TorusFailure::Fragmented { needed, free, placed, .. })) => {
                        prop_assert_eq!(free, t.free_chips());
                        prop_assert!(needed <= free);
                        prop_assert_eq!(placed, 0);
                    }
                    Err(_) => prop_assert!(!brute(&spec, &BTreeSet::new(), &s.0, Rotation::Any).0),
                }
            } else {
                let m = live.remove(pick % live.len());
                t.release(&m).unwrap();
                let is_not_allocated = matches!(t.release(&m), Err(TorusError::NotAllocated { .. }));
                prop_assert!(is_not_allocated);
                for c in walk(&spec, &m).unwrap() {
                    owner.remove(&c);
                }
            }
            prop_assert_eq!(t.free_chips() as usize, total - owner.len());
            prop_assert_eq!(t.slices().len(), live.len());
            for c in all_origins(&spec.dims) {
                prop_assert_eq!(t.is_busy(&c), Some(owner.contains_key(&c)));
            }
        }
    }

    #[test]
    fn find_agrees_with_brute_force(
        spec in arb_spec(),
        busy in prop::collection::vec(prop::array::uniform3(0u32..6), 0..24),
        want in prop::array::uniform3(1u32..=6),
        fixed in any::<bool>(),
    ) {
        let mut t = Torus::new(spec.clone()).unwrap();
        let rank = spec.dims.len();
        for b in busy {
            let chip: Vec<u32> = b[..rank].iter().zip(&spec.dims).map(|(c, n)| c % n).collect();
            let _ = t.allocate(&mesh(&chip, &vec![1; rank]));
        }
        let busy = busy_set(&t);
        let rotation = if fixed { Rotation::Fixed } else { Rotation::Any };
        let s = SliceShape(want[..rank].to_vec());
        let (allowed, expected) = brute(&spec, &busy, &s.0, rotation);
        match t.find_with(&s, rotation) {
            Err(e) => {
                prop_assert!(!allowed, "rejected {} although brute force allows it: {}", s, e);
                let too_large = matches!(e, TorusError::TooLarge { .. });
                let any_fits = brute(&TorusSpec { host_block: vec![1; rank], ..spec.clone() }, &BTreeSet::new(), &s.0, rotation).0;
                prop_assert_eq!(too_large, !any_fits);
            }
            Ok(found) => {
                prop_assert!(allowed);
                prop_assert_eq!(found.ok(), expected);
            }
        }
    }
}

const V5P_SHAPES: [&str; 12] = [
    "2x2x1", "2x2x2", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16", "16x16x16", "16x16x24",
    "16x20x28",
];

#[test]
fn every_common_v5p_shape_fits_an_empty_pod() {
    for text in V5P_SHAPES {
        let mut t = Torus::new(TorusSpec::v5p()).unwrap();
        let s = shape(text);
        let m = t.find(&s).unwrap().unwrap_or_else(|f| panic!("{text}: {f}"));
        let chips = walk(t.spec(), &m).unwrap();
        assert_eq!(chips.len() as u64, s.chips(), "{text}");
        assert_eq!(m.chips(t.spec()).collect::<Vec<_>>(), chips, "{text}: SubMesh::chips walks the same chips");
        t.allocate(&m).unwrap();
        assert_eq!(t.free_chips(), 8960 - s.chips(), "{text}");
    }
}

#[test]
fn a_v5p_host_slice_is_never_rotated_across_hosts() {
    let t = Torus::new(TorusSpec::v5p()).unwrap();
    assert_eq!(t.find(&shape("1x2x2")).unwrap().unwrap().extent, vec![2, 2, 1]);
    let e = t.find_with(&shape("1x2x2"), Rotation::Fixed).unwrap_err();
    assert_eq!(
        e.to_string(),
        "slice 1x2x2 cannot be made of whole 2x2x1 hosts of torus 16x20x28 in its given orientation"
    );
    let e = t.find(&shape("32x4x4")).unwrap_err();
    assert_eq!(e.to_string(), "slice 32x4x4 does not fit torus 16x20x28 in any orientation");
    let e = t.find(&shape("4x4")).unwrap_err();
    assert_eq!(e.to_string(), "slice 4x4 on torus 16x20x28: the slice has 2 dimensions, the torus 3");
    assert!(t.find_with(&shape("20x16x28"), Rotation::Fixed).is_err());
    assert!(t.find_with(&shape("16x20x28"), Rotation::Fixed).unwrap().is_ok());
}

#[test]
fn seventy_4x4x8_slices_tile_a_v5p_pod() {
    let mut t = Torus::new(TorusSpec::v5p()).unwrap();
    let mut owner = BTreeSet::new();
    let mut placed = 0;
    while let Ok(m) = t.find(&shape("4x4x8")).unwrap() {
        for c in walk(t.spec(), &m).unwrap() {
            assert!(owner.insert(c), "{m} overlaps an earlier slice");
        }
        t.allocate(&m).unwrap();
        placed += 1;
    }
    assert_eq!(placed, 70);
    assert_eq!(t.free_chips(), 0);
    assert_eq!(t.find(&shape("2x2x1")).unwrap(), Err(TorusFailure::NotEnoughChips { needed: 4, free: 0 }));
}

#[test]
fn v5e_half_host_slices_share_a_host_and_fill_the_pod() {
    let mut t = Torus::new("v5e".parse().unwrap()).unwrap();
    let first = t.find(&shape("2x2")).unwrap().unwrap();
    t.allocate(&first).unwrap();
    let second = t.find(&shape("2x2")).unwrap().unwrap();
    assert_eq!((first.clone(), second.clone()), (mesh(&[0, 0], &[2, 2]), mesh(&[0, 2], &[2, 2])), "same 2x4 host");
    t.allocate(&second).unwrap();
    for _ in 2..64 {
        let m = t.find(&shape("2x2")).unwrap().unwrap();
        t.allocate(&m).unwrap();
    }
    assert_eq!(t.free_chips(), 0);
    assert!(t.find(&shape("3x2")).is_err(), "3 chips cannot be whole or part of a 2x4 host");
}

#[test]
fn allocate_and_release_reject_invalid_boxes_without_changing_anything() {
    let mut t = Torus::new("8x8:wrap=x:host=2x2".parse().unwrap()).unwrap();
    let crossing_y = mesh(&[0, 6], &[2, 4]);
    assert!(matches!(t.allocate(&crossing_y), Err(TorusError::BadMesh { .. })));
    let crossing_x = mesh(&[6, 0], &[4, 2]);
    t.allocate(&crossing_x).unwrap();
    assert_eq!(walk(t.spec(), &crossing_x).unwrap().len(), 8);
    assert_eq!(t.is_busy(&[1, 1]), Some(true));
    let off_grid = mesh(&[1, 0], &[2, 2]);
    assert!(matches!(t.allocate(&off_grid), Err(TorusError::BadMesh { .. })));
    let overlapping = mesh(&[0, 0], &[2, 4]);
    let e = t.allocate(&overlapping).unwrap_err();
    assert_eq!(e.to_string(), "sub-mesh 2x4@0,0 on torus 8x8: chip (0,0) is already allocated");
    let before = t.clone();
    assert!(matches!(t.release(&mesh(&[0, 0], &[2, 2])), Err(TorusError::NotAllocated { .. })), "part of a slice");
    assert_eq!(t, before);
    t.release(&crossing_x).unwrap();
    assert_eq!(t.free_chips(), 64);
}

#[test]
fn find_packs_against_busy_chips_and_unwrapped_borders() {
    let mut t = Torus::new("8x8:nowrap".parse().unwrap()).unwrap();
    t.allocate(&mesh(&[0, 0], &[8, 3])).unwrap();
    // The 4x4 goes into a corner next to the busy strip, not into the middle of the free part.
    let m = t.find(&shape("4x4")).unwrap().unwrap();
    assert_eq!(m, mesh(&[0, 3], &[4, 4]));
    let e = t.find(&shape("6x6")).unwrap().unwrap_err();
    assert_eq!(e, TorusFailure::Fragmented { needed: 36, free: 40, placed: 0, largest_free_cube: 5 });
}

/// Two `16x16x16` pods with only `16x8x8` free in each (`y` and `z` from 8), room for two `8x8x8`.
fn two_slot_pool() -> TpuPool {
    let pod = || {
        let mut t = Torus::new("16x16x16:host=2x2x1".parse().unwrap()).unwrap();
        t.allocate(&mesh(&[0, 0, 0], &[16, 8, 16])).unwrap();
        t.allocate(&mesh(&[0, 8, 0], &[16, 8, 8])).unwrap();
        t
    };
    TpuPool::new(vec![pod(), pod()])
}

#[test]
fn four_8x8x8_slices_spread_over_two_pods() {
    let mut pool = two_slot_pool();
    let placed = pool.place_slices(&shape("8x8x8"), 4).unwrap().unwrap();
    let pods: Vec<usize> = placed.iter().map(|(p, _)| *p).collect();
    assert_eq!(pods, vec![0, 0, 1, 1]);
    for p in 0..2 {
        let mut seen = BTreeSet::new();
        for (_, m) in placed.iter().filter(|(q, _)| *q == p) {
            for c in walk(pool.pods()[p].spec(), m).unwrap() {
                assert!(seen.insert(c));
            }
        }
    }
    assert_eq!(pool.free_chips(), 0);
    pool.release(1, &placed[3].1).unwrap();
    assert!(matches!(pool.release(2, &placed[3].1), Err(TorusError::NoSuchPod { pod: 2, pods: 2 })));
}

#[test]
fn a_failed_multi_slice_request_leaves_every_pod_unchanged() {
    let mut pool = two_slot_pool();
    let f = pool.place_slices(&shape("8x8x8"), 5).unwrap().unwrap_err();
    assert_eq!(f, TorusFailure::NotEnoughChips { needed: 2560, free: 2048 });
    // Two busy chips in pod 1 leave it 1,022 free chips but no 8x8x8 box: the third slice fails
    // after two were placed in pod 0, and those two are undone.
    let mut pods = pool.pods().to_vec();
    pods[1].allocate(&mesh(&[4, 12, 12], &[1, 1, 1])).unwrap();
    pods[1].allocate(&mesh(&[12, 12, 12], &[1, 1, 1])).unwrap();
    let mut pool = TpuPool::new(pods);
    let before = pool.clone();
    let f = pool.place_slices(&shape("8x8x8"), 3).unwrap().unwrap_err();
    assert_eq!(f, TorusFailure::Fragmented { needed: 1536, free: 2046, placed: 2, largest_free_cube: 8 });
    assert_eq!(pool, before);
    let e = pool.place_slices(&shape("32x8x8"), 1).unwrap_err();
    assert_eq!(e.to_string(), "slice 32x8x8 does not fit torus 16x16x16 in any orientation");
    assert_eq!(pool, before);
}

/// A full-size pod under churn: a fixed pseudo-random mix of v5p shapes and releases. Checks the
/// same invariants as the small-torus property at 8,960 chips, where each `find` scans every
/// aligned origin of every orientation.
#[test]
fn v5p_churn_keeps_slices_disjoint_and_counts_exact() {
    let mut t = Torus::new(TorusSpec::v5p()).unwrap();
    let mut owner: BTreeMap<Vec<u32>, usize> = BTreeMap::new();
    let mut live: Vec<SubMesh> = Vec::new();
    let mut seed: u64 = 7;
    let (mut placed, mut failed) = (0, 0);
    for step in 0..300 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let r = (seed >> 33) as usize;
        if r.is_multiple_of(4) && !live.is_empty() {
            let m = live.swap_remove(r / 4 % live.len());
            t.release(&m).unwrap();
            walk(t.spec(), &m).unwrap().iter().for_each(|c| assert!(owner.remove(c).is_some()));
        } else {
            let s = shape(V5P_SHAPES[r / 4 % 9]);
            match t.find(&s).unwrap() {
                Ok(m) => {
                    for c in walk(t.spec(), &m).unwrap() {
                        assert!(owner.insert(c, step).is_none(), "{m} overlaps a live slice");
                    }
                    t.allocate(&m).unwrap();
                    live.push(m);
                    placed += 1;
                }
                Err(_) => failed += 1,
            }
        }
        assert_eq!(t.free_chips(), 8960 - owner.len() as u64);
    }
    assert!(placed > 50 && failed > 0, "the mix both fills and overflows the pod: {placed} placed, {failed} failed");
}
