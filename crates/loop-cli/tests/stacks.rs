//! Real small projects of each stack, created here, each through
//! detection → drafting (scripted) → critic → confirmation
//! (`--accept-contract`) → a verified run. A stack whose toolchain is not
//! on this machine is skipped with the reason printed, and fails the run
//! under `CI=true`, where scripts/test.sh has installed every toolchain.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{have, json_lines, loop_in, text};
use std::path::{Path, PathBuf};
use std::process::Command;

fn sh(dir: &Path, cmd: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {}", text(&out));
}

fn sh_out(dir: &Path, cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `loop audit`'s tests point for project `p`.
fn audit_tests(base: &Path, p: &Path) -> serde_json::Value {
    let out = loop_in(base)
        .args(["audit", "--json", "--project"])
        .arg(p)
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    v["readiness"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["point"] == "tests")
        .cloned()
        .unwrap()
}

/// A git project made of `files`, committed.
fn project(name: &str, files: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("stack-{name}"));
    let _ = std::fs::remove_dir_all(&base);
    let p = base.join("project");
    std::fs::create_dir_all(&p).unwrap();
    for (path, body) in files {
        let at = p.join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, body).unwrap();
    }
    (base, p)
}

fn commit(p: &Path) {
    sh(
        p,
        "git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm base",
    );
}

/// Draft `check` (with `nonempty_tests` when a runner counts tests),
/// repair `fix_path` with `fix`, and expect a verified task whose detected
/// project test is `detected`.
fn verified_through_drafting(
    base: &Path,
    p: &Path,
    check: &str,
    counts_tests: bool,
    fix: (&str, &str),
    detected: &str,
) {
    let script = format!(
        "draft:\n  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the project's tests pass\n              checks:\n                - run: {}\n                  nonempty_tests: {counts_tests}\n                  timeout_secs: 300\nturns:\n  - calls:\n      - {{tool: write_file, args: {{path: {}, content: {}}}}}\n      - {{tool: finish, args: {{summary: fixed}}}}\n",
        serde_json::to_string(check).unwrap(),
        fix.0,
        serde_json::to_string(fix.1).unwrap()
    );
    std::fs::write(base.join("script.yaml"), script).unwrap();
    let out = loop_in(base)
        .args([
            "run",
            "make the tests pass",
            "--accept-contract",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let events = json_lines(&out);
    let started = events.iter().find(|e| e["kind"] == "task_started").unwrap();
    assert_eq!(
        started["drafting"]["attempts"][0]["accepted"], true,
        "{started}"
    );
    let checks = started["project_checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["kind"] == "test" && c["command"] == detected),
        "{detected} not detected: {started}"
    );
    let receipt = events.iter().find(|e| e["kind"] == "receipt").unwrap();
    assert_eq!(receipt["outcome"]["kind"], "verified", "{receipt}");
}

#[test]
fn a_cargo_crate() {
    if !have("cargo") {
        return;
    }
    let (base, p) = project(
        "cargo",
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"twice\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
            ),
            ("src/lib.rs", "pub fn twice(n: u32) -> u32 {\n    n\n}\n"),
            (
                "tests/twice.rs",
                "#[test]\nfn doubles() {\n    assert_eq!(twice::twice(21), 42);\n}\n",
            ),
            (".gitignore", "target/\n"),
        ],
    );
    commit(&p);
    verified_through_drafting(
        &base,
        &p,
        "cargo test --offline",
        true,
        (
            "src/lib.rs",
            "pub fn twice(n: u32) -> u32 {\n    n * 2\n}\n",
        ),
        "cargo test --offline",
    );
}

