//! End to end through the `loop` binary: the demo, tampering, and
//! adversarial scripted models. None of the adversaries may end verified;
//! each ends with the right outcome and exit code 1, and each receipt still
//! verifies as intact.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `loop`, with this test process's own state directory (its signing
/// key, and beside it its tasks' workspaces): never the person's who runs
/// the tests. A test that sets `LOOP_STATE_DIR` itself overrides it.
fn loop_bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.env(
        "LOOP_STATE_DIR",
        std::env::temp_dir().join(format!("loop-e2e-state-{}", std::process::id())),
    )
    // Its tasks' workspaces beside it, whatever the person set.
    .env_remove("LOOP_WORKSPACES_DIR");
    c
}

fn tmpdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loop-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A Python with `securesystemslib`, in a venv made once under the target dir.
fn ssl_python() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sslvenv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import securesystemslib"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        let st = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()
            .unwrap();
        assert!(st.success(), "python3 -m venv failed");
        let out = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "securesystemslib"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pip install securesystemslib: {}",
            text(&out)
        );
    }
    python
}

/// The in-toto statement inside a DSSE envelope file.
fn statement_of(envelope: &Path) -> serde_json::Value {
    shared::payload_of(envelope)
}

/// `loop CMD ID --project P` (apply, undo, discard).
fn task_cmd(cmd: &str, id: &str, project: &Path) -> Output {
    loop_bin()
        .args([cmd, id, "--project"])
        .arg(project)
        .output()
        .unwrap()
}

/// The task id of a run, from its receipt's file name.
fn task_id(r: &Run) -> String {
    let name = r.receipt.file_name().unwrap().to_str().unwrap();
    name.trim_end_matches(".receipt.json").to_string()
}

fn verify(receipt: &Path) -> Output {
    loop_bin().arg("verify").arg(receipt).output().unwrap()
}

/// `loop verify --integrity-only RECEIPT`: the receipt holds, whatever the outcome.
fn verify_integrity(receipt: &Path) -> Output {
    loop_bin()
        .args(["verify", "--integrity-only"])
        .arg(receipt)
        .output()
        .unwrap()
}

#[test]
fn the_demo_is_verified_and_tampering_with_any_byte_is_caught() {
    let dir = tmpdir("demo");
    let out = loop_bin()
        .args(["demo", "--dir"])
        .arg(dir.join("d"))
        .output()
        .unwrap();
    let story = text(&out);
    assert_eq!(out.status.code(), Some(0), "{story}");
    // The story: a failing check with its evidence, a refusal, a repair, acceptance.
    assert!(story.contains("decision: rejected"), "{story}");
    assert!(story.contains("IndexError"), "{story}");
    assert!(story.contains("refused by protected: tests/**"), "{story}");
    assert!(story.contains("■ verified"), "{story}");
    let receipt_line = story.lines().find(|l| l.starts_with("receipt   ")).unwrap();
    let receipt = PathBuf::from(receipt_line.trim_start_matches("receipt").trim());
    assert!(receipt.exists());

    let ok = verify(&receipt);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    assert!(text(&ok).contains("ledger     intact"));

    // Any byte of the artifact.
    let id = receipt
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_end_matches(".receipt.json")
        .to_string();
    let receipts = receipt.parent().unwrap();
    let artifact = receipts.join(format!("{id}.artifacts/todo.py"));
    let original = std::fs::read(&artifact).unwrap();
    for pos in (0..original.len()).step_by(original.len() / 7 + 1) {
        let mut bytes = original.clone();
        bytes[pos] ^= 0x01;
        std::fs::write(&artifact, &bytes).unwrap();
        let bad = verify(&receipt);
        assert_eq!(
            bad.status.code(),
            Some(1),
            "artifact byte {pos}: {}",
            text(&bad)
        );
        assert!(
            text(&bad).contains("artifacts  DIFFER: todo.py differs"),
            "{}",
            text(&bad)
        );
    }
    std::fs::write(&artifact, &original).unwrap();
    assert_eq!(verify(&receipt).status.code(), Some(0));

    // Any byte of a ledger entry.
    let ledger = receipts.join(format!("{id}.ledger.jsonl"));
    let original = std::fs::read(&ledger).unwrap();
    for pos in (0..original.len()).step_by(original.len() / 11 + 1) {
        let mut bytes = original.clone();
        bytes[pos] = if bytes[pos] == b'7' { b'8' } else { b'7' };
        std::fs::write(&ledger, &bytes).unwrap();
        let bad = verify(&receipt);
        assert_eq!(
            bad.status.code(),
            Some(1),
            "ledger byte {pos}: {}",
            text(&bad)
        );
        assert!(text(&bad).contains("ledger     BROKEN"), "{}", text(&bad));
    }
    std::fs::write(&ledger, &original).unwrap();
    assert_eq!(verify(&receipt).status.code(), Some(0));

    // One entry edited, with the file digest recomputed: the chain itself breaks.
    let lines: Vec<String> = String::from_utf8(original.clone())
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let mut forged = lines.clone();
    forged[3] = forged[3].replacen("\"reason\":\"", "\"reason\":\"forged ", 1);
    assert_ne!(forged[3], lines[3]);
    std::fs::write(&ledger, forged.join("\n") + "\n").unwrap();
    let bad = verify(&receipt);
    assert!(text(&bad).contains("broken at entry 3"), "{}", text(&bad));
    std::fs::write(&ledger, &original).unwrap();

    // Replayed without a model, the outcome reproduces.
    let out = loop_bin().arg("replay").arg(&receipt).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("recorded verified, replayed verified: reproduced"),
        "{}",
        text(&out)
    );

    // The signature: a flipped byte, a replaced key id, another key.
    let env = std::fs::read_to_string(&receipt).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&env).unwrap();
    let sig = doc["signatures"][0]["sig"].as_str().unwrap().to_string();
    let flipped = format!(
        "{}{}",
        if sig.starts_with('A') { "B" } else { "A" },
        &sig[1..]
    );
    doc["signatures"][0]["sig"] = flipped.into();
    std::fs::write(&receipt, doc.to_string()).unwrap();
    let bad = verify(&receipt);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad).contains("signature  INVALID"), "{}", text(&bad));
    let mut doc: serde_json::Value = serde_json::from_str(&env).unwrap();
    doc["signatures"][0]["keyid"] = "0".repeat(64).into();
    std::fs::write(&receipt, doc.to_string()).unwrap();
    let bad = verify(&receipt);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad).contains("signature  UNKNOWN KEY"),
        "{}",
        text(&bad)
    );
    std::fs::write(&receipt, &env).unwrap();
    // With this machine's exported key given explicitly, it holds; with another key, it does not.
    let pem = loop_bin().args(["keys", "export"]).output().unwrap();
    let pem_path = dir.join("pub.pem");
    std::fs::write(&pem_path, &pem.stdout).unwrap();
    let out = loop_bin()
        .arg("verify")
        .arg(&receipt)
        .arg("--pubkey")
        .arg(&pem_path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let other = dir.join("other.hex");
    std::fs::write(
        &other,
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    )
    .unwrap();
    let out = loop_bin()
        .arg("verify")
        .arg(&receipt)
        .arg("--pubkey")
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("UNKNOWN KEY"), "{}", text(&out));
    // It names the key that signed, and says it is not the one given.
    let signed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let signer = signed["signatures"][0]["keyid"].as_str().unwrap();
    assert!(
        text(&out).contains(&format!("signed by key {signer}, not by the given key")),
        "{}",
        text(&out)
    );

    // An independent DSSE implementation accepts it, and refuses a tampered copy.
    let python = ssl_python();
    let show =
        String::from_utf8(loop_bin().args(["keys", "show"]).output().unwrap().stdout).unwrap();
    let field = |name: &str| {
        show.lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    let (keyid, hex) = (field("keyid"), field("ed25519"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/dsse-verify.py");
    let ok = Command::new(&python)
        .arg(script)
        .arg(&receipt)
        .args([&keyid, &hex])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let tampered = dir.join("tampered.json");
    let mut doc: serde_json::Value = serde_json::from_str(&env).unwrap();
    let payload = doc["payload"].as_str().unwrap().to_string();
    let mid = payload.len() / 2;
    let swapped = if &payload[mid..mid + 1] == "A" {
        "B"
    } else {
        "A"
    };
    doc["payload"] = format!("{}{}{}", &payload[..mid], swapped, &payload[mid + 1..]).into();
    std::fs::write(&tampered, doc.to_string()).unwrap();
    let bad = Command::new(&python)
        .arg(script)
        .arg(&tampered)
        .args([&keyid, &hex])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    let ours = verify(&tampered);
    assert_eq!(ours.status.code(), Some(1), "{}", text(&ours));

    // The receipt itself.
    std::fs::write(
        &receipt,
        env.replacen("\"payload\": \"", "\"payload\": \"x", 1),
    )
    .unwrap();
    assert_eq!(verify(&receipt).status.code(), Some(1));
    std::fs::write(&receipt, env).unwrap();
    assert_eq!(verify(&receipt).status.code(), Some(0));
}

#[test]
fn the_demo_json_mode_prints_one_event_per_line() {
    let dir = tmpdir("demo-json");
    let out = loop_bin()
        .args(["demo", "--json", "--dir"])
        .arg(dir.join("d"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["kind"], "task_started");
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "verified" && e["accepted"] == false)
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "finished" && e["outcome"]["kind"] == "verified")
    );
    let receipt = events.iter().find(|e| e["kind"] == "receipt").unwrap();
    assert_eq!(receipt["outcome"]["kind"], "verified");
    assert_eq!(
        events.last().unwrap()["ok"],
        true,
        "the verify report closes the stream"
    );
}

