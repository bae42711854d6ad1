//! One real-layout project per stack, made by `scripts/real-projects.py`
//! from the package registries (a src-layout Python package with a version
//! from git installed editable, a TypeScript package tested by vitest, a
//! Rust crate with a registry dependency, a CMake + CTest C library), each
//! tried as its developer would after `loop init`: a right fix verifies, a
//! wrong one does not, deleting the test's assertions does not, apply and
//! undo are exact, `loop audit` agrees with what a task ran, and the
//! developer's own test command in the checkout runs the same tests after
//! the tasks as before. A stack whose toolchain or registry is missing is
//! skipped with the reason printed, and fails under `CI=true`.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{have, loop_in, text};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A project the script made, as it describes it.
struct Real {
    base: PathBuf,
    dir: PathBuf,
    entry: serde_json::Value,
}

/// The project of `stack` (`python`, `node`, `rust`, `cmake`,
/// `prettytable`), made afresh, or `None` (said) where it cannot be.
fn make(stack: &str, tools: &[&str]) -> Option<Real> {
    if !tools.iter().all(|t| have(t)) {
        return None;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("real-{stack}"));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/real-projects.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(base.join("projects"))
        .arg(stack)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    if !out.status.success() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the {stack} project could not be made: {}",
            text(&out)
        );
        eprintln!(
            "SKIPPED: the {stack} project could not be made here (a registry out of reach?): {}",
            text(&out)
        );
        return None;
    }
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = all[0].clone();
    let dir = PathBuf::from(entry["dir"].as_str().unwrap());
    Some(Real { base, dir, entry })
}

impl Real {
    fn sh(&self, cmd: &str) -> std::process::Output {
        Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(&self.dir)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .unwrap()
    }

    /// The developer's own test command in the checkout: its exit status
    /// and the number of tests its runner says it ran.
    fn suite(&self) -> (bool, String) {
        let out = self.sh(self.entry["suite"].as_str().unwrap());
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), ran(&all))
    }

    /// A task whose one model turn writes `files` and finishes; its
    /// outcome, the receipt's payload and the task's id.
    fn task(&self, name: &str, files: &[(&str, &str)]) -> (String, serde_json::Value, String) {
        let check = self.entry["check"].as_str().unwrap();
        let task = format!(
            "instruction: {}\ncriteria:\n  - id: tests\n    checks:\n      - run: {}\n        timeout_secs: 600\nlimits: {{ max_steps: 4, max_verifications: 1, timeout_secs: 1200 }}\n",
            serde_json::to_string(self.entry["instruction"].as_str().unwrap()).unwrap(),
            serde_json::to_string(check).unwrap()
        );
        let mut script = String::from("turns:\n  - calls:\n");
        for (path, body) in files {
            script.push_str(&format!(
                "      - {{tool: write_file, args: {{path: {path}, content: {}}}}}\n",
                serde_json::to_string(body).unwrap()
            ));
        }
        script.push_str("      - {tool: finish, args: {summary: done}}\n");
        let run = shared::run_scripted(&self.base, &self.dir, name, (&task, &script));
        (
            run.outcome().to_string(),
            run.statement.clone(),
            run.id().to_string(),
        )
    }

    fn loop_cmd(&self, args: &[&str]) -> std::process::Output {
        loop_in(&self.base)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.dir.join(rel)).unwrap()
    }
}

