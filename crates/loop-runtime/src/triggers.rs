//! Triggers: the Loopfile's `triggers:` — a webhook whose deliveries,
//! verified by their HMAC-SHA256 signature and never accepted twice, each
//! start a task from the trigger's template, owned by the trigger's owner
//! and recorded in its ledger's genesis.
//!
//! ```yaml
//! triggers:
//!   - name: ci-failed
//!     webhook: { secret_env: LOOP_WEBHOOK_SECRET, style: github, owner: ci }
//!     task: { instruction: "Make the failing tests pass", checks: ["pytest -q"] }
//! ```
//!
//! `style: github` checks `X-Hub-Signature-256: sha256=HEX` over the body
//! and takes the delivery id from `X-GitHub-Delivery`. `style: hmac` checks
//! `X-Loop-Signature: sha256=HEX` over `TIMESTAMP.BODY`, with
//! `X-Loop-Timestamp` (Unix seconds) within five minutes of now and the
//! delivery id from `X-Loop-Delivery`.

use crate::{Error, Runtime};
use loop_protocol::yaml::{Node, Reader};

/// A trigger's keys.
pub(crate) const TRIGGER_KEYS: &[&str] = &["name", "webhook", "cron", "task"];
/// A webhook's keys.
pub(crate) const WEBHOOK_KEYS: &[&str] = &["secret_env", "style", "owner"];
/// A task template's keys.
pub(crate) const TEMPLATE_KEYS: &[&str] = &[
    "owner",
    "instruction",
    "checks",
    "artifacts",
    "model",
    "max_steps",
    "timeout_secs",
];
/// How long a signed timestamp stays good, each way.
const WINDOW_SECS: u64 = 300;

/// One trigger of the Loopfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// Its name (in the webhook's path).
    pub name: String,
    /// Its webhook, when it has one.
    pub webhook: Option<Webhook>,
    /// Its schedule, when it has one (its tasks belong to `owner`).
    pub cron: Option<Schedule>,
    /// The task each firing starts.
    pub task: TaskTemplate,
}

/// How a webhook's deliveries are authenticated and whose tasks they start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// The environment variable that holds the shared secret (never the
    /// secret itself in the Loopfile).
    pub secret_env: String,
    /// `github` or `hmac`.
    pub style: HookStyle,
    /// The owner of the tasks it starts.
    pub owner: String,
}

/// How a delivery is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStyle {
    /// GitHub's `X-Hub-Signature-256` over the body, `X-GitHub-Delivery`.
    Github,
    /// `X-Loop-Signature` over `TIMESTAMP.BODY`, `X-Loop-Timestamp`,
    /// `X-Loop-Delivery`.
    Hmac,
}

/// The task a trigger starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskTemplate {
    /// Its instruction.
    pub instruction: String,
    /// Its acceptance checks (shell commands that must exit 0).
    pub checks: Vec<String>,
    /// Files that must exist at the end.
    pub artifacts: Vec<String>,
    /// The model (default: the Loopfile's maker).
    pub model: Option<String>,
    /// Model turns allowed.
    pub max_steps: Option<u32>,
    /// Wall-clock seconds allowed.
    pub timeout_secs: Option<u64>,
    /// Who a scheduled task belongs to (a webhook's own `owner` wins).
    pub owner: Option<String>,
}

