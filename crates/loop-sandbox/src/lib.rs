//! # loop-sandbox
//!
//! Every command Loop Engine runs — the agent's `run_command`, every
//! verification check, `loop exec` — goes through [`run`]. On Linux, with
//! no container engine:
//!
//! - **lifetime**: its own session (no controlling terminal) and PID
//!   namespace (when init, PID 1 inside, exits, the kernel kills everything
//!   left, daemons included), parent-death signals, `stdin` from
//!   `/dev/null`, the caller's other descriptors closed, a timeout that
//!   kills the whole group, bounded draining afterwards;
//! - **privilege**: every capability given up (root's too), no setuid or
//!   setgid mode settable, writable mounts `nosuid,nodev`; its own IPC and
//!   cgroup namespaces;
//! - **resources**: rlimits for CPU, address space, open files, processes,
//!   file size and core dumps, and memory/pids cgroups where writable; a
//!   disk of its own (a capped tmpfs for its `/tmp` and its layer over the
//!   workspace); inotify and fanotify bounded in its user namespace;
//! - **filesystem**: Landlock — read-write to the workspace and a private
//!   tmp, read+execute to system trees and the toolchains behind `PATH`,
//!   nothing else; credential stores and `/etc/shadow` never; protected
//!   paths inside the workspace bound read-only;
//! - **network**: a fresh network namespace with only loopback, unless
//!   `--net host` is chosen (and recorded);
//! - **system calls**: a seccomp filter denying `ptrace`, `mount`, `bpf`,
//!   `io_uring`, `keyctl`, … and exotic socket families;
//! - **environment**: cleared, then an allow-list, `HOME` and `TMPDIR`
//!   private; secret-looking values redacted from recorded output.
//!
//! What was enforced is reported in [`Isolation`], layer by layer. With
//! [`IsolationLevel::Required`] a missing layer fails closed, naming it.
#![allow(clippy::disallowed_methods)] // the sandbox's internals: host trees, /proc, cgroups and its own private directories, never a project's files (workspace content is read by the runtime through loop_workspace::door)

mod capture;
mod cgroup;
pub mod check_env;
mod child;
pub mod confinement;
pub mod devtools;
pub mod egress;
mod fdpass;
mod kept;
mod landlock;
mod ordered;
mod pathcmp;
mod pipes;
pub mod probe;
pub mod pty;
pub mod redact;
pub mod root;
mod seccomp;
mod session;
mod spares;
pub mod spawner;
pub mod sweep;
mod warm;
mod wire;

pub use capture::Captured;
pub use confinement::{IsolationLevel, Limits};
use loop_protocol::Isolation;
pub use session::Session;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// `sh -c SCRIPT`: quotes, pipes and heredocs work.
    Shell(String),
    /// An argument vector, run directly (looked up on `PATH`).
    Argv(Vec<String>),
}

/// Network policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Net {
    /// A fresh network namespace with loopback only.
    #[default]
    None,
    /// The host's network: an explicit opt-in, recorded with the result.
    Host,
}

/// A name that is no network mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--net must be `none` or `host`, not `{0}`")]
pub struct UnknownNet(pub String);

impl std::str::FromStr for Net {
    type Err = UnknownNet;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Net::None),
            "host" => Ok(Net::Host),
            other => Err(UnknownNet(other.to_string())),
        }
    }
}

/// Which layers to apply. All on by default; turning one off is for
/// measurement and diagnosis, and is reported as not enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    /// PID, mount, network (and user) namespaces.
    pub namespaces: bool,
    /// The Landlock filesystem allow-list.
    pub landlock: bool,
    /// The seccomp filter.
    pub seccomp: bool,
    /// Memory and pids cgroups.
    pub cgroups: bool,
}

impl Default for Layers {
    fn default() -> Self {
        Layers {
            namespaces: true,
            landlock: true,
            seccomp: true,
            cgroups: true,
        }
    }
}

/// A layer name [`Layers::without`] does not know.
#[derive(Debug, thiserror::Error)]
#[error("unknown layer `{0}` (namespaces, landlock, seccomp, cgroups)")]
pub struct UnknownLayer(pub String);

impl Layers {
    /// Turn off the layer named `name` (`namespaces`, `landlock`, `seccomp`, `cgroups`).
    pub fn without(mut self, name: &str) -> Result<Self, UnknownLayer> {
        match name {
            "namespaces" => self.namespaces = false,
            "landlock" => self.landlock = false,
            "seccomp" => self.seccomp = false,
            "cgroups" => self.cgroups = false,
            other => return Err(UnknownLayer(other.to_string())),
        }
        Ok(self)
    }
}

/// How a component (the tools, the verifier) runs its commands: the
/// isolation level demanded and a flag that kills a running command.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Required or preferred.
    pub isolation: IsolationLevel,
    /// Set to kill the running command's tree.
    pub cancel: Option<Arc<AtomicBool>>,
    /// When the task's wall-time budget runs out: no command runs past it,
    /// whatever its own timeout.
    pub deadline: Option<Instant>,
    /// Milliseconds the deadline has moved since it was set (time a task
    /// paused for a person, with `checkpoints.pause_clock`).
    pub paused_ms: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// The git directory of the repository a worktree workspace belongs
    /// to: shown read-only (its config reduced to `[core]` and
    /// `[extensions]`, so no credential in a remote URL is readable), so
    /// `git status`, `diff` and `log` work; nothing in it is writable.
    pub git_dir: Option<PathBuf>,
    /// Dependency environments shown inside the workspace (see
    /// [`Share`]). They need a mount namespace; without one the request is
    /// refused.
    pub shares: Vec<Share>,
    /// More host trees shown read-only at their own paths (the
    /// interpreters shared environments link to, toolchain caches).
    pub read_only_trees: Vec<PathBuf>,
    /// Variables set for every command (after scrubbing): where the
    /// toolchain caches shown read-only are (`CARGO_HOME`, `GOMODCACHE`).
    pub env: Vec<(String, String)>,
    /// Hosts commands may reach through the runtime's egress proxy (see
    /// [`egress`]); `None` is no network at all.
    pub egress: Option<egress::Egress>,
    /// More paths at which the command sees its workspace (the path a
    /// cached setup layer was built at: its absolute paths name it).
    pub workspace_aliases: Vec<PathBuf>,
    /// What one command may write, in MiB (see [`Limits::disk_mb`]);
    /// `None` keeps the request's own.
    pub disk_mb: Option<u64>,
}

/// A dependency environment of the project shown inside the workspace at
/// the same relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The host directory.
    pub host: PathBuf,
    /// Its path relative to the workspace, `/`-separated.
    pub rel: String,
    /// How the command sees it.
    pub access: ShareAccess,
    /// Directories directly inside a read-only share that its tools write
    /// as caches (`node_modules/.vite`, `.cache`): writable, each fresh and
    /// private to the command (on its disk, counted against its limit),
    /// so a cache carries nothing from one command to another or into a
    /// check; everything else in the share stays read-only. Each is one
    /// plain name.
    pub caches: Vec<String>,
    /// Files of the share that name the project's directory (an editable
    /// install's `.pth`, its import finder): each command sees them with
    /// that directory replaced by its own workspace (read-only, in its
    /// private directory), so the install imports the task's code.
    pub repoint: Vec<Repoint>,
}

/// A file of a [`Share`] shown with one directory named in it replaced by
/// the command's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repoint {
    /// The file, relative to the share, `/`-separated plain names.
    pub rel: String,
    /// Its text.
    pub text: String,
    /// The directory it names (the project's), replaced where it stands
    /// as a whole path or the start of one.
    pub from: String,
}

impl Repoint {
    /// The text with `from` replaced by `to` wherever it is a whole path
    /// or a path's start (after a quote, a blank or a line's start; before
    /// `/`, a quote, a blank or a line's end).
    pub fn text_for(&self, to: &str) -> String {
        let mut out = String::with_capacity(self.text.len());
        let mut rest = self.text.as_str();
        let before_ok = |c: Option<char>| {
            c.is_none_or(|c| matches!(c, '\'' | '"' | ' ' | '\t' | '\n' | '\r' | '=' | ':' | ','))
        };
        let after_ok = |c: Option<char>| {
            c.is_none_or(|c| matches!(c, '/' | '\'' | '"' | ' ' | '\t' | '\n' | '\r' | ':' | ','))
        };
        while let Some(at) = rest.find(self.from.as_str()) {
            let prev = if at == 0 {
                out.chars().last()
            } else {
                rest[..at].chars().last()
            };
            let next = rest[at + self.from.len()..].chars().next();
            out.push_str(&rest[..at]);
            if !self.from.is_empty() && before_ok(prev) && after_ok(next) {
                out.push_str(to);
            } else {
                out.push_str(&self.from);
            }
            rest = &rest[at + self.from.len().max(1)..];
            if self.from.is_empty() {
                break;
            }
        }
        out.push_str(rest);
        out
    }
}

/// How a command sees a [`Share`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareAccess {
    /// Bound read-only: usable, never changed.
    ReadOnly,
    /// Copy-on-write: an overlay whose lower layer is the host directory
    /// (never written) and whose writes land in an upper layer. With
    /// `keep`, that layer lives under `keep` and outlasts the command (a
    /// task's build outputs, so incremental builds stay fast); without, or
    /// for an acceptance check whatever `keep` says, it is fresh and
    /// private to the command: a check never sees what a task wrote there.
    Overlay {
        /// Where the upper layer is kept (`upper/`, `work/` under it).
        keep: Option<PathBuf>,
    },
}

impl Settings {
    /// Apply to a request (after its own timeout is set: the deadline caps it).
    pub fn apply(&self, req: &mut ExecRequest) {
        req.isolation = self.isolation;
        req.cancel = self.cancel.clone();
        req.git_dir = self.git_dir.clone();
        req.shares = self.shares.clone();
        req.read_only_trees = self.read_only_trees.clone();
        req.egress = self.egress.clone();
        req.workspace_aliases = self.workspace_aliases.clone();
        if let Some(mb) = self.disk_mb {
            req.limits.disk_mb = mb;
        }
        for (k, v) in &self.env {
            if !req.env.iter().any(|(have, _)| have == k) {
                req.env.push((k.clone(), v.clone()));
            }
        }
        if let Some(d) = self.deadline {
            let moved = self
                .paused_ms
                .as_ref()
                .map_or(0, |p| p.load(Ordering::SeqCst));
            let d = d + Duration::from_millis(moved);
            req.timeout = req.timeout.min(d.saturating_duration_since(Instant::now()));
        }
    }
}

