//! Delegation: a task hands part of its work to a child task whose
//! authority is provably within its own.
//!
//! The model proposes a child ([`Proposal`]): an instruction, criteria with
//! their checks (a contract's, read by the same reader), the paths it may
//! change, and a budget. The runtime grants it ([`grant`]) only if every
//! part narrows what the parent holds ([`Authority`]): writable paths
//! beneath the parent's, the parent's protection and check-integrity set
//! inherited, exec rules that can only move toward `forbidden`, hosts out
//! of the parent's allow-list, a budget out of what the parent has left
//! ([`Left`]), and depth and children within the parent's limits. Each
//! refusal names its rule ([`Refusal`]). The authority granted is recorded,
//! so anyone can check it again later, offline, against the parent's
//! ([`within`]).

use crate::contract::{Contract, ContractErrors, Limits};
use serde::{Deserialize, Serialize};
use std::fmt;

pub use crate::contract::{MAX_CHILDREN, MAX_DEPTH};

/// The most writable paths one child may be given.
pub const MAX_CHILD_PATHS: usize = 32;

/// The most exec rules a child may add.
pub const MAX_CHILD_EXEC_RULES: usize = 32;

/// A decision an exec rule added for a child may take: never `allow`,
/// so added rules can only tighten (the strictest matching rule wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stricter {
    /// Ask a person first.
    Prompt,
    /// Never run it.
    Forbidden,
}

/// An exec rule added on top of the Loopfile's for a child (and every
/// task below it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRule {
    /// The command prefix the rule matches (as a Loopfile rule's).
    pub prefix: String,
    /// What it decides.
    pub decision: Stricter,
}

/// The budget a child asks for (and, once granted, holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Model turns.
    pub max_steps: u32,
    /// Input + output tokens.
    pub max_tokens: u64,
    /// Dollars (required when the parent's spending is bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// Wall-clock seconds.
    pub timeout_secs: u64,
}

impl Budget {
    /// A task's whole budget, from its contract's limits.
    pub fn of(limits: &Limits) -> Budget {
        Budget {
            max_steps: limits.max_steps,
            max_tokens: limits.max_tokens,
            budget_usd: limits.budget_usd,
            timeout_secs: limits.timeout_secs,
        }
    }
}

/// A child, as the model proposes it (the `delegate` tool's arguments).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proposal {
    /// What the child is to do.
    pub instruction: String,
    /// Its criteria and checks, written as a contract file's `criteria:`.
    pub criteria: serde_json::Value,
    /// Directories or files it may change (`pkg/a`, `pkg/a/`, `pkg/a/**`,
    /// `docs/guide.md`; `.` for everything the parent may change).
    pub paths: Vec<String>,
    /// Hosts its checks may reach: entries of the parent's allow-list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_allow: Vec<String>,
    /// More globs it may not write, on top of the parent's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<String>,
    /// It may drive the browser (only if the parent may).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub browser: bool,
    /// More exec rules, each `prompt` or `forbidden`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exec: Vec<ExecRule>,
    /// Its budget, carved out of what the parent has left.
    pub budget: Budget,
    /// Children it may itself delegate to (default none).
    #[serde(default)]
    pub max_children: u32,
    /// Levels of children below it (default none).
    #[serde(default)]
    pub max_depth: u32,
}

/// What a task may do, as far as a child could be given part of it.
/// Recorded with every child granted, so that a child's can be checked
/// against its parent's later ([`within`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Authority {
    /// Where writes may land: directories or files relative to the
    /// workspace, `""` for all of it.
    pub writable: Vec<String>,
    /// Globs no write may touch (the defaults a contract keeps, and its own).
    pub protected: Vec<String>,
    /// Check-defining globs the task may change anyway.
    pub allow_check_changes: Vec<String>,
    /// Files deciding a check's verdict that the task may change anyway.
    pub judge_may_change: Vec<String>,
    /// Hosts its checks may reach.
    pub network_allow: Vec<String>,
    /// It may drive the browser.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub browser: bool,
    /// Exec rules added on top of the Loopfile's by delegation.
    pub exec: Vec<ExecRule>,
    /// Its whole budget.
    pub budget: Budget,
    /// Children it may delegate to.
    pub max_children: u32,
    /// Levels of children below it.
    pub max_depth: u32,
}

