//! Committing a command's effects all at once.
//!
//! A command runs on an overlay of the workspace: everything it writes,
//! creates or deletes lands in a private upper directory, and the workspace
//! itself is untouched until the command has ended. Then the upper layer is
//! merged into the workspace through a journal, so that a crash leaves the
//! workspace either exactly as before the command or exactly as after it —
//! which is what lets a resumed task run an interrupted command again
//! without doing anything twice.
//!
//! The upper layer speaks overlayfs: a character device 0:0 is a whiteout
//! (the path was deleted); a directory marked opaque (`user.overlay.opaque`
//! or `trusted.overlay.opaque` = `y`) replaces the one below it. Everything
//! else in it is new or changed content. The merge moves files by rename
//! (the upper directory is on the workspace's file system); existing targets
//! are moved into the journal first, and put back if the merge is cut short.

use serde::{Deserialize, Serialize};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// One change the merge makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    /// Remove the path (a whiteout).
    Delete(String),
    /// Make the path an empty directory replacing what is there (opaque).
    ReplaceDir(String),
    /// Make sure the path is a directory (merge into it).
    EnsureDir(String),
    /// Put the upper file (or symlink) at the path.
    Put(String),
}

impl Op {
    fn rel(&self) -> &str {
        match self {
            Op::Delete(r) | Op::ReplaceDir(r) | Op::EnsureDir(r) | Op::Put(r) => r,
        }
    }
}

/// The journal's plan: each op, and whether its target existed when the
/// plan was made (so recovery knows what it may remove).
#[derive(Debug, Serialize, Deserialize)]
struct Plan {
    ops: Vec<(Op, bool)>,
}

/// What a merge changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// Workspace-relative paths written, created or deleted.
    pub paths: Vec<String>,
    /// Paths the merge refused, left as they were, each with why
    /// (`b.key (protected by *.key)`, `b.key/inner (inside refused b.key)`).
    pub refused: Vec<String>,
}

/// Test-only fault injection (the `fault-injection` feature):
/// `LOOP_FAULT_KILL_IN_MERGE=N` makes the process SIGKILL itself after the
/// merge's Nth operation (0: right after the plan is durable), as a crash
/// would. Read once per process.
#[cfg(feature = "fault-injection")]
fn kill_after_op() -> Option<usize> {
    static AT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| {
        std::env::var("LOOP_FAULT_KILL_IN_MERGE")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

/// Without the `fault-injection` feature nothing is injected.
#[cfg(not(feature = "fault-injection"))]
fn kill_after_op() -> Option<usize> {
    None
}

fn maybe_die(done: usize) {
    if kill_after_op() == Some(done) {
        // SAFETY: signalling this very process; nothing after it runs.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

fn is_opaque(dir: &Path) -> bool {
    ["user.overlay.opaque", "trusted.overlay.opaque"]
        .iter()
        .any(|name| xattr_is_y(dir, name))
}

fn xattr_is_y(path: &Path, name: &str) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (Ok(p), Ok(n)) = (
        std::ffi::CString::new(path.as_os_str().as_bytes()),
        std::ffi::CString::new(name),
    ) else {
        return false;
    };
    let mut buf = [0u8; 4];
    // SAFETY: both strings are NUL-terminated and live across the call; the
    // buffer's length is passed with it.
    let n = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n == 1 && buf[0] == b'y'
}

/// Whether `rel` is a plain path inside the workspace: relative, not
/// empty, no `.`, `..` or empty component, no NUL.
fn inside(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.contains('\0')
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Walk the upper layer into a list of operations, parents before
/// children. A name that is not UTF-8 (no record can show it faithfully,
/// and its lossy rendering could pass for another file's) is put in
/// `unreadable`, rendered lossily, and not entered; so is a socket or a
/// device file (`NAME\0what it is`): nothing of it can be merged.
#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn plan(
    upper: &Path,
    rel: &str,
    ops: &mut Vec<Op>,
    unreadable: &mut Vec<String>,
) -> std::io::Result<()> {
    let dir = if rel.is_empty() {
        upper.to_path_buf()
    } else {
        upper.join(rel)
    };
    let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if e.file_name().to_str().is_none() {
            unreadable.push(child);
            continue;
        }
        let meta = std::fs::symlink_metadata(e.path())?;
        let kind = meta.file_type();
        if is_whiteout(&meta) {
            ops.push(Op::Delete(child));
        } else if kind.is_socket() || kind.is_block_device() || kind.is_char_device() {
            // Not workspace content (nothing can be copied of it): refused
            // by name, never half merged.
            let what = if kind.is_socket() {
                "a socket"
            } else {
                "a device file"
            };
            unreadable.push(format!("{child}\0{what}"));
        } else if meta.is_dir() {
            if is_opaque(&e.path()) {
                ops.push(Op::ReplaceDir(child.clone()));
            } else {
                ops.push(Op::EnsureDir(child.clone()));
            }
            plan(upper, &child, ops, unreadable)?;
        } else {
            ops.push(Op::Put(child));
        }
    }
    Ok(())
}

/// The first path under workspace directory `rel` that `refuse` names,
/// with why (links are not followed).
#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn refused_inside(
    workspace: &Path,
    rel: &str,
    refuse: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, String)> {
    let mut todo = vec![rel.to_string()];
    while let Some(dir) = todo.pop() {
        let Ok(items) = std::fs::read_dir(workspace.join(&dir)) else {
            continue;
        };
        for item in items.flatten() {
            let child = format!("{dir}/{}", item.file_name().to_string_lossy());
            if let Some(why) = refuse(&child) {
                return Some((child, why));
            }
            if item.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(child);
            }
        }
    }
    None
}

