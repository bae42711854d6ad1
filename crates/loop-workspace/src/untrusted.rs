//! Reading what the model left in a workspace, from outside the sandbox.
//!
//! The runtime runs with the user's rights (or root). Every name, link and
//! file type in a task workspace was chosen by the model, so every runtime
//! read of workspace content (change sets, artifacts, apply) goes through
//! [`Tree`]: paths resolve *beneath* the root descriptor with no symlink
//! followed (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or a
//! component walk with `O_NOFOLLOW` where `openat2` is missing); a symlink
//! is reported as a symlink (its target string), never as the content it
//! points to; a FIFO, socket or device is refused without being opened for
//! reading (opens are non-blocking and checked with `fstat`).

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// What is at a path.
#[derive(Debug)]
pub enum Node {
    /// A regular file, opened for reading.
    File {
        /// The open file (no link was followed to reach it).
        file: File,
        /// Its size.
        size: u64,
        /// Its permission bits.
        mode: u32,
    },
    /// A symbolic link and its target, unresolved.
    Symlink(PathBuf),
    /// A directory.
    Dir,
    /// Nothing there.
    Missing,
    /// A FIFO, socket or device: never read.
    Special(&'static str),
}

/// Why a workspace path could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UntrustedError {
    /// The name itself is not acceptable.
    #[error("`{0}` is not a plain relative path inside the workspace")]
    BadPath(String),
    /// A directory on the way is a symlink (or leaves the root).
    #[error(
        "`{0}`: a directory on the way is a symlink; the runtime does not follow links in a workspace"
    )]
    LinkOnTheWay(String),
    /// Larger than allowed.
    #[error("`{path}` is {size} bytes, over the {max}-byte limit")]
    TooLarge {
        /// The path.
        path: String,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Not a regular file.
    #[error("`{path}` is {what}, not a regular file")]
    NotAFile {
        /// The path.
        path: String,
        /// What it is.
        what: &'static str,
    },
    /// Filesystem.
    #[error("`{path}`: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A directory tree whose content is untrusted, held by a descriptor.
#[derive(Debug)]
pub struct Tree {
    fd: OwnedFd,
    root: PathBuf,
}

fn cstr(s: &[u8]) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Split `rel` into checked components: no empty, `.` or `..` part, not absolute.
fn components(rel: &str) -> Result<Vec<&[u8]>, UntrustedError> {
    let bad = || UntrustedError::BadPath(rel.to_string());
    if rel.is_empty() || rel.starts_with('/') || rel.contains('\0') {
        return Err(bad());
    }
    let parts: Vec<&[u8]> = rel.as_bytes().split(|b| *b == b'/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == b"." || *p == b"..")
    {
        return Err(bad());
    }
    Ok(parts)
}

impl Tree {
    /// Hold `root` (which the runtime chose; it may itself be reached
    /// through links the user made).
    pub fn open(root: &Path) -> std::io::Result<Tree> {
        let c = cstr(root.as_os_str().as_bytes())?;
        // SAFETY: open on a NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(last_err());
        }
        Ok(Tree {
            // SAFETY: a fresh descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            root: root.to_path_buf(),
        })
    }

    /// The root's path (for messages).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Open the directory `parts` beneath the root, following no link.
    fn open_dir(&self, rel: &str, parts: &[&[u8]]) -> Result<OwnedFd, UntrustedError> {
        let io = |source| UntrustedError::Io {
            path: rel.to_string(),
            source,
        };
        if parts.is_empty() {
            return self.fd.try_clone().map_err(io);
        }
        let joined = parts.join(&b'/');
        let c = cstr(&joined).map_err(io)?;
        // SAFETY: `open_how` is plain data; all-zero is a valid value.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
        how.resolve =
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: openat2 with a valid dirfd, a NUL-terminated path and a
        // properly sized `open_how`.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor we own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = last_err();
        match e.raw_os_error() {
            Some(libc::ELOOP | libc::EXDEV | libc::ENOTDIR) => {
                Err(UntrustedError::LinkOnTheWay(rel.to_string()))
            }
            Some(libc::ENOSYS | libc::EPERM) => self.walk_dir(rel, parts),
            _ => Err(io(e)),
        }
    }

    /// [`Tree::open_dir`] without `openat2`: one component at a time.
    fn walk_dir(&self, rel: &str, parts: &[&[u8]]) -> Result<OwnedFd, UntrustedError> {
        let io = |source| UntrustedError::Io {
            path: rel.to_string(),
            source,
        };
        let mut cur = self.fd.try_clone().map_err(io)?;
        for p in parts {
            let c = cstr(p).map_err(io)?;
            // SAFETY: openat on a valid dirfd and NUL-terminated name.
            let fd = unsafe {
                libc::openat(
                    cur.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                let e = last_err();
                return match e.raw_os_error() {
                    Some(libc::ELOOP | libc::ENOTDIR) => {
                        Err(UntrustedError::LinkOnTheWay(rel.to_string()))
                    }
                    _ => Err(io(e)),
                };
            }
            // SAFETY: a fresh descriptor we own.
            cur = unsafe { OwnedFd::from_raw_fd(fd) };
        }
        Ok(cur)
    }

    /// A descriptor of the directory `rel` beneath the root (`""` for the
    /// root), no link followed; opened for listing.
    pub fn dir_fd(&self, rel: &str) -> Result<OwnedFd, UntrustedError> {
        let parts = if rel.is_empty() {
            Vec::new()
        } else {
            components(rel)?
        };
        let io = |source| UntrustedError::Io {
            path: rel.to_string(),
            source,
        };
        let at = self.open_dir(rel, &parts)?;
        // SAFETY: openat of "." on a directory descriptor we hold.
        let fd = unsafe {
            libc::openat(
                at.as_raw_fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io(last_err()));
        }
        // SAFETY: a fresh descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Make the directory `rel` (its parent must be there, reached with no
    /// link); one already there is an error.
    pub fn mkdir(&self, rel: &str) -> Result<(), UntrustedError> {
        let parts = components(rel)?;
        let (name, dirs) = parts
            .split_last()
            .ok_or_else(|| UntrustedError::BadPath(rel.into()))?;
        let io = |source| UntrustedError::Io {
            path: rel.to_string(),
            source,
        };
        let dir = self.open_dir(rel, dirs)?;
        let cname = cstr(name).map_err(io)?;
        // SAFETY: mkdirat on a directory descriptor we hold.
        if unsafe { libc::mkdirat(dir.as_raw_fd(), cname.as_ptr(), 0o755) } != 0 {
            return Err(io(last_err()));
        }
        Ok(())
    }

    /// What is at `rel` (a `/`-separated path relative to the root).
    pub fn node(&self, rel: &str) -> Result<Node, UntrustedError> {
        let parts = components(rel)?;
        let io = |source| UntrustedError::Io {
            path: rel.to_string(),
            source,
        };
        let (name, dirs) = parts
            .split_last()
            .ok_or_else(|| UntrustedError::BadPath(rel.into()))?;
        let dir = match self.open_dir(rel, dirs) {
            Ok(d) => d,
            Err(UntrustedError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(Node::Missing);
            }
            Err(e) => return Err(e),
        };
        let cname = cstr(name).map_err(io)?;
        // SAFETY: fstatat into a zeroed struct, no link followed.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                cname.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            let e = last_err();
            return if e.kind() == std::io::ErrorKind::NotFound {
                Ok(Node::Missing)
            } else {
                Err(io(e))
            };
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => {
                let mut buf = vec![0u8; 4096];
                // SAFETY: readlinkat into a buffer of the stated length.
                let n = unsafe {
                    libc::readlinkat(
                        dir.as_raw_fd(),
                        cname.as_ptr(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                };
                if n < 0 {
                    return Err(io(last_err()));
                }
                buf.truncate(n as usize);
                Ok(Node::Symlink(PathBuf::from(OsString::from_vec(buf))))
            }
            libc::S_IFDIR => Ok(Node::Dir),
            libc::S_IFREG => {
                // SAFETY: openat on a valid dirfd; O_NOFOLLOW refuses a link
                // swapped in since the stat, O_NONBLOCK a FIFO.
                let fd = unsafe {
                    libc::openat(
                        dir.as_raw_fd(),
                        cname.as_ptr(),
                        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(io(last_err()));
                }
                // SAFETY: a fresh descriptor we own.
                let file = unsafe { File::from_raw_fd(fd) };
                let meta = file.metadata().map_err(io)?;
                if !meta.is_file() {
                    return Ok(Node::Special("something that changed while it was read"));
                }
                use std::os::unix::fs::MetadataExt;
                Ok(Node::File {
                    size: meta.len(),
                    mode: meta.mode() & 0o7777,
                    file,
                })
            }
            libc::S_IFIFO => Ok(Node::Special("a FIFO")),
            libc::S_IFSOCK => Ok(Node::Special("a socket")),
            libc::S_IFCHR => Ok(Node::Special("a character device")),
            libc::S_IFBLK => Ok(Node::Special("a block device")),
            _ => Ok(Node::Special("of an unknown type")),
        }
    }

    /// The bytes of the regular file at `rel`, at most `max` of them.
    /// A symlink, directory or special file is refused, not followed.
    pub fn read_file(&self, rel: &str, max: u64) -> Result<Vec<u8>, UntrustedError> {
        match self.node(rel)? {
            Node::File { file, size, .. } => {
                if size > max {
                    return Err(UntrustedError::TooLarge {
                        path: rel.to_string(),
                        size,
                        max,
                    });
                }
                let mut out = Vec::with_capacity(size as usize);
                file.take(max + 1)
                    .read_to_end(&mut out)
                    .map_err(|source| UntrustedError::Io {
                        path: rel.to_string(),
                        source,
                    })?;
                if out.len() as u64 > max {
                    return Err(UntrustedError::TooLarge {
                        path: rel.to_string(),
                        size: out.len() as u64,
                        max,
                    });
                }
                Ok(out)
            }
            Node::Symlink(_) => Err(UntrustedError::NotAFile {
                path: rel.to_string(),
                what: "a symlink",
            }),
            Node::Dir => Err(UntrustedError::NotAFile {
                path: rel.to_string(),
                what: "a directory",
            }),
            Node::Missing => Err(UntrustedError::Io {
                path: rel.to_string(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
            Node::Special(what) => Err(UntrustedError::NotAFile {
                path: rel.to_string(),
                what,
            }),
        }
    }
}

/// Whether a symlink at `rel` with `target` stays inside its tree, resolved
/// the way the kernel would through the tree's other links (`link_of`
/// gives the target of a link at a path, if there is one). An absolute
/// target, a `..` above the root, or more than 40 hops is outside.
pub fn link_stays_inside(
    rel: &str,
    target: &Path,
    link_of: &dyn Fn(&str) -> Option<PathBuf>,
) -> bool {
    use std::collections::VecDeque;
    use std::path::Component;
    // Components still to walk: `None` is `..`.
    fn parts(p: &Path) -> Option<Vec<Option<OsString>>> {
        let mut out = Vec::new();
        for c in p.components() {
            match c {
                Component::ParentDir => out.push(None),
                Component::Normal(n) => out.push(Some(n.to_os_string())),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => return None,
            }
        }
        Some(out)
    }
    let mut cur: Vec<String> = rel.split('/').map(str::to_string).collect();
    cur.pop();
    let Some(first) = parts(target) else {
        return false;
    };
    let mut todo: VecDeque<Option<OsString>> = first.into();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match c {
            None => {
                if cur.pop().is_none() {
                    return false;
                }
            }
            Some(n) => {
                cur.push(n.to_string_lossy().into_owned());
                if let Some(next) = link_of(&cur.join("/")) {
                    hops += 1;
                    let Some(more) = parts(&next) else {
                        return false;
                    };
                    if hops > 40 {
                        return false;
                    }
                    cur.pop();
                    for m in more.into_iter().rev() {
                        todo.push_front(m);
                    }
                }
            }
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn links_are_reported_never_followed() {
        let d = TestDir::new("untrusted-links");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        let canary = d.path().join("canary");
        std::fs::write(&canary, "CANARY-31337").unwrap();
        std::os::unix::fs::symlink(&canary, ws.join("report.txt")).unwrap();
        std::os::unix::fs::symlink(d.path(), ws.join("up")).unwrap();
        std::fs::write(ws.join("sub/ok.txt"), "fine").unwrap();
        let t = Tree::open(&ws).unwrap();
        assert!(matches!(t.node("report.txt").unwrap(), Node::Symlink(p) if p == canary));
        let e = t.read_file("report.txt", 1 << 20).unwrap_err().to_string();
        assert!(e.contains("a symlink"), "{e}");
        // A link on the way is never walked through.
        let e = t.read_file("up/canary", 1 << 20).unwrap_err();
        assert!(matches!(e, UntrustedError::LinkOnTheWay(_)), "{e}");
        assert_eq!(t.read_file("sub/ok.txt", 1 << 20).unwrap(), b"fine");
        assert!(matches!(t.node("nothing/here").unwrap(), Node::Missing));
        for bad in ["../canary", "/etc/passwd", "sub/../../canary", "", "a//b"] {
            assert!(
                matches!(t.node(bad), Err(UntrustedError::BadPath(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = TestDir::new("untrusted-fifo");
        let c = CString::new(d.path().join("pipe").as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let t = Tree::open(d.path()).unwrap();
        let e = t.read_file("pipe", 100).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_refused() {
        let d = TestDir::new("untrusted-big");
        std::fs::write(d.path().join("big"), vec![b'x'; 100]).unwrap();
        let t = Tree::open(d.path()).unwrap();
        assert!(matches!(
            t.read_file("big", 99),
            Err(UntrustedError::TooLarge { size: 100, .. })
        ));
    }

    #[test]
    fn link_targets_are_resolved_through_the_trees_other_links() {
        let none = |_: &str| None;
        assert!(link_stays_inside("a/b", Path::new("../c"), &none));
        assert!(link_stays_inside("b", Path::new("sub/c"), &none));
        assert!(!link_stays_inside("b", Path::new("../c"), &none));
        assert!(!link_stays_inside("a/b", Path::new("../../c"), &none));
        assert!(!link_stays_inside("a", Path::new("/etc/shadow"), &none));
        assert!(!link_stays_inside("a/b", Path::new("x/../../../y"), &none));
        // `d/s -> ..` is inside, but `t -> d/s/..` climbs out through it.
        let links = |p: &str| (p == "d/s").then(|| PathBuf::from(".."));
        assert!(link_stays_inside("d/s", Path::new(".."), &links));
        assert!(!link_stays_inside("t", Path::new("d/s/.."), &links));
        assert!(link_stays_inside("t", Path::new("d/s/x"), &links));
        // A loop of links never resolves.
        let looped = |p: &str| match p {
            "a" => Some(PathBuf::from("b")),
            "b" => Some(PathBuf::from("a")),
            _ => None,
        };
        assert!(!link_stays_inside("x", Path::new("a"), &looped));
    }
}
