//! `loop list`, `loop status`, `loop logs`, `loop cancel`: the store, read
//! (and, for cancel, asked) from any process while tasks run.

use crate::CliError;
use crate::story::Story;
use loop_core::Observer;
use loop_protocol::Event;
use loop_runtime::task::open_store;
use loop_store::{Store, TaskRecord};
use std::path::Path;
use std::time::Duration;

fn project_of(project: &Path) -> Result<std::path::PathBuf, CliError> {
    project
        .canonicalize()
        .map_err(|e| CliError::usage(format!("project {}: {e}", project.display())))
}

use loop_runtime::task::Liveness;

fn live(t: &TaskRecord) -> Liveness {
    loop_runtime::task::liveness(t)
}

/// How `loop list`/`status` name a task's liveness.
fn live_name(t: &TaskRecord) -> &'static str {
    match live(t) {
        Liveness::Running => "running",
        Liveness::Interrupted => "interrupted",
        Liveness::Over => "",
    }
}

fn summary_json(t: &TaskRecord) -> serde_json::Value {
    serde_json::json!({
        "id": t.id,
        "state": t.state,
        "outcome": t.outcome,
        "reason": t.reason,
        "running": live(t) == Liveness::Running,
        "interrupted": live(t) == Liveness::Interrupted,
        "owner_pid": t.owner.as_ref().map(|o| o.pid),
        "cancel_requested": t.cancel_requested,
        "instruction": t.request["contract"]["instruction"],
        "model": t.request["model"],
        "contract_sha256": t.contract_sha256,
        "entries": t.entries,
        "created": loop_protocol::time::rfc3339_millis(t.created_ms),
        "updated": loop_protocol::time::rfc3339_millis(t.updated_ms),
        "receipt": t.receipt,
    })
}

