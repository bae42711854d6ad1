//! `docs/architecture.md` is the map of what exists: every crate has its
//! row in "The crates, as built", every `loop` subcommand is in "The `loop`
//! command line", and no crate's modules import each other in a cycle
//! (a module's `crate::…` paths outside its tests, comments and docs).
#![allow(clippy::disallowed_methods)] // the test reads the repository's own files
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn doc() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).unwrap()
}

/// The text of `doc` from the heading starting with `heading` to the next
/// heading of the same level.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc.find(heading).unwrap_or_else(|| panic!("{heading}"));
    let rest = &doc[start + heading.len()..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i);
    &rest[..end]
}

#[test]
fn every_crate_has_its_row() {
    let doc = doc();
    let table = section(&doc, "## The crates, as built");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().join("Cargo.toml").is_file() && !table.contains(&format!("| `{name}` |")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "crates without their row in docs/architecture.md: {missing:?}"
    );
}

#[test]
fn every_subcommand_is_in_the_command_line_section() {
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let commands: Vec<String> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(commands.len() > 20, "{help}");
    let doc = doc();
    let synopsis = section(&doc, "## The `loop` command line");
    let words: BTreeSet<&str> = synopsis
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .collect();
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !words.contains(c.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "subcommands not in docs/architecture.md's command line: {missing:?}"
    );
}

/// The modules of the crate whose sources are `src`: name → the other
/// modules its code (not its tests or comments) names. With `nested`, a
/// module is a file (`task/drive`, a folder's `mod.rs` being the folder);
/// without, a top-level module or folder (`task`).
fn imports(src: &Path, nested: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let module = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().to_string())
            .collect();
        if parts.last().is_some_and(|l| l == "mod") {
            parts.pop();
        }
        if !nested {
            parts.truncate(1);
        }
        let name = parts.join("/");
        (!name.is_empty() && name != "lib" && name != "main").then_some(name)
    };
    let names: BTreeSet<String> = files.iter().filter_map(|p| module(p)).collect();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let Some(me) = module(f) else { continue };
        let text = std::fs::read_to_string(f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let entry = out.entry(me.clone()).or_default();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or("");
            for (i, _) in line.match_indices("crate::") {
                let path: Vec<String> = line[i + 7..]
                    .split("::")
                    .map(|seg| {
                        seg.chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect()
                    })
                    .take_while(|seg: &String| !seg.is_empty())
                    .collect();
                // The longest module the path names.
                let named = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].join("/"))
                    .find(|m| names.contains(m));
                if let Some(m) = named
                    && m != me
                    && !me.starts_with(&format!("{m}/"))
                {
                    entry.insert(m);
                }
            }
        }
    }
    out
}

/// A cycle among `graph`'s modules, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            return Some(path[i..].to_vec());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_cycle_among_its_modules() {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        // Between folders (and top-level files), and between files.
        for nested in [false, true] {
            if let Some(c) = cycle(&imports(&src, nested)) {
                found.push(format!(
                    "{}: {}",
                    entry.file_name().to_string_lossy(),
                    c.join(" → ")
                ));
            }
        }
    }
    assert!(found.is_empty(), "import cycles: {found:?}");
    // The check sees a cycle where there is one.
    let mut planted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    planted.insert("a".into(), ["b".to_string()].into());
    planted.insert("b".into(), ["a".to_string()].into());
    assert_eq!(cycle(&planted), Some(vec!["a".into(), "b".into()]));
}