#[test]
fn an_npm_package_with_a_lockfile() {
    if !have("npm") {
        return;
    }
    let (base, p) = project(
        "npm",
        &[
            // Its test script ends as vitest's run does: the results
            // written to a cache inside node_modules, which the task
            // shares read-only (the cache is the command's own).
            (
                "package.json",
                "{\n  \"name\": \"twice\",\n  \"version\": \"1.0.0\",\n  \"private\": true,\n  \"scripts\": { \"test\": \"node --test && node cache.js\" }\n}\n",
            ),
            (
                "cache.js",
                "const fs = require('node:fs');\nfs.mkdirSync('node_modules/.vite/vitest', { recursive: true });\nfs.writeFileSync('node_modules/.vite/vitest/results.json', '{}');\n",
            ),
            (
                "twice.js",
                "const one = require('one');\nmodule.exports = (n) => n * one;\n",
            ),
            (
                "twice.test.js",
                "const test = require('node:test');\nconst assert = require('node:assert');\nconst twice = require('./twice');\ntest('doubles', () => assert.strictEqual(twice(21), 42));\n",
            ),
            (".gitignore", "node_modules/\n"),
            // An installed dependency (what `npm install` leaves).
            (
                "node_modules/one/package.json",
                "{\"name\": \"one\", \"version\": \"1.0.0\", \"main\": \"index.js\"}\n",
            ),
            ("node_modules/one/index.js", "module.exports = 1;\n"),
        ],
    );
    sh(
        &p,
        "npm install --package-lock-only --no-audit --no-fund --silent",
    );
    assert!(p.join("package-lock.json").is_file());
    commit(&p);
    verified_through_drafting(
        &base,
        &p,
        "npm test",
        true,
        (
            "twice.js",
            "const one = require('one');\nmodule.exports = (n) => n * 2 * one;\n",
        ),
        "npm test",
    );
}

#[test]
fn a_pytest_project_with_its_venv() {
    if !have("python3") {
        return;
    }
    let (base, p) = project(
        "pytest",
        &[
            ("requirements.txt", "pytest\n"),
            ("twice.py", "def twice(n):\n    return n\n"),
            (
                "test_twice.py",
                "from twice import twice\n\ndef test_doubles():\n    assert twice(21) == 42\n",
            ),
            (".gitignore", ".venv/\n"),
        ],
    );
    commit(&p);
    // The project's own venv, with pytest from the package index.
    sh(
        &p,
        "python3 -m venv .venv && .venv/bin/pip install --quiet --disable-pip-version-check pytest",
    );
    verified_through_drafting(
        &base,
        &p,
        ".venv/bin/python -m pytest -q",
        true,
        ("twice.py", "def twice(n):\n    return n * 2\n"),
        ".venv/bin/python -m pytest -q",
    );
}

/// A src-layout package installed editable in the project's venv (what
/// `pip install -e .` does: a `.pth` naming the checkout's `src/`): a
/// task's checks import the task's code, not the checkout's (which they
/// could not even see), so the honest fix verifies.
#[test]
fn a_src_layout_package_installed_editable() {
    if !have("python3") {
        return;
    }
    let (base, p) = project(
        "editable",
        &[
            (
                "pyproject.toml",
                "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"twice\"\nversion = \"0.1\"\n\n[tool.setuptools.packages.find]\nwhere = [\"src\"]\n",
            ),
            ("src/twice/__init__.py", "def twice(n):\n    return n\n"),
            (
                "tests/test_twice.py",
                "from twice import twice\n\ndef test_doubles():\n    assert twice(21) == 42\n",
            ),
            (".gitignore", ".venv/\n*.egg-info/\n"),
        ],
    );
    commit(&p);
    sh(
        &p,
        "python3 -m venv .venv && .venv/bin/pip install --quiet --disable-pip-version-check pytest && .venv/bin/pip install --quiet --disable-pip-version-check -e .",
    );
    // The install names the checkout's src/.
    let pth = sh_out(&p, "cat .venv/lib/python3*/site-packages/__editable__*.pth");
    assert!(pth.contains(&format!("{}/src", p.display())), "{pth}");
    // `loop audit` runs the tests as a task would, and they run.
    assert_eq!(
        audit_tests(&base, &p)["detail"],
        "`.venv/bin/python -m pytest -q` ran 1 test(s) (pytest; exit 1)"
    );
    // What only the checkout has (an untracked module the tests import)
    // is no task's: audit does not count on it either.
    std::fs::write(
        p.join("tests/test_helper.py"),
        "import helper\n\ndef test_helper():\n    assert helper.X == 1\n",
    )
    .unwrap();
    std::fs::write(p.join("tests/helper.py"), "X = 1\n").unwrap();
    sh(&p, "git add tests/test_helper.py && git commit -qm helper");
    let point = audit_tests(&base, &p);
    assert!(
        point["detail"]
            .as_str()
            .unwrap()
            .contains("ran 1 test(s) (pytest; exit 2)"),
        "{point}"
    );
    sh(
        &p,
        "git add tests/helper.py && git commit -qm 'helper, committed'",
    );
    let point = audit_tests(&base, &p);
    assert!(
        point["detail"].as_str().unwrap().contains("ran 2 test(s)"),
        "{point}"
    );
    verified_through_drafting(
        &base,
        &p,
        ".venv/bin/python -m pytest -q",
        true,
        ("src/twice/__init__.py", "def twice(n):\n    return n * 2\n"),
        ".venv/bin/python -m pytest -q",
    );
}

