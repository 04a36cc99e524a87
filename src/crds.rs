//! The CustomResourceDefinitions trainyard serves or needs, rendered as YAML.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{ClusterTrainingRuntime, OptimizationJob, Queue, Topology, TrainJob, TrainingRuntime, WorkerCluster};

/// Every CRD, with the file name the chart keeps it under.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("trainyard.io_queues.yaml", Queue::crd()),
        ("trainyard.io_topologies.yaml", Topology::crd()),
        ("trainyard.io_workerclusters.yaml", WorkerCluster::crd()),
        ("trainer.kubeflow.org_trainjobs.yaml", TrainJob::crd()),
        ("trainer.kubeflow.org_trainingruntimes.yaml", TrainingRuntime::crd()),
        ("trainer.kubeflow.org_clustertrainingruntimes.yaml", ClusterTrainingRuntime::crd()),
        ("trainer.kubeflow.org_optimizationjobs.yaml", OptimizationJob::crd()),
    ]
}

/// The chart a CRD file is committed in: trainyard's own kinds in `charts/trainyard/crds`
/// (installed with trainyard); Kubeflow Trainer's in `charts/trainer-crds/crds`, a chart of
/// their own for clusters without Trainer, so that trainyard's chart never applies them over the
/// ones a Trainer installation owns.
pub fn chart_dir(file: &str) -> &'static str {
    if file.starts_with("trainer.kubeflow.org_") { "charts/trainer-crds/crds" } else { "charts/trainyard/crds" }
}

/// One CRD as a YAML document.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(crd)
}

/// All CRDs as one multi-document YAML stream, in [`all`]'s order.
pub fn render_all() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for (_, crd) in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
