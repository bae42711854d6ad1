//! Events: every fact the runtime records about a task. Each event becomes
//! one ledger entry (`kind` + `payload`) and one line of `--json` output.

use crate::action::{ModelInfo, ToolCall, Usage};
use crate::contract::{Contract, Limits};
use crate::evidence::VerificationReport;
use crate::observation::Observation;
use crate::outcome::OutcomeRecord;
use crate::state::TaskState;
use serde::{Deserialize, Serialize};

/// This runtime, for provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// `loop-engine`.
    pub name: String,
    /// Crate version.
    pub version: String,
}

impl RuntimeInfo {
    /// This build.
    pub fn current() -> Self {
        RuntimeInfo {
            name: "loop-engine".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// What a task has used of its budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// Model turns taken.
    pub steps: u32,
    /// Input + output tokens.
    pub tokens: u64,
    /// Prompt tokens, as the providers reported them.
    #[serde(default)]
    pub input_tokens: u64,
    /// Of those, served from a provider cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// True when some usage was estimated because a provider reported none.
    #[serde(default)]
    pub estimated: bool,
    /// HTTP calls made to model providers, failed and retried ones included.
    #[serde(default)]
    pub model_calls: u32,
    /// Dollars spent (0 for scripted models).
    pub usd: f64,
    /// Wall-clock time since the task started.
    pub elapsed_ms: u64,
    /// Verification attempts.
    pub verifications: u32,
}

/// One recorded fact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The genesis: binds the ledger to the task and its locked contract.
    TaskStarted {
        /// Task id.
        task_id: String,
        /// Locked contract hash.
        contract_sha256: String,
        /// The contract itself.
        contract: Box<Contract>,
        /// Budgets granted.
        limits: Limits,
        /// The model driving the task.
        model: ModelInfo,
        /// The checker reviewing accepted work, if one is configured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checker: Option<Box<ModelInfo>>,
        /// This runtime.
        runtime: RuntimeInfo,
        /// Merkle root of the task workspace at the start.
        baseline_root: String,
        /// The project's setup steps, run before the baseline or taken
        /// from a cached layer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        setup: Option<Box<crate::SetupRecord>>,
        /// How the contract was drafted from the instruction, when it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        drafting: Option<Box<crate::DraftingRecord>>,
        /// The project's guidance files given to the model (`LOOP.md`,
        /// `AGENTS.md`), with their digests.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        guidance: Vec<crate::KeyedFile>,
        /// Files given with the task (`loop run --input`, the API's
        /// upload), put in the workspace before it started, with their
        /// digests.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        inputs: Vec<crate::KeyedFile>,
        /// The project's own checks and what the untouched workspace said
        /// of each (those that held are the contract's `guard` criteria).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        project_checks: Vec<crate::StackCheckRecord>,
        /// What started the task, when not a person at a front end (a
        /// verified webhook delivery, a schedule).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger: Option<Box<crate::TriggerRecord>>,
    },
    /// A state transition, with its reason.
    Transition {
        /// Transition number within the task, from 1.
        n: u32,
        /// From.
        from: TaskState,
        /// To.
        to: TaskState,
        /// Why.
        reason: String,
    },
    /// The model proposed a turn.
    ModelTurn {
        /// Step number, from 1.
        step: u32,
        /// SHA-256 of the canonical context the model was given.
        context_sha256: String,
        /// The stated reasoning.
        thought: Option<String>,
        /// Proposed calls.
        calls: Vec<ToolCall>,
        /// Tokens used.
        usage: Usage,
    },
    /// The model answered with something that is not a usable turn.
    ModelMalformed {
        /// Step number.
        step: u32,
        /// SHA-256 of the canonical context the model was given.
        context_sha256: String,
        /// What was wrong.
        error: String,
        /// Bounded excerpt of the answer.
        excerpt: String,
        /// What it cost.
        usage: Usage,
    },
    /// The checker reviewed work the checks accepted.
    Reviewed {
        /// The verification attempt reviewed.
        attempt: u32,
        /// `approve` or `object`.
        verdict: String,
        /// Its reasons.
        reasons: String,
        /// What the review cost.
        usage: Usage,
    },
    /// No provider answered; the task ends in error, the attempts charged.
    ModelFailed {
        /// Step number.
        step: u32,
        /// What failed.
        error: String,
        /// What the attempts cost.
        usage: Usage,
    },
    /// The model had nothing more to say.
    ModelSilent {
        /// The step it was asked for.
        step: u32,
        /// Why.
        reason: String,
    },
    /// A tool call is about to run (journaled first, so a resumed task knows
    /// which calls may have had effects).
    Intent {
        /// Step number.
        step: u32,
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// What running it again would do.
        effect: crate::action::Effect,
        /// The workspace's Merkle root before it.
        root_before: String,
    },
    /// A call waits for a person's approval (exec policy `prompt`).
    ApprovalRequested {
        /// Step number.
        step: u32,
        /// The approval's id (what `loop approve` answers).
        approval_id: String,
        /// The call waiting.
        call_id: String,
        /// Its tool.
        tool: String,
        /// What would run.
        detail: String,
        /// The rule that asks.
        rule: String,
        /// When an unanswered request becomes a deny (ms since the epoch).
        deadline_ms: u64,
    },
    /// A person answered (or nobody did in time: `expired`, a deny).
    ApprovalDecided {
        /// The approval's id.
        approval_id: String,
        /// `approved`, `denied` or `expired`.
        decision: ApprovalDecision,
        /// Who or what decided: a person (at the terminal, or with `loop
        /// approve`), `--on-prompt`, or the timeout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// What the person said with the answer (`loop approve --message`),
        /// given to the model with the call's result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A person granted more budget to a task that reached a limit; it goes on.
    BudgetExtended {
        /// More model turns.
        add_steps: u32,
        /// More tokens.
        add_tokens: u64,
        /// More dollars.
        add_usd: f64,
        /// More wall-clock seconds.
        add_secs: u64,
    },
    /// The task pauses for a person (a checkpoint: repeated failed repairs,
    /// spending past a threshold). It goes on only if someone says so.
    CheckpointRequested {
        /// The request's id (what `loop approve` answers).
        approval_id: String,
        /// Why it pauses.
        reason: String,
        /// When an unanswered checkpoint stops the task (ms since the epoch).
        deadline_ms: u64,
    },
    /// A person answered a checkpoint (`approved`: go on; `denied` or
    /// `expired`: stop), perhaps with guidance for the model.
    CheckpointDecided {
        /// The request's id.
        approval_id: String,
        /// `approved`, `denied` or `expired`.
        decision: ApprovalDecision,
        /// Guidance, passed to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A recovery policy acted (a transient failure retried).
    Recovery {
        /// Step number.
        step: u32,
        /// The policy (`retry`).
        policy: String,
        /// The call concerned.
        call_id: String,
        /// Attempt number of the retry.
        attempt: u32,
        /// What happened.
        detail: String,
    },
    /// A task resumed after its runtime stopped.
    Resumed {
        /// Why it is resuming (the interrupted state).
        reason: String,
    },
    /// A child task the model proposed (the `delegate` call `call_id`)
    /// was granted and ran: its record, before the call's observation.
    /// What it used is charged to this task's budget.
    Delegated {
        /// Step number.
        step: u32,
        /// The call that proposed it.
        call_id: String,
        /// The child.
        child: ChildRun,
    },
    /// A tool call's result.
    Observed {
        /// Step number.
        step: u32,
        /// The observation.
        observation: Observation,
        /// Workspace Merkle root after the call, when it changed.
        workspace_root: Option<String>,
    },
    /// A verification pass and its verdict.
    Verified {
        /// The evidence.
        report: VerificationReport,
        /// Whether the contract accepted it.
        accepted: bool,
        /// If not, why.
        rejection: Option<String>,
    },
    /// Text the runtime put into the model's context (e.g. failing evidence).
    Feedback {
        /// The step it precedes.
        step: u32,
        /// The text.
        text: String,
    },
    /// The end: outcome and budgets used.
    Finished {
        /// How it ended.
        outcome: OutcomeRecord,
        /// What it used.
        used: BudgetUse,
    },
}

impl Event {
    /// The event's kind, as in the ledger.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TaskStarted { .. } => "task_started",
            Event::Transition { .. } => "transition",
            Event::ModelTurn { .. } => "model_turn",
            Event::ModelMalformed { .. } => "model_malformed",
            Event::ModelFailed { .. } => "model_failed",
            Event::Reviewed { .. } => "reviewed",
            Event::ModelSilent { .. } => "model_silent",
            Event::Intent { .. } => "intent",
            Event::Resumed { .. } => "resumed",
            Event::CheckpointRequested { .. } => "checkpoint_requested",
            Event::CheckpointDecided { .. } => "checkpoint_decided",
            Event::Recovery { .. } => "recovery",
            Event::BudgetExtended { .. } => "budget_extended",
            Event::ApprovalRequested { .. } => "approval_requested",
            Event::ApprovalDecided { .. } => "approval_decided",
            Event::Delegated { .. } => "delegated",
            Event::Observed { .. } => "observed",
            Event::Verified { .. } => "verified",
            Event::Feedback { .. } => "feedback",
            Event::Finished { .. } => "finished",
        }
    }

    /// Split into ledger `kind` and `payload` (the event without its tag).
    pub fn to_kind_payload(&self) -> Result<(String, serde_json::Value), serde_json::Error> {
        let mut v = serde_json::to_value(self)?;
        if let Some(obj) = v.as_object_mut() {
            obj.remove("kind");
        }
        Ok((self.kind().to_string(), v))
    }

    /// Rebuild from a ledger entry's `kind` and `payload`.
    pub fn from_kind_payload(
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<Event, serde_json::Error> {
        let mut v = payload.clone();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("kind".into(), serde_json::Value::String(kind.to_string()));
        }
        serde_json::from_value(v)
    }
}

/// A child task, as its parent's ledger records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildRun {
    /// The child's task id.
    pub task_id: String,
    /// The authority it was granted.
    pub authority: crate::delegation::Authority,
    /// How it ended (`verified`, `failed`, `lost`, `limit_reached`, …).
    pub outcome: String,
    /// SHA-256 of its receipt file, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_sha256: Option<String>,
    /// What it used, counted against the parent's budget.
    pub used: BudgetUse,
}

/// One entry of a task's hash-chained ledger, as the ledger file, the
/// store and the receipt's verifier all hold it: the event (kind and
/// payload), its place in the chain, and its hash (SHA-256 of the canonical
/// JSON of every other field).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerEntry {
    /// Position, from 0.
    pub seq: u64,
    /// Hash of the previous entry.
    pub prev: String,
    /// Event kind.
    pub kind: String,
    /// Event payload.
    pub payload: serde_json::Value,
    /// RFC 3339 UTC time of recording.
    pub at: String,
    /// SHA-256 of the canonical body.
    pub hash: String,
}

/// A person's answer to an approval or a checkpoint (or nobody's: the
/// request expired, a deny; or the task was cancelled while it waited,
/// which is never recorded as an answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run it / go on.
    Approved,
    /// Do not / stop.
    Denied,
    /// Nobody answered in time: a deny.
    Expired,
    /// The task was cancelled while waiting.
    Cancelled,
}

impl ApprovalDecision {
    /// As recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Approved => "approved",
            ApprovalDecision::Denied => "denied",
            ApprovalDecision::Expired => "expired",
            ApprovalDecision::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for ApprovalDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