/// `loop list`.
pub fn list(project: &Path, json: bool) -> Result<u8, CliError> {
    let store = open_store(&project_of(project)?)?;
    let tasks = store
        .tasks()
        .map_err(|e| CliError::internal(e.to_string()))?;
    if json {
        for t in &tasks {
            println!("{}", summary_json(t));
        }
        return Ok(0);
    }
    if tasks.is_empty() {
        println!("no tasks in this project");
    }
    for t in &tasks {
        let state = match &t.outcome {
            Some(o) => o.clone(),
            None => format!("{} ({})", t.state, live_name(t)),
        };
        let instruction: String = t.request["contract"]["instruction"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        println!(
            "{}  {:<28} {}  {}",
            t.id,
            state,
            loop_protocol::time::rfc3339_millis(t.created_ms),
            instruction
        );
    }
    Ok(0)
}

/// `loop status ID`.
pub fn status(project: &Path, id: &str, json: bool) -> Result<u8, CliError> {
    let store = open_store(&project_of(project)?)?;
    let t = store.task(id).map_err(|e| CliError::usage(e.to_string()))?;
    // Budgets as recorded: the last `finished` event, or a running tally.
    let entries = store
        .entries(id, 0)
        .map_err(|e| CliError::internal(e.to_string()))?;
    let (mut steps, mut tokens, mut verifications) = (0u64, 0u64, 0u64);
    for e in &entries {
        match e.kind.as_str() {
            "model_turn" | "model_malformed" | "model_failed" => {
                steps += 1;
                let u = &e.payload["usage"];
                tokens += u["input_tokens"].as_u64().unwrap_or(0)
                    + u["output_tokens"].as_u64().unwrap_or(0);
            }
            "verified" => verifications += 1,
            _ => {}
        }
    }
    let mut v = summary_json(&t);
    v["used"] =
        serde_json::json!({"steps": steps, "tokens": tokens, "verifications": verifications});
    v["approvals"] =
        serde_json::to_value(store.approvals(id).unwrap_or_default()).unwrap_or_default();
    // Where the change set stands in the project (an apply killed midway
    // is said, not hidden behind "verified").
    let task_dir = project_of(project)?.join(".loop/tasks").join(id);
    let apply = if task_dir.join("apply-journal/pending").exists()
        || task_dir.join("applying").exists()
        || task_dir.join("undoing").exists()
    {
        "interrupted"
    } else if task_dir.join("applied").exists() {
        "applied"
    } else {
        "not applied"
    };
    v["apply"] = serde_json::Value::String(apply.into());
    if !json && apply == "interrupted" {
        println!(
            "an apply or undo of task {id} was interrupted: `loop apply {id} --recover` settles it (so does the next apply, undo or discard)"
        );
    }
    if json {
        println!("{v}");
        return Ok(0);
    }
    println!("task {}", t.id);
    println!(
        "  instruction  {}",
        v["instruction"].as_str().unwrap_or_default()
    );
    match &t.outcome {
        Some(o) => println!(
            "  outcome      {o}: {}",
            t.reason.as_deref().unwrap_or_default()
        ),
        None => println!("  state        {} ({})", t.state, live_name(&t)),
    }
    if let Some(o) = t.owner.as_ref().filter(|_| live(&t) == Liveness::Running) {
        println!("  running in   pid {}", o.pid);
    }
    for a in v["approvals"].as_array().into_iter().flatten() {
        if a["status"] == "pending" {
            let what = if a["payload"]["kind"] == "checkpoint" {
                format!(
                    "a checkpoint: {}",
                    a["payload"]["detail"].as_str().unwrap_or_default()
                )
            } else {
                format!(
                    "approval of `{}` (rule `{}`)",
                    a["payload"]["detail"].as_str().unwrap_or_default(),
                    a["payload"]["rule"].as_str().unwrap_or_default()
                )
            };
            println!("  waiting for  {what}: loop approve {} [--deny]", t.id);
        }
    }
    if t.cancel_requested && t.outcome.is_none() {
        println!("  cancel       requested");
    }
    println!("  used         {steps} steps, {tokens} tokens, {verifications} verification(s)");
    println!("  ledger       {} entries", t.entries);
    if let Some(r) = &t.receipt {
        println!("  receipt      {r}");
    } else if live(&t) == Liveness::Interrupted {
        println!("  resume with  loop resume {}", t.id);
    }
    Ok(0)
}

/// `loop logs ID [--follow]`: the story, from the store.
pub fn logs(project: &Path, id: &str, follow: bool, json: bool) -> Result<u8, CliError> {
    let store = open_store(&project_of(project)?)?;
    store.task(id).map_err(|e| CliError::usage(e.to_string()))?;
    let mut story = Story::new(json);
    let mut next = 0u64;
    loop {
        let entries = store
            .entries(id, next)
            .map_err(|e| CliError::internal(e.to_string()))?;
        for e in &entries {
            let event = Event::from_kind_payload(&e.kind, &e.payload)
                .map_err(|x| CliError::internal(format!("entry {}: {x}", e.seq)))?;
            story.on_event(&event);
            next = e.seq + 1;
        }
        if !follow {
            return Ok(0);
        }
        let t = store
            .task(id)
            .map_err(|e| CliError::internal(e.to_string()))?;
        if t.is_terminal() && entries.is_empty() {
            return Ok(0);
        }
        if entries.is_empty() {
            if live(&t) == Liveness::Interrupted {
                eprintln!("(task {id} is interrupted; loop resume {id} continues it)");
                return Ok(1);
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// `loop cancel ID`: ask the running task to stop, and wait (up to 10 s)
/// until it has; an interrupted task is ended `cancelled` here.
pub fn cancel(project: &Path, id: &str, json: bool) -> Result<u8, CliError> {
    use loop_runtime::task::Cancelled;
    let project = project_of(project)?;
    match loop_runtime::task::cancel(
        &project,
        id,
        Duration::from_secs(10),
        &mut crate::story::Story::new(json),
    )? {
        Cancelled::AlreadyEnded(outcome) => {
            println!("task {id} has already ended: {outcome}");
            Ok(1)
        }
        Cancelled::EndedHere(report) => {
            println!("task {id}: {}", report.outcome);
            Ok(0)
        }
        Cancelled::Stopped(outcome, took) => {
            println!("task {id}: {outcome} ({:.1} s)", took.as_secs_f64());
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
) -> Result<u8, CliError> {
    let a = loop_runtime::task::answer(&project_of(project)?, id, !deny, message)?;
    println!(
        "{} `{}` (rule `{}`) for task {id}",
        a.status,
        a.payload["detail"].as_str().unwrap_or_default(),
        a.payload["rule"].as_str().unwrap_or_default()
    );
    Ok(0)
}
