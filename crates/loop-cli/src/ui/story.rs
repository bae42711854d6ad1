//! Presentation: the story of a run for people, or JSON lines for programs.

use crate::ui::live::{Detach, LiveView};
use crate::ui::screen::Screen;
use loop_core::Observer;
use loop_protocol::observation::head_tail;
use loop_protocol::{ApprovalDecision, BudgetUse, Event, ObservationStatus, TaskState};
use std::collections::HashMap;
use std::io::Write;

/// Shows events as they are recorded: narration for people (live on a
/// terminal, plain lines elsewhere), or one JSON object per line for
/// programs.
pub struct Story {
    json: bool,
    /// Call id → a short description of the call, to narrate its observation.
    calls: HashMap<String, String>,
    /// The task's id (from its first event), for the hints printed.
    task_id: String,
    /// What stdout can show.
    screen: Screen,
    /// The spinner and status line, on a terminal while a task runs.
    view: Option<LiveView>,
    /// Where Ctrl-C's "detach" hands the task over, once it is known.
    detach: Option<Detach>,
    /// With `json`, the notes (kept for the command's JSON result).
    notes: Vec<String>,
    /// This run answers questions itself (`--yes`, `--on-prompt allow`
    /// or `deny`): a request is not told as waiting for `loop approve`.
    answered_here: bool,
    /// Narration goes to stderr (stdout carries one answer: `loop
    /// submit`'s task id).
    stderr: bool,
}

impl Story {
    /// A story printer; `json` selects JSON lines.
    pub fn new(json: bool) -> Self {
        Story {
            json,
            calls: HashMap::new(),
            task_id: "ID".into(),
            screen: Screen::of_stdout(),
            view: None,
            detach: None,
            notes: Vec::new(),
            answered_here: false,
            stderr: false,
        }
    }

    /// The lines for `event` (see [`narrate`]); a request this run answers
    /// itself is not told as waiting for `loop approve`.
    fn narrated(&self, event: &Event) -> String {
        match event {
            Event::ApprovalRequested { detail, rule, .. } if self.answered_here => format!(
                "  ⏸ `{}` needs approval (rule `{rule}`); this run answers it itself\n",
                one_line(detail, 60)
            ),
            Event::CheckpointRequested { reason, .. } if self.answered_here => format!(
                "\n⏸ checkpoint: {}; this run answers it itself\n",
                one_line(reason, 90)
            ),
            _ => narrate(event, &self.calls, &self.task_id),
        }
    }

    /// Whether this story speaks JSON.
    pub fn json(&self) -> bool {
        self.json
    }

    /// The notes kept in JSON mode (for the command's JSON result).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// A story of a task this process runs: on a terminal (and without
    /// `json`), a live view with a spinner and a status line, and Ctrl-C
    /// asking whether to cancel or detach (the task of `project`).
    pub fn watching(
        json: bool,
        project: Option<&std::path::Path>,
        on_prompt: loop_runtime::OnPrompt,
    ) -> Self {
        let mut story = Story::new(json);
        story.answered_here = matches!(
            on_prompt,
            loop_runtime::OnPrompt::Allow
                | loop_runtime::OnPrompt::Yes
                | loop_runtime::OnPrompt::Deny
        );
        if !json && story.screen.live {
            let view = LiveView::new(story.screen);
            let detach = project.map(|p| Detach {
                project: p.to_path_buf(),
                task_id: Default::default(),
                requested: Default::default(),
                on_prompt: match on_prompt {
                    loop_runtime::OnPrompt::Allow | loop_runtime::OnPrompt::Yes => "allow",
                    loop_runtime::OnPrompt::Deny => "deny",
                    loop_runtime::OnPrompt::Ask | loop_runtime::OnPrompt::Wait => "wait",
                },
            });
            // The Ctrl-C question is asked on stderr and answered on stdin.
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                crate::ui::live::watch_interrupts(view.clone(), detach.clone());
            }
            story.view = Some(view);
            story.detach = detach;
        }
        story
    }

    /// This story told on stderr, with no live view: stdout carries the
    /// command's one answer (`loop submit`'s task id).
    pub fn on_stderr(mut self) -> Self {
        use std::io::IsTerminal;
        self.stderr = true;
        self.view = None;
        self.screen = Screen::decide(std::io::stderr().is_terminal(), &|k| std::env::var_os(k));
        self
    }

    /// Write `text` where this story is told.
    fn put(&self, text: &str) {
        self.put_raw(&self.screen.render(text));
    }

    /// Write `text` where this story is told, as it is (a question, a
    /// contract to review: never fitted or cut).
    fn put_raw(&self, text: &str) {
        if self.stderr {
            let mut out = std::io::stderr().lock();
            let _ = write!(out, "{text}");
            let _ = out.flush();
        } else {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{text}");
            let _ = out.flush();
        }
    }

    /// Text after the run (its live view gone), as this screen shows it:
    /// fitted to a terminal's width.
    pub fn said(&self, text: &str) {
        self.put(text);
    }

    /// Print narration: above the live view, or as plain lines.
    fn print(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        match &self.view {
            Some(view) => view.print(text),
            None => self.put(text),
        }
    }
}

