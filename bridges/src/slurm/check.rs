//! Checks of a `SlurmGang`: counts, names Slurm accepts on `#SBATCH` lines, paths, command and env.

use std::collections::{BTreeMap, BTreeSet};

use serde_saphyr::Spanned;

use super::spec::{SlurmGang, SlurmPlacement, SlurmSpecError};

/// Environment names the rendered script sets itself; a gang may not set them.
pub const RESERVED_ENV: [&str; 7] =
    ["MASTER_ADDR", "MASTER_PORT", "NNODES", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK"];

/// Prefixes of environment names a gang may not set: Slurm's own, and the script's helpers.
pub const RESERVED_ENV_PREFIXES: [&str; 2] = ["SLURM_", "TRAINYARD_"];

/// Line of each field of a parsed file, keyed by field path (`command[2]`, `env.FOO`).
#[derive(Debug, Default)]
pub(super) struct Lines(BTreeMap<String, u64>);

impl Lines {
    /// Records where `spanned` was written and returns its value.
    pub(super) fn take<T>(&mut self, path: &str, spanned: Spanned<T>) -> T {
        let line = spanned.referenced.line();
        if line > 0 {
            self.0.insert(path.to_string(), line);
        }
        spanned.value
    }

    /// The line of `path`, else of the nearest enclosing field that has one.
    fn line(&self, path: &str) -> Option<u64> {
        let mut path = path;
        loop {
            if let Some(&line) = self.0.get(path) {
                return Some(line);
            }
            path = &path[..path.rfind(['.', '['])?];
        }
    }
}

/// Characters that `sbatch` treats specially inside a `#SBATCH` line (quotes, escapes, comments).
const DIRECTIVE_SPECIAL: [char; 4] = ['"', '\'', '\\', '#'];

/// Why `value` cannot go on a `#SBATCH` line, if it cannot; `also` lists more forbidden characters.
fn directive_problem(value: &str, also: &[char]) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".into());
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("{value:?} contains whitespace or a control character"));
    }
    let bad = value.chars().find(|c| DIRECTIVE_SPECIAL.contains(c) || also.contains(c))?;
    Some(format!("{value:?} contains `{bad}`, which a Slurm name or #SBATCH value cannot carry"))
}

/// Whether `key` is a shell variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(super) fn is_shell_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Every check of [`super::parse_gang`]; `lines` is empty for gangs built in code.
pub(super) fn check_gang(gang: &SlurmGang, source_name: &str, lines: &Lines) -> Result<(), SlurmSpecError> {
    let invalid = |field: &str, message: String| SlurmSpecError::Invalid {
        source_name: source_name.to_string(),
        line: lines.line(field),
        field: field.to_string(),
        message,
    };
    let word = |field: &str, value: &str, also: &[char]| match directive_problem(value, also) {
        Some(message) => Err(invalid(field, message)),
        None => Ok(()),
    };
    // The job name also ends up in the default output file name, where `/` and `%` would change the path.
    word("name", &gang.name, &[',', '/', '%'])?;
    word("gang", &gang.gang, &[','])?;
    for (field, value) in [("partition", &gang.partition), ("account", &gang.account), ("qos", &gang.qos)] {
        if let Some(value) = value {
            word(field, value, &[','])?;
        }
    }
    let at_least_one = |field: &str, value: u64| match value {
        0 => Err(invalid(field, "must be at least 1".into())),
        _ => Ok(()),
    };
    at_least_one("nodes", gang.nodes.into())?;
    at_least_one("tasksPerNode", gang.tasks_per_node.into())?;
    at_least_one("rendezvousPort", gang.rendezvous_port.into())?;
    for (field, value) in [
        ("cpusPerTask", gang.cpus_per_task.map(u64::from)),
        ("memoryMiB", gang.memory_mib),
        ("timeLimitMinutes", gang.time_limit_minutes.map(u64::from)),
    ] {
        if let Some(value) = value {
            at_least_one(field, value)?;
        }
    }
    if let Some(indices) = &gang.array {
        if indices.is_empty() {
            return Err(invalid("array", "lists no index: give at least one, or leave `array` out".into()));
        }
        // `--array` would take a repeated index once; a list that repeats one is a mistake upstream.
        let mut seen = BTreeSet::new();
        if let Some(twice) = indices.iter().find(|i| !seen.insert(**i)) {
            return Err(invalid("array", format!("index {twice} is listed twice")));
        }
    }
    match &gang.placement {
        None => {}
        Some(SlurmPlacement::Switches(switches)) => at_least_one("placement.switches.count", switches.count.into())?,
        Some(SlurmPlacement::Nodelist(hosts)) => {
            if hosts.len() != gang.nodes as usize {
                let message =
                    format!("lists {} hosts but the gang has {} nodes (one host per node)", hosts.len(), gang.nodes);
                return Err(invalid("placement.nodelist", message));
            }
            let mut seen = BTreeSet::new();
            for (i, host) in hosts.iter().enumerate() {
                let field = format!("placement.nodelist[{i}]");
                // Brackets would make the entry a host range rather than one host.
                word(&field, host, &[',', '[', ']'])?;
                if !seen.insert(host.as_str()) {
                    return Err(invalid(&field, format!("host {host:?} is listed twice")));
                }
            }
        }
    }
    check_command(gang, &invalid)?;
    check_env(gang, &invalid)?;
    word("workdir", &gang.workdir, &[])?;
    if !gang.workdir.starts_with('/') {
        return Err(invalid("workdir", format!("{:?} must be an absolute path", gang.workdir)));
    }
    if let Some(output) = &gang.output {
        word("output", output, &[])?;
    }
    Ok(())
}

