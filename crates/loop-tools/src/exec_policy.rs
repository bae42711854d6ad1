//! Exec policy for `run_command`: prefix rules from the Loopfile.
//!
//! ```yaml
//! exec:
//!   default: allow                  # for commands no rule matches
//!   approval_timeout_secs: 3600     # a pending `prompt` becomes a deny after this
//!   rules:
//!     - prefix: git push
//!       decision: forbidden
//!       examples: ["git push origin main"]
//!       not_examples: ["git pushd"]
//!     - prefix: pip install
//!       decision: prompt
//!       examples: ["pip install requests"]
//! ```
//!
//! A command line is split into simple commands at `;`, `&&`, `||`, `|`,
//! `&` and newlines (quotes respected); each is split into words like a
//! shell would, leading `VAR=value` assignments and `env`/`sudo`/`command`
//! wrappers skipped. A rule matches a simple command whose words start with
//! the rule's words. Every simple command is judged; the strictest decision
//! wins (`forbidden` over `prompt` over `allow`). A command substitution or
//! anything the splitter cannot read is judged by the strictest rule of
//! all, never waved through. Each rule's examples are checked when the
//! policy loads.

use serde::{Deserialize, Serialize};

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run it.
    Allow,
    /// Ask a person first.
    Prompt,
    /// Never run it.
    Forbidden,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decision::Allow => "allow",
            Decision::Prompt => "prompt",
            Decision::Forbidden => "forbidden",
        })
    }
}

/// One prefix rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// The words a command must start with.
    pub prefix: Vec<String>,
    /// What to do.
    pub decision: Decision,
    /// Commands this rule must match (checked at load).
    #[serde(default)]
    pub examples: Vec<String>,
    /// Commands it must not match (checked at load).
    #[serde(default)]
    pub not_examples: Vec<String>,
}

impl Rule {
    /// The rule's prefix as written.
    pub fn name(&self) -> String {
        self.prefix.join(" ")
    }
}

/// The policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecPolicy {
    /// For commands no rule matches.
    pub default: Decision,
    /// Rules, in the order written.
    pub rules: Vec<Rule>,
    /// Seconds a `prompt` waits before it is a deny.
    pub approval_timeout_secs: u64,
}

impl Default for ExecPolicy {
    fn default() -> Self {
        ExecPolicy {
            default: Decision::Allow,
            rules: Vec::new(),
            approval_timeout_secs: 3600,
        }
    }
}

/// The verdict on one command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The strictest decision.
    pub decision: Decision,
    /// The rule that decided (`None`: the default).
    pub rule: Option<String>,
    /// The simple command it decided on.
    pub command: String,
}

/// Split a command line into simple commands, each into words. `None`
/// when it cannot be read with confidence (unbalanced quotes, command
/// substitution, here-documents).
pub fn split(line: &str) -> Option<Vec<Vec<String>>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let end_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        x => word.push(x),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        '$' if chars.peek() == Some(&'(') => return None,
                        '`' => return None,
                        x => word.push(x),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(x) => word.push(x),
                }
            }
            '`' => return None,
            '$' if chars.peek() == Some(&'(') => return None,
            '<' if chars.peek() == Some(&'<') => return None,
            ';' | '&' | '|' | '\n' | '(' | ')' => {
                end_word(&mut words, &mut word, &mut in_word);
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
                if matches!(c, '&' | '|') && chars.peek() == Some(&c) {
                    chars.next();
                }
            }
            c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    if !words.is_empty() {
        commands.push(words);
    }
    Some(commands)
}

/// Drop leading assignments and transparent wrappers (`env`, `sudo`,
/// `command`, `exec`, `nice`, `time`), so `FOO=1 sudo git push` is `git push`.
fn effective(words: &[String]) -> &[String] {
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let is_assignment = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if is_assignment
            || matches!(
                w.as_str(),
                "env" | "sudo" | "command" | "exec" | "nice" | "time"
            )
        {
            i += 1;
        } else {
            break;
        }
    }
    &words[i..]
}

impl ExecPolicy {
    fn rule_matches(rule: &Rule, words: &[String]) -> bool {
        let words = effective(words);
        if words.len() < rule.prefix.len() {
            return false;
        }
        rule.prefix.iter().zip(words).all(|(p, w)| {
            // The program may be named by path: /usr/bin/git is git.
            p == w || (std::ptr::eq(p, &rule.prefix[0]) && w.rsplit('/').next() == Some(p.as_str()))
        })
    }

