//! How `trainyard render` prints what it rendered: the manifests themselves (YAML, or the batch
//! script of a Slurm gang) by default, a JSON `List`, or a table of the objects and their pods.

use std::io::Write as _;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use trainyard::controller::acting::admission_record::AdmissionRecord;

use crate::output::{Output, structured, table};

/// Everything `render` found, before it is printed.
pub struct Rendering {
    /// Notes and the admission, printed as `#` comments before YAML.
    pub comments: Vec<String>,
    /// The admission, when the TrainJob was placed (`--topology`).
    pub record: Option<AdmissionRecord>,
    /// Each gang pod's node, when the placement names nodes (not a node selector).
    pub bindings: Vec<Binding>,
    pub body: Body,
}

/// What would be created.
pub enum Body {
    /// Kubernetes objects, with the pods the first one (the workload) starts.
    Objects { objects: Vec<Value>, pods: u64 },
    /// The batch script of a Slurm job, and its TrainJob as `namespace/name`.
    Sbatch { script: String, name: String },
}

/// One gang pod and its node.
#[derive(Debug, Serialize)]
pub struct Binding {
    pub pod: String,
    pub node: String,
    /// Its chip on a TPU torus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

impl Binding {
    /// `pod` on `node`, off any torus.
    pub fn on(pod: String, node: &str) -> Binding {
        Binding { pod, node: node.to_string(), at: None }
    }
}

/// A Slurm gang as the structured formats print it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SlurmOut<'a> {
    comments: &'a [String],
    nodes: Vec<NodeOut<'a>>,
    placement_cost: u64,
    script: &'a str,
}

#[derive(Serialize)]
struct NodeOut<'a> {
    name: &'a str,
    pods: u32,
}

/// Prints `rendering` in `output`; `None` is the manifests as they are.
pub fn print(rendering: &Rendering, output: Option<Output>) -> Result<()> {
    let text = match output {
        None | Some(Output::Yaml) if matches!(rendering.body, Body::Objects { .. }) => manifests(rendering)?,
        None => comment_lines(&rendering.comments) + body_text(&rendering.body)?.as_str(),
        Some(Output::Json | Output::Yaml) => document(rendering, output.unwrap_or_default())?,
        Some(Output::Table) => overview(rendering),
        Some(Output::Wide) => {
            let mut text = overview(rendering);
            if !rendering.bindings.is_empty() {
                text.push('\n');
                // The chip column only where some node sits on a TPU torus.
                let tori = rendering.bindings.iter().any(|b| b.at.is_some());
                let rows: Vec<Vec<String>> = rendering
                    .bindings
                    .iter()
                    .map(|b| {
                        let mut row = vec![b.pod.clone(), b.node.clone()];
                        if tori {
                            row.push(b.at.clone().unwrap_or_else(|| "-".into()));
                        }
                        row
                    })
                    .collect();
                let header = if tori { &["POD", "NODE", "TORUS CHIP"][..] } else { &["POD", "NODE"][..] };
                text.push_str(&table(header, &rows));
            }
            text
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    Ok(())
}

/// The comment lines, the bindings among them, then each object as a YAML document.
fn manifests(rendering: &Rendering) -> Result<String> {
    let mut text = comment_lines(&rendering.comments);
    for b in &rendering.bindings {
        match &b.at {
            Some(at) => text.push_str(&format!("# pod {} -> {} ({at})\n", b.pod, b.node)),
            None => text.push_str(&format!("# pod {} -> {}\n", b.pod, b.node)),
        }
    }
    text.push_str(&body_text(&rendering.body)?);
    Ok(text)
}

fn comment_lines(comments: &[String]) -> String {
    comments.iter().map(|c| format!("# {c}\n")).collect()
}

fn body_text(body: &Body) -> Result<String> {
    Ok(match body {
        Body::Objects { objects, .. } => {
            let mut text = String::new();
            for object in objects {
                text.push_str("---\n");
                text.push_str(&serde_saphyr::to_string(object)?);
            }
            text
        }
        Body::Sbatch { script, .. } => script.clone(),
    })
}

/// JSON or YAML for scripts: Kubernetes objects as a `v1` `List` (which `kubectl apply -f`
/// takes; the comments, which a List has no place for, go to standard error); a Slurm gang as
/// its nodes and script.
fn document(rendering: &Rendering, output: Output) -> Result<String> {
    match &rendering.body {
        Body::Objects { objects, .. } => {
            let mut stderr = std::io::stderr().lock();
            stderr.write_all(comment_lines(&rendering.comments).as_bytes())?;
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            structured(&list, output)
        }
        Body::Sbatch { script, .. } => {
            let record = rendering.record.as_ref();
            let nodes = record.map(|r| r.nodes.iter().map(|(name, pods)| NodeOut { name, pods: *pods }).collect());
            let slurm = SlurmOut {
                comments: &rendering.comments,
                nodes: nodes.unwrap_or_default(),
                placement_cost: record.map_or(0, |r| r.cost),
                script,
            };
            structured(&slurm, output)
        }
    }
}

/// `-o table`: the admission, then one row per object to be created.
fn overview(rendering: &Rendering) -> String {
    let mut text: String = rendering.comments.iter().map(|c| format!("{c}\n")).collect();
    let nodes = match &rendering.record {
        None => "-".to_string(),
        Some(r) if r.domain.is_some() => "node selector".to_string(),
        Some(r) => r.nodes.len().to_string(),
    };
    let rows: Vec<Vec<String>> = match &rendering.body {
        Body::Objects { objects, pods } => objects
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let (pods, nodes) = if i == 0 { (pods.to_string(), nodes.clone()) } else { ("-".into(), "-".into()) };
                let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
                let meta = &o["metadata"];
                vec![text(&o["kind"]), text(&meta["name"]), text(&meta["namespace"]), pods, nodes]
            })
            .collect(),
        Body::Sbatch { name, .. } => {
            let pods = rendering.record.as_ref().map_or(0, AdmissionRecord::pods);
            let (namespace, name) = name.split_once('/').unwrap_or(("-", name));
            vec![vec!["SlurmJob".into(), name.into(), namespace.into(), pods.to_string(), nodes]]
        }
    };
    text.push_str(&table(&["KIND", "NAME", "NAMESPACE", "PODS", "NODES"], &rows));
    text
}
