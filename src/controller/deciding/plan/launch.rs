//! Launching in a plan: the workload rendered for the gang's admission, and applied after what
//! its pods need (the binder's or kube-scheduler's group, the MPI hostfile and SSH key Secret,
//! Flux's scripts and certificate).

use super::{Action, Planner, SecretSeen};
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::acting::workload_objects::{self, Rendered};
use crate::controller::deciding::conditions::{FAILED, Want};

impl Planner<'_, '_> {
    /// Renders the workload (a render error after admission is reported, never panics).
    pub(super) fn render(&mut self, record: Option<&AdmissionRecord>) -> Option<Rendered> {
        let runtime = self.inp.runtime?;
        let job = match self.inp.job.to_bridge() {
            Ok(job) => job,
            Err(e) => {
                self.want(Want::new(FAILED, true, "InvalidSpec", e.to_string()), Some(true));
                return None;
            }
        };
        let placement = workload_objects::placement_of(self.name(), record);
        let gang_api = if self.standalone() { self.inp.gang_api } else { None };
        let opts = trainyard_bridges::RenderOptions { placement, ..Default::default() };
        let binder = self.binder();
        match workload_objects::render(&job, runtime, self.kind(), opts, gang_api, binder.as_ref()) {
            Ok(r) => Some(r),
            Err(e) => {
                self.want(Want::new(FAILED, true, "InvalidSpec", format!("{}: {e}", e.field())), Some(true));
                None
            }
        }
    }

    /// Applies the rendered workload; `launch` (not a suspension in place) first makes what its
    /// pods mount (the MPI hostfile and SSH key Secret, Flux's ConfigMap and Secret), so that no
    /// pod waits for a volume.
    pub(super) fn apply_rendered(&mut self, record: Option<&AdmissionRecord>, launch: bool) -> Option<Rendered> {
        let rendered = self.render(record)?;
        if launch {
            if let Some(secret) = &rendered.ssh_secret {
                match self.inp.ssh_secret {
                    Some(SecretSeen::Absent) => self.actions.push(Action::CreateSshSecret { name: secret.clone() }),
                    // An earlier TrainJob's key is still being collected: launch once it is gone.
                    Some(SecretSeen::Previous) => return None,
                    _ => {}
                }
            }
            if !self.inp.hostfile_exists
                && let Some(cm) = &rendered.hostfile
            {
                self.actions.push(Action::Apply(cm.clone()));
            }
            if let Some(flux) = &rendered.flux {
                match self.inp.ssh_secret {
                    Some(SecretSeen::Absent) => self.actions.push(Action::Create(flux.secret.clone())),
                    // An earlier TrainJob's certificate is still being collected: launch once it is gone.
                    Some(SecretSeen::Previous) => return None,
                    _ => {}
                }
                self.actions.push(Action::Apply(flux.config_map.clone()));
            }
        }
        // The pod group must exist before its pods do, or kube-scheduler does not count them; the
        // binder's goes with a launch only (a suspension in place removes it).
        if launch && let Some(group) = &rendered.binder_group {
            self.actions.push(Action::Apply(group.clone()));
        }
        for object in &rendered.gang_objects {
            self.actions.push(Action::Apply(object.clone()));
        }
        self.actions.push(Action::Apply(rendered.workload.clone()));
        Some(rendered)
    }
}
