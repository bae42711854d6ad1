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

/// `loop ci-check`: exit 0 when every receipt the pull request brings
/// holds, records a verified task and matches its diff, else 1.
pub fn ci_check(req: loop_runtime::CiCheckRequest, json: bool) -> Result<u8, CliError> {
    let r = loop_runtime::ci_check(&req)?;
    if json {
        crate::ui::say_json(&r)?;
        return Ok(if r.ok { 0 } else { 1 });
    }
    say!(
        "pull request {}..{}: {} receipt(s), trusting {}",
        &r.base[..12.min(r.base.len())],
        &r.head[..12.min(r.head.len())],
        r.receipts.len(),
        r.trusted
            .iter()
            .map(|k| &k[..16.min(k.len())])
            .collect::<Vec<_>>()
            .join(", ")
    );
    for c in &r.receipts {
        let mark = if c.problems.is_empty() { "✓" } else { "✗" };
        say!(
            "  {mark} {} (task {}): {} path(s){}",
            c.path,
            c.task_id.as_deref().unwrap_or("?"),
            c.covers.len(),
            match (c.problems.is_empty(), c.replayed) {
                (true, Some(true)) => {
                    ", verified, exactly the pull request's change, its checks pass again on it"
                }
                (true, _) => ", verified, exactly the pull request's change",
                _ => "",
            }
        );
        for p in &c.problems {
            say!("      {p}");
        }
        if let Some(at) = &c.began_elsewhere
            && c.replayed != Some(true)
        {
            say!(
                "      note: its task began at commit {}, which is not in this pull request's history: its checks passed on that tree, not this one (--replay runs them on this one)",
                &at[..12.min(at.len())]
            );
        }
    }
    for p in &r.problems {
        say!("  ✗ {p}");
    }
    if !r.uncovered.is_empty() && r.problems.is_empty() {
        say!("  (no receipt covers: {})", r.uncovered.join(", "));
    }
    say!(
        "{}",
        if r.ok {
            "the pull request's receipts hold and cover its change"
        } else {
            "the pull request's receipts do not establish its change"
        }
    );
    Ok(if r.ok { 0 } else { 1 })
}
