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
//!   pytest's assertion-rewrite cache follows the same prefix).
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
"#;

/// Write the hook into `dir` (created).
pub fn write_python_hook(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("sitecustomize.py"), SITECUSTOMIZE)
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
