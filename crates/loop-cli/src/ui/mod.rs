//! What a person sees: the story of a task as it runs (`story`), the live
//! status line and Ctrl-C (`live`), questions on the terminal (`prompt`),
//! colour, glyphs and defanging (`screen`), and failures (`failure`).

pub(crate) mod failure;
pub(crate) mod live;
pub(crate) mod prompt;
pub(crate) mod screen;
pub(crate) mod story;

/// Print `body` as one JSON line (a `--json` output, typed in
/// `loop_runtime::views`). A body that cannot be said in JSON (a path that
/// is not UTF-8) is an error that says so, never an empty line.
pub(crate) fn say_json<T: serde::Serialize>(body: &T) -> Result<(), crate::CliError> {
    let line = serde_json::to_string(body).map_err(|e| {
        crate::CliError::usage(format!(
            "this cannot be said as JSON: {e} (run it without --json to see it)"
        ))
    })?;
    println!("{line}");
    Ok(())
}
