//! Diagnostics through `tracing`, off by default so the terminal story
//! stays clean: `-v` shows info, `-vv` debug, `-vvv` trace; `LOOP_LOG`
//! (`target=level,…`, e.g. `loop_sandbox::phases=debug`) chooses exactly.
//! Records of the `log` crate (ureq, rustls) come in through the same
//! filter. Every line is redacted before it reaches stderr: a provider's
//! headers or a model's text never print a credential.

use crate::CliError;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

/// Stderr, one scrubbed line at a time.
struct Scrubbing;

impl std::io::Write for Scrubbing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let clean = loop_sandbox::redact::scrub_literals(&loop_sandbox::redact::redact(&text));
        std::io::stderr().lock().write_all(clean.as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for Scrubbing {
    type Writer = Scrubbing;
    fn make_writer(&'a self) -> Self::Writer {
        Scrubbing
    }
}

/// The filter `verbose` and `LOOP_LOG` ask for; an unreadable `LOOP_LOG`
/// is an error naming it. A long-lived process (a server, a worker, an MCP
/// server) says its warnings by default: it has no story on a terminal,
/// and its errors tell a person to see its log.
pub fn filter(verbose: u8, env: Option<&str>, long_lived: bool) -> Result<Targets, CliError> {
    if let Some(spec) = env.filter(|s| !s.trim().is_empty()) {
        return spec.parse::<Targets>().map_err(|e| {
            CliError::usage(format!(
                "LOOP_LOG={spec}: {e} (expected `target=level,…` or a level)"
            ))
        });
    }
    let level = match verbose {
        0 if long_lived => tracing::Level::WARN,
        0 => return Ok(Targets::new()),
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    Ok(Targets::new().with_default(level))
}

/// Install the subscriber for this process (`long_lived`: a server, a
/// worker or an MCP server, see [`filter`]).
pub fn init(verbose: u8, long_lived: bool) -> Result<(), CliError> {
    let env = std::env::var("LOOP_LOG").ok();
    let targets = filter(verbose, env.as_deref(), long_lived)?;
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(Scrubbing)
        .with_ansi(false)
        .without_time()
        .with_target(true);
    tracing_subscriber::registry()
        .with(layer.with_filter(targets))
        .try_init()
        .map_err(|e| CliError::internal(format!("logging: {e}")))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::filter;
    use tracing::Level;
    use tracing_subscriber::filter::Targets;

    fn enabled(t: &Targets, target: &str, level: Level) -> bool {
        t.would_enable(target, &level)
    }

    #[test]
    fn quiet_by_default_and_louder_with_each_v() {
        let off = filter(0, None, false).unwrap();
        assert!(!enabled(&off, "loop_runtime", Level::ERROR));
        let v = filter(1, None, false).unwrap();
        assert!(enabled(&v, "loop_runtime", Level::INFO));
        assert!(!enabled(&v, "ureq", Level::DEBUG));
        let vv = filter(2, None, false).unwrap();
        assert!(enabled(&vv, "ureq", Level::DEBUG));
        assert!(!enabled(&vv, "rustls", Level::TRACE));
    }

    /// A server's warnings are its log: said without `-v` (its errors tell
    /// a person to see it), its chatter not.
    #[test]
    fn a_long_lived_process_says_its_warnings_by_default() {
        let served = filter(0, None, true).unwrap();
        assert!(enabled(&served, "loop_server", Level::WARN));
        assert!(enabled(&served, "loop_runtime", Level::ERROR));
        assert!(!enabled(&served, "loop_server", Level::INFO));
        let v = filter(1, None, true).unwrap();
        assert!(enabled(&v, "loop_server", Level::INFO));
    }

    #[test]
    fn loop_log_chooses_exactly_and_bad_text_is_named() {
        let t = filter(3, Some("loop_sandbox::phases=debug"), false).unwrap();
        assert!(enabled(&t, "loop_sandbox::phases", Level::DEBUG));
        assert!(
            !enabled(&t, "loop_runtime", Level::ERROR),
            "-v is overridden"
        );
        let e = filter(0, Some("loop_sandbox=loudest"), false).unwrap_err();
        assert!(
            e.to_string().contains("LOOP_LOG=loop_sandbox=loudest"),
            "{e}"
        );
    }
}
