//! The contract critic: deterministic rules, no model, that reject a
//! drafted contract which could look verified without the work being done.
//! Every reason names the criterion (and check) it is about, so the
//! drafter can mend exactly that.

use loop_protocol::{Check, Contract, VerificationReport};
use loop_tools::exec_policy::{Decision, ExecPolicy};

/// Most criteria a drafted contract may have.
pub const MAX_CRITERIA: usize = 12;

/// Commands that succeed (or fail) whatever the workspace holds.
const NO_OPS: &[&str] = &[
    "true",
    ":",
    "false",
    "echo",
    "printf",
    "exit",
    "/bin/true",
    "/usr/bin/true",
    "/bin/false",
    "/usr/bin/false",
    "sleep",
    "pwd",
    "date",
    "env",
    "printenv",
    "whoami",
    "yes",
    "seq",
];

/// Words that make a criterion about behaviour (what code does), which a
/// file's existence or text alone cannot prove.
const BEHAVIOUR: &[&str] = &[
    "print",
    "prints",
    "output",
    "outputs",
    "return",
    "returns",
    "compute",
    "computes",
    "run",
    "runs",
    "pass",
    "passes",
    "fail",
    "fails",
    "raise",
    "raises",
    "handle",
    "handles",
    "respond",
    "responds",
    "work",
    "works",
    "exit",
    "exits",
    "compile",
    "compiles",
    "build",
    "builds",
    "sort",
    "sorts",
    "parse",
    "parses",
    "convert",
    "converts",
    "calculate",
    "calculates",
    "validate",
    "validates",
    "reject",
    "rejects",
    "accept",
    "accepts",
    "format",
    "formats",
    "serve",
    "serves",
    "test",
    "tests",
    "support",
    "supports",
    "greet",
    "greets",
    "show",
    "shows",
    "display",
    "displays",
    "add",
    "adds",
    "create",
    "creates",
    "read",
    "reads",
    "write",
    "writes",
    "count",
    "counts",
    "list",
    "lists",
    "answer",
    "answers",
    "emit",
    "emits",
    "log",
    "logs",
    "fix",
    "fixes",
    "compare",
    "compares",
    "match",
    "matches",
    "strip",
    "strips",
    "remove",
    "removes",
    "normalise",
    "normalises",
    "normalize",
    "normalizes",
    "escape",
    "escapes",
    "encode",
    "encodes",
    "decode",
    "decodes",
    "filter",
    "filters",
    "transform",
    "transforms",
];

/// Criteria text that promises nothing observable.
const VAGUE: &[&str] = &[
    "works correctly",
    "work correctly",
    "working correctly",
    "is good",
    "are good",
    "as expected",
    "properly",
    "works well",
    "is correct",
    "are correct",
    "looks good",
    "high quality",
    "is fine",
    "no issues",
    "is done",
];

/// Test runners whose run is an observable in itself.
const RUNNERS: &[&str] = &[
    "pytest",
    "unittest",
    "cargo test",
    "go test",
    "npm test",
    "npm run test",
    "pnpm test",
    "pnpm run test",
    "yarn test",
    "yarn run test",
    "bun test",
    "jest",
    "vitest",
    "mocha",
    "ctest",
    "make test",
    "rspec",
    "phpunit",
];

/// What in a command reaches for the network.
const NETWORK: &[&str] = &[
    "curl ",
    "wget ",
    "pip install",
    "pip3 install",
    "npm install",
    "npm ci",
    "npm i ",
    "yarn add",
    "pnpm add",
    "git clone",
    "git fetch",
    "git pull",
    "apt-get ",
    "apt ",
    "go get",
    "cargo install",
    "http://",
    "https://",
];

/// Commands that only run another (judged by what they run).
const WRAPPERS: &[&str] = &[
    "sh",
    "bash",
    "/bin/sh",
    "/bin/bash",
    "env",
    "timeout",
    "nice",
    "eval",
    "command",
    "exec",
];

/// Whether every command the shell would run in `line` is a no-op (the
/// line read as a shell reads it, wrappers followed to what they run).
fn only_no_ops(line: &str) -> bool {
    let parsed = loop_tools::shell::parse(line);
    if !parsed.unreadable.is_empty() || parsed.commands.is_empty() {
        return false;
    }
    let first = |c: &Vec<loop_tools::shell::Word>| c.first().cloned().flatten();
    let mut any = false;
    for c in &parsed.commands {
        match first(c) {
            Some(w) if WRAPPERS.contains(&w.as_str()) => {}
            Some(w) if NO_OPS.contains(&w.as_str()) => any = true,
            // `test`/`[` about no path at all (`test 1 = 1`).
            Some(w) if (w == "test" || w == "[") && !c[1..].iter().any(path_like) => any = true,
            _ => return false,
        }
    }
    any
}

/// Whether a word names a path (`greet.py`, `src/a`, `.`): it holds a `/`
/// or a `.`, or is computed (a wildcard could be one).
fn path_like(w: &loop_tools::shell::Word) -> bool {
    match w {
        None => true,
        Some(w) => !w.starts_with('-') && (w.contains('/') || w.contains('.')),
    }
}

/// Commands that only read files: a check made of nothing else proves a
/// file's text, not what code does.
const READERS: &[&str] = &[
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "cat",
    "head",
    "tail",
    "wc",
    "test",
    "[",
    "ls",
    "stat",
    "file",
    "find",
    "diff",
    "cmp",
    "sha256sum",
    "md5sum",
    "awk",
    "sed",
];

/// Whether every command in `line` only reads files.
fn only_readers(line: &str) -> bool {
    let parsed = loop_tools::shell::parse(line);
    !parsed.commands.is_empty()
        && parsed.commands.iter().all(|c| {
            c.first().cloned().flatten().is_some_and(|w| {
                let w = match w.strip_prefix('/') {
                    Some(_) => w.rsplit('/').next().unwrap_or(&w).to_string(),
                    None => w,
                };
                READERS.contains(&w.as_str())
                    || (WRAPPERS.contains(&w.as_str()) && !runs_a_script(&w, &c[1..]))
                    || NO_OPS.contains(&w.as_str())
            })
        })
}

/// Whether a shell (`sh`, `bash`) is given a script file to run (`bash
/// ci.sh`): it runs a program, as `python3 ci.py` does, and reads
/// nothing of its own (`sh -c '…'` is judged by what it runs).
fn runs_a_script(shell: &str, rest: &[loop_tools::shell::Word]) -> bool {
    if !matches!(shell, "sh" | "bash") {
        return false;
    }
    for w in rest {
        match w.as_deref() {
            Some(o)
                if o.starts_with('-')
                    && !o.starts_with("--")
                    && (o.contains('c') || o.contains('s')) =>
            {
                return false;
            }
            Some(o) if o.starts_with('-') => {}
            _ => return true,
        }
    }
    false
}

/// Commands that only read or transform what they are given, beyond
/// [`READERS`]: a check made of these and tests judges files, not work.
const MORE_READERS: &[&str] = &[
    "jq",
    "sort",
    "tac",
    "uniq",
    "cut",
    "tr",
    "xxd",
    "od",
    "strings",
    "nl",
    "readlink",
    "realpath",
    "du",
    "[[",
    "column",
    "paste",
    "comm",
    "base64",
    "cksum",
    "b2sum",
    "sha1sum",
    "sha512sum",
];

/// `test`'s operators that take a file.
const FILE_TESTS: &[&str] = &[
    "-f", "-s", "-e", "-d", "-r", "-w", "-x", "-L", "-h", "-p", "-S", "-b", "-c", "-g", "-u", "-k",
    "-O", "-G", "-N",
];

/// The files a check's verdict is read from when all the check does is
/// read files: a file check, or a line of readers, tests and no-ops
/// (`test -s NOTES`, `grep -q x CHANGELOG.md`, `test $(wc -l < out.txt)
/// -gt 0`, `jq -e .ok r.json`), or inline Python or Node that only reads
/// files. `None` when the check runs anything else (then something is
/// executed and judged).
fn files_read(check: &Check) -> Option<Vec<String>> {
    let Check::Run(r) = check else {
        // A file check reads its one file.
        return check.file().map(|p| vec![p.as_str().to_string()]);
    };
    let parsed = loop_tools::shell::parse(&r.command);
    if parsed.commands.is_empty() {
        return None;
    }
    let named = |w: &str| {
        crate::contract::judges::workspace_path(w)
            .filter(|p| !p.chars().all(|c| c.is_ascii_digit() || c == '.') && p != "]" && p != "]]")
    };
    let mut out = Vec::new();
    for c in &parsed.commands {
        let words: Vec<&str> = c.iter().map(|w| w.as_deref().unwrap_or("")).collect();
        let first = *words.first()?;
        if NO_OPS.contains(&first) || WRAPPERS.contains(&first) {
            continue;
        }
        let name = first.rsplit('/').next().unwrap_or(first);
        // A reader named by its absolute path (`/usr/bin/test`) is that
        // reader; a relative one is a program of the workspace's.
        let first = if first.starts_with('/') { name } else { first };
        let inline = |flags: &[&str]| {
            words
                .windows(2)
                .find(|w| flags.contains(&w[0]))
                .map(|w| w[1])
        };
        if name == "python" || name.starts_with("python3") {
            out.extend(crate::contract::judges::python_reads_only(inline(&[
                "-c",
            ])?)?);
            continue;
        }
        if name == "node" {
            out.extend(crate::contract::judges::node_reads_only(inline(&[
                "-e", "--eval", "-p", "--print",
            ])?)?);
            continue;
        }
        if !READERS.contains(&first) && !MORE_READERS.contains(&first) {
            return None;
        }
        let ops = &words[1..];
        match first {
            "test" | "[" | "[[" => {
                for w in ops.windows(2) {
                    if FILE_TESTS.contains(&w[0]) {
                        out.extend(named(w[1]));
                    }
                }
            }
            "grep" | "egrep" | "fgrep" | "rg" | "awk" | "sed" | "jq" => {
                // (jq's `-e` is about its exit status; its filter comes first.)
                let explicit =
                    first != "jq" && ops.iter().any(|w| matches!(*w, "-e" | "-f" | "--regexp"));
                let mut operands = ops.iter().filter(|w| !w.starts_with('-') && !w.is_empty());
                if !explicit {
                    operands.next();
                }
                out.extend(operands.filter_map(|w| named(w)));
            }
            _ => out.extend(
                ops.iter()
                    .filter(|w| !w.starts_with('-') && !w.is_empty())
                    .filter_map(|w| named(w)),
            ),
        }
    }
    // What `< FILE` feeds (not a here-document's `<<`).
    out.extend(parsed.fed().iter().filter_map(|w| named(w)));
    Some(out)
}