/// Whether `a` (in the upper layer) and `b` (in the workspace) are the same
/// file with the same mode, or links to the same target.
#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn same_entry(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let (Ok(ma), Ok(mb)) = (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) else {
        return false;
    };
    if ma.file_type().is_symlink() && mb.file_type().is_symlink() {
        return std::fs::read_link(a).ok() == std::fs::read_link(b).ok();
    }
    if !(ma.is_file() && mb.is_file())
        || ma.len() != mb.len()
        || ma.permissions().mode() != mb.permissions().mode()
    {
        return false;
    }
    match (crate::manifest::hash_file(a), crate::manifest::hash_file(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Take from a regular file what would give privilege to whoever runs it
/// on the host: the setuid and setgid bits, and file capabilities. (The
/// sandbox refuses to make them; without its seccomp layer a command
/// could, and nothing it leaves may carry them into the workspace.)
#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn strip_privilege(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    if mode & 0o6000 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o1777))?;
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    let name = c"security.capability";
    // SAFETY: lgetxattr with no buffer asks only whether the attribute is
    // there (removing one needs CAP_SETFCAP even when it is absent).
    let present = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if present < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA | libc::ENOTSUP) => Ok(()),
            _ => Err(e),
        };
    }
    // SAFETY: lremovexattr on a NUL-terminated path and name.
    if unsafe { libc::lremovexattr(c.as_ptr(), name.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A file the command left unreadable to its owner (`chmod 000`) would
/// stop the runtime, run as that owner, from hashing the workspace: its
/// owner may read and write it (change sets carry only git's modes).
#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn owner_can_use(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path)?;
    let mode = meta.permissions().mode();
    if meta.is_file() && mode & 0o600 != 0o600 {
        std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode((mode | 0o600) & 0o1777),
        )?;
    }
    Ok(())
}

