//! `loop diff ID` (a task's change set: coloured on a terminal, through a
//! pager; `--stat`) and `loop show ID` (a task's story, its evidence, its
//! change set and its receipt's verdict, in one place).

use crate::CliError;
use crate::ui::screen::{Screen, Tone, defang};
use loop_runtime::Runtime;
use loop_runtime::{Diff, DiffSource};
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Lines added and removed in one file of a patch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileStat {
    /// The file.
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub change: String,
    /// Lines added.
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
    /// No text hunks: binary content, a link or a mode change.
    pub binary: bool,
}

/// Per-file line counts of `diff`'s patch, for every file its change set
/// lists (files without text hunks count as binary).
pub fn stat(diff: &Diff) -> Vec<FileStat> {
    use loop_workspace::quote_path;
    // A section is known by its exact header, as the change set writes it
    // for each of its files: a name that looks like another header (`x
    // b/README.md`) cannot claim another file's lines.
    let headers: std::collections::HashMap<String, usize> = diff
        .change_set
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            (
                format!(
                    "diff --git {} {}",
                    quote_path("a/", &f.path),
                    quote_path("b/", &f.path)
                ),
                i,
            )
        })
        .collect();
    let mut counts = vec![(0u64, 0u64, false); diff.change_set.files.len()];
    let mut file: Option<usize> = None;
    let mut in_hunk = false;
    for line in diff.change_set.patch.lines() {
        if line.starts_with("diff --git ") {
            file = headers.get(line).copied();
            in_hunk = false;
            continue;
        }
        let Some(i) = file else { continue };
        if line.starts_with("@@") {
            in_hunk = true;
            counts[i].2 = true;
            continue;
        }
        if !in_hunk {
            continue;
        }
        match line.as_bytes().first() {
            Some(b'+') => counts[i].0 += 1,
            Some(b'-') => counts[i].1 += 1,
            _ => {}
        }
    }
    diff.change_set
        .files
        .iter()
        .zip(counts)
        .map(|(f, (added, removed, hunks))| FileStat {
            path: f.path.clone(),
            change: f.change.clone(),
            added,
            removed,
            binary: !hunks,
        })
        .collect()
}

fn source_line(source: &DiffSource) -> String {
    match source {
        DiffSource::Receipt(p) => format!("from the receipt {}", p.display()),
        DiffSource::Workspace(p) => format!(
            "the task has not ended: its workspace {} as it is now",
            p.display()
        ),
    }
}

/// The `--stat` text: one line per file, then the totals.
fn stat_text(stats: &[FileStat], screen: &Screen) -> String {
    let width = stats
        .iter()
        .map(|s| s.path.chars().count())
        .max()
        .unwrap_or(0)
        .min(60);
    let most = stats
        .iter()
        .map(|s| s.added + s.removed)
        .max()
        .unwrap_or(0)
        .max(1);
    let mut out = String::new();
    for s in stats {
        let total = s.added + s.removed;
        let bar = if s.binary {
            format!("{} (no text lines)", s.change)
        } else {
            // At most 40 marks, in proportion.
            let scale = |n: u64| (n * 40).div_ceil(most.max(40)) as usize;
            format!(
                "{:>5} {}{}",
                total,
                screen.paint(Tone::Good, &"+".repeat(scale(s.added))),
                screen.paint(Tone::Bad, &"-".repeat(scale(s.removed)))
            )
        };
        out.push_str(&format!(
            " {:<width$} | {bar}\n",
            defang(&s.path),
            width = width
        ));
    }
    let added: u64 = stats.iter().map(|s| s.added).sum();
    let removed: u64 = stats.iter().map(|s| s.removed).sum();
    let count = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    out.push_str(&format!(
        " {} changed: {} added, {} removed\n",
        count(stats.len() as u64, "file", "files"),
        count(added, "line", "lines"),
        count(removed, "line", "lines"),
    ));
    out
}

/// The patch coloured for a terminal: additions green, removals red, hunk
/// headers cyan, file headers bold; control characters defanged.
fn coloured_patch(patch: &str, screen: &Screen) -> String {
    let mut out = String::with_capacity(patch.len() + patch.len() / 8);
    let mut in_hunk = false;
    for line in patch.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let clean = defang(body);
        let styled = if body.starts_with("diff --git ") {
            in_hunk = false;
            screen.paint(Tone::Strong, &clean)
        } else if body.starts_with("@@") {
            in_hunk = true;
            if screen.color {
                let cyan = anstyle::Style::new().fg_color(Some(anstyle::AnsiColor::Cyan.into()));
                format!("{cyan}{clean}{cyan:#}")
            } else {
                clean
            }
        } else if !in_hunk {
            screen.paint(Tone::Strong, &clean)
        } else if body.starts_with('+') {
            screen.paint(Tone::Good, &clean)
        } else if body.starts_with('-') {
            screen.paint(Tone::Bad, &clean)
        } else {
            clean
        };
        out.push_str(&styled);
        out.push('\n');
    }
    out
}

