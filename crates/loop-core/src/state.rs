//! A task's state as its events make it. [`State::apply`] is the one place
//! an event changes the state: the Director applies each event as it
//! records it, and a resumed task folds its recorded history through the
//! same function, so a task that died continues from exactly the state it
//! had — the context the model saw, budgets spent, stall history, evidence,
//! approvals and checkpoints asked.

use crate::budget::Budget;
use crate::machine::Machine;
use crate::progress::{ProgressConfig, ProgressDetector, StallVerdict};
use loop_protocol::{
    Acceptance, ApprovalDecision, BudgetUse, Context, Contract, Control, Effect, Event, Limits,
    Observation, ObservationStatus, Outcome, OutcomeKind, OutcomeRecord, TaskState, ToolCall,
    ToolName, Turn, Usage, VerificationReport,
};
use std::collections::BTreeMap;

/// Where the loop goes next.
pub(crate) enum Phase {
    /// Ask the model for a turn.
    Plan,
    /// Run the calls of the turn in flight that have no observation yet.
    Act,
    /// Verify (the model claimed `finish`, or policy says so).
    Verify { claim: bool },
    /// Act on a recorded verification report.
    Decide {
        report: Box<VerificationReport>,
        claim: bool,
    },
    /// The task must end.
    End(Outcome, String),
}

/// A call that was about to run (or running) when the runtime stopped.
#[derive(Debug, Clone)]
pub struct Interrupted {
    /// The call.
    pub call: ToolCall,
    /// What running it again would do.
    pub effect: Effect,
    /// The workspace root before it.
    pub root_before: String,
}

/// An approval asked for and not yet answered.
#[derive(Debug, Clone)]
pub struct PendingApproval {
    /// Its id.
    pub approval_id: String,
    /// The call waiting.
    pub call_id: String,
    /// The rule.
    pub rule: String,
    /// When it expires.
    pub deadline_ms: u64,
}

/// A checkpoint asked and not yet answered.
#[derive(Debug, Clone)]
pub struct PendingCheckpoint {
    /// Its id.
    pub approval_id: String,
    /// Why it was asked.
    pub reason: String,
    /// When it expires.
    pub deadline_ms: u64,
}

/// A call of the turn in flight a person did not approve, whose refusal is
/// not recorded yet.
#[derive(Debug, Clone)]
pub struct Denied {
    /// The call.
    pub call_id: String,
    /// The rule that asked.
    pub rule: String,
    /// The answer (denied, expired).
    pub decision: ApprovalDecision,
}

/// A record that does not hold together: the events cannot be a task's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The first event is not `task_started`.
    #[error("the record does not start with task_started")]
    NotStarted,
    /// A second `task_started`.
    #[error("a second task_started at entry {entry}")]
    SecondStart {
        /// Its position (0-based).
        entry: usize,
    },
    /// The record is another task's.
    #[error(
        "the history is for task {recorded} with contract {recorded_contract}, not task {task} with contract {contract}"
    )]
    OtherTask {
        /// The recorded task.
        recorded: String,
        /// The recorded contract hash.
        recorded_contract: String,
        /// The task resumed.
        task: String,
        /// Its locked contract hash.
        contract: String,
    },
    /// A transition that does not leave the state the task was in.
    #[error("transition {n} leaves {from}, but the task was in {state}")]
    Transition {
        /// Its number.
        n: u32,
        /// The state it says it leaves.
        from: TaskState,
        /// The state the task was in.
        state: TaskState,
    },
    /// An intent for a call the turn in flight did not propose.
    #[error("intent for call {call_id}, which the last turn did not propose")]
    UnknownCall {
        /// The call.
        call_id: String,
    },
    /// A state the events leave the task in that cannot be continued.
    #[error("{0}")]
    Inconsistent(&'static str),
}

