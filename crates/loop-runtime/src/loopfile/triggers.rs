//! The Loopfile's `triggers:` as written: each trigger's webhook, schedule
//! and task template, and their reader. What a trigger does when it fires
//! is `crate::ops::triggers`.

use loop_protocol::yaml::{Node, Reader};

/// A trigger's keys.
pub(crate) const TRIGGER_KEYS: &[&str] = &["name", "webhook", "cron", "github", "chat", "task"];
/// A chat inlet's keys.
pub(crate) const CHAT_KEYS: &[&str] = &[
    "kind",
    "secret_env",
    "token_env",
    "api_url",
    "command",
    "owner",
    "senders",
    "approvers",
    "console_url",
];
/// A GitHub inlet's keys.
pub(crate) const GITHUB_KEYS: &[&str] = &[
    "token_env",
    "api_url",
    "label",
    "command",
    "authors",
    "remote",
    "auto_confirm",
    "console_url",
];
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
/// One trigger of the Loopfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// Its name (in the webhook's path).
    pub name: String,
    /// Its webhook, when it has one.
    pub webhook: Option<Webhook>,
    /// Its schedule, when it has one (its tasks belong to `owner`).
    pub cron: Option<Schedule>,
    /// Its GitHub inlet, when its webhook is GitHub's: which issues and
    /// comments start a task, and where the result is reported.
    pub github: Option<GithubInlet>,
    /// Its chat inlet (Slack or Telegram), when it has one: it is then
    /// reached at the webhook's address with the platform's own signing.
    pub chat: Option<ChatInlet>,
    /// The task each firing starts.
    pub task: TaskTemplate,
}

/// Which chat platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatKind {
    /// Slack: a slash command and interactive buttons, signed with the
    /// app's signing secret (`X-Slack-Signature`).
    Slack,
    /// Telegram: a bot's webhook, authenticated by its secret token
    /// (`X-Telegram-Bot-Api-Secret-Token`).
    Telegram,
}

/// A trigger's `chat:`: a message starting with `command` from one of
/// `senders` starts the task (its text as untrusted input); its progress
/// (started, waiting for approval with approve and deny buttons, ended) is
/// posted where it was asked, and a press of a button by one of
/// `approvers` answers the question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatInlet {
    /// `slack` or `telegram`.
    pub kind: ChatKind,
    /// The environment variable with the signing secret (Slack) or the
    /// webhook's secret token (Telegram).
    pub secret_env: String,
    /// The environment variable with the bot's token, for posting.
    pub token_env: String,
    /// The platform's API (tests: a server on 127.0.0.1).
    pub api_url: String,
    /// The command that asks (`/loop`).
    pub command: String,
    /// Whose the tasks are.
    pub owner: String,
    /// The user ids that may ask.
    pub senders: Vec<String>,
    /// The user ids that may approve.
    pub approvers: Vec<String>,
    /// The console's address, for links to a task.
    pub console_url: Option<String>,
}

/// A trigger's `github:`: an issue labelled `label`, or a comment whose
/// first line starts with `command` by an author whose association with
/// the repository is one of `authors`, starts the trigger's task with the
/// issue's or comment's text as untrusted input; the outcome is reported
/// back through GitHub's REST API at `api_url` with the token in
/// `token_env` (a comment, and for a verified task a branch and a pull
/// request carrying the change set and its receipt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubInlet {
    /// The environment variable holding the API token (never the token).
    pub token_env: String,
    /// The REST API's base URL (GitHub Enterprise: `https://HOST/api/v3`).
    pub api_url: String,
    /// The label that asks for a task.
    pub label: Option<String>,
    /// The command a comment starts with (`/loop`).
    pub command: Option<String>,
    /// The `author_association` values whose comments are taken.
    pub authors: Vec<String>,
    /// The project's git remote a pull request's head is fetched from.
    pub remote: String,
    /// For a task whose contract is drafted (a `task:` without `checks`):
    /// the contract the critic accepted is locked without a person's
    /// answer. Otherwise it is posted where it was asked and waits for a
    /// reply comment (`COMMAND confirm ID`) or the console.
    pub auto_confirm: bool,
    /// The console's address, for a link to a drafted contract.
    pub console_url: Option<String>,
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
        let mut github = None;
        let mut chat = None;
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
                "github" => github = read_github(r, v),
                "chat" => chat = read_chat(r, v),
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
        let t = Trigger {
            name,
            webhook,
            cron,
            github,
            chat,
            task,
        };
        match trigger_problem(&t) {
            Some(why) => r.err(Some(item.pos), why, None),
            None => out.push(t),
        }
    }
    out
}