/// `triggers:`: a list of triggers, each named once.
pub(crate) fn read_triggers(r: &mut Reader, node: &Node) -> Vec<Trigger> {
    let mut out: Vec<Trigger> = Vec::new();
    for item in r.seq(node, "`triggers`").unwrap_or_default() {
        let Some(fields) = r.mapping(item, "a trigger", TRIGGER_KEYS) else {
            continue;
        };
        let mut name = None;
        let mut webhook = None;
        let mut cron = None;
        let mut task = None;
        for (k, v) in fields {
            match k.name.as_str() {
                "name" => name = r.string(v, "a trigger's `name`").map(|n| (n, v.pos)),
                "webhook" => webhook = read_webhook(r, v),
                "cron" => {
                    if let Some(text) = r.string(v, "`cron`") {
                        match Schedule::parse(&text) {
                            Ok(s) => cron = Some(s),
                            Err(why) => r.err(Some(v.pos), format!("cron `{text}`: {why}"), None),
                        }
                    }
                }
                _ => task = read_template(r, v),
            }
        }
        let Some((name, pos)) = name else {
            r.err(Some(item.pos), "a trigger needs a `name`".into(), None);
            continue;
        };
        let plain = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !plain {
            r.err(
                Some(pos),
                format!("trigger name `{name}`: lower-case letters, digits and `-` only"),
                None,
            );
            continue;
        }
        if out.iter().any(|t| t.name == name) {
            r.err(Some(pos), format!("trigger `{name}` is named twice"), None);
            continue;
        }
        if let Some(w) = &webhook
            && let Some(other) = out.iter().find(|t| {
                t.webhook
                    .as_ref()
                    .is_some_and(|o| o.secret_env == w.secret_env)
            })
        {
            r.err(
                Some(pos),
                format!(
                    "trigger `{name}` shares its secret ({}) with `{}`: a delivery signed for one would be taken by the other; give each its own",
                    w.secret_env, other.name
                ),
                None,
            );
            continue;
        }
        let Some(task) = task else {
            r.err(
                Some(item.pos),
                format!("trigger `{name}` needs a `task`"),
                None,
            );
            continue;
        };
        if webhook.is_none() && cron.is_none() {
            r.err(
                Some(item.pos),
                format!("trigger `{name}` needs a `webhook` or a `cron` schedule"),
                None,
            );
            continue;
        }
        if cron.is_some() && task.owner.is_none() && webhook.is_none() {
            r.err(
                Some(item.pos),
                format!("trigger `{name}`: a scheduled task needs an `owner` (in `task`)"),
                None,
            );
            continue;
        }
        out.push(Trigger {
            name,
            webhook,
            cron,
            task,
        });
    }
    out
}

fn read_webhook(r: &mut Reader, node: &Node) -> Option<Webhook> {
    let fields = r.mapping(node, "`webhook`", WEBHOOK_KEYS)?;
    let mut secret_env = None;
    let mut style = HookStyle::Hmac;
    let mut owner = None;
    for (k, v) in fields {
        match k.name.as_str() {
            "secret_env" => secret_env = r.string(v, "`secret_env`"),
            "style" => match r.string(v, "`style`").as_deref() {
                Some("github") => style = HookStyle::Github,
                Some("hmac") => style = HookStyle::Hmac,
                Some(other) => r.err(
                    Some(v.pos),
                    format!("webhook style `{other}`: `github` or `hmac`"),
                    None,
                ),
                None => {}
            },
            _ => owner = r.string(v, "`owner`"),
        }
    }
    match (secret_env, owner) {
        (Some(secret_env), Some(owner)) if !secret_env.is_empty() && !owner.trim().is_empty() => {
            Some(Webhook {
                secret_env,
                style,
                owner,
            })
        }
        _ => {
            r.err(
                Some(node.pos),
                "a webhook needs `secret_env` (the variable holding its secret) and `owner`".into(),
                None,
            );
            None
        }
    }
}

fn read_template(r: &mut Reader, node: &Node) -> Option<TaskTemplate> {
    let fields = r.mapping(node, "a trigger's `task`", TEMPLATE_KEYS)?;
    let mut t = TaskTemplate::default();
    for (k, v) in fields {
        match k.name.as_str() {
            "instruction" => t.instruction = r.string(v, "`instruction`").unwrap_or_default(),
            "owner" => t.owner = r.string(v, "`owner`").filter(|o| !o.trim().is_empty()),
            "checks" => t.checks = r.strings(v, "`checks`").unwrap_or_default(),
            "artifacts" => t.artifacts = r.strings(v, "`artifacts`").unwrap_or_default(),
            "model" => t.model = r.string(v, "`model`"),
            "max_steps" => {
                t.max_steps = r
                    .unsigned(v, "`max_steps`", 1)
                    .and_then(|n| u32::try_from(n).ok())
            }
            _ => t.timeout_secs = r.unsigned(v, "`timeout_secs`", 1),
        }
    }
    if t.instruction.trim().is_empty() || t.checks.is_empty() {
        r.err(
            Some(node.pos),
            "a trigger's task needs an `instruction` and `checks`".into(),
            None,
        );
        return None;
    }
    Some(t)
}

/// Why a delivery was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such trigger (or it has no webhook).
    Unknown,
    /// The signature, timestamp or delivery id does not hold.
    Unauthenticated(String),
    /// This delivery was taken before.
    Replayed(String),
    /// The trigger cannot work here (its secret is not set).
    Misconfigured(String),
    /// Authentic, and nothing to do (GitHub's `ping`).
    Ignored(String),
    /// Authentic, but over the trigger's rate: nothing taken.
    RateLimited,
}

