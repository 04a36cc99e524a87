//! Expansion of Slurm host-list expressions such as `gpu[001-128]` or `rack[0-1]-n[1-4],login1`.
//!
//! Grammar, as Slurm's configuration files use it:
//! - a list is items separated by commas or whitespace outside brackets (`a1,b[1-2],c`);
//! - an item is literal text with any number of bracket groups; several groups give their
//!   cartesian product, the leftmost group varying slowest (`r[0-1]-n[1-2]` is `r0-n1, r0-n2,
//!   r1-n1, r1-n2`);
//! - a group holds comma-separated numbers and `low-high` ranges; a range is printed with at
//!   least as many digits as its lower bound has (`[008-010]` gives `008 009 010`), a single
//!   number exactly as written.
//!
//! Names are returned in the order written; duplicates are kept for the caller to judge.

/// Most names one expression may expand to; more is surely a typo such as `n[1-10000000]`.
pub const MAX_NAMES: usize = 1_000_000;

/// Why a host list could not be expanded. Every variant names the item at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostListError {
    /// A `[` without its `]`, a `]` without its `[`, or a `[` inside a group.
    #[error("unbalanced brackets in `{item}`")]
    UnbalancedBrackets {
        /// The item at fault.
        item: String,
    },
    /// A group or one of its elements is empty: `[]`, `[1,]`, `[1-]`.
    #[error("empty range `[{group}]` in `{item}`")]
    EmptyRange {
        /// The item at fault.
        item: String,
        /// The group's text between the brackets.
        group: String,
    },
    /// A range whose upper bound is below its lower bound, such as `[5-2]`.
    #[error("range `{range}` in `{item}` goes backwards")]
    ReversedRange {
        /// The item at fault.
        item: String,
        /// The range as written.
        range: String,
    },
    /// A bound that is not a plain decimal number of at most 18 digits.
    #[error("`{bound}` in `{item}` is not a number (decimal digits only, at most 18)")]
    BadBound {
        /// The item at fault.
        item: String,
        /// The bound as written.
        bound: String,
    },
    /// The list would expand to more than [`MAX_NAMES`] names.
    #[error("`{item}` takes the list past {MAX_NAMES} names")]
    TooMany {
        /// The item that crossed the limit.
        item: String,
    },
}

/// One bracket group: the numbers it stands for, as (first, last, width) runs.
type Group = Vec<(u64, u64, usize)>;

/// An item split into literal text and bracket groups, in order.
enum Piece<'a> {
    Text(&'a str),
    Group(Group),
}

/// Expands a host list into names, in the order written.
pub fn expand(list: &str) -> Result<Vec<String>, HostListError> {
    let mut names = Vec::new();
    for item in split_items(list)? {
        let pieces = pieces(item)?;
        let count = pieces.iter().try_fold(1usize, |acc, p| match p {
            Piece::Text(_) => Some(acc),
            Piece::Group(g) => acc.checked_mul(group_len(g)?),
        });
        match count.and_then(|c| c.checked_add(names.len())) {
            Some(total) if total <= MAX_NAMES => {}
            _ => return Err(HostListError::TooMany { item: item.to_string() }),
        }
        push_product(&pieces, &mut names);
    }
    Ok(names)
}

/// Splits at commas and whitespace outside brackets, dropping empty items as Slurm does.
fn split_items(list: &str) -> Result<Vec<&str>, HostListError> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                if depth == 0 {
                    let end = list[i..].find([',', ' ', '\t']).map_or(list.len(), |e| i + e);
                    return Err(HostListError::UnbalancedBrackets { item: list[start..end].trim().to_string() });
                }
                depth -= 1;
            }
            ',' | ' ' | '\t' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostListError::UnbalancedBrackets { item: list[start..].trim().to_string() });
    }
    items.push(&list[start..]);
    Ok(items.into_iter().filter(|i| !i.is_empty()).collect())
}

fn pieces(item: &str) -> Result<Vec<Piece<'_>>, HostListError> {
    let unbalanced = || HostListError::UnbalancedBrackets { item: item.to_string() };
    let mut pieces = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            pieces.push(Piece::Text(&rest[..open]));
        }
        let close = rest[open..].find(']').ok_or_else(unbalanced)? + open;
        let inner = &rest[open + 1..close];
        if inner.contains('[') {
            return Err(unbalanced());
        }
        pieces.push(Piece::Group(group(item, inner)?));
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(unbalanced());
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

fn group(item: &str, inner: &str) -> Result<Group, HostListError> {
    let empty = || HostListError::EmptyRange { item: item.to_string(), group: inner.to_string() };
    let mut runs = Vec::new();
    for element in inner.split(',') {
        let (low, high) = element.split_once('-').unwrap_or((element, element));
        if low.is_empty() || high.is_empty() {
            return Err(empty());
        }
        let first = number(item, low)?;
        let last = number(item, high)?;
        if last < first {
            return Err(HostListError::ReversedRange { item: item.to_string(), range: element.to_string() });
        }
        runs.push((first, last, low.len()));
    }
    Ok(runs)
}

