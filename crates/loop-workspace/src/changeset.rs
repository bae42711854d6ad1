//! Change sets: what a task changed against where it started, as exact
//! per-file hashes plus a unified diff, and how to apply it to the user's
//! project (only onto exactly the content it was made from) and undo it
//! (only from exactly the content it produced). Nothing is half-applied.

use crate::journal::{Change, Journal};
use crate::manifest::{Entry, EntryKind, Manifest};
use crate::untrusted::{Node, Tree, UntrustedError, link_stays_inside};
use loop_protocol::hash::sha256_hex;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One changed file (one type across the runtime).
pub use loop_protocol::FileChange;

/// git's mode string for a manifest entry.
pub fn git_mode(e: &Entry) -> &'static str {
    match (e.kind, e.executable) {
        (EntryKind::Symlink, _) => "120000",
        (EntryKind::File, true) => "100755",
        (EntryKind::File, false) => "100644",
    }
}

/// Paths that would run code on the user's machine, outside any sandbox,
/// once applied (hooks, `.envrc`, editor tasks, git configuration):
/// `loop apply` brings them home only with the user's explicit consent.
/// A Loopfile's `apply.host_executable` adds to the list.
pub const HOST_EXECUTABLE: &[&str] = &[
    "**/.githooks/**",
    "**/.husky/**",
    "**/.envrc",
    "**/.direnv/**",
    "**/.vscode/tasks.json",
    "**/.vscode/launch.json",
    "**/.vscode/settings.json",
    "**/.idea/**",
    "**/.devcontainer/**",
    "**/.pre-commit-config.yaml",
    "**/.gitattributes",
    "**/.gitconfig",
    "**/.lfsconfig",
    "**/.gitmodules",
    // What an interpreter or tool on the host picks up by itself.
    "**/*.pth",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/*.dist-info/**",
    "**/*.egg-info/**",
    "**/*.egg-link",
    "**/__editable__*",
    "**/node_modules/**",
    "**/.cargo/config",
    "**/.cargo/config.toml",
    "**/.npmrc",
    "**/.yarnrc",
    "**/.yarnrc.yml",
    "**/.pnpmfile.cjs",
    "**/.bashrc",
    "**/.bash_profile",
    "**/.bash_login",
    "**/.bash_logout",
    "**/.profile",
    "**/.zshrc",
    "**/.zshenv",
    "**/.zprofile",
    "**/.zlogin",
    "**/.inputrc",
    // What picks the program the host runs for any command in that
    // directory, `--version` included (an editor runs one on opening the
    // project): a toolchain named by its path (rustup's `path`, asdf's and
    // mise's `path:`, .NET's `sdk.paths`), a version string that walks out
    // of pyenv's or rbenv's versions (CVE-2022-35861), a package
    // manager's own release in the project (Yarn's `yarnPath`) or its
    // loader.
    "**/rust-toolchain",
    "**/rust-toolchain.toml",
    "**/.tool-versions",
    "**/.mise.toml",
    "**/.mise.local.toml",
    "**/mise.toml",
    "**/mise.local.toml",
    "**/.mise/**",
    "**/.python-version",
    "**/.ruby-version",
    "**/.node-version",
    "**/.nvmrc",
    "**/.go-version",
    "**/.java-version",
    "**/.perl-version",
    "**/.terraform-version",
    "**/.sdkmanrc",
    "**/mise.*.toml",
    "**/.mise.*.toml",
    "**/global.json",
    "**/.yarn/releases/**",
    "**/.yarn/plugins/**",
    "**/.pnp.cjs",
    "**/.pnp.loader.mjs",
    // Editors' and agents' settings that start a program when the
    // project is opened or worked in (language servers, tasks, hooks).
    "**/.zed/**",
    "**/.helix/**",
    "**/.nvim.lua",
    "**/.nvimrc",
    "**/.exrc",
    "**/.claude/settings.json",
    "**/.claude/settings.local.json",
    "**/.mcp.json",
    "**/.cursor/mcp.json",
    "**/.vscode/mcp.json",
    "**/.gemini/settings.json",
    "**/.config/mise/**",
    "**/bunfig.toml",
    "**/.pdbrc",
    // Read and run by vim with 'exrc' set, by Ruby's consoles, by
    // debuggers, by an editor opening a dev container, and the git hooks
    // of hook managers (run on the next commit).
    "**/.vimrc",
    "**/_vimrc",
    "**/.gvimrc",
    "**/_gvimrc",
    "**/.lvimrc",
    "**/.devcontainer.json",
    "**/.irbrc",
    "**/.pryrc",
    "**/.gdbinit",
    "**/.lldbinit",
    "**/lefthook.yml",
    "**/lefthook.yaml",
    "**/.lefthook.yml",
    "**/.lefthook.yaml",
    "**/lefthook-local.yml",
    "**/lefthook-local.yaml",
    "**/lefthook.toml",
    "**/lefthook.json",
    "**/.lefthook.toml",
    "**/.lefthook.json",
    "**/lefthook-local.toml",
    "**/lefthook-local.json",
    "**/.lefthook/**",
    "**/.lintstagedrc",
    "**/.lintstagedrc.*",
    "**/lint-staged.config.*",
    "**/.huskyrc",
    "**/.huskyrc.*",
    "**/.simple-git-hooks.*",
    "**/simple-git-hooks.*",
    // A Mercurial repository's hooks run on the next `hg` there.
    "**/.hg/**",
];

