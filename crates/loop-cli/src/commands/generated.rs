//! `loop completions SHELL` and `loop man`: text generated from the
//! command line's own definition.

use crate::CliError;
use crate::cli::Cli;
use loop_runtime::views::GeneratedLine;

/// `loop completions SHELL`.
pub(crate) fn completions(shell: clap_complete::Shell, json: bool) -> Result<u8, CliError> {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "loop", &mut out);
    print_generated(&out, json, GeneratedLine::Script)
}

/// `loop man`.
pub(crate) fn man(json: bool) -> Result<u8, CliError> {
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| CliError::internal(format!("the man page: {e}")))?;
    print_generated(&out, json, GeneratedLine::Man)
}

/// Print generated text (a completion script, a man page), or with
/// `json` an object holding it under its name (`said` makes it).
fn print_generated(
    out: &[u8],
    json: bool,
    said: fn(String) -> GeneratedLine,
) -> Result<u8, CliError> {
    use std::io::Write;
    if json {
        crate::ui::say_json(&said(String::from_utf8_lossy(out).into_owned()))?;
    } else {
        let _ = std::io::stdout().write_all(out);
    }
    Ok(0)
}
