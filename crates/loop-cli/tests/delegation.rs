//! Delegation through the `loop` binary: a scripted parent hands two
//! packages to two children, each proven by its own receipt, merged back
//! through the parent's rules, and the whole tree verified offline.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loop-deleg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// A project with two packages, committed.
fn project(base: &Path) -> PathBuf {
    let p = base.join("project");
    for f in ["pkg/a/README", "pkg/b/README", "README"] {
        std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
        std::fs::write(p.join(f), "start\n").unwrap();
    }
    shared::commit_all(&p);
    p
}

const PARENT: &str = r#"
instruction: Finish both packages.
criteria:
  - id: a
    text: package a is done
    checks:
      - file_contains: pkg/a/done.txt
        text: "a is done"
  - id: b
    text: package b is done
    checks:
      - file_contains: pkg/b/done.txt
        text: "b is done"
limits: { max_steps: 20, max_children: 2, max_depth: 1 }
"#;

fn delegate(pkg: &str) -> String {
    format!(
        r#"      - tool: delegate
        args:
          instruction: "Write pkg/{pkg}/done.txt"
          criteria:
            - id: {pkg}
              text: "{pkg} is done"
              checks:
                - file_contains: pkg/{pkg}/done.txt
                  text: "{pkg} is done"
          paths: [pkg/{pkg}]
          budget: {{ max_steps: 4, max_tokens: 60000, timeout_secs: 300 }}
"#
    )
}

/// The parent delegates both packages in one turn, then claims the work;
/// child `a` first tries to write into package b, which is not its.
fn script() -> String {
    format!(
        r#"turns:
  - calls:
{}{}  - calls:
      - tool: finish
        args: {{ summary: both packages are done }}
children:
  - - calls:
        - tool: write_file
          args: {{ path: pkg/b/done.txt, content: "b is done, says a\n" }}
        - tool: write_file
          args: {{ path: pkg/a/done.txt, content: "a is done\n" }}
    - calls:
        - tool: finish
          args: {{ summary: a }}
  - - calls:
        - tool: write_file
          args: {{ path: pkg/b/done.txt, content: "b is done\n" }}
    - calls:
        - tool: finish
          args: {{ summary: b }}
"#,
        delegate("a"),
        delegate("b")
    )
}