/// Default bound on captured output, both streams together.
pub const DEFAULT_MAX_OUTPUT: usize = 2 * 1024 * 1024;

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The program.
    pub program: Program,
    /// Working directory (inside the workspace).
    pub cwd: PathBuf,
    /// The read-write root; defaults to `cwd`.
    pub workspace: Option<PathBuf>,
    /// Existing paths inside the workspace to make read-only.
    pub read_only_paths: Vec<PathBuf>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Bytes kept of stdout and stderr together (head + tail of each); every byte is hashed.
    pub max_output: usize,
    /// Network policy.
    pub net: Net,
    /// Resource limits.
    pub limits: Limits,
    /// The memory limit was asked for explicitly: under
    /// [`IsolationLevel::Required`] it must be enforced for the whole
    /// command (a memory cgroup), not per process only (RLIMIT_AS).
    pub memory_required: bool,
    /// How to treat missing kernel features.
    pub isolation: IsolationLevel,
    /// Layers to apply.
    pub layers: Layers,
    /// When set, the command's whole tree is killed within 50 ms.
    pub cancel: Option<Arc<AtomicBool>>,
    /// When set, the workspace is seen through an overlay whose upper layer
    /// lives in this (empty, private) directory: the command may write, the
    /// workspace itself never changes. Needs namespaces; see [`overlay_available`].
    pub overlay_scratch: Option<PathBuf>,
    /// With [`ExecRequest::overlay_scratch`]: directories shown under the
    /// workspace in its overlay, never written (lower layers below it):
    /// what the workspace holds wins, they only fill in what it lacks (the
    /// build outputs a check made of the untouched project, see
    /// `loop_verifier`). One that is not a real directory is left out.
    pub overlay_below: Vec<PathBuf>,
    /// Extra environment variables (after scrubbing).
    pub env: Vec<(String, String)>,
    /// A repository's git directory to show read-only (see [`Settings::git_dir`]).
    pub git_dir: Option<PathBuf>,
    /// The command is an acceptance check: its interpreters are run so
    /// that they find their own libraries and tools before anything in the
    /// workspace (see [`check_env`]); what was imposed is reported in
    /// [`ExecResult::env_imposed`].
    pub check: bool,
    /// Dependency environments shown inside the workspace (see
    /// [`Settings::shares`]).
    pub shares: Vec<Share>,
    /// More host trees shown read-only (see [`Settings::read_only_trees`]).
    pub read_only_trees: Vec<PathBuf>,
    /// Hosts the command may reach through the egress proxy, with
    /// [`Net::None`] (see [`egress`]).
    pub egress: Option<egress::Egress>,
    /// More paths the workspace is shown at (see
    /// [`Settings::workspace_aliases`]); needs a mount namespace.
    pub workspace_aliases: Vec<PathBuf>,
    /// The workspace is seen read-only (bound read-only in the mount
    /// namespace, and read-only to Landlock): what the process writes
    /// lands only in its private tmp. For a long-lived helper (an MCP
    /// server) whose writes could not be judged as a command's are.
    pub workspace_read_only: bool,
    /// Take `PATH`, `LANG`, `TZ`, `TERM` and the toolchain variables from
    /// this process (the default). Without, the environment is only a
    /// fixed `PATH` (`/usr/local/bin:/usr/bin:/bin`), `HOME`, `TMPDIR` and
    /// [`ExecRequest::env`]: nothing of the host's reaches the process.
    pub host_env: bool,
    /// With [`ExecRequest::overlay_scratch`]: what the command wrote over
    /// the workspace (an overlay's upper layer, on the command's capped
    /// disk) is handed back in [`ExecResult::layer`] once it has ended.
    /// Without, it is thrown away with the command.
    pub keep_writes: bool,
    /// Run the command on a pseudo-terminal the runtime owns (see [`pty`]),
    /// for a command that will not run without a terminal: its standard
    /// input, output and error are that terminal, its output (both
    /// streams, as one) is captured as `stdout`. Never the caller's
    /// terminal. Not for a [`spawn`]ed session.
    pub terminal: bool,
}

/// The `PATH` of a process that takes nothing from the host's environment.
pub const FIXED_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

impl ExecRequest {
    /// A shell command in `cwd` with defaults: 60 s, 2 MiB of output, no
    /// network, default limits, isolation preferred.
    pub fn shell(script: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        Self::new(Program::Shell(script.into()), cwd)
    }

    /// A program with defaults as for [`ExecRequest::shell`].
    pub fn new(program: Program, cwd: impl Into<PathBuf>) -> Self {
        ExecRequest {
            program,
            cwd: cwd.into(),
            workspace: None,
            read_only_paths: Vec::new(),
            timeout: Duration::from_secs(60),
            max_output: DEFAULT_MAX_OUTPUT,
            net: Net::None,
            limits: Limits::default(),
            memory_required: false,
            isolation: IsolationLevel::Preferred,
            layers: Layers::default(),
            cancel: None,
            overlay_scratch: None,
            overlay_below: Vec::new(),
            env: Vec::new(),
            check: false,
            git_dir: None,
            shares: Vec::new(),
            read_only_trees: Vec::new(),
            egress: None,
            workspace_aliases: Vec::new(),
            workspace_read_only: false,
            host_env: true,
            keep_writes: false,
            terminal: false,
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
    /// Whether a cancel request killed it.
    pub cancelled: bool,
    /// Wall-clock duration, spawn to reap.
    pub duration: Duration,
    /// Captured stdout.
    pub stdout: Captured,
    /// Captured stderr.
    pub stderr: Captured,
    /// What was enforced.
    pub isolation: Isolation,
    /// Environment imposed on a check (`NAME=value`), see [`ExecRequest::check`].
    pub env_imposed: Vec<String>,
    /// What the command wrote over its workspace, when the request kept it
    /// (see [`ExecRequest::keep_writes`]).
    pub layer: Option<Layer>,
    /// The command's writes filled its disk ([`Limits::disk_mb`]): what
    /// it wrote past that failed with "No space left on device".
    pub disk_full: bool,
    /// Bytes the command's disk held at its end (its layers over the
    /// workspace and the shares, and its `/tmp`): what it wrote that it did
    /// not remove, counted against a task's [`Limits::disk_mb`]-per-command
    /// and its total of writes. 0 where it had no disk of its own.
    pub disk_used: u64,
    /// Writes to shares whose layer is kept between commands that were
    /// not kept, each with why (the task's kept layers would pass
    /// [`Limits::disk_mb`], or the merge failed).
    pub not_kept: Vec<String>,
}

/// A command's layer over its workspace, on its disk: a tmpfs in the
/// command's mount namespace, gone with it but for this descriptor, which
/// keeps it readable (and its memory held) until the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Layer(Arc<OwnedFd>);

impl Layer {
    /// The overlay's upper layer, as a path this process can read while
    /// the layer is held (`/proc/self/fd/N/upper`): whiteouts and opaque
    /// directories as overlayfs writes them.
    pub fn upper(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/upper", self.0.as_raw_fd()))
    }
}

/// The command could not be run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Spawning failed.
    #[error("cannot start `{program}` in {cwd}: {step}{source}")]
    Spawn {
        /// What was run.
        program: String,
        /// Where.
        cwd: String,
        /// The sandbox step that failed, if it was one.
        step: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting failed.
    #[error("cannot wait for the command: {0}")]
    Wait(std::io::Error),
    /// `isolation: required` and a layer is missing.
    #[error("isolation is required but unavailable: {missing}. {how}")]
    Unavailable {
        /// The missing layers.
        missing: String,
        /// How to enable them.
        how: String,
    },
    /// Preparing the sandbox failed.
    #[error("cannot prepare the sandbox: {0}")]
    Prepare(String),
    /// The command's own root could not be planned.
    #[error("cannot prepare the sandbox: {0}")]
    Root(#[from] root::RootError),
    /// The command ran, but what it wrote could not be kept.
    #[error("the command ran, but its writes could not be kept: {0}")]
    Keep(std::io::Error),
}

impl SandboxError {
    /// Whether the command could not start for a passing reason of the
    /// machine (EAGAIN, ETXTBSY, EMFILE, ENFILE, EINTR): worth a retry.
    pub fn is_transient(&self) -> bool {
        let errno = match self {
            SandboxError::Spawn { source, .. } | SandboxError::Wait(source) => {
                source.raw_os_error()
            }
            _ => None,
        };
        matches!(
            errno,
            Some(libc::EAGAIN | libc::ETXTBSY | libc::EMFILE | libc::ENFILE | libc::EINTR)
        )
    }
}

/// Variables passed through from the runtime's environment (plus every `LC_*`).
pub const ENV_ALLOW: &[&str] = &["PATH", "LANG", "TZ", "TERM"];

/// How long to keep draining pipes after the command's group was killed.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The seccomp filters, compiled once per process, in installation order.
type Filters = Vec<Vec<libc::sock_filter>>;

fn seccomp_program() -> &'static Result<Filters, seccompiler::BackendError> {
    static P: OnceLock<Result<Filters, seccompiler::BackendError>> = OnceLock::new();
    P.get_or_init(|| {
        seccomp::programs().map(|programs| {
            programs
                .into_iter()
                .map(|p| {
                    p.into_iter()
                        .map(|f| libc::sock_filter {
                            code: f.code,
                            jt: f.jt,
                            jf: f.jf,
                            k: f.k,
                        })
                        .collect()
                })
                .collect()
        })
    })
}

static OVERLAY_OK: OnceLock<bool> = OnceLock::new();

/// What [`overlay_available`] found, if it was asked already in this
/// process (asking starts a sandboxed command; this never does).
pub fn overlay_known() -> Option<bool> {
    OVERLAY_OK.get().copied()
}

/// Whether commands can see a workspace through an overlay here (tried
/// once per process with a real sandboxed command).
pub fn overlay_available() -> bool {
    *OVERLAY_OK.get_or_init(|| {
        let Ok(dir) = PrivateTmp::create(false) else {
            return false;
        };
        let lower = dir.tmp().join("lower");
        if std::fs::create_dir(&lower).is_err() || std::fs::write(lower.join("f"), "x").is_err() {
            return false;
        }
        let mut req = ExecRequest::shell("echo y > f && test \"$(cat f)\" = y", &lower);
        req.overlay_scratch = Some(dir.tmp().join("overlay"));
        req.timeout = Duration::from_secs(10);
        // The probe tests overlays, not cgroups (whose join can be slow).
        req.layers.cgroups = false;
        let ran = matches!(run(&req), Ok(r) if r.exit_code == Some(0));
        ran && std::fs::read(lower.join("f")).is_ok_and(|b| b == b"x")
    })
}

/// A tmpfs this user may make private directories in, if the machine has
/// one: `$XDG_RUNTIME_DIR` (the user's own, mode 0700), else `/dev/shm`.
/// Found once per process.
///
/// A command with namespaces never writes into its private directory (its
/// `/tmp` is its own disk, mounted in its namespace): the directory holds
/// only mount points and the few small files the runtime prepares. On a
/// disk-backed `/tmp` each of its directories costs a block, and freeing
/// those blocks on a filesystem mounted with `discard` waits for the
/// device: about 0.4 ms a command on this project's machine, for nothing.
pub fn scratch_tmpfs() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
        runtime
            .into_iter()
            .filter(|p| p.is_absolute() && owned_private(p))
            .chain([PathBuf::from("/dev/shm")])
            .find(|p| is_tmpfs(p) && writable(p))
    })
    .as_deref()
}

