//! What a task leaves when it ends: its artifacts (from the accepted seal
//! when verified, else from the workspace as it was left), the change set
//! (redacted like every record), the signed receipt covering them and the
//! ledger, and only then the task closed in the store.

use crate::Error;
use crate::project::locate::{Start, TaskPaths, store_err};
use crate::task::request::{StoredRequest, TaskReport};
use loop_core::{Clock, RunResult};
use loop_protocol::OutcomeKind;
use loop_receipt::{Budgets, LedgerRef, Predicate, Provenance, ReceiptBuilder};
use loop_store::Store;
use loop_workspace::{Manifest, remove_tree};
use std::path::Path;

/// The largest artifact shipped beside a receipt (the sandbox's file-size
/// limit is 1 GiB; an artifact is evidence, not a data set).
const ARTIFACT_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The receipt, as a shared store keeps it.
const RECEIPT: &str = "receipt";

/// Where a shared store keeps a task's receipt and the files beside it.
fn receipt_owner(id: &str) -> String {
    format!("{id}/receipt")
}

/// A receipt as a shared store keeps it: the envelope, and the files
/// beside it (named relative to `.loop/receipts`) by content.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptReceipt {
    envelope: String,
    files: Vec<(String, String)>,
}

/// Keep the receipt just written, its change set and the artifacts this
/// run shipped in the store (the ledger is the store's already).
fn keep_receipt(
    (store, clock): (&dyn Store, &dyn Clock),
    (id, paths): (&str, &TaskPaths),
    shipped: &[String],
    patch_name: &str,
) -> Result<(), Error> {
    let read = |name: &str| -> Result<Vec<u8>, Error> {
        loop_workspace::door::read(&paths.receipts, name, ARTIFACT_MAX_BYTES)
            .map_err(|e| Error::internal(format!("{name}: {e}")))?
            .ok_or_else(|| Error::internal(format!("{name} is gone")))
    };
    let envelope = String::from_utf8(read(&format!("{id}.receipt.json"))?)
        .map_err(|_| Error::internal("the receipt written is not UTF-8"))?;
    let mut names = vec![patch_name.to_string()];
    let artifacts = format!("{id}.artifacts");
    names.extend(shipped.iter().map(|a| format!("{artifacts}/{a}")));
    let mut blobs = Vec::new();
    let mut files = Vec::new();
    for name in names {
        let bytes = read(&name)?;
        let sha = loop_protocol::hash::sha256_hex(&bytes);
        files.push((name, sha.clone()));
        blobs.push((sha, bytes));
    }
    let body = serde_json::to_string(&KeptReceipt { envelope, files })
        .map_err(|e| Error::internal(e.to_string()))?;
    store
        .put_task_file(
            &receipt_owner(id),
            &loop_store::TaskFile {
                name: RECEIPT,
                body: &body,
                blobs: &blobs,
                keep_only: None,
                durable: true,
            },
            None,
            clock.now_ms(),
        )
        .map_err(store_err)
}

