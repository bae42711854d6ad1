//! Turning what a model said into tool calls, strictly.
//!
//! Two ways in: native tool calls (the provider hands over a name and an
//! argument string) and, for models without tool calling, the JSON action
//! protocol — the whole answer is exactly one JSON object:
//!
//! ```json
//! {"thought": "why", "calls": [{"tool": "write_file", "args": {"path": "a", "content": "b"}}]}
//! ```
//!
//! Anything else — prose around it, several objects, invalid JSON, an
//! unknown tool, a missing or mistyped argument, enormous arguments — is an
//! [`ActionError`] naming what was wrong and where. It never panics.

use loop_protocol::action::CallError;
use loop_protocol::{ToolCall, ToolSpec};
use serde_json::Value;

/// The largest answer accepted, in bytes.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// The most calls in one answer.
pub const MAX_CALLS: usize = 16;

/// What was wrong with an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// Nothing at all.
    #[error("the answer is empty; expected one JSON object with `calls`")]
    Empty,
    /// Over the size limit.
    #[error("the answer is {0} bytes, more than the {MAX_ANSWER_BYTES}-byte limit")]
    TooLarge(usize),
    /// Not JSON (position given as line:column of the answer).
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    InvalidJson {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Text before or after the object.
    #[error("{0} the JSON object; the whole answer must be exactly one object")]
    Surrounded(String),
    /// Not an object at the top.
    #[error("the answer is a JSON {0}, not an object with `calls`")]
    NotAnObject(&'static str),
    /// A required field is missing or mistyped.
    #[error("{at}: {message}")]
    Field {
        /// Where (e.g. `calls[1].args.path`).
        at: String,
        /// What.
        message: String,
    },
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
    /// Too many calls in one answer.
    #[error("{0} calls in one answer; at most {MAX_CALLS}")]
    TooManyCalls(usize),
}

/// One parsed answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedAnswer {
    /// The stated reasoning.
    pub thought: Option<String>,
    /// The calls, ids still to be assigned.
    pub calls: Vec<(String, Value)>,
}

/// Parse an answer in the JSON action protocol.
pub fn parse_json_answer(text: &str, tools: &[ToolSpec]) -> Result<ParsedAnswer, ActionError> {
    if text.len() > MAX_ANSWER_BYTES {
        return Err(ActionError::TooLarge(text.len()));
    }
    let trimmed = strip_fence(text.trim());
    if trimmed.is_empty() {
        return Err(ActionError::Empty);
    }
    let mut stream = serde_json::Deserializer::from_str(trimmed).into_iter::<Value>();
    let first = match stream.next() {
        None => return Err(ActionError::Empty),
        Some(Err(e)) => {
            // Prose before a JSON object reads as a syntax error at 1:1.
            if !trimmed.starts_with(['{', '[', '"']) && trimmed.contains('{') {
                return Err(ActionError::Surrounded("prose before".into()));
            }
            return Err(ActionError::InvalidJson {
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            });
        }
        Some(Ok(v)) => v,
    };
    let rest = trimmed[stream.byte_offset()..].trim();
    if !rest.is_empty() {
        let what = if rest.starts_with('{') {
            "a second JSON object".to_string()
        } else {
            format!("text ({} bytes)", rest.len())
        };
        return Err(ActionError::Surrounded(format!("{what} after")));
    }
    let Value::Object(obj) = first else {
        return Err(ActionError::NotAnObject(kind(&first)));
    };
    for key in obj.keys() {
        if key != "thought" && key != "calls" {
            return Err(ActionError::Field {
                at: key.clone(),
                message: "unknown field (allowed: thought, calls)".into(),
            });
        }
    }
    let thought = match obj.get("thought") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ActionError::Field {
                at: "thought".into(),
                message: format!("must be a string, got a {}", kind(other)),
            });
        }
    };
    let calls = match obj.get("calls") {
        None => {
            return Err(ActionError::Field {
                at: "calls".into(),
                message: "missing; give a list of {\"tool\", \"args\"} objects".into(),
            });
        }
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(ActionError::Field {
                at: "calls".into(),
                message: format!("must be a list, got a {}", kind(other)),
            });
        }
    };
    if calls.len() > MAX_CALLS {
        return Err(ActionError::TooManyCalls(calls.len()));
    }
    let mut out = Vec::new();
    for (i, c) in calls.iter().enumerate() {
        let at = format!("calls[{i}]");
        let Value::Object(c) = c else {
            return Err(ActionError::Field {
                at,
                message: format!("must be an object, got a {}", kind(c)),
            });
        };
        for key in c.keys() {
            if key != "tool" && key != "args" {
                return Err(ActionError::Field {
                    at: format!("{at}.{key}"),
                    message: "unknown field (allowed: tool, args)".into(),
                });
            }
        }
        let Some(Value::String(name)) = c.get("tool") else {
            return Err(ActionError::Field {
                at: format!("{at}.tool"),
                message: "missing or not a string".into(),
            });
        };
        let args = c
            .get("args")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        validate_call(tools, name, &args, &at)?;
        out.push((name.clone(), args));
    }
    Ok(ParsedAnswer {
        thought,
        calls: out,
    })
}