/// A small project: app.py must print hello; a protected unit test checks it.
fn project(name: &str) -> PathBuf {
    let dir = tmpdir(name);
    let p = dir.join("project");
    std::fs::create_dir_all(p.join("tests")).unwrap();
    std::fs::write(
        p.join("tests/test_app.py"),
        "import subprocess, sys, unittest\n\nclass T(unittest.TestCase):\n    def test_hello(self):\n        out = subprocess.run([sys.executable, 'app.py'], capture_output=True, text=True).stdout\n        self.assertEqual(out.strip(), 'hello')\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("task.yaml"),
        r#"instruction: make app.py print hello
criteria:
  - id: prints-hello
    checks:
      - run: python3 app.py
        expect_stdout: hello
  - id: unit-tests
    checks:
      - run: python3 -m unittest discover -s tests
        nonempty_tests: true
artifacts: [app.py]
protected: ["tests/**"]
limits: { max_steps: 6, max_verifications: 2, timeout_secs: 120 }
"#,
    )
    .unwrap();
    p
}

struct Run {
    code: Option<i32>,
    events: Vec<serde_json::Value>,
    receipt: PathBuf,
    outcome: serde_json::Value,
    output: String,
}

/// `loop run --task … --model scripted:… --project … --json EXTRA…` with `script`.
fn loop_run(project: &Path, script: &str, extra: &[&str]) -> Command {
    let dir = project.parent().unwrap();
    let script_path = dir.join("script.yaml");
    std::fs::write(&script_path, script).unwrap();
    let mut c = loop_bin();
    c.arg("run")
        .arg("--task")
        .arg(dir.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", script_path.display()))
        .arg("--project")
        .arg(project)
        .arg("--json")
        .args(extra);
    c
}

fn run_script(project: &Path, script: &str, extra: &[&str]) -> Run {
    let out = loop_run(project, script, extra).output().unwrap();
    let output = text(&out);
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{output}")))
        .collect();
    let last = events
        .last()
        .unwrap_or_else(|| panic!("no events: {output}"));
    assert_eq!(last["kind"], "receipt", "{output}");
    Run {
        code: out.status.code(),
        receipt: PathBuf::from(last["path"].as_str().unwrap()),
        outcome: last["outcome"].clone(),
        events,
        output,
    }
}

fn assert_unverified_but_intact(r: &Run, kind: &str) {
    assert_eq!(r.outcome["kind"], kind, "{}", r.output);
    assert_eq!(r.code, Some(1), "{}", r.output);
    // `loop verify R && deploy` ships nothing unverified: exit 1, naming it.
    let plain = verify(&r.receipt);
    assert_eq!(plain.status.code(), Some(1), "{}", text(&plain));
    assert!(
        text(&plain).contains(&format!("NOT VERIFIED: the task ended {kind}")),
        "{}",
        text(&plain)
    );
    let v = verify_integrity(&r.receipt);
    assert_eq!(
        v.status.code(),
        Some(0),
        "an unverified receipt is still intact: {}",
        text(&v)
    );
    assert!(
        text(&v).contains(&format!("outcome    {kind}")),
        "{}",
        text(&v)
    );
}

fn refusals(r: &Run) -> Vec<String> {
    r.events
        .iter()
        .filter(|e| e["kind"] == "observed" && e["observation"]["status"] == "refused")
        .map(|e| e["observation"]["rule"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn finishing_without_doing_the_work_is_not_verified() {
    let p = project("finish-only");
    let r = run_script(
        &p,
        "turns:\n  - calls: [{tool: finish, args: {summary: done}}]\n  - calls: [{tool: finish, args: {summary: really done}}]\n  - calls: [{tool: finish, args: {summary: trust me}}]\n",
        &[],
    );
    // The first claim is verified and rejected; claiming again on the same
    // workspace is a stall: nudged, then lost, with the pattern named.
    assert_unverified_but_intact(&r, "lost");
    let reason = r.outcome["reason"].as_str().unwrap();
    assert!(reason.contains("`finish` claimed again"), "{reason}");
    let verifications = r.events.iter().filter(|e| e["kind"] == "verified").count();
    assert_eq!(verifications, 1);
}

#[test]
fn writing_outside_the_workspace_is_refused() {
    let p = project("outside");
    let outside = p.parent().unwrap().join("escaped.txt");
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: {}, content: x}}}}\n      - {{tool: write_file, args: {{path: ../escaped.txt, content: x}}}}\n      - {{tool: run_command, args: {{command: 'ln -s {} link'}}}}\n  - calls:\n      - {{tool: write_file, args: {{path: link/escaped.txt, content: x}}}}\n      - {{tool: finish, args: {{summary: wrote it}}}}\n",
        outside.display(),
        p.parent().unwrap().display()
    );
    let r = run_script(&p, &script, &[]);
    assert_unverified_but_intact(&r, "lost");
    assert!(
        !outside.exists(),
        "nothing was written outside the workspace"
    );
    assert_eq!(
        refusals(&r),
        vec![
            "jail: absolute path",
            "jail: `..` component",
            "jail: symlink escape"
        ]
    );
}

#[test]
fn editing_a_protected_test_to_make_it_pass_is_refused() {
    let p = project("protected");
    let script = r#"turns:
  - calls:
      - tool: write_file
        args: { path: app.py, content: "print('bye')\n" }
      - tool: edit_file
        args: { path: tests/test_app.py, old: "'hello'", new: "'bye'" }
      - tool: write_file
        args: { path: tests/test_app.py, content: "" }
  - calls:
      - tool: finish
        args: { summary: tests pass }
"#;
    let r = run_script(&p, script, &[]);
    assert_unverified_but_intact(&r, "lost");
    assert_eq!(
        refusals(&r),
        vec!["protected: tests/**", "protected: tests/**"]
    );
    let ws = PathBuf::from(
        r.events.iter().find(|e| e["kind"] == "receipt").unwrap()["workspace"]
            .as_str()
            .unwrap(),
    );
    let test = std::fs::read_to_string(ws.join("tests/test_app.py")).unwrap();
    assert!(test.contains("'hello'"), "the protected test is unchanged");
}

#[test]
fn rewriting_a_protected_test_through_a_command_is_contained() {
    let p = project("protected-cmd");
    let script = r#"turns:
  - calls:
      - tool: write_file
        args: { path: app.py, content: "print('bye')\n" }
      - tool: run_command
        args: { command: "sed -i \"s/'hello'/'bye'/\" tests/test_app.py; echo 'x' > tests/conftest.py" }
      - tool: finish
        args: { summary: tests pass }
"#;
    let r = run_script(&p, script, &[]);
    assert_unverified_but_intact(&r, "lost");
    let observed = r
        .events
        .iter()
        .find(|e| e["kind"] == "observed" && e["observation"]["tool"] == "run_command")
        .unwrap();
    let content = observed["observation"]["content"].as_str().unwrap();
    assert!(content.contains("Read-only file system"), "{content}");
    let ws = PathBuf::from(
        r.events.iter().find(|e| e["kind"] == "receipt").unwrap()["workspace"]
            .as_str()
            .unwrap(),
    );
    assert!(
        std::fs::read_to_string(ws.join("tests/test_app.py"))
            .unwrap()
            .contains("'hello'")
    );
    assert!(!ws.join("tests/conftest.py").exists());
    let verified = r.events.iter().find(|e| e["kind"] == "verified").unwrap();
    assert_eq!(verified["accepted"], false);
}

#[test]
fn a_model_that_never_finishes_hits_the_step_limit() {
    let p = project("never");
    let turn = "  - calls: [{tool: list_files, args: {}}]\n";
    let script = format!("turns:\n{}", turn.repeat(20));
    let r = run_script(&p, &script, &["--max-steps", "3"]);
    assert_unverified_but_intact(&r, "limit_reached");
    assert_eq!(r.outcome["limit"], "steps");
    let turns = r
        .events
        .iter()
        .filter(|e| e["kind"] == "model_turn")
        .count();
    assert_eq!(turns, 3);
}

#[test]
fn a_script_that_runs_out_is_lost_even_when_the_work_is_right() {
    let p = project("runs-out");
    let script = "turns:\n  - calls: [{tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}]\n";
    let r = run_script(&p, script, &[]);
    assert_unverified_but_intact(&r, "lost");
    assert!(
        r.outcome["reason"]
            .as_str()
            .unwrap()
            .contains("script exhausted")
    );
}

