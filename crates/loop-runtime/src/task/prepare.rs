//! A task before its first step: its workspace (a worktree or a copy,
//! never the user's checkout), the baseline manifest and the contract's
//! checks run on it, the check-integrity set, and the request stored so
//! any process can run or resume it.

use crate::Error;
use crate::project::locate::{
    git_dir, new_task_id, open_store, save_origin, store_err, write_json,
};
use crate::task::intake::Admitted;
use crate::task::request::StoredRequest;
use loop_core::{Clock, SystemClock};
use loop_verifier::SnapshotVerifier;
use loop_workspace::{Manifest, Origin, TaskWorkspace};
use std::path::Path;

/// Prepare the task `req` asks for and store it, ready to run; its id.
/// Bad model configuration is refused before anything is created.
pub fn submit(req: &Admitted, observer: &mut dyn crate::Observer) -> Result<String, Error> {
    submit_claimed(req, observer, false, None).map(|(id, _, _)| id)
}

/// [`submit`], under the id `id` (from [`crate::project::locate::new_task_id`]),
/// which a caller may have named before the work is done.
pub fn submit_as(
    id: &str,
    req: &Admitted,
    observer: &mut dyn crate::Observer,
) -> Result<String, Error> {
    submit_claimed(req, observer, false, Some(id)).map(|(id, _, _)| id)
}

/// A task stored: its id, its claim (when claimed), and the store.
pub(crate) type Submitted = (
    String,
    Option<loop_store::Owner>,
    std::sync::Arc<dyn loop_store::Store>,
);

/// [`submit`]; with `claim`, the task is claimed for this process the
/// moment it is stored, so no other process ever finds it unclaimed
/// between its submission and its run here. Returned with the store it
/// was kept in, for a caller that goes on with the task to hold open.
#[allow(clippy::disallowed_methods)] // lstat of workspace names and existence in shared environments (no content read)
pub(crate) fn submit_claimed(
    req: &Admitted,
    observer: &mut dyn crate::Observer,
    claim: bool,
    id: Option<&str>,
) -> Result<Submitted, Error> {
    let clock = SystemClock;
    let project = req
        .project
        .canonicalize()
        .map_err(|e| Error::usage(format!("project {}: {e}", req.project.display())))?;
    let loopfile = crate::loopfile::Loopfile::load(&project)?;
    crate::models::load_model(req.model.as_deref(), &loopfile, None, &project)?;
    let store = open_store(&project)?;
    // What a killed preparation left is nobody's: removed, and said.
    crate::project::preparing::clean_killed(&project, &*store, observer);
    let task_id = match id {
        Some(id) if crate::project::locate::is_task_id(id) => id.to_string(),
        Some(id) => return Err(Error::internal(format!("`{id}` is not a task id"))),
        None => new_task_id(clock.now_ms())?,
    };
    // The workspace and what is kept beside it: outside the project.
    let paths = crate::project::locate::TaskPaths::made(&project, &task_id)?;
    // Until the store has it, the task is known by this mark (gone when
    // this returns, whatever the end; left only by a killed process).
    let _preparing = crate::project::preparing::Preparing::mark(&paths.task_dir)?;
    let (task_dir, near, workspace) = (
        paths.task_dir.clone(),
        paths.near.clone(),
        paths.workspace.clone(),
    );
    // A task that could not be made leaves nothing outside the project.
    let drop = |task_ws: &TaskWorkspace| {
        let _ = task_ws.discard();
        let _ = crate::project::workspaces::remove_near(&near);
    };
    let io = |what: &str, e: std::io::Error| Error::internal(format!("{what}: {e}"));
    let mut stored = stored_request(req, &project, &loopfile)?;

    // The task never works in the user's checkout: a worktree or a copy.
    let start = (req.include_dirty, req.base_commit.as_deref());
    let task_ws = TaskWorkspace::create(&project, &workspace, &task_id, start).map_err(|e| {
        let _ = crate::project::workspaces::remove_near(&near);
        Error::internal(format!("cannot make the task workspace: {e}"))
    })?;
    if let Some(from) = &req.start_from {
        take_content(&workspace, from).inspect_err(|_| drop(&task_ws))?;
    }
    save_origin(&task_dir, &task_ws).map_err(|e| io("task state", e))?;
    stored.inputs = put_inputs(&workspace, &req.inputs).inspect_err(|_| drop(&task_ws))?;
    note_left_out(&project, &task_ws, req.include_dirty, observer);
    // Setup first: what it makes is shared like any environment. A failed
    // setup leaves no task behind (its steps' output is kept, and named).
    provide_environments(
        req,
        (&project, &loopfile),
        (&task_id, &task_ws, &workspace),
        &mut stored,
        observer,
    )
    .inspect_err(|_| drop(&task_ws))?;
    stamp_settled(&near)?;
    let check_sandbox = |stored: &StoredRequest| checks_sandbox(req, &project, &task_ws, stored);
    // What a check may run: the workspace's files, and the shared
    // environments' (seen at the same paths in the sandbox).
    let shares = stored.shares.clone();
    let present = |rel: &str| present_in(&project, &workspace, &shares, rel);
    // Each baseline run while the contract is settled, so the task's own
    // baseline runs no check twice on the untouched workspace; with the
    // results earlier tasks' baselines kept for this same tree.
    let cache = baseline_cache(req, (&project, &task_ws), &workspace, &stored)?;
    let mut seen: Vec<_> = cache.known().into_iter().collect();
    let settled = settle_contract(
        req,
        &loopfile,
        (&project, &workspace, &present),
        (&task_dir, &near, &mut seen),
        check_sandbox(&stored),
        observer,
    );
    (stored.contract, stored.drafting, stored.project_checks) =
        settled.inspect_err(|_| drop(&task_ws))?;
    settle_grants(&mut stored, &loopfile, req);
    let inherited = req.delegation.as_ref().map(|d| &d.integrity[..]);
    let (contract, contract_sha256, baseline) =
        lock_start(&mut stored, (&workspace, &task_dir), inherited)?;
    let request = serde_json::to_value(&stored).map_err(Error::from_cause)?;
    observer.note(&describe(&workspace, &task_ws.origin));
    // Baseline: the contract's checks on the workspace as it starts, so the
    // receipt shows what held before any change.
    let baseline_report = run_baseline(
        (&contract, &contract_sha256),
        &stored,
        &baseline,
        (&project, &workspace, &near),
        (&loopfile, check_sandbox(&stored), &seen),
    )?;
    if let Some(b) = &baseline_report {
        judge_baseline(req, &contract, b, stored.drafting.is_some(), observer)
            .inspect_err(|_| drop(&task_ws))?;
    }
    keep_baseline(&task_dir, baseline_report.as_ref(), observer)?;
    let owner = record_task(
        (&*store, &clock),
        (&project, &task_id, &paths, &task_ws),
        (&contract_sha256, &request),
        (req.include_dirty, claim),
        &stored.inputs,
    )?;
    // Stored: what its baseline ran is kept for the next task here.
    let mut ran: Vec<&loop_protocol::VerificationReport> = seen.iter().collect();
    ran.extend(baseline_report.as_ref());
    if let Err(e) = cache.keep(&task_id, &ran, &kept_builds(&project, &loopfile, &near)) {
        observer.note(&format!(
            "warning: the baseline's results could not be kept for the next task: {}",
            e.message
        ));
    }
    Ok((task_id, owner, store))
}

