//! Runs a target on generated inputs within a budget: every input must end in a verdict, not a
//! panic, within its time; every refusal must name the file, a line or a field. Failures are
//! kept as regression inputs (`fuzz/regressions/<target>/<digest>.in`), which every run of the
//! tests reads again.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trainyard_topology::rng::fnv1a;

use crate::mutate::Mutator;
use crate::targets::{Target, Verdict};

/// How much one target runs.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Inputs at most.
    pub inputs: u64,
    /// Wall-clock time at most.
    pub time: Duration,
    /// What one input may take before it counts as a failure.
    pub per_input: Duration,
}

/// Why an input failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The reader panicked.
    Panic,
    /// An invariant failed (a row lost, a document read as nothing).
    Broken,
    /// The input took longer than its budget.
    Slow,
    /// The refusal named neither the file, a line nor a field.
    Vague,
}

/// One failing input.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What failed.
    pub kind: FailureKind,
    /// The panic message, the broken invariant, the time taken or the vague message.
    pub detail: String,
    /// The input.
    pub input: Vec<u8>,
}

/// What a target's run found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The target's name.
    pub target: &'static str,
    /// Inputs tried.
    pub inputs: u64,
    /// Inputs read.
    pub accepted: u64,
    /// Inputs refused with a message.
    pub refused: u64,
    /// Failures (the first few kept in full).
    pub failures: Vec<Failure>,
    /// Failures in all.
    pub failed: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// The slowest input.
    pub slowest: Duration,
}

/// Failures of one run kept in full (and saved), per target.
const KEPT_FAILURES: usize = 8;

/// Largest input tried, bytes.
const MAX_INPUT: usize = 256 * 1024;

thread_local! {
    /// The message of the last panic on this thread, taken by the driver.
    static PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Routes panic messages to the driver instead of stderr (once per process).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let message = format!("{info}");
            PANIC.with(|p| *p.borrow_mut() = Some(message));
        }));
    });
}

/// Whether a refusal names the file (`source`), a line or a field (said as such, or as an API
/// object's field path: `spec.` or `metadata.`).
pub fn names_where(message: &str, source: &str) -> bool {
    ["line ", "line:", "field", "spec.", "metadata."].iter().any(|w| message.contains(w)) || message.contains(source)
}

/// The input running now, for the watchdog.
type Current = Arc<Mutex<Option<(Instant, &'static str, Vec<u8>)>>>;

/// A thread that ends the process, keeping the input, when one input runs past `hang`: a
/// reader that never returns cannot be caught any other way.
fn watchdog(current: Current, hang: Duration, keep: Option<PathBuf>) -> Arc<std::sync::atomic::AtomicBool> {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = Arc::clone(&done);
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let guard = current.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((started, target, input)) = guard.as_ref()
                && started.elapsed() > hang
            {
                let kept = keep.as_deref().and_then(|dir| save(dir, target, input).ok());
                eprintln!(
                    "fuzz: target {target}: an input ran {:.0?} without end; kept as {}",
                    started.elapsed(),
                    kept.map_or_else(|| "nothing (no --save folder)".to_string(), |p| p.display().to_string())
                );
                std::process::abort();
            }
        }
    });
    done
}

