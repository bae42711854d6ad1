//! One intake: the same request through each front end — the command
//! line, the HTTP API, MCP, a Loopfile trigger and `loop eval` — locks the
//! same contract (the ledger's genesis holds it). Two requests cover all
//! five: an instruction with a check and a step limit over the Loopfile's
//! defaults (command line, HTTP, MCP, trigger), and a contract file
//! (command line, HTTP, MCP, eval).
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::{Value, json};
use shared::{loop_in, text};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

const INSTRUCTION: &str = "write hello";
const CHECK: &str = "grep -q hello hello.txt";

const CONTRACT: &str = "instruction: write hello into hello.txt
criteria:
  - id: hello
    text: hello.txt says hello
    checks:
      - file_contains: hello.txt
        text: hello
limits: { max_steps: 5, max_verifications: 2 }
";

const SECRET: &str = "s3cret-s3cret-s3cret";

/// The locked contract of task `id`: its genesis's `contract`.
fn locked(home: &Path, project: &Path, id: &str) -> Value {
    let out = loop_in(home)
        .args(["logs", id, "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    let genesis = shared::json_lines(&out)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert_eq!(genesis["kind"], "task_started", "{genesis}");
    genesis["contract"].clone()
}

/// Wait until task `id` has recorded its genesis.
fn started(home: &Path, project: &Path, id: &str) {
    let start = Instant::now();
    loop {
        let out = loop_in(home)
            .args(["logs", id, "--json", "--project"])
            .arg(project)
            .output()
            .unwrap();
        if !shared::json_lines(&out).is_empty() {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{}", text(&out));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `loop run` with `args`: the task's id.
fn cli(home: &Path, project: &Path, args: &[&str]) -> String {
    let out = loop_in(home)
        .arg("run")
        .args(args)
        .args(["--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    let last = shared::json_lines(&out)
        .pop()
        .unwrap_or_else(|| panic!("{}", text(&out)));
    last["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", text(&out)))
        .to_string()
}

/// POST `body` to `url` with `headers`: (status, body).
fn post(url: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent.post(url).content_type("application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let mut resp = r.send(body).unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `run_task` over `loop mcp` (stdio) with `args`: the task's id.
fn mcp(home: &Path, project: &Path, args: Value) -> String {
    let mut child = loop_in(home)
        .args(["mcp", "--project"])
        .arg(project)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answer = |id: u64| loop {
        let mut line = String::new();
        assert!(output.read_line(&mut line).unwrap() > 0, "mcp ended");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == json!(id) {
            break v;
        }
    };
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "intake", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_task", "arguments": args}}),
    ] {
        writeln!(input, "{m}").unwrap();
        if m["id"] == json!(1) {
            answer(1);
        }
    }
    let called = answer(2);
    let said = called["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let v: Value = serde_json::from_str(said).unwrap_or_else(|_| panic!("{called}"));
    let id = v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{called}"))
        .to_string();
    started(home, project, &id);
    drop(input);
    let _ = child.wait();
    id
}

#[test]
fn the_five_front_ends_lock_the_same_contract_for_the_same_request() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("intake-five");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(project.join("contract.yaml"), CONTRACT).unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "models:\n  maker:\n    spec: scripted:script.yaml\n\
             defaults:\n  limits: {{ max_steps: 11, max_tokens: 90000, timeout_secs: 900 }}\n  protected: [\"keep/**\"]\n\
             triggers:\n  - name: same\n    webhook: {{secret_env: LOOP_TEST_HOOK_SECRET, style: github, owner: ci}}\n    task: {{instruction: \"{INSTRUCTION}\", checks: [\"{CHECK}\"], max_steps: 7}}\n"
        ),
    )
    .unwrap();
    for args in [
        vec!["init", "-q"],
        vec!["add", "-A"],
        vec!["commit", "-qm", "start"],
    ] {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&project)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }

    // The command line.
    let by_flags = cli(
        &home,
        &project,
        &[INSTRUCTION, "--check", CHECK, "--max-steps", "7"],
    );
    let file = project.join("contract.yaml");
    let by_file = cli(&home, &project, &["--task", file.to_str().unwrap()]);
    let flags_contract = locked(&home, &project, &by_flags);
    let file_contract = locked(&home, &project, &by_file);
    assert_eq!(flags_contract["limits"]["max_steps"], 7, "{flags_contract}");
    assert_eq!(
        flags_contract["limits"]["max_tokens"], 90000,
        "{flags_contract}"
    );
    assert_eq!(
        flags_contract["protected"],
        json!(["keep/**"]),
        "{flags_contract}"
    );
    assert_eq!(file_contract["limits"]["max_steps"], 5, "{file_contract}");

    // MCP (stdio).
    let mcp_flags = mcp(
        &home,
        &project,
        json!({"instruction": INSTRUCTION, "checks": [CHECK], "max_steps": 7}),
    );
    let mcp_file = mcp(
        &home,
        &project,
        json!({"instruction": "write hello into hello.txt", "contract": CONTRACT}),
    );

    // The HTTP API and a trigger's webhook, on one server.
    let out = loop_in(&home)
        .args([
            "tokens",
            "create",
            "--owner",
            "alice",
            "--json",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    let token: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)));
    let bearer = format!("Bearer {}", token["token"].as_str().unwrap());
    let (server, url) = shared::serve(&home, &project, &[("LOOP_TEST_HOOK_SECRET", SECRET)], &[]);
    let tasks = format!("{url}/api/v1/tasks");
    let mut ids = Vec::new();
    for body in [
        json!({"instruction": INSTRUCTION, "checks": [CHECK], "max_steps": 7}),
        json!({"instruction": "write hello into hello.txt", "contract": CONTRACT}),
    ] {
        let (status, v) = post(
            &tasks,
            &[("Authorization", &bearer)],
            body.to_string().as_bytes(),
        );
        assert!(status == 201 || status == 202, "{status} {v}");
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    let hook = br#"{"action":"completed","workflow_run":{"conclusion":"failure"}}"#;
    let signature = format!(
        "sha256={}",
        loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(SECRET.as_bytes(), hook))
    );
    let (status, v) = post(
        &format!("{url}/api/v1/hooks/same"),
        &[
            ("X-Hub-Signature-256", &signature),
            ("X-GitHub-Delivery", "d-1"),
            ("X-GitHub-Event", "workflow_run"),
        ],
        hook,
    );
    assert_eq!(status, 202, "{v}");
    let by_trigger = v["id"].as_str().unwrap().to_string();
    for id in ids.iter().chain([&by_trigger]) {
        started(&home, &project, id);
    }
    shared::stop(server);

    for (front, id) in [
        ("MCP", &mcp_flags),
        ("HTTP", &ids[0]),
        ("trigger", &by_trigger),
    ] {
        assert_eq!(locked(&home, &project, id), flags_contract, "{front}");
    }
    for (front, id) in [("MCP", &mcp_file), ("HTTP", &ids[1])] {
        assert_eq!(locked(&home, &project, id), file_contract, "{front}");
    }

    // `loop eval`: a case whose contract is the same file.
    let suite = home.join("suite");
    let case = suite.join("same");
    std::fs::create_dir_all(case.join("project")).unwrap();
    std::fs::create_dir_all(case.join("solutions")).unwrap();
    std::fs::write(case.join("project/README.md"), "hi\n").unwrap();
    std::fs::write(case.join("contract.yaml"), CONTRACT).unwrap();
    std::fs::write(case.join("solutions/right.yaml"), SCRIPT).unwrap();
    std::fs::write(
        case.join("case.yaml"),
        "instruction: write hello into hello.txt\nkind: document\nlanguage: text\ncontract: contract.yaml\noracle: grep -q hello hello.txt\n",
    )
    .unwrap();
    let out = loop_in(&home)
        .arg("eval")
        .arg(&suite)
        .args(["--model", "scripted", "--json", "--keep"])
        .output()
        .unwrap();
    let all = text(&out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{all}"));
    assert_eq!(r["solved"], 1, "{all}");
    let kept = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| {
            l.strip_prefix("loop eval: the cases' projects are kept in ")
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("{all}"));
    let eval_project = std::fs::read_dir(&kept)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with("-right-1")
        })
        .unwrap()
        .join("project");
    let task = r["runs"][0]["task_id"].as_str().unwrap();
    assert_eq!(locked(&home, &eval_project, task), file_contract, "eval");
}