/// Task `id`'s receipt in `project`'s `.loop/receipts`, brought from the
/// store when the task ended elsewhere (a worker on another machine, a
/// clone that serves this project): the envelope the store keeps and the
/// ledger file written from the store's entries, so `loop verify` checks
/// them offline here. `None` when the task has no receipt yet or the
/// store keeps none; a receipt already here is left as it is.
#[allow(clippy::disallowed_methods)] // the project's own receipts directory (lstat, and made if missing)
pub(crate) fn bring_receipt(
    store: &dyn Store,
    project: &Path,
    id: &str,
) -> Result<Option<std::path::PathBuf>, Error> {
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Error::usage(format!("`{id}` is not a task id")));
    }
    let paths = TaskPaths::of(project, id);
    let here = paths.receipts.join(format!("{id}.receipt.json"));
    if std::fs::symlink_metadata(&here).is_ok() {
        return Ok(Some(here));
    }
    let owner = receipt_owner(id);
    let Some(body) = store.task_file(&owner, RECEIPT).map_err(store_err)? else {
        return Ok(None);
    };
    // What the store says is checked before anything is written: names
    // beside this task's receipt only, contents that are what they say.
    let kept: KeptReceipt = serde_json::from_str(&body).map_err(|e| {
        Error::internal(format!(
            "task {id}: the receipt the store keeps cannot be read: {e}"
        ))
    })?;
    let mut files = Vec::new();
    for (name, sha) in &kept.files {
        let ok_name = (name == &format!("{id}.changes.patch")
            || name.starts_with(&format!("{id}.artifacts/")))
            && std::path::Path::new(name)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !ok_name {
            return Err(Error::internal(format!(
                "task {id}: the store's receipt names a file `{name}` outside its own"
            )));
        }
        let bytes = store
            .blob(&owner, sha)
            .map_err(store_err)?
            .filter(|b| loop_protocol::hash::sha256_hex(b) == *sha)
            .ok_or_else(|| {
                Error::internal(format!(
                    "task {id}: the store does not hold {name} as its receipt names it"
                ))
            })?;
        files.push((name.clone(), bytes));
    }
    // Nothing is written through a link: not the state directory, not the
    // receipts directory, not a directory of the artifacts.
    let real_dirs = |rel: &Path| -> Result<(), Error> {
        let mut at = project.to_path_buf();
        for part in Path::new(".loop/receipts").join(rel).components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if !m.is_dir() => {
                    return Err(Error::internal(format!(
                        "task {id}: its receipt is not brought: {} is not a directory (a link?)",
                        at.display()
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    };
    real_dirs(Path::new(""))?;
    for (name, _) in &files {
        real_dirs(Path::new(name).parent().unwrap_or(Path::new("")))?;
    }
    std::fs::create_dir_all(&paths.receipts).map_err(io("receipts"))?;
    for (name, bytes) in &files {
        let to = paths.receipts.join(name);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io("receipts"))?;
        }
        loop_workspace::write_atomic(&to, bytes).map_err(io("a receipt's file"))?;
    }
    let chain = store.entries(id, 0).map_err(store_err)?;
    let ledger = paths.receipts.join(format!("{id}.ledger.jsonl"));
    let mut file =
        loop_receipt::FileLedger::continue_from(&ledger, &chain).map_err(Error::from_cause)?;
    file.sync().map_err(Error::from_cause)?;
    // A receipt signed by an earlier version names the file its lines'
    // older form made: the same entries, written as it wrote them.
    let signed = loop_receipt::ledger_digest_named(kept.envelope.as_bytes());
    let written = std::fs::read(&ledger).map_err(io("the ledger"))?;
    if signed.is_some_and(|d| d != loop_protocol::hash::sha256_hex(&written)) {
        let mut older = loop_receipt::FileLedger::continue_in_older_form(&ledger, &chain)
            .map_err(Error::from_cause)?;
        older.sync().map_err(Error::from_cause)?;
    }
    // The envelope last: a receipt here means all of it is.
    loop_workspace::write_atomic(&here, kept.envelope.as_bytes()).map_err(io("the receipt"))?;
    tracing::info!(
        "task {id}: its receipt brought from the store to {}",
        here.display()
    );
    Ok(Some(here))
}

/// Everything a finished run hands over.
pub(crate) struct Shipment<'a> {
    pub project: &'a Path,
    pub store: &'a dyn Store,
    pub task_id: &'a str,
    pub stored: &'a StoredRequest,
    pub paths: &'a TaskPaths,
    pub start: &'a Start,
    pub result: RunResult,
    /// The accepted seal's tree, if verification kept one.
    pub sealed: Option<&'a Path>,
    pub ledger: LedgerRef,
    pub provenance: Provenance,
    pub clock: &'a dyn Clock,
    /// The run's claim: the end is recorded only while it holds.
    pub holder: &'a str,
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::internal(format!("{what}: {e}"))
}

/// Ship the artifacts beside the receipt, read as untrusted (a link is
/// never followed, a FIFO never opened); an artifact the task did not make
/// is simply not shipped (the verification says so).
#[allow(clippy::disallowed_methods)] // the runtime's own artifacts directory; the content was read through the door
fn ship_artifacts(s: &Shipment<'_>, receipt: &mut ReceiptBuilder) -> Result<Vec<String>, Error> {
    let source: &Path = match (s.result.record.kind, s.sealed) {
        (OutcomeKind::Verified, Some(sealed)) => sealed,
        _ => &s.paths.workspace,
    };
    let dir = s.paths.receipts.join(format!("{}.artifacts", s.task_id));
    let tree = loop_workspace::Tree::open(source).map_err(io("artifacts"))?;
    let mut shipped = Vec::new();
    for a in &s.stored.contract.artifacts {
        let Ok(bytes) = tree.read_file(a.as_str(), ARTIFACT_MAX_BYTES) else {
            continue;
        };
        let to = dir.join(a.as_str());
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io("artifacts"))?;
        }
        std::fs::write(&to, &bytes).map_err(io("artifacts"))?;
        receipt.artifact(a, &bytes);
        shipped.push(a.as_str().to_string());
    }
    Ok(shipped)
}

