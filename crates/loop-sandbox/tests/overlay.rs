//! Overlay views: a command writes through an overlay; the workspace never changes.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_sandbox::{ExecRequest, overlay_available, run};

#[test]
fn writes_through_an_overlay_never_reach_the_workspace() {
    let base = std::env::temp_dir().join(format!("loop-overlay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    std::fs::write(ws.join("sub/b.txt"), "keep\n").unwrap();
    let mut req = ExecRequest::shell(
        "cat a.txt; echo changed > a.txt; echo new > c.txt; rm sub/b.txt; cat a.txt; ls -R",
        &ws,
    );
    req.overlay_scratch = Some(base.join("ov1"));
    let r = run(&req);
    let r = match r {
        Ok(r) => r,
        Err(e) => panic!("overlay run failed: {e}"),
    };
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.excerpt());
    assert!(
        r.stdout.excerpt().starts_with("original\nchanged\n"),
        "{}",
        r.stdout.excerpt()
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "original\n"
    );
    assert!(!ws.join("c.txt").exists());
    assert!(ws.join("sub/b.txt").exists());
    assert!(overlay_available());
    // A second view does not see the first one's writes.
    let mut req = ExecRequest::shell("cat a.txt; test ! -e c.txt", &ws);
    req.overlay_scratch = Some(base.join("ov2"));
    let r = run(&req).unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout.excerpt(), "original\n");
    std::fs::remove_dir_all(&base).unwrap();
}
