//! Driving a stored task: claim it, rebuild its record from the store,
//! wire the Director to its tools, verifier, models, ledger and approvals,
//! run it to its end (fresh, resumed or extended), then ship what it made
//! ([`crate::task::end`]).

use crate::Error;
use crate::models::Models;
use crate::project::locate::{Start, TaskPaths, claim, git_dir, store_err};
use crate::task::adapters::{StoreApprovals, StoreLedger, ToolsAdapter, VerifierAdapter};
use crate::task::delegate::Delegator;
use crate::task::request::{StoredRequest, TaskReport};
use loop_core::Observer as _;
use loop_core::{Clock, Director, Parts, RunResult, SystemClock, VerifyPolicy};
use loop_protocol::Event;
use loop_protocol::LedgerEntry;
use loop_receipt::FileLedger;
use loop_store::Store;
use loop_tools::{ToolBox, ToolLimits};
use loop_verifier::SnapshotVerifier;
use loop_workspace::{Jail, Manifest};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Which task to drive, and how.
pub(crate) struct Run<'r> {
    pub store: &'r dyn loop_store::Store,
    pub task_id: &'r str,
    pub stored: &'r StoredRequest,
    pub on_prompt: crate::task::asking::OnPrompt,
    pub extension: Option<loop_core::Extension>,
    /// The claim this process already holds (a task it just submitted).
    pub claimed: Option<loop_store::Owner>,
    /// How a child task this one delegates to is run here to its end.
    pub start_child: crate::task::delegate::StartChild,
}

/// The record so far, as the store has it (the truth; the ledger file is
/// rewritten to match), and the wall time it used.
struct Record {
    history: Vec<Event>,
    chain: Vec<LedgerEntry>,
    elapsed_ms: u64,
}

