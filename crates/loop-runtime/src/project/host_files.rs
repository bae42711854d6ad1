//! What a change set would make the host run by itself once applied: the
//! part of `loop apply`'s gate that looks at trees, not names.
//!
//! Names alone ([`loop_workspace::changeset::HOST_EXECUTABLE`]) catch
//! hooks, shell and editor configuration, `*.pth`, `node_modules/`. Three
//! kinds need more than a name:
//!
//! - **A Python environment** (any directory holding `pyvenv.cfg`, made by
//!   the task or already in the project): everything under it is run by
//!   the interpreter there (`bin/python`, `site-packages`), so every file
//!   the change set puts inside one is host-executable.
//! - **git configuration in any config-shaped file** (`config`,
//!   `*gitconfig`, `.gitmodules`) with a section that runs or redirects
//!   something (`core`, `include`, `alias`, `filter`, `diff`, `merge`,
//!   `credential`, `url`, `submodule`): git reads it once that directory is
//!   taken for a repository, or when it is included.
//! - **A repository git on this machine would discover**: decided by git's
//!   own rules, by running the host's `git rev-parse` in every directory
//!   the apply would create, inside a scratch copy of what the change set
//!   writes there (links as links), before anything is written. A
//!   directory git takes for a repository would run whatever its config
//!   names the next time anyone runs git in it: refused outright.

use crate::Error;
use loop_protocol::evidence::FileChange;
use loop_workspace::door;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Sections of a git config that run a program or send git elsewhere.
const RISKY_GIT_SECTIONS: &[&str] = &[
    "core",
    "include",
    "includeif",
    "alias",
    "filter",
    "diff",
    "merge",
    "credential",
    "url",
    "submodule",
    "gpg",
    "sequence",
    "pager",
];

/// Largest file copied into the scratch tree with its content (git's
/// discovery reads only small files: `HEAD`, `commondir`, `gitdir`,
/// `config`, a `.git` pointer).
const SCRATCH_CONTENT: u64 = 64 * 1024;

/// The directories on the way to `path` (`a`, `a/b` for `a/b/c`).
fn ancestors(path: &str) -> Vec<&str> {
    path.match_indices('/').map(|(i, _)| &path[..i]).collect()
}

/// Files of the change set that land inside a Python environment, with
/// the environment.
pub(crate) fn in_python_envs(
    project: &Path,
    workspace: &Path,
    files: &[FileChange],
) -> Vec<String> {
    let written: BTreeSet<&str> = files
        .iter()
        .filter(|f| f.after_sha256.is_some())
        .map(|f| f.path.as_str())
        .collect();
    let is_env = |dir: &str| {
        let cfg = format!("{dir}/pyvenv.cfg");
        written.contains(cfg.as_str())
            || door::is_file(project, &cfg)
            || door::is_file(workspace, &cfg)
    };
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.after_sha256.is_some()) {
        let env = if f.path == "pyvenv.cfg" {
            Some("the project root")
        } else {
            ancestors(&f.path).into_iter().find(|d| is_env(d))
        };
        if let Some(env) = env {
            out.push(format!(
                "{} (inside the Python environment {env}/: its interpreter runs what is there)",
                f.path
            ));
        }
    }
    out
}

/// Whether `text` is git-config shaped with a section that runs or
/// redirects something: the section's name. Read twice: a line that
/// starts with a risky section's header, and the sections git itself
/// reads there (`[user] [core] fsmonitor = x` on one line, a byte-order
/// mark before `[core]`, headers after a bare carriage return are git
/// configuration too: a line scan alone let them through).
fn risky_git_section(text: &str) -> Option<String> {
    headed_section(text).or_else(|| {
        git_read_sections(text)?
            .into_iter()
            .find(|s| RISKY_GIT_SECTIONS.contains(&s.as_str()))
    })
}

/// The sections of the keys the host's git reads in `text` as a config
/// file (its includes not followed), lowercased; `None` when git does not
/// take it for configuration (it then refuses to read it at all) or
/// cannot be run.
#[allow(clippy::disallowed_methods)] // the host's git, reading text given on its input
fn git_read_sections(text: &str) -> Option<Vec<String>> {
    use std::io::Write;
    let mut child = std::process::Command::new("git")
        .args([
            "config",
            "--file",
            "-",
            "--no-includes",
            "--null",
            "--name-only",
            "--list",
        ])
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("GIT_CEILING_DIRECTORIES", "/")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let input = text.to_string();
    // Written beside the reading: git may answer before it has read all.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().ok();
    let _ = feeder.join();
    let out = out.filter(|o| o.status.success())?;
    Some(
        out.stdout
            .split(|b| *b == 0)
            .filter(|k| !k.is_empty())
            .map(|k| {
                let k = String::from_utf8_lossy(k).to_ascii_lowercase();
                k.split('.').next().unwrap_or("").to_string()
            })
            .collect(),
    )
}

