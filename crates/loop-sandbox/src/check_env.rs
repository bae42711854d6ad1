//! The environment of an acceptance check.
//!
//! A check runs the contract's command in the delivered workspace, so a
//! file the model leaves there can change what the command means: a
//! `pytest.py` or `unittest/` found before the real one, a `json.py` that
//! replaces the standard library's, a `pytest` script in a directory the
//! `PATH` names. A check's interpreters are therefore started so that they
//! find their own libraries and tools first:
//!
//! - `PATH` is the runtime's own, minus relative entries (`.`, `bin`,
//!   `node_modules/.bin`) and entries inside the workspace;
//! - Python runs with `PYTHONSAFEPATH=1` (3.11+): neither the current
//!   directory (`-m`, `-c`) nor the script's directory is put first on
//!   `sys.path`. A `sitecustomize` the runtime writes into the command's
//!   private tmp (named by `PYTHONPATH`) makes that directory a source of
//!   *modules* searched last, after the standard library and the installed
//!   packages, so the project's own modules still import. It is not put on
//!   `sys.path`: a finder at the end of `sys.meta_path` imports from it,
//!   so nothing there is read as package metadata (a `*.dist-info` whose
//!   `entry_points.txt` names a `pytest11` plugin would otherwise load at
//!   the runner's start and decide every test's outcome);
//! - `PYTHONNOUSERSITE=1`: no per-user packages;
//! - `PYTHONPYCACHEPREFIX` names a private directory: bytecode caches are
//!   read and written there only, never from `__pycache__` beside the
//!   sources (a forged `tests/__pycache__/test_x.cpython-311.pyc` with an
//!   unchecked hash would otherwise replace a protected test module, and
//!   pytest's assertion-rewrite cache follows the same prefix). The hook
//!   makes one exception, for speed: a module whose directory lies where
//!   nothing a task runs can write (the host trees the command is shown, a
//!   read-only share such as the project's venv; judged on its real path,
//!   links resolved) has its bytecode read from that directory's own
//!   `__pycache__` (not a link to another) as without the prefix. Recompiling the standard library and the installed packages
//!   for every check doubled a pytest run (docs/benchmark-history.md).
//!   Anything in the workspace, a private tmp, a share's caches or a
//!   file the runtime rewrote keeps the private prefix.
//!
//! Everything imposed is reported (`NAME=value`) in the check's evidence.

use std::path::Path;

/// The directory, inside a command's private tmp, holding the hook.
pub const PYTHON_DIR: &str = ".loop-engine-python";

/// The `sitecustomize` module written for checks.
const SITECUSTOMIZE: &str = r#"# Written by Loop Engine for an acceptance check (see PYTHONSAFEPATH):
# the directory Python would have searched first is searched last, after
# the standard library and the installed packages.
import importlib.machinery as _machinery
import os as _os
import sys as _sys