impl Record {
    fn load(store: &dyn Store, task_id: &str, pause_clock: bool) -> Result<Record, Error> {
        let chain = store.entries(task_id, 0).map_err(store_err)?;
        let history = chain
            .iter()
            .map(|e| {
                Event::from_kind_payload(&e.kind, &e.payload).map_err(|x| {
                    Error::internal(format!(
                        "task {task_id}: entry {} cannot be read: {x}",
                        e.seq
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let at = |e: &LedgerEntry| loop_protocol::time::parse_rfc3339_millis(&e.at);
        let mut elapsed_ms = match (chain.first(), chain.last()) {
            (Some(a), Some(b)) => at(b).zip(at(a)).map_or(0, |(b, a)| b.saturating_sub(a)),
            _ => 0,
        };
        // With `pause_clock`, the record's waits for a person were not charged.
        if pause_clock {
            let mut asked = None;
            for (e, event) in chain.iter().zip(&history) {
                match event {
                    Event::ApprovalRequested { .. } | Event::CheckpointRequested { .. } => {
                        asked = at(e)
                    }
                    Event::ApprovalDecided { .. } | Event::CheckpointDecided { .. } => {
                        if let (Some(a), Some(d)) = (asked.take(), at(e)) {
                            elapsed_ms = elapsed_ms.saturating_sub(d.saturating_sub(a));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Record {
            history,
            chain,
            elapsed_ms,
        })
    }

    /// Wall time left of the budget granted (the contract's, every
    /// extension on record, and `extension`): no command or check runs
    /// past it.
    fn remaining_ms(&self, timeout_secs: u64, extension: Option<&loop_core::Extension>) -> u64 {
        let granted_secs = self
            .history
            .iter()
            .map(|e| match e {
                Event::BudgetExtended { add_secs, .. } => *add_secs,
                _ => 0,
            })
            .chain(extension.map(|x| x.add_secs))
            .fold(timeout_secs, u64::saturating_add);
        granted_secs
            .saturating_mul(1000)
            .saturating_sub(self.elapsed_ms)
    }
}

/// Leftovers of runtimes that were killed (their private tmp, cgroups),
/// removed and said.
fn sweep(observer: &mut dyn crate::Observer) {
    let swept = loop_sandbox::sweep::sweep(&std::env::temp_dir());
    if swept != loop_sandbox::sweep::Swept::default() {
        observer.note(&format!(
            "cleaned up after runs that ended without cleaning up ({}): {} temporary dir(s), {} cgroup(s)",
            swept.whose(),
            swept.dirs,
            swept.cgroups
        ));
    }
}

/// The tools and the verifier of one run, over one sandbox.
struct Wired<'a> {
    tools: ToolsAdapter<'a>,
    verifier: VerifierAdapter,
    paused: Arc<AtomicU64>,
    /// A decision to end the task (a person's cancel, this process's
    /// Ctrl-C/SIGTERM): the Director records it as `cancelled`.
    cancel: Arc<AtomicBool>,
    /// Stop what runs (commands, checks, the model's call in flight):
    /// raised with `cancel` and with `interrupted`.
    kill: Arc<AtomicBool>,
    /// A fault (the claim cannot be renewed): the Director decides
    /// nothing and the task stays interrupted, to be resumed.
    interrupted: Arc<AtomicBool>,
}

/// The contract's limits as the tools enforce them (max_diff_lines was
/// once left at its default whatever the contract said).
fn tool_limits(contract: &loop_protocol::Contract) -> ToolLimits {
    ToolLimits {
        max_diff_lines: usize::try_from(contract.limits.max_diff_lines).unwrap_or(usize::MAX),
        max_file_bytes: contract.limits.max_file_bytes,
        disk_bytes: contract.limits.disk_mb.saturating_mul(1024 * 1024),
        write_bytes: contract.limits.write_mb.saturating_mul(1024 * 1024),
        ..ToolLimits::default()
    }
}

/// Nothing is written once the claim may have lapsed, and a refused write
/// is a fault, not an observation: the run stops at once and the task
/// stays interrupted (the model never hears of it).
fn fenced(
    toolbox: ToolBox,
    fence: &Arc<ClaimFence>,
    interrupted: &Arc<AtomicBool>,
    kill: &Arc<AtomicBool>,
) -> ToolBox {
    let (claim, faulted, stop) = (fence.clone(), interrupted.clone(), kill.clone());
    toolbox.with_fence(Arc::new(move || {
        let holds = claim.holds();
        if !holds {
            faulted.store(true, std::sync::atomic::Ordering::SeqCst);
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        holds
    }))
}

/// The task's verifier: protected paths guarded against the baseline, the
/// root `.git` kept as git made it (left out of manifests, since it names
/// a path of this machine), checks compared with the baseline's, new
/// tests required to run.
fn task_verifier(
    project: &Path,
    paths: &TaskPaths,
    start: &Start,
    (protected, new_tests): (loop_workspace::Protected, Vec<String>),
    sandbox: loop_sandbox::Settings,
    contract: &loop_protocol::Contract,
) -> SnapshotVerifier {
    // Learn now, not on the first verification's critical path, whether
    // checks can run on overlays — only when a check runs a command.
    if loop_verifier::runs_commands(contract) {
        let _ = loop_sandbox::overlay_available();
    }
    let mut verifier = SnapshotVerifier::new(&paths.workspace, &paths.near.join("scratch"))
        .guard_protected(start.baseline.clone(), protected)
        .with_sandbox(sandbox)
        .with_builds(&paths.near.join(crate::task::prepare::BUILDS), [])
        .with_settled(&paths.near.join(crate::task::prepare::SETTLED));
    if crate::task::prepare::go_module(project) {
        verifier = verifier.with_go_cache();
    }
    // The root `.git` must stay the pointer git made, or stay absent.
    let root_git = match &start.task_ws.origin {
        loop_workspace::Origin::Worktree { repo, .. } => {
            loop_workspace::worktree_pointer(repo, &paths.workspace).map(Some)
        }
        loop_workspace::Origin::Copy { .. } => Some(None),
    };
    if let Some(expected) = root_git {
        verifier = verifier.guard_root_git(expected);
    }
    if let Some(b) = &start.baseline_report {
        verifier =
            verifier.compare_with_baseline(b.clone(), contract.allow_check_changes.is_empty());
    }
    verifier.with_new_tests(new_tests)
}

/// Whether a task works with documents (a document check, an artifact
/// that is a spreadsheet, Word document or PDF, or a document or image
/// given with it): then it is offered the document tools and `view_image`.
fn works_with_documents(stored: &StoredRequest) -> bool {
    let contract = &stored.contract;
    let image = |p: &str| {
        let l = p.to_ascii_lowercase();
        [".png", ".jpg", ".jpeg", ".gif", ".webp"]
            .iter()
            .any(|e| l.ends_with(e))
    };
    contract
        .criteria
        .iter()
        .flat_map(|c| &c.checks)
        .any(loop_protocol::Check::is_document)
        || contract
            .artifacts
            .iter()
            .any(|a| loop_documents::Format::of(a.as_str()).is_some())
        || stored
            .inputs
            .iter()
            .any(|f| loop_documents::Format::of(&f.path).is_some() || image(&f.path))
}

/// The images among the files given with the task, as they were given
/// (one the task has changed since is not shown again), each at most
/// [`loop_tools::documents::MAX_IMAGE_BYTES`].
fn input_images(
    workspace: &Path,
    inputs: &[loop_protocol::KeyedFile],
) -> Vec<loop_protocol::observation::Image> {
    inputs
        .iter()
        .filter_map(|f| {
            let bytes = loop_workspace::door::read(
                workspace,
                &f.path,
                loop_tools::documents::MAX_IMAGE_BYTES,
            )
            .ok()
            .flatten()?;
            (loop_protocol::hash::sha256_hex(&bytes) == f.sha256)
                .then(|| loop_tools::documents::image_of(&f.path, bytes).ok())
                .flatten()
        })
        .collect()
}

/// The task's tool box: its authority (the jail, the policies, the
/// limits), the commands' sandbox, what earlier runs used of its budgets,
/// the claim's fence and the edit journal.
fn task_toolbox(
    (jail, tool_limits, commands): (Jail, ToolLimits, loop_sandbox::Settings),
    stored: &StoredRequest,
    (paths, start, kept): (&TaskPaths, &Start, bool),
    (written, (written_file, charged)): (Arc<AtomicU64>, (std::path::PathBuf, u64)),
    (fence, interrupted, kill): (&Arc<ClaimFence>, &Arc<AtomicBool>, &Arc<AtomicBool>),
) -> Result<ToolBox, Error> {
    let toolbox = ToolBox::new(jail, tool_limits)
        .map_err(Error::from_cause)?
        .with_sandbox(commands)
        .with_mcp_servers(stored.mcp_servers.clone())
        .with_exec_policy(stored.exec_policy.clone().unwrap_or_default())
        .with_code_policy(stored.code_policy.clone().unwrap_or_default())
        .with_documents(works_with_documents(stored))
        .with_browser(stored.contract.browser)
        .with_evidence(paths.task_dir.join("evidence"));
    // The edit journal lives with the task: a step a crash interrupted is
    // rolled back before anything else happens (nothing is rolled back
    // into the stand-in of a workspace that is gone).
    // A workspace whose state the store keeps needs no sync of its own.
    let toolbox = if kept {
        toolbox.without_syncs()
    } else {
        toolbox
    };
    // What the task's earlier runs left counts against its disk budget
    // too: a resumed task does not start again from nothing.
    let toolbox = toolbox.with_disk_used(grown_since(&paths.workspace, &start.baseline));
    // And what its commands wrote (kept in the task directory after each
    // command).
    let toolbox = toolbox.with_written(written, (Some(written_file), charged));
    // Nothing is written once the claim may have lapsed, and a refused
    // write is a fault, not an observation: the run stops at once and the
    // task stays interrupted (the model never hears of it).
    let toolbox = fenced(toolbox, fence, interrupted, kill);
    let toolbox = if start.gone {
        toolbox
    } else {
        toolbox
            .with_journal(&paths.near.join("journal"))
            .map_err(Error::from_cause)?
            .0
    };
    Ok(toolbox)
}

/// The tool box (authority, journal, policies, limits) and the verifier
/// (protected paths guarded, baseline compared), sharing one sandbox.
fn wire<'a>(
    project: &'a Path,
    paths: &TaskPaths,
    stored: &StoredRequest,
    start: &'a Start,
    remaining_ms: u64,
    (kept, fence): (bool, &Arc<ClaimFence>),
) -> Result<Wired<'a>, Error> {
    let contract = &stored.contract;
    let isolation = stored.isolation;
    let (protected, new_tests) = crate::task::request::guarded(stored, &start.baseline)?;
    let jail = Jail::new(&paths.workspace, protected.clone())
        .map_err(|e| Error::internal(format!("workspace: {e}")))?;
    let paused = Arc::new(AtomicU64::new(0));
    let written_file = paths.task_dir.join(crate::project::locate::WRITTEN);
    let (in_all, charged) = crate::project::locate::written_in_all(&paths.task_dir)
        .map_err(|e| Error::internal(format!("what the task wrote: {e}")))?;
    let written = Arc::new(AtomicU64::new(in_all));
    // The task's own flag: a process that runs several tasks (a server)
    // stops only the one asked to stop. The watcher raises it for a
    // cancel request in the store and for this process's Ctrl-C/SIGTERM.
    let cancel = Arc::new(AtomicBool::new(
        crate::interrupt::flag().load(std::sync::atomic::Ordering::SeqCst)
            && !crate::interrupt::stopping(),
    ));
    let kill = Arc::new(AtomicBool::new(
        cancel.load(std::sync::atomic::Ordering::SeqCst),
    ));
    let interrupted = Arc::new(AtomicBool::new(false));
    let sandbox = crate::project::environments::with_environments(
        loop_sandbox::Settings {
            isolation,
            cancel: Some(kill.clone()),
            deadline: std::time::Instant::now()
                .checked_add(std::time::Duration::from_millis(remaining_ms)),
            paused_ms: Some(paused.clone()),
            git_dir: git_dir(&start.task_ws.origin),
            disk_mb: Some(contract.limits.disk_mb),
            ..Default::default()
        },
        project,
        Some(&paths.near.join("layers")),
        &stored.shares,
        stored.setup.as_ref(),
    );
    let tool_limits = tool_limits(contract);
    // Commands and checks differ only in the hosts they may reach.
    let commands = loop_sandbox::Settings {
        egress: stored
            .network
            .egress(crate::project::network::Use::Commands),
        ..sandbox.clone()
    };
    let sandbox = loop_sandbox::Settings {
        egress: stored.network.egress(crate::project::network::Use::Checks),
        ..sandbox
    };
    let toolbox = task_toolbox(
        (jail, tool_limits, commands),
        stored,
        (paths, start, kept),
        (written, (written_file, charged)),
        (fence, &interrupted, &kill),
    )?;
    let diff_ws = paths.workspace.clone();
    let parent = crate::task::change_set::parent_workspace(project, stored);
    let tools = ToolsAdapter {
        tools: toolbox,
        diff: Some(Box::new(move || match Manifest::of(&diff_ws) {
            Ok(now) => {
                let (base, ws) = (&start.baseline, &start.task_ws);
                crate::task::change_set::compute(project, ws, base, &now, parent.as_deref()).patch
            }
            Err(e) => format!("(the change cannot be computed: {e})"),
        })),
        keeper: None,
        rebuilt: false,
        delegator: None,
        skill_tools: stored
            .skills
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.capabilities.tools.clone()?)))
            .collect(),
        remembered: 0,
    };
    // Protected paths are guarded twice: tools refuse to write them, and the
    // verifier rejects a seal in which they differ from the baseline.
    let verifier = task_verifier(
        project,
        paths,
        start,
        (protected, new_tests),
        sandbox,
        contract,
    );
    Ok(Wired {
        tools,
        verifier: VerifierAdapter(verifier),
        paused,
        cancel,
        kill,
        interrupted,
    })
}

/// Claim the task, rebuild it from the store, run it to its end, and ship
/// its receipt.
pub(crate) fn drive(
    project: &Path,
    run: Run<'_>,
    models: Models,
    observer: &mut dyn crate::Observer,
) -> Result<TaskReport, Error> {
    let Run {
        store,
        task_id,
        stored,
        on_prompt,
        extension,
        claimed,
        start_child,
    } = run;
    let clock = SystemClock;
    let observer = &mut crate::task::adapters::Scrubbed(observer);
    let paths = TaskPaths::of(project, task_id);
    let child = stored.delegation.is_some();
    let owner = take(store, (task_id, child), claimed, observer)?;
    // However this run ends (an error, a panic), the claim is let go: a
    // long-lived server or worker would otherwise hold a task it no longer
    // runs until the process ends. (A task that ended has no owner already.)
    let _release = Release {
        store,
        task_id,
        token: &owner.token,
    };
    let fence = Arc::new(ClaimFence::new());
    let pause_clock = stored.checkpoints.as_ref().is_some_and(|c| c.pause_clock);
    let (record, settled, start, remaining_ms) = restore(
        (store, project, &paths),
        (task_id, stored, extension.as_ref()),
        (&owner.token, pause_clock),
        observer,
    )?;
    let mut wired = wire_settled(
        (project, store, task_id),
        (&paths, stored, &start),
        remaining_ms,
        (settled, &fence),
    )?;
    let live = crate::Observer::live_feed(observer);
    wired.verifier.0.set_live(live.clone());
    // The person this run's front end asks, shared with its children.
    let person = crate::Observer::prompter(observer).map(crate::task::asking::Person::new);
    let with = (on_prompt, person.clone(), start_child);
    let task = (project, task_id, stored);
    carry_on(&mut wired, task, &paths, with, &record.history);
    let ledger_name = format!("{task_id}.ledger.jsonl");
    let mut ledger = ledger_for(store, task_id, &paths, &ledger_name, &record, &clock)?;
    keep_with(&mut ledger, &owner.token, &wired, (&paths, &start));
    for e in &record.history {
        observer.on_event(e);
    }
    let (mut model, mut checker) = models;
    let provenance = hook_models((&mut model, checker.as_mut()), live, &wired.kill);
    // The task's clock keeps running while it waits for a person, unless
    // the Loopfile pauses it.
    let deadline = (!pause_clock).then(|| clock.now_ms().saturating_add(remaining_ms));
    let mut approvals = approvals_of(
        (store, task_id, stored),
        &clock,
        on_prompt,
        deadline,
        person,
    );
    let cancel = wired.cancel.clone();
    let (kill, interrupted) = (wired.kill.clone(), wired.interrupted.clone());
    let parts = Parts {
        model: model.as_mut(),
        tools: &mut wired.tools,
        verifier: &mut wired.verifier,
        ledger: &mut ledger,
        clock: &clock,
        observer: &mut *observer,
        cancel: &cancel,
    };
    let gone = gone(&start, &paths);
    let director = configured(
        task_id,
        parts,
        stored,
        &mut approvals,
        wired.paused.clone(),
        checker
            .as_deref_mut()
            .map(|c| c as &mut dyn loop_core::Model),
        (gone, &paths.workspace),
    )?
    .with_interrupt(&interrupted);
    confirm_claim(store, task_id, &owner.token, &fence)?;
    let result = run_watched(
        project,
        task_id,
        &owner.token,
        Flags {
            cancel: &cancel,
            kill: &kill,
            interrupted: &interrupted,
            fence: &fence,
        },
        || match extension {
            Some(ext) => director.extend(&record.history, record.elapsed_ms, ext),
            None => director.resume(&record.history, record.elapsed_ms),
        },
    );
    let result = result.map_err(Error::from_cause)?;
    let sealed = wired
        .verifier
        .0
        .last_sealed()
        .map(|s| s.dir().to_path_buf());
    ship_ended(
        (project, store, task_id, stored),
        (&paths, &start, sealed.as_deref()),
        (result, ledger, ledger_name),
        (provenance, &owner.token),
    )
}

/// The approvals of task `task_id`: asked of `person` (shared with its
/// children) when its mode is to ask, each naming its parent if it has one.
fn approvals_of<'c>(
    (store, task_id, stored): (&'c dyn loop_store::Store, &str, &StoredRequest),
    clock: &'c dyn Clock,
    on_prompt: crate::OnPrompt,
    task_deadline_ms: Option<u64>,
    person: Option<crate::task::asking::Person>,
) -> StoreApprovals<'c> {
    StoreApprovals {
        store,
        task_id: task_id.to_string(),
        clock,
        on_prompt,
        task_deadline_ms,
        always: Default::default(),
        prompter: person.map(|p| Box::new(p.turn()) as Box<dyn crate::Prompter>),
        parent: stored.delegation.as_ref().map(|d| d.from.parent.clone()),
    }
}

/// Everything recorded committed, and the file copy durable, before the
/// receipt names it; then the artifacts, the change set and the signed
/// receipt shipped (see [`crate::task::end::ship`]).
fn ship_ended(
    (project, store, task_id, stored): (&Path, &dyn loop_store::Store, &str, &StoredRequest),
    (paths, start, sealed): (&TaskPaths, &Start, Option<&Path>),
    (result, mut ledger, ledger_name): (loop_core::RunResult, StoreLedger<'_>, String),
    (provenance, holder): (loop_receipt::Provenance, &str),
) -> Result<TaskReport, Error> {
    ledger.flush().map_err(Error::from_cause)?;
    ledger.file.sync().map_err(Error::from_cause)?;
    let head = ledger.file.head().to_string();
    let length = ledger.file.len();
    crate::task::end::ship(crate::task::end::Shipment {
        project,
        store,
        task_id,
        stored,
        paths,
        start,
        result,
        sealed,
        ledger: loop_receipt::LedgerRef {
            name: ledger_name,
            head,
            length,
        },
        provenance,
        clock: &SystemClock,
        holder,
    })
}

/// The task's claim: the one given, or taken now (old scratch swept
/// first).
fn take(
    store: &dyn loop_store::Store,
    (task_id, child): (&str, bool),
    claimed: Option<loop_store::Owner>,
    observer: &mut dyn crate::Observer,
) -> Result<loop_store::Owner, Error> {
    if run_fault() {
        return Err(Error::internal(format!(
            "task {task_id}: the run failed before it claimed the task (fault injected)"
        )));
    }
    sweep(observer);
    let owner = match claimed {
        Some(o) => o,
        None => claim(store, task_id, &SystemClock)?,
    };
    if child && child_run_fault() {
        let _ = store.release(task_id, &owner.token);
        return Err(Error::internal(format!(
            "task {task_id}: the child's run failed once it claimed the task (fault injected)"
        )));
    }
    tracing::info!("task {task_id}: claimed by process {}", owner.pid);
    Ok(owner)
}

/// The task as its record leaves it: the record, the workspace here made
/// to be the one the record holds (rebuilt if need be: the task moved
/// here, or on and back, or stopped between a change and its record; the
/// claim renewed meanwhile), how it started, and the time it has left.
#[allow(clippy::type_complexity)]
fn restore(
    (store, project, paths): (&dyn loop_store::Store, &Path, &TaskPaths),
    (task_id, stored, extension): (&str, &StoredRequest, Option<&loop_core::Extension>),
    (token, pause_clock): (&str, bool),
    observer: &mut dyn crate::Observer,
) -> Result<
    (
        Record,
        Option<crate::task::stored_workspace::WorkspaceSettled>,
        Start,
        u64,
    ),
    Error,
> {
    let record = Record::load(store, task_id, pause_clock)?;
    let settled = with_renewals(store, task_id, token, || {
        crate::task::stored_workspace::settle(
            store,
            project,
            paths,
            task_id,
            &record.history,
            observer,
        )
    })?;
    let start = Start::load(paths)?;
    let remaining_ms = record.remaining_ms(stored.contract.limits.timeout_secs, extension);
    tracing::info!(
        "task {task_id}: {} entries on record, {} ms used, {} ms left",
        record.history.len(),
        record.elapsed_ms,
        remaining_ms
    );
    Ok((record, settled, start, remaining_ms))
}

/// What is said of a task whose workspace was deleted outside the runtime.
fn gone(start: &Start, paths: &TaskPaths) -> Option<String> {
    start.gone.then(|| {
        format!(
            "the task workspace {} is gone (deleted outside the runtime): the task can be neither resumed nor verified, and nothing of it can be applied",
            paths.workspace.display()
        )
    })
}

/// The models report their stream to `live` and stop with the task (the
/// call in flight too, not with the process only); who they are, for the
/// receipt.
fn hook_models(
    (model, checker): (
        &mut Box<dyn loop_core::Model + Send>,
        Option<&mut Box<dyn loop_core::Model + Send>>,
    ),
    live: Option<loop_protocol::LiveFeed>,
    kill: &Arc<AtomicBool>,
) -> loop_receipt::Provenance {
    model.set_live(live);
    model.set_cancel(kill.clone());
    let checker_info = checker.map(|c| {
        c.set_cancel(kill.clone());
        c.info()
    });
    loop_receipt::Provenance {
        runtime: loop_protocol::RuntimeInfo::current(),
        model: model.info(),
        checker: checker_info,
    }
}

/// Wire the task's adapters over the workspace as it was settled: the
/// keeper of its state when the store keeps it, and a cancel asked for
/// while nobody ran the task (`loop cancel` on an interrupted one) in
/// force at once.
fn wire_settled<'a>(
    (project, store, task_id): (&'a Path, &dyn loop_store::Store, &str),
    (paths, stored, start): (&TaskPaths, &'a StoredRequest, &'a Start),
    remaining_ms: u64,
    (settled, fence): (
        Option<crate::task::stored_workspace::WorkspaceSettled>,
        &Arc<ClaimFence>,
    ),
) -> Result<Wired<'a>, Error> {
    let mut wired = wire(
        project,
        paths,
        stored,
        start,
        remaining_ms,
        (settled.is_some(), fence),
    )?;
    if let Some(s) = settled {
        wired.tools.keeper = Some(crate::task::stored_workspace::Keeper::new(
            start.baseline.clone(),
            (s.root, s.held),
            &paths.workspace,
        ));
        wired.tools.rebuilt = s.rebuilt;
    }
    if store.task(task_id).is_ok_and(|t| t.cancel_requested) {
        wired
            .cancel
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    Ok(wired)
}

/// What the tools take from the task and its runs so far: the starter of
/// its children, and the notes its earlier runs proposed (a run that goes
/// on counts them toward the task's bound).
fn carry_on<'a>(
    wired: &mut Wired<'a>,
    task: (&'a Path, &'a str, &'a StoredRequest),
    paths: &TaskPaths,
    with: (
        crate::OnPrompt,
        Option<crate::task::asking::Person>,
        crate::task::delegate::StartChild,
    ),
    history: &[Event],
) {
    wired.tools.delegator = Delegator::of(task, paths, with);
    wired.tools.remembered = crate::task::memory::accepted_in(history);
}

/// The ledger writes as the claim's holder and, when the store keeps the
/// workspace's state, commits that state with the entries (and can make
/// it whole again for a store that lost it).
fn keep_with(
    ledger: &mut StoreLedger<'_>,
    holder: &str,
    wired: &Wired<'_>,
    (paths, start): (&TaskPaths, &Start),
) {
    ledger.holder = holder.to_string();
    ledger.halt = wired.tools.keeper.as_ref().map(|k| k.halt.clone());
    ledger.tree = wired.tools.keeper.as_ref().map(|k| k.pending.clone());
    if wired.tools.keeper.is_some() {
        let (workspace, baseline) = (paths.workspace.clone(), start.baseline.clone());
        ledger.whole = Some(Box::new(move || {
            crate::task::stored_workspace::whole_state(&workspace, &baseline)
        }));
    }
}

/// The claim, renewed before the work starts (making the workspace may
/// have taken a while): a runtime whose claim lapsed meanwhile goes no
/// further.
fn confirm_claim(
    store: &dyn loop_store::Store,
    task_id: &str,
    token: &str,
    fence: &ClaimFence,
) -> Result<(), Error> {
    let asked = boot_ms();
    match store.heartbeat(task_id, token, SystemClock.now_ms()) {
        Ok(true) => {
            fence.confirm_at(asked);
            Ok(())
        }
        Ok(false) => Err(Error::usage(format!(
            "task {task_id}: its claim lapsed while its workspace was made ready, and another runtime holds it now"
        ))),
        Err(e) => Err(store_err(e)),
    }
}

/// The ledger of a run: the store's entries are the truth, and the file
/// beside the receipt is rewritten to match them before anything is added.
#[allow(clippy::disallowed_methods)] // the runtime's own task directory
fn ledger_for<'c>(
    store: &'c dyn loop_store::Store,
    task_id: &str,
    paths: &TaskPaths,
    name: &str,
    record: &Record,
    clock: &'c dyn Clock,
) -> Result<StoreLedger<'c>, Error> {
    std::fs::create_dir_all(&paths.receipts)
        .map_err(|e| Error::internal(format!("receipts: {e}")))?;
    let mut file = FileLedger::continue_from(&paths.receipts.join(name), &record.chain)
        .map_err(Error::from_cause)?;
    // The store is the ledger's truth: the file is synced once, at the end.
    file.defer_sync();
    Ok(StoreLedger {
        store,
        task_id: task_id.to_string(),
        file,
        clock,
        pending: Vec::new(),
        pending_state: None,
        holder: String::new(),
        halt: None,
        tree: None,
        whole: None,
    })
}

/// The stored request's settings on a Director: approvals, stall
/// thresholds, checkpoints, the clock paused for people, the checker, and
/// the end at once of a task whose workspace is gone.
fn configured<'a>(
    task_id: &str,
    parts: Parts<'a>,
    stored: &StoredRequest,
    approvals: &'a mut dyn loop_core::Approvals,
    paused: Arc<AtomicU64>,
    checker: Option<&'a mut dyn loop_core::Model>,
    (gone, workspace): (Option<String>, &Path),
) -> Result<Director<'a>, Error> {
    let policy = if stored.verify_on_change {
        VerifyPolicy::OnFinishOrChange
    } else {
        VerifyPolicy::OnFinish
    };
    let director = Director::new(task_id, stored.contract.clone(), policy, parts)
        .map_err(Error::from_cause)?;
    let timeout_secs = stored.exec_policy.as_ref().map_or_else(
        || loop_tools::exec_policy::ExecPolicy::default().approval_timeout_secs,
        |p| p.approval_timeout_secs,
    );
    let director = director
        .with_approvals(approvals, timeout_secs)
        .with_progress(stored.progress.clone().unwrap_or_default())
        .with_checkpoints(stored.checkpoints.clone().unwrap_or_default())
        .with_clock_pause(paused);
    let director = match &stored.setup {
        Some(setup) => director.with_setup(setup.clone()),
        None => director,
    };
    let director = match &stored.drafting {
        Some(d) => director.with_drafting(d.clone()),
        None => director,
    };
    let director = match &stored.trigger {
        Some(t) => director.with_trigger(t.clone()),
        None => director,
    };
    let director = director
        .with_guidance(stored.guidance.clone())
        .with_inputs(stored.inputs.clone())
        .with_project_checks(stored.project_checks.clone());
    let director = match gone {
        Some(reason) => director.ending_at_once(reason),
        None => director,
    }
    .with_input_images(input_images(workspace, &stored.inputs));
    Ok(match checker {
        Some(c) => director.with_reviewer(c),
        None => director,
    })
}

/// Whether this runtime's claim on its task still holds, as far as it can
/// tell: a renewal was confirmed within the last 10 s (the lease is 15 s,
/// counted by the store from the renewal, which the confirmation follows).
/// Timed on the boot clock, which runs on while the process is stopped or
/// the machine suspended, so a runtime frozen past its lease sees it lapsed
/// the moment it runs again, before it writes anything.
pub(crate) struct ClaimFence {
    confirmed_ms: std::sync::atomic::AtomicU64,
    /// The store said the claim is another's now.
    lost: AtomicBool,
}

/// How long without a confirmed renewal before the runtime stops.
const GIVE_UP_MS: u64 = 10_000;

fn boot_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut t) };
    if r != 0 {
        return 0;
    }
    (t.tv_sec as u64).saturating_mul(1000) + (t.tv_nsec as u64) / 1_000_000
}

