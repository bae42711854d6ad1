//! `loop audit`'s readiness score, every point of which is a check that
//! was actually run here, and `loop cost`'s estimate of what runs cost.

use crate::Error;
use std::path::Path;

/// One point of the score.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    /// What is checked.
    pub point: &'static str,
    /// Whether it holds.
    pub ok: bool,
    /// What the check found.
    pub detail: String,
    /// What to do when it does not hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

/// The score.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Readiness {
    /// Points that hold.
    pub score: usize,
    /// Points checked.
    pub max: usize,
    /// Each point.
    pub points: Vec<Point>,
}

fn point(point: &'static str, ok: bool, detail: String, suggestion: &str) -> Point {
    Point {
        point,
        ok,
        detail,
        suggestion: (!ok).then(|| suggestion.to_string()),
    }
}

/// Run the project's test command exactly as a task's check would: in a
/// workspace made as a task's is (a worktree of the last commit, or a
/// copy), with the environments a task shares (their caches and editable
/// installs included), as a check, on an overlay; the workspace is removed
/// after. (ran, what happened). Setup steps are not run here.
fn tests_collected(
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
    command: &str,
) -> (bool, String) {
    let scratch = match loop_sandbox::unique_name("audit") {
        Ok(n) => std::env::temp_dir().join(n),
        Err(e) => return (false, format!("no scratch directory: {e}")),
    };
    let result = as_a_task(project, loopfile, command, &scratch);
    let _ = loop_workspace::remove_tree(&scratch);
    match result {
        Err(e) => (false, format!("`{command}` could not run: {e}")),
        Ok(r) => {
            let out = format!("{}\n{}", r.stdout.excerpt(), r.stderr.excerpt());
            let status = match (r.exit_code, r.timed_out) {
                (_, true) => "timed out".to_string(),
                (Some(c), _) => format!("exit {c}"),
                (None, _) => "killed".to_string(),
            };
            match loop_verifier::tally::read(&out) {
                Some(t) if t.ran > 0 => (
                    true,
                    format!("`{command}` ran {} test(s) ({}; {status})", t.ran, t.runner),
                ),
                Some(t) => (
                    false,
                    format!("`{command}` ran no test ({}; {status})", t.runner),
                ),
                None => (
                    false,
                    format!(
                        "`{command}` ({status}) printed no test runner's summary this build reads"
                    ),
                ),
            }
        }
    }
}

/// [`tests_collected`]'s run, under `scratch`.
#[allow(clippy::disallowed_methods)] // audit's own scratch directory
fn as_a_task(
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
    command: &str,
    scratch: &Path,
) -> Result<loop_sandbox::ExecResult, Error> {
    std::fs::create_dir_all(scratch).map_err(|e| Error::internal(format!("scratch: {e}")))?;
    let name = scratch
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "audit".into());
    let workspace = scratch.join("workspace");
    let task_ws = loop_workspace::TaskWorkspace::create(project, &workspace, &name, (false, None))
        .map_err(|e| Error::internal(format!("cannot make a task's workspace: {e}")))?;
    let ran = (|| {
        let shares = crate::project::environments::share_environments(
            project,
            &workspace,
            loopfile,
            &[],
            &mut crate::Quiet,
        )?;
        let mut req = loop_sandbox::ExecRequest::shell(command, &workspace);
        req.workspace = Some(workspace.clone());
        req.overlay_scratch = Some(scratch.join("overlay"));
        req.check = true;
        req.timeout = std::time::Duration::from_secs(300);
        let settings = crate::project::environments::with_environments(
            loop_sandbox::Settings {
                git_dir: crate::project::locate::git_dir(&task_ws.origin),
                ..Default::default()
            },
            project,
            None,
            &shares,
            None,
        );
        settings.apply(&mut req);
        loop_sandbox::run(&req).map_err(Error::from_cause)
    })();
    let _ = task_ws.discard();
    ran
}

/// Protected globs that guard against a task creating what is not there
/// yet (CI configuration, which runs with the repository's secrets): they
/// count though they match nothing.
pub(crate) const CREATION_GUARDS: [&str; 2] = [".github/**", ".gitlab-ci.yml"];

