//! Where a task lives and how it is found: its directory and files, the
//! project's store, the record of how its workspace was made, what it
//! started as, and whether a process runs it. Most modules of the
//! runtime build on this one; it builds only on the error type, task ids
//! (`ids`) and where workspaces are (`workspaces`).

use crate::Error;
pub use crate::project::ids::{is_task_id, new_task_id};
use loop_core::Clock;
use loop_store::{Claim, Owner, Store};
use loop_workspace::{Manifest, Origin, TaskWorkspace};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The project a directory belongs to: inside a git repository (in a part
/// git does not ignore), the repository's top level when it holds a
/// `Loopfile.yaml`, else the nearest directory below it that does (a
/// monorepo's package), else the top level itself; outside
/// one (or in an ignored part, such as a task's own workspace under
/// `.loop/`), the directory itself. So every command run from a
/// subdirectory finds the same `.loop/` and Loopfile. The runtime opened
/// on a subdirectory ([`crate::Runtime::open`]) is the project's.
pub fn project_root(dir: &Path) -> Result<PathBuf, Error> {
    let dir = dir
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", dir.display())))?;
    if loop_workspace::surely_no_repository(&dir) {
        return Ok(dir);
    }
    let git = |args: &[&str]| {
        let mut c = std::process::Command::new("git");
        // The repository is the directory's, whatever the caller's GIT_*.
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_COMMON_DIR",
            "GIT_CEILING_DIRECTORIES",
        ] {
            c.env_remove(var);
        }
        c.arg("-C")
            .arg(&dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
    };
    let Some(top) = git(&["rev-parse", "--show-toplevel"])
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .and_then(|t| t.canonicalize().ok())
    else {
        return Ok(dir);
    };
    if top == dir {
        return Ok(dir);
    }
    // An ignored directory is not the repository's project.
    if git(&["check-ignore", "-q", "."]).is_some_and(|o| o.status.success()) {
        return Ok(dir);
    }
    // The top's Loopfile makes the top the project; else the nearest
    // package below it with its own (a monorepo's). A Loopfile that is a
    // link makes no project.
    let loopfile_at = |d: &Path| loop_workspace::door::is_file(d, "Loopfile.yaml");
    if loopfile_at(&top) {
        return Ok(top);
    }
    for a in dir.ancestors() {
        if a == top {
            break;
        }
        if loopfile_at(a) {
            return Ok(a.to_path_buf());
        }
    }
    Ok(top)
}

/// The store a front end was told to use (`loop --store URL`), ahead of
/// `LOOP_STORE_URL` and the Loopfile's `store:`.
static STORE_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Use the store at `url` for every project this process opens
/// (`loop --store`). Set once, before any store is opened.
pub fn set_store_url(url: &str) {
    let _ = STORE_URL.set(url.to_string());
}

/// Where the project's store is, and who said so: `--store`, then
/// `LOOP_STORE_URL`, then the Loopfile's `store:`; else `None`, the
/// embedded SQLite file `.loop/loop.db`.
pub fn store_url(project: &Path) -> Result<Option<(String, &'static str)>, Error> {
    if let Some(u) = STORE_URL.get() {
        return Ok(Some((u.clone(), "--store")));
    }
    if let Some(u) = std::env::var("LOOP_STORE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        return Ok(Some((u, "LOOP_STORE_URL")));
    }
    // The Loopfile is read only when it may name a store (every command
    // opens the store; most Loopfiles say nothing of it).
    let mentions = loop_workspace::door::read_text(
        project,
        "Loopfile.yaml",
        loop_workspace::door::MAX_PROJECT_FILE,
    )
    .ok()
    .flatten()
    .is_some_and(|t| t.lines().any(|l| l.starts_with("store:")));
    if mentions && let Some(u) = crate::loopfile::Loopfile::load(project)?.store {
        // A repository does not choose where this user's credentials and
        // records go: a cloned project's Loopfile could name a server of
        // its author's. The user says yes to it, once per environment.
        if std::env::var("LOOP_TRUST_LOOPFILE_STORE").as_deref() != Ok("1") {
            return Err(Error::usage(format!(
                "the Loopfile names the store {u}; a repository cannot choose where your tasks and credentials go: set LOOP_STORE_URL (or --store) to it, or LOOP_TRUST_LOOPFILE_STORE=1 to accept the Loopfile's"
            )));
        }
        return Ok(Some((u, "the Loopfile")));
    }
    Ok(None)
}

/// The password in a store URL (`scheme://user:PASSWORD@host/…`, the
/// user info ending at the last `@`), if any.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let auth = rest.rsplit_once('@')?.0;
    auth.split_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty())
}