impl ClaimFence {
    /// A claim just taken.
    pub(crate) fn new() -> Self {
        ClaimFence {
            confirmed_ms: std::sync::atomic::AtomicU64::new(boot_ms()),
            lost: AtomicBool::new(false),
        }
    }
    /// A renewal asked for at `asked_ms` (the boot clock) was confirmed:
    /// the lease runs from no earlier than that.
    fn confirm_at(&self, asked_ms: u64) {
        self.confirmed_ms
            .fetch_max(asked_ms, std::sync::atomic::Ordering::SeqCst);
    }
    /// How long since the last confirmed renewal.
    fn age_ms(&self) -> u64 {
        boot_ms().saturating_sub(self.confirmed_ms.load(std::sync::atomic::Ordering::SeqCst))
    }
    /// The store says another runtime holds the claim now.
    fn lose(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    /// Whether writes may go on.
    pub(crate) fn holds(&self) -> bool {
        !self.lost.load(std::sync::atomic::Ordering::SeqCst) && self.age_ms() < GIVE_UP_MS
    }
}

/// Run `work` (making the workspace ready) while a thread renews the claim
/// every 2 s. The thread ends the moment the work does (it waits on a
/// channel the work's end closes, never in a sleep the run would wait out).
fn with_renewals<T>(store: &dyn Store, task_id: &str, token: &str, work: impl FnOnce() -> T) -> T {
    let (done, ended) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            use std::sync::mpsc::RecvTimeoutError;
            while let Err(RecvTimeoutError::Timeout) =
                ended.recv_timeout(std::time::Duration::from_secs(2))
            {
                if let Err(e) = store.heartbeat(task_id, token, SystemClock.now_ms()) {
                    tracing::warn!("task {task_id}: the claim was not renewed: {e}");
                }
            }
        });
        let out = work();
        drop(done);
        out
    })
}

