//! `loop ci-check` on a real repository: a pull request that carries an
//! agent's change with its receipt passes when the receipt holds under a
//! key the base commit trusts, records a verified task and signs exactly
//! the pull request's diff; it fails when one byte of the diff or of the
//! receipt differs, when a path no receipt covers changes, when the
//! receipt is signed by a key the base does not trust (a key the pull
//! request itself adds counts for nothing), or when it records a task
//! that was not verified; a link among the receipts is refused by name.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loop-ci-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.email=t@e", "-c", "user.name=t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const SCRIPT: &str = "turns:\n  - calls:\n      - {tool: write_file, args: {path: b.txt, content: \"made\\n\"}}\n      - {tool: edit_file, args: {path: a.txt, old: hello, new: hi}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n";

/// A verified task's change applied on branch `pr` of `p`, with its
/// receipt's files under `.loop-receipts/`; the task's id.
fn pull_request(base: &Path, p: &Path, name: &str, checks: &[&str]) -> String {
    std::fs::write(base.join(format!("{name}.yaml")), SCRIPT).unwrap();
    let mut run = shared::loop_in(base);
    run.args(["run", "make b", "--json", "--project"]).arg(p);
    for c in checks {
        run.args(["--check", c]);
    }
    let out = run
        .arg("--model")
        .arg(format!(
            "scripted:{}",
            base.join(format!("{name}.yaml")).display()
        ))
        .output()
        .unwrap();
    let receipt = shared::json_lines(&out)
        .into_iter()
        .find(|e| e["kind"] == "receipt")
        .unwrap_or_else(|| panic!("no receipt: {}", shared::text(&out)));
    let id = receipt["task_id"].as_str().unwrap().to_string();
    git(p, &["checkout", "-q", "-B", "pr", "main"]);
    if receipt["outcome"]["kind"] == "verified" {
        let out = shared::loop_in(base)
            .args(["apply", &id, "--yes", "--project"])
            .arg(p)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", shared::text(&out));
    } else {
        // (Its change by hand: what the unverified task did.)
        std::fs::write(p.join("b.txt"), "made\n").unwrap();
        std::fs::write(p.join("a.txt"), "hi\n").unwrap();
    }
    std::fs::create_dir_all(p.join(".loop-receipts")).unwrap();
    for f in std::fs::read_dir(p.join(".loop/receipts")).unwrap() {
        let f = f.unwrap();
        let n = f.file_name().to_string_lossy().to_string();
        if n.starts_with(&id) && f.file_type().unwrap().is_file() {
            std::fs::copy(f.path(), p.join(".loop-receipts").join(&n)).unwrap();
        }
    }
    git(p, &["add", "-A"]);
    git(p, &["commit", "-qm", "the agent's change"]);
    id
}

/// Commit `p` as branch `main`, its Loopfile trusting this machine's
/// signing key (`keys/loop.pem`, as the base commit holds it).
fn trusting_main(base: &Path, p: &Path) {
    std::fs::create_dir_all(p.join("keys")).unwrap();
    let key = shared::loop_in(base)
        .args(["keys", "export"])
        .output()
        .unwrap();
    assert!(key.status.success(), "{}", shared::text(&key));
    std::fs::write(p.join("keys/loop.pem"), &key.stdout).unwrap();
    std::fs::write(
        p.join("Loopfile.yaml"),
        "receipts:\n  trust: [keys/loop.pem]\n",
    )
    .unwrap();
    shared::commit_all(p);
    git(p, &["branch", "-M", "main"]);
}

/// A project under `base` whose branch `main` holds `a.txt` and `files`,
/// and this machine's public key at `base/key.pem` (given with --pubkey).
fn main_and_key(base: &Path, files: &[(&str, &str)]) -> PathBuf {
    let p = base.join("project");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("a.txt"), "hello\n").unwrap();
    for (name, text) in files {
        std::fs::write(p.join(name), text).unwrap();
    }
    shared::commit_all(&p);
    git(&p, &["branch", "-M", "main"]);
    let key = shared::loop_in(base)
        .args(["keys", "export"])
        .output()
        .unwrap();
    std::fs::write(base.join("key.pem"), &key.stdout).unwrap();
    p
}

