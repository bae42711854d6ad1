//! Tasks made before workspaces moved out of the project keep working:
//! a task whose workspace and journals are in `.loop/tasks/ID/` (the old
//! layout, made here by moving a new task's there, as an older version
//! left it) is shown, diffed, replayed, applied, discarded and left alone
//! by `loop gc` exactly as a new one is.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::{loop_in, text};
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A verified task writing `file` with `body`: its id and receipt.
fn task(base: &Path, p: &Path, file: &str, body: &str) -> (String, PathBuf) {
    let run = shared::run_scripted(
        base,
        p,
        file,
        (
            &format!(
                "instruction: write {file}\ncriteria:\n  - id: written\n    checks:\n      - run: \"grep -q {body} {file}\"\nlimits: {{ max_steps: 4, max_verifications: 1 }}\n"
            ),
            &format!(
                "turns:\n  - calls:\n      - {{tool: write_file, args: {{path: {file}, content: \"{body}\\n\"}}}}\n      - {{tool: finish, args: {{summary: written}}}}\n"
            ),
        ),
    );
    let receipt = &run.receipt;
    assert_eq!(receipt["outcome"]["kind"], "verified", "{receipt}");
    (
        receipt["task_id"].as_str().unwrap().to_string(),
        PathBuf::from(receipt["path"].as_str().unwrap()),
    )
}

/// Put task `id` in the old layout: its worktree moved (by git) to
/// `.loop/tasks/ID/workspace`, what was kept beside it moved into the
/// task's directory, the record naming the old place, the new one gone.
fn make_legacy(p: &Path, id: &str) -> PathBuf {
    let ws = shared::workspace_of(p, id);
    let near = ws.parent().unwrap().to_path_buf();
    let task_dir = p.join(".loop/tasks").join(id);
    let legacy = task_dir.join("workspace");
    git(
        p,
        &[
            "worktree",
            "move",
            ws.to_str().unwrap(),
            legacy.to_str().unwrap(),
        ],
    );
    for item in std::fs::read_dir(&near).unwrap().flatten() {
        let name = item.file_name();
        if name == "project" {
            continue;
        }
        std::fs::rename(item.path(), task_dir.join(&name)).unwrap();
    }
    std::fs::remove_dir_all(&near).unwrap();
    let record = task_dir.join("workspace.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    v["path"] = serde_json::Value::String(legacy.to_string_lossy().into_owned());
    std::fs::write(&record, serde_json::to_vec(&v).unwrap()).unwrap();
    legacy
}

#[test]
fn a_task_in_the_old_layout_is_diffed_replayed_applied_and_discarded() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("legacy-layout");
    let _ = std::fs::remove_dir_all(&base);
    let p = base.join("project");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("a.txt"), "one\n").unwrap();
    std::fs::write(p.join(".gitignore"), ".loop/\n").unwrap();
    git(&p, &["init", "-q"]);
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "base"]);
    let (kept, receipt) = task(&base, &p, "a.txt", "two");
    let (dropped, _) = task(&base, &p, "b.txt", "three");
    let kept_ws = make_legacy(&p, &kept);
    let dropped_ws = make_legacy(&p, &dropped);
    let cmd = |args: &[&str]| {
        let out = loop_in(&base)
            .args(args)
            .arg("--project")
            .arg(&p)
            .output()
            .unwrap();
        (out.status.code(), text(&out))
    };
    // status names the old place; diff reads it.
    let (code, said) = cmd(&["status", &kept, "--json"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(kept_ws.to_str().unwrap()), "{said}");
    let (code, diff) = cmd(&["diff", &kept]);
    assert_eq!(code, Some(0), "{diff}");
    assert!(diff.contains("+two"), "{diff}");
    // Replay reproduces the verification in the old workspace.
    let replay = loop_in(&base).arg("replay").arg(&receipt).output().unwrap();
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay));
    assert!(text(&replay).contains("reproduced"), "{}", text(&replay));
    // gc leaves both (each has a task), then apply and discard.
    let (code, said) = cmd(&["gc"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(kept_ws.is_dir() && dropped_ws.is_dir(), "{said}");
    let (code, said) = cmd(&["apply", &kept]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "two\n");
    assert_eq!(git(&p, &["status", "--porcelain"]), " M a.txt\n");
    let (code, said) = cmd(&["discard", &dropped]);
    assert_eq!(code, Some(0), "{said}");
    assert!(!dropped_ws.exists(), "{said}");
    assert_eq!(
        git(&p, &["branch", "--list", &format!("loop/{dropped}")]),
        ""
    );
    assert!(!p.join("b.txt").exists());
    let _ = std::fs::remove_dir_all(&base);
}
