//! Admissions are not serialised behind writes: against an API server that takes 200 ms for
//! every request, the scheduling loop decides N admissions in one cycle without waiting on any of
//! them, the reconciles write their records side by side (`--workers`), and TrainJob status goes
//! through the status writer instead of holding a reconcile. Time is tokio's paused clock, so the
//! numbers are exact, not timings.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tokio::time::Instant;
use trainyard::controller::acting::actor::Actor;
use trainyard::controller::acting::status_writer::StatusWriter;
use trainyard::controller::deciding::plan::Action;
use trainyard::controller::deciding::scheduling_loop::Decision;

use super::cluster::*;
use super::common::World;

const WRITE: Duration = Duration::from_millis(200);

/// Each request the server saw: method, path, when.
type Seen = Arc<Mutex<Vec<(String, String, Duration)>>>;

/// A server that answers every request after 200 ms: with the TrainJob for a TrainJob path, else
/// with the request's own body (an apply is an object of the kind asked for); it notes when each
/// request came.
fn slow_server(start: Instant, jobs: Vec<trainyard::api::TrainJob>) -> (Client, Seen) {
    let jobs: Arc<std::collections::BTreeMap<String, Vec<u8>>> =
        Arc::new(jobs.iter().map(|j| (j.metadata.name.clone().unwrap(), serde_json::to_vec(j).unwrap())).collect());
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (log, jobs) = (log.clone(), jobs.clone());
            tokio::spawn(async move {
                let (method, path) = (request.method().to_string(), request.uri().path().to_string());
                log.lock().unwrap().push((method, path.clone(), start.elapsed()));
                let bytes = request.into_body().collect_bytes().await.unwrap();
                tokio::time::sleep(WRITE).await;
                let job = path.split("/trainjobs/").nth(1).map(|rest| rest.trim_end_matches("/status"));
                let reply = match job.and_then(|name| jobs.get(name)) {
                    Some(job) => job.clone(),
                    None if bytes.is_empty() => b"{}".to_vec(),
                    None => bytes.to_vec(),
                };
                send.send_response(Response::builder().status(200).body(Body::from(reply)).unwrap());
            });
        }
    });
    (Client::new(service, "default"), seen)
}

#[tokio::test(start_paused = true)]
async fn n_admissions_take_about_one_write_each_not_n() {
    const N: usize = 24;
    let nodes: Vec<_> = (0..N).map(|i| node(&format!("n{i:02}"), 8)).collect();
    let rt = runtime_yaml("gpu", "");
    let policy = "queues:\n  - {name: team, nominal: {gpus: 1000}}\nundeclared_queues: reject\n";
    let mut h = Harness::with_policy(policy, &nodes, runtimes(std::slice::from_ref(&rt)));
    for i in 0..N {
        h.job(trainjob(&format!("g{i:02}"), "gpu", "team", 1, 8, i as u64));
    }
    let start = Instant::now();
    h.cycle();
    assert_eq!(start.elapsed(), Duration::ZERO, "the loop decides without waiting on the API server");
    let worlds: Vec<World> = h
        .jobs
        .values()
        .map(|j| {
            let mut w = World::new(super::common::with_finalizer(j.clone()), &rt);
            w.decision = h.decision(j.metadata.name.as_deref().unwrap());
            assert!(matches!(w.decision, Some(Decision::Admit(_))), "{:?}", w.decision);
            w
        })
        .collect();
    let (client, seen) = slow_server(start, worlds.iter().map(|w| w.job.clone()).collect());
    let status = StatusWriter::default();
    tokio::spawn(status.clone().run(client.clone(), 16));
    let actor = Actor::new(client, None).with_status_writer(status.clone());
    // As the controller runs its reconciles: up to --workers (32) at a time.
    futures::stream::iter(worlds)
        .for_each_concurrent(32, |w| {
            let actor = actor.clone();
            async move {
                let writes: Vec<Action> = w.plan().into_iter().filter(|a| !matches!(a, Action::Event { .. })).collect();
                actor.run(&w.job, &writes).await.unwrap();
            }
        })
        .await;
    let reconciled = start.elapsed();
    // Record, JobSet: two writes one after the other per TrainJob, all TrainJobs side by side.
    assert_eq!(reconciled, 2 * WRITE, "N admissions in two writes' time, not {N} times that");
    let log = seen.lock().unwrap().clone();
    let first_window =
        log.iter().filter(|(_, p, t)| p.contains("/trainjobs/") && !p.ends_with("/status") && *t < WRITE).count();
    assert_eq!(first_window, N, "every record went out at once");
    // The statuses were handed to the writer and go out in parallel batches, after the launches.
    tokio::time::sleep(3 * WRITE).await;
    let statuses = seen.lock().unwrap().iter().filter(|(_, p, _)| p.ends_with("/status")).count();
    assert_eq!(statuses, N, "one status per TrainJob, none waited for by a reconcile");
    assert_eq!(status.backlog(), 0);
}
