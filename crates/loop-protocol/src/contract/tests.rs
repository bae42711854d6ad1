use super::*;
use crate::yaml::Pos;

const GOOD: &str = r#"
instruction: Create fib.py that prints the first ten Fibonacci numbers.
criteria:
  - id: prints-sequence
    text: python3 fib.py prints 0 1 1 2 3 5 8 13 21 34
    checks:
      - run: python3 fib.py
        expect_exit: 0
        expect_stdout: "0 1 1 2 3 5 8 13 21 34"
  - id: files
    checks:
      - file_exists: fib.py
      - file_contains: fib.py
        text: "def "
      - file_matches: fib.py
        regex: "print\\("
      - json_equals: meta.json
        pointer: /name
        value: fib
artifacts: [fib.py]
protected: ["tests/**"]
limits: { max_steps: 12, max_tokens: 60000, budget_usd: 1.00, timeout_secs: 600 }
"#;

fn errors(src: &str) -> Vec<Diagnostic> {
    Contract::from_yaml(src, "task.yaml").unwrap_err().0
}

fn one_error(src: &str) -> Diagnostic {
    let errs = errors(src);
    assert_eq!(errs.len(), 1, "expected one error, got {errs:#?}");
    errs.into_iter().next().unwrap()
}

#[test]
fn the_architecture_example_compiles() {
    let c = Contract::from_yaml(GOOD, "task.yaml").unwrap();
    assert_eq!(c.criteria.len(), 2);
    assert_eq!(c.criteria[1].text, "files", "text defaults to the id");
    assert_eq!(c.criteria[1].checks.len(), 4);
    assert_eq!(c.limits.max_steps, 12);
    assert_eq!(c.limits.budget_usd, Some(1.0));
    assert_eq!(c.artifacts[0].as_str(), "fib.py");
    match &c.criteria[0].checks[0] {
        Check::Run(r) => {
            assert_eq!(r.command, "python3 fib.py");
            assert_eq!(r.expect_stdout.as_deref(), Some("0 1 1 2 3 5 8 13 21 34"));
            assert_eq!(r.timeout_secs, DEFAULT_CHECK_TIMEOUT_SECS);
        }
        other => panic!("{other:?}"),
    }
    match &c.criteria[1].checks[3] {
        Check::JsonEquals { pointer, value, .. } => {
            assert_eq!(pointer, "/name");
            assert_eq!(value, &serde_json::json!("fib"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hash_is_stable_and_changes_with_content() {
    let a = Contract::from_yaml(GOOD, "a").unwrap();
    let b = Contract::from_yaml(GOOD, "b").unwrap();
    assert_eq!(a.sha256().unwrap(), b.sha256().unwrap());
    assert_eq!(a.sha256().unwrap().len(), 64);
    let mut c = a.clone();
    c.criteria[0].text.push('!');
    assert_ne!(a.sha256().unwrap(), c.sha256().unwrap());
}

#[test]
fn json_round_trip_preserves_the_contract_and_its_hash() {
    let a = Contract::from_yaml(GOOD, "a").unwrap();
    let json = serde_json::to_string(&a).unwrap();
    let back: Contract = serde_json::from_str(&json).unwrap();
    assert_eq!(a, back);
    assert_eq!(a.sha256().unwrap(), back.sha256().unwrap());
}

#[test]
fn criterion_without_checks_is_refused_with_its_position() {
    let d = one_error("instruction: x\ncriteria:\n  - id: a\n    text: nothing to run\n");
    assert_eq!(d.pos, Some(Pos { line: 3, col: 5 }));
    assert!(d.message.contains("criterion `a` has no check"), "{d}");
    assert!(d.hint.as_deref().unwrap().contains("run"), "{d}");
    let d = one_error("instruction: x\ncriteria:\n  - id: a\n    checks: []\n");
    assert_eq!(d.pos, Some(Pos { line: 4, col: 13 }));
    assert!(d.message.contains("has no check"), "{d}");
}

#[test]
fn duplicate_ids_are_refused_at_the_second() {
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_exists: f}]\n  - id: a\n    checks: [{file_exists: g}]\n",
    );
    assert_eq!(d.pos, Some(Pos { line: 5, col: 9 }));
    assert!(
        d.message
            .contains("duplicate criterion id `a` (first used at line 3)"),
        "{d}"
    );
}

/// A criterion with a duplicate id is still read: its other problems are
/// reported with the duplicate, as every problem is, at once.
#[test]
fn a_duplicate_id_does_not_hide_the_criterions_other_problems() {
    let errs = errors(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_exists: f}]\n  - id: a\n    checks: []\n",
    );
    let all: Vec<String> = errs.iter().map(|d| d.message.clone()).collect();
    assert!(
        all.iter().any(|m| m.contains("duplicate criterion id `a`")),
        "{all:?}"
    );
    assert!(
        all.iter().any(|m| m.contains("criterion `a` has no check")),
        "{all:?}"
    );
}