impl Authority {
    /// A task's authority as its contract grants it (a task no parent
    /// made: every path not protected is writable, no rule added).
    pub fn of_contract(contract: &Contract) -> Authority {
        Authority {
            writable: vec![String::new()],
            protected: contract.protected_globs(),
            allow_check_changes: contract.allow_check_changes.clone(),
            judge_may_change: contract.judge_may_change.clone(),
            network_allow: contract.network_allow.clone(),
            browser: contract.browser,
            exec: Vec::new(),
            budget: Budget::of(&contract.limits),
            max_children: contract.limits.max_children,
            max_depth: contract.limits.max_depth,
        }
    }

    /// Whether `rel` (a normalised workspace-relative path) lies beneath
    /// one of the writable paths.
    pub fn may_write(&self, rel: &str) -> bool {
        self.writable.iter().any(|w| beneath(rel, w))
    }
}

/// Where a child task's authority came from, as its own receipt says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegatedFrom {
    /// The parent's task id.
    pub parent: String,
    /// The authority the parent granted.
    pub authority: Authority,
}

/// Every per-step and per-command limit of `child` looser than its
/// parent's (a child is made with its parent's: each step of it is held
/// to the parent's diff limit, each command to its file and disk sizes).
pub fn limits_within(child: &Limits, parent: &Limits) -> Vec<Refusal> {
    [
        (
            "limits.max_diff_lines",
            u64::from(child.max_diff_lines),
            u64::from(parent.max_diff_lines),
        ),
        (
            "limits.max_file_bytes",
            child.max_file_bytes,
            parent.max_file_bytes,
        ),
        ("limits.disk_mb", child.disk_mb, parent.disk_mb),
        ("limits.write_mb", child.write_mb, parent.write_mb),
        (
            "limits.max_verifications",
            u64::from(child.max_verifications),
            u64::from(parent.max_verifications),
        ),
    ]
    .into_iter()
    .filter(|(_, c, p)| c > p)
    .map(|(what, c, p)| Refusal::Inherited {
        what,
        entry: format!("{c}, over its parent's {p}"),
    })
    .collect()
}

/// Every way `contract` claims more than `granted` allows (empty: it
/// claims no more): its budget, its own delegation, hosts, and the
/// protection it must keep.
pub fn contract_within(contract: &Contract, granted: &Authority) -> Vec<Refusal> {
    let mut no = Vec::new();
    let (l, b) = (&contract.limits, &granted.budget);
    for (what, asked, most) in [
        ("max_steps", u64::from(l.max_steps), u64::from(b.max_steps)),
        ("max_tokens", l.max_tokens, b.max_tokens),
        ("timeout_secs", l.timeout_secs, b.timeout_secs),
        (
            "max_children",
            u64::from(l.max_children),
            u64::from(granted.max_children),
        ),
        (
            "max_depth",
            u64::from(l.max_depth),
            u64::from(granted.max_depth),
        ),
    ] {
        if asked > most {
            no.push(Refusal::Budget {
                what,
                asked: asked.to_string(),
                left: most.to_string(),
            });
        }
    }
    match (l.budget_usd, b.budget_usd) {
        (Some(x), Some(m)) if !(x.is_finite() && x <= m) => no.push(Refusal::Budget {
            what: "budget_usd",
            asked: format!("${x:.4}"),
            left: format!("${m:.4}"),
        }),
        (None, Some(m)) => no.push(Refusal::Budget {
            what: "budget_usd",
            asked: "unbounded".into(),
            left: format!("${m:.4}"),
        }),
        _ => {}
    }
    for h in &contract.network_allow {
        if !holds(&granted.network_allow, h) {
            no.push(Refusal::Host {
                host: h.clone(),
                parent: granted.network_allow.clone(),
            });
        }
    }
    if contract.browser && !granted.browser {
        no.push(Refusal::Browser);
    }
    let globs = contract.protected_globs();
    for g in &granted.protected {
        if !holds(&globs, g) {
            no.push(Refusal::Inherited {
                what: "protected",
                entry: g.clone(),
            });
        }
    }
    for (what, c, p) in [
        (
            "allow_check_changes",
            &contract.allow_check_changes,
            &granted.allow_check_changes,
        ),
        (
            "judge_may_change",
            &contract.judge_may_change,
            &granted.judge_may_change,
        ),
    ] {
        for e in c {
            if !holds(p, e) {
                no.push(Refusal::Inherited {
                    what,
                    entry: e.clone(),
                });
            }
        }
    }
    no
}

