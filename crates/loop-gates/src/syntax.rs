//! The syntax gate.

use crate::GateRejection;
use tree_sitter::{Node, Parser, Tree};

/// A language the gates read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `.py`
    Python,
    /// `.rs`
    Rust,
    /// `.js`, `.mjs`, `.cjs`, `.jsx`
    JavaScript,
    /// `.ts`, `.mts`, `.cts`
    TypeScript,
    /// `.tsx`
    Tsx,
    /// `.go`
    Go,
    /// `.c`, `.h`
    C,
    /// `.cc`, `.cpp`, `.cxx`, `.hpp`, `.hh`, `.hxx`
    Cpp,
    /// `.json`
    Json,
    /// `.yaml`, `.yml`
    Yaml,
    /// `.toml`
    Toml,
}

impl Language {
    /// Its name, as a person says it.
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "Python",
            Language::Rust => "Rust",
            Language::JavaScript => "JavaScript",
            Language::TypeScript => "TypeScript",
            Language::Tsx => "TSX",
            Language::Go => "Go",
            Language::C => "C",
            Language::Cpp => "C++",
            Language::Json => "JSON",
            Language::Yaml => "YAML",
            Language::Toml => "TOML",
        }
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::Rust => tree_sitter_rust::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Language::Go => tree_sitter_go::LANGUAGE.into(),
            Language::C => tree_sitter_c::LANGUAGE.into(),
            Language::Cpp => tree_sitter_cpp::LANGUAGE.into(),
            Language::Json => tree_sitter_json::LANGUAGE.into(),
            Language::Yaml => tree_sitter_yaml::LANGUAGE.into(),
            Language::Toml => tree_sitter_toml_ng::LANGUAGE.into(),
        }
    }
}

/// The language of `path`, by its extension.
pub fn language_of(path: &str) -> Option<Language> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "py" | "pyi" | "pyw" => Language::Python,
        "rs" => Language::Rust,
        "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
        "ts" | "mts" | "cts" => Language::TypeScript,
        "tsx" => Language::Tsx,
        "go" => Language::Go,
        "c" | "h" => Language::C,
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => Language::Cpp,
        "json" => Language::Json,
        "yaml" | "yml" => Language::Yaml,
        "toml" => Language::Toml,
        _ => return None,
    })
}

/// The language a file's content says it is, by its `#!` line (for files
/// whose name says nothing: `bin/tool`, `notes.txt` made executable).
pub fn language_of_content(text: &str) -> Option<Language> {
    let first = text.lines().next()?.strip_prefix("#!")?;
    let interpreter = first
        .split_whitespace()
        .find(|w| !w.ends_with("/env") && !w.starts_with('-'))?;
    let name = interpreter.rsplit('/').next()?;
    if name.starts_with("python") {
        Some(Language::Python)
    } else if name == "node" || name == "nodejs" || name == "deno" || name == "bun" {
        Some(Language::JavaScript)
    } else {
        None
    }
}

/// A parser that could not do its work: the gate's own failure, never the
/// file's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParserFailed(pub String);

/// Parse `text` as `lang`. An error is the gate's own failure.
pub fn parse(lang: Language, text: &str) -> Result<Tree, ParserFailed> {
    // Fault injection, so the tests can show a failing gate refuses rather
    // than waves a change through (`LOOP_GATES_FAULT=parse`; only with the
    // `fault-injection` feature).
    if cfg!(feature = "fault-injection")
        && std::env::var_os("LOOP_GATES_FAULT").is_some_and(|v| v == "parse")
    {
        return Err(ParserFailed(format!(
            "the {} parser failed (injected fault)",
            lang.name()
        )));
    }
    let mut parser = Parser::new();
    parser
        .set_language(&lang.grammar())
        .map_err(|e| ParserFailed(format!("the {} grammar cannot be loaded: {e}", lang.name())))?;
    parser
        .parse(text, None)
        .ok_or_else(|| ParserFailed(format!("the {} parser gave up", lang.name())))
}

