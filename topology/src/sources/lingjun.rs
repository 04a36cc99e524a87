//! The Alibaba Lingjun fabric (`topo.csv`: `ip,DSW,PSW,ASW`) as a four-level tree.
//!
//! Levels are `dsw` (core switch), `psw` (aggregation switch), `tor` and `host`. ToR names
//! are local to their PSW (every PSW numbers its ToRs from `S1`), so a ToR is the pair
//! (PSW, ASW): domains are keyed by their whole path, which keeps `P8/S1` and `P10/S1` apart.
//! The file has no capacities; every host gets [`HostDefaults`].

use std::collections::HashSet;

use super::{HostDefaults, LoadedTopology, SourceWarning, node};
use crate::{InputError, ResolvedSpec, Result};

/// The level names this reader produces, outermost first.
pub const LEVELS: [&str; 4] = ["dsw", "psw", "tor", "host"];

/// Parses `topo.csv`. Rows with an empty field are reported and left out; a header other
/// than `ip,DSW,PSW,ASW` or a host listed twice is an error naming the line.
pub fn parse(text: &str, source_name: &str, defaults: HostDefaults) -> Result<LoadedTopology> {
    let invalid =
        |line: usize, field: &str, message: String| InputError::invalid(source_name, Some(line as u64), field, message);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
    let header = lines.find(|(_, l)| !l.trim().is_empty());
    match header {
        Some((_, h)) if h.split(',').map(str::trim).eq(["ip", "DSW", "PSW", "ASW"]) => {}
        Some((n, h)) => return Err(invalid(n, "header", format!("expected `ip,DSW,PSW,ASW`, found `{h}`")).into()),
        None => return Err(invalid(1, "header", "the file is empty".to_string()).into()),
    }
    let mut nodes = Vec::new();
    let mut warnings = Vec::new();
    // Only looked up, never iterated.
    let mut seen = HashSet::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 4 {
            return Err(invalid(n, "row", format!("expected 4 fields, found {}", fields.len())).into());
        }
        if let Some(i) = fields.iter().position(|f| f.is_empty()) {
            warnings.push(SourceWarning {
                source_name: source_name.to_string(),
                line: Some(n as u64),
                item: format!("host `{}`", fields[0]),
                message: format!("empty `{}` field; host left out", ["ip", "DSW", "PSW", "ASW"][i]),
            });
            continue;
        }
        if !seen.insert(fields[0]) {
            return Err(invalid(n, "ip", format!("host `{}` is listed twice", fields[0])).into());
        }
        let path = vec![fields[1].to_string(), fields[2].to_string(), fields[3].to_string(), fields[0].to_string()];
        nodes.push(node(path, defaults.capacity));
    }
    if nodes.is_empty() {
        return Err(invalid(1, "rows", "no hosts".to_string()).into());
    }
    let spec = ResolvedSpec {
        name: source_name.to_string(),
        levels: LEVELS.iter().map(|l| l.to_string()).collect(),
        nodes,
        tori: Vec::new(),
    };
    Ok(LoadedTopology { spec, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DomainId, Topology};

    const SAMPLE: &str = "ip,DSW,PSW,ASW\na1,G6,P8,S1\na2,G6,P8,S1\nb1,G6,P10,S1\nc1,G6,P10,\nb2,G6,P10,S2\n";

    #[test]
    fn tors_are_keyed_by_their_psw() {
        let loaded = parse(SAMPLE, "topo.csv", HostDefaults::default()).unwrap();
        let topo = Topology::build(&loaded.spec).unwrap();
        assert_eq!(topo.host_count(), 4);
        let tors: Vec<String> = (0..topo.domain_count() as u32)
            .map(DomainId)
            .filter(|&d| topo.level_name(d) == "tor")
            .map(|d| topo.path(d))
            .collect();
        assert_eq!(tors, ["G6/P8/S1", "G6/P10/S1", "G6/P10/S2"]);
    }

    #[test]
    fn rows_with_a_missing_switch_are_reported_not_merged() {
        let loaded = parse(SAMPLE, "topo.csv", HostDefaults::default()).unwrap();
        assert_eq!(loaded.warnings.len(), 1);
        assert_eq!(loaded.warnings[0].line, Some(5));
        assert!(loaded.warnings[0].to_string().contains("empty `ASW` field"), "{}", loaded.warnings[0]);
    }

    #[test]
    fn bad_headers_and_duplicates_name_the_line() {
        let err = parse("ip,PSW\n", "t.csv", HostDefaults::default()).unwrap_err().to_string();
        assert!(err.contains("t.csv: line 1") && err.contains("ip,DSW,PSW,ASW"), "{err}");
        let err =
            parse("ip,DSW,PSW,ASW\na,G,P,S\na,G,P,T\n", "t.csv", HostDefaults::default()).unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("listed twice"), "{err}");
    }
}