#[test]
fn doing_the_work_and_finishing_is_verified() {
    let p = project("honest");
    let script = "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: prints hello}}\n";
    let r = run_script(&p, script, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    assert_eq!(r.code, Some(0));
    assert_eq!(verify(&r.receipt).status.code(), Some(0));
    // The user's checkout is untouched: the task worked in its own copy.
    assert!(!p.join("app.py").exists());
}

#[test]
fn verify_on_change_accepts_without_a_finish_claim() {
    let p = project("on-change");
    let script = "turns:\n  - calls: [{tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}]\n";
    let r = run_script(&p, script, &["--verify-on-change"]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
}

#[test]
fn flags_make_a_contract_and_run_it() {
    let dir = tmpdir("flags");
    let script = dir.join("s.yaml");
    std::fs::write(
        &script,
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: out.txt, content: \"42\\n\"}}\n      - {tool: finish, args: {summary: ok}}\n",
    )
    .unwrap();
    let out = loop_bin()
        .args([
            "run",
            "write 42 to out.txt",
            "--check",
            "grep -qx 42 out.txt",
            "--artifact",
            "out.txt",
            "--model",
        ])
        .arg(format!("scripted:{}", script.display()))
        .arg("--project")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("■ verified"));
}

#[test]
fn bad_input_exits_2_with_a_position() {
    let dir = tmpdir("bad");
    let task = dir.join("task.yaml");
    std::fs::write(
        &task,
        "instruction: x\ncriteria:\n  - id: a\n    text: no checks here\n",
    )
    .unwrap();
    let out = loop_bin().arg("validate").arg(&task).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out);
    assert!(
        err.contains("task.yaml:3:5: criterion `a` has no check"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");

    let out = loop_bin()
        .args([
            "run",
            "x",
            "--check",
            "true",
            "--allow-vacuous",
            "--model",
            "gpt4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("not PROVIDER:NAME"), "{}", text(&out));

    let script = dir.join("s.yaml");
    std::fs::write(
        &script,
        "turns:\n  - calls:\n      - tool: finish\n        argz: {}\n",
    )
    .unwrap();
    let out = loop_bin()
        .args([
            "run",
            "x",
            "--check",
            "true",
            "--allow-vacuous",
            "--project",
        ])
        .arg(&dir)
        .arg("--model")
        .arg(format!("scripted:{}", script.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("s.yaml:4:9: unknown key `argz` in a call"),
        "{}",
        text(&out)
    );

    let out = loop_bin()
        .arg("verify")
        .arg(dir.join("missing.receipt.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(dir.join("junk.json"), "{not json").unwrap();
    let out = loop_bin()
        .arg("verify")
        .arg(dir.join("junk.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("not a DSSE envelope"), "{}", text(&out));
}

/// A person's Ctrl-C (SIGINT) cancels the run: it ends `cancelled` with
/// an intact receipt. (SIGTERM, no person's decision, leaves it
/// interrupted: see kill.rs.)
#[test]
fn a_terminated_run_ends_cancelled_with_an_intact_receipt() {
    let p = project("cancel");
    let turn = "  - calls: [{tool: run_command, args: {command: 'sleep 0.3'}}]\n";
    let child = loop_run(
        &p,
        &format!("turns:\n{}", turn.repeat(50)),
        &["--max-steps", "50"],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let status = Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["outcome"]["kind"], "cancelled", "{stdout}");
    let v = verify_integrity(Path::new(last["path"].as_str().unwrap()));
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
}

#[test]
fn cancelling_kills_a_long_running_command_at_once() {
    let p = project("cancel-long");
    let script = "turns:\n  - calls: [{tool: run_command, args: {command: 'sleep 60', timeout_secs: 100}}]\n";
    let mut child = loop_run(&p, script, &[])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command is about to run (its intent is recorded).
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut stdout = String::new();
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "ended early: {stdout}"
        );
        stdout.push_str(&line);
        if line.contains("\"kind\":\"intent\"") {
            break;
        }
    }
    // A running task's workspace is not pulled away from under it.
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let id = first["task_id"].as_str().unwrap();
    let discard = task_cmd("discard", id, &p);
    assert_eq!(discard.status.code(), Some(2), "{}", text(&discard));
    assert!(text(&discard).contains("is running"), "{}", text(&discard));
    assert!(shared::workspace_of(&p, id).exists());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = std::time::Instant::now();
    Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    stdout.push_str(&rest);
    child.wait().unwrap();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    let observed = stdout
        .lines()
        .find(|l| l.contains("\"kind\":\"observed\""))
        .unwrap();
    assert!(
        observed.contains("cancelled; the command's process tree was killed"),
        "{observed}"
    );
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["outcome"]["kind"], "cancelled", "{stdout}");
}

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The app project as a git repository with one commit.
fn git_project(name: &str) -> PathBuf {
    let p = project(name);
    std::fs::write(p.join("app.py"), "print('draft')\n").unwrap();
    sh(
        &p,
        "git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm base",
    );
    p
}

const HONEST: &str = "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: prints hello}}\n";

#[test]
fn a_git_task_works_in_a_worktree_and_its_change_set_applies_and_undoes_exactly() {
    let p = git_project("git-apply");
    std::fs::write(p.join("notes.txt"), "my uncommitted notes\n").unwrap();
    let status_before = sh(&p, "git status --porcelain");
    let head_before = sh(&p, "git rev-parse HEAD");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    // The base checkout: same HEAD, same status (.loop ignores itself), same bytes.
    assert_eq!(sh(&p, "git rev-parse HEAD"), head_before);
    assert_eq!(sh(&p, "git status --porcelain"), status_before);
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('draft')\n"
    );
    let id = task_id(&r);
    assert!(sh(&p, "git branch --list").contains(&format!("loop/{id}")));
    // The receipt names the base commit and the patch.
    let stmt = statement_of(&r.receipt);
    // The baseline shows what held before the work: `prints-hello` did not.
    let baseline = &stmt["predicate"]["baseline"];
    assert_eq!(baseline["criteria"][0]["id"], "prints-hello");
    assert_eq!(baseline["criteria"][0]["passed"], false);
    assert_eq!(
        stmt["predicate"]["verification"]["criteria"][0]["passed"],
        true
    );
    let cs = &stmt["predicate"]["change_set"];
    assert_eq!(cs["base_commit"].as_str().unwrap(), head_before.trim());
    assert_eq!(cs["files"][0]["path"], "app.py");
    let patch =
        std::fs::read_to_string(r.receipt.with_file_name(cs["patch"].as_str().unwrap())).unwrap();
    assert!(
        patch.contains("-print('draft')\n+print('hello')"),
        "{patch}"
    );

    let before = std::fs::read(p.join("app.py")).unwrap();
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('hello')\n"
    );
    // Applied: the task's branch is gone, its workspace stays (replay).
    assert!(!sh(&p, "git branch --list").contains(&format!("loop/{id}")));
    assert_eq!(sh(&p, "git worktree list").lines().count(), 2);
    // The apply is recorded in a signed addendum about the receipt; the receipt is untouched.
    let receipt_bytes = std::fs::read(&r.receipt).unwrap();
    let addendum_path = r.receipt.with_file_name(format!("{id}.addendum-1.json"));
    let addendum: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&addendum_path).unwrap()).unwrap();
    assert_eq!(addendum["signatures"].as_array().unwrap().len(), 1);
    let stmt = statement_of(&addendum_path);
    assert_eq!(stmt["predicate"]["event"], "applied");
    // The addendum names the receipt by its signed payload's digest (the
    // same envelope saved again another way is still the same receipt).
    let envelope: serde_json::Value = serde_json::from_slice(&receipt_bytes).unwrap();
    let payload = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(envelope["payload"].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(
        stmt["subject"][0]["digest"]["sha256"].as_str().unwrap(),
        sha256sum(&payload)
    );
    let v = verify(&r.receipt);
    assert_eq!(v.status.code(), Some(0));
    assert!(!text(&v).contains("WARNING"), "{}", text(&v));
    // Addenda that count for nothing are said, not silently skipped: one
    // that is not an envelope, one whose signature no longer covers it.
    let junk = r.receipt.with_file_name(format!("{id}.addendum-7.json"));
    std::fs::write(&junk, "{}").unwrap();
    let forged = r.receipt.with_file_name(format!("{id}.addendum-8.json"));
    let mut tampered = addendum.clone();
    tampered["payload"] = serde_json::Value::String({
        use base64::Engine as _;
        let mut stmt = stmt.clone();
        stmt["predicate"]["event"] = "signing-key-revoked".into();
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&stmt).unwrap())
    });
    std::fs::write(&forged, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let v = verify(&r.receipt);
    let said = text(&v);
    assert_eq!(v.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "addendum   WARNING: {id}.addendum-7.json: not a signed envelope"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "addendum   WARNING: {id}.addendum-8.json: no trusted signature"
        )),
        "{said}"
    );
    std::fs::remove_file(&junk).unwrap();
    std::fs::remove_file(&forged).unwrap();
    let out = task_cmd("undo", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read(p.join("app.py")).unwrap(),
        before,
        "undo restores the exact bytes"
    );
    assert!(
        r.receipt
            .with_file_name(format!("{id}.addendum-2.json"))
            .exists(),
        "the undo is recorded too"
    );
    let out = task_cmd("discard", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!sh(&p, "git branch --list").contains(&format!("loop/{id}")));
    assert_eq!(sh(&p, "git worktree list").lines().count(), 1);
}

/// `loop gc EXTRA --project P`, expected to succeed: what it said.
fn gc_in(p: &Path, extra: &[&str]) -> String {
    let out = loop_bin()
        .arg("gc")
        .args(extra)
        .arg("--project")
        .arg(p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    text(&out)
}

/// `loop list` names each task's branch and the branches of no task;
/// `loop gc` deletes what no task needs (a branch whose task is gone, the
/// scratch of tasks not running) and keeps what one does (the branch and
/// workspace of a verified task not yet applied); `--dry-run` only says.
#[test]
fn gc_removes_what_no_task_needs_and_keeps_what_one_does() {
    let p = git_project("git-gc");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    sh(&p, "git branch loop/t-gone");
    // Workspaces live outside the project, scratch beside them.
    let near = shared::near_of(&p, &id);
    assert!(!near.starts_with(&p), "{}", near.display());
    let scratch = near.join("scratch");
    std::fs::create_dir_all(scratch.join("view")).unwrap();
    std::fs::write(scratch.join("view/x"), vec![b'x'; 4096]).unwrap();
    // A task being prepared (not in the store yet) keeps its scratch.
    const PREPARING: &str = "t-20990101-000000-abcdef";
    std::fs::create_dir_all(p.join(".loop/tasks").join(PREPARING)).unwrap();
    let preparing = near.with_file_name(PREPARING).join("scratch");
    std::fs::create_dir_all(&preparing).unwrap();
    // A workspace whose task was removed from the project by hand is
    // nobody's: gc removes it.
    let orphan = near.with_file_name("t-20990101-000000-0ddba1");
    std::fs::create_dir_all(orphan.join("workspace")).unwrap();
    std::fs::write(orphan.join("workspace/app.py"), "x\n").unwrap();
    let out = loop_bin()
        .args(["list", "--project"])
        .arg(&p)
        .output()
        .unwrap();
    let said = text(&out);
    assert!(said.contains(&format!("[loop/{id}]")), "{said}");
    assert!(
        said.contains("branches of no task here: loop/t-gone (`loop gc` deletes them)"),
        "{said}"
    );
    let gc = |extra: &[&str]| gc_in(&p, extra);
    let said = gc(&["--dry-run"]);
    assert!(
        said.contains("would delete branch loop/t-gone: no such task here"),
        "{said}"
    );
    assert!(
        said.contains(&format!("would remove {}", scratch.display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("would remove {}", orphan.display())),
        "{said}"
    );
    assert!(sh(&p, "git branch --list").contains("loop/t-gone") && scratch.exists());
    assert!(orphan.exists());
    let said = gc(&[]);
    assert!(
        said.contains("deleted branch loop/t-gone: no such task here"),
        "{said}"
    );
    let branches = sh(&p, "git branch --list");
    assert!(!branches.contains("loop/t-gone"), "{branches}");
    // The verified task's branch and workspace stay: it is not applied.
    assert!(branches.contains(&format!("loop/{id}")), "{branches}");
    assert!(!scratch.exists());
    assert!(!orphan.exists(), "{}", orphan.display());
    assert!(preparing.exists(), "the scratch of a task being prepared");
    assert!(near.join("workspace/app.py").exists());
    // Nothing of a task is in the project's tree but its records.
    assert!(!p.join(".loop/tasks").join(&id).join("workspace").exists());
    let said = gc(&[]);
    assert!(said.contains("nothing to collect"), "{said}");
    // Applied, then its branch is gone; the workspace stays for replay.
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!sh(&p, "git branch --list").contains(&format!("loop/{id}")));
    let out = loop_bin().arg("replay").arg(&r.receipt).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// A task removed from the project by hand (its `.loop/tasks/ID` gone)
/// leaves a worktree and a branch: one `loop gc` removes the worktree,
/// prunes git's record of it and deletes the branch, as its `--dry-run`
/// says it will (before, git's record was never pruned, as its dry run
/// speaks on stderr, and the branch stayed for ever); another task's
/// branch and workspace stay.
#[test]
fn gc_deletes_the_branch_of_a_task_removed_by_hand_in_one_run() {
    let p = git_project("git-gc-hand");
    let (gone, kept) = (run_script(&p, HONEST, &[]), run_script(&p, HONEST, &[]));
    assert_eq!(gone.outcome["kind"], "verified", "{}", gone.output);
    assert_eq!(kept.outcome["kind"], "verified", "{}", kept.output);
    let (gone, kept) = (task_id(&gone), task_id(&kept));
    let aside = tmpdir("gc-hand-aside");
    std::fs::rename(p.join(".loop/tasks").join(&gone), aside.join(&gone)).unwrap();
    let gc = |extra: &[&str]| gc_in(&p, extra);
    let said = gc(&["--dry-run"]);
    assert!(
        said.contains(&format!("would delete branch loop/{gone}")),
        "{said}"
    );
    let said = gc(&[]);
    assert!(
        said.contains(&format!("deleted branch loop/{gone}")),
        "{said}"
    );
    let branches = sh(&p, "git branch --list");
    assert!(!branches.contains(&format!("loop/{gone}")), "{branches}");
    assert!(branches.contains(&format!("loop/{kept}")), "{branches}");
    let listed = sh(&p, "git worktree list --porcelain");
    assert!(!listed.contains("prunable"), "{listed}");
    assert!(shared::near_of(&p, &kept).join("workspace").is_dir());
    let said = gc(&[]);
    assert!(said.contains("nothing to collect"), "{said}");
    // A worktree of the person's own whose directory is away for now (an
    // unmounted drive) is not pruned by Loop.
    let mine = tmpdir("gc-hand-mine").join("wt");
    sh(
        &p,
        &format!("git worktree add -q {} -b mine", mine.display()),
    );
    let away = mine.with_file_name("wt-away");
    std::fs::rename(&mine, &away).unwrap();
    gc(&[]);
    let listed = sh(&p, "git worktree list --porcelain");
    assert!(listed.contains(&mine.display().to_string()), "{listed}");
}

/// The task workspaces kept for a project no longer where it was (deleted,
/// or moved: they look alike, and a moved project's tasks still use them)
/// are listed by `loop gc --gone-projects` and left; `--forget-project
/// PATH` removes those of that path only (`--dry-run` says so first), and
/// refuses a path where a project still is, touching nothing.
#[test]
fn workspaces_of_a_project_gone_are_listed_and_removed_only_when_named() {
    let script = "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: prints hello}}\n";
    let (keep, gone) = (project("gc-keep"), project("gc-gone"));
    for p in [&keep, &gone] {
        let r = run_script(p, script, &[]);
        assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    }
    let (keep, gone) = (keep.canonicalize().unwrap(), gone.canonicalize().unwrap());
    let root =
        std::env::temp_dir().join(format!("loop-e2e-state-{}-workspaces", std::process::id()));
    // Each project's directory of task workspaces, by the path its marker names.
    let dir_of = |p: &Path| {
        std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|d| {
                std::fs::read_to_string(d.join("project"))
                    .is_ok_and(|m| m == format!("{}\n", p.display()))
            })
    };
    let (keep_dir, gone_dir) = (dir_of(&keep).unwrap(), dir_of(&gone).unwrap());
    std::fs::remove_dir_all(gone.parent().unwrap()).unwrap();
    let gc = |args: &[&str], path: Option<&Path>| {
        let mut c = loop_bin();
        c.arg("gc").args(args);
        if let Some(p) = path {
            c.arg("--forget-project").arg(p);
        }
        let out = c.output().unwrap();
        (out.status.code(), text(&out))
    };
    let (code, said) = gc(&["--gone-projects", "--json"], None);
    assert_eq!(code, Some(0), "{said}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&said).unwrap();
    let was = |v: &serde_json::Value| PathBuf::from(v["was"].as_str().unwrap());
    let mine = listed.iter().find(|g| was(g) == gone).unwrap();
    assert_eq!(PathBuf::from(mine["dir"].as_str().unwrap()), gone_dir);
    assert_eq!(mine["removed"], false);
    assert!(mine["bytes"].as_u64().unwrap() > 0);
    assert!(!listed.iter().any(|g| was(g) == keep), "{said}");
    assert!(gone_dir.is_dir(), "listing removed it");
    // A project is at this path: refused, nothing removed.
    let (code, said) = gc(&[], Some(&keep));
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains(&format!("a project is at {} now", keep.display())),
        "{said}"
    );
    assert!(keep_dir.is_dir());
    let (code, said) = gc(&["--dry-run"], Some(&gone));
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains(&format!("would remove {}", gone_dir.display())),
        "{said}"
    );
    assert!(gone_dir.is_dir());
    let (code, said) = gc(&[], Some(&gone));
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains(&format!("removed {}", gone_dir.display())),
        "{said}"
    );
    assert!(!gone_dir.exists());
    assert!(keep_dir.is_dir(), "another project's were removed too");
    let (code, said) = gc(&[], Some(&gone));
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("no task workspaces in"), "{said}");
    // A path given through a link and `..` names the project as recorded.
    let (keep2, link) = (project("gc-keep2"), tmpdir("gc-link"));
    let r = run_script(&keep2, script, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let keep2 = keep2.canonicalize().unwrap();
    std::os::unix::fs::symlink(keep2.parent().unwrap(), link.join("to")).unwrap();
    let keep2_dir = dir_of(&keep2).unwrap();
    std::fs::remove_dir_all(&keep2).unwrap();
    let (code, said) = gc(&[], Some(&link.join("to/x/../project")));
    assert_eq!(code, Some(0), "{said}");
    assert!(!keep2_dir.exists(), "{said}");
}

