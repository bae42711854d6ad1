//! Nothing is spawned that the task does not need: a task whose checks
//! run no command starts no sandbox (not even the probe that learns
//! whether overlays work) before its first command, and a project that is
//! no repository runs no git; the honest counterparts (a `run` check, a
//! git project) still start them and still verify.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Three steps as three criteria; step 2 is written wrong first, rejected
/// by the first verification and repaired.
const SCRIPT: &str = "turns:
  - calls: [{tool: write_file, args: {path: step1.txt, content: \"step 1 done\\n\"}}]
  - calls: [{tool: write_file, args: {path: step2.txt, content: \"step 2 wrong\\n\"}}]
  - calls: [{tool: write_file, args: {path: step3.txt, content: \"step 3 done\\n\"}}]
  - calls: [{tool: finish, args: {summary: done}}]
  - calls: [{tool: write_file, args: {path: step2.txt, content: \"step 2 done\\n\"}}]
  - calls: [{tool: finish, args: {summary: repaired}}]
";

fn task(step3: &str) -> String {
    format!(
        "instruction: write three steps
criteria:
  - id: step-1
    checks: [{{file_contains: step1.txt, text: step 1 done}}]
  - id: step-2
    checks: [{{file_contains: step2.txt, text: step 2 done}}]
  - id: step-3
    checks: [{step3}]
"
    )
}

const FILE_CHECK: &str = "{file_contains: step3.txt, text: step 3 done}";
const RUN_CHECK: &str = "{run: grep -q 'step 3 done' step3.txt}";

/// A `git` first on PATH that leaves a mark each time it runs, then runs
/// the real one.
fn marking_git(base: &Path) -> (PathBuf, PathBuf) {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = base.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mark = base.join("git-ran");
    let git = bin.join("git");
    std::fs::write(
        &git,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            mark.display(),
            real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, mark)
}

/// `loop run` on `project` with the sandbox's phases logged, `bin` first
/// on PATH; its output and the statement of its receipt, verified.
fn run(base: &Path, project: &Path, bin: &Path, task: &str) -> (Output, serde_json::Value) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let run = shared::run_scripted_with(
        base,
        project,
        "steps",
        (task, SCRIPT),
        &[
            ("PATH", path),
            ("LOOP_LOG", "loop_sandbox::phases=debug".into()),
        ],
    );
    assert!(
        run.outcome().starts_with("verified"),
        "{}",
        shared::text(&run.out)
    );
    (run.out, run.statement)
}

/// How many sandboxes the run started (each logs its phases).
fn sandboxes(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("sandbox: view at"))
        .count()
}

fn base(name: &str) -> PathBuf {
    let b = std::env::temp_dir().join(format!("loop-spawned-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&b);
    std::fs::create_dir_all(b.join("project")).unwrap();
    b
}

#[test]
fn a_task_whose_checks_run_no_command_starts_no_sandbox_and_no_git() {
    let b = base("none");
    let (bin, mark) = marking_git(&b);
    let (out, statement) = run(&b, &b.join("project"), &bin, &task(FILE_CHECK));
    assert_eq!(sandboxes(&out), 0, "{}", shared::text(&out));
    assert!(
        !mark.exists(),
        "git ran in a project that is no repository: {}",
        std::fs::read_to_string(&mark).unwrap_or_default()
    );
    // Two verifications: the first rejected step 2, the second accepted.
    assert_eq!(
        statement["predicate"]["budgets"]["used"]["verifications"],
        2
    );
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn a_run_check_starts_its_sandbox_and_a_repository_is_asked_of_git() {
    let b = base("run");
    let project = b.join("project");
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    shared::commit_all(&project);
    let (bin, mark) = marking_git(&b);
    let (out, statement) = run(&b, &project, &bin, &task(RUN_CHECK));
    // The baseline, and each verification's run check.
    assert!(sandboxes(&out) >= 3, "{}", shared::text(&out));
    assert!(
        std::fs::read_to_string(&mark)
            .unwrap()
            .contains("rev-parse --show-toplevel")
    );
    assert_eq!(
        statement["predicate"]["budgets"]["used"]["verifications"],
        2
    );
    let _ = std::fs::remove_dir_all(&b);
}
