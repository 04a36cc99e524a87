//! Slices: a gang of 8 asks for one block, cut into slices of 4 pods each inside one rack. One
//! rack of the first block is short of a host (a foreign pod holds it), so both slices go to the
//! second block, each slice whole inside a rack, and every pod is bound where recorded.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use crate::Options;
use crate::suite::{Checks, Suite, secs};
use crate::world::{BLOCK, RACK, World};

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "slc").await?;
    let made = w.grid(2, 2, 4).await?;
    let queue = w.queue("team", 256, None).await?;
    w.torch_runtime().await?;
    w.kube()
        .create(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "holder", "namespace": w.ns},
            "spec": {"nodeName": made[0].name, "containers": [{"name": "c", "image": "example.org/other:1",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        }))
        .await?;
    w.start_trainyard(&[]).await?;
    let mut job = w.trainjob("sliced", &queue, 8, 8);
    job["metadata"]["annotations"] = json!({
        "kueue.x-k8s.io/podset-required-topology": BLOCK,
        "kueue.x-k8s.io/podset-slice-required-topology": RACK,
        "kueue.x-k8s.io/podset-slice-size": "4",
    });
    w.submit(&[job]).await?;
    let took = w.wait_admitted(&["sliced".into()], Duration::from_secs(30)).await?;
    let slots = w.slots("sliced").await?;
    let label = |node: &str, key: &str| {
        w.nodes.iter().find(|n| n.name == node).and_then(|n| n.labels.get(key).cloned()).unwrap_or_default()
    };
    let blocks: BTreeSet<String> = slots.iter().map(|n| label(n, BLOCK)).collect();
    c.that(
        blocks.len() == 1 && blocks.contains(&format!("{}-b1", w.tag)),
        format!("the gang is in block b1 (got {blocks:?})"),
    )?;
    for (i, slice) in slots.chunks(4).enumerate() {
        let racks: BTreeSet<String> = slice.iter().map(|n| label(n, RACK)).collect();
        c.that(racks.len() == 1, format!("slice {i} (pods {}..{}) is in one rack: {racks:?}", i * 4, i * 4 + 3))?;
    }
    let bound = w.wait_bound_as_recorded("sliced", 8, Duration::from_secs(60)).await?;
    c.done();
    c.figure(format!("8 pods in 2 rack slices of one block admitted in {}, bound in {} more", secs(took), secs(bound)));
    w.teardown().await?;
    Ok(c)
}