/// The shared environments as the receipt lists them: each one's root is
/// taken again, and one that changed while the task ran says so.
fn environments_at_end(
    project: &Path,
    shares: &[loop_receipt::SharedEnvironment],
) -> Vec<loop_receipt::SharedEnvironment> {
    shares
        .iter()
        .map(|e| {
            let now = crate::project::environments::digest(&project.join(e.content_path()))
                .map(|m| m.root)
                .unwrap_or_else(|err| format!("(unreadable: {err})"));
            loop_receipt::SharedEnvironment {
                changed_to: (now != e.sha256).then_some(now),
                ..e.clone()
            }
        })
        .collect()
}

/// The run's change set, its patch redacted like any record (the per-file
/// digests stay those of the real content, so what was verified is still
/// identified exactly), written beside the receipt and covered by it:
/// (the change set, the receipt's record of it, the patch's name, the
/// root of the workspace as it was left).
#[allow(clippy::disallowed_methods)] // the patch beside the receipt, in the runtime's own receipts directory
fn ship_change_set(
    s: &Shipment<'_>,
    receipt: &mut ReceiptBuilder,
) -> Result<
    (
        loop_workspace::ChangeSet,
        loop_receipt::ChangeSetRecord,
        String,
        String,
    ),
    Error,
> {
    let start = s.start;
    let final_manifest =
        Manifest::of(&s.paths.workspace).map_err(io("cannot hash the workspace"))?;
    let parent = crate::task::change_set::parent_workspace(s.project, s.stored);
    let mut changes = crate::task::change_set::compute(
        s.project,
        &start.task_ws,
        &start.baseline,
        if start.gone {
            &start.baseline
        } else {
            &final_manifest
        },
        parent.as_deref(),
    );
    let redacted = loop_sandbox::redact::redact(&changes.patch);
    let unredacted = (redacted != changes.patch).then(|| changes.patch_sha256.clone());
    changes.patch = redacted;
    changes.patch_sha256 = loop_protocol::hash::sha256_hex(changes.patch.as_bytes());
    let patch_name = format!("{}.changes.patch", s.task_id);
    std::fs::write(s.paths.receipts.join(&patch_name), &changes.patch).map_err(io("change set"))?;
    receipt.file(&patch_name, changes.patch.as_bytes());
    let change_set = crate::task::change_set::record(&changes, &patch_name, unredacted);
    Ok((changes, change_set, patch_name, final_manifest.root))
}

