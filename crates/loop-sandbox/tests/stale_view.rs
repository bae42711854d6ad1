//! The host's view is resolved once per process; a file in it can vanish
//! before a later command runs (a toolchain's lock file, removed by the
//! tool). A command must still start: a path that is gone grants nothing.
//! This once failed every later command of a run with "sandbox step
//! `landlock rule in the new root` failed: No such file or directory".
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_sandbox::{ExecRequest, run};

#[test]
fn a_file_of_the_host_view_that_vanished_does_not_stop_commands() {
    let base = std::env::temp_dir().join(format!("loop-stale-view-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    // A toolchain tree on the PATH holding a denied path (the runtime's
    // state dir), so the view lists its entries one by one.
    let tool = base.join("tool");
    std::fs::create_dir_all(tool.join("bin")).unwrap();
    std::fs::create_dir_all(tool.join("state")).unwrap();
    std::fs::write(tool.join(".lock"), "").unwrap();
    std::fs::write(tool.join("kept"), "").unwrap();
    let ws = base.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // SAFETY: the only test in this binary; no thread has started yet.
    unsafe {
        std::env::set_var("LOOP_STATE_DIR", tool.join("state"));
        std::env::set_var(
            "PATH",
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin",
                tool.join("bin").display()
            ),
        );
    }
    let view = loop_sandbox::confinement::host_view();
    assert!(
        view.read_exec.iter().any(|p| p == &tool.join(".lock")),
        "the view lists the tree's entries: {:?}",
        view.read_exec
            .iter()
            .filter(|p| p.starts_with(&tool))
            .collect::<Vec<_>>()
    );
    let first = run(&ExecRequest::shell("echo one", &ws)).unwrap();
    assert_eq!(first.exit_code, Some(0), "{}", first.stderr.excerpt());
    std::fs::remove_file(tool.join(".lock")).unwrap();
    let second = run(&ExecRequest::shell("echo two", &ws));
    let second = second.unwrap_or_else(|e| panic!("a vanished file stopped the command: {e}"));
    assert_eq!(second.exit_code, Some(0), "{}", second.stderr.excerpt());
    assert_eq!(second.stdout.excerpt(), "two\n");
    std::fs::remove_dir_all(&base).unwrap();
}
