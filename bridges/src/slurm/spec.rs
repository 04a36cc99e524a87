//! The `SlurmGang` file format (`trainyard slurm submit job.yaml`): parsing with spans and checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::check::{self, Lines};

/// Why a gang description cannot be used, or cannot be expressed by a submission interface.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlurmSpecError {
    /// The YAML (or JSON) did not parse or does not match the schema; the message has line and column.
    #[error("{source_name}: {message}")]
    Syntax {
        /// File (or other source) the text came from.
        source_name: String,
        /// The parser's message.
        message: String,
    },
    /// The text parsed but a field cannot be used.
    #[error("{source_name}: {}field `{field}`: {message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Invalid {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the field, when known (not for gangs built in code).
        line: Option<u64>,
        /// Path of the field, e.g. `placement.nodelist[1]` or `env.NCCL_DEBUG`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A valid gang asks for something the chosen submission path cannot express.
    #[error("gang {gang}: field `{field}`: {message}")]
    Unsupported {
        /// The gang's `name`.
        gang: String,
        /// The field that cannot be expressed.
        field: String,
        /// Why, and what to use instead.
        message: String,
    },
}

/// Default `tasksPerNode`: one launcher (e.g. torchrun) per node.
pub const DEFAULT_TASKS_PER_NODE: u32 = 1;
/// Default `rendezvousPort`, the port torchrun uses by convention.
pub const DEFAULT_RENDEZVOUS_PORT: u16 = 29500;

/// One gang to run as a single Slurm batch job: its size, limits, placement and command.
///
/// ```yaml
/// name: llm-pretrain            # Slurm job name
/// gang: research/llm-pretrain   # trainyard's gang id, stored in the job comment
/// partition: gpu                # optional, as are account and qos
/// nodes: 2
/// tasksPerNode: 1               # default 1
/// gpusPerNode: 8                # default 0
/// cpusPerTask: 32               # optional
/// memoryMiB: 262144             # optional, per node
/// timeLimitMinutes: 720         # optional
/// array: [0, 3, 5, 6]           # optional: a job array, one copy of the job per index
/// placement: {nodelist: [gpu-a1, gpu-a2]}   # or {switches: {count: 1, waitMinutes: 30}}, or absent
/// command: [torchrun, --nproc-per-node=8, train.py]
/// env: {NCCL_DEBUG: WARN}
/// rankEnv: [PET_NODE_RANK]      # optional: also set to the node rank in each task
/// masterEnv: {PET_MASTER_ADDR: ""}          # optional: set to the first host + suffix
/// workdir: /shared/llm          # absolute
/// output: /shared/llm/logs/%x-%j.out        # default <workdir>/<name>-%j.out (-%A_%a.out for an array)
/// rendezvousPort: 29500         # default 29500
/// ```
///
/// Build it from text with [`parse_gang`], which also runs [`SlurmGang::validate`]'s checks and
/// names the line of a bad field. A gang built in code should be validated before rendering;
/// the renderers never let a value reach the shell unquoted, but an invalid gang renders a job
/// that Slurm or bash will refuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlurmGang {
    /// Slurm job name (`--job-name`).
    pub name: String,
    /// Trainyard's gang id; the job carries it as `--comment=trainyard-gang=<gang>`.
    pub gang: String,
    /// Slurm partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Account to charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// Quality of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Number of nodes, at least 1.
    pub nodes: u32,
    /// Tasks (processes started by `srun`) per node, at least 1.
    #[serde(default = "default_tasks_per_node")]
    pub tasks_per_node: u32,
    /// GPUs per node, requested as `gpu:N` generic resources; 0 asks for none.
    #[serde(default)]
    pub gpus_per_node: u32,
    /// CPUs per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// Memory per node in MiB.
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// Wall-clock limit in minutes; `None` leaves the partition's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_minutes: Option<u32>,
    /// Runs the job as a Slurm job array (`--array`): one copy per index, each with its index in
    /// `SLURM_ARRAY_TASK_ID`, scheduled on its own. `None`: one job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<Vec<u32>>,
    /// Where the gang must run; `None` lets Slurm choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<SlurmPlacement>,
    /// The program and its arguments, passed byte for byte (no shell expansion).
    pub command: Vec<String>,
    /// Extra environment for every task.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Extra variables each task gets set to its node rank (`$SLURM_NODEID`), for launchers that
    /// read the rank under their own name (`PET_NODE_RANK`, `JAX_PROCESS_ID`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_env: Vec<String>,
    /// Extra variables set to the first host followed by the given suffix, for launchers that
    /// read the rendezvous address under their own name (`PET_MASTER_ADDR: ""`,
    /// `JAX_COORDINATOR_ADDRESS: ":29500"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub master_env: BTreeMap<String, String>,
    /// Absolute working directory of the job.
    pub workdir: String,
    /// Output file pattern (Slurm `%` patterns allowed); `None`: [`SlurmGang::output_path`]'s default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Port of the rendezvous on the first node (`MASTER_PORT`).
    #[serde(default = "default_rendezvous_port")]
    pub rendezvous_port: u16,
}

