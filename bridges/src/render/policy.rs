//! ML-policy injection: Torch `PET_*`, JAX `JAX_*`, XGBoost `DMLC_*` variables and the MPI wiring.

use serde_json::{Value, json};

use crate::pod::{Container, EnvVar, PodSpec};
use crate::trainer::{MpiPolicy, NumProcPerNode};

/// Rendezvous / coordinator port shared by the frameworks.
pub const MASTER_PORT: u16 = 29500;
/// Where the MPI hostfile is mounted on the launcher.
pub const HOSTFILE_DIR: &str = "/etc/mpi";
/// Default `sshAuthMountPath`.
pub const DEFAULT_SSH_PATH: &str = "/root/.ssh";
const SSH_VOLUME: &str = "mpi-ssh-auth";
const HOSTFILE_VOLUME: &str = "mpi-hostfile";
/// Options of the launcher's SSH connections to the nodes (they may not be listening yet).
const SSH_ARGS: &str = "-o ConnectionAttempts=10";
/// Suffix of the SSH key Secret's name (`<trainjob>-mpi-ssh-auth`).
pub const SSH_SECRET_SUFFIX: &str = "-mpi-ssh-auth";

/// Rounds a CPU-style quantity (`"4"`, `"500m"`, `2.5`) up to whole units; `None` when unparsable.
fn whole_units(q: &Value) -> Option<i64> {
    let milli = match q {
        Value::Number(n) => (n.as_f64()? * 1000.0).ceil(),
        Value::String(s) => match s.strip_suffix('m') {
            Some(m) => m.parse::<f64>().ok()?,
            None => s.parse::<f64>().ok()? * 1000.0,
        },
        _ => return None,
    };
    (milli.is_finite() && milli >= 0.0).then(|| (milli / 1000.0).ceil() as i64)
}

