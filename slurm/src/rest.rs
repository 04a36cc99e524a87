//! slurmrestd over HTTP with JWT: the API version found at start-up, Slurm's errors kept verbatim.

use std::time::Duration;

use serde_json::Value;
use trainyard_bridges::slurm::{SlurmGang, render_rest_body};

use crate::error::{SlurmError, error_messages};
use crate::jobs::{JobInfo, parse_jobs};
use crate::nodes::{NodeInfo, parse_nodes};

/// The API versions whose job submission body trainyard writes, newest first.
pub const SUPPORTED_APIS: [&str; 3] = ["v0.0.38", "v0.0.37", "v0.0.36"];

/// Where slurmrestd is and who we are to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestConfig {
    /// Base URL, e.g. `http://127.0.0.1:6820`.
    pub url: String,
    /// `X-SLURM-USER-NAME`.
    pub user: String,
    /// `X-SLURM-USER-TOKEN` (a JWT from `scontrol token`).
    pub token: String,
    /// Where the token came from, to read it again when slurmrestd stops accepting it (tokens
    /// expire; whoever mints them rewrites the file).
    pub token_file: Option<String>,
}

impl RestConfig {
    /// From the environment: `SLURMRESTD_URL`, `SLURMRESTD_USER` (default `root`) and the token
    /// from `SLURMRESTD_TOKEN` or the file named by `SLURMRESTD_TOKEN_FILE`. `None` without a URL.
    pub fn from_env() -> Result<Option<RestConfig>, String> {
        let Ok(url) = std::env::var("SLURMRESTD_URL") else { return Ok(None) };
        let user = std::env::var("SLURMRESTD_USER").unwrap_or_else(|_| "root".into());
        let (token, token_file) = match (std::env::var("SLURMRESTD_TOKEN"), std::env::var("SLURMRESTD_TOKEN_FILE")) {
            (Ok(t), _) => (t, None),
            (Err(_), Ok(path)) => (read_token(&path)?, Some(path)),
            _ => return Err("SLURMRESTD_URL is set but neither SLURMRESTD_TOKEN nor SLURMRESTD_TOKEN_FILE".into()),
        };
        Ok(Some(RestConfig { url: url.trim_end_matches('/').to_string(), user, token, token_file }))
    }
}

/// The token in a file as `scontrol token` prints it (`SLURM_JWT=...`) or bare.
fn read_token(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("SLURMRESTD_TOKEN_FILE {path}: {e}"))?;
    Ok(text.trim().trim_start_matches("SLURM_JWT=").to_string())
}

/// A slurmrestd client.
#[derive(Debug)]
pub struct RestClient {
    http: reqwest::Client,
    config: RestConfig,
    token: std::sync::RwLock<String>,
    api: String,
}

impl Clone for RestClient {
    fn clone(&self) -> RestClient {
        RestClient {
            http: self.http.clone(),
            config: self.config.clone(),
            token: std::sync::RwLock::new(self.token()),
            api: self.api.clone(),
        }
    }
}

