//! A check that passes with no project at all proves nothing: every
//! always-passing form (shell forms the text rules cannot read with
//! confidence included) really passes on an empty workspace in the sandbox,
//! and the critic rejects each; the honest checks of the same kinds fail
//! there and are kept.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_protocol::Contract;
use loop_verifier::SnapshotVerifier;
use std::path::PathBuf;

/// Forms that pass whatever the project holds.
const ALWAYS: &[&str] = &[
    "true",
    ":",
    "exit 0",
    "python3 -c 'assert 1'",
    "python3 -c pass",
    "python3 -V",
    "python3 -c 'import sys; sys.exit(0)'",
    "[ 1 ]",
    "test 1 -eq 1",
    "test -e /",
    "test -d /usr",
    "! false",
    "f(){ :; }; f",
    "{ true; }",
    "(true)",
    "if false; then false; fi",
    "for f in *.nomatch; do :; done",
    "false | cat",
    "false || ls",
    "false;true",
    "false ; true",
    "ls",
    "cd .",
    "pwd",
    "echo done",
    "printf ok | grep -q ok",
    "sh -c true",
    "env true",
    "true && true",
    "sleep 0",
    "cat /dev/null",
    "wc -l < /dev/null",
    "find . -name '*.nomatch'",
    "grep -r TODO . || true",
    "! grep -rq TODO .",
    "git --version",
    "x=1",
    "true # python3 -m pytest",
    "awk 'BEGIN{}'",
];

/// Honest checks: each needs the project to pass.
const HONEST: &[&str] = &[
    "python3 -m unittest -v test_calc",
    "grep -q 'DEBUG = True' config.py",
    "test -f a.txt",
    "test -s NOTES.md",
    "python3 -c 'import slug; assert slug.slug(\"a b\") == \"a-b\"'",
    "git diff --quiet HEAD",
    "make test",
    "sh ./run_tests.sh",
    "python3 -m pytest -q",
    "diff -u expected.txt out.txt",
    // A runner that finds nothing to run: its summary says so, which fails
    // by default.
    "python3 -m unittest discover -p 'nomatch*'",
];

fn contract(checks: &[&str]) -> Contract {
    let mut yaml = String::from("instruction: make the change\ncriteria:\n");
    for (i, c) in checks.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: c{i}\n    checks:\n      - run: {}\n",
            serde_json::to_string(c).unwrap()
        ));
    }
    Contract::from_yaml(&yaml, "test").unwrap()
}

fn on_empty(c: &Contract, name: &str) -> loop_protocol::VerificationReport {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vacuous-{name}"));
    let _ = std::fs::remove_dir_all(&base);
    let (ws, scratch) = (base.join("empty"), base.join("scratch"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    let sha = c.sha256().unwrap();
    let r = SnapshotVerifier::new(&ws, &scratch)
        .verify(c, &sha, 0)
        .unwrap();
    let _ = std::fs::remove_dir_all(&base);
    r
}

#[test]
fn every_always_passing_form_passes_on_an_empty_workspace_and_is_rejected() {
    assert!(ALWAYS.len() >= 30);
    let c = contract(ALWAYS);
    let report = on_empty(&c, "always");
    for (i, form) in ALWAYS.iter().enumerate() {
        let e = report
            .criteria
            .iter()
            .find(|e| e.id == format!("c{i}"))
            .unwrap();
        assert!(
            e.passed,
            "`{form}` does not pass on an empty workspace: {e:?}"
        );
    }
    let reasons = loop_runtime::judge_empty(&c, &report);
    for form in ALWAYS {
        assert!(
            reasons.iter().any(|r| r.contains(&format!("(`{form}`)"))),
            "`{form}` not rejected: {reasons:#?}"
        );
    }
    assert_eq!(reasons.len(), ALWAYS.len(), "{reasons:#?}");
}

#[test]
fn honest_checks_fail_on_an_empty_workspace_and_are_kept() {
    let c = contract(HONEST);
    let report = on_empty(&c, "honest");
    let reasons = loop_runtime::judge_empty(&c, &report);
    assert!(reasons.is_empty(), "{reasons:#?}");
    assert!(report.criteria.iter().all(|e| !e.passed));
}
