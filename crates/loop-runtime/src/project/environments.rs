//! Dependency environments a project keeps outside what git tracks (a
//! Python venv, `node_modules`, Cargo's `target/`, Go's `vendor/`): which
//! a task would share, how, and why. Declared in the Loopfile's
//! `workspace.share`, or detected per stack unless `workspace.detect:
//! false`, and the toolchain caches each stack builds from. `loop audit`
//! shows the plan; `with_environments` puts it in the sandbox's
//! view.

use crate::Error;
use crate::loopfile::Loopfile;
pub use crate::loopfile::sections::{Share, ShareMode};
use loop_workspace::Manifest;
use loop_workspace::door;
use std::path::Path;

/// Where a share stands in the project now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Standing {
    /// A real directory, with this many files and bytes.
    Present {
        /// Regular files under it.
        files: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// Nothing there (yet).
    Missing,
    /// It cannot be shared, and why (a link, not a directory, tracked).
    Refused {
        /// Why.
        why: String,
    },
}

/// A shared environment's content: a directory's manifest, or for a
/// single file (a setup output such as a generated `_version.py`) the
/// manifest of that file alone (named by its file name).
#[allow(clippy::disallowed_methods)] // lstat and hash of the project's own environment (never the workspace)
pub fn digest(path: &Path) -> std::io::Result<loop_workspace::Manifest> {
    let m = std::fs::symlink_metadata(path)?;
    if !m.is_file() {
        return loop_workspace::Manifest::of(path);
    }
    use std::os::unix::fs::PermissionsExt;
    Ok(loop_workspace::Manifest::from_entries(vec![
        loop_workspace::Entry {
            path: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            kind: loop_workspace::EntryKind::File,
            sha256: loop_workspace::manifest::hash_file(path)?,
            size: m.len(),
            executable: m.permissions().mode() & 0o100 != 0,
            raw_path: None,
        },
    ]))
}

/// The files of a shared Python environment `env` (a venv of `project`)
/// that name the project's directory: an editable install's `.pth` (a
/// path, or an import hook's line) and setuptools' `__editable__…finder.py`
/// (its map of packages to their directories), each under 256 KiB, in
/// `lib/python*/site-packages`. A task's commands see them naming their
/// own workspace instead (see `loop_sandbox::Repoint`), so `import pkg` is
/// the task's code, not the checkout's.
#[allow(clippy::disallowed_methods)] // reads the project's own environment (never the workspace), small files only
pub fn editable_links(env: &Path, project: &Path) -> Vec<loop_sandbox::Repoint> {
    let mut out = Vec::new();
    if !env.join("pyvenv.cfg").is_file() {
        return out;
    }
    let mut names: Vec<String> = vec![project.display().to_string()];
    if let Ok(real) = project.canonicalize() {
        let real = real.display().to_string();
        if !names.contains(&real) {
            names.push(real);
        }
    }
    let Ok(libs) = std::fs::read_dir(env.join("lib")) else {
        return out;
    };
    let mut libs: Vec<String> = libs
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("python"))
        .collect();
    libs.sort();
    for lib in libs {
        let site = format!("lib/{lib}/site-packages");
        let Ok(items) = std::fs::read_dir(env.join(&site)) else {
            continue;
        };
        let mut files: Vec<String> = items
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.ends_with(".pth") || (n.starts_with("__editable__") && n.ends_with("finder.py"))
            })
            .collect();
        files.sort();
        for name in files {
            let rel = format!("{site}/{name}");
            let small = std::fs::symlink_metadata(env.join(&rel))
                .is_ok_and(|m| m.is_file() && m.len() <= 256 * 1024);
            let Some(text) = small
                .then(|| std::fs::read_to_string(env.join(&rel)).ok())
                .flatten()
            else {
                continue;
            };
            for from in &names {
                let r = loop_sandbox::Repoint {
                    rel: rel.clone(),
                    text: text.clone(),
                    from: from.clone(),
                };
                // Only a file that names the project as a path.
                if r.text_for("\0") != text {
                    out.push(r);
                    break;
                }
            }
        }
    }
    out
}

