//! Objects applied and pods bound moments ago: a reconcile planned on caches that have not seen them yet would
//! apply them again (the same body, a request for nothing), so those are left out for a while.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long an applied body counts as recent: longer than a watch event takes to arrive under
/// load, short enough that an object deleted by someone else right after is soon made again.
const KEPT_FOR: Duration = Duration::from_secs(5);
/// Entries kept before the stale ones are dropped.
const PRUNE_ABOVE: usize = 1024;

/// The bodies applied lately, by kind, namespace and name.
#[derive(Debug, Default)]
pub struct RecentApplies {
    by_object: HashMap<String, (u64, Instant)>,
}

fn key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

fn key_of(object: &Value) -> String {
    let field = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    key(field("/kind"), field("/metadata/namespace"), field("/metadata/name"))
}

fn digest(object: &Value) -> u64 {
    trainyard_topology::rng::fnv1a(object.to_string().as_bytes())
}

impl RecentApplies {
    /// Whether this very body was applied within the last few seconds.
    pub fn recent(&self, object: &Value) -> bool {
        self.recent_at(object, Instant::now())
    }

    fn recent_at(&self, object: &Value, now: Instant) -> bool {
        self.seen_within(&key_of(object), digest(object), now)
    }

    /// Notes a body applied now.
    pub fn note(&mut self, object: &Value) {
        self.remember(key_of(object), digest(object));
    }

    /// Whether pod `name` was bound to `node` within the last few seconds.
    pub fn bound(&self, namespace: &str, name: &str, node: &str) -> bool {
        self.seen_within(&key("Pod", namespace, name), trainyard_topology::rng::fnv1a(node.as_bytes()), Instant::now())
    }

    /// Notes pod `name` bound to `node` now.
    pub fn note_bound(&mut self, namespace: &str, name: &str, node: &str) {
        self.remember(key("Pod", namespace, name), trainyard_topology::rng::fnv1a(node.as_bytes()));
    }

    fn seen_within(&self, key: &str, digest: u64, now: Instant) -> bool {
        self.by_object.get(key).is_some_and(|(d, at)| *d == digest && now.saturating_duration_since(*at) < KEPT_FOR)
    }

    fn remember(&mut self, key: String, digest: u64) {
        let now = Instant::now();
        if self.by_object.len() >= PRUNE_ABOVE {
            self.by_object.retain(|_, (_, at)| now.saturating_duration_since(*at) < KEPT_FOR);
        }
        self.by_object.insert(key, (digest, now));
    }

    /// Forgets an object (deleted: applied again, it is new).
    pub fn forget(&mut self, kind: &str, namespace: &str, name: &str) {
        self.by_object.remove(&key(kind, namespace, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jobset(replicas: u32) -> Value {
        json!({"kind": "JobSet", "metadata": {"name": "a", "namespace": "n"}, "spec": {"replicas": replicas}})
    }

    #[test]
    fn the_same_body_is_recent_for_a_while_and_a_changed_or_deleted_one_is_not() {
        let mut r = RecentApplies::default();
        assert!(!r.recent(&jobset(1)));
        r.note(&jobset(1));
        assert!(r.recent(&jobset(1)));
        assert!(!r.recent(&jobset(2)), "another body is applied");
        let later = Instant::now() + KEPT_FOR;
        assert!(!r.recent_at(&jobset(1), later), "applied again once the moment has passed");
        r.forget("JobSet", "n", "a");
        assert!(!r.recent(&jobset(1)), "a deleted object is applied again");
    }

    #[test]
    fn a_binding_is_recent_only_to_the_same_node() {
        let mut r = RecentApplies::default();
        assert!(!r.bound("n", "p", "host-a"));
        r.note_bound("n", "p", "host-a");
        assert!(r.bound("n", "p", "host-a"));
        assert!(!r.bound("n", "p", "host-b"));
    }

    #[test]
    fn stale_entries_are_dropped_as_new_ones_come() {
        let mut r = RecentApplies::default();
        for i in 0..PRUNE_ABOVE + 10 {
            r.note(&json!({"kind": "ConfigMap", "metadata": {"name": format!("c{i}"), "namespace": "n"}}));
        }
        assert_eq!(r.by_object.len(), PRUNE_ABOVE + 10, "fresh entries stay");
    }
}
