//! `loop demo`: the whole promise, offline, in one command.

use crate::CliError;
use crate::commands::verify;
use loop_protocol::{Contract, OutcomeKind};
use loop_runtime::TaskRequest;
use std::path::{Path, PathBuf};

const TASK: &str = include_str!("../../demo/task.yaml");
const SCRIPT: &str = include_str!("../../demo/script.yaml");
const TESTS: &str = include_str!("../../demo/project/tests/test_todo.py");
const README: &str = include_str!("../../demo/project/README.md");

/// Write the demo project and run it. Returns whether it ended verified
/// and its receipt verified.
#[allow(clippy::disallowed_methods)] // whether the directory the person named for the demo is free
pub fn demo(dir: Option<PathBuf>, json: bool) -> Result<bool, CliError> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!(
            "loop-demo-{}",
            loop_runtime::new_task_id(loop_core::Clock::now_ms(&loop_core::SystemClock))?
        )),
    };
    let project = dir.join("project");
    let write = |path: &Path, text: &str| -> Result<(), CliError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| CliError::usage(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(path, text)
            .map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))
    };
    if project.exists() {
        return Err(CliError::usage(format!(
            "{} already exists; give --dir a new directory",
            project.display()
        )));
    }
    write(&project.join("tests/test_todo.py"), TESTS)?;
    write(&project.join("README.md"), README)?;
    write(&dir.join("task.yaml"), TASK)?;
    write(&dir.join("script.yaml"), SCRIPT)?;
    let task_path = dir.join("task.yaml");
    let contract = Contract::from_yaml(TASK, &task_path.display().to_string())
        .map_err(|e| CliError::internal(format!("the built-in contract is invalid: {e}")))?;
    if !json {
        println!(
            "Loop Engine demo: a todo app is written, fails verification, is repaired, and is proven."
        );
        println!("project   {}", project.display());
        println!("contract  {}", task_path.display());
        println!("script    {}", dir.join("script.yaml").display());
    }
    // The demo's own project, not the repository it may sit in.
    let report = loop_runtime::Runtime::open_at(&project)?.start(
        TaskRequest {
            contract: loop_runtime::ContractInput::Given(Box::new(contract)),
            model: Some(format!("scripted:{}", dir.join("script.yaml").display())),
            isolation: loop_sandbox::IsolationLevel::Preferred,
            on_prompt: Some(loop_runtime::OnPrompt::Deny),
            via: loop_runtime::Via::Cli,
            ..Default::default()
        },
        &mut crate::ui::story::Story::watching(json, None, loop_runtime::OnPrompt::Deny),
    )?;
    if json {
        crate::ui::say_json(&loop_runtime::views::ReceiptLine {
            kind: "receipt",
            task_id: &report.task_id,
            path: &report.receipt,
            workspace: None,
            outcome: &report.outcome,
            notes: None,
        })?;
    } else {
        println!("\nreceipt   {}", report.receipt.display());
        println!("\n$ loop verify {}", report.receipt.display());
    }
    let verified = verify::verify_as(
        &report.receipt,
        (None, None),
        json.then_some(Some("verification")),
        (false, false),
    )?;
    Ok(verified && report.outcome.kind == OutcomeKind::Verified)
}