/// The directories directly inside a shared environment at `path` that
/// its tools write as caches while the packages are only read (vitest and
/// Vite's `.vite`, babel's and others' `.cache`, …): writable in a
/// read-only share, fresh for each command.
pub fn tool_caches(path: &str) -> &'static [&'static str] {
    match path.rsplit('/').next() {
        Some("node_modules") => &[".vite", ".vitest", ".cache", ".jest-cache"],
        _ => &[],
    }
}

/// Environments detected in `project`: top-level directories holding a
/// `pyvenv.cfg` (Python virtual environments), and each stack's directory
/// beside its marker file.
pub fn detect(project: &Path) -> Vec<Share> {
    let mut out = Vec::new();
    if let Ok(items) = door::list(project, None) {
        let mut venvs: Vec<String> = items
            .into_iter()
            .filter(|n| door::is_dir(project, n))
            .filter(|n| door::is_file(project, format!("{n}/pyvenv.cfg")))
            .filter(|n| n != ".git" && n != ".loop")
            // Shares are protected by their path as a glob: none with glob syntax.
            .filter(|n| !n.contains(['*', '?', '[', ']', '{', '}', '\\']))
            .collect();
        venvs.sort();
        out.extend(venvs.into_iter().map(|path| Share {
            path,
            mode: ShareMode::ReadOnly,
            why: "a Python virtual environment (pyvenv.cfg)".into(),
            declared: false,
        }));
    }
    for (dir, marker, cow, why) in crate::project::stacks::ENVIRONMENTS {
        if door::is_file(project, marker)
            && !matches!(
                door::node(project, dir),
                Ok(loop_workspace::Node::Missing) | Err(_)
            )
        {
            out.push(Share {
                path: dir.to_string(),
                mode: if *cow {
                    ShareMode::Overlay
                } else {
                    ShareMode::ReadOnly
                },
                why: why.to_string(),
                declared: false,
            });
        }
    }
    out
}

/// What a task in `project` would share under `loopfile`: the declared
/// shares, then (unless detection is off) the detected ones not declared.
pub fn plan(project: &Path, loopfile: &Loopfile) -> Vec<Share> {
    let mut out: Vec<Share> = loopfile.shares.clone();
    if !loopfile.no_share_detection {
        for s in detect(project) {
            if !out.iter().any(|d| d.path == s.path) {
                out.push(s);
            }
        }
    }
    out
}

/// Files a Python build backend writes into the tree from the
/// repository's history, as `pyproject.toml` names them: hatch-vcs's
/// `version-file` (`[tool.hatch.build.hooks.vcs]`) and setuptools-scm's
/// `version_file` or `write_to` (`[tool.setuptools_scm]`). An editable
/// install made them in the checkout (`src/pkg/_version.py`, ignored by
/// git), and the package imports them: a task shares each one present
/// read-only at its place, as it found it, never in the change set.
/// Relative plain paths only.
pub fn generated_files(project: &Path) -> Vec<String> {
    let text = door::read_text(project, "pyproject.toml", door::MAX_PROJECT_FILE)
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut section = String::new();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        // The whole dotted name, however it is split between the table
        // header and the key (`[tool.hatch]` with `build.hooks.vcs.version-file`).
        let unquote = |part: &str| part.trim().trim_matches('"').trim_matches('\'').to_string();
        let full: Vec<String> = section
            .split('.')
            .chain(key.split('.'))
            .map(unquote)
            .filter(|p| !p.is_empty())
            .collect();
        let full = full.join(".");
        let named = matches!(
            full.as_str(),
            "tool.hatch.build.hooks.vcs.version-file"
                | "tool.hatch.build.hooks.vcs.version_file"
                | "tool.setuptools_scm.version_file"
                | "tool.setuptools_scm.write_to"
                | "tool.setuptools-scm.version_file"
                | "tool.setuptools-scm.write_to"
        );
        if !named {
            continue;
        }
        let value = value.split('#').next().unwrap_or("").trim();
        let Some(path) = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        else {
            continue;
        };
        let plain = !path.is_empty()
            && !path.starts_with('/')
            && path
                .split('/')
                .all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\\'));
        if plain && !out.iter().any(|o| o == path) {
            out.push(path.to_string());
        }
    }
    out
}

