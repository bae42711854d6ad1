//! Reading a `run_command` line the way a shell would, to judge it:
//! every command in command position, anywhere in the line, with the
//! wrappers that run another command resolved to it.
//!
//! The line is parsed with tree-sitter-bash. Every `command` node counts,
//! wherever it is: lists, pipelines, `{ }`, `( )`, `if`/`while`/`for`/`case`
//! bodies, `!`, function bodies, redirections, command and process
//! substitutions, here-documents. Words are literal only when the shell
//! would not change them (quotes and escapes resolved; no expansion, glob or
//! brace); anything else is a wildcard for judging. Wrappers (`env`,
//! `sudo`, `timeout`, `xargs`, `find -exec`, `sh -c 'literal'`, `eval
//! literal`, …) add the command they run as another candidate.
//!
//! What cannot be read with confidence — a parse error, a command name that
//! is not literal, `sh -c` or `eval` of something not literal, nesting too
//! deep, and a shell or interpreter fed its program from elsewhere (its
//! standard input: a pipe, a here-document or here-string; a process
//! substitution; `/dev/stdin`; a computed path; a file the same line
//! writes; `make -f` of any of these) — is reported, and the policy judges
//! it strictly.

use tree_sitter::{Node, Parser};

/// One word: literal text, or `None` when the shell computes it
/// (expansions, substitutions, globs, braces): a wildcard for judging.
pub type Word = Option<String>;

/// What a line holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Every command to judge (wrappers and what they run, both).
    pub commands: Vec<Vec<Word>>,
    /// Why the line, or part of it, cannot be read with confidence.
    pub unreadable: Vec<String>,
    /// Files the line writes by redirection or `tee` (literal paths).
    written: Vec<String>,
    /// The line writes to a path it computes (`> "$TMPDIR/s.sh"`).
    writes_computed: bool,
    /// Files the line reads by a `< FILE` redirection (literal paths).
    fed: Vec<String>,
    /// Programs at computed paths shells and interpreters are given.
    computed_programs: Vec<String>,
    /// The `sh -c`/`eval` string being read is run with its standard input
    /// fed by the line around it.
    inherited_fed: bool,
    /// The command being resolved has a process substitution among its
    /// words (`sh <(…)`).
    proc_subst: bool,
    /// Program files shells, interpreters and `make -f` are given to run
    /// (literal paths), with who runs them.
    programs: Vec<(String, String)>,
}

/// How deep `sh -c`/`eval` strings are read before giving up.
const MAX_DEPTH: usize = 8;

impl Parsed {
    /// Program files the line's shells, interpreters, `source` and
    /// `make -f` are given to run (literal paths), with who runs them.
    pub fn programs(&self) -> &[(String, String)] {
        &self.programs
    }

    /// Files the line feeds a command by `< FILE` (literal paths; not a
    /// here-document, a process substitution, `<&` or `<>`).
    pub fn fed(&self) -> &[String] {
        &self.fed
    }
}

/// Read `line`.
pub fn parse(line: &str) -> Parsed {
    let mut out = Parsed::default();
    parse_into(line, 0, &mut out);
    // A program the same line writes first is not what the policy read.
    let fed: Vec<String> = out
        .programs
        .iter()
        .filter(|(path, _)| {
            let bare = path.trim_start_matches("./");
            out.written
                .iter()
                .any(|w| w.trim_start_matches("./") == bare)
        })
        .map(|(path, who)| format!("`{who}` runs `{path}`, a file this same line writes"))
        .collect();
    out.unreadable.extend(fed);
    // A program at a computed path is unreadable when the line also writes
    // to a computed path (`printf … > "$TMPDIR/s.sh"; sh "$TMPDIR/s.sh"`);
    // alone (`. "$HOME/.cargo/env"`) it is a file the project or the
    // machine holds.
    if out.writes_computed {
        let computed: Vec<String> = out
            .computed_programs
            .iter()
            .map(|who| {
                format!("`{who}` runs a program at a computed path, and this line writes to a computed path")
            })
            .collect();
        out.unreadable.extend(computed);
    }
    out
}

