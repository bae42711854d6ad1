//! `loop gc`: what no task needs any more, removed (or, with `--dry-run`,
//! listed): `loop/ID` branches whose task is gone, applied or has no
//! workspace; git's records of worktrees that no longer exist; the scratch
//! left in the directories of tasks that are not running, and the kept
//! build outputs of those that ended; setup layers
//! that were being made by a run that died. A task's workspace, receipt
//! and ledger are never touched here: `loop discard ID` drops a workspace.

use crate::Error;
use crate::project::locate::git_output as git;
use std::path::{Path, PathBuf};

/// What `gc` removed (or would).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Collected {
    /// Branches deleted, each with why.
    pub branches: Vec<(String, String)>,
    /// Directories removed (relative to the project when inside it), with
    /// their bytes.
    pub dirs: Vec<(String, u64)>,
    /// Whether git's stale worktree records were pruned.
    pub pruned_worktrees: bool,
    /// Nothing was removed: only listed.
    pub dry_run: bool,
}

impl Collected {
    /// Bytes the removed directories held.
    pub fn bytes(&self) -> u64 {
        self.dirs.iter().map(|(_, b)| b).sum()
    }
}

/// Bytes under `dir` (links not followed).
#[allow(clippy::disallowed_methods)] // sizes only, of the runtime's own directories
fn bytes_of(dir: &Path) -> u64 {
    let Ok(items) = std::fs::read_dir(dir) else {
        return 0;
    };
    items
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_of(&e.path()),
            Ok(_) => std::fs::symlink_metadata(e.path()).map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// The task branches (`loop/ID`) of `project`'s repository, by task id.
pub fn task_branches(project: &Path) -> Vec<String> {
    git(
        project,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/loop/",
        ],
    )
    .map(|text| {
        text.lines()
            .filter_map(|l| l.strip_prefix("loop/"))
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

/// What gc knows of the project's tasks: the store (none when it cannot
/// be opened: every task is then taken as needed) and their directories.
struct Tasks {
    store: Option<std::sync::Arc<dyn loop_store::Store>>,
    dir: PathBuf,
    hour_ago: std::time::SystemTime,
    /// Preparations whose process was killed (see `project::preparing`).
    killed: Vec<String>,
    /// The project.
    project: PathBuf,
}

impl Tasks {
    /// A task the store does not know yet is being prepared (its contract
    /// settled, its baseline run): needed, unless its directory is an hour
    /// old (a preparation that died). Without the store, every task is.
    #[allow(clippy::disallowed_methods)] // lstat of the runtime's own task directory
    fn running(&self, id: &str) -> bool {
        match self.store.as_ref().map(|s| s.task(id)) {
            Some(Ok(t)) => crate::project::locate::liveness(&t) == crate::Liveness::Running,
            // (A preparation whose process is known dead is not.)
            Some(Err(_)) if self.killed.iter().any(|k| k == id) => false,
            // (One whose process is there is, however long it takes: a
            // person may be reading its drafted contract.)
            Some(Err(_)) if crate::project::preparing::is_being_prepared(&self.project, id) => true,
            Some(Err(_)) => std::fs::symlink_metadata(self.dir.join(id))
                .and_then(|m| m.modified())
                .map_or(true, |t| t > self.hour_ago),
            None => true,
        }
    }

    /// A task that has ended (the store says so): only its kept build
    /// outputs are removed, since a queued or paused one may start again
    /// at any moment over them.
    fn ended(&self, id: &str) -> bool {
        self.store
            .as_ref()
            .is_some_and(|s| s.task(id).is_ok_and(|t| t.is_terminal()))
    }
}

/// A project directory of task workspaces whose project is no longer at
/// the path it was made for.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GoneProject {
    /// Where the project was.
    pub was: PathBuf,
    /// Its directory of task workspaces.
    pub dir: PathBuf,
    /// The bytes it holds.
    pub bytes: u64,
    /// It was removed (asked for by its path, not a dry run).
    pub removed: bool,
}

/// `loop gc --gone-projects` and `--forget-project PATH`: the directories
/// of task workspaces whose project is no longer where it was (deleted, or
/// moved: the two look alike from here). Listed; with `forget`, the one
/// made for that path is removed (unless `dry_run`), once the path is
/// checked to hold no project now. A path with no such directory is an
/// error naming it.
pub fn gone_projects(forget: Option<&Path>, dry_run: bool) -> Result<Vec<GoneProject>, Error> {
    let forget = match forget {
        Some(p) => Some(as_recorded(p)?),
        None => None,
    };
    let mut out = Vec::new();
    for (dir, was) in crate::project::workspaces::gone_projects() {
        if forget.as_ref().is_some_and(|f| *f != was) {
            continue;
        }
        let bytes = bytes_of(&dir);
        let removed = forget.is_some() && !dry_run;
        if removed {
            // Looked at again just before: a project may have come back.
            if !crate::project::workspaces::project_gone(&was) {
                return Err(here_now(&was));
            }
            loop_workspace::remove_tree(&dir)
                .map_err(|e| Error::internal(format!("{}: {e}", dir.display())))?;
        }
        out.push(GoneProject {
            was,
            dir,
            bytes,
            removed,
        });
    }
    let Some(f) = &forget else {
        return Ok(out);
    };
    if out.is_empty() && !crate::project::workspaces::project_gone(f) {
        return Err(here_now(f));
    }
    if out.is_empty() {
        let root = crate::project::workspaces::root()
            .map(|r| r.display().to_string())
            .unwrap_or_else(|e| e.to_string());
        return Err(Error::usage(format!(
            "no task workspaces in {root} were made for a project at {} (a project's path is recorded resolved, links followed; `loop gc --gone-projects` lists those kept for projects no longer where they were)",
            f.display()
        )));
    }
    Ok(out)
}

/// The refusal to forget the workspaces of a project that is at `at`.
fn here_now(at: &Path) -> Error {
    Error::usage(format!(
        "a project is at {} now: its tasks' workspaces stay (`loop gc --project {}` removes what its tasks no longer need)",
        at.display(),
        at.display()
    ))
}

/// `p` as a workspace marker records a project's path: absolute, its
/// longest part that still exists resolved by the kernel (links followed,
/// as the project's path was when it was recorded), the rest as given,
/// with `.` and `..` taken by name.
fn as_recorded(p: &Path) -> Result<PathBuf, Error> {
    use std::path::Component;
    let whole = match p.is_absolute() {
        true => p.to_path_buf(),
        false => std::env::current_dir()
            .map_err(|e| Error::usage(format!("current directory: {e}")))?
            .join(p),
    };
    let mut head: Vec<Component<'_>> = whole.components().collect();
    let mut rest = Vec::new();
    while let Some(last) = head.pop() {
        let Ok(mut at) = head
            .iter()
            .chain([&last])
            .collect::<PathBuf>()
            .canonicalize()
        else {
            rest.push(last);
            continue;
        };
        for c in rest.iter().rev() {
            match c {
                Component::ParentDir => {
                    at.pop();
                }
                Component::CurDir => {}
                c => at.push(c),
            }
        }
        return Ok(at);
    }
    Ok(loop_sandbox::confinement::normalize(&whole))
}

/// The worktrees git's porcelain listing names `prunable` (their
/// directories gone).
fn prunable_worktrees(listed: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut at: Option<&str> = None;
    for line in listed.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            at = Some(p);
        } else if line.starts_with("prunable")
            && let Some(p) = at
        {
            out.push(PathBuf::from(p));
        }
    }
    out
}

