//! `loop memory add|list|show|forget|approve` (and the API's): a project's
//! notes for later tasks (see [`crate::task::memory`]), each with where it
//! came from; a person adds one, approves a quarantined one, or forgets
//! one so no task is given it again.

use crate::Error;
use crate::project::locate::{open_store, project_scope, store_err};
use loop_store::{Note, NoteStatus};
use std::path::Path;

fn now_ms() -> u64 {
    use loop_core::Clock as _;
    loop_core::SystemClock.now_ms()
}

/// A person's note, bounded as a model's is.
fn checked(text: &str, about: &[String]) -> Result<String, Error> {
    let call = loop_protocol::ToolCall {
        id: "person".into(),
        tool: crate::task::memory::TOOL.into(),
        args: serde_json::json!({"text": text, "about": about}),
    };
    crate::task::memory::proposed(&call)
        .map(|(t, _)| t)
        .map_err(|e| Error::usage(e.0))
}

/// Add a person's note (usable at once): `by` says who (the command line,
/// or an API token's owner, whose note it then is).
pub fn add(
    project: &Path,
    text: &str,
    about: &[String],
    owner: Option<&str>,
    by: &str,
) -> Result<Note, Error> {
    let text = checked(text, about)?;
    let store = open_store(project)?;
    let scope = project_scope(project)?;
    let now = now_ms();
    let id = crate::project::ids::new_task_id(now)?.replacen("t-", "n-", 1);
    let note = Note {
        id,
        project: scope.identity.id,
        owner: owner.unwrap_or("").to_string(),
        text,
        about: about.to_vec(),
        body: serde_json::json!({"about": about, "by": by}),
        status: NoteStatus::Usable,
        created_ms: now,
        updated_ms: now,
    };
    store.put_note(&note).map_err(store_err)?;
    Ok(note)
}

/// The project's notes, oldest first: every one but the forgotten (with
/// `all`, those too); for `owner` (an API caller), only theirs and the
/// project's.
pub fn list(project: &Path, all: bool, owner: Option<&str>) -> Result<Vec<Note>, Error> {
    let store = open_store(project)?;
    let scope = project_scope(project)?;
    Ok(store
        .notes(&scope.identity.id)
        .map_err(store_err)?
        .into_iter()
        .filter(|n| all || n.status != NoteStatus::Forgotten)
        .filter(|n| owner.is_none_or(|o| n.owner.is_empty() || n.owner == o))
        .collect())
}

/// Note `id` of this project.
pub fn show(project: &Path, id: &str, owner: Option<&str>) -> Result<Note, Error> {
    let store = open_store(project)?;
    let scope = project_scope(project)?;
    store
        .note(id)
        .map_err(store_err)?
        .filter(|n| n.project == scope.identity.id)
        .filter(|n| owner.is_none_or(|o| n.owner.is_empty() || n.owner == o))
        .ok_or_else(|| Error::not_found(format!("no note {id} in this project")))
}

/// Set note `id`'s status to `to`, saying `by` whom; the note as it now is.
fn settle(
    project: &Path,
    id: &str,
    to: NoteStatus,
    (owner, by): (Option<&str>, &str),
) -> Result<Note, Error> {
    let mut n = show(project, id, owner)?;
    if n.status == NoteStatus::Forgotten && to == NoteStatus::Usable {
        return Err(Error::conflict(format!(
            "note {id} was forgotten: add it again (`loop memory add`) if it is right"
        )));
    }
    n.status = to;
    n.updated_ms = now_ms();
    let key = if to == NoteStatus::Usable {
        "approved_by"
    } else {
        "forgotten_by"
    };
    n.body[key] = serde_json::Value::String(by.to_string());
    open_store(project)?.put_note(&n).map_err(store_err)?;
    Ok(n)
}

/// A person approves note `id`: later tasks are given it.
pub fn approve(project: &Path, id: &str, owner: Option<&str>, by: &str) -> Result<Note, Error> {
    settle(project, id, NoteStatus::Usable, (owner, by))
}

/// Forget note `id`: no task is given it again (it stays listed with
/// `--all`, with who forgot it).
pub fn forget(project: &Path, id: &str, owner: Option<&str>, by: &str) -> Result<Note, Error> {
    settle(project, id, NoteStatus::Forgotten, (owner, by))
}
