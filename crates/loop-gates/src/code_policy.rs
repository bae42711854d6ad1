//! The code-policy gate: banned imports, calls and attributes in Python and
//! JavaScript (TypeScript and TSX read with the JavaScript rules).
//!
//! The gate resolves what a name refers to rather than how it is spelled:
//!
//! - identifiers are normalised as the language does (NFKC for Python, so
//!   `ｅｖａｌ` is `eval`; `\u` escapes for JavaScript, so `\u0065val` is
//!   `eval`);
//! - imports and their aliases (`import os as o`, `from os import system as
//!   s`, `from os import *`, `const {exec: run} = require('node:child_process')`,
//!   `import cp = require(…)`) and plain assignments (`e = eval`, `o = os`)
//!   are tracked, file-wide and whatever the order, to the module or
//!   function they name;
//! - every reference to a banned function is refused, not only a call
//!   (`e = eval`, `(0, eval)(…)`, `Reflect.construct(Function, …)`), and
//!   so is every path that reaches one: `(os).system`, `getattr(os,
//!   'system')`, `vars(builtins)['eval']`, `globalThis['eval']`,
//!   `sys.modules['os'].system`;
//! - string constants are folded (escapes, implicit and `+`
//!   concatenation, f-strings and template literals whose substitutions are
//!   constants) and compared with the banned modules, bare function names
//!   and attributes (`'child\u005fprocess'`, `'__subcl' 'asses__'`);
//!   `node:` prefixes are stripped;
//! - what the gate cannot resolve and that could reach a banned name is
//!   refused as unresolvable: `getattr`/`setattr`/`Reflect.get` with a
//!   computed name, a computed member of a namespace that holds a banned
//!   function (`globalThis[k]`, `vars(builtins)[k]`), an import of a
//!   computed module, an alias chain too long to follow.
//!
//! It is a policy aid over source text, not a security boundary (the
//! sandbox is): code can still build a banned name at run time from data
//! the gate does not see (a file it reads, arithmetic on characters), or
//! reach a banned function through an object the gate cannot type (`x[k]`
//! on an arbitrary value). The README says so.

use crate::GateRejection;
use crate::syntax::{Language, parse};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;
use unicode_normalization::UnicodeNormalization;

/// Banned names for one language.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LanguageRules {
    /// Modules (a banned `os` also bans `os.path`).
    #[serde(default)]
    pub banned_imports: Vec<String>,
    /// Functions, by name (`eval`: the built-in one) or dotted path
    /// (`os.system`).
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

/// What an expression may refer to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Val {
    /// A dotted path from a module or from the language's globals
    /// (`os.system`, `builtins.eval`, `global.eval`).
    Path(String),
    /// Something the gate cannot name that could reach a banned one.
    Dynamic(String),
}

/// How a name is bound somewhere in the file.
#[derive(Clone)]
enum Bind<'t> {
    /// To the value of an expression.
    Expr(Node<'t>),
    /// To a property of an expression's value (destructuring).
    Member(Node<'t>, String),
    /// To a module or a name in one (an import).
    Path(String),
}

/// Resolution stops this deep: a longer alias chain is refused as
/// unresolvable rather than followed forever.
const MAX_DEPTH: usize = 24;

/// Names that are the language's global namespace itself.
const JS_GLOBAL_NAMES: &[&str] = &["globalThis", "window", "global", "self"];

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

/// Decode JavaScript `\uXXXX` and `\u{X…}` escapes in an identifier.
fn js_ident(raw: &str) -> String {
    if !raw.contains('\\') {
        return raw.to_string();
    }
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' || chars.peek() != Some(&'u') {
            out.push(c);
            continue;
        }
        chars.next();
        let hex: String = if chars.peek() == Some(&'{') {
            chars.next();
            chars.by_ref().take_while(|c| *c != '}').collect()
        } else {
            chars.by_ref().take(4).collect()
        };
        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
            Some(ch) => out.push(ch),
            None => out.push('\u{FFFD}'),
        }
    }
    out
}

fn take_hex(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize) -> Option<char> {
    let h: String = chars.by_ref().take(n).collect();
    if h.len() != n {
        return None;
    }
    u32::from_str_radix(&h, 16).ok().and_then(char::from_u32)
}

/// Decode the escapes of a string literal's body. `None` when an escape
/// cannot be decoded here (Python's `\N{…}`): the value is then unknown.
fn unescape(body: &str, python: bool) -> Option<String> {
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        match e {
            '\n' => {} // a line continuation
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            'a' if python => out.push('\u{7}'),
            'x' => out.push(take_hex(&mut chars, 2)?),
            'u' if !python && chars.peek() == Some(&'{') => {
                chars.next();
                let h: String = chars.by_ref().take_while(|c| *c != '}').collect();
                out.push(u32::from_str_radix(&h, 16).ok().and_then(char::from_u32)?);
            }
            'u' => out.push(take_hex(&mut chars, 4)?),
            'U' if python => out.push(take_hex(&mut chars, 8)?),
            'N' if python => return None,
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|c| c.to_digit(8)) {
                        Some(d) => {
                            v = v * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v)?);
            }
            other => {
                // Python keeps an unknown escape's backslash; JavaScript drops it.
                if python && !matches!(other, '\\' | '\'' | '"') {
                    out.push('\\');
                }
                out.push(other);
            }
        }
    }
    Some(out)
}

