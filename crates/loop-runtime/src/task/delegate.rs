//! The `delegate` tool: a task hands part of its work to a child task.
//!
//! The proposal is granted out of the parent's authority and what it has
//! left (`loop_protocol::delegation`), the child's contract is read as a
//! contract file is, and the child enters through the one intake as a task
//! of the same project: its workspace made from the parent's as it is now,
//! its writes confined to the paths granted, its exec rules the parent's
//! and the ones granted, its model the parent's (a scripted model plays
//! its script's `children:` list). It runs to its own end, under the same
//! Director, with its own ledger and signed receipt. A verified child's
//! change — what it changed against the parent's state when it began — is
//! merged into the parent's workspace only through the parent's choke
//! point (the judgements a command's effects get), and only where the
//! parent changed nothing since; a child that ends otherwise changes
//! nothing, and its outcome comes back to the model as an observation.
//! Nothing a child did counts for the parent's contract: the parent is
//! verified by its own checks, on its own seal.

use crate::OnPrompt;
use crate::task::request::{ChildOf, StoredRequest};
use loop_core::BoundaryError;
use loop_protocol::ChildRun;
use loop_protocol::delegation::{self, Authority, DelegatedFrom, Left, Proposal};
use loop_protocol::{Observation, ToolCall, ToolOutcome};
use loop_tools::ToolBox;
use loop_workspace::Manifest;
use std::path::{Path, PathBuf};

/// The tool's name.
pub const TOOL: &str = "delegate";

/// How children are run here to their end, handed down by whoever drives
/// the parent (`run::run_task` and `run::resume_task`).
#[derive(Clone, Copy)]
pub(crate) struct StartChild {
    /// Run an admitted task.
    pub start: fn(
        crate::task::intake::Admitted,
        &mut dyn crate::Observer,
    ) -> Result<crate::TaskReport, crate::Error>,
    /// Run a stored task again from where its record stops.
    pub resume: fn(
        &Path,
        &str,
        OnPrompt,
        &mut dyn crate::Observer,
    ) -> Result<crate::TaskReport, crate::Error>,
}

/// What a task needs to start its children.
pub(crate) struct Delegator<'a> {
    pub project: &'a Path,
    pub task_id: &'a str,
    pub stored: &'a StoredRequest,
    pub workspace: PathBuf,
    /// Where a child's change is laid out before it is merged.
    pub scratch: PathBuf,
    /// This task's directory (where the children charged to it are
    /// listed).
    pub task_dir: PathBuf,
    pub on_prompt: OnPrompt,
    /// The person this task's front end asks: its children ask them too.
    pub person: Option<crate::task::asking::Person>,
    pub start_child: StartChild,
}

/// Children one turn starts, at most.
pub const TOGETHER: usize = 4;

/// What the parent's commands have written and may write in all, and
/// what each child of a turn may write of what is left (bytes).
#[derive(Clone, Copy)]
struct Writes {
    written: u64,
    most: u64,
    /// The children the turn may start (its calls of distinct ids, at
    /// most [`TOGETHER`]).
    starting: usize,
}

impl Writes {
    /// What one child of the turn may write, in MiB.
    fn share_mb(&self) -> u64 {
        (self.most.saturating_sub(self.written) / self.starting.max(1) as u64) >> 20
    }

    /// The refusal of a child whose share is under a MiB.
    fn refused(&self, id: &str) -> ToolOutcome {
        outcome(Observation::refused(
            id,
            TOOL,
            "limit: write_mb",
            format!(
                "The child was not started: this task's commands have written {} MiB of its {} MiB (limits.write_mb); a child's commands write out of what is left, {}. Do the work here{}.",
                self.written >> 20,
                self.most >> 20,
                if self.starting > 1 {
                    format!(
                        "shared by the {} children this turn starts, and each share would be under 1 MiB",
                        self.starting
                    )
                } else {
                    "and less than 1 MiB is left".to_string()
                },
                if self.starting > 1 {
                    ", or start fewer children at once"
                } else {
                    ""
                }
            ),
        ))
    }
}

/// How many children `calls` may start: those of ids not seen before in
/// the turn, at most [`TOGETHER`].
fn starting(calls: &[ToolCall]) -> usize {
    calls
        .iter()
        .enumerate()
        .filter(|(k, c)| !calls[..*k].iter().any(|d| d.id == c.id))
        .count()
        .min(TOGETHER)
}

