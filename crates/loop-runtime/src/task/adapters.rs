//! Adapters that plug the component crates into the Director's traits.

use crate::task::asking::{OnPrompt, Prompter, Question};
use loop_core::{BoundaryError, Clock, Ledger, Tools, Verifier};
use loop_protocol::{Contract, Event, ToolCall, ToolOutcome, ToolSpec, VerificationReport};
use loop_receipt::FileLedger;
use loop_store::ApprovalStatus;
use loop_tools::ToolBox;
use loop_verifier::SnapshotVerifier;

/// A front end's observer that is handed events as the ledger records
/// them: registered secret values scrubbed, whatever the front end.
pub(crate) struct Scrubbed<'o>(pub &'o mut dyn crate::Observer);

impl loop_core::Observer for Scrubbed<'_> {
    fn on_event(&mut self, event: &Event) {
        self.0.on_event(&scrub_event(event));
    }
    fn live(&mut self, moment: &loop_protocol::Live) {
        self.0.live(&scrub_live(moment));
    }
}

/// A live moment with registered secret values scrubbed from its texts
/// (streamed model text can echo one).
fn scrub_live(moment: &loop_protocol::Live) -> loop_protocol::Live {
    use loop_protocol::Live;
    let s = loop_sandbox::redact::scrub_literals;
    match moment {
        Live::Text { fragment } => Live::Text {
            fragment: s(fragment),
        },
        Live::CheckStarted {
            index,
            total,
            criterion,
            check,
        } => Live::CheckStarted {
            index: *index,
            total: *total,
            criterion: s(criterion),
            check: s(check),
        },
        Live::CheckDone {
            index,
            total,
            criterion,
            passed,
            status,
            duration_ms,
        } => Live::CheckDone {
            index: *index,
            total: *total,
            criterion: s(criterion),
            passed: *passed,
            status: s(status),
            duration_ms: *duration_ms,
        },
        other => other.clone(),
    }
}

impl crate::Observer for Scrubbed<'_> {
    fn note(&mut self, line: &str) {
        self.0.note(line);
    }
    fn confirm(&mut self, question: &str) -> Option<bool> {
        self.0.confirm(question)
    }
    fn prompter(&mut self) -> Option<Box<dyn Prompter>> {
        self.0.prompter()
    }
    fn review_contract(
        &mut self,
        contract: &str,
        edit_from: Option<&str>,
    ) -> crate::contract::draft::ContractReview {
        self.0.review_contract(contract, edit_from)
    }
    fn reviewer(&self) -> String {
        self.0.reviewer()
    }
    fn review_calls(&self) -> Vec<loop_protocol::evidence::ApiCall> {
        self.0.review_calls()
    }
    fn live_feed(&mut self) -> Option<loop_protocol::LiveFeed> {
        let inner = self.0.live_feed()?;
        Some(loop_protocol::LiveFeed::new(move |m| {
            inner.emit(scrub_live(m))
        }))
    }
}

/// The registered secret values scrubbed from every string of an event
/// (the genesis keeps its contract, which its hash covers).
pub fn scrub_event(event: &Event) -> Event {
    if matches!(event, Event::TaskStarted { .. }) {
        return event.clone();
    }
    // Most events hold no secret: only those that do are rebuilt.
    let Ok(text) = serde_json::to_string(event) else {
        return event.clone();
    };
    if loop_sandbox::redact::scrub_literals(&text) == text {
        return event.clone();
    }
    let Ok(mut v) = serde_json::to_value(event) else {
        return event.clone();
    };
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                let clean = loop_sandbox::redact::scrub_literals(s);
                if clean != *s {
                    *s = clean;
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            serde_json::Value::Object(o) => o.values_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    serde_json::from_value(v).unwrap_or_else(|_| event.clone())
}

/// The tool box.
pub struct ToolsAdapter<'a> {
    /// The tools.
    pub tools: ToolBox,
    /// The change so far as a unified diff, for the checker.
    pub diff: Option<Box<dyn FnMut() -> String + 'a>>,
    /// Keeps the workspace's state in the store after each change.
    pub keeper: Option<crate::task::stored_workspace::Keeper>,
    /// The workspace was rebuilt from the store's record for this run.
    pub rebuilt: bool,
    /// Starts child tasks (the `delegate` tool), where the task may.
    pub delegator: Option<crate::task::delegate::Delegator<'a>>,
    /// The tools each skill the task uses names (a skill that names none
    /// is absent): the task is offered, and may call, only tools every
    /// one of them names (and `finish`).
    pub skill_tools: Vec<(String, Vec<String>)>,
    /// Notes this run's `remember` calls proposed and were told were noted.
    pub remembered: usize,
}

