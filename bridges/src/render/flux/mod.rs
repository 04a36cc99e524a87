//! Trainer's Flux Framework plugin: every node pod runs a Flux broker, installed by an init
//! container from the Flux view image and configured from the `<tj>-flux-entrypoint` ConfigMap
//! and the `<tj>-flux-curve` Secret; the lead broker runs the trainer's command across the gang.

pub mod curve;

use base64ct::{Base64, Encoding};
use serde_json::{Value, json};

use crate::error::RenderError;
use crate::jobset::{JobSet, ReplicatedJob};
use crate::pod::Container;
use crate::render::GANG_LABEL;
use crate::trainer::{NODE, TrainJob, TrainingRuntimeSpec};

/// The init container that installs Flux; a runtime may not name one of its own so.
pub const INSTALLER: &str = "flux-installer";
/// Where the ConfigMap's scripts are mounted.
const CONFIG_DIR: &str = "/etc/flux-config";
/// The volume Flux is installed into and run from.
const INSTALL_VOLUME: &str = "flux-install";
const INSTALL_DIR: &str = "/mnt/flux";
const CURVE_VOLUME: &str = "flux-curve";
/// The scripts ConfigMap's volume: a fixed name, as pod volume names are limited to 63
/// characters and the ConfigMap's name grows with the TrainJob's.
const SCRIPTS_VOLUME: &str = "flux-entrypoint";
/// Settings a runtime's or a TrainJob's `node` environment may give (literal values only).
const VIEW_IMAGE: (&str, &str) = ("FLUX_VIEW_IMAGE", "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy");
const NETWORK_DEVICE: (&str, &str) = ("FLUX_NETWORK_DEVICE", "eth0");
const QUEUE_POLICY: (&str, &str) = ("FLUX_QUEUE_POLICY", "fcfs");

const INIT_SCRIPT: &str = include_str!("init.sh");
const ENTRYPOINT_SCRIPT: &str = include_str!("entrypoint.sh");

/// The ConfigMap holding `init.sh` and `entrypoint.sh`.
pub fn config_map_name(job_name: &str) -> String {
    format!("{job_name}-flux-entrypoint")
}

/// The Secret holding `curve.cert`.
pub fn secret_name(job_name: &str) -> String {
    format!("{job_name}-flux-curve")
}

/// A setting from the container's literal environment, else its default.
fn setting(node: &Container, (key, default): (&str, &str)) -> String {
    node.env.iter().find(|e| e.name == key).and_then(|e| e.value.clone()).unwrap_or_else(|| default.to_owned())
}

