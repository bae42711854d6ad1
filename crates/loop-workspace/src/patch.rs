//! Unified diffs: parsed strictly, applied exactly. A patch may touch
//! several files and create, delete or rename them; every hunk must find
//! its context (at the stated line, or the nearest place it matches), or
//! the whole patch is refused with the file, the hunk and the lines that
//! did not match.

use loop_protocol::RelPath;
use std::fmt;

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Unchanged.
    Context(String),
    /// Removed.
    Remove(String),
    /// Added.
    Add(String),
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based first line in the old file (0 for an empty old file).
    pub old_start: usize,
    /// Its lines, in order.
    pub lines: Vec<Line>,
    /// The old side ends without a newline.
    pub old_no_newline: bool,
    /// The new side ends without a newline.
    pub new_no_newline: bool,
    /// Line of the `@@` header in the patch text (for errors).
    pub at: usize,
}

/// The changes to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// The file before (`None`: created).
    pub old: Option<RelPath>,
    /// The file after (`None`: deleted).
    pub new: Option<RelPath>,
    /// Hunks, in order.
    pub hunks: Vec<Hunk>,
}

/// A patch that cannot be parsed or applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// Malformed text.
    Parse {
        /// 1-based line in the patch.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A path that is not a workspace path.
    Path {
        /// As written.
        path: String,
        /// Why.
        message: String,
    },
    /// A hunk whose context does not match the file.
    Mismatch {
        /// The file.
        file: String,
        /// 1-based hunk number within the file.
        hunk: usize,
        /// Where the hunk said it applies (1-based line).
        at_line: usize,
        /// The old-side lines that were expected there.
        expected: Vec<String>,
        /// What the file has there instead (as many lines).
        found: Vec<String>,
    },
    /// The file to change or delete does not exist, or the file to create does.
    Existence {
        /// The file.
        file: String,
        /// What was wrong.
        message: String,
    },
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchError::Parse { line, message } => write!(f, "patch line {line}: {message}"),
            PatchError::Path { path, message } => write!(f, "patch path `{path}`: {message}"),
            PatchError::Mismatch {
                file,
                hunk,
                at_line,
                expected,
                found,
            } => {
                write!(
                    f,
                    "{file}: hunk {hunk} does not apply: its context was not found (expected at line {at_line}):"
                )?;
                for l in expected {
                    write!(f, "\n  expected │{l}")?;
                }
                for l in found {
                    write!(f, "\n  found    │{l}")?;
                }
                Ok(())
            }
            PatchError::Existence { file, message } => write!(f, "{file}: {message}"),
        }
    }
}

impl std::error::Error for PatchError {}

fn parse_path(raw: &str, strip: &str) -> Result<Option<RelPath>, PatchError> {
    // `--- a/path\t2024-…`: drop a timestamp after a tab.
    let raw = raw.split('\t').next().unwrap_or(raw).trim_end();
    if raw == "/dev/null" {
        return Ok(None);
    }
    let p = raw.strip_prefix(strip).unwrap_or(raw);
    RelPath::parse(p).map(Some).map_err(|e| PatchError::Path {
        path: raw.to_string(),
        message: e.to_string(),
    })
}

fn parse_range(s: &str) -> Option<usize> {
    let start = s.split(',').next()?;
    start.parse().ok()
}

