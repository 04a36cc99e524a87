//! Help texts: every flag of `simulate`, `place`, `compare` and `trace synth` is documented; the
//! generated reference (docs/cli.md) is current and completion scripts cover the commands.

use crate::trainyard;

const SIMULATE_FLAGS: [&str; 14] = [
    "--cluster",
    "--cluster-format",
    "--levels",
    "--kueue-topology",
    "--host-gpus",
    "--placement",
    "--trace",
    "--format",
    "--policy",
    "--estimates",
    "--slowdown",
    "--out",
    "--skip-bad-rows",
    "--quiet",
];

#[track_caller]
fn help(args: &[&str]) -> String {
    let run = trainyard(args);
    run.assert_success();
    assert_eq!(run.stderr, "", "trainyard {args:?}");
    run.stdout
}

#[track_caller]
fn assert_mentions(text: &str, flags: &[&str], what: &str) {
    let missing: Vec<&str> = flags.iter().copied().filter(|f| !text.contains(f)).collect();
    assert!(missing.is_empty(), "{what} does not mention {missing:?}:\n{text}");
}

#[test]
fn simulate_help_mentions_every_flag() {
    for args in [&["simulate", "--help"][..], &["simulate", "-h"], &["help", "simulate"]] {
        let text = help(args);
        assert_mentions(&text, &SIMULATE_FLAGS, &format!("{args:?}"));
        assert!(text.contains("easy-backfill") && text.contains("fifo"), "{args:?} names the built-in policies");
    }
}

#[test]
fn top_level_help_lists_the_subcommands() {
    let text = help(&["--help"]);
    assert!(text.contains("Usage: trainyard <COMMAND>"), "{text}");
    assert!(text.contains("simulate") && text.contains("trace"), "{text}");
}

#[test]
fn top_level_help_mentions_every_simulate_flag() {
    assert_mentions(&help(&["--help"]), &SIMULATE_FLAGS, "trainyard --help");
}

#[test]
fn synth_help_mentions_its_flags() {
    let text = help(&["trace", "synth", "--help"]);
    assert_mentions(&text, &["--seed", "--jobs", "--format", "--out"], "trainyard trace synth --help");
}

#[test]
fn no_subcommand_is_a_usage_error() {
    let run = trainyard::<&str>(&[]);
    assert_eq!(run.status.code(), Some(2), "clap's usage-error status");
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("Usage: trainyard <COMMAND>"), "{}", run.stderr);
}

#[test]
fn place_and_compare_help_mention_their_flags() {
    let place = [
        "--pods",
        "--gpus",
        "--topology",
        "--slice",
        "--pod-set",
        "--policy",
        "--load",
        "--intra-node",
        "--explain",
        "--torus",
        "--shape",
        "--slices",
        "--tpu",
        "--tpu-pods",
        "--cluster",
        "--levels",
    ];
    assert_mentions(&help(&["place", "--help"]), &place, "trainyard place --help");
    assert_mentions(&help(&["--help"]), &place, "trainyard --help");
    let compare = ["--cluster", "--trace", "--format", "--policy", "--slowdown", "--out"];
    assert_mentions(&help(&["compare", "--help"]), &compare, "trainyard compare --help");
    let sweep = ["--out-dir", "--jobs", "--fresh", "--quiet", "--point", "--gather", "--slurm", "--k8s-indexed-job"];
    assert_mentions(&help(&["sweep", "--help"]), &sweep, "trainyard sweep --help");
    assert_mentions(&help(&["--help"]), &sweep, "trainyard --help");
}

/// docs/cli.md is what `trainyard cli-reference` prints now (`TRAINYARD_BLESS=1` rewrites it
/// after review), and it covers every command.
#[test]
fn the_cli_reference_is_current() {
    let run = trainyard(&["cli-reference"]);
    run.assert_success();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
    if std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &run.stdout).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(run.stdout == want, "stale docs/cli.md; rerun with TRAINYARD_BLESS=1 after review");
    for command in
        ["## trainyard simulate", "## trainyard import kueue", "## trainyard slurm submit", "## trainyard completions"]
    {
        assert!(run.stdout.contains(command), "the reference lacks {command}");
    }
}

/// Completion scripts name the subcommands, for every shell clap_complete knows.
#[test]
fn completion_scripts_cover_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = trainyard(&["completions", shell]);
        run.assert_success();
        for sub in ["simulate", "import", "kueue"] {
            assert!(run.stdout.contains(sub), "{shell}: the script lacks {sub}");
        }
    }
    let run = trainyard(&["completions", "tcsh"]);
    assert_eq!(run.status.code(), Some(2), "an unknown shell is a usage error: {}", run.stderr);
}
