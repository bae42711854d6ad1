//! The one door for every file the runtime itself (not a sandboxed
//! command) reads from or writes into a project: patterns, guidance
//! (`AGENTS.md`, `LOOP.md`), the Loopfile, contracts and scripts named by
//! path, scripted-model files, setup layer keys, eval cases.
//!
//! A project is as untrusted as a task workspace: a cloned repository
//! chooses every name, link and file type in it, and the runtime runs with
//! the user's rights (or root). So a project path is resolved *beneath* the
//! project's descriptor with no link followed on the way or at the end
//! ([`Tree`]); a FIFO, socket or device is refused without being opened for
//! reading (so nothing blocks); sizes are bounded. A link where a project
//! file should be is refused with its name, never read through: a pattern's
//! `SKILL.md` linked to `/etc/shadow` or to the signing key sends nothing
//! anywhere.
//!
//! A path a person named on the command line ([`read_named`]) may be
//! reached through links the person made, but is still refused when it is
//! not a regular file, and bounded.
//!
//! `clippy.toml` bans the plain `std::fs` readers outside this crate and
//! the sandbox's internals; a reader elsewhere that reads only what the
//! runtime itself made says so in a one-line `#[allow]`.
#![allow(clippy::disallowed_methods)] // the door itself: these are its own opens, on descriptors it resolved

use crate::untrusted::{Node, Tree, UntrustedError};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

/// The bound on a project file the runtime reads unless a caller says
/// otherwise (a contract, a Loopfile, a pattern's skill): 4 MiB.
pub const MAX_PROJECT_FILE: u64 = 4 << 20;

/// `rel` as the `/`-separated relative path [`Tree`] takes.
fn rel_str(rel: &Path) -> Result<String, UntrustedError> {
    let bad = || UntrustedError::BadPath(rel.display().to_string());
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_str().ok_or_else(bad)?),
            Component::CurDir => {}
            _ => return Err(bad()),
        }
    }
    if parts.is_empty() {
        return Err(bad());
    }
    Ok(parts.join("/"))
}

/// Name a path in errors as the person knows it (under the project root).
fn named(root: &Path, e: UntrustedError) -> UntrustedError {
    match e {
        UntrustedError::Io { path, source } => UntrustedError::Io {
            path: root.join(path).display().to_string(),
            source,
        },
        UntrustedError::NotAFile { path, what } => UntrustedError::NotAFile {
            path: root.join(path).display().to_string(),
            what,
        },
        UntrustedError::TooLarge { path, size, max } => UntrustedError::TooLarge {
            path: root.join(path).display().to_string(),
            size,
            max,
        },
        UntrustedError::LinkOnTheWay(p) => {
            UntrustedError::LinkOnTheWay(root.join(p).display().to_string())
        }
        other => other,
    }
}

/// Why `node`, found at `rel` where a directory should be, is refused: a
/// link on the way, or not a directory.
fn not_a_dir(root: &Path, rel: &str, node: &Node) -> UntrustedError {
    let path = root.join(rel).display().to_string();
    match node {
        Node::Symlink(_) => UntrustedError::LinkOnTheWay(path),
        _ => UntrustedError::NotAFile {
            path,
            what: "not a directory",
        },
    }
}

/// The bytes of the regular file at `rel` beneath `root`, at most `max`;
/// `None` when nothing is there. A link (on the way or at the end), a
/// directory, a FIFO, socket or device is an error naming it.
pub fn read(
    root: &Path,
    rel: impl AsRef<Path>,
    max: u64,
) -> Result<Option<Vec<u8>>, UntrustedError> {
    let rel = rel_str(rel.as_ref())?;
    let tree = Tree::open(root).map_err(|source| UntrustedError::Io {
        path: root.display().to_string(),
        source,
    })?;
    match tree.node(&rel) {
        Ok(Node::Missing) => Ok(None),
        Ok(_) => tree
            .read_file(&rel, max)
            .map(Some)
            .map_err(|e| named(root, e)),
        Err(UntrustedError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(named(root, e)),
    }
}

/// [`read`] as UTF-8 text.
pub fn read_text(
    root: &Path,
    rel: impl AsRef<Path>,
    max: u64,
) -> Result<Option<String>, UntrustedError> {
    let rel = rel.as_ref();
    match read(root, rel, max)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| UntrustedError::NotAFile {
                path: root.join(rel).display().to_string(),
                what: "not UTF-8 text",
            }),
    }
}

