//! Where task workspaces live: outside the project, so no tool walking the
//! project (a test runner that ignores `.gitignore`, a formatter, an
//! indexer) ever finds a task's copy of it.
//!
//! `ROOT/NAME-KEY/ID/` is task `ID`'s "near" directory: its workspace
//! (`workspace/`) and everything shaped like one that the runtime keeps
//! beside it (check views, journals, command staging, layers). `ROOT` is
//! `LOOP_WORKSPACES_DIR`, or the sibling of the runtime's state directory
//! (`~/.local/state/loop-engine-workspaces`; the state directory itself
//! holds the signing key and is hidden from every command); `KEY` is the
//! first 12 hex digits of the SHA-256 of the project's canonical path, and
//! `NAME` the project directory's name, cut to a safe form.
//!
//! Every directory of the chain is the user's own: the root and the
//! project's directory are mode 0700, every ancestor belongs to the user or
//! to root and is not writable by others (unless sticky), so nobody else
//! can swap a link into a path the runtime later removes. Tasks made before
//! workspaces moved keep theirs in `.loop/tasks/ID/workspace`.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::Error;

/// The file in a project's directory naming the project it was made for
/// (information for a moved project, and for a person).
const MARKER: &str = "project";

/// The root every project's task workspaces are under.
pub fn root() -> Result<PathBuf, Error> {
    let root = match std::env::var_os("LOOP_WORKSPACES_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let state = loop_receipt::keys::state_dir();
            let name = state
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "loop-engine".into());
            state.with_file_name(format!("{name}-workspaces"))
        }
    };
    if !root.is_absolute() {
        return Err(Error::usage(format!(
            "LOOP_WORKSPACES_DIR must be an absolute path, not `{}`",
            root.display()
        )));
    }
    Ok(root)
}

/// `NAME-KEY` of `project` (canonical).
pub fn key(project: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let hash = loop_protocol::hash::sha256_hex(project.as_os_str().as_bytes());
    let name: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let name = name.trim_start_matches('.');
    let name = if name.is_empty() { "project" } else { name };
    format!("{name}-{}", &hash[..12])
}

