//! `browser`: a real browser the model drives, headless Chromium from the
//! system's packages in the task's sandbox (see
//! [`loop_sandbox::devtools`]). Offered only when the contract or the
//! Loopfile grants it ([`ToolBox::with_browser`]).
//!
//! The browser session sees the workspace read-only (a server it starts
//! may read the project, and what it writes lands in its private tmp,
//! never in the workspace: only the tools' choke point changes that), has
//! the task's network (its own 127.0.0.1, and the egress allow-list
//! through the proxy), and lives across calls until `close`, a new
//! `open` with `serve`, a crash or a call that runs out of time. A
//! server command given with `open` passes the exec policy as a
//! `run_command` would. Screenshots are kept as evidence, by digest, in
//! the task's evidence directory, and shown to a model that takes images.

use crate::ToolBox;
use loop_protocol::Observation;
use loop_protocol::observation::head_tail;
use loop_sandbox::ExecRequest;
use loop_sandbox::devtools::{Browser, BrowserError};
use loop_sandbox::redact::redact;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The tool's name.
pub const NAME: &str = "browser";

/// How long one call may take unless it says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a browser session lives at most (the task's deadline may cut
/// it shorter).
const LIFETIME: Duration = Duration::from_secs(3600);
/// Lines of the accessibility tree shown.
const MAX_TREE_LINES: usize = 400;
/// The longest address opened.
const MAX_URL: usize = 2048;

/// What the model asks of the browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    Open,
    Click,
    Type,
    Read,
    Screenshot,
    Close,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BrowserArgs {
    action: Action,
    url: Option<String>,
    serve: Option<String>,
    selector: Option<String>,
    text: Option<String>,
    timeout_secs: Option<u64>,
}

/// Why an address is not one the browser opens, if it is not.
pub(crate) fn url_problem(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Some(format!(
            "`{}` is not an http or https address; the browser opens only those",
            head_tail(url, 200)
        ));
    }
    if url.len() > MAX_URL || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Some(format!(
            "the address is longer than {MAX_URL} bytes or holds spaces or control characters"
        ));
    }
    None
}

