//! One task, end to end: workspace, Director, receipt.

use crate::Error;
use crate::wiring::{StoreApprovals, StoreLedger, ToolsAdapter, VerifierAdapter};
use loop_core::{Clock, Director, Model, Parts, SystemClock, VerifyPolicy};
use loop_models::config::{Env, ModelsConfig};
use loop_models::http::UreqTransport;
use loop_models::retry::ThreadSleeper;
use loop_models::{Fallback, HttpModel, ModelSpec, Recorder, Redacted, ReplayModel, ScriptedModel};
use loop_protocol::{Contract, OutcomeKind, OutcomeRecord};
use loop_receipt::{
    Budgets, FileLedger, LedgerRef, PREDICATE_TYPE, Predicate, Provenance, STATEMENT_TYPE,
    Statement, subject, write_envelope,
};
use loop_tools::{ToolBox, ToolLimits};
use loop_verifier::SnapshotVerifier;
use loop_workspace::{Jail, Manifest, Origin, Protected, TaskWorkspace, remove_tree};
use std::path::{Path, PathBuf};

/// The largest artifact shipped beside a receipt (the sandbox's file-size
/// limit is 1 GiB; an artifact is evidence, not a data set).
const ARTIFACT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// What to run.
pub struct TaskRequest {
    /// The locked contract.
    pub contract: Contract,
    /// `--model` (else the Loopfile's maker).
    pub model: Option<String>,
    /// `--record FILE`.
    pub record: Option<PathBuf>,
    /// `--project`.
    pub project: PathBuf,
    /// `--verify-on-change`.
    pub verify_on_change: bool,
    /// `--isolation`.
    pub isolation: loop_sandbox::IsolationLevel,
    /// `--include-dirty`.
    pub include_dirty: bool,
    /// Who answers the questions the task asks.
    pub on_prompt: crate::wiring::OnPrompt,
}

/// How it ended.
#[derive(Debug, Clone)]
pub struct TaskReport {
    /// Task id.
    pub task_id: String,
    /// Outcome.
    pub outcome: OutcomeRecord,
    /// The receipt file.
    pub receipt: PathBuf,
    /// The task workspace (kept for inspection, apply and undo).
    pub workspace: PathBuf,
}

/// A task id: `t-YYYYMMDD-HHMMSS-` and 6 random hex digits.
pub fn new_task_id(now_ms: u64) -> Result<String, Error> {
    let stamp = loop_protocol::time::rfc3339_millis(now_ms);
    let digits: String = stamp
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    let rnd = loop_protocol::random::hex::<3>().map_err(|e| Error::internal(e.to_string()))?;
    Ok(format!(
        "t-{}-{}-{rnd}",
        &digits[..8.min(digits.len())],
        &digits[8.min(digits.len())..],
    ))
}

/// One provider, or a fallback chain of them.
fn chain_of(configs: Vec<loop_models::EndpointConfig>) -> Box<dyn Model + Send> {
    let mut chain: Vec<Box<dyn Model + Send>> = configs
        .into_iter()
        .map(|c| {
            let timeouts = c.timeouts;
            // A cancel or SIGTERM stops an in-flight call at once.
            Box::new(
                HttpModel::new(
                    c,
                    Box::new(UreqTransport::new(timeouts)),
                    Box::new(ThreadSleeper),
                )
                .with_cancel(crate::interrupt::flag()),
            ) as Box<dyn Model + Send>
        })
        .collect();
    if chain.len() == 1 {
        chain.remove(0)
    } else {
        Box::new(Fallback::new(chain))
    }
}

/// The maker from `--model`, the Loopfile and the environment, and the
/// checker if the Loopfile configures one.
type Models = (Box<dyn Model + Send>, Option<Box<dyn Model + Send>>);

/// A model whose words are redacted before anything records them.
fn redacted(model: Box<dyn Model + Send>) -> Box<dyn Model + Send> {
    Box::new(Redacted::new(model, loop_sandbox::redact::redact))
}

