//! The admission trainyard records on a TrainJob: the commit point of a scheduling decision.
//!
//! It is written to the TrainJob's annotations before anything is created, so that a restarted
//! controller reads back every decision it made and neither places a gang twice nor loses its hosts.

use serde::{Deserialize, Serialize};

/// Largest gang a record may describe.
pub const MAX_RECORDED_PODS: u32 = 100_000;

/// Where an admitted gang's pods go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionRecord {
    /// Hosts with their pod counts, in the order pods are bound (by replicated job, job and
    /// completion index).
    pub nodes: Vec<(String, u32)>,
    /// Set when the pods get a domain node selector instead of per-pod binding: the label key and
    /// value of the domain and of each level above it, outermost first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<Vec<(String, String)>>,
    /// Admission time, seconds since the Unix epoch.
    pub at: u64,
    /// Placement cost under trainyard's cost model when it was decided.
    #[serde(default)]
    pub cost: u64,
    /// Placed on the Slurm cluster (the gang runs as a Slurm job), not on Kubernetes nodes. Where
    /// a gang runs follows its record, not its queue of the moment.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slurm: bool,
    /// The DRA devices the engine gave the pods that carry claims, by slot. Written to the pods'
    /// claims before their gates go in allocate mode; in either mode a restarted controller holds
    /// them again. Left out (kube-scheduler then allocates) when they would make the record
    /// longer than [`MAX_DEVICE_RECORD_BYTES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<SlotDevices>,
}

/// Longest record that carries devices: annotations share 256 KiB per object.
pub const MAX_DEVICE_RECORD_BYTES: usize = 160 * 1024;

/// The devices of one pod of the gang.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotDevices {
    /// The pod's ordinal in the gang.
    pub slot: u32,
    /// One entry per claim: the template (`namespace/name`) and its results, each
    /// `[request, driver, pool, device]` as in `status.allocation.devices.results`.
    pub claims: Vec<(String, Vec<[String; 4]>)>,
}

impl AdmissionRecord {
    /// The annotation value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a record of strings and numbers serialises")
    }

    /// Reads an annotation value back; `None` for anything this version did not write, including
    /// a record with no pods or more than [`MAX_RECORDED_PODS`] (anyone who may annotate the
    /// TrainJob can write one, and the slots are expanded in memory).
    pub fn decode(text: &str) -> Option<AdmissionRecord> {
        let record: AdmissionRecord = serde_json::from_str(text).ok()?;
        let total = record.nodes.iter().try_fold(0u32, |sum, (_, n)| sum.checked_add(*n))?;
        (total > 0 && total <= MAX_RECORDED_PODS && record.nodes.iter().all(|(_, n)| *n > 0)).then_some(record)
    }

    /// One host per pod, in binding order.
    pub fn slots(&self) -> Vec<&str> {
        self.nodes.iter().flat_map(|(n, c)| std::iter::repeat_n(n.as_str(), *c as usize)).collect()
    }

    /// Pods placed.
    pub fn pods(&self) -> u32 {
        self.nodes.iter().map(|(_, c)| c).sum()
    }

    /// The devices recorded for the pod of ordinal `slot`.
    pub fn devices_of(&self, slot: u32) -> Option<&SlotDevices> {
        self.devices.binary_search_by_key(&slot, |d| d.slot).ok().map(|i| &self.devices[i])
    }

    /// Drops the devices when the record would grow too long with them.
    pub fn bounded(mut self) -> AdmissionRecord {
        if !self.devices.is_empty() && self.encode().len() > MAX_DEVICE_RECORD_BYTES {
            self.devices.clear();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_expand_in_order() {
        let r = AdmissionRecord {
            nodes: vec![("b".into(), 2), ("a".into(), 1)],
            domain: None,
            at: 7,
            cost: 3,
            slurm: false,
            devices: Vec::new(),
        };
        assert_eq!(AdmissionRecord::decode(&r.encode()), Some(r.clone()));
        assert_eq!(r.slots(), vec!["b", "b", "a"]);
        assert_eq!(r.pods(), 3);
        assert_eq!(AdmissionRecord::decode("{not json"), None);
        assert_eq!(AdmissionRecord::decode(r#"{"nodes":[["n1",4294967295]],"at":0}"#), None);
        assert_eq!(AdmissionRecord::decode(r#"{"nodes":[["n1",4294967295],["n2",2]],"at":0}"#), None);
        assert_eq!(AdmissionRecord::decode(r#"{"nodes":[],"at":0}"#), None);
    }
}
