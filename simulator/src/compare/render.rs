//! The comparison as plain-text tables for a terminal: header, shadow table, replay table,
//! and the gangs on which trainyard did worse than a baseline.

use std::fmt::Write as _;

use super::{Comparison, Loss, PlacementView};
use crate::report::{clean, render_rows};

/// At most this many losses are printed; the JSON lists up to [`super::MAX_LISTED_LOSSES`].
const PRINTED_LOSSES: usize = 10;

pub(crate) fn render(c: &Comparison) -> String {
    let mut out = String::from("trainyard placement comparison\n\n");
    let levels: Vec<String> = c.levels.iter().map(|l| clean(l)).collect();
    let trace = if c.trace.is_empty() { "trace".to_string() } else { clean(&c.trace) };
    let slowdown: Vec<String> = c.slowdown.iter().map(|l| format!("{} {}", clean(&l.level), l.factor)).collect();
    let header = [
        (
            "cluster",
            format!(
                "{} ({} GPUs, {} hosts; {})",
                clean(&c.cluster),
                c.cluster_gpus,
                c.cluster_hosts,
                levels.join(" > ")
            ),
        ),
        ("trace", format!("{trace} ({} jobs)", c.jobs)),
        ("scheduling", format!("{} (backfill {}, estimates {})", clean(&c.scheduling_policy), c.backfill, c.estimates)),
        ("slowdown", slowdown.join(", ")),
    ];
    for (key, value) in &header {
        let _ = writeln!(out, "{key:<10}  {value}");
    }
    shadow_table(c, &mut out);
    replay_table(c, &mut out);
    losses(c, &mut out);
    out
}

fn shadow_table(c: &Comparison, out: &mut String) {
    let s = &c.shadow;
    let rack = c.levels.len().checked_sub(2).map_or("cluster".to_string(), |i| clean(&c.levels[i]));
    let _ = writeln!(
        out,
        "\nShadow comparison: each policy places every gang trainyard admitted, on the same free capacity\n\
         ({} gangs; {} moved off reserved hosts by backfill; {} trainyard placements proven optimal;\n\
         the last four columns count gangs where trainyard was costlier, cheaper, wider or narrower\n\
         above the hosts than this policy)",
        s.gangs, s.moved_by_reservation, s.proven_optimal
    );
    let mut header: Vec<String> = ["policy", "placed", "total cost", "mean cost"].map(String::from).to_vec();
    header.extend(c.levels.iter().map(|l| format!("{} used", clean(l))));
    header.extend(
        ["above hosts".to_string(), format!("in one {rack}")]
            .into_iter()
            .chain(["costlier", "cheaper", "wider", "narrower"].map(String::from)),
    );
    let rows: Vec<Vec<String>> = s
        .policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut row =
                vec![clean(&p.policy), p.placed.to_string(), p.total_cost.to_string(), format!("{:.1}", p.mean_cost)];
            row.extend(p.domains_per_level.iter().map(|l| l.domains.to_string()));
            row.push(p.domains_above_hosts.to_string());
            row.push(p.confined_to_one_rack.to_string());
            let versus = [p.trainyard_costlier, p.trainyard_cheaper, p.trainyard_spans_more, p.trainyard_spans_fewer];
            row.extend(versus.iter().map(|n| if i == 0 { "-".to_string() } else { n.to_string() }));
            row
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut right = vec![true; header.len()];
    right[0] = false;
    out.push_str(&render_rows(&header, &right, &rows));
    let _ = writeln!(
        out,
        "trainyard costlier than a baseline on {} (gang, baseline) pairs; more domains above hosts on {}",
        s.costlier_pairs, s.spans_more_pairs
    );
    for p in s.policies.iter().skip(1).filter(|p| p.not_placed > 0) {
        let _ = writeln!(out, "{} found no placement for {} gangs trainyard placed", clean(&p.policy), p.not_placed);
    }
}

