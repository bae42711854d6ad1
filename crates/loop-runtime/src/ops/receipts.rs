//! Receipts after the fact: verify one offline (signature, statement,
//! ledger, artifacts, and whether its signer was revoked), and replay its
//! checks with no model on the exact tree it verified.

use crate::Error;
use loop_protocol::{Acceptance, OutcomeKind, VerificationReport};
use loop_receipt::{KeyPair, PublicKey, SignatureStatus, Statement, VerifyReport, verify_receipt};
use loop_verifier::SnapshotVerifier;
use loop_workspace::{Manifest, remove_tree};
use std::path::Path;

/// Whose key a verification trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustedKey {
    /// The key given (`--pubkey`).
    Given(String),
    /// This machine's own key.
    ThisMachine(String),
    /// None: this machine has no key yet.
    None,
}

impl std::fmt::Display for TrustedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustedKey::Given(k) => write!(f, "the given key {k}"),
            TrustedKey::ThisMachine(k) => write!(f, "this machine's key {k}"),
            TrustedKey::None => f.write_str("no key (this machine has none yet)"),
        }
    }
}

/// What verifying a receipt found.
#[derive(Debug)]
pub struct ReceiptCheck {
    /// Layer by layer.
    pub report: VerifyReport,
    /// Whose key was trusted.
    pub trusted: TrustedKey,
    /// Keys revoked by trusted addenda beside the receipt.
    pub revoked_by_addenda: Vec<String>,
    /// Addenda beside it that count for nothing (another receipt's, not
    /// signed by a trusted key, not addenda), each with why: said, never
    /// silently ignored.
    pub stray_addenda: Vec<String>,
    /// A valid signature by a key revoked (on this machine, or by an
    /// addendum): the receipt does not hold.
    pub revoked_signer: Option<String>,
    /// Every layer holds and the signer is not revoked.
    pub intact: bool,
    /// The task it records was verified.
    pub verified: bool,
}

/// The keys a verification trusts: the key in `pubkey` (a PEM file), else
/// this machine's own key.
pub fn trusted_keys(pubkey: Option<&Path>) -> Result<Vec<PublicKey>, Error> {
    match pubkey {
        Some(p) => {
            let bytes = loop_receipt::read::read_regular(p, 1 << 20)
                .map_err(|e| Error::usage(format!("--pubkey {}: {e}", p.display())))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Error::usage(format!("--pubkey {}: not UTF-8 text", p.display())))?;
            let key = PublicKey::parse(&text)
                .map_err(|e| Error::usage(format!("--pubkey {}: {e}", p.display())))?;
            Ok(vec![key])
        }
        None => Ok(KeyPair::existing()
            .map_err(|e| Error::usage(e.to_string()))?
            .map(|k| vec![k.public()])
            .unwrap_or_default()),
    }
}

/// Verify `receipt` offline (its artifacts in `artifacts`, else beside
/// it) against the key in `pubkey`, else this machine's.
pub fn verify(
    receipt: &Path,
    artifacts: Option<&Path>,
    pubkey: Option<&Path>,
) -> Result<ReceiptCheck, Error> {
    verify_with(receipt, artifacts, pubkey, false)
}

/// [`verify`], accepting (and still listing) files in the artifacts'
/// directory that the receipt does not attest when `allow_extra`.
pub fn verify_with(
    receipt: &Path,
    artifacts: Option<&Path>,
    pubkey: Option<&Path>,
    allow_extra: bool,
) -> Result<ReceiptCheck, Error> {
    let trusted = trusted_keys(pubkey)?;
    let check = verify_trusting(receipt, artifacts, &trusted, allow_extra)?;
    let trusted = match (pubkey, trusted.first()) {
        (Some(_), Some(k)) => TrustedKey::Given(k.keyid.clone()),
        (None, Some(k)) => TrustedKey::ThisMachine(k.keyid.clone()),
        (_, None) => TrustedKey::None,
    };
    Ok(ReceiptCheck { trusted, ..check })
}

/// Verify `receipt` offline, its artifacts beside it, against `keys`
/// (each given: the check says the first).
pub fn verify_with_keys(receipt: &Path, keys: &[PublicKey]) -> Result<ReceiptCheck, Error> {
    let check = verify_trusting(receipt, None, keys, false)?;
    let trusted = match keys.first() {
        Some(k) => TrustedKey::Given(k.keyid.clone()),
        None => TrustedKey::None,
    };
    Ok(ReceiptCheck { trusted, ..check })
}

