//! What a model proposes: tool calls, grouped in turns, with token usage.

use serde::{Deserialize, Serialize};

/// One proposed tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Unique within the task (assigned by the runtime if the model gave none).
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// Arguments, validated by the tool against its schema.
    pub args: serde_json::Value,
}

/// Token usage of one model call, as reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// True when the provider reported nothing and the runtime estimated.
    #[serde(default)]
    pub estimated: bool,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// One model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// The model's stated reasoning, if any (recorded, never trusted).
    pub thought: Option<String>,
    /// Proposed calls, executed in order.
    pub calls: Vec<ToolCall>,
    /// What this turn cost.
    pub usage: Usage,
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelReply {
    /// A turn with zero or more tool calls.
    Turn(Turn),
    /// The model has nothing more to say (a script ran out): a stall, never success.
    NothingMore {
        /// Why, for the ledger.
        reason: String,
    },
}

/// Who the model is, for provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// `scripted`, `openai`, `anthropic`, `replay`.
    pub provider: String,
    /// Model name or script path.
    pub name: String,
    /// SHA-256 of the script or recording, when there is one.
    pub source_sha256: Option<String>,
}

/// The description of a tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// What a tool call asks of the Director beyond its observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "control", rename_all = "snake_case")]
pub enum Control {
    /// The model claims the task is done; verification decides.
    Finish {
        /// The model's summary.
        summary: String,
    },
}

/// The result of executing one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// What happened, for the model and the ledger.
    pub observation: crate::observation::Observation,
    /// A control request (only `finish` today).
    pub control: Option<Control>,
}
