//! What becomes of a task's change set once it has ended: `loop apply`,
//! `loop undo`, `loop discard`, `loop diff`, and a key's rotation.

use crate::Error;
use crate::project::locate::load_origin;
use loop_protocol::OutcomeKind;
use loop_receipt::verify_receipt;
use loop_workspace::{ChangeSet, Journal, Manifest, Standing, git_head};
use std::path::{Path, PathBuf};

/// How an apply, undo, discard, recovery or key rotation came out; what
/// was found on the way went to the observer as notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// It was done.
    Done,
    /// Nothing changed: refused, in conflict, or waiting for a person's
    /// say (the notes say which, and what to do).
    NothingChanged,
    /// It was done, but afterwards the project does not hold exactly what
    /// was verified (the notes say where).
    DoneButDiffers,
}

struct Task {
    project: PathBuf,
    dir: PathBuf,
    receipt: PathBuf,
}

fn task(project: &Path, id: &str) -> Result<Task, Error> {
    if id.contains('/') || id.contains("..") || id.is_empty() {
        return Err(Error::usage(format!("`{id}` is not a task id")));
    }
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let dir = project.join(".loop/tasks").join(id);
    let receipt = project
        .join(".loop/receipts")
        .join(format!("{id}.receipt.json"));
    if !loop_workspace::door::is_dir(&project, Path::new(".loop/tasks").join(id)) {
        return Err(Error::not_found(format!(
            "no task {id} in {}",
            project.display()
        )));
    }
    Ok(Task {
        project,
        dir,
        receipt,
    })
}

/// The change set from a receipt that holds, of a verified task.
fn verified_change_set(t: &Task) -> Result<ChangeSet, Error> {
    verified(t).map(|(cs, _, _)| cs)
}

/// [`verified_change_set`] with the task's locked contract.
fn verified(
    t: &Task,
) -> Result<
    (
        ChangeSet,
        loop_protocol::Contract,
        Vec<loop_receipt::SharedEnvironment>,
    ),
    Error,
> {
    let statement = holding_statement(t)?;
    let p = &statement.predicate;
    if p.outcome.kind != OutcomeKind::Verified {
        return Err(Error::usage(format!(
            "task {} ended {}, not verified: only verified work is applied",
            p.task_id, p.outcome
        )));
    }
    Ok((
        recorded_change_set(t, p)?,
        p.contract.clone(),
        p.environments.clone(),
    ))
}

/// The statement of task `t`'s receipt, checked to hold (signature by this
/// machine's key, ledger, artifacts), whatever its outcome.
fn holding_statement(t: &Task) -> Result<loop_receipt::Statement, Error> {
    let trusted: Vec<loop_receipt::PublicKey> = loop_receipt::KeyPair::existing()
        .map_err(|e| Error::usage(e.to_string()))?
        .map(|k| vec![k.public()])
        .unwrap_or_default();
    let report =
        verify_receipt(&t.receipt, None, &trusted).map_err(|e| Error::usage(e.to_string()))?;
    match &report.statement {
        Some(statement) if report.ok() => Ok(statement.clone()),
        _ => Err(super::receipts::not_holding(&t.receipt, &report, None)),
    }
}

/// The change set a receipt records, its patch read from beside it and
/// checked against the hash the receipt signs.
fn recorded_change_set(t: &Task, p: &loop_receipt::Predicate) -> Result<ChangeSet, Error> {
    let patch_path = t.receipt.with_file_name(&p.change_set.patch);
    // Beside the receipt, through the receipts' door (no link, no FIFO).
    let patch = loop_receipt::read::read_regular(&patch_path, 256 << 20)
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
        .map_err(|e| Error::usage(format!("{}: {e}", patch_path.display())))?;
    if loop_protocol::hash::sha256_hex(patch.as_bytes()) != p.change_set.patch_sha256 {
        return Err(Error::usage(format!(
            "{} differs from the receipt",
            patch_path.display()
        )));
    }
    Ok(ChangeSet {
        base_commit: p.change_set.base_commit.clone(),
        files: p.change_set.files.clone(),
        patch,
        patch_sha256: p.change_set.patch_sha256.clone(),
    })
}

/// Where a change set shown to a person comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffSource {
    /// The receipt of a task that has ended (checked against it).
    Receipt(PathBuf),
    /// The workspace of a task that has not ended, as it is now.
    Workspace(PathBuf),
}

/// A task's change set for a person to read.
#[derive(Debug, Clone)]
pub struct Diff {
    /// The change set.
    pub change_set: ChangeSet,
    /// Where it comes from.
    pub source: DiffSource,
}