/// Write `text` through a pager when stdout is a terminal (`$LOOP_PAGER`,
/// else `$PAGER`, else `less -FRX`; `--no-pager` or an empty pager
/// writes directly).
fn page(text: &str, use_pager: bool) {
    let pager = std::env::var("LOOP_PAGER")
        .or_else(|_| std::env::var("PAGER"))
        .unwrap_or_else(|_| "less -FRX".into());
    if use_pager && std::io::stdout().is_terminal() && !pager.trim().is_empty() {
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&pager)
            .env(
                "LESS",
                std::env::var("LESS").unwrap_or_else(|_| "FRX".into()),
            )
            .stdin(std::process::Stdio::piped())
            .spawn();
        if let Ok(mut child) = child {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(text.as_bytes());
            }
            let _ = child.wait();
            return;
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// `loop diff ID`.
pub fn diff(
    project: &Path,
    id: &str,
    only_stat: bool,
    use_pager: bool,
    json: bool,
) -> Result<u8, CliError> {
    let d = Runtime::open(project)?.diff(id)?;
    let stats = stat(&d);
    if json {
        let line = loop_runtime::views::DiffLine {
            task_id: id,
            source: &d.source,
            base_commit: &d.change_set.base_commit,
            files: &d.change_set.files,
            stat: &stats,
            patch_sha256: &d.change_set.patch_sha256,
            patch: (!only_stat).then_some(d.change_set.patch.as_str()),
        };
        crate::ui::say_json(&line)?;
        return Ok(0);
    }
    let screen = Screen::of_stdout();
    if d.change_set.files.is_empty() {
        println!("task {id} changed nothing ({})", source_line(&d.source));
        return Ok(0);
    }
    if only_stat {
        print!("{}", stat_text(&stats, &screen));
        return Ok(0);
    }
    // Piped, the patch goes out exactly as recorded (for `git apply`); on
    // a terminal it is coloured, defanged and paged.
    if !std::io::stdout().is_terminal() {
        page(&d.change_set.patch, false);
        return Ok(0);
    }
    let text = format!(
        "{}\n{}",
        screen.paint(
            Tone::Dim,
            &format!("# task {id}: {}", source_line(&d.source))
        ),
        coloured_patch(&d.change_set.patch, &screen)
    );
    page(&text, use_pager);
    Ok(0)
}

/// `loop show ID`: the story, the change set, the receipt's verdict.
pub fn show(project: &Path, id: &str, json: bool) -> Result<u8, CliError> {
    let runtime = Runtime::open(project)?;
    let status = runtime.status(id)?;
    let events = runtime.events(id, 0)?;
    let diff = runtime.diff(id);
    let receipt = status
        .task
        .receipt
        .as_ref()
        .map(|r| loop_runtime::verify_receipt(Path::new(r), None, None));
    if json {
        use loop_runtime::views::{OrError, ShowLine, ShownChangeSet, ShownReceipt};
        let line = ShowLine {
            task: &status,
            events: events.iter().map(|r| &r.event).collect(),
            change_set: match &diff {
                Ok(d) => OrError::Read(ShownChangeSet {
                    source: &d.source,
                    files: &d.change_set.files,
                    stat: stat(d),
                }),
                Err(e) => OrError::failed(e),
            },
            receipt: receipt.as_ref().map(|r| match r {
                Ok(c) => OrError::Read(ShownReceipt {
                    path: &c.report.receipt,
                    intact: c.intact,
                    verified: c.verified,
                    contract_provenance: c.report.statement.as_ref().map(|s| {
                        loop_receipt::ContractProvenance::of(
                            &s.predicate.contract,
                            c.report.entries.first().as_slice(),
                        )
                        .with_delegation(s.predicate.delegation.as_ref())
                    }),
                }),
                Err(e) => OrError::failed(e),
            }),
        };
        crate::ui::say_json(&line)?;
        return Ok(match &receipt {
            Some(Ok(c)) if !c.intact => 1,
            Some(Err(_)) => 1,
            _ => 0,
        });
    }
    let mut story = crate::ui::story::Story::new(false);
    for r in &events {
        loop_core::Observer::on_event(&mut story, &r.event);
    }
    let screen = Screen::of_stdout();
    println!();
    match &diff {
        Ok(d) if d.change_set.files.is_empty() => {
            println!("change set: nothing changed ({})", source_line(&d.source))
        }
        Ok(d) => {
            println!("change set ({}):", source_line(&d.source));
            print!("{}", stat_text(&stat(d), &screen));
            println!("  loop diff {id}   shows it line by line");
        }
        Err(e) => println!("change set: {e}"),
    }
    if status.apply == loop_runtime::ApplyState::Applied {
        println!("  applied to the project (loop undo {id} reverses it)");
    }
    for ch in &status.children {
        println!(
            "child {} (counted in this task's)",
            super::tasks::child_line(ch)
        );
    }
    match &receipt {
        Some(Ok(c)) => {
            let verdict = match (c.intact, c.verified) {
                (true, true) => screen.paint(Tone::Good, "holds, and records a verified task"),
                (true, false) => {
                    screen.paint(Tone::Bad, "holds, and records a task that was NOT verified")
                }
                (false, _) => screen.paint(
                    Tone::Bad,
                    "DOES NOT HOLD (loop verify says where it breaks)",
                ),
            };
            println!("receipt {}: {verdict}", c.report.receipt.display());
            if let Some(problem) = c.report.tree_problems.first() {
                println!("  children: BROKEN: {problem}");
            } else if !c.report.children.is_empty() {
                println!(
                    "  children: {} child receipt(s) hold, each within its parent's authority",
                    c.report.children.len()
                );
            }
            if let Some(st) = &c.report.statement {
                println!(
                    "  contract: {}",
                    loop_receipt::ContractProvenance::of(
                        &st.predicate.contract,
                        c.report.entries.first().as_slice()
                    )
                    .with_delegation(st.predicate.delegation.as_ref())
                );
            }
        }
        Some(Err(e)) => println!("receipt: {e}"),
        None => println!("receipt: none yet (the task has not ended)"),
    }
    // As `loop verify`: a receipt that does not hold is not a success.
    Ok(match &receipt {
        Some(Ok(c)) if !c.intact => 1,
        Some(Err(_)) => 1,
        _ => 0,
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use loop_protocol::FileChange;

    fn change(path: &str, change: &str) -> FileChange {
        FileChange {
            path: path.into(),
            change: change.into(),
            before_sha256: None,
            after_sha256: None,
            before_mode: None,
            after_mode: None,
        }
    }

    #[test]
    fn the_stat_counts_hunk_lines_not_headers() {
        let patch = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-old\n+new\n+++ added, not a header\n keep\ndiff --git a/img.png b/img.png\nBinary files differ\n";
        let d = Diff {
            change_set: loop_workspace::ChangeSet {
                base_commit: None,
                files: vec![change("a.py", "modified"), change("img.png", "modified")],
                patch: patch.into(),
                patch_sha256: String::new(),
            },
            source: DiffSource::Workspace("/w".into()),
        };
        let s = stat(&d);
        assert_eq!((s[0].added, s[0].removed, s[0].binary), (2, 1, false));
        assert!(s[1].binary);
        // A name made to look like another file's header claims nothing.
        let patch = "diff --git a/evil b/README.md b/evil b/README.md\n@@ -0,0 +1 @@\n+x\ndiff --git a/README.md b/README.md\n@@ -1 +1 @@\n-a\n+b\n";
        let forged = Diff {
            change_set: loop_workspace::ChangeSet {
                base_commit: None,
                files: vec![
                    change("README.md", "modified"),
                    change("evil b/README.md", "added"),
                ],
                patch: patch.into(),
                patch_sha256: String::new(),
            },
            source: DiffSource::Workspace("/w".into()),
        };
        let f = stat(&forged);
        assert_eq!((f[0].added, f[0].removed), (1, 1), "{f:?}");
        assert_eq!(
            (f[1].added, f[1].removed, f[1].binary),
            (1, 0, false),
            "{f:?}"
        );
        let screen = Screen {
            live: false,
            color: false,
            unicode: true,
        };
        let text = stat_text(&s, &screen);
        assert!(text.contains(" a.py    |     3 ++-"), "{text}");
        assert!(
            text.contains("2 files changed: 2 lines added, 1 line removed"),
            "{text}"
        );
    }

    #[test]
    fn a_coloured_patch_defangs_what_the_model_wrote() {
        let screen = Screen {
            live: true,
            color: true,
            unicode: true,
        };
        let out = coloured_patch(
            "diff --git a/x b/x\n@@ -0,0 +1 @@\n+\x1b]0;title\x07evil\n",
            &screen,
        );
        assert!(out.contains("\x1b[32m+^[]0;title^Gevil\x1b[0m"), "{out:?}");
    }
}
