//! Setup steps: the Loopfile's `setup:` commands that make a task's
//! dependency environments (`python3 -m venv .venv && .venv/bin/pip
//! install -r requirements.txt`, `npm ci`), run once in the task's
//! workspace before the baseline, in the sandbox, with only the hosts of
//! `network.setup` reachable.
//!
//! What they make (new top-level directories, or the declared `outputs`)
//! leaves the workspace for a layer under `.loop/layers/KEY/`, keyed by
//! the steps and the lockfiles' contents; the task then shares it
//! read-only like any environment. The next task with the same steps and
//! lockfiles takes the layer as it is: no step runs, nothing is fetched.
//! Absolute paths inside a layer (a venv's scripts, an editable install's
//! path file) name the workspace it was built in, so every command of a
//! task using it also sees its own workspace at that path.

use crate::Error;
pub use crate::loopfile::sections::SetupSection;
use loop_protocol::{KeyedFile, SetupRecord, SetupStep};
use loop_workspace::Manifest;
use std::path::{Path, PathBuf};

/// Lockfiles and manifests a layer is keyed on when `keys` is not given
/// (those present at the top of the workspace).
pub const LOCKFILES: &[&str] = &[
    "requirements.txt",
    "requirements-dev.txt",
    "constraints.txt",
    "pyproject.toml",
    "poetry.lock",
    "Pipfile.lock",
    "uv.lock",
    "setup.py",
    "setup.cfg",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "Cargo.toml",
    "Cargo.lock",
    "go.mod",
    "go.sum",
    "Gemfile.lock",
];

/// A task's setup: the record, and where the layer's outputs are (relative
/// to the project).
#[derive(Debug, Clone)]
pub struct Provided {
    /// What happened, for the ledger and the receipt.
    pub record: SetupRecord,
    /// Each output: (its path in the workspace, the layer directory that
    /// holds it, relative to the project).
    pub outputs: Vec<(String, String)>,
}

/// `.loop/layers` of a project.
fn layers_dir(project: &Path) -> PathBuf {
    project.join(".loop").join("layers")
}

/// The files the layer is keyed on, with their digests. A key file must
/// be a regular file (a link would key on whatever it points at).
fn keyed_on(workspace: &Path, section: &SetupSection) -> Result<Vec<KeyedFile>, Error> {
    let declared = section.keys.is_some();
    let names: Vec<String> = match &section.keys {
        Some(k) => k.clone(),
        None => LOCKFILES.iter().map(|s| s.to_string()).collect(),
    };
    let mut out = Vec::new();
    for name in names {
        // Through the door: a key that is a link, a FIFO or on a link's
        // way is refused, never read through.
        match loop_workspace::door::read(workspace, &name, 256 << 20) {
            Ok(Some(bytes)) => {
                out.push(KeyedFile {
                    path: name,
                    sha256: loop_protocol::hash::sha256_hex(&bytes),
                    shown_bytes: None,
                });
            }
            Err(e) => {
                return Err(Error::usage(format!(
                    "setup key `{name}` is not a regular file in the task's workspace: {e}"
                )));
            }
            Ok(None) if declared => {
                return Err(Error::usage(format!(
                    "setup key `{name}` is not in the task's workspace (is it committed?)"
                )));
            }
            Ok(None) => {}
        }
    }
    Ok(out)
}

/// Toolchains a step may name, and how each tells its version.
const TOOLCHAINS: &[(&str, &[&str])] = &[
    ("python3", &["-I", "--version"]),
    ("python", &["-I", "--version"]),
    ("node", &["--version"]),
    ("npm", &["--version"]),
    ("yarn", &["--version"]),
    ("pnpm", &["--version"]),
    ("cargo", &["--version"]),
    ("rustc", &["--version"]),
    ("go", &["version"]),
    ("bundle", &["--version"]),
    ("ruby", &["--version"]),
];