/// Whether `k` has the shape of a key.
fn is_key(k: &str) -> bool {
    k.rsplit_once('-').is_some_and(|(name, hash)| {
        !name.is_empty()
            && name.len() <= 32
            && hash.len() == 12
            && hash.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Refuse a directory others could change under the runtime: one that
/// belongs to another user (not root), or that others may write to
/// without the sticky bit.
fn trusted_ancestor(p: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
    let me = euid();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(Error::usage(format!(
            "{} belongs to user {}, not to this user ({me}): task workspaces are not made under it (set LOOP_WORKSPACES_DIR to a directory of your own)",
            p.display(),
            meta.uid()
        )));
    }
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(Error::usage(format!(
            "{} may be written by others (mode {:o}): task workspaces are not made under it (set LOOP_WORKSPACES_DIR to a directory of your own)",
            p.display(),
            mode & 0o7777
        )));
    }
    Ok(())
}

/// `dir` exists as a directory of this user with mode 0700: made so when
/// missing, refused when it is a link, another's, or open to others.
#[allow(clippy::disallowed_methods)] // the runtime's own workspace directories, checked here
fn own_dir(dir: &Path) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::internal(format!("{}: {e}", dir.display()));
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io)?;
    if !meta.is_dir() {
        return Err(Error::usage(format!(
            "{} is not a directory (a link?): task workspaces are not made there",
            dir.display()
        )));
    }
    if meta.uid() != euid() {
        return Err(Error::usage(format!(
            "{} belongs to user {}, not to this user: task workspaces are not made there",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

/// The root, made safely: every existing ancestor trusted, every missing
/// one made by this user. Its canonical path.
#[allow(clippy::disallowed_methods)] // ancestors of the workspace root: checked, made 0700
fn made_root(project: &Path) -> Result<PathBuf, Error> {
    let root = root()?;
    // The longest part that exists, canonical (a home under a link is fine
    // when every directory on the way is trusted).
    let mut existing = root.clone();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
            break;
        };
        missing.push(name);
        existing.pop();
    }
    let existing = existing
        .canonicalize()
        .map_err(|e| Error::internal(format!("{}: {e}", existing.display())))?;
    let mut at = PathBuf::from("/");
    for c in existing.components().skip(1) {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at)
            .map_err(|e| Error::internal(format!("{}: {e}", at.display())))?;
        if at != existing || !missing.is_empty() {
            trusted_ancestor(&at, &meta)?;
        }
    }
    let mut root = existing;
    while let Some(name) = missing.pop() {
        root.push(name);
        if missing.is_empty() {
            break;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::internal(format!("{}: {e}", root.display()))),
        }
        let meta = std::fs::symlink_metadata(&root)
            .map_err(|e| Error::internal(format!("{}: {e}", root.display())))?;
        if !meta.is_dir() {
            return Err(Error::usage(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        trusted_ancestor(&root, &meta)?;
    }
    own_dir(&root)?;
    if root.starts_with(project) {
        return Err(Error::usage(format!(
            "the task workspaces' directory {} is inside the project: set LOOP_WORKSPACES_DIR outside it",
            root.display()
        )));
    }
    if project.starts_with(&root) {
        return Err(Error::usage(format!(
            "the project {} is inside the task workspaces' directory {}: set LOOP_WORKSPACES_DIR elsewhere",
            project.display(),
            root.display()
        )));
    }
    Ok(root)
}

/// Make task `id`'s near directory for `project` (canonical), empty and
/// new: `ROOT/NAME-KEY/ID`.
#[allow(clippy::disallowed_methods)] // the runtime's own workspace directories, checked
pub(crate) fn make_near(project: &Path, id: &str) -> Result<PathBuf, Error> {
    if !crate::project::ids::is_task_id(id) {
        return Err(Error::internal(format!("`{id}` is not a task id")));
    }
    near_in(&made_root(project)?.join(key(project)), project, id)
}

/// [`make_near`] in the project's directory `dir` under the root.
#[allow(clippy::disallowed_methods)] // the runtime's own workspace directories, checked
fn near_in(dir: &Path, project: &Path, id: &str) -> Result<PathBuf, Error> {
    let dir = dir.to_path_buf();
    let marker = dir.join(MARKER);
    let near = dir.join(id);
    // Another task of the project ending at this moment may remove the
    // project's directory it found empty (`remove_near`): made again then.
    let mut attempts = 0;
    loop {
        attempts += 1;
        if let Err(e) = own_dir(&dir) {
            if attempts < 5 && std::fs::symlink_metadata(&dir).is_err() {
                continue;
            }
            return Err(e);
        }
        let made = (|| {
            if std::fs::symlink_metadata(&marker).is_err() {
                use std::os::unix::ffi::OsStrExt;
                let mut bytes = project.as_os_str().as_bytes().to_vec();
                bytes.push(b'\n');
                // Written beside under a name of its own and renamed into
                // place: another task of the project writing it at the
                // same time writes the same.
                let name = loop_sandbox::unique_name(".marker").map_err(|e| (marker.clone(), e))?;
                let aside = dir.join(name);
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&aside)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
                    .and_then(|()| std::fs::rename(&aside, &marker));
                if let Err(e) = written {
                    let _ = std::fs::remove_file(&aside);
                    return Err((marker.clone(), e));
                }
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&near)
                .map_err(|e| (near.clone(), e))
        })();
        match made {
            Ok(()) => return Ok(near),
            Err((_, e)) if e.kind() == std::io::ErrorKind::NotFound && attempts < 5 => continue,
            Err((at, e)) => return Err(Error::internal(format!("{}: {e}", at.display()))),
        }
    }
}

/// Task `id`'s near directory as this environment derives it (it may not
/// exist). `None` when no root can be named.
pub(crate) fn derived_near(project: &Path, id: &str) -> Option<PathBuf> {
    let root = root().ok()?;
    let root = root.canonicalize().unwrap_or(root);
    Some(root.join(key(project)).join(id))
}

/// Whether `near` is a near directory this user made: a directory of its
/// own, mode 0700, in a project directory of its own, mode 0700.
#[allow(clippy::disallowed_methods)] // lstat only
fn owned(near: &Path) -> bool {
    let mine = |p: &Path| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == euid() && m.mode() & 0o077 == 0)
    };
    mine(near) && near.parent().is_some_and(mine)
}

/// Classify the workspace path a task's record names: `Ok(None)` for the
/// old place in the project, `Ok(Some(near))` for a place with the shape
/// of a near directory of task `id` (`…/NAME-KEY/ID/workspace`), an error
/// naming the difference otherwise.
pub(crate) fn classify(saved: &Path, id: &str) -> Result<Option<PathBuf>, Error> {
    if saved.ends_with(Path::new(".loop/tasks").join(id).join("workspace")) {
        return Ok(None);
    }
    let shaped = saved.is_absolute()
        && saved.file_name().is_some_and(|n| n == "workspace")
        && saved
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == id)
        && saved
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .is_some_and(is_key)
        && saved.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
    match saved.parent() {
        Some(near) if shaped => Ok(Some(near.to_path_buf())),
        _ => Err(Error::usage(format!(
            "it names the workspace {}",
            saved.display()
        ))),
    }
}

