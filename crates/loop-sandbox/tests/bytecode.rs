//! A check's Python reads a module's bytecode from its own `__pycache__`
//! only where nothing a task runs can write it: the host's read-only view
//! and a read-only share. Each planted `.pyc` here was compiled from other
//! code than its source, with a header that matches the source's time and
//! size, so which code runs says which was read: the bytecode where it is
//! trusted (the honest speed-up), the source where a model could have
//! forged it (in the workspace, behind a link into it, or with nothing
//! enforcing the host's view read-only).
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_sandbox::{ExecRequest, Layers, Share, ShareAccess, run};
use std::path::{Path, PathBuf};
use std::process::Command;

const PYTHON: &str = "/usr/bin/python3";

/// `dir/name.py` says `VALUE = "source__"`; its bytecode beside it (a
/// timestamp `.pyc` valid for that source's time and size) says
/// `VALUE = "bytecode"`.
fn plant(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let script = r#"
import importlib.util, os, py_compile, sys
src = os.path.join(sys.argv[1], sys.argv[2] + ".py")
def put(text):
    with open(src, "w") as f:
        f.write(text)
    os.utime(src, (1600000000, 1600000000))
put('VALUE = "bytecode"\n')
py_compile.compile(src, cfile=importlib.util.cache_from_source(src), doraise=True,
                   invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
put('VALUE = "source__"\n')
"#;
    let st = Command::new(PYTHON)
        .args(["-I", "-c", script])
        .arg(dir)
        .arg(name)
        .status()
        .unwrap();
    assert!(st.success(), "planting {name} in {}", dir.display());
}

/// What `import name` (from `dir`) gives `VALUE` in a check.
fn value_in_check(req: &mut ExecRequest, dir: &Path, name: &str) -> String {
    let script = format!(
        "import sys; sys.path.insert(0, {:?}); import {name}; print({name}.VALUE)",
        dir.display().to_string()
    );
    python_in_check(req, &[&script])
}

/// What `python3 -c ARGS…` prints, run as a check (it must succeed).
fn python_in_check(req: &mut ExecRequest, args: &[&str]) -> String {
    req.program = loop_sandbox::Program::Argv(
        [PYTHON, "-c"]
            .iter()
            .chain(args)
            .map(|a| a.to_string())
            .collect(),
    );
    req.check = true;
    let r = run(req).unwrap();
    assert_eq!(
        r.exit_code,
        Some(0),
        "{} {}",
        r.stdout.excerpt(),
        r.stderr.excerpt()
    );
    r.stdout.excerpt().trim().to_string()
}

/// A test's directories: host trees (`0`, not under `/tmp`: a command's
/// own `/tmp` is private and writable) and the workspace's parent (`1`,
/// apart: what lies beside a workspace is hidden from its commands).
struct Base(PathBuf, PathBuf);

impl Base {
    fn new(name: &str) -> Base {
        let leaf = format!("loop-bytecode-{name}-{}", std::process::id());
        let trees = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&leaf);
        let ws = std::env::temp_dir().join(&leaf);
        for d in [&trees, &ws] {
            let _ = std::fs::remove_dir_all(d);
        }
        std::fs::create_dir_all(&trees).unwrap();
        std::fs::create_dir_all(ws.join("ws")).unwrap();
        Base(trees.canonicalize().unwrap(), ws.canonicalize().unwrap())
    }
    fn ws(&self) -> PathBuf {
        self.1.join("ws")
    }
}

