//! Workflows a person goes through after a run: the change set applied,
//! its files put back by hand (a `git checkout`), and a way forward
//! offered: `loop undo --forget`, then apply again; `loop status` says
//! where the change set stands at each point.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{loop_in, text};
use std::path::PathBuf;

#[test]
fn after_an_applied_file_is_put_back_undo_offers_a_way_forward() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workflow-forget");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let out = loop_in(&home)
        .args(["demo", "--dir"])
        .arg(home.join("demo"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let project = home.join("demo/project");
    let run = |args: &[&str]| {
        loop_in(&home)
            .current_dir(&project)
            .args(args)
            .output()
            .unwrap()
    };
    let status = run(&["status", "last"]);
    assert!(
        text(&status).contains("change set   not applied (loop diff"),
        "{}",
        text(&status)
    );
    let out = run(&["apply", "last"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(project.join("todo.py").exists());
    let status = run(&["status", "last"]);
    assert!(
        text(&status).contains("change set   applied to the project (loop undo"),
        "{}",
        text(&status)
    );
    // Nothing was put back: forgetting would drop what undo restores from.
    let out = run(&["undo", "last", "--forget"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("still holds every file"),
        "{}",
        text(&out)
    );
    assert!(project.join("todo.py").exists());
    // The person puts the file back by hand.
    std::fs::remove_file(project.join("todo.py")).unwrap();
    let out = run(&["undo", "last"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("conflict, nothing undone"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("--forget"), "{}", text(&out));
    let out = run(&["apply", "last"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--forget"), "{}", text(&out));
    // Forgetting touches no file, and is signed like apply and undo.
    let addenda = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(project.join(".loop/receipts"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().contains(".addendum-"))
            .collect();
        v.sort();
        v
    };
    let before = addenda();
    let out = run(&["undo", "last", "--forget"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("no file was touched"), "{}", text(&out));
    assert!(!project.join("todo.py").exists());
    let after = addenda();
    assert_eq!(after.len(), before.len() + 1);
    let new = after.iter().find(|p| !before.contains(p)).unwrap();
    let payload = shared::payload_of(new);
    assert_eq!(payload["predicate"]["event"], "forgotten", "{payload}");
    // What the apply replaced is kept, not thrown away.
    let task = std::fs::read_dir(project.join(".loop/tasks"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    assert!(
        std::fs::read_dir(&task).unwrap().flatten().any(|e| e
            .file_name()
            .to_string_lossy()
            .starts_with("undo-forgotten-")),
        "no kept undo directory in {}",
        task.display()
    );
    let status = run(&["status", "last"]);
    assert!(text(&status).contains("not applied"), "{}", text(&status));
    // And the change set can be brought home again.
    let out = run(&["apply", "last"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(project.join("todo.py").exists());
}