/// The versions of the toolchains the steps name (a word of a step), as
/// each reports it in the workspace (where a version pin file applies);
/// `pip` counts as Python's. Asked inside the sandbox, the workspace
/// read-only and no network: a toolchain asked from the project's
/// directory reads the project's files (a `rust-toolchain.toml` naming a
/// toolchain of the project's own, a `.yarnrc`'s `yarn-path`), and those
/// would otherwise run on the host.
fn toolchains(
    project: &Path,
    workspace: &Path,
    section: &SetupSection,
    isolation: loop_sandbox::IsolationLevel,
) -> Vec<String> {
    let words: std::collections::BTreeSet<&str> = section
        .steps
        .iter()
        .flat_map(|s| s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')))
        .collect();
    let named: Vec<(&str, &[&str])> = TOOLCHAINS
        .iter()
        .filter(|(tool, _)| {
            words.contains(tool)
                || (*tool == "python3" && (words.contains("pip") || words.contains("pip3")))
        })
        .map(|(t, a)| (*t, *a))
        .collect();
    if named.is_empty() {
        return Vec::new();
    }
    // One sandboxed run asks them all, each answer after its own mark.
    let mut script = String::new();
    for (tool, args) in &named {
        script.push_str(&format!(
            "echo '{MARK}{tool}'; {tool} {} 2>/dev/null || echo '{NOT_FOUND}'\n",
            args.join(" ")
        ));
    }
    let mut req = loop_sandbox::ExecRequest::shell(script, workspace);
    req.workspace = Some(workspace.to_path_buf());
    req.workspace_read_only = true;
    req.timeout = std::time::Duration::from_secs(20);
    sandbox(project, isolation, None).apply(&mut req);
    let said = loop_sandbox::run(&req)
        .map(|r| r.stdout.excerpt())
        .unwrap_or_default();
    let mut answers: std::collections::BTreeMap<&str, String> = Default::default();
    let mut current: Option<&str> = None;
    for line in said.lines() {
        if let Some(tool) = line.strip_prefix(MARK) {
            current = named.iter().map(|(t, _)| *t).find(|t| *t == tool);
            continue;
        }
        if let Some(t) = current {
            let a = answers.entry(t).or_default();
            if !a.is_empty() {
                a.push('\n');
            }
            a.push_str(line);
        }
    }
    named
        .iter()
        .map(|(tool, _)| {
            let v = answers.get(tool).map(|v| v.trim()).unwrap_or_default();
            let v = if v.is_empty() { NOT_FOUND } else { v };
            format!("{tool}: {v}")
        })
        .collect()
}

/// How setup's commands run: cancellable, the toolchain caches readable,
/// `egress` the only network (none without it).
fn sandbox(
    project: &Path,
    isolation: loop_sandbox::IsolationLevel,
    egress: Option<loop_sandbox::egress::Egress>,
) -> loop_sandbox::Settings {
    crate::project::environments::with_environments(
        loop_sandbox::Settings {
            isolation,
            cancel: Some(crate::interrupt::flag()),
            egress,
            ..Default::default()
        },
        project,
        None,
        &[],
        None,
    )
}

/// The mark before each toolchain's answer in [`toolchains`].
const MARK: &str = "@@loop-toolchain ";

/// What a toolchain that is not there (or fails) answers.
const NOT_FOUND: &str = "(not found)";

/// The layer's key: the steps, the declared outputs, the setup hosts, the
/// key files and the toolchains' versions.
fn key_of(
    section: &SetupSection,
    keyed: &[KeyedFile],
    setup_hosts: &[String],
    tools: &[String],
) -> String {
    let v = serde_json::json!({
        "layer": 1,
        "steps": section.steps,
        "outputs": section.outputs,
        "keyed_on": keyed,
        "network": setup_hosts,
        "toolchains": tools,
    });
    loop_protocol::hash::sha256_hex(v.to_string().as_bytes())
}

/// What `setup:` gives a task whose workspace is `workspace`: the cached
/// layer of the same key, or the steps run now and their outputs made the
/// layer. `None` without a `setup:` section.
#[allow(clippy::disallowed_methods)] // the runtime's own setup layers
pub fn provide(
    project: &Path,
    (workspace, git_dir): (&Path, Option<PathBuf>),
    task_id: &str,
    loopfile: &crate::loopfile::Loopfile,
    network: &crate::project::network::NetworkPlan,
    isolation: loop_sandbox::IsolationLevel,
    observer: &mut dyn crate::Observer,
) -> Result<Option<Provided>, Error> {
    let Some(section) = &loopfile.setup else {
        return Ok(None);
    };
    let keyed = keyed_on(workspace, section)?;
    let tools = toolchains(project, workspace, section, isolation);
    let key = key_of(section, &keyed, &network.setup, &tools);
    let layer = layers_dir(project).join(&key);
    if layer.exists() && read_layer(&layer).is_none() {
        // Not the layer it was made as (an output changed or went): gone,
        // and made again.
        observer.note(&format!(
            "setup: the layer {} no longer holds what it was made with: it is made again",
            &key[..12]
        ));
        loop_workspace::remove_tree(&layer)
            .map_err(|e| Error::internal(format!("setup layer {}: {e}", layer.display())))?;
    }
    if let Some(record) = read_layer(&layer) {
        observer.note(&format!(
            "setup: the layer {} made by {} fits (same steps and {}): no step runs, no network",
            &key[..12],
            record.made_by,
            describe_keys(&keyed)
        ));
        return Ok(Some(provided(project, &layer, record, true)));
    }
    observer.note(&format!(
        "setup: {} step(s) in the task's workspace ({}), network: {}",
        section.steps.len(),
        describe_keys(&keyed),
        if network.setup.is_empty() {
            "none".to_string()
        } else {
            network.setup.join(", ")
        }
    ));
    let before = Manifest::of(workspace).map_err(|e| Error::internal(format!("setup: {e}")))?;
    let top_before = top_level(workspace);
    let steps = run_steps(
        (project, task_id),
        (workspace, git_dir),
        section,
        (network, isolation),
        observer,
    )?;
    let outputs = match &section.outputs {
        Some(o) => o.clone(),
        None => top_level(workspace)
            .into_iter()
            .filter(|n| !top_before.contains(n) && n != ".git" && n != ".loop")
            .collect(),
    };
    // The layer is assembled aside and renamed into place at once.
    let staging = layers_dir(project).join(format!(".new-{key}-{task_id}"));
    let made = make_layer(
        workspace,
        &staging,
        (&outputs, section.outputs.is_some()),
        &before,
    );
    let output_roots = match made {
        Ok(r) => r,
        Err(e) => {
            let _ = loop_workspace::remove_tree(&staging);
            return Err(e);
        }
    };
    let record = SetupRecord {
        key: key.clone(),
        keyed_on: keyed,
        reused: false,
        made_by: task_id.to_string(),
        built_at: workspace.display().to_string(),
        outputs,
        output_roots,
        toolchains: tools,
        steps,
    };
    let json = serde_json::to_vec_pretty(&record).map_err(Error::from_cause)?;
    std::fs::write(staging.join("layer.json"), json)
        .map_err(|e| Error::internal(format!("setup layer: {e}")))?;
    if std::fs::rename(&staging, &layer).is_err() {
        // Another task made the same layer meanwhile: theirs is as good.
        let _ = loop_workspace::remove_tree(&staging);
        if let Some(theirs) = read_layer(&layer) {
            return Ok(Some(provided(project, &layer, theirs, true)));
        }
        return Err(Error::internal(format!(
            "setup layer {} could not be stored",
            layer.display()
        )));
    }
    observer.note(&format!(
        "setup: layer {} cached ({}), shared read-only",
        &key[..12],
        record.outputs.join(", ")
    ));
    Ok(Some(provided(project, &layer, record, false)))
}

/// Run the setup steps in order in the task's workspace, each said as it
/// ends; the first that fails stops them (every step's output is kept,
/// and named).
fn run_steps(
    (project, task_id): (&Path, &str),
    (workspace, git_dir): (&Path, Option<PathBuf>),
    section: &SetupSection,
    (network, isolation): (
        &crate::project::network::NetworkPlan,
        loop_sandbox::IsolationLevel,
    ),
    observer: &mut dyn crate::Observer,
) -> Result<Vec<SetupStep>, Error> {
    let mut steps = Vec::new();
    for (i, command) in section.steps.iter().enumerate() {
        let step = run_step(
            project,
            (workspace, git_dir.clone()),
            command,
            section,
            network,
            isolation,
        )?;
        let ok = step.exit_code == Some(0) && !step.timed_out;
        observer.note(&format!(
            "setup step {}: `{command}`: {} ({:.1} s)",
            i + 1,
            match (step.exit_code, step.signal, step.timed_out) {
                (_, _, true) => "timed out".to_string(),
                (Some(c), _, _) => format!("exit {c}"),
                (None, Some(s), _) => format!("killed by signal {s}"),
                _ => "ended".to_string(),
            },
            step.duration_ms as f64 / 1000.0
        ));
        let tail = tail_of(&step.stderr.excerpt, 800);
        steps.push(step);
        if !ok {
            let log = save_log(project, task_id, &steps)?;
            return Err(Error::usage(format!(
                "setup step {} `{command}` failed; every step's output is in {}{}",
                i + 1,
                log.display(),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(":\n{tail}")
                }
            )));
        }
    }
    Ok(steps)
}

