//! `loop list`, `loop status`, `loop logs`, `loop cancel`: the store, read
//! (and, for cancel, asked) from any process while tasks run.

use crate::CliError;
use crate::ui::story::Story;
use loop_core::Observer;
use loop_runtime::{ApplyState, Cancelled, Liveness, Runtime, TaskView};
use std::path::Path;
use std::time::Duration;

/// How `loop list`/`status` name a task's liveness.
fn live_name(t: &TaskView) -> &'static str {
    if t.waiting() {
        return "waiting: submitted, no runtime has taken it up yet";
    }
    match t.liveness() {
        Liveness::Running => "running",
        Liveness::Interrupted => "interrupted",
        Liveness::Over => "",
    }
}

/// `loop list`.
pub fn list(project: &Path, json: bool) -> Result<u8, CliError> {
    let runtime = Runtime::open(project)?;
    let tasks = runtime.tasks()?;
    // What each spent, as `loop status` counts it.
    let spent = |id: &str| runtime.status(id).map(|s| s.used).ok();
    let branches = loop_runtime::task_branches(project);
    let branch = |id: &str| {
        branches
            .iter()
            .any(|b| b == id)
            .then(|| format!("loop/{id}"))
    };
    let orphans: Vec<&String> = branches
        .iter()
        .filter(|b| !tasks.iter().any(|t| &&t.id == b))
        .collect();
    if json {
        for t in &tasks {
            crate::ui::say_json(&loop_runtime::views::ListLine {
                task: t,
                used: spent(&t.id),
                branch: branch(&t.id),
            })?;
        }
        return Ok(0);
    }
    if tasks.is_empty() {
        say!("no tasks in this project");
    }
    for t in &tasks {
        let state = match &t.outcome {
            Some(o) => o.words().to_string(),
            None => format!("{} ({})", t.state, live_name(t)),
        };
        let instruction: String = t
            .instruction
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        let usd = spent(&t.id).map_or_else(|| "?".into(), |u| format!("${:.4}", u.usd));
        say!(
            "{}  {:<28} {:>9}  {}  {}{}",
            t.id,
            state,
            usd,
            t.created,
            instruction,
            branch(&t.id).map_or_else(String::new, |b| format!("  [{b}]"))
        );
    }
    if !orphans.is_empty() {
        let names: Vec<String> = orphans.iter().map(|b| format!("loop/{b}")).collect();
        say!(
            "branches of no task here: {} (`loop gc` deletes them)",
            names.join(", ")
        );
    }
    Ok(0)
}

/// `loop gc`.
pub fn gc(project: &Path, dry_run: bool, json: bool) -> Result<u8, CliError> {
    let c = loop_runtime::gc(project, dry_run)?;
    if json {
        crate::ui::say_json(&c)?;
        return Ok(0);
    }
    let verb = if dry_run { "would delete" } else { "deleted" };
    for (b, why) in &c.branches {
        say!("{verb} branch {b}: {why}");
    }
    if c.pruned_worktrees {
        say!(
            "{} git's records of worktrees that no longer exist",
            if dry_run { "would prune" } else { "pruned" }
        );
    }
    for (d, bytes) in &c.dirs {
        say!(
            "{} {d} ({:.1} MiB)",
            if dry_run { "would remove" } else { "removed" },
            *bytes as f64 / 1048576.0
        );
    }
    if c.branches.is_empty() && c.dirs.is_empty() && !c.pruned_worktrees {
        say!("nothing to collect: every branch and directory here belongs to a task that needs it");
    } else {
        say!(
            "{} {} branch(es), {} director(ies), {:.1} MiB",
            if dry_run { "would free" } else { "freed" },
            c.branches.len(),
            c.dirs.len(),
            c.bytes() as f64 / 1048576.0
        );
    }
    Ok(0)
}

