//! Loop Engine as an MCP server, driven by a real MCP client: the `mcp`
//! package from PyPI (`scripts/mcp-venv.sh` builds its venv,
//! `scripts/test.sh` passes it in LOOP_MCP_VENV) runs `tests/mcp/drive.py`
//! against `loop mcp` over stdio and against `/mcp` of `loop serve` over
//! streamable HTTP: the tools listed, a scripted task run to verified while
//! its progress streams, its receipt verified and read as a resource, a
//! drafted contract answered and run, and what a careless or hostile
//! client sends refused, each with the reason named.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::Value;
use shared::{loop_in, text};
use std::path::{Path, PathBuf};

const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

/// The venv's Python, or `None` (skipped) outside `scripts/test.sh`.
fn python() -> Option<PathBuf> {
    let Some(venv) = std::env::var_os("LOOP_MCP_VENV") else {
        assert!(
            std::env::var_os("LOOP_REQUIRE_LOCAL_MODEL").is_none(),
            "scripts/test.sh must pass LOOP_MCP_VENV"
        );
        eprintln!("skipped: LOOP_MCP_VENV is not set (scripts/test.sh sets it)");
        return None;
    };
    Some(PathBuf::from(venv).join("bin/python"))
}

fn project(name: &str) -> (PathBuf, PathBuf) {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(project.join("draft.yaml"), shared::DRAFTING).unwrap();
    (home, project)
}

/// drive.py with `args`: what it printed, as JSON.
fn drive(python: &Path, args: &[&str]) -> Value {
    let out = std::process::Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/drive.py"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    let v: Value = serde_json::from_str(&last).unwrap_or_else(|_| panic!("{}", text(&out)));
    assert!(
        out.status.success() && v.get("failed_after").is_none(),
        "{}",
        text(&out)
    );
    v
}

