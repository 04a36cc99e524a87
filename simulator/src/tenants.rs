//! Tenant quota policy files generated from published per-VC capacities (Philly, Helios Venus).
//!
//! Both inputs are shipped under `data/tenants/` and the outputs under `examples/policies/`;
//! a test regenerates the outputs and fails when the shipped copies are stale.
//!
//! - `philly_vc.csv` (`vc,node num`): Philly's virtual clusters and their sizes in nodes. The
//!   Helios authors' simulator replays Philly on homogeneous 8-GPU nodes, so a VC's quota is
//!   `nodes x` [`PHILLY_GPUS_PER_NODE`].
//! - `venus_cluster_gpu_number.csv` (`date,<one column per VC>,total`): GPUs assigned to each
//!   Venus VC, one row per day. One day's row becomes the quotas; VCs with no GPUs that day
//!   are left out, and the row must add up to its `total`.
//!
//! Pure: the functions take CSV text and return YAML text.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use trainyard_topology::InputError;

/// GPUs per node of a Philly VC.
pub const PHILLY_GPUS_PER_NODE: u64 = 8;

/// The Venus day shipped as `examples/policies/helios-venus-vcs.yaml`: inside the September 2020
/// stretch (09-04 to 09-22) whose quotas are the 15-VC, 135-node configuration that Lucid
/// (ASPLOS'23) replays Venus on.
pub const VENUS_SNAPSHOT_DATE: &str = "2020-09-10";

/// One VC and its GPU quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcQuota {
    /// VC name, as the trace names the tenant.
    pub name: String,
    /// GPUs the VC may hold at once.
    pub gpus: u64,
}

/// The VCs of a Philly `vc,node num` table, in file order, with `nodes x 8` GPUs each.
pub fn philly_vc_quotas(csv_text: &str, source_name: &str) -> Result<Vec<VcQuota>, InputError> {
    let mut reader = reader(csv_text);
    let header = header(&mut reader, source_name)?;
    let vc_col = column(&header, "vc", source_name)?;
    let nodes_col = column(&header, "node num", source_name)?;
    let mut quotas = Vec::new();
    let mut names = BTreeSet::new();
    for record in reader.records() {
        let record = record.map_err(|e| syntax(source_name, &e))?;
        let line = line_of(&record);
        let name = cell(&record, vc_col);
        check_name(name, source_name, line, "vc", &mut names)?;
        let nodes = whole(cell(&record, nodes_col), source_name, line, "node num")?;
        if nodes == 0 {
            return Err(InputError::invalid(source_name, Some(line), "node num", format!("VC `{name}` has no nodes")));
        }
        let gpus = nodes.checked_mul(PHILLY_GPUS_PER_NODE).ok_or_else(|| {
            InputError::invalid(source_name, Some(line), "node num", format!("{nodes} nodes overflow a GPU count"))
        })?;
        quotas.push(VcQuota { name: name.to_string(), gpus });
    }
    Ok(quotas)
}

/// The VCs with GPUs on `date` (`YYYY-MM-DD`) in a Helios `cluster_gpu_number.csv`, in
/// column order.
pub fn venus_vc_quotas(csv_text: &str, source_name: &str, date: &str) -> Result<Vec<VcQuota>, InputError> {
    let mut reader = reader(csv_text);
    let header = header(&mut reader, source_name)?;
    let date_col = column(&header, "date", source_name)?;
    let total_col = column(&header, "total", source_name)?;
    let mut names = BTreeSet::new();
    let mut vcs = Vec::new();
    for (i, name) in header.iter().enumerate() {
        if i != date_col && i != total_col {
            check_name(name, source_name, 1, &format!("column {}", i + 1), &mut names)?;
            vcs.push((i, name));
        }
    }
    for record in reader.records() {
        let record = record.map_err(|e| syntax(source_name, &e))?;
        if cell(&record, date_col) != date {
            continue;
        }
        let line = line_of(&record);
        let mut quotas = Vec::new();
        let mut sum = 0u64;
        for &(i, name) in &vcs {
            let gpus = whole(cell(&record, i), source_name, line, name)?;
            sum = sum.saturating_add(gpus);
            if gpus > 0 {
                quotas.push(VcQuota { name: name.to_string(), gpus });
            }
        }
        let total = whole(cell(&record, total_col), source_name, line, "total")?;
        if sum != total {
            let message = format!("the VC columns add up to {sum} GPUs, the row's total says {total}");
            return Err(InputError::invalid(source_name, Some(line), "total", message));
        }
        return Ok(quotas);
    }
    Err(InputError::invalid(source_name, None, "date", format!("no row for {date}")))
}

