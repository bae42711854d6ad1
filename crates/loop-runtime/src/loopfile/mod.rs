//! The project's `Loopfile.yaml`: the sections this build reads. Unknown
//! top-level keys are refused with their position, so a typo never
//! silently drops a setting.

use crate::Error;
use loop_models::config::ModelsSection;
use loop_protocol::yaml::{self, Node, Reader, Value};
use loop_tools::exec_policy::{Decision, ExecPolicy, Rule};
use std::path::{Path, PathBuf};

pub mod sections;
pub mod signin;
pub mod triggers;

/// The sections this build reads.
const SECTIONS: &[&str] = &[
    "version",
    "models",
    "exec",
    "rules",
    "progress",
    "checkpoints",
    "apply",
    "workspace",
    "network",
    "setup",
    "verification",
    "defaults",
    "triggers",
    "store",
    "mcp_servers",
    "project",
    "skills",
    "browser",
    "receipts",
    "console",
];

/// `skills:`'s keys.
const SKILLS_KEYS: &[&str] = &["trust"];

/// `project:`'s keys.
const PROJECT_KEYS: &[&str] = &["id", "serves"];

/// `exec:`'s keys.
const EXEC_KEYS: &[&str] = &["default", "approval_timeout_secs", "rules"];
/// A prefix rule's keys.
const RULE_KEYS: &[&str] = &["prefix", "decision", "examples", "not_examples"];
/// The exec policy's decisions.
const DECISIONS: &[&str] = &["allow", "prompt", "forbidden"];
/// The languages `rules:` holds code rules for.
const RULE_LANGUAGES: &[&str] = &["python", "javascript"];
/// What a language's code rules ban.
const BANNED_KEYS: &[&str] = &["banned_imports", "banned_calls", "banned_attributes"];
/// The stall thresholds of `progress:`.
const PROGRESS_KEYS: &[&str] = &[
    "repeat_same",
    "repeat_failing",
    "alternation",
    "read_only",
    "no_evidence",
];
/// `checkpoints:`'s keys.
const CHECKPOINT_KEYS: &[&str] = &[
    "after_failed_repairs",
    "cost_usd_over",
    "timeout_secs",
    "retry_transient",
    "retry_base_ms",
    "before_apply",
    "pause_clock",
];
/// `apply:`'s keys.
const APPLY_KEYS: &[&str] = &["host_executable"];
/// `workspace:`'s keys.
const WORKSPACE_KEYS: &[&str] = &["share", "detect", "kept_days"];
/// A share's keys.
const SHARE_KEYS: &[&str] = &["path", "mode"];
/// The ways to share.
const SHARE_MODES: &[&str] = &["read_only", "overlay"];
/// `defaults:`'s keys.
const DEFAULTS_KEYS: &[&str] = &["limits", "protected"];
/// `verification:`'s keys.
const VERIFICATION_KEYS: &[&str] = &["build", "test", "lint", "checks"];
/// `setup:`'s keys (its long form).
const SETUP_KEYS: &[&str] = &["run", "keys", "outputs", "timeout_secs"];
/// `network:`'s keys.
const NETWORK_KEYS: &[&str] = &["allow", "setup", "resolve"];
/// An MCP server's keys.
const MCP_KEYS: &[&str] = &[
    "command",
    "url",
    "env",
    "tools",
    "side_effects",
    "read_only",
    "timeout_secs",
    "max_output_bytes",
];

/// A loaded Loopfile.
#[derive(Debug, Default)]
pub struct Loopfile {
    /// Where it was read from.
    pub path: Option<PathBuf>,
    /// `models:`.
    pub models: Option<ModelsSection>,
    /// `exec:` (run_command's prefix rules).
    pub exec: Option<loop_tools::exec_policy::ExecPolicy>,
    /// `rules:` (the code-policy gate).
    pub rules: Option<loop_gates::CodePolicy>,
    /// `progress:` (stall thresholds).
    pub progress: Option<loop_core::ProgressConfig>,
    /// `checkpoints:` (pauses for a person, transient retries).
    pub checkpoints: Option<loop_core::Checkpoints>,
    /// `apply: { host_executable: [GLOB…] }`: more paths that `loop apply`
    /// brings home only with `--trust-host-files`.
    pub host_executable: Vec<String>,
    /// `workspace.share`: untracked project paths a task shares.
    pub shares: Vec<sections::Share>,
    /// `workspace.detect: false`: share only what is declared.
    pub no_share_detection: bool,
    /// `network:`: hosts commands and setup steps may reach, names pinned.
    pub network: sections::NetworkSection,
    /// `setup:`: steps that prepare a task's environments, cached.
    pub setup: Option<sections::SetupSection>,
    /// `verification:`: the project's build, test and lint commands (its
    /// regression guards) and criteria every task's contract gets.
    pub verification: Verification,
    /// `defaults:`: limits and protected globs for contracts made from
    /// `--check` or an instruction alone.
    pub defaults: Defaults,
    /// `triggers:`: webhooks that start tasks from templates.
    pub triggers: Vec<triggers::Trigger>,
    /// `store:`: a PostgreSQL store every process on this project shares
    /// (`postgres://USER@HOST/DB`; the password comes from `PGPASSWORD`,
    /// never the Loopfile, which is committed).
    pub store: Option<String>,
    /// `mcp_servers:`: MCP servers whose allowed tools tasks are offered.
    pub mcp_servers: Vec<loop_tools::mcp::McpServer>,
    /// `workspace.kept_days`: days the store keeps a task's workspace
    /// contents once its change set is applied or discarded (0: dropped
    /// then).
    pub kept_days: u64,
    /// `project:`: the project's id when every clone is to serve the same
    /// project, and other projects' ids whose tasks this one runs too.
    pub project: ProjectSection,
    /// `skills.trust`: the keys whose signed skill bundles a task may use
    /// (each a public key in PEM, or a project path to one).
    pub skills_trust: Vec<String>,
    /// `receipts.trust`: the keys whose receipts `loop ci-check` accepts
    /// (each a public key in PEM, or a project path to one), read from the
    /// pull request's base commit.
    pub receipts_trust: Vec<String>,
    /// `console.github`: GitHub sign-in to the web console.
    pub github_sign_in: Option<signin::GithubSignIn>,
    /// `browser: true`: every task of the project may drive a headless
    /// browser in its sandbox (its contract says so once locked).
    pub browser: bool,
    /// The sections the file holds, in its order (what `loop validate`
    /// says it read).
    pub sections: Vec<String>,
}

/// The Loopfile's `project:`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectSection {
    /// `id:`: the project's identity (committed, so clones share it);
    /// without it each checkout makes its own in `.loop/project-id`.
    pub id: Option<String>,
    /// `serves:`: other projects whose tasks this one's workers take.
    pub serves: Vec<String>,
}

