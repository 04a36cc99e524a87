//! Policy sections beside the queues: priority classes, fair sharing, preemption, starvation
//! and the admission timeout.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::{Reporter, parse_duration};
use crate::Result;

/// A named priority; gangs name a class instead of giving a number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityClass {
    /// Name gangs use.
    pub name: String,
    /// Higher goes first and may preempt lower (when preemption is on).
    pub value: i32,
}

/// Dominant-resource fair sharing across the queue tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FairSharingConfig {
    /// Order pending gangs by their queues' weighted dominant share instead of queue-blind.
    pub enabled: bool,
    /// Half-life of the usage history, seconds; `None` counts only current usage.
    pub half_life_s: Option<u64>,
}

/// When running gangs may be stopped to make room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PreemptionConfig {
    /// A gang may preempt gangs of lower priority in its own queue.
    pub within_queue: bool,
    /// A queue below its nominal quota may preempt gangs of queues that borrow from its pool.
    pub reclaim: bool,
    /// Seconds between checkpoints of running gangs: a victim loses the work since its last
    /// one. `None`: gangs do not checkpoint and a victim loses everything since its start.
    pub checkpoint_interval_s: Option<u64>,
}

/// Protection of long-waiting gangs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StarvationConfig {
    /// A gang pending longer than this many seconds is never passed by backfill; `None`: no limit.
    pub max_wait_s: Option<u64>,
}

/// Requeueing of admitted gangs whose pods do not all become ready in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AdmissionTimeoutConfig {
    /// Seconds an admitted gang may take to become ready before it is requeued.
    pub wait_s: u64,
    /// Seconds a requeued gang waits before it is considered again; doubles at each requeue.
    pub backoff_s: u64,
    /// Ceiling of that doubling, seconds.
    pub max_backoff_s: u64,
}

/// Backoff after the first requeue when the file gives none.
pub const DEFAULT_BACKOFF_S: u64 = 60;
/// Ceiling of the backoff when the file gives none.
pub const DEFAULT_MAX_BACKOFF_S: u64 = 30 * 60;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FairSharingFile {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    half_life: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PreemptionFile {
    #[serde(default)]
    within_queue: bool,
    #[serde(default)]
    reclaim: bool,
    #[serde(default)]
    checkpoint_interval: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StarvationFile {
    #[serde(default)]
    max_wait: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdmissionTimeoutFile {
    wait: Spanned<String>,
    #[serde(default)]
    backoff: Option<Spanned<String>>,
    #[serde(default)]
    max_backoff: Option<Spanned<String>>,
}

/// A positive duration, or an error naming `field`.
pub(super) fn positive_duration(text: &Spanned<String>, field: &str, report: &Reporter<'_>) -> Result<u64> {
    match parse_duration(&text.value) {
        Some(s) if s > 0 => Ok(s),
        _ => Err(report.at(
            text.referenced.line(),
            field,
            format!("`{}` is not a positive duration such as 90s, 30m, 4h or 2d", text.value),
        )),
    }
}

fn optional_duration(text: &Option<Spanned<String>>, field: &str, report: &Reporter<'_>) -> Result<Option<u64>> {
    text.as_ref().map(|t| positive_duration(t, field, report)).transpose()
}

/// Checks the priority classes and the default class name.
pub(super) fn check_priority_classes(
    classes: Vec<Spanned<PriorityClass>>,
    default: Option<Spanned<String>>,
    report: &Reporter<'_>,
) -> Result<(Vec<PriorityClass>, Option<String>)> {
    let mut names = BTreeSet::new();
    for (i, c) in classes.iter().enumerate() {
        let line = c.referenced.line();
        if c.value.name.trim().is_empty() {
            return Err(report.at(line, format!("priority_classes[{i}].name"), "must not be empty"));
        }
        if !names.insert(c.value.name.as_str()) {
            return Err(report.at(
                line,
                format!("priority_classes[{i}].name"),
                format!("priority class `{}` is declared twice", c.value.name),
            ));
        }
    }
    if let Some(d) = &default
        && !names.contains(d.value.as_str())
    {
        let known = if names.is_empty() {
            "no class is declared".to_string()
        } else {
            format!("declared: {}", classes.iter().map(|c| c.value.name.as_str()).collect::<Vec<_>>().join(", "))
        };
        return Err(report.at(
            d.referenced.line(),
            "default_priority_class",
            format!("`{}` is not a declared priority class ({known})", d.value),
        ));
    }
    Ok((classes.into_iter().map(|c| c.value).collect(), default.map(|d| d.value)))
}

pub(super) fn check_fair_sharing(file: Option<FairSharingFile>, report: &Reporter<'_>) -> Result<FairSharingConfig> {
    let Some(file) = file else { return Ok(FairSharingConfig::default()) };
    Ok(FairSharingConfig {
        // Writing the section at all asks for fair sharing; `enabled: false` keeps it in the file but off.
        enabled: file.enabled.unwrap_or(true),
        half_life_s: optional_duration(&file.half_life, "fair_sharing.half_life", report)?,
    })
}

pub(super) fn check_preemption(file: Option<PreemptionFile>, report: &Reporter<'_>) -> Result<PreemptionConfig> {
    let Some(file) = file else { return Ok(PreemptionConfig::default()) };
    Ok(PreemptionConfig {
        within_queue: file.within_queue,
        reclaim: file.reclaim,
        checkpoint_interval_s: optional_duration(&file.checkpoint_interval, "preemption.checkpoint_interval", report)?,
    })
}

pub(super) fn check_starvation(file: Option<StarvationFile>, report: &Reporter<'_>) -> Result<StarvationConfig> {
    let Some(file) = file else { return Ok(StarvationConfig::default()) };
    Ok(StarvationConfig { max_wait_s: optional_duration(&file.max_wait, "starvation.max_wait", report)? })
}

pub(super) fn check_admission_timeout(
    file: Option<AdmissionTimeoutFile>,
    report: &Reporter<'_>,
) -> Result<Option<AdmissionTimeoutConfig>> {
    let Some(file) = file else { return Ok(None) };
    let wait_s = positive_duration(&file.wait, "admission_timeout.wait", report)?;
    let backoff_s = optional_duration(&file.backoff, "admission_timeout.backoff", report)?.unwrap_or(DEFAULT_BACKOFF_S);
    let max_backoff_s = match &file.max_backoff {
        None => DEFAULT_MAX_BACKOFF_S.max(backoff_s),
        Some(m) => {
            let max = positive_duration(m, "admission_timeout.max_backoff", report)?;
            if max < backoff_s {
                return Err(report.at(
                    m.referenced.line(),
                    "admission_timeout.max_backoff",
                    format!("{max}s is shorter than the backoff of {backoff_s}s"),
                ));
            }
            max
        }
    };
    Ok(Some(AdmissionTimeoutConfig { wait_s, backoff_s, max_backoff_s }))
}
