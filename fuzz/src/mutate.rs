//! Byte- and token-level mutation of a seed: what a user's editor, a truncated copy, a careless
//! script or a hostile file does to a good input. Each input gets one to four mutations, drawn
//! from a fixed stream (the same seed gives the same inputs).

use trainyard_topology::rng::SplitMix64;

/// Numbers that break arithmetic, parsers and allocations.
const EXTREMES: [&str; 16] = [
    "0",
    "-1",
    "1",
    "18446744073709551615",
    "18446744073709551616",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "0.0000001",
    "1.5",
    "99999999999999999999999999",
    "0x10",
];

/// Text that readers of YAML, CSV, JSON and XML must refuse or read, never choke on.
const SNIPPETS: [&str; 14] =
    ["\u{feff}", "\r", "\r\n", "\n---\n", "&a [x, x, x]", "*a", "<<: *a", "{", "\"", "<", "]]]]", ",,,,", "\t", "~"];

/// How an input is mutated.
pub struct Mutator {
    rng: SplitMix64,
}

impl Mutator {
    /// A mutator drawing from `seed`.
    pub fn new(seed: u64) -> Mutator {
        Mutator { rng: SplitMix64::new(seed) }
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { self.rng.below(n as u64) as usize }
    }

    /// Whether an event of `percent` in 100 happens.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// The underlying stream, for generators.
    pub fn rng(&mut self) -> &mut SplitMix64 {
        &mut self.rng
    }

    /// `seed` mutated one to four times, at most `max_len` bytes long.
    pub fn mutate(&mut self, seed: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
        let mut data = seed.to_vec();
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            match self.below(12) {
                0 => self.flip_byte(&mut data),
                1 => self.insert_byte(&mut data),
                2 => self.delete_span(&mut data),
                3 => self.duplicate_line(&mut data),
                4 => self.delete_line(&mut data),
                5 => self.swap_lines(&mut data),
                6 => self.replace_number(&mut data),
                7 => self.insert_snippet(&mut data),
                8 => self.line_endings(&mut data),
                9 => self.truncate(&mut data),
                10 => self.splice(&mut data, other),
                _ => self.invalid_utf8(&mut data),
            }
        }
        data.truncate(max_len);
        data
    }

    fn flip_byte(&mut self, data: &mut [u8]) {
        if !data.is_empty() {
            let i = self.below(data.len());
            data[i] ^= 1 << self.below(8);
        }
    }

    fn insert_byte(&mut self, data: &mut Vec<u8>) {
        let at = self.below(data.len() + 1);
        let byte = *self.pick(b" :,-\n{}[]\"'#0123456789abc\x00\x7f");
        data.insert(at, byte);
    }

    fn delete_span(&mut self, data: &mut Vec<u8>) {
        if !data.is_empty() {
            let at = self.below(data.len());
            let len = 1 + self.below(16.min(data.len() - at));
            data.drain(at..at + len);
        }
    }

    /// Byte offsets where lines start.
    fn line_starts(data: &[u8]) -> Vec<usize> {
        std::iter::once(0).chain(data.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1)).collect()
    }

    /// One whole line (with its newline), as a range.
    fn a_line(&mut self, data: &[u8]) -> std::ops::Range<usize> {
        let starts = Self::line_starts(data);
        let i = self.below(starts.len());
        let start = starts[i].min(data.len());
        let end = starts.get(i + 1).copied().unwrap_or(data.len());
        start..end
    }

    fn duplicate_line(&mut self, data: &mut Vec<u8>) {
        let line = self.a_line(data);
        let copy = data[line.clone()].to_vec();
        let times = 1 + self.below(3);
        for _ in 0..times {
            data.splice(line.start..line.start, copy.iter().copied());
        }
    }

    fn delete_line(&mut self, data: &mut Vec<u8>) {
        let line = self.a_line(data);
        data.drain(line);
    }

    fn swap_lines(&mut self, data: &mut Vec<u8>) {
        let a = self.a_line(data);
        let b = self.a_line(data);
        if a.end <= b.start {
            let (la, lb) = (data[a.clone()].to_vec(), data[b.clone()].to_vec());
            data.splice(b, la);
            data.splice(a, lb);
        }
    }

    fn replace_number(&mut self, data: &mut Vec<u8>) {
        let numbers: Vec<(usize, usize)> = {
            let mut found = Vec::new();
            let mut i = 0;
            while i < data.len() {
                if data[i].is_ascii_digit() {
                    let start = i;
                    while i < data.len() && (data[i].is_ascii_digit() || data[i] == b'.') {
                        i += 1;
                    }
                    found.push((start, i));
                } else {
                    i += 1;
                }
            }
            found
        };
        if numbers.is_empty() {
            return self.insert_snippet(data);
        }
        let (start, end) = *self.pick(&numbers);
        let with = self.pick(&EXTREMES).as_bytes().to_vec();
        data.splice(start..end, with);
    }

    fn insert_snippet(&mut self, data: &mut Vec<u8>) {
        let at = self.below(data.len() + 1);
        let snippet = self.pick(&SNIPPETS).as_bytes().to_vec();
        data.splice(at..at, snippet);
    }

    /// Every line ending made CR, CRLF, or the file given a byte-order mark.
    fn line_endings(&mut self, data: &mut Vec<u8>) {
        let text: Vec<u8> = data.iter().copied().filter(|b| *b != b'\r').collect();
        *data = match self.below(3) {
            0 => text.iter().map(|&b| if b == b'\n' { b'\r' } else { b }).collect(),
            1 => text.iter().flat_map(|&b| if b == b'\n' { vec![b'\r', b'\n'] } else { vec![b] }).collect(),
            _ => [b"\xef\xbb\xbf".as_slice(), &text].concat(),
        };
    }

    fn truncate(&mut self, data: &mut Vec<u8>) {
        let at = self.below(data.len() + 1);
        data.truncate(at);
    }

    /// A piece of another seed of the same target, in the middle of this one.
    fn splice(&mut self, data: &mut Vec<u8>, other: &[u8]) {
        if other.is_empty() {
            return;
        }
        let from = self.below(other.len());
        let len = self.below(other.len() - from + 1).min(4096);
        let at = self.below(data.len() + 1);
        data.splice(at..at, other[from..from + len].iter().copied());
    }

    fn invalid_utf8(&mut self, data: &mut Vec<u8>) {
        let at = self.below(data.len() + 1);
        let bad = self.pick(&[&[0xffu8][..], &[0xc3], &[0xe2, 0x82], &[0xed, 0xa0, 0x80]]).to_vec();
        data.splice(at..at, bad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs_and_lengths_are_bounded() {
        let seed = b"levels: [rack, host]\nnodes:\n  - {name: a, gpus: 8}\n";
        let (mut a, mut b) = (Mutator::new(7), Mutator::new(7));
        for _ in 0..500 {
            let (x, y) = (a.mutate(seed, b"other: 1\n", 256), b.mutate(seed, b"other: 1\n", 256));
            assert_eq!(x, y);
            assert!(x.len() <= 256);
        }
    }
}
