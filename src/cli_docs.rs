//! What the CLI says about itself, generated from its clap definitions: shell completion
//! scripts (`trainyard completions SHELL`) and the Markdown reference in `docs/cli.md`
//! (`trainyard cli-reference`; a test fails when the committed file is stale).

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Result;
use clap::{Args, Command, CommandFactory};
use clap_complete::Shell;

use crate::cli::Cli;

/// Flags of `trainyard completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// Prints the completion script for a shell. As a kubectl plugin (`kubectl trainyard`), the
/// same script completes the `trainyard` binary the plugin runs.
pub fn completions(args: &CompletionsArgs) -> Result<()> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "trainyard", &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(())
}

/// Prints the Markdown reference of every command.
pub fn reference() -> Result<()> {
    let mut command = Cli::command();
    command.build();
    let mut out = String::from(
        "# trainyard command-line reference\n\n\
         Generated from the CLI's own definitions by `trainyard cli-reference`; a test fails when\n\
         this file is stale (`TRAINYARD_BLESS=1 cargo test --test it cli_reference` rewrites it).\n\n",
    );
    let mut sections = Vec::new();
    collect(&command, "trainyard", &mut sections);
    for (path, _) in &sections {
        let anchor = path.replace(' ', "-");
        writeln!(out, "- [`{path}`](#{anchor})")?;
    }
    for (path, help) in &sections {
        write!(out, "\n## {path}\n\n```text\n{}\n```\n", help.trim_end())?;
    }
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

/// Every visible command under `command`, depth first, with its full help.
fn collect(command: &Command, path: &str, out: &mut Vec<(String, String)>) {
    let mut command = command.clone();
    out.push((path.to_string(), command.render_long_help().to_string()));
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        collect(sub, &format!("{path} {}", sub.get_name()), out);
    }
}
