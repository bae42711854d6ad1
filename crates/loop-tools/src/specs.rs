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

/// The `delegate` tool's spec: offered by a runtime that runs child
/// tasks, to a task whose contract allows it (not among [`all`]).
pub fn delegate() -> ToolSpec {
    let list =
        |what: &str| json!({"type": "array", "items": {"type": "string"}, "description": what});
    spec(
        ToolName::Delegate.as_str(),
        "Hand part of the work to a child task with its own contract, run to its end before this call returns. It may change only the paths you give it (beneath yours), keeps all your rules, and its budget comes out of what you have left. If it is verified, what it changed is merged into your workspace through your own rules; either way you see how it ended. Nothing it does verifies your own contract.",
        json!({
            "instruction": {"type": "string", "description": "what the child is to do"},
            "criteria": {"type": "array", "description": "its acceptance criteria, as a contract file's: [{id, text, checks: [{run: CMD} | {file_exists: PATH} | {file_contains: PATH, text: T} | …]}]", "items": {"type": "object"}},
            "paths": list("directories or files it may change (`pkg/a`, `docs/a.md`; `.` for all you may change); no patterns"),
            "network_allow": list("hosts its checks may reach, from your allow-list"),
            "protected": list("more globs it may not write"),
            "browser": {"type": "boolean", "description": "it may drive the browser (only if you may; default false)"},
            "exec": {"type": "array", "description": "more exec rules for its commands, each stricter", "items": {"type": "object", "properties": {"prefix": {"type": "string"}, "decision": {"enum": ["prompt", "forbidden"]}}, "required": ["prefix", "decision"], "additionalProperties": false}},
            "budget": {"type": "object", "properties": {
                "max_steps": {"type": "integer", "minimum": 1},
                "max_tokens": {"type": "integer", "minimum": 1},
                "budget_usd": {"type": "number", "minimum": 0},
                "timeout_secs": {"type": "integer", "minimum": 1}
            }, "required": ["max_steps", "max_tokens", "timeout_secs"], "additionalProperties": false},
            "max_children": {"type": "integer", "minimum": 0, "description": "children it may itself start (default 0)"},
            "max_depth": {"type": "integer", "minimum": 0, "description": "levels of children below it (default 0)"}
        }),
        &["instruction", "criteria", "paths", "budget"],
        // Run again after a stop, it finds the child it started.
        Effect::Idempotent,
    )
}

/// The document tools' specs (see `documents.rs`): offered to a task that
/// works with documents.
pub fn documents() -> Vec<ToolSpec> {
    let cell = json!({"description": "a number, text, true/false, or null for an empty cell"});
    vec![
        spec(
            crate::documents::READ,
            "Read a spreadsheet (csv, tsv, xlsx, xlsm, xls, xlsb, ods: every sheet, each cell named with its type, formulas with their stored values), a Word document (docx: headings, paragraphs, tables) or a PDF (its text page by page).",
            json!({"path": {"type": "string", "description": "workspace-relative path"}}),
            &["path"],
            Effect::Pure,
        ),
        spec(
            crate::documents::VIEW_IMAGE,
            "Look at an image in the workspace (PNG, JPEG, GIF or WebP, at most 3.75 MiB): it is shown to you with the result, if you take images.",
            json!({"path": {"type": "string", "description": "workspace-relative path"}}),
            &["path"],
            Effect::Pure,
        ),
        spec(
            crate::documents::WRITE_SHEET,
            "Create or replace a spreadsheet: .xlsx (several sheets, typed cells, formulas) or .csv/.tsv (one sheet). Formulas are not calculated: give each the value it is to be stored with.",
            json!({
                "path": {"type": "string", "description": "workspace-relative path ending in .xlsx, .csv or .tsv"},
                "sheets": {"type": "array", "minItems": 1, "items": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "rows": {"type": "array", "description": "rows from A1, each a list of cells", "items": {"type": "array", "items": cell}},
                    "formulas": {"type": "array", "items": {"type": "object", "properties": {
                        "cell": {"type": "string", "description": "such as B5"},
                        "formula": {"type": "string", "description": "such as SUM(B2:B4)"},
                        "value": {"description": "the value stored as its result"}
                    }, "required": ["cell", "formula"], "additionalProperties": false}}
                }, "required": ["name"], "additionalProperties": false}}
            }),
            &["path", "sheets"],
            Effect::Idempotent,
        ),
        spec(
            crate::documents::WRITE_DOC,
            "Create or replace a Word document (.docx) from blocks in order: headings (level 0 is the title, 1-9), paragraphs and tables.",
            json!({
                "path": {"type": "string", "description": "workspace-relative path ending in .docx"},
                "blocks": {"type": "array", "items": {"type": "object", "properties": {
                    "kind": {"enum": ["heading", "paragraph", "table"]},
                    "level": {"type": "integer", "minimum": 0, "maximum": 9},
                    "text": {"type": "string"},
                    "rows": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
                }, "required": ["kind"], "additionalProperties": false}}
            }),
            &["path", "blocks"],
            Effect::Idempotent,
        ),
    ]
}

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

/// The `browser` tool's spec (offered when granted).
pub fn browser() -> ToolSpec {
    spec(
        crate::browser::NAME,
        "Drive a headless Chromium in the task's sandbox. `open` a url (http or https; with `serve`, a shell command started first in the background in the same sandbox, such as `python3 -m http.server 8000 --bind 127.0.0.1`, reached at http://127.0.0.1:8000/; the workspace is read-only to it); `click` or `type` into the element a CSS `selector` matches; `read` the page's visible text and accessibility tree; `screenshot` it (kept as evidence, shown to you if you take images); `close` it. The browser reaches the sandbox's own 127.0.0.1 and only the hosts the task may reach.",
        json!({
            "action": {"type": "string", "enum": ["open", "click", "type", "read", "screenshot", "close"]},
            "url": {"type": "string", "description": "for open"},
            "serve": {"type": "string", "description": "for open: a server command to start first (the exec policy applies)"},
            "selector": {"type": "string", "description": "for click and type: a CSS selector"},
            "text": {"type": "string", "description": "for type"},
            "timeout_secs": {"type": "integer", "minimum": 1, "description": "for this call (default 30)"}
        }),
        &["action"],
        Effect::AtMostOnce,
    )
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
