//! [`Runtime`]: one project's tasks behind one handle, the API every front
//! end calls. The CLI, the server, a worker and the MCP endpoint submit,
//! run, watch, steer and settle tasks through exactly these methods, so a
//! task behaves, records and proves the same whichever started it.

use crate::ops::changes::Settled;
use crate::ops::query::{Recorded, TaskStatus, TaskView};
use crate::task::control::Cancelled;
use crate::task::intake::{Admitted, TaskRequest};
use crate::task::request::TaskReport;
use crate::{Error, Observer, OnPrompt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A project's tasks.
#[derive(Clone)]
pub struct Runtime {
    project: PathBuf,
    /// The project's store, opened on first use and kept (a front end that
    /// polls `task` and `events` does not reopen it each time).
    store: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<dyn loop_store::Store>>>,
    /// The project's identity, looked up once (a listing asks each time).
    scope: std::sync::Arc<std::sync::OnceLock<crate::project::locate::ProjectScope>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// The runtime of the project `project` belongs to (see
    /// [`crate::project::locate::project_root`]; its store is `.loop/loop.db`, made
    /// on first use).
    pub fn open(project: &Path) -> Result<Runtime, Error> {
        let project = crate::project::locate::project_root(project)?;
        Ok(Runtime {
            project,
            store: Default::default(),
            scope: Default::default(),
        })
    }

    /// The runtime of exactly `dir` (canonical), wherever it is: for a
    /// project the caller itself made (the demo's), never taken for part
    /// of a repository around it.
    pub fn open_at(dir: &Path) -> Result<Runtime, Error> {
        let project = dir
            .canonicalize()
            .map_err(|e| Error::usage(format!("project {}: {e}", dir.display())))?;
        Ok(Runtime {
            project,
            store: Default::default(),
            scope: Default::default(),
        })
    }

    /// The project's store, opened once.
    pub(crate) fn store(&self) -> Result<&dyn loop_store::Store, Error> {
        if let Some(s) = self.store.get() {
            return Ok(s.as_ref());
        }
        // Two threads may race to open it; either store is the same one.
        let _ = self
            .store
            .set(crate::project::locate::open_store(&self.project)?);
        self.store
            .get()
            .map(|s| s.as_ref())
            .ok_or_else(|| Error::internal("the store could not be kept open"))
    }

    /// Why task `id` is not this project's to run, if it is not (a shared
    /// store holds other projects' tasks: a worker hands those back
    /// without spending an attempt of theirs).
    pub fn foreign(&self, id: &str) -> Result<Option<String>, Error> {
        let record = self
            .store()?
            .task(id)
            .map_err(crate::project::locate::store_err)?;
        let owner = crate::project::locate::stored_project(&record);
        crate::task::run::foreign(&self.project, id, owner.as_ref())
    }

    /// This project's identity, and the projects it serves.
    pub fn scope(&self) -> Result<crate::project::locate::ProjectScope, Error> {
        if let Some(s) = self.scope.get() {
            return Ok(s.clone());
        }
        let s = crate::project::locate::project_scope(&self.project)?;
        let _ = self.scope.set(s.clone());
        Ok(s)
    }

    /// Unfinished tasks in the store that are other projects' (not served
    /// here), counted by project id.
    pub fn others_unfinished(&self) -> Result<std::collections::BTreeMap<String, usize>, Error> {
        let scope = self.scope()?;
        let mut out = std::collections::BTreeMap::new();
        for t in self.store()?.tasks().map_err(Error::from_cause)? {
            if t.is_terminal() {
                continue;
            }
            if let Some(owner) =
                crate::project::locate::stored_project(&t).filter(|o| !scope.takes(Some(o)))
            {
                *out.entry(owner.id).or_insert(0) += 1;
            }
        }
        Ok(out)
    }

    /// Keep draft `id` of `owner` (a contract drafted over the API; `body`
    /// says where it stands) in the store, under this project, held by
    /// `holder` (a server process's token): it outlives the server that
    /// drafted it. `false`, and nothing written, when another holder has
    /// taken it over since (this one's hold lapsed): it is theirs.
    pub fn keep_draft(
        &self,
        id: &str,
        owner: &str,
        body: &serde_json::Value,
        holder: &str,
    ) -> Result<bool, Error> {
        self.keep_held(loop_store::Kept::Drafts, id, owner, body, holder)
    }

    /// Keep record `id` of `kind` for `owner` in this project, held by
    /// `holder`, unless another holder has taken it (`false`).
    fn keep_held(
        &self,
        kind: loop_store::Kept,
        id: &str,
        owner: &str,
        body: &serde_json::Value,
        holder: &str,
    ) -> Result<bool, Error> {
        let project = self.scope()?.identity.id;
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        self.store()?
            .put_kept_held(kind, id, owner, &project, &body.to_string(), holder, now)
            .map_err(crate::project::locate::store_err)
    }

    /// Take kept draft `id` over from the record as read (`from`: its
    /// holder in the store and when it was last written) for holder `to`,
    /// writing `body`: `false` when it was written since (another server
    /// took it first) or is gone. One write decides between two servers.
    pub fn claim_draft(
        &self,
        id: &str,
        from: (&str, u64),
        to: &str,
        body: &serde_json::Value,
    ) -> Result<bool, Error> {
        self.claim_kept(loop_store::Kept::Drafts, id, from, to, body)
    }

    /// Take record `id` of `kind` over from `from` (its holder and when it
    /// was last written, as read) for `to`, writing `body`.
    fn claim_kept(
        &self,
        kind: loop_store::Kept,
        id: &str,
        from: (&str, u64),
        to: &str,
        body: &serde_json::Value,
    ) -> Result<bool, Error> {
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        self.store()?
            .claim_kept(kind, id, from, to, &body.to_string(), now)
            .map_err(crate::project::locate::store_err)
    }

    /// Kept draft `id`, as the store has it now.
    pub fn kept_draft(&self, id: &str) -> Result<Option<loop_store::DraftRecord>, Error> {
        self.store()?
            .kept_one(loop_store::Kept::Drafts, id)
            .map_err(crate::project::locate::store_err)
    }

    /// This project's kept drafts, oldest first, once those last written
    /// before `before_ms` are dropped.
    pub fn kept_drafts(&self, before_ms: u64) -> Result<Vec<loop_store::DraftRecord>, Error> {
        let project = self.scope()?.identity.id;
        let store = self.store()?;
        store
            .drop_drafts(&project, before_ms)
            .map_err(crate::project::locate::store_err)?;
        store
            .drafts(&project)
            .map_err(crate::project::locate::store_err)
    }

    /// Keep submission `id` of `owner` (a task asked for over the API and
    /// answered before its preparation; `body` says how to prepare it, or
    /// why it was refused) in the store, under this project, held by
    /// `holder` (a server process's token): it outlives the server that
    /// answered. Refused (a conflict) when another server holds it.
    pub fn keep_submission(
        &self,
        id: &str,
        owner: &str,
        body: &serde_json::Value,
        holder: &str,
    ) -> Result<(), Error> {
        if self.keep_held(loop_store::Kept::Submissions, id, owner, body, holder)? {
            Ok(())
        } else {
            Err(Error::conflict(format!(
                "submission {id} is held by another server"
            )))
        }
    }

    /// Kept submission `id`, if there is one.
    pub fn kept_submission(&self, id: &str) -> Result<Option<loop_store::DraftRecord>, Error> {
        self.store()?
            .kept_one(loop_store::Kept::Submissions, id)
            .map_err(crate::project::locate::store_err)
    }

    /// Take submission `id` over from holder `from` (its holder and when
    /// it was last written, as read) for `to` (empty: nobody), with
    /// `body`: `false` when it was renewed or taken since, or is gone.
    pub fn claim_submission(
        &self,
        id: &str,
        from: (&str, u64),
        to: &str,
        body: &serde_json::Value,
    ) -> Result<bool, Error> {
        self.claim_kept(loop_store::Kept::Submissions, id, from, to, body)
    }

    /// Renew every submission `holder` holds: how many.
    pub fn renew_submissions(&self, holder: &str) -> Result<u64, Error> {
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        self.store()?
            .renew_kept(loop_store::Kept::Submissions, holder, now)
            .map_err(crate::project::locate::store_err)
    }

    /// This project's kept submissions, oldest first, once those last
    /// written before `before_ms` are dropped.
    pub fn kept_submissions(&self, before_ms: u64) -> Result<Vec<loop_store::DraftRecord>, Error> {
        let project = self.scope()?.identity.id;
        let store = self.store()?;
        store
            .drop_kept(loop_store::Kept::Submissions, &project, before_ms)
            .map_err(crate::project::locate::store_err)?;
        store
            .kept(loop_store::Kept::Submissions, &project)
            .map_err(crate::project::locate::store_err)
    }

    /// `e` (task `id` is not stored), saying so when the id is a kept
    /// submission: answered over the API, not prepared yet, or refused.
    fn said_of_submission(&self, id: &str, mut e: Error) -> Error {
        // Where nothing was ever stored, nothing is made to find that out.
        if self.store.get().is_none() && self.nothing_stored().unwrap_or(true) {
            return e;
        }
        let Ok(Some(r)) = self.kept_submission(id) else {
            return e;
        };
        let refused = serde_json::from_str::<serde_json::Value>(&r.body)
            .ok()
            .and_then(|v| v["refused"][2].as_str().map(str::to_string));
        e.message = match refused {
            Some(why) => format!(
                "task {id} was asked for over the API and refused in its preparation: {why}"
            ),
            None => format!(
                "task {id} was asked for over the API (owner {}) and waits for its preparation by `loop serve` (the next one, if the server stopped); it shows here once it is stored",
                r.owner
            ),
        };
        e
    }

    /// Forget the kept submissions whose tasks are stored; how many.
    pub fn forget_stored_submissions(&self) -> Result<u64, Error> {
        self.store()?
            .forget_kept_stored(loop_store::Kept::Submissions)
            .map_err(crate::project::locate::store_err)
    }

    /// Forget submission `id` (its task is stored, or its refusal is old).
    pub fn forget_submission(&self, id: &str) -> Result<(), Error> {
        self.store()?
            .forget_kept(loop_store::Kept::Submissions, id)
            .map(drop)
            .map_err(crate::project::locate::store_err)
    }

    /// Which store the project uses and whether it answers (`loop doctor`).
    pub fn describe_store(&self) -> Result<String, Error> {
        self.store()?.describe().map_err(Error::from_cause)
    }

    /// The project's directory (canonical).
    pub fn project(&self) -> &Path {
        &self.project
    }

    /// Take in and prepare the task `req` asks for ([`Runtime::admit`],
    /// then the workspace, the baseline and the store); it is ready to
    /// [`Runtime::run`]. Its id.
    pub fn submit(&self, req: TaskRequest, observer: &mut dyn Observer) -> Result<String, Error> {
        let admitted = self.admit(req)?;
        self.submit_admitted(admitted, observer)
    }

    /// Prepare and store a request already taken in.
    pub fn submit_admitted(
        &self,
        mut req: Admitted,
        observer: &mut dyn Observer,
    ) -> Result<String, Error> {
        req.project = self.project.clone();
        crate::task::prepare::submit(&req, observer)
    }

    /// [`Runtime::submit_admitted`], under the id `id` chosen beforehand
    /// ([`Runtime::new_task_id`]): a caller that answers before the
    /// preparation ends can name the task it will be.
    pub fn submit_admitted_as(
        &self,
        id: &str,
        mut req: Admitted,
        observer: &mut dyn Observer,
    ) -> Result<String, Error> {
        req.project = self.project.clone();
        crate::task::prepare::submit_as(id, &req, observer)
    }

    /// A fresh task id.
    pub fn new_task_id(&self) -> Result<String, Error> {
        crate::project::locate::new_task_id(loop_core::Clock::now_ms(&loop_core::SystemClock))
    }

    /// Submit the task `req` asks for and run it here to its end; it is
    /// claimed the moment it is stored, so no other process finds it
    /// waiting in between.
    pub fn start(
        &self,
        req: TaskRequest,
        observer: &mut dyn Observer,
    ) -> Result<TaskReport, Error> {
        let admitted = self.admit(req)?;
        crate::task::run::run_task(admitted, observer)
    }

    /// Run task `id` to its end, from wherever its record stops (a task
    /// just submitted starts; an interrupted one resumes).
    pub fn run(
        &self,
        id: &str,
        on_prompt: OnPrompt,
        observer: &mut dyn Observer,
    ) -> Result<TaskReport, Error> {
        crate::task::run::resume_task(&self.project, id, None, on_prompt, observer)
    }

    /// Give task `id`, which reached a limit, more budget and let it go on.
    pub fn extend(
        &self,
        id: &str,
        extension: loop_core::Extension,
        on_prompt: OnPrompt,
        observer: &mut dyn Observer,
    ) -> Result<TaskReport, Error> {
        crate::task::run::resume_task(&self.project, id, Some(extension), on_prompt, observer)
    }

    /// Ask task `id` to stop and wait up to `wait` until it has.
    pub fn cancel(
        &self,
        id: &str,
        wait: Duration,
        observer: &mut dyn Observer,
    ) -> Result<Cancelled, Error> {
        crate::task::control::cancel(&self.project, id, wait, observer)
    }

    /// Answer task `id`'s pending approval or checkpoint.
    pub fn answer(
        &self,
        id: &str,
        approve: bool,
        message: Option<&str>,
    ) -> Result<loop_store::Approval, Error> {
        crate::task::control::answer(&self.project, id, approve, message, None)
    }

    /// [`Runtime::answer`], saying who answered (recorded in the ledger's
    /// `approval_decided.by`; `loop approve` otherwise).
    pub fn answer_as(
        &self,
        id: &str,
        approve: bool,
        message: Option<&str>,
        by: &str,
    ) -> Result<loop_store::Approval, Error> {
        crate::task::control::answer(&self.project, id, approve, message, Some(by))
    }

    /// [`Runtime::answer_as`], of the request `approval_id` only (a click
    /// on a question never answers a newer one).
    pub fn answer_request(
        &self,
        id: &str,
        approval_id: &str,
        approve: bool,
        message: Option<&str>,
        by: &str,
    ) -> Result<loop_store::Approval, Error> {
        crate::task::control::answer_request(
            &self.project,
            id,
            Some(approval_id),
            approve,
            message,
            Some(by),
        )
    }

    /// The full id of the task `given` names: its full id, `last` (the
    /// newest task), or a prefix only one task's id starts with.
    pub fn resolve_id(&self, given: &str) -> Result<String, Error> {
        let given = given.trim();
        let ids: Vec<String> = self.tasks()?.into_iter().map(|t| t.id).collect();
        if given == "last" {
            // The newest by creation (the store lists newest first): two
            // tasks made within one second have ids in no order.
            return ids
                .into_iter()
                .next()
                .ok_or_else(|| Error::usage("`last`: this project has no task yet"));
        }
        if ids.iter().any(|i| i == given) {
            return Ok(given.to_string());
        }
        let matching: Vec<&String> = ids
            .iter()
            .filter(|i| !given.is_empty() && i.starts_with(given))
            .collect();
        match matching.as_slice() {
            [one] => Ok((*one).clone()),
            // Never stored, its preparation killed: named, for what can be
            // done with what it left (status says so, discard removes it).
            // (The store is opened only where a mark is: a directory
            // where nothing was ever run stays as it is.)
            [] if crate::project::locate::is_task_id(given)
                && crate::project::preparing::has_mark(&self.project, given)
                && crate::project::preparing::was_killed(&self.project, given, self.store()?) =>
            {
                Ok(given.to_string())
            }
            [] => Err(self.said_of_submission(
                given,
                Error::not_found(format!(
                    "no task `{given}` in {} (`loop list` shows them; `last` is the newest)",
                    self.project.display()
                )),
            )),
            many => Err(Error::usage(format!(
                "`{given}` is the start of {} task ids ({}): give more of it",
                many.len(),
                many.iter()
                    .take(5)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Every task.
    /// This project's tasks (a shared store's other projects' are not
    /// listed; tasks recorded before projects had identities are).
    pub fn tasks(&self) -> Result<Vec<TaskView>, Error> {
        // Listing a directory where nothing was ever run makes nothing
        // there (no `.loop/`, no store): it has no tasks.
        if self.store.get().is_none() && self.nothing_stored()? {
            return Ok(Vec::new());
        }
        let scope = self.scope()?;
        crate::ops::query::tasks(self.store()?, &|t| {
            scope.takes(crate::project::locate::stored_project(t).as_ref())
        })
    }

    /// No store was ever made for this project: no `.loop/loop.db` and no
    /// store named (`--store`, `LOOP_STORE_URL`, the Loopfile's `store:`).
    fn nothing_stored(&self) -> Result<bool, Error> {
        Ok(crate::project::locate::store_url(&self.project)?.is_none()
            && matches!(
                loop_workspace::door::node(&self.project, ".loop/loop.db"),
                Ok(loop_workspace::Node::Missing)
            ))
    }

    /// Task `id`.
    pub fn task(&self, id: &str) -> Result<TaskView, Error> {
        crate::ops::query::task(self.store()?, id)
    }

    /// Record that queue `queue` gave up on task `id`, and why: `loop
    /// status`, the API and the console show it until the task ends.
    pub fn mark_dead_lettered(&self, id: &str, queue: &str, reason: &str) -> Result<(), Error> {
        let note = crate::ops::query::DeadLetterNote {
            queue: queue.to_string(),
            reason: reason.to_string(),
            at_ms: loop_core::Clock::now_ms(&loop_core::SystemClock),
        };
        let body = serde_json::to_string(&note).map_err(|e| Error::internal(e.to_string()))?;
        self.store()?
            .put_task_file(
                id,
                &loop_store::TaskFile {
                    name: crate::ops::query::DEAD_LETTER,
                    body: &body,
                    blobs: &[],
                    keep_only: None,
                    durable: true,
                },
                None,
                note.at_ms,
            )
            .map_err(crate::project::locate::store_err)
    }

    /// Task `id` in full. A task that ended elsewhere (another machine, a
    /// clone that serves this project) has its receipt brought here.
    pub fn status(&self, id: &str) -> Result<TaskStatus, Error> {
        let mut s = crate::ops::query::status(self.store()?, &self.project, id)
            .map_err(|e| self.said_of_submission(id, e))?;
        if s.task.receipt.is_some()
            && let Some(here) = self.bring_receipt(id)
        {
            s.task.receipt = Some(here.display().to_string());
        }
        Ok(s)
    }

    /// Task `id`'s receipt in this project's `.loop/receipts` (brought
    /// from a shared store when the task ended elsewhere), if there is one.
    pub fn receipt_path(&self, id: &str) -> Option<PathBuf> {
        self.bring_receipt(id)
    }

    /// Task `id`'s receipt in this project's `.loop/receipts`, brought
    /// from a shared store when the task ended elsewhere (said, not fatal,
    /// when it cannot be).
    fn bring_receipt(&self, id: &str) -> Option<PathBuf> {
        let store = self.store().ok()?;
        // Only this project's (or a project it serves): another project's
        // change set is never brought here.
        let record = store.task(id).ok()?;
        if !self
            .scope()
            .ok()?
            .takes(crate::project::locate::stored_project(&record).as_ref())
        {
            return None;
        }
        match crate::task::end::bring_receipt(store, &self.project, id) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("task {id}: its receipt was not brought here: {e}");
                None
            }
        }
    }

    /// Task `id`'s events from position `since` on.
    pub fn events(&self, id: &str, since: u64) -> Result<Vec<Recorded>, Error> {
        crate::ops::query::events(self.store()?, id, since)
    }

    /// Tasks not over whose runtime is gone.
    pub fn interrupted(&self) -> Result<Vec<String>, Error> {
        crate::task::control::interrupted_tasks(&self.project)
    }

    /// Apply task `id`'s change set to the project.
    pub fn apply(
        &self,
        id: &str,
        consent: crate::ops::changes::ApplyConsent,
        observer: &mut dyn Observer,
    ) -> Result<Settled, Error> {
        self.bring_receipt(id);
        crate::ops::changes::apply(&self.project, id, consent, observer)
    }

    /// Settle an apply or undo that was killed midway.
    pub fn recover(&self, id: &str, observer: &mut dyn Observer) -> Result<Settled, Error> {
        crate::ops::changes::recover(&self.project, id, observer)
    }

    /// Task `id`'s change set: from its receipt once it has ended, else
    /// from its workspace as it is now.
    pub fn diff(&self, id: &str) -> Result<crate::ops::changes::Diff, Error> {
        self.bring_receipt(id);
        crate::ops::changes::diff(&self.project, id)
    }

    /// The file `rel` task `id` made (an artifact, or a file its change
    /// set adds or modifies), as its receipt signs it.
    pub fn produced_file(&self, id: &str, rel: &str) -> Result<crate::ProducedFile, Error> {
        self.bring_receipt(id);
        crate::ops::changes::produced_file(&self.project, id, rel)
    }

    /// A screenshot task `id`'s browser kept as evidence, by its SHA-256,
    /// with its media type.
    pub fn evidence_file(
        &self,
        id: &str,
        sha256: &str,
    ) -> Result<(crate::ProducedFile, &'static str), Error> {
        crate::ops::changes::evidence_file(&self.project, id, sha256)
    }

    /// Undo task `id`'s applied change set.
    pub fn undo(&self, id: &str, observer: &mut dyn Observer) -> Result<Settled, Error> {
        crate::ops::changes::undo(&self.project, id, observer)
    }

    /// Stop counting task `id`'s change set as applied, touching no file.
    pub fn forget(&self, id: &str, observer: &mut dyn Observer) -> Result<Settled, Error> {
        crate::ops::changes::forget(&self.project, id, observer)
    }

    /// Remove task `id`'s workspace (its receipt stays).
    pub fn discard(&self, id: &str, observer: &mut dyn Observer) -> Result<Settled, Error> {
        crate::ops::changes::discard(&self.project, id, observer)
    }

    /// The dependency environments a task here would share, and where
    /// each stands.
    pub fn audit(&self) -> Result<crate::ops::audit::Audit, Error> {
        crate::ops::audit::audit(&self.project)
    }
}