    /// Judge a command line.
    pub fn evaluate(&self, line: &str) -> Verdict {
        let Some(commands) = split(line) else {
            let strictest = self
                .rules
                .iter()
                .map(|r| r.decision)
                .chain([self.default, Decision::Prompt])
                .max()
                .unwrap_or(Decision::Prompt);
            return Verdict {
                decision: strictest,
                rule: Some(
                    "unreadable command line (substitution, here-document or unbalanced quotes)"
                        .into(),
                ),
                command: line.to_string(),
            };
        };
        let mut best = Verdict {
            decision: self.default,
            rule: None,
            command: line.to_string(),
        };
        let mut first = true;
        for words in &commands {
            let (decision, rule) = self
                .rules
                .iter()
                .filter(|r| Self::rule_matches(r, words))
                .map(|r| (r.decision, Some(r.name())))
                .max_by_key(|(d, _)| *d)
                .unwrap_or((self.default, None));
            if first || decision > best.decision {
                best = Verdict {
                    decision,
                    rule,
                    command: words.join(" "),
                };
                first = false;
            }
        }
        best
    }

    /// Check every rule's examples; the problems, by rule.
    pub fn check_examples(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            for ex in &r.examples {
                let matched =
                    split(ex).is_some_and(|cmds| cmds.iter().any(|w| Self::rule_matches(r, w)));
                if !matched {
                    problems.push(format!(
                        "rule {} (`{}`): example `{ex}` does not match it",
                        i + 1,
                        r.name()
                    ));
                } else if self.evaluate(ex).decision != r.decision {
                    problems.push(format!(
                        "rule {} (`{}`): example `{ex}` is decided `{}` by a stricter rule, not `{}`",
                        i + 1,
                        r.name(),
                        self.evaluate(ex).decision,
                        r.decision
                    ));
                }
            }
            for ex in &r.not_examples {
                if split(ex).is_some_and(|cmds| cmds.iter().any(|w| Self::rule_matches(r, w))) {
                    problems.push(format!(
                        "rule {} (`{}`): not_example `{ex}` matches it",
                        i + 1,
                        r.name()
                    ));
                }
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefix: &str, decision: Decision) -> Rule {
        Rule {
            prefix: prefix.split_whitespace().map(str::to_string).collect(),
            decision,
            examples: vec![],
            not_examples: vec![],
        }
    }

    fn policy() -> ExecPolicy {
        ExecPolicy {
            default: Decision::Allow,
            rules: vec![
                rule("git", Decision::Allow),
                rule("git push", Decision::Forbidden),
                rule("pip install", Decision::Prompt),
                rule("rm -rf", Decision::Forbidden),
            ],
            approval_timeout_secs: 60,
        }
    }

    #[test]
    fn the_strictest_rule_wins_across_every_simple_command() {
        let p = policy();
        let d = |c: &str| p.evaluate(c).decision;
        assert_eq!(d("git status"), Decision::Allow);
        assert_eq!(d("git push origin main"), Decision::Forbidden);
        assert_eq!(d("pytest -q && git push"), Decision::Forbidden);
        assert_eq!(d("echo hi; pip install requests"), Decision::Prompt);
        assert_eq!(d("ls | pip install x"), Decision::Prompt);
        assert_eq!(d("FOO=1 sudo /usr/bin/git push"), Decision::Forbidden);
        assert_eq!(d("env git push"), Decision::Forbidden);
        assert_eq!(d("'git' 'push'"), Decision::Forbidden);
        assert_eq!(d("git pushd"), Decision::Allow, "prefixes are whole words");
        assert_eq!(
            d("echo 'git push'"),
            Decision::Allow,
            "quoted text is an argument"
        );
        let v = p.evaluate("make && git push --force");
        assert_eq!(v.rule.as_deref(), Some("git push"));
        assert_eq!(v.command, "git push --force");
    }

    #[test]
    fn what_cannot_be_read_is_judged_by_the_strictest_rule() {
        let p = policy();
        for c in [
            "echo $(git push)",
            "echo `git push`",
            "cat <<EOF\nx\nEOF",
            "echo 'unbalanced",
        ] {
            assert_eq!(p.evaluate(c).decision, Decision::Forbidden, "{c}");
        }
        let lenient = ExecPolicy::default();
        assert_eq!(
            lenient.evaluate("echo $(date)").decision,
            Decision::Prompt,
            "never waved through"
        );
    }

    #[test]
    fn examples_are_checked() {
        let mut p = policy();
        p.rules[1].examples = vec!["git push origin main".into()];
        p.rules[1].not_examples = vec!["git pushd".into()];
        assert!(p.check_examples().is_empty(), "{:?}", p.check_examples());
        p.rules[2].examples = vec!["pip3 install x".into()];
        p.rules[0].not_examples = vec!["git log".into()];
        let problems = p.check_examples();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("rule 1 (`git`): not_example `git log` matches it"),
            "{problems:?}"
        );
        assert!(
            problems[1]
                .contains("rule 3 (`pip install`): example `pip3 install x` does not match it")
        );
    }
}
