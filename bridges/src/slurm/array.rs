//! Job array indices as Slurm writes them: `--array=0,3,5-9`, and the still-pending tasks of an
//! array as squeue and slurmrestd report them (`array_task_string`, e.g. `3,5-9%2` or `1-7:2`).

/// Indices in Slurm's compact form: sorted, duplicates dropped, runs of consecutive indices as
/// ranges (`[9, 0, 5, 6, 7, 3, 8]` -> `0,3,5-9`), so a long sweep stays a short `#SBATCH` line.
pub fn format_array_indices(indices: &[u32]) -> String {
    let mut sorted = indices.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            end = sorted[i + 1];
            i += 1;
        }
        parts.push(if end == start { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

/// Reads an index list (`0,3,5-9`, `1-7:2` with a step, a `%N` limit of tasks at once at the
/// end) into sorted indices; `None` when the text is not such a list. A list that is empty or
/// would pass `limit` indices is refused, so a malformed answer cannot allocate without bound.
pub fn parse_array_indices(text: &str, limit: usize) -> Option<Vec<u32>> {
    let list = text.split_once('%').map_or(text, |(list, _)| list).trim();
    let mut indices = Vec::new();
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => (range, step.trim().parse::<u32>().ok().filter(|&s| s > 0)?),
            None => (part, 1),
        };
        let (start, end) = match range.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let one = range.trim().parse::<u32>().ok()?;
                (one, one)
            }
        };
        if end < start || indices.len() + ((end - start) / step) as usize >= limit {
            return None;
        }
        indices.extend((start..=end).step_by(step as usize));
    }
    indices.sort_unstable();
    indices.dedup();
    Some(indices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_become_ranges_and_read_back() {
        assert_eq!(format_array_indices(&[9, 0, 5, 6, 7, 3, 8]), "0,3,5-9");
        assert_eq!(format_array_indices(&[4]), "4");
        assert_eq!(format_array_indices(&[1, 2, 2, 3, 7, 8]), "1-3,7-8");
        assert_eq!(format_array_indices(&[]), "");
        for list in [vec![0, 3, 5, 6, 7, 8, 9], vec![4], vec![1, 2, 3, 7, 8], vec![0, 2, 4, 100_000]] {
            assert_eq!(parse_array_indices(&format_array_indices(&list), 1000), Some(list));
        }
    }

    #[test]
    fn squeue_forms_are_read_and_nonsense_is_not() {
        assert_eq!(parse_array_indices("3,5-9%2", 100), Some(vec![3, 5, 6, 7, 8, 9]));
        assert_eq!(parse_array_indices("1-7:2", 100), Some(vec![1, 3, 5, 7]));
        assert_eq!(parse_array_indices("12", 100), Some(vec![12]));
        for bad in ["", "a", "5-3", "1-", "1:0", "0-99"] {
            assert_eq!(parse_array_indices(bad, 50), None, "{bad:?}");
        }
        assert_eq!(parse_array_indices("0-4294967295", 1000), None, "bounded");
    }
}
