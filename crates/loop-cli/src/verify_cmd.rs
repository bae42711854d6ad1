//! `loop verify`: check a receipt offline, layer by layer.

use crate::CliError;
use loop_receipt::{SignatureStatus, VerifyReport, verify_receipt};
use std::path::Path;

/// Verify and print; returns whether everything holds.
pub fn verify(
    receipt: &Path,
    artifacts: Option<&Path>,
    pubkey: Option<&Path>,
    json: bool,
) -> Result<bool, CliError> {
    let report = verify_receipt(receipt, artifacts).map_err(|e| CliError::usage(e.to_string()))?;
    // This build writes and checks no signatures, so a requested key can
    // never be satisfied, and signatures it cannot check are not trusted.
    let signature_ok = pubkey.is_none() && report.signature == SignatureStatus::Unsigned;
    let ok = report.ok() && signature_ok;
    if json {
        println!("{}", to_json(&report, ok, pubkey.is_some()));
    } else {
        print!("{}", render(&report, ok, pubkey.is_some()));
    }
    Ok(ok)
}

fn signature_line(report: &VerifyReport, key_requested: bool) -> String {
    match (&report.signature, key_requested) {
        (SignatureStatus::Unsigned, false) => {
            "unsigned (this build writes unsigned DSSE envelopes; integrity rests on the hashes below)".into()
        }
        (SignatureStatus::Unsigned, true) => "unsigned, but --pubkey asked for a signature: FAIL".into(),
        (SignatureStatus::Unchecked(n), _) => {
            format!("{n} signature(s) present, which this build cannot check: FAIL")
        }
    }
}

/// Human report.
pub fn render(report: &VerifyReport, ok: bool, key_requested: bool) -> String {
    let mut s = format!("receipt    {}\n", report.receipt.display());
    s.push_str(&format!(
        "signature  {}\n",
        signature_line(report, key_requested)
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
    s.push_str(if ok {
        "result     the receipt holds\n"
    } else {
        "result     the receipt does NOT hold\n"
    });
    s
}

fn to_json(report: &VerifyReport, ok: bool, key_requested: bool) -> serde_json::Value {
    serde_json::json!({
        "receipt": report.receipt.display().to_string(),
        "ok": ok,
        "signature": signature_line(report, key_requested),
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
