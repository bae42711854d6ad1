//! The tools offered to the model, with JSON Schemas of their arguments.

use loop_protocol::{Effect, ToolSpec};
use serde_json::json;

/// Names of the tools this build offers.
pub const TOOL_NAMES: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "list_files",
    "run_command",
    "finish",
];

/// Every tool's spec.
pub fn all() -> Vec<ToolSpec> {
    vec![
        spec(
            "read_file",
            "Read a text file in the workspace.",
            json!({"path": {"type": "string", "description": "workspace-relative path"}}),
            &["path"],
            Effect::Pure,
        ),
        spec(
            "write_file",
            "Create or replace a file with the given content (atomic).",
            json!({
                "path": {"type": "string", "description": "workspace-relative path"},
                "content": {"type": "string"}
            }),
            &["path", "content"],
            Effect::Idempotent,
        ),
        spec(
            "edit_file",
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
            "apply_patch",
            "Apply a unified diff (one or more files; create with --- /dev/null, delete with +++ /dev/null, rename with different ---/+++ paths). All hunks apply or none do; a mismatch reports the file, the hunk and the lines that differ.",
            json!({"patch": {"type": "string", "description": "unified diff text"}}),
            &["patch"],
            Effect::Idempotent,
        ),
        spec(
            "list_files",
            "List files under a directory of the workspace (recursive).",
            json!({"path": {"type": "string", "description": "directory, default the root"}}),
            &[],
            Effect::Pure,
        ),
        spec(
            "run_command",
            "Run a shell command (sh -c) in the workspace root, sandboxed, with a timeout.",
            json!({
                "command": {"type": "string"},
                "timeout_secs": {"type": "integer", "minimum": 1}
            }),
            &["command"],
            Effect::AtMostOnce,
        ),
        spec(
            "finish",
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