/// `loop gc --gone-projects` and `loop gc --forget-project PATH`.
pub fn gone_projects(forget: Option<&Path>, dry_run: bool, json: bool) -> Result<u8, CliError> {
    let gone = loop_runtime::gone_projects(forget, dry_run)?;
    if json {
        crate::ui::say_json(&gone)?;
        return Ok(0);
    }
    for g in &gone {
        let mib = g.bytes as f64 / 1048576.0;
        let (was, dir) = (g.was.display(), g.dir.display());
        match (g.removed, forget.is_some()) {
            (true, _) => say!(
                "removed {dir} ({mib:.1} MiB): the task workspaces of the project that was at {was}"
            ),
            (false, true) => say!(
                "would remove {dir} ({mib:.1} MiB): the task workspaces of the project that was at {was}"
            ),
            (false, false) => say!(
                "{was}: no project there now; its task workspaces are kept in {dir} ({mib:.1} MiB)"
            ),
        }
    }
    if forget.is_none() {
        match gone.len() {
            0 => say!("every project with task workspaces kept is where it was"),
            _ => say!(
                "a project moved elsewhere looks the same as one deleted, and its tasks still use these: \
                 `loop gc --forget-project PATH` removes those of the project that was at PATH"
            ),
        }
    }
    Ok(0)
}

/// `loop status ID`.
pub fn status(project: &Path, id: &str, json: bool) -> Result<u8, CliError> {
    let s = Runtime::open(project)?.status(id)?;
    if !json && s.apply == ApplyState::Interrupted {
        say!(
            "an apply or undo of task {id} was interrupted: `loop apply {id} --recover` settles it (so does the next apply, undo or discard)"
        );
    }
    if json {
        crate::ui::say_json(&s)?;
        return Ok(0);
    }
    let t = &s.task;
    say!("task {}", t.id);
    say!(
        "  instruction  {}",
        t.instruction.as_deref().unwrap_or_default()
    );
    match &t.outcome {
        Some(o) => say!(
            "  outcome      {}: {}",
            o.words(),
            t.reason.as_deref().unwrap_or_default()
        ),
        None => say!("  state        {} ({})", t.state, live_name(t)),
    }
    if let Some(pid) = t.owner_pid.filter(|_| t.running) {
        say!("  running in   pid {pid}");
    }
    for a in s.approvals.iter().filter(|a| a.status.decision().is_none()) {
        let what = if a.payload["kind"] == "checkpoint" {
            format!(
                "a checkpoint: {}",
                a.payload["detail"].as_str().unwrap_or_default()
            )
        } else {
            format!(
                "approval of `{}` (rule `{}`)",
                a.payload["detail"].as_str().unwrap_or_default(),
                a.payload["rule"].as_str().unwrap_or_default()
            )
        };
        say!("  waiting for  {what}: loop approve {} [--deny]", t.id);
    }
    if t.cancel_requested && t.outcome.is_none() {
        say!("  cancel       requested");
    }
    if let Some(d) = &s.dead_letter {
        say!(
            "  dead-lettered by queue `{}`: {} (loop resume {} runs it here)",
            d.queue,
            d.reason,
            t.id
        );
    }
    let u = s.used;
    say!(
        "  used         {} steps, {} tokens, ${:.4}, {} verification(s)",
        u.steps,
        u.tokens,
        u.usd,
        u.verifications
    );
    say!("  ledger       {} entries", t.entries);
    if let Some(p) = &t.parent {
        say!("  parent       {p} (a child task it delegated to)");
    }
    for c in &s.children {
        say!("  child        {} (counted above)", child_line(c));
    }
    let verified = t
        .outcome
        .is_some_and(|o| o.kind == loop_protocol::OutcomeKind::Verified);
    match s.apply {
        ApplyState::Applied => say!(
            "  change set   applied to the project (loop undo {} reverses it)",
            t.id
        ),
        ApplyState::NotApplied if verified => say!(
            "  change set   not applied (loop diff {0} shows it, loop apply {0} brings it home)",
            t.id
        ),
        _ => {}
    }
    if let Some(r) = &t.receipt {
        say!("  receipt      {r}");
    } else if t.waiting() {
        say!(
            "  waiting for  a worker (loop worker) or a server to take it up; loop resume {} runs it here instead",
            t.id
        );
    } else if t.interrupted {
        say!("  resume with  loop resume {}", t.id);
    }
    Ok(0)
}