/// The project's own commands whose baseline run kept build outputs for
/// the later checks (see `BUILDS`): none when it kept none.
#[allow(clippy::disallowed_methods)] // the runtime's own directory beside the workspace
fn kept_builds(project: &Path, loopfile: &crate::loopfile::Loopfile, near: &Path) -> Vec<String> {
    let made = std::fs::read_dir(near.join(BUILDS)).is_ok_and(|mut d| d.next().is_some());
    if made {
        own_commands(project, loopfile)
    } else {
        Vec::new()
    }
}

/// The task's environments: the project's setup run (or its layer
/// taken), the guidance read, the dependency environments shared.
fn provide_environments(
    req: &Admitted,
    (project, loopfile): (&Path, &crate::loopfile::Loopfile),
    (task_id, task_ws, workspace): (&str, &TaskWorkspace, &Path),
    stored: &mut StoredRequest,
    observer: &mut dyn crate::Observer,
) -> Result<(), Error> {
    let setup = crate::project::setup::provide(
        project,
        (workspace, crate::project::locate::git_dir(&task_ws.origin)),
        task_id,
        loopfile,
        &stored.network,
        req.isolation,
        observer,
    )?;
    stored.guidance = guidance(req, workspace, observer);
    // And the notes earlier tasks of this project left that fit this one.
    if let Some(identity) = &stored.project_identity {
        let store = open_store(project)?;
        let owner = req.owner.as_deref().unwrap_or("");
        let notes =
            crate::task::memory::recall(&*store, (&identity.id, owner), &req.contract, observer);
        stored.guidance.extend(notes);
    }
    if !stored.inputs.is_empty() {
        let list: Vec<&str> = stored.inputs.iter().map(|f| f.path.as_str()).collect();
        stored.guidance.push((
            "the files given with the task".into(),
            format!(
                "These files were given with the task and are in the workspace: {}.\n",
                list.join(", ")
            ),
        ));
    }
    stored.shares = crate::project::environments::share_environments(
        project,
        workspace,
        loopfile,
        setup
            .as_ref()
            .map(|s| s.outputs.as_slice())
            .unwrap_or_default(),
        observer,
    )?;
    stored.setup = setup.map(|s| s.record);
    Ok(())
}

/// The baseline results kept for the untouched workspace's tree, in the
/// sandbox its checks get (see `baseline_cache`).
fn baseline_cache(
    req: &Admitted,
    (project, task_ws): (&Path, &TaskWorkspace),
    workspace: &Path,
    stored: &StoredRequest,
) -> Result<crate::task::baseline_cache::BaselineCache, Error> {
    let tree = Manifest::of(workspace)
        .map_err(|e| Error::internal(format!("cannot hash the workspace: {e}")))?;
    // What the checks' sandbox holds besides the tree: the shared
    // environments (their content roots), the setup layer, the network,
    // and the host's toolchain trees and variables (each tree with its
    // last change: a `cargo fetch` or a new interpreter is a new sandbox).
    let checks = checks_sandbox(req, project, task_ws, stored);
    let trees: Vec<(String, Option<u128>)> = checks
        .read_only_trees
        .iter()
        .map(|t| {
            let changed = crate::task::baseline_cache::tree_stamp(t);
            (t.display().to_string(), changed)
        })
        .collect();
    let sandbox = serde_json::json!({
        "isolation": format!("{:?}", req.isolation),
        "shares": stored.shares,
        "setup": stored.setup.as_ref().map(|s| &s.key),
        "network": stored.network,
        "env": checks.env,
        "trees": trees,
        "disk_mb": checks.disk_mb,
    });
    Ok(crate::task::baseline_cache::BaselineCache::new(
        project, &tree.root, &sandbox,
    ))
}

