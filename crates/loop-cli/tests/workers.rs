//! Many workers on one PostgreSQL store and one Redis Streams queue,
//! killed: `loop worker` processes run scripted tasks while a killer
//! SIGKILLs one at random moments and starts it again. For every task: it
//! ends exactly once, verified; its ledger is one unbroken chain with every
//! step once and its receipt verifies; no command with an effect ran twice
//! (each appends its name to a log in the workspace); and the dead-letter
//! stream holds exactly the tasks that exhausted their attempts (tasks
//! whose model cannot be loaded: every attempt fails).
//!
//! A second test restarts Redis and drops every PostgreSQL connection in
//! the middle of a run: the workers recover on their own and nothing is
//! lost.
//!
//! Needs PostgreSQL (`LOOP_TEST_POSTGRES_URL`, scripts/services.sh) and
//! `redis-server`; skipped without them unless `LOOP_REQUIRE_SERVICES=1`.
//! Seeds are printed; `LOOP_KILL_SEED=N` replays one.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{Rng, database};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = r#"turns:
  - calls:
      - {tool: run_command, args: {command: "echo c1 >> effects.log"}}
      - {tool: write_file, args: {path: a.txt, content: "alpha\n"}}
  - calls:
      - {tool: run_command, args: {command: "echo c2 >> effects.log"}}
      - {tool: write_file, args: {path: b.txt, content: "beta\n"}}
  - calls:
      - {tool: run_command, args: {command: "echo c3 >> effects.log"}}
      - {tool: finish, args: {summary: done}}
"#;

const TASK: &str = r#"instruction: write a.txt and b.txt, logging each command once
criteria:
  - id: files
    checks:
      - file_contains: a.txt
        text: alpha
      - file_contains: b.txt
        text: beta
  - id: once
    checks:
      - run: test "$(cat effects.log)" = "$(printf 'c1\nc2\nc3')"
limits: { max_steps: 6, max_verifications: 2 }
"#;

/// Taken by every test here (each runs workers, some kill them or stop a
/// service on a schedule): run side by side on two cores, each one's load
/// stretched the others' schedules (a submitter slowed down meant many
/// more kills, and good tasks used up their attempts on workers that were
/// all killed).
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The services, or why the test is skipped.
fn services() -> Option<String> {
    let required = std::env::var("LOOP_REQUIRE_SERVICES").as_deref() == Ok("1");
    let pg = std::env::var("LOOP_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let redis = Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    match (pg, redis) {
        (Some(pg), true) => Some(pg),
        _ => {
            assert!(
                !required,
                "LOOP_REQUIRE_SERVICES=1 but PostgreSQL (LOOP_TEST_POSTGRES_URL) or redis-server is missing"
            );
            eprintln!("PostgreSQL or redis-server missing: skipped");
            None
        }
    }
}

/// A redis-server of the test's own on a free port, with every write
/// synced to its append-only file (a restart loses nothing).
struct Redis {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Redis {
    fn start(dir: &Path) -> Redis {
        // A fresh server: nothing from an earlier run's append-only file.
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Redis {
            dir: dir.to_path_buf(),
            port,
            child: None,
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop (SIGTERM: it finishes its file) and start again.
    fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            c.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        self.spawn();
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn dead_letters(&self) -> Vec<(String, String, u64)> {
        let mut c = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg("loop:default:dead")
            .arg("-")
            .arg("+")
            .query(&mut c)
            .unwrap();
        let field = |id: &redis::streams::StreamId, k: &str| -> String {
            id.map
                .get(k)
                .map(|v| redis::from_redis_value_ref::<String>(v).unwrap())
                .unwrap_or_default()
        };
        reply
            .ids
            .iter()
            .map(|id| {
                (
                    field(id, "task"),
                    field(id, "reason"),
                    field(id, "attempts").parse().unwrap(),
                )
            })
            .collect()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A project (a git repository), its scripted model and its contract.
struct Setup {
    dir: PathBuf,
    project: PathBuf,
    store: String,
    queue: String,
}

impl Setup {
    fn new(dir: &Path, store: String, queue: String) -> Setup {
        let _ = std::fs::remove_dir_all(dir);
        let project = dir.join("project");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("README.md"), "scratch\n").unwrap();
        for args in [
            vec!["init", "-q"],
            vec!["add", "."],
            vec![
                "-c",
                "user.email=t@t",
                "-c",
                "user.name=t",
                "commit",
                "-qm",
                "init",
            ],
        ] {
            assert!(
                Command::new("git")
                    .args(&args)
                    .current_dir(&project)
                    .status()
                    .unwrap()
                    .success()
            );
        }
        std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
        std::fs::write(dir.join("task.yaml"), TASK).unwrap();
        Setup {
            dir: dir.to_path_buf(),
            project,
            store,
            queue,
        }
    }

    fn loop_cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
        c.env("LOOP_STORE_URL", &self.store)
            .env("LOOP_QUEUE_URL", &self.queue)
            .env("LOOP_STATE_DIR", self.dir.join("state"))
            .stdin(Stdio::null());
        c
    }

    /// `loop submit` of the task with `model` as its script (`--json`
    /// added when `json`), which must succeed: what it printed.
    fn submitted(&self, model: &Path, json: bool) -> std::process::Output {
        let mut cmd = self.loop_cmd();
        cmd.arg("submit")
            .arg("--task")
            .arg(self.dir.join("task.yaml"))
            .arg("--model")
            .arg(format!("scripted:{}", model.display()))
            .arg("--project")
            .arg(&self.project);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", shared::text(&out));
        out
    }

    /// Submit one task as a person's script would (no `--json`): stdout
    /// is its id alone, the story on stderr. Its id.
    fn submit_plain(&self, model: &Path) -> String {
        let out = self.submitted(model, false);
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        let id = said.trim_end_matches('\n');
        assert!(
            id.starts_with("t-") && !id.contains(char::is_whitespace),
            "stdout is not the task id alone: {said:?}"
        );
        id.to_string()
    }

    /// Submit one task; `model` is its script. Its id.
    fn submit(&self, model: &Path) -> String {
        let out = self.submitted(model, true);
        let last = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["kind"] == "submitted")
            .unwrap_or_else(|| panic!("no id: {}", shared::text(&out)));
        last["task_id"].as_str().unwrap().to_string()
    }

    fn worker(&self, visibility_secs: u64, max_attempts: u64, log: &Path) -> Child {
        self.loop_cmd()
            .args(["worker", "--jobs", "2", "--grace", "0"])
            .args(["--visibility-secs", &visibility_secs.to_string()])
            .args(["--max-attempts", &max_attempts.to_string()])
            .arg("--project")
            .arg(&self.project)
            .env("LOOP_LOG", "loop_server=info,loop_store=info")
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .unwrap(),
            )
            .spawn()
            .unwrap()
    }