/// What a `delegate` call comes to before anything runs.
enum Plan {
    /// Answered already (refused, or its arguments unreadable).
    Answered(ToolOutcome),
    /// A new child, admitted.
    Fresh {
        granted: Authority,
        admitted: Box<crate::task::intake::Admitted>,
    },
    /// The child an earlier run of this task started (`ended`: its end).
    Started {
        id: String,
        granted: Authority,
        ended: Option<crate::TaskReport>,
    },
}

/// A child's observer: nothing of its story is shown (the parent's
/// ledger tells it), but its questions go to the parent's person.
struct Asker(Option<crate::task::asking::Turn>);

impl loop_core::Observer for Asker {
    fn on_event(&mut self, _event: &loop_protocol::Event) {}
}

impl crate::Observer for Asker {
    fn note(&mut self, _line: &str) {}

    fn prompter(&mut self) -> Option<Box<dyn crate::Prompter>> {
        self.0
            .take()
            .map(|t| Box::new(t) as Box<dyn crate::Prompter>)
    }
}

fn outcome(observation: Observation) -> ToolOutcome {
    ToolOutcome {
        observation,
        control: None,
    }
}

impl Delegator<'_> {
    /// The children's starter of task `task_id`, if its contract lets it
    /// delegate at all (the tool is offered then).
    pub fn of<'a>(
        (project, task_id, stored): (&'a Path, &'a str, &'a StoredRequest),
        paths: &crate::project::locate::TaskPaths,
        (on_prompt, person, start_child): (
            OnPrompt,
            Option<crate::task::asking::Person>,
            StartChild,
        ),
    ) -> Option<Delegator<'a>> {
        let l = &stored.contract.limits;
        (l.max_children > 0 && l.max_depth > 0).then(|| Delegator {
            project,
            task_id,
            stored,
            workspace: paths.workspace.clone(),
            scratch: paths.near.join("delegate"),
            task_dir: paths.task_dir.clone(),
            on_prompt,
            person,
            start_child,
        })
    }

    /// This task's own authority: what its parent granted it, else its
    /// contract's.
    fn own(&self) -> Authority {
        let mut own = match &self.stored.delegation {
            Some(c) => c.from.authority.clone(),
            None => Authority::of_contract(&self.stored.contract),
        };
        // A skill that names its paths narrows what this task may grant.
        for paths in self
            .stored
            .skills
            .iter()
            .filter_map(|s| s.capabilities.writable.as_ref())
        {
            let beneath =
                |w: &str, p: &str| p.is_empty() || w == p || w.starts_with(&format!("{p}/"));
            own.writable = if own.writable.iter().any(String::is_empty) {
                paths.clone()
            } else {
                own.writable
                    .iter()
                    .filter(|w| paths.iter().any(|p| beneath(w, p)))
                    .cloned()
                    .collect()
            };
        }
        own
    }

    /// Run the children `calls` propose — each granted out of `left` less
    /// what the ones before it were granted, all started together (at
    /// most [`TOGETHER`] at a time) — and conclude each, in the calls'
    /// order: its record, and a verified child's change merged through
    /// `tools`. One answer per call.
    pub fn run_many(
        &mut self,
        step: u32,
        calls: &[ToolCall],
        left: &Left,
        tools: &mut ToolBox,
    ) -> Result<Vec<(ToolOutcome, Option<ChildRun>)>, BoundaryError> {
        let left_at_start = left.secs;
        let mut left = left.clone();
        // What this task's commands may still write (its children's count
        // against it too), shared evenly by the children of this turn.
        let (written, most) = (tools.written(), tools.write_limit());
        let writes = Writes {
            written,
            most,
            starting: starting(calls),
        };
        let mut index = self.children_so_far()?.saturating_add(1);
        let mut plans = Vec::with_capacity(calls.len());
        for (k, call) in calls.iter().enumerate() {
            // A child is known by its turn and call id (its record, a
            // resumed run finding it): a second call with the same id in
            // one turn would run a child nobody records.
            let plan = if calls[..k].iter().any(|c| c.id == call.id) {
                Plan::Answered(outcome(Observation::refused(
                    &call.id,
                    TOOL,
                    "delegation: one child per call id",
                    "The child was not started: another call of this turn has the same id.",
                )))
            } else if k >= TOGETHER {
                Plan::Answered(outcome(Observation::refused(
                    &call.id,
                    TOOL,
                    "delegation: children together",
                    format!(
                        "The child was not started: at most {TOGETHER} children start in one turn; propose it again in a later one."
                    ),
                )))
            } else {
                self.plan((step, call), (&left, writes), index)?
            };
            match &plan {
                Plan::Fresh { granted, .. } => {
                    left = left.less_granted(&granted.budget);
                    index = index.saturating_add(1);
                }
                Plan::Started { granted, .. } => left = left.less_granted(&granted.budget),
                Plan::Answered(_) => {}
            }
            plans.push(plan);
        }
        // Children run one after another when no place is free: none
        // runs past the time this task had left as the turn began.
        let deadline =
            std::time::Instant::now().checked_add(std::time::Duration::from_secs(left_at_start));
        let reports = self.watching(deadline, || self.run_plans(&plans));
        // A child that was stored and then stopped before its end (its
        // run failed: the store, the disk, its claim) is an outage, not an
        // answer: this run stops too, unended, before anything of the
        // turn is merged or recorded; resumed, each call finds its child
        // again and it goes on. (One refused before it was stored is the
        // model's to hear, below.)
        for (call, report) in calls.iter().zip(&reports) {
            if let Some(Err(e)) = report
                && matches!(
                    e.kind,
                    crate::ErrorKind::Internal
                        | crate::ErrorKind::Unavailable
                        | crate::ErrorKind::Conflict
                )
                && let Some(child) = self.started_by(step, &call.id)?
            {
                return Err(BoundaryError::interrupted(format!(
                    "child task {} stopped before its end: {e}; `loop resume {}` goes on with it",
                    child.id, self.task_id
                )));
            }
        }
        let mut out = Vec::with_capacity(calls.len());
        for ((call, plan), report) in calls.iter().zip(plans).zip(reports) {
            let id = call.id.as_str();
            out.push(match (plan, report) {
                (Plan::Answered(o), _) => (o, None),
                (_, Some(Err(e))) => (
                    outcome(Observation::error(
                        id,
                        TOOL,
                        format!("the child could not be made or run: {e}"),
                    )),
                    None,
                ),
                (Plan::Fresh { granted, .. } | Plan::Started { granted, .. }, Some(Ok(report))) => {
                    self.conclude(id, &report, granted, tools)?
                }
                (_, None) => (
                    outcome(Observation::error(id, TOOL, "the child was not run")),
                    None,
                ),
            });
        }
        Ok(out)
    }

    /// What to do for `call`, with `left` to grant from: refuse it, start
    /// a new child, or go on with the one an earlier run of this task
    /// started at the same place among its children (never a second one).
    fn plan(
        &self,
        (step, call): (u32, &ToolCall),
        (left, writes): (&Left, Writes),
        index: u32,
    ) -> Result<Plan, BoundaryError> {
        let id = call.id.as_str();
        if let Some(started) = self.started_by(step, id)? {
            return self.started(started);
        }
        // A rule that would loosen the parent's is refused by its rule,
        // not as unreadable arguments (`allow` is no decision a child's
        // rule can take).
        let looser: Vec<delegation::Refusal> = call.args["exec"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["decision"] == "allow")
            .map(|r| delegation::Refusal::LooserExec {
                prefix: r["prefix"].as_str().unwrap_or_default().to_string(),
            })
            .collect();
        if !looser.is_empty() {
            return Ok(Plan::Answered(refused_grant(id, &looser)));
        }
        let p: Proposal = match serde_json::from_value(call.args.clone()) {
            Ok(p) => p,
            Err(e) => {
                return Ok(Plan::Answered(outcome(Observation::error(
                    id,
                    TOOL,
                    format!("invalid arguments for `delegate`: {e}"),
                ))));
            }
        };
        // A child writes out of what this task may still write, shared by
        // the children of the turn: a share under a MiB (the least a
        // contract's `write_mb` can say) starts none.
        let write_mb = writes.share_mb();
        if write_mb == 0 {
            return Ok(Plan::Answered(writes.refused(id)));
        }
        let granted = match delegation::grant(&self.own(), left, &p) {
            Ok(a) => a,
            Err(no) => return Ok(Plan::Answered(refused_grant(id, &no))),
        };
        let contract = match delegation::child_contract(&self.stored.contract, &granted, &p) {
            Ok(mut c) => {
                c.limits.write_mb = c.limits.write_mb.min(write_mb);
                c
            }
            Err(e) => {
                return Ok(Plan::Answered(outcome(Observation::refused(
                    id,
                    TOOL,
                    "delegation: the child's contract",
                    format!("The child was not started: its contract is refused:\n{e}"),
                ))));
            }
        };
        // Judged as a drafted contract is, by its text (a check that
        // proves nothing, one the exec policy forbids, …); by execution
        // (a check that passes on an empty workspace, criteria that all
        // hold already) when the child is prepared.
        let reasons = crate::contract::critic::static_reasons(
            &contract,
            &self.stored.exec_policy.clone().unwrap_or_default(),
            &|rel| self.present(rel),
            Some(&self.workspace),
        );
        if !reasons.is_empty() {
            return Ok(Plan::Answered(outcome(Observation::refused(
                id,
                TOOL,
                "delegation: the child's contract",
                format!(
                    "The child was not started: its contract is refused:\n- {}",
                    reasons.join("\n- ")
                ),
            ))));
        }
        let child = ChildOf {
            from: DelegatedFrom {
                parent: self.task_id.to_string(),
                authority: granted.clone(),
            },
            index,
            step,
            call_id: id.to_string(),
        };
        Ok(match self.admit(contract, child) {
            Ok(admitted) => Plan::Fresh {
                granted,
                admitted: Box::new(admitted),
            },
            Err(e) => Plan::Answered(outcome(Observation::error(
                id,
                TOOL,
                format!("the child could not be made: {e}"),
            ))),
        })
    }

    /// The plan for a child an earlier run of this task started.
    fn started(&self, started: loop_store::TaskRecord) -> Result<Plan, BoundaryError> {
        let lost =
            |e: &dyn std::fmt::Display| BoundaryError::new(format!("child {}: {e}", started.id));
        let stored: StoredRequest =
            serde_json::from_value(started.request.clone()).map_err(|e| lost(&e))?;
        let granted = stored
            .delegation
            .map(|c| c.from.authority)
            .ok_or_else(|| lost(&"it records no grant"))?;
        let paths = crate::project::locate::TaskPaths::of(self.project, &started.id);
        let ended = if started.is_terminal() {
            let name = started
                .outcome
                .ok_or_else(|| lost(&"it ended with no outcome"))?;
            Some(crate::TaskReport {
                task_id: started.id.clone(),
                outcome: loop_protocol::OutcomeRecord {
                    kind: name.kind,
                    limit: name.limit,
                    reason: started.reason.clone().unwrap_or_default(),
                },
                receipt: started
                    .receipt
                    .as_ref()
                    .map(|r| self.project.join(r))
                    .unwrap_or_default(),
                workspace: paths.workspace.clone(),
            })
        } else {
            None
        };
        Ok(Plan::Started {
            id: started.id,
            granted,
            ended,
        })
    }

    /// Run every plan that has a child to run and give each one's report,
    /// in the plans' order (`None`: nothing to run). Children run together
    /// as the process's places allow (see [`crate::Places`]): this task
    /// lends them its own place while it waits, and each further child
    /// runs beside it only in a place free now; without a bound, all of
    /// them at once (a turn starts at most [`TOGETHER`]).
    fn run_plans(&self, plans: &[Plan]) -> Vec<Option<Result<crate::TaskReport, crate::Error>>> {
        type Report = Result<crate::TaskReport, crate::Error>;
        let (start, resume) = (self.start_child.start, self.start_child.resume);
        let (project, on_prompt) = (self.project, self.on_prompt);
        let mut out: Vec<Option<Report>> = plans
            .iter()
            .map(|plan| match plan {
                Plan::Started { ended: Some(r), .. } => Some(Ok(r.clone())),
                _ => None,
            })
            .collect();
        let todo: Vec<usize> = (0..plans.len())
            .filter(|&i| {
                matches!(
                    plans[i],
                    Plan::Fresh { .. } | Plan::Started { ended: None, .. }
                )
            })
            .collect();
        let places = crate::Places::current();
        let width = todo.len().min(TOGETHER);
        let extra: Vec<crate::Place> = match &places {
            Some(p) => (1..width).map_while(|_| p.try_take()).collect(),
            None => Vec::new(),
        };
        let runners = if places.is_some() {
            (1 + extra.len()).min(width)
        } else {
            width
        };
        let next = std::sync::atomic::AtomicUsize::new(0);
        let reports: Vec<std::sync::Mutex<Option<Report>>> =
            todo.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let run_one = |i: usize| -> Report {
            let mut asker = Asker(self.person.as_ref().map(crate::task::asking::Person::turn));
            match &plans[i] {
                Plan::Started { id, .. } => resume(project, id, on_prompt, &mut asker),
                Plan::Fresh { admitted, .. } => start((**admitted).clone(), &mut asker),
                Plan::Answered(_) => Err(crate::Error::internal("nothing to run")),
            }
        };
        // Each runner beyond the first holds one of the places taken, and
        // gives it back as soon as it finds nothing more to run.
        let mut extra = extra.into_iter();
        std::thread::scope(|scope| {
            for _ in 0..runners {
                let held = extra.next();
                let (places, next, todo, reports, run_one) =
                    (&places, &next, &todo, &reports, &run_one);
                scope.spawn(move || {
                    let _held = held;
                    crate::Places::enter(places.clone());
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(&i) = todo.get(k) else { break };
                        let report =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_one(i)))
                                .unwrap_or_else(|_| {
                                    Err(crate::Error::internal("the child's run panicked"))
                                });
                        *reports[k]
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(report);
                    }
                });
            }
        });
        for (k, i) in todo.into_iter().enumerate() {
            out[i] = reports[k]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
        }
        out
    }

    /// The record of the ended child `report`, its change merged if it was
    /// verified, and what the model is told.
    fn conclude(
        &self,
        id: &str,
        report: &crate::TaskReport,
        granted: Authority,
        tools: &mut ToolBox,
    ) -> Result<(ToolOutcome, Option<ChildRun>), BoundaryError> {
        // What the child began from: this task's state, as its baseline.
        let paths = crate::project::locate::TaskPaths::of(self.project, &report.task_id);
        let fork: Manifest = crate::project::locate::read_json(
            &paths.task_dir.join("baseline.json"),
        )
        .map_err(|e| BoundaryError::new(format!("child {}: {}", report.task_id, e.message)))?;
        let (run, evidence) = self.record(report, granted.clone())?;
        self.charge(&report.task_id, &paths.task_dir, tools)?;
        let used = run.used;
        let name = run.outcome.clone();
        let head = format!(
            "Child task {} ended {name}: {} ({} steps, {} tokens, counted in this task's budget; its receipt {}).",
            report.task_id,
            report.outcome.reason,
            used.steps,
            used.tokens,
            report.receipt.display()
        );
        if report.outcome.kind != loop_protocol::OutcomeKind::Verified {
            return Ok((
                outcome(Observation::ok(
                    id,
                    TOOL,
                    format!(
                        "{head}\nNothing of its work was merged into this workspace.{}",
                        evidence
                            .map(|e| format!("\nIts last verification failed:\n{e}"))
                            .unwrap_or_default()
                    ),
                    false,
                )),
                Some(run),
            ));
        }
        let merged = self.merge(id, (&fork, &granted), &report.workspace, tools);
        let observation = match merged {
            Ok((changed, paths)) => {
                let text = format!(
                    "{head}\nMerged into this workspace through its own rules: {}.",
                    if paths.is_empty() {
                        "nothing (it changed nothing)".to_string()
                    } else {
                        paths.join(", ")
                    }
                );
                Observation::ok(id, TOOL, text, changed)
            }
            Err(o) => o,
        };
        Ok((outcome(observation), Some(run)))
    }

    /// Count what child `child` (whose directory is `dir`) and its own
    /// children wrote against this task's `limits.write_mb`, once: each
    /// child charged is listed, with what it wrote, in this task's
    /// directory before it is counted here, and a resumed run counts the
    /// list again (so a run killed between the two charges it once).
    fn charge(&self, child: &str, dir: &Path, tools: &ToolBox) -> Result<(), BoundaryError> {
        use crate::project::locate::{CHARGED, charged_children, written_in_all};
        let failed = |e: std::io::Error| {
            BoundaryError::new(format!(
                "child {child}: what it wrote cannot be charged: {e}"
            ))
        };
        let mut listed = charged_children(&self.task_dir).map_err(failed)?;
        if listed.iter().any(|(id, _)| id == child) {
            return Ok(());
        }
        let (wrote, _) = written_in_all(dir).map_err(failed)?;
        listed.push((child.to_string(), wrote));
        let text: String = listed.iter().map(|(id, n)| format!("{id} {n}\n")).collect();
        loop_workspace::write_atomic(&self.task_dir.join(CHARGED), text.as_bytes())
            .map_err(failed)?;
        tools.charge_child(wrote);
        Ok(())
    }

    /// The parent's record of child `report`: its id, its grant, how it
    /// ended, its receipt's digest and what it used (charged as the
    /// Director charges it, from its events).
    /// With it, the failing evidence of its last verification, if one
    /// failed.
    fn record(
        &self,
        report: &crate::TaskReport,
        granted: Authority,
    ) -> Result<(ChildRun, Option<String>), BoundaryError> {
        let rt = crate::Runtime::open(self.project).map_err(|e| BoundaryError::new(e.message))?;
        let history: Vec<loop_protocol::Event> = rt
            .events(&report.task_id, 0)
            .map_err(|e| BoundaryError::new(e.message))?
            .into_iter()
            .map(|r| r.event)
            .collect();
        let used = loop_core::state::used_by(&history).map_err(BoundaryError::caused_by)?;
        let receipt_sha256 =
            loop_receipt::read::read_regular(&report.receipt, loop_receipt::read::MAX_READ)
                .ok()
                .map(|b| loop_protocol::hash::sha256_hex(&b));
        let run = ChildRun {
            task_id: report.task_id.clone(),
            authority: granted,
            outcome: report.outcome.name().as_str().to_string(),
            receipt_sha256,
            used,
        };
        Ok((run, failing(&history)))
    }

    /// Whether `rel` is in this task's workspace (as the child's begins).
    #[allow(clippy::disallowed_methods)] // lstat only, of a path beneath the runtime's own workspace (no content read)
    fn present(&self, rel: &str) -> bool {
        loop_protocol::RelPath::parse(rel)
            .is_ok_and(|r| std::fs::symlink_metadata(self.workspace.join(r.as_str())).is_ok())
    }

    /// This task's children, as its store has them.
    fn children(&self) -> Result<Vec<loop_store::TaskRecord>, BoundaryError> {
        let store = crate::project::locate::open_store(self.project)
            .map_err(|e| BoundaryError::new(e.message))?;
        store
            .children(self.task_id)
            .map_err(BoundaryError::caused_by)
    }

    /// How many children this task has started.
    fn children_so_far(&self) -> Result<u32, BoundaryError> {
        Ok(u32::try_from(self.children()?.len()).unwrap_or(u32::MAX))
    }

    /// The child this task's call `call_id` of step `step` started, if
    /// one did (a run of this task that stopped before its end was
    /// recorded): that child, never a second one.
    fn started_by(
        &self,
        step: u32,
        call_id: &str,
    ) -> Result<Option<loop_store::TaskRecord>, BoundaryError> {
        Ok(self.children()?.into_iter().find(|t| {
            let d = &t.request["delegation"];
            d["step"] == step && d["call_id"] == call_id
        }))
    }

    /// Admit the child through the one intake: its workspace to be made
    /// from this task's as it is, its grant and place recorded.
    fn admit(
        &self,
        contract: loop_protocol::Contract,
        child: ChildOf,
    ) -> Result<crate::task::intake::Admitted, crate::Error> {
        let rt = crate::Runtime::open(self.project)?;
        let req = crate::TaskRequest {
            contract: crate::task::intake::ContractInput::Given(Box::new(contract)),
            model: self.stored.model.clone(),
            isolation: self.stored.isolation,
            on_prompt: Some(self.on_prompt),
            owner: self.stored.owner.clone(),
            via: crate::task::intake::Via::Library,
            ..Default::default()
        };
        let mut admitted = rt.admit(req)?;
        admitted.delegation = Some(crate::task::intake::Inherited {
            child,
            exec: self.stored.exec_policy.clone(),
            integrity: self.stored.check_integrity.clone(),
        });
        admitted.start_from = Some(self.workspace.clone());
        // The skills that bound this task bound its child too.
        admitted.skills = self.stored.skills.clone();
        Ok(admitted)
    }

    /// Run `f` (a child's run) while a thread passes a cancel asked of
    /// this task on to its children (the child may be stored after it was
    /// asked: it is asked again until `f` returns), and asks them to stop
    /// once `deadline` (this task's time) has passed.
    fn watching<T>(&self, deadline: Option<std::time::Instant>, f: impl FnOnce() -> T) -> T {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let (project, parent, stop) = (
            self.project.to_path_buf(),
            self.task_id.to_string(),
            done.clone(),
        );
        let watcher = std::thread::spawn(move || {
            let Ok(store) = crate::project::locate::open_store(&project) else {
                return;
            };
            while !stop.load(Ordering::SeqCst) {
                if deadline.is_some_and(|d| std::time::Instant::now() >= d)
                    || store.task(&parent).is_ok_and(|t| t.cancel_requested)
                {
                    let _ = cancel_children(&*store, &parent);
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
        });
        // Stopped however `f` ends (a panic too).
        struct Stop(std::sync::Arc<AtomicBool>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let stop_watching = Stop(done);
        let out = f();
        drop(stop_watching);
        let _ = watcher.join();
        out
    }

    /// Merge what the child changed against `fork` (the parent's state
    /// when it began) into the parent's workspace through `tools`, unless
    /// the parent changed one of those paths since: whether anything
    /// changed, the paths merged, and those refused with why.
    #[allow(clippy::disallowed_methods)] // the runtime's own scratch layer, written from manifests of the two workspaces
    fn merge(
        &self,
        id: &str,
        (fork, granted): (&Manifest, &Authority),
        child_ws: &Path,
        tools: &mut ToolBox,
    ) -> Result<(bool, Vec<String>), Observation> {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            Observation::error(
                id,
                TOOL,
                format!("the child's change cannot be merged: {what}: {e}"),
            )
        };
        let done = Manifest::of(child_ws).map_err(|e| fail("its workspace", &e))?;
        let now = Manifest::of(&self.workspace).map_err(|e| fail("this workspace", &e))?;
        // What the child changed and this workspace does not hold yet (a
        // path already as the child left it was merged by a run of this
        // task that stopped before recording it); a conflict where this
        // task changed such a path since the child began.
        let changed: Vec<String> = differing(fork, &done)
            .into_iter()
            .filter(|p| now.get(p) != done.get(p))
            .collect();
        let conflicts: Vec<&String> = changed
            .iter()
            .filter(|p| now.get(p) != fork.get(p))
            .collect();
        // Whatever changed it, nothing outside the paths it was granted.
        let outside: Vec<&str> = changed
            .iter()
            .filter(|p| !granted.may_write(p))
            .map(String::as_str)
            .collect();
        if !outside.is_empty() {
            return Err(Observation::refused(
                id,
                TOOL,
                crate::task::request::CONFINED,
                format!(
                    "The child's change was not merged: it changed paths outside those it was granted: {}",
                    outside.join(", ")
                ),
            ));
        }
        if !conflicts.is_empty() {
            return Err(Observation::refused(
                id,
                TOOL,
                "delegation: merge conflict",
                format!(
                    "The child's change was not merged: this task changed the same paths since the child began: {}",
                    conflicts
                        .iter()
                        .map(|p| p.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if changed.is_empty() {
            return Ok((false, Vec::new()));
        }
        let upper = self.scratch.join(format!(
            "delegate-{}",
            loop_sandbox::unique_name("m").unwrap_or_default()
        ));
        let laid = lay_out(&upper, child_ws, &done, &changed);
        let merged = laid
            .map_err(|e| fail("laying it out", &e))
            .and_then(|()| tools.merge_layer(id, TOOL, &upper, &changed));
        let _ = loop_workspace::snapshot::remove_tree(&upper);
        Ok((merged?, changed))
    }
}

/// The failing evidence of the last verification in `history` that was
/// rejected: the reason, then each failing check (at most 12 lines, each
/// cut at 300 characters).
fn failing(history: &[loop_protocol::Event]) -> Option<String> {
    let (report, rejection) = history.iter().rev().find_map(|e| match e {
        loop_protocol::Event::Verified {
            report,
            accepted: false,
            rejection,
        } => Some((report, rejection)),
        _ => None,
    })?;
    let cut = |t: &str| t.chars().take(300).collect::<String>();
    let mut lines: Vec<String> = rejection.iter().map(|r| cut(r)).collect();
    for c in report.criteria.iter().filter(|c| !c.passed) {
        for check in c.checks.iter().filter(|k| !k.passed) {
            lines.push(cut(&format!(
                "- {}: {} — {}",
                c.id,
                check.check.describe(),
                check.failure.as_deref().unwrap_or("failed")
            )));
        }
    }
    lines.truncate(12);
    Some(lines.join("\n"))
}

/// A proposal refused, with every rule it breaks.
fn refused_grant(id: &str, no: &[delegation::Refusal]) -> ToolOutcome {
    let rule = no.first().map_or("delegation", |r| r.rule());
    let lines: Vec<String> = no.iter().map(|r| format!("- {}: {r}", r.rule())).collect();
    outcome(Observation::refused(
        id,
        TOOL,
        rule,
        format!("The child was not started:\n{}", lines.join("\n")),
    ))
}

/// Paths whose entries differ between `a` and `b` (added, changed, removed).
fn differing(a: &Manifest, b: &Manifest) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    for e in &a.entries {
        if b.get(&e.path) != Some(e) {
            out.insert(e.path.clone());
        }
    }
    for e in &b.entries {
        if a.get(&e.path) != Some(e) {
            out.insert(e.path.clone());
        }
    }
    out.into_iter().collect()
}

/// Lay `paths` out under `upper` as an overlay's upper layer: each file or
/// link `done` has, read from `from` without following a link; a path it
/// no longer has, a whiteout.
#[allow(clippy::disallowed_methods)] // writes the runtime's own scratch layer
fn lay_out(upper: &Path, from: &Path, done: &Manifest, paths: &[String]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tree = loop_workspace::Tree::open(from)?;
    let other = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
    std::fs::create_dir_all(upper)?;
    for rel in paths {
        // Beneath a file or link that now stands where a directory was:
        // gone with that directory, which the entry itself replaces (and
        // nothing is laid out through a link the child made).
        if ancestors(rel).any(|a| done.get(a).is_some()) {
            continue;
        }
        let at = upper.join(rel);
        let mut dir = upper.to_path_buf();
        for a in rel
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, d)| d)
        {
            dir.push(a);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(other(&format!(
                        "{rel}: a parent in the layer is not a directory"
                    )));
                }
                Err(_) => std::fs::create_dir(&dir)?,
            }
        }
        match done.get(rel) {
            None => {
                let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
                    .map_err(|e| other(&e))?;
                // SAFETY: mknod of a 0:0 character device (an overlay
                // whiteout) at a NUL-terminated path of our scratch layer.
                if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Some(e) => match tree.node(rel).map_err(|e| other(&e))? {
                loop_workspace::Node::Symlink(target) => {
                    std::os::unix::fs::symlink(target, &at)?;
                }
                loop_workspace::Node::File { .. } => {
                    let bytes = tree.read_file(rel, u64::MAX / 2).map_err(|e| other(&e))?;
                    if loop_protocol::hash::sha256_hex(&bytes) != e.sha256 {
                        return Err(other(&format!("{rel} changed while it was read")));
                    }
                    let mode = if e.executable { 0o755 } else { 0o644 };
                    use std::io::Write;
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(mode)
                        .open(&at)?
                        .write_all(&bytes)?;
                    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode))?;
                }
                _ => return Err(other(&format!("{rel} is no longer a file or a link"))),
            },
        }
    }
    Ok(())
}

