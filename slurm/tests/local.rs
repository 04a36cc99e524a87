//! Against a real local Slurm (slurmctld, four slurmd with fake GPUs, slurmrestd with JWT), started
//! by `scripts/slurm/with-slurm.sh`; `scripts/test.sh` runs these with `--include-ignored`.

#![cfg(feature = "client")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use trainyard_bridges::slurm::{GangState, SlurmGang, SlurmPlacement, SwitchPlacement, parse_gang};
use trainyard_slurm::SlurmError;
use trainyard_slurm::bridge::{Bridge, Retry, Via};
use trainyard_slurm::rest::{RestClient, RestConfig};

const NEEDS: &str = "needs a local Slurm: run through scripts/slurm/with-slurm.sh (scripts/test.sh does)";

fn state_dir() -> PathBuf {
    PathBuf::from(std::env::var("TRAINYARD_SLURM_STATE").expect(NEEDS))
}

fn jobs_dir(test: &str) -> PathBuf {
    let dir = state_dir().join("jobs").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn bridge(rest: bool) -> Bridge {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = if rest {
        let config = RestConfig::from_env().expect("token").expect(NEEDS);
        Some(RestClient::connect(config).await.expect("slurmrestd answers"))
    } else {
        None
    };
    Bridge::new(client, Retry::default())
}

fn gang(test: &str, nodes: u32, command: &[&str]) -> SlurmGang {
    let dir = jobs_dir(test);
    let yaml = format!(
        "name: {test}\ngang: tests/{test}-{}\nnodes: {nodes}\ngpusPerNode: 1\ncommand: {}\nworkdir: {}\n",
        std::process::id(),
        serde_json::to_string(command).unwrap(),
        dir.display()
    );
    parse_gang(&yaml, test).unwrap()
}

fn output(gang: &SlurmGang, job_id: u64) -> String {
    let path = gang.output_path().replace("%x", &gang.name).replace("%j", &job_id.to_string());
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn until(bridge: &Bridge, gang: &str, wanted: GangState) -> trainyard_slurm::JobInfo {
    until_within(bridge, gang, wanted, Duration::from_secs(20)).await
}

/// Waits until `gang`'s job is in state `wanted`; if it is not within `limit`, fails with what
/// Slurm says of it and of the cluster, so that a slow or busy machine can be told from a bug.
async fn until_within(bridge: &Bridge, gang: &str, wanted: GangState, limit: Duration) -> trainyard_slurm::JobInfo {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let job = bridge.status(gang).await.unwrap().expect("Slurm knows the job");
        if job.state == wanted {
            return job;
        }
        assert!(!job.state.is_terminal(), "{gang} ended {:?} while waiting for {wanted:?}", job.state);
        if tokio::time::Instant::now() >= deadline {
            let jobs: Vec<String> = bridge
                .jobs()
                .await
                .unwrap_or_default()
                .iter()
                .map(|j| format!("{} {} {} ({}) on {:?}", j.id, j.name, j.slurm_state, j.reason, j.nodes))
                .collect();
            let nodes = std::process::Command::new("sinfo")
                .args(["-h", "-N", "-o", "%N %T %E"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_else(|e| format!("sinfo: {e}"));
            panic!(
                "{gang} never reached {wanted:?} in {limit:?}: it is {} ({})\njobs:\n{}\nnodes:\n{nodes}",
                job.slurm_state,
                job.reason,
                jobs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const RANKS: &[&str] =
    &["bash", "-c", "echo rank=$NODE_RANK master=$MASTER_ADDR host=$SLURMD_NODENAME world=$WORLD_SIZE"];

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_two_node_gang_runs_with_node_rank_and_master_address_on_each_node() {
    for rest in [true, false] {
        let b = bridge(rest).await;
        let g = gang(if rest { "ranks-rest" } else { "ranks-sbatch" }, 2, RANKS);
        let s = b.submit(&g).await.unwrap();
        assert_eq!(s.via, Some(if rest { Via::Rest } else { Via::Sbatch }));
        let job = b.wait(&g.gang, Duration::from_millis(200), Duration::from_secs(30)).await.unwrap().unwrap();
        assert_eq!(job.state, GangState::Completed, "{job:?}");
        let mut lines: Vec<String> = output(&g, s.job_id).lines().map(str::to_string).collect();
        lines.sort();
        let master = lines[0].split("master=").nth(1).unwrap().split(' ').next().unwrap().to_string();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], format!("rank=0 master={master} host={master} world=2"));
        assert!(
            lines[1].starts_with(&format!("rank=1 master={master} host="))
                && !lines[1].contains(&format!("host={master} "))
        );
    }
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn hostile_arguments_reach_the_program_unchanged_through_rest_and_sbatch() {
    let hostile =
        ["it's", "\"double\"", "$(touch /tmp/trainyard-pwned)", "`id`", "line1\nline2", "*", "--flag", "$HOME", "a b"];
    let mut command =
        vec!["bash", "-c", r#"for a in "$@"; do printf '%s' "$a" | od -An -tx1 | tr -d ' \n'; echo; done"#, "_"];
    command.extend(hostile);
    for rest in [true, false] {
        let b = bridge(rest).await;
        let g = gang(if rest { "hostile-rest" } else { "hostile-sbatch" }, 1, &command);
        let s = b.submit(&g).await.unwrap();
        let job = b.wait(&g.gang, Duration::from_millis(200), Duration::from_secs(30)).await.unwrap().unwrap();
        assert_eq!(job.state, GangState::Completed, "{job:?}");
        let got: Vec<String> = output(&g, s.job_id).lines().map(str::to_string).collect();
        let want: Vec<String> =
            hostile.iter().map(|a| a.bytes().map(|b| format!("{b:02x}")).collect::<String>()).collect();
        assert_eq!(got, want, "via {}", if rest { "REST" } else { "sbatch" });
    }
    assert!(!std::path::Path::new("/tmp/trainyard-pwned").exists(), "an argument was executed");
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_switch_constraint_lands_inside_one_switch() {
    let b = bridge(true).await;
    // Take both GPUs of n1, so that a 2-node GPU job fits in one switch only as s2 = {n3, n4}.
    let mut blocker = gang("blocker", 1, &["sleep", "60"]);
    blocker.gpus_per_node = 2;
    blocker.placement = Some(SlurmPlacement::Nodelist(vec!["n1".into()]));
    b.submit(&blocker).await.unwrap();
    // n1 may still be finishing an earlier test's job (killed at its limit, say): give it time.
    until_within(&b, &blocker.gang, GangState::Running, Duration::from_secs(120)).await;
    let mut g = gang("switches", 2, &["sleep", "2"]);
    // Long enough that a busy n3 or n4 is waited for rather than the job spread over switches.
    g.placement = Some(SlurmPlacement::Switches(SwitchPlacement { count: 1, wait_minutes: Some(5) }));
    let s = b.submit(&g).await.unwrap();
    assert_eq!(s.via, Some(Via::Sbatch), "slurmrestd cannot express switches");
    let job = until_within(&b, &g.gang, GangState::Running, Duration::from_secs(120)).await;
    assert_eq!(job.nodes, "n[3-4]");
    assert!(b.cancel(&blocker.gang).await.unwrap());
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn cancel_stops_a_running_gang() {
    for rest in [true, false] {
        let b = bridge(rest).await;
        let g = gang(if rest { "cancel-rest" } else { "cancel-sbatch" }, 2, &["sleep", "120"]);
        b.submit(&g).await.unwrap();
        until(&b, &g.gang, GangState::Running).await;
        assert!(b.cancel(&g.gang).await.unwrap());
        until(&b, &g.gang, GangState::Cancelled).await;
        assert!(!b.cancel(&g.gang).await.unwrap(), "nothing left to cancel");
    }
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_job_killed_at_its_time_limit_is_reported_as_timeout() {
    let b = bridge(true).await;
    let mut g = gang("timeout", 1, &["sleep", "600"]);
    g.time_limit_minutes = Some(1);
    b.submit(&g).await.unwrap();
    let job = b.wait(&g.gang, Duration::from_secs(1), Duration::from_secs(150)).await.unwrap().unwrap();
    assert_eq!(job.state, GangState::Timeout, "{job:?}");
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_slurmctld_restart_mid_run_loses_no_job() {
    let b = bridge(true).await;
    let running = gang("restart-running", 1, &["sleep", "6"]);
    let mut held = gang("restart-pending", 4, &["true"]);
    held.nodes = 9; // more nodes than exist: it stays pending
    b.submit(&running).await.unwrap();
    until(&b, &running.gang, GangState::Running).await;
    let before = b.jobs().await.unwrap().len();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm/restart-ctld.sh");
    let status = std::process::Command::new("bash").arg(script).arg(state_dir()).status().unwrap();
    assert!(status.success());
    assert!(b.jobs().await.unwrap().len() >= before, "jobs lost in the restart");
    let job = b.wait(&running.gang, Duration::from_millis(500), Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!(job.state, GangState::Completed, "{job:?}");
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_restarted_bridge_finds_its_job_instead_of_submitting_again() {
    let g = gang("idempotent", 1, &["sleep", "3"]);
    let first = bridge(true).await.submit(&g).await.unwrap();
    assert!(!first.existing);
    for rest in [true, false] {
        let again = bridge(rest).await.submit(&g).await.unwrap();
        assert_eq!((again.existing, again.job_id), (true, first.job_id));
    }
    let jobs = bridge(true).await.jobs().await.unwrap();
    assert_eq!(jobs.iter().filter(|j| j.gang.as_deref() == Some(g.gang.as_str())).count(), 1);
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_gang_slurm_rejects_fails_with_slurms_own_message() {
    for rest in [true, false] {
        let b = bridge(rest).await;
        let mut g = gang(if rest { "reject-rest" } else { "reject-sbatch" }, 1, &["true"]);
        g.partition = Some("no-such-partition".into());
        let err = b.submit(&g).await.unwrap_err();
        let SlurmError::Refused { messages, .. } = &err else { panic!("{err:?}") };
        assert!(messages.iter().any(|m| m.contains("Invalid partition name")), "{messages:?}");
        let mut big = gang(if rest { "toobig-rest" } else { "toobig-sbatch" }, 9, &["true"]);
        big.env = BTreeMap::new();
        // slurmrestd refuses it at once; sbatch takes it, and following it reports the refusal.
        let err = match b.submit(&big).await {
            Err(e) => e,
            Ok(_) => b.wait(&big.gang, Duration::from_millis(200), Duration::from_secs(20)).await.unwrap_err(),
        };
        let SlurmError::Refused { messages, .. } = &err else { panic!("{err:?}") };
        assert!(messages.iter().any(|m| m.to_lowercase().contains("partition")), "{messages:?}");
        assert!(
            b.status(&big.gang).await.unwrap().is_none_or(|j| j.state.is_terminal()),
            "a refused job is not left pending"
        );
    }
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn an_unreachable_slurmrestd_is_a_transient_error() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config =
        RestConfig { url: "http://127.0.0.1:9".into(), user: "root".into(), token: "x".into(), token_file: None };
    let err = RestClient::connect(config).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_submission_during_a_slurmrestd_outage_waits_for_it_and_submits_once() {
    let b = bridge(true).await;
    let state = state_dir();
    let pid = std::fs::read_to_string(state.join("run/slurmrestd.pid")).unwrap().trim().to_string();
    assert!(std::process::Command::new("kill").arg(&pid).status().unwrap().success());
    // Bring slurmrestd back a little later: start.sh starts only the daemons that are not running.
    let start = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm/start.sh");
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        std::process::Command::new("bash").arg(start).arg(state).stdout(std::process::Stdio::null()).status()
    });
    let g = gang("outage", 1, &["true"]);
    let s = b.submit(&g).await.expect("retried until slurmrestd came back");
    assert!(restarter.join().unwrap().unwrap().success());
    assert!(!s.existing);
    let jobs = b.jobs().await.unwrap();
    assert_eq!(jobs.iter().filter(|j| j.gang.as_deref() == Some(g.gang.as_str())).count(), 1, "submitted once");
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_token_slurmrestd_does_not_accept_is_unauthorized_not_a_refusal() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = RestConfig::from_env().expect("token").expect(NEEDS);
    config.token = "not-a-jwt".into();
    let err = match RestClient::connect(config).await {
        Err(e) => e,
        Ok(client) => client.jobs().await.unwrap_err(),
    };
    // 22.05 answers with an opaque error on the operation; newer versions with HTTP 401.
    assert!(matches!(err, SlurmError::Unauthorized { .. } | SlurmError::Refused { .. }), "{err:?}");
    assert!(!err.is_transient(), "a bad token fails at once instead of retrying");
    assert!(!err.refuses_submission(), "a job listing refused for the token does not end a gang: {err:?}");
}

/// Polls the gang's newest array until every task it reports has ended.
async fn array_ended(b: &Bridge, gang: &str) -> trainyard_slurm::ArrayView {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let view = b.array(gang).await.unwrap().expect("Slurm knows the array");
        if view.ended() {
            return view;
        }
        assert!(tokio::time::Instant::now() < deadline, "the array never ended: {view:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn an_array_runs_each_index_once_is_followed_while_going_and_runs_again_once_ended() {
    for rest in [true, false] {
        let b = bridge(rest).await;
        let name = if rest { "array-rest" } else { "array-sbatch" };
        let cmd = ["bash", "-c", "sleep 1; echo task=$SLURM_ARRAY_TASK_ID; [ \"$SLURM_ARRAY_TASK_ID\" != 5 ]"];
        let mut g = gang(name, 1, &cmd);
        g.gpus_per_node = 0;
        g.array = Some(vec![0, 2, 3, 5]);
        let first = b.submit_array(&g).await.unwrap();
        assert!(!first.existing);
        let again = b.submit_array(&g).await.unwrap();
        assert_eq!((again.existing, again.job_id), (true, first.job_id), "a going array is followed");
        let view = array_ended(&b, &g.gang).await;
        assert_eq!(view.job_id, first.job_id);
        let states: Vec<(u32, GangState)> = view.tasks().map(|(i, j)| (i, j.state)).collect();
        let want =
            [(0, GangState::Completed), (2, GangState::Completed), (3, GangState::Completed), (5, GangState::Failed)];
        assert_eq!(states, want, "via {}", if rest { "REST" } else { "sbatch" });
        for index in [0, 2, 3] {
            let path = g.output_path().replace("%A", &first.job_id.to_string()).replace("%a", &index.to_string());
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(text.trim(), format!("task={index}"));
        }
        // Ended: the same gang runs again, as a new array, only for the index asked for now.
        g.array = Some(vec![5]);
        let retry = b.submit_array(&g).await.unwrap();
        assert!(!retry.existing && retry.job_id > first.job_id);
        let view = array_ended(&b, &g.gang).await;
        assert_eq!(view.tasks().map(|(i, _)| i).collect::<Vec<_>>(), vec![5]);
        assert!(!b.cancel_array(&g.gang).await.unwrap(), "nothing left to cancel");
    }
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn cancel_array_stops_running_and_pending_tasks() {
    let b = bridge(true).await;
    let mut g = gang("array-cancel", 1, &["sleep", "120"]);
    g.gpus_per_node = 0;
    // More tasks than the cluster's 16 CPUs hold at once with 4 CPUs each: some stay pending.
    g.cpus_per_task = Some(4);
    g.array = Some((0..6).collect());
    let s = b.submit_array(&g).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !b.array(&g.gang).await.unwrap().unwrap().tasks().any(|(_, j)| j.state == GangState::Running) {
        assert!(tokio::time::Instant::now() < deadline, "no task started");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(b.cancel_array(&g.gang).await.unwrap());
    let view = array_ended(&b, &g.gang).await;
    assert_eq!(view.job_id, s.job_id);
    assert_eq!(view.tasks().count(), 6);
    assert!(view.tasks().all(|(_, j)| j.state == GangState::Cancelled), "{view:?}");
}
