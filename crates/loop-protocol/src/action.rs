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
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (cached ones included).
    pub input_tokens: u64,
    /// Of the prompt tokens, how many the provider served from its cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// True when the provider reported nothing and the runtime estimated.
    #[serde(default)]
    pub estimated: bool,
    /// Dollars, from the pricing table (0 when the model is free or unpriced).
    #[serde(default)]
    pub cost_usd: f64,
    /// HTTP attempts this turn took, failed and retried ones included (0 for
    /// models that make no calls).
    #[serde(default)]
    pub attempts: u32,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Add `other` into `self` (a retried call's charge into its turn).
    pub fn absorb(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.estimated |= other.estimated;
        self.cost_usd += other.cost_usd;
        self.attempts = self.attempts.saturating_add(other.attempts);
    }
}

/// Prices in dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Uncached prompt tokens.
    pub input_per_mtok: f64,
    /// Prompt tokens served from the provider's cache.
    pub cached_input_per_mtok: f64,
    /// Completion tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// What `usage` costs at these prices.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let uncached = usage.input_tokens - cached;
        (uncached as f64 * self.input_per_mtok
            + cached as f64 * self.cached_input_per_mtok
            + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// What the Director allows one model call to spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// The most completion tokens the call may ask for (`max_tokens`).
    pub max_output_tokens: u64,
    /// What is left of the task's wall time: the call gives up then.
    pub time_left_ms: Option<u64>,
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
    /// Which provider and model answered (in a fallback chain), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
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
    /// The model answered, but not with anything the runtime can act on
    /// (invalid JSON, prose around it, an unknown tool, bad arguments...).
    /// It costs what it cost and goes back to the model as a typed observation.
    Malformed {
        /// What was wrong, and where.
        error: String,
        /// A bounded excerpt of what the model said.
        excerpt: String,
        /// What the call cost.
        usage: Usage,
    },
    /// No provider answered (after retries and fallbacks). What the failed
    /// attempts cost is still charged.
    Unavailable {
        /// What failed, provider by provider.
        error: String,
        /// What the attempts cost.
        usage: Usage,
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
    /// Settings that shape its answers (endpoint, temperature, prompt hash,
    /// tool protocol, fallbacks, role), for provenance. Never a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Value>,
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
    /// What running a call again would do (how a call a crash interrupted
    /// is settled on resume). The runtime's own knowledge: never sent to a
    /// model, never part of a context's hash.
    #[serde(skip)]
    pub effect: Effect,
}

/// What running a call again would do: how an interrupted call is treated
/// when a task resumes.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Reads only: run it again.
    Pure,
    /// Writes whose repetition is harmless once the edit journal has rolled
    /// back a partial step: run again when the workspace is as it was before
    /// the call, otherwise it completed.
    Idempotent,
    /// May have effects that must not happen twice: never run again once it
    /// may have had an effect; its outcome is recorded as unknown.
    #[default]
    AtMostOnce,
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

/// A call that does not fit the tool it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// A tool that is not offered.
    #[error("{at}: unknown tool `{name}` (offered: {offered})")]
    UnknownTool {
        /// Where.
        at: String,
        /// The name given.
        name: String,
        /// The names offered.
        offered: String,
    },
    /// A missing, unknown or mistyped argument.
    #[error("{at}: {message}")]
    Field {
        /// Where (e.g. `write_file.args.path`).
        at: String,
        /// What.
        message: String,
    },
}

/// Check a call against the offered tools' schemas: the tool exists, the
/// arguments are an object, required properties are present, and the
/// declared primitive types match. (The tool itself validates meaning.)
pub fn check_call(
    tools: &[ToolSpec],
    name: &str,
    args: &serde_json::Value,
    at: &str,
) -> Result<(), CallError> {
    let Some(spec) = tools.iter().find(|t| t.name == name) else {
        return Err(CallError::UnknownTool {
            at: at.to_string(),
            name: name.chars().take(80).collect(),
            offered: tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let serde_json::Value::Object(args) = args else {
        return Err(CallError::Field {
            at: format!("{at}.args"),
            message: format!("must be an object, got a {}", json_kind(args)),
        });
    };
    if let Some(serde_json::Value::Array(required)) = spec.parameters.get("required") {
        for r in required.iter().filter_map(serde_json::Value::as_str) {
            if !args.contains_key(r) {
                return Err(CallError::Field {
                    at: format!("{at}.args.{r}"),
                    message: format!("missing (required by `{name}`)"),
                });
            }
        }
    }
    if let Some(serde_json::Value::Object(props)) = spec.parameters.get("properties") {
        for (k, v) in args {
            let Some(prop) = props.get(k) else {
                return Err(CallError::Field {
                    at: format!("{at}.args.{k}"),
                    message: format!(
                        "`{name}` takes no such argument (it takes: {})",
                        props.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            };
            if let Some(want) = prop.get("type").and_then(serde_json::Value::as_str) {
                let ok = match want {
                    "string" => v.is_string(),
                    "integer" => v.is_i64() || v.is_u64(),
                    "number" => v.is_number(),
                    "boolean" => v.is_boolean(),
                    "array" => v.is_array(),
                    "object" => v.is_object(),
                    _ => true,
                };
                if !ok {
                    return Err(CallError::Field {
                        at: format!("{at}.args.{k}"),
                        message: format!("must be {want}, got a {}", json_kind(v)),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The name of a JSON value's type, as a person would say it.
pub fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "list",
        serde_json::Value::Object(_) => "object",
    }
}

/// The tools this runtime offers, by name (a call's `tool` is the name as
/// the model sent it; [`ToolName::from_name`] reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolName {
    /// Read a text file.
    ReadFile,
    /// Create or replace a file.
    WriteFile,
    /// Replace one exact occurrence in a file.
    EditFile,
    /// Apply a unified diff.
    ApplyPatch,
    /// List files under a directory.
    ListFiles,
    /// Run a shell command in the sandbox.
    RunCommand,
    /// Claim the task is done.
    Finish,
    /// Hand part of the work to a child task (see `delegation.rs`):
    /// offered only where the contract allows it and a runtime runs it.
    Delegate,
}

impl ToolName {
    /// Every tool, in the order they are offered.
    pub const ALL: [ToolName; 8] = [
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::ApplyPatch,
        ToolName::ListFiles,
        ToolName::RunCommand,
        ToolName::Finish,
        ToolName::Delegate,
    ];

    /// The name models call it by.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolName::ReadFile => "read_file",
            ToolName::WriteFile => "write_file",
            ToolName::EditFile => "edit_file",
            ToolName::ApplyPatch => "apply_patch",
            ToolName::ListFiles => "list_files",
            ToolName::RunCommand => "run_command",
            ToolName::Finish => "finish",
            ToolName::Delegate => "delegate",
        }
    }

    /// The tool a name names, if it is one of ours.
    pub fn from_name(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Whether it only reads.
    pub fn reads_only(self) -> bool {
        matches!(self, ToolName::ReadFile | ToolName::ListFiles)
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