/// Where task `id` of `project` keeps its workspace: the old place when
/// it is there (`task_dir`), else the near directory this environment
/// derives, else the one its record names when that is one of this
/// user's for this project (a server and a shell with different homes),
/// or for this project before it was moved (its recorded project is gone);
/// else the derived one (the workspace is gone).
#[allow(clippy::disallowed_methods)] // lstat and the runtime's own records
pub(crate) fn near_of(project: &Path, task_dir: &Path, id: &str) -> PathBuf {
    if std::fs::symlink_metadata(task_dir.join("workspace")).is_ok_and(|m| m.is_dir()) {
        return task_dir.to_path_buf();
    }
    let derived = derived_near(project, id);
    if let Some(d) = derived.as_ref().filter(|d| d.is_dir()) {
        return d.clone();
    }
    let recorded = std::fs::read(task_dir.join("workspace.json"))
        .ok()
        .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("path").and_then(|p| p.as_str()).map(PathBuf::from))
        .and_then(|p| classify(&p, id).ok().flatten());
    if let Some(near) = recorded.filter(|n| owned(n)) {
        let their_key = near
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned());
        if their_key.as_deref() == Some(key(project).as_str()) {
            return near;
        }
        // Made for a path where no project is any more: this one, moved.
        let was = near
            .parent()
            .map(|d| d.join(MARKER))
            .and_then(|m| std::fs::read_to_string(m).ok())
            .map(|s| PathBuf::from(s.trim_end_matches('\n')));
        if was.is_some_and(|w| w.is_absolute() && w != project && !w.join(".loop").is_dir()) {
            return near;
        }
    }
    derived.unwrap_or_else(|| task_dir.to_path_buf())
}

/// The near directories of `project`'s tasks under this environment's root
/// whose task is gone from the project (`.loop/tasks/ID` removed): what
/// `loop gc` removes.
#[allow(clippy::disallowed_methods)] // listing the runtime's own workspace directories
pub(crate) fn orphans(project: &Path) -> Vec<PathBuf> {
    let Ok(root) = root() else {
        return Vec::new();
    };
    let dir = root.join(key(project));
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == euid()) {
        return Vec::new();
    }
    let tasks = project.join(".loop").join("tasks");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            crate::project::ids::is_task_id(&name)
                && e.file_type().is_ok_and(|t| t.is_dir())
                && std::fs::symlink_metadata(tasks.join(&name)).is_err()
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The project directories under this environment's root whose project is
/// no longer where it was (its marker names a path that holds no `.loop`
/// now): each with that path. A directory is counted only when it is this
/// user's own (mode 0700), its name has a key's shape, and its marker is
/// one absolute path whose key is that name: anything else there is left
/// alone. A project moved elsewhere is not told apart from one deleted:
/// its tasks' records still name these directories, so nothing here
/// removes one unless asked for it by the path it was made for.
pub(crate) fn gone_projects() -> Vec<(PathBuf, PathBuf)> {
    root().map(|r| gone_projects_in(&r)).unwrap_or_default()
}

/// [`gone_projects`] under `root`.
#[allow(clippy::disallowed_methods)] // the runtime's own workspace directories; lstat of the named paths
fn gone_projects_in(root: &Path) -> Vec<(PathBuf, PathBuf)> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mine = |p: &Path| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == euid() && m.mode() & 0o077 == 0)
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let dir = e.path();
        if !is_key(&name) || !mine(&dir) {
            continue;
        }
        let marker = dir.join(MARKER);
        let is_file =
            std::fs::symlink_metadata(&marker).is_ok_and(|m| m.is_file() && m.len() <= 4096);
        let Some(text) = is_file.then(|| std::fs::read(&marker).ok()).flatten() else {
            continue;
        };
        let Some(line) = text.strip_suffix(b"\n").filter(|l| !l.contains(&b'\n')) else {
            continue;
        };
        let was = PathBuf::from(std::ffi::OsStr::from_bytes(line));
        if !was.is_absolute() || key(&was) != name {
            continue;
        }
        if project_gone(&was) {
            out.push((dir, was));
        }
    }
    out.sort();
    out
}

/// Whether no project is at `was` now: its `.loop` is not there, or a
/// part of the path is not a directory. Any other failure to look (a
/// permission refused, a network file system's error) is not "gone".
#[allow(clippy::disallowed_methods)] // lstat of a project's own directory
pub(crate) fn project_gone(was: &Path) -> bool {
    match std::fs::symlink_metadata(was.join(".loop")) {
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
        ),
    }
}

