//! A real project with a real third-party dependency installed in a `.venv`
//! git ignores: the task shares it read-only, the project's own test
//! command verifies, the model cannot change the environment, the user's
//! venv is byte-identical afterwards, and the receipt names its digest.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::loop_in as loop_cmd;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv's content root, as `loop manifest` gives it.
fn digest(home: &Path, dir: &Path) -> String {
    let out = loop_cmd(home).arg("manifest").arg(dir).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn a_project_whose_tests_need_its_venv_verifies_and_the_venv_is_untouched() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-venv");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join(".gitignore"), ".venv/\n").unwrap();
    std::fs::write(
        project.join("test_slug.py"),
        "import unittest\nfrom slug import slug\n\nclass T(unittest.TestCase):\n    def test_ascii(self):\n        self.assertEqual(slug('Crème Brûlée'), 'creme-brulee')\n\nif __name__ == '__main__':\n    unittest.main()\n",
    )
    .unwrap();
    // A real dependency from the package index, in the project's venv.
    let venv = Command::new("/usr/bin/python3")
        .args(["-m", "venv", ".venv"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(venv.success(), "python3 -m venv");
    let pip = Command::new(project.join(".venv/bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "text-unidecode==1.3",
        ])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(pip.success(), "pip install text-unidecode");
    let before = digest(&base, &project.join(".venv"));

    // Clearing the bind's read-only flag with the new mount API (what a
    // command holding capabilities, as root, could try) is refused.
    let setattr = ".venv/bin/python -c \"import ctypes;l=ctypes.CDLL(None,use_errno=True);a=(ctypes.c_uint64*4)(0,1,0,0);r=l.syscall(442,-100,b'.venv',0,a,32);print('setattr',r,ctypes.get_errno());open('.venv/pwned','w')\"";
    let fix = "from text_unidecode import unidecode\n\ndef slug(s):\n    return unidecode(s).lower().replace(' ', '-')\n";
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: .venv/lib/evil.py, content: \"x = 1\"}}}}\n      - {{tool: run_command, args: {{command: \"touch .venv/owned\"}}}}\n      - {{tool: run_command, args: {{command: {}}}}}\n  - calls:\n      - {{tool: write_file, args: {{path: slug.py, content: {}}}}}\n      - {{tool: finish, args: {{summary: slug uses the dependency}}}}\n",
        serde_json::to_string(setattr).unwrap(),
        serde_json::to_string(fix).unwrap()
    );
    let events = run_task(
        &base,
        &project,
        &script,
        "instruction: write slug.py\ncriteria:\n  - id: tests\n    checks:\n      - run: \".venv/bin/python -m unittest test_slug\"\nlimits: { max_steps: 4, max_verifications: 2, timeout_secs: 120 }\n",
    );
    // The model could not change the shared environment, by either path.
    let observed: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "observed")
        .map(|e| &e["observation"])
        .collect();
    let evil = observed
        .iter()
        .find(|o| o["tool"] == "write_file" && o["content"].as_str().unwrap_or("").contains("evil"))
        .or_else(|| observed.first())
        .unwrap();
    assert_eq!(evil["status"], "refused", "{evil}");
    assert!(
        evil.to_string()
            .contains("a shared read-only environment `.venv`"),
        "{evil}"
    );
    let touch = observed
        .iter()
        .find(|o| o["tool"] == "run_command")
        .unwrap();
    assert!(
        touch["content"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{touch}"
    );
    let setattr_seen = observed
        .iter()
        .find(|o| o["content"].as_str().unwrap_or("").contains("setattr"))
        .unwrap();
    assert!(
        setattr_seen["content"]
            .as_str()
            .unwrap()
            .contains("setattr -1 1"),
        "{setattr_seen}"
    );
    assert!(!project.join(".venv/pwned").exists());
    // The user's venv is byte-identical, and the receipt names its digest.
    assert_eq!(digest(&base, &project.join(".venv")), before);
    assert!(!project.join(".venv/owned").exists());
    assert!(!project.join(".venv/lib/evil.py").exists());
    let (receipt, payload) = statement(&events);
    let shared = &payload["predicate"]["environments"];
    assert_eq!(shared[0]["path"], ".venv", "{shared}");
    assert_eq!(shared[0]["sha256"], before.as_str(), "{shared}");
    // Nothing of the mount shows in what the task changed.
    assert!(
        !payload["predicate"]["change_set"]
            .to_string()
            .contains(".venv"),
        "{}",
        payload["predicate"]["change_set"]
    );
    // Replayed with no model, against the same environment.
    let replay = loop_cmd(&base)
        .arg("replay")
        .arg(&receipt)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}");
    assert!(said.contains("reproduced"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_venv_whose_interpreter_lives_outside_the_view_still_runs_in_the_sandbox() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-interp");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join(".gitignore"), ".venv/\n").unwrap();
    // An interpreter prefix where the sandbox's usual view does not reach
    // (as a pyenv install under another home would be): its python is a
    // link to the system's, its lib/ marks it an interpreter's prefix.
    let system = std::fs::canonicalize("/usr/bin/python3").unwrap();
    let interp = base.join("interp");
    std::fs::create_dir_all(interp.join("bin")).unwrap();
    std::fs::create_dir_all(interp.join("lib/python3.0-prefix")).unwrap();
    std::os::unix::fs::symlink(&system, interp.join("bin/python3")).unwrap();
    let venv = Command::new(interp.join("bin/python3"))
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(venv.success(), "venv from {}", interp.display());
    let link = std::fs::read_link(project.join(".venv/bin/python3")).unwrap();
    assert!(link.starts_with(&interp), "{}", link.display());
    std::fs::write(
        base.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: finish, args: {summary: nothing to do}}\n",
    )
    .unwrap();
    let out = loop_cmd(&base)
        .args([
            "run",
            "run the venv's python",
            "--allow-vacuous",
            "--check",
            ".venv/bin/python -c 'import sys; print(sys.base_prefix)'",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

/// Run a scripted task in `project`; its JSON events.
fn run_task(base: &Path, project: &Path, script: &str, task: &str) -> Vec<serde_json::Value> {
    std::fs::write(base.join("script.yaml"), script).unwrap();
    std::fs::write(base.join("task.yaml"), task).unwrap();
    let out = loop_cmd(base)
        .args(["run", "--json", "--task"])
        .arg(base.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(project)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}\n{err}");
    shared::json_lines(&out)
}

/// The signed statement of the run whose events these are.
fn statement(events: &[serde_json::Value]) -> (String, serde_json::Value) {
    let path = events.iter().find(|e| e["kind"] == "receipt").unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    let payload = shared::payload_of(Path::new(&path));
    (path, payload)
}

fn observations(events: &[serde_json::Value]) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "observed")
        .map(|e| e["observation"].clone())
        .collect()
}

#[test]
fn a_cargo_crate_builds_from_the_registry_cache_with_target_copy_on_write() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-cargo");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(project.join("tests")).unwrap();
    std::fs::write(project.join(".gitignore"), "target/\n").unwrap();
    // A dependency from the registry, already in Cargo's cache (this
    // workspace builds with the same version).
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"numtext\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nitoa = \"=1.0.19\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        project.join("src/lib.rs"),
        "pub fn text(n: u64) -> String {\n    let _ = n;\n    String::new()\n}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("tests/text.rs"),
        "#[test]\nfn forty_two() {\n    assert_eq!(numtext::text(42), \"42\");\n}\n",
    )
    .unwrap();
    let cargo = |args: &[&str]| {
        let st = Command::new("cargo")
            .args(args)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR")
            .current_dir(&project)
            .status()
            .unwrap();
        assert!(st.success(), "cargo {args:?}");
    };
    cargo(&["generate-lockfile", "--offline"]);
    cargo(&["build", "--tests", "--offline", "--quiet"]);
    let before = digest(&base, &project.join("target"));
    let fix = "pub fn text(n: u64) -> String {\n    itoa::Buffer::new().format(n).to_string()\n}\n";
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: target/evil.txt, content: x}}}}\n      - {{tool: write_file, args: {{path: src/lib.rs, content: {}}}}}\n      - {{tool: run_command, args: {{command: \"cargo test --offline 2>&1 | tail -n 3; ls target/debug\"}}}}\n  - calls:\n      - {{tool: finish, args: {{summary: text formats with itoa}}}}\n",
        serde_json::to_string(fix).unwrap()
    );
    let events = run_task(
        &base,
        &project,
        &script,
        "instruction: make text() format numbers\ncriteria:\n  - id: tests\n    checks:\n      - run: \"cargo test --offline\"\n        timeout_secs: 300\nlimits: { max_steps: 4, max_verifications: 2, timeout_secs: 600 }\n",
    );
    let observed = observations(&events);
    assert_eq!(observed[0]["status"], "refused", "{}", observed[0]);
    let built = observed
        .iter()
        .find(|o| o["tool"] == "run_command")
        .unwrap();
    let built_text = built["content"].as_str().unwrap();
    assert!(built_text.contains("test result: ok"), "{built}");
    // The user's build outputs are byte-identical; the task's went to its
    // own layer.
    assert_eq!(digest(&base, &project.join("target")), before);
    assert!(!project.join("target/evil.txt").exists());
    let tasks: Vec<PathBuf> = std::fs::read_dir(project.join(".loop/tasks"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(tasks.len(), 1);
    let id = tasks[0].file_name().unwrap().to_string_lossy().into_owned();
    let layer = shared::near_of(&project, &id).join("layers/0/upper/debug");
    assert!(
        layer.is_dir(),
        "the task's build outputs at {}",
        layer.display()
    );
    let (receipt, payload) = statement(&events);
    let env = &payload["predicate"]["environments"][0];
    assert_eq!(env["path"], "target", "{env}");
    assert_eq!(env["overlay"], true, "{env}");
    assert_eq!(env["sha256"], before.as_str(), "{env}");
    assert_eq!(payload["predicate"]["outcome"]["kind"], "verified");
    // The worktree's files keep the checkout's times where they hold the
    // same: the user's build outputs are current for the untouched crate
    // (the baseline compiles nothing of it), the fixed one is compiled.
    let stderr_of = |report: &serde_json::Value| {
        report["criteria"][0]["checks"][0]["stderr"]["excerpt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let before = stderr_of(&payload["predicate"]["baseline"]);
    let last = stderr_of(&payload["predicate"]["verification"]);
    assert!(!before.contains("Compiling numtext"), "{before}");
    assert!(last.contains("Compiling numtext"), "{last}");
    let replay = loop_cmd(&base)
        .arg("replay")
        .arg(&receipt)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}");
    assert!(said.contains("reproduced"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_node_project_tests_against_its_node_modules_which_stay_untouched() {
    if Command::new("npm").arg("--version").output().is_err() {
        eprintln!("npm is not installed here: the Node half does not apply");
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-node");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join(".gitignore"), "node_modules/\n").unwrap();
    std::fs::write(
        project.join("package.json"),
        "{\n  \"name\": \"evens\",\n  \"version\": \"1.0.0\",\n  \"private\": true,\n  \"scripts\": { \"test\": \"node test.js\" },\n  \"dependencies\": { \"is-number\": \"7.0.0\" }\n}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("test.js"),
        "const assert = require('assert');\nconst evens = require('./evens');\nassert.deepStrictEqual(evens([1, '2', 'x', 4]), ['2', 4]);\nconsole.log('ok');\n",
    )
    .unwrap();
    std::fs::write(project.join("evens.js"), "module.exports = () => [];\n").unwrap();
    // A real package from the registry, in the project's node_modules.
    let install = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(install.success(), "npm install is-number");
    let before = digest(&base, &project.join("node_modules"));
    let fix = "const isNumber = require('is-number');\nmodule.exports = (xs) => xs.filter((x) => isNumber(x) && Number(x) % 2 === 0);\n";
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: run_command, args: {{command: \"rm -rf node_modules/is-number\"}}}}\n      - {{tool: write_file, args: {{path: node_modules/is-number/index.js, content: \"module.exports = () => true\"}}}}\n      - {{tool: write_file, args: {{path: evens.js, content: {}}}}}\n      - {{tool: finish, args: {{summary: evens keeps even numbers}}}}\n",
        serde_json::to_string(fix).unwrap()
    );
    let events = run_task(
        &base,
        &project,
        &script,
        "instruction: make evens() keep the even numbers\ncriteria:\n  - id: tests\n    checks:\n      - run: \"npm test\"\nlimits: { max_steps: 4, max_verifications: 2, timeout_secs: 300 }\n",
    );
    let observed = observations(&events);
    assert!(
        observed[0]["content"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{}",
        observed[0]
    );
    assert_eq!(observed[1]["status"], "refused", "{}", observed[1]);
    let (_, payload) = statement(&events);
    assert_eq!(payload["predicate"]["outcome"]["kind"], "verified");
    let env = &payload["predicate"]["environments"][0];
    assert_eq!(env["path"], "node_modules", "{env}");
    assert_eq!(env["sha256"], before.as_str(), "{env}");
    assert_eq!(digest(&base, &project.join("node_modules")), before);
    let _ = std::fs::remove_dir_all(&base);
}

/// A one-page HTTP server on 127.0.0.1 (a registry's stand-in).
fn page_server(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(16) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn declared_egress_reaches_allowed_hosts_only_and_the_receipt_lists_every_attempt() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-egress");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let pkgs = page_server("pkg-v1");
    let other = page_server("not for you");
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "network:\n  allow: [\"pkgs.test:{pkgs}\"]\n  resolve:\n    pkgs.test: \"127.0.0.1:{pkgs}\"\n    other.test: \"127.0.0.1:{other}\"\n"
        ),
    )
    .unwrap();
    let fetch = |url: &str, save: &str| {
        let cmd = format!(
            "python3 -c \"import urllib.request as u\ntry:\n    b = u.urlopen('{url}', timeout=5).read().decode()\n    open('{save}', 'w').write(b)\nexcept Exception as e:\n    print('failed', e, e.read().decode() if hasattr(e, 'read') else '')\""
        );
        serde_json::to_string(&cmd).unwrap()
    };
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: run_command, args: {{command: {}}}}}\n      - {{tool: run_command, args: {{command: {}}}}}\n  - calls:\n      - {{tool: finish, args: {{summary: fetched}}}}\n",
        fetch(&format!("http://pkgs.test:{pkgs}/"), "got.txt"),
        fetch(&format!("http://other.test:{other}/"), "other.txt"),
    );
    // Checks have no network unless the contract says so: the second
    // check passes only if the fetch fails.
    let events = run_task(
        &base,
        &project,
        &script,
        &format!(
            "instruction: fetch the package index\ncriteria:\n  - id: fetched\n    checks:\n      - run: \"cat got.txt\"\n        expect_stdout: pkg-v1\n      - run: \"python3 -c \\\"import urllib.request as u; u.urlopen('http://pkgs.test:{pkgs}/', timeout=3)\\\"\"\n        expect_exit: 1\n        allow_vacuous: true\nlimits: {{ max_steps: 4, max_verifications: 2, timeout_secs: 120 }}\n"
        ),
    );
    let observed = observations(&events);
    let first = observed[0]["content"].as_str().unwrap();
    assert!(
        first.contains(&format!(
            "GET pkgs.test:{pkgs}: allowed by `pkgs.test:{pkgs}`"
        )),
        "{first}"
    );
    let second = observed[1]["content"].as_str().unwrap();
    assert!(
        second.contains(&format!(
            "loop: egress to other.test:{other} refused: not in network.allow (the Loopfile's, for commands)"
        )),
        "{second}"
    );
    let (_, payload) = statement(&events);
    assert_eq!(payload["predicate"]["outcome"]["kind"], "verified");
    let net = &payload["predicate"]["network"];
    assert_eq!(
        net["commands"],
        serde_json::json!([format!("pkgs.test:{pkgs}")]),
        "{net}"
    );
    assert!(net.get("checks").is_none(), "{net}");
    assert_eq!(net["allowed"], 1, "{net}");
    assert_eq!(net["refused"], 1, "{net}");
    assert_eq!(
        net["resolve"][0],
        serde_json::json!(["pkgs.test", format!("127.0.0.1:{pkgs}")]),
        "{net}"
    );
    let attempts = net["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["host"], "pkgs.test");
    assert_eq!(attempts[0]["by"], "run_command t1-c1");
    assert_eq!(attempts[1]["host"], "other.test");
    assert_eq!(attempts[1]["allowed"], false);
    assert_eq!(
        payload["predicate"]["isolation"]["network"], "none",
        "checks had no network"
    );

    // A contract that lets its checks reach the host: they go through the
    // proxy, the receipt says so, and replay reaches it again.
    let events = run_task(
        &base,
        &project,
        "turns:\n  - calls:\n      - {tool: finish, args: {summary: nothing to change}}\n",
        &format!(
            "instruction: the index answers\nnetwork_allow: [\"pkgs.test:{pkgs}\"]\ncriteria:\n  - id: index\n    checks:\n      - run: \"python3 -c \\\"import urllib.request as u; print(u.urlopen('http://pkgs.test:{pkgs}/', timeout=5).read().decode())\\\"\"\n        expect_stdout: pkg-v1\n        allow_vacuous: true\nlimits: {{ max_steps: 2, max_verifications: 1, timeout_secs: 120 }}\n"
        ),
    );
    let (receipt, payload) = statement(&events);
    assert_eq!(payload["predicate"]["outcome"]["kind"], "verified");
    let net = &payload["predicate"]["network"];
    assert_eq!(
        net["checks"],
        serde_json::json!([format!("pkgs.test:{pkgs}")]),
        "{net}"
    );
    assert!(
        net["attempts"][0]["by"]
            .as_str()
            .unwrap()
            .starts_with("check index#0"),
        "{net}"
    );
    assert_eq!(payload["predicate"]["isolation"]["network"], "proxy");
    let replay = loop_cmd(&base)
        .arg("replay")
        .arg(&receipt)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A static file server on 127.0.0.1 serving `dir` (a package index's
/// stand-in), counting the requests it answers.
fn file_server(dir: PathBuf) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(64) {
            let Ok(mut s) = s else { continue };
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = head
                .split(' ')
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            let file = if path.is_empty() { "index.html" } else { path };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match std::fs::read(dir.join(file)) {
                Ok(body) => {
                    let kind = if file.ends_with(".html") {
                        "text/html"
                    } else {
                        "application/octet-stream"
                    };
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(&body);
                }
                Err(_) => {
                    let _ = write!(
                        s,
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
            }
        }
    });
    (port, served)
}

#[test]
fn setup_builds_the_venv_once_and_the_next_task_takes_the_cached_layer() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-setup");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    let index = base.join("index");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&index).unwrap();
    // A package with a console script, as a wheel, in a local index.
    let made = Command::new("python3")
        .arg("-c")
        .arg(
            "import zipfile,sys\n\
z = zipfile.ZipFile(sys.argv[1] + '/tinydep-1.0-py3-none-any.whl', 'w')\n\
z.writestr('tinydep/__init__.py', 'def shout(s):\\n    return s.upper() + \"!\"\\n\\ndef main():\\n    import sys\\n    print(shout(sys.argv[1]))\\n')\n\
z.writestr('tinydep-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: tinydep\\nVersion: 1.0\\n')\n\
z.writestr('tinydep-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
z.writestr('tinydep-1.0.dist-info/entry_points.txt', '[console_scripts]\\nshout = tinydep:main\\n')\n\
z.writestr('tinydep-1.0.dist-info/RECORD', '')\n\
z.close()\n",
        )
        .arg(&index)
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        index.join("index.html"),
        "<html><body><a href=\"tinydep-1.0-py3-none-any.whl\">tinydep-1.0-py3-none-any.whl</a></body></html>\n",
    )
    .unwrap();
    let (port, served) = file_server(index);
    std::fs::write(project.join("requirements.txt"), "tinydep==1.0\n").unwrap();
    std::fs::write(
        project.join("test_shout.py"),
        "import unittest\nfrom loud import loud\n\nclass T(unittest.TestCase):\n    def test_loud(self):\n        self.assertEqual(loud('hi'), 'HI!')\n",
    )
    .unwrap();
    std::fs::write(project.join("loud.py"), "def loud(s):\n    return s\n").unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "network:\n  setup: [\"pkgs.test:{port}\"]\n  resolve:\n    pkgs.test: \"127.0.0.1:{port}\"\nsetup:\n  - python3 -m venv .venv\n  - .venv/bin/pip install --quiet --disable-pip-version-check --no-index --trusted-host pkgs.test --find-links http://pkgs.test:{port}/ -r requirements.txt\n"
        ),
    )
    .unwrap();
    let fix = "from tinydep import shout\n\ndef loud(s):\n    return shout(s)\n";
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: run_command, args: {{command: \".venv/bin/pip install --no-index six; touch .venv/owned\"}}}}\n      - {{tool: write_file, args: {{path: loud.py, content: {}}}}}\n      - {{tool: finish, args: {{summary: loud shouts}}}}\n",
        serde_json::to_string(fix).unwrap()
    );
    // The console script's first line names the venv where it was built:
    // it runs in every task only because the workspace is shown there too.
    let task = "instruction: make loud() shout\ncriteria:\n  - id: tests\n    checks:\n      - run: \".venv/bin/python -m unittest test_shout\"\n      - run: \".venv/bin/shout hi\"\n        expect_stdout: HI!\nlimits: { max_steps: 4, max_verifications: 2, timeout_secs: 300 }\n";
    let first = run_task(&base, &project, &script, task);
    let fetched = served.load(std::sync::atomic::Ordering::SeqCst);
    assert!(fetched >= 2, "the index page and the wheel: {fetched}");
    let observed = observations(&first);
    let tried = observed[0]["content"].as_str().unwrap();
    assert!(tried.contains("Read-only file system"), "{tried}");
    let (_, payload) = statement(&first);
    assert_eq!(
        payload["predicate"]["outcome"]["kind"], "verified",
        "{}",
        payload["predicate"]["outcome"]
    );
    let setup = &payload["predicate"]["setup"];
    assert_eq!(setup["reused"], false, "{setup}");
    assert_eq!(setup["steps"].as_array().unwrap().len(), 2, "{setup}");
    assert_eq!(setup["outputs"], serde_json::json!([".venv"]), "{setup}");
    assert_eq!(setup["keyed_on"][0]["path"], "requirements.txt", "{setup}");
    let env = &payload["predicate"]["environments"][0];
    assert_eq!(env["path"], ".venv", "{env}");
    assert!(
        env["source"].as_str().unwrap().starts_with(".loop/layers/"),
        "{env}"
    );
    let net = &payload["predicate"]["network"];
    assert!(
        net["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["by"] == "setup 2" && a["allowed"] == true),
        "{net}"
    );
    // The user's project got no venv: setup ran in the task's workspace.
    assert!(!project.join(".venv").exists());
    let layer_dir = project.join(env["source"].as_str().unwrap());
    assert!(!layer_dir.join("owned").exists());

    // The second task: same steps, same lockfile: the layer as it is, no
    // step, no request to the index.
    let second = run_task(&base, &project, &script, task);
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), fetched);
    let (receipt, payload) = statement(&second);
    assert_eq!(
        payload["predicate"]["outcome"]["kind"], "verified",
        "{}",
        payload["predicate"]["outcome"]
    );
    let setup = &payload["predicate"]["setup"];
    assert_eq!(setup["reused"], true, "{setup}");
    assert!(setup.get("steps").is_none(), "{setup}");
    assert_eq!(
        payload["predicate"]["environments"][0]["source"],
        env["source"]
    );
    let replay = loop_cmd(&base)
        .arg("replay")
        .arg(&receipt)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{said}");
    assert!(said.contains("reproduced"), "{said}");

    let audit = |base: &Path| {
        let out = loop_cmd(base)
            .args(["audit", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let said = audit(&base);
    assert!(said.contains("cached (made by"), "{said}");
    assert!(
        setup["toolchains"][0]
            .as_str()
            .unwrap()
            .starts_with("python3: Python 3"),
        "{setup}"
    );
    // A layer changed after it was made is no layer: it would be made again.
    std::fs::write(layer_dir.join("lib/planted.pth"), "import os\n").unwrap();
    let said = audit(&base);
    assert!(said.contains("not cached yet"), "{said}");
    std::fs::remove_file(layer_dir.join("lib/planted.pth")).unwrap();
    assert!(audit(&base).contains("cached (made by"));
    // A changed lockfile is another layer: the steps run again.
    std::fs::write(project.join("requirements.txt"), "tinydep==1.0\n# pinned\n").unwrap();
    let audit = loop_cmd(&base)
        .args(["audit", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&audit.stdout);
    assert!(
        said.contains("not cached yet: the next task runs the steps"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A build that takes its version from git (what hatch-vcs and
/// setuptools-scm do) and writes it into the source tree: the setup step
/// reads the repository (read-only), its generated file is kept as a
/// declared output at its own path, every command and check sees it there,
/// the model cannot change it, and it never reaches the change set.
#[test]
fn setup_reads_the_repository_and_keeps_a_generated_file_where_the_build_wrote_it() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("env-setup-vcs");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(project.join("src/pkg")).unwrap();
    std::fs::write(
        project.join("src/pkg/__init__.py"),
        "def describe():\n    return 'pkg'\n",
    )
    .unwrap();
    std::fs::write(
        project.join("test_describe.py"),
        "import sys, unittest\nsys.path.insert(0, 'src')\nimport pkg\n\nclass T(unittest.TestCase):\n    def test_describe(self):\n        self.assertEqual(pkg.describe(), 'pkg v1.0')\n",
    )
    .unwrap();
    std::fs::write(project.join(".gitignore"), "src/pkg/_version.py\n").unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        "setup:\n  run:\n    - v=$(git describe --tags) && printf 'version = \"%s\"\\n' \"$v\" > src/pkg/_version.py\n  keys: [Loopfile.yaml]\n  outputs: [src/pkg/_version.py]\n",
    )
    .unwrap();
    let git = |args: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("git -c user.email=t@t -c user.name=t {args}"))
            .current_dir(&project)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args}: {out:?}");
    };
    git("init -q");
    git("add -A");
    git("commit -qm base");
    git("tag v1.0");
    let fix =
        "from ._version import version\n\ndef describe():\n    return f'pkg v{version[1:]}'\n";
    let script = format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: src/pkg/_version.py, content: \"version = 'v9'\\n\"}}}}\n      - {{tool: run_command, args: {{command: \"cat src/pkg/_version.py; echo x > src/pkg/_version.py\"}}}}\n      - {{tool: write_file, args: {{path: src/pkg/__init__.py, content: {}}}}}\n      - {{tool: finish, args: {{summary: described}}}}\n",
        serde_json::to_string(fix).unwrap()
    );
    let task = "instruction: describe the package with its version\ncriteria:\n  - id: tests\n    checks:\n      - run: \"python3 -m unittest test_describe\"\nlimits: { max_steps: 4, max_verifications: 2, timeout_secs: 300 }\n";
    let events = run_task(&base, &project, &script, task);
    let seen = observations(&events);
    // The model may not write the generated file, with the tools or a command.
    assert_eq!(seen[0]["status"], "refused", "{}", seen[0]);
    let said = seen[1]["content"].as_str().unwrap();
    assert!(said.contains("version = \"v1.0\""), "{said}");
    assert!(said.contains("Read-only file system"), "{said}");
    let (_, payload) = statement(&events);
    assert_eq!(
        payload["predicate"]["outcome"]["kind"], "verified",
        "{}",
        payload["predicate"]["outcome"]
    );
    let setup = &payload["predicate"]["setup"];
    assert_eq!(
        setup["outputs"],
        serde_json::json!(["src/pkg/_version.py"]),
        "{setup}"
    );
    // The change set is the model's one file.
    let files: Vec<&str> = payload["predicate"]["change_set"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        files,
        ["src/pkg/__init__.py"],
        "{}",
        payload["predicate"]["change_set"]
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A cloned repository's `rust-toolchain.toml` naming a toolchain of its
/// own (`path = "/proc/self/cwd/evil"`) makes rustup run the project's
/// program for any `cargo --version` asked in its directory. The setup
/// key asks the toolchains' versions there: inside the sandbox, never on
/// the host.
#[test]
fn a_toolchain_pin_that_names_the_projects_own_program_never_runs_on_the_host() {
    if !shared::have("cargo") {
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("toolchain-pin");
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    std::fs::create_dir_all(project.join("evil/bin")).unwrap();
    let mark = base.join("ran-on-the-host");
    let program = format!(
        "#!/bin/sh\ntouch \"${{PIN_MARK:-{}}}\"\necho 'cargo 9.9.9 (the project'\"'\"'s own)'\n",
        mark.display()
    );
    for tool in ["cargo", "rustc"] {
        let at = project.join("evil/bin").join(tool);
        std::fs::write(&at, &program).unwrap();
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        project.join("rust-toolchain.toml"),
        "[toolchain]\npath = \"/proc/self/cwd/evil\"\n",
    )
    .unwrap();
    std::fs::write(project.join("Loopfile.yaml"), "setup:\n  - cargo fetch\n").unwrap();
    // The pin is live on this machine: asked on the host, in the project,
    // it runs the project's program (here told to mark elsewhere).
    let control = base.join("control");
    // (`cargo test` sets RUSTUP_TOOLCHAIN, which outranks the file; a
    // person's shell does not.)
    let host = Command::new("cargo")
        .arg("--version")
        .current_dir(&project)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env("PIN_MARK", &control)
        .output()
        .unwrap();
    if !control.exists() {
        // (A cargo that is not rustup's reads no toolchain file.)
        eprintln!(
            "cargo here ignores rust-toolchain.toml ({}): skipped",
            String::from_utf8_lossy(&host.stdout).trim()
        );
        return;
    }
    // `loop audit` computes the setup key, toolchain versions included.
    let out = loop_cmd(&base)
        .args(["audit", "--project"])
        .arg(&project)
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", shared::text(&out));
    assert!(
        !mark.exists(),
        "the project's program ran on the host: {}",
        shared::text(&out)
    );
    let _ = std::fs::remove_dir_all(&base);
}
