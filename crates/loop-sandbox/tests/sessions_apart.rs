//! Checks of several workspaces run at once from one process (one
//! spawner, its sessions and their chains, as `loop eval --jobs` and
//! `loop serve` run tasks): each command sees its own workspace and ends
//! with its own status, never another's. A chain's init once ended with
//! 0 after telling its command's end, and a spawner woken by another
//! command's end before that report was readable answered init's 0: a
//! check that failed passed (a wrong solution verified, a right one's
//! check said to pass on an empty workspace).
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_sandbox::{ExecRequest, run};
use std::path::{Path, PathBuf};

fn main() {
    // The spawner is this binary, started again with its argument.
    loop_sandbox::spawner::serve_if_asked();
    loop_sandbox::spawner::enable(true);
    concurrent_checks_of_several_workspaces_never_see_each_other();
    println!("sessions_apart: ok");
}

/// A workspace whose check prints `name` and exits with `code`.
fn workspace(base: &Path, name: &str, code: u8) -> PathBuf {
    let ws = base.join(name).join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("who"), format!("{name}\n")).unwrap();
    std::fs::write(ws.join("code"), format!("{code}\n")).unwrap();
    ws
}

fn concurrent_checks_of_several_workspaces_never_see_each_other() {
    let base = std::env::temp_dir().join(format!("loop-apart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    // Without the fix, 8 runs of 8 failed with these (about 2.7 s each).
    let (n, rounds) = (4, 150);
    // Half of them pass, half fail, each with a code of its own.
    let runs: Vec<_> = (0..n)
        .map(|t| {
            let name = format!("w{t}");
            let code = if t % 2 == 0 { 0 } else { t as u8 + 1 };
            let ws = workspace(&base, &name, code);
            let base = base.clone();
            std::thread::spawn(move || {
                let mut wrong = Vec::new();
                for i in 0..rounds {
                    let mut req = ExecRequest::shell("cat who; exit $(cat code)", &ws);
                    req.check = true;
                    req.workspace = Some(ws.clone());
                    req.overlay_scratch = Some(base.join(&name).join(format!("view-{i}")));
                    let r = run(&req).unwrap();
                    assert!(r.isolation.user_namespace && r.isolation.mount_namespace);
                    let out = r.stdout.excerpt();
                    if out != format!("{name}\n") || r.exit_code != Some(i32::from(code)) {
                        wrong.push(format!("{name} #{i}: {out:?} exit {:?}", r.exit_code));
                    }
                }
                wrong
            })
        })
        .collect();
    let wrong: Vec<String> = runs.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let _ = std::fs::remove_dir_all(&base);
    assert!(wrong.is_empty(), "{wrong:#?}");
}
