//! A search's trials: the TrainJob each trial is, what a trial shows of its progress, and the
//! step that decides which trials to create next and what the search's status says. Pure: the
//! controller reads the trials and writes what this returns.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::space::{grid_point, seed_of, unit};
use super::validate::Search;
use crate::trainer::optimization::OptimizationJob;

/// Label on every trial naming its search (shortened to fit a label).
pub const SEARCH_LABEL: &str = "trainyard.io/search";
/// Annotation with a trial's index in its search.
pub const TRIAL_ANNOTATION: &str = "trainyard.io/trial";
/// Annotation with a trial's parameter values, as a JSON object.
pub const PARAMETERS_ANNOTATION: &str = "trainyard.io/trial-parameters";
/// Annotation with the trials its search runs in all and at once, `<trials>/<parallel>`, so that
/// whoever reads a trial knows how much of the search remains.
pub const SIZE_ANNOTATION: &str = "trainyard.io/search-size";
/// Longest search prefix of a trial's name: `<prefix>-trial-<n>` stays short enough for the pod
/// names a JobSet makes from it (`<trainjob>-<job>-<i>-<j>`, a DNS label of at most 63).
const LONGEST_PREFIX: usize = 30;

/// The search's name as trial names and labels carry it: an RFC 1035 label of at most 30
/// characters. A name that had to change (cut, dots made dashes, or not starting with a letter)
/// carries a hash of the uid, so that two changed names never meet.
pub fn short_name(name: &str, uid: &str) -> String {
    let mut label = name.replace('.', "-");
    if !label.starts_with(|c: char| c.is_ascii_lowercase()) {
        label.insert_str(0, "s-");
    }
    if label == name && label.len() <= LONGEST_PREFIX {
        return label;
    }
    let cut = label[..label.len().min(LONGEST_PREFIX - 6)].trim_end_matches('-');
    format!("{cut}-{:05x}", seed_of(uid) & 0xF_FFFF)
}

/// The TrainJob name of trial `index`.
pub fn trial_name(name: &str, uid: &str, index: u32) -> String {
    format!("{}-trial-{index}", short_name(name, uid))
}

impl Search {
    /// The values of trial `index`, `(parameter, value)` in the spec's order; `None` past a grid's end.
    pub fn values(&self, index: u32) -> Option<Vec<(String, String)>> {
        let picked: Vec<String> = if self.grid {
            let axes: Vec<&[String]> = self.params.iter().filter_map(|p| p.space.choices()).collect();
            grid_point(&axes, index)?
        } else {
            self.params.iter().enumerate().map(|(j, p)| p.space.pick(unit(self.seed, index, j))).collect()
        };
        Some(self.params.iter().zip(picked).map(|(p, v)| (p.name.clone(), v)).collect())
    }
}

