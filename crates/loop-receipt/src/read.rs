//! How `loop verify` and `loop replay` read what they are given: a
//! receipt, its ledger, its patch and its artifacts may have been handed
//! over by anyone, so none is read through a link, and none that is not a
//! regular file is opened for reading (a FIFO would block the verifier
//! forever; a device could be endless). Sizes are bounded.
#![allow(clippy::disallowed_methods)] // the receipts' door itself: regular files only, no link, no FIFO, bounded

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

/// The largest receipt, ledger or artifact read (1 GiB).
pub const MAX_READ: u64 = 1 << 30;

/// Open `path` for reading if it is a regular file reached through no
/// link at its last component (non-blocking, so a FIFO never blocks the
/// open; checked with `fstat` on what was opened).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::other(
                "a symbolic link: receipts, ledgers and artifacts are read through no link",
            ),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let ft = meta.file_type();
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(std::io::Error::other(format!(
            "{what}: only a regular file is read"
        )));
    }
    Ok(file)
}

/// Read the regular file at `path` (see [`open_regular`]), at most `max` bytes.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let size = file.metadata()?.len();
    if size > max {
        return Err(std::io::Error::other(format!(
            "{size} bytes, over the {max}-byte limit"
        )));
    }
    let mut out = Vec::with_capacity(size as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::other(format!("over the {max}-byte limit")));
    }
    Ok(out)
}

/// The first directory on the way from `dir` to `dir/rel` that is a link
/// (or is not a directory), if any: an artifact reached through one is not
/// the one in the directory given.
pub fn link_on_the_way(dir: &Path, rel: &Path) -> Option<String> {
    let mut at = dir.to_path_buf();
    let parts: Vec<Component<'_>> = rel.components().collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Some(format!("{} is a symbolic link", at.display()));
            }
            Ok(m) if !m.is_dir() => return Some(format!("{} is not a directory", at.display())),
            _ => {}
        }
    }
    None
}