/// The proper ancestors of the relative path `rel` (`a/b/c`: `a/b`, `a`).
fn ancestors(rel: &str) -> impl Iterator<Item = &str> {
    rel.char_indices()
        .filter(|(_, c)| *c == '/')
        .map(move |(i, _)| &rel[..i])
}

/// Ask every unfinished task below `parent` (its children, theirs, …) to stop.
pub(crate) fn cancel_children(
    store: &dyn loop_store::Store,
    parent: &str,
) -> Result<(), crate::Error> {
    let mut below = vec![parent.to_string()];
    // At most as deep as delegation goes.
    for _ in 0..=loop_protocol::delegation::MAX_DEPTH {
        let mut next = Vec::new();
        for b in &below {
            let children = store
                .children(b)
                .map_err(crate::project::locate::store_err)?;
            next.extend(children.into_iter().map(|t| t.id));
        }
        for child in &next {
            store
                .request_cancel(child, loop_core::Clock::now_ms(&loop_core::SystemClock))
                .map_err(crate::project::locate::store_err)?;
        }
        if next.is_empty() {
            break;
        }
        below = next;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn a_link_the_child_put_where_a_directory_was_is_never_laid_out_through() {
        let base = std::env::temp_dir().join(format!("loop-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (from, upper, outside) = (base.join("from"), base.join("upper"), base.join("outside"));
        std::fs::create_dir_all(from.join("pkg/a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // The child replaced the directory pkg/a/l (which held x) with a
        // link to a directory outside, and wrote pkg/a/y.
        std::os::unix::fs::symlink(&outside, from.join("pkg/a/l")).unwrap();
        std::fs::write(from.join("pkg/a/y"), "y").unwrap();
        let done = Manifest::of(&from).unwrap();
        let changed: Vec<String> = ["pkg/a/l", "pkg/a/l/x", "pkg/a/l/z/w", "pkg/a/y"]
            .map(String::from)
            .to_vec();
        lay_out(&upper, &from, &done, &changed).unwrap();
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing written outside"
        );
        assert!(
            std::fs::symlink_metadata(upper.join("pkg/a/l"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_to_string(upper.join("pkg/a/y")).unwrap(), "y");
        // A layer whose parent is not a directory is refused, not followed.
        let again = base.join("again");
        std::fs::create_dir_all(&again).unwrap();
        std::os::unix::fs::symlink(&outside, again.join("pkg")).unwrap();
        assert!(lay_out(&again, &from, &done, &["pkg/a/y".to_string()]).is_err());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&base);
    }
}