/// Keep the task's baseline report; say what it took from earlier tasks.
fn keep_baseline(
    task_dir: &Path,
    baseline: Option<&loop_protocol::VerificationReport>,
    observer: &mut dyn crate::Observer,
) -> Result<(), Error> {
    write_json(&task_dir.join("baseline-report.json"), &baseline)?;
    let reused: Vec<&loop_protocol::ReusedRun> = baseline
        .into_iter()
        .flat_map(|b| b.criteria.iter().flat_map(|c| c.checks.iter()))
        .filter_map(|c| c.reused_from.as_ref())
        .collect();
    if let Some(first) = reused.first() {
        observer.note(&format!(
            "baseline: {} check result(s) taken from task {}'s run on this same tree (the receipt's baseline names each)",
            reused.len(),
            first.task_id
        ));
    }
    Ok(())
}

/// The task recorded in the store, last: with everything it needs to
/// resume (a store shared with other machines keeps what the workspace
/// was made from, the uncommitted files carried in included); claimed for
/// this process with `claim`.
fn record_task(
    (store, clock): (&dyn loop_store::Store, &SystemClock),
    (project, task_id, paths, task_ws): (
        &Path,
        &str,
        &crate::project::locate::TaskPaths,
        &TaskWorkspace,
    ),
    (contract_sha256, request): (&str, &serde_json::Value),
    (include_dirty, claim): (bool, bool),
    inputs: &[loop_protocol::KeyedFile],
) -> Result<Option<loop_store::Owner>, Error> {
    let mut carried = if include_dirty && task_ws.base_commit().is_some() {
        loop_workspace::uncommitted(project)
    } else {
        Vec::new()
    };
    // The files given with the task are in no commit: kept like the
    // uncommitted ones, so a workspace rebuilt from the store has them.
    carried.extend(inputs.iter().map(|f| f.path.clone()));
    crate::task::stored_workspace::keep_start(store, task_id, paths, &carried, clock.now_ms())?;
    store
        .create_task(task_id, contract_sha256, request, clock.now_ms())
        .map_err(store_err)?;
    if claim {
        Ok(Some(crate::project::locate::claim(store, task_id, clock)?))
    } else {
        Ok(None)
    }
}

/// The contract settled and its hash, the workspace's baseline manifest
/// (kept), the check-integrity set, and the files each MCP server's
/// command names pinned as the task begins (no run of the task starts a
/// server from other ones).
/// A child keeps its parent's check-integrity set (`inherited`) as well
/// as its own.
fn lock_start(
    stored: &mut StoredRequest,
    (workspace, task_dir): (&Path, &Path),
    inherited: Option<&[loop_protocol::IntegrityRule]>,
) -> Result<(loop_protocol::Contract, String, Manifest), Error> {
    let contract = stored.contract.clone();
    let contract_sha256 = contract.sha256().map_err(|e| Error::usage(e.to_string()))?;
    let baseline = Manifest::of(workspace)
        .map_err(|e| Error::internal(format!("cannot hash the workspace: {e}")))?;
    write_json(&task_dir.join("baseline.json"), &baseline)?;
    stored.check_integrity = integrity_set(&contract, workspace);
    for rule in inherited.unwrap_or_default() {
        if !stored.check_integrity.contains(rule) {
            stored.check_integrity.push(rule.clone());
        }
    }
    for server in &mut stored.mcp_servers {
        server.pin(workspace);
    }
    Ok((contract, contract_sha256, baseline))
}

/// Whether the workspace path `rel` is there for a check to run: in the
/// workspace, or in a shared environment (seen at the same path in the
/// sandbox).
#[allow(clippy::disallowed_methods)] // lstat and existence only (no content read)
fn present_in(
    project: &Path,
    workspace: &Path,
    shares: &[loop_receipt::SharedEnvironment],
    rel: &str,
) -> bool {
    std::fs::symlink_metadata(workspace.join(rel)).is_ok()
        || shares.iter().any(|s| {
            Path::new(rel)
                .strip_prefix(&s.path)
                .is_ok_and(|rest| project.join(s.content_path()).join(rest).exists())
        })
}

/// The checks' sandbox: the environments a task shares, and the
/// contract's hosts.
fn checks_sandbox(
    req: &Admitted,
    project: &Path,
    task_ws: &TaskWorkspace,
    stored: &StoredRequest,
) -> loop_sandbox::Settings {
    crate::project::environments::with_environments(
        loop_sandbox::Settings {
            // (A time too far to add is no deadline, not a panic.)
            deadline: std::time::Instant::now().checked_add(std::time::Duration::from_secs(
                req.contract.limits.timeout_secs,
            )),
            git_dir: git_dir(&task_ws.origin),
            isolation: req.isolation,
            cancel: Some(crate::interrupt::flag()),
            egress: stored.network.egress(crate::project::network::Use::Checks),
            ..Default::default()
        },
        project,
        None,
        &stored.shares,
        stored.setup.as_ref(),
    )
}

