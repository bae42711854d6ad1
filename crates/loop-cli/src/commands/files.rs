//! `loop validate`, `loop schema`, `loop manifest` and `loop keys
//! show|export`: a file, a format or a key, looked at.

use crate::CliError;
use std::path::Path;

/// `loop keys show|export` (rotate is the runtime's).
pub fn keys(show: bool, json: bool) -> Result<u8, CliError> {
    let key = loop_receipt::KeyPair::load_or_create()
        .map_err(|e| CliError::usage(format!("signing key: {e}")))?;
    let public = key.public();
    if json {
        crate::ui::say_json(&loop_runtime::views::KeyLine {
            keyid: &public.keyid,
            ed25519: public.hex(),
            pem: public.pem(),
        })?;
        return Ok(0);
    }
    if show {
        println!("keyid  {}", public.keyid);
        println!("ed25519 {}", public.hex());
    }
    print!("{}", public.pem());
    Ok(0)
}

/// `loop manifest DIR`: the directory's Merkle root, files and bytes.
pub fn manifest(dir: &Path, json: bool) -> Result<u8, CliError> {
    let m = loop_workspace::Manifest::of(dir)
        .map_err(|e| CliError::usage(format!("{}: {e}", dir.display())))?;
    if json {
        crate::ui::say_json(&loop_runtime::views::ManifestLine {
            root: &m.root,
            files: m.entries.len(),
            bytes: m.bytes(),
            dir,
        })?;
        return Ok(0);
    }
    println!(
        "{}  {} files, {} bytes  {}",
        m.root,
        m.entries.len(),
        m.bytes(),
        dir.display()
    );
    Ok(0)
}

/// `loop schema contract|loopfile`: the format's JSON Schema.
pub fn schema(format: &str) -> Result<u8, CliError> {
    let schema = match format {
        "contract" => loop_protocol::contract::schema::contract_schema(),
        "loopfile" => loop_runtime::loopfile_schema(),
        other => {
            return Err(CliError::usage(format!(
                "no schema for `{other}` (contract, loopfile)"
            )));
        }
    };
    let text =
        serde_json::to_string_pretty(&schema).map_err(|e| CliError::internal(e.to_string()))?;
    println!("{text}");
    Ok(0)
}

/// `loop validate Loopfile.yaml`: every problem, or the sections read.
pub fn validate_loopfile(file: &Path, json: bool) -> Result<u8, CliError> {
    let text = loop_workspace::door::read_named_text(file, loop_workspace::door::MAX_PROJECT_FILE)
        .map_err(|e| CliError::usage(format!("cannot read the Loopfile: {e}")))?;
    let l = loop_runtime::Loopfile::parse(&text, &file.display().to_string())?;
    let read: Vec<&str> = l.sections.iter().map(String::as_str).collect();
    if json {
        crate::ui::say_json(&loop_runtime::views::LoopfileValidLine {
            file,
            kind: "loopfile",
            valid: true,
            sections: &read,
        })?;
        return Ok(0);
    }
    println!(
        "{}: valid Loopfile ({})",
        file.display(),
        if read.is_empty() {
            "no sections".to_string()
        } else {
            read.join(", ")
        }
    );
    Ok(0)
}

/// `loop validate FILE`: every problem, or the contract's shape and hash.
pub fn validate_contract(file: &Path, json: bool) -> Result<u8, CliError> {
    let contract = crate::commands::run::read_contract(file)?;
    let sha = contract
        .sha256()
        .map_err(|e| CliError::usage(e.to_string()))?;
    let checks: usize = contract.criteria.iter().map(|c| c.checks.len()).sum();
    if json {
        crate::ui::say_json(&loop_runtime::views::ContractValidLine {
            file,
            kind: "contract",
            valid: true,
            criteria: contract.criteria.len(),
            checks,
            artifacts: contract.artifacts.len(),
            sha256: &sha,
        })?;
        return Ok(0);
    }
    println!(
        "{}: valid contract, {} criteria, {} checks, {} artifacts\nsha256 {sha}",
        file.display(),
        contract.criteria.len(),
        checks,
        contract.artifacts.len()
    );
    Ok(0)
}

