//! The task's workspace, kept in the store. A task's workspace lives where
//! its runtime runs, as a copy the runtime keeps; the store holds the
//! truth of it:
//!
//! - when the task is made, how its workspace was made (`origin`: the base
//!   commit, or a copy of the project), its baseline manifest and the
//!   baseline's check report, and the contents of the uncommitted files it
//!   carried in;
//! - after every step that changed the workspace, before the step's
//!   observation is recorded, its state as a [`Delta`] from the baseline
//!   (`tree`), with every content the delta names, in the same
//!   transaction, and only while this runtime holds the task's claim
//!   (contents no state names any more are dropped).
//!
//! The runtime that takes a task up compares its copy of the workspace (if
//! any) with the recorded state. When they differ (the task never ran on
//! this machine, or moved on and came back, or a step here stopped between
//! its change and its record, or the machine went down before the
//! workspace reached its disk) it brings the copy to the recorded state
//! (made again from the base commit when it must be), and goes on only
//! when the rebuilt tree's Merkle root is the recorded one. So the
//! workspace needs no sync of its own: the store's commits are its
//! durability.

use crate::Error;
use crate::project::locate::{TaskPaths, load_origin, read_json, store_err};
use loop_store::Store;
use loop_workspace::{Delta, Entry, EntryKind, Manifest, TaskWorkspace};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// How the workspace was made (`workspace.json`).
const ORIGIN: &str = "origin";
/// The baseline manifest (`baseline.json`).
const BASELINE: &str = "baseline";
/// The baseline's check report (`baseline-report.json`).
const BASELINE_REPORT: &str = "baseline-report";
/// The workspace's state now ([`Kept`]).
const TREE: &str = "tree";

/// The largest file whose content is kept (a bigger one leaves the task
/// unable to move: said when it is tried).
const MAX_KEPT_FILE: u64 = 64 << 20;

/// The state of a task's workspace as the store keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    /// From the baseline.
    delta: Delta,
    /// Paths whose content could not be kept (too large, or a name that
    /// is not UTF-8): a rebuild elsewhere is refused, naming them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unkept: Vec<String>,
}

/// Keep what a new task's workspace was made from, for a store that
/// runtimes on other machines share; nothing otherwise. Not waited for on
/// the disk: the caller stores the task's record next, and waits for it.
#[allow(clippy::disallowed_methods)] // the runtime's own records in a task directory
pub(crate) fn keep_start(
    store: &dyn Store,
    task_id: &str,
    paths: &TaskPaths,
    carried: &[String],
    now_ms: u64,
) -> Result<(), Error> {
    let read = |name: &str| {
        std::fs::read_to_string(paths.task_dir.join(name))
            .map_err(|e| Error::internal(format!("{name}: {e}")))
    };
    let baseline_text = read("baseline.json")?;
    // The uncommitted files carried in are not in the base commit.
    let baseline: Manifest = serde_json::from_str(&baseline_text).map_err(Error::from_cause)?;
    let carried: HashSet<&str> = carried.iter().map(String::as_str).collect();
    let tree = loop_workspace::untrusted::Tree::open(&paths.workspace)
        .map_err(|e| Error::internal(format!("workspace: {e}")))?;
    let mut blobs = Vec::new();
    for e in baseline
        .entries
        .iter()
        .filter(|e| carried.contains(e.path.as_str()))
    {
        if let Some(bytes) = content(&tree, e) {
            blobs.push((e.sha256.clone(), bytes));
        }
    }
    // The carried contents are kept apart from the steps' (which a later
    // state drops when it no longer names them).
    let put = |owner: &str, name: &str, body: &str, blobs: &[(String, Vec<u8>)]| {
        let file = loop_store::TaskFile {
            name,
            body,
            blobs,
            keep_only: None,
            // Not waited for: the task's record, stored next and waited
            // for, takes them to the disk (never reordered after it); a
            // machine lost before that loses the task with them.
            durable: false,
        };
        store
            .put_task_file(owner, &file, None, now_ms)
            .map_err(store_err)
    };
    if !blobs.is_empty() {
        put(&start_owner(task_id), BASELINE, "", &blobs)?;
    }
    put(task_id, BASELINE, &baseline_text, &[])?;
    put(
        task_id,
        BASELINE_REPORT,
        &read("baseline-report.json")?,
        &[],
    )?;
    put(task_id, ORIGIN, &read("workspace.json")?, &[])
}