#[test]
fn a_make_project() {
    if !have("make") || !have("cc") {
        return;
    }
    let (base, p) = project(
        "make",
        &[
            (
                "Makefile",
                "all: twice_test\n\ntwice_test: twice.c twice_test.c\n\tcc -o twice_test twice.c twice_test.c\n\ntest: twice_test\n\t./twice_test\n",
            ),
            ("twice.c", "int twice(int n) { return n; }\n"),
            (
                "twice_test.c",
                "int twice(int);\nint main(void) { return twice(21) == 42 ? 0 : 1; }\n",
            ),
            (".gitignore", "twice_test\n"),
        ],
    );
    commit(&p);
    verified_through_drafting(
        &base,
        &p,
        "make test",
        false,
        ("twice.c", "int twice(int n) { return n * 2; }\n"),
        "make test",
    );
}

#[test]
fn a_go_module() {
    if !have("go") {
        return;
    }
    let (base, p) = project(
        "go",
        &[
            ("go.mod", "module example.com/twice\n\ngo 1.21\n"),
            (
                "twice.go",
                "package twice\n\nfunc Twice(n int) int { return n }\n",
            ),
            (
                "twice_test.go",
                "package twice\n\nimport \"testing\"\n\nfunc TestTwice(t *testing.T) {\n\tif Twice(21) != 42 {\n\t\tt.Fatal(\"no\")\n\t}\n}\n",
            ),
        ],
    );
    commit(&p);
    verified_through_drafting(
        &base,
        &p,
        "go test -v ./...",
        true,
        (
            "twice.go",
            "package twice\n\nfunc Twice(n int) int { return n * 2 }\n",
        ),
        "go test -v ./...",
    );
}

#[test]
fn a_cmake_project() {
    if !have("cmake") || !have("ctest") {
        return;
    }
    let (base, p) = project(
        "cmake",
        &[
            (
                "CMakeLists.txt",
                "cmake_minimum_required(VERSION 3.10)\nproject(twice C)\nenable_testing()\nadd_executable(twice_test twice_test.c)\nadd_test(NAME twice COMMAND twice_test)\n",
            ),
            ("twice.h", "static int twice(int n) { return n; }\n"),
            (
                "twice_test.c",
                "#include \"twice.h\"\nint main(void) { return twice(21) == 42 ? 0 : 1; }\n",
            ),
        ],
    );
    commit(&p);
    let detected = "cmake -S . -B build-loop && cmake --build build-loop && ctest --test-dir build-loop --output-on-failure";
    verified_through_drafting(
        &base,
        &p,
        detected,
        false,
        ("twice.h", "static int twice(int n) { return n * 2; }\n"),
        detected,
    );
}