/// `path` is a directory of this user's that no one else may enter.
fn owned_private(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o077 == 0)
}

fn is_tmpfs(path: &Path) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs into a zeroed struct with a NUL-terminated path.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as libc::c_long == TMPFS_MAGIC
    }
}

fn writable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access on a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// A private directory for one command: its `TMPDIR` and `HOME`, and the
/// parts its root is built from (see [`root::Private`]).
struct PrivateTmp(root::Private);

impl PrivateTmp {
    /// `small`: the command never writes into it (it has namespaces, so
    /// its `/tmp` is its own disk); then it goes on a tmpfs where there is
    /// one (see [`scratch_tmpfs`]), else in the system's temporary
    /// directory.
    fn create(small: bool) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let under = match small.then(scratch_tmpfs).flatten() {
            Some(t) => t.to_path_buf(),
            None => std::env::temp_dir(),
        };
        // A process killed mid-command leaves its directory behind, and pids
        // are reused: names are random, and an existing one is never reused.
        let mut tries = 0;
        loop {
            let dir = under.join(unique_name("loop-sbx")?);
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let mut p = root::Private::under(dir);
                    let mut b = std::fs::DirBuilder::new();
                    b.mode(0o700);
                    b.create(&p.tmp)?;
                    b.create(p.tmp.join("home"))?;
                    b.create(&p.disk)?;
                    let shared = root_dirs(under.clone())?;
                    p.staging = shared.staging;
                    p.empty = shared.empty;
                    p.mask = shared.mask;
                    p.root_base = shared.root_base;
                    return Ok(PrivateTmp(p));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory that becomes the command's `/tmp`.
    fn tmp(&self) -> &Path {
        &self.0.tmp
    }
}

/// The directories every command's root is staged in and built from
/// (`staging`, `empty`, `mask` of [`root::Private`]), one set per runtime
/// process and place, so that what its commands' roots share is named
/// alike (see `warm.rs`). Made again if something removed them; removed
/// at the process's exit (a killed process's are swept, as a command's).
fn root_dirs(under: PathBuf) -> std::io::Result<root::Private> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    static DIRS: Mutex<Vec<(PathBuf, root::Private)>> = Mutex::new(Vec::new());
    extern "C" fn remove_at_exit() {
        if let Ok(dirs) = DIRS.try_lock() {
            for (_, d) in dirs.iter() {
                let _ = std::fs::remove_dir_all(&d.root_base);
            }
        }
    }
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = dirs.iter().find(|(u, _)| *u == under)
        && d.staging.is_dir()
        && d.empty.is_dir()
        && std::fs::symlink_metadata(&d.mask).is_ok_and(|m| m.is_file())
    {
        return Ok(d.clone());
    }
    let base = under.join(unique_name("loop-sbx")?);
    std::fs::DirBuilder::new().mode(0o700).create(&base)?;
    let d = root::Private::under(base);
    let mut b = std::fs::DirBuilder::new();
    b.mode(0o755);
    b.create(&d.staging)?;
    b.create(&d.empty)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(&d.mask)?;
    if dirs.is_empty() {
        // SAFETY: registering a plain function to run at exit.
        unsafe { libc::atexit(remove_at_exit) };
    }
    dirs.retain(|(u, _)| *u != under);
    dirs.push((under, d.clone()));
    Ok(d)
}

/// `PREFIX-<pid>-<seq>-<16 random hex digits>`: unique even across pid
/// reuse. Fails, rather than naming everything alike, when the system's
/// random source does.
pub fn unique_name(prefix: &str) -> std::io::Result<String> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let rnd = loop_protocol::random::hex::<8>().map_err(std::io::Error::other)?;
    Ok(format!(
        "{prefix}-{}-{}-{rnd}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
    ))
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0.base);
    }
}

fn cstring(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Prepare(format!("path {} contains a NUL byte", p.display())))
}

/// Mount flags a read-only bind of `path` must keep (a user namespace may
/// not drop them).
pub(crate) fn locked_flags(path: &Path) -> libc::c_ulong {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs into a zeroed struct with a NUL-terminated path.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return 0;
        }
        let mut flags = 0;
        for (st_flag, ms_flag) in [
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (libc::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if st.f_flag & st_flag != 0 {
                flags |= ms_flag;
            }
        }
        flags
    }
}

/// Run one command and report how it ended and what was enforced.
///
/// The first attempt assumes the kernel offers every layer; if a sandbox
/// step fails, the machine is probed once and the command runs again with
/// what is really there (or fails closed under `required`).
pub fn run(req: &ExecRequest) -> Result<ExecResult, SandboxError> {
    with_support(|support| run_with(req, support))
}

/// Start `req` as a long-lived process in its sandbox, talking over its
/// standard input and output (see [`Session`]). Every layer is as for
/// [`run`]; its timeout bounds the CPU time it may use.
pub fn spawn(req: &ExecRequest) -> Result<Session, SandboxError> {
    with_support(|support| launch(req, support, true)).map(Session::new)
}

/// Call `f` with what the kernel offers: optimistically first; if a
/// sandbox step fails, probe the machine once and call again with what is
/// really there.
fn with_support<T>(
    f: impl Fn(&probe::Support) -> Result<T, SandboxError>,
) -> Result<T, SandboxError> {
    static PROBED: AtomicBool = AtomicBool::new(false);
    let optimistic = probe::optimistic();
    let mut tries = 0u64;
    loop {
        let support = if PROBED.load(Ordering::Relaxed) {
            probe::support()
        } else {
            &optimistic
        };
        match f(support) {
            // Resources the kernel frees asynchronously (namespaces being torn
            // down, a cgroup being emptied) can be briefly exhausted under
            // load: try again before concluding anything about the machine.
            Err(SandboxError::Spawn { step, source, .. })
                if step.starts_with("sandbox step") && transient(&source) && tries < 4 =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(25 * tries));
            }
            Err(SandboxError::Spawn { step, .. })
                if step.starts_with("sandbox step") && !PROBED.load(Ordering::Relaxed) =>
            {
                PROBED.store(true, Ordering::Relaxed);
            }
            other => return other,
        }
    }
}

/// Errors that say "not now" rather than "not here".
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN | libc::ENOMEM | libc::ENOSPC | libc::EBUSY | libc::EINTR)
    )
}

/// What one request prepares before the fork, layer by layer: which layers
/// are on, what is said about those that are not, and what each needs.
struct Prepared {
    workspace: PathBuf,
    tmp: PrivateTmp,
    use_ns: bool,
    userns: bool,
    /// A worktree's repository and a reduced config for it.
    git_view: Option<(PathBuf, PathBuf)>,
    landlock: Option<landlock::Prepared>,
    seccomp: Option<Filters>,
    /// Destroyed on every way out once created (see [`run_with`]).
    cgroups: cgroup::Cgroups,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t, String)>,
    notes: Vec<String>,
    /// The socket pair the child sends the egress proxy's listening socket
    /// over: (the runtime's end, the child's).
    proxy_pair: Option<(OwnedFd, OwnedFd)>,
    /// The egress proxy serving the running command.
    proxy: Option<egress::Proxy>,
    /// The size of the command's disk, when it has one.
    disk_mb: Option<u64>,
    /// The socket pair the child sends its disk's descriptor over: (the
    /// runtime's end, the child's).
    disk_pair: Option<(OwnedFd, OwnedFd)>,
    /// The command's disk, as the runtime holds it (see `fdpass.rs`).
    disk_fd: Option<OwnedFd>,
    /// Its overlay's layers are on the disk (else under the scratch
    /// directory, on the host's disk).
    layers_on_disk: bool,
    /// Shares whose writes are merged into their kept layer after the
    /// command (see `kept.rs`).
    kept_merges: Vec<kept::Pending>,
    /// The pseudo-terminal the runtime made for it (see [`pty`]).
    terminal: Option<pty::Terminal>,
}

impl Prepared {
    /// What was enforced, as the evidence records it.
    fn isolation(
        &self,
        landlock_abi: Option<u32>,
        network: &str,
        egress: Vec<loop_protocol::evidence::EgressAttempt>,
    ) -> Isolation {
        Isolation {
            process_group: true,
            pid_namespace: self.use_ns,
            mount_namespace: self.use_ns,
            user_namespace: self.userns,
            ipc_namespace: self.use_ns,
            cgroup_namespace: self.use_ns,
            no_terminal: true,
            runtime_terminal: false,
            no_capabilities: true,
            disk_mb: self.disk_mb,
            landlock_abi,
            seccomp: self.seccomp.is_some(),
            network: network.into(),
            rlimits: self.rlimits.iter().map(|(_, _, s)| s.clone()).collect(),
            memory_cgroup: self.cgroups.memory,
            pids_cgroup: self.cgroups.pids,
            env_scrubbed: true,
            notes: self.notes.clone(),
            egress,
        }
    }
}

type SpawnErr<'a> = &'a dyn Fn(String, std::io::Error) -> SandboxError;

/// Landlock rules for the view, the workspace, the private tmp and a
/// worktree's repository (trees the command's root overlays get their
/// rules inside the child).
fn landlock_for(
    view: &'static confinement::HostView,
    (workspace, workspace_read_only): (&Path, bool),
    tmp: &PrivateTmp,
    git_view: &Option<(PathBuf, PathBuf)>,
    extra: &[PathBuf],
    overlays: bool,
) -> Result<Option<landlock::Prepared>, SandboxError> {
    let (writable, read_only): (Vec<PathBuf>, Vec<PathBuf>) = if workspace_read_only {
        (vec![tmp.tmp().to_path_buf()], vec![workspace.to_path_buf()])
    } else {
        (
            vec![workspace.to_path_buf(), tmp.tmp().to_path_buf()],
            Vec::new(),
        )
    };
    landlock::prepare(
        view,
        &writable,
        &git_view
            .iter()
            .flat_map(|(d, c)| [d.clone(), c.clone()])
            .chain(extra.iter().cloned())
            .chain(read_only)
            .collect::<Vec<_>>(),
        overlays,
    )
}

