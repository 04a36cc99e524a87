//! The Secret a gang's pods mount from launch on (an MPI gang's SSH key `<trainjob>-mpi-ssh-auth`,
//! a Flux gang's CURVE certificate `<trainjob>-flux-curve`): made once by trainyard before the JobSet, owned by the TrainJob (the garbage
//! collector removes it with it), never written over. A Secret of that name trainyard did not
//! make for this TrainJob fails the TrainJob naming it; one left by an earlier TrainJob of the
//! same name (still being collected) is waited for.

use serde_json::Value;

/// What the reconciler found where the gang's Secret goes (looked at only for MPI gangs that
/// are about to launch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSeen {
    /// No Secret of that name: trainyard makes it.
    Absent,
    /// The one trainyard made for this TrainJob.
    Ours,
    /// Made for an earlier TrainJob of the same name (a different uid); the garbage collector
    /// removes it once that TrainJob is gone.
    Previous,
    /// Anything else, with what it is.
    Foreign(String),
}

/// Judges a Secret's metadata (`None`: absent) for the TrainJob `job` of `uid`; `mounted_as` says
/// what the gang's pods would take it for.
pub fn judge(
    metadata: Option<&Value>,
    namespace: &str,
    secret: &str,
    job: &str,
    uid: &str,
    mounted_as: &str,
) -> SecretSeen {
    let Some(meta) = metadata else { return SecretSeen::Absent };
    let controller = meta
        .pointer("/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
        .cloned();
    match controller {
        Some(r) if r["kind"] == "TrainJob" && r["uid"] == uid => SecretSeen::Ours,
        Some(r) if r["kind"] == "TrainJob" && r["name"] == job => SecretSeen::Previous,
        other => {
            let by = match other {
                Some(r) => format!(
                    "it is controlled by {} {}",
                    r["kind"].as_str().unwrap_or("?"),
                    r["name"].as_str().unwrap_or("?")
                ),
                None => "it has no controller reference".to_string(),
            };
            SecretSeen::Foreign(format!(
                "Secret {namespace}/{secret} exists and was not made by trainyard for this TrainJob ({by}); \
                 {mounted_as}, and trainyard never overwrites a Secret: delete or rename it, then create the \
                 TrainJob again"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned_by(kind: &str, name: &str, uid: &str) -> Value {
        json!({"ownerReferences": [{"kind": kind, "name": name, "uid": uid, "controller": true}]})
    }

    #[test]
    fn a_secret_is_ours_previous_or_foreign() {
        let judge = |m: Option<&Value>| judge(m, "team", "llm-mpi-ssh-auth", "llm", "u-2", "the pods would mount it");
        assert_eq!(judge(None), SecretSeen::Absent);
        assert_eq!(judge(Some(&owned_by("TrainJob", "llm", "u-2"))), SecretSeen::Ours);
        assert_eq!(judge(Some(&owned_by("TrainJob", "llm", "u-1"))), SecretSeen::Previous);
        let SecretSeen::Foreign(why) = judge(Some(&json!({}))) else { panic!("foreign") };
        assert!(why.contains("team/llm-mpi-ssh-auth") && why.contains("no controller reference"), "{why}");
        let SecretSeen::Foreign(why) = judge(Some(&owned_by("Deployment", "web", "x"))) else { panic!("foreign") };
        assert!(why.contains("controlled by Deployment web"), "{why}");
    }
}