/// Task `id`'s change set: from its receipt once it has ended (whatever
/// the outcome; a receipt that does not hold, or a patch that differs from
/// it, is an error), else computed from its workspace now.
pub fn diff(project: &Path, id: &str) -> Result<Diff, Error> {
    let t = task(project, id)?;
    if marked(&t.receipt, "") {
        let statement = holding_statement(&t)?;
        return Ok(Diff {
            change_set: recorded_change_set(&t, &statement.predicate)?,
            source: DiffSource::Receipt(t.receipt.clone()),
        });
    }
    let paths = crate::project::locate::TaskPaths::of(&t.project, id);
    let start = crate::project::locate::Start::load(&paths)?;
    if start.gone {
        return Err(Error::usage(format!(
            "the workspace of task {id} is gone: there is no change to show"
        )));
    }
    let now = Manifest::of(&paths.workspace).map_err(|e| {
        Error::usage(format!(
            "the workspace {} cannot be read: {e}",
            paths.workspace.display()
        ))
    })?;
    // A child's files start as its parent's workspace held them.
    let parent = crate::project::locate::open_store(&t.project)
        .ok()
        .and_then(|s| s.task(id).ok())
        .and_then(|r| serde_json::from_value::<crate::StoredRequest>(r.request).ok())
        .and_then(|stored| crate::task::change_set::parent_workspace(&t.project, &stored));
    Ok(Diff {
        change_set: crate::task::change_set::compute(
            &t.project,
            &start.task_ws,
            &start.baseline,
            &now,
            parent.as_deref(),
        ),
        source: DiffSource::Workspace(paths.workspace),
    })
}

/// What `loop apply` will not bring home: protected paths (refused
/// always) and host-executable ones (refused without `--trust-host-files`).
fn gatekeep(
    t: &Task,
    workspace: &Path,
    cs: &ChangeSet,
    (contract, shared): (&loop_protocol::Contract, &[loop_receipt::SharedEnvironment]),
    extra_host: &[String],
) -> Result<(Vec<String>, Vec<String>), Error> {
    let bad = |e: String| Error::internal(format!("protected globs: {e}"));
    let protected = loop_workspace::Protected::new(&contract.protected_globs())
        .map_err(|e| bad(e.to_string()))?;
    let host_globs: Vec<String> = loop_workspace::changeset::HOST_EXECUTABLE
        .iter()
        .map(|s| s.to_string())
        .chain(extra_host.iter().cloned())
        .collect();
    let host = loop_workspace::Protected::new(&host_globs).map_err(|e| bad(e.to_string()))?;
    let mut refused = Vec::new();
    let mut risky = Vec::new();
    // A directory git would take for a bare repository (its `HEAD` beside a
    // `config`, `objects/` or `refs/`): git reads that config, and the
    // commands it names, when run inside it.
    let paths: std::collections::BTreeSet<&str> = cs
        .files
        .iter()
        .filter(|f| f.after_sha256.is_some())
        .map(|f| f.path.as_str())
        .collect();
    for head in paths
        .iter()
        .filter(|p| **p == "HEAD" || p.ends_with("/HEAD"))
    {
        let dir = head.strip_suffix("HEAD").unwrap_or("");
        let beside = |name: &str| {
            paths.iter().any(|p| {
                p.strip_prefix(dir)
                    .is_some_and(|r| r == name || r.starts_with(&format!("{name}/")))
            })
        };
        if ["config", "objects", "refs", "commondir", "gitdir"]
            .iter()
            .any(|n| beside(n))
        {
            refused.push(format!(
                "{}: a bare git repository (HEAD with config, objects, refs, commondir or gitdir); git would run what its config names",
                if dir.is_empty() { "." } else { dir.trim_end_matches('/') }
            ));
        }
    }
    for f in &cs.files {
        let in_shared = shared
            .iter()
            .find(|e| f.path == e.path || f.path.starts_with(&format!("{}/", e.path)));
        if let Some(e) = in_shared {
            refused.push(format!(
                "{}: inside the shared read-only environment `{}`",
                f.path, e.path
            ));
        } else if let Some(rule) = protected.matching(&f.path) {
            refused.push(format!("{}: protected by `{rule}`", f.path));
        } else if f.path.chars().any(char::is_control) {
            refused.push(format!("{:?}: a name with a control character", f.path));
        } else if let Some(rule) = host.matching(&f.path) {
            risky.push(format!("{} ({rule})", f.path));
        }
    }
    // What only the tree shows: Python environments, git configuration,
    // and directories git itself would take for repositories.
    let listed = |r: &String, l: &[String]| {
        let path = r.split(" (").next().unwrap_or(r);
        l.iter().any(|x| x.split(" (").next() == Some(path))
    };
    for r in crate::project::host_files::in_python_envs(&t.project, workspace, &cs.files)
        .into_iter()
        .chain(crate::project::host_files::git_configs(
            workspace, &cs.files,
        ))
    {
        if !listed(&r, &risky) && !listed(&r, &refused) {
            risky.push(r);
        }
    }
    match crate::project::host_files::repositories(&t.project, workspace, &cs.files, &t.dir) {
        Ok(found) => {
            for r in found {
                let dir = r.split(':').next().unwrap_or("");
                if !refused.iter().any(|x| x.starts_with(&format!("{dir}:"))) {
                    refused.push(r);
                }
            }
        }
        Err(e) => refused.push(format!(
            "the change set could not be checked for repositories git would find: {e}"
        )),
    }
    Ok((refused, risky))
}

/// Sign an addendum about the receipt: the receipt is never edited.
fn record_fact(t: &Task, id: &str, event: &str, cs: &ChangeSet) -> Result<PathBuf, Error> {
    record_fact_with(t, id, event, cs, None, None)
}

