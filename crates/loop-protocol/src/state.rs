//! The states of a task. Which transitions are legal is the Director's
//! business (`loop-core`); the names cross boundaries (ledger, status).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Created, not started.
    Pending,
    /// Asking the model for the next action.
    Planning,
    /// Executing the proposed actions.
    Acting,
    /// Running the contract's checks on sealed snapshots.
    Verifying,
    /// Waiting for a person's answer.
    AwaitingInput,
    /// Waiting for a person's approval of an action.
    AwaitingApproval,
    /// Ended; the outcome says how.
    Terminal,
}

impl TaskState {
    /// All states, for exhaustive tests and tables.
    pub const ALL: [TaskState; 7] = [
        TaskState::Pending,
        TaskState::Planning,
        TaskState::Acting,
        TaskState::Verifying,
        TaskState::AwaitingInput,
        TaskState::AwaitingApproval,
        TaskState::Terminal,
    ];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Planning => "planning",
            TaskState::Acting => "acting",
            TaskState::Verifying => "verifying",
            TaskState::AwaitingInput => "awaiting_input",
            TaskState::AwaitingApproval => "awaiting_approval",
            TaskState::Terminal => "terminal",
        }
    }

    /// The state a [`TaskState::name`] names.
    pub fn from_name(name: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl PartialEq<str> for TaskState {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

impl PartialEq<&str> for TaskState {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