#[test]
fn unknown_key_reports_position_and_did_you_mean() {
    let errs = errors("instruction: x\ncritera: []\n");
    assert_eq!(errs[0].pos, Some(Pos { line: 2, col: 1 }));
    assert!(
        errs[0].message.contains("unknown key `critera`"),
        "{}",
        errs[0]
    );
    assert!(
        errs[0]
            .hint
            .as_deref()
            .unwrap()
            .contains("did you mean `criteria`")
    );
    assert!(errs.iter().any(|e| e.message.contains("no `criteria`")));
}

#[test]
fn unknown_check_kind_is_refused() {
    let d =
        one_error("instruction: x\ncriteria:\n  - id: a\n    checks:\n      - shell: make test\n");
    assert_eq!(d.pos, Some(Pos { line: 5, col: 9 }));
    assert!(d.message.contains("unknown check kind `shell`"), "{d}");
}

#[test]
fn misspelled_check_kind_gets_a_suggestion() {
    let d =
        one_error("instruction: x\ncriteria:\n  - id: a\n    checks:\n      - file_exist: a.txt\n");
    assert!(d.hint.unwrap().contains("did you mean `file_exists`"));
}

#[test]
fn key_of_another_kind_is_named() {
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: make\n        text: hi\n",
    );
    assert_eq!(d.pos, Some(Pos { line: 6, col: 9 }));
    assert!(
        d.message.contains("`text` does not apply to a `run` check"),
        "{d}"
    );
}

#[test]
fn unknown_key_inside_a_check_is_refused() {
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: make\n        expect_stdot: ok\n",
    );
    assert_eq!(d.pos, Some(Pos { line: 6, col: 9 }));
    assert!(d.hint.unwrap().contains("expect_stdout"));
}

#[test]
fn two_kinds_in_one_check_are_refused() {
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: make\n        file_exists: a\n",
    );
    assert!(d.message.contains("one kind"), "{d}");
}

#[test]
fn absolute_and_parent_paths_are_refused() {
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_exists: /etc/passwd}]\n",
    );
    assert_eq!(d.pos, Some(Pos { line: 4, col: 28 }));
    assert!(d.message.contains("absolute"), "{d}");
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_exists: ok}]\nartifacts: [../out.txt]\n",
    );
    assert_eq!(d.pos, Some(Pos { line: 5, col: 13 }));
    assert!(d.message.contains(".."), "{d}");
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_exists: ok}]\nprotected: [../x]\n",
    );
    assert!(d.message.contains("without `..`"), "{d}");
}

#[test]
fn bad_regex_and_pointer_and_exit_are_refused() {
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - file_matches: a\n        regex: \"(unclosed\"\n",
    );
    assert_eq!(d.pos, Some(Pos { line: 6, col: 16 }));
    assert!(d.message.contains("not a valid regular expression"), "{d}");
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - json_equals: a.json\n        pointer: name\n        value: 1\n",
    );
    assert!(d.message.contains("not a JSON pointer"), "{d}");
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks:\n      - run: make\n        expect_exit: 300\n",
    );
    assert!(d.message.contains("0..=255"), "{d}");
}

