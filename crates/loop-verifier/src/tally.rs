//! What a test runner says it ran, read from its output.
//!
//! A check's exit status says whether the runner was satisfied, not what
//! it ran. Code under test runs inside the runner's process and can end it
//! early (`os._exit(0)` at import), skip every test (`pytest.skip` at
//! module level), or make tests vanish from collection. The tally read
//! here is compared with the baseline run's (see [`compare`]): a check
//! whose runner printed no summary where it printed one before, ran fewer
//! tests, or no longer ran tests it ran before is rejected.
//!
//! Formats recognised: pytest, unittest, `cargo test`, cargo-nextest,
//! `go test -v`, Jest, Vitest, Mocha, TAP (`node --test`), node's spec
//! reporter and CTest. Names are kept only when the output
//! lists every test that ran (verbose modes), so a partial listing (a
//! failure summary) never reads as tests that vanished.

use loop_protocol::TestTally;
use regex::Regex;
use std::collections::BTreeSet;
use std::sync::OnceLock;

struct Patterns {
    pytest_summary: Regex,
    pytest_count: Regex,
    pytest_name: Regex,
    unittest_ran: Regex,
    unittest_skipped: Regex,
    unittest_name: Regex,
    cargo_result: Regex,
    cargo_name: Regex,
    go_name: Regex,
    jest_tests: Regex,
    jest_count: Regex,
    mocha: Regex,
    tap: Regex,
    vitest: Regex,
    vitest_count: Regex,
    nextest: Regex,
    nextest_skipped: Regex,
    node_spec: Regex,
    ctest: Regex,
    ctest_none: Regex,
    ctest_disabled: Regex,
}

/// The patterns, compiled once (`None` only if one of these constants
/// failed to compile, which the unit tests would show).
fn patterns() -> Option<&'static Patterns> {
    static P: OnceLock<Option<Patterns>> = OnceLock::new();
    P.get_or_init(|| {
        let re = |s: &str| Regex::new(s).ok();
        Some(Patterns {
            pytest_summary: re(
                r"(?m)^[= ]*((?:\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?|rerun)(?:, )?)+|no tests ran)(?: in [\d.]+s.*)?[ =]*$",
            )?,
            pytest_count: re(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)")?,
            pytest_name: re(r"(?m)^(\S+::\S+) (PASSED|FAILED|ERROR|XPASS)\b")?,
            unittest_ran: re(r"(?m)^Ran (\d+) tests? in [\d.]+s$")?,
            unittest_skipped: re(r"(?m)^(?:OK|FAILED) \(.*?\bskipped=(\d+)")?,
            unittest_name: re(r"(?m)^(\w+ \([\w.]+\)) \.\.\. (ok|FAIL|ERROR|unexpected success)\b")?,
            cargo_result: re(
                r"(?m)^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out",
            )?,
            cargo_name: re(r"(?m)^test (\S+) \.\.\. (ok|FAILED)$")?,
            go_name: re(r"(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)")?,
            jest_tests: re(r"(?m)^Tests:\s+(.*?)(\d+) total")?,
            jest_count: re(r"(\d+) (passed|failed|skipped|todo)")?,
            mocha: re(r"(?m)^\s+(\d+) (passing|failing|pending)\b")?,
            tap: re(r"(?m)^# (tests|pass|fail|skipped|todo|cancelled) (\d+)$")?,
            // ` Tests  2 failed | 99 passed (101)` (colours stripped by the
            // runner when not on a terminal).
            vitest: re(r"(?m)^\s*Tests\s+((?:\d+ \w+(?: \| )?)+)\s*\((\d+)\)\s*$")?,
            vitest_count: re(r"(\d+) (passed|failed|skipped|todo)")?,
            // `     Summary [   0.010s] 3 tests run: 3 passed, 1 skipped`
            nextest: re(r"(?m)^\s*Summary \[[^\]]*\] (\d+) tests? run: ")?,
            nextest_skipped: re(r"(?m)^\s*Summary \[[^\]]*\] \d+ tests? run: .*?(\d+) skipped")?,
            // `ℹ tests 3` … `ℹ skipped 0` (node --test's spec reporter).
            node_spec: re(r"(?m)^\S+ (tests|pass|fail|skipped|todo|cancelled) (\d+)$")?,
            // `100% tests passed, 0 tests failed out of 3`
            ctest: re(r"(?m)^\d+% tests passed, (\d+) tests? failed out of (\d+)$")?,
            ctest_none: re(r"(?m)^No tests were found!+$")?,
            ctest_disabled: re(r"(?m)^\s+\d+ - .* \((?:Disabled|Not Run)\)$")?,
        })
    })
    .as_ref()
}