/// `loop audit`: the environments a task here would share, and how.
pub fn audit(project: &Path, json: bool) -> Result<u8, CliError> {
    use loop_runtime::EnvironmentStanding as Standing;
    let a = loop_runtime::Runtime::open(project)?.audit()?;
    if json {
        println!(
            "{}",
            serde_json::to_value(&a).map_err(|e| CliError::internal(e.to_string()))?
        );
        return Ok(0);
    }
    match &a.loopfile {
        Some(p) => println!("Loopfile {}", p.display()),
        None => println!("no Loopfile: the defaults apply"),
    }
    if a.shares.is_empty() {
        println!("no untracked dependency environment found or declared");
    } else {
        println!(
            "untracked dependency environments, shown to every task, its commands and its checks (read_only: never changed; overlay: copy-on-write, the task's writes stay in the task and each check starts from the project's):"
        );
    }
    for (s, st) in &a.shares {
        let state = match st {
            Standing::Present { files, bytes } => format!("{files} files, {bytes} bytes"),
            Standing::Missing => "not there yet".to_string(),
            Standing::Refused { why } => format!("NOT SHARED: {why}"),
        };
        println!(
            "  {:<16} {:<10} {state} ({}{})",
            s.path,
            s.mode.as_str(),
            s.why,
            if s.declared { "" } else { ", detected" }
        );
    }
    if !a.caches.is_empty() {
        println!("toolchain caches, shown read-only:");
    }
    for c in &a.caches {
        let vars: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("  {} ({}; {})", c.path.display(), c.why, vars.join(" "));
    }
    let n = &a.network;
    let list = |hosts: &[String]| match hosts.is_empty() {
        true => "none (no network at all)".to_string(),
        false => hosts.join(", "),
    };
    println!(
        "network, through the runtime's egress proxy (every attempt recorded):\n  commands: {}\n  setup steps: {}\n  checks: what each contract's network_allow says (none by default)",
        list(&n.commands),
        list(&n.setup)
    );
    for (host, addr) in &n.resolve {
        println!("  {host} is reached at {addr}");
    }
    if let Some(p) = &a.network_problem {
        println!("  PROBLEM: {p}");
    }
    let r = &a.readiness;
    println!("readiness {}/{} (each point checked now):", r.score, r.max);
    for p in &r.points {
        println!(
            "  [{}] {}: {}{}",
            if p.ok { "x" } else { " " },
            p.point,
            p.detail,
            p.suggestion
                .as_ref()
                .map(|s| format!("\n      -> {s}"))
                .unwrap_or_default()
        );
    }
    if let Some(s) = &a.setup {
        println!(
            "setup: {} step(s), run in a task's workspace before its baseline:",
            s.steps.len()
        );
        for step in &s.steps {
            println!("  {step}");
        }
        match (&s.key, &s.cached_by, &s.problem) {
            (_, _, Some(p)) => println!("  PROBLEM: {p}"),
            (Some(k), Some(by), _) => println!(
                "  keyed on {}: layer {} cached (made by {by}): the next task runs no step",
                s.keyed_on.join(", "),
                &k[..12]
            ),
            (Some(k), None, _) => println!(
                "  keyed on {}: layer {} not cached yet: the next task runs the steps",
                if s.keyed_on.is_empty() {
                    "the steps alone".to_string()
                } else {
                    s.keyed_on.join(", ")
                },
                &k[..12]
            ),
            _ => {}
        }
    }
    Ok(0)
}

/// `loop init`: a Loopfile from what the project is, and a pattern's files.
pub fn init(
    project: &Path,
    pattern: Option<&str>,
    force: bool,
    json: bool,
) -> Result<u8, CliError> {
    let runtime = loop_runtime::Runtime::open(project)?;
    let r = loop_runtime::init_project(runtime.project(), pattern, force)?;
    if json {
        println!(
            "{}",
            serde_json::to_value(&r).map_err(|e| CliError::internal(e.to_string()))?
        );
        return Ok(0);
    }
    match &r.loopfile {
        Some(p) => println!("wrote {}", p.display()),
        None => println!("kept the Loopfile that is there"),
    }
    if r.checks.is_empty() {
        println!("no build, test or lint command found: set `verification:` in the Loopfile");
    }
    for c in &r.checks {
        println!("  {} {}: {} ({})", c.stack, c.kind, c.command, c.why);
    }
    for s in &r.shares {
        println!("  shared with every task: {s}");
    }
    for f in &r.pattern_files {
        println!("wrote {}", f.display());
    }
    if let Some(p) = pattern {
        println!("run it with: loop run --pattern {p} --model SPEC");
    }
    Ok(0)
}

/// `loop cost --per-day N`: [`cost`] for a month of `per_day` runs a day.
pub(crate) fn cost_per_day(
    project: &Path,
    model: Option<&str>,
    per_day: f64,
    json: bool,
) -> Result<u8, CliError> {
    if !per_day.is_finite() || per_day < 0.0 {
        return Err(CliError::usage("--per-day must be a non-negative number"));
    }
    cost(project, model, per_day * 30.0, json)
}

/// `loop cost`: what a run costs here, at most and as recorded, and a month
/// of runs at the cadence asked.
pub fn cost(
    project: &Path,
    model: Option<&str>,
    per_month: f64,
    json: bool,
) -> Result<u8, CliError> {
    let runtime = loop_runtime::Runtime::open(project)?;
    let c = loop_runtime::cost(&runtime, model, per_month)?;
    if json {
        println!(
            "{}",
            serde_json::to_value(&c).map_err(|e| CliError::internal(e.to_string()))?
        );
        return Ok(0);
    }
    let usd = |x: Option<f64>| x.map_or("unknown".to_string(), |v| format!("${v:.4}"));
    match (&c.model, &c.price) {
        (Some(m), Some(p)) => println!(
            "model {m}: ${}/M input, ${}/M output",
            p.input_per_mtok, p.output_per_mtok
        ),
        (Some(m), None) => {
            println!("model {m}: no price known (add it under `models.pricing` in the Loopfile)")
        }
        _ => println!("no network model configured (give --model or `models.maker`)"),
    }
    println!(
        "per run, at most: {} ({} tokens{})",
        usd(c.worst_case_usd),
        c.max_tokens,
        c.budget_usd
            .map(|b| format!(", capped by the ${b:.2} budget"))
            .unwrap_or_default()
    );
    if c.recorded.runs > 0 {
        println!(
            "recorded: {} run(s), mean {} ({} tokens), dearest {}",
            c.recorded.runs,
            usd(c.recorded.mean_usd),
            c.recorded.mean_tokens.unwrap_or(0),
            usd(c.recorded.max_usd)
        );
    } else {
        println!("recorded: no run yet");
    }
    println!(
        "a month of {} run(s): {} as recorded, {} at most",
        c.runs_per_month,
        usd(c.monthly_usd),
        usd(c.monthly_worst_usd)
    );
    Ok(0)
}
