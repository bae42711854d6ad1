//! The API over real HTTP on 127.0.0.1: every route refuses a request with
//! no token (but the probes), every task route answers another owner's
//! token with 404, a read token cannot act, a task started through the
//! API runs to a verified receipt exactly as from the CLI (and one started
//! from the CLI is seen by an admin token), its events stream with
//! `Last-Event-ID` resume, and the limits hold (rate, body size, a script
//! outside the project).
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_runtime::Runtime;
use loop_runtime::Scope;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Before the harness's `main` (one thread, the environment not yet read
/// by anyone): the runtime's state (its signing key) and its tasks'
/// workspaces, for every test here, go under this binary's temp directory,
/// never the person's `~/.local/state` (which kept about 15 projects'
/// workspaces a run). The workspaces of the last run are removed.
#[used]
#[unsafe(link_section = ".init_array")]
static OWN_STATE: extern "C" fn() = own_state;

extern "C" fn own_state() {
    let state = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("api-state");
    let _ = std::fs::remove_dir_all(state.with_file_name("api-state-workspaces"));
    // SAFETY: called from `.init_array`, before `main` and so before any
    // thread exists or anything reads the environment.
    unsafe {
        std::env::set_var("LOOP_STATE_DIR", &state);
        // The workspaces beside it, whatever the person set.
        std::env::remove_var("LOOP_WORKSPACES_DIR");
    }
}

const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

/// A project with a script, and a server on a free port of 127.0.0.1.
struct Server {
    base: String,
    project: PathBuf,
    runtime: Runtime,
}

fn start(name: &str, rate: u32) -> Server {
    start_with(name, rate, 8, |_| ())
}

/// [`start`], running at most `jobs` tasks at once, with `prepare` done to
/// the project before the server opens it.
fn start_with(
    name: &str,
    rate: u32,
    jobs: usize,
    prepare: impl FnOnce(&std::path::Path),
) -> Server {
    let project = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("api-{name}"));
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    prepare(&project);
    let runtime = Runtime::open(&project).unwrap();
    let state = loop_server::AppState::new(runtime.clone(), rate, jobs);
    let addr = spawn_server(state, loop_server::HEAD_TIMEOUT);
    Server {
        base: format!("http://{addr}"),
        project: runtime.project().to_path_buf(),
        runtime,
    }
}

/// Serve `state` on a free port of 127.0.0.1 on a thread of its own, a
/// request head's limit `head`; the address.
fn spawn_server(state: loop_server::AppState, head: Duration) -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop_server::serve_on_with(listener, state, head)
                .await
                .unwrap();
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// (status, body) of METHOD PATH with `token` and a JSON `body`.
fn call(
    s: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, String) {
    let url = format!("{}{path}", s.base);
    let a = agent();
    let auth = token.map(|t| format!("Bearer {t}"));
    let resp = match method {
        "get" => {
            let mut r = a.get(&url);
            if let Some(h) = &auth {
                r = r.header("Authorization", h);
            }
            r.call()
        }
        _ => {
            let mut r = a.post(&url);
            if let Some(h) = &auth {
                r = r.header("Authorization", h);
            }
            match body {
                Some(b) => r.content_type("application/json").send(b.to_string()),
                None => r.send_empty(),
            }
        }
    };
    let mut resp = resp.unwrap();
    let status = resp.status().as_u16();
    // A stream that opened is not read to its end here.
    if path.ends_with("/stream") && status == 200 {
        return (status, String::new());
    }
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn token(s: &Server, owner: &str, scope: Scope) -> String {
    s.runtime.create_token(owner, scope).unwrap().token
}

/// Start a task through the API; its id.
fn create(s: &Server, token: &str) -> String {
    let (status, body) = call(
        s,
        "post",
        "/api/v1/tasks",
        Some(token),
        Some(
            json!({"instruction": "write hello", "checks": ["grep -q hello hello.txt"], "model": "scripted:script.yaml"}),
        ),
    );
    assert_eq!(status, 201, "{body}");
    json_of(&body)["id"].as_str().unwrap().to_string()
}

fn wait_ended(s: &Server, token: &str, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = call(s, "get", &format!("/api/v1/tasks/{id}"), Some(token), None);
        assert_eq!(status, 200, "{body}");
        let v = json_of(&body);
        if v["outcome"].is_string() && v["receipt"].is_string() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never ended: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Task `id`'s status once it is stored (the answer to its request came
/// before its preparation).
fn wait_stored(s: &Server, token: &str, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = call(s, "get", &format!("/api/v1/tasks/{id}"), Some(token), None);
        assert_eq!(status, 200, "{body}");
        let v = json_of(&body);
        if v["entries"].is_u64() {
            return v;
        }
        assert_ne!(v["state"], "refused", "{v}");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never stored: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (status, body) of `POST /api/v1/tasks` with `body`.
fn post_task(s: &Server, token: &str, body: Value) -> (u16, String) {
    call(s, "post", "/api/v1/tasks", Some(token), Some(body))
}

fn body_of_list(s: &Server, token: &str) -> String {
    let (status, body) = call(s, "get", "/api/v1/tasks", Some(token), None);
    assert_eq!(status, 200, "{body}");
    body
}

/// The ids `GET /api/v1/tasks?{query}` lists for `token`, in order.
fn listed(s: &Server, token: &str, query: &str) -> Vec<String> {
    let (status, body) = call(
        s,
        "get",
        &format!("/api/v1/tasks?{query}"),
        Some(token),
        None,
    );
    assert_eq!(status, 200, "{query}: {body}");
    json_of(&body)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

fn path_for(path: &str, id: &str) -> String {
    path.replace("{id}", id)
}

#[test]
fn every_route_needs_a_token_and_hides_other_owners_tasks() {
    let s = start("owners", 10_000);
    let alice = token(&s, "alice", Scope::Run);
    let bob = token(&s, "bob", Scope::Run);
    let id = create(&s, &alice);
    wait_ended(&s, &alice, &id);
    for (method, path, scope) in loop_server::route_table() {
        let p = path_for(path, &id);
        let (status, body) = call(&s, method, &p, None, None);
        match scope {
            None => assert_ne!(status, 401, "{method} {p} is a probe: {body}"),
            Some(_) => {
                assert_eq!(status, 401, "{method} {p} without a token: {body}");
                assert_eq!(json_of(&body)["error"]["kind"], "unauthorized", "{body}");
            }
        }
        let (status, body) = call(&s, method, &p, Some("loop_not-a-token"), None);
        if scope.is_some() {
            assert_eq!(status, 401, "{method} {p} with a made-up token: {body}");
        }
        if path.contains("{id}") {
            let (status, body) = call(&s, method, &p, Some(&bob), None);
            assert_eq!(
                status, 404,
                "{method} {p} with another owner's token: {body}"
            );
            assert_eq!(json_of(&body)["error"]["kind"], "not_found", "{body}");
        }
    }
    // Bob's list does not hold Alice's task; hers does.
    let (_, body) = call(&s, "get", "/api/v1/tasks", Some(&bob), None);
    assert_eq!(
        json_of(&body)["tasks"].as_array().unwrap().len(),
        0,
        "{body}"
    );
    let (_, body) = call(&s, "get", "/api/v1/tasks", Some(&alice), None);
    assert_eq!(json_of(&body)["tasks"][0]["id"], id.as_str(), "{body}");
    // A revoked token is refused.
    let t = s.runtime.create_token("carol", Scope::Read).unwrap();
    assert!(s.runtime.revoke_token(&t.record.id).unwrap());
    let (status, _) = call(&s, "get", "/api/v1/tasks", Some(&t.token), None);
    assert_eq!(status, 401);
}

#[test]
fn a_task_from_the_api_runs_to_a_verified_receipt_and_is_settled_through_it() {
    let s = start("life", 10_000);
    let alice = token(&s, "alice", Scope::Run);
    let id = create(&s, &alice);
    let t = wait_ended(&s, &alice, &id);
    assert_eq!(t["outcome"], "verified", "{t}");
    assert_eq!(t["outcome_words"], "verified", "{t}");
    assert_eq!(t["owner"], "alice", "{t}");
    assert_eq!(
        listed(&s, &alice, "outcome=verified&state=ended"),
        [id.as_str()]
    );
    assert!(listed(&s, &alice, "outcome=failed").is_empty());
    // The server's own paths are the project's, not its disk's.
    assert_eq!(t["model"], "scripted:script.yaml", "{t}");
    assert_eq!(
        t["receipt"],
        format!(".loop/receipts/{id}.receipt.json"),
        "{t}"
    );
    assert!(!body_of_list(&s, &alice).contains(&s.project.display().to_string()));
    // The same record the CLI reads.
    let status = s.runtime.status(&id).unwrap();
    assert_eq!(status.task.outcome.as_deref(), Some("verified"));
    // Events: all of them, then from a position on.
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events"),
        Some(&alice),
        None,
    );
    let events = json_of(&body)["events"].as_array().unwrap().clone();
    assert_eq!(events[0]["event"]["kind"], "task_started");
    assert_eq!(events.last().unwrap()["event"]["kind"], "finished");
    // Nor do the events (the model's provenance names its script by its
    // path in the project), nor the signed receipt.
    let root = s.project.display().to_string();
    assert!(!body.contains(&root), "{body}");
    let envelope: Value = serde_json::from_slice(
        &std::fs::read(s.project.join(format!(".loop/receipts/{id}.receipt.json"))).unwrap(),
    )
    .unwrap();
    let payload = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        envelope["payload"].as_str().unwrap(),
    )
    .unwrap();
    let payload = String::from_utf8(payload).unwrap();
    assert!(!payload.contains(&root), "{payload}");
    assert!(payload.contains("\"name\":\"script.yaml\""), "{payload}");
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events?since=3"),
        Some(&alice),
        None,
    );
    assert_eq!(json_of(&body)["events"][0]["seq"], 3, "{body}");
    // The receipt, checked layer by layer.
    let (status, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/receipt"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 200);
    assert!(
        json_of(&body)["payload"].is_string(),
        "a DSSE envelope: {body}"
    );
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/verify"),
        Some(&alice),
        None,
    );
    let v = json_of(&body);
    assert_eq!(
        (v["intact"].as_bool(), v["verified"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    // The change set, then apply and undo in the project.
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/diff"),
        Some(&alice),
        None,
    );
    let d = json_of(&body);
    assert_eq!(d["files"][0]["path"], "hello.txt", "{d}");
    assert!(d["patch"].as_str().unwrap().contains("+hello"), "{d}");
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/apply"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["result"], "done", "{body}");
    assert_eq!(
        std::fs::read_to_string(s.project.join("hello.txt")).unwrap(),
        "hello\n"
    );
    let (_, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/undo"),
        Some(&alice),
        None,
    );
    assert_eq!(json_of(&body)["result"], "done", "{body}");
    assert!(!s.project.join("hello.txt").exists());
    // An answer to a question that is no longer the one waiting: 409.
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/approve"),
        Some(&alice),
        Some(json!({"approval_id": "2-t2-c1"})),
    );
    assert_eq!(status, 409, "{body}");
    // Consent to host-executable files is an administrator's.
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/apply"),
        Some(&alice),
        Some(json!({"trust_host_files": true})),
    );
    assert_eq!(status, 403, "{body}");
    // A bad `since` is a 400 in the API's shape; the scheme's case does
    // not matter.
    let (status, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events?since=abc"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(json_of(&body)["error"]["kind"], "usage");
    let mut resp = agent()
        .get(&format!("{}/api/v1/tasks/{id}", s.base))
        .header("Authorization", &format!("bearer {alice}"))
        .call()
        .unwrap();
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{}",
        resp.body_mut().read_to_string().unwrap()
    );
    // Nothing to cancel, approve or resume any more: said, not a 5xx.
    let (_, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/cancel"),
        Some(&alice),
        None,
    );
    assert_eq!(json_of(&body)["result"], "already_ended", "{body}");
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/approve"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/resume"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/resume"),
        Some(&alice),
        Some(json!({"add_steps": 3})),
    );
    assert_eq!(
        status, 400,
        "a verified task has no limit to extend: {body}"
    );
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{id}/discard"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 200, "{body}");
    // Metrics count it; the document lists every route.
    let (_, body) = call(&s, "get", "/metrics", Some(&alice), None);
    assert!(
        body.contains("loop_tasks{state=\"terminal\",outcome=\"verified\"} 1"),
        "{body}"
    );
    assert!(body.contains("loop_verification_seconds_count 1"), "{body}");
    let (_, body) = call(&s, "get", "/openapi.json", Some(&alice), None);
    let doc = json_of(&body);
    assert_eq!(doc["openapi"], "3.1.0");
    for (method, path, _) in loop_server::route_table() {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} undocumented"
        );
    }
}