/// The project's store: the one [`store_url`] names, else SQLite at
/// `.loop/loop.db`. A server store is shared by every caller in this
/// process (one pool); each SQLite open is a connection of its own.
#[allow(clippy::disallowed_methods)] // the runtime's own .loop directory
pub fn open_store(project: &Path) -> Result<std::sync::Arc<dyn Store>, Error> {
    let state = project.join(".loop");
    // The runtime's state is its own: a project (a cloned repository) that
    // brings a `.loop` of links would send the store, the tasks or the
    // receipts wherever they lead.
    for rel in [
        ".loop",
        ".loop/loop.db",
        ".loop/tasks",
        ".loop/receipts",
        ".loop/.gitignore",
    ] {
        if let Ok(loop_workspace::Node::Symlink(_) | loop_workspace::Node::Special(_)) =
            loop_workspace::door::node(project, rel)
        {
            return Err(Error::usage(format!(
                "{} is a link or a special file: the runtime keeps its state only in real files and directories (remove it)",
                project.join(rel).display()
            )));
        }
    }
    std::fs::create_dir_all(&state).map_err(|e| {
        let message = format!("cannot create {}: {e}", state.display());
        match e.kind() {
            // Not the runtime's failure: where it was asked to keep its
            // tasks cannot be written.
            std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied => {
                Error::usage(format!(
                    "{message}\nhint: the runtime keeps a project's tasks in its .loop/; run in a project you can write to"
                ))
            }
            _ => Error::internal(message),
        }
    })?;
    if !loop_workspace::door::is_file(project, ".loop/.gitignore") {
        loop_workspace::door::write(project, ".loop/.gitignore", b"*\n")
            .map_err(|e| Error::internal(e.to_string()))?;
    }
    match store_url(project)? {
        Some((url, from)) => {
            // Its password is a secret: no record shows it.
            if let Some(p) = url_password(&url) {
                loop_sandbox::redact::register_literal(p);
            }
            if let Ok(p) = std::env::var("PGPASSWORD") {
                loop_sandbox::redact::register_literal(&p);
            }
            loop_store::open_url(&url).map_err(|e| {
                let message = format!("the store {from} names cannot be opened: {e}");
                match e {
                    // Down now, not wrongly named: worth trying again.
                    loop_store::StoreError::Unavailable { .. } => Error::unavailable(message),
                    _ => Error::usage(message),
                }
                .because(e)
            })
        }
        None => Ok(loop_store::SqliteStore::open_shared(&state.join("loop.db"))
            .map_err(Error::from_cause)?),
    }
}

pub(crate) fn store_err(e: loop_store::StoreError) -> Error {
    match e {
        loop_store::StoreError::NoSuchTask(_) => Error::not_found(e.to_string()).because(e),
        loop_store::StoreError::NotHolder { .. } => Error::conflict(e.to_string()).because(e),
        loop_store::StoreError::Unavailable { .. } => Error::unavailable(e.to_string()).because(e),
        other => Error::from_cause(other),
    }
}

pub(crate) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let text = serde_json::to_vec(value).map_err(Error::from_cause)?;
    loop_workspace::write_atomic(path, &text)
        .map_err(|e| Error::internal(format!("{}: {e}", path.display())))
}

#[allow(clippy::disallowed_methods)] // the runtime's own records in its task directories
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text =
        std::fs::read(path).map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| Error::internal(format!("{}: {e}", path.display())))
}

