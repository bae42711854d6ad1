//! The live view in a real terminal (tmux): a slow command shows a spinner
//! with its elapsed time and the status line, a `prompt` rule is asked and
//! answered inline, the checks land one by one, Ctrl-C asks whether to
//! cancel or detach (detach hands the task to a background runtime;
//! twice cancels); `NO_COLOR` leaves no colour, and piped output has no
//! spinner and no escape sequence.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const LOOPFILE: &str = "exec:
  approval_timeout_secs: 120
  rules:
    - prefix: touch
      decision: prompt
      examples: [\"touch a.txt\"]
";

fn script(seconds: u32) -> String {
    format!(
        "turns:
  - thought: Run the slow build first.
    calls:
      - {{tool: run_command, args: {{command: \"sleep {seconds} && echo built >> built.txt\"}}}}
  - calls:
      - {{tool: run_command, args: {{command: \"touch approved.txt\"}}}}
  - calls:
      - {{tool: finish, args: {{summary: done}}}}
"
    )
}

fn setup(name: &str, seconds: u32) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("term-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README.md"), "keep me\n").unwrap();
    std::fs::write(project.join("Loopfile.yaml"), LOOPFILE).unwrap();
    std::fs::write(dir.join("script.yaml"), script(seconds)).unwrap();
    (dir, project)
}

/// A tmux server of this test's own, on its own socket.
struct Tmux {
    sock: PathBuf,
    session: String,
}

impl Tmux {
    fn start(dir: &Path, command: &str) -> Tmux {
        Tmux::sized(dir, command, 160, 50)
    }

    /// A terminal `cols` wide and `rows` high.
    fn sized(dir: &Path, command: &str, cols: u16, rows: u16) -> Tmux {
        assert!(
            Command::new("tmux").arg("-V").output().is_ok(),
            "tmux is needed for the terminal tests (scripts/test.sh installs it)"
        );
        let t = Tmux {
            sock: dir.join("tmux.sock"),
            session: "loop-term".into(),
        };
        let out = t.run(&[
            "new-session",
            "-d",
            "-s",
            &t.session,
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            command,
        ]);
        assert!(out.status.success(), "{out:?}");
        t
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(args)
            .output()
            .unwrap()
    }

    /// The screen and its scrollback; with `escapes`, the colours too.
    fn screen(&self, escapes: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-S", "-300", "-t", &self.session];
        if escapes {
            args.push("-e");
        }
        String::from_utf8_lossy(&self.run(&args).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.session];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success());
    }

    /// Wait until the screen shows what `seen` looks for.
    fn wait_for(&self, what: &str, seen: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen(false);
            if seen(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "never saw {what}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// The shell command that runs `loop run` in the terminal, then says how
/// it exited.
fn loop_run(dir: &Path, project: &Path, env: &str, extra: &str) -> String {
    format!(
        "env LANG=C.UTF-8 TERM=xterm-256color {env} LOOP_STATE_DIR={} {} run 'build, then make approved.txt' --check 'test -f README.md' --allow-vacuous {extra} --model scripted:{} --project {} ; echo EXITED $?; sleep 60",
        dir.join("state").display(),
        env!("CARGO_BIN_EXE_loop"),
        dir.join("script.yaml").display(),
        project.display()
    )
}

/// A line of the screen that shows the slow command running: its spinner
/// and its elapsed seconds.
fn spinner_line(screen: &str) -> Option<String> {
    screen
        .lines()
        .find(|l| {
            l.contains("→ run_command `sleep")
                && l.chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c))
                && l.trim_end().ends_with(" s")
        })
        .map(str::to_string)
}

#[test]
fn a_live_run_shows_progress_asks_inline_and_verifies() {
    let (dir, project) = setup("live", 4);
    let t = Tmux::start(&dir, &loop_run(&dir, &project, "", ""));
    // The slow command: a spinner and its clock, and the budget line.
    let running = t.wait_for("the slow command's spinner", |s| spinner_line(s).is_some());
    assert!(
        running.contains("steps 1/") && running.contains("tokens"),
        "no status line:\n{running}"
    );
    // The clock moves.
    let first = spinner_line(&running).unwrap();
    let later = t.wait_for("the clock to move", |s| {
        spinner_line(s).is_some_and(|l| l != first && l.contains(" 2.") || l.contains(" 3."))
    });
    assert!(spinner_line(&later).is_some(), "{later}");
    // Colour is on: the screen has styled text.
    assert!(t.screen(true).contains("\x1b["), "no colour at all");
    // The prompt rule is asked here, and answered here.
    let asked = t.wait_for("the question", |s| s.contains("[y]es / [n]o / [a]lways"));
    assert!(asked.contains("touch approved.txt"), "{asked}");
    // The command that took seconds finished with a tick and its time.
    assert!(
        asked
            .lines()
            .any(|l| l.contains("→ run_command `sleep 4") && l.contains("✓ exit 0")),
        "{asked}"
    );
    t.keys(&["y", "Enter"]);
    let end = t.wait_for("the end", |s| s.contains("EXITED"));
    assert!(
        end.contains("approval: approved (by the terminal)"),
        "{end}"
    );
    // The check landed on its own line as it ran, then the decision.
    assert!(end.contains("✓ 1/1 check-1"), "{end}");
    assert!(end.contains("■ verified"), "{end}");
    assert!(end.contains("EXITED 0"), "{end}");
    // The bars are gone at the end: no spinner left on the screen.
    assert!(spinner_line(&end).is_none(), "{end}");
}

#[test]
fn no_color_leaves_no_escape_sequence_and_piped_output_no_spinner() {
    let (dir, project) = setup("nocolor", 2);
    let t = Tmux::start(&dir, &loop_run(&dir, &project, "NO_COLOR=1", "--yes"));
    let live = t.wait_for("the spinner", |s| spinner_line(s).is_some());
    assert!(live.contains("steps 1/"), "{live}");
    let end = t.wait_for("the end", |s| s.contains("EXITED"));
    assert!(end.contains("EXITED 0"), "{end}");
    let styled = t.screen(true);
    assert!(
        !styled.contains('\x1b'),
        "colour with NO_COLOR:\n{styled:?}"
    );
    drop(t);

    // Piped: the same story as plain lines, no spinner, no escapes.
    let (dir, project) = setup("piped", 2);
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .env("LOOP_STATE_DIR", dir.join("state"))
        .env("LANG", "C.UTF-8")
        .env("CLICOLOR_FORCE", "")
        .args([
            "run",
            "build, then make approved.txt",
            "--check",
            "test -f README.md",
            "--allow-vacuous",
            "--yes",
            "--model",
        ])
        .arg(format!("scripted:{}", dir.join("script.yaml").display()))
        .arg("--project")
        .arg(&project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("→ run_command `sleep 2"), "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
    assert!(
        !text.chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c)),
        "a spinner in piped output:\n{text}"
    );
    assert!(
        !text.contains("steps 1/"),
        "a status line when piped:\n{text}"
    );
}

/// The state of task `id`, as `loop status --json` says.
fn status(dir: &Path, project: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .env("LOOP_STATE_DIR", dir.join("state"))
        .args(["status", "last", "--json", "--project"])
        .arg(project)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "loop status: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn ctrl_c_asks_then_detach_hands_the_task_to_the_background() {
    let (dir, project) = setup("detach", 6);
    // The prompt rule is answered by --yes here: the background runtime
    // has no terminal.
    let t = Tmux::start(&dir, &loop_run(&dir, &project, "", "--yes"));
    t.wait_for("the spinner", |s| spinner_line(s).is_some());
    t.keys(&["C-c"]);
    let asked = t.wait_for("the Ctrl-C question", |s| s.contains("[d]etach"));
    assert!(asked.contains("[c]ancel the task"), "{asked}");
    t.keys(&["d", "Enter"]);
    let gone = t.wait_for("the hand-over", |s| s.contains("EXITED"));
    assert!(gone.contains("detached: task t-"), "{gone}");
    assert!(gone.contains("loop logs t-"), "{gone}");
    assert!(gone.contains("EXITED 0"), "{gone}");
    // The background runtime takes the task over and ends it.
    let start = Instant::now();
    let ended = loop {
        let s = status(&dir, &project);
        if s["outcome"].is_string() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the detached task never ended: {s}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(ended["outcome"], "verified", "{ended}");
    let id = ended["id"].as_str().unwrap();
    let log = project.join(".loop/tasks").join(id).join("detached.log");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("resumed"), "{log}");
    // The command stopped with this process ran once more in the
    // background, and only that once: it appends a line each time.
    let record = project.join(".loop/tasks").join(id).join("workspace.json");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    let built = std::path::Path::new(record["path"].as_str().unwrap()).join("built.txt");
    assert_eq!(std::fs::read_to_string(&built).unwrap(), "built\n");
}

#[test]
fn ctrl_c_twice_cancels_the_task() {
    let (dir, project) = setup("twice", 30);
    let t = Tmux::start(&dir, &loop_run(&dir, &project, "", "--yes"));
    t.wait_for("the spinner", |s| spinner_line(s).is_some());
    t.keys(&["C-c"]);
    t.wait_for("the Ctrl-C question", |s| s.contains("[d]etach"));
    t.keys(&["C-c"]);
    let end = t.wait_for("the end", |s| s.contains("EXITED"));
    assert!(end.contains("■ cancelled"), "{end}");
    assert!(end.contains("EXITED 1"), "{end}");
    let s = status(&dir, &project);
    assert_eq!(s["outcome"], "cancelled", "{s}");
}

#[test]
fn uncommitted_work_left_out_and_a_check_that_already_passes_are_warned_of() {
    let (dir, project) = setup("warnings", 0);
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&project)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    std::fs::write(project.join("README.md"), "edited, not committed\n").unwrap();
    std::fs::write(project.join("notes.txt"), "new, not added\n").unwrap();
    // A Loopfile not committed yet (what `loop init` leaves) is followed,
    // and said apart from the changes left out.
    std::fs::write(
        project.join("Loopfile.yaml"),
        "exec:\n  approval_timeout_secs: 120\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_loop"))
            .env("LOOP_STATE_DIR", dir.join("state"))
            .args([
                "run",
                "x",
                "--check",
                "test -f README.md",
                "--allow-vacuous",
                "--max-steps",
                "1",
            ])
            .args(extra)
            .arg("--model")
            .arg(format!("scripted:{}", dir.join("script.yaml").display()))
            .arg("--project")
            .arg(&project)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("warning: 2 uncommitted change(s) are left out of the task")
            && said.contains("README.md, notes.txt")
            && said.contains("--include-dirty carries them in"),
        "{said}"
    );
    assert!(
        said.contains(
            "note: Loopfile.yaml is not committed: this task follows it as it is in your checkout"
        ) && said.contains("git add Loopfile.yaml && git commit"),
        "{said}"
    );
    assert!(
        said.contains("warning: criterion `check-1` already passes before any change"),
        "{said}"
    );
    // Carried in, nothing is left out, and nothing is said about it.
    let out = run(&["--include-dirty"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!said.contains("left out of the task"), "{said}");
}

#[test]
fn what_the_model_wrote_never_reaches_the_terminal_as_escape_sequences() {
    let (dir, project) = setup("hostile", 0);
    // A command whose text carries colour and title sequences, then one
    // that waits for `loop approve` from elsewhere (the activity line says
    // so, styled by the runtime, not shown as escape codes).
    std::fs::write(
        dir.join("script.yaml"),
        "turns:
  - thought: \"\\e]0;pwned\\a\\e[2J think\"
    calls:
      - {tool: run_command, args: {command: \"echo '\\e[31mRED\\e[0m' > out.txt\"}}
  - calls:
      - {tool: run_command, args: {command: \"touch approved.txt\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
",
    )
    .unwrap();
    let t = Tmux::start(&dir, &loop_run(&dir, &project, "", "--on-prompt wait"));
    let waiting = t.wait_for("the wait for loop approve", |s| {
        s.contains("waiting for a person's answer")
    });
    assert!(
        !waiting.contains("^[[1m") && !waiting.contains("^[[33m"),
        "the runtime's own style shown as text:\n{waiting}"
    );
    // The model's sequences are shown, not obeyed.
    assert!(waiting.contains("^[[31mRED^[[0m"), "{waiting}");
    assert!(waiting.contains("^[]0;pwned^G^[[2J think"), "{waiting}");
    let styled = t.screen(true);
    assert!(!styled.contains("\u{1b}[31mRED"), "{styled:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_loop"))
        .env("LOOP_STATE_DIR", dir.join("state"))
        .args(["approve", "last", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let end = t.wait_for("the end", |s| s.contains("EXITED"));
    assert!(end.contains("EXITED 0"), "{end}");
}

/// What the model thinks before its slow command: longer than any line.
const THOUGHT: &str = "Write the configuration file the acceptance check wants first, then run the slow build command that prints its progress, and finish once everything is in place";

#[test]
fn story_lines_and_the_status_line_fit_a_narrow_terminal() {
    for (cols, rows) in [(100u16, 30u16), (80, 24)] {
        let (dir, project) = setup(&format!("width-{cols}"), 3);
        std::fs::write(
            dir.join("script.yaml"),
            format!(
                "turns:\n  - thought: {THOUGHT}\n    calls:\n      - {{tool: run_command, args: {{command: \"sleep 3\"}}}}\n  - calls:\n      - {{tool: finish, args: {{summary: done}}}}\n"
            ),
        )
        .unwrap();
        let t = Tmux::sized(&dir, &loop_run(&dir, &project, "", ""), cols, rows);
        // While the command runs, the status line is one line: its
        // budgets and its clock together.
        let running = t.wait_for("the status line", |s| {
            spinner_line(s).is_some() && s.contains("steps 1/")
        });
        let status = running.lines().find(|l| l.contains("steps 1/")).unwrap();
        assert!(
            status.trim_end().ends_with(" of 1800 s"),
            "the status line is cut or wrapped at {cols}:\n{running}"
        );
        let end = t.wait_for("the end", |s| s.contains("EXITED"));
        assert!(end.contains("EXITED 0"), "{end}");
        let width = |l: &str| l.chars().count();
        for line in end.lines() {
            assert!(width(line) <= usize::from(cols), "{line:?}");
        }
        // Broken between words, not inside one: every word of the
        // thought (as far as the story shows it) and of the next step is
        // whole on the screen.
        let words: std::collections::HashSet<&str> = end.split_whitespace().collect();
        let id = status_id(&dir, &project);
        let apply = format!("`loop apply {id}`");
        let shown = THOUGHT.split_whitespace().take(14);
        for w in shown.chain(apply.split_whitespace()) {
            assert!(
                words.contains(w),
                "`{w}` is broken at {cols} columns:\n{end}"
            );
        }
        // The thought did need more than one line here.
        assert!(!end.lines().any(|l| l.contains(THOUGHT)), "{end}");
    }
}

/// The id of the project's last task.
fn status_id(dir: &Path, project: &Path) -> String {
    status(dir, project)["id"].as_str().unwrap().to_string()
}

/// The ids a child's question names: the child's and its parent's.
fn asked_by(line: &str) -> (String, String) {
    let after = |from: &str| {
        line.split(from)
            .nth(1)
            .unwrap()
            .split([' ', ')'])
            .next()
            .unwrap()
            .to_string()
    };
    (after("⏸ task "), after("(a child of task "))
}

#[test]
fn children_ask_the_person_running_their_parent_one_question_at_a_time() {
    let (dir, project) = setup("children", 0);
    for p in ["a", "b"] {
        std::fs::create_dir_all(project.join(p)).unwrap();
        std::fs::write(project.join(p).join("README"), "start\n").unwrap();
    }
    let child = |p: &str| {
        format!(
            "      - tool: delegate
        args:
          instruction: \"make {p}/made.txt\"
          criteria:
            - {{id: {p}, text: \"{p} made\", checks: [{{file_exists: {p}/made.txt}}]}}
          paths: [{p}]
          budget: {{ max_steps: 4, max_tokens: 60000, timeout_secs: 300 }}
"
        )
    };
    let kid = |p: &str| {
        format!(
            "  - - calls:
        - {{tool: run_command, args: {{command: \"touch {p}/made.txt\"}}}}
    - calls:
        - {{tool: finish, args: {{summary: {p}}}}}
"
        )
    };
    std::fs::write(
        dir.join("script.yaml"),
        format!(
            "turns:\n  - calls:\n{}{}  - calls:\n      - {{tool: finish, args: {{summary: handed out}}}}\nchildren:\n{}{}",
            child("a"),
            child("b"),
            kid("a"),
            kid("b")
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("task.yaml"),
        "instruction: hand out a and b
criteria:
  - {id: kept, text: the readme is kept, checks: [{file_exists: README.md}]}
limits: { max_steps: 10, max_children: 2, max_depth: 1 }
",
    )
    .unwrap();
    let cmd = format!(
        "env LANG=C.UTF-8 TERM=xterm-256color LOOP_STATE_DIR={} {} run --task {} --allow-vacuous --model scripted:{} --project {} ; echo EXITED $?; sleep 60",
        dir.join("state").display(),
        env!("CARGO_BIN_EXE_loop"),
        dir.join("task.yaml").display(),
        dir.join("script.yaml").display(),
        project.display()
    );
    let t = Tmux::start(&dir, &cmd);
    let questions = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.contains("asks to run"))
            .map(str::to_string)
            .collect()
    };
    let first = t.wait_for("a child's question", |s| questions(s).len() == 1);
    let (first_child, parent) = asked_by(&questions(&first)[0]);
    assert_ne!(first_child, parent);
    // Both children wait for the person now; only one question is shown.
    let start = Instant::now();
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_loop"))
            .env("LOOP_STATE_DIR", dir.join("state"))
            .args(["status", &parent, "--json", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let kids = s["children"].as_array().cloned().unwrap_or_default();
        if kids.len() == 2 && kids.iter().all(|k| k["state"] == "awaiting_approval") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(questions(&t.screen(false)).len(), 1, "{}", t.screen(false));
    t.keys(&["y", "Enter"]);
    let second = t.wait_for("the other child's question", |s| questions(s).len() == 2);
    let (second_child, second_parent) = asked_by(&questions(&second)[1]);
    assert_eq!(second_parent, parent);
    assert_ne!(second_child, first_child);
    t.keys(&["n", "Enter"]);
    let end = t.wait_for("the end", |s| s.contains("EXITED"));
    assert!(end.contains("EXITED 0"), "{end}");
    // The answer typed went to the question on the screen: the first
    // child ran its command and is verified, the second was denied.
    let outcome = |id: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_loop"))
            .env("LOOP_STATE_DIR", dir.join("state"))
            .args(["status", id, "--json", "--project"])
            .arg(&project)
            .output()
            .unwrap();
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        s["outcome"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(outcome(&first_child), "verified");
    assert_ne!(outcome(&second_child), "verified");
}