/// Whether the instruction asks for `path`: it names the path or the
/// file as a word, or every word of the file's stem (`RELEASE_NOTES.md`
/// for "write the release notes", `.editorconfig` for "add an
/// editorconfig").
fn instruction_names(instruction: &str, path: &str) -> bool {
    let p = path.to_lowercase();
    let file = p.rsplit('/').next().unwrap_or(&p);
    let tokens: Vec<String> = instruction
        .to_lowercase()
        .split(|c: char| c.is_whitespace() || "\"'`,;()[]{}<>".contains(c))
        .map(|t| t.trim_end_matches(['.', ':', '!', '?']).to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.iter().any(|t| *t == p || t == file) {
        return true;
    }
    let said = words(instruction);
    let stem = file.trim_start_matches('.');
    let stem = stem.split('.').next().unwrap_or(stem);
    let parts: Vec<&str> = stem
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let same = |a: &str, b: &str| a.trim_end_matches('s') == b.trim_end_matches('s');
    !parts.is_empty() && parts.iter().all(|p| said.iter().any(|w| same(w, p)))
}

/// Interpreters whose first operand is the program they run.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "sh", "bash", "node", "ruby", "perl", "php", "deno", "bun", "tsx",
    "ts-node",
];

/// The files a check runs that are not there (`present` says what is: the
/// workspace and the environments shared into it): a script named as the
/// command (`./verify.sh`) or as an interpreter's program (`python3
/// verify.py`). The task would write its own judge.
/// A test file by its name (`test_x.py`, `x_test.go`, `x.test.js`,
/// `tests/...`): what a task asked to write tests may create.
fn looks_like_a_test(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("test")
        || name.contains("_test.")
        || name.contains(".test.")
        || name.contains(".spec.")
        || path.starts_with("tests/")
        || path.starts_with("test/")
}

fn missing_programs(line: &str, present: &dyn Fn(&str) -> bool) -> Vec<String> {
    let parsed = loop_tools::shell::parse(line);
    let mut out = Vec::new();
    for c in &parsed.commands {
        let words: Vec<&str> = c.iter().map(|w| w.as_deref().unwrap_or("")).collect();
        let Some(first) = words.first() else { continue };
        let name = first.rsplit('/').next().unwrap_or(first);
        let program = if first.contains('/') && !first.starts_with('/') {
            Some(*first)
        } else if INTERPRETERS
            .iter()
            .any(|i| name == *i || name.starts_with(&format!("{i}3.")))
        {
            // The first operand that is not a flag, unless the code comes
            // inline (`-c`, `-e`, `-m module`).
            let mut program = None;
            for w in &words[1..] {
                if ["-c", "-e", "-m", "--eval", "-p"].contains(w) {
                    break;
                }
                if !w.starts_with('-') {
                    program = Some(*w);
                    break;
                }
            }
            program
        } else {
            None
        };
        if let Some(p) = program
            && !p.is_empty()
            && !p.starts_with('/')
            && !present(p)
            && !out.contains(&p.to_string())
        {
            out.push(p.to_string());
        }
    }
    out
}

/// Why `command` proves nothing, if it proves nothing: every command in
/// it is a no-op, or a no-op after its last `||` makes it succeed
/// whatever happened before.
fn proves_nothing(command: &str) -> Option<String> {
    let c = command.trim().trim_end_matches(';').trim();
    if only_no_ops(c) {
        return Some(
            "it runs nothing that looks at the work (true, exit, echo and the like)".into(),
        );
    }
    if let Some((_, after)) = c.rsplit_once("||")
        && only_no_ops(after)
    {
        return Some(format!(
            "`|| {}` at its end makes it succeed whatever happened",
            after.trim()
        ));
    }
    for tail in ["; true", "; exit 0", "; :", "\ntrue", "\nexit 0"] {
        if c.ends_with(tail) {
            return Some(format!(
                "`{}` at its end makes it succeed whatever happened",
                tail.trim_start_matches([';', '\n']).trim()
            ));
        }
    }
    None
}

fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether a check observes something specific: an expected output, a
/// test runner's run, a file's content.
fn observable(check: &Check) -> bool {
    match check {
        Check::Run(r) => {
            r.expect_stdout.is_some()
                || r.stdout_matches.is_some()
                || r.expect_stderr.is_some()
                || r.nonempty_tests == Some(true)
                || RUNNERS.iter().any(|t| r.command.contains(t))
        }
        Check::FileContains { .. } | Check::Page(_) => true,
        // A document's cells, columns, rows, headings or text.
        c => c.is_document(),
    }
}

