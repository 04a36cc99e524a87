//! The pool view: ResourceSlices grouped into pools, the devices of complete pools with their
//! qualified attributes, parsed capacities, counters and taints, and which nodes reach them.
//!
//! Rules (as the upstream allocator): a pool is (driver, pool name); only slices of its highest
//! `generation` count; it is complete when that many slices equal `resourceSliceCount`.
//! Incomplete pools are reported and their devices never used. `nodeSelector` and
//! `perDeviceNodeSelection` need Node labels, which this view does not have yet: such slices are
//! reported as not supported, never silently dropped.

use std::collections::BTreeMap;
use std::fmt;

use super::node_selector::node_selector_terms;
use super::objects::{AttributeValue, DeviceTaint, ResourceSlice, ValueOf};
use crate::eligibility::{HostAttrs, SelectorTerm};
use crate::sources::k8s_nodes::quantity::{Quantity, parse_quantity};

/// The standard attribute naming a device's PCIe root complex.
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// The standard attribute naming a device's NUMA node (1.37).
pub const NUMA_NODE: &str = "resource.kubernetes.io/numaNode";
/// The node label GPU Feature Discovery sets to the NVLink clique; some drivers also publish it
/// as a device attribute.
pub const NVLINK_CLIQUE: &str = "nvidia.com/gpu.clique";

/// A device's identity: `<driver>/<pool>/<device>`. Ordered by driver, pool, then device name
/// with digit runs compared as numbers, so `gpu-2` comes before `gpu-10`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId {
    /// Driver.
    pub driver: String,
    /// Pool.
    pub pool: String,
    /// Device name.
    pub device: String,
}

impl DeviceId {
    /// An id from its three parts.
    pub fn new(driver: &str, pool: &str, device: &str) -> DeviceId {
        DeviceId { driver: driver.to_string(), pool: pool.to_string(), device: device.to_string() }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

impl Ord for DeviceId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        natural(&self.driver, &other.driver)
            .then_with(|| natural(&self.pool, &other.pool))
            .then_with(|| natural(&self.device, &other.device))
    }
}

impl PartialOrd for DeviceId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Compares with runs of digits as numbers; equal-valued runs fall back to the text so that the
/// order stays total (`a01` and `a1` differ).
fn natural(a: &str, b: &str) -> std::cmp::Ordering {
    if a == b {
        return std::cmp::Ordering::Equal;
    }
    // Skip the common prefix, backing up to the start of the digit run the first difference
    // falls in (numbers compare whole); what comes before compares equal.
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let common = x.iter().zip(y).take_while(|(p, q)| p == q).count();
    let start = x[..common].iter().rposition(|c| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    natural_from(&x[start..], &y[start..], a, b)
}

fn natural_from(x: &[u8], y: &[u8], a: &str, b: &str) -> std::cmp::Ordering {
    let (mut x, mut y) = (x, y);
    while let (Some(&p), Some(&q)) = (x.first(), y.first()) {
        if p.is_ascii_digit() && q.is_ascii_digit() {
            let (dx, dy) = (digit_run(x), digit_run(y));
            let (nx, ny) = (trim_zeros(&x[..dx]), trim_zeros(&y[..dy]));
            let order = nx.len().cmp(&ny.len()).then_with(|| nx.cmp(ny));
            if order.is_ne() {
                return order;
            }
            (x, y) = (&x[dx..], &y[dy..]);
        } else {
            if p != q {
                return p.cmp(&q);
            }
            (x, y) = (&x[1..], &y[1..]);
        }
    }
    x.len().cmp(&y.len()).then_with(|| a.cmp(b))
}

fn digit_run(text: &[u8]) -> usize {
    text.iter().position(|b| !b.is_ascii_digit()).unwrap_or(text.len())
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&d| d == b'0').count();
    &digits[zeros..]
}

/// A pool's key: (driver, pool).
pub type PoolKey = (String, String);

/// Counter key inside a pool: (counter set, counter).
pub type CounterKey = (String, String);