fn number(item: &str, text: &str) -> Result<u64, HostListError> {
    let bad = || HostListError::BadBound { item: item.to_string(), bound: text.to_string() };
    if text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse().map_err(|_| bad())
}

/// Names in a group, or `None` when the count does not fit a `usize`.
fn group_len(group: &Group) -> Option<usize> {
    group.iter().try_fold(0usize, |acc, &(first, last, _)| acc.checked_add(usize::try_from(last - first + 1).ok()?))
}

/// Every name an item stands for; built level by level rather than recursively so that an item
/// with thousands of groups cannot exhaust the stack.
fn push_product(pieces: &[Piece<'_>], out: &mut Vec<String>) {
    let mut names = vec![String::new()];
    for piece in pieces {
        names = match piece {
            Piece::Text(text) => names.into_iter().map(|n| n + text).collect(),
            Piece::Group(runs) => names
                .iter()
                .flat_map(|n| {
                    runs.iter()
                        .flat_map(move |&(first, last, width)| (first..=last).map(move |i| format!("{n}{i:0width$}")))
                })
                .collect(),
        };
    }
    out.extend(names);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> Vec<String> {
        expand(list).unwrap_or_else(|e| panic!("{list}: {e}"))
    }

    #[test]
    fn plain_names_and_simple_ranges() {
        assert_eq!(names("n1"), ["n1"]);
        assert_eq!(names("n[1-4]"), ["n1", "n2", "n3", "n4"]);
        assert_eq!(names("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(names("[1-2]"), ["1", "2"]);
        assert_eq!(names("n[3]x"), ["n3x"]);
        assert!(names("").is_empty());
    }

    #[test]
    fn zero_padding_follows_the_lower_bound() {
        let all = names("gpu[001-128]");
        assert_eq!(all.len(), 128);
        assert_eq!((all[0].as_str(), all[9].as_str(), all[127].as_str()), ("gpu001", "gpu010", "gpu128"));
        assert_eq!(names("n[098-100]"), ["n098", "n099", "n100"]);
        assert_eq!(names("n[07,9]"), ["n07", "n9"]);
    }

    #[test]
    fn mixed_groups_and_top_level_commas() {
        assert_eq!(names("n[1-3,7,10-12]"), ["n1", "n2", "n3", "n7", "n10", "n11", "n12"]);
        assert_eq!(names("a1,b[1-2],c"), ["a1", "b1", "b2", "c"]);
        assert_eq!(names("a1 , b[1,3]\tc"), ["a1", "b1", "b3", "c"]);
    }

    #[test]
    fn several_groups_multiply_leftmost_slowest() {
        assert_eq!(
            names("rack[0-1]-node[1-4]"),
            [
                "rack0-node1",
                "rack0-node2",
                "rack0-node3",
                "rack0-node4",
                "rack1-node1",
                "rack1-node2",
                "rack1-node3",
                "rack1-node4"
            ]
        );
        assert_eq!(names("[1-2][5,7]"), ["15", "17", "25", "27"]);
    }

    #[test]
    fn errors_name_the_bad_part() {
        let cases = [
            ("a,n[1-4", "unbalanced brackets in `n[1-4`"),
            ("n1-4],b", "unbalanced brackets in `n1-4]`"),
            ("n[1-[2]]", "unbalanced brackets in `n[1-[2]]`"),
            ("ok,n[]", "empty range `[]` in `n[]`"),
            ("n[1-]", "empty range `[1-]` in `n[1-]`"),
            ("n[1,,2]", "empty range `[1,,2]` in `n[1,,2]`"),
            ("n[5-2]", "range `5-2` in `n[5-2]` goes backwards"),
            ("n[a-c]", "`a` in `n[a-c]` is not a number"),
            ("n[1-2-3]", "`2-3` in `n[1-2-3]` is not a number"),
            ("n[0-9999999999999999999]", "`9999999999999999999` in `n[0-9999999999999999999]` is not a number"),
            ("n[1-1000001]", "`n[1-1000001]` takes the list past 1000000 names"),
            ("a[1-1000][1-1000],b", "`b` takes the list past 1000000 names"),
        ];
        for (list, want) in cases {
            let err = expand(list).expect_err(list).to_string();
            assert!(err.contains(want), "{list}: {err}");
        }
    }

    #[test]
    fn the_cap_is_inclusive() {
        assert_eq!(expand("n[1-1000000]").map(|v| v.len()), Ok(MAX_NAMES));
    }
}