#[test]
fn apply_refuses_when_the_project_changed_and_applies_nothing() {
    let p = git_project("git-conflict");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    std::fs::write(p.join("app.py"), "print('the user changed this')\n").unwrap();
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("app.py: the project's file changed since the task started"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('the user changed this')\n"
    );
    // A new commit on the base also refuses.
    sh(&p, "git commit -qam moved");
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("the project's HEAD is"),
        "{}",
        text(&out)
    );
}

#[test]
fn unverified_work_is_never_applied() {
    let p = git_project("git-unverified");
    let r = run_script(
        &p,
        "turns:\n  - calls: [{tool: write_file, args: {path: app.py, content: \"print('bye')\\n\"}}]\n",
        &[],
    );
    assert_eq!(r.outcome["kind"], "lost");
    let id = task_id(&r);
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("not verified"), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('draft')\n"
    );
}

#[test]
fn replay_refuses_a_workspace_that_changed_and_reproduces_failures() {
    let p = project("replay");
    let r = run_script(
        &p,
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('bye')\\n\"}}\n      - {tool: finish, args: {summary: done}}\n",
        &["--max-steps", "1"],
    );
    assert_eq!(r.outcome["kind"], "limit_reached", "{}", r.output);
    let out = loop_bin().arg("replay").arg(&r.receipt).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "a rejected outcome reproduces too: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("recorded fail, replayed fail"),
        "{}",
        text(&out)
    );
    let ws = PathBuf::from(
        r.events.iter().find(|e| e["kind"] == "receipt").unwrap()["workspace"]
            .as_str()
            .unwrap(),
    );
    std::fs::write(ws.join("app.py"), "print('hello')\n").unwrap();
    let out = loop_bin().arg("replay").arg(&r.receipt).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("changed since verification"),
        "{}",
        text(&out)
    );
}

