//! `loop verify`: check a receipt offline, layer by layer.

use crate::CliError;
use loop_receipt::{KeyPair, SignatureStatus};
use loop_runtime::ReceiptCheck;
use std::path::Path;

/// What a verification found: whether the receipt holds, and whether the
/// task it records was verified.
#[derive(Debug, Clone, Copy)]
struct ReceiptVerdict {
    intact: bool,
    verified: bool,
    integrity_only: bool,
}

impl ReceiptVerdict {
    /// `loop verify R && deploy` ships only verified work: success needs
    /// both, unless only the receipt's integrity was asked about.
    fn ok(self) -> bool {
        self.intact && (self.verified || self.integrity_only)
    }
}

/// The receipt `given` names: a receipt's path, or (no such file being
/// there) a task of the project here by its id, a unique prefix of one, or
/// `last`.
#[allow(clippy::disallowed_methods)] // lstat of the path the person gave
pub(crate) fn receipt_named(given: &Path) -> Result<std::path::PathBuf, CliError> {
    if std::fs::symlink_metadata(given).is_ok() {
        return Ok(given.to_path_buf());
    }
    let text = given.to_string_lossy();
    let as_task = !text.contains('/') && !text.ends_with(".json");
    let found = as_task
        .then(|| loop_runtime::Runtime::open(Path::new(".")).ok())
        .flatten()
        .and_then(|rt| {
            let id = rt.resolve_id(&text).ok()?;
            rt.status(&id).ok()?.task.receipt
        });
    found.map(std::path::PathBuf::from).ok_or_else(|| {
        CliError::usage(format!(
            "{text}: no such receipt; give a receipt's path (`.loop/receipts/ID.receipt.json`), or, inside its project, a task's id or `last` (of a task that has ended)"
        ))
    })
}

/// `loop verify RECEIPT`: exit 0 when it holds (and, unless
/// `integrity_only`, records a verified task), else 1.
pub(crate) fn command(
    receipt: &Path,
    (artifacts, pubkey): (Option<&Path>, Option<&Path>),
    flags: (bool, bool),
    json: bool,
) -> Result<u8, CliError> {
    let receipt = &receipt_named(receipt)?;
    Ok(if verify(receipt, artifacts, pubkey, json, flags)? {
        0
    } else {
        1
    })
}

/// Verify and print; returns whether the receipt holds and (unless
/// `integrity_only`) records a verified task.
pub fn verify(
    receipt: &Path,
    artifacts: Option<&Path>,
    pubkey: Option<&Path>,
    json: bool,
    flags: (bool, bool),
) -> Result<bool, CliError> {
    verify_as(receipt, (artifacts, pubkey), json.then_some(None), flags)
}

/// [`verify`], its JSON line (`json`) led by `"kind": KIND` when a kind is
/// given (the demo's lines each say what they are).
pub(crate) fn verify_as(
    receipt: &Path,
    (artifacts, pubkey): (Option<&Path>, Option<&Path>),
    json: Option<Option<&'static str>>,
    (integrity_only, allow_extra): (bool, bool),
) -> Result<bool, CliError> {
    let check = loop_runtime::verify_receipt_with(receipt, artifacts, pubkey, allow_extra)?;
    let verdict = ReceiptVerdict {
        intact: check.intact,
        verified: check.verified,
        integrity_only,
    };
    if let Some(kind) = json {
        crate::ui::say_json(&to_json(&check, verdict, kind))?;
    } else {
        // A receipt from elsewhere is hostile input like any other.
        print!("{}", crate::ui::screen::defang(&render(&check, verdict)));
    }
    Ok(verdict.ok())
}

fn signature_line(check: &ReceiptCheck) -> String {
    let report = &check.report;
    let whose = &check.trusted;
    if let Some(k) = &check.revoked_signer {
        return format!(
            "REVOKED: signed by key {k}, which was revoked (see the receipt's addenda)"
        );
    }
    match &report.signature {
        SignatureStatus::Valid { .. } => format!("valid (Ed25519, {whose})"),
        SignatureStatus::Invalid { keyid } => format!(
            "INVALID: the signature by key {}… does not verify",
            &keyid[..16.min(keyid.len())]
        ),
        SignatureStatus::Unsigned => "UNSIGNED: the envelope carries no signature".into(),
        SignatureStatus::UnknownKey { keyids } => {
            let revoked = KeyPair::revoked();
            match keyids.iter().find(|k| revoked.contains(k)) {
                Some(k) => format!(
                    "REVOKED: signed by key {k}, which this machine revoked (see the receipt's addenda)"
                ),
                None => format!(
                    "UNKNOWN KEY: signed by key {}, not by {whose}: pass the signer's public key with --pubkey",
                    keyids.join(", ")
                ),
            }
        }
    }
}