/// Interpreters that take a program from a file, `-` or their standard
/// input (besides the shells), and the options that give it inline.
const INTERPRETERS: &[(&str, &[&str])] = &[
    ("python", &["-c", "-m"]),
    ("python3", &["-c", "-m"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("awk", &[]),
];

/// Paths that are a program's standard input or another descriptor.
fn is_stream(path: &str) -> bool {
    // `/dev//stdin`, `/dev/./stdin`: the same file.
    let mut p = path.replace("/./", "/");
    while p.contains("//") {
        p = p.replace("//", "/");
    }
    let proc_fd = p.strip_prefix("/proc/").is_some_and(|r| {
        let mut parts = r.splitn(3, '/');
        let who = parts.next().unwrap_or("");
        (who == "self" || who == "thread-self" || who.chars().all(|c| c.is_ascii_digit()))
            && parts.next() == Some("fd")
    });
    p == "-" || p == "/dev/stdin" || p.starts_with("/dev/fd/") || proc_fd || p == "{}"
}

fn parse_into(line: &str, depth: usize, out: &mut Parsed) {
    if depth > MAX_DEPTH {
        out.unreadable
            .push("nested `sh -c`/`eval` deeper than this reader follows".into());
        return;
    }
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .is_err()
    {
        out.unreadable
            .push("the shell grammar could not be loaded".into());
        return;
    }
    let Some(tree) = parser.parse(line, None) else {
        out.unreadable.push("the line could not be parsed".into());
        return;
    };
    walk(tree.root_node(), line, depth, out);
}

fn text<'a>(n: Node<'_>, src: &'a str) -> &'a str {
    src.get(n.byte_range()).unwrap_or("")
}

fn walk(n: Node<'_>, src: &str, depth: usize, out: &mut Parsed) {
    if n.is_error() || n.is_missing() {
        out.unreadable.push(format!(
            "the shell grammar cannot read `{}` (line {}, column {})",
            text(n, src).chars().take(40).collect::<String>(),
            n.start_position().row + 1,
            n.start_position().column + 1
        ));
    }
    match n.kind() {
        "command" => command(n, src, depth, out),
        "file_redirect" => {
            // `> f`, `>> f`, `>| f`, `&> f`: a file this line writes;
            // `< f` (and `2< f`), one it reads.
            let (writes, reads) = {
                let mut c = n.walk();
                let ops: Vec<&str> = n
                    .children(&mut c)
                    .filter(|k| !k.is_named())
                    .map(|k| text(k, src))
                    .collect();
                (ops.iter().any(|op| op.contains('>')), ops.contains(&"<"))
            };
            if let Some(dest) = n.child_by_field_name("destination") {
                match (writes, literal(dest, src)) {
                    (true, Some(path)) => out.written.push(path),
                    (true, None) => out.writes_computed = true,
                    (false, Some(path)) if reads => out.fed.push(path),
                    _ => {}
                }
            }
        }
        "test_command" => {
            // `[ … ]` and `[[ … ]]`: the builtin `test`, judged as a command
            // named by its bracket with its operators and operands as words
            // (what `test` itself would be given).
            let mut words: Vec<Word> = Vec::new();
            test_words(n, src, &mut words);
            if !words.is_empty() {
                out.commands.push(words);
            }
        }
        "declaration_command" | "unset_command" => {
            // `export`, `local`, `declare`, `readonly`, `unset`: builtins,
            // judged like commands by their keyword and literal arguments.
            let mut words: Vec<Word> = Vec::new();
            let mut c = n.walk();
            for child in n.children(&mut c) {
                if !child.is_named() {
                    words.push(Some(text(child, src).to_string()));
                } else {
                    words.push(literal(child, src));
                }
            }
            if !words.is_empty() {
                out.commands.push(words);
            }
        }
        _ => {}
    }
    let mut c = n.walk();
    for child in n.children(&mut c) {
        walk(child, src, depth, out);
    }
}

/// The words of a `test_command` in order: its brackets and operators as
/// they are written, each operand as [`literal`] reads a word.
fn test_words(n: Node<'_>, src: &str, out: &mut Vec<Word>) {
    let mut c = n.walk();
    for child in n.children(&mut c) {
        match child.kind() {
            "word"
            | "string"
            | "raw_string"
            | "concatenation"
            | "number"
            | "simple_expansion"
            | "expansion"
            | "command_substitution"
            | "ansi_c_string"
            | "translated_string" => out.push(literal(child, src)),
            _ if child.child_count() == 0 => out.push(Some(text(child, src).to_string())),
            _ => test_words(child, src, out),
        }
    }
}

/// A simple command: its name and arguments, then what its wrappers run.
fn command(n: Node<'_>, src: &str, depth: usize, out: &mut Parsed) {
    let Some(name) = n.child_by_field_name("name") else {
        return;
    };
    let name_word = name.named_child(0).and_then(|w| literal(w, src));
    let mut words: Vec<Word> = vec![name_word];
    let mut c = n.walk();
    for arg in n.children_by_field_name("argument", &mut c) {
        words.push(literal(arg, src));
    }
    let fed = fed_stdin(n, src) || out.inherited_fed;
    let mut c = n.walk();
    let proc_subst = n
        .children_by_field_name("argument", &mut c)
        .any(|a| a.kind() == "process_substitution");
    let outer = std::mem::replace(&mut out.proc_subst, proc_subst);
    resolve(&words, depth, fed, out);
    out.proc_subst = outer;
}

/// Whether the command at `n` gets its standard input from another
/// command or from the line itself: it is not first in a pipeline, or a
/// here-document, here-string or `<` redirection feeds it.
fn fed_stdin(n: Node<'_>, src: &str) -> bool {
    let feeds = |holder: Node<'_>| {
        let mut c = holder.walk();
        for r in holder.children(&mut c) {
            let fed = match r.kind() {
                "heredoc_redirect" | "herestring_redirect" => true,
                "file_redirect" => {
                    let mut k = r.walk();
                    r.children(&mut k).any(|t| {
                        let op = text(t, src);
                        !t.is_named() && op.starts_with('<') && !op.starts_with("<(")
                    })
                }
                _ => false,
            };
            if fed {
                return true;
            }
        }
        false
    };
    // A here-string or `<` can be the command's own redirect.
    if feeds(n) {
        return true;
    }
    let Some(parent) = n.parent() else {
        return false;
    };
    match parent.kind() {
        "pipeline" => parent
            .named_child(0)
            .is_some_and(|first| first.id() != n.id()),
        "redirected_statement" => feeds(parent) || fed_stdin(parent, src),
        // Inside `{ }`, `( )`, `if`, loops, `!`, `&&`/`||` lists and
        // function bodies: fed if what holds it is.
        "program" => false,
        // A function's body reads whatever each call is fed.
        "function_definition" => true,
        _ => fed_stdin(parent, src),
    }
}

/// Record `words` as a command, then whatever command it runs.
fn resolve(words: &[Word], depth: usize, fed: bool, out: &mut Parsed) {
    let Some(first) = words.first() else {
        return;
    };
    out.commands.push(words.to_vec());
    let Some(name) = first else {
        out.unreadable
            .push("a command name that is not a literal word".into());
        return;
    };
    let base = name.rsplit('/').next().unwrap_or(name);
    let rest = &words[1..];
    if base == "tee" {
        out.written.extend(
            rest.iter()
                .flatten()
                .filter(|w| !w.starts_with('-'))
                .cloned(),
        );
    }
    interpreter(base, rest, fed, out);
    if matches!(base, "." | "source") {
        program_from(base, rest.first(), false, out);
    }
    let inner: Option<&[Word]> = if let Some((_, opts, skip)) =
        WRAPPERS.iter().find(|(names, _, _)| names.contains(&base))
    {
        let after = skip_options(rest, opts, false, &mut |_, _| {}, &[], out);
        // `timeout` and `chroot` take one word (a duration, a root) first.
        Some(after.get(*skip..).unwrap_or(&[]))
    } else {
        match base {
            "env" => {
                // `env -S 'cmd args'` splits its string into a command,
                // run with the line's input too.
                let outer = out.inherited_fed;
                out.inherited_fed = outer || fed;
                let inner = skip_options(
                    rest,
                    &["-u", "--unset", "-C", "--chdir"],
                    true,
                    &mut |w, out2: &mut Parsed| {
                        if let Some(s) = w {
                            parse_into(s, depth + 1, out2);
                        } else {
                            out2.unreadable
                                .push("`env -S` of a string that is not literal".into());
                        }
                    },
                    &["-S", "--split-string"],
                    out,
                );
                out.inherited_fed = outer;
                Some(inner)
            }
            "find" => {
                find_exec(rest, depth, out);
                None
            }
            "parallel" => Some(parallel_command(rest)),
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" | "mksh" | "busybox" => {
                shell_script(base, rest, (depth, fed), out);
                None
            }
            "eval" => {
                if rest.iter().all(Option::is_some) {
                    let joined = rest.iter().flatten().cloned().collect::<Vec<_>>().join(" ");
                    let outer = out.inherited_fed;
                    out.inherited_fed = outer || fed;
                    parse_into(&joined, depth + 1, out);
                    out.inherited_fed = outer;
                } else {
                    out.unreadable
                        .push("`eval` of something that is not literal".into());
                }
                None
            }
            _ => None,
        }
    };
    if let Some(inner) = inner
        && !inner.is_empty()
    {
        resolve(inner, depth, fed, out);
    }
}

