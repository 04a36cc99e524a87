//! Hyperparameter searches: the spec's refusals name their field, trials carry their values,
//! and the step keeps at most `parallelTrials` live and accounts for every trial.

use proptest::prelude::*;
use serde_json::{Value, json};
use trainyard_bridges::search::{Phase, Trial, observe, step, trial_object, validate};
use trainyard_bridges::trainer::OptimizationJob;

fn search_yaml(extra: &str) -> OptimizationJob {
    let yaml = format!(
        "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: OptimizationJob
metadata: {{name: lr-sweep, namespace: ml, uid: 5f1c2d3e-aaaa-bbbb-cccc-000000000001}}
spec:
  objectives: [{{metric: loss, direction: Minimize}}]
  parameters:
  - {{name: learning-rate, searchSpace: {{logUniform: {{min: '1e-5', max: '1e-1'}}}}}}
  - {{name: batch, searchSpace: {{categorical: {{choices: ['32', '64']}}}}}}
  numTrials: 6
  parallelTrials: 2
  trainJobTemplate:
    metadata: {{labels: {{trainyard.io/queue: research}}}}
    spec:
      runtimeRef: {{name: torch-distributed}}
      trainer: {{numNodes: 1, env: [{{name: EPOCHS, value: '3'}}]}}
{extra}"
    );
    serde_saphyr::from_str(&yaml).expect("an OptimizationJob")
}

fn refused(mutate: impl FnOnce(&mut Value)) -> String {
    let mut job = serde_json::to_value(search_yaml("")).unwrap();
    mutate(&mut job);
    let job: OptimizationJob = serde_json::from_value(job).unwrap();
    validate(&job.spec, "uid").expect_err("refused").field
}

#[test]
fn bad_specs_name_the_field() {
    assert_eq!(refused(|j| j["spec"]["numTrials"] = json!(101)), "spec.numTrials");
    assert_eq!(refused(|j| j["spec"]["parallelTrials"] = json!(7)), "spec.parallelTrials");
    assert_eq!(refused(|j| j["spec"]["objectives"] = json!([])), "spec.objectives");
    assert_eq!(
        refused(|j| j["spec"]["parameters"][0]["searchSpace"]["logUniform"]["min"] = json!("0")),
        "spec.parameters[0].searchSpace.logUniform.min"
    );
    assert_eq!(
        refused(|j| j["spec"]["parameters"][0]["searchSpace"]["logUniform"]["max"] = json!("1e-6")),
        "spec.parameters[0].searchSpace.logUniform.max"
    );
    assert_eq!(
        refused(|j| j["spec"]["parameters"][0]["searchSpace"]["logUniform"]["min"] = json!("0x10")),
        "spec.parameters[0].searchSpace.logUniform.min"
    );
    assert_eq!(refused(|j| j["spec"]["parameters"][1]["name"] = json!("batch size")), "spec.parameters[1].name");
    assert_eq!(refused(|j| j["spec"]["parameters"][1]["name"] = json!("Learning.Rate")), "spec.parameters[1].name");
    assert_eq!(refused(|j| j["spec"]["searchAlgorithm"] = json!({"grid": {}})), "spec.parameters[0].searchSpace");
    assert_eq!(
        refused(|j| j["spec"]["trainJobTemplate"]["spec"]["trainer"]["env"][0]["name"] =
            json!("KUBEFLOW_TRAINER_OPT_BATCH")),
        "spec.trainJobTemplate.spec.trainer.env[0].name"
    );
    assert_eq!(
        refused(|j| j["spec"]["trainJobTemplate"]["metadata"]["name"] = json!("fixed")),
        "spec.trainJobTemplate.metadata.name"
    );
    assert_eq!(
        refused(|j| j["spec"]["trainJobTemplate"]["spec"]["runtimeRef"]["name"] = json!("")),
        "spec.trainJobTemplate.spec.runtimeRef.name"
    );
}