/// The contract's checks on the untouched workspace (the runs made while
/// the contract was settled, `seen`, are taken as they are): what held
/// before any change.
fn run_baseline(
    (contract, contract_sha256): (&loop_protocol::Contract, &str),
    stored: &StoredRequest,
    baseline: &Manifest,
    (project, workspace, near): (&Path, &Path, &Path),
    (loopfile, sandbox, seen): (
        &crate::loopfile::Loopfile,
        loop_sandbox::Settings,
        &[loop_protocol::VerificationReport],
    ),
) -> Result<Option<loop_protocol::VerificationReport>, Error> {
    let (protected, _) = crate::task::request::guarded(stored, baseline)?;
    let mut verifier = SnapshotVerifier::new(workspace, &near.join("scratch"))
        .guard_protected(baseline.clone(), protected)
        .with_sandbox(sandbox)
        .with_builds(&near.join(BUILDS), own_commands(project, loopfile))
        .with_settled(&near.join(SETTLED))
        .reusing(baseline.root.clone(), seen);
    if go_module(project) {
        verifier = verifier.with_go_cache();
    }
    Ok(verifier.verify(contract, contract_sha256, 0).ok())
}

/// What the store keeps to run the task `req` asks for, before its
/// workspace is made (the parts found while preparing are added later).
fn stored_request(
    req: &Admitted,
    project: &Path,
    loopfile: &crate::loopfile::Loopfile,
) -> Result<StoredRequest, Error> {
    let scope = crate::project::locate::project_scope(project)?;
    Ok(StoredRequest {
        project_identity: Some(scope.identity),
        contract: req.contract.clone(),
        owner: req.owner.clone(),
        trigger: req.trigger.clone(),
        model: req.model.clone(),
        record: req.record.clone(),
        verify_on_change: req.verify_on_change,
        isolation: req.isolation,
        exec_policy: loopfile.exec.clone(),
        code_policy: loopfile.rules.clone(),
        progress: loopfile.progress.clone(),
        checkpoints: loopfile.checkpoints.clone(),
        check_integrity: Vec::new(),
        shares: Vec::new(),
        network: narrowed_network(
            crate::project::network::NetworkPlan::for_task(loopfile, &req.contract)?,
            &req.skills,
        ),
        setup: None,
        drafting: None,
        guidance: Vec::new(),
        project_checks: Vec::new(),
        mcp_servers: loopfile.mcp_servers.clone(),
        delegation: req.delegation.as_ref().map(|d| d.child.clone()),
        skills: req.skills.clone(),
        inputs: Vec::new(),
    }
    .tightened(req))
}

/// `plan` with its commands' and setup steps' hosts narrowed to those
/// each skill the task uses names (the checks' are narrowed in the
/// contract already).
fn narrowed_network(
    mut plan: crate::project::network::NetworkPlan,
    skills: &[loop_protocol::skill::SkillRecord],
) -> crate::project::network::NetworkPlan {
    for hosts in skills
        .iter()
        .filter_map(|s| s.capabilities.network.as_ref())
    {
        plan.commands.retain(|h| hosts.contains(h));
        plan.setup.retain(|h| hosts.contains(h));
    }
    plan
}

impl StoredRequest {
    /// A child's exec policy: its parent's, with every rule its grant adds
    /// (each `prompt` or `forbidden`, so none loosens it).
    fn tightened(mut self, req: &Admitted) -> StoredRequest {
        use loop_tools::exec_policy::{Decision, Rule};
        let added: Vec<&loop_protocol::delegation::ExecRule> = req
            .delegation
            .iter()
            .flat_map(|d| &d.child.from.authority.exec)
            .chain(req.skills.iter().flat_map(|s| &s.capabilities.exec))
            .collect();
        if added.is_empty() && req.delegation.is_none() {
            return self;
        }
        let mut policy = match &req.delegation {
            Some(inherited) => inherited.exec.clone().unwrap_or_default(),
            None => self.exec_policy.clone().unwrap_or_default(),
        };
        for r in added {
            policy.rules.push(Rule {
                prefix: r.prefix.split_whitespace().map(str::to_string).collect(),
                // Never looser than the default it may shadow: a rule
                // that matches decides over the default, so one added as
                // `prompt` under a `forbidden` default is `forbidden`.
                decision: match r.decision {
                    loop_protocol::delegation::Stricter::Prompt => Decision::Prompt,
                    loop_protocol::delegation::Stricter::Forbidden => Decision::Forbidden,
                }
                .max(policy.default),
                examples: Vec::new(),
                not_examples: Vec::new(),
            });
        }
        self.exec_policy = Some(policy);
        self
    }
}

/// Bring `workspace` to what `from` holds (a parent's workspace, for its
/// child): every file and link, each read without following a link out,
/// and checked against the digest it was listed with.
fn take_content(workspace: &Path, from: &Path) -> Result<(), Error> {
    let fail = |e: &dyn std::fmt::Display| {
        Error::internal(format!(
            "cannot make the child's workspace from its parent's: {e}"
        ))
    };
    let target = Manifest::of(from).map_err(|e| fail(&e))?;
    let tree = loop_workspace::Tree::open(from).map_err(|e| fail(&e))?;
    // A file is copied as it is read (a large one is never held whole).
    let mut fetch = |e: &loop_workspace::Entry| {
        use loop_workspace::{Fetched, Node, RebuildError};
        let gone = |why: String| RebuildError::Content {
            path: e.path.clone(),
            why,
        };
        if e.raw_path.is_some() {
            return Err(gone("its name is not UTF-8".into()));
        }
        match tree.node(&e.path) {
            Ok(Node::Symlink(t)) => Ok(Fetched::Bytes(t.into_os_string().into_encoded_bytes())),
            Ok(Node::File { file, .. }) => Ok(Fetched::Stream(Box::new(file))),
            Ok(_) => Err(gone("it is no longer a file or a link".into())),
            Err(err) => Err(gone(err.to_string())),
        }
    };
    loop_workspace::reconcile_from(workspace, &target, &mut fetch).map_err(|e| fail(&e))?;
    Ok(())
}