/// Which project a task belongs to: the id its Loopfile names
/// (`project: {id: …}`, committed, so every clone of it is the same
/// project) or else one made when the project was first used and kept in
/// `.loop/project-id` (so a clone is a project of its own); and the
/// repository's root commit, where there is one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProjectIdentity {
    /// The id.
    pub id: String,
    /// The repository's first commit (`git rev-list --max-parents=0 HEAD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_commit: Option<String>,
}

/// This project's identity, and the other projects whose tasks it runs
/// too (the Loopfile's `project.serves`).
#[derive(Debug, Clone)]
pub struct ProjectScope {
    /// This project.
    pub identity: ProjectIdentity,
    /// Others it serves.
    pub serves: Vec<String>,
}

impl ProjectScope {
    /// Whether a task of project `owner` is this project's to run. A task
    /// recorded before projects had identities names none, and is.
    pub fn takes(&self, owner: Option<&ProjectIdentity>) -> bool {
        owner.is_none_or(|o| o.id == self.identity.id || self.serves.contains(&o.id))
    }
}

/// The project a stored task belongs to, if its record says.
pub(crate) fn stored_project(t: &loop_store::TaskRecord) -> Option<ProjectIdentity> {
    t.request
        .get("project_identity")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// The project's identity and what it serves (see [`ProjectIdentity`]).
pub fn project_scope(project: &Path) -> Result<ProjectScope, Error> {
    let loopfile = crate::loopfile::Loopfile::load(project)?;
    let id = match loopfile.project.id {
        Some(id) => id,
        None => own_project_id(project)?,
    };
    Ok(ProjectScope {
        identity: ProjectIdentity {
            id,
            root_commit: root_commit(project),
        },
        serves: loopfile.project.serves,
    })
}

/// `.loop/project-id`, made on first use (by exactly one process: the
/// file is created exclusively, never through a link).
#[allow(clippy::disallowed_methods)] // the runtime's own .loop directory, the file created O_EXCL (no link followed)
fn own_project_id(project: &Path) -> Result<String, Error> {
    const REL: &str = ".loop/project-id";
    let read = || -> Result<Option<String>, Error> {
        Ok(loop_workspace::door::read_text(project, REL, 256)
            .map_err(|e| Error::usage(e.to_string()))?
            .map(|t| t.trim().to_string()))
    };
    for _ in 0..50 {
        match read()? {
            Some(id) if crate::loopfile::project_id_problem(&id).is_none() => return Ok(id),
            Some(id) if !id.is_empty() => {
                return Err(Error::usage(format!(
                    "{}: {} (remove it and a new one is made, or name the project in the Loopfile's `project.id`)",
                    project.join(REL).display(),
                    crate::loopfile::project_id_problem(&id).unwrap_or_default()
                )));
            }
            // Being written by another process this moment.
            Some(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            None => {
                std::fs::create_dir_all(project.join(".loop"))
                    .map_err(|e| Error::internal(format!("cannot create .loop: {e}")))?;
                let id = format!("p-{}{}", random_token()?, random_token()?);
                match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(project.join(REL))
                {
                    Ok(mut f) => {
                        std::io::Write::write_all(&mut f, format!("{id}\n").as_bytes())
                            .and_then(|_| f.sync_all())
                            .map_err(|e| Error::internal(format!("{REL}: {e}")))?;
                        return Ok(id);
                    }
                    // Another process made it first: theirs is the id.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::internal(format!("{REL}: {e}"))),
                }
            }
        }
    }
    Err(Error::internal(format!(
        "{} stays empty",
        project.join(REL).display()
    )))
}

/// The repository's root commit, if the project is a repository with one.
fn root_commit(project: &Path) -> Option<String> {
    if loop_workspace::surely_no_repository(project) {
        return None;
    }
    let text = git_output(project, &["rev-list", "--max-parents=0", "HEAD"])?;
    // The last line: the oldest root where histories were joined.
    let c = text.lines().last()?.trim().to_string();
    (c.len() >= 40 && c.bytes().all(|b| b.is_ascii_hexdigit())).then_some(c)
}

/// What `git -C dir ARGS` prints, when it succeeds (the caller's
/// `GIT_DIR`/`GIT_WORK_TREE` never redirect it; no input).
pub(crate) fn git_output(dir: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn random_token() -> Result<String, Error> {
    loop_protocol::random::hex::<8>().map_err(Error::from_cause)
}

/// `PROJECT/.loop/tasks/ID`: where task `task_id`'s own files are.
pub fn task_dir(project: &Path, task_id: &str) -> PathBuf {
    project.join(".loop").join("tasks").join(task_id)
}

/// Where a task's files are.
pub(crate) struct TaskPaths {
    /// `.loop/tasks/ID`: the task's records.
    pub task_dir: PathBuf,
    /// The directory of the task's workspace and of everything shaped like
    /// one kept beside it (check views, journals, command staging, layers):
    /// outside the project (see [`crate::project::workspaces`]), or `task_dir` for a
    /// task made before workspaces moved.
    pub near: PathBuf,
    /// `near/workspace`.
    pub workspace: PathBuf,
    /// `.loop/receipts`.
    pub receipts: PathBuf,
}

impl TaskPaths {
    /// The paths of task `task_id` of `project` (canonical).
    pub fn of(project: &Path, task_id: &str) -> Self {
        let state = project.join(".loop");
        let task_dir = state.join("tasks").join(task_id);
        let near = crate::project::workspaces::near_of(project, &task_dir, task_id);
        TaskPaths {
            workspace: near.join("workspace"),
            receipts: state.join("receipts"),
            near,
            task_dir,
        }
    }

    /// The paths of a new task, its near directory made (empty).
    pub fn made(project: &Path, task_id: &str) -> Result<Self, Error> {
        let state = project.join(".loop");
        // The task's directory first: `loop gc` takes a workspace whose
        // task directory is gone for an orphan.
        #[allow(clippy::disallowed_methods)] // the runtime's own task directory
        std::fs::create_dir_all(state.join("tasks").join(task_id))
            .map_err(|e| Error::internal(format!("task directory: {e}")))?;
        let near = crate::project::workspaces::make_near(project, task_id)?;
        Ok(TaskPaths {
            workspace: near.join("workspace"),
            receipts: state.join("receipts"),
            near,
            task_dir: state.join("tasks").join(task_id),
        })
    }
}

/// What the task's workspace started as.
pub(crate) struct Start {
    pub task_ws: TaskWorkspace,
    pub baseline: Manifest,
    pub baseline_report: Option<loop_protocol::VerificationReport>,
    /// The workspace was deleted behind the runtime's back.
    pub gone: bool,
}

impl Start {
    /// What the task's directory says it started as. A workspace deleted
    /// behind the runtime's back (by hand, or a discard that raced a crash)
    /// can be neither resumed nor verified: the task ends in error with a
    /// receipt that says so, over an empty stand-in, and no change set
    /// (nothing of it can be applied).
    #[allow(clippy::disallowed_methods)] // lstat of the runtime's own task workspace
    pub(crate) fn load(paths: &TaskPaths) -> Result<Start, Error> {
        let gone = std::fs::symlink_metadata(&paths.workspace).is_err();
        if gone {
            // The stand-in's directory, made as safely as a new task's.
            let project = paths.task_dir.ancestors().nth(3);
            if paths.near != paths.task_dir
                && std::fs::symlink_metadata(&paths.near).is_err()
                && let (Some(project), Some(id)) = (project, paths.task_dir.file_name())
            {
                crate::project::workspaces::make_near(project, &id.to_string_lossy())?;
            }
            std::fs::create_dir_all(&paths.workspace)
                .map_err(|e| Error::internal(format!("workspace: {e}")))?;
        }
        Ok(Start {
            task_ws: load_origin(paths)?,
            baseline: read_json(&paths.task_dir.join("baseline.json"))?,
            baseline_report: read_json(&paths.task_dir.join("baseline-report.json"))?,
            gone,
        })
    }
}

/// A worktree's repository, readable in commands and checks (git status,
/// diff and log work there); never writable.
pub(crate) fn git_dir(origin: &Origin) -> Option<PathBuf> {
    match origin {
        Origin::Worktree { repo, .. } => {
            Some(repo.join(".git")).filter(|_| loop_workspace::door::is_dir(repo, ".git"))
        }
        Origin::Copy { .. } => None,
    }
}

#[derive(Serialize, Deserialize)]
struct SavedOrigin {
    path: PathBuf,
    worktree: Option<(PathBuf, String, String)>,
}

/// Remember how the task workspace was made (for `discard`).
#[allow(clippy::disallowed_methods)] // the task directory the runtime made
pub fn save_origin(task_dir: &Path, ws: &TaskWorkspace) -> std::io::Result<()> {
    let saved = SavedOrigin {
        path: ws.path.clone(),
        worktree: match &ws.origin {
            Origin::Worktree {
                repo,
                base_commit,
                branch,
                ..
            } => Some((repo.clone(), base_commit.clone(), branch.clone())),
            Origin::Copy { .. } => None,
        },
    };
    std::fs::create_dir_all(task_dir)?;
    let text = serde_json::to_vec_pretty(&saved).map_err(std::io::Error::other)?;
    std::fs::write(task_dir.join("workspace.json"), text)
}

/// How the task workspace of `paths` was made. `workspace.json` is the
/// runtime's own file, but it lives in the project, where a repository can
/// commit one or a model's apply could plant one: no path in it is
/// trusted. The workspace is always the one [`TaskPaths`] resolves, the
/// repository the project, the branch `loop/ID`, and the base commit must
/// be a commit id; a file whose path has neither the old shape
/// (`.loop/tasks/ID/workspace`) nor a near directory's of this task, or
/// that says otherwise, is refused, naming what differs.
#[allow(clippy::disallowed_methods)] // the runtime's own record of a task's workspace
pub(crate) fn load_origin(paths: &TaskPaths) -> Result<TaskWorkspace, Error> {
    let task_dir = paths.task_dir.as_path();
    let text = std::fs::read(task_dir.join("workspace.json")).map_err(|e| {
        Error::usage(format!(
            "no task workspace recorded in {}: {e}",
            task_dir.display()
        ))
    })?;
    let saved: SavedOrigin = serde_json::from_slice(&text)
        .map_err(|e| Error::internal(format!("workspace.json: {e}")))?;
    let id = task_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let project = task_dir
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .ok_or_else(|| {
            Error::internal(format!("{} is not a task directory", task_dir.display()))
        })?;
    let path = paths.workspace.clone();
    let refuse = |what: String| {
        Error::usage(format!(
            "{}: {what}; the runtime only acts on the workspaces it makes (was the project moved, or the file planted?)",
            task_dir.join("workspace.json").display()
        ))
    };
    // The recorded path is information (another machine's, or from before
    // the project moved): only its shape is checked.
    crate::project::workspaces::classify(&saved.path, &id)
        .map_err(|why| refuse(format!("{why}, not {}", path.display())))?;
    let origin = match saved.worktree {
        Some((_repo, base_commit, branch)) => {
            let hex = base_commit.len() >= 40
                && base_commit.len() <= 64
                && base_commit.bytes().all(|b| b.is_ascii_hexdigit());
            if !hex {
                return Err(refuse(format!("`{base_commit}` is not a commit id")));
            }
            if branch != format!("loop/{id}") {
                return Err(refuse(format!(
                    "it names the branch `{branch}`, not `loop/{id}`"
                )));
            }
            Origin::Worktree {
                repo: project.to_path_buf(),
                base_commit,
                branch,
                dirty_included: false,
            }
        }
        None => Origin::Copy {
            skipped: Vec::new(),
        },
    };
    Ok(TaskWorkspace { path, origin })
}

/// Whether a task's runtime is with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Not over, and a live process runs it.
    Running,
    /// Not over, and its runtime is gone (`loop resume` goes on).
    Interrupted,
    /// It has ended.
    Over,
}

/// Whether a task is running in a live process now, interrupted, or over.
/// An owner on another machine is running while its lease holds.
pub fn liveness(t: &loop_store::TaskRecord) -> Liveness {
    let now = loop_core::SystemClock.now_ms();
    match &t.owner {
        _ if t.is_terminal() => Liveness::Over,
        Some(o) if !o.is_dead() && !o.expired(LEASE_MS, now) => Liveness::Running,
        _ => Liveness::Interrupted,
    }
}

/// Whether task `id` of `project` is running in a live process now.
pub fn is_running(project: &Path, id: &str) -> Result<bool, Error> {
    let store = open_store(project)?;
    Ok(store
        .task(id)
        .is_ok_and(|t| liveness(&t) == Liveness::Running))
}

/// How long a claim lasts without a heartbeat (the owner is also checked
/// for being alive, so a killed runtime's task is free at once).
pub(crate) const LEASE_MS: u64 = 15_000;

/// Claim `task_id` for this process, or say who holds it.
pub(crate) fn claim(store: &dyn Store, task_id: &str, clock: &dyn Clock) -> Result<Owner, Error> {
    let owner = Owner::this_process(random_token()?, clock.now_ms());
    match store
        .claim(task_id, &owner, LEASE_MS, clock.now_ms())
        .map_err(store_err)?
    {
        Claim::Claimed => Ok(owner),
        Claim::Held(o) => Err(Error::usage(format!(
            "task {task_id} is running in process {}{} (loop cancel {task_id} stops it)",
            o.pid,
            if o.is_local() {
                ""
            } else {
                " on another machine"
            }
        ))),
        Claim::Terminal => Err(Error::usage(format!("task {task_id} has already ended"))),
    }
}

/// The marker `loop discard` leaves in a task's directory: its workspace
/// is gone, and nothing is applied, discarded again or resumed from it.
pub(crate) const DISCARDED: &str = "discarded";

/// Whether task `id` of `project` (canonical) was discarded.
pub(crate) fn discarded(project: &Path, id: &str) -> bool {
    matches!(
        loop_workspace::door::node(project, Path::new(".loop/tasks").join(id).join(DISCARDED)),
        Ok(loop_workspace::Node::File { .. })
    )
}

/// The count of what a task's own commands wrote, kept in its directory.
pub(crate) const WRITTEN: &str = "written";

/// The children whose writes a task was charged with, a line each (`ID
/// BYTES`), kept in its directory.
pub(crate) const CHARGED: &str = "written-by-children";

/// The count kept at `file` (0 when none is, or it cannot be read).
#[allow(clippy::disallowed_methods)] // a count in the task directory the runtime made
pub(crate) fn written_so_far(file: &Path) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The children task directory `dir` lists as charged to its task, each
/// with what it wrote ([`CHARGED`]; none when the list is missing).
#[allow(clippy::disallowed_methods)] // a list in the task directory the runtime made
pub(crate) fn charged_children(dir: &Path) -> std::io::Result<Vec<(String, u64)>> {
    let text = match std::fs::read_to_string(dir.join(CHARGED)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .map(|l| {
            l.split_once(' ')
                .and_then(|(id, n)| Some((id.to_string(), n.parse().ok()?)))
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "{}: a line is not `ID BYTES` ({l:?}): the runtime writes this list of the child tasks charged to this one; restore it, or end the line with what that child wrote",
                            dir.join(CHARGED).display()
                        ),
                    )
                })
        })
        .collect()
}