/// Ship everything, sign the receipt, close the task in the store.
#[allow(clippy::disallowed_methods)] // the ledger the runtime itself wrote
pub(crate) fn ship(s: Shipment<'_>) -> Result<TaskReport, Error> {
    let task_id = s.task_id;
    let contract = &s.stored.contract;
    let mut receipt = ReceiptBuilder::new();
    let shipped = ship_artifacts(&s, &mut receipt)?;
    let ledger_bytes =
        std::fs::read(s.paths.receipts.join(&s.ledger.name)).map_err(io("ledger"))?;
    receipt.file(&s.ledger.name, &ledger_bytes);

    let start = s.start;
    let (_, change_set, patch_name, final_root) = ship_change_set(&s, &mut receipt)?;

    let result = s.result;
    let predicate = Predicate {
        task_id: task_id.to_string(),
        contract: contract.clone(),
        contract_sha256: contract.sha256().map_err(|e| Error::usage(e.to_string()))?,
        // As the ledger has it: registered secret values scrubbed.
        outcome: loop_protocol::OutcomeRecord {
            reason: loop_sandbox::redact::scrub_literals(&result.record.reason),
            ..result.record.clone()
        },
        isolation: result.last_report.as_ref().map(|r| r.isolation.clone()),
        setup: s.stored.setup.clone(),
        network: loop_receipt::NetworkReport::from_ledger(
            &ledger_bytes,
            loop_receipt::NetworkReport {
                commands: s.stored.network.commands.clone(),
                setup: s.stored.network.setup.clone(),
                checks: s.stored.network.checks.clone(),
                resolve: s
                    .stored
                    .network
                    .resolve
                    .iter()
                    .map(|(h, a)| (h.clone(), a.to_string()))
                    .collect(),
                ..Default::default()
            },
        ),
        verification: result.last_report,
        baseline: start.baseline_report.clone(),
        check_integrity: s.stored.check_integrity.clone(),
        artifacts: Vec::new(),
        environments: environments_at_end(s.project, &s.stored.shares),
        baseline_root: start.baseline.root.clone(),
        final_root,
        change_set: change_set.clone(),
        budgets: Budgets {
            granted: result.granted.clone(),
            used: result.used,
        },
        provenance: s.provenance,
        ledger: s.ledger,
        created_at: loop_protocol::time::rfc3339_millis(s.clock.now_ms()),
        delegation: s.stored.delegation.as_ref().map(|c| c.from.clone()),
        skills: s.stored.skills.clone(),
    };
    let receipt_path = s.paths.receipts.join(format!("{task_id}.receipt.json"));
    let key = loop_receipt::KeyPair::load_or_create()
        .map_err(|e| Error::usage(format!("signing key: {e}")))?;
    receipt
        .write_signed(predicate, &receipt_path, &key)
        .map_err(Error::from_cause)?;
    tracing::info!(
        "task {task_id}: {} receipt written to {}",
        result.record,
        receipt_path.display()
    );
    // On a shared store, the receipt goes with the task: the project the
    // task is for gets it wherever the task ended (a clone that serves it,
    // a worker elsewhere); see [`bring_receipt`].
    if s.store.shared() {
        keep_receipt(
            (s.store, s.clock),
            (s.task_id, s.paths),
            &shipped,
            &patch_name,
        )?;
    }
    // What the model proposed to remember is kept, with this receipt
    // (usable later only if the task was verified).
    keep_notes(
        (s.store, s.stored, task_id, s.clock),
        &result.record,
        &receipt_path,
        &ledger_bytes,
    )?;
    // The task ends in the store only once its receipt is written.
    s.store
        .finish(
            task_id,
            result.record.name(),
            &result.record.reason,
            &receipt_path.display().to_string(),
            &serde_json::to_value(&change_set).unwrap_or_default(),
            Some(s.holder),
            s.clock.now_ms(),
        )
        .map_err(store_err)?;
    // Seals and check views are scratch; the receipt holds their evidence.
    let _ = remove_tree(&s.paths.near.join("scratch"));
    Ok(TaskReport {
        task_id: task_id.to_string(),
        outcome: result.record,
        receipt: receipt_path,
        workspace: s.paths.workspace.clone(),
    })
}