fn load_model(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
    record: Option<&Path>,
) -> Result<Models, Error> {
    let spec = spec
        .map(ModelSpec::parse)
        .transpose()
        .map_err(|e| Error::usage(e.to_string()))?;
    let origin = loopfile
        .path
        .as_ref()
        .map_or("Loopfile.yaml".to_string(), |p| p.display().to_string());
    let config = ModelsConfig::resolve(
        spec.as_ref(),
        loopfile.models.as_ref(),
        &Env::from_process(),
        &origin,
    )
    .map_err(|e| Error::usage(e.to_string()))?;
    // Every configured key, wherever it came from (`api_key_env` may name
    // any variable), is scrubbed by value from every record.
    for e in config.maker.iter().chain(&config.checker) {
        if let Some(k) = &e.api_key {
            loop_sandbox::redact::register_literal(k.expose());
        }
    }
    let checker = (!config.checker.is_empty()).then(|| redacted(chain_of(config.checker)));
    let provider: Box<dyn Model + Send> = match &spec {
        Some(ModelSpec::Scripted(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::usage(format!("cannot read script {path}: {e}")))?;
            Box::new(
                ScriptedModel::from_yaml(&text, path).map_err(|e| Error::usage(e.to_string()))?,
            )
        }
        Some(ModelSpec::Replay(path)) => {
            Box::new(ReplayModel::open(Path::new(path)).map_err(|e| Error::usage(e.to_string()))?)
        }
        _ => {
            if config.maker.is_empty() {
                return Err(Error::usage(
                    "no model given: use --model scripted:FILE | openai:MODEL | anthropic:MODEL | replay:FILE, or `models.maker` in Loopfile.yaml",
                ));
            }
            chain_of(config.maker)
        }
    };
    let provider = match record {
        None => provider,
        Some(path) => Box::new(
            Recorder::create(provider, path, Box::new(loop_sandbox::redact::redact))
                .map_err(|e| Error::usage(e.to_string()))?,
        ),
    };
    Ok((redacted(provider), checker))
}

/// What the store keeps to run a task again (`loop resume`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredRequest {
    /// The locked contract.
    pub contract: Contract,
    /// `--model`, if given.
    pub model: Option<String>,
    /// `--record`, if given.
    pub record: Option<PathBuf>,
    /// `--verify-on-change`.
    pub verify_on_change: bool,
    /// `--isolation` (`required` or `preferred`).
    pub isolation: String,
    /// The Loopfile's exec policy when the task started.
    #[serde(default)]
    pub exec_policy: Option<loop_tools::exec_policy::ExecPolicy>,
    /// The Loopfile's code rules when the task started.
    #[serde(default)]
    pub code_policy: Option<loop_gates::CodePolicy>,
    /// The Loopfile's stall thresholds when the task started.
    #[serde(default)]
    pub progress: Option<loop_core::ProgressConfig>,
    /// The Loopfile's checkpoints when the task started.
    #[serde(default)]
    pub checkpoints: Option<loop_core::Checkpoints>,
    /// The check-integrity set derived when the task started (files that
    /// define what the checks mean; protected like `protected` globs).
    #[serde(default)]
    pub check_integrity: Vec<loop_protocol::IntegrityRule>,
}

/// What no tool may write and every seal must leave as it was: the
/// contract's protections, then the check-integrity set (less what the
/// contract lets the model change).
fn protection(
    contract: &Contract,
    integrity: &[loop_protocol::IntegrityRule],
) -> Result<Protected, Error> {
    Protected::new(&contract.protected_globs())
        .and_then(|p| {
            p.with_named(
                &loop_verifier::integrity::named(integrity),
                &contract.allow_check_changes,
            )
        })
        .map_err(|e| Error::usage(format!("protected globs: {e}")))
}

/// How long a claim lasts without a heartbeat (the owner is also checked
/// for being alive, so a killed runtime's task is free at once).
const LEASE_MS: u64 = 15_000;

/// The project's store, `.loop/loop.db`.
pub fn open_store(project: &Path) -> Result<loop_store::SqliteStore, Error> {
    let state = project.join(".loop");
    std::fs::create_dir_all(&state)
        .map_err(|e| Error::internal(format!("cannot create .loop: {e}")))?;
    if !state.join(".gitignore").exists() {
        std::fs::write(state.join(".gitignore"), "*\n")
            .map_err(|e| Error::internal(format!(".loop/.gitignore: {e}")))?;
    }
    loop_store::SqliteStore::open(&state.join("loop.db"))
        .map_err(|e| Error::internal(e.to_string()))
}

fn store_err(e: loop_store::StoreError) -> Error {
    match e {
        loop_store::StoreError::NoSuchTask(_) => Error::usage(e.to_string()),
        other => Error::internal(other.to_string()),
    }
}