/// [`verify_with`] against the keys `trusted`.
fn verify_trusting(
    receipt: &Path,
    artifacts: Option<&Path>,
    trusted: &[PublicKey],
    allow_extra: bool,
) -> Result<ReceiptCheck, Error> {
    let trusted = trusted.to_vec();
    let report =
        verify_receipt(receipt, artifacts, &trusted).map_err(|e| Error::usage(e.to_string()))?;
    // A revoked key stays revoked whoever passes it with --pubkey: this
    // machine's list, and revocation addenda beside the receipt signed by
    // a trusted key (the revoked key signs its own revocation).
    let mut keys = trusted.clone();
    if let Ok(Some(k)) = KeyPair::existing() {
        keys.push(k.public());
    }
    let loop_receipt::Addenda {
        revoked: revoked_by_addenda,
        stray: stray_addenda,
    } = loop_receipt::addenda(receipt, &keys);
    let revoked_signer = match &report.signature {
        SignatureStatus::Valid { keyid }
            if KeyPair::revoked().contains(keyid) || revoked_by_addenda.contains(keyid) =>
        {
            Some(keyid.clone())
        }
        _ => None,
    };
    let intact = report.ok()
        && revoked_signer.is_none()
        && (allow_extra || report.extra_artifacts.is_empty());
    // Never "verified" for a receipt that does not hold.
    let verified = intact
        && report
            .statement
            .as_ref()
            .is_some_and(|s| s.predicate.outcome.kind == OutcomeKind::Verified);
    Ok(ReceiptCheck {
        report,
        trusted: TrustedKey::None,
        revoked_by_addenda,
        stray_addenda,
        revoked_signer,
        intact,
        verified,
    })
}

/// A receipt's checks run again.
#[derive(Debug)]
pub struct Replay {
    /// The receipt's statement.
    pub statement: Statement,
    /// The verification it recorded.
    pub recorded: VerificationReport,
    /// The same checks now, on fresh snapshots of the same tree.
    pub replayed: VerificationReport,
    /// The replayed evidence establishes acceptance of the contract.
    pub accepted: bool,
    /// Every criterion, and the outcome, came out as recorded.
    pub reproduced: bool,
}

/// The refusal of work whose receipt does not hold, saying why: a key
/// this machine revoked (`loop keys rotate`: what it signed is no longer
/// trusted here), another key, a signature that does not verify, or the
/// first problems of the other layers.
pub(crate) fn not_holding(receipt: &Path, report: &VerifyReport, revoked: Option<&str>) -> Error {
    let revoked_here = KeyPair::revoked();
    let revoked = revoked
        .map(str::to_string)
        .or_else(|| match &report.signature {
            SignatureStatus::UnknownKey { keyids } => {
                keyids.iter().find(|k| revoked_here.contains(k)).cloned()
            }
            _ => None,
        });
    let why = match (&report.signature, revoked) {
        (_, Some(k)) => format!(
            "it is signed by key {k}, which `loop keys rotate` revoked: work a revoked key signed is not trusted here (run the task again to have it signed by the current key)"
        ),
        (SignatureStatus::UnknownKey { keyids }, None) => format!(
            "it is signed by key {}, not by this machine's",
            keyids.join(", ")
        ),
        (SignatureStatus::Invalid { .. }, None) => "its signature does not verify".into(),
        (SignatureStatus::Unsigned, None) => "it is not signed".into(),
        (SignatureStatus::Valid { .. }, None) => {
            let problems = report.problems();
            match problems.len() {
                0 => "its statement could not be read".into(),
                n => format!(
                    "{}{}",
                    problems[..n.min(2)].join("; "),
                    if n > 2 { "; …" } else { "" }
                ),
            }
        }
    };
    Error::usage(format!(
        "the receipt {} does not hold: {why}; `loop verify` on it says more",
        receipt.display()
    ))
}