/// What the parent has left when it proposes a child: its budget less
/// what it spent and what its running children hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Left {
    /// Model turns.
    pub steps: u32,
    /// Tokens.
    pub tokens: u64,
    /// Dollars (`None`: not bounded).
    pub usd: Option<f64>,
    /// Wall-clock seconds.
    pub secs: u64,
    /// Children it may still start.
    pub children: u32,
}

impl Left {
    /// What is left once a child has used `steps`, `tokens` and `usd`.
    pub fn less(&self, steps: u32, tokens: u64, usd: f64) -> Left {
        Left {
            steps: self.steps.saturating_sub(steps),
            tokens: self.tokens.saturating_sub(tokens),
            usd: self.usd.map(|u| (u - usd).max(0.0)),
            secs: self.secs,
            children: self.children.saturating_sub(1),
        }
    }

    /// What is left once `budget` is granted to a child (held for it
    /// while it runs beside others).
    pub fn less_granted(&self, budget: &Budget) -> Left {
        Left {
            steps: self.steps.saturating_sub(budget.max_steps),
            tokens: self.tokens.saturating_sub(budget.max_tokens),
            usd: self
                .usd
                .map(|u| (u - budget.budget_usd.unwrap_or(0.0)).max(0.0)),
            secs: self.secs,
            children: self.children.saturating_sub(1),
        }
    }
}

/// Why a proposal is refused, or why a recorded child's authority is not
/// within its parent's. Each names its rule ([`Refusal::rule`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The parent may not delegate at all.
    Off,
    /// No child left to start.
    Children {
        /// The parent's `max_children`.
        max: u32,
    },
    /// A child here would be deeper than allowed.
    Depth,
    /// A child asking to delegate more, or deeper, than its parent may.
    ChildLimits {
        /// `max_children` or `max_depth`.
        what: &'static str,
        /// What the child asked.
        asked: u32,
        /// The most it may have.
        most: u32,
    },
    /// A path that is not a plain directory or file of the workspace.
    NotAPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// A path outside what the parent may write.
    Outside {
        /// The path.
        path: String,
        /// The parent's writable paths.
        parent: Vec<String>,
    },
    /// No path given, or too many.
    Paths {
        /// How many were given.
        count: usize,
    },
    /// A host the parent may not reach.
    Host {
        /// The host pattern.
        host: String,
        /// The parent's allow-list.
        parent: Vec<String>,
    },
    /// The browser, which the parent may not drive.
    Browser,
    /// A protection or check-integrity rule of the parent's the child
    /// lacks, or an exemption the parent does not have.
    Inherited {
        /// `protected`, `exec`, `allow_check_changes`, `judge_may_change`.
        what: &'static str,
        /// The entry.
        entry: String,
    },
    /// More than the parent has left.
    Budget {
        /// `max_steps`, `max_tokens`, `budget_usd`, `timeout_secs`.
        what: &'static str,
        /// What the child asked.
        asked: String,
        /// What the parent has left.
        left: String,
    },
    /// An exec rule that is not a command prefix.
    ExecRule {
        /// The prefix as given.
        prefix: String,
    },
    /// An exec rule that would loosen the parent's (`allow`).
    LooserExec {
        /// The prefix as given.
        prefix: String,
    },
    /// The child's own contract is malformed.
    Contract(String),
}

