//! Torus specs and slice shapes: text forms, validation, and the orientations a slice may take.

use std::fmt;
use std::str::FromStr;

use super::TorusError;

/// Largest torus accepted, in chips. The search keeps a summed-area table of up to eight times
/// this many `u32` entries; real pods are below 10,000 chips.
pub const MAX_CHIPS: u64 = 1 << 20;

/// Letters naming dimensions 0, 1 and 2 in the text form.
const AXES: [char; 3] = ['x', 'y', 'z'];

/// One pod: its size per dimension, which dimensions wrap around, and the chips of one host.
///
/// Text form (see [`FromStr`]): `SIZES[:OPTION]...` where `SIZES` is `16x20x28` or a preset
/// (`v4` = `16x16x16:host=2x2x1`, `v5p` = `16x20x28:host=2x2x1`, `v5e` = `16x16:host=2x4`) and
/// an `OPTION` is `nowrap` (no dimension wraps), `wrap=xz` (exactly the named dimensions wrap;
/// `x`, `y`, `z` are dimensions 0, 1, 2) or `host=2x2x1` (the host block). Without options every
/// dimension wraps and hosts are single chips.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TorusSpec {
    /// Chips along each dimension (rank 1 to 3).
    pub dims: Vec<u32>,
    /// Whether each dimension has wrap-around links a slice may cross.
    pub wrap: Vec<bool>,
    /// Chips of one host along each dimension; all ones when hosts do not constrain slices.
    pub host_block: Vec<u32>,
}

impl TorusSpec {
    /// A torus of the given sizes, wrapping in every dimension, with single-chip hosts.
    pub fn wrapped(dims: &[u32]) -> TorusSpec {
        TorusSpec { dims: dims.to_vec(), wrap: vec![true; dims.len()], host_block: vec![1; dims.len()] }
    }

    /// A TPU v4 pod: 4,096 chips as `16x16x16`, hosts of `2x2x1` chips.
    pub fn v4() -> TorusSpec {
        TorusSpec { host_block: vec![2, 2, 1], ..TorusSpec::wrapped(&[16, 16, 16]) }
    }

    /// A TPU v5p pod: 8,960 chips as `16x20x28`, hosts of `2x2x1` chips.
    pub fn v5p() -> TorusSpec {
        TorusSpec { host_block: vec![2, 2, 1], ..TorusSpec::wrapped(&[16, 20, 28]) }
    }

    /// A TPU v5e pod: 256 chips as a 2-D `16x16` torus, hosts of eight chips as `2x4`.
    pub fn v5e() -> TorusSpec {
        TorusSpec { host_block: vec![2, 4], ..TorusSpec::wrapped(&[16, 16]) }
    }