/// When a task's change set was applied or discarded (kept with
/// `workspace.kept_days`).
const RELEASED: &str = "released";

/// Task `task_id`'s change set was applied or its workspace discarded:
/// what the store keeps of its workspace (to rebuild it on another
/// machine) is not needed any more. Dropped now, or with the Loopfile's
/// `workspace.kept_days` marked and dropped by the first apply or discard
/// that many days later (older marked ones are dropped on the way). A
/// failure is said, never fatal: the apply or discard stands.
pub(crate) fn release(project: &Path, task_id: &str, out: &mut dyn crate::Observer) {
    // A Loopfile that cannot be read may have asked to keep them: kept.
    let days = match crate::loopfile::Loopfile::load(project) {
        Ok(l) => l.kept_days,
        Err(e) => {
            out.note(&format!(
                "what the store keeps of task {task_id}'s workspace is kept: the Loopfile cannot be read ({e})"
            ));
            return;
        }
    };
    let (store, scope) = match (
        crate::project::locate::open_store(project),
        crate::project::locate::project_scope(project),
    ) {
        (Ok(s), Ok(p)) => (s, p),
        (Err(e), _) | (_, Err(e)) => {
            out.note(&format!(
                "warning: what the store keeps of task {task_id}'s workspace was not released: {e}"
            ));
            return;
        }
    };
    let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
    // A task not over may still be resumed elsewhere, from what is kept.
    if !store.task(task_id).is_ok_and(|t| t.is_terminal()) {
        return;
    }
    let drop_one = |id: &str, out: &mut dyn crate::Observer| {
        let had = store.task_file(id, ORIGIN).ok().flatten().is_some();
        match store.drop_task_contents(id) {
            Ok(freed) if had || freed > 0 => out.note(&format!(
                "dropped the store's copy of task {id}'s workspace (kept for a resume on another machine{})",
                if freed > 0 {
                    format!("; {} KiB freed", freed.div_ceil(1024))
                } else {
                    String::new()
                }
            )),
            Ok(_) => {}
            Err(e) => out.note(&format!(
                "warning: what the store keeps of task {id}'s workspace was not dropped: {e}"
            )),
        }
    };
    if days == 0 {
        drop_one(task_id, out);
    } else {
        let marked = store.put_task_file(
            task_id,
            &loop_store::TaskFile {
                name: RELEASED,
                body: &now.to_string(),
                blobs: &[],
                keep_only: None,
                durable: true,
            },
            None,
            now,
        );
        if let Err(e) = marked {
            out.note(&format!(
                "warning: task {task_id}'s release was not recorded: {e}"
            ));
        }
    }
    // Those whose days are over.
    let Ok(tasks) = store.tasks() else {
        return;
    };
    let window = days.saturating_mul(24 * 3600 * 1000);
    for t in tasks {
        if !t.is_terminal() || !scope.takes(crate::project::locate::stored_project(&t).as_ref()) {
            continue;
        }
        let released = store.task_file(&t.id, RELEASED).ok().flatten();
        if let Some(at) = released.and_then(|b| b.trim().parse::<u64>().ok())
            && now.saturating_sub(at) >= window
        {
            drop_one(&t.id, out);
        }
    }
}

/// Where a task's carried-in contents are kept.
fn start_owner(task_id: &str) -> String {
    format!("{task_id}/start")
}

/// A file's or link's content, read without following a link; `None`
/// when it cannot be kept (too large, gone, or a name that is not UTF-8).
fn content(tree: &loop_workspace::untrusted::Tree, e: &Entry) -> Option<Vec<u8>> {
    if e.raw_path.is_some() {
        return None;
    }
    let bytes = match e.kind {
        EntryKind::File => tree.read_file(&e.path, MAX_KEPT_FILE).ok()?,
        EntryKind::Symlink => match tree.node(&e.path).ok()? {
            loop_workspace::Node::Symlink(target) => target.into_os_string().into_encoded_bytes(),
            _ => return None,
        },
    };
    // Changed since it was hashed: not the content the entry names.
    (loop_protocol::hash::sha256_hex(&bytes) == e.sha256).then_some(bytes)
}

