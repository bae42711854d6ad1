use super::*;
use loop_workspace::testdir::TestDir;

fn contract(yaml: &str) -> Contract {
    Contract::from_yaml(yaml, "t").unwrap()
}

fn verify(ws_files: &[(&str, &str)], yaml: &str) -> VerificationReport {
    let d = TestDir::new("verifier");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for (p, c) in ws_files {
        let full = ws.join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, c).unwrap();
    }
    let c = contract(yaml);
    let sha = c.sha256().unwrap();
    let mut v = SnapshotVerifier::new(&ws, &d.path().join("scratch"));
    v.verify(&c, &sha, 1).unwrap()
}

fn failures(r: &VerificationReport) -> Vec<String> {
    r.failing_checks()
        .map(|c| c.failure.clone().unwrap_or_default())
        .collect()
}

#[test]
fn every_check_kind_passes_and_fails_for_the_right_reason() {
    let yaml = r#"
instruction: x
criteria:
  - id: run
    checks:
      - run: "cat a.txt | tr a-z A-Z"
        expect_stdout: HELLO
      - run: "echo oops >&2; exit 2"
        expect_exit: 2
        expect_stderr: oops
      - run: "printf 'v=%d' 42"
        stdout_matches: "v=\\d+"
  - id: files
    checks:
      - file_exists: a.txt
      - file_contains: a.txt
        text: hello
      - file_matches: a.txt
        regex: "^hel+o"
      - json_equals: data.json
        pointer: /n
        value: 1.0
artifacts: [a.txt]
"#;
    let r = verify(&[("a.txt", "hello\n"), ("data.json", "{\"n\": 1}")], yaml);
    assert_eq!(failures(&r), Vec::<String>::new());
    assert!(r.criteria.iter().all(|c| c.passed));
    assert_eq!(
        r.artifacts[0].sha256.as_deref(),
        Some(loop_protocol::hash::sha256_hex(b"hello\n").as_str())
    );
    let method = if loop_sandbox::overlay_available() {
        "overlay"
    } else {
        "copy"
    };
    assert_eq!(r.snapshot_method, method);
    assert_eq!(r.criteria[0].checks[0].snapshot, method);

    let r = verify(&[("a.txt", "bye\n"), ("data.json", "{\"n\": 2}")], yaml);
    let f = failures(&r);
    assert_eq!(f.len(), 4, "{f:#?}");
    assert!(f[0].contains("stdout does not contain \"HELLO\""));
    assert!(f[1].contains("does not contain \"hello\""));
    assert!(f[2].contains("does not match"));
    assert!(f[3].contains("at \"/n\" is 2, expected 1.0"), "{}", f[3]);
}

#[test]
fn wrong_exit_code_fails_with_its_evidence() {
    let r = verify(
        &[],
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: \"echo out; echo err >&2; exit 3\"\n",
    );
    let ev = &r.criteria[0].checks[0];
    assert!(!ev.passed);
    assert_eq!(ev.exit_code, Some(3));
    assert_eq!(ev.failure.as_deref(), Some("exit code 3, expected 0"));
    assert_eq!(ev.stdout.as_ref().unwrap().excerpt, "out\n");
    assert_eq!(
        ev.stderr.as_ref().unwrap().sha256,
        loop_protocol::hash::sha256_hex(b"err\n")
    );
}

#[test]
fn an_empty_test_run_is_not_a_pass() {
    let yaml = "instruction: x\ncriteria:\n  - id: t\n    checks:\n      - run: \"python3 -m unittest discover -s tests\"\n        nonempty_tests: true\n";
    let r = verify(&[("tests/__init__.py", "")], yaml);
    let ev = &r.criteria[0].checks[0];
    assert!(!ev.passed);
    // Python < 3.12 exits 0 after running nothing; 3.12+ exits 5. Either way it fails.
    let failure = ev.failure.clone().unwrap();
    assert!(
        failure.contains("no tests ran") || failure.contains("exit code 5"),
        "{failure}"
    );
    let yaml2 = "instruction: x\ncriteria:\n  - id: t\n    checks:\n      - run: \"echo 'Ran 0 tests in 0.000s'; echo OK\"\n        nonempty_tests: true\n";
    let r = verify(&[], yaml2);
    let f = failures(&r);
    assert_eq!(f.len(), 1);
    assert!(f[0].contains("no tests ran"), "{}", f[0]);
    let yaml3 = "instruction: x\ncriteria:\n  - id: t\n    checks:\n      - run: \"echo 'Ran 10 tests in 0.1s'\"\n        nonempty_tests: true\n";
    assert!(failures(&verify(&[], yaml3)).is_empty());
    // `cargo test` prints "running 0 tests" for each target without tests,
    // beside the target that ran some: that run is not empty...
    let cargo = |counts: [u32; 3]| {
        let out: String = counts
            .iter()
            .map(|n| format!("running {n} tests\\ntest result: ok. {n} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\\n"))
            .collect();
        format!(
            "instruction: x\ncriteria:\n  - id: t\n    checks:\n      - run: \"printf '{out}'\"\n        nonempty_tests: true\n"
        )
    };
    assert!(failures(&verify(&[], &cargo([0, 1, 0]))).is_empty());
    // ...and one whose every target ran none is.
    let f = failures(&verify(&[], &cargo([0, 0, 0])));
    assert!(f[0].contains("cargo reported none run"), "{f:?}");
}

