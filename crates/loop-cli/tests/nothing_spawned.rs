//! Nothing is spawned that the task does not need: a task whose checks
//! run no command starts no sandbox (not even the probe that learns
//! whether overlays work) before its first command, and a project that is
//! no repository runs no git; the honest counterparts (a `run` check, a
//! git project) still start them and still verify.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Three steps as three criteria; step 2 is written wrong first, rejected
/// by the first verification and repaired.
const SCRIPT: &str = "turns:
  - calls: [{tool: write_file, args: {path: step1.txt, content: \"step 1 done\\n\"}}]
  - calls: [{tool: write_file, args: {path: step2.txt, content: \"step 2 wrong\\n\"}}]
  - calls: [{tool: write_file, args: {path: step3.txt, content: \"step 3 done\\n\"}}]
  - calls: [{tool: finish, args: {summary: done}}]
  - calls: [{tool: write_file, args: {path: step2.txt, content: \"step 2 done\\n\"}}]
  - calls: [{tool: finish, args: {summary: repaired}}]
";

fn task(step3: &str) -> String {
    format!(
        "instruction: write three steps
criteria:
  - id: step-1
    checks: [{{file_contains: step1.txt, text: step 1 done}}]
  - id: step-2
    checks: [{{file_contains: step2.txt, text: step 2 done}}]
  - id: step-3
    checks: [{step3}]
"
    )
}

const FILE_CHECK: &str = "{file_contains: step3.txt, text: step 3 done}";
const RUN_CHECK: &str = "{run: grep -q 'step 3 done' step3.txt}";

/// A `git` first on PATH that leaves a mark each time it runs, then runs
/// the real one.
fn marking_git(base: &Path) -> (PathBuf, PathBuf) {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = base.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mark = base.join("git-ran");
    let git = bin.join("git");
    std::fs::write(
        &git,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            mark.display(),
            real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, mark)
}

/// `loop run` on `project` with the sandbox's phases logged, `bin` first
/// on PATH; its output and the statement of its receipt, verified.
fn run(base: &Path, project: &Path, bin: &Path, task: &str) -> (Output, serde_json::Value) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let run = shared::run_scripted_with(
        base,
        project,
        "steps",
        (task, SCRIPT),
        &[
            ("PATH", path),
            ("LOOP_LOG", "loop_sandbox::phases=debug".into()),
        ],
    );
    assert!(
        run.outcome().starts_with("verified"),
        "{}",
        shared::text(&run.out)
    );
    (run.out, run.statement)
}

/// How many sandboxes the run started (each logs its phases).
fn sandboxes(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("sandbox: view at"))
        .count()
}

fn base(name: &str) -> PathBuf {
    let b = std::env::temp_dir().join(format!("loop-spawned-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&b);
    std::fs::create_dir_all(b.join("project")).unwrap();
    b
}

#[test]
fn a_task_whose_checks_run_no_command_starts_no_sandbox_and_no_git() {
    let b = base("none");
    let (bin, mark) = marking_git(&b);
    let (out, statement) = run(&b, &b.join("project"), &bin, &task(FILE_CHECK));
    assert_eq!(sandboxes(&out), 0, "{}", shared::text(&out));
    assert!(
        !mark.exists(),
        "git ran in a project that is no repository: {}",
        std::fs::read_to_string(&mark).unwrap_or_default()
    );
    // Two verifications: the first rejected step 2, the second accepted.
    assert_eq!(
        statement["predicate"]["budgets"]["used"]["verifications"],
        2
    );
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn a_run_check_starts_its_sandbox_and_a_repository_is_asked_of_git() {
    let b = base("run");
    let project = b.join("project");
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    shared::commit_all(&project);
    let (bin, mark) = marking_git(&b);
    let (out, statement) = run(&b, &project, &bin, &task(RUN_CHECK));
    // The baseline, and each verification's run check.
    assert!(sandboxes(&out) >= 3, "{}", shared::text(&out));
    assert!(
        std::fs::read_to_string(&mark)
            .unwrap()
            .contains("rev-parse --show-toplevel")
    );
    assert_eq!(
        statement["predicate"]["budgets"]["used"]["verifications"],
        2
    );
    let _ = std::fs::remove_dir_all(&b);
}

/// The process whose arguments are exactly `argv`, if one runs.
fn find_process(argv: &[&str]) -> Option<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (std::fs::read(e.path().join("cmdline")).ok()? == want).then_some(pid)
    })
}

/// A process and its ancestors, as the host sees them: (pid, arguments).
fn ancestry(mut pid: u32) -> Vec<(u32, String)> {
    let mut chain = Vec::new();
    while pid > 1 {
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        chain.push((pid, String::from_utf8_lossy(&args).replace('\0', " ")));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        pid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
    }
    chain
}

/// Commands are forked from the spawner, a small process of their own,
/// not from the runtime (whose fork copies its page tables, large in a
/// server or a verification of many files): seen from outside, a running
/// command's ancestors are its sandbox's relay and init, the spawner, then
/// the `loop` process. `LOOP_SPAWNER=0` forks them from the runtime, as
/// does `loop exec` of one command (a small process starting one). Killed,
/// the runtime takes its command with it either way.
#[test]
fn a_command_is_forked_from_the_spawner_and_dies_with_the_runtime() {
    let b = base("spawner");
    let cases = [
        (None, "2", true),
        (Some("0"), "2", false),
        (None, "1", false),
    ];
    for (i, (setting, repeat, spawner)) in cases.into_iter().enumerate() {
        let seconds = format!("{}.{i}{}", 60 + i, std::process::id() % 1000);
        let mut c = shared::loop_in(&b);
        c.current_dir(b.join("project"))
            .args(["exec", "--repeat", repeat, "--", "sleep", &seconds])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(v) = setting {
            c.env("LOOP_SPAWNER", v);
        }
        let mut runtime = c.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let sleep = loop {
            if let Some(pid) = find_process(&["sleep", &seconds]) {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "case {i}: no command ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let chain = ancestry(sleep);
        let at = chain.iter().position(|(pid, _)| *pid == runtime.id());
        let at = at.unwrap_or_else(|| panic!("case {i}: the runtime is no ancestor: {chain:?}"));
        let between: Vec<&str> = chain[1..at].iter().map(|(_, a)| a.as_str()).collect();
        let by_spawner = between.iter().any(|a| a.contains("__loop-spawner"));
        assert_eq!(by_spawner, spawner, "case {i}: {chain:?}");
        if spawner {
            // The spawner is the runtime's child, and the command's
            // relay the spawner's.
            assert!(
                between[between.len() - 1].contains("__loop-spawner"),
                "{chain:?}"
            );
        }
        runtime.kill().unwrap();
        runtime.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while find_process(&["sleep", &seconds]).is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "case {i}: the command outlived its killed runtime"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    let _ = std::fs::remove_dir_all(&b);
}

/// A spawner killed between two commands is replaced: the next command
/// runs (from a new spawner), and nothing is reported as failed.
#[test]
fn a_killed_spawner_is_replaced_at_the_next_command() {
    let b = base("spawner-killed");
    let runs = b.join("project").join("runs");
    let out = b.join("out.json");
    let mut runtime = shared::loop_in(&b)
        .current_dir(b.join("project"))
        .args([
            "exec",
            "--json",
            "--repeat",
            "2",
            "--pause-ms",
            "1500",
            "--",
            "sh",
            "-c",
        ])
        .arg("echo ran >> runs")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(b.join("err.txt")).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_for_lines(&runs, 1, deadline);
    let spawner = spawner_between_commands(runtime.id(), deadline);
    let zygotes: Vec<u32> = children(spawner)
        .into_iter()
        .filter(|c| zygote(spawner, *c))
        .collect();
    assert_eq!(zygotes.len(), 1, "the first command's session's zygote");
    // SAFETY: kill of a process this test found and owns.
    assert_eq!(unsafe { libc::kill(spawner as i32, libc::SIGKILL) }, 0);
    let status = runtime.wait().unwrap();
    // The zygote dies with its spawner (its parent-death signal).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !zygotes.iter().all(|z| ended(*z)) {
        assert!(
            std::time::Instant::now() < deadline,
            "a zygote outlived its killed spawner"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let said = std::fs::read_to_string(&out).unwrap()
        + &std::fs::read_to_string(b.join("err.txt")).unwrap();
    assert!(status.success(), "{status:?}: {said}");
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "ran\nran\n",
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&b);
}

/// A session's next chain is made while its command runs, once that
/// command (itself from a chain) has exec'd, so a command that follows at
/// once finds it ready: seen from outside, while the second of three
/// commands runs, the spawner's children are that command's init, an idle
/// chain and the session's zygote, which cloned both. While the first runs (forked: its session is new, and its
/// chain is made when it ends) there is no chain beside it. All three run.
#[test]
fn the_next_chain_is_made_while_a_chained_command_runs() {
    let b = base("chain-beside");
    let seconds = format!("1.{:03}", std::process::id() % 1000);
    let mut runtime = shared::loop_in(&b)
        .current_dir(b.join("project"))
        .args(["exec", "--json", "--repeat", "3", "--", "sleep", &seconds])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let running = |not: Option<u32>| loop {
        if let Some(pid) = find_process(&["sleep", &seconds]).filter(|p| Some(*p) != not) {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "no command ran");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let kinds = |sleep: u32| {
        let chain = ancestry(sleep);
        // A chain's init is a clone of a fork of the spawner (its zygote),
        // a forked command's relay and init are forks of it: it is the
        // highest of them.
        let spawner = chain
            .iter()
            .rev()
            .find(|(_, a)| a.contains("__loop-spawner"))
            .map(|(p, _)| *p)
            .unwrap_or_else(|| panic!("no spawner above the command: {chain:?}"));
        let mut k: Vec<bool> = at_work(spawner).into_iter().map(idle_chain).collect();
        k.sort();
        k
    };
    let first = running(None);
    assert_eq!(kinds(first), [false], "beside the first command");
    let second = running(Some(first));
    // Made once the command has exec'd: a moment after it is seen.
    let soon = std::time::Instant::now() + std::time::Duration::from_millis(800);
    while kinds(second) != [false, true] && std::time::Instant::now() < soon {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        kinds(second),
        [false, true],
        "beside the second command: its init and a chain"
    );
    let spawner = ancestry(second)
        .iter()
        .rev()
        .find(|(_, a)| a.contains("__loop-spawner"))
        .map(|(p, _)| *p)
        .unwrap();
    let zygotes: Vec<u32> = children(spawner)
        .into_iter()
        .filter(|c| zygote(spawner, *c))
        .collect();
    assert_eq!(zygotes.len(), 1, "one session, one zygote");
    // The command's init and the chain's are the zygote's clones, with
    // the spawner as their parent: each in a PID namespace of its own.
    let inits: Vec<u32> = at_work(spawner);
    assert!(
        inits
            .iter()
            .all(|i| ns_of(*i, "user") == ns_of(zygotes[0], "user")
                && ns_of(*i, "pid") != ns_of(zygotes[0], "pid")),
        "{inits:?} {zygotes:?}"
    );
    let status = runtime.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&b);
}

/// Wait until `file` has `n` lines.
fn wait_for_lines(file: &Path, n: usize, deadline: std::time::Instant) {
    while std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .count()
        < n
    {
        assert!(std::time::Instant::now() < deadline, "no command ran");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The processes that have `parent` as theirs.
fn children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| ancestry(*pid).get(1).is_some_and(|(p, _)| *p == parent))
        .collect()
}

/// Whether `init` is a chain a spawner made ahead for its next command
/// (see `warm.rs`): its one child is a fork of the spawner still waiting
/// for its order (with no child), not a command that has run its program
/// (nor a forked command's relay, whose child is its init).
fn idle_chain(init: u32) -> bool {
    match children(init)[..] {
        [one] => ancestry(one)[0].1.contains("__loop-spawner") && children(one).is_empty(),
        _ => false,
    }
}

/// The namespace `name` process `pid` is in (0 once it is gone).
fn ns_of(pid: u32, name: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{name}")).map_or(0, |m| m.ino())
}

/// Whether `child`, a child of `spawner`, is a session's zygote (see
/// `warm.rs`): it stays in the session's mount namespace, in the
/// spawner's PID namespace (a command's init is in a new one), and has
/// no child (a forked command's relay, also in both, has its init).
fn zygote(spawner: u32, child: u32) -> bool {
    ns_of(child, "pid") == ns_of(spawner, "pid")
        && ns_of(child, "mnt") != ns_of(spawner, "mnt")
        && children(child).is_empty()
}

/// The children of `spawner` but its sessions' zygotes.
fn at_work(spawner: u32) -> Vec<u32> {
    children(spawner)
        .into_iter()
        .filter(|c| !zygote(spawner, *c))
        .collect()
}

/// The spawner of the runtime `runtime` (other tests run theirs
/// meanwhile), once nothing it forks (a command, or a maker of
/// namespaces, `spares.rs`) is at work but the chain made for the next
/// command: between two commands, the first having ended (its line is
/// written a moment before its processes end and are reaped).
fn spawner_between_commands(runtime: u32, deadline: std::time::Instant) -> u32 {
    let spawner = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let chain = ancestry(*pid);
            chain.len() > 1 && chain[0].1.contains("__loop-spawner") && chain[1].0 == runtime
        })
        .expect("the runtime's spawner");
    // Nothing at work but, once the first command has ended and been
    // reaped, the chain made for the next one (and its session's zygote).
    while !match at_work(spawner)[..] {
        [] => true,
        [one] => idle_chain(one),
        _ => false,
    } {
        assert!(
            std::time::Instant::now() < deadline,
            "the first command did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    spawner
}

/// Whether process `pid` is gone (reaped, not a zombie).
fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether process `pid` has ended: reaped, or a zombie (a process whose
/// parent died is reaped by whatever took it up, which may be slow to).
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        // After the command's name, in parentheses: its state.
        stat.rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .is_some_and(|state| state == "Z")
    })
}

/// A spawner that stops answering (stopped with SIGSTOP between two
/// commands) hangs nothing: the next command's order waits its answer
/// for `LOOP_SPAWNER_ANSWER_MS`, then the spawner is killed and reaped and
/// that command fails with an error naming the spawner; the runtime ends.
/// The honest run, the same two commands with the spawner left alone, runs
/// both (the killed-spawner test above: a dead spawner is replaced).
#[test]
fn a_spawner_that_stops_answering_is_killed_and_hangs_nothing() {
    let b = base("spawner-stopped");
    let runs = b.join("project").join("runs");
    let err = b.join("err.txt");
    let mut runtime = shared::loop_in(&b)
        .current_dir(b.join("project"))
        .env("LOOP_SPAWNER_ANSWER_MS", "400")
        .args(["exec", "--repeat", "2", "--pause-ms", "1500", "--"])
        .args(["sh", "-c", "echo ran >> runs"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_for_lines(&runs, 1, deadline);
    let spawner = spawner_between_commands(runtime.id(), deadline);
    let said = stop_and_see_it_killed(&mut runtime, spawner, &err, deadline);
    assert!(
        said.contains("the spawner did not answer within 400 ms"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "ran\n", "{said}");
    let _ = std::fs::remove_dir_all(&b);
}

/// A spawner that stops once its command runs: at the command's deadline
/// the runtime asks the spawner to kill it, hears nothing within
/// `LOOP_SPAWNER_ANSWER_MS`, kills the spawner, and the command dies with
/// it (its first process's parent-death signal); the runtime ends with an
/// error saying so. The honest run (`daemons_do_not_outlive_the_timeout`,
/// escape.rs): a command past its deadline is killed and reported timed out.
#[test]
fn a_command_past_its_deadline_dies_with_a_spawner_that_stopped_answering() {
    let b = base("spawner-stopped-deadline");
    let seconds = format!("77.{}", std::process::id() % 1000);
    let err = b.join("err.txt");
    let mut runtime = shared::loop_in(&b)
        .current_dir(b.join("project"))
        .env("LOOP_SPAWNER", "1")
        .env("LOOP_SPAWNER_ANSWER_MS", "400")
        .args(["exec", "--timeout", "3", "--", "sleep", &seconds])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let sleep = loop {
        if let Some(pid) = find_process(&["sleep", &seconds]) {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "no command ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // The runtime's child (the command's relay and init are forks of it,
    // with its arguments).
    let chain = ancestry(sleep);
    let spawner = chain
        .windows(2)
        .find(|w| w[0].1.contains("__loop-spawner") && w[1].0 == runtime.id())
        .map(|w| w[0].0)
        .unwrap_or_else(|| panic!("no spawner: {chain:?}"));
    let said = stop_and_see_it_killed(&mut runtime, spawner, &err, deadline);
    assert!(
        said.contains("the spawner did not answer within 400 ms once the command was to end"),
        "{said}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while find_process(&["sleep", &seconds]).is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command outlived its killed spawner"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&b);
}

/// Stop `spawner` (SIGSTOP), then: the runtime ends (not hanging on it)
/// with 125, and the spawner was killed and reaped. What the runtime said.
fn stop_and_see_it_killed(
    runtime: &mut std::process::Child,
    spawner: u32,
    err: &Path,
    deadline: std::time::Instant,
) -> String {
    // SAFETY: a signal to a process the test found.
    assert_eq!(unsafe { libc::kill(spawner as i32, libc::SIGSTOP) }, 0);
    let status = loop {
        if let Some(s) = runtime.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = runtime.kill();
            // SAFETY: as above.
            unsafe { libc::kill(spawner as i32, libc::SIGKILL) };
            panic!("the runtime hung on its stopped spawner");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let said = std::fs::read_to_string(err).unwrap();
    assert_eq!(status.code(), Some(125), "{said}");
    assert!(gone(spawner), "the stopped spawner was left behind");
    said
}
