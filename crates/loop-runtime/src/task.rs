//! One task, end to end: [`run_task`] submits it ([`crate::prepare`]) and
//! drives it ([`crate::drive`]) to its receipt ([`crate::ship`]);
//! [`resume_task`] drives a stored one again.

use crate::Error;
use crate::drive::{Run, drive};
use crate::prepare::StoredRequest;
use loop_core::{Clock, SystemClock};
use loop_protocol::{Contract, OutcomeKind, OutcomeRecord};
use std::path::{Path, PathBuf};

/// What to run.
pub struct TaskRequest {
    /// The locked contract.
    pub contract: Contract,
    /// `--model` (else the Loopfile's maker).
    pub model: Option<String>,
    /// `--record FILE`.
    pub record: Option<PathBuf>,
    /// `--project`.
    pub project: PathBuf,
    /// `--verify-on-change`.
    pub verify_on_change: bool,
    /// `--isolation`.
    pub isolation: loop_sandbox::IsolationLevel,
    /// `--include-dirty`.
    pub include_dirty: bool,
    /// Who answers the questions the task asks.
    pub on_prompt: crate::wiring::OnPrompt,
}

/// How it ended.
#[derive(Debug, Clone)]
pub struct TaskReport {
    /// Task id.
    pub task_id: String,
    /// Outcome.
    pub outcome: OutcomeRecord,
    /// The receipt file.
    pub receipt: PathBuf,
    /// The task workspace (kept for inspection, apply and undo).
    pub workspace: PathBuf,
}

/// A task id: `t-YYYYMMDD-HHMMSS-` and 6 random hex digits.
pub fn new_task_id(now_ms: u64) -> Result<String, Error> {
    let stamp = loop_protocol::time::rfc3339_millis(now_ms);
    let digits: String = stamp
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    let rnd = loop_protocol::random::hex::<3>().map_err(|e| Error::internal(e.to_string()))?;
    Ok(format!(
        "t-{}-{}-{rnd}",
        &digits[..8.min(digits.len())],
        &digits[8.min(digits.len())..],
    ))
}

/// The project's store, `.loop/loop.db`.
pub fn open_store(project: &Path) -> Result<loop_store::SqliteStore, Error> {
    let state = project.join(".loop");
    std::fs::create_dir_all(&state)
        .map_err(|e| Error::internal(format!("cannot create .loop: {e}")))?;
    if !state.join(".gitignore").exists() {
        std::fs::write(state.join(".gitignore"), "*\n")
            .map_err(|e| Error::internal(format!(".loop/.gitignore: {e}")))?;
    }
    loop_store::SqliteStore::open(&state.join("loop.db"))
        .map_err(|e| Error::internal(e.to_string()))
}

pub(crate) fn store_err(e: loop_store::StoreError) -> Error {
    match e {
        loop_store::StoreError::NoSuchTask(_) => Error::usage(e.to_string()),
        other => Error::internal(other.to_string()),
    }
}

pub(crate) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let text = serde_json::to_vec(value).map_err(|e| Error::internal(e.to_string()))?;
    loop_workspace::write_atomic(path, &text)
        .map_err(|e| Error::internal(format!("{}: {e}", path.display())))
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text =
        std::fs::read(path).map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| Error::internal(format!("{}: {e}", path.display())))
}

pub(crate) fn random_token() -> Result<String, Error> {
    loop_protocol::random::hex::<8>().map_err(|e| Error::internal(e.to_string()))
}

/// Run one task and write its receipt; `observer` sees every event and
/// every line for the person running it.
pub fn run_task(req: TaskRequest, observer: &mut dyn crate::Observer) -> Result<TaskReport, Error> {
    let task_id = crate::prepare::submit(&req, observer)?;
    resume_task(&req.project, &task_id, None, req.on_prompt, observer)
}

/// Continue a task whose runtime stopped (or that was never started); with
/// an extension, give a task that reached a limit more budget and go on.
pub fn resume_task(
    project: &Path,
    task_id: &str,
    extension: Option<loop_core::Extension>,
    on_prompt: crate::wiring::OnPrompt,
    observer: &mut dyn crate::Observer,
) -> Result<TaskReport, Error> {
    use loop_store::Store;
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let store = open_store(&project)?;
    let record = store.task(task_id).map_err(store_err)?;
    if record.is_terminal() && extension.is_some() {
        if record.outcome_kind() != Some(OutcomeKind::LimitReached) {
            return Err(Error::usage(format!(
                "task {task_id} ended {}, not at a limit: only a task that reached a limit can be given more budget",
                record.outcome.as_deref().unwrap_or("?")
            )));
        }
        store
            .reopen(task_id, SystemClock.now_ms())
            .map_err(store_err)?;
    } else if record.is_terminal() {
        return Err(Error::usage(format!(
            "task {task_id} has already ended ({}); its receipt: {}",
            record.outcome.as_deref().unwrap_or("?"),
            record.receipt.as_deref().unwrap_or("(none)")
        )));
    }
    let stored: StoredRequest = serde_json::from_value(record.request.clone())
        .map_err(|e| Error::internal(format!("task {task_id}: stored request: {e}")))?;
    let loopfile = crate::loopfile::Loopfile::load(&project)?;
    // A recording starts with the task; it is not continued (it would not
    // replay from the middle).
    let fresh = store.entries(task_id, 0).map_err(store_err)?.is_empty();
    let record = stored.record.as_deref().filter(|_| fresh);
    let models = crate::models::load_model(stored.model.as_deref(), &loopfile, record)?;
    let run = Run {
        store: &store,
        task_id,
        stored: &stored,
        on_prompt,
        extension,
    };
    drive(&project, run, models, observer)
}
