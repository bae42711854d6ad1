//! The check-integrity set: the files that define what a contract's
//! checks mean.
//!
//! A check runs a command in the delivered workspace; the model cannot
//! change the command (it is in the locked contract), but it can change
//! what the command does: a `conftest.py` that marks every test passed, a
//! `pytest.ini` whose `addopts` deselects the failing tests, a
//! `package.json` whose `scripts.test` is `exit 0`, a new test module
//! whose import-time code patches the function under test, a `Makefile`
//! target, a `.cargo/config.toml` runner, a `go.mod` `replace`. For each
//! stack a task's checks use (seen in the check commands, or in the
//! workspace's own markers) [`derive`] lists those files as globs, with
//! the reason each is there. The runtime protects them like the
//! contract's own `protected` globs (refused at write time, rejected at
//! verification), except paths the contract lifts with
//! `allow_check_changes`.

use loop_protocol::{Check, Contract, IntegrityRule};
use std::collections::BTreeSet;
use std::path::Path;

/// Files of one stack that decide what its test commands do.
struct Stack {
    name: &'static str,
    /// Words in a check command that mean the stack is used.
    commands: &'static [&'static str],
    /// Files at the workspace root that mean the stack is used.
    markers: &'static [&'static str],
    rules: &'static [(&'static str, &'static str)],
}

const STACKS: &[Stack] = &[
    Stack {
        name: "python",
        commands: &[
            "python", "python3", "pytest", "py.test", "tox", "nox", "unittest", "coverage",
        ],
        markers: &[
            "pyproject.toml",
            "setup.py",
            "setup.cfg",
            "pytest.ini",
            "tox.ini",
            "conftest.py",
            "requirements.txt",
        ],
        rules: &[
            ("**/conftest.py", "pytest hook files"),
            ("pytest.ini", "pytest configuration"),
            (".pytest.ini", "pytest configuration"),
            ("pyproject.toml", "pytest and build configuration"),
            ("setup.cfg", "pytest and build configuration"),
            ("tox.ini", "tox and pytest configuration"),
            ("setup.py", "build script"),
            ("noxfile.py", "nox sessions"),
            ("**/sitecustomize.py", "interpreter start-up hooks"),
            ("**/usercustomize.py", "interpreter start-up hooks"),
            ("**/*.pth", "interpreter start-up hooks"),
            (
                "**/*.dist-info/**",
                "package metadata whose entry points runners load on their own (pytest11 plugins)",
            ),
            (
                "**/*.egg-info/**",
                "package metadata whose entry points runners load on their own (pytest11 plugins)",
            ),
            ("**/*.egg-link", "editable installs"),
            ("**/__editable__*", "editable-install finders"),
            ("pytest.toml", "pytest configuration"),
            (".pytest.toml", "pytest configuration"),
            ("**/test*.py", "test modules the runners collect"),
            ("**/*_test.py", "test modules the runners collect"),
            ("**/tests/**", "test directories, their data and helpers"),
            ("**/test/**", "test directories, their data and helpers"),
            ("**/__pycache__/**", "bytecode caches"),
            ("**/*.pyc", "bytecode caches"),
        ],
    },
    Stack {
        name: "node",
        commands: &[
            "node", "npm", "npx", "yarn", "pnpm", "jest", "vitest", "mocha", "tsx", "ts-node",
        ],
        markers: &["package.json"],
        rules: &[
            ("package.json", "npm scripts and test-runner configuration"),
            ("**/jest.config.*", "Jest configuration"),
            ("**/jest.setup.*", "Jest set-up files"),
            ("**/setupTests.*", "test set-up files"),
            ("**/vitest.config.*", "Vitest configuration"),
            ("**/vitest.workspace.*", "Vitest configuration"),
            ("**/vite.config.*", "Vite and Vitest configuration"),
            ("**/.mocharc*", "Mocha configuration"),
            ("**/babel.config.*", "transpiler configuration"),
            ("**/.babelrc*", "transpiler configuration"),
            ("**/tsconfig*.json", "TypeScript configuration"),
            (".npmrc", "npm configuration"),
            (".yarnrc", "yarn configuration"),
            (
                ".yarnrc.yml",
                "yarn configuration (yarnPath runs another file)",
            ),
            (".pnpmfile.cjs", "pnpm hooks"),
            ("bunfig.toml", "bun configuration (test preload)"),
            ("**/tests/**", "test directories, their data and helpers"),
            ("**/test/**", "test directories, their data and helpers"),
            ("**/__mocks__/**", "test mocks"),
            ("**/__tests__/**", "test files"),
            ("**/*.test.*", "test files"),
            ("**/*.spec.*", "test files"),
            (
                "node_modules/**",
                "installed packages and their executables",
            ),
            (
                "**/node_modules/**",
                "installed packages nearer the code than the root's",
            ),
            ("**/*-test.*", "test files node --test runs"),
            ("**/*_test.*", "test files node --test runs"),
            ("**/test-*.*", "test files node --test runs"),
            ("**/test.js", "test files node --test runs"),
            ("**/test.mjs", "test files node --test runs"),
            ("**/test.cjs", "test files node --test runs"),
        ],
    },
    Stack {
        name: "rust",
        commands: &["cargo", "rustc"],
        markers: &["Cargo.toml"],
        rules: &[
            ("**/Cargo.toml", "Cargo manifests"),
            (".cargo/**", "Cargo configuration (runners, aliases)"),
            (
                "**/.cargo/config*",
                "Cargo configuration where a check runs from (runners, rustflags)",
            ),
            ("**/build.rs", "build scripts"),
            ("tests/**", "integration tests"),
            ("**/tests/**", "integration tests of workspace members"),
        ],
    },
    Stack {
        name: "go",
        commands: &["go"],
        markers: &["go.mod"],
        rules: &[
            ("go.mod", "module requirements and replace directives"),
            (
                "**/go.mod",
                "nested modules' requirements and replace directives",
            ),
            ("go.sum", "module checksums"),
            ("go.work", "workspace configuration"),
            ("go.work.sum", "workspace checksums"),
            ("**/*_test.go", "test files"),
            ("**/testdata/**", "test data"),
            ("vendor/**", "vendored modules"),
        ],
    },
    Stack {
        name: "c",
        // (`CC` and `CXX` are Makefiles' `$(CC)`.)
        commands: &[
            "ctest", "cmake", "meson", "ninja", "cc", "gcc", "clang", "c++", "g++", "clang++",
            "CC", "CXX",
        ],
        markers: &["CMakeLists.txt", "meson.build"],
        rules: &[
            (
                "**/CMakeLists.txt",
                "CMake builds and their tests (add_test)",
            ),
            ("**/*.cmake", "CMake modules and CTest files"),
            ("**/CTestTestfile.cmake", "CTest test lists"),
            ("**/CTestCustom.cmake", "CTest configuration"),
            ("CTestConfig.cmake", "CTest configuration"),
            ("CMakePresets.json", "CMake presets"),
            ("CMakeUserPresets.json", "CMake presets"),
            ("**/meson.build", "Meson builds and their tests"),
            ("meson_options.txt", "Meson options"),
            ("meson.options", "Meson options"),
            ("**/tests/**", "test sources and their data"),
            ("**/test/**", "test sources and their data"),
            ("**/test_*.c", "test sources"),
            ("**/*_test.c", "test sources"),
            ("**/test_*.cpp", "test sources"),
            ("**/*_test.cpp", "test sources"),
            ("**/*_test.cc", "test sources"),
        ],
    },
    Stack {
        name: "just",
        commands: &["just"],
        markers: &[],
        rules: &[
            ("justfile", "just recipes the checks call"),
            ("Justfile", "just recipes the checks call"),
            (".justfile", "just recipes the checks call"),
        ],
    },
    Stack {
        name: "gradle",
        commands: &["gradle", "gradlew"],
        markers: &[
            "build.gradle",
            "build.gradle.kts",
            "settings.gradle",
            "settings.gradle.kts",
        ],
        rules: &[
            ("**/build.gradle*", "Gradle builds"),
            ("**/settings.gradle*", "Gradle settings"),
            ("gradle.properties", "Gradle properties"),
            ("gradle/**", "Gradle wrapper and version catalogs"),
            ("gradlew", "Gradle wrapper"),
            ("**/src/test/**", "test sources"),
        ],
    },
    Stack {
        name: "maven",
        commands: &["mvn", "mvnw"],
        markers: &["pom.xml"],
        rules: &[
            ("**/pom.xml", "Maven builds"),
            (".mvn/**", "Maven configuration and wrapper"),
            ("mvnw", "Maven wrapper"),
            ("**/src/test/**", "test sources"),
        ],
    },
    Stack {
        name: "make",
        commands: &["make", "gmake"],
        markers: &[],
        rules: &[
            ("Makefile", "make targets the checks call"),
            ("makefile", "make targets the checks call"),
            ("GNUmakefile", "make targets the checks call"),
            ("**/*.mk", "make includes"),
        ],
    },
];

