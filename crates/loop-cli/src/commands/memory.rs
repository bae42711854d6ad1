//! `loop memory add|list|show|approve|forget`: the project's notes for
//! later tasks.

use crate::CliError;
use crate::commands::skills::project_of;

/// `loop memory …`: the project's notes for later tasks.
pub(crate) fn memory_cmd(action: crate::cli::MemoryAction, json: bool) -> Result<u8, CliError> {
    use crate::cli::MemoryAction as M;
    let by = "a person (the command line)";
    let notes = match action {
        M::Add {
            text,
            about,
            project,
        } => vec![loop_runtime::add_note(
            &project_of(&project)?,
            &text,
            &about,
            None,
            by,
        )?],
        M::List { all, project } => loop_runtime::list_notes(&project_of(&project)?, all, None)?,
        M::Show { id, project } => {
            vec![loop_runtime::show_note(&project_of(&project)?, &id, None)?]
        }
        M::Approve { id, project } => {
            vec![loop_runtime::approve_note(
                &project_of(&project)?,
                &id,
                None,
                by,
            )?]
        }
        M::Forget { id, project } => {
            vec![loop_runtime::forget_note(
                &project_of(&project)?,
                &id,
                None,
                by,
            )?]
        }
    };
    for n in &notes {
        if json {
            crate::ui::say_json(n)?;
            continue;
        }
        let d = crate::ui::screen::defang;
        let from = match n.body["source_task"].as_str() {
            Some(t) => format!(
                "from task {t} ({}, receipt {})",
                n.body["outcome"].as_str().unwrap_or("?"),
                n.body["receipt_sha256"]
                    .as_str()
                    .map_or("none", |s| s.get(..12).unwrap_or(s))
            ),
            None => format!("by {}", n.body["by"].as_str().unwrap_or("?")),
        };
        println!("{}  {:<11}  {}", n.id, n.status.as_str(), d(&from));
        println!("  {}", d(&n.text));
        if !n.about.is_empty() {
            println!("  about: {}", d(&n.about.join(", ")));
        }
    }
    if notes.is_empty() && !json {
        println!("no notes (the model's `remember` and `loop memory add` make them)");
    }
    Ok(0)
}
