//! Transactional multi-file edits. Before a step touches the workspace, the
//! journal records what every file held (a backup, or that it did not
//! exist) and fsyncs it; then each file is written atomically; then the
//! journal is dropped. A crash in between leaves the journal, and
//! [`Journal::recover`] restores every file exactly on the next start.

use crate::fsutil::write_atomic_with;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One file a step will write (`Some(bytes)`) or delete (`None`).
#[derive(Debug, Clone)]
pub struct Change {
    /// Workspace-relative path (already through the jail).
    pub rel: String,
    /// Absolute path.
    pub full: PathBuf,
    /// New content, or `None` to delete.
    pub content: Option<Vec<u8>>,
    /// Permission bits to set on the written file (else kept, or 0644).
    pub mode: Option<u32>,
    /// Make the path a symlink to this target instead of a file.
    pub link: Option<PathBuf>,
}

impl Change {
    /// Write `content` (or delete, with `None`) at `full`.
    pub fn file(rel: impl Into<String>, full: PathBuf, content: Option<Vec<u8>>) -> Change {
        Change {
            rel: rel.into(),
            full,
            content,
            mode: None,
            link: None,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    rel: String,
    full: PathBuf,
    /// Backup file name in the journal, when the file existed.
    backup: Option<String>,
    mode: Option<u32>,
    /// The symlink that was there, when it was one.
    #[serde(default)]
    link: Option<PathBuf>,
    /// Directories the step creates for this path (removed on rollback).
    #[serde(default)]
    created: Vec<PathBuf>,
}

/// Drop a journal whose step is over: the plan goes first (durably), so a
/// kill while the rest is removed leaves a journal with no plan, which
/// means nothing to roll back, never a plan whose backups are half gone.
#[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
fn finish(pending: &Path, sync: bool) -> std::io::Result<()> {
    match std::fs::remove_file(pending.join("plan.json")) {
        Ok(()) => sync_dir(pending, sync)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::remove_dir_all(pending)
}

/// Remove whatever is at `path` (a file or a link; never a directory).
#[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
fn remove_entry(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Make `path` a symlink to `target`, atomically (a new link renamed over).
#[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
fn write_link(path: &Path, target: &Path, sync: bool) -> std::io::Result<()> {
    let (dir, tmp) = crate::fsutil::temp_beside(path)?;
    let dir = dir.as_path();
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir, sync)
}

/// The ancestors of `full` (below `stop`'s depth) that do not exist yet, outermost first.
#[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
fn missing_dirs(full: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut cur = full.parent();
    while let Some(d) = cur {
        if std::fs::symlink_metadata(d).is_ok() {
            break;
        }
        out.push(d.to_path_buf());
        cur = d.parent();
    }
    out.reverse();
    out
}

/// A per-task journal directory (outside the workspace), for the files
/// under one root.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
    root: PathBuf,
    /// Whether the journal and the files are synced (see [`Journal::unsynced`]).
    sync: bool,
}

#[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
fn sync_dir(dir: &Path, sync: bool) -> std::io::Result<()> {
    if !sync {
        return Ok(());
    }
    std::fs::File::open(dir)?.sync_all()
}

impl Journal {
    /// A journal kept in `dir` for files under `root`. Its plan is read
    /// back on recovery, and it lives where a repository could plant one
    /// (`.loop/`): recovery acts only on paths that are `root` joined with
    /// a plain relative path, and on backups it names by number.
    pub fn new(dir: &Path, root: &Path) -> Self {
        Journal {
            dir: dir.to_path_buf(),
            root: root.to_path_buf(),
            sync: true,
        }
    }

    /// The same journal with nothing synced: a step stays all-or-nothing
    /// against a killed process (the kernel keeps what was written), not
    /// against the machine going down; for files whose durability is
    /// elsewhere (a task's workspace, whose state the store keeps).
    pub fn unsynced(mut self) -> Self {
        self.sync = false;
        self
    }

    /// Whether a plan entry names a path of this journal's root.
    fn owns(&self, e: &Entry) -> bool {
        let rel_ok = loop_protocol::RelPath::parse(&e.rel)
            .is_ok_and(|r| !r.is_root() && r.as_str() == e.rel);
        let backup_ok = e
            .backup
            .as_deref()
            .is_none_or(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()));
        let created_ok = e
            .created
            .iter()
            .all(|d| d.starts_with(&self.root) && e.full.starts_with(d) && d != &self.root);
        // A write through a link inside the root records the resolved path:
        // inside the root, plainly, is what is required.
        let plain = e.full.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
        rel_ok
            && backup_ok
            && created_ok
            && plain
            && e.full.starts_with(&self.root)
            && e.full != self.root
    }

    fn pending(&self) -> PathBuf {
        self.dir.join("pending")
    }

    /// Roll back an interrupted step, if any. Returns the files restored.
    #[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
    pub fn recover(&self) -> std::io::Result<usize> {
        let pending = self.pending();
        let plan_path = pending.join("plan.json");
        if !pending.exists() {
            return Ok(0);
        }
        let Ok(plan) = std::fs::read(&plan_path) else {
            // No plan: the crash came before it was complete (nothing was
            // touched) or after the step was over (nothing to undo).
            std::fs::remove_dir_all(&pending)?;
            return Ok(0);
        };
        let entries: Vec<Entry> = serde_json::from_slice(&plan)
            .map_err(|e| std::io::Error::other(format!("journal plan unreadable: {e}")))?;
        if let Some(bad) = entries.iter().find(|e| !self.owns(e)) {
            return Err(std::io::Error::other(format!(
                "{}: the journal names {} (as `{}`), which is not under {}: refusing to recover from it",
                plan_path.display(),
                bad.full.display(),
                bad.rel,
                self.root.display()
            )));
        }
        for e in &entries {
            // A write the crash cut short leaves its temporary file beside
            // the target: it goes too, so the workspace is exactly as before.
            remove_temporaries(&e.full)?;
            if let Some(target) = &e.link {
                write_link(&e.full, target, self.sync)?;
                continue;
            }
            match &e.backup {
                Some(name) => {
                    let bytes = std::fs::read(pending.join(name))?;
                    write_atomic_with(&e.full, &bytes, self.sync)?;
                    if let Some(mode) = e.mode {
                        std::fs::set_permissions(&e.full, std::fs::Permissions::from_mode(mode))?;
                    }
                }
                None => remove_entry(&e.full)?,
            }
        }
        // Directories the step created go too, innermost first, if empty.
        for e in entries.iter().rev() {
            for d in e.created.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
        finish(&pending, self.sync)?;
        Ok(entries.len())
    }

    /// Apply `changes` all or nothing.
    pub fn commit(&self, changes: &[Change]) -> std::io::Result<()> {
        self.commit_until(changes, None)
    }

    /// As [`Journal::commit`], but stop (as a crash would) after `crash_after`
    /// files were written, leaving the journal in place. For tests.
    #[doc(hidden)]
    #[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
    pub fn commit_until(
        &self,
        changes: &[Change],
        crash_after: Option<usize>,
    ) -> std::io::Result<()> {
        // An earlier interrupted step is rolled back before a new one starts.
        self.recover()?;
        let pending = self.pending();
        std::fs::create_dir_all(&pending)?;
        let mut entries = Vec::with_capacity(changes.len());
        let mut planned_dirs = std::collections::BTreeSet::new();
        for (i, c) in changes.iter().enumerate() {
            // What is there now, without following a link at the path itself.
            let (backup, mode, link) = match std::fs::symlink_metadata(&c.full) {
                Ok(m) if m.file_type().is_symlink() => {
                    (None, None, Some(std::fs::read_link(&c.full)?))
                }
                Ok(m) if m.is_file() => {
                    let bytes = std::fs::read(&c.full)?;
                    let name = i.to_string();
                    let mut f = std::fs::File::create(pending.join(&name))?;
                    std::io::Write::write_all(&mut f, &bytes)?;
                    if self.sync {
                        f.sync_all()?;
                    }
                    (Some(name), Some(m.permissions().mode()), None)
                }
                Ok(_) => {
                    return Err(std::io::Error::other(format!(
                        "{}: not a regular file or a link",
                        c.rel
                    )));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None, None),
                Err(e) => return Err(e),
            };
            let created = if c.content.is_some() || c.link.is_some() {
                missing_dirs(&c.full)
                    .into_iter()
                    .filter(|d| planned_dirs.insert(d.clone()))
                    .collect()
            } else {
                Vec::new()
            };
            entries.push(Entry {
                rel: c.rel.clone(),
                full: c.full.clone(),
                backup,
                mode,
                link,
                created,
            });
        }
        let plan = serde_json::to_vec(&entries).map_err(std::io::Error::other)?;
        write_atomic_with(&pending.join("plan.json"), &plan, self.sync)?;
        sync_dir(&pending, self.sync)?;
        for (i, c) in changes.iter().enumerate() {
            if crash_after == Some(i) {
                return Err(std::io::Error::other("simulated crash"));
            }
            match (&c.link, &c.content) {
                (Some(target), _) => write_link(&c.full, target, self.sync)?,
                (None, Some(bytes)) => {
                    // A link in the way is replaced, never written through.
                    if std::fs::symlink_metadata(&c.full).is_ok_and(|m| m.file_type().is_symlink())
                    {
                        remove_entry(&c.full)?;
                    }
                    write_atomic_with(&c.full, bytes, self.sync)?;
                    if let Some(mode) = c.mode {
                        std::fs::set_permissions(&c.full, std::fs::Permissions::from_mode(mode))?;
                    }
                }
                (None, None) => remove_entry(&c.full)?,
            }
        }
        finish(&pending, self.sync)?;
        if let Some(parent) = pending.parent() {
            sync_dir(parent, self.sync)?;
        }
        Ok(())
    }
}

/// Remove `write_atomic`'s leftover temporary files for `target`.
#[allow(clippy::disallowed_methods)] // the door's sibling for writes: the journal of the jail's own edits, under a root it holds
fn remove_temporaries(target: &Path) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Ok(());
    };
    let prefix = format!(".{}.loop-tmp-", name.to_string_lossy());
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn change(root: &Path, rel: &str, content: Option<&str>) -> Change {
        Change::file(rel, root.join(rel), content.map(|c| c.as_bytes().to_vec()))
    }