/// Check `body` against its headers as `hook` signs; the delivery id and
/// the sender's event name.
pub fn authenticate(
    hook: &Webhook,
    secret: &[u8],
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    now_secs: u64,
) -> Result<Authenticated, Refusal> {
    let bad = |why: &str| Refusal::Unauthenticated(why.to_string());
    let sig_header = match hook.style {
        HookStyle::Github => "x-hub-signature-256",
        HookStyle::Hmac => "x-loop-signature",
    };
    let given = header(sig_header)
        .and_then(|s| s.strip_prefix("sha256=").map(str::to_string))
        .ok_or_else(|| bad(&format!("no `{sig_header}: sha256=…` header")))?;
    let (signed, delivery) = match hook.style {
        HookStyle::Github => (
            body.to_vec(),
            header("x-github-delivery").ok_or_else(|| bad("no X-GitHub-Delivery header"))?,
        ),
        HookStyle::Hmac => {
            let ts = header("x-loop-timestamp")
                .and_then(|t| t.trim().parse::<u64>().ok())
                .ok_or_else(|| bad("no X-Loop-Timestamp (Unix seconds) header"))?;
            if ts.abs_diff(now_secs) > WINDOW_SECS {
                return Err(bad("the timestamp is more than five minutes from now"));
            }
            let delivery =
                header("x-loop-delivery").ok_or_else(|| bad("no X-Loop-Delivery header"))?;
            // The delivery id is signed too: a captured request cannot be
            // sent again under another id.
            let mut m = format!("{ts}.{}.", delivery.trim()).into_bytes();
            m.extend_from_slice(body);
            (m, delivery)
        }
    };
    let want = loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(secret, &signed));
    let given = given.trim().to_ascii_lowercase();
    if !loop_protocol::hash::constant_time_eq(want.as_bytes(), given.as_bytes()) {
        return Err(bad("the signature does not match the body"));
    }
    let delivery = delivery.trim().to_string();
    if delivery.is_empty() || delivery.len() > 128 || delivery.chars().any(char::is_control) {
        return Err(bad("the delivery id is empty, too long or not plain text"));
    }
    let event = header("x-github-event").filter(|e| e.len() <= 64);
    Ok(Authenticated {
        delivery,
        event,
        signature: want,
    })
}

/// A delivery whose signature holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// Its id, as the sender gave it.
    pub delivery: String,
    /// The sender's event name (`X-GitHub-Event`), not signed.
    pub event: Option<String>,
    /// The signature it carried (what was signed, hashed with the secret):
    /// a request sent again carries it again, whatever its id.
    pub signature: String,
}

impl Runtime {
    /// Take a webhook delivery for trigger `name`: authenticate it, refuse
    /// a replay, and submit the trigger's task (owned by the webhook's
    /// owner, the delivery recorded in its genesis). The task's id; the
    /// caller runs it.
    pub fn take_delivery(
        &self,
        name: &str,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
        admit: &mut dyn FnMut() -> bool,
    ) -> Result<Result<String, Refusal>, Error> {
        let loopfile = crate::loopfile::Loopfile::load(self.project())?;
        let Some(t) = loopfile.triggers.iter().find(|t| t.name == name) else {
            return Ok(Err(Refusal::Unknown));
        };
        let Some(hook) = &t.webhook else {
            return Ok(Err(Refusal::Unknown));
        };
        let Some(secret) = std::env::var_os(&hook.secret_env).filter(|s| s.len() >= 16) else {
            tracing::warn!(
                "trigger `{name}`: its secret variable {} is not set (or shorter than 16 bytes) where the server runs",
                hook.secret_env
            );
            return Ok(Err(Refusal::Misconfigured(format!(
                "trigger `{name}` cannot take deliveries here (see the server's log)"
            ))));
        };
        let now_ms = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let Authenticated {
            delivery,
            event,
            signature,
        } = match authenticate(hook, secret.as_encoded_bytes(), header, body, now_ms / 1000) {
            Ok(d) => d,
            Err(r) => return Ok(Err(r)),
        };
        // GitHub's ping (sent when the hook is made) starts nothing.
        if event.as_deref() == Some("ping") {
            return Ok(Err(Refusal::Ignored("ping".into())));
        }
        // Only an authentic delivery spends the trigger's rate: junk
        // cannot lock its real sender out.
        if !admit() {
            return Ok(Err(Refusal::RateLimited));
        }
        // Taken once: by its id, and by its signature (the same request
        // under a new id is the same request).
        let store = self.store()?;
        let by_id = format!("hook {delivery}");
        let by_signature = format!("hook-signature {signature}");
        if !store
            .take_delivery(name, &by_signature, now_ms)
            .map_err(Error::from_cause)?
        {
            return Ok(Err(Refusal::Replayed(delivery)));
        }
        if !store
            .take_delivery(name, &by_id, now_ms)
            .map_err(Error::from_cause)?
        {
            return Ok(Err(Refusal::Replayed(delivery)));
        }
        let record = loop_protocol::TriggerRecord {
            name: name.to_string(),
            kind: "webhook".into(),
            delivery: Some(delivery),
            event,
            body_sha256: Some(loop_protocol::hash::sha256_hex(body)),
            verified_by: Some(
                match hook.style {
                    HookStyle::Github => "github (X-Hub-Signature-256)",
                    HookStyle::Hmac => "hmac-sha256 (X-Loop-Signature)",
                }
                .into(),
            ),
            at: loop_protocol::time::rfc3339_millis(now_ms),
        };
        match self.start_from(&loopfile, t, hook.owner.clone(), record) {
            Ok(id) => Ok(Ok(id)),
            Err(e) => {
                // Nothing started: the sender may try again.
                let _ = store.forget_delivery(name, &by_id);
                let _ = store.forget_delivery(name, &by_signature);
                Err(e)
            }
        }
    }