struct Gate<'t, 'a> {
    rules: &'a LanguageRules,
    text: &'t str,
    path: &'a str,
    python: bool,
    binds: BTreeMap<String, Vec<Bind<'t>>>,
    /// Modules imported with `from m import *`.
    star: Vec<String>,
    found: Vec<GateRejection>,
    /// Resolution steps taken: past [`MAX_STEPS`] the file is refused as
    /// unresolvable (a file built to make the gate slow fails closed).
    steps: std::cell::Cell<usize>,
}

/// Resolution steps one file may take.
const MAX_STEPS: usize = 2_000_000;

impl<'t> Gate<'t, '_> {
    fn text_of(&self, n: Node<'t>) -> &'t str {
        self.text
            .get(n.start_byte()..n.end_byte())
            .unwrap_or_default()
    }

    /// Where the language's global names live.
    fn root(&self) -> &'static str {
        if self.python { "builtins" } else { "global" }
    }

    /// An identifier as the language reads it.
    fn ident(&self, n: Node<'t>) -> String {
        let raw = self.text_of(n);
        if self.python {
            raw.nfkc().collect()
        } else {
            js_ident(raw)
        }
    }

    /// A module name as the import names it (`node:` stripped; Python's
    /// dotted names normalised part by part).
    fn module(&self, raw: &str) -> String {
        if self.python {
            raw.split('.')
                .map(|p| p.trim().nfkc().collect::<String>())
                .collect::<Vec<_>>()
                .join(".")
        } else {
            raw.trim().trim_start_matches("node:").to_string()
        }
    }

    // ---- rules ----

    /// The banned import `module` is (or is inside: `os.path` of `os`).
    fn import_banned(&self, module: &str) -> Option<String> {
        let module = self.module(module);
        if module.is_empty() {
            return None;
        }
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

    /// Each banned call with the path it names (`eval` is `builtins.eval`
    /// in Python, `global.eval` in JavaScript; `os.system` is itself).
    fn banned_paths(&self) -> impl Iterator<Item = (&String, String)> {
        self.rules.banned_calls.iter().map(|b| {
            let full = if b.contains('.') {
                b.to_string()
            } else {
                format!("{}.{b}", self.root())
            };
            (b, full)
        })
    }

    /// The banned function `path` is (or is inside: `os.system.__call__`).
    fn path_banned(&self, path: &str) -> Option<String> {
        self.banned_paths()
            .find(|(_, full)| path == full || path.starts_with(&format!("{full}.")))
            .map(|(b, _)| b.clone())
    }

    /// Whether a banned function lives somewhere below `path` (a computed
    /// member of it could be one).
    fn holds_banned(&self, path: &str) -> bool {
        self.banned_paths()
            .any(|(_, full)| full.starts_with(&format!("{path}.")))
    }

    fn attribute_banned(&self, name: &str) -> Option<String> {
        self.rules
            .banned_attributes
            .iter()
            .find(|b| name == b.as_str())
            .cloned()
    }

    /// What a constant string names that the rules ban.
    fn string_banned(&self, s: &str) -> Option<String> {
        if let Some(b) = self.attribute_banned(s) {
            return Some(format!("banned attribute `{b}`"));
        }
        if let Some(b) = self
            .rules
            .banned_calls
            .iter()
            .find(|b| !b.contains('.') && *b == s)
        {
            return Some(format!("banned call `{b}`"));
        }
        // `pkgutil.resolve_name('os.system')`, `'os:system'`.
        let dotted = s.replace(':', ".");
        if let Some(b) = self.rules.banned_calls.iter().find(|b| {
            b.contains('.') && (dotted == b.as_str() || dotted.starts_with(&format!("{b}.")))
        }) {
            return Some(format!("banned call `{b}`"));
        }
        self.import_banned(s)
            .map(|b| format!("banned import `{b}`"))
    }

    fn strict(&self) -> bool {
        !self.rules.banned_calls.is_empty() || !self.rules.banned_attributes.is_empty()
    }

    // ---- constants ----

    /// The value of a constant string expression, folded.
    fn const_str(&self, n: Node<'t>, depth: usize) -> Option<String> {
        if depth > MAX_DEPTH {
            return None;
        }
        match n.kind() {
            "parenthesized_expression" => self.const_str(n.named_child(0)?, depth + 1),
            // A name bound once, to a constant.
            "identifier" => match self.binds.get(&self.ident(n))?.as_slice() {
                [Bind::Expr(e)] if *e != n => self.const_str(*e, depth + 1),
                _ => None,
            },
            "concatenated_string" => {
                let mut out = String::new();
                let mut c = n.walk();
                for part in n.named_children(&mut c) {
                    out.push_str(&self.const_str(part, depth + 1)?);
                }
                Some(out)
            }
            "binary_operator" | "binary_expression" => {
                let op = n.child_by_field_name("operator")?;
                if self.text_of(op) != "+" {
                    return None;
                }
                let l = self.const_str(n.child_by_field_name("left")?, depth + 1)?;
                let r = self.const_str(n.child_by_field_name("right")?, depth + 1)?;
                Some(l + &r)
            }
            "string" if self.python => {
                let start = n.named_child(0)?;
                let prefix = self
                    .text_of(start)
                    .chars()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .collect::<String>()
                    .to_ascii_lowercase();
                let raw = prefix.contains('r');
                let mut out = String::new();
                let mut c = n.walk();
                for part in n.named_children(&mut c) {
                    match part.kind() {
                        "string_start" | "string_end" => {}
                        "string_content" => {
                            let body = self.text_of(part);
                            if raw {
                                out.push_str(body);
                            } else {
                                out.push_str(&unescape(body, true)?);
                            }
                        }
                        "interpolation" => {
                            let e = part.child_by_field_name("expression")?;
                            out.push_str(&self.const_str(e, depth + 1)?);
                        }
                        _ => return None,
                    }
                }
                Some(out)
            }
            "string" | "template_string" => {
                let mut out = String::new();
                let mut c = n.walk();
                for part in n.named_children(&mut c) {
                    match part.kind() {
                        "string_fragment" => out.push_str(self.text_of(part)),
                        "escape_sequence" => out.push_str(&unescape(self.text_of(part), false)?),
                        "template_substitution" => {
                            out.push_str(&self.const_str(part.named_child(0)?, depth + 1)?)
                        }
                        _ => return None,
                    }
                }
                Some(out)
            }
            _ => None,
        }
    }

    // ---- bindings ----

    fn bind(&mut self, name: String, b: Bind<'t>) {
        self.binds.entry(name).or_default().push(b);
    }

    /// Pair the names in `left` with the values in `right` (`a, b = x, y`);
    /// unmatched shapes bind nothing (their names stay unknown).
    fn bind_target(&mut self, left: Node<'t>, right: Node<'t>) {
        match left.kind() {
            "identifier" => {
                let name = self.ident(left);
                self.bind(name, Bind::Expr(right));
            }
            "pattern_list" | "tuple_pattern" | "list_pattern" | "array_pattern"
                if matches!(right.kind(), "expression_list" | "tuple" | "list" | "array") =>
            {
                let mut c1 = left.walk();
                let mut c2 = right.walk();
                let ls: Vec<_> = left.named_children(&mut c1).collect();
                let rs: Vec<_> = right.named_children(&mut c2).collect();
                if ls.len() == rs.len() {
                    for (l, r) in ls.into_iter().zip(rs) {
                        self.bind_target(l, r);
                    }
                }
            }
            "object_pattern" => {
                let mut c = left.walk();
                for p in left.named_children(&mut c) {
                    match p.kind() {
                        "shorthand_property_identifier_pattern" => {
                            let name = self.ident(p);
                            self.bind(name.clone(), Bind::Member(right, name));
                        }
                        "pair_pattern" => {
                            let (Some(k), Some(v)) =
                                (p.child_by_field_name("key"), p.child_by_field_name("value"))
                            else {
                                continue;
                            };
                            let key = self.const_str(k, 0).unwrap_or_else(|| self.ident(k));
                            if v.kind() == "identifier" {
                                let name = self.ident(v);
                                self.bind(name, Bind::Member(right, key));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// The module an import statement names (its source string).
    fn js_source(&self, n: Node<'t>) -> Option<String> {
        n.child_by_field_name("source")
            .and_then(|s| self.const_str(s, 0))
            .map(|m| self.module(&m))
    }

    /// `import a.b`, `import a as b`: bind what the names are.
    fn py_import(&mut self, n: Node<'t>) {
        let mut c = n.walk();
        for child in n.named_children(&mut c) {
            match child.kind() {
                "aliased_import" => {
                    if let (Some(name), Some(alias)) = (
                        child.child_by_field_name("name"),
                        child.child_by_field_name("alias"),
                    ) {
                        let m = self.module(self.text_of(name));
                        let a = self.ident(alias);
                        self.bind(a, Bind::Path(m));
                    }
                }
                "dotted_name" => {
                    // `import a.b` binds `a`.
                    let m = self.module(self.text_of(child));
                    let first = m.split('.').next().unwrap_or_default().to_string();
                    self.bind(first.clone(), Bind::Path(first));
                }
                _ => {}
            }
        }
    }

    /// `from m import a as b, *`; false when the statement names no
    /// module (nothing under it is read).
    fn py_import_from(&mut self, n: Node<'t>) -> bool {
        let Some(m) = n.child_by_field_name("module_name") else {
            return false;
        };
        let module = self.module(self.text_of(m));
        let mut c = n.walk();
        for child in n.named_children(&mut c) {
            if child == m {
                continue;
            }
            match child.kind() {
                "wildcard_import" => self.star.push(module.clone()),
                "aliased_import" => {
                    if let (Some(name), Some(alias)) = (
                        child.child_by_field_name("name"),
                        child.child_by_field_name("alias"),
                    ) {
                        let full = format!("{module}.{}", self.module(self.text_of(name)));
                        let a = self.ident(alias);
                        self.bind(a, Bind::Path(full));
                    }
                }
                "dotted_name" => {
                    let name = self.module(self.text_of(child));
                    self.bind(name.clone(), Bind::Path(format!("{module}.{name}")));
                }
                _ => {}
            }
        }

        true
    }

    /// ES and TypeScript imports; false for `import x = require('m')`,
    /// whose clause is read here whole.
    fn js_import(&mut self, n: Node<'t>) -> bool {
        let Some(module) = self.js_source(n) else {
            // TypeScript: `import x = require('m')`.
            let mut c = n.walk();
            for child in n.named_children(&mut c) {
                if child.kind() == "import_require_clause"
                    && let (Some(id), Some(m)) = (
                        child.named_child(0).filter(|i| i.kind() == "identifier"),
                        self.js_source(child),
                    )
                {
                    let name = self.ident(id);
                    self.bind(name, Bind::Path(m));
                }
            }
            return false;
        };
        let mut c = n.walk();
        for clause in n.named_children(&mut c) {
            if clause.kind() != "import_clause" {
                continue;
            }
            let mut c2 = clause.walk();
            for part in clause.named_children(&mut c2) {
                match part.kind() {
                    // A default import of a CommonJS module is the module.
                    "identifier" => {
                        let name = self.ident(part);
                        self.bind(name, Bind::Path(module.clone()));
                    }
                    "namespace_import" => {
                        if let Some(id) = part.named_child(0) {
                            let name = self.ident(id);
                            self.bind(name, Bind::Path(module.clone()));
                        }
                    }
                    "named_imports" => {
                        let mut c3 = part.walk();
                        for spec in part.named_children(&mut c3) {
                            let Some(name) = spec.child_by_field_name("name") else {
                                continue;
                            };
                            let imported =
                                self.const_str(name, 0).unwrap_or_else(|| self.ident(name));
                            let local = spec
                                .child_by_field_name("alias")
                                .map_or_else(|| imported.clone(), |a| self.ident(a));
                            self.bind(local, Bind::Path(format!("{module}.{imported}")));
                        }
                    }
                    _ => {}
                }
            }
        }

        true
    }

    /// First pass: every binding in the file, whatever its scope or order.
    fn collect(&mut self, n: Node<'t>) {
        match (self.python, n.kind()) {
            (true, "import_statement") => self.py_import(n),
            // What a statement that names no module holds is not read.
            (true, "import_from_statement") if !self.py_import_from(n) => return,
            (true, "assignment") => {
                if let (Some(l), Some(mut r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) {
                    // `a = b = x`: every target gets x.
                    while r.kind() == "assignment" {
                        match r.child_by_field_name("right") {
                            Some(next) => r = next,
                            None => break,
                        }
                    }
                    self.bind_target(l, r);
                }
            }
            (true, "named_expression") => {
                if let (Some(l), Some(r)) = (
                    n.child_by_field_name("name"),
                    n.child_by_field_name("value"),
                ) {
                    self.bind_target(l, r);
                }
            }
            (false, "import_statement") if !self.js_import(n) => return,
            (false, "variable_declarator") => {
                if let (Some(l), Some(r)) = (
                    n.child_by_field_name("name"),
                    n.child_by_field_name("value"),
                ) {
                    self.bind_target(l, r);
                }
            }
            (false, "assignment_expression") => {
                if let (Some(l), Some(r)) = (
                    n.child_by_field_name("left"),
                    n.child_by_field_name("right"),
                ) {
                    self.bind_target(l, r);
                }
            }
            _ => {}
        }
        let mut c = n.walk();
        for child in n.children(&mut c) {
            self.collect(child);
        }
    }

    // ---- resolution ----

    /// Everything the name may refer to: its bindings, a `*` import's
    /// member, and (always: a local binding elsewhere does not hide it)
    /// the global of that name.
    fn resolve_name(&self, name: &str, depth: usize, seen: &mut BTreeSet<String>) -> BTreeSet<Val> {
        let mut out = BTreeSet::new();
        self.steps.set(self.steps.get() + 1);
        if self.steps.get() > MAX_STEPS {
            out.insert(Val::Dynamic(
                "more aliases than the gate follows in one file".into(),
            ));
            return out;
        }
        if depth > MAX_DEPTH {
            out.insert(Val::Dynamic(format!(
                "an alias chain through `{name}` too long to follow"
            )));
            return out;
        }
        if !self.python && JS_GLOBAL_NAMES.contains(&name) {
            out.insert(Val::Path("global".into()));
        }
        if self.python && name == "__builtins__" {
            out.insert(Val::Path("builtins".into()));
        }
        out.insert(Val::Path(format!("{}.{name}", self.root())));
        for m in &self.star {
            out.insert(Val::Path(format!("{m}.{name}")));
        }
        if !seen.insert(name.to_string()) {
            return out;
        }
        if let Some(binds) = self.binds.get(name) {
            for b in binds {
                match b {
                    Bind::Path(p) => {
                        out.insert(Val::Path(p.clone()));
                    }
                    Bind::Expr(e) => out.extend(self.resolve(*e, depth + 1, seen)),
                    Bind::Member(e, key) => {
                        for v in self.resolve(*e, depth + 1, seen) {
                            out.insert(match v {
                                Val::Path(p) => Val::Path(format!("{p}.{key}")),
                                d => d,
                            });
                        }
                    }
                }
            }
        }
        seen.remove(name);
        out
    }

    /// Modules the rules care about: a module's attribute that names one
    /// (`shutil.os`, `os.sys`, `asyncio.subprocess`) may be that module.
    fn relevant_module(&self, key: &str) -> bool {
        matches!(key, "builtins" | "sys" | "os" | "importlib" | "subprocess")
            || self.rules.banned_imports.iter().any(|b| b == key)
            || self
                .rules
                .banned_calls
                .iter()
                .any(|b| b.split('.').next() == Some(key) && b.contains('.'))
    }

    /// `vals`, one level down by `key`.
    fn member(&self, vals: BTreeSet<Val>, key: &str) -> BTreeSet<Val> {
        let mut out = BTreeSet::new();
        for v in vals {
            match v {
                // `sys.modules['os']` is the module `os`.
                Val::Path(p) if p.ends_with("sys.modules") => {
                    out.insert(Val::Path(key.to_string()));
                }
                Val::Path(p) => {
                    // A module re-exported by another (`shutil.os`) is that
                    // module, whatever the path to it.
                    if p != self.root() && self.relevant_module(key) {
                        out.insert(Val::Path(key.to_string()));
                    }
                    out.insert(Val::Path(format!("{p}.{key}")));
                }
                d => {
                    out.insert(d);
                }
            }
        }
        out
    }

    /// A member whose name is computed: unresolvable when it could be a
    /// banned function.
    fn computed(&self, vals: BTreeSet<Val>, what: &str) -> BTreeSet<Val> {
        vals.into_iter()
            .filter_map(|v| match v {
                Val::Path(p) if self.holds_banned(&p) => Some(Val::Dynamic(format!(
                    "{what} of `{p}`, which holds a banned function"
                ))),
                Val::Path(_) => None,
                d => Some(d),
            })
            .collect()
    }

    /// What a call evaluates to, when it looks a name up: `getattr`,
    /// `vars`, `globals`, `__import__`, `require`, `Reflect.get`, property
    /// descriptors, and namespace methods that take a key.
    fn resolve_call(
        &self,
        n: Node<'t>,
        depth: usize,
        seen: &mut BTreeSet<String>,
    ) -> BTreeSet<Val> {
        let mut out = BTreeSet::new();
        let Some(f) = n.child_by_field_name("function") else {
            return out;
        };
        let args: Vec<Node<'t>> = n
            .child_by_field_name("arguments")
            .map(|a| {
                let mut c = a.walk();
                a.named_children(&mut c)
                    .filter(|x| x.kind() != "comment")
                    .collect()
            })
            .unwrap_or_default();
        let callee = self.resolve(f, depth + 1, seen);
        let names = |p: &str| callee.contains(&Val::Path(p.to_string()));
        // A method of a namespace that looks a name up by a key
        // (`vars(builtins).get(k)`, `os.__dict__.pop(k)`), or hands
        // them all out (`.values()`).
        let lookups: Vec<(String, bool)> = callee
            .iter()
            .filter_map(|v| match v {
                Val::Path(p) if self.python => {
                    let (base, method) = p.rsplit_once('.')?;
                    let by_key = matches!(
                        method,
                        "get" | "__getitem__" | "__getattribute__" | "pop" | "setdefault"
                    );
                    let all = matches!(method, "values" | "items");
                    (by_key || all).then(|| (base.to_string(), by_key))
                }
                _ => None,
            })
            .collect();
        let arg_const = |i: usize| args.get(i).and_then(|a| self.const_str(*a, 0));
        let arg_vals = |i: usize, seen: &mut BTreeSet<String>| {
            args.get(i)
                .map(|a| self.resolve(*a, depth + 1, seen))
                .unwrap_or_default()
        };
        for (base, by_key) in lookups {
            let base: BTreeSet<Val> = [Val::Path(base)].into();
            out.extend(if by_key {
                match arg_const(0) {
                    Some(key) => self.member(base, &key),
                    None => self.computed(base, "a lookup with a computed key"),
                }
            } else {
                self.computed(base, "every member")
            });
        }
        if !self.python {
            if names("global.Object.getOwnPropertyDescriptor")
                || names("global.Reflect.getOwnPropertyDescriptor")
            {
                let base = arg_vals(0, seen);
                out.extend(match arg_const(1) {
                    Some(key) => self.member(base, &key),
                    None => self.computed(base, "a property descriptor with a computed name"),
                });
                return out;
            }
            if names("global.Object.values")
                || names("global.Object.entries")
                || names("global.Object.getOwnPropertyDescriptors")
            {
                let base = arg_vals(0, seen);
                out.extend(self.computed(base, "every property"));
                return out;
            }
        }
        if self.python {
            if names("builtins.getattr") {
                let base = arg_vals(0, seen);
                return match arg_const(1) {
                    Some(key) => self.member(base, &key),
                    None => self.computed(base, "a `getattr` with a computed name"),
                };
            }
            // `vars(X)` is X's namespace; `globals()`, `locals()` the
            // module's, which falls back to the built-ins.
            if names("builtins.vars") && !args.is_empty() {
                return arg_vals(0, seen);
            }
            if names("builtins.globals") || names("builtins.locals") {
                out.insert(Val::Path("builtins".into()));
                return out;
            }
            if names("builtins.__import__") || names("importlib.import_module") {
                if let Some(m) = arg_const(0) {
                    out.insert(Val::Path(self.module(&m)));
                }
                return out;
            }
        } else {
            if is_require(&callee) || names("global.import") {
                if let Some(m) = arg_const(0) {
                    out.insert(Val::Path(self.module(&m)));
                }
                return out;
            }
            if names("global.Reflect.get") {
                let base = arg_vals(0, seen);
                return match arg_const(1) {
                    Some(key) => self.member(base, &key),
                    None => self.computed(base, "a `Reflect.get` with a computed name"),
                };
            }
        }
        out
    }

    fn resolve(&self, n: Node<'t>, depth: usize, seen: &mut BTreeSet<String>) -> BTreeSet<Val> {
        let mut out = BTreeSet::new();
        if depth > MAX_DEPTH {
            out.insert(Val::Dynamic("an expression too deep to follow".into()));
            return out;
        }
        match n.kind() {
            "identifier" | "shorthand_property_identifier" => {
                return self.resolve_name(&self.ident(n), depth + 1, seen);
            }
            "parenthesized_expression" => {
                if let Some(inner) = n.named_child(0) {
                    return self.resolve(inner, depth + 1, seen);
                }
            }
            // `(0, eval)`: the last one.
            "sequence_expression" => {
                let count = n.named_child_count();
                let last = count
                    .checked_sub(1)
                    .and_then(|i| u32::try_from(i).ok())
                    .and_then(|i| n.named_child(i));
                if let Some(last) = last {
                    return self.resolve(last, depth + 1, seen);
                }
            }
            "attribute" | "member_expression" => {
                let obj = n.child_by_field_name("object");
                let prop = n
                    .child_by_field_name("attribute")
                    .or_else(|| n.child_by_field_name("property"));
                if let (Some(o), Some(p)) = (obj, prop) {
                    let key = self.ident(p);
                    let base = self.resolve(o, depth + 1, seen);
                    // `X.__dict__` is X's namespace; `module.require` is `require`.
                    if key == "__dict__" {
                        return base;
                    }
                    if !self.python && self.text_of(o) == "module" && key == "require" {
                        out.insert(Val::Path("global.require".into()));
                        return out;
                    }
                    return self.member(base, &key);
                }
            }
            "subscript" | "subscript_expression" => {
                let obj = n
                    .child_by_field_name("value")
                    .or_else(|| n.child_by_field_name("object"));
                let key = n
                    .child_by_field_name("subscript")
                    .or_else(|| n.child_by_field_name("index"));
                if let (Some(o), Some(k)) = (obj, key) {
                    let base = self.resolve(o, depth + 1, seen);
                    return match self.const_str(k, 0) {
                        Some(key) => self.member(base, &key),
                        None => self.computed(base, "a computed member"),
                    };
                }
            }
            "call" | "call_expression" => return self.resolve_call(n, depth, seen),
            "await_expression" => {
                if let Some(inner) = n.named_child(0) {
                    return self.resolve(inner, depth + 1, seen);
                }
            }
            _ => {}
        }
        out
    }

    // ---- checks ----

    fn refuse(&mut self, node: Node<'t>, what: String) {
        self.found.push(reject(self.path, node, what));
    }

    /// Refuse `vals` at `node` if any is a banned function or unresolvable.
    fn judge(&mut self, node: Node<'t>, vals: &BTreeSet<Val>) {
        for v in vals {
            match v {
                Val::Path(p) => {
                    if !p.starts_with(&format!("{}.", self.root()))
                        && let Some(b) = self.import_banned(p)
                    {
                        let spelled: String = self.text_of(node).split_whitespace().collect();
                        self.refuse(
                            node,
                            format!("banned import `{b}` (reached as `{spelled}`)"),
                        );
                        return;
                    }
                    if let Some(b) = self.path_banned(p) {
                        let spelled: String = self.text_of(node).split_whitespace().collect();
                        let what = if spelled == b {
                            format!("banned call `{b}`")
                        } else {
                            format!("banned call `{b}` (reached as `{spelled}`)")
                        };
                        self.refuse(node, what);
                        return;
                    }
                }
                Val::Dynamic(why) => {
                    self.refuse(node, format!("unresolvable: {why}"));
                    return;
                }
            }
        }
    }

    /// Whether identifier `n` is a name being defined or a label, not a
    /// reference.
    fn is_definition(&self, n: Node<'t>) -> bool {
        let Some(p) = n.parent() else {
            return false;
        };
        let field_is = |f: &str| p.child_by_field_name(f) == Some(n);
        match p.kind() {
            "attribute" => field_is("attribute"),
            "keyword_argument" => field_is("name"),
            "function_definition"
            | "class_definition"
            | "function_declaration"
            | "class_declaration"
            | "method_definition"
            | "generator_function_declaration" => field_is("name"),
            "assignment" | "assignment_expression" | "augmented_assignment" => field_is("left"),
            "named_expression" => field_is("name"),
            "variable_declarator" => field_is("name"),
            "parameters"
            | "lambda_parameters"
            | "formal_parameters"
            | "default_parameter"
            | "typed_parameter"
            | "typed_default_parameter"
            | "list_splat_pattern"
            | "dictionary_splat_pattern"
            | "required_parameter"
            | "optional_parameter"
            | "global_statement"
            | "nonlocal_statement"
            | "dotted_name"
            | "aliased_import"
            | "import_from_statement"
            | "import_statement"
            | "import_specifier"
            | "namespace_import"
            | "import_clause"
            | "import_require_clause"
            | "labeled_statement"
            | "break_statement"
            | "continue_statement"
            | "pattern_list"
            | "tuple_pattern"
            | "as_pattern_target"
            | "pair_pattern" => true,
            "for_statement" | "for_in_clause" => field_is("left"),
            _ => false,
        }
    }

    /// `from m import f`: a banned module, or a banned function by name.
    fn check_py_import_from(&mut self, n: Node<'t>) {
        if let Some(m) = n.child_by_field_name("module_name") {
            let module = self.module(self.text_of(m));
            if let Some(b) = self.import_banned(&module) {
                self.refuse(m, format!("banned import `{b}`"));
            }
            let mut c = n.walk();
            for child in n.named_children(&mut c) {
                if child == m {
                    continue;
                }
                let name = child.child_by_field_name("name").unwrap_or(child);
                let full = format!("{module}.{}", self.module(self.text_of(name)));
                if child.kind() != "wildcard_import"
                    && let Some(b) = self.path_banned(&full)
                {
                    self.refuse(
                        name,
                        format!("banned call `{b}` (imported from `{module}`)"),
                    );
                }
            }
        }
    }

    /// ES imports and re-exports, and TypeScript's `import x = require()`:
    /// banned modules, and banned functions imported by name.
    fn check_js_import(&mut self, n: Node<'t>) {
        let mut sources = Vec::new();
        if let Some(src) = n.child_by_field_name("source") {
            sources.push(src);
        }
        let mut c = n.walk();
        for child in n.named_children(&mut c) {
            if child.kind() == "import_require_clause"
                && let Some(src) = child.child_by_field_name("source")
            {
                sources.push(src);
            }
        }
        for src in sources {
            if let Some(m) = self.const_str(src, 0)
                && let Some(b) = self.import_banned(&m)
            {
                self.refuse(src, format!("banned import `{b}`"));
            }
        }
        // Named imports of banned functions.
        if let Some(module) = self.js_source(n) {
            let mut specs = Vec::new();
            collect_kind(n, "import_specifier", &mut specs);
            for spec in specs {
                if let Some(name) = spec.child_by_field_name("name") {
                    let imported = self.const_str(name, 0).unwrap_or_else(|| self.ident(name));
                    if let Some(b) = self.path_banned(&format!("{module}.{imported}")) {
                        self.refuse(
                            name,
                            format!("banned call `{b}` (imported from `{module}`)"),
                        );
                    }
                }
            }
        }
    }

    /// Second pass: judge every import, reference, attribute and constant.
    fn check(&mut self, n: Node<'t>) {
        let mut descend = true;
        match (self.python, n.kind()) {
            (true, "import_statement") => {
                let mut c = n.walk();
                for child in n.named_children(&mut c) {
                    let name = child.child_by_field_name("name").unwrap_or(child);
                    if let Some(b) = self.import_banned(self.text_of(name)) {
                        self.refuse(name, format!("banned import `{b}`"));
                    }
                }
                descend = false;
            }
            (true, "import_from_statement") => {
                self.check_py_import_from(n);
                descend = false;
            }
            (false, "import_statement") | (false, "export_statement") => {
                self.check_js_import(n);
                descend = n.kind() == "export_statement";
            }
            (_, "identifier") | (false, "shorthand_property_identifier")
                if !self.is_definition(n) =>
            {
                let vals = self.resolve(n, 0, &mut BTreeSet::new());
                self.judge(n, &vals);
            }
            (_, "attribute") | (_, "member_expression") => {
                let prop = n
                    .child_by_field_name("attribute")
                    .or_else(|| n.child_by_field_name("property"));
                if let Some(p) = prop
                    && let Some(b) = self.attribute_banned(&self.ident(p))
                {
                    self.refuse(p, format!("banned attribute `{b}`"));
                }
                let vals = self.resolve(n, 0, &mut BTreeSet::new());
                self.judge(n, &vals);
            }
            (_, "subscript") | (_, "subscript_expression") => {
                let vals = self.resolve(n, 0, &mut BTreeSet::new());
                self.judge(n, &vals);
            }
            (_, "call") | (_, "call_expression") | (_, "new_expression") => {
                self.check_call(n);
                // What the call returns may itself be a banned function or
                // unresolvable (`vars(builtins).get(k)`, `Object.values(globalThis)`).
                let vals = self.resolve(n, 0, &mut BTreeSet::new());
                self.judge(n, &vals);
            }
            (_, "string")
            | (_, "concatenated_string")
            | (_, "template_string")
            | (_, "binary_operator")
            | (_, "binary_expression") => {
                // The outermost constant is judged (its parts are not).
                if let Some(s) = self.const_str(n, 0) {
                    if let Some(what) = self.string_banned(&s) {
                        self.refuse(n, format!("{what} named by a string"));
                    }
                    descend = false;
                }
            }
            _ => {}
        }
        if descend {
            let mut c = n.walk();
            for child in n.children(&mut c) {
                self.check(child);
            }
        }
    }

    /// Imports by call and the dynamic forms that need a constant.
    fn check_call(&mut self, n: Node<'t>) {
        let Some(f) = n
            .child_by_field_name("function")
            .or_else(|| n.child_by_field_name("constructor"))
        else {
            return;
        };
        let callee = self.resolve(f, 0, &mut BTreeSet::new());
        let names = |p: &str| callee.contains(&Val::Path(p.to_string()));
        let first = n.child_by_field_name("arguments").and_then(|a| {
            let mut c = a.walk();
            a.named_children(&mut c).find(|x| x.kind() != "comment")
        });
        let second = n.child_by_field_name("arguments").and_then(|a| {
            let mut c = a.walk();
            a.named_children(&mut c)
                .filter(|x| x.kind() != "comment")
                .nth(1)
        });
        let spelled: String = self.text_of(f).split_whitespace().collect();
        let import_call = if self.python {
            names("builtins.__import__") || names("importlib.import_module")
        } else {
            is_require(&callee) || names("global.import") || self.text_of(f) == "import"
        };
        if import_call && !self.rules.banned_imports.is_empty() {
            match first.and_then(|a| self.const_str(a, 0)) {
                Some(m) => {
                    if let (Some(b), Some(a)) = (self.import_banned(&m), first) {
                        self.refuse(a, format!("banned import `{b}` (by `{spelled}`)"));
                    }
                }
                None => self.refuse(
                    n,
                    format!("unresolvable: an import of a computed module (by `{spelled}`)"),
                ),
            }
        }
        let by_name = if self.python {
            names("builtins.getattr") || names("builtins.setattr") || names("builtins.delattr")
        } else {
            names("global.Reflect.get")
                || names("global.Reflect.set")
                || names("global.Reflect.getOwnPropertyDescriptor")
        };
        if by_name && self.strict() && second.and_then(|a| self.const_str(a, 0)).is_none() {
            self.refuse(n, format!("unresolvable: `{spelled}` with a computed name"));
        }
    }
}

/// Whether a callee is a CommonJS loader: `require`, `module.require`,
/// `require.main.require`, `process.mainModule.require`, whatever the
/// path to it.
fn is_require(callee: &BTreeSet<Val>) -> bool {
    callee.iter().any(|v| match v {
        Val::Path(p) => {
            p == "global.require" || (p.starts_with("global.") && p.ends_with(".require"))
        }
        Val::Dynamic(_) => false,
    })
}

/// Every descendant of `n` of `kind`.
fn collect_kind<'t>(n: Node<'t>, kind: &str, out: &mut Vec<Node<'t>>) {
    if n.kind() == kind {
        out.push(n);
    }
    let mut c = n.walk();
    for child in n.named_children(&mut c) {
        collect_kind(child, kind, out);
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
        let tree =
            parse(lang, text).map_err(|crate::syntax::ParserFailed(message)| GateRejection {
                rule: "gate: code policy (internal error)".into(),
                file: path.to_string(),
                line: 1,
                column: 1,
                message,
            })?;
        let mut gate = Gate {
            rules,
            text,
            path,
            python,
            binds: BTreeMap::new(),
            star: Vec::new(),
            found: Vec::new(),
            steps: std::cell::Cell::new(0),
        };
        gate.collect(tree.root_node());
        gate.check(tree.root_node());
        // The first in the file, whatever the tree's nesting.
        match gate.found.into_iter().min_by_key(|r| (r.line, r.column)) {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