/// Decide and prepare every layer for `req`; with `required` isolation, a
/// layer this machine cannot give is an error naming it and how to get it.
fn prepare(
    req: &ExecRequest,
    support: &probe::Support,
    view: &'static confinement::HostView,
    trace: &Trace,
    spawn_err: SpawnErr<'_>,
) -> Result<Prepared, SandboxError> {
    let workspace = req
        .workspace
        .clone()
        .unwrap_or_else(|| req.cwd.clone())
        .canonicalize()
        .map_err(|e| spawn_err("workspace: ".into(), e))?;
    let mut notes = disabled_layers(req.layers);
    let mut missing = Vec::new();
    let layers = req.layers;
    let use_ns = support.namespaces && layers.namespaces;
    let tmp = PrivateTmp::create(use_ns).map_err(|e| spawn_err("private tmp: ".into(), e))?;
    if !use_ns {
        missing.push("namespaces (pid, mount, net)");
        refuse_without_namespaces(req)?;
    }
    let git_view = git_view_for(req, use_ns, &tmp, spawn_err)?;
    let landlock = match support.landlock_abi > 0 && layers.landlock {
        true => landlock_for(
            view,
            (&workspace, req.workspace_read_only),
            &tmp,
            &git_view,
            &req.read_only_trees,
            use_ns && support.tree_overlay,
        )?,
        false => None,
    };
    if landlock.is_none() {
        missing.push("Landlock");
    }
    trace.mark("landlock");
    let seccomp = match (support.seccomp && layers.seccomp, seccomp_program()) {
        (true, Ok(p)) => Some(p.clone()),
        (true, Err(e)) => return Err(SandboxError::Prepare(format!("seccomp: {e}"))),
        (false, _) => {
            missing.push("seccomp");
            None
        }
    };
    let mem_bytes = req.limits.mem_mb.saturating_mul(1024 * 1024);
    let mut cgroups = if layers.cgroups {
        cgroup::Cgroups::create(mem_bytes, req.limits.nproc)
    } else {
        cgroup::Cgroups::default()
    };
    trace.mark("cgroups");
    refuse_if_required(req, &mut cgroups, &missing)?;
    note_what_is_missing(&mut notes, &cgroups, &missing, use_ns);
    let rlimits = rlimits_for(req, (cgroups.memory, cgroups.swap_bounded), mem_bytes);
    if support.root {
        notes.push(
            "running as root: RLIMIT_NPROC does not bind root; the pids cgroup limits processes"
                .into(),
        );
    }
    Ok(Prepared {
        workspace,
        tmp,
        use_ns,
        userns: use_ns && support.userns,
        git_view,
        landlock,
        seccomp,
        cgroups,
        rlimits,
        notes,
        proxy_pair: None,
        proxy: None,
        disk_mb: None,
        disk_pair: None,
        disk_fd: None,
        layers_on_disk: false,
        kept_merges: Vec::new(),
        terminal: None,
    })
}

/// The notes saying which layers the request turned off.
fn disabled_layers(layers: Layers) -> Vec<String> {
    let mut notes = Vec::new();
    for (on, name) in [
        (layers.namespaces, "namespaces"),
        (layers.landlock, "landlock"),
        (layers.seccomp, "seccomp"),
        (layers.cgroups, "cgroups"),
    ] {
        if !on {
            notes.push(format!("{name} disabled by request"));
        }
    }
    notes
}

/// Without namespaces: refuse what only they can give (declared egress,
/// the workspace shown at an alias, a shared environment).
fn refuse_without_namespaces(req: &ExecRequest) -> Result<(), SandboxError> {
    if req.egress.is_some() && req.net == Net::None {
        return Err(SandboxError::Prepare(
            "declared egress needs a network namespace, which is unavailable here: without one the allow-list could not be enforced".into(),
        ));
    }
    if let Some(alias) = req.workspace_aliases.first() {
        return Err(SandboxError::Prepare(format!(
            "showing the workspace at {} (where its setup layer was built) needs a mount namespace, which is unavailable here",
            alias.display()
        )));
    }
    if let Some(share) = req.shares.first() {
        return Err(SandboxError::Prepare(format!(
            "the shared environment `{}` needs a mount namespace, which is unavailable here",
            share.rel
        )));
    }
    Ok(())
}

/// A worktree's repository, read-only, with a config that names no
/// remote (a URL may carry a token): (its directory, the reduced config
/// written in the private directory).
fn git_view_for(
    req: &ExecRequest,
    use_ns: bool,
    tmp: &PrivateTmp,
    spawn_err: SpawnErr<'_>,
) -> Result<Option<(PathBuf, PathBuf)>, SandboxError> {
    Ok(match (&req.git_dir, use_ns) {
        (Some(dir), true) if dir.is_dir() => {
            let reduced = tmp.0.base.join("gitconfig");
            let text = std::fs::read_to_string(dir.join("config")).unwrap_or_default();
            std::fs::write(&reduced, git_config_core(&text))
                .map_err(|e| spawn_err("git config view: ".into(), e))?;
            Some((dir.clone(), reduced))
        }
        _ => None,
    })
}

/// With `required` isolation: refuse (destroying the cgroups) when the
/// `--mem` limit needs a memory cgroup there is none of, or a layer is
/// `missing`.
fn refuse_if_required(
    req: &ExecRequest,
    cgroups: &mut cgroup::Cgroups,
    missing: &[&str],
) -> Result<(), SandboxError> {
    if req.isolation == IsolationLevel::Required && req.memory_required && !cgroups.memory {
        cgroups.destroy();
        return Err(SandboxError::Unavailable {
            missing: "a memory cgroup (the --mem limit would bind each process alone, not the command)".into(),
            how: "Run as a user with a writable memory cgroup (root here, or a delegated cgroup v2 subtree), or use --isolation preferred, which says the limit is per process.".into(),
        });
    }
    // Cgroups are used where the machine offers writable ones; their absence
    // is said in the notes, not treated as a missing layer (rlimits still bound
    // memory and processes), so `required` stays usable without root.
    if req.isolation == IsolationLevel::Required && !missing.is_empty() {
        cgroups.destroy();
        return Err(SandboxError::Unavailable {
            missing: missing.join(", "),
            how: "Enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0), Landlock in the kernel's LSM list (boot with lsm=landlock,…) and seccomp; `loop doctor` shows what this machine has.".into(),
        });
    }
    Ok(())
}

/// The notes on what runs without: the cgroups' own, the layers
/// `missing`, and no namespaces.
fn note_what_is_missing(
    notes: &mut Vec<String>,
    cgroups: &cgroup::Cgroups,
    missing: &[&str],
    use_ns: bool,
) {
    notes.extend(cgroups.notes.iter().cloned());
    if !missing.is_empty() {
        notes.push(format!(
            "isolation preferred: running without {}",
            missing.join(", ")
        ));
    }
    if !use_ns {
        notes.push("no PID, mount or network namespace: daemons may outlive the command and the network is the host's".into());
    }
}

/// The child's plan: namespaces, maps, cgroups to join, binds, the root
/// built from what the command may use (see `root.rs`), rlimits, Landlock,
/// seccomp. Whether the command runs inside its own root comes back too.
fn child_plan(
    req: &ExecRequest,
    support: &probe::Support,
    view: &confinement::HostView,
    p: &mut Prepared,
    diag_fd: std::os::fd::RawFd,
    spawn_err: SpawnErr<'_>,
) -> Result<(child::ChildPlan, bool), SandboxError> {
    let use_ns = p.use_ns;
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let flags = unshare_flags(req, use_ns, p.userns);
    let ro_binds = read_only_binds(req, &p.workspace, use_ns)?;
    let disk = command_disk(req, support, p, spawn_err)?;
    // Overlay layers go on the disk where its tmpfs can hold them.
    let layers_disk = disk.as_deref().filter(|_| support.disk_layers);
    let overlay = overlay_mount(
        req,
        &p.workspace,
        (use_ns, p.userns),
        layers_disk,
        spawn_err,
    )?;
    let (shares, share_dirs, merges) = share_mounts(
        req,
        &p.tmp.0,
        (layers_disk.is_some(), support.tree_overlay),
        spawn_err,
    )?;
    p.kept_merges = merges;
    if req.check {
        check_env::write_python_hook(
            &p.tmp.tmp().join(check_env::PYTHON_DIR),
            &bytecode_trust(
                req,
                view,
                (&p.workspace, p.tmp.tmp()),
                use_ns || p.landlock.is_some(),
            ),
        )
        .map_err(|e| spawn_err("check environment: ".into(), e))?;
    }
    let root_plan = if use_ns {
        Some(root_plan_for(req, support, view, p, &shares, spawn_err)?)
    } else {
        None
    };
    note_root_limits(req, support, p)?;
    // (Without namespaces a request with egress was refused in `prepare`.)
    if req.egress.is_some() && req.net == Net::None && use_ns {
        p.proxy_pair =
            Some(fdpass::socket_pair().map_err(|e| spawn_err("egress socket pair: ".into(), e))?);
    }
    let in_root = root_plan.is_some();
    let cgroup_procs = cgroup_procs_files(&p.cgroups)?;
    let own_disk = match (&disk, &p.disk_pair) {
        (Some(at), Some((_, theirs))) => Some(disk_plan(
            at,
            req.limits.disk_size_mb(),
            (
                req.overlay_scratch.is_some() && layers_disk.is_some(),
                &share_dirs,
            ),
            theirs.as_raw_fd(),
        )?),
        _ => None,
    };
    let user_sysctls = user_sysctls_for(p.userns)?;
    let plan = child::ChildPlan {
        unshare_flags: flags,
        userns: p.userns,
        uid_map: format!("{uid} {uid} 1").into_bytes(),
        gid_map: format!("{gid} {gid} 1").into_bytes(),
        cgroup_procs,
        mount_proc: use_ns && support.proc_mount,
        late_rules: p
            .landlock
            .as_ref()
            .map(|l| (l.fd.as_raw_fd(), l.read_mask, l.all_mask)),
        overlay,
        ro_binds,
        loopback_up: use_ns && req.net == Net::None,
        proxy_sock: p.proxy_pair.as_ref().map(|(_, child)| child.as_raw_fd()),
        ctty: req.terminal,
        session: 0,
        made: None,
        made_mnt: None,
        root: root_plan,
        disk: own_disk,
        rlimits: p.rlimits.iter().map(|(r, v, _)| (*r, *v)).collect(),
        landlock_fd: p.landlock.as_ref().map(|l| l.fd.as_raw_fd()),
        seccomp: p.seccomp.clone(),
        user_sysctls,
        diag_fd,
    };
    Ok((plan, in_root))
}

/// The namespaces to create (`CLONE_NEW*`), 0 without namespaces.
fn unshare_flags(req: &ExecRequest, use_ns: bool, userns: bool) -> libc::c_int {
    let mut flags = 0;
    if use_ns {
        // IPC: SysV objects and POSIX queues are the command's own and
        // die with it. Cgroup: its own cgroup is its root, the host's
        // layout unnamed.
        flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWCGROUP;
        if userns {
            flags |= libc::CLONE_NEWUSER;
        }
        if req.net == Net::None {
            flags |= libc::CLONE_NEWNET;
        }
    }
    flags
}

