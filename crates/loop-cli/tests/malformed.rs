//! A model's garbage through the whole loop: `loop run` against an
//! OpenAI-compatible server on 127.0.0.1 whose "model" answers, in the JSON
//! action protocol, with prose, two objects, an unknown tool, broken JSON,
//! mistyped arguments and an enormous argument. Each one is recorded as
//! `model_malformed` naming what was wrong, charged what the server
//! reported, and returned to the model; the repeats end the task `lost`;
//! the receipt holds.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../loop-models/tests/common/mod.rs"]
mod common;
mod shared;

use common::{Canned, serve};
use std::process::Command;

fn completion(content: &str, prompt: u64, completion: u64) -> Canned {
    let body = serde_json::json!({
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "model": "garbage-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    });
    Canned::json(200, &body.to_string())
}

#[test]
fn malformed_answers_are_typed_observations_charged_and_end_lost() {
    let huge = format!(
        "{{\"calls\":[{{\"tool\":\"write_file\",\"args\":{{\"path\":\"a\",\"content\":\"{}\"}}}}]}}",
        "x".repeat(300_000)
    );
    let answers: Vec<(String, &str)> = vec![
        (
            "Sure! Here is my plan: {\"calls\": []}".into(),
            "prose before the JSON object",
        ),
        (
            "{\"calls\": []}{\"calls\": []}".into(),
            "a second JSON object after",
        ),
        (
            "{\"calls\": [{\"tool\": \"rm_rf\", \"args\": {}}]}".into(),
            "unknown tool `rm_rf`",
        ),
        (
            "{\"calls\": [{\"tool\": \"write_file\", \"args\": {\"path\": ".into(),
            "invalid JSON",
        ),
        (
            "{\"calls\": [{\"tool\": \"write_file\", \"args\": {\"path\": 3, \"content\": \"\"}}]}"
                .into(),
            "calls[0].args.path: must be string",
        ),
        (huge, "more than the 262144-byte limit"),
        ("I cannot do that.".into(), "invalid JSON"),
        ("I cannot do that.".into(), "invalid JSON"),
        ("I cannot do that.".into(), "invalid JSON"),
        ("I cannot do that.".into(), "invalid JSON"),
        ("I cannot do that.".into(), "invalid JSON"),
        ("I cannot do that.".into(), "invalid JSON"),
    ];
    let canned: Vec<Canned> = answers
        .iter()
        .enumerate()
        .map(|(i, (a, _))| completion(a, 100 + i as u64, 10))
        .collect();
    let server = serve(canned);

    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("malformed");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: openai:garbage-1\n    tool_protocol: json\n    stream: false\n    retries: 1\n    max_output_tokens: 100000\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args([
            "run",
            "write a.txt",
            "--check",
            "test -f a.txt",
            "--max-steps",
            "12",
            "--json",
            "--project",
        ])
        .arg(&dir)
        .env("LOOP_OPENAI_BASE_URL", format!("{}/v1", server.url))
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let malformed: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "model_malformed")
        .collect();
    assert!(
        malformed.len() >= 7,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (e, (_, want)) in malformed.iter().zip(&answers) {
        let error = e["error"].as_str().unwrap();
        assert!(error.contains(want), "{error:?} should name {want:?}");
    }
    // Each one went back to the model as an observation naming the error.
    let feedback = events
        .iter()
        .filter(|e| {
            e["kind"] == "feedback"
                && e["text"]
                    .as_str()
                    .unwrap()
                    .starts_with("[malformed answer]")
        })
        .count();
    assert_eq!(feedback, malformed.len());
    // Nothing was executed.
    assert!(!events.iter().any(|e| e["kind"] == "observed"), "{stdout}");
    // Charged exactly what the server reported.
    let finished = events.iter().find(|e| e["kind"] == "finished").unwrap();
    let n = malformed.len() as u64;
    let want_input: u64 = (0..n).map(|i| 100 + i).sum();
    assert_eq!(finished["used"]["input_tokens"], want_input);
    assert_eq!(finished["used"]["output_tokens"], 10 * n);
    assert_eq!(finished["used"]["estimated"], false);
    assert_eq!(finished["outcome"]["kind"], "lost", "{stdout}");
    assert_eq!(out.status.code(), Some(1));
    // The runtime told the model the protocol, and the receipt holds.
    let sent = server.received.lock().unwrap()[0].body.clone();
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Answer with exactly one JSON object")
    );
    assert!(
        sent.get("tools").is_none(),
        "the JSON protocol sends no native tools"
    );
    let receipt = events.iter().find(|e| e["kind"] == "receipt").unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    shared::assert_receipt_holds(std::path::Path::new(&receipt), &dir.join("state"));
}

fn review_call(verdict: &str, reasons: &str) -> Canned {
    let args = serde_json::json!({"verdict": verdict, "reasons": reasons}).to_string();
    let body = serde_json::json!({
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "model": "checker-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_r", "type": "function", "function": {"name": "review", "arguments": args}}
        ]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}
    });
    Canned::json(200, &body.to_string())
}

