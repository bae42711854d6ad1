//! One way to read every YAML format (contract, Loopfile, model
//! configuration): walk the event tree, collect every problem with its
//! `file:line:column` and a hint, and say "did you mean" for a key that is
//! not allowed where it stands.

use super::{Key, Node, Pos, Value, closest};
use crate::path::RelPath;
use std::fmt;

/// What to write instead of a path that leaves the workspace.
pub const PATH_HINT: &str = "use a path relative to the workspace root, without `..`";

/// One problem found in a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// The file (or "command line").
    pub origin: String,
    /// Line and column, when the problem has a place.
    pub pos: Option<Pos>,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some(p) => write!(f, "{}:{}:{}: {}", self.origin, p.line, p.col, self.message)?,
            None => write!(f, "{}: {}", self.origin, self.message)?,
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Every problem found in a file (at least one), one per line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_all(&self.0, f)
    }
}

/// Every problem, one per line (hints on their own lines below each).
pub fn write_all(list: &[Diagnostic], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (i, d) in list.iter().enumerate() {
        if i > 0 {
            writeln!(f)?;
        }
        write!(f, "{d}")?;
    }
    Ok(())
}

/// Walks a YAML tree for a reader of one format, collecting every
/// problem (with its position and a hint) instead of stopping at the first.
pub struct Reader {
    origin: String,
    /// What was found wrong so far.
    pub errors: Vec<Diagnostic>,
}

impl Reader {
    /// A reader of the text `origin` names.
    pub fn new(origin: &str) -> Self {
        Reader {
            origin: origin.to_string(),
            errors: Vec::new(),
        }
    }

    /// Record a problem.
    pub fn err(&mut self, pos: Option<Pos>, message: String, hint: Option<String>) {
        self.errors.push(Diagnostic {
            origin: self.origin.clone(),
            pos,
            message,
            hint,
        });
    }

