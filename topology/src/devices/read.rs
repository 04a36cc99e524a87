//! Reading DRA objects from text: one object, a `List` with `items`, or several YAML documents,
//! JSON or YAML. Every error names the source, the object (`Kind/name`) and the field, down to
//! the list item (`spec.devices[3]`); serde's message names the field inside the item.

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::objects::{ClaimSpec, ClaimTemplate, DeviceClaim, DeviceClass, PoolRef, ResourceSlice, Selector};
use crate::InputError;

/// Every DRA object read from one text, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraObjects {
    /// DeviceClasses.
    pub classes: Vec<DeviceClass>,
    /// ResourceSlices.
    pub slices: Vec<ResourceSlice>,
    /// ResourceClaimTemplates and ResourceClaims.
    pub claims: Vec<ClaimTemplate>,
}

impl DraObjects {
    /// Adds the objects of another file.
    pub fn extend(&mut self, other: DraObjects) {
        self.classes.extend(other.classes);
        self.slices.extend(other.slices);
        self.claims.extend(other.claims);
    }
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: serde_json::Value,
    #[serde(default)]
    items: Option<Vec<serde_json::Value>>,
}

#[derive(Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClassSpec {
    #[serde(default)]
    selectors: Vec<Selector>,
    extended_resource_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SliceSpec {
    driver: String,
    pool: PoolRef,
    node_name: Option<String>,
    all_nodes: Option<bool>,
    node_selector: Option<serde_json::Value>,
    per_device_node_selection: Option<bool>,
    // Items are decoded one by one so that an error names the item.
    #[serde(default)]
    devices: Vec<serde_json::Value>,
    #[serde(default)]
    shared_counters: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct TemplateSpec {
    #[serde(default)]
    spec: RawClaimSpec,
}

#[derive(Default, Deserialize)]
struct RawClaimSpec {
    #[serde(default)]
    devices: RawDeviceClaim,
}

#[derive(Default, Deserialize)]
struct RawDeviceClaim {
    #[serde(default)]
    requests: Vec<serde_json::Value>,
    #[serde(default)]
    constraints: Vec<serde_json::Value>,
}

/// Reads every DeviceClass, ResourceSlice, ResourceClaimTemplate and ResourceClaim in `text`
/// (JSON or YAML; one object, `List`s, several documents). Other kinds are an error: a file
/// meant for DRA that holds something else is a mistake worth naming.
pub fn parse_objects(text: &str, source_name: &str) -> Result<DraObjects, InputError> {
    let mut objects = DraObjects::default();
    for (index, document) in documents(text, source_name)?.into_iter().enumerate() {
        read_value(document, source_name, &format!("document {index}"), &mut objects)?;
    }
    Ok(objects)
}

/// Reads one object already decoded (a watched API object as JSON); errors name `source_name`.
pub fn read_object(value: serde_json::Value, source_name: &str) -> Result<DraObjects, InputError> {
    let mut objects = DraObjects::default();
    read_value(value, source_name, "object", &mut objects)?;
    Ok(objects)
}

fn documents(text: &str, source_name: &str) -> Result<Vec<serde_json::Value>, InputError> {
    let text = crate::input_text::normalize(text);
    if text.trim_start().starts_with(['{', '[']) {
        return serde_json::from_str(&text).map(|v| vec![v]).map_err(|e| InputError::syntax(source_name, e));
    }
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options(&text, crate::sources::cluster_dump_yaml())
            .map_err(|e| crate::input_text::yaml_error(source_name, &e))?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

fn read_value(
    value: serde_json::Value,
    source_name: &str,
    place: &str,
    objects: &mut DraObjects,
) -> Result<(), InputError> {
    if let serde_json::Value::Array(items) = value {
        for (i, item) in items.into_iter().enumerate() {
            read_value(item, source_name, &format!("{place}[{i}]"), objects)?;
        }
        return Ok(());
    }
    let envelope: Envelope = from_value(value, source_name, place, "")?;
    let kind = envelope.kind.unwrap_or_default();
    let object = format!("{kind}/{}", envelope.metadata.name);
    if let Some(items) = envelope.items {
        for (i, item) in items.into_iter().enumerate() {
            read_value(item, source_name, &format!("{place} items[{i}]"), objects)?;
        }
        return Ok(());
    }
    if envelope.metadata.name.is_empty() {
        return Err(InputError::invalid(source_name, None, format!("{place} {object}: metadata.name"), "missing"));
    }
    // v1beta2 has v1's shape; v1beta1 and v1alpha3 wrap devices in `basic` and put requests'
    // fields at the top, which would read here as devices without attributes: refuse them.
    let old =
        |v: &&str| v.starts_with("resource.k8s.io/") && !matches!(*v, "resource.k8s.io/v1" | "resource.k8s.io/v1beta2");
    if let Some(version) = envelope.api_version.as_deref().filter(old) {
        let message = format!("{version} has another shape; read the objects through resource.k8s.io/v1");
        return Err(InputError::invalid(source_name, None, format!("{object}: apiVersion"), message));
    }
    match kind.as_str() {
        "DeviceClass" => {
            let spec: ClassSpec = from_value(envelope.spec, source_name, &object, "spec")?;
            objects.classes.push(DeviceClass {
                name: envelope.metadata.name,
                selectors: spec.selectors.into_iter().map(|s| s.cel.expression).collect(),
                extended_resource_name: spec.extended_resource_name,
            });
        }
        "ResourceSlice" => {
            let spec: SliceSpec = from_value(envelope.spec, source_name, &object, "spec")?;
            let devices = items(spec.devices, source_name, &object, "spec.devices")?;
            let shared_counters = items(spec.shared_counters, source_name, &object, "spec.sharedCounters")?;
            objects.slices.push(ResourceSlice {
                name: envelope.metadata.name,
                driver: spec.driver,
                pool: spec.pool,
                node_name: spec.node_name,
                all_nodes: spec.all_nodes.unwrap_or(false),
                node_selector: spec.node_selector,
                per_device_node_selection: spec.per_device_node_selection.unwrap_or(false),
                devices,
                shared_counters,
            });
        }
        "ResourceClaimTemplate" => {
            let spec: TemplateSpec = from_value(envelope.spec, source_name, &object, "spec")?;
            let spec = claim_spec(spec.spec, source_name, &object, "spec.spec.devices")?;
            let (name, namespace) = (envelope.metadata.name, envelope.metadata.namespace);
            objects.claims.push(ClaimTemplate { name, namespace, spec });
        }
        "ResourceClaim" => {
            let spec: RawClaimSpec = from_value(envelope.spec, source_name, &object, "spec")?;
            let spec = claim_spec(spec, source_name, &object, "spec.devices")?;
            let (name, namespace) = (envelope.metadata.name, envelope.metadata.namespace);
            objects.claims.push(ClaimTemplate { name, namespace, spec });
        }
        _ => {
            let message = "expected DeviceClass, ResourceSlice, ResourceClaimTemplate, ResourceClaim or a List";
            return Err(InputError::invalid(source_name, None, format!("{place} {object}: kind"), message));
        }
    }
    Ok(())
}

fn claim_spec(raw: RawClaimSpec, source_name: &str, object: &str, field: &str) -> Result<ClaimSpec, InputError> {
    let requests = items(raw.devices.requests, source_name, object, &format!("{field}.requests"))?;
    let constraints = items(raw.devices.constraints, source_name, object, &format!("{field}.constraints"))?;
    Ok(ClaimSpec { devices: DeviceClaim { requests, constraints } })
}

/// Decodes a list item by item, an error naming `field[i]`.
fn items<T: DeserializeOwned>(
    values: Vec<serde_json::Value>,
    source_name: &str,
    object: &str,
    field: &str,
) -> Result<Vec<T>, InputError> {
    values.into_iter().enumerate().map(|(i, v)| from_value(v, source_name, object, &format!("{field}[{i}]"))).collect()
}

/// Decodes one part of an object; serde's message names the field that is missing or wrong.
fn from_value<T: DeserializeOwned>(
    value: serde_json::Value,
    source_name: &str,
    object: &str,
    field: &str,
) -> Result<T, InputError> {
    serde_json::from_value(value).map_err(|e| {
        let field = if field.is_empty() { object.to_string() } else { format!("{object}: {field}") };
        InputError::invalid(source_name, None, field, e.to_string())
    })
}
