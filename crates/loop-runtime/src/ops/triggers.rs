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

pub use crate::loopfile::triggers::{HookStyle, Trigger, Webhook};
use crate::{Error, Runtime};

/// How long a signed timestamp stays good, each way.
const WINDOW_SECS: u64 = 300;

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
    /// A person's answer (a chat's button), taken: what it did.
    Answered(String),
}

/// What a delivery taken asks for.
#[derive(Debug)]
pub enum Taken {
    /// A task, submitted: the caller runs it.
    Task(String),
    /// A task whose contract is drafted first (a GitHub trigger's task
    /// without `checks`): the caller drafts it, posts the draft where it
    /// was asked and waits for a person's answer (unless the trigger says
    /// `auto_confirm`).
    Draft(Box<DraftAsked>),
    /// A person's answer to a drafted contract, by a reply comment
    /// (`COMMAND confirm ID` or `COMMAND reject ID`).
    Answer(DraftAnswer),
}

/// A GitHub task whose contract is to be drafted.
#[derive(Debug)]
pub struct DraftAsked {
    /// The request taken in (its trigger record and base commit in it).
    pub admitted: crate::Admitted,
    /// Whose the task is.
    pub owner: String,
    /// Where it was asked, and how to answer there.
    pub ask: crate::ops::github::GithubAsk,
}

/// A reply comment answering a drafted contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftAnswer {
    /// The draft answered.
    pub draft: String,
    /// Confirmed (or rejected).
    pub accept: bool,
    /// Where the answer was given: only a draft asked for there takes it
    /// ([`crate::ops::github::asked_on`]).
    pub asked_on: String,
    /// The contract it answers, as the reply names it
    /// ([`crate::ops::github::contract_digest`] of the one shown).
    pub digest: String,
    /// Who answered, as the genesis says who confirmed.
    pub who: String,
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

/// A reply comment's answer to a drafted contract, when `asked` is one
/// (or why it is not, when its words start as one).
fn draft_answered(
    trigger: &str,
    asked: &crate::ops::github::Asked,
    delivery: &str,
) -> Option<Result<DraftAnswer, crate::ops::github::NotAsked>> {
    let (accept, draft, digest) = match asked
        .said
        .as_deref()
        .and_then(crate::ops::github::draft_answer)?
    {
        Ok(a) => a,
        Err(why) => return Some(Err(why)),
    };
    let o = &asked.origin;
    Some(Ok(DraftAnswer {
        draft,
        accept,
        digest,
        asked_on: crate::ops::github::asked_on(trigger, o),
        who: format!(
            "@{} on GitHub, in a reply comment on {} #{} (delivery {delivery})",
            o.sender, o.repository, o.number
        ),
    }))
}