/// Commands that run the command after their options: their names, the
/// options that take a value, and how many words come before the command.
/// (Without a command, xargs runs `echo`.)
const WRAPPERS: &[(&[&str], &[&str], usize)] = &[
    (
        &["sudo", "doas"],
        &[
            "-u",
            "-g",
            "-C",
            "-D",
            "-h",
            "-p",
            "-r",
            "-t",
            "-U",
            "-T",
            "--user",
            "--group",
            "--chdir",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
            "--close-from",
        ],
        0,
    ),
    (&["command", "builtin", "nohup", "setsid", "time"], &[], 0),
    (&["exec"], &["-a"], 0),
    (&["nice"], &["-n", "--adjustment"], 0),
    (
        &["stdbuf"],
        &["-i", "-o", "-e", "--input", "--output", "--error"],
        0,
    ),
    (&["timeout"], &["-s", "--signal", "-k", "--kill-after"], 1),
    (&["chroot"], &["--userspec", "--groups"], 1),
    (
        &["xargs"],
        &[
            "-a",
            "-d",
            "-E",
            "-e",
            "-I",
            "-i",
            "-L",
            "-l",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--eof",
            "--replace",
            "--max-lines",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ],
        0,
    ),
];

/// The commands `find` runs: each `-exec`/`-execdir`/`-ok`/`-okdir` up to
/// its `;` or `+`.
fn find_exec(rest: &[Word], depth: usize, out: &mut Parsed) {
    let mut i = 0;
    while i < rest.len() {
        let opens = matches!(
            rest[i].as_deref(),
            Some("-exec" | "-execdir" | "-ok" | "-okdir")
        );
        i += 1;
        if opens {
            let start = i;
            while i < rest.len() && !matches!(rest[i].as_deref(), Some(";" | "+" | "\\;")) {
                i += 1;
            }
            resolve(&rest[start..i], depth, false, out);
        }
    }
}

