//! What the model is told when verification rejects its work: the failing
//! checks and their evidence, bounded, so it can repair from facts.

use loop_protocol::observation::head_tail;
use loop_protocol::{Rejection, VerificationReport};

/// Bytes of each output stream shown to the model per failing check.
const EXCERPT_BYTES: usize = 1500;

/// Compose the feedback for a rejected verification.
pub fn rejection_feedback(
    report: &VerificationReport,
    rejection: &Rejection,
    claimed: bool,
) -> String {
    let mut s = String::new();
    if claimed {
        s.push_str(&format!(
            "Verification attempt {} rejected the finish claim: {rejection}.\n",
            report.attempt
        ));
    } else {
        s.push_str(&format!(
            "Verification attempt {} (after a change) is not passing yet: {rejection}.\n",
            report.attempt
        ));
    }
    s.push_str(&format!(
        "{} of {} criteria pass. Failing checks, each run on a fresh copy of the sealed workspace:\n",
        report.passed_criteria(),
        report.criteria.len()
    ));
    for ev in report.failing_checks() {
        s.push_str(&format!(
            "\n[{}] {}\n  failure: {}\n",
            ev.criterion,
            ev.check.describe(),
            ev.failure.as_deref().unwrap_or("failed")
        ));
        if let Some(code) = ev.exit_code {
            s.push_str(&format!("  exit code: {code}\n"));
        }
        for (name, stream) in [("stdout", &ev.stdout), ("stderr", &ev.stderr)] {
            if let Some(st) = stream
                && !st.excerpt.trim().is_empty()
            {
                s.push_str(&format!(
                    "  {name}:\n{}\n",
                    indent(&head_tail(&st.excerpt, EXCERPT_BYTES))
                ));
            }
        }
    }
    for a in report.missing_artifacts() {
        s.push_str(&format!(
            "\nrequired artifact missing: {} (it must be a regular file: a link or a directory there does not count)\n",
            a.path
        ));
    }
    s.push_str("\nRepair the cause, then call `finish` again.");
    s
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
