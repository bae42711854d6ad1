//! Golden tests of every `--json` shape: each command's output, every event
//! kind a run prints, and failures (`{"error":{kind,message,location,hint}}`
//! on stderr, with the same exit code as without `--json`). A shape is the
//! keys and the types of the values, not the values (ids and times change);
//! the goldens live in `tests/golden/json-shapes.json`. After an intended
//! change of a format: `LOOP_UPDATE_GOLDEN=1 cargo test --test json_shapes`,
//! and say so in the change.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use serde_json::{Map, Value, json};
use shared::loop_in;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The shape of a value: objects by key, arrays by the merged shape of
/// their items, the rest by type.
fn shape(v: &Value) -> Value {
    match v {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(_) => json!("number"),
        Value::String(_) => json!("string"),
        Value::Array(items) => {
            let merged = items.iter().map(shape).reduce(merge);
            json!([merged.unwrap_or(json!("empty"))])
        }
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
    }
}

/// Two shapes as one: objects by the union of keys; differing types both
/// named (`"null|string"`).
fn merge(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut x), Value::Object(y)) => {
            for (k, v) in y {
                let merged = match x.remove(&k) {
                    Some(old) => merge(old, v),
                    None => v,
                };
                x.insert(k, merged);
            }
            Value::Object(x)
        }
        (Value::Array(x), Value::Array(y)) => {
            let a = x.into_iter().next().unwrap_or(json!("empty"));
            let b = y.into_iter().next().unwrap_or(json!("empty"));
            json!([merge(a, b)])
        }
        (a, b) if a == b => a,
        (Value::String(a), _) if a == "empty" => json!("empty"),
        (a, b) => {
            let mut names: Vec<String> = [a, b]
                .iter()
                .flat_map(|v| match v {
                    Value::String(s) => s.split('|').map(str::to_string).collect(),
                    other => vec![other.to_string()],
                })
                .collect();
            names.sort();
            names.dedup();
            json!(names.join("|"))
        }
    }
}

/// One JSON value printed on stdout, whole.
fn one(out: &Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not one JSON value ({e}):\n{}",
            shared::text(out)
        )
    })
}

/// The failure printed on stderr with `--json`: one object, nothing else.
fn error_of(out: &Output, what: &str) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: stderr is not one line:\n{err}");
    let v: Value = serde_json::from_str(lines[0])
        .unwrap_or_else(|e| panic!("{what}: stderr is not JSON ({e}):\n{err}"));
    let e = &v["error"];
    for key in ["kind", "message", "location", "hint"] {
        assert!(e.get(key).is_some(), "{what}: no {key} in {v}");
    }
    assert!(out.stdout.is_empty(), "{what}: stdout holds something");
    v
}

struct Scene {
    home: PathBuf,
    project: PathBuf,
    task: String,
    receipt: PathBuf,
}

fn run(scene: &Scene, args: &[&str]) -> Output {
    loop_in(&scene.home)
        .current_dir(&scene.project)
        .args(args)
        .output()
        .unwrap()
}

fn scene() -> (Scene, Vec<Value>) {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("json-shapes");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let out = loop_in(&home)
        .args(["demo", "--json", "--dir"])
        .arg(home.join("demo"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shared::text(&out));
    // Every line of stdout is JSON: nothing else slips in.
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        assert!(
            serde_json::from_str::<Value>(l).is_ok(),
            "a line of `loop demo --json` is not JSON: {l}"
        );
    }
    let lines = shared::json_lines(&out);
    let end = lines
        .iter()
        .find(|l| l["kind"] == "receipt")
        .expect("a receipt line")
        .clone();
    let scene = Scene {
        project: home.join("demo/project"),
        task: end["task_id"].as_str().unwrap().to_string(),
        receipt: PathBuf::from(end["path"].as_str().unwrap()),
        home,
    };
    (scene, lines)
}

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/json-shapes.json")
}