/// Parse a unified diff (plain or `git diff` style) into file patches.
pub fn parse(text: &str) -> Result<Vec<FilePatch>, PatchError> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<FilePatch> = Vec::new();
    let mut i = 0;
    let err = |line: usize, message: &str| PatchError::Parse {
        line: line + 1,
        message: message.to_string(),
    };
    while i < lines.len() {
        let l = lines[i];
        if let Some(old_raw) = l.strip_prefix("--- ") {
            let Some(new_raw) = lines.get(i + 1).and_then(|n| n.strip_prefix("+++ ")) else {
                return Err(err(i + 1, "a `--- old` line must be followed by `+++ new`"));
            };
            let old = parse_path(old_raw, "a/")?;
            let new = parse_path(new_raw, "b/")?;
            if old.is_none() && new.is_none() {
                return Err(err(i, "both sides are /dev/null"));
            }
            out.push(FilePatch {
                old,
                new,
                hunks: Vec::new(),
            });
            i += 2;
            continue;
        }
        if let Some(header) = l.strip_prefix("@@ ") {
            let Some(fp) = out.last_mut() else {
                return Err(err(i, "a hunk before any `---`/`+++` file header"));
            };
            let mut parts = header.split_whitespace();
            let old = parts
                .next()
                .and_then(|p| p.strip_prefix('-'))
                .ok_or_else(|| err(i, "malformed hunk header"))?;
            let new = parts
                .next()
                .and_then(|p| p.strip_prefix('+'))
                .ok_or_else(|| err(i, "malformed hunk header"))?;
            let old_len = old.split(',').nth(1).map_or(Some(1), |n| n.parse().ok());
            let new_len = new.split(',').nth(1).map_or(Some(1), |n| n.parse().ok());
            let (Some(old_start), Some(old_len), Some(_), Some(new_len)) =
                (parse_range(old), old_len, parse_range(new), new_len)
            else {
                return Err(err(i, "malformed hunk header ranges"));
            };
            let mut hunk = Hunk {
                old_start,
                lines: Vec::new(),
                old_no_newline: false,
                new_no_newline: false,
                at: i + 1,
            };
            let (mut seen_old, mut seen_new) = (0usize, 0usize);
            i += 1;
            while (seen_old < old_len || seen_new < new_len) && i < lines.len() {
                let body = lines[i];
                match body.chars().next() {
                    Some(' ') => {
                        hunk.lines.push(Line::Context(body[1..].to_string()));
                        seen_old += 1;
                        seen_new += 1;
                    }
                    // An empty line inside a hunk is an empty context line (some tools strip the space).
                    None => {
                        hunk.lines.push(Line::Context(String::new()));
                        seen_old += 1;
                        seen_new += 1;
                    }
                    Some('-') => {
                        hunk.lines.push(Line::Remove(body[1..].to_string()));
                        seen_old += 1;
                    }
                    Some('+') => {
                        hunk.lines.push(Line::Add(body[1..].to_string()));
                        seen_new += 1;
                    }
                    Some('\\') => {}
                    _ => return Err(err(i, "unexpected line inside a hunk")),
                }
                i += 1;
                // `\ No newline at end of file` applies to the line just read.
                if lines.get(i).is_some_and(|n| n.starts_with('\\')) {
                    match hunk.lines.last() {
                        Some(Line::Remove(_)) => hunk.old_no_newline = true,
                        Some(Line::Add(_)) => hunk.new_no_newline = true,
                        _ => {
                            hunk.old_no_newline = true;
                            hunk.new_no_newline = true;
                        }
                    }
                    i += 1;
                }
            }
            if seen_old != old_len || seen_new != new_len {
                return Err(err(hunk.at - 1, "the hunk is shorter than its header says"));
            }
            fp.hunks.push(hunk);
            continue;
        }
        i += 1;
    }
    if out.is_empty() {
        return Err(err(
            0,
            "no file headers (`--- a/path` / `+++ b/path`) found",
        ));
    }
    Ok(out)
}

