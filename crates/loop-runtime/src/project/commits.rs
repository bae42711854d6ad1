//! A commit's tree written out as files (`git archive`): what a pull
//! request's head holds (`loop ci-check --replay`) and what a skill's
//! repository holds at its HEAD (`loop skills install`), never its
//! working tree's uncommitted files.

use crate::Error;
use std::path::Path;

/// Write the tree of `rev` in the repository at `repo` (a working tree or
/// a bare repository) into `into`: only what git holds (no path both a
/// link and a folder, no name leaving the tree), owned by this user.
#[allow(clippy::disallowed_methods)] // a private directory the runtime made
pub(crate) fn write_tree(repo: &Path, rev: &str, into: &Path) -> Result<(), Error> {
    use std::process::{Command, Stdio};
    std::fs::create_dir_all(into).map_err(Error::from_cause)?;
    let mut archive = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["archive", "--format=tar", rev])
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::usage(format!("cannot run git archive: {e}")))?;
    let out = archive.stdout.take();
    let tar = Command::new("tar")
        .args(["-x", "--no-same-owner", "-C"])
        .arg(into)
        .stdin(out.map(Stdio::from).unwrap_or_else(Stdio::null))
        .status()
        .map_err(|e| Error::usage(format!("cannot run tar: {e}")))?;
    let archived = archive.wait().map_err(Error::from_cause)?;
    if !tar.success() || !archived.success() {
        return Err(Error::usage(format!(
            "cannot write out the tree of {rev} in {}",
            repo.display()
        )));
    }
    Ok(())
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
