//! The runtime as a library, with no `loop` binary: a scripted task goes
//! from request to a verified, signed receipt through the API alone, and a
//! task whose process was killed midway (this test binary, re-run as a
//! child that SIGKILLs itself on an event) is resumed to the same end.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_protocol::{Contract, Event, OutcomeKind};
use loop_runtime::{OnPrompt, Runtime, TaskRequest};
use std::path::{Path, PathBuf};

const TASK: &str = r#"instruction: make a.txt say ALPHA
criteria:
  - id: files
    checks:
      - file_contains: a.txt
        text: ALPHA
      - run: "test \"$(cat effects.log)\" = c1"
limits: { max_steps: 6, max_verifications: 2 }
"#;

const SCRIPT: &str = r#"turns:
  - calls:
      - {tool: write_file, args: {path: a.txt, content: "ALPHA\n"}}
      - {tool: run_command, args: {command: "echo c1 >> effects.log"}}
  - calls:
      - {tool: finish, args: {summary: done}}
"#;

/// Records what a front end would see.
#[derive(Default)]
struct Seen {
    kinds: Vec<String>,
    notes: Vec<String>,
    /// SIGKILL this process when this event kind is seen.
    die_at: Option<&'static str>,
}

impl loop_core::Observer for Seen {
    fn on_event(&mut self, event: &Event) {
        let kind = serde_json::to_value(event).unwrap()["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if self.die_at == Some(kind.as_str()) {
            // SAFETY: signalling this very process; nothing after it runs.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        self.kinds.push(kind);
    }
}

impl loop_runtime::Observer for Seen {
    fn note(&mut self, line: &str) {
        self.notes.push(line.to_string());
    }
}

fn scene(name: &str) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("runtime-lib-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "scratch\n").unwrap();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    (dir, project)
}

fn request(dir: &Path) -> TaskRequest {
    TaskRequest {
        contract: loop_runtime::ContractInput::Given(Box::new(
            Contract::from_yaml(TASK, "task.yaml").unwrap(),
        )),
        model: Some(format!("scripted:{}", dir.join("script.yaml").display())),
        isolation: loop_sandbox::IsolationLevel::Preferred,
        on_prompt: Some(OnPrompt::Deny),
        via: loop_runtime::Via::Library,
        ..Default::default()
    }
}

/// The receipt holds: signature, statement, chain, artifacts.
fn holds(receipt: &Path) -> loop_receipt::VerifyReport {
    let key = loop_receipt::KeyPair::existing().unwrap().unwrap();
    let report = loop_receipt::verify_receipt(receipt, None, &[key.public()]).unwrap();
    assert!(report.ok(), "{report:?}");
    report
}

#[test]
fn a_task_runs_and_resumes_through_the_library_alone() {
    // The child: run the task and die midway, as a crash would.
    if let Some(dir) = std::env::var_os("LOOP_RUNTIME_TEST_CHILD") {
        let dir = PathBuf::from(dir);
        let mut seen = Seen {
            die_at: Some("observed"),
            ..Seen::default()
        };
        let _ = Runtime::open(&dir.join("project")).and_then(|r| r.start(request(&dir), &mut seen));
        unreachable!("the child kills itself at its first observation");
    }
    let state = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtime-lib-state");
    // SAFETY: set once, before this test starts any thread or process (it
    // is the only test in this binary).
    unsafe {
        std::env::set_var("LOOP_STATE_DIR", &state);
    }

    // 1. Request to verified, signed receipt, through the Runtime handle:
    // submitted (prepared and stored, nothing run), then run.
    let (dir, project) = scene("run");
    let runtime = Runtime::open(&project).unwrap();
    let mut seen = Seen::default();
    let id = runtime.submit(request(&dir), &mut seen).unwrap();
    let submitted = runtime.task(&id).unwrap();
    assert_eq!(submitted.state, "pending");
    // A task that is not there is told apart by its kind, not its words.
    for e in [
        runtime.task("t-00000000-000000-000000").unwrap_err(),
        runtime.status("t-00000000-000000-000000").unwrap_err(),
        runtime.resolve_id("t-nothing-like-it").unwrap_err(),
    ] {
        assert_eq!(e.kind, loop_runtime::ErrorKind::NotFound, "{}", e.message);
    }
    assert_eq!(submitted.entries, 0, "submitting runs nothing");
    assert!(seen.kinds.is_empty(), "{:?}", seen.kinds);
    // Submitted and not yet taken up, it waits (for a worker, a server):
    // no crash left it, and resuming the interrupted leaves it alone.
    assert!(submitted.waiting(), "{submitted:?}");
    assert!(runtime.interrupted().unwrap().is_empty());
    let report = runtime.run(&id, OnPrompt::Deny, &mut seen).unwrap();
    assert_eq!(report.task_id, id);
    assert_eq!(
        report.outcome.kind,
        OutcomeKind::Verified,
        "{:?}",
        report.outcome
    );
    assert_eq!(seen.kinds.first().map(String::as_str), Some("task_started"));
    assert_eq!(seen.kinds.last().map(String::as_str), Some("finished"));
    assert!(
        seen.notes.iter().any(|n| n.starts_with("workspace ")),
        "{:?}",
        seen.notes
    );
    assert!(
        seen.notes.iter().any(|n| n.starts_with("baseline: 0 of 1")),
        "{:?}",
        seen.notes
    );
    let verified = holds(&report.receipt);
    assert_eq!(
        verified.statement.unwrap().predicate.outcome.kind,
        OutcomeKind::Verified
    );
    // What a front end reads afterwards is what the run saw.
    let recorded: Vec<String> = runtime
        .events(&id, 0)
        .unwrap()
        .iter()
        .map(|r| r.event.kind().to_string())
        .collect();
    assert_eq!(recorded, seen.kinds);
    let status = runtime.status(&id).unwrap();
    assert_eq!(status.task.outcome.as_deref(), Some("verified"));
    assert_eq!(status.apply, loop_runtime::ApplyState::NotApplied);
    assert_eq!(status.used.verifications, 1);
    let check = loop_runtime::verify_receipt(&report.receipt, None, None).unwrap();
    assert!(check.intact && check.verified, "{check:?}");

    // 2. Killed midway in another process, resumed here.
    let (dir, project) = scene("resume");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_task_runs_and_resumes_through_the_library_alone",
            "--nocapture",
        ])
        .env("LOOP_RUNTIME_TEST_CHILD", &dir)
        .env("LOOP_STATE_DIR", &state)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "the child was killed midway"
    );
    let runtime = Runtime::open(&project).unwrap();
    let ids = runtime.interrupted().unwrap();
    assert_eq!(ids.len(), 1, "one task left unfinished");
    assert!(runtime.task(&ids[0]).unwrap().interrupted);
    let mut seen = Seen::default();
    let report = runtime.run(&ids[0], OnPrompt::Deny, &mut seen).unwrap();
    assert_eq!(
        report.outcome.kind,
        OutcomeKind::Verified,
        "{:?}",
        report.outcome
    );
    assert!(
        seen.kinds.iter().any(|k| k == "resumed"),
        "{:?}",
        seen.kinds
    );
    holds(&report.receipt);
    // Every effect exactly once: the check reads effects.log == "c1".
    let log = std::fs::read_to_string(report.workspace.join("effects.log")).unwrap();
    assert_eq!(log, "c1\n");
    assert!(runtime.interrupted().unwrap().is_empty());
}