/// What is at `rel` beneath `root`, no link followed.
pub fn node(root: &Path, rel: impl AsRef<Path>) -> Result<Node, UntrustedError> {
    let rel = rel_str(rel.as_ref())?;
    let tree = Tree::open(root).map_err(|source| UntrustedError::Io {
        path: root.display().to_string(),
        source,
    })?;
    match tree.node(&rel) {
        Err(UntrustedError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(Node::Missing)
        }
        other => other.map_err(|e| named(root, e)),
    }
}

/// Whether `rel` beneath `root` is a real directory (no link on the way
/// or at the end).
pub fn is_dir(root: &Path, rel: impl AsRef<Path>) -> bool {
    matches!(node(root, rel), Ok(Node::Dir))
}

/// Whether `rel` beneath `root` is a regular file (no link on the way or
/// at the end).
pub fn is_file(root: &Path, rel: impl AsRef<Path>) -> bool {
    matches!(node(root, rel), Ok(Node::File { .. }))
}

/// A file a person named (a command-line argument): links the person made
/// are followed, but it must be a regular file (a FIFO or device is
/// refused without blocking) of at most `max` bytes.
pub fn read_named(path: &Path, max: u64) -> Result<Vec<u8>, UntrustedError> {
    let io = |source| UntrustedError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        let what = if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(UntrustedError::NotAFile {
            path: path.display().to_string(),
            what,
        });
    }
    let too_large = |size| UntrustedError::TooLarge {
        path: path.display().to_string(),
        size,
        max,
    };
    if meta.len() > max {
        return Err(too_large(meta.len()));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out).map_err(io)?;
    if out.len() as u64 > max {
        return Err(too_large(out.len() as u64));
    }
    Ok(out)
}

/// [`read_named`] as UTF-8 text.
pub fn read_named_text(path: &Path, max: u64) -> Result<String, UntrustedError> {
    String::from_utf8(read_named(path, max)?).map_err(|_| UntrustedError::NotAFile {
        path: path.display().to_string(),
        what: "not UTF-8 text",
    })
}

/// Write `bytes` into the new file `f` and sync it: executable (0755)
/// whatever the umask if `executable`, else as the umask leaves 0644.
fn fill(f: &mut std::fs::File, bytes: &[u8], executable: bool) -> std::io::Result<()> {
    f.write_all(bytes)?;
    if executable {
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    }
    f.sync_all()
}

/// Write `bytes` to `rel` beneath `root`: its directories are made where
/// missing, but none on the way may be a link, and a link (or anything
/// not a regular file) at `rel` itself is refused, never written through.
/// The file is replaced whole (written beside it, then renamed over it).
pub fn write(root: &Path, rel: impl AsRef<Path>, bytes: &[u8]) -> Result<(), UntrustedError> {
    write_as(root, rel, bytes, false)
}