    /// Checks that a slice of `shape` could ever be placed on a pod of this spec (rank, size,
    /// host block), without building the pod.
    pub fn check(&self, shape: &SliceShape, rotation: Rotation) -> Result<(), TorusError> {
        orientations(self, shape, rotation).map(|_| ())
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of chips.
    pub fn chips(&self) -> u64 {
        self.dims.iter().map(|&d| u64::from(d)).product()
    }

    /// Checks that the fields agree: rank 1 to 3, equal lengths, no zero size, host block
    /// dividing every size, at most [`MAX_CHIPS`] chips.
    pub fn validate(&self) -> Result<(), TorusError> {
        let bad = |message: String| Err(TorusError::BadSpec { torus: join(&self.dims), message });
        let rank = self.rank();
        if !(1..=3).contains(&rank) {
            return bad(format!("rank {rank} is not supported; use 1 to 3 dimensions"));
        }
        if self.wrap.len() != rank {
            return bad(format!("{} wrap flags for {rank} dimensions", self.wrap.len()));
        }
        if self.host_block.len() != rank {
            return bad(format!(
                "host block {} has rank {}, not {rank}",
                join(&self.host_block),
                self.host_block.len()
            ));
        }
        if self.dims.contains(&0) || self.host_block.contains(&0) {
            return bad("sizes and host block must be at least 1 everywhere".into());
        }
        if let Some(i) = (0..rank).find(|&i| !self.dims[i].is_multiple_of(self.host_block[i])) {
            return bad(format!(
                "size {} of dimension {} is not a multiple of host block {}",
                self.dims[i],
                AXES[i],
                join(&self.host_block)
            ));
        }
        if self.chips() > MAX_CHIPS {
            return bad(format!("{} chips is more than the supported {MAX_CHIPS}", self.chips()));
        }
        Ok(())
    }

    /// The sizes alone, as `16x20x28`; used to name the torus in messages.
    pub(crate) fn sizes(&self) -> String {
        join(&self.dims)
    }
}

impl fmt::Display for TorusSpec {
    /// The text form, with only the options that differ from the defaults.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&join(&self.dims))?;
        if self.wrap.iter().all(|&w| !w) {
            f.write_str(":nowrap")?;
        } else if !self.wrap.iter().all(|&w| w) {
            let axes: String = self.wrap.iter().zip(AXES).filter(|(w, _)| **w).map(|(_, a)| a).collect();
            write!(f, ":wrap={axes}")?;
        }
        if self.host_block.iter().any(|&b| b != 1) {
            write!(f, ":host={}", join(&self.host_block))?;
        }
        Ok(())
    }
}

impl FromStr for TorusSpec {
    type Err = TorusError;

    /// Parses the text form described on [`TorusSpec`] and validates the result.
    fn from_str(s: &str) -> Result<TorusSpec, TorusError> {
        let text = s.trim();
        let malformed = |message: String| TorusError::Malformed { kind: "torus spec", text: text.to_string(), message };
        let mut parts = text.split(':');
        let base = parts.next().unwrap_or_default().trim();
        let mut spec = match base.to_ascii_lowercase().as_str() {
            "v4" => TorusSpec::v4(),
            "v5p" => TorusSpec::v5p(),
            "v5e" => TorusSpec::v5e(),
            _ => TorusSpec::wrapped(&parse_sizes(base).map_err(&malformed)?),
        };
        for option in parts.map(str::trim) {
            if option == "nowrap" {
                spec.wrap = vec![false; spec.rank()];
            } else if let Some(axes) = option.strip_prefix("wrap=") {
                spec.wrap = parse_axes(axes, spec.rank()).map_err(&malformed)?;
            } else if let Some(block) = option.strip_prefix("host=") {
                spec.host_block = parse_sizes(block).map_err(&malformed)?;
            } else {
                return Err(malformed(format!("unknown option `{option}`; use `nowrap`, `wrap=xy` or `host=2x2x1`")));
            }
        }
        spec.validate().map_err(|e| malformed(e.to_string()))?;
        Ok(spec)
    }
}

/// The extents of a requested slice, e.g. `4x4x8`. Orientation is chosen at placement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SliceShape(pub Vec<u32>);

impl SliceShape {
    /// Number of chips.
    pub fn chips(&self) -> u64 {
        self.0.iter().map(|&d| u64::from(d)).product()
    }
}

impl fmt::Display for SliceShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&join(&self.0))
    }
}

impl serde::Serialize for SliceShape {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SliceShape {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SliceShape, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for SliceShape {
    type Err = TorusError;

    /// Parses `4x4` or `2x2x4`: one to three positive sizes joined by `x`.
    fn from_str(s: &str) -> Result<SliceShape, TorusError> {
        let text = s.trim();
        let malformed =
            |message: String| TorusError::Malformed { kind: "slice shape", text: text.to_string(), message };
        let sizes = parse_sizes(text).map_err(malformed)?;
        Ok(SliceShape(sizes))
    }
}

/// Whether a slice may be placed with its axes permuted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rotation {
    /// Any permutation of the axes; `4x4x8` may be placed as `8x4x4`.
    #[default]
    Any,
    /// Axes as given.
    Fixed,
}

/// One way to place a slice: extents per torus dimension and the step between allowed origins,
/// both padded to three dimensions with 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Oriented {
    pub(crate) extent: [usize; 3],
    pub(crate) step: [usize; 3],
}