#[test]
fn a_trial_is_the_template_with_its_values_owned_by_the_search() {
    let job = search_yaml("");
    let search = validate(&job.spec, "uid").unwrap();
    let trial = trial_object(&job, &search, 3).unwrap();
    assert_eq!(trial["metadata"]["name"], "lr-sweep-trial-3");
    assert_eq!(trial["metadata"]["labels"]["trainyard.io/queue"], "research");
    assert_eq!(trial["metadata"]["labels"]["trainyard.io/search"], "lr-sweep");
    assert_eq!(trial["metadata"]["ownerReferences"][0]["kind"], "OptimizationJob");
    let env = trial["spec"]["trainer"]["env"].as_array().unwrap();
    assert_eq!(env[0]["name"], "EPOCHS", "the template's own variables stay first");
    let lr: f64 = env[1]["value"].as_str().unwrap().parse().unwrap();
    assert_eq!(env[1]["name"], "KUBEFLOW_TRAINER_OPT_LEARNING_RATE");
    assert!((1e-5..=1e-1).contains(&lr), "{lr}");
    assert!(["32", "64"].contains(&env[2]["value"].as_str().unwrap()));
    // The same trial again gives the same values: a restarted search redraws what it drew.
    assert_eq!(trial, trial_object(&job, &search, 3).unwrap());
    assert_ne!(trial["spec"], trial_object(&job, &search, 4).unwrap()["spec"]);
}

#[test]
fn grid_search_walks_every_point_once_and_stops_at_the_grid_size() {
    let mut job = serde_json::to_value(search_yaml("")).unwrap();
    job["spec"]["searchAlgorithm"] = json!({"grid": {}});
    job["spec"]["parameters"][0]["searchSpace"] = json!({"categorical": {"choices": ["0.1", "0.01"]}});
    let job: OptimizationJob = serde_json::from_value(job).unwrap();
    let search = validate(&job.spec, "uid").unwrap();
    assert_eq!(search.trials, 4, "2 x 2 points, fewer than the 6 asked");
    let points: std::collections::BTreeSet<_> = (0..4).map(|i| search.values(i).unwrap()).collect();
    assert_eq!(points.len(), 4);
    assert!(search.values(4).is_none());
}

fn seen(
    job: &OptimizationJob,
    search: &trainyard_bridges::search::Search,
    index: u32,
    phase: &str,
    loss: Option<&str>,
) -> Trial {
    let mut trial = trial_object(job, search, index).unwrap();
    if !phase.is_empty() {
        trial["status"]["conditions"] = json!([{"type": phase, "status": "True"}]);
    }
    if let Some(loss) = loss {
        trial["status"]["trainerStatus"]["metrics"] =
            json!([{"name": "acc", "value": "9"}, {"name": "loss", "value": loss}]);
    }
    observe(search, job.metadata.uid.as_deref().unwrap(), &trial).unwrap()
}

#[test]
fn the_step_keeps_two_live_and_reports_the_best_when_all_are_done() {
    let job = search_yaml("");
    let search = validate(&job.spec, "uid").unwrap();
    let first = step(&search, &[], &Value::Null, "t0");
    assert_eq!(first.create, vec![0, 1]);
    let trials = vec![seen(&job, &search, 0, "Admitted", None), seen(&job, &search, 1, "", None)];
    assert!(step(&search, &trials, &Value::Null, "t1").create.is_empty(), "two live, none more");
    let trials = vec![seen(&job, &search, 0, "Complete", Some("0.5")), seen(&job, &search, 1, "Admitted", None)];
    assert_eq!(step(&search, &trials, &Value::Null, "t2").create, vec![2]);
    let losses = ["0.5", "0.3", "0.9", "0.3", "0.7", "0.4"];
    let mut trials: Vec<Trial> = (0..6).map(|i| seen(&job, &search, i, "Complete", Some(losses[i as usize]))).collect();
    trials[4] = seen(&job, &search, 4, "Failed", None);
    let last = step(&search, &trials, &Value::Null, "t3");
    assert!(last.done && last.create.is_empty());
    assert_eq!(last.status["result"]["trainJobName"], "lr-sweep-trial-1", "the lowest loss, the earlier of a tie");
    assert_eq!(last.status["trials"].as_array().unwrap().len(), 6);
    let complete = last.status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Complete").unwrap();
    assert_eq!(complete["reason"], "MaxTrialsReached");
    assert!(complete["message"].as_str().unwrap().contains("loss = 0.3"), "{complete}");
    // The transition time of an unchanged condition stays.
    let again = step(&search, &trials, &last.status, "t4");
    assert_eq!(again.status["conditions"], last.status["conditions"]);
}