/// Every source file of every crate (not its tests: a crate's `tests/`,
/// a module's own `tests` folder or `tests.rs`).
fn sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root().join("crates")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "tests" && name != "target" {
                    stack.push(p);
                }
            } else if name.ends_with(".rs")
                && name != "tests.rs"
                && p.components().any(|c| c.as_os_str() == "src")
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// No function outside tests says what went wrong as a bare `String`: an
/// error has a type (`Result<_, String>`, `type Err = String`).
#[test]
fn no_error_is_a_bare_string() {
    let mut found = Vec::new();
    for p in sources() {
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            let bare = line.contains("type Err = String")
                || line
                    .match_indices("Result<")
                    .any(|(i, _)| result_error(&line[i + 7..]) == Some("String"));
            if bare {
                found.push(format!("{}:{}: {}", p.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "errors as bare strings:\n{}",
        found.join("\n")
    );
    assert_eq!(
        result_error("Option<(String, u8)>, String> {"),
        Some("String")
    );
    assert_eq!(result_error("Vec<u8>, Error>"), Some("Error"));
    assert_eq!(result_error("String>"), None);
}

/// The error type of a `Result<` whose arguments start `rest`.
fn result_error(rest: &str) -> Option<&str> {
    let mut depth = 0;
    let mut comma = None;
    for (i, c) in rest.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '>' if depth == 0 => return comma.map(|c: usize| rest[c + 1..i].trim()),
            '>' => depth -= 1,
            ',' if depth == 0 => comma = Some(i),
            _ => {}
        }
    }
    None
}

/// Every function in `text` (outside its tests): (name, first line, lines).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    // Comments, strings and character literals blanked (newlines kept), so
    // braces are only the code's.
    let b = text.as_bytes();
    let mut code = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let keep_lines = |code: &mut Vec<u8>, part: &[u8]| {
            code.extend(part.iter().map(|c| if *c == b'\n' { b'\n' } else { b' ' }))
        };
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|c| *c == b'\n').unwrap_or(rest.len());
            keep_lines(&mut code, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let end = rest
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(rest.len(), |p| p + 2);
            keep_lines(&mut code, &rest[..end]);
            i += end;
        } else if rest[0] == b'r'
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && rest.len() > 1
            && (rest[1] == b'"' || rest[1] == b'#')
        {
            let hashes = rest[1..].iter().take_while(|c| **c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                code.push(rest[0]);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = 2 + hashes;
            let end = rest[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| body + p + close.len());
            keep_lines(&mut code, &rest[..end]);
            i += end;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            keep_lines(&mut code, &rest[..end]);
            i += end;
        } else if rest[0] == b'\''
            && (rest.get(2) == Some(&b'\'') || (rest.get(1) == Some(&b'\\') && rest.len() > 3))
        {
            // A character literal ('x', '\n', '\u{..}'); a lifetime is left.
            let end = rest[1..]
                .iter()
                .position(|c| *c == b'\'')
                .map_or(1, |p| p + 2);
            let end = if rest.get(1) == Some(&b'\\') {
                rest[2..]
                    .iter()
                    .position(|c| *c == b'\'')
                    .map_or(1, |p| p + 3)
            } else {
                end
            };
            keep_lines(&mut code, &rest[..end]);
            i += end;
        } else {
            code.push(rest[0]);
            i += 1;
        }
    }
    let code = String::from_utf8_lossy(&code).to_string();
    let code = code.split("#[cfg(test)]").next().unwrap_or("").to_string();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("fn ") {
        let at = from + p;
        from = at + 3;
        if at > 0 {
            let before = code.as_bytes()[at - 1];
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue;
            }
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` before any `;` (a declaration has none).
        let tail = &code[at..];
        let Some(open) = tail
            .find(['{', ';'])
            .filter(|o| tail.as_bytes()[*o] == b'{')
        else {
            continue;
        };
        let mut depth = 0;
        let mut close = None;
        for (k, c) in tail[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(open + k);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        let (first, last) = (line_of(at), line_of(at + close));
        out.push((name, first, last - first + 1));
    }
    out
}

#[test]
fn no_function_grows_past_120_lines() {
    let mut over = Vec::new();
    for p in sources() {
        let rel = p.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&p).unwrap();
        for (f, line, len) in functions(&text) {
            let named = rel.ends_with("loop-cli/src/commands/mod.rs") && f == "dispatch";
            if len > 120 && !named {
                over.push(format!("(\"{rel}\", \"{f}\", {len}), // line {line}"));
            }
        }
    }
    over.sort();
    assert!(
        over.is_empty(),
        "functions over 120 lines (split them, or name a dispatcher that only delegates in docs/architecture.md and here):\n{}",
        over.join("\n")
    );
    // The measure sees a long function where there is one, and not in a
    // string or a comment.
    let planted = format!(
        "fn short() {{ let s = \"}}\"; }}\n// fn not_one() {{\nfn long() {{\n{}}}\n",
        "    x();\n".repeat(130)
    );
    let found = functions(&planted);
    assert_eq!(
        found,
        vec![("short".into(), 1, 1), ("long".into(), 3, 132)],
        "{found:?}"
    );
}

/// The runtime's public surface is its root: the front ends name nothing
/// inside its folders (private, so the compiler holds them to it). Only `views` (the JSON the front ends say) and
/// `interrupt` (the process's one Ctrl-C flag) are modules of their own.
#[test]
fn the_runtime_shows_its_root_and_not_its_folders() {
    let lib = std::fs::read_to_string(root().join("crates/loop-runtime/src/lib.rs")).unwrap();
    let public: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .collect();
    assert_eq!(
        public,
        ["interrupt", "views"],
        "public modules of loop-runtime"
    );
}
