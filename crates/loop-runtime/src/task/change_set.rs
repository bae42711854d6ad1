//! A finished run's change set: what the task workspace holds against its
//! baseline (each file's start content taken from the base commit, or
//! from the project when there is no git), and the receipt's record of it.

use loop_receipt::ChangeSetRecord;
use loop_workspace::{ChangeSet, Manifest, TaskWorkspace};
use std::path::Path;
use std::process::Command;

/// The change set of a finished run.
pub fn compute(
    project: &Path,
    ws: &TaskWorkspace,
    baseline: &Manifest,
    last: &Manifest,
) -> ChangeSet {
    let base = ws.base_commit().map(str::to_string);
    let before = |path: &str, sha: &str| -> Option<Vec<u8>> {
        match &base {
            Some(commit) => Command::new("git")
                .arg("-C")
                .arg(project)
                .args(["show", &format!("{commit}:{path}")])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| o.stdout),
            // Without git, the project still holds the start content if its
            // hash matches (a link is shown as its target, never followed).
            None => {
                let tree = loop_workspace::Tree::open(project).ok()?;
                let bytes = match tree.node(path).ok()? {
                    loop_workspace::Node::Symlink(t) => t.into_os_string().into_encoded_bytes(),
                    loop_workspace::Node::File { .. } => tree
                        .read_file(path, loop_workspace::changeset::MAX_DIFF_BYTES)
                        .ok()?,
                    _ => return None,
                };
                Some(bytes).filter(|b| loop_protocol::hash::sha256_hex(b) == sha)
            }
        }
    };
    ChangeSet::compute(baseline, last, &ws.path, base.clone(), &before)
}

/// The receipt's record of a change set.
pub fn record(cs: &ChangeSet, patch_name: &str, unredacted: Option<String>) -> ChangeSetRecord {
    ChangeSetRecord {
        unredacted_patch_sha256: unredacted,
        base_commit: cs.base_commit.clone(),
        files: cs.files.clone(),
        patch: patch_name.to_string(),
        patch_sha256: cs.patch_sha256.clone(),
    }
}
