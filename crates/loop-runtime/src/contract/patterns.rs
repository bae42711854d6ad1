//! `loop init`: a Loopfile written from what the project is (its checks,
//! protected paths, a budget), and task patterns that work on a local
//! repository, each a `SKILL.md` (WHEN, READ, JUDGE, OUTPUT, STOP) and the
//! contract template `loop run --pattern NAME` runs with, in
//! `loop-patterns/NAME/`.

use crate::Error;
use crate::project::stacks::StackCheck;
use std::path::{Path, PathBuf};

/// Where a project's patterns live.
pub const PATTERNS_DIR: &str = "loop-patterns";

/// The patterns `loop init --pattern` knows.
pub const PATTERNS: &[(&str, &str)] = &[
    (
        "ci-sweeper",
        "make the failing test suite pass, tests untouched",
    ),
    ("lint-fixer", "fix every lint finding, behaviour kept"),
    ("dependency-bump", "bump dependencies, test-gated"),
    (
        "changelog-drafter",
        "draft CHANGELOG.md entries from git history",
    ),
    ("todo-to-task", "turn TODO comments into a task list"),
];

/// What `loop init` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    /// The Loopfile written (none when one was there and kept).
    pub loopfile: Option<PathBuf>,
    /// The pattern's files written.
    pub pattern_files: Vec<PathBuf>,
    /// The project checks found.
    pub checks: Vec<StackCheck>,
    /// The environments a task would share.
    pub shares: Vec<String>,
}

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The Loopfile text for `project`.
/// The paths `loop init` protects: CI configuration always (a task must
/// not create a workflow that runs with the repository's secrets: these
/// are creation guards, and `loop audit` counts them though they match
/// nothing yet), and the licence where the project has one.
fn protected_here(project: &Path) -> Vec<String> {
    let mut out: Vec<String> = crate::project::readiness::CREATION_GUARDS
        .iter()
        .map(|g| g.to_string())
        .collect();
    let licence = loop_workspace::Protected::new(&["LICENSE*".to_string()])
        .is_ok_and(|p| !p.existing(project).is_empty());
    if licence {
        out.push("LICENSE*".to_string());
    }
    out
}

fn loopfile_text(
    checks: &[StackCheck],
    shares: &[crate::project::environments::Share],
    protected: &[String],
) -> String {
    let mut s = String::from(
        "# Loopfile.yaml, written by `loop init` from what it found here: edit freely.\n\
         # `loop validate Loopfile.yaml` checks it; `loop audit` shows what tasks get.\nversion: 1\n",
    );
    let mut kinds: Vec<&str> = Vec::new();
    let mut lines = String::new();
    for c in checks {
        if kinds.contains(&c.kind) {
            continue;
        }
        kinds.push(c.kind);
        lines.push_str(&format!(
            "  {}: {} # {}\n",
            c.kind,
            yaml_str(&c.command),
            c.why
        ));
    }
    if lines.is_empty() {
        s.push_str(
            "# verification: # no build, test or lint command was found\n#   test: make test\n",
        );
    } else {
        s.push_str("verification: # regression guards of every task, where they pass before it\n");
        s.push_str(&lines);
    }
    // In the form Prettier writes YAML (a project whose check runs
    // `prettier --check .` still passes after `loop init`).
    let quoted: Vec<String> = protected.iter().map(|g| format!("\"{g}\"")).collect();
    s.push_str(&format!(
        "defaults: # for contracts made from --check or an instruction alone\n  \
         limits:\n    max_steps: 30\n    max_tokens: 200000\n    budget_usd: 2.0\n    timeout_secs: 1800\n  \
         protected: [{}]\n",
        quoted.join(", ")
    ));
    if !shares.is_empty() {
        s.push_str(
            "# Detected and shared with every task on their own:\n# workspace:\n#   share:\n",
        );
        for sh in shares {
            s.push_str(&format!(
                "#     - {{ path: {}, mode: {} }} # {}\n",
                sh.path,
                sh.mode.as_str(),
                sh.why
            ));
        }
    }
    s
}

fn first(checks: &[StackCheck], kind: &str) -> Option<String> {
    checks
        .iter()
        .find(|c| c.kind == kind)
        .map(|c| c.command.clone())
}