type Invalid<'a> = dyn Fn(&str, String) -> SlurmSpecError + 'a;

fn check_command(gang: &SlurmGang, invalid: &Invalid<'_>) -> Result<(), SlurmSpecError> {
    match gang.command.first() {
        None => return Err(invalid("command", "must name a program: [program, args...]".into())),
        Some(program) if program.is_empty() => {
            return Err(invalid("command[0]", "the program must not be empty".into()));
        }
        Some(_) => {}
    }
    if let Some(i) = gang.command.iter().position(|arg| arg.contains('\0')) {
        return Err(invalid(
            &format!("command[{i}]"),
            "contains a NUL byte, which no process argument can carry".into(),
        ));
    }
    Ok(())
}

fn check_env(gang: &SlurmGang, invalid: &Invalid<'_>) -> Result<(), SlurmSpecError> {
    let mut named: BTreeMap<&str, String> = BTreeMap::new();
    let fields = gang
        .env
        .iter()
        .map(|(k, v)| (format!("env.{k}"), k, Some(v)))
        .chain(gang.rank_env.iter().enumerate().map(|(i, k)| (format!("rankEnv[{i}]"), k, None)))
        .chain(gang.master_env.iter().map(|(k, v)| (format!("masterEnv.{k}"), k, Some(v))));
    for (field, key, value) in fields {
        if !is_shell_identifier(key) {
            return Err(invalid(&field, format!("{key:?} is not a shell variable name ([A-Za-z_][A-Za-z0-9_]*)")));
        }
        if RESERVED_ENV.contains(&key.as_str()) {
            return Err(invalid(&field, format!("{key} is set by the rendered job script for the rendezvous")));
        }
        if let Some(prefix) = RESERVED_ENV_PREFIXES.iter().find(|p| key.starts_with(*p)) {
            return Err(invalid(&field, format!("names starting with {prefix} are reserved for Slurm and trainyard")));
        }
        if value.is_some_and(|v| v.contains('\0')) {
            return Err(invalid(&field, "contains a NUL byte, which no environment value can carry".into()));
        }
        // A variable set twice would be set by whichever line of the script comes last.
        if let Some(first) = named.insert(key.as_str(), field.clone()) {
            return Err(invalid(&field, format!("{key} is already set by {first}")));
        }
    }
    Ok(())
}
