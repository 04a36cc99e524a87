//! CEL device selectors: compiled once per expression text, evaluated against one device with
//! the results cached per (expression, device).
//!
//! The environment is DRA's: one variable `device` with `driver`, `attributes[<domain>].<name>`
//! (versions as semantic versions), `capacity[<domain>].<name>` (quantities) and
//! `allowMultipleAllocations` (always false here). A domain the device does not publish reads
//! as an empty map, so `device.attributes['other.vendor'].x` is a missing key (an error), but
//! `'x' in device.attributes['other.vendor']` is false. (The cel crate has no declared types, so
//! the empty maps are made for every string literal that looks like a domain, and for the
//! device's driver; a domain computed any other way and absent is an error.) Besides CEL's standard library (with
//! `matches`), the Kubernetes functions the selectors use: `quantity()`, `isQuantity()`,
//! `semver()`, `isSemver()`, and on both `compareTo`, `isGreaterThan`, `isLessThan`; on versions
//! `major()`, `minor()`, `patch()`.
//!
//! Limits. Kubernetes refuses an expression over 10 KiB and one whose estimated cost exceeds
//! 1,000,000. The size limit is enforced as written (bytes of the expression). The cost is a
//! static estimate over the parsed expression, computed once at compile time, deterministic and
//! independent of the device: every node costs 1, a call to `matches` costs 100 more, and a
//! comprehension (`all`, `exists`, `map`, `filter`) costs its range plus, for each element, its
//! condition and step: a list literal has its own length, a concatenation the sum, and any other
//! range (a device's attribute map, a list built at run time) at most 32 elements, the most
//! attributes and capacities one device can have. Nested comprehensions multiply. Expressions
//! over 1,000,000 are refused before any device is evaluated.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::{Context, Program, Value};

use super::cel_library::{Qty, Semver, register};
use super::objects::AttributeValue;
use super::pools::{Device, DeviceId};

/// The longest expression Kubernetes accepts, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 10 * 1024;
/// The highest estimated cost accepted (Kubernetes' per-expression limit).
pub const MAX_COST: u64 = 1_000_000;
/// Elements assumed in a range whose length the expression does not show.
const LOOP_BOUND: u64 = 32;

/// Who wrote an expression: named in every compile error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorOwner {
    /// A DeviceClass's selector.
    Class(String),
    /// A claim request's (or subrequest's) selector.
    Request {
        /// The claim.
        claim: String,
        /// `request` or `request/subrequest`.
        request: String,
    },
}

impl std::fmt::Display for SelectorOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectorOwner::Class(class) => write!(f, "DeviceClass {class}"),
            SelectorOwner::Request { claim, request } => write!(f, "claim {claim} request {request}"),
        }
    }
}

/// A selector that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// Over 10 KiB.
    #[error("{owner}: CEL expression of {bytes} bytes exceeds the limit of {MAX_EXPRESSION_BYTES}")]
    TooLong {
        /// Who wrote it.
        owner: SelectorOwner,
        /// Its length in bytes.
        bytes: usize,
    },
    /// Does not parse.
    #[error("{owner}: CEL expression {expression:?} does not compile: {message}")]
    Compile {
        /// Who wrote it.
        owner: SelectorOwner,
        /// The expression.
        expression: String,
        /// The parser's message.
        message: String,
    },
    /// Estimated cost over the limit.
    #[error("{owner}: CEL expression {expression:?} has estimated cost {cost}, over the limit of {MAX_COST}")]
    TooCostly {
        /// Who wrote it.
        owner: SelectorOwner,
        /// The expression.
        expression: String,
        /// The estimate.
        cost: u64,
    },
    /// Evaluation failed on a device (upstream aborts the allocation).
    #[error("CEL expression {expression:?} failed on device {device}: {message}")]
    Eval {
        /// The expression.
        expression: String,
        /// The device.
        device: String,
        /// What went wrong.
        message: String,
    },
}

/// A compiled expression of one [`Selectors`]: it carries that cache's number, so that an id
/// handed to another cache is refused instead of naming a different expression there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExprId {
    cache: u64,
    index: usize,
}

/// Numbers the caches (identity only; nothing depends on the values).
static NEXT_CACHE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Compiled {
    text: String,
    program: Program,
    /// String literals that look like domains: they read as empty maps on devices without them.
    domains: Vec<String>,
}