/// Move `from` to `to` (rename; a copy when they are on different file systems).
#[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
fn move_path(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            let meta = std::fs::symlink_metadata(from)?;
            if meta.is_dir() {
                crate::fsutil::copy_tree(from, to, &|_| false, false)?;
            } else if meta.file_type().is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
            } else if meta.is_file() {
                // The runtime owns what the command wrote, whatever mode
                // it left (`chmod 000`): readable for the copy, the mode
                // kept on the copy.
                use std::os::unix::fs::PermissionsExt;
                let mode = meta.permissions().mode();
                if mode & 0o400 == 0 {
                    std::fs::set_permissions(from, std::fs::Permissions::from_mode(mode | 0o400))?;
                }
                std::fs::copy(from, to)?;
                std::fs::File::open(to)?.sync_all()?;
                std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode & 0o1777))?;
            } else if meta.file_type().is_fifo() {
                // Never opened (a FIFO would block the copy): made anew.
                let c = std::ffi::CString::new(to.as_os_str().as_encoded_bytes())
                    .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
                // SAFETY: mkfifo at a NUL-terminated path.
                if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Sockets and devices are not workspace content: left out.
            // The source is on the command's own disk, thrown away with
            // it: a directory it made unwritable may keep it.
            let _ = remove_any(from);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Merges command effects into a workspace through a journal in `journal`.
pub struct OverlayCommit {
    journal: PathBuf,
    /// Whether the plan and the merged files are synced.
    sync: bool,
}

impl OverlayCommit {
    /// Journal kept in `journal` (outside the workspace).
    pub fn new(journal: &Path) -> Self {
        OverlayCommit {
            journal: journal.to_path_buf(),
            sync: true,
        }
    }

    /// Nothing synced: a merge stays all-or-nothing against a killed
    /// process, not against the machine going down (for a workspace whose
    /// state the store keeps).
    pub fn unsynced(mut self) -> Self {
        self.sync = false;
        self
    }

    fn plan_path(&self) -> PathBuf {
        self.journal.join("plan.json")
    }

    fn backup(&self, i: usize) -> PathBuf {
        self.journal.join(format!("b{i}"))
    }

    /// Merge `upper` into `workspace`, skipping paths `refuse` names a
    /// rule for (and everything inside a refused directory). The whole
    /// plan, refusals included, is decided before anything moves; it is
    /// executed through the journal and, if any step fails, rolled back
    /// before the error is returned, so the workspace is either exactly as
    /// before or exactly as after. Durable when it returns; cut short by a
    /// crash, [`OverlayCommit::recover`] puts the workspace back.
    pub fn merge(
        &self,
        upper: &Path,
        workspace: &Path,
        refuse: &dyn Fn(&str) -> Option<String>,
    ) -> std::io::Result<Merged> {
        self.merge_until(upper, workspace, refuse, None)
    }

    /// As [`OverlayCommit::merge`], but fail (as a full disk would) at op
    /// `fail_at`. For tests.
    #[doc(hidden)]
    #[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
    pub fn merge_until(
        &self,
        upper: &Path,
        workspace: &Path,
        refuse: &dyn Fn(&str) -> Option<String>,
        fail_at: Option<usize>,
    ) -> std::io::Result<Merged> {
        // A merge an earlier failure or crash left half done goes first:
        // its backups are the only copy of what it moved aside.
        self.recover(workspace)?;
        let mut ops = Vec::new();
        let mut unreadable = Vec::new();
        if upper.exists() {
            plan(upper, "", &mut ops, &mut unreadable)?;
        }
        let mut merged = Merged::default();
        for name in unreadable {
            merged.refused.push(match name.split_once('\0') {
                Some((name, what)) => format!("{name} ({what}, which is not workspace content)"),
                None => format!(
                    "{name} (a name that is not UTF-8, which no record can show faithfully)"
                ),
            });
        }
        let mut refused_dirs: Vec<String> = Vec::new();
        ops.retain(|op| {
            let rel = op.rel();
            if let Some(dir) = refused_dirs
                .iter()
                .find(|d| rel.starts_with(&format!("{d}/")))
            {
                merged.refused.push(format!("{rel} (inside refused {dir})"));
                return false;
            }
            // An op that removes or replaces a workspace directory takes
            // everything in it: refused if anything in it is.
            let removes_dir = !matches!(op, Op::EnsureDir(_))
                && std::fs::symlink_metadata(workspace.join(rel)).is_ok_and(|m| m.is_dir());
            let why = refuse(rel).or_else(|| {
                removes_dir
                    .then(|| refused_inside(workspace, rel, refuse))
                    .flatten()
                    .map(|(inner, why)| format!("it would remove {inner} ({why})"))
            });
            match why {
                None => true,
                Some(why) => {
                    merged.refused.push(format!("{rel} ({why})"));
                    if matches!(op, Op::EnsureDir(_) | Op::ReplaceDir(_)) {
                        refused_dirs.push(rel.to_string());
                    }
                    false
                }
            }
        });
        // What would change nothing is not an op: a file put back with the
        // same bytes and mode, a link with the same target.
        ops.retain(|op| match op {
            Op::Put(rel) => !same_entry(&upper.join(rel), &workspace.join(rel)),
            _ => true,
        });
        if ops.is_empty() {
            return Ok(merged);
        }
        // The plan is durable before the workspace is touched.
        std::fs::create_dir_all(&self.journal)?;
        let planned: Vec<(Op, bool)> = ops
            .iter()
            .map(|op| {
                let existed = std::fs::symlink_metadata(workspace.join(op.rel())).is_ok();
                (op.clone(), existed)
            })
            .collect();
        let text = serde_json::to_vec(&Plan { ops: planned }).map_err(std::io::Error::other)?;
        crate::fsutil::write_atomic_with(&self.plan_path(), &text, self.sync)?;
        maybe_die(0);
        let executed = self.execute(&ops, upper, workspace, &mut merged, fail_at);
        if let Err(e) = executed {
            return match self.recover(workspace) {
                Ok(_) => Err(std::io::Error::new(
                    e.kind(),
                    format!("{e}; the merge was rolled back, nothing of it entered the workspace"),
                )),
                Err(r) => Err(std::io::Error::other(format!(
                    "{e}; rolling the merge back failed too ({r}): the journal in {} still holds it",
                    self.journal.display()
                ))),
            };
        }
        // The commit point: the plan goes (durably) first, then the old
        // content; a kill in between leaves no plan, so nothing is undone.
        self.drop_journal()?;
        Ok(merged)
    }

    #[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
    fn execute(
        &self,
        ops: &[Op],
        upper: &Path,
        workspace: &Path,
        merged: &mut Merged,
        fail_at: Option<usize>,
    ) -> std::io::Result<()> {
        for (i, op) in ops.iter().enumerate() {
            if fail_at == Some(i) {
                return Err(std::io::Error::other("simulated failure"));
            }
            let target = workspace.join(op.rel());
            let exists = std::fs::symlink_metadata(&target).is_ok();
            // Move aside what the op replaces (kept until the commit point).
            let aside = match op {
                Op::EnsureDir(_) => exists && !target.is_dir(),
                _ => exists,
            };
            if aside {
                std::fs::rename(&target, self.backup(i))?;
            }
            let mut changed = true;
            match op {
                Op::Delete(_) => {}
                Op::ReplaceDir(_) => std::fs::create_dir(&target)?,
                Op::EnsureDir(_) => {
                    // Merging into a directory that is there changes nothing.
                    changed = !target.is_dir();
                    if changed {
                        std::fs::create_dir(&target)?;
                    }
                }
                Op::Put(rel) => {
                    let from = upper.join(rel);
                    strip_privilege(&from)?;
                    move_path(&from, &target)?;
                    owner_can_use(&target)?
                }
            }
            if changed {
                merged.paths.push(op.rel().to_string());
            }
            maybe_die(i + 1);
        }
        let mut dirs: Vec<PathBuf> = merged
            .paths
            .iter()
            .filter_map(|r| workspace.join(r).parent().map(Path::to_path_buf))
            .collect();
        dirs.sort();
        dirs.dedup();
        for d in dirs.iter().filter(|_| self.sync) {
            fsync_dir(d)?;
        }
        Ok(())
    }

    /// Undo a merge that was cut short: every op's effect is removed and what
    /// it moved aside is put back, last op first. Returns the ops undone.
    #[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
    pub fn recover(&self, workspace: &Path) -> std::io::Result<usize> {
        let Ok(text) = std::fs::read(self.plan_path()) else {
            // No plan: nothing was touched (or the merge completed).
            let _ = std::fs::remove_dir_all(&self.journal);
            return Ok(0);
        };
        let plan: Plan = serde_json::from_slice(&text)
            .map_err(|e| std::io::Error::other(format!("overlay journal unreadable: {e}")))?;
        // The plan lives beside the task's other state: it may name only
        // plain paths inside the workspace (any name a merge takes, a
        // backslash in one included: it is a file name's byte here).
        if let Some((op, _)) = plan.ops.iter().find(|(op, _)| !inside(op.rel())) {
            return Err(std::io::Error::other(format!(
                "{}: the plan names `{}`, which is not a path inside the workspace: refusing to recover from it",
                self.plan_path().display(),
                op.rel()
            )));
        }
        for (i, (op, existed)) in plan.ops.iter().enumerate().rev() {
            let target = workspace.join(op.rel());
            let backup = self.backup(i);
            let had_backup = std::fs::symlink_metadata(&backup).is_ok();
            let is_there = std::fs::symlink_metadata(&target).is_ok();
            if had_backup {
                // The op started: what is at the target is its doing.
                remove_any(&target)?;
                std::fs::rename(&backup, &target)?;
            } else if !existed && is_there {
                // Nothing was there when planned: the op created it.
                remove_any(&target)?;
            }
            // Existed and no backup: the op never started (or, for a
            // directory merged into, never needed to); leave it.
        }
        self.drop_journal()?;
        Ok(plan.ops.len())
    }

    /// Remove the journal, its plan first and durably: a journal without a
    /// plan is one with nothing to undo.
    #[allow(clippy::disallowed_methods)] // merges an overlay's upper layer the runtime made; every workspace name is checked (no link followed, special files refused) as it is read
    fn drop_journal(&self) -> std::io::Result<()> {
        match std::fs::remove_file(self.plan_path()) {
            Ok(()) if self.sync => std::fs::File::open(&self.journal)?.sync_all()?,
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::remove_dir_all(&self.journal)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("loop-ovc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn whiteout(path: &Path) {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mknod of a 0:0 char device.
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) };
        assert_eq!(r, 0, "mknod needs root (these tests run as root in CI)");
    }

    #[test]
    fn setuid_setgid_bits_and_file_capabilities_never_reach_the_workspace() {
        use std::os::unix::fs::PermissionsExt;
        let base = tmp("suid");
        let (ws, upper, journal) = (base.join("ws"), base.join("upper"), base.join("journal"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&upper).unwrap();
        for (name, mode) in [("suid-sh", 0o4755), ("sgid", 0o2750), ("plain", 0o755)] {
            std::fs::write(upper.join(name), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(upper.join(name), std::fs::Permissions::from_mode(mode))
                .unwrap();
        }
        // A file capability (cap_setuid+ep, version 2), where the file
        // system takes one (root only).
        let caps: [u8; 20] = [
            0, 0, 0, 2, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let c = std::ffi::CString::new(upper.join("plain").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: setxattr on a NUL-terminated path with a local buffer.
        let set = unsafe {
            libc::setxattr(
                c.as_ptr(),
                c"security.capability".as_ptr(),
                caps.as_ptr().cast(),
                caps.len(),
                0,
            )
        } == 0;
        let merged = OverlayCommit::new(&journal)
            .merge(&upper, &ws, &|_| None)
            .unwrap();
        assert_eq!(merged.paths.len(), 3, "{merged:?}");
        for (name, want) in [("suid-sh", 0o755), ("sgid", 0o750), ("plain", 0o755)] {
            let mode = std::fs::metadata(ws.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777;
            assert_eq!(mode, want, "{name}: {mode:o}");
        }
        if set {
            let c =
                std::ffi::CString::new(ws.join("plain").as_os_str().as_encoded_bytes()).unwrap();
            let mut buf = [0u8; 64];
            // SAFETY: getxattr into a local buffer.
            let n = unsafe {
                libc::getxattr(
                    c.as_ptr(),
                    c"security.capability".as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            assert_eq!(n, -1, "a file capability reached the workspace");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_confined_commands_effects_merge_inside_its_paths_and_nowhere_else() {
        let base = tmp("confined");
        let (ws, upper, journal) = (base.join("ws"), base.join("upper"), base.join("journal"));
        std::fs::create_dir_all(ws.join("pkg/b")).unwrap();
        std::fs::write(ws.join("pkg/b/keep"), "b").unwrap();
        // What a command left: new directories down to its path, a file
        // inside it, a file beside it, one at the top, and pkg/b replaced.
        std::fs::create_dir_all(upper.join("pkg/a/new")).unwrap();
        std::fs::write(upper.join("pkg/a/new/f"), "a").unwrap();
        std::fs::write(upper.join("pkg/evil"), "x").unwrap();
        std::fs::write(upper.join("top.txt"), "x").unwrap();
        std::fs::create_dir_all(upper.join("pkg/b")).unwrap();
        std::fs::write(upper.join("pkg/b/keep"), "changed").unwrap();
        let protected = crate::jail::Protected::new(&[])
            .unwrap()
            .confined_to(&["pkg/a".into()], "outside")
            .unwrap();
        let refuse = |rel: &str| protected.matching(rel).map(|r| format!("protected by {r}"));
        let merged = OverlayCommit::new(&journal)
            .merge(&upper, &ws, &refuse)
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("pkg/a/new/f")).unwrap(),
            "a"
        );
        assert_eq!(std::fs::read_to_string(ws.join("pkg/b/keep")).unwrap(), "b");
        assert!(!ws.join("pkg/evil").exists() && !ws.join("top.txt").exists());
        let mut refused = merged.refused.clone();
        refused.sort();
        assert_eq!(
            refused,
            vec![
                "pkg/b (protected by outside)",
                "pkg/b/keep (inside refused pkg/b)",
                "pkg/evil (protected by outside)",
                "top.txt (protected by outside)"
            ],
            "{merged:?}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn an_upper_layer_is_merged_and_a_cut_short_merge_is_undone() {
        let base = tmp("merge");
        let (ws, upper, journal) = (base.join("ws"), base.join("upper"), base.join("journal"));
        std::fs::create_dir_all(ws.join("dir/sub")).unwrap();
        std::fs::write(ws.join("keep.txt"), "keep").unwrap();
        std::fs::write(ws.join("change.txt"), "old").unwrap();
        std::fs::write(ws.join("gone.txt"), "bye").unwrap();
        std::fs::write(ws.join("dir/sub/x"), "x").unwrap();
        std::fs::write(ws.join("secret.key"), "s").unwrap();
        std::fs::create_dir_all(upper.join("dir/new")).unwrap();
        std::fs::write(upper.join("change.txt"), "new").unwrap();
        std::fs::write(upper.join("dir/new/y"), "y").unwrap();
        std::fs::write(upper.join("secret.key"), "tampered").unwrap();
        whiteout(&upper.join("gone.txt"));
        let before = crate::Manifest::of(&ws).unwrap();

        let merged = OverlayCommit::new(&journal)
            .merge(&upper, &ws, &|rel| {
                rel.ends_with(".key")
                    .then(|| "protected by *.key".to_string())
            })
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("change.txt")).unwrap(),
            "new"
        );
        assert_eq!(std::fs::read_to_string(ws.join("dir/new/y")).unwrap(), "y");
        assert!(!ws.join("gone.txt").exists());
        assert_eq!(
            std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
            "keep"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("secret.key")).unwrap(),
            "s",
            "protected"
        );
        assert_eq!(
            merged.refused,
            vec!["secret.key (protected by *.key)".to_string()]
        );
        assert!(!journal.exists(), "committed");

        // A merge cut short after some ops: recovery restores the exact tree.
        let ws2 = base.join("ws2");
        crate::fsutil::copy_tree(&base.join("ws"), &ws2, &|_| false, false).unwrap();
        let before2 = crate::Manifest::of(&ws2).unwrap();
        let upper2 = base.join("upper2");
        std::fs::create_dir_all(upper2.join("dir")).unwrap();
        std::fs::write(upper2.join("change.txt"), "newer").unwrap();
        std::fs::write(upper2.join("dir/z"), "z").unwrap();
        whiteout(&upper2.join("keep.txt"));
        let j2 = base.join("journal2");
        // Simulate the crash: write the plan and apply the first two ops by hand.
        let mut ops = Vec::new();
        plan(&upper2, "", &mut ops, &mut Vec::new()).unwrap();
        std::fs::create_dir_all(&j2).unwrap();
        let planned: Vec<(Op, bool)> = ops
            .iter()
            .map(|op| {
                (
                    op.clone(),
                    std::fs::symlink_metadata(ws2.join(op.rel())).is_ok(),
                )
            })
            .collect();
        std::fs::write(
            j2.join("plan.json"),
            serde_json::to_vec(&Plan { ops: planned }).unwrap(),
        )
        .unwrap();
        let c = OverlayCommit::new(&j2);
        for (i, op) in ops.iter().enumerate().take(2) {
            let t = ws2.join(op.rel());
            if std::fs::symlink_metadata(&t).is_ok() && !matches!(op, Op::EnsureDir(_)) {
                std::fs::rename(&t, c.backup(i)).unwrap();
            }
            match op {
                Op::Put(rel) => std::fs::rename(upper2.join(rel), &t).unwrap(),
                Op::EnsureDir(_) | Op::ReplaceDir(_) if !t.is_dir() => {
                    std::fs::create_dir(&t).unwrap()
                }
                _ => {}
            }
        }
        assert_ne!(crate::Manifest::of(&ws2).unwrap().root, before2.root);
        assert_eq!(c.recover(&ws2).unwrap(), ops.len());
        assert_eq!(
            crate::Manifest::of(&ws2).unwrap().root,
            before2.root,
            "exactly as before"
        );
        assert!(!j2.exists());
        let _ = before;
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn refusals_cover_whole_directories_and_a_failed_merge_leaves_nothing() {
        let base = tmp("refuse-fail");
        let (ws, journal) = (base.join("ws"), base.join("journal"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("0data.txt"), "data").unwrap();
        std::fs::write(ws.join("z.txt"), "old").unwrap();
        let make_upper = |name: &str| {
            let upper = base.join(name);
            std::fs::create_dir_all(upper.join("b.key")).unwrap();
            std::fs::write(upper.join("b.key/inner"), "x").unwrap();
            std::fs::write(upper.join("0first.txt"), "leaked").unwrap();
            std::fs::write(upper.join("z.txt"), "new").unwrap();
            whiteout(&upper.join("0data.txt"));
            upper
        };
        let refuse = |rel: &str| {
            rel.ends_with(".key")
                .then(|| "protected by *.key".to_string())
        };
        let before = crate::Manifest::of(&ws).unwrap();
        // A failure at every op leaves the workspace exactly as before.
        for at in 0..3 {
            let upper = make_upper(&format!("upper-{at}"));
            let e = OverlayCommit::new(&journal)
                .merge_until(&upper, &ws, &refuse, Some(at))
                .unwrap_err()
                .to_string();
            assert!(e.contains("rolled back"), "{e}");
            assert_eq!(
                crate::Manifest::of(&ws).unwrap().root,
                before.root,
                "fail at {at}"
            );
            assert!(!journal.exists());
        }
        // Without a failure: the refused directory and its child are named,
        // everything else enters.
        let upper = make_upper("upper-ok");
        let merged = OverlayCommit::new(&journal)
            .merge(&upper, &ws, &refuse)
            .unwrap();
        assert_eq!(
            merged.refused,
            vec![
                "b.key (protected by *.key)".to_string(),
                "b.key/inner (inside refused b.key)".to_string()
            ]
        );
        assert_eq!(merged.paths, vec!["0data.txt", "0first.txt", "z.txt"]);
        assert!(!ws.join("0data.txt").exists() && !ws.join("b.key").exists());
        assert_eq!(std::fs::read_to_string(ws.join("z.txt")).unwrap(), "new");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A name with a backslash (a file name's byte here, which apply and
    /// undo take) is rolled back as any other when a merge fails (before,
    /// the rollback refused the plan naming it, leaving half the merge in
    /// the workspace and every later merge refused); a socket is refused by
    /// name and the rest merges (before, the merge failed on it with an
    /// unexplained "No such file").
    #[test]
    fn a_backslash_name_rolls_back_and_a_socket_is_refused_by_name() {
        let base = tmp("backslash-socket");
        let (ws, journal) = (base.join("ws"), base.join("journal"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "old").unwrap();
        let make_upper = |name: &str| {
            let upper = base.join(name);
            std::fs::create_dir_all(&upper).unwrap();
            std::fs::write(upper.join("a.txt"), "new").unwrap();
            std::fs::write(upper.join("back\\slash.txt"), "z").unwrap();
            std::fs::write(upper.join("z.txt"), "z").unwrap();
            upper
        };
        let none = |_: &str| None;
        let before = crate::Manifest::of(&ws).unwrap();
        for at in 0..3 {
            let upper = make_upper(&format!("upper-{at}"));
            let e = OverlayCommit::new(&journal)
                .merge_until(&upper, &ws, &none, Some(at))
                .unwrap_err()
                .to_string();
            assert!(e.contains("rolled back"), "{e}");
            assert_eq!(
                crate::Manifest::of(&ws).unwrap().root,
                before.root,
                "fail at {at}"
            );
            assert!(!journal.exists());
        }
        let upper = make_upper("upper-socket");
        let _socket = std::os::unix::net::UnixListener::bind(upper.join("m.sock")).unwrap();
        let merged = OverlayCommit::new(&journal)
            .merge(&upper, &ws, &none)
            .unwrap();
        assert_eq!(
            merged.refused,
            vec!["m.sock (a socket, which is not workspace content)".to_string()]
        );
        assert_eq!(merged.paths, vec!["a.txt", "back\\slash.txt", "z.txt"]);
        assert!(!ws.join("m.sock").exists());
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "new");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn removing_a_directory_with_a_protected_path_is_refused_and_no_ops_are_not_changes() {
        let base = tmp("refuse-inside");
        let (ws, journal) = (base.join("ws"), base.join("journal"));
        std::fs::create_dir_all(ws.join("keys/deep")).unwrap();
        std::fs::write(ws.join("keys/deep/server.key"), "k").unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.txt"), "same").unwrap();
        let upper = base.join("upper");
        std::fs::create_dir_all(upper.join("src")).unwrap();
        std::fs::write(upper.join("src/a.txt"), "same").unwrap();
        whiteout(&upper.join("keys"));
        let refuse = |rel: &str| {
            rel.ends_with(".key")
                .then(|| "protected by *.key".to_string())
        };
        let merged = OverlayCommit::new(&journal)
            .merge(&upper, &ws, &refuse)
            .unwrap();
        assert_eq!(
            merged.refused,
            vec!["keys (it would remove keys/deep/server.key (protected by *.key))".to_string()]
        );
        assert!(ws.join("keys/deep/server.key").exists());
        assert!(
            merged.paths.is_empty(),
            "nothing changed: {:?}",
            merged.paths
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
