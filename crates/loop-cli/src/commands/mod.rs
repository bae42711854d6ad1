//! Each subcommand's work: `dispatch` hands the parsed command to the
//! function that does it; the functions translate arguments into the
//! runtime's requests and its answers into what is printed.

pub(crate) mod demo;
pub(crate) mod eval;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod generated;
pub(crate) mod memory;
pub(crate) mod replay;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod settle;
pub(crate) mod show;
pub(crate) mod skills;
pub(crate) mod tasks;
pub(crate) mod tokens;
pub(crate) mod verify;

use crate::CliError;
use crate::cli::{Command, KeysAction, SchemaFormat};
use loop_runtime::Runtime;
use std::path::Path;

/// The full id of the task `id` names in `project` (a unique prefix, or
/// `last`).
fn full_id(project: &Path, id: &str) -> Result<String, CliError> {
    Ok(Runtime::open(project)?.resolve_id(id)?)
}

/// Hand `command` to the function that does its work; the exit code.
/// An exhaustive match that only delegates (docs/architecture.md names it).
pub(crate) fn dispatch(command: Command, json: bool) -> Result<u8, CliError> {
    match command {
        Command::Demo { dir } => Ok(if demo::demo(dir, json)? { 0 } else { 1 }),
        Command::Verify {
            receipt,
            pubkey,
            artifacts,
            integrity_only,
            allow_extra,
        } => verify::command(
            &receipt,
            (artifacts.as_deref(), pubkey.as_deref()),
            (integrity_only, allow_extra),
            json,
        ),
        Command::Exec(args) => exec::command(args, json),
        Command::Doctor { project } => exec::doctor(&project, json),
        Command::Replay { receipt } => replay::replay(&receipt, json),
        Command::CiCheck {
            base,
            head,
            pubkey,
            allow_uncovered,
            replay,
            project,
        } => replay::ci_check(
            loop_runtime::CiCheckRequest {
                project,
                base,
                head,
                pubkeys: pubkey,
                allow_uncovered,
                replay,
            },
            json,
        ),
        Command::Keys {
            action: KeysAction::Rotate,
            project,
            yes,
        } => settle::rotate_key(&project, yes, json),
        Command::Keys { action, .. } => files::keys(action == KeysAction::Show, json),
        Command::Apply {
            id,
            yes,
            trust_host_files,
            onto_head,
            recover,
            project,
        } => {
            let consent = loop_runtime::ApplyConsent {
                confirmed: yes,
                trust_host_files,
                onto_head,
            };
            settle::apply(&project, &id, (consent, recover), json)
        }
        Command::Undo {
            id,
            forget,
            project,
        } => settle::undo(&project, &id, forget, json),
        Command::Discard { id, project } => settle::discard(&project, &id, json),
        Command::List { project } => tasks::list(&project, json),
        Command::Gc {
            gone_projects,
            forget_project,
            dry_run,
            ..
        } if gone_projects || forget_project.is_some() => {
            tasks::gone_projects(forget_project.as_deref(), dry_run, json)
        }
        Command::Gc {
            project, dry_run, ..
        } => tasks::gc(&project, dry_run, json),
        Command::Diff {
            id,
            stat,
            no_pager,
            project,
        } => show::diff(&project, &full_id(&project, &id)?, stat, !no_pager, json),
        Command::Show { id, project } => show::show(&project, &full_id(&project, &id)?, json),
        Command::Status { id, project } => tasks::status(&project, &full_id(&project, &id)?, json),
        Command::Logs {
            id,
            follow,
            project,
        } => tasks::logs(&project, &full_id(&project, &id)?, follow, json),
        Command::Cancel { id, project } => tasks::cancel(&project, &full_id(&project, &id)?, json),
        Command::Approve {
            id,
            deny,
            message,
            project,
        } => tasks::approve(
            &project,
            &full_id(&project, &id)?,
            deny,
            message.as_deref(),
            json,
        ),
        Command::Resume(args) => run::resume(args, json),
        Command::Manifest { dir } => files::manifest(&dir, json),
        Command::Audit { project } => files::audit(&project, json),
        Command::Eval(args) => eval::eval(args, json),
        Command::Schema { format } => files::schema(match format {
            SchemaFormat::Contract => "contract",
            SchemaFormat::Loopfile => "loopfile",
        }),
        Command::Serve(args) => serve::serve(args),
        Command::Mcp { jobs, project } => serve::mcp(&project, jobs),
        Command::Tokens { action } => tokens::tokens_cmd(action, json),
        Command::Skills { action } => skills::skills_cmd(action, json),
        Command::Memory { action } => memory::memory_cmd(action, json),
        Command::Completions { shell } => generated::completions(shell, json),
        Command::Man => generated::man(json),
        Command::Cost {
            model,
            per_day,
            project,
        } => files::cost_per_day(&project, model.as_deref(), per_day, json),
        Command::Init {
            pattern,
            force,
            project,
        } => files::init(&project, pattern.as_deref(), force, json),
        Command::Validate { file, loopfile }
            if loopfile || file.file_name().is_some_and(|n| n == "Loopfile.yaml") =>
        {
            files::validate_loopfile(&file, json)
        }
        Command::Validate { file, .. } => files::validate_contract(&file, json),
        Command::Run(run) => run::run_command(run, None, json),
        Command::Submit {
            run,
            queue,
            queue_name,
        } => run::run_command(run, Some((run::queue_url(queue)?, queue_name)), json),
        Command::Worker(args) => serve::worker(args),
    }
}
