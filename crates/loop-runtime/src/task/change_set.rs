//! A finished run's change set: what the task workspace holds against its
//! baseline (each file's start content taken from the base commit, or
//! from the project when there is no git), and the receipt's record of it.

use loop_receipt::ChangeSetRecord;
use loop_workspace::{ChangeSet, Manifest, TaskWorkspace};
use std::path::Path;
use std::process::Command;

/// The change set of a finished run. A file's start content is shown
/// only when it is the content the baseline recorded (its hash matches):
/// from the base commit, else the project, else `parent` (the workspace a
/// child task was made from, which holds what its parent had when the
/// child began); otherwise the patch says the content differs, never a
/// diff against something the task did not start from.
pub fn compute(
    project: &Path,
    ws: &TaskWorkspace,
    baseline: &Manifest,
    last: &Manifest,
    parent: Option<&Path>,
) -> ChangeSet {
    let base = ws.base_commit().map(str::to_string);
    let matches = |b: &Vec<u8>, sha: &str| loop_protocol::hash::sha256_hex(b) == sha;
    let before = |path: &str, sha: &str| -> Option<Vec<u8>> {
        base.as_ref()
            .and_then(|commit| {
                Command::new("git")
                    .arg("-C")
                    .arg(project)
                    .args(["show", &format!("{commit}:{path}")])
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|o| o.stdout)
            })
            .filter(|b| matches(b, sha))
            .or_else(|| read_in(project, path).filter(|b| matches(b, sha)))
            .or_else(|| {
                parent
                    .and_then(|p| read_in(p, path))
                    .filter(|b| matches(b, sha))
            })
    };
    ChangeSet::compute(baseline, last, &ws.path, base.clone(), &before)
}

/// What `path` holds under `root` (a link as its target, never followed).
fn read_in(root: &Path, path: &str) -> Option<Vec<u8>> {
    let tree = loop_workspace::Tree::open(root).ok()?;
    match tree.node(path).ok()? {
        loop_workspace::Node::Symlink(t) => Some(t.into_os_string().into_encoded_bytes()),
        loop_workspace::Node::File { .. } => tree
            .read_file(path, loop_workspace::changeset::MAX_DIFF_BYTES)
            .ok(),
        _ => None,
    }
}

/// The workspace the task `stored` describes was made from, when it is a
/// child: its parent's (see [`compute`]).
pub fn parent_workspace(
    project: &Path,
    stored: &crate::StoredRequest,
) -> Option<std::path::PathBuf> {
    let parent = &stored.delegation.as_ref()?.from.parent;
    crate::project::locate::is_task_id(parent)
        .then(|| crate::project::locate::TaskPaths::of(project, parent).workspace)
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
