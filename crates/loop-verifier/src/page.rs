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
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Why the browser could not be driven: what it said, or the step that
/// timed out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BrowserError(pub String);

impl From<String> for BrowserError {
    fn from(s: String) -> Self {
        BrowserError(s)
    }
}

impl From<&str> for BrowserError {
    fn from(s: &str) -> Self {
        BrowserError(s.to_string())
    }
}

/// What the browser said it shows, once loaded.
pub(crate) struct Seen {
    pub title: String,
    pub text: String,
    pub has: Option<bool>,
}

/// What the check's shell says when the server command has ended (a
/// server that never answers need not be waited for).
const SERVER_ENDED: &str = "loop-page: the server command ended";

/// The command run in the check's sandbox: the server in the background,
/// then the browser on the pipe (its own output discarded, its errors
/// kept by the session).
pub(crate) fn command(p: &PageCheck) -> String {
    format!(
        "( ( {} ) </dev/null >/dev/null 2>&1; echo '{SERVER_ENDED}' >&2 ) &\nexec chromium --headless=new --no-sandbox --disable-gpu --no-first-run --no-default-browser-check --disable-dev-shm-usage --user-data-dir=\"${{TMPDIR:-/tmp}}/loop-page-browser\" --remote-debugging-pipe about:blank 3<&0 4>&1 </dev/null >/dev/null",
        p.serve
    )
}

/// A DevTools connection over a session's pipe.
struct Devtools<'s> {
    session: &'s mut loop_sandbox::Session,
    next: u64,
    buf: Vec<u8>,
    deadline: Instant,
}

impl Devtools<'_> {
    /// Send `method` (to the page's `session`, when given) and wait for
    /// its answer, skipping events.
    fn call(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, BrowserError> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        let stdin = self
            .session
            .stdin()
            .ok_or_else(|| BrowserError::from("the browser's pipe is closed"))?;
        stdin
            .write_all(&bytes)
            .map_err(|e| BrowserError(format!("the browser stopped listening: {e}")))?;
        loop {
            let m = self.message()?;
            if m["id"].as_u64() == Some(id) {
                if let Some(e) = m.get("error") {
                    return Err(format!("the browser refused {method}: {e}").into());
                }
                return Ok(m["result"].clone());
            }
        }
    }

    /// The next message, within the deadline.
    fn message(&mut self) -> Result<Value, BrowserError> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == 0) {
                let raw: Vec<u8> = self.buf.drain(..=end).collect();
                return serde_json::from_slice(&raw[..end]).map_err(|e| {
                    BrowserError(format!("the browser said something unreadable: {e}"))
                });
            }
            if self.buf.len() > 64 << 20 {
                return Err("the browser's message passed 64 MiB".into());
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("timed out".into());
            }
            let out = self
                .session
                .stdout()
                .ok_or_else(|| BrowserError::from("the browser's pipe is closed"))?;
            let mut fds = libc::pollfd {
                fd: out.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(1000) as libc::c_int;
            // SAFETY: poll on one descriptor this session owns.
            let ready = unsafe { libc::poll(&mut fds, 1, ms) };
            if ready <= 0 {
                continue;
            }
            let mut chunk = [0u8; 65536];
            match out.read(&mut chunk) {
                Ok(0) => return Err("the browser ended".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("the browser's pipe failed: {e}").into()),
            }
        }
    }
}

/// Open the page in the browser of `session` and read it until it shows
/// what `p` requires (`Ok` with what it showed), settles without it
/// (`Ok` too: the caller judges), or time is up (`Err` naming the step).
pub(crate) fn read_page(
    session: &mut loop_sandbox::Session,
    p: &PageCheck,
    deadline: Instant,
) -> Result<Seen, BrowserError> {
    let mut dt = Devtools {
        session,
        next: 0,
        buf: Vec::new(),
        deadline,
    };
    let target = dt.call("Target.createTarget", json!({"url": "about:blank"}), None)?;
    let target = target["targetId"].as_str().unwrap_or_default().to_string();
    let attached = dt.call(
        "Target.attachToTarget",
        json!({"targetId": target, "flatten": true}),
        None,
    )?;
    let page = attached["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let url = format!("http://127.0.0.1:{}{}", p.port, p.path);
    // The server may still be starting: open the page until it answers.
    loop {
        let r = dt.call("Page.navigate", json!({"url": url}), Some(&page))?;
        match r["errorText"].as_str() {
            None | Some("") => break,
            Some(_) if dt.session.stderr_tail().contains(SERVER_ENDED) => {
                return Err(format!(
                    "{url} could not be opened: the server command ended before it answered"
                )
                .into());
            }
            Some(_) if Instant::now() + Duration::from_millis(250) < deadline => {
                std::thread::sleep(Duration::from_millis(250));
            }
            Some(e) => return Err(format!("{url} could not be opened: {e}").into()),
        }
    }
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
        let r = dt.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
            Some(&page),
        )?;
        let v: Value =
            serde_json::from_str(r["result"]["value"].as_str().unwrap_or("{}")).unwrap_or_default();
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