/// Keeps the workspace's state in the store after each step that changed
/// it (see the module's documentation).
pub struct Keeper {
    workspace: std::path::PathBuf,
    baseline: Manifest,
    /// The root of the last state kept (or on its way to the store).
    last: String,
    /// Contents the store holds (or will, with the pending state).
    sent: HashSet<String>,
    /// The state waiting for the ledger's next commit, which writes it in
    /// the same transaction as the entries (the step's observation
    /// among them), under the same claim.
    pub pending: TreeSlot,
    /// Set when a state could not be read to be kept: the ledger then
    /// records nothing more (no observation claims a state the store
    /// lacks).
    pub halt: Arc<OnceLock<String>>,
}

/// A kept state on its way to the store ([`Keeper::pending`]).
#[derive(Debug)]
pub struct PendingTree {
    body: String,
    blobs: Vec<(String, Vec<u8>)>,
    named: Vec<String>,
}

/// Where a [`PendingTree`] waits.
pub type TreeSlot = Arc<std::sync::Mutex<Option<PendingTree>>>;

impl PendingTree {
    /// The task file the ledger writes with its next commit.
    pub fn file(&self) -> loop_store::TaskFile<'_> {
        loop_store::TaskFile {
            name: TREE,
            body: &self.body,
            blobs: &self.blobs,
            keep_only: Some(&self.named),
            durable: false,
        }
    }
}

impl Keeper {
    pub(crate) fn new(
        baseline: Manifest,
        (kept_root, held): (String, HashSet<String>),
        workspace: &Path,
    ) -> Self {
        Keeper {
            workspace: workspace.to_path_buf(),
            baseline,
            last: kept_root,
            sent: held,
            pending: Arc::new(std::sync::Mutex::new(None)),
            halt: Arc::new(OnceLock::new()),
        }
    }

    /// Keep `now` (the workspace's manifest) as the task's state, if it is
    /// not the one kept already: it goes to the store with the ledger's
    /// next commit (the step's observation), never on its own.
    pub fn keep(&mut self, now: &Manifest) -> Result<(), Error> {
        if let Some(why) = self.halt.get() {
            return Err(Error::internal(why.clone()));
        }
        if now.root == self.last {
            return Ok(());
        }
        let fail = |halt: &OnceLock<String>, why: String| {
            let why = format!("the workspace's state could not be kept: {why}");
            let _ = halt.set(why.clone());
            Error::internal(why)
        };
        let delta = Delta::between(&self.baseline, now);
        let tree = loop_workspace::untrusted::Tree::open(&self.workspace)
            .map_err(|e| fail(&self.halt, format!("workspace: {e}")))?;
        let mut slot = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A state not yet written is replaced; what it carried and this
        // one names still goes.
        let mut blobs = slot.as_ref().map(|p| p.blobs.clone()).unwrap_or_default();
        let named: Vec<String> = delta.changed.iter().map(|e| e.sha256.clone()).collect();
        blobs.retain(|(sha, _)| named.contains(sha));
        let mut unkept = Vec::new();
        let mut missing = HashSet::new();
        for e in &delta.changed {
            if self.sent.contains(&e.sha256) || blobs.iter().any(|(s, _)| s == &e.sha256) {
                continue;
            }
            match content(&tree, e) {
                Some(bytes) => blobs.push((e.sha256.clone(), bytes)),
                None => {
                    unkept.push(e.path.clone());
                    missing.insert(e.sha256.clone());
                }
            }
        }
        let kept = Kept { delta, unkept };
        let body = serde_json::to_string(&kept).map_err(|e| fail(&self.halt, e.to_string()))?;
        self.sent = named
            .iter()
            .filter(|s| !missing.contains(*s))
            .cloned()
            .collect();
        self.last = kept.delta.root;
        *slot = Some(PendingTree { body, blobs, named });
        Ok(())
    }
}

/// The workspace's whole state now, every content it holds beyond the
/// baseline with it, and its root: what a store that lost a kept state
/// (the tail of its record, after a database restart) is given again.
pub fn whole_state(workspace: &Path, baseline: &Manifest) -> Result<(String, PendingTree), Error> {
    let now = Manifest::of(workspace).map_err(|e| Error::internal(format!("workspace: {e}")))?;
    let mut keeper = Keeper::new(baseline.clone(), (String::new(), HashSet::new()), workspace);
    keeper.keep(&now)?;
    let tree = keeper
        .pending
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
        .ok_or_else(|| Error::internal("no state was made"))?;
    Ok((now.root, tree))
}

