//! MPI: a TrainJob on an MPI runtime (a launcher that also runs as a node, two node workers)
//! gets its SSH key Secret, made by trainyard before the JobSet, holding a key pair OpenSSH
//! accepts, and its hostfile ConfigMap; every volume of every pod exists; the launcher carries
//! Open MPI 4's and 5's variables; the TrainJob's image runs on the launcher and the workers;
//! the gang is placed in one rack. A Secret of that name trainyard did not make is left as it
//! is, and its TrainJob fails naming it. A Flux runtime's gang gets its installer, the scripts
//! ConfigMap and the CURVE certificate Secret, owned by the TrainJob.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::Options;
use crate::kube_util::{condition, name_of, wait_for};
use crate::suite::{Checks, Suite, secs};
use crate::world::{RACK, World};

fn runtime(ns: &str) -> Value {
    let container = |command: Option<Value>| {
        let mut c =
            json!({"name": "node", "image": "example.org/mpi-runtime:2.3", "securityContext": {"runAsUser": 1000}});
        if let Some(command) = command {
            c["command"] = command;
        }
        c
    };
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "mpi", "namespace": ns},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": {"numProcPerNode": 1, "mpiImplementation": "OpenMPI",
                         "sshAuthMountPath": "/home/mpiuser/.ssh", "runLauncherAsNode": true}},
            "template": {"spec": {
                "network": {"publishNotReadyAddresses": true},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                "replicatedJobs": [
                    {"name": "node", "template": {"spec": {"template": {"spec": {
                        "containers": [container(Some(json!(["/usr/sbin/sshd", "-De"])))]}}}}},
                    {"name": "launcher", "template": {
                        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {"template": {"spec": {"containers": [container(None)]}}}}},
                ],
            }},
        },
    })
}

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "mpi").await?;
    w.grid(1, 2, 4).await?;
    let queue = w.queue("team", 256, None).await?;
    w.kube().apply(&runtime(&w.ns)).await?;
    w.start_trainyard(&[]).await?;

    let mpi_job = |name: &str| {
        let mut job = w.trainjob(name, &queue, 3, 8);
        job["spec"]["runtimeRef"]["name"] = json!("mpi");
        job["spec"]["trainer"]["image"] = json!("example.org/mpi-app:1.0");
        job["spec"]["trainer"]["command"] = json!(["mpirun", "--tag-output", "python", "train.py"]);
        job["metadata"]["annotations"] = json!({"kueue.x-k8s.io/podset-required-topology": RACK});
        job
    };
    // Someone else's Secret where a gang's key would go.
    let foreign = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "taken-mpi-ssh-auth", "namespace": w.ns}, "stringData": {"ssh-privatekey": "not ours"}});
    let before = w.kube().create(&foreign).await?;
    w.submit(&[mpi_job("ring"), mpi_job("taken")]).await?;

    let took = w.wait_admitted(&["ring".into()], Duration::from_secs(30)).await?;
    // 3 nodes with runLauncherAsNode: the launcher and two workers.
    w.wait_bound_as_recorded("ring", 3, Duration::from_secs(60)).await?;
    c.done();
    let secret =
        w.kube().get("v1", "Secret", Some(&w.ns), "ring-mpi-ssh-auth").await?.context("no Secret ring-mpi-ssh-auth")?;
    c.that(
        secret["type"] == "kubernetes.io/ssh-auth" && secret["immutable"] == true,
        format!("the Secret is immutable ssh-auth: {} {}", secret["type"], secret["immutable"]),
    )?;
    let owner = &secret["metadata"]["ownerReferences"][0];
    c.that(
        owner["kind"] == "TrainJob" && owner["name"] == "ring" && owner["controller"] == true,
        format!("the Secret is owned by its TrainJob: {owner}"),
    )?;
    let usable = key_pair_usable(&secret, &w.suite.run_dir).await?;
    c.that(usable.is_ok(), format!("OpenSSH reads the private key and derives the stored public key: {usable:?}"))?;
    let hostfile =
        w.kube().get("v1", "ConfigMap", Some(&w.ns), "ring-mpi-hostfile").await?.context("no hostfile ConfigMap")?;
    let lines = hostfile.pointer("/data/hostfile").and_then(Value::as_str).unwrap_or_default().lines().count();
    c.that(lines == 3, format!("the hostfile lists the launcher and both workers ({lines} lines)"))?;

    let pods = w.gang_pods("ring").await?;
    for pod in &pods {
        for volume in pod.pointer("/spec/volumes").and_then(Value::as_array).cloned().unwrap_or_default() {
            let (kind, name) = if let Some(s) = volume.pointer("/secret/secretName").and_then(Value::as_str) {
                ("Secret", s.to_string())
            } else if let Some(m) = volume.pointer("/configMap/name").and_then(Value::as_str) {
                ("ConfigMap", m.to_string())
            } else {
                continue;
            };
            let exists = w.kube().get("v1", kind, Some(&w.ns), &name).await?.is_some();
            c.that(exists, format!("pod {} mounts {kind} {name}, which exists", name_of(pod)))?;
        }
        let node = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["name"] == "node"))
            .cloned()
            .unwrap_or_default();
        c.that(
            node["image"] == "example.org/mpi-app:1.0",
            format!("pod {} runs the TrainJob's image (got {})", name_of(pod), node["image"]),
        )?;
        let rjob = pod
            .pointer("/metadata/labels/jobset.sigs.k8s.io~1replicatedjob-name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if rjob == "launcher" {
            let env: Vec<String> = node["env"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|e| e["name"].as_str().map(str::to_string))
                .collect();
            for var in [
                "OMPI_MCA_orte_default_hostfile",
                "PRTE_MCA_prte_default_hostfile",
                "PRTE_MCA_prte_keep_fqdn_hostnames",
                "PRTE_MCA_plm_ssh_args",
            ] {
                c.that(env.iter().any(|e| e == var), format!("the launcher sets {var}"))?;
            }
            c.that(node["command"][0] == "mpirun", "the launcher runs the TrainJob's command")?;
        } else {
            c.that(node["command"][0] == "/usr/sbin/sshd", "the workers keep their SSH server")?;
        }
    }
    let racks: std::collections::BTreeSet<String> = w
        .slots("ring")
        .await?
        .iter()
        .map(|n| w.nodes.iter().find(|x| &x.name == n).and_then(|x| x.labels.get(RACK).cloned()).unwrap_or_default())
        .collect();
    c.that(racks.len() == 1, format!("launcher and workers share one rack: {racks:?}"))?;

    let message = wait_for("the TrainJob with a foreign Secret to fail", Duration::from_secs(30), || async {
        let tj = w.trainjob_now("taken").await?;
        match condition(&tj, "Failed") {
            Some((s, r, m)) if s == "True" && r == "SshSecretConflict" => Ok(Some(m)),
            other => Err(anyhow!("Failed: {other:?}")),
        }
    })
    .await?;
    c.that(message.contains("taken-mpi-ssh-auth"), format!("the condition names the Secret: {message}"))?;
    let after = w.kube().get("v1", "Secret", Some(&w.ns), "taken-mpi-ssh-auth").await?.unwrap_or_default();
    c.that(
        after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"],
        "the foreign Secret is untouched",
    )?;
    c.that(
        w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "taken").await?.is_none(),
        "no JobSet for `taken`",
    )?;
    let log = std::fs::read_to_string(&w.replicas[0].process.log).unwrap_or_default();
    c.that(!log.contains("PRIVATE KEY") && !log.contains("ecdsa-sha2"), "the controller's log shows no key")?;
    c.figure(format!(
        "MPI gang (launcher + 2 workers) admitted in {}; SSH key pair checked with ssh-keygen",
        secs(took)
    ));
    flux(&mut w, &queue, &mut c).await?;
    w.teardown().await?;
    Ok(c)
}