/// Every orientation of `shape` that fits `spec` and respects its host block, in the tie-break
/// order (axis permutations in lexicographic order, repeats dropped). `spec` must be valid.
pub(crate) fn orientations(
    spec: &TorusSpec,
    shape: &SliceShape,
    rotation: Rotation,
) -> Result<Vec<Oriented>, TorusError> {
    let bad = |message: String| TorusError::BadShape { shape: shape.to_string(), torus: spec.sizes(), message };
    let rank = spec.rank();
    if shape.0.len() != rank {
        return Err(bad(format!("the slice has {} dimensions, the torus {rank}", shape.0.len())));
    }
    if shape.0.contains(&0) {
        return Err(bad("a slice extent is zero".into()));
    }
    let mut perms = permutations(rank);
    if rotation == Rotation::Fixed {
        perms.truncate(1);
    }
    let mut fitting: Vec<Vec<u32>> = Vec::new();
    for perm in perms {
        let extent: Vec<u32> = perm.iter().map(|&p| shape.0[p]).collect();
        if extent.iter().zip(&spec.dims).all(|(e, n)| e <= n) && !fitting.contains(&extent) {
            fitting.push(extent);
        }
    }
    if fitting.is_empty() {
        return Err(TorusError::TooLarge { shape: shape.to_string(), torus: spec.sizes(), rotation });
    }
    let oriented: Vec<Oriented> = fitting
        .iter()
        .filter_map(|extent| {
            let step = host_step(extent, &spec.host_block)?;
            Some(Oriented { extent: pad(extent), step: pad(&step) })
        })
        .collect();
    if oriented.is_empty() {
        return Err(TorusError::Unaligned {
            shape: shape.to_string(),
            torus: spec.sizes(),
            host_block: join(&spec.host_block),
            rotation,
        });
    }
    Ok(oriented)
}

/// The origin step per dimension that keeps a box of `extent` on whole hosts, or `None` when it
/// would share a host with another slice in a way the block forbids. A box either covers whole
/// hosts (extent a multiple of the block, origin on the block grid) or sits inside one host
/// (extent dividing the block, origin a multiple of the extent).
pub(crate) fn host_step(extent: &[u32], block: &[u32]) -> Option<Vec<u32>> {
    if extent.iter().zip(block).all(|(e, b)| e.is_multiple_of(*b)) {
        Some(block.to_vec())
    } else if extent.iter().zip(block).all(|(e, b)| e <= b && b.is_multiple_of(*e)) {
        Some(extent.to_vec())
    } else {
        None
    }
}

/// Pads a rank-1..3 vector to three dimensions with 1.
pub(crate) fn pad(v: &[u32]) -> [usize; 3] {
    let mut out = [1; 3];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as usize;
    }
    out
}

/// Sizes joined by `x`, the notation of TPU topologies.
pub(crate) fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join("x")
}

/// All permutations of `0..n` in lexicographic order (n is at most 3).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![vec![]];
    for _ in 0..n {
        let mut longer = Vec::new();
        for p in &out {
            for i in (0..n).filter(|i| !p.contains(i)) {
                longer.push([p.as_slice(), &[i]].concat());
            }
        }
        out = longer;
    }
    out
}

fn parse_sizes(text: &str) -> Result<Vec<u32>, String> {
    let sizes = text
        .split(['x', 'X'])
        .map(|part| {
            let part = part.trim();
            match part.parse::<u32>() {
                Ok(0) => Err("sizes must be at least 1".to_string()),
                Ok(n) => Ok(n),
                Err(_) => Err(format!("`{part}` is not a size; write sizes like `4x4x8`")),
            }
        })
        .collect::<Result<Vec<u32>, String>>()?;
    if sizes.len() > 3 {
        return Err(format!("{} dimensions; at most 3 are supported", sizes.len()));
    }
    Ok(sizes)
}

