//! Filesystem primitives: atomic writes and tree copies.

use crate::jail::to_slash;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Write `bytes` to `path` atomically: a temporary file in the same
/// directory, fsync, rename over the target, fsync the directory. A crash
/// leaves either the old content or the new, never a mix.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, bytes, true)
}

/// [`write_atomic`]; without `sync`, nothing is synced: a kill never
/// leaves a mix (the rename is atomic), but the machine going down may
/// lose the write, for callers whose durability is elsewhere (a task's
/// workspace, whose state the store keeps).
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
pub fn write_atomic_with(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let (dir, tmp) = temp_beside(path)?;
    let dir = dir.as_path();
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode())
        .unwrap_or(0o644);
    let result = (|| {
        // Whatever sits at the temporary name (a planted link) is removed,
        // and the file is created new: nothing is written through a link.
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        if sync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if sync {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The directory of `path` (created) and the temporary name beside it
/// that an atomic replacement of `path` goes through.
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
pub(crate) fn temp_beside(
    path: &Path,
) -> std::io::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.loop-tmp-{}", std::process::id()));
    Ok((dir.to_path_buf(), tmp))
}

/// Remove the temporary files [`write_atomic`] leaves when a process dies
/// between writing and renaming (`.NAME.loop-tmp-PID`), under `root`
/// (`.git` skipped). Returns how many went.
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
pub fn remove_stray_temporaries(root: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if name != ".git" {
                    dirs.push(entry.path());
                }
            } else if kind.is_file() && name.starts_with('.') && name.contains(".loop-tmp-") {
                std::fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Files copied.
    pub files: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Files cloned by reflink (sharing extents; no data copied).
    pub reflinked: u64,
    /// Top-level paths skipped by the filter.
    pub skipped: Vec<String>,
}

/// Copy the tree at `src` into `dst` (created), keeping symlinks as
/// symlinks and file modes (plus `writable` owner-write when asked).
/// `skip` sees `/`-separated relative paths; a skipped directory is not entered.
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    skip: &dyn Fn(&str) -> bool,
    writable: bool,
) -> std::io::Result<CopyStats> {
    let mut stats = CopyStats::default();
    std::fs::create_dir_all(dst)?;
    copy_dir(src, src, dst, skip, writable, &mut stats)?;
    Ok(stats)
}

#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
fn copy_dir(
    root: &Path,
    dir: &Path,
    dst_root: &Path,
    skip: &dyn Fn(&str) -> bool,
    writable: bool,
    stats: &mut CopyStats,
) -> std::io::Result<()> {
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let path = item.path();
        let rel = to_slash(path.strip_prefix(root).unwrap_or(&path));
        if skip(&rel) {
            stats.skipped.push(rel);
            continue;
        }
        let target = dst_root.join(&rel);
        let meta = std::fs::symlink_metadata(&path)?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&path)?, &target)?;
        } else if ft.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dir(root, &path, dst_root, skip, writable, stats)?;
        } else if ft.is_file() {
            if reflink(&path, &target) {
                stats.reflinked += 1;
            } else {
                std::fs::copy(&path, &target)?;
            }
            let mut mode = meta.permissions().mode();
            if writable {
                mode |= 0o200;
            }
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
            stats.files += 1;
            stats.bytes += meta.len();
        }
        // Sockets, FIFOs and devices are not workspace content.
    }
    Ok(())
}

/// Give every file and directory under `dst` (a copy of `src` by
/// [`copy_tree`]) the modification time of its original in `src`, so
/// that tools judging by times (make, Cargo, CMake) see the copy as the
/// original. Links are left as they are; what `dst` lacks is skipped.
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links never followed
pub fn copy_times(src: &Path, dst: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    for item in std::fs::read_dir(src)? {
        let item = item?;
        let meta = std::fs::symlink_metadata(item.path())?;
        let to = dst.join(item.file_name());
        // What the copy left out (a skipped directory) is not walked.
        if std::fs::symlink_metadata(&to).is_err() {
            continue;
        }
        if meta.is_dir() {
            copy_times(&item.path(), &to)?;
        } else if !meta.is_file() {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&to)
        else {
            continue;
        };
        file.set_times(std::fs::FileTimes::new().set_modified(meta.modified()?))?;
    }
    Ok(())
}