#[test]
fn the_event_stream_resumes_after_last_event_id() {
    let s = start("stream", 10_000);
    let alice = token(&s, "alice", Scope::Run);
    let id = create(&s, &alice);
    wait_ended(&s, &alice, &id);
    let read = |last: Option<&str>| -> String {
        let mut r = agent()
            .get(&format!("{}/api/v1/tasks/{id}/stream", s.base))
            .header("Authorization", &format!("Bearer {alice}"));
        if let Some(l) = last {
            r = r.header("Last-Event-ID", l);
        }
        let mut resp = r.call().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.body_mut().read_to_string().unwrap()
    };
    let all = read(None);
    assert!(all.starts_with("id: 0\nevent: task_started\n"), "{all}");
    assert!(all.contains("event: finished"), "{all}");
    assert!(all.trim_end().ends_with("event: end\ndata: {}"), "{all}");
    // An id past every event: nothing more, not a panic.
    let none = read(Some(&u64::MAX.to_string()));
    assert!(none.trim_end().ends_with("event: end\ndata: {}"), "{none}");
    let rest = read(Some("5"));
    assert!(rest.starts_with("id: 6\n"), "{rest}");
    assert_eq!(
        rest.matches("\nid: ").count() + 1,
        all.matches("\nid: ").count() + 1 - 6,
        "{rest}"
    );
}

#[test]
fn scopes_limits_and_the_command_lines_tasks() {
    let s = start("limits", 5);
    let reader = token(&s, "alice", Scope::Read);
    let (status, body) = post_task(&s, &reader, json!({"instruction": "x", "checks": ["true"]}));
    assert_eq!(status, 403, "a read token starts nothing: {body}");
    // A script or recording outside the project is not read.
    let runner = token(&s, "alice", Scope::Run);
    let (status, body) = post_task(
        &s,
        &runner,
        json!({"instruction": "x", "checks": ["true"], "allow_vacuous": true, "model": "scripted:../../../etc/passwd"}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("inside the project"), "{body}");
    // Nor one under .loop/ (other owners' tasks live there), nor one
    // reached through a link.
    std::fs::create_dir_all(s.project.join(".loop/tasks/t-x/workspace")).unwrap();
    std::fs::write(s.project.join(".loop/tasks/t-x/workspace/s.yaml"), SCRIPT).unwrap();
    std::os::unix::fs::symlink(
        s.project.join(".loop/tasks/t-x/workspace/s.yaml"),
        s.project.join("link.yaml"),
    )
    .unwrap();
    for spec in [
        "scripted:.loop/tasks/t-x/workspace/s.yaml",
        "scripted:link.yaml",
        "replay:./script.yaml",
    ] {
        let (status, body) = post_task(
            &s,
            &runner,
            json!({"instruction": "x", "checks": ["true"], "allow_vacuous": true, "model": spec}),
        );
        assert_eq!(status, 400, "{spec}: {body}");
    }
    // A wall time past a week is refused, not a panic.
    let (status, body) = post_task(
        &s,
        &runner,
        json!({"instruction": "x", "checks": ["true"], "allow_vacuous": true, "timeout_secs": u64::MAX}),
    );
    assert_eq!(status, 400, "{body}");
    // Past the rate, 429 (the requests above count too).
    let mut last = 0;
    for _ in 0..2 {
        last = call(&s, "get", "/api/v1/tasks", Some(&runner), None).0;
    }
    assert_eq!(last, 429);
    // A body over a megabyte is refused before it is read whole.
    let admin = token(&s, "ops", Scope::Admin);
    // (Said to be 2 MiB, with 1.5 MiB sent: the answer comes without the
    // rest.)
    let answer = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            c,
            "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{{\"instruction\": \"",
            2 << 20
        )
        .unwrap();
        let _ = c.write_all(&vec![b'x'; 3 << 19]);
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    };
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"kind\":\"too_large\""), "{answer}");
    // A path no route serves, a method a route does not take: said in
    // the same shape.
    let (status, body) = call(&s, "get", "/api/v1/nothing", Some(&admin), None);
    assert_eq!(
        (status, &json_of(&body)["error"]["kind"]),
        (404, &json!("not_found")),
        "{body}"
    );
    let (status, body) = call(&s, "post", "/healthz", Some(&admin), None);
    assert_eq!(
        (status, &json_of(&body)["error"]["kind"]),
        (405, &json!("method_not_allowed")),
        "{body}"
    );
    // A task the command line ran is seen by an admin token, not by an
    // owner's.
    let report = s
        .runtime
        .start(
            loop_runtime::TaskRequest {
                contract: loop_runtime::ContractInput::Given(Box::new(
                    loop_protocol::Contract::from_flags(
                        "write hello",
                        &["grep -q hello hello.txt".into()],
                        &[],
                    )
                    .unwrap(),
                )),
                model: Some(format!(
                    "scripted:{}",
                    s.project.join("script.yaml").display()
                )),
                isolation: loop_sandbox::IsolationLevel::Preferred,
                on_prompt: Some(loop_runtime::OnPrompt::Deny),
                via: loop_runtime::Via::Library,
                ..Default::default()
            },
            &mut loop_runtime::Quiet,
        )
        .unwrap();
    let (status, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{}", report.task_id),
        Some(&admin),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["outcome"], "verified");
    let other = token(&s, "dave", Scope::Run);
    let (status, _) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{}", report.task_id),
        Some(&other),
        None,
    );
    assert_eq!(status, 404);
    // Nor a file named like a secret (nor, in a repository, one git
    // ignores): an error reading it named what it held (a key it did not
    // know).
    std::fs::create_dir_all(s.project.join("secrets")).unwrap();
    std::fs::write(
        s.project.join("secrets/keys.json"),
        "{\"stripe_live_key\": 1}\n",
    )
    .unwrap();
    std::fs::write(s.project.join(".env"), "db_password: x\n").unwrap();
    let carol = token(&s, "carol", Scope::Run);
    for spec in ["scripted:secrets/keys.json", "replay:.env"] {
        let (status, body) = post_task(
            &s,
            &carol,
            json!({"instruction": "x", "checks": ["true"], "allow_vacuous": true, "model": spec}),
        );
        assert_eq!(status, 400, "{spec}: {body}");
        assert!(body.contains("inside the project"), "{spec}: {body}");
        assert!(
            !body.contains("stripe_live_key") && !body.contains("db_password"),
            "{spec}: {body}"
        );
    }
}

