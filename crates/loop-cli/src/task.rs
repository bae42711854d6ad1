//! One task, end to end: workspace, Director, receipt.

use crate::CliError;
use crate::story::Story;
use crate::wiring::{LedgerAdapter, ProviderAdapter, ToolsAdapter, VerifierAdapter};
use loop_core::{Clock, Director, Model, Parts, SystemClock, VerifyPolicy};
use loop_models::config::{Env, ModelsConfig};
use loop_models::http::UreqTransport;
use loop_models::retry::ThreadSleeper;
use loop_models::{Fallback, HttpModel, ModelSpec, Provider, Recorder, ReplayModel, ScriptedModel};
use loop_protocol::{Contract, OutcomeKind, OutcomeRecord};
use loop_receipt::{
    Budgets, FileLedger, LedgerRef, PREDICATE_TYPE, Predicate, Provenance, STATEMENT_TYPE,
    Statement, subject, write_envelope,
};
use loop_tools::{ToolBox, ToolLimits};
use loop_verifier::SnapshotVerifier;
use loop_workspace::{Jail, Manifest, Origin, Protected, TaskWorkspace, remove_tree};
use std::io::Read;
use std::path::{Path, PathBuf};

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
    /// `--json`.
    pub json: bool,
    /// `--verify-on-change`.
    pub verify_on_change: bool,
    /// `--isolation`.
    pub isolation: loop_sandbox::IsolationLevel,
    /// `--include-dirty`.
    pub include_dirty: bool,
}

/// How it ended.
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
pub fn new_task_id(now_ms: u64) -> String {
    let stamp = loop_protocol::time::rfc3339_millis(now_ms);
    let digits: String = stamp
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    let mut rnd = [0u8; 3];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut rnd);
    }
    format!(
        "t-{}-{}-{}",
        &digits[..8.min(digits.len())],
        &digits[8.min(digits.len())..],
        loop_protocol::hash::hex(&rnd)
    )
}