impl Refusal {
    /// The rule's name, as recorded with a refused call.
    pub fn rule(&self) -> &'static str {
        match self {
            Refusal::Off => "delegation: off",
            Refusal::Children { .. } => "delegation: limits.max_children",
            Refusal::Depth => "delegation: limits.max_depth",
            Refusal::ChildLimits { .. } => "delegation: the child's own limits",
            Refusal::NotAPath { .. } | Refusal::Paths { .. } => "delegation: paths",
            Refusal::Outside { .. } => "delegation: paths beneath the parent's",
            Refusal::Host { .. } => "delegation: network_allow within the parent's",
            Refusal::Browser => "delegation: browser",
            Refusal::Inherited { .. } => "delegation: the parent's rules are inherited",
            Refusal::Budget { .. } => "delegation: budget out of what the parent has left",
            Refusal::ExecRule { .. } | Refusal::LooserExec { .. } => "delegation: exec",
            Refusal::Contract(_) => "delegation: the child's contract",
        }
    }
}

fn shown(list: &[String]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    list.iter()
        .map(|p| {
            if p.is_empty() {
                "`.` (the whole workspace)".to_string()
            } else {
                format!("`{p}`")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Off => write!(
                f,
                "this task may not delegate: its contract's limits.max_children is 0 (a person may allow it in the contract or the Loopfile's defaults.limits)"
            ),
            Refusal::Children { max } => write!(
                f,
                "this task has started all the children it may ({max}, limits.max_children)"
            ),
            Refusal::Depth => write!(
                f,
                "a child here would be deeper than allowed (limits.max_depth is 0 for this task)"
            ),
            Refusal::ChildLimits { what, asked, most } => write!(
                f,
                "the child asks for {what} {asked}; at most {most} is within this task's"
            ),
            Refusal::NotAPath { path, why } => write!(f, "path {path:?}: {why}"),
            Refusal::Outside { path, parent } => write!(
                f,
                "path `{path}` is not beneath a path this task may change ({})",
                shown(parent)
            ),
            Refusal::Paths { count } => write!(
                f,
                "a child names between 1 and {MAX_CHILD_PATHS} paths it may change, not {count}"
            ),
            Refusal::Host { host, parent } => write!(
                f,
                "host `{host}` is not in this task's network allow-list ({})",
                shown(parent)
            ),
            Refusal::Browser => write!(
                f,
                "a child may drive the browser only when this task may (its contract or the Loopfile grants `browser`)"
            ),
            Refusal::Inherited { what, entry } => write!(
                f,
                "{what} `{entry}`: a child keeps every rule of its parent's and gains no exemption"
            ),
            Refusal::Budget { what, asked, left } => {
                write!(f, "{what} {asked} is more than this task has left ({left})")
            }
            Refusal::ExecRule { prefix } => write!(
                f,
                "exec rule {prefix:?}: a prefix is one or more words of a command, on one line"
            ),
            Refusal::LooserExec { prefix } => write!(
                f,
                "exec rule {prefix:?} with `allow`: a child's rule can only be stricter than its parent's (`prompt` or `forbidden`)"
            ),
            Refusal::Contract(why) => write!(f, "the child's contract: {why}"),
        }
    }
}

/// Whether `rel` is `dir` or lies beneath it (`""` holds everything).
fn beneath(rel: &str, dir: &str) -> bool {
    dir.is_empty()
        || rel == dir
        || (rel.len() > dir.len() && rel.starts_with(dir) && rel.as_bytes()[dir.len()] == b'/')
}

/// A proposed path as a workspace-relative directory or file: `pkg/a`,
/// `pkg/a/`, `pkg/a/**` all name `pkg/a`; `.` (or `**`) the whole
/// workspace, `""`. Patterns are refused: whether one lies within
/// another cannot be decided.
pub fn normalise_path(given: &str) -> Result<String, Refusal> {
    let bare = given.strip_suffix("/**").unwrap_or(given);
    let bare = if bare == "**" { "." } else { bare };
    if bare.contains(['*', '?', '[', ']', '{', '}']) {
        return Err(Refusal::NotAPath {
            path: given.to_string(),
            why: "a directory or a file, not a pattern".into(),
        });
    }
    crate::path::RelPath::parse(bare)
        .map(|p| p.as_str().to_string())
        .map_err(|e| Refusal::NotAPath {
            path: given.to_string(),
            why: e.to_string(),
        })
}

/// Whether host pattern `child` reaches nothing `parent` does not: the
/// same entry, or a host (or `*.` pattern) inside a parent's `*.domain`
/// with the same port.
fn host_within(child: &str, parent: &str) -> bool {
    if child == parent {
        return true;
    }
    let split = |e: &str| -> (String, Option<String>) {
        match e.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_string(), Some(p.to_string())),
            _ => (e.to_string(), None),
        }
    };
    let (ch, cp) = split(child);
    let (ph, pp) = split(parent);
    let Some(domain) = ph.strip_prefix("*.") else {
        return false;
    };
    let host = ch.strip_prefix("*.").unwrap_or(&ch);
    cp == pp && host.len() > domain.len() && host.ends_with(&format!(".{domain}"))
}

