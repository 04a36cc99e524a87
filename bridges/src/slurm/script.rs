//! Renders a `SlurmGang` as a bash batch script: `#SBATCH` lines, rendezvous env, one `srun` step.

use std::fmt::Write as _;

use super::array::format_array_indices;
use super::spec::{SlurmGang, SlurmPlacement};

/// Comment prefix that tags a Slurm job as a trainyard gang; the full comment is
/// `trainyard-gang=<gang>`, so the bridge can find its jobs again after a restart.
pub const GANG_COMMENT_PREFIX: &str = "trainyard-gang=";

/// Runs inside every task of the step, so each node sees its own rank; the gang's command
/// follows as positional parameters and is executed unchanged (`--` protects a leading dash).
/// `TRAINYARD_RANK_ENV` lists the gang's `rankEnv` names, which are checked identifiers.
const STEP_WRAPPER: &str = concat!(
    r#"export NODE_RANK="$SLURM_NODEID" RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID"; "#,
    r#"for v in ${TRAINYARD_RANK_ENV:-}; do export "$v=$SLURM_NODEID"; done; exec -- "$@""#
);

/// `$0` of the step wrapper, shown in `ps` and in bash's error messages.
const STEP_NAME: &str = "trainyard-step";

/// Quotes `word` for bash so that it reaches the program byte for byte: words made only of
/// characters without meaning to the shell stay bare, anything else is single-quoted (inside
/// single quotes nothing expands; a `'` is written as `'\''`).
pub fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-+=@%:,./".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('\'');
    for c in word.chars() {
        if c == '\'' {
            quoted.push_str(r"'\''");
        } else {
            quoted.push(c);
        }
    }
    quoted.push('\'');
    quoted
}

/// [`shell_quote`], except that the empty word stays empty (it is appended to another word).
fn shell_quote_empty(word: &str) -> String {
    if word.is_empty() { String::new() } else { shell_quote(word) }
}

/// A value for a `#SBATCH` line. Validated gangs never contain control characters; for one
/// that was not validated, a newline here would end the comment and start a shell command,
/// so control characters become `?`.
fn directive(value: &str) -> String {
    value.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The `#SBATCH` options of the gang, in a fixed order.
pub(super) fn sbatch_options(gang: &SlurmGang) -> Vec<String> {
    let mut options = vec![
        format!("--job-name={}", directive(&gang.name)),
        format!("--comment={GANG_COMMENT_PREFIX}{}", directive(&gang.gang)),
        format!("--nodes={}", gang.nodes),
        format!("--ntasks-per-node={}", gang.tasks_per_node),
    ];
    if gang.gpus_per_node > 0 {
        options.push(format!("--gres=gpu:{}", gang.gpus_per_node));
    }
    if let Some(cpus) = gang.cpus_per_task {
        options.push(format!("--cpus-per-task={cpus}"));
    }
    if let Some(mib) = gang.memory_mib {
        options.push(format!("--mem={mib}M"));
    }
    if let Some(minutes) = gang.time_limit_minutes {
        options.push(format!("--time={minutes}"));
    }
    if let Some(indices) = &gang.array {
        options.push(format!("--array={}", format_array_indices(indices)));
    }
    for (flag, value) in [("partition", &gang.partition), ("account", &gang.account), ("qos", &gang.qos)] {
        if let Some(value) = value {
            options.push(format!("--{flag}={}", directive(value)));
        }
    }
    match &gang.placement {
        None => {}
        Some(SlurmPlacement::Nodelist(hosts)) => {
            let hosts: Vec<String> = hosts.iter().map(|h| directive(h)).collect();
            options.push(format!("--nodelist={}", hosts.join(",")));
        }
        Some(SlurmPlacement::Switches(switches)) => match switches.wait_minutes {
            Some(wait) => options.push(format!("--switches={}@{wait}", switches.count)),
            None => options.push(format!("--switches={}", switches.count)),
        },
    }
    options.push(format!("--chdir={}", directive(&gang.workdir)));
    options.push(format!("--output={}", directive(&gang.output_path())));
    options
}

/// The batch script for `sbatch` (and the `script` of a REST submission).
///
/// After the `#SBATCH` lines it exports the gang's env, then the rendezvous for torchrun-style
/// launchers: `MASTER_ADDR` (first host of the allocation), `MASTER_PORT`, `NNODES` and
/// `WORLD_SIZE` (`nodes * tasksPerNode`), plus the `masterEnv` variables. One `srun` step starts `tasksPerNode` tasks per node;
/// each task gets `NODE_RANK` (`$SLURM_NODEID`, also under the `rankEnv` names), `RANK` and
/// `LOCAL_RANK`, then runs the command.
/// Every argument and env value is shell-quoted, so nothing in them is expanded or executed.
pub fn render_sbatch(gang: &SlurmGang) -> String {
    let mut script = String::from("#!/bin/bash\n");
    for option in sbatch_options(gang) {
        // Writing to a String cannot fail.
        let _ = writeln!(script, "#SBATCH {option}");
    }
    script.push_str("# Rendered by trainyard; the command and env below are quoted, nothing in them expands.\n");
    script.push_str("set -eu\n");
    for (key, value) in &gang.env {
        // Keys are validated identifiers; quoting an invalid one makes `export` fail (and
        // `set -e` stop the job) instead of letting it reach the shell.
        let _ = writeln!(script, "export {}={}", shell_quote(key), shell_quote(value));
    }
    script.push_str(concat!(
        "TRAINYARD_HOSTS=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n",
        "read -r MASTER_ADDR <<<\"$TRAINYARD_HOSTS\"\n",
        "if [ -z \"$MASTER_ADDR\" ]; then echo \"trainyard: no host in SLURM_JOB_NODELIST\" >&2; exit 1; fi\n",
        "export MASTER_ADDR\n",
    ));
    let _ = writeln!(script, "export MASTER_PORT={}", gang.rendezvous_port);
    let _ = writeln!(script, "export NNODES={}", gang.nodes);
    let _ = writeln!(script, "export WORLD_SIZE={}", gang.world_size());
    for (key, suffix) in &gang.master_env {
        let _ = writeln!(script, "export {}=\"$MASTER_ADDR\"{}", shell_quote(key), shell_quote_empty(suffix));
    }
    if !gang.rank_env.is_empty() {
        let names: Vec<String> = gang.rank_env.iter().map(|k| shell_quote(k)).collect();
        let _ = writeln!(script, "export TRAINYARD_RANK_ENV={}", shell_quote(&names.join(" ")));
    }
    // Slurm 22.05 and 23.02 steps do not inherit the job's --cpus-per-task; without it each
    // task would get one CPU.
    let cpus = gang.cpus_per_task.map(|c| format!(" --cpus-per-task={c}")).unwrap_or_default();
    let _ = writeln!(
        script,
        "srun --nodes={} --ntasks-per-node={}{cpus} --kill-on-bad-exit=1 \\\n  /bin/bash -c {} {STEP_NAME} \\\n  {}",
        gang.nodes,
        gang.tasks_per_node,
        shell_quote(STEP_WRAPPER),
        gang.command.iter().map(|arg| shell_quote(arg)).collect::<Vec<_>>().join(" "),
    );
    script
}