    /// Fire every scheduled trigger whose schedule matches a minute (UTC)
    /// after the one of `since_ms`, up to and with the one of `now_ms`: a
    /// check that comes late still fires a minute it missed (up to an hour
    /// back; the latest such minute, once, however many it missed; a
    /// server that was down does not catch up, as cron does not). Each
    /// minute fires once whatever the number of servers (the minute is the
    /// delivery id), and not at all while the trigger's task from an
    /// earlier minute is still not over (runs never pile up). The tasks'
    /// ids; the caller runs them. A trigger that cannot fire is logged and
    /// does not stop the others.
    pub fn fire_schedules(&self, since_ms: u64, now_ms: u64) -> Result<Vec<String>, Error> {
        let loopfile = crate::loopfile::Loopfile::load(self.project())?;
        let last = now_ms / 60_000;
        let first = (since_ms / 60_000 + 1).max(last.saturating_sub(59));
        let mut started = Vec::new();
        for t in &loopfile.triggers {
            let Some(cron) = &t.cron else { continue };
            let Some(minute) = (first..=last).rev().find(|m| cron.matches(m * 60)) else {
                continue;
            };
            match self.fire_minute(&loopfile, t, minute, now_ms) {
                Ok(Some(id)) => started.push(id),
                Ok(None) => {}
                Err(e) => tracing::warn!("trigger `{}`: {}", t.name, e.message),
            }
        }
        Ok(started)
    }

