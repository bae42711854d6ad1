//! Rebuilding a task's state from its ledger, so a task whose runtime died
//! continues from its last committed step: the same context the model saw,
//! the same budgets spent, the same state, stall history and evidence.

use crate::budget::Budget;
use crate::director::Phase;
use crate::machine::Machine;
use crate::progress::ProgressDetector;
use loop_protocol::{
    BudgetUse, Context, Control, Effect, Event, LimitKind, Limits, Observation, ObservationStatus,
    Outcome, OutcomeKind, OutcomeRecord, TaskState, ToolCall, Turn, VerificationReport,
};

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

/// Everything rebuilt from the record.
pub(crate) struct Restored {
    pub task_id: String,
    pub contract_sha256: String,
    pub machine: Machine,
    pub budget: Budget,
    pub last_report: Option<VerificationReport>,
    pub progress: ProgressDetector,
    pub root: String,
    /// Model answers so far (turns, malformed, failed).
    pub turns: u32,
    /// The last step number.
    pub step: u32,
    /// The context, without system prompt and tools (the Director adds them).
    pub context: Context,
    /// Where to go on.
    pub phase: Phase,
    /// The call in flight, if the step was interrupted mid-call.
    pub interrupted: Option<Interrupted>,
    /// Set when the task had ended (only the receipt may be missing).
    pub finished: Option<(OutcomeRecord, BudgetUse)>,
    /// A request waiting for its answer.
    pub pending_approval: Option<PendingApproval>,
    /// A checkpoint asked and not yet answered: (id, reason, deadline).
    pub pending_checkpoint: Option<(String, String, u64)>,
    /// Rejected verifications so far.
    pub failed_repairs: u32,
    /// The last rejection has not been followed by a checkpoint.
    pub rejection_unasked: bool,
    /// The cost checkpoint has been asked.
    pub cost_asked: bool,
    /// Calls of the current turn a person approved.
    pub approved: Vec<String>,
    /// Calls of the current turn denied whose refusal is not yet recorded:
    /// (call, rule, decision).
    pub denied: Vec<(String, String, String)>,
}