/// Where a gang must be placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SlurmPlacement {
    /// Exactly these hosts, one per node of the gang (`--nodelist`).
    Nodelist(Vec<String>),
    /// At most `count` leaf switches (`--switches`), as trainyard's topology placement decided.
    Switches(SwitchPlacement),
}

/// The `switches` placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwitchPlacement {
    /// Maximum number of leaf switches, at least 1.
    pub count: u32,
    /// How long Slurm may wait for that many switches before relaxing; `None`: Slurm's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_minutes: Option<u32>,
}

fn default_tasks_per_node() -> u32 {
    DEFAULT_TASKS_PER_NODE
}

fn default_rendezvous_port() -> u16 {
    DEFAULT_RENDEZVOUS_PORT
}

impl SlurmGang {
    /// The output file pattern: `output`, or `<workdir>/<name>-%j.out` (`-%A_%a.out`, array job
    /// and index, for an array, whose tasks' own job ids say nothing of their index).
    pub fn output_path(&self) -> String {
        let id = if self.array.is_some() { "%A_%a" } else { "%j" };
        match &self.output {
            Some(output) => output.clone(),
            None => format!("{}/{}-{id}.out", self.workdir.trim_end_matches('/'), self.name),
        }
    }

    /// Total number of tasks, `nodes * tasksPerNode`.
    pub fn world_size(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.tasks_per_node)
    }

    /// Runs the checks of [`parse_gang`] on a gang built in code; errors carry no line.
    pub fn validate(&self, source_name: &str) -> Result<(), SlurmSpecError> {
        check::check_gang(self, source_name, &Lines::default())
    }
}

/// Parses a gang description (YAML, or JSON, which is YAML too) and checks it. `source_name`
/// (usually the file name) starts every error; errors name the line and the field.
pub fn parse_gang(text: &str, source_name: &str) -> Result<SlurmGang, SlurmSpecError> {
    // One anchor may be used any number of times, as in every configuration file trainyard
    // reads; the caps on aliases and expansion stay.
    let mut options = serde_saphyr::Options::default();
    if let Some(budget) = options.budget.as_mut() {
        budget.enforce_alias_anchor_ratio = false;
    }
    let file: GangFile = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| SlurmSpecError::Syntax { source_name: source_name.to_string(), message: e.to_string() })?;
    let (gang, lines) = file.into_gang();
    check::check_gang(&gang, source_name, &lines)?;
    Ok(gang)
}

