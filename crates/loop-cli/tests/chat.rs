//! Chat inlets through `loop serve`, against local servers on 127.0.0.1
//! that take the platforms' posting methods (Telegram's `sendMessage`,
//! Slack's `chat.postMessage`) as documented, with updates shaped as the
//! platforms send them: a `/loop` message from an allowed sender starts
//! the trigger's task; its approval question is posted with approve and
//! deny buttons; a press by someone who may not approve answers nothing,
//! one by an approver lets the task go on to verified; its end is posted.
//! A wrong secret or signature is a 401; a sender nobody allowed starts
//! nothing; an update delivered twice is taken once.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a stand-in took.
type Posts = shared::TakenAll;

/// A stand-in for a chat platform's API: it answers every post `ok`.
fn platform() -> (u16, Posts) {
    shared::stand_in(100, |_, _| {
        (200, r#"{"ok":true,"result":{"message_id":1}}"#.to_string())
    })
}

/// POST `body` to trigger `name` with `headers`: status and answer.
fn deliver(
    url: &str,
    name: &str,
    headers: &[(&str, String)],
    body: &[u8],
    form: bool,
) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent.post(&format!("{url}/api/v1/hooks/{name}")).header(
        "Content-Type",
        if form {
            "application/x-www-form-urlencoded"
        } else {
            "application/json"
        },
    );
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    let mut resp = r.send(body).unwrap();
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().unwrap_or_default())
}