/// The command `parallel` runs: what comes before `:::`, after the options.
fn parallel_command(rest: &[Word]) -> &[Word] {
    let end = rest
        .iter()
        .position(|w| w.as_deref() == Some(":::"))
        .unwrap_or(rest.len());
    let body = &rest[..end];
    let start = body
        .iter()
        .position(|w| !w.as_deref().is_some_and(|s| s.starts_with('-')))
        .unwrap_or(body.len());
    &body[start..]
}

/// A shell's `-c` script, parsed as commands of its own; a shell fed its
/// program from elsewhere is unreadable (see the module's doc).
fn shell_script(base: &str, rest: &[Word], (depth, fed): (usize, bool), out: &mut Parsed) {
    let mut i = 0;
    let mut script: Option<&Word> = None;
    let mut from_stdin = false;
    let mut saw_c = false;
    if base == "busybox"
        && rest
            .first()
            .is_some_and(|w| matches!(w.as_deref(), Some("sh" | "ash" | "hush" | "bash")))
    {
        i = 1;
    }
    while i < rest.len() {
        match rest[i].as_deref() {
            // Options that take a value: `-o pipefail`, `+O extglob`.
            Some("-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") => i += 2,
            Some(o) if o.starts_with('-') && !o.starts_with("--") && o.contains('c') => {
                saw_c = true;
                script = rest.get(i + 1);
                break;
            }
            // `-s`: commands from standard input, whatever follows.
            Some(o) if o.starts_with('-') && !o.starts_with("--") && o.contains('s') => {
                from_stdin = true;
                i += 1;
            }
            Some("--") => {
                i += 1;
                break;
            }
            Some(o) if o.starts_with('-') || (base == "busybox" && o == "sh") => i += 1,
            _ => break,
        }
    }
    match script {
        Some(Some(s)) => {
            // What the line feeds the shell, its script's commands read.
            let outer = out.inherited_fed;
            out.inherited_fed = outer || fed;
            parse_into(s, depth + 1, out);
            out.inherited_fed = outer;
        }
        Some(None) => out.unreadable.push(format!(
            "`{base} -c` of a script that is not a literal string"
        )),
        None if saw_c => out.unreadable.push(format!(
            "`{base} -c` whose script another command supplies (xargs, find)"
        )),
        // Standard input is /dev/null in the sandbox unless the line feeds it.
        None if from_stdin && !fed => {}
        None if from_stdin => out.unreadable.push(format!(
            "`{base} -s` reads its program from its standard input, which this line feeds"
        )),
        None => program_from(base, rest.get(i), fed, out),
    }
}

