//! Skill bundles through the `loop` binary: signed by a team's key,
//! verified and installed into a project that trusts it, used by a task
//! whose authority it can only narrow (its paths, its tools, its hosts),
//! and recorded in the receipt; one byte changed, an unlisted signer, or
//! a link in the bundle is refused by name. A project's own pattern stays
//! usable unsigned, marked as such.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmpdir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("loop-skills-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// `loop` as the person whose state (and signing key) is `who`.
fn loop_as(base: &Path, who: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loop"));
    c.env("LOOP_STATE_DIR", base.join(who))
        .stdin(std::process::Stdio::null());
    c
}

fn text(out: &Output) -> String {
    shared::text(out)
}

/// A bundle `notes-keeper` that asks for the `notes/` folder, two tools,
/// a host, and an exec rule that would widen (dropped).
fn bundle(base: &Path) -> PathBuf {
    let dir = base.join("share/notes-keeper");
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: notes-keeper\ndescription: Keep the notes folder tidy\ncapabilities:\n  tools: [write_file, browser, finish]\n  writable: [notes, secrets]\n  network: [docs.example.test]\n  exec:\n    - {prefix: rm, decision: allow}\n---\nWHEN: notes need writing. READ: resources/style.md.\n",
    )
    .unwrap();
    std::fs::write(dir.join("resources/style.md"), "one line per fact\n").unwrap();
    std::fs::write(dir.join("resources/tidy.sh"), "#!/bin/sh\nsort -u \"$1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("resources/tidy.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    dir
}

/// A project whose Loopfile trusts the team's key.
fn project(base: &Path) -> PathBuf {
    let p = base.join("project");
    std::fs::create_dir_all(p.join("notes")).unwrap();
    std::fs::create_dir_all(p.join("keys")).unwrap();
    std::fs::write(p.join("README.md"), "readme\n").unwrap();
    std::fs::write(p.join("notes/.keep"), "").unwrap();
    let keys = loop_as(base, "team")
        .args(["keys", "--json"])
        .output()
        .unwrap();
    let pem: serde_json::Value = serde_json::from_slice(&keys.stdout).unwrap();
    std::fs::write(p.join("keys/team.pem"), pem["pem"].as_str().unwrap()).unwrap();
    std::fs::write(
        p.join("Loopfile.yaml"),
        "skills:\n  trust: [keys/team.pem]\n",
    )
    .unwrap();
    shared::commit_all(&p);
    p
}

/// `loop skills ACTION DIR` as `who`, for `project` when given.
fn skills(base: &Path, who: &str, action: &str, dir: &Path, project: Option<&Path>) -> Output {
    let mut c = loop_as(base, who);
    c.args(["skills", action]).arg(dir);
    if let Some(p) = project {
        c.arg("--project").arg(p);
    }
    c.output().unwrap()
}

