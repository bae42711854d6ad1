//! The project's `Loopfile.yaml`: the sections this build reads. Unknown
//! top-level keys are refused with their position, so a typo never
//! silently drops a setting.

use crate::Error;
use loop_models::config::ModelsSection;
use loop_protocol::yaml::{self, Node, Value};
use loop_tools::exec_policy::{Decision, ExecPolicy, Rule};
use std::path::{Path, PathBuf};

/// The sections this build reads.
const SECTIONS: &[&str] = &[
    "version",
    "models",
    "exec",
    "rules",
    "progress",
    "checkpoints",
    "apply",
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
}

impl Loopfile {
    /// Read `dir/Loopfile.yaml` if it exists.
    pub fn load(dir: &Path) -> Result<Loopfile, Error> {
        let path = dir.join("Loopfile.yaml");
        if !path.exists() {
            return Ok(Loopfile::default());
        }
        let origin = path.display().to_string();
        let text =
            std::fs::read_to_string(&path).map_err(|e| Error::usage(format!("{origin}: {e}")))?;
        Self::parse(&text, &origin).map(|mut l| {
            l.path = Some(path);
            l
        })
    }

    /// Parse Loopfile text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Loopfile, Error> {
        let root = yaml::parse(text)
            .map_err(|e| Error::usage(format!("{origin}:{}: {}", e.pos, e.message)))?;
        let mut out = Loopfile::default();
        let entries = match &root.value {
            Value::Map(m) => m.as_slice(),
            Value::Null => &[],
            other => {
                return Err(Error::usage(format!(
                    "{origin}:{}: a Loopfile is a mapping, not {}",
                    root.pos,
                    other.type_name()
                )));
            }
        };
        // Every section is read, and every section's error reported, at once.
        let mut errors: Vec<String> = Vec::new();
        for (k, v) in entries {
            let read: Result<(), Error> = match k.name.as_str() {
                "version" => Ok(()),
                "models" => ModelsSection::parse(v, origin)
                    .map(|m| out.models = Some(m))
                    .map_err(|e| Error::usage(e.to_string())),
                "exec" => parse_exec(v, origin).map(|x| out.exec = Some(x)),
                "rules" => parse_rules(v, origin).map(|x| out.rules = Some(x)),
                "progress" => parse_progress(v, origin).map(|x| out.progress = Some(x)),
                "checkpoints" => parse_checkpoints(v, origin).map(|x| out.checkpoints = Some(x)),
                "apply" => parse_apply(v, origin).map(|x| out.host_executable = x),
                other => Err(Error::usage(format!(
                    "{origin}:{}: unknown Loopfile section `{other}`{} (this build reads: {})",
                    k.pos,
                    yaml::closest(other, SECTIONS)
                        .map(|c| format!(" (did you mean `{c}`?)"))
                        .unwrap_or_default(),
                    SECTIONS.join(", ")
                ))),
            };
            if let Err(e) = read {
                errors.push(e.message);
            }
        }
        if !errors.is_empty() {
            return Err(Error::usage(errors.join("\n")));
        }
        Ok(out)
    }
}