/// The paths the child binds read-only onto themselves (a read-only
/// workspace, then the protected paths that are no links), with the flags
/// their mounts must keep; none without namespaces.
fn read_only_binds(
    req: &ExecRequest,
    workspace: &Path,
    use_ns: bool,
) -> Result<Vec<(CString, libc::c_ulong)>, SandboxError> {
    let mut ro_binds = Vec::new();
    if use_ns && req.workspace_read_only {
        ro_binds.push((cstring(workspace)?, locked_flags(workspace)));
    }
    if use_ns {
        for path in &req.read_only_paths {
            if std::fs::symlink_metadata(path)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(true)
            {
                continue;
            }
            ro_binds.push((cstring(path)?, locked_flags(path)));
        }
    }
    Ok(ro_binds)
}

/// With namespaces, where the command's disk is mounted, with the socket
/// pair its descriptor comes back over made; whether its overlay layers go
/// on it (where its tmpfs can hold them) is said in `p`. None without.
fn command_disk(
    req: &ExecRequest,
    support: &probe::Support,
    p: &mut Prepared,
    spawn_err: SpawnErr<'_>,
) -> Result<Option<PathBuf>, SandboxError> {
    let disk = if p.use_ns {
        p.disk_pair =
            Some(fdpass::socket_pair().map_err(|e| spawn_err("disk socket pair: ".into(), e))?);
        Some(p.tmp.0.disk.clone())
    } else {
        None
    };
    let layers_disk = disk.as_deref().filter(|_| support.disk_layers);
    p.layers_on_disk = layers_disk.is_some();
    if disk.is_some() && !support.disk_layers && req.overlay_scratch.is_some() {
        p.notes.push("the command's layer over the workspace is on the host's disk: this kernel's tmpfs keeps no user xattrs for overlayfs (Linux 6.6+), so only /tmp is on the command's disk".into());
    }
    Ok(disk)
}

/// The files the child writes itself into before anything forks: v2's
/// `cgroup.procs`; v1's `tasks` (its one thread, without the global lock
/// and its RCU wait: see `cgroup.rs`).
fn cgroup_procs_files(cgroups: &cgroup::Cgroups) -> Result<Vec<CString>, SandboxError> {
    let file = if cgroups.v1 { "tasks" } else { "cgroup.procs" };
    cgroups
        .dirs
        .iter()
        .map(|d| cstring(&d.join(file)))
        .collect::<Result<_, _>>()
}

/// The command's own root (see `root.rs`), planned from what it may use.
fn root_plan_for(
    req: &ExecRequest,
    support: &probe::Support,
    view: &confinement::HostView,
    p: &Prepared,
    shares: &[root::ShareMount],
    spawn_err: SpawnErr<'_>,
) -> Result<root::RootPlan, SandboxError> {
    let cwd = req
        .cwd
        .canonicalize()
        .map_err(|e| spawn_err("cwd: ".into(), e))?;
    let masks = p
        .landlock
        .as_ref()
        .map(|l| root::Masks {
            read_dir: l.read_mask,
            read_file: l.read_file_mask,
            all_dir: l.all_mask,
        })
        .unwrap_or_default();
    Ok(root::plan(&root::Inputs {
        view,
        private: &p.tmp.0,
        workspace: &p.workspace,
        cwd: &cwd,
        fresh_proc: support.proc_mount,
        own_net: req.net == Net::None,
        git: p.git_view.as_ref().map(|(d, c)| (d.as_path(), c.as_path())),
        shares,
        extra_trees: &req.read_only_trees,
        aliases: &req.workspace_aliases,
        overlay_trees: support.tree_overlay,
        userns: p.userns,
        masks,
        tmp_dirs: if req.check {
            &[check_env::PYTHON_DIR]
        } else {
            &[]
        },
        terminal: p.terminal.as_ref().map(|t| t.path.as_path()),
    })?)
}

/// Where a check's modules may have their bytecode read from beside their
/// source (see [`check_env`]), as the command sees them. With
/// `host_read_only` (a root of its own, or Landlock: nothing outside the
/// workspace and the private tmp is writable, for it or for any command
/// of the task), the host view's trees, the request's read-only trees and
/// each read-only share; never the workspace (every path it is shown at),
/// a writable share, the private tmp, the fresh places a root has, a
/// share's caches or a file the runtime rewrote.
fn bytecode_trust(
    req: &ExecRequest,
    view: &confinement::HostView,
    (workspace, tmp): (&Path, &Path),
    host_read_only: bool,
) -> check_env::BytecodeTrust {
    if !host_read_only {
        return check_env::BytecodeTrust::default();
    }
    let shown: Vec<&Path> = std::iter::once(workspace)
        .chain(req.workspace_aliases.iter().map(PathBuf::as_path))
        .collect();
    // Only what is named as read-only is trusted (never `/proc`, a git
    // directory's view or anything else a root shows).
    let mut trusted: Vec<PathBuf> = view
        .trees
        .iter()
        .filter(|t| !root::special(t))
        .chain(&req.read_only_trees)
        .cloned()
        .collect();
    let mut rewritten = Vec::new();
    let mut untrusted: Vec<PathBuf> = shown.iter().map(|w| w.to_path_buf()).collect();
    untrusted.extend(
        [
            tmp,
            Path::new("/tmp"),
            Path::new("/dev/shm"),
            Path::new("/run"),
        ]
        .map(Path::to_path_buf),
    );
    for share in &req.shares {
        for w in &shown {
            let at = w.join(&share.rel);
            untrusted.extend(share.caches.iter().map(|c| at.join(c)));
            rewritten.extend(share.repoint.iter().map(|r| at.join(&r.rel)));
            if share.access == ShareAccess::ReadOnly {
                trusted.push(at);
            } else {
                untrusted.push(at);
            }
        }
    }
    check_env::BytecodeTrust {
        trusted,
        untrusted,
        rewritten,
    }
}

/// With namespaces, what the command's root lacks on this machine:
/// overlays of the allowed trees (refused with `required` isolation) and a
/// fresh `/proc`, said in the notes.
fn note_root_limits(
    req: &ExecRequest,
    support: &probe::Support,
    p: &mut Prepared,
) -> Result<(), SandboxError> {
    let use_ns = p.use_ns;
    if use_ns && !support.tree_overlay {
        if req.isolation == IsolationLevel::Required {
            return Err(SandboxError::Unavailable {
                missing: "read-only overlays of the allowed trees (socket isolation)".into(),
                how: "Overlayfs must be mountable in a user namespace (Linux 5.11+); without it a socket file inside an allowed tree stays reachable. Use --isolation preferred to run anyway.".into(),
            });
        }
        p.notes.push("host trees are bound, not overlaid (overlays unavailable): a socket file inside an allowed tree stays reachable".into());
    }
    if use_ns && !support.proc_mount {
        p.notes.push("no /proc: a fresh one could not be mounted, and the host's would name host processes' roots".into());
    }
    Ok(())
}

/// The per-user kernel allowances bounded in the command's user namespace
/// (`/proc/sys/user/…` file, value); none without one.
pub(crate) fn user_sysctls_for(userns: bool) -> Result<Vec<(CString, Vec<u8>)>, SandboxError> {
    if userns {
        USER_SYSCTLS
            .iter()
            .map(|(name, value)| {
                let path = CString::new(format!("/proc/sys/user/{name}"))
                    .map_err(|_| SandboxError::Prepare("sysctl name".into()))?;
                Ok((path, value.to_string().into_bytes()))
            })
            .collect::<Result<_, SandboxError>>()
    } else {
        Ok(Vec::new())
    }
}

/// The command's disk: a tmpfs of `mb` MiB at `at` holding `tmp/` (with
/// `home/`) and, for a command seen through an overlay, the overlay's
/// `upper/` and `work/`.
fn disk_plan(
    at: &Path,
    mb: u64,
    (overlay, share_dirs): (bool, &[PathBuf]),
    send: std::os::fd::RawFd,
) -> Result<child::DiskPlan, SandboxError> {
    let mut dirs = vec![
        (cstring(&at.join("tmp"))?, 0o1777),
        (cstring(&at.join("tmp/home"))?, 0o700),
    ];
    if overlay {
        dirs.push((cstring(&at.join("upper"))?, 0o755));
        dirs.push((cstring(&at.join("work"))?, 0o755));
    }
    for d in share_dirs {
        dirs.push((cstring(d)?, 0o755));
    }
    Ok(child::DiskPlan {
        at: cstring(at)?,
        // Inodes bounded too: empty files and directories cost no bytes.
        options: CString::new(format!(
            "mode=755,size={}m,nr_inodes={}",
            mb.max(1),
            mb.saturating_mul(256).max(16_384)
        ))
        .map_err(|_| SandboxError::Prepare("disk options".into()))?,
        dirs,
        send,
    })
}

/// The shares as the root mounts them, the directories the child makes on
/// its disk for them, and the kept layers to merge after the command.
type ShareMounts = (Vec<root::ShareMount>, Vec<PathBuf>, Vec<kept::Pending>);

