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
//! A command line is read with a real shell grammar ([`crate::shell`]):
//! every command in command position anywhere in it is judged — in lists,
//! pipelines, groups, subshells, `if`/`while`/`for`/`case` bodies, `!`,
//! functions, redirections, command and process substitutions — and so is
//! the command each wrapper runs (`env`, `sudo`, `timeout`, `xargs`, `find
//! -exec`, `sh -c 'literal'`, `eval literal`, …). A rule matches a command
//! whose words start with the rule's words; a rule that could match
//! through a computed word (`$x`, `$(…)`, a glob) counts as matching. The
//! strictest decision wins (`forbidden` over `prompt` over `allow`). A line
//! that cannot be read with confidence (a parse error, a computed command
//! name, `sh -c`/`eval` of something not literal) gets the strictest
//! decision of all. With no rules, every line gets the default. Each rule's
//! examples are checked when the policy loads.
//!
//! Prefix rules are a convenience for people, not the security boundary:
//! the sandbox is.

use crate::shell::{self, Word};
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
pub struct ExecVerdict {
    /// The strictest decision.
    pub decision: Decision,
    /// The rule that decided (`None`: the default).
    pub rule: Option<String>,
    /// The simple command it decided on.
    pub command: String,
}

/// How a rule meets one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// Every word of the prefix is there, literally.
    Exact,
    /// It could be: a computed word stands where a prefix word is.
    Possible,
    /// It is not.
    No,
}

fn fit(rule: &Rule, words: &[Word]) -> Fit {
    let mut possible = false;
    for (i, p) in rule.prefix.iter().enumerate() {
        match words.get(i) {
            // A computed word may expand to several, so a short command
            // with one can still reach the rule's words.
            None if words.iter().any(Option::is_none) => possible = true,
            None => return Fit::No,
            Some(None) => possible = true,
            // The program may be named by path: /usr/bin/git is git.
            Some(Some(w)) if w == p || (i == 0 && w.rsplit('/').next() == Some(p.as_str())) => {}
            Some(Some(_)) => return Fit::No,
        }
    }
    if possible { Fit::Possible } else { Fit::Exact }
}