fn num(s: &str) -> u64 {
    s.parse().unwrap_or(0)
}

/// The tally in `output` (a check's stdout and stderr), when a runner's
/// summary is recognised.
pub fn read(output: &str) -> Option<TestTally> {
    let p = patterns()?;
    READERS.iter().find_map(|reader| reader(p, output))
}

/// Each runner's reader, in the order their summaries are looked for: the
/// first that recognises one gives the tally.
const READERS: [fn(&Patterns, &str) -> Option<TestTally>; 11] = [
    read_pytest,
    read_unittest,
    read_cargo,
    read_jest,
    read_nextest,
    read_vitest,
    read_ctest,
    read_tap,
    read_mocha,
    read_node_spec,
    read_go,
];

/// pytest: the last summary line.
fn read_pytest(p: &Patterns, output: &str) -> Option<TestTally> {
    let line = p.pytest_summary.captures_iter(output).last()?;
    let mut names = BTreeSet::new();
    let (mut ran, mut skipped) = (0, 0);
    for c in p.pytest_count.captures_iter(&line[1]) {
        let n = num(&c[1]);
        match &c[2] {
            "passed" | "failed" | "error" | "errors" | "xpassed" => ran += n,
            _ => skipped += n,
        }
    }
    for c in p.pytest_name.captures_iter(output) {
        names.insert(c[1].to_string());
    }
    Some(finish("pytest", ran, skipped, names))
}

/// unittest: the last `Ran N tests` line, less what it skipped.
fn read_unittest(p: &Patterns, output: &str) -> Option<TestTally> {
    let c = p.unittest_ran.captures_iter(output).last()?;
    let mut names = BTreeSet::new();
    let total = num(&c[1]);
    let skipped = p
        .unittest_skipped
        .captures_iter(output)
        .last()
        .map_or(0, |c| num(&c[1]));
    for c in p.unittest_name.captures_iter(output) {
        names.insert(c[1].to_string());
    }
    Some(finish(
        "unittest",
        total.saturating_sub(skipped),
        skipped,
        names,
    ))
}

/// `cargo test`: every target's `test result:` line, summed.
fn read_cargo(p: &Patterns, output: &str) -> Option<TestTally> {
    let cargo: Vec<_> = p.cargo_result.captures_iter(output).collect();
    if cargo.is_empty() {
        return None;
    }
    let mut names = BTreeSet::new();
    let ran = cargo.iter().map(|c| num(&c[1]) + num(&c[2])).sum();
    let skipped = cargo.iter().map(|c| num(&c[3]) + num(&c[4])).sum();
    for c in p.cargo_name.captures_iter(output) {
        names.insert(c[1].to_string());
    }
    Some(finish("cargo", ran, skipped, names))
}

/// Jest: the last `Tests:` line.
fn read_jest(p: &Patterns, output: &str) -> Option<TestTally> {
    let c = p.jest_tests.captures_iter(output).last()?;
    let (mut ran, mut skipped) = (0, 0);
    for k in p.jest_count.captures_iter(&c[1]) {
        match &k[2] {
            "passed" | "failed" => ran += num(&k[1]),
            _ => skipped += num(&k[1]),
        }
    }
    Some(finish("jest", ran, skipped, BTreeSet::new()))
}

/// cargo-nextest: the last `Summary` line.
fn read_nextest(p: &Patterns, output: &str) -> Option<TestTally> {
    let nextest: Vec<_> = p.nextest.captures_iter(output).collect();
    let c = nextest.last()?;
    let skipped = p
        .nextest_skipped
        .captures_iter(output)
        .last()
        .map_or(0, |c| num(&c[1]));
    Some(finish("nextest", num(&c[1]), skipped, BTreeSet::new()))
}

/// Vitest: the last `Tests` line.
fn read_vitest(p: &Patterns, output: &str) -> Option<TestTally> {
    let c = p.vitest.captures_iter(output).last()?;
    let (mut ran, mut skipped) = (0, 0);
    for k in p.vitest_count.captures_iter(&c[1]) {
        match &k[2] {
            "passed" | "failed" => ran += num(&k[1]),
            _ => skipped += num(&k[1]),
        }
    }
    Some(finish("vitest", ran, skipped, BTreeSet::new()))
}

