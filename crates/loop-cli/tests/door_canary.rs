//! The canary: in every place the runtime reads a project file (guidance,
//! a pattern's skill and contract, the Loopfile, setup keys, its own
//! `.loop`), a cloned repository plants a link to a host file holding a
//! marker, or to this machine's signing key. No byte of either may reach
//! the provider (a recording fake one), the store, the ledger, a receipt,
//! the change set or the screen; the same project with real files runs.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../loop-models/tests/common/mod.rs"]
mod common;

use common::{Canned, serve};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MARKER: &str = "CANARY-HOST-FILE-5a1d93";

fn loop_cmd(base: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.env("LOOP_STATE_DIR", base.join("state"))
        .stdin(std::process::Stdio::null());
    c
}

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(st.status.success(), "git {args:?}: {st:?}");
}

fn every_file(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
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

fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Scene {
    base: PathBuf,
    project: PathBuf,
    secret: PathBuf,
    key: PathBuf,
    /// Distinctive lines of the signing key's file.
    key_needles: Vec<String>,
}

impl Scene {
    fn new(name: &str) -> Scene {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("door-canary-{name}"));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("host")).unwrap();
        let secret = base.join("host/secret.txt");
        std::fs::write(
            &secret,
            format!("{MARKER}\nroot:$6$hash:19000:0:99999:7:::\n"),
        )
        .unwrap();
        // This machine's signing key, made now, so links can lead to it.
        let out = loop_cmd(&base).args(["keys", "show"]).output().unwrap();
        assert!(out.status.success(), "{}", said(&out));
        let key = base.join("state/keys/signing.key");
        let key_text = std::fs::read_to_string(&key).unwrap();
        let key_needles: Vec<String> = key_text
            .lines()
            .map(str::trim)
            .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
            .map(str::to_string)
            .collect();
        assert!(!key_needles.is_empty(), "{key_text}");
        let project = base.join("project");
        std::fs::create_dir_all(project.join("loop-patterns/demo")).unwrap();
        std::fs::write(
            project.join("loop-patterns/demo/contract.yaml"),
            "instruction: write a.txt holding ok\ncriteria:\n  - id: a\n    text: a.txt holds ok\n    checks:\n      - run: grep -qx ok a.txt\n",
        )
        .unwrap();
        std::fs::write(
            project.join("loop-patterns/demo/SKILL.md"),
            "# demo\n\nSKILL-HONEST-TEXT: write the file.\n",
        )
        .unwrap();
        std::fs::write(
            project.join("Loopfile.yaml"),
            "models:\n  maker:\n    spec: openai:m\n    tool_protocol: json\n    stream: false\n    retries: 1\n",
        )
        .unwrap();
        std::fs::write(project.join("README.md"), "a project\n").unwrap();
        git(&project, &["init", "-q"]);
        Scene {
            base,
            project,
            secret,
            key,
            key_needles,
        }
    }

    fn commit(&self) {
        git(&self.project, &["add", "-A", "-f"]);
        git(&self.project, &["commit", "-qm", "x", "--allow-empty"]);
    }

    /// `loop run --pattern demo` against a fake provider answering
    /// `answers`: what it said, and every request the provider got.
    fn run(&self, answers: Vec<Canned>) -> (Output, Vec<serde_json::Value>) {
        let server = serve(answers);
        let out = loop_cmd(&self.base)
            .args([
                "run",
                "--pattern",
                "demo",
                "--max-steps",
                "2",
                "--json",
                "--project",
            ])
            .arg(&self.project)
            .env("LOOP_OPENAI_BASE_URL", format!("{}/v1", server.url))
            .env("LOOP_OPENAI_API_KEY", "sk-test-canary")
            .output()
            .unwrap();
        let reqs = server
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.body.clone())
            .collect();
        (out, reqs)
    }

    /// No byte of the marker or the key anywhere the run could have put it.
    fn assert_nothing_leaked(&self, out: &Output, requests: &[serde_json::Value]) {
        let mut needles = vec![MARKER.to_string()];
        needles.extend(self.key_needles.iter().cloned());
        let screen = said(out);
        for n in &needles {
            assert!(!screen.contains(n.as_str()), "on the screen: {screen}");
            for r in requests {
                assert!(
                    !r.to_string().contains(n.as_str()),
                    "sent to the provider: {r}"
                );
            }
            for (path, bytes) in every_file(&self.project.join(".loop")) {
                assert!(!contains(&bytes, n), "in {}", path.display());
            }
        }
    }
}

fn thought_without_calls() -> Canned {
    let body = serde_json::json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"thought\": \"looking\", \"calls\": []}"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    });
    Canned::json(200, &body.to_string())
}

