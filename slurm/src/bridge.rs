//! Submits gangs to Slurm exactly once and follows them: slurmrestd when it is configured, the
//! commands otherwise (and always for switch constraints, which slurmrestd cannot express).
//!
//! Job arrays (a gang with `array`) are submitted and followed as one job of many tasks.
//!
//! Every job carries its gang id in its comment. Before each submission attempt the bridge looks
//! for a job of the gang, so a retry after a lost answer, or a restarted bridge, never submits
//! twice; a transient failure (slurmrestd or slurmctld unreachable) is retried with backoff.

use std::time::Duration;

use trainyard_bridges::slurm::{GangState, SlurmGang, SlurmPlacement, SlurmSpecError};

use crate::cli::CliClient;
use crate::error::SlurmError;
use crate::jobs::{ArrayView, JobInfo, find_array, find_gang};
use crate::nodes::NodeInfo;
use crate::rest::RestClient;

/// How transient failures are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all (at least 1).
    pub attempts: u32,
    /// First wait; it doubles after each failure.
    pub first_wait: Duration,
    /// Longest wait.
    pub max_wait: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { attempts: 8, first_wait: Duration::from_millis(250), max_wait: Duration::from_secs(10) }
    }
}

/// Which client a submission went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// slurmrestd.
    Rest,
    /// sbatch.
    Sbatch,
}

/// What `submit` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The job id.
    pub job_id: u64,
    /// A job of the gang existed already; nothing was submitted.
    pub existing: bool,
    /// The client used (for a new submission).
    pub via: Option<Via>,
}

/// The Slurm side of trainyard.
#[derive(Clone, Debug)]
pub struct Bridge {
    rest: Option<RestClient>,
    cli: CliClient,
    retry: Retry,
}

impl Bridge {
    /// A bridge over slurmrestd (when given) and the commands.
    pub fn new(rest: Option<RestClient>, retry: Retry) -> Bridge {
        Bridge { rest, cli: CliClient, retry }
    }

    /// Whether submissions go through slurmrestd.
    pub fn uses_rest(&self) -> bool {
        self.rest.is_some()
    }

