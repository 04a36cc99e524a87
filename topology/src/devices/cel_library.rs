//! The Kubernetes CEL functions DRA selectors use, for the `cel` crate: quantities
//! (`quantity`, `isQuantity`) and semantic versions (`semver`, `isSemver`, `major`, `minor`,
//! `patch`), both ordered by `compareTo`, `isGreaterThan` and `isLessThan`.

use std::sync::Arc;

use cel::extractors::This;
use cel::objects::Opaque;
use cel::{Context, ExecutionError, Value};

use crate::sources::k8s_nodes::quantity::{Quantity, parse_quantity};

/// A Kubernetes quantity inside CEL.
#[derive(Clone, Copy, Debug)]
pub(super) struct Qty(pub(super) Quantity);

impl PartialEq for Qty {
    fn eq(&self, other: &Self) -> bool {
        self.0.compare(&other.0).is_eq()
    }
}

impl Eq for Qty {}

impl Opaque for Qty {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// A semantic version `major.minor.patch[-pre][+build]` inside CEL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Semver {
    core: [u64; 3],
    pre: Vec<String>,
}

impl Semver {
    pub(super) fn parse(text: &str) -> Option<Semver> {
        let text = text.split_once('+').map_or(text, |(version, _)| version);
        let (core, pre) = match text.split_once('-') {
            Some((core, pre)) => (core, pre.split('.').map(str::to_string).collect()),
            None => (text, Vec::new()),
        };
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok().filter(|_| !p.is_empty()));
        let core = [parts.next()??, parts.next()??, parts.next()??];
        parts.next().is_none().then_some(Semver { core, pre })
    }

    fn compare(&self, other: &Semver) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        self.core.cmp(&other.core).then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => {
                for (a, b) in self.pre.iter().zip(&other.pre) {
                    let order = match (a.parse::<u64>(), b.parse::<u64>()) {
                        (Ok(x), Ok(y)) => x.cmp(&y),
                        (Ok(_), Err(_)) => Ordering::Less,
                        (Err(_), Ok(_)) => Ordering::Greater,
                        (Err(_), Err(_)) => a.cmp(b),
                    };
                    if order.is_ne() {
                        return order;
                    }
                }
                self.pre.len().cmp(&other.pre.len())
            }
        })
    }
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn quantity(text: Arc<String>) -> Result<Value, ExecutionError> {
    parse_quantity(&text)
        .map(|q| Value::Opaque(Arc::new(Qty(q))))
        .map_err(|e| ExecutionError::function_error("quantity", e))
}

fn semver(text: Arc<String>) -> Result<Value, ExecutionError> {
    Semver::parse(&text)
        .map(|v| Value::Opaque(Arc::new(v)))
        .ok_or_else(|| ExecutionError::function_error("semver", format!("{text:?} is not a semantic version")))
}

/// Orders two quantities or two versions; anything else is an error, as in Kubernetes.
fn order(function: &str, this: &Arc<dyn Opaque>, other: &Arc<dyn Opaque>) -> Result<i64, ExecutionError> {
    let order = if let (Some(a), Some(b)) = (this.downcast_ref::<Qty>(), other.downcast_ref::<Qty>()) {
        a.0.compare(&b.0)
    } else if let (Some(a), Some(b)) = (this.downcast_ref::<Semver>(), other.downcast_ref::<Semver>()) {
        a.compare(b)
    } else {
        let types = vec![this.runtime_type_name().to_string(), other.runtime_type_name().to_string()];
        return Err(ExecutionError::no_such_member_overload(function, types));
    };
    Ok(order as i64)
}

fn version_part(function: &str, this: &Arc<dyn Opaque>, index: usize) -> Result<Value, ExecutionError> {
    match this.downcast_ref::<Semver>() {
        Some(version) => Ok(Value::Int(i64::try_from(version.core[index]).unwrap_or(i64::MAX))),
        None => Err(ExecutionError::no_such_member_overload(function, vec![this.runtime_type_name().to_string()])),
    }
}

pub(super) fn register(context: &mut Context<'static, 'static>) {
    // Names clash only with the standard library, which declares none of these.
    let results = [
        context.add_function("quantity", quantity),
        context.add_function("isQuantity", |t: Arc<String>| parse_quantity(&t).is_ok()),
        context.add_function("semver", semver),
        context.add_function("isSemver", |t: Arc<String>| Semver::parse(&t).is_some()),
        context.add_function("compareTo", |This(a): This<Arc<dyn Opaque>>, b: Arc<dyn Opaque>| {
            order("compareTo", &a, &b).map(Value::Int)
        }),
        context.add_function("isGreaterThan", |This(a): This<Arc<dyn Opaque>>, b: Arc<dyn Opaque>| {
            order("isGreaterThan", &a, &b).map(|o| Value::Bool(o > 0))
        }),
        context.add_function("isLessThan", |This(a): This<Arc<dyn Opaque>>, b: Arc<dyn Opaque>| {
            order("isLessThan", &a, &b).map(|o| Value::Bool(o < 0))
        }),
        context.add_function("major", |This(a): This<Arc<dyn Opaque>>| version_part("major", &a, 0)),
        context.add_function("minor", |This(a): This<Arc<dyn Opaque>>| version_part("minor", &a, 1)),
        context.add_function("patch", |This(a): This<Arc<dyn Opaque>>| version_part("patch", &a, 2)),
    ];
    debug_assert!(results.iter().all(Result::is_ok), "DRA CEL functions clash with the standard library");
}