/// A policy file (`backfill: easy`, the default runtime estimate, one queue per VC in the
/// given order, `undeclared_queues: unlimited`) headed by `comments`, one `#` line each.
/// Names are always double-quoted: Philly's hex VC names such as `0e4a51` read as numbers
/// when bare.
pub fn policy_yaml(name: &str, comments: &[String], quotas: &[VcQuota]) -> String {
    let mut out = String::new();
    for c in comments {
        let _ = writeln!(out, "# {c}");
    }
    let _ = writeln!(out, "name: {name}");
    out.push_str("backfill: easy\ndefault_runtime_estimate: 4h\nqueues:\n");
    for q in quotas {
        let _ = writeln!(out, "  - {{name: \"{}\", nominal_gpus: {}}}", q.name, q.gpus);
    }
    out.push_str("undeclared_queues: unlimited\n");
    out
}

/// `examples/policies/philly-vcs.yaml` from the text of `philly_vc.csv`.
pub fn philly_policy_yaml(csv_text: &str, source_name: &str) -> Result<String, InputError> {
    let quotas = philly_vc_quotas(csv_text, source_name)?;
    let gpus: u64 = quotas.iter().map(|q| q.gpus).sum();
    let comments = [
        format!("Generated from {source_name} by trainyard_simulator::tenants: do not edit."),
        "Tenant quotas of Microsoft Philly: one queue per virtual cluster (VC), the tenant of".to_string(),
        format!(
            "the Philly trace; nominal_gpus = VC nodes x {PHILLY_GPUS_PER_NODE} GPUs. {} VCs, {} GPUs in all.",
            quotas.len(),
            gpus
        ),
        "VCs of a trace that are not listed get a queue without a quota; set".to_string(),
        "`undeclared_queues: reject` to turn their jobs away instead.".to_string(),
    ];
    Ok(policy_yaml("philly-vcs", &comments, &quotas))
}

/// `examples/policies/helios-venus-vcs.yaml` from the text of Venus's `cluster_gpu_number.csv`
/// on `date`.
pub fn venus_policy_yaml(csv_text: &str, source_name: &str, date: &str) -> Result<String, InputError> {
    let quotas = venus_vc_quotas(csv_text, source_name, date)?;
    let gpus: u64 = quotas.iter().map(|q| q.gpus).sum();
    let comments = [
        format!("Generated from {source_name} ({date}) by trainyard_simulator::tenants: do not edit."),
        format!("Tenant quotas of SenseTime Helios Venus on {date}: one queue per virtual cluster (VC)"),
        format!("with GPUs that day; {} VCs, {} GPUs in all. VCs not listed get a queue without", quotas.len(), gpus),
        "a quota; set `undeclared_queues: reject` to turn their jobs away instead.".to_string(),
    ];
    Ok(policy_yaml("helios-venus-vcs", &comments, &quotas))
}

fn reader(text: &str) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes())
}

fn header(reader: &mut csv::Reader<&[u8]>, source_name: &str) -> Result<csv::StringRecord, InputError> {
    match reader.records().next() {
        Some(record) => record.map_err(|e| syntax(source_name, &e)),
        None => Err(InputError::invalid(source_name, Some(1), "header", "the file is empty")),
    }
}

fn column(header: &csv::StringRecord, name: &str, source_name: &str) -> Result<usize, InputError> {
    header
        .iter()
        .position(|h| h == name)
        .ok_or_else(|| InputError::invalid(source_name, Some(1), "header", format!("no column `{name}`")))
}

fn cell(record: &csv::StringRecord, i: usize) -> &str {
    record.get(i).unwrap_or("")
}

fn line_of(record: &csv::StringRecord) -> u64 {
    record.position().map_or(0, csv::Position::line)
}

fn syntax(source_name: &str, e: &csv::Error) -> InputError {
    InputError::syntax(source_name, e)
}

