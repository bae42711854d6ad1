//! The Director, driven with in-memory fakes.

use crate::*;
use loop_protocol::*;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;

fn contract(max_steps: u32) -> Contract {
    let mut c = Contract::from_yaml(
        "instruction: write done=yes\ncriteria:\n  - id: done\n    checks:\n      - file_contains: done\n        text: yes\n",
        "t",
    )
    .unwrap();
    c.limits.max_steps = max_steps;
    c.limits.max_verifications = 3;
    c
}

fn call(tool: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: format!("c-{tool}"),
        tool: tool.into(),
        args,
    }
}

fn turn(calls: Vec<ToolCall>, tokens: u64) -> Turn {
    Turn {
        thought: None,
        calls,
        usage: Usage {
            input_tokens: tokens,
            ..Usage::default()
        },
        served_by: None,
    }
}

fn write(content: &str) -> ToolCall {
    call("write", serde_json::json!({"content": content}))
}

fn finish() -> ToolCall {
    call("finish", serde_json::json!({"summary": "done"}))
}

struct FakeModel {
    script: Vec<Turn>,
    repeat_forever: Option<Turn>,
    /// Answer this (malformed, unavailable) instead of turns.
    reply_forever: Option<ModelReply>,
    seen: Vec<Context>,
    clock: Rc<Cell<u64>>,
    ms_per_turn: u64,
}

impl FakeModel {
    fn new(script: Vec<Turn>, clock: &Rc<Cell<u64>>) -> Self {
        FakeModel {
            script,
            repeat_forever: None,
            reply_forever: None,
            seen: vec![],
            clock: clock.clone(),
            ms_per_turn: 10,
        }
    }
}

impl Model for FakeModel {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: "fake".into(),
            name: "fake".into(),
            source_sha256: None,
            parameters: None,
        }
    }
    fn next_turn(&mut self, context: &Context, _limits: loop_protocol::CallLimits) -> ModelReply {
        self.seen.push(context.clone());
        self.clock.set(self.clock.get() + self.ms_per_turn);
        if let Some(t) = &self.repeat_forever {
            return ModelReply::Turn(t.clone());
        }
        if let Some(r) = &self.reply_forever {
            return r.clone();
        }
        if self.script.is_empty() {
            return ModelReply::NothingMore {
                reason: "script exhausted".into(),
            };
        }
        ModelReply::Turn(self.script.remove(0))
    }
}

#[derive(Default)]
struct FakeTools {
    files: BTreeMap<String, String>,
}

impl Tools for FakeTools {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![]
    }
    fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
        match call.tool.as_str() {
            "write" => {
                let content = call.args["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let changed = self.files.get("done") != Some(&content);
                self.files.insert("done".into(), content);
                Ok(ToolOutcome {
                    observation: Observation::ok(&call.id, "write", "wrote", changed),
                    control: None,
                })
            }
            "finish" => Ok(ToolOutcome {
                observation: Observation::ok(&call.id, "finish", "verification requested", false),
                control: Some(Control::Finish {
                    summary: "done".into(),
                }),
            }),
            other => Ok(ToolOutcome {
                observation: Observation::refused(&call.id, other, "unknown tool", "no such tool"),
                control: None,
            }),
        }
    }
    fn workspace_root(&mut self) -> Result<String, BoundaryError> {
        Ok(hash::canonical_sha256(&self.files).unwrap())
    }
}

/// Reads the fake workspace through a shared view, like a sealed snapshot.
struct FakeVerifier {
    files: Rc<std::cell::RefCell<BTreeMap<String, String>>>,
}

impl Verifier for FakeVerifier {
    fn verify(
        &mut self,
        contract: &Contract,
        sha: &str,
        attempt: u32,
    ) -> Result<VerificationReport, BoundaryError> {
        let files = self.files.borrow();
        let criteria = contract
            .criteria
            .iter()
            .map(|c| {
                let checks: Vec<CheckEvidence> = c
                    .checks
                    .iter()
                    .enumerate()
                    .map(|(i, check)| {
                        let passed = match check {
                            Check::FileContains { path, text } => files
                                .get(path.as_str())
                                .is_some_and(|f| f.contains(text.as_str())),
                            _ => false,
                        };
                        CheckEvidence {
                            criterion: c.id.clone(),
                            index: i,
                            check: check.clone(),
                            passed,
                            failure: (!passed).then(|| "text not found".to_string()),
                            exit_code: None,
                            signal: None,
                            timed_out: false,
                            duration_ms: 1,
                            stdout: None,
                            stderr: None,
                            snapshot: "memory".into(),
                            env: Vec::new(),
                            tests: None,
                            egress: Vec::new(),
                            implied_by: None,
                            reused_from: None,
                        }
                    })
                    .collect();
                CriterionEvidence {
                    id: c.id.clone(),
                    passed: checks.iter().all(|c| c.passed),
                    checks,
                }
            })
            .collect();
        Ok(VerificationReport {
            attempt,
            contract_sha256: sha.into(),
            // The same Merkle root the tools report for the same content.
            manifest_root: hash::canonical_sha256(&*files).unwrap(),
            files: files.len() as u64,
            snapshot_method: "memory".into(),
            protected_violations: vec![],
            criteria,
            artifacts: vec![],
            isolation: Isolation::default(),
            duration_ms: 1,
        })
    }
}

#[derive(Default)]
struct MemLedger(Vec<Event>);

impl Ledger for MemLedger {
    fn append(&mut self, event: &Event) -> Result<(), BoundaryError> {
        self.0.push(event.clone());
        Ok(())
    }
}

struct FakeClock(Rc<Cell<u64>>);

impl Clock for FakeClock {
    fn now_ms(&self) -> u64 {
        self.0.get()
    }
    fn pause(&self, ms: u64) {
        self.0.set(self.0.get() + ms);
    }
}

/// Tools that share their files with the verifier.
struct SharedTools {
    inner: FakeTools,
    shared: Rc<std::cell::RefCell<BTreeMap<String, String>>>,
}

impl Tools for SharedTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.inner.specs()
    }
    fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
        let r = self.inner.execute(call);
        *self.shared.borrow_mut() = self.inner.files.clone();
        r
    }
    fn workspace_root(&mut self) -> Result<String, BoundaryError> {
        self.inner.workspace_root()
    }
}

struct Outcome_ {
    result: RunResult,
    ledger: Vec<Event>,
    contexts: Vec<Context>,
}

fn run_with(
    contract: Contract,
    model: FakeModel,
    policy: VerifyPolicy,
    clock: Rc<Cell<u64>>,
    cancel: bool,
) -> Outcome_ {
    run_reviewed(contract, model, None, policy, clock, cancel).0
}

fn run_reviewed(
    contract: Contract,
    mut model: FakeModel,
    mut checker: Option<FakeModel>,
    policy: VerifyPolicy,
    clock: Rc<Cell<u64>>,
    cancel: bool,
) -> (Outcome_, Vec<Context>) {
    let shared = Rc::new(std::cell::RefCell::new(BTreeMap::new()));
    let mut tools = SharedTools {
        inner: FakeTools::default(),
        shared: shared.clone(),
    };
    let mut verifier = FakeVerifier { files: shared };
    let mut ledger = MemLedger::default();
    let clock = FakeClock(clock);
    let mut observer = NoObserver;
    let cancel_flag = AtomicBool::new(cancel);
    let parts = Parts {
        model: &mut model,
        tools: &mut tools,
        verifier: &mut verifier,
        ledger: &mut ledger,
        clock: &clock,
        observer: &mut observer,
        cancel: &cancel_flag,
    };
    let mut director = Director::new("t-1", contract, policy, parts).unwrap();
    if let Some(c) = checker.as_mut() {
        director = director.with_reviewer(c);
    }
    let result = director.run().unwrap();
    (
        Outcome_ {
            result,
            ledger: ledger.0,
            contexts: model.seen,
        },
        checker.map(|c| c.seen).unwrap_or_default(),
    )
}

