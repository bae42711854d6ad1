//! A workspace rebuilt on another machine. What a store keeps of a task's
//! workspace is its [`Delta`] from the baseline (the entries that differ,
//! with their contents kept by digest); the machine that takes the task
//! over makes the workspace again from where it started
//! ([`crate::TaskWorkspace::recreate`]), brings it to the recorded
//! manifest ([`reconcile`]), and checks the root it reaches against the
//! recorded one.

use crate::manifest::{Entry, EntryKind, Manifest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A workspace's state as its difference from the baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The Merkle root of the state.
    pub root: String,
    /// Entries that are new or differ from the baseline's.
    pub changed: Vec<Entry>,
    /// Baseline entries that are gone.
    pub removed: Vec<Entry>,
}

/// Why a recorded state cannot be rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// The record does not add up (its root, or a path in it).
    #[error("the recorded workspace state is not consistent: {0}")]
    Record(String),
    /// A content is missing, or is not what its digest says.
    #[error("{path}: {why}")]
    Content {
        /// The workspace path.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// The rebuilt tree is not the recorded one.
    #[error(
        "the rebuilt workspace's root {got} is not the recorded {want} (differs at: {differs})"
    )]
    Root {
        /// The recorded root.
        want: String,
        /// The rebuilt root.
        got: String,
        /// The first paths that differ.
        differs: String,
    },
    /// Filesystem.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn by_path(m: &Manifest) -> BTreeMap<Vec<u8>, &Entry> {
    m.entries.iter().map(|e| (e.path_bytes(), e)).collect()
}

impl Delta {
    /// How `now` differs from `baseline`.
    pub fn between(baseline: &Manifest, now: &Manifest) -> Delta {
        let before = by_path(baseline);
        let after = by_path(now);
        let changed = now
            .entries
            .iter()
            .filter(|e| before.get(&e.path_bytes()) != Some(e))
            .cloned()
            .collect();
        let removed = baseline
            .entries
            .iter()
            .filter(|e| !after.contains_key(&e.path_bytes()))
            .cloned()
            .collect();
        Delta {
            root: now.root.clone(),
            changed,
            removed,
        }
    }

    /// The manifest this delta makes of `baseline`; refused unless its
    /// root is the one recorded, and every path is a plain relative one.
    pub fn apply(&self, baseline: &Manifest) -> Result<Manifest, RebuildError> {
        let mut entries: BTreeMap<Vec<u8>, Entry> = baseline
            .entries
            .iter()
            .map(|e| (e.path_bytes(), e.clone()))
            .collect();
        for e in &self.removed {
            if entries.remove(&e.path_bytes()).is_none() {
                return Err(RebuildError::Record(format!(
                    "`{}` is removed but was not in the baseline",
                    e.path
                )));
            }
        }
        for e in &self.changed {
            entries.insert(e.path_bytes(), e.clone());
        }
        let target = Manifest::from_entries(entries.into_values().collect());
        if target.root != self.root {
            return Err(RebuildError::Record(format!(
                "its entries make the root {}, not the {} it records",
                target.root, self.root
            )));
        }
        for e in &target.entries {
            safe_rel(e)?;
        }
        Ok(target)
    }
}

/// A writer that hashes what passes through it.
struct Hashing(std::fs::File, sha2::Sha256);