/// Work the person has not committed is not in a worktree made from HEAD:
/// said, so nobody wonders where it went (unless it was `carried` in).
fn note_left_out(
    project: &Path,
    task_ws: &TaskWorkspace,
    carried: bool,
    observer: &mut dyn crate::Observer,
) {
    let Some(base) = task_ws.base_commit().filter(|_| !carried) else {
        return;
    };
    let mut left = loop_workspace::uncommitted(project);
    // The Loopfile is read from the checkout as it is; said apart, so
    // nobody thinks their settings were left out.
    if let Some(at) = left.iter().position(|p| p == "Loopfile.yaml") {
        left.remove(at);
        observer.note(
            "note: Loopfile.yaml is not committed: this task follows it as it is in your checkout, but its workspace (made from the last commit) does not hold it; commit it (`git add Loopfile.yaml && git commit`) to make it part of the project",
        );
    }
    if !left.is_empty() {
        let some: Vec<&str> = left.iter().take(3).map(String::as_str).collect();
        observer.note(&format!(
            "warning: {} uncommitted change(s) are left out of the task, which starts from commit {} ({}{}); --include-dirty carries them in",
            left.len(),
            base.get(..12).unwrap_or(base),
            some.join(", "),
            if left.len() > 3 { ", …" } else { "" }
        ));
    }
}

/// The guidance the model gets: the request's (a pattern's `SKILL.md`),
/// then the project's, each named to the person.
fn guidance(
    req: &Admitted,
    workspace: &Path,
    observer: &mut dyn crate::Observer,
) -> Vec<(String, String)> {
    let mut all = req.guidance.clone();
    all.extend(crate::task::request::read_guidance(workspace));
    // Said as the prompt shows it: a file its kind's budget cuts, or
    // leaves out, is said to be so (never "given" whole).
    let shown = loop_core::prompt::shown_bytes(&all);
    for ((file, text), shown) in all.iter().zip(shown) {
        let said = if shown == text.len() {
            format!("({} bytes) is given to the model", text.len())
        } else if shown == 0 {
            format!(
                "({} bytes) is not given to the model: its kind's {} bytes are used up",
                text.len(),
                loop_core::prompt::GUIDANCE_BYTES
            )
        } else {
            format!(
                "is given to the model cut to {shown} of its {} bytes",
                text.len()
            )
        };
        observer.note(&format!("project guidance: {file} {said}"));
    }
    all
}

/// The workspace and its files' times are settled: what changes after
/// this is the task's (see `SnapshotVerifier::with_settled`).
#[allow(clippy::disallowed_methods)] // the runtime's own stamp beside the workspace
fn stamp_settled(near: &Path) -> Result<(), Error> {
    std::fs::write(near.join(SETTLED), b"")
        .map_err(|e| Error::internal(format!("{}: {e}", near.join(SETTLED).display())))
}

/// The check-integrity set: the files that define what the checks mean,
/// the project's judges (a `verify.py` a check runs, an `expected.txt` it
/// compares with) among them.
fn integrity_set(
    contract: &loop_protocol::Contract,
    workspace: &Path,
) -> Vec<loop_protocol::IntegrityRule> {
    let mut set = loop_verifier::integrity::derive(contract, workspace);
    for rule in crate::contract::judges::judge_rules(
        contract,
        &|p| loop_workspace::door::is_file(workspace, p),
        Some(workspace),
    ) {
        if !set.iter().any(|r| r.glob == rule.glob) {
            set.push(rule);
        }
    }
    set
}

