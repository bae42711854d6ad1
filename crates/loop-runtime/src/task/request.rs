//! What a front end asks for, what the store keeps to run it again, and
//! what comes back.

use crate::Error;
use loop_protocol::{Contract, OutcomeRecord};
use loop_workspace::Protected;
use std::path::PathBuf;

/// Where the contract comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContractSource {
    /// As given: locked as it is.
    #[default]
    Given,
    /// Drafted from the instruction (the given contract holds only the
    /// instruction and limits), judged by the critic, and confirmed by a
    /// person on a terminal, or at once with `accept`.
    Draft {
        /// `--accept-contract`: lock the draft the critic accepts.
        accept: bool,
    },
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

/// What the store keeps to run a task again (`loop resume`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredRequest {
    /// The locked contract.
    pub contract: Contract,
    /// The project the task belongs to: only that project's runtimes (or
    /// one configured to serve it) run it. None in tasks recorded before
    /// projects had identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_identity: Option<crate::project::locate::ProjectIdentity>,
    /// Who the task belongs to (an API token's owner), if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// What started it (a webhook, a schedule), if not a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<loop_protocol::TriggerRecord>,
    /// `--model`, if given.
    pub model: Option<String>,
    /// `--record`, if given.
    pub record: Option<PathBuf>,
    /// `--verify-on-change`.
    pub verify_on_change: bool,
    /// `--isolation` (`required` or `preferred`).
    pub isolation: loop_sandbox::IsolationLevel,
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
    /// Dependency environments shared read-only, with their digests.
    #[serde(default)]
    pub shares: Vec<loop_receipt::SharedEnvironment>,
    /// The allow-lists of the egress proxy, presets expanded when the
    /// task started.
    #[serde(default)]
    pub network: crate::project::network::NetworkPlan,
    /// The setup the workspace got (steps run, or a cached layer taken).
    #[serde(default)]
    pub setup: Option<loop_protocol::SetupRecord>,
    /// How the contract was drafted from the instruction, when it was.
    #[serde(default)]
    pub drafting: Option<loop_protocol::DraftingRecord>,
    /// The project's guidance for coding agents (`LOOP.md`, `AGENTS.md` at
    /// the top of the task's workspace): (file, text) as the task began.
    #[serde(default)]
    pub guidance: Vec<(String, String)>,
    /// The project's checks and what the baseline said of each.
    #[serde(default)]
    pub project_checks: Vec<loop_protocol::StackCheckRecord>,
    /// The Loopfile's MCP servers when the task started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<loop_tools::mcp::McpServer>,
    /// For a child task: its parent and what it was granted (its writes
    /// are confined to the paths granted; the exec rules granted are in
    /// `exec_policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<ChildOf>,
    /// The skills the task uses, as judged and narrowed (see
    /// [`crate::skills`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<loop_protocol::skill::SkillRecord>,
    /// The files given with the task, as put in its workspace before it
    /// started (`inputs/NAME`), with their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<loop_protocol::KeyedFile>,
}

/// The guidance files read, in this order.
/// A child task's place under its parent (see `loop_protocol::delegation`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChildOf {
    /// Its parent and the authority the parent granted it.
    pub from: loop_protocol::delegation::DelegatedFrom,
    /// Which of the parent's children it is (from 1).
    pub index: u32,
    /// The parent's step and the id of its `delegate` call that started
    /// it: how a run of the parent that stops and goes on finds it.
    #[serde(default)]
    pub step: u32,
    /// See `step`.
    #[serde(default)]
    pub call_id: String,
}

pub const GUIDANCE_FILES: &[&str] = &["LOOP.md", "AGENTS.md"];

/// The project's guidance in `workspace`: each of [`GUIDANCE_FILES`] that
/// is a regular file (a link is not followed), its first 64 KiB.
pub fn read_guidance(workspace: &std::path::Path) -> Vec<(String, String)> {
    use std::io::Read;
    let mut out = Vec::new();
    for name in GUIDANCE_FILES {
        // Through the door: no link followed, no FIFO opened.
        let Ok(loop_workspace::Node::File { file, .. }) =
            loop_workspace::door::node(workspace, name)
        else {
            continue;
        };
        let mut bytes = Vec::new();
        let _ = file.take(64 * 1024).read_to_end(&mut bytes);
        let text = String::from_utf8_lossy(&bytes).to_string();
        if !text.trim().is_empty() {
            out.push((name.to_string(), text));
        }
    }
    out
}

/// The rule that refuses a child's write outside the paths it was granted.
pub const CONFINED: &str = "delegation: outside the child's paths";

/// What the task's tools and verifier guard, as the stored request says:
/// the protected paths (the contract's, the check-integrity set, the
/// shared environments, the new tests) and the new tests themselves.
pub(crate) fn guarded(
    stored: &StoredRequest,
    baseline: &loop_workspace::Manifest,
) -> Result<(Protected, Vec<String>), Error> {
    let contract = &stored.contract;
    let new_tests = new_tests(contract, &stored.check_integrity, baseline);
    let protected = protection(
        contract,
        &stored.check_integrity,
        &stored.shares,
        &new_tests,
    )?;
    // A child writes only beneath the paths its parent granted.
    let mut protected = match &stored.delegation {
        Some(child) => protected
            .confined_to(&child.from.authority.writable, CONFINED)
            .map_err(|e| Error::usage(format!("a child's paths: {e}")))?,
        None => protected,
    };
    // And a task using a skill that names its paths, only beneath them.
    for s in &stored.skills {
        if let Some(paths) = &s.capabilities.writable {
            protected = protected
                .confined_to(
                    paths,
                    &format!("skill {}: outside the skill's paths", s.name),
                )
                .map_err(|e| Error::usage(format!("skill {}'s paths: {e}", s.name)))?;
        }
    }
    Ok((protected, new_tests))
}

/// What no tool may write and every seal must leave as it was: the
/// contract's protections, then the check-integrity set (less what the
/// contract lets the model change).
/// The new test files the task is asked to write (see
/// [`loop_verifier::integrity::new_test_files`]), judged against the
/// workspace as the task began.
pub(crate) fn new_tests(
    contract: &Contract,
    integrity: &[loop_protocol::IntegrityRule],
    baseline: &loop_workspace::Manifest,
) -> Vec<String> {
    loop_verifier::integrity::new_test_files(contract, integrity, &|a| {
        let inside = format!("{a}/");
        baseline
            .entries
            .iter()
            .any(|e| e.path == a || e.path.starts_with(&inside))
    })
}

pub(crate) fn protection(
    contract: &Contract,
    integrity: &[loop_protocol::IntegrityRule],
    shares: &[loop_receipt::SharedEnvironment],
    new_tests: &[String],
) -> Result<Protected, Error> {
    // A shared environment is read-only to the tools, as it is to commands.
    let shared: Vec<(String, String)> = shares
        .iter()
        .flat_map(|s| {
            let why = format!("a shared read-only environment `{}`", s.path);
            [
                (s.path.clone(), why.clone()),
                (format!("{}/**", s.path), why),
            ]
        })
        .collect();
    Protected::new(&contract.protected_globs())
        .and_then(|p| {
            // Lifted: what the contract allows, and exactly the new test
            // files it asks for (created, never an existing one changed:
            // `conftest.py` at the root lifts no `tests/conftest.py`).
            p.with_named_except(
                &loop_verifier::integrity::named(integrity),
                &contract.allow_check_changes,
                new_tests,
            )
        })
        .and_then(|p| p.with_named(&shared, &[]))
        .map_err(|e| Error::usage(format!("protected globs: {e}")))
}