/// The same schema as [`SlurmGang`], with the spans needed to point at a bad field.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GangFile {
    name: Spanned<String>,
    gang: Spanned<String>,
    #[serde(default)]
    partition: Option<Spanned<String>>,
    #[serde(default)]
    account: Option<Spanned<String>>,
    #[serde(default)]
    qos: Option<Spanned<String>>,
    nodes: Spanned<u32>,
    #[serde(default)]
    tasks_per_node: Option<Spanned<u32>>,
    #[serde(default)]
    gpus_per_node: Option<Spanned<u32>>,
    #[serde(default)]
    cpus_per_task: Option<Spanned<u32>>,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: Option<Spanned<u64>>,
    #[serde(default)]
    time_limit_minutes: Option<Spanned<u32>>,
    #[serde(default)]
    array: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    placement: Option<Spanned<PlacementFile>>,
    command: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    env: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    rank_env: Vec<Spanned<String>>,
    #[serde(default)]
    master_env: BTreeMap<String, Spanned<String>>,
    workdir: Spanned<String>,
    #[serde(default)]
    output: Option<Spanned<String>>,
    #[serde(default)]
    rendezvous_port: Option<Spanned<u16>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum PlacementFile {
    Nodelist(Vec<Spanned<String>>),
    Switches(Spanned<SwitchFile>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SwitchFile {
    count: Spanned<u32>,
    #[serde(default)]
    wait_minutes: Option<Spanned<u32>>,
}

impl GangFile {
    /// The plain gang plus the line of every field, keyed by field path.
    fn into_gang(self) -> (SlurmGang, Lines) {
        let mut lines = Lines::default();
        let name = lines.take("name", self.name);
        let gang = lines.take("gang", self.gang);
        let partition = self.partition.map(|v| lines.take("partition", v));
        let account = self.account.map(|v| lines.take("account", v));
        let qos = self.qos.map(|v| lines.take("qos", v));
        let nodes = lines.take("nodes", self.nodes);
        let tasks_per_node = self.tasks_per_node.map_or(DEFAULT_TASKS_PER_NODE, |v| lines.take("tasksPerNode", v));
        let gpus_per_node = self.gpus_per_node.map_or(0, |v| lines.take("gpusPerNode", v));
        let cpus_per_task = self.cpus_per_task.map(|v| lines.take("cpusPerTask", v));
        let memory_mib = self.memory_mib.map(|v| lines.take("memoryMiB", v));
        let time_limit_minutes = self.time_limit_minutes.map(|v| lines.take("timeLimitMinutes", v));
        let array = self.array.map(|v| lines.take("array", v));
        let placement = self.placement.map(|p| match lines.take("placement", p) {
            PlacementFile::Nodelist(hosts) => SlurmPlacement::Nodelist(
                hosts
                    .into_iter()
                    .enumerate()
                    .map(|(i, h)| lines.take(&format!("placement.nodelist[{i}]"), h))
                    .collect(),
            ),
            PlacementFile::Switches(s) => {
                let s = lines.take("placement.switches", s);
                SlurmPlacement::Switches(SwitchPlacement {
                    count: lines.take("placement.switches.count", s.count),
                    wait_minutes: s.wait_minutes.map(|w| lines.take("placement.switches.waitMinutes", w)),
                })
            }
        });
        let command = lines.take("command", self.command);
        let command =
            command.into_iter().enumerate().map(|(i, arg)| lines.take(&format!("command[{i}]"), arg)).collect();
        let env = self.env.into_iter().map(|(k, v)| (k.clone(), lines.take(&format!("env.{k}"), v))).collect();
        let rank_env =
            self.rank_env.into_iter().enumerate().map(|(i, v)| lines.take(&format!("rankEnv[{i}]"), v)).collect();
        let master_env =
            self.master_env.into_iter().map(|(k, v)| (k.clone(), lines.take(&format!("masterEnv.{k}"), v))).collect();
        let workdir = lines.take("workdir", self.workdir);
        let output = self.output.map(|v| lines.take("output", v));
        let rendezvous_port = self.rendezvous_port.map_or(DEFAULT_RENDEZVOUS_PORT, |v| lines.take("rendezvousPort", v));
        let gang = SlurmGang {
            name,
            gang,
            partition,
            account,
            qos,
            nodes,
            tasks_per_node,
            gpus_per_node,
            cpus_per_task,
            memory_mib,
            time_limit_minutes,
            array,
            placement,
            command,
            env,
            rank_env,
            master_env,
            workdir,
            output,
            rendezvous_port,
        };
        (gang, lines)
    }
}