/// A risky section whose header starts a line of `text`.
fn headed_section(text: &str) -> Option<String> {
    for line in text.lines() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix('[') else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect::<String>()
            .to_ascii_lowercase();
        if RISKY_GIT_SECTIONS.contains(&name.as_str()) {
            return Some(name);
        }
    }
    None
}

/// Config-shaped files of the change set holding git sections that run
/// something.
pub(crate) fn git_configs(workspace: &Path, files: &[FileChange]) -> Vec<String> {
    let mut out = Vec::new();
    for f in files.iter().filter(|f| f.after_sha256.is_some()) {
        let name = f.path.rsplit('/').next().unwrap_or(&f.path);
        let shaped = name == "config"
            || name.ends_with("gitconfig")
            || name == ".gitmodules"
            || name.ends_with(".gitconfig");
        if !shaped {
            continue;
        }
        let section = match door::read_text(workspace, &f.path, 1 << 20) {
            Ok(Some(text)) => risky_git_section(&text),
            // Unreadable as text (too large, not UTF-8): not judged safe.
            Err(_) => Some("(unreadable)".into()),
            Ok(None) => None,
        };
        if let Some(s) = section {
            out.push(format!(
                "{} (git configuration with a [{s}] section: git runs or follows what it names)",
                f.path
            ));
        }
    }
    out
}

/// Directories the apply would create in which git on this machine finds
/// a repository, decided by running `git rev-parse` there in a scratch
/// copy. `Err` when the copy cannot be made or git cannot be asked: the
/// apply is then refused too (not judged safe).
pub(crate) fn repositories(
    project: &Path,
    workspace: &Path,
    files: &[FileChange],
    scratch_parent: &Path,
) -> Result<Vec<String>, Error> {
    let written: Vec<&FileChange> = files.iter().filter(|f| f.after_sha256.is_some()).collect();
    // Every directory the apply creates, and every one that receives a
    // file git's discovery looks at.
    let mut created: BTreeSet<&str> = written
        .iter()
        .flat_map(|f| ancestors(&f.path))
        .filter(|d| matches!(door::node(project, d), Ok(loop_workspace::Node::Missing)))
        .collect();
    for f in &written {
        if let Some((dir, name)) = f.path.rsplit_once('/')
            && [
                "HEAD",
                "commondir",
                "gitdir",
                ".git",
                "config",
                "objects",
                "refs",
            ]
            .contains(&name)
        {
            created.insert(dir);
        }
    }
    if created.is_empty() {
        return Ok(Vec::new());
    }
    let scratch = scratch_parent.join(format!("host-git-{}", std::process::id()));
    let _ = loop_workspace::remove_tree(&scratch);
    let made = materialize(workspace, &written, &scratch);
    let found = made.and_then(|()| {
        let mut found = Vec::new();
        for dir in &created {
            if let Some(git_dir) = discovered(&scratch, dir)? {
                found.push(format!(
                    "{dir}: git on this machine would take it for a repository (git directory {git_dir}) and run what its configuration names"
                ));
            }
        }
        Ok(found)
    });
    let _ = loop_workspace::remove_tree(&scratch);
    found
}

/// Write what the change set puts in the new directories into `scratch`:
/// small files with their content (read through the door), larger ones
/// empty, links as links.
#[allow(clippy::disallowed_methods)] // a scratch copy the runtime made, to ask the host's git about
fn materialize(workspace: &Path, written: &[&FileChange], scratch: &Path) -> Result<(), Error> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Error::internal(format!("scratch copy ({what}): {e}"))
    };
    std::fs::create_dir_all(scratch).map_err(|e| fail("directory", &e))?;
    for f in written {
        let at = scratch.join(&f.path);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent).map_err(|e| fail(&f.path, &e))?;
        }
        match door::node(workspace, &f.path) {
            Ok(loop_workspace::Node::Symlink(target)) => {
                std::os::unix::fs::symlink(&target, &at).map_err(|e| fail(&f.path, &e))?;
            }
            Ok(loop_workspace::Node::File { size, .. }) => {
                let bytes = if size <= SCRATCH_CONTENT {
                    door::read(workspace, &f.path, SCRATCH_CONTENT)
                        .map_err(|e| fail(&f.path, &e))?
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                std::fs::write(&at, bytes).map_err(|e| fail(&f.path, &e))?;
            }
            Ok(loop_workspace::Node::Dir) => {
                std::fs::create_dir_all(&at).map_err(|e| fail(&f.path, &e))?;
            }
            Ok(_) => {}
            Err(e) => return Err(fail(&f.path, &e)),
        }
    }
    Ok(())
}