/// A pattern's SKILL.md and contract template, for this project's checks.
fn pattern_files(name: &str, checks: &[StackCheck]) -> Result<(String, String), Error> {
    let test = first(checks, "test");
    let counted = checks
        .iter()
        .find(|c| c.kind == "test")
        .is_some_and(crate::project::stacks::counts_tests);
    let need = |what: &str, c: &Option<String>| {
        c.clone().ok_or_else(|| {
            Error::usage(format!(
                "the {name} pattern needs the project's {what} command: none was found; set `verification.{what}` in the Loopfile and run `loop init --pattern {name}` again"
            ))
        })
    };
    let tests_pass = |t: &str| {
        // "With tests run" only where the runner's count is checked.
        format!(
            "  - id: tests\n    text: the project's test suite passes{}\n    checks:\n      - run: {}\n{}        timeout_secs: 900\n",
            if counted { ", with tests run" } else { "" },
            yaml_str(t),
            if counted {
                "        nonempty_tests: true\n"
            } else {
                ""
            }
        )
    };
    let limits =
        "limits: { max_steps: 30, max_tokens: 300000, budget_usd: 3.0, timeout_secs: 2400 }\n";
    let tests_glob = "protected: [\"tests/**\", \"test/**\", \"**/test_*.py\", \"**/*_test.py\", \"**/*_test.go\", \"**/*.test.*\", \"**/*.spec.*\"]\n";
    Ok(match name {
        "ci-sweeper" => {
            let t = need("test", &test)?;
            (
                "# ci-sweeper\n\nWHEN: the test suite fails and the cause is in the code, not in the tests.\n\nREAD: the failing tests' output first, then the code they exercise; the tests are the specification.\n\nJUDGE: a test that fails is right until proven otherwise; never weaken, skip or delete a test (they are protected).\n\nOUTPUT: the smallest change to the code that makes every test pass.\n\nSTOP: when the suite passes; if a test is itself wrong, stop and say which and why instead of changing it.\n".to_string(),
                format!(
                    "instruction: Make the failing test suite pass by fixing the code; never weaken, skip or delete a test.\ncriteria:\n{}{tests_glob}{limits}",
                    tests_pass(&t)
                ),
            )
        }
        "lint-fixer" => {
            let lint = need("lint", &first(checks, "lint"))?;
            let mut c = format!(
                "instruction: Fix every finding of the project's lint without changing behaviour.\ncriteria:\n  - id: lint\n    text: the project's lint reports nothing\n    checks:\n      - run: {}\n        timeout_secs: 900\n",
                yaml_str(&lint)
            );
            if let Some(t) = &test {
                c.push_str(&tests_pass(t));
            }
            c.push_str(tests_glob);
            c.push_str(limits);
            (
                "# lint-fixer\n\nWHEN: the lint reports findings.\n\nREAD: the lint's output, one finding at a time, and the code around it.\n\nJUDGE: fix the cause; silencing a rule (an ignore comment, a config change) is not a fix.\n\nOUTPUT: small, behaviour-preserving edits; the tests keep passing.\n\nSTOP: when the lint is clean and the tests pass.\n".to_string(),
                c,
            )
        }
        "dependency-bump" => {
            let t = need("test", &test)?;
            (
                "# dependency-bump\n\nWHEN: dependencies are behind their latest compatible versions.\n\nREAD: the manifest and the lockfile; the changelogs of what moves.\n\nJUDGE: only compatible updates (no major version unless asked); the tests decide.\n\nOUTPUT: an updated lockfile (and manifest where needed) with every test passing. The registry must be reachable: give the task `network.allow` (a preset such as pypi, npm or crates) in the Loopfile.\n\nSTOP: when the lockfile is updated and the tests pass, or when an update breaks a test you cannot fix safely (then say which).\n".to_string(),
                format!(
                    "instruction: Bump the project's dependencies to their latest compatible versions; every test must still pass.\ncriteria:\n{}  - id: lockfile-moved\n    text: the lockfile differs from the last commit's\n    checks:\n      - run: \"git diff --quiet HEAD -- Cargo.lock package-lock.json pnpm-lock.yaml yarn.lock poetry.lock uv.lock go.sum requirements.txt\"\n        expect_exit: 1\n{tests_glob}{limits}",
                    tests_pass(&t)
                ),
            )
        }
        "changelog-drafter" => (
            "# changelog-drafter\n\nWHEN: commits have landed since the changelog was last written.\n\nREAD: `git log` since the last tag (or the last five commits), and CHANGELOG.md if there is one.\n\nJUDGE: one line per user-visible change, in the project's own words; nothing invented.\n\nOUTPUT: a new section at the top of CHANGELOG.md naming each of those commits' subjects.\n\nSTOP: when every recent commit's subject is in the new section.\n".to_string(),
            format!(
                "instruction: Draft CHANGELOG.md entries for the last five commits, from the git history, at the top of CHANGELOG.md.\ncriteria:\n  - id: subjects\n    text: each of the last five commits' subjects is in CHANGELOG.md\n    checks:\n      - run: \"s=$(git log -5 --format=%s) && test -n \\\"$s\\\" && printf '%s\\\\n' \\\"$s\\\" | while IFS= read -r l; do grep -qF -- \\\"$l\\\" CHANGELOG.md || exit 1; done\"\n      - file_exists: CHANGELOG.md\n{limits}"
            ),
        ),
        "todo-to-task" => (
            "# todo-to-task\n\nWHEN: the code holds TODO comments that nobody tracks.\n\nREAD: every TODO comment (`git grep -n TODO`), with the code around it.\n\nJUDGE: one task per TODO; say where it is and what it asks, in a sentence a person can act on.\n\nOUTPUT: TODO.md with one line per TODO: `- path:line: what to do`.\n\nSTOP: when TODO.md has exactly one line per TODO comment.\n".to_string(),
            format!(
                "instruction: \"Turn every TODO comment in the code into a line of TODO.md (- PATH:LINE: what to do), one per TODO.\"\ncriteria:\n  - id: one-line-per-todo\n    text: TODO.md has exactly one task line per TODO comment in the tracked code\n    checks:\n      - run: \"test \\\"$(git grep -n TODO -- . ':!TODO.md' | wc -l)\\\" -gt 0 && test \\\"$(git grep -n TODO -- . ':!TODO.md' | wc -l)\\\" -eq \\\"$(grep -c '^- ' TODO.md)\\\"\"\n{limits}"
            ),
        ),
        other => {
            let names: Vec<&str> = PATTERNS.iter().map(|(n, _)| *n).collect();
            return Err(Error::usage(format!(
                "unknown pattern `{other}`: one of {}",
                names.join(", ")
            )));
        }
    })
}

