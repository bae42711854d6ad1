//! What any front end may read of a project's tasks while they run: the
//! list, one task's status (its budgets as recorded, what it waits for,
//! where its change set stands), and its recorded events from a position
//! on — the same events a running task's observer sees.

use crate::Error;
use crate::project::locate::{Liveness, liveness, store_err};
use loop_protocol::Event;
use loop_store::{Approval, Store, TaskRecord};
use serde::Serialize;
use std::path::Path;

/// One task as a front end shows it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskView {
    /// Its id.
    pub id: String,
    /// Its state (`planning`, `acting`, …, `ending`, `terminal`).
    pub state: loop_store::StoredState,
    /// How it ended (`verified`, `limit_reached{steps}`, …), once it has.
    pub outcome: Option<loop_protocol::OutcomeName>,
    /// Why it ended.
    pub reason: Option<String>,
    /// A live process runs it now.
    pub running: bool,
    /// Not over, and nobody runs it (`loop resume` goes on).
    pub interrupted: bool,
    /// The process running it, if it is running.
    pub owner_pid: Option<u32>,
    /// Someone asked it to stop.
    pub cancel_requested: bool,
    /// The instruction.
    pub instruction: Option<String>,
    /// `--model`, if one was given.
    pub model: Option<String>,
    /// The locked contract's hash.
    pub contract_sha256: String,
    /// Ledger entries so far.
    pub entries: u64,
    /// Created (RFC 3339).
    pub created: String,
    /// Last changed (RFC 3339).
    pub updated: String,
    /// The receipt, once written.
    pub receipt: Option<String>,
    /// Who it belongs to (an API token's owner); none from the command line.
    pub owner: Option<String>,
    /// The task that delegated it, for a child task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Whether its runtime is with it (see [`TaskView::liveness`]).
    #[serde(skip)]
    pub(crate) liveness: Liveness,
    /// Not over and never taken up by a runtime: submitted to a queue or
    /// a server, waiting for a worker (see [`TaskView::waiting`]).
    #[serde(skip)]
    pub(crate) waiting: bool,
}

impl TaskView {
    fn of(t: &TaskRecord) -> Self {
        let live = liveness(t);
        TaskView {
            id: t.id.clone(),
            state: t.state,
            outcome: t.outcome,
            reason: t.reason.clone(),
            running: live == Liveness::Running,
            interrupted: live == Liveness::Interrupted,
            owner_pid: t.owner.as_ref().map(|o| o.pid),
            cancel_requested: t.cancel_requested,
            instruction: t.request["contract"]["instruction"]
                .as_str()
                .map(str::to_string),
            model: t.request["model"].as_str().map(str::to_string),
            contract_sha256: t.contract_sha256.clone(),
            entries: t.entries,
            created: loop_protocol::time::rfc3339_millis(t.created_ms),
            updated: loop_protocol::time::rfc3339_millis(t.updated_ms),
            receipt: t.receipt.clone(),
            owner: t.request["owner"].as_str().map(str::to_string),
            parent: t.request["delegation"]["from"]["parent"]
                .as_str()
                .map(str::to_string),
            liveness: live,
            // Released with nothing recorded: never run (a run that ended
            // cleanly, SIGTERM's among them, lets its claim go too, but
            // has recorded its start).
            waiting: !t.is_terminal() && t.never_run(),
        }
    }

    /// Submitted (to a queue, or a server) and not yet taken up by any
    /// runtime: waiting, not interrupted.
    pub fn waiting(&self) -> bool {
        self.waiting
    }

    /// Whether a process runs it, it is interrupted, or it is over.
    pub fn liveness(&self) -> Liveness {
        self.liveness
    }
}

/// Budgets used, as the record shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Used {
    /// Model answers charged.
    pub steps: u64,
    /// Tokens, in and out.
    pub tokens: u64,
    /// Verification passes.
    pub verifications: u64,
    /// Dollars, as the providers' usage and the price table say.
    pub usd: f64,
}

/// Where a task's change set stands in the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ApplyState {
    /// Not applied.
    #[serde(rename = "not applied")]
    NotApplied,
    /// Applied (undo reverses it).
    #[serde(rename = "applied")]
    Applied,
    /// An apply or undo was killed midway (`loop apply ID --recover`).
    #[serde(rename = "interrupted")]
    Interrupted,
}

/// One task in full.
#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    /// The task.
    #[serde(flatten)]
    pub task: TaskView,
    /// What it used.
    pub used: Used,
    /// Its approvals and checkpoints, answered or pending.
    pub approvals: Vec<Approval>,
    /// Its change set in the project.
    pub apply: ApplyState,
    /// Its workspace on this machine, while it is there (outside the
    /// project: see `loop discard` and `loop gc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The queue gave up on it (delivered too often without ending), with
    /// why: shown until it ends (`loop resume` runs it here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetterNote>,
    /// The child tasks it delegated to, each with its state, outcome and
    /// what it used (charged to this task too).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
}

/// A child task, as its parent's status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ChildView {
    /// Its id.
    pub id: String,
    /// Its state.
    pub state: loop_store::StoredState,
    /// How it ended, once it has.
    pub outcome: Option<loop_protocol::OutcomeName>,
    /// The paths it may change.
    pub writable: Vec<String>,
    /// What it used.
    pub used: Used,
    /// Its questions waiting for a person (asked of the person who runs
    /// its parent: the parent's page and status show them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub asking: Vec<Approval>,
}