impl Drop for Story {
    fn drop(&mut self) {
        if let Some(view) = &self.view {
            view.finish();
        }
    }
}

impl loop_runtime::Observer for Story {
    /// Narration only: JSON lines carry events, nothing else.
    fn note(&mut self, line: &str) {
        if self.json {
            self.notes.push(line.to_string());
        } else {
            self.print(&format!("{line}\n"));
        }
    }

    /// On a terminal, ask; elsewhere nobody can answer.
    fn confirm(&mut self, question: &str) -> Option<bool> {
        use std::io::IsTerminal;
        // With --json, stdout is for JSON: nobody is asked.
        if !std::io::stdin().is_terminal() || self.json {
            return None;
        }
        if let Some(v) = &self.view {
            v.pause();
        }
        self.put_raw(&format!("{question} [y/N] "));
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if let Some(v) = &self.view {
            v.resume();
        }
        Some(matches!(answer.trim(), "y" | "Y" | "yes"))
    }

    /// On a terminal: show the drafted contract, then accept, edit (in
    /// `$VISUAL`/`$EDITOR`, judged again) or reject it.
    fn review_contract(
        &mut self,
        contract: &str,
        edit_from: Option<&str>,
    ) -> loop_runtime::ContractReview {
        use loop_runtime::ContractReview;
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() || self.json {
            return ContractReview::Unanswered;
        }
        if let Some(v) = &self.view {
            v.pause();
        }
        self.put_raw(&format!(
            "The drafted contract (the critic accepted it):\n{}\n",
            crate::ui::screen::defang(contract)
        ));
        if edit_from.is_some() {
            self.put_raw("(Your last edit, which the critic rejected, is what [e]dit opens.)\n");
        }
        let review = loop {
            self.put_raw("Lock it and start? [a]ccept, [e]dit, [r]eject: ");
            let mut answer = String::new();
            if std::io::stdin().read_line(&mut answer).unwrap_or(0) == 0 {
                break ContractReview::Unanswered;
            }
            match answer.trim() {
                "a" | "accept" => break ContractReview::Accept,
                "r" | "reject" => break ContractReview::Reject,
                "e" | "edit" => {
                    match crate::ui::prompt::edit_in_editor(edit_from.unwrap_or(contract)) {
                        Ok(text) => break ContractReview::Edited(text),
                        Err(e) => self.put_raw(&format!("{e}\n")),
                    }
                }
                "" => self.put_raw(
                    "type a to lock it and start, e to edit it, r to reject it (Ctrl-D keeps it in a file for later)\n",
                ),
                other => self.put_raw(&format!(
                    "`{}` is not an answer here: type a to lock it and start, e to edit it, r to reject it (Ctrl-D keeps it in a file for later)\n",
                    crate::ui::screen::defang(other)
                )),
            }
        };
        if let Some(v) = &self.view {
            v.resume();
        }
        review
    }

    /// The terminal (used only when stdin is one: `OnPrompt::Ask`).
    fn prompter(&mut self) -> Option<Box<dyn loop_runtime::Prompter>> {
        Some(Box::new(crate::ui::live::Terminal(self.view.clone())))
    }

    /// The live view, when there is one.
    fn live_feed(&mut self) -> Option<loop_protocol::LiveFeed> {
        let view = self.view.clone()?;
        Some(loop_protocol::LiveFeed::new(move |m| view.on_live(m)))
    }
}

