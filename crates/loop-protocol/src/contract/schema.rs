//! The contract's JSON Schema (draft 2020-12), built from the same key
//! tables the reader walks, so the two cannot drift apart: a key the reader
//! accepts is a property here, and nothing else is (`docs/schema/`, written
//! by `loop schema contract`, is checked against this in the tests).

use super::read::{CHECK_KINDS, CRITERION_KEYS, LIMIT_KEYS, TOP_KEYS, keys_for_kind};
use serde_json::{Value, json};

/// Where the schema says it lives.
pub const CONTRACT_SCHEMA_ID: &str = "https://loop-engine.dev/schema/contract-v1.json";

fn path() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "description": "a path relative to the workspace root, without `..`"
    })
}

fn string_list(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string", "minLength": 1}, "description": description})
}

fn count(description: &str) -> Value {
    json!({"type": "integer", "minimum": 1, "description": description})
}

/// The schema of one check kind: its own key required, only its keys.
fn check_kind(kind: &str) -> Value {
    let mut props = serde_json::Map::new();
    for key in keys_for_kind(kind) {
        let v = match (kind, *key) {
            ("run", "run") => json!({"type": "string", "minLength": 1,
                "description": "a command, run with sh -c in the workspace root"}),
            ("run", "expect_exit") => json!({"type": "integer", "default": 0}),
            ("run", "expect_stdout" | "expect_stderr") => {
                json!({"type": "string", "description": "an exact substring"})
            }
            ("run", "stdout_matches") => {
                json!({"type": "string", "description": "a regular expression (Rust regex syntax)"})
            }
            ("run", "nonempty_tests") => json!({"type": "boolean",
                "description": "true: the output must show tests ran (a recognised runner's summary); absent: a recognised runner's summary that reports no test run fails the check; false: neither (recorded in the contract)"}),
            ("run", "allow_vacuous") => json!({"type": "boolean", "default": false,
                "description": "true: a person accepts that this check passes on an empty workspace (it proves nothing about the project); without it such a check is refused before the contract is locked. A drafted contract may not say it"}),
            ("run", "terminal") => json!({"type": "boolean", "default": false,
                "description": "true: the check runs on a pseudo-terminal the runtime makes and alone reads (a test that needs a terminal), never the caller's; its input is at its end"}),
            ("run", "timeout_secs") => count("seconds the check may take (default 300)"),
            ("pdf_text", "text") => json!({"type": "string", "minLength": 1,
                "description": "a text the page holds (runs of white space count as one)"}),
            ("page", "text") => {
                json!({"type": "string", "minLength": 1, "description": "text the page shows"})
            }
            (_, "text") => json!({"type": "string", "description": "an exact substring"}),
            (_, "regex") => json!({"type": "string", "description": "a regular expression"}),
            (_, "pointer") => json!({"type": "string", "pattern": "^(/.*)?$",
                "description": "an RFC 6901 JSON pointer (\"\" is the whole document)"}),
            ("cell_equals", "value") => {
                json!({"description": "the value expected in the cell (a number, text, a boolean, null for an empty cell), or rows of values for a range"})
            }
            (_, "value") => json!({"description": "the JSON value expected at the pointer"}),
            (_, "sheet") => json!({"type": "string", "minLength": 1,
                "description": "the sheet's name (the first sheet when absent)"}),
            (_, "cell") => json!({"type": "string",
                "pattern": "^\\$?[A-Za-z]{1,3}\\$?[1-9][0-9]*(:\\$?[A-Za-z]{1,3}\\$?[1-9][0-9]*)?$",
                "description": "a cell (B4) or a range (A1:C3)"}),
            (_, "columns") => json!({"type": "array", "minItems": 1, "items": {"type": "string"},
                "description": "column names the header row has, in this order"}),
            (_, "headings") => json!({"type": "array", "minItems": 1, "items": {"type": "string"},
                "description": "headings the document has, in this order"}),
            (_, "rows") => json!({"type": "array", "minItems": 1,
                "items": {"type": "array", "items": {}},
                "description": "rows one table holds, each its cells from the first column"}),
            ("page", "page") => json!({"type": "string", "pattern": "^/",
                "description": "the page's path, as the server serves it (from /)"}),
            (_, "page") => count("the page (from 1); any page when absent"),
            (_, "serve") => json!({"type": "string", "minLength": 1,
                "description": "the command that serves the project (sh -c in the workspace root, inside the check's sandbox)"}),
            (_, "port") => json!({"type": "integer", "minimum": 1, "maximum": 65535,
                "description": "the port it listens on, on 127.0.0.1 of the check's own network"}),
            (_, "title") => {
                json!({"type": "string", "minLength": 1, "description": "the page's title, exactly"})
            }
            (_, "element") => {
                json!({"type": "string", "minLength": 1, "description": "a CSS selector some element matches"})
            }
            ("page", "timeout_secs") => {
                count("seconds for the server to start and the page to show it (default 60)")
            }
            _ => path(),
        };
        props.insert(key.to_string(), v);
    }
    let required: Vec<&str> = keys_for_kind(kind)
        .iter()
        .copied()
        .filter(|k| match kind {
            "page" => matches!(*k, "page" | "serve" | "port"),
            _ => {
                *k == kind
                    || matches!(
                        *k,
                        "text" | "regex" | "value" | "cell" | "columns" | "rows" | "headings"
                    )
            }
        })
        .collect();
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false
    })
}