#[test]
fn missing_required_fields_are_named() {
    let d =
        one_error("instruction: x\ncriteria:\n  - id: a\n    checks:\n      - file_contains: a\n");
    assert!(d.message.contains("needs `text`"), "{d}");
    let d = one_error("criteria:\n  - id: a\n    checks: [{file_exists: a}]\n");
    assert!(d.message.contains("no `instruction`"), "{d}");
}

#[test]
fn wrong_types_are_named() {
    let d = one_error("instruction: x\ncriteria: {a: 1}\n");
    assert_eq!(d.pos, Some(Pos { line: 2, col: 11 }));
    assert!(d.message.contains("must be a list, found a mapping"), "{d}");
    let d = one_error(
        "instruction: x\ncriteria:\n  - id: a\n    checks: [{file_exists: a}]\nlimits: {max_steps: many}\n",
    );
    assert!(d.message.contains("`max_steps` must be an integer"), "{d}");
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let d = one_error("instruction: x\ncriteria: [\n");
    assert!(d.pos.is_some());
    assert!(d.message.contains("invalid YAML"), "{d}");
    let text = d.to_string();
    assert!(text.starts_with("task.yaml:"), "{text}");
}

#[test]
fn several_errors_are_reported_together() {
    let errs = errors(
        "instruction: x\ncriteria:\n  - id: a\n  - id: b\n    checks: [{file_exists: /abs}]\nbogus: 1\n",
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn flags_build_one_criterion_per_check() {
    let c = Contract::from_flags(
        "make it pass",
        &["pytest -q".into(), "ruff check .".into()],
        &["out/report.txt".into()],
    )
    .unwrap();
    assert_eq!(c.criteria.len(), 2);
    assert_eq!(c.criteria[1].id, "check-2");
    assert_eq!(c.artifacts[0].as_str(), "out/report.txt");
    let e = Contract::from_flags("x", &[], &[]).unwrap_err();
    assert!(e.to_string().contains("no acceptance check"), "{e}");
    let e = Contract::from_flags("x", &["true".into()], &["/etc/x".into()]).unwrap_err();
    assert!(e.to_string().contains("absolute"), "{e}");
}

#[test]
fn unprotect_lifts_only_a_default_and_names_anything_else() {
    let c = Contract::from_yaml(&format!("{GOOD}unprotect: [\"**/.gitmodules\"]\n"), "t").unwrap();
    let globs = c.protected_globs();
    assert!(!globs.iter().any(|g| g == "**/.gitmodules"));
    assert!(globs.iter().any(|g| g == "**/.git/**"), "the rest stay");
    // The hash of a contract without `unprotect` is what it always was.
    let plain = Contract::from_yaml(GOOD, "t").unwrap();
    assert!(!serde_json::to_string(&plain).unwrap().contains("unprotect"));
    let e = one_error(&format!("{GOOD}unprotect: [\"tests/**\"]\n"));
    assert!(
        e.message.contains("not one of the default protections"),
        "{}",
        e.message
    );
}

#[test]
fn nested_repositories_state_and_policy_are_protected_by_default() {
    let c = Contract::from_yaml(GOOD, "t").unwrap();
    let globs = c.protected_globs();
    for g in ["**/.git/**", "**/.gitmodules", ".loop/**", "Loopfile.yaml"] {
        assert!(globs.iter().any(|x| x == g), "{g}");
    }
}

#[test]
fn network_allow_takes_host_patterns_and_presets_and_names_the_rest() {
    let c = Contract::from_yaml(
        &format!("{GOOD}network_allow: [pypi, \"*.pkgs.example\", \"mirror.example:8443\", \"10.0.0.1\"]\n"),
        "t",
    )
    .unwrap();
    assert_eq!(c.network_allow.len(), 4);
    // The hash of a contract without it is what it always was.
    let plain = Contract::from_yaml(GOOD, "t").unwrap();
    assert!(
        !serde_json::to_string(&plain)
            .unwrap()
            .contains("network_allow")
    );
    for (entry, why) in [
        ("\"*\"", "only letters, digits"),
        ("\"evil.example:0\"", "its port is not a number"),
        ("\"a/b\"", "only letters, digits"),
        ("\".example\"", "starts or ends with a dot"),
        ("\"pypi.*\"", "only letters, digits"),
    ] {
        let e = one_error(&format!("{GOOD}network_allow: [{entry}]\n"));
        assert!(e.message.contains(why), "{entry}: {}", e.message);
    }
}

#[test]
fn the_authoring_form_reads_back_to_the_same_contract() {
    let src = format!("{GOOD}network_allow: [pypi]\nunprotect: [\"**/.gitmodules\"]\n");
    let mut c = Contract::from_yaml(&src, "t").unwrap();
    c.criteria[0].guard = true;
    c.criteria[0].checks.push(Check::FileContains {
        path: crate::path::RelPath::parse("fib.py").unwrap(),
        text: "fib".into(),
    });
    // What a person said of a check is kept: an empty test run allowed,
    // a check kept though it passes on an empty workspace.
    for (allow_vacuous, nonempty_tests) in [(true, Some(false)), (false, Some(true))] {
        let Some(Check::Run(mut r)) = c.criteria[0].checks.first().cloned() else {
            panic!("the first check is a run check");
        };
        r.allow_vacuous = allow_vacuous;
        r.nonempty_tests = nonempty_tests;
        c.criteria[0].checks.push(Check::Run(r));
    }
    let text = serde_json::to_string_pretty(&c.to_authoring()).unwrap();
    let back = Contract::from_yaml(&text, "back").unwrap();
    assert_eq!(back, c, "{text}");
    assert_eq!(back.sha256().unwrap(), c.sha256().unwrap());
}

#[test]
fn a_contract_over_its_caps_is_refused_naming_the_cap_before_anything_runs() {
    let with = |criteria: usize, checks: usize| {
        let mut y = String::from("instruction: x\ncriteria:\n");
        for i in 0..criteria {
            y.push_str(&format!("  - id: c{i}\n    checks:\n"));
            for _ in 0..checks {
                y.push_str("      - run: \"true\"\n");
            }
        }
        y
    };
    // At the caps: read.
    assert!(Contract::from_yaml(&with(super::MAX_CRITERIA, 2), "t").is_ok());
    // One criterion over, or checks over the total: refused, saying so.
    let e = Contract::from_yaml(&with(super::MAX_CRITERIA + 1, 1), "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("65 criteria: a contract has at most 64"), "{e}");
    let e = Contract::from_yaml(&with(10, 13), "t")
        .unwrap_err()
        .to_string();
    assert!(e.contains("130 checks: a contract has at most 128"), "{e}");
    // The reviewer's 600 and 5,000 `true` checks, in milliseconds.
    let started = std::time::Instant::now();
    for n in [600, 5000] {
        let e = Contract::from_yaml(&with(n, 1), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a contract has at most 64"), "{e}");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // Bytes: over 256 KiB is refused before it is parsed.
    let big = format!(
        "instruction: \"{}\"\n",
        "x".repeat(super::MAX_CONTRACT_BYTES)
    );
    let e = Contract::from_yaml(&big, "t").unwrap_err().to_string();
    assert!(e.contains("over the 262144-byte limit"), "{e}");
}

const DOCUMENTS: &str = r#"
instruction: Summarise the regions.
criteria:
  - id: summary
    checks:
      - {cell_equals: out/summary.xlsx, sheet: Summary, cell: B2, value: 200.5}
      - {cell_equals: out/summary.csv, cell: "A1:B2", value: [[Region, Total], [All, 200.5]]}
      - {sheet_columns: out/summary.xlsx, columns: [Region, Total]}
      - {table_rows: out/report.docx, rows: [[North, 120], [South, null]]}
      - {doc_headings: out/report.docx, headings: [Summary, Outlook]}
      - {pdf_text: out/invoice.pdf, page: 2, text: "Total due"}
      - {pdf_text: out/invoice.pdf, text: "Paid"}
      - {page: /index.html, serve: "python3 -m http.server 8000", port: 8000, text: "9 EUR", element: table}
"#;

#[test]
fn document_checks_read_and_write_back_the_same() {
    let c = Contract::from_yaml(DOCUMENTS, "t").unwrap();
    let kinds: Vec<&str> = c.criteria[0].checks.iter().map(Check::kind).collect();
    assert_eq!(
        kinds,
        [
            "cell_equals",
            "cell_equals",
            "sheet_columns",
            "table_rows",
            "doc_headings",
            "pdf_text",
            "pdf_text",
            "page"
        ]
    );
    assert!(c.criteria[0].checks[..7].iter().all(Check::is_document));
    let Check::Page(p) = &c.criteria[0].checks[7] else {
        panic!("not a page check")
    };
    assert_eq!(
        (p.port, p.timeout_secs, p.title.as_deref()),
        (8000, 60, None)
    );
    let Check::CellEquals { sheet, cell, .. } = &c.criteria[0].checks[0] else {
        panic!("not a cell check")
    };
    assert_eq!((sheet.as_deref(), cell.as_str()), (Some("Summary"), "B2"));
    let text = serde_json::to_string_pretty(&c.to_authoring()).unwrap();
    let back = Contract::from_yaml(&text, "back").unwrap();
    assert_eq!(back, c, "{text}");
    let json = serde_json::to_string(&c).unwrap();
    let again: Contract = serde_json::from_str(&json).unwrap();
    assert_eq!(again.sha256().unwrap(), c.sha256().unwrap());
}

#[test]
fn a_document_check_that_asks_nothing_or_names_no_cell_is_refused_where_it_is() {
    let bad = |check: &str| {
        let src = format!("instruction: x\ncriteria:\n  - id: a\n    checks:\n      - {check}\n");
        one_error(&src)
    };
    let e = bad("{cell_equals: a.xlsx, cell: B0, value: 1}");
    assert!(
        e.message.contains("`cell` \"B0\" is not a cell or a range"),
        "{e:?}"
    );
    assert_eq!(e.pos.map(|p| p.line), Some(5));
    let e = bad("{sheet_columns: a.xlsx, columns: []}");
    assert!(
        e.message
            .contains("`columns` of a `sheet_columns` check is empty"),
        "{e:?}"
    );
    let e = bad("{doc_headings: a.docx, sheet: S, headings: [A]}");
    assert!(e.message.contains("sheet"), "{e:?}");
    let e = bad("{pdf_text: a.pdf, page: 0, text: A}");
    assert!(e.message.contains("page"), "{e:?}");
    let e = bad("{cell_equals: /etc/a.xlsx, cell: A1, value: 1}");
    assert!(
        e.message.contains("absolute") || e.message.contains("path"),
        "{e:?}"
    );
    let e = bad("{table_rows: a.csv, rows: [North]}");
    assert!(e.message.contains("row"), "{e:?}");
    let e = bad("{page: /, serve: x, port: 80}");
    assert!(e.message.contains("names what the page must show"), "{e:?}");
    let e = bad("{page: index.html, serve: x, port: 80, text: a}");
    assert!(e.message.contains("is not a path from `/`"), "{e:?}");
    let e = bad("{page: /, serve: x, port: 70000, text: a}");
    assert!(e.message.contains("is not a port"), "{e:?}");
}
