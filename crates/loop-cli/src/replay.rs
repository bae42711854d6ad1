//! `loop replay RECEIPT`: re-run every check of a receipt's contract, in the
//! sandbox, on fresh snapshots of the exact tree the receipt verified, with
//! no model, and say whether the outcome reproduces.

use crate::CliError;
use loop_protocol::{Acceptance, OutcomeKind};
use loop_receipt::verify_receipt;
use loop_verifier::SnapshotVerifier;
use loop_workspace::{Manifest, remove_tree};
use std::path::Path;

/// Replay; exit 0 when every criterion comes out as recorded.
pub fn replay(receipt: &Path) -> Result<u8, CliError> {
    // Resolved once, absolutely: everything below is found from it, and a
    // relative path would give the checks a relative workspace.
    let receipt = &receipt
        .canonicalize()
        .map_err(|e| CliError::usage(format!("{}: {e}", receipt.display())))?;
    let trusted = crate::verify_cmd::trusted_keys(None)?;
    let report =
        verify_receipt(receipt, None, &trusted).map_err(|e| CliError::usage(e.to_string()))?;
    let Some(statement) = report.statement.as_ref().filter(|_| report.ok()) else {
        return Err(CliError::usage(format!(
            "the receipt {} does not hold; run `loop verify` on it",
            receipt.display()
        )));
    };
    let p = &statement.predicate;
    let Some(recorded) = &p.verification else {
        return Err(CliError::usage(format!(
            "task {} ended {} before any verification: there is nothing to replay",
            p.task_id, p.outcome
        )));
    };
    // The tree the receipt verified: the task workspace, if it still holds
    // exactly that content.
    let state = receipt
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| CliError::usage("the receipt is not inside a .loop/receipts directory"))?;
    let task_dir = state.join("tasks").join(&p.task_id);
    let workspace = task_dir.join("workspace");
    let current = Manifest::of(&workspace).map_err(|e| {
        CliError::usage(format!(
            "the task workspace {} is gone ({e}); replay needs the verified tree",
            workspace.display()
        ))
    })?;
    if current.root != recorded.manifest_root {
        return Err(CliError::usage(format!(
            "the task workspace changed since verification (root {} ≠ recorded {})",
            current.root, recorded.manifest_root
        )));
    }
    // The verifier never writes to the tree it seals (overlays, or its own copy).
    let scratch = task_dir.join("replay");
    let _ = remove_tree(&scratch);
    let mut verifier = SnapshotVerifier::new(&workspace, &scratch);
    let replayed = verifier
        .verify(&p.contract, &p.contract_sha256, recorded.attempt)
        .map_err(|e| CliError::internal(e.to_string()))?;
    let _ = remove_tree(&scratch);
    println!(
        "replaying task {} ({} criteria, no model)",
        p.task_id,
        p.contract.criteria.len()
    );
    let mut same = true;
    for (was, now) in recorded.criteria.iter().zip(&replayed.criteria) {
        let mark = if now.passed { "✓" } else { "✗" };
        let agree = was.passed == now.passed;
        same &= agree;
        println!(
            "  {mark} {:<20} recorded {}, replayed {}{}",
            now.id,
            if was.passed { "pass" } else { "fail" },
            if now.passed { "pass" } else { "fail" },
            if agree { "" } else { "  ← differs" }
        );
        if !agree {
            // What the replay saw, so a difference can be understood.
            for c in now.checks.iter().filter(|c| !c.passed) {
                println!(
                    "      check {}: {}",
                    c.index + 1,
                    c.failure.as_deref().unwrap_or("failed")
                );
                for (name, s) in [("stdout", &c.stdout), ("stderr", &c.stderr)] {
                    if let Some(s) = s
                        && !s.excerpt.trim().is_empty()
                    {
                        println!(
                            "      {name}: {}",
                            s.excerpt.trim_end().replace('\n', "\n        ")
                        );
                    }
                }
            }
        }
    }
    let accepted = Acceptance::establish(&p.contract, &p.contract_sha256, &replayed).is_ok();
    let recorded_verified = p.outcome.kind == OutcomeKind::Verified;
    same &= accepted == recorded_verified;
    println!(
        "outcome: recorded {}, replayed {}: {}",
        p.outcome,
        if accepted { "verified" } else { "not verified" },
        if same { "reproduced" } else { "NOT reproduced" }
    );
    Ok(if same { 0 } else { 1 })
}
