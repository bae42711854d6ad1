//! Which workspace files decide a `run` check's verdict rather than being
//! judged by it: a script the check runs or sources for its exit status, a
//! module whose code holds the assertions (`python3 -m NAME`, inline code
//! that only imports or `exec`s a file, `require('./x')`), and the files a
//! `diff` or `cmp` compares. A judge the task itself writes is no judge: a
//! change criterion decided by a file absent as the task starts is
//! rejected in a draft and refused in a written contract unless the
//! contract lists the path in `judge_may_change` (recorded).

use loop_protocol::{Check, Contract, RunCheck};

/// Python modules that are runners and tools, never a project's judge.
const TOOL_MODULES: &[&str] = &[
    "pytest",
    "unittest",
    "doctest",
    "nose2",
    "mypy",
    "pyflakes",
    "flake8",
    "pylint",
    "black",
    "ruff",
    "isort",
    "coverage",
    "tox",
    "nox",
    "pip",
    "venv",
    "compileall",
    "py_compile",
    "json",
    "http",
    "timeit",
    "hypothesis",
    "behave",
    "django",
    "flask",
    "uvicorn",
    "build",
    "twine",
    "hatch",
    "poetry",
    "pdm",
    "sphinx",
    "tabnanny",
    "pydoc",
    "trace",
    "cProfile",
    "pstats",
    "pickle",
    "ast",
    "tokenize",
    "zipfile",
    "tarfile",
    "base64",
    "site",
    "sysconfig",
    "ensurepip",
    "calendar",
    "webbrowser",
    "pyright",
    "bandit",
    "pycodestyle",
    "pydocstyle",
    "unittest.mock",
];

/// Whether `module` (dotted) is a runner, a tool or the standard library's.
fn not_the_projects(module: &str) -> bool {
    let top = module.split('.').next().unwrap_or_default();
    TOOL_MODULES.contains(&module)
        || TOOL_MODULES.contains(&top)
        || loop_gates::shadow::PYTHON_STDLIB.contains(&top)
}

/// The host's Python package directories (system, `/usr/local`, the
/// user's, pyenv's): where an installed third-party module lives. Listed
/// once; no interpreter is run.
#[allow(clippy::disallowed_methods)] // host directories, never a project's
fn host_site_dirs() -> &'static [std::path::PathBuf] {
    static DIRS: std::sync::OnceLock<Vec<std::path::PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(|| {
        use std::path::{Path, PathBuf};
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut prefixes: Vec<PathBuf> = vec!["/usr/lib".into(), "/usr/local/lib".into()];
        if let Some(h) = &home {
            prefixes.push(h.join(".local/lib"));
            let pyenv = std::env::var_os("PYENV_ROOT")
                .map(PathBuf::from)
                .unwrap_or_else(|| h.join(".pyenv"));
            if let Ok(versions) = std::fs::read_dir(pyenv.join("versions")) {
                prefixes.extend(versions.flatten().map(|v| v.path().join("lib")));
            }
        }
        let mut out: Vec<PathBuf> = vec![Path::new("/usr/lib/python3/dist-packages").into()];
        for prefix in prefixes {
            let Ok(items) = std::fs::read_dir(&prefix) else {
                continue;
            };
            for item in items.flatten() {
                if item.file_name().to_string_lossy().starts_with("python3") {
                    out.push(item.path().join("site-packages"));
                    out.push(item.path().join("dist-packages"));
                }
            }
        }
        out.retain(|d| d.is_dir());
        out
    })
}

/// Whether `module`'s top-level package is installed where the check's
/// interpreter finds it: the host's package directories, or the
/// workspace's environment the check runs (`.venv/bin/python -m x` looks
/// in `.venv/lib/python3.N/site-packages`, through `present`). Such a
/// module is a tool the project installed, not a judge the task writes.
#[allow(clippy::disallowed_methods)] // host directories, never a project's
fn installed(module: &str, interpreter: &str, present: &dyn Fn(&str) -> bool) -> bool {
    let top = module.split('.').next().unwrap_or_default();
    if top.is_empty() || !top.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return false;
    }
    let forms = [
        format!("{top}/__init__.py"),
        format!("{top}.py"),
        format!("{top}/__main__.py"),
    ];
    if let Some(venv) = interpreter
        .trim_start_matches("./")
        .rsplit_once("/bin/")
        .map(|(v, _)| v)
        .filter(|v| workspace_path(v).is_some())
    {
        return (6..=20).any(|minor| {
            forms
                .iter()
                .any(|f| present(&format!("{venv}/lib/python3.{minor}/site-packages/{f}")))
        });
    }
    host_site_dirs().iter().any(|d| {
        forms.iter().any(|f| d.join(f).is_file())
            || std::fs::read_dir(d).is_ok_and(|items| {
                items.flatten().any(|i| {
                    let n = i.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with(&format!("{top}.")) && n.ends_with(".so")
                })
            })
    })
}