fn keyid(base: &Path, who: &str) -> String {
    let keys = loop_as(base, who)
        .args(["keys", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&keys.stdout).unwrap();
    v["keyid"].as_str().unwrap().to_string()
}

#[test]
fn a_signed_skill_is_installed_used_narrowed_and_recorded() {
    let base = tmpdir("use");
    let dir = bundle(&base);
    let project = project(&base);
    let signed = skills(&base, "team", "sign", &dir, None);
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    // Verified against the project's trusted keys, then installed.
    let v = skills(&base, "state", "verify", &dir, Some(&project));
    assert_eq!(v.status.code(), Some(0), "{}", text(&v));
    let team = keyid(&base, "team");
    assert!(
        text(&v).contains(&format!("signed by {team}")),
        "{}",
        text(&v)
    );
    let i = skills(&base, "state", "install", &dir, Some(&project));
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    assert!(
        project
            .join("loop-skills/notes-keeper/SKILL.sig.json")
            .is_file()
    );
    // Installed as signed: its script still executable, its text not.
    use std::os::unix::fs::PermissionsExt;
    let mode = |rel: &str| {
        std::fs::metadata(project.join("loop-skills/notes-keeper").join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o111
    };
    assert_ne!(mode("resources/tidy.sh"), 0);
    assert_eq!(mode("resources/style.md"), 0);
    let listed = loop_as(&base, "state")
        .args(["skills", "list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let l: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(l["name"], "notes-keeper");
    assert_eq!(l["usable"], true);
    assert_eq!(l["state"], format!("signed by {team}"));
    // A task uses it: a write outside its folder and a tool it does not
    // name are refused; the write inside lands and the task is verified.
    let script = "turns:\n  - calls:\n      - {tool: write_file, args: {path: README.md, content: \"changed\\n\"}}\n      - {tool: run_command, args: {command: \"echo hi\"}}\n      - {tool: write_file, args: {path: notes/today.md, content: \"a fact\\n\"}}\n  - calls:\n      - {tool: finish, args: {summary: noted}}\n";
    std::fs::write(base.join("script.yaml"), script).unwrap();
    let run = loop_as(&base, "state")
        .args([
            "run",
            "write today's note",
            "--check",
            "grep -q fact notes/today.md",
            "--skill",
            "notes-keeper",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let lines = shared::json_lines(&run);
    let receipt = lines.iter().find(|e| e["kind"] == "receipt").unwrap();
    let statement = shared::payload_of(Path::new(receipt["path"].as_str().unwrap()));
    let p = &statement["predicate"];
    assert_eq!(p["outcome"]["kind"], "verified");
    let s = &p["skills"][0];
    assert_eq!(s["name"], "notes-keeper");
    assert_eq!(s["signer"], team.as_str());
    assert!(s["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(s["capabilities"]["writable"], serde_json::json!(["notes"]));
    // A tool, a path and a host it asked for that the task lacks: not in
    // force, each listed.
    assert_eq!(
        s["capabilities"]["tools"],
        serde_json::json!(["write_file", "finish"])
    );
    assert_eq!(s["capabilities"]["writable"], serde_json::json!(["notes"]));
    assert_eq!(s["capabilities"]["network"], serde_json::json!([]));
    assert_eq!(
        s["dropped"],
        serde_json::json!([
            "exec rule `rm: allow`: a skill cannot widen the task's exec policy",
            "tool `browser`: the task is not offered it",
            "writable path `secrets`: protected in this task",
            "network host `docs.example.test`: not in the task's network allow-list"
        ])
    );
    let ledger = std::fs::read_to_string(
        Path::new(receipt["path"].as_str().unwrap())
            .with_file_name(format!("{}.ledger.jsonl", p["task_id"].as_str().unwrap())),
    )
    .unwrap();
    assert!(
        ledger.contains("skill notes-keeper: outside the skill's paths"),
        "{ledger}"
    );
    assert!(
        ledger.contains("does not name the tool `run_command`"),
        "{ledger}"
    );
    assert!(
        ledger.contains(&format!(
            "SKILL.md of the notes-keeper skill (signed by {team})"
        )),
        "{ledger}"
    );
    // Its resources are given as verified, each with its digest.
    let first: serde_json::Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let given = first["payload"]["guidance"].as_array().unwrap();
    let style = given
        .iter()
        .find(|g| g["path"] == "SKILL.md of the notes-keeper skill: resources/style.md")
        .unwrap_or_else(|| panic!("{given:?}"));
    assert_eq!(
        style["sha256"],
        loop_protocol::hash::sha256_hex(b"one line per fact\n")
    );
    // One byte changed in the installed copy: refused, naming the file.
    std::fs::write(
        project.join("loop-skills/notes-keeper/resources/style.md"),
        "one line per fact!\n",
    )
    .unwrap();
    let again = loop_as(&base, "state")
        .args([
            "run",
            "write today's note",
            "--check",
            "grep -q fact notes/today.md",
            "--skill",
            "notes-keeper",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        text(&again).contains("resources/style.md changed since it was signed"),
        "{}",
        text(&again)
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn an_unlisted_signer_or_a_link_is_refused_and_a_projects_pattern_is_usable_unsigned() {
    let base = tmpdir("refuse");
    let dir = bundle(&base);
    let project = project(&base);
    // Signed by someone the project does not trust.
    let signed = skills(&base, "stranger", "sign", &dir, None);
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    let stranger = keyid(&base, "stranger");
    let i = skills(&base, "state", "install", &dir, Some(&project));
    assert_eq!(i.status.code(), Some(2), "{}", text(&i));
    assert!(
        text(&i).contains(&format!(
            "signed by {stranger}, not a key the Loopfile's `skills.trust` lists"
        )),
        "{}",
        text(&i)
    );
    assert!(!project.join("loop-skills/notes-keeper").exists());
    // A link in a bundle: refused by name, never read through.
    std::fs::write(base.join("secret"), "host secret\n").unwrap();
    std::os::unix::fs::symlink(base.join("secret"), dir.join("resources/leak.md")).unwrap();
    let v = skills(&base, "team", "sign", &dir, None);
    assert_ne!(v.status.code(), Some(0));
    assert!(
        text(&v).contains("resources/leak.md is a link"),
        "{}",
        text(&v)
    );
    // The project's own pattern, unsigned: usable, marked as such.
    let pat = project.join("loop-patterns/tidy");
    std::fs::create_dir_all(&pat).unwrap();
    std::fs::write(pat.join("SKILL.md"), "WHEN: tidy up.\n").unwrap();
    // Its contract template runs when no instruction is given.
    std::fs::write(
        pat.join("contract.yaml"),
        "instruction: tidy up\ncriteria:\n  - {id: t, text: tidied, checks: [{file_contains: notes/t.md, text: tidy}]}\n",
    )
    .unwrap();
    std::fs::write(
        base.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: notes/t.md, content: \"tidy\\n\"}}\n  - calls:\n      - {tool: finish, args: {summary: tidy}}\n",
    )
    .unwrap();
    let run = loop_as(&base, "state")
        .args(["run", "--skill", "tidy", "--json", "--model"])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let lines = shared::json_lines(&run);
    let receipt = lines.iter().find(|e| e["kind"] == "receipt").unwrap();
    let statement = shared::payload_of(Path::new(receipt["path"].as_str().unwrap()));
    assert_eq!(statement["predicate"]["contract"]["instruction"], "tidy up");
    assert_eq!(statement["predicate"]["outcome"]["kind"], "verified");
    let s = &statement["predicate"]["skills"][0];
    assert_eq!(s["name"], "tidy");
    assert!(s.get("signer").is_none(), "{s}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A skill shared as a git repository installs what its HEAD commit holds:
/// from a working tree (an uncommitted edit is not what is installed) and
/// from a bare clone; a commit whose bundle no longer matches its
/// signature is refused naming the file.
#[test]
fn a_skill_installs_from_a_git_repository_as_committed() {
    let base = tmpdir("git");
    let dir = bundle(&base);
    let project = project(&base);
    // The repository asks git to run a command for every file it writes
    // out (a smudge filter in its own config): installing runs nothing of
    // the repository's.
    let pwned = base.join("pwned");
    std::fs::write(dir.join(".gitattributes"), "* filter=x\n").unwrap();
    let signed = skills(&base, "team", "sign", &dir, None);
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    shared::commit_all(&dir);
    let configured = Command::new("git")
        .args(["config", "filter.x.smudge"])
        .arg(format!("touch {}; cat", pwned.display()))
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(configured.success());
    // Edited after the commit, not committed: not what is installed.
    std::fs::write(dir.join("resources/style.md"), "anything goes\n").unwrap();
    let i = skills(&base, "state", "install", &dir, Some(&project));
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    let installed = project.join("loop-skills/notes-keeper");
    assert_eq!(
        std::fs::read_to_string(installed.join("resources/style.md")).unwrap(),
        "one line per fact\n"
    );
    assert!(!installed.join(".git").exists());
    assert!(!pwned.exists(), "the repository's filter ran");
    // A bare clone, installed as the user's own.
    let bare = base.join("notes-keeper.git");
    let cloned = Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&dir)
        .arg(&bare)
        .status()
        .unwrap();
    assert!(cloned.success());
    let mut c = loop_as(&base, "state");
    let u = c
        .args(["skills", "install", "--user"])
        .arg(&bare)
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(u.status.code(), Some(0), "{}", text(&u));
    assert!(
        base.join("state/skills/notes-keeper/SKILL.sig.json")
            .is_file()
    );
    // The edit committed: the bundle no longer matches its signature.
    for args in [
        &["add", "-A"][..],
        &[
            "-c",
            "user.email=t@e",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "edit",
        ],
    ] {
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(&dir)
                .status()
                .unwrap()
                .success()
        );
    }
    let again = skills(&base, "state", "install", &dir, Some(&project));
    assert_ne!(again.status.code(), Some(0));
    assert!(
        text(&again).contains("resources/style.md changed since it was signed"),
        "{}",
        text(&again)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// Rollback protection: once this machine took a bundle signed at some
/// time, an older signed copy of it is refused by name, whether it is
/// installed again or put back in the project (a revert, a hostile
/// commit), until a person accepts it with `--allow-older`. A newer one,
/// or the same one again, is taken as before.
#[test]
fn an_older_signed_bundle_put_back_is_refused_until_accepted() {
    let base = tmpdir("rollback");
    let dir = bundle(&base);
    let project = project(&base);
    let signed = skills(&base, "team", "sign", &dir, None);
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    let old = base.join("old/notes-keeper");
    std::fs::create_dir_all(base.join("old")).unwrap();
    copy_dir(&dir, &old);
    // A later release: a changed resource, signed again (later).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(
        dir.join("resources/style.md"),
        "one line per fact, sorted\n",
    )
    .unwrap();
    let signed = skills(&base, "team", "sign", &dir, None);
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    let new = base.join("new/notes-keeper");
    std::fs::create_dir_all(base.join("new")).unwrap();
    copy_dir(&dir, &new);
    let install = |from: &Path, extra: &[&str]| {
        loop_as(&base, "state")
            .args(["skills", "install"])
            .arg(from)
            .args(extra)
            .arg("--project")
            .arg(&project)
            .output()
            .unwrap()
    };
    let remove = || {
        let out = loop_as(&base, "state")
            .args(["skills", "remove", "notes-keeper", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    };
    // The old one first (nothing newer seen yet): taken; then the new one.
    let i = install(&old, &[]);
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    remove();
    let i = install(&new, &[]);
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    // Put back by hand in the project (as a revert would): refused by
    // name where it is listed and where a task would use it.
    let installed = project.join("loop-skills/notes-keeper");
    std::fs::remove_dir_all(&installed).unwrap();
    copy_dir(&old, &installed);
    let list = loop_as(&base, "state")
        .args(["skills", "list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let said = text(&list);
    assert!(said.contains("an older bundle put back"), "{said}");
    let run = loop_as(&base, "state")
        .args([
            "run",
            "tidy the notes",
            "--check",
            "true",
            "--skill",
            "notes-keeper",
            "--model",
            "scripted:none.yaml",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    assert_ne!(run.status.code(), Some(0), "{}", text(&run));
    assert!(
        text(&run).contains("before the copy of `notes-keeper` this machine already took"),
        "{}",
        text(&run)
    );
    // Installed again: refused the same way; accepted only when asked.
    std::fs::remove_dir_all(&installed).unwrap();
    let i = install(&old, &[]);
    assert_ne!(i.status.code(), Some(0), "{}", text(&i));
    assert!(text(&i).contains("--allow-older"), "{}", text(&i));
    assert!(!installed.exists());
    let i = install(&old, &["--allow-older"]);
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    // Accepted, it is usable; the newer one is taken again as newer.
    let v = loop_as(&base, "state")
        .args(["skills", "list", "--json", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        !text(&v).contains("an older bundle put back"),
        "{}",
        text(&v)
    );
    remove();
    let i = install(&new, &[]);
    assert_eq!(i.status.code(), Some(0), "{}", text(&i));
    // The floor rose again with it: the old copy is refused once more.
    remove();
    let i = install(&old, &[]);
    assert_ne!(i.status.code(), Some(0), "{}", text(&i));
    assert!(text(&i).contains("--allow-older"), "{}", text(&i));
    let _ = std::fs::remove_dir_all(&base);
}

/// Copy a bundle's folder (files and their modes).
fn copy_dir(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// A skill's resources share the skills' prompt budget: the record says
/// what the model was shown — a resource the budget cuts with how many
/// bytes were shown, one it leaves out not at all — never a file given
/// whole that was not.
#[test]
fn the_record_says_how_much_of_a_skills_resources_the_model_was_shown() {
    let base = tmpdir("budget");
    let project = base.join("project");
    let pat = project.join("loop-patterns/big");
    std::fs::create_dir_all(pat.join("resources")).unwrap();
    std::fs::write(pat.join("SKILL.md"), "WHEN: big things.\n").unwrap();
    std::fs::write(pat.join("resources/a.md"), "a".repeat(9000)).unwrap();
    std::fs::write(pat.join("resources/b.md"), "b".repeat(100)).unwrap();
    std::fs::write(project.join("README.md"), "readme\n").unwrap();
    shared::commit_all(&project);
    std::fs::write(
        base.join("script.yaml"),
        "turns:\n  - calls:\n      - {tool: write_file, args: {path: done.txt, content: \"done\\n\"}}\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    let run = loop_as(&base, "state")
        .args([
            "run",
            "write done.txt saying done",
            "--check",
            "grep -q done done.txt",
            "--skill",
            "big",
            "--json",
            "--model",
        ])
        .arg(format!("scripted:{}", base.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let lines = shared::json_lines(&run);
    let receipt = lines.iter().find(|e| e["kind"] == "receipt").unwrap();
    let ledger = std::fs::read_to_string(
        Path::new(receipt["path"].as_str().unwrap())
            .with_extension("")
            .with_extension("ledger.jsonl"),
    )
    .unwrap();
    let first: serde_json::Value = serde_json::from_str(ledger.lines().next().unwrap()).unwrap();
    let given = first["payload"]["guidance"].as_array().unwrap();
    let named = |p: &str| given.iter().find(|g| g["path"] == p).cloned();
    let skill = named("SKILL.md of the big skill (unsigned, project-local)")
        .unwrap_or_else(|| panic!("{given:?}"));
    assert!(skill.get("shown_bytes").is_none(), "{skill}");
    let a =
        named("SKILL.md of the big skill: resources/a.md").unwrap_or_else(|| panic!("{given:?}"));
    assert_eq!(
        a["shown_bytes"].as_u64(),
        Some((8 * 1024 - "WHEN: big things.\n".len()) as u64),
        "{a}"
    );
    assert!(
        named("SKILL.md of the big skill: resources/b.md").is_none(),
        "{given:?}"
    );
    // And what the person is told says the same.
    let said = text(&run);
    assert!(
        said.contains("resources/b.md (100 bytes) is not given to the model"),
        "{said}"
    );
    assert!(
        said.contains("resources/a.md is given to the model cut to 8174 of its 9000 bytes"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