/// Remove a near directory (never following a link in it). The project's
/// directory stays, with its marker: another task of the project may be
/// being made in it at this moment.
#[allow(clippy::disallowed_methods)] // the runtime's own workspace directories
pub(crate) fn remove_near(near: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(near).is_ok() {
        loop_workspace::remove_tree(near)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks of one project made while others end, and while the marker
    /// keeps disappearing (each making writes it again, at the same time as
    /// the others), all get their directory, and the marker is whole.
    #[test]
    #[allow(clippy::disallowed_methods)] // the test's own directories
    fn near_directories_are_made_while_others_are_removed() {
        let base = std::env::temp_dir().join(format!("loop-near-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let project = base.join("project");
        let dir = base.join(key(&project));
        let done = std::sync::atomic::AtomicBool::new(false);
        let failures: Vec<String> = std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = std::fs::remove_file(dir.join(MARKER));
                    std::thread::yield_now();
                }
            });
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (dir, project) = (&dir, &project);
                    s.spawn(move || {
                        let mut failed = Vec::new();
                        for n in 0..200 {
                            let id = format!("t-20260101-000000-{t:02x}{n:04x}");
                            match near_in(dir, project, &id) {
                                Ok(near) => {
                                    let _ = remove_near(&near);
                                }
                                Err(e) => failed.push(e.message),
                            }
                        }
                        failed
                    })
                })
                .collect();
            let failed = handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            failed
        });
        assert!(failures.is_empty(), "{failures:?}");
        near_in(&dir, &project, "t-20260101-000000-ffffff").unwrap();
        let marker = std::fs::read_to_string(dir.join(MARKER)).unwrap();
        assert_eq!(marker, format!("{}\n", project.display()));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_key_names_the_project_and_hashes_its_path() {
        let k = key(Path::new("/home/me/My Project!"));
        assert!(k.starts_with("My_Project_-"), "{k}");
        assert!(is_key(&k), "{k}");
        assert_ne!(k, key(Path::new("/home/you/My Project!")));
        assert!(is_key(&key(Path::new("/"))));
        assert!(!is_key("x-123"));
        assert!(!is_key("-0123456789ab"));
    }

    #[test]
    fn a_record_names_the_old_place_or_a_near_directory_of_its_own_task_only() {
        let id = "t-1-ab";
        assert_eq!(
            classify(Path::new("/p/.loop/tasks/t-1-ab/workspace"), id),
            Ok(None)
        );
        assert_eq!(
            classify(Path::new("/r/p-0123456789ab/t-1-ab/workspace"), id),
            Ok(Some(PathBuf::from("/r/p-0123456789ab/t-1-ab")))
        );
        for bad in [
            "/victim",
            "/r/p-0123456789ab/t-2-ab/workspace",
            "/r/p-0123456789ab/t-1-ab/other",
            "/r/p-01234/t-1-ab/workspace",
            "r/p-0123456789ab/t-1-ab/workspace",
            "/r/../p-0123456789ab/t-1-ab/workspace",
        ] {
            assert!(classify(Path::new(bad), id).is_err(), "{bad}");
        }
    }

    /// Only a directory of this user's own, named by a key, whose marker
    /// (a file, not a link) names a path with that key and no project at
    /// it now, is a gone project's: a forged marker naming another path,
    /// a path where a project is, a directory others may read, a linked
    /// marker or a linked directory are left alone.
    #[test]
    #[allow(clippy::disallowed_methods)] // the test's own directories
    fn only_a_consistent_directory_of_a_project_no_longer_there_is_gone() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("loop-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(&root).unwrap();
        let here = base.join("here");
        std::fs::create_dir_all(here.join(".loop")).unwrap();
        let make = |project: &Path, marker: &Path, mode: u32| {
            let dir = root.join(key(project));
            std::fs::create_dir_all(dir.join("t-1")).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::write(dir.join(MARKER), format!("{}\n", marker.display())).unwrap();
            dir
        };
        let gone = base.join("gone");
        let gone_dir = make(&gone, &gone, 0o700);
        make(&base.join("a"), &base.join("b"), 0o700);
        make(&here, &here, 0o700);
        make(&base.join("open"), &base.join("open"), 0o755);
        // A link to a marker that would count, were it the file itself.
        let linked = make(&base.join("linked"), &base.join("linked"), 0o700);
        let outside = base.join("marker-outside");
        std::fs::rename(linked.join(MARKER), &outside).unwrap();
        std::os::unix::fs::symlink(&outside, linked.join(MARKER)).unwrap();
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(
            elsewhere.join(MARKER),
            format!("{}\n", base.join("x").display()),
        )
        .unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join(key(&base.join("x")))).unwrap();
        assert_eq!(gone_projects_in(&root), vec![(gone_dir, gone)]);
        let _ = std::fs::remove_dir_all(&base);
    }
}
