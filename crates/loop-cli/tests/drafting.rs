//! From one instruction to a verified task: the contract is drafted
//! (scripted), judged by the critic, locked with `--accept-contract`, and
//! verified; a tautological draft is rejected and the task never starts.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shared::{loop_in as loop_cmd, text};

/// A fresh clone of a small Python project whose test fails.
fn python_project(base: &Path) -> PathBuf {
    let origin = base.join("origin");
    std::fs::create_dir_all(&origin).unwrap();
    std::fs::write(origin.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        origin.join("AGENTS.md"),
        "# Notes for agents\nRun the tests with unittest.\n",
    )
    .unwrap();
    std::fs::write(
        origin.join("test_calc.py"),
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    )
    .unwrap();
    let sh = |dir: &Path, cmd: &str| {
        let st = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(st.success(), "{cmd}");
    };
    sh(
        &origin,
        "git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm base",
    );
    sh(base, "git clone -q origin project");
    base.join("project")
}

const FIX: &str = "  - calls:\n      - {tool: write_file, args: {path: calc.py, content: \"def add(a, b):\\n    return a + b\\n\"}}\n      - {tool: finish, args: {summary: add adds}}\n";

fn run(base: &Path, project: &Path, script: &str, extra: &[&str]) -> Output {
    std::fs::write(base.join("script.yaml"), script).unwrap();
    loop_cmd(base)
        .args(["run", "make the tests pass", "--json"])
        .args(extra)
        .arg("--model")
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(project)
        .output()
        .unwrap()
}