impl ToolsAdapter<'_> {
    /// The skill that does not name `tool`, if one does not.
    fn skill_without(&self, tool: &str) -> Option<&str> {
        (tool != "finish")
            .then(|| {
                self.skill_tools
                    .iter()
                    .find(|(_, tools)| !tools.iter().any(|t| t == tool))
                    .map(|(name, _)| name.as_str())
            })
            .flatten()
    }

    /// `call` refused, when a skill the task uses does not name its tool.
    fn refused_by_skill(&self, call: &ToolCall) -> Option<ToolOutcome> {
        let skill = self.skill_without(&call.tool)?;
        Some(ToolOutcome {
            observation: loop_protocol::Observation::refused(
                &call.id,
                &call.tool,
                "skill: a tool the skill does not name",
                format!(
                    "Refused: the skill {skill} this task uses does not name the tool `{}`.",
                    call.tool
                ),
            ),
            control: None,
        })
    }
}

impl Tools for ToolsAdapter<'_> {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = self.tools.specs();
        if self.delegator.is_some() {
            specs.push(loop_tools::specs::delegate());
        }
        specs.push(crate::task::memory::spec());
        specs.retain(|s| self.skill_without(&s.name).is_none());
        specs
    }
    fn delegate(
        &mut self,
        step: u32,
        call: &ToolCall,
        left: &loop_protocol::delegation::Left,
    ) -> Result<(ToolOutcome, Option<loop_protocol::ChildRun>), BoundaryError> {
        if let Some(no) = self.refused_by_skill(call) {
            return Ok((no, None));
        }
        match self.delegator.as_mut() {
            Some(d) => d
                .run_many(step, std::slice::from_ref(call), left, &mut self.tools)
                .map(|mut all| all.remove(0)),
            // Not offered: the contract does not allow it.
            None => Ok((loop_core::traits::delegation_off(call), None)),
        }
    }
    fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
        if let Some(no) = self.refused_by_skill(call) {
            return Ok(no);
        }
        if call.tool == crate::task::memory::TOOL {
            return Ok(crate::task::memory::answer(call, &mut self.remembered));
        }
        Ok(self.tools.execute(call))
    }
    fn workspace_root(&mut self) -> Result<String, BoundaryError> {
        let Some(keeper) = self.keeper.as_mut() else {
            return self
                .tools
                .workspace_root()
                .map_err(BoundaryError::caused_by);
        };
        let now = self
            .tools
            .workspace_manifest()
            .map_err(BoundaryError::caused_by)?;
        keeper
            .keep(&now)
            .map_err(|e| BoundaryError::new(e.message))?;
        Ok(now.root)
    }
    fn rebuilt(&self) -> bool {
        self.rebuilt
    }
    fn delegate_many(
        &mut self,
        step: u32,
        calls: &[ToolCall],
        left: &loop_protocol::delegation::Left,
    ) -> Result<Vec<(ToolOutcome, Option<loop_protocol::ChildRun>)>, BoundaryError> {
        // A skill that does not name `delegate` refuses every such call.
        if self.skill_without(crate::task::delegate::TOOL).is_some() {
            return calls.iter().map(|c| self.delegate(step, c, left)).collect();
        }
        match self.delegator.as_mut() {
            Some(d) => d.run_many(step, calls, left, &mut self.tools),
            None => calls.iter().map(|c| self.delegate(step, c, left)).collect(),
        }
    }
    fn effect(&self, call: &ToolCall) -> loop_protocol::Effect {
        if self.delegator.is_some() && call.tool == crate::task::delegate::TOOL {
            return loop_tools::specs::delegate().effect;
        }
        if call.tool == crate::task::memory::TOOL {
            return loop_protocol::Effect::Pure;
        }
        self.tools.effect(call)
    }
    fn needs_approval(&self, call: &ToolCall) -> Option<String> {
        // A call a skill refuses is refused, never put to a person first.
        if self.skill_without(&call.tool).is_some() {
            return None;
        }
        self.tools.needs_approval(call)
    }
    fn approve(&mut self, call_id: &str) {
        self.tools.approve(call_id);
    }
    fn begin_step(&mut self) {
        self.tools.begin_step();
    }
    fn set_images(&mut self, on: bool) {
        self.tools.set_images(on);
    }
    fn change_summary(&mut self) -> String {
        self.diff.as_mut().map(|d| d()).unwrap_or_default()
    }
}