/// `exec:`: default decision, approval timeout, and prefix rules whose
/// examples are checked here, at load.
fn parse_exec(node: &Node, origin: &str) -> Result<ExecPolicy, Error> {
    let err =
        |pos: loop_protocol::yaml::Pos, msg: String| Error::usage(format!("{origin}:{pos}: {msg}"));
    let decision = |n: &Node| -> Result<Decision, Error> {
        match &n.value {
            Value::Str(s) if s == "allow" => Ok(Decision::Allow),
            Value::Str(s) if s == "prompt" => Ok(Decision::Prompt),
            Value::Str(s) if s == "forbidden" => Ok(Decision::Forbidden),
            _ => Err(err(
                n.pos,
                "a decision is `allow`, `prompt` or `forbidden`".into(),
            )),
        }
    };
    let strings = |n: &Node, what: &str| -> Result<Vec<String>, Error> {
        match &n.value {
            Value::Str(s) => Ok(vec![s.clone()]),
            Value::Seq(items) => items
                .iter()
                .map(|i| match &i.value {
                    Value::Str(s) => Ok(s.clone()),
                    other => Err(err(
                        i.pos,
                        format!("`{what}` holds strings, not {}", other.type_name()),
                    )),
                })
                .collect(),
            other => Err(err(
                n.pos,
                format!("`{what}` is a list of strings, not {}", other.type_name()),
            )),
        }
    };
    let Value::Map(entries) = &node.value else {
        return Err(err(
            node.pos,
            "`exec` is a mapping (default, approval_timeout_secs, rules)".into(),
        ));
    };
    let mut policy = ExecPolicy::default();
    let mut rule_pos = Vec::new();
    for (k, v) in entries {
        match k.name.as_str() {
            "default" => policy.default = decision(v)?,
            "approval_timeout_secs" => match v.value {
                Value::Int(n) if n > 0 => policy.approval_timeout_secs = n as u64,
                _ => {
                    return Err(err(
                        v.pos,
                        "`approval_timeout_secs` is a positive integer".into(),
                    ));
                }
            },
            "rules" => {
                let Value::Seq(items) = &v.value else {
                    return Err(err(v.pos, "`rules` is a list".into()));
                };
                for item in items {
                    let Value::Map(fields) = &item.value else {
                        return Err(err(
                            item.pos,
                            "a rule is a mapping (prefix, decision, examples, not_examples)".into(),
                        ));
                    };
                    let mut rule = Rule {
                        prefix: Vec::new(),
                        decision: Decision::Prompt,
                        examples: Vec::new(),
                        not_examples: Vec::new(),
                    };
                    let mut has_decision = false;
                    for (fk, fv) in fields {
                        match fk.name.as_str() {
                            "prefix" => {
                                rule.prefix = strings(fv, "prefix")?
                                    .iter()
                                    .flat_map(|s| {
                                        s.split_whitespace().map(str::to_string).collect::<Vec<_>>()
                                    })
                                    .collect()
                            }
                            "decision" => {
                                rule.decision = decision(fv)?;
                                has_decision = true;
                            }
                            "examples" => rule.examples = strings(fv, "examples")?,
                            "not_examples" => rule.not_examples = strings(fv, "not_examples")?,
                            other => {
                                return Err(err(
                                    fk.pos,
                                    format!(
                                        "unknown key `{other}` in a rule (prefix, decision, examples, not_examples)"
                                    ),
                                ));
                            }
                        }
                    }
                    if rule.prefix.is_empty() {
                        return Err(err(item.pos, "a rule needs a `prefix`".into()));
                    }
                    if !has_decision {
                        return Err(err(item.pos, "a rule needs a `decision`".into()));
                    }
                    rule_pos.push(item.pos);
                    policy.rules.push(rule);
                }
            }
            other => {
                return Err(err(
                    k.pos,
                    format!(
                        "unknown key `{other}` in `exec` (default, approval_timeout_secs, rules)"
                    ),
                ));
            }
        }
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
        return Err(err(pos, problems.join("; ")));
    }
    Ok(policy)
}

/// `rules:`: banned imports, calls and attributes for Python and JavaScript.
fn parse_rules(node: &Node, origin: &str) -> Result<loop_gates::CodePolicy, Error> {
    let err =
        |pos: loop_protocol::yaml::Pos, msg: String| Error::usage(format!("{origin}:{pos}: {msg}"));
    let Value::Map(langs) = &node.value else {
        return Err(err(
            node.pos,
            "`rules` maps a language (python, javascript) to its banned names".into(),
        ));
    };
    let mut policy = loop_gates::CodePolicy::default();
    for (lang, body) in langs {
        let target = match lang.name.as_str() {
            "python" => &mut policy.python,
            "javascript" => &mut policy.javascript,
            other => {
                return Err(err(
                    lang.pos,
                    format!("no code rules for `{other}` (python, javascript)"),
                ));
            }
        };
        let Value::Map(fields) = &body.value else {
            return Err(err(
                body.pos,
                "banned_imports, banned_calls, banned_attributes".into(),
            ));
        };
        for (k, v) in fields {
            let Value::Seq(items) = &v.value else {
                return Err(err(v.pos, format!("`{}` is a list of names", k.name)));
            };
            let mut names = Vec::new();
            for i in items {
                match &i.value {
                    Value::Str(s) if !s.trim().is_empty() => names.push(s.trim().to_string()),
                    _ => return Err(err(i.pos, "a name is a non-empty string".into())),
                }
            }
            match k.name.as_str() {
                "banned_imports" => target.banned_imports = names,
                "banned_calls" => target.banned_calls = names,
                "banned_attributes" => target.banned_attributes = names,
                other => {
                    return Err(err(
                        k.pos,
                        format!(
                            "unknown key `{other}` (banned_imports, banned_calls, banned_attributes)"
                        ),
                    ));
                }
            }
        }
    }
    Ok(policy)
}