/// Every compiled selector and every result so far. One per scheduling pass (or longer: results
/// only depend on the expression and the device, so keep it while the devices do not change).
pub struct Selectors {
    number: u64,
    context: Context<'static, 'static>,
    by_text: HashMap<String, ExprId>,
    programs: Vec<Compiled>,
    /// Per device, per compiled expression: 0 not evaluated yet, 1 false, 2 true. Looked up by
    /// reference, so a hit allocates nothing.
    results: HashMap<DeviceId, Vec<u8>>,
    evaluations: u64,
    lookups: u64,
}

impl Default for Selectors {
    fn default() -> Self {
        Selectors::new()
    }
}

impl Selectors {
    /// An empty cache with DRA's functions.
    pub fn new() -> Selectors {
        let mut context = Context::default();
        register(&mut context);
        Selectors {
            number: NEXT_CACHE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            context,
            by_text: HashMap::new(),
            programs: Vec::new(),
            results: HashMap::new(),
            evaluations: 0,
            lookups: 0,
        }
    }

    /// Compiles `expression` (once per text) after checking its size and estimated cost.
    pub fn compile(&mut self, expression: &str, owner: &SelectorOwner) -> Result<ExprId, CelError> {
        if let Some(&id) = self.by_text.get(expression) {
            return Ok(id);
        }
        if expression.len() > MAX_EXPRESSION_BYTES {
            return Err(CelError::TooLong { owner: owner.clone(), bytes: expression.len() });
        }
        let program = Program::compile(expression).map_err(|e| CelError::Compile {
            owner: owner.clone(),
            expression: expression.to_string(),
            message: e.to_string().trim().to_string(),
        })?;
        let cost = estimate_cost(program.expression());
        if cost > MAX_COST {
            return Err(CelError::TooCostly { owner: owner.clone(), expression: expression.to_string(), cost });
        }
        let mut domains = Vec::new();
        collect_domains(program.expression(), &mut domains);
        let id = ExprId { cache: self.number, index: self.programs.len() };
        self.programs.push(Compiled { text: expression.to_string(), program, domains });
        self.by_text.insert(expression.to_string(), id);
        Ok(id)
    }

    /// The expression's text.
    pub fn text(&self, id: ExprId) -> &str {
        self.compiled(id).map_or("", |c| c.text.as_str())
    }

    /// The estimated cost of an expression (see the module doc).
    pub fn cost(&self, id: ExprId) -> u64 {
        self.compiled(id).map_or(0, |c| estimate_cost(c.program.expression()))
    }

    fn compiled(&self, id: ExprId) -> Option<&Compiled> {
        self.programs.get(id.index).filter(|_| id.cache == self.number)
    }

    /// Forgets every result (not the compiled expressions): call it when devices change under
    /// the same ids, e.g. a pool's new generation.
    pub fn clear_results(&mut self) {
        self.results.clear();
    }

    /// Forgets the results of one device (its pool was published again).
    pub fn forget(&mut self, device: &DeviceId) {
        self.results.remove(device);
    }

    /// Evaluations done so far (cache misses).
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// Results asked for so far (cache hits and misses): with [`Selectors::evaluations`], the
    /// cache's hit rate.
    pub fn lookups(&self) -> u64 {
        self.lookups
    }

    /// Whether `device` meets the expression; an error when evaluation fails or gives no bool.
    pub fn matches(&mut self, id: ExprId, device: &Device) -> Result<bool, CelError> {
        self.lookups += 1;
        if let Some(&known @ 1..=2) = self.results.get(&device.id).and_then(|r| r.get(id.index)) {
            return Ok(known == 2);
        }
        let Some(compiled) = self.programs.get(id.index).filter(|_| id.cache == self.number) else {
            return Err(CelError::Eval {
                expression: String::new(),
                device: device.id.to_string(),
                message: "the expression was compiled by another Selectors".to_string(),
            });
        };
        let eval = |message: String| CelError::Eval {
            expression: compiled.text.clone(),
            device: device.id.to_string(),
            message,
        };
        self.context.add_variable_from_value("device", device_value(device, &compiled.domains));
        self.evaluations += 1;
        let result = match compiled.program.execute(&self.context) {
            Ok(Value::Bool(result)) => result,
            Ok(other) => return Err(eval(format!("gave {other:?}, not a bool"))),
            Err(e) => return Err(eval(e.to_string())),
        };
        let known = self.results.entry(device.id.clone()).or_default();
        if known.len() <= id.index {
            known.resize(id.index + 1, 0);
        }
        known[id.index] = 1 + u8::from(result);
        Ok(result)
    }
}