#[test]
fn linked_guidance_reaches_no_provider_and_no_record_while_real_guidance_does() {
    let sc = Scene::new("guidance");
    symlink(&sc.secret, sc.project.join("AGENTS.md")).unwrap();
    symlink(&sc.key, sc.project.join("LOOP.md")).unwrap();
    sc.commit();
    let (out, reqs) = sc.run(vec![thought_without_calls(), thought_without_calls()]);
    let screen = said(&out);
    assert!(
        screen.contains("receipt"),
        "the run ended with a receipt: {screen}"
    );
    assert!(!reqs.is_empty(), "the provider was asked: {screen}");
    // The honest control: the pattern's real skill reached the provider.
    assert!(
        reqs.iter()
            .any(|r| r.to_string().contains("SKILL-HONEST-TEXT")),
        "{reqs:?}"
    );
    sc.assert_nothing_leaked(&out, &reqs);
    let _ = std::fs::remove_dir_all(&sc.base);
}

#[test]
fn a_pattern_file_that_is_a_link_is_refused_by_name_before_any_request() {
    for (file, to_key) in [
        ("SKILL.md", false),
        ("contract.yaml", false),
        ("SKILL.md", true),
    ] {
        let sc = Scene::new(&format!("pattern-{file}-{to_key}"));
        let at = sc.project.join("loop-patterns/demo").join(file);
        std::fs::remove_file(&at).unwrap();
        symlink(if to_key { &sc.key } else { &sc.secret }, &at).unwrap();
        sc.commit();
        let (out, reqs) = sc.run(vec![thought_without_calls()]);
        let screen = said(&out);
        assert_eq!(out.status.code(), Some(2), "{screen}");
        assert!(
            screen.contains(file) && screen.contains("symlink"),
            "{screen}"
        );
        assert!(reqs.is_empty(), "nothing was sent: {reqs:?}");
        sc.assert_nothing_leaked(&out, &reqs);
        let _ = std::fs::remove_dir_all(&sc.base);
    }
    // A pattern directory that is a link is refused the same way.
    let sc = Scene::new("pattern-dir");
    std::fs::remove_dir_all(sc.project.join("loop-patterns/demo")).unwrap();
    std::fs::create_dir_all(sc.base.join("host/demo")).unwrap();
    std::fs::copy(&sc.secret, sc.base.join("host/demo/SKILL.md")).unwrap();
    std::fs::write(
        sc.base.join("host/demo/contract.yaml"),
        format!("instruction: {MARKER}\n"),
    )
    .unwrap();
    symlink(
        sc.base.join("host/demo"),
        sc.project.join("loop-patterns/demo"),
    )
    .unwrap();
    sc.commit();
    let (out, reqs) = sc.run(vec![thought_without_calls()]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("link"), "{}", said(&out));
    assert!(reqs.is_empty());
    sc.assert_nothing_leaked(&out, &reqs);
    let _ = std::fs::remove_dir_all(&sc.base);
}

#[test]
fn a_linked_loopfile_setup_key_or_state_directory_is_refused_and_leaks_nothing() {
    // The Loopfile.
    let sc = Scene::new("loopfile");
    std::fs::remove_file(sc.project.join("Loopfile.yaml")).unwrap();
    symlink(&sc.secret, sc.project.join("Loopfile.yaml")).unwrap();
    sc.commit();
    let (out, reqs) = sc.run(vec![thought_without_calls()]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("Loopfile.yaml"), "{}", said(&out));
    assert!(reqs.is_empty());
    sc.assert_nothing_leaked(&out, &reqs);
    let _ = std::fs::remove_dir_all(&sc.base);

    // A setup key (a lockfile named in the Loopfile) that is a link.
    let sc = Scene::new("setup-key");
    std::fs::write(
        sc.project.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: openai:m\n    tool_protocol: json\n    stream: false\n    retries: 1\nsetup:\n  run: [\"mkdir deps\"]\n  keys: [deps.lock]\n  outputs: [deps]\n",
    )
    .unwrap();
    symlink(&sc.key, sc.project.join("deps.lock")).unwrap();
    sc.commit();
    let (out, reqs) = sc.run(vec![thought_without_calls()]);
    let screen = said(&out);
    assert_ne!(out.status.code(), Some(0), "{screen}");
    assert!(screen.contains("deps.lock"), "{screen}");
    sc.assert_nothing_leaked(&out, &reqs);
    let _ = std::fs::remove_dir_all(&sc.base);

    // A script the Loopfile names as its model, that is a link.
    let sc = Scene::new("model-file");
    std::fs::write(
        sc.project.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: scripted:script.yaml\n",
    )
    .unwrap();
    symlink(&sc.secret, sc.project.join("script.yaml")).unwrap();
    sc.commit();
    let (out, reqs) = sc.run(vec![thought_without_calls()]);
    let screen = said(&out);
    assert_eq!(out.status.code(), Some(2), "{screen}");
    assert!(
        screen.contains("script.yaml") && screen.contains("symlink"),
        "{screen}"
    );
    sc.assert_nothing_leaked(&out, &reqs);
    let _ = std::fs::remove_dir_all(&sc.base);

    // The runtime's own state directory, brought by the repository as a
    // link: nothing is written or read through it.
    let sc = Scene::new("state-dir");
    let elsewhere = sc.base.join("host/state-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, sc.project.join(".loop")).unwrap();
    sc.commit();
    let (out, reqs) = sc.run(vec![thought_without_calls()]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains(".loop"), "{}", said(&out));
    assert!(reqs.is_empty());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&sc.base);
}
