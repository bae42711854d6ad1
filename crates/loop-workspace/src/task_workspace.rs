//! The task's own workspace. A task never works in the user's checkout:
//! in a git repository it gets a worktree on a new branch `loop/<task-id>`
//! (the base checkout's HEAD, index and working tree are not touched);
//! elsewhere a copy that respects `.gitignore` and skips build outputs,
//! saying what it skipped.

use crate::fsutil::copy_tree;
use crate::snapshot::remove_tree;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Directory names that are build outputs or caches, never copied.
pub const BUILD_OUTPUTS: &[&str] = &[
    "target",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".gradle",
    ".next",
    "dist",
    "build",
];

/// How the workspace was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A git worktree.
    Worktree {
        /// The repository (the project).
        repo: PathBuf,
        /// The commit the task started from.
        base_commit: String,
        /// The task's branch.
        branch: String,
        /// Whether the user's uncommitted changes were carried over.
        dirty_included: bool,
    },
    /// A filtered copy.
    Copy {
        /// Paths (relative to the project) left out.
        skipped: Vec<String>,
    },
}

/// A task workspace.
#[derive(Debug, Clone)]
pub struct TaskWorkspace {
    /// Where it is.
    pub path: PathBuf,
    /// How it was made.
    pub origin: Origin,
}

/// Making or removing a workspace failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// Filesystem.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A git command failed.
    #[error("`git {args}` failed: {stderr}")]
    Git {
        /// The arguments.
        args: String,
        /// What git said.
        stderr: String,
    },
}

/// `git worktree` commands of this process, one at a time: two run at
/// once in one repository read each other's half-made records
/// (`fatal: failed to read .git/worktrees/workspace7/commondir`), and a
/// server prepares `--jobs` tasks at once. Held for the command's run.
pub fn worktree_commands() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn git(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    let _one = (args.first() == Some(&"worktree")).then(worktree_commands);
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir);
    git_with(cmd, args)
}