fn run(contract: Contract, script: Vec<Turn>) -> Outcome_ {
    let clock = Rc::new(Cell::new(1_000));
    let model = FakeModel::new(script, &clock);
    run_with(contract, model, VerifyPolicy::OnFinish, clock, false)
}

fn assert_well_formed(ledger: &[Event]) {
    assert!(
        matches!(ledger.first(), Some(Event::TaskStarted { .. })),
        "genesis first"
    );
    assert!(
        matches!(ledger.last(), Some(Event::Finished { .. })),
        "finished last"
    );
    let mut state = TaskState::Pending;
    let mut n = 0;
    for e in ledger {
        if let Event::Transition {
            n: tn,
            from,
            to,
            reason,
        } = e
        {
            n += 1;
            assert_eq!(*tn, n, "transitions numbered in order");
            assert_eq!(*from, state, "transitions chain");
            assert!(allowed(*from, *to), "{from} → {to}");
            assert!(!reason.is_empty());
            state = *to;
        }
    }
    assert_eq!(state, TaskState::Terminal);
}

#[test]
fn work_then_finish_is_verified() {
    let o = run(
        contract(10),
        vec![turn(vec![write("yes")], 5), turn(vec![finish()], 5)],
    );
    assert!(o.result.outcome.is_verified(), "{:?}", o.result.record);
    assert_eq!(o.result.used.steps, 2);
    assert_eq!(o.result.used.tokens, 10);
    assert_eq!(o.result.used.verifications, 1);
    assert_well_formed(&o.ledger);
}

#[test]
fn finish_without_passing_checks_is_not_verified() {
    let o = run(contract(10), vec![turn(vec![finish()], 1); 10]);
    // One verification rejects the claim; claiming again on the same
    // workspace is a stall: nudged once, then lost.
    assert_eq!(
        o.result.record.kind,
        OutcomeKind::Lost,
        "{:?}",
        o.result.record
    );
    assert_eq!(o.result.used.verifications, 1);
    assert!(
        o.result.record.reason.contains("`finish` claimed again"),
        "{}",
        o.result.record.reason
    );
    assert!(
        o.ledger.iter().any(
            |e| matches!(e, Event::Feedback { text, .. } if text.starts_with("Stall detected"))
        )
    );
    assert_well_formed(&o.ledger);
}

#[test]
fn verification_keeps_rejecting_changed_work_until_the_limit_then_fails() {
    let script: Vec<Turn> = (0..10)
        .map(|i| turn(vec![write(&format!("attempt {i}")), finish()], 1))
        .collect();
    let o = run(contract(10), script);
    assert_eq!(
        o.result.record.kind,
        OutcomeKind::Failed,
        "{:?}",
        o.result.record
    );
    assert_eq!(o.result.used.verifications, 3, "stops at max_verifications");
    assert!(o.result.record.reason.contains("rejected 3 time(s)"));
    assert_well_formed(&o.ledger);
}

#[test]
fn repeating_the_same_useless_step_ends_lost_with_the_pattern_named() {
    let clock = Rc::new(Cell::new(0));
    let mut model = FakeModel::new(vec![], &clock);
    model.repeat_forever = Some(turn(vec![call("list", serde_json::json!({}))], 1));
    let o = run_with(contract(30), model, VerifyPolicy::OnFinish, clock, false);
    assert_eq!(
        o.result.record.kind,
        OutcomeKind::Lost,
        "{:?}",
        o.result.record
    );
    assert!(
        o.result
            .record
            .reason
            .contains("no progress: the same action"),
        "{}",
        o.result.record.reason
    );
    assert!(
        o.result.used.steps < 30,
        "stopped by the detector, not the step limit"
    );
}

#[test]
fn failing_evidence_is_fed_back_to_the_model() {
    let o = run(
        contract(10),
        vec![
            turn(vec![write("no")], 1),
            turn(vec![finish()], 1),
            turn(vec![write("yes"), finish()], 1),
        ],
    );
    assert!(o.result.outcome.is_verified(), "{:?}", o.result.record);
    let third = &o.contexts[2];
    let Some(Message::User { content, .. }) = third.messages.last() else {
        panic!("feedback last")
    };
    assert!(content.contains("rejected the finish claim"), "{content}");
    assert!(content.contains("text not found"), "{content}");
    assert!(o.ledger.iter().any(|e| matches!(
        e,
        Event::Verified {
            accepted: false,
            ..
        }
    )));
}

#[test]
fn a_script_that_runs_out_is_lost_not_success() {
    let o = run(contract(10), vec![turn(vec![write("yes")], 1)]);
    assert_eq!(o.result.record.kind, OutcomeKind::Lost);
    assert!(o.result.record.reason.contains("script exhausted"));
    assert!(
        o.ledger
            .iter()
            .any(|e| matches!(e, Event::ModelSilent { step: 2, .. }))
    );
    assert_eq!(
        o.result.used.verifications, 0,
        "work done but never claimed is not verified"
    );
    assert_well_formed(&o.ledger);
}

#[test]
fn a_model_that_never_finishes_hits_the_step_limit() {
    let clock = Rc::new(Cell::new(0));
    let mut model = FakeModel::new(vec![], &clock);
    model.repeat_forever = Some(turn(vec![write("no")], 1));
    let o = run_with(contract(4), model, VerifyPolicy::OnFinish, clock, false);
    assert_eq!(o.result.outcome, Outcome::LimitReached(LimitKind::Steps));
    assert_eq!(o.result.used.steps, 4);
    assert_eq!(o.contexts.len(), 4, "no model call after the limit");
    assert_well_formed(&o.ledger);
}

#[test]
fn tokens_are_enforced_by_the_director() {
    let mut c = contract(100);
    c.limits.max_tokens = 2_000;
    let o = run(c.clone(), vec![turn(vec![write("no")], 500); 10]);
    assert_eq!(o.result.outcome, Outcome::LimitReached(LimitKind::Tokens));
    assert_eq!(o.result.used.tokens, 2_000);
    assert_eq!(o.result.used.steps, 4);

    // A budget too small for even one call is refused before anything is spent.
    c.limits.max_tokens = 25;
    let o = run(c, vec![turn(vec![write("no")], 10); 10]);
    assert_eq!(o.result.outcome, Outcome::LimitReached(LimitKind::Tokens));
    assert_eq!(o.result.used.tokens, 0);
    assert_eq!(o.contexts.len(), 0, "no model call was made");
    assert!(
        o.result.record.reason.contains("needs about"),
        "{}",
        o.result.record.reason
    );
}