impl Runtime {
    /// Take a webhook delivery for trigger `name`: authenticate it, ask
    /// `admit` (with the sender, for a GitHub inlet) whether its rate
    /// allows it, refuse a replay, and submit the trigger's task (owned by the webhook's
    /// owner, the delivery recorded in its genesis). The task's id; the
    /// caller runs it.
    pub fn take_delivery(
        &self,
        name: &str,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
        admit: &mut dyn FnMut(Option<&str>) -> bool,
    ) -> Result<Result<Taken, Refusal>, Error> {
        let loopfile = crate::loopfile::Loopfile::load(self.project())?;
        let Some(t) = loopfile.triggers.iter().find(|t| t.name == name) else {
            return Ok(Err(Refusal::Unknown));
        };
        if let Some(chat) = &t.chat {
            return Ok(self
                .take_chat_delivery(t, chat, (header, body), admit)?
                .map(Taken::Task));
        }
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
        // A GitHub inlet takes only what asks for a task, from whom it may.
        let asked = match &t.github {
            Some(g) => match crate::ops::github::asked(g, event.as_deref(), body) {
                Ok(a) => Some(a),
                Err(why) => return Ok(Err(Refusal::Ignored(why.0))),
            },
            None => None,
        };
        // Only an authentic delivery spends the trigger's rate: junk
        // cannot lock its real sender out.
        if !admit(asked.as_ref().map(|a| a.origin.sender.as_str())) {
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
        // A reply comment answering a drafted contract starts nothing of
        // its own: the caller gives the draft its answer.
        match asked
            .as_ref()
            .and_then(|a| draft_answered(name, a, &delivery))
        {
            Some(Ok(answer)) => return Ok(Ok(Taken::Answer(answer))),
            // Words that start as an answer never start a task.
            Some(Err(why)) => return Ok(Err(Refusal::Ignored(why.0))),
            None => {}
        }
        let forget = || {
            let _ = store.forget_delivery(name, &by_id);
            let _ = store.forget_delivery(name, &by_signature);
        };
        let body_sha256 = loop_protocol::hash::sha256_hex(body);
        match self.start_delivered(t, asked, (delivery, event, body_sha256, now_ms)) {
            Ok(taken) => Ok(Ok(taken)),
            Err(e) => {
                // Nothing started: the sender may try again.
                forget();
                Err(e)
            }
        }
    }

    /// Start trigger `t`'s task for an authentic delivery taken once (what
    /// GitHub `asked`, if it did): submitted, or its contract to draft.
    fn start_delivered(
        &self,
        t: &Trigger,
        mut asked: Option<crate::ops::github::Asked>,
        (delivery, event, body_sha256, now_ms): (String, Option<String>, String, u64),
    ) -> Result<Taken, Error> {
        let name = &t.name;
        let hook = t
            .webhook
            .as_ref()
            .ok_or_else(|| Error::usage(format!("trigger `{name}` has no webhook")))?;
        // Asked on a pull request: the task starts from its head, fetched
        // (a failure starts nothing, and the delivery may come again).
        let base = match (&t.github, asked.as_mut()) {
            (Some(g), Some(a)) if a.origin.pull_request => Some(
                crate::ops::github::fetch_pull_head(g, &mut a.origin, self.project())?,
            ),
            _ => None,
        };
        let record = loop_protocol::TriggerRecord {
            name: name.to_string(),
            kind: "webhook".into(),
            delivery: Some(delivery),
            event,
            body_sha256: Some(body_sha256),
            verified_by: Some(
                match hook.style {
                    HookStyle::Github => "github (X-Hub-Signature-256)",
                    HookStyle::Hmac => "hmac-sha256 (X-Loop-Signature)",
                }
                .into(),
            ),
            at: loop_protocol::time::rfc3339_millis(now_ms),
            github: asked.as_ref().map(|a| a.origin.clone()),
            chat: None,
        };
        let instruction = match &asked {
            Some(a) => a.instruction(&t.task.instruction),
            None => t.task.instruction.clone(),
        };
        let owner = hook.owner.clone();
        let admitted = self.admit_from(t, (owner.clone(), base), record, instruction)?;
        match (&t.github, asked) {
            (Some(inlet), Some(a)) if admitted.is_draft() => {
                Ok(Taken::Draft(Box::new(DraftAsked {
                    admitted,
                    owner,
                    ask: crate::ops::github::GithubAsk {
                        trigger: name.to_string(),
                        inlet: inlet.clone(),
                        origin: a.origin,
                    },
                })))
            }
            _ => self
                .submit_admitted(admitted, &mut crate::Quiet)
                .map(Taken::Task),
        }
    }

    /// Where a trigger's record says its task was asked for on GitHub, as
    /// the Loopfile's trigger of that name tells it there (a draft an
    /// earlier server kept: its issue still hears how it ended).
    pub fn github_ask(&self, record: &loop_protocol::TriggerRecord) -> Option<crate::GithubAsk> {
        let origin = record.github.clone()?;
        let loopfile = crate::loopfile::Loopfile::load(self.project()).ok()?;
        let t = loopfile
            .triggers
            .into_iter()
            .find(|t| t.name == record.name)?;
        Some(crate::GithubAsk {
            trigger: t.name,
            inlet: t.github?,
            origin,
        })
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
            match self.fire_minute(t, minute, now_ms) {
                Ok(Some(id)) => started.push(id),
                Ok(None) => {}
                Err(e) => tracing::warn!("trigger `{}`: {}", t.name, e.message),
            }
        }
        Ok(started)
    }

    /// Trigger `t`'s task for `minute`, if its schedule names it and
    /// nobody has taken that minute yet.
    fn fire_minute(&self, t: &Trigger, minute: u64, now_ms: u64) -> Result<Option<String>, Error> {
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
            github: None,
            chat: None,
        };
        // One trigger that cannot start its task does not stop the
        // others; its minute is given back for the next check.
        match self.start_from(t, (owner, None), record, t.task.instruction.clone()) {
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
        let tasks = self
            .store()?
            .tasks()
            .map_err(crate::project::locate::store_err)?;
        Ok(tasks
            .into_iter()
            .filter(|t| !t.is_terminal())
            .find(|t| t.request["trigger"]["name"].as_str() == Some(name))
            .map(|t| t.id))
    }

    /// Submit trigger `t`'s task for `owner` with `instruction`,
    /// recording `record`.
    pub(crate) fn start_from(
        &self,
        t: &Trigger,
        owner: (String, Option<String>),
        record: loop_protocol::TriggerRecord,
        instruction: String,
    ) -> Result<String, Error> {
        let admitted = self.admit_from(t, owner, record, instruction)?;
        self.submit_admitted(admitted, &mut crate::Quiet)
    }

    /// Take in trigger `t`'s task for `owner` with `instruction`,
    /// recording `record`.
    fn admit_from(
        &self,
        t: &Trigger,
        (owner, base_commit): (String, Option<String>),
        record: loop_protocol::TriggerRecord,
        instruction: String,
    ) -> Result<crate::Admitted, Error> {
        let name = &t.name;
        self.admit(crate::TaskRequest {
            instruction: Some(instruction),
            checks: t.task.checks.clone(),
            artifacts: t.task.artifacts.clone(),
            limits: crate::LimitOverrides {
                max_steps: t.task.max_steps,
                timeout_secs: t.task.timeout_secs,
                ..Default::default()
            },
            model: t.task.model.clone(),
            isolation: loop_sandbox::IsolationLevel::Required,
            on_prompt: Some(crate::OnPrompt::Wait),
            owner: Some(owner),
            base_commit,
            trigger: Some(record),
            via: crate::Via::Trigger,
            ..Default::default()
        })
        .map_err(|e| Error {
            message: format!("trigger `{name}`: {}", e.message),
            ..e
        })
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