/// One device of a complete pool, ready for selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Device {
    /// Identity.
    pub id: DeviceId,
    /// Fully qualified attribute name -> value.
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Fully qualified capacity name -> amount.
    pub capacity: BTreeMap<String, Quantity>,
    /// Counters taken from the pool's shared counter sets, in thousandths.
    pub consumes: BTreeMap<CounterKey, u64>,
    /// Taints.
    pub taints: Vec<DeviceTaint>,
    /// The node it is on; `None` when every node reaches it (`allNodes`).
    pub node: Option<String>,
}

impl Device {
    /// A fully qualified attribute.
    pub fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes.get(name)
    }

    /// The PCIe root, when published.
    pub fn pcie_root(&self) -> Option<&str> {
        match self.attributes.get(PCIE_ROOT) {
            Some(AttributeValue::String(root)) => Some(root),
            _ => None,
        }
    }

    /// The NUMA node: the standard attribute, else the driver's own `numa` (NVIDIA's VFIO devices).
    pub fn numa_node(&self) -> Option<i64> {
        let own = format!("{}/numa", self.id.driver);
        match self.attributes.get(NUMA_NODE).or_else(|| self.attributes.get(&own)) {
            Some(AttributeValue::Int(numa)) => Some(*numa),
            _ => None,
        }
    }

    /// The NVLink clique, when a driver publishes it as an attribute (NVIDIA's does not yet; the
    /// node label carries it).
    pub fn nvlink_clique(&self) -> Option<&str> {
        let own = format!("{}/clique", self.id.driver);
        match self.attributes.get(NVLINK_CLIQUE).or_else(|| self.attributes.get(&own)) {
            Some(AttributeValue::String(clique)) => Some(clique),
            _ => None,
        }
    }
}

/// A pool at its highest generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Driver.
    pub driver: String,
    /// Pool name.
    pub name: String,
    /// Highest generation seen.
    pub generation: i64,
    /// Slices the pool says it has.
    pub slice_count: i64,
    /// Slices seen at that generation.
    pub slices_seen: i64,
    /// Why the pool cannot be used although complete (a device name listed twice), as upstream
    /// skips invalid pools.
    pub invalid: Option<String>,
    /// Node-local pools: the node; `None` for `allNodes` and `nodeSelector` pools.
    pub node: Option<String>,
    /// `nodeSelector` pools: the terms, any of which a node must match.
    pub selector: Option<Vec<SelectorTerm>>,
    /// `nodeSelector` pools: the nodes that match, in name order ([`PoolView::select_nodes`];
    /// none until then).
    pub selected: Vec<String>,
    /// Shared counters available: (set, counter) -> amount in thousandths.
    pub counters: BTreeMap<CounterKey, u64>,
    /// Devices, in id order (empty for an incomplete pool).
    pub devices: Vec<Device>,
}

impl Pool {
    /// Whether every slice of the pool is seen.
    pub fn complete(&self) -> bool {
        self.slices_seen == self.slice_count
    }

    /// Whether its devices may be allocated: complete and valid.
    pub fn usable(&self) -> bool {
        self.complete() && self.invalid.is_none()
    }

    /// Whether `node` reaches the pool at all.
    pub fn reaches(&self, node: &str) -> bool {
        match (&self.node, &self.selector) {
            (Some(own), _) => own == node,
            (None, Some(_)) => self.selected.binary_search_by(|n| n.as_str().cmp(node)).is_ok(),
            (None, None) => true,
        }
    }
}

/// Which pools each node reaches ([`PoolView::reach`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// Per node, its own pools and the `nodeSelector` pools it matches.
    pub by_node: BTreeMap<String, Vec<PoolKey>>,
    /// `allNodes` pools.
    pub shared: Vec<PoolKey>,
    /// `nodeSelector` pools: reached by the nodes they select.
    pub selected: Vec<PoolKey>,
}

/// Something the view left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolReport {
    /// `driver/pool`, or `driver/pool/device` for one device.
    pub subject: String,
    /// Why.
    pub reason: String,
}

