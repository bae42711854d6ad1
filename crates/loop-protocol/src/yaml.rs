//! A small YAML tree that remembers where every node came from.
//!
//! Contracts and Loopfiles are written by people; an error has to name the
//! line and column it refers to. `saphyr-parser` gives us a YAML 1.2 event
//! stream with positions; this module folds it into [`Node`]s with the core
//! schema's scalar resolution, and refuses the YAML features that only make
//! configuration harder to read or audit (anchors, aliases, custom tags,
//! duplicate keys, non-string keys).

pub mod reader;

pub use reader::{Diagnostic, Diagnostics, Reader};
use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use std::fmt;

/// A position in a source document, both parts 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Line, starting at 1.
    pub line: usize,
    /// Column in characters, starting at 1.
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

impl Pos {
    fn from_span(span: &Span) -> Self {
        Pos {
            line: span.start.line(),
            col: span.start.col() + 1,
        }
    }
}

/// A YAML value with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub pos: Pos,
    /// The resolved value.
    pub value: Value,
}

/// A mapping key: always a string, with its own position.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The key text.
    pub name: String,
    /// Where the key starts.
    pub pos: Pos,
}

/// A resolved YAML value (core schema).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `~`, `null` or an empty value.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A floating point number.
    Float(f64),
    /// Any other scalar, or a quoted one.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<(Key, Node)>),
}

impl Value {
    /// The name of the value's type, as a person would say it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// A YAML syntax or structure error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct YamlError {
    /// Where the problem is.
    pub pos: Pos,
    /// What is wrong.
    pub message: String,
}

impl YamlError {
    fn at(pos: Pos, message: impl Into<String>) -> Self {
        YamlError {
            pos,
            message: message.into(),
        }
    }
}

/// How deep collections may nest: far deeper than any contract, Loopfile
/// or script needs, and shallow enough that building, converting and
/// dropping the tree (each recursive) never runs out of stack, on any
/// thread (a server's workers have small stacks).
pub const MAX_DEPTH: usize = 64;

/// Parse one YAML document. An empty document is `Null` at 1:1. Nesting
/// deeper than [`MAX_DEPTH`] is refused before any tree is built.
pub fn parse(src: &str) -> Result<Node, YamlError> {
    let mut events = Vec::new();
    let mut depth = 0usize;
    for item in Parser::new_from_str(src) {
        match item {
            Ok(ev) => {
                match &ev.0 {
                    Event::SequenceStart(..) | Event::MappingStart(..) => {
                        depth += 1;
                        if depth > MAX_DEPTH {
                            return Err(YamlError::at(
                                Pos::from_span(&ev.1),
                                format!("YAML nested more than {MAX_DEPTH} levels deep"),
                            ));
                        }
                    }
                    Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
                    _ => {}
                }
                events.push(ev)
            }
            Err(e) => {
                let m = e.marker();
                // The scanner's own bound on flow nesting (it looks ahead
                // past ours): the same refusal, said the same way.
                let message = if e.info().contains("recursion limit") {
                    format!("YAML nested more than {MAX_DEPTH} levels deep")
                } else {
                    format!("invalid YAML: {}", e.info())
                };
                return Err(YamlError::at(
                    Pos {
                        line: m.line(),
                        col: m.col() + 1,
                    },
                    message,
                ));
            }
        }
    }
    let mut builder = Builder {
        events: events.into_iter(),
        documents: 0,
    };
    builder.document()
}

struct Builder<'a> {
    events: std::vec::IntoIter<(Event<'a>, Span)>,
    documents: usize,
}

impl<'a> Builder<'a> {
    fn document(&mut self) -> Result<Node, YamlError> {
        let mut root: Option<Node> = None;
        while let Some((ev, span)) = self.events.next() {
            match ev {
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                Event::StreamEnd => break,
                Event::DocumentStart(_) => {
                    self.documents += 1;
                    if self.documents > 1 {
                        return Err(YamlError::at(
                            Pos::from_span(&span),
                            "more than one YAML document; a file holds exactly one",
                        ));
                    }
                }
                other => {
                    let node = self.node(other, span)?;
                    root = Some(node);
                }
            }
        }
        Ok(root.unwrap_or(Node {
            pos: Pos { line: 1, col: 1 },
            value: Value::Null,
        }))
    }