/// The snapshot verifier.
pub struct VerifierAdapter(pub SnapshotVerifier);

impl Verifier for VerifierAdapter {
    fn verify(
        &mut self,
        contract: &Contract,
        contract_sha256: &str,
        attempt: u32,
    ) -> Result<VerificationReport, BoundaryError> {
        self.0
            .verify(contract, contract_sha256, attempt)
            .map_err(BoundaryError::caused_by)
    }
}

/// The ledger: the store (the truth, committed before what an entry
/// announces happens) and a file copy beside the receipt.
///
/// Entries are committed in groups, one transaction (one sync) each: an
/// entry that is followed at once by another of the same step (a model's
/// turn, the move to acting, an observation) waits for it; every other
/// entry commits itself and everything before it. So a tool call's intent
/// is durable before the call runs, the step's observation before the next
/// model call, and a step costs two commits, not five. The file copy is
/// written at once but synced only at the end (a resume rewrites it from
/// the store).
pub struct StoreLedger<'c> {
    /// The store.
    pub store: &'c dyn loop_store::Store,
    /// The task.
    pub task_id: String,
    /// The file copy.
    pub file: FileLedger,
    /// Time source for `at`.
    pub clock: &'c dyn Clock,
    /// Entries written to the file, not yet committed to the store.
    pub pending: Vec<loop_protocol::LedgerEntry>,
    /// The task's state after the pending entries.
    pub pending_state: Option<loop_store::StoredState>,
    /// This run's claim: entries are committed only while it holds.
    pub holder: String,
    /// Set when the workspace's state could not be kept in the store:
    /// nothing more is recorded (why, instead).
    pub halt: Option<std::sync::Arc<std::sync::OnceLock<String>>>,
    /// The workspace's state waiting to be written with the next commit.
    pub tree: Option<crate::task::stored_workspace::TreeSlot>,
    /// The workspace's whole state now and its root, for a store that lost
    /// a kept one ([`crate::task::stored_workspace::whole_state`]).
    pub whole: Option<WholeState>,
}

/// Makes the workspace's whole state for the store, with its root.
pub type WholeState = Box<
    dyn Fn() -> Result<(String, crate::task::stored_workspace::PendingTree), crate::Error> + Send,
>;