#[test]
fn wall_time_is_enforced_with_the_injected_clock() {
    let clock = Rc::new(Cell::new(0));
    let mut model = FakeModel::new(vec![], &clock);
    model.repeat_forever = Some(turn(vec![write("no")], 1));
    model.ms_per_turn = 400;
    let mut c = contract(100);
    c.limits.timeout_secs = 1;
    let o = run_with(c, model, VerifyPolicy::OnFinish, clock, false);
    assert_eq!(o.result.outcome, Outcome::LimitReached(LimitKind::Time));
    assert_eq!(
        o.result.used.steps, 3,
        "0.4 s per turn: 3 turns then 1.2 s ≥ 1 s"
    );
}

#[test]
fn cancel_stops_before_the_next_model_call() {
    let clock = Rc::new(Cell::new(0));
    let model = FakeModel::new(vec![turn(vec![write("yes")], 1)], &clock);
    let o = run_with(contract(10), model, VerifyPolicy::OnFinish, clock, true);
    assert_eq!(o.result.outcome, Outcome::Cancelled);
    assert!(o.contexts.is_empty());
    assert_well_formed(&o.ledger);
}

#[test]
fn verify_on_change_accepts_a_change_that_makes_the_checks_pass() {
    let clock = Rc::new(Cell::new(0));
    let model = FakeModel::new(
        vec![turn(vec![write("no")], 1), turn(vec![write("yes")], 1)],
        &clock,
    );
    let o = run_with(
        contract(10),
        model,
        VerifyPolicy::OnFinishOrChange,
        clock,
        false,
    );
    assert!(o.result.outcome.is_verified(), "{:?}", o.result.record);
    assert_eq!(o.result.used.verifications, 2);
}

#[test]
fn an_empty_turn_is_told_to_act() {
    let o = run(
        contract(3),
        vec![turn(vec![], 1), turn(vec![write("yes"), finish()], 1)],
    );
    assert!(o.result.outcome.is_verified());
    let Some(Message::User { content, .. }) = o.contexts[1].messages.last() else {
        panic!()
    };
    assert!(content.contains("No tool call was proposed"));
}

#[test]
fn calls_after_finish_in_the_same_turn_are_not_executed() {
    let o = run(contract(3), vec![turn(vec![finish(), write("yes")], 1)]);
    let observed = o
        .ledger
        .iter()
        .filter(|e| matches!(e, Event::Observed { .. }))
        .count();
    assert_eq!(observed, 1);
    assert!(!o.result.outcome.is_verified());
}

#[test]
fn the_context_hash_of_each_turn_is_recorded() {
    let o = run(
        contract(3),
        vec![turn(vec![write("yes")], 1), turn(vec![finish()], 1)],
    );
    let hashes: Vec<&String> = o
        .ledger
        .iter()
        .filter_map(|e| match e {
            Event::ModelTurn { context_sha256, .. } => Some(context_sha256),
            _ => None,
        })
        .collect();
    assert_eq!(hashes.len(), 2);
    assert_eq!(hashes[0], &o.contexts[0].sha256().unwrap());
    assert_ne!(hashes[0], hashes[1]);
}

#[test]
fn malformed_answers_are_charged_returned_to_the_model_and_end_lost() {
    let clock = Rc::new(Cell::new(0));
    let mut model = FakeModel::new(vec![], &clock);
    model.reply_forever = Some(ModelReply::Malformed {
        error: "invalid JSON at line 1, column 1".into(),
        excerpt: "I cannot".into(),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 5,
            attempts: 1,
            ..Usage::default()
        },
    });
    let o = run_with(contract(20), model, VerifyPolicy::OnFinish, clock, false);
    assert_eq!(o.result.outcome, Outcome::Lost);
    assert!(
        o.result
            .record
            .reason
            .contains("the same action failed 3 times"),
        "{}",
        o.result.record.reason
    );
    let malformed = o
        .ledger
        .iter()
        .filter(|e| matches!(e, Event::ModelMalformed { .. }))
        .count() as u64;
    // Nudged after 3, stopped after 3 more.
    assert_eq!(malformed, 6);
    assert_eq!(
        o.result.used.tokens,
        105 * malformed,
        "every malformed answer is charged"
    );
    assert_eq!(o.result.used.model_calls as u64, malformed);
    // The model saw what was wrong.
    let last = o.contexts.last().unwrap();
    assert!(last.messages.iter().any(|m| matches!(m, loop_protocol::Message::User { content, .. } if content.contains("invalid JSON at line 1, column 1"))));
    assert_well_formed(&o.ledger);
}

#[test]
fn an_unavailable_provider_ends_in_error_with_its_attempts_charged() {
    let clock = Rc::new(Cell::new(0));
    let mut model = FakeModel::new(vec![], &clock);
    model.reply_forever = Some(ModelReply::Unavailable {
        error: "HTTP 529: overloaded_error".into(),
        usage: Usage {
            attempts: 4,
            ..Usage::default()
        },
    });
    let o = run_with(contract(20), model, VerifyPolicy::OnFinish, clock, false);
    assert_eq!(o.result.outcome, Outcome::Error);
    assert!(o.result.record.reason.contains("overloaded_error"));
    assert_eq!(o.result.used.model_calls, 4);
    assert!(
        o.ledger
            .iter()
            .any(|e| matches!(e, Event::ModelFailed { .. }))
    );
    assert_well_formed(&o.ledger);
}

fn review(verdict: &str, reasons: &str, tokens: u64) -> Turn {
    turn(
        vec![call(
            "review",
            serde_json::json!({"verdict": verdict, "reasons": reasons}),
        )],
        tokens,
    )
}