/// The readiness of `project`: the Loopfile validates; the test command
/// runs and collects tests; the protected paths exist; a budget is set;
/// isolation is enforced here; the signing key exists.
#[allow(clippy::disallowed_methods)] // existence of the user's own signing key and store
pub fn readiness(project: &Path) -> Readiness {
    let mut points = Vec::new();
    let loopfile = crate::loopfile::Loopfile::load(project);
    let default = crate::loopfile::Loopfile::default();
    let lf = match &loopfile {
        Ok(l) => {
            points.push(point(
                "loopfile",
                l.path.is_some(),
                match &l.path {
                    Some(p) => format!("{} validates", p.display()),
                    None => "no Loopfile.yaml".into(),
                },
                "run `loop init` to write one from what the project is",
            ));
            l
        }
        Err(e) => {
            points.push(point(
                "loopfile",
                false,
                e.message.clone(),
                "fix the Loopfile (`loop validate Loopfile.yaml` names every problem)",
            ));
            &default
        }
    };
    let checks = crate::project::stacks::project_checks(project, &lf.verification);
    match checks.iter().find(|c| c.kind == "test") {
        Some(t) => {
            let (ok, detail) = tests_collected(project, lf, &t.command);
            points.push(point(
                "tests",
                ok,
                detail,
                "make the test command collect and run tests (set `verification.test` in the Loopfile)",
            ));
        }
        None => points.push(point(
            "tests",
            false,
            "no test command found or declared".into(),
            "set `verification.test` in the Loopfile",
        )),
    }
    points.push(protected_point(project, &lf.defaults.protected));
    let budget = lf.defaults.limits.as_ref().and_then(|l| l.budget_usd);
    points.push(point(
        "budget",
        budget.is_some(),
        match budget {
            Some(b) => format!("${b:.2} per task (defaults.limits.budget_usd)"),
            None => "no dollar budget for tasks".into(),
        },
        "set `defaults.limits.budget_usd` in the Loopfile",
    ));
    let s = loop_sandbox::probe::support();
    let enforced = s.namespaces && s.landlock_abi > 0 && s.seccomp;
    points.push(point(
        "isolation",
        enforced,
        format!(
            "namespaces {}, Landlock {}, seccomp {}",
            if s.namespaces { "yes" } else { "no" },
            if s.landlock_abi > 0 {
                format!("ABI {}", s.landlock_abi)
            } else {
                "no".into()
            },
            if s.seccomp { "yes" } else { "no" }
        ),
        "run where the kernel offers user namespaces, Landlock and seccomp (`loop doctor` says how)",
    ));
    let key = loop_receipt::signing_key_path();
    // A key named by the environment counts only where it is there.
    let from_env = std::env::var_os("LOOP_SIGNING_KEY").is_some_and(|v| !v.is_empty())
        || std::env::var_os("LOOP_SIGNING_KEY_FILE")
            .is_some_and(|f| std::path::Path::new(&f).is_file());
    points.push(point(
        "signing key",
        key.is_file() || from_env,
        if from_env {
            "from LOOP_SIGNING_KEY(_FILE)".into()
        } else if key.is_file() {
            format!("{}", key.display())
        } else {
            format!("none at {}", key.display())
        },
        "run `loop keys show` once (it makes the key) and keep it safe",
    ));
    Readiness {
        score: points.iter().filter(|p| p.ok).count(),
        max: points.len(),
        points,
    }
}

/// What runs of this project cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cost {
    /// The model priced.
    pub model: Option<String>,
    /// Its price per million tokens (input, output), if known.
    pub price: Option<loop_protocol::Price>,
    /// Tokens a run may use (the contract limits tasks get here).
    pub max_tokens: u64,
    /// The dollar budget a run gets, if any.
    pub budget_usd: Option<f64>,
    /// The most one run can cost: every token at the dearer rate, capped
    /// by the budget.
    pub worst_case_usd: Option<f64>,
    /// From the runs recorded here.
    pub recorded: Recorded,
    /// Runs a month, as asked.
    pub runs_per_month: f64,
    /// The recorded mean times the runs a month.
    pub monthly_usd: Option<f64>,
    /// The worst case times the runs a month.
    pub monthly_worst_usd: Option<f64>,
}

/// The runs recorded in the project's store.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Recorded {
    /// Tasks counted.
    pub runs: u64,
    /// Mean dollars per run.
    pub mean_usd: Option<f64>,
    /// Mean tokens per run.
    pub mean_tokens: Option<u64>,
    /// The dearest run.
    pub max_usd: Option<f64>,
}

