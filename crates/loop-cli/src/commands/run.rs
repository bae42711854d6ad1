//! `loop run`, `loop submit` and `loop resume`: a task asked for on the
//! command line, translated into the runtime's request, run here (or
//! queued), and how it ended said.

use crate::CliError;
use crate::cli::{OnPromptArg, ResumeArgs, RunArgs};
use crate::ui::story;
use loop_protocol::{Contract, OutcomeKind};
use loop_runtime::{OnPrompt, Runtime, TaskReport, TaskRequest};

/// `loop run`: resume interrupted tasks if asked, compile the contract from
/// the file and the flags, run it, and say how it ended.
pub(crate) fn run_command(
    run: RunArgs,
    queue: Option<(String, String)>,
    json: bool,
) -> Result<u8, CliError> {
    let RunArgs {
        instruction,
        checks,
        artifacts,
        task,
        pattern,
        skills,
        inputs,
        accept_contract,
        model,
        record,
        max_steps,
        max_tokens,
        budget_usd,
        timeout,
        project,
        yes,
        on_prompt,
        include_dirty,
        allow_vacuous,
        verify_on_change,
        isolation,
        resume_interrupted,
    } = run;
    if queue.is_some() && (resume_interrupted || record.is_some()) {
        return Err(CliError::usage(
            "loop submit queues one new task: --resume-interrupted and --record belong to loop run",
        ));
    }
    let on_prompt = OnPrompt::choose(on_prompt.map(OnPromptArg::mode), yes);
    let mut resumed_code = 0;
    if resume_interrupted {
        let runtime = Runtime::open(&project)?;
        for id in runtime.interrupted()? {
            let mut story = story::Story::watching(json, Some(runtime.project()), on_prompt);
            let report = runtime.run(&id, on_prompt, &mut story)?;
            resumed_code = resumed_code.max(report_end(&report, &story)?);
        }
        if instruction.is_none() && task.is_none() {
            return Ok(resumed_code);
        }
    }
    let inputs = read_inputs(&inputs)?;
    let runtime = Runtime::open(&project)?;
    // Submitted, the story goes to stderr: stdout is the task's id.
    let mut story = match &queue {
        Some(_) if !json => story::Story::new(json).on_stderr(),
        _ => story::Story::watching(json, Some(runtime.project()), on_prompt),
    };
    let request = TaskRequest {
        instruction,
        contract: match (pattern, task) {
            (Some(name), _) => loop_runtime::ContractInput::Pattern(name),
            (None, Some(file)) => loop_runtime::ContractInput::File(file),
            (None, None) => loop_runtime::ContractInput::None,
        },
        checks,
        artifacts,
        limits: loop_runtime::LimitOverrides {
            max_steps,
            max_tokens,
            budget_usd,
            timeout_secs: timeout,
        },
        accept_draft: accept_contract,
        model,
        record,
        verify_on_change,
        isolation: isolation.level(),
        include_dirty,
        base_commit: None,
        on_prompt: Some(on_prompt),
        allow_vacuous,
        owner: None,
        trigger: None,
        via: loop_runtime::Via::Cli,
        skills,
        inputs,
    };
    if let Some((url, name)) = queue {
        // The queue must answer before the task is stored.
        let q = loop_store::RedisQueue::open(
            &url,
            loop_store::QueueOptions {
                name: name.clone(),
                ..Default::default()
            },
        )
        .map_err(|e| CliError::usage(e.to_string()))?;
        let id = runtime.submit(request, &mut story)?;
        q.enqueue(&id, &id).map_err(|e| {
            CliError::usage(format!(
                "task {id} is stored but not queued ({e}); `loop resume {id}` runs it here"
            ))
        })?;
        if json {
            crate::ui::say_json(&loop_runtime::views::SubmittedLine {
                kind: "submitted",
                task_id: &id,
                queue: &name,
            })?;
        } else {
            println!("{id}");
        }
        return Ok(0);
    }
    let report = runtime.start(request, &mut story)?;
    Ok(report_end(&report, &story)?.max(resumed_code))
}

/// The queue `--queue` or LOOP_QUEUE_URL names.
pub(crate) fn queue_url(flag: Option<String>) -> Result<String, CliError> {
    flag.or_else(|| std::env::var("LOOP_QUEUE_URL").ok().filter(|u| !u.is_empty()))
        .ok_or_else(|| {
            CliError::usage(
                "no queue: give --queue redis://HOST:PORT or set LOOP_QUEUE_URL (loop run runs a task here, without one)",
            )
        })
}

pub(crate) fn read_contract(file: &std::path::Path) -> Result<Contract, CliError> {
    let text = loop_workspace::door::read_named_text(file, loop_workspace::door::MAX_PROJECT_FILE)
        .map_err(|e| CliError::usage(format!("cannot read the contract: {e}")))?;
    Contract::from_yaml(&text, &file.display().to_string())
        .map_err(|e| CliError::usage(e.to_string()))
}

