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
}