impl StoreLedger<'_> {
    /// Commit the pending entries (one transaction).
    pub fn flush(&mut self) -> Result<(), BoundaryError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // A step's observation and its return to planning need not be on
        // disk at once: the next durable commit (the next call's intent,
        // or the end) takes them there, and a machine that went down
        // before it loses only what a resume settles again (the call in
        // flight, by its effect's rules, in the workspace the store
        // keeps). Everything else waits for the disk.
        let lazy = self.pending.iter().all(|e| {
            e.kind == "observed" || (e.kind == "transition" && e.payload["to"] == "planning")
        });
        // The workspace's state kept since the last commit goes with it
        // (the step's observation that names its root is in this batch).
        let tree = self.tree.as_ref().and_then(|slot| {
            slot.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        });
        let file = tree.as_ref().map(|t| t.file());
        let done = self.store.append_batch(
            &self.task_id,
            &self.pending,
            self.pending_state,
            Some(&self.holder),
            self.clock.now_ms(),
            (!lazy, file.as_ref()),
        );
        // A batch that failed keeps its state for the next try (the
        // entries stay pending too): they are never committed apart. (One
        // that did commit though its answer was lost is found whole by
        // the retry, which writes nothing twice.)
        if done.is_err()
            && let (Some(slot), Some(t)) = (&self.tree, tree)
        {
            let mut s = slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if s.is_none() {
                *s = Some(t);
            }
        }
        match done {
            Err(loop_store::StoreError::OutOfSequence { last, seq, .. })
                if last >= 0 && (last as u64) + 1 < seq =>
            {
                self.write_back(last as u64)?
            }
            done => done.map_err(BoundaryError::caused_by)?,
        }
        self.pending.clear();
        self.pending_state = None;
        Ok(())
    }

    /// The store's record ends at entry `last`, before entries this runtime
    /// committed (a database that restarted lost what it had not yet
    /// synced): the lost entries are written back from the ledger's file,
    /// with the pending ones, in one durable commit, and the workspace's
    /// state with them when one of them named it. Only a record that is
    /// the start of this ledger is repaired (entry `last` the same, by
    /// hash, on both sides), and only when the workspace here is the one
    /// the last of them names; anything else is refused as before, leaving
    /// the task to be resumed from the store's record.
    fn write_back(&mut self, last: u64) -> Result<(), BoundaryError> {
        let task = self.task_id.clone();
        let refuse = |why: String| {
            BoundaryError::new(format!(
                "task {task}: the store's record ends at entry {last}, before entries this runtime committed, and cannot be repaired from the ledger: {why}"
            ))
        };
        let first = self.pending.first().map_or(0, |e| e.seq);
        let written = self.file.written().map_err(|e| refuse(e.to_string()))?;
        let kept = self
            .store
            .entries(&self.task_id, last)
            .map_err(|e| refuse(e.to_string()))?;
        let ours = written.get(last as usize).map(|e| e.hash.as_str());
        if kept.first().map(|e| e.hash.as_str()) != ours || ours.is_none() {
            return Err(refuse(format!("its entry {last} is not this ledger's")));
        }
        let lost: Vec<loop_protocol::LedgerEntry> = written
            .get(last as usize + 1..first as usize)
            .ok_or_else(|| refuse(format!("the ledger holds no entries {}..{first}", last + 1)))?
            .to_vec();
        let mut entries = lost.clone();
        entries.extend(self.pending.iter().cloned());
        // The state after them: the last move's (an end is `ending` until
        // the receipt is kept).
        let state = self.pending_state.or_else(|| {
            lost.iter()
                .rev()
                .find(|e| e.kind == "transition")
                .and_then(|e| e.payload["to"].as_str())
                .and_then(loop_protocol::TaskState::from_name)
                .map(ending_for_terminal)
        });
        // A lost entry that named the workspace's state lost that state
        // too (it was written with it): the whole of it goes again, if the
        // workspace here is the one the last of these entries names.
        let named = |e: &loop_protocol::LedgerEntry| {
            (e.kind == "observed")
                .then(|| e.payload["workspace_root"].as_str().map(str::to_string))
                .flatten()
        };
        let whole = if lost.iter().any(|e| named(e).is_some()) {
            let want = entries.iter().rev().find_map(named);
            let whole = self
                .whole
                .as_ref()
                .ok_or_else(|| refuse("the workspace's state it named is not kept here".into()))?;
            let (root, tree) = whole().map_err(|e| refuse(e.message))?;
            if want.as_deref() != Some(root.as_str()) {
                return Err(refuse(format!(
                    "the workspace here (root {root}) is not the one the ledger names ({})",
                    want.unwrap_or_default()
                )));
            }
            Some(tree)
        } else {
            None
        };
        // The state that waited for this commit goes with it (the whole
        // state includes it).
        let slot = |put: Option<crate::task::stored_workspace::PendingTree>| {
            let mut s = self.tree.as_ref().map(|slot| {
                slot.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            });
            match (s.as_deref_mut(), put) {
                (Some(s), Some(t)) if s.is_none() => {
                    *s = Some(t);
                    None
                }
                (Some(s), None) => s.take(),
                _ => None,
            }
        };
        let waiting = slot(None);
        let file = whole.as_ref().or(waiting.as_ref()).map(|t| t.file());
        let done = self.store.append_batch(
            &self.task_id,
            &entries,
            state,
            Some(&self.holder),
            self.clock.now_ms(),
            (true, file.as_ref()),
        );
        if let Err(e) = done {
            slot(waiting);
            return Err(refuse(e.to_string()));
        }
        tracing::warn!(
            "task {}: the store had lost entries {}..{} of its record (a database restart?): written back from the ledger",
            self.task_id,
            last + 1,
            first.saturating_sub(1)
        );
        Ok(())
    }

    /// Whether `event` is followed at once by another entry of its step,
    /// so it may wait to be committed with it.
    fn may_wait(event: &Event) -> bool {
        matches!(event, Event::ModelTurn { .. } | Event::Observed { .. })
            || matches!(event, Event::Transition { to, .. } if *to == loop_protocol::TaskState::Acting)
    }
}

