//! # loop-sandbox
//!
//! Every command Loop Engine runs — the agent's `run_command` and every
//! verification check — goes through [`run`]. Today it gives each command
//! its own process group (the whole group is killed on timeout and after
//! the command exits, so background children cannot outlive it), a
//! parent-death signal, `stdin` from `/dev/null`, an allow-listed
//! environment (no API keys), no core dumps, and bounded head+tail capture
//! with a digest over every byte. It never waits forever on a grandchild
//! holding a pipe: draining is bounded after the kill.
//!
//! What is enforced is reported in [`Isolation`], never assumed: kernel
//! filesystem and network confinement (Landlock, namespaces, seccomp) are
//! reported as absent until they are applied.

mod capture;

pub use capture::Captured;
use loop_protocol::Isolation;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// `sh -c SCRIPT`: quotes, pipes and heredocs work.
    Shell(String),
    /// An argument vector, run directly.
    Argv(Vec<String>),
}

/// Network policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Net {
    /// No network (a fresh namespace with loopback only, once available).
    #[default]
    None,
    /// The host's network, an explicit opt-in.
    Host,
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The program.
    pub program: Program,
    /// Working directory.
    pub cwd: PathBuf,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Bytes kept per stream (head + tail); every byte is still hashed.
    pub max_output: usize,
    /// Network policy.
    pub net: Net,
    /// Extra environment variables (after scrubbing).
    pub env: Vec<(String, String)>,
}

impl ExecRequest {
    /// A shell command in `cwd` with defaults: 60 s, 64 KiB per stream, no network.
    pub fn shell(script: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        ExecRequest {
            program: Program::Shell(script.into()),
            cwd: cwd.into(),
            timeout: Duration::from_secs(60),
            max_output: 64 * 1024,
            net: Net::None,
            env: Vec::new(),
        }
    }
}

/// How a command ended.
#[derive(Debug, Clone)]
pub struct ExecResult {
    /// Exit status, if it exited.
    pub exit_code: Option<i32>,
    /// Terminating signal, if killed.
    pub signal: Option<i32>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Wall-clock duration, spawn to reap.
    pub duration: Duration,
    /// Captured stdout.
    pub stdout: Captured,
    /// Captured stderr.
    pub stderr: Captured,
    /// What was enforced.
    pub isolation: Isolation,
}

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Spawning failed.
    #[error("cannot start `{program}` in {cwd}: {source}")]
    Spawn {
        /// What was run.
        program: String,
        /// Where.
        cwd: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting failed.
    #[error("cannot wait for the command: {0}")]
    Wait(std::io::Error),
}

/// Variables passed through from the runtime's environment; everything
/// else (API keys, tokens, cloud credentials) is dropped.
pub const ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "RUSTUP_HOME",
    "CARGO_HOME",
    "RUSTUP_TOOLCHAIN",
    "JAVA_HOME",
    "GOROOT",
    "GOPATH",
];

