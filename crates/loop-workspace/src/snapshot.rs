//! Sealed snapshots. At verification the workspace is sealed — copied out
//! of the model's reach and hashed — and every check gets its own fresh,
//! writable view of the sealed tree, so no check can create state for
//! another and nothing a check writes reaches the seal.
//!
//! Where the sandbox can mount overlays, sealing copies nothing: the
//! quiescent workspace itself is the read-only lower layer and each check
//! writes to its own upper layer ([`SnapshotMethod::Overlay`], O(1) in the
//! workspace's size); the seal's manifest proves afterwards that nothing
//! changed. Otherwise the workspace is copied once and each view is a copy
//! ([`SnapshotMethod::Copy`]). The method is recorded in the evidence.

use crate::fsutil::{copy_tree, make_read_only};
use crate::manifest::Manifest;
use std::path::{Path, PathBuf};

/// How a check's view was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMethod {
    /// A full copy of the sealed tree.
    Copy,
    /// A reflink clone of the sealed tree (extents shared, no data copied).
    Reflink,
    /// An overlay: the sealed tree as the read-only lower layer, a private upper layer.
    Overlay,
}

impl SnapshotMethod {
    /// The name recorded in evidence.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotMethod::Copy => "copy",
            SnapshotMethod::Reflink => "reflink",
            SnapshotMethod::Overlay => "overlay",
        }
    }
}

/// A sealed, hashed copy of a workspace.
#[derive(Debug)]
pub struct Sealed {
    dir: PathBuf,
    manifest: Manifest,
    /// Whether `dir` is a copy this seal owns (and may remove).
    copied: bool,
}

impl Sealed {
    /// Seal `workspace` into `dir` (which must not exist): copy, hash, and
    /// make every file read-only.
    #[allow(clippy::disallowed_methods)] // seals the runtime's own snapshot directories
    pub fn create(workspace: &Path, dir: &Path) -> std::io::Result<Sealed> {
        if dir.exists() {
            remove_tree(dir)?;
        }
        copy_tree(workspace, dir, &|_| false, false)?;
        make_read_only(dir)?;
        let manifest = Manifest::of(dir)?;
        Ok(Sealed {
            dir: dir.to_path_buf(),
            manifest,
            copied: true,
        })
    }

    /// Seal `workspace` where it is, without copying: record its manifest.
    /// The caller guarantees nothing writes to it while the seal is in use
    /// (views are overlays) and checks [`Sealed::is_intact`] afterwards.
    pub fn in_place(workspace: &Path) -> std::io::Result<Sealed> {
        Ok(Sealed {
            dir: workspace.to_path_buf(),
            manifest: Manifest::of(workspace)?,
            copied: false,
        })
    }

    /// Seal `workspace` in place with a manifest computed by the caller
    /// (for example concurrently with the first checks).
    pub fn in_place_with(workspace: &Path, manifest: Manifest) -> Sealed {
        Sealed {
            dir: workspace.to_path_buf(),
            manifest,
            copied: false,
        }
    }

    /// Remove the sealed copy, if this seal made one (never the workspace).
    pub fn discard(self) {
        if self.copied {
            let _ = remove_tree(&self.dir);
        }
    }

    /// Where the sealed tree is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its manifest at sealing time.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// A fresh, writable view of the sealed tree at `dest`.
    #[allow(clippy::disallowed_methods)] // seals the runtime's own snapshot directories
    pub fn fresh_view(&self, dest: &Path) -> std::io::Result<SnapshotMethod> {
        if dest.exists() {
            remove_tree(dest)?;
        }
        let stats = copy_tree(&self.dir, dest, &|_| false, true)?;
        Ok(if stats.files > 0 && stats.reflinked == stats.files {
            SnapshotMethod::Reflink
        } else {
            SnapshotMethod::Copy
        })
    }

    /// Whether the sealed tree still hashes to its manifest root.
    pub fn is_intact(&self) -> std::io::Result<bool> {
        Ok(Manifest::of(&self.dir)?.root == self.manifest.root)
    }
}

/// Remove a tree even where files or directories were made read-only.
#[allow(clippy::disallowed_methods)] // seals the runtime's own snapshot directories
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_writable(dir);
            std::fs::remove_dir_all(dir)
        }
    }
}

