//! The one stack detector: which toolchains a project uses (by their
//! marker files), the untracked environments each keeps, and the build,
//! test and lint commands that are its own checks. The dependency
//! environments (`environments.rs`) and the drafted contract's default
//! checks both come from here.

use std::path::Path;

/// Whether a check's output names the tests it ran in a form the
/// verifier reads (so `nonempty_tests` can hold it to running some).
pub fn counts_tests(c: &StackCheck) -> bool {
    c.kind == "test" && matches!(c.stack, "python" | "rust" | "go" | "node" | "cmake") && c.counted
}

/// A detected project check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StackCheck {
    /// `python`, `rust`, `go`, `node`, `cmake`, `make`.
    pub stack: &'static str,
    /// `build`, `test` or `lint`.
    pub kind: &'static str,
    /// The shell command.
    pub command: String,
    /// Why this command (the marker, the runner found).
    pub why: String,
    /// Its runner's summary is one the verifier reads.
    #[serde(skip)]
    pub counted: bool,
}

impl StackCheck {
    /// The criterion id it gets in a contract: `stack-python-test` for a
    /// detected check, `project-test` for one the Loopfile declares.
    pub fn criterion_id(&self) -> String {
        match self.stack {
            "project" => format!("project-{}", self.kind),
            stack => format!("stack-{stack}-{}", self.kind),
        }
    }
}

/// An untracked environment a stack keeps beside its marker: (directory,
/// marker, copy-on-write, why).
pub const ENVIRONMENTS: &[(&str, &str, bool, &str)] = &[
    (
        "node_modules",
        "package.json",
        false,
        "Node packages (package.json)",
    ),
    (
        "target",
        "Cargo.toml",
        true,
        "Cargo build output (Cargo.toml): the task's writes stay in the task",
    ),
    ("vendor", "go.mod", false, "Go vendored modules (go.mod)"),
];

fn has(dir: &Path, name: &str) -> bool {
    loop_workspace::door::is_file(dir, name)
}

