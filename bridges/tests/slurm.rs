//! Slurm bridge: golden scripts and REST bodies, parse errors, job states, and quoting run through bash.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use common::{Goldens, dir};
use proptest::prelude::*;
use trainyard_bridges::slurm::{
    DEFAULT_JOB_PATH, GangState, SlurmGang, SlurmPlacement, SlurmSpecError, parse_gang, render_rest_body,
    render_sbatch, shell_quote, slurm_state,
};

/// (case name, fixture text); the goldens are `golden/slurm/<case>.sbatch` and `<case>.rest.json`.
fn cases() -> Vec<(&'static str, &'static str)> {
    vec![
        ("array", include_str!("fixtures/slurm/array.yaml")),
        ("gpu_nodelist", include_str!("fixtures/slurm/gpu_nodelist.yaml")),
        ("minimal", include_str!("fixtures/slurm/minimal.yaml")),
        ("switches", include_str!("fixtures/slurm/switches.yaml")),
    ]
}

/// Cases slurmrestd v0.0.38 cannot submit (switches), so they have no `.rest.json` golden.
const NOT_FOR_REST: [&str; 1] = ["switches"];

fn gang(name: &str) -> SlurmGang {
    let (_, text) = cases().into_iter().find(|(case, _)| *case == name).expect("known case");
    parse_gang(text, &format!("{name}.yaml")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn golden_renders_are_current() {
    let mut goldens = Goldens::new();
    for (name, text) in cases() {
        let gang = parse_gang(text, name).unwrap_or_else(|e| panic!("{e}"));
        let mut outputs = vec![(format!("{name}.sbatch"), render_sbatch(&gang))];
        match render_rest_body(&gang) {
            Ok(body) => {
                assert!(!NOT_FOR_REST.contains(&name), "{name} unexpectedly renders for REST");
                let json = serde_json::to_string_pretty(&body).expect("serialize") + "\n";
                outputs.push((format!("{name}.rest.json"), json));
            }
            Err(e) => assert!(NOT_FOR_REST.contains(&name), "{name}: {e}"),
        }
        for (file, got) in outputs {
            goldens.check(dir("golden/slurm").join(file), &got);
        }
    }
    goldens.finish();
}

#[test]
fn every_fixture_has_goldens_and_a_case() {
    let names = |sub: &str| -> BTreeSet<String> {
        std::fs::read_dir(dir(sub))
            .unwrap_or_else(|e| panic!("tests/{sub}: {e}"))
            .map(|entry| entry.expect("dir entry").file_name().to_string_lossy().into_owned())
            .collect()
    };
    let fixtures: BTreeSet<String> =
        names("fixtures/slurm").iter().map(|f| f.strip_suffix(".yaml").expect("<case>.yaml").to_owned()).collect();
    let wired: BTreeSet<String> = cases().into_iter().map(|(name, _)| name.to_owned()).collect();
    assert_eq!(fixtures, wired, "fixtures and cases() differ");
    let mut want = BTreeSet::new();
    for case in &fixtures {
        want.insert(format!("{case}.sbatch"));
        if !NOT_FOR_REST.contains(&case.as_str()) {
            want.insert(format!("{case}.rest.json"));
        }
    }
    assert_eq!(names("golden/slurm"), want, "golden files and fixtures differ");
}

#[test]
fn defaults_fill_the_minimal_gang() {
    let gang = gang("minimal");
    assert_eq!((gang.tasks_per_node, gang.gpus_per_node, gang.rendezvous_port), (1, 0, 29500));
    assert_eq!(gang.output_path(), "/tmp/smoke-%j.out");
    assert_eq!(gang.world_size(), 1);
    let switches = self::gang("switches");
    assert_eq!(switches.output_path(), "/home/vision/resnet/vision-ddp-%j.out", "trailing slash of workdir");
    assert_eq!(switches.world_size(), 16);
    assert_eq!(self::gang("gpu_nodelist").env["OMP_NUM_THREADS"], "8", "numbers are read as strings");
}

#[test]
fn gangs_round_trip_through_yaml_and_json() {
    for (name, _) in cases() {
        let gang = gang(name);
        let yaml = serde_saphyr::to_string(&gang).expect("yaml");
        assert_eq!(parse_gang(&yaml, "again.yaml").unwrap_or_else(|e| panic!("{name}: {e}\n{yaml}")), gang);
        let json = serde_json::to_string(&gang).expect("json");
        assert_eq!(parse_gang(&json, "again.json").unwrap_or_else(|e| panic!("{name}: {e}\n{json}")), gang);
        let plain: SlurmGang = serde_json::from_str(&json).expect("plain serde");
        assert_eq!(plain, gang);
    }
}

/// Parses `text` (the minimal fixture plus `extra` lines) and returns the error.
fn parse_error(extra: &str) -> SlurmSpecError {
    let base = "name: smoke\ngang: ci/smoke\ncommand: [hostname]\nworkdir: /tmp\n";
    let text = if extra.contains("nodes:") { format!("{base}{extra}") } else { format!("{base}nodes: 1\n{extra}") };
    parse_gang(&text, "job.yaml").expect_err(&text)
}

fn invalid(err: &SlurmSpecError) -> (Option<u64>, &str) {
    match err {
        SlurmSpecError::Invalid { source_name, line, field, .. } => {
            assert_eq!(source_name, "job.yaml");
            (*line, field.as_str())
        }
        other => panic!("expected Invalid, got {other}"),
    }
}

#[test]
fn parse_errors_name_line_and_field() {
    let cases: [(&str, u64, &str); 14] = [
        ("nodes: 0\n", 5, "nodes"),
        ("tasksPerNode: 0\n", 6, "tasksPerNode"),
        ("placement:\n  nodelist: [a, b]\n", 7, "placement.nodelist"),
        ("nodes: 2\nplacement:\n  nodelist:\n    - a\n    - a\n", 9, "placement.nodelist[1]"),
        ("nodes: 2\nplacement: {nodelist: [a, 'b[1-2]']}\n", 6, "placement.nodelist[1]"),
        ("placement: {switches: {count: 0}}\n", 6, "placement.switches.count"),
        ("env:\n  OK: 1\n  SLURM_NNODES: 3\n", 8, "env.SLURM_NNODES"),
        ("env:\n  MASTER_ADDR: x\n", 7, "env.MASTER_ADDR"),
        ("env:\n  1BAD: x\n", 7, "env.1BAD"),
        ("env:\n  TRAINYARD_HOSTS: x\n", 7, "env.TRAINYARD_HOSTS"),
        ("partition: gpu,cpu\n", 6, "partition"),
        ("output: '/tmp/my out'\n", 6, "output"),
        ("timeLimitMinutes: 0\n", 6, "timeLimitMinutes"),
        ("rendezvousPort: 0\n", 6, "rendezvousPort"),
    ];
    for (extra, line, field) in cases {
        let err = parse_error(extra);
        assert_eq!(invalid(&err), (Some(line), field), "{extra}: {err}");
        assert!(err.to_string().starts_with(&format!("job.yaml: line {line}: field `{field}`")), "{err}");
    }
}

#[test]
fn fields_of_the_base_document_are_checked_too() {
    let bad = |text: &str| parse_gang(text, "job.yaml").expect_err(text);
    let err = bad("name: my job\ngang: g\nnodes: 1\ncommand: [x]\nworkdir: /tmp\n");
    assert_eq!(invalid(&err), (Some(1), "name"));
    let err = bad("name: n\ngang: g\nnodes: 1\ncommand: []\nworkdir: /tmp\n");
    assert_eq!(invalid(&err), (Some(4), "command"));
    let err = bad("name: n\ngang: g\nnodes: 1\ncommand: ['', x]\nworkdir: /tmp\n");
    assert_eq!(invalid(&err), (Some(4), "command[0]"));
    let err = bad("name: n\ngang: g\nnodes: 1\ncommand: [x]\nworkdir: relative/dir\n");
    assert_eq!(invalid(&err), (Some(5), "workdir"));
    let err = bad("name: n\ngang: \"a\\nb\"\nnodes: 1\ncommand: [x]\nworkdir: /tmp\n");
    assert_eq!(invalid(&err), (Some(2), "gang"));
}

#[test]
fn schema_errors_are_syntax_errors_with_a_line() {
    for (text, needle) in [
        ("name: n\ngang: g\nnodes: 1\ncommand: [x]\nworkdir: /tmp\ngpus: 8\n", "gpus"),
        ("name: n\ngang: g\nnodes: two\ncommand: [x]\nworkdir: /tmp\n", "line 3"),
        ("name: n\ngang: g\nnodes: 1\nworkdir: /tmp\n", "command"),
        ("name: n\ngang: g\nnodes: 1\ncommand: [x]\nworkdir: /tmp\nplacement: {racks: 2}\n", "racks"),
    ] {
        let err = parse_gang(text, "job.yaml").expect_err(text);
        assert!(matches!(&err, SlurmSpecError::Syntax { source_name, .. } if source_name == "job.yaml"), "{err}");
        assert!(err.to_string().contains(needle), "{needle} not in: {err}");
    }
}

#[test]
fn validate_checks_gangs_built_in_code_without_lines() {
    let mut gang = gang("gpu_nodelist");
    assert_eq!(gang.validate("code"), Ok(()));
    gang.placement = Some(SlurmPlacement::Nodelist(vec!["only-one".into()]));
    let err = gang.validate("code").unwrap_err();
    assert!(matches!(&err, SlurmSpecError::Invalid { line: None, field, .. } if field == "placement.nodelist"));
    assert_eq!(
        err.to_string(),
        "code: field `placement.nodelist`: lists 1 hosts but the gang has 2 nodes (one host per node)"
    );
}

#[test]
fn rest_body_has_the_v0_0_38_shape() {
    let body = render_rest_body(&gang("gpu_nodelist")).expect("rest");
    let job = &body["job"];
    assert!(job["nodes"].is_u64(), "nodes must be an integer, not [min, max]");
    assert_eq!(job["nodes"], 2);
    assert_eq!(job["tasks"], 2);
    assert_eq!(job["nodelist"], "gpu-a07,gpu-a08");
    assert_eq!(job["comment"], "trainyard-gang=research/llm-pretrain-7b");
    assert_eq!(job["environment"]["PATH"], DEFAULT_JOB_PATH);
    assert_eq!(job["environment"]["NCCL_DEBUG"], "WARN");
    assert!(job.get("required_nodes").is_none());
    assert_eq!(body["script"], render_sbatch(&gang("gpu_nodelist")));

    let mut own_path = gang("minimal");
    own_path.env.insert("PATH".into(), "/opt/venv/bin:/usr/bin".into());
    assert_eq!(render_rest_body(&own_path).expect("rest")["job"]["environment"]["PATH"], "/opt/venv/bin:/usr/bin");

    let err = render_rest_body(&gang("switches")).unwrap_err();
    assert!(
        matches!(&err, SlurmSpecError::Unsupported { gang, field, .. } if gang == "vision-ddp" && field == "placement.switches")
    );
}

#[test]
fn an_array_is_one_job_of_many_indexed_tasks() {
    let array = gang("array");
    let script = render_sbatch(&array);
    assert!(script.lines().any(|l| l == "#SBATCH --array=0,3,5-9"), "{script}");
    assert_eq!(array.output_path(), "/shared/sweeps/helios-results/sweep-helios-%A_%a.out", "one file per task");
    assert!(script.lines().any(|l| l == "#SBATCH --output=/shared/sweeps/helios-results/sweep-helios-%A_%a.out"));
    assert!(script.ends_with("--point-from-env SLURM_ARRAY_TASK_ID --quiet\n"), "{script}");
    let body = render_rest_body(&array).expect("rest");
    assert_eq!(body["job"]["array"], "0,3,5-9");
    assert_eq!(body["job"]["standard_output"], "/shared/sweeps/helios-results/sweep-helios-%A_%a.out");
    assert_eq!(body["script"], script);
    assert!(render_rest_body(&gang("minimal")).expect("rest")["job"].get("array").is_none());
    assert!(!render_sbatch(&gang("minimal")).contains("--array"));

    let err = parse_error("array: []\n");
    assert_eq!(invalid(&err), (Some(6), "array"));
    assert!(err.to_string().contains("no index"), "{err}");
    let err = parse_error("array: [4, 2, 4]\n");
    assert_eq!(invalid(&err), (Some(6), "array"));
    assert!(err.to_string().contains("index 4 is listed twice"), "{err}");
}

#[test]
fn sbatch_directives_cover_the_gang() {
    let script = render_sbatch(&gang("switches"));
    for line in [
        "#SBATCH --comment=trainyard-gang=vision/resnet-ddp",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gres=gpu:4",
        "#SBATCH --switches=1@30",
        "#SBATCH --time=90",
        "#SBATCH --chdir=/home/vision/resnet/",
        "export WORLD_SIZE=16",
        "export NNODES=4",
    ] {
        assert!(script.lines().any(|l| l == line), "missing {line:?} in\n{script}");
    }
    // sbatch reads directives only up to the first command; all of them must come first.
    let first_command = script.lines().position(|l| !l.starts_with('#')).expect("a command");
    assert!(script.lines().skip(first_command).all(|l| !l.starts_with("#SBATCH")), "{script}");
}

#[test]
fn job_states_map_onto_gang_states() {
    use GangState::*;
    for (state, want) in [
        ("PENDING", Pending),
        ("PD", Pending),
        ("CONFIGURING", Running),
        ("RUNNING", Running),
        ("r", Running),
        ("COMPLETING", Running),
        ("SUSPENDED", Running),
        ("COMPLETED", Completed),
        ("FAILED", Failed),
        ("OUT_OF_MEMORY", Failed),
        ("CANCELLED", Cancelled),
        ("CANCELLED by 0", Cancelled),
        ("CANCELLED+", Cancelled),
        ("PREEMPTED", Cancelled),
        ("TIMEOUT", Timeout),
        ("DEADLINE", Timeout),
        ("NODE_FAIL", NodeFail),
        ("BOOT_FAIL", NodeFail),
        ("REQUEUED", Requeued),
        ("PENDING,REQUEUED", Requeued),
        ("[\"RUNNING\",\"COMPLETING\"]", Running),
        ("  completed  ", Completed),
        ("SOMETHING_NEW", Pending),
        ("", Pending),
    ] {
        assert_eq!(slurm_state(state), want, "{state:?}");
    }
    assert!(Completed.is_terminal() && Cancelled.is_terminal() && NodeFail.is_terminal());
    assert!(!Pending.is_terminal() && !Running.is_terminal() && !Requeued.is_terminal());
}

#[test]
fn shell_quote_leaves_plain_words_bare() {
    assert_eq!(shell_quote("--nproc-per-node=8"), "--nproc-per-node=8");
    assert_eq!(shell_quote(""), "''");
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
    assert_eq!(shell_quote("$(x)"), "'$(x)'");
}

/// A fresh scratch directory per harness run.
fn scratch() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("trainyard-slurm-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    // A file for an unquoted `*` to expand to.
    std::fs::write(dir.join("glob-bait"), "").expect("bait");
    dir
}

/// Runs `script` with bash in `dir` where `srun` and `scontrol` are shell functions; the `srun`
/// stub gets `$OUT` (a file in `dir`). Returns the NUL-separated words written to `$OUT`.
fn run_with_stubs(dir: &Path, script: &str, srun: &str) -> Vec<String> {
    let path = dir.join("job.sbatch");
    std::fs::write(&path, script).expect("write script");
    let out = dir.join("out");
    let harness = format!(
        "srun() {{ {srun}; }}; scontrol() {{ printf 'n1\\nn2\\n'; }}; export -f srun scontrol; exec bash \"$0\""
    );
    let status = Command::new("bash")
        .arg("-c")
        .arg(harness)
        .arg(&path)
        .current_dir(dir)
        .env("OUT", &out)
        .env("SLURM_JOB_NODELIST", "n[1-2]")
        .status()
        .expect("run bash");
    assert!(status.success(), "script failed ({status}):\n{script}");
    let bytes = std::fs::read(&out).expect("srun stub wrote nothing");
    let text = String::from_utf8(bytes).expect("utf-8");
    let mut words: Vec<String> = text.split('\0').map(str::to_owned).collect();
    assert_eq!(words.pop().as_deref(), Some(""), "output ends with NUL");
    words
}

/// Records srun's argv, so everything after the step wrapper's `$0` is the command as srun got it.
const CAPTURE: &str = r#"printf '%s\0' "$@" > "$OUT""#;
/// Drops srun's own options, then runs the step like one task on the second node would.
const EXECUTE: &str =
    r#"while [ "${1#--}" != "$1" ]; do shift; done; SLURM_NODEID=1 SLURM_PROCID=5 SLURM_LOCALID=2 "$@""#;

fn hostile(marker: &Path) -> Vec<String> {
    let m = marker.display();
    vec![
        format!("$(touch {m})"),
        format!("`touch {m}`"),
        format!("; touch {m}"),
        format!("&& touch {m} ||"),
        format!("\n touch {m}\n"),
        "it's \"double\" and 'single'".into(),
        "*".into(),
        "--flag".into(),
        "-c".into(),
        "$HOME ${PATH} ~ !! {a,b} [x]".into(),
        "tab\there  two  spaces".into(),
        String::new(),
        "back\\slash\\".into(),
        "'".into(),
        "ünïcødé ✓".into(),
    ]
}

#[test]
fn hostile_arguments_reach_srun_unchanged() {
    let dir = scratch();
    let marker = dir.join("pwned");
    let mut gang = gang("gpu_nodelist");
    gang.command = [vec!["--looks-like-an-option".to_string()], hostile(&marker)].concat();
    gang.validate("test").expect("hostile arguments are valid");
    let words = run_with_stubs(&dir, &render_sbatch(&gang), CAPTURE);
    let srun_options = ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64", "--kill-on-bad-exit=1"];
    assert_eq!(&words[..6], [&srun_options[..], &["/bin/bash", "-c"]].concat());
    assert_eq!(words[7], "trainyard-step");
    assert_eq!(&words[8..], gang.command.as_slice());
    assert!(!marker.exists(), "something was executed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_task_gets_its_rank_the_rendezvous_and_the_exact_command() {
    let dir = scratch();
    let marker = dir.join("pwned");
    let mut gang = gang("gpu_nodelist");
    let printer = r#"printf '%s\0' "$NODE_RANK" "$RANK" "$LOCAL_RANK" "$MASTER_ADDR" "$MASTER_PORT" "$NNODES" "$WORLD_SIZE" "$HOSTILE" "$WANDB_NOTES" "$@" > "$OUT""#;
    gang.command = ["/bin/bash", "-c", printer, "argv0"].map(String::from).to_vec();
    gang.command.extend(hostile(&marker));
    gang.env.insert("HOSTILE".into(), format!("$(touch {m})\n`touch {m}`'\"", m = marker.display()));
    let words = run_with_stubs(&dir, &render_sbatch(&gang), EXECUTE);
    let env = &words[..9];
    assert_eq!(env[..7], ["1", "5", "2", "n1", "29511", "2", "2"]);
    assert_eq!(env[7], gang.env["HOSTILE"]);
    assert_eq!(env[8], "first run; `date` stays literal");
    assert_eq!(&words[9..], &gang.command[4..]);
    assert!(!marker.exists(), "something was executed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn launcher_specific_rank_and_master_variables_are_set_per_task() {
    let dir = scratch();
    let mut gang = gang("gpu_nodelist");
    let printer = r#"printf '%s\0' "$PET_NODE_RANK" "$PET_MASTER_ADDR" "$COORDINATOR" > "$OUT""#;
    gang.command = ["/bin/bash", "-c", printer].map(String::from).to_vec();
    let words = run_with_stubs(&dir, &render_sbatch(&gang), EXECUTE);
    assert_eq!(words, ["1", "n1", "n1:29511 it's"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_variable_may_be_set_only_once() {
    let mut gang = gang("gpu_nodelist");
    gang.env.insert("PET_NODE_RANK".into(), "0".into());
    let err = gang.validate("code").unwrap_err().to_string();
    assert!(err.contains("field `rankEnv[0]`: PET_NODE_RANK is already set by env.PET_NODE_RANK"), "{err}");
    let mut gang = self::gang("minimal");
    gang.rank_env = vec!["RANK".into()];
    let err = gang.validate("code").unwrap_err().to_string();
    assert!(err.contains("RANK is set by the rendered job script"), "{err}");
}

#[test]
fn an_unvalidated_newline_in_a_directive_cannot_start_a_command() {
    let dir = scratch();
    let marker = dir.join("pwned");
    let mut gang = gang("minimal");
    gang.name = format!("x\ntouch {}", marker.display());
    gang.gang = format!("g\r\ntouch {}", marker.display());
    assert!(gang.validate("code").is_err());
    let script = render_sbatch(&gang);
    assert!(script.lines().filter(|l| l.contains("touch")).all(|l| l.starts_with("#SBATCH")), "{script}");
    run_with_stubs(&dir, &script, CAPTURE);
    assert!(!marker.exists(), "a directive value was executed");
    let _ = std::fs::remove_dir_all(&dir);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn random_arguments_survive_quoting(args in proptest::collection::vec("[^\\x00]{0,12}", 1..5)) {
        let dir = scratch();
        let mut gang = gang("minimal");
        gang.command = [vec!["prog".to_string()], args].concat();
        prop_assert!(gang.validate("prop").is_ok());
        let words = run_with_stubs(&dir, &render_sbatch(&gang), CAPTURE);
        prop_assert_eq!(&words[7..], gang.command.as_slice());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
