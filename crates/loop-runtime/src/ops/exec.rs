//! One command under the sandbox, outside any task (`loop exec`): the
//! workspace's protected paths bound read-only, or the whole workspace
//! seen through an overlay whose writes are thrown away.

use loop_sandbox::{ExecRequest, ExecResult, IsolationLevel, Layers, Limits, Net, Program};
use std::path::PathBuf;
use std::time::Duration;

/// What to run, and how.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The read-write directory (canonical).
    pub workspace: PathBuf,
    /// Globs inside the workspace made read-only besides the defaults.
    pub protect: Vec<String>,
    /// `none` (loopback only) or `host`.
    pub net: Net,
    /// Hosts reachable through the egress proxy (with `Net::None`).
    pub egress: Option<loop_sandbox::egress::Egress>,
    /// Memory limit in MiB (also makes a memory limit required).
    pub mem_mb: Option<u64>,
    /// CPU seconds.
    pub cpu_secs: Option<u64>,
    /// Largest file written, in MiB.
    pub fsize_mb: Option<u64>,
    /// What the command may write, in MiB (its /tmp and workspace layer).
    pub disk_mb: Option<u64>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Output bytes kept, both streams together.
    pub max_output: usize,
    /// Fail closed or run with what the kernel offers.
    pub isolation: IsolationLevel,
    /// See the workspace through an overlay.
    pub overlay: bool,
    /// Layers turned off, for measurement.
    pub layers: Layers,
    /// Runs in this process (the last is reported).
    pub repeat: u32,
    /// A pause between those runs (commands of a task come seconds apart:
    /// what a command pays then, not only back to back).
    pub pause: Duration,
    /// Run on a pseudo-terminal the runtime makes (both streams as one).
    pub terminal: bool,
}

/// Why the command could not be run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecFailureKind {
    /// The command was not found.
    NotFound,
    /// The command cannot be run (not executable).
    NotRunnable,
    /// The sandbox or the runtime failed.
    Runtime,
}

/// The command could not be run (never the command's own failure).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ExecFailure {
    /// Why.
    pub kind: ExecFailureKind,
    /// What went wrong.
    pub message: String,
}

impl ExecFailure {
    fn other(message: impl Into<String>) -> Self {
        ExecFailure {
            kind: ExecFailureKind::Runtime,
            message: message.into(),
        }
    }
}

/// Run it.
pub fn exec(o: &ExecOptions) -> Result<ExecResult, ExecFailure> {
    let globs: Vec<String> = loop_protocol::contract::DEFAULT_PROTECTED
        .iter()
        .map(|s| s.to_string())
        .chain(o.protect.iter().cloned())
        .collect();
    let protected = loop_workspace::Protected::new(&globs)
        .map_err(|e| ExecFailure::other(format!("--protect: {e}")))?;
    let cwd = &o.workspace;
    let mut req = ExecRequest::new(Program::Argv(o.command.clone()), cwd);
    // Through an overlay nothing reaches the workspace, protected or not;
    // otherwise protected paths are bound read-only.
    if !o.overlay {
        req.read_only_paths = protected.existing(cwd);
    }
    req.workspace = Some(cwd.clone());
    req.net = o.net;
    req.egress = o.egress.clone();
    req.memory_required = o.mem_mb.is_some();
    req.timeout = o.timeout.max(Duration::from_secs(1));
    req.max_output = o.max_output;
    req.isolation = o.isolation;
    req.layers = o.layers;
    req.terminal = o.terminal;
    req.limits = Limits {
        cpu_secs: o.cpu_secs,
        mem_mb: o.mem_mb.unwrap_or(Limits::default().mem_mb),
        fsize_mb: o.fsize_mb.unwrap_or(Limits::default().fsize_mb),
        disk_mb: o.disk_mb.unwrap_or(Limits::default().disk_mb),
        ..Limits::default()
    };
    let overlay_root = match o.overlay {
        true => Some(
            std::env::temp_dir().join(
                loop_sandbox::unique_name("loop-exec-overlay")
                    .map_err(|e| ExecFailure::other(format!("overlay scratch: {e}")))?,
            ),
        ),
        false => None,
    };
    // Each run gets its own upper layer: an overlay's work directory cannot
    // be reused while the previous mount namespace is still being torn down.
    let mut run = |n: u32| {
        if let Some(root) = &overlay_root {
            req.overlay_scratch = Some(root.join(n.to_string()));
        }
        loop_sandbox::run(&req).map_err(|e| match &e {
            loop_sandbox::SandboxError::Spawn { step, source, .. } if step.is_empty() => {
                let kind = match source.kind() {
                    std::io::ErrorKind::NotFound => ExecFailureKind::NotFound,
                    std::io::ErrorKind::PermissionDenied => ExecFailureKind::NotRunnable,
                    _ => ExecFailureKind::Runtime,
                };
                ExecFailure {
                    kind,
                    message: e.to_string(),
                }
            }
            _ => ExecFailure::other(e.to_string()),
        })
    };
    let mut last = run(0);
    for n in 1..o.repeat.max(1) {
        if last.is_err() {
            break;
        }
        if !o.pause.is_zero() {
            std::thread::sleep(o.pause);
        }
        last = run(n);
    }
    if let Some(root) = &overlay_root {
        let _ = loop_workspace::remove_tree(root);
    }
    last
}