    /// The entries of a mapping, reporting keys outside `allowed`.
    pub fn mapping<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Option<&'n [(Key, Node)]> {
        let entries = self.entries(node, what)?;
        for (k, _) in entries {
            if !allowed.contains(&k.name.as_str()) {
                self.unknown_key(k, what, allowed);
            }
        }
        Some(entries)
    }

    /// The entries of a mapping whose keys are names the file chooses.
    pub fn entries<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n [(Key, Node)]> {
        match &node.value {
            Value::Map(entries) => Some(entries),
            other => {
                self.err(
                    Some(node.pos),
                    format!("{what} must be a mapping, found {}", other.type_name()),
                    None,
                );
                None
            }
        }
    }

    /// Record a key `what` does not have, with the closest allowed one.
    pub fn unknown_key(&mut self, k: &Key, what: &str, allowed: &[&str]) {
        let hint = match closest(&k.name, allowed) {
            Some(s) => format!("did you mean `{s}`? allowed here: {}", allowed.join(", ")),
            None => format!("allowed here: {}", allowed.join(", ")),
        };
        self.err(
            Some(k.pos),
            format!("unknown key `{}` in {what}", k.name),
            Some(hint),
        );
    }

    /// A scalar, as text.
    pub fn string(&mut self, node: &Node, what: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                self.err(
                    Some(node.pos),
                    format!("{what} must be a string, found {}", other.type_name()),
                    None,
                );
                None
            }
        }
    }

    /// A scalar with something in it.
    pub fn nonempty_string(&mut self, node: &Node, what: &str) -> Option<String> {
        let s = self.string(node, what)?;
        if s.trim().is_empty() {
            self.err(Some(node.pos), format!("{what} is empty"), None);
            return None;
        }
        Some(s)
    }

    /// An integer of at least `min`.
    pub fn unsigned(&mut self, node: &Node, what: &str, min: u64) -> Option<u64> {
        match node.value {
            Value::Int(i) if i >= 0 && i as u64 >= min => Some(i as u64),
            _ => {
                self.err(
                    Some(node.pos),
                    format!(
                        "{what} must be an integer of at least {min}, found {}",
                        describe_value(node)
                    ),
                    None,
                );
                None
            }
        }
    }

    /// `true` or `false`.
    pub fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.err(
                    Some(node.pos),
                    format!(
                        "{what} must be true or false, found {}",
                        describe_value(node)
                    ),
                    None,
                );
                None
            }
        }
    }

    /// A path relative to the workspace root, never the root itself.
    pub fn rel_path(&mut self, node: &Node, what: &str) -> Option<RelPath> {
        let s = self.string(node, what)?;
        match RelPath::parse(&s) {
            Ok(p) if p.is_root() => {
                self.err(
                    Some(node.pos),
                    format!("{what} names the workspace root"),
                    Some("name a file".into()),
                );
                None
            }
            Ok(p) => Some(p),
            Err(e) => {
                self.err(
                    Some(node.pos),
                    format!("{what}: {e}"),
                    Some(PATH_HINT.into()),
                );
                None
            }
        }
    }

    /// A valid regular expression.
    pub fn regex(&mut self, node: &Node, what: &str) -> Option<String> {
        let s = self.string(node, what)?;
        if let Err(e) = regex::Regex::new(&s) {
            let first = e.to_string().lines().last().unwrap_or_default().to_string();
            self.err(
                Some(node.pos),
                format!("{what} is not a valid regular expression: {first}"),
                Some("escape regex metacharacters such as ( [ . * + ? with a backslash".into()),
            );
            return None;
        }
        Some(s)
    }

    /// A list.
    pub fn seq<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n [Node]> {
        match &node.value {
            Value::Seq(items) => Some(items),
            other => {
                self.err(
                    Some(node.pos),
                    format!("{what} must be a list, found {}", other.type_name()),
                    Some(format!("write {what} as a YAML list (`- item` lines)")),
                );
                None
            }
        }
    }

    /// A number of at least `min` (an integer or a float).
    pub fn number(&mut self, node: &Node, what: &str, min: f64) -> Option<f64> {
        let x = match node.value {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            _ => f64::NAN,
        };
        if x.is_finite() && x >= min {
            return Some(x);
        }
        self.err(
            Some(node.pos),
            format!(
                "{what} must be a number of at least {min}, found {}",
                describe_value(node)
            ),
            None,
        );
        None
    }

    /// One of `options`, by name (`what` names the setting: "unknown
    /// {what} `x`").
    pub fn one_of<'o>(&mut self, node: &Node, what: &str, options: &[&'o str]) -> Option<&'o str> {
        let s = self.string(node, what)?;
        if let Some(o) = options.iter().find(|o| **o == s) {
            return Some(o);
        }
        let hint = match closest(&s, options) {
            Some(c) => format!("did you mean `{c}`? one of: {}", options.join(", ")),
            None => format!("one of: {}", options.join(", ")),
        };
        self.err(Some(node.pos), format!("unknown {what} `{s}`"), Some(hint));
        None
    }

    /// A string, or a list of them (each must be a string).
    pub fn strings(&mut self, node: &Node, what: &str) -> Option<Vec<String>> {
        if let Value::Str(s) = &node.value {
            return Some(vec![s.clone()]);
        }
        let items = self.seq(node, what)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            match self.string(item, &format!("an item of {what}")) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// `value` if nothing was found wrong, else every problem.
    pub fn finish<T>(self, value: Option<T>) -> Result<T, Diagnostics> {
        match value {
            Some(v) if self.errors.is_empty() => Ok(v),
            _ if self.errors.is_empty() => Err(Diagnostics(vec![Diagnostic {
                origin: self.origin,
                pos: None,
                message: "could not be read".into(),
                hint: None,
            }])),
            _ => Err(Diagnostics(self.errors)),
        }
    }
}

/// A value as an error message shows it.
pub fn describe_value(node: &Node) -> String {
    match &node.value {
        Value::Str(s) => format!("{s:?}"),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.type_name().to_string(),
    }
}
