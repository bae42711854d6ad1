//! `loop eval`: does "verified" agree with reality? Each case of a suite
//! is run as a task, and then judged by an oracle the agent never sees: a
//! command run on the delivered change set applied to a fresh copy of the
//! starting project, with the oracle's own files added. A case's run is
//!
//! - **solved**: verified, and the oracle passes;
//! - **a false acceptance**: verified, and the oracle fails;
//! - **a safe failure**: not verified (its outcome says how).
//!
//! A case is a directory: `case.yaml` (the instruction, the oracle, what
//! kind of work it is), `project/` (the starting project), `oracle/` (what
//! the oracle adds; never in the task's workspace), optionally the
//! contract the agent sees, and `solutions/*.yaml` (scripted models: with
//! `--model scripted` every solution runs; a name starting `right` must be
//! solved, any other must not be a false acceptance).

use crate::{Error, Quiet, Runtime};
use loop_workspace::door;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `case.yaml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// What the agent is asked.
    pub instruction: String,
    /// The kind of work (fix a failing test, a feature, a refactor, a
    /// document, structured output).
    pub kind: String,
    /// The project's language.
    pub language: String,
    /// The contract the agent sees, relative to the case (none: drafted
    /// from the instruction).
    #[serde(default)]
    pub contract: Option<String>,
    /// The oracle: a shell command, run in the fresh copy.
    pub oracle: String,
    /// Seconds the oracle may take.
    #[serde(default = "default_oracle_secs")]
    pub oracle_timeout_secs: u64,
}

fn default_oracle_secs() -> u64 {
    300
}

/// How one run came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseVerdict {
    /// Verified, and the oracle passes.
    Solved,
    /// Verified, and the oracle fails.
    FalseAcceptance,
    /// Not verified.
    SafeFailure,
}

impl CaseVerdict {
    /// The verdict in words (`solved`, `FALSE ACCEPTANCE`, `safe failure`).
    pub fn words(self) -> &'static str {
        match self {
            CaseVerdict::Solved => "solved",
            CaseVerdict::FalseAcceptance => "FALSE ACCEPTANCE",
            CaseVerdict::SafeFailure => "safe failure",
        }
    }
}

/// One run of one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseRun {
    /// The case (its directory's name).
    pub case: String,
    /// Its kind and language.
    pub kind: String,
    /// Its language.
    pub language: String,
    /// The scripted solution run (`--model scripted`), else none.
    pub solution: Option<String>,
    /// Which repeat (from 1).
    pub repeat: u32,
    /// The verdict.
    pub verdict: CaseVerdict,
    /// The task's outcome.
    pub outcome: String,
    /// Why it ended so, in a sentence (or why it could not start).
    #[serde(default)]
    pub reason: String,
    /// Whether the oracle passed (when it ran: only for a verified task).
    pub oracle_passed: Option<bool>,
    /// What the oracle said, when it failed (bounded).
    pub oracle_said: Option<String>,
    /// Model turns, tokens and dollars used.
    pub steps: u64,
    /// Tokens.
    pub tokens: u64,
    /// Dollars.
    pub usd: f64,
    /// Wall time of the task, in milliseconds.
    pub wall_ms: u64,
    /// The receipt verified offline (intact, and its outcome verified).
    pub receipt_intact: bool,
    /// Its checks, replayed without a model, came out as recorded (none
    /// when there was nothing to replay).
    pub replay_reproduced: Option<bool>,
    /// The task's id.
    pub task_id: String,
}

/// What `loop eval` was asked.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The suite.
    pub suite: PathBuf,
    /// `scripted` (every case's solutions), or a model spec.
    pub model: String,
    /// Runs per case (and solution).
    pub repeat: u32,
    /// Cases run at once.
    pub jobs: usize,
    /// Where the cases' projects are made.
    pub work: PathBuf,
    /// A Loopfile put in every case's starting project (a real model's
    /// settings: base URL, streaming, tool choice, pricing, …).
    pub loopfile: Option<PathBuf>,
}

/// A whole suite's runs, and their tally.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalReport {
    /// The suite's directory.
    pub suite: String,
    /// The model.
    pub model: String,
    /// The SHA-256 of the Loopfile given to every case, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loopfile_sha256: Option<String>,
    /// Every run.
    pub runs: Vec<CaseRun>,
    /// Runs solved.
    pub solved: u64,
    /// Runs verified whose oracle failed.
    pub false_acceptances: u64,
    /// Runs not verified.
    pub safe_failures: u64,
    /// With scripted solutions: `right` ones not solved.
    pub right_unsolved: u64,
    /// With scripted solutions: wrong ones the oracle passes (the case's
    /// wrong solution is not wrong: a defect of the suite).
    #[serde(default)]
    pub wrong_solved: u64,
}

impl EvalReport {
    /// The table, in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| case | kind | solution | verdict | outcome | oracle | steps | tokens | $ | wall ms | receipt | replay |\n| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |\n",
        );
        // A cell is one line, and a `|` in it is not a column.
        let cell = |s: &str| {
            s.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace('|', "\\|")
        };
        for r in &self.runs {
            let started = !r.task_id.is_empty();
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.4} | {} | {} | {} |\n",
                cell(&r.case),
                cell(&r.kind),
                cell(r.solution.as_deref().unwrap_or("-")),
                match r.verdict {
                    CaseVerdict::FalseAcceptance => "**FALSE ACCEPTANCE**",
                    v => v.words(),
                },
                cell(&r.outcome),
                match r.oracle_passed {
                    Some(true) => "pass",
                    Some(false) => "fail",
                    None => "-",
                },
                r.steps,
                r.tokens,
                r.usd,
                r.wall_ms,
                match (started, r.receipt_intact) {
                    (false, _) => "-",
                    (true, true) => "intact",
                    (true, false) => "BROKEN",
                },
                match r.replay_reproduced {
                    Some(true) => "reproduced",
                    Some(false) => "DIFFERS",
                    None => "-",
                },
            ));
        }
        out.push_str(&format!(
            "\n{} runs: {} solved, {} false acceptances, {} safe failures{}\n",
            self.runs.len(),
            self.solved,
            self.false_acceptances,
            self.safe_failures,
            if self.model == "scripted" {
                format!(
                    "; right solutions unsolved: {}; wrong solutions the oracle passes: {}",
                    self.right_unsolved, self.wrong_solved
                )
            } else {
                String::new()
            }
        ));
        out
    }
}

/// The cases of `suite`: every directory holding a `case.yaml`, by name.
pub fn cases(suite: &Path) -> Result<Vec<PathBuf>, Error> {
    // Through the door: a case that is a link, or whose case.yaml is one,
    // is not a case.
    let mut out: Vec<PathBuf> = door::list(suite, None)
        .map_err(|e| Error::usage(e.to_string()))?
        .into_iter()
        .filter(|n| door::is_file(suite, format!("{n}/case.yaml")))
        .map(|n| suite.join(n))
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(Error::usage(format!(
            "{}: no case (a directory with a case.yaml)",
            suite.display()
        )));
    }
    Ok(out)
}

/// Read `dir/case.yaml`.
pub fn read_case(dir: &Path) -> Result<CaseFile, Error> {
    let path = dir.join("case.yaml");
    let text = door::read_text(dir, "case.yaml", door::MAX_PROJECT_FILE)
        .map_err(|e| Error::usage(e.to_string()))?
        .ok_or_else(|| Error::usage(format!("{}: not there", path.display())))?;
    let json = loop_protocol::yaml::parse(&text)
        .and_then(|n| n.to_json())
        .map_err(|e| Error::usage(format!("{}:{}: {}", path.display(), e.pos, e.message)))?;
    serde_json::from_value(json).map_err(|e| Error::usage(format!("{}: {e}", path.display())))
}

/// One unit of work: a case, a solution (scripted) and a repeat.
struct Job {
    dir: PathBuf,
    case: CaseFile,
    solution: Option<PathBuf>,
    repeat: u32,
}

/// Run the suite.
///
/// `progress` hears of each run as it ends (how many have, of how many,
/// and the run, or none when it could not be made), from the thread that
/// ran it.
pub fn run(
    opts: &EvalOptions,
    progress: &(dyn Fn(usize, usize, Option<&CaseRun>) + Sync),
) -> Result<EvalReport, Error> {
    // The Loopfile given to every case is read and checked once, here: a
    // bad one is the command's error, not twelve tasks that cannot start.
    let loopfile = opts.loopfile.as_deref().map(suite_loopfile).transpose()?;
    let loopfile_sha256 = loopfile
        .as_deref()
        .map(|t| loop_protocol::hash::sha256_hex(t.as_bytes()));
    let jobs = jobs(opts, loopfile.is_some())?;
    let total = jobs.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
                    let Some((n, job)) = next else { break };
                    let r = run_one(opts, loopfile.as_deref(), &job, n);
                    let ended = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    progress(ended, total, r.as_ref().ok());
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((n, r));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(n, _)| *n);
    let mut runs = Vec::new();
    for (_, r) in results {
        runs.push(r?);
    }
    let count = |v: CaseVerdict| runs.iter().filter(|r| r.verdict == v).count() as u64;
    let right_unsolved = runs
        .iter()
        .filter(|r| {
            r.solution
                .as_deref()
                .is_some_and(|s| s.starts_with("right"))
                && r.verdict != CaseVerdict::Solved
        })
        .count() as u64;
    let wrong_solved = runs
        .iter()
        .filter(|r| {
            r.solution
                .as_deref()
                .is_some_and(|s| !s.starts_with("right"))
                && r.verdict == CaseVerdict::Solved
        })
        .count() as u64;
    Ok(EvalReport {
        wrong_solved,
        suite: opts.suite.display().to_string(),
        model: opts.model.clone(),
        loopfile_sha256,
        solved: count(CaseVerdict::Solved),
        false_acceptances: count(CaseVerdict::FalseAcceptance),
        safe_failures: count(CaseVerdict::SafeFailure),
        right_unsolved,
        runs,
    })
}

/// The Loopfile given to every case, read and checked once: a bad one is
/// the command's error, not twelve tasks that cannot start. Only the
/// model's settings: any other section (verification, exec, rules,
/// limits, network, ...) would change what a case's checks mean or
/// allow, and so what its verdicts measure.
fn suite_loopfile(path: &Path) -> Result<String, Error> {
    let text = door::read_named_text(path, door::MAX_PROJECT_FILE)
        .map_err(|e| Error::usage(format!("--loopfile: {e}")))?;
    crate::loopfile::Loopfile::parse(&text, &path.display().to_string())?;
    let keys = loop_protocol::yaml::parse(&text)
        .and_then(|n| n.to_json())
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
        .unwrap_or_default();
    let other: Vec<&String> = keys.iter().filter(|k| *k != "models").collect();
    if !other.is_empty() {
        return Err(Error::usage(format!(
            "--loopfile {}: only `models:` is taken (the model's settings); `{}` would change what the cases' checks mean",
            path.display(),
            other
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join("`, `")
        )));
    }
    Ok(text)
}

/// Every run the suite asks for: each case, with each scripted solution
/// (`--model scripted`) or the model, each repeat.
fn jobs(opts: &EvalOptions, with_loopfile: bool) -> Result<Vec<Job>, Error> {
    let mut jobs = Vec::new();
    for dir in cases(&opts.suite)? {
        let case = read_case(&dir)?;
        // Before any case runs: a case with a Loopfile (or anything by that
        // name, a link included) is not silently given another.
        if with_loopfile
            && !matches!(
                door::node(&dir, "project/Loopfile.yaml"),
                Ok(loop_workspace::Node::Missing)
            )
        {
            return Err(Error::usage(format!(
                "{}: the case has its own Loopfile.yaml, which --loopfile would replace",
                dir.display()
            )));
        }
        let solutions: Vec<Option<PathBuf>> = if opts.model == "scripted" {
            let mut s: Vec<PathBuf> = door::list(&dir, Some(Path::new("solutions")))
                .map_err(|e| Error::usage(e.to_string()))?
                .into_iter()
                .filter(|n| n.ends_with(".yaml"))
                .map(|n| dir.join("solutions").join(n))
                .collect();
            s.sort();
            if s.is_empty() {
                return Err(Error::usage(format!(
                    "{}/solutions: no scripted solution (*.yaml)",
                    dir.display()
                )));
            }
            s.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        for solution in solutions {
            for repeat in 1..=opts.repeat.max(1) {
                jobs.push(Job {
                    dir: dir.clone(),
                    case: case.clone(),
                    solution: solution.clone(),
                    repeat,
                });
            }
        }
    }
    Ok(jobs)
}

fn copy(src: &Path, dst: &Path) -> Result<(), Error> {
    loop_workspace::fsutil::copy_tree(src, dst, &|_| false, true)
        .map(|_| ())
        .map_err(|e| Error::internal(format!("copy {} to {}: {e}", src.display(), dst.display())))
}

fn git(dir: &Path, args: &[&str]) -> Result<(), Error> {
    let out = std::process::Command::new("git")
        .args(["-c", "user.email=eval@loop", "-c", "user.name=loop eval"])
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| Error::internal(format!("git: {e}")))?;
    if !out.status.success() {
        return Err(Error::internal(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Run one job: the task in a fresh repository of the case's project,
/// then the oracle on a fresh copy with the change set applied.
#[allow(clippy::disallowed_methods)] // eval's own scratch projects; the Loopfile is a new file (create_new: never through a link)
fn run_one(
    opts: &EvalOptions,
    loopfile: Option<&str>,
    job: &Job,
    n: usize,
) -> Result<CaseRun, Error> {
    let name = job
        .dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let solution = job
        .solution
        .as_ref()
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned());
    let base = opts.work.join(format!(
        "{n:03}-{name}-{}-{}",
        solution.as_deref().unwrap_or("model"),
        job.repeat
    ));
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    starting_project(job, loopfile, &project)?;
    let contract = case_contract(job)?;
    let model = match &job.solution {
        Some(p) => format!(
            "scripted:{}",
            p.canonicalize()
                .map_err(|e| Error::usage(format!("{}: {e}", p.display())))?
                .display()
        ),
        None => opts.model.clone(),
    };
    let rt = Runtime::open(&project)?;
    let started = Instant::now();
    let started_task = rt.start(
        crate::TaskRequest {
            instruction: Some(job.case.instruction.clone()).filter(|_| job.case.contract.is_none()),
            contract,
            accept_draft: true,
            model: Some(model),
            isolation: loop_sandbox::IsolationLevel::Preferred,
            on_prompt: Some(crate::OnPrompt::Deny),
            via: crate::Via::Eval,
            ..Default::default()
        },
        &mut Quiet,
    );
    let wall_ms = started.elapsed().as_millis() as u64;
    // A task that could not even start (a drafted contract the critic
    // refuses, a model that cannot be reached) is a safe failure, said.
    let report = match started_task {
        Ok(r) => r,
        Err(e) => return Ok(not_started(job, (name, solution), e, wall_ms)),
    };
    let verified = report.outcome.kind == loop_protocol::OutcomeKind::Verified;
    let used = rt.status(&report.task_id)?.used;
    let check = crate::ops::receipts::verify(&report.receipt, None, None)?;
    let replay_reproduced = crate::ops::receipts::replay(&report.receipt)
        .ok()
        .map(|r| r.reproduced);
    let (oracle_passed, oracle_said) = if verified {
        let (passed, said) = oracle(&job.dir, &job.case, &base, &report.task_id, &project)?;
        (Some(passed), (!passed).then_some(said))
    } else {
        (None, None)
    };
    let verdict = match (verified, oracle_passed) {
        (true, Some(true)) => CaseVerdict::Solved,
        (true, _) => CaseVerdict::FalseAcceptance,
        (false, _) => CaseVerdict::SafeFailure,
    };
    Ok(CaseRun {
        case: name,
        kind: job.case.kind.clone(),
        language: job.case.language.clone(),
        solution,
        repeat: job.repeat,
        verdict,
        outcome: report.outcome.to_string(),
        reason: report.outcome.reason.clone(),
        oracle_passed,
        oracle_said,
        steps: used.steps,
        tokens: used.tokens,
        usd: used.usd,
        wall_ms,
        receipt_intact: check.intact,
        replay_reproduced,
        task_id: report.task_id,
    })
}

/// The case's starting project at `project`: its files, the suite's
/// Loopfile when one is given (part of the starting project, committed
/// with it, so no part of the change set the oracle judges; a new file,
/// never written through a link: the suite's files are input), one
/// commit.
#[allow(clippy::disallowed_methods)] // the eval's own work directory
fn starting_project(job: &Job, loopfile: Option<&str>, project: &Path) -> Result<(), Error> {
    copy(&job.dir.join("project"), project)?;
    if let Some(text) = loopfile {
        let at = project.join("Loopfile.yaml");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&at)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| Error::usage(format!("{}: {e}", at.display())))?;
    }
    git(project, &["init", "-q"])?;
    git(project, &["add", "-A"])?;
    git(project, &["commit", "-qm", "the case's starting project"])?;
    Ok(())
}

/// The contract the case gives, or none (drafted by the intake; an empty
/// instruction is the suite's mistake, not the case's failure).
fn case_contract(job: &Job) -> Result<crate::ContractInput, Error> {
    match &job.case.contract {
        Some(rel) => {
            let path = job.dir.join(rel);
            let text = door::read_text(&job.dir, rel, door::MAX_PROJECT_FILE)
                .map_err(|e| Error::usage(e.to_string()))?
                .ok_or_else(|| Error::usage(format!("{}: not there", path.display())))?;
            let c = loop_protocol::Contract::from_yaml(&text, &path.display().to_string())
                .map_err(|e| Error::usage(e.to_string()))?;
            Ok(crate::ContractInput::Given(Box::new(c)))
        }
        None => {
            loop_protocol::Contract::instruction_only(&job.case.instruction)
                .map_err(|e| Error::usage(e.to_string()))?;
            Ok(crate::ContractInput::None)
        }
    }
}

/// A task that could not even start (a drafted contract the critic
/// refuses, a model that cannot be reached): a safe failure, said.
fn not_started(
    job: &Job,
    (name, solution): (String, Option<String>),
    e: Error,
    wall_ms: u64,
) -> CaseRun {
    CaseRun {
        case: name,
        kind: job.case.kind.clone(),
        language: job.case.language.clone(),
        solution,
        repeat: job.repeat,
        verdict: CaseVerdict::SafeFailure,
        outcome: "not started".into(),
        reason: e.message,
        oracle_passed: None,
        oracle_said: None,
        steps: 0,
        tokens: 0,
        usd: 0.0,
        wall_ms,
        receipt_intact: false,
        replay_reproduced: None,
        task_id: String::new(),
    }
}

/// The oracle on a fresh copy of the starting project with the task's
/// change set applied and the oracle's files added: whether it passed,
/// and its output's tail.
fn oracle(
    dir: &Path,
    case: &CaseFile,
    base: &Path,
    task_id: &str,
    project: &Path,
) -> Result<(bool, String), Error> {
    let fresh = base.join("oracle");
    copy(&dir.join("project"), &fresh)?;
    let patch = project
        .join(".loop/receipts")
        .join(format!("{task_id}.changes.patch"));
    // Every shipped task writes its change set, empty or not: a verified
    // task without one cannot be judged, and is not judged as unchanged.
    #[allow(clippy::disallowed_methods)] // the change set the runtime just wrote
    let len = std::fs::metadata(&patch)
        .map_err(|e| Error::internal(format!("{}: {e}", patch.display())))?
        .len();
    if len > 0 {
        let out = std::process::Command::new("git")
            .args(["apply", "--whitespace=nowarn"])
            .arg(&patch)
            .current_dir(&fresh)
            .output()
            .map_err(|e| Error::internal(format!("git apply: {e}")))?;
        if !out.status.success() {
            return Ok((
                false,
                format!(
                    "the change set does not apply to the starting project: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
    }
    if door::is_dir(dir, "oracle") {
        copy(&dir.join("oracle"), &fresh)?;
    }
    let mut req = loop_sandbox::ExecRequest::shell(case.oracle.clone(), &fresh);
    req.timeout = std::time::Duration::from_secs(case.oracle_timeout_secs.max(1));
    let r = loop_sandbox::run(&req).map_err(|e| Error::internal(format!("the oracle: {e}")))?;
    let passed = r.exit_code == Some(0) && !r.timed_out;
    let said = format!(
        "exit {:?}{}: {}",
        r.exit_code,
        if r.timed_out { " (timed out)" } else { "" },
        tail(&(r.stdout.excerpt() + &r.stderr.excerpt()), 1200)
    );
    Ok((passed, said))
}

/// The last `max` bytes of `text` (on a character boundary).
fn tail(text: &str, max: usize) -> String {
    let mut at = text.len().saturating_sub(max);
    while !text.is_char_boundary(at) {
        at += 1;
    }
    text[at..].to_string()
}
