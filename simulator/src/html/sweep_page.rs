//! The HTML report of a sweep: per group of points (the same variation over several seeds),
//! each metric's mean with its 95% interval, then every point and every failure.

use super::charts::{self, Bar};
use super::{Page, number};
use crate::report::human_duration;
use crate::sweep::{Comparison, GroupRow, MetricCi};

/// A metric drawn across the groups: title, unit, the value, and the divisor to that unit.
type Metric = (&'static str, &'static str, fn(&GroupRow) -> MetricCi, f64);

/// The comparison of a sweep as one HTML document; `title` names the sweep (its file).
pub fn sweep_page(title: &str, comparison: &Comparison) -> String {
    let mut page = Page::new(&format!("trainyard sweep: {title}"));
    let labels = short_labels(&comparison.groups.iter().map(|g| g.group.as_str()).collect::<Vec<_>>());
    page.paragraph(&format!(
        "{} points in {} groups finished, {} failed. Groups differ in: {}. Bars are means over a group's seeds, \
         whiskers the 95% confidence interval of the mean (Student's t).",
        comparison.points.len(),
        comparison.groups.len(),
        comparison.failed.len(),
        varying_keys(&comparison.groups.iter().map(|g| g.group.as_str()).collect::<Vec<_>>())
    ));
    let metrics: [Metric; 4] = [
        ("Mean queueing delay", "hours", |g| g.mean_wait_s, 3600.0),
        ("99th percentile of the queueing delay", "hours", |g| g.p99_wait_s, 3600.0),
        ("GPU utilisation", "% of the cluster's GPUs", |g| g.gpu_utilisation, 0.01),
        ("Mean job completion time", "hours", |g| g.mean_jct_s, 3600.0),
    ];
    page.heading("Metrics across the sweep");
    for (title, unit, metric, scale) in metrics {
        let bars: Vec<Bar> = comparison
            .groups
            .iter()
            .zip(&labels)
            .map(|(g, label)| {
                let m = metric(g);
                Bar { label: label.clone(), value: m.mean / scale, ci95: Some(m.ci95 / scale), limit: None }
            })
            .collect();
        page.chart(charts::bars(title, unit, &bars), &format!("{title} per group, in {unit}."));
    }
    page.heading("Groups");
    page.table(
        &["group", "seeds", "mean wait", "p99 wait", "GPU utilisation", "mean JCT"],
        &comparison
            .groups
            .iter()
            .zip(&labels)
            .map(|(g, label)| {
                vec![
                    label.clone(),
                    g.seeds.to_string(),
                    with_ci(g.mean_wait_s, true),
                    with_ci(g.p99_wait_s, true),
                    format!("{:.1}% ± {:.1}", g.gpu_utilisation.mean * 100.0, g.gpu_utilisation.ci95 * 100.0),
                    with_ci(g.mean_jct_s, true),
                ]
            })
            .collect::<Vec<_>>(),
    );
    page.heading("Points");
    page.table(
        &["point", "jobs", "finished", "mean wait", "p99 wait", "GPU utilisation"],
        &comparison
            .points
            .iter()
            .map(|p| {
                let s = &p.summary;
                vec![
                    p.point.clone(),
                    s.jobs.to_string(),
                    s.finished.to_string(),
                    human_duration(s.queueing_delay.mean),
                    human_duration(s.queueing_delay.p99),
                    format!("{:.1}%", s.gpu_utilisation * 100.0),
                ]
            })
            .collect::<Vec<_>>(),
    );
    if !comparison.failed.is_empty() {
        page.heading("Failed points");
        page.table(
            &["point", "line", "error"],
            &comparison
                .failed
                .iter()
                .map(|(p, line, e)| vec![p.clone(), line.to_string(), e.clone()])
                .collect::<Vec<_>>(),
        );
    }
    page.finish()
}

fn with_ci(m: MetricCi, duration: bool) -> String {
    if duration {
        format!("{} ± {}", human_duration(m.mean), human_duration(m.ci95))
    } else {
        format!("{} ± {}", number(m.mean, 2), number(m.ci95, 2))
    }
}

/// Group labels keep only the `key=value` words that differ between groups, so a chart's
/// axis names what the sweep varied (all words when every group is alike).
fn short_labels(groups: &[&str]) -> Vec<String> {
    let words: Vec<Vec<&str>> = groups.iter().map(|g| g.split(' ').collect()).collect();
    let common = |w: &&str| words.iter().all(|ws| ws.contains(w));
    words
        .iter()
        .zip(groups)
        .map(|(ws, whole)| {
            let kept: Vec<String> = ws.iter().filter(|w| !common(w)).map(|w| without_folders(w)).collect();
            if kept.is_empty() { whole.to_string() } else { kept.join(" ") }
        })
        .collect()
}

/// `cluster=../clusters/big.yaml` as `cluster=big.yaml`: the file names what varied.
fn without_folders(word: &str) -> String {
    match word.split_once('=') {
        Some((key, value)) if value.contains('/') => {
            format!("{key}={}", value.rsplit('/').next().unwrap_or(value))
        }
        _ => word.to_string(),
    }
}

/// The keys whose values differ between groups, e.g. `cluster, policy`.
fn varying_keys(groups: &[&str]) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for label in groups {
        for word in label.split(' ') {
            let key = word.split('=').next().unwrap_or(word);
            let differs = groups.iter().any(|g| !g.split(' ').any(|w| w == word));
            if differs && !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    if keys.is_empty() { "nothing (one group)".into() } else { keys.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_keep_what_varies() {
        let groups = ["cluster=x/a.yaml policy=fifo load=1", "cluster=../x/b.yaml policy=fifo load=1"];
        assert_eq!(short_labels(&groups), ["cluster=a.yaml", "cluster=b.yaml"]);
        assert_eq!(varying_keys(&groups), "cluster");
        assert_eq!(short_labels(&["x=1 y=2"]), ["x=1 y=2"]);
        assert_eq!(varying_keys(&["x=1 y=2"]), "nothing (one group)");
    }
}
