//! `loop verify`: check a receipt offline, layer by layer.

use crate::CliError;
use loop_receipt::{KeyPair, PublicKey, SignatureStatus, VerifyReport, verify_receipt};
use std::path::Path;

/// What a verification found: whether the receipt holds, and whether the
/// task it records was verified.
#[derive(Debug, Clone, Copy)]
struct Verdict {
    intact: bool,
    verified: bool,
    integrity_only: bool,
}

impl Verdict {
    /// `loop verify R && deploy` ships only verified work: success needs
    /// both, unless only the receipt's integrity was asked about.
    fn ok(self) -> bool {
        self.intact && (self.verified || self.integrity_only)
    }
}

/// Verify and print; returns whether the receipt holds and (unless
/// `integrity_only`) records a verified task.
pub fn verify(
    receipt: &Path,
    artifacts: Option<&Path>,
    pubkey: Option<&Path>,
    json: bool,
    integrity_only: bool,
) -> Result<bool, CliError> {
    let trusted = trusted_keys(pubkey)?;
    let report =
        verify_receipt(receipt, artifacts, &trusted).map_err(|e| CliError::usage(e.to_string()))?;
    // A revoked key stays revoked whoever passes it with --pubkey: this
    // machine's list, and revocation addenda beside the receipt signed by
    // a trusted key (the revoked key signs its own revocation).
    let mut keys = trusted.clone();
    if let Ok(Some(k)) = KeyPair::existing() {
        keys.push(k.public());
    }
    let revoked_here = loop_receipt::revoked_by_addenda(receipt, &keys);
    let whose = match (pubkey, trusted.first()) {
        (Some(_), Some(k)) => format!("the given key {}", k.keyid),
        (None, Some(k)) => format!("this machine's key {}", k.keyid),
        (_, None) => "no key (this machine has none yet)".to_string(),
    };
    let verdict = Verdict {
        intact: report.ok() && revoked_signer(&report, &revoked_here).is_none(),
        verified: report
            .statement
            .as_ref()
            .is_some_and(|s| s.predicate.outcome.kind == loop_protocol::OutcomeKind::Verified),
        integrity_only,
    };
    let ok = verdict.ok();
    if json {
        println!("{}", to_json(&report, verdict, &whose, &revoked_here));
    } else {
        print!("{}", render(&report, verdict, &whose, &revoked_here));
    }
    Ok(ok)
}

/// The keys a verification trusts: `--pubkey`, else this machine's own key.
pub fn trusted_keys(pubkey: Option<&Path>) -> Result<Vec<PublicKey>, CliError> {
    match pubkey {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CliError::usage(format!("--pubkey {}: {e}", p.display())))?;
            let key = PublicKey::parse(&text)
                .map_err(|e| CliError::usage(format!("--pubkey {}: {e}", p.display())))?;
            Ok(vec![key])
        }
        None => Ok(KeyPair::existing()
            .map_err(|e| CliError::usage(e.to_string()))?
            .map(|k| vec![k.public()])
            .unwrap_or_default()),
    }
}

/// The key id of a valid signature by a revoked key (revoked on this
/// machine, or by a trusted addendum beside the receipt).
fn revoked_signer(report: &VerifyReport, by_addenda: &[String]) -> Option<String> {
    match &report.signature {
        SignatureStatus::Valid { keyid }
            if KeyPair::revoked().contains(keyid) || by_addenda.contains(keyid) =>
        {
            Some(keyid.clone())
        }
        _ => None,
    }
}

fn signature_line(report: &VerifyReport, whose: &str, by_addenda: &[String]) -> String {
    if let Some(k) = revoked_signer(report, by_addenda) {
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
fn render(report: &VerifyReport, verdict: Verdict, whose: &str, by_addenda: &[String]) -> String {
    let mut s = format!("receipt    {}\n", report.receipt.display());
    s.push_str(&format!(
        "signature  {}\n",
        signature_line(report, whose, by_addenda)
    ));
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
    if let Some(st) = &report.statement {
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

fn to_json(
    report: &VerifyReport,
    verdict: Verdict,
    whose: &str,
    by_addenda: &[String],
) -> serde_json::Value {
    serde_json::json!({
        "receipt": report.receipt.display().to_string(),
        "ok": verdict.ok(),
        "intact": verdict.intact,
        "verified": verdict.verified,
        "integrity_only": verdict.integrity_only,
        "signature": signature_line(report, whose, by_addenda),
        "statement_problems": report.statement_problems,
        "ledger": {
            "entries": report.ledger_entries,
            "intact": report.ledger_problems.is_empty(),
            "problems": report.ledger_problems,
        },
        "artifacts": {
            "checked": report.artifacts_checked,
            "problems": report.artifact_problems,
        },
        "outcome": report.statement.as_ref().map(|s| &s.predicate.outcome),
    })
}