/// What picks the program any command runs, read by a version manager's
/// shim on `PATH` from the directory a check runs in and above (pyenv,
/// rbenv, asdf, mise, nvm, rustup's proxies, the dotnet host): a
/// `.python-version` naming an interpreter that ignores
/// `PYTHONSAFEPATH`, or a toolchain path, decides what every check does,
/// whatever its stack.
const PROGRAM_SELECTION: &[(&str, &str)] = &[
    ("**/.python-version", "the Python pyenv's shims run"),
    ("**/.ruby-version", "the Ruby rbenv's shims run"),
    ("**/.node-version", "the Node a version manager's shims run"),
    ("**/.nvmrc", "the Node nvm selects"),
    ("**/.tool-versions", "the tools asdf's shims run"),
    ("**/.go-version", "the Go goenv's shims run"),
    ("**/.java-version", "the Java jenv's shims run"),
    ("**/.perl-version", "the Perl plenv's shims run"),
    ("**/.terraform-version", "the Terraform tfenv runs"),
    ("**/.sdkmanrc", "the SDKs sdkman selects"),
    (
        "**/mise.*.toml",
        "the tools, environment and hooks mise applies",
    ),
    (
        "**/.mise.*.toml",
        "the tools, environment and hooks mise applies",
    ),
    (
        "**/mise.toml",
        "the tools, environment and hooks mise applies",
    ),
    (
        "**/.mise.toml",
        "the tools, environment and hooks mise applies",
    ),
    (
        "**/mise.local.toml",
        "the tools, environment and hooks mise applies",
    ),
    (
        "**/.mise.local.toml",
        "the tools, environment and hooks mise applies",
    ),
    ("**/.mise/**", "mise's configuration and tasks"),
    ("**/.config/mise/**", "mise's configuration and tasks"),
    ("**/rust-toolchain", "the toolchain rustup's proxies run"),
    (
        "**/rust-toolchain.toml",
        "the toolchain rustup's proxies run",
    ),
    ("**/global.json", "the .NET SDK the dotnet host picks"),
];

/// Test-named files and directories: the set of a check whose stack the
/// runtime cannot classify (a script of its own, a runner it does not
/// know), so what decides such a check is not left open.
const CONSERVATIVE: &[(&str, &str)] = &[
    ("test*/**", "test directories"),
    ("**/tests/**", "test directories"),
    ("**/test/**", "test directories"),
    ("**/spec/**", "spec directories"),
    ("**/*_test.*", "test-named files"),
    ("**/test_*.*", "test-named files"),
    ("**/*.spec.*", "spec-named files"),
    ("**/*.test.*", "test-named files"),
];