impl Observer for Story {
    fn on_event(&mut self, event: &Event) {
        if let Event::TaskStarted { task_id, .. } = event {
            self.task_id = task_id.clone();
            if let Some(d) = &self.detach
                && let Ok(mut t) = d.task_id.lock()
            {
                *t = Some(task_id.clone());
            }
        }
        if let Event::ModelTurn { calls, .. } = event {
            for c in calls {
                self.calls
                    .insert(c.id.clone(), describe_call(&c.tool, &c.args));
            }
        }
        if self.json {
            let mut out = std::io::stdout().lock();
            if let Ok(line) = serde_json::to_string(event) {
                let _ = writeln!(out, "{line}");
            }
            let _ = out.flush();
            return;
        }
        let Some(view) = self.view.clone() else {
            self.print(&self.narrated(event));
            return;
        };
        if matches!(
            event,
            Event::ApprovalDecided { .. } | Event::CheckpointDecided { .. }
        ) {
            view.answered();
        }
        let text = match event {
            Event::Verified {
                report,
                accepted,
                rejection,
            } => verification(
                report,
                *accepted,
                rejection.as_deref(),
                view.take_checks_shown(),
            ),
            _ => self.narrated(event),
        };
        self.print(&text);
        let calls = &self.calls;
        view.on_event(event, &|id| calls.get(id).cloned().unwrap_or_default());
        if matches!(event, Event::Finished { .. }) {
            view.finish();
            return;
        }
        // The person asked to detach: this event is recorded, nothing is
        // in flight; hand over here.
        if let Some(d) = &self.detach
            && d.requested.load(std::sync::atomic::Ordering::SeqCst)
        {
            d.now(&view);
        }
    }

