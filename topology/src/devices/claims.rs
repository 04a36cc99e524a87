//! A claim spec resolved against its DeviceClasses: requests with their alternatives (one for
//! `exactly`, one per `firstAvailable` subrequest, tried in order), every selector compiled, and
//! the constraints over named requests.

use std::collections::{BTreeMap, BTreeSet};

use super::cel::{CelError, ExprId, SelectorOwner, Selectors};
use super::objects::{AllocationMode, ClaimSpec, DeviceAsk, DeviceClass, DeviceToleration};
use crate::sources::k8s_nodes::quantity::{Quantity, parse_quantity};

/// The most devices one claim may be given (`AllocationResultsMaxSize`).
pub const MAX_DEVICES_PER_CLAIM: usize = 32;

/// A claim ready for allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// Claim name (named in every failure).
    pub name: String,
    /// Requests in order.
    pub requests: Vec<Request>,
    /// Constraints.
    pub constraints: Vec<Constraint>,
}

/// One request: its alternatives in order of preference.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Request name.
    pub name: String,
    /// One for `exactly`, one per `firstAvailable` subrequest.
    pub alternatives: Vec<Alternative>,
}

/// What one alternative asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Alternative {
    /// `request` for `exactly`, `request/subrequest` for `firstAvailable` (the name results carry).
    pub name: String,
    /// DeviceClass.
    pub class: String,
    /// The class's selectors, then the request's, all of which must hold.
    pub selectors: Vec<ExprId>,
    /// `Some(count)` for ExactCount, `None` for All.
    pub count: Option<usize>,
    /// Taints tolerated.
    pub tolerations: Vec<DeviceToleration>,
    /// Capacity each device must have, by name as written (unqualified names are the driver's).
    pub capacity: BTreeMap<String, Quantity>,
}

/// What a constraint requires of the devices it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConstraintKind {
    /// All have the attribute, with one value.
    Match(String),
    /// All have the attribute, with different values.
    Distinct(String),
}

/// A constraint over some requests of the claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    /// Requests covered (`request` or `request/subrequest`); empty covers all.
    pub requests: Vec<String>,
    /// The rule.
    pub kind: ConstraintKind,
}

impl Constraint {
    /// Whether devices given to `alternative` (`request` or `request/sub`) are covered.
    pub fn covers(&self, alternative: &str) -> bool {
        let request = alternative.split_once('/').map_or(alternative, |(request, _)| request);
        self.requests.is_empty() || self.requests.iter().any(|r| r == alternative || r == request)
    }

    /// The attribute the rule is about.
    pub fn attribute(&self) -> &str {
        match &self.kind {
            ConstraintKind::Match(attribute) | ConstraintKind::Distinct(attribute) => attribute,
        }
    }
}