/// Whether `entry` is one of `list` (exact, as the parent's contract wrote it).
fn holds(list: &[String], entry: &str) -> bool {
    list.iter().any(|e| e == entry)
}

/// Grant `p` out of `parent`'s authority and what it has `left`, or say
/// every rule it breaks. The child's authority, on success.
pub fn grant(parent: &Authority, left: &Left, p: &Proposal) -> Result<Authority, Vec<Refusal>> {
    if parent.max_children == 0 {
        return Err(vec![Refusal::Off]);
    }
    if parent.max_depth == 0 {
        return Err(vec![Refusal::Depth]);
    }
    if left.children == 0 {
        return Err(vec![Refusal::Children {
            max: parent.max_children,
        }]);
    }
    let mut no = Vec::new();
    let writable = granted_paths(parent, &p.paths, &mut no);
    if p.browser && !parent.browser {
        no.push(Refusal::Browser);
    }
    for host in &p.network_allow {
        if !parent.network_allow.iter().any(|h| host_within(host, h)) {
            no.push(Refusal::Host {
                host: host.clone(),
                parent: parent.network_allow.clone(),
            });
        }
    }
    let (protected, exec) = added_rules(parent, p, &mut no);
    budget_from_left(&p.budget, left, &mut no);
    child_limits(parent, p.max_children, p.max_depth, &mut no);
    if !no.is_empty() {
        return Err(no);
    }
    Ok(Authority {
        writable,
        protected,
        allow_check_changes: parent.allow_check_changes.clone(),
        judge_may_change: parent.judge_may_change.clone(),
        network_allow: p.network_allow.clone(),
        browser: p.browser,
        exec,
        budget: p.budget.clone(),
        max_children: p.max_children,
        max_depth: p.max_depth,
    })
}

/// The paths a proposal names, in normal form, each beneath one of the
/// parent's (what is not is refused into `no`).
fn granted_paths(parent: &Authority, paths: &[String], no: &mut Vec<Refusal>) -> Vec<String> {
    if paths.is_empty() || paths.len() > MAX_CHILD_PATHS {
        no.push(Refusal::Paths { count: paths.len() });
    }
    let mut writable: Vec<String> = Vec::new();
    for given in paths {
        match normalise_path(given) {
            // `.`: everything the parent may change.
            Ok(rel) if rel.is_empty() => {
                for w in &parent.writable {
                    if !writable.contains(w) {
                        writable.push(w.clone());
                    }
                }
            }
            Ok(rel) if !parent.may_write(&rel) => no.push(Refusal::Outside {
                path: if rel.is_empty() { ".".into() } else { rel },
                parent: parent.writable.clone(),
            }),
            Ok(rel) => {
                if !writable.contains(&rel) {
                    writable.push(rel);
                }
            }
            Err(r) => no.push(r),
        }
    }
    writable.sort();
    writable
}

/// The parent's protected globs and exec rules with what the proposal
/// adds (a malformed addition refused into `no`).
fn added_rules(
    parent: &Authority,
    p: &Proposal,
    no: &mut Vec<Refusal>,
) -> (Vec<String>, Vec<ExecRule>) {
    let mut protected = parent.protected.clone();
    for g in &p.protected {
        if g.is_empty() || g.contains(['\0', '\n']) {
            no.push(Refusal::NotAPath {
                path: g.clone(),
                why: "a protected glob is one line, not empty".into(),
            });
        } else if !holds(&protected, g) {
            protected.push(g.clone());
        }
    }
    if p.exec.len() > MAX_CHILD_EXEC_RULES {
        no.push(Refusal::ExecRule {
            prefix: format!("{} rules, more than {MAX_CHILD_EXEC_RULES}", p.exec.len()),
        });
    }
    let mut exec = parent.exec.clone();
    for r in &p.exec {
        if r.prefix.trim().is_empty() || r.prefix.contains(['\0', '\n', '\r']) {
            no.push(Refusal::ExecRule {
                prefix: r.prefix.clone(),
            });
        } else if !exec.contains(r) {
            exec.push(r.clone());
        }
    }
    (protected, exec)
}