/// The contract's schema.
pub fn contract_schema() -> Value {
    let limits: serde_json::Map<String, Value> = LIMIT_KEYS
        .iter()
        .map(|k| {
            let v = match *k {
                "budget_usd" => json!({"type": "number", "minimum": 0,
                    "description": "dollars the task may spend"}),
                "max_steps" => count("model turns (default 30)"),
                "max_tokens" => count("tokens (default 200000)"),
                "timeout_secs" => count("the task's wall time (default 1800)"),
                "max_verifications" => count("verification passes (default 5)"),
                "max_diff_lines" => count("lines one step may change (default 250)"),
                "disk_mb" => count(
                    "MiB one command may write (its /tmp and its layer over the workspace, on one size-capped tmpfs), and the task's commands may grow the workspace by (default 2048)",
                ),
                "write_mb" => count(
                    "MiB the task's commands may write in all (what each leaves on its disk, added up; default 16384): past it no more commands run",
                ),
                "max_children" => json!({"type": "integer", "minimum": 0,
                    "description": "child tasks the task may delegate to (default 0: none)"}),
                "max_depth" => json!({"type": "integer", "minimum": 0,
                    "description": "levels of children allowed below the task (default 0)"}),
                _ => count("the largest file a command may bring in (default 128 MiB)"),
            };
            (k.to_string(), v)
        })
        .collect();
    let top: serde_json::Map<String, Value> = TOP_KEYS
        .iter()
        .map(|k| {
            let v = match *k {
                "version" => json!({"const": 1}),
                "instruction" => json!({"type": "string", "minLength": 1}),
                "criteria" => json!({"type": "array", "minItems": 1,
                    "items": {"$ref": "#/$defs/criterion"}}),
                "artifacts" => json!({"type": "array", "items": path(),
                    "description": "files that must exist at the end, hashed into the receipt"}),
                "protected" => string_list("globs never writable, added to the defaults"),
                "unprotect" => string_list("default protections lifted, by their exact text"),
                "allow_check_changes" => {
                    string_list("paths of the check-integrity set the model may change")
                }
                "judge_may_change" => string_list(
                    "paths that decide a check's verdict (a script it runs, a module it imports, a file it compares) which the task may write, as a person insists; without it such a contract is refused",
                ),
                "network_allow" => string_list(
                    "hosts the checks may reach through the egress proxy (host, host:port, *.domain, or a preset: pypi, npm, crates)",
                ),
                "browser" => json!({"type": "boolean",
                    "description": "the task may drive a headless browser in its sandbox (the browser tool); default false"}),
                _ => json!({"type": "object", "properties": limits,
                    "additionalProperties": false}),
            };
            (k.to_string(), v)
        })
        .collect();
    let criterion: serde_json::Map<String, Value> = CRITERION_KEYS
        .iter()
        .map(|k| {
            let v = match *k {
                "id" => json!({"type": "string", "pattern": "^[A-Za-z0-9._-]+$"}),
                "text" => json!({"type": "string", "description": "defaults to the id"}),
                "guard" => json!({"type": "boolean", "default": false,
                    "description": "a regression guard: it held before the task began and must still hold"}),
                _ => json!({"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/check"}}),
            };
            (k.to_string(), v)
        })
        .collect();
    let checks: Vec<Value> = CHECK_KINDS.iter().map(|k| check_kind(k)).collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": CONTRACT_SCHEMA_ID,
        "title": "Loop Engine contract (version 1)",
        "type": "object",
        "properties": top,
        "required": ["instruction", "criteria"],
        "additionalProperties": false,
        "$defs": {
            "criterion": {
                "type": "object",
                "properties": criterion,
                "required": ["id", "checks"],
                "additionalProperties": false
            },
            "check": {"oneOf": checks}
        }
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn keys(v: &Value) -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k
    }

    fn sorted(list: &[&str]) -> Vec<String> {
        let mut k: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        k.sort();
        k
    }

    #[test]
    fn the_schema_names_exactly_the_keys_the_reader_accepts() {
        let s = contract_schema();
        assert_eq!(keys(&s["properties"]), sorted(TOP_KEYS));
        assert_eq!(
            keys(&s["properties"]["limits"]["properties"]),
            sorted(LIMIT_KEYS)
        );
        assert_eq!(
            keys(&s["$defs"]["criterion"]["properties"]),
            sorted(CRITERION_KEYS)
        );
        let checks = s["$defs"]["check"]["oneOf"].as_array().unwrap();
        assert_eq!(checks.len(), CHECK_KINDS.len());
        for (kind, schema) in CHECK_KINDS.iter().zip(checks) {
            assert_eq!(
                keys(&schema["properties"]),
                sorted(keys_for_kind(kind)),
                "{kind}"
            );
            assert!(
                schema["required"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(kind))
            );
        }
    }
}
