//! The code-policy gate: banned imports, calls and attributes in Python and
//! JavaScript (TypeScript and TSX read with the JavaScript rules), found in
//! the syntax tree, so comments and prose in strings do not trip it while
//! the indirect forms do.

use crate::GateRejection;
use crate::syntax::{Language, parse};
use serde::{Deserialize, Serialize};
use tree_sitter::Node;

/// Banned names for one language.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanguageRules {
    /// Modules (a banned `os` also bans `os.path`).
    #[serde(default)]
    pub banned_imports: Vec<String>,
    /// Functions, by name (`eval`) or dotted path (`os.system`).
    #[serde(default)]
    pub banned_calls: Vec<String>,
    /// Attributes (`__globals__`), also when named by a string
    /// (`getattr(f, "__globals__")`, `obj["__proto__"]`).
    #[serde(default)]
    pub banned_attributes: Vec<String>,
}

impl LanguageRules {
    fn is_empty(&self) -> bool {
        self.banned_imports.is_empty()
            && self.banned_calls.is_empty()
            && self.banned_attributes.is_empty()
    }
}

/// The Loopfile's `rules`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodePolicy {
    /// For Python.
    #[serde(default)]
    pub python: LanguageRules,
    /// For JavaScript, TypeScript and TSX.
    #[serde(default)]
    pub javascript: LanguageRules,
}

struct Walk<'a> {
    rules: &'a LanguageRules,
    text: &'a str,
    path: &'a str,
    python: bool,
}

fn reject(path: &str, node: Node<'_>, what: String) -> GateRejection {
    let at = node.start_position();
    GateRejection {
        rule: format!("gate: code policy ({what})"),
        file: path.to_string(),
        line: at.row + 1,
        column: at.column + 1,
        message: format!("{what} is not allowed by the Loopfile's rules"),
    }
}