/// Runs `target` on inputs drawn from `seed` within `budget`; failures are saved under `keep`.
pub fn run(target: &Target, seed: u64, budget: &Budget, keep: Option<&Path>) -> Report {
    quiet_panics();
    let seeds = (target.seeds)();
    let mut m = Mutator::new(seed ^ fnv1a(target.name.as_bytes()));
    let current: Current = Arc::new(Mutex::new(None));
    let done =
        watchdog(Arc::clone(&current), budget.per_input.max(Duration::from_secs(1)) * 20, keep.map(Path::to_path_buf));
    let mut report = Report { target: target.name, ..Report::default() };
    let started = Instant::now();
    while report.inputs < budget.inputs && started.elapsed() < budget.time {
        let input = next_input(target, &seeds, &mut m, report.inputs);
        *current.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), target.name, input.clone()));
        let t = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (target.run)(&input)));
        let took = t.elapsed();
        *current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        report.inputs += 1;
        report.slowest = report.slowest.max(took);
        let failure = match outcome {
            Err(_) => Some((FailureKind::Panic, PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default())),
            Ok(_) if took > budget.per_input => Some((FailureKind::Slow, format!("took {took:.1?}"))),
            Ok(Verdict::Accepted) => {
                report.accepted += 1;
                None
            }
            Ok(Verdict::Refused(message)) => {
                report.refused += 1;
                (!names_where(&message, target.source)).then_some((FailureKind::Vague, message))
            }
            Ok(Verdict::Broken(why)) => Some((FailureKind::Broken, why)),
        };
        if let Some((kind, detail)) = failure {
            report.failed += 1;
            // The first failures are kept, in full and as regression inputs: one bug may fail
            // thousands of inputs, and a handful of them is its test.
            if report.failures.len() < KEPT_FAILURES {
                if let Some(dir) = keep {
                    let _ = save(dir, target.name, &input);
                }
                report.failures.push(Failure { kind, detail, input });
            }
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    report.elapsed = started.elapsed();
    report
}

/// The `n`-th input: each seed as it is first, then generated (when the target has a
/// generator) or mutated seeds.
fn next_input(target: &Target, seeds: &[(&str, Vec<u8>)], m: &mut Mutator, n: u64) -> Vec<u8> {
    if (n as usize) < seeds.len() {
        return seeds[n as usize].1.clone();
    }
    if let Some(generate) = target.generate
        && m.chance(30)
    {
        let built = generate(m);
        return if m.chance(50) { built } else { m.mutate(&built, &built, MAX_INPUT) };
    }
    let (seed, other) = (m.below(seeds.len()), m.below(seeds.len()));
    m.mutate(&seeds[seed].1, &seeds[other].1, MAX_INPUT)
}

/// Keeps a failing input as `<dir>/<target>/<digest>.in`; returns its path.
pub fn save(dir: &Path, target: &str, input: &[u8]) -> std::io::Result<PathBuf> {
    let folder = dir.join(target);
    std::fs::create_dir_all(&folder)?;
    let path = folder.join(format!("{:016x}.in", fnv1a(input)));
    if !path.exists() {
        std::fs::write(&path, input)?;
    }
    Ok(path)
}

/// Every kept input of `dir`, by target: `(target, file, input)`.
pub fn regressions(dir: &Path) -> Vec<(String, PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(targets) = std::fs::read_dir(dir) else { return out };
    let mut folders: Vec<PathBuf> = targets.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
    folders.sort();
    for folder in folders {
        let target = folder.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "in"))
            .collect();
        files.sort();
        for file in files {
            if let Ok(input) = std::fs::read(&file) {
                out.push((target.clone(), file, input));
            }
        }
    }
    out
}

/// Reads one kept input again: `None` when it now ends well (read, or refused naming where).
pub fn replay(target: &Target, input: &[u8], per_input: Duration) -> Option<Failure> {
    quiet_panics();
    let t = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (target.run)(input)));
    let took = t.elapsed();
    let (kind, detail) = match outcome {
        Err(_) => (FailureKind::Panic, PANIC.with(|p| p.borrow_mut().take()).unwrap_or_default()),
        Ok(_) if took > per_input => (FailureKind::Slow, format!("took {took:.1?}")),
        Ok(Verdict::Refused(message)) if !names_where(&message, target.source) => (FailureKind::Vague, message),
        Ok(Verdict::Broken(why)) => (FailureKind::Broken, why),
        Ok(_) => return None,
    };
    Some(Failure { kind, detail, input: input.to_vec() })
}

/// The process's peak resident memory so far, MiB (Linux; `None` elsewhere).
pub fn peak_memory_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}