#[test]
fn every_json_shape_matches_its_golden() {
    let (s, demo_lines) = scene();
    let mut shapes = Map::new();
    // Every event kind a run prints, and the lines around them.
    let mut events = Map::new();
    for l in &demo_lines {
        // Each line says what it is, the last (the verification) too.
        let kind = l["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("a line of `loop demo --json` without a kind: {l}"))
            .to_string();
        let merged = match events.remove(&kind) {
            Some(old) => merge(old, shape(l)),
            None => shape(l),
        };
        events.insert(kind, merged);
    }
    shapes.insert("demo (JSON lines, by kind)".into(), Value::Object(events));
    let id = s.task.as_str();
    let receipt = s.receipt.display().to_string();
    let contract = s.home.join("demo/task.yaml").display().to_string();
    std::fs::write(
        s.home.join("Loopfile.yaml"),
        "exec:\n  rules:\n    - {prefix: touch, decision: prompt, examples: [\"touch a\"]}\n",
    )
    .unwrap();
    let loopfile = s.home.join("Loopfile.yaml").display().to_string();
    let commands: Vec<(&str, Vec<&str>)> = vec![
        ("list (a line per task)", vec!["list", "--json"]),
        ("status", vec!["status", id, "--json"]),
        ("show", vec!["show", id, "--json"]),
        ("diff", vec!["diff", id, "--json"]),
        ("diff --stat", vec!["diff", id, "--stat", "--json"]),
        ("verify", vec!["verify", &receipt, "--json"]),
        ("replay", vec!["replay", &receipt, "--json"]),
        ("validate (contract)", vec!["validate", &contract, "--json"]),
        ("manifest", vec!["manifest", ".", "--json"]),
        ("keys", vec!["keys", "--json"]),
        ("cost", vec!["cost", "--json"]),
        ("completions", vec!["completions", "bash", "--json"]),
        ("man", vec!["man", "--json"]),
        ("exec", vec!["exec", "--json", "--", "echo", "hi"]),
        ("logs (JSON lines)", vec!["logs", id, "--json"]),
        ("validate (Loopfile)", vec!["validate", &loopfile, "--json"]),
        ("schema", vec!["schema", "contract", "--json"]),
        ("cancel (already ended)", vec!["cancel", id, "--json"]),
    ];
    for (name, args) in &commands {
        let out = run(&s, args);
        let v = if name.starts_with("list") || name.starts_with("logs") {
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                assert!(
                    serde_json::from_str::<Value>(l).is_ok(),
                    "{name}: not JSON: {l}"
                );
            }
            let lines = shared::json_lines(&out);
            assert!(!lines.is_empty(), "{name}: {}", shared::text(&out));
            json!(lines)
        } else {
            one(&out, name)
        };
        shapes.insert((*name).into(), shape(&v));
    }
    // The change set applied, then undone: each says what it did.
    for (name, args) in [
        ("apply", vec!["apply", id, "--json"]),
        ("undo", vec!["undo", id, "--json"]),
    ] {
        let out = run(&s, &args);
        assert!(out.status.success(), "{name}: {}", shared::text(&out));
        let v = one(&out, name);
        assert_eq!(v["result"], "done", "{name}: {v}");
        shapes.insert(name.into(), shape(&v));
    }
    // Forgetting an applied change set that is still in place is refused;
    // init on a fresh project; discard at the end.
    let out = run(&s, &["apply", id, "--json"]);
    assert!(out.status.success(), "{}", shared::text(&out));
    let refused = run(&s, &["--json", "undo", id, "--forget"]);
    assert_eq!(refused.status.code(), Some(2), "{}", shared::text(&refused));
    shapes.insert(
        "error: forget while applied".into(),
        shape(&error_of(&refused, "forget")),
    );
    let out = run(&s, &["undo", id, "--json"]);
    assert!(out.status.success(), "{}", shared::text(&out));
    let fresh = s.home.join("fresh");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(
        fresh.join("test_x.py"),
        "import unittest
",
    )
    .unwrap();
    let out = loop_in(&s.home)
        .args(["init", "--json", "--project"])
        .arg(&fresh)
        .output()
        .unwrap();
    shapes.insert("init".into(), shape(&one(&out, "init")));
    // Failures: the same exit code as without --json, one object on stderr.
    std::fs::write(
        s.home.join("bad.yaml"),
        "version: 1\ninstruction: x\ncriteria:\n  - id: a\n    checks: [{run: \"true\"}]\n    bogus: 1\n",
    )
    .unwrap();
    let bad = s.home.join("bad.yaml").display().to_string();
    let failures: Vec<(&str, Vec<&str>, i32)> = vec![
        ("error: a malformed contract", vec!["validate", &bad], 2),
        ("error: an unknown task", vec!["status", "t-nope"], 2),
        ("error: an unknown command", vec!["frobnicate"], 2),
        (
            "error: a bad value",
            vec![
                "run",
                "x",
                "--check",
                "true",
                "--allow-vacuous",
                "--isolation",
                "total",
            ],
            2,
        ),
        ("error: nothing to approve", vec!["approve", id], 2),
        ("error: nothing to undo", vec!["undo", id], 2),
        (
            "error: a command not found",
            vec!["exec", "--", "no-such-command-here"],
            127,
        ),
    ];
    for (name, args, code) in &failures {
        let plain = run(&s, args);
        // Global: before the command is as good as after it.
        let mut with_json = vec!["--json"];
        with_json.extend_from_slice(args);
        let out = run(&s, &with_json);
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{name}: {}",
            shared::text(&out)
        );
        assert_eq!(
            plain.status.code(),
            out.status.code(),
            "{name}: the exit code changed"
        );
        let v = error_of(&out, name);
        shapes.insert((*name).into(), shape(&v));
        if name.contains("malformed") {
            assert!(
                v["error"]["location"]
                    .as_str()
                    .unwrap()
                    .ends_with("bad.yaml:6:5"),
                "{v}"
            );
            assert_eq!(v["error"]["hint"], "allowed here: id, text, checks, guard");
            assert_eq!(v["error"]["kind"], "usage");
        }
        if name.contains("not found") {
            assert_eq!(v["error"]["kind"], "not_found", "{v}");
        }
    }
    // Machine-dependent, so keys only: doctor, audit.
    let doctor = one(&run(&s, &["doctor", "--json"]), "doctor");
    for key in [
        "user",
        "namespaces",
        "landlock",
        "seccomp",
        "project",
        "store",
        "signing_key",
    ] {
        assert!(doctor.get(key).is_some(), "doctor has no {key}: {doctor}");
    }
    let audit = one(&run(&s, &["audit", "--json"]), "audit");
    assert!(audit.is_object(), "{audit}");
    // Skills: a project's own pattern (unsigned), and a bundle signed
    // with this user's key; memory: a note a person adds, then the list.
    let pattern = s.project.join("loop-patterns/tidy");
    std::fs::create_dir_all(&pattern).unwrap();
    std::fs::write(
        pattern.join("SKILL.md"),
        "---\nname: tidy\ndescription: Keep it tidy\ncapabilities:\n  tools: [read_file, finish]\n---\nWHEN: always.\n",
    )
    .unwrap();
    let bundle = s.home.join("share/tidy");
    std::fs::create_dir_all(&bundle).unwrap();
    std::fs::copy(pattern.join("SKILL.md"), bundle.join("SKILL.md")).unwrap();
    let bundle = bundle.display().to_string();
    let out = run(&s, &["skills", "list", "--json"]);
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        assert!(
            serde_json::from_str::<Value>(l).is_ok(),
            "skills list: not JSON: {l}"
        );
    }
    shapes.insert(
        "skills list (a line per skill)".into(),
        shape(&one(&out, "skills list")),
    );
    let skill_commands: Vec<(&str, Vec<&str>)> = vec![
        ("skills show", vec!["skills", "show", "tidy", "--json"]),
        ("skills sign", vec!["skills", "sign", &bundle, "--json"]),
        (
            "memory add",
            vec!["memory", "add", "make check is the real gate", "--json"],
        ),
    ];
    for (name, args) in &skill_commands {
        let out = run(&s, args);
        shapes.insert((*name).into(), shape(&one(&out, name)));
    }
    let out = run(&s, &["memory", "list", "--json"]);
    shapes.insert(
        "memory list (a line per note)".into(),
        shape(&one(&out, "memory list")),
    );
    let out = run(&s, &["discard", id, "--json"]);
    shapes.insert("discard".into(), shape(&one(&out, "discard")));

    let got = Value::Object(shapes);
    let path = golden_path();
    if std::env::var_os("LOOP_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
        return;
    }
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (LOOP_UPDATE_GOLDEN=1 writes it)", path.display())
        }))
        .unwrap();
    for (name, shape) in got.as_object().unwrap() {
        assert_eq!(
            Some(shape),
            want.get(name),
            "the JSON shape of `{name}` changed (LOOP_UPDATE_GOLDEN=1 rewrites the goldens)"
        );
    }
    for name in want.as_object().unwrap().keys() {
        assert!(
            got.get(name).is_some(),
            "`{name}` is golden but was not produced"
        );
    }
}

