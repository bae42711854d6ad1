//! The terminal as the place a running task asks its person: approvals of
//! commands and checkpoints, answered inline (`loop approve` from another
//! terminal still works; whichever answers first wins).

use crate::CliError;
use std::sync::mpsc::Receiver;
use std::sync::{Mutex, OnceLock};

/// Lines typed at this terminal, read by one thread for the whole process.
fn terminal_lines() -> &'static Mutex<Receiver<String>> {
    static LINES: OnceLock<Mutex<Receiver<String>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            loop {
                let mut line = String::new();
                match stdin.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line.trim_end().to_string()).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Mutex::new(rx)
    })
}

/// Forget lines typed before a question: they are not its answer.
pub fn drain_lines() {
    if let Ok(rx) = terminal_lines().lock() {
        while rx.try_recv().is_ok() {}
    }
}

/// What the terminal gave within a wait.
pub enum Line {
    /// A line typed.
    Typed(String),
    /// Nothing yet.
    Nothing,
    /// Nothing ever again: stdin is closed.
    Closed,
}

/// The next line typed at the terminal, waiting at most `wait`.
pub fn next_line(wait: std::time::Duration) -> Line {
    use std::sync::mpsc::RecvTimeoutError;
    let Ok(rx) = terminal_lines().lock() else {
        return Line::Closed;
    };
    match rx.recv_timeout(wait) {
        Ok(line) => Line::Typed(line),
        Err(RecvTimeoutError::Timeout) => Line::Nothing,
        Err(RecvTimeoutError::Disconnected) => Line::Closed,
    }
}

/// A line typed and not yet read, if there is one (never waits).
pub fn typed_line() -> Option<String> {
    terminal_lines().lock().ok()?.try_recv().ok()
}

/// Let the person edit `text` in `$VISUAL` or `$EDITOR` (else `vi`); the
/// edited text, or why it could not be edited.
#[allow(clippy::disallowed_methods)] // the temporary file this command made for the editor
pub fn edit_in_editor(text: &str) -> Result<String, CliError> {
    use std::os::fd::AsFd;
    let path = std::env::temp_dir().join(format!(
        "loop-contract-{}.yaml",
        loop_sandbox::unique_name("edit").map_err(|e| CliError::internal(e.to_string()))?
    ));
    std::fs::write(&path, text)
        .map_err(|e| CliError::internal(format!("cannot write {}: {e}", path.display())))?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("editor")
        .arg(&path);
    // An editor draws on the terminal: where stdout is not one (`loop
    // submit`'s carries the task's id alone), on stderr's.
    {
        use std::io::IsTerminal;
        if !std::io::stdout().is_terminal()
            && std::io::stderr().is_terminal()
            && let Ok(err) = std::io::stderr().as_fd().try_clone_to_owned()
        {
            cmd.stdout(err);
        }
    }
    let status = cmd
        .status()
        .map_err(|e| CliError::usage(format!("cannot run the editor `{editor}`: {e}")))?;
    let edited = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    if !status.success() {
        return Err(CliError::usage(format!(
            "the editor `{editor}` ended with {status}; nothing changed"
        )));
    }
    edited.map_err(|e| CliError::internal(format!("cannot read the edit back: {e}")))
}