fn replay_table(c: &Comparison, out: &mut String) {
    let rack = c.replays.first().map_or_else(String::new, |r| clean(&r.rack_level));
    out.push_str("\nFull replays: each policy schedules the whole trace itself (runtimes stretched by span)\n");
    let header = [
        "policy".to_string(),
        "finished".to_string(),
        "mean JCT s".to_string(),
        "p95 JCT s".to_string(),
        "mean wait s".to_string(),
        "p95 wait s".to_string(),
        "makespan s".to_string(),
        "mean slowdown".to_string(),
        format!("in one {rack}"),
        format!("multi-pod in one {rack}"),
        "above hosts".to_string(),
        "frag GPUs".to_string(),
        "frag share".to_string(),
    ];
    let rows: Vec<Vec<String>> = c
        .replays
        .iter()
        .map(|r| {
            vec![
                clean(&r.policy),
                r.finished.to_string(),
                format!("{:.0}", r.mean_jct_s),
                format!("{:.0}", r.p95_jct_s),
                format!("{:.0}", r.mean_wait_s),
                format!("{:.0}", r.p95_wait_s),
                r.makespan_s.to_string(),
                format!("{:.4}", r.mean_slowdown),
                percent(r.confined_share),
                percent(r.multi_pod_confined_share),
                r.domains_above_hosts.to_string(),
                format!("{:.1}", r.mean_fragmented_gpus),
                percent(r.fragmented_share_of_free),
            ]
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut right = vec![true; header.len()];
    right[0] = false;
    out.push_str(&render_rows(&header, &right, &rows));
}

fn losses(c: &Comparison, out: &mut String) {
    let s = &c.shadow;
    if s.moved_by_reservation > 0 {
        let _ = writeln!(
            out,
            "\nBackfill moved {} trainyard admissions off reserved hosts; against the baselines' unconstrained \
             answers those moved placements cost more in {} (gang, baseline) pairs and spanned more in {}",
            s.moved_by_reservation, s.moved_costlier_pairs, s.moved_spans_more_pairs
        );
    }
    for (title, list, total) in [
        ("Gangs where trainyard's answer did worse", &s.losses, s.costlier_pairs.max(s.spans_more_pairs)),
        ("Moved placements that did worse", &s.moved_losses, s.moved_costlier_pairs.max(s.moved_spans_more_pairs)),
    ] {
        if list.is_empty() {
            continue;
        }
        let shown = list.len().min(PRINTED_LOSSES);
        let _ = writeln!(out, "\n{title} (first {shown} of at least {total} pairs)");
        for l in list.iter().take(PRINTED_LOSSES) {
            out.push_str(&loss(l));
        }
    }
}

fn loss(l: &Loss) -> String {
    let what = match (l.costlier, l.spans_more) {
        (true, true) => "costlier and wider",
        (true, false) => "costlier",
        _ => "wider",
    };
    let moved = if l.moved_by_reservation { ", moved off reserved hosts" } else { "" };
    let mut out = format!(
        "  {} (line {}, {} x {} GPUs, t={}s): {what} than {}{moved}; free {} GPUs, {} idle hosts\n",
        clean(&l.job),
        l.line,
        l.pods,
        l.pod_gpus,
        l.start_s,
        clean(&l.baseline),
        l.free_gpus,
        l.idle_hosts
    );
    out.push_str(&view("trainyard", &l.trainyard));
    out.push_str(&view(&l.baseline, &l.other));
    out
}

fn view(policy: &str, v: &PlacementView) -> String {
    let spans: Vec<String> = v.spans.iter().map(u32::to_string).collect();
    format!(
        "    {:<15} cost {} in {} {} ({} GPUs free), spans [{}]: {}\n",
        clean(policy),
        v.cost,
        clean(&v.level),
        clean(&v.domain),
        v.domain_free_gpus,
        spans.join(", "),
        v.hosts.iter().map(|h| clean(h)).collect::<Vec<_>>().join(", ")
    )
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}
