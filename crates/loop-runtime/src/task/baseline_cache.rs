//! The baseline's results kept between tasks: a `run` check's result on
//! the untouched workspace depends on the tree (its Merkle root), the
//! check's definition and what the check's sandbox holds (the shared
//! environments' roots, the setup layer, the network it may reach, the
//! isolation asked for, this build of the runtime). With all of those the
//! same, an earlier task's passing result is taken instead of running the
//! check again, marked in the evidence with the task (and receipt) that
//! ran it. Results are kept a week; a tree never seen runs everything; a
//! failure always runs again.
//!
//! Kept in `.loop/baselines/`, one file per tree and sandbox: the runtime
//! writes it, outside any workspace (a task's model never reaches it).

use crate::Error;
use loop_protocol::{CheckEvidence, CriterionEvidence, Isolation, ReusedRun, VerificationReport};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How long a kept result is taken (a week).
const KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

/// Results kept per file (the newest).
const MOST: usize = 64;

/// The largest file read back.
const MAX_FILE: u64 = 16 << 20;

/// One tree's kept results, for one sandbox.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Kept {
    /// The tree's Merkle root.
    root: String,
    /// The digest of what the sandbox holds.
    sandbox: String,
    /// The results, oldest first.
    results: Vec<KeptResult>,
}

/// One check's result on the tree.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct KeptResult {
    evidence: CheckEvidence,
    isolation: Isolation,
    task_id: String,
    at_ms: u64,
}

/// The kept baseline results of one tree in one sandbox.
pub(crate) struct BaselineCache {
    file: PathBuf,
    root: String,
    sandbox: String,
    now_ms: u64,
}

impl BaselineCache {
    /// The cache of `project` for the tree `root` and the sandbox that
    /// `sandbox` describes (serialized, with this build's version).
    pub(crate) fn new(project: &Path, root: &str, sandbox: &serde_json::Value) -> BaselineCache {
        let sandbox = loop_protocol::hash::sha256_hex(
            serde_json::json!({
                "runtime": env!("CARGO_PKG_VERSION"),
                "sandbox": sandbox,
            })
            .to_string()
            .as_bytes(),
        );
        let name = loop_protocol::hash::sha256_hex(format!("{root}\n{sandbox}").as_bytes());
        BaselineCache {
            file: project
                .join(".loop/baselines")
                .join(format!("{}.json", &name[..32])),
            root: root.to_string(),
            sandbox,
            now_ms: loop_core::Clock::now_ms(&loop_core::SystemClock),
        }
    }

    fn read(&self) -> Kept {
        let Ok(text) = loop_workspace::door::read_named_text(&self.file, MAX_FILE) else {
            return Kept::default();
        };
        serde_json::from_str::<Kept>(&text)
            .ok()
            .filter(|k| k.root == self.root && k.sandbox == self.sandbox)
            .unwrap_or_default()
    }

    /// The results kept for this tree, as one report on it (for
    /// `SnapshotVerifier::reusing`); none when nothing is kept.
    pub(crate) fn known(&self) -> Option<VerificationReport> {
        let kept = self.read();
        let fresh: Vec<&KeptResult> = kept
            .results
            .iter()
            .filter(|r| r.at_ms <= self.now_ms && self.now_ms - r.at_ms <= KEPT_MS)
            .collect();
        let isolation = fresh.first()?.isolation.clone();
        let checks = fresh
            .iter()
            .map(|r| {
                let mut ev = r.evidence.clone();
                ev.reused_from = Some(ReusedRun {
                    task_id: r.task_id.clone(),
                    receipt: format!(".loop/receipts/{}.receipt.json", r.task_id),
                    at: loop_protocol::time::rfc3339_millis(r.at_ms),
                });
                ev
            })
            .collect();
        Some(VerificationReport {
            attempt: 0,
            contract_sha256: String::new(),
            manifest_root: self.root.clone(),
            files: 0,
            snapshot_method: String::new(),
            criteria: vec![CriterionEvidence {
                id: String::new(),
                passed: false,
                checks,
            }],
            artifacts: Vec::new(),
            protected_violations: Vec::new(),
            isolation,
            duration_ms: 0,
        })
    }

    /// Keep the results task `task_id` ran itself on this tree: `run`
    /// checks that passed (a result kept only ever makes the rules
    /// stricter: a guard, a criterion that holds already; a failure, read
    /// as "the task made it pass", is always run again), none reused, none
    /// implied by another, none that reached the network, and none in
    /// `skip` (the project's own commands whose run kept build outputs for
    /// the later checks: run again, they keep them for this task too).
    #[allow(clippy::disallowed_methods)] // the runtime's own cache, written whole then renamed
    pub(crate) fn keep(
        &self,
        task_id: &str,
        reports: &[&VerificationReport],
        skip: &[String],
    ) -> Result<(), Error> {
        let mut kept = self.read();
        kept.root = self.root.clone();
        kept.sandbox = self.sandbox.clone();
        let mut added = false;
        for r in reports.iter().filter(|r| r.manifest_root == self.root) {
            for ev in r.criteria.iter().flat_map(|c| c.checks.iter()) {
                let ran = matches!(&ev.check, loop_protocol::Check::Run(r) if !skip.contains(&r.command))
                    && ev.passed
                    && ev.reused_from.is_none()
                    && ev.implied_by.is_none()
                    && !ev.timed_out
                    && ev.egress.is_empty();
                if !ran {
                    continue;
                }
                kept.results.retain(|k| k.evidence.check != ev.check);
                kept.results.push(KeptResult {
                    evidence: ev.clone(),
                    isolation: r.isolation.clone(),
                    task_id: task_id.to_string(),
                    at_ms: self.now_ms,
                });
                added = true;
            }
        }
        if !added {
            return Ok(());
        }
        let over = kept.results.len().saturating_sub(MOST);
        kept.results.drain(..over);
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let io = |e: std::io::Error| Error::internal(format!("{}: {e}", self.file.display()));
        std::fs::create_dir_all(dir).map_err(io)?;
        let part = dir.join(format!(
            ".{}.part",
            loop_protocol::hash::sha256_hex(task_id.as_bytes())
        ));
        std::fs::write(&part, serde_json::to_vec(&kept).map_err(Error::from_cause)?).map_err(io)?;
        std::fs::rename(&part, &self.file).map_err(io)
    }
}

/// When anything in the host tree `dir` last changed, as far as three
/// levels down (a toolchain cache gets new entries there: a fetched crate,
/// a downloaded module), the newest of at most 4096 entries' times, in
/// nanoseconds since the epoch; none when it cannot be read.
#[allow(clippy::disallowed_methods)] // lstat of host toolchain trees (no content read)
pub(crate) fn tree_stamp(dir: &Path) -> Option<u128> {
    let stamp = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
    };
    let mut newest = stamp(dir)?;
    let mut level = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    for _ in 0..3 {
        let mut next = Vec::new();
        for d in &level {
            let Ok(items) = std::fs::read_dir(d) else {
                continue;
            };
            for e in items.flatten() {
                seen += 1;
                if seen > 4096 {
                    return Some(newest);
                }
                newest = newest.max(stamp(&e.path()).unwrap_or(0));
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    next.push(e.path());
                }
            }
        }
        level = next;
    }
    Some(newest)
}