/// Set to now the modification time of every file under `dir` (links and
/// `.git` at its top left out) whose status changed after `since` (its
/// ctime: any write, any `touch`, any rename or chmod sets it, and no
/// process can set it back). Build tools judge by modification times, and
/// a task may set those to anything: a file it changed but dated back
/// would otherwise be taken as built by an older output. The number of
/// files set, or the first path that could not be.
#[allow(clippy::disallowed_methods)] // the task's quiescent workspace, walked with links as links; only times are set
pub fn refresh_times(
    dir: &Path,
    since: std::time::SystemTime,
) -> Result<usize, std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let since = since
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (secs, nanos) = (since.as_secs() as i64, i64::from(since.subsec_nanos()));
    let mut set = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let items = std::fs::read_dir(&at).map_err(|_| at.clone())?;
        for item in items {
            let item = item.map_err(|_| at.clone())?;
            let path = item.path();
            if at == dir && item.file_name() == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).map_err(|_| path.clone())?;
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            if !meta.is_file() || (meta.ctime(), meta.ctime_nsec()) <= (secs, nanos) {
                continue;
            }
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
                .map_err(|_| path.clone())?;
            let now = [
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
            ];
            // SAFETY: a NUL-terminated path and two timespecs we own.
            let r = unsafe {
                libc::utimensat(
                    libc::AT_FDCWD,
                    c.as_ptr(),
                    now.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            if r != 0 {
                return Err(path);
            }
            set += 1;
        }
    }
    Ok(set)
}

/// Clone `src` to a new `dst` sharing its extents (btrfs, XFS, …); false
/// when the filesystem cannot, leaving no `dst` behind.
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
fn reflink(src: &Path, dst: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(from) = std::fs::File::open(src) else {
        return false;
    };
    let Ok(to) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)
    else {
        return false;
    };
    // SAFETY: FICLONE between two descriptors we own.
    let ok = unsafe { libc::ioctl(to.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) } == 0;
    drop(to);
    if !ok {
        let _ = std::fs::remove_file(dst);
    }
    ok
}

/// Remove the owner-write bit from every regular file under `dir`.
#[allow(clippy::disallowed_methods)] // the door's sibling for copies: symlink_metadata first, links copied as links, never followed
pub fn make_read_only(dir: &Path) -> std::io::Result<()> {
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let meta = std::fs::symlink_metadata(item.path())?;
        if meta.is_dir() {
            make_read_only(&item.path())?;
        } else if meta.is_file() {
            let mode = meta.permissions().mode() & !0o222;
            std::fs::set_permissions(item.path(), std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn atomic_write_replaces_content_and_keeps_mode() {
        let d = TestDir::new("atomic");
        let p = d.path().join("x/y.txt");
        write_atomic(&p, b"one").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let leftovers: Vec<_> = std::fs::read_dir(d.path().join("x")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn copy_keeps_symlinks_and_skips() {
        let d = TestDir::new("copy");
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join("keep")).unwrap();
        std::fs::create_dir_all(src.join("skipme")).unwrap();
        std::fs::write(src.join("keep/a"), "a").unwrap();
        std::fs::write(src.join("skipme/b"), "b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
        let stats = copy_tree(&src, &d.path().join("dst"), &|p| p == "skipme", false).unwrap();
        assert_eq!(stats.files, 1);
        assert_eq!(stats.skipped, vec!["skipme".to_string()]);
        let link = std::fs::read_link(d.path().join("dst/link")).unwrap();
        assert_eq!(link, Path::new("/etc/passwd"));
        assert!(!d.path().join("dst/skipme").exists());
    }

    fn mtime(p: &Path) -> std::time::SystemTime {
        std::fs::metadata(p).unwrap().modified().unwrap()
    }

    /// A file changed after the stamp and dated back is dated now; one
    /// left alone keeps its time, and so does `.git` at the top.
    #[test]
    fn a_file_changed_and_dated_back_is_dated_now() {
        let d = TestDir::new("refresh-times");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/kept.c"), "int kept(void) { return 1; }\n").unwrap();
        std::fs::write(ws.join("src/left.c"), "int left(void) { return 1; }\n").unwrap();
        std::fs::write(ws.join(".git"), "gitdir: elsewhere\n").unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(978_307_200);
        for f in ["src/kept.c", "src/left.c", ".git"] {
            let file = std::fs::File::options()
                .write(true)
                .open(ws.join(f))
                .unwrap();
            file.set_times(std::fs::FileTimes::new().set_modified(old))
                .unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let stamp = std::time::SystemTime::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The task: a change, then the old time again.
        std::fs::write(ws.join("src/kept.c"), "int kept(void) { return 0; }\n").unwrap();
        let file = std::fs::File::options()
            .write(true)
            .open(ws.join("src/kept.c"))
            .unwrap();
        file.set_times(std::fs::FileTimes::new().set_modified(old))
            .unwrap();
        drop(file);
        assert_eq!(mtime(&ws.join("src/kept.c")), old);
        assert_eq!(refresh_times(&ws, stamp).unwrap(), 1);
        assert!(mtime(&ws.join("src/kept.c")) >= stamp, "dated now");
        assert_eq!(mtime(&ws.join("src/left.c")), old, "left alone");
        assert_eq!(mtime(&ws.join(".git")), old);
    }
}
