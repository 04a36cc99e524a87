//! A bounded time series: at most [`MAX_POINTS`] buckets of equal width from the first
//! observation on; when time outgrows them the width doubles and neighbours merge, so any
//! replay length fits and identical inputs give identical series.

/// Most points a series keeps.
pub const MAX_POINTS: usize = 200;

/// What one bucket accumulates.
pub(crate) trait Bucket: Default + Clone {
    /// Folds a neighbour into this bucket when the width doubles.
    fn merge(&mut self, other: &Self);
}

/// Equal-width buckets starting at `start`.
#[derive(Clone, Debug)]
pub(crate) struct Series<B> {
    /// Time of the first observation.
    pub(crate) start: Option<u64>,
    /// Width of each bucket, seconds.
    pub(crate) width: u64,
    /// The buckets, in time order.
    pub(crate) buckets: Vec<B>,
}

impl<B> Default for Series<B> {
    fn default() -> Self {
        Series { start: None, width: 1, buckets: Vec::new() }
    }
}

impl<B: Bucket> Series<B> {
    /// Calls `add(bucket, seconds)` for every bucket `[from, to)` overlaps, with the seconds of
    /// the overlap; `from` must not be before the start.
    pub(crate) fn spread(&mut self, from: u64, to: u64, mut add: impl FnMut(&mut B, u64)) {
        let start = *self.start.get_or_insert(from);
        let mut at = from;
        while at < to {
            let mut index = (at - start) / self.width;
            while index >= MAX_POINTS as u64 {
                self.halve();
                index = (at - start) / self.width;
            }
            let until = to.min(start.saturating_add((index + 1).saturating_mul(self.width)));
            let index = index as usize;
            if self.buckets.len() <= index {
                self.buckets.resize_with(index + 1, B::default);
            }
            add(&mut self.buckets[index], until - at);
            at = until;
        }
    }

    /// Start time of bucket `i`.
    pub(crate) fn time_of(&self, i: usize) -> u64 {
        self.start.unwrap_or(0).saturating_add((i as u64).saturating_mul(self.width))
    }

    /// Doubles the width, merging neighbouring buckets pairwise.
    fn halve(&mut self) {
        self.buckets = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let mut merged = pair[0].clone();
                if let Some(second) = pair.get(1) {
                    merged.merge(second);
                }
                merged
            })
            .collect();
        self.width = self.width.saturating_mul(2);
    }
}