/// Why trigger `t`'s parts do not fit together, if they do not.
fn trigger_problem(t: &Trigger) -> Option<String> {
    let name = &t.name;
    // Only GitHub's inlet drafts a contract (posted where it was asked,
    // for a person's answer there or in the console).
    if t.task.checks.is_empty() && t.github.is_none() {
        return Some(format!(
            "trigger `{name}`: a trigger's task needs an `instruction` and `checks` (only a `github` trigger may leave `checks` out, to draft its contract)"
        ));
    }
    if t.task.checks.is_empty() && t.cron.is_some() {
        return Some(format!(
            "trigger `{name}`: a scheduled task has nobody to confirm a drafted contract: give it `checks`"
        ));
    }
    if t.task.checks.is_empty()
        && t.github
            .as_ref()
            .is_some_and(|g| !g.auto_confirm && g.command.is_none())
    {
        return Some(format!(
            "trigger `{name}`: a drafted contract is confirmed by a reply comment starting with the trigger's `command`: give one (or `auto_confirm: true`)"
        ));
    }
    if !t.task.checks.is_empty() && t.github.as_ref().is_some_and(|g| g.auto_confirm) {
        return Some(format!(
            "trigger `{name}`: `auto_confirm` locks a drafted contract, and this task's contract is its `checks`: leave one out"
        ));
    }
    if let Some(why) = github_problem(t.webhook.as_ref(), t.github.as_ref()) {
        return Some(format!("trigger `{name}`: {why}"));
    }
    if t.chat.is_some() && (t.webhook.is_some() || t.cron.is_some() || t.github.is_some()) {
        return Some(format!(
            "trigger `{name}`: a `chat` trigger has no `webhook`, `cron` or `github` (the platform signs its own deliveries)"
        ));
    }
    if t.webhook.is_none() && t.cron.is_none() && t.chat.is_none() {
        return Some(format!(
            "trigger `{name}` needs a `webhook`, a `cron` schedule or a `chat`"
        ));
    }
    if t.cron.is_some() && t.task.owner.is_none() && t.webhook.is_none() {
        return Some(format!(
            "trigger `{name}`: a scheduled task needs an `owner` (in `task`)"
        ));
    }
    None
}

