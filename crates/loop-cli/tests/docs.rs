//! The README and `docs/` as a reader follows them: every relative link
//! leads to a file that is there (and an `#anchor` to one of its
//! headings), and every `loop …` command shown in a code block parses with
//! today's command line (run with `--help` appended: an unknown subcommand
//! or flag, or a bad value, fails before the help is printed).
#![allow(clippy::disallowed_methods)] // tests read the repository's own docs
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `README.md` and every Markdown page under `docs/` (plans included).
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut stack = vec![root().join("docs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A heading's anchor as GitHub makes it: lower case, spaces to `-`,
/// punctuation other than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every `](target)` link in `text` outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push(tail[..end].trim().to_string());
            rest = &tail[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            let link = link.split_whitespace().next().unwrap_or_default();
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let name = page
                .strip_prefix(root())
                .unwrap_or(&page)
                .display()
                .to_string();
            if !target.exists() {
                broken.push(format!("{name}: {link} (no such file)"));
                continue;
            }
            if !anchor.is_empty() && target.extension().is_some_and(|x| x == "md") {
                let there = std::fs::read_to_string(&target).unwrap();
                if !anchors(&there).iter().any(|a| a == anchor) {
                    broken.push(format!("{name}: {link} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Split a shown command line as a shell would (quotes, a trailing
/// comment), up to the first pipe, redirection or `&&`.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, ' ' | '\t') => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, '#') if !started => break,
            (None, '|' | '>' | '<' | ';' | '&') if !started => break,
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// Every `loop …` command in a page's shell code blocks: (line, words).
fn commands(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut shell = false;
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            fenced = !fenced;
            shell = fenced && matches!(lang.trim(), "sh" | "bash" | "console" | "shell");
            continue;
        }
        if !shell {
            continue;
        }
        let t = t.strip_prefix("$ ").unwrap_or(t);
        if t.starts_with("loop ") || t == "loop" {
            out.push((n + 1, words(t)));
        }
    }
    out
}

#[test]
fn every_command_shown_parses_with_todays_command_line() {
    let mut refused = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (line, words) in commands(&text) {
            // `loop` alone, and `--help` itself, print help anyway.
            let args: Vec<&String> = words.iter().skip(1).collect();
            if args.iter().any(|a| *a == "--help" || *a == "-h") {
                continue;
            }
            // Arguments after `--` are another program's.
            let mut argv: Vec<&str> = Vec::new();
            for a in &args {
                if *a == "--" {
                    break;
                }
                argv.push(a);
            }
            seen += 1;
            let out = Command::new(env!("CARGO_BIN_EXE_loop"))
                .args(&argv)
                .arg("--help")
                .env("NO_COLOR", "1")
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            if !out.status.success() {
                refused.push(format!(
                    "{name}:{line}: {}\n    {}",
                    words.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .next()
                        .unwrap_or_default()
                ));
            }
        }
    }
    assert!(
        seen > 20,
        "only {seen} commands found: is the parser reading the blocks?"
    );
    assert!(
        refused.is_empty(),
        "commands today's CLI refuses:\n{}",
        refused.join("\n")
    );
}

/// The checks above catch what they claim: a made-up flag is refused, a
/// link to nowhere is found, a heading's anchor is GitHub's.
#[test]
fn the_checks_see_what_they_look_for() {
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["run", "x", "--no-such-flag", "--help"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a made-up flag must be refused");
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .args(["run", "x", "--max-steps", "3", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "a real flag parses");
    assert_eq!(
        slug(" The HTTP API: `loop serve`"),
        "the-http-api-loop-serve"
    );
    assert_eq!(
        links("see [a](docs/a.md#b) and [c](http://x)"),
        ["docs/a.md#b", "http://x"]
    );
    assert_eq!(
        words("loop run \"add a test\" --check 'cargo test' # note"),
        ["loop", "run", "add a test", "--check", "cargo test"]
    );
    assert_eq!(words("loop diff ID | git apply"), ["loop", "diff", "ID"]);
}