/// Refuse into `no` each part of budget `b` that is 0 or more than `left`.
fn budget_from_left(b: &Budget, left: &Left, no: &mut Vec<Refusal>) {
    let mut over = |what: &'static str, asked: String, left: String| {
        no.push(Refusal::Budget { what, asked, left });
    };
    for (what, asked, most) in [
        ("max_steps", u64::from(b.max_steps), u64::from(left.steps)),
        ("max_tokens", b.max_tokens, left.tokens),
        ("timeout_secs", b.timeout_secs, left.secs),
    ] {
        if asked == 0 || asked > most {
            over(what, asked.to_string(), most.to_string());
        }
    }
    match (b.budget_usd, left.usd) {
        (Some(x), _) if !x.is_finite() || x < 0.0 => over(
            "budget_usd",
            format!("{x}"),
            "a number of at least 0".into(),
        ),
        (Some(x), Some(l)) if x > l => over("budget_usd", format!("${x:.4}"), format!("${l:.4}")),
        (None, Some(l)) => over("budget_usd", "unbounded".into(), format!("${l:.4}")),
        _ => {}
    }
}

/// Refuse into `no` a child's own delegation limits beyond its parent's:
/// a depth at least the parent's, or children without a level for them,
/// or more than the parent may have.
fn child_limits(parent: &Authority, children: u32, depth: u32, no: &mut Vec<Refusal>) {
    let most_depth = parent.max_depth.saturating_sub(1);
    if depth > most_depth {
        no.push(Refusal::ChildLimits {
            what: "max_depth",
            asked: depth,
            most: most_depth,
        });
    }
    let most_children = if depth == 0 { 0 } else { parent.max_children };
    if children > most_children {
        no.push(Refusal::ChildLimits {
            what: "max_children",
            asked: children,
            most: most_children,
        });
    }
}

/// Refuse into `no` each part of budget `c` beyond budget `p`.
fn budget_within(c: &Budget, p: &Budget, no: &mut Vec<Refusal>) {
    for (what, asked, most) in [
        ("max_steps", u64::from(c.max_steps), u64::from(p.max_steps)),
        ("max_tokens", c.max_tokens, p.max_tokens),
        ("timeout_secs", c.timeout_secs, p.timeout_secs),
    ] {
        if asked > most {
            no.push(Refusal::Budget {
                what,
                asked: asked.to_string(),
                left: most.to_string(),
            });
        }
    }
    match (c.budget_usd, p.budget_usd) {
        // NaN, or more than the parent's.
        (Some(x), Some(l)) if !(x.is_finite() && x <= l) => no.push(Refusal::Budget {
            what: "budget_usd",
            asked: format!("${x:.4}"),
            left: format!("${l:.4}"),
        }),
        (None, Some(l)) => no.push(Refusal::Budget {
            what: "budget_usd",
            asked: "unbounded".into(),
            left: format!("${l:.4}"),
        }),
        _ => {}
    }
}