/// How long to keep draining pipes after the command's group was killed.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Run one command and report how it ended and what was enforced.
pub fn run(req: &ExecRequest) -> Result<ExecResult, SandboxError> {
    let mut cmd = match &req.program {
        Program::Shell(script) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(script);
            c
        }
        Program::Argv(argv) => {
            let mut c = Command::new(argv.first().map(String::as_str).unwrap_or("true"));
            c.args(argv.iter().skip(1));
            c
        }
    };
    cmd.current_dir(&req.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .process_group(0);
    for key in ENV_ALLOW {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    // Interpreter caches written beside sources (e.g. `tests/__pycache__`)
    // would look like edits to protected paths, and a forged cache can
    // shadow a source file: commands do not write them.
    cmd.env("PYTHONDONTWRITEBYTECODE", "1");
    for (k, v) in &req.env {
        cmd.env(k, v);
    }
    // SAFETY: the closure runs in the forked child before exec and only
    // calls async-signal-safe libc functions (prctl, setrlimit).
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &no_core) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| SandboxError::Spawn {
        program: match &req.program {
            Program::Shell(s) => format!("sh -c {s:?}"),
            Program::Argv(a) => a.join(" "),
        },
        cwd: req.cwd.display().to_string(),
        source,
    })?;
    let pgid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel::<(u8, Captured)>();
    let max = req.max_output;
    if let Some(out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((1, Captured::read_all(out, max)));
        });
    }
    if let Some(err) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((2, Captured::read_all(err, max)));
        });
    }
    drop(tx);

    let deadline = started + req.timeout;
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                kill_group(pgid);
                return Err(SandboxError::Wait(e));
            }
        }
        if Instant::now() >= deadline {
            timed_out = true;
            kill_group(pgid);
            match child.wait() {
                Ok(status) => break status,
                Err(e) => return Err(SandboxError::Wait(e)),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let duration = started.elapsed();
    // Whatever the command left behind in its group dies with it.
    kill_group(pgid);

    let mut notes = Vec::new();
    let mut stdout = Captured::default();
    let mut stderr = Captured::default();
    let drain_deadline = Instant::now() + DRAIN_GRACE;
    for _ in 0..2 {
        let wait = drain_deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok((1, c)) => stdout = c,
            Ok((_, c)) => stderr = c,
            Err(_) => {
                notes.push(
                    "an output pipe was still held open by a detached process; draining stopped after 500 ms"
                        .to_string(),
                );
                break;
            }
        }
    }
    notes.push("no kernel filesystem or network confinement applied (Landlock, namespaces and seccomp are not enforced by this build)".to_string());
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        duration,
        stdout,
        stderr,
        isolation: Isolation {
            process_group: true,
            pid_namespace: false,
            landlock_abi: None,
            seccomp: false,
            network: match req.net {
                // Without a namespace the host network is what the command had.
                Net::None | Net::Host => "host".into(),
            },
            rlimits: vec!["core=0".into()],
            memory_cgroup: false,
            env_scrubbed: true,
            notes,
        },
    })
}

fn kill_group(pgid: libc::pid_t) {
    // SAFETY: killpg with a positive pgid we created; errors (ESRCH when the
    // group is already gone) are expected and ignored.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> ExecResult {
        let mut r = ExecRequest::shell(script, std::env::temp_dir());
        r.timeout = Duration::from_secs(5);
        run(&r).unwrap()
    }

    #[test]
    fn exit_codes_and_streams_are_captured() {
        let r = sh("echo out; echo err >&2; exit 3");
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.stdout.excerpt(), "out\n");
        assert_eq!(r.stderr.excerpt(), "err\n");
        assert!(!r.timed_out);
    }

    #[test]
    fn shell_quoting_pipes_and_heredocs_work() {
        let r = sh("printf '%s\\n' \"a b\" | tr a-z A-Z; cat <<'EOF'\nhere doc\nEOF");
        assert_eq!(r.stdout.excerpt(), "A B\nhere doc\n");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let marker = std::env::temp_dir().join(format!("loop-sbx-{}", std::process::id()));
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let mut r = ExecRequest::shell(script, std::env::temp_dir());
        r.timeout = Duration::from_millis(200);
        let t = Instant::now();
        let res = run(&r).unwrap();
        assert!(res.timed_out);
        assert_eq!(res.signal, Some(libc::SIGKILL));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(1300));
        assert!(
            !marker.exists(),
            "the background child must have died with the group"
        );
    }

    #[test]
    fn secrets_in_the_environment_do_not_reach_the_command() {
        // SAFETY: test-only; no other thread reads this variable.
        unsafe { std::env::set_var("LOOP_TEST_SECRET_API_KEY", "sk-should-not-leak") };
        let r = sh("env");
        assert!(!r.stdout.excerpt().contains("sk-should-not-leak"));
        assert!(r.stdout.excerpt().contains("PATH="));
        assert!(r.isolation.env_scrubbed);
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_panic() {
        let mut r = ExecRequest::shell("true", "/nonexistent/dir");
        r.program = Program::Argv(vec!["true".into()]);
        assert!(matches!(run(&r), Err(SandboxError::Spawn { .. })));
    }

    #[test]
    fn isolation_is_reported_honestly() {
        let r = sh("true");
        assert!(r.isolation.process_group);
        assert_eq!(r.isolation.landlock_abi, None);
        assert!(!r.isolation.pid_namespace);
        assert_eq!(r.isolation.network, "host");
    }
}
