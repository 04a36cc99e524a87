//! The harness's side of the API: objects as JSON of any kind (found by discovery, remembered),
//! applied server-side, read, listed and deleted; and the one way the suite waits for something.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;

/// The YAML documents of `text` as JSON values (empty documents skipped).
pub fn yaml_documents(text: &str, file: &Path) -> Result<Vec<Value>> {
    // Upstream CRDs are megabytes of deeply nested schema: far past the parser's default budget,
    // which is meant for configuration files.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! { max_events: 100_000_000, max_nodes: 100_000_000, max_depth: 1_024 },
    };
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| anyhow!("{}: {e}", file.display()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The kinds met, by apiVersion and kind: their resource and whether it is namespaced.
type Kinds = HashMap<(String, String), (ApiResource, bool)>;

/// A client that knows the kinds it has met.
#[derive(Clone)]
pub struct Kube {
    /// The client.
    pub client: Client,
    kinds: Arc<Mutex<Kinds>>,
}

impl Kube {
    /// Wraps a client.
    pub fn new(client: Client) -> Kube {
        Kube { client, kinds: Arc::default() }
    }

    /// The resource of `apiVersion` + `kind`, and whether it is namespaced.
    pub async fn resource(&self, api_version: &str, kind: &str) -> Result<(ApiResource, bool)> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.kinds.lock().expect("lock").get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = pinned_kind(&self.client, &gvk)
            .await
            .with_context(|| format!("the server does not serve {api_version} {kind}"))?;
        let found = (ar, caps.scope == Scope::Namespaced);
        self.kinds.lock().expect("lock").insert(key, found.clone());
        Ok(found)
    }

    /// The API of one kind, in `namespace` when it is namespaced.
    pub async fn api(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Result<Api<DynamicObject>> {
        let (ar, namespaced) = self.resource(api_version, kind).await?;
        Ok(match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            _ => Api::all_with(self.client.clone(), &ar),
        })
    }

    async fn api_of(&self, object: &Value) -> Result<(Api<DynamicObject>, String)> {
        let field = |p: &str| object.pointer(p).and_then(Value::as_str);
        let (Some(av), Some(kind), Some(name)) = (field("/apiVersion"), field("/kind"), field("/metadata/name")) else {
            bail!("object without apiVersion, kind or metadata.name: {object}");
        };
        Ok((self.api(av, kind, field("/metadata/namespace")).await?, name.to_string()))
    }

    /// Server-side apply as field manager `manager` (forced).
    pub async fn apply_as(&self, manager: &str, object: &Value) -> Result<Value> {
        let (api, name) = self.api_of(object).await?;
        let applied = api
            .patch(&name, &PatchParams::apply(manager).force(), &Patch::Apply(object))
            .await
            .with_context(|| format!("applying {} {name}", object["kind"].as_str().unwrap_or("?")))?;
        Ok(serde_json::to_value(applied)?)
    }

    /// Server-side apply as the harness (`e2e`).
    pub async fn apply(&self, object: &Value) -> Result<Value> {
        self.apply_as("e2e", object).await
    }

    /// Creates an object (a plain POST, as kubectl create does).
    pub async fn create(&self, object: &Value) -> Result<Value> {
        let (api, _) = self.api_of(object).await?;
        let obj: DynamicObject = serde_json::from_value(object.clone())?;
        Ok(serde_json::to_value(api.create(&PostParams::default(), &obj).await?)?)
    }

    /// Creates an object, trying again every 200 ms while the API server is away (a create that
    /// went through before an answer was lost counts: 409 AlreadyExists is success).
    pub async fn create_retrying(&self, object: &Value, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let err = match self.create(object).await {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            let exists =
                err.downcast_ref::<kube::Error>().is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 409));
            if exists {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err.context(format!("creating {} for {} s", name_of(object), timeout.as_secs())));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The object, or `None` when it does not exist.
    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>> {
        let api = self.api(api_version, kind, namespace).await?;
        Ok(api.get_opt(name).await?.map(|o| serde_json::to_value(o).expect("objects serialize")))
    }

    /// Every object of a kind (in `namespace`, or everywhere), optionally by label selector.
    pub async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<Value>> {
        let api = self.api(api_version, kind, namespace).await?;
        let mut params = ListParams::default();
        if let Some(s) = selector {
            params = params.labels(s);
        }
        let list = api.list(&params).await?;
        Ok(list.items.into_iter().map(|o| serde_json::to_value(o).expect("objects serialize")).collect())
    }

    /// Deletes an object (background propagation); absent is fine.
    pub async fn delete(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Result<()> {
        let api = self.api(api_version, kind, namespace).await?;
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A JSON merge patch.
    pub async fn merge(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<()> {
        let api = self.api(api_version, kind, namespace).await?;
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
        Ok(())
    }

    /// A JSON merge patch of the status subresource.
    pub async fn merge_status(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<()> {
        let api = self.api(api_version, kind, namespace).await?;
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
        Ok(())
    }

    /// Removes every finalizer of an object (absent is fine).
    pub async fn strip_finalizers(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<()> {
        let api = self.api(api_version, kind, namespace).await?;
        let patch = serde_json::json!({"metadata": {"finalizers": null}});
        match api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The name of an object as JSON.
pub fn name_of(object: &Value) -> String {
    object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string()
}

/// A condition of an object's status, when present: `(status, reason, message)`.
pub fn condition(object: &Value, type_: &str) -> Option<(String, String, String)> {
    let conditions = object.pointer("/status/conditions")?.as_array()?;
    let c = conditions.iter().find(|c| c["type"] == type_)?;
    let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// Whether a condition is True.
pub fn is_true(object: &Value, type_: &str) -> bool {
    condition(object, type_).is_some_and(|(s, ..)| s == "True")
}

/// Waits up to `timeout` for `probe` to answer `Some`, asking every 100 ms. The error says what
/// was awaited and the last thing `probe` reported (its `Err`, or "nothing yet").
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::from("nothing yet");
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            bail!("timed out after {:.0} s waiting for {what} (last: {last})", timeout.as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_split_and_empty_ones_skipped() {
        let docs = yaml_documents("---\na: 1\n---\n---\nb: [x]\n", Path::new("t.yaml")).unwrap();
        assert_eq!(docs, vec![serde_json::json!({"a": 1}), serde_json::json!({"b": ["x"]})]);
    }

    #[test]
    fn conditions_are_read() {
        let tj = serde_json::json!({"status": {"conditions": [{"type": "Queued", "status": "True", "reason": "QuotaExceeded", "message": "m"}]}});
        assert_eq!(condition(&tj, "Queued"), Some(("True".into(), "QuotaExceeded".into(), "m".into())));
        assert!(is_true(&tj, "Queued"));
        assert!(!is_true(&tj, "Admitted"));
    }

    #[tokio::test]
    async fn a_wait_that_times_out_says_what_it_saw() {
        let err = wait_for::<(), _, _>("the moon", Duration::from_millis(150), || async { Err(anyhow!("clouds")) })
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("the moon") && err.contains("clouds"), "{err}");
    }
}
