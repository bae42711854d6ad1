//! The tools offered to the model, with JSON Schemas of their arguments.

use loop_protocol::{Effect, ToolName, ToolSpec};
use serde_json::json;

/// Names of the tools this build offers.
pub const TOOL_NAMES: [&str; 7] = [
    ToolName::ReadFile.as_str(),
    ToolName::WriteFile.as_str(),
    ToolName::EditFile.as_str(),
    ToolName::ApplyPatch.as_str(),
    ToolName::ListFiles.as_str(),
    ToolName::RunCommand.as_str(),
    ToolName::Finish.as_str(),
];

/// Every tool's spec.
pub fn all() -> Vec<ToolSpec> {
    vec![
        spec(
            ToolName::ReadFile.as_str(),
            "Read a text file in the workspace.",
            json!({"path": {"type": "string", "description": "workspace-relative path"}}),
            &["path"],
            Effect::Pure,
        ),
        spec(
            ToolName::WriteFile.as_str(),
            "Create or replace a file with the given content (atomic).",
            json!({
                "path": {"type": "string", "description": "workspace-relative path"},
                "content": {"type": "string"}
            }),
            &["path", "content"],
            Effect::Idempotent,
        ),
        spec(
            ToolName::EditFile.as_str(),
            "Replace one exact, unique occurrence of `old` with `new` in a file.",
            json!({
                "path": {"type": "string"},
                "old": {"type": "string", "description": "text that occurs exactly once"},
                "new": {"type": "string"}
            }),
            &["path", "old", "new"],
            Effect::Idempotent,
        ),
        spec(
            ToolName::ApplyPatch.as_str(),
            "Apply a unified diff (one or more files; create with --- /dev/null, delete with +++ /dev/null, rename with different ---/+++ paths). All hunks apply or none do; a mismatch reports the file, the hunk and the lines that differ.",
            json!({"patch": {"type": "string", "description": "unified diff text"}}),
            &["patch"],
            Effect::Idempotent,
        ),
        spec(
            ToolName::ListFiles.as_str(),
            "List files under a directory of the workspace (recursive).",
            json!({"path": {"type": "string", "description": "directory, default the root"}}),
            &[],
            Effect::Pure,
        ),
        spec(
            ToolName::RunCommand.as_str(),
            "Run a shell command (sh -c) in the workspace root, sandboxed, with a timeout.",
            json!({
                "command": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1},
                "terminal": {"type": "boolean", "description": "run on a pseudo-terminal the runtime makes, for a command that needs one (its output is both streams together)"}
            }),
            &["command"],
            Effect::AtMostOnce,
        ),
        spec(
            ToolName::Finish.as_str(),
            "Claim the task is done and ask for verification. The runtime runs every acceptance check on a sealed copy; failing evidence comes back to you.",
            json!({"summary": {"type": "string"}}),
            &["summary"],
            Effect::Pure,
        ),
    ]
}

fn spec(
    name: &str,
    description: &str,
    properties: serde_json::Value,
    required: &[&str],
    effect: Effect,
) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        effect,
        parameters: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        }),
    }
}