#[test]
fn the_console_is_served_locked_down_and_puts_data_on_the_page_as_text() {
    let s = start("console", 10_000);
    for (path, kind) in [
        ("/", "text/html"),
        ("/console.js", "text/javascript"),
        ("/console.css", "text/css"),
    ] {
        let mut r = agent().get(&format!("{}{path}", s.base)).call().unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert!(header("content-type").starts_with(kind), "{path}");
        let csp = header("content-security-policy");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(header("x-content-type-options"), "nosniff");
        let body = r.body_mut().read_to_string().unwrap();
        if path == "/" {
            // No inline script or handler: the policy would refuse it, and
            // none is needed.
            assert!(
                body.contains("<script src=\"/console.js\" defer></script>"),
                "{body}"
            );
            assert!(
                !body.contains(" onclick=") && !body.contains(" onload="),
                "{body}"
            );
        }
        if path == "/console.js" {
            // What a task holds goes on the page as text, never as markup.
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!body.contains(sink), "the console uses {sink}");
            }
            assert!(body.contains("textContent"));
        }
    }
}

#[test]
fn a_schedule_fires_once_a_minute_and_its_task_says_so() {
    let s = start("cron", 10_000);
    std::fs::write(
        s.project.join("Loopfile.yaml"),
        "triggers:\n  - name: nightly\n    cron: \"0 3 1-4 1 *\"\n    task: {owner: ops, instruction: write hello, checks: [\"grep -q hello hello.txt\"], model: \"scripted:script.yaml\"}\n",
    )
    .unwrap();
    // 2020-01-01T03:00:30Z, a minute the server's own clock never sees
    // (its schedule names the first four nights of January only: every
    // night's 03:00 was a minute the server's own scheduler fired in too,
    // when the test ran then, and its task made the third night skipped).
    let at = 1_577_847_630_000;
    let ids = s.runtime.fire_schedules(at - 60_000, at).unwrap();
    assert_eq!(ids.len(), 1);
    // The same minute again (another server, a retry): nothing.
    assert!(
        s.runtime
            .fire_schedules(at - 60_000, at + 20_000)
            .unwrap()
            .is_empty()
    );
    // Another minute the schedule does not name: nothing.
    assert!(
        s.runtime
            .fire_schedules(at, at + 60_000)
            .unwrap()
            .is_empty()
    );
    // The next night's minute, while the first night's task is not over:
    // skipped, not piled up.
    let day = 86_400_000;
    assert!(
        s.runtime
            .fire_schedules(at + day - 60_000, at + day)
            .unwrap()
            .is_empty()
    );
    // Run it here; the owner's token sees it, verified, with its trigger.
    let id = ids[0].clone();
    let report = s
        .runtime
        .run(&id, loop_runtime::OnPrompt::Deny, &mut loop_runtime::Quiet)
        .unwrap();
    assert_eq!(report.outcome.kind, loop_protocol::OutcomeKind::Verified);
    // The third night's check comes three minutes late: the minute it
    // missed still fires (once); one more than an hour late does not.
    let third = s
        .runtime
        .fire_schedules(at + 2 * day - 60_000, at + 2 * day + 180_000)
        .unwrap();
    assert_eq!(third.len(), 1);
    s.runtime
        .run(
            &third[0],
            loop_runtime::OnPrompt::Deny,
            &mut loop_runtime::Quiet,
        )
        .unwrap();
    let late = s
        .runtime
        .fire_schedules(at + 3 * day - 60_000, at + 3 * day + 3_700_000)
        .unwrap();
    assert!(late.is_empty(), "{late:?}");
    let ops = token(&s, "ops", Scope::Read);
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events"),
        Some(&ops),
        None,
    );
    let genesis = &json_of(&body)["events"][0]["event"];
    assert_eq!(genesis["trigger"]["kind"], "cron", "{genesis}");
    assert_eq!(
        genesis["trigger"]["delivery"],
        "cron 2020-01-01T03:00:00.000Z"
    );
    assert_eq!(genesis["trigger"]["event"], "0 3 1-4 1 *");
}

const DRAFTING: &str = "draft:
  - calls:
      - tool: propose_contract
        args:
          criteria:
            - id: hello
              text: hello.txt says hello
              checks:
                - run: grep -q hello hello.txt
turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