#[test]
fn a_trainjob_of_another_search_is_no_trial() {
    let job = search_yaml("");
    let search = validate(&job.spec, "uid").unwrap();
    let trial = trial_object(&job, &search, 0).unwrap();
    assert!(observe(&search, "someone-else", &trial).is_none());
}

proptest! {
    /// Whatever the trials' fates, in any order, the search never has more than `parallel`
    /// live trials, never makes an index twice or past `numTrials`, and ends with every trial.
    #[test]
    fn searches_never_overrun_and_account_for_every_trial(
        num in 1u32..12, parallel_seed in 0u32..100, fates in proptest::collection::vec((any::<bool>(), 0u32..1000), 40),
    ) {
        let parallel = 1 + parallel_seed % num;
        let mut value = serde_json::to_value(search_yaml("")).unwrap();
        value["spec"]["numTrials"] = json!(num);
        value["spec"]["parallelTrials"] = json!(parallel);
        let job: OptimizationJob = serde_json::from_value(value).unwrap();
        let search = validate(&job.spec, "uid").unwrap();
        let mut trials: Vec<Trial> = Vec::new();
        let mut status = Value::Null;
        for (ok, loss) in fates.iter().copied().cycle().take(200) {
            let s = step(&search, &trials, &status, "t");
            status = s.status.clone();
            for i in s.create {
                prop_assert!(i < num && trials.iter().all(|t| t.index != i), "index {i} made twice or past {num}");
                trials.push(seen(&job, &search, i, "Admitted", None));
            }
            prop_assert!(trials.iter().filter(|t| t.phase.live()).count() as u32 <= parallel);
            if s.done {
                break;
            }
            // One live trial ends.
            if let Some(t) = trials.iter_mut().find(|t| t.phase.live()) {
                t.phase = if ok { Phase::Succeeded } else { Phase::Failed };
                t.objective = ok.then_some(f64::from(loss));
            }
        }
        let end = step(&search, &trials, &status, "t");
        prop_assert!(end.done, "the search ended");
        prop_assert_eq!(trials.len() as u32, num);
        let best = trials.iter().filter(|t| t.phase == Phase::Succeeded).filter_map(|t| t.objective).fold(f64::INFINITY, f64::min);
        if best.is_finite() {
            let name = end.status["result"]["trainJobName"].as_str().unwrap();
            let chosen = trials.iter().find(|t| t.name == name).unwrap();
            prop_assert_eq!(chosen.objective, Some(best));
        }
    }
}

#[test]
fn trial_names_are_short_labels_that_never_meet() {
    use trainyard_bridges::search::trials::short_name;
    assert_eq!(short_name("lr-sweep", "u1"), "lr-sweep");
    let digit = short_name("2024-sweep", "u1");
    assert!(digit.starts_with("s-2024-sweep-") && digit.len() <= 30, "{digit}");
    assert_ne!(short_name("a.b", "u1"), short_name("a-b", "u2"), "a dotted name never meets a dashed one");
    let long = "a".repeat(253);
    let cut = short_name(&long, "u1");
    assert!(cut.len() <= 30 && cut != short_name(&long, "u2"), "{cut}");
    for name in [digit, cut, short_name("a.b", "u1")] {
        let trial = format!("{name}-trial-99");
        assert!(trial.len() <= 40, "{trial}");
        assert!(trial.starts_with(|c: char| c.is_ascii_lowercase()));
        assert!(trial.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{trial}");
    }
}