/// Write the Loopfile (unless one is there and `force` is not given) and,
/// for a pattern, its SKILL.md and contract template.
pub fn init(project: &Path, pattern: Option<&str>, force: bool) -> Result<InitReport, Error> {
    let loopfile = crate::loopfile::Loopfile::load(project)?;
    let checks = crate::project::stacks::project_checks(project, &loopfile.verification);
    let shares = crate::project::environments::plan(project, &loopfile);
    let path = project.join("Loopfile.yaml");
    let there = !matches!(
        loop_workspace::door::node(project, "Loopfile.yaml"),
        Ok(loop_workspace::Node::Missing)
    );
    let written = if there && !force {
        if pattern.is_none() {
            return Err(Error::usage(format!(
                "{} exists: keep it, or write a new one with --force",
                path.display()
            )));
        }
        None
    } else {
        let text = loopfile_text(&checks, &shares, &protected_here(project));
        // What is written must read back.
        crate::loopfile::Loopfile::parse(&text, "the written Loopfile")?;
        loop_workspace::door::write(project, "Loopfile.yaml", text.as_bytes())
            .map_err(|e| Error::usage(e.to_string()))?;
        Some(path)
    };
    let mut pattern_files_written = Vec::new();
    if let Some(name) = pattern {
        let (skill, contract) = pattern_files(name, &checks)?;
        loop_protocol::Contract::from_yaml(&contract, &format!("the {name} template"))
            .map_err(|e| Error::internal(e.to_string()))?;
        let dir = Path::new(PATTERNS_DIR).join(name);
        for (file, text) in [("SKILL.md", skill), ("contract.yaml", contract)] {
            let rel = dir.join(file);
            let at = project.join(&rel);
            if !matches!(
                loop_workspace::door::node(project, &rel),
                Ok(loop_workspace::Node::Missing)
            ) && !force
            {
                return Err(Error::usage(format!(
                    "{} exists: keep it, or write it again with --force",
                    at.display()
                )));
            }
            loop_workspace::door::write(project, &rel, text.as_bytes())
                .map_err(|e| Error::usage(e.to_string()))?;
            pattern_files_written.push(at);
        }
    }
    Ok(InitReport {
        loopfile: written,
        pattern_files: pattern_files_written,
        checks,
        shares: shares.into_iter().map(|s| s.path).collect(),
    })
}

