//! A host tree a request adds to the view (`read_only_trees`: the
//! interpreter a shared venv links to) is readable whole and writable
//! nowhere, whether the command's root binds it or shows it through an
//! overlay (where Landlock needs its rule again, on the overlay's inodes:
//! once missing, such a tree was unreadable).
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use loop_sandbox::{ExecRequest, run};
use std::path::PathBuf;

#[test]
fn a_tree_added_to_the_view_is_read_and_never_written() {
    let leaf = format!("loop-trees-{}", std::process::id());
    // Apart from the workspace's parent: what lies beside a workspace is
    // hidden from its commands.
    let tree = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&leaf);
    let ws = std::env::temp_dir().join(&leaf);
    for d in [&tree, &ws] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::create_dir_all(tree.join("lib/deep")).unwrap();
    std::fs::write(tree.join("lib/deep/data.txt"), "kept\n").unwrap();
    let mut req = ExecRequest::shell(
        format!(
            "cat {t}/lib/deep/data.txt && ls {t}/lib && if (echo x > {t}/lib/new.txt) 2>/dev/null; then echo written; else echo refused; fi",
            t = tree.display()
        ),
        &ws,
    );
    req.read_only_trees = vec![tree.clone()];
    let r = run(&req).unwrap();
    assert_eq!(
        r.stdout.excerpt(),
        "kept\ndeep\nrefused\n",
        "{}",
        r.stderr.excerpt()
    );
    assert!(!tree.join("lib/new.txt").exists());
    for d in [&tree, &ws] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