/// Parse a native tool call's argument string and check it against its tool.
pub fn parse_native_call(
    tools: &[ToolSpec],
    index: usize,
    name: &str,
    arguments: &str,
) -> Result<Value, ActionError> {
    let at = format!("tool call {} (`{name}`)", index + 1);
    if arguments.len() > MAX_ANSWER_BYTES {
        return Err(ActionError::TooLarge(arguments.len()));
    }
    let args: Value = if arguments.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_str(arguments).map_err(|e| ActionError::Field {
            at: format!("{at} arguments"),
            message: format!(
                "invalid JSON at line {}, column {}: {e}",
                e.line(),
                e.column()
            ),
        })?
    };
    validate_call(tools, name, &args, &at)?;
    Ok(args)
}

/// Check a call against the offered tools' schemas (see
/// [`loop_protocol::action::check_call`]).
pub fn validate_call(
    tools: &[ToolSpec],
    name: &str,
    args: &Value,
    at: &str,
) -> Result<(), ActionError> {
    loop_protocol::action::check_call(tools, name, args, at).map_err(|e| match e {
        CallError::UnknownTool { at, name, offered } => {
            ActionError::UnknownTool { at, name, offered }
        }
        CallError::Field { at, message } => ActionError::Field { at, message },
    })
}

/// Small models wrap JSON in a Markdown fence; that alone is forgiven.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    match rest.trim_end().strip_suffix("```") {
        Some(inner) => inner.trim(),
        None => text,
    }
}

fn kind(v: &Value) -> &'static str {
    loop_protocol::action::json_kind(v)
}

/// The protocol as the model is told it (appended to the system prompt).
pub fn json_protocol_instructions(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "\nAnswer with exactly one JSON object and nothing else (no prose, no second object):\n\
         {\"thought\": \"a short reason\", \"calls\": [{\"tool\": \"NAME\", \"args\": {...}}]}\n\
         Tools and their arguments (JSON Schema):\n",
    );
    for t in tools {
        s.push_str(&format!(
            "- {}: {} {}\n",
            t.name, t.description, t.parameters
        ));
    }
    s
}