/// One file that decides a check's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judge {
    /// The workspace paths that could be it (a module is `NAME.py` or a
    /// package); it is "absent" when none is there.
    pub paths: Vec<String>,
    /// How the check uses it, for the reason.
    pub how: String,
    /// When it is a Python module (`-m NAME`, an import): the module and
    /// the interpreter the check runs it with, so an installed one is
    /// told from one the task would write.
    pub module: Option<(String, String)>,
}

/// A relative workspace path as a check names it, or `None` for what is
/// not one (absolute, `..`, a variable, a stream): the check-integrity
/// set's reading, so both name the same files.
pub(crate) use loop_verifier::integrity::workspace_operand as workspace_path;

/// Whether inline code judges for itself (an assertion, a comparison, an
/// exit status it computes), rather than leaving that to what it loads.
fn asserts_itself(code: &str) -> bool {
    [
        "assert", "==", "!=", "raise", "throw", "exit(", "<", ">", " in ", " is ", "if ",
    ]
    .iter()
    .any(|w| code.contains(w))
}

/// Quoted string arguments of `name(` calls in `code` (`open('x')`).
fn call_args<'c>(code: &'c str, name: &str) -> Vec<&'c str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(name) {
        rest = &rest[i + name.len()..];
        let t = rest.trim_start();
        if let Some(q) = t.chars().next().filter(|c| *c == '\'' || *c == '"')
            && let Some(end) = t[1..].find(q)
        {
            out.push(&t[1..1 + end]);
        }
    }
    out
}

/// The modules Python code imports (`import a, b.c`, `from a import x`).
fn python_imports(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for stmt in code.split([';', '\n']) {
        let s = stmt.trim();
        if let Some(names) = s.strip_prefix("import ") {
            for n in names.split(',') {
                let n = n.split_whitespace().next().unwrap_or_default();
                out.push(n.to_string());
            }
        } else if let Some(r) = s.strip_prefix("from ")
            && let Some(n) = r.split_whitespace().next()
            && !n.starts_with('.')
        {
            out.push(n.to_string());
        }
    }
    out.retain(|n| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    });
    out
}

/// The files inline Python code reads as data when that is all it does
/// with the workspace: it imports only the standard library and tools,
/// and opens files by literal name (`json.load(open('result.json'))`).
/// `None` when it imports the project's code (then the code is what is
/// judged) or reads nothing.
pub(crate) fn python_reads_only(code: &str) -> Option<Vec<String>> {
    // Code that runs something (a program, a module, a shell) is not
    // only reading, whatever it imports.
    let runs = [
        "subprocess",
        "os.system",
        "popen",
        "runpy",
        "exec(",
        "eval(",
        "__import__",
        "importlib",
        "execv",
        "spawn",
    ];
    if python_imports(code).iter().any(|m| !not_the_projects(m))
        || runs.iter().any(|r| code.contains(r))
    {
        return None;
    }
    let files: Vec<String> = ["open(", "Path(", "exists(", "isfile(", "isdir(", "getsize("]
        .iter()
        .flat_map(|f| call_args(code, f))
        .filter_map(workspace_path)
        .collect();
    (!files.is_empty()).then_some(files)
}

/// The same for inline Node code: it requires only `fs`/`path` and reads
/// files by literal name (`readFileSync`, `existsSync`, `statSync`).
pub(crate) fn node_reads_only(code: &str) -> Option<Vec<String>> {
    let loads_other = call_args(code, "require(")
        .into_iter()
        .chain(call_args(code, "import("))
        .any(|m| {
            !matches!(
                m,
                "fs" | "node:fs" | "path" | "node:path" | "assert" | "node:assert"
            )
        });
    let runs = [
        "child_process",
        "spawn",
        "exec",
        "eval(",
        "Function(",
        "vm.",
    ];
    if loads_other || runs.iter().any(|r| code.contains(r)) {
        return None;
    }
    let files: Vec<String> = ["readFileSync(", "existsSync(", "statSync(", "readFile("]
        .iter()
        .flat_map(|f| call_args(code, f))
        .filter_map(workspace_path)
        .collect();
    (!files.is_empty()).then_some(files)
}