/// Keep the notes the task's model proposed (see [`crate::task::memory`]).
/// A child's notes wait for a person whatever its end: its contract was
/// its parent model's to write. Memory is help, never a gate: a note that
/// cannot be kept is said, and the task ends all the same.
#[allow(clippy::disallowed_methods)] // the receipt the runtime just wrote
fn keep_notes(
    (store, stored, task_id, clock): (&dyn Store, &StoredRequest, &str, &dyn Clock),
    ended: &loop_protocol::OutcomeRecord,
    receipt_path: &Path,
    ledger_bytes: &[u8],
) -> Result<(), Error> {
    let Some(identity) = &stored.project_identity else {
        return Ok(());
    };
    let receipt_bytes = std::fs::read(receipt_path).map_err(io("receipt"))?;
    let outcome = match &stored.delegation {
        Some(_) => format!("{} (a child task)", ended.name()),
        None => ended.name().to_string(),
    };
    if let Err(e) = crate::task::memory::keep(
        store,
        (&identity.id, stored.owner.as_deref().unwrap_or("")),
        (task_id, &outcome),
        ledger_bytes,
        &loop_protocol::hash::sha256_hex(&receipt_bytes),
        clock.now_ms(),
    ) {
        tracing::warn!("task {task_id}: its notes were not kept: {e}");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    /// A receipt kept in the store is hostile input to the project that
    /// brings it: a name outside the task's own files, or a content that
    /// is not what its digest says, is refused before anything is written;
    /// an honest one lands beside the receipt, the envelope last.
    #[test]
    fn a_receipt_brought_from_the_store_writes_only_its_own_files() {
        let p = std::env::temp_dir().join(format!("loop-bring-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        let store = loop_store::SqliteStore::open(&p.join("store.db")).unwrap();
        let id = "t-1";
        store
            .create_task(id, "x", &serde_json::json!({}), 0)
            .unwrap();
        let keep = |files: Vec<(String, String)>, blobs: &[(String, Vec<u8>)]| {
            let body = serde_json::to_string(&KeptReceipt {
                envelope: "{\"payload\": \"x\"}".into(),
                files,
            })
            .unwrap();
            store
                .put_task_file(
                    &receipt_owner(id),
                    &loop_store::TaskFile {
                        name: RECEIPT,
                        body: &body,
                        blobs,
                        keep_only: None,
                        durable: true,
                    },
                    None,
                    1,
                )
                .unwrap();
        };
        let patch = b"--- a\n+++ b\n".to_vec();
        let sha = loop_protocol::hash::sha256_hex(&patch);
        let receipts = p.join(".loop/receipts");
        for (name, digest) in [
            ("t-1.artifacts/../../../escaped".to_string(), sha.clone()),
            ("t-2.changes.patch".to_string(), sha.clone()),
            ("t-1.changes.patch".to_string(), "0".repeat(64)),
        ] {
            keep(
                vec![(name.clone(), digest)],
                &[(sha.clone(), patch.clone())],
            );
            let e = bring_receipt(&store, &p, id).unwrap_err();
            assert!(
                e.message.contains(&name) || e.message.contains("as its receipt names it"),
                "{name}: {}",
                e.message
            );
            assert!(!receipts.join("t-1.receipt.json").exists(), "{name}");
            assert!(!p.join("escaped").exists() && !p.join(".loop/escaped").exists());
        }
        // A link planted where an artifact's directory goes: nothing is
        // written through it.
        let outside = p.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(&receipts).unwrap();
        std::os::unix::fs::symlink(&outside, receipts.join("t-1.artifacts")).unwrap();
        keep(
            vec![("t-1.artifacts/x.txt".to_string(), sha.clone())],
            &[(sha.clone(), patch.clone())],
        );
        let e = bring_receipt(&store, &p, id).unwrap_err();
        assert!(
            e.message.contains("not a directory (a link?)"),
            "{}",
            e.message
        );
        assert!(!outside.join("x.txt").exists());
        assert!(!receipts.join("t-1.receipt.json").exists());
        std::fs::remove_file(receipts.join("t-1.artifacts")).unwrap();
        // An id that is not one is refused before any path is made of it.
        let e = bring_receipt(&store, &p, "../t-1").unwrap_err();
        assert!(e.message.contains("is not a task id"), "{}", e.message);
        keep(
            vec![("t-1.changes.patch".to_string(), sha.clone())],
            &[(sha.clone(), patch.clone())],
        );
        let here = bring_receipt(&store, &p, id).unwrap().unwrap();
        assert_eq!(here, receipts.join("t-1.receipt.json"));
        assert_eq!(
            std::fs::read(receipts.join("t-1.changes.patch")).unwrap(),
            patch
        );
        assert!(receipts.join("t-1.ledger.jsonl").exists());
        let _ = std::fs::remove_dir_all(&p);
    }

    #[test]
    fn an_environment_changed_while_the_task_ran_is_named_in_the_receipt() {
        let p = std::env::temp_dir().join(format!("loop-ship-env-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join(".venv")).unwrap();
        std::fs::write(p.join(".venv/a.py"), "A = 1\n").unwrap();
        let root = Manifest::of(&p.join(".venv")).unwrap().root;
        let shared = vec![loop_receipt::SharedEnvironment {
            path: ".venv".into(),
            sha256: root.clone(),
            files: 1,
            overlay: false,
            source: None,
            changed_to: None,
        }];
        let same = environments_at_end(&p, &shared);
        assert_eq!(same, shared);
        std::fs::write(p.join(".venv/a.py"), "A = 2\n").unwrap();
        let changed = environments_at_end(&p, &shared);
        assert_eq!(changed[0].sha256, root);
        let now = Manifest::of(&p.join(".venv")).unwrap().root;
        assert_eq!(changed[0].changed_to.as_deref(), Some(now.as_str()));
        let _ = std::fs::remove_dir_all(&p);
    }
}