/// A queue's word that it gave up on a task.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DeadLetterNote {
    /// The queue.
    pub queue: String,
    /// Why.
    pub reason: String,
    /// When (Unix ms).
    pub at_ms: u64,
}

/// The name the note is kept under with the task's files in the store.
pub const DEAD_LETTER: &str = "dead_letter";

/// Every task in `store`, newest last.
pub fn tasks(
    store: &dyn Store,
    keep: &dyn Fn(&loop_store::TaskRecord) -> bool,
) -> Result<Vec<TaskView>, Error> {
    Ok(store
        .tasks()
        .map_err(store_err)?
        .iter()
        .filter(|t| keep(t))
        .map(TaskView::of)
        .collect())
}

/// Task `id` in `store`.
pub fn task(store: &dyn Store, id: &str) -> Result<TaskView, Error> {
    Ok(TaskView::of(&store.task(id).map_err(store_err)?))
}

/// Task `id` of `project` (its store `store`) in full.
#[allow(clippy::disallowed_methods)] // existence of the runtime's own marks in its task directory
pub fn status(store: &dyn Store, project: &Path, id: &str) -> Result<TaskStatus, Error> {
    let t = store.task(id).map_err(|e| {
        let mut e = store_err(e);
        if crate::project::preparing::was_killed(project, id, store) {
            e.message = format!(
                "{}: it was being prepared when its process ended, before it was stored (the next task here, `loop gc` or `loop discard {id}` removes what it left)",
                e.message
            );
        }
        e
    })?;
    // Charged as the Director charges them: one definition of what each
    // event costs.
    let history: Vec<Event> = events(store, id, 0)?.into_iter().map(|r| r.event).collect();
    let budget = loop_core::state::used_by(&history)
        .map_err(|e| Error::internal(format!("task {id}: {e}")))?;
    let used = Used {
        steps: u64::from(budget.steps),
        tokens: budget.tokens,
        verifications: u64::from(budget.verifications),
        usd: budget.usd,
    };
    let task_dir = project.join(".loop/tasks").join(id);
    let apply = if task_dir.join("apply-journal/pending").exists()
        || task_dir.join("applying").exists()
        || task_dir.join("undoing").exists()
    {
        ApplyState::Interrupted
    } else if task_dir.join("applied").exists() {
        ApplyState::Applied
    } else {
        ApplyState::NotApplied
    };
    let task = TaskView::of(&t);
    let dead_letter = (task.state != loop_store::StoredState::TERMINAL)
        .then(|| store.task_file(id, DEAD_LETTER).ok().flatten())
        .flatten()
        .and_then(|body| serde_json::from_str(&body).ok());
    let workspace = crate::project::locate::is_task_id(id)
        .then(|| crate::project::locate::TaskPaths::of(project, id).workspace)
        .filter(|w| std::fs::symlink_metadata(w).is_ok_and(|m| m.is_dir()))
        .map(|w| w.display().to_string());
    Ok(TaskStatus {
        task,
        used,
        approvals: store.approvals(id).unwrap_or_default(),
        apply,
        workspace,
        dead_letter,
        // Only a task whose contract lets it delegate has children to look for.
        children: if t.request["contract"]["limits"]["max_children"]
            .as_u64()
            .is_some_and(|n| n > 0)
        {
            children_of(store, id)?
        } else {
            Vec::new()
        },
    })
}

/// The child tasks `id` delegated to, in the order it delegated them.
fn children_of(store: &dyn Store, id: &str) -> Result<Vec<ChildView>, Error> {
    let mut out = Vec::new();
    let mut tasks = store.children(id).map_err(store_err)?;
    tasks.sort_by_key(|t| t.request["delegation"]["index"].as_u64());
    for t in &tasks {
        let history: Vec<Event> = events(store, &t.id, 0)?
            .into_iter()
            .map(|r| r.event)
            .collect();
        let b = loop_core::state::used_by(&history)
            .map_err(|e| Error::internal(format!("task {}: {e}", t.id)))?;
        out.push(ChildView {
            id: t.id.clone(),
            state: t.state,
            outcome: t.outcome,
            writable: serde_json::from_value(
                t.request["delegation"]["from"]["authority"]["writable"].clone(),
            )
            .unwrap_or_default(),
            used: Used {
                steps: u64::from(b.steps),
                tokens: b.tokens,
                verifications: u64::from(b.verifications),
                usd: b.usd,
            },
            // An ended child's unanswered question is nobody's any more.
            asking: if t.is_terminal() {
                Vec::new()
            } else {
                store
                    .approvals(&t.id)
                    .map_err(store_err)?
                    .into_iter()
                    .filter(|a| a.status == loop_store::ApprovalStatus::Pending)
                    .collect()
            },
        });
    }
    Ok(out)
}

/// An event as recorded, with its position in the ledger.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Its position (0-based): read on from `seq + 1`.
    pub seq: u64,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// The event.
    pub event: Event,
}

/// Task `id`'s events from position `since` on.
pub fn events(store: &dyn Store, id: &str, since: u64) -> Result<Vec<Recorded>, Error> {
    store
        .entries(id, since)
        .map_err(store_err)?
        .into_iter()
        .map(|e| {
            Event::from_kind_payload(&e.kind, &e.payload)
                .map(|event| Recorded {
                    seq: e.seq,
                    at: e.at,
                    event,
                })
                .map_err(|x| Error::internal(format!("task {id}: entry {}: {x}", e.seq)))
        })
        .collect()
}
