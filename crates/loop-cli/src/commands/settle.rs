//! `loop apply`, `loop undo`, `loop discard` and `loop keys rotate`: what
//! becomes of a task's change set (and of the signing key), and the exit
//! code of how it settled.

use crate::CliError;
use crate::ui::story::Story;
use loop_runtime::Runtime;
use std::path::Path;

/// `loop apply ID` (`--recover`: finish or roll back one interrupted).
pub(crate) fn apply(
    project: &Path,
    id: &str,
    (consent, recover): (loop_runtime::ApplyConsent, bool),
    json: bool,
) -> Result<u8, CliError> {
    let runtime = Runtime::open(project)?;
    let id = runtime.resolve_id(id)?;
    let mut story = Story::new(json);
    if recover {
        let s = runtime.recover(&id, &mut story)?;
        return settled(s, &story, "recover", Some(&id));
    }
    let s = runtime.apply(&id, consent, &mut story)?;
    settled(s, &story, "apply", Some(&id))
}

/// `loop undo ID` (`--forget`: keep the change, forget how to undo it).
pub(crate) fn undo(project: &Path, id: &str, forget: bool, json: bool) -> Result<u8, CliError> {
    let runtime = Runtime::open(project)?;
    let id = runtime.resolve_id(id)?;
    let mut story = Story::new(json);
    if forget {
        let s = runtime.forget(&id, &mut story)?;
        return settled(s, &story, "forget", Some(&id));
    }
    let s = runtime.undo(&id, &mut story)?;
    settled(s, &story, "undo", Some(&id))
}

/// `loop discard ID`.
pub(crate) fn discard(project: &Path, id: &str, json: bool) -> Result<u8, CliError> {
    let runtime = Runtime::open(project)?;
    let id = runtime.resolve_id(id)?;
    let mut story = Story::new(json);
    let s = runtime.discard(&id, &mut story)?;
    settled(s, &story, "discard", Some(&id))
}

/// `loop keys rotate`: said plainly when the project does not exist
/// (nothing revoked).
pub(crate) fn rotate_key(project: &Path, yes: bool, json: bool) -> Result<u8, CliError> {
    let mut story = Story::new(json);
    let s = loop_runtime::rotate_key(project, yes, &mut story)?;
    settled(s, &story, "rotate", None)
}

/// The exit code of a settled change (0 done, 1 anything else), said as
/// JSON with `json` (the story told it otherwise).
fn settled(
    s: loop_runtime::Settled,
    story: &Story,
    action: &str,
    task: Option<&str>,
) -> Result<u8, CliError> {
    let code = match s {
        loop_runtime::Settled::Done => 0,
        loop_runtime::Settled::NothingChanged | loop_runtime::Settled::DoneButDiffers => 1,
    };
    if story.json() {
        let line = loop_runtime::views::SettledLine {
            action,
            task_id: task,
            result: s,
            notes: story.notes(),
        };
        crate::ui::say_json(&line)?;
    }
    Ok(code)
}