/// Wait until a post whose text has `words` arrived; that post.
fn wait_for(posts: &Posts, words: &str) -> (String, String, Value) {
    let found = |t: &shared::Taken| t.body["text"].as_str().is_some_and(|x| x.contains(words));
    let start = Instant::now();
    loop {
        if let Some(t) = posts.lock().unwrap().iter().find(|t| found(t)) {
            return (t.path.clone(), t.auth.clone(), t.body.clone());
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no post with {words:?}: {:?}",
            posts.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

const TG_SECRET: &str = "tg-secret-token-0123456789";
const TG_TOKEN: &str = "123456:ABCdefGhIJKlmNoPQRsTUVwxyZ";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SLACK_TOKEN: &str = "xoxb-test-token-0123456789";

fn slack_headers(body: &[u8], secret: &str) -> Vec<(&'static str, String)> {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut signed = format!("v0:{ts}:").into_bytes();
    signed.extend_from_slice(body);
    let sig = loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(
        secret.as_bytes(),
        &signed,
    ));
    vec![
        ("X-Slack-Request-Timestamp", ts.to_string()),
        ("X-Slack-Signature", format!("v0={sig}")),
    ]
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn a_chat_asks_for_a_task_approves_its_command_there_and_hears_how_it_ended() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chat-inlets");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(
        project.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"touch approved.txt; true AKIAABCDEFGHIJKLMNOP\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let (tg_port, tg) = platform();
    let (slack_port, slack) = platform();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "models:\n  maker:\n    spec: scripted:script.yaml\nexec:\n  approval_timeout_secs: 120\n  rules:\n    - prefix: touch\n      decision: prompt\n      examples: [\"touch a.txt\"]\ntriggers:\n  - name: tg\n    chat: {{kind: telegram, secret_env: LOOP_TEST_TG_SECRET, token_env: LOOP_TEST_TG_TOKEN, api_url: 'http://127.0.0.1:{tg_port}', owner: chat, senders: ['111'], approvers: ['222'], console_url: 'https://loop.example.test'}}\n    task: {{instruction: \"Do what the chat asks\", checks: [\"test -f approved.txt\"]}}\n  - name: sl\n    chat: {{kind: slack, secret_env: LOOP_TEST_SLACK_SECRET, token_env: LOOP_TEST_SLACK_TOKEN, api_url: 'http://127.0.0.1:{slack_port}', owner: chat, senders: [U111], approvers: [U222]}}\n    task: {{instruction: \"Do what the chat asks\", checks: [\"test -f approved.txt\"]}}\n"
        ),
    )
    .unwrap();
    shared::commit_all(&project);
    let (server, url) = shared::serve(
        &home,
        &project,
        &[
            ("LOOP_TEST_TG_SECRET", TG_SECRET),
            ("LOOP_TEST_TG_TOKEN", TG_TOKEN),
            ("LOOP_TEST_SLACK_SECRET", SLACK_SECRET),
            ("LOOP_TEST_SLACK_TOKEN", SLACK_TOKEN),
        ],
        &[],
    );

    // Telegram. A message as the Bot API delivers it.
    let message = |update: u64, from: u64, text: &str| {
        json!({"update_id": update, "message": {"message_id": 7, "date": 1764930000,
            "from": {"id": from, "is_bot": false, "first_name": "Ann", "username": "ann"},
            "chat": {"id": -1001234, "title": "ops", "type": "supergroup"}, "text": text}})
        .to_string()
        .into_bytes()
    };
    let secret = |s: &str| vec![("X-Telegram-Bot-Api-Secret-Token", s.to_string())];
    let (code, said) = deliver(
        &url,
        "tg",
        &secret("wrong-secret-0123456789"),
        &message(1, 111, "/loop touch it"),
        false,
    );
    assert_eq!(code, 401, "{said}");
    let (code, said) = deliver(
        &url,
        "tg",
        &secret(TG_SECRET),
        &message(2, 999, "/loop touch it"),
        false,
    );
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("user 999 may not ask"), "{said}");
    let (code, said) = deliver(
        &url,
        "tg",
        &secret(TG_SECRET),
        &message(3, 111, "/loop@loop_bot make approved.txt"),
        false,
    );
    assert_eq!(code, 202, "{said}");
    let id = serde_json::from_str::<Value>(&said).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, said) = deliver(
        &url,
        "tg",
        &secret(TG_SECRET),
        &message(3, 111, "/loop@loop_bot make approved.txt"),
        false,
    );
    assert_eq!(code, 409, "the same update again: {said}");
    let (path, _, started) = wait_for(&tg, &format!("Started task {id}"));
    assert_eq!(path, format!("/bot{TG_TOKEN}/sendMessage"));
    assert_eq!(started["chat_id"], "-1001234");
    assert!(
        started["text"]
            .as_str()
            .unwrap()
            .contains(&format!("https://loop.example.test/#/task/{id}"))
    );
    // The question, with its buttons.
    let (_, _, asked) = wait_for(&tg, "waits for approval");
    // What the question shows is scrubbed as the ledger's copy is.
    assert!(
        !asked.to_string().contains("AKIAABCDEFGHIJKLMNOP"),
        "{asked}"
    );
    assert!(
        asked["text"]
            .as_str()
            .unwrap()
            .contains("touch approved.txt"),
        "{asked}"
    );
    let buttons = &asked["reply_markup"]["inline_keyboard"][0];
    let approve = buttons[0]["callback_data"].as_str().unwrap().to_string();
    assert!(approve.starts_with(&format!("approve:{id}:")), "{asked}");
    // Telegram takes at most 64 bytes of button data, whatever the call's id.
    assert!(approve.len() <= 64, "{approve}");
    assert!(
        buttons[1]["callback_data"]
            .as_str()
            .unwrap()
            .starts_with("deny:")
    );
    let press = |update: u64, from: u64, data: &str| {
        json!({"update_id": update, "callback_query": {"id": "cb1", "chat_instance": "42",
            "from": {"id": from, "is_bot": false, "first_name": "Bo"},
            "message": {"message_id": 8, "date": 1764930001, "chat": {"id": -1001234, "type": "supergroup"}, "text": "waits"},
            "data": data}})
        .to_string()
        .into_bytes()
    };
    // A button this trigger never posted answers nothing.
    let forged = format!("{}:beef0000", approve.rsplit_once(':').unwrap().0);
    let (code, said) = deliver(
        &url,
        "tg",
        &secret(TG_SECRET),
        &press(40, 222, &forged),
        false,
    );
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("this trigger did not post"), "{said}");
    // The sender may ask, not approve.
    let (code, said) = deliver(
        &url,
        "tg",
        &secret(TG_SECRET),
        &press(4, 111, &approve),
        false,
    );
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("user 111 may not approve"), "{said}");
    let (code, said) = deliver(
        &url,
        "tg",
        &secret(TG_SECRET),
        &press(5, 222, &approve),
        false,
    );
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("approved by 222"), "{said}");
    let (_, _, ended) = wait_for(&tg, &format!("Task {id} ended verified"));
    assert!(
        ended["text"]
            .as_str()
            .unwrap()
            .contains("https://loop.example.test/#/task/")
    );
    // Who approved is in the task's record.
    let out = shared::loop_in(&home)
        .args(["logs", &id, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        shared::text(&out).contains("telegram:222"),
        "{}",
        shared::text(&out)
    );
    // Each post is kept, a JSON line appended per post (the end's is
    // appended once it is made: waited for).
    let record = project.join(format!(".loop/tasks/{id}/chat.jsonl"));
    let start = std::time::Instant::now();
    let kept = loop {
        let lines: Vec<Value> = std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines
            .iter()
            .any(|p| p["what"].as_str().is_some_and(|w| w.contains("ended")))
        {
            break lines;
        }
        assert!(start.elapsed().as_secs() < 30, "{lines:?}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(kept.len() >= 3, "{kept:?}");
    assert!(kept.iter().all(|p| p["status"] == 200), "{kept:?}");
    // The same posts, signed beside the receipt as an addendum about it;
    // the receipt still verifies, the addendum not stray.
    let addendum = project.join(format!(".loop/receipts/{id}.addendum-1.json"));
    let start = std::time::Instant::now();
    while !addendum.exists() {
        assert!(start.elapsed().as_secs() < 30, "no addendum");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let payload = shared::payload_of(&addendum);
    assert_eq!(payload["predicate"]["event"], "reported");
    let signed = &payload["predicate"]["report"];
    assert_eq!(signed["posts"].as_array().unwrap(), &kept, "{signed}");
    assert_eq!(signed["chat"]["kind"], "telegram", "{signed}");
    let v = shared::loop_in(&home)
        .args(["verify", "--json"])
        .arg(project.join(format!(".loop/receipts/{id}.receipt.json")))
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(0), "{}", shared::text(&v));
    let verified: Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(verified["stray_addenda"], json!([]), "{verified}");

    // Slack. A slash command, signed as Slack signs it.
    let command = format!(
        "token=x&team_id=T1&channel_id=C42&channel_name=ops&user_id=U111&user_name=ann&command={}&text={}&response_url=x&trigger_id=1.2.3",
        encode("/loop"),
        encode("make approved.txt")
    )
    .into_bytes();
    let (code, said) = deliver(
        &url,
        "sl",
        &slack_headers(&command, "not-the-signing-secret-0123"),
        &command,
        true,
    );
    assert_eq!(code, 401, "{said}");
    let (code, said) = deliver(
        &url,
        "sl",
        &slack_headers(&command, SLACK_SECRET),
        &command,
        true,
    );
    assert_eq!(code, 200, "{said}");
    let id = serde_json::from_str::<Value>(&said).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (path, auth, _) = wait_for(&slack, &format!("Started task {id}"));
    assert_eq!(path, "/chat.postMessage");
    assert_eq!(auth, format!("Bearer {SLACK_TOKEN}"));
    let (_, _, asked) = wait_for(&slack, "waits for approval");
    let value = asked["blocks"][1]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    let click = |user: &str| {
        let payload = json!({"type": "block_actions", "user": {"id": user, "username": "bo"},
            "channel": {"id": "C42", "name": "ops"},
            "actions": [{"action_id": "approve", "block_id": "b", "value": value, "type": "button"}]});
        format!("payload={}", encode(&payload.to_string())).into_bytes()
    };
    let (code, said) = deliver(
        &url,
        "sl",
        &slack_headers(&click("U999"), SLACK_SECRET),
        &click("U999"),
        true,
    );
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("may not approve"), "{said}");
    let (code, said) = deliver(
        &url,
        "sl",
        &slack_headers(&click("U222"), SLACK_SECRET),
        &click("U222"),
        true,
    );
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("approved by U222"), "{said}");
    // The same signed press again is the same press: taken once.
    let (code, said) = deliver(
        &url,
        "sl",
        &slack_headers(&click("U222"), SLACK_SECRET),
        &click("U222"),
        true,
    );
    assert!(
        code == 409 || said.contains("not answered"),
        "{code} {said}"
    );
    wait_for(&slack, &format!("Task {id} ended verified"));
    shared::stop(server);

    // The bot's token is in no record.
    for dir in [project.join(".loop"), home.join("state")] {
        let out = std::process::Command::new("grep")
            .args(["-rl", TG_TOKEN])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let _ = std::fs::remove_dir_all(&home);
}