#[test]
fn the_checker_can_veto_accepted_work_and_its_reasons_reach_the_maker() {
    let clock = Rc::new(Cell::new(0));
    let maker = FakeModel::new(
        vec![
            turn(vec![write("yes"), finish()], 10),
            turn(vec![write("yes\n"), finish()], 10),
        ],
        &clock,
    );
    let checker = FakeModel::new(
        vec![
            review("object", "the file lacks a trailing newline", 7),
            review("approve", "fine now", 7),
        ],
        &clock,
    );
    let (o, seen) = run_reviewed(
        contract(10),
        maker,
        Some(checker),
        VerifyPolicy::OnFinish,
        clock,
        false,
    );
    assert!(o.result.outcome.is_verified(), "{:?}", o.result.record);
    let verdicts: Vec<(String, String)> = o
        .ledger
        .iter()
        .filter_map(|e| match e {
            Event::Reviewed {
                verdict, reasons, ..
            } => Some((verdict.clone(), reasons.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        verdicts,
        vec![
            ("object".into(), "the file lacks a trailing newline".into()),
            ("approve".into(), "fine now".into())
        ]
    );
    // The maker saw the objection; the checker saw the evidence and was offered only `review`.
    assert!(o.contexts[1].messages.iter().any(
        |m| matches!(m, Message::User { content, .. } if content.contains("lacks a trailing newline"))
    ));
    assert_eq!(seen[0].tools.len(), 1);
    assert_eq!(seen[0].tools[0].name, "review");
    // Review tokens are charged but take no step.
    assert_eq!(o.result.used.tokens, 10 + 10 + 7 + 7);
    assert_eq!(o.result.used.steps, 2);
    match &o.ledger[0] {
        Event::TaskStarted { checker, .. } => {
            assert!(checker.is_some(), "the checker is in the genesis")
        }
        other => panic!("{other:?}"),
    }
    assert_well_formed(&o.ledger);
}

#[test]
fn a_checker_that_cannot_answer_is_an_objection_never_an_approval() {
    let clock = Rc::new(Cell::new(0));
    let maker = FakeModel::new(vec![turn(vec![write("yes"), finish()], 10); 5], &clock);
    let mut checker = FakeModel::new(vec![], &clock);
    checker.reply_forever = Some(ModelReply::Malformed {
        error: "invalid JSON".into(),
        excerpt: String::new(),
        usage: Usage::default(),
    });
    let (o, _) = run_reviewed(
        contract(10),
        maker,
        Some(checker),
        VerifyPolicy::OnFinish,
        clock.clone(),
        false,
    );
    assert!(
        !o.result.outcome.is_verified(),
        "fail closed: {:?}",
        o.result.record
    );
    assert!(o.ledger.iter().any(|e| matches!(e, Event::Reviewed { verdict, reasons, .. } if verdict == "object" && reasons.contains("malformed"))));

    // A checker can never make failing work pass: it is not even asked.
    let maker = FakeModel::new(vec![turn(vec![write("no"), finish()], 10); 3], &clock);
    let checker = FakeModel::new(vec![review("approve", "looks great", 1); 3], &clock);
    let (o, seen) = run_reviewed(
        contract(3),
        maker,
        Some(checker),
        VerifyPolicy::OnFinish,
        clock,
        false,
    );
    assert!(!o.result.outcome.is_verified());
    assert!(seen.is_empty(), "the checker reviews only accepted work");
}

#[test]
fn the_checkers_answer_is_kept_in_reserve_from_the_maker() {
    let clock = Rc::new(Cell::new(0));
    let mut c = contract(100);
    c.limits.max_tokens = 9_000;
    // The checker asks for up to 4096 tokens; with the prompt reserve that is
    // more than the whole budget, so the maker cannot make even one call.
    let maker = FakeModel::new(vec![turn(vec![write("yes"), finish()], 10)], &clock);
    let checker = FakeModel::new(vec![review("approve", "ok", 1)], &clock);
    let (o, _) = run_reviewed(
        c,
        maker,
        Some(checker),
        VerifyPolicy::OnFinish,
        clock,
        false,
    );
    assert_eq!(o.result.outcome, Outcome::LimitReached(LimitKind::Tokens));
    assert!(
        o.result.record.reason.contains("reserved"),
        "{}",
        o.result.record.reason
    );
}

mod resume {
    use super::*;
    use std::cell::RefCell;

    /// A workspace of files plus an effect counter kept outside it (the
    /// "external" side of an at-most-once action).
    #[derive(Default, Clone)]
    struct World {
        files: BTreeMap<String, String>,
        effects: BTreeMap<String, u32>,
        /// The workspace was rebuilt from the record (the task moved).
        rebuilt: bool,
    }

    struct WorldTools(Rc<RefCell<World>>);

    impl Tools for WorldTools {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![]
        }
        fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
            let mut w = self.0.borrow_mut();
            match call.tool.as_str() {
                "write" => {
                    let path = call.args["path"].as_str().unwrap_or("done").to_string();
                    let content = call.args["content"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let changed = w.files.get(&path) != Some(&content);
                    w.files.insert(path, content);
                    Ok(ToolOutcome {
                        observation: Observation::ok(&call.id, "write", "wrote", changed),
                        control: None,
                    })
                }
                "effect" => {
                    // An action with an effect that must not happen twice; it
                    // also leaves a trace in the workspace, as commands do.
                    *w.effects.entry(call.id.clone()).or_default() += 1;
                    let log = w.files.entry("effects.log".into()).or_default();
                    log.push_str(&format!("{}\n", call.id));
                    Ok(ToolOutcome {
                        observation: Observation::ok(&call.id, "effect", "done", true),
                        control: None,
                    })
                }
                "finish" => Ok(ToolOutcome {
                    observation: Observation::ok(
                        &call.id,
                        "finish",
                        "verification requested",
                        false,
                    ),
                    control: Some(Control::Finish {
                        summary: "done".into(),
                    }),
                }),
                other => Ok(ToolOutcome {
                    observation: Observation::refused(
                        &call.id,
                        other,
                        "unknown tool",
                        "no such tool",
                    ),
                    control: None,
                }),
            }
        }
        fn effect(&self, call: &ToolCall) -> loop_protocol::Effect {
            match call.tool.as_str() {
                "write" => loop_protocol::Effect::Idempotent,
                "finish" => loop_protocol::Effect::Pure,
                _ => loop_protocol::Effect::AtMostOnce,
            }
        }
        fn workspace_root(&mut self) -> Result<String, BoundaryError> {
            Ok(hash::canonical_sha256(&self.0.borrow().files).unwrap())
        }
        fn rebuilt(&self) -> bool {
            self.0.borrow().rebuilt
        }
    }

    struct WorldVerifier(Rc<RefCell<World>>);

    impl Verifier for WorldVerifier {
        fn verify(
            &mut self,
            contract: &Contract,
            sha: &str,
            attempt: u32,
        ) -> Result<VerificationReport, BoundaryError> {
            let files = Rc::new(RefCell::new(self.0.borrow().files.clone()));
            FakeVerifier { files }.verify(contract, sha, attempt)
        }
    }

    /// A ledger that dies (like the process) after `limit` appends.
    struct DyingLedger {
        events: Rc<RefCell<Vec<Event>>>,
        limit: usize,
    }

    impl Ledger for DyingLedger {
        fn append(&mut self, event: &Event) -> Result<(), BoundaryError> {
            let mut e = self.events.borrow_mut();
            if e.len() >= self.limit {
                return Err(BoundaryError::new("killed"));
            }
            e.push(event.clone());
            Ok(())
        }
    }

    struct ScriptModel {
        script: Vec<Turn>,
        next: usize,
    }

    impl Model for ScriptModel {
        fn info(&self) -> ModelInfo {
            ModelInfo {
                provider: "script".into(),
                name: "s".into(),
                source_sha256: None,
                parameters: None,
            }
        }
        fn next_turn(&mut self, _c: &Context, _l: loop_protocol::CallLimits) -> ModelReply {
            let t = self.script.get(self.next).cloned();
            self.next += 1;
            match t {
                Some(t) => ModelReply::Turn(t),
                None => ModelReply::NothingMore {
                    reason: "script exhausted".into(),
                },
            }
        }
        fn resume_at(&mut self, turns: u32) {
            self.next = turns as usize;
        }
    }

    fn script() -> Vec<Turn> {
        let effect = |id: &str| ToolCall {
            id: id.into(),
            tool: "effect".into(),
            args: serde_json::json!({}),
        };
        let write = |id: &str, content: &str| ToolCall {
            id: id.into(),
            tool: "write".into(),
            args: serde_json::json!({"path": "done", "content": content}),
        };
        let finish = |id: &str| ToolCall {
            id: id.into(),
            tool: "finish".into(),
            args: serde_json::json!({"summary": "done"}),
        };
        vec![
            turn(vec![effect("e1"), write("w1", "no")], 10),
            turn(vec![write("w2", "almost"), finish("f2")], 10),
            turn(vec![effect("e3"), write("w3", "yes"), finish("f3")], 10),
        ]
    }

    /// Run with a ledger that dies after `limit` entries; returns the record
    /// and whether the run completed.
    fn run_until(
        world: &Rc<RefCell<World>>,
        history: Vec<Event>,
        limit: usize,
    ) -> (Vec<Event>, Option<RunResult>) {
        let events = Rc::new(RefCell::new(history.clone()));
        let mut model = ScriptModel {
            script: script(),
            next: 0,
        };
        let mut tools = WorldTools(world.clone());
        let mut verifier = WorldVerifier(world.clone());
        let mut ledger = DyingLedger {
            events: events.clone(),
            limit,
        };
        let clock = FakeClock(Rc::new(Cell::new(1_000)));
        let mut observer = NoObserver;
        let cancel = AtomicBool::new(false);
        let parts = Parts {
            model: &mut model,
            tools: &mut tools,
            verifier: &mut verifier,
            ledger: &mut ledger,
            clock: &clock,
            observer: &mut observer,
            cancel: &cancel,
        };
        let d = Director::new("t-1", contract(10), VerifyPolicy::OnFinish, parts).unwrap();
        let r = if history.is_empty() {
            d.run()
        } else {
            d.resume(&history, 0)
        };
        let out = events.borrow().clone();
        (out, r.ok())
    }

    #[test]
    fn a_task_killed_after_any_entry_resumes_to_the_same_end_without_doing_anything_twice() {
        // The run never killed.
        let clean = Rc::new(RefCell::new(World::default()));
        let (clean_ledger, clean_result) = run_until(&clean, vec![], usize::MAX);
        let clean_result = clean_result.unwrap();
        assert!(
            clean_result.outcome.is_verified(),
            "{:?}",
            clean_result.record
        );
        let n = clean_ledger.len();
        assert!(n > 20, "{n}");

        // Killed after each entry in turn (and again after resuming), then resumed.
        for kill_at in 1..n {
            for second_kill in [None, Some(kill_at + 3)] {
                let world = Rc::new(RefCell::new(World::default()));
                let (mut history, done) = run_until(&world, vec![], kill_at);

                assert!(done.is_none());
                if let Some(k2) = second_kill {
                    let (h, _) = run_until(&world, history.clone(), k2);
                    history = h;
                }
                let (ledger, result) = run_until(&world, history, usize::MAX);
                let result = result.unwrap_or_else(|| panic!("kill at {kill_at}: resume failed"));
                let w = world.borrow();

                assert!(
                    result.outcome.is_verified(),
                    "kill at {kill_at}: {:?}",
                    result.record
                );
                assert_eq!(
                    w.files,
                    clean.borrow().files,
                    "kill at {kill_at}: the workspace differs"
                );
                for (id, count) in &w.effects {
                    assert_eq!(
                        *count, 1,
                        "kill at {kill_at}: effect {id} ran {count} times"
                    );
                }
                assert_eq!(w.effects.len(), 2, "kill at {kill_at}: an effect was lost");
                // Steps are never duplicated or skipped; one task_started, one finished.
                let steps: Vec<u32> = ledger
                    .iter()
                    .filter_map(|e| match e {
                        Event::ModelTurn { step, .. } => Some(*step),
                        _ => None,
                    })
                    .collect();
                assert_eq!(steps, vec![1, 2, 3], "kill at {kill_at}");
                assert_eq!(
                    ledger
                        .iter()
                        .filter(|e| matches!(e, Event::TaskStarted { .. }))
                        .count(),
                    1
                );
                assert_eq!(
                    ledger
                        .iter()
                        .filter(|e| matches!(e, Event::Finished { .. }))
                        .count(),
                    1
                );
                assert_eq!(result.used.steps, 3, "kill at {kill_at}: budget replayed");
                assert_well_formed(&ledger);
            }
        }
    }

    #[test]
    fn an_at_most_once_call_in_flight_is_never_run_again_even_in_a_workspace_as_it_was() {
        // Killed the moment `e1`'s intent is recorded: the old workspace
        // may or may not have seen it run. Here it ran there (its effect
        // outside the workspace happened); the workspace rebuilt from the
        // record is as it was before the call.
        let world = Rc::new(RefCell::new(World::default()));
        let (history, _) = run_until(&world, vec![], usize::MAX);
        let intent_at = history
            .iter()
            .position(|e| matches!(e, Event::Intent { call_id, .. } if call_id == "e1"))
            .unwrap();
        let history: Vec<Event> = history[..=intent_at].to_vec();
        for rebuilt in [false, true] {
            let world = Rc::new(RefCell::new(World {
                rebuilt,
                ..World::default()
            }));
            world.borrow_mut().effects.insert("e1".into(), 1);
            let (ledger, result) = run_until(&world, history.clone(), usize::MAX);
            let result = result.unwrap();
            let runs = world.borrow().effects["e1"];
            let settled = ledger[intent_at + 1..]
                .iter()
                .find_map(|e| match e {
                    Event::Observed { observation, .. } if observation.call_id == "e1" => {
                        Some(observation.clone())
                    }
                    _ => None,
                })
                .unwrap();
            // Rebuilt or not, the workspace as it was says nothing of the
            // call's effects beyond it: not run again; the model is told
            // its outcome is unknown (and why).
            assert_eq!(
                runs, 1,
                "an at-most-once call ran twice (rebuilt: {rebuilt})"
            );
            assert!(
                matches!(settled.status, loop_protocol::ObservationStatus::Error),
                "{settled:?}"
            );
            assert!(
                settled.content.contains("outcome unknown"),
                "{}",
                settled.content
            );
            assert_eq!(
                settled.content.contains("rebuilt"),
                rebuilt,
                "{}",
                settled.content
            );
            assert_well_formed(&ledger);
            assert!(result.used.steps >= 3, "{:?}", result.record);
        }
    }
}

mod recovery {
    use super::*;

    /// Tools whose `flaky` call fails for a passing reason `fails` times.
    struct Flaky {
        fails: u32,
        calls: u32,
    }

    impl Tools for Flaky {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![]
        }
        fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
            self.calls += 1;
            let observation = if self.calls <= self.fails {
                // The tool that saw EAGAIN says it is passing.
                let mut o = Observation::error(
                    &call.id,
                    &call.tool,
                    "fork: Resource temporarily unavailable",
                );
                o.transient = true;
                o
            } else {
                Observation::ok(&call.id, &call.tool, "done", false)
            };
            Ok(ToolOutcome {
                observation,
                control: None,
            })
        }
        fn workspace_root(&mut self) -> Result<String, BoundaryError> {
            Ok("root".into())
        }
    }

    fn run_flaky(fails: u32, retries: u32) -> (Vec<Event>, u32, u64) {
        let clock = Rc::new(Cell::new(0));
        let mut model = FakeModel::new(
            vec![turn(vec![call("flaky", serde_json::json!({}))], 1)],
            &clock,
        );
        model.ms_per_turn = 0;
        let mut tools = Flaky { fails, calls: 0 };
        let mut verifier = FakeVerifier {
            files: Rc::new(std::cell::RefCell::new(BTreeMap::new())),
        };
        let mut ledger = MemLedger::default();
        let fake_clock = FakeClock(clock.clone());
        let mut observer = NoObserver;
        let cancel = AtomicBool::new(false);
        let parts = Parts {
            model: &mut model,
            tools: &mut tools,
            verifier: &mut verifier,
            ledger: &mut ledger,
            clock: &fake_clock,
            observer: &mut observer,
            cancel: &cancel,
        };
        let checkpoints = crate::Checkpoints {
            retry_transient: retries,
            retry_base_ms: 100,
            ..Default::default()
        };
        Director::new("t", contract(5), VerifyPolicy::OnFinish, parts)
            .unwrap()
            .with_checkpoints(checkpoints)
            .run()
            .unwrap();
        (ledger.0, tools.calls, clock.get())
    }

    #[test]
    fn transient_failures_are_retried_with_backoff_up_to_the_cap_and_recorded() {
        let (ledger, calls, waited) = run_flaky(2, 3);
        assert_eq!(calls, 3, "two failures, then success");
        let retries: Vec<u32> = ledger
            .iter()
            .filter_map(|e| match e {
                Event::Recovery {
                    attempt, policy, ..
                } if policy == "retry" => Some(*attempt),
                _ => None,
            })
            .collect();
        assert_eq!(retries, vec![1, 2]);
        assert_eq!(waited, 100 + 200, "exponential backoff through the clock");
        let observed = ledger.iter().find_map(|e| match e {
            Event::Observed { observation, .. } => Some(observation.clone()),
            _ => None,
        });
        assert_eq!(
            observed.unwrap().status,
            loop_protocol::ObservationStatus::Ok
        );
        // The cap holds: past it, the failure is the observation.
        let (ledger, calls, _) = run_flaky(5, 2);
        assert_eq!(calls, 3);
        assert!(ledger.iter().any(|e| matches!(e, Event::Observed { observation, .. } if observation.status == loop_protocol::ObservationStatus::Error)));
    }

    #[test]
    fn spending_past_the_threshold_pauses_and_nobody_answering_stops() {
        let clock = Rc::new(Cell::new(0));
        let mut expensive = turn(vec![write("no")], 10);
        expensive.usage.cost_usd = 0.3;
        let mut model = FakeModel::new(vec![], &clock);
        model.repeat_forever = Some(expensive);
        let shared = Rc::new(std::cell::RefCell::new(BTreeMap::new()));
        let mut tools = SharedTools {
            inner: FakeTools::default(),
            shared: shared.clone(),
        };
        let mut verifier = FakeVerifier { files: shared };
        let mut ledger = MemLedger::default();
        let fake_clock = FakeClock(clock.clone());
        let mut observer = NoObserver;
        let cancel = AtomicBool::new(false);
        let parts = Parts {
            model: &mut model,
            tools: &mut tools,
            verifier: &mut verifier,
            ledger: &mut ledger,
            clock: &fake_clock,
            observer: &mut observer,
            cancel: &cancel,
        };
        let r = Director::new("t", contract(20), VerifyPolicy::OnFinish, parts)
            .unwrap()
            .with_checkpoints(crate::Checkpoints {
                cost_usd_over: Some(0.5),
                ..Default::default()
            })
            .run()
            .unwrap();
        assert_eq!(r.outcome, Outcome::Cancelled);
        assert!(
            r.record
                .reason
                .contains("nobody answered the checkpoint (spending crossed $0.50)"),
            "{}",
            r.record.reason
        );
        assert_eq!(
            r.used.steps, 2,
            "paused right after crossing, before a third turn"
        );
        assert_well_formed(&ledger.0);
    }
}