/// Plugin modules a check's pytest is told to load (`-p NAME`,
/// `PYTEST_PLUGINS=a,b`), as workspace globs: `NAME.py` and the package
/// `NAME/`. `no:NAME` turns a plugin off and names nothing.
fn named_plugins(command: &str) -> Vec<String> {
    let ws = words(command);
    let mut names: Vec<String> = Vec::new();
    for w in &ws {
        if let Some(list) = w.strip_prefix("PYTEST_PLUGINS=") {
            names.extend(list.split(',').map(str::to_string));
        }
    }
    // `-p` is pytest's only in a simple command that runs pytest
    // (`mkdir -p build` names no plugin).
    for simple in command.split(|c: char| ";|&\n".contains(c)) {
        let sw = words(simple);
        if !sw
            .iter()
            .any(|w| command_name(w) == "pytest" || w == "py.test")
        {
            continue;
        }
        let mut it = sw.iter();
        while let Some(w) = it.next() {
            if w == "-p" {
                if let Some(n) = it.next() {
                    names.push(n.clone());
                }
            } else if let Some(n) = w.strip_prefix("-p") {
                names.push(n.to_string());
            }
        }
    }
    // `PYTEST_PLUGINS=a,b` split by the shell-word splitter keeps the
    // commas; a bare `PYTEST_PLUGINS=` followed by a quoted list too.
    if let Some(i) = ws.iter().position(|w| w == "PYTEST_PLUGINS=")
        && let Some(list) = ws.get(i + 1)
    {
        names.extend(list.split(',').map(str::to_string));
    }
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.is_empty()
            || n.starts_with("no:")
            || !n
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        {
            continue;
        }
        let path = n.replace('.', "/");
        out.push(format!("{path}.py"));
        out.push(format!("{path}/**"));
        // The packages on the way are imported first.
        let mut acc = String::new();
        for part in n.split('.').take(n.split('.').count().saturating_sub(1)) {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            out.push(format!("{acc}/__init__.py"));
        }
    }
    out
}

