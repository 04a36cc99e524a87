//! The CRDs committed under charts/trainyard/crds are exactly what `trainyard crds` generates.

use std::path::Path;

#[test]
fn committed_crds_match_the_generated_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/trainyard/crds");
    let bless = std::env::var_os("TRAINYARD_BLESS").is_some();
    let mut stale = Vec::new();
    for (file, crd) in trainyard::crds::all() {
        let want = trainyard::crds::to_yaml(&crd).expect("CRDs serialise");
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
    assert!(stale.is_empty(), "stale CRDs ({}); rerun with TRAINYARD_BLESS=1: {stale:?}", dir.display());
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
    ] {
        assert!(text.contains(&format!("name: {name}\n")), "{name} missing");
    }
    assert_eq!(text.matches("kind: CustomResourceDefinition").count(), 5);
}