/// Number calls `t{turn}-c{i}` when the model gave no ids.
pub fn number_calls(turn: u32, calls: Vec<(String, Value)>) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, (tool, args))| ToolCall {
            id: format!("t{turn}-c{}", i + 1),
            tool,
            args,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                effect: Default::default(),
                name: "write_file".into(),
                description: "write".into(),
                parameters: serde_json::json!({
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]
                }),
            },
            ToolSpec {
                effect: Default::default(),
                name: "finish".into(),
                description: "claim".into(),
                parameters: serde_json::json!({
                    "type": "object",
                    "properties": {"summary": {"type": "string"}},
                    "required": ["summary"]
                }),
            },
        ]
    }

    #[test]
    fn a_well_formed_answer_parses() {
        let a = parse_json_answer(
            r#"{"thought":"go","calls":[{"tool":"write_file","args":{"path":"h.txt","content":"hello"}}]}"#,
            &tools(),
        )
        .unwrap();
        assert_eq!(a.thought.as_deref(), Some("go"));
        assert_eq!(a.calls[0].0, "write_file");
        // A Markdown fence alone is forgiven.
        let fenced =
            "```json\n{\"calls\":[{\"tool\":\"finish\",\"args\":{\"summary\":\"s\"}}]}\n```";
        assert_eq!(parse_json_answer(fenced, &tools()).unwrap().calls.len(), 1);
    }

    #[test]
    fn each_malformation_is_named() {
        let t = tools();
        let cases: Vec<(&str, &str)> = vec![
            ("", "empty"),
            ("{\"calls\": [", "invalid JSON at line 1"),
            ("Sure! Here you go: {\"calls\": []}", "prose before"),
            (
                "{\"calls\": []} hope this helps",
                "text (15 bytes) after the JSON object",
            ),
            (
                "{\"calls\": []}{\"calls\": []}",
                "a second JSON object after",
            ),
            ("[1,2]", "a JSON list, not an object"),
            ("{\"thought\": \"x\"}", "calls: missing"),
            ("{\"calls\": {}}", "calls: must be a list"),
            (
                "{\"calls\": [{\"tool\": \"rm_rf\"}]}",
                "unknown tool `rm_rf`",
            ),
            (
                "{\"calls\": [{\"tool\": \"write_file\", \"args\": {\"path\": \"a\"}}]}",
                "calls[0].args.content: missing",
            ),
            (
                "{\"calls\": [{\"tool\": \"write_file\", \"args\": {\"path\": 3, \"content\": \"\"}}]}",
                "calls[0].args.path: must be string, got a number",
            ),
            (
                "{\"calls\": [{\"tool\": \"finish\", \"args\": \"done\"}]}",
                "calls[0].args: must be an object",
            ),
            (
                "{\"calls\": [{\"tool\": \"finish\", \"args\": {\"summary\": \"s\", \"force\": true}}]}",
                "no such argument",
            ),
            ("{\"calls\": [], \"extra\": 1}", "extra: unknown field"),
        ];
        for (input, want) in cases {
            let e = parse_json_answer(input, &t).unwrap_err().to_string();
            assert!(e.contains(want), "{input:?}: {e:?} lacks {want:?}");
        }
        let huge = format!(
            "{{\"calls\": [], \"thought\": \"{}\"}}",
            "x".repeat(MAX_ANSWER_BYTES)
        );
        assert!(matches!(
            parse_json_answer(&huge, &t),
            Err(ActionError::TooLarge(_))
        ));
        let many = format!(
            "{{\"calls\": [{}]}}",
            vec!["{\"tool\":\"finish\",\"args\":{\"summary\":\"s\"}}"; 17].join(",")
        );
        assert_eq!(
            parse_json_answer(&many, &t),
            Err(ActionError::TooManyCalls(17))
        );
    }

    #[test]
    fn native_arguments_are_checked_too() {
        let t = tools();
        assert!(parse_native_call(&t, 0, "finish", "{\"summary\":\"ok\"}").is_ok());
        let e = parse_native_call(&t, 1, "write_file", "{\"path\": \"a\", ").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("tool call 2 (`write_file`) arguments: invalid JSON"),
            "{e}"
        );
        let e = parse_native_call(&t, 0, "delete_everything", "{}").unwrap_err();
        assert!(matches!(e, ActionError::UnknownTool { .. }));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,400}") {
            let _ = parse_json_answer(&s, &tools());
            let _ = parse_native_call(&tools(), 0, "write_file", &s);
        }

        #[test]
        fn arbitrary_json_never_panics_and_only_valid_calls_pass(v in arb_json()) {
            let text = v.to_string();
            if let Ok(a) = parse_json_answer(&text, &tools()) {
                for (name, args) in &a.calls {
                    prop_assert!(name == "write_file" || name == "finish");
                    prop_assert!(args.is_object());
                }
            }
        }

        #[test]
        fn valid_answers_round_trip(path in "[a-z]{1,12}\\.txt", content in ".{0,60}", thought in proptest::option::of(".{0,40}")) {
            let v = serde_json::json!({
                "thought": thought,
                "calls": [{"tool": "write_file", "args": {"path": path, "content": content}}]
            });
            let a = parse_json_answer(&v.to_string(), &tools()).unwrap();
            prop_assert_eq!(a.thought, thought);
            prop_assert_eq!(&a.calls[0].1["path"], &serde_json::Value::String(path));
            prop_assert_eq!(&a.calls[0].1["content"], &serde_json::Value::String(content));
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            prop_oneof![
                Just("write_file"),
                Just("finish"),
                Just("calls"),
                Just("tool"),
                Just("args"),
                Just("x")
            ]
            .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("calls"),
                        Just("tool"),
                        Just("args"),
                        Just("thought"),
                        Just("path"),
                        Just("content"),
                        Just("summary")
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }
}