/// The draft's state once it is no longer `drafting`.
fn settled_draft(s: &Server, token: &str, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = call(s, "get", &format!("/api/v1/drafts/{id}"), Some(token), None);
        assert_eq!(status, 200, "{body}");
        let v = json_of(&body);
        if v["state"] != "drafting" {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_instruction_alone_is_drafted_confirmed_over_http_and_started() {
    let s = start("draft", 10_000);
    std::fs::write(s.project.join("draft.yaml"), DRAFTING).unwrap();
    let alice = token(&s, "alice", Scope::Run);
    let bob = token(&s, "bob", Scope::Run);
    let new = |t: &str| {
        let (status, body) = post_task(
            &s,
            t,
            json!({"instruction": "write hello.txt saying hello", "model": "scripted:draft.yaml"}),
        );
        assert_eq!(status, 202, "{body}");
        json_of(&body)["draft"].as_str().unwrap().to_string()
    };
    let d = new(&alice);
    let v = settled_draft(&s, &alice, &d);
    assert_eq!(v["state"], "proposed", "{v}");
    assert!(
        v["contract"]
            .as_str()
            .unwrap()
            .contains("grep -q hello hello.txt"),
        "{v}"
    );
    // Another owner neither sees nor answers it.
    let (status, _) = call(&s, "get", &format!("/api/v1/drafts/{d}"), Some(&bob), None);
    assert_eq!(status, 404);
    let (status, _) = call(
        &s,
        "post",
        &format!("/api/v1/drafts/{d}/confirm"),
        Some(&bob),
        None,
    );
    assert_eq!(status, 404);
    // Accepted: the task starts and is verified; its genesis says who
    // confirmed the drafted contract.
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/drafts/{d}/confirm"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v = settled_draft(&s, &alice, &d);
    assert_eq!(v["state"], "started", "{v}");
    let id = v["task_id"].as_str().unwrap().to_string();
    let t = wait_ended(&s, &alice, &id);
    assert_eq!(t["outcome"], "verified", "{t}");
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events"),
        Some(&alice),
        None,
    );
    let genesis = &json_of(&body)["events"][0]["event"];
    let by = genesis["drafting"]["confirmed_by"].as_str().unwrap();
    assert!(by.starts_with("the API (owner alice"), "{genesis}");
    // Answered twice: 409. Rejected: it ends, nothing starts.
    let (status, _) = call(
        &s,
        "post",
        &format!("/api/v1/drafts/{d}/confirm"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 409);
    let d2 = new(&alice);
    assert_eq!(settled_draft(&s, &alice, &d2)["state"], "proposed");
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/drafts/{d2}/confirm"),
        Some(&alice),
        Some(json!({"reject": true})),
    );
    assert_eq!(status, 200, "{body}");
    let v = settled_draft(&s, &alice, &d2);
    assert_eq!(v["state"], "ended", "{v}");
    assert!(v["reason"].as_str().unwrap().contains("rejected"), "{v}");
}

/// A task whose command waits for a person's approval.
const ASKS: &str = "turns:
  - calls:
      - {tool: run_command, args: {command: \"touch a.txt\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

/// A server with one place to run tasks, whose `touch` commands wait for
/// a person's approval.
fn one_place(name: &str) -> Server {
    start_with(name, 10_000, 1, |p| {
        std::fs::write(p.join("asks.yaml"), ASKS).unwrap();
        std::fs::write(
            p.join("Loopfile.yaml"),
            "exec:\n  approval_timeout_secs: 120\n  rules:\n    - prefix: touch\n      decision: prompt\n      examples: [\"touch a.txt\"]\n",
        )
        .unwrap();
    })
}

/// Start a task that takes the one place and waits there for an answer:
/// its id and its pending approval's.
fn take_the_place(s: &Server, token: &str) -> (String, String) {
    let (status, body) = post_task(
        s,
        token,
        json!({"instruction": "touch a", "checks": ["test -f a.txt"], "model": "scripted:asks.yaml"}),
    );
    assert_eq!(status, 201, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    let start = Instant::now();
    loop {
        let (_, body) = call(s, "get", &format!("/api/v1/tasks/{id}"), Some(token), None);
        let v = json_of(&body);
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            return (id, a["id"].as_str().unwrap().to_string());
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never asked: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_full_server_keeps_tasks_waiting_in_order_and_pages_its_list() {
    let s = one_place("pool");
    let alice = token(&s, "alice", Scope::Run);
    // The one place is taken by a task waiting for an answer.
    let (first, pending) = take_the_place(&s, &alice);
    // The next two wait their turn, and say so.
    let second = create(&s, &alice);
    let third = create(&s, &alice);
    for id in [&second, &third] {
        let v = wait_stored(&s, &alice, id);
        assert_eq!(
            (v["queued"].as_bool(), v["entries"].as_u64()),
            (Some(true), Some(0)),
            "{v}"
        );
    }
    // The server's own figures are an admin's: alice sees her tasks only.
    let (_, body) = call(&s, "get", "/metrics", Some(&alice), None);
    assert!(!body.contains("loop_server_tasks_waiting"), "{body}");
    assert!(!body.contains("loop_http_requests_total"), "{body}");
    assert!(body.contains("loop_tasks{"), "{body}");
    let admin = token(&s, "root", Scope::Admin);
    let (_, body) = call(&s, "get", "/metrics", Some(&admin), None);
    assert!(body.contains("loop_server_tasks_waiting 2\n"), "{body}");
    assert!(body.contains("loop_server_tasks_running 1\n"), "{body}");
    // Pages, newest first.
    let (_, body) = call(&s, "get", "/api/v1/tasks?limit=2", Some(&alice), None);
    let page = json_of(&body);
    let ids: Vec<&str> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [third.as_str(), second.as_str()], "{page}");
    assert_eq!(page["tasks"][0]["queued"], true, "{page}");
    assert_eq!(page["next"], second.as_str(), "{page}");
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks?limit=2&before={second}"),
        Some(&alice),
        None,
    );
    let rest = json_of(&body);
    assert_eq!(rest["tasks"].as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(
        (rest["tasks"][0]["id"].as_str(), &rest["next"]),
        (Some(first.as_str()), &Value::Null),
        "{rest}"
    );
    // A bad query is a usage error naming what was wrong (an unknown
    // state or outcome, the ones there are).
    for (bad, named) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("before=nope", "before"),
        ("state=done", "running, waiting"),
        ("outcome=passed", "verified, failed"),
        ("outcome=", "verified, failed"),
        ("state=", "running, waiting"),
    ] {
        let (status, body) = call(
            &s,
            "get",
            &format!("/api/v1/tasks?{bad}"),
            Some(&alice),
            None,
        );
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(json_of(&body)["error"]["kind"], "usage", "{body}");
        assert!(body.contains(named), "{bad}: {body}");
    }
    // Filtered: by where each stands, by text in it, by owner; the
    // filters combine.
    assert_eq!(
        listed(&s, &alice, "state=queued"),
        [third.as_str(), second.as_str()]
    );
    assert_eq!(listed(&s, &alice, "state=waiting"), [first.as_str()]);
    // A cursor that does not pass the filters still places the page.
    assert_eq!(
        listed(&s, &alice, &format!("state=waiting&before={third}")),
        [first.as_str()]
    );
    assert!(listed(&s, &alice, "state=ended").is_empty());
    assert!(listed(&s, &alice, "outcome=verified").is_empty());
    assert_eq!(
        listed(
            &s,
            &alice,
            &format!("q={}", &first[first.len() - 6..].to_uppercase())
        ),
        [first.as_str()]
    );
    assert_eq!(
        listed(&s, &alice, "q=WRITE%20HELLO&state=queued&limit=1"),
        [third.as_str()]
    );
    assert_eq!(listed(&s, &admin, "owner=alice").len(), 3);
    assert!(listed(&s, &admin, "owner=-").is_empty());
    assert!(listed(&s, &admin, "owner=bob").is_empty());
    // Another owner's task is no cursor: it reveals nothing.
    let bob = token(&s, "bob", Scope::Run);
    let (status, _) = call(
        &s,
        "get",
        &format!("/api/v1/tasks?before={first}"),
        Some(&bob),
        None,
    );
    assert_eq!(status, 400);
    // The answer frees the place; the others then run, in order, to the end.
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{first}/approve"),
        Some(&alice),
        Some(json!({"approval_id": pending})),
    );
    assert_eq!(status, 200, "{body}");
    let ends: Vec<Value> = [&first, &second, &third]
        .iter()
        .map(|id| wait_ended(&s, &alice, id))
        .collect();
    for e in &ends {
        assert_eq!(
            (e["outcome"].as_str(), e["queued"].as_bool()),
            (Some("verified"), Some(false)),
            "{e}"
        );
    }
    let created = |e: &Value| e["updated"].as_str().unwrap().to_string();
    assert!(
        created(&ends[1]) <= created(&ends[2]),
        "the second ended first: {ends:?}"
    );
    // Every recorded event says when.
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{second}/events"),
        Some(&alice),
        None,
    );
    let events = json_of(&body);
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["at"].as_str().is_some_and(|a| a.ends_with('Z'))),
        "{events}"
    );
}