/// What the task whose directory is `dir` wrote in all: its own commands'
/// count and each child's charged to it (what the list says, or what the
/// child has written in all since, if more: a child a person resumed by
/// hand counts too), with that children's part.
pub(crate) fn written_in_all(dir: &Path) -> std::io::Result<(u64, u64)> {
    written_below(dir, 0)
}

/// [`written_in_all`], `depth` levels below the task asked about.
fn written_below(dir: &Path, depth: u32) -> std::io::Result<(u64, u64)> {
    let mut charged = 0u64;
    for (id, listed) in charged_children(dir)? {
        let now = match dir.parent() {
            // (Children are at most a few levels deep; a list that goes
            // on is not followed.)
            Some(tasks) if depth < 8 && !id.contains('/') && !id.starts_with('.') => {
                written_below(&tasks.join(&id), depth + 1)?.0
            }
            _ => 0,
        };
        charged = charged.saturating_add(listed.max(now));
    }
    Ok((
        written_so_far(&dir.join(WRITTEN)).saturating_add(charged),
        charged,
    ))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod root_tests {
    use super::*;

    #[test]
    fn each_store_failure_is_its_own_kind_of_error() {
        use crate::error::ErrorKind;
        let kind = |e| store_err(e).kind;
        assert_eq!(
            kind(loop_store::StoreError::NoSuchTask("t".into())),
            ErrorKind::NotFound
        );
        assert_eq!(
            kind(loop_store::StoreError::NotHolder { task: "t".into() }),
            ErrorKind::Conflict
        );
        assert_eq!(
            kind(loop_store::StoreError::Unavailable {
                path: "db".into(),
                message: "refused".into()
            }),
            ErrorKind::Unavailable
        );
        assert_eq!(
            kind(loop_store::StoreError::Db {
                path: "db".into(),
                message: "syntax".into()
            }),
            ErrorKind::Internal
        );
    }

    #[test]
    fn a_loopfile_store_needs_the_users_yes_and_never_holds_a_password() {
        let base = std::env::temp_dir().join(format!("loop-store-url-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        // (No test of this crate sets LOOP_STORE_URL or --store.)
        assert!(store_url(&base).unwrap().is_none());
        std::fs::write(
            base.join("Loopfile.yaml"),
            "version: 1\nstore: postgres://loop@db.example:5432/loop\n",
        )
        .unwrap();
        let e = store_url(&base).unwrap_err();
        assert!(
            e.message.contains("LOOP_TRUST_LOOPFILE_STORE=1")
                && e.message.contains("postgres://loop@db.example:5432/loop"),
            "{}",
            e.message
        );
        for bad in [
            "postgres://loop:secret@db/loop",
            "postgres://loop:se/cr@et@db/loop",
            "postgres://db/loop?password=secret",
        ] {
            let text = format!("version: 1\nstore: {bad}\n");
            let e = crate::loopfile::Loopfile::parse(&text, "Loopfile.yaml").unwrap_err();
            assert!(
                e.message.contains("holds a password"),
                "{bad}: {}",
                e.message
            );
        }
        assert!(crate::loopfile::Loopfile::parse("store: redis://x\n", "L").is_err());
        assert_eq!(url_password("postgres://u:p/w@h/db"), Some("p/w"));
        assert_eq!(url_password("postgres://u@h/db"), None);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_subdirectory_belongs_to_its_repository_or_the_nearest_loopfile() {
        let base = std::env::temp_dir().join(format!("loop-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for d in [
            "repo/src/deep",
            "repo/pkg/inner",
            "repo/build/out",
            "plain/sub",
        ] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("repo/.gitignore"), "build/\n").unwrap();
        std::fs::write(base.join("repo/pkg/Loopfile.yaml"), "version: 1\n").unwrap();
        let st = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(base.join("repo"))
            .status()
            .unwrap();
        assert!(st.success());
        let root = |d: &str| project_root(&base.join(d)).unwrap();
        let canon = |d: &str| base.join(d).canonicalize().unwrap();
        assert_eq!(root("repo"), canon("repo"));
        assert_eq!(root("repo/src/deep"), canon("repo"));
        // A package with its own Loopfile is its own project...
        assert_eq!(root("repo/pkg/inner"), canon("repo/pkg"));
        // ...unless the top has one: then the top is the project.
        std::fs::write(base.join("repo/Loopfile.yaml"), "version: 1\n").unwrap();
        assert_eq!(root("repo/pkg/inner"), canon("repo"));
        std::fs::remove_file(base.join("repo/Loopfile.yaml")).unwrap();
        // A Loopfile that is a link makes no project.
        std::fs::remove_file(base.join("repo/pkg/Loopfile.yaml")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", base.join("repo/pkg/Loopfile.yaml")).unwrap();
        assert_eq!(root("repo/pkg/inner"), canon("repo"));
        // What git ignores is not the repository's project.
        assert_eq!(root("repo/build/out"), canon("repo/build/out"));
        // Outside a repository: the directory itself.
        assert_eq!(root("plain/sub"), canon("plain/sub"));
        let _ = std::fs::remove_dir_all(&base);
    }
}