    /// Trigger `t`'s task for `minute`, if its schedule names it and
    /// nobody has taken that minute yet.
    fn fire_minute(
        &self,
        loopfile: &crate::loopfile::Loopfile,
        t: &Trigger,
        minute: u64,
        now_ms: u64,
    ) -> Result<Option<String>, Error> {
        let Some(cron) = &t.cron else {
            return Ok(None);
        };
        if !cron.matches(minute * 60) {
            return Ok(None);
        }
        let stamp = loop_protocol::time::rfc3339_millis(minute * 60_000);
        let delivery = format!("cron {stamp}");
        if !self
            .store()?
            .take_delivery(&t.name, &delivery, now_ms)
            .map_err(Error::from_cause)?
        {
            return Ok(None);
        }
        if let Some(earlier) = self.unfinished_from(&t.name)? {
            tracing::warn!(
                "trigger `{}`: the minute {stamp} is skipped: its task {earlier} is not over",
                t.name
            );
            return Ok(None);
        }
        let owner = t
            .task
            .owner
            .clone()
            .or_else(|| t.webhook.as_ref().map(|w| w.owner.clone()))
            .unwrap_or_default();
        let record = loop_protocol::TriggerRecord {
            name: t.name.clone(),
            kind: "cron".into(),
            delivery: Some(delivery.clone()),
            event: Some(cron.text.clone()),
            body_sha256: None,
            verified_by: None,
            at: loop_protocol::time::rfc3339_millis(now_ms),
        };
        // One trigger that cannot start its task does not stop the
        // others; its minute is given back for the next check.
        match self.start_from(loopfile, t, owner, record) {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                let _ = self.store()?.forget_delivery(&t.name, &delivery);
                tracing::warn!("trigger `{}`: {}", t.name, e.message);
                Ok(None)
            }
        }
    }

    /// A task trigger `name` started that is not over yet, if any.
    fn unfinished_from(&self, name: &str) -> Result<Option<String>, Error> {
        let tasks = self.store()?.tasks().map_err(crate::layout::store_err)?;
        Ok(tasks
            .into_iter()
            .filter(|t| !t.is_terminal())
            .find(|t| t.request["trigger"]["name"].as_str() == Some(name))
            .map(|t| t.id))
    }

    /// Submit trigger `t`'s task for `owner`, recording `record`.
    fn start_from(
        &self,
        loopfile: &crate::loopfile::Loopfile,
        t: &Trigger,
        owner: String,
        record: loop_protocol::TriggerRecord,
    ) -> Result<String, Error> {
        let name = &t.name;
        let mut contract = loop_protocol::Contract::from_flags(
            &t.task.instruction,
            &t.task.checks,
            &t.task.artifacts,
        )
        .map_err(|e| Error::usage(format!("trigger `{name}`: {e}")))?;
        loopfile.defaults.apply(&mut contract);
        if let Some(n) = t.task.max_steps {
            contract.limits.max_steps = n;
        }
        if let Some(n) = t.task.timeout_secs {
            contract.limits.timeout_secs = n;
        }
        // A script or recording the template names is the project's (a
        // relative path is taken from the Loopfile's directory).
        let model = t.task.model.as_ref().map(|m| match m.split_once(':') {
            Some((p @ ("scripted" | "replay"), path)) if !path.starts_with('/') => {
                format!("{p}:{}", self.project().join(path).display())
            }
            _ => m.clone(),
        });
        self.submit(
            crate::TaskRequest {
                contract,
                source: crate::ContractSource::Given,
                guidance: Vec::new(),
                model,
                record: None,
                project: self.project().to_path_buf(),
                verify_on_change: false,
                isolation: loop_sandbox::IsolationLevel::Required,
                include_dirty: false,
                on_prompt: crate::OnPrompt::Wait,
                owner: Some(owner),
                trigger: Some(record),
                allow_vacuous: false,
            },
            &mut crate::Quiet,
        )
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn hook(style: HookStyle) -> Webhook {
        Webhook {
            secret_env: "S".into(),
            style,
            owner: "ci".into(),
        }
    }

    fn headers(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_delivery_is_taken_only_with_its_signature_in_its_window() {
        let body = br#"{"action":"completed"}"#;
        let sig = |m: &[u8]| {
            format!(
                "sha256={}",
                loop_protocol::hash::hex(&loop_protocol::hash::hmac_sha256(b"k", m))
            )
        };
        // GitHub's style: the body signed, the delivery id given.
        let gh = headers(vec![
            ("x-hub-signature-256", sig(body)),
            ("x-github-delivery", "d-1".into()),
            ("x-github-event", "workflow_run".into()),
        ]);
        let ok = authenticate(&hook(HookStyle::Github), b"k", &gh, body, 0).unwrap();
        assert_eq!(
            (ok.delivery.as_str(), ok.event.as_deref()),
            ("d-1", Some("workflow_run"))
        );
        assert_eq!(format!("sha256={}", ok.signature), sig(body));
        // Upper-case hex is the same signature.
        let upper = headers(vec![
            (
                "x-hub-signature-256",
                sig(body).to_uppercase().replace("SHA256=", "sha256="),
            ),
            ("x-github-delivery", "d-1".into()),
        ]);
        assert!(authenticate(&hook(HookStyle::Github), b"k", &upper, body, 0).is_ok());
        // A changed body, another key, no signature: refused.
        assert!(authenticate(&hook(HookStyle::Github), b"k", &gh, b"{}", 0).is_err());
        assert!(authenticate(&hook(HookStyle::Github), b"other", &gh, body, 0).is_err());
        let none = headers(vec![("x-github-delivery", "d-1".into())]);
        assert!(authenticate(&hook(HookStyle::Github), b"k", &none, body, 0).is_err());
        // The plain style signs the timestamp too, and keeps to its window.
        let now = 1_800_000_000;
        let signed = |ts: u64| {
            let mut m = format!("{ts}.d-2.").into_bytes();
            m.extend_from_slice(body);
            headers(vec![
                ("x-loop-signature", sig(&m)),
                ("x-loop-timestamp", ts.to_string()),
                ("x-loop-delivery", "d-2".into()),
            ])
        };
        assert!(authenticate(&hook(HookStyle::Hmac), b"k", &signed(now - 10), body, now).is_ok());
        let stale = authenticate(&hook(HookStyle::Hmac), b"k", &signed(now - 301), body, now);
        assert!(matches!(stale, Err(Refusal::Unauthenticated(w)) if w.contains("five minutes")));
        // A timestamp changed after signing breaks the signature.
        // So does another delivery id under the same signature.
        let renamed = {
            let mut m = format!("{}.d-2.", now - 10).into_bytes();
            m.extend_from_slice(body);
            headers(vec![
                ("x-loop-signature", sig(&m)),
                ("x-loop-timestamp", (now - 10).to_string()),
                ("x-loop-delivery", "d-3".into()),
            ])
        };
        assert!(authenticate(&hook(HookStyle::Hmac), b"k", &renamed, body, now).is_err());
        let moved = {
            let mut m = format!("{}.d-2.", now - 10).into_bytes();
            m.extend_from_slice(body);
            headers(vec![
                ("x-loop-signature", sig(&m)),
                ("x-loop-timestamp", now.to_string()),
                ("x-loop-delivery", "d-2".into()),
            ])
        };
        assert!(authenticate(&hook(HookStyle::Hmac), b"k", &moved, body, now).is_err());
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod loopfile_tests {
    #[test]
    fn bad_triggers_are_named_with_their_place() {
        let shared = "triggers:\n  - name: a\n    webhook: {secret_env: S, owner: ci}\n    task: {instruction: x, checks: [\"true\"]}\n  - name: b\n    webhook: {secret_env: S, owner: ci}\n    task: {instruction: x, checks: [\"true\"]}\n";
        let e = crate::loopfile::Loopfile::parse(shared, "Loopfile.yaml")
            .unwrap_err()
            .message;
        assert!(
            e.contains("trigger `b` shares its secret (S) with `a`"),
            "{e}"
        );
        let text = "triggers:\n  - name: Bad_Name\n    webhook: {secret_env: S1, owner: ci}\n    task: {instruction: x, checks: [\"true\"]}\n  - name: ok\n    webhook: {secret_env: S2, owner: ci, style: carrier-pigeon}\n    task: {instruction: x, checks: [\"true\"]}\n  - name: twice\n    webhook: {secret_env: S3, owner: ci}\n    task: {instruction: x, checks: [\"true\"]}\n  - name: twice\n    webhook: {secret_env: S4, owner: ci}\n    task: {instruction: x, checks: [\"true\"]}\n  - name: nochecks\n    webhook: {owner: ci}\n    task: {instruction: x}\n";
        let e = crate::loopfile::Loopfile::parse(text, "Loopfile.yaml")
            .unwrap_err()
            .message;
        assert!(
            e.contains("Loopfile.yaml:2:11: trigger name `Bad_Name`"),
            "{e}"
        );
        assert!(e.contains("webhook style `carrier-pigeon`"), "{e}");
        assert!(e.contains("trigger `twice` is named twice"), "{e}");
        assert!(e.contains("a webhook needs `secret_env`"), "{e}");
        assert!(e.contains("needs an `instruction` and `checks`"), "{e}");
        let ok = crate::loopfile::Loopfile::parse(
            "triggers:\n  - name: ci\n    webhook: {secret_env: S, owner: ci, style: github}\n    task: {instruction: x, checks: [\"true\"], max_steps: 3}\n",
            "Loopfile.yaml",
        )
        .unwrap();
        assert_eq!(ok.triggers[0].task.max_steps, Some(3));
        assert_eq!(
            ok.triggers[0].webhook.as_ref().unwrap().style,
            super::HookStyle::Github
        );
    }
}

/// A five-field cron schedule (minute, hour, day of month, month, day of
/// week; `*`, lists, ranges and steps; Sunday is 0 or 7), read in UTC. As
/// cron does, when both day fields are restricted a day matching either
/// fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// As written.
    pub text: String,
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    days_any: bool,
    weekdays_any: bool,
}

impl Schedule {
    /// Read `text`; what is wrong with it, if anything.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "five fields (minute hour day-of-month month day-of-week), not {}",
                fields.len()
            ));
        }
        let field = |s: &str, lo: u32, hi: u32, what: &str| -> Result<Vec<bool>, String> {
            let mut set = vec![false; hi as usize + 1];
            for part in s.split(',') {
                let (range, step) = match part.split_once('/') {
                    Some((r, st)) => (
                        r,
                        st.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                            format!("{what}: step `{st}` is not a positive number")
                        })?,
                    ),
                    None => (part, 1),
                };
                let (a, b) = if range == "*" {
                    (lo, hi)
                } else if let Some((a, b)) = range.split_once('-') {
                    (num(a, what)?, num(b, what)?)
                } else {
                    let n = num(range, what)?;
                    (n, if part.contains('/') { hi } else { n })
                };
                if a < lo || b > hi || a > b {
                    return Err(format!("{what}: `{part}` is outside {lo}-{hi}"));
                }
                let mut v = a;
                while v <= b {
                    set[v as usize] = true;
                    v += step;
                }
            }
            Ok(set)
        };
        fn num(s: &str, what: &str) -> Result<u32, String> {
            s.parse()
                .map_err(|_| format!("{what}: `{s}` is not a number"))
        }
        let mut weekdays = field(fields[4], 0, 7, "day of week")?;
        if weekdays[7] {
            weekdays[0] = true;
        }
        weekdays.truncate(7);
        Ok(Schedule {
            text: text.to_string(),
            minutes: field(fields[0], 0, 59, "minute")?,
            hours: field(fields[1], 0, 23, "hour")?,
            days: field(fields[2], 1, 31, "day of month")?,
            months: field(fields[3], 1, 12, "month")?,
            weekdays,
            days_any: fields[2] == "*",
            weekdays_any: fields[4] == "*",
        })
    }

    /// Whether the minute that starts at Unix second `secs` (UTC) fires.
    pub fn matches(&self, secs: u64) -> bool {
        let days_since = secs / 86_400;
        let rem = secs % 86_400;
        let (hour, minute) = ((rem / 3600) as usize, ((rem % 3600) / 60) as usize);
        let (_, month, day) = civil_from_days(days_since as i64);
        // 1970-01-01 was a Thursday (4).
        let weekday = ((days_since + 4) % 7) as usize;
        let day_ok = match (self.days_any, self.weekdays_any) {
            (true, true) => true,
            (false, true) => self.days[day as usize],
            (true, false) => self.weekdays[weekday],
            (false, false) => self.days[day as usize] || self.weekdays[weekday],
        };
        self.minutes[minute] && self.hours[hour] && self.months[month as usize] && day_ok
    }
}