/// Where `share` stands in `project`: a real directory (counted, links
/// not followed), missing, or refused with the reason.
#[allow(clippy::disallowed_methods)] // lstat and file types only, links refused and never followed; no content read
pub fn standing(project: &Path, share: &Share, tracked: &dyn Fn(&str) -> bool) -> Standing {
    // Every parent a real directory: a link on the way (`a -> ~` with
    // `a/.ssh` declared) would share whatever it leads to.
    if let Some(parent) = Path::new(&share.path).parent()
        && !real_dirs_on_the_way(project, parent)
    {
        return Standing::Refused {
            why: "a symbolic link or a file on its way: only a real directory is shared".into(),
        };
    }
    let full = project.join(&share.path);
    let Ok(meta) = std::fs::symlink_metadata(&full) else {
        return Standing::Missing;
    };
    if meta.file_type().is_symlink() {
        return Standing::Refused {
            why: "a symbolic link: only a real directory is shared".into(),
        };
    }
    if !meta.is_dir() {
        return Standing::Refused {
            why: "not a directory".into(),
        };
    }
    if tracked(&share.path) {
        return Standing::Refused {
            why: "git tracks files in it: the task has its own copy".into(),
        };
    }
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![full];
    while let Some(dir) = stack.pop() {
        let Ok(items) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in items.flatten() {
            let Ok(t) = item.file_type() else { continue };
            if t.is_dir() {
                stack.push(item.path());
            } else if t.is_file() {
                files += 1;
                bytes += item.metadata().map_or(0, |m| m.len());
            }
        }
    }
    Standing::Present { files, bytes }
}

/// The interpreter prefixes a shared environment's `bin/` links lead to
/// (a venv's `python3 -> ~/.pyenv/versions/3.11.7/bin/python3`), followed
/// link by link (at most 16), so the sandbox can show them read-only where
/// the usual view does not. Only a prefix that holds an interpreter's
/// library (`lib/python3*`) is taken, and never one that is or holds a
/// home directory (an interpreter installed with `--prefix=$HOME`): a
/// link cannot make a home directory or `/` visible.
#[allow(clippy::disallowed_methods)] // follows an environment's bin/ links on purpose, only to pick which interpreter prefix to show read-only; reads no content
pub fn interpreter_trees(env: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    let Ok(items) = std::fs::read_dir(env.join("bin")) else {
        return out;
    };
    for item in items.flatten() {
        let mut at = item.path();
        for _ in 0..16 {
            let Ok(target) = std::fs::read_link(&at) else {
                break;
            };
            let next = match at.parent() {
                Some(dir) if target.is_relative() => dir.join(&target),
                _ => target,
            };
            if let Some(prefix) = next
                .parent()
                .filter(|d| d.ends_with("bin"))
                .and_then(Path::parent)
                && !prefix.starts_with(env)
                && prefix.components().count() > 2
                && holds_python_lib(prefix)
                && !holds_a_home(prefix)
                && !out.iter().any(|o| o == prefix)
            {
                out.push(prefix.to_path_buf());
            }
            at = next;
        }
    }
    out
}

/// Whether `dir` is, or holds, a home directory: this process's `HOME`,
/// `/root`, or one directly in `/home`.
fn holds_a_home(dir: &Path) -> bool {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    home.is_some_and(|h| h.starts_with(dir))
        || Path::new("/root").starts_with(dir)
        || dir.starts_with("/home") && dir.components().count() <= 3
}

/// Whether `prefix/lib` holds a `python3*` directory.
#[allow(clippy::disallowed_methods)] // an interpreter prefix outside the project, names only
fn holds_python_lib(prefix: &Path) -> bool {
    std::fs::read_dir(prefix.join("lib")).is_ok_and(|items| {
        items.flatten().any(|i| {
            i.file_name().to_string_lossy().starts_with("python3")
                && i.file_type().is_ok_and(|t| t.is_dir())
        })
    })
}

