//! `loop serve` and `loop tokens` as a person runs them: a token made once,
//! a task started over HTTP and seen by `loop status` (one store), and
//! SIGTERM ending the server with the task left interrupted — the next
//! `loop serve` takes it up and it ends verified.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{loop_in, text};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SCRIPT: &str = "turns:
  - calls:
      - {tool: run_command, args: {command: \"sleep 3 && echo once >> slow.txt\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

fn get(url: &str, token: &str) -> serde_json::Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .get(url)
        .header("Authorization", &format!("Bearer {token}"))
        .call()
        .unwrap();
    serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
}

fn status(home: &Path, project: &Path, id: &str) -> serde_json::Value {
    let out = loop_in(home)
        .args(["status", id, "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)))
}

#[test]
fn a_served_task_is_the_clis_too_and_survives_a_restart_of_the_server() {
    survives_a_restart("serve-restart", &[]);
}

/// The server's exit goes on for a while after it closed its spawner
/// (which kills the running command), as on a loaded machine: the task's
/// thread, still running, must not record that kill as the command's
/// result, or the next server would take the command for done.
#[cfg(feature = "fault-injection")]
#[test]
fn a_command_cut_short_by_the_servers_exit_runs_again_once_resumed() {
    survives_a_restart("serve-slow-exit", &[("LOOP_FAULT_SLOW_EXIT_MS", "1500")]);
}

/// A task started over HTTP, seen by the command line, left interrupted
/// by SIGTERM to a server started with `env`, and taken up to its end by
/// the next server: its interrupted command run again, once.
fn survives_a_restart(name: &str, env: &[(&str, &str)]) {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    let token = shared::token_for(&home, &project, "alice");
    // Only the hash is kept: the token is nowhere in the store.
    let db = std::fs::read(project.join(".loop/loop.db")).unwrap();
    assert!(
        !db.windows(token.len()).any(|w| w == token.as_bytes()),
        "the token is stored"
    );
    let (server, url) = shared::serve(&home, &project, env, &[]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .post(&format!("{url}/api/v1/tasks"))
        .header("Authorization", &format!("Bearer {token}"))
        .content_type("application/json")
        .send(
            serde_json::json!({"instruction": "slow", "checks": ["test -f slow.txt"], "model": "scripted:script.yaml"})
                .to_string(),
        )
        .unwrap();
    let body = resp.body_mut().read_to_string().unwrap();
    assert_eq!(resp.status().as_u16(), 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The command line sees it in the same store, running (once it is
    // prepared: the answer came first, and the command line says so).
    let start = Instant::now();
    loop {
        let out = loop_in(&home)
            .args(["status", &id, "--json", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        if !out.status.success() {
            assert!(
                text(&out).contains("waits for its preparation by `loop serve`"),
                "{}",
                text(&out)
            );
            assert!(start.elapsed() < Duration::from_secs(30), "{}", text(&out));
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let s = status(&home, &project, &id);
        if s["running"] == true && s["entries"].as_u64().unwrap_or(0) >= 4 {
            assert_eq!(s["owner"], "alice", "{s}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGTERM: the server ends at once, even with an event stream of the
    // running task open, and the task is left to resume.
    let stream_url = format!("{url}/api/v1/tasks/{id}/stream");
    let stream_token = token.clone();
    let reader = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent
            .get(&stream_url)
            .header("Authorization", &format!("Bearer {stream_token}"))
            .call()
            .unwrap();
        let _ = r.body_mut().read_to_string();
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let code = shared::stop(server);
    assert!(code.success(), "{code:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let _ = reader.join();
    let s = status(&home, &project, &id);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(s["outcome"].is_null(), "SIGTERM ended the task: {s}");
    // The next server takes it up.
    let (server, url) = shared::serve(&home, &project, &[], &[]);
    let start = Instant::now();
    let ended = loop {
        let v = get(&format!("{url}/api/v1/tasks/{id}"), &token);
        if v["outcome"].is_string() {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(ended["outcome"], "verified", "{ended}");
    // The command the first server was running when it stopped ran to its
    // end once, in the second.
    let slow = shared::workspace_of(&project, &id).join("slow.txt");
    assert_eq!(std::fs::read_to_string(&slow).unwrap(), "once\n");
    shared::stop(server);
    let out = loop_in(&home)
        .args(["logs", &id, "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(text(&out).contains("resumed"), "{}", text(&out));
}

#[test]
fn a_signed_webhook_starts_the_triggers_task_once_and_its_ledger_says_so() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-hook");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(
        project.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: ci.txt, content: green}}\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: scripted:script.yaml\ntriggers:\n  - name: ci-failed\n    webhook: {secret_env: LOOP_TEST_HOOK_SECRET, style: github, owner: ci}\n    task: {instruction: \"Make CI pass\", checks: [\"test -f ci.txt\"]}\n",
    )
    .unwrap();
    let (server, url) = shared::serve(
        &home,
        &project,
        &[("LOOP_TEST_HOOK_SECRET", "s3cret-s3cret-s3cret")],
        &[],
    );
    let body = br#"{"action":"completed","workflow_run":{"conclusion":"failure"}}"#;
    let sign = |key: &[u8], b: &[u8]| {
        format!(
            "sha256={}",
            loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(key, b))
        )
    };
    let post = |name: &str, sig: &str, delivery: &str| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut r = agent
            .post(&format!("{url}/api/v1/hooks/{name}"))
            .header("X-Hub-Signature-256", sig)
            .header("X-GitHub-Delivery", delivery)
            .header("X-GitHub-Event", "workflow_run")
            .send(&body[..])
            .unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().unwrap_or_default())
    };
    // Signed with another key, or for a body that differs: refused.
    let (code, said) = post("ci-failed", &sign(b"wrong", body), "d-1");
    assert_eq!(code, 401, "{said}");
    let (code, said) = post("ci-failed", &sign(b"s3cret-s3cret-s3cret", b"{}"), "d-1");
    assert_eq!(code, 401, "{said}");
    let (code, said) = post("nope", &sign(b"s3cret-s3cret-s3cret", body), "d-1");
    assert_eq!(code, 404, "{said}");
    // Signed: a task, owned by the trigger's owner.
    let (code, said) = post("ci-failed", &sign(b"s3cret-s3cret-s3cret", body), "d-1");
    assert_eq!(code, 202, "{said}");
    let id = serde_json::from_str::<serde_json::Value>(&said).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The same delivery again: refused, nothing started; nor under a new
    // id (the same signed request is the same request).
    let (code, said) = post("ci-failed", &sign(b"s3cret-s3cret-s3cret", body), "d-1");
    assert_eq!(code, 409, "{said}");
    let (code, said) = post("ci-failed", &sign(b"s3cret-s3cret-s3cret", body), "d-2");
    assert_eq!(code, 409, "{said}");
    let start = Instant::now();
    let ended = loop {
        let s = status(&home, &project, &id);
        if s["outcome"].is_string() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    shared::stop(server);
    assert_eq!(ended["outcome"], "verified", "{ended}");
    assert_eq!(ended["owner"], "ci", "{ended}");
    let list = loop_in(&home)
        .args(["list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(
        shared::json_lines(&list).len(),
        1,
        "one task for one delivery: {}",
        text(&list)
    );
    // The delivery is in the ledger's genesis, signed into the receipt.
    let logs = loop_in(&home)
        .args(["logs", &id, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let genesis = &shared::json_lines(&logs)[0];
    let t = &genesis["trigger"];
    assert_eq!(t["name"], "ci-failed", "{genesis}");
    assert_eq!(t["kind"], "webhook");
    assert_eq!(t["delivery"], "d-1");
    assert_eq!(t["event"], "workflow_run");
    assert_eq!(
        t["body_sha256"],
        loop_protocol::hash::sha256_hex(body).as_str()
    );
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn junk_deliveries_neither_grow_the_server_nor_lock_the_real_sender_out() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-hook-junk");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(
        project.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: ci.txt, content: green}}\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: scripted:script.yaml\ntriggers:\n  - name: ci-failed\n    webhook: {secret_env: LOOP_TEST_HOOK_SECRET, style: github, owner: ci}\n    task: {instruction: \"Make CI pass\", checks: [\"test -f ci.txt\"]}\n",
    )
    .unwrap();
    let (server, url) = shared::serve(
        &home,
        &project,
        &[("LOOP_TEST_HOOK_SECRET", "s3cret-s3cret-s3cret")],
        &["--rate", "30"],
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let body = br#"{"action":"completed"}"#;
    let post = |name: &str, sig: &str, delivery: &str| {
        agent
            .post(&format!("{url}/api/v1/hooks/{name}"))
            .header("X-Hub-Signature-256", sig)
            .header("X-GitHub-Delivery", delivery)
            .header("X-GitHub-Event", "workflow_run")
            .send(&body[..])
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    let sign = |b: &[u8]| {
        format!(
            "sha256={}",
            loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(
                b"s3cret-s3cret-s3cret",
                b
            ))
        )
    };
    // Forty unsigned deliveries to the real trigger, over its rate of 30:
    // refused as unauthenticated, never counted against the trigger.
    for i in 0..40 {
        assert_eq!(post("ci-failed", "sha256=00", &format!("junk-{i}")), 401);
    }
    // The real sender, signed: taken.
    assert_eq!(post("ci-failed", &sign(body), "real-1"), 202);
    // Names nobody configured, long and all different: the server keeps
    // none of them (RSS stays within a few MiB) and, past the address's
    // allowance, answers 429 before any work.
    let pid = server.id();
    let before = rss_kib(pid);
    let long = "n".repeat(30 * 1024);
    let mut codes = std::collections::BTreeMap::new();
    for i in 0..1500 {
        *codes
            .entry(post(&format!("{long}{i}"), "sha256=00", "x"))
            .or_insert(0) += 1;
    }
    let grew = rss_kib(pid).saturating_sub(before);
    assert!(
        grew < 8 * 1024,
        "RSS grew {grew} KiB over 1500 bogus names: {codes:?}"
    );
    assert!(codes.get(&429).copied().unwrap_or(0) > 1000, "{codes:?}");
    assert!(codes.keys().all(|c| [404, 429].contains(c)), "{codes:?}");
    shared::stop(server);
}

/// A task the command line started, killed mid-run, is the command line's:
/// a server leaves it interrupted and says how many it left; told to
/// (`--adopt-cli-tasks`), a server takes it up and it ends verified, its
/// command run to its end once.
#[test]
fn a_server_takes_up_the_command_lines_interrupted_tasks_only_when_told_to() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-adopt");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(
        home.join("task.yaml"),
        "instruction: slow\ncriteria:\n  - id: slow\n    checks:\n      - run: test \"$(cat slow.txt)\" = once\n",
    )
    .unwrap();
    let mut run = loop_in(&home)
        .args(["run", "--task"])
        .arg(home.join("task.yaml"))
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            project.join("script.yaml").display()
        ))
        .arg("--project")
        .arg(&project)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let id = loop {
        let out = loop_in(&home)
            .args(["list", "--json", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        let listed: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if let Some(t) = listed.first() {
            let id = t["id"].as_str().unwrap().to_string();
            let s = status(&home, &project, &id);
            if s["running"] == true && s["entries"].as_u64().unwrap_or(0) >= 4 {
                break id;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "never ran");
        std::thread::sleep(Duration::from_millis(50));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    let s = status(&home, &project, &id);
    assert_eq!(
        (&s["interrupted"], &s["owner"]),
        (&true.into(), &serde_json::Value::Null),
        "{s}"
    );
    // Not told to: left, and counted.
    let (server, said) = shared::serve_saying(&home, &project, &[], &[], 2);
    assert!(
        said[1].contains("took up 0 interrupted task(s); left 1 the command line started"),
        "{said:?}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let s = status(&home, &project, &id);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(s["outcome"].is_null(), "{s}");
    shared::stop(server);
    // Told to: taken up, to its end.
    let (server, said) = shared::serve_saying(&home, &project, &[], &["--adopt-cli-tasks"], 2);
    assert_eq!(said[1], "took up 1 interrupted task(s)", "{said:?}");
    let start = Instant::now();
    let s = loop {
        let s = status(&home, &project, &id);
        if s["outcome"].is_string() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{s}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(s["outcome"], "verified", "{s}");
    let slow = shared::workspace_of(&project, &id).join("slow.txt");
    assert_eq!(std::fs::read_to_string(&slow).unwrap(), "once\n");
    shared::stop(server);
}

/// A run that fails with an error (here: injected, before it claims its
/// task) is not the task's end: the server runs it again, a bounded number
/// of times, and it ends verified.
#[test]
#[cfg(feature = "fault-injection")]
fn a_served_task_whose_run_failed_is_run_again_and_ends_verified() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-retry");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    let token = shared::token_for(&home, &project, "alice");
    let (server, url) = shared::serve(&home, &project, &[("LOOP_FAULT_RUNS_FAIL", "2")], &[]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .post(&format!("{url}/api/v1/tasks"))
        .header("Authorization", &format!("Bearer {token}"))
        .content_type("application/json")
        .send(
            serde_json::json!({"instruction": "slow", "checks": ["test \"$(cat slow.txt)\" = once"], "model": "scripted:script.yaml"})
                .to_string(),
        )
        .unwrap();
    let body = resp.body_mut().read_to_string().unwrap();
    assert!(matches!(resp.status().as_u16(), 201 | 202), "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Two failed runs: 5 s, then 10 s, before the third.
    let start = Instant::now();
    let ended = loop {
        let v = get(&format!("{url}/api/v1/tasks/{id}"), &token);
        if v["outcome"].is_string() {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{v}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(ended["outcome"], "verified", "{ended}");
    assert!(
        start.elapsed() >= Duration::from_secs(14),
        "ended before both retries: {:?}",
        start.elapsed()
    );
    shared::stop(server);
}

/// A contract drafted over the API waits for its answer across a restart
/// of the server: the next server shows it, and accepting it there starts
/// the task (its contract judged again as one the person gives), which
/// ends verified. A second draft rejected after the restart ends, and
/// nothing starts.
#[test]
fn a_drafted_contract_waiting_for_its_answer_survives_a_restart_of_the_server() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-drafts");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("draft.yaml"), shared::DRAFTING).unwrap();
    let token = shared::token_for(&home, &project, "alice");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let post = |url: &str, body: serde_json::Value| -> (u16, serde_json::Value) {
        let mut r = agent
            .post(url)
            .header("Authorization", &format!("Bearer {token}"))
            .content_type("application/json")
            .send(body.to_string())
            .unwrap();
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or_default())
    };
    let settled = |url: &str, id: &str| -> serde_json::Value {
        let start = Instant::now();
        loop {
            let v = get(&format!("{url}/api/v1/drafts/{id}"), &token);
            if v["state"] != "drafting" {
                return v;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let (server, url) = shared::serve(&home, &project, &[], &[]);
    let mut drafts = Vec::new();
    for _ in 0..2 {
        let (status, v) = post(
            &format!("{url}/api/v1/tasks"),
            serde_json::json!({"instruction": "write hello.txt saying hello", "model": "scripted:draft.yaml"}),
        );
        assert_eq!(status, 202, "{v}");
        let d = v["draft"].as_str().unwrap().to_string();
        assert_eq!(settled(&url, &d)["state"], "proposed");
        drafts.push(d);
    }
    shared::stop(server);
    let (server, said) = shared::serve_saying(&home, &project, &[], &[], 2);
    assert_eq!(
        said[1], "2 drafted contract(s) wait for their answer",
        "{said:?}"
    );
    let url = said[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    let v = get(&format!("{url}/api/v1/drafts/{}", drafts[0]), &token);
    assert_eq!(v["state"], "proposed", "{v}");
    assert!(
        v["contract"]
            .as_str()
            .unwrap()
            .contains("grep -q hello hello.txt"),
        "{v}"
    );
    let (status, v) = post(
        &format!("{url}/api/v1/drafts/{}/confirm", drafts[0]),
        serde_json::json!({}),
    );
    assert_eq!(status, 200, "{v}");
    let v = settled(&url, &drafts[0]);
    assert_eq!(v["state"], "started", "{v}");
    let id = v["task_id"].as_str().unwrap().to_string();
    let start = Instant::now();
    let ended = loop {
        let t = get(&format!("{url}/api/v1/tasks/{id}"), &token);
        if t["outcome"].is_string() {
            break t;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{t}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(ended["outcome"], "verified", "{ended}");
    assert_eq!(ended["owner"], "alice", "{ended}");
    // Answered twice: 409.
    let (status, _) = post(
        &format!("{url}/api/v1/drafts/{}/confirm", drafts[0]),
        serde_json::json!({}),
    );
    assert_eq!(status, 409);
    // An edit that is no contract is refused at once, naming what is
    // wrong, and the draft goes on waiting.
    let (status, v) = post(
        &format!("{url}/api/v1/drafts/{}/confirm", drafts[1]),
        serde_json::json!({"contract": "instruction: write hello\ncriteria: 7\n"}),
    );
    assert_eq!(status, 400, "{v}");
    let said = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains("the edited contract is refused") && said.contains("criteria"),
        "{v}"
    );
    let v = get(&format!("{url}/api/v1/drafts/{}", drafts[1]), &token);
    assert_eq!(v["state"], "proposed", "{v}");
    let (status, v) = post(
        &format!("{url}/api/v1/drafts/{}/confirm", drafts[1]),
        serde_json::json!({"reject": true}),
    );
    assert_eq!(status, 200, "{v}");
    let v = get(&format!("{url}/api/v1/drafts/{}", drafts[1]), &token);
    assert_eq!(v["state"], "ended", "{v}");
    shared::stop(server);
    // Both answers were kept: a third server has nothing waiting.
    let (server, said) = shared::serve_saying(&home, &project, &[], &[], 1);
    let v = get(
        &format!(
            "{}/api/v1/drafts/{}",
            said[0]
                .split_whitespace()
                .find(|w| w.starts_with("http://"))
                .unwrap(),
            drafts[1]
        ),
        &token,
    );
    assert_eq!(v["state"], "ended", "{v}");
    shared::stop(server);
}

/// A task is kept before its request is answered: a server killed after
/// answering, before preparing it (or while preparing it), leaves it to the
/// next server, which prepares and runs it. The honest counterpart: a task
/// whose preparation refuses it is refused after the restart too, its
/// refusal readable, and nothing runs for it.
#[test]
fn tasks_answered_before_their_preparation_survive_a_killed_server() {
    const WRITES: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-answered");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), WRITES).unwrap();
    let token = shared::token_for(&home, &project, "alice");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let post = |url: &str, body: serde_json::Value| -> (u16, serde_json::Value, Duration) {
        let t = Instant::now();
        let mut r = agent
            .post(&format!("{url}/api/v1/tasks"))
            .header("Authorization", &format!("Bearer {token}"))
            .content_type("application/json")
            .send(body.to_string())
            .unwrap();
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or_default(),
            t.elapsed(),
        )
    };
    // One place; each preparation takes seconds (its check sleeps, on the
    // untouched workspace and on an empty one).
    let (mut server, url) = shared::serve(&home, &project, &[], &["--jobs", "1"]);
    let honest = serde_json::json!({"instruction": "write hello", "checks": ["sleep 1; grep -q hello hello.txt"], "model": "scripted:script.yaml"});
    let vacuous = serde_json::json!({"instruction": "write hello", "checks": ["sleep 1; true"], "model": "scripted:script.yaml"});
    let mut ids = Vec::new();
    for body in [&honest, &honest, &vacuous] {
        let (status, v, took) = post(&url, body.clone());
        assert_eq!(status, 201, "{v}");
        assert_eq!(v["state"], "queued", "{v}");
        assert!(took < Duration::from_secs(1), "answered after {took:?}");
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    // Killed while the first is being prepared, the others waiting.
    std::thread::sleep(Duration::from_millis(300));
    server.kill().unwrap();
    server.wait().unwrap();
    for id in &ids {
        let out = loop_in(&home)
            .args(["status", id, "--project"])
            .arg(&project)
            .output()
            .unwrap();
        assert!(
            !out.status.success()
                && text(&out).contains("waits for its preparation by `loop serve`"),
            "{id} was stored already: {}",
            text(&out)
        );
    }
    let (server, said) = shared::serve_saying(&home, &project, &[], &["--jobs", "1"], 2);
    assert!(
        said[1].contains("took up 3 task(s) answered but not yet prepared"),
        "{said:?}"
    );
    let url = said[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_string();
    let settled = |id: &str| -> serde_json::Value {
        let start = Instant::now();
        loop {
            let v = get(&format!("{url}/api/v1/tasks/{id}"), &token);
            if v["outcome"].is_string() || v["state"] == "refused" {
                return v;
            }
            assert!(start.elapsed() < Duration::from_secs(120), "{v}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    for id in &ids[..2] {
        let v = settled(id);
        assert_eq!(v["outcome"], "verified", "{v}");
        assert_eq!(v["owner"], "alice", "{v}");
    }
    let refused = settled(&ids[2]);
    assert_eq!(refused["state"], "refused", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot fail")),
        "{refused}"
    );
    shared::stop(server);
    // The refusal outlives this server too; the stored tasks are the
    // store's alone (nothing is prepared twice).
    let (server, url) = shared::serve(&home, &project, &[], &["--jobs", "1"]);
    let v = get(&format!("{url}/api/v1/tasks/{}", ids[2]), &token);
    assert_eq!(v["state"], "refused", "{v}");
    let list = get(&format!("{url}/api/v1/tasks"), &token);
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(2), "{list}");
    shared::stop(server);
}
