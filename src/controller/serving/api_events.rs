//! The researcher API's Watch events, from the decisions a cycle changed: admissions,
//! preemptions, launches, ends and new reasons to wait. Pure; the scheduling task broadcasts
//! them and each stream numbers its own.

use crate::controller::deciding::scheduling_loop::Decision;
use crate::controller::serving::api_answers::{job_ref, job_view, label_queue};
use crate::controller::watching::live::{Changed, Live};
use crate::grpc::v1;
use v1::event::Kind;

/// What a changed decision tells a watcher.
fn kind_of(decision: Option<&Decision>) -> Kind {
    match decision {
        None => Kind::Ended,
        Some(Decision::Admit(_)) => Kind::Admitted,
        Some(Decision::Running) => Kind::Started,
        Some(Decision::Preempt { .. }) => Kind::Preempted,
        Some(Decision::Pending { .. }) => Kind::Pending,
        Some(Decision::Unschedulable { .. }) => Kind::Unschedulable,
        Some(Decision::Move(_) | Decision::Requeue { .. } | Decision::Degraded { .. }) => Kind::Moved,
    }
}

/// One event per changed decision, in key order, stamped with the sending replica and `at`.
pub fn events_of(live: &Live, changed: &Changed, leader: &str, at: u64) -> Vec<v1::Event> {
    changed
        .iter()
        .map(|(key, decision)| {
            let mut job = match live.entry(key) {
                Some(entry) => job_view(entry, decision.as_ref()),
                None => {
                    let r = job_ref(key);
                    let mut job = v1::Job { namespace: r.namespace, name: r.name, ..Default::default() };
                    job.set_state(v1::JobState::Inactive);
                    job.reason = "Deleted".into();
                    job
                }
            };
            label_queue(live, key, &mut job);
            let mut event =
                v1::Event { job: Some(job), sequence: 0, leader: leader.to_string(), at, ..Default::default() };
            event.set_kind(kind_of(decision.as_ref()));
            event
        })
        .collect()
}

/// The opening events of a stream: every matching TrainJob as it stands (no time: they report a
/// state, not something that happened).
pub fn initial_events(jobs: Vec<v1::Job>, leader: &str) -> Vec<v1::Event> {
    jobs.into_iter()
        .map(|job| {
            let mut event = v1::Event { job: Some(job), leader: leader.to_string(), ..Default::default() };
            event.set_kind(Kind::Initial);
            event
        })
        .collect()
}