/// Collect what no task of `project` needs.
pub fn gc(project: &Path, dry_run: bool) -> Result<Collected, Error> {
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let mut out = Collected {
        dry_run,
        ..Default::default()
    };
    let store = crate::project::locate::open_store(&project).ok();
    let killed = store
        .as_ref()
        .map(|s| crate::project::preparing::killed(&project, &**s))
        .unwrap_or_default();
    let tasks = Tasks {
        store,
        dir: project.join(".loop").join("tasks"),
        hour_ago: std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
        killed,
        project: project.clone(),
    };
    killed_preparations(&project, &tasks, &mut out);
    orphans(&project, &tasks, &mut out);
    // Worktrees git still records whose directories are gone (an orphan's
    // just removed among them: its branch is deleted below once its record
    // is gone). git names them `prunable` in its porcelain listing (its
    // `prune --dry-run` says so on stderr only); a git too old to say is
    // pruned all the same.
    // Only when every record git would prune is one of Loop's (a task's
    // worktree, beside its workspace or in the project's `.loop`): a
    // worktree of the person's own whose directory is away for now (an
    // unmounted drive) is never pruned by Loop.
    if git(&project, &["rev-parse", "--git-dir"]).is_some() {
        let _one = loop_workspace::task_workspace::worktree_commands();
        let listed = git(&project, &["worktree", "list", "--porcelain"]).unwrap_or_default();
        let prunable = prunable_worktrees(&listed);
        let ours = |p: &Path| {
            p.starts_with(project.join(".loop"))
                || crate::project::workspaces::root().is_ok_and(|r| p.starts_with(r))
        };
        if !prunable.is_empty() && prunable.iter().all(|p| ours(p)) {
            if !dry_run {
                git(&project, &["worktree", "prune"]);
            }
            out.pruned_worktrees = true;
        }
    }
    branches(&project, &tasks, &mut out);
    scratch(&project, &tasks, &mut out);
    staged_layers(&project, tasks.hour_ago, &mut out);
    Ok(out)
}

