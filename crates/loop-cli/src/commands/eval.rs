//! `loop eval`: a suite's cases run as tasks and judged by their oracles.

use crate::CliError;
use crate::cli::EvalArgs;

/// `loop eval SUITE`: its options from the flags, a fresh work directory.
pub(crate) fn eval(args: EvalArgs, json: bool) -> Result<u8, CliError> {
    let EvalArgs {
        suite,
        model,
        repeat,
        jobs,
        compare,
        out,
        loopfile,
        keep,
    } = args;
    eval_cmd(
        loop_runtime::EvalOptions {
            suite,
            model,
            repeat: repeat.max(1),
            jobs: jobs.max(1),
            work: std::env::temp_dir().join(format!(
                "loop-eval-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            )),
            loopfile,
        },
        compare.as_deref(),
        out.as_deref(),
        keep,
        json,
    )
}

/// `loop eval`.
#[allow(clippy::disallowed_methods)] // loop eval's own scratch directory and report, named by the person
fn eval_cmd(
    opts: loop_runtime::EvalOptions,
    compare: Option<&std::path::Path>,
    out: Option<&std::path::Path>,
    keep: bool,
    json: bool,
) -> Result<u8, CliError> {
    let old: Option<loop_runtime::EvalReport> = match compare {
        Some(p) => {
            let text = loop_workspace::door::read_named_text(p, 64 << 20)
                .map_err(|e| CliError::usage(format!("--compare: {e}")))?;
            Some(serde_json::from_str(&text).map_err(|e| {
                CliError::usage(format!("{}: not an eval report: {e}", p.display()))
            })?)
        }
        None => None,
    };
    let work = opts.work.clone();
    // A directory of this run's own (a leftover of the same name, from a
    // process that had this id before, is never reused or removed).
    std::fs::create_dir_all(work.parent().unwrap_or(std::path::Path::new("/")))
        .and_then(|_| std::fs::create_dir(&work))
        .map_err(|e| CliError::usage(format!("{}: {e}", work.display())))?;
    // Runs take minutes: each one is said as it ends, on stderr (stdout
    // keeps the report alone, for a pipe or a file).
    eprintln!(
        "loop eval: running the suite {} with {} ({} at a time)",
        opts.suite.display(),
        opts.model,
        opts.jobs
    );
    let report = loop_runtime::run_eval(&opts, &said_run);
    if keep {
        eprintln!(
            "loop eval: the cases' projects are kept in {}",
            work.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let report = report?;
    let text = serde_json::to_string_pretty(&report)
        .map_err(|e| CliError::internal(format!("the report: {e}")))?;
    if let Some(p) = out {
        std::fs::write(p, &text).map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?;
    }
    let mut failed =
        report.false_acceptances > 0 || report.right_unsolved > 0 || report.wrong_solved > 0;
    let mut changes = String::new();
    if let Some(old) = &old {
        let key = |r: &loop_runtime::CaseRun| (r.case.clone(), r.solution.clone(), r.repeat);
        for r in &report.runs {
            let before = old
                .runs
                .iter()
                .find(|o| key(o) == key(r))
                .map(|o| o.verdict);
            if before != Some(r.verdict) {
                changes.push_str(&format!(
                    "{} {} #{}: {:?} -> {:?}\n",
                    r.case,
                    r.solution.as_deref().unwrap_or("-"),
                    r.repeat,
                    before,
                    r.verdict
                ));
            }
        }
        changes.push_str(&format!(
            "false acceptances: {} -> {}; solved: {} -> {}\n",
            old.false_acceptances, report.false_acceptances, old.solved, report.solved
        ));
        if old.model != report.model || old.loopfile_sha256 != report.loopfile_sha256 {
            changes.push_str(&format!(
                "note: the runs differ in their model or its settings ({} {} -> {} {})\n",
                old.model,
                old.loopfile_sha256
                    .as_deref()
                    .map_or("-", |s| &s[..12.min(s.len())]),
                report.model,
                report
                    .loopfile_sha256
                    .as_deref()
                    .map_or("-", |s| &s[..12.min(s.len())]),
            ));
        }
        failed = report.false_acceptances > old.false_acceptances;
    }
    if json {
        println!("{text}");
    } else {
        print!("{}", report.markdown());
        if !changes.is_empty() {
            print!(
                "\ncompared with {}:\n{changes}",
                compare.map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
    }
    Ok(u8::from(failed))
}

/// One run of the suite ended: said on stderr (`done` of `total`).
fn said_run(done: usize, total: usize, run: Option<&loop_runtime::CaseRun>) {
    let what = match run {
        Some(r) => format!(
            "{}{} #{}: {} ({}, {:.1} s)",
            r.case,
            r.solution
                .as_deref()
                .map(|s| format!(" {s}"))
                .unwrap_or_default(),
            r.repeat,
            r.verdict.words(),
            r.outcome,
            r.wall_ms as f64 / 1000.0
        ),
        None => "a run could not be made (the error follows when the others end)".into(),
    };
    eprintln!(
        "loop eval: {done}/{total} {}",
        crate::ui::screen::defang(&what)
    );
}
