//! What can go wrong talking to Slurm, with Slurm's own words kept.

/// A Slurm operation that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlurmError {
    /// slurmrestd (or the command) could not be reached: retried with backoff.
    #[error("Slurm unreachable: {0}")]
    Unreachable(String),
    /// Slurm answered with errors; `messages` are Slurm's own (e.g. "Invalid partition name specified").
    #[error("Slurm refused {what}: {}", messages.join("; "))]
    Refused {
        /// The operation.
        what: String,
        /// Slurm's messages, verbatim.
        messages: Vec<String>,
    },
    /// slurmrestd did not accept the token (HTTP 401/403): expired, or for another user. Not
    /// retried here; a controller tries again later, when a rotated token may have arrived.
    #[error("Slurm did not accept the token for {what}: {message}")]
    Unauthorized {
        /// The operation.
        what: String,
        /// The status and slurmrestd's text.
        message: String,
    },
    /// The answer did not have the expected shape.
    #[error("unexpected answer from Slurm ({what}): {message}")]
    BadAnswer {
        /// The operation.
        what: String,
        /// What was wrong with it.
        message: String,
    },
    /// The gang cannot be expressed on this backend (e.g. a switch constraint over REST).
    #[error(transparent)]
    Spec(#[from] trainyard_bridges::slurm::SlurmSpecError),
}

impl SlurmError {
    /// Whether trying again later may succeed (the transport failed, not the request).
    pub fn is_transient(&self) -> bool {
        matches!(self, SlurmError::Unreachable(_))
    }

    /// Whether Slurm refused the job itself (its submission, or a job this backend cannot
    /// express), as opposed to a look-up around it failing: only then is a gang's run over.
    /// slurmrestd 22.05 answers a token it does not accept with an opaque error on whatever was
    /// asked, so a refused job listing must not count.
    pub fn refuses_submission(&self) -> bool {
        match self {
            SlurmError::Refused { what, .. } => what == "job/submit" || what.starts_with("sbatch"),
            SlurmError::Spec(_) => true,
            _ => false,
        }
    }
}

/// Slurm's error messages from a response body: `errors[]` entries use `error`, `description`
/// or both, depending on the endpoint and version.
pub fn error_messages(body: &serde_json::Value) -> Vec<String> {
    body.get("errors")
        .and_then(|e| e.as_array())
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| {
                    let text = |k: &str| e.get(k).and_then(|v| v.as_str()).filter(|s| !s.is_empty());
                    match (text("description"), text("error")) {
                        (Some(d), Some(x)) if d != x => Some(format!("{d} ({x})")),
                        (Some(d), _) => Some(d.to_string()),
                        (None, Some(x)) => Some(x.to_string()),
                        (None, None) => None,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_error_shapes_are_read() {
        let body = json!({"errors": [
            {"description": "Unable to find JobId=99999", "error_number": 2017, "error": "Invalid job id specified"},
            {"error_code": 2015, "error": "Requested partition configuration not available now"},
        ]});
        assert_eq!(
            error_messages(&body),
            vec![
                "Unable to find JobId=99999 (Invalid job id specified)".to_string(),
                "Requested partition configuration not available now".to_string(),
            ]
        );
        assert!(error_messages(&json!({"errors": []})).is_empty());
    }

    #[test]
    fn only_a_refused_job_ends_a_gang() {
        let refused = |what: &str| SlurmError::Refused { what: what.into(), messages: vec!["no".into()] };
        assert!(refused("job/submit").refuses_submission());
        assert!(refused("sbatch --parsable").refuses_submission());
        assert!(!refused("jobs").refuses_submission());
        assert!(!refused("squeue --all --states=all --json").refuses_submission());
        let unauthorized = SlurmError::Unauthorized { what: "jobs".into(), message: "HTTP 401".into() };
        assert!(!unauthorized.refuses_submission() && !unauthorized.is_transient());
    }
}
