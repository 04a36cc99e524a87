//! The parts of DRA's `resource.k8s.io/v1` objects that allocation reads (DeviceClass,
//! ResourceSlice, ResourceClaimTemplate / ResourceClaimSpec), read from YAML or JSON text.
//!
//! Field names are the API's (camelCase). Fields allocation does not read (opaque config,
//! binding conditions, status) are ignored rather than refused, so real `kubectl get -o yaml`
//! output reads as it is. [`super::read`] reads them from text.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::eligibility::TolerationOperator;

/// A device attribute value (exactly one of the API's `bool`, `int`, `string`, `version`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttributeValue {
    /// `{bool: true}`.
    Bool(bool),
    /// `{int: 3}`.
    Int(i64),
    /// `{string: pci0000:15}`.
    String(String),
    /// `{version: 9.0.0}`, a semantic version.
    Version(String),
}

/// A quantity as written: YAML may give `8` as a number, the API always means a string.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum QuantityText {
    /// `80Gi`.
    Text(String),
    /// `8`.
    Number(serde_json::Number),
}

impl QuantityText {
    /// The text the quantity parser reads.
    pub fn text(&self) -> String {
        match self {
            QuantityText::Text(text) => text.clone(),
            QuantityText::Number(number) => number.to_string(),
        }
    }
}

/// `{value: <quantity>}`, the shape of capacities and counters.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct ValueOf {
    /// The quantity.
    pub value: QuantityText,
}

/// A DeviceClass: its name and the CEL selectors every request of the class must also meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceClass {
    /// `metadata.name`.
    pub name: String,
    /// `spec.selectors[].cel.expression`, ANDed.
    pub selectors: Vec<String>,
    /// `spec.extendedResourceName`, when set.
    pub extended_resource_name: Option<String>,
}

/// What a device taint does to claims that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum DeviceTaintEffect {
    /// Only informs; never blocks.
    None,
    /// New allocations are refused.
    NoSchedule,
    /// New allocations are refused and users are evicted.
    NoExecute,
}

/// A taint on one device.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub struct DeviceTaint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    #[serde(default)]
    pub value: String,
    /// Effect.
    pub effect: DeviceTaintEffect,
}

/// A claim request's toleration of device taints.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceToleration {
    /// Taint key; empty with `Exists` matches every key.
    #[serde(default)]
    pub key: String,
    /// Comparison.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value for `Equal`.
    #[serde(default)]
    pub value: String,
    /// Effect tolerated; `None` tolerates every effect.
    pub effect: Option<DeviceTaintEffect>,
}

impl DeviceToleration {
    /// Whether this toleration covers `taint` (the same rule as for node taints).
    pub fn tolerates(&self, taint: &DeviceTaint) -> bool {
        let effect = self.effect.is_none_or(|e| e == taint.effect);
        crate::eligibility::tolerates((&self.key, self.operator, &self.value), effect, (&taint.key, &taint.value))
    }
}

/// Counters one device takes from a shared counter set of its pool.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterConsumption {
    /// Name of the counter set (`sharedCounters[].name`).
    pub counter_set: String,
    /// Counter name -> amount.
    pub counters: BTreeMap<String, ValueOf>,
}

/// A named set of counters shared by the devices of a pool.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CounterSet {
    /// Set name.
    pub name: String,
    /// Counter name -> amount available.
    pub counters: BTreeMap<String, ValueOf>,
}

/// One device of a ResourceSlice.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceDevice {
    /// Device name, unique in its pool.
    pub name: String,
    /// Attributes; unqualified names belong to the driver's domain.
    #[serde(default)]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Capacities; unqualified names belong to the driver's domain.
    #[serde(default)]
    pub capacity: BTreeMap<String, ValueOf>,
    /// Shared counters it takes (partitionable devices).
    #[serde(default)]
    pub consumes_counters: Vec<CounterConsumption>,
    /// Taints.
    #[serde(default)]
    pub taints: Vec<DeviceTaint>,
    /// With `perDeviceNodeSelection`: the node of this device.
    pub node_name: Option<String>,
    /// With `perDeviceNodeSelection`: every node reaches it.
    #[serde(default)]
    pub all_nodes: Option<bool>,
    /// With `perDeviceNodeSelection`: a node selector (not evaluated yet).
    pub node_selector: Option<serde_json::Value>,
}