/// A Flux runtime: the gang's JobSet gets the installer and the brokers' volumes, and the
/// ConfigMap and Secret they mount exist, owned by the TrainJob, before its pods are bound.
async fn flux(w: &mut World<'_>, queue: &str, c: &mut Checks) -> Result<()> {
    w.kube()
        .apply(&json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "flux", "namespace": w.ns},
            "spec": {
                "mlPolicy": {"numNodes": 1, "flux": {"numProcPerNode": 2}},
                "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": "node", "image": "example.org/lammps:stable", "command": ["lmp", "-in", "in.lj"]},
                    ]}}},
                }}]}},
            },
        }))
        .await?;
    let mut job = w.trainjob("brokers", queue, 2, 8);
    job["spec"]["runtimeRef"]["name"] = json!("flux");
    w.submit(&[job]).await?;
    w.wait_admitted(&["brokers".into()], Duration::from_secs(30)).await?;
    w.wait_bound_as_recorded("brokers", 2, Duration::from_secs(60)).await?;
    for (kind, name, key) in
        [("ConfigMap", "brokers-flux-entrypoint", "entrypoint.sh"), ("Secret", "brokers-flux-curve", "curve.cert")]
    {
        let object = w.kube().get("v1", kind, Some(&w.ns), name).await?.with_context(|| format!("no {kind} {name}"))?;
        c.that(object["data"].get(key).is_some(), format!("{kind} {name} holds {key}"))?;
        c.that(
            object.pointer("/metadata/ownerReferences/0/name") == Some(&json!("brokers")),
            format!("{kind} {name} is owned by its TrainJob"),
        )?;
    }
    let jobset = w
        .kube()
        .get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "brokers")
        .await?
        .context("no JobSet for brokers")?;
    let pod = &jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
    c.that(pod["initContainers"][0]["name"] == json!("flux-installer"), "the Flux installer runs first")?;
    let command = pod["containers"][0]["command"].as_array().cloned().unwrap_or_default();
    c.that(
        command.get(1) == Some(&json!("/etc/flux-config/entrypoint.sh"))
            && command.get(2) == Some(&json!("lmp -in in.lj")),
        format!("the broker's entrypoint runs the command: {command:?}"),
    )?;
    c.figure("Flux gang of 2 brokers: installer, scripts ConfigMap and CURVE Secret, pods bound".to_string());
    Ok(())
}

