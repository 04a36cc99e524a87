//! Who calls and what they may do: the bearer token checked by a TokenReview, each call by a
//! SubjectAccessReview for the same verb on the same resource that kubectl would need. Answers
//! are remembered for a few seconds, so a busy client costs the API server one review per
//! token and question, not one per call.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};
use tonic::Status;

/// How long a token's identity is remembered.
const TOKEN_TTL: Duration = Duration::from_secs(10);
/// How long a refused token is remembered (short: a token may become valid, e.g. just created).
const REFUSED_TTL: Duration = Duration::from_secs(2);
/// How long an access answer is remembered.
const ACCESS_TTL: Duration = Duration::from_secs(10);
/// Remembered answers of each kind before the memory is emptied (bounds memory under a flood of
/// distinct tokens).
const REMEMBERED: usize = 4096;

/// An authenticated caller, as the TokenReview named it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    /// User name.
    pub user: String,
    /// User uid, when the authenticator gives one.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// A Kubernetes permission: `verb` on `resource` of `group` in `namespace` (empty: cluster-wide),
/// optionally one object `name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// get, list, watch, create or delete.
    pub verb: &'static str,
    /// API group.
    pub group: &'static str,
    /// Plural resource name.
    pub resource: &'static str,
    /// Namespace; empty for all namespaces or a cluster-scoped resource.
    pub namespace: String,
    /// Object name; empty for a collection.
    pub name: String,
}

impl Access {
    /// `verb` on TrainJobs, the resource every job call is judged by.
    pub fn trainjobs(verb: &'static str, namespace: &str, name: &str) -> Access {
        Access {
            verb,
            group: "trainer.kubeflow.org",
            resource: "trainjobs",
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// Listing trainyard's cluster-scoped Queues.
    pub fn list_queues() -> Access {
        Access {
            verb: "list",
            group: crate::api::GROUP,
            resource: "queues",
            namespace: String::new(),
            name: String::new(),
        }
    }
}

/// The bearer token of a call's `authorization` metadata.
pub fn bearer(metadata: &tonic::metadata::MetadataMap) -> Result<&str, Status> {
    let value = metadata
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated("no bearer token: send `authorization: Bearer <token>`"))?;
    let text = value.to_str().map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
    match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => Ok(token.trim()),
        _ => Err(Status::unauthenticated("the authorization header is not `Bearer <token>`")),
    }
}

/// Checks tokens and permissions against the API server, with a short memory.
pub struct Authorizer {
    client: Client,
    tokens: Mutex<HashMap<String, (Option<Caller>, Instant)>>,
    access: Mutex<HashMap<(Caller, Access), (bool, Instant)>>,
}

impl Authorizer {
    /// Reviews through `client` (the controller's own identity, which may create reviews).
    pub fn new(client: Client) -> Authorizer {
        Authorizer { client, tokens: Mutex::new(HashMap::new()), access: Mutex::new(HashMap::new()) }
    }

    /// The caller behind `token`; UNAUTHENTICATED when the API server does not vouch for it.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, Status> {
        let now = Instant::now();
        let known = self.tokens.lock().expect("lock").get(token).cloned();
        let caller = match known {
            Some((caller, at)) if now.duration_since(at) < if caller.is_some() { TOKEN_TTL } else { REFUSED_TTL } => {
                caller
            }
            _ => {
                let caller = self.review_token(token).await?;
                let mut tokens = self.tokens.lock().expect("lock");
                if tokens.len() >= REMEMBERED {
                    tokens.clear();
                }
                tokens.insert(token.to_string(), (caller.clone(), now));
                caller
            }
        };
        caller.ok_or_else(|| Status::unauthenticated("the token was not accepted by the cluster"))
    }

    /// Passes when `caller` may do `access`; PERMISSION_DENIED naming the permission otherwise.
    pub async fn authorize(&self, caller: &Caller, access: &Access) -> Result<(), Status> {
        let now = Instant::now();
        let key = (caller.clone(), access.clone());
        let known = self.access.lock().expect("lock").get(&key).copied();
        let allowed = match known {
            Some((allowed, at)) if now.duration_since(at) < ACCESS_TTL => allowed,
            _ => {
                let allowed = self.review_access(caller, access).await?;
                let mut memory = self.access.lock().expect("lock");
                if memory.len() >= REMEMBERED {
                    memory.clear();
                }
                memory.insert(key, (allowed, now));
                allowed
            }
        };
        if allowed {
            return Ok(());
        }
        let scope = match (access.namespace.as_str(), access.resource) {
            ("", "queues") => "at the cluster scope".to_string(),
            ("", _) => "in all namespaces".to_string(),
            (ns, _) => format!("in namespace {ns:?}"),
        };
        Err(Status::permission_denied(format!(
            "user {:?} cannot {} {}.{} {scope}",
            caller.user, access.verb, access.resource, access.group
        )))
    }

    async fn review_token(&self, token: &str) -> Result<Option<Caller>, Status> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), audiences: None },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable("TokenReview", &e))?;
        let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
            return Ok(None);
        };
        let user = status.user.unwrap_or_default();
        Ok(user.username.filter(|u| !u.is_empty()).map(|name| Caller {
            user: name,
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
        }))
    }

    async fn review_access(&self, caller: &Caller, access: &Access) -> Result<bool, Status> {
        let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.user.clone()),
                uid: non_empty(&caller.uid),
                groups: Some(caller.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(access.verb.to_string()),
                    group: Some(access.group.to_string()),
                    resource: Some(access.resource.to_string()),
                    namespace: non_empty(&access.namespace),
                    name: non_empty(&access.name),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| unavailable("SubjectAccessReview", &e))?;
        Ok(answer.status.is_some_and(|s| s.allowed && s.denied != Some(true)))
    }
}

/// The API server could not answer a review: the caller is not at fault, so not UNAUTHENTICATED.
fn unavailable(what: &str, e: &kube::Error) -> Status {
    tracing::warn!(error = %e, "{what} failed");
    Status::unavailable(format!("cannot check the call with the cluster ({what} failed); retry"))
}
