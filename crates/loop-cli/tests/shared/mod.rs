//! Helpers the `loop` command's integration tests share (each test file
//! includes this module; not every file uses every helper).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether a stack's toolchain (`tool`) is here. Under `CI=true` every
/// one is installed by scripts/test.sh, so a missing one fails the run
/// rather than skipping its stack.
pub fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || std::env::var_os("CI").is_none(),
        "`{tool}` is not installed: scripts/test.sh installs every stack's toolchain"
    );
    if !ok {
        eprintln!("SKIPPED: `{tool}` is not installed here, so its stack is not tried");
    }
    ok
}

/// The uid tests drop to when they run as root.
pub const NOBODY: u32 = 65534;

/// Who runs a scene: this process's user, or (as root) `nobody`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Who {
    /// The user running the tests.
    Me,
    /// The unprivileged user tests drop to.
    Nobody,
}

/// Every user a scene runs as: this one, and `nobody` where privileges
/// can be dropped.
pub fn users() -> Vec<Who> {
    if can_drop_privileges() {
        vec![Who::Me, Who::Nobody]
    } else {
        vec![Who::Me]
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the tests can also run as an unprivileged user here (root,
/// with `setpriv`).
pub fn can_drop_privileges() -> bool {
    is_root() && Command::new("setpriv").arg("--version").output().is_ok()
}

/// The `loop` binary, copied where an unprivileged user can execute it
/// (the build directory may not be): one copy per build, shared by every
/// test process (a copy per process left a 145 MB file each, some 9 GB a
/// run). Named by the build's size and time; written beside its place and
/// renamed into it, so a process never executes a half-written copy nor
/// writes one another executes ("text file busy").
pub fn shared_binary() -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let built = Path::new(env!("CARGO_BIN_EXE_loop"));
        let meta = std::fs::metadata(built).unwrap();
        let stamp = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let name = format!("loop-test-bin-{}-{stamp}", meta.len());
        prune_old_copies(&name);
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let to = dir.join("loop");
        if std::fs::metadata(&to).map(|m| m.len()).ok() != Some(meta.len()) {
            let part = dir.join(format!("loop.{}", std::process::id()));
            std::fs::copy(built, &part).unwrap();
            std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&part, &to).unwrap();
        }
        to
    })
    .clone()
}