/// `loop logs ID [--follow]`: the story, from the store.
pub fn logs(project: &Path, id: &str, follow: bool, json: bool) -> Result<u8, CliError> {
    let runtime = Runtime::open(project)?;
    runtime.task(id)?;
    let mut story = Story::new(json);
    let mut next = 0u64;
    // Ctrl-C stops the following, not the task.
    let stop = loop_runtime::interrupt::flag();
    let mut quiet_since = std::time::Instant::now();
    let mut said_quiet = false;
    loop {
        let recorded = runtime.events(id, next)?;
        for r in &recorded {
            story.on_event(&r.event);
            next = r.seq + 1;
        }
        if !follow {
            return Ok(0);
        }
        if stop.load(std::sync::atomic::Ordering::SeqCst) || loop_runtime::interrupt::stopping() {
            eprintln!(
                "(stopped following; task {id} goes on: `loop logs {id} --follow` watches it again, `loop cancel {id}` stops it)"
            );
            return Ok(130);
        }
        if !recorded.is_empty() {
            quiet_since = std::time::Instant::now();
            said_quiet = false;
        } else if !json && !said_quiet && quiet_since.elapsed() >= Duration::from_secs(5) {
            // A long command records nothing until it ends: say the wait
            // is the task's, not a hang.
            eprintln!(
                "  … task {id} is working: nothing new recorded for 5 s (a command may be running)"
            );
            said_quiet = true;
        }
        let t = runtime.task(id)?;
        if t.liveness() == Liveness::Over && recorded.is_empty() {
            return Ok(0);
        }
        if recorded.is_empty() {
            if t.interrupted {
                eprintln!("(task {id} is interrupted; loop resume {id} continues it)");
                return Ok(1);
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// An outcome's name, or nothing when the store holds none.
fn named(outcome: &Option<loop_protocol::OutcomeName>) -> String {
    outcome.map(|o| o.words().to_string()).unwrap_or_default()
}

/// `loop cancel ID`: ask the running task to stop, and wait (up to 10 s)
/// until it has; an interrupted task is ended `cancelled` here.
pub fn cancel(project: &Path, id: &str, json: bool) -> Result<u8, CliError> {
    let cancelled =
        Runtime::open(project)?.cancel(id, Duration::from_secs(10), &mut Story::new(json))?;
    if json {
        let code = u8::from(matches!(cancelled, Cancelled::AlreadyEnded(_)));
        let (result, outcome) = loop_runtime::views::cancel_result(&cancelled);
        let line = loop_runtime::views::CancelLine {
            task_id: id,
            result,
            outcome,
        };
        crate::ui::say_json(&line)?;
        return Ok(code);
    }
    match cancelled {
        Cancelled::AlreadyEnded(outcome) => {
            say!("task {id} has already ended: {}", named(&outcome));
            Ok(1)
        }
        Cancelled::EndedHere(report) => {
            say!("task {id}: {}", report.outcome);
            Ok(0)
        }
        Cancelled::Stopped(outcome, took) => {
            say!(
                "task {id}: {} ({:.1} s)",
                named(&outcome),
                took.as_secs_f64()
            );
            Ok(0)
        }
    }
}

/// `loop approve ID [--deny]`: answer the task's pending approval.
pub fn approve(
    project: &Path,
    id: &str,
    deny: bool,
    message: Option<&str>,
    json: bool,
) -> Result<u8, CliError> {
    let a = Runtime::open(project)?.answer(id, !deny, message)?;
    if json {
        crate::ui::say_json(&loop_runtime::views::AnswerLine {
            task_id: id,
            answer: loop_runtime::views::AnswerFields::of(&a, message),
        })?;
        return Ok(0);
    }
    say!(
        "{} `{}` (rule `{}`) for task {id}",
        a.status,
        a.payload["detail"].as_str().unwrap_or_default(),
        a.payload["rule"].as_str().unwrap_or_default()
    );
    Ok(0)
}

/// What a child task came to, in one line: its id, outcome (or state),
/// the paths it may write, and what it used.
pub(crate) fn child_line(c: &loop_runtime::ChildView) -> String {
    format!(
        "{} {} · writes {} · {} steps, {} tokens, ${:.4}",
        c.id,
        c.outcome
            .map_or_else(|| c.state.to_string(), |o| o.words().to_string()),
        c.writable.join(", "),
        c.used.steps,
        c.used.tokens,
        c.used.usd
    )
}
