//! A commit's tree written out as files (its blobs, as git holds them): what a pull
//! request's head holds (`loop ci-check --replay`) and what a skill's
//! repository holds at its HEAD (`loop skills install`), never its
//! working tree's uncommitted files.

use crate::Error;
use std::path::Path;

/// Write the tree of `rev` in the repository at `repo` (a working tree or
/// a bare repository) into `into`, a new directory: each blob as git
/// holds it (`ls-tree` and `cat-file`, so no attribute, filter or
/// conversion of the repository's applies, and nothing of its own runs),
/// regular files (executable as recorded) first, then links; a submodule
/// is left out, a name that is not a plain path refused, and more than
/// `max_bytes` in all refused.
#[allow(clippy::disallowed_methods)] // a new private directory the runtime made
pub(crate) fn write_tree(repo: &Path, rev: &str, into: &Path, max_bytes: u64) -> Result<(), Error> {
    use std::io::{BufRead, Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let listing = git_output(repo, &["ls-tree", "-r", "-z", "--full-tree", rev])?;
    let mut entries = Vec::new();
    for e in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let e = String::from_utf8_lossy(e);
        let Some((meta, path)) = e.split_once('\t') else {
            continue;
        };
        let f: Vec<&str> = meta.split(' ').collect();
        let (Some(mode), Some(id)) = (f.first(), f.get(2)) else {
            continue;
        };
        if *mode == "160000" {
            continue;
        }
        let plain = !path.is_empty()
            && Path::new(path)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain || !matches!(*mode, "100644" | "100755" | "120000") {
            return Err(Error::usage(format!(
                "{rev}: `{path}` (mode {mode}) is not a file or link with a plain name"
            )));
        }
        entries.push((mode.to_string(), id.to_string(), path.to_string()));
    }
    // Files before links: no link is in place while a file is written.
    entries.sort_by_key(|(mode, _, _)| *mode == "120000");
    std::fs::create_dir_all(into).map_err(Error::from_cause)?;
    let mut cat = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(SAFE)
        .args(["cat-file", "--batch"])
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| Error::usage(format!("cannot run git cat-file: {e}")))?;
    let ids: Vec<String> = entries.iter().map(|(_, id, _)| format!("{id}\n")).collect();
    let mut stdin = cat.stdin.take();
    let feeder = std::thread::spawn(move || {
        if let Some(w) = stdin.as_mut() {
            for id in ids {
                if w.write_all(id.as_bytes()).is_err() {
                    break;
                }
            }
        }
    });
    let mut out = std::io::BufReader::new(
        cat.stdout
            .take()
            .ok_or_else(|| Error::internal("git cat-file: no output"))?,
    );
    let mut total = 0u64;
    let result = (|| {
        for (mode, id, path) in &entries {
            let mut header = String::new();
            out.read_line(&mut header).map_err(Error::from_cause)?;
            let size: u64 = match header.split_whitespace().collect::<Vec<_>>()[..] {
                [got, "blob", n] if got == id => n.parse().unwrap_or(u64::MAX),
                _ => {
                    return Err(Error::usage(format!(
                        "{rev}: `{path}` is not a blob git holds"
                    )));
                }
            };
            total = total.saturating_add(size);
            if total > max_bytes {
                return Err(Error::usage(format!(
                    "{rev}: its files hold more than {max_bytes} bytes"
                )));
            }
            let mut bytes = Vec::with_capacity(size as usize);
            (&mut out)
                .take(size)
                .read_to_end(&mut bytes)
                .map_err(Error::from_cause)?;
            let mut nl = [0u8; 1];
            out.read_exact(&mut nl).map_err(Error::from_cause)?;
            let to = into.join(path);
            if let Some(dir) = to.parent() {
                std::fs::create_dir_all(dir).map_err(Error::from_cause)?;
            }
            if mode == "120000" {
                let target = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&bytes);
                std::os::unix::fs::symlink(target, &to).map_err(Error::from_cause)?;
                continue;
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(if mode == "100755" { 0o755 } else { 0o644 })
                .open(&to)
                .map_err(|e| Error::usage(format!("{rev}: cannot write `{path}`: {e}")))?;
            f.write_all(&bytes).map_err(Error::from_cause)?;
        }
        Ok(())
    })();
    let _ = cat.kill();
    let _ = cat.wait();
    let _ = feeder.join();
    result
}

/// Options that keep git from running anything of a repository's own
/// while it is read (its hooks, a file-system monitor).
const SAFE: [&str; 4] = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
];

/// `git -C repo ARGS`: its whole output (read as it comes), or what it
/// said.
#[allow(clippy::disallowed_methods)] // git's own output
pub(crate) fn git_output(repo: &Path, args: &[&str]) -> Result<Vec<u8>, Error> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(SAFE)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::usage(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::usage(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Whether `dir` is a git repository itself: the top of a working tree
/// (`.git` in it) or a bare repository (`HEAD` and `objects/`), not just a
/// folder somewhere inside one.
#[allow(clippy::disallowed_methods)] // lstat only, of a path a person named
pub(crate) fn is_repository(dir: &Path) -> bool {
    let lstat = |p: &Path| std::fs::symlink_metadata(p).ok();
    lstat(&dir.join(".git")).is_some()
        || (lstat(&dir.join("HEAD")).is_some_and(|m| m.is_file())
            && lstat(&dir.join("objects")).is_some_and(|m| m.is_dir()))
}

/// `git -C repo ARGS`, killed past `within`: its output, or what it said.
#[allow(clippy::disallowed_methods)] // git's own output, read from its pipe
pub(crate) fn git_bounded(
    repo: &Path,
    args: &[&str],
    within: std::time::Duration,
) -> Result<String, Error> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::usage(format!("cannot run git: {e}")))?;
    let deadline = std::time::Instant::now() + within;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(Error::from_cause)? {
            break s;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::unavailable(format!(
                "git {} took longer than {} s",
                args.join(" "),
                within.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if !status.success() {
        return Err(Error::usage(format!(
            "git {}: {}",
            args.join(" "),
            err.trim()
        )));
    }
    Ok(out)
}