fn show(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.as_deref().unwrap_or("…"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl ExecPolicy {
    /// The strictest decision any rule or the default can give.
    fn strictest(&self) -> Decision {
        self.rules
            .iter()
            .map(|r| r.decision)
            .chain([self.default])
            .max()
            .unwrap_or(self.default)
    }

    /// Judge a command line: every command in it (see [`crate::shell`]),
    /// the strictest decision wins; a rule that could match through a
    /// computed word counts as matching; a line that cannot be read gets
    /// the strictest decision of all. With no rules, every line gets the
    /// default.
    pub fn evaluate(&self, line: &str) -> ExecVerdict {
        let default = ExecVerdict {
            decision: self.default,
            rule: None,
            command: line.to_string(),
        };
        if self.rules.is_empty() {
            return default;
        }
        let parsed = shell::parse(line);
        if let Some(why) = parsed.unreadable.first() {
            return ExecVerdict {
                decision: self.strictest(),
                rule: Some(format!("unreadable command line: {why}")),
                command: line.to_string(),
            };
        }
        let mut best = default;
        let mut first = true;
        // `[ … ]` and `[[ … ]]` run nothing (what their command
        // substitutions run is judged as its own command): never judged.
        let bracket =
            |w: &Vec<shell::Word>| matches!(w.first(), Some(Some(n)) if n == "[" || n == "[[");
        for words in parsed.commands.iter().filter(|w| !bracket(w)) {
            let (decision, rule) = self
                .rules
                .iter()
                .filter_map(|r| match fit(r, words) {
                    Fit::Exact => Some((r.decision, Some(r.name()))),
                    Fit::Possible => Some((
                        r.decision,
                        Some(format!("{} (through a computed word)", r.name())),
                    )),
                    Fit::No => None,
                })
                .max_by_key(|(d, _)| *d)
                .unwrap_or((self.default, None));
            if first || decision > best.decision {
                best = ExecVerdict {
                    decision,
                    rule,
                    command: show(words),
                };
                first = false;
            }
        }
        best
    }

    /// Whether `rule` matches some command of `line` exactly.
    fn matches_line(rule: &Rule, line: &str) -> bool {
        shell::parse(line)
            .commands
            .iter()
            .any(|w| fit(rule, w) == Fit::Exact)
    }

    /// Check every rule's examples; the problems, by rule.
    pub fn check_examples(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            for ex in &r.examples {
                if !Self::matches_line(r, ex) {
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
                if Self::matches_line(r, ex) {
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
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
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

    /// A test in brackets runs nothing: under a strict default, `[ -f x ]
    /// && make` is judged by `make`; what a bracket's command substitution
    /// runs still is judged.
    #[test]
    fn a_bracket_test_is_not_judged_but_what_it_substitutes_is() {
        let p = ExecPolicy {
            default: Decision::Prompt,
            rules: vec![
                rule("make", Decision::Allow),
                rule("rm", Decision::Forbidden),
            ],
            approval_timeout_secs: 60,
        };
        let d = |c: &str| p.evaluate(c).decision;
        assert_eq!(d("[ -f Makefile ] && make"), Decision::Allow);
        assert_eq!(d("[[ -d build ]] && make test"), Decision::Allow);
        assert_eq!(d("[ -n \"$(rm -rf x)\" ] && make"), Decision::Forbidden);
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
            "r=git; $r push",
            "sh -c \"$CMD\"",
            "eval \"$X\"",
            "echo 'unbalanced",
        ] {
            let v = p.evaluate(c);
            assert_eq!(v.decision, Decision::Forbidden, "{c}");
            assert!(
                v.rule.unwrap().starts_with("unreadable command line"),
                "{c}"
            );
        }
        // With no rules at all, nothing is unreadable: the default decides.
        let none = ExecPolicy::default();
        for c in [
            "echo $(date)",
            "cat > t.py <<'EOF'\nimport os\nEOF",
            "$x",
            "echo 'unbalanced",
        ] {
            assert_eq!(none.evaluate(c).decision, Decision::Allow, "{c}");
        }
    }

    /// A shell or interpreter fed its program from elsewhere is judged by
    /// the strictest rule: with `rm` forbidden, none of these runs (each
    /// deletes `f` when run); the honest forms beside them still run, and
    /// with no rules a here-document writing a file runs.
    #[test]
    fn a_shell_fed_from_anywhere_gets_the_strictest_rule() {
        let mut p = ExecPolicy {
            default: Decision::Allow,
            rules: vec![rule("rm", Decision::Forbidden)],
            approval_timeout_secs: 60,
        };
        p.rules.push(rule("git", Decision::Allow));
        let fed = [
            "echo 'rm f' | sh",
            "sh <<'EOF'\nrm f\nEOF",
            "bash -c \"bash <<< 'rm f'\"",
            "printf 'rm f\\n' > \"$TMPDIR/s.sh\"; sh \"$TMPDIR/s.sh\"",
            "make -f /dev/stdin <<'EOF'\nall:\n\trm f\nEOF",
            "printf 'rm f\\n' > s.sh; sh s.sh",
            "printf 'rm f\\n' > s.sh && bash ./s.sh",
            "echo 'rm f' > s.sh; . ./s.sh",
            "echo 'rm f' | tee s.sh >/dev/null; dash s.sh",
            "sh <(echo 'rm f')",
            "bash /dev/stdin <<< 'rm f'",
            "echo 'rm f' | bash -s",
            "echo 'rm f' | xargs -0 sh",
            "cat s.txt | sh -",
            "echo 'rm f' | zsh",
            "env sh < s.txt",
            "echo 'import os; os.remove(\"f\")' | python3",
            "python3 - <<'EOF'\nimport os\nos.remove('f')\nEOF",
            "echo 'unlink \"f\"' | perl",
            "node /dev/stdin <<< 'require(\"fs\").rmSync(\"f\")'",
            "printf 'all:\\n\\trm f\\n' > m.mk; make -f m.mk",
            "find . -name '*.sh' -exec sh {} \\;",
            "timeout 5 sh < /dev/stdin",
            "sh -c 'echo rm f | sh'",
            // Found by a hostile review.
            "echo 'rm f' | { sh; }",
            "echo 'rm f' | (sh)",
            "echo 'rm f' | if true; then sh; fi",
            "f(){ sh; }; echo 'rm f' | f",
            "bash 0<s.txt",
            "echo 'rm f' | sh -c sh",
            "echo 'rm f' | eval sh",
            "echo 'rm f' | timeout 5 bash -c 'exec bash'",
            "sh /dev//stdin <<< 'rm f'",
            "sh /dev/./stdin <<< 'rm f'",
            "sh /proc/thread-self/fd/0 <<< 'rm f'",
            "echo 'rm f' | busybox ash",
            "echo 'rm f' | xargs -0 bash -c",
            "echo 'rm f' | env -S 'sh -s'",
            "bash -o pipefail -c 'rm f'",
        ];
        for c in fed {
            let v = p.evaluate(c);
            assert_eq!(v.decision, Decision::Forbidden, "{c}: {v:?}");
        }
        for honest in [
            "sh ./configure",
            "bash run_tests.sh",
            "python3 -m pytest -q",
            "python3 script.py < data.txt",
            "node --test",
            "python3 -V",
            "make test",
            "cat > t.py <<'EOF'\nprint(1)\nEOF",
            "git status | cat",
            "sh -c 'echo hi'",
            ". \"$HOME/.cargo/env\"",
            "source $VENV/bin/activate && pytest -q",
            "python3 \"$TMPDIR/check.py\"",
            "sh \"$PWD/run.sh\"",
            "bash -o pipefail -c 'make test | tee log'",
        ] {
            assert_eq!(p.evaluate(honest).decision, Decision::Allow, "{honest}");
        }
        // No rules: the default decides, a here-document writing a file runs.
        let none = ExecPolicy::default();
        assert_eq!(
            none.evaluate("cat > notes.md <<'EOF'\n# notes\nEOF\nsh <<'EOF'\necho hi\nEOF")
                .decision,
            Decision::Allow
        );
    }

    /// The exec-policy table: each line with the decision it must get
    /// under `rm` forbidden, `git push` forbidden, `pip install` prompt,
    /// `git` allow, default allow.
    #[test]
    fn every_command_in_command_position_is_judged() {
        let mut p = policy();
        p.rules.push(rule("rm", Decision::Forbidden));
        use Decision::{Allow as A, Forbidden as F, Prompt as P};
        let table: &[(&str, Decision)] = &[
            ("rm victim.txt", F),
            ("rm victim.txt>/dev/null", F),
            ("(rm victim.txt)", F),
            ("command rm victim.txt", F),
            ("nice rm victim.txt", F),
            ("nice -n 5 rm victim.txt", F),
            ("\\rm victim.txt", F),
            ("{ rm victim.txt; }", F),
            ("if true; then rm victim.txt; fi", F),
            ("if rm x; then echo; else echo; fi", F),
            ("! rm victim.txt", F),
            ("timeout 5 rm victim.txt", F),
            ("timeout -s KILL -k 2 5 rm victim.txt", F),
            ("sh -c 'rm victim.txt'", F),
            ("bash -c \"rm x\"", F),
            ("bash -lc 'echo hi && rm x'", F),
            ("sh -c \"sh -c 'rm x'\"", F),
            ("eval rm victim.txt", F),
            ("eval 'echo a; rm b'", F),
            ("echo victim.txt | xargs rm", F),
            ("xargs -I{} -n 1 rm {}", F),
            ("echo {a,b}", A),
            ("ls {} x", A),
            ("r=rm; $r victim.txt", F),
            ("/bin/rm x", F),
            ("\"rm\" x", F),
            ("'r'm x", F),
            ("$'rm' x", F),
            ("/bin/r? x", F),
            ("env -i FOO=1 rm x", F),
            ("env -u HOME rm x", F),
            ("env -S 'rm x'", F),
            ("sudo -u root rm x", F),
            ("doas rm x", F),
            ("exec rm x", F),
            ("exec -a name rm x", F),
            ("builtin command rm x", F),
            ("nohup rm x &", F),
            ("time rm x", F),
            ("stdbuf -oL rm x", F),
            ("setsid rm x", F),
            ("chroot / rm x", F),
            ("find . -name '*.tmp' -exec rm {} \\;", F),
            ("find . -execdir rm {} +", F),
            ("parallel rm ::: a b", F),
            ("sh -c \"$CMD\"", F),
            ("eval \"$CMD\"", F),
            ("echo $(rm x)", F),
            ("echo `rm x`", F),
            ("cat <(rm x)", F),
            ("echo hi > >(rm x)", F),
            ("while true; do rm x; done", F),
            ("until false; do rm x; done", F),
            ("for f in a b; do rm $f; done", F),
            ("case x in x) rm x;; esac", F),
            ("f() { rm x; }; f", F),
            ("true && rm x", F),
            ("false || rm x", F),
            ("echo hi | rm x", F),
            ("x=$(rm y) true", F),
            ("export X=$(rm y)", F),
            ("cat <<EOF\n$(rm x)\nEOF", F),
            ("rm $FILE", F),
            ("git $SUB origin", F),
            ("timeout 5 git push", F),
            ("FOO=1 sudo /usr/bin/git push", F),
            ("git push origin main", F),
            ("echo 'unbalanced", F),
            ("sudo pip install x", P),
            ("pip install requests", P),
            ("git status", A),
            ("git pushd", A),
            ("echo 'rm x'", A),
            ("echo rm x", A),
            ("ls -la", A),
            ("echo hi # rm x", A),
            ("printf '%s\\n' rm", A),
            ("env FOO=rm echo hi", A),
            ("grep -r rm .", A),
            ("python3 -c \"import os; os.remove('x')\"", A),
            ("pip3 install x", A),
            ("cat > tests/x.py <<'EOF'\nimport os\nrm = 1\nEOF", A),
            ("ls | wc -l", A),
        ];
        assert!(table.len() >= 50);
        let mut wrong = Vec::new();
        for (line, want) in table {
            let got = p.evaluate(line);
            if got.decision != *want {
                wrong.push(format!(
                    "{line:?}: want {want}, got {} ({:?})",
                    got.decision, got.rule
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