/// Where `base` (a shell, an interpreter) takes its program from, `arg`
/// being its first word after the options: a file the line names (judged
/// once the whole line is read), or somewhere no policy can read.
fn program_from(base: &str, arg: Option<&Word>, fed: bool, out: &mut Parsed) {
    match arg {
        None if !fed => {}
        None => out.unreadable.push(format!(
            "`{base}` reads its program from its standard input (a pipe, a here-document or here-string)"
        )),
        // `bash 0<s.txt`: the grammar reads the descriptor as a word.
        Some(Some(p)) if fed && !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) => {
            out.unreadable.push(format!(
                "`{base}` reads its program from its standard input, which this line feeds"
            ))
        }
        Some(None) if out.proc_subst => out.unreadable.push(format!(
            "`{base}` runs its program from a process substitution"
        )),
        Some(None) => out.computed_programs.push(base.to_string()),
        Some(Some(p)) if is_stream(p) => out.unreadable.push(format!(
            "`{base}` runs its program from `{p}`, another command's output"
        )),
        Some(Some(p)) => out.programs.push((p.clone(), base.to_string())),
    }
}

/// An interpreter or `make` whose program comes from elsewhere than a file
/// the line names and does not write: unreadable, like a fed shell.
fn interpreter(base: &str, rest: &[Word], fed: bool, out: &mut Parsed) {
    let name = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let name = if base.starts_with("python") {
        "python"
    } else {
        name
    };
    if matches!(base, "make" | "gmake") {
        let mut it = rest.iter();
        while let Some(w) = it.next() {
            let file = match w.as_deref() {
                Some("-f" | "--file" | "--makefile") => it.next().cloned().flatten(),
                Some(o) if o.starts_with("--file=") => Some(o["--file=".len()..].to_string()),
                Some(o) if o.starts_with("-f") && o.len() > 2 => Some(o[2..].to_string()),
                _ => continue,
            };
            match file {
                Some(p) if !is_stream(&p) => out.programs.push((p, base.to_string())),
                Some(p) => out.unreadable.push(format!(
                    "`{base} -f {p}` reads its makefile from another command's output"
                )),
                None => out
                    .unreadable
                    .push(format!("`{base} -f` of a makefile whose path is computed")),
            }
        }
        return;
    }
    let Some((_, inline)) = INTERPRETERS.iter().find(|(n, _)| *n == name || *n == base) else {
        return;
    };
    if base == "awk" {
        // awk's program is its first argument (or `-f FILE`).
        if let Some(i) = rest.iter().position(|w| w.as_deref() == Some("-f")) {
            match rest.get(i + 1) {
                Some(Some(p)) if !is_stream(p) => out.programs.push((p.clone(), base.into())),
                _ => out
                    .unreadable
                    .push("`awk -f` of a program from another command's output".into()),
            }
        }
        return;
    }
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_deref() {
            Some(o)
                if inline.contains(&o)
                    || inline.iter().any(|x| {
                        o.starts_with(x) && x.len() == 2 && o.len() > 2 && !o.starts_with("--")
                    }) =>
            {
                return;
            }
            Some("-") => break,
            Some(o) if o.starts_with('-') => i += 1,
            _ => break,
        }
    }
    program_from(base, rest.get(i), fed, out);
}

