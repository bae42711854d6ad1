//! `loop` — Loop Engine's command line. Argument parsing and presentation
//! only; the work happens in the library crates.

/// `println!` for text that may hold what a model or a command wrote (a
/// reason, an instruction, a check's output): defanged for the terminal.
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::ui::screen::defang(&format!($($arg)*)))
    };
}

mod cli;
mod commands;
mod logging;
mod ui;

use clap::Parser;
use cli::{Cli, Command};
use loop_runtime::interrupt;
use std::process::ExitCode;
use ui::failure;

/// A failure the binary reports: an exit code and a message with a hint.
#[derive(Debug)]
pub struct CliError {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl From<loop_runtime::Error> for CliError {
    fn from(e: loop_runtime::Error) -> Self {
        match e.kind {
            loop_runtime::ErrorKind::Usage
            | loop_runtime::ErrorKind::NotFound
            | loop_runtime::ErrorKind::Conflict => CliError::usage(e.message),
            loop_runtime::ErrorKind::Unavailable | loop_runtime::ErrorKind::Internal => {
                CliError::internal(e.message)
            }
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl CliError {
    /// Bad usage, configuration or input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
    /// An internal failure (exit 3).
    pub fn internal(message: impl Into<String>) -> Self {
        CliError {
            code: 3,
            message: message.into(),
        }
    }
}

fn main() -> ExitCode {
    // This binary is also the spawner its own commands are forked from
    // (see loop_sandbox::spawner): that process serves and exits here.
    loop_sandbox::spawner::serve_if_asked();
    loop_documents::bounded::serve_if_asked();
    slow_exit_fault();
    // `loop exec` starts a command at once: its line is parsed without
    // building every other subcommand's (see `ExecCli`).
    let exec_only = first_word_is("exec")
        .then(|| cli::ExecCli::parse_from(std::env::args_os()))
        .flatten();
    let cli = match exec_only.map_or_else(Cli::try_parse, Ok) {
        Ok(c) => c,
        Err(e) => return parse_failed(e),
    };
    // Commands are forked from a small spawner, never from this process
    // once it has grown; but `loop exec` of one command is small and
    // starts one process (a spawner would be a second). Its user and
    // network namespaces are made from here on, beside the rest of its
    // start (see `loop_sandbox::prepare_ahead`).
    loop_sandbox::spawner::enable(!matches!(&cli.command, Command::Exec(o) if o.repeat <= 1));
    if let Command::Exec(o) = &cli.command
        && o.repeat <= 1
    {
        let on = |layer: &str| !o.without.iter().any(|l| l == layer);
        // A command on the host's network makes no network namespace.
        let own_net = matches!(o.net, cli::NetArg::None);
        loop_sandbox::prepare_ahead(on("namespaces"), own_net);
    }
    // Output into a closed pipe (`loop demo | head`) ends the process
    // quietly, as it does for other command-line tools, not with a panic.
    // Not the long-lived ones: a server, a worker or an MCP server whose
    // reader went away (a supervisor that read the first line, a client
    // that left) must not die with the tasks it runs; to them a closed
    // pipe is an error they handle.
    if !long_lived(&cli.command) {
        // SAFETY: restoring the default disposition of one signal at start-up.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // The server ends on SIGTERM leaving its tasks resumable; everything
    // else turns Ctrl-C and SIGTERM into a cancel.
    if !long_lived(&cli.command) {
        interrupt::install();
    }
    if let Err(e) = logging::init(cli.globals.verbose, long_lived(&cli.command)) {
        // As for its flags: `loop exec`'s own failures are not the command's.
        let code = if matches!(cli.command, Command::Exec(_)) {
            125
        } else {
            2
        };
        failure::tell(cli.globals.json, code, &e.to_string());
        return ExitCode::from(code);
    }
    // Whatever credentials this process was given (provider keys, tokens)
    // are scrubbed, by value, from every record it writes.
    loop_sandbox::redact::register_environment();
    let json = cli.globals.json;
    loop_documents::bounded::enable();
    // A server or worker runs its tasks at nice +10, and a process cannot
    // lower its own priority again: its spawner is started now, at this
    // thread's, so each command can be given its asker's.
    if matches!(cli.command, Command::Serve(_) | Command::Worker(_)) {
        loop_sandbox::spawner::start_now();
    }
    if let Some(url) = &cli.globals.store {
        loop_runtime::set_store_url(url);
    }
    match commands::dispatch(cli.command, json) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            failure::tell(json, e.code, &e.message);
            ExitCode::from(e.code)
        }
    }
}

/// Whether the first argument that is not an option is `word` (a look
/// before the arguments are parsed: an option's value may be taken for
/// it, or hide it, which decides only which parser reads the line first).
fn first_word_is(word: &str) -> bool {
    std::env::args_os()
        .skip(1)
        .find(|a| !a.as_encoded_bytes().starts_with(b"-"))
        .is_some_and(|a| a == word)
}

/// For an unknown subcommand clap found nothing like (`loop rn`), the
/// subcommand one or two edits away from what was typed, if exactly one
/// is nearest.
/// Test-only fault injection (the `fault-injection` feature): this
/// process's exit takes `N` ms more once its spawner is closed (its
/// at-exit step runs after the spawner's, which is registered later), as
/// on a loaded machine, so what other threads do meanwhile shows
/// (`LOOP_FAULT_SLOW_EXIT_MS=N`).
#[cfg(feature = "fault-injection")]
fn slow_exit_fault() {
    extern "C" fn wait_a_while() {
        let ms = std::env::var("LOOP_FAULT_SLOW_EXIT_MS")
            .ok()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    if std::env::var_os("LOOP_FAULT_SLOW_EXIT_MS").is_some() {
        // SAFETY: registering a plain function to run at exit.
        unsafe { libc::atexit(wait_a_while) };
    }
}

/// Without the `fault-injection` feature nothing is injected.
#[cfg(not(feature = "fault-injection"))]
fn slow_exit_fault() {}

fn closest_subcommand(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::InvalidSubcommand
        || e.get(ContextKind::SuggestedSubcommand).is_some()
    {
        return None;
    }
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidSubcommand) else {
        return None;
    };
    // Only a top-level word (`loop rn`), not one under a subcommand.
    let first = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if first.as_deref() != Some(typed.as_str()) {
        return None;
    }
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut best: Vec<(usize, String)> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .map(|name| (edits(typed, &name), name))
        .filter(|(d, _)| *d <= 2)
        .collect();
    best.sort();
    match best.as_slice() {
        [(d, name)] => (*d > 0).then(|| name.clone()),
        [(d, name), (d2, _), ..] if d < d2 => Some(name.clone()),
        _ => None,
    }
}

/// Edits (insert, delete, replace) from `a` to `b`.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// A server, a worker or an MCP server: it runs its tasks until told to
/// stop, and a closed pipe or a signal is for it to handle.
fn long_lived(command: &Command) -> bool {
    matches!(
        command,
        Command::Serve(_) | Command::Worker(_) | Command::Mcp { .. }
    )
}

/// The arguments did not parse: said as clap says it (as JSON with
/// `--json`); `loop exec`'s own failures are 125.
fn parse_failed(e: clap::Error) -> ExitCode {
    // `loop exec` with bad flags is our failure, not the command's.
    // (args_os: an argument that is not UTF-8 is an error to report,
    // not a panic.)
    let exec = std::env::args_os().nth(1).is_some_and(|a| a == "exec");
    let json = std::env::args_os().any(|a| a == "--json");
    let nearest = closest_subcommand(&e);
    if json && e.use_stderr() {
        let code = if exec { 125 } else { e.exit_code() };
        let code = code.clamp(0, 255) as u8;
        let mut text = e.render().to_string();
        if let Some(n) = &nearest {
            text.push_str(&format!("\nhint: did you mean `loop {n}`?"));
        }
        // clap's own "For more information, try '--help'." is a hint.
        text = text.replace("For more information, try", "hint: for more, try");
        failure::tell(true, code, text.trim_start_matches("error: "));
        return ExitCode::from(code);
    }
    let _ = e.print();
    if let Some(n) = &nearest {
        eprintln!("hint: did you mean `loop {n}`?");
    }
    // The command goes after `--`: say so when it was left out.
    if exec
        && !std::env::args_os().any(|a| a == "--")
        && matches!(
            e.kind(),
            clap::error::ErrorKind::UnknownArgument
                | clap::error::ErrorKind::MissingRequiredArgument
        )
    {
        eprintln!("hint: give the command after `--`, e.g. `loop exec -- echo hi`");
    }
    let code = if exec && e.use_stderr() {
        125
    } else {
        e.exit_code()
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}
