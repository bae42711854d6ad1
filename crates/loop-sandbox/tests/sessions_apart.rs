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
use std::sync::atomic::{AtomicUsize, Ordering};

fn main() {
    // The spawner is this binary, started again with its argument.
    loop_sandbox::spawner::serve_if_asked();
    for off in ["LOOP_SPAWNER", "LOOP_SANDBOX_SESSIONS"] {
        assert!(
            std::env::var_os(off).is_none_or(|v| v != "0"),
            "{off}=0 would run these commands without what they test"
        );
    }
    if !loop_sandbox::probe::support().userns {
        assert!(
            std::env::var("CI").is_err(),
            "user namespaces are unavailable on this CI machine"
        );
        println!("sessions_apart: no user namespaces here: skipped");
        return;
    }
    loop_sandbox::spawner::enable(true);
    tracing::subscriber::set_global_default(Chained).unwrap();
    concurrent_checks_of_several_workspaces_never_see_each_other();
    println!("sessions_apart: ok");
}

/// Commands a session's chain took (the spawner's answer, said by the
/// runtime as a `loop_sandbox::phases` event).
static CHAINED: AtomicUsize = AtomicUsize::new(0);

/// Counts [`CHAINED`] commands; hears nothing else.
struct Chained;

struct Message(bool);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 |= format!("{value:?}").contains("a session's chain took the command");
        }
    }
}

impl tracing::Subscriber for Chained {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "loop_sandbox::phases"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut m = Message(false);
        e.record(&mut m);
        if m.0 {
            CHAINED.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A workspace whose check prints `name` and exits with `code`.
fn workspace(base: &Path, name: &str, code: u8) -> PathBuf {
    let ws = base.join(name).join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("who"), format!("{name}\n")).unwrap();
    std::fs::write(ws.join("code"), format!("{code}\n")).unwrap();
    ws
}

/// A directory removed when this is dropped, a panic's unwinding too.
struct Gone(std::path::PathBuf);

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn concurrent_checks_of_several_workspaces_never_see_each_other() {
    let base = std::env::temp_dir().join(format!("loop-apart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    // Removed however the test ends (a command that cannot start panics).
    let _gone = Gone(base.clone());
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
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Most came from chains: what is tested here was used.
    let chained = CHAINED.load(Ordering::SeqCst);
    assert!(
        chained > n * rounds / 2,
        "{chained} of {} chained",
        n * rounds
    );
    println!(
        "sessions_apart: {chained} of {} commands from chains",
        n * rounds
    );
}
