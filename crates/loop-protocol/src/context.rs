//! The model's context: the system prompt, the instruction, and every turn
//! and observation so far. Built by the Director for every model, scripted
//! or real, so the same loop serves both.

use crate::action::{ToolCall, ToolSpec};
use crate::hash::{CanonicalError, canonical_sha256};
use crate::observation::{Observation, ObservationStatus};
use serde::{Deserialize, Serialize};

/// One message in the context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// From the user or the runtime (instruction, verification feedback).
    User {
        /// Text.
        content: String,
    },
    /// What the model proposed.
    Assistant {
        /// Stated reasoning.
        thought: Option<String>,
        /// Calls.
        calls: Vec<ToolCall>,
    },
    /// A tool's observation (untrusted data).
    Tool {
        /// The call answered.
        call_id: String,
        /// The tool.
        tool: String,
        /// Bounded content.
        content: String,
    },
}

/// Everything the model is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// The system prompt.
    pub system: String,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// The conversation.
    pub messages: Vec<Message>,
}

impl Context {
    /// A fresh context: the system prompt, the tools, and the instruction.
    pub fn new(system: String, tools: Vec<ToolSpec>, instruction: &str) -> Self {
        Context {
            system,
            tools,
            messages: vec![Message::User {
                content: instruction.to_string(),
            }],
        }
    }

    /// Record the model's turn.
    pub fn push_turn(&mut self, thought: Option<String>, calls: Vec<ToolCall>) {
        self.messages.push(Message::Assistant { thought, calls });
    }

    /// Record an observation.
    pub fn push_observation(&mut self, obs: &Observation) {
        let status = match &obs.status {
            ObservationStatus::Ok => String::new(),
            ObservationStatus::Refused { rule } => format!("[refused: {rule}] "),
            ObservationStatus::Error => "[error] ".to_string(),
        };
        self.messages.push(Message::Tool {
            call_id: obs.call_id.clone(),
            tool: obs.tool.clone(),
            content: format!("{status}{}", obs.content),
        });
    }

    /// Record runtime feedback (e.g. failing verification evidence).
    pub fn push_feedback(&mut self, text: String) {
        self.messages.push(Message::User { content: text });
    }

    /// SHA-256 over the canonical context: what exactly the model was shown.
    pub fn sha256(&self) -> Result<String, CanonicalError> {
        canonical_sha256(self)
    }
}
