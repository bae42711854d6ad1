//! Exec policy and human approvals through the binary: `forbidden` is
//! refused, `prompt` pauses the task in `awaiting_approval` until
//! `loop approve` (or `--deny`), a pending approval survives a restart of
//! the runtime, and one nobody answers expires to a deny. Nothing is ever
//! approved by default.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LOOPFILE: &str = "exec:
  approval_timeout_secs: TIMEOUT
  rules:
    - prefix: touch
      decision: prompt
      examples: [\"touch a.txt\"]
    - prefix: rm
      decision: forbidden
      examples: [\"rm -rf /\"]
      not_examples: [\"rmdir x\"]
";

const SCRIPT: &str = "turns:
  - calls:
      - {tool: run_command, args: {command: \"rm -f README.md\"}}
      - {tool: run_command, args: {command: \"echo ok > ran.txt && touch approved.txt\"}}
      - {tool: finish, args: {summary: done}}
";

fn setup(name: &str, timeout_secs: u64) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gov-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "keep me\n").unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        LOOPFILE.replace("TIMEOUT", &timeout_secs.to_string()),
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
    (dir, project)
}

fn loop_cmd(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.env("LOOP_STATE_DIR", dir.join("state"))
        .stdin(Stdio::null());
    c
}

fn start_run(dir: &Path, project: &Path) -> Child {
    loop_cmd(dir)
        .args([
            "run",
            "make approved.txt",
            "--check",
            "test -f approved.txt",
            "--on-prompt",
            "wait",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn first_task(dir: &Path, project: &Path) -> serde_json::Value {
    let out = loop_cmd(dir)
        .args(["list", "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("null"),
    )
    .unwrap()
}

/// Wait until the task is waiting for a person's approval.
fn await_approval(dir: &Path, project: &Path) -> String {
    await_state(dir, project, "awaiting_approval")
}

fn approve(dir: &Path, project: &Path, id: &str, deny: bool) -> Output {
    approve_saying(dir, project, id, deny, None)
}

fn approve_saying(
    dir: &Path,
    project: &Path,
    id: &str,
    deny: bool,
    message: Option<&str>,
) -> Output {
    let mut c = loop_cmd(dir);
    c.args(["approve", id, "--project"]).arg(project);
    if deny {
        c.arg("--deny");
    }
    if let Some(m) = message {
        c.args(["--message", m]);
    }
    c.output().unwrap()
}

fn events(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Where the runtime made task `id`'s workspace (its record says).
fn workspace(project: &Path, id: &str) -> PathBuf {
    let record = project.join(format!(".loop/tasks/{id}/workspace.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    PathBuf::from(v["path"].as_str().unwrap())
}

#[test]
fn an_approved_command_runs_and_a_forbidden_one_never_does() {
    let (dir, project) = setup("approve", 60);
    let child = start_run(&dir, &project);
    let id = await_approval(&dir, &project);
    // Nothing ran while it waited.
    assert!(!workspace(&project, &id).join("ran.txt").exists());
    // What the person says with the answer reaches the model, not the void.
    let out = approve_saying(&dir, &project, &id, false, Some("then stop touching files"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ev = events(&out);
    let refused = ev
        .iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["call_id"] == "t1-c1")
        .unwrap();
    assert_eq!(
        refused["observation"]["rule"], "exec policy: forbidden (rm)",
        "{refused}"
    );
    assert!(
        workspace(&project, &id).join("README.md").exists(),
        "the forbidden rm did not run"
    );
    let asked = ev
        .iter()
        .find(|e| e["kind"] == "approval_requested")
        .unwrap();
    assert_eq!(asked["rule"], "touch");
    assert_eq!(asked["detail"], "echo ok > ran.txt && touch approved.txt");
    let decided = ev.iter().find(|e| e["kind"] == "approval_decided").unwrap();
    assert_eq!(decided["decision"], "approved");
    assert_eq!(decided["message"], "then stop touching files", "{decided}");
    let ran = ev
        .iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["call_id"] == "t1-c2")
        .unwrap();
    assert!(
        ran["observation"]["content"]
            .as_str()
            .unwrap()
            .ends_with("(a person approved this call and says: then stop touching files)"),
        "{ran}"
    );
    assert!(workspace(&project, &id).join("ran.txt").exists());
}

#[test]
fn a_denied_command_is_refused_and_the_task_goes_on_without_it() {
    let (dir, project) = setup("deny", 60);
    let child = start_run(&dir, &project);
    let id = await_approval(&dir, &project);
    assert!(
        approve_saying(&dir, &project, &id, true, Some("no network tools"))
            .status
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "unverified: the file was never made"
    );
    let ev = events(&out);
    let obs = ev
        .iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["call_id"] == "t1-c2")
        .unwrap();
    assert_eq!(obs["observation"]["rule"], "approval: denied", "{obs}");
    assert!(
        obs["observation"]["content"]
            .as_str()
            .unwrap()
            .ends_with("it was not run; the person says: no network tools"),
        "{obs}"
    );
    assert!(
        !workspace(&project, &id).join("ran.txt").exists(),
        "a denied command never runs"
    );
    // Nothing left to approve.
    let again = approve(&dir, &project, &id, false);
    assert_eq!(again.status.code(), Some(2));
}

#[test]
fn an_unanswered_approval_expires_to_a_deny() {
    let (dir, project) = setup("timeout", 1);
    let child = start_run(&dir, &project);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let ev = events(&out);
    let decided = ev.iter().find(|e| e["kind"] == "approval_decided").unwrap();
    assert_eq!(decided["decision"], "expired");
    let id = first_task(&dir, &project)["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !workspace(&project, &id).join("ran.txt").exists(),
        "never approved by default"
    );
}

#[test]
fn a_pending_approval_survives_a_restart_of_the_runtime() {
    let (dir, project) = setup("restart", 600);
    let mut child = start_run(&dir, &project);
    let id = await_approval(&dir, &project);
    // The runtime dies while waiting.
    child.kill().unwrap();
    child.wait().unwrap();
    let status = loop_cmd(&dir)
        .args(["status", &id, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["state"], "awaiting_approval");
    assert_eq!(status["interrupted"], true);
    assert_eq!(status["approvals"][0]["status"], "pending");
    // A person approves while nothing runs; resuming picks the answer up.
    assert!(approve(&dir, &project, &id, false).status.success());
    let out = loop_cmd(&dir)
        .args(["resume", &id, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(workspace(&project, &id).join("ran.txt").exists());
    // One request, one decision, in one chain that verifies.
    let ledger =
        std::fs::read_to_string(project.join(format!(".loop/receipts/{id}.ledger.jsonl"))).unwrap();
    assert_eq!(ledger.matches("\"kind\":\"approval_requested\"").count(), 1);
    assert_eq!(ledger.matches("\"kind\":\"approval_decided\"").count(), 1);
    let v = loop_cmd(&dir)
        .arg("verify")
        .arg(project.join(format!(".loop/receipts/{id}.receipt.json")))
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
}

#[test]
fn rule_examples_are_checked_when_the_loopfile_loads() {
    let (dir, project) = setup("examples", 60);
    std::fs::write(
        project.join("Loopfile.yaml"),
        "exec:\n  rules:\n    - prefix: git push\n      decision: forbidden\n      examples: [\"git pull\"]\n",
    )
    .unwrap();
    let child = start_run(&dir, &project);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Loopfile.yaml:3:7: rule 1 (`git push`): example `git pull` does not match it"
        ),
        "{err}"
    );
    assert!(first_task(&dir, &project).is_null(), "nothing was started");
}

/// Each limit stops the task cleanly; `loop resume ID --add-…` grants more
/// and it goes on from where it stopped, as new entries of the same chain,
/// to a verified end whose receipt verifies.
#[test]
fn a_task_stopped_by_any_limit_goes_on_when_given_more() {
    let work = "turns:
  - calls: [{tool: run_command, args: {command: 'echo one > one.txt; sleep SLEEP'}}]
    usage: {input_tokens: 600, output_tokens: 100, cost_usd: 0.006}
  - calls: [{tool: write_file, args: {path: approved.txt, content: yes}}]
    usage: {input_tokens: 600, output_tokens: 100, cost_usd: 0.006}
  - calls: [{tool: finish, args: {summary: done}}]
    usage: {input_tokens: 600, output_tokens: 100, cost_usd: 0.006}
";
    let cases: [(&str, &[&str], &str, &[&str]); 4] = [
        ("steps", &["--max-steps", "1"], "0", &["--add-steps", "5"]),
        (
            "tokens",
            &["--max-tokens", "1200"],
            "0",
            &["--add-tokens", "100000"],
        ),
        ("cost", &["--budget-usd", "0.01"], "0", &["--add-usd", "1"]),
        ("time", &["--timeout", "1"], "1.5", &["--add-secs", "60"]),
    ];
    for (kind, limit, sleep, more) in cases {
        let (dir, project) = setup(&format!("limit-{kind}"), 60);
        std::fs::remove_file(project.join("Loopfile.yaml")).unwrap();
        std::fs::write(dir.join("script.yaml"), work.replace("SLEEP", sleep)).unwrap();
        let out = loop_cmd(&dir)
            .args([
                "run",
                "make approved.txt",
                "--check",
                "test -f approved.txt",
                "--json",
                "--model",
            ])
            .arg(format!("scripted:{}", dir.join("script.yaml").display()))
            .args(limit)
            .arg("--project")
            .arg(&project)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let t = first_task(&dir, &project);
        assert_eq!(
            t["outcome"],
            format!("limit_reached{{{kind}}}"),
            "{kind}: {t}"
        );
        let id = t["id"].as_str().unwrap().to_string();
        // Resuming without more is refused; a task that did not stop at a limit cannot be extended.
        let plain = loop_cmd(&dir)
            .args(["resume", &id, "--project"])
            .arg(&project)
            .output()
            .unwrap();
        assert_eq!(plain.status.code(), Some(2), "{kind}");
        let out = loop_cmd(&dir)
            .args(["resume", &id, "--json", "--project"])
            .arg(&project)
            .args(more)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{kind}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ledger =
            std::fs::read_to_string(project.join(format!(".loop/receipts/{id}.ledger.jsonl")))
                .unwrap();
        assert_eq!(
            ledger.matches("\"kind\":\"budget_extended\"").count(),
            1,
            "{kind}"
        );
        assert_eq!(
            ledger.matches("\"kind\":\"finished\"").count(),
            2,
            "{kind}: the first end stays on record"
        );
        assert_eq!(
            ledger.matches("\"kind\":\"task_started\"").count(),
            1,
            "{kind}"
        );
        let receipt = project.join(format!(".loop/receipts/{id}.receipt.json"));
        let v = loop_cmd(&dir)
            .args(["verify", "--integrity-only"])
            .arg(&receipt)
            .output()
            .unwrap();
        assert_eq!(
            v.status.code(),
            Some(0),
            "{kind}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
        assert_eq!(first_task(&dir, &project)["outcome"], "verified", "{kind}");
        // The work before the limit was not redone.
        let ws = workspace(&project, &id);
        assert_eq!(
            std::fs::read_to_string(ws.join("one.txt")).unwrap(),
            "one\n",
            "{kind}"
        );
        // A verified task cannot be extended.
        let again = loop_cmd(&dir)
            .args(["resume", &id, "--add-steps", "1", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        assert_eq!(again.status.code(), Some(2), "{kind}");
        assert!(
            String::from_utf8_lossy(&again.stderr).contains("only a task that reached a limit"),
            "{kind}"
        );
    }
}

/// Run `script` in a project with `loopfile`; the events.
fn run_gated(
    name: &str,
    loopfile: &str,
    script: &str,
    env: &[(&str, &str)],
) -> (Vec<serde_json::Value>, PathBuf, String) {
    let (dir, project) = setup(name, 60);
    std::fs::write(project.join("Loopfile.yaml"), loopfile).unwrap();
    std::fs::write(project.join("app.py"), "x = 1\n").unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    let mut c = loop_cmd(&dir);
    c.args([
        "run",
        "edit the app",
        "--check",
        "true",
        "--allow-vacuous",
        "--json",
        "--max-steps",
        "8",
        "--model",
    ])
    .arg(format!("scripted:{}", dir.join("script.yaml").display()))
    .arg("--project")
    .arg(&project);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let id = first_task(&dir, &project)["id"]
        .as_str()
        .unwrap()
        .to_string();
    let ws = workspace(&project, &id);
    (
        events(&out),
        ws,
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn refusal(events: &[serde_json::Value], call: &str) -> (String, String) {
    let o = events
        .iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["call_id"] == call)
        .unwrap_or_else(|| panic!("no observation for {call}"));
    (
        o["observation"]["rule"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        o["observation"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[test]
fn the_syntax_and_code_policy_gates_refuse_changes_before_they_enter() {
    let loopfile = "rules:\n  python:\n    banned_imports: [subprocess]\n    banned_attributes: [__globals__]\n";
    let script = "turns:
  - calls:
      - {tool: write_file, args: {path: app.py, content: \"def f(:\\n    return 1\\n\"}}
      - {tool: edit_file, args: {path: app.py, old: \"x = 1\", new: \"import subprocess\\nx = 1\"}}
      - {tool: apply_patch, args: {patch: \"--- a/app.py\\n+++ b/app.py\\n@@ -1 +1,2 @@\\n x = 1\\n+g = (lambda: 0).__globals__\\n\"}}
      - {tool: write_file, args: {path: conf.json, content: \"{\\\"a\\\": [1, 2}\"}}
      - {tool: write_file, args: {path: ok.py, content: \"import json\\nprint(json.dumps(1))\\n\"}}
";
    let (ev, ws, out) = run_gated("gates", loopfile, script, &[]);
    // The story says where, too, not only the ledger.
    let (dir, project) = (
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gov-gates"),
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gov-gates/project"),
    );
    let logs = loop_cmd(&dir)
        .args(["logs", "last", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let story = String::from_utf8_lossy(&logs.stdout).to_string();
    assert!(
        story.contains("⛔ refused by gate: syntax at app.py:1:"),
        "{story}"
    );
    let (rule, text) = refusal(&ev, "t1-c1");
    assert_eq!(rule, "gate: syntax", "{out}");
    assert!(text.contains("app.py:1:"), "{text}");
    assert!(text.contains("Python syntax error"), "{text}");
    let (rule, text) = refusal(&ev, "t1-c2");
    assert_eq!(rule, "gate: code policy (banned import `subprocess`)");
    assert!(text.contains("app.py:1:8:"), "{text}");
    let (rule, text) = refusal(&ev, "t1-c3");
    assert_eq!(rule, "gate: code policy (banned attribute `__globals__`)");
    assert!(text.contains("app.py:2:17:"), "{text}");
    let (rule, text) = refusal(&ev, "t1-c4");
    assert_eq!(rule, "gate: syntax");
    assert!(
        text.contains("conf.json:1:") && text.contains("JSON syntax error"),
        "{text}"
    );
    // None of the refused changes entered; the clean one did.
    assert_eq!(
        std::fs::read_to_string(ws.join("app.py")).unwrap(),
        "x = 1\n"
    );
    assert!(!ws.join("conf.json").exists());
    assert!(ws.join("ok.py").exists());
}

#[test]
#[cfg(feature = "fault-injection")]
fn a_gate_that_fails_internally_refuses_rather_than_waving_through() {
    let script = "turns:\n  - calls:\n      - {tool: write_file, args: {path: ok.py, content: \"print(1)\\n\"}}\n";
    let (ev, ws, out) = run_gated(
        "gate-fault",
        "version: 1\n",
        script,
        &[("LOOP_GATES_FAULT", "parse")],
    );
    let (rule, text) = refusal(&ev, "t1-c1");
    assert_eq!(rule, "gate: syntax (internal error)", "{out}");
    assert!(text.contains("injected fault"), "{text}");
    assert!(
        !ws.join("ok.py").exists(),
        "a failing gate never fails open"
    );
}

#[test]
fn stall_thresholds_come_from_the_loopfile() {
    let turn = "  - calls: [{tool: run_command, args: {command: 'exit 3'}}]\n";
    let script = format!("turns:\n{}", turn.repeat(8));
    let (ev, _ws, out) = run_gated("progress", "progress:\n  repeat_failing: 2\n", &script, &[]);
    let finished = ev.iter().find(|e| e["kind"] == "finished").unwrap();
    assert_eq!(finished["outcome"]["kind"], "lost", "{out}");
    assert!(
        finished["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("failed 2 times"),
        "{out}"
    );
    // Nudged after 2, stopped after 2 more.
    assert_eq!(finished["used"]["steps"], 4, "{out}");
    let (dir, project) = setup("progress-bad", 60);
    std::fs::write(
        project.join("Loopfile.yaml"),
        "progress:\n  repeat_failing: 1\n",
    )
    .unwrap();
    let out = start_run(&dir, &project).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Loopfile.yaml:2:19: `repeat_failing` is a number of steps from 2 to 1000")
    );
}

const REPAIRS: &str = "turns:
  - calls: [{tool: write_file, args: {path: approved.txt.tmp, content: no}}, {tool: finish, args: {summary: try 1}}]
  - calls: [{tool: write_file, args: {path: approved.txt.tmp, content: nope}}, {tool: finish, args: {summary: try 2}}]
  - calls: [{tool: write_file, args: {path: approved.txt, content: yes}}, {tool: finish, args: {summary: try 3}}]
";

fn start_repairs(name: &str, checkpoints: &str) -> (PathBuf, PathBuf, Child) {
    let (dir, project) = setup(name, 60);
    std::fs::write(project.join("Loopfile.yaml"), checkpoints).unwrap();
    std::fs::write(dir.join("script.yaml"), REPAIRS).unwrap();
    let child = start_run(&dir, &project);
    (dir, project, child)
}

fn await_state(dir: &Path, project: &Path, state: &str) -> String {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never reached {state}"
        );
        let t = first_task(dir, project);
        if t["state"] == state {
            return t["id"].as_str().unwrap().to_string();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn after_failed_repairs_a_person_is_asked_and_their_guidance_reaches_the_model() {
    let (dir, project, child) =
        start_repairs("checkpoint-go", "checkpoints:\n  after_failed_repairs: 2\n");
    let id = await_state(&dir, &project, "awaiting_input");
    let out = loop_cmd(&dir)
        .args([
            "approve",
            &id,
            "--message",
            "write approved.txt, not a .tmp file",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ev = events(&out);
    let asked = ev
        .iter()
        .find(|e| e["kind"] == "checkpoint_requested")
        .unwrap();
    assert!(
        asked["reason"]
            .as_str()
            .unwrap()
            .starts_with("verification rejected 2 time(s)"),
        "{asked}"
    );
    let decided = ev
        .iter()
        .find(|e| e["kind"] == "checkpoint_decided")
        .unwrap();
    assert_eq!(decided["decision"], "approved");
    assert!(ev.iter().any(
        |e| e["kind"] == "feedback" && e["text"].as_str().unwrap().contains("not a .tmp file")
    ));
}

#[test]
fn a_checkpoint_denied_or_unanswered_stops_the_task() {
    let (dir, project, child) = start_repairs(
        "checkpoint-deny",
        "checkpoints:\n  after_failed_repairs: 1\n",
    );
    let id = await_state(&dir, &project, "awaiting_input");
    assert!(
        loop_cmd(&dir)
            .args(["approve", &id, "--deny", "--project"])
            .arg(&project)
            .output()
            .unwrap()
            .status
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let t = first_task(&dir, &project);
    assert_eq!(t["outcome"], "cancelled");
    assert!(
        t["reason"]
            .as_str()
            .unwrap()
            .contains("stopped by a person at a checkpoint"),
        "{t}"
    );

    // Nobody answers: stopped, never continued unasked.
    let (dir, project, child) = start_repairs(
        "checkpoint-timeout",
        "checkpoints:\n  after_failed_repairs: 1\n  timeout_secs: 1\n",
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let t = first_task(&dir, &project);
    assert_eq!(t["outcome"], "cancelled");
    assert!(
        t["reason"]
            .as_str()
            .unwrap()
            .contains("nobody answered the checkpoint"),
        "{t}"
    );
    let ev = events(&out);
    assert_eq!(
        ev.iter().filter(|e| e["kind"] == "model_turn").count(),
        1,
        "no turn after the unanswered checkpoint"
    );
}

#[test]
fn shell_forms_that_waved_rm_past_the_policy_are_all_refused() {
    // Each of these ran `rm` although the Loopfile forbids it, when the
    // policy read lines with a hand-written splitter.
    let (dir, project) = setup("bypass", 600);
    let forms = [
        "{ rm README.md; }",
        "if true; then rm README.md; fi",
        "! rm README.md",
        "timeout 5 rm README.md",
        "sh -c 'rm README.md'",
        "eval rm README.md",
        "echo README.md | xargs rm",
        "r=rm; $r README.md",
    ];
    let mut script = String::from("turns:\n  - calls:\n");
    for f in forms {
        script.push_str(&format!(
            "      - {{tool: run_command, args: {{command: {}}}}}\n",
            serde_json::to_string(f).unwrap()
        ));
    }
    script.push_str("      - {tool: finish, args: {summary: done}}\n");
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    let out = loop_cmd(&dir)
        .args([
            "run",
            "keep the readme",
            "--check",
            "test -f README.md",
            "--allow-vacuous",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let refused: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "observed" && e["observation"]["status"] == "refused")
        .collect();
    assert_eq!(refused.len(), forms.len(), "every form refused: {stdout}");
    for r in &refused {
        let rule = r["observation"]["rule"].as_str().unwrap();
        assert!(rule.contains("rm") || rule.contains("unreadable"), "{rule}");
    }
    let id = first_task(&dir, &project)["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        workspace(&project, &id).join("README.md").exists(),
        "the file survived every form"
    );
}

/// `loop run` of the approval scene, headless, with `extra` flags; its events.
fn run_headless(
    name: &str,
    extra: &[&str],
) -> (Vec<serde_json::Value>, PathBuf, PathBuf, Duration) {
    let (dir, project) = setup(name, 600);
    let started = Instant::now();
    let out = loop_cmd(&dir)
        .args([
            "run",
            "make approved.txt",
            "--check",
            "test -f approved.txt",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .args(extra)
        .output()
        .unwrap();
    (events(&out), dir, project, started.elapsed())
}

fn decided(events: &[serde_json::Value]) -> &serde_json::Value {
    events
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .expect("an approval was decided")
}

#[test]
fn without_a_terminal_a_question_is_denied_at_once_and_the_ledger_says_by_whom() {
    // No terminal and no --on-prompt: nobody can answer, so it is a deny,
    // now, not a run that hangs until the approval timeout (600 s here).
    let (ev, _dir, project, took) = run_headless("headless-deny", &[]);
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let d = decided(&ev);
    assert_eq!(d["decision"], "denied", "{d}");
    assert_eq!(d["by"], "--on-prompt deny (no terminal to ask)", "{d}");
    let id = first_task(&_dir, &project)["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!workspace(&project, &id).join("approved.txt").exists());
    // --on-prompt allow, and --yes, answer yes, and say which did.
    for (flag, by) in [
        (&["--on-prompt", "allow"][..], "--on-prompt allow"),
        (&["--yes"][..], "--yes"),
    ] {
        let (ev, dir, project, _) = run_headless(&format!("headless-allow-{}", flag.len()), flag);
        let d = decided(&ev);
        assert_eq!(d["decision"], "approved", "{flag:?}: {d}");
        assert_eq!(d["by"], by, "{flag:?}: {d}");
        let id = first_task(&dir, &project)["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            workspace(&project, &id).join("approved.txt").exists(),
            "{flag:?}"
        );
    }
}

#[test]
fn on_a_terminal_the_question_is_asked_inline_and_answered_there() {
    if Command::new("tmux").arg("-V").output().is_err() {
        panic!("tmux is needed for the terminal test (scripts/test.sh installs it)");
    }
    let (dir, project) = setup("inline", 600);
    let session = format!("loop-inline-{}", std::process::id());
    let sock = dir.join("tmux.sock");
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(&sock)
            .args(args)
            .output()
            .unwrap()
    };
    let cmd = format!(
        "LOOP_STATE_DIR={} {} run 'make approved.txt' --check 'test -f approved.txt' --model scripted:{} --project {} ; echo EXITED $?; sleep 30",
        dir.join("state").display(),
        env!("CARGO_BIN_EXE_loop"),
        dir.join("script.yaml").display(),
        project.display()
    );
    assert!(
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "200",
            "-y",
            "50",
            &cmd
        ])
        .status
        .success()
    );
    let screen = |tmux: &dyn Fn(&[&str]) -> Output| {
        String::from_utf8_lossy(
            &tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", &session]).stdout,
        )
        .to_string()
    };
    let wait_for = |what: &str| {
        let start = Instant::now();
        loop {
            let s = screen(&tmux);
            if s.contains(what) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never saw {what:?}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let asked = wait_for("[y]es / [n]o / [a]lways");
    assert!(asked.contains("touch approved.txt"), "{asked}");
    assert!(asked.contains("rule `touch`"), "{asked}");
    tmux(&["send-keys", "-t", &session, "y", "Enter"]);
    let end = wait_for("EXITED");
    let _ = tmux(&["kill-server"]);
    assert!(
        end.contains("approval: approved (by the terminal)"),
        "{end}"
    );
    assert!(end.contains("EXITED 0"), "{end}");
    let id = first_task(&dir, &project)["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(workspace(&project, &id).join("approved.txt").exists());
}

/// `loop run … --timeout 5` whose command needs an approval answered
/// after 6.5 s: the outcome and the events.
fn answer_late(name: &str, loopfile_extra: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let (dir, project) = setup(name, 60);
    let lf = project.join("Loopfile.yaml");
    let text = std::fs::read_to_string(&lf).unwrap();
    std::fs::write(&lf, format!("{text}{loopfile_extra}")).unwrap();
    let child = loop_cmd(&dir)
        .args([
            "run",
            "make approved.txt",
            "--check",
            "test -f approved.txt",
            "--on-prompt",
            "wait",
            "--timeout",
            "5",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = await_approval(&dir, &project);
    std::thread::sleep(Duration::from_millis(6500));
    // Late: without pause_clock the task may have ended already.
    let _ = approve(&dir, &project, &id, false);
    let out = child.wait_with_output().unwrap();
    let ev = events(&out);
    let last = ev.last().cloned().unwrap();
    (last, ev)
}

#[test]
fn the_wall_clock_runs_while_a_person_is_awaited_unless_the_loopfile_pauses_it() {
    // Default: the wait is charged, and nobody is waited for past the
    // task's time budget.
    let (last, ev) = answer_late("clock-runs", "");
    assert_eq!(last["outcome"]["kind"], "limit_reached", "{last}");
    assert_eq!(last["outcome"]["limit"], "time", "{last}");
    let decided = ev.iter().find(|e| e["kind"] == "approval_decided").unwrap();
    assert_eq!(decided["decision"], "expired", "{decided}");
    // pause_clock: the 6.5 s wait is not charged; the approved command runs
    // and the task verifies inside its 5 s of working time.
    let (last, ev) = answer_late("clock-paused", "checkpoints:\n  pause_clock: true\n");
    assert_eq!(last["outcome"]["kind"], "verified", "{last} {ev:?}");
    let decided = ev.iter().find(|e| e["kind"] == "approval_decided").unwrap();
    assert_eq!(decided["decision"], "approved");
}

/// The README's example rules against indirect forms a hostile model used
/// (each once entered and ran inside verification): every one is refused
/// where it is written, naming file, line and column; the look-alikes
/// (a variable named `system`, `.eval()` on an object) enter.
#[test]
fn the_code_policy_gate_resolves_aliases_escapes_and_strings() {
    let loopfile = "rules:
  python:
    banned_imports: [subprocess, ctypes, importlib]
    banned_calls: [eval, exec, getattr, __import__, os.system]
    banned_attributes: [__subclasses__, __globals__, __builtins__, __mro__, __dict__]
  javascript:
    banned_imports: [child_process, fs]
    banned_calls: [eval, Function]
    banned_attributes: [__proto__, constructor]
";
    let forms: &[(&str, &str, &str)] = &[
        (
            "a.py",
            "from os import system as s\\ns('id')\\n",
            "banned call `os.system`",
        ),
        (
            "b.py",
            "from os import *\\nsystem('id')\\n",
            "banned call `os.system`",
        ),
        ("c.py", "e = eval\\ne('1')\\n", "banned call `eval`"),
        (
            "d.py",
            "import ｓｕｂｐｒｏｃｅｓｓ\\n",
            "banned import `subprocess`",
        ),
        (
            "e.py",
            "x = '\\\\x5f_subclasses__'\\n",
            "banned attribute `__subclasses__`",
        ),
        ("f.js", "(0,eval)('1');\\n", "banned call `eval`"),
        (
            "g.js",
            "const cp = require('node:child_process');\\n",
            "banned import `child_process`",
        ),
        (
            "h.js",
            "const m = 'child' + '_process';\\n",
            "banned import `child_process`",
        ),
        (
            "i.ts",
            "import cp = require('child_process');\\n",
            "banned import `child_process`",
        ),
    ];
    let mut script = String::from("turns:\n  - calls:\n");
    for (path, content, _) in forms {
        script.push_str(&format!(
            "      - {{tool: write_file, args: {{path: {path}, content: \"{content}\"}}}}\n"
        ));
    }
    script.push_str("      - {tool: write_file, args: {path: ok.py, content: \"system = 'linux'\\nmodel = load()\\nmodel.eval()\\n\"}}\n");
    let (ev, ws, out) = run_gated("gate-indirect", loopfile, &script, &[]);
    for (i, (path, _, want)) in forms.iter().enumerate() {
        let (rule, text) = refusal(&ev, &format!("t1-c{}", i + 1));
        assert!(rule.contains(want), "{path}: {rule} {out}");
        assert!(text.contains(&format!("{path}:")), "{path}: {text}");
        assert!(!ws.join(path).exists(), "{path} entered");
    }
    assert!(ws.join("ok.py").exists(), "{out}");
}

/// The code-policy gate judges what a command writes, as it judges the
/// file tools: a banned import written by `printf` never enters.
#[test]
fn the_code_policy_gate_judges_a_commands_effects() {
    let loopfile =
        "rules:\n  python:\n    banned_imports: [subprocess]\n    banned_calls: [os.system]\n";
    let script = "turns:
  - calls:
      - {tool: run_command, args: {command: \"printf 'import subprocess\\\\nsubprocess.run([1])\\\\n' > app.py; printf 'from os import system as s\\\\n' > b.py; echo ok > notes.txt\"}}
";
    let (ev, ws, out) = run_gated("gate-command", loopfile, script, &[]);
    let o = ev
        .iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["tool"] == "run_command")
        .unwrap_or_else(|| panic!("{out}"));
    let text = o["observation"]["content"].as_str().unwrap();
    assert!(
        text.contains("app.py (gate: code policy (banned import `subprocess`) at app.py:1:8)"),
        "{text}"
    );
    assert!(
        text.contains("b.py (gate: code policy (banned call `os.system`"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("app.py")).unwrap(),
        "x = 1\n"
    );
    assert!(!ws.join("b.py").exists());
    assert!(ws.join("notes.txt").exists());
}

/// With no terminal and no `--on-prompt`, a checkpoint is denied by the
/// run itself: the task ends `cancelled` saying nobody could be asked
/// (never "stopped by a person"), and the story does not tell anyone to
/// `loop approve` a question that is already answered. (A person's deny
/// is `after_failed_repairs_a_person_is_asked…`'s "stopped by a person".)
#[test]
fn a_checkpoint_nobody_could_be_asked_is_not_said_to_be_a_persons() {
    let (dir, project) = setup("checkpoint-unattended", 60);
    std::fs::write(
        project.join("Loopfile.yaml"),
        "checkpoints:\n  after_failed_repairs: 1\n",
    )
    .unwrap();
    std::fs::write(dir.join("script.yaml"), REPAIRS).unwrap();
    let out = loop_cmd(&dir)
        .args([
            "run",
            "make approved.txt",
            "--check",
            "test -f approved.txt",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    let t = first_task(&dir, &project);
    assert_eq!(t["outcome"], "cancelled", "{t}");
    let reason = t["reason"].as_str().unwrap();
    assert!(
        reason.contains("nobody could be asked, so it was denied (--on-prompt deny"),
        "{reason}"
    );
    assert!(!reason.contains("by a person"), "{reason}");
    assert!(!said.contains("loop approve"), "{said}");
}

/// A person who stops a task at a checkpoint with a message is heard: the
/// message is in the task's reason (what `loop status` and the story's
/// last line say), as well as in the recorded decision.
#[test]
fn a_persons_deny_message_is_in_how_the_task_ended() {
    let (dir, project, child) = start_repairs(
        "checkpoint-deny-message",
        "checkpoints:\n  after_failed_repairs: 1\n",
    );
    let id = await_state(&dir, &project, "awaiting_input");
    let out = loop_cmd(&dir)
        .args([
            "approve",
            &id,
            "--deny",
            "--message",
            "wrong approach, try the parser",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let t = first_task(&dir, &project);
    let reason = t["reason"].as_str().unwrap();
    assert!(
        reason.contains("stopped by a person at a checkpoint"),
        "{reason}"
    );
    assert!(
        reason.ends_with(": wrong approach, try the parser"),
        "{reason}"
    );
    let ev = events(&out);
    let decided = ev
        .iter()
        .find(|e| e["kind"] == "checkpoint_decided")
        .unwrap();
    assert_eq!(
        decided["message"], "wrong approach, try the parser",
        "{decided}"
    );
}