/// [`write`], the file made executable (mode 0755, whatever the umask)
/// when `executable`.
pub fn write_as(
    root: &Path,
    rel: impl AsRef<Path>,
    bytes: &[u8],
    executable: bool,
) -> Result<(), UntrustedError> {
    let rel = rel_str(rel.as_ref())?;
    let (dirs, name) = match rel.rsplit_once('/') {
        Some((d, n)) => (Some(d), n),
        None => (None, rel.as_str()),
    };
    let io = |source| UntrustedError::Io {
        path: root.join(&rel).display().to_string(),
        source,
    };
    let tree = Tree::open(root).map_err(io)?;
    // Make each missing directory, refusing a link where one should be.
    if let Some(dirs) = dirs {
        let mut acc = String::new();
        for part in dirs.split('/') {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            match tree.node(&acc).map_err(|e| named(root, e))? {
                Node::Dir => {}
                Node::Missing => match tree.mkdir(&acc) {
                    Ok(()) => {}
                    // Made by another writer meanwhile: fine if a directory.
                    Err(UntrustedError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists
                            && matches!(tree.node(&acc), Ok(Node::Dir)) => {}
                    Err(e) => return Err(named(root, e)),
                },
                other => return Err(not_a_dir(root, &acc, &other)),
            }
        }
    }
    match tree.node(&rel).map_err(|e| named(root, e))? {
        Node::Missing | Node::File { .. } => {}
        Node::Symlink(_) => {
            return Err(UntrustedError::NotAFile {
                path: root.join(&rel).display().to_string(),
                what: "a symlink (the runtime does not write through links in a project)",
            });
        }
        Node::Dir => {
            return Err(UntrustedError::NotAFile {
                path: root.join(&rel).display().to_string(),
                what: "a directory",
            });
        }
        Node::Special(what) => {
            return Err(UntrustedError::NotAFile {
                path: root.join(&rel).display().to_string(),
                what,
            });
        }
    }
    let dir = tree
        .dir_fd(dirs.unwrap_or(""))
        .map_err(|e| named(root, e))?;
    // A name of this write's own: writers in other threads or processes
    // never share one.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = format!(
        ".{name}.loop-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let ctmp = CString::new(tmp.as_bytes()).map_err(|_| UntrustedError::BadPath(rel.clone()))?;
    let cname = CString::new(name.as_bytes()).map_err(|_| UntrustedError::BadPath(rel.clone()))?;
    // SAFETY: openat on a directory descriptor we hold, a NUL-terminated
    // name; O_EXCL|O_NOFOLLOW never opens something already there.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            ctmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor we own.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let unlink = || {
        // SAFETY: unlinkat of the name we just made, in the same directory.
        unsafe { libc::unlinkat(dir.as_raw_fd(), ctmp.as_ptr(), 0) };
    };
    if let Err(e) = fill(&mut f, bytes, executable) {
        unlink();
        return Err(io(e));
    }
    // SAFETY: renameat within one directory we hold.
    let r = unsafe {
        libc::renameat(
            dir.as_raw_fd(),
            ctmp.as_ptr(),
            dir.as_raw_fd(),
            cname.as_ptr(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        unlink();
        return Err(io(e));
    }
    Ok(())
}

/// The plain names in the directory `rel` beneath `root` (`None` for the
/// root itself), sorted; no link followed to reach it. Missing: empty. A
/// name that is not UTF-8 is left out.
pub fn list(root: &Path, rel: Option<&Path>) -> Result<Vec<String>, UntrustedError> {
    listing(root, rel, false)
}

/// [`list`], where a name that is not UTF-8 is an error naming it (for a
/// listing that must be whole: what is signed or verified).
pub fn list_all(root: &Path, rel: Option<&Path>) -> Result<Vec<String>, UntrustedError> {
    listing(root, rel, true)
}

fn listing(root: &Path, rel: Option<&Path>, whole: bool) -> Result<Vec<String>, UntrustedError> {
    let tree = Tree::open(root).map_err(|source| UntrustedError::Io {
        path: root.display().to_string(),
        source,
    })?;
    let rel = match rel {
        Some(r) => {
            let r = rel_str(r)?;
            match tree.node(&r).map_err(|e| named(root, e))? {
                Node::Dir => r,
                Node::Missing => return Ok(Vec::new()),
                other => return Err(not_a_dir(root, &r, &other)),
            }
        }
        None => String::new(),
    };
    let dir = tree.dir_fd(&rel).map_err(|e| named(root, e))?;
    let io = |source| UntrustedError::Io {
        path: root.join(&rel).display().to_string(),
        source,
    };
    // Listed through the descriptor held (no path looked up again).
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())).map_err(io)? {
        let name = e.map_err(io)?.file_name();
        match name.to_str() {
            Some(n) => out.push(n.to_string()),
            None if whole => {
                return Err(UntrustedError::BadPath(format!(
                    "{}: a name that is not UTF-8 ({})",
                    root.join(&rel).display(),
                    name.to_string_lossy()
                )));
            }
            None => {}
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn host_secret(d: &TestDir) -> std::path::PathBuf {
        let outside = d.path().join("host");
        std::fs::create_dir_all(&outside).unwrap();
        let secret = outside.join("secret");
        std::fs::write(&secret, "HOST-MARKER").unwrap();
        secret
    }

    #[test]
    fn a_link_anywhere_on_the_path_is_refused_and_nothing_of_its_target_read() {
        let d = TestDir::new("door-links");
        let secret = host_secret(&d);
        let p = d.path().join("project");
        std::fs::create_dir_all(p.join("loop-patterns/x")).unwrap();
        std::os::unix::fs::symlink(&secret, p.join("loop-patterns/x/SKILL.md")).unwrap();
        std::os::unix::fs::symlink(secret.parent().unwrap(), p.join("loop-patterns/y")).unwrap();
        std::os::unix::fs::symlink("../../host/secret", p.join("AGENTS.md")).unwrap();
        for rel in [
            "loop-patterns/x/SKILL.md",
            "loop-patterns/y/secret",
            "AGENTS.md",
        ] {
            let e = read(&p, rel, MAX_PROJECT_FILE).unwrap_err();
            let text = e.to_string();
            assert!(!text.contains("HOST-MARKER"), "{text}");
            assert!(
                matches!(
                    e,
                    UntrustedError::NotAFile {
                        what: "a symlink",
                        ..
                    } | UntrustedError::LinkOnTheWay(_)
                ),
                "{rel}: {e:?}"
            );
            assert!(
                text.contains(rel),
                "{rel}: the message names the path: {text}"
            );
        }
        assert!(!is_file(&p, "AGENTS.md"));
        assert!(!is_dir(&p, "loop-patterns/y"));
        assert!(list(&p, Some(Path::new("loop-patterns/y"))).is_err());
        // The honest version: real files and directories read as they are.
        std::fs::write(p.join("loop-patterns/x/contract.yaml"), "instruction: x\n").unwrap();
        assert_eq!(
            read_text(&p, "loop-patterns/x/contract.yaml", 100)
                .unwrap()
                .as_deref(),
            Some("instruction: x\n")
        );
        assert_eq!(read(&p, "nothing/here", 100).unwrap(), None);
        assert_eq!(
            list(&p, Some(Path::new("loop-patterns"))).unwrap(),
            vec!["x", "y"]
        );
        assert!(is_dir(&p, "loop-patterns/x"));
        // Names that leave the root are refused before any lookup.
        for bad in ["../host/secret", "/etc/passwd", ""] {
            assert!(
                matches!(read(&p, bad, 100), Err(UntrustedError::BadPath(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_fifo_or_an_oversized_file_is_refused_without_blocking() {
        let d = TestDir::new("door-fifo");
        let p = d.path().to_path_buf();
        let fifo = p.join("Loopfile.yaml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let started = std::time::Instant::now();
        let e = read(&p, "Loopfile.yaml", 100).unwrap_err();
        assert!(
            matches!(e, UntrustedError::NotAFile { what: "a FIFO", .. }),
            "{e:?}"
        );
        let e = read_named(&fifo, 100).unwrap_err();
        assert!(
            matches!(e, UntrustedError::NotAFile { what: "a FIFO", .. }),
            "{e:?}"
        );
        assert!(read_named(Path::new("/dev/zero"), 100).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        std::fs::write(p.join("big"), vec![b'a'; 101]).unwrap();
        assert!(matches!(
            read(&p, "big", 100),
            Err(UntrustedError::TooLarge { size: 101, .. })
        ));
        assert!(matches!(
            read_named(&p.join("big"), 100),
            Err(UntrustedError::TooLarge { .. })
        ));
        assert_eq!(read_named(&p.join("big"), 101).unwrap().len(), 101);
    }

    #[test]
    fn a_write_never_goes_through_a_link_and_makes_its_directories() {
        let d = TestDir::new("door-write");
        let secret = host_secret(&d);
        let p = d.path().join("project");
        std::fs::create_dir_all(&p).unwrap();
        std::os::unix::fs::symlink(&secret, p.join("Loopfile.yaml")).unwrap();
        std::os::unix::fs::symlink(secret.parent().unwrap(), p.join("loop-patterns")).unwrap();
        assert!(write(&p, "Loopfile.yaml", b"x").is_err());
        assert!(write(&p, "loop-patterns/x/SKILL.md", b"x").is_err());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "HOST-MARKER");
        assert!(!secret.parent().unwrap().join("x").exists());
        // Honest: new directories and files, and a file replaced whole.
        write(&p, "a/b/c.txt", b"one").unwrap();
        write(&p, "a/b/c.txt", b"two").unwrap();
        assert_eq!(std::fs::read_to_string(p.join("a/b/c.txt")).unwrap(), "two");
        // Writers racing on one file each replace it whole.
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || write(&p, "race.txt", format!("{i}").as_bytes()))
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(p.join("race.txt")).unwrap().len(),
            1
        );
        assert_eq!(list(&p, Some(Path::new("a/b"))).unwrap(), vec!["c.txt"]);
    }
}