#[test]
fn a_runner_that_reports_no_test_run_fails_by_default_unless_the_contract_says_otherwise() {
    let check = |run: &str, extra: &str| {
        format!(
            "instruction: x\ncriteria:\n  - id: t\n    checks:\n      - run: \"{run}\"\n{extra}"
        )
    };
    // With nothing said: a recognised summary of zero tests is a failure.
    let f = failures(&verify(
        &[],
        &check("echo 'Ran 0 tests in 0.000s'; echo OK", ""),
    ));
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains("no tests ran") && f[0].contains("nonempty_tests: false"),
        "{f:?}"
    );
    let f = failures(&verify(
        &[],
        &check("python3 -m unittest discover -p 'nomatch*'", ""),
    ));
    assert_eq!(f.len(), 1, "{f:?}");
    // Tests that ran, and output that is no runner's, pass as before.
    assert!(
        failures(&verify(
            &[],
            &check("echo 'Ran 3 tests in 0.1s'; echo OK", "")
        ))
        .is_empty()
    );
    assert!(failures(&verify(&[], &check("echo hello", ""))).is_empty());
    // A contract that means an empty run says so.
    let allowed = check(
        "echo 'Ran 0 tests in 0.000s'; echo OK",
        "        nonempty_tests: false\n",
    );
    assert!(failures(&verify(&[], &allowed)).is_empty());
    let c = loop_protocol::Contract::from_yaml(&allowed, "t").unwrap();
    assert!(matches!(
        &c.criteria[0].checks[0],
        loop_protocol::Check::Run(r) if r.nonempty_tests == Some(false)
    ));
}

#[test]
fn a_check_cannot_create_state_for_another() {
    let yaml = "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: \"touch made-by-first && echo tampered > a.txt\"\n      - run: \"test ! -e made-by-first && grep -q original a.txt\"\n";
    let r = verify(&[("a.txt", "original")], yaml);
    assert!(failures(&r).is_empty(), "{:#?}", failures(&r));
}

#[test]
fn a_check_cannot_change_the_seal() {
    let d = TestDir::new("verifier-seal");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "x").unwrap();
    let c = contract(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: \"echo changed > a.txt\"\n      - file_contains: a.txt\n        text: x\n",
    );
    let sha = c.sha256().unwrap();
    let mut v = SnapshotVerifier::new(&ws, &d.path().join("scratch"));
    let r = v.verify(&c, &sha, 1).unwrap();
    assert!(failures(&r).is_empty());
    assert!(v.last_sealed().unwrap().is_intact().unwrap());
}

#[test]
fn file_checks_do_not_follow_symlinks_out() {
    let outside = TestDir::new("verifier-outside");
    std::fs::write(outside.path().join("secret"), "password").unwrap();
    let d = TestDir::new("verifier-link");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), ws.join("link")).unwrap();
    let c = contract(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - file_contains: link\n        text: password\n",
    );
    let sha = c.sha256().unwrap();
    let r = SnapshotVerifier::new(&ws, &d.path().join("scratch"))
        .verify(&c, &sha, 1)
        .unwrap();
    let f = failures(&r);
    assert_eq!(f.len(), 1);
    assert!(f[0].contains("resolves outside the workspace"), "{}", f[0]);
}

#[test]
fn missing_artifacts_are_reported() {
    let r = verify(
        &[],
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"true\"}]\nartifacts: [out.txt]\n",
    );
    assert!(!r.artifacts[0].present);
    assert_eq!(r.missing_artifacts().count(), 1);
    // A directory where the file should be is no artifact either.
    let r = verify(
        &[("out.txt/inner", "x\n")],
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"true\"}]\nartifacts: [out.txt]\n",
    );
    assert!(!r.artifacts[0].present);
}