/// `loop list --json` of `project`: every task, one object each.
fn tasks_of(base: &Path, project: &Path) -> Vec<serde_json::Value> {
    let out = shared::loop_in(base)
        .args(["list", "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The entries of kind `kind` of the ledger beside `receipt`.
fn entries(receipt: &Path, id: &str, kind: &str) -> Vec<serde_json::Value> {
    let ledger = receipt.with_file_name(format!("{id}.ledger.jsonl"));
    std::fs::read_to_string(ledger)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == kind)
        .collect()
}

fn verify(base: &Path, receipt: &Path) -> std::process::Output {
    shared::loop_in(base)
        .arg("verify")
        .arg(receipt)
        .output()
        .unwrap()
}

/// `loop run` of `contract` and `script` in `project`, started and not
/// waited for (its output dropped).
fn spawn_run(base: &Path, project: &Path, contract: &str, script: &str) -> std::process::Child {
    std::fs::write(base.join("task.yaml"), contract).unwrap();
    std::fs::write(base.join("script.yaml"), script).unwrap();
    shared::loop_in(base)
        .args(["run", "--json", "--task"])
        .arg(base.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(project)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The ids of the `n` tasks whose ledgers (in `receipts`) say a command
/// began, once there are that many (within a minute, `run` still going).
fn commands_begun(receipts: &Path, n: usize, run: &mut std::process::Child) -> Vec<String> {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let begun: Vec<String> = std::fs::read_dir(receipts)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                text.contains("\"kind\":\"intent\"") && text.contains("\"tool\":\"run_command\"")
            })
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".ledger.jsonl").map(str::to_string)
            })
            .collect();
        if begun.len() >= n {
            return begun;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} commands began",
            begun.len()
        );
        assert!(run.try_wait().unwrap().is_none(), "the run ended first");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_parent_splits_its_work_between_two_children_and_the_receipt_tree_verifies() {
    let base = tmpdir("two");
    let project = project(&base);
    let run = shared::run_scripted(&base, &project, "parent", (PARENT, &script()));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let parent_id = run.statement["predicate"]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let children: Vec<(String, serde_json::Value)> = entries(&receipt, &parent_id, "delegated")
        .into_iter()
        .map(|e| {
            let c = e["payload"]["child"].clone();
            (c["task_id"].as_str().unwrap().to_string(), c)
        })
        .collect();
    assert_eq!(children.len(), 2, "{}", shared::text(&run.out));
    for ((id, c), pkg) in children.iter().zip(["a", "b"]) {
        assert_eq!(c["outcome"], "verified", "child {id}");
        assert_eq!(
            c["authority"]["writable"],
            serde_json::json!([format!("pkg/{pkg}")])
        );
        assert!(c["used"]["steps"].as_u64().unwrap() >= 2, "{c}");
        // Its own receipt names its parent and its grant.
        let own = shared::payload_of(&receipt.with_file_name(format!("{id}.receipt.json")));
        assert_eq!(own["predicate"]["delegation"]["parent"], parent_id.as_str());
        assert_eq!(own["predicate"]["delegation"]["authority"], c["authority"]);
    }
    // Child a's write into package b was refused at the write, by name.
    let (a, _) = &children[0];
    let refused: Vec<_> = entries(&receipt, a, "observed")
        .into_iter()
        .filter(|e| e["payload"]["observation"]["status"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        refused[0]["payload"]["observation"]["rule"],
        "protected: delegation: outside the child's paths"
    );
    // Both children's work is in the parent's workspace, and only theirs.
    let ws = shared::workspace_of(&project, &parent_id);
    assert_eq!(
        std::fs::read_to_string(ws.join("pkg/a/done.txt")).unwrap(),
        "a is done\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("pkg/b/done.txt")).unwrap(),
        "b is done\n"
    );
    // Each child's spending is the parent's: its steps include theirs.
    let used = &run.statement["predicate"]["budgets"]["used"];
    let theirs: u64 = children
        .iter()
        .map(|(_, c)| c["used"]["steps"].as_u64().unwrap())
        .sum();
    assert_eq!(used["steps"].as_u64().unwrap(), 2 + theirs, "{used}");

    // The parent's status shows its children, each child its parent.
    let status = |id: &str, json: bool| {
        let mut c = shared::loop_in(&base);
        c.args(["status", id, "--project"]).arg(&project);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let s: serde_json::Value = serde_json::from_slice(&status(&parent_id, true).stdout).unwrap();
    let listed = s["children"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{s}");
    for (c, (id, rec)) in listed.iter().zip(&children) {
        assert_eq!(c["id"], id.as_str());
        assert_eq!(c["outcome"], "verified");
        assert_eq!(c["used"]["steps"], rec["used"]["steps"]);
    }
    let c: serde_json::Value =
        serde_json::from_slice(&status(&children[0].0, true).stdout).unwrap();
    assert_eq!(c["parent"], parent_id.as_str());
    let human = shared::text(&status(&parent_id, false));
    assert!(
        human.contains(&format!(
            "  child        {} verified · writes pkg/a",
            children[0].0
        )),
        "{human}"
    );

    let v = verify(&base, &receipt);
    let said = shared::text(&v);
    assert_eq!(v.status.code(), Some(0), "{said}");
    assert!(
        said.contains("children   ok (2 child receipts hold"),
        "{said}"
    );
    let show = shared::loop_in(&base)
        .args(["show", &parent_id, "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let shown = shared::text(&show);
    assert!(
        shown.contains("  children: 2 child receipt(s) hold, each within its parent's authority"),
        "{shown}"
    );

    // A child's receipt says whose its contract is: its parent's model's,
    // confirmed by no person (not "written" as a person's is).
    let (a, _) = &children[0];
    let v = verify(&base, &receipt.with_file_name(format!("{a}.receipt.json")));
    let said = shared::text(&v);
    assert!(
        said.contains(&format!(
            "contract   delegated by task {parent_id}: written by its model within the authority it granted, confirmed by no person"
        )),
        "{said}"
    );
    // One byte of a child's receipt changed: the parent's receipt no
    // longer holds, and says which child.
    let (b, _) = &children[1];
    let child_receipt = receipt.with_file_name(format!("{b}.receipt.json"));
    let mut bytes = std::fs::read(&child_receipt).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x20;
    std::fs::write(&child_receipt, &bytes).unwrap();
    let v = verify(&base, &receipt);
    let said = shared::text(&v);
    assert_eq!(v.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("children   BROKEN: child {b}:")),
        "{said}"
    );
    // `loop show` lists the children and says the tree no longer holds.
    let show = shared::loop_in(&base)
        .args(["show", &parent_id, "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let shown = shared::text(&show);
    assert!(
        shown.contains(&format!("child {b} verified · writes pkg/b")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("  children: BROKEN: child {b}:")),
        "{shown}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_contract_without_delegation_is_never_offered_the_tool_and_its_call_is_refused() {
    let base = tmpdir("off");
    let project = project(&base);
    let contract = PARENT.replace(", max_children: 2, max_depth: 1", "");
    let script = "turns:\n  - calls:\n".to_string()
        + &delegate("a")
        + "      - tool: write_file\n        args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n      - tool: write_file\n        args: { path: pkg/b/done.txt, content: \"b is done\\n\" }\n  - calls:\n      - tool: finish\n        args: { summary: done alone }\n";
    let run = shared::run_scripted(&base, &project, "alone", (&contract, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let id = run.statement["predicate"]["task_id"].as_str().unwrap();
    assert!(entries(&receipt, id, "delegated").is_empty());
    let observed = entries(&receipt, id, "observed");
    assert_eq!(
        observed[0]["payload"]["observation"]["rule"],
        "delegation: off"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_child_that_ends_lost_changes_nothing_and_the_parent_goes_on() {
    let base = tmpdir("lost");
    let project = project(&base);
    // The child writes the wrong thing, claims it done, is refused, then
    // has nothing more to say: it ends lost. The parent hears how it ended
    // and why, and does the work itself.
    let script = "turns:\n  - calls:\n".to_string()
        + &delegate("a")
        + "  - calls:\n      - tool: write_file\n        args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n      - tool: write_file\n        args: { path: pkg/b/done.txt, content: \"b is done\\n\" }\n  - calls:\n      - tool: finish\n        args: { summary: done myself }\nchildren:\n  - - calls:\n        - tool: write_file\n          args: { path: pkg/a/done.txt, content: \"a is not done\\n\" }\n        - tool: finish\n          args: { summary: a }\n";
    let run = shared::run_scripted(&base, &project, "lost", (PARENT, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let id = run.statement["predicate"]["task_id"].as_str().unwrap();
    let delegated = entries(&receipt, id, "delegated");
    assert_eq!(delegated.len(), 1);
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "lost");
    let said = &entries(&receipt, id, "observed")[0]["payload"]["observation"];
    let content = said["content"].as_str().unwrap();
    assert!(content.contains("ended lost"), "{said}");
    assert!(content.contains("Nothing of its work was merged"), "{said}");
    assert!(content.contains("Its last verification failed:"), "{said}");
    assert!(
        content.contains("- a: file_contains pkg/a/done.txt"),
        "{said}"
    );
    assert_eq!(said["changed"], false);
    // The tree holds: an unverified child is still proven by its receipt.
    let v = verify(&base, &receipt);
    let text = shared::text(&v);
    assert_eq!(v.status.code(), Some(0), "{text}");
    assert!(text.contains("1 child receipts hold"), "{text}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_parent_killed_while_its_two_children_run_resumes_them_and_ends_as_if_never_killed() {
    // A refused proposal comes first in the turn: each child is found
    // again by the call that started it, never by its place.
    let base = tmpdir("kill");
    let project = project(&base);
    let child = |pkg: &str| {
        format!(
            "  - - calls:\n        - tool: run_command\n          args: {{ command: \"sleep 2\" }}\n    - calls:\n        - tool: write_file\n          args: {{ path: pkg/{pkg}/done.txt, content: \"{pkg} is done\\n\" }}\n    - calls:\n        - tool: finish\n          args: {{ summary: {pkg} }}\n"
        )
    };
    let script = "turns:\n  - calls:\n".to_string()
        + "      - tool: delegate\n        args: { instruction: refused, criteria: [], paths: [\"/etc\"], budget: { max_steps: 1, max_tokens: 1, timeout_secs: 1 } }\n"
        + &delegate("a")
        + &delegate("b")
        + "  - calls:\n      - tool: finish\n        args: { summary: both are done }\nchildren:\n"
        + &child("a")
        + &child("b");
    let mut run = spawn_run(&base, &project, PARENT, &script);
    // Killed once both children's commands run (their ledgers say so).
    let receipts = project.join(".loop/receipts");
    commands_begun(&receipts, 2, &mut run);
    run.kill().unwrap();
    run.wait().unwrap();
    let listed = |p: &Path| tasks_of(&base, p);
    let tasks = listed(&project);
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    let parent = tasks
        .iter()
        .find(|t| t["instruction"] == "Finish both packages.")
        .unwrap_or_else(|| panic!("{tasks:?}"))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let resumed = shared::loop_in(&base)
        .args(["resume", &parent, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", shared::text(&resumed));
    // Still two children: resumed to their ends, not started again.
    let tasks = listed(&project);
    assert_eq!(tasks.len(), 3, "{tasks:?}");
    let receipt = receipts.join(format!("{parent}.receipt.json"));
    let delegated = entries(&receipt, &parent, "delegated");
    assert_eq!(delegated.len(), 2, "each recorded once");
    for d in &delegated {
        assert_eq!(d["payload"]["child"]["outcome"], "verified");
        // The child itself was resumed once.
        let child = d["payload"]["child"]["task_id"].as_str().unwrap();
        assert_eq!(entries(&receipt, child, "resumed").len(), 1, "{child}");
    }
    assert_eq!(entries(&receipt, &parent, "resumed").len(), 1);
    let ws = shared::workspace_of(&project, &parent);
    for pkg in ["a", "b"] {
        assert_eq!(
            std::fs::read_to_string(ws.join(format!("pkg/{pkg}/done.txt"))).unwrap(),
            format!("{pkg} is done\n")
        );
    }
    let v = verify(&base, &receipt);
    let said = shared::text(&v);
    assert_eq!(v.status.code(), Some(0), "{said}");
    assert!(said.contains("2 child receipts hold"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn cancelling_a_parent_cancels_the_child_it_is_waiting_for() {
    use std::time::{Duration, Instant};
    let base = tmpdir("cancel");
    let project = project(&base);
    let script = "turns:\n  - calls:\n".to_string()
        + &delegate("a")
        + "  - calls:\n      - tool: finish\n        args: { summary: a is done }\nchildren:\n  - - calls:\n        - tool: run_command\n          args: { command: \"sleep 120\", timeout_secs: 300 }\n";
    let mut run = spawn_run(&base, &project, PARENT, &script);
    let receipts = project.join(".loop/receipts");
    let child = commands_begun(&receipts, 1, &mut run).remove(0);
    let out = shared::loop_in(&base)
        .args(["list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let parent = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|t| t["id"] != child.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let t = Instant::now();
    let cancelled = shared::loop_in(&base)
        .args(["cancel", &parent, "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(
        cancelled.status.code(),
        Some(0),
        "{}",
        shared::text(&cancelled)
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(run.wait().unwrap().code(), Some(1));
    let outcome = |id: &str| {
        shared::payload_of(&receipts.join(format!("{id}.receipt.json")))["predicate"]["outcome"]
            ["kind"]
            .clone()
    };
    assert_eq!(outcome(&child), "cancelled");
    assert_eq!(outcome(&parent), "cancelled");
    let delegated = entries(
        &receipts.join(format!("{parent}.receipt.json")),
        &parent,
        "delegated",
    );
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "cancelled");
    shared::assert_receipt_holds(
        &receipts.join(format!("{parent}.receipt.json")),
        &base.join("state"),
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// When ledger entry `kind` was first written, in the ledger beside `receipt` of task `id`.
fn at(receipt: &Path, id: &str, kind: &str, last: bool) -> String {
    let e = entries(receipt, id, kind);
    let e = if last { e.last() } else { e.first() };
    e.unwrap()["at"].as_str().unwrap().to_string()
}

#[test]
fn children_of_one_turn_run_together_and_the_second_change_to_the_same_path_is_refused() {
    let base = tmpdir("together");
    let project = project(&base);
    let contract = r#"
instruction: Have both children write shared.txt.
criteria:
  - id: shared
    text: shared.txt is the first child's
    checks:
      - file_contains: shared.txt
        text: "from a"
limits: { max_steps: 20, max_children: 2, max_depth: 1 }
"#;
    let child = |name: &str| {
        format!(
            r#"      - tool: delegate
        args:
          instruction: "Write shared.txt"
          criteria:
            - id: {name}
              text: "shared.txt is {name}'s"
              checks:
                - file_contains: shared.txt
                  text: "from {name}"
          paths: [pkg/{name}, shared.txt]
          budget: {{ max_steps: 4, max_tokens: 60000, timeout_secs: 300 }}
"#
        )
    };
    let turns = |name: &str| {
        format!(
            "  - - calls:\n        - tool: run_command\n          args: {{ command: \"sleep 1\" }}\n        - tool: write_file\n          args: {{ path: shared.txt, content: \"from {name}\\n\" }}\n    - calls:\n        - tool: finish\n          args: {{ summary: {name} }}\n"
        )
    };
    let script = format!(
        "turns:\n  - calls:\n{}{}  - calls:\n      - tool: finish\n        args: {{ summary: done }}\nchildren:\n{}{}",
        child("a"),
        child("b"),
        turns("a"),
        turns("b")
    );
    let run = shared::run_scripted(&base, &project, "together", (contract, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let parent = run.statement["predicate"]["task_id"].as_str().unwrap();
    let children: Vec<String> = entries(&receipt, parent, "delegated")
        .iter()
        .map(|e| {
            e["payload"]["child"]["task_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(children.len(), 2);
    // Their lifetimes overlap: each began before the other ended.
    let (a, b) = (&children[0], &children[1]);
    assert!(at(&receipt, a, "task_started", false) < at(&receipt, b, "finished", true));
    assert!(at(&receipt, b, "task_started", false) < at(&receipt, a, "finished", true));
    // Both verified; the first's change merged, the second's refused by name.
    let observed = entries(&receipt, parent, "observed");
    let said: Vec<&serde_json::Value> = observed
        .iter()
        .map(|e| &e["payload"]["observation"])
        .collect();
    assert_eq!(said[0]["status"], "ok", "{:?}", said[0]);
    assert_eq!(said[1]["status"], "refused", "{:?}", said[1]);
    assert_eq!(said[1]["rule"], "delegation: merge conflict");
    assert!(
        said[1]["content"].as_str().unwrap().contains("shared.txt"),
        "{:?}",
        said[1]
    );
    let ws = shared::workspace_of(&project, parent);
    assert_eq!(
        std::fs::read_to_string(ws.join("shared.txt")).unwrap(),
        "from a\n"
    );
    let v = verify(&base, &receipt);
    assert_eq!(v.status.code(), Some(0), "{}", shared::text(&v));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_child_keeps_its_parents_check_integrity_set() {
    let base = tmpdir("integrity");
    let project = project(&base);
    // The parent's check runs pytest: its configuration decides what the
    // check means, so no child may write it, even one that may write
    // everything the parent may.
    let contract = r#"
instruction: Make the tests pass.
criteria:
  - id: tests
    text: the tests pass
    checks:
      - run: python3 -m pytest -q
limits: { max_steps: 6, max_children: 1, max_depth: 1 }
"#;
    let script = r#"turns:
  - calls:
      - tool: delegate
        args:
          instruction: "Write pkg/a/done.txt"
          criteria:
            - id: a
              text: "a is done"
              checks:
                - file_contains: pkg/a/done.txt
                  text: "a is done"
          paths: ["."]
          budget: { max_steps: 4, max_tokens: 60000, timeout_secs: 300 }
children:
  - - calls:
        - tool: write_file
          args: { path: conftest.py, content: "collect_ignore_glob = ['*']\n" }
        - tool: write_file
          args: { path: pkg/a/done.txt, content: "a is done\n" }
    - calls:
        - tool: finish
          args: { summary: a }
"#;
    let run = shared::run_scripted(&base, &project, "integrity", (contract, script));
    let receipt = run.receipt_path();
    let parent = run.statement["predicate"]["task_id"].as_str().unwrap();
    let delegated = entries(&receipt, parent, "delegated");
    assert_eq!(delegated.len(), 1, "{}", shared::text(&run.out));
    let child = delegated[0]["payload"]["child"]["task_id"]
        .as_str()
        .unwrap();
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "verified");
    let said: Vec<serde_json::Value> = entries(&receipt, child, "observed")
        .into_iter()
        .map(|e| e["payload"]["observation"].clone())
        .collect();
    assert_eq!(said[0]["status"], "refused", "{:?}", said[0]);
    assert!(
        said[0]["rule"]
            .as_str()
            .unwrap()
            .contains("check integrity"),
        "{:?}",
        said[0]
    );
    // The honest write beside it went through, and was merged.
    assert_eq!(said[1]["status"], "ok", "{:?}", said[1]);
    let ws = shared::workspace_of(&project, parent);
    assert!(!ws.join("conftest.py").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("pkg/a/done.txt")).unwrap(),
        "a is done\n"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn an_exec_rule_a_child_adds_is_never_looser_than_the_default_it_shadows() {
    let base = tmpdir("exec");
    let p = base.join("project");
    for f in ["pkg/a/README", "README"] {
        std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
        std::fs::write(p.join(f), "start\n").unwrap();
    }
    // Every command is forbidden unless a rule says otherwise.
    std::fs::write(p.join("Loopfile.yaml"), "exec:\n  default: forbidden\n").unwrap();
    shared::commit_all(&p);
    let contract = PARENT.replace(
        "  - id: b\n    text: package b is done\n    checks:\n      - file_contains: pkg/b/done.txt\n        text: \"b is done\"\n",
        "",
    );
    // The child adds `echo` as needing approval: under a forbidden
    // default that must stay forbidden, not become askable.
    let script = r#"turns:
  - calls:
      - tool: delegate
        args:
          instruction: "Write pkg/a/done.txt"
          criteria:
            - id: a
              text: "a is done"
              checks:
                - file_contains: pkg/a/done.txt
                  text: "a is done"
          paths: [pkg/a]
          exec: [{ prefix: echo, decision: prompt }]
          budget: { max_steps: 4, max_tokens: 60000, timeout_secs: 300 }
children:
  - - calls:
        - tool: run_command
          args: { command: "echo hi" }
        - tool: write_file
          args: { path: pkg/a/done.txt, content: "a is done\n" }
    - calls:
        - tool: finish
          args: { summary: a }
"#;
    let run = shared::run_scripted(&base, &p, "exec", (&contract, script));
    let receipt = run.receipt_path();
    let parent = run.statement["predicate"]["task_id"].as_str().unwrap();
    let delegated = entries(&receipt, parent, "delegated");
    assert_eq!(delegated.len(), 1, "{}", shared::text(&run.out));
    let child = delegated[0]["payload"]["child"]["task_id"]
        .as_str()
        .unwrap();
    let said: Vec<serde_json::Value> = entries(&receipt, child, "observed")
        .into_iter()
        .map(|e| e["payload"]["observation"].clone())
        .collect();
    assert_eq!(said[0]["status"], "refused", "{:?}", said[0]);
    assert!(
        said[0]["rule"]
            .as_str()
            .unwrap()
            .starts_with("exec policy: forbidden"),
        "{:?}",
        said[0]
    );
    // No approval was asked of anyone.
    assert!(entries(&receipt, child, "approval_requested").is_empty());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_child_whose_check_proves_nothing_is_not_started() {
    let base = tmpdir("critic");
    let project = project(&base);
    let script = delegate("a").replace(
        "- file_contains: pkg/a/done.txt\n                  text: \"a is done\"",
        "- run: \"test -f pkg/a/done.txt || true\"",
    );
    assert!(script.contains("|| true"), "{script}");
    let script = "turns:\n  - calls:\n".to_string()
        + &script
        + "  - calls:\n      - tool: finish\n        args: { summary: nothing }\n";
    let run = shared::run_scripted(&base, &project, "critic", (PARENT, &script));
    let receipt = run.receipt_path();
    let id = run.statement["predicate"]["task_id"].as_str().unwrap();
    assert!(entries(&receipt, id, "delegated").is_empty());
    let said = &entries(&receipt, id, "observed")[0]["payload"]["observation"];
    assert_eq!(said["status"], "refused", "{said}");
    assert_eq!(said["rule"], "delegation: the child's contract");
    assert!(
        said["content"].as_str().unwrap().contains("|| true"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A child that writes most of its grant has its verified change merged:
/// what it wrote is charged to its parent, and its change is not judged
/// again against what the parent has left after that charge.
#[test]
fn a_child_that_writes_most_of_its_grant_is_merged() {
    let base = tmpdir("write-most");
    let project = project(&base);
    let contract = PARENT.replace(
        "limits: { max_steps: 20,",
        "limits: { write_mb: 8, max_steps: 20,",
    );
    let script = "turns:\n  - calls:\n".to_string()
        + &delegate("a")
        + "  - calls:\n      - tool: write_file\n        args: { path: pkg/b/done.txt, content: \"b is done\\n\" }\n  - calls:\n      - tool: finish\n        args: { summary: done }\nchildren:\n  - - calls:\n        - tool: run_command\n          args: { command: \"head -c 5000000 /dev/zero | tr '\\\\0' a > pkg/a/blob.txt\" }\n        - tool: write_file\n          args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n    - calls:\n        - tool: finish\n          args: { summary: a }\n";
    let run = shared::run_scripted(&base, &project, "write-most", (&contract, &script));
    assert_eq!(run.outcome(), "verified", "{}", shared::text(&run.out));
    let delegated = entries(&run.receipt_path(), run.id(), "delegated");
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "verified");
    let observed = entries(&run.receipt_path(), run.id(), "observed");
    let said = observed[0]["payload"]["observation"]["content"]
        .as_str()
        .unwrap();
    assert!(said.contains("Merged into this workspace"), "{said}");
    let ws = shared::workspace_of(&project, run.id());
    assert_eq!(
        std::fs::metadata(ws.join("pkg/a/blob.txt")).unwrap().len(),
        5_000_000
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A child's check that passes on the untouched project once the file it
/// tests for merely exists (`expr` passes already; only `done.txt`
/// decides) is refused when the child is prepared, by execution, and the
/// parent hears why; the parent goes on and does the work itself.
#[test]
fn a_child_whose_check_passes_once_a_file_merely_exists_is_refused() {
    let base = tmpdir("made-file");
    let project = project(&base);
    let script = delegate("a").replace(
        "- file_contains: pkg/a/done.txt\n                  text: \"a is done\"",
        "- run: \"expr 1 + 1 && [ -e pkg/a/done.txt ]\"\n                  stdout_matches: \"^2\"",
    )
    // (An instruction that asks for the file would make the file the work.)
    .replace("Write pkg/a/done.txt", "Finish package a");
    assert!(script.contains("expr 1 + 1"), "{script}");
    let script = "turns:\n  - calls:\n".to_string()
        + &script
        + "  - calls:\n      - tool: write_file\n        args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n      - tool: write_file\n        args: { path: pkg/b/done.txt, content: \"b is done\\n\" }\n  - calls:\n      - tool: finish\n        args: { summary: done myself }\n";
    let run = shared::run_scripted(&base, &project, "made-file", (PARENT, &script));
    assert_eq!(run.outcome(), "verified", "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let id = run.id();
    assert!(entries(&receipt, id, "delegated").is_empty());
    let said = &entries(&receipt, id, "observed")[0]["payload"]["observation"];
    let content = said["content"].as_str().unwrap();
    assert!(
        content.contains("the child's contract is refused")
            && content.contains("once `pkg/a/done.txt` merely exist(s)"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A parent of one child, `a`, that finishes once the child has.
const PARENT_OF_A: &str = r#"
instruction: Finish package a.
criteria:
  - id: a
    text: package a is done
    checks:
      - file_contains: pkg/a/done.txt
        text: "a is done"
limits: { max_steps: 20, max_children: 1, max_depth: 1 }
"#;

#[cfg(feature = "fault-injection")]
#[test]
fn a_child_whose_run_fails_stops_its_parent_unended_and_resuming_goes_on_with_it() {
    let base = tmpdir("outage");
    let project = project(&base);
    let script = "turns:\n  - calls:\n".to_string()
        + &delegate("a")
        + "  - calls:\n      - tool: finish\n        args: { summary: a is done }\nchildren:\n  - - calls:\n        - tool: write_file\n          args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n    - calls:\n        - tool: finish\n          args: { summary: a }\n";
    std::fs::write(base.join("task.yaml"), PARENT_OF_A).unwrap();
    std::fs::write(base.join("script.yaml"), &script).unwrap();
    // The child's run fails once it holds its task (as when the store or
    // the disk fails under it): the parent stops too, unended, and tells
    // the model nothing (an outage is not an answer).
    let out = shared::loop_in(&base)
        .args(["run", "--task"])
        .arg(base.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .env("LOOP_FAULT_CHILD_RUNS_FAIL", "1")
        .output()
        .unwrap();
    let said = shared::text(&out);
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("interrupted, not ended"), "{said}");
    assert!(said.contains("stopped before its end"), "{said}");
    let listed = || tasks_of(&base, &project);
    let tasks = listed();
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    assert!(tasks.iter().all(|t| t["outcome"].is_null()), "{tasks:?}");
    let parent = tasks
        .iter()
        .find(|t| t["instruction"] == "Finish package a.")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let receipts = project.join(".loop/receipts");
    let ledger = std::fs::read_to_string(receipts.join(format!("{parent}.ledger.jsonl")))
        .unwrap_or_default();
    assert!(!ledger.contains("\"delegated\""), "{ledger}");
    assert!(!ledger.contains("\"observed\""), "{ledger}");
    // Resumed, the call finds its child, which goes on to its end: one
    // child, recorded once, merged, and the tree holds.
    let resumed = shared::loop_in(&base)
        .args(["resume", &parent, "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", shared::text(&resumed));
    assert_eq!(listed().len(), 2);
    let receipt = receipts.join(format!("{parent}.receipt.json"));
    let delegated = entries(&receipt, &parent, "delegated");
    assert_eq!(delegated.len(), 1);
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "verified");
    let v = verify(&base, &receipt);
    let said = shared::text(&v);
    assert_eq!(v.status.code(), Some(0), "{said}");
    assert!(said.contains("1 child receipts hold"), "{said}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_childs_change_set_is_what_it_changed_from_its_parents_state() {
    let base = tmpdir("changeset");
    let project = project(&base);
    let contract = PARENT_OF_A
        .replace("pkg/a/done.txt", "pkg/a/README")
        .replace("\"a is done\"", "\"from the child\"");
    // The parent changes pkg/a/README, then a child adds a line to it.
    let script = "turns:\n  - calls:\n      - tool: write_file\n        args: { path: pkg/a/README, content: \"start\\nfrom the parent\\n\" }\n  - calls:\n".to_string()
        + "      - tool: delegate\n        args:\n          instruction: add a line\n          criteria: [{ id: a, text: added, checks: [{ file_contains: pkg/a/README, text: from the child }] }]\n          paths: [pkg/a]\n          budget: { max_steps: 4, max_tokens: 60000, timeout_secs: 300 }\n"
        + "  - calls:\n      - tool: finish\n        args: { summary: done }\nchildren:\n  - - calls:\n        - tool: write_file\n          args: { path: pkg/a/README, content: \"start\\nfrom the parent\\nfrom the child\\n\" }\n    - calls:\n        - tool: finish\n          args: { summary: a }\n";
    let run = shared::run_scripted(&base, &project, "changeset", (&contract, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let id = run.statement["predicate"]["task_id"].as_str().unwrap();
    let child = entries(&receipt, id, "delegated")[0]["payload"]["child"]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let statement = shared::payload_of(&receipt.with_file_name(format!("{child}.receipt.json")));
    let cs = &statement["predicate"]["change_set"];
    let patch =
        std::fs::read_to_string(receipt.with_file_name(cs["patch"].as_str().unwrap())).unwrap();
    // The child's own line, against the parent's content as it began.
    assert!(patch.contains("\n+from the child\n"), "{patch}");
    assert!(patch.contains("\n from the parent\n"), "{patch}");
    assert!(!patch.contains("+from the parent"), "{patch}");
    // The parent's receipt has both, against the project's commit.
    let parent_patch = std::fs::read_to_string(
        receipt.with_file_name(
            run.statement["predicate"]["change_set"]["patch"]
                .as_str()
                .unwrap(),
        ),
    )
    .unwrap();
    assert!(
        parent_patch.contains("\n+from the parent\n"),
        "{parent_patch}"
    );
    assert!(
        parent_patch.contains("\n+from the child\n"),
        "{parent_patch}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_skills_paths_bound_what_a_parent_may_grant_and_its_child_keeps_the_skill() {
    let base = tmpdir("skill");
    let project = project(&base);
    let pat = project.join("loop-patterns/only-a");
    std::fs::create_dir_all(&pat).unwrap();
    std::fs::write(
        pat.join("SKILL.md"),
        "---\ncapabilities:\n  writable: [pkg/a]\n---\nWork in package a only.\n",
    )
    .unwrap();
    // Package b is outside the skill's paths: not granted. The child of
    // package a remembers something: kept for a person, not given as is.
    let script = "turns:\n  - calls:\n".to_string()
        + &delegate("b")
        + &delegate("a")
        + "  - calls:\n      - tool: finish\n        args: { summary: a is done }\nchildren:\n  - - calls:\n        - tool: remember\n          args: { text: package a keeps its done file }\n        - tool: write_file\n          args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n    - calls:\n        - tool: finish\n          args: { summary: a }\n";
    std::fs::write(base.join("task.yaml"), PARENT_OF_A).unwrap();
    std::fs::write(base.join("script.yaml"), &script).unwrap();
    let out = shared::loop_in(&base)
        .args(["run", "--json", "--skill", "only-a", "--task"])
        .arg(base.join("task.yaml"))
        .arg("--model")
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", shared::text(&out));
    let receipt = shared::json_lines(&out)
        .into_iter()
        .find(|e| e["kind"] == "receipt")
        .unwrap();
    let receipt = PathBuf::from(receipt["path"].as_str().unwrap());
    let id = receipt
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_end_matches(".receipt.json")
        .to_string();
    let said = entries(&receipt, &id, "observed");
    let refused = said[0]["payload"]["observation"].to_string();
    assert!(
        refused.contains("delegation: paths beneath the parent's"),
        "{refused}"
    );
    assert!(refused.contains("pkg/b"), "{refused}");
    let delegated = entries(&receipt, &id, "delegated");
    assert_eq!(delegated.len(), 1);
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "verified");
    let child = delegated[0]["payload"]["child"]["task_id"]
        .as_str()
        .unwrap();
    let statement = shared::payload_of(&receipt.with_file_name(format!("{child}.receipt.json")));
    assert_eq!(statement["predicate"]["skills"][0]["name"], "only-a");
    // The child's note waits for a person although the child was verified.
    let notes = shared::loop_in(&base)
        .args(["memory", "list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let notes = shared::json_lines(&notes);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["status"], "quarantined");
    let _ = std::fs::remove_dir_all(&base);
}

/// The ledger of task `id` somewhere below `dir`, once it is written.
fn ledger_below(dir: &Path, id: &str) -> Option<PathBuf> {
    let name = format!("{id}.ledger.jsonl");
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() && e.file_name().to_string_lossy() == name {
                return Some(e.path());
            }
        }
    }
    None
}

/// Task `contract` played by `script` through `loop serve --jobs JOBS` in
/// `project`, waited for: its id, its status at its end, and its ledger.
fn served(
    base: &Path,
    project: &Path,
    jobs: &str,
    contract: &str,
    script: &str,
) -> (String, serde_json::Value, PathBuf) {
    std::fs::write(project.join("script.yaml"), script).unwrap();
    let token = shared::token_for(base, project, "alice");
    let (server, url) = shared::serve(base, project, &[], &["--jobs", jobs]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let body = serde_json::json!({"instruction": "Finish the work.", "contract": contract, "model": "scripted:script.yaml"});
    let mut r = agent
        .post(&format!("{url}/api/v1/tasks"))
        .header("Authorization", &format!("Bearer {token}"))
        .content_type("application/json")
        .send(body.to_string())
        .unwrap();
    let posted: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(r.status().as_u16(), 201, "{posted}");
    let id = posted["id"].as_str().unwrap().to_string();
    let start = std::time::Instant::now();
    let ended = loop {
        let v: serde_json::Value = serde_json::from_str(
            &agent
                .get(&format!("{url}/api/v1/tasks/{id}"))
                .header("Authorization", &format!("Bearer {token}"))
                .call()
                .unwrap()
                .body_mut()
                .read_to_string()
                .unwrap(),
        )
        .unwrap();
        if v["outcome"].is_string() {
            break v;
        }
        assert!(start.elapsed().as_secs() < 120, "{v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    shared::stop(server);
    let ledger = ledger_below(&project.join(".loop"), &id).expect("the parent's ledger");
    (id, ended, ledger)
}

/// The ids of the children the parent `id` records in `ledger`, in order.
fn children_in(ledger: &Path, id: &str) -> Vec<String> {
    entries(ledger, id, "delegated")
        .iter()
        .map(|e| {
            e["payload"]["child"]["task_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// `loop serve --jobs N` counts a task's children against its N places:
/// a parent lends its children its own place, so with one place its two
/// children run one after the other; with two, side by side (the honest
/// case: a free place is used). Either way the tree verifies.
#[test]
fn loop_serve_jobs_counts_the_children_of_its_tasks() {
    let child = |pkg: &str| {
        format!(
            "  - - calls:\n        - {{tool: run_command, args: {{command: \"sleep 1\"}}}}\n        - {{tool: write_file, args: {{path: pkg/{pkg}/done.txt, content: \"{pkg} is done\\n\"}}}}\n    - calls:\n        - {{tool: finish, args: {{summary: {pkg}}}}}\n"
        )
    };
    let script = format!(
        "turns:\n  - calls:\n{}{}  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\nchildren:\n{}{}",
        delegate("a"),
        delegate("b"),
        child("a"),
        child("b")
    );
    for (jobs, together) in [("1", false), ("2", true)] {
        let base = tmpdir(&format!("serve-jobs-{jobs}"));
        let project = project(&base);
        let (id, ended, ledger) = served(&base, &project, jobs, PARENT, &script);
        assert_eq!(ended["outcome"], "verified", "--jobs {jobs}: {ended}");
        let children = children_in(&ledger, &id);
        assert_eq!(children.len(), 2, "--jobs {jobs}");
        let (a, b) = (&children[0], &children[1]);
        let overlap = at(&ledger, a, "task_started", false) < at(&ledger, b, "finished", true)
            && at(&ledger, b, "task_started", false) < at(&ledger, a, "finished", true);
        assert_eq!(
            overlap, together,
            "--jobs {jobs}: the children ran together: {overlap}"
        );
        let v = verify(&base, &ledger.with_file_name(format!("{id}.receipt.json")));
        assert_eq!(v.status.code(), Some(0), "{}", shared::text(&v));
        let _ = std::fs::remove_dir_all(&base);
    }
}

/// A provider that sends two `delegate` calls with the same id in one turn
/// starts one child: a child is known by its turn and call id (its record,
/// its spending, its place in the receipt tree), and the second would run
/// unrecorded. The first, with its own id, is started and merged as ever.
#[test]
fn two_delegate_calls_with_one_id_start_one_child() {
    let base = tmpdir("same-id");
    let project = project(&base);
    let contract = r#"
instruction: Finish package a.
criteria:
  - id: a
    text: package a is done
    checks:
      - file_contains: pkg/a/done.txt
        text: "a is done"
limits: { max_steps: 20, max_children: 2, max_depth: 1 }
"#;
    let with_id = |pkg: &str| {
        delegate(pkg).replacen("- tool: delegate", "- id: same\n        tool: delegate", 1)
    };
    let script = format!(
        "turns:\n  - calls:\n{}{}  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\nchildren:\n  - - calls:\n        - {{tool: write_file, args: {{path: pkg/a/done.txt, content: \"a is done\\n\"}}}}\n    - calls:\n        - {{tool: finish, args: {{summary: a}}}}\n  - - calls:\n        - {{tool: write_file, args: {{path: pkg/b/done.txt, content: \"b is done\\n\"}}}}\n    - calls:\n        - {{tool: finish, args: {{summary: b}}}}\n",
        with_id("a"),
        with_id("b")
    );
    let run = shared::run_scripted(&base, &project, "same-id", (contract, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let parent = run.statement["predicate"]["task_id"].as_str().unwrap();
    assert_eq!(entries(&receipt, parent, "delegated").len(), 1);
    let said: Vec<serde_json::Value> = entries(&receipt, parent, "observed")
        .into_iter()
        .map(|e| e["payload"]["observation"].clone())
        .collect();
    assert_eq!(said[0]["status"], "ok", "{:?}", said[0]);
    assert_eq!(said[1]["status"], "refused", "{:?}", said[1]);
    assert_eq!(said[1]["rule"], "delegation: one child per call id");
    // One child in the store, package b untouched.
    let children: Vec<_> = tasks_of(&base, &project)
        .into_iter()
        .filter(|t| t["parent"] == parent)
        .collect();
    assert_eq!(children.len(), 1, "{children:?}");
    let ws = shared::workspace_of(&project, parent);
    assert!(!ws.join("pkg/b/done.txt").exists());
    let v = verify(&base, &receipt);
    assert_eq!(v.status.code(), Some(0), "{}", shared::text(&v));
    let _ = std::fs::remove_dir_all(&base);
}

/// Children that run one after another (one place) run no longer than the
/// time their parent had left as the turn began: the second is stopped at
/// the parent's deadline instead of starting its own full grant there.
/// (The first, within the time, ends verified as ever.)
#[test]
fn children_run_one_after_another_stop_at_their_parents_deadline() {
    let child = |pkg: &str| {
        format!(
            "  - - calls:\n        - {{tool: run_command, args: {{command: \"sleep 3\"}}}}\n        - {{tool: write_file, args: {{path: pkg/{pkg}/done.txt, content: \"{pkg} is done\\n\"}}}}\n    - calls:\n        - {{tool: finish, args: {{summary: {pkg}}}}}\n"
        )
    };
    let grant = |pkg: &str| delegate(pkg).replace("timeout_secs: 300", "timeout_secs: 5");
    let script = format!(
        "turns:\n  - calls:\n{}{}  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\nchildren:\n{}{}",
        grant("a"),
        grant("b"),
        child("a"),
        child("b")
    );
    let contract = PARENT.replace(
        "limits: { max_steps: 20,",
        "limits: { timeout_secs: 6, max_steps: 20,",
    );
    let base = tmpdir("deadline");
    let project = project(&base);
    let (id, ended, ledger) = served(&base, &project, "1", &contract, &script);
    let children = children_in(&ledger, &id);
    assert_eq!(children.len(), 2, "{ended}");
    let outcome = |child: &str| {
        entries(&ledger, child, "finished")[0]["payload"]["outcome"]["kind"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(outcome(&children[0]), "verified");
    assert_eq!(outcome(&children[1]), "cancelled", "{ended}");
    assert_ne!(ended["outcome"], "verified", "{ended}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A child asking for an exec rule that would loosen its parent's
/// (`allow`) is refused with the rule named, not as unreadable arguments,
/// and nothing is started; the same proposal with `forbidden` is granted.
#[test]
fn a_looser_exec_rule_for_a_child_is_refused_by_its_rule() {
    for (decision, started) in [("allow", false), ("forbidden", true)] {
        let base = tmpdir(&format!("looser-{decision}"));
        let project = project(&base);
        let contract = PARENT.replace(
            "  - id: b\n    text: package b is done\n    checks:\n      - file_contains: pkg/b/done.txt\n        text: \"b is done\"\n",
            "",
        );
        let ask = delegate("a").replace(
            "          paths: [pkg/a]\n",
            &format!("          paths: [pkg/a]\n          exec: [{{ prefix: curl, decision: {decision} }}]\n"),
        );
        let script = format!(
            "turns:\n  - calls:\n{ask}  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\nchildren:\n  - - calls:\n        - {{tool: write_file, args: {{path: pkg/a/done.txt, content: \"a is done\\n\"}}}}\n    - calls:\n        - {{tool: finish, args: {{summary: a}}}}\n"
        );
        let run = shared::run_scripted(&base, &project, "looser", (&contract, &script));
        let receipt = run.receipt_path();
        let parent = run.statement["predicate"]["task_id"].as_str().unwrap();
        let first = &entries(&receipt, parent, "observed")[0]["payload"]["observation"];
        assert_eq!(
            entries(&receipt, parent, "delegated").len(),
            usize::from(started)
        );
        if started {
            assert_eq!(first["status"], "ok", "{first:?}");
        } else {
            assert_eq!(first["status"], "refused", "{first:?}");
            assert_eq!(first["rule"], "delegation: exec", "{first:?}");
            let says = first["content"].as_str().unwrap();
            assert!(says.contains("\"curl\" with `allow`"), "{says}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}

/// Budgets end to end: a child given two steps that never finishes ends
/// `limit_reached` at its second step, nothing of it merged, and its
/// parent hears so and goes on; a grant of more steps than the parent has
/// left starts no child and says what was asked and what is left. The
/// tree verifies, the grant checked against the parent's budget.
#[test]
fn a_child_ends_at_its_limit_and_a_grant_past_the_parents_is_refused() {
    let base = tmpdir("limits");
    let project = project(&base);
    let grant = |pkg: &str, steps: u32| {
        delegate(pkg).replace(
            "budget: { max_steps: 4,",
            &format!("budget: {{ max_steps: {steps},"),
        )
    };
    assert!(grant("a", 2).contains("max_steps: 2,"));
    let script = "turns:\n  - calls:\n".to_string()
        + &grant("a", 2)
        + "  - calls:\n"
        + &grant("b", 500)
        + "  - calls:\n      - tool: write_file\n        args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n      - tool: write_file\n        args: { path: pkg/b/done.txt, content: \"b is done\\n\" }\n  - calls:\n      - tool: finish\n        args: { summary: done myself }\nchildren:\n  - - calls:\n        - tool: write_file\n          args: { path: pkg/a/one.txt, content: \"1\\n\" }\n    - calls:\n        - tool: write_file\n          args: { path: pkg/a/two.txt, content: \"2\\n\" }\n    - calls:\n        - tool: write_file\n          args: { path: pkg/a/three.txt, content: \"3\\n\" }\n";
    let run = shared::run_scripted(&base, &project, "limits", (PARENT, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    assert_eq!(run.statement["predicate"]["outcome"]["kind"], "verified");
    let receipt = run.receipt_path();
    let id = run.statement["predicate"]["task_id"].as_str().unwrap();
    let delegated = entries(&receipt, id, "delegated");
    assert_eq!(delegated.len(), 1, "{delegated:?}");
    assert_eq!(
        delegated[0]["payload"]["child"]["outcome"],
        "limit_reached{steps}"
    );
    let observed = entries(&receipt, id, "observed");
    let said = |n: usize| observed[n]["payload"]["observation"].clone();
    let first = said(0);
    assert!(
        first["content"]
            .as_str()
            .unwrap()
            .contains("ended limit_reached"),
        "{first}"
    );
    assert_eq!(first["changed"], false, "{first}");
    // Nothing of the child's reached the parent's workspace (the parent
    // wrote its own files; the child's one.txt and two.txt stayed its).
    let ws = shared::workspace_of(&project, id);
    assert!(ws.join("pkg/a/done.txt").is_file(), "{}", ws.display());
    assert!(!ws.join("pkg/a/one.txt").exists());
    assert!(!ws.join("pkg/a/two.txt").exists());
    // It ended at its second step: its ledger holds two model turns.
    let child = delegated[0]["payload"]["child"]["task_id"]
        .as_str()
        .unwrap();
    let child_ledger = receipt
        .parent()
        .unwrap()
        .join(format!("{child}.ledger.jsonl"));
    let turns = std::fs::read_to_string(&child_ledger)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"kind\":\"model_turn\""))
        .count();
    assert_eq!(turns, 2, "{}", child_ledger.display());
    let second = said(1);
    let refused = second["content"].as_str().unwrap();
    assert!(
        refused.contains("max_steps 500 is more than this task has left"),
        "{second}"
    );
    // Only the one child was ever made.
    assert_eq!(tasks_of(&base, &project).len(), 2);
    let v = verify(&base, &receipt);
    let text = shared::text(&v);
    assert_eq!(v.status.code(), Some(0), "{text}");
    assert!(text.contains("1 child receipts hold"), "{text}");
    let _ = std::fs::remove_dir_all(&base);
}

/// `limits.write_mb` holds over the whole tree: a child may write only
/// what its parent has left (shared by the children of a turn), and what
/// it wrote is charged to the parent when it ends; no command's disk is
/// larger than what is left. The parent (3 MiB) writes 1.5 MiB; its first
/// child is granted 1 MiB, writes 0.6 MiB and is verified; the parent's
/// count then holds both, so a second child (0.9 MiB left) is not
/// started, and the parent's own 2 MB command fills a 1 MiB disk.
#[test]
fn a_childs_writes_come_out_of_its_parents_write_mb() {
    let base = tmpdir("write-mb");
    let project = project(&base);
    let contract = PARENT.replace(
        "limits: { max_steps: 20,",
        "limits: { write_mb: 3, max_steps: 20,",
    );
    assert!(contract.contains("write_mb: 3"));
    let fill = |path: &str, bytes: u32, indent: &str| {
        format!(
            "{indent}- tool: run_command\n{indent}  args: {{ command: \"head -c {bytes} /dev/zero | tr '\\\\0' a > {path}\" }}\n"
        )
    };
    let script = "turns:\n  - calls:\n".to_string()
        + &fill("big.txt", 1_600_000, "      ")
        + "  - calls:\n"
        + &delegate("a")
        + "  - calls:\n"
        + &delegate("b")
        + "  - calls:\n"
        + &fill("more.txt", 2_000_000, "      ")
        + "  - calls:\n      - tool: write_file\n        args: { path: pkg/b/done.txt, content: \"b is done\\n\" }\n  - calls:\n      - tool: finish\n        args: { summary: done }\nchildren:\n  - - calls:\n"
        + &fill("pkg/a/blob.txt", 650_000, "        ")
        + "        - tool: write_file\n          args: { path: pkg/a/done.txt, content: \"a is done\\n\" }\n    - calls:\n        - tool: finish\n          args: { summary: a }\n";
    let run = shared::run_scripted(&base, &project, "write-mb", (&contract, &script));
    assert_eq!(run.out.status.code(), Some(0), "{}", shared::text(&run.out));
    assert_eq!(run.outcome(), "verified", "{}", shared::text(&run.out));
    let receipt = run.receipt_path();
    let id = run.id();
    let delegated = entries(&receipt, id, "delegated");
    assert_eq!(delegated.len(), 1, "{delegated:?}");
    let child = delegated[0]["payload"]["child"]["task_id"]
        .as_str()
        .unwrap();
    assert_eq!(delegated[0]["payload"]["child"]["outcome"], "verified");
    // The child was made with what its parent had left (1.47 MiB: 1).
    let shown = shared::loop_in(&base)
        .args(["show", "--json", "--project"])
        .arg(&project)
        .arg(child)
        .output()
        .unwrap();
    let shown_text = shared::text(&shown);
    assert!(shown_text.contains("\"write_mb\":1"), "{shown_text}");
    // Its 0.6 MiB command, on a disk of the 1 MiB it may write, is not
    // told it filled it.
    let child_ledger = std::fs::read_to_string(
        receipt
            .parent()
            .unwrap()
            .join(format!("{child}.ledger.jsonl")),
    )
    .unwrap();
    assert!(child_ledger.contains("run_command"), "{child_ledger}");
    assert!(!child_ledger.contains("--- disk ---"), "{child_ledger}");
    // Its writes are listed as charged to the parent, and counted there.
    let tasks = project.join(".loop/tasks");
    let child_wrote: u64 = std::fs::read_to_string(tasks.join(child).join("written"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(child_wrote >= 650_000, "{child_wrote}");
    assert_eq!(
        std::fs::read_to_string(tasks.join(id).join("written-by-children")).unwrap(),
        format!("{child} {child_wrote}\n")
    );
    let observed = entries(&receipt, id, "observed");
    let said = |rule: &str| -> String {
        let o = observed
            .iter()
            .find(|o| {
                o["payload"]["observation"]["rule"] == rule
                    || o["payload"]["observation"]["content"]
                        .as_str()
                        .is_some_and(|c| c.contains(rule))
            })
            .unwrap_or_else(|| panic!("{rule}: {observed:?}"));
        o["payload"]["observation"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let refused = said("limit: write_mb");
    assert!(
        refused.contains("The child was not started") && refused.contains("of its 3 MiB"),
        "{refused}"
    );
    // The parent's 2 MB command had a disk of what was left (0.85 MiB,
    // rounded up), and is told which limit sized it.
    let filled = said("--- disk ---");
    assert!(
        filled.contains(
            "may not exceed 1 MiB, what is left of the task's limit of 3 MiB on what its commands write in all (limits.write_mb)"
        ),
        "{filled}"
    );
    // The parent's own count kept its commands' writes alone, and its
    // total stayed within a MiB of its limit.
    let own: u64 = std::fs::read_to_string(tasks.join(id).join("written"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(own >= 1_600_000, "{own}");
    assert!(own + child_wrote < 4 << 20, "{own} + {child_wrote}");
    // Only the one child was ever made, and the tree verifies.
    assert_eq!(tasks_of(&base, &project).len(), 2);
    let v = verify(&base, &receipt);
    assert_eq!(v.status.code(), Some(0), "{}", shared::text(&v));
    let _ = std::fs::remove_dir_all(&base);
}
