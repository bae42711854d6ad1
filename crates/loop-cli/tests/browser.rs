//! The web console in a real browser: headless Chromium, driven through
//! chromedriver by `crates/loop-server/tests/browser/console.py` (Selenium
//! from `scripts/browser-venv.sh`), signs in, starts a task from the form,
//! watches its live story, approves the command it asks to run, sees it
//! verified with a receipt that holds, reads the diff and applies it; then
//! gives an instruction alone, accepts the contract the model drafted, and
//! sees that task verified too; and a task the command line starts in the
//! same project appears in the open console and plays live.
//! Screenshots of each step are kept in `target/tmp/browser/shots`.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::loop_in;
use std::path::PathBuf;

const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: run_command, args: {command: \"touch approved.txt\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

/// For an instruction alone: the contract the model drafts, then its work.
const DRAFTING: &str = "draft:
  - calls:
      - tool: propose_contract
        args:
          criteria:
            - id: hello
              text: hello2.txt says hello
              checks:
                - run: grep -q hello hello2.txt
turns:
  - calls:
      - {tool: write_file, args: {path: hello2.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

#[test]
fn a_person_runs_a_task_from_the_console_in_chromium() {
    let Some(venv) = std::env::var_os("LOOP_BROWSER_VENV") else {
        assert!(
            std::env::var_os("LOOP_REQUIRE_LOCAL_MODEL").is_none(),
            "scripts/test.sh must pass LOOP_BROWSER_VENV"
        );
        eprintln!("skipped: LOOP_BROWSER_VENV is not set (scripts/test.sh sets it)");
        return;
    };
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    std::fs::write(project.join("script.yaml"), SCRIPT).unwrap();
    std::fs::write(project.join("draft.yaml"), DRAFTING).unwrap();
    std::fs::write(
        project.join("upload.yaml"),
        "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"cp inputs/given.txt out.txt\"}}\n  - calls:\n      - {tool: finish, args: {summary: copied}}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("cli.yaml"),
        "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"sleep 2\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("long.yaml"),
        "turns:\n  - calls:\n      - {tool: run_command, args: {command: \"sleep 60\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    // A task that hands its work to a child: the console shows the tree.
    std::fs::write(
        project.join("deleg.task.yaml"),
        "instruction: hand the work to a child\ncriteria:\n  - id: c\n    text: the child wrote it\n    checks:\n      - file_contains: child.txt\n        text: from the child\nlimits: { max_children: 1, max_depth: 1 }\n",
    )
    .unwrap();
    std::fs::write(
        project.join("deleg.yaml"),
        "turns:\n  - calls:\n      - tool: delegate\n        args: { instruction: write child.txt, criteria: [{ id: w, text: written, checks: [{ file_contains: child.txt, text: from the child }] }], paths: [child.txt], budget: { max_steps: 3, max_tokens: 60000, timeout_secs: 120 } }\n  - calls:\n      - {tool: finish, args: {summary: done}}\nchildren:\n  - - calls:\n        - {tool: run_command, args: {command: \"touch child.txt\"}}\n        - {tool: write_file, args: {path: child.txt, content: \"from the child\\n\"}}\n    - calls:\n        - {tool: finish, args: {summary: written}}\n",
    )
    .unwrap();
    std::fs::write(
        project.join("Loopfile.yaml"),
        "models:\n  maker:\n    spec: scripted:script.yaml\nexec:\n  approval_timeout_secs: 120\n  rules:\n    - prefix: touch\n      decision: prompt\n      examples: [\"touch a.txt\"]\n",
    )
    .unwrap();
    let out = loop_in(&home)
        .args([
            "tokens",
            "create",
            "--owner",
            "web",
            "--scope",
            "admin",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let (server, url) = shared::serve(&home, &project, &[], &[]);
    let shots = home.join("shots");
    let driver = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../loop-server/tests/browser/console.py"
    );
    let out = std::process::Command::new(PathBuf::from(&venv).join("bin/python"))
        .arg(driver)
        .arg(&url)
        .arg(&token)
        .arg(&project)
        .arg(&shots)
        .arg(env!("CARGO_BIN_EXE_loop"))
        .arg(home.join("state"))
        .output()
        .unwrap();
    shared::stop(server);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the browser test failed:\n{said}");
    assert_eq!(said.trim().lines().last(), Some("ok"), "{said}");
    assert_eq!(
        std::fs::read_to_string(project.join("hello.txt")).unwrap(),
        "hello\n"
    );
    let taken = std::fs::read_dir(&shots).unwrap().count();
    assert_eq!(taken, 16, "screenshots in {}", shots.display());
}