impl RestClient {
    /// Connects and picks the newest supported API version the server lists in `/openapi`
    /// (falling back to pinging each version when that document is not served).
    pub async fn connect(config: RestConfig) -> Result<RestClient, SlurmError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| SlurmError::Unreachable(e.to_string()))?;
        let token = std::sync::RwLock::new(config.token.clone());
        let mut client = RestClient { http, config, token, api: String::new() };
        let listed = client.get_json("/openapi").await;
        let api = match listed {
            Ok(doc) => {
                let paths = doc.get("paths").and_then(Value::as_object);
                SUPPORTED_APIS
                    .into_iter()
                    .find(|v| paths.is_some_and(|p| p.contains_key(&format!("/slurm/{v}/job/submit"))))
            }
            Err(e) if e.is_transient() => return Err(e),
            Err(_) => {
                let mut found = None;
                for v in SUPPORTED_APIS {
                    if client.get_json(&format!("/slurm/{v}/ping")).await.is_ok() {
                        found = Some(v);
                        break;
                    }
                }
                found
            }
        };
        client.api = api
            .ok_or_else(|| SlurmError::BadAnswer {
                what: "API versions".into(),
                message: format!("slurmrestd serves none of {}", SUPPORTED_APIS.join(", ")),
            })?
            .to_string();
        Ok(client)
    }

    /// The API version in use.
    pub fn api(&self) -> &str {
        &self.api
    }

    fn token(&self) -> String {
        self.token.read().map(|t| t.clone()).unwrap_or_default()
    }

    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Result<Value, SlurmError> {
        let retry = request.try_clone();
        let response = self.send_once(request, what).await?;
        // An expired token: read the file again (it may have been renewed) and try once more.
        if response.status().as_u16() == 401
            && let (Some(path), Some(retry)) = (&self.config.token_file, retry)
            && let Ok(fresh) = read_token(path)
            && fresh != self.token()
        {
            if let Ok(mut t) = self.token.write() {
                *t = fresh;
            }
            return self.read(self.send_once(retry, what).await?, what).await;
        }
        self.read(response, what).await
    }

    async fn send_once(&self, request: reqwest::RequestBuilder, what: &str) -> Result<reqwest::Response, SlurmError> {
        request
            .header("X-SLURM-USER-NAME", &self.config.user)
            .header("X-SLURM-USER-TOKEN", self.token())
            .send()
            .await
            .map_err(|e| SlurmError::Unreachable(format!("{what}: {e}")))
    }

    async fn read(&self, response: reqwest::Response, what: &str) -> Result<Value, SlurmError> {
        let status = response.status();
        let text = response.text().await.map_err(|e| SlurmError::Unreachable(format!("{what}: {e}")))?;
        if status.as_u16() == 401 || status.as_u16() == 403 {
            return Err(SlurmError::Unauthorized {
                what: what.into(),
                message: format!("HTTP {status}: {}", text.trim()),
            });
        }
        let body: Value = serde_json::from_str(&text).map_err(|e| SlurmError::BadAnswer {
            what: what.into(),
            message: format!("HTTP {status}, not JSON ({e}): {}", text.chars().take(200).collect::<String>()),
        })?;
        let messages = error_messages(&body);
        if !status.is_success() {
            let messages = if messages.is_empty() { vec![format!("HTTP {status}")] } else { messages };
            // slurmrestd answers 500 when it cannot reach slurmctld; that passes.
            if messages.iter().any(|m| m.contains("Unable to contact slurm controller")) {
                return Err(SlurmError::Unreachable(format!("{what}: {}", messages.join("; "))));
            }
            return Err(SlurmError::Refused { what: what.into(), messages });
        }
        Ok(body)
    }

    async fn get_json(&self, path: &str) -> Result<Value, SlurmError> {
        self.send(self.http.get(format!("{}{path}", self.config.url)), path).await
    }

    fn path(&self, rest: &str) -> String {
        format!("{}/slurm/{}/{rest}", self.config.url, self.api)
    }

    /// Submits the gang; Slurm's refusal (unknown partition, more nodes than the partition has)
    /// is an error with Slurm's message, and a job Slurm created anyway is cancelled first.
    pub async fn submit(&self, gang: &SlurmGang) -> Result<u64, SlurmError> {
        let body = render_rest_body(gang)?;
        let answer = self.send(self.http.post(self.path("job/submit")).json(&body), "job/submit").await?;
        let messages = error_messages(&answer);
        let id = answer.get("job_id").and_then(Value::as_u64);
        match (id, messages.is_empty()) {
            (Some(id), true) => Ok(id),
            (Some(id), false) => {
                // Accepted but unrunnable as asked (it would pend forever): take it back.
                let _ = self.cancel(id).await;
                Err(SlurmError::Refused { what: "job/submit".into(), messages })
            }
            (None, _) => Err(SlurmError::Refused { what: "job/submit".into(), messages }),
        }
    }

    /// Every job Slurm still knows (finished ones stay for `MinJobAge`).
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        parse_jobs(&self.send(self.http.get(self.path("jobs")), "jobs").await?)
    }

    /// Cancels a job; one Slurm no longer knows counts as cancelled.
    pub async fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        match self.send(self.http.delete(self.path(&format!("job/{id}"))), "job cancel").await {
            Ok(_) => Ok(()),
            Err(SlurmError::Refused { messages, .. }) if messages.iter().any(|m| m.contains("Invalid job id")) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Every node.
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        parse_nodes(&self.send(self.http.get(self.path("nodes")), "nodes").await?)
    }
}