/// Everything the Director knows about a task, as its events made it.
pub(crate) struct State {
    pub task_id: String,
    pub contract_sha256: String,
    /// Checkpoint settings that decide what recorded requests mean.
    cost_usd_over: Option<f64>,
    pub machine: Machine,
    pub budget: Budget,
    pub last_report: Option<VerificationReport>,
    /// The last rejection's reason, as recorded.
    pub last_rejection: Option<String>,
    pub progress: ProgressDetector,
    /// The workspace's Merkle root as last recorded.
    pub root: String,
    /// Model answers so far (turns, malformed, failed, silent).
    pub turns: u32,
    /// The last step number.
    pub step: u32,
    /// What the model sees (system prompt and tools are set by the Director).
    pub context: Context,
    /// The context's digest, kept up to date as it grows.
    pub digest: loop_protocol::context::ContextDigest,
    /// Set when the task ended (only the receipt may be missing).
    pub finished: Option<(OutcomeRecord, BudgetUse)>,
    pub pending_approval: Option<PendingApproval>,
    pub pending_checkpoint: Option<PendingCheckpoint>,
    /// Child tasks started so far (the `delegate` tool).
    pub children: u32,
    /// The calls (step, call id: a provider may number calls afresh each
    /// turn) whose child is recorded (`delegated`).
    pub delegated: std::collections::BTreeSet<(u32, String)>,
    /// Rejected verifications so far.
    pub failed_repairs: u32,
    /// The last rejection has not been followed by a checkpoint.
    pub rejection_unasked: bool,
    /// A person was asked after spending crossed the cost checkpoint.
    pub cost_asked: bool,
    /// Calls of the turn in flight a person approved.
    pub approved: Vec<String>,
    /// Calls of the turn in flight denied, refusal not yet recorded.
    pub denied: Vec<Denied>,
    /// The verdict on the last malformed answer.
    pub malformed_verdict: StallVerdict,
    /// The turn in flight and what its calls gave so far.
    turn: Option<Turn>,
    done: Vec<(Observation, Option<Control>)>,
    /// Progress was judged on the turn in flight.
    judged: bool,
    /// A call whose intent is recorded and whose observation is not.
    intent: Option<Interrupted>,
    /// The report recorded since the last move to verifying.
    verified_since_verifying: Option<VerificationReport>,
    /// The reason of the move to terminal, if the task is there.
    terminal_reason: Option<String>,
    /// Approval requests by id.
    requested: BTreeMap<String, PendingApproval>,
    /// Events applied.
    applied: usize,
}

