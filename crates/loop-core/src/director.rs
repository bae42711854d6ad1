//! The Director: the loop, top to bottom. Decide, call, record.
//!
//! It owns the state machine and the budgets, asks the model for turns,
//! passes calls through the tools' authority choke point, sends every claim
//! of completion to the verifier, and ends the task only on evidence (or on
//! a limit, a stall, a cancel or an error). Every decision is recorded in
//! the ledger before the next step begins.

use crate::budget::Budget;
use crate::feedback::rejection_feedback;
use crate::machine::Machine;
use crate::progress::{ProgressDetector, Verdict};
use crate::prompt::system_prompt;
use crate::traits::{
    ApprovalDecision, Approvals, BoundaryError, Clock, Ledger, Model, Observer, Tools, Verifier,
};
use loop_protocol::{
    Acceptance, BudgetUse, Context, Contract, Control, Event, ModelReply, Observation, Outcome,
    OutcomeRecord, RuntimeInfo, TaskState, ToolCall, Turn, VerificationReport,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// When the Director runs verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyPolicy {
    /// Only when the model calls `finish`.
    #[default]
    OnFinish,
    /// Also after every step that changed the workspace, so a change that
    /// makes the checks pass completes the task without a `finish` claim.
    OnFinishOrChange,
}

/// Everything the Director needs, borrowed for one run.
pub struct Parts<'a> {
    /// The model.
    pub model: &'a mut dyn Model,
    /// The tools (authority choke point included).
    pub tools: &'a mut dyn Tools,
    /// The verifier.
    pub verifier: &'a mut dyn Verifier,
    /// The ledger.
    pub ledger: &'a mut dyn Ledger,
    /// The clock.
    pub clock: &'a dyn Clock,
    /// Presentation.
    pub observer: &'a mut dyn Observer,
    /// Set to stop the task at the next decision point.
    pub cancel: &'a AtomicBool,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The limits granted in the end (the contract's, plus any extension).
    pub granted: loop_protocol::Limits,
    /// The outcome (verified only with an acceptance).
    pub outcome: Outcome,
    /// The outcome as recorded, with its reason.
    pub record: OutcomeRecord,
    /// Budgets used.
    pub used: BudgetUse,
    /// The last verification report, if any ran.
    pub last_report: Option<VerificationReport>,
}

/// A run that could not even be recorded.
#[derive(Debug, thiserror::Error)]
pub enum DirectorError {
    /// The ledger refused an append: nothing more can be trusted.
    #[error("ledger append failed: {0}")]
    Ledger(BoundaryError),
    /// The contract cannot be hashed.
    #[error("contract cannot be hashed: {0}")]
    Contract(String),
    /// The record cannot be resumed.
    #[error("cannot resume: {0}")]
    Resume(String),
    /// A transition the state machine refuses (a bug in the Director).
    #[error(transparent)]
    Transition(#[from] crate::machine::InvalidTransition),
}

/// What the checker said about accepted work.
enum Review {
    /// No checker, or it approved.
    Approved,
    /// It objected, with its reasons for the maker.
    Objection(String),
    /// It could not be reached: nobody reviewed the work.
    Unreachable(String),
}

/// The Director for one task.
pub struct Director<'a> {
    task_id: String,
    contract: Contract,
    locked_sha256: String,
    policy: VerifyPolicy,
    parts: Parts<'a>,
    machine: Machine,
    budget: Budget,
    last_report: Option<VerificationReport>,
    progress: ProgressDetector,
    /// The workspace's Merkle root as last known (updated on every change).
    root: String,
    /// Tokens never handed to the maker (kept for review and feedback).
    reserve_tokens: u64,
    /// The checker, if one is configured.
    reviewer: Option<&'a mut dyn Model>,
    /// Stall thresholds.
    progress_config: crate::progress::ProgressConfig,
    /// When to pause for a person.
    checkpoints: Checkpoints,
    /// A checkpoint due before the next model turn.
    checkpoint_due: Option<String>,
    /// Rejected verifications so far.
    failed_repairs: u32,
    /// Whether the cost checkpoint has been asked.
    cost_asked: bool,
    /// Where approvals are asked (none: a `prompt` is denied, fail closed).
    approvals: Option<&'a mut dyn Approvals>,
    /// How long a pending approval waits before it is a deny.
    approval_timeout_ms: u64,
    /// Milliseconds paused for a person, shared with the sandbox.
    clock_pause: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// End the task at once, in error, for this reason (its workspace is gone).
    end_at_once: Option<String>,
}

/// Tokens kept for the checker's prompt, beyond its completion.
const REVIEW_PROMPT_RESERVE: u64 = 8_000;

enum Stop {
    Outcome(Outcome, String),
}

impl<'a> Director<'a> {
    /// Lock `contract` (hash it) and prepare to run it.
    pub fn new(
        task_id: impl Into<String>,
        contract: Contract,
        policy: VerifyPolicy,
        parts: Parts<'a>,
    ) -> Result<Self, DirectorError> {
        let locked_sha256 = contract
            .sha256()
            .map_err(|e| DirectorError::Contract(e.to_string()))?;
        let budget = Budget::new(contract.limits.clone(), parts.clock.now_ms());
        Ok(Director {
            task_id: task_id.into(),
            contract,
            locked_sha256,
            policy,
            parts,
            machine: Machine::new(),
            budget,
            last_report: None,
            progress: ProgressDetector::default(),
            progress_config: crate::progress::ProgressConfig::default(),
            checkpoints: Checkpoints::default(),
            checkpoint_due: None,
            failed_repairs: 0,
            cost_asked: false,
            root: String::new(),
            reserve_tokens: 0,
            reviewer: None,
            approvals: None,
            approval_timeout_ms: 3_600_000,
            clock_pause: None,
            end_at_once: None,
        })
    }

