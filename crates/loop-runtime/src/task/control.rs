//! A task seen from outside its run: is it running, interrupted or
//! over; stop it; answer what it asks.

use crate::Error;
use crate::project::locate::{Liveness, liveness, open_store, store_err};
use crate::task::request::TaskReport;
use crate::task::run::resume_task;
use loop_core::{Clock, SystemClock};
use std::path::Path;

/// How `cancel` ended a task.
#[derive(Debug)]
pub enum Cancelled {
    /// It had already ended (its outcome, as recorded).
    AlreadyEnded(Option<loop_protocol::OutcomeName>),
    /// Nobody ran it: it was ended here, cancelled, with its receipt.
    EndedHere(TaskReport),
    /// Its running process stopped it (its outcome; how long it took).
    Stopped(Option<loop_protocol::OutcomeName>, std::time::Duration),
}

/// Ask task `id` to stop, and wait (up to `wait`) until it has; a task
/// nobody runs (interrupted) is ended here, `cancelled`, with its receipt.
pub fn cancel(
    project: &Path,
    id: &str,
    wait: std::time::Duration,
    observer: &mut dyn crate::Observer,
) -> Result<Cancelled, Error> {
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let store = open_store(&project)?;
    let asked = store
        .request_cancel(id, SystemClock.now_ms())
        .map_err(|e| Error::usage(e.to_string()))?;
    // Its children (and theirs) are asked too: a child running in its
    // parent's process stops as the parent does, and one nobody runs ends
    // cancelled when its parent, resumed to end, comes to it.
    if asked {
        crate::task::delegate::cancel_children(&*store, id)?;
    }
    let t = store.task(id).map_err(|e| Error::usage(e.to_string()))?;
    if !asked {
        return Ok(Cancelled::AlreadyEnded(t.outcome));
    }
    if liveness(&t) != Liveness::Running {
        // The store's cancel request stops it as soon as it is driven.
        let report = resume_task(&project, id, None, crate::OnPrompt::Deny, observer)?;
        return Ok(Cancelled::EndedHere(report));
    }
    let start = std::time::Instant::now();
    while start.elapsed() < wait {
        let t = store.task(id).map_err(Error::from_cause)?;
        if t.is_terminal() {
            return Ok(Cancelled::Stopped(t.outcome, start.elapsed()));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(Error::internal(format!(
        "task {id} was asked to stop but has not ended within {} s",
        wait.as_secs()
    )))
}

/// Answer task `id`'s pending approval (or checkpoint): approve, or deny;
/// `message` is guidance handed to the model. Returns the decided request.
pub fn answer(
    project: &Path,
    id: &str,
    approve: bool,
    message: Option<&str>,
    by: Option<&str>,
) -> Result<loop_store::Approval, Error> {
    answer_request(project, id, None, approve, message, by)
}

/// [`answer`], of the request `only` when given: a request that is no
/// longer the one waiting is not answered in its place.
pub fn answer_request(
    project: &Path,
    id: &str,
    only: Option<&str>,
    approve: bool,
    message: Option<&str>,
    by: Option<&str>,
) -> Result<loop_store::Approval, Error> {
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let store = open_store(&project)?;
    store.task(id).map_err(|e| Error::usage(e.to_string()))?;
    let Some(mut a) = store
        .approvals(id)
        .map_err(Error::from_cause)?
        .into_iter()
        .find(|a| {
            a.status == loop_store::ApprovalStatus::Pending && only.is_none_or(|w| a.id == w)
        })
    else {
        return Err(match only {
            Some(w) => Error::conflict(format!(
                "task {id}'s request {w} is not waiting (it was answered, or it expired)"
            )),
            None => Error::usage(format!("task {id} has no pending approval")),
        });
    };
    a.status = loop_store::ApprovalStatus::answered(approve);
    if let Some(m) = message {
        a.payload["answer"] = serde_json::Value::String(m.to_string());
    }
    if let Some(b) = by {
        a.payload["by"] = serde_json::Value::String(b.to_string());
    }
    a.decided_ms = Some(SystemClock.now_ms());
    if !store.decide_approval(&a).map_err(Error::from_cause)? {
        return Err(Error::conflict(format!(
            "task {id}'s request {} was decided meanwhile (it expired, or someone else answered); `loop status {id}` shows how",
            a.id
        )));
    }
    Ok(a)
}

/// Tasks of this project that are not over and whose runtime is gone
/// (not children: each is resumed by its parent, which finds it by its
/// call; resumed alone it would run twice; nor a task no runtime ever
/// took up: submitted to a queue or a server, it waits for its worker).
pub fn interrupted_tasks(project: &Path) -> Result<Vec<String>, Error> {
    let store = open_store(project)?;
    let scope = crate::project::locate::project_scope(project)?;
    // A shared store holds other projects' tasks too: only this one's.
    Ok(store
        .tasks()
        .map_err(store_err)?
        .into_iter()
        .filter(|t| {
            liveness(t) == Liveness::Interrupted
                && !t.never_run()
                && loop_store::parent_of(&t.request).is_none()
        })
        .filter(|t| scope.takes(crate::project::locate::stored_project(t).as_ref()))
        .map(|t| t.id)
        .collect())
}
