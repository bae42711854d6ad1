//! The Director: the loop, top to bottom. Decide, call, record.
//!
//! It owns the state machine and the budgets, asks the model for turns,
//! passes calls through the tools' authority choke point, sends every claim
//! of completion to the verifier, and ends the task only on evidence (or on
//! a limit, a stall, a cancel or an error). Every decision is recorded in
//! the ledger before the next step begins.

mod approvals;

pub use approvals::Checkpoints;

use crate::feedback::rejection_feedback;
use crate::progress::{ProgressConfig, StallVerdict};
use crate::prompt::system_prompt;
use crate::state::{Interrupted, Phase, RecordError, State};
use crate::traits::{
    ApprovalDecision, Approvals, BoundaryError, Clock, Ledger, Model, Observer, Tools, Verifier,
};
use loop_protocol::{
    Acceptance, BudgetUse, Contract, Control, Event, ModelReply, Observation, Outcome, OutcomeKind,
    OutcomeRecord, RuntimeInfo, TaskState, ToolCall, VerificationReport,
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
    /// The record does not hold together.
    #[error("cannot resume: {0}")]
    Record(#[from] RecordError),
    /// A transition the state machine refuses (a bug in the Director).
    #[error(transparent)]
    Transition(#[from] crate::machine::InvalidTransition),
    /// A fault (the claim could not be renewed, the store is unreachable)
    /// stopped the run: nothing was decided, nothing cut short was
    /// recorded, and the task is left to be resumed.
    #[error("interrupted, not ended: {0}")]
    Interrupted(String),
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
    /// The task as its recorded events made it (see [`State::apply`]).
    state: State,
    /// Tokens never handed to the maker (kept for review and feedback).
    reserve_tokens: u64,
    /// The checker, if one is configured.
    reviewer: Option<&'a mut dyn Model>,
    /// Stall thresholds.
    progress_config: ProgressConfig,
    /// When to pause for a person.
    checkpoints: Checkpoints,
    /// Where approvals are asked (none: a `prompt` is denied, fail closed).
    approvals: Option<&'a mut dyn Approvals>,
    /// How long a pending approval waits before it is a deny.
    approval_timeout_ms: u64,
    /// Milliseconds paused for a person, shared with the sandbox.
    clock_pause: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// End the task at once, in error, for this reason (its workspace is gone).
    end_at_once: Option<String>,
    /// The setup the task's workspace got, recorded in the genesis.
    setup: Option<Box<loop_protocol::SetupRecord>>,
    /// How the contract was drafted, recorded in the genesis.
    drafting: Option<Box<loop_protocol::DraftingRecord>>,
    /// The project's guidance files: (name, text, digest).
    guidance: Vec<(String, String, String)>,
    /// The files given with the task (path, digest).
    inputs: Vec<loop_protocol::KeyedFile>,
    /// The images among them, with their bytes, shown with the
    /// instruction to a model that takes images.
    input_images: Vec<loop_protocol::observation::Image>,
    /// The project's checks, as the baseline judged them.
    project_checks: Vec<loop_protocol::StackCheckRecord>,
    /// What the person who approved a call said (call id, words), for its
    /// result.
    approval_note: Option<(String, String)>,
    /// What started the task, recorded in the genesis.
    trigger: Option<Box<loop_protocol::TriggerRecord>>,
    /// Raised by a fault, never by a person or a limit (see
    /// [`Director::with_interrupt`]).
    interrupted: Option<&'a AtomicBool>,
}

/// Tokens kept for the checker's prompt, beyond its completion.
const REVIEW_PROMPT_RESERVE: u64 = 8_000;

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
        let task_id = task_id.into();
        let state = State::new(
            task_id.clone(),
            locked_sha256.clone(),
            contract.limits.clone(),
            ProgressConfig::default(),
            None,
            parts.clock.now_ms(),
        );
        Ok(Director {
            task_id,
            contract,
            locked_sha256,
            policy,
            parts,
            state,
            progress_config: ProgressConfig::default(),
            checkpoints: Checkpoints::default(),
            reserve_tokens: 0,
            reviewer: None,
            approvals: None,
            approval_timeout_ms: 3_600_000,
            clock_pause: None,
            end_at_once: None,
            setup: None,
            drafting: None,
            guidance: Vec::new(),
            inputs: Vec::new(),
            input_images: Vec::new(),
            project_checks: Vec::new(),
            approval_note: None,
            trigger: None,
            interrupted: None,
        })
    }

    /// Stop at once, deciding nothing, when `flag` is raised: a fault
    /// (a claim that cannot be renewed, a store that is gone) is not a
    /// decision. Whatever was cut short by it (a command, a check, a model
    /// call) is not recorded; the run returns [`DirectorError::Interrupted`]
    /// and the task stays interrupted for a runtime to resume. (The caller
    /// also stops what runs: the commands' and the model's cancel.)
    pub fn with_interrupt(mut self, flag: &'a AtomicBool) -> Self {
        self.interrupted = Some(flag);
        self
    }

    /// [`DirectorError::Interrupted`] once a fault was raised.
    fn fault(&self) -> Result<(), DirectorError> {
        match self.interrupted {
            Some(f) if f.load(Ordering::SeqCst) => Err(DirectorError::Interrupted(
                "the run was stopped before it decided (a SIGTERM, or the task's claim could not be renewed: the store is unreachable or another runtime holds it); `loop resume` goes on".into(),
            )),
            _ => Ok(()),
        }
    }

    /// A state before any event, with this Director's settings, whose wall
    /// clock started `elapsed_ms` ago.
    fn fresh_state(&self, elapsed_ms: u64) -> State {
        State::new(
            self.task_id.clone(),
            self.locked_sha256.clone(),
            self.contract.limits.clone(),
            self.progress_config.clone(),
            self.checkpoints.cost_usd_over,
            self.parts.clock.now_ms().saturating_sub(elapsed_ms),
        )
    }

    /// Pause for a person at these checkpoints (the Loopfile's `checkpoints`).
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = checkpoints;
        self.state = self.fresh_state(0);
        self
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
    pub fn with_progress(mut self, config: ProgressConfig) -> Self {
        self.progress_config = config;
        self.state = self.fresh_state(0);
        self
    }

    /// Ask `approvals` when a call needs a person; unanswered after
    /// `timeout_secs`, the request is a deny.
    pub fn with_approvals(mut self, approvals: &'a mut dyn Approvals, timeout_secs: u64) -> Self {
        self.approvals = Some(approvals);
        self.approval_timeout_ms = timeout_secs.saturating_mul(1000);
        self
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

    /// The setup the task's workspace got (run or taken from a cached
    /// layer), recorded in the ledger's genesis.
    pub fn with_setup(mut self, setup: loop_protocol::SetupRecord) -> Self {
        self.setup = Some(Box::new(setup));
        self
    }

    /// What started the task (a webhook, a schedule), recorded in the
    /// ledger's genesis.
    pub fn with_trigger(mut self, trigger: loop_protocol::TriggerRecord) -> Self {
        self.trigger = Some(Box::new(trigger));
        self
    }

    /// How the contract was drafted from the instruction, recorded in the
    /// ledger's genesis.
    pub fn with_drafting(mut self, drafting: loop_protocol::DraftingRecord) -> Self {
        self.drafting = Some(Box::new(drafting));
        self
    }

    /// The project's guidance files (`LOOP.md`, `AGENTS.md`): (name,
    /// text), shown to the model after the contract, bounded and marked as
    /// the project's, their digests in the ledger's genesis.
    pub fn with_guidance(mut self, files: Vec<(String, String)>) -> Self {
        self.guidance = files
            .into_iter()
            .map(|(n, t)| {
                let d = loop_protocol::hash::sha256_hex(t.as_bytes());
                (n, t, d)
            })
            .collect();
        self
    }

    /// The files given with the task, put in its workspace before it
    /// started: their paths and digests, recorded in the ledger's genesis.
    pub fn with_inputs(mut self, inputs: Vec<loop_protocol::KeyedFile>) -> Self {
        self.inputs = inputs;
        self
    }

    /// The images given with the task (each also among the inputs, by its
    /// digest): shown with the instruction to a model that takes images,
    /// named as not shown to one that does not.
    pub fn with_input_images(mut self, images: Vec<loop_protocol::observation::Image>) -> Self {
        self.input_images = images;
        self
    }

    /// The project's checks and what the baseline said of each, recorded
    /// in the ledger's genesis.
    pub fn with_project_checks(mut self, checks: Vec<loop_protocol::StackCheckRecord>) -> Self {
        self.project_checks = checks;
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

    /// Record `event` and apply it to the state: nothing changes the
    /// state that is not on the record.
    fn record(&mut self, event: Event) -> Result<(), DirectorError> {
        self.parts
            .ledger
            .append(&event)
            .map_err(DirectorError::Ledger)?;
        self.state.apply(&event)?;
        self.parts.observer.on_event(&event);
        Ok(())
    }

    fn go(&mut self, to: TaskState, reason: impl Into<String>) -> Result<(), DirectorError> {
        let event = self.state.machine.clone().go(to, reason)?;
        self.record(event)
    }

    /// Record runtime feedback; the model sees it in its context.
    fn tell(&mut self, step: u32, text: String) -> Result<(), DirectorError> {
        self.record(Event::Feedback { step, text })
    }

    /// The guidance files as the model is shown them, for the record: a
    /// file its kind's budget leaves out is not there; one it cuts says
    /// how many bytes were shown.
    fn guidance_given(&self) -> Vec<loop_protocol::KeyedFile> {
        let texts: Vec<(String, String)> = self
            .guidance
            .iter()
            .map(|(n, t, _)| (n.clone(), t.clone()))
            .collect();
        let shown = crate::prompt::shown_bytes(&texts);
        self.guidance
            .iter()
            .zip(shown)
            // (An empty file is shown as empty: it is given.)
            .filter(|((_, t, _), shown)| *shown > 0 || t.is_empty())
            .map(|((n, t, d), shown)| loop_protocol::KeyedFile {
                path: n.clone(),
                sha256: d.clone(),
                shown_bytes: (shown < t.len()).then_some(shown as u64),
            })
            .collect()
    }

    /// The tools this build offers and the system prompt naming them (they
    /// are part of the context, and not on the record).
    fn offer_tools(&mut self) {
        let tools = self.parts.tools.specs();
        let guidance: Vec<(String, String)> = self
            .guidance
            .iter()
            .map(|(n, t, _)| (n.clone(), t.clone()))
            .collect();
        self.state.context.system = system_prompt(&self.contract, &self.locked_sha256, &tools)
            + &crate::prompt::guidance_section(&guidance);
        self.state.context.tools = tools;
        let images = self.parts.model.accepts_images();
        self.parts.tools.set_images(images);
        // The images given with the task go with the instruction (not on
        // the record: their digests are in its first entry).
        if !self.input_images.is_empty()
            && let Some(loop_protocol::Message::User {
                content,
                images: shown,
            }) = self.state.context.messages.first_mut()
        {
            if images {
                *shown = self.input_images.clone();
            } else if !content.contains("(Images were given with the task") {
                let names: Vec<&str> = self.input_images.iter().map(|i| i.path.as_str()).collect();
                content.push_str(&format!(
                    "\n\n(Images were given with the task and are in the workspace: {}. The model driving this task takes no images, so they are not shown.)",
                    names.join(", ")
                ));
            }
        }
    }

    /// Run the task to a terminal outcome.
    pub fn run(mut self) -> Result<RunResult, DirectorError> {
        let baseline_root = self.parts.tools.workspace_root();
        let setup = self.setup.take();
        let drafting = self.drafting.take();
        let project_checks = std::mem::take(&mut self.project_checks);
        let trigger = self.trigger.take();
        let inputs = std::mem::take(&mut self.inputs);
        self.record(Event::TaskStarted {
            task_id: self.task_id.clone(),
            contract_sha256: self.locked_sha256.clone(),
            contract: Box::new(self.contract.clone()),
            limits: self.contract.limits.clone(),
            model: self.parts.model.info(),
            checker: self.reviewer.as_ref().map(|r| Box::new(r.info())),
            runtime: RuntimeInfo::current(),
            baseline_root: baseline_root.as_ref().cloned().unwrap_or_default(),
            setup,
            drafting,
            guidance: self.guidance_given(),
            inputs,
            project_checks,
            trigger,
        })?;
        let phase = match (baseline_root, self.end_at_once.take()) {
            (Err(e), _) => Phase::End(Outcome::Error, format!("cannot read the workspace: {e}")),
            (Ok(_), Some(reason)) => Phase::End(Outcome::Error, reason),
            (Ok(_), None) => {
                self.go(TaskState::Planning, "task started: contract locked")?;
                self.offer_tools();
                Phase::Plan
            }
        };
        self.drive(phase)
    }

    /// Continue a task whose ledger so far is `history` (its events, in
    /// order) and which had used `elapsed_ms` of wall time. The state is
    /// rebuilt by applying the record; an interrupted step is finished
    /// (calls that may have had effects are not run twice); then the loop
    /// goes on. With an empty history this is [`Director::run`].
    pub fn resume(self, history: &[Event], elapsed_ms: u64) -> Result<RunResult, DirectorError> {
        if history.is_empty() {
            return self.run();
        }
        self.continue_from(history, elapsed_ms, None)
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
        self.continue_from(history, elapsed_ms, Some(extension))
    }

    fn continue_from(
        mut self,
        history: &[Event],
        elapsed_ms: u64,
        extension: Option<Extension>,
    ) -> Result<RunResult, DirectorError> {
        self.state = self.fresh_state(elapsed_ms);
        if history.is_empty() {
            return Err(RecordError::NotStarted.into());
        }
        for event in history {
            self.state.apply(event)?;
        }
        self.parts.model.resume_at(self.state.turns);
        if let Some(ext) = extension {
            self.reopen(ext)?;
        }
        if let Some((record, used)) = self.state.finished.clone() {
            // It ended; only the receipt was missing.
            let outcome = self.state.recorded_outcome(&self.contract, &record);
            return Ok(self.result(outcome, record, used));
        }
        if let Some(reason) = self.end_at_once.take() {
            return self.finish(Outcome::Error, reason);
        }
        let state = self.state.machine.state();
        let step = self.state.step;
        let phase = self.state.resume_phase(&self.contract)?;
        self.record(Event::Resumed {
            reason: format!("the runtime stopped in state {state}; resuming at step {step}"),
        })?;
        self.offer_tools();
        if let Some(p) = self.state.pending_checkpoint.clone()
            && let Some((outcome, why)) =
                self.checkpoint(&p.reason, Some((p.approval_id, p.deadline_ms)))?
        {
            // The runtime stopped while a person was asked: asked again.
            return self.finish(outcome, why);
        }
        if let Some((outcome, why)) = self.settle_approvals()? {
            return self.finish(outcome, why);
        }
        if let (Some(int), Phase::Act) = (self.state.take_interrupted(), &phase) {
            self.settle_interrupted(&int, step)?;
        }
        if matches!(phase, Phase::Plan) && self.state.machine.state() != TaskState::Planning {
            self.go(TaskState::Planning, format!("resumed from {state}"))?;
        }
        if let Phase::Act = phase {
            if self.state.machine.state() == TaskState::Planning {
                let calls = self.state.turn().map_or(0, |t| t.calls.len());
                self.go(
                    TaskState::Acting,
                    format!("step {step}: model proposed {calls} call(s)"),
                )?;
            }
            self.parts.tools.begin_step();
        }
        self.drive(phase)
    }

    /// Record the grant of `ext` to a task that reached a limit and move it
    /// out of terminal (recorded, and only ever here).
    fn reopen(&mut self, ext: Extension) -> Result<(), DirectorError> {
        match &self.state.finished {
            Some((record, _)) if record.kind == OutcomeKind::LimitReached => {}
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
        self.record(Event::Transition {
            n: self.state.machine.taken() + 1,
            from: TaskState::Terminal,
            to: TaskState::Planning,
            reason: format!(
                "budget extended: +{} steps, +{} tokens, +${:.2}, +{} s",
                ext.add_steps, ext.add_tokens, ext.add_usd, ext.add_secs
            ),
        })
    }

    fn result(&self, outcome: Outcome, record: OutcomeRecord, used: BudgetUse) -> RunResult {
        RunResult {
            granted: self.state.budget.limits().clone(),
            outcome,
            record,
            used,
            last_report: self.state.last_report.clone(),
        }
    }

    fn finish(mut self, outcome: Outcome, reason: String) -> Result<RunResult, DirectorError> {
        debug_assert!(
            !outcome.is_verified()
                || matches!(
                    self.state.machine.state(),
                    TaskState::Verifying | TaskState::Terminal
                ),
            "only verification can end a task verified"
        );
        let record = outcome.record(reason.clone());
        if self.state.machine.state() != TaskState::Terminal {
            // The stored name leads (a resume reads the end back from
            // it); the screen says it in words.
            self.go(TaskState::Terminal, format!("{record}: {reason}"))?;
        }
        let used = self.state.budget.used(self.parts.clock.now_ms());
        self.record(Event::Finished {
            outcome: record.clone(),
            used,
        })?;
        Ok(self.result(outcome, record, used))
    }

    /// A call was in flight when the runtime stopped. Reads run again. A
    /// write, or a command whose effects are staged and have no network,
    /// runs again only if the workspace is exactly as it was before the
    /// call (so it had no effect yet); otherwise it completed (writes and
    /// staged commits are all-or-nothing). A call with effects beyond the
    /// workspace is never run twice: its outcome is unknown, and the model
    /// is told to inspect. Nothing recorded means: run it again.
    fn settle_interrupted(&mut self, int: &Interrupted, step: u32) -> Result<(), DirectorError> {
        let now = self.parts.tools.workspace_root().unwrap_or_default();
        // A call with effects beyond the workspace (a command with network,
        // or one not staged) may have had them whatever the workspace
        // says: it is never run again.
        let beyond = int.effect == loop_protocol::Effect::AtMostOnce;
        // A child task is found again by the call that started it, where
        // it stands (running on, ended, merged or not): always run again.
        if int.call.tool == loop_protocol::ToolName::Delegate.as_str() {
            return Ok(());
        }
        if int.effect == loop_protocol::Effect::Pure || (now == int.root_before && !beyond) {
            return Ok(());
        }
        let call = &int.call;
        let mut obs = match int.effect {
            _ if now == int.root_before => Observation::error(
                &call.id,
                &call.tool,
                if self.parts.tools.rebuilt() {
                    "outcome unknown: the runtime that ran this stopped, and the task moved to a workspace rebuilt from the record; what it did outside the workspace cannot be known, so it was not run again. Check its effects before relying on them."
                } else {
                    "outcome unknown: the runtime stopped while this ran (or was about to run it); it left the workspace as it was, but what it did outside the workspace cannot be known, so it was not run again. Check its effects before relying on them."
                },
            ),
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
        obs.changed = now != int.root_before;
        self.record(Event::Observed {
            step,
            observation: obs,
            workspace_root: Some(now),
        })
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
        let limits = match self.state.budget.call_limits(
            reviewer.estimate_prompt_tokens(&ctx),
            reviewer.max_output_tokens(),
            reviewer.price(),
            0,
        ) {
            Ok(l) => loop_protocol::CallLimits {
                time_left_ms: Some(self.state.budget.time_left_ms(self.parts.clock.now_ms())),
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
        let reply = reviewer.next_turn(&ctx, limits);
        // A checker nobody can reach is not an objection the maker could
        // address: the task ends, naming it.
        if let ModelReply::Unavailable { error, usage } = &reply {
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
        let (name, reasons, objection) = match verdict {
            crate::review::ReviewVerdict::Approve(r) => ("approve", r, None),
            crate::review::ReviewVerdict::Object(r) => ("object", r.clone(), Some(r)),
        };
        self.record(Event::Reviewed {
            attempt,
            verdict: name.into(),
            reasons,
            usage,
        })?;
        Ok(objection.map_or(Review::Approved, Review::Objection))
    }

    /// The loop, as phases so a resumed task can enter it anywhere; it
    /// records the end.
    fn drive(mut self, mut phase: Phase) -> Result<RunResult, DirectorError> {
        loop {
            phase = match phase {
                Phase::End(outcome, reason) => return self.finish(outcome, reason),
                Phase::Plan => self.plan()?,
                Phase::Act => self.act()?,
                Phase::Verify { claim } => self.verify_phase(claim)?,
                Phase::Decide { report, claim } => self.decide(report, claim)?,
            };
        }
    }

    /// Decide whether another model turn may be spent, and ask for it.
    fn plan(&mut self) -> Result<Phase, DirectorError> {
        self.fault()?;
        if self.parts.cancel.load(Ordering::SeqCst) {
            return Ok(Phase::End(
                Outcome::Cancelled,
                "cancelled by request".into(),
            ));
        }
        if let Some(reason) = self.checkpoint_due()
            && let Some((outcome, why)) = self.checkpoint(&reason, None)?
        {
            return Ok(Phase::End(outcome, why));
        }
        let now = self.parts.clock.now_ms();
        if let Some((kind, reason)) = self.state.budget.exhausted(now) {
            return Ok(Phase::End(Outcome::LimitReached(kind), reason));
        }
        // How much may this call spend? Refuse before spending if nothing fits.
        let limits = match self.state.budget.call_limits(
            self.parts.model.estimate_prompt_tokens(&self.state.context),
            self.parts.model.max_output_tokens(),
            self.parts.model.price(),
            self.reserve_tokens,
        ) {
            // The call gives up when the task's time is up.
            Ok(l) => loop_protocol::CallLimits {
                time_left_ms: Some(self.state.budget.time_left_ms(now)),
                ..l
            },
            Err((kind, reason)) => return Ok(Phase::End(Outcome::LimitReached(kind), reason)),
        };
        let step = self.state.step + 1;
        let context_sha256 = self
            .state
            .digest
            .sha256(&self.state.context)
            .unwrap_or_default();
        self.parts
            .observer
            .live(&loop_protocol::Live::Thinking { step });
        let reply = self.parts.model.next_turn(&self.state.context, limits);
        // A call a fault aborted is not the model's failure.
        self.fault()?;
        let turn = match reply {
            ModelReply::NothingMore { reason } => {
                self.record(Event::ModelSilent {
                    step,
                    reason: reason.clone(),
                })?;
                return Ok(Phase::End(
                    Outcome::Lost,
                    format!("the model stalled: {reason}"),
                ));
            }
            ModelReply::Unavailable { error, usage } => {
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
            ModelReply::Malformed {
                error,
                excerpt,
                usage,
            } => return self.malformed(step, context_sha256, error, excerpt, usage),
            ModelReply::Turn(turn) => turn,
        };
        let calls = turn.calls.len();
        self.record(Event::ModelTurn {
            step,
            context_sha256,
            thought: turn.thought,
            calls: turn.calls,
            usage: turn.usage,
        })?;
        self.go(
            TaskState::Acting,
            format!("step {step}: model proposed {calls} call(s)"),
        )?;
        self.parts.tools.begin_step();
        if calls == 0 {
            let text = "No tool call was proposed. Act with a tool, or call `finish` when the checks should pass.".to_string();
            self.tell(step, text)?;
        }
        Ok(Phase::Act)
    }

    /// An answer that could not be used: it cost what it cost, and goes
    /// back to the model as a typed observation; repeated, it is a stall.
    fn malformed(
        &mut self,
        step: u32,
        context_sha256: String,
        error: String,
        excerpt: String,
        usage: loop_protocol::Usage,
    ) -> Result<Phase, DirectorError> {
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
        self.tell(step, text)?;
        let verdict = self.state.malformed_verdict.clone();
        if let Stall::Stop(end) = self.stall(
            step,
            verdict,
            "Answering the same way again will end the task as lost.",
        )? {
            return Ok(end);
        }
        self.go(TaskState::Acting, format!("step {step}: malformed answer"))?;
        self.go(
            TaskState::Planning,
            "malformed answer returned to the model",
        )?;
        Ok(Phase::Plan)
    }

    /// Execute the turn's calls not yet observed (a resumed step may have
    /// some), then judge progress and decide on verification.
    fn act(&mut self) -> Result<Phase, DirectorError> {
        let Some(turn) = self.state.turn().cloned() else {
            return Err(RecordError::Inconsistent("acting with no turn in flight").into());
        };
        let step = self.state.step;
        let mut finish_claim = self.state.done().iter().find_map(|(_, c)| {
            c.as_ref()
                .map(|Control::Finish { summary }| summary.clone())
        });
        if finish_claim.is_none() {
            let already = self.state.done().len();
            let pending = &turn.calls[already.min(turn.calls.len())..];
            let mut at = 0;
            while let Some(call) = pending.get(at) {
                self.fault()?;
                if self.parts.cancel.load(Ordering::SeqCst) {
                    return Ok(Phase::End(
                        Outcome::Cancelled,
                        "cancelled by request".into(),
                    ));
                }
                // Consecutive `delegate` calls start their children together.
                let children = pending[at..].iter().take_while(|c| is_delegate(c)).count();
                let called = if children > 0 {
                    at += children;
                    self.delegate(step, &pending[at - children..at])?
                } else {
                    at += 1;
                    self.call(step, call)?
                };
                match called {
                    Called::Observed => {}
                    Called::Claimed(summary) => {
                        finish_claim = Some(summary);
                        // Calls after `finish` in the same turn are not executed.
                        break;
                    }
                    Called::End(outcome, reason) => return Ok(Phase::End(outcome, reason)),
                }
            }
        }
        let changed = self.state.done().iter().any(|(o, _)| o.changed);

        // Is the loop getting anywhere? Nudge once, then stop as lost.
        let verdict = self.state.judge();
        match self.stall(step, verdict, "Doing the same again will end the task as lost; change approach (read the failing evidence, try something different).")? {
            Stall::Go => {}
            Stall::Stop(end) => return Ok(end),
            Stall::Nudged(pattern) => {
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

    /// Act on a stall verdict: the first time a pattern shows the model is
    /// told, with `advice`; the next time the task ends as lost.
    fn stall(
        &mut self,
        step: u32,
        verdict: StallVerdict,
        advice: &str,
    ) -> Result<Stall, DirectorError> {
        Ok(match verdict {
            StallVerdict::Ok => Stall::Go,
            StallVerdict::Stop(pattern) => {
                Stall::Stop(Phase::End(Outcome::Lost, format!("no progress: {pattern}")))
            }
            StallVerdict::Nudge(pattern) => {
                self.tell(step, format!("Stall detected: {pattern}. {advice}"))?;
                Stall::Nudged(pattern)
            }
        })
    }

    /// One call of a turn: approval if the policy asks for it, the intent
    /// recorded before it runs, retries of transient failures, and its
    /// observation recorded.
    fn call(&mut self, step: u32, call: &ToolCall) -> Result<Called, DirectorError> {
        if let Some(rule) = self.parts.tools.needs_approval(call) {
            match self.seek_approval(step, call, &rule, None)? {
                (ApprovalDecision::Approved, message) => {
                    self.parts.tools.approve(&call.id);
                    self.approval_note = message.map(|m| (call.id.clone(), m));
                }
                (ApprovalDecision::Cancelled, _) => {
                    return Ok(Called::End(
                        Outcome::Cancelled,
                        "cancelled by request while awaiting approval".into(),
                    ));
                }
                (d, message) => {
                    self.record_denial(step, call, &rule, d, message.as_deref())?;
                    return Ok(Called::Observed);
                }
            }
        }
        // The intent is durable before the call runs.
        self.record_intent(step, call)?;
        let mut outcome = match self.parts.tools.execute(call) {
            Ok(o) => o,
            Err(e) => return self.runtime_failed(e),
        };
        // A command a fault cut short says nothing: not recorded.
        self.fault()?;
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
                    self.fault()?;
                    return Ok(Called::End(
                        Outcome::Error,
                        format!("tool runtime failed: {e}"),
                    ));
                }
            };
            self.fault()?;
        }
        let workspace_root = if outcome.observation.changed {
            self.parts.tools.workspace_root().ok()
        } else {
            None
        };
        // What the person who approved the call said reaches the model
        // with its result.
        if let Some((id, m)) = self.approval_note.take()
            && id == call.id
        {
            outcome
                .observation
                .content
                .push_str(&format!("\n\n(a person approved this call and says: {m})"));
        }
        self.record(Event::Observed {
            step,
            observation: outcome.observation,
            workspace_root,
        })?;
        Ok(match outcome.control {
            Some(Control::Finish { summary }) => Called::Claimed(summary),
            None => Called::Observed,
        })
    }

    /// Record that `call` of `step` is about to run, with what running it
    /// again would do and the workspace as it stands.
    fn record_intent(&mut self, step: u32, call: &ToolCall) -> Result<(), DirectorError> {
        self.record(Event::Intent {
            step,
            call_id: call.id.clone(),
            tool: call.tool.clone(),
            effect: self.parts.tools.effect(call),
            root_before: self.state.root.clone(),
        })
    }

    /// The tools themselves failed (not a call): the task ends in error,
    /// unless a fault injected for a test stops it first.
    fn runtime_failed(&mut self, e: impl std::fmt::Display) -> Result<Called, DirectorError> {
        self.fault()?;
        Ok(Called::End(
            Outcome::Error,
            format!("tool runtime failed: {e}"),
        ))
    }

    /// `delegate` calls: their children are granted out of what this task
    /// has left (its limits less what it and its children used, and the
    /// children its contract still allows), each the next out of what the
    /// ones before it were granted, and run (together, where the tools
    /// can); each intent is recorded before, and each child's record and
    /// each call's observation after, in the calls' order. What a child
    /// used counts against this task from then on (a resumed task charges
    /// it again from the record); a call run again after a stop finds the
    /// child it started, and one whose end was recorded then is not
    /// recorded (nor charged) twice.
    fn delegate(&mut self, step: u32, calls: &[ToolCall]) -> Result<Called, DirectorError> {
        for call in calls {
            self.record_intent(step, call)?;
        }
        let allowed = self.contract.limits.max_children;
        let left = self.state.budget.left_for_child(
            self.parts.clock.now_ms(),
            allowed.saturating_sub(self.state.children),
        );
        let ran = match self.parts.tools.delegate_many(step, calls, &left) {
            Ok(r) if r.len() == calls.len() => r,
            Ok(_) => {
                return Ok(Called::End(
                    Outcome::Error,
                    "tool runtime failed: not one answer for each delegate call".into(),
                ));
            }
            // A child stopped before its end: so does this run, unended;
            // resumed, the call finds the child again and it goes on.
            Err(e) if e.is_interrupted() => {
                return Err(DirectorError::Interrupted(e.message().to_string()));
            }
            Err(e) => return self.runtime_failed(e),
        };
        self.fault()?;
        for (call, (outcome, child)) in calls.iter().zip(ran) {
            let known = (step, call.id.clone());
            if let Some(child) = child.filter(|_| !self.state.delegated.contains(&known)) {
                self.record(Event::Delegated {
                    step,
                    call_id: call.id.clone(),
                    child,
                })?;
            }
            let workspace_root = if outcome.observation.changed {
                self.parts.tools.workspace_root().ok()
            } else {
                None
            };
            self.record(Event::Observed {
                step,
                observation: outcome.observation,
                workspace_root,
            })?;
        }
        Ok(Called::Observed)
    }

    /// Run one verification pass.
    fn verify_phase(&mut self, claim: bool) -> Result<Phase, DirectorError> {
        let attempt = self.state.budget.verifications() + 1;
        let verified = self
            .parts
            .verifier
            .verify(&self.contract, &self.locked_sha256, attempt);
        // A check a fault cut short is no evidence: re-run on resume, never
        // counted as a failing criterion.
        self.fault()?;
        let report = match verified {
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
        report: Box<VerificationReport>,
        claim: bool,
    ) -> Result<Phase, DirectorError> {
        let attempt = report.attempt;
        let step = self.state.step;
        let rejection = match Acceptance::establish(&self.contract, &self.locked_sha256, &report) {
            Ok(acceptance) => return self.accepted(acceptance, &report, attempt, step),
            Err(r) => r,
        };
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
        self.tell(step + 1, text)?;
        self.go(
            TaskState::Planning,
            format!("verification rejected: {rejection}; evidence returned to the model"),
        )?;
        Ok(Phase::Plan)
    }

    /// Every check passed: the checker, if any, may still object.
    fn accepted(
        &mut self,
        acceptance: Acceptance,
        report: &VerificationReport,
        attempt: u32,
        step: u32,
    ) -> Result<Phase, DirectorError> {
        let objection = match self.review(report, attempt)? {
            Review::Approved => {
                let reason = match self.contract.criteria.len() {
                    1 => format!("the one criterion passed on fresh snapshots (attempt {attempt})"),
                    n => format!("all {n} criteria passed on fresh snapshots (attempt {attempt})"),
                };
                return Ok(Phase::End(Outcome::Verified(acceptance), reason));
            }
            Review::Objection(o) => o,
            Review::Unreachable(why) => {
                return Ok(Phase::End(
                    Outcome::Error,
                    format!(
                        "every check passed, but {why}; the work is not accepted without its review"
                    ),
                ));
            }
        };
        if attempt >= self.contract.limits.max_verifications {
            return Ok(Phase::End(
                Outcome::Failed,
                format!("the checker objected at verification {attempt}, the limit: {objection}"),
            ));
        }
        let text = format!(
            "Every check passed, but the checker objected:\n{objection}\nAddress it, then call `finish` again."
        );
        self.tell(step + 1, text)?;
        self.go(
            TaskState::Planning,
            "the checker objected; its reasons returned to the model",
        )?;
        Ok(Phase::Plan)
    }
}

/// What a stall verdict comes to.
enum Stall {
    /// No stall.
    Go,
    /// The model was told of this pattern; the next time ends the task.
    Nudged(String),
    /// The task ends, lost.
    Stop(Phase),
}

/// What one call came to.
enum Called {
    /// Its observation is recorded.
    Observed,
    /// It was a `finish` claim, with this summary.
    Claimed(String),
    /// The task must end.
    End(Outcome, String),
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

/// Whether `call` is a `delegate` call.
fn is_delegate(call: &ToolCall) -> bool {
    call.tool == loop_protocol::ToolName::Delegate.as_str()
}