/// Whether `ssh-keygen -y` derives, from the Secret's private key, the public key it stores.
async fn key_pair_usable(secret: &Value, dir: &std::path::Path) -> Result<Result<(), String>> {
    let private = base64_decode(secret.pointer("/data/ssh-privatekey").and_then(Value::as_str).unwrap_or_default())?;
    let public = base64_decode(secret.pointer("/data/ssh-publickey").and_then(Value::as_str).unwrap_or_default())?;
    let path = dir.join("mpi-id");
    std::fs::write(&path, &private)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    let out = Command::new("ssh-keygen").arg("-y").arg("-f").arg(&path).output().await.context("running ssh-keygen")?;
    std::fs::remove_file(&path).ok();
    if !out.status.success() {
        return Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    let derived = String::from_utf8_lossy(&out.stdout);
    let stored = String::from_utf8_lossy(&public);
    let key = |s: &str| s.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    if key(&derived) == key(&stored) && stored.starts_with("ecdsa-sha2-nistp521 ") {
        Ok(Ok(()))
    } else {
        Ok(Err(format!("derived {:?}, stored {:?}", key(&derived), key(&stored))))
    }
}

/// Standard base64, as Secret data is.
fn base64_decode(text: &str) -> Result<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for ch in text.bytes().filter(|b| !b.is_ascii_whitespace() && *b != b'=') {
        let v = ALPHABET.iter().position(|&a| a == ch).ok_or_else(|| anyhow!("not base64: {ch}"))? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes() {
        assert_eq!(super::base64_decode("aGVsbG8gd29ybGQ=").unwrap(), b"hello world");
        assert!(super::base64_decode("a$b").is_err());
    }
}