/// Trial `index` of `job`: the template with the trial's values in its trainer's environment,
/// labelled with its search, owned by it (deleting the search deletes its trials).
pub fn trial_object(job: &OptimizationJob, search: &Search, index: u32) -> Option<Value> {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let values = search.values(index)?;
    let template = &job.spec.train_job_template;
    let mut spec = serde_json::to_value(&template.spec).expect("a spec serialises");
    let env = &mut spec["trainer"]["env"];
    if !env.is_array() {
        *env = json!([]);
    }
    let list = env.as_array_mut().expect("made an array above");
    for (param, (_, value)) in search.params.iter().zip(&values) {
        list.push(json!({"name": param.env, "value": value}));
    }
    let mut labels = serde_json::to_value(&template.metadata.labels).expect("labels");
    labels[SEARCH_LABEL] = json!(short_name(name, uid));
    let mut annotations = serde_json::to_value(&template.metadata.annotations).expect("annotations");
    annotations[TRIAL_ANNOTATION] = json!(index.to_string());
    let by_name: serde_json::Map<String, Value> = values.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    annotations[PARAMETERS_ANNOTATION] = json!(Value::Object(by_name).to_string());
    annotations[SIZE_ANNOTATION] = json!(format!("{}/{}", search.trials, search.parallel));
    Some(json!({
        "apiVersion": crate::trainer::API_VERSION,
        "kind": "TrainJob",
        "metadata": {
            "name": trial_name(name, uid, index),
            "namespace": job.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": crate::trainer::API_VERSION, "kind": "OptimizationJob", "name": name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    }))
}

/// Where a trial is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Created, not admitted yet.
    Pending,
    /// Admitted (its gang placed or running).
    Running,
    /// Complete.
    Succeeded,
    /// Failed.
    Failed,
}

impl Phase {
    /// Whether the trial still holds one of the search's parallel slots.
    pub fn live(self) -> bool {
        matches!(self, Phase::Pending | Phase::Running)
    }

    fn name(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// A trial as the search sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// The TrainJob's name.
    pub name: String,
    /// Its index in the search.
    pub index: u32,
    /// Where it is.
    pub phase: Phase,
    /// Its parameter values.
    pub values: Vec<(String, String)>,
    /// The objective it reported, if it did.
    pub objective: Option<f64>,
}

fn condition_true(job: &Value, type_: &str) -> bool {
    job["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == type_ && c["status"] == "True")
}

/// `job` as a trial of the search whose uid is `owner_uid`, or `None` when it is not one.
pub fn observe(search: &Search, owner_uid: &str, job: &Value) -> Option<Trial> {
    let owners = job["metadata"]["ownerReferences"].as_array()?;
    if !owners.iter().any(|o| o["uid"] == owner_uid && o["kind"] == "OptimizationJob") {
        return None;
    }
    let annotations = &job["metadata"]["annotations"];
    let index: u32 = annotations[TRIAL_ANNOTATION].as_str()?.parse().ok()?;
    let phase = if condition_true(job, "Complete") {
        Phase::Succeeded
    } else if condition_true(job, "Failed") {
        Phase::Failed
    } else if condition_true(job, "Admitted") {
        Phase::Running
    } else {
        Phase::Pending
    };
    let objective = job["status"]["trainerStatus"]["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == search.metric.as_str())
        .and_then(|m| m["value"].as_str().map(str::to_owned).or_else(|| m["value"].as_f64().map(|v| v.to_string())))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite());
    let recorded: Option<serde_json::Map<String, Value>> =
        annotations[PARAMETERS_ANNOTATION].as_str().and_then(|t| serde_json::from_str(t).ok());
    let values = match recorded {
        Some(map) => search
            .params
            .iter()
            .map(|p| (p.name.clone(), map.get(&p.name).and_then(Value::as_str).unwrap_or_default().to_owned()))
            .collect(),
        None => search.values(index).unwrap_or_default(),
    };
    Some(Trial { name: job["metadata"]["name"].as_str()?.to_owned(), index, phase, values, objective })
}

/// What to do for a search now.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Trial indices to create, in order.
    pub create: Vec<u32>,
    /// The search's status after this step.
    pub status: Value,
    /// Whether the search has ended (every trial done).
    pub done: bool,
}

/// A `metav1.Condition`, keeping the transition time of an unchanged one in `previous`.
pub fn condition(previous: &Value, type_: &str, status: bool, reason: &str, message: String, now: &str) -> Value {
    let status = if status { "True" } else { "False" };
    let old = previous.as_array().into_iter().flatten().find(|c| c["type"] == type_);
    let since = old.filter(|c| c["status"] == status).and_then(|c| c["lastTransitionTime"].as_str()).unwrap_or(now);
    json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": since})
}

fn parameters(values: &[(String, String)]) -> Value {
    values.iter().map(|(name, value)| json!({"name": name, "value": value})).collect()
}

/// The best trial so far, by the objective's direction (ties go to the earlier trial).
pub fn best<'a>(search: &Search, trials: &'a [Trial]) -> Option<&'a Trial> {
    let better = |a: f64, b: f64| if search.maximize { a > b } else { a < b };
    trials.iter().filter(|t| t.phase == Phase::Succeeded).fold(None, |best: Option<&Trial>, t| {
        match (best, t.objective) {
            (_, None) => best,
            (None, Some(_)) => Some(t),
            (Some(b), Some(v)) => {
                let bv = b.objective.expect("only trials with an objective are kept");
                if better(v, bv) || (v == bv && t.index < b.index) { Some(t) } else { Some(b) }
            }
        }
    })
}

/// Decides which trials to create and the status, from the trials that exist. At most
/// `parallel` trials are live at once; indices are created lowest first, so a trial deleted by
/// hand is made again and every index is accounted for.
pub fn step(search: &Search, trials: &[Trial], previous: &Value, now: &str) -> Step {
    let made: BTreeSet<u32> = trials.iter().map(|t| t.index).collect();
    let live = trials.iter().filter(|t| t.phase.live()).count() as u32;
    let room = search.parallel.saturating_sub(live) as usize;
    let create: Vec<u32> = (0..search.trials).filter(|i| !made.contains(i)).take(room).collect();
    let mut sorted: Vec<&Trial> = trials.iter().collect();
    sorted.sort_by_key(|t| t.index);
    let finished = trials.iter().filter(|t| !t.phase.live()).count() as u32;
    let succeeded = trials.iter().filter(|t| t.phase == Phase::Succeeded).count();
    let done = create.is_empty() && made.len() as u32 >= search.trials && finished >= search.trials;
    let best = best(search, trials);
    let metric = &search.metric;
    let prev = &previous["conditions"];
    let mut conditions = vec![condition(
        prev,
        "Created",
        !made.is_empty() || !create.is_empty(),
        "TrialsCreated",
        format!(
            "{} of {} trials created, at most {} at once",
            made.len() + create.len(),
            search.trials,
            search.parallel
        ),
        now,
    )];
    if done {
        let grid_note = if search.trials < search.asked {
            format!(" (the grid has {} points, fewer than numTrials {})", search.trials, search.asked)
        } else {
            String::new()
        };
        let message = match best {
            Some(b) => format!(
                "{} trials ended, {succeeded} complete{grid_note}; best trial {}: {metric} = {}",
                search.trials,
                b.name,
                b.objective.expect("the best has an objective")
            ),
            None => format!("{} trials ended, {succeeded} complete{grid_note}; none reported {metric}", search.trials),
        };
        if succeeded > 0 {
            conditions.push(condition(prev, "Complete", true, "MaxTrialsReached", message, now));
        } else {
            conditions.push(condition(prev, "Failed", true, "AllTrialsFailed", message, now));
        }
    }
    let mut status = json!({
        "conditions": conditions,
        "trials": sorted.iter().map(|t| {
            let mut entry = json!({"trainJobName": t.name, "phase": t.phase.name(), "parameters": parameters(&t.values)});
            if let Some(v) = t.objective {
                entry["objective"] = json!(v.to_string());
            }
            entry
        }).collect::<Vec<_>>(),
    });
    // A merge patch keeps what it does not name: no best trial (any more) is written as null.
    status["result"] = match best {
        Some(b) => json!({"trainJobName": b.name, "parameters": parameters(&b.values)}),
        None => Value::Null,
    };
    Step { create, status, done }
}

/// The status of a search one of whose trial names another object holds: failed for good, as
/// that trial could never be made or told apart.
pub fn name_taken(trial: &str, previous: &Value, now: &str) -> Value {
    let message = format!(
        "TrainJob {trial} exists and is not a trial of this search; rename the search or delete that TrainJob, \
         then create the search again"
    );
    json!({"conditions": [condition(&previous["conditions"], "Failed", true, "TrialNameTaken", message, now)]})
}

/// The status of a search whose spec was refused: failed for good, naming the field.
pub fn refused(error: &super::SpecError, previous: &Value, now: &str) -> Value {
    let prev = &previous["conditions"];
    json!({"conditions": [condition(prev, "Failed", true, "InvalidSpec", error.to_string(), now)]})
}