/// Run `work` while a watcher renews the claim and turns cancel requests
/// from other processes (`loop cancel`) into the cancel flag, within a
/// fraction of a second. The watcher stops the moment the work ends (a
/// sleeping watcher once made every run up to 200 ms late).
/// The flags a watched run raises (see [`Wired`]).
#[derive(Clone, Copy)]
struct Flags<'f> {
    cancel: &'f AtomicBool,
    kill: &'f AtomicBool,
    interrupted: &'f AtomicBool,
    fence: &'f Arc<ClaimFence>,
}

impl Flags<'_> {
    /// A decision to end the task: decided, and what runs stops.
    fn cancel(&self) {
        use std::sync::atomic::Ordering;
        self.cancel.store(true, Ordering::SeqCst);
        self.kill.store(true, Ordering::SeqCst);
    }

    /// A fault: what runs stops, nothing is decided.
    fn interrupt(&self) {
        use std::sync::atomic::Ordering;
        self.interrupted.store(true, Ordering::SeqCst);
        self.kill.store(true, Ordering::SeqCst);
    }
}

fn run_watched(
    project: &Path,
    task_id: &str,
    token: &str,
    flags: Flags<'_>,
    work: impl FnOnce() -> Result<RunResult, loop_core::DirectorError>,
) -> Result<RunResult, loop_core::DirectorError> {
    // SIGTERM meanwhile is this run's watcher's to turn into an
    // interruption (see `interrupt::RunGuard`).
    let _run = crate::interrupt::RunGuard::begin();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    // The poller's own word that the work ended: it waits on it between
    // looks, so the run never waits out a poller's sleep.
    let (done, ended) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(|| watch(project, task_id, token, flags, stopped));
        // This process's Ctrl-C or SIGTERM, and a claim that lapsed,
        // reach the task at once, with no store call in between (the store
        // may be busy, or gone: a read of it can hang for as long as the
        // outage lasts).
        scope.spawn(move || {
            use std::sync::atomic::Ordering;
            use std::sync::mpsc::RecvTimeoutError;
            let process = crate::interrupt::flag();
            loop {
                // SIGTERM (a shutdown, a runner's timeout): stopped, left
                // interrupted for `loop resume`; only a person cancels.
                if crate::interrupt::stopping() {
                    if !flags.interrupted.load(Ordering::SeqCst) {
                        tracing::warn!(
                            "task {task_id}: SIGTERM: stopping, and leaving it interrupted (`loop resume {task_id}` goes on)"
                        );
                        flags.interrupt();
                    }
                    return;
                }
                if process.load(Ordering::SeqCst) {
                    flags.cancel();
                    return;
                }
                if !flags.fence.holds() && !flags.interrupted.load(Ordering::SeqCst) {
                    tracing::warn!(
                        "task {task_id}: its claim is lost or cannot be renewed; stopping, and leaving it interrupted (a fault is not a decision)"
                    );
                    flags.interrupt();
                }
                match ended.recv_timeout(std::time::Duration::from_millis(20)) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        });
        let result = work();
        drop(done);
        drop(stop);
        result
    })
}

