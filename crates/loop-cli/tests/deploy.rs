//! The deployment files (`deploy/compose.yaml`, `deploy/kubernetes/*.yaml`)
//! are checked by the tools their formats have: the Compose
//! Specification's schema (check-jsonschema's bundled copy) and the
//! Kubernetes API's schemas (kubernetes-validate, strict), both from PyPI
//! in the venv `scripts/deploy-venv.sh` builds (`LOOP_DEPLOY_VENV`). A
//! broken copy of each is refused, so the check can fail; and every `loop`
//! command the files run uses only flags this build has.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod shared;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn venv() -> Option<PathBuf> {
    match std::env::var("LOOP_DEPLOY_VENV") {
        Ok(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => {
            assert!(
                std::env::var("LOOP_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "LOOP_REQUIRE_SERVICES=1 but LOOP_DEPLOY_VENV is not set (scripts/deploy-venv.sh prints it)"
            );
            eprintln!("LOOP_DEPLOY_VENV not set: skipped");
            None
        }
    }
}

fn kube_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn compose(venv: &Path, file: &Path) -> std::process::Output {
    Command::new(venv.join("bin/check-jsonschema"))
        .args(["--builtin-schema", "vendor.compose-spec"])
        .arg(file)
        .output()
        .unwrap()
}

fn kube(venv: &Path, files: &[PathBuf]) -> std::process::Output {
    Command::new(venv.join("bin/kubernetes-validate"))
        .arg("--strict")
        .args(files)
        .output()
        .unwrap()
}

#[test]
fn the_compose_file_and_the_kubernetes_manifests_validate_and_broken_copies_do_not() {
    let Some(venv) = venv() else {
        return;
    };
    let compose_file = root().join("deploy/compose.yaml");
    let out = compose(&venv, &compose_file);
    assert!(out.status.success(), "{}", shared::text(&out));
    let files = kube_files();
    assert!(files.len() >= 5, "{files:?}");
    let out = kube(&venv, &files);
    assert!(out.status.success(), "{}", shared::text(&out));
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    for kind in [
        "deployment/loop-server",
        "deployment/loop-worker",
        "statefulset/loop-postgres",
        "statefulset/loop-redis",
    ] {
        assert!(
            text.contains(&format!("passed for resource {kind}")),
            "{text}"
        );
    }

    // Broken copies are refused: the checks can fail.
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("deploy-broken");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let bad_compose = tmp.join("compose.yaml");
    std::fs::write(
        &bad_compose,
        std::fs::read_to_string(&compose_file)
            .unwrap()
            .replace("stop_grace_period:", "stop_grace_periods:"),
    )
    .unwrap();
    let out = compose(&venv, &bad_compose);
    assert!(!out.status.success(), "{}", shared::text(&out));
    let bad_kube = tmp.join("worker.yaml");
    std::fs::write(
        &bad_kube,
        std::fs::read_to_string(root().join("deploy/kubernetes/worker.yaml"))
            .unwrap()
            .replace("replicas: 2", "replicas: \"two\""),
    )
    .unwrap();
    let out = kube(&venv, &[bad_kube]);
    assert!(!out.status.success(), "{}", shared::text(&out));
}

/// Every `loop SUBCOMMAND --flag` in the deployment files names a flag
/// `loop SUBCOMMAND --help` lists.
#[test]
fn every_loop_command_in_the_deployment_files_uses_flags_this_build_has() {
    let mut files = kube_files();
    files.push(root().join("deploy/compose.yaml"));
    let mut seen = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let Some(start) = line.find("[\"loop\", ") else {
                continue;
            };
            let list = &line[start..line.rfind(']').unwrap() + 1];
            let args: Vec<String> = serde_json::from_str(list).unwrap();
            let sub = &args[1];
            let help = Command::new(env!("CARGO_BIN_EXE_loop"))
                .args([sub.as_str(), "--help"])
                .output()
                .unwrap();
            assert!(help.status.success(), "{}: {sub}", f.display());
            let help = String::from_utf8_lossy(&help.stdout);
            for flag in args.iter().filter(|a| a.starts_with("--")) {
                assert!(
                    help.contains(flag.as_str()),
                    "{}: `loop {sub}` has no {flag}",
                    f.display()
                );
            }
            seen += 1;
        }
    }
    assert!(seen >= 4, "{seen} loop commands found");
}