/// Skip leading options (and `NAME=value` assignments when `assignments`)
/// of a wrapper; `with_arg` options take the next word (or `=value`);
/// `split` options hand their argument to `on_split`. Returns the rest:
/// the wrapped command.
fn skip_options<'w>(
    words: &'w [Word],
    with_arg: &[&str],
    assignments: bool,
    on_split: &mut dyn FnMut(&Word, &mut Parsed),
    split: &[&str],
    out: &mut Parsed,
) -> &'w [Word] {
    let mut i = 0;
    while i < words.len() {
        let Some(w) = words[i].as_deref() else {
            // A computed word where an option or the command goes: it could
            // be the command itself.
            return &words[i..];
        };
        if w == "--" {
            return &words[i + 1..];
        }
        let is_assignment = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if assignments && is_assignment {
            i += 1;
            continue;
        }
        if !w.starts_with('-') || w == "-" {
            return &words[i..];
        }
        let key = w.split_once('=').map_or(w, |(k, _)| k);
        if split.contains(&key) {
            if w.contains('=') {
                let v = w.split_once('=').map(|(_, v)| v.to_string());
                on_split(&v, out);
                i += 1;
            } else {
                if let Some(next) = words.get(i + 1) {
                    on_split(next, out);
                }
                i += 2;
            }
            // `env -S` replaces the rest of the command with its string.
            return &words[words.len().min(i)..words.len().min(i)];
        }
        if with_arg.contains(&key) && !w.contains('=') {
            i += 2;
        } else {
            i += 1;
        }
    }
    &words[words.len()..]
}

/// The literal value of a word node, as the shell would pass it, or `None`
/// when the shell computes it.
fn literal(n: Node<'_>, src: &str) -> Word {
    match n.kind() {
        "word" | "number" => unescape(text(n, src)),
        "raw_string" => {
            let t = text(n, src);
            Some(t.strip_prefix('\'')?.strip_suffix('\'')?.to_string())
        }
        "string" => {
            let mut s = String::new();
            let mut c = n.walk();
            for child in n.named_children(&mut c) {
                if child.kind() != "string_content" {
                    return None;
                }
                s.push_str(&unescape_double(text(child, src)));
            }
            Some(s)
        }
        "concatenation" => {
            let mut s = String::new();
            let mut c = n.walk();
            for child in n.named_children(&mut c) {
                s.push_str(&literal(child, src)?);
            }
            Some(s)
        }
        _ => None,
    }
}

/// An unquoted word: backslashes escape the next character; an unescaped
/// glob or brace expansion makes the word computed.
fn unescape(t: &str) -> Word {
    let mut out = String::new();
    let mut braces = String::new();
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next()
                    && n != '\n'
                {
                    out.push(n);
                }
            }
            '*' | '?' | '[' | '$' | '`' => return None,
            c => {
                if matches!(c, '{' | '}' | ',' | '.') {
                    braces.push(c);
                }
                out.push(c);
            }
        }
    }
    // `{a,b}` and `{1..3}` expand; a lone `{}` (find, xargs) does not.
    let expands = braces.find('{').is_some_and(|open| {
        braces[open..]
            .find('}')
            .is_some_and(|close| braces[open..open + close].contains([',', '.']))
    });
    if expands { None } else { Some(out) }
}

/// Inside double quotes only `\"`, `\\`, `\$`, `` \` `` and a newline are escapes.
fn unescape_double(t: &str) -> String {
    let mut out = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && matches!(n, '"' | '\\' | '$' | '`' | '\n')
        {
            chars.next();
            if n != '\n' {
                out.push(n);
            }
            continue;
        }
        out.push(c);
    }
    out
}
