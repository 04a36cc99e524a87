//! The "Quota usage" section of the plain-text report.

use std::fmt::Write as _;

use super::QuotaUsage;
use crate::report::{clean, human_duration, render_rows};

/// The Quota usage section: one row per leaf queue (means over the observed time, then the
/// largest values), then the totals over all queues. A queue without a quota shows `-`.
pub fn render_table(u: &QuotaUsage) -> String {
    let mut out = format!(
        "\nQuota usage ({} leaf queues, GPUs and waiting gangs, time-weighted over {})\n",
        u.queues.len(),
        human_duration(u.observed_s as f64)
    );
    let rows: Vec<Vec<String>> = u
        .queues
        .iter()
        .map(|q| {
            vec![
                clean(&q.name),
                q.quota_gpus.map_or_else(|| "-".to_string(), |g| g.to_string()),
                format!("{:.1}", q.mean_used_gpus),
                q.max_used_gpus.to_string(),
                format!("{:.1}", q.mean_borrowed_gpus),
                q.max_borrowed_gpus.to_string(),
                percent(q.borrowing_share),
                if q.quota_gpus.is_some() { percent(q.at_quota_share) } else { "-".to_string() },
                format!("{:.1}", q.mean_pending_gangs),
                q.max_pending_gangs.to_string(),
            ]
        })
        .collect();
    let header = [
        "queue",
        "quota",
        "used",
        "used max",
        "borrowed",
        "borrowed max",
        "borrowing",
        "at quota",
        "waiting",
        "waiting max",
    ];
    let mut right = [true; 10];
    right[0] = false;
    out.push_str(&render_rows(&header, &right, &rows));
    let _ = writeln!(
        out,
        "  all queues  used {:.1} GPUs, borrowed {:.1} (max {} at once), some queue borrowing {} of the time",
        u.mean_used_gpus,
        u.mean_borrowed_gpus,
        u.max_borrowed_gpus,
        percent(u.borrowing_share)
    );
    out
}

/// A share as a percentage with one decimal.
fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}
