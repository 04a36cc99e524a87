//! Hosts lost under running gangs: which gangs lost which hosts since when, and the policy's
//! action once a host has stayed lost past the grace (see `config/node_loss.rs`).
//!
//! A host is lost to a gang when it is no longer usable (cordoned, not ready, removed) or when
//! it carries a `NoExecute` taint the gang does not tolerate (its pods are being evicted). The
//! gang keeps the host charged either way until it ends, is requeued, or moves off it.

use trainyard_topology::{HostId, PlacementFailure};

use crate::gangs::record::GangState;
use crate::state::State;
use crate::{Cycle, NodeLoss, Replacement};
use crate::{GangId, NodeLossAction, PendingReason, Result};

/// A lost host's pods of one set moved: (lost host, set, new hosts, GPU indices, devices).
type Move = (HostId, usize, Vec<HostId>, Vec<u64>, Vec<Option<trainyard_topology::devices::PodAllocation>>);

/// Requeues or moves the running gangs whose lost hosts' grace ran out by `now`.
pub(crate) fn act_on_lost_hosts(s: &mut State, now: u64, cycle: &mut Cycle) -> Result<()> {
    let policy = s.config.node_loss;
    if policy.action == NodeLossAction::Wait {
        return Ok(());
    }
    let due: Vec<(GangId, Vec<HostId>)> = s
        .lost
        .iter()
        .map(|(id, hosts)| {
            let expired: Vec<HostId> =
                hosts.iter().filter(|(_, t)| t.saturating_add(policy.grace_s) <= now).map(|(h, _)| *h).collect();
            (*id, expired)
        })
        .filter(|(_, hosts)| !hosts.is_empty())
        .collect();
    for (id, hosts) in due {
        let replaced = policy.action == NodeLossAction::Replace && replace_hosts(s, id, &hosts, now, cycle)?;
        if !replaced {
            requeue_lost(s, id, hosts, now, cycle)?;
        }
    }
    Ok(())
}

fn requeue_lost(s: &mut State, id: GangId, hosts: Vec<HostId>, now: u64, cycle: &mut Cycle) -> Result<()> {
    s.unrun(id, now)?;
    // Not again in this cycle: its pods still run until the caller stops them.
    s.gangs.back_off(id, now + 1);
    let names = hosts.iter().map(|&h| host_label(s, h)).collect();
    s.set_status(id, PendingReason::NodeLost { hosts: names }, None);
    cycle.requeued.push(NodeLoss { gang: id, hosts });
    Ok(())
}

/// A host's name for messages (`#n` once it left the cluster).
pub(crate) fn host_label(s: &State, host: HostId) -> String {
    let topo = s.cluster.topology();
    if topo.is_host(host) { topo.host_name(host).to_string() } else { format!("#{}", host.0) }
}

/// Moves the pods of each lost host to free hosts inside the gang's required domain (the
/// smallest domain holding the gang first), each pod set's pods with their own shape. All or
/// nothing: `false` leaves the gang as it was.
fn replace_hosts(s: &mut State, id: GangId, lost: &[HostId], now: u64, cycle: &mut Cycle) -> Result<bool> {
    let gang = &s.gangs[&id];
    let GangState::Running { placement, .. } = &gang.state else { return Ok(false) };
    let (mut placement, demand) = (trainyard_topology::Placement::clone(placement), gang.demand.clone());
    let topo = s.cluster.topology();
    let top = topo.ancestor_at(placement.domain, demand.constraint().top_depth.min(placement.depth));
    let txn = s.cluster.begin();
    // (lost host, set, new hosts of that set's pods there, in pod order, their GPU indices and
    // their devices)
    let mut moves: Vec<Move> = Vec::new();
    for &host in lost {
        for k in 0..placement.sets.len() {
            let pods = placement.set_hosts(k).iter().filter(|&&h| h == host).count() as u32;
            if pods == 0 {
                continue;
            }
            let Some(single) = demand.set_request(k, pods) else {
                s.cluster.rollback(txn);
                return Ok(false);
            };
            let found: std::result::Result<_, PlacementFailure> = s.cluster.place_within(&single, top);
            let Ok(mut found) = found else {
                s.cluster.rollback(txn);
                return Ok(false);
            };
            if s.cluster.allocate_placement(&mut found).is_err() {
                s.cluster.rollback(txn);
                return Ok(false);
            }
            moves.push((host, k, found.hosts, found.gpus, found.devices));
        }
    }
    s.cluster.commit(txn);
    // The new hosts are charged; now the lost ones are released and the placement rewritten.
    let mut by_host: Vec<(HostId, Vec<HostId>)> = Vec::new();
    let pods = placement.hosts.len();
    if placement.gpus.is_empty() && moves.iter().any(|m| !m.3.is_empty()) {
        placement.gpus = vec![0; pods];
    }
    if placement.devices.is_empty() && moves.iter().any(|m| !m.4.is_empty()) {
        placement.devices = vec![None; pods];
    }
    for (host, k, with, gpus, devices) in moves {
        let pod = placement.sets[k].pod;
        let amount = pod.checked_mul(with.len() as u64).unwrap_or(pod);
        let start: usize = placement.sets[..k].iter().map(|s| s.pods as usize).sum();
        let len = placement.sets[k].pods as usize;
        let moved: Vec<usize> = (start..start + len).filter(|&i| placement.hosts[i] == host).collect();
        let old_gpus = moved.iter().fold(0u64, |m, &i| m | placement.gpus.get(i).copied().unwrap_or(0));
        s.cluster.release_pods(host, amount, old_gpus)?;
        let old_devices: Vec<_> = moved.iter().filter_map(|&i| placement.devices.get(i).cloned().flatten()).collect();
        s.cluster.release_devices(host, &old_devices);
        for (j, &i) in moved.iter().enumerate() {
            placement.hosts[i] = with[j];
            if let Some(g) = placement.gpus.get_mut(i) {
                *g = gpus.get(j).copied().unwrap_or(0);
            }
            if let Some(d) = placement.devices.get_mut(i) {
                *d = devices.get(j).cloned().flatten();
            }
        }
        match by_host.last_mut() {
            Some((last, all)) if *last == host => all.extend(with),
            _ => by_host.push((host, with)),
        }
    }
    for (host, with) in by_host {
        let hosts = std::mem::take(&mut placement.hosts);
        let (layout, gpus) = (placement.layout, std::mem::take(&mut placement.gpus));
        let (device_fit, devices) = (placement.device_fit, std::mem::take(&mut placement.devices));
        placement = s.cluster.recorded_placement(&placement.sets, hosts).expect("a gang has pods");
        (placement.layout, placement.gpus) = (layout, gpus);
        (placement.device_fit, placement.devices) = (device_fit, devices);
        s.move_running(id, host, &placement);
        cycle.replaced.push(Replacement { gang: id, lost: host, with, placement: placement.clone() });
    }
    s.refresh_lost(id, now);
    s.cluster.reap();
    Ok(true)
}
