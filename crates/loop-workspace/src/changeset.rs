//! Change sets: what a task changed against where it started, as exact
//! per-file hashes plus a unified diff, and how to apply it to the user's
//! project (only onto exactly the content it was made from) and undo it
//! (only from exactly the content it produced). Nothing is half-applied.

use crate::journal::{Change, Journal};
use crate::manifest::{Manifest, hash_file};
use loop_protocol::hash::sha256_hex;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Path relative to the project.
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub change: String,
    /// Content hash before (none when added).
    pub before_sha256: Option<String>,
    /// Content hash after (none when deleted).
    pub after_sha256: Option<String>,
}

/// A task's change set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    /// The commit the task started from (git projects).
    pub base_commit: Option<String>,
    /// Changed files, by path.
    pub files: Vec<FileChange>,
    /// The unified diff of the text files.
    pub patch: String,
    /// Its SHA-256.
    pub patch_sha256: String,
}

/// Why a change set cannot be applied or undone.
#[derive(Debug, thiserror::Error)]
pub enum ChangeSetError {
    /// The project or workspace is not as the change set expects.
    #[error("conflict, nothing applied:\n{}", .0.join("\n"))]
    Conflict(Vec<String>),
    /// Filesystem.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn file_sha(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => hash_file(path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl ChangeSet {
    /// Compare the task's `baseline` and `last` manifests of `workspace`;
    /// `before` gives a file's content at the start (from git, or from the
    /// project while it still holds it), for the diff.
    pub fn compute(
        baseline: &Manifest,
        last: &Manifest,
        workspace: &Path,
        base_commit: Option<String>,
        before: &dyn Fn(&str, &str) -> Option<Vec<u8>>,
    ) -> ChangeSet {
        let mut files = Vec::new();
        for e in &last.entries {
            match baseline.get(&e.path) {
                None => files.push(FileChange {
                    path: e.path.clone(),
                    change: "added".into(),
                    before_sha256: None,
                    after_sha256: Some(e.sha256.clone()),
                }),
                Some(b) if b != e => files.push(FileChange {
                    path: e.path.clone(),
                    change: "modified".into(),
                    before_sha256: Some(b.sha256.clone()),
                    after_sha256: Some(e.sha256.clone()),
                }),
                Some(_) => {}
            }
        }
        for b in &baseline.entries {
            if last.get(&b.path).is_none() {
                files.push(FileChange {
                    path: b.path.clone(),
                    change: "deleted".into(),
                    before_sha256: Some(b.sha256.clone()),
                    after_sha256: None,
                });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut patch = String::new();
        for f in &files {
            let old = match &f.before_sha256 {
                Some(sha) => before(&f.path, sha),
                None => Some(Vec::new()),
            };
            let new = match f.after_sha256 {
                Some(_) => std::fs::read(workspace.join(&f.path)).ok(),
                None => Some(Vec::new()),
            };
            let (a, b) = (
                if f.before_sha256.is_some() {
                    format!("a/{}", f.path)
                } else {
                    "/dev/null".into()
                },
                if f.after_sha256.is_some() {
                    format!("b/{}", f.path)
                } else {
                    "/dev/null".into()
                },
            );
            match (old.map(String::from_utf8), new.map(String::from_utf8)) {
                (Some(Ok(o)), Some(Ok(n))) => {
                    let diff = similar::TextDiff::from_lines(&o, &n);
                    patch.push_str(
                        &diff
                            .unified_diff()
                            .context_radius(3)
                            .header(&a, &b)
                            .to_string(),
                    );
                }
                _ => patch.push_str(&format!("Binary or unavailable content differs: {a} {b}\n")),
            }
        }
        let patch_sha256 = sha256_hex(patch.as_bytes());
        ChangeSet {
            base_commit,
            files,
            patch,
            patch_sha256,
        }
    }

    /// Apply to `project`, taking the new contents from `workspace`, keeping
    /// what it replaces in `undo_dir`. Refused, with every conflict listed,
    /// unless each project file still holds its `before` content and each
    /// workspace file its `after` content.
    pub fn apply(
        &self,
        project: &Path,
        workspace: &Path,
        undo_dir: &Path,
        journal: &Journal,
    ) -> Result<usize, ChangeSetError> {
        let mut conflicts = Vec::new();
        let mut changes = Vec::new();
        for f in &self.files {
            let target = project.join(&f.path);
            if file_sha(&target)? != f.before_sha256 {
                conflicts.push(format!(
                    "{}: the project's file changed since the task started",
                    f.path
                ));
            }
            let content = match &f.after_sha256 {
                Some(want) => {
                    let src = workspace.join(&f.path);
                    if file_sha(&src)?.as_ref() != Some(want) {
                        conflicts.push(format!(
                            "{}: the task workspace no longer holds the verified content",
                            f.path
                        ));
                        continue;
                    }
                    Some(std::fs::read(&src)?)
                }
                None => None,
            };
            changes.push(Change {
                rel: f.path.clone(),
                full: target,
                content,
            });
        }
        if !conflicts.is_empty() {
            return Err(ChangeSetError::Conflict(conflicts));
        }
        // Keep what is replaced, for undo.
        std::fs::create_dir_all(undo_dir)?;
        for (i, f) in self.files.iter().enumerate() {
            if f.before_sha256.is_some() {
                std::fs::copy(project.join(&f.path), undo_dir.join(i.to_string()))?;
            }
        }
        journal.commit(&changes)?;
        Ok(changes.len())
    }

    /// Undo an apply: refused unless each project file still holds exactly
    /// the content the apply wrote.
    pub fn undo(
        &self,
        project: &Path,
        undo_dir: &Path,
        journal: &Journal,
    ) -> Result<usize, ChangeSetError> {
        let mut conflicts = Vec::new();
        let mut changes = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            let target = project.join(&f.path);
            if file_sha(&target)? != f.after_sha256 {
                conflicts.push(format!("{}: changed since the apply", f.path));
            }
            let content = match &f.before_sha256 {
                Some(_) => Some(std::fs::read(undo_dir.join(i.to_string()))?),
                None => None,
            };
            changes.push(Change {
                rel: f.path.clone(),
                full: target,
                content,
            });
        }
        if !conflicts.is_empty() {
            return Err(ChangeSetError::Conflict(conflicts));
        }
        journal.commit(&changes)?;
        Ok(changes.len())
    }

    /// Where a task keeps its undo data.
    pub fn undo_dir(task_dir: &Path) -> PathBuf {
        task_dir.join("undo")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn setup(d: &TestDir) -> (PathBuf, PathBuf, ChangeSet) {
        let project = d.path().join("project");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("keep.txt"), "same\n").unwrap();
        std::fs::write(project.join("mod.txt"), "old\nline\n").unwrap();
        std::fs::write(project.join("del.txt"), "bye\n").unwrap();
        crate::fsutil::copy_tree(&project, &ws, &|_| false, true).unwrap();
        let baseline = Manifest::of(&ws).unwrap();
        std::fs::write(ws.join("mod.txt"), "new\nline\n").unwrap();
        std::fs::remove_file(ws.join("del.txt")).unwrap();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/add.txt"), "hello\n").unwrap();
        let last = Manifest::of(&ws).unwrap();
        let p = project.clone();
        let cs = ChangeSet::compute(&baseline, &last, &ws, None, &|path, _| {
            std::fs::read(p.join(path)).ok()
        });
        (project, ws, cs)
    }

    #[test]
    fn the_change_set_lists_files_and_a_real_diff() {
        let d = TestDir::new("cs-compute");
        let (_, _, cs) = setup(&d);
        let kinds: Vec<(&str, &str)> = cs
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.change.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("del.txt", "deleted"),
                ("mod.txt", "modified"),
                ("sub/add.txt", "added")
            ]
        );
        assert!(
            cs.patch
                .contains("--- a/mod.txt\n+++ b/mod.txt\n@@ -1,2 +1,2 @@\n-old\n+new\n line\n"),
            "{}",
            cs.patch
        );
        assert!(
            cs.patch.contains("--- /dev/null\n+++ b/sub/add.txt"),
            "{}",
            cs.patch
        );
        assert_eq!(cs.patch_sha256, sha256_hex(cs.patch.as_bytes()));
        // The patch is one our own parser reads back.
        assert_eq!(crate::patch::parse(&cs.patch).unwrap().len(), 3);
    }

    #[test]
    fn apply_then_undo_restores_the_exact_bytes() {
        let d = TestDir::new("cs-apply");
        let (project, ws, cs) = setup(&d);
        let before = Manifest::of(&project).unwrap();
        let j = Journal::new(&d.path().join("journal"));
        let undo = d.path().join("undo");
        assert_eq!(cs.apply(&project, &ws, &undo, &j).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(project.join("mod.txt")).unwrap(),
            "new\nline\n"
        );
        assert!(!project.join("del.txt").exists());
        assert_eq!(
            std::fs::read_to_string(project.join("sub/add.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(cs.undo(&project, &undo, &j).unwrap(), 3);
        let after = Manifest::of(&project).unwrap();
        let files = |m: &Manifest| {
            m.entries
                .iter()
                .map(|e| (e.path.clone(), e.sha256.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(files(&after), files(&before));
    }

    #[test]
    fn a_conflict_applies_nothing_and_names_every_file() {
        let d = TestDir::new("cs-conflict");
        let (project, ws, cs) = setup(&d);
        std::fs::write(project.join("mod.txt"), "the user edited this\n").unwrap();
        std::fs::write(project.join("sub_add_guard"), "x").unwrap();
        std::fs::create_dir_all(project.join("sub")).unwrap();
        std::fs::write(project.join("sub/add.txt"), "user's own file\n").unwrap();
        let j = Journal::new(&d.path().join("journal"));
        let e = cs
            .apply(&project, &ws, &d.path().join("undo"), &j)
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("mod.txt: the project's file changed"),
            "{text}"
        );
        assert!(
            text.contains("sub/add.txt: the project's file changed"),
            "{text}"
        );
        assert!(project.join("del.txt").exists(), "nothing half-applied");
        assert_eq!(
            std::fs::read_to_string(project.join("mod.txt")).unwrap(),
            "the user edited this\n"
        );
    }
}