/// A fault (the claim cannot be renewed) raised while a call or a check
/// runs: the run stops deciding nothing, and what the fault cut short is
/// not recorded as the model's or the work's failure.
mod faults {
    use super::*;
    use std::sync::Arc;

    /// Tools whose `write` is cut short by a fault mid-command.
    struct FaultyTools {
        inner: FakeTools,
        fault: Arc<AtomicBool>,
        on: &'static str,
        shared: Rc<std::cell::RefCell<BTreeMap<String, String>>>,
    }

    impl Tools for FaultyTools {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![]
        }
        fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
            if call.tool == self.on {
                self.fault.store(true, std::sync::atomic::Ordering::SeqCst);
                // What a command killed under it would say.
                return Ok(ToolOutcome {
                    observation: Observation::ok(&call.id, &call.tool, "killed by signal 9", false),
                    control: None,
                });
            }
            let r = self.inner.execute(call);
            *self.shared.borrow_mut() = self.inner.files.clone();
            r
        }
        fn workspace_root(&mut self) -> Result<String, BoundaryError> {
            self.inner.workspace_root()
        }
    }

    /// A verifier whose checks a fault cuts short.
    struct FaultyVerifier(Arc<AtomicBool>);

    impl Verifier for FaultyVerifier {
        fn verify(
            &mut self,
            contract: &Contract,
            sha: &str,
            attempt: u32,
        ) -> Result<VerificationReport, BoundaryError> {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            let files = Rc::new(std::cell::RefCell::new(BTreeMap::new()));
            FakeVerifier { files }.verify(contract, sha, attempt)
        }
    }

    fn run_faulty(
        on: &'static str,
        faulty_checks: bool,
    ) -> (Result<RunResult, DirectorError>, Vec<Event>, bool) {
        let clock = Rc::new(Cell::new(1_000));
        let mut model = FakeModel::new(
            vec![turn(vec![write("yes")], 1), turn(vec![finish()], 1)],
            &clock,
        );
        let fault = Arc::new(AtomicBool::new(false));
        let shared = Rc::new(std::cell::RefCell::new(BTreeMap::new()));
        let mut tools = FaultyTools {
            inner: FakeTools::default(),
            fault: fault.clone(),
            on,
            shared: shared.clone(),
        };
        let mut fake_verifier = FakeVerifier { files: shared };
        let mut faulty_verifier = FaultyVerifier(fault.clone());
        let verifier: &mut dyn Verifier = if faulty_checks {
            &mut faulty_verifier
        } else {
            &mut fake_verifier
        };
        let mut ledger = MemLedger::default();
        let clock = FakeClock(clock);
        let mut observer = NoObserver;
        let cancel = AtomicBool::new(false);
        let parts = Parts {
            model: &mut model,
            tools: &mut tools,
            verifier,
            ledger: &mut ledger,
            clock: &clock,
            observer: &mut observer,
            cancel: &cancel,
        };
        let director = Director::new("t-1", contract(10), VerifyPolicy::OnFinish, parts)
            .unwrap()
            .with_interrupt(&fault);
        let r = director.run();
        let raised = fault.load(std::sync::atomic::Ordering::SeqCst);
        (r, ledger.0, raised)
    }

    #[test]
    fn a_command_cut_short_by_a_fault_is_not_recorded_and_nothing_is_decided() {
        let (r, ledger, raised) = run_faulty("write", false);
        assert!(raised);
        assert!(matches!(r, Err(DirectorError::Interrupted(_))), "{r:?}");
        // The intent is there (a resume knows the call may have run), its
        // killed result is not, and no outcome was recorded.
        assert!(ledger.iter().any(|e| matches!(e, Event::Intent { .. })));
        assert!(
            !ledger.iter().any(|e| matches!(e, Event::Observed { .. })),
            "{ledger:#?}"
        );
        assert!(
            !ledger.iter().any(|e| matches!(e, Event::Finished { .. })),
            "{ledger:#?}"
        );
    }

    #[test]
    fn a_check_cut_short_by_a_fault_is_not_a_failing_criterion() {
        let (r, ledger, raised) = run_faulty("none", true);
        assert!(raised);
        assert!(matches!(r, Err(DirectorError::Interrupted(_))), "{r:?}");
        assert!(
            !ledger.iter().any(|e| matches!(e, Event::Verified { .. })),
            "{ledger:#?}"
        );
        assert!(
            !ledger.iter().any(|e| matches!(e, Event::Finished { .. })),
            "{ledger:#?}"
        );
    }

    #[test]
    fn without_a_fault_the_same_run_verifies() {
        let (r, ledger, raised) = run_faulty("none", false);
        assert!(!raised);
        assert!(r.unwrap().outcome.is_verified());
        assert!(ledger.iter().any(|e| matches!(e, Event::Finished { .. })));
    }

    /// How the person's answer to a checkpoint goes.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Waiting {
        /// The store cannot be read while waiting.
        StoreFails,
        /// The claim is lost while waiting: the fault raises the cancel
        /// too, and the wait ends as cancelled.
        FaultRaised,
        /// A person cancels the task while it waits.
        PersonCancels,
        /// A person says to go on.
        Approved,
    }

    struct Answers<'f> {
        how: Waiting,
        fault: &'f AtomicBool,
        cancel: &'f AtomicBool,
    }

    impl Approvals for Answers<'_> {
        fn request(&mut self, _: &str, _: &serde_json::Value, _: u64) -> Result<(), BoundaryError> {
            Ok(())
        }
        fn wait(
            &mut self,
            _: &str,
            _: u64,
            _: &AtomicBool,
        ) -> Result<ApprovalDecision, BoundaryError> {
            use std::sync::atomic::Ordering::SeqCst;
            match self.how {
                Waiting::StoreFails => Err(BoundaryError::new("the store is unreachable")),
                Waiting::FaultRaised => {
                    self.fault.store(true, SeqCst);
                    self.cancel.store(true, SeqCst);
                    Ok(ApprovalDecision::Cancelled)
                }
                Waiting::PersonCancels => {
                    self.cancel.store(true, SeqCst);
                    Ok(ApprovalDecision::Cancelled)
                }
                Waiting::Approved => Ok(ApprovalDecision::Approved),
            }
        }
    }

    /// A task that crosses a spending checkpoint on its first turn and
    /// finishes on its second, answered `how`.
    fn at_a_checkpoint(how: Waiting) -> (Result<RunResult, DirectorError>, Vec<Event>) {
        let clock = Rc::new(Cell::new(1_000));
        let mut expensive = turn(vec![write("yes")], 1);
        expensive.usage.cost_usd = 0.6;
        let mut model = FakeModel::new(vec![expensive, turn(vec![finish()], 1)], &clock);
        let shared = Rc::new(std::cell::RefCell::new(BTreeMap::new()));
        let mut tools = SharedTools {
            inner: FakeTools::default(),
            shared: shared.clone(),
        };
        let mut verifier = FakeVerifier { files: shared };
        let mut ledger = MemLedger::default();
        let fake_clock = FakeClock(clock);
        let mut observer = NoObserver;
        let cancel = AtomicBool::new(false);
        let fault = AtomicBool::new(false);
        let mut answers = Answers {
            how,
            fault: &fault,
            cancel: &cancel,
        };
        let parts = Parts {
            model: &mut model,
            tools: &mut tools,
            verifier: &mut verifier,
            ledger: &mut ledger,
            clock: &fake_clock,
            observer: &mut observer,
            cancel: &cancel,
        };
        let r = Director::new("t", contract(10), VerifyPolicy::OnFinish, parts)
            .unwrap()
            .with_interrupt(&fault)
            .with_approvals(&mut answers, 60)
            .with_checkpoints(crate::Checkpoints {
                cost_usd_over: Some(0.5),
                ..Default::default()
            })
            .run();
        (r, ledger.0)
    }

    #[test]
    fn an_outage_while_a_person_is_asked_is_no_answer_and_no_cancel() {
        for how in [Waiting::StoreFails, Waiting::FaultRaised] {
            let (r, ledger) = at_a_checkpoint(how);
            assert!(
                matches!(r, Err(DirectorError::Interrupted(_))),
                "{how:?}: {r:?}"
            );
            assert!(
                ledger
                    .iter()
                    .any(|e| matches!(e, Event::CheckpointRequested { .. })),
                "{how:?}: {ledger:#?}"
            );
            assert!(
                !ledger
                    .iter()
                    .any(|e| matches!(e, Event::CheckpointDecided { .. } | Event::Finished { .. })),
                "{how:?}: nothing decided: {ledger:#?}"
            );
        }
        // The honest versions: a person's cancel is a cancel, a person's
        // go-ahead goes on to the end.
        let (r, _) = at_a_checkpoint(Waiting::PersonCancels);
        assert_eq!(r.unwrap().outcome, Outcome::Cancelled);
        let (r, ledger) = at_a_checkpoint(Waiting::Approved);
        assert!(r.unwrap().outcome.is_verified(), "{ledger:#?}");
        assert!(ledger.iter().any(|e| matches!(
            e,
            Event::CheckpointDecided {
                decision: ApprovalDecision::Approved,
                ..
            }
        )));
    }
}