#[test]
fn a_protected_file_changed_by_any_means_is_a_violation() {
    let d = TestDir::new("verifier-protected");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(ws.join("tests")).unwrap();
    std::fs::write(ws.join("tests/test_a.py"), "assert False\n").unwrap();
    std::fs::write(ws.join("tests/keep.py"), "x\n").unwrap();
    let baseline = Manifest::of(&ws).unwrap();
    // A command (not a tool) rewrites one protected file and adds another.
    std::fs::write(ws.join("tests/test_a.py"), "pass\n").unwrap();
    std::fs::write(ws.join("tests/new.py"), "pass\n").unwrap();
    std::fs::remove_file(ws.join("tests/keep.py")).unwrap();
    let c = contract("instruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"true\"}]\n");
    let sha = c.sha256().unwrap();
    let mut v = SnapshotVerifier::new(&ws, &d.path().join("scratch"))
        .guard_protected(baseline, Protected::new(&["tests/**".to_string()]).unwrap());
    let r = v.verify(&c, &sha, 1).unwrap();
    assert_eq!(
        r.protected_violations,
        vec![
            "tests/new.py added (protected by tests/**)".to_string(),
            "tests/test_a.py modified (protected by tests/**)".to_string(),
            "tests/keep.py deleted (protected by tests/**)".to_string(),
        ]
    );
    let rejection = loop_protocol::Acceptance::establish(&c, &sha, &r).unwrap_err();
    assert!(matches!(
        rejection,
        loop_protocol::Rejection::ProtectedChanged(_)
    ));
}