/// Renew the claim, and turn a cancel request into the cancel flag. The
/// watcher has a store handle of its own (SQLite: its own connection, so
/// the Director's commits never wait on its reads).
///
/// The claim is renewed every 2 s by a thread of its own (a renewal that
/// hangs on a dead connection must neither keep the watcher from acting
/// nor hold up the end of the run). With no renewal confirmed for 10 s the
/// lease (15 s) may be about to lapse and another runtime take the task:
/// the run's poller (which makes no store call, so an outage cannot hold
/// it up) stops it first, killing its commands, so two never work on it at
/// once. Between looks the watcher waits for word of a change to the task
/// (PostgreSQL's NOTIFY wakes it the moment a cancel commits; SQLite has it
/// look every 100 ms), and reads the task at least every 2 s besides (word
/// that came between a look and the next wait is not lost).
fn watch(
    project: &Path,
    task_id: &str,
    token: &str,
    flags: Flags<'_>,
    stopped: std::sync::mpsc::Receiver<()>,
) {
    let fence = flags.fence;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::TryRecvError;
    use std::time::{Duration, Instant};
    const RENEW: Duration = Duration::from_secs(2);
    const TICK: Duration = Duration::from_millis(100);
    let Ok(store) = crate::project::locate::open_store(project) else {
        return;
    };
    // Renewals, on a detached thread with its own handle: the fence holds
    // the time of the last one the store took, or that the claim is
    // someone else's now (the run's poller stops the task on either).
    let finished = Arc::new(AtomicBool::new(false));
    {
        let (confirmed, finished) = (fence.clone(), finished.clone());
        let (dir, id, holder) = (
            project.to_path_buf(),
            task_id.to_string(),
            token.to_string(),
        );
        let spawned = std::thread::Builder::new()
            .name("loop renew".into())
            .spawn(move || {
                let Ok(store) = crate::project::locate::open_store(&dir) else {
                    return;
                };
                while !finished.load(Ordering::SeqCst) {
                    let asked = boot_ms();
                    let renewed = if renewal_fault() {
                        Err("the store cannot be reached (fault injected)".to_string())
                    } else {
                        store
                            .heartbeat(&id, &holder, SystemClock.now_ms())
                            .map_err(|e| e.to_string())
                    };
                    match renewed {
                        Ok(true) => confirmed.confirm_at(asked),
                        Ok(false) => confirmed.lose(),
                        Err(e) => tracing::warn!("task {id}: the claim was not renewed: {e}"),
                    }
                    let slept = Instant::now();
                    while slept.elapsed() < RENEW && !finished.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("task {task_id}: cannot renew its claim: {e}");
        }
    }
    let mut read = Instant::now();
    let mut look = true;
    loop {
        if look || read.elapsed() >= RENEW {
            read = Instant::now();
            // A read that fails looks again next time.
            look = false;
            match store.task(task_id) {
                Ok(t) if t.cancel_requested => flags.cancel(),
                Ok(_) => {}
                Err(_) => look = true,
            }
        }
        if crate::interrupt::flag().load(Ordering::SeqCst) && !crate::interrupt::stopping() {
            flags.cancel();
        }
        match stopped.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok(()) | Err(TryRecvError::Disconnected) => break,
        }
        if store.tells_of_changes() {
            look |= store.wait_for(task_id, TICK);
            match stopped.try_recv() {
                Err(TryRecvError::Empty) => {}
                Ok(()) | Err(TryRecvError::Disconnected) => break,
            }
        } else {
            // A store that tells of nothing is looked at every tick; the
            // run's end is waited for meanwhile, so the run never waits a
            // tick for its watcher.
            match stopped.recv_timeout(TICK) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => look = true,
                Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }
    finished.store(true, Ordering::SeqCst);
}

/// Lets go of a claim when dropped.
struct Release<'a> {
    store: &'a dyn loop_store::Store,
    task_id: &'a str,
    token: &'a str,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.store.release(self.task_id, self.token) {
            tracing::warn!("task {}: the claim was not let go: {e}", self.task_id);
        }
    }
}