/// `progress:`: the stall thresholds (each a positive count of steps).
fn parse_progress(node: &Node, origin: &str) -> Result<loop_core::ProgressConfig, Error> {
    let err =
        |pos: loop_protocol::yaml::Pos, msg: String| Error::usage(format!("{origin}:{pos}: {msg}"));
    let Value::Map(fields) = &node.value else {
        return Err(err(
            node.pos,
            "`progress` is a mapping of thresholds".into(),
        ));
    };
    let mut c = loop_core::ProgressConfig::default();
    for (k, v) in fields {
        let n = match v.value {
            Value::Int(n) if (2..=1000).contains(&n) => n as usize,
            _ => {
                return Err(err(
                    v.pos,
                    format!("`{}` is a number of steps from 2 to 1000", k.name),
                ));
            }
        };
        match k.name.as_str() {
            "repeat_same" => c.repeat_same = n,
            "repeat_failing" => c.repeat_failing = n,
            "alternation" => c.alternation = n,
            "read_only" => c.read_only = n,
            "no_evidence" => c.no_evidence = n,
            other => {
                return Err(err(
                    k.pos,
                    format!(
                        "unknown threshold `{other}` (repeat_same, repeat_failing, alternation, read_only, no_evidence)"
                    ),
                ));
            }
        }
    }
    Ok(c)
}

/// `checkpoints:`: when to pause for a person, and transient retries.
fn parse_apply(node: &Node, origin: &str) -> Result<Vec<String>, Error> {
    let err =
        |pos: loop_protocol::yaml::Pos, msg: String| Error::usage(format!("{origin}:{pos}: {msg}"));
    let Value::Map(fields) = &node.value else {
        return Err(err(node.pos, "`apply` is a mapping".into()));
    };
    let mut globs = Vec::new();
    for (k, v) in fields {
        match k.name.as_str() {
            "host_executable" => {
                let Value::Seq(items) = &v.value else {
                    return Err(err(v.pos, "`host_executable` is a list of globs".into()));
                };
                for item in items {
                    let Value::Str(g) = &item.value else {
                        return Err(err(item.pos, "a glob is a string".into()));
                    };
                    loop_workspace::Protected::new(std::slice::from_ref(g))
                        .map_err(|e| err(item.pos, format!("`{g}` is not a glob: {e}")))?;
                    globs.push(g.clone());
                }
            }
            other => {
                return Err(err(
                    k.pos,
                    format!("unknown key `{other}` in `apply` (this build reads: host_executable)"),
                ));
            }
        }
    }
    Ok(globs)
}

fn parse_checkpoints(node: &Node, origin: &str) -> Result<loop_core::Checkpoints, Error> {
    let err =
        |pos: loop_protocol::yaml::Pos, msg: String| Error::usage(format!("{origin}:{pos}: {msg}"));
    let Value::Map(fields) = &node.value else {
        return Err(err(node.pos, "`checkpoints` is a mapping".into()));
    };
    let mut c = loop_core::Checkpoints::default();
    let count = |v: &Node, k: &str, min: i64| -> Result<u64, Error> {
        match v.value {
            Value::Int(n) if n >= min => Ok(n as u64),
            _ => Err(err(v.pos, format!("`{k}` is an integer of at least {min}"))),
        }
    };
    for (k, v) in fields {
        match k.name.as_str() {
            "after_failed_repairs" => c.after_failed_repairs = Some(count(v, &k.name, 1)? as u32),
            "timeout_secs" => c.timeout_secs = count(v, &k.name, 1)?,
            "retry_transient" => c.retry_transient = count(v, &k.name, 0)?.min(10) as u32,
            "retry_base_ms" => c.retry_base_ms = count(v, &k.name, 1)?,
            "before_apply" => match v.value {
                Value::Bool(b) => c.before_apply = b,
                _ => return Err(err(v.pos, "`before_apply` is true or false".into())),
            },
            "pause_clock" => match v.value {
                Value::Bool(b) => c.pause_clock = b,
                _ => return Err(err(v.pos, "`pause_clock` is true or false".into())),
            },
            "cost_usd_over" => {
                c.cost_usd_over = Some(match v.value {
                    Value::Int(n) if n >= 0 => n as f64,
                    Value::Float(x) if x.is_finite() && x >= 0.0 => x,
                    _ => {
                        return Err(err(
                            v.pos,
                            "`cost_usd_over` is a non-negative number".into(),
                        ));
                    }
                })
            }
            other => {
                return Err(err(
                    k.pos,
                    format!(
                        "unknown key `{other}` (after_failed_repairs, cost_usd_over, timeout_secs, retry_transient, retry_base_ms, before_apply, pause_clock)"
                    ),
                ));
            }
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::Loopfile;

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
}