impl Drop for StoreLedger<'_> {
    fn drop(&mut self) {
        // A run that stopped between an entry and the one it waited for
        // (an error) still keeps what it recorded.
        if let Err(e) = self.flush() {
            tracing::warn!("task {}: ledger entries not committed: {e}", self.task_id);
        }
    }
}

impl Ledger for StoreLedger<'_> {
    fn append(&mut self, event: &Event) -> Result<(), BoundaryError> {
        if let Some(why) = self.halt.as_ref().and_then(|h| h.get()) {
            return Err(BoundaryError::new(why.clone()));
        }
        let scrubbed = scrub_event(event);
        let event = &scrubbed;
        let now = self.clock.now_ms();
        let entry = self
            .file
            .next_entry(event, now)
            .map_err(BoundaryError::caused_by)?;
        let entry = self.file.write(entry).map_err(BoundaryError::caused_by)?;
        self.pending.push(entry);
        // A task is `terminal` in the store only once its receipt exists
        // (`Store::finish`); until then its end is `ending`, and resumable.
        // (Set only once the entry is pending: a failed write leaves the
        // state to the entries that were.)
        if let Event::Transition { to, .. } = event {
            self.pending_state = Some(ending_for_terminal(*to));
        }
        if Self::may_wait(event) {
            return Ok(());
        }
        self.flush()
    }
}

/// The store's state for a move to `to`: an end is `ending` until the
/// receipt is kept (`Store::finish` makes it `terminal`).
fn ending_for_terminal(to: loop_protocol::TaskState) -> loop_store::StoredState {
    match to {
        loop_protocol::TaskState::Terminal => loop_store::StoredState::Ending,
        other => loop_store::StoredState::Task(other),
    }
}

/// Approvals kept in the store: a pending request survives a restart of
/// the runtime, and `loop approve` answers it from any process.
pub struct StoreApprovals<'c> {
    /// The store.
    pub store: &'c dyn loop_store::Store,
    /// The task.
    pub task_id: String,
    /// Its parent, when the task is a child: named with each request.
    pub parent: Option<String>,
    /// Time.
    pub clock: &'c dyn Clock,
    /// Who answers.
    pub on_prompt: OnPrompt,
    /// The task's wall-time budget ends here (ms): nobody's answer is
    /// waited for past it.
    pub task_deadline_ms: Option<u64>,
    /// Rules a person said "always" to, for this task.
    pub always: std::collections::BTreeSet<String>,
    /// Where a person is asked inline (with `OnPrompt::Ask`); without one,
    /// the request waits for `loop approve`.
    pub prompter: Option<Box<dyn Prompter>>,
}