/// Largest file shown as text in a patch; larger ones are named by digest.
pub const MAX_DIFF_BYTES: u64 = 8 * 1024 * 1024;

/// A path as it goes into a patch header: `prefix/path`, quoted the way
/// git quotes (C escapes inside double quotes) when it holds a control
/// character, a quote or a backslash, so no name can forge a header line.
pub fn quote_path(prefix: &str, path: &str) -> String {
    let full = format!("{prefix}{path}");
    if !full
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        return full;
    }
    let mut q = String::from("\"");
    for c in full.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    q.push_str(&format!("\\{byte:03o}"));
                }
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Where a project stands with respect to a change set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Every path holds its `before` content: not applied.
    Before,
    /// Every path holds its `after` content: applied.
    After,
    /// Neither: these paths hold something else.
    Mixed(Vec<String>),
}

/// A task's change set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    /// The commit the task started from (git projects).
    pub base_commit: Option<String>,
    /// Changed files, by path.
    pub files: Vec<FileChange>,
    /// The unified diff of the text files.
    pub patch: String,
    /// Its SHA-256.
    pub patch_sha256: String,
}

/// Why a change set cannot be applied or undone.
#[derive(Debug, thiserror::Error)]
pub enum ChangeSetError {
    /// The project or workspace is not as the change set expects.
    #[error("conflict, nothing applied:\n{}", .0.join("\n"))]
    Conflict(Vec<String>),
    /// Filesystem.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The workspace holds something the runtime will not read.
    #[error("{0}")]
    Untrusted(UntrustedError),
}

/// What a path in a tree holds, as a change set compares it.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    Nothing,
    File { sha: String, executable: bool },
    Link(PathBuf),
    Other(&'static str),
}

fn held(tree: &Tree, rel: &str) -> Result<Held, ChangeSetError> {
    Ok(match tree.node(rel).map_err(untrusted)? {
        Node::Missing => Held::Nothing,
        Node::File { mut file, mode, .. } => Held::File {
            sha: crate::manifest::hash_reader(&mut file)?,
            executable: mode & 0o100 != 0,
        },
        Node::Symlink(t) => Held::Link(t),
        Node::Dir => Held::Other("a directory"),
        Node::Special(what) => Held::Other(what),
    })
}

fn untrusted(e: UntrustedError) -> ChangeSetError {
    ChangeSetError::Untrusted(e)
}

/// The permission bits a file of mode `had` gets when rewritten with the
/// executable bit `exec`: its own, the executable bits added where it is
/// readable or all taken away when that bit changes (set-id bits are
/// dropped, as the kernel drops them on a write).
fn kept_mode(had: u32, exec: bool) -> u32 {
    let had = had & 0o777;
    match (had & 0o100 != 0, exec) {
        (was, now) if was == now => had,
        (_, true) => had | ((had & 0o444) >> 2) | 0o100,
        (_, false) => had & !0o111,
    }
}