mod delegation {
    use super::*;
    use loop_protocol::ChildRun;
    use loop_protocol::delegation::{self, Authority, Left, Proposal};

    /// Tools whose `delegate` grants out of the parent's authority (as the
    /// runtime does) and whose child "uses" a fixed amount.
    struct Delegating {
        inner: SharedTools,
        parent: Authority,
        lefts: Vec<Left>,
        child_steps: u32,
    }

    impl Tools for Delegating {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![]
        }
        fn execute(&mut self, call: &ToolCall) -> Result<ToolOutcome, BoundaryError> {
            self.inner.execute(call)
        }
        fn workspace_root(&mut self) -> Result<String, BoundaryError> {
            self.inner.workspace_root()
        }
        fn delegate(
            &mut self,
            _step: u32,
            call: &ToolCall,
            left: &Left,
        ) -> Result<(ToolOutcome, Option<ChildRun>), BoundaryError> {
            self.lefts.push(left.clone());
            let p: Proposal = serde_json::from_value(call.args.clone()).unwrap();
            let refused = |why: String| ToolOutcome {
                observation: Observation::refused(&call.id, "delegate", "delegation", why),
                control: None,
            };
            let granted = match delegation::grant(&self.parent, left, &p) {
                Ok(a) => a,
                Err(no) => {
                    let why = no.iter().map(|r| r.to_string()).collect::<Vec<_>>();
                    return Ok((refused(why.join("; ")), None));
                }
            };
            let child = ChildRun {
                task_id: format!("child-{}", self.lefts.len()),
                authority: granted,
                outcome: "verified".into(),
                receipt_sha256: None,
                used: BudgetUse {
                    steps: self.child_steps,
                    tokens: 300,
                    usd: 0.25,
                    model_calls: self.child_steps,
                    ..BudgetUse::default()
                },
            };
            Ok((
                ToolOutcome {
                    observation: Observation::ok(&call.id, "delegate", "child verified", false),
                    control: None,
                },
                Some(child),
            ))
        }
    }

    fn delegate(steps: u32) -> ToolCall {
        call(
            "delegate",
            serde_json::json!({
                "instruction": "part of it",
                "criteria": [{"id": "p", "text": "p", "checks": [{"file_exists": "p"}]}],
                "paths": ["p"],
                "budget": {"max_steps": steps, "max_tokens": 1000, "budget_usd": 0.5, "timeout_secs": 60},
            }),
        )
    }

    fn allowing(max_steps: u32, children: u32) -> Contract {
        let mut c = contract(max_steps);
        c.limits.max_tokens = 10_000;
        c.limits.budget_usd = Some(1.0);
        c.limits.max_children = children;
        c.limits.max_depth = 1;
        c
    }

    fn run_delegating(c: Contract, script: Vec<Turn>, child_steps: u32) -> (Outcome_, Vec<Left>) {
        run_delegating_from(c, script, child_steps, Vec::new())
    }

    /// [`run_delegating`], resumed from `history` when it is not empty.
    fn run_delegating_from(
        c: Contract,
        script: Vec<Turn>,
        child_steps: u32,
        history: Vec<Event>,
    ) -> (Outcome_, Vec<Left>) {
        let clock = Rc::new(Cell::new(1_000));
        let mut model = FakeModel::new(script, &clock);
        let shared = Rc::new(std::cell::RefCell::new(BTreeMap::new()));
        let mut tools = Delegating {
            inner: SharedTools {
                inner: FakeTools::default(),
                shared: shared.clone(),
            },
            parent: Authority::of_contract(&c),
            lefts: Vec::new(),
            child_steps,
        };
        let mut verifier = FakeVerifier { files: shared };
        let mut ledger = MemLedger::default();
        let fake_clock = FakeClock(clock);
        let mut observer = NoObserver;
        let cancel = AtomicBool::new(false);
        let parts = Parts {
            model: &mut model,
            tools: &mut tools,
            verifier: &mut verifier,
            ledger: &mut ledger,
            clock: &fake_clock,
            observer: &mut observer,
            cancel: &cancel,
        };
        let director = Director::new("t-1", c, VerifyPolicy::OnFinish, parts).unwrap();
        let result = if history.is_empty() {
            director.run()
        } else {
            director.resume(&history, 0)
        }
        .unwrap();
        let lefts = tools.lefts;
        (
            Outcome_ {
                result,
                ledger: ledger.0,
                contexts: model.seen,
            },
            lefts,
        )
    }

    #[test]
    fn children_are_granted_out_of_what_is_left_and_their_spending_is_the_parents() {
        let script = vec![
            turn(vec![delegate(5)], 5),
            turn(vec![delegate(5)], 5),
            turn(vec![delegate(5)], 5),
            turn(vec![write("yes")], 5),
            turn(vec![finish()], 5),
        ];
        let (o, lefts) = run_delegating(allowing(20, 2), script, 4);
        assert!(o.result.outcome.is_verified(), "{:?}", o.result.record);
        // What each proposal was judged against: one turn, then one turn
        // more and the first child's four steps, spent.
        assert_eq!(
            lefts
                .iter()
                .map(|l| (l.steps, l.tokens, l.children))
                .collect::<Vec<_>>(),
            vec![(19, 9_995, 2), (14, 9_690, 1), (9, 9_385, 0)]
        );
        assert_eq!(lefts[1].usd, Some(0.75));
        let children: Vec<&ChildRun> = o
            .ledger
            .iter()
            .filter_map(|e| match e {
                Event::Delegated { child, .. } => Some(child),
                _ => None,
            })
            .collect();
        assert_eq!(children.len(), 2, "the third was refused: no child left");
        let refusal = o
            .ledger
            .iter()
            .find_map(|e| match e {
                Event::Observed { observation, .. }
                    if matches!(observation.status, ObservationStatus::Refused { .. }) =>
                {
                    Some(observation.content.clone())
                }
                _ => None,
            })
            .unwrap();
        assert!(refusal.contains("all the children it may (2"), "{refusal}");
        // Five turns and two children of four steps each; as recorded too.
        assert_eq!(o.result.used.steps, 13);
        assert_eq!(o.result.used.tokens, 25 + 600);
        assert!((o.result.used.usd - 0.5).abs() < 1e-9);
        let replayed = crate::state::used_by(&o.ledger).unwrap();
        assert_eq!((replayed.steps, replayed.tokens), (13, 625));
        assert_well_formed(&o.ledger);
    }

    #[test]
    fn a_child_recorded_before_a_stop_is_not_recorded_or_charged_again() {
        let script = || {
            vec![
                turn(vec![delegate(5)], 5),
                turn(vec![write("yes")], 5),
                turn(vec![finish()], 5),
            ]
        };
        let (clean, _) = run_delegating(allowing(20, 2), script(), 4);
        assert!(clean.result.outcome.is_verified());
        // Stopped right after the child's record, before the call's
        // observation: the call runs again and finds the same child.
        let at = clean
            .ledger
            .iter()
            .position(|e| matches!(e, Event::Delegated { .. }))
            .unwrap();
        let history = clean.ledger[..=at].to_vec();
        let (resumed, lefts) =
            run_delegating_from(allowing(20, 2), script()[1..].to_vec(), 4, history);
        assert!(resumed.result.outcome.is_verified());
        assert_eq!(lefts.len(), 1, "the call ran again once");
        let count = |l: &[Event]| {
            l.iter()
                .filter(|e| matches!(e, Event::Delegated { .. }))
                .count()
        };
        // (The resumed run's ledger holds only what it recorded.)
        assert_eq!(count(&resumed.ledger), 0, "not recorded again");
        assert!(
            resumed
                .ledger
                .iter()
                .any(|e| matches!(e, Event::Observed { observation, .. } if observation.tool == "delegate")),
            "the call's observation is recorded"
        );
        assert_eq!(resumed.result.used.steps, clean.result.used.steps);
        assert_eq!(resumed.result.used.tokens, clean.result.used.tokens);
    }

    #[test]
    fn a_childs_spending_can_bring_the_parent_to_its_limit() {
        let script = vec![
            turn(vec![delegate(5)], 5),
            turn(vec![write("yes")], 5),
            turn(vec![finish()], 5),
        ];
        let (o, _) = run_delegating(allowing(6, 1), script, 5);
        assert_eq!(
            o.result.outcome,
            Outcome::LimitReached(LimitKind::Steps),
            "{:?}",
            o.result.record
        );
        assert_eq!(o.result.used.steps, 6, "one turn and the child's five");
    }

    #[test]
    fn a_task_whose_contract_does_not_allow_it_cannot_delegate() {
        // Tools that run no child: the call is refused, nothing recorded.
        let o = run(
            contract(10),
            vec![
                turn(vec![delegate(2)], 5),
                turn(vec![write("yes")], 5),
                turn(vec![finish()], 5),
            ],
        );
        assert!(o.result.outcome.is_verified());
        assert!(
            !o.ledger
                .iter()
                .any(|e| matches!(e, Event::Delegated { .. }))
        );
        assert!(o.ledger.iter().any(|e| matches!(e,
            Event::Observed { observation, .. }
                if observation.status == ObservationStatus::Refused { rule: "delegation: off".into() })));
        // Tools that would run one, under a contract that allows none.
        let (o, _) = run_delegating(
            allowing(10, 0),
            vec![turn(vec![delegate(2)], 5), turn(vec![finish()], 5)],
            1,
        );
        assert!(
            !o.ledger
                .iter()
                .any(|e| matches!(e, Event::Delegated { .. }))
        );
        assert_eq!(o.result.used.steps, 2);
    }
}