/// Makes the `node` replicated job's pods Flux brokers: the installer, the volumes and mounts,
/// and the trainer's command (with the TrainJob's `args`) handed to the entrypoint as one line.
/// Runs after the trainer's image, command and environment are in the `node` container.
pub(crate) fn install(
    rjob: &mut ReplicatedJob,
    job_id: &str,
    job_name: &str,
    trainer_args: Option<&[String]>,
) -> Result<(), RenderError> {
    let pod = &mut rjob.template.spec.template.spec;
    if let Some(k) = pod.init_containers.iter().position(|c| c.name == INSTALLER) {
        return Err(RenderError::Forbidden {
            job: job_id.to_owned(),
            field: format!(
                "runtime spec.template.spec.replicatedJobs[{}].template.spec.template.spec.initContainers[{k}].name",
                rjob.name
            ),
            message: format!("{INSTALLER:?} is the Flux plugin's own init container"),
        });
    }
    let config_map = config_map_name(job_name);
    let Some(node) = pod.containers.iter_mut().find(|c| c.name == NODE) else {
        return Err(RenderError::MissingField { job: job_id.to_owned(), field: "node container".into() });
    };
    // The TrainJob's args replace the runtime's, as they would on a container of their own.
    let args = trainer_args.map(<[String]>::to_vec).or_else(|| node.args.take()).unwrap_or_default();
    node.args = None;
    let words = node.command.iter().flatten().chain(&args);
    let line = words.map(|w| shell_word(w)).collect::<Vec<_>>().join(" ");
    node.command = Some(vec!["/bin/bash".into(), format!("{CONFIG_DIR}/entrypoint.sh"), line]);
    for (name, path, read_only) in [
        (INSTALL_VOLUME, INSTALL_DIR, false),
        ("spack-install", "/opt/software", false),
        (SCRIPTS_VOLUME, CONFIG_DIR, true),
        (CURVE_VOLUME, "/curve", true),
        ("shared-memory", "/dev/shm", false),
    ] {
        let mut mount = json!({"name": name, "mountPath": path});
        if read_only {
            mount["readOnly"] = json!(true);
        }
        node.ensure_volume_mount(mount);
    }
    let image = setting(node, VIEW_IMAGE);
    pod.init_containers.push(Container {
        name: INSTALLER.into(),
        image: Some(image),
        command: Some(vec!["/bin/bash".into(), format!("{CONFIG_DIR}/init.sh")]),
        volume_mounts: vec![
            json!({"name": INSTALL_VOLUME, "mountPath": INSTALL_DIR}),
            json!({"name": SCRIPTS_VOLUME, "mountPath": CONFIG_DIR, "readOnly": true}),
        ],
        ..Container::default()
    });
    for volume in [
        json!({"name": "spack-install", "emptyDir": {}}),
        json!({"name": INSTALL_VOLUME, "emptyDir": {}}),
        json!({"name": SCRIPTS_VOLUME, "configMap": {"name": config_map, "defaultMode": 0o755}}),
        json!({"name": "shared-memory", "emptyDir": {"medium": "Memory"}}),
        json!({"name": CURVE_VOLUME, "secret": {"secretName": secret_name(job_name), "defaultMode": 0o400}}),
    ] {
        pod.ensure_volume(volume);
    }
    Ok(())
}