#[test]
fn swapping_ledgers_or_artifacts_between_tasks_is_caught() {
    let p = project("swap");
    let a = run_script(&p, HONEST, &[]);
    let b = run_script(
        &p,
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print( 'hello' )\\n\"}}\n      - {tool: finish, args: {summary: prints hello}}\n",
        &[],
    );
    assert_eq!(a.outcome["kind"], "verified", "{}", a.output);
    assert_eq!(b.outcome["kind"], "verified", "{}", b.output);
    let id = task_id;
    let dir = a.receipt.parent().unwrap();
    let (la, lb) = (
        dir.join(format!("{}.ledger.jsonl", id(&a))),
        dir.join(format!("{}.ledger.jsonl", id(&b))),
    );
    let saved = std::fs::read(&la).unwrap();
    std::fs::copy(&lb, &la).unwrap();
    let out = verify(&a.receipt);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("ledger     BROKEN"), "{}", text(&out));
    std::fs::write(&la, saved).unwrap();
    assert_eq!(verify(&a.receipt).status.code(), Some(0));
    let (aa, ab) = (
        dir.join(format!("{}.artifacts/app.py", id(&a))),
        dir.join(format!("{}.artifacts/app.py", id(&b))),
    );
    let saved = std::fs::read(&aa).unwrap();
    std::fs::copy(&ab, &aa).unwrap();
    let out = verify(&a.receipt);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("artifacts  DIFFER: app.py differs"),
        "{}",
        text(&out)
    );
    std::fs::write(&aa, saved).unwrap();
    assert_eq!(verify(&a.receipt).status.code(), Some(0));
}

/// SHA-256 in hex by coreutils, independent of the project's own hashing.
fn sha256sum(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn rotating_the_key_revokes_old_receipts_through_signed_addenda() {
    let p = project("rotate");
    let state = p.parent().unwrap().join("state");
    let out = loop_run(&p, HONEST, &[])
        .env("LOOP_STATE_DIR", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let receipt = PathBuf::from(last["path"].as_str().unwrap());
    let verify_here = || {
        loop_bin()
            .arg("verify")
            .arg(&receipt)
            .env("LOOP_STATE_DIR", &state)
            .output()
            .unwrap()
    };
    assert_eq!(verify_here().status.code(), Some(0));
    let out = loop_bin()
        .args(["keys", "rotate", "--yes", "--project"])
        .arg(&p)
        .env("LOOP_STATE_DIR", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("1 receipt(s)"), "{}", text(&out));
    let out = verify_here();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("signature  REVOKED"), "{}", text(&out));
    let task = last["task_id"].as_str().unwrap();
    let addendum_path = receipt.with_file_name(format!("{task}.addendum-1.json"));
    let addendum: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&addendum_path).unwrap()).unwrap();
    let stmt = statement_of(&addendum_path);
    assert_eq!(stmt["predicate"]["event"], "signing-key-revoked");
    assert_ne!(
        addendum["signatures"][0]["keyid"], stmt["predicate"]["revoked_keyid"],
        "signed by the new key"
    );
    // Work the revoked key signed is not applied, and the refusal says why.
    let out = loop_bin()
        .args(["apply", task, "--yes", "--project"])
        .arg(&p)
        .env("LOOP_STATE_DIR", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("which `loop keys rotate` revoked"),
        "{}",
        text(&out)
    );
}

#[test]
fn provider_keys_never_reach_the_sandbox_or_the_record() {
    let p = project("keys");
    let script = "turns:\n  - calls: [{tool: run_command, args: {command: \"env; cat /proc/self/environ | tr '\\\\0' '\\\\n'\"}}]\n";
    let rec = p.parent().unwrap().join("keys.jsonl");
    let out = loop_run(&p, script, &["--record", rec.to_str().unwrap()])
        .env("LOOP_OPENAI_API_KEY", "sk-keytest-0123456789abcdef")
        .env("ANTHROPIC_API_KEY", "sk-ant-keytest-0123456789abcdef")
        .output()
        .unwrap();
    let all = text(&out);
    assert!(all.contains("\"tool\":\"run_command\""), "{all}");
    assert!(
        all.contains("PATH="),
        "the command ran and printed its environment: {all}"
    );
    assert!(
        !all.contains("keytest"),
        "a provider key leaked into the run: {all}"
    );
    let recorded = std::fs::read_to_string(&rec).unwrap();
    assert!(!recorded.contains("keytest"));
}

