//! The scripted model: a YAML file of turns, each a list of tool calls,
//! returned in order whatever the model observes. When the script runs out
//! the model has nothing more to say — the Director treats that as a stall.
//! A script may also hold `draft:` turns: what it answers when asked to
//! draft the task's contract ([`ScriptedModel::drafting`]), and
//! `children:`, one list of turns for each child task the script's task
//! delegates to, in order ([`ScriptedModel::child`]).

use loop_protocol::contract::Diagnostic;
use loop_protocol::yaml::{self, Node, Value};
use loop_protocol::{Context, ModelInfo, ModelReply, ToolCall, Turn, Usage};

/// A script that could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ScriptError(pub Vec<Diagnostic>);

/// A loaded script.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    name: String,
    source_sha256: String,
    turns: Vec<ScriptTurn>,
    draft: Vec<ScriptTurn>,
    /// Each child's turns, in the order the children are delegated.
    children: Vec<Vec<ScriptTurn>>,
    next: usize,
    /// The script says its model takes images (`images: true`).
    images: bool,
    /// The context's size, counted as it grows.
    size: loop_protocol::context::ContextSize,
}

#[derive(Debug, Clone)]
struct ScriptTurn {
    thought: Option<String>,
    /// Each call's tool, arguments, and the id the script gives it (else
    /// one is made: `tN-cK`).
    calls: Vec<(String, serde_json::Value, Option<String>)>,
    usage: Option<Usage>,
}

impl ScriptedModel {
    /// Parse a script. `origin` names it in errors and provenance.
    pub fn from_yaml(src: &str, origin: &str) -> Result<ScriptedModel, ScriptError> {
        let diag = |pos, message: String, hint: Option<&str>| Diagnostic {
            origin: origin.to_string(),
            pos: Some(pos),
            message,
            hint: hint.map(str::to_string),
        };
        let root = yaml::parse(src).map_err(|e| ScriptError(vec![diag(e.pos, e.message, None)]))?;
        let mut errors = Vec::new();
        let mut turns = Vec::new();
        let Value::Map(top) = &root.value else {
            return Err(ScriptError(vec![diag(
                root.pos,
                "a script is a mapping with `turns:`".into(),
                Some("see the scripted model format in docs/formats.md"),
            )]));
        };
        let mut turns_node = None;
        let mut draft = Vec::new();
        let mut children = Vec::new();
        let mut images = false;
        for (k, v) in top {
            match k.name.as_str() {
                "turns" => turns_node = Some(v),
                "images" => match &v.value {
                    Value::Bool(b) => images = *b,
                    _ => errors.push(diag(v.pos, "`images` is true or false".into(), None)),
                },
                "draft" => match &v.value {
                    Value::Seq(items) => {
                        for item in items {
                            match parse_turn(item) {
                                Ok(t) => draft.push(t),
                                Err((pos, msg, hint)) => errors.push(diag(pos, msg, hint)),
                            }
                        }
                    }
                    _ => errors.push(diag(v.pos, "`draft` must be a list of turns".into(), None)),
                },
                "children" => match &v.value {
                    Value::Seq(lists) => {
                        for list in lists {
                            let Value::Seq(items) = &list.value else {
                                errors.push(diag(
                                    list.pos,
                                    "each of `children` is a list of turns".into(),
                                    None,
                                ));
                                continue;
                            };
                            let mut child = Vec::new();
                            for item in items {
                                match parse_turn(item) {
                                    Ok(t) => child.push(t),
                                    Err((pos, msg, hint)) => errors.push(diag(pos, msg, hint)),
                                }
                            }
                            children.push(child);
                        }
                    }
                    _ => errors.push(diag(
                        v.pos,
                        "`children` must be a list of lists of turns".into(),
                        None,
                    )),
                },
                "version" => {}
                other => errors.push(diag(
                    k.pos,
                    format!("unknown key `{other}` in the script"),
                    Some("allowed: version, turns, draft, children, images"),
                )),
            }
        }
        let Some(turns_node) = turns_node else {
            errors.push(diag(root.pos, "the script has no `turns`".into(), None));
            return Err(ScriptError(errors));
        };
        let Value::Seq(items) = &turns_node.value else {
            errors.push(diag(turns_node.pos, "`turns` must be a list".into(), None));
            return Err(ScriptError(errors));
        };
        for item in items {
            match parse_turn(item) {
                Ok(t) => turns.push(t),
                Err((pos, msg, hint)) => errors.push(diag(pos, msg, hint)),
            }
        }
        if !errors.is_empty() {
            return Err(ScriptError(errors));
        }
        Ok(ScriptedModel {
            name: origin.to_string(),
            source_sha256: loop_protocol::hash::sha256_hex(src.as_bytes()),
            turns,
            draft,
            children,
            next: 0,
            images,
            size: Default::default(),
        })
    }