/// CTest: the last `tests passed, … out of N` line less the disabled
/// tests, or none found.
fn read_ctest(p: &Patterns, output: &str) -> Option<TestTally> {
    if let Some(c) = p.ctest.captures_iter(output).last() {
        let disabled = p.ctest_disabled.captures_iter(output).count() as u64;
        let total = num(&c[2]);
        return Some(finish(
            "ctest",
            total.saturating_sub(disabled),
            disabled,
            BTreeSet::new(),
        ));
    }
    if p.ctest_none.is_match(output) {
        return Some(finish("ctest", 0, 0, BTreeSet::new()));
    }
    None
}

/// TAP (`node --test`): the last `# tests`, `# pass`, … counts.
fn read_tap(p: &Patterns, output: &str) -> Option<TestTally> {
    let tap: Vec<_> = p.tap.captures_iter(output).collect();
    if !tap.iter().any(|c| &c[1] == "tests") {
        return None;
    }
    let get = |k: &str| {
        tap.iter()
            .filter(|c| &c[1] == k)
            .map(|c| num(&c[2]))
            .next_back()
            .unwrap_or(0)
    };
    Some(finish(
        "tap",
        get("pass") + get("fail") + get("cancelled"),
        get("skipped") + get("todo"),
        BTreeSet::new(),
    ))
}

/// Mocha: the `passing`, `failing` and `pending` counts.
fn read_mocha(p: &Patterns, output: &str) -> Option<TestTally> {
    let mocha: Vec<_> = p.mocha.captures_iter(output).collect();
    if !mocha.iter().any(|c| &c[2] == "passing") {
        return None;
    }
    let (mut ran, mut skipped) = (0, 0);
    for c in &mocha {
        match &c[2] {
            "pending" => skipped += num(&c[1]),
            _ => ran += num(&c[1]),
        }
    }
    Some(finish("mocha", ran, skipped, BTreeSet::new()))
}

/// node's spec reporter: the last `tests`, `pass`, … counts.
fn read_node_spec(p: &Patterns, output: &str) -> Option<TestTally> {
    let spec: Vec<_> = p.node_spec.captures_iter(output).collect();
    if !(spec.iter().any(|c| &c[1] == "tests") && spec.iter().any(|c| &c[1] == "pass")) {
        return None;
    }
    let get = |k: &str| {
        spec.iter()
            .filter(|c| &c[1] == k)
            .map(|c| num(&c[2]))
            .next_back()
            .unwrap_or(0)
    };
    Some(finish(
        "node",
        get("pass") + get("fail") + get("cancelled"),
        get("skipped") + get("todo"),
        BTreeSet::new(),
    ))
}

/// `go test -v`: one `--- PASS`, `--- FAIL` or `--- SKIP` line a test.
fn read_go(p: &Patterns, output: &str) -> Option<TestTally> {
    let go: Vec<_> = p.go_name.captures_iter(output).collect();
    if go.is_empty() {
        return None;
    }
    let mut names = BTreeSet::new();
    let mut ran = 0;
    let mut skipped = 0;
    for c in &go {
        if &c[1] == "SKIP" {
            skipped += 1;
        } else {
            ran += 1;
            names.insert(c[2].to_string());
        }
    }
    Some(finish("go", ran, skipped, names))
}

/// How many tests the runner in `output` says failed (errors included),
/// when a summary is recognised: `Some(0)` for a summary with none.
pub fn failures(output: &str) -> Option<u64> {
    let last = |re: &str| -> Option<Vec<u64>> {
        let r = Regex::new(re).ok()?;
        let caps = r.captures_iter(output).last()?;
        Some(
            (1..caps.len())
                .map(|i| caps.get(i).map_or(0, |m| num(m.as_str())))
                .collect(),
        )
    };
    let kind = read(output)?.runner;
    let n = match kind.as_str() {
        "pytest" => {
            let p = patterns()?;
            let line = p.pytest_summary.captures_iter(output).last()?;
            p.pytest_count
                .captures_iter(&line[1])
                .filter(|c| matches!(&c[2], "failed" | "error" | "errors"))
                .map(|c| num(&c[1]))
                .sum()
        }
        "unittest" => last(r"(?m)^FAILED \((?:failures=(\d+))?(?:, )?(?:errors=(\d+))?")
            .map_or(0, |v| v.iter().sum()),
        "cargo" => Regex::new(r"(?m)^test result: \w+\. \d+ passed; (\d+) failed;")
            .ok()?
            .captures_iter(output)
            .map(|c| num(&c[1]))
            .sum(),
        "nextest" => last(
            r"(?m)^\s*Summary \[[^\]]*\] \d+ tests? run: (?:\d+ passed(?:[^,]*)?, )?(\d+) failed",
        )
        .map_or(0, |v| v[0]),
        "jest" | "vitest" => last(r"(?m)Tests:?\s+(\d+) failed").map_or(0, |v| v[0]),
        "mocha" => last(r"(?m)^\s+(\d+) failing").map_or(0, |v| v[0]),
        "tap" | "node" => last(r"(?m)^\S+ fail (\d+)$").map_or(0, |v| v[0]),
        "ctest" => last(r"(?m)tests passed, (\d+) tests? failed out of").map_or(0, |v| v[0]),
        "go" => Regex::new(r"(?m)^\s*--- FAIL: ")
            .ok()?
            .find_iter(output)
            .count() as u64,
        _ => return None,
    };
    Some(n)
}