impl Walk<'_> {
    fn text_of(&self, n: Node<'_>) -> &str {
        self.text
            .get(n.start_byte()..n.end_byte())
            .unwrap_or_default()
    }

    /// A string literal's content (quotes and prefixes removed), if `n` is one.
    fn string_value(&self, n: Node<'_>) -> Option<String> {
        if !matches!(n.kind(), "string" | "template_string") {
            return None;
        }
        let raw = self.text_of(n);
        let raw = raw.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        let q = raw.chars().next()?;
        let inner = raw.trim_start_matches(q).trim_end_matches(q);
        Some(inner.to_string())
    }

    fn import_banned(&self, module: &str) -> Option<String> {
        let module = module.trim();
        self.rules
            .banned_imports
            .iter()
            .find(|b| {
                module == b.as_str()
                    || module.starts_with(&format!("{b}."))
                    || module.starts_with(&format!("{b}/"))
            })
            .cloned()
    }

    fn call_banned(&self, callee: &str) -> Option<String> {
        let last = callee.rsplit('.').next().unwrap_or(callee);
        self.rules
            .banned_calls
            .iter()
            .find(|b| callee == b.as_str() || (!b.contains('.') && last == b.as_str()))
            .cloned()
    }

    fn attribute_banned(&self, name: &str) -> Option<String> {
        self.rules
            .banned_attributes
            .iter()
            .find(|b| name == b.as_str())
            .cloned()
    }

    fn first_string_arg<'t>(&self, call: Node<'t>) -> Option<(Node<'t>, String)> {
        let args = call.child_by_field_name("arguments")?;
        let mut c = args.walk();
        let first = args.named_children(&mut c).next()?;
        self.string_value(first).map(|s| (first, s))
    }

    fn visit(&self, n: Node<'_>, found: &mut Vec<GateRejection>) {
        let path = self.path;
        match (self.python, n.kind()) {
            (true, "import_statement") => {
                let mut c = n.walk();
                for child in n.named_children(&mut c) {
                    let name = child.child_by_field_name("name").unwrap_or(child);
                    if let Some(b) = self.import_banned(self.text_of(name)) {
                        found.push(reject(path, name, format!("banned import `{b}`")));
                    }
                }
            }
            (true, "import_from_statement") => {
                if let Some(m) = n.child_by_field_name("module_name")
                    && let Some(b) = self.import_banned(self.text_of(m))
                {
                    found.push(reject(path, m, format!("banned import `{b}`")));
                }
            }
            (false, "import_statement") | (false, "export_statement") => {
                if let Some(src) = n.child_by_field_name("source")
                    && let Some(module) = self.string_value(src)
                    && let Some(b) = self.import_banned(&module)
                {
                    found.push(reject(path, src, format!("banned import `{b}`")));
                }
            }
            (_, "call") | (_, "call_expression") | (_, "new_expression") => {
                let callee = n
                    .child_by_field_name("function")
                    .or_else(|| n.child_by_field_name("constructor"));
                if let Some(f) = callee {
                    let name: String = self.text_of(f).split_whitespace().collect();
                    if let Some(b) = self.call_banned(&name) {
                        found.push(reject(path, f, format!("banned call `{b}`")));
                    }
                    // Imports by call: __import__("os"), importlib.import_module("os"),
                    // require("child_process"), import("fs").
                    let by_call = matches!(
                        name.as_str(),
                        "__import__"
                            | "importlib.import_module"
                            | "import_module"
                            | "require"
                            | "import"
                    );
                    if by_call
                        && let Some((arg, module)) = self.first_string_arg(n)
                        && let Some(b) = self.import_banned(&module)
                    {
                        found.push(reject(
                            path,
                            arg,
                            format!("banned import `{b}` (by `{name}`)"),
                        ));
                    }
                }
            }
            (true, "attribute") | (false, "member_expression") => {
                let prop = n
                    .child_by_field_name("attribute")
                    .or_else(|| n.child_by_field_name("property"));
                if let Some(p) = prop
                    && let Some(b) = self.attribute_banned(self.text_of(p))
                {
                    found.push(reject(path, p, format!("banned attribute `{b}`")));
                }
            }
            (_, "string") => {
                // A string naming a banned attribute is how getattr, setattr,
                // vars()[…] and obj["…"] reach it indirectly.
                if let Some(s) = self.string_value(n)
                    && let Some(b) = self.attribute_banned(&s)
                {
                    found.push(reject(
                        path,
                        n,
                        format!("banned attribute `{b}` named by a string"),
                    ));
                }
            }
            _ => {}
        }
        let mut c = n.walk();
        for child in n.children(&mut c) {
            self.visit(child, found);
        }
    }
}

