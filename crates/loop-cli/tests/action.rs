//! The GitHub Action (`action.yml`) and the example workflow
//! (`docs/ci/github-workflow.yml`) pass real linters: action-validator
//! (the action and workflow JSON Schemas) and actionlint (rhysd's workflow
//! checker), installed by scripts/action-lint.sh; and the linters are not
//! vacuous: a broken copy of each is refused, naming what is wrong.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `scripts/action-lint.sh -- FILES`: its exit code and what it said.
fn lint(files: &[&Path]) -> (i32, String) {
    let out = Command::new("bash")
        .arg(root().join("scripts/action-lint.sh"))
        .arg("--")
        .args(files)
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), shared::text(&out))
}

#[test]
fn the_action_and_its_workflow_pass_actionlint_and_the_schemas_and_broken_ones_do_not() {
    if std::env::var_os("LOOP_ACTION_LINT").is_none() {
        // (scripts/test.sh sets it, with the linters installed.)
        eprintln!("skipped: LOOP_ACTION_LINT is not set");
        return;
    }
    let action = root().join("action.yml");
    let workflow = root().join("docs/ci/github-workflow.yml");
    let (code, said) = lint(&[&action, &workflow]);
    assert_eq!(code, 0, "{said}");

    let dir = std::env::temp_dir().join(format!("loop-action-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A step of the composite action with no shell.
    let text = std::fs::read_to_string(&action).unwrap();
    let broken = dir.join("action.yml");
    std::fs::write(&broken, text.replacen("shell: bash", "shel: bash", 1)).unwrap();
    let (code, said) = lint(&[&broken]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("Additional property 'shel' is not allowed"),
        "{said}"
    );
    // A workflow on an event GitHub has not, with a malformed expression.
    let text = std::fs::read_to_string(&workflow).unwrap();
    let broken = dir.join("workflow.yml");
    std::fs::write(
        &broken,
        text.replace("pull_request:", "pull_requests:").replace(
            "${{ github.event.pull_request.head.sha }}",
            "${{ github.event.pull_request.head.sha ",
        ),
    )
    .unwrap();
    let (code, said) = lint(&[&broken]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("unknown Webhook event \"pull_requests\""),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
