//! One task, end to end: [`run_task`] submits it ([`crate::task::prepare`]) and
//! drives it ([`crate::task::drive`]) to its receipt ([`crate::task::end`]);
//! [`resume_task`] drives a stored one again.

use crate::Error;
pub use crate::project::locate::open_store;
use crate::project::locate::store_err;
use crate::task::drive::{Run, drive};
use crate::task::intake::Admitted;
use crate::task::request::StoredRequest;
pub use crate::task::request::TaskReport;
use loop_core::{Clock, SystemClock};
use loop_protocol::OutcomeKind;
use std::path::Path;

/// Run one task and write its receipt; `observer` sees every event and
/// every line for the person running it.
pub fn run_task(req: Admitted, observer: &mut dyn crate::Observer) -> Result<TaskReport, Error> {
    // The store stays open from the task's submission to its end: on
    // SQLite, closing its last connection checkpoints the write-ahead log
    // and deletes it, and the drive would at once make it again.
    let (task_id, owner, _store) =
        crate::task::prepare::submit_claimed(&req, observer, true, None)?;
    drive_stored(&req.project, &task_id, None, req.on_prompt, observer, owner)
}

/// Continue a task whose runtime stopped (or that was never started); with
/// an extension, give a task that reached a limit more budget and go on.
pub fn resume_task(
    project: &Path,
    task_id: &str,
    extension: Option<loop_core::Extension>,
    on_prompt: crate::OnPrompt,
    observer: &mut dyn crate::Observer,
) -> Result<TaskReport, Error> {
    drive_stored(project, task_id, extension, on_prompt, observer, None)
}

/// [`resume_task`], for a task this process may already hold the claim of.
pub(crate) fn drive_stored(
    project: &Path,
    task_id: &str,
    extension: Option<loop_core::Extension>,
    on_prompt: crate::OnPrompt,
    observer: &mut dyn crate::Observer,
    claimed: Option<loop_store::Owner>,
) -> Result<TaskReport, Error> {
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    if crate::project::locate::discarded(&project, task_id) {
        return Err(Error::usage(format!(
            "task {task_id}'s workspace was discarded (`loop discard {task_id}`), so it cannot go on; its receipt stays in .loop/receipts\nhint: run the task again to redo its work"
        )));
    }
    let store = open_store(&project)?;
    let record = store.task(task_id).map_err(store_err)?;
    if record.is_terminal() && extension.is_some() {
        if record.outcome_kind() != Some(OutcomeKind::LimitReached) {
            return Err(Error::usage(format!(
                "task {task_id} ended {}, not at a limit: only a task that reached a limit can be given more budget",
                record.outcome.map_or("?".into(), |o| o.to_string())
            )));
        }
        store
            .reopen(task_id, SystemClock.now_ms())
            .map_err(store_err)?;
    } else if record.is_terminal() {
        // A task stopped by a limit can go on with more: say how.
        let more = if record.outcome_kind() == Some(OutcomeKind::LimitReached) {
            format!(
                "; it stopped at a limit: `loop resume {task_id} --add-steps N` (or --add-tokens, --add-usd, --add-secs) gives it more and lets it go on"
            )
        } else {
            String::new()
        };
        return Err(Error::usage(format!(
            "task {task_id} has already ended ({}); its receipt: {}{more}",
            record.outcome.map_or("?".into(), |o| o.to_string()),
            record.receipt.as_deref().unwrap_or("(none)")
        )));
    }
    let stored: StoredRequest = serde_json::from_value(record.request.clone())
        .map_err(|e| Error::internal(format!("task {task_id}: stored request: {e}")))?;
    // A shared store holds other projects' tasks too: never run one here.
    if let Some(why) = foreign(&project, task_id, stored.project_identity.as_ref())? {
        return Err(Error::usage(why));
    }
    let loopfile = crate::loopfile::Loopfile::load(&project)?;
    // A recording starts with the task; it is not continued (it would not
    // replay from the middle).
    let fresh = store.entries(task_id, 0).map_err(store_err)?.is_empty();
    let record = stored.record.as_deref().filter(|_| fresh);
    let models = crate::models::load_model_for(
        stored.model.as_deref(),
        &loopfile,
        record,
        &project,
        stored.delegation.as_ref().map(|c| c.index),
    )?;
    let run = Run {
        store: &*store,
        task_id,
        stored: &stored,
        on_prompt,
        extension,
        claimed,
        start_child: crate::task::delegate::StartChild {
            start: run_task,
            resume: |project, id, on_prompt, observer| {
                resume_task(project, id, None, on_prompt, observer)
            },
        },
    };
    drive(&project, run, models, observer)
}

/// Why task `task_id`, of project `owner`, is not `project`'s to run, if
/// it is not: it belongs to another project this one does not serve.
pub(crate) fn foreign(
    project: &Path,
    task_id: &str,
    owner: Option<&crate::project::locate::ProjectIdentity>,
) -> Result<Option<String>, Error> {
    let Some(owner) = owner else {
        return Ok(None);
    };
    let scope = crate::project::locate::project_scope(project)?;
    if scope.takes(Some(owner)) {
        return Ok(None);
    }
    let same_history =
        owner.root_commit.is_some() && owner.root_commit == scope.identity.root_commit;
    Ok(Some(format!(
        "task {task_id} belongs to project {}, not this one ({}){}: it is left for that project's runtimes (to serve it from here, add `project: {{serves: [{}]}}` to this Loopfile)",
        owner.id,
        scope.identity.id,
        if same_history {
            ", though both share a history (a clone?)"
        } else {
            ""
        },
        owner.id
    )))
}