/// The first error or missing node, depth first, in document order.
fn first_error(node: Node<'_>) -> Option<Node<'_>> {
    if node.is_error() || node.is_missing() {
        return Some(node);
    }
    if !node.has_error() {
        return None;
    }
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
    children.into_iter().find_map(first_error).or(Some(node))
}

/// Describe a syntax error at `node`.
fn describe(node: Node<'_>, text: &str) -> String {
    if node.is_missing() {
        return format!("missing `{}`", node.kind());
    }
    let snippet: String = text
        .get(node.start_byte()..node.end_byte())
        .unwrap_or_default()
        .chars()
        .take(40)
        .collect();
    let snippet = snippet
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    if snippet.is_empty() {
        "unexpected end of input".into()
    } else {
        format!("unexpected `{snippet}`")
    }
}

/// Refuse `after` if it does not parse, unless `before` did not either
/// (a file already broken may be repaired step by step).
pub fn check(
    lang: Language,
    path: &str,
    before: Option<&str>,
    after: &str,
) -> Result<(), GateRejection> {
    let internal = |ParserFailed(message): ParserFailed| GateRejection {
        rule: "gate: syntax (internal error)".into(),
        file: path.to_string(),
        line: 1,
        column: 1,
        message,
    };
    let tree = parse(lang, after).map_err(internal)?;
    let Some(bad) = first_error(tree.root_node()) else {
        return Ok(());
    };
    if let Some(before) = before {
        let old = parse(lang, before).map_err(internal)?;
        if old.root_node().has_error() {
            return Ok(());
        }
    }
    let at = bad.start_position();
    Err(GateRejection {
        rule: "gate: syntax".into(),
        file: path.to_string(),
        line: at.row + 1,
        column: at.column + 1,
        message: format!("{} syntax error: {}", lang.name(), describe(bad, after)),
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn reject(path: &str, text: &str) -> GateRejection {
        let lang = language_of(path).unwrap();
        check(lang, path, None, text).unwrap_err()
    }

    #[test]
    fn every_language_accepts_good_code_and_names_the_place_of_bad_code() {
        let cases: &[(&str, &str, &str, (usize, usize))] = &[
            (
                "a.py",
                "def f(x):\n    return x + 1\n",
                "def f(x:\n    return x\n",
                (1, 1),
            ),
            (
                "a.rs",
                "fn main() { let x = 1; }\n",
                "fn main() {\n    let x = ;\n}\n",
                (2, 13),
            ),
            (
                "a.js",
                "const f = (a) => a * 2;\n",
                "const f = (a) => {\n  return a *;\n}\n",
                (2, 12),
            ),
            (
                "a.ts",
                "let n: number = 1;\n",
                "let n: number = ;\n",
                (1, 17),
            ),
            (
                "a.tsx",
                "const x = <div>hi</div>;\n",
                "const x = <div>hi</div;\n",
                (1, 1),
            ),
            (
                "a.go",
                "package main\nfunc main() {}\n",
                "package main\nfunc main( {}\n",
                (2, 1),
            ),
            (
                "a.c",
                "int main(void) { return 0; }\n",
                "int main(void) { return 0 }\n",
                (1, 26),
            ),
            (
                "a.cpp",
                "int f() { return 1; }\n",
                "int f() { return 1 }\n",
                (1, 19),
            ),
            ("a.json", "{\"a\": [1, 2]}\n", "{\"a\": [1, 2}\n", (1, 1)),
            ("a.yaml", "a: 1\nb: [1, 2]\n", "a: 1\nb: [1, 2\n", (2, 1)),
            ("a.toml", "[a]\nb = 1\n", "[a]\nb = \n", (2, 1)),
        ];
        for (path, good, bad, _) in cases {
            let lang = language_of(path).unwrap();
            assert_eq!(check(lang, path, None, good), Ok(()), "{path} good");
            assert!(
                check(lang, path, None, bad).is_err(),
                "{path}: {bad:?} passed"
            );
            let r = reject(path, bad);
            assert_eq!(r.rule, "gate: syntax");
            assert_eq!(r.file, *path);
            assert!(r.message.starts_with(lang.name()), "{path}: {r}");
            assert!(
                r.line >= 1 && r.line <= bad.lines().count() + 1,
                "{path}: {r}"
            );
        }
        // Exact places for a few, so positions are tested, not assumed.
        let r = reject("a.rs", "fn main() {\n    let x = ;\n}\n");
        assert_eq!(
            (r.line, r.column, r.message.as_str()),
            (2, 11, "Rust syntax error: unexpected `=`"),
            "{r}"
        );
        let r = reject("a.c", "int main(void) { return 0 }\n");
        assert_eq!(
            (r.line, r.column, r.message.as_str()),
            (1, 26, "C syntax error: missing `;`"),
            "{r}"
        );
    }

    #[test]
    fn a_file_already_broken_may_be_repaired_step_by_step() {
        let broken = "def f(:\n";
        assert!(
            check(
                Language::Python,
                "a.py",
                Some(broken),
                "def f(:\n    pass\n"
            )
            .is_ok()
        );
        assert!(check(Language::Python, "a.py", Some("x = 1\n"), broken).is_err());
        assert_eq!(language_of("README.md"), None);
        assert_eq!(language_of("Makefile"), None);
    }
}