/// [`record_fact`] with what apply checked and what recovery did.
fn record_fact_with(
    t: &Task,
    id: &str,
    event: &str,
    cs: &ChangeSet,
    matches_verified: Option<bool>,
    recovered: Option<&str>,
) -> Result<PathBuf, Error> {
    let key = loop_receipt::KeyPair::load_or_create()
        .map_err(|e| Error::usage(format!("signing key: {e}")))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    loop_receipt::write_addendum(
        &t.receipt,
        loop_receipt::AddendumFact {
            task_id: id.to_string(),
            event: event.to_string(),
            project: t.project.display().to_string(),
            patch_sha256: Some(cs.patch_sha256.clone()),
            revoked_keyid: None,
            matches_verified,
            recovered: recovered.map(str::to_string),
            report: None,
            at: loop_protocol::time::rfc3339_millis(now),
        },
        &[&key],
    )
    .map_err(Error::from_cause)
}

/// What a person consented to with an apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyConsent {
    /// They reviewed the change (the Loopfile's `checkpoints.before_apply`).
    pub confirmed: bool,
    /// Files that would run code on this machine come home.
    pub trust_host_files: bool,
    /// The project's HEAD moved since the task began: apply it there all
    /// the same, when every file it changes is as it was when it began.
    pub onto_head: bool,
}

/// One apply, undo, forget, recovery or discard at a time in a project,
/// across processes and threads: a discard that came while an apply was
/// writing took the apply's journal for an interrupted one and rolled it
/// back under it (the task then said `applied` while the project held
/// none of it). The lock is the kernel's (`flock`), so a killed holder
/// leaves nothing held, and the next command settles what it left. A
/// command waits up to [`CHANGING_WAIT`] for the one before it, then is
/// refused as a conflict.
#[allow(clippy::disallowed_methods)] // a lock file in the runtime's own state directory
fn changing(project: &Path, id: &str) -> Result<std::fs::File, Error> {
    changing_within(project, id, CHANGING_WAIT)
}