/// The data files a protected test reads its cases from are protected
/// too (a model that rewrote `cases.json`, not `add`, was verified); code,
/// documentation and files the project does not have are not.
#[test]
fn the_data_a_protected_test_reads_is_in_the_integrity_set() {
    let d = TestDir::new("verifier-test-data");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(ws.join("fixtures")).unwrap();
    std::fs::create_dir_all(ws.join("tests/data")).unwrap();
    std::fs::write(ws.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(ws.join("cases.json"), "[[2, 3, 5]]\n").unwrap();
    std::fs::write(ws.join("fixtures/add_cases.json"), "[[1, 1, 2]]\n").unwrap();
    std::fs::write(ws.join("tests/data/more.csv"), "1,2,3\n").unwrap();
    std::fs::write(ws.join("README.md"), "calc\n").unwrap();
    std::fs::write(ws.join("notes.json"), "{}\n").unwrap();
    std::fs::create_dir_all(ws.join("locales")).unwrap();
    std::fs::write(ws.join("locales/en.json"), "{}\n").unwrap();
    std::fs::write(
        ws.join("test_calc.py"),
        "import json, unittest, calc\nCASES = json.load(open('cases.json')) + json.load(open(\"fixtures/add_cases.json\"))\nREADME = open('README.md').read()\nSRC = open('calc.py').read()\nGONE = 'missing.json'\nLABELS = json.load(open('locales/en.json'))\n",
    )
    .unwrap();
    std::fs::write(ws.join("tests/test_more.py"), "open('data/more.csv')\n").unwrap();
    let c = contract(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"python3 -m unittest -v test_calc\"}]\n",
    );
    let rules = crate::integrity::derive(&c, &ws);
    let data: Vec<(&str, &str)> = rules
        .iter()
        .filter(|r| r.why.starts_with("test data"))
        .map(|r| (r.glob.as_str(), r.why.as_str()))
        .collect();
    assert_eq!(
        data,
        vec![
            ("cases.json", "test data test_calc.py reads"),
            ("fixtures/add_cases.json", "test data test_calc.py reads"),
        ],
        "tests/data/more.csv is under tests/ already"
    );
    let protected = Protected::new(&[])
        .unwrap()
        .with_named(&crate::integrity::named(&rules), &[])
        .unwrap();
    assert!(protected.matching("cases.json").is_some());
    assert!(protected.matching("tests/data/more.csv").is_some());
    // The project's own data a test reads (its labels) is not the test's:
    // an honest task changes it.
    for free in ["calc.py", "README.md", "notes.json", "locales/en.json"] {
        assert!(protected.matching(free).is_none(), "{free}");
    }
}

/// The check-integrity set and the shadow scan reject a seal however the
/// file got there (a command's effect, a later edit), naming the layer.
#[test]
fn integrity_rules_and_new_stdlib_modules_are_rejected_at_verification() {
    let d = TestDir::new("verifier-integrity");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(ws.join("pkg")).unwrap();
    std::fs::write(ws.join("pkg/__init__.py"), "").unwrap();
    let baseline = Manifest::of(&ws).unwrap();
    std::fs::write(ws.join("conftest.py"), "x = 1\n").unwrap();
    std::fs::write(ws.join("json.py"), "x = 1\n").unwrap();
    std::fs::write(ws.join("pkg/json.py"), "x = 1\n").unwrap();
    let c = contract(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"python3 -m pytest\"}]\n",
    );
    let sha = c.sha256().unwrap();
    let rules = crate::integrity::derive(&c, &ws);
    let protected = Protected::new(&[])
        .unwrap()
        .with_named(&crate::integrity::named(&rules), &[])
        .unwrap();
    let mut v =
        SnapshotVerifier::new(&ws, &d.path().join("scratch")).guard_protected(baseline, protected);
    let r = v.verify(&c, &sha, 1).unwrap();
    assert_eq!(
        r.protected_violations,
        vec![
            "conftest.py added (protected by check integrity: pytest hook files (python) `**/conftest.py`)".to_string(),
            "json.py added (check integrity: it shadows the python standard module `json`)".to_string(),
        ]
    );
}

/// The root `.git` is left out of manifests (a worktree's pointer names a
/// path of its machine), so it is guarded on its own: a pointer changed,
/// or a repository planted where there was none, is a protected change.
#[test]
fn a_changed_or_planted_root_git_is_a_protected_change() {
    let d = TestDir::new("verifier-root-git");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let pointer = b"gitdir: /project/.git/worktrees/workspace\n".to_vec();
    std::fs::write(ws.join(".git"), &pointer).unwrap();
    let baseline = Manifest::of(&ws).unwrap();
    assert!(baseline.get(".git").is_none());
    let c = contract("instruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"true\"}]\n");
    let sha = c.sha256().unwrap();
    let guard = || Protected::new(&["**/.git/**".to_string()]).unwrap();
    let verify = |expected: Option<Vec<u8>>| {
        SnapshotVerifier::new(&ws, &d.path().join("scratch"))
            .guard_protected(baseline.clone(), guard())
            .guard_root_git(expected)
            .verify(&c, &sha, 1)
            .unwrap()
            .protected_violations
    };
    // As made: nothing to say.
    assert_eq!(verify(Some(pointer.clone())), Vec::<String>::new());
    // Pointed elsewhere.
    std::fs::write(ws.join(".git"), b"gitdir: /elsewhere/.git\n").unwrap();
    let v = verify(Some(pointer.clone()));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with(".git changed"), "{v:?}");
    // A repository planted in a workspace that had none (a copy).
    std::fs::remove_file(ws.join(".git")).unwrap();
    assert_eq!(verify(None), Vec::<String>::new());
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let v = verify(None);
    assert_eq!(v.len(), 1, "{v:?}");
}

#[test]
fn a_check_that_asks_for_a_terminal_gets_the_runtimes_and_one_that_does_not_gets_none() {
    // The same test of a terminal: on the runtime's pseudo-terminal when
    // the check asks for one, on none otherwise (never the caller's).
    let yaml = |terminal: bool| {
        format!(
            "instruction: x\ncriteria:\n  - id: tty\n    checks:\n      - run: \"test -t 0 && test -t 1 && test -e /dev/tty\"\n        terminal: {terminal}\n"
        )
    };
    let r = verify(&[("a.txt", "a")], &yaml(true));
    assert!(failures(&r).is_empty(), "{:?}", failures(&r));
    let r = verify(&[("a.txt", "a")], &yaml(false));
    assert_eq!(failures(&r).len(), 1, "a check with no terminal found one");
    // A terminal is recorded in the contract only when asked for.
    let c = contract(&yaml(false));
    assert!(!serde_json::to_string(&c).unwrap().contains("terminal"));
    let c = contract(&yaml(true));
    assert!(
        serde_json::to_string(&c)
            .unwrap()
            .contains("\"terminal\":true")
    );
}