#[test]
fn many_watchers_of_one_task_get_every_event_from_one_reader() {
    let s = start("watchers", 10_000);
    let alice = token(&s, "alice", Scope::Run);
    let (status, body) = post_task(
        &s,
        &alice,
        json!({"instruction": "slowly", "checks": ["test -f README.md"], "allow_vacuous": true, "model": "scripted:slow.yaml"}),
    );
    // No such script: refused before anything is stored.
    assert_eq!(status, 400, "{body}");
    std::fs::write(
        s.project.join("slow.yaml"),
        "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"sleep 1\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let (status, body) = post_task(
        &s,
        &alice,
        json!({"instruction": "slowly", "checks": ["test -f README.md"], "allow_vacuous": true, "model": "scripted:slow.yaml"}),
    );
    assert_eq!(status, 201, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    // Twenty watchers join while it runs, from different places.
    let watchers: Vec<_> = (0..20)
        .map(|i| {
            let (base, alice, id) = (s.base.clone(), alice.clone(), id.clone());
            std::thread::spawn(move || {
                let mut r = agent()
                    .get(&format!("{base}/api/v1/tasks/{id}/stream"))
                    .header("Authorization", &format!("Bearer {alice}"));
                if i % 2 == 1 {
                    r = r.header("Last-Event-ID", "2");
                }
                let mut resp = r.call().unwrap();
                assert_eq!(resp.status().as_u16(), 200);
                (i, resp.body_mut().read_to_string().unwrap())
            })
        })
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for w in watchers {
        let (i, body) = w.join().unwrap();
        let ids: Vec<u64> = body
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|n| n.parse().unwrap())
            .collect();
        let from = if i % 2 == 1 { 3 } else { 0 };
        assert_eq!(ids.first(), Some(&from), "{body}");
        assert!(
            ids.windows(2).all(|w| w[1] == w[0] + 1),
            "a gap or a repeat: {ids:?}"
        );
        assert!(body.trim_end().ends_with("event: end\ndata: {}"), "{body}");
        seen.insert(ids.last().copied());
    }
    // All saw the same last event: the task's last.
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events"),
        Some(&alice),
        None,
    );
    let n = json_of(&body)["events"].as_array().unwrap().len() as u64;
    assert_eq!(seen.into_iter().next().flatten(), Some(n - 1));
    // Nobody watches now: the reader has stopped.
    let start = Instant::now();
    let admin = token(&s, "root", Scope::Admin);
    loop {
        let (_, body) = call(&s, "get", "/metrics", Some(&admin), None);
        if body.contains("loop_server_event_readers 0\n") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_task_given_more_budget_while_the_server_is_full_streams_on_when_it_runs() {
    let s = one_place("more");
    let alice = token(&s, "alice", Scope::Run);
    // A task that stops at its one-step limit.
    let (status, body) = post_task(
        &s,
        &alice,
        json!({"instruction": "write hello", "checks": ["grep -q hello hello.txt"], "model": "scripted:script.yaml", "max_steps": 1}),
    );
    assert_eq!(status, 201, "{body}");
    let short = json_of(&body)["id"].as_str().unwrap().to_string();
    let ended = wait_ended(&s, &alice, &short);
    assert!(
        ended["outcome"]
            .as_str()
            .is_some_and(|o| o.starts_with("limit_reached")),
        "{ended}"
    );
    // The one place is then taken by a task waiting for an answer.
    let (asking, pending) = take_the_place(&s, &alice);
    // More budget: it waits its turn, and says so.
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{short}/resume"),
        Some(&alice),
        Some(json!({"add_steps": 5})),
    );
    assert_eq!(status, 202, "{body}");
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{short}"),
        Some(&alice),
        None,
    );
    assert_eq!(json_of(&body)["queued"], true, "{body}");
    // A stream opened now, from its last event on, does not end: its
    // record still says "ended", but the task goes on.
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{short}/events"),
        Some(&alice),
        None,
    );
    let last = json_of(&body)["events"].as_array().unwrap().len() - 1;
    let (tx, rx) = std::sync::mpsc::channel();
    let (base, token, id) = (s.base.clone(), alice.clone(), short.clone());
    std::thread::spawn(move || {
        let mut resp = agent()
            .get(&format!("{base}/api/v1/tasks/{id}/stream"))
            .header("Authorization", &format!("Bearer {token}"))
            .header("Last-Event-ID", &last.to_string())
            .call()
            .unwrap();
        let _ = tx.send(resp.body_mut().read_to_string().unwrap());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(2)).is_err(),
        "the stream of a queued task ended"
    );
    // The answer frees the place: the task runs on, and its stream sends
    // what it records, then `end`.
    let (status, body) = call(
        &s,
        "post",
        &format!("/api/v1/tasks/{asking}/approve"),
        Some(&alice),
        Some(json!({"approval_id": pending})),
    );
    assert_eq!(status, 200, "{body}");
    let streamed = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(
        streamed.starts_with(&format!("id: {}\n", last + 1)),
        "{streamed}"
    );
    assert!(streamed.contains("event: finished"), "{streamed}");
    assert!(
        streamed.trim_end().ends_with("event: end\ndata: {}"),
        "{streamed}"
    );
    let (_, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{short}"),
        Some(&alice),
        None,
    );
    assert_eq!(json_of(&body)["outcome"], "verified", "{body}");
}

#[test]
fn no_answer_may_be_kept_by_a_cache() {
    let s = start("no-store", 5);
    let reader = token(&s, "alice", Scope::Read);
    let a = agent();
    for (path, auth) in [
        ("/api/v1/tasks", Some(reader.as_str())),
        ("/api/v1/tasks", None),
        ("/no/such/route", None),
    ] {
        let mut r = a.get(&format!("{}{path}", s.base));
        if let Some(t) = auth {
            r = r.header("Authorization", &format!("Bearer {t}"));
        }
        let resp = r.call().unwrap();
        assert_eq!(
            resp.headers()
                .get("cache-control")
                .and_then(|v| v.to_str().ok()),
            Some("no-store"),
            "{path} ({})",
            resp.status()
        );
    }
}

#[test]
fn mcp_checks_the_origin_and_takes_the_servers_one_body_limit() {
    let s = start("mcp-origin", 5);
    let reader = token(&s, "alice", Scope::Read);
    let a = agent();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let host = s.base.trim_start_matches("http://").to_string();
    let post = |origin: Option<&str>, body: String| {
        let mut r = a
            .post(&format!("{}/mcp", s.base))
            .header("Authorization", &format!("Bearer {reader}"))
            .header("Accept", "application/json, text/event-stream")
            .content_type("application/json");
        if let Some(o) = origin {
            r = r.header("Origin", o);
        }
        let mut resp = r.send(body).unwrap();
        (
            resp.status().as_u16(),
            resp.body_mut().read_to_string().unwrap_or_default(),
        )
    };
    // A page of another origin (a rebound name) is refused.
    let (status, body) = post(Some("http://evil.example"), init.to_string());
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("forbidden_origin"), "{body}");
    let (status, body) = post(Some("null"), init.to_string());
    assert_eq!(status, 403, "{body}");
    // The server's own origin, and a client that sends none, are served.
    let (status, body) = post(Some(&format!("http://{host}")), init.to_string());
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(None, init.to_string());
    assert_eq!(status, 200, "{body}");
    // Over 1 MiB, as on every route: 413 in the API's shape, answered
    // from the declared length before any of the body is read (so the
    // request is written by hand: a client still sending 2 MiB would see
    // the connection close under it).
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(&host).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        c,
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {reader}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        2 << 20
    )
    .unwrap();
    c.write_all(br#"{"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"pad": "xxxx"#)
        .unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("too_large"), "{answer}");
}

#[test]
fn a_crafted_contract_is_a_400_in_milliseconds_and_the_server_stays_up() {
    let s = start("crafted", 5);
    let runner = token(&s, "alice", Scope::Run);
    // 5,000 nested YAML sequences in 10 KB (once a stack overflow that
    // took the whole server down), and 600 `true` checks (once 49 s of
    // pre-start runs and a task left behind).
    let deep = format!("{}x", "- ".repeat(5000));
    let mut many = String::from("instruction: x\ncriteria:\n");
    for i in 0..600 {
        many.push_str(&format!(
            "  - id: c{i}\n    checks:\n      - run: \"true\"\n"
        ));
    }
    for (what, contract, says) in [
        ("deep", deep, "nested more than 64 levels deep"),
        ("many", many, "600 criteria: a contract has at most 64"),
    ] {
        let started = Instant::now();
        let (status, body) = post_task(
            &s,
            &runner,
            json!({"instruction": "x", "contract": contract}),
        );
        assert_eq!(status, 400, "{what}: {body}");
        assert!(body.contains(says), "{what}: {body}");
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
    }
    // Still up, and nothing was left behind.
    let (status, body) = call(&s, "get", "/api/v1/tasks", Some(&runner), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json_of(&body)["tasks"].as_array().map(Vec::len),
        Some(0),
        "{body}"
    );
}

