//! End-to-end tests of the `trainyard` binary: simulate, place, compare, trace synth, bad input and help.
//!
//! Every test runs the built binary as a child process from the package root, so
//! relative paths such as `examples/...` and `data/...` resolve, and writes its own
//! files under a fresh temporary directory that is removed when the test ends.

mod bad_input;
mod bad_input_cases;
mod compare;
mod controller;
mod crds;
mod devices;
mod failures;
mod flags_fuzz;
mod help;
mod html_report;
mod import;
mod json;
mod output_formats;
mod place;
mod simulate;
mod structure;
mod sweep;
mod synth;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The header of trainyard's own CSV trace format.
pub const CSV_HEADER: &str = "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology";

/// What one run of the binary produced.
#[derive(Debug)]
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output, as text.
    pub stdout: String,
    /// Standard error, as text.
    pub stderr: String,
    /// The arguments, for failure messages.
    pub args: Vec<String>,
}

impl Run {
    /// Panics with the whole run unless it exited 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "trainyard {:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
            self.args,
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Panics unless stdout contains every needle.
    #[track_caller]
    pub fn assert_stdout_has(&self, needles: &[&str]) -> &Self {
        for needle in needles {
            assert!(
                self.stdout.contains(needle),
                "trainyard {:?}: stdout lacks {needle:?}:\n{}",
                self.args,
                self.stdout
            );
        }
        self
    }

    /// Checks a failed run: non-zero exit, nothing on stdout, one `error:` line first on
    /// stderr containing every needle, and no panic. Returns stderr.
    #[track_caller]
    pub fn assert_error(&self, needles: &[&str]) -> &str {
        assert!(!self.status.success(), "trainyard {:?} should fail; stdout:\n{}", self.args, self.stdout);
        assert_eq!(self.status.code(), Some(1), "trainyard {:?}: exit status; stderr:\n{}", self.args, self.stderr);
        assert!(self.stdout.is_empty(), "trainyard {:?}: stdout should be empty, got:\n{}", self.args, self.stdout);
        assert!(
            self.stderr.starts_with("error: "),
            "trainyard {:?}: stderr should start with `error: `:\n{}",
            self.args,
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "trainyard {:?} panicked:\n{}", self.args, self.stderr);
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "trainyard {:?}: stderr lacks {needle:?}:\n{}",
                self.args,
                self.stderr
            );
        }
        &self.stderr
    }
}

/// Runs `trainyard` with these arguments from the package root, stdin closed.
pub fn trainyard<S: AsRef<str>>(args: &[S]) -> Run {
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
    let output = command(&args).stdin(Stdio::null()).output().expect("cannot run the trainyard binary");
    Run {
        status: output.status,
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        args,
    }
}

/// A `Command` for the binary, run from the package root.
pub fn command(args: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_trainyard"));
    cmd.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    cmd
}

/// A directory under the system temp dir, unique per process and test, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh, empty directory.
    pub fn create() -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("trainyard-it-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("cannot create a temp dir");
        TempDir { path }
    }

    /// Path of `name` inside the directory (not created).
    pub fn path(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `contents` to `name` and returns the path as a string for the command line.
    pub fn write(&self, name: &str, contents: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("cannot write a test input");
        arg(&path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A path as a command-line argument (temp paths are always UTF-8 here).
pub fn arg(path: &Path) -> String {
    path.to_str().expect("temp path is UTF-8").to_string()
}

/// Reads a file the binary wrote.
#[track_caller]
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}