    fn node(&mut self, ev: Event<'a>, span: Span) -> Result<Node, YamlError> {
        let pos = Pos::from_span(&span);
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 {
                    return Err(anchors_refused(pos));
                }
                let forced_str = match &tag {
                    None => false,
                    Some(t) if t.is_yaml_core_schema() && t.suffix == "str" => true,
                    Some(t) => {
                        return Err(YamlError::at(
                            pos,
                            format!("YAML tag `{}{}` is not supported", t.handle, t.suffix),
                        ));
                    }
                };
                let value = if forced_str || style != ScalarStyle::Plain {
                    Value::Str(text.into_owned())
                } else {
                    resolve_plain(&text)
                };
                Ok(Node { pos, value })
            }
            Event::SequenceStart(anchor, tag) => {
                if anchor != 0 {
                    return Err(anchors_refused(pos));
                }
                refuse_tag(pos, tag.as_deref())?;
                let mut items = Vec::new();
                loop {
                    let (ev, span) = self.next_event(pos)?;
                    if matches!(ev, Event::SequenceEnd) {
                        break;
                    }
                    items.push(self.node(ev, span)?);
                }
                Ok(Node {
                    pos,
                    value: Value::Seq(items),
                })
            }
            Event::MappingStart(anchor, tag) => {
                if anchor != 0 {
                    return Err(anchors_refused(pos));
                }
                refuse_tag(pos, tag.as_deref())?;
                let mut entries: Vec<(Key, Node)> = Vec::new();
                loop {
                    let (ev, span) = self.next_event(pos)?;
                    if matches!(ev, Event::MappingEnd) {
                        break;
                    }
                    let key_node = self.node(ev, span)?;
                    let name = match key_node.value {
                        Value::Str(s) => s,
                        Value::Int(i) => i.to_string(),
                        Value::Bool(b) => b.to_string(),
                        other => {
                            return Err(YamlError::at(
                                key_node.pos,
                                format!(
                                    "a mapping key must be a string, not {}",
                                    other.type_name()
                                ),
                            ));
                        }
                    };
                    if let Some((first, _)) = entries.iter().find(|(k, _)| k.name == name) {
                        return Err(YamlError::at(
                            key_node.pos,
                            format!(
                                "duplicate key `{name}` (first given at line {})",
                                first.pos.line
                            ),
                        ));
                    }
                    let (ev, span) = self.next_event(pos)?;
                    let value = self.node(ev, span)?;
                    entries.push((
                        Key {
                            name,
                            pos: key_node.pos,
                        },
                        value,
                    ));
                }
                Ok(Node {
                    pos,
                    value: Value::Map(entries),
                })
            }
            Event::Alias(_) => Err(anchors_refused(pos)),
            _ => Err(YamlError::at(pos, "unexpected YAML structure")),
        }
    }

    fn next_event(&mut self, opened: Pos) -> Result<(Event<'a>, Span), YamlError> {
        self.events
            .next()
            .ok_or_else(|| YamlError::at(opened, "unterminated YAML collection"))
    }
}

fn anchors_refused(pos: Pos) -> YamlError {
    YamlError::at(
        pos,
        "YAML anchors and aliases are not supported: write the value out",
    )
}

fn refuse_tag(pos: Pos, tag: Option<&saphyr_parser::Tag>) -> Result<(), YamlError> {
    match tag {
        None => Ok(()),
        Some(t) if t.is_yaml_core_schema() && (t.suffix == "seq" || t.suffix == "map") => Ok(()),
        Some(t) => Err(YamlError::at(
            pos,
            format!("YAML tag `{}{}` is not supported", t.handle, t.suffix),
        )),
    }
}