impl std::io::Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        sha2::Digest::update(&mut self.1, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// `e`'s path as a relative path with only plain components (no `..`,
/// `.`, root, empty name or NUL, and not under the root's `.git`).
fn safe_rel(e: &Entry) -> Result<PathBuf, RebuildError> {
    let bytes = e.path_bytes();
    let bad = || RebuildError::Record(format!("`{}` is not a workspace path", e.path));
    if bytes.is_empty() || bytes.contains(&0) || bytes.starts_with(b"/") {
        return Err(bad());
    }
    let mut parts = bytes.split(|b| *b == b'/').peekable();
    if parts.peek() == Some(&&b".git"[..]) {
        return Err(bad());
    }
    if parts.any(|p| p.is_empty() || p == b"." || p == b"..") {
        return Err(bad());
    }
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

/// Bring the tree at `dir` to `target`: entries that differ are removed,
/// then every missing one is written from `fetch` (its content: a file's
/// bytes, or a link's target), checked against its digest. Nothing is
/// written through a link (a path whose parent is not a directory is
/// refused). The manifest reached is returned, and refused unless its
/// root is `target`'s. Only the runtime writes here meanwhile (nothing of
/// the task runs).
pub fn reconcile(
    dir: &Path,
    target: &Manifest,
    fetch: &mut dyn FnMut(&Entry) -> Result<Vec<u8>, RebuildError>,
) -> Result<Manifest, RebuildError> {
    reconcile_from(dir, target, &mut |e| fetch(e).map(Fetched::Bytes))
}

/// What a fetch gives for an entry: its content whole, or (a file's only)
/// a reader of it, copied as it is read so no file is held in memory.
pub enum Fetched {
    /// A file's bytes, or a link's target.
    Bytes(Vec<u8>),
    /// A file's bytes as they are read.
    Stream(Box<dyn std::io::Read>),
}

/// [`reconcile`], with contents that may be streamed: a streamed file is
/// checked against its digest as it is written, and removed if it is not
/// the content listed.
#[allow(clippy::disallowed_methods)] // rebuilds the runtime's own workspace copy (O_NOFOLLOW where it reads workspace files)
pub fn reconcile_from(
    dir: &Path,
    target: &Manifest,
    fetch: &mut dyn FnMut(&Entry) -> Result<Fetched, RebuildError>,
) -> Result<Manifest, RebuildError> {
    let have = Manifest::of(dir)?;
    let want = by_path(target);
    let had = by_path(&have);
    for e in &have.entries {
        if want.get(&e.path_bytes()) != Some(&e) {
            std::fs::remove_file(dir.join(safe_rel(e)?))?;
        }
    }
    for e in &target.entries {
        if had.get(&e.path_bytes()) == Some(&e) {
            continue;
        }
        let rel = safe_rel(e)?;
        let wrong = || RebuildError::Content {
            path: e.path.clone(),
            why: format!("the content kept for it is not {}", e.sha256),
        };
        let content = fetch(e)?;
        if let Fetched::Bytes(bytes) = &content
            && loop_protocol::hash::sha256_hex(bytes) != e.sha256
        {
            return Err(wrong());
        }
        let full = dir.join(&rel);
        make_parents(dir, &rel)?;
        match std::fs::symlink_metadata(&full) {
            // A directory left where a file goes (its files were removed
            // above: none of them is in the target).
            Ok(m) if m.is_dir() => crate::snapshot::remove_tree(&full)?,
            Ok(_) => std::fs::remove_file(&full)?,
            Err(x) if x.kind() == std::io::ErrorKind::NotFound => {}
            Err(x) => return Err(x.into()),
        }
        match (e.kind, content) {
            (EntryKind::Symlink, Fetched::Bytes(bytes)) => {
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&bytes), &full)?
            }
            (EntryKind::Symlink, Fetched::Stream(_)) => {
                return Err(RebuildError::Content {
                    path: e.path.clone(),
                    why: "a link's target was given as a file's content".into(),
                });
            }
            (EntryKind::File, content) => {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(if e.executable { 0o755 } else { 0o644 })
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&full)?;
                match content {
                    Fetched::Bytes(bytes) => f.write_all(&bytes)?,
                    Fetched::Stream(mut from) => {
                        let mut hashing = Hashing(f, sha2::Sha256::default());
                        std::io::copy(&mut from, &mut hashing)?;
                        let Hashing(file, hasher) = hashing;
                        f = file;
                        use sha2::Digest;
                        if loop_protocol::hash::hex(&hasher.finalize()) != e.sha256 {
                            drop(f);
                            std::fs::remove_file(&full)?;
                            return Err(wrong());
                        }
                    }
                }
                // The umask may have taken the executable bit.
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(std::fs::Permissions::from_mode(if e.executable {
                    0o755
                } else {
                    0o644
                }))?;
            }
        }
    }
    let reached = Manifest::of(dir)?;
    if reached.root != target.root {
        let now = by_path(&reached);
        let differs: Vec<&str> = target
            .entries
            .iter()
            .filter(|e| now.get(&e.path_bytes()) != Some(e))
            .chain(
                reached
                    .entries
                    .iter()
                    .filter(|e| want.get(&e.path_bytes()) != Some(e)),
            )
            .map(|e| e.path.as_str())
            .take(5)
            .collect();
        return Err(RebuildError::Root {
            want: target.root.clone(),
            got: reached.root,
            differs: differs.join(", "),
        });
    }
    Ok(reached)
}