/// Test-only fault injection (the `fault-injection` feature): every claim
/// renewal fails, as with an unreachable store, while this process's
/// first renewal was between `FROM` and `TO` milliseconds ago
/// (`LOOP_FAULT_RENEWALS_FAIL=FROM..TO`).
#[cfg(feature = "fault-injection")]
fn renewal_fault() -> bool {
    static FIRST: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let since = FIRST
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64;
    std::env::var("LOOP_FAULT_RENEWALS_FAIL")
        .ok()
        .and_then(|w| {
            let (a, b) = w.split_once("..")?;
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
        })
        .is_some_and(|(from, to)| (from..to).contains(&since))
}

/// Without the `fault-injection` feature nothing is injected.
#[cfg(not(feature = "fault-injection"))]
fn renewal_fault() -> bool {
    false
}

/// Test-only fault injection (the `fault-injection` feature): the first
/// `N` runs this process starts fail with an error before they claim their
/// task (`LOOP_FAULT_RUNS_FAIL=N`).
#[cfg(feature = "fault-injection")]
fn run_fault() -> bool {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let failing = std::env::var("LOOP_FAULT_RUNS_FAIL")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < failing
}

/// Without the `fault-injection` feature nothing is injected.
#[cfg(not(feature = "fault-injection"))]
fn run_fault() -> bool {
    false
}

