//! `loop eval` on the shipped suite (`evals/`) with the scripted models:
//! every right solution solved, no wrong one accepted, every receipt
//! intact and its checks reproduced without a model; and the harness
//! itself catches a false acceptance when a case's contract is too weak
//! (a copy of a case with a criterion dropped), which `--compare` then
//! reports as a regression.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::Value;
use shared::text;
use std::path::{Path, PathBuf};

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../evals")
}

/// A copy of one shipped case in a suite of its own; the case's new path.
fn copy_case(name: &str, into: &Path) -> PathBuf {
    std::fs::create_dir_all(into).unwrap();
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(suite().join(name))
        .arg(into)
        .output()
        .unwrap();
    assert!(cp.status.success(), "{}", text(&cp));
    into.join(name)
}

fn eval(args: &[&str], suite: &Path, home: &Path) -> (Option<i32>, Value, String) {
    let out = shared::loop_in(home)
        .arg("eval")
        .arg(suite)
        .args(["--model", "scripted", "--json"])
        .args(args)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)));
    (out.status.code(), v, text(&out))
}

#[test]
fn the_shipped_suite_solves_every_right_solution_and_accepts_no_wrong_one() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("eval-suite");
    let _ = std::fs::remove_dir_all(&home);
    let (code, r, all) = eval(&["--jobs", "2"], &suite(), &home);
    assert_eq!(code, Some(0), "{all}");
    assert_eq!(r["false_acceptances"], 0, "{all}");
    assert_eq!(r["right_unsolved"], 0, "{all}");
    assert_eq!(r["wrong_solved"], 0, "{all}");
    let runs = r["runs"].as_array().unwrap();
    let cases: std::collections::BTreeSet<&str> =
        runs.iter().map(|x| x["case"].as_str().unwrap()).collect();
    assert!(cases.len() >= 12, "{cases:?}");
    // Piped, it is not silent for minutes: each run is said as it ends
    // (on stderr, the report alone on stdout).
    let said: Vec<&str> = all
        .lines()
        .filter(|l| l.starts_with("loop eval: ") && l.contains(&format!("/{} ", runs.len())))
        .collect();
    assert_eq!(said.len(), runs.len(), "{all}");
    assert!(
        said.iter().any(|l| l.contains(": solved (verified, ")),
        "{all}"
    );
    let kinds: std::collections::BTreeSet<&str> =
        runs.iter().map(|x| x["kind"].as_str().unwrap()).collect();
    let languages: std::collections::BTreeSet<&str> = runs
        .iter()
        .map(|x| x["language"].as_str().unwrap())
        .collect();
    assert!(
        kinds.len() >= 5 && languages.len() >= 4,
        "{kinds:?} {languages:?}"
    );
    for x in runs {
        let right = x["solution"].as_str().unwrap().starts_with("right");
        let want = if right { "solved" } else { "safe_failure" };
        assert_eq!(x["verdict"], want, "{x}");
        assert_eq!(x["receipt_intact"], true, "{x}");
        assert_eq!(
            x["oracle_passed"],
            if right {
                Value::Bool(true)
            } else {
                Value::Null
            }
        );
        assert!(x["steps"].as_u64().unwrap() >= 1);
        assert_eq!(x["replay_reproduced"], true, "{x}");
    }
    // Every case has a right and at least one wrong solution.
    for c in &cases {
        let of: Vec<&Value> = runs.iter().filter(|x| x["case"] == *c).collect();
        assert!(of.iter().any(|x| x["solution"] == "right"), "{c}");
        assert!(
            of.iter()
                .any(|x| x["solution"].as_str().unwrap().starts_with("wrong")),
            "{c}"
        );
    }
}

