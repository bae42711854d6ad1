//! A task's kept copy-on-write layers: what its commands write to a shared
//! environment (build outputs) outlasts each command, so incremental builds
//! stay fast. While a command runs, the layer kept so far is a read-only
//! middle layer of the share's overlay and the command writes to a fresh
//! upper layer on its own disk (a tmpfs capped at `limits.disk_mb`), so no
//! command can fill the host's disk through a share. After it ends, its
//! upper layer is merged here into the kept one — whiteouts, opaque
//! directories, files, links — and only when the kept layers then stay
//! within the same budget: past it, nothing of that command's writes to the
//! share is kept, and the command's observation says so.
#![allow(clippy::disallowed_methods)] // the sandbox's internals: the task's own kept layers and a command's disk, never a project's files

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A share whose writes are to be merged after the command.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Its directory on the command's disk (`share-N`).
    pub disk_dir: String,
    /// The kept layer (on the host).
    pub kept: PathBuf,
    /// Its place in the workspace, to name it.
    pub rel: String,
}

/// What became of a command's writes to a kept share.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Merged into the kept layer (or there was nothing to merge).
    Merged,
    /// Not kept: `kept` bytes are kept already, `new` were written, and
    /// together they pass the budget.
    OverBudget {
        /// Bytes kept before.
        kept: u64,
        /// Bytes the command wrote there.
        new: u64,
    },
}

/// Overlayfs marks a directory that hides what lies below it with one of
/// these (`user.` on mounts made in a user namespace).
const OPAQUE: [&str; 2] = ["user.overlay.opaque", "trusted.overlay.opaque"];

/// How deep a layer's directories may go (a deeper one is not merged).
const MAX_DEPTH: usize = 256;

/// Merge the upper layer `new` into the kept layer `kept`, if the bytes
/// kept and the bytes written together stay within `budget`.
pub(crate) fn merge(new: &Path, kept: &Path, budget: u64) -> io::Result<Outcome> {
    let new_bytes = match std::fs::symlink_metadata(new) {
        Ok(m) if m.is_dir() => size(new, 0)?,
        // The command made no upper layer there: nothing to merge.
        _ => return Ok(Outcome::Merged),
    };
    let kept_bytes = match std::fs::symlink_metadata(kept) {
        Ok(m) if m.is_dir() => size(kept, 0)?,
        _ => 0,
    };
    if kept_bytes.saturating_add(new_bytes) > budget {
        return Ok(Outcome::OverBudget {
            kept: kept_bytes,
            new: new_bytes,
        });
    }
    std::fs::create_dir_all(kept)?;
    merge_dir(new, kept, 0)?;
    Ok(Outcome::Merged)
}

/// The bytes a layer takes: each regular file's length or its allocated
/// blocks, whichever is more (a sparse file counts at its length, which is
/// what a copy of it would write), and a block per directory and link.
fn size(dir: &Path, depth: usize) -> io::Result<u64> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "directories nested more than {MAX_DEPTH} deep"
        )));
    }
    let mut total = 4096u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let m = std::fs::symlink_metadata(entry.path())?;
        total = total.saturating_add(if m.is_dir() {
            size(&entry.path(), depth + 1)?
        } else if m.is_file() {
            m.len().max(m.blocks().saturating_mul(512))
        } else {
            4096
        });
    }
    Ok(total)
}

/// Overlayfs's mark of a deleted name: a character device 0/0.
fn is_whiteout(m: &std::fs::Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

fn merge_dir(from: &Path, to: &Path, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "directories nested more than {MAX_DEPTH} deep"
        )));
    }
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let m = std::fs::symlink_metadata(&src)?;
        let ft = m.file_type();
        if is_whiteout(&m) {
            // Deleted: gone from the kept layer, and hidden below it.
            remove_any(&dst)?;
            whiteout(&dst)?;
        } else if ft.is_dir() {
            let opaque = opaque_mark(&src);
            let existing = std::fs::symlink_metadata(&dst).ok();
            match existing {
                Some(d) if d.is_dir() => {
                    // An opaque directory replaced what was there.
                    if opaque.is_some() {
                        clear_dir(&dst)?;
                    }
                }
                Some(_) => {
                    remove_any(&dst)?;
                    std::fs::create_dir(&dst)?;
                }
                None => std::fs::create_dir(&dst)?,
            }
            if let Some(name) = opaque {
                set_xattr(&dst, name, b"y")?;
            }
            merge_dir(&src, &dst, depth + 1)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(m.mode() & 0o777))?;
        } else if ft.is_file() {
            copy_file(&src, &dst, m.mode() & 0o777)?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&src)?;
            remove_any(&dst)?;
            std::os::unix::fs::symlink(target, &dst)?;
        }
        // FIFOs, sockets and devices are no build output: left out.
    }
    Ok(())
}

/// Copy a regular file in through a new name beside it, then rename over
/// whatever was there: never written through a link, setuid and setgid
/// bits dropped.
fn copy_file(src: &Path, dst: &Path, mode: u32) -> io::Result<()> {
    if std::fs::symlink_metadata(dst).is_ok_and(|d| d.is_dir()) {
        remove_any(dst)?;
    }
    let mut from = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(src)?;
    let mut name = dst.file_name().unwrap_or_default().to_os_string();
    name.push(".loop-kept-new");
    let tmp = dst.with_file_name(name);
    let _ = std::fs::remove_file(&tmp);
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    io::copy(&mut from, &mut to)?;
    to.set_permissions(std::fs::Permissions::from_mode(mode))?;
    drop(to);
    std::fs::rename(&tmp, dst)
}

fn remove_any(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn clear_dir(p: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(p)? {
        remove_any(&entry?.path())?;
    }
    Ok(())
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("a path with a NUL byte"))
}

/// A whiteout: a character device 0/0 (Linux lets anyone make one).
fn whiteout(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: mknod at a NUL-terminated path.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The opaque mark on `p`, if overlayfs set one.
fn opaque_mark(p: &Path) -> Option<&'static str> {
    let c = c_path(p).ok()?;
    OPAQUE.into_iter().find(|name| {
        let n = CString::new(*name).unwrap_or_default();
        let mut buf = [0u8; 4];
        // SAFETY: lgetxattr into a buffer of its stated size.
        let got =
            unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        got == 1 && buf[0] == b'y'
    })
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let (c, n) = (c_path(p)?, CString::new(name).map_err(io::Error::other)?);
    // SAFETY: lsetxattr with a buffer of its stated size.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