/// Whether each component of `rel` under `base` is a real directory (no
/// link followed; an empty `rel` is).
#[allow(clippy::disallowed_methods)] // lstat only: the check that no link is on the way
pub fn real_dirs_on_the_way(base: &Path, rel: &Path) -> bool {
    let mut at = base.to_path_buf();
    for part in rel.components() {
        at.push(part);
        let real =
            std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir() && !m.file_type().is_symlink());
        if !real {
            return false;
        }
    }
    true
}

/// Whether git tracks anything under `path` in `project` (false outside a
/// repository, or when git is not there to ask).
pub fn tracked_in_git(project: &Path, path: &str) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(project)
        .args(["ls-files", "-z", "--"])
        .arg(path)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

/// A toolchain cache outside the project, shown read-only to a task of a
/// stack that builds from it offline.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cache {
    /// The cache directory (an existing, real directory).
    pub path: std::path::PathBuf,
    /// Variables that point the toolchain at it (the task's `HOME` is
    /// private, so the default place would be empty); none for the caches
    /// a toolchain would write into even to read them (npm, pip).
    pub env: Vec<(String, String)>,
    /// The stack, and its marker.
    pub why: String,
}

/// The toolchain caches a task in `project` reads: Cargo's registry and
/// git checkouts (`Cargo.toml`), Go's module cache (`go.mod`), npm's cache
/// (`package.json`) and pip's (a venv, `pyproject.toml` or
/// `requirements.txt`), wherever the runtime's environment puts them.
/// Only real directories are taken; credentials in a toolchain's home
/// (`~/.cargo/credentials.toml`, `~/.npmrc`) stay outside them and denied.
pub fn caches(project: &Path) -> Vec<Cache> {
    caches_for(project, &|k| {
        std::env::var_os(k).map(std::path::PathBuf::from)
    })
}

fn caches_for(project: &Path, var: &dyn Fn(&str) -> Option<std::path::PathBuf>) -> Vec<Cache> {
    let home = var("HOME");
    let at_home = |rel: &str| home.as_ref().map(|h| h.join(rel));
    let has = |m: &str| door::is_file(project, m);
    let mut out = Vec::new();
    let mut take = |path: Option<std::path::PathBuf>, env: Vec<(String, String)>, why: &str| {
        let Some(path) = path else { return };
        // The user's own caches (from the environment), not the project's.
        #[allow(clippy::disallowed_methods)]
        let real = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if real && path.is_absolute() && !out.iter().any(|c: &Cache| c.path == path) {
            out.push(Cache {
                path,
                env,
                why: why.into(),
            });
        }
    };
    let show = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    if has("Cargo.toml") {
        let cargo_home = var("CARGO_HOME").or_else(|| at_home(".cargo"));
        let env = vec![("CARGO_HOME".to_string(), show(&cargo_home))];
        for sub in ["registry", "git"] {
            take(
                cargo_home.as_ref().map(|h| h.join(sub)),
                env.clone(),
                "Cargo's crates (Cargo.toml)",
            );
        }
    }
    if has("go.mod") {
        let cache = var("GOMODCACHE").or_else(|| {
            var("GOPATH")
                .or_else(|| at_home("go"))
                .map(|g| g.join("pkg/mod"))
        });
        // No GOFLAGS: Go picks `vendor/` itself when the project has one,
        // and `-mod=mod` would let it rewrite go.mod and go.sum.
        let env = vec![
            ("GOMODCACHE".to_string(), show(&cache)),
            ("GOPROXY".to_string(), "off".to_string()),
        ];
        take(cache, env, "Go's modules (go.mod)");
    }
    if has("package.json") {
        // Readable, not pointed at: npm and pip write into their caches
        // even to read them, and a task's installs go through `setup:`.
        let cache = var("npm_config_cache").or_else(|| at_home(".npm"));
        take(cache, Vec::new(), "npm's cache (package.json)");
    }
    let python = has("pyproject.toml")
        || has("requirements.txt")
        || door::list(project, None).is_ok_and(|items| {
            items
                .iter()
                .any(|n| door::is_file(project, format!("{n}/pyvenv.cfg")))
        });
    if python {
        let cache = var("PIP_CACHE_DIR").or_else(|| {
            var("XDG_CACHE_HOME")
                .or_else(|| at_home(".cache"))
                .map(|c| c.join("pip"))
        });
        take(cache, Vec::new(), "pip's cache (a Python project)");
    }
    out
}

