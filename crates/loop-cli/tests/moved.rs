//! Tasks that move between machines. Two "machines" are two clones of one
//! git repository (the second never saw the task's workspace, nor the
//! uncommitted file the task carried in) sharing one PostgreSQL store.
//! Each scripted task is SIGKILLed at random moments and resumed on the
//! other machine, or back on the first (whose workspace is then stale),
//! until it ends. For every task: it ends exactly once, verified, with one
//! unbroken ledger and a receipt that verifies; no command with an effect
//! ran twice; the final workspace is the one a never-killed run leaves;
//! and every rebuilt workspace's Merkle root is the one the store recorded
//! before the resume (read from the database by this test, not from the
//! runtime), which is also the root of the ledger's state at that point.
//!
//! Needs PostgreSQL (`LOOP_TEST_POSTGRES_URL`, scripts/services.sh);
//! skipped without it unless `LOOP_REQUIRE_SERVICES=1`. Seeds are printed;
//! `LOOP_KILL_SEED=N` replays one.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{Rng, database};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = r#"turns:
  - calls:
      - {tool: run_command, args: {command: "echo c1 >> effects.log; mkdir -p bin; printf '#!/bin/sh\necho hi\n' > bin/tool; chmod +x bin/tool"}}
      - {tool: write_file, args: {path: src/a.txt, content: "alpha\n"}}
  - calls:
      - {tool: run_command, args: {command: "echo c2 >> effects.log; rm old.txt; ln -s src/a.txt link"}}
      - {tool: edit_file, args: {path: src/a.txt, old: "alpha", new: "ALPHA"}}
  - calls:
      - {tool: apply_patch, args: {patch: "--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+beta\n"}}
      - {tool: run_command, args: {command: "echo c3 >> effects.log; cat notes.txt >> b.txt"}}
  - calls:
      - {tool: read_file, args: {path: b.txt}}
      - {tool: finish, args: {summary: done}}
"#;

const TASK: &str = r#"instruction: make src/a.txt say ALPHA and b.txt say beta, logging each command once
criteria:
  - id: files
    checks:
      - file_contains: src/a.txt
        text: ALPHA
      - file_contains: b.txt
        text: beta
      - run: test -x bin/tool && test -L link && test ! -e old.txt && grep -q carried b.txt
  - id: once
    checks:
      - run: test "$(cat effects.log)" = "$(printf 'c1\nc2\nc3')"
limits: { max_steps: 10, max_verifications: 4 }
"#;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// Two clones of one repository; the first has an uncommitted file the
/// task carries in (`--include-dirty`), the second does not have it.
fn machines(dir: &Path) -> [PathBuf; 2] {
    let _ = std::fs::remove_dir_all(dir);
    let a = dir.join("machine-a");
    std::fs::create_dir_all(&a).unwrap();
    git(&a, &["init", "-q", "-b", "main"]);
    std::fs::write(a.join("README.md"), "scratch\n").unwrap();
    std::fs::write(a.join("old.txt"), "to be removed\n").unwrap();
    // One project on two machines: its id is committed, so both clones
    // serve it (without it, each checkout is a project of its own).
    std::fs::write(
        a.join("Loopfile.yaml"),
        "version: 1\nproject:\n  id: moved-test-project\n",
    )
    .unwrap();
    git(&a, &["add", "."]);
    git(&a, &["commit", "-q", "-m", "start"]);
    let b = dir.join("machine-b");
    git(
        dir,
        &["clone", "-q", a.to_str().unwrap(), b.to_str().unwrap()],
    );
    std::fs::write(a.join("notes.txt"), "carried\n").unwrap();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(dir.join("task.yaml"), TASK).unwrap();
    [a, b]
}

fn loop_cmd(dir: &Path, db: &str, project: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .arg("--store")
        .arg(db)
        .current_dir(project)
        .env("LOOP_STATE_DIR", dir.join("state"));
    c
}