/// The `device` variable for one device.
fn device_value(device: &Device, domains: &[String]) -> Value {
    let mut attributes: BTreeMap<&str, HashMap<String, Value>> = BTreeMap::new();
    let mut capacity: BTreeMap<&str, HashMap<String, Value>> = BTreeMap::new();
    // Every domain the expression names as a literal, and the driver's own (reached as
    // `device.attributes[device.driver]`), reads as a map even when the device has nothing there.
    for domain in domains.iter().map(String::as_str).chain([device.id.driver.as_str()]) {
        attributes.entry(domain).or_default();
        capacity.entry(domain).or_default();
    }
    for (name, value) in &device.attributes {
        let (domain, short) = name.rsplit_once('/').unwrap_or(("", name));
        let value = match value {
            AttributeValue::Bool(b) => Value::Bool(*b),
            AttributeValue::Int(i) => Value::Int(*i),
            AttributeValue::String(s) => Value::String(Arc::new(s.clone())),
            AttributeValue::Version(v) => match Semver::parse(v) {
                Some(version) => Value::Opaque(Arc::new(version)),
                None => Value::String(Arc::new(v.clone())),
            },
        };
        attributes.entry(domain).or_default().insert(short.to_string(), value);
    }
    for (name, quantity) in &device.capacity {
        let (domain, short) = name.rsplit_once('/').unwrap_or(("", name));
        capacity.entry(domain).or_default().insert(short.to_string(), Value::Opaque(Arc::new(Qty(*quantity))));
    }
    let nest = |maps: BTreeMap<&str, HashMap<String, Value>>| -> Value {
        Value::from(maps.into_iter().map(|(d, m)| (d.to_string(), Value::from(m))).collect::<HashMap<_, _>>())
    };
    let fields: HashMap<String, Value> = HashMap::from([
        ("driver".to_string(), Value::String(Arc::new(device.id.driver.clone()))),
        ("attributes".to_string(), nest(attributes)),
        ("capacity".to_string(), nest(capacity)),
        ("allowMultipleAllocations".to_string(), Value::Bool(false)),
    ]);
    Value::from(fields)
}

/// The static cost estimate of the module doc.
pub fn estimate_cost(expr: &IdedExpr) -> u64 {
    let sum = |items: &mut dyn Iterator<Item = &IdedExpr>| items.map(estimate_cost).fold(0u64, u64::saturating_add);
    match &expr.expr {
        Expr::Call(call) => {
            let regex = if call.func_name == "matches" { 100 } else { 0 };
            let target = call.target.as_deref().map_or(0, estimate_cost);
            1u64.saturating_add(regex).saturating_add(target).saturating_add(sum(&mut call.args.iter()))
        }
        Expr::Comprehension(c) => {
            let body = estimate_cost(&c.loop_cond).saturating_add(estimate_cost(&c.loop_step));
            1u64.saturating_add(estimate_cost(&c.iter_range))
                .saturating_add(estimate_cost(&c.accu_init))
                .saturating_add(max_len(&c.iter_range).saturating_mul(body))
                .saturating_add(estimate_cost(&c.result))
        }
        Expr::List(list) => 1u64.saturating_add(sum(&mut list.elements.iter())),
        Expr::Map(map) => 1u64.saturating_add(sum(&mut map.entries.iter().flat_map(entry_exprs))),
        Expr::Struct(s) => 1u64.saturating_add(sum(&mut s.entries.iter().flat_map(entry_exprs))),
        Expr::Select(select) => 1u64.saturating_add(estimate_cost(&select.operand)),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 1,
    }
}

fn entry_exprs(entry: &cel::common::ast::IdedEntryExpr) -> Vec<&IdedExpr> {
    match &entry.expr {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(map) => vec![&map.key, &map.value],
    }
}

/// The most elements a range can have (see the module doc).
fn max_len(expr: &IdedExpr) -> u64 {
    match &expr.expr {
        Expr::List(list) => list.elements.len() as u64,
        Expr::Map(map) => map.entries.len() as u64,
        Expr::Call(call) if call.func_name == "_+_" => call.args.iter().map(max_len).fold(0u64, u64::saturating_add),
        Expr::Comprehension(c) => max_len(&c.iter_range),
        _ => LOOP_BOUND,
    }
}