fn control_of(call: &ToolCall, obs: &Observation) -> Option<Control> {
    (call.tool == loop_protocol::ToolName::Finish.as_str() && obs.status == ObservationStatus::Ok)
        .then(|| Control::Finish {
            summary: call.args["summary"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        })
}

/// Parse the outcome out of a `→ terminal` transition's reason
/// (`"{record}: {reason}"`), for a task that stopped between the two.
pub(crate) fn outcome_from_transition(
    reason: &str,
) -> Option<(OutcomeKind, Option<LimitKind>, String)> {
    let (record, why) = reason.split_once(": ")?;
    let (kind, limit) = match record {
        "verified" => (OutcomeKind::Verified, None),
        "failed" => (OutcomeKind::Failed, None),
        "lost" => (OutcomeKind::Lost, None),
        "cancelled" => (OutcomeKind::Cancelled, None),
        "error" => (OutcomeKind::Error, None),
        "limit_reached{steps}" => (OutcomeKind::LimitReached, Some(LimitKind::Steps)),
        "limit_reached{tokens}" => (OutcomeKind::LimitReached, Some(LimitKind::Tokens)),
        "limit_reached{time}" => (OutcomeKind::LimitReached, Some(LimitKind::Time)),
        "limit_reached{cost}" => (OutcomeKind::LimitReached, Some(LimitKind::Cost)),
        _ => return None,
    };
    Some((kind, limit, why.to_string()))
}

/// An outcome other than `verified` from its kind.
pub(crate) fn unverified_outcome(kind: OutcomeKind, limit: Option<LimitKind>) -> Outcome {
    match kind {
        OutcomeKind::Failed => Outcome::Failed,
        OutcomeKind::Lost => Outcome::Lost,
        OutcomeKind::LimitReached => Outcome::LimitReached(limit.unwrap_or(LimitKind::Steps)),
        OutcomeKind::Cancelled => Outcome::Cancelled,
        OutcomeKind::Verified | OutcomeKind::Error => Outcome::Error,
    }
}

/// Rebuild from `history`. `now_ms - elapsed_ms` becomes the budget's start.
pub(crate) fn rebuild(
    limits: Limits,
    progress: crate::progress::ProgressConfig,
    history: &[Event],
    now_ms: u64,
    elapsed_ms: u64,
) -> Result<Restored, String> {
    let Some(Event::TaskStarted {
        task_id,
        contract_sha256,
        contract,
        baseline_root,
        ..
    }) = history.first()
    else {
        return Err("the record does not start with task_started".into());
    };
    let mut r = Restored {
        task_id: task_id.clone(),
        contract_sha256: contract_sha256.clone(),
        machine: Machine::new(),
        budget: Budget::new(limits, now_ms.saturating_sub(elapsed_ms)),
        last_report: None,
        progress: ProgressDetector::new(progress),
        root: baseline_root.clone(),
        turns: 0,
        step: 0,
        context: Context::new(String::new(), vec![], &contract.instruction),
        phase: Phase::Plan,
        interrupted: None,
        finished: None,
        pending_approval: None,
        pending_checkpoint: None,
        failed_repairs: 0,
        rejection_unasked: false,
        cost_asked: false,
        approved: Vec::new(),
        denied: Vec::new(),
    };
    let mut requested: std::collections::BTreeMap<String, PendingApproval> = Default::default();
    let mut turn: Option<Turn> = None;
    let mut done: Vec<(Observation, Option<Control>)> = Vec::new();
    let mut judged = true;
    let mut intent: Option<Interrupted> = None;
    let mut verified_since_verifying: Option<VerificationReport> = None;
    let mut terminal_reason: Option<String> = None;
    for (i, e) in history.iter().enumerate().skip(1) {
        match e {
            Event::TaskStarted { .. } => return Err(format!("a second task_started at entry {i}")),
            Event::Transition {
                n,
                from,
                to,
                reason,
            } => {
                if *from != r.machine.state() {
                    return Err(format!(
                        "transition {n} leaves {from}, but the task was in {}",
                        r.machine.state()
                    ));
                }
                // Progress is judged when a turn's calls are done.
                if *from == TaskState::Acting
                    && !judged
                    && !matches!(to, TaskState::AwaitingApproval | TaskState::AwaitingInput)
                {
                    if let Some(t) = &turn {
                        let observations: Vec<Observation> =
                            done.iter().map(|(o, _)| o.clone()).collect();
                        let verdict = r.progress.step(&t.calls, &observations, &r.root);
                        let claimed = done.iter().any(|(_, c)| c.is_some());
                        if verdict == crate::progress::Verdict::Ok && claimed {
                            r.progress.claim(&r.root);
                        }
                    }
                    judged = true;
                }
                if *to == TaskState::Verifying {
                    verified_since_verifying = None;
                }
                if *to == TaskState::Terminal {
                    terminal_reason = Some(reason.clone());
                }
                r.machine = Machine::restore(*to, *n);
            }
            Event::ModelTurn {
                step,
                thought,
                calls,
                usage,
                ..
            } => {
                r.budget.charge_turn(usage);
                r.context.push_turn(thought.clone(), calls.clone());
                r.step = *step;
                r.turns += 1;
                turn = Some(Turn {
                    thought: thought.clone(),
                    calls: calls.clone(),
                    usage: *usage,
                    served_by: None,
                });
                done.clear();
                judged = false;
                intent = None;
                r.approved.clear();
                r.denied.clear();
            }
            Event::ModelMalformed {
                step, error, usage, ..
            } => {
                r.budget.charge_turn(usage);
                r.step = *step;
                r.turns += 1;
                turn = None;
                done.clear();
                judged = true;
                let _ = r.progress.malformed(*step, error, &r.root);
            }
            Event::ModelFailed { step, usage, .. } => {
                r.budget.charge_turn(usage);
                r.step = *step;
                r.turns += 1;
                turn = None;
            }
            Event::ModelSilent { step, .. } => {
                r.step = *step;
                r.turns += 1;
            }
            Event::Intent {
                call_id,
                effect,
                root_before,
                ..
            } => {
                let call = turn
                    .as_ref()
                    .and_then(|t| t.calls.iter().find(|c| &c.id == call_id))
                    .ok_or_else(|| {
                        format!("intent for call {call_id}, which the last turn did not propose")
                    })?;
                intent = Some(Interrupted {
                    call: call.clone(),
                    effect: *effect,
                    root_before: root_before.clone(),
                });
            }
            Event::Observed {
                observation,
                workspace_root,
                ..
            } => {
                if let Some(root) = workspace_root {
                    r.root = root.clone();
                }
                r.context.push_observation(observation);
                let control = turn
                    .as_ref()
                    .and_then(|t| t.calls.iter().find(|c| c.id == observation.call_id))
                    .and_then(|c| control_of(c, observation));
                done.push((observation.clone(), control));
                intent = None;
                r.denied.retain(|(c, _, _)| c != &observation.call_id);
            }
            Event::Feedback { text, .. } => r.context.push_feedback(text.clone()),
            Event::Verified {
                report, accepted, ..
            } => {
                r.budget.charge_verification();
                if !accepted {
                    r.progress.rejected_at(&report.manifest_root);
                    r.failed_repairs += 1;
                    r.rejection_unasked = true;
                }
                r.last_report = Some(report.clone());
                verified_since_verifying = Some(report.clone());
            }
            Event::Reviewed { usage, .. } => r.budget.charge_review(usage),
            Event::Resumed { .. } | Event::Recovery { .. } => {}
            Event::CheckpointRequested {
                approval_id,
                reason,
                deadline_ms,
            } => {
                r.pending_checkpoint = Some((approval_id.clone(), reason.clone(), *deadline_ms));
                r.rejection_unasked = false;
                if reason.starts_with("spending crossed") {
                    r.cost_asked = true;
                }
            }
            Event::CheckpointDecided { .. } => r.pending_checkpoint = None,
            Event::BudgetExtended {
                add_steps,
                add_tokens,
                add_usd,
                add_secs,
            } => {
                r.budget
                    .extend(*add_steps, *add_tokens, *add_usd, *add_secs);
                r.finished = None;
                terminal_reason = None;
            }
            Event::ApprovalRequested {
                approval_id,
                call_id,
                rule,
                deadline_ms,
                ..
            } => {
                let p = PendingApproval {
                    approval_id: approval_id.clone(),
                    call_id: call_id.clone(),
                    rule: rule.clone(),
                    deadline_ms: *deadline_ms,
                };
                requested.insert(approval_id.clone(), p.clone());
                r.pending_approval = Some(p);
            }
            Event::ApprovalDecided {
                approval_id,
                decision,
                ..
            } => {
                r.pending_approval = None;
                if let Some(p) = requested.get(approval_id) {
                    if decision == "approved" {
                        r.approved.push(p.call_id.clone());
                    } else {
                        r.denied
                            .push((p.call_id.clone(), p.rule.clone(), decision.clone()));
                    }
                }
            }
            Event::Finished { outcome, used } => {
                r.finished = Some((outcome.clone(), *used));
            }
        }
    }
    r.interrupted = intent;
    let claimed = done.iter().any(|(_, c)| c.is_some());
    r.phase = match r.machine.state() {
        // A turn recorded but not yet acted on (the runtime stopped before
        // the move to acting was recorded): act on it, never ask again.
        TaskState::Planning if !judged && turn.is_some() => Phase::Act {
            turn: Box::new(turn.take().ok_or("no turn")?),
            done,
        },
        TaskState::AwaitingApproval if !judged && turn.is_some() => Phase::Act {
            turn: Box::new(turn.take().ok_or("no turn")?),
            done,
        },
        TaskState::Pending
        | TaskState::Planning
        | TaskState::AwaitingInput
        | TaskState::AwaitingApproval => Phase::Plan,
        TaskState::Acting => match turn {
            Some(t) if !judged => Phase::Act {
                turn: Box::new(t),
                done,
            },
            // A malformed answer's step: it was already returned to the model.
            _ => Phase::Plan,
        },
        TaskState::Verifying => match verified_since_verifying {
            Some(report) => Phase::Decide {
                report: Box::new(report),
                claim: claimed,
            },
            None => Phase::Verify { claim: claimed },
        },
        TaskState::Terminal => {
            let (kind, limit, why) = terminal_reason
                .as_deref()
                .and_then(outcome_from_transition)
                .unwrap_or((
                    OutcomeKind::Error,
                    None,
                    "the recorded end could not be read".into(),
                ));
            if kind == OutcomeKind::Verified {
                // Re-established from the recorded evidence, as the first time.
                let report = r
                    .last_report
                    .as_ref()
                    .ok_or("verified with no verification on record")?;
                match loop_protocol::Acceptance::establish(contract, contract_sha256, report) {
                    Ok(a) => Phase::End(Outcome::Verified(a), why),
                    Err(e) => Phase::End(
                        Outcome::Error,
                        format!("the recorded acceptance does not hold: {e}"),
                    ),
                }
            } else {
                Phase::End(unverified_outcome(kind, limit), why)
            }
        }
    };
    Ok(r)
}
