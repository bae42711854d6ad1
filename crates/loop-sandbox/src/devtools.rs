//! A real browser in the sandbox: headless Chromium from the system's
//! packages, started as a [`Session`] (every layer a command gets, the
//! workspace's network rules included), and driven by the runtime over
//! the DevTools protocol on a pipe (`--remote-debugging-pipe`: the
//! sandboxed process's standard input and output, NUL-separated JSON).
//! No port is opened for it: only the runtime, holding the pipe, can
//! drive it.
//!
//! The browser reaches what its sandbox reaches: servers started in the
//! same session on its own 127.0.0.1 (never the host's), and, through the
//! egress proxy, only the hosts of the task's allow-list.

use crate::Session;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Why the browser could not be driven: what it said, or the step that
/// timed out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BrowserError(pub String);

impl BrowserError {
    /// Whether the step ran out of time.
    pub fn timed_out(&self) -> bool {
        self.0 == TIMED_OUT
    }
}

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

const TIMED_OUT: &str = "timed out";

/// What the session's shell says when the server command has ended (a
/// server that never answers need not be waited for).
pub const SERVER_ENDED: &str = "loop-browser: the server command ended";

/// The largest message taken from the browser.
const MAX_MESSAGE: usize = 64 << 20;

/// The shell command of a browser session: `serve` (if any) in the
/// background, its output discarded, saying [`SERVER_ENDED`] on standard
/// error when it ends; then Chromium on the pipe. With `proxy`, hosts
/// other than the sandbox's own loopback are asked of the egress proxy
/// (which refuses all but the allow-list); without, the sandbox has no
/// network beyond its loopback (or is the host's, where the task's is).
pub fn command(serve: Option<&str>, proxy: bool) -> String {
    let server = match serve {
        Some(s) => {
            format!("( ( {s}\n) </dev/null >/dev/null 2>&1; echo '{SERVER_ENDED}' >&2 ) &\n")
        }
        None => String::new(),
    };
    format!(
        "{server}exec chromium --headless=new --no-sandbox --disable-gpu --no-first-run --no-default-browser-check --disable-dev-shm-usage --disable-background-networking --disable-component-update --disable-sync --window-size=1280,800 {}--user-data-dir=\"${{TMPDIR:-/tmp}}/loop-browser\" --remote-debugging-pipe about:blank 3<&0 4>&1 </dev/null >/dev/null",
        if proxy {
            format!("--proxy-server={} ", crate::egress::PROXY_URL)
        } else {
            String::new()
        }
    )
}

/// A browser driven over a session's pipe, with one page.
pub struct Browser {
    session: Session,
    next: u64,
    buf: Vec<u8>,
    deadline: Instant,
    /// The page's DevTools session, once attached.
    page: Option<String>,
}

impl Browser {
    /// Drive the browser `session` runs (started with [`command`]).
    pub fn new(session: Session) -> Self {
        Browser {
            session,
            next: 0,
            buf: Vec::new(),
            deadline: Instant::now() + Duration::from_secs(30),
            page: None,
        }
    }

    /// Until when the next calls may take.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// The sandboxed session (its isolation, its standard error).
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// Stop the browser and whatever its session started.
    pub fn stop(&mut self) {
        self.session.stop();
    }

    /// Whether the server command of the session has ended.
    pub fn server_ended(&self) -> bool {
        self.session.stderr_tail().contains(SERVER_ENDED)
    }

    /// Send `method` to the browser (`page` false) or to its page, and
    /// wait for its answer, skipping events.
    pub fn call(&mut self, method: &str, params: Value, page: bool) -> Result<Value, BrowserError> {
        let session = if page { Some(self.page()?) } else { None };
        self.call_in(method, params, session.as_deref())
    }

    fn call_in(
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

    /// The page's DevTools session: a new tab, attached the first time.
    fn page(&mut self) -> Result<String, BrowserError> {
        if let Some(p) = &self.page {
            return Ok(p.clone());
        }
        let target = self.call_in("Target.createTarget", json!({"url": "about:blank"}), None)?;
        let target = target["targetId"].as_str().unwrap_or_default().to_string();
        let attached = self.call_in(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            None,
        )?;
        let page = attached["sessionId"]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| BrowserError::from("the browser gave no page"))?
            .to_string();
        self.page = Some(page.clone());
        Ok(page)
    }

    /// Open `url` in the page, again every 250 ms while it cannot be
    /// opened (a server still starting), until the deadline or the
    /// session's server has ended.
    pub fn navigate(&mut self, url: &str) -> Result<(), BrowserError> {
        // What the last attempt said: the answer when time runs out during
        // the next (a busy machine's browser may be slow to answer).
        let mut last: Option<String> = None;
        loop {
            let r = match self.call("Page.navigate", json!({"url": url}), true) {
                Ok(r) => r,
                Err(e) if e.timed_out() && last.is_some() => {
                    let said = last.unwrap_or_default();
                    return Err(format!("{url} could not be opened: {said}").into());
                }
                Err(e) => return Err(e),
            };
            if let Some(e) = r["errorText"].as_str().filter(|e| !e.is_empty()) {
                last = Some(e.to_string());
            }
            match r["errorText"].as_str() {
                None | Some("") => return Ok(()),
                Some(_) if self.server_ended() => {
                    return Err(format!(
                        "{url} could not be opened: the server command ended before it answered"
                    )
                    .into());
                }
                Some(_) if Instant::now() + Duration::from_millis(250) < self.deadline => {
                    std::thread::sleep(Duration::from_millis(250));
                }
                Some(e) => return Err(format!("{url} could not be opened: {e}").into()),
            }
        }
    }

    /// The value of a JavaScript `expression` in the page (its result
    /// as JSON), or the exception it threw.
    pub fn evaluate(&mut self, expression: &str) -> Result<Value, BrowserError> {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            true,
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            let said = e["exception"]["description"]
                .as_str()
                .or_else(|| e["text"].as_str())
                .unwrap_or("an exception");
            return Err(format!("the page's script failed: {said}").into());
        }
        Ok(r["result"]["value"].clone())
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
            if self.buf.len() > MAX_MESSAGE {
                return Err("the browser's message passed 64 MiB".into());
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TIMED_OUT.into());
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