/// Reasons to reject the run check `r` (shown as `at`): one that cannot
/// fail, cannot be read as a shell reads it, runs a program the workspace
/// lacks, is stopped by the exec policy, or needs the network checks do
/// not have.
#[allow(clippy::type_complexity)]
fn run_check_reasons(
    at: &str,
    r: &loop_protocol::RunCheck,
    (contract, policy, present): (&Contract, &ExecPolicy, &dyn Fn(&str) -> bool),
    out: &mut Vec<String>,
) {
    if r.allow_vacuous {
        out.push(format!(
            "{at} says `allow_vacuous`: only a person may keep a check that cannot fail, never a draft"
        ));
    }
    if let Some(why) = proves_nothing(&r.command) {
        out.push(format!("{at} cannot fail or proves nothing: {why}"));
    }
    let parsed = loop_tools::shell::parse(&r.command);
    if !parsed.unreadable.is_empty() {
        out.push(format!(
            "{at} cannot be read as a shell reads it ({}): a check must say plainly what it runs",
            parsed.unreadable.join("; ")
        ));
    }
    let missing = missing_programs(&r.command, present);
    if !missing.is_empty() {
        out.push(format!(
            "{at} runs {}, which the workspace does not have: the task would write its own judge; check with the project's own code and tests",
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    let verdict = policy.evaluate(&r.command);
    let rule = verdict.rule.clone().unwrap_or_else(|| "default".into());
    match verdict.decision {
        Decision::Forbidden => {
            out.push(format!("{at} is forbidden by the exec policy (rule `{rule}`)"));
        }
        Decision::Prompt => out.push(format!(
            "{at} needs a person's approval under the exec policy (rule `{rule}`), and a check runs unattended"
        )),
        Decision::Allow => {}
    }
    let lower = format!("{} ", r.command.to_lowercase());
    let local = lower.contains("127.0.0.1") || lower.contains("localhost");
    if contract.network_allow.is_empty()
        && !local
        && let Some(what) = NETWORK.iter().find(|w| lower.contains(*w))
    {
        out.push(format!(
            "{at} needs the network (`{}`), which checks do not have: a check must judge the workspace offline",
            what.trim()
        ));
    }
}

/// Reasons to reject `contract` that need no run: its shape, checks that
/// prove nothing, vague criteria, and checks the exec policy or the
/// network rules would stop. `checks_have_network` is whether the
/// contract lets its checks reach hosts.
pub fn static_reasons(
    contract: &Contract,
    policy: &ExecPolicy,
    present: &dyn Fn(&str) -> bool,
    root: Option<&std::path::Path>,
) -> Vec<String> {
    let mut out = Vec::new();
    let n = contract.criteria.len();
    if n == 0 {
        out.push("the draft has no criterion".into());
    }
    if n > MAX_CRITERIA {
        out.push(format!(
            "the draft has {n} criteria; at most {MAX_CRITERIA}: keep the ones that prove the instruction is done"
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for c in &contract.criteria {
        let id = c.id.as_str();
        if id.trim().is_empty() {
            out.push("a criterion has an empty id".into());
        } else if id.starts_with("stack-") || id.starts_with("project-") {
            out.push(format!(
                "criterion id `{id}`: `stack-` and `project-` ids are the runtime's (the project's own checks)"
            ));
        } else if seen.contains(&id) {
            out.push(format!("criterion id `{id}` is used twice"));
        }
        seen.push(id);
        if c.checks.is_empty() {
            out.push(format!("criterion `{id}` has no check"));
        }
        for (i, check) in c.checks.iter().enumerate() {
            let Check::Run(r) = check else { continue };
            let at = format!("criterion `{id}`, check {} (`{}`)", i + 1, r.command);
            run_check_reasons(&at, r, (contract, policy, present), &mut out);
        }
        // Evidence the task would write: every check only reads files, and
        // a file read is one the workspace lacks and the instruction does
        // not ask for (`test -s NOTES.md`, `test -f done.flag`).
        let read: Option<Vec<String>> = c
            .checks
            .iter()
            .map(files_read)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        let unasked: Vec<String> = read
            .unwrap_or_default()
            .into_iter()
            .filter(|f| !present(f) && !instruction_names(&contract.instruction, f))
            .collect();
        if !unasked.is_empty() {
            let mut shown: Vec<String> = unasked.iter().map(|f| format!("`{f}`")).collect();
            shown.dedup();
            out.push(format!(
                "criterion `{id}` is decided only by reading files, among them {}, which the workspace does not have and the instruction does not ask for: the task would write its own evidence; run the code the instruction is about and check what it does",
                shown.join(" and ")
            ));
        }
        let text = words(&c.text);
        let behavioural = text.iter().any(|w| BEHAVIOUR.contains(&w.as_str()));
        let reads_only = |k: &Check| match k {
            Check::Run(r) => only_readers(&r.command),
            _ => true,
        };
        if behavioural && !c.checks.is_empty() && c.checks.iter().all(reads_only) {
            out.push(format!(
                "criterion `{id}` is about behaviour (\"{}\") but its only evidence is a file's existence or text (file checks, grep, cat, test and the like): run the code and check what it does",
                c.text
            ));
        }
        let lower = c.text.to_lowercase();
        if let Some(v) = VAGUE.iter().find(|v| lower.contains(*v))
            && !c.checks.iter().any(observable)
        {
            out.push(format!(
                "criterion `{id}` says \"{v}\" but none of its checks observes anything specific (an expected output, a test run, a file's text): say what is observed"
            ));
        }
    }
    // A change criterion decided by a file the task would write (a script,
    // a module holding the assertions, every file a comparison reads).
    let told: Vec<String> = contract
        .criteria
        .iter()
        .flat_map(|c| &c.checks)
        .filter_map(|k| match k {
            Check::Run(r) => Some(missing_programs(&r.command, present)),
            _ => None,
        })
        .flatten()
        .map(|p| p.trim_start_matches("./").to_string())
        .collect();
    let asked_tests =
        |p: &str| contract.artifacts.iter().any(|a| a.as_str() == p) && looks_like_a_test(p);
    for (path, why) in crate::contract::judges::self_judged(contract, present, &asked_tests, root) {
        if !told.contains(&path) {
            out.push(format!(
                "{why}; check with the project's own code and tests"
            ));
        }
    }
    out
}

/// Words of an instruction that ask for a change.
const CHANGE_WORDS: &[&str] = &[
    "fix",
    "add",
    "make",
    "create",
    "implement",
    "change",
    "update",
    "write",
    "remove",
    "delete",
    "rename",
    "refactor",
    "bump",
    "convert",
    "improve",
    "support",
    "replace",
    "move",
    "build",
    "port",
    "migrate",
    "upgrade",
    "repair",
    "resolve",
    "generate",
    "draft",
    "turn",
    "set",
];

/// Whether the instruction asks for a change: always, unless it starts
/// with a word that asks only to look (check, verify, …) and no word in it
/// asks for a change.
pub fn asks_for_change(instruction: &str) -> bool {
    let w = words(instruction);
    let looks = matches!(
        w.first().map(String::as_str).unwrap_or_default(),
        "check" | "verify" | "confirm" | "audit" | "report" | "list" | "explain" | "describe"
    );
    !looks || w.iter().any(|x| CHANGE_WORDS.contains(&x.as_str()))
}

/// What an empty workspace says of the contract: a `run` check that passes
/// there proves nothing about the project (`python3 -c 'assert 1'`, `[ 1 ]`,
/// `CMD | cat`, `ls`, `node -e 0`, a test runner that finds no test...),
/// whatever its text looks like, and is rejected. The report is of the
/// contract's criteria run on an empty directory. Returns the reasons.
pub fn judge_empty(contract: &Contract, empty: &VerificationReport) -> Vec<String> {
    vacuous(contract, empty)
        .into_iter()
        .map(|(_, _, reason)| reason)
        .collect()
}

/// The `run` checks that pass on an empty workspace (`empty` is the
/// report of the contract's criteria run there): (criterion index, check
/// index, why), in the contract's order.
pub fn vacuous(contract: &Contract, empty: &VerificationReport) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for e in &empty.criteria {
        let Some((ci, c)) = contract
            .criteria
            .iter()
            .enumerate()
            .find(|(_, c)| c.id == e.id)
        else {
            continue;
        };
        for k in e.checks.iter().filter(|k| k.passed) {
            // A command, or a page whose server makes what it shows.
            let what = match c.checks.get(k.index) {
                Some(Check::Run(r)) => r.command.clone(),
                Some(p @ Check::Page(_)) => p.describe(),
                _ => continue,
            };
            out.push((
                ci,
                k.index,
                format!(
                    "criterion `{}`, check {} (`{what}`) passes on an empty workspace: it cannot fail, so it proves nothing about the project",
                    c.id,
                    k.index + 1,
                ),
            ));
        }
    }
    out
}

/// How a check's tests read one path: the operators that must hold of it,
/// and those a `!` negates.
#[derive(Default)]
struct Tested {
    ops: Vec<&'static str>,
    negated: Vec<&'static str>,
}

/// Whether `instruction` names the file at `path` itself (`py.typed` in
/// "add an empty py.typed marker"; a word of its name is not enough).
fn names_file(instruction: &str, path: &str) -> bool {
    let p = path.to_lowercase();
    let file = p.rsplit('/').next().unwrap_or(&p);
    instruction
        .to_lowercase()
        .split(|c: char| c.is_whitespace() || "`'\",;:()!?".contains(c))
        .map(|w| w.trim_end_matches('.'))
        .any(|w| w == p || w == file || w.ends_with(&format!("/{file}")))
}

/// `test`'s operators on a file that the probe can make hold: made as a
/// file, but `-d` (a directory), `-s` (a byte in it), `-x` (executable),
/// `-L`/`-h` (a link), `-p` (a pipe).
const MADE_TESTS: &[&str] = &[
    "-e", "-f", "-r", "-w", "-O", "-G", "-s", "-x", "-d", "-L", "-h", "-p",
];

/// Commands that read the files they are given and fail where one is
/// missing (`ls out.txt`, `cat done.txt > /dev/null`, `stat f`, `diff a
/// b`, `find build -name x` (its starting points); `readlink` and
/// `realpath` with `-e` or `-f`): each operand the untouched project
/// lacks is tested for, and made with a line in it, by the probe.
const EXISTENCE_READERS: &[&str] = &[
    "ls",
    "stat",
    "cat",
    "head",
    "tail",
    "wc",
    "du",
    "readlink",
    "realpath",
    "find",
    "diff",
    "cmp",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "b2sum",
    "cksum",
];

/// A check's tests for workspace paths the untouched project lacks (`test
/// -e out.txt`, `[ -s done.txt ]`, `[[ -x build/app ]]`, `ls done.txt`,
/// `cat out.txt`, after a `cd DIR` the path under it): each path with the
/// shell that makes it as every test of it reads it (a file; a directory
/// for `-d` or when another tested path lies beneath it; a byte in it for
/// `-s`; executable for `-x`; a link for `-L`; a pipe for `-p`). A path
/// whose tests cannot all hold at once (`-f` and `! -e`) is left out, as
/// is one the instruction names (the work may be that file).
fn tested_absent(
    command: &str,
    present: &dyn Fn(&str) -> bool,
    instruction: &str,
) -> Vec<(String, String)> {
    let tested = tests_of_paths(command, &|path| {
        path == "]" || path == "]]" || present(path) || names_file(instruction, path)
    });
    made_as_tested(&tested)
}

/// The tests `command` makes of paths (`skip` leaves a path out): each
/// path and how it is tested, up to a `cd` to a place the line does not
/// say.
fn tests_of_paths(command: &str, skip: &dyn Fn(&str) -> bool) -> Vec<(String, Tested)> {
    let parsed = loop_tools::shell::parse(command);
    let mut tested: Vec<(String, Tested)> = Vec::new();
    let mut dir = String::new();
    let mut note = |dir: &str, arg: &str, op: &'static str, negated: bool| {
        // `out//x` is `out/x`; `out/` names a directory.
        let mut arg = arg.to_string();
        while arg.contains("//") {
            arg = arg.replace("//", "/");
        }
        let directory = arg.len() > 1 && arg.ends_with('/');
        let Some(rel) = crate::contract::judges::workspace_path(arg.trim_end_matches('/')) else {
            return;
        };
        let path = if dir.is_empty() {
            rel
        } else {
            format!("{dir}/{rel}")
        };
        if skip(&path) {
            return;
        }
        let at = match tested.iter().position(|(p, _)| *p == path) {
            Some(at) => at,
            None => {
                tested.push((path, Tested::default()));
                tested.len() - 1
            }
        };
        let t = &mut tested[at].1;
        if negated {
            t.negated.push(op);
        } else {
            t.ops.push(op);
            if directory {
                t.ops.push("-d");
            }
        }
    };
    let mut moved = false;
    let mut pushed: Vec<String> = Vec::new();
    for c in &parsed.commands {
        let words: Vec<&str> = c.iter().map(|w| w.as_deref().unwrap_or("")).collect();
        let Some(first) = words.first() else { continue };
        let name = first.rsplit('/').next().unwrap_or(first);
        if matches!(name, "cd" | "pushd" | "popd") {
            moved = true;
        }
        if name == "popd" {
            // Back where the `pushd` was (or where is not known).
            match pushed.pop() {
                Some(d) => dir = d,
                None => break,
            }
            continue;
        }
        if matches!(name, "cd" | "pushd") && words.len() == 2 {
            let to = match crate::contract::judges::workspace_path(words[1].trim_end_matches('/')) {
                Some(d) if dir.is_empty() => d,
                Some(d) => format!("{dir}/{d}"),
                // Where it goes is not known: what follows is not read.
                None => break,
            };
            if name == "pushd" {
                pushed.push(std::mem::take(&mut dir));
            }
            dir = to;
            continue;
        }
        if !matches!(name, "test" | "[" | "[[") {
            // A program named by a relative path is the workspace's own
            // (`./ls`), not the reader of that name.
            if first.starts_with('/') || *first == name {
                // Made with a line in it: what it holds is anything.
                for w in operands_read(name, &words) {
                    note(&dir, &w, "-s", false);
                }
            }
            continue;
        }
        for (k, w) in words.iter().enumerate().skip(1) {
            let op = if *w == "-a" && name == "[[" { "-e" } else { w };
            let Some(op) = MADE_TESTS.iter().find(|o| **o == op) else {
                continue;
            };
            let Some(arg) = words.get(k + 1) else {
                continue;
            };
            note(&dir, arg, op, k >= 2 && words[k - 1] == "!");
        }
    }
    // What `< FILE` feeds is read as a reader reads it (where the line
    // has no `cd`: which directory it is read in is not known otherwise).
    if !moved {
        for w in parsed.fed() {
            note("", w, "-s", false);
        }
    }
    tested
}

/// The files a command (`name`, its `words`) reads that a probe makes
/// with a line in it:
/// - a reader's operands ([`EXISTENCE_READERS`]: not an option's value,
///   `stat -c %s`, `head -n 5`; a `find`'s starting points, and what its
///   `-name` or `-path` names literally, under the first of them);
/// - any other command's operands that name a file ([`names_a_file`]:
///   `grep -c . done.txt`, `sort out.txt`, `sed -n p log.txt`, `ls |
///   grep -q done.txt`), and the quoted file names in code it is given
///   (`python3 -c "assert os.path.exists('done.txt')"`).
///
/// A check that passes once these merely exist proves that a file was
/// made, whatever the command.
fn operands_read(name: &str, words: &[&str]) -> Vec<String> {
    let operands = words[1..].iter().filter(|w| !w.is_empty());
    if name == "find" {
        let starts: Vec<&&str> = operands
            .take_while(|w| !w.starts_with('-') && !matches!(**w, "(" | "!"))
            .collect();
        let under = starts
            .first()
            .map(|s| s.trim_end_matches('/'))
            .filter(|s| !matches!(*s, "" | "."));
        let mut out: Vec<String> = starts
            .iter()
            .filter(|s| !matches!(s.trim_end_matches('/'), "" | "."))
            .map(|s| s.to_string())
            .collect();
        for pair in words.windows(2) {
            let literal = !pair[1].is_empty() && !pair[1].contains(['*', '?', '[', '\\']);
            match pair[0] {
                "-name" | "-iname" if literal && !pair[1].contains('/') => out.push(match under {
                    Some(u) => format!("{u}/{}", pair[1]),
                    None => pair[1].to_string(),
                }),
                "-path" | "-wholename" if literal => out.push(pair[1].to_string()),
                _ => {}
            }
        }
        return out;
    }
    if EXISTENCE_READERS.contains(&name) {
        // The value of an option that takes one (`stat -c %s`,
        // `head -n 5`) is no operand.
        let valued: &[&str] = match name {
            "stat" => &["-c", "--format", "--printf"],
            "head" | "tail" => &["-n", "-c"],
            _ => &[],
        };
        let mut after_valued = false;
        return operands
            .filter(|w| {
                let value = std::mem::replace(&mut after_valued, valued.contains(*w));
                !value && !w.starts_with('-') && !w.chars().all(|c| c.is_ascii_digit())
            })
            .map(|w| w.to_string())
            .collect();
    }
    if matches!(name, "grep" | "egrep" | "fgrep") {
        return grep_files(&words[1..]);
    }
    let mut out = Vec::new();
    let mut after_m = false;
    for w in operands {
        // A module (`python3 -m json.tool`) is no file.
        if std::mem::replace(&mut after_m, *w == "-m") {
            continue;
        }
        // An option's value given with it (`--input=done.txt`).
        let w = match w.split_once('=') {
            Some((opt, value)) if opt.starts_with("--") => value,
            _ => w,
        };
        if names_a_file(w) {
            out.push(w.to_string());
            continue;
        }
        // Code given to an interpreter: the file names quoted in it.
        out.extend(
            quoted(w)
                .into_iter()
                .filter(|s| names_a_file(s))
                .map(str::to_string),
        );
    }
    out
}

/// The files `grep` is given (its `args`): every operand after the
/// pattern (the first operand, unless `-e` or `-f` gave it), whatever its
/// name (`grep -c . DONE`); not an option's value. Given none, a pattern
/// that names a file is one: its input is searched for that name.
fn grep_files(args: &[&str]) -> Vec<String> {
    const VALUED: &[&str] = &[
        "-e",
        "-f",
        "-m",
        "-A",
        "-B",
        "-C",
        "-d",
        "-D",
        "--regexp",
        "--file",
        "--max-count",
        "--after-context",
        "--before-context",
        "--context",
        "--label",
    ];
    let mut pattern_given = false;
    let mut operands = Vec::new();
    let mut k = 0;
    while k < args.len() {
        let w = args[k];
        k += 1;
        if w == "--" {
            operands.extend(args[k..].iter().copied());
            break;
        }
        if w.starts_with('-') && w.len() > 1 {
            if matches!(w, "-e" | "-f" | "--regexp" | "--file")
                || w.starts_with("--regexp=")
                || w.starts_with("--file=")
                || (w.starts_with("-e") || w.starts_with("-f")) && !w.starts_with("--")
            {
                pattern_given = true;
            }
            if VALUED.contains(&w) {
                k += 1;
            }
            continue;
        }
        operands.push(w);
    }
    // Reading its input, a pattern that names a file is a search for
    // that name (`ls | grep -qx done.txt`).
    if !pattern_given && operands.len() == 1 && names_a_file(operands[0]) {
        return vec![operands[0].to_string()];
    }
    operands
        .into_iter()
        .skip(usize::from(!pattern_given))
        .filter(|w| !w.is_empty() && *w != "-")
        .map(str::to_string)
        .collect()
}

/// The string literals in `code` (`'…'` or `"…"`, each closed by its own
/// quote, so an apostrophe inside `"don't"` opens nothing).
fn quoted(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(open) = rest.find(['\'', '"']) {
        let q = &rest[open..open + 1];
        let after = &rest[open + 1..];
        let Some(close) = after.find(q) else { break };
        out.push(&after[..close]);
        rest = &after[close + 1..];
    }
    out
}

/// Whether a literal word, given to a command that is no reader, names
/// a file in the workspace: a relative path, its last part holding a `.`
/// (`done.txt`, `out/r.json`, `.env`) or under a directory (`build/app`);
/// no option, number, directory (`out/`), pattern, URL, assignment or
/// code (a word with a space, a quote or a shell, glob or code sign).
fn names_a_file(w: &str) -> bool {
    let Some(rel) = crate::contract::judges::workspace_path(w) else {
        return false;
    };
    let last = rel.rsplit('/').next().unwrap_or(&rel);
    !w.ends_with('/')
        && !matches!(last, "" | "." | "..")
        && !w
            .chars()
            .any(|c| c.is_whitespace() || "=:;,(){}[]<>|&*?$\\'\"#%@!~^`".contains(c))
        && !w.chars().all(|c| c.is_ascii_digit() || c == '.')
        && (last.contains('.') || rel.contains('/'))
}

/// The shell that makes each tested path as its tests read it (see
/// [`tested_absent`]).
fn made_as_tested(tested: &[(String, Tested)]) -> Vec<(String, String)> {
    let quoted = |p: &str| format!("'{}'", p.replace('\'', "'\\''"));
    let parents: Vec<String> = tested.iter().map(|(p, _)| format!("{p}/")).collect();
    tested
        .iter()
        .filter(|(_, t)| !t.ops.is_empty())
        .filter_map(|(path, t)| {
            let has = |o: &str| t.ops.contains(&o);
            let not = |o: &str| t.negated.contains(&o);
            let q = quoted(path);
            let dir = has("-d")
                || parents
                    .iter()
                    .any(|p| p.len() > path.len() + 1 && p.starts_with(&format!("{path}/")));
            let link = has("-L") || has("-h");
            let file = !dir && !link && !has("-p");
            // Tests that cannot all hold of what is made: not judged.
            if not("-e")
                || (dir && (not("-d") || has("-f") || has("-p")))
                || (file && not("-f"))
                || (link && (not("-L") || not("-h")))
                || (has("-s") && not("-s"))
                || (has("-x") && not("-x"))
            {
                return None;
            }
            let parent = format!("mkdir -p -- \"$(dirname -- {q})\"");
            let made = if dir {
                format!("mkdir -p -- {q}")
            } else if link {
                format!("{parent} && ln -s -- made {q}")
            } else if has("-p") {
                // A writer that opens it and closes it: a reader of the
                // pipe reads its end rather than waiting for the check's
                // deadline (what is left is ended with the check).
                format!("{parent} && mkfifo -- {q} && {{ : > {q} & }}")
            } else {
                // A line that reads as what the name says where a check
                // could ask no more of it (`jq empty r.json`: `{}`).
                let body = match has("-s") {
                    true if path.ends_with(".json") => "echo '{}'",
                    true => "echo made",
                    false => ":",
                };
                let exec = if has("-x") {
                    format!(" && chmod +x -- {q}")
                } else {
                    String::new()
                };
                format!("{parent} && {body} > {q}{exec}")
            };
            Some((path.clone(), made))
        })
        .collect()
}

/// Commands whose verdict can come from a change to the project's files
/// alone, whatever it is: git's view of the worktree (`git diff --quiet`,
/// `git status --porcelain`, `git diff --name-only | grep -q calc.py`),
/// comparisons with a copy (`! cmp -s calc.py orig/calc.py`, `diff`),
/// checksums (`! sha256sum -c sums.txt`) and sizes (`[ "$(wc -c <
/// calc.py)" -ne 42 ]`, `stat -c %s`, `du`, `find -size`).
const CHANGE_READERS: &[&str] = &[
    "git",
    "cmp",
    "diff",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "wc",
    "stat",
    "du",
    "find",
];

/// What code given to an interpreter reads a file's sum or size with.
const CHANGE_IN_CODE: &[&str] = &["hashlib", "getsize", "st_size", "createHash", "statSync"];

/// Files git tracks that the change probe changes at most, beside those
/// a check names.
const CHANGED_AT_MOST: usize = 200;

/// The shell that changes the untouched project for the change probe of
/// `command`: a word added at the end of each regular file git tracks
/// (a comment in its language, [`CHANGE_ONE`])
/// (the first [`CHANGED_AT_MOST`], and as many under each path the
/// command names: a large project's every file would be copied for it),
/// with no newline after it (so a check that every file ends with one
/// still fails), and a new file.
fn change_everything(command: &str) -> String {
    let quote = |p: &str| format!("'{}'", p.replace('\'', "'\\''"));
    let named: Vec<String> = named_paths(command).iter().map(|p| quote(p)).collect();
    let under = if named.is_empty() {
        String::new()
    } else {
        format!(
            " git ls-files -- {} | head -n {CHANGED_AT_MOST};",
            named.join(" ")
        )
    };
    format!(
        "{{ git ls-files | head -n {CHANGED_AT_MOST};{under} }} | sort -u | while IFS= read -r f; do if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then {CHANGE_ONE}; fi; done; echo made > loop-probe-change.txt"
    )
}

/// How the change probe changes one file `$f`: a comment on a line of its
/// own in the file's language, so the project still imports, builds and
/// runs (a bare word at the end of `calc.py` broke `import calc`, and a
/// check that began with it failed for that, not for want of the work);
/// JSON, which has no comment, gets a space at its end (still JSON), and
/// files no comment fits (`go.sum`, CSV, lockfiles) their executable bit
/// flipped, which git sees.
const CHANGE_ONE: &str = "case \"$f\" in *.json|*.ipynb|*.jsonc|*.babelrc|*.eslintrc|*.prettierrc) printf ' ' >> \"$f\";; *.sum|*.csv|*.tsv|*.lock) if [ -x \"$f\" ]; then chmod -x \"$f\"; else chmod +x \"$f\"; fi;; *.c|*.h|*.cc|*.cpp|*.cxx|*.hpp|*.hh|*.hxx|*.inl|*.ipp|*.m|*.mm|*.rs|*.go|*.mod|*.work|*.java|*.kt|*.kts|*.scala|*.groovy|*Jenkinsfile|*.proto|*.swift|*.cs|*.js|*.mjs|*.cjs|*.jsx|*.ts|*.tsx|*.mts|*.cts|*.php|*.dart|*.gradle|*.zig) printf '\\n//made' >> \"$f\";; *.css|*.scss|*.less) printf '\\n/*made*/' >> \"$f\";; *.html|*.htm|*.xml|*.svg|*.vue|*.svelte) printf '\\n<!--made-->' >> \"$f\";; *.sql|*.lua|*.hs) printf '\\n--made' >> \"$f\";; *) printf '\\n#made' >> \"$f\";; esac";

/// The workspace paths a command line names (at most 32): each word, an
/// option's value given with it, or a string in code, that is a relative
/// path with a `.` or a `/` in it (a directory too).
fn named_paths(command: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let parsed = loop_tools::shell::parse(command);
    for w in parsed
        .commands
        .iter()
        .flat_map(|c| c.iter().skip(1).flatten())
    {
        let w = match w.split_once('=') {
            Some((opt, value)) if opt.starts_with("--") => value,
            _ => w.as_str(),
        };
        for p in std::iter::once(w).chain(quoted(w)) {
            let path = p.trim_end_matches('/');
            // A directory (`src/`) as a file beneath it would be named.
            let named =
                names_a_file(path) || (p.ends_with('/') && names_a_file(&format!("{path}/f")));
            if named && !out.iter().any(|o| o == path) && out.len() < 32 {
                out.push(path.to_string());
            }
        }
    }
    out
}

/// Whether `command` runs one of [`CHANGE_READERS`] (named by its bare
/// name or an absolute path, not a workspace program) or gives code that
/// sums or sizes a file ([`CHANGE_IN_CODE`]).
fn reads_change(command: &str) -> bool {
    loop_tools::shell::parse(command).commands.iter().any(|c| {
        let by_name = c.first().cloned().flatten().is_some_and(|w| {
            let name = w.rsplit('/').next().unwrap_or(&w);
            CHANGE_READERS.contains(&name) && (w.starts_with('/') || w == name)
        });
        let in_code = c[1..]
            .iter()
            .flatten()
            .any(|w| CHANGE_IN_CODE.iter().any(|m| w.contains(m)));
        by_name || in_code
    })
}

/// One criterion the probe (see [`existence_probe`]) runs changed.
#[derive(Debug, PartialEq, Eq)]
pub struct Probed {
    /// Its index in the contract.
    pub criterion: usize,
    /// The paths made for its checks.
    pub paths: Vec<String>,
    /// Whether its checks ran after every file git tracks was changed.
    pub changed: bool,
}

/// Which criteria pass once the paths their checks test for merely exist,
/// or once anything in the project changed. The probe: each `run` check
/// of a change criterion (not a guard) that tests for paths the untouched
/// project lacks ([`tested_absent`]), made to run after those paths are
/// made there, and each that reads git's view of the worktree, compares
/// files or sums them ([`reads_change`]) after a word is added at the end of
/// the files git tracks ([`change_everything`]) and a new file is made; its criterion's other checks as
/// they are; run on the untouched project (a check's view is its own, so
/// nothing is left behind). `None` when no check is changed.
pub fn existence_probe(
    contract: &Contract,
    present: &dyn Fn(&str) -> bool,
) -> Option<(Contract, Vec<Probed>)> {
    let mut probe = contract.clone();
    probe.criteria.clear();
    let mut probed = Vec::new();
    for (ci, c) in contract
        .criteria
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.guard)
    {
        let mut changed = c.clone();
        let mut paths: Vec<String> = Vec::new();
        let mut touched = false;
        for k in changed.checks.iter_mut() {
            let Check::Run(r) = k else { continue };
            let made = tested_absent(&r.command, present, &contract.instruction);
            let change = reads_change(&r.command);
            if made.is_empty() && !change {
                continue;
            }
            // Each made on its own: one that cannot be (a path under a
            // file) leaves the others made, and is simply missing.
            let mut makes: Vec<&str> = made.iter().map(|(_, m)| m.as_str()).collect();
            let everything = change_everything(&r.command);
            if change {
                makes.push(&everything);
                touched = true;
            }
            r.command = format!("{{ {}; }} >/dev/null 2>&1\n{}", makes.join("; "), r.command);
            for (p, _) in made {
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        if !paths.is_empty() || touched {
            probe.criteria.push(changed);
            probed.push(Probed {
                criterion: ci,
                paths,
                changed: touched,
            });
        }
    }
    (!probed.is_empty()).then_some((probe, probed))
}

/// The criteria of `contract` the probe's `report` (see
/// [`existence_probe`]) says pass once the paths their checks test for
/// merely exist, or once anything changed, among those `failing` now
/// (`None`: every one probed): each proves that a file was made or
/// changed, not that the work was done.
pub fn judge_existence(
    contract: &Contract,
    probed: &[Probed],
    report: &VerificationReport,
    failing: Option<&VerificationReport>,
) -> Vec<String> {
    probed
        .iter()
        .filter_map(|p| {
            let c = contract.criteria.get(p.criterion)?;
            let fails_now = failing.is_none_or(|b| {
                b.criteria.iter().any(|e| e.id == c.id && !e.passed)
            });
            let passes = report.criteria.iter().any(|e| e.id == c.id && e.passed);
            (fails_now && passes).then(|| {
                let named: Vec<String> = p.paths.iter().map(|p| format!("`{p}`")).collect();
                let exist = format!(
                    "{} merely exist(s) (made there: empty, or with a line in it where a check reads or sizes it)",
                    named.join(", ")
                );
                let change = "the project's files merely change (a word added at the end of the files git tracks, and a new file made)";
                let (once, what) = match (p.paths.is_empty(), p.changed) {
                    (false, false) => (exist, "that a file was made"),
                    (true, _) => (change.to_string(), "that something changed"),
                    (false, true) => (
                        format!("{exist} and {change}"),
                        "that a file was made or something changed",
                    ),
                };
                // A check about a file that must be missing (`python3
                // sum.py nosuch.txt`) passes as well once it is there.
                let missing = if p.paths.is_empty() {
                    ""
                } else {
                    "; a check of what happens without a file says so (`test ! -e FILE && …`)"
                };
                format!(
                    "criterion `{}` passes on the untouched project once {once}: its checks prove {what}, not that the work was done; add a check that fails until the work itself is done (a test of the behaviour asked for){missing}",
                    c.id
                )
            })
        })
        .collect()
}

/// What the untouched workspace says of the draft: the criteria that
/// already hold become regression guards (labelled in `contract`), and a
/// contract of guards only, for an instruction that asks for a change, is
/// rejected: nothing in it checks the change. Returns (reasons, notes).
pub fn judge_baseline(
    contract: &mut Contract,
    baseline: &VerificationReport,
    instruction_asks_change: bool,
) -> (Vec<String>, Vec<String>) {
    let mut notes = Vec::new();
    let mut reasons = Vec::new();
    // A check the untouched workspace could not judge (killed by its
    // timeout, unable to start) says nothing about the change.
    for e in &baseline.criteria {
        for k in &e.checks {
            let unstarted = k
                .failure
                .as_deref()
                .is_some_and(|f| f.starts_with("the command could not start"));
            if k.timed_out || unstarted || k.signal.is_some() {
                reasons.push(format!(
                    "criterion `{}`, check {} could not be judged on the untouched workspace ({}): it would prove nothing either way",
                    e.id,
                    k.index + 1,
                    if k.timed_out {
                        "it timed out".to_string()
                    } else if let Some(sig) = k.signal {
                        format!("it was killed by signal {sig}")
                    } else {
                        k.failure.clone().unwrap_or_default()
                    }
                ));
            }
        }
    }
    for c in contract.criteria.iter_mut() {
        let held = baseline
            .criteria
            .iter()
            .find(|e| e.id == c.id)
            .is_some_and(|e| e.passed);
        if held && !c.guard {
            c.guard = true;
            notes.push(format!(
                "criterion `{}` already holds before any change: kept as a regression guard",
                c.id
            ));
        }
    }
    if instruction_asks_change && contract.criteria.iter().all(|c| c.guard) {
        reasons.push(
            "every criterion already holds on the untouched workspace: nothing checks the change the instruction asks for"
                .to_string(),
        );
    }
    (reasons, notes)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn contract(yaml: &str) -> Contract {
        Contract::from_yaml(&format!("instruction: add a greeting\n{yaml}"), "t").unwrap()
    }

    fn reasons(yaml: &str) -> Vec<String> {
        let ws = std::env::temp_dir().join(format!("loop-critic-ws-{}", std::process::id()));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("greet.py"), "print('Hello')\n").unwrap();
        static_reasons(
            &contract(yaml),
            &ExecPolicy::default(),
            &|p| ws.join(p).exists(),
            Some(&ws),
        )
    }

    fn rejected_for(yaml: &str, want: &str) {
        let r = reasons(yaml);
        assert!(r.iter().any(|x| x.contains(want)), "{want:?} not in {r:#?}");
    }

    #[test]
    fn a_good_draft_passes_every_rule() {
        let r = reasons(
            "criteria:\n  - id: greets\n    text: greet.py prints Hello\n    checks:\n      - run: python3 greet.py\n        expect_stdout: Hello\n  - id: file\n    text: the file exists\n    checks:\n      - file_exists: greet.py\n",
        );
        assert!(r.is_empty(), "{r:#?}");
    }

    #[test]
    fn checks_that_cannot_fail_are_rejected_in_every_form() {
        for cmd in [
            "true",
            "exit 0",
            ":",
            "echo done",
            "printf ok",
            "python3 greet.py || true",
            "python3 greet.py; exit 0",
            "true && echo ok",
            "sh -c 'true'",
            "bash -c \"exit 0\"",
            "/bin/true",
            "python3 greet.py || echo failed",
            "test 1",
            "env true",
        ] {
            rejected_for(
                &format!(
                    "criteria:\n  - id: a\n    text: it is there\n    checks:\n      - run: {}\n",
                    serde_json::to_string(cmd).unwrap()
                ),
                "cannot fail or proves nothing",
            );
        }
        // A real command is not a no-op, even beside one.
        assert!(reasons("criteria:\n  - id: a\n    text: a\n    checks:\n      - run: python3 greet.py && echo ok\n").is_empty());
    }

    #[test]
    fn behaviour_needs_more_than_a_file_and_vague_text_needs_an_observable() {
        rejected_for(
            "criteria:\n  - id: p\n    text: greet.py prints Hello\n    checks:\n      - {file_contains: greet.py, text: Hello}\n",
            "about behaviour",
        );
        rejected_for(
            "criteria:\n  - id: v\n    text: the script works correctly\n    checks:\n      - run: python3 greet.py\n",
            "says \"works correctly\"",
        );
        // With an observable it is fine.
        assert!(reasons("criteria:\n  - id: v\n    text: the script works correctly\n    checks:\n      - run: python3 greet.py\n        expect_stdout: Hello\n").is_empty());
    }

    #[test]
    fn a_judge_the_task_would_write_readers_posing_as_behaviour_and_runtime_ids_are_rejected() {
        rejected_for(
            "criteria:\n  - id: s\n    text: greet.py --shout prints HELLO\n    checks:\n      - run: python3 verify_shout.py\n",
            "runs `verify_shout.py`, which the workspace does not have",
        );
        rejected_for(
            "criteria:\n  - id: s\n    text: s\n    checks:\n      - run: sh ci/check.sh\n",
            "runs `ci/check.sh`",
        );
        rejected_for(
            "criteria:\n  - id: s\n    text: s\n    checks:\n      - run: ./verify.sh\n",
            "runs `./verify.sh`",
        );
        // Judges in other forms the task would write: sourced, a module
        // run or only imported, code read and run, compared files.
        for (check, names) in [
            (". ./verify.sh", "`verify.sh`"),
            ("python3 -m own_module", "`own_module.py`"),
            ("python3 -c 'import own'", "`own.py`"),
            (
                "python3 -c \"exec(open('verify.py').read())\"",
                "`verify.py`",
            ),
            ("node -e \"require('./check.js')\"", "`check.js`"),
            (
                "cmp notes.txt expected.txt",
                "`notes.txt` and `expected.txt`",
            ),
        ] {
            let yaml = format!(
                "criteria:\n  - id: s\n    text: greet.py greets\n    checks:\n      - run: {}\n",
                serde_json::to_string(check).unwrap()
            );
            rejected_for(&yaml, &format!("is decided by {names}"));
        }
        // A comparison of a file the project has with one the task would
        // write, and nothing run: a copy would pass it.
        rejected_for(
            "criteria:\n  - id: s\n    text: s\n    checks:\n      - run: cmp greet.py out.txt\n",
            "among them `out.txt`",
        );
        // The same forms over the workspace's own files, a runner, a
        // comparison of what the work printed with a file the project
        // has: fine.
        for check in [
            "python3 -m greet",
            "python3 -m pytest -q",
            "python3 greet.py > out.txt && cmp out.txt greet.py",
            "python3 -c \"exec(open('greet.py').read())\"",
        ] {
            let yaml = format!(
                "criteria:\n  - id: s\n    text: s\n    checks:\n      - run: {}\n",
                serde_json::to_string(check).unwrap()
            );
            assert!(reasons(&yaml).is_empty(), "{check}: {:?}", reasons(&yaml));
        }
        // The workspace's own program, or inline code, is fine.
        assert!(reasons("criteria:\n  - id: g\n    text: greet.py prints Hello\n    checks:\n      - run: python3 greet.py\n        expect_stdout: Hello\n").is_empty());
        assert!(reasons("criteria:\n  - id: g\n    text: g\n    checks:\n      - run: python3 -c 'import greet'\n").is_empty());
        rejected_for(
            "criteria:\n  - id: p\n    text: greet.py prints Hello\n    checks:\n      - run: grep -q Hello greet.py\n",
            "about behaviour",
        );
        rejected_for(
            "criteria:\n  - id: p\n    text: the CLI supports --verbose\n    checks:\n      - run: cat greet.py | grep -q verbose\n",
            "about behaviour",
        );
        rejected_for(
            "criteria:\n  - id: stack-python-test\n    text: x\n    checks:\n      - run: test -f greet.py\n",
            "ids are the runtime's",
        );
        rejected_for(
            "criteria:\n  - id: u\n    text: u\n    checks:\n      - run: sh -c \"$CHECK\"\n",
            "cannot be read as a shell reads it",
        );
        // A file test about a path is not a no-op (the baseline judges it).
        assert!(reasons("criteria:\n  - id: f\n    text: the file is there\n    checks:\n      - run: test -f greet.py\n").is_empty());
        rejected_for(
            "criteria:\n  - id: f\n    text: f\n    checks:\n      - run: test 1 = 1\n",
            "cannot fail or proves nothing",
        );
        assert!(asks_for_change(
            "Check the CSV parser rejects empty rows and fix it"
        ));
    }

    /// The paths a check tests for that the project lacks, each made as
    /// every test of it reads it: a path whose tests cannot all hold, a
    /// present one, one the instruction names, a test of no path and an
    /// escaping one are left out.
    #[test]
    fn the_paths_a_check_tests_for_are_made_as_each_test_reads_them() {
        let present = |p: &str| p == "calc.py";
        let made = |cmd: &str| tested_absent(cmd, &present, "make the tests pass");
        let paths = |cmd: &str| made(cmd).into_iter().map(|(p, _)| p).collect::<Vec<_>>();
        let how = |cmd: &str, path: &str| {
            made(cmd)
                .into_iter()
                .find(|(p, _)| p == path)
                .map(|(_, m)| m)
                .unwrap_or_default()
        };
        assert_eq!(
            paths("python3 -c 'import calc' && [ -e done.txt ] && test -f calc.py"),
            ["done.txt"]
        );
        assert_eq!(
            paths("[[ -s out/r.txt ]] && [ -d build/ ]"),
            ["out/r.txt", "build"]
        );
        // Every test of a path counts: a file with a byte in it.
        assert!(how("[ -f d.txt ] && [ -s d.txt ]", "d.txt").ends_with("echo made > 'd.txt'"));
        assert!(how("test -f app && test -x app", "app").ends_with("chmod +x -- 'app'"));
        // A path with another tested beneath it is a directory.
        assert_eq!(
            how("[ -s out/d.txt ] && [ -e out ]", "out"),
            "mkdir -p -- 'out'"
        );
        // A test negated on its own operand only.
        assert_eq!(paths("[ -e d.txt -a ! -d d.txt ]"), ["d.txt"]);
        assert!(paths("[ ! -e d.txt ] && test -n \"$X\"").is_empty());
        assert!(paths("[ -f d.txt ] && [ ! -f d.txt ]").is_empty());
        // Ownership, links, `[[ -a ]]`, and a path under a `cd`.
        assert_eq!(paths("[ -O a.txt ] && [ -G b.txt ]"), ["a.txt", "b.txt"]);
        assert!(how("[ -L l.txt ]", "l.txt").ends_with("ln -s -- made 'l.txt'"));
        assert_eq!(paths("[[ -a x.txt ]]"), ["x.txt"]);
        assert_eq!(paths("cd pkg && [ -e done.txt ]"), ["pkg/done.txt"]);
        assert!(paths("test 1 = 1").is_empty());
        assert!(paths("make && ./build/app").is_empty());
        // Readers of a file fail where it is missing: each operand the
        // project lacks is tested for (a find's starting points only; a
        // count is no path; a workspace program named like a reader is
        // not one).
        assert_eq!(
            paths("python3 -c 'import calc' && ls done.txt"),
            ["done.txt"]
        );
        assert_eq!(
            paths("cat out/r.txt > /dev/null && head -n 5 calc.py && stat -c %s s.bin"),
            ["out/r.txt", "s.bin"]
        );
        assert_eq!(
            paths("find build -name '*.o' | grep -q . && diff a.txt b.txt"),
            ["build", "a.txt", "b.txt"]
        );
        // A reader's file is made with a line in it (what it holds is
        // anything); `out/` is a directory; `a//b` is `a/b`; what `<` feeds
        // is read; a pipe gets a writer, so a reader of it ends.
        assert_eq!(
            how("[ -e out/x ] && ls out/x", "out/x"),
            "mkdir -p -- \"$(dirname -- 'out/x')\" && echo made > 'out/x'"
        );
        assert_eq!(how("ls out/ && du -s b/", "out"), "mkdir -p -- 'out'");
        assert_eq!(how("[ -e out/ ]", "out"), "mkdir -p -- 'out'");
        assert!(paths("[ -f out/ ]").is_empty());
        assert_eq!(paths("ls out//done.txt"), ["out/done.txt"]);
        assert_eq!(
            paths(": < done.txt && wc -c < \"n.txt\""),
            ["done.txt", "n.txt"]
        );
        assert!(paths("cat <<EOF\nx\nEOF").is_empty());
        // A `<` that feeds no file is none.
        assert!(paths("[[ a < b.txt ]] && (( 1 < 10 )) && grep -q '<title>' calc.py").is_empty());
        assert!(paths("cd sub && wc -c < n.txt").is_empty());
        assert!(
            how("[ -p p ] && cat p", "p").ends_with("mkfifo -- 'p' && { : > 'p' & }"),
            "{:?}",
            made("[ -p p ] && cat p")
        );
        // Any other command's operand that names a file is made too, and
        // so is a file named in quotes in code it is given: a check that
        // passes once these merely exist proves a file was made.
        assert_eq!(paths("grep -c . done.txt"), ["done.txt"]);
        assert_eq!(
            paths("sort out.txt | uniq | grep -q . && sed -n p log/run.log | grep -q ."),
            ["out.txt", "log/run.log"]
        );
        assert_eq!(paths("ls | grep -qx done.txt"), ["done.txt"]);
        assert_eq!(paths("find . -name done.txt | grep -q ."), ["done.txt"]);
        assert_eq!(
            paths("find out/ -iname r.json -o -path ./logs/a.log | grep -q ."),
            ["out/", "out/r.json", "./logs/a.log"]
                .map(|p| p.trim_start_matches("./").trim_end_matches('/'))
        );
        assert_eq!(
            paths("python3 -c \"import os; assert os.path.exists('out/done.txt')\""),
            ["out/done.txt"]
        );
        assert_eq!(
            paths("node -e 'require(\"fs\").statSync(\"r.json\")' && timeout 5 wc -l build/app"),
            ["r.json", "build/app"]
        );
        // grep's files whatever their names (not its pattern or an
        // option's value); a `pushd` as a `cd`, a `popd` back; an option's
        // value given with it; a quote inside another opens nothing; a
        // module is no file.
        assert_eq!(
            paths("grep -c . DONE && grep -q -e x -m 1 LOG notes && grep -- -v NOTE"),
            ["DONE", "LOG", "notes", "NOTE"]
        );
        assert_eq!(
            paths("pushd out && grep -c . done.txt && popd && grep -c . top.txt"),
            ["out/done.txt", "top.txt"]
        );
        assert_eq!(
            paths("./gen.sh; python3 calc.py --input=in.txt"),
            ["in.txt"]
        );
        assert_eq!(
            paths(
                "python3 -m json.tool x.json; python3 -c \"assert \\\"don't\\\" and os.path.exists('done.txt')\""
            ),
            ["x.json", "done.txt"]
        );
        assert!(how("jq empty r.json", "r.json").ends_with("echo '{}' > 'r.json'"));
        // A check of what happens without a file, saying so, is not
        // probed for it (the rejection's message tells a drafter how).
        assert!(
            paths("test ! -e nosuch.txt && python3 calc.py nosuch.txt 2>&1 | grep -qi error")
                .is_empty()
        );
        // No file: an option, a pattern, a number, a version, a URL, a
        // directory, a present file, code without a quoted name, a glob;
        // a workspace program's operands are its own.
        for line in [
            "python3 -m pytest -q -k test_add tests/",
            "grep -q 'def add' calc.py && echo 3.14",
            "pip install requests==2.31 && curl -s http://127.0.0.1:8000/x.json",
            "python3 -c 'import calc; print(calc.add(1, 2))'",
            "find . -name '*.pyc' | grep -q . && ./gen out.txt",
        ] {
            assert!(paths(line).is_empty(), "{line}: {:?}", paths(line));
        }
        // A `cd` to where the line does not say: what follows is not read.
        assert_eq!(paths("ls a.txt && cd \"$D\" && ls b.txt"), ["a.txt"]);
        assert!(paths("./ls done.txt && bin/cat x.txt").is_empty());
        assert!(paths("ls done.txt && [ ! -e done.txt ]").is_empty());
        // An instruction's word ends at `!` or `?` too.
        assert!(tested_absent("ls done.txt", &present, "create done.txt!").is_empty());
        // What the instruction asks for may be the work itself.
        assert!(
            tested_absent(
                "test -f py.typed",
                &present,
                "add an empty py.typed marker."
            )
            .is_empty()
        );
        // A word of the name is not the file.
        assert_eq!(
            tested_absent("[ -e done.txt ]", &present, "mark it done")
                .into_iter()
                .map(|(p, _)| p)
                .collect::<Vec<_>>(),
            ["done.txt"]
        );
        let all = made("/usr/bin/test -x 'bin/it s' && [ -s n.txt ]");
        assert_eq!(all[0].0, "bin/it s");
        assert!(all[0].1.ends_with("chmod +x -- 'bin/it s'"), "{all:?}");
        assert!(all[1].1.ends_with("echo made > 'n.txt'"), "{all:?}");
        // The probe runs each changed check after its paths are made, the
        // criterion's other checks as they are; guards are not probed.
        let c = Contract::from_yaml(
            "instruction: fix add\ncriteria:\n  - id: a\n    text: a\n    checks:\n      - run: \"make && [ -e done.txt ]\"\n      - run: python3 -m unittest\n  - id: g\n    text: g\n    guard: true\n    checks:\n      - run: \"[ -e x.txt ]\"\n",
            "t",
        )
        .unwrap();
        // Each path is made on its own: one that cannot be spares no other.
        let two = Contract::from_yaml(
            "instruction: fix add\ncriteria:\n  - id: a\n    text: a\n    checks:\n      - run: \"ls calc.py/x done.txt\"\n",
            "t",
        )
        .unwrap();
        let (probe2, _) = existence_probe(&two, &present).unwrap();
        let Check::Run(r2) = &probe2.criteria[0].checks[0] else {
            panic!()
        };
        assert!(
            r2.command.starts_with("{ mkdir -p -- \"$(dirname -- 'calc.py/x')\" && echo made > 'calc.py/x'; mkdir -p -- \"$(dirname -- 'done.txt')\" && echo made > 'done.txt'; }"),
            "{}",
            r2.command
        );
        let (probe, probed) = existence_probe(&c, &present).unwrap();
        assert_eq!(
            probed,
            vec![Probed {
                criterion: 0,
                paths: vec!["done.txt".to_string()],
                changed: false
            }]
        );
        assert_eq!(probe.criteria.len(), 1);
        assert_eq!(probe.criteria[0].checks.len(), 2);
        let Check::Run(r) = &probe.criteria[0].checks[0] else {
            panic!()
        };
        assert!(
            r.command
                .ends_with("} >/dev/null 2>&1\nmake && [ -e done.txt ]"),
            "{}",
            r.command
        );
    }

    /// A check that reads git's view of the worktree, compares files or
    /// sums them is run once more after every file git tracks is changed
    /// (and a new file made); other checks are not.
    /// The change probe's change leaves a project that still imports and
    /// runs: `python3 -c 'import calc' && git diff --name-only | grep -q
    /// calc.py` was accepted (a bare word at the end broke the import).
    #[test]
    fn the_change_probe_leaves_code_that_still_runs() {
        let d = std::env::temp_dir().join(format!("critic-change-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let sh = |line: &str| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(line)
                .current_dir(&d)
                .output()
                .unwrap()
        };
        let made = sh(
            "git init -q . && printf 'def add(a, b):\\n    return a - b' > calc.py && printf 'run() {\\n  echo ok\\n}\\nrun\\n' > run.sh && printf 'int main(void) { return 0; }\\n' > m.c && echo '{\"a\": 1}' > p.json && printf 'module x\\n\\ngo 1.19\\n' > go.mod && printf 'a,b\\n1,2\\n' > d.csv && git add -A",
        );
        assert!(made.status.success(), "{made:?}");
        let changed = sh(&change_everything("python3 -c 'import calc'"));
        assert!(changed.status.success(), "{changed:?}");
        for (check, why) in [
            ("python3 -c 'import calc'", "python still imports"),
            ("sh run.sh | grep -qx ok", "a script still runs"),
            (
                "python3 -c 'import json; json.load(open(\"p.json\"))'",
                "JSON stays JSON",
            ),
            ("! git diff --quiet -- p.json", "and is changed"),
            (
                "grep -q '//made' go.mod",
                "go.mod gets a comment of its own",
            ),
            (
                "! git diff --quiet -- d.csv && test \"$(cat d.csv)\" = \"$(printf 'a,b\\n1,2')\"",
                "CSV: its mode, not its rows",
            ),
            (
                "git diff --name-only | grep -qx calc.py",
                "the change is seen",
            ),
            ("grep -q '//made' m.c", "C gets a comment of its own"),
            ("test -e loop-probe-change.txt", "a new file is made"),
            ("! tail -c1 calc.py | grep -q '^$'", "no newline at the end"),
        ] {
            assert!(sh(check).status.success(), "{why}: {check}");
        }
        let _ = std::fs::remove_dir_all(&d);
        // A shell given a script to run runs a program; `-c` is judged by
        // what it runs.
        assert!(!only_readers("bash ci.sh"));
        assert!(!only_readers("sh ./scripts/ci.sh --fast"));
        assert!(only_readers("bash -c 'grep -q x f.txt'"));
        assert!(only_readers("test -e ci.sh && cat ci.sh"));
    }

    #[test]
    fn checks_that_read_a_change_are_run_after_everything_changed() {
        for line in [
            "test -n \"$(git status --porcelain)\"",
            "! git diff --quiet",
            "git diff --name-only | grep -q calc.py",
            "/usr/bin/git status -s | grep -q .",
            "! cmp -s calc.py orig/calc.py",
            "! sha256sum -c sums.txt",
            "python3 -m unittest && diff <(python3 calc.py) expected.txt",
            "[ \"$(wc -c < calc.py)\" -ne 42 ]",
            "python3 -c \"import hashlib; print(hashlib.sha256(open('calc.py','rb').read()).hexdigest())\" | grep -vq 3f2a",
        ] {
            assert!(reads_change(line), "{line}");
        }
        for line in [
            "python3 -m unittest",
            "./git status",
            "grep -q git README.md",
            "make diff",
        ] {
            assert!(!reads_change(line), "{line}");
        }
        // What is changed: the first files git tracks, and those under
        // each path the check names.
        assert_eq!(
            named_paths(
                "git diff --name-only -- src/ | grep -qx lib/calc.py && python3 -c \"open('a.json')\""
            ),
            ["src", "lib/calc.py", "a.json"]
        );
        assert!(
            change_everything("! git diff --quiet -- src/").starts_with(
                "{ git ls-files | head -n 200; git ls-files -- 'src' | head -n 200; } | sort -u | while"
            ),
            "{}",
            change_everything("! git diff --quiet -- src/")
        );
        let present = |p: &str| p == "calc.py";
        let c = Contract::from_yaml(
            "instruction: fix add\ncriteria:\n  - id: a\n    text: a\n    checks:\n      - run: python3 -m unittest\n      - run: \"! git diff --quiet\"\n  - id: b\n    text: b\n    checks:\n      - run: python3 -m unittest\n",
            "t",
        )
        .unwrap();
        let (probe, probed) = existence_probe(&c, &present).unwrap();
        assert_eq!(
            probed,
            vec![Probed {
                criterion: 0,
                paths: vec![],
                changed: true
            }]
        );
        let run = |k: &Check| match k {
            Check::Run(r) => r.command.clone(),
            _ => panic!(),
        };
        assert_eq!(run(&probe.criteria[0].checks[0]), "python3 -m unittest");
        assert_eq!(
            run(&probe.criteria[0].checks[1]),
            format!(
                "{{ {}; }} >/dev/null 2>&1\n! git diff --quiet",
                change_everything("! git diff --quiet")
            )
        );
    }

    /// Drafts a lazy model would make for "make slugify() strip accents"
    /// in a project with `slug.py` and `test_slug.py`: each is rejected by
    /// a rule (naming what decides it), or is left to the checker model
    /// where only meaning can tell (`tests/drafting.rs` has a scripted
    /// checker reject one). The honest drafts of the same instruction pass.
    #[test]
    fn lazy_drafts_are_rejected_and_honest_ones_of_the_same_instruction_pass() {
        let ws = std::env::temp_dir().join(format!("loop-critic-lazy-{}", std::process::id()));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("slug.py"), "def slugify(t):\n    return t\n").unwrap();
        std::fs::write(ws.join("test_slug.py"), "from slug import slugify\n").unwrap();
        std::fs::write(
            ws.join("Makefile"),
            "check:\n\tpython3 verify_accents.py\n\ntest: prog\n\tpython3 -m pytest -q test_slug.py\n\t./prog\n\nprog: prog.c\n\tcc -o prog prog.c\n",
        )
        .unwrap();
        std::fs::write(
            ws.join("package.json"),
            "{\"scripts\": {\"test\": \"node check_accents.js\"}}",
        )
        .unwrap();
        let review = |instruction: &str, text: &str, check: &str| {
            let yaml = format!(
                "instruction: {instruction:?}\ncriteria:\n  - id: c\n    text: {text:?}\n    checks:\n      - {check}\n"
            );
            let c = Contract::from_yaml(&yaml, "t").unwrap();
            static_reasons(
                &c,
                &ExecPolicy::default(),
                &|p| ws.join(p).exists(),
                Some(&ws),
            )
        };
        let asked = "make slugify() in slug.py strip accents";
        // (criterion text, check, what the rejection says; "" = the checker's)
        let lazy: &[(&str, &str, &str)] = &[
            ("the work is done", "run: test -f DONE", "among them `DONE`"),
            (
                "it is noted",
                "run: grep -q accents NOTES.md slug.py",
                "among them `NOTES.md`",
            ),
            (
                "the result is ok",
                "run: jq -e .ok result.json",
                "among them `result.json`",
            ),
            (
                "the notes exist",
                "run: node -e \"require('fs').readFileSync('NOTES.md')\"",
                "among them `NOTES.md`",
            ),
            (
                "the result is there",
                "run: python3 -c \"import os; assert os.path.exists('done.flag')\"",
                "among them `done.flag`",
            ),
            // `g.py` is inside "slug.py" as text, not as a name.
            ("a helper exists", "run: test -f g.py", "among them `g.py`"),
            (
                "notes are written",
                "run: test -s NOTES.md",
                "among them `NOTES.md`",
            ),
            (
                "the work is finished",
                "run: test -f done.flag",
                "among them `done.flag`",
            ),
            // `test` spelt as brackets, negated, or by its path.
            (
                "the fix is complete",
                "run: \"[ -e done.txt ]\"",
                "among them `done.txt`",
            ),
            (
                "the fix is complete",
                "run: \"[ -s done.txt ]\"",
                "among them `done.txt`",
            ),
            (
                "the fix is complete",
                "run: \"[[ -f done.txt ]]\"",
                "among them `done.txt`",
            ),
            (
                "the fix is complete",
                "run: \"! [ ! -e done.txt ]\"",
                "among them `done.txt`",
            ),
            (
                "the fix is complete",
                "run: /usr/bin/test -e done.txt",
                "among them `done.txt`",
            ),
            (
                "changes are recorded",
                "file_exists: CHANGES.md",
                "among them `CHANGES.md`",
            ),
            (
                "the notes mention accents",
                "{file_contains: NOTES.md, text: accents}",
                "among them `NOTES.md`",
            ),
            (
                "the change is recorded",
                "run: grep -q accents CHANGELOG.md",
                "among them `CHANGELOG.md`",
            ),
            (
                "a result is written",
                "run: test -n \"$(cat result.txt)\"",
                "among them `result.txt`",
            ),
            (
                "the result is valid JSON",
                "run: python3 -c \"import json; json.load(open('result.json'))\"",
                "among them `result.json`",
            ),
            (
                "the log has lines",
                "run: test $(wc -l < run.log) -gt 0",
                "among them `run.log`",
            ),
            (
                "the output is right",
                "run: cmp out.txt expected.txt",
                "`out.txt` and `expected.txt`",
            ),
            (
                "the output matches",
                "run: diff out.txt want.txt",
                "`out.txt` and `want.txt`",
            ),
            (
                "accents are stripped",
                "run: python3 -m own_module",
                "`own_module.py`",
            ),
            (
                "accents are stripped",
                "run: python3 -c 'import own'",
                "`own.py`",
            ),
            ("accents are stripped", "run: . ./verify.sh", "`verify.sh`"),
            (
                "accents are stripped",
                "run: bash < verify.sh",
                "cannot be read as a shell reads it",
            ),
            (
                "accents are stripped",
                "run: python3 - < verify.py",
                "cannot be read as a shell reads it",
            ),
            (
                "accents are stripped",
                "run: node -e \"require('./check.js')\"",
                "`check.js`",
            ),
            (
                "accents are stripped",
                "run: python3 -c \"exec(open('verify.py').read())\"",
                "`verify.py`",
            ),
            (
                "accents are stripped",
                "run: sh verify.sh",
                "runs `verify.sh`",
            ),
            (
                "accents are stripped",
                "run: ./check_accents.sh",
                "runs `./check_accents.sh`",
            ),
            (
                "accents are stripped",
                "run: python3 verify_accents.py",
                "runs `verify_accents.py`",
            ),
            (
                "accents are stripped",
                "run: make check",
                "`verify_accents.py` (the script `python3` runs, in what `make` runs)",
            ),
            (
                "accents are stripped",
                "run: npm test",
                "`check_accents.js` (the script `node` runs, in what `npm` runs)",
            ),
            (
                "slugify works correctly",
                "run: python3 -c 'import slug'",
                "says \"works correctly\"",
            ),
            (
                "slugify strips accents",
                "run: grep -q normalize slug.py",
                "about behaviour",
            ),
            // Only meaning tells these from honest work: the checker's.
            (
                "slug.py uses unicodedata",
                "run: grep -q unicodedata slug.py",
                "",
            ),
            (
                "slug.py normalises text",
                "run: cat slug.py | grep -q NFKD",
                "about behaviour",
            ),
            ("slug.py has the NFKD form", "run: grep -q NFKD slug.py", ""),
        ];
        assert!(lazy.len() >= 20);
        for (text, check, want) in lazy {
            let r = review(asked, text, check);
            if want.is_empty() {
                assert!(r.is_empty(), "{check}: left to the checker, yet {r:?}");
            } else {
                assert!(
                    r.iter().any(|x| x.contains(want)),
                    "{check}: {want:?} not in {r:#?}"
                );
            }
        }
        // The honest drafts of the same instruction, and a file the
        // instruction asks for.
        for (instruction, text, check) in [
            (
                asked,
                "accents are stripped",
                "run: python3 -c \"from slug import slugify; assert slugify('Café') == 'Cafe'\"",
            ),
            (
                asked,
                "the existing tests pass",
                "run: python3 -m pytest -q test_slug.py",
            ),
            // A recipe running the project's tests and the program the
            // Makefile builds.
            (asked, "the tests pass", "run: make test"),
            // Inline code that runs the work, then reads what it wrote.
            (
                asked,
                "the CLI writes a slug",
                "run: python3 -c \"import subprocess, json; subprocess.run(['python3', 'slug.py', 'r.json'], check=True); assert json.load(open('r.json'))\"",
            ),
            (
                "add an editorconfig with 4-space indents",
                "the indent is 4",
                "run: grep -q 'indent_size = 4' .editorconfig",
            ),
            (
                asked,
                "slugify prints plain letters",
                "{run: \"python3 -c \\\"from slug import slugify; print(slugify('é'))\\\"\", expect_stdout: e}",
            ),
            (
                "write the release notes for 1.2",
                "the notes name 1.2",
                "run: grep -q 1.2 RELEASE_NOTES.md",
            ),
            (
                "add docs/usage.md describing the CLI",
                "the usage page exists",
                "file_exists: docs/usage.md",
            ),
        ] {
            let r = review(instruction, text, check);
            assert!(r.is_empty(), "{check}: {r:#?}");
        }
    }

    #[test]
    fn too_many_criteria_the_network_and_the_exec_policy_are_named() {
        let many: String = (0..13)
            .map(|i| format!("  - id: c{i}\n    text: c\n    checks:\n      - run: test -f f{i}\n"))
            .collect();
        rejected_for(&format!("criteria:\n{many}"), "13 criteria; at most 12");
        rejected_for(
            "criteria:\n  - id: n\n    text: n\n    checks:\n      - run: curl -fsS https://example.org/ok\n",
            "needs the network",
        );
        let policy = ExecPolicy {
            rules: vec![loop_tools::exec_policy::Rule {
                prefix: vec!["rm".into()],
                decision: Decision::Forbidden,
                examples: Vec::new(),
                not_examples: Vec::new(),
            }],
            ..ExecPolicy::default()
        };
        let r = static_reasons(
            &contract(
                "criteria:\n  - id: r\n    text: r\n    checks:\n      - run: rm -rf build\n",
            ),
            &policy,
            &|_| true,
            None,
        );
        assert!(
            r.iter().any(|x| x.contains("forbidden by the exec policy")),
            "{r:#?}"
        );
    }

    #[test]
    fn criteria_holding_already_become_guards_and_guards_alone_are_rejected() {
        let mut c = contract(
            "criteria:\n  - id: old\n    text: old\n    checks:\n      - run: test -f a\n  - id: new\n    text: new\n    checks:\n      - run: test -f b\n",
        );
        let report = |old: bool, new: bool| {
            let v = serde_json::json!({
                "attempt": 0, "contract_sha256": "x", "manifest_root": "r", "files": 0,
                "snapshot_method": "copy", "artifacts": [], "protected_violations": [],
                "isolation": {"process_group": true, "pid_namespace": true, "landlock_abi": null,
                    "seccomp": true, "network": "none", "rlimits": [], "memory_cgroup": false,
                    "env_scrubbed": true, "notes": []},
                "duration_ms": 1,
                "criteria": [
                    {"id": "old", "passed": old, "checks": []},
                    {"id": "new", "passed": new, "checks": []}
                ]
            });
            serde_json::from_value::<VerificationReport>(v).unwrap()
        };
        let (reasons, notes) = judge_baseline(&mut c, &report(true, false), true);
        assert!(reasons.is_empty(), "{reasons:?}");
        assert_eq!(notes.len(), 1);
        assert!(c.criteria[0].guard && !c.criteria[1].guard);
        let (reasons, _) = judge_baseline(&mut c, &report(true, true), true);
        assert!(
            reasons[0].contains("nothing checks the change"),
            "{reasons:?}"
        );
        // A request only to check may hold already.
        assert!(!asks_for_change("check that the tests pass"));
        assert!(asks_for_change("make the tests pass"));
    }
}