/// The shares as the root mounts them, with the upper and work layers of
/// each copy-on-write one made: kept where the runtime asked, or fresh in
/// the command's private directory (always, for an acceptance check).
fn share_mounts(
    req: &ExecRequest,
    private: &root::Private,
    (on_disk, overlays): (bool, bool),
    spawn_err: SpawnErr<'_>,
) -> Result<ShareMounts, SandboxError> {
    let mut out = Vec::new();
    // Fresh layers are on the command's disk when it has one (made there
    // by the child, parents first): counted against its limit.
    let mut disk_dirs = Vec::new();
    let mut merges = Vec::new();
    for (i, share) in req.shares.iter().enumerate() {
        let mut middle = None;
        let layers = match &share.access {
            ShareAccess::ReadOnly => None,
            // A process that may not write the workspace may not write
            // what is shown inside it either.
            ShareAccess::Overlay { .. } if req.workspace_read_only => None,
            ShareAccess::Overlay { keep } => {
                let (dir, fresh_on_disk) = match keep {
                    // Kept, with a disk: the layer kept so far is shown
                    // read-only under a fresh upper layer on the disk
                    // (counted against its limit), merged into the kept
                    // one after the command if the task's budget allows.
                    Some(k) if !req.check && on_disk => {
                        let kept = k.join("upper");
                        std::fs::create_dir_all(&kept)
                            .map_err(|e| spawn_err(format!("layer of `{}`: ", share.rel), e))?;
                        middle = Some(kept.clone());
                        merges.push(kept::Pending {
                            disk_dir: format!("share-{i}"),
                            kept,
                            rel: share.rel.clone(),
                        });
                        (private.disk.join(format!("share-{i}")), true)
                    }
                    // Kept, with no disk of its own: written in place.
                    Some(k) if !req.check => (k.clone(), false),
                    _ if on_disk => (private.disk.join(format!("share-{i}")), true),
                    _ => (private.base.join(format!("share-{i}")), false),
                };
                let (upper, work) = (dir.join("upper"), dir.join("work"));
                if fresh_on_disk {
                    disk_dirs.extend([dir.clone(), upper.clone(), work.clone()]);
                } else {
                    for d in [&upper, &work] {
                        std::fs::create_dir_all(d)
                            .map_err(|e| spawn_err(format!("layer of `{}`: ", share.rel), e))?;
                    }
                }
                Some((upper, work))
            }
        };
        // A read-only share's caches: fresh directories on the command's
        // disk (made by the child), else in its private directory, shown
        // over a skeleton that gives each a place in the share.
        let mut caches = Vec::new();
        let mut skeleton = None;
        let plain = |n: &String| {
            !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('\0')
        };
        // (The skeleton is an overlay: without them the share is bound
        // read-only as it is, caches included.)
        if layers.is_none() && overlays && !req.workspace_read_only && !share.caches.is_empty() {
            let names: Vec<&String> = share.caches.iter().filter(|n| plain(n)).collect();
            let skel = private.base.join(format!("skeleton-{i}"));
            for name in &names {
                std::fs::create_dir_all(skel.join(name))
                    .map_err(|e| spawn_err(format!("cache of `{}`: ", share.rel), e))?;
                let dir = if on_disk {
                    let d = private.disk.join(format!("cache-{i}-{name}"));
                    disk_dirs.push(d.clone());
                    d
                } else {
                    let d = private.base.join(format!("cache-{i}-{name}"));
                    std::fs::create_dir_all(&d)
                        .map_err(|e| spawn_err(format!("cache of `{}`: ", share.rel), e))?;
                    d
                };
                caches.push(((*name).clone(), dir));
            }
            skeleton = (!caches.is_empty()).then_some(skel);
        }
        // The files that name the project, as this command's workspace.
        let seen_at = req.workspace.as_ref().unwrap_or(&req.cwd);
        let mut files = Vec::new();
        // (A copy-on-write share's files are the task's to change: its
        // own view of them is left as it is.)
        let repoint = if layers.is_none() {
            share.repoint.as_slice()
        } else {
            &[]
        };
        for (n, r) in repoint.iter().enumerate() {
            let plain = !r.rel.is_empty()
                && r.rel
                    .split('/')
                    .all(|p| !p.is_empty() && p != "." && p != "..");
            let host_file = share.host.join(&r.rel);
            let regular = std::fs::symlink_metadata(&host_file).is_ok_and(|m| m.is_file());
            if !plain || !regular {
                continue;
            }
            let at = private.base.join(format!("repoint-{i}-{n}"));
            std::fs::write(&at, r.text_for(&seen_at.to_string_lossy()))
                .map_err(|e| spawn_err(format!("`{}` in `{}`: ", r.rel, share.rel), e))?;
            files.push((at, r.rel.clone()));
        }
        out.push(root::ShareMount {
            host: share.host.clone(),
            rel: share.rel.clone(),
            layers,
            middle,
            skeleton,
            caches,
            files,
        });
    }
    Ok((out, disk_dirs, merges))
}

/// What a command may take of its user's per-user kernel allowances
/// (counted for the caller's user, so a command holding them all would
/// leave the user's own programs none): bounded in its user namespace,
/// whose limits the kernel checks on top of the host's.
pub const USER_SYSCTLS: &[(&str, u64)] = &[
    ("max_inotify_instances", 16),
    ("max_inotify_watches", 16384),
    ("max_fanotify_groups", 16),
    ("max_fanotify_marks", 16384),
    // No user namespace inside: a nested one would hand the command a
    // full set of capabilities over its own namespaces again.
    ("max_user_namespaces", 0),
];

/// A pipe whose write end the child reports a failed sandbox step on.
fn diag_pipe(spawn_err: SpawnErr<'_>) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(spawn_err("pipe: ".into(), std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn run_with(req: &ExecRequest, support: &probe::Support) -> Result<ExecResult, SandboxError> {
    let Launched {
        mut child,
        started,
        trace,
        p,
        landlock_abi,
        env_imposed,
        terminal,
    } = launch(req, support, false)?;
    collect(
        req,
        &mut child,
        (started, &trace),
        p,
        landlock_abi,
        env_imposed,
        terminal,
    )
}

/// A process started in its sandbox, with what its end needs.
struct Launched {
    child: spawner::Proc,
    started: Instant,
    trace: Trace,
    p: Prepared,
    landlock_abi: Option<u32>,
    env_imposed: Vec<String>,
    /// The runtime's end of the command's terminal, when it has one.
    terminal: Option<std::fs::File>,
}

/// Prepare every layer and start the process (with a piped stdin when
/// it is a `session`).
fn launch(
    req: &ExecRequest,
    support: &probe::Support,
    session: bool,
) -> Result<Launched, SandboxError> {
    let trace = Trace::start();
    let program_text = match &req.program {
        Program::Shell(s) => format!("sh -c {s:?}"),
        Program::Argv(a) => a.join(" "),
    };
    let spawn_err = |step: String, source: std::io::Error| SandboxError::Spawn {
        program: program_text.clone(),
        cwd: req.cwd.display().to_string(),
        step,
        source,
    };
    let view = confinement::host_view();
    trace.mark("view");
    let mut p = prepare(req, support, view, &trace, &spawn_err)?;
    // From here every way out destroys the cgroups.
    if req.terminal && !session {
        match pty::open() {
            Ok(t) => p.terminal = Some(t),
            Err(e) => {
                p.cgroups.destroy();
                return Err(spawn_err("a terminal for the command: ".into(), e));
            }
        }
    }
    let planned = diag_pipe(&spawn_err).and_then(|(diag_read, diag_write)| {
        let (plan, in_root) = child_plan(
            req,
            support,
            view,
            &mut p,
            diag_write.as_raw_fd(),
            &spawn_err,
        )?;
        Ok((diag_read, diag_write, plan, in_root))
    });
    let (diag_read, diag_write, mut plan, in_root) = match planned {
        Ok(x) => x,
        Err(e) => {
            p.cgroups.destroy();
            return Err(e);
        }
    };
    plan.session = session_of(req, &plan, session);
    note_disk_and_userns(req, &mut p, in_root);
    let spawner = spawner::handle();
    let (mut cmd, env_imposed, terminal) =
        command_for(req, view, &mut p, (in_root, session), &spawn_err)?;
    trace.mark("plan");
    let started = Instant::now();
    let many = spawner.is_some();
    let spawned = match (spawner, terminal) {
        (Some(h), (controller, given)) => {
            let streams = match given {
                Some(fds) => spawner::Streams::Given(fds),
                None => spawner::Streams::Piped { stdin: session },
            };
            spawner::spawn(h, &cmd, &plan, streams).map(|c| (c, controller))
        }
        (None, (controller, given)) => {
            fork_here(&mut cmd, plan, given, session).map(|c| (c, controller))
        }
    };
    // Its copies of the command's descriptors (the terminal end among
    // them: its last holder's exit ends the runtime's reading).
    drop(cmd);
    trace.mark("spawned");
    drop(diag_write);
    receive_from_child(req, &mut p, spawned.is_ok());
    let (mut child, terminal) = match spawned {
        Ok(c) => c,
        Err(e) => return Err(spawn_failed(diag_read, &mut p.cgroups, e, &spawn_err)),
    };
    let landlock_abi = p.landlock.take().map(|l| l.abi);
    if session {
        refuse_weak_session(req, &mut p, &mut child, landlock_abi)?;
    }
    // A process that starts many commands (through its spawner) makes the
    // next one's ruleset while this one starts.
    if many && landlock_abi.is_some() {
        let overlays = support.namespaces && req.layers.namespaces && support.tree_overlay;
        landlock::make_spare(view, overlays);
    }
    Ok(Launched {
        child,
        started,
        trace,
        p,
        landlock_abi,
        env_imposed,
        terminal,
    })
}

/// For a process that prepares and forks one command itself (`loop exec`
/// of one command), start now, while it does the rest of its start:
/// - with `namespaces` and `own_net` (its own network namespace), making
///   the command's user and network namespaces (a forked maker): its
///   child enters them where it would have made them, if its plan makes
///   namespaces of that kind (this user's, with the limits every
///   command's user namespace gets); else they are dropped. Each is
///   entered by that command only.
///
/// (Its Landlock ruleset's common part is not made on a thread beside:
/// measured from a benchmark's harness, such a thread made the whole
/// `loop exec` three times slower, from its shell as fast; see
/// `docs/benchmark-history.md`.)
///
/// Call it before the process starts any other thread. A process that
/// starts its commands from a spawner makes none of this (the spawner
/// makes its own namespaces ahead).
pub fn prepare_ahead(namespaces: bool, own_net: bool) {
    if spawner::enabled() {
        return;
    }
    if namespaces && own_net {
        spares::make_ahead();
    }
}

/// Fork the command from this process (no spawner), entering `plan`,
/// with `given` as its standard streams (a terminal's end) if any.
fn fork_here(
    cmd: &mut Command,
    mut plan: child::ChildPlan,
    given: Option<[OwnedFd; 3]>,
    session: bool,
) -> std::io::Result<spawner::Proc> {
    // The namespaces made ahead for it (see `prepare_ahead`),
    // kept open here until the child has entered them.
    let ahead = spares::take_ahead(&plan);
    if let Some(pair) = &ahead {
        plan.made = Some(pair.raw());
        tracing::debug!(
            target: "loop_sandbox::phases",
            "sandbox: user and network namespaces made ahead, while the command was prepared"
        );
    }
    if let Some([i, o, e]) = given {
        cmd.stdin(Stdio::from(i))
            .stdout(Stdio::from(o))
            .stderr(Stdio::from(e));
    }
    // The arrays the command is exec'd with, made before the fork (a name
    // or variable with a NUL byte is refused as `std` refuses it).
    let exec = ordered::OwnedExec::new(spawner::argv_of(cmd)?, spawner::envp_of(cmd)?);
    // Where its relay tells its end (a command alone in its PID
    // namespace, not a long-lived one): its result is then known
    // while the relay's exit still tears the namespaces down.
    let report = (!session && plan.unshare_flags & libc::CLONE_NEWPID != 0)
        .then(|| fdpass::socket_pair_of(libc::SOCK_SEQPACKET).ok())
        .flatten();
    let theirs = report.as_ref().map_or(-1, |(_, t)| t.as_raw_fd());
    // SAFETY: `child::enter_reporting` and `OwnedExec::exec` only make
    // async-signal-safe system calls on data prepared above, which
    // outlives the spawn.
    unsafe {
        cmd.pre_exec(move || {
            child::enter_reporting(&plan, theirs)?;
            Err(exec.exec())
        });
    }
    let spawned = cmd.spawn();
    drop(ahead);
    spawned.map(|c| match report {
        Some((ours, _theirs)) => spawner::Proc::direct_reported(c, ours),
        None => spawner::Proc::direct(c),
    })
}