fn run_cmd(dir: &Path, db: &str, project: &Path) -> Command {
    let mut c = loop_cmd(dir, db, project);
    c.arg("run")
        .arg("--task")
        .arg(dir.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .args(["--include-dirty", "--json", "--project"])
        .arg(project);
    c
}

fn resume_cmd(dir: &Path, db: &str, project: &Path, id: &str) -> Command {
    let mut c = loop_cmd(dir, db, project);
    c.args(["resume", id, "--json", "--project"]).arg(project);
    c
}

/// Start `cmd` and SIGKILL it after `ms` if it still runs: its stdout,
/// and whether it was killed.
fn run_and_kill(mut cmd: Command, ms: u64) -> (String, bool) {
    let mut child = cmd.stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_millis(ms);
    let killed = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            break true;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let out = child.wait_with_output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), killed)
}

/// The store's view of task `id` (its state, and the workspace root it
/// records: the kept state's, else the baseline's), read from the
/// database itself.
fn recorded(db: &str, id: &str) -> Option<(String, String)> {
    let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
    let state: String = c
        .query_opt("SELECT state FROM tasks WHERE id = $1", &[&id])
        .unwrap()?
        .get(0);
    let mut file = |name: &str| -> Option<serde_json::Value> {
        let body: String = c
            .query_opt(
                "SELECT body FROM task_files WHERE task_id = $1 AND name = $2",
                &[&id, &name],
            )
            .unwrap()?
            .get(0);
        Some(serde_json::from_str(&body).unwrap())
    };
    let root = match file("tree") {
        Some(t) => t["delta"]["root"].as_str().unwrap().to_string(),
        None => file("baseline").unwrap()["root"]
            .as_str()
            .unwrap()
            .to_string(),
    };
    Some((state, root))
}

/// The workspace root the ledger's entries (in the store) leave the task
/// at: the last observation's, or the start's.
fn ledger_root(db: &str, id: &str) -> String {
    let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
    let rows = c
        .query(
            "SELECT kind, payload FROM entries WHERE task_id = $1 ORDER BY seq",
            &[&id],
        )
        .unwrap();
    let mut root = String::new();
    for r in rows {
        let kind: String = r.get(0);
        let payload: serde_json::Value = serde_json::from_str(r.get::<_, &str>(1)).unwrap();
        match kind.as_str() {
            "task_started" => root = payload["baseline_root"].as_str().unwrap().to_string(),
            "observed" => {
                if let Some(r) = payload["workspace_root"].as_str() {
                    root = r.to_string();
                }
            }
            _ => {}
        }
    }
    root
}

/// The root a run's output says it rebuilt the workspace to (made again
/// from the base, or a stale copy brought back), if it says so.
fn rebuilt_root(stdout: &str) -> Option<String> {
    let markers = [
        "workspace rebuilt on this machine from ",
        "brought back to the recorded state, root ",
    ];
    let line = stdout
        .lines()
        .find(|l| markers.iter().any(|m| l.contains(m)))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let note = v["notes"]
        .as_array()?
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| markers.iter().any(|m| n.contains(m)))?;
    let root = note.rsplit("root ").next()?.split(',').next()?;
    Some(root.trim().to_string())
}

fn workspace_files(ws: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = [
        "src/a.txt",
        "b.txt",
        "effects.log",
        "README.md",
        "notes.txt",
        "bin/tool",
    ]
    .iter()
    .map(|n| {
        (
            n.to_string(),
            std::fs::read_to_string(ws.join(n)).unwrap_or_default(),
        )
    })
    .collect();
    out.push((
        "link".into(),
        std::fs::read_link(ws.join("link"))
            .map(|l| l.display().to_string())
            .unwrap_or_default(),
    ));
    out.push((
        "old.txt exists".into(),
        ws.join("old.txt").exists().to_string(),
    ));
    out
}

