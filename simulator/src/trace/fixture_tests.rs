//! Tests over the shipped fixtures in `data/traces/` and the CSV/JSONL round trips.

use std::collections::HashSet;

use super::*;

const HELIOS: &str = include_str!("../../../data/traces/helios-excerpt.csv");
const PHILLY: &str = include_str!("../../../data/traces/philly-excerpt.csv");

fn read(format: TraceFormat, text: &str) -> TraceRead {
    read_trace(format, text.as_bytes(), "fixture", &ReadOptions::default()).unwrap()
}

#[test]
fn helios_excerpt_reads_whole() {
    assert_eq!(TraceFormat::detect(HELIOS.lines().next().unwrap()), Some(TraceFormat::DirLab));
    let read = read(TraceFormat::DirLab, HELIOS);
    assert!(read.skipped.is_empty());
    assert_eq!(read.jobs.len(), 15_000);
    assert_eq!(read.jobs.iter().filter(|j| j.gpus() == 0).count(), 4_204);
    assert_eq!(read.jobs.iter().map(|j| j.id.as_str()).collect::<HashSet<_>>().len(), 15_000);
    // 20.2 days of submissions (README), the first at 0.
    assert_eq!(read.jobs[0].submit, 0);
    let last = read.jobs[read.jobs.len() - 1].submit;
    assert!((20.0 * 86_400.0..20.5 * 86_400.0).contains(&(last as f64)), "{last}");
    // The largest job, 160 GPUs on 20 nodes, stays 20 x 8.
    let biggest = read.jobs.iter().max_by_key(|j| j.gpus()).unwrap();
    assert_eq!((biggest.gpus(), biggest.gang.pods(), biggest.gang.sets[0].pod.gpus), (160, 20, 8));
    // Every Helios job divides evenly over its nodes, so each gang has one pod per node.
    let nodes: std::collections::HashMap<String, u32> = HELIOS
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.trim_end().split(',').collect();
            (format!("job-{}", f[0]), f[4].parse().unwrap())
        })
        .collect();
    assert!(read.jobs.iter().all(|j| j.gang.pods() == nodes[&j.id]));
    assert_eq!(read.jobs.iter().filter(|j| j.gang.pods() > 1).count(), 15_000 - 13_737);
}

#[test]
fn philly_excerpt_reads_whole_and_sorts() {
    assert_eq!(TraceFormat::detect(PHILLY.lines().next().unwrap()), Some(TraceFormat::Philly));
    let read = read(TraceFormat::Philly, PHILLY);
    assert!(read.skipped.is_empty());
    let jobs = &read.jobs;
    assert_eq!(jobs.len(), 3_000);
    assert_eq!(jobs[0].submit, 0);
    // The earliest row (2017-09-04 10:30:41) is not first in the file.
    assert!(jobs[0].line > 2);
    for w in jobs.windows(2) {
        assert!((w[0].submit, w[0].line) < (w[1].submit, w[1].line));
    }
    // Last of the excerpt: 2017-09-27 09:37:29, i.e. 1,984,008 s after the first.
    assert_eq!(jobs[jobs.len() - 1].submit, 1_984_008);
    assert_eq!(jobs.iter().map(|j| j.gpus()).max(), Some(16));
}

fn sample_jobs() -> Vec<TraceJob> {
    let mut jobs = read(TraceFormat::DirLab, HELIOS).jobs;
    jobs.truncate(500);
    // Cover what the external formats never produce.
    jobs[1].runtime_estimate = Some(900);
    jobs[2].priority = -7;
    jobs[3].tenant = "team \"q\", x".to_string();
    jobs[4].gang.sets[0].pod.memory_mib = 4096;
    jobs[5].gang.topology = trainyard_topology::TopologyRequest::Required("rack".into());
    jobs[6].gang.topology = trainyard_topology::TopologyRequest::Preferred("block".into());
    jobs
}

/// Lines are where the rows sit in the file just written, so compare without them.
fn without_lines(jobs: &[TraceJob]) -> Vec<TraceJob> {
    jobs.iter().cloned().map(|j| TraceJob { line: 0, ..j }).collect()
}

#[test]
fn csv_round_trip() {
    let jobs = sample_jobs();
    let mut out = Vec::new();
    write_csv(&jobs, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(TraceFormat::detect(text.lines().next().unwrap()), Some(TraceFormat::Csv));
    let back = read(TraceFormat::Csv, &text);
    assert_eq!(without_lines(&back.jobs), without_lines(&jobs));
    assert_eq!(back.jobs[0].line, 2);
}

#[test]
fn jsonl_round_trip() {
    let jobs = sample_jobs();
    let mut out = Vec::new();
    write_jsonl(&jobs, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(TraceFormat::detect(text.lines().next().unwrap()), Some(TraceFormat::Jsonl));
    let back = read(TraceFormat::Jsonl, &text);
    assert_eq!(without_lines(&back.jobs), without_lines(&jobs));
    assert_eq!(back.jobs[0].line, 1);
}