/// `word` as one shell word: as it is when only safe characters make it, else single-quoted.
fn shell_word(word: &str) -> String {
    let safe = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '=' | ',' | '+' | '@' | '%')
        });
    if safe { word.to_owned() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

/// Flux's host list of `pods` pods of the `node` job: `<tj>-node-0-[0-<pods-1>]`.
fn host_list(job_name: &str, pods: i32) -> String {
    match pods {
        ..=1 => format!("{job_name}-{NODE}-0-0"),
        n => format!("{job_name}-{NODE}-0-[0-{}]", n - 1),
    }
}

/// `0-<n-1>`, or `0` for one.
fn ids(n: i64) -> String {
    if n <= 1 { "0".into() } else { format!("0-{}", n - 1) }
}

/// The `<tj>-flux-entrypoint` ConfigMap and `<tj>-flux-curve` Secret the pods of a JobSet
/// rendered by [`crate::render_jobset`] mount; `None` when the runtime has no Flux policy.
///
/// Three choices differ from Trainer's plugin on purpose: brokers connect through the JobSet's
/// subdomain (Trainer always uses the TrainJob's name, which a runtime's `network.subdomain`
/// breaks), `flux run -g` gets GPUs per task, not per node (they differ when a node runs
/// several tasks), and `/dev/shm` is writable (MPI's and NCCL's shared-memory transports write
/// there; Trainer mounts it read-only).
pub fn render_flux_objects(job: &TrainJob, runtime: &TrainingRuntimeSpec, jobset: &JobSet) -> Option<[Value; 2]> {
    let flux = runtime.ml_policy.as_ref()?.flux.as_ref()?;
    let name = jobset.metadata.name.as_deref().unwrap_or_default();
    let namespace = jobset.metadata.namespace.as_deref().unwrap_or("default");
    let subdomain = jobset.spec.network.as_ref().and_then(|n| n.subdomain.as_deref()).unwrap_or(name);
    let rjob = jobset.spec.replicated_jobs.iter().find(|r| r.name == NODE)?;
    let node = rjob.template.spec.template.spec.containers.iter().find(|c| c.name == NODE)?;
    let nodes = rjob.template.spec.parallelism.unwrap_or(1).max(1);
    let trainer_tasks = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node.as_ref()).and_then(|n| n.count());
    let tasks = trainer_tasks.unwrap_or_else(|| i64::from(flux.num_proc_per_node.unwrap_or(1))).max(1);
    let gpus = crate::render::policy::gpus_per_node(node);
    let hosts = host_list(name, nodes);
    let mut rspec = format!("--cores={}", ids(tasks));
    let mut run_flags = format!("-N {nodes} -n {}", tasks * i64::from(nodes));
    if gpus > 0 {
        rspec.push_str(&format!(" --gpu={}", ids(gpus)));
        // GPUs bound per task only when they share out evenly: asking more than a node has would
        // leave the job unsatisfiable; without `-g` every task sees the node's GPUs.
        if gpus >= tasks && gpus % tasks == 0 {
            run_flags.push_str(&format!(" -g {}", gpus / tasks));
        }
    }
    let fill = |script: &str| {
        [
            ("@JOB@", name.to_owned()),
            ("@HOSTS@", hosts.clone()),
            ("@LEAD@", format!("{name}-{NODE}-0-0")),
            ("@DEVICE@", setting(node, NETWORK_DEVICE)),
            ("@QUEUE_POLICY@", setting(node, QUEUE_POLICY)),
            ("@SUBDOMAIN@", subdomain.to_owned()),
            ("@NAMESPACE@", namespace.to_owned()),
            ("@RSPEC@", rspec.clone()),
            ("@RUN_FLAGS@", run_flags.clone()),
        ]
        .iter()
        .fold(script.to_owned(), |text, (key, value)| text.replace(key, value))
    };
    let metadata = |object_name: String| {
        json!({
            "name": object_name,
            "namespace": namespace,
            "labels": {GANG_LABEL: name},
            "ownerReferences": jobset.metadata.owner_references,
        })
    };
    let uid = jobset.metadata.owner_references.first().map(|o| o.uid.as_str()).unwrap_or_default();
    let cert = curve::certificate(name, uid);
    Some([
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(config_map_name(name)),
            "data": {"init.sh": fill(INIT_SCRIPT), "entrypoint.sh": fill(ENTRYPOINT_SCRIPT)},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": metadata(secret_name(name)),
            "data": {"curve.cert": Base64::encode_string(cert.as_bytes())},
        }),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_reach_the_shell_as_they_were() {
        assert_eq!(shell_word("train.py"), "train.py");
        assert_eq!(shell_word("--lr=0.1"), "--lr=0.1");
        assert_eq!(shell_word("print('hi')"), "'print('\\''hi'\\'')'");
        assert_eq!(shell_word("two words"), "'two words'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn host_lists_name_the_first_jobs_pods() {
        assert_eq!(host_list("tj", 1), "tj-node-0-0");
        assert_eq!(host_list("tj", 4), "tj-node-0-[0-3]");
        assert_eq!(ids(1), "0");
        assert_eq!(ids(8), "0-7");
    }

    /// The `@NAME@` tokens of a script (a shell's `"${a[@]}"` is none).
    fn tokens(script: &str) -> Vec<String> {
        let parts: Vec<&str> = script.split('@').collect();
        let inner = parts.get(1..parts.len().saturating_sub(1)).unwrap_or_default();
        inner
            .iter()
            .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .map(|w| (*w).to_owned())
            .collect()
    }

    #[test]
    fn every_placeholder_of_the_scripts_is_one_the_renderer_fills() {
        let known = ["JOB", "HOSTS", "LEAD", "DEVICE", "QUEUE_POLICY", "SUBDOMAIN", "NAMESPACE", "RSPEC", "RUN_FLAGS"];
        let found: Vec<String> = [INIT_SCRIPT, ENTRYPOINT_SCRIPT].iter().flat_map(|s| tokens(s)).collect();
        assert!(found.iter().any(|t| t == "RUN_FLAGS"), "{found:?}");
        for token in &found {
            assert!(known.contains(&token.as_str()), "unfilled placeholder @{token}@");
        }
    }
}