/// Where a Python module's code would be in the workspace.
fn module_paths(name: &str) -> Vec<String> {
    let base = name.replace('.', "/");
    vec![
        format!("{base}.py"),
        format!("{base}/__init__.py"),
        format!("{base}/__main__.py"),
    ]
}

/// Whether a command judges for itself what came before it (a search, a
/// comparison, a test, inline code with its own assertions), so that a
/// program run earlier in the line is what is judged, not the judge.
fn asserting(words: &[&str]) -> bool {
    let Some(first) = words.first() else {
        return false;
    };
    let name = first.rsplit('/').next().unwrap_or(first);
    match name {
        "grep" | "egrep" | "fgrep" | "rg" | "diff" | "cmp" | "test" | "[" | "[[" | "jq" => true,
        n if n == "python" || n.starts_with("python3") || n == "node" => words
            .windows(2)
            .any(|w| matches!(w[0], "-c" | "-e" | "--eval") && asserts_itself(w[1])),
        _ => false,
    }
}

/// The judges found in a check's commands so far.
#[derive(Default)]
struct Found {
    /// (judge, index of the command it came from)
    found: Vec<(Judge, usize)>,
    /// Which Python module a judge is, and with which interpreter.
    modules: Vec<(Vec<String>, (String, String))>,
}

impl Found {
    /// A judge of `paths` (once), said as `how`, from command `at`.
    fn push(&mut self, paths: Vec<String>, how: String, at: usize) {
        if !paths.is_empty() && !self.found.iter().any(|(j, _)| j.paths == paths) {
            self.found.push((
                Judge {
                    paths,
                    how,
                    module: None,
                },
                at,
            ));
        }
    }

    /// The judges of inline code (`python3 -c`, `node -e`) run by `first`
    /// in command `at`: a file it reads and runs as code, and (when the
    /// exit status is the verdict and the code asserts nothing itself) the
    /// project's modules it only loads, which then hold the assertions.
    fn inline(&mut self, code: &str, (python, first): (bool, &str), by_status: bool, at: usize) {
        // A file read and run as code is the judge, whatever else
        // (a file only read as data is what is judged).
        let runs_text = ["exec(", "eval(", "compile(", "Function("]
            .iter()
            .any(|w| code.contains(w));
        let read: Vec<&str> = if runs_text {
            call_args(code, "open(")
                .into_iter()
                .chain(call_args(code, "readFileSync("))
                .collect()
        } else {
            Vec::new()
        };
        for f in read.into_iter().chain(call_args(code, "run_path(")) {
            if let Some(p) = workspace_path(f) {
                self.push(
                    vec![p],
                    "the file the inline code reads and runs".into(),
                    at,
                );
            }
        }
        if by_status && !asserts_itself(code) {
            if python {
                for m in python_imports(code) {
                    if !not_the_projects(&m) {
                        self.modules
                            .push((module_paths(&m), (m.clone(), first.to_string())));
                        self.push(
                            module_paths(&m),
                            format!(
                                "the module `{m}` the inline code only imports, holding its assertions"
                            ),
                            at,
                        );
                    }
                }
            } else {
                for r in call_args(code, "require(")
                    .into_iter()
                    .chain(call_args(code, "import("))
                {
                    if r.starts_with('.')
                        && let Some(p) = workspace_path(r)
                    {
                        let mut paths = vec![p.clone()];
                        if !p.ends_with(".js") && !p.ends_with(".mjs") && !p.ends_with(".cjs") {
                            paths.push(format!("{p}.js"));
                            paths.push(format!("{p}/index.js"));
                        }
                        self.push(
                            paths,
                            format!(
                                "the module `{r}` the inline code only loads, holding its assertions"
                            ),
                            at,
                        );
                    }
                }
            }
        }
    }
}

