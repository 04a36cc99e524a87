//! The Slurm commands (`sbatch`, `squeue`, `scancel`, `sinfo`, `scontrol`) as a client: the
//! fallback where slurmrestd is not running, and the only way to ask for a switch constraint.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use trainyard_bridges::slurm::{SlurmGang, render_sbatch};

use crate::error::SlurmError;
use crate::jobs::{JobInfo, parse_jobs};
use crate::nodes::{NodeInfo, parse_nodes};

/// Runs the Slurm commands found on `PATH`.
#[derive(Clone, Debug, Default)]
pub struct CliClient;

/// Messages of a command that failed because slurmctld could not be reached.
fn unreachable_message(stderr: &str) -> bool {
    ["Unable to contact slurm controller", "Connection refused", "Socket timed out", "Zero Bytes were transmitted"]
        .iter()
        .any(|m| stderr.contains(m))
}

impl CliClient {
    async fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, SlurmError> {
        let what = format!("{program} {}", args.join(" "));
        let mut child = Command::new(program)
            .args(args)
            .env_remove("SLURM_JWT")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SlurmError::Unreachable(format!("{what}: {e}")))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).await.map_err(|e| SlurmError::Unreachable(format!("{what}: {e}")))?;
        }
        let out = child.wait_with_output().await.map_err(|e| SlurmError::Unreachable(format!("{what}: {e}")))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !out.status.success() {
            if unreachable_message(&stderr) {
                return Err(SlurmError::Unreachable(format!("{what}: {stderr}")));
            }
            let messages = stderr.lines().map(|l| l.trim_start_matches(&format!("{program}: ")).to_string()).collect();
            return Err(SlurmError::Refused { what, messages });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn json(&self, program: &str, args: &[&str]) -> Result<serde_json::Value, SlurmError> {
        let text = self.run(program, args, None).await?;
        serde_json::from_str(&text).map_err(|e| SlurmError::BadAnswer { what: program.into(), message: e.to_string() })
    }

    /// `sbatch --parsable` with the rendered script on standard input.
    pub async fn submit(&self, gang: &SlurmGang) -> Result<u64, SlurmError> {
        let out = self.run("sbatch", &["--parsable"], Some(&render_sbatch(gang))).await?;
        let id = out.trim().split(';').next().unwrap_or_default();
        id.parse().map_err(|_| SlurmError::BadAnswer { what: "sbatch".into(), message: format!("job id {out:?}") })
    }

    /// `squeue --json` of every job, in every state Slurm still reports.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        parse_jobs(&self.json("squeue", &["--all", "--states=all", "--json"]).await?)
    }

    /// `scancel`.
    pub async fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        match self.run("scancel", &[&id.to_string()], None).await {
            Ok(_) => Ok(()),
            Err(SlurmError::Refused { messages, .. }) if messages.iter().any(|m| m.contains("Invalid job id")) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// `sinfo --json` nodes.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        let body = self.json("sinfo", &["--json"]).await?;
        parse_nodes(&body)
    }

    /// `scontrol show topology`: the switch tree as `SwitchName=... Switches=/Nodes=...` lines.
    pub async fn topology(&self) -> Result<String, SlurmError> {
        let text = self.run("scontrol", &["show", "topology"], None).await?;
        Ok(switch_lines(&text))
    }
}

/// Keeps the keys `topology.conf` has from `scontrol show topology` lines, so the same reader takes
/// both: it adds `Level=` and `LinkSpeed=`, and lists the nodes below an upper switch as well as its
/// child switches, where topology.conf names only the switches.
pub fn switch_lines(text: &str) -> String {
    text.lines()
        .filter(|l| l.trim_start().starts_with("SwitchName="))
        .map(|l| {
            let upper = l.split_whitespace().any(|kv| kv.starts_with("Switches="));
            let keep: &[&str] = if upper { &["SwitchName=", "Switches="] } else { &["SwitchName=", "Nodes="] };
            l.split_whitespace().filter(|kv| keep.iter().any(|k| kv.starts_with(k))).collect::<Vec<_>>().join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_topology_becomes_topology_conf() {
        let text = "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[1-2]\nSwitchName=top Level=1 LinkSpeed=1 Nodes=n[1-2] Switches=s[1-2]\n";
        assert_eq!(switch_lines(text), "SwitchName=s1 Nodes=n[1-2]\nSwitchName=top Switches=s[1-2]");
    }
}