/// A check builds only what the task changed: the build directory the
/// project's own check made of the untouched workspace is under every
/// later check, so a source the task left is not compiled again, and the
/// final check compiles the one it fixed. A contract check that is not
/// the project's own command leaves nothing there (what it wrote at the
/// baseline is not kept), and nothing a check writes reaches what is kept.
#[test]
fn a_cmake_check_rebuilds_only_what_the_task_changed() {
    if !have("cmake") || !have("ctest") {
        return;
    }
    let (base, p) = project(
        "cmake-incremental",
        &[
            (
                "CMakeLists.txt",
                "cmake_minimum_required(VERSION 3.10)\nproject(parts C)\nenable_testing()\nadd_library(parts STATIC kept.c twice.c)\nadd_executable(twice_test twice_test.c)\ntarget_link_libraries(twice_test parts)\nadd_test(NAME twice COMMAND twice_test)\n",
            ),
            ("kept.c", "int kept(void) { return 1; }\n"),
            ("twice.c", "int twice(int n) { return n; }\n"),
            (
                "twice_test.c",
                "int twice(int n);\nint kept(void);\nint main(void) { return twice(21) == 42 && kept() == 1 ? 0 : 1; }\n",
            ),
        ],
    );
    commit(&p);
    let own = "cmake -S . -B build-loop && cmake --build build-loop && ctest --test-dir build-loop --output-on-failure";
    let task = format!(
        "instruction: make twice() double\ncriteria:\n  - id: tests\n    checks:\n      - run: {}\n        timeout_secs: 300\n  - id: planted\n    guard: true\n    checks:\n      - run: \"test -f kept.c && mkdir -p planted && echo x > planted/f && mkdir -p build-loop/more && echo y > build-loop/more/f\"\nlimits: {{ max_steps: 4, max_verifications: 2, timeout_secs: 600 }}\n",
        serde_json::to_string(own).unwrap()
    );
    let run = shared::run_scripted(
        &base,
        &p,
        "fix",
        (
            &task,
            "turns:\n  - calls:\n      - {tool: write_file, args: {path: twice.c, content: \"int twice(int n) { return n * 2; }\\n\"}}\n      - {tool: finish, args: {summary: doubled}}\n",
        ),
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out));
    assert_eq!(run.outcome(), "verified", "{}", run.receipt);
    let payload = &run.statement;
    let stdout_of = |report: &serde_json::Value| {
        report["criteria"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "tests")
            .map(|c| {
                c["checks"][0]["stdout"]["excerpt"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .unwrap()
    };
    let before = stdout_of(&payload["predicate"]["baseline"]);
    let last = stdout_of(&payload["predicate"]["verification"]);
    assert!(
        before.contains("kept.c.o"),
        "the baseline builds everything: {before}"
    );
    assert!(
        last.contains("twice.c.o"),
        "the fixed source is compiled: {last}"
    );
    assert!(
        !last.contains("kept.c.o"),
        "the source the task left is not compiled again: {last}"
    );
    let kept = shared::near_of(&p, run.id()).join("builds");
    assert!(kept.join("build-loop/CMakeCache.txt").is_file());
    assert!(
        !kept.join("planted").exists() && !kept.join("build-loop/more").exists(),
        "a check that is not the project's own keeps nothing"
    );
}

/// Go's build cache in checks: the project's own check fills it on the
/// untouched workspace and it is kept for later checks; a task that makes
/// a directory of that name (a cache it could fill with answers) fails
/// every check, and the honest fix beside it verifies.
#[test]
fn a_go_checks_build_cache_is_kept_from_the_baseline_and_never_the_tasks() {
    if !have("go") {
        return;
    }
    let files: &[(&str, &str)] = &[
        ("go.mod", "module example.com/twice\n\ngo 1.19\n"),
        (
            "twice.go",
            "package twice\n\nfunc Twice(n int) int { return n }\n",
        ),
        (
            "twice_test.go",
            "package twice\n\nimport \"testing\"\n\nfunc TestTwice(t *testing.T) {\n\tif Twice(21) != 42 {\n\t\tt.Fatal(\"no\")\n\t}\n}\n",
        ),
    ];
    let fix = "package twice\n\nfunc Twice(n int) int { return n * 2 }\n";
    for (name, planted) in [("go-cache-honest", false), ("go-cache-planted", true)] {
        let (base, p) = project(name, files);
        commit(&p);
        let mut writes = format!(
            "      - {{tool: write_file, args: {{path: twice.go, content: {}}}}}\n",
            serde_json::to_string(fix).unwrap()
        );
        if planted {
            writes.push_str(
                "      - {tool: write_file, args: {path: .loop-go-cache/README, content: \"answers\"}}\n",
            );
        }
        let run = shared::run_scripted(
            &base,
            &p,
            name,
            (
                "instruction: make Twice double\ncriteria:\n  - id: tests\n    checks:\n      - run: \"go test -v ./...\"\n        timeout_secs: 300\nlimits: { max_steps: 4, max_verifications: 1, timeout_secs: 600 }\n",
                &format!(
                    "turns:\n  - calls:\n{writes}      - {{tool: finish, args: {{summary: doubled}}}}\n"
                ),
            ),
        );
        let receipt = &run.receipt;
        let kept = shared::near_of(&p, run.id()).join("builds/.loop-go-cache");
        assert!(
            kept.is_dir(),
            "the baseline's Go cache is kept: {}",
            text(&run.out)
        );
        let check = &run.statement["predicate"]["verification"]["criteria"][0]["checks"][0];
        if planted {
            assert_ne!(receipt["outcome"]["kind"], "verified", "{receipt}");
            assert!(
                check["failure"]
                    .as_str()
                    .unwrap()
                    .contains("the name of the checks' Go build cache"),
                "{check}"
            );
        } else {
            assert_eq!(receipt["outcome"]["kind"], "verified", "{receipt}");
            let env = check["env"].to_string();
            assert!(env.contains("GOCACHE="), "{check}");
        }
    }
}

/// The kept build outputs cannot stand in for a source the task changed:
/// a task that fixes one file, breaks another and dates the broken one
/// back (so make would take the kept object as current) is not verified:
/// a command's writes reach the workspace dated when they land, and every
/// file changed after the workspace was made is dated now before the
/// checks (`refresh_times`, whose own test dates a file back by hand). And a task that makes a directory of a kept name
/// (`build-loop/`) gets no kept outputs under its checks: they build
/// afresh, and its honest fix still verifies.
#[test]
fn a_source_dated_back_or_a_planted_build_directory_does_not_reuse_kept_outputs() {
    if !have("cmake") || !have("ctest") {
        return;
    }
    let files: &[(&str, &str)] = &[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.10)\nproject(parts C)\nenable_testing()\nadd_library(parts STATIC kept.c twice.c)\nadd_executable(twice_test twice_test.c)\ntarget_link_libraries(twice_test parts)\nadd_test(NAME twice COMMAND twice_test)\n",
        ),
        ("kept.c", "int kept(void) { return 1; }\n"),
        ("twice.c", "int twice(int n) { return n; }\n"),
        (
            "twice_test.c",
            "int twice(int n);\nint kept(void);\nint main(void) { return twice(21) == 42 && kept() == 1 ? 0 : 1; }\n",
        ),
    ];
    let own = "cmake -S . -B build-loop && cmake --build build-loop && ctest --test-dir build-loop --output-on-failure";
    let fix = "      - {tool: write_file, args: {path: twice.c, content: \"int twice(int n) { return n * 2; }\\n\"}}\n";
    let cases = [
        (
            "cmake-backdated",
            format!(
                "{fix}      - {{tool: write_file, args: {{path: kept.c, content: \"int kept(void) {{ return 0; }}\\n\"}}}}\n      - {{tool: run_command, args: {{command: \"touch -d '2001-01-01 00:00' kept.c\"}}}}\n"
            ),
            false,
        ),
        (
            "cmake-planted-dir",
            format!(
                "{fix}      - {{tool: run_command, args: {{command: \"mkdir -p build-loop && echo mine > build-loop/notes.txt\"}}}}\n"
            ),
            true,
        ),
    ];
    for (name, calls, verifies) in cases {
        let (base, p) = project(name, files);
        std::fs::write(p.join(".gitignore"), "build-loop/\n").unwrap();
        commit(&p);
        let run = shared::run_scripted(
            &base,
            &p,
            name,
            (
                &format!(
                    "instruction: make twice() double\ncriteria:\n  - id: tests\n    checks:\n      - run: {}\n        timeout_secs: 300\nlimits: {{ max_steps: 4, max_verifications: 1, timeout_secs: 600 }}\n",
                    serde_json::to_string(own).unwrap()
                ),
                &format!(
                    "turns:\n  - calls:\n{calls}      - {{tool: finish, args: {{summary: done}}}}\n"
                ),
            ),
        );
        let receipt = &run.receipt;
        let last = run.statement["predicate"]["verification"]["criteria"][0]["checks"][0]["stdout"]
            ["excerpt"]
            .as_str()
            .unwrap_or("")
            .to_string();
        // Both rebuild kept.c: the one dated back (it changed), and every
        // source where the kept outputs are not used at all.
        assert!(last.contains("kept.c.o"), "{name}: {last}");
        if verifies {
            assert_eq!(receipt["outcome"]["kind"], "verified", "{name}: {receipt}");
        } else {
            assert_ne!(receipt["outcome"]["kind"], "verified", "{name}: {receipt}");
        }
    }
}