    /// Every task as `loop list --json` shows it, by id.
    fn tasks(&self) -> BTreeMap<String, serde_json::Value> {
        let out = self
            .loop_cmd()
            .args(["list", "--json", "--project"])
            .arg(&self.project)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", shared::text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| (v["id"].as_str().unwrap().to_string(), v))
            .collect()
    }

    /// Check one task that ended: exactly once, verified, every step once,
    /// every effect once, the receipt holds.
    fn check(&self, id: &str, seed: u64) {
        let ledger = self
            .project
            .join(format!(".loop/receipts/{id}.ledger.jsonl"));
        let text = std::fs::read_to_string(&ledger).unwrap();
        let entries: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds = |k: &str| entries.iter().filter(|e| e["kind"] == k).count();
        assert_eq!(kinds("task_started"), 1, "seed {seed}, {id}: one genesis");
        assert_eq!(kinds("finished"), 1, "seed {seed}, {id}: ends exactly once");
        let seqs: Vec<u64> = entries.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(
            seqs,
            (0..entries.len() as u64).collect::<Vec<_>>(),
            "seed {seed}, {id}: no entry lost or duplicated"
        );
        let steps: Vec<u64> = entries
            .iter()
            .filter(|e| e["kind"] == "model_turn")
            .map(|e| e["payload"]["step"].as_u64().unwrap())
            .collect();
        assert_eq!(steps, vec![1, 2, 3], "seed {seed}, {id}: every step once");
        let finished = entries.iter().find(|e| e["kind"] == "finished").unwrap();
        assert_eq!(
            finished["payload"]["outcome"]["kind"], "verified",
            "seed {seed}, {id}: {text}"
        );
        let ws = shared::workspace_of(&self.project, id);
        assert_eq!(
            std::fs::read_to_string(ws.join("effects.log")).unwrap(),
            "c1\nc2\nc3\n",
            "seed {seed}, {id}: a command with an effect ran twice or not at all"
        );
        let v = self
            .loop_cmd()
            .args(["verify", "--integrity-only"])
            .arg(
                self.project
                    .join(format!(".loop/receipts/{id}.receipt.json")),
            )
            .output()
            .unwrap();
        assert_eq!(
            v.status.code(),
            Some(0),
            "seed {seed}, {id}: {}",
            shared::text(&v)
        );
    }
}

fn kill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// A queue message naming a task no store holds is dead-lettered by what
/// the store answered (not found), with the reason; the real task beside it
/// runs to verified.
#[test]
fn a_message_naming_no_task_is_dead_lettered_and_real_work_goes_on() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-no-task");
    let redis = Redis::start(&root.join("redis"));
    let db = database(&admin, &format!("loop_no_task_{}", std::process::id()));
    let s = Setup::new(&root.join("run"), db.url.clone(), redis.url());
    let id = s.submit_plain(&s.dir.join("script.yaml"));
    let log = root.join("worker.log");
    let mut w = s.worker(2, 3, &log);
    let ghost = "t-20000101-000000-0a0b0c";
    let mut c = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg("loop:default:tasks")
        .arg("*")
        .arg("task")
        .arg(ghost)
        .arg("key")
        .arg("ghost")
        .query(&mut c)
        .unwrap();
    let start = Instant::now();
    loop {
        let dead = redis.dead_letters();
        let ended = s.tasks()[&id]["outcome"] == "verified";
        if ended && dead.iter().any(|(t, _, _)| t == ghost) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "dead letters {dead:?}; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    kill(&mut w);
    let dead = redis.dead_letters();
    assert_eq!(
        dead,
        vec![(
            ghost.to_string(),
            format!("the store has no task `{ghost}`"),
            dead[0].2
        )]
    );
    s.check(&id, 0);
}

#[test]
fn workers_killed_at_random_lose_no_task_and_run_none_twice() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let seed: u64 = std::env::var("LOOP_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000
        });
    eprintln!("seed {seed} (LOOP_KILL_SEED={seed} replays the kill schedule)");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-kill");
    let redis = Redis::start(&root.join("redis"));
    let db = database(&admin, &format!("loop_kill_{}", std::process::id()));
    let s = Setup::new(&root.join("run"), db.url.clone(), redis.url());
    let (tasks, poison, workers, max_attempts, visibility) = (200, 4, 3, 4, 2);
    // Poison tasks: their script is gone by the time a worker runs them,
    // so every attempt fails and they must end up dead-lettered.
    let gone = s.dir.join("gone.yaml");
    std::fs::write(&gone, SCRIPT).unwrap();
    let mut poisoned = BTreeSet::new();
    for _ in 0..poison {
        poisoned.insert(s.submit(&gone));
    }
    std::fs::remove_file(&gone).unwrap();
    let log = s.dir.join("workers.log");
    let mut running: Vec<Child> = (0..workers)
        .map(|_| s.worker(visibility, max_attempts, &log))
        .collect();
    // Submit while the workers run and the killer kills.
    let script = s.dir.join("script.yaml");
    let submitter = {
        let (s2, script) = (
            Setup {
                dir: s.dir.clone(),
                project: s.project.clone(),
                store: s.store.clone(),
                queue: s.queue.clone(),
            },
            script.clone(),
        );
        std::thread::spawn(move || {
            (0..tasks - poison)
                .map(|_| s2.submit(&script))
                .collect::<BTreeSet<_>>()
        })
    };
    let start = Instant::now();
    let mut kills = 0;
    let mut schedule = Vec::new();
    while kills < 50 || !submitter.is_finished() {
        std::thread::sleep(Duration::from_millis(150 + rng.below(600)));
        let victim = rng.below(workers as u64) as usize;
        kill(&mut running[victim]);
        schedule.push((start.elapsed().as_millis(), victim));
        kills += 1;
        running[victim] = s.worker(visibility, max_attempts, &log);
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "seed {seed}: still killing after 10 minutes"
        );
    }
    let submitted = submitter.join().unwrap();
    eprintln!(
        "seed {seed}: {kills} kills in {:.1} s; waiting for the rest",
        start.elapsed().as_secs_f64()
    );
    // No more kills: everything ends (poison tasks exhaust their attempts).
    let waited = Instant::now();
    loop {
        let dead: BTreeSet<String> = redis.dead_letters().into_iter().map(|d| d.0).collect();
        let t = s.tasks();
        let settled = t.len() == tasks as usize
            && t.iter()
                .all(|(id, v)| v["state"] == "terminal" || dead.contains(id));
        if settled && poisoned.is_subset(&dead) {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(300),
            "seed {seed}: tasks never ended: {:?} (workers log: {})",
            s.tasks()
                .iter()
                .filter(|(_, v)| v["state"] != "terminal")
                .map(|(id, v)| (id.clone(), v["state"].clone()))
                .collect::<Vec<_>>(),
            log.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // A worker's last word: nothing is running, nothing waits.
    std::thread::sleep(Duration::from_secs(visibility + 1));
    for w in &mut running {
        kill(w);
    }
    let listed = s.tasks();
    assert_eq!(listed.len(), tasks as usize, "seed {seed}");
    let ended: BTreeSet<String> = listed
        .iter()
        .filter(|(_, v)| v["state"] == "terminal")
        .map(|(id, _)| id.clone())
        .collect();
    for id in &ended {
        assert!(
            submitted.contains(id),
            "seed {seed}: {id} was poisoned yet ended"
        );
        s.check(id, seed);
    }
    // The dead letters are exactly the tasks that exhausted their attempts
    // (the poisoned ones, and any good one killed more often than it may
    // be), each once, with the reason; no task both ended and died.
    let dead = redis.dead_letters();
    let dead_ids: Vec<String> = dead.iter().map(|d| d.0.clone()).collect();
    let dead_set: BTreeSet<String> = dead_ids.iter().cloned().collect();
    assert_eq!(
        dead_ids.len(),
        dead_set.len(),
        "seed {seed}: each once: {dead:?}"
    );
    assert!(poisoned.is_subset(&dead_set), "seed {seed}: {dead:?}");
    assert!(ended.is_disjoint(&dead_set), "seed {seed}: {dead:?}");
    assert_eq!(
        ended.len() + dead_set.len(),
        tasks as usize,
        "seed {seed}: every task ended or was given up on"
    );
    assert!(
        ended.len() >= submitted.len() - 2,
        "seed {seed}: {} good tasks dead-lettered: {dead:?}",
        submitted.len() - ended.len()
    );
    for (id, reason, attempts) in &dead {
        assert!(
            *attempts > max_attempts && reason.contains("without ending"),
            "seed {seed}, {id}: {reason} ({attempts})"
        );
        assert_ne!(listed[id]["state"], "terminal", "seed {seed}");
    }
    eprintln!(
        "seed {seed}: {tasks} tasks ({} dead-lettered), {kills} kills, all checked in {:.1} s; kills at {schedule:?}",
        dead_set.len(),
        start.elapsed().as_secs_f64()
    );
}

/// A task the queue gives up on says so where people look: `loop status`
/// (and the API, whose status is the same) names the queue and the
/// reason, instead of a task that only looks `pending (interrupted)`; a
/// task that ran carries no such note.
#[test]
fn a_task_the_queue_gives_up_on_says_so_in_its_status() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-dead-letter");
    let redis = Redis::start(&root.join("redis"));
    let db = database(&admin, &format!("loop_dead_{}", std::process::id()));
    let s = Setup::new(&root.join("run"), db.url.clone(), redis.url());
    let gone = s.dir.join("gone.yaml");
    std::fs::write(&gone, SCRIPT).unwrap();
    let poisoned = s.submit(&gone);
    std::fs::remove_file(&gone).unwrap();
    let good = s.submit(&s.dir.join("script.yaml"));
    let log = s.dir.join("workers.log");
    let mut worker = s.worker(1, 1, &log);
    let started = Instant::now();
    loop {
        let dead = redis.dead_letters();
        let ran = s
            .tasks()
            .get(&good)
            .is_some_and(|v| v["state"] == "terminal");
        if ran && dead.iter().any(|d| d.0 == poisoned) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not settled: {dead:?} (log {})",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    kill(&mut worker);
    let status = |id: &str, json: bool| {
        let mut c = s.loop_cmd();
        c.args(["status", id, "--project"]).arg(&s.project);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", shared::text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let v: serde_json::Value = serde_json::from_str(status(&poisoned, true).trim()).unwrap();
    assert_eq!(v["dead_letter"]["queue"], "default", "{v}");
    assert!(
        v["dead_letter"]["reason"]
            .as_str()
            .unwrap()
            .contains("delivered 2 times without ending (at most 1)"),
        "{v}"
    );
    let human = status(&poisoned, false);
    assert!(
        human.contains("dead-lettered by queue `default`: delivered 2 times"),
        "{human}"
    );
    let v: serde_json::Value = serde_json::from_str(status(&good, true).trim()).unwrap();
    assert!(v.get("dead_letter").is_none(), "{v}");
    assert_eq!(v["outcome"], "verified", "{v}");
}

#[test]
fn a_redis_restart_and_dropped_postgres_connections_mid_run_lose_nothing() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-restart");
    let mut redis = Redis::start(&root.join("redis"));
    let database = database(&admin, &format!("loop_restart_{}", std::process::id()));
    let db = database.name.clone();
    let s = Setup::new(&root.join("run"), database.url.clone(), redis.url());
    let log = s.dir.join("workers.log");
    let script = s.dir.join("script.yaml");
    let mut ids = BTreeSet::new();
    for _ in 0..12 {
        ids.insert(s.submit(&script));
    }
    let mut workers: Vec<Child> = (0..2).map(|_| s.worker(3, 5, &log)).collect();
    let mut admin_conn = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    let mut drops = 0;
    let mut restarts = 0;
    let start = Instant::now();
    for round in 0..40 {
        std::thread::sleep(Duration::from_millis(250));
        if round % 4 == 1 {
            let n: i64 = admin_conn
                .query_one(
                    // The workers' client connections only (an autovacuum
                    // worker on the database is the server's own).
                    "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
                     WHERE datname = $1 AND pid <> pg_backend_pid()
                       AND backend_type = 'client backend' AND usename = current_user",
                    &[&db],
                )
                .unwrap()
                .get(0);
            drops += n;
        }
        if round % 10 == 5 {
            redis.restart();
            restarts += 1;
        }
        // More work keeps arriving through the outages.
        if round % 8 == 0 {
            ids.insert(s.submit(&script));
        }
    }
    assert!(
        drops > 0 && restarts >= 3,
        "{drops} drops, {restarts} restarts"
    );
    loop {
        let t = s.tasks();
        if ids.iter().all(|id| t[id]["state"] == "terminal") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "tasks never ended after the outages (log: {})",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for w in &mut workers {
        kill(w);
    }
    for id in &ids {
        s.check(id, 0);
    }
    assert!(redis.dead_letters().is_empty());
    eprintln!(
        "{} tasks through {drops} dropped PostgreSQL connections and {restarts} Redis restarts in {:.1} s",
        ids.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn the_api_hands_its_tasks_to_the_workers_and_counts_the_queue() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-api");
    let redis = Redis::start(&root.join("redis"));
    let db = database(&admin, &format!("loop_api_{}", std::process::id()));
    let s = Setup::new(&root.join("run"), db.url.clone(), redis.url());
    std::fs::copy(s.dir.join("script.yaml"), s.project.join("script.yaml")).unwrap();
    let out = s
        .loop_cmd()
        .args([
            "tokens",
            "create",
            "--owner",
            "alice",
            "--json",
            "--project",
        ])
        .arg(&s.project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shared::text(&out));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let token = made["token"].as_str().unwrap().to_string();
    // The server's own figures (the queue, what runs here) are an admin's.
    let out = s
        .loop_cmd()
        .args([
            "tokens",
            "create",
            "--owner",
            "ops",
            "--scope",
            "admin",
            "--json",
            "--project",
        ])
        .arg(&s.project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shared::text(&out));
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let admin = made["token"].as_str().unwrap().to_string();
    // The token is in the shared store: nothing is written to .loop/loop.db.
    assert!(!s.project.join(".loop/loop.db").exists());
    let env = [
        ("LOOP_STORE_URL", s.store.as_str()),
        ("LOOP_QUEUE_URL", s.queue.as_str()),
    ];
    let (server, url) = shared::serve(&s.dir, &s.project, &env, &[]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let contract = std::fs::read_to_string(s.dir.join("task.yaml")).unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut resp = agent
            .post(&format!("{url}/api/v1/tasks"))
            .header("Authorization", &format!("Bearer {token}"))
            .content_type("application/json")
            .send(
                serde_json::json!({"instruction": "write a.txt and b.txt, logging each command once", "contract": contract, "model": "scripted:script.yaml"})
                    .to_string(),
            )
            .unwrap();
        let body = resp.body_mut().read_to_string().unwrap();
        assert_eq!(resp.status().as_u16(), 201, "{body}");
        ids.push(
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let metrics = |agent: &ureq::Agent| -> String {
        agent
            .get(&format!("{url}/metrics"))
            .header("Authorization", &format!("Bearer {admin}"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    };
    // No worker yet: the server runs nothing itself, the queue holds them.
    std::thread::sleep(Duration::from_millis(800));
    let m = metrics(&agent);
    assert!(m.contains("loop_queue_depth{state=\"waiting\"} 3"), "{m}");
    assert!(m.contains("loop_server_tasks_running 0"), "{m}");
    let t = s.tasks();
    assert!(ids.iter().all(|id| t[id]["state"] == "pending"), "{t:?}");
    // A worker takes them and runs them to their end.
    let log = s.dir.join("worker.log");
    let mut worker = s.worker(30, 3, &log);
    let start = Instant::now();
    while !ids.iter().all(|id| s.tasks()[id]["state"] == "terminal") {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the worker did not run them (log: {})",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for id in &ids {
        s.check(id, 0);
    }
    // Each message is acknowledged once its task's end is committed, so
    // the last acknowledgement may trail the store by a moment.
    let start = Instant::now();
    let m = loop {
        let m = metrics(&agent);
        if m.contains("loop_queue_depth{state=\"pending\"} 0")
            || start.elapsed() > Duration::from_secs(10)
        {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(m.contains("loop_queue_depth{state=\"waiting\"} 0"), "{m}");
    assert!(m.contains("loop_queue_depth{state=\"pending\"} 0"), "{m}");
    kill(&mut worker);
    shared::stop(server);
}

#[test]
fn a_drained_worker_hands_its_running_task_to_another_which_ends_it_once() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-drain");
    let redis = Redis::start(&root.join("redis"));
    let db = database(&admin, &format!("loop_drain_{}", std::process::id()));
    let s = Setup::new(&root.join("run"), db.url.clone(), redis.url());
    // The first command takes a while: the drain comes in the middle of it.
    let slow = s.dir.join("slow.yaml");
    std::fs::write(
        &slow,
        SCRIPT.replace("echo c1 >> effects.log", "sleep 3; echo c1 >> effects.log"),
    )
    .unwrap();
    let id = s.submit(&slow);
    let log = s.dir.join("worker.log");
    let mut first = s.worker(30, 3, &log);
    let start = Instant::now();
    while s.tasks()[&id]["running"] != true {
        assert!(start.elapsed() < Duration::from_secs(60), "never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(800));
    // SIGTERM with no grace: the running task is handed back at once and
    // the worker ends, well before its command would have.
    let asked = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(first.id() as i32, libc::SIGTERM);
    }
    let status = first.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_ne!(s.tasks()[&id]["state"], "terminal");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("handed back"), "{said}");
    // Another worker takes it at once (a hand-back is a fresh message, not
    // a lapsed one) and ends it: every step and every effect once.
    let mut second = s.worker(30, 3, &log);
    let start = Instant::now();
    while s.tasks()[&id]["state"] != "terminal" {
        // Well inside the 30 s visibility timeout: the fresh message is
        // taken at once, not the old one once it lapses.
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not resumed at once (log: {})",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!said.contains("took over message"), "{said}");
    s.check(&id, 0);
    assert!(redis.dead_letters().is_empty());
    kill(&mut second);
}

/// Until `done` holds, or panic naming `what` after `secs`.
fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn two_projects_on_one_store_and_queue_each_run_only_their_own_tasks() {
    let Some(admin) = services() else {
        return;
    };
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-projects");
    let redis = Redis::start(&root.join("redis"));
    let db = database(&admin, &format!("loop_projects_{}", std::process::id()));
    let a = Setup::new(&root.join("a"), db.url.clone(), redis.url());
    let b = Setup::new(&root.join("b"), db.url.clone(), redis.url());
    let b_task = b.submit(&b.dir.join("script.yaml"));
    let a_task = a.submit(&a.dir.join("script.yaml"));
    let id_of = |s: &Setup| {
        std::fs::read_to_string(s.project.join(".loop/project-id"))
            .unwrap()
            .trim()
            .to_string()
    };
    let (a_id, b_id) = (id_of(&a), id_of(&b));
    assert_ne!(a_id, b_id, "two projects, two identities");
    // Only A's worker runs: with one attempt allowed, a worker that spent
    // B's attempts would dead-letter it.
    let a_log = a.dir.join("worker.log");
    let mut worker = a.worker(1, 1, &a_log);
    wait_for(120, "A's task never ended", || {
        a.tasks()
            .get(&a_task)
            .is_some_and(|v| v["state"] == "terminal")
    });
    std::thread::sleep(Duration::from_secs(4));
    kill(&mut worker);
    let log = std::fs::read_to_string(&a_log).unwrap();
    assert!(
        log.contains(&format!(
            "task {b_task} belongs to project {b_id}, not this one ({a_id})"
        )),
        "{log}"
    );
    assert!(
        redis.dead_letters().is_empty(),
        "{:?}",
        redis.dead_letters()
    );
    let b_view = &b.tasks()[&b_task];
    assert_eq!(b_view["state"], "pending", "{b_view}");
    assert_eq!(b_view["entries"], 0, "B's task was not touched: {b_view}");
    // Each project lists its own tasks only.
    assert!(!a.tasks().contains_key(&b_task));
    assert!(!b.tasks().contains_key(&a_task));
    // Nor can A resume it by hand: to A it is not there.
    let out = a
        .loop_cmd()
        .args(["resume", &b_task, "--project"])
        .arg(&a.project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", shared::text(&out));
    assert!(
        shared::text(&out).contains(&format!("no task `{b_task}`")),
        "{}",
        shared::text(&out)
    );
    // A clone of B is a project of its own: its worker leaves B's task too.
    let c = Setup::new(&root.join("c"), db.url.clone(), redis.url());
    std::fs::remove_dir_all(&c.project).unwrap();
    assert!(
        Command::new("git")
            .args(["clone", "-q"])
            .arg(&b.project)
            .arg(&c.project)
            .status()
            .unwrap()
            .success()
    );
    let c_log = c.dir.join("worker.log");
    let mut worker = c.worker(1, 1, &c_log);
    std::thread::sleep(Duration::from_secs(4));
    kill(&mut worker);
    let log = std::fs::read_to_string(&c_log).unwrap();
    assert!(
        log.contains(&format!("task {b_task} belongs to project {b_id}"))
            && log.contains("though both share a history (a clone?)"),
        "{log}"
    );
    assert_eq!(b.tasks()[&b_task]["state"], "pending");
    // B's own worker runs it, once, to its end. (Three attempts: a worker
    // above killed in the instant it held B's message leaves it to be
    // taken over, a delivery of its own.)
    let b_log = b.dir.join("worker.log");
    let mut worker = b.worker(1, 3, &b_log);
    wait_for(120, "B's task never ended", || {
        b.tasks()
            .get(&b_task)
            .is_some_and(|v| v["state"] == "terminal")
    });
    kill(&mut worker);
    assert_eq!(b.tasks()[&b_task]["outcome"], "verified");
    assert!(redis.dead_letters().is_empty());
    // A clone told to serve B runs B's next task, and B gets its receipt
    // (written in the clone, kept in the store, brought to B when B asks).
    std::fs::write(
        c.project.join("Loopfile.yaml"),
        format!("version: 1\nproject:\n  serves: [{b_id}]\n"),
    )
    .unwrap();
    let served = b.submit(&b.dir.join("script.yaml"));
    let mut worker = c.worker(1, 3, &c_log);
    wait_for(120, "the clone never ran B's task", || {
        b.tasks()
            .get(&served)
            .is_some_and(|v| v["state"] == "terminal")
    });
    kill(&mut worker);
    let receipt = |s: &Setup| {
        s.project
            .join(format!(".loop/receipts/{served}.receipt.json"))
    };
    // (B's own runtime ran nothing since: what B holds came from the store,
    // brought when B looked, `loop list` above included.)
    assert!(receipt(&c).exists(), "the clone that ran it wrote it");
    let out = b
        .loop_cmd()
        .args(["status", &served, "--json", "--project"])
        .arg(&b.project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shared::text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "verified", "{v}");
    assert_eq!(
        v["receipt"].as_str(),
        Some(receipt(&b).display().to_string().as_str()),
        "{v}"
    );
    assert_eq!(
        std::fs::read(receipt(&b)).unwrap(),
        std::fs::read(receipt(&c)).unwrap()
    );
    // Checked offline in B, with the key of the machine that signed it
    // (the clone's state directory holds it).
    let verified = c
        .loop_cmd()
        .arg("verify")
        .arg(receipt(&b))
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        shared::text(&verified)
    );
}

/// A PostgreSQL cluster of the test's own (the real server, from the
/// system's binaries), on a free port on 127.0.0.1, which the test can stop
/// and start without touching the shared test server. Run as the
/// `postgres` user when the tests run as root (PostgreSQL refuses root).
struct PrivatePostgres {
    dir: PathBuf,
    port: u16,
    /// Server settings besides the port and address (`-c name=value`).
    settings: String,
}

impl PrivatePostgres {
    fn bin(name: &str) -> PathBuf {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin").join(name))
                    .collect()
            })
            .unwrap_or_default();
        found.retain(|p| p.exists());
        found.sort();
        found.pop().unwrap_or_else(|| PathBuf::from(name))
    }

    fn as_owner(&self, program: &str) -> Command {
        let mut c = if shared::is_root() {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                "postgres",
                "--regid",
                "postgres",
                "--clear-groups",
            ])
            .arg(Self::bin(program));
            c
        } else {
            Command::new(Self::bin(program))
        };
        c.stdin(Stdio::null());
        c
    }

    fn start(name: &str) -> PrivatePostgres {
        Self::start_with(name, "")
    }

    fn start_with(name: &str, settings: &str) -> PrivatePostgres {
        // Under /tmp: the postgres user can reach it.
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if shared::is_root() {
            assert!(
                Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(&dir)
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePostgres {
            dir,
            port,
            settings: settings.to_string(),
        };
        let out = pg
            .as_owner("initdb")
            .args(["-U", "loop", "--auth=trust", "-N", "-D"])
            .arg(pg.dir.join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", shared::text(&out));
        pg.up();
        pg
    }

    fn up(&self) {
        let out = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-o")
            .arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off {}",
                self.port,
                self.dir.display(),
                self.settings
            ))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "start"])
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_ctl start: {}", shared::text(&out));
    }

    /// A fast shutdown: every connection is closed, nothing answers.
    fn down(&self) {
        self.stop("fast");
    }

    /// Stopped in `mode` (`immediate`: a crash, what the write-ahead log's
    /// buffers held unwritten is lost).
    fn stop(&self, mode: &str) {
        let out = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", mode, "-w", "stop"])
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_ctl stop: {}", shared::text(&out));
    }

    fn url(&self) -> String {
        format!("postgres://loop@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fault is not a decision, with the real server: six tasks are running
/// an 8 s command when PostgreSQL is stopped for 20 s. No task ends
/// `cancelled` or failed; when the store is back, all six end verified,
/// each with every step once and every effect once.
#[test]
fn postgres_stopped_for_20_s_under_six_running_tasks_all_end_verified() {
    if services().is_none() {
        return;
    }
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workers-pg-outage");
    let redis = Redis::start(&root.join("redis"));
    let pg = PrivatePostgres::start("loop-pg-outage");
    let s = Setup::new(&root.join("run"), pg.url(), redis.url());
    let slow = SCRIPT.replace("echo c1 >> effects.log", "sleep 8; echo c1 >> effects.log");
    let script = s.dir.join("slow.yaml");
    std::fs::write(&script, slow).unwrap();
    let ids: BTreeSet<String> = (0..6).map(|_| s.submit(&script)).collect();
    let log = s.dir.join("workers.log");
    let mut workers: Vec<Child> = (0..2)
        .map(|_| {
            s.loop_cmd()
                .args(["worker", "--jobs", "3", "--grace", "0"])
                .args(["--visibility-secs", "5", "--max-attempts", "5"])
                .arg("--project")
                .arg(&s.project)
                .env(
                    "LOOP_LOG",
                    "loop_server=info,loop_store=info,loop_runtime=info",
                )
                .stdout(Stdio::null())
                .stderr(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&log)
                        .unwrap(),
                )
                .spawn()
                .unwrap()
        })
        .collect();
    // Every task is in its first command (a step is under way, none ended).
    wait_for(60, "six tasks running", || {
        let t = s.tasks();
        ids.iter().all(|id| {
            let state = t[id]["state"].as_str().unwrap_or("");
            state != "pending" && state != "terminal"
        })
    });
    std::thread::sleep(Duration::from_secs(2));
    pg.down();
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_secs(20));
    pg.up();
    eprintln!(
        "PostgreSQL was down for {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    loop {
        let t = s.tasks();
        if ids.iter().all(|id| t[id]["state"] == "terminal") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "tasks never ended after the outage: {t:?} (log: {})",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for w in &mut workers {
        kill(w);
    }
    for id in &ids {
        s.check(id, 0);
    }
    assert!(
        redis.dead_letters().is_empty(),
        "{:?}",
        redis.dead_letters()
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("a fault is not a decision"),
        "the outage reached no running task: {said}"
    );
}

/// The store loses the tail of a task's record while its runtime lives on
/// (what a power cut of the database's machine loses: the entries
/// committed without waiting for the disk since the last one that did).
/// Here the finish call's observation and the move to verifying are taken
/// out of the store while the check runs (its intent, committed durably,
/// stays), and PostgreSQL crashes (an immediate stop) and comes back. The
/// runtime that lives on writes the lost entries back from its ledger
/// with its next commit and ends the task verified: one chain, every step
/// once, every effect once.
#[test]
fn a_store_that_loses_the_tail_of_a_record_is_repaired_from_the_ledger() {
    let Some(t) = lose_tail("loop-pg-tail", Lose::Finish) else {
        return;
    };
    let (s, id, out, said) = (&t.s, &t.id, &t.out, &t.said);
    assert_eq!(out.status.code(), Some(0), "{said}");
    s.check(id, 0);
    // The store's record is the ledger's again, to its end.
    let ledger =
        std::fs::read_to_string(s.project.join(format!(".loop/receipts/{id}.ledger.jsonl")))
            .unwrap();
    let mut c = postgres::Client::connect(&t._pg.url(), postgres::NoTls).unwrap();
    let hashes: Vec<String> = c
        .query(
            "SELECT hash FROM entries WHERE task_id = $1 ORDER BY seq",
            &[id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let ours: Vec<String> = ledger
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["hash"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(hashes, ours, "{said}");
    let state: String = c
        .query_one("SELECT state FROM tasks WHERE id = $1", &[id])
        .unwrap()
        .get(0);
    assert_eq!(state, "terminal", "{said}");
}

/// As above, but the lost tail holds an observation that named the
/// workspace's state, and that state and its contents are lost with it:
/// the whole state goes back to the store with the entries, so the record
/// can make the workspace again anywhere.
#[test]
fn a_store_that_loses_a_kept_state_is_given_the_whole_state_again() {
    let Some(t) = lose_tail("loop-pg-state", Lose::Step) else {
        return;
    };
    let (s, id, out, said) = (&t.s, &t.id, &t.out, &t.said);
    assert_eq!(out.status.code(), Some(0), "{said}");
    s.check(id, 0);
    let ledger =
        std::fs::read_to_string(s.project.join(format!(".loop/receipts/{id}.ledger.jsonl")))
            .unwrap();
    let last_root = ledger
        .lines()
        .filter_map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            e["payload"]["workspace_root"].as_str().map(str::to_string)
        })
        .next_back()
        .unwrap();
    let mut c = postgres::Client::connect(&t._pg.url(), postgres::NoTls).unwrap();
    let body: String = c
        .query_one(
            "SELECT body FROM task_files WHERE task_id = $1 AND name = 'tree'",
            &[id],
        )
        .unwrap()
        .get(0);
    let kept: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(kept["delta"]["root"], last_root.as_str(), "{body}");
    let blobs: i64 = c
        .query_one("SELECT count(*) FROM blobs WHERE task_id = $1", &[id])
        .unwrap()
        .get(0);
    // a.txt, b.txt and effects.log: every content the state names.
    assert_eq!(blobs, 3, "{body}");
}

/// The attack beside it: the store's record is not only shorter but
/// changed (the entry before the lost tail is not the ledger's). Nothing
/// is written back and nothing recorded past the store's record; the task
/// is left for a resume, which refuses the changed chain by name.
#[test]
fn a_store_whose_record_was_changed_is_not_repaired_from_the_ledger() {
    let Some(t) = lose_tail("loop-pg-forged", Lose::Forged) else {
        return;
    };
    let (s, id, out, said) = (&t.s, &t.id, &t.out, &t.said);
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("cannot be repaired from the ledger")
            && said.contains("is not this ledger's"),
        "{said}"
    );
    let url = s.store.clone();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let state: String = c
        .query_one("SELECT state FROM tasks WHERE id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_ne!(state, "terminal", "{said}");
    let again = s
        .loop_cmd()
        .args(["resume", id, "--json", "--project"])
        .arg(&s.project)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&again.stdout),
        String::from_utf8_lossy(&again.stderr)
    );
    assert_ne!(again.status.code(), Some(0), "{said}");
    assert!(said.contains("does not continue the chain"), "{said}");
}

/// What the store loses in [`lose_tail`].
#[derive(Clone, Copy, PartialEq)]
enum Lose {
    /// The finish call's observation and the move to verifying.
    Finish,
    /// From the last command's observation on (it named the workspace's
    /// state), and the workspace's kept state and contents with it.
    Step,
    /// As `Finish`, and the entry before that tail is changed too.
    Forged,
}

/// Runs a task on a private PostgreSQL that loses the tail of its record
/// during the check (see [`Lose`]), crashes and comes back.
fn lose_tail(name: &str, lose: Lose) -> Option<Tail> {
    services()?;
    let _heavy = heavy();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("workers-{name}"));
    let pg = PrivatePostgres::start(name);
    let s = Setup::new(&root.join("run"), pg.url(), "redis://127.0.0.1:1".into());
    std::fs::write(
        s.dir.join("task.yaml"),
        TASK.replace(
            "      - run: test \"$(cat effects.log)\"",
            "      - run: sleep 6; test \"$(cat effects.log)\"",
        ),
    )
    .unwrap();
    let mut c = s.loop_cmd();
    c.args(["run", "--json", "--task"])
        .arg(s.dir.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", s.dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&s.project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let mut c = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
    let start = Instant::now();
    let (id, verifying): (String, i64) = loop {
        let row = c
            .query_opt(
                "SELECT task_id, seq FROM entries WHERE kind = 'transition' AND payload LIKE '%\"to\":\"verifying\"%'",
                &[],
            )
            .ok()
            .flatten();
        if let Some(r) = row {
            break (r.get(0), r.get(1));
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never verified");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The tail since the finish call's intent (or the last command's) is
    // lost.
    let from = verifying - if lose == Lose::Step { 3 } else { 1 };
    let lost = c
        .execute(
            "DELETE FROM entries WHERE task_id = $1 AND seq >= $2",
            &[&id, &from],
        )
        .unwrap();
    assert_eq!(lost as i64, verifying - from + 1);
    if lose == Lose::Step {
        c.execute(
            "DELETE FROM task_files WHERE task_id = $1 AND name = 'tree'",
            &[&id],
        )
        .unwrap();
        c.execute("DELETE FROM blobs WHERE task_id = $1", &[&id])
            .unwrap();
    }
    let forge = lose == Lose::Forged;
    if forge {
        let changed = c
            .execute(
                "UPDATE entries SET hash = repeat('0', 64) WHERE task_id = $1 AND seq = $2",
                &[&id, &(verifying - 2)],
            )
            .unwrap();
        assert_eq!(changed, 1);
    }
    c.execute("UPDATE tasks SET state = 'acting' WHERE id = $1", &[&id])
        .unwrap();
    drop(c);
    pg.stop("immediate");
    pg.up();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if forge {
        // Nothing was recorded past the store's record.
        let mut c = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
        let past: i64 = c
            .query_one(
                "SELECT count(*) FROM entries WHERE task_id = $1 AND seq >= $2",
                &[&id, &from],
            )
            .unwrap()
            .get(0);
        assert_eq!(past, 0, "recorded past the store's record ({said})");
    }
    Some(Tail {
        s,
        id,
        out,
        said,
        _pg: pg,
        _heavy,
    })
}

/// What [`lose_tail`] leaves: the cluster and the lock live as long as the
/// checks need them.
struct Tail {
    s: Setup,
    id: String,
    out: std::process::Output,
    said: String,
    _pg: PrivatePostgres,
    _heavy: std::sync::MutexGuard<'static, ()>,
}
