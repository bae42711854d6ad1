//! The `page` check: the project's server and a real browser, headless
//! Chromium from the system's packages, both started inside the check's
//! own sandbox on its fresh view of the workspace, so the browser reaches
//! only what that sandbox reaches (the server on the check's own
//! 127.0.0.1, never the host's). The runtime drives the browser over the
//! DevTools protocol on a pipe (`--remote-debugging-pipe`: the sandboxed
//! process's standard input and output, NUL-separated JSON), opens the
//! page once the server answers, and reads its title, visible text and
//! whether an element matches, until the page shows what the check
//! requires, settles without it, or the check's time is up.

use loop_protocol::contract::PageCheck;
use loop_sandbox::devtools::{Browser, BrowserError};
use serde_json::Value;
use std::time::{Duration, Instant};

/// What the browser said it shows, once loaded.
pub(crate) struct Seen {
    pub title: String,
    pub text: String,
    pub has: Option<bool>,
}

/// The command run in the check's sandbox: the server in the background,
/// then the browser on the pipe (its own output discarded, its errors
/// kept by the session).
pub(crate) fn command(p: &PageCheck, proxy: bool) -> String {
    loop_sandbox::devtools::command(Some(&p.serve), proxy)
}

/// Open the page in the browser of `session` and read it until it shows
/// what `p` requires (`Ok` with what it showed), settles without it
/// (`Ok` too: the caller judges), or time is up (`Err` naming the step).
pub(crate) fn read_page(
    browser: &mut Browser,
    p: &PageCheck,
    deadline: Instant,
) -> Result<Seen, BrowserError> {
    browser.set_deadline(deadline);
    let url = format!("http://127.0.0.1:{}{}", p.port, p.path);
    // The server may still be starting: open the page until it answers.
    browser.navigate(&url)?;
    let selector = p
        .element
        .as_ref()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .unwrap_or_else(|| "null".into());
    let expression = format!(
        "JSON.stringify({{ready: document.readyState, title: document.title, text: document.body ? document.body.innerText : '', has: {selector} === null ? null : !!document.querySelector({selector})}})"
    );
    let mut settled: Option<Instant> = None;
    loop {
        let r = browser.evaluate(&expression)?;
        let v: Value = serde_json::from_str(r.as_str().unwrap_or("{}")).unwrap_or_default();
        let seen = Seen {
            title: v["title"].as_str().unwrap_or_default().to_string(),
            text: v["text"].as_str().unwrap_or_default().to_string(),
            has: v["has"].as_bool(),
        };
        if v["ready"] == "complete" {
            // Loaded: what its scripts render has 2 s more to appear.
            let since = *settled.get_or_insert_with(Instant::now);
            if shows(p, &seen).is_none() || since.elapsed() >= Duration::from_secs(2) {
                return Ok(seen);
            }
        }
        if Instant::now() + Duration::from_millis(200) >= deadline {
            return Ok(seen);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What the page lacks of what `p` requires, or `None` when it shows it.
pub(crate) fn shows(p: &PageCheck, seen: &Seen) -> Option<String> {
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(t) = &p.title
        && seen.title != *t
    {
        return Some(format!("its title is {:?}, not {t:?}", seen.title));
    }
    if let Some(t) = &p.text
        && !squeeze(&seen.text).contains(&squeeze(t))
    {
        return Some(format!("it does not show {t:?}"));
    }
    if let Some(e) = &p.element
        && seen.has != Some(true)
    {
        return Some(format!("no element matches {e:?}"));
    }
    None
}