/// `loop ci-check --json` of `pr` against `main`, with `extra` flags.
fn ci_check(base: &Path, p: &Path, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let out = shared::loop_in(base)
        .args([
            "ci-check",
            "--json",
            "--base",
            "main",
            "--head",
            "pr",
            "--project",
        ])
        .arg(p)
        .args(extra)
        .output()
        .unwrap();
    let said = shared::text(&out);
    let v = shared::json_lines(&out).pop().unwrap_or_default();
    (out.status.code().unwrap_or(-1), v, said)
}

#[test]
fn a_pull_request_passes_only_with_a_trusted_verified_receipt_of_exactly_its_diff() {
    let base = tmpdir("pr");
    let p = base.join("project");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("a.txt"), "hello\n").unwrap();
    trusting_main(&base, &p);
    let id = pull_request(
        &base,
        &p,
        "honest",
        &["grep -q made b.txt", "grep -q hi a.txt"],
    );

    // The honest pull request passes.
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 0, "{said}");
    assert_eq!(v["ok"], true, "{v}");
    let r = &v["receipts"][0];
    assert_eq!(r["task_id"], id.as_str());
    assert_eq!(r["covers"], serde_json::json!(["a.txt", "b.txt"]));
    assert_eq!(r["verified"], true);

    // The base moved on after the branch was made: the pull request's
    // change is still measured from where it left the base.
    git(&p, &["checkout", "-q", "main"]);
    std::fs::write(p.join("later.txt"), "landed on main since\n").unwrap();
    git(&p, &["add", "later.txt"]);
    git(&p, &["commit", "-qm", "main moved on"]);
    git(&p, &["checkout", "-q", "pr"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 0, "{said}");
    assert_eq!(v["uncovered"], serde_json::json!([]), "{v}");

    // Only a receipt's own files ride along under .loop-receipts/: a
    // script there, or a receipt further down, is not covered by any.
    for (extra, said_of_it) in [
        (".loop-receipts/run.sh", "run.sh"),
        (
            ".loop-receipts/old/x.receipt.json",
            "is read only at the top",
        ),
    ] {
        std::fs::create_dir_all(p.join(extra).parent().unwrap()).unwrap();
        std::fs::write(p.join(extra), "{}\n").unwrap();
        git(&p, &["add", "-A"]);
        git(&p, &["commit", "-qm", "something beside the receipt"]);
        let (code, v, said) = ci_check(&base, &p, &[]);
        assert_eq!(code, 1, "{said}");
        assert!(v.to_string().contains(said_of_it), "{v}");
        git(&p, &["reset", "-q", "--hard", "HEAD~1"]);
    }

    // An addendum no trusted key signed rides along with nothing.
    let stray = format!(".loop-receipts/{id}.addendum-9.json");
    std::fs::write(p.join(&stray), "{\"payloadType\": \"x\"}\n").unwrap();
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "a stray addendum"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    assert_eq!(v["uncovered"], serde_json::json!([stray]), "{v}");
    git(&p, &["reset", "-q", "--hard", "HEAD~1"]);

    // A mode the receipt does not sign (the content unchanged).
    git(&p, &["update-index", "--chmod=+x", "b.txt"]);
    git(&p, &["commit", "-qm", "executable now"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    let problems = v["receipts"][0]["problems"].to_string();
    assert!(
        problems.contains("b.txt: its mode at the head is 100755, the receipt signs 100644"),
        "{problems}"
    );
    git(&p, &["reset", "-q", "--hard", "HEAD~1"]);

    // A key inside the checkout could be the pull request's own.
    let (code, _, said) = ci_check(
        &base,
        &p,
        &["--pubkey", p.join("keys/loop.pem").to_str().unwrap()],
    );
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("inside the repository's checkout"), "{said}");

    // One byte of the diff differs from what the receipt signs.
    std::fs::write(p.join("b.txt"), "made!\n").unwrap();
    git(&p, &["commit", "-qam", "and one more byte"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    let problems = v["receipts"][0]["problems"].to_string();
    assert!(
        problems.contains("b.txt: its content at the head is"),
        "{problems}"
    );
    git(&p, &["reset", "-q", "--hard", "HEAD~1"]);

    // One byte of the receipt differs.
    let receipt = p.join(format!(".loop-receipts/{id}.receipt.json"));
    let mut bytes = std::fs::read(&receipt).unwrap();
    let at = bytes.iter().position(|b| *b == b'"').unwrap() + 1;
    bytes[at] ^= 0x01;
    std::fs::write(&receipt, &bytes).unwrap();
    git(&p, &["commit", "-qam", "a touched receipt"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    assert_eq!(v["receipts"][0]["intact"], false, "{v}");
    git(&p, &["reset", "-q", "--hard", "HEAD~1"]);

    // A path no receipt covers: failed, unless accepted (and still named).
    std::fs::write(p.join("c.txt"), "by hand\n").unwrap();
    git(&p, &["add", "c.txt"]);
    git(&p, &["commit", "-qm", "a person's file"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    assert_eq!(v["uncovered"], serde_json::json!(["c.txt"]));
    let (code, v, said) = ci_check(&base, &p, &["--allow-uncovered"]);
    assert_eq!(code, 0, "{said}");
    assert_eq!(v["uncovered"], serde_json::json!(["c.txt"]));
    git(&p, &["reset", "-q", "--hard", "HEAD~1"]);

    // The pull request cannot bring the key that is to be trusted: the
    // base's Loopfile is the one read. Another key alone is no trust.
    let other = base.join("other");
    let key = shared::loop_in(&other)
        .args(["keys", "export"])
        .output()
        .unwrap();
    std::fs::write(base.join("other.pem"), &key.stdout).unwrap();
    std::fs::write(p.join("Loopfile.yaml"), "receipts:\n  trust: []\n").unwrap();
    git(&p, &["commit", "-qam", "trust nobody"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    assert!(v["uncovered"].to_string().contains("Loopfile.yaml"), "{v}");
    assert_eq!(
        v["receipts"][0]["intact"], true,
        "the base's key still verifies it: {v}"
    );
    git(&p, &["reset", "-q", "--hard", "HEAD~1"]);
    git(&p, &["checkout", "-q", "-b", "untrusted", "main"]);
    std::fs::write(p.join("Loopfile.yaml"), "").unwrap();
    git(&p, &["commit", "-qam", "no trust at the base"]);
    git(&p, &["rebase", "-q", "untrusted", "pr"]);
    let out = shared::loop_in(&base)
        .args([
            "ci-check",
            "--json",
            "--base",
            "untrusted",
            "--head",
            "pr",
            "--pubkey",
        ])
        .arg(base.join("other.pem"))
        .arg("--project")
        .arg(&p)
        .output()
        .unwrap();
    let said = shared::text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("signature"), "{said}");

    // A link among the receipts is refused by name, never read through.
    git(&p, &["checkout", "-q", "pr"]);
    std::os::unix::fs::symlink("/etc/passwd", p.join(".loop-receipts/evil.receipt.json")).unwrap();
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "a link"]);
    let out = shared::loop_in(&base)
        .args([
            "ci-check",
            "--base",
            "untrusted",
            "--head",
            "pr",
            "--pubkey",
        ])
        .arg(base.join("other.pem"))
        .arg("--project")
        .arg(&p)
        .output()
        .unwrap();
    let said = shared::text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(".loop-receipts/evil.receipt.json: not a regular file"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_receipt_of_a_task_that_was_not_verified_does_not_pass() {
    let base = tmpdir("unverified");
    let p = main_and_key(&base, &[]);
    // Its check can never pass: the task ends without verification.
    pull_request(&base, &p, "failing", &["grep -q never b.txt"]);
    let key = base.join("key.pem");
    let (code, v, said) = ci_check(&base, &p, &["--pubkey", key.to_str().unwrap()]);
    assert_eq!(code, 1, "{said}");
    assert_eq!(v["receipts"][0]["intact"], true, "{v}");
    assert_eq!(v["receipts"][0]["verified"], false, "{v}");
    assert!(
        v["receipts"][0]["problems"]
            .to_string()
            .contains("not verified"),
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn replayed_checks_must_pass_again_on_the_pull_requests_tree() {
    let base = tmpdir("replay");
    let p = main_and_key(&base, &[("README.md", "the project\n")]);
    pull_request(
        &base,
        &p,
        "replayed",
        &["grep -q made b.txt", "test -f README.md"],
    );
    let key = base.join("key.pem");
    let key = key.to_str().unwrap();
    // Honest: the checks pass again on the pull request's tree.
    let (code, v, said) = ci_check(&base, &p, &["--pubkey", key, "--replay"]);
    assert_eq!(code, 0, "{said}");
    assert_eq!(v["receipts"][0]["replayed"], true, "{v}");
    // A change beside the agent's (allowed as uncovered) that breaks what
    // the receipt's checks need: its diff still matches, its replay fails.
    git(&p, &["rm", "-q", "README.md"]);
    git(&p, &["commit", "-qm", "drop the readme"]);
    let (code, v, said) = ci_check(
        &base,
        &p,
        &["--pubkey", key, "--allow-uncovered", "--replay"],
    );
    assert_eq!(code, 1, "{said}");
    assert_eq!(v["receipts"][0]["replayed"], false, "{v}");
    assert!(
        v["receipts"][0]["problems"]
            .to_string()
            .contains("replayed on the pull request's tree"),
        "{v}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A delegated task's change comes with its receipt tree: the parent's
/// receipt, and its child's beside it. The child's receipt is checked as
/// the parent's tree (its change is part of the parent's, merged), not on
/// its own, and its files are the parent's; one byte changed in the
/// child's receipt fails the pull request naming the child.
#[test]
fn a_delegated_tasks_receipt_tree_passes_as_one() {
    let base = tmpdir("tree");
    let p = base.join("project");
    std::fs::create_dir_all(p.join("pkg")).unwrap();
    std::fs::write(p.join("pkg/README"), "pkg\n").unwrap();
    trusting_main(&base, &p);
    let contract = "instruction: Make pkg.\ncriteria:\n  - id: made\n    text: pkg/b.txt is made\n    checks:\n      - file_contains: pkg/b.txt\n        text: made\nlimits: { max_steps: 10, max_children: 1, max_depth: 1 }\n";
    let script = "turns:\n  - calls:\n      - tool: delegate\n        args:\n          instruction: Write pkg/b.txt\n          criteria:\n            - id: b\n              text: b is made\n              checks:\n                - file_contains: pkg/b.txt\n                  text: made\n          paths: [pkg]\n          budget: { max_steps: 4, max_tokens: 60000, timeout_secs: 300 }\n  - calls:\n      - {tool: finish, args: {summary: done}}\nchildren:\n  - - calls:\n        - {tool: write_file, args: {path: pkg/b.txt, content: \"made\\n\"}}\n    - calls:\n        - {tool: finish, args: {summary: b}}\n";
    let run = shared::run_scripted(&base, &p, "tree", (contract, script));
    assert_eq!(run.outcome(), "verified", "{}", shared::text(&run.out));
    let id = run.id().to_string();
    git(&p, &["checkout", "-q", "-B", "pr", "main"]);
    let out = shared::loop_in(&base)
        .args(["apply", &id, "--yes", "--project"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shared::text(&out));
    // Every file of the tree: the parent's and its child's.
    std::fs::create_dir_all(p.join(".loop-receipts")).unwrap();
    let mut child = None;
    for f in std::fs::read_dir(p.join(".loop/receipts")).unwrap() {
        let f = f.unwrap();
        let n = f.file_name().to_string_lossy().to_string();
        if !f.file_type().unwrap().is_file() || n.contains(".addendum-") {
            continue;
        }
        if let Some(t) = n.strip_suffix(".receipt.json").filter(|t| *t != id) {
            child = Some(t.to_string());
        }
        std::fs::copy(f.path(), p.join(".loop-receipts").join(&n)).unwrap();
    }
    let child = child.expect("the child's receipt");
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "the agent's change, delegated"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 0, "{said}");
    let receipts = v["receipts"].as_array().unwrap();
    assert_eq!(receipts.len(), 1, "{v}");
    assert_eq!(receipts[0]["task_id"], id.as_str());
    assert_eq!(receipts[0]["children"], serde_json::json!([child]));
    assert!(v["uncovered"].as_array().unwrap().is_empty(), "{v}");
    // The child's receipt alone, its parent's left out: it counts for
    // nothing (its contract is the parent's model's, confirmed by no
    // person), though it holds and matches the change.
    let aside = base.join("parent-aside");
    std::fs::create_dir_all(&aside).unwrap();
    let theirs = |at: &Path| -> Vec<String> {
        std::fs::read_dir(at)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with(&format!("{id}.")))
            .collect()
    };
    for n in theirs(&p.join(".loop-receipts")) {
        std::fs::rename(p.join(".loop-receipts").join(&n), aside.join(&n)).unwrap();
    }
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "the child's receipt alone"]);
    let (code, _, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("counts only with its parent's"), "{said}");
    for n in theirs(&aside) {
        std::fs::rename(aside.join(&n), p.join(".loop-receipts").join(&n)).unwrap();
    }
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-qm", "the parent's receipt back"]);
    // One byte of the child's receipt: the tree no longer holds.
    let path = p.join(format!(".loop-receipts/{child}.receipt.json"));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    git(&p, &["commit", "-qam", "a byte of the child's receipt"]);
    let (code, v, said) = ci_check(&base, &p, &[]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains(&format!("child {child}")), "{said}\n{v}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A receipt of a task that began from a commit the pull request's history
/// lacks (its base rewritten, the branch rebased onto it) still passes
/// when its change is exactly the diff, and says where its task began:
/// its checks passed on that tree, not this one. A task that began in the
/// history says nothing of it.
#[test]
fn a_receipt_whose_task_began_outside_the_pull_requests_history_says_so() {
    let base = tmpdir("elsewhere");
    let p = main_and_key(&base, &[]);
    let key = base.join("key.pem");
    let key = key.to_str().unwrap();
    pull_request(&base, &p, "elsewhere", &["grep -q made b.txt"]);
    let (code, v, said) = ci_check(&base, &p, &["--pubkey", key]);
    assert_eq!(code, 0, "{said}");
    assert!(v["receipts"][0].get("began_elsewhere").is_none(), "{v}");
    // main rewritten (the same tree, another commit), the branch rebased.
    let old = git(&p, &["rev-parse", "main"]).trim().to_string();
    git(&p, &["checkout", "-q", "main"]);
    git(&p, &["commit", "-q", "--amend", "-m", "rewritten"]);
    git(&p, &["rebase", "-q", "--onto", "main", &old, "pr"]);
    let (code, v, said) = ci_check(&base, &p, &["--pubkey", key]);
    assert_eq!(code, 0, "{said}");
    assert_eq!(v["receipts"][0]["began_elsewhere"], old.as_str(), "{v}");
    let out = shared::loop_in(&base)
        .args([
            "ci-check",
            "--base",
            "main",
            "--head",
            "pr",
            "--pubkey",
            key,
            "--project",
        ])
        .arg(&p)
        .output()
        .unwrap();
    let said = shared::text(&out);
    assert!(
        said.contains(&format!(
            "note: its task began at commit {}, which is not in this pull request's history",
            &old[..12]
        )),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