    /// The same script as its task's `n`th child (from 1): it plays the
    /// `n`th list of `children:` (none: it has nothing to say).
    pub fn child(self, n: usize) -> ScriptedModel {
        let turns = n
            .checked_sub(1)
            .and_then(|i| self.children.get(i).cloned())
            .unwrap_or_default();
        ScriptedModel {
            name: format!("{} (child {n})", self.name),
            turns,
            draft: Vec::new(),
            children: Vec::new(),
            next: 0,
            ..self
        }
    }

    /// The same script as the contract's drafter: it plays its `draft:`
    /// turns (none: it has nothing to propose).
    pub fn drafting(self) -> ScriptedModel {
        ScriptedModel {
            turns: self.draft,
            draft: Vec::new(),
            children: Vec::new(),
            next: 0,
            ..self
        }
    }

    /// Whether the script says its model takes images.
    pub fn accepts_images(&self) -> bool {
        self.images
    }

    /// Provenance.
    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: "scripted".into(),
            name: self.name.clone(),
            source_sha256: Some(self.source_sha256.clone()),
            parameters: None,
        }
    }

    /// Continue after `turns` turns already played (a resumed task).
    pub fn skip_to(&mut self, turns: usize) {
        self.next = turns;
    }

    /// The next turn. Usage not given in the script is estimated from the
    /// context's size (4 bytes per token) and marked as estimated.
    pub fn next_turn(&mut self, context: &Context) -> ModelReply {
        let Some(t) = self.turns.get(self.next) else {
            return ModelReply::NothingMore {
                reason: format!("script exhausted after {} turn(s)", self.turns.len()),
            };
        };
        self.next += 1;
        let n = self.next;
        let calls: Vec<ToolCall> = t
            .calls
            .iter()
            .enumerate()
            .map(|(i, (tool, args, id))| ToolCall {
                id: id.clone().unwrap_or_else(|| format!("t{n}-c{}", i + 1)),
                tool: tool.clone(),
                args: args.clone(),
            })
            .collect();
        let usage = t.usage.unwrap_or_else(|| {
            let input = self.size.json_len(context) as u64 / 4;
            let output = loop_protocol::context::json_len(&calls) as u64 / 4;
            Usage {
                input_tokens: input,
                output_tokens: output,
                estimated: true,
                ..Usage::default()
            }
        });
        ModelReply::Turn(Turn {
            thought: t.thought.clone(),
            calls,
            usage,
            served_by: None,
        })
    }
}