/// Whether `id` can name a project: 8 to 64 letters, digits, `-` or `_`.
pub fn project_id_problem(id: &str) -> Option<String> {
    let ok = (8..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (!ok).then(|| format!("`{id}` is not a project id (8 to 64 letters, digits, `-` or `_`)"))
}

/// `project:`: `id` and `serves`.
fn read_project(r: &mut Reader, node: &Node) -> ProjectSection {
    let mut out = ProjectSection::default();
    let Some(fields) = r.mapping(node, "`project`", PROJECT_KEYS) else {
        return out;
    };
    for (k, v) in fields {
        match k.name.as_str() {
            "id" => {
                if let Some(id) = r.nonempty_string(v, "`project.id`") {
                    match project_id_problem(&id) {
                        Some(why) => r.err(Some(v.pos), why, None),
                        None => out.id = Some(id),
                    }
                }
            }
            "serves" => {
                for item in r.seq(v, "`project.serves`").unwrap_or_default() {
                    if let Some(id) = r.nonempty_string(item, "a project id") {
                        match project_id_problem(&id) {
                            Some(why) => r.err(Some(item.pos), why, None),
                            None => out.serves.push(id),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The Loopfile's `defaults:`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Defaults {
    /// `limits` (in place of the built-in defaults).
    pub limits: Option<loop_protocol::Limits>,
    /// `protected`: globs added to the contract's.
    pub protected: Vec<String>,
}

impl Defaults {
    /// Apply to a contract made from flags or an instruction (before the
    /// command line's own limits).
    pub fn apply(&self, contract: &mut loop_protocol::Contract) {
        if let Some(l) = &self.limits {
            contract.limits = l.clone();
        }
        for g in &self.protected {
            if !contract.protected.contains(g) {
                contract.protected.push(g.clone());
            }
        }
    }
}

/// The Loopfile's `verification:`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verification {
    /// `build`, `test`, `lint`: (kind, command), in that order.
    pub commands: Vec<(&'static str, String)>,
    /// `checks`: criteria added to every task's contract, required.
    pub checks: Vec<loop_protocol::Criterion>,
}

impl Loopfile {
    /// Read `dir/Loopfile.yaml` if it exists.
    pub fn load(dir: &Path) -> Result<Loopfile, Error> {
        let path = dir.join("Loopfile.yaml");
        let origin = path.display().to_string();
        // Through the door: a Loopfile that is a link (or a FIFO, or huge)
        // is refused by name, never read through.
        let Some(text) = loop_workspace::door::read_text(
            dir,
            "Loopfile.yaml",
            loop_workspace::door::MAX_PROJECT_FILE,
        )
        .map_err(|e| Error::usage(e.to_string()))?
        else {
            return Ok(Loopfile::default());
        };
        Self::parse(&text, &origin).map(|mut l| {
            l.path = Some(path);
            l
        })
    }

    /// Parse Loopfile text; `origin` names it in errors. Every section is
    /// read and every problem in every section reported at once, each with
    /// its `file:line:column`.
    pub fn parse(text: &str, origin: &str) -> Result<Loopfile, Error> {
        let root = yaml::parse(text)
            .map_err(|e| Error::usage(format!("{origin}:{}: {}", e.pos, e.message)))?;
        let mut out = Loopfile::default();
        let mut r = Reader::new(origin);
        let entries = match &root.value {
            Value::Null => &[],
            _ => r.entries(&root, "a Loopfile").unwrap_or_default(),
        };
        for (k, v) in entries {
            if SECTIONS.contains(&k.name.as_str()) && !out.sections.contains(&k.name) {
                out.sections.push(k.name.clone());
            }
            match k.name.as_str() {
                "version" => {}
                "models" => out.models = ModelsSection::read(&mut r, v),
                "exec" => out.exec = read_exec(&mut r, v),
                "rules" => out.rules = read_rules(&mut r, v),
                "progress" => out.progress = read_progress(&mut r, v),
                "checkpoints" => out.checkpoints = read_checkpoints(&mut r, v),
                "apply" => out.host_executable = read_apply(&mut r, v),
                "workspace" => read_workspace(&mut r, v, &mut out),
                "network" => out.network = read_network(&mut r, v),
                "setup" => out.setup = read_setup(&mut r, v),
                "verification" => out.verification = read_verification(&mut r, v),
                "defaults" => out.defaults = read_defaults(&mut r, v),
                "triggers" => out.triggers = triggers::read_triggers(&mut r, v),
                "store" => out.store = read_store(&mut r, v),
                "mcp_servers" => out.mcp_servers = read_mcp_servers(&mut r, v),
                "project" => out.project = read_project(&mut r, v),
                "browser" => out.browser = r.boolean(v, "`browser`").unwrap_or(false),
                "console" => out.github_sign_in = signin::read_console(&mut r, v),
                "receipts" => {
                    for (k, v) in r.mapping(v, "`receipts`", SKILLS_KEYS).unwrap_or_default() {
                        if k.name == "trust" {
                            out.receipts_trust =
                                r.strings(v, "`receipts.trust`").unwrap_or_default();
                        }
                    }
                }
                "skills" => {
                    for (k, v) in r.mapping(v, "`skills`", SKILLS_KEYS).unwrap_or_default() {
                        if k.name == "trust" {
                            out.skills_trust = r.strings(v, "`skills.trust`").unwrap_or_default();
                        }
                    }
                }
                other => r.err(
                    Some(k.pos),
                    format!(
                        "unknown Loopfile section `{other}`{} (this build reads: {})",
                        yaml::closest(other, SECTIONS)
                            .map(|c| format!(" (did you mean `{c}`?)"))
                            .unwrap_or_default(),
                        SECTIONS.join(", ")
                    ),
                    None,
                ),
            }
        }
        r.finish(Some(out)).map_err(|d| Error::usage(d.to_string()))
    }
}

/// `mcp_servers:`: each server's transport, allow-list and bounds.
fn read_mcp_servers(r: &mut Reader, node: &Node) -> Vec<loop_tools::mcp::McpServer> {
    use loop_tools::mcp::{self, McpServer};
    let mut out = Vec::new();
    for (k, v) in r.entries(node, "`mcp_servers`").unwrap_or_default() {
        let name = k.name.clone();
        if let Some(why) = mcp::server_name_problem(&name) {
            r.err(Some(k.pos), why, None);
            continue;
        }
        let what = format!("`mcp_servers.{name}`");
        let Some(fields) = r.mapping(v, &what, MCP_KEYS) else {
            continue;
        };
        let mut command: Option<Vec<String>> = None;
        let mut url: Option<String> = None;
        let mut env = std::collections::BTreeMap::new();
        let mut tools: Option<Vec<String>> = None;
        let (mut side_effects, mut read_only) = (Vec::new(), Vec::new());
        let mut timeout_secs = mcp::DEFAULT_TIMEOUT_SECS;
        let mut max_output_bytes = mcp::DEFAULT_MAX_OUTPUT_BYTES;
        for (fk, fv) in fields {
            let named = |key: &str| format!("`mcp_servers.{name}.{key}`");
            match fk.name.as_str() {
                "command" => command = read_mcp_command(r, fv, &what).or(command),
                "url" => url = read_mcp_url(r, fv, &what).or(url),
                "env" => {
                    for (ek, ev) in r.entries(fv, "`env`").unwrap_or_default() {
                        if let Some(why) = mcp::env_problem(&ek.name) {
                            r.err(Some(ek.pos), why, None);
                            continue;
                        }
                        if let Some(val) = r.string(ev, "a value") {
                            env.insert(ek.name.clone(), val);
                        }
                    }
                }
                "tools" => tools = Some(read_tool_names(r, fv, &named("tools"), true)),
                "side_effects" => {
                    side_effects = read_tool_names(r, fv, &named("side_effects"), false)
                }
                "read_only" => read_only = read_tool_names(r, fv, &named("read_only"), false),
                "timeout_secs" => {
                    timeout_secs = bounded(r, fv, ("timeout_secs", 1, 3600), &what, "3600")
                        .unwrap_or(timeout_secs)
                }
                _ => {
                    max_output_bytes = bounded(
                        r,
                        fv,
                        ("max_output_bytes", 1024, 64 * 1024 * 1024),
                        &what,
                        "64 MiB",
                    )
                    .unwrap_or(max_output_bytes)
                }
            }
        }
        if let Some(both) = side_effects.iter().find(|t| read_only.contains(t)) {
            r.err(
                Some(k.pos),
                format!("{what}: `{both}` is under both side_effects and read_only"),
                None,
            );
        }
        let Some(transport) = mcp_transport(r, k.pos, &what, (command, url, env)) else {
            continue;
        };
        let Some(tools) = tools.filter(|t| !t.is_empty()) else {
            r.err(
                Some(k.pos),
                format!("{what} needs `tools`: the allow-list of the tools a task is offered (`*` for all)"),
                None,
            );
            continue;
        };
        out.push(McpServer {
            name,
            transport,
            tools,
            side_effects,
            read_only,
            timeout_secs,
            max_output_bytes,
            pinned: Vec::new(),
        });
    }
    out
}

/// Tool names under `what` (`*` too with `star`).
fn read_tool_names(r: &mut Reader, v: &Node, what: &str, star: bool) -> Vec<String> {
    let mut names = Vec::new();
    for item in r.seq(v, what).unwrap_or_default() {
        let Some(t) = r.nonempty_string(item, "a tool name") else {
            continue;
        };
        let valid = (star && t == "*")
            || (t.len() <= 64
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')));
        if valid {
            names.push(t);
        } else {
            r.err(Some(item.pos), format!("`{t}` is not a tool name"), None);
        }
    }
    names
}

/// A server's `command`: an argument list (no shell runs it) with a
/// program and no empty argument.
fn read_mcp_command(r: &mut Reader, fv: &Node, what: &str) -> Option<Vec<String>> {
    if matches!(fv.value, Value::Str(_)) {
        r.err(
            Some(fv.pos),
            format!("{what}.command is an argument list, not a string"),
            Some("e.g. command: [node, server.js, .] (no shell runs it)".into()),
        );
        return None;
    }
    let argv = r.strings(fv, "`command`").unwrap_or_default();
    if argv.is_empty() || argv.iter().any(|a| a.is_empty() || a.contains('\0')) {
        r.err(
            Some(fv.pos),
            format!("{what}.command needs a program and no empty argument"),
            None,
        );
        return None;
    }
    Some(argv)
}

/// A server's `url`: http:// or https://, with no credentials (the
/// Loopfile is committed).
fn read_mcp_url(r: &mut Reader, fv: &Node, what: &str) -> Option<String> {
    let u = r.nonempty_string(fv, "`url`")?;
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"));
    match rest {
        None => r.err(
            Some(fv.pos),
            format!("{what}.url is an http:// or https:// URL, not `{u}`"),
            None,
        ),
        Some(rest) if rest.split('/').next().unwrap_or("").contains('@') => r.err(
            Some(fv.pos),
            format!("{what}.url holds credentials, and the Loopfile is committed"),
            None,
        ),
        Some(_) => return Some(u),
    }
    None
}

/// A number under `key`, at least `min` and at most `max` (said as
/// `shown_max`).
fn bounded(
    r: &mut Reader,
    fv: &Node,
    (key, min, max): (&str, u64, u64),
    what: &str,
    shown_max: &str,
) -> Option<u64> {
    let n = r.unsigned(fv, &format!("`{key}`"), min)?;
    if n > max {
        r.err(
            Some(fv.pos),
            format!("{what}.{key} is at most {shown_max}"),
            None,
        );
        return None;
    }
    Some(n)
}

/// How the server is reached: run with `command` in the sandbox, or at
/// `url` over streamable HTTP (one of them; `env` only for a command).
fn mcp_transport(
    r: &mut Reader,
    pos: loop_protocol::yaml::Pos,
    what: &str,
    (command, url, env): (
        Option<Vec<String>>,
        Option<String>,
        std::collections::BTreeMap<String, String>,
    ),
) -> Option<loop_tools::mcp::McpTransport> {
    use loop_tools::mcp::McpTransport;
    let why = match (command, url) {
        (Some(command), None) => return Some(McpTransport::Stdio { command, env }),
        (None, Some(url)) if env.is_empty() => return Some(McpTransport::Http { url }),
        (None, Some(_)) => format!("{what}: `env` is for a server run with `command`"),
        (Some(_), Some(_)) => format!("{what} has both `command` and `url`: one of them"),
        (None, None) => {
            format!("{what} needs `command` (run in the sandbox) or `url` (streamable HTTP)")
        }
    };
    r.err(Some(pos), why, None);
    None
}

/// `store:`: a PostgreSQL URL without a password.
fn read_store(r: &mut Reader, v: &Node) -> Option<String> {
    let url = r.nonempty_string(v, "`store`")?;
    let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    else {
        r.err(
            Some(v.pos),
            format!("`store` is a PostgreSQL URL (postgres://USER@HOST/DB), not `{url}`"),
            Some("without `store:` the project keeps its tasks in .loop/loop.db".into()),
        );
        return None;
    };
    // The user info ends at the last `@` (a password may hold `/`).
    let has_password =
        rest.rsplit_once('@').is_some_and(|(a, _)| a.contains(':')) || rest.contains("password=");
    if has_password {
        r.err(
            Some(v.pos),
            "`store` holds a password, and the Loopfile is committed".into(),
            Some(
                "name the user only and set PGPASSWORD (or LOOP_STORE_URL) where the process runs"
                    .into(),
            ),
        );
        return None;
    }
    Some(url)
}

/// A decision of the exec policy.
fn decision(r: &mut Reader, n: &Node) -> Option<Decision> {
    match &n.value {
        Value::Str(s) if s == DECISIONS[0] => Some(Decision::Allow),
        Value::Str(s) if s == DECISIONS[1] => Some(Decision::Prompt),
        Value::Str(s) if s == DECISIONS[2] => Some(Decision::Forbidden),
        _ => {
            r.err(
                Some(n.pos),
                "a decision is `allow`, `prompt` or `forbidden`".into(),
                None,
            );
            None
        }
    }
}

/// One prefix rule of `exec.rules`.
fn read_rule(r: &mut Reader, item: &Node) -> Option<Rule> {
    let fields = r.mapping(item, "a rule", RULE_KEYS)?;
    let mut rule = Rule {
        prefix: Vec::new(),
        decision: Decision::Prompt,
        examples: Vec::new(),
        not_examples: Vec::new(),
    };
    let mut has_decision = false;
    let mut ok = true;
    for (k, v) in fields {
        match k.name.as_str() {
            "prefix" => match r.strings(v, "`prefix`") {
                Some(p) => {
                    rule.prefix = p
                        .iter()
                        .flat_map(|s| s.split_whitespace().map(str::to_string))
                        .collect()
                }
                None => ok = false,
            },
            "decision" => match decision(r, v) {
                Some(d) => {
                    rule.decision = d;
                    has_decision = true;
                }
                None => ok = false,
            },
            "examples" => rule.examples = r.strings(v, "`examples`").unwrap_or_default(),
            "not_examples" => {
                rule.not_examples = r.strings(v, "`not_examples`").unwrap_or_default()
            }
            _ => ok = false,
        }
    }
    if rule.prefix.is_empty() && ok {
        r.err(Some(item.pos), "a rule needs a `prefix`".into(), None);
        ok = false;
    }
    if !has_decision && ok {
        r.err(Some(item.pos), "a rule needs a `decision`".into(), None);
        ok = false;
    }
    ok.then_some(rule)
}

/// `exec:`: default decision, approval timeout, and prefix rules whose
/// examples are checked here, at load.
fn read_exec(r: &mut Reader, node: &Node) -> Option<ExecPolicy> {
    let entries = r.mapping(node, "`exec`", EXEC_KEYS)?;
    let mut policy = ExecPolicy::default();
    let mut rule_pos = Vec::new();
    let mut ok = true;
    for (k, v) in entries {
        match k.name.as_str() {
            "default" => match decision(r, v) {
                Some(d) => policy.default = d,
                None => ok = false,
            },
            "approval_timeout_secs" => match r.unsigned(v, "`approval_timeout_secs`", 1) {
                Some(n) => policy.approval_timeout_secs = n,
                None => ok = false,
            },
            "rules" => {
                for item in r.seq(v, "`rules`").unwrap_or_default() {
                    match read_rule(r, item) {
                        Some(rule) => {
                            rule_pos.push(item.pos);
                            policy.rules.push(rule);
                        }
                        None => ok = false,
                    }
                }
            }
            _ => ok = false,
        }
    }
    if !ok {
        return None;
    }
    let problems = policy.check_examples();
    if let Some(first) = problems.first() {
        // "rule N (...)": point at rule N.
        let n: usize = first
            .strip_prefix("rule ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let pos = rule_pos
            .get(n.saturating_sub(1))
            .copied()
            .unwrap_or(node.pos);
        r.err(Some(pos), problems.join("; "), None);
        return None;
    }
    Some(policy)
}

/// `rules:`: banned imports, calls and attributes for Python and JavaScript.
fn read_rules(r: &mut Reader, node: &Node) -> Option<loop_gates::CodePolicy> {
    let langs = r.mapping(node, "`rules`", RULE_LANGUAGES)?;
    let mut policy = loop_gates::CodePolicy::default();
    for (lang, body) in langs {
        let target = match lang.name.as_str() {
            "python" => &mut policy.python,
            "javascript" => &mut policy.javascript,
            _ => continue,
        };
        let what = format!("`rules.{}`", lang.name);
        let Some(fields) = r.mapping(body, &what, BANNED_KEYS) else {
            continue;
        };
        for (k, v) in fields {
            let mut names = Vec::new();
            for i in r.seq(v, &format!("`{}`", k.name)).unwrap_or_default() {
                if let Some(s) = r.nonempty_string(i, "a name") {
                    names.push(s.trim().to_string());
                }
            }
            match k.name.as_str() {
                "banned_imports" => target.banned_imports = names,
                "banned_calls" => target.banned_calls = names,
                "banned_attributes" => target.banned_attributes = names,
                _ => {}
            }
        }
    }
    Some(policy)
}

/// `progress:`: the stall thresholds (each a count of steps, 2 to 1000).
fn read_progress(r: &mut Reader, node: &Node) -> Option<loop_core::ProgressConfig> {
    let fields = r.mapping(node, "`progress`", PROGRESS_KEYS)?;
    let mut c = loop_core::ProgressConfig::default();
    for (k, v) in fields {
        let n = match v.value {
            Value::Int(n) if (2..=1000).contains(&n) => n as usize,
            _ => {
                r.err(
                    Some(v.pos),
                    format!("`{}` is a number of steps from 2 to 1000", k.name),
                    None,
                );
                continue;
            }
        };
        match k.name.as_str() {
            "repeat_same" => c.repeat_same = n,
            "repeat_failing" => c.repeat_failing = n,
            "alternation" => c.alternation = n,
            "read_only" => c.read_only = n,
            "no_evidence" => c.no_evidence = n,
            _ => {}
        }
    }
    Some(c)
}

/// `apply:`: more paths `loop apply` brings home only with
/// `--trust-host-files`.
fn read_apply(r: &mut Reader, node: &Node) -> Vec<String> {
    let mut globs = Vec::new();
    let Some(fields) = r.mapping(node, "`apply`", APPLY_KEYS) else {
        return globs;
    };
    for (_, v) in fields {
        for item in r.seq(v, "`host_executable`").unwrap_or_default() {
            let Some(g) = r.string(item, "a glob") else {
                continue;
            };
            match loop_workspace::Protected::new(std::slice::from_ref(&g)) {
                Ok(_) => globs.push(g),
                Err(e) => r.err(Some(item.pos), format!("`{g}` is not a glob: {e}"), None),
            }
        }
    }
    globs
}

/// `workspace:`: the environments a task shares (`share`, each a path or
/// `{path, mode}`) and whether more are detected per stack (`detect`).
fn read_workspace(r: &mut Reader, node: &Node, out: &mut Loopfile) {
    let Some(fields) = r.mapping(node, "`workspace`", WORKSPACE_KEYS) else {
        return;
    };
    for (k, v) in fields {
        if k.name == "detect" {
            out.no_share_detection = r.boolean(v, "`detect`").is_some_and(|d| !d);
            continue;
        }
        if k.name == "kept_days" {
            if let Some(n) = r.unsigned(v, "`workspace.kept_days`", 0) {
                out.kept_days = n.min(3650);
            }
            continue;
        }
        for item in r.seq(v, "`share`").unwrap_or_default() {
            let (path_node, mode) = match &item.value {
                Value::Map(_) => {
                    let Some(entries) = r.mapping(item, "a share", SHARE_KEYS) else {
                        continue;
                    };
                    let find = |name: &str| entries.iter().find(|(k, _)| k.name == name);
                    let Some((_, p)) = find("path") else {
                        r.err(Some(item.pos), "a share needs a `path`".into(), None);
                        continue;
                    };
                    let mode = match find("mode") {
                        None => Some(sections::ShareMode::ReadOnly),
                        Some((_, m)) => r.one_of(m, "share mode", SHARE_MODES).map(|m| {
                            if m == "overlay" {
                                sections::ShareMode::Overlay
                            } else {
                                sections::ShareMode::ReadOnly
                            }
                        }),
                    };
                    (p, mode)
                }
                _ => (item, Some(sections::ShareMode::ReadOnly)),
            };
            let (Some(path), Some(mode)) = (r.rel_path(path_node, "a shared path"), mode) else {
                continue;
            };
            // A share is protected by its path as a glob: no glob syntax in it.
            if path.as_str().contains(['*', '?', '[', ']', '{', '}', '\\']) {
                r.err(
                    Some(path_node.pos),
                    format!(
                        "`{}`: a shared path cannot hold glob characters (* ? [ ] {{ }} \\)",
                        path.as_str()
                    ),
                    None,
                );
                continue;
            }
            let first = path.as_str().split('/').next().unwrap_or_default();
            if matches!(first, ".git" | ".loop") {
                r.err(
                    Some(path_node.pos),
                    format!(
                        "`{}` is the runtime's or git's own, never shared",
                        path.as_str()
                    ),
                    None,
                );
                continue;
            }
            if out.shares.iter().any(|s| s.path == path.as_str()) {
                r.err(
                    Some(path_node.pos),
                    format!("`{}` is shared twice", path.as_str()),
                    None,
                );
                continue;
            }
            out.shares.push(sections::Share {
                path: path.as_str().to_string(),
                mode,
                why: "declared in the Loopfile".into(),
                declared: true,
            });
        }
    }
}

/// `defaults:`: `limits` (as a contract's) and `protected` (globs).
fn read_defaults(r: &mut Reader, node: &Node) -> Defaults {
    let mut out = Defaults::default();
    let Some(fields) = r.mapping(node, "`defaults`", DEFAULTS_KEYS) else {
        return out;
    };
    for (k, v) in fields {
        if k.name == "limits" {
            out.limits = r.limits(v);
        } else {
            for item in r.seq(v, "`protected`").unwrap_or_default() {
                if let Some(g) = r.glob(item) {
                    out.protected.push(g);
                }
            }
        }
    }
    out
}

/// `verification:`: `build`, `test`, `lint` (shell commands) and
/// `checks` (criteria as in a contract).
fn read_verification(r: &mut Reader, node: &Node) -> Verification {
    let mut out = Verification::default();
    let Some(fields) = r.mapping(node, "`verification`", VERIFICATION_KEYS) else {
        return out;
    };
    for kind in ["build", "test", "lint"] {
        if let Some((_, v)) = fields.iter().find(|(k, _)| k.name == kind)
            && let Some(cmd) = r.string(v, &format!("`verification.{kind}`"))
        {
            if cmd.trim().is_empty() {
                r.err(Some(v.pos), format!("`verification.{kind}` is empty"), None);
            } else {
                out.commands.push((kind, cmd));
            }
        }
    }
    if let Some((_, v)) = fields.iter().find(|(k, _)| k.name == "checks") {
        out.checks = r.criteria(v).unwrap_or_default();
        for c in &out.checks {
            if c.id.starts_with("stack-") || c.id.starts_with("project-") {
                r.err(
                    Some(v.pos),
                    format!(
                        "criterion id `{}`: `stack-` and `project-` ids are the runtime's",
                        c.id
                    ),
                    None,
                );
            }
        }
    }
    out
}

/// `setup:`: a list of shell steps, or `{run: [...], keys: [FILE...],
/// outputs: [DIR...], timeout_secs: N}`.
fn read_setup(r: &mut Reader, node: &Node) -> Option<sections::SetupSection> {
    let mut out = sections::SetupSection::default();
    let steps = |r: &mut Reader, n: &Node| -> Vec<String> {
        let mut v = Vec::new();
        for item in r.seq(n, "setup steps").unwrap_or_default() {
            if let Some(s) = r.string(item, "a setup step") {
                if s.trim().is_empty() {
                    r.err(Some(item.pos), "a setup step is empty".into(), None);
                } else {
                    v.push(s);
                }
            }
        }
        v
    };
    let paths = |r: &mut Reader, n: &Node, what: &str| -> Vec<String> {
        let mut v = Vec::new();
        for item in r.seq(n, what).unwrap_or_default() {
            if let Some(p) = r.rel_path(item, what) {
                let p = p.as_str().to_string();
                let first = p.split('/').next().unwrap_or_default();
                if matches!(first, ".git" | ".loop") {
                    r.err(
                        Some(item.pos),
                        format!("`{p}` is the runtime's or git's own"),
                        None,
                    );
                } else if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
        v
    };
    match &node.value {
        Value::Map(_) => {
            for (k, v) in r.mapping(node, "`setup`", SETUP_KEYS)? {
                match k.name.as_str() {
                    "run" => out.steps = steps(r, v),
                    "keys" => out.keys = Some(paths(r, v, "a key file")),
                    "outputs" => {
                        let o = paths(r, v, "a setup output");
                        for p in &o {
                            if p.contains(['*', '?', '[', ']', '{', '}', '\\']) {
                                r.err(
                                    Some(v.pos),
                                    format!("`{p}`: a setup output is a path in the project (a directory, or a file the build generates), not a pattern"),
                                    None,
                                );
                            }
                        }
                        out.outputs = Some(o);
                    }
                    _ => out.timeout_secs = r.unsigned(v, "`timeout_secs`", 1)?,
                }
            }
        }
        _ => out.steps = steps(r, node),
    }
    if out.steps.is_empty() {
        r.err(Some(node.pos), "`setup` has no steps".into(), None);
        return None;
    }
    Some(out)
}

/// `network:`: `allow` (hosts `run_command` may reach through the egress
/// proxy), `setup` (hosts setup steps may reach), `resolve` (names pinned
/// to `ip:port`). Entries are host patterns or presets.
fn read_network(r: &mut Reader, node: &Node) -> sections::NetworkSection {
    let mut out = sections::NetworkSection::default();
    let Some(fields) = r.mapping(node, "`network`", NETWORK_KEYS) else {
        return out;
    };
    for (k, v) in fields {
        if k.name == "resolve" {
            for (name, addr) in r.entries(v, "`resolve`").unwrap_or_default() {
                let host = name.name.to_ascii_lowercase();
                if let Some(why) =
                    loop_protocol::contract::host_pattern_problem(&host).or_else(|| {
                        host.contains('*')
                            .then(|| format!("`{host}`: a pinned name has no `*`"))
                    })
                {
                    r.err(Some(name.pos), why, None);
                    continue;
                }
                let Some(text) = r.string(addr, "an address") else {
                    continue;
                };
                match text.parse::<std::net::SocketAddr>() {
                    Ok(a) => out.resolve.push((host, a)),
                    Err(_) => r.err(
                        Some(addr.pos),
                        format!("`{text}` is not an address (ip:port, e.g. 10.0.0.5:8443)"),
                        None,
                    ),
                }
            }
            continue;
        }
        let mut hosts = Vec::new();
        for item in r.seq(v, &format!("`{}`", k.name)).unwrap_or_default() {
            let Some(h) = r.string(item, "an allowed host") else {
                continue;
            };
            match loop_protocol::contract::host_pattern_problem(&h) {
                Some(why) => r.err(Some(item.pos), why, None),
                None => hosts.push(h),
            }
        }
        if k.name == "allow" {
            out.allow = hosts;
        } else {
            out.setup = hosts;
        }
    }
    out
}

/// `checkpoints:`: when to pause for a person, and transient retries.
fn read_checkpoints(r: &mut Reader, node: &Node) -> Option<loop_core::Checkpoints> {
    let fields = r.mapping(node, "`checkpoints`", CHECKPOINT_KEYS)?;
    let mut c = loop_core::Checkpoints::default();
    for (k, v) in fields {
        let what = format!("`{}`", k.name);
        match k.name.as_str() {
            "after_failed_repairs" => {
                c.after_failed_repairs = r
                    .unsigned(v, &what, 1)
                    .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
            }
            "timeout_secs" => c.timeout_secs = r.unsigned(v, &what, 1).unwrap_or(c.timeout_secs),
            "retry_transient" => {
                c.retry_transient = r
                    .unsigned(v, &what, 0)
                    .map_or(c.retry_transient, |n| n.min(10) as u32)
            }
            "retry_base_ms" => c.retry_base_ms = r.unsigned(v, &what, 1).unwrap_or(c.retry_base_ms),
            "before_apply" => c.before_apply = r.boolean(v, &what).unwrap_or(c.before_apply),
            "pause_clock" => c.pause_clock = r.boolean(v, &what).unwrap_or(c.pause_clock),
            "cost_usd_over" => c.cost_usd_over = r.number(v, &what, 0.0),
            _ => {}
        }
    }
    Some(c)
}

/// Where the Loopfile schema says it lives.
pub const LOOPFILE_SCHEMA_ID: &str = "https://loop-engine.dev/schema/loopfile-v1.json";

fn props(keys: &[&str], each: impl Fn(&str) -> serde_json::Value) -> serde_json::Value {
    serde_json::Value::Object(keys.iter().map(|k| (k.to_string(), each(k))).collect())
}

/// The schema of the Loopfile's `triggers:` (webhooks and schedules).
fn triggers_schema() -> serde_json::Value {
    use serde_json::json;
    json!({"type": "array", "items": {
    "type": "object", "additionalProperties": false, "required": ["name", "task"],
    "anyOf": [{"required": ["webhook"]}, {"required": ["cron"]}, {"required": ["chat"]}],
    // Only GitHub's inlet drafts a contract: every other task has checks.
    "if": {"not": {"required": ["github"]}},
    "then": {"properties": {"task": {"required": ["checks"]}}},
    "properties": {
        "cron": {"type": "string", "minLength": 9, "description": "minute hour day-of-month month day-of-week, in UTC"},
        "name": {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"},
        "webhook": {"type": "object", "additionalProperties": false,
            "required": ["secret_env", "owner"],
            "properties": props(triggers::WEBHOOK_KEYS, |k| match k {
                "style" => json!({"enum": ["github", "hmac"]}),
                "secret_env" => json!({"type": "string", "minLength": 1,
                    "description": "the environment variable holding the shared secret"}),
                _ => json!({"type": "string", "minLength": 1,
                    "description": "the owner of the tasks it starts"}),
            })},
        "chat": {"type": "object", "additionalProperties": false,
            "required": ["kind", "secret_env", "token_env", "owner", "senders"],
            "description": "a Slack slash command or a Telegram bot's message starting with `command` from one of `senders` starts the task; its progress is posted there, approvals with buttons `approvers` may press",
            "properties": props(triggers::CHAT_KEYS, |k| match k {
                "kind" => json!({"enum": ["slack", "telegram"]}),
                "senders" | "approvers" => json!({"type": "array", "items": {"type": "string", "minLength": 1},
                    "description": "user ids"}),
                "api_url" | "console_url" => json!({"type": "string", "pattern": "^(https://|http://127\\.0\\.0\\.1:)"}),
                "secret_env" => json!({"type": "string", "minLength": 1,
                    "description": "the environment variable holding Slack's signing secret or the Telegram webhook's secret token"}),
                "token_env" => json!({"type": "string", "minLength": 1,
                    "description": "the environment variable holding the bot's token"}),
                _ => json!({"type": "string", "minLength": 1}),
            })},
        "github": {"type": "object", "additionalProperties": false,
            "required": ["token_env"],
            "description": "with a `style: github` webhook: an issue labelled `label`, or a comment starting with `command` by an allowed author, starts the task; the outcome is reported back (a comment; for a verified task a pull request with the receipt)",
            "properties": props(triggers::GITHUB_KEYS, |k| match k {
                "token_env" => json!({"type": "string", "minLength": 1,
                    "description": "the environment variable holding the API token"}),
                "api_url" => json!({"type": "string", "pattern": "^(https://|http://127\\.0\\.0\\.1:)",
                    "description": "the REST API's base URL (GitHub Enterprise: https://HOST/api/v3)"}),
                "authors" => json!({"type": "array", "items": {"enum": ["OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE"]},
                    "description": "the author associations whose comments are taken (default OWNER, MEMBER, COLLABORATOR)"}),
                "label" => json!({"type": "string", "minLength": 1, "description": "the label that asks for a task"}),
                "remote" => json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$",
                    "description": "the project's git remote a pull request's head is fetched from (refs/pull/N/head; default origin)"}),
                "auto_confirm" => json!({"type": "boolean",
                    "description": "a task without checks: lock the drafted contract its critic accepted without a person's answer (otherwise it is posted on the issue for a reply `COMMAND confirm ID`, or the console)"}),
                "console_url" => json!({"type": "string", "pattern": "^(https://|http://127\\.0\\.0\\.1:)",
                    "description": "the console's address, for a link to a drafted contract"}),
                _ => json!({"type": "string", "minLength": 1, "description": "the command a comment starts with, such as /loop"}),
            })},
        "task": {"type": "object", "additionalProperties": false,
            "required": ["instruction"],
            "description": "the task each firing starts; without `checks` (a `github` trigger's only) its contract is drafted from the request",
            "properties": props(triggers::TEMPLATE_KEYS, |k| match k {
                "checks" | "artifacts" => json!({"type": "array", "items": {"type": "string", "minLength": 1}}),
                "max_steps" => json!({"type": "integer", "minimum": 1}),
                "timeout_secs" => json!({"type": "integer", "minimum": 1,
                    "maximum": loop_protocol::contract::MAX_TIMEOUT_SECS}),
                    "owner" => json!({"type": "string", "minLength": 1, "description": "who a scheduled task belongs to"}),
                _ => json!({"type": "string", "minLength": 1}),
            })}
    }}})
}

/// The schema of the Loopfile's `mcp_servers:`.
fn mcp_servers_schema() -> serde_json::Value {
    use serde_json::json;
    json!({"type": "object",
    "description": "MCP servers whose allowed tools tasks are offered (as mcp__SERVER__TOOL)",
    "propertyNames": {"pattern": "^[a-z0-9_-]{1,32}$"},
    "additionalProperties": {"type": "object", "additionalProperties": false,
    "required": ["tools"],
    "oneOf": [{"required": ["command"]}, {"required": ["url"]}],
    "properties": props(MCP_KEYS, |k| match k {
        "command" => json!({"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
            "description": "the server's argument vector, run inside the sandbox in the workspace (read-only to it)"}),
        "url" => json!({"type": "string", "pattern": "^https?://[^@/]+(/.*)?$",
            "description": "a streamable HTTP endpoint"}),
        "env" => json!({"type": "object", "additionalProperties": {"type": "string"},
            "description": "the server's environment beside a fixed PATH (nothing is taken from the host)"}),
        "tools" => json!({"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
            "description": "the allow-list: the tools offered (`*` for all)"}),
        "side_effects" => json!({"type": "array", "items": {"type": "string", "minLength": 1},
            "description": "tools a person approves call by call, whatever the server says"}),
        "read_only" => json!({"type": "array", "items": {"type": "string", "minLength": 1},
            "description": "tools vouched to have no side effects (no approval)"}),
        "timeout_secs" => json!({"type": "integer", "minimum": 1, "maximum": 3600}),
        _ => json!({"type": "integer", "minimum": 1024, "maximum": 67108864}),
    })}})
}

/// The schema of the Loopfile's section `k` (`rule`: an exec rule's;
/// `contract`: the contract's schema, whose limits the defaults take).
fn section_schema(
    k: &str,
    rule: &serde_json::Value,
    contract: &serde_json::Value,
) -> serde_json::Value {
    use serde_json::json;
    match k {
        "version" => json!({"const": 1}),
        "models" => json!({"$ref": "#/$defs/models"}),
        "exec" => json!({"type": "object", "additionalProperties": false,
        "properties": props(EXEC_KEYS, |k| match k {
            "default" => json!({"enum": DECISIONS}),
            "approval_timeout_secs" => json!({"type": "integer", "minimum": 1}),
            _ => json!({"type": "array", "items": rule.clone()}),
        })}),
        "rules" => json!({"type": "object", "additionalProperties": false,
        "properties": props(RULE_LANGUAGES, |_| json!({
            "type": "object", "additionalProperties": false,
            "properties": props(BANNED_KEYS, |_| json!({"type": "array",
                "items": {"type": "string", "minLength": 1}}))
        }))}),
        "progress" => json!({"type": "object", "additionalProperties": false,
        "properties": props(PROGRESS_KEYS, |_| json!({"type": "integer", "minimum": 2, "maximum": 1000}))}),
        "checkpoints" => json!({"type": "object", "additionalProperties": false,
        "properties": props(CHECKPOINT_KEYS, |k| match k {
            "cost_usd_over" => json!({"type": "number", "minimum": 0}),
            "before_apply" | "pause_clock" => json!({"type": "boolean"}),
            "retry_transient" => json!({"type": "integer", "minimum": 0}),
            _ => json!({"type": "integer", "minimum": 1}),
        })}),
        "workspace" => json!({"type": "object", "additionalProperties": false,
        "properties": props(WORKSPACE_KEYS, |k| match k {
            "detect" => json!({"type": "boolean", "default": true}),
            "kept_days" => json!({"type": "integer", "minimum": 0, "maximum": 3650, "default": 0,
                "description": "days the store keeps a task's workspace contents (for rebuilding it on another machine) once its change set is applied or discarded; 0 drops them then"}),
            _ => json!({"type": "array", "items": {"oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "object", "additionalProperties": false, "required": ["path"],
                 "properties": props(SHARE_KEYS, |k| match k {
                    "mode" => json!({"enum": SHARE_MODES}),
                    _ => json!({"type": "string", "minLength": 1}),
                 })},
            ]}}),
        })}),
        "setup" => {
            let steps = json!({"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}});
            json!({"oneOf": [steps.clone(), {"type": "object", "additionalProperties": false,
            "required": ["run"],
            "properties": props(SETUP_KEYS, |k| match k {
                "run" => steps.clone(),
                "timeout_secs" => json!({"type": "integer", "minimum": 1}),
                "keys" => json!({"type": "array", "items": {"type": "string", "minLength": 1},
                    "description": "files whose content keys the cached layer (default: the lockfiles found)"}),
                _ => json!({"type": "array", "items": {"type": "string", "minLength": 1},
                    "description": "top-level directories the steps make, shared read-only (default: every new one)"}),
            })}]})
        }
        "defaults" => json!({"type": "object", "additionalProperties": false,
        "properties": props(DEFAULTS_KEYS, |k| match k {
            "limits" => contract["properties"]["limits"].clone(),
            _ => json!({"type": "array", "items": {"type": "string", "minLength": 1},
                "description": "globs no tool may write, added to every contract made from --check or an instruction"}),
        })}),
        "verification" => json!({"type": "object", "additionalProperties": false,
        "properties": props(VERIFICATION_KEYS, |k| match k {
            "checks" => json!({"type": "array",
                "description": "criteria (as in a contract) every task's contract gets, required",
                "items": {"$ref": "#/$defs/criterion"}}),
            _ => json!({"type": "string", "minLength": 1,
                "description": "the project's command, kept as a regression guard of every task where it passes before the work"}),
        })}),
        "store" => json!({"type": "string", "pattern": "^postgres(ql)?://[^:@/]*(@[^/]*)?(/.*)?$",
        "description": "a PostgreSQL store shared by every server and worker (postgres://USER@HOST/DB, no password: PGPASSWORD gives it)"}),
        "triggers" => triggers_schema(),
        "network" => json!({"type": "object", "additionalProperties": false,
        "properties": props(NETWORK_KEYS, |k| match k {
            "resolve" => json!({"type": "object",
                "description": "host names pinned to an address (ip:port) instead of resolved",
                "additionalProperties": {"type": "string"}}),
            "setup" => json!({"type": "array", "items": {"type": "string", "minLength": 1},
                "description": "hosts setup steps may reach through the egress proxy (host, host:port, *.domain, or a preset: pypi, npm, crates)"}),
            _ => json!({"type": "array", "items": {"type": "string", "minLength": 1},
                "description": "hosts run_command may reach through the egress proxy (host, host:port, *.domain, or a preset: pypi, npm, crates)"}),
        })}),
        "mcp_servers" => mcp_servers_schema(),
        "receipts" => json!({"type": "object", "additionalProperties": false,
            "description": "Receipts a pull request brings: `trust` lists the keys (PEM, or a project path to a PEM file) whose receipts `loop ci-check` accepts, read from the pull request's base commit",
            "properties": {"trust": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}}),
        "browser" => json!({"type": "boolean", "default": false,
            "description": "every task may drive a headless browser in its sandbox (the browser tool); a contract may grant it alone"}),
        "console" => signin::schema(),
        "skills" => json!({"type": "object", "additionalProperties": false,
            "description": "Skill bundles: `trust` lists the keys (PEM, or a project path to a PEM file) whose signed bundles a task may use",
            "properties": {"trust": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}}}),
        "project" => json!({"type": "object", "additionalProperties": false,
        "description": "the project's identity on a shared store and queue: `id` (committed, so every clone serves the same project; without it each checkout makes its own in .loop/project-id) and `serves`, other projects whose tasks this one's workers take",
        "properties": props(PROJECT_KEYS, |k| match k {
            "id" => json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{8,64}$"}),
            _ => json!({"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z0-9_-]{8,64}$"}}),
        })}),
        _ => json!({"type": "object", "additionalProperties": false,
        "properties": props(APPLY_KEYS, |_| json!({"type": "array", "items": {"type": "string"}}))}),
    }
}

/// The Loopfile's JSON Schema (draft 2020-12), built from the same key
/// tables the reader walks.
pub fn schema() -> serde_json::Value {
    use serde_json::json;
    let contract = loop_protocol::contract::schema::contract_schema();
    let strings =
        json!({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]});
    let rule = json!({
        "type": "object",
        "properties": props(RULE_KEYS, |k| match k {
            "decision" => json!({"enum": DECISIONS}),
            _ => strings.clone(),
        }),
        "required": ["prefix", "decision"],
        "additionalProperties": false
    });
    let section = |k: &str| section_schema(k, &rule, &contract);
    let models = loop_models::config::models_schema();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": LOOPFILE_SCHEMA_ID,
        "title": "Loop Engine Loopfile.yaml",
        "type": ["object", "null"],
        "properties": props(SECTIONS, section),
        "additionalProperties": false,
        "$defs": {
            "models": models["section"],
            "endpoint": models["endpoint"],
            "fallback": models["fallback"],
            "criterion": contract["$defs"]["criterion"],
            "check": contract["$defs"]["check"],
        }
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::Loopfile;

    /// The sections a Loopfile holds are named as read, in its order, each
    /// once (what `loop validate` says): `loop init`'s own file said "no
    /// sections" before.
    #[test]
    fn the_sections_read_are_named_in_the_files_order() {
        let l = Loopfile::parse(
            "version: 1\nverification:\n  test: \"python3 -m unittest\"\ndefaults:\n  limits:\n    max_steps: 30\nnetwork:\n  allow: []\n",
            "L",
        )
        .unwrap();
        assert_eq!(
            l.sections,
            ["version", "verification", "defaults", "network"]
        );
        assert!(Loopfile::parse("", "L").unwrap().sections.is_empty());
    }

    #[test]
    fn a_project_section_names_its_id_and_what_it_serves() {
        let l = Loopfile::parse(
            "project:\n  id: acme-api-2026\n  serves: [p-0123456789abcdef, legacy_api]\n",
            "L",
        )
        .unwrap();
        assert_eq!(l.project.id.as_deref(), Some("acme-api-2026"));
        assert_eq!(l.project.serves, ["p-0123456789abcdef", "legacy_api"]);
        let scope = crate::project::locate::ProjectScope {
            identity: crate::project::locate::ProjectIdentity {
                id: "acme-api-2026".into(),
                root_commit: None,
            },
            serves: l.project.serves.clone(),
        };
        let of = |id: &str| crate::project::locate::ProjectIdentity {
            id: id.into(),
            root_commit: None,
        };
        assert!(scope.takes(Some(&of("acme-api-2026"))));
        assert!(scope.takes(Some(&of("legacy_api"))));
        assert!(!scope.takes(Some(&of("p-ffffffffffffffff"))));
        // A task recorded before projects had identities is anyone's.
        assert!(scope.takes(None));
        for bad in ["short", "has space in it", "../../etc/passwd"] {
            let e = Loopfile::parse(&format!("project:\n  id: \"{bad}\"\n"), "L").unwrap_err();
            assert!(
                e.message.contains("is not a project id"),
                "{bad}: {}",
                e.message
            );
        }
        let e = Loopfile::parse("project:\n  name: x\n", "L").unwrap_err();
        assert!(e.message.contains("name"), "{}", e.message);
    }

    #[test]
    fn every_sections_error_is_reported_at_once_with_a_hint() {
        let text = "chekpoints:\n  timeout_secs: 5\nexec:\n  default: maybe\nrules:\n  python:\n    banned_imports: [os]\n";
        let e = Loopfile::parse(text, "Loopfile.yaml").unwrap_err().message;
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 2, "{e}");
        assert!(
            lines[0].starts_with("Loopfile.yaml:1:1: unknown Loopfile section `chekpoints` (did you mean `checkpoints`?)"),
            "{e}"
        );
        assert!(lines[1].starts_with("Loopfile.yaml:4:"), "{e}");
        // What is right is still read.
        let ok = Loopfile::parse("rules:\n  python:\n    banned_imports: [os]\n", "L").unwrap();
        assert_eq!(
            ok.rules.unwrap().python.banned_imports,
            vec!["os".to_string()]
        );
    }

    #[test]
    fn every_error_inside_a_section_is_reported_too() {
        let text = "checkpoints:\n  timeout_secs: 0\n  pause_clok: true\n  before_apply: maybe\nexec:\n  rules:\n    - prefix: [git]\n    - decision: allow\nprogress:\n  repeat_same: 1\n";
        let e = Loopfile::parse(text, "Loopfile.yaml").unwrap_err().message;
        for want in [
            "Loopfile.yaml:2:17: `timeout_secs` must be an integer of at least 1",
            "Loopfile.yaml:3:3: unknown key `pause_clok` in `checkpoints`",
            "did you mean `pause_clock`?",
            "Loopfile.yaml:4:17: `before_apply` must be true or false",
            "Loopfile.yaml:7:7: a rule needs a `decision`",
            "Loopfile.yaml:8:7: a rule needs a `prefix`",
            "Loopfile.yaml:10:16: `repeat_same` is a number of steps from 2 to 1000",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
    }

    #[test]
    fn the_schema_names_exactly_the_sections_and_keys_the_reader_accepts() {
        let s = super::schema();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |l: &[&str]| {
            let mut k: Vec<String> = l.iter().map(|s| s.to_string()).collect();
            k.sort();
            k
        };
        let p = &s["properties"];
        assert_eq!(keys(p), sorted(super::SECTIONS));
        assert_eq!(keys(&p["exec"]["properties"]), sorted(super::EXEC_KEYS));
        assert_eq!(
            keys(&p["exec"]["properties"]["rules"]["items"]["properties"]),
            sorted(super::RULE_KEYS)
        );
        assert_eq!(
            keys(&p["checkpoints"]["properties"]),
            sorted(super::CHECKPOINT_KEYS)
        );
        assert_eq!(
            keys(&p["progress"]["properties"]),
            sorted(super::PROGRESS_KEYS)
        );
        assert_eq!(keys(&p["apply"]["properties"]), sorted(super::APPLY_KEYS));
        assert_eq!(
            keys(&p["rules"]["properties"]),
            sorted(super::RULE_LANGUAGES)
        );
    }

    #[test]
    fn network_is_read_with_every_problem_named() {
        let ok = Loopfile::parse(
            "network:\n  allow: [pypi, \"*.pkgs.example\"]\n  setup: [npm]\n  resolve:\n    Mirror.example: \"10.0.0.5:8443\"\n",
            "Loopfile.yaml",
        )
        .unwrap();
        assert_eq!(ok.network.allow, vec!["pypi", "*.pkgs.example"]);
        assert_eq!(ok.network.setup, vec!["npm"]);
        assert_eq!(
            ok.network.resolve,
            vec![(
                "mirror.example".to_string(),
                "10.0.0.5:8443".parse().unwrap()
            )]
        );
        let e = Loopfile::parse(
            "network:\n  allow: [\"*\", \"a.example:99999\"]\n  resolve:\n    \"*.x\": \"10.0.0.5:1\"\n    y.example: nowhere\n  egress: []\n",
            "Loopfile.yaml",
        )
        .unwrap_err()
        .to_string();
        for want in [
            "Loopfile.yaml:2:11: `*` is not a host pattern",
            "Loopfile.yaml:2:16: `a.example:99999` is not a host pattern: its port",
            "Loopfile.yaml:4:5: `*.x`: a pinned name has no `*`",
            "Loopfile.yaml:5:16: `nowhere` is not an address",
            "Loopfile.yaml:6:3: unknown key `egress`",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
    }

    #[test]
    fn shares_are_read_with_every_problem_named() {
        let ok = Loopfile::parse(
            "workspace:\n  detect: false\n  share:\n    - .venv\n    - path: target\n      mode: overlay\n",
            "L",
        )
        .unwrap();
        assert!(ok.no_share_detection);
        let got: Vec<(String, &str)> = ok
            .shares
            .iter()
            .map(|s| (s.path.clone(), s.mode.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![(".venv".into(), "read_only"), ("target".into(), "overlay")]
        );
        let e = Loopfile::parse(
            "workspace:\n  share:\n    - ../outside\n    - .git/hooks\n    - path: t\n      mode: cow\n    - mode: overlay\n    - .venv\n    - .venv\n    - env[1]\n",
            "Loopfile.yaml",
        )
        .unwrap_err()
        .message;
        for want in [
            "Loopfile.yaml:3:7: a shared path",
            "Loopfile.yaml:4:7: `.git/hooks` is the runtime's or git's own, never shared",
            "Loopfile.yaml:6:13: unknown share mode `cow`",
            "Loopfile.yaml:7:7: a share needs a `path`",
            "Loopfile.yaml:9:7: `.venv` is shared twice",
            "Loopfile.yaml:10:7: `env[1]`: a shared path cannot hold glob characters",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
    }
}