/// Move the outputs from the workspace into `staging/tree`, check that the
/// steps changed none of the project's files, and take each output's root.
#[allow(clippy::disallowed_methods)] // lstat of an output's top-level place in the task's workspace, then renamed (never followed) into the runtime's own layer directory; content hashed by Manifest
fn make_layer(
    workspace: &Path,
    staging: &Path,
    (outputs, declared): (&[String], bool),
    before: &Manifest,
) -> Result<Vec<KeyedFile>, Error> {
    let tree = staging.join("tree");
    std::fs::create_dir_all(&tree).map_err(|e| Error::internal(format!("setup layer: {e}")))?;
    for name in outputs {
        // Every directory on the way a real one (no link the steps made).
        let mut on_way = workspace.to_path_buf();
        let parts: Vec<&str> = name.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            on_way.push(part);
            if !std::fs::symlink_metadata(&on_way).is_ok_and(|m| m.is_dir()) {
                return Err(Error::usage(format!(
                    "setup output `{name}`: `{}` on its way is not a directory",
                    on_way.strip_prefix(workspace).unwrap_or(&on_way).display()
                )));
            }
        }
        let at = workspace.join(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            // A file the build generates (`_version.py`), where it is.
            Ok(m) if m.is_file() && declared => {
                if before.get(name).is_some() {
                    return Err(Error::usage(format!(
                        "setup output `{name}` is one of the project's own files: setup may only make new ones"
                    )));
                }
            }
            Ok(_) => {
                return Err(Error::usage(format!(
                    "setup made `{name}`, which is not a directory: only directories are kept as environments (a file the build generates is kept when `outputs` names it)"
                )));
            }
            Err(_) => {
                return Err(Error::usage(format!(
                    "setup output `{name}` was not made by the steps"
                )));
            }
        }
        let dest = tree.join(name);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::internal(format!("setup output `{name}`: {e}")))?;
        }
        std::fs::rename(&at, &dest)
            .map_err(|e| Error::internal(format!("setup output `{name}`: {e}")))?;
    }
    // Setup makes environments; it never changes the project's files.
    let after = Manifest::of(workspace).map_err(|e| Error::internal(format!("setup: {e}")))?;
    if after.root != before.root {
        let changed = changed_paths(before, &after);
        return Err(Error::usage(format!(
            "setup changed the project's files ({}): setup steps may only create environments (new top-level directories, or the declared `outputs`)",
            changed.join(", ")
        )));
    }
    outputs
        .iter()
        .map(|o| {
            crate::project::environments::digest(&tree.join(o))
                .map(|m| KeyedFile {
                    path: o.clone(),
                    sha256: m.root,
                    shown_bytes: None,
                })
                .map_err(|e| Error::internal(format!("setup output `{o}`: {e}")))
        })
        .collect()
}