/// String literals that could name a domain (a dot, no spaces or slashes).
fn collect_domains(expr: &IdedExpr, out: &mut Vec<String>) {
    let mut walk = |e: &IdedExpr| collect_domains(e, out);
    match &expr.expr {
        Expr::Literal(LiteralValue::String(text)) => {
            let text = text.inner();
            if text.contains('.') && !text.contains(['/', ' ']) && !out.iter().any(|d| d == text) {
                out.push(text.to_string());
            }
        }
        Expr::Call(call) => call.target.iter().map(|t| &**t).chain(&call.args).for_each(&mut walk),
        Expr::Comprehension(c) => {
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result].into_iter().for_each(&mut walk)
        }
        Expr::List(list) => list.elements.iter().for_each(&mut walk),
        Expr::Map(map) => map.entries.iter().flat_map(entry_exprs).for_each(&mut walk),
        Expr::Struct(s) => s.entries.iter().flat_map(entry_exprs).for_each(&mut walk),
        Expr::Select(select) => walk(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::k8s_nodes::quantity::parse_quantity;

    fn eval(expression: &str) -> Result<bool, CelError> {
        let device = Device {
            id: DeviceId::new("gpu.nvidia.com", "n", "gpu-0"),
            attributes: BTreeMap::from([
                ("gpu.nvidia.com/driverVersion".to_string(), AttributeValue::Version("570.133.20".into())),
                ("gpu.nvidia.com/index".to_string(), AttributeValue::Int(3)),
            ]),
            capacity: BTreeMap::from([(
                "gpu.nvidia.com/memory".to_string(),
                parse_quantity("81559Mi").map_err(|e| CelError::Eval {
                    expression: String::new(),
                    device: String::new(),
                    message: e.to_string(),
                })?,
            )]),
            consumes: BTreeMap::new(),
            taints: Vec::new(),
            node: None,
        };
        let mut selectors = Selectors::new();
        let id = selectors.compile(expression, &SelectorOwner::Class("c".into()))?;
        selectors.matches(id, &device)
    }

    #[test]
    fn kubernetes_functions() {
        for expression in [
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) < 0",
            "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80G'))",
            "device.capacity['gpu.nvidia.com'].memory == quantity('83516416Ki')",
            "device.attributes['gpu.nvidia.com'].driverVersion.isLessThan(semver('570.140.0'))",
            "device.attributes['gpu.nvidia.com'].driverVersion.minor() == 133",
            "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))",
            "semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10'))",
            "isQuantity('1.5Gi') && !isQuantity('1.5GiB') && isSemver('1.2.3') && !isSemver('1.2')",
            "device.attributes['gpu.nvidia.com'].index in [1, 3]",
            "device.driver.endsWith('nvidia.com') && device.driver.matches('^gpu[.]')",
            "size(device.attributes['other.example.com']) == 0",
            "size(device.capacity[device.driver]) == 1",
        ] {
            assert_eq!(eval(expression), Ok(true), "{expression}");
        }
        assert!(matches!(eval("quantity('80Gi').compareTo(semver('1.0.0')) == 0"), Err(CelError::Eval { .. })));
        assert!(matches!(eval("device.attributes['gpu.nvidia.com'].index"), Err(CelError::Eval { .. })));
    }

    #[test]
    fn ids_of_another_cache_are_refused() {
        let owner = SelectorOwner::Class("c".into());
        let (mut one, mut other) = (Selectors::new(), Selectors::new());
        let id = one.compile("true", &owner).unwrap_or_else(|e| panic!("{e}"));
        let _ = other.compile("false", &owner);
        assert_eq!(other.text(id), "");
        assert_eq!(one.text(id), "true");
    }

    #[test]
    fn cost_is_estimated_statically() {
        let cost = |text: &str| Program::compile(text).map(|p| estimate_cost(p.expression())).unwrap_or(0);
        assert_eq!(cost("true"), 1);
        // `_==_`, `device.driver` (select + ident), the literal.
        assert_eq!(cost("device.driver == 'x'"), 4);
        let nested = cost("[1, 2, 3].all(x, [4, 5].all(y, x < y))");
        let flat = cost("[1, 2, 3].all(x, x < 4)");
        assert!(nested > 2 * flat, "{nested} vs {flat}");
        // An unknown range counts 32 elements.
        assert!(cost("device.attributes['a.b'].all(k, k != '')") > 32);
    }
}