fn parse_axes(axes: &str, rank: usize) -> Result<Vec<bool>, String> {
    let mut wrap = vec![false; rank];
    for c in axes.chars() {
        let i = AXES[..rank]
            .iter()
            .position(|&a| a == c.to_ascii_lowercase())
            .ok_or_else(|| format!("`{c}` in `wrap={axes}` is not one of the torus's axes {:?}", &AXES[..rank]))?;
        if wrap[i] {
            return Err(format!("axis `{c}` named twice in `wrap={axes}`"));
        }
        wrap[i] = true;
    }
    Ok(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_parse_and_print_back() {
        let spec: TorusSpec = "16x20x28:wrap=xz:host=2x2x1".parse().unwrap();
        assert_eq!(spec.dims, vec![16, 20, 28]);
        assert_eq!(spec.wrap, vec![true, false, true]);
        assert_eq!(spec.host_block, vec![2, 2, 1]);
        assert_eq!(spec.to_string(), "16x20x28:wrap=xz:host=2x2x1");
        assert_eq!("v5p".parse::<TorusSpec>().unwrap(), TorusSpec::v5p());
        assert_eq!("16x16:nowrap".parse::<TorusSpec>().unwrap().to_string(), "16x16:nowrap");
        assert_eq!(" 4x4x8 ".parse::<SliceShape>().unwrap().to_string(), "4x4x8");
    }

    #[test]
    fn malformed_text_names_the_text() {
        let e = "16xfoo".parse::<TorusSpec>().unwrap_err();
        assert_eq!(e.to_string(), "malformed torus spec `16xfoo`: `foo` is not a size; write sizes like `4x4x8`");
        let e = "4x0".parse::<SliceShape>().unwrap_err();
        assert!(e.to_string().starts_with("malformed slice shape `4x0`"), "{e}");
        let e = "16x16:wrap=xz".parse::<TorusSpec>().unwrap_err();
        assert!(e.to_string().contains("`z`"), "{e}");
        let e = "16x15:host=2x2".parse::<TorusSpec>().unwrap_err();
        assert!(e.to_string().contains("not a multiple of host block 2x2"), "{e}");
        assert!("16x16:twisted".parse::<TorusSpec>().unwrap_err().to_string().contains("unknown option `twisted`"));
    }

    #[test]
    fn host_rule_allows_whole_hosts_or_one_host_part() {
        assert_eq!(host_step(&[2, 2, 1], &[2, 2, 1]), Some(vec![2, 2, 1]));
        assert_eq!(host_step(&[4, 8, 2], &[2, 2, 1]), Some(vec![2, 2, 1]));
        assert_eq!(host_step(&[1, 2, 2], &[2, 2, 1]), None, "half of two hosts");
        assert_eq!(host_step(&[2, 2], &[2, 4]), Some(vec![2, 2]), "v5e 2x2 inside an 8-chip host");
        assert_eq!(host_step(&[3, 2], &[2, 4]), None);
    }

    #[test]
    fn orientations_drop_repeats_and_keep_lexicographic_order() {
        let spec = TorusSpec::wrapped(&[8, 8, 8]);
        let o = orientations(&spec, &SliceShape(vec![4, 4, 8]), Rotation::Any).unwrap();
        let extents: Vec<[usize; 3]> = o.iter().map(|o| o.extent).collect();
        assert_eq!(extents, vec![[4, 4, 8], [4, 8, 4], [8, 4, 4]]);
        let fixed = orientations(&spec, &SliceShape(vec![8, 4, 4]), Rotation::Fixed).unwrap();
        assert_eq!(fixed.len(), 1);
        assert_eq!(fixed[0].extent, [8, 4, 4]);
    }
}