/// Make `rel`'s parent directories under `dir`, refusing any that is not
/// a directory (a link above a path is never written through).
#[allow(clippy::disallowed_methods)] // rebuilds the runtime's own workspace copy (O_NOFOLLOW where it reads workspace files)
fn make_parents(dir: &Path, rel: &Path) -> Result<(), RebuildError> {
    let mut at = dir.to_path_buf();
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    for part in parent.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(RebuildError::Content {
                    path: rel.to_string_lossy().into_owned(),
                    why: format!("{} is not a directory", at.display()),
                });
            }
            Err(x) if x.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(&at)?,
            Err(x) => return Err(x.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn fetcher(from: &Path) -> impl FnMut(&Entry) -> Result<Vec<u8>, RebuildError> + use<'_> {
        move |e: &Entry| {
            let p = from.join(safe_rel(e)?);
            Ok(match e.kind {
                EntryKind::File => std::fs::read(p)?,
                EntryKind::Symlink => std::fs::read_link(p)?.into_os_string().into_vec(),
            })
        }
    }

    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn a_tree_rebuilt_from_its_baseline_and_delta_has_the_recorded_root() {
        let d = TestDir::new("rebuild");
        let a = d.path().join("a");
        let b = d.path().join("b");
        for root in [&a, &b] {
            std::fs::create_dir_all(root.join("src/deep")).unwrap();
            std::fs::write(root.join("README.md"), "base\n").unwrap();
            std::fs::write(root.join("src/gone.rs"), "x").unwrap();
            std::fs::write(root.join("src/deep/kept.rs"), "k").unwrap();
        }
        let baseline = Manifest::of(&a).unwrap();
        // The task's changes on machine A: edits, a new executable, a
        // link, a deletion, a file where a directory was, a non-UTF-8 name.
        std::fs::write(a.join("README.md"), "changed\n").unwrap();
        std::fs::remove_file(a.join("src/gone.rs")).unwrap();
        std::fs::remove_dir_all(a.join("src/deep")).unwrap();
        std::fs::write(a.join("src/deep"), "now a file").unwrap();
        std::fs::create_dir_all(a.join("new/dir")).unwrap();
        std::fs::write(a.join("new/dir/run.sh"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            a.join("new/dir/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("../README.md", a.join("new/link")).unwrap();
        std::fs::write(a.join(std::ffi::OsStr::from_bytes(b"raw\xff")), "r").unwrap();
        let now = Manifest::of(&a).unwrap();
        let delta = Delta::between(&baseline, &now);
        assert_eq!(delta.changed.len(), 5, "{delta:?}");
        assert_eq!(delta.removed.len(), 2, "{delta:?}");
        let target = delta.apply(&baseline).unwrap();
        assert_eq!(target, now);
        // Machine B holds only the baseline; it reaches A's tree exactly.
        let reached = reconcile(&b, &target, &mut fetcher(&a)).unwrap();
        assert_eq!(reached.root, now.root);
        // Reconciling again changes nothing and fetches nothing.
        let mut none = |_: &Entry| -> Result<Vec<u8>, RebuildError> { panic!("fetched") };
        assert_eq!(reconcile(&b, &target, &mut none).unwrap().root, now.root);
    }

    #[test]
    fn a_record_that_does_not_add_up_or_wrong_content_is_refused() {
        let d = TestDir::new("rebuild-bad");
        let a = d.path().join("a");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::write(a.join("f"), "one").unwrap();
        let baseline = Manifest::of(&a).unwrap();
        std::fs::write(a.join("f"), "two").unwrap();
        let now = Manifest::of(&a).unwrap();
        let good = Delta::between(&baseline, &now);
        // A root that its entries do not make.
        let mut wrong_root = good.clone();
        wrong_root.root = baseline.root.clone();
        assert!(matches!(
            wrong_root.apply(&baseline),
            Err(RebuildError::Record(_))
        ));
        // Paths that would leave the workspace or reach its `.git`, even
        // with a root computed over them.
        for evil in ["../escape", "/etc/passwd", "a//b", ".git/config", "x/./y"] {
            let mut e = now.entries[0].clone();
            e.path = evil.into();
            let m = Manifest::from_entries(vec![e.clone()]);
            let d = Delta {
                root: m.root,
                changed: vec![e],
                removed: vec![baseline.entries[0].clone()],
            };
            let err = d.apply(&baseline).unwrap_err().to_string();
            assert!(err.contains("is not a workspace path"), "{evil}: {err}");
        }
        // Content that is not what its digest says is never written.
        let b = d.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("f"), "one").unwrap();
        let target = good.apply(&baseline).unwrap();
        let mut lying = |_: &Entry| Ok(b"three".to_vec());
        let err = reconcile(&b, &target, &mut lying).unwrap_err().to_string();
        assert!(err.contains("is not"), "{err}");
        assert!(!b.join("f").exists() || std::fs::read(b.join("f")).unwrap() != b"three");
        // Streamed, it is written as it comes, and removed once its digest
        // is found wrong; the right content streamed is kept.
        let mut streamed_lie = |_: &Entry| {
            Ok(Fetched::Stream(Box::new(std::io::Cursor::new(
                b"three".to_vec(),
            ))))
        };
        let err = reconcile_from(&b, &target, &mut streamed_lie)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not"), "{err}");
        assert!(!b.join("f").exists());
        let mut streamed = |_: &Entry| {
            Ok(Fetched::Stream(Box::new(std::io::Cursor::new(
                b"two".to_vec(),
            ))))
        };
        let reached = reconcile_from(&b, &target, &mut streamed).unwrap();
        assert_eq!(reached.root, target.root);
        assert_eq!(std::fs::read(b.join("f")).unwrap(), b"two");
    }

    #[test]
    fn a_link_in_the_old_tree_is_never_written_through() {
        let d = TestDir::new("rebuild-link");
        let a = d.path().join("a");
        let b = d.path().join("b");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(a.join("sub")).unwrap();
        std::fs::write(a.join("sub/file"), "mine").unwrap();
        let target = Manifest::of(&a).unwrap();
        // The stale tree has `sub` as a link out of it.
        std::fs::create_dir_all(&b).unwrap();
        std::os::unix::fs::symlink(&outside, b.join("sub")).unwrap();
        let reached = reconcile(&b, &target, &mut fetcher(&a)).unwrap();
        assert_eq!(reached.root, target.root);
        assert!(std::fs::symlink_metadata(b.join("sub")).unwrap().is_dir());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }
}