    #[test]
    fn a_crash_in_the_middle_of_a_multi_file_edit_rolls_back_exactly() {
        let d = TestDir::new("journal");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("a"), "a0").unwrap();
        std::fs::write(ws.join("b"), "b0").unwrap();
        std::fs::set_permissions(ws.join("b"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let j = Journal::new(&d.path().join("journal"), &ws);
        let changes = vec![
            change(&ws, "a", Some("a1")),
            change(&ws, "new/c", Some("c1")),
            change(&ws, "b", None),
        ];
        // Crash after two of three files.
        assert!(j.commit_until(&changes, Some(2)).is_err());
        assert_eq!(std::fs::read_to_string(ws.join("a")).unwrap(), "a1");
        assert!(ws.join("new/c").exists());
        // Next start: everything as before the step.
        assert_eq!(j.recover().unwrap(), 3);
        assert_eq!(std::fs::read_to_string(ws.join("a")).unwrap(), "a0");
        assert_eq!(std::fs::read_to_string(ws.join("b")).unwrap(), "b0");
        assert_eq!(
            std::fs::metadata(ws.join("b"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o755
        );
        assert!(!ws.join("new/c").exists());
        assert!(
            !ws.join("new").exists(),
            "a directory the step made goes too"
        );
        assert_eq!(j.recover().unwrap(), 0, "recovery is idempotent");
        // And a complete commit applies everything and leaves no journal.
        j.commit(&changes).unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("new/c")).unwrap(), "c1");
        assert!(!ws.join("b").exists());
        assert!(!d.path().join("journal/pending").exists());
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod planted {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn a_planted_plan_naming_a_path_outside_the_root_is_refused() {
        let d = TestDir::new("journal-planted");
        let root = d.path().join("project");
        let victim = d.path().join("victim.txt");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(&victim, "keep me\n").unwrap();
        let dir = d.path().join("journal");
        std::fs::create_dir_all(dir.join("pending")).unwrap();
        for (rel, full) in [
            ("victim.txt", victim.clone()),
            ("../victim.txt", root.join("../victim.txt")),
        ] {
            let plan =
                serde_json::json!([{ "rel": rel, "full": full, "backup": null, "mode": null }]);
            std::fs::write(dir.join("pending/plan.json"), plan.to_string()).unwrap();
            let e = Journal::new(&dir, &root).recover().unwrap_err().to_string();
            assert!(e.contains("refusing to recover"), "{e}");
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        }
    }
}