/// Run `cmd` (git, with where it works already given) with `args`; its
/// output, or what it said when it failed.
fn git_with(mut cmd: Command, args: &[&str]) -> Result<String, WorkspaceError> {
    let out = cmd
        .args(args)
        .output()
        .map_err(|source| WorkspaceError::Io {
            what: "cannot run git".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(WorkspaceError::Git {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// Whether git surely finds no repository from `dir`: no `GIT_DIR` is
/// set, and neither `dir` nor any directory above it holds a `.git` or
/// is itself a repository's directory (a `HEAD` beside `objects/`) —
/// where git's own discovery looks. Asked before running git, so a
/// project that is no repository spawns no git at all; `false` only
/// means git is worth asking.
#[allow(clippy::disallowed_methods)] // whether names exist, nothing read (git looks the same way)
pub fn surely_no_repository(dir: &Path) -> bool {
    if std::env::var_os("GIT_DIR").is_some() {
        return false;
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    !dir.ancestors().any(|a| {
        std::fs::symlink_metadata(a.join(".git")).is_ok()
            || (std::fs::symlink_metadata(a.join("HEAD")).is_ok()
                && std::fs::symlink_metadata(a.join("objects")).is_ok())
    })
}

/// The commit `HEAD` points at, when `project` is the top of a git repository with one.
pub fn git_head(project: &Path) -> Option<String> {
    if surely_no_repository(project) {
        return None;
    }
    let top = git(project, &["rev-parse", "--show-toplevel"]).ok()?;
    let top = Path::new(&top).canonicalize().ok()?;
    if top != project.canonicalize().ok()? {
        return None;
    }
    git(project, &["rev-parse", "--verify", "HEAD"]).ok()
}

/// The commit `rev` names in `project`, a repository's top (the one a
/// task given a base starts from: it carries no uncommitted files, which
/// belong to another commit).
fn commit_of(project: &Path, rev: &str, include_dirty: bool) -> Result<String, WorkspaceError> {
    let refuse = |why: String| WorkspaceError::Git {
        args: format!("rev-parse {rev}"),
        stderr: why,
    };
    if include_dirty {
        return Err(refuse(
            "a task from a given commit carries no uncommitted files".into(),
        ));
    }
    if git_head(project).is_none() {
        return Err(refuse(format!(
            "{} is not the top of a git repository with a commit",
            project.display()
        )));
    }
    if rev.starts_with('-') || rev.is_empty() {
        return Err(refuse("not a commit".into()));
    }
    git(
        project,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
}

/// What the root `.git` of `workspace`, a worktree of `repo`, holds as
/// git made it: `gitdir: ` and the worktree's administrative directory in
/// `repo` (the one whose `gitdir` names `workspace`'s `.git`). `None` when
/// `repo` has no such worktree (nothing to compare with).
#[allow(clippy::disallowed_methods)] // the task directory the runtime made (copies, worktrees), walked with links as links
pub fn worktree_pointer(repo: &Path, workspace: &Path) -> Option<Vec<u8>> {
    let admin = repo.join(".git").join("worktrees");
    let ours = workspace.join(".git");
    std::fs::read_dir(&admin).ok()?.flatten().find_map(|d| {
        let named = std::fs::read_to_string(d.path().join("gitdir")).ok()?;
        (Path::new(named.trim_end_matches('\n')) == ours)
            .then(|| format!("gitdir: {}\n", d.path().display()).into_bytes())
    })
}

/// The paths a git project has uncommitted changes at (modified, staged,
/// untracked; the runtime's own `.loop/` left out), which a worktree made
/// from `HEAD` does not hold. Empty for anything that is not a repository.
pub fn uncommitted(project: &Path) -> Vec<String> {
    let Ok(out) = Command::new("git")
        .arg("-C")
        .arg(project)
        .args(["status", "--porcelain=v1", "-z", "--untracked-files=all"])
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut paths = Vec::new();
    let mut entries = text.split('\0');
    while let Some(e) = entries.next() {
        if e.len() < 4 {
            continue;
        }
        let (status, path) = e.split_at(3);
        // A rename's entry is followed by the name it had.
        if status.starts_with('R') || status.starts_with('C') {
            let _ = entries.next();
        }
        if path == ".loop" || path.starts_with(".loop/") {
            continue;
        }
        paths.push(path.to_string());
    }
    paths
}

impl TaskWorkspace {
    /// Make the workspace for `task_id` at `dest` from `project`: a
    /// worktree at its `HEAD`, or at `base` (a commit the repository
    /// holds, such as a pull request's head it fetched) when given.
    #[allow(clippy::disallowed_methods)] // the task directory the runtime made (copies, worktrees), walked with links as links
    pub fn create(
        project: &Path,
        dest: &Path,
        task_id: &str,
        (include_dirty, base): (bool, Option<&str>),
    ) -> Result<TaskWorkspace, WorkspaceError> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| WorkspaceError::Io { what, source }
        };
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).map_err(io("cannot create the task directory"))?;
        }
        let start = match base {
            None => git_head(project),
            Some(b) => Some(commit_of(project, b, include_dirty)?),
        };
        if let Some(base_commit) = start {
            let branch = format!("loop/{task_id}");
            let dest_s = dest.to_string_lossy().into_owned();
            git(
                project,
                &[
                    "worktree",
                    "add",
                    "--quiet",
                    "-b",
                    &branch,
                    &dest_s,
                    &base_commit,
                ],
            )?;
            if include_dirty {
                carry_dirty(project, dest)?;
            }
            carry_mtimes(project, dest);
            return Ok(TaskWorkspace {
                path: dest.to_path_buf(),
                origin: Origin::Worktree {
                    repo: project.to_path_buf(),
                    base_commit,
                    branch,
                    dirty_included: include_dirty,
                },
            });
        }
        let skipped = copy_project(project, dest)?;
        Ok(TaskWorkspace {
            path: dest.to_path_buf(),
            origin: Origin::Copy { skipped },
        })
    }

    /// Make task `task_id`'s workspace at `dest` again, as it started on
    /// the machine that made it: a worktree of `project` at `base_commit`
    /// on the branch `loop/<task_id>` (reset there), or a copy of the
    /// project; then `fill` brings it to the task's recorded state (the
    /// uncommitted changes a task carried in are part of that state).
    ///
    /// It is built beside `dest` (`<dest>.rebuild`) and put in its place
    /// only once `fill` succeeded: whatever was at `dest` (a stale
    /// workspace of an earlier run here) is untouched by a rebuild that
    /// fails, and removed only after the new one is in place.
    #[allow(clippy::disallowed_methods)] // the task directory the runtime made (copies, worktrees), walked with links as links
    pub fn rebuild<T, E: From<WorkspaceError>>(
        project: &Path,
        dest: &Path,
        task_id: &str,
        base_commit: Option<&str>,
        fill: impl FnOnce(&Path) -> Result<T, E>,
    ) -> Result<(TaskWorkspace, T), E> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| WorkspaceError::Io { what, source }
        };
        let aside = |suffix: &str| {
            let mut name = dest.file_name().unwrap_or_default().to_os_string();
            name.push(suffix);
            dest.with_file_name(name)
        };
        let (fresh, stale) = (aside(".rebuild"), aside(".stale"));
        let worktree = base_commit.is_some();
        // What an earlier rebuild here left (it stopped half way): a stale
        // copy moved aside with nothing in its place goes back first (it
        // is the only copy), then a half-made new one goes.
        if worktree {
            let _ = git(project, &["worktree", "prune"]);
        }
        if std::fs::symlink_metadata(dest).is_err() && std::fs::symlink_metadata(&stale).is_ok() {
            Self::move_tree(project, &stale, dest, worktree).map_err(|e| WorkspaceError::Io {
                what: "cannot put back the stale workspace an earlier rebuild moved aside".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        for leftover in [&fresh, &stale] {
            if std::fs::symlink_metadata(leftover).is_ok() {
                Self::drop_fresh(project, leftover, worktree);
                if std::fs::symlink_metadata(leftover).is_ok() {
                    remove_tree(leftover)
                        .map_err(io("cannot remove an earlier rebuild's leftovers"))?;
                }
            }
        }
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).map_err(io("cannot create the task directory"))?;
        }
        let made = match base_commit {
            None => {
                let skipped = copy_project(project, &fresh);
                skipped.map(|skipped| Origin::Copy { skipped })
            }
            Some(base) => Self::worktree_at(project, &fresh, task_id, base),
        };
        let origin = match made {
            Ok(o) => o,
            Err(e) => {
                Self::drop_fresh(project, &fresh, worktree);
                return Err(e.into());
            }
        };
        let filled = match fill(&fresh) {
            Ok(t) => t,
            Err(e) => {
                Self::drop_fresh(project, &fresh, worktree);
                return Err(e);
            }
        };
        // The swap: the stale copy aside (a worktree moved by git, its
        // registration with it), the new one in; only then is the stale
        // one removed. A failure on the way puts the stale one back.
        let had = std::fs::symlink_metadata(dest).is_ok();
        if had && let Err(e) = Self::move_tree(project, dest, &stale, worktree) {
            Self::drop_fresh(project, &fresh, worktree);
            return Err(e.into());
        }
        if let Err(e) = Self::move_tree(project, &fresh, dest, worktree) {
            Self::drop_fresh(project, &fresh, worktree);
            if had {
                let _ = Self::move_tree(project, &stale, dest, worktree);
            }
            return Err(e.into());
        }
        if had {
            Self::drop_fresh(project, &stale, worktree);
            if std::fs::symlink_metadata(&stale).is_ok() {
                remove_tree(&stale).map_err(io("cannot remove the stale workspace"))?;
            }
        }
        if worktree {
            // Detached until now (the branch was the stale worktree's,
            // gone now): the task's branch is set to it.
            git(
                dest,
                &["checkout", "--quiet", "-B", &format!("loop/{task_id}")],
            )
            .map_err(E::from)?;
        }
        Ok((
            TaskWorkspace {
                path: dest.to_path_buf(),
                origin,
            },
            filled,
        ))
    }

    /// Move a workspace from `from` to `to` (a worktree with git, which
    /// keeps its registration right; a copy by a rename).
    #[allow(clippy::disallowed_methods)] // the task directory the runtime made: its workspace moved as a whole, links as links
    fn move_tree(
        project: &Path,
        from: &Path,
        to: &Path,
        worktree: bool,
    ) -> Result<(), WorkspaceError> {
        let registered =
            worktree && std::fs::symlink_metadata(from.join(".git")).is_ok_and(|m| m.is_file());
        if registered {
            let (f, t) = (
                from.to_string_lossy().into_owned(),
                to.to_string_lossy().into_owned(),
            );
            if git(project, &["worktree", "move", &f, &t]).is_ok() {
                return Ok(());
            }
        }
        std::fs::rename(from, to).map_err(|source| WorkspaceError::Io {
            what: format!(
                "cannot move the workspace from {} to {}",
                from.display(),
                to.display()
            ),
            source,
        })?;
        if registered {
            let _ = git(to, &["worktree", "repair"]);
        }
        Ok(())
    }

    /// A worktree of `project` at `path`, detached at `base` (the task's
    /// branch `loop/<task_id>` may still be checked out in a stale worktree
    /// of the task's: it is set once that one is gone).
    fn worktree_at(
        project: &Path,
        path: &Path,
        task_id: &str,
        base: &str,
    ) -> Result<Origin, WorkspaceError> {
        if git(project, &["cat-file", "-e", &format!("{base}^{{commit}}")]).is_err() {
            return Err(WorkspaceError::Git {
                args: format!("cat-file -e {base}"),
                stderr: format!(
                    "the task's base commit {base} is not in the repository at {} (fetch it on this machine)",
                    project.display()
                ),
            });
        }
        let branch = format!("loop/{task_id}");
        let path_s = path.to_string_lossy().into_owned();
        git(
            project,
            &["worktree", "add", "--quiet", "--detach", &path_s, base],
        )?;
        Ok(Origin::Worktree {
            repo: project.to_path_buf(),
            base_commit: base.to_string(),
            branch,
            dirty_included: false,
        })
    }

    /// Remove a rebuild that did not finish.
    fn drop_fresh(project: &Path, fresh: &Path, worktree: bool) {
        if worktree {
            let s = fresh.to_string_lossy().into_owned();
            let _ = git(project, &["worktree", "remove", "--force", &s]);
        }
        let _ = remove_tree(fresh);
        if worktree {
            let _ = git(project, &["worktree", "prune"]);
        }
    }

    /// The base commit, for a worktree.
    pub fn base_commit(&self) -> Option<&str> {
        match &self.origin {
            Origin::Worktree { base_commit, .. } => Some(base_commit),
            Origin::Copy { .. } => None,
        }
    }

    /// Let go of the task's branch `loop/<task-id>`, keeping the workspace:
    /// the worktree's HEAD is detached at the branch's commit through the
    /// worktree's record in the repository (no file touched, nothing of
    /// the workspace read, no hook run), then the branch is deleted. Whether there was one to delete (a copy has none).
    pub fn drop_branch(&self) -> Result<bool, WorkspaceError> {
        let Origin::Worktree { repo, branch, .. } = &self.origin else {
            return Ok(false);
        };
        let full = format!("refs/heads/{branch}");
        let Ok(at) = git(repo, &["rev-parse", "--verify", "--quiet", &full]) else {
            return Ok(false);
        };
        // Git never runs in the workspace (its `.git` is the task's file):
        // the worktree's HEAD is set through its record in the repository,
        // found by the path it names, with no hook run.
        if let Some(pointer) = worktree_pointer(repo, &self.path) {
            let text = String::from_utf8_lossy(&pointer);
            let admin = text
                .strip_prefix("gitdir: ")
                .map(|p| p.trim_end_matches('\n').to_string())
                .unwrap_or_default();
            let mut cmd = Command::new("git");
            cmd.arg(format!("--git-dir={admin}"))
                .env_remove("GIT_WORK_TREE");
            git_with(
                cmd,
                &[
                    "-c",
                    "core.hooksPath=/dev/null",
                    "update-ref",
                    "--no-deref",
                    "HEAD",
                    &at,
                ],
            )?;
        }
        git(
            repo,
            &["-c", "core.hooksPath=/dev/null", "branch", "-D", branch],
        )?;
        Ok(true)
    }

    /// For a worktree: where another worktree of the repository has the
    /// task's branch checked out, not this workspace, and whether that is
    /// the repository's own checkout (a person switched to the branch).
    /// A project copied with its `.git` keeps the record of the original's
    /// worktree, which is the original project's to remove, never this
    /// one's. A record git would prune (its directory gone) is none.
    pub fn branch_held_elsewhere(&self) -> Option<(PathBuf, bool)> {
        let Origin::Worktree { repo, branch, .. } = &self.origin else {
            return None;
        };
        let listed = git(repo, &["worktree", "list", "--porcelain", "-z"]).ok()?;
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let ours = canon(&self.path);
        // Records are separated by an empty field; the first is the
        // repository's own checkout.
        for (k, record) in listed.split("\0\0").enumerate() {
            let fields: Vec<&str> = record.split('\0').collect();
            let holds = fields
                .iter()
                .any(|f| *f == format!("branch refs/heads/{branch}"));
            let prunable = fields.iter().any(|f| f.starts_with("prunable"));
            let Some(at) = fields.iter().find_map(|f| f.strip_prefix("worktree ")) else {
                continue;
            };
            if holds && !prunable && canon(Path::new(at)) != ours {
                return Some((PathBuf::from(at), k == 0));
            }
        }
        None
    }

    /// Remove the workspace (and, for a worktree, prune it and delete its
    /// branch, if it still has one).
    pub fn discard(&self) -> Result<(), WorkspaceError> {
        match &self.origin {
            Origin::Worktree { repo, branch, .. } => {
                let path = self.path.to_string_lossy().into_owned();
                let _ = git(repo, &["worktree", "remove", "--force", &path]);
                let _ = remove_tree(&self.path);
                git(repo, &["worktree", "prune"])?;
                let full = format!("refs/heads/{branch}");
                if git(repo, &["rev-parse", "--verify", "--quiet", &full]).is_ok() {
                    git(repo, &["branch", "-D", branch])?;
                }
                Ok(())
            }
            Origin::Copy { .. } => remove_tree(&self.path).map_err(|source| WorkspaceError::Io {
                what: "cannot remove the workspace".into(),
                source,
            }),
        }
    }
}

/// A copy of `project` at `dest` that respects `.gitignore` and skips
/// build outputs; what it left out.
fn copy_project(project: &Path, dest: &Path) -> Result<Vec<String>, WorkspaceError> {
    let ignores = GitIgnores::new(project);
    let skip = |rel: &str| {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        rel == ".loop" || rel == ".git" || BUILD_OUTPUTS.contains(&name) || ignores.ignored(rel)
    };
    // With the originals' times (best effort: a file that changed while it
    // was copied only costs a rebuild): build outputs shared into the
    // task stay current for what it has not changed.
    copy_tree(project, dest, &skip, true)
        .map(|stats| {
            let _ = crate::fsutil::copy_times(project, dest);
            stats.skipped
        })
        .map_err(|source| WorkspaceError::Io {
            what: "cannot copy the project".into(),
            source,
        })
}

/// The checkout's modification times onto the worktree's files that hold
/// what the checkout holds (tracked, and clean there): build tools that
/// judge by times (Cargo's fingerprints, make, CMake's generated builds)
/// then see the project's own build outputs, shared into the task, as
/// current for every file the task has not changed, and rebuild only what
/// it did. The worktree's index is refreshed after, so `git status` in it
/// does not hash every file again. Best effort: a file left with its
/// checkout time only costs a rebuild.
#[allow(clippy::disallowed_methods)] // lstat of the user's checkout; times set on the worktree git just made, no link followed
fn carry_mtimes(project: &Path, dest: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    // Only when the checkout is at the commit the worktree was made from,
    // and git can say what in it differs: else nothing is carried.
    let (Ok(theirs), Ok(ours)) = (
        git(project, &["rev-parse", "--verify", "HEAD"]),
        git(dest, &["rev-parse", "--verify", "HEAD"]),
    ) else {
        return;
    };
    if theirs != ours {
        return;
    }
    let Ok(status) = git(
        project,
        &["status", "--porcelain=v1", "-z", "--untracked-files=no"],
    ) else {
        return;
    };
    // Files git is told not to look at (assume-unchanged, skip-worktree)
    // may differ without git saying so: never carried.
    let Ok(flagged) = git(project, &["ls-files", "-v", "-z"]) else {
        return;
    };
    let mut changed: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut entries = status.split('\0');
    while let Some(e) = entries.next() {
        if e.len() < 4 {
            continue;
        }
        let (code, path) = e.split_at(3);
        if (code.starts_with('R') || code.starts_with('C'))
            && let Some(from) = entries.next()
        {
            changed.insert(from.to_string());
        }
        changed.insert(path.to_string());
    }
    for e in flagged.split('\0').filter(|e| e.len() > 2) {
        let (tag, path) = e.split_at(2);
        if tag.starts_with(|c: char| c.is_ascii_lowercase() || c == 'S') {
            changed.insert(path.to_string());
        }
    }
    let Ok(listed) = git(dest, &["ls-files", "-z"]) else {
        return;
    };
    let mut carried = 0usize;
    for rel in listed.split('\0').filter(|r| !r.is_empty()) {
        if changed.contains(rel) {
            continue;
        }
        let Ok(theirs) = std::fs::symlink_metadata(project.join(rel)) else {
            continue;
        };
        let Ok(modified) = theirs.modified() else {
            continue;
        };
        if !theirs.is_file() {
            continue;
        }
        let Ok(ours) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(dest.join(rel))
        else {
            continue;
        };
        let regular = ours
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() == theirs.len());
        if regular
            && ours
                .set_times(std::fs::FileTimes::new().set_modified(modified))
                .is_ok()
        {
            carried += 1;
        }
    }
    if carried > 0 {
        let _ = git(dest, &["update-index", "-q", "--refresh"]);
    }
}

/// The user's uncommitted changes (tracked diffs and untracked files) into the worktree.
#[allow(clippy::disallowed_methods)] // the task directory the runtime made (copies, worktrees), walked with links as links
fn carry_dirty(project: &Path, dest: &Path) -> Result<(), WorkspaceError> {
    let diff = Command::new("git")
        .arg("-C")
        .arg(project)
        .args(["diff", "HEAD", "--binary"])
        .output()
        .map_err(|source| WorkspaceError::Io {
            what: "cannot run git diff".into(),
            source,
        })?;
    if !diff.stdout.is_empty() {
        let patch = dest.join(".loop-dirty.patch");
        std::fs::write(&patch, &diff.stdout).map_err(|source| WorkspaceError::Io {
            what: "cannot write the dirty patch".into(),
            source,
        })?;
        let applied = git(dest, &["apply", "--binary", ".loop-dirty.patch"]);
        let _ = std::fs::remove_file(&patch);
        applied?;
    }
    let untracked = git(
        project,
        &["ls-files", "--others", "--exclude-standard", "-z"],
    )?;
    for rel in untracked
        .split('\0')
        .filter(|r| !r.is_empty() && !r.starts_with(".loop/"))
    {
        carry_untracked(project, dest, rel)?;
    }
    Ok(())
}

/// One untracked file of `project` into the worktree `dest`, as git
/// would hold it: a link as a link (never followed: a link to a host
/// file, `~/.netrc`, brought its content into the workspace and the
/// records, and a link to a directory failed the task), a regular file
/// with its bytes and mode, read with no link on the way; a nested
/// repository (`sub/`) or anything else is not carried. Nothing is
/// written through a link in `dest` either.
#[allow(clippy::disallowed_methods)] // the task directory the runtime made, written where the door made it
fn carry_untracked(project: &Path, dest: &Path, rel: &str) -> Result<(), WorkspaceError> {
    use crate::door;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |what: String| move |source: std::io::Error| WorkspaceError::Io { what, source };
    let refused = |e: crate::untrusted::UntrustedError| {
        io(format!("cannot carry {rel}"))(std::io::Error::other(e.to_string()))
    };
    let rel = rel.trim_end_matches('/');
    match door::node(project, rel).map_err(refused)? {
        crate::Node::Symlink(target) => {
            // Its directories made (none a link), then the link itself.
            door::write(dest, rel, b"").map_err(refused)?;
            let at = dest.join(rel);
            std::fs::remove_file(&at).map_err(io(format!("cannot replace {rel}")))?;
            std::os::unix::fs::symlink(&target, &at).map_err(io(format!("cannot link {rel}")))
        }
        crate::Node::File { mut file, mode, .. } => {
            door::write(dest, rel, b"").map_err(refused)?;
            let at = dest.join(rel);
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&at)
                .map_err(io(format!("cannot write {rel}")))?;
            std::io::copy(&mut file, &mut out).map_err(io(format!("cannot copy {rel}")))?;
            out.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
                .map_err(io(format!("cannot set the mode of {rel}")))
        }
        _ => Ok(()),
    }
}