/// Removes the copies earlier builds left (each some 180 MB) once they
/// are a day old: a test process of an older build still running a day
/// later is not expected.
fn prune_old_copies(keep: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 24 * 3600);
        if name.starts_with("loop-test-bin-") && name != keep && old {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The payload of a DSSE envelope file (a receipt's in-toto statement,
/// an addendum's fact), as JSON.
pub fn payload_of(envelope: &Path) -> serde_json::Value {
    use base64::Engine;
    let env: serde_json::Value = serde_json::from_slice(&std::fs::read(envelope).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", envelope.display()));
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&payload).unwrap()
}

/// Both streams of a finished command, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `loop` binary with `home/state` as its state directory (the
/// signing key's) and no terminal on stdin.
pub fn loop_in(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.env("LOOP_STATE_DIR", home.join("state"))
        .stdin(std::process::Stdio::null());
    c
}

/// Every JSON line a `--json` run printed.
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `loop verify --integrity-only RECEIPT` with `state` as the state
/// directory: the receipt holds, whatever its outcome (asserted).
pub fn assert_receipt_holds(receipt: &Path, state: &Path) {
    let v = Command::new(env!("CARGO_BIN_EXE_loop"))
        .arg("verify")
        .arg("--integrity-only")
        .arg(receipt)
        .env("LOOP_STATE_DIR", state)
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
}

/// `loop serve` for `project` on a free port of 127.0.0.1, with `env` set
/// and `args` added: the child and the base URL it printed.
pub fn serve(
    home: &Path,
    project: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (std::process::Child, String) {
    let (child, said) = serve_saying(home, project, env, args, 1);
    let url = said[0]
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {:?}", said[0]))
        .to_string();
    (child, url)
}

/// `loop serve` with `args`, and the lines it printed at its start (where
/// it listens, then what it took up), read until `lines` came; then
/// nobody reads its output any more.
pub fn serve_saying(
    home: &Path,
    project: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    lines: usize,
) -> (std::process::Child, Vec<String>) {
    use std::io::BufRead;
    let mut cmd = loop_in(home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .arg("--project")
        .arg(project)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut said = Vec::new();
    for _ in 0..lines {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        said.push(line.trim_end().to_string());
    }
    (child, said)
}

/// A new API token of `owner` for `project` (`loop tokens create`), as
/// `loop` in `home` makes it.
#[allow(dead_code)] // not every test binary asks for one
pub fn token_for(home: &Path, project: &Path, owner: &str) -> String {
    let out = loop_in(home)
        .args(["tokens", "create", "--owner", owner, "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    made["token"].as_str().unwrap().to_string()
}

/// End a `loop serve` child with SIGTERM and wait for it.
pub fn stop(mut server: std::process::Child) -> std::process::ExitStatus {
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(server.id() as libc::pid_t, libc::SIGTERM);
    }
    server.wait().unwrap()
}

/// A small deterministic generator (xorshift64*), for replayable kill
/// schedules.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// A database of the test's own, dropped when the test ends.
pub struct Db {
    pub admin: String,
    pub name: String,
    pub url: String,
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

pub fn database(admin: &str, name: &str) -> Db {
    Db {
        admin: admin.to_string(),
        name: name.to_string(),
        url: fresh_db(admin, name),
    }
}

/// A fresh database on the test server; its URL.
pub fn fresh_db(admin: &str, name: &str) -> String {
    let mut c = postgres::Client::connect(admin, postgres::NoTls).unwrap();
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// Task `id` of `project` ended exactly once, verified, after exactly the
/// model turns `steps` (none lost or repeated), with one genesis, and its
/// receipt verifies (with `state` as the state directory). `seed` names
/// the run in failures.
pub fn assert_one_verified_run(project: &Path, id: &str, steps: &[u64], seed: u64, state: &Path) {
    let ledger =
        std::fs::read_to_string(project.join(format!(".loop/receipts/{id}.ledger.jsonl"))).unwrap();
    let entries: Vec<serde_json::Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds = |k: &str| entries.iter().filter(|e| e["kind"] == k).count();
    assert_eq!(kinds("task_started"), 1, "seed {seed}: one genesis");
    assert_eq!(
        kinds("finished"),
        1,
        "seed {seed}: the task ends exactly once"
    );
    let turns: Vec<u64> = entries
        .iter()
        .filter(|e| e["kind"] == "model_turn")
        .map(|e| e["payload"]["step"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, steps, "seed {seed}: no step lost or duplicated");
    let finished = entries.iter().find(|e| e["kind"] == "finished").unwrap();
    assert_eq!(
        finished["payload"]["outcome"]["kind"], "verified",
        "seed {seed}: {ledger}"
    );
    assert_receipt_holds(
        &project.join(format!(".loop/receipts/{id}.receipt.json")),
        state,
    );
}

/// Task `id`'s workspace: where the runtime made it, as its record in the
/// project says (outside the project, under the workspaces' root).
pub fn workspace_of(project: &Path, id: &str) -> PathBuf {
    let record = project.join(format!(".loop/tasks/{id}/workspace.json"));
    let text = std::fs::read(&record).unwrap_or_else(|e| panic!("{}: {e}", record.display()));
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    PathBuf::from(v["path"].as_str().unwrap())
}

/// Task `id`'s near directory (its workspace's, with the journals and the
/// check views kept beside it).
pub fn near_of(project: &Path, id: &str) -> PathBuf {
    workspace_of(project, id).parent().unwrap().to_path_buf()
}

/// A `loop run --json` of a contract file with a scripted model.
pub struct ScriptedRun {
    /// What it printed.
    pub out: Output,
    /// Its `receipt` event.
    pub receipt: serde_json::Value,
    /// The receipt's in-toto statement.
    pub statement: serde_json::Value,
}

impl ScriptedRun {
    /// The task's id.
    pub fn id(&self) -> &str {
        self.receipt["task_id"].as_str().unwrap()
    }

    /// Its outcome's kind (`verified`, `failed`, …).
    pub fn outcome(&self) -> &str {
        self.receipt["outcome"]["kind"].as_str().unwrap()
    }

    /// The receipt's file.
    pub fn receipt_path(&self) -> PathBuf {
        PathBuf::from(self.receipt["path"].as_str().unwrap())
    }
}

/// Write the contract `task` and the model script `script` into `base`
/// (as `NAME.task.yaml`, `NAME.script.yaml`) and `loop run --json` them in
/// `project` with `base/state` as the state directory (see [`loop_in`]).
pub fn run_scripted(
    base: &Path,
    project: &Path,
    name: &str,
    (task, script): (&str, &str),
) -> ScriptedRun {
    run_scripted_with(base, project, name, (task, script), &[])
}

/// [`run_scripted`] with variables `env` set for `loop run`.
pub fn run_scripted_with(
    base: &Path,
    project: &Path,
    name: &str,
    (task, script): (&str, &str),
    env: &[(&str, String)],
) -> ScriptedRun {
    let task_file = base.join(format!("{name}.task.yaml"));
    let script_file = base.join(format!("{name}.script.yaml"));
    std::fs::write(&task_file, task).unwrap();
    std::fs::write(&script_file, script).unwrap();
    let out = loop_in(base)
        .args(["run", "--json", "--task"])
        .arg(&task_file)
        .arg("--model")
        .arg(format!("scripted:{}", script_file.display()))
        .arg("--project")
        .arg(project)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .unwrap();
    let receipt = json_lines(&out)
        .into_iter()
        .find(|e| e["kind"] == "receipt")
        .unwrap_or_else(|| panic!("{name}: no receipt: {}", text(&out)));
    let statement = payload_of(Path::new(receipt["path"].as_str().unwrap()));
    ScriptedRun {
        out,
        receipt,
        statement,
    }
}

/// Make `dir` a git repository whose one commit holds all it has.
pub fn commit_all(dir: &Path) {
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.email=t@e",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(dir)
                .status()
                .unwrap()
                .success(),
            "git {args:?} in {}",
            dir.display()
        );
    }
}

/// A stand-in for an OpenAI-compatible provider on 127.0.0.1 (no
/// streaming): each request's body is kept; the answers are the tool
/// `calls` in order (`{"name", "arguments"}`), then `finish`.
pub fn openai_stand_in(
    calls: Vec<serde_json::Value>,
) -> (
    u16,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use std::io::{BufRead, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(32) {
            let Ok(s) = s else { continue };
            let mut r = std::io::BufReader::new(s);
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let n = {
                let mut k = kept.lock().unwrap();
                k.push(request);
                k.len()
            };
            let call = calls.get(n - 1).cloned().unwrap_or_else(
                || serde_json::json!({"name": "finish", "arguments": "{\"summary\": \"done\"}"}),
            );
            let answer = serde_json::json!({"id": "r", "object": "chat.completion", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": "", "tool_calls": [{"id": format!("call_{n}"), "type": "function", "function": call}]},
                "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
            .to_string();
            let mut s = r.into_inner();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (port, seen)
}

/// A request a stand-in server took.
#[derive(Debug, Clone)]
pub struct Taken {
    /// `GET`, `POST`.
    pub method: String,
    /// The path, with its query.
    pub path: String,
    /// The `Authorization` header's value, if any.
    pub auth: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: serde_json::Value,
}

/// Every request a stand-in server took.
pub type TakenAll = std::sync::Arc<std::sync::Mutex<Vec<Taken>>>;

/// A stand-in HTTP/1.1 server on 127.0.0.1 for a platform's API: at most
/// `most` requests, one per connection, each kept and answered with
/// `answer(request, its number from 1)`: a status and a JSON text. Its
/// port, and what it took.
pub fn stand_in(
    most: usize,
    answer: impl Fn(&Taken, usize) -> (u16, String) + Send + 'static,
) -> (u16, TakenAll) {
    use std::io::{BufRead, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: TakenAll = std::sync::Arc::default();
    let kept = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().take(most) {
            let Ok(s) = s else { continue };
            let mut r = std::io::BufReader::new(s);
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                continue;
            }
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let path = parts.next().unwrap_or_default().to_string();
            let (mut len, mut auth) = (0usize, String::new());
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = h["authorization:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            let taken = Taken {
                method,
                path,
                auth,
                body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
            };
            let n = {
                let mut k = kept.lock().unwrap();
                k.push(taken.clone());
                k.len()
            };
            let (status, text) = answer(&taken, n);
            let mut s = r.into_inner();
            let _ = write!(
                s,
                "HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (port, seen)
}

/// A scripted model that drafts a contract (`hello.txt says hello`, checked
/// by `grep -q hello hello.txt`), then does the work.
pub const DRAFTING: &str = "draft:
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
