//! # loop-core
//!
//! The Director: Loop Engine's deterministic decision maker. It drives a
//! task through plan → act → observe → verify over four traits —
//! [`Model`], [`Tools`], [`Verifier`] and [`Ledger`] — with time coming in
//! through a [`Clock`]. No OS or network I/O happens here, so every rule
//! (budgets, the state machine, "finish is a claim, not a completion",
//! "a silent model is lost") is tested with in-memory fakes, step by step.

pub mod budget;
pub mod director;
pub mod feedback;
pub mod machine;
pub mod progress;
pub mod prompt;
pub mod review;
pub mod state;
pub mod traits;

pub use budget::Budget;
pub use director::{
    Checkpoints, Director, DirectorError, Extension, Parts, RunResult, VerifyPolicy,
};
pub use loop_protocol::context::{Context, Message};
pub use machine::{InvalidTransition, Machine, allowed};
pub use progress::{ProgressConfig, ProgressDetector, StallVerdict};
pub use traits::{
    ApprovalDecision, Approvals, BoundaryError, Clock, Ledger, Model, NoObserver, Observer,
    SystemClock, Tools, Verifier,
};

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