/// The files that decide `run`'s verdict (see the module's text). A
/// program run earlier in the line and followed by a command that judges
/// for itself (`python3 todo.py add x && python3 -c "assert ..."`) is the
/// work being judged, not the judge.
pub fn judges(run: &RunCheck) -> Vec<Judge> {
    let mut f = Found::default();
    // With an expected output, the check's own text judges what a script
    // prints; without, the script's exit status is the verdict.
    let by_status =
        run.expect_stdout.is_none() && run.expect_stderr.is_none() && run.stdout_matches.is_none();
    let parsed = loop_tools::shell::parse(&run.command);
    let commands: Vec<Vec<&str>> = parsed
        .commands
        .iter()
        .map(|c| c.iter().map(|w| w.as_deref().unwrap_or("")).collect())
        .collect();
    let bare = |p: &str| p.trim_start_matches("./").to_string();
    if by_status {
        for (program, who) in parsed.programs() {
            if let Some(p) = workspace_path(program) {
                let at = commands
                    .iter()
                    .position(|c| c.iter().any(|w| bare(w) == p))
                    .unwrap_or(usize::MAX);
                f.push(vec![p], format!("the script `{who}` runs"), at);
            }
        }
    }
    for (at, words) in commands.iter().enumerate() {
        let Some(first) = words.first() else { continue };
        let name = first.rsplit('/').next().unwrap_or(first);
        let python = name == "python" || name.starts_with("python3");
        let node = name == "node";
        // (An environment's interpreter or tool, `.venv/bin/python`, is
        // what runs the judge, not one.)
        if first.contains('/')
            && !first.contains("/bin/")
            && !python
            && !node
            && by_status
            && let Some(p) = workspace_path(first)
        {
            f.push(vec![p], "the program the check runs".into(), at);
        }
        // The Makefile `make` reads decides what its target does (the
        // check-integrity set keeps it as it is: one the task would write
        // could never be written, and the task never verify).
        if by_status && let Some(paths) = makefiles_read(name, words) {
            f.push(paths, format!("the Makefile `{name}` reads"), at);
            continue;
        }
        if matches!(name, "diff" | "cmp") {
            // One compared file may be the task's output; all of them the
            // task's is no comparison.
            let files: Vec<String> = words[1..]
                .iter()
                .filter(|w| !w.starts_with('-'))
                .filter_map(|w| workspace_path(w))
                .collect();
            if files.len() >= 2 {
                f.push(files, format!("every file `{name}` compares"), at);
            }
            continue;
        }
        if !(python || node) {
            continue;
        }
        let mut i = 1;
        while i < words.len() {
            let w = words[i];
            if python && w == "-m" {
                if let Some(m) = words.get(i + 1)
                    && !not_the_projects(m)
                    && by_status
                {
                    f.modules
                        .push((module_paths(m), (m.to_string(), first.to_string())));
                    f.push(
                        module_paths(m),
                        format!("the module `python3 -m {m}` runs"),
                        at,
                    );
                }
                break;
            }
            let inline = if python {
                w == "-c"
            } else {
                matches!(w, "-e" | "--eval" | "-p" | "--print")
            };
            if inline {
                let code = words.get(i + 1).copied().unwrap_or_default();
                f.inline(code, (python, first), by_status, at);
                break;
            }
            if !w.starts_with('-') {
                break;
            }
            i += 1;
        }
    }
    let Found { mut found, modules } = f;
    for (j, _) in &mut found {
        j.module = modules
            .iter()
            .find(|(paths, _)| *paths == j.paths)
            .map(|(_, m)| m.clone());
    }
    found
        .into_iter()
        .filter(|(j, at)| {
            // Compared files and code read as code judge wherever they are.
            j.how.starts_with("every file")
                || j.how.starts_with("the file the inline")
                || !commands
                    .iter()
                    .skip(at.saturating_add(1))
                    .any(|c| asserting(c))
        })
        .map(|(j, _)| j)
        .collect()
}

/// The Makefiles `make` (`name`, run with `words`) reads here: the one
/// `-f` names, else its default names; none for another command or one
/// run elsewhere (`-C`).
fn makefiles_read(name: &str, words: &[&str]) -> Option<Vec<String>> {
    if !matches!(name, "make" | "gmake") || words.contains(&"-C") {
        return None;
    }
    let named = words
        .iter()
        .position(|w| *w == "-f" || *w == "--file")
        .and_then(|i| words.get(i + 1))
        .and_then(|f| workspace_path(f));
    Some(match named {
        Some(f) => vec![f],
        None => ["Makefile", "makefile", "GNUmakefile"]
            .map(String::from)
            .to_vec(),
    })
}

