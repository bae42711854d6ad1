//! A task being prepared (its workspace made, its contract settled, its
//! baseline run) is not in the store yet: its directory holds a mark that
//! names the process preparing it. A preparation that ends, well or not,
//! takes its mark away; one whose process was killed leaves it, with a
//! workspace and a `loop/ID` branch no command would otherwise know. The
//! next task on the project (and `loop gc`, and `loop discard ID`) finds
//! those by their mark and removes what they left.

use crate::Error;
use crate::project::locate::{TaskPaths, git_output, load_origin};
use std::path::{Path, PathBuf};

/// The mark's name in the task's directory.
const MARK: &str = "preparing.json";

/// This process prepares a task: the mark, taken away when this is
/// dropped (whatever the preparation's end, but a killed process).
pub(crate) struct Preparing(PathBuf);

impl Preparing {
    /// Mark `task_dir`'s task as being prepared by this process.
    #[allow(clippy::disallowed_methods)] // the runtime's own task directory
    pub(crate) fn mark(task_dir: &Path) -> Result<Preparing, Error> {
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let me = loop_store::Owner::this_process(String::new(), now);
        let path = task_dir.join(MARK);
        let text = serde_json::to_vec(&me).map_err(Error::from_cause)?;
        // Whole or not at all: written aside, then renamed.
        let part = task_dir.join(format!(".{MARK}.part"));
        std::fs::write(&part, text)
            .and_then(|()| std::fs::rename(&part, &path))
            .map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
        Ok(Preparing(path))
    }
}

impl Drop for Preparing {
    #[allow(clippy::disallowed_methods)] // the runtime's own mark
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether task `id` of `project` has a preparation's mark (whoever's).
#[allow(clippy::disallowed_methods)] // lstat of the runtime's own mark
pub(crate) fn has_mark(project: &Path, id: &str) -> bool {
    crate::project::locate::is_task_id(id)
        && std::fs::symlink_metadata(project.join(".loop/tasks").join(id).join(MARK)).is_ok()
}

/// Whether task `id` of `project` was being prepared by a process that is
/// gone, and the store never got it.
#[allow(clippy::disallowed_methods)] // the runtime's own mark, bounded
pub(crate) fn was_killed(project: &Path, id: &str, store: &dyn loop_store::Store) -> bool {
    if !crate::project::locate::is_task_id(id) {
        return false;
    }
    let mark = project.join(".loop/tasks").join(id).join(MARK);
    let Ok(text) = loop_workspace::door::read_named_text(&mark, 4096) else {
        return false;
    };
    let Ok(owner) = serde_json::from_str::<loop_store::Owner>(&text) else {
        return false;
    };
    // A mark from another boot of this machine (or another machine) says
    // nothing of its process: a day old, no preparation is still going.
    let stale = !owner.is_local()
        && std::fs::symlink_metadata(&mark)
            .and_then(|m| m.modified())
            .is_ok_and(|t| {
                t.elapsed()
                    .is_ok_and(|a| a > std::time::Duration::from_secs(86_400))
            });
    // (Only a store that says it has no such task: one that cannot be
    // read now says nothing.)
    (owner.is_dead() || stale)
        && matches!(store.task(id), Err(loop_store::StoreError::NoSuchTask(_)))
}

/// Whether task `id` is marked as being prepared by a process that is
/// there (on this machine, alive).
pub(crate) fn is_being_prepared(project: &Path, id: &str) -> bool {
    let mark = project.join(".loop/tasks").join(id).join(MARK);
    loop_workspace::door::read_named_text(&mark, 4096)
        .ok()
        .and_then(|t| serde_json::from_str::<loop_store::Owner>(&t).ok())
        .is_some_and(|o| o.is_local() && !o.is_dead())
}

/// The project's preparations whose process was killed, by id.
#[allow(clippy::disallowed_methods)] // the runtime's own task directories
pub(crate) fn killed(project: &Path, store: &dyn loop_store::Store) -> Vec<String> {
    let Ok(dirs) = std::fs::read_dir(project.join(".loop/tasks")) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = dirs
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|id| crate::project::locate::is_task_id(id))
        .filter(|id| was_killed(project, id, store))
        .collect();
    ids.sort();
    ids
}

/// Remove what the killed preparation of task `id` left: its worktree,
/// its `loop/ID` branch, what was kept beside the workspace, and its
/// directory. What it removed, said.
#[allow(clippy::disallowed_methods)] // the runtime's own task directory
pub(crate) fn clean(project: &Path, id: &str) -> String {
    let paths = TaskPaths::of(project, id);
    let branch = format!("loop/{id}");
    let had_branch = git_output(
        project,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .is_some();
    match load_origin(&paths) {
        Ok(ws) => {
            let _ = ws.discard();
        }
        // Killed before its workspace was recorded: git's own record of
        // the worktree, by its path, and the branch, by its name.
        Err(_) => {
            let path = paths.workspace.to_string_lossy().into_owned();
            let one = loop_workspace::task_workspace::worktree_commands();
            let _ = git_output(project, &["worktree", "remove", "--force", &path]);
            let _ = git_output(project, &["worktree", "prune"]);
            drop(one);
            let _ = git_output(project, &["branch", "-D", &branch]);
        }
    }
    if paths.near != paths.task_dir {
        let _ = crate::project::workspaces::remove_near(&paths.near);
    }
    let _ = loop_workspace::remove_tree(&paths.task_dir);
    if had_branch {
        format!("its workspace and branch {branch}")
    } else {
        "its workspace".to_string()
    }
}

/// Clean every killed preparation of `project`, each said to `observer`.
pub(crate) fn clean_killed(
    project: &Path,
    store: &dyn loop_store::Store,
    observer: &mut dyn crate::Observer,
) {
    for id in killed(project, store) {
        let what = clean(project, &id);
        observer.note(&format!(
            "note: task {id} was being prepared when its process ended, before it was stored; removed {what}"
        ));
    }
}