/// The cost of runs of `project` with `model` (else the Loopfile's maker),
/// `runs_per_month` of them.
#[allow(clippy::disallowed_methods)] // existence of the runtime's own store file
pub fn cost(
    runtime: &crate::Runtime,
    model: Option<&str>,
    runs_per_month: f64,
) -> Result<Cost, Error> {
    let project = runtime.project();
    let loopfile = crate::loopfile::Loopfile::load(project)?;
    let (_, config) = crate::models::resolve(model, &loopfile)?;
    let maker = config.maker.first();
    let price = maker.and_then(|m| m.price);
    let limits = loopfile.defaults.limits.clone().unwrap_or_default();
    let worst = price.map(|p| {
        let dear = p.input_per_mtok.max(p.output_per_mtok);
        let all = limits.max_tokens as f64 * dear / 1e6;
        limits.budget_usd.map_or(all, |b| all.min(b))
    });
    let mut recorded = Recorded::default();
    let (mut usd, mut tokens, mut max): (f64, u64, f64) = (0.0, 0, 0.0);
    // (The store is read only where it exists: asking would make it.)
    let tasks = if crate::project::locate::store_url(project)?.is_some()
        || project.join(".loop/loop.db").is_file()
    {
        runtime.tasks()?
    } else {
        Vec::new()
    };
    for t in tasks {
        let Ok(s) = runtime.status(&t.id) else {
            continue;
        };
        if s.used.steps == 0 {
            continue;
        }
        recorded.runs += 1;
        usd += s.used.usd;
        tokens += s.used.tokens;
        max = max.max(s.used.usd);
    }
    if recorded.runs > 0 {
        recorded.mean_usd = Some(usd / recorded.runs as f64);
        recorded.mean_tokens = Some(tokens / recorded.runs);
        recorded.max_usd = Some(max);
    }
    Ok(Cost {
        model: maker.map(|m| m.model.clone()),
        price,
        max_tokens: limits.max_tokens,
        budget_usd: limits.budget_usd,
        worst_case_usd: worst,
        monthly_usd: recorded.mean_usd.map(|m| m * runs_per_month),
        monthly_worst_usd: worst.map(|w| w * runs_per_month),
        recorded,
        runs_per_month,
    })
}

/// The Loopfile's maker endpoint: (model, base URL), `None` when no network
/// model is configured, or why its models do not resolve.
pub fn maker_endpoint(
    loopfile: &crate::loopfile::Loopfile,
) -> Result<Option<(String, String)>, Error> {
    let Some(models) = loopfile.models.as_ref() else {
        return Ok(None);
    };
    let c = loop_models::config::ModelsConfig::resolve(
        None,
        Some(models),
        &loop_models::config::Env::from_process(),
        "Loopfile.yaml",
    )
    .map_err(|e| Error::usage(e.to_string()))?;
    Ok(c.maker
        .first()
        .map(|m| (m.model.clone(), m.base_url.clone())))
}

/// The protected-paths point: each declared glob matches something here
/// (creation guards, which keep CI configuration from being made, are
/// said apart and count though they match nothing).
fn protected_point(project: &Path, protected: &[String]) -> Point {
    let missing: Vec<&String> = protected
        .iter()
        .filter(|g| !CREATION_GUARDS.contains(&g.as_str()))
        .filter(|g| {
            loop_workspace::Protected::new(std::slice::from_ref(*g))
                .map(|p| p.existing(project).is_empty())
                .unwrap_or(true)
        })
        .collect();
    point(
        "protected paths",
        !protected.is_empty() && missing.is_empty(),
        if protected.is_empty() {
            "no protected paths declared (the built-in ones still apply)".into()
        } else if missing.is_empty() {
            let (guards, globs): (Vec<&str>, Vec<&str>) = protected
                .iter()
                .map(String::as_str)
                .partition(|g| CREATION_GUARDS.contains(g));
            match (globs.is_empty(), guards.is_empty()) {
                (false, true) => format!("every declared glob matches: {}", globs.join(", ")),
                (false, false) => format!(
                    "every declared glob matches: {}; kept from being created: {}",
                    globs.join(", "),
                    guards.join(", ")
                ),
                (true, _) => format!("kept from being created: {}", guards.join(", ")),
            }
        } else {
            let m: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
            format!("matching nothing here: {}", m.join(", "))
        },
        "declare the paths no task may write (`defaults.protected`), each matching files here",
    )
}