/// The contract and skill of pattern `name` in `project` (as `loop init
/// --pattern` wrote them, perhaps edited since).
pub fn load(project: &Path, name: &str) -> Result<(loop_protocol::Contract, String), Error> {
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        || name.is_empty()
    {
        return Err(Error::usage(format!("`{name}` is not a pattern name")));
    }
    // Through the door: a link in a pattern (its directory, SKILL.md or
    // contract.yaml) is refused by name, never read through.
    use loop_workspace::door;
    let dir = Path::new(PATTERNS_DIR).join(name);
    let contract_path = dir.join("contract.yaml");
    let text = door::read_text(project, &contract_path, door::MAX_PROJECT_FILE)
        .map_err(|e| Error::usage(format!("pattern `{name}`: {e}")))?
        .ok_or_else(|| {
            Error::usage(format!(
                "pattern `{name}`: {} is not there; write it with `loop init --pattern {name}`",
                project.join(&contract_path).display()
            ))
        })?;
    let contract = loop_protocol::Contract::from_yaml(
        &text,
        &project.join(&contract_path).display().to_string(),
    )
    .map_err(|e| Error::usage(e.to_string()))?;
    let skill = door::read_text(project, dir.join("SKILL.md"), door::MAX_PROJECT_FILE)
        .map_err(|e| Error::usage(format!("pattern `{name}`: {e}")))?
        .unwrap_or_default();
    Ok((contract, skill))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn every_pattern_template_is_a_contract_the_critic_accepts() {
        let checks = vec![
            StackCheck {
                stack: "rust",
                kind: "test",
                command: "cargo test --offline".into(),
                why: "Cargo.toml".into(),
                counted: true,
            },
            StackCheck {
                stack: "project",
                kind: "lint",
                command: "cargo clippy --offline -- -D warnings".into(),
                why: "declared".into(),
                counted: true,
            },
        ];
        for (name, _) in PATTERNS {
            let (skill, contract) = pattern_files(name, &checks).unwrap();
            for part in ["WHEN:", "READ:", "JUDGE:", "OUTPUT:", "STOP:"] {
                assert!(skill.contains(part), "{name}: {part}");
            }
            let c = loop_protocol::Contract::from_yaml(&contract, name).unwrap();
            let reasons = crate::contract::critic::static_reasons(
                &c,
                &loop_tools::exec_policy::ExecPolicy::default(),
                &|_| true,
                None,
            );
            assert!(reasons.is_empty(), "{name}: {reasons:?}");
        }
        let e = pattern_files("lint-fixer", &checks[..1]).unwrap_err();
        assert!(e.message.contains("verification.lint"), "{}", e.message);
        assert!(pattern_files("nope", &checks).is_err());
    }

    #[test]
    fn the_written_loopfile_reads_back() {
        let checks = crate::project::stacks::checks(Path::new("/nonexistent"));
        let all: Vec<String> = [".github/**", ".gitlab-ci.yml", "LICENSE*"]
            .map(String::from)
            .to_vec();
        let text = loopfile_text(&checks, &[], &all);
        crate::loopfile::Loopfile::parse(&text, "t").unwrap();
        let checks = vec![StackCheck {
            stack: "python",
            kind: "test",
            command: ".venv/bin/python -m pytest -q".into(),
            why: "pytest".into(),
            counted: true,
        }];
        let l =
            crate::loopfile::Loopfile::parse(&loopfile_text(&checks, &[], &all[..2]), "t").unwrap();
        assert_eq!(
            l.verification.commands,
            vec![("test", ".venv/bin/python -m pytest -q".to_string())]
        );
        assert_eq!(l.defaults.protected, [".github/**", ".gitlab-ci.yml"]);
        assert_eq!(l.defaults.limits.unwrap().budget_usd, Some(2.0));
    }

    /// What `loop init` writes is in the form Prettier gives YAML (checked
    /// with Prettier 3 itself: `prettier --check Loopfile.yaml` passes):
    /// one space before a trailing comment, no flow collection past 80
    /// columns, two-space indents.
    #[test]
    fn the_written_loopfile_is_in_prettiers_form() {
        let share = crate::project::environments::Share {
            path: "node_modules".into(),
            mode: crate::project::environments::ShareMode::ReadOnly,
            why: "Node packages (package.json)".into(),
            declared: false,
        };
        let checks = vec![StackCheck {
            stack: "node",
            kind: "test",
            command: "npm test".into(),
            why: "package.json scripts.test, npm".into(),
            counted: true,
        }];
        let all: Vec<String> = [".github/**", ".gitlab-ci.yml", "LICENSE*"]
            .map(String::from)
            .to_vec();
        for text in [
            loopfile_text(&checks, std::slice::from_ref(&share), &all),
            loopfile_text(&[], &[share], &all),
        ] {
            for line in text.lines() {
                let code = line.split(" #").next().unwrap_or(line);
                if !line.starts_with('#') {
                    assert!(
                        !code.ends_with(' '),
                        "two spaces before a comment: {line:?}"
                    );
                    assert!(code.len() <= 80, "past 80 columns: {line:?}");
                    let indent = line.len() - line.trim_start().len();
                    assert_eq!(indent % 2, 0, "{line:?}");
                }
            }
        }
    }
}