/// Keep names only when they account for every test that ran.
fn finish(runner: &str, ran: u64, skipped: u64, names: BTreeSet<String>) -> TestTally {
    let complete = names.len() as u64 == ran;
    let names_truncated = complete && names.len() > TestTally::MAX_NAMES;
    TestTally {
        runner: runner.to_string(),
        ran,
        skipped,
        names: if complete {
            names.into_iter().take(TestTally::MAX_NAMES).collect()
        } else {
            Vec::new()
        },
        names_truncated,
    }
}

/// How the tally of a check now differs from the baseline run's in a way
/// that says tests were lost, or `None`. With `names` false (the contract
/// lets the model change check files) renamed tests are not compared.
pub fn compare(baseline: &TestTally, now: Option<&TestTally>, names: bool) -> Option<String> {
    let Some(now) = now else {
        return Some(format!(
            "the test runner printed no summary, though at the baseline {} reported {} test(s) ran: the run ended before its runner could report (or its output was replaced)",
            baseline.runner, baseline.ran
        ));
    };
    if now.ran < baseline.ran {
        return Some(format!(
            "{} test(s) ran, fewer than the {} that ran at the baseline ({} now skipped)",
            now.ran, baseline.ran, now.skipped
        ));
    }
    if names && !baseline.names.is_empty() && !baseline.names_truncated && !now.names.is_empty() {
        let have: BTreeSet<&String> = now.names.iter().collect();
        let gone: Vec<&str> = baseline
            .names
            .iter()
            .filter(|n| !have.contains(n))
            .map(String::as_str)
            .collect();
        if !gone.is_empty() {
            let shown: Vec<&str> = gone.iter().take(5).copied().collect();
            return Some(format!(
                "{} test(s) that ran at the baseline no longer ran (renamed, removed or skipped): {}{}",
                gone.len(),
                shown.join(", "),
                if gone.len() > 5 { ", …" } else { "" }
            ));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn pytest_quiet_and_verbose() {
        let t = read("F.s.\n1 failed, 2 passed, 1 skipped in 0.01s\n").unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("pytest", 3, 1));
        assert!(t.names.is_empty());
        let v = "tests/t.py::test_a PASSED    [ 25%]\ntests/t.py::test_b FAILED   [ 50%]\ntests/t.py::test_c SKIPPED (x)\n\
                 FAILED tests/t.py::test_b - assert 2 == 3\n=========== 1 failed, 1 passed, 1 skipped in 0.01s ===========\n";
        let t = read(v).unwrap();
        assert_eq!((t.ran, t.skipped), (2, 1));
        assert_eq!(t.names, vec!["tests/t.py::test_a", "tests/t.py::test_b"]);
        // A failure summary alone names only some: no names kept.
        let t = read("FAILED tests/t.py::test_b - x\n1 failed, 4 passed in 0.1s\n").unwrap();
        assert!(t.names.is_empty());
        let t = read("============ no tests ran in 0.01s ============\n").unwrap();
        assert_eq!(t.ran, 0);
        let t = read("==== 1 skipped in 0.01s ====\n").unwrap();
        assert_eq!((t.ran, t.skipped), (0, 1));
    }

    #[test]
    fn failures_are_read_where_a_summary_says_them() {
        assert_eq!(failures("2 failed, 1 passed in 0.1s\n"), Some(2));
        assert_eq!(failures("3 passed in 0.1s\n"), Some(0));
        assert_eq!(
            failures("Ran 3 tests in 0.0s\n\nFAILED (failures=1, errors=1)\n"),
            Some(2)
        );
        assert_eq!(
            failures(
                "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished\n"
            ),
            Some(2)
        );
        assert_eq!(
            failures("67% tests passed, 1 tests failed out of 3\n"),
            Some(1)
        );
        assert_eq!(failures("no summary at all\n"), None);
    }

    #[test]
    fn ctest_vitest_nextest_and_nodes_spec_reporter() {
        let c = "Test project /p/build\n    Start 1: parse\n1/3 Test #1: parse ....   Passed    0.01 sec\n\
                 67% tests passed, 1 tests failed out of 3\n\nTotal Test time (real) =   0.03 sec\n";
        let t = read(c).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("ctest", 3, 0));
        let d = "100% tests passed, 0 tests failed out of 2\n\nThe following tests did not run:\n\
                 \t  2 - slow (Disabled)\n";
        let t = read(d).unwrap();
        assert_eq!((t.ran, t.skipped), (1, 1));
        let none = "Test project /p/build\nNo tests were found!!!\n";
        assert_eq!(read(none).unwrap().ran, 0);
        let v = " \u{2713} test/a.test.ts (3 tests) 4ms\n\n Test Files  1 passed (1)\n      Tests  2 failed | 99 passed (101)\n   Start at  10:00:00\n";
        let t = read(v).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("vitest", 101, 0));
        let v0 = " Test Files  no tests\n      Tests  1 skipped (1)\n";
        assert_eq!(read(v0).unwrap().ran, 0);
        let n = "    PASS [   0.004s] crate tests::a\n------------\n     Summary [   0.010s] 3 tests run: 3 passed, 1 skipped\n";
        let t = read(n).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("nextest", 3, 1));
        let s = "\u{2714} adds (0.5ms)\n\u{2139} tests 2\n\u{2139} suites 0\n\u{2139} pass 2\n\u{2139} fail 0\n\u{2139} cancelled 0\n\u{2139} skipped 1\n\u{2139} todo 0\n";
        let t = read(s).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("node", 2, 1));
    }

    #[test]
    fn unittest_cargo_go_jest_tap_mocha() {
        let u = "test_a (m.T.test_a) ... ok\ntest_b (m.T.test_b) ... FAIL\ntest_c (m.T.test_c) ... skipped 'x'\n\
                 ----\nRan 3 tests in 0.000s\n\nFAILED (failures=1, skipped=1)\n";
        let t = read(u).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("unittest", 2, 1));
        assert_eq!(t.names.len(), 2);
        let c = "test a::x ... ok\ntest b ... FAILED\ntest result: FAILED. 1 passed; 1 failed; 2 ignored; 0 measured; 3 filtered out; finished\n\
                 test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished\n";
        let t = read(c).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("cargo", 6, 5));
        assert!(t.names.is_empty(), "2 names for 6 tests is partial");
        let g = "=== RUN   TestA\n--- PASS: TestA (0.00s)\n--- FAIL: TestB (0.00s)\n--- SKIP: TestC (0.00s)\nFAIL\n";
        let t = read(g).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("go", 2, 1));
        assert_eq!(t.names, vec!["TestA", "TestB"]);
        let j = "Tests:       1 failed, 1 skipped, 3 passed, 5 total\n";
        let t = read(j).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("jest", 4, 1));
        let tap =
            "# tests 4\n# suites 0\n# pass 3\n# fail 0\n# cancelled 0\n# skipped 1\n# todo 0\n";
        let t = read(tap).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("tap", 3, 1));
        let m = "  3 passing (5ms)\n  1 pending\n  1 failing\n";
        let t = read(m).unwrap();
        assert_eq!((t.runner.as_str(), t.ran, t.skipped), ("mocha", 4, 1));
        assert!(read("all good\n").is_none());
    }

    #[test]
    fn comparison_names_the_loss() {
        let base = read("t.py::a PASSED\nt.py::b FAILED\n1 failed, 1 passed in 0.1s\n").unwrap();
        assert!(compare(&base, None, true).unwrap().contains("no summary"));
        let skipped = read("1 skipped in 0.01s\n").unwrap();
        let why = compare(&base, Some(&skipped), true).unwrap();
        assert!(why.contains("0 test(s) ran, fewer than the 2"), "{why}");
        let renamed = read("t.py::a PASSED\nt.py::c PASSED\n2 passed in 0.1s\n").unwrap();
        let why = compare(&base, Some(&renamed), true).unwrap();
        assert!(
            why.contains("no longer ran") && why.contains("t.py::b"),
            "{why}"
        );
        assert_eq!(compare(&base, Some(&renamed), false), None);
        let more =
            read("t.py::a PASSED\nt.py::b PASSED\nt.py::c PASSED\n3 passed in 0.1s\n").unwrap();
        assert_eq!(compare(&base, Some(&more), true), None);
        // Quiet output (no names) compares counts only.
        let quiet = read("2 passed in 0.1s\n").unwrap();
        assert_eq!(compare(&base, Some(&quiet), true), None);
    }
}
