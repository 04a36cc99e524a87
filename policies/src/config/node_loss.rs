//! What happens to a running gang when a host under it is lost: cordoned, not ready, or removed.

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::{Reporter, parse_duration};
use crate::Result;

/// How long a host must stay lost before the action, when the file gives none.
pub const DEFAULT_NODE_LOSS_GRACE_S: u64 = 60;

/// The action on a running gang whose host is lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeLossAction {
    /// Leave the gang where it is (it keeps its hosts, lost ones included, until it ends) and
    /// report the lost host.
    #[default]
    Wait,
    /// Send the whole gang back to the queue in its old place.
    Requeue,
    /// Move the lost host's pods to free hosts inside the gang's required domain (the whole
    /// cluster without one); requeue the gang when there are none.
    Replace,
}

/// The `node_loss:` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NodeLossConfig {
    /// What to do.
    pub action: NodeLossAction,
    /// Seconds a host must stay lost before the action (a short NotReady blip does nothing).
    pub grace_s: u64,
}

impl Default for NodeLossConfig {
    fn default() -> NodeLossConfig {
        NodeLossConfig { action: NodeLossAction::Wait, grace_s: DEFAULT_NODE_LOSS_GRACE_S }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NodeLossFile {
    #[serde(default)]
    action: NodeLossAction,
    #[serde(default)]
    grace: Option<Spanned<String>>,
}

pub(super) fn check_node_loss(file: Option<NodeLossFile>, report: &Reporter<'_>) -> Result<NodeLossConfig> {
    let Some(file) = file else { return Ok(NodeLossConfig::default()) };
    // Zero is allowed: act as soon as a node is lost.
    let grace_s = match &file.grace {
        None => DEFAULT_NODE_LOSS_GRACE_S,
        Some(text) => parse_duration(&text.value).ok_or_else(|| {
            let message = format!("`{}` is not a duration such as 0s, 90s, 30m or 4h", text.value);
            report.at(text.referenced.line(), "node_loss.grace", message)
        })?,
    };
    Ok(NodeLossConfig { action: file.action, grace_s })
}