/// Print how a task ended; its exit code (0 verified, 1 otherwise). With
/// JSON, the notes the run made (its warnings) are in the last line.
pub(crate) fn report_end(report: &TaskReport, story: &story::Story) -> Result<u8, CliError> {
    if story.json() {
        crate::ui::say_json(&loop_runtime::views::ReceiptLine {
            kind: "receipt",
            task_id: &report.task_id,
            path: &report.receipt,
            workspace: Some(&report.workspace),
            outcome: &report.outcome,
            notes: Some(story.notes()),
        })?;
    } else {
        story.said(&format!("receipt {}\n", report.receipt.display()));
        if let Some(next) = next_step(report) {
            story.said(&format!("next    {next}\n"));
        }
    }
    Ok(if report.outcome.kind == OutcomeKind::Verified {
        0
    } else {
        1
    })
}

/// What a person can do next with a task that ended as `report` did: look
/// at a verified change and apply it; give a task that reached a limit
/// more of that limit.
fn next_step(report: &TaskReport) -> Option<String> {
    use loop_protocol::LimitKind;
    let id = &report.task_id;
    match report.outcome.kind {
        OutcomeKind::Verified => Some(format!(
            "`loop diff {id}` shows the change; `loop apply {id}` puts it in the project"
        )),
        OutcomeKind::LimitReached => Some(format!(
            "`loop resume {id} {}` goes on from where it stopped",
            match report.outcome.limit {
                Some(LimitKind::Tokens) => "--add-tokens 50000",
                Some(LimitKind::Time) => "--add-secs 600",
                Some(LimitKind::Cost) => "--add-usd 1",
                Some(LimitKind::Steps) | None => "--add-steps 10",
            }
        )),
        _ => None,
    }
}

/// `loop resume ID`: run an interrupted task to its end here, or give one
/// that reached a limit more budget and let it go on.
pub(crate) fn resume(args: ResumeArgs, json: bool) -> Result<u8, CliError> {
    let ResumeArgs {
        id,
        add_steps,
        add_tokens,
        add_usd,
        add_secs,
        project,
        on_prompt,
        after_pid,
    } = args;
    let on_prompt = OnPrompt::choose(on_prompt.map(OnPromptArg::mode), false);
    let extension = extension_of(add_steps, add_tokens, add_usd, add_secs)?;
    if let Some(pid) = after_pid
        && !wait_for_exit(pid)
    {
        return Err(CliError::usage(format!(
            "process {pid}, which detached from the task, has not ended after a minute; the task was not taken over (loop resume {id} takes it over once it has)"
        )));
    }
    let runtime = Runtime::open(&project)?;
    let id = runtime.resolve_id(&id)?;
    let mut story = story::Story::watching(json, Some(runtime.project()), on_prompt);
    let report = match extension {
        Some(ext) => runtime.extend(&id, ext, on_prompt, &mut story)?,
        None => runtime.run(&id, on_prompt, &mut story)?,
    };
    report_end(&report, &story)
}

/// More budget from `loop resume`'s flags, if any was given.
fn extension_of(
    add_steps: Option<u32>,
    add_tokens: Option<u64>,
    add_usd: Option<f64>,
    add_secs: Option<u64>,
) -> Result<Option<loop_core::Extension>, CliError> {
    if add_usd.is_some_and(|x| !x.is_finite() || x < 0.0) {
        return Err(CliError::usage("--add-usd must be a non-negative number"));
    }
    Ok(
        (add_steps.is_some() || add_tokens.is_some() || add_usd.is_some() || add_secs.is_some())
            .then(|| loop_core::Extension {
                add_steps: add_steps.unwrap_or(0),
                add_tokens: add_tokens.unwrap_or(0),
                add_usd: add_usd.unwrap_or(0.0),
                add_secs: add_secs.unwrap_or(0),
            }),
    )
}

/// Wait until process `pid` has ended (at most a minute); whether it has.
fn wait_for_exit(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    for _ in 0..600 {
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

/// The files `--input` names, read as a person named them (a link they
/// made is followed; a FIFO or device is refused without blocking), each
/// at most the size a task takes.
fn read_inputs(paths: &[std::path::PathBuf]) -> Result<Vec<loop_runtime::InputFile>, CliError> {
    paths
        .iter()
        .map(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| CliError::usage(format!("--input {}: not a file", p.display())))?;
            let bytes = loop_workspace::door::read_named(p, loop_runtime::MAX_INPUT_BYTES as u64)
                .map_err(|e| CliError::usage(format!("--input {}: {e}", p.display())))?;
            Ok(loop_runtime::InputFile { name, bytes })
        })
        .collect()
}