fn control_of(call: &ToolCall, obs: &Observation) -> Option<Control> {
    (call.tool == ToolName::Finish.as_str() && obs.status == ObservationStatus::Ok).then(|| {
        Control::Finish {
            summary: call.args["summary"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    })
}

impl State {
    /// The state of task `task_id` under the contract locked as
    /// `contract_sha256`, before its first event; its wall clock started at
    /// `started_ms`.
    pub fn new(
        task_id: String,
        contract_sha256: String,
        limits: Limits,
        progress: ProgressConfig,
        cost_usd_over: Option<f64>,
        started_ms: u64,
    ) -> Self {
        State {
            task_id,
            contract_sha256,
            cost_usd_over,
            machine: Machine::new(),
            budget: Budget::new(limits, started_ms),
            last_report: None,
            last_rejection: None,
            progress: ProgressDetector::new(progress),
            root: String::new(),
            turns: 0,
            step: 0,
            context: Context::new(String::new(), vec![], ""),
            digest: Default::default(),
            finished: None,
            pending_approval: None,
            pending_checkpoint: None,
            children: 0,
            delegated: Default::default(),
            failed_repairs: 0,
            rejection_unasked: false,
            cost_asked: false,
            approved: Vec::new(),
            denied: Vec::new(),
            malformed_verdict: StallVerdict::Ok,
            turn: None,
            done: Vec::new(),
            judged: true,
            intent: None,
            verified_since_verifying: None,
            terminal_reason: None,
            requested: BTreeMap::new(),
            applied: 0,
        }
    }

    /// The turn in flight, if its calls are still being acted on.
    pub fn turn(&self) -> Option<&Turn> {
        self.turn.as_ref().filter(|_| !self.judged)
    }

    /// What the turn in flight's calls gave so far.
    pub fn done(&self) -> &[(Observation, Option<Control>)] {
        &self.done
    }

    /// Take the call whose intent is recorded and whose observation is not.
    pub fn take_interrupted(&mut self) -> Option<Interrupted> {
        self.intent.take()
    }

    /// Judge progress on the turn in flight (once): the detector sees its
    /// calls, their observations and the workspace root, and a successful
    /// `finish` among them is a claim on that root.
    pub fn judge(&mut self) -> StallVerdict {
        if self.judged {
            return StallVerdict::Ok;
        }
        self.judged = true;
        let Some(t) = &self.turn else {
            return StallVerdict::Ok;
        };
        let observations: Vec<Observation> = self.done.iter().map(|(o, _)| o.clone()).collect();
        let verdict = self.progress.step(&t.calls, &observations, &self.root);
        let claimed = self.done.iter().any(|(_, c)| c.is_some());
        if verdict == StallVerdict::Ok && claimed {
            self.progress.claim(&self.root)
        } else {
            verdict
        }
    }

    /// Apply one event: the only way the state changes on the record.
    /// One arm per event kind, each handing off to the method that says
    /// what that recorded event means to the state.
    pub fn apply(&mut self, event: &Event) -> Result<(), RecordError> {
        let entry = self.applied;
        self.applied += 1;
        if entry == 0 {
            return self.start(event);
        }
        match event {
            Event::TaskStarted { .. } => return Err(RecordError::SecondStart { entry }),
            Event::Transition {
                n,
                from,
                to,
                reason,
            } => self.on_transition(*n, *from, *to, reason)?,
            Event::ModelTurn {
                step,
                thought,
                calls,
                usage,
                ..
            } => self.on_model_turn(*step, thought, calls, usage),
            Event::ModelMalformed {
                step, error, usage, ..
            } => self.on_model_malformed(*step, error, usage),
            Event::ModelFailed { step, usage, .. } => self.on_model_failed(*step, usage),
            Event::ModelSilent { step, .. } => self.answered(*step),
            Event::Intent {
                call_id,
                effect,
                root_before,
                ..
            } => self.on_intent(call_id, *effect, root_before)?,
            Event::Observed {
                observation,
                workspace_root,
                ..
            } => self.on_observed(observation, workspace_root.as_ref()),
            Event::Feedback { text, .. } => self.context.push_feedback(text.clone()),
            Event::Verified {
                report,
                accepted,
                rejection,
            } => self.on_verified(report, *accepted, rejection),
            Event::Reviewed { usage, .. } => self.budget.charge_review(usage),
            Event::Delegated {
                step,
                call_id,
                child,
            } => {
                self.children = self.children.saturating_add(1);
                self.delegated.insert((*step, call_id.clone()));
                self.budget.charge_child(&child.used);
            }
            Event::Resumed { .. } | Event::Recovery { .. } => {}
            Event::CheckpointRequested {
                approval_id,
                reason,
                deadline_ms,
            } => self.on_checkpoint_requested(approval_id, reason, *deadline_ms),
            Event::CheckpointDecided { .. } => self.pending_checkpoint = None,
            Event::BudgetExtended {
                add_steps,
                add_tokens,
                add_usd,
                add_secs,
            } => self.on_budget_extended(*add_steps, *add_tokens, *add_usd, *add_secs),
            Event::ApprovalRequested {
                approval_id,
                call_id,
                rule,
                deadline_ms,
                ..
            } => self.on_approval_requested(approval_id, call_id, rule, *deadline_ms),
            Event::ApprovalDecided {
                approval_id,
                decision,
                ..
            } => self.on_approval_decided(approval_id, *decision),
            Event::Finished { outcome, used } => {
                self.finished = Some((outcome.clone(), *used));
            }
        }
        Ok(())
    }

    /// A recorded `transition` from `from` to `to`: it must leave the state
    /// the task is in.
    fn on_transition(
        &mut self,
        n: u32,
        from: TaskState,
        to: TaskState,
        reason: &str,
    ) -> Result<(), RecordError> {
        if from != self.machine.state() {
            return Err(RecordError::Transition {
                n,
                from,
                state: self.machine.state(),
            });
        }
        // Progress is judged when a turn's calls are done (a
        // running Director judges before it moves; this catches a
        // record that stopped between the two).
        if from == TaskState::Acting
            && !matches!(to, TaskState::AwaitingApproval | TaskState::AwaitingInput)
        {
            self.judge();
        }
        if to == TaskState::Verifying {
            self.verified_since_verifying = None;
        }
        if to == TaskState::Terminal {
            self.terminal_reason = Some(reason.to_string());
        }
        self.machine = Machine::restore(to, n);
        Ok(())
    }

    /// A recorded `model_turn`: it is charged, seen by the model, and
    /// becomes the turn in flight.
    fn on_model_turn(
        &mut self,
        step: u32,
        thought: &Option<String>,
        calls: &[ToolCall],
        usage: &Usage,
    ) {
        self.budget.charge_turn(usage);
        self.context.push_turn(thought.clone(), calls.to_vec());
        self.answered(step);
        self.turn = Some(Turn {
            thought: thought.clone(),
            calls: calls.to_vec(),
            usage: *usage,
            served_by: None,
        });
        self.judged = false;
        self.approved.clear();
        self.denied.clear();
    }

    /// A recorded `model_malformed`: charged, and judged by the detector.
    fn on_model_malformed(&mut self, step: u32, error: &str, usage: &Usage) {
        self.budget.charge_turn(usage);
        self.answered(step);
        self.malformed_verdict = self.progress.malformed(step, error, &self.root);
    }

    /// A recorded `model_failed`: charged, and the step answered.
    fn on_model_failed(&mut self, step: u32, usage: &Usage) {
        self.budget.charge_turn(usage);
        self.answered(step);
    }

    /// A recorded `intent` for a call of the turn in flight: the call is
    /// interrupted until its observation is recorded.
    fn on_intent(
        &mut self,
        call_id: &str,
        effect: Effect,
        root_before: &str,
    ) -> Result<(), RecordError> {
        let call = self
            .turn
            .as_ref()
            .and_then(|t| t.calls.iter().find(|c| c.id == call_id))
            .ok_or_else(|| RecordError::UnknownCall {
                call_id: call_id.to_string(),
            })?;
        self.intent = Some(Interrupted {
            call: call.clone(),
            effect,
            root_before: root_before.to_string(),
        });
        Ok(())
    }

    /// A recorded `observed`: the workspace root moves, the model sees the
    /// observation, and the call is done.
    fn on_observed(&mut self, observation: &Observation, workspace_root: Option<&String>) {
        if let Some(root) = workspace_root {
            self.root = root.clone();
        }
        self.context.push_observation(observation);
        let control = self
            .turn
            .as_ref()
            .and_then(|t| t.calls.iter().find(|c| c.id == observation.call_id))
            .and_then(|c| control_of(c, observation));
        self.done.push((observation.clone(), control));
        self.intent = None;
        self.denied.retain(|d| d.call_id != observation.call_id);
    }

    /// A recorded `verified`: charged, and a rejection counted.
    fn on_verified(
        &mut self,
        report: &VerificationReport,
        accepted: bool,
        rejection: &Option<String>,
    ) {
        self.budget.charge_verification();
        if !accepted {
            self.progress.rejected_at(&report.manifest_root);
            self.failed_repairs += 1;
            self.rejection_unasked = true;
            self.last_rejection = rejection.clone();
        }
        self.last_report = Some(report.clone());
        self.verified_since_verifying = Some(report.clone());
    }

    /// A recorded `checkpoint_requested`: pending until decided.
    fn on_checkpoint_requested(&mut self, approval_id: &str, reason: &str, deadline_ms: u64) {
        self.pending_checkpoint = Some(PendingCheckpoint {
            approval_id: approval_id.to_string(),
            reason: reason.to_string(),
            deadline_ms,
        });
        // A person asked now has seen the rejections so far and
        // the spending so far.
        self.rejection_unasked = false;
        if self
            .cost_usd_over
            .is_some_and(|t| self.budget.usd_spent() > t)
        {
            self.cost_asked = true;
        }
    }

    /// A recorded `budget_extended`: the budget grows and the task may go on.
    fn on_budget_extended(&mut self, add_steps: u32, add_tokens: u64, add_usd: f64, add_secs: u64) {
        self.budget.extend(add_steps, add_tokens, add_usd, add_secs);
        self.finished = None;
        self.terminal_reason = None;
        self.intent = None;
    }

    /// A recorded `approval_requested`: pending, and remembered by its id.
    fn on_approval_requested(
        &mut self,
        approval_id: &str,
        call_id: &str,
        rule: &str,
        deadline_ms: u64,
    ) {
        let p = PendingApproval {
            approval_id: approval_id.to_string(),
            call_id: call_id.to_string(),
            rule: rule.to_string(),
            deadline_ms,
        };
        self.requested.insert(approval_id.to_string(), p.clone());
        self.pending_approval = Some(p);
    }

    /// A recorded `approval_decided`: the call it asked about is approved
    /// or denied.
    fn on_approval_decided(&mut self, approval_id: &str, decision: ApprovalDecision) {
        self.pending_approval = None;
        if let Some(p) = self.requested.get(approval_id) {
            if decision == ApprovalDecision::Approved {
                self.approved.push(p.call_id.clone());
            } else {
                self.denied.push(Denied {
                    call_id: p.call_id.clone(),
                    rule: p.rule.clone(),
                    decision,
                });
            }
        }
    }

    fn start(&mut self, event: &Event) -> Result<(), RecordError> {
        let Event::TaskStarted {
            task_id,
            contract_sha256,
            contract,
            baseline_root,
            drafting,
            ..
        } = event
        else {
            return Err(RecordError::NotStarted);
        };
        if task_id != &self.task_id || contract_sha256 != &self.contract_sha256 {
            return Err(RecordError::OtherTask {
                recorded: task_id.clone(),
                recorded_contract: contract_sha256.clone(),
                task: self.task_id.clone(),
                contract: self.contract_sha256.clone(),
            });
        }
        self.root = baseline_root.clone();
        self.context = Context::new(String::new(), vec![], &contract.instruction);
        self.digest = Default::default();
        // Drafting the contract was paid for by the task: its calls count
        // against its budgets (tokens and dollars, not steps), and so
        // was the checker's review of each draft.
        for a in drafting.iter().flat_map(|d| &d.attempts) {
            for u in a.usage.iter().chain(&a.checker_usage) {
                self.budget.charge_review(u);
            }
        }
        Ok(())
    }

    /// A model answer at `step`: whatever turn was in flight is over.
    fn answered(&mut self, step: u32) {
        self.step = step;
        self.turns += 1;
        self.turn = None;
        self.done.clear();
        self.judged = true;
        self.intent = None;
    }

    /// Where a task whose record ends here goes on.
    pub fn resume_phase(&self, contract: &Contract) -> Result<Phase, RecordError> {
        let claimed = self.done.iter().any(|(_, c)| c.is_some());
        Ok(match self.machine.state() {
            // A turn recorded but not yet acted on (the runtime stopped
            // before the move to acting was recorded): act on it, never ask
            // again. The same for a turn waiting on a person.
            TaskState::Planning | TaskState::AwaitingApproval | TaskState::Acting
                if self.turn().is_some() =>
            {
                Phase::Act
            }
            // A malformed answer's step was already returned to the model.
            TaskState::Pending
            | TaskState::Planning
            | TaskState::AwaitingInput
            | TaskState::AwaitingApproval
            | TaskState::Acting => Phase::Plan,
            TaskState::Verifying => match &self.verified_since_verifying {
                Some(report) => Phase::Decide {
                    report: Box::new(report.clone()),
                    claim: claimed,
                },
                None => Phase::Verify { claim: claimed },
            },
            TaskState::Terminal => {
                let record = self
                    .terminal_reason
                    .as_deref()
                    .and_then(OutcomeRecord::of_terminal_transition)
                    .unwrap_or(OutcomeRecord {
                        kind: OutcomeKind::Error,
                        limit: None,
                        reason: "the recorded end could not be read".into(),
                    });
                if record.kind != OutcomeKind::Verified {
                    return Ok(Phase::End(
                        Outcome::unverified(record.kind, record.limit),
                        record.reason,
                    ));
                }
                // Re-established from the recorded evidence, as the first time.
                let report = self.last_report.as_ref().ok_or(RecordError::Inconsistent(
                    "verified with no verification on record",
                ))?;
                match Acceptance::establish(contract, &self.contract_sha256, report) {
                    Ok(a) => Phase::End(Outcome::Verified(a), record.reason),
                    Err(e) => Phase::End(
                        Outcome::Error,
                        format!("the recorded acceptance does not hold: {e}"),
                    ),
                }
            }
        })
    }

    /// The outcome `record` names; a `verified` one is re-established from
    /// the recorded evidence, and is an error if that fails.
    pub fn recorded_outcome(&self, contract: &Contract, record: &OutcomeRecord) -> Outcome {
        match (record.kind, &self.last_report) {
            (OutcomeKind::Verified, Some(report)) => {
                match Acceptance::establish(contract, &self.contract_sha256, report) {
                    Ok(a) => Outcome::Verified(a),
                    Err(_) => Outcome::Error,
                }
            }
            (kind, _) => Outcome::unverified(kind, record.limit),
        }
    }
}

/// What a recorded task has used, charged by its events exactly as a
/// running Director charges them (steps, tokens, dollars, verifications).
/// Wall time is not in the events: it is left at 0. An empty record has
/// used nothing.
pub fn used_by(history: &[Event]) -> Result<BudgetUse, RecordError> {
    let Some(first) = history.first() else {
        return Ok(BudgetUse::default());
    };
    let Event::TaskStarted {
        task_id,
        contract_sha256,
        limits,
        ..
    } = first
    else {
        return Err(RecordError::NotStarted);
    };
    let mut s = State::new(
        task_id.clone(),
        contract_sha256.clone(),
        limits.clone(),
        ProgressConfig::default(),
        None,
        0,
    );
    for e in history {
        s.apply(e)?;
    }
    Ok(s.budget.used(0))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use loop_protocol::{ModelInfo, RuntimeInfo, Usage};

    fn contract() -> Contract {
        Contract::from_flags("make it", &["true".to_string()], &[]).unwrap()
    }

    fn started(task: &str, sha: &str) -> Event {
        let c = contract();
        Event::TaskStarted {
            task_id: task.into(),
            contract_sha256: sha.into(),
            limits: c.limits.clone(),
            contract: Box::new(c),
            model: ModelInfo {
                provider: "test".into(),
                name: "t".into(),
                source_sha256: None,
                parameters: None,
            },
            checker: None,
            runtime: RuntimeInfo::current(),
            baseline_root: "r0".into(),
            setup: None,
            drafting: None,
            guidance: Vec::new(),
            inputs: Vec::new(),
            project_checks: Vec::new(),
            trigger: None,
        }
    }

    fn state() -> State {
        State::new(
            "t1".into(),
            "sha".into(),
            contract().limits,
            ProgressConfig::default(),
            Some(0.75),
            0,
        )
    }

    fn go(n: u32, from: TaskState, to: TaskState) -> Event {
        Event::Transition {
            n,
            from,
            to,
            reason: "r".into(),
        }
    }

    #[test]
    fn a_record_that_is_not_this_tasks_is_refused_naming_what_differs() {
        let mut s = state();
        assert_eq!(
            s.apply(&go(1, TaskState::Pending, TaskState::Planning)),
            Err(RecordError::NotStarted)
        );
        let mut s = state();
        let e = s.apply(&started("t2", "sha")).unwrap_err();
        assert!(e.to_string().contains("task t2"), "{e}");
        let mut s = state();
        s.apply(&started("t1", "sha")).unwrap();
        assert_eq!(
            s.apply(&started("t1", "sha")),
            Err(RecordError::SecondStart { entry: 1 })
        );
        assert_eq!(
            s.apply(&go(1, TaskState::Acting, TaskState::Planning)),
            Err(RecordError::Transition {
                n: 1,
                from: TaskState::Acting,
                state: TaskState::Pending
            })
        );
    }

    #[test]
    fn events_charge_the_budget_and_a_checkpoint_after_the_cost_line_counts_as_asked() {
        let mut s = state();
        s.apply(&started("t1", "sha")).unwrap();
        s.apply(&go(1, TaskState::Pending, TaskState::Planning))
            .unwrap();
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: 0.5,
            ..Usage::default()
        };
        s.apply(&Event::ModelFailed {
            step: 1,
            error: "down".into(),
            usage,
        })
        .unwrap();
        assert_eq!((s.turns, s.step), (1, 1));
        let asked = |s: &mut State, id: &str| {
            s.apply(&Event::CheckpointRequested {
                approval_id: id.into(),
                reason: "anything".into(),
                deadline_ms: 1,
            })
            .unwrap();
            s.apply(&Event::CheckpointDecided {
                approval_id: id.into(),
                decision: ApprovalDecision::Approved,
                message: None,
            })
            .unwrap();
        };
        // Under the line: a person asked has not seen the spending cross it.
        asked(&mut s, "c1");
        assert!(!s.cost_asked);
        s.apply(&Event::ModelFailed {
            step: 2,
            error: "down".into(),
            usage,
        })
        .unwrap();
        asked(&mut s, "c2");
        assert!(s.cost_asked, "spent {}", s.budget.usd_spent());
        assert!(s.pending_checkpoint.is_none());
    }
}