/// A claim that cannot be allocated anywhere, whatever the devices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// A request names a DeviceClass that does not exist.
    #[error("claim {claim} request {request}: DeviceClass {class} not found")]
    MissingClass {
        /// Claim.
        claim: String,
        /// Request (or `request/subrequest`).
        request: String,
        /// Class.
        class: String,
    },
    /// A selector does not compile or is over a limit.
    #[error(transparent)]
    Cel(#[from] CelError),
    /// A field makes no sense.
    #[error("claim {claim}: field `{field}`: {message}")]
    Invalid {
        /// Claim.
        claim: String,
        /// Field path, e.g. `devices.requests[1].exactly.count`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Asks for more than 32 devices even in its smallest form.
    #[error("claim {claim} asks for at least {devices} devices; a claim gets at most {MAX_DEVICES_PER_CLAIM}")]
    TooManyDevices {
        /// Claim.
        claim: String,
        /// Lower bound of its device count.
        devices: usize,
    },
}

/// Resolves a claim spec: classes looked up, selectors compiled (class ones named by class,
/// request ones by claim and request), counts and constraints checked.
pub fn resolve_claim(
    claim: &str,
    spec: &ClaimSpec,
    classes: &[DeviceClass],
    selectors: &mut Selectors,
) -> Result<Claim, ClaimError> {
    let invalid = |field: String, message: &str| ClaimError::Invalid {
        claim: claim.to_string(),
        field,
        message: message.to_string(),
    };
    let mut requests = Vec::new();
    let mut names = BTreeSet::new();
    let mut lower_bound = 0;
    for (i, request) in spec.devices.requests.iter().enumerate() {
        let field = format!("devices.requests[{i}]");
        if !names.insert(request.name.clone()) {
            return Err(invalid(format!("{field}.name"), "request name used twice"));
        }
        let alternatives = match (&request.exactly, &request.first_available) {
            (Some(ask), None) => {
                let alternative =
                    resolve_ask(claim, &request.name, ask, &format!("{field}.exactly"), classes, selectors)?;
                vec![alternative]
            }
            (None, Some(subrequests)) if !subrequests.is_empty() => {
                let mut alternatives = Vec::new();
                let mut sub_names = BTreeSet::new();
                for (j, sub) in subrequests.iter().enumerate() {
                    let sub_field = format!("{field}.firstAvailable[{j}]");
                    if !sub_names.insert(sub.name.clone()) {
                        return Err(invalid(format!("{sub_field}.name"), "subrequest name used twice"));
                    }
                    let name = format!("{}/{}", request.name, sub.name);
                    alternatives.push(resolve_ask(claim, &name, &sub.ask, &sub_field, classes, selectors)?);
                }
                alternatives
            }
            _ => return Err(invalid(field, "exactly one of `exactly` and a non-empty `firstAvailable` must be set")),
        };
        lower_bound += alternatives.iter().map(|a| a.count.unwrap_or(1)).min().unwrap_or(0);
        requests.push(Request { name: request.name.clone(), alternatives });
    }
    if lower_bound > MAX_DEVICES_PER_CLAIM {
        return Err(ClaimError::TooManyDevices { claim: claim.to_string(), devices: lower_bound });
    }
    let mut constraints = Vec::new();
    for (i, constraint) in spec.devices.constraints.iter().enumerate() {
        let field = format!("devices.constraints[{i}]");
        let kind = match (&constraint.match_attribute, &constraint.distinct_attribute) {
            (Some(attribute), None) => ConstraintKind::Match(attribute.clone()),
            (None, Some(attribute)) => ConstraintKind::Distinct(attribute.clone()),
            _ => return Err(invalid(field, "exactly one of matchAttribute and distinctAttribute must be set")),
        };
        let constraint = Constraint { requests: constraint.requests.clone(), kind };
        if !constraint.attribute().contains('/') {
            return Err(invalid(field, "the attribute must be fully qualified (domain/name)"));
        }
        for (j, name) in constraint.requests.iter().enumerate() {
            let known = requests
                .iter()
                .any(|r| r.name == *name || r.alternatives.iter().any(|a| a.name == *name && a.name.contains('/')));
            if !known {
                return Err(invalid(format!("{field}.requests[{j}]"), &format!("no request named {name}")));
            }
        }
        constraints.push(constraint);
    }
    Ok(Claim { name: claim.to_string(), requests, constraints })
}

fn resolve_ask(
    claim: &str,
    name: &str,
    ask: &DeviceAsk,
    field: &str,
    classes: &[DeviceClass],
    selectors: &mut Selectors,
) -> Result<Alternative, ClaimError> {
    let invalid = |field: String, message: String| ClaimError::Invalid { claim: claim.to_string(), field, message };
    let class = classes.iter().find(|c| c.name == ask.device_class_name).ok_or_else(|| ClaimError::MissingClass {
        claim: claim.to_string(),
        request: name.to_string(),
        class: ask.device_class_name.clone(),
    })?;
    if ask.admin_access == Some(true) {
        return Err(invalid(format!("{field}.adminAccess"), "admin access is not supported".to_string()));
    }
    let mut compiled = Vec::new();
    for expression in &class.selectors {
        compiled.push(selectors.compile(expression, &SelectorOwner::Class(class.name.clone()))?);
    }
    let owner = SelectorOwner::Request { claim: claim.to_string(), request: name.to_string() };
    for selector in &ask.selectors {
        compiled.push(selectors.compile(&selector.cel.expression, &owner)?);
    }
    let count = match ask.allocation_mode {
        AllocationMode::All if ask.count.is_some() => {
            return Err(invalid(format!("{field}.count"), "must not be set with allocationMode All".to_string()));
        }
        AllocationMode::All => None,
        AllocationMode::ExactCount => match ask.count.unwrap_or(1) {
            count @ 1.. => Some(usize::try_from(count).unwrap_or(usize::MAX)),
            count => return Err(invalid(format!("{field}.count"), format!("{count} is not a positive count"))),
        },
    };
    let mut capacity = BTreeMap::new();
    for (key, amount) in ask.capacity.iter().flat_map(|c| &c.requests) {
        let quantity = parse_quantity(&amount.text())
            .map_err(|e| invalid(format!("{field}.capacity.requests.{key}"), e.to_string()))?;
        capacity.insert(key.clone(), quantity);
    }
    Ok(Alternative {
        name: name.to_string(),
        class: class.name.clone(),
        selectors: compiled,
        count,
        tolerations: ask.tolerations.clone(),
        capacity,
    })
}