fn whole(text: &str, source_name: &str, line: u64, field: &str) -> Result<u64, InputError> {
    text.trim().parse().map_err(|_| {
        InputError::invalid(source_name, Some(line), field, format!("expected a whole number, found {text:?}"))
    })
}

/// VC names end up quoted in YAML and compared with trace tenants: keep them to the
/// characters real VC names use, and unique.
fn check_name(
    name: &str,
    source_name: &str,
    line: u64,
    field: &str,
    seen: &mut BTreeSet<String>,
) -> Result<(), InputError> {
    let bad = |message: String| Err(InputError::invalid(source_name, Some(line), field, message));
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return bad(format!("VC name {name:?} must be non-empty ASCII letters, digits, `-`, `_` or `.`"));
    }
    if !seen.insert(name.to_string()) {
        return bad(format!("VC `{name}` is listed twice"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philly_quotas_are_nodes_times_eight() {
        let q = philly_vc_quotas("vc,node num\n6214e9,64\n0e4a51,2\n", "p.csv").unwrap();
        assert_eq!(q, [VcQuota { name: "6214e9".into(), gpus: 512 }, VcQuota { name: "0e4a51".into(), gpus: 16 }]);
    }

    #[test]
    fn venus_takes_one_day_and_drops_empty_vcs() {
        let csv = "date,vcA,vcB,vcC,total\n2020-09-09,8,0,16,24\n2020-09-10,16,0,8,24\n";
        let q = venus_vc_quotas(csv, "v.csv", "2020-09-10").unwrap();
        assert_eq!(q, [VcQuota { name: "vcA".into(), gpus: 16 }, VcQuota { name: "vcC".into(), gpus: 8 }]);
    }

    #[test]
    fn yaml_quotes_names() {
        let y = policy_yaml("x", &["hello".into()], &[VcQuota { name: "0e4a51".into(), gpus: 16 }]);
        assert_eq!(
            y,
            "# hello\nname: x\nbackfill: easy\ndefault_runtime_estimate: 4h\nqueues:\n  - {name: \"0e4a51\", nominal_gpus: 16}\nundeclared_queues: unlimited\n"
        );
    }

    #[test]
    fn bad_input_names_source_line_and_field() {
        type Case<'a> = (&'a str, Result<Vec<VcQuota>, InputError>, &'a str);
        let cases: [Case; 8] = [
            ("empty", philly_vc_quotas("", "p.csv"), "p.csv: line 1: field `header`: the file is empty"),
            (
                "no column",
                philly_vc_quotas("vc,nodes\n", "p.csv"),
                "p.csv: line 1: field `header`: no column `node num`",
            ),
            (
                "not a number",
                philly_vc_quotas("vc,node num\na,1\nb,x\n", "p.csv"),
                "p.csv: line 3: field `node num`: expected a whole number, found \"x\"",
            ),
            (
                "zero nodes",
                philly_vc_quotas("vc,node num\na,0\n", "p.csv"),
                "p.csv: line 2: field `node num`: VC `a` has no nodes",
            ),
            (
                "twice",
                philly_vc_quotas("vc,node num\na,1\na,2\n", "p.csv"),
                "p.csv: line 3: field `vc`: VC `a` is listed twice",
            ),
            (
                "bad name",
                philly_vc_quotas("vc,node num\n\"a\"\"b\",1\n", "p.csv"),
                "p.csv: line 2: field `vc`: VC name \"a\\\"b\" must be non-empty ASCII letters, digits, `-`, `_` or `.`",
            ),
            (
                "no such day",
                venus_vc_quotas("date,vcA,total\n2020-09-09,8,8\n", "v.csv", "2020-09-10"),
                "v.csv: field `date`: no row for 2020-09-10",
            ),
            (
                "bad total",
                venus_vc_quotas("date,vcA,vcB,total\n2020-09-10,8,8,24\n", "v.csv", "2020-09-10"),
                "v.csv: line 2: field `total`: the VC columns add up to 16 GPUs, the row's total says 24",
            ),
        ];
        for (what, result, message) in cases {
            assert_eq!(result.unwrap_err().to_string(), message, "{what}");
        }
        let err = venus_vc_quotas("date,vcA,total\n2020-09-10,-8,8\n", "v.csv", "2020-09-10").unwrap_err();
        assert_eq!(err.to_string(), "v.csv: line 2: field `vcA`: expected a whole number, found \"-8\"");
    }
}