/// Apply one file's hunks to `old` (the current content, or `None` when the
/// file does not exist). Returns the new content, `None` for a deletion.
pub fn apply(fp: &FilePatch, old: Option<&str>) -> Result<Option<String>, PatchError> {
    let file = fp
        .new
        .as_ref()
        .or(fp.old.as_ref())
        .map(|p| p.to_string())
        .unwrap_or_default();
    match (&fp.old, old) {
        (Some(_), None) => {
            return Err(PatchError::Existence {
                file,
                message: "the file to change does not exist".into(),
            });
        }
        (None, Some(_)) => {
            return Err(PatchError::Existence {
                file,
                message: "the file to create already exists".into(),
            });
        }
        _ => {}
    }
    let text = old.unwrap_or("");
    let crlf = text.contains("\r\n");
    let had_newline = text.is_empty() || text.ends_with('\n');
    let mut lines: Vec<String> = text
        .split_inclusive('\n')
        .map(|l| l.trim_end_matches('\n').trim_end_matches('\r').to_string())
        .collect();
    let mut ends_with_newline = had_newline;
    // Offset between the old file's numbering and the lines as edited so far.
    let mut delta: isize = 0;
    for (n, hunk) in fp.hunks.iter().enumerate() {
        let expected: Vec<&str> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Remove(s) => Some(s.as_str()),
                Line::Add(_) => None,
            })
            .collect();
        let replacement: Vec<String> = hunk
            .lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Add(s) => Some(s.clone()),
                Line::Remove(_) => None,
            })
            .collect();
        let stated = (hunk.old_start.max(1) as isize - 1 + delta).max(0) as usize;
        let stated = if expected.is_empty() && hunk.old_start == 0 {
            0
        } else {
            stated
        };
        let fits = |at: usize| {
            at + expected.len() <= lines.len()
                && lines[at..at + expected.len()]
                    .iter()
                    .zip(&expected)
                    .all(|(a, b)| a.trim_end_matches('\r') == b.trim_end_matches('\r'))
        };
        // The stated line first, then the nearest offsets on either side.
        let found = (0..=lines.len()).find_map(|d| {
            [stated.checked_sub(d), stated.checked_add(d)]
                .into_iter()
                .flatten()
                .find(|&at| fits(at))
        });
        let Some(at) = found else {
            let end = (stated + expected.len()).min(lines.len());
            return Err(PatchError::Mismatch {
                file,
                hunk: n + 1,
                at_line: hunk.old_start,
                expected: expected.iter().map(|s| s.to_string()).collect(),
                found: lines[stated.min(lines.len())..end].to_vec(),
            });
        };
        let touches_end = at + expected.len() == lines.len();
        lines.splice(at..at + expected.len(), replacement.iter().cloned());
        delta += replacement.len() as isize - expected.len() as isize;
        if touches_end {
            if hunk.new_no_newline {
                ends_with_newline = false;
            } else if hunk.old_no_newline || !replacement.is_empty() {
                ends_with_newline = true;
            }
        }
    }
    if fp.new.is_none() {
        if !lines.is_empty() {
            return Err(PatchError::Existence {
                file,
                message: "a deletion must remove every line of the file".into(),
            });
        }
        return Ok(None);
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(eol);
    if !lines.is_empty() && ends_with_newline {
        out.push_str(eol);
    }
    Ok(Some(out))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn one(patch: &str, old: Option<&str>) -> Result<Option<String>, PatchError> {
        let fps = parse(patch)?;
        assert_eq!(fps.len(), 1);
        apply(&fps[0], old)
    }

    #[test]
    fn modifies_with_context() {
        let p = "--- a/f.py\n+++ b/f.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";
        assert_eq!(one(p, Some("a\nb\nc\n")).unwrap().unwrap(), "a\nB\nc\n");
    }

    #[test]
    fn finds_the_context_at_an_offset() {
        let p = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n";
        assert_eq!(
            one(p, Some("0\n0\nx\ny\n")).unwrap().unwrap(),
            "0\n0\nx\nY\n"
        );
    }

    #[test]
    fn stale_context_is_refused_exactly() {
        let p = "--- a/f\n+++ b/f\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n";
        let e = one(p, Some("a\nB\nc\n")).unwrap_err();
        match &e {
            PatchError::Mismatch {
                file,
                hunk,
                at_line,
                expected,
                found,
            } => {
                assert_eq!((file.as_str(), *hunk, *at_line), ("f", 1, 2));
                assert_eq!(expected, &vec!["b".to_string(), "c".to_string()]);
                assert_eq!(found, &vec!["B".to_string(), "c".to_string()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("hunk 1 does not apply"));
    }

    #[test]
    fn crlf_files_keep_crlf() {
        let p = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n";
        assert_eq!(one(p, Some("a\r\nb\r\n")).unwrap().unwrap(), "a\r\nB\r\n");
    }

    #[test]
    fn no_trailing_newline_is_respected_both_ways() {
        let p = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n\\ No newline at end of file\n";
        assert_eq!(one(p, Some("a\nb")).unwrap().unwrap(), "a\nB");
        let add_nl = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-b\n\\ No newline at end of file\n+b\n";
        assert_eq!(one(add_nl, Some("b")).unwrap().unwrap(), "b\n");
    }

    #[test]
    fn creates_and_deletes() {
        let create = "--- /dev/null\n+++ b/new/dir/f.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n";
        assert_eq!(one(create, None).unwrap().unwrap(), "one\ntwo\n");
        assert!(matches!(
            one(create, Some("x")),
            Err(PatchError::Existence { .. })
        ));
        let delete = "--- a/f\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n";
        assert_eq!(one(delete, Some("one\ntwo\n")).unwrap(), None);
    }

    #[test]
    fn paths_leaving_the_workspace_are_refused() {
        let p = "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n";
        assert!(matches!(parse(p), Err(PatchError::Path { .. })));
        let p = "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-x\n+y\n";
        assert!(matches!(parse(p), Err(PatchError::Path { .. })));
    }

    #[test]
    fn several_files_and_git_headers() {
        let p = "diff --git a/x b/y\nsimilarity index 90%\nrename from x\nrename to y\n--- a/x\n+++ b/y\n@@ -1 +1 @@\n-1\n+2\ndiff --git a/z b/z\n--- a/z\n+++ b/z\n@@ -1 +1,2 @@\n z\n+zz\n";
        let fps = parse(p).unwrap();
        assert_eq!(fps.len(), 2);
        assert_eq!(fps[0].old.as_ref().unwrap().as_str(), "x");
        assert_eq!(fps[0].new.as_ref().unwrap().as_str(), "y");
        assert_eq!(apply(&fps[1], Some("z\n")).unwrap().unwrap(), "z\nzz\n");
    }

    #[test]
    fn truncated_hunks_are_malformed() {
        let p = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n";
        assert!(matches!(parse(p), Err(PatchError::Parse { .. })));
    }
}
