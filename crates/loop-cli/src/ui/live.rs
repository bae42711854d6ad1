//! The live view of a run on a terminal: finished lines scroll above; below
//! them a spinner line says what is happening now (the model being asked,
//! with a dimmed preview of the text it streams; a tool call running; check
//! k of n) with its elapsed time, and a status line shows steps, tokens,
//! dollars and time against the task's budgets.
//!
//! Ctrl-C asks: cancel the task, detach from it (it goes on in the
//! background; `loop logs --follow` re-attaches), or go on. A second Ctrl-C
//! cancels.

use crate::ui::screen::{Screen, Tone, defang};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use loop_protocol::{Event, Limits, Live};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the status line counts.
#[derive(Debug, Default)]
struct Tally {
    limits: Option<Limits>,
    steps: u32,
    tokens: u64,
    usd: f64,
    estimated: bool,
    verifications: u32,
    /// The model's text of the current turn, as streamed so far.
    preview: String,
    /// The step being asked for.
    thinking: Option<u32>,
    /// A verification streamed its checks (the report need not repeat them).
    checks_shown: bool,
    /// When the tool call running now began (none between calls).
    in_tool: Option<std::time::Instant>,
}

/// The spinner and status line under the scrolling story.
#[derive(Clone)]
pub struct LiveView {
    screen: Screen,
    bars: MultiProgress,
    activity: ProgressBar,
    status: ProgressBar,
    tally: Arc<Mutex<Tally>>,
    /// A question hides the bars.
    paused: Arc<std::sync::atomic::AtomicBool>,
    /// The task asked the person something that has no answer yet.
    asking: Arc<std::sync::atomic::AtomicBool>,
}

/// Seconds with one decimal, from the bar's own clock.
fn seconds_key(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = write!(w, "{:.1} s", state.elapsed().as_secs_f64());
}