/// What preparations killed before their task was stored left: their
/// workspace (with what was kept beside it), branch and directory.
fn killed_preparations(project: &Path, tasks: &Tasks, out: &mut Collected) {
    for id in &tasks.killed {
        let paths = crate::project::locate::TaskPaths::of(project, id);
        out.dirs
            .push((paths.near.display().to_string(), bytes_of(&paths.near)));
        if task_branches(project).iter().any(|b| b == id) {
            out.branches.push((
                format!("loop/{id}"),
                "its preparation was killed before the task was stored".into(),
            ));
        }
        if !out.dry_run {
            crate::project::preparing::clean(project, id);
        }
    }
}

/// Workspaces outside the project whose task is gone from it (its
/// `.loop/tasks/ID` removed by hand): nothing can apply, show or discard
/// them any more.
fn orphans(project: &Path, tasks: &Tasks, out: &mut Collected) {
    let Some(store) = tasks.store.as_ref() else {
        return;
    };
    for near in crate::project::workspaces::orphans(project) {
        let id = near
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // (A new task's directory is made before its workspace: one being
        // prepared is never taken for an orphan.)
        let live = store
            .task(&id)
            .is_ok_and(|t| crate::project::locate::liveness(&t) == crate::Liveness::Running);
        if live {
            continue;
        }
        out.dirs.push((near.display().to_string(), bytes_of(&near)));
        if !out.dry_run {
            let _ = crate::project::workspaces::remove_near(&near);
        }
    }
}

/// The `loop/ID` branches no task needs: of no task here, applied, or
/// whose workspace is gone.
#[allow(clippy::disallowed_methods)] // the runtime's own task directories
fn branches(project: &Path, tasks: &Tasks, out: &mut Collected) {
    for id in task_branches(project) {
        let dir = tasks.dir.join(&id);
        let paths = crate::project::locate::TaskPaths::of(project, &id);
        let has_workspace = std::fs::symlink_metadata(&paths.workspace).is_ok_and(|m| m.is_dir());
        let why = if !loop_workspace::door::is_dir(project, Path::new(".loop/tasks").join(&id)) {
            Some("no such task here")
        } else if tasks.running(&id) {
            None
        } else if dir.join("applied").exists() {
            Some("its change set is applied")
        } else if !has_workspace {
            Some("its workspace is gone")
        } else {
            None
        };
        let Some(why) = why else { continue };
        let done = out.dry_run
            || match crate::project::locate::load_origin(&paths) {
                Ok(ws) if has_workspace => ws.drop_branch().is_ok(),
                // No workspace of its own: the branch is checked out nowhere.
                _ => git(project, &["branch", "-D", &format!("loop/{id}")]).is_some(),
            };
        if done {
            out.branches.push((format!("loop/{id}"), why.to_string()));
        }
    }
}

/// Scratch the verifier and the critic left in tasks that are not running
/// (views, seals, an empty workspace), and the kept builds of ended ones.
#[allow(clippy::disallowed_methods)] // the runtime's own task directories
fn scratch(project: &Path, tasks: &Tasks, out: &mut Collected) {
    let mut ids: Vec<String> = std::fs::read_dir(&tasks.dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    for id in ids {
        if tasks.running(&id) || !crate::project::locate::is_task_id(&id) {
            continue;
        }
        let near = crate::project::locate::TaskPaths::of(project, &id).near;
        for name in ["scratch", "empty-workspace", crate::task::prepare::BUILDS] {
            if name == crate::task::prepare::BUILDS && !tasks.ended(&id) {
                continue;
            }
            let at = near.join(name);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                let shown = match at.strip_prefix(project) {
                    Ok(rel) => rel.display().to_string(),
                    Err(_) => at.display().to_string(),
                };
                out.dirs.push((shown, bytes_of(&at)));
                if !out.dry_run {
                    let _ = loop_workspace::remove_tree(&at);
                }
            }
        }
    }
}

/// Setup layers a run that died was assembling (`.new-KEY-TASK`), an hour
/// old or more.
#[allow(clippy::disallowed_methods)] // the runtime's own layer directory
fn staged_layers(project: &Path, hour_ago: std::time::SystemTime, out: &mut Collected) {
    let layers = project.join(".loop").join("layers");
    let mut staged: Vec<PathBuf> = std::fs::read_dir(&layers)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".new-"))
                .filter(|e| {
                    e.metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t < hour_ago)
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    staged.sort();
    for at in staged {
        let rel = at
            .strip_prefix(project)
            .unwrap_or(&at)
            .display()
            .to_string();
        out.dirs.push((rel, bytes_of(&at)));
        if !out.dry_run {
            let _ = loop_workspace::remove_tree(&at);
        }
    }
}