/// The words of a shell command line, roughly: enough to see which tools
/// it names and which workspace paths it passes.
fn words(command: &str) -> Vec<String> {
    command
        .split(|c: char| c.is_whitespace() || ";|&()<>`$\"'".contains(c))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

fn command_name(word: &str) -> &str {
    let base = word.rsplit('/').next().unwrap_or(word);
    // python3.11 -> python3, pytest-3 -> pytest
    base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-')
        .trim_end_matches('3')
}

fn testish(rel: &str) -> bool {
    rel.split('/').any(|c| {
        let c = c.to_ascii_lowercase();
        c.contains("test") || c.contains("spec") || c.contains("check")
    })
}

/// Modules a Node process is told to load before the code it runs:
/// `--require`/`-r`, `--import`, `--loader`/`--experimental-loader`, a
/// custom `--test-reporter`, Mocha's `--file`, in a command line or in
/// `NODE_OPTIONS`. Only what names a file is taken (`./setup.js`,
/// `test/helper.cjs`); a package name (`ts-node/register`) resolves under
/// `node_modules/`, which the node stack's rules already cover.
fn node_preloads(line: &str) -> Vec<String> {
    const FLAGS: &[&str] = &[
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "--test-reporter",
        "--file",
    ];
    const RUNNERS: &[&str] = &["node", "nodejs", "mocha", "_mocha", "tsx", "ts-node"];
    let path = |v: &str| -> Option<String> {
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        let js = [".js", ".cjs", ".mjs", ".ts", ".cts", ".mts"]
            .iter()
            .any(|e| v.ends_with(e));
        workspace_operand(v).filter(|_| v.starts_with("./") || js)
    };
    let mut out = Vec::new();
    for simple in line.split(|c: char| ";|&\n".contains(c)) {
        let ws = words(simple);
        // `-r` is Node's only where Node (or a runner on it) is the
        // program, or inside NODE_OPTIONS (`cp -r a b` preloads nothing).
        let short = ws
            .iter()
            .any(|w| RUNNERS.contains(&command_name(w)) || w.starts_with("NODE_OPTIONS="));
        let mut it = ws.iter().peekable();
        while let Some(w) = it.next() {
            let w = w.strip_prefix("NODE_OPTIONS=").unwrap_or(w);
            if let Some((flag, value)) = w.split_once('=')
                && FLAGS.contains(&flag)
            {
                out.extend(path(value));
            } else if (FLAGS.contains(&w) || (short && w == "-r"))
                && let Some(v) = it.next()
            {
                out.extend(path(v));
            }
        }
    }
    out
}

/// The package.json scripts one shell line runs by name: `npm test`
/// (`t`, `tst`), `npm start`, `npm run X`, `yarn X`, `yarn run X`, `pnpm
/// X`, each with its `pre` and `post` scripts.
fn scripts_invoked(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for simple in line.split(|c: char| ";|&\n".contains(c)) {
        let ws = words(simple);
        let Some(k) = ws
            .iter()
            .position(|w| matches!(command_name(w), "npm" | "yarn" | "pnpm"))
        else {
            continue;
        };
        let manager = command_name(&ws[k]);
        let mut rest = ws[k + 1..].iter().filter(|w| !w.starts_with('-'));
        let name = match rest.next().map(String::as_str) {
            Some("test" | "t" | "tst") => Some("test".to_string()),
            Some("start") => Some("start".to_string()),
            Some("run" | "run-script" | "rum" | "urn") => rest.next().cloned(),
            // yarn and pnpm run a script by its bare name, unless the
            // word is one of their own commands.
            Some(other)
                if manager != "npm"
                    && !matches!(
                        other,
                        "install" | "add" | "remove" | "exec" | "dlx" | "why" | "list" | "ci"
                    ) =>
            {
                Some(other.to_string())
            }
            _ => None,
        };
        if let Some(n) = name {
            out.push(format!("pre{n}"));
            out.push(n.clone());
            out.push(format!("post{n}"));
        }
    }
    out
}

/// The workspace's `package.json` scripts by name (read through the door;
/// none when it is missing, a link, too large or not JSON).
fn package_scripts(root: &Path) -> std::collections::BTreeMap<String, String> {
    let Ok(Some(text)) = loop_workspace::door::read(root, "package.json", 1024 * 1024) else {
        return Default::default();
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return Default::default();
    };
    json.get("scripts")
        .and_then(|s| s.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The recipes `make ARGS` runs from a Makefile's text: the named targets
/// (else the first), their prerequisites' recipes, a few levels deep.
fn make_recipes(text: &str, targets: &[String]) -> Vec<String> {
    let mut rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(recipe) = line.strip_prefix('\t') {
            if let Some(last) = rules.last_mut() {
                last.2
                    .push(recipe.trim_start_matches(['@', '-', '+']).to_string());
            }
            continue;
        }
        let t = line.trim_end();
        if t.is_empty() || t.starts_with('#') || t.contains(":=") || t.contains("?=") {
            continue;
        }
        if let Some((names, prereqs)) = t.split_once(':')
            && !names.contains('=')
            && !prereqs.starts_with('=')
        {
            let prereqs = prereqs.split(';').next().unwrap_or_default();
            rules.push((
                names.split_whitespace().map(str::to_string).collect(),
                prereqs.split_whitespace().map(str::to_string).collect(),
                Vec::new(),
            ));
        }
    }
    let mut want: Vec<String> = if targets.is_empty() {
        rules
            .iter()
            .flat_map(|r| r.0.first())
            .find(|n| !n.starts_with('.'))
            .cloned()
            .into_iter()
            .collect()
    } else {
        targets.to_vec()
    };
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    while let Some(t) = want.pop() {
        if seen.contains(&t) || seen.len() >= MAX_SCRIPTS {
            continue;
        }
        seen.push(t.clone());
        for (names, prereqs, recipe) in &rules {
            if names.contains(&t) {
                want.extend(prereqs.iter().cloned());
                out.extend(recipe.iter().cloned());
            }
        }
    }
    out
}

/// The shell lines one check command runs beyond itself, by name: the
/// recipes of the Makefile targets `make` is asked for, the package.json
/// scripts a package manager runs (and those they run in turn), read
/// through the door. What a script file holds is not here: the script is
/// the program run.
pub fn recipe_lines(command: &str, root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let scripts = package_scripts(root);
    let mut queue = vec![command.to_string()];
    let mut done: Vec<String> = Vec::new();
    // Each line is followed once, and only so many: a recipe that runs
    // `make test` inside the `test` target, or scripts that run each
    // other, end here rather than loop.
    let mut visited: BTreeSet<String> = BTreeSet::new();
    while let Some(line) = queue.pop() {
        if done.len() >= MAX_SCRIPTS || visited.len() >= MAX_SCRIPTS * 8 {
            break;
        }
        if !visited.insert(line.clone()) {
            continue;
        }
        for name in scripts_invoked(&line) {
            if done.contains(&name) {
                continue;
            }
            done.push(name.clone());
            if let Some(body) = scripts.get(&name) {
                out.push(body.clone());
                queue.push(body.clone());
            }
        }
        for simple in line.split(|c: char| ";|&\n".contains(c)) {
            let ws: Vec<&str> = simple.split_whitespace().collect();
            let Some(k) = ws
                .iter()
                .position(|w| matches!(command_name(w), "make" | "gmake"))
            else {
                continue;
            };
            let args = &ws[k + 1..];
            let file = match args.iter().position(|a| *a == "-f" || *a == "--file") {
                Some(i) => args.get(i + 1).and_then(|f| workspace_operand(f)),
                None => ["GNUmakefile", "makefile", "Makefile"]
                    .into_iter()
                    .find(|f| loop_workspace::door::is_file(root, f))
                    .map(str::to_string),
            };
            let Some(file) = file else { continue };
            let Ok(Some(text)) = loop_workspace::door::read(root, &file, 256 * 1024) else {
                continue;
            };
            let mut skip = false;
            let targets: Vec<String> = args
                .iter()
                .filter(|a| {
                    let flag_value = skip;
                    skip = matches!(**a, "-f" | "--file" | "-C" | "-j" | "-I" | "-o" | "-W");
                    !flag_value && !a.starts_with('-') && !a.contains('=')
                })
                .map(|a| a.to_string())
                .collect();
            for recipe in make_recipes(&String::from_utf8_lossy(&text), &targets) {
                out.push(recipe.clone());
                queue.push(recipe);
            }
        }
    }
    out
}

/// A command word as the workspace path it names (`./verify.sh` →
/// `verify.sh`, quotes dropped), or `None` for what names no workspace
/// path: absolute, a flag, a variable, `..` or an empty component.
pub fn workspace_operand(word: &str) -> Option<String> {
    let w = word.trim_matches(|c| c == '"' || c == '\'');
    let rel = w.trim_start_matches("./");
    (!rel.is_empty()
        && !w.starts_with('/')
        && !w.starts_with('-')
        && !w.contains('$')
        && !rel.split('/').any(|c| c == ".." || c.is_empty()))
    .then(|| rel.to_string())
}

/// Scripts and Makefiles followed from the checks, at most.
const MAX_SCRIPTS: usize = 32;

/// Workspace files one shell line runs as a program or a script: the
/// first word of each simple command when it is a path (`./run.sh`,
/// `scripts/ci`), the script a shell or `source` is given (`sh verify.sh`,
/// `. env.sh`), the Makefile `make` reads (`-f FILE`, else the default
/// names).
fn scripts_run(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let plain = workspace_operand;
    for simple in line.split(|c: char| ";|&(){}`\n".contains(c)) {
        let mut ws = simple
            .split_whitespace()
            .skip_while(|w| w.contains('=') && !w.starts_with('-'))
            .peekable();
        // Wrappers that run the rest: `env`, `timeout 5`, `nice`, `time`.
        while let Some(w) = ws.peek() {
            match *w {
                "env" | "nice" | "time" | "exec" | "command" | "nohup" | "stdbuf" => {
                    ws.next();
                }
                "timeout" => {
                    ws.next();
                    ws.next();
                }
                _ => break,
            }
        }
        let Some(first) = ws.next() else { continue };
        // `.` is its own name (a command name's trailing dots are a
        // version's, `python3.11`, and left `.` nothing: `. ./ci.sh` went
        // unprotected while `bash ci.sh` was).
        let name = if first == "." {
            "."
        } else {
            command_name(first)
        };
        match name {
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "source" | "." => {
                if let Some(script) = ws.find(|w| !w.starts_with('-')).and_then(plain) {
                    out.push(script);
                }
            }
            "make" | "gmake" => {
                let args: Vec<&str> = ws.collect();
                match args.iter().position(|a| *a == "-f" || *a == "--file") {
                    Some(i) => out.extend(args.get(i + 1).and_then(|f| plain(f))),
                    None => out.extend(["Makefile", "makefile", "GNUmakefile"].map(String::from)),
                }
            }
            "just" => out.extend(["justfile", "Justfile", ".justfile"].map(String::from)),
            _ if first.contains('/') => out.extend(plain(first)),
            _ => {}
        }
    }
    out
}

/// What the checks run, followed: the scripts and Makefiles they run (a
/// few levels deep), every shell line in them and in the package.json
/// scripts a package manager runs, and all their words.
struct Followed {
    all_words: Vec<String>,
    /// Every shell line, with the check it came from (the commands first).
    lines: Vec<(String, usize)>,
    /// The scripts and Makefiles read, with the check that runs them.
    scripts: Vec<(String, usize)>,
}

fn follow(commands: &[&str], root: &Path) -> Followed {
    let mut all_words: Vec<String> = commands.iter().flat_map(|c| words(c)).collect();
    // Every shell line the checks run, with the check it came from: the
    // commands, the scripts and Makefiles they run, and what a package
    // manager runs from package.json.
    let mut lines: Vec<(String, usize)> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i))
        .collect();
    // Indirection: the scripts and Makefiles the checks run (and the ones
    // those run, a few levels deep) are in the set, and the stacks they
    // use count too (`make test` whose recipe runs a script that runs
    // pytest; `npm test` whose script runs `node --require ./setup.js`).
    let mut scripts: Vec<(String, usize)> = Vec::new();
    let mut queue: Vec<(String, usize)> = Vec::new();
    let package = package_scripts(root);
    let mut package_read: Vec<String> = Vec::new();
    let mut visit = |line: &str,
                     i: usize,
                     queue: &mut Vec<(String, usize)>,
                     lines: &mut Vec<(String, usize)>,
                     all_words: &mut Vec<String>| {
        for rel in scripts_run(line) {
            queue.push((rel, i));
        }
        // The scripts a package manager runs by name, and those they run.
        let mut names = scripts_invoked(line);
        while let Some(name) = names.pop() {
            if package_read.contains(&name) || package_read.len() >= MAX_SCRIPTS {
                continue;
            }
            package_read.push(name.clone());
            let Some(script) = package.get(&name) else {
                continue;
            };
            all_words.extend(words(script));
            for rel in scripts_run(script) {
                queue.push((rel, i));
            }
            names.extend(scripts_invoked(script));
            lines.push((script.clone(), i));
        }
    };
    for (i, c) in commands.iter().enumerate() {
        visit(c, i, &mut queue, &mut lines, &mut all_words);
    }
    let mut read = 0;
    while let Some((rel, i)) = queue.pop() {
        if read >= MAX_SCRIPTS || scripts.iter().any(|(r, _)| *r == rel) {
            continue;
        }
        // Through the door: a script that is a link (or a FIFO) is not
        // read, and one over 256 KiB is named but not read.
        let text = match loop_workspace::door::read(root, &rel, 256 * 1024) {
            Ok(Some(text)) => Some(text),
            Err(loop_workspace::UntrustedError::TooLarge { .. }) => None,
            Ok(None) | Err(_) => continue,
        };
        scripts.push((rel.clone(), i));
        read += 1;
        let Some(text) = text else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        all_words.extend(words(&text));
        for line in text.lines() {
            let line = line.trim_start_matches('\t');
            visit(line, i, &mut queue, &mut lines, &mut all_words);
            lines.push((line.to_string(), i));
        }
    }
    Followed {
        all_words,
        lines,
        scripts,
    }
}