    fn live(&mut self, moment: &loop_protocol::Live) {
        if let Some(view) = &self.view {
            view.on_live(moment);
        }
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn one_line(s: &str, max: usize) -> String {
    let first = s.lines().next().unwrap_or("");
    let more = s.lines().nth(1).is_some();
    let mut t: String = first.chars().take(max).collect();
    if more || first.chars().count() > max {
        t.push('…');
    }
    t
}

fn describe_call(tool: &str, args: &serde_json::Value) -> String {
    let s = |k: &str| args.get(k).and_then(|v| v.as_str()).unwrap_or("");
    use loop_protocol::ToolName;
    match ToolName::from_name(tool) {
        Some(ToolName::ReadFile | ToolName::WriteFile | ToolName::EditFile) => {
            format!("{tool} {}", s("path"))
        }
        Some(ToolName::ListFiles) => format!(
            "list_files {}",
            args.get("path").and_then(|v| v.as_str()).unwrap_or(".")
        ),
        Some(ToolName::RunCommand) => format!("run_command `{}`", one_line(s("command"), 60)),
        Some(ToolName::Finish) => format!("finish \"{}\"", one_line(s("summary"), 60)),
        Some(ToolName::Delegate) => format!("delegate \"{}\"", one_line(s("instruction"), 60)),
        Some(ToolName::ApplyPatch) | None => tool.to_string(),
    }
}

/// The first lines of a task: its id, contract, limits and model.
fn started(
    task_id: &str,
    contract_sha256: &str,
    contract: &loop_protocol::Contract,
    model: &loop_protocol::ModelInfo,
) -> String {
    let l = &contract.limits;
    format!(
        "▶ task {task_id}\n  contract sha256:{} · {} criteria · limits {} steps, {} tokens, {} s\n  model {}:{}\n",
        short(contract_sha256),
        contract.criteria.len(),
        l.max_steps,
        l.max_tokens,
        l.timeout_secs,
        model.provider,
        model.name
    )
}

/// One call's observation: the call as proposed, a mark and what it says
/// (a command that ran but failed is a failure to see; where a gate found
/// the problem, file:line:col, is said, not left in the ledger).
fn observed(o: &loop_protocol::Observation, calls: &HashMap<String, String>) -> String {
    let (mark, detail) = match &o.status {
        ObservationStatus::Ok if o.tool == "run_command" && command_failed(&o.content) => {
            ("✗", one_line(&o.content, 70))
        }
        ObservationStatus::Ok => ("✓", one_line(&o.content, 70)),
        ObservationStatus::Refused { rule } => match refusal_place(&o.content) {
            Some(place) => ("⛔", format!("refused by {rule} at {place}")),
            None => ("⛔", format!("refused by {rule}")),
        },
        ObservationStatus::Error => ("✗", one_line(&o.content, 70)),
    };
    let call = calls
        .get(&o.call_id)
        .cloned()
        .unwrap_or_else(|| o.tool.clone());
    format!("  → {:<44} {mark} {detail}\n", one_line(&call, 44))
}

/// The narration of one event: one arm per event kind, each the line a
/// person reads for it.
pub fn narrate(event: &Event, calls: &HashMap<String, String>, task: &str) -> String {
    match event {
        Event::TaskStarted {
            task_id,
            contract_sha256,
            contract,
            model,
            ..
        } => started(task_id, contract_sha256, contract, model),
        Event::ModelTurn {
            step,
            thought,
            calls,
            ..
        } => model_turn(*step, thought.as_deref(), calls.is_empty()),
        Event::ModelMalformed { step, error, .. } => {
            format!(
                "\ncycle {step} · ✗ malformed answer: {}\n",
                one_line(error, 100)
            )
        }
        Event::Intent { .. } => String::new(),
        Event::CheckpointRequested { reason, .. } => format!(
            "\n⏸ checkpoint: {} — loop approve {task} [--message TEXT] to go on, --deny to stop\n",
            one_line(reason, 90)
        ),
        Event::CheckpointDecided {
            decision, message, ..
        } => checkpoint_decided(*decision, message.as_deref()),
        Event::Recovery {
            policy,
            attempt,
            detail,
            ..
        } => format!("  ↻ {policy} #{attempt}: {}\n", one_line(detail, 90)),
        Event::BudgetExtended {
            add_steps,
            add_tokens,
            add_usd,
            add_secs,
        } => format!(
            "\n＋ budget extended: +{add_steps} steps, +{add_tokens} tokens, +${add_usd:.2}, +{add_secs} s\n"
        ),
        Event::ApprovalRequested {
            approval_id,
            detail,
            rule,
            ..
        } => format!(
            "  ⏸ `{}` needs a person's approval (rule `{rule}`): loop approve {task} [--deny] ({approval_id})\n",
            one_line(detail, 60)
        ),
        Event::ApprovalDecided {
            decision,
            by,
            message,
            ..
        } => approval_decided(*decision, by.as_deref(), message.as_deref()),
        Event::Resumed { reason } => format!("\n↻ resumed: {reason}\n"),
        Event::Reviewed {
            attempt,
            verdict,
            reasons,
            ..
        } => format!(
            "  ⚖ checker on verification #{attempt}: {verdict} — {}\n",
            one_line(reasons, 100)
        ),
        Event::ModelFailed { step, error, .. } => {
            format!(
                "\ncycle {step} · ✗ no model answered: {}\n",
                one_line(error, 120)
            )
        }
        Event::ModelSilent { step, reason } => {
            format!("\ncycle {step} · the model has nothing more to say ({reason})\n")
        }
        Event::Delegated { child, .. } => format!(
            "  ⑂ child {}: {} · {} steps, {} tokens, ${:.4} (counted here) · writes {}\n",
            child.task_id,
            child.outcome,
            child.used.steps,
            child.used.tokens,
            child.used.usd,
            one_line(&child.authority.writable.join(", "), 60)
        ),
        Event::Observed { observation: o, .. } => observed(o, calls),
        Event::Verified {
            report,
            accepted,
            rejection,
        } => verification(report, *accepted, rejection.as_deref(), false),
        Event::Feedback { text, .. } => feedback(text),
        Event::Transition {
            to: TaskState::Terminal,
            reason,
            ..
        } => {
            // `limit_reached{steps}: …` as recorded, `limit reached
            // (steps): …` for a person.
            let said = match reason.split_once(": ") {
                Some((name, rest)) => match loop_protocol::OutcomeName::parse(name) {
                    Some(n) => format!("{}: {rest}", n.words()),
                    None => reason.clone(),
                },
                None => reason.clone(),
            };
            format!("\n■ {}\n", head_tail(&said, 300))
        }
        Event::Transition { .. } => String::new(),
        Event::Finished { used, .. } => finished(used),
    }
}

/// A model's turn: its cycle, its thought's first line, and whether it
/// proposed no action.
fn model_turn(step: u32, thought: Option<&str>, no_calls: bool) -> String {
    format!(
        "\ncycle {step}{}\n{}",
        thought.map_or_else(String::new, |t| format!(
            " · {}",
            one_line(&t.replace('\n', " "), 100)
        )),
        if no_calls {
            "  (no action proposed)\n"
        } else {
            ""
        }
    )
}

/// A checkpoint answered, with the person's message if any.
fn checkpoint_decided(decision: ApprovalDecision, message: Option<&str>) -> String {
    match message {
        Some(m) => format!("  ▶ checkpoint {decision}: {}\n", one_line(m, 80)),
        None => format!("  ▶ checkpoint {decision}\n"),
    }
}

/// An approval answered: by whom and with what message, where known.
fn approval_decided(decision: ApprovalDecision, by: Option<&str>, message: Option<&str>) -> String {
    format!(
        "  ▶ approval: {decision}{}{}\n",
        by.map_or_else(String::new, |b| format!(" (by {b})")),
        message.map_or_else(String::new, |m| format!(": \"{}\"", one_line(m, 80)))
    )
}

/// Feedback given to the model: failing evidence, or its first line.
fn feedback(text: &str) -> String {
    if text.starts_with("Verification") {
        "  ↩ failing evidence returned to the model\n".to_string()
    } else {
        format!("  ↩ {}\n", one_line(text, 80))
    }
}

/// What a finished task used.
fn finished(used: &BudgetUse) -> String {
    format!(
        "  used {} steps, {} tokens{}, ${:.4}, {} verification(s), {:.1} s\n",
        used.steps,
        used.tokens,
        if used.estimated { " (estimated)" } else { "" },
        used.usd,
        used.verifications,
        used.elapsed_ms as f64 / 1000.0
    )
}

/// The narration of a verification: its seal, each check (unless they
/// were shown one by one as they ran: then only failures' stderr), its
/// artifacts and its decision.
/// The lines of a failing check's output that say what failed: which test
/// (`FAIL: test_x`, `FAILED tests/…::test_x`, `--- FAIL: TestX`, `●`,
/// Rust's `panicked at`), and the assertion or error it ended with
/// (`AssertionError: …`, pytest's `E   …`, `left:`/`right:`), in their
/// order, then the runner's last line; the last three lines when nothing
/// is recognised.
fn telling_lines(excerpt: &str) -> Vec<&str> {
    let lines: Vec<&str> = excerpt.lines().filter(|l| !l.trim().is_empty()).collect();
    let which = |l: &str| {
        let t = l.trim_start();
        t.starts_with("FAIL:")
            || t.starts_with("ERROR:")
            || t.starts_with("FAILED ")
            || t.starts_with("--- FAIL:")
            || t.starts_with("● ")
            || t.contains("panicked at")
    };
    let what = |l: &str| {
        let t = l.trim_start();
        t.starts_with("E ")
            || t.starts_with("left:")
            || t.starts_with("right:")
            || t.starts_with("assertion")
            || t.split_once(": ")
                .is_some_and(|(head, _)| head.ends_with("Error") || head.ends_with("Exception"))
    };
    let mut picked: Vec<usize> = Vec::new();
    if let Some(i) = lines.iter().position(|l| which(l)) {
        picked.push(i);
    }
    picked.extend(
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| what(l))
            .map(|(i, _)| i)
            .take(2),
    );
    if picked.is_empty() {
        return lines.iter().rev().take(3).rev().copied().collect();
    }
    if let Some(last) = lines.len().checked_sub(1) {
        picked.push(last);
    }
    picked.sort_unstable();
    picked.dedup();
    picked.into_iter().map(|i| lines[i]).collect()
}

fn verification(
    report: &loop_protocol::VerificationReport,
    accepted: bool,
    rejection: Option<&str>,
    checks_shown: bool,
) -> String {
    let mut s = format!(
        "  ⧗ verification #{}: sealed {} files (root {}), each run check on its own fresh {}\n",
        report.attempt,
        report.files,
        short(&report.manifest_root),
        report.snapshot_method
    );
    for c in &report.criteria {
        for ev in &c.checks {
            let mark = if ev.passed { "✓" } else { "✗" };
            let status = ev.status();
            if !checks_shown {
                s.push_str(&format!(
                    "    {mark} {:<16} {:<44} {status} · {} ms\n",
                    c.id,
                    one_line(&ev.check.describe(), 44),
                    ev.duration_ms
                ));
            }
            // What failed: from stderr, or from stdout where the runner
            // writes its failures there (pytest, go test, cargo's tests).
            let said = |e: &Option<loop_protocol::StreamEvidence>| {
                e.as_ref().filter(|e| !e.excerpt.trim().is_empty()).cloned()
            };
            let shown = said(&ev.stderr)
                .map(|e| ("stderr", e))
                .or_else(|| said(&ev.stdout).map(|e| ("stdout", e)));
            if !ev.passed
                && let Some((stream, out)) = shown
            {
                if checks_shown {
                    s.push_str(&format!("    ✗ {} {stream}:\n", c.id));
                }
                for line in telling_lines(&out.excerpt) {
                    s.push_str(&format!("        {stream} │ {line}\n"));
                }
            }
        }
    }
    for a in &report.artifacts {
        if let Some(h) = &a.sha256 {
            s.push_str(&format!("    ✓ artifact {} sha256:{}\n", a.path, short(h)));
        } else {
            s.push_str(&format!(
                "    ✗ artifact {} missing (no regular file there)\n",
                a.path
            ));
        }
    }
    if accepted {
        s.push_str("  decision: accepted — every criterion passed\n");
    } else if let Some(r) = rejection {
        s.push_str(&format!("  decision: rejected — {r}\n"));
    }
    s
}

/// The `file:line:col` a gate's refusal starts with, if it does.
fn refusal_place(content: &str) -> Option<String> {
    let first = content.lines().next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // `Refused: FILE:LINE:COL: what`: the first part shaped like a place.
    first.split(": ").take(3).find_map(|head| {
        let mut parts = head.rsplitn(3, ':');
        let (col, line, file) = (parts.next()?, parts.next()?, parts.next()?);
        (digits(col) && digits(line) && !file.is_empty() && !file.contains(' '))
            .then(|| head.to_string())
    })
}

/// Whether a `run_command` observation reports a command that failed:
/// a non-zero exit, a signal, a timeout, a cancel.
fn command_failed(content: &str) -> bool {
    let first = content.lines().next().unwrap_or_default();
    match first.strip_prefix("exit ") {
        Some(rest) => !rest.starts_with("0 ") && rest != "0",
        None => {
            first.starts_with("killed by signal")
                || first.starts_with("timed out")
                || first.starts_with("cancelled")
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {

    #[test]
    fn a_failing_checks_own_lines_come_before_the_runners_summary() {
        use super::telling_lines;
        let unittest = "..F\n======================================================================\nFAIL: test_last (tests.test_app.T.test_last)\n----------------------------------------------------------------------\nTraceback (most recent call last):\n  File \"tests/test_app.py\", line 9, in test_last\n    self.assertEqual(app.last([1, 2]), 2)\nAssertionError: 1 != 2\n\n----------------------------------------------------------------------\nRan 3 tests in 0.001s\n\nFAILED (failures=1)\n";
        assert_eq!(
            telling_lines(unittest),
            [
                "FAIL: test_last (tests.test_app.T.test_last)",
                "AssertionError: 1 != 2",
                "FAILED (failures=1)"
            ]
        );
        let pytest = "F\n=== FAILURES ===\n___ test_last ___\n    def test_last():\n>       assert last([1, 2]) == 2\nE       assert 1 == 2\nE        +  where 1 = last([1, 2])\n=== short test summary info ===\nFAILED tests/test_app.py::test_last - assert 1 == 2\n1 failed in 0.01s\n";
        assert_eq!(
            telling_lines(pytest),
            [
                "E       assert 1 == 2",
                "E        +  where 1 = last([1, 2])",
                "FAILED tests/test_app.py::test_last - assert 1 == 2",
                "1 failed in 0.01s"
            ]
        );
        // Nothing recognised: the last three lines, as before.
        assert_eq!(telling_lines("a\nb\nc\nd\n"), ["b", "c", "d"]);
    }

    use super::{command_failed, refusal_place};

    #[test]
    fn a_gate_refusal_says_where() {
        assert_eq!(
            refusal_place("Refused: app.py:1:7: Python syntax error: missing `)`.").as_deref(),
            Some("app.py:1:7")
        );
        assert_eq!(refusal_place("tests/x.py is protected"), None);
    }

    #[test]
    fn a_command_that_failed_is_marked_as_failed() {
        assert!(!command_failed("exit 0 (0.01 s)\n--- stdout ---\nok"));
        for failed in [
            "exit 1 (0.01 s)",
            "exit 128 (0.20 s)",
            "killed by signal 9 (1.00 s)",
            "timed out after 5 s and was killed (5.00 s)",
            "cancelled; the command's process tree was killed (0.30 s)",
        ] {
            assert!(command_failed(failed), "{failed}");
        }
    }
}