/// The record and outputs of a layer.
fn provided(project: &Path, layer: &Path, mut record: SetupRecord, reused: bool) -> Provided {
    if reused {
        record.reused = true;
        record.steps.clear();
    }
    let rel = layer.strip_prefix(project).unwrap_or(layer);
    let outputs = record
        .outputs
        .iter()
        .map(|o| (o.clone(), rel.join("tree").join(o).display().to_string()))
        .collect();
    Provided { record, outputs }
}

/// A complete layer's record: every output there with the content root it
/// was made with (a layer without them is not a layer).
#[allow(clippy::disallowed_methods)] // the runtime's own setup layer record
fn read_layer(layer: &Path) -> Option<SetupRecord> {
    let text = std::fs::read(layer.join("layer.json")).ok()?;
    let record: SetupRecord = serde_json::from_slice(&text).ok()?;
    let intact = record.outputs.len() == record.output_roots.len()
        && record.output_roots.iter().all(|r| {
            let at = layer.join("tree").join(&r.path);
            std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir() || m.is_file())
                && crate::project::environments::digest(&at).is_ok_and(|m| m.root == r.sha256)
        });
    intact.then_some(record)
}

/// One step in the sandbox: the workspace writable, the project's
/// default protections read-only, the toolchain caches readable, only
/// the setup hosts reachable.
#[allow(clippy::disallowed_methods)] // names only, of the runtime's own directories
fn run_step(
    project: &Path,
    (workspace, git_dir): (&Path, Option<PathBuf>),
    command: &str,
    section: &SetupSection,
    network: &crate::project::network::NetworkPlan,
    isolation: loop_sandbox::IsolationLevel,
) -> Result<SetupStep, Error> {
    let protected = loop_workspace::Protected::new(
        &loop_protocol::contract::DEFAULT_PROTECTED
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    )
    .map_err(|e| Error::internal(e.to_string()))?;
    let mut req = loop_sandbox::ExecRequest::shell(command, workspace);
    req.workspace = Some(workspace.to_path_buf());
    req.read_only_paths = protected.existing(workspace);
    req.timeout = std::time::Duration::from_secs(section.timeout_secs);
    // The repository, read-only: a build backend that takes its version
    // from git (hatch-vcs, setuptools-scm, versioneer) finds it.
    let mut settings = sandbox(
        project,
        isolation,
        network.egress(crate::project::network::Use::Setup),
    );
    settings.git_dir = git_dir;
    settings.apply(&mut req);
    let r = loop_sandbox::run(&req)
        .map_err(|e| Error::usage(format!("setup step `{command}` could not run: {e}")))?;
    Ok(SetupStep {
        command: command.to_string(),
        exit_code: r.exit_code,
        signal: r.signal,
        timed_out: r.timed_out,
        duration_ms: r.duration.as_millis() as u64,
        stdout: r.stdout.evidence(),
        stderr: r.stderr.evidence(),
        egress: r.isolation.egress,
    })
}