#[test]
fn the_instruction_alone_drafts_locks_and_verifies_a_contract() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-ok");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let script = format!(
        "draft:\n  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the unittest suite passes with at least one test run\n              checks:\n                - run: python3 -m unittest -v test_calc\n                  nonempty_tests: true\nturns:\n{FIX}"
    );
    let out = run(&base, &project, &script, &["--accept-contract"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let started = events.iter().find(|e| e["kind"] == "task_started").unwrap();
    let d = &started["drafting"];
    assert_eq!(d["confirmed_by"], "--accept-contract", "{d}");
    assert_eq!(d["attempts"][0]["accepted"], true, "{d}");
    // The project's own test command was detected; it fails before the
    // work, so it is not blamed on the task and not required.
    let stack = &started["project_checks"][0];
    assert_eq!(stack["command"], "python3 -m unittest discover -v", "{d}");
    assert_eq!(stack["held"], false, "{d}");
    assert_eq!(
        stack["used"], "failing before the task: not required",
        "{d}"
    );
    assert_eq!(started["contract"]["criteria"][0]["id"], "tests");
    // The project's guidance reached the model, named in the genesis.
    assert_eq!(started["guidance"][0]["path"], "AGENTS.md", "{started}");
    let receipt = events.iter().find(|e| e["kind"] == "receipt").unwrap();
    assert_eq!(receipt["outcome"]["kind"], "verified", "{receipt}");
    let payload = shared::payload_of(&PathBuf::from(receipt["path"].as_str().unwrap()));
    assert_eq!(
        payload["predicate"]["contract"]["criteria"][0]["id"],
        "tests"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_tautological_draft_is_rejected_three_times_and_the_task_never_starts() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-bad");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let turn = |cmd: &str| {
        format!(
            "  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: done\n              text: the tests pass\n              checks:\n                - run: {}\n",
            serde_json::to_string(cmd).unwrap()
        )
    };
    let script = format!(
        "draft:\n{}{}{}turns:\n{FIX}",
        turn("true"),
        turn("python3 -m unittest || true"),
        turn("echo all tests pass"),
    );
    let out = run(&base, &project, &script, &["--accept-contract"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("the contract critic rejected 3 drafts"),
        "{said}"
    );
    assert!(said.contains("cannot fail or proves nothing"), "{said}");
    // No task was stored, no workspace is left.
    let list = loop_cmd(&base)
        .args(["list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&list.stdout).to_string();
    assert!(!listed.contains("\"task_id\""), "{listed}");
    let kept = said
        .split("(the drafting record is in ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap();
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kept).unwrap()).unwrap();
    assert_eq!(record["attempts"].as_array().unwrap().len(), 3, "{record}");
    assert!(
        record["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["accepted"] == false)
    );
    let ws = shared::workspace_of(
        Path::new(kept).ancestors().nth(4).unwrap(),
        &Path::new(kept)
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy(),
    );
    assert!(
        !ws.exists() && !ws.parent().unwrap().exists(),
        "the workspace was removed, and all beside it: {}",
        ws.display()
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_draft_whose_check_passes_on_an_empty_workspace_is_rejected_and_the_honest_one_verifies() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-vacuous");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let turn = |cmd: &str| {
        format!(
            "  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the unittest suite passes\n              checks:\n                - run: {}\n",
            serde_json::to_string(cmd).unwrap()
        )
    };
    // Shell forms text rules cannot read with confidence, each passing on
    // an empty workspace; then the honest check.
    let script = format!(
        "draft:\n{}{}{}turns:\n{FIX}",
        turn("f(){ python3 -m unittest -v test_calc; }; f | cat"),
        turn("python3 -c 'assert 1'"),
        turn("python3 -m unittest -v test_calc"),
    );
    let out = run(&base, &project, &script, &["--accept-contract"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let started = events.iter().find(|e| e["kind"] == "task_started").unwrap();
    let attempts = started["drafting"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{started}");
    // The first gets past every text rule: only the empty workspace shows
    // it cannot fail.
    assert_eq!(attempts[0]["accepted"], false, "{started}");
    assert!(
        attempts[0]
            .to_string()
            .contains("passes on an empty workspace"),
        "rejected for passing with no project: {}",
        attempts[0]
    );
    assert_eq!(attempts[1]["accepted"], false, "{started}");
    assert_eq!(attempts[2]["accepted"], true, "{started}");
    let outcome = events.iter().rev().find_map(|e| e.get("outcome")).unwrap();
    assert!(outcome.to_string().contains("verified"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

/// The receipt of a run's `--json` output, and what `loop verify` says of
/// its contract.
fn receipt_and_provenance(base: &Path, out: &Output) -> (PathBuf, String) {
    let receipt = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["kind"] == "receipt")
        .and_then(|e| e["path"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("no receipt: {}", text(out)));
    let verify = loop_cmd(base).arg("verify").arg(&receipt).output().unwrap();
    let said = text(&verify);
    let line = said
        .lines()
        .find(|l| l.starts_with("contract "))
        .unwrap_or_else(|| panic!("no contract line: {said}"))
        .to_string();
    (receipt, line)
}

/// A written contract whose every criterion already holds on the
/// untouched workspace can be met by doing nothing: refused before any
/// step (exit 2, naming the criteria and the ways out), as such a draft
/// is rejected. A person who marks them `guard: true` or passes
/// `--allow-vacuous` runs it; a contract with one criterion the change
/// must make pass runs as ever.
#[test]
fn a_written_contract_that_holds_before_any_change_is_refused_unless_a_person_insists() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("written-holds");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let script = format!("turns:\n{FIX}");
    // Holds now (calc.py imports), fails on an empty workspace.
    let holds = "python3 -c 'import calc'";
    let out = run(&base, &project, &script, &["--check", holds]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(
            "every criterion of the contract (`check-1`) already holds on the untouched workspace"
        ) && said.contains("guard: true")
            && said.contains("--allow-vacuous"),
        "{said}"
    );
    assert!(
        !said.contains("\"kind\":\"model_turn\""),
        "nothing ran: {said}"
    );
    // Beside a check the change must make pass: runs and verifies.
    let out = run(
        &base,
        &project,
        &script,
        &[
            "--check",
            holds,
            "--check",
            "python3 -m unittest -v test_calc",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Marked a guard by the person: runs (a guard only has to keep holding).
    std::fs::write(
        base.join("g.yaml"),
        format!("instruction: make the tests pass\ncriteria:\n  - id: imports\n    guard: true\n    checks:\n      - run: {holds:?}\n"),
    )
    .unwrap();
    let file = base.join("g.yaml").display().to_string();
    let out = run(&base, &project, &script, &["--task", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Or insisted on: runs.
    let out = run(
        &base,
        &project,
        &script,
        &["--check", holds, "--allow-vacuous"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // An instruction that asks only to look is not refused.
    std::fs::write(
        base.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: finish, args: {summary: it imports}}\n",
    )
    .unwrap();
    let out = loop_cmd(&base)
        .args([
            "run",
            "check that calc imports",
            "--json",
            "--check",
            holds,
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn a_written_check_that_passes_on_an_empty_workspace_is_refused_unless_a_person_insists() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("written-vacuous");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let script = format!("turns:\n{FIX}");
    // `| cat` hides the suite's failure: it passes with no project at all.
    let vacuous = "python3 -m unittest -v test_calc | cat";
    let out = run(&base, &project, &script, &["--check", vacuous]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!(
            "criterion `check-1`, check 1 (`{vacuous}`) passes on an empty workspace"
        )) && said.contains("--allow-vacuous"),
        "{said}"
    );
    assert!(
        !said.contains("\"kind\":\"task_started\""),
        "nothing ran: {said}"
    );
    assert!(
        !project.join(".loop/receipts").exists()
            || std::fs::read_dir(project.join(".loop/receipts"))
                .unwrap()
                .next()
                .is_none(),
        "no receipt for a refused contract"
    );
    // A contract file says the same of its check, by criterion.
    std::fs::write(
        base.join("c.yaml"),
        format!("instruction: make the tests pass\ncriteria:\n  - id: suite\n    checks:\n      - run: {vacuous:?}\n"),
    )
    .unwrap();
    let file = base.join("c.yaml").display().to_string();
    let out = run(&base, &project, &script, &["--task", &file]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("criterion `suite`, check 1"),
        "{}",
        text(&out)
    );
    // A person who insists: it runs, and the receipt says which check
    // proves nothing.
    let out = run(
        &base,
        &project,
        &script,
        &["--check", vacuous, "--allow-vacuous"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (_, line) = receipt_and_provenance(&base, &out);
    assert_eq!(
        line,
        format!(
            "contract   written (not drafted); 1 check(s) pass on an empty workspace and were kept by a person (allow_vacuous): check-1 #1: `{vacuous}`"
        )
    );
    // The honest check is neither refused nor marked.
    let out = run(
        &base,
        &project,
        &script,
        &["--check", "python3 -m unittest -v test_calc"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (receipt, line) = receipt_and_provenance(&base, &out);
    assert_eq!(line, "contract   written (not drafted)");
    assert!(
        !std::fs::read_to_string(&receipt)
            .unwrap()
            .contains("allow_vacuous")
    );
    // `allow_vacuous` in the file keeps its own check, and only that one.
    std::fs::write(
        base.join("c.yaml"),
        format!("instruction: make the tests pass\ncriteria:\n  - id: suite\n    checks:\n      - run: {vacuous:?}\n        allow_vacuous: true\n      - run: \"python3 -m unittest -v test_calc\"\n"),
    )
    .unwrap();
    let out = run(&base, &project, &script, &["--task", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (_, line) = receipt_and_provenance(&base, &out);
    assert!(
        line.ends_with(&format!("(allow_vacuous): suite #1: `{vacuous}`")),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_written_check_judged_by_a_file_the_task_would_write_is_refused_unless_the_contract_allows_it()
{
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("written-judge");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    // A lazy model would write `verify.py` as `pass` and be verified.
    let lazy = "turns:\n  - calls:\n      - {tool: write_file, args: {path: verify.py, content: \"pass\\n\"}}\n      - {tool: finish, args: {summary: done}}\n";
    for check in [
        "python3 verify.py",
        "python3 -m verify",
        "python3 -c 'import verify'",
        "bash verify.py",
    ] {
        let out = run(&base, &project, lazy, &["--check", check]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{check}: {said}");
        assert!(
            said.contains(&format!(
                "criterion `check-1`, check 1 (`{check}`) is decided by `verify.py`"
            )) && said.contains("judge_may_change"),
            "{check}: {said}"
        );
        assert!(
            !said.contains("\"kind\":\"task_started\""),
            "{check}: nothing ran: {said}"
        );
    }
    // A person who means it lists the file; the receipt says so. The
    // model's judge here is honest (it asserts on the project's code).
    std::fs::write(
        base.join("c.yaml"),
        "instruction: make the tests pass\njudge_may_change: [verify.py]\ncriteria:\n  - id: judged\n    checks:\n      - run: python3 verify.py\n",
    )
    .unwrap();
    let honest = format!(
        "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: verify.py, content: \"from calc import add\\nassert add(2, 3) == 5\\n\"}}}}\n{FIX}"
    );
    let file = base.join("c.yaml").display().to_string();
    let out = run(&base, &project, &honest, &["--task", &file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let (_, line) = receipt_and_provenance(&base, &out);
    assert_eq!(
        line,
        "contract   written (not drafted); the task was allowed to write its judge (judge_may_change): verify.py"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_judge_the_project_has_may_not_be_rewritten_but_the_work_it_runs_may() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("existing-judge");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let sh = |cmd: &str| {
        assert!(
            Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(&project)
                .status()
                .unwrap()
                .success(),
            "{cmd}"
        );
    };
    std::fs::write(
        project.join("verify.py"),
        "from calc import add\nassert add(2, 3) == 5\n",
    )
    .unwrap();
    std::fs::write(
        project.join("app.py"),
        "from calc import add\nimport sys\nsys.exit(0 if add(1, 1) == 2 else 1)\n",
    )
    .unwrap();
    sh("git add -A && git commit -qm judges");
    // The lazy model rewrites the judge: refused, and the task does not
    // verify.
    let lazy = "turns:\n  - calls:\n      - {tool: write_file, args: {path: verify.py, content: \"pass\\n\"}}\n      - {tool: finish, args: {summary: done}}\n";
    let out = run(&base, &project, lazy, &["--check", "python3 verify.py"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("check integrity: the judge of check 1"),
        "{said}"
    );
    // The honest fix of the code verifies with the same check.
    let out = run(
        &base,
        &project,
        &format!("turns:\n{FIX}"),
        &["--check", "python3 verify.py"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // A program named like the work (`app.py`) is the work: it may change.
    let app = "turns:\n  - calls:\n      - {tool: write_file, args: {path: app.py, content: \"from calc import add\\nimport sys\\nsys.exit(0 if add(1, 1) == 2 else 1)\\n# fixed\\n\"}}\n      - {tool: write_file, args: {path: calc.py, content: \"def add(a, b):\\n    return a + b\\n\"}}\n      - {tool: finish, args: {summary: fixed}}\n";
    let out = run(&base, &project, app, &["--check", "python3 app.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_draft_may_not_keep_a_vacuous_check_and_its_receipt_says_how_the_contract_came_to_be() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-provenance");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let turn = |check: &str| {
        format!(
            "  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the unittest suite passes\n              checks:\n                - {check}\n"
        )
    };
    // The drafting model says its check may pass with no project: only a
    // person may say that. Then the honest draft.
    let script = format!(
        "draft:\n{}{}turns:\n{FIX}",
        turn("{run: \"python3 -m unittest -v test_calc\", allow_vacuous: true}"),
        turn("{run: \"python3 -m unittest -v test_calc\"}"),
    );
    let out = run(&base, &project, &script, &["--accept-contract"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(
            "says `allow_vacuous`: only a person may keep a check that cannot fail, never a draft"
        ),
        "{said}"
    );
    let (_, line) = receipt_and_provenance(&base, &out);
    assert_eq!(
        line,
        format!(
            "contract   drafted by {}, accepted by the critic after 2 proposal(s), confirmed by --accept-contract",
            base.join("script.yaml").display()
        )
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A drafted check that passes on the untouched project once the file it
/// tests for is merely made (`python3 -c 'import calc' && [ -e done.txt
/// ]`: the import works already) is rejected, run so; an honest check of
/// the same shape, whose other part fails until the work is done
/// (`python3 -m unittest … && test -f calc.py`), is accepted, and the
/// task runs to verified.
#[test]
fn a_draft_whose_check_passes_once_a_file_merely_exists_is_rejected() {
    lazy_then_honest_draft(
        "draft-made-file",
        "python3 -c 'import calc' && [ -e done.txt ]",
        "python3 -m unittest -v test_calc && test -f calc.py && [ ! -e done.txt ]",
        "`done.txt`",
    );
}

/// The same with a reader for the test (`ls`, `cat … > /dev/null`: each
/// fails where its file is missing, so the file decides the check); an
/// honest check reading a file the project has is accepted.
#[test]
fn a_draft_whose_reader_passes_once_a_file_merely_exists_is_rejected() {
    lazy_then_honest_draft(
        "draft-read-file",
        "python3 -c 'import calc' && ls out/done.txt && cat out/log.txt > /dev/null",
        "python3 -m unittest -v test_calc && cat calc.py > /dev/null",
        "`out/done.txt`, `out/log.txt`",
    );
}

/// Not only readers: a drafted check passes on the untouched project once
/// files exist when any command finds them there (`grep -c .`, a name in
/// code given to Python): rejected by name; the honest check, whose
/// command reads a file the project has, is accepted.
#[test]
fn a_draft_whose_check_passes_once_any_command_finds_a_file_is_rejected() {
    lazy_then_honest_draft(
        "draft-any-command",
        "python3 -c 'import calc' && grep -c . out/done.txt && python3 -c \"import os; assert os.path.exists('out/log.txt')\"",
        "python3 -m unittest -v test_calc && grep -q def calc.py",
        "`out/done.txt`, `out/log.txt`",
    );
}

/// A draft whose first proposal is `lazy` (rejected: it passes on the
/// untouched project once `made` merely exist) and whose second is
/// `honest` (accepted: the task runs to verified).
fn lazy_then_honest_draft(dir: &str, lazy: &str, honest: &str, made: &str) {
    lazy_then_honest(
        dir,
        lazy,
        honest,
        &format!(
            "criterion `fixed` passes on the untouched project once {made} merely exist(s) (made there: empty, or with a line in it where a check reads or sizes it): its checks prove that a file was made, not that the work was done"
        ),
    );
}

/// A draft whose first proposal is `lazy` (rejected, the critic saying
/// `why`) and whose second is `honest` (accepted: the task runs to
/// verified).
fn lazy_then_honest(dir: &str, lazy: &str, honest: &str, why: &str) {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let turn = |check: &str| {
        format!(
            "  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: fixed\n              text: add is fixed\n              checks:\n                - run: {check:?}\n"
        )
    };
    let script = format!("draft:\n{}{}turns:\n{FIX}", turn(lazy), turn(honest));
    let out = run(&base, &project, &script, &["--accept-contract"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains(why), "{said}");
    let (_, line) = receipt_and_provenance(&base, &out);
    assert!(
        line.contains("accepted by the critic after 2 proposal(s)"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A drafted check that passes once anything in the project changed (git's
/// view of the worktree: a model adding a comment would pass it) is
/// rejected by name; an honest check that also reads git's view (the test
/// file left as it was) is accepted and verifies.
#[test]
fn a_draft_whose_check_passes_once_anything_changed_is_rejected() {
    lazy_then_honest(
        "draft-any-change",
        "test -n \"$(git status --porcelain)\" && ! git diff --quiet -- calc.py",
        "python3 -m unittest -v test_calc && git diff --quiet -- test_calc.py",
        "criterion `fixed` passes on the untouched project once the project's files merely change (a word added at the end of the files git tracks, and a new file made): its checks prove that something changed, not that the work was done",
    );
}

#[test]
fn a_draft_already_true_before_the_work_is_no_contract_for_a_change() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-guard");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    // calc.py exists already: a file check "proves" nothing new, and the
    // import works before any change.
    let turn = "  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: importable\n              text: calc imports\n              checks:\n                - run: python3 -c 'import calc'\n";
    let script = format!("draft:\n{turn}{turn}{turn}turns:\n{FIX}");
    let out = run(&base, &project, &script, &["--accept-contract"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("every criterion already holds on the untouched workspace"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn without_a_terminal_or_accept_contract_the_draft_waits_for_a_person() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-confirm");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let script = format!(
        "draft:\n  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the unittest suite passes\n              checks:\n                - run: python3 -m unittest -v test_calc\n                  nonempty_tests: true\nturns:\n{FIX}"
    );
    let out = run(&base, &project, &script, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("needs your confirmation"), "{said}");
    let draft = said
        .split("review ")
        .nth(1)
        .and_then(|s| s.split(" and run it").next())
        .unwrap();
    // The kept draft is a contract `--task` takes.
    let run2 = loop_cmd(&base)
        .args(["run", "--json", "--task", draft, "--model"])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(run2.status.code(), Some(0), "{}", text(&run2));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn from_a_subdirectory_the_project_is_the_repository() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-subdir");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let sub = project.join("docs/notes");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(base.join("script.yaml"), format!("turns:\n{FIX}")).unwrap();
    let out = loop_cmd(&base)
        .args([
            "run",
            "make add add",
            "--check",
            "python3 -m unittest test_calc",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&sub)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(project.join(".loop/loop.db").is_file());
    assert!(
        !sub.join(".loop").exists(),
        "no second .loop/ in the subdirectory"
    );
    let list = loop_cmd(&base)
        .args(["list", "--json", "--project"])
        .arg(&sub)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("\"verified\""),
        "{}",
        text(&list)
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn the_loopfile_verification_feeds_a_written_contract() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-verification");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    std::fs::write(
        project.join("Loopfile.yaml"),
        "verification:\n  build: python3 -m py_compile calc.py\n  lint: python3 -c 'import sys; sys.exit(1)'\n  checks:\n    - id: no-tabs\n      text: calc.py has no tab characters\n      checks:\n        - run: \"! grep -q \\\"$(printf '\\\\t')\\\" calc.py\"\n",
    )
    .unwrap();
    std::fs::write(base.join("script.yaml"), format!("turns:\n{FIX}")).unwrap();
    let out = loop_cmd(&base)
        .args([
            "run",
            "make add add",
            "--json",
            "--check",
            "python3 -m unittest test_calc",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let started: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["kind"] == "task_started")
        .unwrap();
    let ids: Vec<&str> = started["contract"]["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    // The written check, the project's build as a guard (it held), and the
    // Loopfile's criterion; the lint failed before the work: left out.
    assert_eq!(
        ids,
        vec!["check-1", "project-build", "no-tabs"],
        "{started}"
    );
    assert_eq!(started["contract"]["criteria"][1]["guard"], true);
    let checks = started["project_checks"].as_array().unwrap();
    assert_eq!(checks[0]["used"], "guard", "{started}");
    assert_eq!(checks[1]["kind"], "lint");
    assert_eq!(
        checks[1]["used"], "failing before the task: not required",
        "{started}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn loop_init_writes_the_loopfile_and_a_pattern_that_runs() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-init");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let init = |extra: &[&str]| {
        loop_cmd(&base)
            .args(["init", "--json", "--project"])
            .arg(&project)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = init(&["--pattern", "ci-sweeper"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The --json shape.
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec!["checks", "loopfile", "pattern_files", "shares"],
        "{v}"
    );
    assert_eq!(
        v["checks"][0]["command"], "python3 -m unittest discover -v",
        "{v}"
    );
    assert_eq!(v["checks"][0]["kind"], "test");
    assert_eq!(v["pattern_files"].as_array().unwrap().len(), 2, "{v}");
    let loopfile = std::fs::read_to_string(project.join("Loopfile.yaml")).unwrap();
    assert!(
        loopfile.contains("test: \"python3 -m unittest discover -v\""),
        "{loopfile}"
    );
    let skill = std::fs::read_to_string(project.join("loop-patterns/ci-sweeper/SKILL.md")).unwrap();
    for part in ["WHEN:", "READ:", "JUDGE:", "OUTPUT:", "STOP:"] {
        assert!(skill.contains(part), "{skill}");
    }
    // Once written, the Loopfile is kept unless --force.
    let again = init(&[]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(text(&again).contains("exists"), "{}", text(&again));
    let valid = loop_cmd(&base)
        .args(["validate"])
        .arg(project.join("Loopfile.yaml"))
        .output()
        .unwrap();
    assert_eq!(valid.status.code(), Some(0), "{}", text(&valid));
    // The readiness score: every point a check run now.
    let audit = loop_cmd(&base)
        .args(["audit", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(audit.status.code(), Some(0), "{}", text(&audit));
    let a: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let r = &a["readiness"];
    let names: Vec<&str> = r["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["point"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "loopfile",
            "tests",
            "protected paths",
            "budget",
            "isolation",
            "signing key"
        ],
        "{r}"
    );
    assert_eq!(r["max"], 6);
    let point = |n: &str| {
        r["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["point"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(point("loopfile")["ok"], true, "{r}");
    // The test command really ran: one test, failing (the bug is there).
    assert_eq!(point("tests")["ok"], true, "{r}");
    assert!(
        point("tests")["detail"]
            .as_str()
            .unwrap()
            .contains("ran 1 test(s) (unittest; exit 1)"),
        "{r}"
    );
    assert_eq!(point("budget")["ok"], true, "{r}");
    // init protects CI configuration (creation guards, counted though
    // absent here) and what else is there: the point holds (a glob
    // matching nothing is flagged: e2e's init_protects_…).
    assert_eq!(point("protected paths")["ok"], true, "{r}");
    // The cost: the shape, and the worst case capped by the budget.
    let cost = loop_cmd(&base)
        .args([
            "cost",
            "--json",
            "--model",
            "openai:gpt-4o",
            "--per-day",
            "2",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(cost.status.code(), Some(0), "{}", text(&cost));
    let c: serde_json::Value = serde_json::from_slice(&cost.stdout).unwrap();
    let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "budget_usd",
            "max_tokens",
            "model",
            "monthly_usd",
            "monthly_worst_usd",
            "price",
            "recorded",
            "runs_per_month",
            "worst_case_usd"
        ],
        "{c}"
    );
    // 200000 tokens at $10/M would be $2.00; the $2.00 budget caps it.
    assert_eq!(c["worst_case_usd"], 2.0, "{c}");
    assert_eq!(c["runs_per_month"], 60.0, "{c}");
    assert_eq!(c["monthly_worst_usd"], 120.0, "{c}");
    assert_eq!(c["recorded"]["runs"], 0, "{c}");
    // The pattern runs: its contract, its skill given to the model, the
    // Loopfile's test command kept as a guard where it holds (it fails
    // before the work: recorded, not required).
    std::fs::write(base.join("script.yaml"), format!("turns:\n{FIX}")).unwrap();
    let run = loop_cmd(&base)
        .args(["run", "--pattern", "ci-sweeper", "--json", "--model"])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let started: serde_json::Value = String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &serde_json::Value| v["kind"] == "task_started")
        .unwrap();
    assert_eq!(
        started["guidance"][0]["path"], "SKILL.md of the ci-sweeper pattern",
        "{started}"
    );
    assert!(
        started["contract"]["protected"]
            .to_string()
            .contains("**/test_*.py"),
        "{started}"
    );
    assert!(
        started["contract"]["instruction"]
            .as_str()
            .unwrap()
            .starts_with("Make the failing test suite pass"),
        "{started}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn doctor_names_the_projects_toolchains_store_key_and_model_endpoint() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-doctor");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!("models:\n  maker:\n    spec: openai:some-model\n    base_url: http://127.0.0.1:{port}/v1\n"),
    )
    .unwrap();
    let out = loop_cmd(&base)
        .args(["doctor", "--project"])
        .arg(project.join("docs").parent().unwrap())
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("toolchain     python: python3: Python 3"),
        "{said}"
    );
    assert!(said.contains("store         none yet"), "{said}");
    assert!(!project.join(".loop").exists(), "doctor makes no store");
    assert!(
        said.contains(&format!(
            "model         some-model at http://127.0.0.1:{port}/v1: reachable"
        )),
        "{said}"
    );
    drop(listener);
    let out = loop_cmd(&base)
        .args(["doctor", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(text(&out).contains("UNREACHABLE"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&base);
}

/// `loop run` on a terminal (a pty from util-linux's `script`), typing
/// `keys`, with `editor` as `$EDITOR`: (exit code, what it printed).
fn on_a_terminal(base: &Path, project: &Path, keys: &str, editor: &str) -> (Option<i32>, String) {
    let cmd = format!(
        "{} run 'make the tests pass' --model scripted:{} --project {}",
        env!("CARGO_BIN_EXE_loop"),
        base.join("script.yaml").display(),
        project.display()
    );
    shell_on_a_terminal(base, &cmd, keys, editor)
}

/// The shell command `cmd` on a terminal (a pty from `script`), typing
/// `keys`, with `editor` as `$EDITOR`: (exit code, what the pty showed).
fn shell_on_a_terminal(base: &Path, cmd: &str, keys: &str, editor: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let ed = base.join("editor.sh");
    std::fs::write(&ed, format!("#!/bin/sh\n{editor}\n")).unwrap();
    std::fs::set_permissions(&ed, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut child = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .env("LOOP_STATE_DIR", base.join("state"))
        .env("EDITOR", &ed)
        .env_remove("VISUAL")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(keys.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), text(&out))
}

#[test]
fn on_a_terminal_the_draft_is_accepted_edited_and_judged_again_or_rejected() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: util-linux `script` (a pty for the terminal flow) is not installed");
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-terminal");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    std::fs::write(
        base.join("script.yaml"),
        format!(
            "draft:\n  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the unittest suite passes\n              checks:\n                - run: python3 -m unittest -v test_calc\n                  nonempty_tests: true\nturns:\n{FIX}"
        ),
    )
    .unwrap();
    // An answer that is none is said to be none; then edit, then accept:
    // the edited contract is judged again and locked.
    let (code, said) = on_a_terminal(
        &base,
        &project,
        "yes\ne\na\n",
        "sed -i 's/the unittest suite passes/the unittest suite passes, edited/' \"$1\"",
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("The drafted contract (the critic accepted it)"),
        "{said}"
    );
    assert!(
        said.contains("`yes` is not an answer here: type a to lock it and start"),
        "{said}"
    );
    let ledger = std::fs::read_dir(project.join(".loop/receipts"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".ledger.jsonl"))
        .unwrap()
        .path();
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&ledger)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let p = &first["payload"];
    assert_eq!(
        p["drafting"]["confirmed_by"], "terminal, after editing",
        "{p}"
    );
    assert_eq!(
        p["contract"]["criteria"][0]["text"],
        "the unittest suite passes, edited"
    );
    // An edit that proves nothing is rejected by the critic; then the
    // person rejects the draft, and the task does not start.
    let (code, said) = on_a_terminal(
        &base,
        &project,
        "e\nr\n",
        "sed -i 's/python3 -m unittest -v test_calc/true/' \"$1\"",
    );
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("your edit is rejected by the critic"),
        "{said}"
    );
    assert!(said.contains("cannot fail or proves nothing"), "{said}");
    assert!(said.contains("you rejected the drafted contract"), "{said}");
    // The draft is shown as compact YAML, limits on one line.
    let plain = said.replace('\r', "");
    assert!(
        plain.contains("criteria:\n  - id: \"tests\"") && plain.contains("limits: {"),
        "{said}"
    );
    // An edit the critic rejects is what the next edit starts from: the
    // editor finds `true` there, mends it, and the mended draft verifies.
    let count = base.join("edits");
    let (code, said) = on_a_terminal(
        &base,
        &project,
        "e\ne\na\n",
        &format!(
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}\n\
             if [ $n = 1 ]; then sed -i 's/python3 -m unittest -v test_calc/true/' \"$1\"; \
             else grep -q 'run: \"true\"' \"$1\" || exit 1; \
             sed -i 's/run: \"true\"/run: \"python3 -m unittest -v test_calc\"/; s/the unittest suite passes/kept, then mended/' \"$1\"; fi",
            c = count.display()
        ),
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("is what [e]dit opens"), "{said}");
    assert_eq!(std::fs::read_to_string(&count).unwrap().trim(), "2");
    let _ = std::fs::remove_dir_all(&base);
}

/// `loop submit` drafting on a terminal asks there, and its stdout (sent
/// to a file here) carries the task's id alone, as it does without a
/// terminal: the drafted contract, the question and the editor go to
/// stderr's terminal.
#[test]
fn loop_submit_asks_on_the_terminal_and_prints_only_the_id() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: util-linux `script` (a pty for the terminal flow) is not installed");
        return;
    }
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("LOOP_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "LOOP_REQUIRE_SERVICES=1 but redis-server is missing"
        );
        eprintln!(
            "SKIPPED: redis-server (the queue `loop submit` puts the task on) is not installed"
        );
        return;
    }
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("draft-submit-terminal");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let project = python_project(&base);
    std::fs::write(
        base.join("script.yaml"),
        "draft:\n  - calls:\n      - tool: propose_contract\n        args:\n          criteria:\n            - id: tests\n              text: the unittest suite passes\n              checks:\n                - run: python3 -m unittest -v test_calc\n                  nonempty_tests: true\nturns:\n  - calls:\n      - tool: finish\n        args: { summary: for a worker }\n",
    )
    .unwrap();
    // A queue of the test's own, on a free port, kept nowhere.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut redis = Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
        ])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(&base)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = base.join("stdout.txt");
    let cmd = format!(
        "{} submit 'make the tests pass' --queue redis://127.0.0.1:{port} --model scripted:{} --project {} > {}",
        env!("CARGO_BIN_EXE_loop"),
        base.join("script.yaml").display(),
        project.display(),
        out.display()
    );
    // An edit first, by an editor that writes to its stdout, then accept.
    let (code, said) = shell_on_a_terminal(&base, &cmd, "e\na\n", "echo EDITOR-WROTE-THIS");
    let _ = redis.kill();
    let _ = redis.wait();
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("The drafted contract (the critic accepted it)")
            && said.contains("Lock it and start?"),
        "{said}"
    );
    let printed = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 1, "{printed:?}");
    assert!(lines[0].starts_with("t-"), "{printed:?}");
    let _ = std::fs::remove_dir_all(&base);
}