/// Every pool, keyed by (driver, pool).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolView {
    /// Pools (complete or not).
    pub pools: BTreeMap<(String, String), Pool>,
    /// What was left out.
    pub reports: Vec<PoolReport>,
}

/// The devices one node can reach: devices of complete pools, and whether some pool it reaches is
/// incomplete (which makes `All` requests fail).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostDevices<'a> {
    /// The node.
    pub node: String,
    /// Devices in id order.
    pub devices: Vec<&'a Device>,
    /// Incomplete (or invalid) pools the node reaches, as `driver/pool`.
    pub incomplete: Vec<String>,
}

impl PoolView {
    /// Groups slices into pools. Never fails: what cannot be used is reported.
    pub fn build(slices: &[ResourceSlice]) -> PoolView {
        let mut view = PoolView::default();
        let mut newest: BTreeMap<(String, String), i64> = BTreeMap::new();
        for slice in slices {
            let key = (slice.driver.clone(), slice.pool.name.clone());
            let generation = newest.entry(key).or_insert(slice.pool.generation);
            *generation = (*generation).max(slice.pool.generation);
        }
        for slice in slices {
            let key = (slice.driver.clone(), slice.pool.name.clone());
            if newest.get(&key) != Some(&slice.pool.generation) {
                continue;
            }
            let subject = format!("{}/{}", slice.driver, slice.pool.name);
            let mut selector = None;
            let reach = if let Some(raw) = &slice.node_selector {
                match node_selector_terms(raw) {
                    Ok(terms) => {
                        selector = Some(terms);
                        Ok(None)
                    }
                    Err(e) => Err(format!("nodeSelector: {e}")),
                }
            } else if slice.per_device_node_selection {
                Err("perDeviceNodeSelection slices are not supported yet".to_string())
            } else if let Some(node) = &slice.node_name {
                Ok(Some(node.clone()))
            } else if slice.all_nodes {
                Ok(None)
            } else if slice.devices.is_empty() {
                // A slice of shared counters only: reach comes from the device slices.
                Ok(None)
            } else {
                Err("the slice names no node (nodeName, allNodes, nodeSelector or perDeviceNodeSelection)".to_string())
            };
            let pool = view.pools.entry(key).or_insert_with(|| Pool {
                driver: slice.driver.clone(),
                name: slice.pool.name.clone(),
                generation: slice.pool.generation,
                slice_count: slice.pool.resource_slice_count,
                slices_seen: 0,
                invalid: None,
                node: None,
                selector: None,
                selected: Vec::new(),
                counters: BTreeMap::new(),
                devices: Vec::new(),
            });
            pool.slices_seen += 1;
            let reach = match reach {
                Ok(reach) => reach,
                Err(reason) => {
                    let reason = format!("slice {}: {reason}; its devices are left out", slice.name);
                    view.reports.push(PoolReport { subject, reason });
                    continue;
                }
            };
            if reach.is_some() {
                pool.node = reach.clone();
            }
            if selector.is_some() {
                pool.selector = selector;
            }
            for set in &slice.shared_counters {
                for (counter, amount) in &set.counters {
                    match thousandths(amount) {
                        Some(value) => {
                            pool.counters.insert((set.name.clone(), counter.clone()), value);
                        }
                        None => view.reports.push(PoolReport {
                            subject: subject.clone(),
                            reason: format!("counter {}/{counter}: {:?} is not a quantity", set.name, amount.value),
                        }),
                    }
                }
            }
            for device in &slice.devices {
                match read_device(&slice.driver, &slice.pool.name, device, reach.clone()) {
                    Ok(device) => pool.devices.push(device),
                    Err(reason) => view.reports.push(PoolReport {
                        subject: format!("{subject}/{}", device.name),
                        reason: format!("{reason}; device left out"),
                    }),
                }
            }
        }
        for pool in view.pools.values_mut() {
            pool.devices.sort_by(|a, b| a.id.cmp(&b.id));
            let subject = format!("{}/{}", pool.driver, pool.name);
            if let Some(twice) = pool.devices.windows(2).find(|w| w[0].id == w[1].id) {
                pool.invalid = Some(format!("device {} is listed twice", twice[0].id.device));
            }
            if !pool.complete() {
                let reason = format!(
                    "incomplete: {} of {} slices of generation {} seen; its devices are not used",
                    pool.slices_seen, pool.slice_count, pool.generation
                );
                view.reports.push(PoolReport { subject, reason });
                pool.devices.clear();
            } else if let Some(invalid) = &pool.invalid {
                view.reports
                    .push(PoolReport { subject, reason: format!("invalid: {invalid}; its devices are not used") });
                pool.devices.clear();
            } else {
                // A device that takes from a counter set the pool does not publish can never be
                // allocated; say so rather than let it silently never match.
                for device in &pool.devices {
                    if let Some((set, counter)) = device.consumes.keys().find(|k| !pool.counters.contains_key(*k)) {
                        view.reports.push(PoolReport {
                            subject: format!("{subject}/{}", device.id.device),
                            reason: format!(
                                "consumes counter {set}/{counter}, which the pool does not publish; never allocatable"
                            ),
                        });
                    }
                }
            }
        }
        view
    }