    /// Pause for a person at these checkpoints (the Loopfile's `checkpoints`).
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// Pause for a person: record the request, wait for the answer. `Ok(None)`
    /// means go on (the guidance, if any, is already in the context);
    /// `Ok(Some(..))` is how the task ends. Nobody answering stops it.
    fn checkpoint(
        &mut self,
        context: &mut Context,
        reason: &str,
        pending: Option<(String, u64)>,
    ) -> Result<Option<(Outcome, String)>, DirectorError> {
        let (approval_id, deadline) = match pending {
            Some(p) => p,
            None => {
                let now = self.parts.clock.now_ms();
                let approval_id = format!("checkpoint-{}", self.machine.taken() + 1);
                let deadline =
                    now.saturating_add(self.checkpoints.timeout_secs.saturating_mul(1000));
                // Stored before the task says it waits (as for approvals).
                if let Some(a) = self.approvals.as_deref_mut() {
                    let payload = serde_json::json!({
                        "kind": "checkpoint", "detail": reason, "rule": "checkpoint",
                        "deadline_ms": deadline,
                    });
                    a.request(&approval_id, &payload, now)
                        .map_err(DirectorError::Ledger)?;
                }
                self.record(Event::CheckpointRequested {
                    approval_id: approval_id.clone(),
                    reason: reason.to_string(),
                    deadline_ms: deadline,
                })?;
                self.go(TaskState::AwaitingInput, format!("checkpoint: {reason}"))?;
                (approval_id, deadline)
            }
        };
        let began = self.parts.clock.now_ms();
        let (decision, message) = match self.approvals.as_deref_mut() {
            None => (ApprovalDecision::Expired, None),
            Some(a) => {
                let d = a
                    .wait(&approval_id, deadline, self.parts.cancel)
                    .unwrap_or(ApprovalDecision::Denied);
                (d, a.message(&approval_id))
            }
        };
        self.waited_for_a_person(began);
        if decision == ApprovalDecision::Cancelled {
            return Ok(Some((
                Outcome::Cancelled,
                "cancelled by request at a checkpoint".into(),
            )));
        }
        self.record(Event::CheckpointDecided {
            approval_id,
            decision: decision.as_str().into(),
            message: message.clone(),
        })?;
        match decision {
            ApprovalDecision::Approved => {
                self.go(TaskState::Planning, "a person said to go on")?;
                if let Some(m) = message {
                    let text = format!("A person reviewed the task at a checkpoint and says: {m}");
                    self.tell(0, context, text)?;
                }
                Ok(None)
            }
            ApprovalDecision::Denied => Ok(Some((
                Outcome::Cancelled,
                format!("stopped by a person at a checkpoint ({reason})"),
            ))),
            _ => Ok(Some((
                Outcome::Cancelled,
                format!(
                    "nobody answered the checkpoint ({reason}); stopped, never continued unasked"
                ),
            ))),
        }
    }

