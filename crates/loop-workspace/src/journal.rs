//! Transactional multi-file edits. Before a step touches the workspace, the
//! journal records what every file held (a backup, or that it did not
//! exist) and fsyncs it; then each file is written atomically; then the
//! journal is dropped. A crash in between leaves the journal, and
//! [`Journal::recover`] restores every file exactly on the next start.

use crate::fsutil::write_atomic;
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
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    rel: String,
    full: PathBuf,
    /// Backup file name in the journal, when the file existed.
    backup: Option<String>,
    mode: Option<u32>,
}

/// A per-task journal directory (outside the workspace).
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl Journal {
    /// A journal kept in `dir`.
    pub fn new(dir: &Path) -> Self {
        Journal {
            dir: dir.to_path_buf(),
        }
    }

    fn pending(&self) -> PathBuf {
        self.dir.join("pending")
    }

    /// Roll back an interrupted step, if any. Returns the files restored.
    pub fn recover(&self) -> std::io::Result<usize> {
        let pending = self.pending();
        let plan_path = pending.join("plan.json");
        if !pending.exists() {
            return Ok(0);
        }
        let Ok(plan) = std::fs::read(&plan_path) else {
            // The crash came before the plan was complete: nothing was touched.
            std::fs::remove_dir_all(&pending)?;
            return Ok(0);
        };
        let entries: Vec<Entry> = serde_json::from_slice(&plan)
            .map_err(|e| std::io::Error::other(format!("journal plan unreadable: {e}")))?;
        for e in &entries {
            // A write the crash cut short leaves its temporary file beside
            // the target: it goes too, so the workspace is exactly as before.
            remove_temporaries(&e.full)?;
            match &e.backup {
                Some(name) => {
                    let bytes = std::fs::read(pending.join(name))?;
                    write_atomic(&e.full, &bytes)?;
                    if let Some(mode) = e.mode {
                        std::fs::set_permissions(&e.full, std::fs::Permissions::from_mode(mode))?;
                    }
                }
                None => match std::fs::remove_file(&e.full) {
                    Ok(()) => {}
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                    Err(err) => return Err(err),
                },
            }
        }
        std::fs::remove_dir_all(&pending)?;
        Ok(entries.len())
    }

    /// Apply `changes` all or nothing.
    pub fn commit(&self, changes: &[Change]) -> std::io::Result<()> {
        self.commit_until(changes, None)
    }

    /// As [`Journal::commit`], but stop (as a crash would) after `crash_after`
    /// files were written, leaving the journal in place. For tests.
    #[doc(hidden)]
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
        for (i, c) in changes.iter().enumerate() {
            let (backup, mode) = match std::fs::read(&c.full) {
                Ok(bytes) => {
                    let name = i.to_string();
                    let mut f = std::fs::File::create(pending.join(&name))?;
                    std::io::Write::write_all(&mut f, &bytes)?;
                    f.sync_all()?;
                    let mode = std::fs::metadata(&c.full)?.permissions().mode();
                    (Some(name), Some(mode))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
                Err(e) => return Err(e),
            };
            entries.push(Entry {
                rel: c.rel.clone(),
                full: c.full.clone(),
                backup,
                mode,
            });
        }
        let plan = serde_json::to_vec(&entries).map_err(std::io::Error::other)?;
        write_atomic(&pending.join("plan.json"), &plan)?;
        sync_dir(&pending)?;
        for (i, c) in changes.iter().enumerate() {
            if crash_after == Some(i) {
                return Err(std::io::Error::other("simulated crash"));
            }
            match &c.content {
                Some(bytes) => write_atomic(&c.full, bytes)?,
                None => match std::fs::remove_file(&c.full) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                },
            }
        }
        std::fs::remove_dir_all(&pending)?;
        if let Some(parent) = pending.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
}

/// Remove `write_atomic`'s leftover temporary files for `target`.
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
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn change(root: &Path, rel: &str, content: Option<&str>) -> Change {
        Change {
            rel: rel.into(),
            full: root.join(rel),
            content: content.map(|c| c.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_crash_in_the_middle_of_a_multi_file_edit_rolls_back_exactly() {
        let d = TestDir::new("journal");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("a"), "a0").unwrap();
        std::fs::write(ws.join("b"), "b0").unwrap();
        std::fs::set_permissions(ws.join("b"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let j = Journal::new(&d.path().join("journal"));
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
        assert_eq!(j.recover().unwrap(), 0, "recovery is idempotent");
        // And a complete commit applies everything and leaves no journal.
        j.commit(&changes).unwrap();
        assert_eq!(std::fs::read_to_string(ws.join("new/c")).unwrap(), "c1");
        assert!(!ws.join("b").exists());
        assert!(!d.path().join("journal/pending").exists());
    }
}