/// The tests a runner's summary says ran (the last such line).
fn ran(out: &str) -> String {
    let re = regex::Regex::new(
        r"(\d+ passed|Tests\s+\d+ (?:failed \| )?\d+ passed|test result: \w+\. \d+ passed; \d+ failed|\d+% tests passed, \d+ tests failed out of \d+|\d+ failed, \d+ passed)",
    )
    .unwrap();
    re.find_iter(out)
        .map(|m| m.as_str().to_string())
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Everything the issue asks of one stack, with the test file's
/// assertions deleted by `gutted`.
fn every_promise(real: &Real, gutted: &dyn Fn(&str) -> String) {
    let fix = &real.entry["fix"];
    let (fix_path, fix_text) = (fix[0].as_str().unwrap(), fix[1].as_str().unwrap());
    let wrong = real.entry["wrong"][1].as_str().unwrap();
    let tests_path = real.entry["tests"].as_str().unwrap();
    let original = real.read(fix_path);
    // The developer's suite fails on the bug, and says how many ran.
    let (passed, before) = real.suite();
    assert!(!passed, "the bug fails the suite");
    assert!(!before.is_empty(), "the runner's summary: {before}");
    // loop init, then audit: its test point agrees with a task's check.
    let init = real.loop_cmd(&["init"]);
    assert!(init.status.success(), "{}", text(&init));
    let audit = real.loop_cmd(&["audit", "--json"]);
    let audit: serde_json::Value =
        serde_json::from_slice(&audit.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&audit)));
    let point = audit["readiness"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["point"] == "tests")
        .cloned()
        .unwrap();
    assert_eq!(point["ok"], true, "audit: {point}");
    let init_commit = real.sh("git add -A && git commit -qm 'loop init'");
    assert!(init_commit.status.success(), "{}", text(&init_commit));
    // A wrong fix is not verified.
    let (outcome, _, _) = real.task("wrong", &[(fix_path, wrong)]);
    assert_ne!(outcome, "verified", "a wrong fix");
    // Deleting the assertions (with the wrong fix) is not verified.
    let gutted_text = gutted(&real.read(tests_path));
    assert_ne!(gutted_text, real.read(tests_path), "the assertions went");
    let (outcome, payload, gutted_id) = real.task(
        "gutted",
        &[(tests_path, gutted_text.as_str()), (fix_path, wrong)],
    );
    assert_ne!(outcome, "verified", "deleted assertions");
    // Refused for what it did to the tests: the write was refused (the
    // task's change leaves the test file as it was), or the verifier
    // judged the tests changed.
    let diff = real.loop_cmd(&["diff", &gutted_id]);
    let diff = String::from_utf8_lossy(&diff.stdout).into_owned();
    let report = payload["predicate"]["verification"].to_string();
    assert!(
        !diff.contains(&format!("+++ b/{tests_path}")) || report.contains("check integrity"),
        "refused for the deleted assertions: {diff}\n{report}"
    );
    assert!(diff.contains(&format!("+++ b/{fix_path}")), "{diff}");
    // The right fix is verified, and the baseline ran the same tests
    // `loop audit` did.
    let (outcome, payload, right) = real.task("right", &[(fix_path, fix_text)]);
    assert_eq!(outcome, "verified", "{payload}");
    let baseline = &payload["predicate"]["baseline"]["criteria"][0]["checks"][0];
    assert_eq!(baseline["passed"], false, "{baseline}");
    // `loop audit` ran as many tests as the task's baseline did.
    let ran = baseline["tests"]["ran"].as_u64().unwrap();
    let detail = point["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("ran {ran} test(s)")),
        "audit: {detail}; the task's baseline ran {ran}"
    );
    // Nothing of the tasks is in the checkout: the suite runs the same
    // tests as before them.
    let (_, after_tasks) = real.suite();
    assert_eq!(
        after_tasks, before,
        "the developer's suite after three tasks"
    );
    // Apply gives exactly the fix; undo gives exactly the original.
    let applied = real.loop_cmd(&["apply", &right]);
    assert!(applied.status.success(), "{}", text(&applied));
    assert_eq!(real.read(fix_path), fix_text);
    let status = real.sh("git status --porcelain");
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        format!(" M {fix_path}\n"),
        "only the fix"
    );
    let (passed, fixed) = real.suite();
    assert!(passed, "the developer's suite passes with the fix: {fixed}");
    let undone = real.loop_cmd(&["undo", &right]);
    assert!(undone.status.success(), "{}", text(&undone));
    assert_eq!(real.read(fix_path), original);
    let status = real.sh("git status --porcelain");
    assert_eq!(String::from_utf8_lossy(&status.stdout), "", "undo is exact");
    let _ = std::fs::remove_dir_all(&real.base);
}

#[test]
fn a_python_src_layout_package_with_a_version_from_git_installed_editable() {
    let Some(real) = make("python", &["python3", "git"]) else {
        return;
    };
    every_promise(&real, &|t| {
        t.replace(
            "assert slugline.slugify(text) == slug",
            "slugline.slugify(text)",
        )
    });
}

#[test]
fn a_typescript_package_tested_by_vitest() {
    let Some(real) = make("node", &["node", "npm", "git"]) else {
        return;
    };
    every_promise(&real, &|t| {
        t.replace("expect(tally(text)).toBe(sum);", "tally(text);")
    });
}

#[test]
fn a_rust_crate_with_a_registry_dependency() {
    let Some(real) = make("rust", &["cargo", "git"]) else {
        return;
    };
    every_promise(&real, &|t| {
        t.lines()
            .filter(|l| !l.trim_start().starts_with("assert_eq!"))
            .map(|l| format!("{l}\n"))
            .collect()
    });
}

#[test]
fn a_cmake_library_tested_by_ctest() {
    let Some(real) = make("cmake", &["cmake", "ctest", "cc", "git"]) else {
        return;
    };
    every_promise(&real, &|t| {
        t.replace(
            "#define CHECK(e) do { if (!(e)) { printf(\"FAILED: %s\\n\", #e); failed = 1; } } while (0)",
            "#define CHECK(e) (void)(e)",
        )
    });
}

/// A real project from the registry: prettytable's PyPI sdist (src layout,
/// hatch-vcs, 342 tests), with one bug in the developer's checkout.
#[test]
fn prettytable_from_its_sdist_installed_editable() {
    let Some(real) = make("prettytable", &["python3", "git"]) else {
        return;
    };
    every_promise(&real, &|t| t.replace("    assert ", "    assert True or "));
}
