//! An OptimizationJob's spec checked against the CRD's bounds and against its template, before
//! any trial exists: every refusal names the field.

use std::collections::BTreeMap;

use super::space::{Number, Space, seed_of};
use crate::trainer::optimization::{OptimizationJobSpec, Range};

/// Prefix of the variable a trial receives each parameter in (Trainer's KEP-2605 naming).
pub const ENV_PREFIX: &str = "KUBEFLOW_TRAINER_OPT_";
/// Most trials, and most trials at once, a search may ask for (the CRD's bound).
pub const MAX_TRIALS: i32 = 100;
const MAX_PARAMETERS: usize = 100;
const MAX_TEXT: usize = 64;

/// Why a search cannot start; it never will, since the spec is immutable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// The field at fault, from `spec`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn refuse<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError { field: field.into(), message: message.into() })
}

/// One parameter, checked: its name, the variable a trial gets it in, its space.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// The name in the spec.
    pub name: String,
    /// `KUBEFLOW_TRAINER_OPT_<NAME>`.
    pub env: String,
    /// Its values.
    pub space: Space,
}

/// A search ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    /// The metric trials report.
    pub metric: String,
    /// Whether a larger value is better.
    pub maximize: bool,
    /// The parameters, in the spec's order.
    pub params: Vec<Param>,
    /// Grid search (else random).
    pub grid: bool,
    /// The random search's seed.
    pub seed: u64,
    /// Trials in all: `numTrials`, or the grid's size when that is smaller.
    pub trials: u32,
    /// `numTrials` as asked.
    pub asked: u32,
    /// Trials at once.
    pub parallel: u32,
}

/// The variable a parameter reaches the trial in; `None` when its name cannot be part of one.
fn env_name(name: &str) -> Option<String> {
    let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    ok.then(|| format!("{ENV_PREFIX}{}", name.to_ascii_uppercase().replace(['-', '.'], "_")))
}

/// A decimal bound as the CRD writes it (`-?digits[.digits][e±digits]`).
fn bound(text: &str, field: &str) -> Result<f64, SpecError> {
    let plain = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = plain.split_once(['e', 'E']).unwrap_or((plain, "0"));
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
    let shaped = digits(int) && (int == "0" || !int.starts_with('0')) && digits(frac) && digits(exponent);
    match text.parse::<f64>() {
        Ok(v) if shaped && text.len() <= MAX_TEXT && v.is_finite() => Ok(v),
        _ => refuse(field, format!("{text:?} is not a decimal number such as 0.01, 5 or 1e-4")),
    }
}

fn range(r: &Range, field: &str, log: bool) -> Result<(f64, f64, Number), SpecError> {
    let min = bound(&r.min, &format!("{field}.min"))?;
    let max = bound(&r.max, &format!("{field}.max"))?;
    let number = match r.kind.as_deref() {
        None | Some("Float") => Number::Float,
        Some("Int") => Number::Int,
        Some(other) => return refuse(format!("{field}.type"), format!("{other:?} is neither Int nor Float")),
    };
    if min >= max {
        return refuse(format!("{field}.max"), format!("max {} must exceed min {}", r.max, r.min));
    }
    if log && min <= 0.0 {
        return refuse(format!("{field}.min"), format!("a log-uniform range starts above 0, not at {}", r.min));
    }
    if number == Number::Int && (min.fract() != 0.0 || max.fract() != 0.0) {
        return refuse(format!("{field}.type"), format!("Int takes whole bounds, not [{}, {}]", r.min, r.max));
    }
    Ok((min, max, number))
}

fn space(i: usize, p: &crate::trainer::optimization::Parameter) -> Result<Space, SpecError> {
    let field = format!("spec.parameters[{i}].searchSpace");
    let s = &p.search_space;
    match (&s.uniform, &s.log_uniform, &s.categorical) {
        (Some(r), None, None) => {
            let (min, max, number) = range(r, &format!("{field}.uniform"), false)?;
            Ok(Space::Uniform { min, max, number })
        }
        (None, Some(r), None) => {
            let (min, max, number) = range(r, &format!("{field}.logUniform"), true)?;
            Ok(Space::LogUniform { min, max, number })
        }
        (None, None, Some(c)) => {
            let field = format!("{field}.categorical.choices");
            if c.choices.is_empty() || c.choices.len() > MAX_PARAMETERS {
                return refuse(field, format!("1 to {MAX_PARAMETERS} choices, not {}", c.choices.len()));
            }
            for (k, choice) in c.choices.iter().enumerate() {
                if choice.is_empty() || choice.len() > MAX_TEXT {
                    return refuse(format!("{field}[{k}]"), format!("a choice has 1 to {MAX_TEXT} characters"));
                }
                if c.choices[..k].contains(choice) {
                    return refuse(format!("{field}[{k}]"), format!("{choice:?} is given twice"));
                }
            }
            Ok(Space::Categorical(c.choices.clone()))
        }
        _ => refuse(field, "exactly one of uniform, logUniform and categorical"),
    }
}