/// `spec.pool` of a ResourceSlice.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    /// Pool name (for node-local drivers, the node's name).
    pub name: String,
    /// Only slices of the highest generation count.
    #[serde(default)]
    pub generation: i64,
    /// How many slices make the pool whole.
    pub resource_slice_count: i64,
}

/// A ResourceSlice: part of one pool of one driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSlice {
    /// `metadata.name` (generated; only used in messages).
    pub name: String,
    /// `spec.driver`.
    pub driver: String,
    /// `spec.pool`.
    pub pool: PoolRef,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `spec.allNodes`.
    pub all_nodes: bool,
    /// `spec.nodeSelector`, evaluated against the cluster's nodes ([`super::PoolView::select_nodes`]).
    pub node_selector: Option<serde_json::Value>,
    /// `spec.perDeviceNodeSelection`.
    pub per_device_node_selection: bool,
    /// `spec.devices`.
    pub devices: Vec<SliceDevice>,
    /// `spec.sharedCounters`.
    pub shared_counters: Vec<CounterSet>,
}

/// `selectors[]`: a CEL expression.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Selector {
    /// `cel`.
    pub cel: CelSelector,
}

/// `selectors[].cel`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CelSelector {
    /// The expression; must evaluate to a bool.
    pub expression: String,
}

/// ExactCount (the default) or All.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub enum AllocationMode {
    /// `count` devices.
    #[default]
    ExactCount,
    /// Every matching device on the node's pools.
    All,
}

/// `capacity` of a request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct CapacityRequirements {
    /// Capacity name -> amount the device must offer.
    #[serde(default)]
    pub requests: BTreeMap<String, QuantityText>,
}

/// What `exactly` and each `firstAvailable` subrequest ask for.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceAsk {
    /// The DeviceClass.
    pub device_class_name: String,
    /// Request selectors, ANDed with the class's.
    #[serde(default)]
    pub selectors: Vec<Selector>,
    /// ExactCount or All.
    #[serde(default)]
    pub allocation_mode: AllocationMode,
    /// Devices for ExactCount (default 1).
    pub count: Option<i64>,
    /// Admin access (not modelled: refused).
    #[serde(default)]
    pub admin_access: Option<bool>,
    /// Taints tolerated.
    #[serde(default)]
    pub tolerations: Vec<DeviceToleration>,
    /// Capacity each device must offer.
    #[serde(default)]
    pub capacity: Option<CapacityRequirements>,
}

/// A `firstAvailable` subrequest.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SubRequest {
    /// Name, referred to as `<request>/<name>`.
    pub name: String,
    /// What it asks.
    #[serde(flatten)]
    pub ask: DeviceAsk,
}

/// `spec.devices.requests[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceRequest {
    /// Request name.
    pub name: String,
    /// One ask.
    pub exactly: Option<DeviceAsk>,
    /// Alternatives tried in order.
    pub first_available: Option<Vec<SubRequest>>,
}

/// `spec.devices.constraints[]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceConstraint {
    /// Requests it covers; empty means all.
    #[serde(default)]
    pub requests: Vec<String>,
    /// Fully qualified attribute all covered devices share.
    pub match_attribute: Option<String>,
    /// Fully qualified attribute all covered devices differ in.
    pub distinct_attribute: Option<String>,
}

/// `ResourceClaimSpec.devices`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct DeviceClaim {
    /// Requests.
    #[serde(default)]
    pub requests: Vec<DeviceRequest>,
    /// Constraints.
    #[serde(default)]
    pub constraints: Vec<DeviceConstraint>,
}

/// A ResourceClaimSpec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ClaimSpec {
    /// `devices`.
    #[serde(default)]
    pub devices: DeviceClaim,
}

/// A ResourceClaimTemplate (or a ResourceClaim: its `spec` is read the same way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimTemplate {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (empty when not given).
    pub namespace: String,
    /// The claim spec (`spec.spec` of a template, `spec` of a claim).
    pub spec: ClaimSpec,
}
