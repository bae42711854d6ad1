//! Secrets never reach a record: a provider whose error echoes the API key
//! (any shape, found by value), a model's thought holding a token, and a
//! token already in the repository that lands in the change set's patch.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../loop-models/tests/common/mod.rs"]
mod common;
mod shared;

use common::{Canned, serve};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const NOBODY: u32 = 65534;

/// Who runs `loop`: this user, and (when that is root) uid 65534 too.
fn users() -> Vec<bool> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root && Command::new("setpriv").arg("--version").output().is_ok() {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// `loop` as this user, or as nobody (a copy of the binary it can run;
/// `dir` handed over to it).
fn loop_as(nobody: bool, dir: &Path) -> Command {
    if !nobody {
        return Command::new(env!("CARGO_BIN_EXE_loop"));
    }
    let exe = shared::shared_binary();
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{NOBODY}:{NOBODY}"))
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "--",
    ])
    .arg(exe)
    .env("HOME", dir)
    .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    c
}

/// A fresh directory any user can reach.
fn scene(name: &str, nobody: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "loop-secrets-{name}-{nobody}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A key no pattern knows (too short for the `sk-` shape).
const KEY: &str = "sk-test-SECRET123";

fn every_file(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for item in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = item.path();
            let ft = item.file_type().unwrap();
            if ft.is_dir() {
                todo.push(p);
            } else if ft.is_file() {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn an_api_key_echoed_by_the_provider_reaches_no_record() {
    for nobody in users() {
        echoed_key(nobody);
    }
}

fn echoed_key(nobody: bool) {
    let echo = serde_json::json!({"error": {"message": format!("Incorrect API key provided: {KEY}. You can find your key at …"), "type": "invalid_request_error"}});
    let thought = serde_json::json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("{{\"thought\": \"my key is {KEY} and ghp_0123456789abcdefghijABCDEFGHIJ\", \"calls\": []}}")}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    let server = serve(vec![
        Canned::json(200, &thought.to_string()),
        Canned::json(400, &echo.to_string()),
    ]);
    let dir = scene("echo", nobody);
    let _cleanup = Cleanup(dir.clone());
    std::fs::write(
        dir.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: openai:m\n    tool_protocol: json\n    stream: false\n    retries: 1\n",
    )
    .unwrap();
    let record = dir.join("session.jsonl");
    let out = loop_as(nobody, &dir)
        .args([
            "run",
            "write a.txt",
            "--check",
            "test -f a.txt",
            "--max-steps",
            "4",
            "--json",
            "--record",
        ])
        .arg(&record)
        .arg("--project")
        .arg(&dir)
        .env("LOOP_OPENAI_BASE_URL", format!("{}/v1", server.url))
        .env("LOOP_OPENAI_API_KEY", KEY)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains("receipt"),
        "the run ended with a receipt: {all}"
    );
    assert!(
        all.contains("Incorrect API key provided"),
        "the error is said: {all}"
    );
    assert!(!all.contains(KEY), "the key on the screen: {all}");
    assert!(!all.contains("ghp_0123456789"), "{all}");
    let mut looked = 0;
    for (path, bytes) in every_file(&dir.join(".loop"))
        .into_iter()
        .chain(every_file(&dir).into_iter().filter(|(p, _)| p == &record))
    {
        looked += 1;
        assert!(!contains(&bytes, KEY), "the key in {}", path.display());
        assert!(
            !contains(&bytes, "ghp_0123456789"),
            "a token in {}",
            path.display()
        );
    }
    assert!(
        looked >= 4,
        "the ledger, receipt, store and recording were read"
    );
    // The key went where it belongs: the request's header.
    let reqs = server.received.lock().unwrap();
    assert!(
        reqs.iter()
            .any(|r| r.header("authorization").is_some_and(|h| h.contains(KEY))),
        "the provider was sent the key"
    );
}

#[test]
fn a_token_in_the_repository_is_redacted_in_the_patch_and_applies_exactly() {
    for nobody in users() {
        token_in_patch(nobody);
    }
}

fn token_in_patch(nobody: bool) {
    let dir = scene("patch", nobody);
    let _cleanup = Cleanup(dir.clone());
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let token = "ghp_ZYXWVUTSRQPONMLKJIHGfedcba9876543210";
    std::fs::write(
        project.join("config.py"),
        format!("TOKEN = '{token}'\nDEBUG = False\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: edit_file, args: {path: config.py, old: \"DEBUG = False\", new: \"DEBUG = True\"}}\n      - {tool: finish, args: {summary: debug on}}\n",
    )
    .unwrap();
    let out = loop_as(nobody, &dir)
        .args([
            "run",
            "turn debug on",
            "--check",
            "grep -q 'DEBUG = True' config.py",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let patch = every_file(&project.join(".loop/receipts"))
        .into_iter()
        .find(|(p, _)| p.to_string_lossy().ends_with(".changes.patch"))
        .unwrap();
    let text = String::from_utf8_lossy(&patch.1);
    assert!(text.contains("+DEBUG = True"), "{text}");
    assert!(!text.contains(token), "{text}");
    assert!(text.contains("[REDACTED]"), "{text}");
    let id = patch
        .0
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .strip_suffix(".changes.patch")
        .unwrap()
        .to_string();
    let applied = loop_as(nobody, &dir)
        .args(["apply", &id, "--project"])
        .arg(&project)
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LOOP_WORKSPACES_DIR", dir.with_extension("workspaces"))
        .output()
        .unwrap();
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&applied.stdout)
    );
    // The real bytes were applied, not the redacted view.
    assert_eq!(
        std::fs::read_to_string(project.join("config.py")).unwrap(),
        format!("TOKEN = '{token}'\nDEBUG = True\n")
    );
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // The runtime keeps a project's task workspaces beside it.
        let mut beside = self.0.clone().into_os_string();
        beside.push(".workspaces");
        let _ = std::fs::remove_dir_all(beside);
    }
}

/// Removes a scene, and the workspaces the runtime kept beside it, when
/// the test ends.
struct Cleanup(PathBuf);