/// Run one task and write its receipt; `observer` sees every event and
/// every line for the person running it.
pub fn run_task(req: TaskRequest, observer: &mut dyn crate::Observer) -> Result<TaskReport, Error> {
    use loop_store::Store;
    let clock = SystemClock;
    let project = req
        .project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", req.project.display())))?;
    let loopfile = crate::loopfile::Loopfile::load(&project)?;
    // Bad model configuration is refused before anything is created.
    let models = load_model(req.model.as_deref(), &loopfile, req.record.as_deref())?;
    let store = open_store(&project)?;
    let task_id = new_task_id(clock.now_ms())?;
    let task_dir = project.join(".loop").join("tasks").join(&task_id);
    let workspace = task_dir.join("workspace");
    let io = |what: &str, e: std::io::Error| Error::internal(format!("{what}: {e}"));
    let contract_sha256 = req
        .contract
        .sha256()
        .map_err(|e| Error::usage(e.to_string()))?;
    let stored = StoredRequest {
        contract: req.contract.clone(),
        model: req.model.clone(),
        record: req.record.clone(),
        verify_on_change: req.verify_on_change,
        isolation: match req.isolation {
            loop_sandbox::IsolationLevel::Required => "required".into(),
            loop_sandbox::IsolationLevel::Preferred => "preferred".into(),
        },
        exec_policy: loopfile.exec.clone(),
        code_policy: loopfile.rules.clone(),
        progress: loopfile.progress.clone(),
        checkpoints: loopfile.checkpoints.clone(),
        check_integrity: Vec::new(),
    };

    // The task never works in the user's checkout: a worktree or a copy.
    let task_ws = TaskWorkspace::create(&project, &workspace, &task_id, req.include_dirty)
        .map_err(|e| Error::internal(format!("cannot make the task workspace: {e}")))?;
    crate::changes::save_origin(&task_dir, &task_ws).map_err(|e| io("task state", e))?;
    let baseline = Manifest::of(&workspace).map_err(|e| io("cannot hash the workspace", e))?;
    write_json(&task_dir.join("baseline.json"), &baseline)?;
    let mut stored = stored;
    stored.check_integrity = loop_verifier::integrity::derive(&req.contract, &workspace);
    let request = serde_json::to_value(&stored).map_err(|e| Error::internal(e.to_string()))?;
    observer.note(&match &task_ws.origin {
        Origin::Worktree {
            branch,
            base_commit,
            dirty_included,
            ..
        } => format!(
            "workspace {} (git worktree on {branch} from {}{})",
            workspace.display(),
            &base_commit[..12.min(base_commit.len())],
            if *dirty_included {
                ", with your uncommitted changes"
            } else {
                ""
            }
        ),
        Origin::Copy { skipped } if skipped.is_empty() => {
            format!("workspace {} (copy)", workspace.display())
        }
        Origin::Copy { skipped } => format!(
            "workspace {} (copy; skipped {})",
            workspace.display(),
            skipped.join(", ")
        ),
    });
    // Baseline: the contract's checks on the workspace as it starts, so the
    // receipt shows what held before any change.
    let protected = protection(&req.contract, &stored.check_integrity)?;
    let baseline_report = SnapshotVerifier::new(&workspace, &task_dir.join("scratch"))
        .guard_protected(baseline.clone(), protected)
        .with_sandbox(loop_sandbox::Settings {
            deadline: Some(
                std::time::Instant::now()
                    + std::time::Duration::from_secs(req.contract.limits.timeout_secs),
            ),
            paused_ms: None,
            git_dir: match &task_ws.origin {
                Origin::Worktree { repo, .. } => Some(repo.join(".git")).filter(|g| g.is_dir()),
                Origin::Copy { .. } => None,
            },
            isolation: req.isolation,
            cancel: Some(crate::interrupt::flag()),
        })
        .verify(&req.contract, &contract_sha256, 0)
        .ok();
    if let Some(b) = &baseline_report {
        observer.note(&format!(
            "baseline: {} of {} criteria hold before any change",
            b.passed_criteria(),
            b.criteria.len()
        ));
    }
    write_json(&task_dir.join("baseline-report.json"), &baseline_report)?;
    // Recorded last: a task in the store has everything it needs to resume.
    store
        .create_task(&task_id, &contract_sha256, &request, clock.now_ms())
        .map_err(store_err)?;
    let run = Run {
        store: &store,
        task_id: &task_id,
        stored: &stored,
        on_prompt: req.on_prompt,
        extension: None,
    };
    drive(&project, run, models, observer)
}