/// Which session the command may share its user namespace and its root's
/// shared tree with (see `warm.rs`): none for a long-lived process (it
/// runs beside the task's commands), for one on a terminal or behind the
/// egress proxy, for one that does not make every namespace, or with
/// `LOOP_SANDBOX_SESSIONS=0`; an acceptance check never shares with
/// what is not one.
fn session_of(req: &ExecRequest, plan: &child::ChildPlan, long_lived: bool) -> u8 {
    let all = libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    let on = std::env::var_os("LOOP_SANDBOX_SESSIONS").is_none_or(|v| v != "0");
    let eligible = on
        && !long_lived
        && !req.terminal
        && plan.userns
        && plan.root.is_some()
        && plan.proxy_sock.is_none()
        && plan.loopback_up
        && plan.unshare_flags & all == all;
    match (eligible, req.check) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    }
}

/// The notes on the command's disk and `/tmp` (inside its own root or
/// not) and on a missing user namespace.
fn note_disk_and_userns(req: &ExecRequest, p: &mut Prepared, in_root: bool) {
    if in_root {
        p.disk_mb = Some(req.limits.disk_size_mb());
        if req.overlay_scratch.is_none() && !req.workspace_read_only {
            p.notes.push(format!(
                "the workspace is written directly (no overlay): only /tmp is on the command's disk of {} MiB; its writes to the workspace are bounded by --fsize per file",
                req.limits.disk_size_mb()
            ));
        }
        if !p.layers_on_disk
            && req.shares.iter().any(|s| {
                matches!(&s.access, ShareAccess::Overlay { keep: Some(_) })
                    && !req.check
                    && !req.workspace_read_only
            })
        {
            p.notes.push("copy-on-write shares whose writes are kept between commands (build outputs) are written on the host's disk, outside the command's disk (this kernel's tmpfs keeps no user xattrs for overlayfs)".into());
        }
    } else {
        p.notes.push("no private /tmp of its own: what the command writes to its TMPDIR is not bounded but by --fsize per file".into());
    }
    if !p.userns {
        p.notes.push("no user namespace: per-user kernel objects (inotify instances and watches) are counted against the caller's allowance".into());
    }
}

/// The runtime's end of a command's terminal, and the command's (its
/// three standard streams), when it has one.
type TerminalEnds = (Option<std::fs::File>, Option<[OwnedFd; 3]>);

/// The command to spawn (see [`command`]), pointed at the egress proxy,
/// with the variables the check environment imposed and the ends of its
/// terminal. On error the cgroups are destroyed.
fn command_for(
    req: &ExecRequest,
    view: &confinement::HostView,
    p: &mut Prepared,
    (in_root, session): (bool, bool),
    spawn_err: SpawnErr<'_>,
) -> Result<(Command, Vec<String>, TerminalEnds), SandboxError> {
    // Inside its own root the private tmp is `/tmp`.
    let tmp_dir = if in_root {
        PathBuf::from("/tmp")
    } else {
        p.tmp.tmp().to_path_buf()
    };
    let (mut cmd, env_imposed) = match command(req, view, (&tmp_dir, &p.workspace), session) {
        Ok(c) => c,
        Err(e) => {
            p.cgroups.destroy();
            return Err(spawn_err("check environment: ".into(), e));
        }
    };
    let terminal = match terminal_ends(p.terminal.take()) {
        Ok(t) => t,
        Err(e) => {
            p.cgroups.destroy();
            return Err(spawn_err("a terminal for the command: ".into(), e));
        }
    };
    if p.proxy_pair.is_some() {
        set_proxy_env(&mut cmd);
    }
    Ok((cmd, env_imposed, terminal))
}

/// The command's terminal, when it has one, as its three standard
/// streams, and the runtime's end.
fn terminal_ends(terminal: Option<pty::Terminal>) -> std::io::Result<TerminalEnds> {
    let Some(t) = terminal else {
        return Ok((None, None));
    };
    let (fds, controller) = t.stdio().map(|s| (s, t.controller))?;
    Ok((Some(controller), Some(fds)))
}

/// Point the command's proxy variables at the egress proxy.
fn set_proxy_env(cmd: &mut Command) {
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "CARGO_HTTP_PROXY",
    ] {
        cmd.env(var, egress::PROXY_URL);
    }
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
}

/// After the spawn: take back what the child sends over the socket pairs
/// (the egress proxy's listening socket, the command's disk), closing our
/// copies of the child's ends; nothing comes when it was not `spawned`.
fn receive_from_child(req: &ExecRequest, p: &mut Prepared, spawned: bool) {
    // The child's end is the child's now; the listening socket it makes
    // inside its namespace comes back over ours.
    p.proxy = match (p.proxy_pair.take(), &req.egress) {
        (Some((ours, theirs)), Some(egress)) if spawned => {
            drop(theirs);
            match egress::receive_listener(&ours, Duration::from_secs(10)) {
                Some(l) => Some(egress::Proxy::start(l, egress.clone())),
                None => {
                    p.notes.push(
                        "the egress proxy could not be started: the command had no network".into(),
                    );
                    None
                }
            }
        }
        _ => None,
    };
    // The command's disk comes back the same way; it is read after the
    // command has ended (see `keep_writes`).
    if let Some((ours, theirs)) = p.disk_pair.take()
        && spawned
    {
        drop(theirs);
        p.disk_fd = fdpass::receive(&ours, Duration::from_secs(10));
    }
}

/// The spawn failed: the error, naming the sandbox step the child reported
/// on `diag_read` if any, once the cgroups are destroyed.
fn spawn_failed(
    diag_read: OwnedFd,
    cgroups: &mut cgroup::Cgroups,
    e: std::io::Error,
    spawn_err: SpawnErr<'_>,
) -> SandboxError {
    let mut step = String::new();
    let _ = std::fs::File::from(diag_read).read_to_string(&mut step);
    cgroups.destroy();
    let step = if step.is_empty() {
        step
    } else {
        format!("sandbox step `{step}` failed: ")
    };
    spawn_err(step, e)
}

/// A session (a long-lived helper) is refused rather than run with less
/// than it was promised: the workspace read-only, and no network but what
/// the task allows. Refused, its process is killed and reaped and the
/// cgroups destroyed.
fn refuse_weak_session(
    req: &ExecRequest,
    p: &mut Prepared,
    child: &mut spawner::Proc,
    landlock_abi: Option<u32>,
) -> Result<(), SandboxError> {
    // Without a mount namespace only Landlock keeps it read-only, and
    // before ABI 3 Landlock does not govern truncate(2).
    let read_only =
        !req.workspace_read_only || p.use_ns || landlock_abi.is_some_and(|abi| abi >= 3);
    let network = req.net == Net::Host || p.use_ns;
    if !(read_only && network) {
        child.kill_group();
        let _ = child.wait();
        p.cgroups.destroy();
        return Err(SandboxError::Prepare(format!(
            "this machine cannot {}: neither a mount namespace nor Landlock is available here",
            if read_only {
                "keep the process off the network"
            } else {
                "show the workspace read-only"
            }
        )));
    }
    Ok(())
}

/// Capture the spawned command's output, wait for it within its limits,
/// kill whatever it left, and say what ran under which isolation.
fn collect(
    req: &ExecRequest,
    child: &mut spawner::Proc,
    (started, trace): (Instant, &Trace),
    mut p: Prepared,
    landlock_abi: Option<u32>,
    env_imposed: Vec<String>,
    terminal: Option<std::fs::File>,
) -> Result<ExecResult, SandboxError> {
    let per_stream = (req.max_output / 2).max(2);
    let on_terminal = terminal.is_some();
    // The runtime's end stays open until the command's end is known (and
    // its group killed): its last close hangs the terminal up, which would
    // signal (SIGHUP) whatever of the command's session is still there,
    // its relay among them.
    let _held = terminal.as_ref().and_then(|t| t.try_clone().ok());
    let mut pipes = match terminal {
        // Both streams are the terminal: its output is `stdout`, with the
        // whole bound (the terminal end's last close reads as EIO, the end).
        Some(t) => {
            let mut pipes = pipes::Pipes::new(vec![(1, t, per_stream * 2)]);
            pipes.set(2, Captured::read_all(std::io::empty(), 2));
            pipes
        }
        None => pipes::Pipes::new(
            [(1, child.stdout.take()), (2, child.stderr.take())]
                .into_iter()
                .filter_map(|(n, f)| Some((n, f?, per_stream)))
                .collect(),
        ),
    };
    let waited = wait_for(child, req, started, &mut pipes);
    let egress = p.proxy.take().map(egress::Proxy::finish);
    let (status, timed_out, cancelled) = match waited {
        Ok(w) => w,
        Err(e) => {
            child.kill_group();
            p.cgroups.destroy();
            return Err(SandboxError::Wait(e));
        }
    };
    let duration = started.elapsed();
    trace.mark("exited");
    // Whatever the command left behind in its group or cgroup dies with it.
    child.kill_group();
    p.cgroups.destroy();
    trace.mark("cleaned");
    let (layer, (disk_full, disk_used), not_kept) = keep_writes(req, &mut p)?;
    let (stdout, stderr) = pipes.finish(DRAIN_GRACE, &mut p.notes);
    let network = match (p.use_ns && req.net == Net::None, &egress) {
        (true, Some(_)) => "proxy",
        (true, None) => "none",
        (false, _) => "host",
    };
    Ok(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        cancelled,
        duration,
        stdout,
        stderr,
        isolation: Isolation {
            runtime_terminal: on_terminal,
            ..p.isolation(landlock_abi, network, egress.unwrap_or_default())
        },
        env_imposed,
        layer,
        disk_full,
        disk_used,
        not_kept,
    })
}

/// After the command: say so when its writes filled its disk, and hand
/// back its layer over the workspace when the request keeps it.
type Kept = (Option<Layer>, (bool, u64), Vec<String>);