impl StoreApprovals<'_> {
    /// The stored request `approval_id`.
    fn stored(&self, approval_id: &str) -> Result<Option<loop_store::Approval>, BoundaryError> {
        Ok(self
            .store
            .approvals(&self.task_id)
            .map_err(BoundaryError::caused_by)?
            .into_iter()
            .find(|a| a.id == approval_id))
    }

    /// A pending request answered by this process's mode at once (deny,
    /// allow, a rule a person said "always" to), or put to the person.
    fn settle_here(
        &mut self,
        approval_id: &str,
        checkpoint: bool,
        detail: &str,
        rule: &str,
    ) -> Result<Option<loop_core::ApprovalDecision>, BoundaryError> {
        let decided = match self.on_prompt {
            OnPrompt::Deny => self.answer(
                approval_id,
                false,
                "--on-prompt deny (no terminal to ask)",
                None,
            )?,
            OnPrompt::Allow => self.answer(approval_id, true, "--on-prompt allow", None)?,
            OnPrompt::Yes => self.answer(approval_id, true, "--yes", None)?,
            OnPrompt::Ask if !checkpoint && self.always.contains(rule) => self.answer(
                approval_id,
                true,
                "the terminal (always for this rule)",
                None,
            )?,
            OnPrompt::Ask => {
                let (task_id, parent) = (self.task_id.clone(), self.parent.clone());
                let parent = parent.as_deref();
                let question = if checkpoint {
                    Question::Checkpoint {
                        task_id: &task_id,
                        parent,
                        detail,
                    }
                } else {
                    Question::Approval {
                        task_id: &task_id,
                        parent,
                        detail,
                        rule,
                    }
                };
                if let Some(p) = self.prompter.as_mut() {
                    p.ask(&question);
                }
                return Ok(None);
            }
            OnPrompt::Wait => return Ok(None),
        };
        Ok(Some(decided))
    }

    /// The person's inline answer, if one came: yes, no, "always" for an
    /// approval, or guidance for a checkpoint (a yes with a message).
    fn read_answer(
        &mut self,
        approval_id: &str,
        checkpoint: bool,
        rule: &str,
    ) -> Result<Option<loop_core::ApprovalDecision>, BoundaryError> {
        if self.on_prompt != OnPrompt::Ask {
            return Ok(None);
        }
        let Some(line) = self.prompter.as_mut().and_then(|p| p.answer()) else {
            return Ok(None);
        };
        let l = line.trim();
        let decided = match (checkpoint, l.to_ascii_lowercase().as_str()) {
            (_, "y" | "yes") => self.answer(approval_id, true, "the terminal", None)?,
            (_, "n" | "no") => self.answer(approval_id, false, "the terminal", None)?,
            (false, "a" | "always") => {
                self.always.insert(rule.to_string());
                self.answer(
                    approval_id,
                    true,
                    "the terminal (always for this rule)",
                    None,
                )?
            }
            (true, _) if !l.is_empty() => {
                self.answer(approval_id, true, "the terminal", Some(l.to_string()))?
            }
            _ => {
                if let Some(p) = self.prompter.as_mut() {
                    p.again(if checkpoint {
                        "y, n or guidance"
                    } else {
                        "y, n or a"
                    });
                }
                return Ok(None);
            }
        };
        Ok(Some(decided))
    }

    /// Record an answer given here (not through `loop approve`).
    fn answer(
        &mut self,
        approval_id: &str,
        approved: bool,
        by: &str,
        guidance: Option<String>,
    ) -> Result<loop_core::ApprovalDecision, BoundaryError> {
        let all = self
            .store
            .approvals(&self.task_id)
            .map_err(BoundaryError::caused_by)?;
        if let Some(mut a) = all.into_iter().find(|a| a.id == approval_id) {
            a.status = ApprovalStatus::answered(approved);
            a.decided_ms = Some(self.clock.now_ms());
            a.payload["by"] = serde_json::Value::String(by.to_string());
            if let Some(g) = guidance {
                a.payload["answer"] = serde_json::Value::String(g);
            }
            let decided = self
                .store
                .decide_approval(&a)
                .map_err(BoundaryError::caused_by)?;
            if !decided {
                // Someone answered first (`loop approve`, the console):
                // theirs stands.
                if let Some(d) = self.stored(approval_id)?.and_then(|s| s.status.decision()) {
                    return Ok(d);
                }
            }
        }
        Ok(if approved {
            loop_core::ApprovalDecision::Approved
        } else {
            loop_core::ApprovalDecision::Denied
        })
    }
}