/// What [`settle`] found.
pub(crate) struct WorkspaceSettled {
    /// The root of the state the store keeps (the workspace's, now).
    pub root: String,
    /// The workspace was made again from the record.
    pub rebuilt: bool,
    /// The contents the store holds for the state.
    pub held: HashSet<String>,
}

/// Why the store's record of the workspace is not the signed ledger's, if
/// it is not: its start, and its state now (or, with a call in flight,
/// possibly that call's effect, which the call's rules then settle).
fn unlike_ledger(
    history: &[loop_protocol::Event],
    baseline: &Manifest,
    target: &Manifest,
) -> Option<String> {
    let (started, recorded, in_flight) = ledger_roots(history);
    if let Some(started) = started.filter(|r| *r != baseline.root) {
        return Some(format!(
            "the store's baseline (root {}) is not the one the ledger started from ({started})",
            baseline.root
        ));
    }
    recorded.filter(|r| *r != target.root && !in_flight).map(|recorded| {
        format!(
            "the store's record of the workspace (root {}) is not the ledger's (root {recorded}): it was changed or lost",
            target.root
        )
    })
}

/// The workspace here, if there is one: as it was made (`made`, for a
/// task nothing ran yet whose state the store does not keep), else as it
/// is now.
#[allow(clippy::disallowed_methods)] // lstat of the runtime's own task directory
fn workspace_here(
    store: &dyn Store,
    paths: &TaskPaths,
    task_id: &str,
    made: Option<&Manifest>,
) -> Option<Manifest> {
    let local = paths.task_dir.join("workspace.json").is_file()
        && std::fs::symlink_metadata(&paths.workspace).is_ok_and(|m| m.is_dir());
    if !local {
        return None;
    }
    let untouched = store
        .task(task_id)
        .is_ok_and(|t| t.state == loop_store::StoredState::PENDING);
    match made {
        Some(m) if untouched => Some(m.clone()),
        _ => Manifest::of(&paths.workspace).ok(),
    }
}

/// What an interrupted step here left in its journals, dropped once the
/// workspace is the record's (undoing or finishing it would only take the
/// workspace away from it); what could not be removed.
#[allow(clippy::disallowed_methods)] // lstat of the runtime's own directories
fn drop_journals(paths: &TaskPaths) -> Result<(), (&'static str, std::io::Error)> {
    for stale in ["journal", "command-journal", "command-scratch", "scratch"] {
        let p = paths.near.join(stale);
        if std::fs::symlink_metadata(&p).is_ok() {
            loop_workspace::remove_tree(&p).map_err(|e| (stale, e))?;
        }
    }
    Ok(())
}

/// The content `e` names, as the store keeps it (the task's, else its
/// start's).
fn fetch_kept(
    store: &dyn Store,
    task_id: &str,
    e: &Entry,
) -> Result<Vec<u8>, loop_workspace::RebuildError> {
    let kept = |owner: &str| {
        store
            .blob(owner, &e.sha256)
            .map_err(|x| loop_workspace::RebuildError::Content {
                path: e.path.clone(),
                why: x.to_string(),
            })
    };
    if e.size > MAX_KEPT_FILE {
        return Err(loop_workspace::RebuildError::Content {
            path: e.path.clone(),
            why: format!("its recorded size {} is over what is kept", e.size),
        });
    }
    match kept(task_id)? {
        Some(b) => Ok(b),
        None => kept(&start_owner(task_id))?.ok_or_else(|| loop_workspace::RebuildError::Content {
            path: e.path.clone(),
            why: format!(
                "its content {} is neither here nor kept in the store",
                e.sha256
            ),
        }),
    }
}