type Problem = (yaml::Pos, String, Option<&'static str>);

fn parse_turn(node: &Node) -> Result<ScriptTurn, Problem> {
    let Value::Map(entries) = &node.value else {
        return Err((
            node.pos,
            "a turn must be a mapping with `calls:`".into(),
            None,
        ));
    };
    let mut turn = ScriptTurn {
        thought: None,
        calls: Vec::new(),
        usage: None,
    };
    for (k, v) in entries {
        match k.name.as_str() {
            "thought" => match &v.value {
                Value::Str(s) => turn.thought = Some(s.clone()),
                _ => return Err((v.pos, "`thought` must be a string".into(), None)),
            },
            "calls" => {
                let Value::Seq(calls) = &v.value else {
                    return Err((v.pos, "`calls` must be a list".into(), None));
                };
                for c in calls {
                    turn.calls.push(parse_call(c)?);
                }
            }
            "usage" => turn.usage = Some(parse_usage(v)?),
            other => {
                return Err((
                    k.pos,
                    format!("unknown key `{other}` in a turn"),
                    Some("allowed: thought, calls, usage"),
                ));
            }
        }
    }
    Ok(turn)
}

fn parse_call(node: &Node) -> Result<(String, serde_json::Value, Option<String>), Problem> {
    let Value::Map(entries) = &node.value else {
        return Err((
            node.pos,
            "a call must be a mapping with `tool:` and `args:`".into(),
            None,
        ));
    };
    let mut tool = None;
    let mut id = None;
    let mut args = serde_json::json!({});
    for (k, v) in entries {
        match k.name.as_str() {
            "tool" => match &v.value {
                Value::Str(s) => tool = Some(s.clone()),
                _ => return Err((v.pos, "`tool` must be a string".into(), None)),
            },
            // A provider's own call id (a script can play one that sends
            // the same id twice).
            "id" => match &v.value {
                Value::Str(s) if !s.is_empty() => id = Some(s.clone()),
                _ => return Err((v.pos, "`id` must be a non-empty string".into(), None)),
            },
            "args" => args = v.to_json().map_err(|e| (e.pos, e.message, None))?,
            other => {
                return Err((
                    k.pos,
                    format!("unknown key `{other}` in a call"),
                    Some("allowed: tool, args, id"),
                ));
            }
        }
    }
    let tool = tool.ok_or((node.pos, "a call has no `tool`".to_string(), None))?;
    Ok((tool, args, id))
}

fn parse_usage(node: &Node) -> Result<Usage, Problem> {
    let Value::Map(entries) = &node.value else {
        return Err((node.pos, "`usage` must be a mapping".into(), None));
    };
    let mut u = Usage::default();
    for (k, v) in entries {
        if k.name == "cost_usd" {
            u.cost_usd = match v.value {
                Value::Int(n) if n >= 0 => n as f64,
                Value::Float(x) if x.is_finite() && x >= 0.0 => x,
                _ => {
                    return Err((
                        v.pos,
                        "`cost_usd` must be a non-negative number".into(),
                        None,
                    ));
                }
            };
            continue;
        }
        let Value::Int(n) = v.value else {
            return Err((
                v.pos,
                format!("`{}` must be a non-negative integer", k.name),
                None,
            ));
        };
        let n = u64::try_from(n).map_err(|_| {
            (
                v.pos,
                format!("`{}` must be a non-negative integer", k.name),
                None,
            )
        })?;
        match k.name.as_str() {
            "input_tokens" => u.input_tokens = n,
            "output_tokens" => u.output_tokens = n,
            "cached_input_tokens" => u.cached_input_tokens = n,
            other => {
                return Err((
                    k.pos,
                    format!("unknown key `{other}` in usage"),
                    Some("allowed: input_tokens, cached_input_tokens, output_tokens, cost_usd"),
                ));
            }
        }
    }
    Ok(u)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
turns:
  - thought: write a first version
    calls:
      - tool: write_file
        args: { path: fib.py, content: "print(1)\n" }
    usage: { input_tokens: 120, output_tokens: 40 }
  - calls:
      - tool: finish
        args: { summary: "fib.py prints the sequence" }
"#;

    fn ctx() -> Context {
        Context::new("system".into(), vec![], "do it")
    }

    #[test]
    fn the_architecture_example_plays_then_falls_silent() {
        let mut m = ScriptedModel::from_yaml(SCRIPT, "s.yaml").unwrap();
        let ModelReply::Turn(t1) = m.next_turn(&ctx()) else {
            panic!()
        };
        assert_eq!(t1.thought.as_deref(), Some("write a first version"));
        assert_eq!(t1.calls[0].tool, "write_file");
        assert_eq!(t1.calls[0].args["content"], "print(1)\n");
        assert_eq!(
            t1.usage,
            Usage {
                input_tokens: 120,
                output_tokens: 40,
                ..Usage::default()
            }
        );
        let ModelReply::Turn(t2) = m.next_turn(&ctx()) else {
            panic!()
        };
        assert!(
            t2.usage.estimated,
            "no usage given: estimated and marked so"
        );
        assert_eq!(t2.calls[0].id, "t2-c1");
        assert!(matches!(
            m.next_turn(&ctx()),
            ModelReply::NothingMore { .. }
        ));
        assert_eq!(m.info().provider, "scripted");
    }

    #[test]
    fn each_child_plays_its_own_list_of_turns() {
        let src = "turns:\n  - calls:\n      - tool: delegate\n        args: {}\nchildren:\n  - - calls:\n        - tool: write_file\n          args: { path: a, content: x }\n  - - calls:\n        - tool: finish\n          args: { summary: b }\n";
        let m = ScriptedModel::from_yaml(src, "s.yaml").unwrap();
        let first = |n: usize| match m.clone().child(n).next_turn(&ctx()) {
            ModelReply::Turn(t) => Some(t.calls[0].tool.clone()),
            _ => None,
        };
        assert_eq!(first(1).as_deref(), Some("write_file"));
        assert_eq!(first(2).as_deref(), Some("finish"));
        assert_eq!(first(3), None, "no list for a third child: nothing to say");
        assert_eq!(m.clone().child(2).info().name, "s.yaml (child 2)");
        let bad = ScriptedModel::from_yaml("turns: []\nchildren: [ { calls: [] } ]\n", "s.yaml");
        assert!(bad.unwrap_err().to_string().contains("a list of turns"));
    }

    #[test]
    fn malformed_scripts_name_the_position() {
        let e =
            ScriptedModel::from_yaml("turns:\n  - calls:\n      - tol: x\n", "s.yaml").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("s.yaml:3:9: unknown key `tol` in a call"),
            "{text}"
        );
        let e = ScriptedModel::from_yaml("turn: []\n", "s.yaml").unwrap_err();
        assert!(e.to_string().contains("unknown key `turn`"));
    }
}