/// Check one finished task in full, on the machine that finished it.
fn check_task(dir: &Path, project: &Path, id: &str, seed: u64) -> Vec<(String, String)> {
    shared::assert_one_verified_run(project, id, &[1, 2, 3, 4], seed, &dir.join("state"));
    let ws = shared::workspace_of(project, id);
    let log = std::fs::read_to_string(ws.join("effects.log")).unwrap_or_default();
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        vec!["c1", "c2", "c3"],
        "seed {seed}: every command's effect exactly once"
    );
    workspace_files(&ws)
}

/// The task id the store holds, if the run got as far as storing it.
fn stored_task(db: &str) -> Option<String> {
    let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
    // (A run killed before it made the store's tables stored nothing.)
    c.query_opt("SELECT id FROM tasks", &[])
        .ok()
        .flatten()
        .map(|r| r.get(0))
}

#[test]
fn a_task_killed_and_resumed_on_other_machines_rebuilds_its_workspace_to_the_recorded_root() {
    let Some(admin) = std::env::var("LOOP_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var("LOOP_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "LOOP_REQUIRE_SERVICES=1 but LOOP_TEST_POSTGRES_URL is not set"
        );
        eprintln!("PostgreSQL missing: skipped");
        return;
    };
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("moved");
    // The reference: a run never killed, on one machine.
    let ref_dir = root.join("reference");
    let [ref_a, _] = machines(&ref_dir);
    let ref_db = database(&admin, &format!("loop_moved_ref_{}", std::process::id()));
    let started = Instant::now();
    let out = run_cmd(&ref_dir, &ref_db.url, &ref_a).output().unwrap();
    let full_ms = started.elapsed().as_millis() as u64;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ref_id = stored_task(&ref_db.url).unwrap();
    let reference = check_task(&ref_dir, &ref_a, &ref_id, 0);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("workspace rebuilt"),
        "a task that never moved is never rebuilt"
    );
    eprintln!("a full run takes {full_ms} ms");

    let only: Option<u64> = std::env::var("LOOP_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let (mut kills, mut rebuilds, mut returns, mut tasks_done) = (0, 0, 0, 0);
    let mut seed = 1u64;
    // Kills land at random moments of a run whose length is measured once:
    // on a busy machine fewer of them catch a task mid-move, so the seeds go
    // on (each a third of a second) until enough rebuilds were seen.
    while (tasks_done < 8 || rebuilds < 12 || returns < 2) && seed < 160 || only.is_some() {
        let this = only.unwrap_or(seed);
        seed += 1;
        eprintln!("seed {this}");
        let mut rng = Rng(this.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let dir = root.join(format!("seed-{this}"));
        let projects = machines(&dir);
        let db = database(&admin, &format!("loop_moved_{}_{this}", std::process::id()));
        let (_, killed) = run_and_kill(
            run_cmd(&dir, &db.url, &projects[0]),
            rng.below(full_ms + 50),
        );
        kills += killed as u32;
        let Some(id) = stored_task(&db.url) else {
            assert!(killed, "seed {this}: a run that ended stored no task");
            continue;
        };
        let mut on = 0usize;
        let mut visited = [true, false];
        let mut rounds = 0;
        loop {
            let Some((state, want)) = recorded(&db.url, &id) else {
                panic!("seed {this}: the task left the store");
            };
            if state == "terminal" {
                break;
            }
            rounds += 1;
            assert!(rounds < 30, "seed {this}: the task never ends");
            // Mostly to the other machine; sometimes the same one again.
            if rng.below(8) != 0 {
                on = 1 - on;
            }
            let returning = visited[on] && rounds > 1;
            visited[on] = true;
            let project = &projects[on];
            let cmd = resume_cmd(&dir, &db.url, project, &id);
            let (stdout, killed) = if rng.below(2) == 0 {
                run_and_kill(cmd, 100 + rng.below(full_ms))
            } else {
                let out = { cmd }.output().unwrap();
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "seed {this}: resume on machine {on} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                (String::from_utf8_lossy(&out.stdout).into_owned(), false)
            };
            kills += killed as u32;
            if let Some(got) = rebuilt_root(&stdout) {
                assert_eq!(
                    got, want,
                    "seed {this}: the rebuilt workspace's root is not the recorded one"
                );
                rebuilds += 1;
                returns += returning as u32;
            }
        }
        // The recorded state and the ledger agree at the end.
        let (_, end_root) = recorded(&db.url, &id).unwrap();
        assert_eq!(end_root, ledger_root(&db.url, &id), "seed {this}");
        let finisher = (0..2)
            .find(|m| {
                projects[*m]
                    .join(format!(".loop/receipts/{id}.receipt.json"))
                    .exists()
            })
            .unwrap();
        let files = check_task(&dir, &projects[finisher], &id, this);
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
    eprintln!(
        "{kills} kills, {rebuilds} rebuilt workspaces ({returns} on a machine the task had left) over {tasks_done} tasks"
    );
    assert!(only.is_some() || (rebuilds >= 12 && tasks_done >= 8));
}

/// How many observations with a workspace root the store holds for `id`.
fn observed_roots(db: &str, id: &str) -> usize {
    let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM entries WHERE task_id = $1 AND kind = 'observed'
             AND payload::jsonb ->> 'workspace_root' IS NOT NULL",
            &[&id],
        )
        .unwrap()
        .get(0);
    n as usize
}

/// Start `cmd`; SIGKILL it once the store holds `n` observations with a
/// root for `id` (or let it end). Whether it was killed.
fn kill_after_observations(mut cmd: Command, db: &str, id: Option<&str>, n: usize) -> bool {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        let id = id.map(str::to_string).or_else(|| stored_task(db));
        if id.is_some_and(|id| observed_roots(db, &id) >= n) {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A task that goes from machine A to B and back to A: A's copy is stale
/// (B moved the task on), so A brings it back to the recorded state before
/// going on, measured by this test with `loop manifest` at the end too.
#[test]
fn a_task_that_comes_back_to_a_machine_brings_its_stale_copy_to_the_record() {
    let Some(admin) = std::env::var("LOOP_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var("LOOP_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "LOOP_REQUIRE_SERVICES=1 but LOOP_TEST_POSTGRES_URL is not set"
        );
        return;
    };
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("moved-back");
    let ref_dir = root.join("reference");
    let [ref_a, _] = machines(&ref_dir);
    let ref_db = database(&admin, &format!("loop_back_ref_{}", std::process::id()));
    let out = run_cmd(&ref_dir, &ref_db.url, &ref_a).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = check_task(&ref_dir, &ref_a, &stored_task(&ref_db.url).unwrap(), 0);

    let dir = root.join("ping-pong");
    let [a, b] = machines(&dir);
    // Slow commands, so each machine is stopped where the test wants it.
    std::fs::write(
        dir.join("script.yaml"),
        SCRIPT.replace("echo c", "sleep 1; echo c"),
    )
    .unwrap();
    let db = database(&admin, &format!("loop_back_{}", std::process::id()));
    assert!(kill_after_observations(
        run_cmd(&dir, &db.url, &a),
        &db.url,
        None,
        1
    ));
    let id = stored_task(&db.url).unwrap();
    assert!(kill_after_observations(
        resume_cmd(&dir, &db.url, &b, &id),
        &db.url,
        Some(&id),
        3
    ));
    // Back on A, whose copy has only the first step.
    let (_, want) = recorded(&db.url, &id).unwrap();
    let out = resume_cmd(&dir, &db.url, &a, &id).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("brought back to the recorded state"),
        "{stdout}"
    );
    assert_eq!(rebuilt_root(&stdout).as_deref(), Some(want.as_str()));
    let files = check_task(&dir, &a, &id, 0);
    assert_eq!(
        files, reference,
        "the workspace differs from a never-killed run"
    );
    // The final workspace, hashed by this test's own command, is the one the
    // store and the ledger record.
    let ws = shared::workspace_of(&a, &id);
    let m = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["manifest", "--json"])
        .arg(&ws)
        .output()
        .unwrap();
    let m: serde_json::Value = serde_json::from_slice(&m.stdout).unwrap();
    let (_, end_root) = recorded(&db.url, &id).unwrap();
    assert_eq!(m["root"].as_str(), Some(end_root.as_str()), "{m}");
    assert_eq!(end_root, ledger_root(&db.url, &id));
}

