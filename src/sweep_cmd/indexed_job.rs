//! `trainyard sweep FILE --k8s-indexed-job IMAGE`: prints a Kubernetes batch/v1 Job in Indexed
//! completion mode, one point per completion index, each pod running
//! `trainyard sweep FILE --point-from-env JOB_COMPLETION_INDEX` into a results volume, and the
//! ConfigMap holding the sweep file and its inputs (or a claim that holds them). Rendered, not
//! run: `kubectl apply` it, then `--gather` on the results volume.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, KeyToPath, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Sweep, SweepArgs};

/// Flags of `trainyard sweep --k8s-indexed-job`.
#[derive(Debug, Args)]
pub struct IndexedJobFlags {
    /// PersistentVolumeClaim the pods write their results to (ReadWriteMany when pods may land
    /// on several nodes), mounted at /results; results go under /results/<job name>/points/.
    #[arg(long, value_name = "CLAIM", requires = "k8s_indexed_job", help_heading = "On Kubernetes")]
    pub results_pvc: Option<String>,
    /// PersistentVolumeClaim that holds the sweep file and its inputs at their paths relative to
    /// the current folder, instead of a ConfigMap made of them (which holds at most 1 MiB).
    #[arg(long, value_name = "CLAIM", requires = "k8s_indexed_job", help_heading = "On Kubernetes")]
    pub inputs_pvc: Option<String>,
    /// Name of the Job (and prefix of its ConfigMap). Default: sweep-<FILE's name>.
    #[arg(long, value_name = "NAME", requires = "k8s_indexed_job", help_heading = "On Kubernetes")]
    pub job_name: Option<String>,
    /// Namespace of the Job and its ConfigMap. Default: none (kubectl's current namespace).
    #[arg(long, value_name = "NAMESPACE", requires = "k8s_indexed_job", help_heading = "On Kubernetes")]
    pub namespace: Option<String>,
    /// Points run at once. Default: every point, at most 16.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), requires = "k8s_indexed_job",
          help_heading = "On Kubernetes")]
    pub parallelism: Option<u32>,
    /// Times a point's pod is retried before its index counts as failed (backoffLimitPerIndex).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1000),
          requires = "k8s_indexed_job", help_heading = "On Kubernetes")]
    pub backoff_limit_per_index: u32,
}

/// Where the pod sees the inputs and the results.
const INPUTS_MOUNT: &str = "/sweep";
const RESULTS_MOUNT: &str = "/results";
/// What a ConfigMap may hold: the API server refuses objects over 1 MiB; leave room for the rest.
const CONFIGMAP_BYTES: usize = 1_000_000;

/// Prints the Job (and the ConfigMap of inputs) on standard output.
pub(super) fn run(args: &SweepArgs, image: &str) -> Result<()> {
    let text = render(args, image)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).context("cannot write to standard output")
}