    /// With `checkpoints.pause_clock`, the wait that began at `began` (ms)
    /// is not charged to the wall-time budget, and commands' deadlines
    /// move by as much (through the counter given to
    /// [`Director::with_clock_pause`]).
    fn waited_for_a_person(&mut self, began: u64) {
        if !self.checkpoints.pause_clock {
            return;
        }
        let waited = self.parts.clock.now_ms().saturating_sub(began);
        self.budget.pause(waited);
        if let Some(c) = &self.clock_pause {
            c.fetch_add(waited, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Add every pause for a person (with `checkpoints.pause_clock`) to
    /// `counter`, in milliseconds: the sandbox moves commands' deadlines
    /// by it.
    pub fn with_clock_pause(
        mut self,
        counter: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        self.clock_pause = Some(counter);
        self
    }

    /// Do not go on: end the task in error, recording `reason` (a task
    /// whose workspace is gone can be neither resumed nor verified; it
    /// still ends with a receipt that says why).
    pub fn ending_at_once(mut self, reason: String) -> Self {
        self.end_at_once = Some(reason);
        self
    }

    /// Use these stall thresholds (the Loopfile's `progress`).
    pub fn with_progress(mut self, config: crate::progress::ProgressConfig) -> Self {
        self.progress = ProgressDetector::new(config.clone());
        self.progress_config = config;
        self
    }

    /// Ask `approvals` when a call needs a person; unanswered after
    /// `timeout_secs`, the request is a deny.
    pub fn with_approvals(mut self, approvals: &'a mut dyn Approvals, timeout_secs: u64) -> Self {
        self.approvals = Some(approvals);
        self.approval_timeout_ms = timeout_secs.saturating_mul(1000);
        self
    }

    /// Ask for approval of `call` (or, resuming, wait for an earlier
    /// request), record the answer, and come back to acting.
    fn seek_approval(
        &mut self,
        step: u32,
        call: &ToolCall,
        rule: &str,
        pending: Option<(String, u64)>,
    ) -> Result<ApprovalDecision, DirectorError> {
        let (approval_id, deadline) = match pending {
            Some(p) => p,
            None => {
                let now = self.parts.clock.now_ms();
                let approval_id = format!("{}-{}", step, call.id);
                let deadline = now.saturating_add(self.approval_timeout_ms);
                let detail = call
                    .args
                    .get("command")
                    .and_then(|c| c.as_str())
                    .map(str::to_string)
                    .unwrap_or_else(|| call.args.to_string());
                // The request is stored before the task says it waits: a
                // reader who sees `awaiting_approval` always finds it.
                if let Some(a) = self.approvals.as_deref_mut() {
                    let payload = serde_json::json!({
                        "call_id": call.id, "tool": call.tool, "detail": detail,
                        "rule": rule, "deadline_ms": deadline,
                    });
                    a.request(&approval_id, &payload, now)
                        .map_err(DirectorError::Ledger)?;
                }
                self.record(Event::ApprovalRequested {
                    step,
                    approval_id: approval_id.clone(),
                    call_id: call.id.clone(),
                    tool: call.tool.clone(),
                    detail: detail.clone(),
                    rule: rule.to_string(),
                    deadline_ms: deadline,
                })?;
                self.go(
                    TaskState::AwaitingApproval,
                    format!("`{detail}` needs a person's approval (rule `{rule}`)"),
                )?;
                (approval_id, deadline)
            }
        };
        let began = self.parts.clock.now_ms();
        let decision = match self.approvals.as_deref_mut() {
            // Nobody can answer: fail closed.
            None => ApprovalDecision::Denied,
            Some(a) => a
                .wait(&approval_id, deadline, self.parts.cancel)
                .unwrap_or(ApprovalDecision::Denied),
        };
        self.waited_for_a_person(began);
        if decision == ApprovalDecision::Cancelled {
            return Ok(decision);
        }
        let by = self
            .approvals
            .as_deref_mut()
            .and_then(|a| a.decided_by(&approval_id));
        self.record(Event::ApprovalDecided {
            approval_id,
            decision: decision.as_str().into(),
            by,
        })?;
        self.go(TaskState::Acting, format!("approval {}", decision.as_str()))?;
        Ok(decision)
    }

    /// The observation of a call a person did not approve.
    fn denial(call: &ToolCall, rule: &str, decision: &str) -> Observation {
        Observation::refused(
            &call.id,
            &call.tool,
            format!("approval: {decision}"),
            format!(
                "this needed a person's approval (rule `{rule}`) and the answer was `{decision}`; it was not run"
            ),
        )
    }

    /// Record a denial as the call's observation.
    fn record_denial(
        &mut self,
        step: u32,
        call: &ToolCall,
        rule: &str,
        decision: &str,
        context: &mut Context,
    ) -> Result<Observation, DirectorError> {
        let obs = Self::denial(call, rule, decision);
        self.record(Event::Observed {
            step,
            observation: obs.clone(),
            workspace_root: None,
        })?;
        context.push_observation(&obs);
        Ok(obs)
    }

    /// Have `checker` review work the checks accept; it can only veto. Its
    /// largest answer is kept in reserve from the maker's token budget.
    pub fn with_reviewer(mut self, checker: &'a mut dyn Model) -> Self {
        self.reserve_tokens = self.reserve_tokens.max(
            checker
                .max_output_tokens()
                .saturating_add(REVIEW_PROMPT_RESERVE),
        );
        self.reviewer = Some(checker);
        self
    }

    /// Keep `tokens` of the token budget out of the maker's reach.
    pub fn with_reserve(mut self, tokens: u64) -> Self {
        self.reserve_tokens = tokens;
        self
    }

    /// The locked contract hash.
    pub fn contract_sha256(&self) -> &str {
        &self.locked_sha256
    }

    fn record(&mut self, event: Event) -> Result<(), DirectorError> {
        self.parts
            .ledger
            .append(&event)
            .map_err(DirectorError::Ledger)?;
        self.parts.observer.on_event(&event);
        Ok(())
    }

    fn go(&mut self, to: TaskState, reason: impl Into<String>) -> Result<(), DirectorError> {
        let event = self.machine.go(to, reason)?;
        self.record(event)
    }

    /// Run the task to a terminal outcome.
    pub fn run(self) -> Result<RunResult, DirectorError> {
        self.run_from(&[], 0, None)
    }

    /// Continue a task whose ledger so far is `history` (its events, in
    /// order) and which had used `elapsed_ms` of wall time. The context,
    /// budgets, state, progress and verification so far are rebuilt from the
    /// record; an interrupted step is finished (calls that may have had
    /// effects are not run twice); then the loop goes on. With an empty
    /// history this is [`Director::run`].
    pub fn resume(self, history: &[Event], elapsed_ms: u64) -> Result<RunResult, DirectorError> {
        self.run_from(history, elapsed_ms, None)
    }

    /// Grant more budget to a task that ended `limit_reached` (its record is
    /// `history`) and let it go on: the grant and the reopening are new
    /// entries of the same chain. Any other task is refused.
    pub fn extend(
        self,
        history: &[Event],
        elapsed_ms: u64,
        extension: Extension,
    ) -> Result<RunResult, DirectorError> {
        self.run_from(history, elapsed_ms, Some(extension))
    }

    fn run_from(
        mut self,
        history: &[Event],
        elapsed_ms: u64,
        extension: Option<Extension>,
    ) -> Result<RunResult, DirectorError> {
        if history.is_empty() {
            let baseline_root = self.parts.tools.workspace_root();
            let baseline = match &baseline_root {
                Ok(r) => r.clone(),
                Err(_) => String::new(),
            };
            self.root = baseline.clone();
            self.record(Event::TaskStarted {
                task_id: self.task_id.clone(),
                contract_sha256: self.locked_sha256.clone(),
                contract: Box::new(self.contract.clone()),
                limits: self.contract.limits.clone(),
                model: self.parts.model.info(),
                checker: self.reviewer.as_ref().map(|r| Box::new(r.info())),
                runtime: RuntimeInfo::current(),
                baseline_root: baseline,
            })?;
            let stop = match baseline_root {
                Err(e) => Stop::Outcome(Outcome::Error, format!("cannot read the workspace: {e}")),
                Ok(_) if self.end_at_once.is_some() => {
                    Stop::Outcome(Outcome::Error, self.end_at_once.take().unwrap_or_default())
                }
                Ok(_) => {
                    self.go(TaskState::Planning, "task started: contract locked")?;
                    let tools = self.parts.tools.specs();
                    let system = system_prompt(&self.contract, &self.locked_sha256, &tools);
                    let context = Context::new(system, tools, &self.contract.instruction);
                    self.drive(context, 0, Phase::Plan)?
                }
            };
            let Stop::Outcome(outcome, reason) = stop;
            return self.finish(outcome, reason);
        }
        let mut restored = crate::resume::rebuild(
            self.contract.limits.clone(),
            self.progress_config.clone(),
            history,
            self.parts.clock.now_ms(),
            elapsed_ms,
        )
        .map_err(DirectorError::Resume)?;
        if restored.task_id != self.task_id || restored.contract_sha256 != self.locked_sha256 {
            return Err(DirectorError::Resume(format!(
                "the history is for task {} with contract {}, not task {} with contract {}",
                restored.task_id, restored.contract_sha256, self.task_id, self.locked_sha256
            )));
        }
        self.machine = restored.machine;
        self.budget = restored.budget;
        self.last_report = restored.last_report;
        self.progress = restored.progress;
        self.root = restored.root.clone();
        self.parts.model.resume_at(restored.turns);
        if let Some(ext) = extension {
            match &restored.finished {
                Some((record, _)) if record.kind == loop_protocol::OutcomeKind::LimitReached => {}
                Some((record, _)) => {
                    return Err(DirectorError::Resume(format!(
                        "only a task that reached a limit can be given more budget; this one ended {record}"
                    )));
                }
                None => {
                    return Err(DirectorError::Resume(
                        "the task has not ended; resume it without extending".into(),
                    ));
                }
            }
            self.record(Event::BudgetExtended {
                add_steps: ext.add_steps,
                add_tokens: ext.add_tokens,
                add_usd: ext.add_usd,
                add_secs: ext.add_secs,
            })?;
            self.budget
                .extend(ext.add_steps, ext.add_tokens, ext.add_usd, ext.add_secs);
            // Out of terminal: recorded, and only ever here.
            let n = self.machine.taken() + 1;
            self.record(Event::Transition {
                n,
                from: TaskState::Terminal,
                to: TaskState::Planning,
                reason: format!(
                    "budget extended: +{} steps, +{} tokens, +${:.2}, +{} s",
                    ext.add_steps, ext.add_tokens, ext.add_usd, ext.add_secs
                ),
            })?;
            self.machine = Machine::restore(TaskState::Planning, n);
            restored.finished = None;
            restored.phase = Phase::Plan;
            restored.interrupted = None;
        }
        if let Some((record, used)) = restored.finished {
            // It ended; only the receipt was missing.
            let outcome = match (record.kind, &self.last_report) {
                (loop_protocol::OutcomeKind::Verified, Some(report)) => {
                    match Acceptance::establish(&self.contract, &self.locked_sha256, report) {
                        Ok(a) => Outcome::Verified(a),
                        Err(_) => Outcome::Error,
                    }
                }
                (kind, _) => crate::resume::unverified_outcome(kind, record.limit),
            };
            return Ok(RunResult {
                granted: self.budget.limits().clone(),
                outcome,
                record,
                used,
                last_report: self.last_report,
            });
        }
        if let Some(reason) = self.end_at_once.take() {
            return self.finish(Outcome::Error, reason);
        }
        let state = self.machine.state();
        self.record(Event::Resumed {
            reason: format!(
                "the runtime stopped in state {state}; resuming at step {}",
                restored.step
            ),
        })?;
        let mut context = restored.context;
        // The tools offered are this build's (they are part of the context).
        context.tools = self.parts.tools.specs();
        context.system = system_prompt(&self.contract, &self.locked_sha256, &context.tools);
        let mut phase = restored.phase;
        self.failed_repairs = restored.failed_repairs;
        self.cost_asked = restored.cost_asked;
        if let Some(n) = self.checkpoints.after_failed_repairs
            && n > 0
            && restored.rejection_unasked
            && restored.failed_repairs.is_multiple_of(n)
        {
            self.checkpoint_due = Some(format!(
                "verification rejected {} time(s)",
                restored.failed_repairs
            ));
        }
        if let Some((id, reason, deadline)) = restored.pending_checkpoint.clone() {
            // The runtime stopped while a person was asked: wait again.
            if let Some((outcome, why)) =
                self.checkpoint(&mut context, &reason, Some((id, deadline)))?
            {
                return self.finish(outcome, why);
            }
        }
        // Approvals the record shows: granted ones let their calls run; a
        // deny whose refusal was not recorded yet is recorded now; a pending
        // request is waited for again (it survives the restart).
        for call_id in &restored.approved {
            self.parts.tools.approve(call_id);
        }
        if let Phase::Act { turn, done } = &mut phase {
            for (call_id, rule, decision) in &restored.denied {
                if let Some(call) = turn.calls.iter().find(|c| &c.id == call_id).cloned() {
                    let obs =
                        self.record_denial(restored.step, &call, rule, decision, &mut context)?;
                    done.push((obs, None));
                }
            }
            if let Some(p) = &restored.pending_approval
                && let Some(call) = turn.calls.iter().find(|c| c.id == p.call_id).cloned()
            {
                let pending = Some((p.approval_id.clone(), p.deadline_ms));
                match self.seek_approval(restored.step, &call, &p.rule, pending)? {
                    ApprovalDecision::Approved => self.parts.tools.approve(&call.id),
                    ApprovalDecision::Cancelled => {
                        return self.finish(
                            Outcome::Cancelled,
                            "cancelled by request while awaiting approval".into(),
                        );
                    }
                    d => {
                        let obs = self.record_denial(
                            restored.step,
                            &call,
                            &p.rule,
                            d.as_str(),
                            &mut context,
                        )?;
                        done.push((obs, None));
                    }
                }
            }
        }
        if let (Some(int), Phase::Act { done, .. }) = (restored.interrupted, &mut phase)
            && let Some(obs) = self.settle_interrupted(&int, restored.step)?
        {
            context.push_observation(&obs);
            done.push((obs, None));
        }
        if matches!(phase, Phase::Plan) && self.machine.state() != TaskState::Planning {
            self.go(TaskState::Planning, format!("resumed from {state}"))?;
        }
        if let Phase::Act { turn, .. } = &phase {
            if self.machine.state() == TaskState::Planning {
                self.go(
                    TaskState::Acting,
                    format!(
                        "step {}: model proposed {} call(s)",
                        restored.step,
                        turn.calls.len()
                    ),
                )?;
            }
            self.parts.tools.begin_step();
        }
        let stop = match phase {
            Phase::End(outcome, reason) => Stop::Outcome(outcome, reason),
            phase => self.drive(context, restored.step, phase)?,
        };
        let Stop::Outcome(outcome, reason) = stop;
        self.finish(outcome, reason)
    }

    fn finish(mut self, outcome: Outcome, reason: String) -> Result<RunResult, DirectorError> {
        debug_assert!(
            !outcome.is_verified()
                || matches!(
                    self.machine.state(),
                    TaskState::Verifying | TaskState::Terminal
                ),
            "only verification can end a task verified"
        );
        let record = outcome.record(reason.clone());
        if self.machine.state() != TaskState::Terminal {
            self.go(TaskState::Terminal, format!("{record}: {reason}"))?;
        }
        let used = self.budget.used(self.parts.clock.now_ms());
        self.record(Event::Finished {
            outcome: record.clone(),
            used,
        })?;
        Ok(RunResult {
            granted: self.budget.limits().clone(),
            outcome,
            record,
            used,
            last_report: self.last_report,
        })
    }

    /// A call was in flight when the runtime stopped. Reads run again. A
    /// write or command runs again only if the workspace is exactly as it
    /// was before the call (so it had no effect yet, and commands have no
    /// network). Otherwise a write completed (the edit journal makes writes
    /// all-or-nothing) and a command's outcome is unknown: it is never run
    /// twice, and the model is told to inspect. `None` means: run it again.
    fn settle_interrupted(
        &mut self,
        int: &crate::resume::Interrupted,
        step: u32,
    ) -> Result<Option<Observation>, DirectorError> {
        let now = self.parts.tools.workspace_root().unwrap_or_default();
        if int.effect == loop_protocol::Effect::Pure || now == int.root_before {
            return Ok(None);
        }
        let call = &int.call;
        let mut obs = match int.effect {
            loop_protocol::Effect::Idempotent => Observation::ok(
                &call.id,
                &call.tool,
                "completed before the runtime stopped (the workspace changed); its output was not recorded",
                true,
            ),
            _ => Observation::error(
                &call.id,
                &call.tool,
                "outcome unknown: the runtime stopped while this ran and the workspace has changed since, so it ran at least in part; it was not run again. Inspect the workspace before relying on it.",
            ),
        };
        obs.changed = true;
        self.root = now.clone();
        self.record(Event::Observed {
            step,
            observation: obs.clone(),
            workspace_root: Some(now),
        })?;
        Ok(Some(obs))
    }

    /// Record runtime feedback and show it to the model.
    fn tell(
        &mut self,
        step: u32,
        context: &mut Context,
        text: String,
    ) -> Result<(), DirectorError> {
        self.record(Event::Feedback {
            step,
            text: text.clone(),
        })?;
        context.push_feedback(text);
        Ok(())
    }

    /// Ask the checker, if there is one, about accepted work. `Some(reasons)`
    /// is an objection (also when the checker cannot answer: fail closed).
    fn review(
        &mut self,
        report: &VerificationReport,
        attempt: u32,
    ) -> Result<Review, DirectorError> {
        let Some(reviewer) = self.reviewer.as_deref_mut() else {
            return Ok(Review::Approved);
        };
        let change = self.parts.tools.change_summary();
        let ctx =
            crate::review::review_context(&self.contract, &self.locked_sha256, report, &change);
        // The reserve exists for this call: it may spend it.
        let limits = match self.budget.call_limits(
            reviewer.estimate_prompt_tokens(&ctx),
            reviewer.max_output_tokens(),
            reviewer.price(),
            0,
        ) {
            Ok(l) => loop_protocol::CallLimits {
                time_left_ms: Some(self.budget.time_left_ms(self.parts.clock.now_ms())),
                ..l
            },
            Err((_, reason)) => {
                let reasons = format!("no budget left for the review: {reason}");
                self.record(Event::Reviewed {
                    attempt,
                    verdict: "object".into(),
                    reasons: reasons.clone(),
                    usage: loop_protocol::Usage::default(),
                })?;
                return Ok(Review::Objection(reasons));
            }
        };
        let reply = reviewer
            .next_turn(&ctx, limits)
            .unwrap_or_else(|e| ModelReply::Unavailable {
                error: e.to_string(),
                usage: loop_protocol::Usage::default(),
            });
        // A checker nobody can reach is not an objection the maker could
        // address: the task ends, naming it.
        if let ModelReply::Unavailable { error, usage } = &reply {
            self.budget.charge_review(usage);
            let info = reviewer.info();
            let reasons = format!(
                "the checker {}:{} could not be reached: {error}",
                info.provider, info.name
            );
            self.record(Event::Reviewed {
                attempt,
                verdict: "unreachable".into(),
                reasons: reasons.clone(),
                usage: *usage,
            })?;
            return Ok(Review::Unreachable(reasons));
        }
        let (verdict, usage) = crate::review::read_reply(&reply);
        self.budget.charge_review(&usage);
        let (name, reasons, objection) = match verdict {
            crate::review::Verdict::Approve(r) => ("approve", r, None),
            crate::review::Verdict::Object(r) => ("object", r.clone(), Some(r)),
        };
        self.record(Event::Reviewed {
            attempt,
            verdict: name.into(),
            reasons,
            usage,
        })?;
        Ok(objection.map_or(Review::Approved, Review::Objection))
    }

    /// The loop, as phases so a resumed task can enter it anywhere.
    /// Returns when the task must stop; the caller records the end.
    fn drive(
        &mut self,
        mut context: Context,
        mut step: u32,
        mut phase: Phase,
    ) -> Result<Stop, DirectorError> {
        loop {
            phase = match phase {
                Phase::End(outcome, reason) => return Ok(Stop::Outcome(outcome, reason)),
                Phase::Plan => self.plan(&mut context, &mut step)?,
                Phase::Act { turn, done } => self.act(&mut context, step, *turn, done)?,
                Phase::Verify { claim } => self.verify_phase(&mut context, step, claim)?,
                Phase::Decide { report, claim } => {
                    self.decide(&mut context, step, report, claim)?
                }
            };
        }
    }

    /// Decide whether another model turn may be spent, and ask for it.
    fn plan(&mut self, context: &mut Context, step: &mut u32) -> Result<Phase, DirectorError> {
        if self.parts.cancel.load(Ordering::SeqCst) {
            return Ok(Phase::End(
                Outcome::Cancelled,
                "cancelled by request".into(),
            ));
        }
        if let Some(threshold) = self.checkpoints.cost_usd_over
            && !self.cost_asked
            && self.budget.used(self.parts.clock.now_ms()).usd > threshold
        {
            self.cost_asked = true;
            self.checkpoint_due
                .get_or_insert(format!("spending crossed ${threshold:.2}"));
        }
        if let Some(reason) = self.checkpoint_due.take()
            && let Some((outcome, why)) = self.checkpoint(context, &reason, None)?
        {
            return Ok(Phase::End(outcome, why));
        }
        if let Some((kind, reason)) = self.budget.exhausted(self.parts.clock.now_ms()) {
            return Ok(Phase::End(Outcome::LimitReached(kind), reason));
        }
        // How much may this call spend? Refuse before spending if nothing fits.
        let limits = match self.budget.call_limits(
            self.parts.model.estimate_prompt_tokens(context),
            self.parts.model.max_output_tokens(),
            self.parts.model.price(),
            self.reserve_tokens,
        ) {
            // The call gives up when the task's time is up.
            Ok(l) => loop_protocol::CallLimits {
                time_left_ms: Some(self.budget.time_left_ms(self.parts.clock.now_ms())),
                ..l
            },
            Err((kind, reason)) => return Ok(Phase::End(Outcome::LimitReached(kind), reason)),
        };
        *step += 1;
        let step = *step;
        let context_sha256 = context.sha256().unwrap_or_default();
        let turn = match self.parts.model.next_turn(context, limits) {
            Err(e) => {
                return Ok(Phase::End(Outcome::Error, format!("model failed: {e}")));
            }
            Ok(ModelReply::NothingMore { reason }) => {
                self.record(Event::ModelSilent {
                    step,
                    reason: reason.clone(),
                })?;
                return Ok(Phase::End(
                    Outcome::Lost,
                    format!("the model stalled: {reason}"),
                ));
            }
            Ok(ModelReply::Unavailable { error, usage }) => {
                self.budget.charge_turn(&usage);
                self.record(Event::ModelFailed {
                    step,
                    error: error.clone(),
                    usage,
                })?;
                return Ok(Phase::End(
                    Outcome::Error,
                    format!("model unavailable: {error}"),
                ));
            }
            Ok(ModelReply::Malformed {
                error,
                excerpt,
                usage,
            }) => {
                // It cost what it cost; it goes back as a typed observation.
                self.budget.charge_turn(&usage);
                self.record(Event::ModelMalformed {
                    step,
                    context_sha256,
                    error: error.clone(),
                    excerpt,
                    usage,
                })?;
                let text = format!(
                    "[malformed answer] Your last answer could not be used: {error}. \
                     Answer with tool calls only, in the format described."
                );
                self.tell(step, context, text)?;
                match self.progress.malformed(step, &error, &self.root) {
                    Verdict::Stop(pattern) => {
                        return Ok(Phase::End(Outcome::Lost, format!("no progress: {pattern}")));
                    }
                    Verdict::Nudge(pattern) => {
                        let text = format!(
                            "Stall detected: {pattern}. Answering the same way again will end the task as lost."
                        );
                        self.tell(step, context, text)?;
                    }
                    Verdict::Ok => {}
                }
                self.go(TaskState::Acting, format!("step {step}: malformed answer"))?;
                self.go(
                    TaskState::Planning,
                    "malformed answer returned to the model",
                )?;
                return Ok(Phase::Plan);
            }
            Ok(ModelReply::Turn(turn)) => turn,
        };
        self.budget.charge_turn(&turn.usage);
        self.record(Event::ModelTurn {
            step,
            context_sha256,
            thought: turn.thought.clone(),
            calls: turn.calls.clone(),
            usage: turn.usage,
        })?;
        context.push_turn(turn.thought.clone(), turn.calls.clone());
        self.go(
            TaskState::Acting,
            format!("step {step}: model proposed {} call(s)", turn.calls.len()),
        )?;
        self.parts.tools.begin_step();
        if turn.calls.is_empty() {
            let text = "No tool call was proposed. Act with a tool, or call `finish` when the checks should pass.".to_string();
            self.tell(step, context, text)?;
        }
        Ok(Phase::Act {
            turn: Box::new(turn),
            done: Vec::new(),
        })
    }

    /// Execute the turn's calls not yet observed (`done` holds those that were,
    /// for a resumed step), then judge progress and decide on verification.
    fn act(
        &mut self,
        context: &mut Context,
        step: u32,
        turn: Turn,
        done: Vec<(Observation, Option<Control>)>,
    ) -> Result<Phase, DirectorError> {
        let mut finish_claim = None;
        let mut changed = done.iter().any(|(o, _)| o.changed);
        let mut observations: Vec<Observation> = Vec::new();
        for (o, control) in &done {
            observations.push(o.clone());
            if let Some(Control::Finish { summary }) = control {
                finish_claim = Some(summary.clone());
            }
        }
        if finish_claim.is_none() {
            for call in turn.calls.iter().skip(done.len()) {
                if self.parts.cancel.load(Ordering::SeqCst) {
                    return Ok(Phase::End(
                        Outcome::Cancelled,
                        "cancelled by request".into(),
                    ));
                }
                if let Some(rule) = self.parts.tools.needs_approval(call) {
                    match self.seek_approval(step, call, &rule, None)? {
                        ApprovalDecision::Approved => self.parts.tools.approve(&call.id),
                        ApprovalDecision::Cancelled => {
                            return Ok(Phase::End(
                                Outcome::Cancelled,
                                "cancelled by request while awaiting approval".into(),
                            ));
                        }
                        d => {
                            let obs = self.record_denial(step, call, &rule, d.as_str(), context)?;
                            observations.push(obs);
                            continue;
                        }
                    }
                }
                // The intent is durable before the call runs.
                self.record(Event::Intent {
                    step,
                    call_id: call.id.clone(),
                    tool: call.tool.clone(),
                    effect: self.parts.tools.effect(call),
                    root_before: self.root.clone(),
                })?;
                let mut outcome = match self.parts.tools.execute(call) {
                    Ok(o) => o,
                    Err(e) => {
                        return Ok(Phase::End(
                            Outcome::Error,
                            format!("tool runtime failed: {e}"),
                        ));
                    }
                };
                // Recovery: a failure for a passing reason is retried, with
                // backoff, up to the cap; each retry is recorded.
                let mut attempt = 0;
                while attempt < self.checkpoints.retry_transient
                    && self.parts.tools.transient(&outcome.observation)
                {
                    attempt += 1;
                    let wait = self
                        .checkpoints
                        .retry_base_ms
                        .saturating_mul(1 << (attempt - 1).min(10));
                    self.record(Event::Recovery {
                        step,
                        policy: "retry".into(),
                        call_id: call.id.clone(),
                        attempt,
                        detail: format!(
                            "transient failure, retried after {wait} ms: {}",
                            outcome
                                .observation
                                .content
                                .lines()
                                .next()
                                .unwrap_or_default()
                        ),
                    })?;
                    self.parts.clock.pause(wait);
                    outcome = match self.parts.tools.execute(call) {
                        Ok(o) => o,
                        Err(e) => {
                            return Ok(Phase::End(
                                Outcome::Error,
                                format!("tool runtime failed: {e}"),
                            ));
                        }
                    };
                }
                let workspace_root = if outcome.observation.changed {
                    changed = true;
                    let root = self.parts.tools.workspace_root().ok();
                    if let Some(r) = &root {
                        self.root = r.clone();
                    }
                    root
                } else {
                    None
                };
                observations.push(outcome.observation.clone());
                self.record(Event::Observed {
                    step,
                    observation: outcome.observation.clone(),
                    workspace_root,
                })?;
                context.push_observation(&outcome.observation);
                if let Some(Control::Finish { summary }) = outcome.control {
                    finish_claim = Some(summary);
                    // Calls after `finish` in the same turn are not executed.
                    break;
                }
            }
        }

        // Is the loop getting anywhere? Nudge once, then stop as lost.
        let mut verdict = self.progress.step(&turn.calls, &observations, &self.root);
        if verdict == Verdict::Ok && finish_claim.is_some() {
            verdict = self.progress.claim(&self.root);
        }
        match verdict {
            Verdict::Ok => {}
            Verdict::Stop(pattern) => {
                return Ok(Phase::End(Outcome::Lost, format!("no progress: {pattern}")));
            }
            Verdict::Nudge(pattern) => {
                let text = format!(
                    "Stall detected: {pattern}. Doing the same again will end the task as lost; change approach (read the failing evidence, try something different)."
                );
                self.tell(step, context, text)?;
                if finish_claim.is_some() {
                    // A claim on the rejected workspace is not verified again.
                    self.go(TaskState::Planning, format!("stall nudge: {pattern}"))?;
                    return Ok(Phase::Plan);
                }
            }
        }

        // Verify on a claim (or on change, by policy); otherwise plan again.
        let trigger = match (&finish_claim, self.policy) {
            (Some(summary), _) => Some(format!("model claimed finish: {summary}")),
            (None, VerifyPolicy::OnFinishOrChange) if changed => {
                Some("the workspace changed; checking the contract".to_string())
            }
            _ => None,
        };
        let Some(trigger) = trigger else {
            self.go(TaskState::Planning, "observations returned to the model")?;
            return Ok(Phase::Plan);
        };
        self.go(TaskState::Verifying, trigger)?;
        Ok(Phase::Verify {
            claim: finish_claim.is_some(),
        })
    }

    /// Run one verification pass.
    fn verify_phase(
        &mut self,
        _context: &mut Context,
        _step: u32,
        claim: bool,
    ) -> Result<Phase, DirectorError> {
        let attempt = self.budget.charge_verification();
        let report = match self
            .parts
            .verifier
            .verify(&self.contract, &self.locked_sha256, attempt)
        {
            Ok(r) => r,
            Err(e) => {
                return Ok(Phase::End(Outcome::Error, format!("verifier failed: {e}")));
            }
        };
        let verdict = Acceptance::establish(&self.contract, &self.locked_sha256, &report);
        self.record(Event::Verified {
            report: report.clone(),
            accepted: verdict.is_ok(),
            rejection: verdict.as_ref().err().map(|r| r.to_string()),
        })?;
        Ok(Phase::Decide {
            report: Box::new(report),
            claim,
        })
    }

    /// Act on a recorded verification: accept (after the checker, if any),
    /// or return the evidence to the model.
    fn decide(
        &mut self,
        context: &mut Context,
        step: u32,
        report: Box<VerificationReport>,
        claim: bool,
    ) -> Result<Phase, DirectorError> {
        let attempt = report.attempt;
        self.last_report = Some((*report).clone());
        match Acceptance::establish(&self.contract, &self.locked_sha256, &report) {
            Ok(acceptance) => {
                let objection = match self.review(&report, attempt)? {
                    Review::Approved => None,
                    Review::Objection(o) => Some(o),
                    Review::Unreachable(why) => {
                        return Ok(Phase::End(
                            Outcome::Error,
                            format!(
                                "every check passed, but {why}; the work is not accepted without its review"
                            ),
                        ));
                    }
                };
                if let Some(objection) = objection {
                    if attempt >= self.contract.limits.max_verifications {
                        return Ok(Phase::End(
                            Outcome::Failed,
                            format!(
                                "the checker objected at verification {attempt}, the limit: {objection}"
                            ),
                        ));
                    }
                    let text = format!(
                        "Every check passed, but the checker objected:\n{objection}\nAddress it, then call `finish` again."
                    );
                    self.tell(step + 1, context, text)?;
                    self.go(
                        TaskState::Planning,
                        "the checker objected; its reasons returned to the model",
                    )?;
                    return Ok(Phase::Plan);
                }
                let reason = format!(
                    "all {} criteria passed on fresh snapshots (attempt {attempt})",
                    self.contract.criteria.len()
                );
                Ok(Phase::End(Outcome::Verified(acceptance), reason))
            }
            Err(rejection) => {
                self.progress.rejected_at(&report.manifest_root);
                self.failed_repairs += 1;
                if let Some(n) = self.checkpoints.after_failed_repairs
                    && n > 0
                    && self.failed_repairs.is_multiple_of(n)
                {
                    self.checkpoint_due = Some(format!(
                        "verification rejected {} time(s): {rejection}",
                        self.failed_repairs
                    ));
                }
                if matches!(
                    rejection,
                    loop_protocol::Rejection::ContractChanged { .. }
                        | loop_protocol::Rejection::WrongContract { .. }
                ) {
                    return Ok(Phase::End(Outcome::Error, rejection.to_string()));
                }
                if attempt >= self.contract.limits.max_verifications {
                    return Ok(Phase::End(
                        Outcome::Failed,
                        format!("verification rejected {attempt} time(s), the limit: {rejection}"),
                    ));
                }
                // Without a finish claim a failing check is not news
                // to report as a rejection; it still goes back as evidence.
                let text = rejection_feedback(&report, &rejection, claim);
                self.tell(step + 1, context, text)?;
                self.go(
                    TaskState::Planning,
                    format!("verification rejected: {rejection}; evidence returned to the model"),
                )?;
                Ok(Phase::Plan)
            }
        }
    }
}

/// When to pause for a person, and how transient failures are retried.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Checkpoints {
    /// Ask after every N rejected verifications (failed repairs).
    pub after_failed_repairs: Option<u32>,
    /// Ask once when spending passes this many dollars.
    pub cost_usd_over: Option<f64>,
    /// Unanswered this long, a checkpoint stops the task.
    pub timeout_secs: u64,
    /// Retries for a call that failed for a passing reason (0: none).
    pub retry_transient: u32,
    /// The first retry's wait; each later one doubles.
    pub retry_base_ms: u64,
    /// `loop apply` needs a person's `--yes` after reviewing the change.
    pub before_apply: bool,
    /// Time spent waiting for a person (an approval, a checkpoint) is not
    /// charged to the wall-time budget; the wait is still bounded by the
    /// approval timeout.
    pub pause_clock: bool,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints {
            after_failed_repairs: None,
            cost_usd_over: None,
            timeout_secs: 3600,
            retry_transient: 2,
            retry_base_ms: 200,
            before_apply: false,
            pause_clock: false,
        }
    }
}

/// More budget for a task that reached a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Extension {
    /// More model turns.
    pub add_steps: u32,
    /// More tokens.
    pub add_tokens: u64,
    /// More dollars.
    pub add_usd: f64,
    /// More wall-clock seconds.
    pub add_secs: u64,
}

/// Where the loop is (a resumed task may enter at any of these).
pub(crate) enum Phase {
    /// Ask the model for a turn.
    Plan,
    /// Execute a turn's calls; `done` were already executed and observed.
    Act {
        turn: Box<Turn>,
        done: Vec<(Observation, Option<Control>)>,
    },
    /// Run verification.
    Verify { claim: bool },
    /// Act on a recorded verification.
    Decide {
        report: Box<VerificationReport>,
        claim: bool,
    },
    /// Stop.
    End(Outcome, String),
}