#[test]
fn a_contract_too_weak_for_a_wrong_solution_is_a_false_acceptance_and_a_regression() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("eval-weak");
    let _ = std::fs::remove_dir_all(&home);
    let weak = home.join("suite");
    let case = copy_case("py-fix-failing-test", &weak);
    // Drop the criterion that catches the hard-coded answer.
    let contract = std::fs::read_to_string(case.join("contract.yaml")).unwrap();
    let (head, tail) = contract.split_once("  - id: adds-in-general").unwrap();
    let rest = tail.split_once("protected:").unwrap().1;
    std::fs::write(
        case.join("contract.yaml"),
        format!("{head}protected:{rest}"),
    )
    .unwrap();
    std::fs::remove_file(case.join("solutions/wrong-edit-the-test.yaml")).unwrap();
    let strong_report = home.join("strong.json");
    let (code, _, all) = eval(
        &["--out", strong_report.to_str().unwrap(), "--jobs", "2"],
        &suite(),
        &home,
    );
    assert_eq!(code, Some(0), "{all}");
    let (code, r, all) = eval(
        &["--compare", strong_report.to_str().unwrap()],
        &weak,
        &home,
    );
    // Verified, and the oracle fails: exactly the hard-coded one.
    assert_eq!(code, Some(1), "{all}");
    assert_eq!(r["false_acceptances"], 1, "{all}");
    let fa: Vec<&Value> = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["verdict"] == "false_acceptance")
        .collect();
    assert_eq!(fa.len(), 1);
    assert_eq!(fa[0]["solution"], "wrong-hardcode");
    assert_eq!(fa[0]["outcome"], "verified");
    assert_eq!(fa[0]["oracle_passed"], false);
    assert!(
        fa[0]["oracle_said"]
            .as_str()
            .unwrap()
            .contains("exit Some(1)"),
        "{}",
        fa[0]
    );
}

#[test]
fn a_loopfile_given_to_every_case_is_checked_first_recorded_and_kept_out_of_the_change() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("eval-loopfile");
    let _ = std::fs::remove_dir_all(&home);
    let one = home.join("suite");
    copy_case("md-document-sections", &one);
    let refused = |loopfile: &Path| {
        let out = shared::loop_in(&home)
            .arg("eval")
            .arg(&one)
            .args(["--model", "scripted", "--loopfile"])
            .arg(loopfile)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        text(&out)
    };

    // A Loopfile that does not parse is the command's error, named, before
    // any case runs; so is one with more than the model's settings.
    let bad = home.join("bad.yaml");
    std::fs::write(&bad, "models:\n  maker: [not, a, map]\n").unwrap();
    assert!(refused(&bad).contains("bad.yaml"));
    let wider = home.join("wider.yaml");
    std::fs::write(
        &wider,
        "models:\n  maker: { spec: openai:m }\nverification:\n  test: \"true\"\n",
    )
    .unwrap();
    let said = refused(&wider);
    assert!(
        said.contains("only `models:` is taken") && said.contains("`verification`"),
        "{said}"
    );

    // A good one: judged as without it, its digest in the report, and part
    // of the starting project (committed with it), not of the change set.
    let good = home.join("good.yaml");
    let settings = "models:\n  maker:\n    spec: openai:some-model\n    temperature: 0\n";
    std::fs::write(&good, settings).unwrap();
    let out = shared::loop_in(&home)
        .arg("eval")
        .arg(&one)
        .args(["--model", "scripted", "--json", "--keep", "--loopfile"])
        .arg(&good)
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["solved"], 1, "{all}");
    assert_eq!(r["false_acceptances"], 0, "{all}");
    assert_eq!(
        r["loopfile_sha256"],
        sha256_of(settings.as_bytes()),
        "{all}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let kept = stderr
        .lines()
        .find_map(|l| l.strip_prefix("loop eval: the cases' projects are kept in "))
        .unwrap_or_else(|| panic!("{all}"));
    let right = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .position(|x| x["solution"] == "right")
        .unwrap();
    let project = std::fs::read_dir(kept)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with("-right-1")
        })
        .unwrap()
        .join("project");
    let committed = std::process::Command::new("git")
        .args(["show", "HEAD:Loopfile.yaml"])
        .current_dir(&project)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&committed.stdout), settings);
    let task = r["runs"][right]["task_id"].as_str().unwrap();
    let patch = std::fs::read_to_string(
        project
            .join(".loop/receipts")
            .join(format!("{task}.changes.patch")),
    )
    .unwrap();
    assert!(patch.contains("DEPLOY.md"), "{patch}");
    assert!(!patch.contains("Loopfile"), "{patch}");
    std::fs::remove_dir_all(kept).unwrap();

    // A case with anything named Loopfile.yaml (here a dangling link) is
    // refused before any case runs, and nothing is written through it.
    let target = home.join("written-through-the-link");
    std::os::unix::fs::symlink(
        &target,
        one.join("md-document-sections/project/Loopfile.yaml"),
    )
    .unwrap();
    assert!(refused(&good).contains("has its own Loopfile.yaml"));
    assert!(!target.exists());
}

fn sha256_of(bytes: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}