/// Make sure the workspace here is the one the store records, bringing it
/// there when it is not. `None` for a task whose start the store does not
/// keep (made before it kept them): its workspace here is used as it is.
#[allow(clippy::disallowed_methods)] // lstat of the runtime's own task directory
pub(crate) fn settle(
    store: &dyn Store,
    project: &Path,
    paths: &TaskPaths,
    task_id: &str,
    history: &[loop_protocol::Event],
    observer: &mut dyn crate::Observer,
) -> Result<Option<WorkspaceSettled>, Error> {
    let file = |name: &str| store.task_file(task_id, name).map_err(store_err);
    let Some(origin) = file(ORIGIN)? else {
        return Ok(None);
    };
    let refuse = |why: String| {
        Error::internal(format!(
            "task {task_id}: its workspace cannot be made as recorded on this machine: {why}"
        ))
    };
    let baseline_text = file(BASELINE)?.ok_or_else(|| refuse("no baseline is kept".into()))?;
    let baseline: Manifest = serde_json::from_str(&baseline_text)
        .map_err(|e| refuse(format!("the kept baseline cannot be read: {e}")))?;
    let kept: Option<Kept> = file(TREE)?
        .map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| refuse(format!("the kept state cannot be read: {e}")))?;
    let target = match &kept {
        Some(k) => k
            .delta
            .apply(&baseline)
            .map_err(|e| refuse(e.to_string()))?,
        None => baseline.clone(),
    };
    if let Some(why) = unlike_ledger(history, &baseline, &target) {
        return Err(refuse(why));
    }
    let here = workspace_here(store, paths, task_id, kept.is_none().then_some(&target));
    let io = |what: &str, e: std::io::Error| refuse(format!("{what}: {e}"));
    let drop_journals = || drop_journals(paths).map_err(|(what, e)| io(what, e));
    if here.as_ref().is_some_and(|m| m.root == target.root) {
        drop_journals()?;
        return Ok(Some(WorkspaceSettled {
            root: target.root,
            rebuilt: false,
            held: held(&kept),
        }));
    }
    std::fs::create_dir_all(&paths.task_dir).map_err(|e| io("task directory", e))?;
    if std::fs::symlink_metadata(&paths.near).is_err() {
        crate::project::workspaces::make_near(project, task_id)?;
    }
    let mut fetch = |e: &Entry| fetch_kept(store, task_id, e);
    // The copy here, brought to the record in place: what differs is
    // removed or written again, and only when every content it needs is at
    // hand (a reconcile removes before it writes: one that stopped for a
    // missing content would leave the copy neither as it was nor as
    // recorded).
    let at_hand =
        |had: &Manifest,
         fetch: &mut dyn FnMut(&Entry) -> Result<Vec<u8>, loop_workspace::RebuildError>| {
            Delta::between(had, &target)
                .changed
                .iter()
                .all(|e| fetch(e).is_ok())
        };
    if let Some(had) = here.as_ref().filter(|h| at_hand(h, &mut fetch)) {
        let differs = differing(had, &target);
        if let Ok(reached) = loop_workspace::reconcile(&paths.workspace, &target, &mut fetch) {
            drop_journals()?;
            observer.note(&format!(
                "the workspace differed from the record at {differs} (a step stopped between its change and its record, or it was changed by hand): brought back to the recorded state, root {}",
                reached.root
            ));
            tracing::info!(
                "task {task_id}: workspace brought back to root {}",
                reached.root
            );
            return Ok(Some(WorkspaceSettled {
                root: reached.root,
                rebuilt: true,
                held: held(&kept),
            }));
        }
    }
    // (Only now do contents that could not be kept matter.)
    if let Some(k) = kept.as_ref().filter(|k| !k.unkept.is_empty()) {
        return Err(refuse(format!(
            "the content of {} was too large to keep (or its name is not UTF-8)",
            k.unkept.join(", ")
        )));
    }
    // Made again: the task's own files as the machine that made it wrote
    // them, the workspace from its base, then the recorded changes.
    let report = file(BASELINE_REPORT)?.unwrap_or_else(|| "null".into());
    let reached = rebuild_here(
        (project, paths, task_id),
        [&origin, &baseline_text, &report],
        (&target, &mut fetch),
        &refuse,
    )?;
    drop_journals()?;
    let changed = kept
        .as_ref()
        .map_or(0, |k| k.delta.changed.len() + k.delta.removed.len());
    let from = match load_origin(paths)?.base_commit() {
        Some(c) => format!("commit {}", c.get(..12).unwrap_or(c)),
        None => "a copy of the project".to_string(),
    };
    observer.note(&format!(
        "workspace rebuilt on this machine from {from} and {changed} recorded change(s): root {}, the recorded one",
        reached.root
    ));
    tracing::info!(
        "task {task_id}: workspace rebuilt from {from}, root {}",
        reached.root
    );
    Ok(Some(WorkspaceSettled {
        root: reached.root,
        rebuilt: true,
        held: held(&kept),
    }))
}