impl ToolBox {
    /// `browser`: one action on the task's browser.
    pub(crate) fn browser(&self, id: &str, a: &BrowserArgs, approved: bool) -> Observation {
        let timeout = a
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT)
            .min(self.limits.command_timeout);
        let deadline = Instant::now() + timeout;
        let done = match a.action {
            Action::Open => return self.browser_open(id, a, approved, deadline),
            Action::Close => {
                let was = self.browser.borrow_mut().take().is_some();
                return Observation::ok(
                    id,
                    NAME,
                    if was {
                        "The browser and what its session started were stopped."
                    } else {
                        "No browser was open."
                    },
                    false,
                );
            }
            action => self.browser_act(id, action, a, deadline),
        };
        match done {
            Ok(o) => o,
            Err(e) => self.browser_failed(id, e),
        }
    }

    /// A call that failed: the browser is stopped if it ended, hung or
    /// can no longer be trusted to answer in order.
    fn browser_failed(&self, id: &str, e: BrowserError) -> Observation {
        let gone = e.timed_out()
            || e.0.starts_with("the browser ended")
            || e.0.starts_with("the browser's")
            || e.0.starts_with("the browser stopped");
        let mut said = format!("the browser call failed: {e}");
        if gone && let Some(mut b) = self.browser.borrow_mut().take() {
            let tail = b.session().stderr_tail();
            b.stop();
            if let Some(line) = tail.lines().rev().find(|l| !l.trim().is_empty()) {
                said.push_str(&format!(" (the browser said: {})", redact(line)));
            }
            said.push_str("; the browser was stopped: `open` starts it again");
        }
        Observation::error(id, NAME, said)
    }

    /// `open`: (re)start the browser, and its server if `serve` is given
    /// (after the exec policy), then open `url` and say what it shows.
    fn browser_open(
        &self,
        id: &str,
        a: &BrowserArgs,
        approved: bool,
        deadline: Instant,
    ) -> Observation {
        let Some(url) = a.url.as_deref() else {
            return Observation::error(id, NAME, "`open` needs a `url`");
        };
        if let Some(why) = url_problem(url) {
            return Observation::error(id, NAME, why);
        }
        if let Some(serve) = a.serve.as_deref() {
            if serve.trim().is_empty() {
                return Observation::error(id, NAME, "`serve` is empty");
            }
            if let Some(refusal) = self.policy_refusal_for(id, NAME, serve, approved) {
                return refusal;
            }
        }
        if a.serve.is_some() || self.browser.borrow().is_none() {
            // A new session: whatever the old one started is stopped.
            self.browser.borrow_mut().take();
            match self.start_browser(a.serve.as_deref()) {
                Ok(b) => *self.browser.borrow_mut() = Some(b),
                Err(why) => return Observation::error(id, NAME, why.0),
            }
        }
        let opened = (|| {
            let mut slot = self.browser.borrow_mut();
            let b = slot
                .as_mut()
                .ok_or_else(|| BrowserError::from("the browser is gone"))?;
            b.set_deadline(deadline);
            b.navigate(url)?;
            settle(b, deadline)?;
            shown(b, self.limits.max_shown_bytes)
        })();
        match opened {
            Ok(text) => Observation::ok(id, NAME, text, false),
            Err(e) => self.browser_failed(id, e),
        }
    }

    /// Start Chromium (and `serve`) in a session of the task's sandbox:
    /// the workspace read-only, the task's network.
    fn start_browser(&self, serve: Option<&str>) -> Result<Browser, BrowserError> {
        let mut req = ExecRequest::shell(String::new(), self.jail.root());
        req.workspace = Some(self.jail.root().to_path_buf());
        req.workspace_read_only = true;
        req.read_only_paths = self.jail.protected().existing(self.jail.root());
        req.net = self.net;
        req.timeout = LIFETIME;
        self.sandbox.apply(&mut req);
        let proxy = req.egress.is_some() && matches!(req.net, loop_sandbox::Net::None);
        req.program = loop_sandbox::Program::Shell(loop_sandbox::devtools::command(serve, proxy));
        loop_sandbox::spawn(&req)
            .map(Browser::new)
            .map_err(|e| BrowserError(format!("the browser could not start: {e}")))
    }

    /// `click`, `type`, `read` or `screenshot` on the open page.
    fn browser_act(
        &self,
        id: &str,
        action: Action,
        a: &BrowserArgs,
        deadline: Instant,
    ) -> Result<Observation, BrowserError> {
        let mut slot = self.browser.borrow_mut();
        let Some(b) = slot.as_mut() else {
            return Ok(Observation::error(
                id,
                NAME,
                "no page is open: call `browser` with `action: open` and a `url` first",
            ));
        };
        b.set_deadline(deadline);
        let max = self.limits.max_shown_bytes;
        let need = |what: &Option<String>, name: &str| {
            what.clone()
                .ok_or_else(|| BrowserError(format!("`{action:?}` needs `{name}`").to_lowercase()))
        };
        match action {
            Action::Click => {
                let selector = need(&a.selector, "selector")?;
                click(b, &selector)?;
                settle(b, deadline)?;
                Ok(Observation::ok(id, NAME, shown(b, max)?, false))
            }
            Action::Type => {
                let selector = need(&a.selector, "selector")?;
                let text = need(&a.text, "text")?;
                let value = type_into(b, &selector, &text)?;
                Ok(Observation::ok(
                    id,
                    NAME,
                    format!(
                        "typed into {selector}; it now holds {:?}",
                        head_tail(&redact(&value), 2000)
                    ),
                    false,
                ))
            }
            Action::Read => {
                let mut text = shown(b, max / 2)?;
                text.push_str("\n\naccessibility tree:\n");
                text.push_str(&head_tail(&tree(b)?, max / 2));
                Ok(Observation::ok(id, NAME, text, false))
            }
            _ => {
                drop(slot);
                self.screenshot(id)
            }
        }
    }

    /// `screenshot`: the page as PNG (JPEG when a PNG would be too large
    /// to show), kept as evidence and shown to a model that takes images.
    fn screenshot(&self, id: &str) -> Result<Observation, BrowserError> {
        use base64::Engine;
        let mut slot = self.browser.borrow_mut();
        let b = slot
            .as_mut()
            .ok_or_else(|| BrowserError::from("the browser is gone"))?;
        let url = b.evaluate("location.href")?;
        let mut bytes = Vec::new();
        for params in [
            json!({"format": "png"}),
            json!({"format": "jpeg", "quality": 60}),
        ] {
            let r = b.call("Page.captureScreenshot", params, true)?;
            bytes = base64::engine::general_purpose::STANDARD
                .decode(r["data"].as_str().unwrap_or_default())
                .map_err(|e| BrowserError(format!("the screenshot is not base64: {e}")))?;
            if bytes.len() as u64 <= crate::documents::MAX_IMAGE_BYTES {
                break;
            }
        }
        if bytes.len() as u64 > crate::documents::MAX_IMAGE_BYTES {
            return Err(format!(
                "the screenshot is {} bytes, more than the {} an image may be",
                bytes.len(),
                crate::documents::MAX_IMAGE_BYTES
            )
            .into());
        }
        drop(slot);
        let sha = loop_protocol::hash::sha256_hex(&bytes);
        let ext = if bytes.starts_with(b"\x89PNG") {
            "png"
        } else {
            "jpeg"
        };
        let name = format!("evidence/{sha}.{ext}");
        let kept = self.keep_evidence(&format!("{sha}.{ext}"), &bytes);
        let image = crate::documents::image_of(&name, bytes)
            .map_err(|e| BrowserError(format!("the screenshot is no image: {e}")))?;
        let mut said = format!(
            "screenshot of {}: {}, {} bytes, SHA-256 {}",
            url.as_str().unwrap_or("the page"),
            image.media_type,
            image.bytes,
            image.sha256
        );
        match kept {
            Ok(true) => said.push_str(", kept as the task's evidence"),
            Ok(false) => {}
            Err(e) => said.push_str(&format!(" (not kept as evidence: {e})")),
        }
        let mut o = Observation::ok(id, NAME, String::new(), false);
        let mut image = image;
        if self.images {
            said.push_str(" (shown with this result)");
        } else {
            // On the record all the same (by digest), shown to no model.
            image.data_base64.clear();
            said.push_str(". The model driving this task takes no images, so it is not shown to you: read the page with `action: read`.");
        }
        o.image = Some(Box::new(image));
        o.content = said;
        Ok(o)
    }

    /// Keep `bytes` as `name` in the task's evidence directory (`false`
    /// when the task keeps none).
    #[allow(clippy::disallowed_methods)] // the runtime's own evidence directory, never the workspace
    fn keep_evidence(&self, name: &str, bytes: &[u8]) -> std::io::Result<bool> {
        let Some(dir) = &self.evidence else {
            return Ok(false);
        };
        std::fs::create_dir_all(dir)?;
        loop_workspace::fsutil::write_atomic_with(&dir.join(name), bytes, self.sync)?;
        Ok(true)
    }
}