/// The project's `.gitignore` files, every one of them, read as git reads
/// them (negations, anchors, directory-only patterns): the deepest file
/// with a matching pattern decides, and an ignored directory is not
/// entered (so nothing under it can be re-included, as in git).
struct GitIgnores {
    root: PathBuf,
    cache:
        std::cell::RefCell<std::collections::HashMap<String, Option<ignore::gitignore::Gitignore>>>,
}

impl GitIgnores {
    fn new(root: &Path) -> Self {
        GitIgnores {
            root: root.to_path_buf(),
            cache: Default::default(),
        }
    }

    /// The matcher of the `.gitignore` in directory `dir` (relative), if any.
    #[allow(clippy::disallowed_methods)] // the task directory the runtime made (copies, worktrees), walked with links as links
    fn matcher(&self, dir: &str) -> Option<ignore::gitignore::Gitignore> {
        if let Some(m) = self.cache.borrow().get(dir) {
            return m.clone();
        }
        let base = if dir.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir)
        };
        let file = base.join(".gitignore");
        let m = file.is_file().then(|| {
            let mut b = ignore::gitignore::GitignoreBuilder::new(&base);
            // A malformed line is skipped, as git skips it.
            let _ = b.add(&file);
            b.build().ok()
        });
        let m = m.flatten();
        self.cache.borrow_mut().insert(dir.to_string(), m.clone());
        m
    }

    /// Whether `rel` (a path relative to the root) is ignored.
    #[allow(clippy::disallowed_methods)] // the task directory the runtime made (copies, worktrees), walked with links as links
    fn ignored(&self, rel: &str) -> bool {
        use ignore::Match;
        let full = self.root.join(rel);
        let is_dir = std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir());
        let parts: Vec<&str> = rel.split('/').collect();
        for depth in (0..parts.len()).rev() {
            let dir = parts[..depth].join("/");
            if let Some(m) = self.matcher(&dir) {
                match m.matched(&full, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
        }
        false
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn sh(dir: &Path, script: &str) -> String {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn repo(d: &TestDir) -> PathBuf {
        let p = d.path().join("proj");
        std::fs::create_dir_all(&p).unwrap();
        sh(
            &p,
            "git init -q && git config user.email t@t && git config user.name t && echo one > a.txt && echo base > b.txt && git add -A && git commit -qm base",
        );
        p
    }

    /// A server prepares many tasks of one repository at once: each gets
    /// its worktree (all named `workspace`, in directories of their own),
    /// none fails on another's half-made record.
    #[test]
    fn worktrees_made_at_once_in_one_repository_all_succeed() {
        let d = TestDir::new("worktrees-at-once");
        let p = repo(&d);
        let made: Vec<_> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..12)
                .map(|i| {
                    let (p, dest) = (&p, d.path().join(format!("t{i}/workspace")));
                    sc.spawn(move || {
                        TaskWorkspace::create(p, &dest, &format!("t-{i}"), (false, None))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, m) in made.into_iter().enumerate() {
            let ws = m.unwrap_or_else(|e| panic!("worktree {i}: {e}"));
            assert_eq!(
                std::fs::read_to_string(ws.path.join("a.txt")).unwrap(),
                "one\n"
            );
        }
    }

    /// A rebuild that fails leaves the stale copy as it was (a copy and a
    /// worktree); one that succeeds replaces it, leaving nothing aside and
    /// one registered worktree at the workspace's path.
    #[test]
    fn a_rebuild_swaps_in_only_on_success_and_a_failed_one_keeps_the_stale_copy() {
        let d = TestDir::new("rebuild-swap");
        let plain = d.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        std::fs::write(plain.join("a.txt"), "one\n").unwrap();
        let git_proj = repo(&d);
        for (project, base) in [
            (plain.clone(), None),
            (git_proj.clone(), git_head(&git_proj)),
        ] {
            let dest = d.path().join(format!(
                "task-{}/workspace",
                project.file_name().unwrap().to_string_lossy()
            ));
            let made = TaskWorkspace::create(&project, &dest, "t-1", (false, None)).unwrap();
            assert_eq!(made.base_commit(), base.as_deref());
            std::fs::write(dest.join("work.txt"), "the stale copy's work\n").unwrap();
            // Failing half way (the new tree is already made and written
            // to): the stale copy is untouched, nothing is left aside.
            let failed = TaskWorkspace::rebuild(&project, &dest, "t-1", base.as_deref(), |fresh| {
                std::fs::write(fresh.join("half.txt"), "x").unwrap();
                Err::<(), WorkspaceError>(WorkspaceError::Git {
                    args: "fill".into(),
                    stderr: "content missing".into(),
                })
            });
            let why = failed.unwrap_err().to_string();
            assert!(why.contains("content missing"), "{why}");
            assert_eq!(
                std::fs::read_to_string(dest.join("work.txt")).unwrap(),
                "the stale copy's work\n"
            );
            assert!(!dest.join("half.txt").exists());
            let leftovers: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(leftovers, ["workspace"], "{leftovers:?}");
            if base.is_some() {
                let list = sh(&project, "git worktree list --porcelain");
                assert!(
                    list.contains(&format!("worktree {}", dest.display())),
                    "{list}"
                );
                assert!(!list.contains("workspace.rebuild"), "{list}");
                assert_eq!(
                    sh(&dest, "git rev-parse --abbrev-ref HEAD").trim(),
                    "loop/t-1"
                );
            }
            // Succeeding: the new tree replaces the stale one.
            let (ws, filled) =
                TaskWorkspace::rebuild(&project, &dest, "t-1", base.as_deref(), |fresh| {
                    std::fs::write(fresh.join("new.txt"), "rebuilt\n").unwrap();
                    Ok::<_, WorkspaceError>(7)
                })
                .unwrap();
            assert_eq!((filled, ws.path.as_path()), (7, dest.as_path()));
            assert!(!dest.join("work.txt").exists());
            assert_eq!(
                std::fs::read_to_string(dest.join("new.txt")).unwrap(),
                "rebuilt\n"
            );
            assert_eq!(
                std::fs::read_to_string(dest.join("a.txt")).unwrap(),
                "one\n"
            );
            let leftovers: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(leftovers, ["workspace"], "{leftovers:?}");
            if base.is_some() {
                let list = sh(&project, "git worktree list --porcelain");
                let at_dest = list
                    .lines()
                    .filter(|l| l.starts_with("worktree "))
                    .collect::<Vec<_>>();
                assert_eq!(
                    at_dest,
                    [
                        format!("worktree {}", project.display()),
                        format!("worktree {}", dest.display())
                    ],
                    "{list}"
                );
                assert_eq!(
                    sh(&dest, "git rev-parse --abbrev-ref HEAD").trim(),
                    "loop/t-1"
                );
                assert_eq!(sh(&dest, "git status --porcelain --untracked-files=no"), "");
            }
            // A rebuild killed between its two moves left the only copy
            // aside: the next one puts it back before anything else, and
            // a failing rebuild then leaves it in place, registered.
            std::fs::write(dest.join("work.txt"), "kept through a kill\n").unwrap();
            let stale = dest.with_file_name("workspace.stale");
            if base.is_some() {
                sh(
                    &project,
                    &format!("git worktree move {} {}", dest.display(), stale.display()),
                );
            } else {
                std::fs::rename(&dest, &stale).unwrap();
            }
            let failed = TaskWorkspace::rebuild(&project, &dest, "t-1", base.as_deref(), |_| {
                Err::<(), WorkspaceError>(WorkspaceError::Git {
                    args: "fill".into(),
                    stderr: "content missing".into(),
                })
            });
            assert!(failed.is_err());
            assert_eq!(
                std::fs::read_to_string(dest.join("work.txt")).unwrap(),
                "kept through a kill\n"
            );
            assert!(!stale.exists());
            if base.is_some() {
                let list = sh(&project, "git worktree list --porcelain");
                assert!(
                    list.contains(&format!("worktree {}", dest.display())),
                    "{list}"
                );
                assert_eq!(
                    sh(&dest, "git rev-parse --abbrev-ref HEAD").trim(),
                    "loop/t-1"
                );
            }
        }
    }

    #[test]
    fn a_branch_is_dropped_through_the_repository_never_the_workspaces_git_file() {
        let d = TestDir::new("tw-drop-branch");
        let p = repo(&d);
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-2", (false, None)).unwrap();
        // The workspace's `.git` replaced by one naming a repository of the
        // task's, whose hooks would run on the host.
        let evil = d.path().join("evil");
        sh(
            d.path(),
            "git init -q evil && git -C evil -c user.email=t@t -c user.name=t commit -q --allow-empty -m x && mkdir -p evil/.git/hooks && printf '#!/bin/sh\ntouch \"$0.ran\"\n' > evil/.git/hooks/reference-transaction && chmod +x evil/.git/hooks/reference-transaction",
        );
        std::fs::write(
            ws.path.join(".git"),
            format!("gitdir: {}\n", evil.join(".git").display()),
        )
        .unwrap();
        assert!(ws.drop_branch().unwrap());
        assert!(!evil.join(".git/hooks/reference-transaction.ran").exists());
        assert_eq!(sh(&p, "git branch --list 'loop/*'"), "");
        // The worktree stays, detached at the base commit.
        let listed = sh(&p, "git worktree list --porcelain");
        assert!(listed.contains("detached"), "{listed}");
        assert!(!ws.drop_branch().unwrap(), "no branch left to drop");
        ws.discard().unwrap();
    }

    #[test]
    fn a_task_given_a_commit_starts_from_it_not_from_head() {
        let d = TestDir::new("tw-base");
        let p = repo(&d);
        // A commit the repository holds that is not HEAD (a pull request's
        // head, fetched), and the checkout's HEAD.
        let pr = sh(
            &p,
            "git checkout -q -b pr && echo pr > a.txt && git commit -qam pr && git rev-parse HEAD && git checkout -q -",
        );
        let pr = pr.trim();
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-1", (false, Some(pr))).unwrap();
        assert_eq!(ws.base_commit(), Some(pr));
        assert_eq!(
            std::fs::read_to_string(ws.path.join("a.txt")).unwrap(),
            "pr\n"
        );
        ws.discard().unwrap();
        // With uncommitted files, an unknown commit, or an option: refused.
        for (dirty, rev, says) in [
            (true, pr, "carries no uncommitted files"),
            (
                false,
                "0123456789012345678901234567890123456789",
                "rev-parse",
            ),
            (false, "--all", "not a commit"),
        ] {
            let e =
                TaskWorkspace::create(&p, &d.path().join("task/ws2"), "t-2", (dirty, Some(rev)))
                    .unwrap_err()
                    .to_string();
            assert!(e.contains(says), "{rev}: {e}");
        }
        // And with none given, HEAD as ever.
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws3"), "t-3", (false, None)).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path.join("a.txt")).unwrap(),
            "one\n"
        );
    }

    #[test]
    fn a_worktree_leaves_the_base_checkout_untouched() {
        let d = TestDir::new("tw-git");
        let p = repo(&d);
        // The user has staged and unstaged changes and an untracked file.
        sh(
            &p,
            "echo staged > b.txt && git add b.txt && echo dirty > a.txt && echo new > c.txt",
        );
        let before = (
            sh(&p, "git rev-parse HEAD"),
            sh(&p, "git status --porcelain"),
            sh(&p, "git diff --cached"),
            std::fs::read(p.join("a.txt")).unwrap(),
        );
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-1", (false, None)).unwrap();
        assert!(matches!(ws.origin, Origin::Worktree { .. }));
        assert_eq!(
            std::fs::read_to_string(ws.path.join("a.txt")).unwrap(),
            "one\n",
            "HEAD content, not the dirty file"
        );
        assert!(!ws.path.join("c.txt").exists());
        let after = (
            sh(&p, "git rev-parse HEAD"),
            sh(&p, "git status --porcelain"),
            sh(&p, "git diff --cached"),
            std::fs::read(p.join("a.txt")).unwrap(),
        );
        assert_eq!(before, after, "HEAD, index and working tree unchanged");
        ws.discard().unwrap();
        assert!(!ws.path.exists());
        assert_eq!(sh(&p, "git branch --list 'loop/*'"), "");
    }

    /// A file the checkout holds as committed keeps the checkout's time in
    /// the worktree (build tools see the project's outputs as current); one
    /// the user changed (to text of the same length) does not, nor one git
    /// is told to assume unchanged; and the worktree's `git status` stays
    /// clean.
    #[test]
    fn a_worktree_keeps_the_checkouts_times_for_files_it_holds_unchanged() {
        let d = TestDir::new("tw-times");
        let p = repo(&d);
        sh(
            &p,
            "echo same > c.txt && git add c.txt && git commit -qm c && git update-index --assume-unchanged c.txt && echo SAME > c.txt && echo BASE > b.txt && touch -d '2001-02-03 04:05:06' a.txt b.txt c.txt",
        );
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-3", (false, None)).unwrap();
        let mtime = |f: &Path| {
            std::fs::metadata(f)
                .unwrap()
                .modified()
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        assert_eq!(mtime(&ws.path.join("a.txt")), mtime(&p.join("a.txt")));
        assert_ne!(
            mtime(&ws.path.join("b.txt")),
            mtime(&p.join("b.txt")),
            "b.txt differs in the checkout: its time says nothing of the worktree's"
        );
        assert_ne!(
            mtime(&ws.path.join("c.txt")),
            mtime(&p.join("c.txt")),
            "c.txt is assumed unchanged: git cannot say whether it differs"
        );
        assert_eq!(sh(&ws.path, "git status --porcelain"), "");
        ws.discard().unwrap();
    }

    #[test]
    fn include_dirty_carries_the_users_changes() {
        let d = TestDir::new("tw-dirty");
        let p = repo(&d);
        sh(&p, "echo dirty > a.txt && echo new > c.txt");
        let ws = TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-2", (true, None)).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.path.join("a.txt")).unwrap(),
            "dirty\n"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path.join("c.txt")).unwrap(),
            "new\n"
        );
        assert_eq!(sh(&p, "git status --porcelain"), " M a.txt\n?? c.txt\n");
    }

    /// Untracked links arrive as links, never as what they point at (a
    /// link to a host file brought the host file's bytes in; one to a
    /// directory failed the task); an untracked executable keeps its mode
    /// and a nested repository is left where it is.
    #[test]
    fn include_dirty_carries_untracked_links_as_links() {
        use std::os::unix::fs::PermissionsExt;
        let d = TestDir::new("tw-dirty-links");
        let p = repo(&d);
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("credentials"), "HOST-SECRET\n").unwrap();
        std::os::unix::fs::symlink(outside.join("credentials"), p.join("credentials")).unwrap();
        std::os::unix::fs::symlink(&outside, p.join("outdir")).unwrap();
        std::os::unix::fs::symlink("a.txt", p.join("alias.txt")).unwrap();
        sh(
            &p,
            "printf '#!/bin/sh\\necho run\\n' > run.sh && chmod 755 run.sh && mkdir -p tools/sub && git -C tools/sub init -q && echo x > tools/sub/f",
        );
        let ws = TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-4", (true, None)).unwrap();
        let link = |n: &str| std::fs::read_link(ws.path.join(n)).ok();
        assert_eq!(link("credentials"), Some(outside.join("credentials")));
        assert_eq!(link("outdir"), Some(outside.clone()));
        assert_eq!(link("alias.txt"), Some(PathBuf::from("a.txt")));
        let mode = std::fs::metadata(ws.path.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_to_string(ws.path.join("run.sh")).unwrap(),
            "#!/bin/sh\necho run\n"
        );
        assert!(
            !ws.path.join("tools/sub").exists(),
            "a nested repository is not carried"
        );
        ws.discard().unwrap();
    }

    #[test]
    fn a_copy_respects_gitignore_and_skips_build_outputs() {
        let d = TestDir::new("tw-copy");
        let p = d.path().join("proj");
        for f in [
            "src/main.py",
            "target/debug/x",
            "node_modules/m/i.js",
            "logs/app.log",
            "keep.txt",
        ] {
            std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
            std::fs::write(p.join(f), "x").unwrap();
        }
        std::fs::write(p.join(".gitignore"), "# comment\n*.log\n/logs/\n").unwrap();
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-3", (false, None)).unwrap();
        let Origin::Copy { mut skipped } = ws.origin.clone() else {
            panic!()
        };
        skipped.sort();
        assert_eq!(skipped, vec!["logs", "node_modules", "target"]);
        assert!(ws.path.join("src/main.py").exists());
        assert!(ws.path.join(".gitignore").exists());
        assert!(!ws.path.join("target").exists());
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod gitignore_tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn a_copy_reads_every_gitignore_with_negations_as_git_does() {
        let d = TestDir::new("copy-gitignore");
        let p = d.path().join("project");
        for dir in ["logs", "src/gen", "docs"] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        std::fs::write(p.join(".gitignore"), "*.log\n!keep.log\n/logs/\n").unwrap();
        std::fs::write(p.join("a.log"), "x").unwrap();
        std::fs::write(p.join("keep.log"), "x").unwrap();
        std::fs::write(p.join("logs/l.txt"), "x").unwrap();
        // A nested file ignores more, and re-includes what its parent ignored.
        std::fs::write(p.join("src/.gitignore"), "gen/\n!*.log\n").unwrap();
        std::fs::write(p.join("src/gen/out.rs"), "x").unwrap();
        std::fs::write(p.join("src/trace.log"), "x").unwrap();
        std::fs::write(p.join("src/main.rs"), "x").unwrap();
        std::fs::write(p.join("docs/notes.log"), "x").unwrap();
        let ws =
            TaskWorkspace::create(&p, &d.path().join("task/ws"), "t-1", (false, None)).unwrap();
        let has = |rel: &str| ws.path.join(rel).exists();
        assert!(!has("a.log"), "ignored");
        assert!(has("keep.log"), "a negation re-includes");
        assert!(!has("logs"), "an anchored directory pattern");
        assert!(!has("src/gen"), "a nested .gitignore");
        assert!(
            has("src/trace.log"),
            "a nested negation overrides its parent"
        );
        assert!(has("src/main.rs"));
        assert!(!has("docs/notes.log"), "the root's pattern reaches down");
    }
}