/// Resolve a plain scalar by the YAML 1.2 core schema.
fn resolve_plain(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Some(hex) = s.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Value::Int(i);
    }
    if let Some(oct) = s.strip_prefix("0o")
        && let Ok(i) = i64::from_str_radix(oct, 8)
    {
        return Value::Int(i);
    }
    let is_int = {
        let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    };
    if is_int && let Ok(i) = s.parse::<i64>() {
        return Value::Int(i);
    }
    let looks_float = {
        let body = s.strip_prefix(['-', '+']).unwrap_or(s);
        !body.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
            && body.bytes().any(|b| b.is_ascii_digit())
            && (body.contains('.') || body.contains('e') || body.contains('E'))
    };
    if looks_float && let Ok(f) = s.parse::<f64>() {
        return Value::Float(f);
    }
    Value::Str(s.to_string())
}

impl Node {
    /// Convert to JSON. Non-finite floats have no JSON form and are refused.
    pub fn to_json(&self) -> Result<serde_json::Value, YamlError> {
        Ok(match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .ok_or_else(|| {
                    YamlError::at(self.pos, "infinite or NaN numbers have no JSON form")
                })?,
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect::<Result<_, _>>()?)
            }
            Value::Map(entries) => {
                let mut map = serde_json::Map::new();
                for (k, v) in entries {
                    map.insert(k.name.clone(), v.to_json()?);
                }
                serde_json::Value::Object(map)
            }
        })
    }
}

/// The allowed word nearest to `word` (at most two edits away), for a
/// "did you mean" hint.
pub fn closest<'a>(word: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (edit_distance(word, a), *a))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn map(node: &Node) -> &Vec<(Key, Node)> {
        match &node.value {
            Value::Map(m) => m,
            other => panic!("not a map: {other:?}"),
        }
    }

    #[test]
    fn resolves_core_schema_scalars_and_positions() {
        let n = parse("a: 1\nb: '1'\nc: true\nd: 1.5\ne: ~\nf: hello world\n").unwrap();
        let m = map(&n);
        assert_eq!(m[0].1.value, Value::Int(1));
        assert_eq!(m[1].1.value, Value::Str("1".into()));
        assert_eq!(m[2].1.value, Value::Bool(true));
        assert_eq!(m[3].1.value, Value::Float(1.5));
        assert_eq!(m[4].1.value, Value::Null);
        assert_eq!(m[5].1.value, Value::Str("hello world".into()));
        assert_eq!(m[5].0.pos, Pos { line: 6, col: 1 });
        assert_eq!(m[5].1.pos, Pos { line: 6, col: 4 });
    }

    #[test]
    fn duplicate_keys_are_refused_at_the_second() {
        let e = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e.pos, Pos { line: 3, col: 1 });
        assert!(e.message.contains("duplicate key `a`"), "{}", e.message);
    }

    #[test]
    fn anchors_and_aliases_are_refused() {
        let e = parse("a: &x 1\nb: *x\n").unwrap_err();
        assert!(e.message.contains("anchors"), "{}", e.message);
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.pos.line >= 1);
        assert!(e.message.starts_with("invalid YAML"), "{}", e.message);
    }

    #[test]
    fn nesting_past_the_limit_is_refused_before_any_tree_is_built() {
        // 5,000 nested sequences in 10 KB: once enough to overflow a
        // server worker's stack.
        let deep = "- ".repeat(5000) + "x";
        let e = parse(&deep).unwrap_err();
        assert!(e.message.contains("nested more than 64 levels"), "{e}");
        assert_eq!(e.pos.line, 1);
        // Flow collections: refused by the limit or by the parser's own.
        let flow = "[".repeat(5000) + &"]".repeat(5000);
        assert!(parse(&flow).is_err());
        let braces = "{a: ".repeat(5000) + "1" + &"}".repeat(5000);
        assert!(parse(&braces).is_err());
        // Right at the limit it parses, on a small stack too.
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || parse(&ok).map(|n| n.to_json().is_ok()))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
    }

    #[test]
    fn several_documents_are_refused() {
        let e = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(e.pos.line, 2);
    }
}