/// Whether the directories on the way to `rel` in `workspace` are real
/// ones where they exist (those missing are made by the caller): a
/// tracked link there would lead a `mkdir` out of the workspace.
#[allow(clippy::disallowed_methods)] // lstat only, of the task's fresh workspace
fn parents_ok(workspace: &Path, rel: &str) -> bool {
    let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
    let mut at = workspace.to_path_buf();
    parent.components().all(|part| {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) => m.is_dir() && !m.file_type().is_symlink(),
            Err(_) => true,
        }
    })
}

/// What setup made, shared from its layer, read-only, before anything of
/// the same name the project has.
#[allow(clippy::disallowed_methods)] // lstat of a setup output's place in the task's workspace (no link on its way: parents_ok), then a new directory made where nothing was
fn shared_setup_outputs(
    project: &Path,
    workspace: &Path,
    setup_outputs: &[(String, String)],
    observer: &mut dyn crate::Observer,
) -> Result<Vec<loop_receipt::SharedEnvironment>, Error> {
    let mut out = Vec::new();
    for (path, source) in setup_outputs {
        let in_ws = workspace.join(path);
        if !parents_ok(workspace, path) {
            return Err(Error::usage(format!(
                "setup output `{path}`: a link or a file on its way in the task's workspace"
            )));
        }
        if std::fs::symlink_metadata(&in_ws).is_ok() {
            return Err(Error::internal(format!(
                "setup output `{path}` is still in the task's workspace"
            )));
        }
        let file = std::fs::symlink_metadata(project.join(source)).is_ok_and(|m| m.is_file());
        if file {
            // A generated file (`_version.py`): an empty file to mount it
            // on, made with no link followed on its way.
            loop_workspace::door::write(workspace, path, b"")
                .map_err(|e| Error::usage(format!("setup output `{path}`: {e}")))?;
        } else {
            std::fs::create_dir_all(&in_ws)
                .map_err(|e| Error::internal(format!("shared `{path}`: {e}")).because(e))?;
        }
        let m = crate::project::environments::digest(&project.join(source))
            .map_err(|e| Error::internal(format!("setup layer `{source}`: {e}")).because(e))?;
        observer.note(&format!(
            "sharing `{path}` read-only from the setup layer ({} files, sha256:{})",
            m.entries.len(),
            &m.root[..12.min(m.root.len())]
        ));
        out.push(loop_receipt::SharedEnvironment {
            path: path.clone(),
            sha256: m.root,
            files: m.entries.len() as u64,
            overlay: false,
            source: Some(source.clone()),
            changed_to: None,
        });
    }
    Ok(out)
}

/// Files the build backend generated into the checkout (a VCS version's
/// `_version.py`), untracked there: shown read-only at their place.
#[allow(clippy::disallowed_methods)] // lstat of the project's generated file and of its place in the task's workspace (no link on either way)
fn shared_generated_files(
    project: &Path,
    workspace: &Path,
    out: &mut Vec<loop_receipt::SharedEnvironment>,
    observer: &mut dyn crate::Observer,
) -> Result<(), Error> {
    for path in crate::project::environments::generated_files(project) {
        if out.iter().any(|o| o.path == path) || tracked_in_git(project, &path) {
            continue;
        }
        let from = project.join(&path);
        let regular = std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file());
        if !regular
            || !parents_ok(project, &path)
            || !parents_ok(workspace, &path)
            || std::fs::symlink_metadata(workspace.join(&path)).is_ok()
        {
            continue;
        }
        let m = crate::project::environments::digest(&from)
            .map_err(|e| Error::internal(format!("shared `{path}`: {e}")).because(e))?;
        // An empty file to mount it on, made with no link followed.
        loop_workspace::door::write(workspace, &path, b"")
            .map_err(|e| Error::usage(format!("shared `{path}`: {e}")))?;
        observer.note(&format!(
            "sharing `{path}` read-only (generated by the build backend, named in pyproject.toml; sha256:{})",
            &m.root[..12.min(m.root.len())]
        ));
        out.push(loop_receipt::SharedEnvironment {
            path,
            sha256: m.root,
            files: 1,
            overlay: false,
            source: None,
            changed_to: None,
        });
    }
    Ok(())
}