fn read_chat(r: &mut Reader, node: &Node) -> Option<ChatInlet> {
    let fields = r.mapping(node, "`chat`", CHAT_KEYS)?;
    let mut kind = None;
    let (mut secret_env, mut token_env, mut owner) = (String::new(), String::new(), String::new());
    let mut api_url = None;
    let mut command = "/loop".to_string();
    let (mut senders, mut approvers) = (Vec::new(), Vec::new());
    let mut console_url = None;
    for (k, v) in fields {
        match k.name.as_str() {
            "kind" => match r.string(v, "`kind`").as_deref() {
                Some("slack") => kind = Some(ChatKind::Slack),
                Some("telegram") => kind = Some(ChatKind::Telegram),
                Some(other) => r.err(
                    Some(v.pos),
                    format!("chat kind `{other}`: `slack` or `telegram`"),
                    None,
                ),
                None => {}
            },
            "secret_env" => secret_env = r.string(v, "`secret_env`").unwrap_or_default(),
            "token_env" => token_env = r.string(v, "`token_env`").unwrap_or_default(),
            "api_url" => api_url = r.string(v, "`api_url`"),
            "command" => command = r.string(v, "`command`").unwrap_or(command),
            "owner" => owner = r.string(v, "`owner`").unwrap_or_default(),
            "senders" => senders = r.strings(v, "`senders`").unwrap_or_default(),
            "approvers" => approvers = r.strings(v, "`approvers`").unwrap_or_default(),
            _ => console_url = r.string(v, "`console_url`"),
        }
    }
    let kind = kind?;
    let api_url = api_url.unwrap_or_else(|| match kind {
        ChatKind::Slack => "https://slack.com/api".into(),
        ChatKind::Telegram => "https://api.telegram.org".into(),
    });
    let ok_url = api_url.starts_with("https://") || api_url.starts_with("http://127.0.0.1:");
    if secret_env.is_empty()
        || token_env.is_empty()
        || owner.trim().is_empty()
        || senders.is_empty()
        || !ok_url
    {
        r.err(
            Some(node.pos),
            "`chat` needs `kind`, `secret_env`, `token_env`, `owner` and `senders` (who may ask), and an https:// `api_url`".into(),
            None,
        );
        return None;
    }
    Some(ChatInlet {
        kind,
        secret_env,
        token_env,
        api_url: api_url.trim_end_matches('/').to_string(),
        command,
        owner,
        senders,
        approvers,
        console_url: console_url.map(|u| u.trim_end_matches('/').to_string()),
    })
}

/// Why a trigger's `github:` cannot work with its webhook, if it cannot.
fn github_problem(webhook: Option<&Webhook>, github: Option<&GithubInlet>) -> Option<String> {
    let g = github?;
    if webhook.map(|w| w.style) != Some(HookStyle::Github) {
        return Some("`github` needs a webhook with `style: github`".into());
    }
    if g.label.is_none() && g.command.is_none() {
        return Some("`github` needs a `label`, a `command`, or both".into());
    }
    None
}

fn read_github(r: &mut Reader, node: &Node) -> Option<GithubInlet> {
    let fields = r.mapping(node, "`github`", GITHUB_KEYS)?;
    let mut out = GithubInlet {
        token_env: String::new(),
        api_url: "https://api.github.com".into(),
        label: None,
        command: None,
        authors: vec!["OWNER".into(), "MEMBER".into(), "COLLABORATOR".into()],
        remote: "origin".into(),
        auto_confirm: false,
        console_url: None,
    };
    for (k, v) in fields {
        match k.name.as_str() {
            "token_env" => out.token_env = r.string(v, "`token_env`").unwrap_or_default(),
            "api_url" => {
                let url = r.string(v, "`api_url`").unwrap_or_default();
                if !(url.starts_with("https://") || url.starts_with("http://127.0.0.1:")) {
                    r.err(
                        Some(v.pos),
                        format!("`api_url` `{url}`: an https:// URL (or http://127.0.0.1:PORT for a test server)"),
                        None,
                    );
                }
                out.api_url = url.trim_end_matches('/').to_string();
            }
            "label" => out.label = r.string(v, "`label`").filter(|l| !l.is_empty()),
            "auto_confirm" => out.auto_confirm = r.boolean(v, "`auto_confirm`").unwrap_or(false),
            "console_url" => {
                let url = r.string(v, "`console_url`").unwrap_or_default();
                if !(url.starts_with("https://") || url.starts_with("http://127.0.0.1:")) {
                    r.err(
                        Some(v.pos),
                        format!(
                            "`console_url` `{url}`: an https:// URL (or http://127.0.0.1:PORT)"
                        ),
                        None,
                    );
                }
                out.console_url = Some(url.trim_end_matches('/').to_string());
            }
            "command" => out.command = r.string(v, "`command`").filter(|c| !c.trim().is_empty()),
            "remote" => {
                let name = r.string(v, "`remote`").unwrap_or_default();
                let plain = name
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphanumeric())
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
                if !plain {
                    r.err(
                        Some(v.pos),
                        format!("`remote` `{name}`: a git remote's name (letters, digits, `.`, `_`, `-`)"),
                        None,
                    );
                }
                out.remote = name;
            }
            _ => {
                out.authors = r
                    .strings(v, "`authors`")
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| a.to_ascii_uppercase())
                    .collect()
            }
        }
    }
    if out.token_env.is_empty() {
        r.err(Some(node.pos), "`github` needs a `token_env`".into(), None);
        return None;
    }
    Some(out)
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
            _ => {
                t.timeout_secs = r.unsigned(v, "`timeout_secs`", 1).filter(|n| {
                    let ok = *n <= loop_protocol::contract::MAX_TIMEOUT_SECS;
                    if !ok {
                        r.err(
                            Some(v.pos),
                            format!(
                                "`timeout_secs` is at most {} (a week)",
                                loop_protocol::contract::MAX_TIMEOUT_SECS
                            ),
                            None,
                        );
                    }
                    ok
                })
            }
        }
    }
    if t.instruction.trim().is_empty() {
        r.err(
            Some(node.pos),
            "a trigger's task needs an `instruction` (and `checks`, unless a `github` trigger drafts its contract)".into(),
            None,
        );
        return None;
    }
    Some(t)
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

