//! Crash safety through the binary: scripted runs SIGKILLed at random
//! moments (at least 100 kills in all), each resumed until it ends. For
//! every task: it ends exactly once; its ledger is one unbroken chain and the
//! receipt verifies; no step is lost or duplicated; no command with an
//! effect ran twice (each appends its own name to a counter file); and the
//! final workspace is the one a never-killed run leaves.
//!
//! Seeds are printed; `LOOP_KILL_SEED=N` replays one.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::Rng;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn loop_bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

const SCRIPT: &str = r#"turns:
  - calls:
      - {tool: run_command, args: {command: "echo c1 >> effects.log"}}
      - {tool: write_file, args: {path: a.txt, content: "alpha\n"}}
  - calls:
      - {tool: run_command, args: {command: "echo c2 >> effects.log"}}
      - {tool: edit_file, args: {path: a.txt, old: "alpha", new: "ALPHA"}}
      - {tool: finish, args: {summary: first try}}
  - calls:
      - {tool: apply_patch, args: {patch: "--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+beta\n"}}
      - {tool: run_command, args: {command: "echo c3 >> effects.log"}}
  - calls:
      - {tool: read_file, args: {path: a.txt}}
      - {tool: finish, args: {summary: done}}
"#;

const TASK: &str = r#"instruction: make a.txt say ALPHA and b.txt say beta
criteria:
  - id: files
    checks:
      - file_contains: a.txt
        text: ALPHA
      - file_contains: b.txt
        text: beta
limits: { max_steps: 10, max_verifications: 4 }
"#;

fn setup(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "scratch\n").unwrap();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(dir.join("task.yaml"), TASK).unwrap();
    project
}