/// Files named like scripts an interpreter runs (not a program a build
/// makes, which a Makefile's own target is).
fn script_named(path: &str) -> bool {
    [
        ".py", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl",
    ]
    .iter()
    .any(|e| path.ends_with(e))
}

/// [`judges`], and the judges of what the check runs beyond its own line
/// when `root` is given: the recipes of the Makefile targets `make check`
/// asks for, the package.json scripts `npm test` runs (`python3
/// verify.py`, `node check.js`). There only scripts and modules count: a
/// program a recipe runs is usually what the Makefile builds.
pub fn judges_followed(run: &RunCheck, root: Option<&std::path::Path>) -> Vec<Judge> {
    let mut out = judges(run);
    let Some(root) = root else {
        return out;
    };
    let by = loop_tools::shell::parse(&run.command)
        .commands
        .first()
        .and_then(|c| c.first().cloned().flatten())
        .unwrap_or_default();
    for line in loop_verifier::integrity::recipe_lines(&run.command, root) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut inner = run.clone();
        inner.command = line.to_string();
        inner.expect_stdout = None;
        inner.expect_stderr = None;
        inner.stdout_matches = None;
        for mut j in judges(&inner) {
            if (j.module.is_some() || j.paths.iter().all(|p| script_named(p)))
                && !out.iter().any(|o| o.paths == j.paths)
            {
                j.how = format!("{}, in what `{by}` runs", j.how);
                out.push(j);
            }
        }
    }
    out
}

/// The change criteria of `contract` whose verdict a file absent as the
/// task starts decides (the task would write its own judge), skipping the
/// paths `exempt` says may be written (new test files the contract asks
/// for, which are judged by their own design; `judge_may_change`). Each
/// reason names the criterion, the check and the file.
pub fn self_judged(
    contract: &Contract,
    present: &dyn Fn(&str) -> bool,
    exempt: &dyn Fn(&str) -> bool,
    root: Option<&std::path::Path>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in contract.criteria.iter().filter(|c| !c.guard) {
        for (i, k) in c.checks.iter().enumerate() {
            let Check::Run(r) = k else { continue };
            for j in judges_followed(r, root) {
                if j.paths.iter().any(|p| present(p) || exempt(p))
                    || j.module
                        .as_ref()
                        .is_some_and(|(m, python)| installed(m, python, present))
                {
                    continue;
                }
                let shown = j
                    .paths
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(if j.how.starts_with("every file") {
                        " and "
                    } else {
                        " or "
                    });
                out.push((
                    j.paths[0].clone(),
                    format!(
                        "criterion `{}`, check {} (`{}`) is decided by {shown} ({}), which the workspace does not have: the task would write its own judge",
                        c.id,
                        i + 1,
                        r.command,
                        j.how
                    ),
                ));
            }
        }
    }
    out
}

/// Whether a file's name says it judges (a verifier, a checker, a test,
/// an expected answer) rather than being the work judged (`app.py`).
fn named_like_a_judge(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_lowercase();
    [
        "verif", "check", "test", "judge", "assert", "validat", "spec", "expect", "golden",
        "snapshot", "fixture", "want", "oracle", "grade",
    ]
    .iter()
    .any(|w| name.contains(w))
}