/// The dependency environments this task shares. Each planned one that
/// is a real, untracked directory of the project, and is not in the
/// task's workspace, gets an empty directory there for it to be mounted
/// on, and its digest taken (the receipt says which dependency set the
/// result was verified against; for a copy-on-write share, the build
/// outputs the task started from).
#[allow(clippy::disallowed_methods)] // lstat of a setup output's place in the task's workspace (no link on its way: parents_ok), then a new directory made where nothing was
pub(crate) fn share_environments(
    project: &Path,
    workspace: &Path,
    loopfile: &crate::loopfile::Loopfile,
    setup_outputs: &[(String, String)],
    observer: &mut dyn crate::Observer,
) -> Result<Vec<loop_receipt::SharedEnvironment>, Error> {
    let mut out = shared_setup_outputs(project, workspace, setup_outputs, observer)?;
    let tracked = |p: &str| tracked_in_git(project, p);
    for s in plan(project, loopfile) {
        if out
            .iter()
            .any(|o: &loop_receipt::SharedEnvironment| o.path == s.path)
        {
            observer.note(&format!(
                "not shared from the project: `{}` comes from setup",
                s.path
            ));
            continue;
        }
        match standing(project, &s, &tracked) {
            Standing::Present { .. } => {}
            Standing::Missing => {
                if s.declared {
                    observer.note(&format!("not shared: `{}` is not in the project", s.path));
                }
                continue;
            }
            Standing::Refused { why } => {
                observer.note(&format!("not shared: `{}`: {why}", s.path));
                continue;
            }
        }
        let in_ws = workspace.join(&s.path);
        if !parents_ok(workspace, &s.path) {
            observer.note(&format!(
                "not shared: `{}`: a link or a file on its way in the task's workspace",
                s.path
            ));
            continue;
        }
        if std::fs::symlink_metadata(&in_ws).is_ok() {
            observer.note(&format!(
                "not shared: `{}` is already in the task's workspace",
                s.path
            ));
            continue;
        }
        std::fs::create_dir_all(&in_ws)
            .map_err(|e| Error::internal(format!("shared `{}`: {e}", s.path)).because(e))?;
        let m = Manifest::of(&project.join(&s.path))
            .map_err(|e| Error::internal(format!("shared `{}`: {e}", s.path)).because(e))?;
        let overlay = s.mode == ShareMode::Overlay;
        observer.note(&format!(
            "sharing `{}` {} ({}; {} files, sha256:{})",
            s.path,
            if overlay {
                "copy-on-write"
            } else {
                "read-only"
            },
            s.why,
            m.entries.len(),
            &m.root[..12.min(m.root.len())]
        ));
        out.push(loop_receipt::SharedEnvironment {
            path: s.path,
            sha256: m.root,
            files: m.entries.len() as u64,
            overlay,
            source: None,
            changed_to: None,
        });
    }
    shared_generated_files(project, workspace, &mut out, observer)?;
    Ok(out)
}