/// Re-run every check of `receipt`'s contract, in the sandbox, on fresh
/// snapshots of the exact tree the receipt verified (the task workspace,
/// if it still holds exactly that content), with no model.
pub fn replay(receipt: &Path) -> Result<Replay, Error> {
    // Resolved once, absolutely: everything below is found from it, and a
    // relative path would give the checks a relative workspace.
    let receipt = &receipt
        .canonicalize()
        .map_err(|e| Error::usage(format!("{}: {e}", receipt.display())))?;
    let check = verify(receipt, None, None)?;
    let (report, signer) = (&check.report, check.revoked_signer.as_deref());
    let Some(statement) = report.statement.clone().filter(|_| check.intact) else {
        return Err(not_holding(receipt, report, signer));
    };
    let p = &statement.predicate;
    let Some(recorded) = p.verification.clone() else {
        return Err(Error::usage(format!(
            "task {} ended {} before any verification: there is nothing to replay",
            p.task_id, p.outcome
        )));
    };
    let state = receipt
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Error::usage("the receipt is not inside a .loop/receipts directory"))?;
    if !crate::project::locate::is_task_id(&p.task_id) {
        return Err(Error::usage(format!(
            "the receipt names `{}`, which is not a task id",
            p.task_id
        )));
    }
    let project = state.parent().unwrap_or(state);
    let project = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf());
    let paths = crate::project::locate::TaskPaths::of(&project, &p.task_id);
    let workspace = paths.workspace.clone();
    let current = Manifest::of(&workspace).map_err(|e| {
        Error::usage(format!(
            "the task workspace {} is gone ({e}); replay needs the verified tree",
            workspace.display()
        ))
    })?;
    if current.root != recorded.manifest_root {
        return Err(Error::usage(format!(
            "the task workspace changed since verification (root {} ≠ recorded {})",
            current.root, recorded.manifest_root
        )));
    }
    // The dependency environments it was verified against, only if they
    // still hold exactly that content.
    for e in &p.environments {
        let now = crate::project::environments::digest(&project.join(e.content_path())).map_err(|x| {
            Error::usage(format!(
                "the shared environment `{}` is gone ({x}); replay needs the one verified against",
                e.path
            ))
        })?;
        if e.changed_to.is_some() {
            return Err(Error::usage(format!(
                "the shared environment `{}` changed while the task ran: the receipt cannot say which content it was verified against",
                e.path
            )));
        }
        if now.root != e.sha256 {
            return Err(Error::usage(format!(
                "the shared environment `{}` changed since verification (root {} ≠ recorded {})",
                e.path, now.root, e.sha256
            )));
        }
    }
    // The checks reach what they reached when verified: the receipt's
    // lists and pins (none: no network at all).
    let network = match &p.network {
        Some(n) => crate::project::network::NetworkPlan {
            checks: n.checks.clone(),
            resolve: n
                .resolve
                .iter()
                .filter_map(|(h, a)| Some((h.clone(), a.parse().ok()?)))
                .collect(),
            ..Default::default()
        },
        None => crate::project::network::NetworkPlan::default(),
    };
    let sandbox = crate::project::environments::with_environments(
        loop_sandbox::Settings {
            egress: network.egress(crate::project::network::Use::Checks),
            ..Default::default()
        },
        &project,
        None,
        &p.environments,
        p.setup.as_ref(),
    );
    // The verifier never writes to the tree it seals (overlays, or its own copy).
    let scratch = paths.near.join("replay");
    let _ = remove_tree(&scratch);
    let replayed = SnapshotVerifier::new(&workspace, &scratch)
        .with_sandbox(sandbox)
        .verify(&p.contract, &p.contract_sha256, recorded.attempt)
        .map_err(Error::from_cause)?;
    let _ = remove_tree(&scratch);
    let accepted = Acceptance::establish(&p.contract, &p.contract_sha256, &replayed).is_ok();
    let reproduced = recorded.criteria.len() == replayed.criteria.len()
        && recorded
            .criteria
            .iter()
            .zip(&replayed.criteria)
            .all(|(was, now)| was.passed == now.passed)
        && accepted == (p.outcome.kind == OutcomeKind::Verified);
    Ok(Replay {
        statement,
        recorded,
        replayed,
        accepted,
        reproduced,
    })
}

/// The child tasks below task `id` (its children, theirs, … in ledger
/// order) as the ledgers beside its receipt in `dir` record them: whose
/// receipts go with its own. A ledger that cannot be read names none.
pub fn tree_below(dir: &Path, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut level = vec![id.to_string()];
    for _ in 0..loop_protocol::delegation::MAX_DEPTH {
        let mut next = Vec::new();
        for task in &level {
            let Ok(Some(ledger)) =
                loop_workspace::door::read(dir, format!("{task}.ledger.jsonl"), 64 << 20)
            else {
                continue;
            };
            for line in String::from_utf8_lossy(&ledger).lines() {
                let Ok(e) = serde_json::from_str::<loop_protocol::LedgerEntry>(line) else {
                    continue;
                };
                if let Ok(loop_protocol::Event::Delegated { child, .. }) =
                    loop_protocol::Event::from_kind_payload(&e.kind, &e.payload)
                    && loop_protocol::RelPath::parse(&child.task_id)
                        .is_ok_and(|p| !p.as_str().contains('/'))
                    && !out.contains(&child.task_id)
                {
                    next.push(child.task_id.clone());
                    out.push(child.task_id);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    out
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tree_tests {
    use super::*;

    #[test]
    fn the_tree_below_a_task_is_read_from_the_ledgers_beside_it() {
        let dir = std::env::temp_dir().join(format!("loop-tree-below-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let contract =
            loop_protocol::Contract::from_flags("split", &["make test".into()], &[]).unwrap();
        let line = |child: &str| {
            let e = loop_protocol::Event::Delegated {
                step: 1,
                call_id: "c".into(),
                child: loop_protocol::ChildRun {
                    task_id: child.into(),
                    authority: loop_protocol::delegation::Authority::of_contract(&contract),
                    outcome: "verified".into(),
                    receipt_sha256: None,
                    used: Default::default(),
                },
            };
            let (kind, payload) = e.to_kind_payload().unwrap();
            serde_json::json!({"seq": 0, "prev": "", "kind": kind, "payload": payload, "at": "", "hash": ""})
                .to_string()
        };
        // p delegated to c1 and, by a hostile name, to ../x; c1 to g1.
        std::fs::write(
            dir.join("p.ledger.jsonl"),
            format!("{}\n{}\nnot json\n", line("c1"), line("../x")),
        )
        .unwrap();
        std::fs::write(dir.join("c1.ledger.jsonl"), line("g1") + "\n").unwrap();
        assert_eq!(tree_below(&dir, "p"), ["c1", "g1"]);
        assert!(tree_below(&dir, "g1").is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