/// Human report.
fn render(check: &ReceiptCheck, verdict: ReceiptVerdict) -> String {
    let report = &check.report;
    let mut s = format!("receipt    {}\n", report.receipt.display());
    s.push_str(&format!("signature  {}\n", signature_line(check)));
    let statement = match (&report.statement, report.statement_problems.as_slice()) {
        (Some(st), []) => format!(
            "ok (in-toto Statement v1, {} subjects, contract sha256:{})",
            st.subject.len(),
            &st.predicate.contract_sha256[..12.min(st.predicate.contract_sha256.len())]
        ),
        (_, problems) => format!("INVALID: {}", problems.join("; ")),
    };
    s.push_str(&format!("statement  {statement}\n"));
    if report.ledger_problems.is_empty() {
        s.push_str(&format!(
            "ledger     intact ({} entries, chained from genesis)\n",
            report.ledger_entries
        ));
    } else {
        s.push_str(&format!(
            "ledger     BROKEN: {}\n",
            report.ledger_problems.join("; ")
        ));
    }
    if !report.extra_artifacts.is_empty() {
        s.push_str(&format!(
            "artifacts  {}: {}\n",
            if check.intact {
                "extra, accepted by --allow-extra (not attested by the receipt)"
            } else {
                "EXTRA, not attested by the receipt (--allow-extra accepts them)"
            },
            report.extra_artifacts.join(", ")
        ));
    }
    if report.artifact_problems.is_empty() {
        s.push_str(&format!(
            "artifacts  ok ({} re-hashed)\n",
            report.artifacts_checked
        ));
    } else {
        s.push_str(&format!(
            "artifacts  DIFFER: {}\n",
            report.artifact_problems.join("; ")
        ));
    }
    if !report.tree_problems.is_empty() {
        s.push_str(&format!(
            "children   BROKEN: {}\n",
            report.tree_problems.join("; ")
        ));
    } else if !report.children.is_empty() {
        s.push_str(&format!(
            "children   ok ({} child receipts hold, each within its parent's authority: {})\n",
            report.children.len(),
            report
                .children
                .iter()
                .map(|c| format!("{} {}", c.task_id, c.outcome))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for stray in &check.stray_addenda {
        s.push_str(&format!("addendum   WARNING: {stray}\n"));
    }
    if let Some(st) = &report.statement {
        s.push_str(&format!(
            "contract   {}\n",
            loop_receipt::ContractProvenance::of(
                &st.predicate.contract,
                report.entries.first().as_slice()
            )
            .with_delegation(st.predicate.delegation.as_ref())
        ));
        s.push_str(&format!(
            "outcome    {} — {}\n",
            st.predicate.outcome, st.predicate.outcome.reason
        ));
    }
    let kind = report
        .statement
        .as_ref()
        .map(|st| st.predicate.outcome.to_string())
        .unwrap_or_default();
    s.push_str(&match (verdict.intact, verdict.verified, verdict.integrity_only) {
        (false, _, _) => "result     the receipt does NOT hold\n".to_string(),
        (true, true, _) => "result     the receipt holds and the task was verified\n".to_string(),
        (true, false, true) => format!(
            "result     the receipt holds (integrity only); the task ended {kind}, not verified\n"
        ),
        (true, false, false) => format!(
            "result     NOT VERIFIED: the task ended {kind}; the receipt itself holds (--integrity-only checks just that)\n"
        ),
    });
    s
}

fn to_json<'a>(
    check: &'a ReceiptCheck,
    verdict: ReceiptVerdict,
    kind: Option<&'static str>,
) -> loop_runtime::views::VerifyLine<'a> {
    use loop_runtime::views::{ArtifactsChecked, LedgerChecked, VerifyLine};
    let report = &check.report;
    VerifyLine {
        kind,
        receipt: report.receipt.display().to_string(),
        ok: verdict.ok(),
        intact: verdict.intact,
        // A receipt that does not hold proves nothing verified, whatever
        // its statement says.
        verified: verdict.intact && verdict.verified,
        integrity_only: verdict.integrity_only,
        signature: signature_line(check),
        statement_problems: &report.statement_problems,
        ledger: LedgerChecked {
            entries: report.ledger_entries,
            intact: report.ledger_problems.is_empty(),
            problems: &report.ledger_problems,
        },
        artifacts: ArtifactsChecked {
            checked: report.artifacts_checked,
            problems: &report.artifact_problems,
            extra: &report.extra_artifacts,
        },
        outcome: report.statement.as_ref().map(|s| &s.predicate.outcome),
        contract_provenance: report.statement.as_ref().map(|s| {
            loop_receipt::ContractProvenance::of(
                &s.predicate.contract,
                report.entries.first().as_slice(),
            )
            .with_delegation(s.predicate.delegation.as_ref())
        }),
        stray_addenda: &check.stray_addenda,
        children: loop_runtime::views::ChildrenChecked::of(report),
    }
}