/// (year, month 1-12, day 1-31) of the day `z` days after 1970-01-01 (the
/// proleptic Gregorian calendar, by eras of 400 years).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod schedule_tests {
    use super::{Schedule, civil_from_days};

    /// Unix seconds of a UTC date and time.
    fn at(days: i64, h: u64, m: u64) -> u64 {
        days as u64 * 86_400 + h * 3600 + m * 60
    }

    #[test]
    fn dates_and_schedules_read_as_cron_reads_them() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        // 2026-12-01 is day 20_788, a Tuesday.
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        let nightly = Schedule::parse("0 3 * * *").unwrap();
        assert!(nightly.matches(at(20_788, 3, 0)));
        assert!(!nightly.matches(at(20_788, 3, 1)) && !nightly.matches(at(20_788, 4, 0)));
        let weekdays = Schedule::parse("*/15 9-17 * * 1-5").unwrap();
        assert!(weekdays.matches(at(20_788, 9, 45)));
        assert!(!weekdays.matches(at(20_788, 9, 50)));
        // 2026-12-06 is a Sunday (0, or 7).
        assert!(!weekdays.matches(at(20_793, 10, 0)));
        assert!(
            Schedule::parse("0 0 * * 7")
                .unwrap()
                .matches(at(20_793, 0, 0))
        );
        // Both day fields restricted: either fires.
        let either = Schedule::parse("0 0 1 * 0").unwrap();
        assert!(either.matches(at(20_788, 0, 0)) && either.matches(at(20_793, 0, 0)));
        assert!(!either.matches(at(20_789, 0, 0)));
        for bad in [
            "* * * *",
            "60 * * * *",
            "*/0 * * * *",
            "a * * * *",
            "5-1 * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }
}