/// The git directory git finds from `scratch/dir`, if any (never looking
/// at `scratch` itself or above it).
fn discovered(scratch: &Path, dir: &str) -> Result<Option<String>, Error> {
    let at: PathBuf = scratch.join(dir);
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "safe.directory=*",
            "rev-parse",
            "--absolute-git-dir",
        ])
        .current_dir(&at)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", scratch)
        .env("GIT_CEILING_DIRECTORIES", scratch)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            Error::internal(format!(
                "git rev-parse (to ask git which directories are repositories): {e}"
            ))
        })?;
    if !out.status.success() {
        return Ok(None);
    }
    let git_dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let shown = Path::new(&git_dir)
        .strip_prefix(scratch)
        .map(|p| p.display().to_string())
        .unwrap_or(git_dir);
    Ok(Some(shown))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn git_sections_that_run_something_are_found_in_any_config_shape() {
        for text in [
            "[core]\n\tfsmonitor = ./x\n",
            "  [Core] pager = x\n",
            "[include]\n path = ../evil\n",
            "[includeIf \"gitdir:/\"]\n path = x\n",
            "[alias]\n st = !sh x\n",
            "[filter \"lfs\"]\n smudge = x\n",
        ] {
            assert!(risky_git_section(text).is_some(), "{text}");
        }
        for text in ["[user]\n name = x\n", "key = value\n[tool]\n", ""] {
            assert!(risky_git_section(text).is_none(), "{text}");
        }
        // What git reads that a line scan missed.
        for (text, section) in [
            ("[user] [core] fsmonitor = touch x; false\n", "core"),
            ("\u{feff}[core]\n\tpager = x\n", "core"),
            ("[user]\r[alias]\r\tst = !touch x\n", "alias"),
        ] {
            assert_eq!(
                risky_git_section(text).as_deref(),
                Some(section),
                "{text:?}"
            );
        }
        // Configuration git reads with no risky section, and text that is
        // no git configuration at all, stay allowed.
        for text in [
            "[user] name = x [tool] y = 1\n",
            "foo: bar\n- [core]\n",
            "port = 8080\n",
        ] {
            assert!(risky_git_section(text).is_none(), "{text:?}");
        }
    }

    fn added(path: &str) -> FileChange {
        FileChange {
            path: path.into(),
            change: "added".into(),
            before_sha256: None,
            after_sha256: Some("x".into()),
            before_mode: None,
            after_mode: Some("100644".into()),
        }
    }

    #[test]
    fn the_hosts_git_decides_which_new_directories_are_repositories() {
        let base = std::env::temp_dir().join(format!("host-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (project, ws, scratch) = (base.join("p"), base.join("w"), base.join("s"));
        for d in [&project, &scratch] {
            std::fs::create_dir_all(d).unwrap();
        }
        let files = [
            ("sub4/HEAD", "ref: refs/heads/keep\n"),
            ("sub4/commondir", "../cd4\n"),
            ("cd4/config", "[core]\n\trepositoryformatversion = 0\n"),
            ("cd4/objects/info/packs", "\n"),
            (
                "cd4/refs/heads/keep",
                "0000000000000000000000000000000000000000\n",
            ),
            // A gitdir pointer file in a new directory.
            ("sub5/.git", "gitdir: ../sub4\n"),
            ("docs/HEAD", "the head of the docs\n"),
            ("plain/a.txt", "a\n"),
        ];
        for (p, text) in files {
            let at = ws.join(p);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        let changes: Vec<FileChange> = files.iter().map(|(p, _)| added(p)).collect();
        let found = repositories(&project, &ws, &changes, &scratch).unwrap();
        let dirs: Vec<&str> = found.iter().map(|f| f.split(':').next().unwrap()).collect();
        // git's own rules: HEAD with a commondir whose objects and refs
        // are elsewhere is one; a pointer file to it makes another; the
        // directory holding the objects but no HEAD is none by itself.
        for repo in ["sub4", "sub5"] {
            assert!(dirs.contains(&repo), "{repo}: {found:#?}");
        }
        for plain in ["docs", "plain", "cd4"] {
            assert!(!dirs.contains(&plain), "{plain}: {found:#?}");
        }
        // The scratch copy is gone.
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn ancestors_are_every_directory_on_the_way() {
        assert_eq!(ancestors("a/b/c"), vec!["a", "a/b"]);
        assert!(ancestors("c").is_empty());
    }
}
