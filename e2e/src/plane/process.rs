//! One child process of the suite (a control-plane component or a trainyard replica): started
//! with its output in a log file, stopped with SIGTERM or SIGKILL, started again with the same
//! arguments, and never left behind (killed when dropped, its pid recorded for the wrapper
//! script's last-resort cleanup).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

/// A named child process and how to start it again.
pub struct Process {
    /// Short name, used in messages and the log file's name.
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Its standard output and error.
    pub log: PathBuf,
    pids: PathBuf,
    child: Option<Child>,
}

impl Process {
    /// Starts `program` with `args`; output goes to `<logs>/<name>.log` (appended across restarts).
    pub fn start(
        name: &str,
        program: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        logs: &Path,
    ) -> Result<Process> {
        let mut p = Process {
            name: name.to_string(),
            program: program.to_path_buf(),
            args,
            env,
            log: logs.join(format!("{name}.log")),
            pids: logs.join("pids"),
            child: None,
        };
        p.spawn()?;
        Ok(p)
    }

    fn spawn(&mut self) -> Result<()> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).stdin(Stdio::null()).stdout(out).stderr(err).kill_on_drop(true);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {} ({})", self.name, self.program.display()))?;
        if let Some(pid) = child.id() {
            let mut f = OpenOptions::new().create(true).append(true).open(&self.pids)?;
            writeln!(f, "{pid}")?;
        }
        self.child = Some(child);
        Ok(())
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Whether it has exited (and then with what), without waiting.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// Fails with the last lines of its log if it has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.exited() {
            bail!("{} exited ({status}): {}", self.name, last_line(&self.log));
        }
        Ok(())
    }

    /// SIGKILL, and reaps it.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.ok();
        }
    }

    /// SIGTERM; waits up to `grace` for it to exit, then kills it.
    pub async fn terminate(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        if let Some(pid) = child.id() {
            signal(pid, "TERM").await;
            if tokio::time::timeout(grace, child.wait()).await.is_ok() {
                return;
            }
        }
        child.kill().await.ok();
    }

    /// SIGSTOP or SIGCONT: freezes or thaws it without ending its connections.
    pub async fn pause(&self, paused: bool) {
        if let Some(pid) = self.pid() {
            signal(pid, if paused { "STOP" } else { "CONT" }).await;
        }
    }

    /// Starts it again with the same arguments (after a kill or a terminate).
    pub fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("{} is still running", self.name);
        }
        let mut log = OpenOptions::new().append(true).open(&self.log)?;
        writeln!(log, "---- restarted by the e2e suite ----")?;
        self.spawn()
    }
}

/// Sends a signal with kill(1): the workspace forbids `unsafe`, so no libc call.
async fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().await;
}

/// The last non-empty line of a log, for one-line failure messages.
pub fn last_line(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)").chars().take(400).collect()
}

/// Whether a TCP port on 127.0.0.1 can be bound now.
pub fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port the system says is free now (bound and released at once).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).context("no free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// Makes an empty log folder.
pub fn log_dir(dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    File::create(dir.join("pids"))?;
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_is_stopped_and_started_again() {
        let dir = std::env::temp_dir().join(format!("trainyard-e2e-proc-{}", std::process::id()));
        let logs = log_dir(&dir).unwrap();
        let mut p = Process::start("sleeper", Path::new("sleep"), vec!["30".into()], vec![], &logs).unwrap();
        assert!(p.exited().is_none());
        p.kill().await;
        p.restart().unwrap();
        assert!(p.pid().is_some());
        p.terminate(Duration::from_secs(5)).await;
        assert!(p.pid().is_none());
        let pids = fs::read_to_string(logs.join("pids")).unwrap();
        assert_eq!(pids.lines().count(), 2, "both starts are recorded");
        fs::remove_dir_all(dir).ok();
    }

    #[tokio::test]
    async fn an_exited_process_is_reported_with_its_last_line() {
        let dir = std::env::temp_dir().join(format!("trainyard-e2e-exit-{}", std::process::id()));
        let logs = log_dir(&dir).unwrap();
        let args = vec!["-c".into(), "echo first; echo 'bind: address already in use' >&2; exit 3".into()];
        let mut p = Process::start("failing", Path::new("sh"), args, vec![], &logs).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let err = p.check_alive().unwrap_err().to_string();
        assert!(err.contains("address already in use"), "{err}");
        fs::remove_dir_all(dir).ok();
    }
}