fn run_cmd(dir: &Path, project: &Path) -> Command {
    let mut c = loop_bin();
    c.arg("run")
        .arg("--task")
        .arg(dir.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(project)
        .arg("--json")
        .env("LOOP_STATE_DIR", dir.join("state"));
    c
}

fn resume_cmd(dir: &Path, project: &Path, id: &str) -> Command {
    let mut c = loop_bin();
    c.args(["resume", id, "--json", "--project"])
        .arg(project)
        .env("LOOP_STATE_DIR", dir.join("state"));
    c
}

fn tasks(project: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["list", "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Start `cmd`, SIGKILL it after `ms` (if still running). True if it was killed.
fn run_and_kill(mut cmd: Command, ms: u64) -> bool {
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_millis(ms);
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn workspace_files(ws: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in ["a.txt", "b.txt", "effects.log", "README.md"] {
        out.push((
            name.to_string(),
            std::fs::read_to_string(ws.join(name)).unwrap_or_default(),
        ));
    }
    out
}

/// Check one finished task in full; returns its final workspace files.
fn check_task(dir: &Path, project: &Path, id: &str, seed: u64) -> Vec<(String, String)> {
    shared::assert_one_verified_run(project, id, &[1, 2, 3, 4], seed, &dir.join("state"));
    let ws = shared::workspace_of(project, id);
    let files = workspace_files(&ws);
    // No command with an effect ran twice, and none was lost.
    let log = std::fs::read_to_string(ws.join("effects.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        vec!["c1", "c2", "c3"],
        "seed {seed}: effects {lines:?}"
    );
    files
}

#[test]
fn tasks_killed_at_random_moments_resume_to_the_same_end_exactly_once() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill");
    // The reference: a run never killed.
    let ref_dir = root.join("reference");
    let ref_project = setup(&ref_dir);
    let start = Instant::now();
    let out = run_cmd(&ref_dir, &ref_project).output().unwrap();
    let full_ms = start.elapsed().as_millis() as u64;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ref_id = tasks(&ref_project)[0]["id"].as_str().unwrap().to_string();
    let reference = check_task(&ref_dir, &ref_project, &ref_id, 0);
    eprintln!("a full run takes {full_ms} ms");

    let only: Option<u64> = std::env::var("LOOP_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let mut kills = 0;
    let mut tasks_done = 0;
    let mut seed = 1u64;
    while kills < 100 || only.is_some() {
        let this = only.unwrap_or(seed);
        seed += 1;
        eprintln!("seed {this}");
        let mut rng = Rng(this.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let dir = root.join(format!("seed-{this}"));
        let project = setup(&dir);
        // Kill the first run somewhere in its life.
        let first = run_and_kill(run_cmd(&dir, &project), rng.below(full_ms + 50));
        kills += first as u32;
        let listed = tasks(&project);
        if listed.is_empty() {
            // Killed before the task existed: nothing to resume, by design.
            assert!(first, "seed {this}: a run that ended recorded no task");
            continue;
        }
        assert_eq!(listed.len(), 1, "seed {this}");
        let id = listed[0]["id"].as_str().unwrap().to_string();
        // Resume, killing some resumes too, until it ends.
        let mut rounds = 0;
        loop {
            let t = &tasks(&project)[0];
            if t["state"] == "terminal" {
                break;
            }
            rounds += 1;
            assert!(rounds < 20, "seed {this}: the task never ends");
            if rng.below(3) == 0 {
                let killed = run_and_kill(resume_cmd(&dir, &project, &id), rng.below(full_ms));
                kills += killed as u32;
            } else {
                let out = resume_cmd(&dir, &project, &id).output().unwrap();
                assert!(
                    out.status.code() == Some(0),
                    "seed {this}: resume failed ({:?}): {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        let files = check_task(&dir, &project, &id, this);
        assert_eq!(
            files, reference,
            "seed {this}: the workspace differs from a never-killed run"
        );
        tasks_done += 1;
        if only.is_some() {
            break;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("{kills} kills over {tasks_done} tasks, all resumed to the same verified end");
    assert!(only.is_some() || kills >= 100);
}

/// A runtime frozen (SIGSTOP) past its lease while its command runs, whose
/// task another runtime then takes over, leaves nothing in the workspace
/// when it runs again: its staged effects were dropped when the other
/// runtime made the workspace ready, its commit is refused (its claim may
/// have lapsed: the fence, tested on its own in loop-tools), and it records
/// nothing. Each run of the command leaves a file of its own, so an effect
/// that got through would show as a second file.
#[test]
fn a_runtime_frozen_past_its_lease_writes_nothing_when_it_wakes() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill-frozen");
    let project = setup(&dir);
    std::fs::write(
        dir.join("script.yaml"),
        r#"turns:
  - calls:
      - {tool: run_command, args: {command: "sleep 6; echo ran > by-$(date +%s%N).txt", timeout_secs: 60}}
      - {tool: write_file, args: {path: a.txt, content: "ALPHA\n"}}
      - {tool: write_file, args: {path: b.txt, content: "beta\n"}}
      - {tool: finish, args: {summary: done}}
"#,
    )
    .unwrap();
    let a = run_cmd(&dir, &project).spawn().unwrap();
    // Frozen once its command runs (its intent is recorded).
    let start = Instant::now();
    let id = loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the command never started"
        );
        if let Some(t) = tasks(&project).first() {
            let id = t["id"].as_str().unwrap().to_string();
            let ledger =
                std::fs::read_to_string(project.join(format!(".loop/receipts/{id}.ledger.jsonl")))
                    .unwrap_or_default();
            if ledger.contains("\"kind\":\"intent\"") {
                break id;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = a.id() as i32;
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let ledger = project.join(format!(".loop/receipts/{id}.ledger.jsonl"));
    let intents = || {
        std::fs::read_to_string(&ledger)
            .unwrap_or_default()
            .matches("\"kind\":\"intent\"")
            .count()
    };
    // Another runtime takes the task once the lease has lapsed (15 s).
    let taken = Instant::now();
    let mut b = loop {
        assert!(
            taken.elapsed() < Duration::from_secs(40),
            "the task was never taken over"
        );
        let mut c = resume_cmd(&dir, &project, &id);
        let mut child = c.spawn().unwrap();
        // A runtime refused by the lease exits 2; one that took the task
        // over runs its command again (a second intent; the command
        // sleeps 6 s). Told apart by those, not by how long it runs: on a
        // loaded machine a refusal took more than 3 s, and was taken for
        // a takeover.
        let spawned = Instant::now();
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if intents() >= 2 {
                break None;
            }
            assert!(
                spawned.elapsed() < Duration::from_secs(60),
                "a resumer neither ended nor ran the command"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        match exited {
            Some(status) if status.code() == Some(2) => {
                std::thread::sleep(Duration::from_millis(500));
            }
            _ => break child,
        }
    };
    assert!(
        taken.elapsed() >= Duration::from_secs(5),
        "taken over while the lease held"
    );
    // Once the other runtime runs the command again (its own intent)...
    let again = Instant::now();
    while intents() < 2 {
        assert!(
            again.elapsed() < Duration::from_secs(30),
            "the takeover never ran the command"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...the frozen runtime wakes: its command has long ended, and its
    // commit must not get through.
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let a_out = a.wait_with_output().unwrap();
    let b_status = b.wait().unwrap();
    assert_eq!(
        b_status.code(),
        Some(0),
        "the runtime that took over failed"
    );
    assert_ne!(
        a_out.status.code(),
        Some(0),
        "the frozen runtime ended as if it held the task"
    );
    let ws = shared::workspace_of(&project, &id);
    let runs: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("by-"))
        .collect();
    assert_eq!(runs.len(), 1, "one run's effect only: {runs:?}");
    let t = &tasks(&project)[0];
    assert_eq!(t["outcome"], "verified", "{t}");
    let receipt = t["receipt"].as_str().unwrap();
    let p = shared::payload_of(Path::new(receipt));
    let added: Vec<&str> = p["predicate"]["change_set"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .filter(|f| f.starts_with("by-"))
        .collect();
    assert_eq!(added, vec![runs[0].as_str()], "{p}");
    shared::assert_receipt_holds(Path::new(receipt), &dir.join("state"));
}

#[test]
fn two_resumers_of_one_task_never_run_it_twice() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill-two");
    let project = setup(&dir);
    // A task that stopped after its first step.
    std::fs::write(
        dir.join("script.yaml"),
        SCRIPT.replace("echo c1 >> effects.log", "echo c1 >> effects.log; sleep 2"),
    )
    .unwrap();
    let killed = run_and_kill(run_cmd(&dir, &project), 1_500);
    assert!(killed);
    let id = tasks(&project)[0]["id"].as_str().unwrap().to_string();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    // Two resumers at once: one runs it, the other is refused (exit 2).
    let a = resume_cmd(&dir, &project, &id).spawn().unwrap();
    let b = resume_cmd(&dir, &project, &id).spawn().unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let mut codes = [a.status.code(), b.status.code()];
    codes.sort();
    assert_eq!(
        codes,
        [Some(0), Some(2)],
        "a: {}\nb: {}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let refused = if a.status.code() == Some(2) { &a } else { &b };
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is running in process"));
    check_task(&dir, &project, &id, 0);
}

#[test]
fn cancel_reaches_a_running_task_and_kills_its_commands() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill-cancel");
    let project = setup(&dir);
    // A command line only this test runs (`sleep` takes a fraction): the
    // test looks for its own process, never for another program's.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let sleep = format!("sleep 300.{}{nanos:09}", std::process::id());
    std::fs::write(
        dir.join("script.yaml"),
        format!("turns:\n  - calls: [{{tool: run_command, args: {{command: '{sleep} & echo $! > pid.txt; wait', timeout_secs: 600}}}}]\n"),
    )
    .unwrap();
    let ours = format!("^{}$", sleep.replace('.', "[.]"));
    let mut child = run_cmd(&dir, &project).spawn().unwrap();
    // Wait for the command to be running.
    let start = Instant::now();
    let id = loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the task never started its command"
        );
        if let Some(t) = tasks(&project).first() {
            let id = t["id"].as_str().unwrap().to_string();
            // The command is running once its intent is recorded and its
            // `sleep` exists (its effects are staged, not yet visible).
            let ledger =
                std::fs::read_to_string(project.join(format!(".loop/receipts/{id}.ledger.jsonl")))
                    .unwrap_or_default();
            let sleeping = Command::new("pgrep").args(["-f", &ours]).output().unwrap();
            if ledger.contains("\"kind\":\"intent\"") && !sleeping.stdout.is_empty() {
                break id;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["cancel", &id, "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let took = t.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the run ends unverified");
    let task = &tasks(&project)[0];
    assert_eq!(task["outcome"], "cancelled");
    // The sandboxed `sleep` is gone: its pid (inside the sandbox's PID
    // namespace) is not ours to see, so look for its unique command line. The
    // kernel reaps a dead namespace's processes asynchronously: it gets a
    // moment (on a loaded machine the last one was still listed as the run
    // ended), never minutes.
    let mut ps = Command::new("pgrep").args(["-f", &ours]).output().unwrap();
    let reaped = Instant::now();
    while !ps.stdout.is_empty() && reaped.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        ps = Command::new("pgrep").args(["-f", &ours]).output().unwrap();
    }
    assert!(
        ps.stdout.is_empty(),
        "the command's process tree survived: {}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

/// Two runs, a `logs --follow`, `status` and `list` on one project at once:
/// nobody sees "database is locked", and the follower sees the whole story.
#[test]
fn several_processes_share_one_project_store() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill-shared");
    let project = setup(&dir);
    let spawn_run = || {
        let mut c = run_cmd(&dir, &project);
        c.stdout(Stdio::piped());
        c.spawn().unwrap()
    };
    let a = spawn_run();
    let b = spawn_run();
    // Follow the first task that appears.
    let start = Instant::now();
    let id = loop {
        assert!(start.elapsed() < Duration::from_secs(30));
        if let Some(t) = tasks(&project).last() {
            break t["id"].as_str().unwrap().to_string();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let follower = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["logs", &id, "--follow", "--json", "--project"])
        .arg(&project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut readers = 0;
    while start.elapsed() < Duration::from_secs(2) {
        for args in [vec!["list"], vec!["status", id.as_str()]] {
            let out = Command::new(env!("CARGO_BIN_EXE_loop"))
                .args(&args)
                .arg("--project")
                .arg(&project)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && !err.contains("locked"),
                "{args:?}: {err}"
            );
            readers += 1;
        }
    }
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let followed = follower.wait_with_output().unwrap();
    assert!(
        followed.status.success(),
        "{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&followed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["kind"], "task_started");
    assert_eq!(
        events.last().unwrap()["kind"],
        "finished",
        "the follower saw the end"
    );
    let all = tasks(&project);
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|t| t["outcome"] == "verified"), "{all:?}");
    assert!(readers > 4);
}

/// `loop cancel` on a task whose runtime died ends it there, cancelled,
/// with a receipt that verifies.
#[test]
fn cancelling_an_interrupted_task_ends_it_with_a_receipt() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill-cancel-interrupted");
    let project = setup(&dir);
    std::fs::write(
        dir.join("script.yaml"),
        SCRIPT.replace("echo c1 >> effects.log", "echo c1 >> effects.log; sleep 5"),
    )
    .unwrap();
    assert!(run_and_kill(run_cmd(&dir, &project), 1_500));
    let id = tasks(&project)[0]["id"].as_str().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["cancel", &id, "--project"])
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = &tasks(&project)[0];
    assert_eq!(t["outcome"], "cancelled", "{t}");
    shared::assert_receipt_holds(
        Path::new(t["receipt"].as_str().unwrap()),
        &dir.join("state"),
    );
}

/// A command's effects enter the workspace all at once: a kill after every
/// single step of their merge (the plan written, each file moved) is rolled
/// back when the task resumes, the command runs again, and the task ends
/// exactly as a run never killed does, every effect once.
#[test]
#[cfg(feature = "fault-injection")]
fn a_kill_at_every_step_of_a_commands_merge_leaves_before_or_after() {
    const MERGE_SCRIPT: &str = r#"turns:
  - calls:
      - {tool: run_command, args: {command: "echo c1 >> effects.log; rm README.md; mkdir -p d/e; echo x > d/e/f; echo y > g.txt; echo z > a.txt"}}
      - {tool: finish, args: {summary: done}}
"#;
    const MERGE_TASK: &str = r#"instruction: effects
criteria:
  - id: files
    checks:
      - file_contains: d/e/f
        text: x
limits: { max_steps: 4, max_verifications: 1 }
"#;
    let snapshot = |ws: &Path| -> Vec<(String, String)> {
        let mut out = Vec::new();
        for name in ["README.md", "a.txt", "d/e/f", "effects.log", "g.txt"] {
            out.push((
                name.to_string(),
                std::fs::read_to_string(ws.join(name)).unwrap_or_else(|_| "<absent>".into()),
            ));
        }
        out
    };
    let before = || -> Vec<(String, String)> {
        [
            ("README.md", "scratch\n"),
            ("a.txt", "a0\n"),
            ("d/e/f", "<absent>"),
            ("effects.log", "<absent>"),
            ("g.txt", "<absent>"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
    };
    let run_one = |name: &str, kill_at: Option<usize>| -> (bool, Vec<(String, String)>) {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
        let project = setup(&dir);
        std::fs::write(project.join("a.txt"), "a0\n").unwrap();
        std::fs::write(dir.join("script.yaml"), MERGE_SCRIPT).unwrap();
        std::fs::write(dir.join("task.yaml"), MERGE_TASK).unwrap();
        let mut cmd = run_cmd(&dir, &project);
        if let Some(n) = kill_at {
            cmd.env("LOOP_FAULT_KILL_IN_MERGE", n.to_string());
        }
        let status = cmd.status().unwrap();
        let killed = status.code().is_none();
        let id = tasks(&project)[0]["id"].as_str().unwrap().to_string();
        let ws = shared::workspace_of(&project, &id);
        let journal = shared::near_of(&project, &id).join("command-journal");
        if killed {
            // Killed mid-merge: the plan is there, and recovering from it
            // (as the next start does) leaves the workspace exactly as it
            // was before the command: never between.
            assert!(
                journal.join("plan.json").exists(),
                "{name}: the merge's plan"
            );
            loop_workspace::OverlayCommit::new(&journal)
                .recover(&ws)
                .unwrap();
            assert_eq!(snapshot(&ws), before(), "{name}: after recovery");
            let out = resume_cmd(&dir, &project, &id).output().unwrap();
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let t = &tasks(&project)[0];
        assert_eq!(t["outcome"], "verified", "{name}: {t}");
        let ws = shared::workspace_of(&project, &id);
        assert!(
            !shared::near_of(&project, &id)
                .join("journal/commands/plan.json")
                .exists(),
            "{name}: no merge left pending"
        );
        (killed, snapshot(&ws))
    };
    let (_, reference) = run_one("merge-kill-ref", None);
    assert_eq!(reference[4].1, "y\n");
    assert_eq!(reference[3].1, "c1\n", "{reference:?}");
    // Six operations (README.md deleted, a.txt replaced, d, d/e, d/e/f,
    // effects.log, g.txt): a kill after the plan and after each of them.
    let mut kills = 0;
    for at in 0..=7 {
        let (killed, files) = run_one(&format!("merge-kill-{at}"), Some(at));
        kills += usize::from(killed);
        assert_eq!(files, reference, "killed after merge step {at}");
    }
    assert_eq!(kills, 8, "every step of the merge was a kill point");
}

/// A task of its own (under `name`) whose command `command` (c1, c2 or c3)
/// sleeps 5 s, killed `ms` into its run: (its directory, project, task id).
fn killed_in_a_slow_command(name: &str, command: &str, ms: u64) -> (PathBuf, PathBuf, String) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let project = setup(&dir);
    let echo = format!("echo {command} >> effects.log");
    std::fs::write(
        dir.join("script.yaml"),
        SCRIPT.replace(&echo, &format!("{echo}; sleep 5")),
    )
    .unwrap();
    assert!(run_and_kill(run_cmd(&dir, &project), ms));
    let id = tasks(&project)[0]["id"].as_str().unwrap().to_string();
    (dir, project, id)
}

/// A task whose workspace was deleted while its runtime was down is made
/// again from the store's record of it (the project's copy, then the
/// recorded changes) and goes on to the same end, every effect once.
#[test]
fn resuming_a_task_whose_workspace_is_gone_rebuilds_it_from_the_record() {
    let (dir, project, id) = killed_in_a_slow_command("kill-workspace-rebuilt", "c2", 2_000);
    let ws = shared::workspace_of(&project, &id);
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "alpha\n"
    );
    std::fs::remove_dir_all(&ws).unwrap();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    let out = resume_cmd(&dir, &project, &id)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("workspace rebuilt on this machine from a copy of the project"),
        "{stdout}"
    );
    check_task(&dir, &project, &id, 0);
}

/// A task whose workspace was deleted while its runtime was down, and
/// whose record does not hold its workspace (made by a build that did not
/// keep it), cannot go on: resuming it ends it in error, with a receipt
/// that names the reason and an empty change set, and apply has nothing
/// to bring home.
#[test]
fn resuming_a_task_whose_workspace_is_gone_ends_it_with_a_receipt_that_says_so() {
    let (dir, project, id) = killed_in_a_slow_command("kill-workspace-gone", "c1", 1_500);
    let ws = shared::workspace_of(&project, &id);
    std::fs::remove_dir_all(&ws).unwrap();
    let db = rusqlite::Connection::open(project.join(".loop/loop.db")).unwrap();
    db.execute("DELETE FROM task_files", []).unwrap();
    db.execute("DELETE FROM blobs", []).unwrap();
    drop(db);
    let out = resume_cmd(&dir, &project, &id).output().unwrap();
    let t = &tasks(&project)[0];
    assert_eq!(
        t["state"],
        "terminal",
        "{t} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(t["outcome"], "error", "{t}");
    let receipt = t["receipt"].as_str().unwrap();
    let statement = shared::payload_of(Path::new(receipt));
    let p = &statement["predicate"];
    let reason = p["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("workspace") && reason.contains("is gone"),
        "{reason}"
    );
    assert_eq!(p["change_set"]["files"].as_array().unwrap().len(), 0, "{p}");
    shared::assert_receipt_holds(Path::new(receipt), &dir.join("state"));
    // Resuming again says it has ended.
    let again = resume_cmd(&dir, &project, &id).output().unwrap();
    assert_ne!(again.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("has already ended"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// The same durability for an unprivileged user (uid 65534 via setpriv,
/// when the tests run as root): a task killed mid-command resumes to a
/// verified end with every effect exactly once; nothing in the store, the
/// journal or the resume path needs root.
#[test]
fn an_unprivileged_users_task_survives_a_kill_and_resumes() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("not root: the current user is the unprivileged case, covered above");
        return;
    }
    let base = std::env::temp_dir().join(format!("loop-kill-nobody-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let project = setup(&base);
    std::fs::write(
        base.join("script.yaml"),
        SCRIPT.replace("echo c1 >> effects.log", "echo c1 >> effects.log; sleep 2"),
    )
    .unwrap();
    let bin = base.join("loop");
    std::fs::copy(env!("CARGO_BIN_EXE_loop"), &bin).unwrap();
    for (p, mode) in [(&base, 0o1777), (&project, 0o777), (&bin, 0o755)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    for f in ["script.yaml", "task.yaml", "project/README.md"] {
        std::fs::set_permissions(base.join(f), std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "env",
        ])
        .arg(format!("HOME={}", base.display()))
        .arg(format!("LOOP_STATE_DIR={}", base.join("state").display()))
        .arg("PATH=/usr/local/bin:/usr/bin:/bin")
        .arg(&bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        c
    };
    let task = base.join("task.yaml").display().to_string();
    let script = format!("scripted:{}", base.join("script.yaml").display());
    let proj = project.display().to_string();
    let killed = run_and_kill(
        as_nobody(&[
            "run",
            "--task",
            &task,
            "--model",
            &script,
            "--project",
            &proj,
        ]),
        1_200,
    );
    assert!(killed, "the run was still in its first command");
    let id = tasks(&project)[0]["id"].as_str().unwrap().to_string();
    std::fs::write(base.join("script.yaml"), SCRIPT).unwrap();
    let out = as_nobody(&["resume", &id, "--project", &proj])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ws = shared::workspace_of(&project, &id);
    let log = std::fs::read_to_string(ws.join("effects.log")).unwrap();
    assert_eq!(log.lines().collect::<Vec<_>>(), ["c1", "c2", "c3"]);
    let owner = std::fs::metadata(project.join(".loop/loop.db")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&owner),
        65534,
        "the store is the user's own"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A fault is not a decision: the store cannot be reached long enough for
/// the claim's renewals to fail (injected) while a command runs. The run
/// stops, kills the command, records neither its result nor an outcome
/// (never `cancelled`), and leaves the task interrupted; resumed, it ends
/// verified.
#[test]
#[cfg(feature = "fault-injection")]
fn an_outage_mid_command_leaves_the_task_interrupted_and_it_resumes_to_verified() {
    const FAULT_SCRIPT: &str = r#"turns:
  - calls:
      - {tool: run_command, args: {command: "sleep 30; echo slept > slept.txt"}}
  - calls:
      - {tool: write_file, args: {path: done.txt, content: "done\n"}}
      - {tool: finish, args: {summary: done}}
"#;
    const FAULT_TASK: &str = r#"instruction: make done.txt
criteria:
  - id: done
    checks:
      - file_contains: done.txt
        text: done
limits: { max_steps: 6, max_verifications: 2, timeout_secs: 120 }
"#;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kill-outage");
    let project = setup(&dir);
    std::fs::write(dir.join("script.yaml"), FAULT_SCRIPT).unwrap();
    std::fs::write(dir.join("task.yaml"), FAULT_TASK).unwrap();
    let started = Instant::now();
    let out = run_cmd(&dir, &project)
        .env("LOOP_FAULT_RENEWALS_FAIL", "500..60000")
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Stopped within the lease's margin, long before the command's 30 s.
    assert!(started.elapsed() < Duration::from_secs(25), "{said}");
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("interrupted, not ended"), "{said}");
    assert!(!said.contains("\"cancelled\""), "{said}");
    let t = &tasks(&project)[0];
    let id = t["id"].as_str().unwrap().to_string();
    assert!(t["outcome"].is_null(), "no outcome was decided: {t}");
    // Nothing of the killed command reached the record.
    let logs = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["logs", &id, "--json", "--project"])
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    let logs = String::from_utf8_lossy(&logs.stdout).to_string();
    assert!(logs.contains("\"intent\""), "{logs}");
    assert!(!logs.contains("\"observed\""), "{logs}");
    assert!(!logs.contains("cancelled"), "{logs}");
    // Resumed once the store is back: it ends verified.
    let out = resume_cmd(&dir, &project, &id)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = &tasks(&project)[0];
    assert_eq!(t["outcome"], "verified", "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM (a shutdown, `docker stop`, a CI runner's timeout) is no
/// person's decision: the run stops, its command killed, and the task is
/// left interrupted, never cancelled (before, it ended `cancelled by
/// request` for good); `loop resume` takes it to its end, every effect
/// once. A person's Ctrl-C (SIGINT) still cancels it.
#[test]
fn sigterm_leaves_a_task_interrupted_and_ctrl_c_cancels_it() {
    for (signal, name) in [(libc::SIGTERM, "term"), (libc::SIGINT, "int")] {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kill-signal-{name}"));
        let project = setup(&dir);
        let echo = "echo c2 >> effects.log";
        std::fs::write(
            dir.join("script.yaml"),
            SCRIPT.replace(echo, &format!("{echo}; sleep 30")),
        )
        .unwrap();
        let child = run_cmd(&dir, &project).spawn().unwrap();
        // Signalled once the slow command has begun (its intent is kept).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let begun = tasks(&project)
                .first()
                .is_some_and(|t| t["entries"].as_u64().unwrap_or(0) >= 5);
            if begun || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name}: {said}"
        );
        let t = &tasks(&project)[0];
        let id = t["id"].as_str().unwrap().to_string();
        if signal == libc::SIGINT {
            assert_eq!(t["outcome"], "cancelled", "{name}: {t}");
            continue;
        }
        assert!(
            t["outcome"].is_null(),
            "SIGTERM decided an outcome: {t}\n{said}"
        );
        assert!(said.contains("interrupted, not ended"), "{said}");
        std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
        // Found as one whose runtime stopped (not as waiting for a worker):
        // `--resume-interrupted` takes it up.
        let out = loop_bin()
            .args(["run", "--resume-interrupted", "--json", "--project"])
            .arg(&project)
            .env("LOOP_STATE_DIR", dir.join("state"))
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_task(&dir, &project, &id, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A git project whose own build check takes `build` (the preparation
/// runs it for the baseline).
fn slow_to_prepare(name: &str, build: &str) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let project = setup(&dir);
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!("verification:\n  build: \"{build}\"\n"),
    )
    .unwrap();
    shared::commit_all(&project);
    (dir, project)
}

/// The first `loop/…` branch made in `project` (waited for).
fn first_branch(project: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Some(b) = task_branches(project).pop() {
            return b;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no branch made");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `loop/…` branches of `project`.
fn task_branches(project: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["branch", "--list", "loop/*", "--format=%(refname:short)"])
        .current_dir(project)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_preparation_killed_before_its_task_is_stored_is_cleaned_by_the_next_command() {
    let (dir, project) = slow_to_prepare("killed-preparing", "sleep 30");
    // Killed while its baseline runs the project's slow build: a branch
    // and a workspace, no task in the store.
    let mut child = run_cmd(&dir, &project).spawn().unwrap();
    let branch = first_branch(&project);
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let id = branch.strip_prefix("loop/").unwrap().to_string();
    assert!(tasks(&project).is_empty(), "the task was stored");
    let workspaces = dir.join("state-workspaces");
    let left = |id: &str| {
        std::fs::read_dir(&workspaces)
            .into_iter()
            .flatten()
            .flatten()
            .any(|p| p.path().join(id).exists())
    };
    assert!(left(&id), "nothing was left to clean");
    // `loop status` says what became of it.
    let out = loop_bin()
        .args(["status", &id, "--project"])
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("was being prepared when its process ended"),
        "{said}"
    );
    // The next task here removes it, and says so; then runs as ever.
    std::fs::write(
        project.join("Loopfile.yaml"),
        "verification:\n  build: \"true\"\n",
    )
    .unwrap();
    let out = run_cmd(&dir, &project)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "note: task {id} was being prepared when its process ended"
        )),
        "{said}"
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        !task_branches(&project).contains(&branch),
        "{branch} is left"
    );
    assert!(!left(&id), "its workspace is left");
    assert!(!project.join(".loop/tasks").join(&id).exists());
}

#[test]
fn a_preparation_still_running_is_never_taken_for_a_killed_one() {
    let (dir, project) = slow_to_prepare("live-preparing", "sleep 3");
    let child = run_cmd(&dir, &project)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let branch = first_branch(&project);
    // While it prepares: gc and discard leave it alone.
    let gc = loop_bin()
        .args(["gc", "--project"])
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    assert!(gc.status.success(), "{gc:?}");
    assert!(task_branches(&project).contains(&branch));
    let id = branch.strip_prefix("loop/").unwrap();
    let discard = loop_bin()
        .args(["discard", id, "--project"])
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&discard.stderr).contains("was being prepared"));
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(tasks(&project).len(), 1);
    assert_eq!(tasks(&project)[0]["outcome"], "verified");
}