    async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T, SlurmError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SlurmError>>,
    {
        let mut wait = self.retry.first_wait;
        let mut attempt = 1;
        loop {
            match op().await {
                Err(e) if e.is_transient() && attempt < self.retry.attempts.max(1) => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(self.retry.max_wait);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Every job Slurm reports (through slurmrestd when configured), retried while unreachable.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        self.retrying(|| async {
            match &self.rest {
                Some(rest) => rest.jobs().await,
                None => self.cli.jobs().await,
            }
        })
        .await
    }

    /// The latest job of a gang, if Slurm still knows one.
    pub async fn status(&self, gang: &str) -> Result<Option<JobInfo>, SlurmError> {
        Ok(find_gang(&self.jobs().await?, gang).cloned())
    }

    /// Submits the gang unless Slurm already has a job of it (in any state it still reports).
    pub async fn submit(&self, gang: &SlurmGang) -> Result<Submission, SlurmError> {
        // A cancelled job (taken back after a refusal, or by hand) may be submitted again;
        // any other job of the gang, running or ended, means it was submitted already.
        self.submit_unless(gang, |jobs| {
            find_gang(jobs, &gang.gang).filter(|j| j.state != GangState::Cancelled).map(|j| j.id)
        })
        .await
    }

    /// Submits a gang with an `array` unless an array of the gang is still going (a task pending,
    /// running or requeued): a second run of the same sweep follows that array instead of starting
    /// its tasks twice. Once every task has ended, the gang may run again (the indices still to run
    /// are the caller's to choose). The job id returned is the array's.
    pub async fn submit_array(&self, gang: &SlurmGang) -> Result<Submission, SlurmError> {
        if gang.array.is_none() {
            return Err(SlurmError::Spec(SlurmSpecError::Unsupported {
                gang: gang.name.clone(),
                field: "array".into(),
                message: "submit_array needs a gang with an array; use submit".into(),
            }));
        }
        self.submit_unless(gang, |jobs| find_array(jobs, &gang.gang).filter(|a| !a.ended()).map(|a| a.job_id)).await
    }

    /// Submits the gang unless `existing` finds its job among Slurm's jobs, looking again before
    /// every attempt.
    async fn submit_unless(
        &self,
        gang: &SlurmGang,
        existing: impl Fn(&[JobInfo]) -> Option<u64>,
    ) -> Result<Submission, SlurmError> {
        let mut wait = self.retry.first_wait;
        let mut attempt = 1;
        loop {
            if let Some(job_id) = existing(&self.jobs().await?) {
                return Ok(Submission { job_id, existing: true, via: None });
            }
            let switches = matches!(gang.placement, Some(SlurmPlacement::Switches(_)));
            let result = match (&self.rest, switches) {
                (Some(rest), false) => rest.submit(gang).await.map(|id| (id, Via::Rest)),
                _ => self.cli.submit(gang).await.map(|id| (id, Via::Sbatch)),
            };
            match result {
                Ok((job_id, via)) => return Ok(Submission { job_id, existing: false, via: Some(via) }),
                // The answer may have been lost after Slurm took the job: look again before retrying.
                Err(e) if e.is_transient() && attempt < self.retry.attempts.max(1) => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(self.retry.max_wait);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The newest job array of a gang, if Slurm still reports any of its tasks.
    pub async fn array(&self, gang: &str) -> Result<Option<ArrayView>, SlurmError> {
        Ok(find_array(&self.jobs().await?, gang))
    }

    /// Cancels every task of the gang's newest array that has not ended (through the array's job
    /// id); `false` when there is none.
    pub async fn cancel_array(&self, gang: &str) -> Result<bool, SlurmError> {
        let Some(array) = self.array(gang).await?.filter(|a| !a.ended()) else { return Ok(false) };
        self.retrying(|| async {
            match &self.rest {
                Some(rest) => rest.cancel(array.job_id).await,
                None => self.cli.cancel(array.job_id).await,
            }
        })
        .await?;
        Ok(true)
    }

    /// Cancels the gang's job; `false` when Slurm has none (or it already ended).
    pub async fn cancel(&self, gang: &str) -> Result<bool, SlurmError> {
        let Some(job) = self.status(gang).await? else { return Ok(false) };
        if job.state.is_terminal() {
            return Ok(false);
        }
        self.retrying(|| async {
            match &self.rest {
                Some(rest) => rest.cancel(job.id).await,
                None => self.cli.cancel(job.id).await,
            }
        })
        .await?;
        Ok(true)
    }

    /// Polls the gang every `poll` until its job ends or `timeout` passes; returns the last view.
    /// A job that can never start as submitted (sbatch accepts one that asks for more nodes than
    /// its partition has, where slurmrestd refuses it at once) is cancelled and reported as
    /// refused, with Slurm's pending reason.
    pub async fn wait(&self, gang: &str, poll: Duration, timeout: Duration) -> Result<Option<JobInfo>, SlurmError> {
        let start = tokio::time::Instant::now();
        loop {
            let job = self.status(gang).await?;
            let partition_nodes = match &job {
                Some(j) if j.state == GangState::Pending && !j.reason.is_empty() => {
                    let nodes = self.nodes().await?;
                    Some(
                        nodes
                            .iter()
                            .filter(|n| {
                                j.partition.is_empty() || n.partitions.contains(&j.partition.to_ascii_lowercase())
                            })
                            .count() as u64,
                    )
                }
                _ => None,
            };
            if let Some(j) = job.as_ref().filter(|j| j.never_starts(partition_nodes)) {
                let _ = self.cancel(gang).await;
                return Err(SlurmError::Refused {
                    what: format!("job {}", j.id),
                    messages: vec![format!("it can never start as submitted: {}", j.reason)],
                });
            }
            if job.as_ref().is_some_and(|j| j.state.is_terminal()) || start.elapsed() >= timeout {
                return Ok(job);
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// The cluster's nodes.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        self.retrying(|| async {
            match &self.rest {
                Some(rest) => rest.nodes().await,
                None => self.cli.nodes().await,
            }
        })
        .await
    }

    /// The switch tree as `topology.conf` lines (from `scontrol show topology`); empty without one.
    pub async fn topology(&self) -> Result<String, SlurmError> {
        self.retrying(|| self.cli.topology()).await
    }
}