fn keep_writes(req: &ExecRequest, p: &mut Prepared) -> Result<Kept, SandboxError> {
    let wanted = req.keep_writes && req.overlay_scratch.is_some() && p.layers_on_disk;
    let Some(fd) = p.disk_fd.take() else {
        if wanted {
            return Err(SandboxError::Keep(std::io::Error::other(
                "the command's disk did not come back from its sandbox",
            )));
        }
        let not_kept = p
            .kept_merges
            .iter()
            .map(|m| {
                format!(
                    "`{}`: the command's disk did not come back from its sandbox",
                    m.rel
                )
            })
            .collect();
        return Ok((None, (false, 0), not_kept));
    };
    // Writes to shares whose layer outlasts the command: kept only while
    // the task's kept layers stay within its disk budget.
    let budget = req.limits.disk_mb.saturating_mul(1024 * 1024);
    let disk = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let mut not_kept = Vec::new();
    for m in std::mem::take(&mut p.kept_merges) {
        match kept::merge(&disk.join(&m.disk_dir).join("upper"), &m.kept, budget) {
            Ok(kept::Outcome::Merged) => {}
            Ok(kept::Outcome::OverBudget { kept, new }) => not_kept.push(format!(
                "`{}`: {:.1} MiB written there were not kept: with the {:.1} MiB kept from earlier commands that passes the task's limit of {} MiB (limits.disk_mb)",
                m.rel,
                new as f64 / 1048576.0,
                kept as f64 / 1048576.0,
                req.limits.disk_mb
            )),
            Err(e) => not_kept.push(format!(
                "`{}`: what the command wrote there could not be kept: {e}",
                m.rel
            )),
        }
    }
    p.notes
        .extend(not_kept.iter().map(|n| format!("shared {n}")));
    // Full: less than a MiB left (an eighth of a disk under 8 MiB).
    // SAFETY: fstatvfs into a zeroed struct on a descriptor we own.
    let (full, used) = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::fstatvfs(fd.as_raw_fd(), &mut st) == 0 {
            let size = st.f_blocks.saturating_mul(st.f_frsize);
            (
                st.f_bavail.saturating_mul(st.f_bsize) < (1024 * 1024).min(size / 8),
                st.f_blocks
                    .saturating_sub(st.f_bfree)
                    .saturating_mul(st.f_frsize),
            )
        } else {
            (false, 0)
        }
    };
    if full {
        p.notes.push(format!(
            "the command's writes filled its disk of {}: what it wrote past that failed with \"No space left on device\"",
            req.limits.disk_named()
        ));
    }
    Ok((wanted.then(|| Layer(Arc::new(fd))), (full, used), not_kept))
}

/// Resource limits: the address space is the backstop when no cgroup
/// limits memory. Each with how the evidence names it.
fn rlimits_for(
    req: &ExecRequest,
    (memory_cgroup, swap_bounded): (bool, bool),
    mem_bytes: u64,
) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t, String)> {
    let cpu = req
        .limits
        .cpu_secs
        .unwrap_or_else(|| req.timeout.as_secs().max(1) + 1);
    // Under a memory cgroup that bounds swap too, memory is limited where
    // it is used: the address space is left free, since runtimes reserve
    // far more than they touch (V8 reserves about 10 GiB for each
    // WebAssembly memory, which vitest's and esbuild's parsers
    // instantiate; Go's heap arenas). Where swap escapes the cgroup, the
    // address space stays the backstop at four times the limit.
    let as_bytes = if memory_cgroup && swap_bounded {
        libc::RLIM_INFINITY
    } else if memory_cgroup {
        mem_bytes.saturating_mul(4)
    } else {
        mem_bytes
    };
    vec![
        (libc::RLIMIT_CORE, 0, "core=0".into()),
        (libc::RLIMIT_CPU, cpu, format!("cpu={cpu}s")),
        (
            libc::RLIMIT_AS,
            as_bytes,
            if as_bytes == libc::RLIM_INFINITY {
                "as=unlimited (the memory cgroup limits memory)".to_string()
            } else {
                format!("as={}MiB", as_bytes >> 20)
            },
        ),
        (
            libc::RLIMIT_NOFILE,
            req.limits.nofile,
            format!("nofile={}", req.limits.nofile),
        ),
        (
            libc::RLIMIT_NPROC,
            req.limits.nproc,
            format!("nproc={}", req.limits.nproc),
        ),
        (
            libc::RLIMIT_FSIZE,
            req.limits.fsize_mb.saturating_mul(1024 * 1024),
            format!("fsize={}MiB", req.limits.fsize_mb),
        ),
    ]
}

/// The overlay a request's workspace is seen through, as the child mounts
/// it: (lower, options, cwd). Its upper and work layers are on the
/// command's `disk` (made by the child) when it has one, else under the
/// scratch directory.
fn overlay_mount(
    req: &ExecRequest,
    workspace: &Path,
    (use_ns, userns): (bool, bool),
    disk: Option<&Path>,
    spawn_err: &dyn Fn(String, std::io::Error) -> SandboxError,
) -> Result<Option<(CString, CString, CString)>, SandboxError> {
    let Some(scratch) = &req.overlay_scratch else {
        return Ok(None);
    };
    if !use_ns {
        return Err(SandboxError::Prepare(
            "an overlay view needs a mount namespace, which is unavailable here".into(),
        ));
    }
    let layers = disk.unwrap_or(scratch);
    let (upper, work) = (layers.join("upper"), layers.join("work"));
    if disk.is_none() {
        for d in [&upper, &work] {
            std::fs::create_dir_all(d).map_err(|e| spawn_err("overlay dirs: ".into(), e))?;
        }
    } else {
        std::fs::create_dir_all(scratch).map_err(|e| spawn_err("overlay scratch: ".into(), e))?;
    }
    let esc = root::overlay_escape;
    let mut lower = esc(workspace);
    for below in &req.overlay_below {
        if std::fs::symlink_metadata(below).is_ok_and(|m| m.is_dir()) {
            lower.push(':');
            lower.push_str(&esc(below));
        }
    }
    let mut options = format!(
        "lowerdir={lower},upperdir={},workdir={}",
        esc(&upper),
        esc(&work)
    );
    if userns {
        options.push_str(",userxattr");
    }
    let cwd = req
        .cwd
        .canonicalize()
        .map_err(|e| spawn_err("cwd: ".into(), e))?;
    Ok(Some((
        cstring(workspace)?,
        CString::new(options)
            .map_err(|_| SandboxError::Prepare("overlay options contain NUL".into()))?,
        cstring(&cwd)?,
    )))
}

/// The command to spawn, with its scrubbed environment (and, for a check,
/// the check environment: what was imposed comes back too).
fn command(
    req: &ExecRequest,
    view: &confinement::HostView,
    (tmp_dir, workspace): (&Path, &Path),
    session: bool,
) -> std::io::Result<(Command, Vec<String>)> {
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
        .stdin(if session {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear();
    // The child starts a new session of its own (see `child::enter`): its
    // process group, which the runtime kills, is the session's.
    if req.host_env {
        for (k, v) in std::env::vars_os() {
            let key = k.to_string_lossy();
            if ENV_ALLOW.contains(&key.as_ref()) || key.starts_with("LC_") {
                cmd.env(&k, &v);
            }
        }
        for (k, v) in &view.toolchain_env {
            cmd.env(k, v);
        }
    } else {
        cmd.env("PATH", FIXED_PATH);
    }
    cmd.env("HOME", tmp_dir.join("home"))
        .env("TMPDIR", tmp_dir)
        // Interpreter caches written beside sources (e.g. `tests/__pycache__`)
        // would look like edits to protected paths, and a forged cache can
        // shadow a source file: commands do not write them.
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for (k, v) in &req.env {
        cmd.env(k, v);
    }
    let mut env_imposed = Vec::new();
    if req.check {
        let host_path = std::env::var("PATH").unwrap_or_default();
        for (k, v) in check_env::vars(&host_path, workspace, &tmp_dir.join(check_env::PYTHON_DIR)) {
            env_imposed.push(format!("{k}={v}"));
            cmd.env(k, v);
        }
    }
    Ok((cmd, env_imposed))
}

/// Wait for the command: until it exits, its timeout passes or a cancel
/// comes (then its group is killed). Returns its status and whether the
/// timeout or a cancel ended it.
fn wait_for(
    child: &mut spawner::Proc,
    req: &ExecRequest,
    started: Instant,
    pipes: &mut pipes::Pipes,
) -> std::io::Result<(std::process::ExitStatus, bool, bool)> {
    let deadline = started + req.timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, false, false));
        }
        let now = Instant::now();
        let cancel_now = req
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst));
        if now >= deadline || cancel_now {
            child.kill_group();
            return Ok((child.wait()?, !cancel_now, cancel_now));
        }
        // Read output until the child exits or the deadline comes,
        // whichever is first; wake every 50 ms to notice a cancel request
        // (every millisecond where its end cannot be waited for).
        let mut left = deadline.saturating_duration_since(now);
        if req.cancel.is_some() {
            left = left.min(Duration::from_millis(50));
        }
        let wake = child.wake_fd();
        if wake.is_none() {
            left = left.min(Duration::from_millis(1));
        }
        pipes.pump(wake, left);
    }
}

/// The `[core]` and `[extensions]` sections of a git config, nothing else:
/// what git needs to read a repository, without remotes or credentials.
fn git_config_core(text: &str) -> String {
    let mut out = String::new();
    let mut keep = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let name = t
                .trim_start_matches('[')
                .split([']', ' ', '"'])
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            keep = name == "core" || name == "extensions";
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Phase timings of one command, as `debug` events of target
/// `loop_sandbox::phases` (`LOOP_LOG=loop_sandbox::phases=debug`): where a
/// command's fixed cost goes (used for docs/benchmarks.md). Marks are made
/// in the runtime's process only, never in a forked child.
struct Trace(Option<Instant>);

impl Trace {
    fn start() -> Self {
        Trace(
            tracing::enabled!(target: "loop_sandbox::phases", tracing::Level::DEBUG)
                .then(Instant::now),
        )
    }

    fn mark(&self, phase: &str) {
        if let Some(t0) = self.0 {
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            tracing::debug!(
                target: "loop_sandbox::phases",
                "sandbox: {phase} at {ms:.3} ms"
            );
        }
    }
}

/// A pidfd for `pid`, to sleep until it exits (Linux 5.3+).
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a descriptor we now own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod transient {
    use super::SandboxError;

    #[test]
    fn only_passing_errors_of_the_machine_are_transient() {
        let spawn = |errno| SandboxError::Spawn {
            program: "sh".into(),
            cwd: "/".into(),
            step: String::new(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        for errno in [
            libc::EAGAIN,
            libc::ETXTBSY,
            libc::EMFILE,
            libc::ENFILE,
            libc::EINTR,
        ] {
            assert!(spawn(errno).is_transient(), "{errno}");
        }
        for errno in [libc::ENOENT, libc::EPERM, libc::EACCES] {
            assert!(!spawn(errno).is_transient(), "{errno}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod private_dirs {
    use super::{PrivateTmp, scratch_tmpfs};

    #[test]
    fn a_private_directory_nothing_writes_into_goes_on_a_tmpfs_where_there_is_one() {
        let small = PrivateTmp::create(true).unwrap();
        let large = PrivateTmp::create(false).unwrap();
        assert!(
            large.0.base.starts_with(std::env::temp_dir()),
            "{}",
            large.0.base.display()
        );
        match scratch_tmpfs() {
            Some(t) => {
                assert!(small.0.base.starts_with(t), "{}", small.0.base.display());
                assert!(super::is_tmpfs(&small.0.base));
            }
            None => assert!(small.0.base.starts_with(std::env::temp_dir())),
        }
        for p in [&small, &large] {
            assert!(p.0.staging.is_dir() && p.0.disk.is_dir() && p.0.mask.is_file());
        }
        let gone = [small.0.base.clone(), large.0.base.clone()];
        drop((small, large));
        assert!(gone.iter().all(|b| !b.exists()), "removed when dropped");
    }
}