/// A check run before on the same workspace is not run again; on another
/// workspace (any byte changed) every check runs.
#[test]
fn a_check_already_run_on_the_same_workspace_is_taken_not_run_again() {
    let d = TestDir::new("verifier-reuse");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    // Each run prints something no other run prints.
    let c = contract(
        "instruction: x\ncriteria:\n  - id: fresh\n    checks:\n      - run: cat /proc/sys/kernel/random/uuid\n  - id: file\n    checks:\n      - file_contains: a.txt\n        text: one\n",
    );
    let sha = c.sha256().unwrap();
    let scratch = d.path().join("scratch");
    let stdout = |r: &VerificationReport| r.criteria[0].checks[0].stdout.clone().unwrap().sha256;
    let first = SnapshotVerifier::new(&ws, &scratch)
        .verify(&c, &sha, 0)
        .unwrap();
    let again = SnapshotVerifier::new(&ws, &scratch)
        .verify(&c, &sha, 0)
        .unwrap();
    assert_ne!(stdout(&first), stdout(&again), "each run is its own");
    let taken = SnapshotVerifier::new(&ws, &scratch)
        .reusing(first.manifest_root.clone(), std::slice::from_ref(&first))
        .verify(&c, &sha, 0)
        .unwrap();
    assert_eq!(stdout(&taken), stdout(&first));
    assert!(taken.criteria.iter().all(|c| c.passed));
    assert_eq!(taken.isolation, first.isolation);
    // The workspace changed: the earlier result is not taken.
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    let changed = SnapshotVerifier::new(&ws, &scratch)
        .reusing(first.manifest_root.clone(), std::slice::from_ref(&first))
        .verify(&c, &sha, 0)
        .unwrap();
    assert_ne!(stdout(&changed), stdout(&first));
    assert_ne!(changed.manifest_root, first.manifest_root);
}

/// A build guard whose command begins the test check's (`B && REST`) is
/// not run again when the test check passed; it is run on its own when
/// the test check failed, or when `REST` could make the whole pass
/// without `B` (`|| true`, `;`).
#[test]
fn a_check_whose_command_another_ran_first_is_implied_only_when_that_proves_it() {
    let files = [
        ("build.sh", "cat /proc/sys/kernel/random/uuid\nexit 0\n"),
        ("broken.sh", "echo broken\nexit 1\n"),
        ("test.sh", "echo tested\n"),
        ("fail.sh", "exit 1\n"),
    ];
    let guard = |b: &str, t: &str| {
        format!(
            "instruction: x\ncriteria:\n  - id: build\n    guard: true\n    checks:\n      - run: \"{b}\"\n  - id: tests\n    checks:\n      - run: \"{t}\"\n"
        )
    };
    let build = |r: &VerificationReport| r.criteria[0].checks[0].clone();
    // Implied: not run (no output of its own), passed, named.
    let r = verify(&files, &guard("sh build.sh", "sh build.sh && sh test.sh"));
    assert!(r.criteria.iter().all(|c| c.passed), "{:?}", failures(&r));
    let b = build(&r);
    assert_eq!(b.implied_by.as_deref(), Some("tests#0"));
    assert!(b.stdout.is_none() && b.exit_code == Some(0) && b.passed);
    // The test check failed: the build runs on its own.
    let r = verify(&files, &guard("sh build.sh", "sh build.sh && sh fail.sh"));
    let b = build(&r);
    assert!(b.implied_by.is_none() && b.stdout.is_some() && b.passed);
    assert!(!r.criteria[1].passed);
    // The baseline (attempt 0) runs each check on its own.
    let d = TestDir::new("verifier-implied-baseline");
    let ws = d.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for (p, c) in &files {
        std::fs::write(ws.join(p), c).unwrap();
    }
    let c = contract(&guard("sh build.sh", "sh build.sh && sh test.sh"));
    let r = SnapshotVerifier::new(&ws, &d.path().join("scratch"))
        .verify(&c, &c.sha256().unwrap(), 0)
        .unwrap();
    assert!(build(&r).implied_by.is_none() && build(&r).stdout.is_some());
    // A test command that lets an empty run pass implies no check that
    // would fail one.
    let lax = guard("sh build.sh", "sh build.sh && sh test.sh").replace(
        "sh build.sh && sh test.sh\"\n",
        "sh build.sh && sh test.sh\"\n        nonempty_tests: false\n",
    );
    assert!(lax.contains("nonempty_tests: false"), "{lax}");
    let r = verify(&files, &lax);
    assert!(build(&r).implied_by.is_none(), "{:?}", build(&r));
    // A broken build is never implied by a test command that hides it.
    for t in [
        "sh broken.sh && sh test.sh || true",
        "sh broken.sh; sh test.sh",
        "sh broken.sh && sh test.sh & wait",
    ] {
        let r = verify(&files, &guard("sh broken.sh", t));
        let b = build(&r);
        assert!(b.implied_by.is_none(), "{t}");
        assert!(!b.passed, "{t}: {b:?}");
    }
}
