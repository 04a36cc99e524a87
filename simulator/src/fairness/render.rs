//! The "Tenants" section of the plain-text report.

use std::fmt::Write as _;

use super::TenantFairness;
use crate::report::{clean, human_duration, render_rows};

/// The Tenants section: one row per tenant, then the Jain indices and finish-time fairness.
pub fn render_table(f: &TenantFairness) -> String {
    let mut out = format!("\nTenants ({}; service = GPU time received / asked for by the horizon)\n", f.tenants);
    let rows: Vec<Vec<String>> = f
        .by_tenant
        .iter()
        .map(|t| {
            let d = &t.queueing_delay;
            let wait = |v: f64| if d.count == 0 { "-".to_string() } else { human_duration(v) };
            vec![
                clean(&t.name),
                t.jobs.to_string(),
                t.finished.to_string(),
                format!("{:.1}", t.gpu_hours),
                ratio(t.service_ratio),
                wait(d.mean),
                wait(d.p50),
                wait(d.p95),
                wait(d.p99),
                if t.finished == 0 { "-".to_string() } else { human_duration(t.mean_jct_s) },
                ratio(t.mean_slowdown),
                ratio(t.mean_rho),
                ratio(t.max_rho),
            ]
        })
        .collect();
    let header = [
        "tenant",
        "jobs",
        "done",
        "GPU-h",
        "service",
        "wait mean",
        "p50",
        "p95",
        "p99",
        "JCT mean",
        "slowdown",
        "ρ mean",
        "ρ max",
    ];
    let mut right = [true; 13];
    right[0] = false;
    out.push_str(&render_rows(&header, &right, &rows));
    let lines = [
        ("Jain index", format!("service {}, slowdown {} (1 = equal)", ratio(f.jain_service), ratio(f.jain_slowdown))),
        (
            "finish-time ρ",
            format!("max {}; ρ <= 1 for {:.1}% of finished jobs", ratio(f.max_rho), f.rho_at_most_one_share * 100.0),
        ),
        ("horizon", format!("last submission, {}", human_duration(f.service_horizon_s as f64))),
    ];
    let key_width = lines.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    for (key, value) in &lines {
        let pad = " ".repeat(key_width - key.chars().count());
        let _ = writeln!(out, "  {key}{pad}  {value}");
    }
    out
}

/// A ratio with three decimals, `-` when absent.
fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}
