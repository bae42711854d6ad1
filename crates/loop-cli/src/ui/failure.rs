//! How a failure is told: `error: …` with its hint for people, or one JSON
//! object `{"error":{"kind","message","location","hint"}}` on stderr with
//! `--json`; the exit code is the same either way.

/// A failure's parts, read from its text: the first `PATH:LINE:COL` it
/// names, its `hint:` lines apart, the rest as the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// What went wrong (hints removed).
    pub message: String,
    /// Where, when the text names a place (`file:line:col`).
    pub location: Option<String>,
    /// What to do, when the text says.
    pub hint: Option<String>,
}

/// Split a failure's text into message, location and hint.
pub fn parse(text: &str) -> Told {
    let mut message = Vec::new();
    let mut hints = Vec::new();
    for line in text.lines() {
        match line.trim_start().strip_prefix("hint: ") {
            Some(h) => hints.push(h.trim().to_string()),
            None => message.push(line),
        }
    }
    let message = message.join("\n").trim().to_string();
    let location = message.lines().find_map(location_of);
    Told {
        message,
        location,
        hint: (!hints.is_empty()).then(|| hints.join("\n")),
    }
}

/// `PATH:LINE:COL` (or `PATH:LINE`) at the start of `line`, if it is one.
fn location_of(line: &str) -> Option<String> {
    // PATH:LINE:COL: message — the path may hold colons of its own, so the
    // numbers are found from the first ": " back.
    let head = line.split(": ").next()?;
    let mut parts = head.rsplitn(3, ':');
    let last = parts.next()?;
    let middle = parts.next()?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // A file: no spaces, and a directory or a named extension (not an
    // address such as 127.0.0.1).
    let file = |p: &str| {
        !p.is_empty()
            && !p.contains(char::is_whitespace)
            && (p.contains('/')
                || p.rsplit_once('.').is_some_and(|(_, ext)| {
                    ext.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                }))
    };
    match parts.next() {
        Some(path) if digits(last) && digits(middle) && file(path) => Some(head.to_string()),
        _ if digits(last) && file(middle) => Some(head.to_string()),
        _ => None,
    }
}

/// The kind a failure's exit code says.
pub fn kind_of(code: u8) -> &'static str {
    match code {
        2 => "usage",
        3 => "internal",
        125 => "exec_failed",
        126 => "not_runnable",
        127 => "not_found",
        _ => "failed",
    }
}

/// Tell the failure on stderr, as JSON or for a person.
pub fn tell(json: bool, code: u8, text: &str) {
    let text = loop_sandbox::redact::scrub_literals(text);
    if json {
        let t = parse(&text);
        let line = loop_runtime::views::ErrorLine {
            error: loop_runtime::views::Failure {
                kind: kind_of(code),
                message: &t.message,
                location: t.location.as_deref(),
                hint: t.hint.as_deref(),
            },
        };
        eprintln!("{}", serde_json::to_string(&line).unwrap_or_default());
    } else {
        eprintln!("error: {}", crate::ui::screen::defang(&text));
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn location_and_hint_are_read_from_the_text() {
        let t = parse(
            "/tmp/bad.yaml:6:5: unknown key `bogus` in a criterion\n  hint: allowed here: id, text, checks, guard",
        );
        assert_eq!(t.location.as_deref(), Some("/tmp/bad.yaml:6:5"));
        assert_eq!(
            t.message,
            "/tmp/bad.yaml:6:5: unknown key `bogus` in a criterion"
        );
        assert_eq!(
            t.hint.as_deref(),
            Some("allowed here: id, text, checks, guard")
        );
        let t = parse("no task t-1 in /p");
        assert_eq!((t.location, t.hint), (None, None));
        assert_eq!(
            parse("Loopfile.yaml:3: bad").location.as_deref(),
            Some("Loopfile.yaml:3")
        );
        // A time or an address is not a place in a file.
        assert_eq!(parse("at 12:30: late").location, None);
        assert_eq!(parse("connect 127.0.0.1:8080: refused").location, None);
        assert_eq!(parse("127.0.0.1:8080: refused").location, None);
    }
}