/// Whether a file's executable bit is what git's `mode` says (no mode
/// recorded: any).
fn mode_fits(mode: Option<&str>, executable: bool) -> bool {
    match mode {
        Some("100755") => executable,
        Some("100644") => !executable,
        Some(_) => false,
        None => true,
    }
}

/// Whether `h` is what a change set says (`sha`, `mode`) should be there.
fn holds(h: &Held, sha: Option<&String>, mode: Option<&str>) -> bool {
    match (h, sha) {
        (Held::Nothing, None) => true,
        (
            Held::File {
                sha: got,
                executable,
            },
            Some(want),
        ) => got == want && mode_fits(mode, *executable),
        (Held::Link(t), Some(want)) => {
            mode.is_none_or(|m| m == "120000")
                && sha256_hex(t.as_os_str().as_encoded_bytes()) == *want
        }
        _ => false,
    }
}

impl ChangeSet {
    /// Compare the task's `baseline` and `last` manifests of `workspace`;
    /// `before` gives a file's content at the start (from git, or from the
    /// project while it still holds it), for the diff. The workspace is
    /// read through [`Tree`]: a link is shown as a link (its target), never
    /// as what it points to; a file that is not regular is never opened.
    pub fn compute(
        baseline: &Manifest,
        last: &Manifest,
        workspace: &Path,
        base_commit: Option<String>,
        before: &dyn Fn(&str, &str) -> Option<Vec<u8>>,
    ) -> ChangeSet {
        let mut files = Vec::new();
        for e in &last.entries {
            match baseline.get(&e.path) {
                None => files.push(FileChange {
                    path: e.path.clone(),
                    change: "added".into(),
                    before_sha256: None,
                    after_sha256: Some(e.sha256.clone()),
                    before_mode: None,
                    after_mode: Some(git_mode(e).into()),
                }),
                Some(b) if b != e => files.push(FileChange {
                    path: e.path.clone(),
                    change: "modified".into(),
                    before_sha256: Some(b.sha256.clone()),
                    after_sha256: Some(e.sha256.clone()),
                    before_mode: Some(git_mode(b).into()),
                    after_mode: Some(git_mode(e).into()),
                }),
                Some(_) => {}
            }
        }
        for b in &baseline.entries {
            if last.get(&b.path).is_none() {
                files.push(FileChange {
                    path: b.path.clone(),
                    change: "deleted".into(),
                    before_sha256: Some(b.sha256.clone()),
                    after_sha256: None,
                    before_mode: Some(git_mode(b).into()),
                    after_mode: None,
                });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let tree = Tree::open(workspace).ok();
        let mut patch = String::new();
        for f in &files {
            let old = match &f.before_sha256 {
                Some(sha) => before(&f.path, sha),
                None => Some(Vec::new()),
            };
            let new = match (&f.after_sha256, &tree) {
                (None, _) => Some(Vec::new()),
                (Some(_), None) => None,
                (Some(_), Some(t)) => match t.node(&f.path) {
                    Ok(Node::Symlink(target)) => Some(target.into_os_string().into_encoded_bytes()),
                    Ok(Node::File { .. }) => t.read_file(&f.path, MAX_DIFF_BYTES).ok(),
                    _ => None,
                },
            };
            patch.push_str(&file_diff(f, old, new));
        }
        let patch_sha256 = sha256_hex(patch.as_bytes());
        ChangeSet {
            base_commit,
            files,
            patch,
            patch_sha256,
        }
    }

    /// Apply to `project`, taking the new contents from `workspace`, keeping
    /// what it replaces in `undo_dir`. Refused, with every conflict listed,
    /// unless each project path still holds its `before` content and each
    /// workspace path its `after` content (modes and links included). A
    /// link whose target would leave the project is refused.
    #[allow(clippy::disallowed_methods)] // change sets of the runtime's own snapshots; workspace content is read through untrusted::Tree
    pub fn apply(
        &self,
        project: &Path,
        workspace: &Path,
        undo_dir: &Path,
        journal: &Journal,
    ) -> Result<usize, ChangeSetError> {
        let ws = Tree::open(workspace)?;
        let proj = Tree::open(project)?;
        let mut conflicts = Vec::new();
        let mut changes = Vec::new();
        // Links as they will be after the apply, to judge where each leads.
        let links: std::collections::BTreeMap<String, PathBuf> = self
            .files
            .iter()
            .filter(|f| f.after_mode.as_deref() == Some("120000"))
            .filter_map(|f| match ws.node(&f.path) {
                Ok(Node::Symlink(t)) => Some((f.path.clone(), t)),
                _ => None,
            })
            .collect();
        let link_of = |p: &str| -> Option<PathBuf> {
            if let Some(t) = links.get(p) {
                return Some(t.clone());
            }
            match proj.node(p) {
                Ok(Node::Symlink(t)) => Some(t),
                _ => None,
            }
        };
        for f in &self.files {
            let target = project.join(&f.path);
            let now = match held(&proj, &f.path) {
                Ok(h) => h,
                Err(e) => {
                    conflicts.push(format!("{}: {e}", f.path));
                    continue;
                }
            };
            if !holds(&now, f.before_sha256.as_ref(), f.before_mode.as_deref()) {
                conflicts.push(format!(
                    "{}: the project's file changed since the task started",
                    f.path
                ));
            }
            match verified_change(f, target, &ws, &link_of)? {
                Verified::Change(mut change) => {
                    // A file the project holds keeps its own permission
                    // bits (git knows only 0644 and 0755: a private 0600
                    // file was made world-readable by an edit), with the
                    // executable bit the change set gives it.
                    if let (Some(mode), Ok(Node::File { mode: had, .. })) =
                        (change.mode, proj.node(&f.path))
                    {
                        change.mode = Some(kept_mode(had, mode & 0o100 != 0));
                    }
                    changes.push(change)
                }
                Verified::Conflict(conflict) => conflicts.push(conflict),
            }
        }
        if !conflicts.is_empty() {
            return Err(ChangeSetError::Conflict(conflicts));
        }
        std::fs::create_dir_all(undo_dir)?;
        self.keep_replaced(&proj, undo_dir)?;
        crate::fsutil::write_atomic(
            &undo_dir.join("dirs.json"),
            &serde_json::to_vec(&created_dirs(project, &changes)).map_err(std::io::Error::other)?,
        )?;
        journal.commit(&changes)?;
        Ok(changes.len())
    }

    /// Keep what the apply replaces, for undo: each file's bytes, each
    /// link's target, by its index in the change set.
    #[allow(clippy::disallowed_methods)] // change sets of the runtime's own snapshots; workspace content is read through untrusted::Tree
    fn keep_replaced(&self, proj: &Tree, undo_dir: &Path) -> Result<(), ChangeSetError> {
        for (i, f) in self.files.iter().enumerate() {
            if f.before_sha256.is_none() {
                continue;
            }
            match proj.node(&f.path).map_err(untrusted)? {
                Node::Symlink(t) => {
                    let _ = std::fs::remove_file(undo_dir.join(format!("{i}.link")));
                    std::os::unix::fs::symlink(t, undo_dir.join(format!("{i}.link")))?;
                }
                Node::File { mut file, mode, .. } => {
                    let mut out = std::fs::File::create(undo_dir.join(i.to_string()))?;
                    std::io::copy(&mut file, &mut out)?;
                    out.sync_all()?;
                    crate::fsutil::write_atomic(
                        &undo_dir.join(format!("{i}.mode")),
                        format!("{:o}", mode & 0o7777).as_bytes(),
                    )?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Undo an apply: refused unless each project path still holds exactly
    /// what the apply wrote. Restores contents, modes and links, and removes
    /// the directories the apply created.
    #[allow(clippy::disallowed_methods)] // change sets of the runtime's own snapshots; workspace content is read through untrusted::Tree
    pub fn undo(
        &self,
        project: &Path,
        undo_dir: &Path,
        journal: &Journal,
    ) -> Result<usize, ChangeSetError> {
        let proj = Tree::open(project)?;
        let mut conflicts = Vec::new();
        let mut changes = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            let target = project.join(&f.path);
            let now = held(&proj, &f.path)?;
            if !holds(&now, f.after_sha256.as_ref(), f.after_mode.as_deref()) {
                conflicts.push(format!("{}: changed since the apply", f.path));
            }
            let mut change = Change::file(f.path.clone(), target, None);
            if f.before_sha256.is_some() {
                let link = undo_dir.join(format!("{i}.link"));
                if std::fs::symlink_metadata(&link).is_ok() {
                    change.link = Some(std::fs::read_link(&link)?);
                } else {
                    change.content = Some(std::fs::read(undo_dir.join(i.to_string()))?);
                    // The file's own bits as the apply found them (an
                    // apply of an earlier version kept none: git's mode).
                    let kept = std::fs::read_to_string(undo_dir.join(format!("{i}.mode")))
                        .ok()
                        .and_then(|m| u32::from_str_radix(m.trim(), 8).ok());
                    change.mode = Some(kept.unwrap_or(match f.before_mode.as_deref() {
                        Some("100755") => 0o755,
                        _ => 0o644,
                    }));
                }
            }
            changes.push(change);
        }
        if !conflicts.is_empty() {
            return Err(ChangeSetError::Conflict(conflicts));
        }
        journal.commit(&changes)?;
        let created: Vec<PathBuf> = std::fs::read(undo_dir.join("dirs.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        for d in created.iter().rev() {
            // Only what the apply made, and only when empty again.
            if d.is_relative() && !d.components().any(|c| c == std::path::Component::ParentDir) {
                let _ = std::fs::remove_dir(project.join(d));
            }
        }
        Ok(changes.len())
    }

    /// Whether `project` holds this change set's `before` or `after`
    /// content, path by path (links and modes included).
    pub fn standing(&self, project: &Path) -> Result<Standing, ChangeSetError> {
        let proj = Tree::open(project)?;
        let (mut before, mut after, mut other) = (true, true, Vec::new());
        for f in &self.files {
            let h = held(&proj, &f.path)?;
            let b = holds(&h, f.before_sha256.as_ref(), f.before_mode.as_deref());
            let a = holds(&h, f.after_sha256.as_ref(), f.after_mode.as_deref());
            before &= b;
            after &= a;
            if !a && !b {
                other.push(f.path.clone());
            }
        }
        Ok(match (before, after) {
            (true, _) => Standing::Before,
            (_, true) => Standing::After,
            _ => Standing::Mixed(if other.is_empty() {
                self.files.iter().map(|f| f.path.clone()).collect()
            } else {
                other
            }),
        })
    }

    /// Where a task keeps its undo data.
    pub fn undo_dir(task_dir: &Path) -> PathBuf {
        task_dir.join("undo")
    }
}

/// One file's part of the patch, git-style: mode lines, then a text diff,
/// or a line naming binary, oversized or unreadable content by digest.
fn file_diff(f: &FileChange, old: Option<Vec<u8>>, new: Option<Vec<u8>>) -> String {
    let a = if f.before_sha256.is_some() {
        quote_path("a/", &f.path)
    } else {
        "/dev/null".into()
    };
    let b = if f.after_sha256.is_some() {
        quote_path("b/", &f.path)
    } else {
        "/dev/null".into()
    };
    let mut out = format!(
        "diff --git {} {}\n",
        quote_path("a/", &f.path),
        quote_path("b/", &f.path)
    );
    match (f.before_mode.as_deref(), f.after_mode.as_deref()) {
        (None, Some(m)) => out.push_str(&format!("new file mode {m}\n")),
        (Some(m), None) => out.push_str(&format!("deleted file mode {m}\n")),
        (Some(o), Some(n)) if o != n => {
            out.push_str(&format!("old mode {o}\nnew mode {n}\n"));
        }
        _ => {}
    }
    let text = |v: Option<Vec<u8>>| {
        v.filter(|b| !b.iter().take(8000).any(|c| *c == 0))
            .and_then(|b| String::from_utf8(b).ok())
    };
    match (text(old), text(new)) {
        (Some(o), Some(n)) => {
            if o != n {
                let diff = similar::TextDiff::from_lines(&o, &n);
                out.push_str(
                    &diff
                        .unified_diff()
                        .context_radius(3)
                        .header(&a, &b)
                        .to_string(),
                );
            }
        }
        _ => out.push_str(&format!(
            "Binary, oversized or unreadable content differs: {a} {b} (sha256 {} -> {})\n",
            f.before_sha256.as_deref().unwrap_or("none"),
            f.after_sha256.as_deref().unwrap_or("none")
        )),
    }
    out
}

/// A verified file's way home: the change, or the conflict that refuses it.
enum Verified {
    Change(Change),
    Conflict(String),
}

/// The change that brings `f` home, read from the task workspace and
/// checked against what was verified (content, mode, a link's target
/// staying inside the project); or the conflict that refuses it.
fn verified_change(
    f: &FileChange,
    target: PathBuf,
    ws: &Tree,
    link_of: &dyn Fn(&str) -> Option<PathBuf>,
) -> std::io::Result<Verified> {
    let mut change = Change::file(f.path.clone(), target, None);
    if let Some(want) = &f.after_sha256 {
        match ws.node(&f.path) {
            Ok(Node::Symlink(t))
                if f.after_mode.as_deref().is_none_or(|m| m == "120000")
                    && sha256_hex(t.as_os_str().as_encoded_bytes()) == *want =>
            {
                if !link_stays_inside(&f.path, &t, &link_of) {
                    return Ok(Verified::Conflict(format!(
                        "{}: a symlink to {} would lead outside the project",
                        f.path,
                        t.display()
                    )));
                }
                change.link = Some(t);
            }
            Ok(Node::File { file, mode, .. }) => {
                let mut file = file;
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes)?;
                let exec = mode & 0o100 != 0;
                let mode_ok = mode_fits(f.after_mode.as_deref(), exec);
                if sha256_hex(&bytes) != *want || !mode_ok {
                    return Ok(Verified::Conflict(stale(f)));
                }
                change.mode = Some(if exec { 0o755 } else { 0o644 });
                change.content = Some(bytes);
            }
            Ok(_) | Err(_) => {
                return Ok(Verified::Conflict(stale(f)));
            }
        }
    }
    Ok(Verified::Change(change))
}

fn stale(f: &FileChange) -> String {
    format!(
        "{}: the task workspace no longer holds the verified content",
        f.path
    )
}

/// Directories the apply creates (relative to `project`, parents first),
/// so undo leaves none behind.
#[allow(clippy::disallowed_methods)] // change sets of the runtime's own snapshots; workspace content is read through untrusted::Tree
fn created_dirs(project: &Path, changes: &[Change]) -> Vec<PathBuf> {
    let mut created = Vec::new();
    for c in changes {
        let mut cur = c.full.parent();
        let mut chain = Vec::new();
        while let Some(d) = cur {
            if d == project || std::fs::symlink_metadata(d).is_ok() {
                break;
            }
            chain.push(d.strip_prefix(project).unwrap_or(d).to_path_buf());
            cur = d.parent();
        }
        for d in chain.into_iter().rev() {
            if !created.contains(&d) {
                created.push(d);
            }
        }
    }
    created
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn setup(d: &TestDir) -> (PathBuf, PathBuf, ChangeSet) {
        let project = d.path().join("project");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("keep.txt"), "same\n").unwrap();
        std::fs::write(project.join("mod.txt"), "old\nline\n").unwrap();
        std::fs::write(project.join("del.txt"), "bye\n").unwrap();
        crate::fsutil::copy_tree(&project, &ws, &|_| false, true).unwrap();
        let baseline = Manifest::of(&ws).unwrap();
        std::fs::write(ws.join("mod.txt"), "new\nline\n").unwrap();
        std::fs::remove_file(ws.join("del.txt")).unwrap();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/add.txt"), "hello\n").unwrap();
        let last = Manifest::of(&ws).unwrap();
        let p = project.clone();
        let cs = ChangeSet::compute(&baseline, &last, &ws, None, &|path, _| {
            std::fs::read(p.join(path)).ok()
        });
        (project, ws, cs)
    }

    #[test]
    fn the_change_set_lists_files_and_a_real_diff() {
        let d = TestDir::new("cs-compute");
        let (_, _, cs) = setup(&d);
        let kinds: Vec<(&str, &str)> = cs
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.change.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("del.txt", "deleted"),
                ("mod.txt", "modified"),
                ("sub/add.txt", "added")
            ]
        );
        assert!(
            cs.patch
                .contains("--- a/mod.txt\n+++ b/mod.txt\n@@ -1,2 +1,2 @@\n-old\n+new\n line\n"),
            "{}",
            cs.patch
        );
        assert!(
            cs.patch.contains("--- /dev/null\n+++ b/sub/add.txt"),
            "{}",
            cs.patch
        );
        assert_eq!(cs.patch_sha256, sha256_hex(cs.patch.as_bytes()));
        // The patch is one our own parser reads back.
        assert_eq!(crate::patch::parse(&cs.patch).unwrap().len(), 3);
    }

    #[test]
    fn apply_then_undo_restores_the_exact_bytes() {
        let d = TestDir::new("cs-apply");
        let (project, ws, cs) = setup(&d);
        let before = Manifest::of(&project).unwrap();
        let j = Journal::new(&d.path().join("journal"), &project);
        let undo = d.path().join("undo");
        assert_eq!(cs.apply(&project, &ws, &undo, &j).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(project.join("mod.txt")).unwrap(),
            "new\nline\n"
        );
        assert!(!project.join("del.txt").exists());
        assert_eq!(
            std::fs::read_to_string(project.join("sub/add.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(cs.undo(&project, &undo, &j).unwrap(), 3);
        let after = Manifest::of(&project).unwrap();
        let files = |m: &Manifest| {
            m.entries
                .iter()
                .map(|e| (e.path.clone(), e.sha256.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(files(&after), files(&before));
    }

    /// A private file (0600) the change set edits or deletes keeps its
    /// bits through the apply and gets them back from the undo: git's
    /// 0644 made it world-readable, and undo left it so.
    #[test]
    fn apply_keeps_a_files_own_mode_and_undo_restores_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = TestDir::new("cs-apply-mode");
        let (project, ws, cs) = setup(&d);
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        set(&project.join("mod.txt"), 0o600);
        set(&project.join("del.txt"), 0o640);
        let j = Journal::new(&d.path().join("journal"), &project);
        let undo = d.path().join("undo");
        assert_eq!(cs.apply(&project, &ws, &undo, &j).unwrap(), 3);
        assert_eq!(mode(&project.join("mod.txt")), 0o600);
        assert_eq!(
            mode(&project.join("sub/add.txt")),
            0o644,
            "a new file: git's"
        );
        assert_eq!(cs.undo(&project, &undo, &j).unwrap(), 3);
        assert_eq!(mode(&project.join("mod.txt")), 0o600);
        assert_eq!(mode(&project.join("del.txt")), 0o640);
        // The executable bit a change set turns on or off goes with the
        // file's own bits.
        assert_eq!(kept_mode(0o600, true), 0o700);
        assert_eq!(kept_mode(0o640, true), 0o750);
        assert_eq!(kept_mode(0o750, false), 0o640);
        assert_eq!(kept_mode(0o4755, true), 0o755);
    }

    #[test]
    fn a_conflict_applies_nothing_and_names_every_file() {
        let d = TestDir::new("cs-conflict");
        let (project, ws, cs) = setup(&d);
        std::fs::write(project.join("mod.txt"), "the user edited this\n").unwrap();
        std::fs::write(project.join("sub_add_guard"), "x").unwrap();
        std::fs::create_dir_all(project.join("sub")).unwrap();
        std::fs::write(project.join("sub/add.txt"), "user's own file\n").unwrap();
        let j = Journal::new(&d.path().join("journal"), &project);
        let e = cs
            .apply(&project, &ws, &d.path().join("undo"), &j)
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("mod.txt: the project's file changed"),
            "{text}"
        );
        assert!(
            text.contains("sub/add.txt: the project's file changed"),
            "{text}"
        );
        assert!(project.join("del.txt").exists(), "nothing half-applied");
        assert_eq!(
            std::fs::read_to_string(project.join("mod.txt")).unwrap(),
            "the user edited this\n"
        );
    }

    #[test]
    fn names_that_could_forge_a_header_are_quoted_as_git_does() {
        assert_eq!(quote_path("b/", "plain/name.py"), "b/plain/name.py");
        assert_eq!(quote_path("b/", "x\n+++ b/evil"), "\"b/x\\n+++ b/evil\"");
        assert_eq!(quote_path("a/", "q\"uote\\"), "\"a/q\\\"uote\\\\\"");
        assert_eq!(quote_path("a/", "bell\u{7}"), "\"a/bell\\007\"");
        // Quoted, a name cannot start a line of its own.
        assert!(!quote_path("b/", "x\n+++ b/evil").contains('\n'));
    }

    #[test]
    fn a_mode_change_alone_is_a_change_and_applies() {
        use std::os::unix::fs::PermissionsExt;
        let d = TestDir::new("cs-mode");
        let project = d.path().join("project");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("tool.sh"), "echo hi\n").unwrap();
        std::fs::set_permissions(
            project.join("tool.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        crate::fsutil::copy_tree(&project, &ws, &|_| false, true).unwrap();
        let baseline = Manifest::of(&ws).unwrap();
        std::fs::set_permissions(ws.join("tool.sh"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let last = Manifest::of(&ws).unwrap();
        let p = project.clone();
        let cs = ChangeSet::compute(&baseline, &last, &ws, None, &|path, _| {
            std::fs::read(p.join(path)).ok()
        });
        assert_eq!(cs.files.len(), 1);
        assert!(
            cs.patch.contains("old mode 100755\nnew mode 100644"),
            "{}",
            cs.patch
        );
        let j = Journal::new(&d.path().join("journal"), &project);
        cs.apply(&project, &ws, &d.path().join("undo"), &j).unwrap();
        let mode = std::fs::metadata(project.join("tool.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(cs.standing(&project).unwrap(), Standing::After);
    }

    /// What picks the program the host runs in a directory (a toolchain or
    /// version file, a package manager's own release, an editor's or an
    /// agent's settings) is host-executable wherever it lies; files that
    /// only look alike are not.
    #[test]
    fn toolchain_version_and_editor_files_the_host_picks_up_are_host_executable() {
        let rules: Vec<String> = HOST_EXECUTABLE.iter().map(|s| s.to_string()).collect();
        let host = crate::Protected::new(&rules).unwrap();
        for path in [
            "rust-toolchain.toml",
            "rust-toolchain",
            "crates/x/rust-toolchain.toml",
            ".tool-versions",
            "svc/.tool-versions",
            ".mise.toml",
            "mise.toml",
            ".config/mise.toml",
            ".mise/tasks/build",
            ".python-version",
            "app/.ruby-version",
            ".node-version",
            ".nvmrc",
            "global.json",
            ".yarn/releases/yarn-4.1.0.cjs",
            ".yarn/plugins/p.cjs",
            ".pnp.cjs",
            ".pnp.loader.mjs",
            ".zed/settings.json",
            ".helix/languages.toml",
            ".nvim.lua",
            ".exrc",
            ".claude/settings.json",
            "web/.claude/settings.local.json",
            ".mcp.json",
            ".cursor/mcp.json",
            ".gemini/settings.json",
            ".config/mise/config.toml",
            "bunfig.toml",
            ".pdbrc",
            "vendor/lib/.hg/hgrc",
            ".go-version",
            "svc/.java-version",
            ".terraform-version",
            ".sdkmanrc",
            "mise.dev.toml",
            ".nvimrc",
            ".vimrc",
            "app/.gvimrc",
            ".devcontainer.json",
            ".irbrc",
            ".pryrc",
            ".gdbinit",
            "lefthook.yml",
            ".lintstagedrc",
            ".lintstagedrc.json",
            "lint-staged.config.js",
            ".simple-git-hooks.json",
        ] {
            assert!(
                host.matching(path).is_some(),
                "{path} is not host-executable"
            );
        }
        for path in [
            "docs/rust-toolchain.md",
            "src/tool_versions.rs",
            "python-version.txt",
            "config/global.json.example",
            "yarn.lock",
            ".claude/commands/review.md",
            "README.md",
            "docs/vimrc.md",
            "devcontainer.md",
            "lefthook.md",
        ] {
            assert_eq!(
                host.matching(path),
                None,
                "{path} is taken for host-executable"
            );
        }
    }
}