impl LiveView {
    /// A view drawing on stdout.
    pub fn new(screen: Screen) -> LiveView {
        let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(12));
        let spinner: &[&str] = if screen.unicode {
            &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", "✓"]
        } else {
            &["-", "\\", "|", "/", "+"]
        };
        let activity = bars.add(ProgressBar::new_spinner());
        if let Ok(style) = ProgressStyle::with_template("  {spinner} {msg} {seconds}") {
            activity.set_style(style.tick_strings(spinner).with_key("seconds", seconds_key));
        }
        let status = bars.add(ProgressBar::new_spinner());
        if let Ok(style) = ProgressStyle::with_template("  {msg}{seconds}{prefix}") {
            status.set_style(style.with_key("seconds", seconds_key));
        }
        activity.set_message("preparing the task");
        activity.enable_steady_tick(Duration::from_millis(100));
        // The status line's clock moves between events too.
        status.set_message("elapsed ");
        status.enable_steady_tick(Duration::from_millis(500));
        LiveView {
            screen,
            bars,
            activity,
            status,
            tally: Arc::default(),
            paused: Arc::default(),
            asking: Arc::default(),
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Print finished text above the bars.
    pub fn print(&self, text: &str) {
        if text.is_empty() {
            return;
        }
        // Rendered, tabs and control characters are gone: the bars below
        // are redrawn from the width of what was printed above them.
        let text = self.screen.render(text);
        let body = text.strip_suffix('\n').unwrap_or(&text);
        // While a question hides the bars, lines go straight out.
        if self.paused.load(std::sync::atomic::Ordering::SeqCst) {
            println!("{body}");
        } else {
            let _ = self.bars.println(body);
        }
    }

    /// Say what is happening now (its clock restarts).
    /// Say what is happening now in `tone` (text of the runtime's own).
    fn doing_styled(&self, tone: Tone, what: &str) {
        self.activity.set_message(self.screen.paint(tone, what));
        self.activity.reset_elapsed();
    }

    /// `what` may hold what the model wrote (a command, a path): one
    /// line of it, defanged, cut to the terminal.
    fn doing(&self, what: &str) {
        let width = crate::ui::screen::terminal_width()
            .saturating_sub(16)
            .max(20);
        let mut lines = what.lines();
        let first = lines.next().unwrap_or_default();
        let line = if lines.next().is_some() {
            format!("{first} …")
        } else {
            first.to_string()
        };
        self.activity
            .set_message(self.screen.glyphs(&clip(&defang(&line), width)));
        self.activity.reset_elapsed();
    }

    /// The status line from the tally.
    fn show_status(&self, t: &Tally) {
        let Some(l) = &t.limits else { return };
        let dim = |s: String| self.screen.paint(Tone::Dim, &s);
        let usd = match l.budget_usd {
            Some(b) => format!("${:.4} of ${b:.2}", t.usd),
            None => format!("${:.4}", t.usd),
        };
        let steps = format!("steps {}/{}", t.steps, l.max_steps);
        let tokens = format!(
            "tokens {}{}/{}",
            count(t.tokens),
            if t.estimated { " (est.)" } else { "" },
            count(l.max_tokens)
        );
        let verifications = format!("verifications {}/{}", t.verifications, l.max_verifications);
        let clock = format!(" of {} s", l.timeout_secs);
        // The line fits the terminal (its indent and the clock's own
        // "123.4 s" with it): what matters least goes first.
        let room = crate::ui::screen::terminal_width().saturating_sub(2 + 8 + clock.len());
        let cost = format!("${:.4}", t.usd);
        let message = [
            vec![&steps, &tokens, &usd, &verifications],
            vec![&steps, &tokens, &cost],
            vec![&steps, &cost],
        ]
        .into_iter()
        .map(|parts| {
            let mut m = parts
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(" · ");
            m.push_str(" · ");
            m
        })
        .find(|m| m.chars().count() <= room)
        .unwrap_or_else(|| format!("{steps} · "));
        self.status.set_message(dim(self.screen.glyphs(&message)));
        self.status.set_prefix(dim(clock));
    }

    /// A recorded event: count it, and say what comes next.
    pub fn on_event(&self, event: &Event, describe: &dyn Fn(&str) -> String) {
        let mut t = self.tally();
        match event {
            Event::TaskStarted { contract, .. } => {
                t.limits = Some(contract.limits.clone());
                self.status.reset_elapsed();
                self.doing("starting");
            }
            Event::BudgetExtended {
                add_steps,
                add_tokens,
                add_usd,
                add_secs,
            } => {
                if let Some(l) = &mut t.limits {
                    l.max_steps += add_steps;
                    l.max_tokens += add_tokens;
                    l.budget_usd = l.budget_usd.map(|b| b + add_usd);
                    l.timeout_secs += add_secs;
                }
            }
            Event::ModelTurn { step, usage, .. } | Event::ModelMalformed { step, usage, .. } => {
                t.steps = t.steps.max(*step);
                t.tokens += usage.input_tokens + usage.output_tokens;
                t.usd += usage.cost_usd;
                t.estimated |= usage.estimated;
                t.thinking = None;
                t.preview.clear();
            }
            Event::ModelFailed { usage, .. } | Event::Reviewed { usage, .. } => {
                t.tokens += usage.input_tokens + usage.output_tokens;
                t.usd += usage.cost_usd;
                t.estimated |= usage.estimated;
            }
            Event::Intent { call_id, tool, .. } => {
                t.in_tool = Some(std::time::Instant::now());
                let what = describe(call_id);
                let what = if what.is_empty() { tool.clone() } else { what };
                self.doing(&format!("→ {what}"));
            }
            Event::ApprovalRequested { .. } | Event::CheckpointRequested { .. } => {
                self.doing_styled(Tone::Ask, "waiting for a person's answer");
            }
            Event::Verified { .. } => {
                t.verifications += 1;
                self.doing("deciding");
            }
            Event::Observed { .. } => t.in_tool = None,
            _ => {}
        }
        self.show_status(&t);
    }

    /// A moment no event records yet.
    pub fn on_live(&self, moment: &Live) {
        let mut t = self.tally();
        match moment {
            Live::Thinking { step } => {
                t.thinking = Some(*step);
                t.preview.clear();
                self.doing(&format!("cycle {step} · asking the model"));
            }
            Live::Text { fragment } => {
                // Bounded: only the tail is ever shown.
                t.preview.push_str(fragment);
                if t.preview.len() > 4096 {
                    let cut = t.preview.len() - 2048;
                    let cut = (cut..t.preview.len())
                        .find(|i| t.preview.is_char_boundary(*i))
                        .unwrap_or(t.preview.len());
                    t.preview.drain(..cut);
                }
                // Scrubbed whole: a secret split across fragments is
                // matched here, where the fragments are joined.
                let tail = last_line(&loop_sandbox::redact::scrub_literals(&t.preview), 70);
                let step = t.thinking.unwrap_or(t.steps + 1);
                self.activity.set_message(format!(
                    "cycle {step} · {}",
                    self.screen.paint(Tone::Dim, &self.screen.glyphs(&tail))
                ));
            }
            Live::Verifying { attempt, total } => {
                t.checks_shown = *total > 0;
                self.doing(&format!(
                    "verification #{attempt}: sealing the workspace, {total} check(s) to run"
                ));
            }
            Live::CheckStarted {
                index,
                total,
                criterion,
                check,
            } => self.doing(&format!("check {index}/{total} · {criterion} · {check}")),
            Live::CheckDone {
                index,
                total,
                criterion,
                passed,
                status,
                duration_ms,
            } => {
                let mark = if *passed { "✓" } else { "✗" };
                self.print(&format!(
                    "    {mark} {index}/{total} {criterion:<16} {status} · {duration_ms} ms\n"
                ));
                self.doing(&format!("check {index}/{total} done"));
            }
        }
    }

    /// How long the tool call running now has run (zero between calls).
    pub fn in_command_for(&self) -> Duration {
        self.tally()
            .in_tool
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    /// Whether the last verification's checks were already shown one by
    /// one (then its report need not list them again); resets.
    pub fn take_checks_shown(&self) -> bool {
        std::mem::take(&mut self.tally().checks_shown)
    }

    /// The task asks the person something (until [`LiveView::answered`]).
    pub fn ask(&self) {
        self.asking.store(true, std::sync::atomic::Ordering::SeqCst);
        self.pause();
    }

    /// The task's question has its answer.
    pub fn answered(&self) {
        self.asking
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.resume();
    }

    /// Whether a question of the task waits for its answer.
    pub fn asking(&self) -> bool {
        self.asking.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Hide the bars while a question is asked on the terminal.
    pub fn pause(&self) {
        use std::sync::atomic::Ordering;
        if !self.paused.swap(true, Ordering::SeqCst) {
            let _ = self.bars.clear();
            self.bars.set_draw_target(ProgressDrawTarget::hidden());
        }
    }

    /// Show the bars again after a question.
    pub fn resume(&self) {
        use std::sync::atomic::Ordering;
        if self.paused.swap(false, Ordering::SeqCst) {
            self.bars
                .set_draw_target(ProgressDrawTarget::stdout_with_hz(12));
        }
    }

    /// Remove the bars for good (the run has ended).
    pub fn finish(&self) {
        unwatch(self);
        self.activity.finish_and_clear();
        self.status.finish_and_clear();
        let _ = self.bars.clear();
    }
}

/// A count as people read it: 950, 19.3k, 1.2M.
fn count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// `s` cut to `max` characters, with an ellipsis when cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// The last non-empty line of `s`, its last `max` characters, controls out.
fn last_line(s: &str, max: usize) -> String {
    let line = s
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let clean: String = line.chars().filter(|c| !c.is_control()).collect();
    let n = clean.chars().count();
    if n <= max {
        clean
    } else {
        let tail: String = clean.chars().skip(n - max + 1).collect();
        format!("…{tail}")
    }
}

/// Where a detached task is handed over: the project and the task.
#[derive(Debug, Clone)]
pub struct Detach {
    /// The project root.
    pub project: PathBuf,
    /// The task, once known.
    pub task_id: Arc<Mutex<Option<String>>>,
    /// Who answers the task's questions once nobody is at this terminal:
    /// `allow` when this run answered yes to all, else `deny` or `wait`.
    pub on_prompt: &'static str,
    /// The person asked to detach: hand over once the step in flight is
    /// recorded.
    pub requested: Arc<std::sync::atomic::AtomicBool>,
}

impl Detach {
    /// Hand the task over to a background runtime and end this process
    /// (once, whoever calls first); back only if that cannot be done.
    pub fn now(&self, view: &LiveView) {
        static ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if ONCE.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // The other caller is handing over; this one waits for the end.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        let Some(task) = self.task_id.lock().ok().and_then(|t| t.clone()) else {
            ONCE.store(false, std::sync::atomic::Ordering::SeqCst);
            return;
        };
        view.finish();
        match hand_over(&self.project, &task, self.on_prompt) {
            Ok(log) => {
                println!(
                    "detached: task {task} goes on in the background (its output: {})\n  loop logs {task} --follow   re-attaches\n  loop cancel {task}          stops it",
                    log.display()
                );
                let _ = std::io::Write::flush(&mut std::io::stdout());
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("cannot detach: {e}; the task goes on here");
                self.requested
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                ONCE.store(false, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

/// The run a Ctrl-C is about: its view, and where it would be handed over.
type Watched = (LiveView, Option<Detach>);

/// The one slot the process's Ctrl-C watcher reads: the run being watched
/// now (a `--resume-interrupted` run watches several, one after another).
fn watched() -> &'static Mutex<Option<Watched>> {
    static SLOT: std::sync::OnceLock<Mutex<Option<Watched>>> = std::sync::OnceLock::new();
    SLOT.get_or_init(|| Mutex::new(None))
}

/// Make `view` (and its task's hand-over) the run Ctrl-C asks about; the
/// one watcher thread starts on first use.
pub fn watch_interrupts(view: LiveView, detach: Option<Detach>) {
    use loop_runtime::interrupt;
    if let Ok(mut slot) = watched().lock() {
        *slot = Some((view, detach));
    }
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        interrupt::ask_first(true);
        std::thread::spawn(watch);
    });
}

/// The run `view` belongs to has ended: Ctrl-C no longer asks about it.
pub fn unwatch(view: &LiveView) {
    if let Ok(mut slot) = watched().lock()
        && slot
            .as_ref()
            .is_some_and(|(v, _)| Arc::ptr_eq(&v.tally, &view.tally))
    {
        *slot = None;
    }
}

/// The watcher: on a pending Ctrl-C, ask the person about the watched run.
fn watch() {
    use loop_runtime::interrupt;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if !interrupt::pending() {
            continue;
        }
        let current = watched().lock().ok().and_then(|s| s.clone());
        let Some((view, detach)) = current else {
            // Nothing is watched: a Ctrl-C now cancels, as without a question.
            interrupt::cancel();
            continue;
        };
        view.pause();
        let task = detach
            .as_ref()
            .and_then(|d| d.task_id.lock().ok().and_then(|t| t.clone()));
        let offer_detach = task.is_some();
        eprint!(
            "{}",
            view.screen.glyphs(&format!(
                "\n⏸ Ctrl-C: [c]ancel the task{}, or Enter to go on (Ctrl-C again cancels): ",
                if offer_detach {
                    ", [d]etach from it (it keeps running; `loop logs --follow` re-attaches)"
                } else {
                    ""
                }
            ))
        );
        crate::ui::prompt::drain_lines();
        let answer = loop {
            if !interrupt::pending() {
                // A second Ctrl-C cancelled meanwhile.
                break None;
            }
            match crate::ui::prompt::next_line(Duration::from_millis(100)) {
                crate::ui::prompt::Line::Typed(line) => break Some(line),
                crate::ui::prompt::Line::Nothing => {}
                // Nobody can answer any more (stdin is closed): cancel, as
                // a Ctrl-C without a question does.
                crate::ui::prompt::Line::Closed => break Some("c".into()),
            }
        };
        eprintln!();
        match answer.as_deref().map(str::trim) {
            None => eprintln!("cancelling: the task stops at its next decision point"),
            Some("c" | "cancel") => {
                eprintln!("cancelling: the task stops at its next decision point");
                interrupt::cancel();
            }
            Some("d" | "detach") if offer_detach => {
                if let Some(d) = &detach {
                    // At the next recorded event nothing is in flight and
                    // nothing is done twice (the story hands over there).
                    // A command that runs on is not waited for: it is
                    // stopped with this process and run again in the
                    // background, as after a crash. A model call is waited
                    // for, so what it costs is recorded.
                    d.requested.store(true, std::sync::atomic::Ordering::SeqCst);
                    eprintln!("detaching once the step in flight is recorded…");
                    loop {
                        std::thread::sleep(Duration::from_millis(100));
                        if view.in_command_for() > Duration::from_secs(2) {
                            d.now(&view);
                            break;
                        }
                        if !d.requested.load(std::sync::atomic::Ordering::SeqCst) {
                            break;
                        }
                    }
                }
                interrupt::dismiss();
            }
            Some(_) => interrupt::dismiss(),
        }
        // A question the task itself asked may still wait for its answer:
        // the bars stay hidden until it has one.
        if !view.asking() {
            view.resume();
        }
    }
}

/// Start `loop resume TASK` in its own session, waiting for this process
/// to end before it claims the task (the step this process was in the
/// middle of is rolled back and done again, as after a crash). Its log.
#[allow(clippy::disallowed_methods)] // the task's own detached.log in the task directory the runtime made
fn hand_over(
    project: &std::path::Path,
    task: &str,
    on_prompt: &str,
) -> Result<PathBuf, crate::CliError> {
    use crate::CliError;
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::internal(format!("where is this program? {e}")))?;
    let log = loop_runtime::task_dir(project, task).join("detached.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| CliError::internal(format!("cannot open {}: {e}", log.display())))?;
    let err = file
        .try_clone()
        .map_err(|e| CliError::internal(format!("cannot open {}: {e}", log.display())))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("resume")
        .arg(task)
        .arg("--project")
        .arg(project)
        .args(["--on-prompt", on_prompt, "--after-pid"])
        .arg(std::process::id().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(file)
        .stderr(err);
    // SAFETY: setsid is async-signal-safe; the child leaves this terminal's
    // session so a hang-up or Ctrl-C there does not reach it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| CliError::internal(format!("cannot start the background runtime: {e}")))?;
    Ok(log)
}

/// How a question names the task's parent, when it is a child.
fn child_of(parent: Option<&str>) -> String {
    parent.map_or_else(String::new, |p| format!(" (a child of task {p})"))
}

/// Questions on stderr, answers from stdin; a live view is hidden while
/// a question waits (the story shows it again when the answer lands).
pub struct Terminal(pub Option<LiveView>);

impl loop_runtime::Prompter for Terminal {
    fn ask(&mut self, question: &loop_runtime::Question<'_>) {
        let text = match question {
            loop_runtime::Question::Checkpoint {
                task_id,
                parent,
                detail,
            } => format!(
                "\n⏸ task {task_id}{} asks: {detail}\n  go on? [y]es, [n]o, or type guidance for the model (also `loop approve {task_id}` elsewhere): ",
                child_of(*parent)
            ),
            loop_runtime::Question::Approval {
                task_id,
                parent,
                detail,
                rule,
            } => format!(
                "\n⏸ task {task_id}{} asks to run `{detail}` (rule `{rule}`)\n  [y]es / [n]o / [a]lways for this rule this task (also `loop approve {task_id}` elsewhere): ",
                child_of(*parent)
            ),
        };
        if let Some(view) = &self.0 {
            view.ask();
        }
        let screen = crate::ui::screen::Screen::of_stdout();
        eprint!("{}", screen.glyphs(&crate::ui::screen::defang(&text)));
        let _ = std::io::Write::flush(&mut std::io::stderr());
        crate::ui::prompt::drain_lines();
    }

    fn answer(&mut self) -> Option<String> {
        // While a Ctrl-C asks its own question, what is typed is its answer.
        if loop_runtime::interrupt::pending() {
            return None;
        }
        crate::ui::prompt::typed_line()
    }

    fn again(&mut self, expected: &str) {
        eprint!("  answer {expected}: ");
        let _ = std::io::Write::flush(&mut std::io::stderr());
    }

    fn settled(&mut self) {
        // A child's answer is not in this task's story: the bars come
        // back here (the story's own answer does the same for the task's).
        if let Some(view) = &self.0 {
            view.answered();
        }
    }
}