/// Test-only fault injection (the `fault-injection` feature): the first
/// `N` runs of child tasks this process starts fail with an error once
/// they claimed their task (`LOOP_FAULT_CHILD_RUNS_FAIL=N`).
#[cfg(feature = "fault-injection")]
fn child_run_fault() -> bool {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let failing = std::env::var("LOOP_FAULT_CHILD_RUNS_FAIL")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < failing
}

/// Without the `fault-injection` feature nothing is injected.
#[cfg(not(feature = "fault-injection"))]
fn child_run_fault() -> bool {
    false
}

/// How much the workspace has grown since `baseline`, in the blocks the
/// task's disk budget counts (files and links; the worktree's `.git`
/// pointer left out, as in manifests). Never below zero.
#[allow(clippy::disallowed_methods)] // an lstat walk of the task's own workspace: sizes only, no link followed
fn grown_since(workspace: &Path, baseline: &loop_workspace::Manifest) -> i64 {
    let before: i64 = baseline
        .entries
        .iter()
        .map(|e| match e.kind {
            loop_workspace::EntryKind::File => loop_tools::block_cost(e.size),
            _ => loop_tools::block_cost(0),
        })
        .sum();
    let mut now = 0i64;
    let mut todo = vec![workspace.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(items) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in items.flatten() {
            if dir == workspace && item.file_name() == ".git" {
                continue;
            }
            let Ok(t) = item.file_type() else { continue };
            if t.is_dir() {
                todo.push(item.path());
            } else if t.is_file() {
                now += loop_tools::block_cost(item.metadata().map_or(0, |m| m.len()));
            } else {
                now += loop_tools::block_cost(0);
            }
        }
    }
    now.saturating_sub(before).max(0)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod disk_budget {
    #[test]
    fn what_the_workspace_grew_by_since_its_baseline_is_counted_in_blocks() {
        let ws = std::env::temp_dir().join(format!("loop-grown-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&ws);
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.py"), "x\n").unwrap();
        let baseline = loop_workspace::Manifest::of(&ws).unwrap();
        assert_eq!(super::grown_since(&ws, &baseline), 0);
        // 10 KiB (three blocks) and a link (one); the worktree's `.git`
        // pointer is not the task's.
        std::fs::write(ws.join("src/b.bin"), vec![0u8; 10 * 1024]).unwrap();
        std::os::unix::fs::symlink("a.py", ws.join("src/l")).unwrap();
        std::fs::write(ws.join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(super::grown_since(&ws, &baseline), 4 * 4096);
        // What was removed gives its blocks back, never below zero.
        std::fs::remove_file(ws.join("src/a.py")).unwrap();
        std::fs::remove_file(ws.join("src/b.bin")).unwrap();
        std::fs::remove_file(ws.join("src/l")).unwrap();
        assert_eq!(super::grown_since(&ws, &baseline), 0);
        let _ = std::fs::remove_dir_all(&ws);
    }
}