    /// The devices `node` reaches, in id order (every pool looked at: see [`PoolView::host_in`]).
    pub fn host(&self, node: &str) -> HostDevices<'_> {
        self.host_in(node, self.pools.keys())
    }

    /// The pools each node reaches, for [`PoolView::host_in`]: `host()` scans every pool, which
    /// a cluster of a thousand node-local pools cannot afford per host.
    pub fn reach(&self) -> Reach {
        let mut reach = Reach::default();
        for (key, pool) in &self.pools {
            match (&pool.node, &pool.selector) {
                (Some(node), _) => reach.by_node.entry(node.clone()).or_default().push(key.clone()),
                (None, Some(_)) => {
                    for node in &pool.selected {
                        reach.by_node.entry(node.clone()).or_default().push(key.clone());
                    }
                    reach.selected.push(key.clone());
                }
                (None, None) => reach.shared.push(key.clone()),
            }
        }
        reach
    }

    /// Decides which of `nodes` each `nodeSelector` pool reaches (by labels and name); returns
    /// the pools that reach none of them.
    pub fn select_nodes(&mut self, nodes: &[HostAttrs]) -> Vec<PoolReport> {
        let mut reports = Vec::new();
        for pool in self.pools.values_mut() {
            let Some(terms) = &pool.selector else { continue };
            let mut selected: Vec<String> =
                nodes.iter().filter(|n| terms.iter().any(|t| t.matches(n))).map(|n| n.node_name.clone()).collect();
            selected.sort();
            if selected.is_empty() {
                let subject = format!("{}/{}", pool.driver, pool.name);
                reports.push(PoolReport { subject, reason: "its nodeSelector matches no node of the cluster".into() });
            }
            pool.selected = selected;
        }
        reports
    }

    /// [`PoolView::host`] over the pools `keys` only (as [`PoolView::reach`] lists them).
    pub fn host_in<'k>(&self, node: &str, keys: impl IntoIterator<Item = &'k PoolKey>) -> HostDevices<'_> {
        let mut host = HostDevices { node: node.to_string(), ..HostDevices::default() };
        // Pools in device id order, so their devices (each pool's sorted) come out sorted.
        let mut pools: Vec<&Pool> = keys.into_iter().filter_map(|k| self.pools.get(k)).collect();
        pools.sort_by(|a, b| natural(&a.driver, &b.driver).then_with(|| natural(&a.name, &b.name)));
        for pool in pools {
            let reaches = |n: &Option<String>| n.as_deref().is_none_or(|n| n == node);
            if !pool.reaches(node) {
                continue;
            }
            if !pool.usable() {
                if reaches(&pool.node) {
                    host.incomplete.push(format!("{}/{}", pool.driver, pool.name));
                }
                continue;
            }
            host.devices.extend(pool.devices.iter().filter(|d| reaches(&d.node)));
        }
        host
    }

    /// Shared counters available in a pool, in thousandths.
    pub fn counter(&self, driver: &str, pool: &str, key: &CounterKey) -> Option<u64> {
        self.pools.get(&(driver.to_string(), pool.to_string()))?.counters.get(key).copied()
    }
}