/// A connection must send each request's head within the server's limit:
/// a half-sent request, a silent connection and an idle kept-alive one are
/// closed (the limit is 15 s; 1 s here), while requests that come in time,
/// one after another on the same connection, are answered.
#[test]
fn half_sent_and_idle_connections_are_closed_and_timely_ones_served() {
    use std::io::{Read, Write};
    let project = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("api-head-timeout");
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&project).unwrap();
    let runtime = Runtime::open(&project).unwrap();
    let state = loop_server::AppState::new(runtime, 60, 2);
    let addr = spawn_server(state, Duration::from_secs(1));
    let connect = || {
        let c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        c
    };
    // How long until the server closes `c`, and what it said before.
    let closed_after = |c: &mut std::net::TcpStream| {
        let t = Instant::now();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf) {
                Ok(0) => return (t.elapsed(), String::from_utf8_lossy(&got).to_string()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return (t.elapsed(), String::from_utf8_lossy(&got).to_string());
                }
                Err(e) => panic!(
                    "still open after {:?} ({e}): {}",
                    t.elapsed(),
                    String::from_utf8_lossy(&got)
                ),
            }
        }
    };
    // Silent from the start.
    let mut c = connect();
    let (after, said) = closed_after(&mut c);
    assert!(after < Duration::from_secs(4), "{after:?}");
    assert!(!said.contains("200 OK"), "{said}");
    // Half a head, then nothing.
    let mut c = connect();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let (after, said) = closed_after(&mut c);
    assert!(after < Duration::from_secs(4), "{after:?}");
    assert!(!said.contains("200 OK"), "{said}");
    // Two requests in time on one connection are both answered; then the
    // idle connection is closed.
    let mut c = connect();
    for _ in 0..2 {
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        let n = c.read(&mut buf).unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        std::thread::sleep(Duration::from_millis(400));
    }
    let (after, said) = closed_after(&mut c);
    assert!(after < Duration::from_secs(4), "{after:?}");
    assert!(said.is_empty(), "{said}");
}

/// MCP sessions are capped per token (16 at once): past it `initialize` is
/// a 429 naming the cap, while another token still opens one, and closing
/// a session makes room again.
#[test]
fn mcp_sessions_are_capped_per_token_and_closing_one_makes_room() {
    let s = start("mcp-sessions", 600);
    let (alice, bob) = (
        token(&s, "alice", Scope::Read),
        token(&s, "bob", Scope::Read),
    );
    let a = agent();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let open = |who: &str| {
        let mut resp = a
            .post(&format!("{}/mcp", s.base))
            .header("Authorization", &format!("Bearer {who}"))
            .header("Accept", "application/json, text/event-stream")
            .content_type("application/json")
            .send(init.as_str())
            .unwrap();
        let id = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let status = resp.status().as_u16();
        let body = if status == 200 {
            String::new()
        } else {
            resp.body_mut().read_to_string().unwrap_or_default()
        };
        (status, id, body)
    };
    let mut ids = Vec::new();
    for i in 0..16 {
        let (status, id, body) = open(&alice);
        assert_eq!(status, 200, "session {i}: {body}");
        ids.push(id.expect("a session id"));
    }
    let (status, _, body) = open(&alice);
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("too_many_sessions") && body.contains("holds 16 MCP sessions"),
        "{body}"
    );
    // Another token is not held back by alice's.
    let (status, _, body) = open(&bob);
    assert_eq!(status, 200, "{body}");
    // Closing one makes room for one.
    let closed = a
        .delete(&format!("{}/mcp", s.base))
        .header("Authorization", &format!("Bearer {alice}"))
        .header("mcp-session-id", &ids[0])
        .call()
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let (status, _, body) = open(&alice);
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = open(&alice);
    assert_eq!(status, 429, "{body}");
}

/// Task `id`'s status as `token` sees it, which must be a 200.
fn status_200(s: &Server, token: &str, id: &str) -> Value {
    let (status, b) = call(s, "get", &format!("/api/v1/tasks/{id}"), Some(token), None);
    assert_eq!(status, 200, "{b}");
    json_of(&b)
}