/// A resource from `requests`, else from `limits`, of a container's resources.
fn resource(resources: Option<&Value>, pick: impl Fn(&str) -> bool + Copy) -> Vec<&Value> {
    for section in ["requests", "limits"] {
        let found: Vec<&Value> = resources
            .and_then(|r| r.get(section))
            .and_then(Value::as_object)
            .map(|m| m.iter().filter(|(k, _)| pick(k)).map(|(_, v)| v).collect())
            .unwrap_or_default();
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// GPUs per node: the sum of every resource whose name contains "gpu".
pub fn gpus_per_node(container: &Container) -> i64 {
    resource(container.resources.as_ref(), |k| k.contains("gpu")).into_iter().filter_map(whole_units).sum()
}

/// `PET_NPROC_PER_NODE`: the TrainJob's value, else the (v2.1) runtime's, else `auto` with GPUs (extended
/// resources, or `claim_gpus` from a DRA claim) and the CPU count (at least 1) without.
pub fn torch_nproc(
    trainer: Option<&NumProcPerNode>,
    runtime: Option<&NumProcPerNode>,
    node: &Container,
    claim_gpus: i64,
) -> String {
    match trainer.or(runtime) {
        Some(NumProcPerNode::Count(n)) => return n.to_string(),
        Some(NumProcPerNode::Text(s)) if s == "auto" || s.parse::<i64>().is_ok() => return s.clone(),
        _ => {}
    }
    if gpus_per_node(node) > 0 || claim_gpus > 0 {
        return "auto".into();
    }
    let cpu = resource(node.resources.as_ref(), |k| k == "cpu").first().and_then(|q| whole_units(q)).unwrap_or(1);
    cpu.max(1).to_string()
}

/// Where the Job controller publishes a pod's completion index, the source of every rank variable.
pub const COMPLETION_INDEX_PATH: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// A variable whose value is the pod's completion index.
fn completion_index(name: &str) -> EnvVar {
    let from = json!({"fieldRef": {"fieldPath": COMPLETION_INDEX_PATH}});
    EnvVar { name: name.to_owned(), value: None, value_from: Some(from) }
}

/// DNS name of the first trainer pod, `<tj>-node-0-0.<tj>`. The Trainer always uses the TrainJob name as the
/// subdomain here, even when the runtime sets `network.subdomain`, and so do we.
pub fn first_node_host(job_name: &str) -> String {
    format!("{job_name}-node-0-0.{job_name}")
}

/// The Torch variables for a trainer container.
pub fn torch_env(job_name: &str, nnodes: i32, nproc: &str) -> Vec<EnvVar> {
    vec![
        EnvVar::literal("PET_NNODES", nnodes.to_string()),
        EnvVar::literal("PET_NPROC_PER_NODE", nproc),
        completion_index("PET_NODE_RANK"),
        EnvVar::literal("PET_MASTER_ADDR", first_node_host(job_name)),
        EnvVar::literal("PET_MASTER_PORT", MASTER_PORT.to_string()),
    ]
}

/// The JAX variables for a trainer container: one JAX process per node pod. The reference does not say
/// whether `numProcPerNode` changes the process count; it does not here (one process per pod).
pub fn jax_env(job_name: &str, nnodes: i32) -> Vec<EnvVar> {
    vec![
        EnvVar::literal("JAX_NUM_PROCESSES", nnodes.to_string()),
        completion_index("JAX_PROCESS_ID"),
        EnvVar::literal("JAX_COORDINATOR_ADDRESS", format!("{}:{MASTER_PORT}", first_node_host(job_name))),
    ]
}

/// The XGBoost (Rabit/DMLC) variables for a trainer container. `DMLC_NUM_WORKER` is
/// `nnodes x gpus_per_node`, or `nnodes` on CPU-only nodes, because each GPU runs its own worker.
pub fn xgboost_env(job_name: &str, nnodes: i32, gpus_per_node: i64) -> Vec<EnvVar> {
    let workers = i64::from(nnodes) * gpus_per_node.max(1);
    vec![
        EnvVar::literal("DMLC_TRACKER_URI", first_node_host(job_name)),
        EnvVar::literal("DMLC_TRACKER_PORT", MASTER_PORT.to_string()),
        completion_index("DMLC_TASK_ID"),
        EnvVar::literal("DMLC_NUM_WORKER", workers.to_string()),
    ]
}

/// MPI slots per node: the TrainJob's value, else the runtime's (default 1), except that a runtime value
/// of 1 yields to the GPU count when that is larger.
pub fn mpi_slots(trainer: Option<&NumProcPerNode>, mpi: &MpiPolicy, gpus: i64) -> i64 {
    if let Some(n) = trainer.and_then(NumProcPerNode::count) {
        return n;
    }
    match i64::from(mpi.num_proc_per_node.unwrap_or(1)) {
        1 if gpus > 1 => gpus,
        n => n,
    }
}

/// The OpenMPI variables for the launcher's `node` container: ORTE's (Open MPI 4) and PRTE's
/// (Open MPI 5, which ignores ORTE's silently and would run every rank on the launcher), as
/// Trainer v2.4 sets them. PRTE must not keep fully qualified names: the hostfile's short pod
/// names never match what PRTE resolves for itself, so with `runLauncherAsNode` it would try to
/// reach its own entry over SSH.
pub fn mpi_launcher_env(slots: i64) -> Vec<EnvVar> {
    let hostfile = format!("{HOSTFILE_DIR}/hostfile");
    vec![
        EnvVar::literal("OMPI_MCA_orte_default_hostfile", hostfile.clone()),
        EnvVar::literal("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        EnvVar::literal("OMPI_MCA_orte_set_default_slots", slots.to_string()),
        EnvVar::literal("OMPI_MCA_plm_rsh_args", SSH_ARGS),
        EnvVar::literal("PRTE_MCA_prte_default_hostfile", hostfile),
        EnvVar::literal("PRTE_MCA_prte_keep_fqdn_hostnames", "false"),
        EnvVar::literal("PRTE_MCA_prte_set_default_slots", slots.to_string()),
        EnvVar::literal("PRTE_MCA_plm_ssh_args", SSH_ARGS),
    ]
}

/// The slots a rendered launcher was given (`OMPI_MCA_orte_set_default_slots`), so that the hostfile
/// says what the launcher was told, whatever the GPUs came through.
pub fn rendered_slots(launcher: &Container) -> Option<i64> {
    let var = launcher.env.iter().find(|v| v.name == "OMPI_MCA_orte_set_default_slots")?;
    var.value.as_deref()?.parse().ok()
}

/// Mounts the `<tj>-mpi-ssh-auth` Secret into a pod and its `node` container.
pub fn mount_ssh(pod: &mut PodSpec, job_name: &str, mount_path: &str) {
    pod.ensure_volume(json!({
        "name": SSH_VOLUME,
        "secret": {
            "secretName": format!("{job_name}{SSH_SECRET_SUFFIX}"),
            "defaultMode": 0o400,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644}
            ]
        }
    }));
    if let Some(node) = pod.containers.iter_mut().find(|c| c.name == crate::trainer::NODE) {
        node.ensure_volume_mount(json!({"name": SSH_VOLUME, "mountPath": mount_path}));
    }
}

/// Mounts the `<tj>-mpi-hostfile` ConfigMap on the launcher pod and its `node` container.
pub fn mount_hostfile(pod: &mut PodSpec, job_name: &str) {
    pod.ensure_volume(json!({
        "name": HOSTFILE_VOLUME,
        "configMap": {"name": format!("{job_name}-mpi-hostfile"), "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}
    }));
    if let Some(node) = pod.containers.iter_mut().find(|c| c.name == crate::trainer::NODE) {
        node.ensure_volume_mount(json!({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_resources(resources: Value) -> Container {
        Container { name: "node".into(), resources: Some(resources), ..Container::default() }
    }

    #[test]
    fn nproc_follows_gpu_then_cpu_rule() {
        let gpu = with_resources(json!({"limits": {"nvidia.com/gpu": 8}}));
        assert_eq!(torch_nproc(None, None, &gpu, 0), "auto");
        let cpu = with_resources(json!({"requests": {"cpu": "2500m"}, "limits": {"cpu": "8"}}));
        assert_eq!(torch_nproc(None, None, &cpu, 0), "3");
        let tiny = with_resources(json!({"limits": {"cpu": "100m"}}));
        assert_eq!(torch_nproc(None, None, &tiny, 0), "1");
        assert_eq!(torch_nproc(Some(&NumProcPerNode::Count(4)), None, &gpu, 0), "4");
        assert_eq!(torch_nproc(None, Some(&NumProcPerNode::Text("gpu".into())), &cpu, 0), "3");
    }

    #[test]
    fn jax_and_xgboost_env_follow_the_contract() {
        let jax = jax_env("tj", 3);
        let value = |env: &[EnvVar], name: &str| env.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
        assert_eq!(value(&jax, "JAX_NUM_PROCESSES").as_deref(), Some("3"));
        assert_eq!(value(&jax, "JAX_COORDINATOR_ADDRESS").as_deref(), Some("tj-node-0-0.tj:29500"));
        let id = jax.iter().find(|e| e.name == "JAX_PROCESS_ID").and_then(|e| e.value_from.as_ref());
        assert_eq!(id.and_then(|v| v.pointer("/fieldRef/fieldPath")), Some(&json!(COMPLETION_INDEX_PATH)));
        let cpu = xgboost_env("tj", 3, 0);
        assert_eq!(value(&cpu, "DMLC_NUM_WORKER").as_deref(), Some("3"));
        assert_eq!(value(&cpu, "DMLC_TRACKER_URI").as_deref(), Some("tj-node-0-0.tj"));
        assert_eq!(value(&cpu, "DMLC_TRACKER_PORT").as_deref(), Some("29500"));
        assert_eq!(value(&xgboost_env("tj", 3, 4), "DMLC_NUM_WORKER").as_deref(), Some("12"));
        assert!(cpu.iter().any(|e| e.name == "DMLC_TASK_ID" && e.value_from.is_some()));
    }

    #[test]
    fn mpi_slots_prefer_job_then_gpus() {
        let mpi = MpiPolicy::default();
        assert_eq!(mpi_slots(None, &mpi, 8), 8);
        assert_eq!(mpi_slots(Some(&NumProcPerNode::Count(2)), &mpi, 8), 2);
        let four = MpiPolicy { num_proc_per_node: Some(4), ..MpiPolicy::default() };
        assert_eq!(mpi_slots(None, &four, 8), 4);
        assert_eq!(mpi_slots(None, &mpi, 0), 1);
    }
}
