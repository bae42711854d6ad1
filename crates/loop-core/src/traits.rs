//! The boundaries the Director drives. Every one of them has an in-memory
//! fake in the tests; real implementations live in their own crates.

use loop_protocol::{Contract, Event, ToolCall, ToolOutcome, ToolSpec, VerificationReport};

/// A failure at a boundary: a message for the ledger, and the cause, kept.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct BoundaryError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
    /// The run is to stop here, unended, and be resumed (an outage, not
    /// a failure of the task).
    interrupted: bool,
}

impl BoundaryError {
    /// A failure described by `message` alone.
    pub fn new(message: impl Into<String>) -> Self {
        BoundaryError {
            message: message.into(),
            source: None,
            interrupted: false,
        }
    }

    /// The run cannot go on now, though nothing is wrong with the task
    /// (a child task of its stopped before its end): the Director stops
    /// with nothing decided and the task is left to be resumed.
    pub fn interrupted(message: impl Into<String>) -> Self {
        BoundaryError {
            interrupted: true,
            ..BoundaryError::new(message)
        }
    }

    /// Whether this stops the run unended (see [`BoundaryError::interrupted`]).
    pub fn is_interrupted(&self) -> bool {
        self.interrupted
    }

    /// A failure caused by `cause` (its text is the message).
    pub fn caused_by(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        BoundaryError {
            message: cause.to_string(),
            source: Some(Box::new(cause)),
            interrupted: false,
        }
    }

    /// What the ledger records.
    pub fn message(&self) -> &str {
        &self.message
    }
}

pub use loop_protocol::Model;

/// The tools, behind the one authority choke point.
pub trait Tools {
    /// What is offered to the model.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Check authority and execute. Refusals and failures are observations,
    /// never errors: an `Err` means the runtime itself cannot go on.
    fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError>;
    /// A new step begins (per-step limits, such as changed lines, restart).
    fn begin_step(&mut self) {}
    /// Whether the model driving the task takes images (what `view_image`
    /// may show it); told before the first step.
    fn set_images(&mut self, on: bool) {
        let _ = on;
    }
    /// Merkle root of the workspace content now (progress keys on content).
    fn workspace_root(&mut self) -> Result<String, BoundaryError>;
    /// Whether this run's workspace was rebuilt from the store's record
    /// (the task moved here from a runtime that stopped): what a call in
    /// flight did outside the workspace is then unknown, even when the
    /// workspace is as it was before the call.
    fn rebuilt(&self) -> bool {
        false
    }
    /// The rule that makes `call` wait for a person's approval, if any.
    fn needs_approval(&self, call: &ToolCall) -> Option<String> {
        let _ = call;
        None
    }
    /// A person approved `call_id`: let it run.
    fn approve(&mut self, call_id: &str) {
        let _ = call_id;
    }
    /// Whether a failed call failed for a passing reason (worth a retry):
    /// what the tool that saw the error said.
    fn transient(&self, observation: &loop_protocol::Observation) -> bool {
        observation.transient
    }
    /// What running `call` again would do (for resuming an interrupted
    /// step): its spec says; a tool without one is never run twice.
    fn effect(&self, call: &ToolCall) -> loop_protocol::Effect {
        self.specs()
            .into_iter()
            .find(|s| s.name == call.tool)
            .map_or(loop_protocol::Effect::AtMostOnce, |s| s.effect)
    }
    /// The change so far as a unified diff (shown to the checker).
    fn change_summary(&mut self) -> String {
        String::new()
    }
    /// Run the child task a `delegate` call of step `step` proposes (the
    /// step and the call's id name the child, found again when the call
    /// runs again after a stop), granted out of what this task has `left`: the call's outcome, and the child's
    /// record when one was granted (what it used is charged to this task).
    /// Where no child can run, the call is refused.
    fn delegate(
        &mut self,
        step: u32,
        call: &ToolCall,
        left: &loop_protocol::delegation::Left,
    ) -> Result<(ToolOutcome, Option<loop_protocol::ChildRun>), BoundaryError> {
        let _ = (step, left);
        Ok((delegation_off(call), None))
    }
    /// Run the children several `delegate` calls propose, granted out of
    /// `left` one after another (each out of what the ones before it were
    /// granted): one answer per call, in their order. By default one at
    /// a time, each granted out of what the ones before it used.
    fn delegate_many(
        &mut self,
        step: u32,
        calls: &[ToolCall],
        left: &loop_protocol::delegation::Left,
    ) -> Result<Vec<(ToolOutcome, Option<loop_protocol::ChildRun>)>, BoundaryError> {
        let mut left = left.clone();
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            let (o, child) = self.delegate(step, call, &left)?;
            if let Some(c) = &child {
                left = left.less(c.used.steps, c.used.tokens, c.used.usd);
            }
            out.push((o, child));
        }
        Ok(out)
    }
}

/// Runs the contract's checks on sealed, fresh snapshots.
pub trait Verifier {
    /// One verification pass. `Err` means the verifier could not run at all.
    fn verify(
        &mut self,
        contract: &Contract,
        contract_sha256: &str,
        attempt: u32,
    ) -> Result<VerificationReport, BoundaryError>;
}

/// The append-only, hash-chained record. An append must be durable before it returns.
pub trait Ledger {
    /// Append one event.
    fn append(&mut self, event: &Event) -> Result<(), BoundaryError>;
}

/// Time, injected so the Director is deterministic under test.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
    /// Wait `ms` (a backoff). Fakes advance instead of sleeping.
    fn pause(&self, ms: u64) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// Sees every event after it is recorded (presentation, streaming).
pub trait Observer {
    /// Called once per recorded event, in order.
    fn on_event(&mut self, event: &Event);
    /// What is happening now that no event records yet (the model being
    /// asked): for a person watching.
    fn live(&mut self, moment: &loop_protocol::Live) {
        let _ = moment;
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&mut self, _event: &Event) {}
}

pub use loop_protocol::ApprovalDecision;

/// Where approvals are asked and answered (persisted, so a pending one
/// survives a restart of the runtime).
pub trait Approvals {
    /// Record a pending request.
    fn request(
        &mut self,
        approval_id: &str,
        payload: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), BoundaryError>;
    /// The guidance a person gave with their answer, if any.
    fn message(&mut self, approval_id: &str) -> Option<String> {
        let _ = approval_id;
        None
    }
    /// Who or what gave the answer to `approval_id`, for the ledger.
    fn decided_by(&mut self, approval_id: &str) -> Option<String> {
        let _ = approval_id;
        None
    }
    /// Wait for the answer until `deadline_ms` (then it is `Expired`), or
    /// until `cancel` is set.
    fn wait(
        &mut self,
        approval_id: &str,
        deadline_ms: u64,
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<ApprovalDecision, BoundaryError>;
}

/// A `delegate` call where no child can run (the contract does not allow
/// it, or these tools run none): refused, with the rule.
pub fn delegation_off(call: &ToolCall) -> ToolOutcome {
    let off = loop_protocol::delegation::Refusal::Off;
    ToolOutcome {
        observation: loop_protocol::Observation::refused(
            &call.id,
            &call.tool,
            off.rule(),
            off.to_string(),
        ),
        control: None,
    }
}