/// Wait until the page has loaded (or the deadline), a little after any
/// navigation a click or a script began.
fn settle(b: &mut Browser, deadline: Instant) -> Result<(), BrowserError> {
    std::thread::sleep(Duration::from_millis(150));
    loop {
        let state = match b.evaluate("document.readyState") {
            Ok(s) => s,
            // A page being replaced has no context to ask yet: loading.
            Err(e) if e.0.contains("context") => Value::Null,
            Err(e) => return Err(e),
        };
        if state == "complete" || Instant::now() + Duration::from_millis(100) >= deadline {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The page's address, title and visible text, within `max` bytes.
fn shown(b: &mut Browser, max: usize) -> Result<String, BrowserError> {
    let v = b.evaluate(
        "JSON.stringify({url: location.href, title: document.title, text: document.body ? document.body.innerText : ''})",
    )?;
    let v: Value = serde_json::from_str(v.as_str().unwrap_or("{}")).unwrap_or_default();
    let text = v["text"].as_str().unwrap_or_default();
    Ok(redact(&format!(
        "url: {}\ntitle: {}\n\nvisible text:\n{}",
        v["url"].as_str().unwrap_or_default(),
        v["title"].as_str().unwrap_or_default(),
        head_tail(text, max.saturating_sub(256).max(256))
    )))
}

/// A JavaScript string literal of `s`.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Click the middle of the first element `selector` matches, as a
/// person would (mouse events at its place, after scrolling it into view).
fn click(b: &mut Browser, selector: &str) -> Result<(), BrowserError> {
    let at = b.evaluate(&format!(
        "(() => {{ const e = document.querySelector({s}); if (!e) return null; e.scrollIntoView({{block: 'center', inline: 'center'}}); const r = e.getBoundingClientRect(); return {{x: r.left + r.width / 2, y: r.top + r.height / 2, w: r.width, h: r.height}}; }})()",
        s = js(selector)
    ))?;
    if at.is_null() {
        return Err(format!("no element matches {selector:?}").into());
    }
    if at["w"].as_f64().unwrap_or(0.0) <= 0.0 || at["h"].as_f64().unwrap_or(0.0) <= 0.0 {
        return Err(format!("the element {selector:?} matches is not visible").into());
    }
    let (x, y) = (at["x"].clone(), at["y"].clone());
    for (kind, extra) in [
        ("mouseMoved", json!({})),
        ("mousePressed", json!({"button": "left", "clickCount": 1})),
        ("mouseReleased", json!({"button": "left", "clickCount": 1})),
    ] {
        let mut p = json!({"type": kind, "x": x, "y": y});
        if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        b.call("Input.dispatchMouseEvent", p, true)?;
    }
    Ok(())
}

/// Focus the first element `selector` matches and type `text` into it;
/// what it then holds.
fn type_into(b: &mut Browser, selector: &str, text: &str) -> Result<String, BrowserError> {
    let s = js(selector);
    let focused = b.evaluate(&format!(
        "(() => {{ const e = document.querySelector({s}); if (!e) return 'none'; e.focus(); return document.activeElement === e ? 'ok' : 'unfocusable'; }})()"
    ))?;
    match focused.as_str() {
        Some("ok") => {}
        Some("none") => return Err(format!("no element matches {selector:?}").into()),
        _ => return Err(format!("the element {selector:?} matches cannot take input").into()),
    }
    b.call("Input.insertText", json!({"text": text}), true)?;
    let v = b.evaluate(&format!(
        "(() => {{ const e = document.querySelector({s}); return e ? String(e.value ?? e.textContent ?? '') : ''; }})()"
    ))?;
    Ok(v.as_str().unwrap_or_default().to_string())
}

/// The page's accessibility tree, a node a line (role and name),
/// indented by depth; nodes the browser ignores are skipped (their
/// children kept), as are text runs (the visible text says them).
fn tree(b: &mut Browser) -> Result<String, BrowserError> {
    let r = b.call("Accessibility.getFullAXTree", json!({}), true)?;
    let nodes = r["nodes"].as_array().cloned().unwrap_or_default();
    let by_id: std::collections::HashMap<&str, &Value> = nodes
        .iter()
        .filter_map(|n| n["nodeId"].as_str().map(|id| (id, n)))
        .collect();
    let mut out = Vec::new();
    // Depth-first from the root, bounded in lines and depth.
    let mut stack: Vec<(&Value, usize)> = nodes.first().map(|n| (n, 0)).into_iter().collect();
    let mut visited = 0;
    while let Some((n, depth)) = stack.pop() {
        visited += 1;
        if visited > nodes.len() {
            break;
        }
        if out.len() >= MAX_TREE_LINES {
            out.push(format!("… (more than {MAX_TREE_LINES} nodes)"));
            break;
        }
        let role = n["role"]["value"].as_str().unwrap_or_default();
        let shown = !n["ignored"].as_bool().unwrap_or(false)
            && !matches!(
                role,
                "" | "none" | "generic" | "InlineTextBox" | "StaticText"
            );
        let next = if shown { depth + 1 } else { depth };
        if shown {
            let name = n["name"]["value"].as_str().unwrap_or_default();
            let mut line = format!("{}{role}", "  ".repeat(depth.min(40)));
            if !name.is_empty() {
                line.push_str(&format!(" {:?}", head_tail(name, 200)));
            }
            out.push(line);
        }
        if let Some(children) = n["childIds"].as_array() {
            for c in children.iter().rev() {
                if let Some(child) = c.as_str().and_then(|c| by_id.get(c)) {
                    stack.push((child, next));
                }
            }
        }
    }
    Ok(redact(&out.join("\n")))
}
