//! Schemathesis (from PyPI; `scripts/schemathesis.sh` builds its venv,
//! `scripts/test.sh` passes it in LOOP_SCHEMATHESIS_VENV) against a real
//! `loop serve`: every documented operation is called with generated
//! valid and invalid data, following the links from a created task to its
//! routes, and must never answer 5xx, must answer only documented status
//! codes and content types, with bodies that conform to the schemas, reject
//! invalid data, and honour its auth (every check but
//! `positive_data_acceptance`: a schema-valid body can still ask for a task
//! the runtime rightly refuses — an empty instruction, a script outside the
//! project — and says so with a 400).
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use shared::loop_in;
use std::path::PathBuf;

#[test]
fn schemathesis_finds_nothing_wrong_with_the_api() {
    let Some(venv) = std::env::var_os("LOOP_SCHEMATHESIS_VENV") else {
        assert!(
            std::env::var_os("LOOP_REQUIRE_LOCAL_MODEL").is_none(),
            "scripts/test.sh must pass LOOP_SCHEMATHESIS_VENV"
        );
        eprintln!("skipped: LOOP_SCHEMATHESIS_VENV is not set (scripts/test.sh sets it)");
        return;
    };
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schemathesis");
    let _ = std::fs::remove_dir_all(&home);
    let project = home.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "hi\n").unwrap();
    let script = project.join("script.yaml");
    std::fs::write(
        &script,
        "turns:\n  - calls:\n      - {tool: finish, args: {summary: done}}\n",
    )
    .unwrap();
    // Tasks it creates run the script: they end at once.
    std::fs::write(
        project.join("Loopfile.yaml"),
        format!(
            "models:\n  maker:\n    spec: scripted:{}\n",
            script.display()
        ),
    )
    .unwrap();
    let out = loop_in(&home)
        .args([
            "tokens",
            "create",
            "--owner",
            "st",
            "--scope",
            "run",
            "--project",
        ])
        .arg(&project)
        .output()
        .unwrap();
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("loop_"), "{token}");
    let (server, url) = shared::serve(&home, &project, &[], &["--rate", "100000"]);
    let out = std::process::Command::new(PathBuf::from(&venv).join("bin/schemathesis"))
        .args(["run", &format!("{url}/openapi.json")])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
        ])
        .args([
            "-n",
            "15",
            "--no-color",
            "--request-timeout",
            "30",
            "--seed",
            "1",
        ])
        .env("SCHEMATHESIS_HOOKS", "")
        // Its cache goes in the test's directory, not the source tree.
        .current_dir(&home)
        .output()
        .unwrap();
    shared::stop(server);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "schemathesis found problems:\n{said}");
    // It really ran: every operation, and a stateful walk from new tasks.
    assert!(said.contains("Selected: 34/34"), "{said}");
    assert!(said.contains("Tested: 34"), "{said}");
    assert!(said.contains("Stateful"), "{said}");
}