fn thousandths(amount: &ValueOf) -> Option<u64> {
    parse_quantity(&amount.value.text()).ok()?.millis()
}

/// Qualifies names with the driver's domain (`productName` of `gpu.nvidia.com` is
/// `gpu.nvidia.com/productName`); names that already carry a domain are kept.
pub fn qualify(driver: &str, name: &str) -> String {
    if name.contains('/') { name.to_string() } else { format!("{driver}/{name}") }
}

fn read_device(
    driver: &str,
    pool: &str,
    device: &super::objects::SliceDevice,
    node: Option<String>,
) -> Result<Device, String> {
    let attributes = device.attributes.iter().map(|(name, value)| (qualify(driver, name), value.clone())).collect();
    let mut capacity = BTreeMap::new();
    for (name, amount) in &device.capacity {
        let text = amount.value.text();
        let quantity = parse_quantity(&text).map_err(|e| format!("capacity {name}: {e}"))?;
        capacity.insert(qualify(driver, name), quantity);
    }
    let mut consumes = BTreeMap::new();
    for uses in &device.consumes_counters {
        for (counter, amount) in &uses.counters {
            let value = thousandths(amount)
                .ok_or_else(|| format!("consumesCounters {}/{counter}: {:?}", uses.counter_set, amount.value))?;
            consumes.insert((uses.counter_set.clone(), counter.clone()), value);
        }
    }
    Ok(Device {
        id: DeviceId::new(driver, pool, &device.name),
        attributes,
        capacity,
        consumes,
        taints: device.taints.clone(),
        node,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_attributes() {
        let attributes = BTreeMap::from([
            (PCIE_ROOT.to_string(), AttributeValue::String("pci0000:15".into())),
            ("vfio.example.com/numa".to_string(), AttributeValue::Int(1)),
            (NVLINK_CLIQUE.to_string(), AttributeValue::String("7f3c.1".into())),
        ]);
        let device = Device {
            id: DeviceId::new("vfio.example.com", "n", "d"),
            attributes,
            capacity: BTreeMap::new(),
            consumes: BTreeMap::new(),
            taints: Vec::new(),
            node: None,
        };
        assert_eq!(
            (device.pcie_root(), device.numa_node(), device.nvlink_clique()),
            (Some("pci0000:15"), Some(1), Some("7f3c.1"))
        );
        assert_eq!(qualify("gpu.nvidia.com", "productName"), "gpu.nvidia.com/productName");
        assert_eq!(qualify("gpu.nvidia.com", "resource.kubernetes.io/pcieRoot"), PCIE_ROOT);
    }

    #[test]
    fn device_names_order_numbers_by_value() {
        let mut names = vec!["gpu-10", "gpu-2", "gpu-1-mig-3", "gpu-1", "nic-0", "gpu-02"];
        names.sort_by(|a, b| natural(a, b));
        assert_eq!(names, ["gpu-1", "gpu-1-mig-3", "gpu-02", "gpu-2", "gpu-10", "nic-0"]);
    }

    /// The common prefix is skipped only up to the digit run the first difference falls in.
    #[test]
    fn numbers_that_share_leading_digits_compare_whole() {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let cases = [
            ("gpu-120", "gpu-13", Greater),
            ("gpu-12", "gpu-13", Less),
            ("node-0099", "node-100", Less),
            ("node-100a", "node-100b", Less),
            ("pci0000:15", "pci0000:37", Less),
            ("a01", "a1", Less),
            ("x", "x", Equal),
            ("x1", "x", Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(natural(a, b), want, "{a} vs {b}");
            assert_eq!(natural(b, a), want.reverse(), "{b} vs {a}");
        }
    }
}
