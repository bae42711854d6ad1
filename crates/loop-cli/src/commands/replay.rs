//! `loop replay RECEIPT`: re-run every check of a receipt's contract, in the
//! sandbox, on fresh snapshots of the exact tree the receipt verified, with
//! no model, and say whether the outcome reproduces.

use crate::CliError;
use std::path::Path;

/// Replay; exit 0 when every criterion comes out as recorded.
pub fn replay(receipt: &Path, json: bool) -> Result<u8, CliError> {
    let receipt = crate::commands::verify::receipt_named(receipt)?;
    let r = loop_runtime::replay(&receipt)?;
    let p = &r.statement.predicate;
    if json {
        let line = loop_runtime::views::ReplayLine::of(&r);
        crate::ui::say_json(&line)?;
        return Ok(if r.reproduced { 0 } else { 1 });
    }
    say!(
        "replaying task {} ({} criteria, no model)",
        p.task_id,
        p.contract.criteria.len()
    );
    for (was, now) in r.recorded.criteria.iter().zip(&r.replayed.criteria) {
        let mark = if now.passed { "✓" } else { "✗" };
        let agree = was.passed == now.passed;
        say!(
            "  {mark} {:<20} recorded {}, replayed {}{}",
            now.id,
            if was.passed { "pass" } else { "fail" },
            if now.passed { "pass" } else { "fail" },
            if agree { "" } else { "  ← differs" }
        );
        if agree {
            continue;
        }
        // What the replay saw, so a difference can be understood.
        for c in now.checks.iter().filter(|c| !c.passed) {
            say!(
                "      check {}: {}",
                c.index + 1,
                c.failure.as_deref().unwrap_or("failed")
            );
            for (name, s) in [("stdout", &c.stdout), ("stderr", &c.stderr)] {
                if let Some(s) = s
                    && !s.excerpt.trim().is_empty()
                {
                    say!(
                        "      {name}: {}",
                        s.excerpt.trim_end().replace('\n', "\n        ")
                    );
                }
            }
        }
    }
    say!(
        "outcome: recorded {}, replayed {}: {}",
        p.outcome,
        if r.accepted {
            "verified"
        } else {
            "not verified"
        },
        if r.reproduced {
            "reproduced"
        } else {
            "NOT reproduced"
        }
    );
    Ok(if r.reproduced { 0 } else { 1 })
}