#[test]
fn new_tasks_are_prepared_jobs_at_a_time_and_a_slow_one_is_answered_queued() {
    // One place; a request waits a second for its task's preparation,
    // which takes about four (its check, slow, runs on the untouched
    // workspace and on an empty one).
    let project = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("api-prestart");
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    let runtime = Runtime::open(&project).unwrap();
    let state = loop_server::AppState::new(runtime.clone(), 10_000, 1)
        .answer_within(Duration::from_secs(1));
    let addr = spawn_server(state, loop_server::HEAD_TIMEOUT);
    let s = Server {
        base: format!("http://{addr}"),
        project: runtime.project().to_path_buf(),
        runtime,
    };
    let alice = token(&s, "alice", Scope::Run);
    let body = json!({"instruction": "write hello", "checks": ["sleep 2; grep -q hello hello.txt"], "model": "scripted:script.yaml"});
    let answers: Vec<(u16, String, Duration)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                sc.spawn(|| {
                    let t0 = Instant::now();
                    let (status, b) = post_task(&s, &alice, body.clone());
                    (status, b, t0.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ids = Vec::new();
    for (status, b, took) in &answers {
        // Kept and answered at once, before any preparation (each takes
        // about four seconds), with the id the task will have.
        assert_eq!(*status, 201, "{b}");
        let v = json_of(b);
        assert_eq!(v["state"], "queued", "{v}");
        assert!(*took < Duration::from_secs(2), "answered after {took:?}");
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    // The answer's `events` means what it says: the stream of a task still
    // waiting for its place opens once the task is stored, never a 404.
    let stream = {
        let url = format!("{}/api/v1/tasks/{}/stream", s.base, ids[2]);
        let auth = format!("Bearer {alice}");
        std::thread::spawn(move || {
            agent()
                .get(&url)
                .header("Authorization", &auth)
                .call()
                .unwrap()
                .status()
                .as_u16()
        })
    };
    // Never two preparations at once; each task then runs to its end.
    let (mut most, mut seen) = (0, std::collections::BTreeSet::new());
    let start = Instant::now();
    loop {
        let mut preparing = 0;
        let mut ended = 0;
        for id in &ids {
            let v = status_200(&s, &alice, id);
            seen.insert(v["state"].as_str().unwrap_or("").to_string());
            preparing += (v["state"] == "preparing") as usize;
            ended += v["outcome"].is_string() as usize;
        }
        most = most.max(preparing);
        if ended == ids.len() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never ended: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(stream.join().unwrap(), 200, "the queued task's stream");
    assert_eq!(most, 1, "preparations at once (states seen: {seen:?})");
    assert!(seen.contains("queued"), "{seen:?}");
    for id in &ids {
        assert_eq!(wait_ended(&s, &alice, id)["outcome"], "verified");
    }
    // Another owner sees none of them, prepared or not.
    let bob = token(&s, "bob", Scope::Run);
    let (status, _) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{}", ids[0]),
        Some(&bob),
        None,
    );
    assert_eq!(status, 404);

    // A task refused in its preparation (its check cannot fail): the
    // answer was `queued`; its status then says refused, and why; the
    // store never had it.
    let (status, b) = post_task(
        &s,
        &alice,
        json!({"instruction": "write hello", "checks": ["sleep 2; true"], "model": "scripted:script.yaml"}),
    );
    assert_eq!(status, 201, "{b}");
    let id = json_of(&b)["id"].as_str().unwrap().to_string();
    let (status, b) = call(&s, "get", &format!("/api/v1/tasks/{id}"), Some(&bob), None);
    assert_eq!(status, 404, "{b}");
    // Its stream waits for the preparation, then answers its refusal.
    let (status, b) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/stream"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 400, "{b}");
    assert!(b.contains("cannot fail"), "{b}");
    let start = Instant::now();
    let refused = loop {
        let v = status_200(&s, &alice, &id);
        if v["state"] == "refused" {
            break v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never settled: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(refused["error"]["status"], 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("passes on an empty workspace: it cannot fail"),
        "{refused}"
    );
    assert!(s.runtime.task(&id).is_err(), "the store has no such task");
    assert!(!body_of_list(&s, &alice).contains(&id));
}

#[test]
fn a_client_that_prefers_to_wait_hears_how_the_preparation_went() {
    let s = start("prefer-wait", 10_000);
    let alice = token(&s, "alice", Scope::Run);
    let post_waiting = |body: Value| -> (u16, Value) {
        let mut r = agent()
            .post(&format!("{}/api/v1/tasks", s.base))
            .header("Authorization", &format!("Bearer {alice}"))
            .header("Prefer", "respond-async, wait=30")
            .content_type("application/json")
            .send(body.to_string())
            .unwrap();
        let status = r.status().as_u16();
        (status, json_of(&r.body_mut().read_to_string().unwrap()))
    };
    // A check that cannot fail: the client that waits hears the refusal
    // itself, and the store never has the task.
    let vacuous =
        json!({"instruction": "write hello", "checks": ["true"], "model": "scripted:script.yaml"});
    let (status, v) = post_waiting(vacuous.clone());
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot fail")),
        "{v}"
    );
    // The honest task: answered once it is stored and started.
    let honest = json!({"instruction": "write hello", "checks": ["grep -q hello hello.txt"], "model": "scripted:script.yaml"});
    let (status, v) = post_waiting(honest);
    assert_eq!(status, 201, "{v}");
    assert!(v["state"].is_null(), "started, not queued: {v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert!(s.runtime.task(&id).is_ok(), "stored before the answer");
    assert_eq!(wait_ended(&s, &alice, &id)["outcome"], "verified");
    // Without the preference the same refusal is answered at once as a
    // kept task, then said in its status.
    let (status, b) = post_task(&s, &alice, vacuous);
    assert_eq!(status, 201, "{b}");
    let v = json_of(&b);
    assert_eq!(v["state"], "queued", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let start = Instant::now();
    let refused = loop {
        let v = status_200(&s, &alice, &id);
        if v["state"] == "refused" {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refused["error"]["status"], 400, "{refused}");
    assert!(s.runtime.task(&id).is_err(), "the store has no such task");
}

#[test]
fn a_task_cancelled_before_its_preparation_is_never_prepared() {
    // One place, held by a slow task; the next waits for it.
    let s = start_with("cancel-queued", 10_000, 1, |_| ());
    let alice = token(&s, "alice", Scope::Run);
    let bob = token(&s, "bob", Scope::Run);
    let slow = json!({"instruction": "write hello", "checks": ["sleep 2; grep -q hello hello.txt"], "model": "scripted:script.yaml"});
    let id_of = |(status, b): (u16, String)| -> String {
        assert_eq!(status, 201, "{b}");
        json_of(&b)["id"].as_str().unwrap().to_string()
    };
    let first = id_of(post_task(&s, &alice, slow.clone()));
    let queued = id_of(post_task(&s, &alice, slow.clone()));
    assert_eq!(status_200(&s, &alice, &queued)["state"], "queued");
    let cancel = |who: &str, id: &str| -> (u16, Value) {
        let (status, b) = call(
            &s,
            "post",
            &format!("/api/v1/tasks/{id}/cancel"),
            Some(who),
            None,
        );
        (status, json_of(&b))
    };
    // Not bob's to cancel; alice's cancel ends it before its preparation.
    assert_eq!(cancel(&bob, &queued).0, 404);
    let (status, v) = cancel(&alice, &queued);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"], "ended_here", "{v}");
    assert_eq!(v["outcome"], "cancelled", "{v}");
    let v = status_200(&s, &alice, &queued);
    assert_eq!(v["state"], "cancelled", "{v}");
    assert_eq!(v["error"]["status"], 409, "{v}");
    assert_eq!(cancel(&alice, &queued).1["result"], "already_ended");
    // Its refusal is kept in the store, held by no server: a restarted
    // server shows it and never prepares it.
    let t0 = Instant::now();
    loop {
        let kept = s.runtime.kept_submission(&queued).unwrap().unwrap();
        if kept.holder.is_empty() {
            assert!(kept.body.contains("\"cancelled\""), "{}", kept.body);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never kept");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A task cancelled while it is being prepared is cancelled once it is
    // stored: it never runs a step.
    let t0 = Instant::now();
    while status_200(&s, &alice, &first)["state"] != "preparing" {
        assert!(t0.elapsed() < Duration::from_secs(30), "never preparing");
        std::thread::sleep(Duration::from_millis(20));
    }
    // One waiting here, cancelled through another server on the same
    // store: this one never prepares it, and says so when its turn comes.
    let third = id_of(post_task(&s, &alice, slow.clone()));
    let other = {
        let runtime = Runtime::open(&s.project).unwrap();
        let state = loop_server::AppState::new(runtime.clone(), 10_000, 1);
        Server {
            base: format!("http://{}", spawn_server(state, loop_server::HEAD_TIMEOUT)),
            project: s.project.clone(),
            runtime,
        }
    };
    let (status, b) = call(
        &other,
        "post",
        &format!("/api/v1/tasks/{third}/cancel"),
        Some(&bob),
        None,
    );
    assert_eq!(status, 404, "not bob's: {b}");
    let (status, b) = call(
        &other,
        "post",
        &format!("/api/v1/tasks/{third}/cancel"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 200, "{b}");
    assert_eq!(json_of(&b)["result"], "ended_here", "{b}");
    assert_eq!(status_200(&other, &alice, &third)["state"], "cancelled");
    let (status, v) = cancel(&alice, &first);
    assert_eq!(
        (status, v["result"].as_str()),
        (200, Some("stopped")),
        "{v}"
    );
    let ended = wait_ended(&s, &alice, &first);
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    let t0 = Instant::now();
    while status_200(&s, &alice, &third)["state"] != "cancelled" {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "never said cancelled here"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        s.runtime.task(&third).is_err(),
        "the cancelled one never stored"
    );
    // The honest task behind them still runs to its end.
    let next = id_of(post_task(&s, &alice, slow));
    assert_eq!(wait_ended(&s, &alice, &next)["outcome"], "verified");
    assert!(
        s.runtime.task(&queued).is_err(),
        "the cancelled one never stored"
    );
    let (status, b) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{queued}/changes"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 409, "{b}");
}

const UPLOAD_SCRIPT: &str = "turns:
  - calls:
      - {tool: read_document, args: {path: inputs/north.csv}}
  - calls:
      - tool: write_spreadsheet
        args:
          path: out/summary.xlsx
          sheets:
            - name: Summary
              rows: [[Region, Total], [North, 120], [South, 80.5], [All]]
              formulas: [{cell: B4, formula: 'SUM(B2:B3)', value: 200.5}]
  - calls:
      - {tool: run_command, args: {command: 'ln -s summary.xlsx out/latest.xlsx'}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

const UPLOAD_CONTRACT: &str = "instruction: Sum the regions given\ncriteria:\n  - id: total\n    checks:\n      - {cell_equals: out/summary.xlsx, sheet: Summary, cell: B4, value: 200.5}\nartifacts: [out/summary.xlsx]\n";

/// `POST /api/v1/tasks` as a multipart upload: the task as JSON, then
/// each (name, bytes) as an `input` file.
fn upload(s: &Server, token: &str, task: &Value, files: &[(&str, &[u8])]) -> (u16, String) {
    let boundary = "loop-test-boundary-7d1f";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"task\"\r\nContent-Type: application/json\r\n\r\n{task}\r\n"
    )
    .into_bytes();
    for (name, bytes) in files {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"input\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let mut resp = agent()
        .post(&format!("{}/api/v1/tasks", s.base))
        .header("Authorization", &format!("Bearer {token}"))
        .content_type(&format!("multipart/form-data; boundary={boundary}"))
        .send(&body[..])
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn files_uploaded_with_a_task_reach_it_and_what_it_made_downloads_as_its_receipt_signs_it() {
    let s = start_with("upload", 10_000, 8, |p| {
        std::fs::write(p.join("upload.yaml"), UPLOAD_SCRIPT).unwrap();
    });
    let alice = token(&s, "alice", Scope::Run);
    let task = json!({"instruction": "Sum the regions given", "contract": UPLOAD_CONTRACT, "model": "scripted:upload.yaml"});
    let (status, body) = upload(
        &s,
        &alice,
        &task,
        &[
            ("north.csv", b"region,amount\nNorth,120\n"),
            ("south.csv", b"region,amount\nSouth,80.5\n"),
        ],
    );
    assert_eq!(status, 201, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    let v = wait_ended(&s, &alice, &id);
    assert_eq!(v["outcome"], "verified", "{v}");
    // The model read the uploaded file.
    let (_, events) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/events"),
        Some(&alice),
        None,
    );
    assert!(events.contains("B2=120"), "{events}");
    // The workbook downloads byte for byte as the receipt signs it.
    let mut resp = agent()
        .get(&format!(
            "{}/api/v1/tasks/{id}/files/out/summary.xlsx",
            s.base
        ))
        .header("Authorization", &format!("Bearer {alice}"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let said = resp
        .headers()
        .get("x-loop-sha256")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let bytes = resp.body_mut().read_to_vec().unwrap();
    let (_, receipt) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/receipt"),
        Some(&alice),
        None,
    );
    let envelope = json_of(&receipt);
    use base64::Engine;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope["payload"].as_str().unwrap())
        .unwrap();
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    let signed = statement["subject"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "out/summary.xlsx")
        .unwrap()["digest"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(loop_protocol::hash::sha256_hex(&bytes), signed);
    assert_eq!(said, signed);
    // A link the change set adds is said to be one, not a file changed
    // since its receipt.
    let (status, body) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/files/out/latest.xlsx"),
        Some(&alice),
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("is a symbolic link"), "{body}");
    // A given file is not a made one; a file the receipt does not name
    // is not given; another owner sees nothing.
    for p in ["inputs/north.csv", "README.md", "../README.md"] {
        let (status, body) = call(
            &s,
            "get",
            &format!("/api/v1/tasks/{id}/files/{p}"),
            Some(&alice),
            None,
        );
        assert_eq!(status, 404, "{p}: {body}");
    }
    let bob = token(&s, "bob", Scope::Run);
    let (status, _) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/files/out/summary.xlsx"),
        Some(&bob),
        None,
    );
    assert_eq!(status, 404);
    // A screenshot kept as the task's evidence is given by its digest,
    // with its media type, only while its content has that digest; a
    // link in its place is not followed; a name that is no digest is a
    // bad request.
    let evidence = s.project.join(format!(".loop/tasks/{id}/evidence"));
    std::fs::create_dir_all(&evidence).unwrap();
    let png = b"\x89PNG\r\n\x1a\nnot really drawn".to_vec();
    let sha = loop_protocol::hash::sha256_hex(&png);
    std::fs::write(evidence.join(format!("{sha}.png")), &png).unwrap();
    let mut resp = agent()
        .get(&format!("{}/api/v1/tasks/{id}/evidence/{sha}", s.base))
        .header("Authorization", &format!("Bearer {alice}"))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap(),
        "image/png"
    );
    assert_eq!(resp.body_mut().read_to_vec().unwrap(), png);
    let (status, _) = call(
        &s,
        "get",
        &format!("/api/v1/tasks/{id}/evidence/{sha}"),
        Some(&bob),
        None,
    );
    assert_eq!(status, 404, "another owner's evidence");
    let forged = "ab".repeat(32);
    std::fs::write(evidence.join(format!("{forged}.png")), &png).unwrap();
    let host_file = s.project.join("README.md");
    let linked = loop_protocol::hash::sha256_hex(&std::fs::read(&host_file).unwrap());
    std::os::unix::fs::symlink(&host_file, evidence.join(format!("{linked}.png"))).unwrap();
    for (name, want) in [
        (&forged, 404),
        (&linked, 404),
        (&"not-a-digest".to_string(), 400),
    ] {
        let (status, body) = call(
            &s,
            "get",
            &format!("/api/v1/tasks/{id}/evidence/{name}"),
            Some(&alice),
            None,
        );
        assert_eq!(status, want, "{name}: {body}");
    }
    // A name that is no plain file name, and too many files, are refused.
    let (status, body) = upload(&s, &alice, &task, &[("../escape.csv", b"x")]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("a plain file name is needed"), "{body}");
    let many: Vec<(String, Vec<u8>)> = (0..17)
        .map(|i| (format!("f{i}.csv"), b"a\n".to_vec()))
        .collect();
    let refs: Vec<(&str, &[u8])> = many.iter().map(|(n, b)| (n.as_str(), &b[..])).collect();
    let (status, body) = upload(&s, &alice, &task, &refs);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("more than 16 input files"), "{body}"); // The task given twice (which one would run?) is refused.
    let boundary = "loop-test-boundary-twice";
    let part = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"task\"\r\nContent-Type: application/json\r\n\r\n{task}\r\n"
    );
    let body = format!("{part}{part}--{boundary}--\r\n");
    let mut resp = agent()
        .post(&format!("{}/api/v1/tasks", s.base))
        .header("Authorization", &format!("Bearer {alice}"))
        .content_type(&format!("multipart/form-data; boundary={boundary}"))
        .send(body.as_bytes())
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let said = resp.body_mut().read_to_string().unwrap_or_default();
    assert!(said.contains("two `task` parts"), "{said}");
}

#[test]
fn a_sessions_token_stops_working_when_its_time_is_up() {
    let s = start("session", 100);
    let live = s
        .runtime
        .create_session_token("ann", Scope::Read, 60_000)
        .unwrap();
    assert!(live.record.id.starts_with("ses-"), "{}", live.record.id);
    let (status, body) = call(&s, "get", "/api/v1/tasks", Some(&live.token), None);
    assert_eq!(status, 200, "{body}");
    let spent = s
        .runtime
        .create_session_token("ann", Scope::Read, 0)
        .unwrap();
    let (status, body) = call(&s, "get", "/api/v1/tasks", Some(&spent.token), None);
    assert_eq!(status, 401, "{body}");
}

/// The skills a task may use are listed over the API, each judged, and a
/// task started over the API uses one as `loop run --skill` does: its
/// guidance given, and the receipt naming it. A skill nobody can vouch
/// for, or one that is not there, starts nothing, and says which.
#[test]
fn a_task_over_the_api_uses_a_skill_the_project_lists() {
    let s = start_with("skills", 10_000, 8, |p| {
        let pat = p.join("loop-patterns/greeter");
        std::fs::create_dir_all(&pat).unwrap();
        std::fs::write(
            pat.join("SKILL.md"),
            "---\nname: greeter\ndescription: writes greetings\n---\nWHEN: a greeting is asked for.\n",
        )
        .unwrap();
        // A bundle in loop-skills/ with no signature a trusted key made.
        let unsigned = p.join("loop-skills/stranger");
        std::fs::create_dir_all(&unsigned).unwrap();
        std::fs::write(
            unsigned.join("SKILL.md"),
            "---\nname: stranger\ndescription: from nowhere\n---\nDo as you like.\n",
        )
        .unwrap();
    });
    let alice = token(&s, "alice", Scope::Run);
    let (status, body) = call(&s, "get", "/api/v1/skills", Some(&alice), None);
    assert_eq!(status, 200, "{body}");
    let listed = json_of(&body);
    let named = |n: &str| {
        listed["skills"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("{listed}"))
    };
    assert_eq!(named("greeter")["usable"], true, "{listed}");
    assert_eq!(named("greeter")["place"], "pattern", "{listed}");
    assert_eq!(named("stranger")["usable"], false, "{listed}");
    // Without a token: nothing.
    let (status, _) = call(&s, "get", "/api/v1/skills", None, None);
    assert_eq!(status, 401);
    let task = |skills: Value| {
        post_task(
            &s,
            &alice,
            json!({"instruction": "write hello", "checks": ["grep -q hello hello.txt"], "model": "scripted:script.yaml", "skills": skills}),
        )
    };
    for (skills, said) in [
        (json!(["stranger"]), "unsigned: no SKILL.sig.json"),
        (json!(["nobody-has-it"]), "no skill `nobody-has-it`"),
        (
            json!(["greeter", "greeter"]),
            "skill `greeter` is named twice",
        ),
    ] {
        let (status, body) = task(skills);
        let v = json_of(&body);
        let refused = if status == 202 {
            // (Refused while it was prepared: the task's standing says so.)
            let id = v["id"].as_str().unwrap().to_string();
            let start = Instant::now();
            loop {
                let (_, b) = call(
                    &s,
                    "get",
                    &format!("/api/v1/tasks/{id}"),
                    Some(&alice),
                    None,
                );
                let t = json_of(&b);
                if t["state"] == "refused" {
                    break t["error"]["message"].as_str().unwrap().to_string();
                }
                assert!(start.elapsed() < Duration::from_secs(30), "{t}");
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            assert_eq!(status, 400, "{body}");
            v["error"]["message"].as_str().unwrap().to_string()
        };
        assert!(refused.contains(said), "{refused}");
    }
    let (status, body) = task(json!(["greeter"]));
    assert!(status == 201 || status == 202, "{body}");
    let id = json_of(&body)["id"].as_str().unwrap().to_string();
    let t = wait_ended(&s, &alice, &id);
    assert_eq!(t["outcome"], "verified", "{t}");
    let receipt = s.project.join(format!(".loop/receipts/{id}.receipt.json"));
    let envelope: Value = serde_json::from_slice(&std::fs::read(receipt).unwrap()).unwrap();
    use base64::Engine;
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope["payload"].as_str().unwrap())
        .unwrap();
    let statement: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(
        statement["predicate"]["skills"][0]["name"], "greeter",
        "{statement}"
    );
}