/// `settings` with the project's environments in view: the shares (each
/// copy-on-write one's layer kept under `layers/<index>` when given: the
/// task's build outputs outlast a command), the interpreter trees they
/// link to and the toolchain caches, read-only, with the variables that
/// point the toolchains at those caches; and, with a setup layer, the
/// workspace also at the path the layer was built in.
pub(crate) fn with_environments(
    mut settings: loop_sandbox::Settings,
    project: &Path,
    layers: Option<&Path>,
    shares: &[loop_receipt::SharedEnvironment],
    setup: Option<&loop_protocol::SetupRecord>,
) -> loop_sandbox::Settings {
    if let Some(s) = setup {
        settings.workspace_aliases = vec![std::path::PathBuf::from(&s.built_at)];
    }
    settings.shares = shares
        .iter()
        .enumerate()
        .map(|(i, s)| loop_sandbox::Share {
            host: project.join(s.content_path()),
            rel: s.path.clone(),
            access: if s.overlay {
                loop_sandbox::ShareAccess::Overlay {
                    keep: layers.map(|l| l.join(i.to_string())),
                }
            } else {
                loop_sandbox::ShareAccess::ReadOnly
            },
            caches: crate::project::environments::tool_caches(&s.path)
                .iter()
                .map(|c| c.to_string())
                .collect(),
            repoint: crate::project::environments::editable_links(
                &project.join(s.content_path()),
                project,
            ),
        })
        .collect();
    let mut trees: Vec<std::path::PathBuf> = Vec::new();
    for s in shares {
        for t in crate::project::environments::interpreter_trees(&project.join(s.content_path())) {
            if !trees.contains(&t) {
                trees.push(t);
            }
        }
    }
    for c in crate::project::environments::caches(project) {
        if !trees.contains(&c.path) {
            trees.push(c.path);
        }
        for kv in c.env {
            if !settings.env.contains(&kv) {
                settings.env.push(kv);
            }
        }
    }
    settings.read_only_trees = trees;
    settings
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn project(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("loop-env-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// The version files hatch-vcs and setuptools-scm write are named;
    /// a path that leaves the project, or sits in another section, is not.
    #[test]
    fn generated_version_files_are_read_from_pyproject() {
        let p = project("generated");
        std::fs::write(
            p.join("pyproject.toml"),
            "[project]\nversion-file = \"not/this.py\"\n\n[tool.hatch.build.hooks.vcs]\nversion-file = \"src/pkg/_version.py\"  # made by the build\n\n[tool.setuptools_scm]\nwrite_to = 'pkg/_v.py'\nversion_file = \"../../etc/passwd\"\n\n[tool.setuptools-scm]\nversion_file = \"/etc/passwd\"\n\n[tool.hatch]\nbuild.hooks.vcs.version-file = \"src/other/_version.py\"\nbuild.hooks.vcs.\"template\" = \"x.py\"\n",
        )
        .unwrap();
        assert_eq!(
            generated_files(&p),
            vec![
                "src/pkg/_version.py".to_string(),
                "pkg/_v.py".to_string(),
                "src/other/_version.py".to_string()
            ]
        );
        std::fs::remove_file(p.join("pyproject.toml")).unwrap();
        assert!(generated_files(&p).is_empty());
        let _ = std::fs::remove_dir_all(&p);
    }

    #[test]
    fn a_home_directory_is_never_shown_as_an_interpreter_tree() {
        for home in ["/root", "/home", "/home/alice", "/"] {
            assert!(holds_a_home(Path::new(home)), "{home}");
        }
        for prefix in [
            "/root/.pyenv/versions/3.11.7",
            "/home/alice/.local/share/uv/python/cpython-3.12",
            "/opt/python/3.12",
            "/usr/local",
        ] {
            assert!(!holds_a_home(Path::new(prefix)), "{prefix}");
        }
    }

    #[test]
    fn stacks_are_detected_by_their_markers_and_declarations_win() {
        let p = project("detect");
        std::fs::create_dir_all(p.join(".venv/lib")).unwrap();
        std::fs::write(p.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::write(p.join(".venv/lib/m.py"), "x = 1\n").unwrap();
        std::fs::create_dir_all(p.join("target/debug")).unwrap();
        std::fs::write(p.join("Cargo.toml"), "[package]\n").unwrap();
        // node_modules without package.json is no Node project's.
        std::fs::create_dir_all(p.join("node_modules")).unwrap();
        let found = detect(&p);
        let paths: Vec<(&str, ShareMode)> =
            found.iter().map(|s| (s.path.as_str(), s.mode)).collect();
        assert_eq!(
            paths,
            vec![
                (".venv", ShareMode::ReadOnly),
                ("target", ShareMode::Overlay)
            ]
        );
        let lf = Loopfile::parse(
            "workspace:\n  share:\n    - path: target\n      mode: read_only\n    - vendor\n",
            "L",
        )
        .unwrap();
        let planned = plan(&p, &lf);
        let got: Vec<(&str, ShareMode, bool)> = planned
            .iter()
            .map(|s| (s.path.as_str(), s.mode, s.declared))
            .collect();
        assert_eq!(
            got,
            vec![
                ("target", ShareMode::ReadOnly, true),
                ("vendor", ShareMode::ReadOnly, true),
                (".venv", ShareMode::ReadOnly, false),
            ]
        );
        let off = Loopfile::parse("workspace:\n  detect: false\n", "L").unwrap();
        assert!(plan(&p, &off).is_empty());
        let none = |_: &str| false;
        assert_eq!(
            standing(&p, &planned[2], &none),
            Standing::Present {
                files: 2,
                bytes: 22
            }
        );
        assert_eq!(standing(&p, &planned[1], &none), Standing::Missing);
        let _ = std::fs::remove_dir_all(&p);
    }

    #[test]
    fn caches_follow_the_stack_and_the_toolchain_variables() {
        let p = project("caches");
        let home = p.join("home");
        for d in [
            ".cargo/registry",
            ".cargo/git",
            "gopath/pkg/mod",
            ".npm",
            ".cache/pip",
        ] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let proj = p.join("proj");
        std::fs::create_dir_all(&proj).unwrap();
        let vars = |k: &str| match k {
            "HOME" => Some(home.clone()),
            "GOPATH" => Some(home.join("gopath")),
            _ => None,
        };
        assert!(caches_for(&proj, &vars).is_empty(), "no stack, no cache");
        for m in ["Cargo.toml", "go.mod", "package.json", "requirements.txt"] {
            std::fs::write(proj.join(m), "").unwrap();
        }
        let got: Vec<(String, String)> = caches_for(&proj, &vars)
            .into_iter()
            .map(|c| {
                let rel = c.path.strip_prefix(&home).unwrap().display().to_string();
                let vars: Vec<&str> = c.env.iter().map(|(k, _)| k.as_str()).collect();
                (rel, vars.join(" "))
            })
            .collect();
        let want = [
            (".cargo/registry", "CARGO_HOME"),
            (".cargo/git", "CARGO_HOME"),
            ("gopath/pkg/mod", "GOMODCACHE GOPROXY"),
            (".npm", ""),
            (".cache/pip", ""),
        ];
        assert_eq!(
            got,
            want.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        );
        // A link is not a cache: it would show whatever it leads to.
        std::fs::remove_dir_all(home.join(".npm")).unwrap();
        std::os::unix::fs::symlink("/etc", home.join(".npm")).unwrap();
        assert!(
            !caches_for(&proj, &vars)
                .iter()
                .any(|c| c.path.ends_with(".npm"))
        );
        let _ = std::fs::remove_dir_all(&p);
    }

    #[test]
    fn a_link_a_file_or_a_tracked_directory_is_never_shared() {
        let p = project("refuse");
        std::os::unix::fs::symlink("/etc", p.join(".venv")).unwrap();
        std::fs::write(p.join("vendor"), "a file").unwrap();
        std::fs::create_dir_all(p.join("node_modules")).unwrap();
        let share = |path: &str| Share {
            path: path.into(),
            mode: ShareMode::ReadOnly,
            why: "declared".into(),
            declared: true,
        };
        let tracked = |p: &str| p == "node_modules";
        std::os::unix::fs::symlink(&p, p.join("home")).unwrap();
        std::fs::create_dir_all(p.join(".ssh")).unwrap();
        for (path, why) in [
            (".venv", "a symbolic link"),
            ("vendor", "not a directory"),
            ("node_modules", "git tracks files in it"),
            ("home/.ssh", "a symbolic link or a file on its way"),
        ] {
            match standing(&p, &share(path), &tracked) {
                Standing::Refused { why: w } => assert!(w.starts_with(why), "{path}: {w}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        let _ = std::fs::remove_dir_all(&p);
    }
}