/// A body that cannot be said in JSON — a directory whose name is not
/// UTF-8 — is a usage error naming why, on stderr, never an empty line on
/// stdout; the same directory under a UTF-8 name gives its line.
#[test]
fn what_json_cannot_say_is_an_error_not_an_empty_line() {
    use std::os::unix::ffi::OsStrExt;
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("json-unsayable");
    let _ = std::fs::remove_dir_all(&home);
    let bad = home.join(std::ffi::OsStr::from_bytes(b"dir-\xff"));
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("a.txt"), "a\n").unwrap();
    let out = loop_in(&home)
        .args(["manifest", "--json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "nothing half-said: {out:?}");
    let err = error_of(&out, "manifest of a non-UTF-8 directory");
    assert_eq!(err["error"]["kind"], "usage");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot be said as JSON"), "{message}");
    // The honest version: the same files under a UTF-8 name.
    let good = home.join("dir-ok");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::write(good.join("a.txt"), "a\n").unwrap();
    let out = loop_in(&home)
        .args(["manifest", "--json"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = one(&out, "manifest of a UTF-8 directory");
    assert_eq!(v["files"], 1);
    assert_eq!(v["dir"], good.display().to_string());
}

/// `loop verify --json` of a receipt that does not hold says it proves
/// nothing: `ok`, `intact` and `verified` all false, whatever its
/// statement claims; the same receipt untouched says all three true.
#[test]
fn a_receipt_that_does_not_hold_is_not_said_verified() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("json-tampered");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let out = loop_in(&home)
        .args(["demo", "--json", "--dir"])
        .arg(home.join("demo"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", shared::text(&out));
    let lines = shared::json_lines(&out);
    let end = lines.iter().find(|l| l["kind"] == "receipt").unwrap();
    let receipt = PathBuf::from(end["path"].as_str().unwrap());
    let said = |receipt: &Path| {
        let out = loop_in(&home)
            .args(["verify", "--json"])
            .arg(receipt)
            .output()
            .unwrap();
        (out.status.code(), one(&out, "verify"))
    };
    let (code, v) = said(&receipt);
    assert_eq!(code, Some(0), "{v}");
    for key in ["ok", "intact", "verified"] {
        assert_eq!(v[key], true, "{key}: {v}");
    }
    // The same receipt with one byte of its signature changed.
    let mut envelope: Value = serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let sig = envelope["signatures"][0]["sig"]
        .as_str()
        .unwrap()
        .to_string();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    envelope["signatures"][0]["sig"] = Value::String(format!("{flipped}{}", &sig[1..]));
    let tampered = receipt.with_file_name("tampered.receipt.json");
    std::fs::write(&tampered, serde_json::to_vec(&envelope).unwrap()).unwrap();
    let (code, v) = said(&tampered);
    assert_ne!(code, Some(0), "{v}");
    for key in ["ok", "intact", "verified"] {
        assert_eq!(v[key], false, "{key}: {v}");
    }
}
