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

/// A share whose writes are kept between a task's commands: each command
/// writes on its own capped disk, and its writes join the kept layer only
/// while the task's kept layers stay within `limits.disk_mb`.
#[test]
fn a_kept_share_keeps_writes_within_the_disk_budget_and_never_fills_the_host() {
    use loop_sandbox::{Share, ShareAccess};
    if !overlay_available() {
        assert!(
            std::env::var("CI").is_err(),
            "overlays are unavailable on this CI machine"
        );
        eprintln!("overlayfs unavailable: skipped");
        return;
    }
    let base = std::env::temp_dir().join(format!("loop-kept-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("target")).unwrap();
    let host = base.join("env");
    std::fs::create_dir_all(host.join("old")).unwrap();
    std::fs::write(host.join("base.txt"), "from the host\n").unwrap();
    std::fs::write(host.join("old/x.txt"), "old\n").unwrap();
    let keep = base.join("layers/0");
    let share = Share {
        host: host.clone(),
        rel: "target".into(),
        access: ShareAccess::Overlay {
            keep: Some(keep.clone()),
        },
        caches: Vec::new(),
        repoint: Vec::new(),
    };
    let run_in = |cmd: &str| {
        let mut req = ExecRequest::shell(cmd, &ws);
        req.shares = vec![share.clone()];
        req.limits.disk_mb = 16;
        run(&req).unwrap()
    };
    let kept_bytes = || -> u64 {
        fn walk(p: &std::path::Path) -> u64 {
            std::fs::read_dir(p)
                .map(|d| {
                    d.flatten()
                        .map(|e| {
                            let m = std::fs::symlink_metadata(e.path()).unwrap();
                            if m.is_dir() { walk(&e.path()) } else { m.len() }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        walk(&keep)
    };
    // Honest build outputs: a file written, a host file deleted, a host
    // directory replaced by a new one.
    let r = run_in(
        "head -c 4194304 /dev/zero > target/a.bin && echo hi > target/note && rm target/base.txt && rm -rf target/old && mkdir target/old && echo new > target/old/y.txt",
    );
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.excerpt());
    assert!(r.not_kept.is_empty(), "{:?}", r.not_kept);
    // The host's directory is never written.
    assert_eq!(
        std::fs::read_to_string(host.join("base.txt")).unwrap(),
        "from the host\n"
    );
    assert!(host.join("old/x.txt").exists() && !host.join("note").exists());
    // The next command sees what the first kept, deletions included.
    let r = run_in(
        "cat target/note; test ! -e target/base.txt && echo gone; ls target/old; wc -c < target/a.bin",
    );
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.excerpt());
    assert_eq!(r.stdout.excerpt(), "hi\ngone\ny.txt\n4194304\n");
    // 14 MiB more fit on the command's disk, but with the 4 MiB kept they
    // pass the task's 16 MiB: not kept, and said so.
    let r = run_in("head -c 14680064 /dev/zero > target/big.bin && echo wrote");
    assert_eq!(r.stdout.excerpt(), "wrote\n", "{}", r.stderr.excerpt());
    assert_eq!(r.not_kept.len(), 1, "{:?}", r.not_kept);
    assert!(
        r.not_kept[0].starts_with("`target`: 14.0 MiB written there were not kept")
            && r.not_kept[0].contains("limit of 16 MiB (limits.disk_mb)"),
        "{:?}",
        r.not_kept
    );
    let r = run_in("test ! -e target/big.bin && cat target/note");
    assert_eq!(r.stdout.excerpt(), "hi\n", "{}", r.stderr.excerpt());
    // No command fills the host's disk through the share: a gigabyte is
    // refused by its own disk, and nothing of it is kept.
    let r = run_in("fallocate -l 1G target/huge.bin; echo rc=$?");
    assert!(
        !r.stdout.excerpt().contains("rc=0") && r.stderr.excerpt().contains("No space left"),
        "{} {}",
        r.stdout.excerpt(),
        r.stderr.excerpt()
    );
    assert!(kept_bytes() < 16 << 20, "{}", kept_bytes());
    let _ = std::fs::remove_dir_all(&base);
}

/// A read-only share's tool caches (`node_modules/.vite`): a command may
/// write them, never the packages beside them; the host's directory is
/// never changed, and each command starts with empty caches (nothing is
/// carried to the next command, nor to a check).
#[test]
fn a_read_only_shares_caches_are_writable_and_its_packages_are_not() {
    use loop_sandbox::{Share, ShareAccess};
    if !overlay_available() {
        assert!(
            std::env::var("CI").is_err(),
            "overlays are unavailable on this CI machine"
        );
        eprintln!("overlayfs unavailable: skipped");
        return;
    }
    let base = std::env::temp_dir().join(format!("loop-caches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join("node_modules")).unwrap();
    let host = base.join("node_modules");
    std::fs::create_dir_all(host.join("left-pad")).unwrap();
    std::fs::write(host.join("left-pad/index.js"), "module.exports = 1;\n").unwrap();
    // One cache the host already has (with a file of its own), one it lacks.
    std::fs::create_dir_all(host.join(".cache")).unwrap();
    std::fs::write(host.join(".cache/old"), "host's\n").unwrap();
    let share = Share {
        host: host.clone(),
        rel: "node_modules".into(),
        access: ShareAccess::ReadOnly,
        caches: vec![".vite".into(), ".cache".into()],
        repoint: Vec::new(),
    };
    let run_in = |cmd: &str| {
        let mut req = ExecRequest::shell(cmd, &ws);
        req.shares = vec![share.clone()];
        req.limits.disk_mb = 16;
        run(&req).unwrap()
    };
    // What vitest does after an honest run: its results in the cache.
    let r = run_in(
        "mkdir -p node_modules/.vite/vitest && echo '{}' > node_modules/.vite/vitest/results.json && echo x > node_modules/.cache/new && cat node_modules/left-pad/index.js",
    );
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.excerpt());
    assert_eq!(r.stdout.excerpt(), "module.exports = 1;\n");
    // The packages stay read-only, and so does the share's top.
    for cmd in [
        "echo 'module.exports = 2;' > node_modules/left-pad/index.js",
        "echo x > node_modules/evil.js",
        "rm -rf node_modules/left-pad",
    ] {
        let r = run_in(cmd);
        assert_ne!(r.exit_code, Some(0), "{cmd}: the package was written");
        assert!(
            r.stderr.excerpt().contains("Read-only file system"),
            "{cmd}: {}",
            r.stderr.excerpt()
        );
    }
    // The next command starts with empty caches.
    let r = run_in("test ! -e node_modules/.vite/vitest && test ! -e node_modules/.cache/new");
    assert_eq!(r.exit_code, Some(0), "{}", r.stderr.excerpt());
    // The host's directory is as it was.
    assert_eq!(
        std::fs::read_to_string(host.join("left-pad/index.js")).unwrap(),
        "module.exports = 1;\n"
    );
    assert!(!host.join(".vite").exists() && !host.join(".cache/new").exists());
    assert!(!host.join("evil.js").exists());
    std::fs::remove_dir_all(&base).unwrap();
}

/// A share's file that names the project (an editable install's `.pth`)
/// is seen naming the command's workspace; the host's file is unchanged
/// and stays read-only; a path that only starts with the same letters is
/// left alone.
#[test]
fn a_shares_file_naming_the_project_names_the_commands_workspace() {
    use loop_sandbox::{Repoint, Share, ShareAccess};
    let r = Repoint {
        rel: "x.pth".into(),
        text: "/proj/src\n/proj\n/project2/src\nimport a; a.install('/proj/lib')\n'/proj': 1\n"
            .into(),
        from: "/proj".into(),
    };
    assert_eq!(
        r.text_for("/w"),
        "/w/src\n/w\n/project2/src\nimport a; a.install('/w/lib')\n'/w': 1\n"
    );
    if !overlay_available() {
        assert!(
            std::env::var("CI").is_err(),
            "no mount namespaces on this CI machine"
        );
        return;
    }
    let base = std::env::temp_dir().join(format!("loop-repoint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("ws");
    std::fs::create_dir_all(ws.join(".venv")).unwrap();
    let venv = base.join("venv");
    std::fs::create_dir_all(venv.join("site")).unwrap();
    std::fs::write(venv.join("site/x.pth"), "/proj/src\n").unwrap();
    let share = Share {
        host: venv.clone(),
        rel: ".venv".into(),
        access: ShareAccess::ReadOnly,
        caches: Vec::new(),
        repoint: vec![Repoint {
            rel: "site/x.pth".into(),
            text: "/proj/src\n".into(),
            from: "/proj".into(),
        }],
    };
    let mut req = ExecRequest::shell("cat .venv/site/x.pth; echo /x > .venv/site/x.pth", &ws);
    req.shares = vec![share];
    let r = run(&req).unwrap();
    assert_eq!(r.stdout.excerpt(), format!("{}/src\n", ws.display()));
    assert_ne!(r.exit_code, Some(0), "the file was writable");
    assert_eq!(
        std::fs::read_to_string(venv.join("site/x.pth")).unwrap(),
        "/proj/src\n"
    );
    std::fs::remove_dir_all(&base).unwrap();
}