/// The manifest: a comment saying how to gather, the ConfigMap unless the inputs are on a claim,
/// then the Job. Paths in the pod are the inputs' paths relative to the current folder.
fn render(args: &SweepArgs, image: &str) -> Result<String> {
    let flags = &args.k8s;
    let sweep = Sweep::load(&args.file, None)?;
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    let inputs = input_files(&sweep, &cwd)?;
    let name = match &flags.job_name {
        Some(name) => name.clone(),
        None => default_name(&args.file),
    };
    check_name("--job-name", &name, 63, false)?;
    if let Some(ns) = &flags.namespace {
        check_name("--namespace", ns, 63, false)?;
    }
    let results_claim = flags.results_pvc.clone().unwrap_or_default();
    check_name("--results-pvc", &results_claim, 253, true)?;
    if let Some(claim) = &flags.inputs_pvc {
        check_name("--inputs-pvc", claim, 253, true)?;
    }
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        bail!("--k8s-indexed-job `{image}`: not a container image reference");
    }
    let count = sweep.spec.points.len();
    let parallelism = flags.parallelism.unwrap_or_else(|| u32::try_from(count.min(16)).unwrap_or(16));
    let file = slash_path(&inputs[0].0);
    let out = format!("{RESULTS_MOUNT}/{name}");
    let labels = BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "trainyard".to_string()),
        ("app.kubernetes.io/component".to_string(), "sweep".to_string()),
        ("trainyard.io/sweep".to_string(), name.clone()),
    ]);
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: flags.namespace.clone(),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    };

    let mut head = String::new();
    writeln!(
        head,
        "# `trainyard sweep {file}` as a Kubernetes Indexed Job: {count} points, one per completion index."
    )?;
    writeln!(head, "# Each pod writes its point's result to {out}/points/ on claim {results_claim}; once the Job has")?;
    writeln!(head, "# completed, mount that claim (at /mnt/results, say) and compare the results with")?;
    writeln!(head, "#   trainyard sweep {file} --gather --out-dir /mnt/results/{name}")?;
    let mut out_text = String::new();
    let (inputs_volume, config_map) = match &flags.inputs_pvc {
        Some(claim) => {
            writeln!(head, "# Claim {claim} must hold these files, at these paths from its root:")?;
            for (path, _) in &inputs {
                writeln!(head, "#   {}", slash_path(path))?;
            }
            let source = PersistentVolumeClaimVolumeSource { claim_name: claim.clone(), read_only: Some(true) };
            (Volume { name: "inputs".into(), persistent_volume_claim: Some(source), ..Volume::default() }, None)
        }
        None => {
            let (config_map, items) = inputs_config_map(&inputs, meta(format!("{name}-inputs")))?;
            let source = ConfigMapVolumeSource {
                name: format!("{name}-inputs"),
                items: Some(items),
                ..ConfigMapVolumeSource::default()
            };
            (Volume { name: "inputs".into(), config_map: Some(source), ..Volume::default() }, Some(config_map))
        }
    };
    out_text.push_str(&head);
    if let Some(config_map) = config_map {
        out_text.push_str("---\n");
        out_text.push_str(&serde_saphyr::to_string(&config_map)?);
    }
    let mut requests = BTreeMap::from([("cpu".to_string(), Quantity(args.task.task_cpus.to_string()))]);
    let mut limits = BTreeMap::new();
    if let Some(mib) = args.task.task_memory_mib {
        requests.insert("memory".into(), Quantity(format!("{mib}Mi")));
        // Memory is a limit too: a point that outgrows it is stopped, not the node's other pods.
        limits.insert("memory".to_string(), Quantity(format!("{mib}Mi")));
    }
    let container = Container {
        name: "sweep".into(),
        image: Some(image.to_string()),
        command: Some(vec!["trainyard".into()]),
        args: Some(vec![
            "sweep".into(),
            file.clone(),
            "--out-dir".into(),
            out.clone(),
            "--point-from-env".into(),
            "JOB_COMPLETION_INDEX".into(),
            "--quiet".into(),
        ]),
        working_dir: Some(INPUTS_MOUNT.into()),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            limits: (!limits.is_empty()).then_some(limits),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "inputs".into(),
                mount_path: INPUTS_MOUNT.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount { name: "results".into(), mount_path: RESULTS_MOUNT.into(), ..VolumeMount::default() },
        ]),
        ..Container::default()
    };
    let results_volume = Volume {
        name: "results".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource { claim_name: results_claim, read_only: None }),
        ..Volume::default()
    };
    let job = Job {
        metadata: meta(name.clone()),
        spec: Some(JobSpec {
            completion_mode: Some("Indexed".into()),
            completions: Some(i32::try_from(count).context("too many points for one Job")?),
            parallelism: Some(i32::try_from(parallelism).unwrap_or(i32::MAX)),
            // A failing point uses up its own retries, not the other points'.
            backoff_limit_per_index: Some(i32::try_from(flags.backoff_limit_per_index).unwrap_or(i32::MAX)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels.clone()), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    // Per-index backoff needs pods that are replaced, not restarted in place.
                    restart_policy: Some("Never".into()),
                    containers: vec![container],
                    volumes: Some(vec![inputs_volume, results_volume]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    };
    out_text.push_str("---\n");
    out_text.push_str(&serde_saphyr::to_string(&job)?);
    Ok(out_text)
}

/// The sweep file, its trace and every cluster and policy file its points read, each once, in
/// that order: (path relative to `cwd`, bytes). An input outside `cwd` cannot be laid out
/// under the pod's inputs folder.
fn input_files(sweep: &Sweep, cwd: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut paths: Vec<PathBuf> = vec![sweep.file.clone()];
    paths.extend(sweep.trace.clone());
    for task in sweep.tasks() {
        paths.extend(task.cluster.clone());
        paths.extend(task.policy_file.clone());
    }
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for path in paths {
        let Some(inside) = relative_inside(cwd, &path) else {
            bail!(
                "{}: outside the current folder {}; run from a folder that holds the sweep file and all its inputs",
                path.display(),
                cwd.display()
            );
        };
        if files.iter().any(|(p, _)| *p == inside) {
            continue;
        }
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        files.push((inside, bytes));
    }
    Ok(files)
}

/// `path` relative to `cwd`, with `.` and `..` resolved by name; `None` when it leads outside.
fn relative_inside(cwd: &Path, path: &Path) -> Option<PathBuf> {
    let mut clean = PathBuf::new();
    for part in cwd.join(path).components() {
        match part {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    clean.strip_prefix(cwd).ok().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf)
}

/// A relative path as the pod sees it, `/` between parts whatever the machine rendering it.
fn slash_path(path: &Path) -> String {
    path.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// The ConfigMap of the inputs (text as `data`, anything else as `binaryData`) and the items
/// that lay them out under the inputs folder at their relative paths.
fn inputs_config_map(inputs: &[(PathBuf, Vec<u8>)], metadata: ObjectMeta) -> Result<(ConfigMap, Vec<KeyToPath>)> {
    let size: usize = inputs.iter().map(|(_, bytes)| bytes.len()).sum();
    if size > CONFIGMAP_BYTES {
        bail!(
            "the sweep file and its inputs are {size} bytes, more than a ConfigMap holds ({CONFIGMAP_BYTES}): copy \
             them onto a volume and pass --inputs-pvc CLAIM"
        );
    }
    let mut data = BTreeMap::new();
    let mut binary = BTreeMap::new();
    let mut items = Vec::new();
    for (i, (path, bytes)) in inputs.iter().enumerate() {
        // Keys allow [-._a-zA-Z0-9] only; the index keeps two files of one name apart.
        let base = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let safe: String =
            base.chars().map(|c| if c.is_ascii_alphanumeric() || "-._".contains(c) { c } else { '_' }).collect();
        let key = format!("{i}-{safe}");
        match String::from_utf8(bytes.clone()) {
            Ok(text) => {
                data.insert(key.clone(), text);
            }
            Err(e) => {
                binary.insert(key.clone(), ByteString(e.into_bytes()));
            }
        }
        items.push(KeyToPath { key, path: slash_path(path), mode: None });
    }
    let config_map = ConfigMap {
        metadata,
        data: (!data.is_empty()).then_some(data),
        binary_data: (!binary.is_empty()).then_some(binary),
        // The Job reads exactly these bytes; a changed sweep is a new ConfigMap and Job.
        immutable: Some(true),
    };
    Ok((config_map, items))
}

/// `sweep-<file name>`, lower case, other characters as `-`, cut to a DNS label.
fn default_name(file: &Path) -> String {
    let stem = file.file_stem().map_or_else(String::new, |s| s.to_string_lossy().to_ascii_lowercase());
    let mut name: String =
        format!("sweep-{stem}").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    // Room for `-inputs` on the ConfigMap and the pods' `-<index>-<suffix>` names is Kubernetes'
    // to make; the Job name itself must be a label of at most 63.
    name.truncate(52);
    name.trim_end_matches('-').to_string()
}

/// A Kubernetes name: a DNS label (or, with `dots`, a DNS subdomain) of at most `max` characters.
fn check_name(flag: &str, name: &str, max: usize, dots: bool) -> Result<()> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let ok = name.len() <= max && if dots { name.split('.').all(label_ok) } else { label_ok(name) };
    if !ok {
        let what = if dots { "a DNS subdomain" } else { "a DNS label" };
        bail!("{flag} `{name}`: not a Kubernetes name ({what}: lower-case letters, digits and `-`, at most {max})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_laid_out_by_their_paths_from_the_current_folder() {
        let cwd = Path::new("/work/repo");
        let inside = |p: &str| relative_inside(cwd, Path::new(p)).map(|p| slash_path(&p));
        assert_eq!(inside("examples/sweeps/../../data/t.csv").as_deref(), Some("data/t.csv"));
        assert_eq!(inside("./a/./b.yaml").as_deref(), Some("a/b.yaml"));
        assert_eq!(inside("/work/repo/x.yaml").as_deref(), Some("x.yaml"));
        assert_eq!(inside("../other/x.yaml"), None);
        assert_eq!(inside("/etc/passwd"), None);
        assert_eq!(default_name(Path::new("sweeps/Helios Sizes.yaml")), "sweep-helios-sizes");
        assert!(check_name("--job-name", "sweep-a1", 63, false).is_ok());
        assert!(check_name("--job-name", "Sweep", 63, false).is_err());
        assert!(check_name("--results-pvc", "data.results", 253, true).is_ok());
        assert!(check_name("--namespace", "a.b", 63, false).is_err());
    }
}