fn text(dir: &Path, name: &str) -> String {
    loop_workspace::door::read_text(dir, name, loop_workspace::door::MAX_PROJECT_FILE)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// A top-level Python virtual environment of `dir` (a directory holding
/// `pyvenv.cfg`), by name.
pub fn venv(dir: &Path) -> Option<String> {
    let mut found: Vec<String> = loop_workspace::door::list(dir, None)
        .ok()?
        .into_iter()
        .filter(|n| loop_workspace::door::is_dir(dir, n))
        .filter(|n| loop_workspace::door::is_file(dir, format!("{n}/pyvenv.cfg")))
        .filter(|n| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Whether `dir` looks like a Python project: a project file, a
/// requirements file, or Python tests at the top or in `tests/`.
fn python_project(dir: &Path) -> bool {
    let named_test = |sub: Option<&Path>| {
        loop_workspace::door::list(dir, sub).is_ok_and(|items| {
            items
                .iter()
                .any(|n| (n.starts_with("test_") && n.ends_with(".py")) || n.ends_with("_test.py"))
        })
    };
    [
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "requirements.txt",
    ]
    .iter()
    .any(|m| has(dir, m))
        || named_test(None)
        || named_test(Some(Path::new("tests")))
}

/// The project's checks: those the Loopfile's `verification:` declares
/// (`project-build`, …), then the detected ones of the kinds it does not.
pub fn project_checks(dir: &Path, v: &crate::loopfile::Verification) -> Vec<StackCheck> {
    let mut out: Vec<StackCheck> = declared(v);
    for d in checks(dir) {
        if !v.commands.iter().any(|(k, _)| *k == d.kind) {
            out.push(d);
        }
    }
    out
}

/// The checks the Loopfile's `verification:` declares.
pub fn declared(v: &crate::loopfile::Verification) -> Vec<StackCheck> {
    v.commands
        .iter()
        .map(|(kind, command)| StackCheck {
            stack: "project",
            kind,
            command: command.clone(),
            why: format!("the Loopfile's verification.{kind}"),
            counted: false,
        })
        .collect()
}

/// A Python project's test command: pytest when it is declared or
/// installed, else unittest; run by the project's venv when it has one.
/// (command, why).
fn python_tests(dir: &Path) -> (String, String) {
    let (py, where_) = match venv(dir) {
        Some(v) => (format!("{v}/bin/python"), format!("the venv `{v}`")),
        None => ("python3".to_string(), "python3".to_string()),
    };
    let declared = [
        "pyproject.toml",
        "setup.cfg",
        "requirements.txt",
        "requirements-dev.txt",
        "tox.ini",
    ]
    .iter()
    .any(|f| text(dir, f).contains("pytest"))
        || has(dir, "pytest.ini")
        || has(dir, "conftest.py");
    let installed = venv(dir).is_some_and(|v| {
        // A venv's entry points are links or scripts: existence only.
        !matches!(
            loop_workspace::door::node(dir, format!("{v}/bin/pytest")),
            Ok(loop_workspace::Node::Missing) | Err(_)
        )
    });
    if declared || installed {
        (
            format!("{py} -m pytest -q"),
            format!(
                "pytest ({}), run by {where_}",
                if installed { "installed" } else { "declared" }
            ),
        )
    } else {
        // unittest finds test modules from the top only in packages: a
        // `tests/` (or `test/`) of `test_*.py` without `__init__.py` is
        // searched by name, or it would run none.
        let start = ["tests", "test"].into_iter().find(|d| {
            loop_workspace::door::is_dir(dir, d)
                && !has(dir, &format!("{d}/__init__.py"))
                && loop_workspace::door::list(dir, Some(Path::new(d))).is_ok_and(|names| {
                    names
                        .iter()
                        .any(|n| n.starts_with("test") && n.ends_with(".py"))
                })
        });
        (
            match start {
                Some(d) => format!("{py} -m unittest discover -s {d} -v"),
                None => format!("{py} -m unittest discover -v"),
            },
            format!("unittest (no pytest declared), run by {where_}"),
        )
    }
}

/// A Node project's build, test and lint scripts, run by its package
/// manager (npm's placeholder test script proves nothing and is left out):
/// (kind, command, why).
fn node_scripts(dir: &Path) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    let manifest: serde_json::Value =
        serde_json::from_str(&text(dir, "package.json")).unwrap_or_default();
    let tool = if has(dir, "pnpm-lock.yaml") {
        "pnpm"
    } else if has(dir, "yarn.lock") {
        "yarn"
    } else if has(dir, "bun.lockb") || has(dir, "bun.lock") {
        "bun"
    } else {
        "npm"
    };
    let scripts = &manifest["scripts"];
    for (kind, script) in [("build", "build"), ("test", "test"), ("lint", "lint")] {
        let Some(body) = scripts[script].as_str() else {
            continue;
        };
        // npm's placeholder test script proves nothing.
        if body.contains("no test specified") {
            continue;
        }
        let command = match (tool, script) {
            ("npm", "test") => "npm test".to_string(),
            ("npm", _) => format!("npm run {script}"),
            (t, _) => format!("{t} run {script}"),
        };
        out.push((
            kind,
            command,
            format!("package.json scripts.{script}, {tool}"),
        ));
    }
    out
}

/// The project's own checks, per detected stack, in a stable order.
pub fn checks(dir: &Path) -> Vec<StackCheck> {
    let mut out = Vec::new();
    let mut add = |stack, kind, command: String, why: String| {
        out.push(StackCheck {
            stack,
            kind,
            command,
            why,
            counted: true,
        })
    };
    if python_project(dir) {
        let (command, why) = python_tests(dir);
        add("python", "test", command, why);
    }
    if has(dir, "Cargo.toml") {
        add(
            "rust",
            "build",
            "cargo build --offline".into(),
            "Cargo.toml".into(),
        );
        add(
            "rust",
            "test",
            "cargo test --offline".into(),
            "Cargo.toml".into(),
        );
    }
    if has(dir, "go.mod") {
        add("go", "build", "go build ./...".into(), "go.mod".into());
        add("go", "test", "go test -v ./...".into(), "go.mod".into());
        add("go", "lint", "go vet ./...".into(), "go.mod".into());
    }
    if has(dir, "package.json") {
        for (kind, command, why) in node_scripts(dir) {
            add("node", kind, command, why);
        }
    }
    if has(dir, "CMakeLists.txt") {
        add(
            "cmake",
            "build",
            "cmake -S . -B build-loop && cmake --build build-loop".into(),
            "CMakeLists.txt".into(),
        );
        if text(dir, "CMakeLists.txt").contains("enable_testing") {
            add(
                "cmake",
                "test",
                "cmake -S . -B build-loop && cmake --build build-loop && ctest --test-dir build-loop --output-on-failure".into(),
                "CMakeLists.txt (enable_testing)".into(),
            );
        }
    } else if has(dir, "Makefile") || has(dir, "makefile") {
        add("make", "build", "make".into(), "Makefile".into());
        let mk = text(dir, "Makefile") + &text(dir, "makefile");
        if mk.lines().any(|l| l.starts_with("test:")) {
            add(
                "make",
                "test",
                "make test".into(),
                "Makefile (a test target)".into(),
            );
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("loop-stacks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn commands(d: &Path) -> Vec<String> {
        checks(d)
            .into_iter()
            .map(|c| format!("{} {}: {}", c.stack, c.kind, c.command))
            .collect()
    }

    /// unittest run from the top finds no test in a `tests/` that is not
    /// a package: such a directory is named (`-s tests`); one that is a
    /// package, or tests at the top, keep the plain command.
    #[test]
    fn unittest_is_pointed_at_a_tests_directory_that_is_not_a_package() {
        let d = dir("unittest-dir");
        std::fs::create_dir_all(d.join("tests")).unwrap();
        std::fs::write(d.join("tests/test_calc.py"), "").unwrap();
        assert_eq!(
            commands(&d),
            ["python test: python3 -m unittest discover -s tests -v"]
        );
        std::fs::write(d.join("tests/__init__.py"), "").unwrap();
        assert_eq!(
            commands(&d),
            ["python test: python3 -m unittest discover -v"]
        );
    }

    #[test]
    fn each_stack_gets_its_own_commands() {
        let d = dir("all");
        std::fs::write(d.join("test_x.py"), "").unwrap();
        std::fs::write(d.join("Cargo.toml"), "").unwrap();
        std::fs::write(d.join("go.mod"), "").unwrap();
        std::fs::write(
            d.join("package.json"),
            r#"{"scripts": {"test": "vitest run", "lint": "eslint ."}}"#,
        )
        .unwrap();
        std::fs::write(d.join("pnpm-lock.yaml"), "").unwrap();
        std::fs::write(d.join("Makefile"), "all:\n\ttrue\ntest:\n\ttrue\n").unwrap();
        assert_eq!(
            commands(&d),
            vec![
                "python test: python3 -m unittest discover -v",
                "rust build: cargo build --offline",
                "rust test: cargo test --offline",
                "go build: go build ./...",
                "go test: go test -v ./...",
                "go lint: go vet ./...",
                "node test: pnpm run test",
                "node lint: pnpm run lint",
                "make build: make",
                "make test: make test",
            ]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn python_runs_pytest_where_declared_and_through_its_venv() {
        let d = dir("py");
        std::fs::write(d.join("requirements.txt"), "pytest==8\n").unwrap();
        std::fs::create_dir_all(d.join(".venv/bin")).unwrap();
        std::fs::write(d.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        assert_eq!(
            commands(&d),
            vec!["python test: .venv/bin/python -m pytest -q"]
        );
        // npm's placeholder test script is no check.
        let n = dir("npm");
        std::fs::write(
            n.join("package.json"),
            r#"{"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}"#,
        )
        .unwrap();
        assert!(commands(&n).is_empty());
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&n);
    }
}
