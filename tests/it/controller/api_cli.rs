//! The researcher commands, run as the built binary against an in-process API server over TLS:
//! every command in every output format against one golden file, the kubeconfig as the
//! source of endpoint, token (also from an exec plugin) and namespace, and refusals as one
//! error line.

use super::api_world::*;
use crate::{TempDir, trainyard};
use trainyard::grpc::rate::Limit;

/// The flags that point a command at `addr` as alice in namespace `team`.
fn flags(addr: std::net::SocketAddr, dir: &TempDir, token: &str) -> Vec<String> {
    let ca = dir.write("ca.pem", &world_certificates().0);
    ["--server", &format!("https://localhost:{}", addr.port()), "--ca-file", &ca, "--token", token, "-n", "team"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Runs the binary off the test's runtime, so the server keeps answering.
async fn run(args: Vec<String>) -> crate::Run {
    tokio::task::spawn_blocking(move || trainyard(&args)).await.unwrap()
}

const COMMANDS: &[&[&str]] = &[
    &["get", "next"],
    &["list"],
    &["list", "--state", "pending"],
    &["explain", "next"],
    &["eta", "next"],
    &["eta", "huge"],
    &["queues"],
    &["watch", "--count", "3"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_in_every_format_prints_what_the_golden_file_says() {
    let replica = Replica::start("leader-a", harness(), Limit { per_second: 1000.0, burst: 1000 }, true).await;
    let dir = TempDir::create();
    let flags = flags(replica.addr, &dir, "alice-token");
    let mut transcript = String::new();
    let mut commands: Vec<Vec<String>> = Vec::new();
    for command in COMMANDS {
        for format in ["table", "wide", "json", "yaml"] {
            let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
            args.extend(["-o".to_string(), format.to_string()]);
            commands.push(args);
        }
    }
    let words = |text: &str| text.split_whitespace().map(str::to_string).collect::<Vec<String>>();
    let gang = "submit --name llama --queue team --runtime gpu --nodes 2";
    commands.push(words(&format!("{gang} --gpus-per-node 8 --runtime-estimate 2h -- torchrun train.py")));
    commands.push(words(&format!("{gang} --dry-run -o yaml")));
    commands.push(vec!["cancel".into(), "next".into()]);
    commands.push(vec!["cancel".into(), "next".into(), "--dry-run".into(), "-o".into(), "json".into()]);
    for args in commands {
        // The connection flags go before any `--` that ends them.
        let mut full = vec![args[0].clone()];
        full.extend(flags.iter().cloned());
        full.extend(args[1..].iter().cloned());
        let out = run(full).await;
        out.assert_success();
        transcript.push_str(&format!("$ trainyard {}\n{}\n", args.join(" "), out.stdout));
    }
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/cli/api.txt");
    if std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &transcript).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(transcript == want, "stale {}; rerun with TRAINYARD_BLESS=1 after review:\n{transcript}", golden.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubeconfig_gives_endpoint_token_and_namespace() {
    let replica = Replica::start("leader-a", harness(), Limit { per_second: 1000.0, burst: 1000 }, true).await;
    let dir = TempDir::create();
    let ca = dir.write("ca.pem", &world_certificates().0);
    let token = dir.write("token", "alice-token\n");
    let kubeconfig = dir.write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters:\n- name: lab\n  cluster: {{server: \"https://kube.invalid:6443\"}}\nusers:\n- name: alice\n  user: {{tokenFile: {token}}}\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: alice\n    namespace: team\n    extensions:\n    - name: trainyard\n      extension: {{server: \"https://localhost:{}\", certificate-authority: {ca}}}\n",
            replica.addr.port()
        ),
    );
    let out =
        run(vec!["get".into(), "next".into(), "--kubeconfig".into(), kubeconfig.clone(), "-o".into(), "json".into()])
            .await;
    out.assert_success();
    let job: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (job["namespace"].as_str(), job["name"].as_str(), job["state"].as_str()),
        (Some("team"), Some("next"), Some("pending"))
    );

    // A context that does not exist, and a server that is not https, are named.
    run(vec!["get".into(), "next".into(), "--kubeconfig".into(), kubeconfig, "--context".into(), "nope".into()])
        .await
        .assert_error(&["the kubeconfig has no context \"nope\""]);
    let mut plain = flags(replica.addr, &dir, "alice-token");
    plain[1] = format!("http://localhost:{}", replica.addr.port());
    let mut args = vec!["queues".to_string()];
    args.extend(plain);
    run(args).await.assert_error(&["served over TLS only"]);
}

/// A kubeconfig whose user logs in through the exec plugin `command` (relative to the
/// kubeconfig's folder), with `WHO` in its environment and the cluster's details asked for.
fn exec_kubeconfig(dir: &TempDir, port: u16, command: &str, who: &str) -> String {
    let ca = dir.write("ca.pem", &world_certificates().0);
    dir.write(
        &format!("kubeconfig-{who}"),
        &format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: lab\nclusters:\n- name: lab\n  cluster: {{server: \"https://kube.invalid:6443\", certificate-authority: {ca}}}\nusers:\n- name: sso\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {command}\n      env: [{{name: WHO, value: {who}}}]\n      provideClusterInfo: true\n      interactiveMode: IfAvailable\n      installHint: install the lab login helper\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: sso\n    namespace: team\n    extensions:\n    - name: trainyard\n      extension: {{server: \"https://localhost:{port}\", certificate-authority: {ca}}}\n"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_exec_plugin_gives_the_token_as_kubectl_runs_it() {
    use std::os::unix::fs::PermissionsExt;
    let replica = Replica::start("leader-a", harness(), Limit { per_second: 1000.0, burst: 1000 }, true).await;
    let dir = TempDir::create();
    std::fs::create_dir_all(dir.path("bin")).unwrap();
    // The helper checks what kubectl would tell it, then answers an ExecCredential for $WHO.
    let login = dir.write(
        "bin/login",
        r#"#!/bin/sh
info="$KUBERNETES_EXEC_INFO"
for want in '"kind":"ExecCredential"' '"server":"https://kube.invalid:6443"' '"interactive":false' '"certificate-authority-data":"'; do
  case "$info" in *"$want"*) ;; *) echo "exec info lacks $want: $info" >&2; exit 3 ;; esac
done
[ "$WHO" = nobody ] && exit 1
# The first login of `rotating` gives a token the cluster no longer takes, later ones a good one.
if [ "$WHO" = rotating ]; then
  n=$(cat "$0.calls" 2>/dev/null || echo 0)
  echo $((n + 1)) > "$0.calls"
  if [ "$n" = 0 ]; then WHO=stolen; else WHO=alice; fi
fi
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s-token"}}' "$WHO"
"#,
    );
    std::fs::set_permissions(&login, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = replica.addr.port();
    let get = |kubeconfig: String| vec!["get".into(), "next".into(), "--kubeconfig".into(), kubeconfig];

    let out = run(get(exec_kubeconfig(&dir, port, "bin/login", "alice"))).await;
    out.assert_success();
    assert!(out.stdout.contains("next ") && out.stdout.contains("pending"), "{}", out.stdout);
    // The plugin's token is the one the server judges.
    run(get(exec_kubeconfig(&dir, port, "bin/login", "stolen"))).await.assert_error(&["Unauthenticated"]);
    run(get(exec_kubeconfig(&dir, port, "bin/login", "nobody")))
        .await
        .assert_error(&["exec plugin ", "bin/login: exit status: 1"]);
    run(get(exec_kubeconfig(&dir, port, "bin/missing", "alice"))).await.assert_error(&[
        "exec plugin",
        "bin/missing: cannot run it",
        "install the lab login helper",
    ]);
    // A watch whose first token is refused logs in again, as kubectl does on a 401.
    let mut watch = get(exec_kubeconfig(&dir, port, "bin/login", "rotating"));
    watch.splice(0..2, ["watch".to_string(), "--count".into(), "3".into()]);
    let out = run(watch).await;
    out.assert_success();
    assert_eq!(out.stdout.lines().filter(|l| l.contains("initial")).count(), 3, "{}", out.stdout);
    assert_eq!(std::fs::read_to_string(dir.path("bin/login.calls")).unwrap().trim(), "2", "one renewal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_one_error_line_with_its_code() {
    let replica = Replica::start("leader-a", harness(), Limit { per_second: 1000.0, burst: 1000 }, true).await;
    let dir = TempDir::create();
    let mut args = vec!["cancel".to_string(), "next".to_string()];
    args.extend(flags(replica.addr, &dir, "bob-token"));
    run(args).await.assert_error(&["PermissionDenied: user \"bob\" cannot delete trainjobs"]);
    let mut args = vec!["get".to_string(), "next".to_string()];
    args.extend(flags(replica.addr, &dir, "stolen-token"));
    run(args).await.assert_error(&["Unauthenticated: the token was not accepted by the cluster"]);
    let mut args = vec!["submit".to_string()];
    args.extend(flags(replica.addr, &dir, "alice-token"));
    run(args).await.assert_error(&["submit needs -f FILE"]);
}

/// A trial of search `tune` (5 trials, 2 at once, as trainyard's own trials say).
fn trial(name: &str, created: u64) -> trainyard::api::TrainJob {
    let mut job = super::cluster::trainjob(name, "gpu", "team", 2, 8, created);
    job.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "trainer.kubeflow.org/v1alpha1".into(),
        kind: "OptimizationJob".into(),
        name: "tune".into(),
        uid: "uid-tune".into(),
        controller: Some(true),
        ..Default::default()
    }]);
    job.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("trainyard.io/search-size".into(), "5/2".into());
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_is_listed_as_one_and_its_remaining_trials_get_their_start() {
    let mut h = harness();
    h.job(trial("tune-trial-0", 7));
    h.job(trial("tune-trial-1", 8));
    h.advance(1);
    let replica = Replica::start("leader-a", h, Limit { per_second: 1000.0, burst: 1000 }, true).await;
    let dir = TempDir::create();
    let with = |args: &[&str]| {
        let mut full = vec![args[0].to_string()];
        full.extend(flags(replica.addr, &dir, "alice-token"));
        full.extend(args[1..].iter().map(|s| s.to_string()));
        full
    };
    let listed = run(with(&["list", "--search", "tune"])).await;
    let text = listed.stdout.clone();
    assert!(listed.status.success(), "{}", listed.stderr);
    assert!(text.lines().next().unwrap().starts_with("NAME") && text.contains("SEARCH"), "{text}");
    assert_eq!(text.lines().count(), 3, "only the two trials: {text}");
    assert!(text.lines().skip(1).all(|l| l.contains("tune-trial-") && l.contains(" tune ")), "{text}");
    let all = run(with(&["list"])).await.stdout;
    assert!(all.contains("next") && all.contains("tune-trial-0"), "{all}");

    let eta = run(with(&["eta", "--search", "tune"])).await;
    assert!(eta.status.success(), "{}", eta.stderr);
    assert!(eta.stdout.contains("team/tune-trial-0") && eta.stdout.contains("team/tune-trial-1"), "{}", eta.stdout);
    assert!(
        eta.stdout.contains("search tune (5 trials, 2 at once): 2 made, 0 ended, 0 running, 2 waiting")
            && eta.stdout.contains("3 not made yet"),
        "{}",
        eta.stdout
    );
    let json: serde_json::Value =
        serde_json::from_str(&run(with(&["eta", "--search", "tune", "-o", "json"])).await.stdout).unwrap();
    assert_eq!(json["notMade"], 3);
    assert_eq!(json["items"].as_array().unwrap().len(), 2);
    assert_eq!(json["items"][0]["job"]["search"], "tune");
    run(with(&["eta", "--search", "nothing"])).await.assert_error(&["no trials of search nothing in namespace team"]);
}
