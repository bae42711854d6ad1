//! Preparing a task once the project was seen: the baseline's passing
//! results on a tree are kept, and the next task on the same tree (same
//! check, same sandbox) takes them instead of running the project's checks
//! again, its receipt naming the task that ran each; a failure, a changed
//! tree, or a changed check runs again.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::Command;

const TASK: &str = "instruction: write hello.txt
criteria:
  - id: hello
    checks:
      - run: grep -q hello hello.txt
";

const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

fn git(project: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.email=t@e", "-c", "user.name=t"])
        .args(args)
        .current_dir(project)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A git project whose own build check is `build`.
fn project(base: &Path, build: &str) -> PathBuf {
    let _ = std::fs::remove_dir_all(base);
    let project = base.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!("verification:\n  build: \"{build}\"\n"),
    )
    .unwrap();
    shared::commit_all(&project);
    project
}

/// The baseline's evidence of each check, by command: where it came from
/// (the task that ran it, when reused).
fn baseline_of(run: &shared::ScriptedRun) -> Vec<(String, bool, Option<String>)> {
    let b = &run.statement["predicate"]["baseline"];
    assert!(b.is_object(), "no baseline in {}", run.statement);
    b["criteria"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["checks"].as_array().unwrap().iter())
        .map(|e| {
            (
                e["check"]["command"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["passed"].as_bool().unwrap(),
                e["reused_from"]["task_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn the_next_task_on_a_seen_tree_takes_the_baseline_and_says_whose_it_was() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("prep-cache");
    let project = project(&base, "test -f README.md && sleep 2");
    let first = shared::run_scripted(&base, &project, "first", (TASK, SCRIPT));
    assert_eq!(first.outcome(), "verified", "{}", shared::text(&first.out));
    let ran = baseline_of(&first);
    assert!(
        !ran.is_empty() && ran.iter().all(|(_, _, from)| from.is_none()),
        "{ran:?}"
    );
    // The same tree, the same checks: what passed is not run again, and
    // the receipt says whose run each result is; what failed (read as
    // "the task made it pass" were it kept) runs again.
    let second = shared::run_scripted(&base, &project, "second", (TASK, SCRIPT));
    assert_eq!(
        second.outcome(),
        "verified",
        "{}",
        shared::text(&second.out)
    );
    let reused = baseline_of(&second);
    assert_eq!(reused.len(), ran.len(), "{reused:?}");
    assert!(ran.iter().any(|(_, passed, _)| *passed), "{ran:?}");
    assert!(ran.iter().any(|(_, passed, _)| !passed), "{ran:?}");
    for ((command, passed, from), (_, was, _)) in reused.iter().zip(&ran) {
        let want = passed.then_some(first.id());
        assert_eq!(from.as_deref(), want, "{command}");
        assert_eq!(passed, was, "{command}");
    }
    let said = shared::text(&second.out);
    assert!(
        said.contains(&format!("taken from task {}", first.id())),
        "{said}"
    );
    // The build guard still ran for real where it counts: in the final
    // verification, on the task's result.
    let end = &second.statement["predicate"]["verification"];
    assert!(end.is_array() || end.is_object(), "{end}");
    let fresh = end.to_string();
    assert!(
        fresh.contains("sleep 2") && !fresh.contains("reused_from"),
        "{fresh}"
    );
    // A new commit is a new tree: everything runs again.
    std::fs::write(project.join("README.md"), "changed\n").unwrap();
    git(&project, &["commit", "-qam", "change"]);
    let third = shared::run_scripted(&base, &project, "third", (TASK, SCRIPT));
    assert_eq!(third.outcome(), "verified");
    assert!(
        baseline_of(&third)
            .iter()
            .all(|(_, _, from)| from.is_none())
    );
    // So does a changed check on a seen tree (the changed one only): a
    // Loopfile edited, not committed, leaves the tree as it was.
    std::fs::write(
        project.join("Loopfile.yaml"),
        "verification:\n  build: \"test -f README.md && sleep 1\"\n",
    )
    .unwrap();
    let fourth = shared::run_scripted(&base, &project, "fourth", (TASK, SCRIPT));
    assert_eq!(fourth.outcome(), "verified");
    for (command, passed, from) in baseline_of(&fourth) {
        let want = (passed && !command.contains("sleep 1")).then(|| third.id().to_string());
        assert_eq!(from, want, "{command}");
    }
}