/// Checks `spec` of the search named `name` (uid `uid`, the seed when the spec gives none).
pub fn validate(spec: &OptimizationJobSpec, uid: &str) -> Result<Search, SpecError> {
    let [objective] = spec.objectives.as_slice() else {
        return refuse("spec.objectives", format!("exactly one objective, not {}", spec.objectives.len()));
    };
    if objective.metric.is_empty() || objective.metric.len() > MAX_TEXT {
        return refuse("spec.objectives[0].metric", format!("a metric name has 1 to {MAX_TEXT} characters"));
    }
    let maximize = match objective.direction.as_deref() {
        None | Some("Minimize") => false,
        Some("Maximize") => true,
        Some(other) => {
            return refuse("spec.objectives[0].direction", format!("{other:?} is neither Minimize nor Maximize"));
        }
    };
    let (grid, seed) = match &spec.search_algorithm {
        None => (false, None),
        Some(a) => match (&a.random, &a.grid) {
            (Some(r), None) => (false, r.seed),
            (None, Some(_)) => (true, None),
            _ => return refuse("spec.searchAlgorithm", "exactly one of random and grid"),
        },
    };
    if spec.parameters.is_empty() || spec.parameters.len() > MAX_PARAMETERS {
        return refuse("spec.parameters", format!("1 to {MAX_PARAMETERS} parameters, not {}", spec.parameters.len()));
    }
    let template_env: BTreeMap<&str, usize> = spec
        .train_job_template
        .spec
        .trainer
        .iter()
        .flat_map(|t| t.env.iter().enumerate())
        .map(|(j, e)| (e.name.as_str(), j))
        .collect();
    let mut params: Vec<Param> = Vec::with_capacity(spec.parameters.len());
    for (i, p) in spec.parameters.iter().enumerate() {
        let field = format!("spec.parameters[{i}].name");
        if p.name.len() > MAX_TEXT {
            return refuse(field, format!("a parameter name has 1 to {MAX_TEXT} characters"));
        }
        let Some(env) = env_name(&p.name) else {
            return refuse(
                field,
                format!(
                    "{:?} cannot name the variable a trial receives it in (letters, digits, '_', '-', '.')",
                    p.name
                ),
            );
        };
        if let Some(other) = params.iter().find(|q| q.env == env) {
            return refuse(field, format!("{:?} and {:?} both reach trials as {env}", other.name, p.name));
        }
        if let Some(j) = template_env.get(env.as_str()) {
            return refuse(
                format!("spec.trainJobTemplate.spec.trainer.env[{j}].name"),
                format!("{env} is where the search puts parameter {:?}; the template may not set it", p.name),
            );
        }
        let space = space(i, p)?;
        if grid && space.choices().is_none() {
            return refuse(
                format!("spec.parameters[{i}].searchSpace"),
                "grid search takes categorical parameters only",
            );
        }
        params.push(Param { name: p.name.clone(), env, space });
    }
    let asked = spec.num_trials.unwrap_or(1);
    if !(1..=MAX_TRIALS).contains(&asked) {
        return refuse("spec.numTrials", format!("1 to {MAX_TRIALS}, not {asked}"));
    }
    let parallel = spec.parallel_trials.unwrap_or(1);
    if !(1..=MAX_TRIALS).contains(&parallel) || parallel > asked {
        return refuse("spec.parallelTrials", format!("1 to numTrials ({asked}), not {parallel}"));
    }
    let template = &spec.train_job_template;
    if template.spec.runtime_ref.name.is_empty() {
        return refuse("spec.trainJobTemplate.spec.runtimeRef.name", "every trial needs a runtime");
    }
    for key in ["name", "namespace", "generateName"] {
        if template.metadata.rest.contains_key(key) {
            return refuse(format!("spec.trainJobTemplate.metadata.{key}"), "the search names its trials itself");
        }
    }
    let mut trials = asked as u32;
    if grid {
        let axes: Vec<&[String]> = params.iter().filter_map(|p| p.space.choices()).collect();
        trials = trials.min(super::space::grid_size(&axes).min(u64::from(u32::MAX)) as u32);
    }
    let seed = seed.map_or_else(|| seed_of(uid), |s| s as u64);
    Ok(Search {
        metric: objective.metric.clone(),
        maximize,
        params,
        grid,
        seed,
        trials,
        asked: asked as u32,
        parallel: parallel as u32,
    })
}