/// Arguments of the wrong type are refused by the tools with the argument
/// named; repeated, the same failing call is a stall.
#[test]
fn mistyped_arguments_are_named_and_repeating_them_is_a_stall() {
    let p = project("mistyped");
    let turn = "  - calls: [{tool: write_file, args: {path: 7, content: x}}]\n";
    let script = format!("turns:\n{}", turn.repeat(6));
    let r = run_script(&p, &script, &[]);
    assert_unverified_but_intact(&r, "lost");
    let observations: Vec<String> = r
        .events
        .iter()
        .filter(|e| e["kind"] == "observed")
        .map(|e| {
            e["observation"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(!observations.is_empty(), "{}", r.output);
    assert!(
        observations
            .iter()
            .all(|o| o.contains("args.path: must be string, got a number")),
        "each refusal names the bad argument: {observations:?}"
    );
    assert!(
        r.outcome["reason"]
            .as_str()
            .unwrap()
            .contains("no progress"),
        "{}",
        r.output
    );
}

#[test]
fn a_recorded_run_replays_to_the_same_outcome_and_a_divergence_stops() {
    let p = project("record");
    let rec = p.parent().unwrap().join("session.jsonl");
    let script = "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: prints hello}}\n";
    let r = run_script(&p, script, &["--record", rec.to_str().unwrap()]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);

    // Replay: same answers, no model.
    let out = loop_bin()
        .arg("run")
        .arg("--task")
        .arg(p.parent().unwrap().join("task.yaml"))
        .arg("--model")
        .arg(format!("replay:{}", rec.display()))
        .arg("--project")
        .arg(&p)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("\"provider\":\"replay\""));

    // A different instruction is a different context: the replay refuses.
    let out = loop_bin()
        .args([
            "run",
            "make app.py print goodbye",
            "--check",
            "true",
            "--allow-vacuous",
            "--model",
        ])
        .arg(format!("replay:{}", rec.display()))
        .arg("--project")
        .arg(&p)
        .arg("--json")
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("replay diverged at exchange 1"), "{all}");
    assert!(all.contains("\"kind\":\"error\""), "{all}");
}

/// `checkpoints.before_apply`: a verified change set is applied only after
/// a person confirms it; without `--yes`, nothing is applied.
#[test]
fn a_checkpoint_before_apply_needs_a_person_to_confirm() {
    let p = project("apply-checkpoint");
    std::fs::write(p.join("app.py"), "print('draft')\n").unwrap();
    std::fs::write(
        p.join("Loopfile.yaml"),
        "checkpoints:\n  before_apply: true\n",
    )
    .unwrap();
    sh(
        &p,
        "git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm base",
    );
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("nothing was applied"), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('draft')\n"
    );
    let out = loop_bin()
        .args(["apply", &id, "--yes", "--project"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('hello')\n"
    );
}

#[test]
fn the_command_line_refuses_what_it_cannot_honour() {
    // A closed pipe ends `loop` quietly (SIGPIPE), never with a panic.
    let dir = tmpdir("pipe");
    let out = Command::new("bash")
        .env("LOOP_STATE_DIR", dir.join("state"))
        .arg("-c")
        .arg(format!(
            "\"{}\" demo --dir \"{}\" | head -1 >/dev/null; echo \"status ${{PIPESTATUS[0]}}\"",
            env!("CARGO_BIN_EXE_loop"),
            dir.join("demo").display()
        ))
        .output()
        .unwrap();
    let all = text(&out);
    assert!(!all.contains("panicked"), "{all}");
    assert!(all.contains("status 141"), "killed by SIGPIPE: {all}");
    // No step at all is not a budget.
    let out = loop_bin()
        .args([
            "run",
            "x",
            "--check",
            "true",
            "--allow-vacuous",
            "--max-steps",
            "0",
            "--project",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--max-steps 0"), "{}", text(&out));
    // Rotating the key for a project that does not exist revokes nothing.
    let state = dir.join("state");
    let keys = |args: &[&str]| {
        loop_bin()
            .args(args)
            .env("LOOP_STATE_DIR", &state)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let before = keys(&["keys", "show"]);
    let out = keys(&[
        "keys",
        "rotate",
        "--yes",
        "--project",
        "/nonexistent/project",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("does not exist; nothing was revoked"),
        "{}",
        text(&out)
    );
    assert_eq!(
        keys(&["keys", "show"]).stdout,
        before.stdout,
        "the key is unchanged"
    );
    // Without a terminal, rotating needs --yes.
    let project = dir.to_str().unwrap().to_string();
    let out = keys(&["keys", "rotate", "--project", &project]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("confirm with --yes"), "{}", text(&out));
    assert_eq!(
        keys(&["keys", "show"]).stdout,
        before.stdout,
        "the key is unchanged"
    );
}

#[test]
fn replay_with_a_relative_receipt_path_reproduces() {
    let dir = tmpdir("replay-relative");
    let demo = loop_bin()
        .args(["demo", "--dir"])
        .arg(dir.join("demo"))
        .output()
        .unwrap();
    assert_eq!(demo.status.code(), Some(0), "{}", text(&demo));
    let project = dir.join("demo/project");
    let receipt = std::fs::read_dir(project.join(".loop/receipts"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".receipt.json"))
        .unwrap();
    let out = loop_bin()
        .arg("replay")
        .arg(format!(".loop/receipts/{receipt}"))
        .current_dir(&project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains(": reproduced"), "{}", text(&out));
}

#[test]
fn the_time_budget_bounds_every_command_and_check() {
    let dir = tmpdir("time-bound");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let script = dir.join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"sleep 30\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = loop_bin()
        .args([
            "run",
            "wait",
            "--check",
            "sleep 30",
            "--timeout",
            "3",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", script.display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["outcome"]["kind"], "limit_reached", "{stdout}");
    assert_eq!(last["outcome"]["limit"], "time", "{stdout}");
    // The command's own 30 s (and the check's) never ran past the 3 s budget;
    // the baseline checks have a budget of their own of the same size.
    assert!(
        took < std::time::Duration::from_secs(15),
        "a 3 s budget took {took:?}: {stdout}"
    );
}

#[test]
fn a_moved_project_still_applies_its_verified_change() {
    let p = git_project("moved");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    let moved = p.with_file_name("project-moved");
    let _ = std::fs::remove_dir_all(&moved);
    std::fs::rename(&p, &moved).unwrap();
    let out = task_cmd("apply", &id, &moved);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(moved.join("app.py")).unwrap(),
        "print('hello')\n"
    );
    let out = task_cmd("undo", &id, &moved);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(moved.join("app.py")).unwrap(),
        "print('draft')\n"
    );
}

#[test]
fn read_only_git_works_in_a_worktree_task_and_its_remotes_stay_unreadable() {
    let p = git_project("git-inside");
    sh(
        &p,
        "git remote add origin https://user:tok3n-s3cret@example.invalid/r.git",
    );
    let script = "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"git status --porcelain; git log --oneline -1; git diff --stat; echo REMOTE=$(git config --get remote.origin.url); git commit --allow-empty -qm x || echo COMMIT-REFUSED\"}}\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: finish, args: {summary: done}}\n";
    let r = run_script(&p, script, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let observed = r
        .events
        .iter()
        .find(|e| e["kind"] == "observed")
        .unwrap()
        .to_string();
    assert!(
        observed.contains("base"),
        "git log reads the repository: {observed}"
    );
    assert!(!observed.contains("not a git repository"), "{observed}");
    assert!(
        !observed.contains("tok3n-s3cret"),
        "the remote's token is not readable: {observed}"
    );
    assert!(observed.contains("REMOTE="), "{observed}");
    assert!(
        observed.contains("COMMIT-REFUSED"),
        "the repository is not writable: {observed}"
    );
    // The user's repository is untouched.
    assert_eq!(sh(&p, "git log --oneline").lines().count(), 1);
}

/// `loop exec` shows the command's output once it has ended, as the kept
/// excerpt in text: where that is not what the command wrote (bytes left
/// out past `--max-output`, bytes that are not UTF-8), stderr says so
/// (before, a cut or re-encoded output passed for a copy); plain text
/// comes out exactly, with no note.
#[test]
fn loop_exec_says_when_what_it_shows_is_not_the_commands_bytes() {
    let dir = tmpdir("exec-bytes");
    let exec = |script: &str, extra: &[&str]| {
        let out = loop_bin()
            .args(["exec", "--workspace"])
            .arg(&dir)
            .args(extra)
            .args(["--", "sh", "-c", script])
            .env_remove("LOOP_LOG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        (
            out.stdout,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (out, err) = exec("printf 'na\\303\\257ve\\n'", &[]);
    assert_eq!(out, "naïve\n".as_bytes());
    assert!(err.is_empty(), "{err}");
    let (out, err) = exec("printf 'a\\377\\376b\\n'", &[]);
    assert_ne!(out, b"a\xff\xfeb\n");
    assert!(
        err.contains("the command's output is shown as text, not byte for byte"),
        "{err}"
    );
    let (out, err) = exec(
        "head -c 5000 /dev/zero | tr '\\0' x",
        &["--max-output", "1000"],
    );
    assert!(out.len() < 1100, "{}", out.len());
    assert!(
        err.contains("4500 of the 5000 bytes of the command's output were left out"),
        "{err}"
    );
    // Piped, an escape sequence passes as the command wrote it; to a
    // terminal (util-linux `script`'s pty), it is made visible, never
    // obeyed: no ESC or BEL of the command's reaches it.
    let (out, _) = exec("printf 'A\\033]0;TITLE\\007B\\n'", &[]);
    assert_eq!(out, b"A\x1b]0;TITLE\x07B\n");
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: util-linux `script` (a pty) is not installed");
        return;
    }
    let line = format!(
        "{} exec --workspace {} -- printf 'A\\033]0;TITLE\\007B\\n'",
        env!("CARGO_BIN_EXE_loop"),
        dir.display()
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("LOOP_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains("A^[]0;TITLE^GB"), "{seen:?}");
    assert!(
        !out.stdout.iter().any(|b| *b == 0x1b || *b == 0x07),
        "{seen:?}"
    );
}

#[test]
fn diagnostics_are_off_by_default_and_on_with_v_or_loop_log() {
    let dir = std::env::temp_dir().join(format!("loop-e2e-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exec = |pre: &[&str], log: Option<&str>| {
        let mut c = loop_bin();
        c.args(pre)
            .args(["exec", "--workspace"])
            .arg(&dir)
            .args(["--", "true"])
            .env_remove("LOOP_LOG");
        if let Some(l) = log {
            c.env("LOOP_LOG", l);
        }
        c.output().unwrap()
    };
    let quiet = exec(&[], None);
    assert_eq!(quiet.status.code(), Some(0));
    assert!(quiet.stderr.is_empty(), "{}", text(&quiet));
    let loud = exec(&["-vv"], None);
    assert_eq!(loud.status.code(), Some(0));
    let err = String::from_utf8_lossy(&loud.stderr);
    assert!(err.contains("sandbox: spawned at"), "{err}");
    // LOOP_LOG picks targets: only the verifier here, so no sandbox phases.
    let picked = exec(&[], Some("loop_verifier=debug"));
    assert!(picked.stderr.is_empty(), "{}", text(&picked));
    // A filter that cannot be read is named; for `loop exec` it is the
    // runtime's failure (125), never mistaken for the command's exit.
    let bad = exec(&[], Some("loop_sandbox=loudest"));
    assert_eq!(bad.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("LOOP_LOG=loop_sandbox=loudest"),
        "{}",
        text(&bad)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn audit_names_the_untracked_environments_and_run_refuses_a_share_it_cannot_read() {
    let dir = tmpdir("audit");
    let project = dir.join("p");
    std::fs::create_dir_all(project.join(".venv/lib")).unwrap();
    std::fs::write(project.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    std::fs::write(project.join(".venv/lib/dep.py"), "X = 1\n").unwrap();
    std::fs::write(project.join("package.json"), "{}\n").unwrap();
    // A link is never shared, whatever it points at.
    std::os::unix::fs::symlink("/etc", project.join("node_modules")).unwrap();
    let out = loop_bin()
        .args(["audit", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shares = v["shares"].as_array().unwrap();
    assert_eq!(shares.len(), 2, "{v}");
    assert_eq!(shares[0][0]["path"], ".venv");
    assert_eq!(shares[0][0]["mode"], "read_only");
    assert_eq!(shares[0][1]["state"], "present");
    assert_eq!(shares[0][1]["files"], 2);
    assert_eq!(shares[1][0]["path"], "node_modules");
    assert_eq!(shares[1][1]["state"], "refused");
    let human = loop_bin()
        .args(["audit", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&human.stdout);
    assert!(
        said.contains("overlay: copy-on-write, the task's writes stay in the task"),
        "{said}"
    );
    assert!(said.contains("NOT SHARED: a symbolic link"), "{said}");
    // A share the Loopfile cannot say how to make: the run is refused,
    // naming where, before anything is created.
    std::fs::write(
        project.join("Loopfile.yaml"),
        "workspace:\n  share:\n    - path: .venv\n      mode: writable\n",
    )
    .unwrap();
    let run = loop_bin()
        .args([
            "run",
            "x",
            "--check",
            "true",
            "--allow-vacuous",
            "--model",
            "scripted:none.yaml",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(
        text(&run).contains("Loopfile.yaml:4:13: unknown share mode `writable`"),
        "{}",
        text(&run)
    );
    assert!(!project.join(".loop/tasks").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `max_diff_lines` bounds each step, not the task: two steps of 200 new
/// lines each both land under a limit of 250, and one step of 300 does not.
#[test]
fn the_changed_lines_limit_is_per_step() {
    let p = project("diff-lines-per-step");
    let lines = |n: usize| (0..n).map(|i| format!("x{i} = {i}\\n")).collect::<String>();
    let script = format!(
        "turns:
  - calls:
      - {{tool: write_file, args: {{path: a.py, content: \"{}\"}}}}
  - calls:
      - {{tool: write_file, args: {{path: b.py, content: \"{}\"}}}}
  - calls:
      - {{tool: write_file, args: {{path: c.py, content: \"{}\"}}}}
  - calls:
      - {{tool: write_file, args: {{path: app.py, content: \"print('hello')\\n\"}}}}
  - calls:
      - {{tool: finish, args: {{summary: done}}}}
",
        lines(200),
        lines(200),
        lines(300)
    );
    let r = run_script(&p, &script, &[]);
    let observed: Vec<&serde_json::Value> = r
        .events
        .iter()
        .filter(|e| e["kind"] == "observed")
        .map(|e| &e["observation"])
        .collect();
    assert_eq!(observed[0]["status"], "ok", "{}", r.output);
    assert_eq!(observed[1]["status"], "ok", "{}", r.output);
    assert_eq!(observed[2]["status"], "refused", "{}", r.output);
    assert_eq!(observed[2]["rule"], "limit: max_diff_lines");
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
}

/// The demo works in the directory it makes, never in a repository around
/// it: run inside a git checkout, the checkout gets no `.loop/` and no
/// branch, and the demo is still verified.
#[test]
fn the_demo_inside_a_git_checkout_leaves_the_checkout_alone() {
    let repo = tmpdir("demo-in-repo");
    for args in [
        vec!["init", "-q"],
        vec!["commit", "-q", "--allow-empty", "-m", "start"],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = loop_bin()
        .args(["demo", "--dir"])
        .arg(repo.join("d"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("■ verified"), "{}", text(&out));
    assert!(!repo.join(".loop").exists(), "the checkout got a .loop/");
    assert!(repo.join("d/project/.loop").is_dir());
    let branches = Command::new("git")
        .args(["branch", "--list", "loop/*"])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&branches.stdout).trim(), "");
}

/// `loop audit --json` of `project` with `state` as the state directory
/// (no signing key from the environment): its score, and its point `name`.
fn audit_point(state: &Path, project: &Path, name: &str) -> (u64, serde_json::Value) {
    let out = loop_bin()
        .env("LOOP_STATE_DIR", state)
        .env_remove("LOOP_SIGNING_KEY")
        .env_remove("LOOP_SIGNING_KEY_FILE")
        .args(["audit", "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit --json: {e}\n{}", text(&out)));
    let point = v["readiness"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["point"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} point: {v}"));
    (v["readiness"]["score"].as_u64().unwrap(), point)
}

/// `loop audit` and `loop doctor` look for the signing key where the
/// runtime keeps it: before the first key there is none, and after
/// following audit's own hint (`loop keys show`) the point holds and both
/// name the file the key is in.
#[test]
fn audit_and_doctor_find_the_signing_key_where_it_is_kept() {
    let dir = tmpdir("key-where");
    let project = dir.join("p");
    std::fs::create_dir_all(&project).unwrap();
    let state = dir.join("state");
    let point = |project: &Path| audit_point(&state, project, "signing key");
    let (before, p) = point(&project);
    assert_eq!(p["ok"], false, "{p}");
    // Audit's own hint makes the key.
    let shown = loop_bin()
        .env("LOOP_STATE_DIR", &state)
        .env_remove("LOOP_SIGNING_KEY")
        .env_remove("LOOP_SIGNING_KEY_FILE")
        .args(["keys", "show"])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", text(&shown));
    let key = state.join("keys/signing.key");
    assert!(key.is_file(), "the key is kept at {}", key.display());
    let (after, p) = point(&project);
    assert_eq!(p["ok"], true, "{p}");
    assert_eq!(p["detail"], key.display().to_string());
    assert_eq!(after, before + 1, "following the hint raises the score");
    let doctor = loop_bin()
        .env("LOOP_STATE_DIR", &state)
        .env_remove("LOOP_SIGNING_KEY")
        .env_remove("LOOP_SIGNING_KEY_FILE")
        .args(["doctor", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&doctor.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}\n{}", text(&doctor)));
    assert_eq!(v["signing_key"], key.display().to_string(), "{v}");
    // Its keys are the labels in snake case, a yes/no a boolean.
    for (k, _) in v.as_object().unwrap() {
        assert!(
            !k.contains("__") && !k.ends_with('_') && k == &k.to_lowercase(),
            "doctor key {k}: {v}"
        );
    }
    for key in ["fresh_proc", "user_ns", "namespaces", "seccomp"] {
        assert!(v[key].is_boolean(), "{key}: {v}");
    }
    assert!(v["landlock"].is_u64(), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// After `loop discard`, an apply or a second discard is a usage error
/// (exit 2) that says the workspace was discarded and what to do, never a
/// raw "No such file" or a git failure; the honest order — apply, then
/// discard — still works and discarding once succeeds.
#[test]
fn a_discarded_task_says_so_when_applied_or_discarded_again() {
    let p = git_project("git-discarded");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    let out = task_cmd("discard", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for cmd in ["apply", "discard"] {
        let out = task_cmd(cmd, &id, &p);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {said}");
        assert!(
            said.contains(&format!("task {id}'s workspace was discarded")),
            "{cmd}: {said}"
        );
        assert!(said.contains("run the task again"), "{cmd}: {said}");
        assert!(!said.contains("os error"), "{cmd}: {said}");
    }
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('draft')\n",
        "nothing was applied"
    );
    // The honest order: a second task applied, then discarded.
    let r = run_script(&p, HONEST, &[]);
    let id = task_id(&r);
    let out = task_cmd("apply", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = task_cmd("discard", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('hello')\n"
    );
}

/// A project copied with its `.git` and `.loop` (`cp -r`) holds the
/// original's record of a task's worktree: `loop discard` there refuses
/// (exit 2) naming where the branch is checked out, and touches nothing;
/// in the original project the same discard succeeds.
#[test]
fn discard_in_a_copy_of_the_project_refuses_and_leaves_the_original_alone() {
    let p = git_project("git-discard-copy");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    let copy = p.with_file_name("git-discard-copy-cp");
    let _ = std::fs::remove_dir_all(&copy);
    let cp = std::process::Command::new("cp")
        .arg("-r")
        .arg(&p)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let ws = p.join(format!(".loop/tasks/{id}/workspace.json"));
    let recorded: serde_json::Value = serde_json::from_slice(&std::fs::read(&ws).unwrap()).unwrap();
    let workspace = std::path::PathBuf::from(recorded["path"].as_str().unwrap());
    assert!(workspace.join("app.py").is_file());
    let out = task_cmd("discard", &id, &copy);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!(
            "its branch `loop/{id}` is checked out by the worktree at"
        )) && said.contains("nothing was discarded"),
        "{said}"
    );
    // The original's workspace and branch are untouched, and its discard works.
    assert!(workspace.join("app.py").is_file());
    let out = task_cmd("discard", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!workspace.exists());
    let _ = std::fs::remove_dir_all(&copy);
}

/// `loop list` in a directory where nothing was ever run lists nothing
/// and makes nothing there (no `.loop/`); a project that cannot be
/// written (as an unprivileged user, a directory that is not theirs) is a
/// usage error saying where the runtime keeps its tasks, not an internal
/// failure. The honest case — a run in a project one can write — is every
/// other test here.
#[test]
fn listing_makes_nothing_and_an_unwritable_project_is_said_plainly() {
    let dir = tmpdir("list-nothing");
    let plain = dir.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let out = loop_bin()
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env_remove("LOOP_STORE_URL")
        .args(["list", "--json", "--project"])
        .arg(&plain)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert!(!plain.join(".loop").exists(), "list made .loop/");
    // Nor does asking for a task by its id there.
    let out = loop_bin()
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env_remove("LOOP_STORE_URL")
        .args(["status", "t-20260101-000000-abcdef", "--project"])
        .arg(&plain)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("no task"), "{}", text(&out));
    assert!(!plain.join(".loop").exists(), "status made .loop/");
    if !shared::can_drop_privileges() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = dir.join("s.yaml");
    std::fs::write(&script, HONEST).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={}", shared::NOBODY),
            &format!("--regid={}", shared::NOBODY),
            "--clear-groups",
            "--",
            "env",
        ])
        .arg(format!(
            "LOOP_STATE_DIR={}",
            std::env::temp_dir()
                .join(format!("loop-nobody-{}", std::process::id()))
                .display()
        ))
        .arg(shared::shared_binary())
        .args(["run", "x", "--check", "true", "--allow-vacuous", "--model"])
        .arg(format!("scripted:{}", script.display()))
        .arg("--project")
        .arg(&plain)
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("cannot create"), "{said}");
    assert!(said.contains("run in a project you can write to"), "{said}");
    assert!(!plain.join(".loop").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A subcommand mistyped past what clap suggests (`loop rn`) gets a
/// "did you mean"; one clap already suggests is not said twice; nonsense
/// gets no guess.
#[test]
fn a_mistyped_subcommand_is_answered_with_the_nearest() {
    let said = |args: &[&str]| {
        let out = loop_bin().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = said(&["rn"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("did you mean `loop run`?"), "{err}");
    let (_, err) = said(&["rn", "--json"]);
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert!(
        v["error"]["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("did you mean `loop run`?"),
        "{v}"
    );
    let (code, err) = said(&["lst"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.matches("list").count(), 1, "said once: {err}");
    let (code, err) = said(&["zzzzzzzz"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!err.contains("did you mean"), "{err}");
}

/// A run's last lines say what comes next: a verified change is to be
/// looked at and applied (naming the task), a task that ran out of steps
/// can be given more; a run that simply failed is not offered either.
#[test]
fn a_run_ends_by_saying_what_comes_next() {
    let p = git_project("next-step");
    let run = |extra: &[&str], script: &str| {
        let c = loop_run(&p, script, extra);
        // For a person: the same command without --json.
        let args: Vec<_> = c
            .get_args()
            .filter(|a| *a != "--json")
            .map(|a| a.to_owned())
            .collect();
        let out = loop_bin().args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = run(&[], HONEST);
    let id = said
        .lines()
        .find_map(|l| l.strip_prefix("receipt "))
        .map(|p| {
            Path::new(p.trim())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .trim_end_matches(".receipt.json")
                .to_string()
        })
        .unwrap_or_else(|| panic!("no receipt line: {said}"));
    assert!(
        said.contains(&format!(
            "next    `loop diff {id}` shows the change; `loop apply {id}` puts it in the project"
        )),
        "{said}"
    );
    // One step, and the model never finishes: the step limit.
    let stubborn = "turns:\n  - calls:\n      - {tool: read_file, args: {path: app.py}}\n";
    let said = run(&["--max-steps", "1"], stubborn);
    assert!(
        said.contains("--add-steps 10` goes on from where it stopped"),
        "{said}"
    );
    assert!(!said.contains("loop apply"), "{said}");
    // Said in words, not the stored name.
    assert!(said.contains("■ limit reached (steps): "), "{said}");
    assert!(!said.contains("limit_reached{"), "{said}");
}

/// The project's HEAD moved since the task began: with the files it
/// changes untouched, the refusal names `--onto-head`, which then applies
/// it on the new HEAD; where a commit changed one of its files, the
/// refusal says to merge by hand, and `--onto-head` changes nothing.
#[test]
fn apply_onto_a_moved_head_only_when_its_files_are_untouched_and_asked() {
    let p = git_project("git-onto-head");
    let r = run_script(&p, HONEST, &[]);
    assert_eq!(r.outcome["kind"], "verified", "{}", r.output);
    let id = task_id(&r);
    // An unrelated commit moves HEAD.
    std::fs::write(p.join("NOTES.md"), "notes\n").unwrap();
    sh(&p, "git add NOTES.md && git commit -qm notes");
    let out = task_cmd("apply", &id, &p);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("`loop apply {id} --onto-head` applies it on")),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('draft')\n"
    );
    let out = loop_bin()
        .args(["apply", &id, "--onto-head", "--project"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('hello')\n"
    );
    // A second task, then a commit that changes the file it changes.
    let task_cmd_ok = task_cmd("undo", &id, &p);
    assert_eq!(task_cmd_ok.status.code(), Some(0), "{}", text(&task_cmd_ok));
    let r = run_script(&p, HONEST, &[]);
    let id = task_id(&r);
    std::fs::write(p.join("app.py"), "print('someone else')\n").unwrap();
    sh(&p, "git commit -qam theirs");
    let out = loop_bin()
        .args(["apply", &id, "--onto-head", "--project"])
        .arg(&p)
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("files it changes were changed since"),
        "{said}"
    );
    assert!(
        said.contains(&format!("`loop diff {id} | git apply -3`")),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(p.join("app.py")).unwrap(),
        "print('someone else')\n"
    );
}

/// Following a task that works quietly says so after a while, and Ctrl-C
/// stops the following, not the task: it says the task goes on and how to
/// watch it again, exits 130, and the task ends as it would have.
#[test]
fn ctrl_c_in_logs_follow_leaves_the_task_running_and_says_so() {
    let p = git_project("follow-ctrl-c");
    let slow = "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"print('hello')\\n\"}}\n      - {tool: run_command, args: {command: sleep 8}}\n      - {tool: finish, args: {summary: prints hello}}\n";
    let run = loop_run(&p, slow, &[])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let id = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no task"
        );
        let out = loop_bin()
            .args(["list", "--json", "--project"])
            .arg(&p)
            .output()
            .unwrap();
        if let Some(l) = String::from_utf8_lossy(&out.stdout).lines().next() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            break v["id"].as_str().unwrap().to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let follow = loop_bin()
        .args(["logs", &id, "--follow", "--project"])
        .arg(&p)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Into the quiet `sleep 8`, past the 5 s the follower waits to say so.
    std::thread::sleep(std::time::Duration::from_secs(7));
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(follow.id() as i32, libc::SIGINT);
    }
    let out = follow.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("nothing new recorded for 5 s"), "{err}");
    assert!(
        err.contains(&format!("stopped following; task {id} goes on")),
        "{err}"
    );
    let run = run.wait_with_output().unwrap();
    assert_eq!(run.status.code(), Some(0), "the task ended verified");
}

/// `loop init` protects CI configuration always (a task must not create
/// a workflow: a creation guard audit counts though it matches nothing)
/// and the licence only where there is one, so `loop audit` never takes a
/// point off for what init wrote.
#[test]
fn init_protects_what_is_there_and_audit_agrees() {
    for (name, licence) in [("init-bare", false), ("init-licence", true)] {
        let dir = tmpdir(name);
        let p = dir.join("p");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("app.py"), "print('hi')\n").unwrap();
        if licence {
            std::fs::write(p.join("LICENSE"), "MIT\n").unwrap();
        }
        let out = loop_bin()
            .env("LOOP_STATE_DIR", dir.join("state"))
            .args(["init", "--project"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let written = std::fs::read_to_string(p.join("Loopfile.yaml")).unwrap();
        let want = if licence {
            "protected: [\".github/**\", \".gitlab-ci.yml\", \"LICENSE*\"]"
        } else {
            "protected: [\".github/**\", \".gitlab-ci.yml\"]"
        };
        assert!(written.contains(want), "{written}");
        let (_, point) = audit_point(&dir.join("state"), &p, "protected paths");
        assert_eq!(point["ok"], true, "{point}");
        // Said for what they are: kept from being created, not matching.
        let said = if licence {
            "every declared glob matches: LICENSE*; kept from being created: .github/**, .gitlab-ci.yml"
        } else {
            "kept from being created: .github/**, .gitlab-ci.yml"
        };
        assert_eq!(point["detail"], said, "{point}");
        // A glob written by hand that matches nothing is still flagged.
        std::fs::write(
            p.join("Loopfile.yaml"),
            written.replace(want, "protected: [\".github/**\", \"docs/**\"]"),
        )
        .unwrap();
        let (_, point) = audit_point(&dir.join("state"), &p, "protected paths");
        assert_eq!(point["ok"], false, "{point}");
        assert_eq!(point["detail"], "matching nothing here: docs/**", "{point}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// An interrupted task is not discarded from under a resume: discard
/// refuses it until it has ended (here `loop cancel` ends it, with its
/// receipt), then discards it; and a discarded task is never resumed.
#[test]
fn an_interrupted_task_ends_before_it_is_discarded_and_is_never_resumed_after() {
    let p = git_project("discard-interrupted");
    let slow = "turns:\n  - calls:\n      - {tool: run_command, args: {command: sleep 30}}\n      - {tool: finish, args: {summary: done}}\n";
    let mut run = loop_run(&p, slow, &[])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let id = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no task"
        );
        let out = loop_bin()
            .args(["list", "--json", "--project"])
            .arg(&p)
            .output()
            .unwrap();
        let running = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["running"] == true);
        if let Some(v) = running {
            break v["id"].as_str().unwrap().to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    let out = task_cmd("discard", &id, &p);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("task {id} is interrupted")),
        "{said}"
    );
    // The honest order: end it, then discard it.
    let out = task_cmd("cancel", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = task_cmd("discard", &id, &p);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = task_cmd("resume", &id, &p);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("was discarded"), "{said}");
}

#[test]
fn verify_and_replay_take_a_task_id_or_last_inside_its_project() {
    let dir = tmpdir("verify-by-id");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    let run = shared::run_scripted(
        &dir,
        &project,
        "hello",
        (
            "instruction: write app.py\ncriteria:\n  - id: app\n    checks:\n      - run: grep -q hello app.py\n",
            HONEST,
        ),
    );
    assert_eq!(run.outcome(), "verified", "{}", text(&run.out));
    let id = run.id().to_string();
    for (args, code) in [
        (vec!["verify", "last"], 0),
        (vec!["verify", &id[..12]], 0),
        (vec!["replay", "last"], 0),
        (vec!["verify", "nope"], 2),
    ] {
        let out = loop_bin()
            .env("LOOP_STATE_DIR", dir.join("state"))
            .args(&args)
            .current_dir(&project)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        if code == 2 {
            assert!(
                text(&out).contains("nope: no such receipt"),
                "{}",
                text(&out)
            );
        }
    }
}