/// Every way a recorded child's authority is not within its parent's
/// (empty: it is). What [`grant`] ensures, checked again from the record
/// alone (by `loop verify`, on a receipt tree).
pub fn within(child: &Authority, parent: &Authority) -> Vec<Refusal> {
    let mut no = Vec::new();
    if parent.max_children == 0 {
        no.push(Refusal::Off);
    } else if parent.max_depth == 0 {
        no.push(Refusal::Depth);
    }
    if child.writable.is_empty() || child.writable.len() > MAX_CHILD_PATHS {
        no.push(Refusal::Paths {
            count: child.writable.len(),
        });
    }
    for w in &child.writable {
        let normal = normalise_path(if w.is_empty() { "." } else { w }).is_ok_and(|r| &r == w);
        if !normal {
            no.push(Refusal::NotAPath {
                path: w.clone(),
                why: "not a workspace path in normal form".into(),
            });
        } else if !parent.may_write(w) {
            no.push(Refusal::Outside {
                path: w.clone(),
                parent: parent.writable.clone(),
            });
        }
    }
    for h in &child.network_allow {
        if !parent.network_allow.iter().any(|p| host_within(h, p)) {
            no.push(Refusal::Host {
                host: h.clone(),
                parent: parent.network_allow.clone(),
            });
        }
    }
    if child.browser && !parent.browser {
        no.push(Refusal::Browser);
    }
    for g in &parent.protected {
        if !holds(&child.protected, g) {
            no.push(Refusal::Inherited {
                what: "protected",
                entry: g.clone(),
            });
        }
    }
    for r in &parent.exec {
        if !child.exec.contains(r) {
            no.push(Refusal::Inherited {
                what: "exec",
                entry: r.prefix.clone(),
            });
        }
    }
    for (what, c, p) in [
        (
            "allow_check_changes",
            &child.allow_check_changes,
            &parent.allow_check_changes,
        ),
        (
            "judge_may_change",
            &child.judge_may_change,
            &parent.judge_may_change,
        ),
    ] {
        for e in c {
            if !holds(p, e) {
                no.push(Refusal::Inherited {
                    what,
                    entry: e.clone(),
                });
            }
        }
    }
    budget_within(&child.budget, &parent.budget, &mut no);
    if parent.max_depth > 0 {
        child_limits(parent, child.max_children, child.max_depth, &mut no);
    }
    no
}

/// The child's contract: its instruction and criteria (read as a contract
/// file's, every diagnostic kept), its parent's protection and exemptions
/// with what the child adds, its hosts, and its budget as its limits (the
/// rest of the parent's limits kept: the runtime then lowers `write_mb` to
/// what the parent may still write).
pub fn child_contract(
    parent: &Contract,
    granted: &Authority,
    p: &Proposal,
) -> Result<Contract, ContractErrors> {
    let mut limits = parent.limits.clone();
    limits.max_steps = granted.budget.max_steps;
    limits.max_tokens = granted.budget.max_tokens;
    limits.budget_usd = granted.budget.budget_usd;
    limits.timeout_secs = granted.budget.timeout_secs;
    limits.max_children = granted.max_children;
    limits.max_depth = granted.max_depth;
    let shell = Contract {
        version: crate::contract::CONTRACT_VERSION,
        instruction: p.instruction.clone(),
        criteria: Vec::new(),
        artifacts: Vec::new(),
        protected: parent
            .protected
            .iter()
            .chain(p.protected.iter().filter(|g| !holds(&parent.protected, g)))
            .cloned()
            .collect(),
        unprotect: parent.unprotect.clone(),
        allow_check_changes: granted.allow_check_changes.clone(),
        judge_may_change: granted.judge_may_change.clone(),
        network_allow: granted.network_allow.clone(),
        browser: granted.browser,
        limits,
    };
    let mut doc = shell.to_authoring();
    doc["criteria"] = p.criteria.clone();
    // JSON is YAML's flow form: the child's contract is read exactly as a
    // contract file is, with every check of the reader.
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    let origin = "the delegated child's contract";
    let contract = Contract::from_yaml(&text, origin)?;
    // A person's word the model cannot give for them.
    let mut given = Vec::new();
    for c in &contract.criteria {
        if c.guard {
            given.push(format!("criterion `{}` is marked `guard`", c.id));
        }
        for check in &c.checks {
            if let crate::contract::Check::Run(r) = check {
                if r.allow_vacuous {
                    given.push(format!("`{}` is marked `allow_vacuous`", r.command));
                }
                if r.nonempty_tests == Some(false) {
                    given.push(format!("`{}` is marked `nonempty_tests: false`", r.command));
                }
            }
        }
    }
    if given.is_empty() {
        return Ok(contract);
    }
    Err(ContractErrors(
        given
            .into_iter()
            .map(|message| crate::contract::Diagnostic {
                origin: origin.into(),
                pos: None,
                message,
                hint: Some(
                    "only a person may exempt a check (a model proposing a child cannot)".into(),
                ),
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests;
