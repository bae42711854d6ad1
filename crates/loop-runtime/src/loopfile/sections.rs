//! The Loopfile's sections that other parts of the runtime act on, as
//! written: the environments a task shares, its network allowance and its
//! setup steps. Their readers are in `crate::loopfile`; what each does is
//! in `crate::project::environments`, `crate::project::network` and `crate::project::setup`.

use std::net::SocketAddr;

/// How a task sees a shared environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMode {
    /// Read-only: the task can use it, never change it.
    ReadOnly,
    /// Copy-on-write: the task's writes stay in the task (build outputs).
    Overlay,
}

impl ShareMode {
    /// As written in the Loopfile.
    pub fn as_str(self) -> &'static str {
        match self {
            ShareMode::ReadOnly => "read_only",
            ShareMode::Overlay => "overlay",
        }
    }
}

/// One environment a task would share.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Share {
    /// The project path, relative, `/`-separated.
    pub path: String,
    /// How.
    pub mode: ShareMode,
    /// Why: declared in the Loopfile, or the stack it was detected for.
    pub why: String,
    /// Declared in the Loopfile (not detected).
    pub declared: bool,
}

/// The Loopfile's `network:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkSection {
    /// `allow`: for commands.
    pub allow: Vec<String>,
    /// `setup`: for setup steps.
    pub setup: Vec<String>,
    /// `resolve`: name → `ip:port`.
    pub resolve: Vec<(String, SocketAddr)>,
}

/// The Loopfile's `setup:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupSection {
    /// Shell steps, in order.
    pub steps: Vec<String>,
    /// Files keying the layer (default: [`LOCKFILES`] found).
    pub keys: Option<Vec<String>>,
    /// Top-level directories the steps make (default: every new one).
    pub outputs: Option<Vec<String>>,
    /// Seconds each step may take.
    pub timeout_secs: u64,
}

impl Default for SetupSection {
    fn default() -> Self {
        SetupSection {
            steps: Vec::new(),
            keys: None,
            outputs: None,
            timeout_secs: 900,
        }
    }
}