/// One provider, or a fallback chain of them.
fn chain_of(configs: Vec<loop_models::EndpointConfig>) -> Box<dyn Provider> {
    let mut chain: Vec<Box<dyn Provider>> = configs
        .into_iter()
        .map(|c| {
            let timeouts = c.timeouts;
            Box::new(HttpModel::new(
                c,
                Box::new(UreqTransport::new(timeouts)),
                Box::new(ThreadSleeper),
            )) as Box<dyn Provider>
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
type Models = (Box<dyn Model>, Option<Box<dyn Model>>);

fn load_model(
    spec: Option<&str>,
    loopfile: &crate::loopfile::Loopfile,
    record: Option<&Path>,
) -> Result<Models, CliError> {
    let spec = spec
        .map(ModelSpec::parse)
        .transpose()
        .map_err(|e| CliError::usage(e.to_string()))?;
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
    .map_err(|e| CliError::usage(e.to_string()))?;
    let checker = (!config.checker.is_empty())
        .then(|| Box::new(ProviderAdapter(chain_of(config.checker))) as Box<dyn Model>);
    let provider: Box<dyn Provider> = match &spec {
        Some(ModelSpec::Scripted(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::usage(format!("cannot read script {path}: {e}")))?;
            Box::new(
                ScriptedModel::from_yaml(&text, path)
                    .map_err(|e| CliError::usage(e.to_string()))?,
            )
        }
        Some(ModelSpec::Replay(path)) => Box::new(
            ReplayModel::open(Path::new(path)).map_err(|e| CliError::usage(e.to_string()))?,
        ),
        _ => {
            if config.maker.is_empty() {
                return Err(CliError::usage(
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
                .map_err(|e| CliError::usage(e.to_string()))?,
        ),
    };
    Ok((Box::new(ProviderAdapter(provider)), checker))
}

/// Run one task and write its receipt.
pub fn run_task(req: TaskRequest) -> Result<TaskReport, CliError> {
    let clock = SystemClock;
    let project = req
        .project
        .canonicalize()
        .map_err(|e| CliError::usage(format!("project {}: {e}", req.project.display())))?;
    let loopfile = crate::loopfile::Loopfile::load(&project)?;
    let (mut model, mut checker) =
        load_model(req.model.as_deref(), &loopfile, req.record.as_deref())?;
    let state = project.join(".loop");
    let task_id = new_task_id(clock.now_ms());
    let task_dir = state.join("tasks").join(&task_id);
    let workspace = task_dir.join("workspace");
    let receipts = state.join("receipts");
    let io = |what: &str, e: std::io::Error| CliError::internal(format!("{what}: {e}"));

    // The runtime's state never shows in the user's `git status`.
    std::fs::create_dir_all(&state).map_err(|e| io("cannot create .loop", e))?;
    if !state.join(".gitignore").exists() {
        std::fs::write(state.join(".gitignore"), "*\n").map_err(|e| io(".loop/.gitignore", e))?;
    }
    // The task never works in the user's checkout: a worktree or a copy.
    let task_ws = TaskWorkspace::create(&project, &workspace, &task_id, req.include_dirty)
        .map_err(|e| CliError::internal(format!("cannot make the task workspace: {e}")))?;
    crate::changes::save_origin(&task_dir, &task_ws).map_err(|e| io("task state", e))?;
    let baseline = Manifest::of(&workspace).map_err(|e| io("cannot hash the workspace", e))?;

    let protected = Protected::new(&req.contract.protected_globs())
        .map_err(|e| CliError::usage(format!("protected globs: {e}")))?;
    let jail = Jail::new(&workspace, protected.clone()).map_err(|e| io("workspace", e))?;
    let cancel = crate::interrupt::flag();
    let sandbox = loop_sandbox::Settings {
        isolation: req.isolation,
        cancel: Some(cancel.clone()),
    };
    let diff_ws = workspace.clone();
    let mut tools = ToolsAdapter {
        tools: ToolBox::new(jail, ToolLimits::default()).with_sandbox(sandbox.clone()),
        diff: Some(Box::new(|| match Manifest::of(&diff_ws) {
            Ok(now) => crate::changes::compute(&project, &task_ws, &baseline, &now).patch,
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
    let ledger_name = format!("{task_id}.ledger.jsonl");
    let ledger_path = receipts.join(&ledger_name);
    let mut ledger = LedgerAdapter {
        ledger: FileLedger::create(&ledger_path).map_err(|e| CliError::internal(e.to_string()))?,
        clock: &clock,
    };
    let mut story = Story::new(req.json);
    if !req.json {
        match &task_ws.origin {
            Origin::Worktree {
                branch,
                base_commit,
                dirty_included,
                ..
            } => println!(
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
                println!("workspace {} (copy)", workspace.display())
            }
            Origin::Copy { skipped } => println!(
                "workspace {} (copy; skipped {})",
                workspace.display(),
                skipped.join(", ")
            ),
        }
    }
    // Baseline: the contract's checks on the workspace as it starts, so the
    // receipt shows what held before any change.
    let baseline_report = req
        .contract
        .sha256()
        .ok()
        .and_then(|sha| verifier.0.verify(&req.contract, &sha, 0).ok());
    if let (false, Some(b)) = (req.json, &baseline_report) {
        println!(
            "baseline: {} of {} criteria hold before any change",
            b.passed_criteria(),
            b.criteria.len()
        );
    }
    let model_info = model.info();
    let checker_info = checker.as_ref().map(|c| c.info());
    let parts = Parts {
        model: model.as_mut(),
        tools: &mut tools,
        verifier: &mut verifier,
        ledger: &mut ledger,
        clock: &clock,
        observer: &mut story,
        cancel: &cancel,
    };
    let policy = if req.verify_on_change {
        VerifyPolicy::OnFinishOrChange
    } else {
        VerifyPolicy::OnFinish
    };
    let contract_sha256 = req
        .contract
        .sha256()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let mut director = Director::new(&task_id, req.contract.clone(), policy, parts)
        .map_err(|e| CliError::internal(e.to_string()))?;
    if let Some(c) = checker.as_deref_mut() {
        director = director.with_reviewer(c);
    }
    let result = director
        .run()
        .map_err(|e| CliError::internal(e.to_string()))?;

    // Artifacts ship beside the receipt: from the accepted seal when
    // verified, otherwise from the workspace as the task left it.
    let artifacts_dir = receipts.join(format!("{task_id}.artifacts"));
    let source: &Path = match (&result.record.kind, verifier.0.last_sealed()) {
        (OutcomeKind::Verified, Some(sealed)) => sealed.dir(),
        _ => &workspace,
    };
    let mut subjects = Vec::new();
    let mut shipped = Vec::new();
    for a in &req.contract.artifacts {
        let from = source.join(a.as_str());
        let Ok(bytes) = std::fs::read(&from) else {
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

    let final_manifest =
        Manifest::of(&workspace).map_err(|e| io("cannot hash the workspace", e))?;
    let changes = crate::changes::compute(&project, &task_ws, &baseline, &final_manifest);
    let patch_name = format!("{task_id}.changes.patch");
    std::fs::write(receipts.join(&patch_name), &changes.patch).map_err(|e| io("change set", e))?;
    subjects.push(subject(&patch_name, changes.patch.as_bytes()));
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: subjects,
        predicate_type: PREDICATE_TYPE.into(),
        predicate: Predicate {
            task_id: task_id.clone(),
            contract: req.contract.clone(),
            contract_sha256,
            outcome: result.record.clone(),
            isolation: result.last_report.as_ref().map(|r| r.isolation.clone()),
            verification: result.last_report,
            baseline: baseline_report,
            artifacts: shipped,
            baseline_root: baseline.root.clone(),
            final_root: final_manifest.root.clone(),
            change_set: crate::changes::record(&changes, &patch_name),
            budgets: Budgets {
                granted: req.contract.limits.clone(),
                used: result.used,
            },
            provenance: Provenance {
                runtime: loop_protocol::RuntimeInfo::current(),
                model: model_info,
                checker: checker_info,
            },
            ledger: LedgerRef {
                name: ledger_name,
                head: ledger.ledger.head().to_string(),
                length: ledger.ledger.len(),
            },
            created_at: loop_protocol::time::rfc3339_millis(clock.now_ms()),
        },
    };
    let receipt = receipts.join(format!("{task_id}.receipt.json"));
    let key = loop_receipt::KeyPair::load_or_create()
        .map_err(|e| CliError::usage(format!("signing key: {e}")))?;
    write_envelope(&receipt, &statement, Some(&key))
        .map_err(|e| CliError::internal(e.to_string()))?;
    // Seals and check views are scratch; the receipt holds their evidence.
    let _ = remove_tree(&task_dir.join("scratch"));
    Ok(TaskReport {
        task_id,
        outcome: result.record,
        receipt,
        workspace,
    })
}
