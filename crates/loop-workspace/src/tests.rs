//! The jail, adversarially.

use crate::testdir::TestDir;
use crate::*;

fn jail(d: &TestDir, extra: &[&str]) -> Jail {
    let mut rules: Vec<String> = loop_protocol::contract::DEFAULT_PROTECTED
        .iter()
        .map(|s| s.to_string())
        .collect();
    rules.extend(extra.iter().map(|s| s.to_string()));
    Jail::new(d.path(), Protected::new(&rules).unwrap()).unwrap()
}

fn rule(e: JailError) -> String {
    e.rule()
}

#[test]
fn absolute_paths_are_refused() {
    let d = TestDir::new("jail-abs");
    let j = jail(&d, &[]);
    let e = j.resolve("/etc/passwd", Intent::Read).unwrap_err();
    assert_eq!(rule(e), "jail: absolute path");
}

#[test]
fn parent_components_are_refused() {
    let d = TestDir::new("jail-dotdot");
    let j = jail(&d, &[]);
    for p in ["../x", "a/../../x", "a/b/../../../etc"] {
        let e = j.resolve(p, Intent::Write).unwrap_err();
        assert_eq!(rule(e), "jail: `..` component", "{p}");
    }
}

#[test]
fn symlinks_out_of_the_workspace_are_refused_for_read_and_write() {
    let d = TestDir::new("jail-link");
    let outside = TestDir::new("jail-outside");
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("s")).unwrap();
    let j = jail(&d, &[]);
    for (p, intent) in [
        ("out/secret", Intent::Read),
        ("out/new-file", Intent::Write),
        ("s", Intent::Read),
        ("s", Intent::Write),
    ] {
        let e = j.resolve(p, intent).unwrap_err();
        assert!(matches!(e, JailError::Escapes { .. }), "{p}: {e}");
        assert_eq!(e.rule(), "jail: symlink escape");
    }
}

#[test]
fn dangling_symlinks_are_refused() {
    let d = TestDir::new("jail-dangling");
    std::os::unix::fs::symlink("/tmp/loop-nonexistent-target", d.path().join("dangling")).unwrap();
    let j = jail(&d, &[]);
    let e = j.resolve("dangling", Intent::Write).unwrap_err();
    assert!(matches!(e, JailError::Escapes { .. }), "{e}");
}

#[test]
fn symlinks_inside_the_workspace_are_fine() {
    let d = TestDir::new("jail-inside");
    std::fs::create_dir(d.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", d.path().join("alias")).unwrap();
    let j = jail(&d, &[]);
    let (rel, full) = j.resolve("alias/new.txt", Intent::Write).unwrap();
    assert_eq!(rel.as_str(), "alias/new.txt");
    assert_eq!(full, j.root().join("real/new.txt"));
}

#[test]
fn protected_paths_cannot_be_written_but_can_be_read() {
    let d = TestDir::new("jail-protected");
    std::fs::create_dir_all(d.path().join("tests")).unwrap();
    std::fs::write(d.path().join("tests/test_a.py"), "x").unwrap();
    let j = jail(&d, &["tests/**"]);
    let cases = [
        (".git/config", "**/.git/**"),
        ("vendor/lib/.git/config", "**/.git/**"),
        ("vendor/lib/.git", "**/.git/**"),
        ("sub/.gitmodules", "**/.gitmodules"),
        (".loop/loop.db-wal", ".loop/**"),
        ("pkg/.loop/layers/x/f", "**/.loop/**"),
        ("Loopfile.yaml", "Loopfile.yaml"),
        (".env", ".env*"),
        (".env.local", ".env*"),
        ("secrets/token", "secrets/**"),
        ("server.pem", "*.pem"),
        ("deep/dir/id.key", "*.key"),
        ("tests/test_a.py", "tests/**"),
        ("tests", "tests/**"),
    ];
    for (p, r) in cases {
        let e = j.resolve(p, Intent::Write).unwrap_err();
        assert_eq!(e.rule(), format!("protected: {r}"), "{p}");
    }
    assert!(j.resolve("tests/test_a.py", Intent::Read).is_ok());
    assert!(j.resolve("src/main.py", Intent::Write).is_ok());
}

#[test]
fn a_symlink_cannot_launder_a_protected_path() {
    let d = TestDir::new("jail-launder");
    std::fs::create_dir_all(d.path().join("tests")).unwrap();
    std::fs::write(d.path().join("tests/test_a.py"), "x").unwrap();
    std::os::unix::fs::symlink("tests/test_a.py", d.path().join("innocent.py")).unwrap();
    let j = jail(&d, &["tests/**"]);
    let e = j.resolve("innocent.py", Intent::Write).unwrap_err();
    assert_eq!(e.rule(), "protected: tests/**");
}

#[test]
fn the_root_itself_cannot_be_written() {
    let d = TestDir::new("jail-root");
    let j = jail(&d, &[]);
    assert!(j.resolve(".", Intent::Write).is_err());
    assert!(j.resolve(".", Intent::Read).is_ok());
}

#[test]
fn existing_protected_paths_are_listed_for_read_only_binding() {
    let d = TestDir::new("jail-existing");
    std::fs::create_dir_all(d.path().join("tests/sub")).unwrap();
    std::fs::write(d.path().join("tests/sub/t.py"), "x").unwrap();
    std::fs::create_dir_all(d.path().join("src/keys")).unwrap();
    std::fs::write(d.path().join("src/keys/server.pem"), "x").unwrap();
    std::fs::write(d.path().join(".env"), "x").unwrap();
    std::fs::write(d.path().join("main.py"), "x").unwrap();
    let j = jail(&d, &["tests/**"]);
    let mut got: Vec<String> = j
        .protected()
        .existing(j.root())
        .iter()
        .map(|p| p.strip_prefix(j.root()).unwrap().display().to_string())
        .collect();
    got.sort();
    assert_eq!(got, vec![".env", "src/keys/server.pem", "tests"]);
}

#[test]
fn names_that_render_alike_never_share_a_manifest_root() {
    use std::os::unix::ffi::OsStrExt;
    let d = TestDir::new("lossy-names");
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join(std::ffi::OsStr::from_bytes(b"x\xff.py")), "1").unwrap();
    std::fs::write(b.join("x\u{FFFD}.py"), "1").unwrap();
    let (ma, mb) = (Manifest::of(&a).unwrap(), Manifest::of(&b).unwrap());
    assert_eq!(ma.entries[0].path, mb.entries[0].path, "rendered alike");
    assert_ne!(ma.root, mb.root, "hashed by their raw bytes");
    assert_eq!(ma.entries[0].raw_path.as_deref(), Some("78ff2e7079"));
    assert_eq!(ma.entries[0].path_bytes(), b"x\xff.py");
    assert_eq!(mb.entries[0].raw_path, None);
    // The JSON form keeps the bytes (a baseline read back hashes the same).
    let back: Manifest = serde_json::from_str(&serde_json::to_string(&ma).unwrap()).unwrap();
    assert_eq!(crate::manifest::merkle_root(&back.entries), ma.root);
}