/// What is wrong with a schedule's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadSchedule(pub String);

impl Schedule {
    /// Read `text`; what is wrong with it, if anything.
    pub fn parse(text: &str) -> Result<Schedule, BadSchedule> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(BadSchedule(format!(
                "five fields (minute hour day-of-month month day-of-week), not {}",
                fields.len()
            )));
        }
        let field = |s: &str, lo: u32, hi: u32, what: &str| -> Result<Vec<bool>, BadSchedule> {
            let mut set = vec![false; hi as usize + 1];
            for part in s.split(',') {
                let (range, step) = match part.split_once('/') {
                    Some((r, st)) => (
                        r,
                        st.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                            BadSchedule(format!("{what}: step `{st}` is not a positive number"))
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
                    return Err(BadSchedule(format!(
                        "{what}: `{part}` is outside {lo}-{hi}"
                    )));
                }
                let mut v = a;
                while v <= b {
                    set[v as usize] = true;
                    v += step;
                }
            }
            Ok(set)
        };
        fn num(s: &str, what: &str) -> Result<u32, BadSchedule> {
            s.parse()
                .map_err(|_| BadSchedule(format!("{what}: `{s}` is not a number")))
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

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod loopfile_tests {
    #[test]
    fn a_triggers_timeout_is_at_most_a_week_as_any_requests() {
        let with = |secs: u64| {
            format!(
                "triggers:\n  - name: a\n    webhook: {{secret_env: S, owner: ci}}\n    task: {{instruction: x, checks: [\"true\"], timeout_secs: {secs}}}\n"
            )
        };
        let week = loop_protocol::contract::MAX_TIMEOUT_SECS;
        let l = crate::loopfile::Loopfile::parse(&with(week), "Loopfile.yaml").unwrap();
        assert_eq!(l.triggers[0].task.timeout_secs, Some(week));
        let e = crate::loopfile::Loopfile::parse(&with(week + 1), "Loopfile.yaml")
            .unwrap_err()
            .message;
        assert!(
            e.contains("Loopfile.yaml:") && e.contains("`timeout_secs` is at most 604800 (a week)"),
            "{e}"
        );
    }

    #[test]
    fn a_github_inlet_needs_githubs_webhook_a_token_and_something_to_answer() {
        let with = |style: &str, github: &str| {
            format!(
                "triggers:\n  - name: gh\n    webhook: {{secret_env: S, owner: gh, style: {style}}}\n    github: {github}\n    task: {{instruction: x, checks: [\"true\"]}}\n"
            )
        };
        let ok = crate::loopfile::Loopfile::parse(
            &with("github", "{token_env: T, label: loop, authors: [member]}"),
            "Loopfile.yaml",
        )
        .unwrap();
        let g = ok.triggers[0].github.clone().unwrap();
        assert_eq!(g.api_url, "https://api.github.com");
        assert_eq!(g.authors, vec!["MEMBER"]);
        assert_eq!(g.remote, "origin");
        let named = crate::loopfile::Loopfile::parse(
            &with("github", "{token_env: T, label: loop, remote: upstream.gh}"),
            "Loopfile.yaml",
        )
        .unwrap();
        assert_eq!(
            named.triggers[0].github.as_ref().unwrap().remote,
            "upstream.gh"
        );
        for (style, github, said) in [
            (
                "hmac",
                "{token_env: T, label: loop}",
                "needs a webhook with `style: github`",
            ),
            ("github", "{label: loop}", "`github` needs a `token_env`"),
            (
                "github",
                "{token_env: T}",
                "needs a `label`, a `command`, or both",
            ),
            (
                "github",
                "{token_env: T, label: l, api_url: 'http://example.test'}",
                "an https:// URL",
            ),
            // A remote is a name git takes as one, never an option.
            (
                "github",
                "{token_env: T, label: l, remote: '--upload-pack=touch x'}",
                "a git remote's name",
            ),
            (
                "github",
                "{token_env: T, label: l, remote: ''}",
                "a git remote's name",
            ),
        ] {
            let e = crate::loopfile::Loopfile::parse(&with(style, github), "Loopfile.yaml")
                .unwrap_err()
                .message;
            assert!(e.contains(said), "{github}: {e}");
        }
    }

    /// Only a GitHub trigger drafts its contract (a `task:` without
    /// `checks`), and `auto_confirm` is for such a task alone.
    #[test]
    fn only_a_github_trigger_may_leave_its_checks_to_a_draft() {
        let parse = |t: &str| crate::loopfile::Loopfile::parse(t, "Loopfile.yaml");
        let gh = |github: &str, task: &str| {
            format!(
                "triggers:\n  - name: gh\n    webhook: {{secret_env: S, owner: gh, style: github}}\n    github: {github}\n    task: {task}\n"
            )
        };
        let drafted = parse(&gh(
            "{token_env: T, label: loop, command: /loop}",
            "{instruction: x}",
        ))
        .unwrap();
        let g = drafted.triggers[0].github.as_ref().unwrap();
        assert!(drafted.triggers[0].task.checks.is_empty());
        assert!(!g.auto_confirm);
        let auto = parse(&gh(
            "{token_env: T, label: loop, auto_confirm: true, console_url: 'https://c.example.test/'}",
            "{instruction: x}",
        ))
        .unwrap();
        let g = auto.triggers[0].github.as_ref().unwrap();
        assert!(g.auto_confirm);
        assert_eq!(g.console_url.as_deref(), Some("https://c.example.test"));
        for (text, said) in [
            (
                gh(
                    "{token_env: T, label: loop, auto_confirm: true}",
                    "{instruction: x, checks: [\"true\"]}",
                ),
                "`auto_confirm` locks a drafted contract",
            ),
            (
                gh(
                    "{token_env: T, label: loop, console_url: 'ftp://x'}",
                    "{instruction: x}",
                ),
                "`console_url` `ftp://x`",
            ),
            (
                "triggers:\n  - name: hook\n    webhook: {secret_env: S, owner: ci}\n    task: {instruction: x}\n".to_string(),
                "only a `github` trigger may leave `checks` out",
            ),
            // Nobody could answer a draft of a label-only trigger on GitHub.
            (
                gh("{token_env: T, label: loop}", "{instruction: x}"),
                "give one (or `auto_confirm: true`)",
            ),
            (
                "triggers:\n  - name: gh\n    webhook: {secret_env: S, owner: gh, style: github}\n    cron: '0 3 * * *'\n    github: {token_env: T, label: loop, command: /loop}\n    task: {instruction: x}\n".to_string(),
                "a scheduled task has nobody to confirm a drafted contract",
            ),
            (
                "triggers:\n  - name: tg\n    chat: {kind: telegram, secret_env: S, token_env: T, owner: o, senders: ['1']}\n    task: {instruction: x}\n".to_string(),
                "only a `github` trigger may leave `checks` out",
            ),
        ] {
            let e = parse(&text).unwrap_err().message;
            assert!(e.contains(said), "{text}: {e}");
        }
    }

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