/// What the baseline says of the contract, told to the person: a written
/// contract whose every change criterion already holds is refused (the
/// error), and each non-guard criterion that holds is warned about.
fn judge_baseline(
    req: &Admitted,
    contract: &loop_protocol::Contract,
    b: &loop_protocol::VerificationReport,
    drafted: bool,
    observer: &mut dyn crate::Observer,
) -> Result<(), Error> {
    observer.note(&format!(
        "baseline: {} of {} criteria hold before any change",
        b.passed_criteria(),
        b.criteria.len()
    ));
    // A written contract whose every change criterion holds already
    // can be met by doing nothing: refused, as such a draft is
    // rejected, unless the person insists (the baseline report, in
    // the receipt, shows it) or marks them `guard: true`.
    let change: Vec<&str> = contract
        .criteria
        .iter()
        .filter(|k| !k.guard)
        .map(|k| k.id.as_str())
        .collect();
    // (A check the person kept with `allow_vacuous` says they know.)
    let insisted = contract.criteria.iter().any(|k| {
        k.checks
            .iter()
            .any(|c| matches!(c, loop_protocol::Check::Run(r) if r.allow_vacuous))
    });
    if !drafted
        && !req.allow_vacuous
        && !insisted
        && !change.is_empty()
        && crate::contract::critic::asks_for_change(&contract.instruction)
        && change
            .iter()
            .all(|id| b.criteria.iter().any(|c| c.id == *id && c.passed))
    {
        return Err(Error::usage(format!(
            "every criterion of the contract ({}) already holds on the untouched workspace, so nothing in it can tell whether the task did what it asks: add a check the change must make pass (one that fails now), mark a criterion `guard: true` if it must only keep holding, or run anyway with --allow-vacuous (the receipt's baseline shows it)",
            change
                .iter()
                .map(|id| format!("`{id}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // A criterion that holds already proves nothing about the work
    // (unless it is a guard: one that must keep holding).
    for c in b.criteria.iter().filter(|c| c.passed) {
        let guard = contract.criteria.iter().any(|k| k.id == c.id && k.guard);
        if !guard {
            observer.note(&format!(
                "warning: criterion `{}` already passes before any change: it cannot tell whether the task did anything (check the new behaviour, or mark it `guard: true` if it must only keep passing)",
                c.id
            ));
        }
    }
    Ok(())
}

/// Where a task's contract is settled: (the project, the task's workspace,
/// whether a workspace path is there, shared environments included).
type Where<'a> = (&'a Path, &'a Path, &'a dyn Fn(&str) -> bool);

/// Where a task keeps the build outputs its project's own checks made of
/// the untouched workspace, shown under the workspace in every later check
/// (see `SnapshotVerifier::with_builds`), beside the workspace.
pub(crate) const BUILDS: &str = "builds";

/// The stamp whose time is when a task's workspace was made (see
/// `SnapshotVerifier::with_settled`), beside the workspace.
pub(crate) const SETTLED: &str = "settled";

/// Whether checks build Go in `project` (a `go.mod` at its top): their
/// build cache is then kept like a build directory (see `BUILDS`).
pub(crate) fn go_module(project: &Path) -> bool {
    loop_workspace::door::is_file(project, "go.mod")
}

/// The project's own check commands (the Loopfile's `verification:`, else
/// detected per stack): the runs whose build outputs a task keeps.
fn own_commands(project: &Path, loopfile: &crate::loopfile::Loopfile) -> Vec<String> {
    crate::project::stacks::project_checks(project, &loopfile.verification)
        .into_iter()
        .map(|c| c.command)
        .collect()
}

/// A settled contract: (contract, how it was drafted, the project checks).
type LockedContract = (
    loop_protocol::Contract,
    Option<loop_protocol::DraftingRecord>,
    Vec<loop_protocol::StackCheckRecord>,
);

/// The contract the task locks: as given, or drafted from the instruction
/// (judged and confirmed, see `draft.rs`; a failed drafting's record is
/// kept in the task's directory and named); with the project's checks that
/// hold before the work as guards (the Loopfile's `verification:` ones,
/// and for a draft the detected ones too) and the Loopfile's
/// `verification.checks` criteria. (contract, drafting, project checks)
#[allow(clippy::disallowed_methods)] // an empty scratch workspace in the task directory the runtime made
fn settle_contract(
    req: &Admitted,
    loopfile: &crate::loopfile::Loopfile,
    (project, workspace, present): Where<'_>,
    (task_dir, near, seen): (&Path, &Path, &mut Vec<loop_protocol::VerificationReport>),
    sandbox: loop_sandbox::Settings,
    observer: &mut dyn crate::Observer,
) -> Result<LockedContract, Error> {
    let scratch = near.join("scratch");
    let own = own_commands(project, loopfile);
    let mut baseline = |c: &loop_protocol::Contract| {
        let sha = c.sha256().map_err(|e| Error::usage(e.to_string()))?;
        // A fresh deadline each run: drafting and a person's edit take
        // time no check should lose.
        let mut sandbox = sandbox.clone();
        sandbox.deadline = std::time::Instant::now().checked_add(std::time::Duration::from_secs(
            req.contract.limits.timeout_secs,
        ));
        let root = seen.first().map(|r| r.manifest_root.clone());
        let mut verifier = SnapshotVerifier::new(workspace, &scratch)
            .with_sandbox(sandbox)
            .with_builds(&near.join(BUILDS), own.clone())
            .with_settled(&near.join(SETTLED));
        if go_module(project) {
            verifier = verifier.with_go_cache();
        }
        if let Some(root) = root {
            verifier = verifier.reusing(root, seen);
        }
        let report = verifier.verify(c, &sha, 0).map_err(Error::from_cause)?;
        seen.push(report.clone());
        Ok(report)
    };
    // The same checks with no project at all: an empty directory, no
    // shared environments, the same sandbox otherwise.
    let empty_dir = near.join("empty-workspace");
    let mut empty = |c: &loop_protocol::Contract| {
        let sha = c.sha256().map_err(|e| Error::usage(e.to_string()))?;
        let _ = loop_workspace::remove_tree(&empty_dir);
        std::fs::create_dir_all(&empty_dir)
            .map_err(|e| Error::internal(format!("empty workspace: {e}")))?;
        let mut sandbox = sandbox.clone();
        sandbox.shares.clear();
        sandbox.deadline = std::time::Instant::now().checked_add(std::time::Duration::from_secs(
            req.contract.limits.timeout_secs,
        ));
        let report = SnapshotVerifier::new(&empty_dir, &scratch)
            .with_sandbox(sandbox)
            .verify(c, &sha, 0)
            .map_err(Error::from_cause);
        let _ = loop_workspace::remove_tree(&empty_dir);
        report
    };
    let (mut contract, drafting, checks) = match req.source {
        crate::ContractSource::Draft { accept } => {
            // Detected in the project: its untracked venv is only there.
            let stack = crate::project::stacks::project_checks(project, &loopfile.verification);
            let (c, d, k) = draft_contract(
                req,
                loopfile,
                (workspace, present),
                task_dir,
                &stack,
                accept,
                (&mut baseline, &mut empty),
                observer,
            )?;
            (c, Some(d), k)
        }
        crate::ContractSource::Given => {
            // A check that cannot fail is refused here as it is rejected
            // in a draft, unless the person insists (recorded).
            let mut given = req.contract.clone();
            refuse_self_judged(&given, workspace, present)?;
            refuse_vacuous(&mut given, req.allow_vacuous, &mut empty, observer)?;
            if req.delegation.is_some() {
                refuse_made_files(&given, present, &mut baseline)?;
            }
            // A written contract gets the project's checks as guards too:
            // what builds and passes before the work must after it.
            let stack = crate::project::stacks::project_checks(project, &loopfile.verification);
            if stack.is_empty() {
                (given, None, Vec::new())
            } else {
                let (c, _, k) =
                    crate::contract::draft::guard_project_checks(&given, &stack, &mut baseline)?;
                (c, None, k)
            }
        }
    };
    for k in &checks {
        observer.note(&format!(
            "project check `{}` ({} {}): {}",
            k.command, k.stack, k.kind, k.used
        ));
    }
    // (A drafted contract has them already: the person saw them.)
    let extra: &[loop_protocol::Criterion] = if drafting.is_some() {
        &[]
    } else {
        &loopfile.verification.checks
    };
    for c in extra {
        if contract.criteria.iter().any(|have| have.id == c.id) {
            return Err(Error::usage(format!(
                "the Loopfile's verification.checks criterion `{}` has the id of one of the contract's",
                c.id
            )));
        }
        contract.criteria.push(c.clone());
    }
    Ok((contract, drafting, checks))
}

/// A child's contract is a model's, judged as a draft is: a check that
/// passes on the untouched workspace once the files it tests for merely
/// exist is refused (see [`crate::contract::critic::existence_probe`]).
fn refuse_made_files(
    contract: &loop_protocol::Contract,
    present: &dyn Fn(&str) -> bool,
    baseline: &mut crate::contract::draft::Runner<'_>,
) -> Result<(), Error> {
    use crate::contract::critic::{existence_probe, judge_existence};
    let Some((probe, probed)) = existence_probe(contract, present) else {
        return Ok(());
    };
    // (Only of criteria failing now: one that holds already is the
    // baseline's to judge.)
    let now = baseline(contract)?;
    let found = judge_existence(contract, &probed, &baseline(&probe)?, Some(&now));
    if found.is_empty() {
        return Ok(());
    }
    Err(Error::usage(format!(
        "the child's contract is refused:\n  - {}",
        found.join("\n  - ")
    )))
}

/// A written contract whose change criterion is decided by a file the task
/// would write (see [`crate::contract::judges`]) is refused by name, unless the
/// contract lists the path in `judge_may_change` (kept in it, so in the
/// receipt). New test files the contract asks for are judged by their own
/// design (a second pass without them) and pass here.
fn refuse_self_judged(
    contract: &loop_protocol::Contract,
    workspace: &Path,
    present: &dyn Fn(&str) -> bool,
) -> Result<(), Error> {
    let rules = loop_verifier::integrity::derive(contract, workspace);
    let new_tests = loop_verifier::integrity::new_test_files(contract, &rules, present);
    let exempt = |p: &str| {
        contract.judge_may_change.iter().any(|j| j == p) || new_tests.iter().any(|t| t == p)
    };
    let found = crate::contract::judges::self_judged(contract, present, &exempt, Some(workspace));
    if found.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = found.iter().map(|(_, why)| format!("  - {why}")).collect();
    Err(Error::usage(format!(
        "the contract lets the task write its own judge:\n{}\ncheck with the project's own code and tests, or, if the task is meant to write that file, list it in the contract's `judge_may_change` (the receipt records it)",
        list.join("\n")
    )))
}

/// A written contract's `run` checks are also run on an empty workspace
/// before it is locked: one that passes there proves nothing about the
/// project and is refused, naming it, unless the person says so (`allow`,
/// `--allow-vacuous`), in which case it is marked `allow_vacuous` in the
/// contract the receipt and the ledger keep. A check already marked so by
/// the contract's writer is not run again.
fn refuse_vacuous(
    contract: &mut loop_protocol::Contract,
    allow: bool,
    empty: &mut crate::contract::draft::Runner<'_>,
    observer: &mut dyn crate::Observer,
) -> Result<(), Error> {
    use loop_protocol::Check;
    // Only what is not already allowed is judged.
    let mut judged = contract.clone();
    for c in &mut judged.criteria {
        c.checks
            .retain(|k| !matches!(k, Check::Run(r) if r.allow_vacuous));
    }
    judged.criteria.retain(|c| {
        c.checks
            .iter()
            .any(|k| matches!(k, Check::Run(_) | Check::Page(_)))
    });
    if judged.criteria.is_empty() {
        return Ok(());
    }
    let found = crate::contract::critic::vacuous(&judged, &empty(&judged)?);
    if found.is_empty() {
        return Ok(());
    }
    if !allow {
        let list: Vec<String> = found
            .iter()
            .map(|(_, _, why)| format!("  - {why}"))
            .collect();
        return Err(Error::usage(format!(
            "the contract has {} check(s) that cannot fail:\n{}\nmake each test the project (a check must fail while the work is not done), or keep it anyway with --allow-vacuous (`allow_vacuous: true` on the check in a contract file), which the receipt records",
            found.len(),
            list.join("\n")
        )));
    }
    for (ci, ki, why) in found {
        // Indices are of `judged`: find the same check in the contract.
        let id = &judged.criteria[ci].id;
        let Some(Check::Run(want)) = judged.criteria[ci].checks.get(ki) else {
            continue;
        };
        let want = want.clone();
        if let Some(c) = contract.criteria.iter_mut().find(|c| &c.id == id)
            && let Some(Check::Run(r)) = c
                .checks
                .iter_mut()
                .find(|k| matches!(k, Check::Run(r) if *r == want))
        {
            r.allow_vacuous = true;
        }
        observer.note(&format!(
            "{why}; kept as --allow-vacuous says (recorded in the contract)"
        ));
    }
    Ok(())
}

/// The contract drafted from the instruction, judged and confirmed.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::disallowed_methods)] // drafting.json in the task directory the runtime made
fn draft_contract(
    req: &Admitted,
    loopfile: &crate::loopfile::Loopfile,
    (workspace, present): (&Path, &dyn Fn(&str) -> bool),
    task_dir: &Path,
    stack: &[crate::project::stacks::StackCheck],
    accept: bool,
    (baseline, empty): (
        &mut crate::contract::draft::Runner<'_>,
        &mut crate::contract::draft::Runner<'_>,
    ),
    observer: &mut dyn crate::Observer,
) -> Result<crate::contract::draft::Drafted, Error> {
    let project = req
        .project
        .canonicalize()
        .unwrap_or_else(|_| req.project.clone());
    let mut model = crate::models::load_drafter(req.model.as_deref(), loopfile, &project)?;
    let mut checker = crate::models::load_checker(req.model.as_deref(), loopfile)?;
    let policy = loopfile.exec.clone().unwrap_or_default();
    observer.note(&format!(
        "drafting the contract with {} (the critic judges each draft)",
        model.info().name
    ));
    let drafted = crate::contract::draft::draft(
        crate::contract::draft::Drafting {
            shell: &req.contract,
            model: model.as_mut(),
            workspace,
            present,
            policy: &policy,
            baseline,
            empty,
            accept,
            draft_file: &task_dir.join("draft.json"),
            guidance: &crate::task::request::read_guidance(workspace),
            stack,
            extra: &loopfile.verification.checks,
            checker: checker
                .as_deref_mut()
                .map(|c| c as &mut (dyn loop_core::Model + Send)),
        },
        observer,
    );
    match drafted {
        Ok(x) => Ok(x),
        Err(failed) => {
            let (e, record) = *failed;
            let kept = task_dir.join("drafting.json");
            let _ = std::fs::write(
                &kept,
                serde_json::to_vec_pretty(&record).unwrap_or_default(),
            );
            Err(Error::usage(format!(
                "{}
(the drafting record is in {})",
                e.message,
                kept.display()
            )))
        }
    }
}

/// What the contract it locks says beyond what was written: the
/// Loopfile's grant of the browser (so the receipt says it; a child gets
/// it only from its parent), and the files given with the task protected
/// (a model that rewrote them could change what a check compares with,
/// and what it wrote there would never be applied).
fn settle_grants(stored: &mut StoredRequest, loopfile: &crate::loopfile::Loopfile, req: &Admitted) {
    if loopfile.browser && req.delegation.is_none() {
        stored.contract.browser = true;
    }
    // Each file given, exactly: the project's own files under `inputs/`
    // stay the task's to change.
    for f in &stored.inputs {
        // As a glob matching that name alone (`[`, `*`, `?`, `{` are legal
        // in a file's name).
        let exact: String = f
            .path
            .chars()
            .map(|c| match c {
                '*' | '?' | '[' | ']' | '{' | '}' => format!("[{c}]"),
                c => c.to_string(),
            })
            .collect();
        if !stored.contract.protected.contains(&exact) {
            stored.contract.protected.push(exact);
        }
    }
}

/// A line saying where the task works.
fn describe(workspace: &Path, origin: &Origin) -> String {
    match origin {
        Origin::Worktree {
            branch,
            base_commit,
            dirty_included,
            ..
        } => format!(
            "workspace {} (git worktree on {branch} from {}{})",
            workspace.display(),
            &base_commit[..12.min(base_commit.len())],
            if *dirty_included {
                ", with your uncommitted changes"
            } else {
                ""
            }
        ),
        Origin::Copy { skipped } if skipped.is_empty() => {
            format!("workspace {} (copy)", workspace.display())
        }
        Origin::Copy { skipped } => format!(
            "workspace {} (copy; skipped {})",
            workspace.display(),
            skipped.join(", ")
        ),
    }
}

/// Put the files given with the task in its workspace as `inputs/NAME`
/// (through the door: no link on the way, none written through), before
/// its baseline is taken: they are where it starts, not what it changed.
/// A name the project already has there is refused, naming it.
fn put_inputs(
    workspace: &Path,
    inputs: &[crate::task::intake::InputFile],
) -> Result<Vec<loop_protocol::KeyedFile>, Error> {
    let mut out = Vec::new();
    for f in inputs {
        let rel = format!("inputs/{}", f.name);
        if !matches!(
            loop_workspace::door::node(workspace, &rel),
            Ok(loop_workspace::Node::Missing)
        ) {
            return Err(Error::usage(format!(
                "input file {}: the project already has {rel}; rename the file given",
                f.name
            )));
        }
        loop_workspace::door::write(workspace, &rel, &f.bytes).map_err(|e| {
            Error::usage(format!(
                "input file {}: cannot put it at {rel}: {e}",
                f.name
            ))
        })?;
        out.push(loop_protocol::KeyedFile {
            sha256: loop_protocol::hash::sha256_hex(&f.bytes),
            path: rel,
            shown_bytes: None,
        });
    }
    Ok(out)
}