impl loop_core::Approvals for StoreApprovals<'_> {
    fn request(
        &mut self,
        approval_id: &str,
        payload: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), BoundaryError> {
        let mut payload = payload.clone();
        if let (Some(parent), Some(p)) = (&self.parent, payload.as_object_mut()) {
            p.insert("parent".into(), serde_json::Value::String(parent.clone()));
        }
        self.store
            .put_approval(&loop_store::Approval {
                task_id: self.task_id.clone(),
                id: approval_id.to_string(),
                kind: "approval".into(),
                payload,
                status: ApprovalStatus::Pending,
                created_ms: now_ms,
                decided_ms: None,
            })
            .map_err(BoundaryError::caused_by)
    }

    fn message(&mut self, approval_id: &str) -> Option<String> {
        self.store
            .approvals(&self.task_id)
            .ok()?
            .into_iter()
            .find(|a| a.id == approval_id)?
            .payload
            .get("answer")?
            .as_str()
            .map(str::to_string)
    }

    fn decided_by(&mut self, approval_id: &str) -> Option<String> {
        let a = self
            .store
            .approvals(&self.task_id)
            .ok()?
            .into_iter()
            .find(|a| a.id == approval_id)?;
        match a.payload.get("by").and_then(|b| b.as_str()) {
            Some(by) => Some(by.to_string()),
            None if a.status == ApprovalStatus::Expired => {
                Some("the timeout (nobody answered)".into())
            }
            None => Some("loop approve".into()),
        }
    }

    fn wait(
        &mut self,
        approval_id: &str,
        deadline_ms: u64,
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<loop_core::ApprovalDecision, BoundaryError> {
        let decided = self.wait_here(approval_id, deadline_ms, cancel);
        // However it was settled, the person is no longer asked it.
        if let Some(p) = self.prompter.as_mut() {
            p.settled();
        }
        decided
    }
}

impl StoreApprovals<'_> {
    /// Wait for the answer to `approval_id` (see [`loop_core::Approvals::wait`]).
    fn wait_here(
        &mut self,
        approval_id: &str,
        deadline_ms: u64,
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<loop_core::ApprovalDecision, BoundaryError> {
        use loop_core::ApprovalDecision;
        // The task's clock keeps running while it waits for a person.
        let deadline_ms = self
            .task_deadline_ms
            .map_or(deadline_ms, |t| t.min(deadline_ms));
        let Some(pending) = self.stored(approval_id)? else {
            return Err(BoundaryError::new(format!(
                "approval {approval_id} is not in the store"
            )));
        };
        let field = |k: &str| {
            pending
                .payload
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let (detail, rule) = (field("detail"), field("rule"));
        let checkpoint = field("kind") == "checkpoint";
        if pending.status == ApprovalStatus::Pending
            && let Some(decided) = self.settle_here(approval_id, checkpoint, &detail, &rule)?
        {
            return Ok(decided);
        }
        // The stored request is read when word of a change came (or, on
        // SQLite, each time), and every 2 s besides; a person typing here
        // and a cancel are looked for every 100 ms.
        let mut look = true;
        let mut looked = std::time::Instant::now();
        loop {
            if let Some(decided) = self.read_answer(approval_id, checkpoint, &rule)? {
                return Ok(decided);
            }
            if cancel.load(std::sync::atomic::Ordering::SeqCst) {
                return Ok(ApprovalDecision::Cancelled);
            }
            let expired = self.clock.now_ms() >= deadline_ms;
            if !look && !expired && looked.elapsed() < std::time::Duration::from_secs(2) {
                look = self
                    .store
                    .wait_for(&self.task_id, std::time::Duration::from_millis(100));
                continue;
            }
            looked = std::time::Instant::now();
            let Some(mut a) = self.stored(approval_id)? else {
                return Err(BoundaryError::new(format!(
                    "approval {approval_id} is not in the store"
                )));
            };
            if let Some(decided) = a.status.decision() {
                return Ok(decided);
            }
            let now = self.clock.now_ms();
            if now >= deadline_ms {
                // Nobody answered: a deny, recorded as such.
                a.status = ApprovalStatus::Expired;
                a.decided_ms = Some(now);
                let expired = self
                    .store
                    .decide_approval(&a)
                    .map_err(BoundaryError::caused_by)?;
                if !expired {
                    // An answer came in the same instant: it stands.
                    if let Some(d) = self.stored(approval_id)?.and_then(|s| s.status.decision()) {
                        return Ok(d);
                    }
                }
                return Ok(ApprovalDecision::Expired);
            }
            // An answer from another process wakes this at once where the
            // store tells (PostgreSQL); a person typing here is looked for
            // every 100 ms.
            look = self
                .store
                .wait_for(&self.task_id, std::time::Duration::from_millis(100));
        }
    }
}