/// How many rows the store keeps of task `id`'s workspace (its files and
/// contents, its carried-in ones too).
fn kept_rows(db: &str, id: &str) -> i64 {
    let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
    let start = format!("{id}/start");
    let n = |table: &str, c: &mut postgres::Client| -> i64 {
        c.query_one(
            &format!("SELECT COUNT(*) FROM {table} WHERE task_id IN ($1, $2)"),
            &[&id, &start],
        )
        .unwrap()
        .get(0)
    };
    n("blobs", &mut c) + n("task_files", &mut c)
}

/// What the store keeps of a task's workspace (to rebuild it on another
/// machine) is dropped once its change set is applied, or its workspace
/// discarded; with `workspace.kept_days` it is kept that long, then
/// dropped by the next apply or discard.
#[test]
fn kept_workspace_contents_are_dropped_on_apply_and_discard_unless_kept_days_keeps_them() {
    let Some(admin) = std::env::var("LOOP_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var("LOOP_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "LOOP_REQUIRE_SERVICES=1 but LOOP_TEST_POSTGRES_URL is not set"
        );
        eprintln!("PostgreSQL missing: skipped");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("moved-release");
    let [a, _] = machines(&dir);
    let db = database(&admin, &format!("loop_release_{}", std::process::id()));
    let run = |dir: &Path| -> String {
        let out = run_cmd(dir, &db.url, &a).output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(out.status.code(), Some(0), "{said}");
        let id = stored_ids(&db.url).pop().unwrap();
        assert!(kept_rows(&db.url, &id) > 2, "nothing kept of {id}");
        id
    };
    let cmd = |args: &[&str]| -> String {
        let out = loop_cmd(&dir, &db.url, &a)
            .args(args)
            .arg("--project")
            .arg(&a)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {said}");
        said
    };
    // Three tasks from the same start (the first one's apply changes it).
    let [first, second, third] = [run(&dir), run(&dir), run(&dir)];
    // Applied: dropped at once, and said.
    let said = cmd(&["apply", &first, "--yes"]);
    assert!(
        said.contains(&format!(
            "dropped the store's copy of task {first}'s workspace"
        )),
        "{said}"
    );
    assert_eq!(kept_rows(&db.url, &first), 0);
    // Kept two days: a discard marks it and keeps it.
    std::fs::write(
        a.join("Loopfile.yaml"),
        "version: 1\nproject:\n  id: moved-test-project\nworkspace:\n  kept_days: 2\n",
    )
    .unwrap();
    let before = kept_rows(&db.url, &second);
    let said = cmd(&["discard", &second]);
    assert!(!said.contains("dropped the store's copy"), "{said}");
    assert_eq!(kept_rows(&db.url, &second), before + 1, "kept, and marked");
    // Three days later (the mark moved back), the next discard drops it.
    let mut c = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let three_days_ago = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 3 * 24 * 3600 * 1000)
        .to_string();
    c.execute(
        "UPDATE task_files SET body = $2 WHERE task_id = $1 AND name = 'released'",
        &[&second, &three_days_ago],
    )
    .unwrap();
    let said = cmd(&["discard", &third]);
    assert!(
        said.contains(&format!(
            "dropped the store's copy of task {second}'s workspace"
        )),
        "{said}"
    );
    assert_eq!(kept_rows(&db.url, &second), 0);
    assert!(
        kept_rows(&db.url, &third) > 2,
        "the third is kept its two days"
    );
}

/// Every task id the store holds, oldest first.
fn stored_ids(db: &str) -> Vec<String> {
    let mut c = postgres::Client::connect(db, postgres::NoTls).unwrap();
    c.query("SELECT id FROM tasks ORDER BY created_ms, id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}
