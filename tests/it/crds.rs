//! The CRDs committed under charts/trainyard/crds (trainyard's kinds) and charts/trainer-crds/crds
//! (Trainer's, installed only where Trainer is not) are exactly what `trainyard crds` generates.

use std::path::Path;

#[test]
fn committed_crds_match_the_generated_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("TRAINYARD_BLESS").is_some();
    let mut stale = Vec::new();
    for (file, crd) in trainyard::crds::all() {
        let want = trainyard::crds::to_yaml(&crd).expect("CRDs serialise");
        let dir = root.join(trainyard::crds::chart_dir(file));
        let path = dir.join(file);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{file} differs")),
            Err(e) => stale.push(format!("{file}: {e}")),
        }
    }
    assert!(stale.is_empty(), "stale CRDs; rerun with TRAINYARD_BLESS=1: {stale:?}");
    // trainyard's chart never carries Trainer's CRDs: Helm would apply them over Trainer's own.
    let own = std::fs::read_dir(root.join("charts/trainyard/crds")).unwrap();
    let trainer: Vec<_> =
        own.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("trainer.")).collect();
    assert!(trainer.is_empty(), "Trainer CRDs in charts/trainyard/crds: {trainer:?}");
}

#[test]
fn the_cli_prints_every_crd() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trainyard")).arg("crds").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "queues.trainyard.io",
        "topologies.trainyard.io",
        "trainjobs.trainer.kubeflow.org",
        "trainingruntimes.trainer.kubeflow.org",
        "clustertrainingruntimes.trainer.kubeflow.org",
        "optimizationjobs.trainer.kubeflow.org",
        "workerclusters.trainyard.io",
    ] {
        assert!(text.contains(&format!("name: {name}\n")), "{name} missing");
    }
    assert_eq!(text.matches("kind: CustomResourceDefinition").count(), 7);
}
