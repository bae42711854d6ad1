//! # loop-protocol
//!
//! The typed values that cross Loop Engine's boundaries: the acceptance
//! [`Contract`](contract::Contract) and its checks, the model's
//! [`ToolCall`](action::ToolCall)s, the runtime's
//! [`Observation`](observation::Observation)s, verification
//! [`evidence`], task [`state`]s, [`outcome`]s, and the [`Event`](event::Event)s
//! that make up a task's ledger. Serde and validation only: no I/O.
//!
//! The one invariant this crate guards with types: an
//! [`Outcome::Verified`](outcome::Outcome::Verified) carries an
//! [`Acceptance`](outcome::Acceptance), which can only be built from a
//! verification report that covers and passes every criterion of the locked
//! contract.

pub mod action;
pub mod context;
pub mod contract;
pub mod delegation;
pub mod event;
pub mod evidence;
pub mod hash;
pub mod live;
pub mod model;
pub mod observation;
pub mod outcome;
pub mod path;
pub mod random;
pub mod skill;
pub mod state;
pub mod text;
pub mod time;
pub mod yaml;

pub use action::{
    CallLimits, Control, Effect, ModelInfo, ModelReply, Price, ToolCall, ToolName, ToolOutcome,
    ToolSpec, Turn, Usage,
};
pub use context::{Context, Message};
pub use contract::{Check, Contract, ContractErrors, Criterion, Diagnostic, Limits, RunCheck};
pub use event::{ApprovalDecision, BudgetUse, ChildRun, Event, LedgerEntry, RuntimeInfo};
pub use evidence::{
    ArtifactEvidence, CheckEvidence, CriterionEvidence, DraftAttempt, DraftingRecord,
    EgressAttempt, FileChange, IntegrityRule, Isolation, KeyedFile, ReusedRun, SetupRecord,
    SetupStep, StackCheckRecord, StreamEvidence, TestTally, TriggerRecord, VerificationReport,
};
pub use live::{Live, LiveFeed};
pub use model::{Model, WireExchange};
pub use observation::{McpCall, Observation, ObservationStatus};
pub use outcome::{
    Acceptance, LimitKind, Outcome, OutcomeKind, OutcomeName, OutcomeRecord, Rejection,
};
pub use path::RelPath;
pub use state::TaskState;