def _loop_engine_check_path():
    here = _os.path.dirname(_os.path.abspath(__file__))
    cwd = _os.getcwd()
    first = _sys.argv[0] if _sys.argv else ""
    if first in ("", "-c", "-m"):
        where = cwd
    else:
        where = _os.path.dirname(_os.path.abspath(first))
    # The interpreter's own sitecustomize (a distribution's), if any; never
    # one from the workspace.
    searched = [
        p for p in _sys.path
        if p and _os.path.abspath(p) != here
        and not (_os.path.abspath(p) + "/").startswith(cwd + "/")
    ]
    try:
        import importlib.machinery
        import importlib.util
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", searched)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception:
        pass
    if not _sys.flags.safe_path or where in _sys.path:
        return

    class _LoopEngineProjectModules:
        """Top-level modules of the project's directory, found last; never
        its package metadata (no find_distributions)."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if path is not None:
                return None
            return _machinery.PathFinder.find_spec(name, [where])

        @staticmethod
        def invalidate_caches():
            pass

    _sys.meta_path.append(_LoopEngineProjectModules)


_loop_engine_check_path()
del _loop_engine_check_path


def _loop_engine_bytecode(trusted, untrusted, rewritten):
    """A module's bytecode is read from its own `__pycache__` when that
    directory, links resolved, lies under one of `trusted` (places nothing
    a task runs can write) and under no deeper one of `untrusted`, and its
    source is none of `rewritten`; every other module keeps the private
    PYTHONPYCACHEPREFIX."""
    try:
        import _frozen_importlib_external as external
    except ImportError:
        return
    sep = _os.sep
    roots = [(_os.fsdecode(r).rstrip(sep) + sep, True) for r in trusted]
    roots += [(_os.fsdecode(r).rstrip(sep) + sep, False) for r in untrusted]
    # The deepest root holding a path decides.
    roots.sort(key=lambda root: -len(root[0]))
    rewritten = {_os.fsdecode(r) for r in rewritten}
    prefixed = external.cache_from_source
    judged = {}

    def readable_beside(head):
        ok = judged.get(head)
        if ok is None:
            try:
                # The source's own directory decides, and its `__pycache__`
                # must be that directory's (a link elsewhere, even into a
                # trusted place, would pair its sources with other code).
                real = _os.path.realpath(head)
                cache = _os.path.realpath(_os.path.join(head, "__pycache__"))
                ok = cache == _os.path.join(real, "__pycache__") and next(
                    (t for r, t in roots if (real + sep).startswith(r)), False
                )
            except (OSError, ValueError):
                ok = False
            judged[head] = ok
        return ok

    def cache_from_source(path, debug_override=None, *, optimization=None):
        cached = prefixed(path, debug_override, optimization=optimization)
        path = _os.fspath(path)
        if (
            isinstance(path, str)
            and _os.path.isabs(path)
            and getattr(_sys, "pycache_prefix", None) is not None
            and readable_beside(_os.path.dirname(path))
            and not (rewritten and _os.path.realpath(path) in rewritten)
        ):
            head = _os.path.dirname(path)
            return _os.path.join(head, "__pycache__", _os.path.basename(cached))
        return cached

    external.cache_from_source = cache_from_source


"#;

/// Where a check's modules may have their bytecode read from beside their
/// source (see the module's documentation): paths as the command sees
/// them. The deepest root holding a module's `__pycache__` decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BytecodeTrust {
    /// Nothing a task runs can write under these: the host's trees the
    /// command is shown, more trees it is given, read-only shares.
    pub trusted: Vec<std::path::PathBuf>,
    /// Inside a trusted root, yet written by commands.
    pub untrusted: Vec<std::path::PathBuf>,
    /// Files in a trusted root the runtime shows rewritten to each
    /// command (see `Repoint`).
    pub rewritten: Vec<std::path::PathBuf>,
}

/// `bytes` as a Python bytes literal, every byte escaped.
fn py_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(3 + 4 * bytes.len());
    s.push_str("b\"");
    for b in bytes {
        s.push_str(&format!("\\x{b:02x}"));
    }
    s.push('"');
    s
}

/// Write the hook into `dir` (created), reading bytecode beside its
/// source only where `trust` says.
pub fn write_python_hook(dir: &Path, trust: &BytecodeTrust) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let list = |paths: &[std::path::PathBuf]| {
        let items: Vec<String> = paths
            .iter()
            .map(|p| py_bytes(p.as_os_str().as_bytes()))
            .collect();
        format!("[{}]", items.join(", "))
    };
    let hook = format!(
        "{SITECUSTOMIZE}_loop_engine_bytecode({}, {}, {})\ndel _loop_engine_bytecode\n",
        list(&trust.trusted),
        list(&trust.untrusted),
        list(&trust.rewritten)
    );
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("sitecustomize.py"), hook)
}

/// The variables a check gets: `host_path` reduced to absolute entries
/// outside `workspace`, and Python's safe-path mode with the hook in
/// `hook_dir` (as the command will see it).
pub fn vars(host_path: &str, workspace: &Path, hook_dir: &Path) -> Vec<(String, String)> {
    let path: Vec<&str> = host_path
        .split(':')
        .filter(|e| e.starts_with('/') && !Path::new(e).starts_with(workspace))
        .collect();
    let path = if path.is_empty() {
        "/usr/local/bin:/usr/bin:/bin".to_string()
    } else {
        path.join(":")
    };
    vec![
        ("PATH".to_string(), path),
        ("PYTHONSAFEPATH".to_string(), "1".to_string()),
        ("PYTHONNOUSERSITE".to_string(), "1".to_string()),
        ("PYTHONPATH".to_string(), hook_dir.display().to_string()),
        (
            "PYTHONPYCACHEPREFIX".to_string(),
            hook_dir
                .parent()
                .unwrap_or(hook_dir)
                .join(".loop-engine-pycache")
                .display()
                .to_string(),
        ),
    ]
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn path_keeps_only_absolute_entries_outside_the_workspace() {
        let v = vars(
            ".:/usr/bin:node_modules/.bin:/ws/bin:/ws:/opt/x/bin::/bin",
            Path::new("/ws"),
            Path::new("/tmp/h"),
        );
        assert_eq!(v[0], ("PATH".into(), "/usr/bin:/opt/x/bin:/bin".into()));
        assert!(v.contains(&("PYTHONSAFEPATH".into(), "1".into())));
        assert!(v.contains(&("PYTHONPATH".into(), "/tmp/h".into())));
        assert!(v.contains(&(
            "PYTHONPYCACHEPREFIX".into(),
            "/tmp/.loop-engine-pycache".into()
        )));
        // /wsx is not inside /ws.
        let v = vars("/wsx/bin", Path::new("/ws"), Path::new("/h"));
        assert_eq!(v[0].1, "/wsx/bin");
        let v = vars("./bin", Path::new("/ws"), Path::new("/h"));
        assert_eq!(v[0].1, "/usr/local/bin:/usr/bin:/bin");
    }
}
