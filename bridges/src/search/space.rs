//! Where a search's parameters live and how a trial's values are drawn: random search from a
//! seeded generator per (trial, parameter), grid search as the trial's point of the grid. A trial's
//! values depend on its index alone, so a search that restarts redraws exactly what it drew.

/// Whether a range draws whole numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Number {
    /// Any value in the range.
    Float,
    /// Whole numbers in the range, bounds included.
    Int,
}

/// One parameter's space, checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Space {
    /// Uniform over `[min, max]`.
    Uniform {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
        /// Whole numbers or not.
        number: Number,
    },
    /// Uniform in the logarithm over `[min, max]`, `0 < min`.
    LogUniform {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
        /// Whole numbers or not.
        number: Number,
    },
    /// One of the choices, in the order given.
    Categorical(Vec<String>),
}

/// splitmix64: a small, well-mixed generator; a fresh one per draw keeps draws independent of
/// one another's order.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in `[0, 1)` for trial `trial`, parameter `param` of the search seeded `seed`.
pub fn unit(seed: u64, trial: u32, param: usize) -> f64 {
    let z = mix(mix(seed ^ mix(u64::from(trial))) ^ (param as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// FNV-1a of a text: the seed of a search that names none, from its uid.
pub fn seed_of(text: &str) -> u64 {
    text.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3))
}

fn whole(x: f64, min: f64, max: f64) -> String {
    format!("{}", x.round().clamp(min, max) as i64)
}

impl Space {
    /// The value `u` (in `[0, 1)`) picks, as the text a trial receives.
    pub fn pick(&self, u: f64) -> String {
        match self {
            Space::Uniform { min, max, number: Number::Float } => format!("{}", min + u * (max - min)),
            // Each whole number of the range equally likely.
            Space::Uniform { min, max, number: Number::Int } => {
                whole((min + u * (max - min + 1.0)).floor(), *min, *max)
            }
            Space::LogUniform { min, max, number } => {
                let x = (min.ln() + u * (max.ln() - min.ln())).exp().clamp(*min, *max);
                match number {
                    Number::Float => format!("{x}"),
                    Number::Int => whole(x, *min, *max),
                }
            }
            Space::Categorical(choices) => {
                choices[((u * choices.len() as f64) as usize).min(choices.len() - 1)].clone()
            }
        }
    }

    /// The choices of a categorical space (grid search's axis).
    pub fn choices(&self) -> Option<&[String]> {
        match self {
            Space::Categorical(c) => Some(c),
            _ => None,
        }
    }
}

/// The `trial`-th point of the grid over `axes` (the last axis varies fastest), `None` past its end.
pub fn grid_point(axes: &[&[String]], trial: u32) -> Option<Vec<String>> {
    let mut rest = u64::from(trial);
    let mut point = vec![String::new(); axes.len()];
    for (slot, axis) in point.iter_mut().zip(axes).rev() {
        let n = axis.len() as u64;
        *slot = axis[(rest % n) as usize].clone();
        rest /= n;
    }
    (rest == 0).then_some(point)
}

/// Points in the grid over `axes`, saturating.
pub fn grid_size(axes: &[&[String]]) -> u64 {
    axes.iter().fold(1u64, |n, axis| n.saturating_mul(axis.len() as u64))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_grid_is_walked_in_order_and_ends() {
        let a = vec!["1".to_string(), "2".into()];
        let b = vec!["x".to_string(), "y".into(), "z".into()];
        let axes = [a.as_slice(), b.as_slice()];
        assert_eq!(grid_size(&axes), 6);
        assert_eq!(grid_point(&axes, 0), Some(vec!["1".into(), "x".into()]));
        assert_eq!(grid_point(&axes, 4), Some(vec!["2".into(), "y".into()]));
        assert_eq!(grid_point(&axes, 6), None);
    }

    #[test]
    fn draws_follow_the_seed_trial_and_parameter() {
        assert_eq!(unit(7, 3, 1), unit(7, 3, 1));
        assert_ne!(unit(7, 3, 1), unit(7, 4, 1));
        assert_ne!(unit(7, 3, 1), unit(7, 3, 2));
        assert_ne!(unit(7, 3, 1), unit(8, 3, 1));
    }

    proptest! {
        #[test]
        fn every_pick_lies_in_its_space(u in 0.0f64..1.0, lo in -1000i32..1000, span in 1i32..1000) {
            let (min, max) = (f64::from(lo), f64::from(lo + span));
            for number in [Number::Float, Number::Int] {
                let v: f64 = Space::Uniform { min, max, number }.pick(u).parse().unwrap();
                prop_assert!(v >= min && v <= max, "{v} outside [{min}, {max}]");
                if number == Number::Int { prop_assert_eq!(v.fract(), 0.0); }
            }
            let (lmin, lmax) = (f64::from(span) / 1000.0, f64::from(span) + 1.0);
            let v: f64 = Space::LogUniform { min: lmin, max: lmax, number: Number::Float }.pick(u).parse().unwrap();
            prop_assert!(v >= lmin && v <= lmax, "{v} outside [{lmin}, {lmax}]");
        }

        #[test]
        fn unit_draws_stay_below_one(seed in any::<u64>(), trial in any::<u32>(), param in 0usize..100) {
            let u = unit(seed, trial, param);
            prop_assert!((0.0..1.0).contains(&u));
        }
    }
}