/// What every transport must show for the same session.
fn assert_session(seen: &Value, project: &Path) {
    assert_eq!(seen["server"], "loop-engine");
    assert_eq!(
        seen["tools"],
        serde_json::json!([
            "answer",
            "approve",
            "diff",
            "memory",
            "run_task",
            "skills",
            "task_events",
            "task_status",
            "verify_receipt"
        ])
    );
    // Memory: a note added by the client is its own, usable, and listed.
    assert_eq!(seen["note_status"], "usable", "{seen}");
    assert_eq!(seen["note_shown"], "the client's note", "{seen}");
    assert_eq!(
        seen["notes"],
        serde_json::json!(["the client's note"]),
        "{seen}"
    );
    assert_eq!(
        seen["read_only"],
        serde_json::json!([
            "diff",
            "skills",
            "task_events",
            "task_status",
            "verify_receipt"
        ])
    );
    // Run to verified, its progress streamed: one notification per
    // recorded event, in order, ending with the verdict.
    assert_eq!(seen["run_error"], false, "{seen}");
    assert_eq!(seen["outcome"], "verified", "{seen}");
    assert_eq!(seen["waited"], "ended");
    let progress = seen["progress"].as_array().unwrap();
    let ledger = seen["ledger_kinds"].as_array().unwrap();
    assert_eq!(progress.len(), ledger.len(), "{seen}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p["progress"], serde_json::json!(i as f64));
        let kind = ledger[i].as_str().unwrap();
        assert!(
            p["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("#{i} {kind}")),
            "{p} vs {kind}"
        );
    }
    assert_eq!(ledger.first().unwrap(), "task_started");
    assert_eq!(ledger.last().unwrap(), "finished");
    assert!(
        progress
            .iter()
            .any(|p| p["message"] == "#12 verified: accepted"),
        "{seen}"
    );
    // The receipt checks out offline, and is the task's own.
    let task = seen["task"].as_str().unwrap();
    let v = &seen["verify"];
    assert_eq!(v["id"], task);
    assert_eq!(
        (v["intact"].clone(), v["verified"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(v["signature"]["valid"], true);
    assert_eq!(v["ledger"]["entries"].as_u64(), Some(ledger.len() as u64));
    assert_eq!(v["outcome"]["kind"], "verified");
    assert_eq!(seen["receipt_payload_type"], "application/vnd.in-toto+json");
    let status = loop_in(project.parent().unwrap())
        .args(["status", task, "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["outcome"], "verified", "the store says otherwise");
    assert_eq!(seen["events_from"], serde_json::json!([2]));
    assert_eq!(seen["diff_files"], serde_json::json!(["hello.txt"]));
    assert!(seen["changes"].as_str().unwrap().contains("+hello\n"));
    for what in ["changes", "ledger", "receipt"] {
        let uri = format!("loop://tasks/{task}/{what}");
        assert!(
            seen["resources"].as_array().unwrap().contains(&uri.into()),
            "{seen}"
        );
    }
    assert_eq!(
        seen["templates"],
        serde_json::json!([
            "loop://tasks/{id}/changes",
            "loop://tasks/{id}/ledger",
            "loop://tasks/{id}/receipt"
        ])
    );
    // The drafted contract waited for its answer, then ran.
    assert!(seen["draft"].as_str().unwrap().starts_with("d-"));
    assert_eq!(seen["draft_state"], "proposed", "{seen}");
    assert_eq!(seen["answered"]["answered"], true);
    assert_eq!(seen["draft_started"], "started");
    assert_eq!(seen["drafted_outcome"], "verified", "{seen}");
    assert_eq!(seen["answer_again"]["is_error"], true);
    assert!(
        seen["answer_again"]["text"]
            .as_str()
            .unwrap()
            .contains("is not waiting for an answer"),
        "{seen}"
    );
    // What a careless or hostile client sends is refused, saying why.
    let refused = |key: &str, says: &str| {
        assert_eq!(seen[key]["is_error"], true, "{key}: {seen}");
        let t = seen[key]["text"].as_str().unwrap();
        assert!(t.contains(says), "{key}: {t}");
    };
    refused("unknown_argument", "unknown field `rm_rf`");
    refused("missing_task", "no task no-such-task");
    refused("traversal", "no such task");
    refused("model_outside", "the file must be inside the project");
    assert!(
        seen["bad_resource"]
            .as_str()
            .unwrap()
            .contains("no resource loop://tasks/../../etc/passwd/receipt"),
        "{seen}"
    );
}

#[test]
fn an_mcp_client_runs_a_task_over_stdio_to_verified_and_checks_its_receipt() {
    let Some(python) = python() else { return };
    let (home, project) = project("mcp-stdio");
    let seen = drive(
        &python,
        &[
            "stdio",
            env!("CARGO_BIN_EXE_loop"),
            project.to_str().unwrap(),
            home.join("state").to_str().unwrap(),
        ],
    );
    assert_session(&seen, &project);
}

#[test]
fn an_mcp_client_over_http_needs_a_token_and_sees_only_its_owners_tasks() {
    let Some(python) = python() else { return };
    let (home, project) = project("mcp-http");
    let token = |owner: &str, scope: &str| {
        let out = loop_in(&home)
            .args(["tokens", "create", "--owner", owner, "--scope", scope])
            .args(["--json", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["token"].as_str().unwrap().to_string()
    };
    let (alice, eve) = (token("alice", "run"), token("eve", "read"));
    let (server, url) = shared::serve(&home, &project, &[], &[]);
    let mcp = format!("{url}/mcp");
    let seen = drive(&python, &["http", &mcp, &alice]);
    assert_session(&seen, &project);
    // No token: refused before any MCP is spoken.
    let none = drive(&python, &["http", &mcp, "-"]);
    assert_eq!(none["status"], 401, "{none}");
    assert!(none["body"].as_str().unwrap().contains("no bearer token"));
    // Another owner with a read token: alice's task does not exist for
    // eve, and eve may not start one.
    let task = seen["task"].as_str().unwrap();
    let peek = drive(&python, &["http", &mcp, &eve, task]);
    assert_eq!(peek["status"]["is_error"], true, "{peek}");
    assert!(
        peek["status"]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("no task {task}")),
        "{peek}"
    );
    assert!(
        peek["receipt"].as_str().unwrap().contains("no resource"),
        "{peek}"
    );
    assert_eq!(peek["resources"], serde_json::json!([]), "{peek}");
    assert_eq!(peek["run"]["is_error"], true, "{peek}");
    assert!(
        peek["run"]["text"]
            .as_str()
            .unwrap()
            .contains("this needs a `run` token; this one is `read`"),
        "{peek}"
    );
    // Memory is changed only with `run`, as over REST; read, it is shown.
    for action in ["memory_add", "memory_forget"] {
        assert_eq!(peek[action]["is_error"], true, "{action}: {peek}");
        assert!(
            peek[action]["text"]
                .as_str()
                .unwrap()
                .contains("this needs a `run` token; this one is `read`"),
            "{action}: {peek}"
        );
    }
    assert_eq!(peek["memory_list"]["is_error"], false, "{peek}");
    assert!(
        !peek["memory_list"]["text"]
            .as_str()
            .unwrap()
            .contains("from a read token"),
        "{peek}"
    );
    shared::stop(server);
}
