//! `--html`: a self-contained report (no network, every chart inline), the same bytes for the
//! same inputs, decisions unchanged by asking for it, and, in a real headless Chromium (the
//! ignored tests scripts/test.sh runs once it has installed Debian's `chromium`), every chart
//! drawn and no script error, for a replay and for the 48-point Helios sweep.

use std::path::Path;
use std::process::Command;

use crate::{TempDir, arg, read, trainyard};

/// The Philly excerpt on the built-in 512-GPU cluster under Philly's VC quotas: gangs wait,
/// queues have quotas, so every section of the report has something to show.
fn philly(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "simulate",
        "--trace",
        "data/traces/philly-excerpt.csv",
        "--policy",
        "examples/policies/philly-vcs.yaml",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Attributes or CSS that would make the browser fetch something.
fn external_references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for needle in ["src=\"http", "href=\"http", "src='http", "href='http", "@import", "url(", "<link", "<iframe"] {
        if html.contains(needle) {
            found.push(needle.to_string());
        }
    }
    found
}

fn figures(html: &str) -> usize {
    html.matches("<figure class=\"chart\">").count()
}

#[test]
fn a_replay_report_is_self_contained_repeatable_and_changes_no_decision() {
    let dir = TempDir::create();
    let (html, json) = (arg(&dir.path("r.html")), arg(&dir.path("r.json")));
    trainyard(&philly(&["--html", &html, "--out", &json])).assert_success();
    let page = read(&dir.path("r.html"));
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..80.min(page.len())]);
    for heading in [
        "Summary",
        "GPU utilisation and the queue over time",
        "Queueing delay",
        "Fragmentation",
        "Why gangs waited",
        "Queues against their quotas",
    ] {
        assert!(page.contains(&format!("<h2>{heading}</h2>")), "no section {heading}");
    }
    for title in [
        "GPU utilisation",
        "Gangs waiting and running",
        "Queueing delay by job size",
        "Queueing delay by tenant",
        "Free and fragmented GPUs",
        "Waiting gangs by pending reason",
        "Mean GPUs used per queue",
        "GPUs used over time, largest quotas",
    ] {
        assert!(page.contains(&format!(">\n{title}\n</text>")), "no chart titled {title}");
    }
    assert_eq!(figures(&page), 8);
    assert!(page.contains("data-expected-charts=\"8\""));
    assert!(!page.contains("chart not drawn"));
    assert_eq!(external_references(&page), Vec::<String>::new());

    // The same inputs give the same bytes; the timeline the report needs changes no decision.
    let (again, plain) = (arg(&dir.path("again.html")), arg(&dir.path("plain.json")));
    trainyard(&philly(&["--html", &again])).assert_success();
    assert_eq!(read(&dir.path("again.html")), page);
    trainyard(&philly(&["--out", &plain])).assert_success();
    assert_eq!(read(&dir.path("plain.json")), read(&dir.path("r.json")));
}

#[test]
fn an_unwritable_report_path_is_named() {
    let run = trainyard(&philly(&["--html", "/nonexistent-dir/r.html"]));
    run.assert_error(&["cannot write /nonexistent-dir/r.html"]);
}

/// The Chromium to test with: `$CHROMIUM`, else the first of Debian's and Google's names on
/// PATH.
fn chromium() -> String {
    if let Ok(path) = std::env::var("CHROMIUM") {
        return path;
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {name}")]).output();
        if let Ok(out) = found
            && out.status.success()
        {
            return String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
    }
    panic!("no Chromium: install Debian's `chromium` (scripts/test.sh does) or set CHROMIUM");
}

/// Opens `page` in headless Chromium with the network cut off and returns the DOM as it
/// stood after the page's scripts ran, and Chromium's console log.
fn render(page: &Path) -> (String, String) {
    let profile = TempDir::create();
    let url = format!("file://{}", page.canonicalize().expect("the report exists").display());
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            &format!("--user-data-dir={}", profile.path("profile").display()),
            "--dump-dom",
            &url,
        ])
        .output()
        .expect("cannot run Chromium");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "Chromium failed on {url}: {}\n{log}", out.status);
    (String::from_utf8_lossy(&out.stdout).into_owned(), log)
}

/// The value of `name="..."` on the rendered `<body>`.
fn body_attribute(dom: &str, name: &str) -> Option<String> {
    let body = &dom[dom.find("<body")?..];
    let tag = &body[..body.find('>')?];
    let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
    Some(tag[start..].split('"').next()?.to_string())
}

/// Checks what the page's own script recorded once Chromium had laid it out.
#[track_caller]
fn assert_drawn(page: &Path, expected: usize) {
    let (dom, log) = render(page);
    let attr = |name: &str| body_attribute(&dom, name).unwrap_or_else(|| panic!("no {name} on <body>:\n{dom:.600}"));
    assert_eq!(attr("data-expected-charts"), expected.to_string());
    assert_eq!(attr("data-charts"), expected.to_string(), "charts in the rendered page");
    assert_eq!(attr("data-charts-drawn"), expected.to_string(), "charts Chromium drew with a non-empty box");
    assert_eq!(attr("data-errors"), "", "script errors");
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE") || l.contains("Uncaught")).collect();
    assert!(console.is_empty(), "console messages:\n{}", console.join("\n"));
}

#[test]
#[ignore = "needs Chromium; scripts/test.sh installs it and runs this"]
fn a_replay_report_renders_in_chromium() {
    let dir = TempDir::create();
    let html = arg(&dir.path("r.html"));
    trainyard(&philly(&["--html", &html])).assert_success();
    assert_drawn(&dir.path("r.html"), 8);
    // The built-in default run, with one tenant and no quotas, draws what it has.
    let default = arg(&dir.path("default.html"));
    trainyard(&["simulate", "--quiet", "--html", &default]).assert_success();
    let page = read(&dir.path("default.html"));
    assert_drawn(&dir.path("default.html"), figures(&page));
}

#[test]
#[ignore = "needs Chromium; scripts/test.sh installs it and runs this"]
fn the_48_point_helios_sweep_report_renders_in_chromium() {
    let dir = TempDir::create();
    let (out, html) = (arg(&dir.path("out")), arg(&dir.path("sweep.html")));
    let run = trainyard(&["sweep", "examples/sweeps/helios-sizes.yaml", "--out-dir", &out, "--quiet", "--html", &html]);
    run.assert_success();
    let comparison: serde_json::Value = serde_json::from_str(&read(&dir.path("out/sweep.json"))).unwrap();
    assert_eq!(comparison["points"].as_array().map(Vec::len), Some(48));
    let page = read(&dir.path("sweep.html"));
    assert_eq!(figures(&page), 4);
    assert_eq!(external_references(&page), Vec::<String>::new());
    assert_drawn(&dir.path("sweep.html"), 4);
}