impl Drop for Base {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

#[test]
fn bytecode_is_read_beside_its_source_only_where_no_task_could_have_written_it() {
    let b = Base::new("where");
    // A host tree the command sees read-only: its bytecode is read.
    let host = b.0.join("tool/lib");
    plant(&host, "hostmod");
    let mut req = ExecRequest::shell("true", b.ws());
    req.read_only_trees = vec![b.0.join("tool")];
    assert_eq!(value_in_check(&mut req, &host, "hostmod"), "bytecode");
    // The same in the workspace: forged there, never read.
    plant(&b.ws().join("lib"), "wsmod");
    assert_eq!(
        value_in_check(&mut req, &b.ws().join("lib"), "wsmod"),
        "source__"
    );
    // A read-only tree's package that is a link into the workspace: its
    // `__pycache__` is the workspace's, whatever path names it.
    plant(&b.ws().join("pkg"), "linkmod");
    std::os::unix::fs::symlink(b.ws().join("pkg"), host.join("linked")).unwrap();
    assert_eq!(
        value_in_check(&mut req, &host.join("linked"), "linkmod"),
        "source__"
    );
    // A workspace directory whose `__pycache__` is a link to a trusted
    // one: its sources are never paired with that code (here a source of
    // the same name, time and size as the trusted one's).
    let tests = b.ws().join("tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::copy(host.join("hostmod.py"), tests.join("hostmod.py")).unwrap();
    let when = std::fs::metadata(host.join("hostmod.py"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(tests.join("hostmod.py"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    std::os::unix::fs::symlink(host.join("__pycache__"), tests.join("__pycache__")).unwrap();
    assert_eq!(value_in_check(&mut req, &tests, "hostmod"), "source__");
    // With nothing holding the host's view read-only (no namespaces, no
    // Landlock), nothing there is trusted either.
    req.layers = Layers {
        namespaces: false,
        landlock: false,
        seccomp: true,
        cgroups: false,
    };
    assert_eq!(value_in_check(&mut req, &host, "hostmod"), "source__");
}

#[test]
fn a_read_only_shares_bytecode_is_read_and_its_caches_never() {
    let b = Base::new("share");
    let env = b.0.join("project/.venv");
    let site = env.join("lib/site");
    plant(&site, "shared");
    plant(&env.join("cache"), "cached");
    std::fs::create_dir_all(b.ws().join(".venv")).unwrap();
    let mut req = ExecRequest::shell("true", b.ws());
    req.shares = vec![Share {
        host: env.clone(),
        rel: ".venv".into(),
        access: ShareAccess::ReadOnly,
        caches: vec![],
        repoint: vec![],
    }];
    let seen = b.ws().join(".venv");
    assert_eq!(
        value_in_check(&mut req, &seen.join("lib/site"), "shared"),
        "bytecode"
    );
    // Shared copy-on-write, the check's own processes could write it.
    req.shares[0].access = ShareAccess::Overlay { keep: None };
    assert_eq!(
        value_in_check(&mut req, &seen.join("lib/site"), "shared"),
        "source__"
    );
    // Its cache directory is fresh and writable in each command: bytecode
    // the check itself puts there is never read.
    req.shares[0].access = ShareAccess::ReadOnly;
    req.shares[0].caches = vec!["cache".into()];
    assert_eq!(forged_in_check(&mut req, &seen.join("cache")), "source__");
    assert_eq!(
        value_in_check(&mut req, &seen.join("lib/site"), "shared"),
        "bytecode"
    );
}

#[test]
fn bytecode_a_check_forges_where_it_may_write_is_never_read() {
    let b = Base::new("forged");
    let mut req = ExecRequest::shell("true", b.ws());
    for place in [b.ws().join("lib"), PathBuf::from("/tmp/lib")] {
        assert_eq!(forged_in_check(&mut req, &place), "source__", "{place:?}");
    }
    // Where the command may not write, there is nothing to forge.
    for place in ["/dev/shm/lib", "/run/lib"] {
        let got = forged_in_check(&mut req, Path::new(place));
        assert!(got == "source__" || got == "unwritable", "{place}: {got}");
    }
}

/// In a check, put a module and bytecode of other code beside it in
/// `dir`, then import it: what its `VALUE` is, or `unwritable`.
fn forged_in_check(req: &mut ExecRequest, dir: &Path) -> String {
    let script = r#"
import importlib.util, os, py_compile, sys
d = sys.argv[1]
try:
    os.makedirs(os.path.join(d, "__pycache__"), exist_ok=True)
    src = os.path.join(d, "forged.py")
    def put(text):
        with open(src, "w") as f:
            f.write(text)
        os.utime(src, (1600000000, 1600000000))
    put('VALUE = "bytecode"\n')
    pyc = os.path.join(d, "__pycache__", "forged." + sys.implementation.cache_tag + ".pyc")
    py_compile.compile(src, cfile=pyc, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    put('VALUE = "source__"\n')
except OSError:
    print("unwritable")
    sys.exit(0)
sys.path.insert(0, d)
import forged
print(forged.VALUE)
"#;
    python_in_check(req, &[script, &dir.display().to_string()])
}