/// The judges the project already has, named as judges (`verify.py`,
/// `check.sh`, `expected.txt`), as check-integrity rules: the task may not
/// rewrite the file that decides its own verdict. (Scripts run as
/// programs and test files are in the set already; a file named like the
/// work, `app.py`, is the work. `judge_may_change` lifts a path.)
pub fn judge_rules(
    contract: &Contract,
    present: &dyn Fn(&str) -> bool,
    root: Option<&std::path::Path>,
) -> Vec<loop_protocol::IntegrityRule> {
    let mut out: Vec<loop_protocol::IntegrityRule> = Vec::new();
    let mut n = 0;
    for c in &contract.criteria {
        for k in &c.checks {
            n += 1;
            let Check::Run(r) = k else { continue };
            for j in judges_followed(r, root) {
                for p in j
                    .paths
                    .iter()
                    .filter(|p| present(p) && named_like_a_judge(p))
                {
                    if contract.judge_may_change.iter().any(|m| m == p)
                        || out.iter().any(|o| &o.glob == p)
                    {
                        continue;
                    }
                    out.push(loop_protocol::IntegrityRule {
                        glob: p.clone(),
                        why: format!("the judge of check {n}: {}", j.how),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cmd: &str) -> RunCheck {
        let yaml = format!(
            "instruction: x\ncriteria:\n  - id: c\n    checks:\n      - run: {}\n",
            serde_json::to_string(cmd).unwrap_or_default()
        );
        match Contract::from_yaml(&yaml, "t").map(|c| c.criteria[0].checks[0].clone()) {
            Ok(Check::Run(r)) => r,
            other => panic!("{other:?}"),
        }
    }

    fn judged(cmd: &str) -> Vec<Vec<String>> {
        judges(&run(cmd)).into_iter().map(|j| j.paths).collect()
    }

    #[test]
    fn the_files_that_decide_a_check_are_found_in_every_form() {
        let one = |p: &str| vec![vec![p.to_string()]];
        let module = |m: &str| vec![module_paths(m)];
        for (cmd, want) in [
            ("python3 verify.py", one("verify.py")),
            (". ./verify.sh", one("verify.sh")),
            ("sh verify.sh", one("verify.sh")),
            ("./verify.sh", one("verify.sh")),
            ("python3 -m own_module", module("own_module")),
            ("python3 -c 'import own'", module("own")),
            ("python3 -c 'from own import go'", module("own")),
            (
                "python3 -c \"exec(open('verify.py').read())\"",
                one("verify.py"),
            ),
            (
                "node -e \"require('./check.js')\"",
                vec![vec!["check.js".to_string()]],
            ),
            (
                "cmp a.txt b.txt",
                vec![vec!["a.txt".into(), "b.txt".into()]],
            ),
        ] {
            assert_eq!(judged(cmd), want, "{cmd}");
        }
        // What is judged, not a judge: a runner, inline assertions, a
        // printed value the check compares, an absolute program.
        for cmd in [
            "python3 -m pytest -q",
            "python3 -m unittest discover -s tests",
            "python3 -c 'import slug; assert slug.slug(\"a b\") == \"a-b\"'",
            "node -e \"const m = require('./m'); if (m.f() !== 2) process.exit(1)\"",
            "/tmp/test_sum",
            "grep -q hello hello.txt",
            "diff expected.txt -",
            "python3 -c \"import json; assert json.load(open('out.json'))['x'] == 1\"",
            // The work run first, then judged by the line's own assertion.
            "python3 todo.py add x && python3 -c \"import json; assert json.load(open('t.json'))\"",
            "python3 app.py > out.txt && grep -q hello out.txt",
            // The standard library is nobody's judge.
            ".venv/bin/python -c 'import sys; print(sys.base_prefix)'",
            "python3 -c \"import urllib.request as u; u.urlopen('http://h/')\"",
            "python3 -m json.tool data.json",
        ] {
            assert!(judged(cmd).is_empty(), "{cmd}: {:?}", judged(cmd));
        }
        let mut printed = run("python3 app.py");
        printed.expect_stdout = Some("HELLO".into());
        assert!(judges(&printed).is_empty());
    }

    /// A module the project installed (the host's packages, or the
    /// check's own environment in the workspace) is a tool the check
    /// runs, not a judge the task writes; a module nobody has is.
    #[test]
    #[allow(clippy::disallowed_methods)] // the host's package directory
    fn an_installed_module_is_a_tool_and_a_missing_one_a_judge() {
        let contract = |cmd: &str| {
            Contract::from_yaml(
                &format!(
                    "instruction: x\ncriteria:\n  - id: c\n    checks:\n      - run: {}\n",
                    serde_json::to_string(cmd).unwrap_or_default()
                ),
                "t",
            )
            .unwrap()
        };
        let none = |_: &str| false;
        let judged = |cmd: &str, present: &dyn Fn(&str) -> bool| {
            self_judged(&contract(cmd), present, &none, None)
                .into_iter()
                .map(|(p, _)| p)
                .collect::<Vec<_>>()
        };
        // Debian's python3-yaml (scripts/test.sh installs it).
        assert!(
            host_site_dirs()
                .iter()
                .any(|d| d.join("yaml/__init__.py").is_file()),
            "python3-yaml is not installed: scripts/test.sh installs it"
        );
        assert!(judged("python3 -m yaml", &none).is_empty());
        assert!(judged("python3 -c 'import yaml'", &none).is_empty());
        assert_eq!(judged("python3 -m own_judge", &none), ["own_judge.py"]);
        // The check's environment in the workspace.
        let venv = |p: &str| p == ".venv/lib/python3.11/site-packages/mkdocs/__init__.py";
        assert!(judged(".venv/bin/python -m mkdocs build --strict", &venv).is_empty());
        assert_eq!(
            judged(".venv/bin/python -m own_judge", &venv),
            ["own_judge.py"]
        );
        // A name that is no module name is never looked up.
        assert!(!installed("../etc", "python3", &none));
    }

    /// Behind `make` and `npm`: a judge script the project has, run by the
    /// target the check asks for, joins the integrity set; one it lacks is
    /// a judge the task would write; a program the Makefile builds, and a
    /// script another target runs, are neither.
    #[test]
    #[allow(clippy::disallowed_methods)] // the test's own fixture
    fn judges_behind_make_and_npm_are_the_targets_own() {
        let dir = std::env::temp_dir().join(format!("loop-judges-make-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("Makefile"),
            "all: prog\n\nprog: prog.c\n\t$(CC) -o prog prog.c\n\ntest: prog\n\t./prog\n\tpython3 run_tests.py\n\ncheck:\n\tpython3 verify_new.py\n\nother:\n\tpython3 missing_other.py\n",
        )
        .unwrap();
        std::fs::write(dir.join("run_tests.py"), "").unwrap();
        std::fs::write(
            dir.join("package.json"),
            r#"{"scripts": {"test": "node check_it.js", "start": "node dist/index.js"}}"#,
        )
        .unwrap();
        let contract = |cmd: &str| {
            Contract::from_yaml(
                &format!(
                    "instruction: x\ncriteria:\n  - id: c\n    checks:\n      - run: {cmd:?}\n"
                ),
                "t",
            )
            .unwrap()
        };
        let present = |p: &str| dir.join(p).exists();
        let none = |_: &str| false;
        let rules = judge_rules(&contract("make test"), &present, Some(&dir));
        assert!(rules.iter().any(|r| r.glob == "run_tests.py"), "{rules:?}");
        let judged = |cmd: &str| {
            self_judged(&contract(cmd), &present, &none, Some(&dir))
                .into_iter()
                .map(|(p, _)| p)
                .collect::<Vec<_>>()
        };
        assert!(judged("make test").is_empty(), "{:?}", judged("make test"));
        assert_eq!(judged("make check"), ["verify_new.py"]);
        assert_eq!(judged("npm test"), ["check_it.js"]);
        // `start`'s build output is not `npm test`'s judge.
        assert!(!judged("npm test").iter().any(|p| p.contains("dist")));
    }

    /// A check that runs `make` where the project has no Makefile would be
    /// judged by the one the task writes (which the check-integrity set
    /// then refuses: the task could never verify): said at once. With a
    /// Makefile, `-f` naming one the project has, or `-C` elsewhere, it is
    /// not.
    #[test]
    fn make_without_a_makefile_is_a_judge_the_task_would_write() {
        let contract = |cmd: &str| {
            Contract::from_yaml(
                &format!(
                    "instruction: x\ncriteria:\n  - id: c\n    checks:\n      - run: {cmd:?}\n"
                ),
                "t",
            )
            .unwrap()
        };
        let none = |_: &str| false;
        let judged = |cmd: &str, present: &dyn Fn(&str) -> bool| {
            self_judged(&contract(cmd), present, &none, None)
                .into_iter()
                .collect::<Vec<_>>()
        };
        let empty = |_: &str| false;
        let found = judged("make test", &empty);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "Makefile");
        assert!(
            found[0].1.contains("`Makefile` or `makefile` or `GNUmakefile` (the Makefile `make` reads), which the workspace does not have"),
            "{}",
            found[0].1
        );
        assert!(judged("make test", &|p: &str| p == "Makefile").is_empty());
        assert!(judged("make -f ci.mk test", &|p: &str| p == "ci.mk").is_empty());
        assert_eq!(judged("make -f ci.mk test", &empty)[0].0, "ci.mk");
        assert!(judged("make -C build test", &empty).is_empty());
        assert!(judged("make && python3 -c 'assert 1'", &empty).is_empty());
    }
}