/// The set for `contract`'s checks over the workspace at `root` as the
/// task starts. Deterministic for the same contract and workspace.
#[allow(clippy::disallowed_methods)] // lstat only: whether a named test file is there
pub fn derive(contract: &Contract, root: &Path) -> Vec<IntegrityRule> {
    let commands: Vec<&str> = contract
        .criteria
        .iter()
        .flat_map(|c| &c.checks)
        .filter_map(|c| match c {
            Check::Run(r) => Some(r.command.as_str()),
            _ => None,
        })
        .collect();
    let mut out: Vec<IntegrityRule> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |glob: String, why: String, out: &mut Vec<IntegrityRule>| {
        if seen.insert(glob.clone()) {
            out.push(IntegrityRule { glob, why });
        }
    };
    if commands.is_empty() {
        return out;
    }
    let Followed {
        all_words,
        lines,
        scripts,
    } = follow(&commands, root);
    for (rel, i) in &scripts {
        push(
            rel.clone(),
            format!("a script or Makefile check command {} runs", i + 1),
            &mut out,
        );
    }
    for (line, i) in &lines {
        for rel in node_preloads(line) {
            push(
                rel,
                format!("a module check command {} preloads (node)", i + 1),
                &mut out,
            );
        }
    }
    for (glob, why) in PROGRAM_SELECTION {
        push(glob.to_string(), format!("{why} (any command)"), &mut out);
    }
    let mut classified = false;
    for stack in STACKS {
        let by_command = all_words.iter().any(|w| {
            let name = command_name(w);
            stack.commands.iter().any(|c| command_name(c) == name)
        });
        let by_marker = stack
            .markers
            .iter()
            .any(|m| loop_workspace::door::is_file(root, m));
        if !(by_command || by_marker) {
            continue;
        }
        // A task runner alone (make, just) says what runs, not what the
        // runner under it loads: the conservative set still applies.
        if !matches!(stack.name, "make" | "just") {
            classified = true;
        }
        for (glob, why) in stack.rules {
            push(
                glob.to_string(),
                format!("{} ({})", why, stack.name),
                &mut out,
            );
        }
    }
    if !classified {
        for (glob, why) in CONSERVATIVE {
            push(
                glob.to_string(),
                format!("{why} (a stack the runtime cannot classify)"),
                &mut out,
            );
        }
    }
    for (line, i) in &lines {
        for glob in named_plugins(line) {
            push(
                glob,
                format!("a plugin module check command {} loads", i + 1),
                &mut out,
            );
        }
    }
    // Test files, directories and scripts the commands name.
    for (i, command) in commands.iter().enumerate() {
        for w in words(command) {
            let rel = w.trim_start_matches("./").trim_end_matches('/');
            if rel.is_empty()
                || rel.starts_with('/')
                || rel.starts_with('-')
                || rel.split('/').any(|c| c == ".." || c.is_empty())
                || !testish(rel)
            {
                continue;
            }
            // `tests/test_x.py::test_a` names a file.
            let rel = rel.split("::").next().unwrap_or(rel);
            let Ok(meta) = std::fs::symlink_metadata(root.join(rel)) else {
                continue;
            };
            let glob = if meta.is_dir() {
                format!("{rel}/**")
            } else {
                rel.to_string()
            };
            push(glob, format!("named by check command {}", i + 1), &mut out);
        }
    }
    for (data, test) in test_data(&out, root) {
        push(data, format!("test data {test} reads"), &mut out);
    }
    out
}