/// A scripted maker with a checker from the Loopfile, served over HTTP: the
/// checker sees the diff, its objection goes back to the maker, and its
/// approval lets the acceptance stand. Its identity is in the receipt.
#[test]
fn a_checker_from_the_loopfile_reviews_the_diff_and_can_veto() {
    let server = serve(vec![
        review_call("object", "hello is printed without a greeting mark"),
        review_call("approve", "prints hello"),
    ]);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("checker");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Loopfile.yaml"),
        "models:\n  checker:\n    spec: openai:checker-1\n    temperature: 0.7\n    stream: false\n    prompt: Be strict about greetings.\n",
    )
    .unwrap();
    let script = dir.join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: done}}\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')  # hello!\\n\"}}\n      - {tool: finish, args: {summary: done again}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args([
            "run",
            "make app.py print hello",
            "--check",
            "python3 app.py | grep -qx hello",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", script.display()))
        .arg("--project")
        .arg(&dir)
        .env("LOOP_OPENAI_BASE_URL", format!("{}/v1", server.url))
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let reviews: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "reviewed")
        .map(|e| e["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(reviews, ["object", "approve"]);
    assert!(events.iter().any(|e| {
        e["kind"] == "feedback"
            && e["text"]
                .as_str()
                .unwrap()
                .contains("without a greeting mark")
    }));
    // The checker got the diff, its own prompt, and only the review tool.
    let sent = server.received.lock().unwrap()[0].body.clone();
    let user = sent["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("+print('hello')"), "{user}");
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Be strict about greetings.")
    );
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    assert_eq!(sent["temperature"], 0.7);
    // Its cost is charged and it is named in the genesis.
    let finished = events.iter().find(|e| e["kind"] == "finished").unwrap();
    assert!(finished["used"]["input_tokens"].as_u64().unwrap() >= 600);
    let genesis = events.iter().find(|e| e["kind"] == "task_started").unwrap();
    assert_eq!(genesis["checker"]["name"], "checker-1");
    assert_eq!(genesis["checker"]["parameters"]["role"], "checker");
}

/// What only meaning can tell is the checker's: with `models.checker`
/// set, each draft the critic accepts is reviewed against the instruction;
/// an objection goes back to the drafter as reasons (never the checker's
/// prompt), its verdicts are in the ledger's first entry, and the receipt
/// says the contract was reviewed by both.
#[test]
fn the_checker_reviews_each_draft_by_meaning_and_its_objection_goes_back_to_the_drafter() {
    let server = serve(vec![
        review_call(
            "object",
            "grepping slug.py for `unicodedata` passes without any accent being stripped",
        ),
        review_call("approve", "runs slug() on accented words"),
        review_call("approve", "strips accents"),
    ]);
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("checker-draft");
    let _ = std::fs::remove_dir_all(&dir);
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("slug.py"),
        "def slug(s):\n    return s.lower().replace(' ', '-')\n",
    )
    .unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        "models:\n  checker:\n    spec: openai:checker-1\n    stream: false\n",
    )
    .unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg("git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm base")
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(st.success());
    let propose = |text: &str, run: &str| {
        format!(
            "  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: accents\n              text: {}\n              checks:\n                - run: {}\n",
            serde_json::to_string(text).unwrap(),
            serde_json::to_string(run).unwrap()
        )
    };
    let fixed = "import unicodedata\n\ndef slug(s):\n    s = unicodedata.normalize('NFKD', s).encode('ascii', 'ignore').decode()\n    return s.lower().replace(' ', '-')\n";
    let script = format!(
        "draft:\n{}{}turns:\n  - calls:\n      - {{tool: write_file, args: {{path: slug.py, content: {}}}}}\n      - {{tool: finish, args: {{summary: done}}}}\n",
        // The lazy draft every text rule lets through.
        propose("slug.py names unicodedata", "grep -q unicodedata slug.py"),
        propose(
            "slug() strips accents",
            "python3 -c \"import slug; assert slug.slug('Crème brûlée') == 'creme-brulee'\"",
        ),
        serde_json::to_string(fixed).unwrap()
    );
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args([
            "run",
            "make slug() strip accents",
            "--accept-contract",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .env("LOOP_OPENAI_BASE_URL", format!("{}/v1", server.url))
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let said = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let genesis = events.iter().find(|e| e["kind"] == "task_started").unwrap();
    let attempts = genesis["drafting"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{genesis}");
    assert_eq!(attempts[0]["accepted"], false);
    assert_eq!(attempts[0]["checker"], "object");
    assert!(
        attempts[0]["reasons"]
            .to_string()
            .contains("the checker (checker-1) objects: grepping slug.py for `unicodedata` passes"),
        "{}",
        attempts[0]
    );
    assert_eq!(attempts[1]["accepted"], true);
    assert_eq!(attempts[1]["checker"], "approve");
    // Each review's tokens are recorded with its draft and charged to
    // the task, as the drafts' are.
    let mut drafting_in = 0;
    for a in attempts {
        assert_eq!(a["checker_usage"]["input_tokens"], 300, "{a}");
        assert_eq!(a["checker_usage"]["output_tokens"], 20, "{a}");
        drafting_in += a["usage"]["input_tokens"].as_u64().unwrap() + 300;
    }
    // The task's tokens: the drafts and their reviews, the working
    // model's turns, and the checker's review of the change (300).
    let turns_in: u64 = events
        .iter()
        .filter(|e| e["kind"] == "model_turn")
        .map(|e| e["usage"]["input_tokens"].as_u64().unwrap())
        .sum();
    let finished = events.iter().find(|e| e["kind"] == "finished").unwrap();
    let used_in = finished["used"]["input_tokens"].as_u64().unwrap();
    assert_eq!(used_in, drafting_in + turns_in + 300, "{finished}");
    // The checker saw the instruction and the draft, with its own prompt
    // and only the review tool.
    let sent = server.received.lock().unwrap()[0].body.clone();
    let system = sent["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("could every check pass without the work"),
        "{system}"
    );
    let user = sent["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains("Instruction: make slug() strip accents")
            && user.contains("run `grep -q unicodedata slug.py`"),
        "{user}"
    );
    assert_eq!(sent["tools"].as_array().unwrap().len(), 1);
    // The receipt says how the contract came to be.
    let receipt = events.iter().find(|e| e["kind"] == "receipt").unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    let verify = Command::new(env!("CARGO_BIN_EXE_loop"))
        .arg("verify")
        .arg(&receipt)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&verify.stdout).to_string();
    assert!(
        v.contains(&format!(
            "contract   drafted by {}, accepted by the critic and the checker after 2 proposal(s), confirmed by --accept-contract; checker checker-1",
            dir.join("script.yaml").display()
        )),
        "{v}"
    );
}

#[test]
fn a_checker_nobody_can_reach_ends_the_task_naming_it() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("checker-unreachable");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Loopfile.yaml"),
        "models:\n  checker:\n    spec: openai:checker-1\n    stream: false\n    retries: 1\n",
    )
    .unwrap();
    let script = dir.join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args([
            "run",
            "make app.py print hello",
            "--check",
            "python3 app.py | grep -qx hello",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", script.display()))
        .arg("--project")
        .arg(&dir)
        .env(
            "LOOP_OPENAI_BASE_URL",
            format!("http://127.0.0.1:{port}/v1"),
        )
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["outcome"]["kind"], "error", "{stdout}");
    let reason = last["outcome"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the checker openai:checker-1 could not be reached"),
        "{reason}"
    );
    assert_eq!(out.status.code(), Some(1));
}