/// [`changing`], waiting at most `wait`.
#[allow(clippy::disallowed_methods)] // a lock file in the runtime's own state directory
fn changing_within(
    project: &Path,
    id: &str,
    wait: std::time::Duration,
) -> Result<std::fs::File, Error> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(project.join(".loop").join("changing.lock"))
        .map_err(|e| Error::internal(format!("the project's apply lock: {e}")))?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        // SAFETY: flock on a descriptor this function owns; released when
        // the returned file is dropped.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(lock);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::internal(format!("the project's apply lock: {e}")));
        }
        if std::time::Instant::now() >= deadline {
            return Err(Error::conflict(format!(
                "task {id}: another apply, undo or discard in this project is still under way after {} s; nothing was done: run this again once it ends",
                wait.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// How long an apply, undo or discard waits for another in its project
/// (well inside the server's 60 s for a request: a refusal is answered,
/// not a request that runs on after its 503).
const CHANGING_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// `loop apply ID`.
pub fn apply(
    project: &Path,
    id: &str,
    consent: ApplyConsent,
    out: &mut dyn crate::Observer,
) -> Result<Settled, Error> {
    let ApplyConsent {
        confirmed,
        trust_host_files,
        onto_head,
    } = consent;
    let t = task(project, id)?;
    let _changing = changing(&t.project, id)?;
    if let Some(what) = settle(&t, id)? {
        out.note(&format!("task {id}: {what}"));
    }
    refuse_if_discarded(&t, id, "apply")?;
    if marked(&t.dir, "applied") {
        return Err(Error::usage(format!(
            "task {id} is already applied; `loop undo {id}` first\nhint: if its files were put back since (a `git checkout`, an edit), `loop undo {id} --forget` stops counting it as applied, leaving the files as they are; then it can be applied again"
        )));
    }
    let (cs, contract, shared) = verified(&t)?;
    let loopfile = crate::loopfile::Loopfile::load(&t.project)?;
    // At the door, again: nothing protected, nothing that would run on this
    // machine unasked.
    let paths = crate::project::locate::TaskPaths::of(&t.project, id);
    let ws = load_origin(&paths)?;
    let (never, risky) = gatekeep(
        &t,
        &ws.path,
        &cs,
        (&contract, &shared),
        &loopfile.host_executable,
    )?;
    if refused_at_door(id, &never, (&risky, trust_host_files), out) {
        return Ok(Settled::NothingChanged);
    }
    // Redaction keeps secrets out of the patch; it also hides what those
    // lines really add. Say where, so a person can look at the real content.
    let hidden = redacted_additions(&cs.patch);
    if !hidden.is_empty() {
        out.note(&format!(
            "note: the patch shows redacted values in lines it adds to: {} — what is applied is the real content; review it in {}",
            hidden.join(", "),
            ws.path.display()
        ));
    }
    // The checkpoint before apply: a person reviews the change and says so.
    if loopfile
        .checkpoints
        .as_ref()
        .is_some_and(|c| c.before_apply)
        && !confirmed
    {
        ask_for_review(&t, id, &cs, out);
        return Ok(Settled::NothingChanged);
    }
    if let Some(base) = &cs.base_commit
        && !head_moved_ok(&t, id, (base, &cs), onto_head, out)?
    {
        return Ok(Settled::NothingChanged);
    }
    let journal = Journal::new(&t.dir.join("apply-journal"), &t.project);
    // The intent first: a kill from here on is settled by the next command.
    mark(&t, APPLYING, &cs.patch_sha256)?;
    match cs.apply(&t.project, &ws.path, &ChangeSet::undo_dir(&t.dir), &journal) {
        Ok(n) => applied(&t, id, (&cs, &ws), n, out),
        Err(e) => {
            unmark(&t, APPLYING);
            refused(e, "applied", out)
        }
    }
}

/// Whether an apply goes on where the project's HEAD is not the commit
/// the task began from (`base`): only with `onto_head`, and only when
/// every file the change set touches is as it was then. Otherwise said,
/// with the way forward.
fn head_moved_ok(
    t: &Task,
    id: &str,
    (base, cs): (&str, &ChangeSet),
    onto_head: bool,
    out: &mut dyn crate::Observer,
) -> Result<bool, Error> {
    let head = git_head(&t.project).unwrap_or_default();
    if head == base {
        return Ok(true);
    }
    let standing = cs.standing(&t.project);
    if matches!(standing, Ok(loop_workspace::Standing::After)) {
        out.note(&format!(
            "nothing applied: the project already holds this change (HEAD {head}; the task started from {base}), e.g. its branch loop/{id} was merged"
        ));
        return Ok(false);
    }
    let untouched = matches!(standing, Ok(loop_workspace::Standing::Before));
    match (untouched, onto_head) {
        (true, true) => {
            out.note(&format!(
                "the project's HEAD is {head}, the task started from {base}; every file it changes is as it was then, so it is applied on {head} (--onto-head)"
            ));
            Ok(true)
        }
        (true, false) => {
            out.note(&format!(
                "conflict, nothing applied: the project's HEAD is {head}, the task started from {base}"
            ));
            out.note(&format!(
                "every file it changes is as it was when it began: `loop apply {id} --onto-head` applies it on {head} (its checks ran on {base}, not on {head})"
            ));
            Ok(false)
        }
        (false, _) => {
            out.note(&format!(
                "conflict, nothing applied: the project's HEAD is {head}, the task started from {base}, and files it changes were changed since"
            ));
            out.note(&format!(
                "`loop diff {id} | git apply -3` merges it by hand, or run the task again from {head}"
            ));
            Ok(false)
        }
    }
}

/// Refused at the door: something protected (`never`), or files that
/// would run code on this machine (`risky`) without the person's trust;
/// said, and whether it was.
fn refused_at_door(
    id: &str,
    never: &[String],
    (risky, trusted): (&[String], bool),
    out: &mut dyn crate::Observer,
) -> bool {
    if !never.is_empty() {
        out.note("refused, nothing applied:");
        for r in never {
            out.note(&format!("  {r}"));
        }
        return true;
    }
    if !risky.is_empty() && !trusted {
        out.note(
            "nothing applied: these files would run code on this machine, outside any sandbox (hooks, shell, editor or tool configuration, Python environments, packages):",
        );
        for r in risky {
            out.note(&format!("  {r}"));
        }
        out.note(&format!(
            "review them in the patch, then run `loop apply {id} --trust-host-files` to bring them home"
        ));
        return true;
    }
    false
}

/// The checkpoint before apply: the files named, and how to go on once a
/// person has reviewed the patch.
fn ask_for_review(t: &Task, id: &str, cs: &ChangeSet, out: &mut dyn crate::Observer) {
    out.note("the Loopfile asks a person to review a change before it is applied:");
    for f in &cs.files {
        out.note(&format!("  {}", f.path));
    }
    out.note(&format!(
        "review the patch ({}), then run `loop apply {id} --yes`; nothing was applied",
        t.dir
            .parent()
            .and_then(|p| p.parent())
            .map(|s| s
                .join("receipts")
                .join(format!("{id}.changes.patch"))
                .display()
                .to_string())
            .unwrap_or_default()
    ));
}

/// `n` files applied: checked (not assumed) to hold what was verified,
/// recorded in an addendum, and the task's branch let go.
fn applied(
    t: &Task,
    id: &str,
    (cs, ws): (&ChangeSet, &loop_workspace::TaskWorkspace),
    n: usize,
    out: &mut dyn crate::Observer,
) -> Result<Settled, Error> {
    // Checked, not assumed: every touched path holds what was verified.
    let standing = cs.standing(&t.project).map_err(Error::from_cause)?;
    let matches = standing == Standing::After;
    mark(t, APPLIED, &cs.patch_sha256)?;
    let addendum = record_fact_with(t, id, "applied", cs, Some(matches), None)?;
    unmark(t, APPLYING);
    out.note(&format!(
        "applied {n} file(s) of task {id} to {}",
        t.project.display()
    ));
    if matches {
        out.note("every touched path now holds exactly the verified content and mode");
    } else {
        out.note(&format!(
            "warning: after the apply the project does not hold the verified content: {standing:?}"
        ));
    }
    out.note(&format!("addendum {}", addendum.display()));
    crate::task::stored_workspace::release(&t.project, id, out);
    // The work is in the project now: its branch goes (the
    // workspace stays, for `loop replay`, until `loop discard`).
    match ws.drop_branch() {
        Ok(true) => out.note(&format!(
            "branch loop/{id} deleted; the workspace on this disk stays for `loop replay` until `loop discard {id}`"
        )),
        Ok(false) => {}
        Err(e) => out.note(&format!("warning: branch loop/{id} kept: {e}")),
    }
    Ok(if matches {
        Settled::Done
    } else {
        Settled::DoneButDiffers
    })
}

/// Files whose added lines the patch shows redacted.
fn redacted_additions(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut file = String::new();
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("+++ ") {
            file = rest.strip_prefix("b/").unwrap_or(rest).to_string();
        } else if line.starts_with('+')
            && line.contains(loop_sandbox::redact::MARK)
            && !out.contains(&file)
        {
            out.push(file.clone());
        }
    }
    out
}

const APPLYING: &str = "applying";
const APPLIED: &str = "applied";
const UNDOING: &str = "undoing";
use crate::project::locate::DISCARDED;

/// Refuse to act on task `id`'s workspace once it was discarded, saying
/// so and what to do.
fn refuse_if_discarded(t: &Task, id: &str, doing: &str) -> Result<(), Error> {
    if marked(&t.dir, DISCARDED) {
        return Err(Error::usage(format!(
            "task {id}'s workspace was discarded (`loop discard {id}`), so there is nothing to {doing}; its receipt stays in .loop/receipts\nhint: run the task again to redo its work"
        )));
    }
    Ok(())
}

/// Write a marker in the task's directory, durably.
fn mark(t: &Task, name: &str, content: &str) -> Result<(), Error> {
    loop_workspace::write_atomic(&t.dir.join(name), content.as_bytes())
        .map_err(|e| Error::internal(format!("{name} marker: {e}")))
}

#[allow(clippy::disallowed_methods)] // a marker in the task directory the runtime made
fn unmark(t: &Task, name: &str) {
    let _ = std::fs::remove_file(t.dir.join(name));
}

/// Finish what a killed `loop apply` or `loop undo` left: the journal rolls
/// a half-written step back, then the project's own content says whether
/// the change set is in or out, and the markers (and the record) follow.
/// Returns what was done, if anything.
fn settle(t: &Task, id: &str) -> Result<Option<String>, Error> {
    let journal_dir = t.dir.join("apply-journal");
    let pending = marked(&journal_dir, "pending");
    let applying = marked(&t.dir, APPLYING);
    let undoing = marked(&t.dir, UNDOING);
    if !pending && !applying && !undoing {
        return Ok(None);
    }
    // Nothing is touched for a task whose receipt does not hold.
    let cs = verified_change_set(t)?;
    let restored = Journal::new(&journal_dir, &t.project)
        .recover()
        .map_err(|e| Error::internal(format!("recovering the apply journal: {e}")))?;
    let standing = cs.standing(&t.project).map_err(Error::from_cause)?;
    // The markers stay until the fact is recorded, so a kill anywhere is
    // settled here: `applying` or `undoing` says which step was cut short.
    let what = match standing {
        Standing::Before if undoing || (!applying && marked(&t.dir, APPLIED)) => {
            let _ = loop_workspace::remove_tree(&ChangeSet::undo_dir(&t.dir));
            record_fact_with(t, id, "undone", &cs, None, Some("completed"))?;
            unmark(t, APPLIED);
            unmark(t, UNDOING);
            unmark(t, APPLYING);
            "an interrupted undo had completed; recorded it".to_string()
        }
        Standing::Before => {
            unmark(t, APPLYING);
            format!(
                "an interrupted apply was rolled back ({restored} file(s) restored); nothing of it remains"
            )
        }
        Standing::After if applying => {
            mark(t, APPLIED, &cs.patch_sha256)?;
            record_fact_with(t, id, "applied", &cs, Some(true), Some("completed"))?;
            unmark(t, APPLYING);
            unmark(t, UNDOING);
            "an interrupted apply had completed; recorded it".to_string()
        }
        Standing::After => {
            mark(t, APPLIED, &cs.patch_sha256)?;
            unmark(t, UNDOING);
            format!(
                "an interrupted undo was rolled back ({restored} file(s) restored); the change stays applied"
            )
        }
        Standing::Mixed(paths) => {
            return Err(Error::usage(format!(
                "after recovery the project holds neither the task's start nor its result at: {} (changed by hand since?); resolve these files, then run the command again",
                paths.join(", ")
            )));
        }
    };
    Ok(Some(what))
}

/// `loop apply ID --recover` (and every command that touches a task):
/// settle an interrupted apply or undo.
pub fn recover(project: &Path, id: &str, out: &mut dyn crate::Observer) -> Result<Settled, Error> {
    let t = task(project, id)?;
    let _changing = changing(&t.project, id)?;
    match settle(&t, id)? {
        Some(what) => out.note(&format!("task {id}: {what}")),
        None => out.note(&format!("task {id}: no interrupted apply or undo")),
    }
    Ok(Settled::Done)
}

/// A conflict is reported (nothing changed); anything else is internal.
fn refused(
    e: loop_workspace::ChangeSetError,
    verb: &str,
    out: &mut dyn crate::Observer,
) -> Result<Settled, Error> {
    match e {
        loop_workspace::ChangeSetError::Conflict(list) => {
            out.note(&format!("conflict, nothing {verb}:"));
            for c in list {
                out.note(&format!("  {c}"));
            }
            Ok(Settled::NothingChanged)
        }
        other => Err(Error::internal(other.to_string())),
    }
}

/// `loop undo ID`.
pub fn undo(project: &Path, id: &str, out: &mut dyn crate::Observer) -> Result<Settled, Error> {
    let t = task(project, id)?;
    let _changing = changing(&t.project, id)?;
    if let Some(what) = settle(&t, id)? {
        out.note(&format!("task {id}: {what}"));
    }
    if !marked(&t.dir, "applied") {
        return Err(Error::usage(format!("task {id} is not applied")));
    }
    let cs = verified_change_set(&t)?;
    let journal = Journal::new(&t.dir.join("apply-journal"), &t.project);
    mark(&t, UNDOING, &cs.patch_sha256)?;
    match cs.undo(&t.project, &ChangeSet::undo_dir(&t.dir), &journal) {
        Err(loop_workspace::ChangeSetError::Conflict(list)) => {
            unmark(&t, UNDOING);
            out.note("conflict, nothing undone: the project no longer holds what was applied:");
            for c in list {
                out.note(&format!("  {c}"));
            }
            out.note(&format!(
                "if those files were put back on purpose (a `git checkout`, an edit), `loop undo {id} --forget` stops counting the change set as applied and touches no file; `loop apply {id}` can then apply it again"
            ));
            Ok(Settled::NothingChanged)
        }
        Ok(n) => {
            let _ = loop_workspace::remove_tree(&ChangeSet::undo_dir(&t.dir));
            let addendum = record_fact(&t, id, "undone", &cs)?;
            unmark(&t, APPLIED);
            unmark(&t, UNDOING);
            out.note(&format!("undid {n} file(s) of task {id}"));
            out.note(&format!("addendum {}", addendum.display()));
            Ok(Settled::Done)
        }
        Err(e) => {
            unmark(&t, UNDOING);
            refused(e, "undone", out)
        }
    }
}

/// `loop undo ID --forget`: stop counting task `id`'s change set as
/// applied, touching no file (its files were put back by other means);
/// signed as an addendum like apply and undo.
#[allow(clippy::disallowed_methods)] // the undo directory the runtime made in its task directory
pub fn forget(project: &Path, id: &str, out: &mut dyn crate::Observer) -> Result<Settled, Error> {
    let t = task(project, id)?;
    let _changing = changing(&t.project, id)?;
    if let Some(what) = settle(&t, id)? {
        out.note(&format!("task {id}: {what}"));
    }
    if !marked(&t.dir, "applied") {
        return Err(Error::usage(format!("task {id} is not applied")));
    }
    let cs = verified_change_set(&t)?;
    let standing = cs.standing(&t.project).map_err(Error::from_cause)?;
    // Nothing was put back: `undo` is the way, and forgetting would throw
    // away what it restores from.
    if standing == Standing::After {
        return Err(Error::usage(format!(
            "the project still holds every file of task {id} as applied: `loop undo {id}` reverses it (--forget is for files put back by other means)"
        )));
    }
    let addendum = record_fact_with(&t, id, "forgotten", &cs, Some(false), None)?;
    // What the apply replaced stays, beside the task, for whoever wants
    // it back: a project without git has no other copy.
    let undo = ChangeSet::undo_dir(&t.dir);
    let kept = t.dir.join(format!(
        "undo-forgotten-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    ));
    let kept_note = match std::fs::rename(&undo, &kept) {
        Ok(()) => format!(
            "; what the apply had replaced is kept in {}",
            kept.display()
        ),
        Err(_) => String::new(),
    };
    unmark(&t, APPLIED);
    out.note(&format!(
        "task {id} no longer counts as applied; no file was touched (`loop apply {id}` applies it again){kept_note}"
    ));
    out.note(&format!("addendum {}", addendum.display()));
    Ok(Settled::Done)
}

/// `loop discard ID`.
pub fn discard(project: &Path, id: &str, out: &mut dyn crate::Observer) -> Result<Settled, Error> {
    let t = task(project, id)?;
    let _changing = changing(&t.project, id)?;
    // A task whose preparation was killed was never stored: what it left
    // is removed, and said.
    let store = crate::project::locate::open_store(&t.project)?;
    if crate::project::preparing::was_killed(&t.project, id, &*store) {
        let what = crate::project::preparing::clean(&t.project, id);
        out.note(&format!(
            "task {id} was being prepared when its process ended, before it was stored; removed {what}"
        ));
        return Ok(Settled::Done);
    }
    // A running task's workspace is its work in progress: pulling it away
    // would leave the task stuck with no receipt.
    if crate::project::locate::is_running(&t.project, id)? {
        return Err(Error::usage(format!(
            "task {id} is running; `loop cancel {id}` ends it (with its receipt), then discard"
        )));
    }
    // An interrupted task would be resumed from its workspace (or cancelled
    // with it): it ends first, so nothing is driven from what is gone.
    if let Ok(record) = store.task(id)
        && crate::project::locate::liveness(&record) == crate::Liveness::Interrupted
    {
        return Err(Error::usage(format!(
            "task {id} is interrupted; `loop cancel {id}` ends it (with its receipt), or `loop resume {id}` finishes it, then discard"
        )));
    }
    refuse_if_discarded(&t, id, "discard")?;
    // Discarding drops the task's workspace, not the project's files: an
    // apply that cannot be settled is said, and does not block it.
    match settle(&t, id) {
        Ok(Some(what)) => out.note(&format!("task {id}: {what}")),
        Ok(None) => {}
        Err(e) => out.note(&format!("task {id}: {}", e.message)),
    }
    let paths = crate::project::locate::TaskPaths::of(&t.project, id);
    let ws = load_origin(&paths)?;
    // A copy of a project (with its `.git`) has the original's record of
    // the task's worktree: that workspace is the original's.
    match ws.branch_held_elsewhere() {
        Some((here, true)) => {
            return Err(Error::usage(format!(
                "task {id}: its branch `loop/{id}` is checked out in the project itself ({}); nothing was discarded: switch to another branch there, then discard",
                here.display()
            )));
        }
        Some((elsewhere, false)) => {
            return Err(Error::usage(format!(
                "task {id}: its branch `loop/{id}` is checked out by the worktree at {}, not by this project's workspace of the task (was this project copied with its .git from the one that ran it?); nothing was discarded: `loop discard {id}` in that project discards it there",
                elsewhere.display()
            )));
        }
        None => {}
    }
    ws.discard().map_err(Error::from_cause)?;
    mark(&t, DISCARDED, "")?;
    // What was kept beside the workspace goes with it (outside the
    // project; the old place in it is the task's directory, kept).
    if paths.near != paths.task_dir {
        crate::project::workspaces::remove_near(&paths.near)
            .map_err(|e| Error::internal(format!("cannot remove {}: {e}", paths.near.display())))?;
    }
    out.note(&format!(
        "discarded the workspace of task {id}; its receipt stays in .loop/receipts"
    ));
    crate::task::stored_workspace::release(&t.project, id, out);
    Ok(Settled::Done)
}

/// `loop keys rotate`: revoke the signing key, make a new one, and record
/// the revocation in a signed addendum (by the new key) on every receipt of
/// `project` that the old key signed.
pub fn rotate_key(
    project: &Path,
    yes: bool,
    out: &mut dyn crate::Observer,
) -> Result<Settled, Error> {
    // Revoking is not undone: a wrong project or a slip of the hand is
    // refused before anything changes.
    let receipts_dir = project.join(".loop/receipts");
    if !marked(project, "") {
        return Err(Error::usage(format!(
            "project {} does not exist; nothing was revoked",
            project.display()
        )));
    }
    if !yes {
        let current = loop_receipt::KeyPair::existing()
            .map_err(|e| Error::usage(e.to_string()))?
            .map(|k| k.keyid().to_string())
            .unwrap_or_else(|| "(none yet)".into());
        let question = format!(
            "revoke signing key {current} and annotate the receipts in {}?",
            receipts_dir.display()
        );
        match out.confirm(&question) {
            None => {
                return Err(Error::usage(
                    "`loop keys rotate` revokes the signing key for good: confirm with --yes",
                ));
            }
            Some(false) => {
                out.note("nothing was revoked");
                return Ok(Settled::NothingChanged);
            }
            Some(true) => {}
        }
    }
    // The key being revoked signs its own revocation too: whoever trusts
    // it (`loop verify --pubkey OLD`, anywhere) learns it was revoked.
    let old_pair = loop_receipt::KeyPair::existing().map_err(|e| Error::usage(e.to_string()))?;
    let (old, new) = loop_receipt::KeyPair::rotate().map_err(|e| Error::usage(e.to_string()))?;
    let old_pair = old_pair.filter(|k| k.keyid() == old.keyid);
    let signers: Vec<&loop_receipt::KeyPair> =
        std::iter::once(&new).chain(old_pair.as_ref()).collect();
    let receipts = project.join(".loop/receipts");
    let mut skipped: Vec<String> = Vec::new();
    let mut noted = 0;
    if let Ok(items) = loop_workspace::door::list(project, Some(Path::new(".loop/receipts"))) {
        for name in items {
            let path = receipts.join(&name);
            let Some(task_id) = name.strip_suffix(".receipt.json") else {
                continue;
            };
            let Ok(Some(text)) = loop_workspace::door::read(
                project,
                Path::new(".loop/receipts").join(&name),
                16 << 20,
            ) else {
                continue;
            };
            let Ok(env) = serde_json::from_slice::<loop_receipt::Envelope>(&text) else {
                continue;
            };
            if !env.signatures.iter().any(|s| s.keyid == old.keyid) {
                continue;
            }
            // Only a receipt the old key really signed gets an addendum: a
            // planted envelope carrying its key id is not annotated.
            let signed = loop_receipt::verify_receipt(&path, None, std::slice::from_ref(&old))
                .is_ok_and(|r| matches!(r.signature, loop_receipt::SignatureStatus::Valid { .. }));
            if !signed {
                skipped.push(name.clone());
                continue;
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            loop_receipt::write_addendum(
                &path,
                loop_receipt::AddendumFact {
                    task_id: task_id.to_string(),
                    event: "signing-key-revoked".into(),
                    project: project.display().to_string(),
                    patch_sha256: None,
                    revoked_keyid: Some(old.keyid.clone()),
                    matches_verified: None,
                    recovered: None,
                    report: None,
                    at: loop_protocol::time::rfc3339_millis(now),
                },
                &signers,
            )
            .map_err(Error::from_cause)?;
            noted += 1;
        }
    }
    out.note(&format!("revoked key {}", old.keyid));
    out.note(&format!("new key     {}", new.keyid()));
    out.note(&format!(
        "{noted} receipt(s) in {} got a revocation addendum",
        receipts.display()
    ));
    for name in &skipped {
        out.note(&format!(
            "not annotated: {name} carries the key id but its signature does not verify"
        ));
    }
    Ok(Settled::Done)
}

/// Whether the runtime's own mark `name` is in `dir` (a task directory's
/// `applied`, a journal's `pending`; `""` for `dir` itself): existence
/// only, of what the runtime made.
#[allow(clippy::disallowed_methods)] // existence of the runtime's own marks, no content read
fn marked(dir: &Path, name: &str) -> bool {
    if name.is_empty() {
        dir.exists()
    } else {
        dir.join(name).exists()
    }
}

/// A file a task made, as its receipt records it: its bytes and SHA-256.
#[derive(Debug, Clone)]
pub struct ProducedFile {
    /// Its content.
    pub bytes: Vec<u8>,
    /// SHA-256 of its content, as the receipt signs it.
    pub sha256: String,
}

/// The file `rel` task `id` made, once it has ended: an artifact its
/// receipt ships, or a file its change set adds or modifies. Read from
/// the artifacts shipped beside the receipt, else from the task's
/// workspace (through the door: no link, no FIFO), and given only when
/// its content is the one the receipt signs; a file the receipt does not
/// name is not found, one that changed since is a conflict.
pub fn produced_file(project: &Path, id: &str, rel: &str) -> Result<ProducedFile, Error> {
    let t = task(project, id)?;
    if !marked(&t.receipt, "") {
        return Err(Error::conflict(format!(
            "task {id} has not ended: its files are given once its receipt is signed"
        )));
    }
    let statement = holding_statement(&t)?;
    let p = &statement.predicate;
    let artifact = p.artifacts.iter().any(|a| a.as_str() == rel);
    // A link the change set adds is its target's name, not a file's
    // content: said so, not taken for a file changed since.
    if !artifact
        && let Some(f) = p.change_set.files.iter().find(|f| f.path == rel)
        && f.after_mode.as_deref() == Some("120000")
    {
        return Err(Error::usage(format!(
            "task {id}'s {rel} is a symbolic link, which is not served as a file: `loop diff {id}` shows where it points"
        )));
    }
    let signed = if artifact {
        statement
            .subject
            .iter()
            .find(|s| s.name == rel)
            .and_then(|s| s.digest.get("sha256").cloned())
    } else {
        p.change_set
            .files
            .iter()
            .find(|f| f.path == rel)
            .and_then(|f| f.after_sha256.clone())
    };
    let Some(sha256) = signed else {
        return Err(Error::not_found(format!(
            "task {id}'s receipt names no artifact or changed file {rel:?}"
        )));
    };
    let max = p.contract.limits.max_file_bytes.max(1);
    let shipped = t.receipt.with_file_name(format!("{id}.artifacts"));
    let paths = crate::project::locate::TaskPaths::of(&t.project, id);
    let found = [shipped.as_path(), paths.workspace.as_path()]
        .into_iter()
        .filter_map(|root| loop_workspace::door::read(root, rel, max).ok().flatten())
        .find(|b| loop_protocol::hash::sha256_hex(b) == sha256);
    match found {
        Some(bytes) => Ok(ProducedFile { bytes, sha256 }),
        None => Err(Error::conflict(format!(
            "task {id}'s {rel} is no longer as its receipt signs it (its workspace was applied, discarded or changed)"
        ))),
    }
}

/// A screenshot task `id`'s browser took, kept as its evidence by its
/// SHA-256 (see `loop_tools::browser`): PNG or JPEG, given only when its
/// content is the one its name says. Its media type comes with it.
pub fn evidence_file(
    project: &Path,
    id: &str,
    sha256: &str,
) -> Result<(ProducedFile, &'static str), Error> {
    let t = task(project, id)?;
    if sha256.len() != 64
        || !sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(Error::usage(format!(
            "`{sha256}` is not a SHA-256 (64 lowercase hexadecimal digits)"
        )));
    }
    let evidence = t.dir.join("evidence");
    for (ext, media) in [("png", "image/png"), ("jpeg", "image/jpeg")] {
        let name = format!("{sha256}.{ext}");
        if let Some(bytes) = loop_workspace::door::read(&evidence, &name, 16 << 20)
            .ok()
            .flatten()
            .filter(|b| loop_protocol::hash::sha256_hex(b) == sha256)
        {
            return Ok((
                ProducedFile {
                    bytes,
                    sha256: sha256.to_string(),
                },
                media,
            ));
        }
    }
    Err(Error::not_found(format!(
        "task {id} keeps no screenshot whose SHA-256 is {sha256}"
    )))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    /// While one apply, undo or discard holds a project, another waits and
    /// is refused as a conflict once its wait is over; a task of another
    /// project is not held up, and the lock is free again once dropped.
    #[test]
    fn one_apply_undo_or_discard_at_a_time_in_a_project() {
        let base = std::env::temp_dir().join(format!("loop-changing-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        for p in [&a, &b] {
            std::fs::create_dir_all(p.join(".loop")).unwrap();
        }
        let short = std::time::Duration::from_millis(100);
        let held = changing(&a, "t-1").unwrap();
        let e = changing_within(&a, "t-2", short).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Conflict, "{}", e.message);
        assert!(
            e.message
                .contains("task t-2: another apply, undo or discard"),
            "{}",
            e.message
        );
        // Another thread (as the server's requests are) is held up too.
        let a2 = a.clone();
        let waiter = std::thread::spawn(move || changing_within(&a2, "t-3", short).is_err());
        assert!(waiter.join().unwrap());
        assert!(changing_within(&b, "t-4", short).is_ok(), "another project");
        drop(held);
        assert!(
            changing_within(&a, "t-2", short).is_ok(),
            "free once dropped"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
