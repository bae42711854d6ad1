//! Where the Director waits for a person: approvals of single calls the
//! policy says to `prompt` for, and checkpoints that pause the whole task.
//! Each request is stored (for whoever answers) before the task says it
//! waits, the answer is recorded, and nobody answering is never a yes.

use super::{Director, DirectorError};
use crate::traits::ApprovalDecision;
use loop_protocol::{Event, Observation, Outcome, TaskState, ToolCall};

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

impl Director<'_> {
    /// The checkpoint due before the next model turn, if any: after every
    /// N-th rejection nobody was asked about yet, or once spending crossed
    /// the cost threshold with nobody asked since. Both are read from the
    /// recorded state, so a resumed task asks exactly what it would have.
    pub(super) fn checkpoint_due(&self) -> Option<String> {
        let s = &self.state;
        if let Some(n) = self.checkpoints.after_failed_repairs
            && n > 0
            && s.rejection_unasked
            && s.failed_repairs.is_multiple_of(n)
        {
            return Some(match &s.last_rejection {
                Some(why) => format!("verification rejected {} time(s): {why}", s.failed_repairs),
                None => format!("verification rejected {} time(s)", s.failed_repairs),
            });
        }
        match self.checkpoints.cost_usd_over {
            Some(threshold) if !s.cost_asked && s.budget.usd_spent() > threshold => {
                Some(format!("spending crossed ${threshold:.2}"))
            }
            _ => None,
        }
    }

    /// Pause for a person: record the request, wait for the answer. `Ok(None)`
    /// means go on (the guidance, if any, is already in the context);
    /// `Ok(Some(..))` is how the task ends. Nobody answering stops it.
    /// `pending` is a request already on record (a resumed task waits again).
    pub(super) fn checkpoint(
        &mut self,
        reason: &str,
        pending: Option<(String, u64)>,
    ) -> Result<Option<(Outcome, String)>, DirectorError> {
        let (approval_id, deadline) = match pending {
            Some(p) => p,
            None => {
                let now = self.parts.clock.now_ms();
                let approval_id = format!("checkpoint-{}", self.state.machine.taken() + 1);
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
                // A store that cannot be read is a fault, not a person's
                // answer: the task stays interrupted, to be resumed.
                let d = a
                    .wait(&approval_id, deadline, self.parts.cancel)
                    .map_err(waiting_fault)?;
                (d, a.message(&approval_id))
            }
        };
        self.waited_for_a_person(began);
        // A fault raises the cancel too: it is not a person's cancel.
        self.fault()?;
        if decision == ApprovalDecision::Cancelled {
            return Ok(Some((
                Outcome::Cancelled,
                "cancelled by request at a checkpoint".into(),
            )));
        }
        let by = self
            .approvals
            .as_deref_mut()
            .and_then(|a| a.decided_by(&approval_id));
        self.record(Event::CheckpointDecided {
            approval_id,
            decision,
            message: message.clone(),
        })?;
        match decision {
            ApprovalDecision::Approved => {
                self.go(TaskState::Planning, "a person said to go on")?;
                if let Some(m) = message {
                    let text = format!("A person reviewed the task at a checkpoint and says: {m}");
                    self.tell(0, text)?;
                }
                Ok(None)
            }
            // A flag that answers for nobody (`--on-prompt deny`, no
            // terminal) is not a person stopping it: said as what it was.
            ApprovalDecision::Denied => Ok(Some((
                Outcome::Cancelled,
                match by.filter(|b| b.starts_with("--")) {
                    Some(flag) => format!(
                        "stopped at a checkpoint ({reason}): nobody could be asked, so it was denied ({flag})"
                    ),
                    None => match &message {
                        // One line, bounded: what a person typed is shown
                        // where the outcome is, never as lines of its own.
                        Some(m) => format!(
                            "stopped by a person at a checkpoint ({reason}): {}",
                            m.split_whitespace()
                                .collect::<Vec<_>>()
                                .join(" ")
                                .chars()
                                .take(200)
                                .collect::<String>()
                        ),
                        None => format!("stopped by a person at a checkpoint ({reason})"),
                    },
                },
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
        self.state.budget.pause(waited);
        if let Some(c) = &self.clock_pause {
            c.fetch_add(waited, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Ask for approval of `call` (or, resuming, wait for an earlier
    /// request), record the answer, and come back to acting.
    pub(super) fn seek_approval(
        &mut self,
        step: u32,
        call: &ToolCall,
        rule: &str,
        pending: Option<(String, u64)>,
    ) -> Result<(ApprovalDecision, Option<String>), DirectorError> {
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
                .map_err(waiting_fault)?,
        };
        self.waited_for_a_person(began);
        self.fault()?;
        if decision == ApprovalDecision::Cancelled {
            return Ok((decision, None));
        }
        let (by, message) = match self.approvals.as_deref_mut() {
            Some(a) => (a.decided_by(&approval_id), a.message(&approval_id)),
            None => (None, None),
        };
        self.record(Event::ApprovalDecided {
            approval_id,
            decision,
            by,
            message: message.clone(),
        })?;
        self.go(TaskState::Acting, format!("approval {}", decision.as_str()))?;
        Ok((decision, message))
    }

    /// Record, as the call's observation, that a person did not approve it.
    pub(super) fn record_denial(
        &mut self,
        step: u32,
        call: &ToolCall,
        rule: &str,
        decision: ApprovalDecision,
        message: Option<&str>,
    ) -> Result<(), DirectorError> {
        let said = message.map_or_else(String::new, |m| format!("; the person says: {m}"));
        let obs = Observation::refused(
            &call.id,
            &call.tool,
            format!("approval: {decision}"),
            format!(
                "this needed a person's approval (rule `{rule}`) and the answer was `{decision}`; it was not run{said}"
            ),
        );
        self.record(Event::Observed {
            step,
            observation: obs,
            workspace_root: None,
        })
    }

    /// On resume: let the calls a person approved run, record the refusals
    /// of those denied whose refusal is not on record yet, and wait again
    /// for a request still pending (it survives the restart). `Some` is how
    /// the task ends.
    pub(super) fn settle_approvals(&mut self) -> Result<Option<(Outcome, String)>, DirectorError> {
        for call_id in self.state.approved.clone() {
            self.parts.tools.approve(&call_id);
        }
        let Some(turn) = self.state.turn().cloned() else {
            return Ok(None);
        };
        let step = self.state.step;
        for d in self.state.denied.clone() {
            if let Some(call) = turn.calls.iter().find(|c| c.id == d.call_id) {
                self.record_denial(step, call, &d.rule, d.decision, None)?;
            }
        }
        if let Some(p) = self.state.pending_approval.clone()
            && let Some(call) = turn.calls.iter().find(|c| c.id == p.call_id)
        {
            let pending = Some((p.approval_id.clone(), p.deadline_ms));
            match self.seek_approval(step, call, &p.rule, pending)? {
                (ApprovalDecision::Approved, message) => {
                    self.parts.tools.approve(&call.id);
                    self.approval_note = message.map(|m| (call.id.clone(), m));
                }
                (ApprovalDecision::Cancelled, _) => {
                    return Ok(Some((
                        Outcome::Cancelled,
                        "cancelled by request while awaiting approval".into(),
                    )));
                }
                (d, message) => self.record_denial(step, call, &p.rule, d, message.as_deref())?,
            }
        }
        Ok(None)
    }
}

/// A wait for a person's answer that failed (the store unreadable): the
/// task is interrupted, never decided.
fn waiting_fault(e: crate::traits::BoundaryError) -> DirectorError {
    DirectorError::Interrupted(format!(
        "waiting for a person's answer: {e} (a fault is not an answer)"
    ))
}