/// Extensions of the data files a test reads its cases or expected
/// values from (never code, documentation or configuration, which may be
/// the work).
const DATA_EXTENSIONS: &[&str] = &[
    "json", "yaml", "yml", "csv", "tsv", "txt", "xml", "dat", "in", "out", "expected", "golden",
    "snap", "snapshot", "ndjson", "jsonl",
];

/// Test files read for the data files they name, at most.
const TEST_FILES_READ: usize = 200;

/// Entries of the workspace looked at to find them, at most.
const ENTRIES_SEEN: usize = 5000;

/// The workspace's data files that its protected test files name in a
/// string (`open('cases.json')`, `"fixtures/add.json"`, relative to the
/// root or to the test file), each with the test naming it: a test whose
/// expected values the task could rewrite judges nothing (a model that
/// edited `cases.json`, not `add`, was verified).
fn test_data(rules: &[IntegrityRule], root: &Path) -> Vec<(String, String)> {
    let Ok(set) =
        loop_workspace::Protected::new(&[]).and_then(|p| p.with_named(&named(rules), &[]))
    else {
        return Vec::new();
    };
    // A bounded walk (hidden directories, dependencies and build outputs
    // left out): a preparation stays quick on a large tree.
    let mut tests: Vec<String> = Vec::new();
    let mut queue: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    queue.push_back(String::new());
    let mut seen = 0usize;
    while let Some(dir) = queue.pop_front() {
        let at = (!dir.is_empty()).then(|| Path::new(dir.as_str()));
        let Ok(names) = loop_workspace::door::list(root, at) else {
            continue;
        };
        for name in names {
            seen += 1;
            if seen > ENTRIES_SEEN || tests.len() >= TEST_FILES_READ {
                break;
            }
            let rel = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            match loop_workspace::door::node(root, &rel) {
                Ok(loop_workspace::Node::Dir)
                    if !name.starts_with('.')
                        && !matches!(
                            name.as_str(),
                            "node_modules" | "target" | "build" | "dist" | "vendor" | "__pycache__"
                        ) =>
                {
                    queue.push_back(rel)
                }
                Ok(loop_workspace::Node::File { .. })
                    if testish(&rel) && set.matching(&rel).is_some() =>
                {
                    tests.push(rel)
                }
                _ => {}
            }
        }
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for test in &tests {
        let Ok(Some(text)) = loop_workspace::door::read_text(root, test, 256 * 1024) else {
            continue;
        };
        let dir = test.rsplit_once('/').map_or("", |(d, _)| d);
        for lit in string_literals(&text) {
            let lit = lit.trim_start_matches("./");
            let ext = lit.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
            if lit.is_empty()
                || lit.starts_with('/')
                || lit.split('/').any(|c| c == ".." || c.is_empty())
                || !ext.is_some_and(|e| DATA_EXTENSIONS.contains(&e.as_str()))
            {
                continue;
            }
            let beside = |sub: &str| {
                [dir, sub, lit]
                    .iter()
                    .filter(|p| !p.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join("/")
            };
            // Where a test looks (`os.path.join(here, "fixtures", "x.json")`
            // names only the file).
            let candidates = [
                lit.to_string(),
                beside(""),
                beside("fixtures"),
                beside("testdata"),
                beside("data"),
            ];
            for rel in candidates {
                if test_data_named(&rel)
                    && loop_workspace::door::is_file(root, &rel)
                    && set.matching(&rel).is_none()
                    && !out.iter().any(|(r, _)| *r == rel)
                {
                    out.push((rel, test.clone()));
                }
            }
        }
    }
    out
}

/// Whether a data file's path says it holds a test's cases or expected
/// values (a directory `fixtures/`, `testdata/`, `golden/`, `snapshots/`…,
/// or a name with `case`, `expect`, `golden`, `fixture`, `snapshot`): a
/// test may read the project's own data too (`locales/en.json`), which an
/// honest task changes.
fn test_data_named(rel: &str) -> bool {
    const DIRS: &[&str] = &[
        "fixtures",
        "fixture",
        "testdata",
        "test_data",
        "test-data",
        "golden",
        "goldens",
        "expected",
        "snapshots",
        "__snapshots__",
        "cases",
    ];
    const NAMES: &[&str] = &["case", "expect", "golden", "fixture", "snapshot"];
    let lower = rel.to_ascii_lowercase();
    let (dirs, name) = lower.rsplit_once('/').unwrap_or(("", lower.as_str()));
    dirs.split('/').any(|d| DIRS.contains(&d)) || NAMES.iter().any(|n| name.contains(n))
}

/// The strings of `text` written in quotes (`'…'`, `"…"`, `` `…` ``) on
/// one line, each closed by its own quote.
fn string_literals(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(start) = rest.find(['\'', '"', '`']) {
            let q = rest[start..].chars().next().unwrap_or('"');
            let after = &rest[start + 1..];
            match after.find(q) {
                Some(end) => {
                    if end <= 200 {
                        out.push(&after[..end]);
                    }
                    rest = &after[end + 1..];
                }
                None => break,
            }
        }
    }
    out
}

/// New test files the task is asked to write: the contract's artifacts
/// that a rule of the set covers and that do not exist as the task starts
/// (`exists` says whether a workspace path did). They may be created
/// without `allow_check_changes`; files that exist stay protected. What
/// they may not do is change how the existing tests run: the verifier runs
/// each check again without them (see `SnapshotVerifier::with_new_tests`).
pub fn new_test_files(
    contract: &Contract,
    rules: &[IntegrityRule],
    exists: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let Ok(set) =
        loop_workspace::Protected::new(&[]).and_then(|p| p.with_named(&named(rules), &[]))
    else {
        return Vec::new();
    };
    contract
        .artifacts
        .iter()
        .map(|a| a.as_str().to_string())
        .filter(|a| !exists(a) && set.matching(a).is_some())
        .collect()
}

/// The rules as `(glob, name)` pairs for [`loop_workspace::Protected::with_named`]:
/// the name says the layer, so a refusal or a violation names it.
pub fn named(rules: &[IntegrityRule]) -> Vec<(String, String)> {
    rules
        .iter()
        .map(|r| {
            (
                r.glob.clone(),
                format!("check integrity: {} `{}`", r.why, r.glob),
            )
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    fn contract(commands: &[&str]) -> Contract {
        let mut yaml = String::from("instruction: x\ncriteria:\n");
        for (i, c) in commands.iter().enumerate() {
            yaml.push_str(&format!(
                "  - id: c{i}\n    text: t\n    checks:\n      - run: {c:?}\n"
            ));
        }
        Contract::from_yaml(&yaml, "t").unwrap()
    }

    #[test]
    fn runners_auto_loads_c_projects_and_unclassified_stacks_are_covered() {
        use loop_workspace::testdir::TestDir;
        let dir = TestDir::new("integrity-autoload");
        let root = dir.path();
        let globs = |commands: &[&str]| -> Vec<String> {
            derive(&contract(commands), root)
                .into_iter()
                .map(|r| r.glob)
                .collect()
        };
        // Python: package metadata (entry points) and plugins named by -p
        // or PYTEST_PLUGINS; `mkdir -p` names none.
        let py = globs(&[
            "mkdir -p build && python3 -m pytest -p myplug -q && PYTEST_PLUGINS=a.b,c pytest",
        ]);
        for want in [
            "**/*.dist-info/**",
            "**/*.egg-info/**",
            "**/*.pth",
            "myplug.py",
            "myplug/**",
            "a/b.py",
            "a/__init__.py",
            "c.py",
        ] {
            assert!(py.iter().any(|g| g == want), "{want} in {py:?}");
        }
        assert!(!py.iter().any(|g| g.starts_with("build")), "{py:?}");
        // C with CMake and CTest, by command.
        let c = globs(&["cmake -S . -B b && cmake --build b && ctest --test-dir b"]);
        for want in [
            "**/CMakeLists.txt",
            "**/*.cmake",
            "**/tests/**",
            "**/test_*.c",
        ] {
            assert!(c.iter().any(|g| g == want), "{want} in {c:?}");
        }
        // A runner nobody knows: test-named files and directories.
        let unknown = globs(&["./run-suite --all"]);
        for want in [
            "test*/**",
            "**/tests/**",
            "**/spec/**",
            "**/*_test.*",
            "**/test_*.*",
            "**/*.spec.*",
        ] {
            assert!(unknown.iter().any(|g| g == want), "{want} in {unknown:?}");
        }
        // A known stack does not get the conservative set.
        assert!(!py.iter().any(|g| g == "**/spec/**"), "{py:?}");
    }

    #[test]
    fn node_preloads_and_the_scripts_npm_runs_are_followed() {
        use loop_workspace::testdir::TestDir;
        let dir = TestDir::new("integrity-node");
        let root = dir.path();
        std::fs::write(
            root.join("package.json"),
            r#"{"scripts": {"test": "node --require ./setup.js --test && sh scripts/after.sh",
                "lint": "NODE_OPTIONS='--import=./hooks/register.mjs' eslint ."}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(root.join("scripts")).unwrap();
        std::fs::write(
            root.join("scripts/after.sh"),
            "node -r ./more.cjs check.js\n",
        )
        .unwrap();
        let globs = |commands: &[&str]| -> Vec<String> {
            derive(&contract(commands), root)
                .into_iter()
                .map(|r| r.glob)
                .collect()
        };
        let npm = globs(&["npm test"]);
        for want in ["package.json", "setup.js", "scripts/after.sh", "more.cjs"] {
            assert!(npm.iter().any(|g| g == want), "{want} in {npm:?}");
        }
        // Only the scripts the check runs by name: `lint`'s preload is
        // not `npm test`'s, and is `npm run lint`'s.
        assert!(!npm.iter().any(|g| g == "hooks/register.mjs"), "{npm:?}");
        let lint = globs(&["npm run lint"]);
        assert!(lint.iter().any(|g| g == "hooks/register.mjs"), "{lint:?}");
        // Named on the command line, with `=` or without; `cp -r` and a
        // package name preload no workspace file.
        let direct = globs(&[
            "cp -r fixtures out.js && node --test --test-reporter=./rep.mjs -r ./pre.js && mocha --file test/helper.js -r ts-node/register",
        ]);
        for want in ["rep.mjs", "pre.js", "test/helper.js"] {
            assert!(direct.iter().any(|g| g == want), "{want} in {direct:?}");
        }
        for not in ["out.js", "fixtures", "ts-node/register"] {
            assert!(!direct.iter().any(|g| g == not), "{not} in {direct:?}");
        }
        // package.json is only followed when a package manager runs it.
        let plain = globs(&["node --test"]);
        assert!(!plain.iter().any(|g| g == "setup.js"), "{plain:?}");
    }

    /// A script sourced (`. ./ci.sh`, `source ci.sh`) is run as `bash
    /// ci.sh` runs it: in the set.
    #[test]
    fn a_sourced_script_is_a_script_the_check_runs() {
        assert_eq!(scripts_run(". ./ci.sh"), ["ci.sh"]);
        assert_eq!(
            scripts_run("source scripts/env.sh && make"),
            ["scripts/env.sh", "Makefile", "makefile", "GNUmakefile"]
        );
        assert_eq!(scripts_run("bash ci.sh"), ["ci.sh"]);
        assert!(scripts_run("python3.11 -m unittest").is_empty());
    }

    #[test]
    fn recipes_that_run_themselves_end() {
        use loop_workspace::testdir::TestDir;
        let dir = TestDir::new("integrity-make-loop");
        let root = dir.path();
        std::fs::write(
            root.join("Makefile"),
            "test:\n\tmake test\n\tmake other\n\nother:\n\tmake test\n\tpython3 run.py\n",
        )
        .unwrap();
        std::fs::write(
            root.join("package.json"),
            r#"{"scripts": {"test": "npm run a", "a": "npm test && make test"}}"#,
        )
        .unwrap();
        let lines = recipe_lines("npm test", root);
        assert!(lines.iter().any(|l| l == "python3 run.py"), "{lines:?}");
        assert!(lines.len() < 20, "{lines:?}");
    }

    #[test]
    fn a_makefile_that_builds_c_with_cc_gets_the_c_sets() {
        use loop_workspace::testdir::TestDir;
        let dir = TestDir::new("integrity-make-c");
        let root = dir.path();
        std::fs::write(
            root.join("Makefile"),
            "test: t\n\t./t\n\nt: tests/t.c lib.c\n\t$(CC) -o t tests/t.c lib.c\n",
        )
        .unwrap();
        let globs: Vec<String> = derive(&contract(&["make test"]), root)
            .into_iter()
            .map(|r| r.glob)
            .collect();
        for want in ["Makefile", "**/tests/**", "**/test_*.c"] {
            assert!(globs.iter().any(|g| g == want), "{want} in {globs:?}");
        }
    }

    #[test]
    fn stacks_come_from_commands_and_markers() {
        use loop_workspace::testdir::TestDir;
        let dir = TestDir::new("integrity");
        let root = dir.path();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(root.join("tests/test_calc.py"), "").unwrap();
        std::fs::write(root.join("run_checks.sh"), "").unwrap();
        let rules = derive(
            &contract(&[
                "python3 -m pytest -q tests/",
                "sh ./run_checks.sh && echo ok",
            ]),
            root,
        );
        let globs: Vec<&str> = rules.iter().map(|r| r.glob.as_str()).collect();
        for want in [
            "**/conftest.py",
            "pytest.ini",
            "pyproject.toml",
            "**/*.pth",
            "tests/**",
            "run_checks.sh",
        ] {
            assert!(globs.contains(&want), "{want} in {globs:?}");
        }
        assert!(!globs.contains(&"package.json"), "{globs:?}");
        // A marker brings its stack in even when the command hides it.
        std::fs::write(root.join("package.json"), "{}").unwrap();
        let rules = derive(&contract(&["sh -c 'exit 0'"]), root);
        assert!(
            rules
                .iter()
                .any(|r| r.glob == "package.json" && r.why.contains("node"))
        );
        assert!(
            !rules.iter().any(|r| r.glob == "**/conftest.py"),
            "{rules:?}"
        );
        // A Makefile the checks call brings in the stacks it runs.
        std::fs::write(root.join("Makefile"), "test:\n\tpython3 -m pytest -q\n").unwrap();
        let rules = derive(&contract(&["make test"]), root);
        assert!(
            rules.iter().any(|r| r.glob == "**/conftest.py"),
            "{rules:?}"
        );
        assert!(rules.iter().any(|r| r.glob == "Makefile"), "{rules:?}");
        let rules = derive(
            &contract(&["make test", "cargo test", "go test ./..."]),
            root,
        );
        let globs: Vec<&str> = rules.iter().map(|r| r.glob.as_str()).collect();
        for want in ["Makefile", ".cargo/**", "go.mod", "**/*_test.go"] {
            assert!(globs.contains(&want), "{want} in {globs:?}");
        }
        // Scripts a check runs are in the set, followed through a Makefile
        // (whose stacks count, though no marker says so).
        let deep = TestDir::new("integrity-deep");
        let d = deep.path();
        std::fs::create_dir_all(d.join("scripts")).unwrap();
        std::fs::write(d.join("Makefile"), "test:\n\t./scripts/run-tests.sh -q\n").unwrap();
        std::fs::write(
            d.join("scripts/run-tests.sh"),
            "#!/bin/sh\nexec python3 -m pytest \"$@\"\n",
        )
        .unwrap();
        std::fs::write(d.join("verify.sh"), "exit 1\n").unwrap();
        let rules = derive(&contract(&["make test", "sh verify.sh && echo ok"]), d);
        let globs: Vec<&str> = rules.iter().map(|r| r.glob.as_str()).collect();
        for want in [
            "Makefile",
            "scripts/run-tests.sh",
            "verify.sh",
            "**/conftest.py",
            "**/tests/**",
            "**/__pycache__/**",
        ] {
            assert!(globs.contains(&want), "{want} in {globs:?}");
        }
        // The program under test, named by a check, is not in the set.
        std::fs::write(root.join("calc.py"), "").unwrap();
        let rules = derive(&contract(&["python3 calc.py 2 3"]), root);
        assert!(!rules.iter().any(|r| r.glob == "calc.py"));
    }
}