/// Top-level names in `dir`.
#[allow(clippy::disallowed_methods)] // names only, of the runtime's own directories
fn top_level(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|items| {
            items
                .flatten()
                .map(|i| i.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Paths whose entries differ between two manifests (at most 10 named).
fn changed_paths(a: &Manifest, b: &Manifest) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in &a.entries {
        if !b.entries.contains(e) {
            out.push(e.path.clone());
        }
    }
    for e in &b.entries {
        if !a.entries.iter().any(|x| x.path == e.path) {
            out.push(e.path.clone());
        }
    }
    out.sort();
    out.dedup();
    if out.len() > 10 {
        let more = out.len() - 10;
        out.truncate(10);
        out.push(format!("and {more} more"));
    }
    out
}

/// The setup's steps as they ran, kept with the task when setup fails.
#[allow(clippy::disallowed_methods)] // the setup log in the runtime's own .loop directory
fn save_log(project: &Path, task_id: &str, steps: &[SetupStep]) -> Result<PathBuf, Error> {
    let dir = project.join(".loop").join("tasks").join(task_id);
    std::fs::create_dir_all(&dir).map_err(|e| Error::internal(format!("setup log: {e}")))?;
    let path = dir.join("setup.json");
    let json = serde_json::to_vec_pretty(steps).map_err(Error::from_cause)?;
    std::fs::write(&path, json).map_err(|e| Error::internal(format!("setup log: {e}")))?;
    Ok(path)
}

fn describe_keys(keyed: &[KeyedFile]) -> String {
    if keyed.is_empty() {
        "no lockfile".into()
    } else {
        keyed
            .iter()
            .map(|k| k.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The last `max` bytes of `text`, on a character boundary.
fn tail_of(text: &str, max: usize) -> String {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].trim().to_string()
}

/// What `setup:` would do in `project` now: the key and whether its layer
/// is cached (for `loop audit`), or why it cannot be said. The key is
/// taken from the checkout's files as they are (uncommitted edits
/// included), where a task takes it from its own workspace.
pub fn audit(project: &Path, loopfile: &crate::loopfile::Loopfile) -> Option<SetupAudit> {
    let section = loopfile.setup.as_ref()?;
    let setup_hosts = crate::project::network::expand(&loopfile.network.setup).unwrap_or_default();
    Some(match keyed_on(project, section) {
        Ok(keyed) => {
            let tools = toolchains(
                project,
                project,
                section,
                loop_sandbox::IsolationLevel::Preferred,
            );
            let key = key_of(section, &keyed, &setup_hosts, &tools);
            let cached = read_layer(&layers_dir(project).join(&key)).map(|r| r.made_by);
            SetupAudit {
                steps: section.steps.clone(),
                keyed_on: keyed.into_iter().map(|k| k.path).collect(),
                key: Some(key),
                cached_by: cached,
                problem: None,
            }
        }
        Err(e) => SetupAudit {
            steps: section.steps.clone(),
            keyed_on: Vec::new(),
            key: None,
            cached_by: None,
            problem: Some(e.to_string()),
        },
    })
}

/// `loop audit`'s account of `setup:`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetupAudit {
    /// The steps.
    pub steps: Vec<String>,
    /// The key files found.
    pub keyed_on: Vec<String>,
    /// The layer's key (from the project's files, as a task would start).
    pub key: Option<String>,
    /// The task that made the cached layer, when there is one.
    pub cached_by: Option<String>,
    /// Why the key cannot be taken.
    pub problem: Option<String>,
}