/// Make `dir` and every directory beneath it 0755 (so what a sealed or
/// read-only tree holds can be removed), through descriptors opened with
/// no link followed: a link swapped in for a directory meanwhile (a
/// command still running in the tree) is never followed out of it.
fn make_writable(dir: &Path) {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: open of a NUL-terminated path; the descriptor is owned below.
    let fd = unsafe { libc::open(path.as_ptr(), DIR_NO_LINK) };
    if fd >= 0 {
        // SAFETY: a descriptor just opened, owned here only.
        writable_beneath(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    }
}

/// Directories opened only as directories, never through a link.
const DIR_NO_LINK: libc::c_int =
    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// [`make_writable`] of the directory open as `dir`.
fn writable_beneath(dir: std::os::fd::OwnedFd) {
    use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
    // SAFETY: fchmod of a descriptor we hold.
    unsafe { libc::fchmod(dir.as_raw_fd(), 0o755) };
    // Its entries' names, read through a descriptor of its own.
    let mut names = Vec::new();
    if let Ok(listing) = dir.try_clone() {
        // SAFETY: fdopendir takes the descriptor; closedir releases both.
        unsafe {
            let fd = listing.into_raw_fd();
            let d = libc::fdopendir(fd);
            if d.is_null() {
                drop(std::os::fd::OwnedFd::from_raw_fd(fd));
            } else {
                loop {
                    let e = libc::readdir(d);
                    if e.is_null() {
                        break;
                    }
                    let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_owned();
                    if name.as_bytes() != b"." && name.as_bytes() != b".." {
                        names.push(name);
                    }
                }
                libc::closedir(d);
            }
        }
    }
    for name in names {
        // SAFETY: openat beneath a descriptor we hold, a NUL-terminated
        // name; what is not a directory (a link among them) is not opened.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), DIR_NO_LINK) };
        if fd >= 0 {
            // SAFETY: a descriptor just opened, owned here only.
            writable_beneath(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    /// Every directory of the tree is made 0755, and no link is followed:
    /// neither one inside it nor the tree's own path given as a link.
    #[test]
    fn making_a_tree_writable_never_follows_a_link_out_of_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = TestDir::new("writable");
        let tree = d.path().join("tree");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).unwrap();
        for p in ["a/b", "a"] {
            std::fs::set_permissions(tree.join(p), std::fs::Permissions::from_mode(0o500)).unwrap();
        }
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
        make_writable(&tree);
        assert_eq!(mode(&tree.join("a")), 0o755);
        assert_eq!(mode(&tree.join("a/b")), 0o755);
        assert_eq!(mode(&outside), 0o700, "a link inside was followed");
        let link = d.path().join("tree-link");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        make_writable(&link);
        assert_eq!(
            mode(&outside),
            0o700,
            "the tree's own path, a link, was followed"
        );
    }

    #[test]
    fn views_are_independent_and_never_reach_the_seal() {
        let d = TestDir::new("seal");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "sealed").unwrap();
        let sealed = Sealed::create(&ws, &d.path().join("sealed")).unwrap();
        // Later edits to the workspace do not reach the seal.
        std::fs::write(ws.join("a.txt"), "changed").unwrap();
        let v1 = d.path().join("v1");
        let v2 = d.path().join("v2");
        // A reflink where the filesystem clones extents, a copy elsewhere.
        assert!(matches!(
            sealed.fresh_view(&v1).unwrap(),
            SnapshotMethod::Copy | SnapshotMethod::Reflink
        ));
        sealed.fresh_view(&v2).unwrap();
        std::fs::write(v1.join("a.txt"), "check one wrote this").unwrap();
        std::fs::write(v1.join("state"), "made by check one").unwrap();
        assert_eq!(std::fs::read_to_string(v2.join("a.txt")).unwrap(), "sealed");
        assert!(!v2.join("state").exists());
        assert!(sealed.is_intact().unwrap());
        assert_eq!(
            std::fs::read_to_string(sealed.dir().join("a.txt")).unwrap(),
            "sealed"
        );
    }
}