impl CodePolicy {
    /// Check `text` (the whole new content of `path`).
    pub fn check(&self, lang: Language, path: &str, text: &str) -> Result<(), GateRejection> {
        let (rules, python) = match lang {
            Language::Python => (&self.python, true),
            Language::JavaScript | Language::TypeScript | Language::Tsx => {
                (&self.javascript, false)
            }
            _ => return Ok(()),
        };
        if rules.is_empty() {
            return Ok(());
        }
        let tree = parse(lang, text).map_err(|message| GateRejection {
            rule: "gate: code policy (internal error)".into(),
            file: path.to_string(),
            line: 1,
            column: 1,
            message,
        })?;
        let walk = Walk {
            rules,
            text,
            path,
            python,
        };
        let mut found = Vec::new();
        walk.visit(tree.root_node(), &mut found);
        // The first in the file, whatever the tree's nesting.
        match found.into_iter().min_by_key(|r| (r.line, r.column)) {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CodePolicy {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        CodePolicy {
            python: LanguageRules {
                banned_imports: s(&["os", "subprocess", "importlib", "ctypes"]),
                banned_calls: s(&["eval", "exec", "getattr", "__import__", "os.system"]),
                banned_attributes: s(&[
                    "__subclasses__",
                    "__globals__",
                    "__builtins__",
                    "__mro__",
                    "__dict__",
                ]),
            },
            javascript: LanguageRules {
                banned_imports: s(&["child_process", "fs"]),
                banned_calls: s(&["eval", "Function"]),
                banned_attributes: s(&["__proto__", "constructor"]),
            },
        }
    }

    fn py(text: &str) -> Result<(), GateRejection> {
        policy().check(Language::Python, "m.py", text)
    }

    fn js(text: &str) -> Result<(), GateRejection> {
        policy().check(Language::JavaScript, "m.js", text)
    }

    #[test]
    fn python_escapes_are_refused_with_their_position() {
        let cases: &[(&str, &str, (usize, usize))] = &[
            ("import os\n", "banned import `os`", (1, 8)),
            ("import json, os.path as p\n", "banned import `os`", (1, 14)),
            (
                "from subprocess import run\n",
                "banned import `subprocess`",
                (1, 6),
            ),
            ("x = eval('1+1')\n", "banned call `eval`", (1, 5)),
            ("f = getattr\n", "", (0, 0)),
            ("v = getattr(f, 'x')\n", "banned call `getattr`", (1, 5)),
            ("m = __import__('os')\n", "banned call `__import__`", (1, 5)),
            (
                "c = ().__class__.__mro__[1].__subclasses__()\n",
                "banned attribute `__mro__`",
                (1, 18),
            ),
            (
                "g = f.__globals__\n",
                "banned attribute `__globals__`",
                (1, 7),
            ),
            (
                "b = vars(x)['__builtins__']\n",
                "banned attribute `__builtins__` named by a string",
                (1, 13),
            ),
            ("import importlib\n", "banned import `importlib`", (1, 8)),
            (
                "def f():\n    return obj.__dict__\n",
                "banned attribute `__dict__`",
                (2, 16),
            ),
        ];
        for (src, want, at) in cases {
            match py(src) {
                Ok(()) => assert!(want.is_empty(), "{src:?} passed, wanted {want}"),
                Err(e) => {
                    assert!(!want.is_empty(), "{src:?}: {e}");
                    assert_eq!(e.rule, format!("gate: code policy ({want})"), "{src:?}");
                    assert_eq!((e.line, e.column), *at, "{src:?}: {e}");
                }
            }
        }
        // Indirect imports reach the module named, not just the function.
        let mut p = policy();
        p.python.banned_calls.clear();
        let e = p
            .check(Language::Python, "m.py", "m = __import__('os')\n")
            .unwrap_err();
        assert_eq!(
            e.rule,
            "gate: code policy (banned import `os` (by `__import__`))"
        );
        let e = p
            .check(
                Language::Python,
                "m.py",
                "import json\nm = json.loads('{}')\nx = importlib.import_module('ctypes')\n",
            )
            .unwrap_err();
        assert_eq!(
            e.rule,
            "gate: code policy (banned import `ctypes` (by `importlib.import_module`))"
        );
        assert_eq!((e.line, e.column), (3, 29));
    }

    #[test]
    fn comments_and_ordinary_code_pass() {
        assert!(
            py("# import os is not done here\nimport json\nprint(json.dumps({'environ': 1}))\n")
                .is_ok()
        );
        assert!(py("osmosis = 1\nevaluate = lambda: 2\n").is_ok());
        assert!(
            js("// require('fs')\nconst path = require('path');\nconsole.log(path.sep);\n").is_ok()
        );
    }

    #[test]
    fn javascript_escapes_are_refused() {
        let cases = [
            (
                "const cp = require('child_process');\n",
                "banned import `child_process` (by `require`)",
            ),
            ("import fs from 'fs';\n", "banned import `fs`"),
            (
                "import { readFile } from 'fs/promises';\n",
                "banned import `fs`",
            ),
            ("eval('1');\n", "banned call `eval`"),
            (
                "const f = new Function('return 1');\n",
                "banned call `Function`",
            ),
            ("const p = o.__proto__;\n", "banned attribute `__proto__`"),
            (
                "const c = o['constructor'];\n",
                "banned attribute `constructor` named by a string",
            ),
            (
                "const m = await import('fs');\n",
                "banned import `fs` (by `import`)",
            ),
        ];
        for (src, want) in cases {
            let e = js(src).unwrap_err();
            assert_eq!(e.rule, format!("gate: code policy ({want})"), "{src}");
        }
        // TypeScript is read with the JavaScript rules.
        let e = policy()
            .check(
                Language::TypeScript,
                "m.ts",
                "import * as cp from 'child_process';\n",
            )
            .unwrap_err();
        assert!(e.rule.contains("child_process"));
    }
}