/// Where a rebuild takes each content it needs.
type Fetch<'a> = dyn FnMut(&Entry) -> Result<Vec<u8>, loop_workspace::RebuildError> + 'a;

/// The task's own files written as the machine that made it wrote them
/// (read back through the checks every `workspace.json` gets, and the
/// origin saved as this machine's), and the workspace made again from its
/// base and brought to `target`: built aside and swapped in only once it
/// holds the record (a rebuild that fails leaves the copy that was here as
/// it was).
fn rebuild_here(
    (project, paths, task_id): (&Path, &TaskPaths, &str),
    [origin, baseline, report]: [&str; 3],
    (target, fetch): (&Manifest, &mut Fetch<'_>),
    refuse: &dyn Fn(String) -> Error,
) -> Result<Manifest, Error> {
    let io = |what: &str, e: std::io::Error| refuse(format!("{what}: {e}"));
    for (name, body) in [
        ("workspace.json", origin),
        ("baseline.json", baseline),
        ("baseline-report.json", report),
    ] {
        loop_workspace::write_atomic(&paths.task_dir.join(name), body.as_bytes())
            .map_err(|e| io(name, e))?;
    }
    let origin = load_origin(paths)?;
    crate::project::locate::save_origin(&paths.task_dir, &origin)
        .map_err(|e| io("workspace.json", e))?;
    let _: Option<loop_protocol::VerificationReport> =
        read_json(&paths.task_dir.join("baseline-report.json"))?;
    let (_, reached) = TaskWorkspace::rebuild(
        project,
        &paths.workspace,
        task_id,
        origin.base_commit(),
        |fresh| loop_workspace::reconcile(fresh, target, fetch).map_err(Why::from),
    )
    .map_err(|Why(why)| refuse(why))?;
    Ok(reached)
}

/// Why a rebuild failed, for people.
struct Why(String);

impl From<loop_workspace::WorkspaceError> for Why {
    fn from(e: loop_workspace::WorkspaceError) -> Self {
        Why(e.to_string())
    }
}

impl From<loop_workspace::RebuildError> for Why {
    fn from(e: loop_workspace::RebuildError) -> Self {
        Why(e.to_string())
    }
}

/// The contents the store holds for a kept state.
fn held(kept: &Option<Kept>) -> HashSet<String> {
    let Some(k) = kept else {
        return HashSet::new();
    };
    k.delta
        .changed
        .iter()
        .filter(|e| !k.unkept.contains(&e.path))
        .map(|e| e.sha256.clone())
        .collect()
}

/// From the ledger: the root it started from, the root its last
/// observation left (else the start's), and whether a call is in flight
/// (an intent with no observation after it).
fn ledger_roots(history: &[loop_protocol::Event]) -> (Option<String>, Option<String>, bool) {
    use loop_protocol::Event;
    let (mut started, mut now, mut in_flight) = (None, None, false);
    for e in history {
        match e {
            Event::TaskStarted { baseline_root, .. } => {
                started = Some(baseline_root.clone());
                now = Some(baseline_root.clone());
            }
            Event::Intent { .. } => in_flight = true,
            Event::Observed { workspace_root, .. } => {
                in_flight = false;
                if let Some(r) = workspace_root {
                    now = Some(r.clone());
                }
            }
            _ => {}
        }
    }
    (started, now, in_flight)
}

/// The first paths at which `had` and `want` differ, for people.
fn differing(had: &Manifest, want: &Manifest) -> String {
    let d = Delta::between(want, had);
    let mut paths: Vec<&str> = d
        .changed
        .iter()
        .chain(&d.removed)
        .map(|e| e.path.as_str())
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let more = paths.len().saturating_sub(5);
    let mut text = paths.into_iter().take(5).collect::<Vec<_>>().join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}