/// Continue a task whose runtime stopped (or that was never started); with
/// an extension, give a task that reached a limit more budget and go on.
pub fn resume_task(
    project: &Path,
    task_id: &str,
    extension: Option<loop_core::Extension>,
    on_prompt: crate::wiring::OnPrompt,
    observer: &mut dyn crate::Observer,
) -> Result<TaskReport, Error> {
    use loop_store::Store;
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let store = open_store(&project)?;
    let record = store.task(task_id).map_err(store_err)?;
    if record.is_terminal() && extension.is_some() {
        if record.outcome_kind() != Some(OutcomeKind::LimitReached) {
            return Err(Error::usage(format!(
                "task {task_id} ended {}, not at a limit: only a task that reached a limit can be given more budget",
                record.outcome.as_deref().unwrap_or("?")
            )));
        }
        store
            .reopen(task_id, SystemClock.now_ms())
            .map_err(store_err)?;
    } else if record.is_terminal() {
        return Err(Error::usage(format!(
            "task {task_id} has already ended ({}); its receipt: {}",
            record.outcome.as_deref().unwrap_or("?"),
            record.receipt.as_deref().unwrap_or("(none)")
        )));
    }
    let stored: StoredRequest = serde_json::from_value(record.request.clone())
        .map_err(|e| Error::internal(format!("task {task_id}: stored request: {e}")))?;
    let loopfile = crate::loopfile::Loopfile::load(&project)?;
    // A recording is not continued (it would not replay from the middle).
    let models = load_model(stored.model.as_deref(), &loopfile, None)?;
    let run = Run {
        store: &store,
        task_id,
        stored: &stored,
        on_prompt,
        extension,
    };
    drive(&project, run, models, observer)
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
pub fn liveness(t: &loop_store::TaskRecord) -> Liveness {
    match &t.owner {
        _ if t.is_terminal() => Liveness::Over,
        Some(o) if !o.is_dead() => Liveness::Running,
        _ => Liveness::Interrupted,
    }
}

/// Whether task `id` of `project` is running in a live process now.
pub fn is_running(project: &Path, id: &str) -> Result<bool, Error> {
    use loop_store::Store;
    let store = open_store(project)?;
    Ok(store
        .task(id)
        .is_ok_and(|t| liveness(&t) == Liveness::Running))
}

/// How `cancel` ended a task.
#[derive(Debug)]
pub enum Cancelled {
    /// It had already ended (its outcome, as recorded).
    AlreadyEnded(String),
    /// Nobody ran it: it was ended here, cancelled, with its receipt.
    EndedHere(TaskReport),
    /// Its running process stopped it (its outcome; how long it took).
    Stopped(String, std::time::Duration),
}

/// Ask task `id` to stop, and wait (up to `wait`) until it has; a task
/// nobody runs (interrupted) is ended here, `cancelled`, with its receipt.
pub fn cancel(
    project: &Path,
    id: &str,
    wait: std::time::Duration,
    observer: &mut dyn crate::Observer,
) -> Result<Cancelled, Error> {
    use loop_store::Store;
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let store = open_store(&project)?;
    let asked = store
        .request_cancel(id, SystemClock.now_ms())
        .map_err(|e| Error::usage(e.to_string()))?;
    let t = store.task(id).map_err(|e| Error::usage(e.to_string()))?;
    if !asked {
        return Ok(Cancelled::AlreadyEnded(t.outcome.unwrap_or_default()));
    }
    if liveness(&t) != Liveness::Running {
        crate::interrupt::flag().store(true, std::sync::atomic::Ordering::SeqCst);
        let report = resume_task(&project, id, None, crate::OnPrompt::Deny, observer)?;
        return Ok(Cancelled::EndedHere(report));
    }
    let start = std::time::Instant::now();
    while start.elapsed() < wait {
        let t = store.task(id).map_err(|e| Error::internal(e.to_string()))?;
        if t.is_terminal() {
            return Ok(Cancelled::Stopped(
                t.outcome.unwrap_or_default(),
                start.elapsed(),
            ));
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
) -> Result<loop_store::Approval, Error> {
    use loop_store::Store;
    let project = project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", project.display())))?;
    let store = open_store(&project)?;
    store.task(id).map_err(|e| Error::usage(e.to_string()))?;
    let Some(mut a) = store
        .approvals(id)
        .map_err(|e| Error::internal(e.to_string()))?
        .into_iter()
        .find(|a| a.status == "pending")
    else {
        return Err(Error::usage(format!("task {id} has no pending approval")));
    };
    a.status = if approve { "approved" } else { "denied" }.into();
    if let Some(m) = message {
        a.payload["answer"] = serde_json::Value::String(m.to_string());
    }
    a.decided_ms = Some(SystemClock.now_ms());
    store
        .put_approval(&a)
        .map_err(|e| Error::internal(e.to_string()))?;
    Ok(a)
}

/// Tasks of this project that are not over and whose runtime is gone.
pub fn interrupted_tasks(project: &Path) -> Result<Vec<String>, Error> {
    use loop_store::Store;
    let store = open_store(project)?;
    Ok(store
        .tasks()
        .map_err(store_err)?
        .into_iter()
        .filter(|t| liveness(t) == Liveness::Interrupted)
        .map(|t| t.id)
        .collect())
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let text = serde_json::to_vec(value).map_err(|e| Error::internal(e.to_string()))?;
    loop_workspace::write_atomic(path, &text)
        .map_err(|e| Error::internal(format!("{}: {e}", path.display())))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let text =
        std::fs::read(path).map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&text).map_err(|e| Error::internal(format!("{}: {e}", path.display())))
}

fn random_token() -> Result<String, Error> {
    loop_protocol::random::hex::<8>().map_err(|e| Error::internal(e.to_string()))
}

/// Which task to drive, and how.
struct Run<'r> {
    store: &'r loop_store::SqliteStore,
    task_id: &'r str,
    stored: &'r StoredRequest,
    on_prompt: crate::wiring::OnPrompt,
    extension: Option<loop_core::Extension>,
}

/// Claim the task, rebuild it from the store, run it to its end, and write
/// the receipt.
fn drive(
    project: &Path,
    run: Run<'_>,
    models: Models,
    observer: &mut dyn crate::Observer,
) -> Result<TaskReport, Error> {
    use loop_store::{Claim, Owner, Store};
    let Run {
        store,
        task_id,
        stored,
        on_prompt,
        extension,
    } = run;
    let clock = SystemClock;
    let (mut model, mut checker) = models;
    let state = project.join(".loop");
    let task_dir = state.join("tasks").join(task_id);
    let workspace = task_dir.join("workspace");
    let receipts = state.join("receipts");
    let io = |what: &str, e: std::io::Error| Error::internal(format!("{what}: {e}"));
    let contract = &stored.contract;
    let isolation: loop_sandbox::IsolationLevel =
        stored.isolation.parse().map_err(Error::internal)?;

    // Leftovers of runtimes that were killed (their private tmp, cgroups).
    let swept = loop_sandbox::sweep::sweep(&std::env::temp_dir());
    if swept != loop_sandbox::sweep::Swept::default() {
        observer.note(&format!(
            "cleaned up after killed runs: {} temporary dir(s), {} cgroup(s)",
            swept.dirs, swept.cgroups
        ));
    }
    let owner = Owner::this_process(random_token()?, clock.now_ms());
    match store
        .claim(task_id, &owner, LEASE_MS, clock.now_ms())
        .map_err(store_err)?
    {
        Claim::Claimed => {}
        Claim::Held(o) => {
            return Err(Error::usage(format!(
                "task {task_id} is running in process {} (loop cancel {task_id} stops it)",
                o.pid
            )));
        }
        Claim::Terminal => {
            return Err(Error::usage(format!("task {task_id} has already ended")));
        }
    }
    let task_ws = crate::changes::load_origin(&task_dir)?;
    let baseline: Manifest = read_json(&task_dir.join("baseline.json"))?;
    let baseline_report: Option<loop_protocol::VerificationReport> =
        read_json(&task_dir.join("baseline-report.json"))?;

    let protected = protection(contract, &stored.check_integrity)?;
    // A workspace deleted behind the runtime's back (by hand, or a discard
    // that raced a crash) can be neither resumed nor verified: the task
    // ends in error with a receipt that says so, over an empty stand-in,
    // and no change set (nothing of it can be applied).
    let gone = std::fs::symlink_metadata(&workspace).is_err();
    if gone {
        std::fs::create_dir_all(&workspace).map_err(|e| io("workspace", e))?;
    }
    let jail = Jail::new(&workspace, protected.clone()).map_err(|e| io("workspace", e))?;
    // The record so far: the store's entries are the truth; the file copy
    // is rewritten to match them.
    let entries = store.entries(task_id, 0).map_err(store_err)?;
    let mut history = Vec::with_capacity(entries.len());
    let mut chain = Vec::with_capacity(entries.len());
    for e in &entries {
        history.push(
            loop_protocol::Event::from_kind_payload(&e.kind, &e.payload).map_err(|x| {
                Error::internal(format!(
                    "task {task_id}: entry {} cannot be read: {x}",
                    e.seq
                ))
            })?,
        );
        chain.push(e.clone());
    }
    let pause_clock = stored.checkpoints.as_ref().is_some_and(|c| c.pause_clock);
    let at = |e: &loop_store::StoredEntry| loop_protocol::time::parse_rfc3339_millis(&e.at);
    let mut elapsed_ms = match (entries.first(), entries.last()) {
        (Some(a), Some(b)) => at(b).zip(at(a)).map_or(0, |(b, a)| b.saturating_sub(a)),
        _ => 0,
    };
    // With `pause_clock`, the record's waits for a person were not charged.
    if pause_clock {
        let mut asked = None;
        for e in &entries {
            match e.kind.as_str() {
                "approval_requested" | "checkpoint_requested" => asked = at(e),
                "approval_decided" | "checkpoint_decided" => {
                    if let (Some(a), Some(d)) = (asked.take(), at(e)) {
                        elapsed_ms = elapsed_ms.saturating_sub(d.saturating_sub(a));
                    }
                }
                _ => {}
            }
        }
    }
    let paused = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cancel = crate::interrupt::flag();
    // No command or check runs past the task's wall-time budget.
    let granted_secs = history
        .iter()
        .map(|e| match e {
            loop_protocol::Event::BudgetExtended { add_secs, .. } => *add_secs,
            _ => 0,
        })
        .chain(extension.as_ref().map(|x| x.add_secs))
        .fold(contract.limits.timeout_secs, u64::saturating_add);
    let remaining_ms = granted_secs.saturating_mul(1000).saturating_sub(elapsed_ms);
    let sandbox = loop_sandbox::Settings {
        isolation,
        cancel: Some(cancel.clone()),
        deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(remaining_ms)),
        paused_ms: Some(paused.clone()),
        // A worktree's repository is readable (git status, diff, log work
        // in commands and checks); never writable.
        git_dir: match &task_ws.origin {
            Origin::Worktree { repo, .. } => Some(repo.join(".git")).filter(|g| g.is_dir()),
            Origin::Copy { .. } => None,
        },
    };
    // The edit journal lives with the task: a step a crash interrupted is
    // rolled back before anything else happens.
    let exec_policy = stored.exec_policy.clone().unwrap_or_default();
    // The contract's limits reach the tools (max_diff_lines was once left
    // at its default whatever the contract said).
    let tool_limits = ToolLimits {
        max_diff_lines: usize::try_from(contract.limits.max_diff_lines).unwrap_or(usize::MAX),
        max_file_bytes: contract.limits.max_file_bytes,
        ..ToolLimits::default()
    };
    let toolbox = ToolBox::new(jail, tool_limits)
        .map_err(|e| Error::internal(e.to_string()))?
        .with_sandbox(sandbox.clone())
        .with_exec_policy(exec_policy.clone())
        .with_code_policy(stored.code_policy.clone().unwrap_or_default());
    // (Nothing is rolled back into the stand-in of a workspace that is gone.)
    let toolbox = if gone {
        toolbox
    } else {
        toolbox
            .with_journal(&task_dir.join("journal"))
            .map_err(|e| Error::internal(e.to_string()))?
            .0
    };
    let diff_ws = workspace.clone();
    let mut tools = ToolsAdapter {
        tools: toolbox,
        diff: Some(Box::new(|| match Manifest::of(&diff_ws) {
            Ok(now) => crate::changes::compute(project, &task_ws, &baseline, &now).patch,
            Err(e) => format!("(the change cannot be computed: {e})"),
        })),
    };
    // Protected paths are guarded twice: tools refuse to write them, and the
    // verifier rejects a seal in which they differ from the baseline.
    let mut verifier = VerifierAdapter(
        SnapshotVerifier::new(&workspace, &task_dir.join("scratch"))
            .guard_protected(baseline.clone(), protected)
            .with_sandbox(sandbox),
    );
    if let Some(b) = &baseline_report {
        verifier.0 = verifier
            .0
            .compare_with_baseline(b.clone(), contract.allow_check_changes.is_empty());
    }

    let ledger_name = format!("{task_id}.ledger.jsonl");
    let ledger_path = receipts.join(&ledger_name);
    std::fs::create_dir_all(&receipts).map_err(|e| io("receipts", e))?;
    let mut ledger = StoreLedger {
        store,
        task_id: task_id.to_string(),
        file: FileLedger::continue_from(&ledger_path, &chain)
            .map_err(|e| Error::internal(e.to_string()))?,
        clock: &clock,
    };
    for e in &history {
        observer.on_event(e);
    }
    let model_info = model.info();
    let checker_info = checker.as_ref().map(|c| c.info());
    let policy = if stored.verify_on_change {
        VerifyPolicy::OnFinishOrChange
    } else {
        VerifyPolicy::OnFinish
    };
    let contract_sha256 = contract.sha256().map_err(|e| Error::usage(e.to_string()))?;

    // Heartbeat, and cancel requests from other processes (`loop cancel`):
    // both reach this run through the cancel flag within a fraction of a second.
    // Dropping `stop` wakes the watcher at once, so a run ends when its
    // work ends (a sleeping watcher made every run up to 200 ms late).
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let db_path = state.join("loop.db");
    let result = std::thread::scope(|scope| {
        scope.spawn(|| watch(&db_path, task_id, &owner.token, &cancel, stopped));
        let parts = Parts {
            model: model.as_mut(),
            tools: &mut tools,
            verifier: &mut verifier,
            ledger: &mut ledger,
            clock: &clock,
            observer: &mut *observer,
            cancel: &cancel,
        };
        let mut approvals = StoreApprovals {
            store,
            task_id: task_id.to_string(),
            clock: &clock,
            on_prompt,
            // The task's clock keeps running while it waits for a person,
            // unless the Loopfile pauses it.
            task_deadline_ms: (!pause_clock)
                .then(|| clock.now_ms().saturating_add(remaining_ms)),
            always: Default::default(),
        };
        let run = Director::new(task_id, contract.clone(), policy, parts).and_then(|d| {
            let d = d
                .with_approvals(&mut approvals, exec_policy.approval_timeout_secs)
                .with_progress(stored.progress.clone().unwrap_or_default())
                .with_checkpoints(stored.checkpoints.clone().unwrap_or_default())
                .with_clock_pause(paused.clone());
            let d = if gone {
                d.ending_at_once(format!(
                    "the task workspace {} is gone (deleted outside the runtime): the task can be neither resumed nor verified, and nothing of it can be applied",
                    workspace.display()
                ))
            } else {
                d
            };
            let d = match checker.as_deref_mut() {
                Some(c) => d.with_reviewer(c),
                None => d,
            };
            match extension {
                Some(ext) => d.extend(&history, elapsed_ms, ext),
                None if history.is_empty() => d.run(),
                None => d.resume(&history, elapsed_ms),
            }
        });
        drop(stop);
        run
    })
    .map_err(|e| Error::internal(e.to_string()))?;

    // Artifacts ship beside the receipt: from the accepted seal when
    // verified, otherwise from the workspace as the task left it.
    let artifacts_dir = receipts.join(format!("{task_id}.artifacts"));
    let source: &Path = match (&result.record.kind, verifier.0.last_sealed()) {
        (OutcomeKind::Verified, Some(sealed)) => sealed.dir(),
        _ => &workspace,
    };
    let mut subjects = Vec::new();
    let mut shipped = Vec::new();
    // Read as untrusted: a link is never followed, a FIFO never opened.
    let source_tree = loop_workspace::Tree::open(source).map_err(|e| io("artifacts", e))?;
    for a in &contract.artifacts {
        let Ok(bytes) = source_tree.read_file(a.as_str(), ARTIFACT_MAX_BYTES) else {
            continue;
        };
        let to = artifacts_dir.join(a.as_str());
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("artifacts", e))?;
        }
        std::fs::write(&to, &bytes).map_err(|e| io("artifacts", e))?;
        subjects.push(subject(a.as_str(), &bytes));
        shipped.push(a.clone());
    }
    let ledger_bytes = std::fs::read(&ledger_path).map_err(|e| io("ledger", e))?;
    subjects.push(subject(&ledger_name, &ledger_bytes));
    drop(source_tree);

    let final_manifest =
        Manifest::of(&workspace).map_err(|e| io("cannot hash the workspace", e))?;
    let mut changes = crate::changes::compute(
        project,
        &task_ws,
        &baseline,
        if gone { &baseline } else { &final_manifest },
    );
    // The patch is a record like any other: secrets in it are redacted (the
    // per-file digests stay those of the real content, so what was verified
    // is still identified exactly).
    let redacted = loop_sandbox::redact::redact(&changes.patch);
    let unredacted = (redacted != changes.patch).then(|| changes.patch_sha256.clone());
    changes.patch = redacted;
    changes.patch_sha256 = loop_protocol::hash::sha256_hex(changes.patch.as_bytes());
    let patch_name = format!("{task_id}.changes.patch");
    std::fs::write(receipts.join(&patch_name), &changes.patch).map_err(|e| io("change set", e))?;
    subjects.push(subject(&patch_name, changes.patch.as_bytes()));
    let change_set = crate::changes::record(&changes, &patch_name, unredacted);
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: subjects,
        predicate_type: PREDICATE_TYPE.into(),
        predicate: Predicate {
            task_id: task_id.to_string(),
            contract: contract.clone(),
            contract_sha256,
            // As the ledger has it: registered secret values scrubbed.
            outcome: loop_protocol::OutcomeRecord {
                reason: loop_sandbox::redact::scrub_literals(&result.record.reason),
                ..result.record.clone()
            },
            isolation: result.last_report.as_ref().map(|r| r.isolation.clone()),
            verification: result.last_report,
            baseline: baseline_report,
            check_integrity: stored.check_integrity.clone(),
            artifacts: shipped,
            baseline_root: baseline.root.clone(),
            final_root: final_manifest.root.clone(),
            change_set: change_set.clone(),
            budgets: Budgets {
                granted: result.granted.clone(),
                used: result.used,
            },
            provenance: Provenance {
                runtime: loop_protocol::RuntimeInfo::current(),
                model: model_info,
                checker: checker_info,
            },
            ledger: LedgerRef {
                name: ledger_name,
                head: ledger.file.head().to_string(),
                length: ledger.file.len(),
            },
            created_at: loop_protocol::time::rfc3339_millis(clock.now_ms()),
        },
    };
    let receipt = receipts.join(format!("{task_id}.receipt.json"));
    let key = loop_receipt::KeyPair::load_or_create()
        .map_err(|e| Error::usage(format!("signing key: {e}")))?;
    write_envelope(&receipt, &statement, Some(&key)).map_err(|e| Error::internal(e.to_string()))?;
    // The task ends in the store only once its receipt is written.
    store
        .finish(
            task_id,
            &result.record.to_string(),
            &result.record.reason,
            &receipt.display().to_string(),
            &serde_json::to_value(&change_set).unwrap_or_default(),
            clock.now_ms(),
        )
        .map_err(store_err)?;
    // Seals and check views are scratch; the receipt holds their evidence.
    let _ = remove_tree(&task_dir.join("scratch"));
    Ok(TaskReport {
        task_id: task_id.to_string(),
        outcome: result.record,
        receipt,
        workspace,
    })
}

/// Renew the claim, and turn a cancel request (or a lost claim) into the
/// cancel flag.
fn watch(
    db: &Path,
    task_id: &str,
    token: &str,
    cancel: &std::sync::atomic::AtomicBool,
    stopped: std::sync::mpsc::Receiver<()>,
) {
    use loop_store::Store;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::RecvTimeoutError;
    let Ok(store) = loop_store::SqliteStore::open(db) else {
        return;
    };
    let mut tick: u64 = 0;
    loop {
        // The claim is renewed every 2 s (a durable write; the lease is
        // 15 s); a cancel request is looked for every 200 ms (a read).
        let still_ours = if tick.is_multiple_of(10) {
            store
                .heartbeat(task_id, token, SystemClock.now_ms())
                .unwrap_or(true)
        } else {
            true
        };
        tick += 1;
        let asked = store
            .task(task_id)
            .map(|t| t.cancel_requested)
            .unwrap_or(false);
        if asked || !still_ours {
            cancel.store(true, Ordering::SeqCst);
        }
        match stopped.recv_timeout(std::time::Duration::from_millis(200)) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
