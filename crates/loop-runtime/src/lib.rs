//! # loop-runtime
//!
//! A task's whole life, behind one API that every front end (the `loop`
//! command, the HTTP API and its workers, MCP, triggers and eval) shares:
//! prepare the workspace, lock the contract, run the baseline, build the
//! Director with its tools, verifier, models, store and clock, run,
//! resume, extend or cancel it, assemble and sign the receipt, ship the
//! artifacts and the change set, close the task in the store; and, after,
//! apply, undo or discard what it changed.
//!
//! Everything a task records reaches the caller through one [`Observer`]:
//! the ledger's events as they are recorded, and lines meant for the
//! person running it. A front end only parses its arguments and presents.

mod contract;
mod error;
pub mod interrupt;
mod loopfile;
mod models;
mod ops;
mod places;
mod project;
mod runtime;
mod skills;
mod task;
pub mod views;

// The whole public surface: the runtime, what goes in and comes out of
// it, and the few operations that need no open project. The folders
// behind it (`task/`, `contract/`, `project/`, `ops/`, `loopfile/`) are
// the runtime's own; a front end names nothing inside them.
pub use contract::critic::judge_empty;
pub use contract::draft::ContractReview;
pub use contract::patterns::{PATTERNS, init as init_project};
pub use error::{Error, ErrorKind};
pub use loopfile::{Loopfile, schema as loopfile_schema};
pub use ops::changes::{ApplyConsent, Diff, DiffSource, ProducedFile, Settled, rotate_key};
pub use ops::ci_check::{CiCheck, CiCheckRequest, CiReceipt, ci_check};
pub use ops::eval::{CaseRun, CaseVerdict, EvalOptions, EvalReport, run as run_eval};
pub use ops::exec::{ExecFailureKind, ExecOptions, exec};
pub use ops::gc::{GoneProject, gc, gone_projects, task_branches};
pub use ops::github::{Ended as DraftEnded, GithubAsk, contract_digest};
pub use ops::memory::{
    add as add_note, approve as approve_note, forget as forget_note, list as list_notes,
    show as show_note,
};
pub use ops::query::{ApplyState, ChildView, Recorded, TaskStatus, TaskView, Used};
pub use ops::receipts::{
    ReceiptCheck, Replay, replay, verify as verify_receipt, verify_with as verify_receipt_with,
};
pub use ops::tokens::{Caller, NewToken, Scope};
pub use ops::triggers::{DraftAnswer, DraftAsked, Refusal, Taken};
pub use places::{Place, Places};
pub use project::environments::Standing as EnvironmentStanding;
pub use project::locate::{
    Liveness, is_running, liveness, new_task_id, open_store, set_store_url, store_url, task_dir,
};
pub use project::network::output_of;
pub use project::readiness::{cost, maker_endpoint};
pub use project::stacks::project_checks;
pub use project::workspaces::root as workspaces_root;
pub use runtime::Runtime;
pub use skills::{
    Bundle as SkillBundle, Installed as InstalledSkill, Listed as ListedSkill, Place as SkillPlace,
    SIGNATURE_FILE as SKILL_SIGNATURE_FILE, SignReport as SkillSignReport,
    Verified as VerifiedSkill, install as install_skill, list as list_skills,
    remove as remove_skill, resolve as resolve_skill, sign as sign_skill,
    trusted as trusted_skill_keys, user_dir as skills_user_dir, verify as verify_skill,
};
pub use task::asking::{OnPrompt, Prompter, Question};
pub use task::control::{Cancelled, answer, cancel, interrupted_tasks};
pub use task::intake::{
    Admitted, ContractInput, InputFile, LimitOverrides, MAX_INPUT_BYTES, MAX_INPUTS, TaskRequest,
    Via,
};
pub use task::request::{ContractSource, StoredRequest, TaskReport};
pub use task::run::resume_task;

/// What a front end sees of a task: every recorded event (through
/// [`loop_core::Observer`]), and lines for the person running it.
pub trait Observer: loop_core::Observer {
    /// A line for a person (a workspace made, the baseline, an apply's
    /// result). Machine-readable front ends may drop it.
    fn note(&mut self, line: &str);

    /// Ask the person a yes/no question; `None` when nobody here can answer.
    fn confirm(&mut self, _question: &str) -> Option<bool> {
        None
    }

    /// Show the drafted contract to the person and ask them to accept,
    /// edit or reject it (`Unanswered` when nobody here can be asked). An
    /// edit starts from `edit_from` when given (their last edit, which the
    /// critic rejected), else from the contract.
    fn review_contract(
        &mut self,
        _contract: &str,
        _edit_from: Option<&str>,
    ) -> crate::contract::draft::ContractReview {
        crate::contract::draft::ContractReview::Unanswered
    }

    /// Who answers `review_contract`, for the drafting record
    /// (`confirmed_by`).
    fn reviewer(&self) -> String {
        "terminal".into()
    }

    /// The calls made to a platform to show the drafted contract for its
    /// answer, for the drafting record.
    fn review_calls(&self) -> Vec<loop_protocol::evidence::ApiCall> {
        Vec::new()
    }

    /// Where a running task asks its person inline (approvals and
    /// checkpoints, with `OnPrompt::Ask`); `None` when nobody here can be
    /// asked (the request then waits for `loop approve`).
    fn prompter(&mut self) -> Option<Box<dyn Prompter>> {
        None
    }

    /// Where the model's streamed text and the verifier's check progress
    /// go while they happen (`None`: nobody is watching live).
    fn live_feed(&mut self) -> Option<loop_protocol::LiveFeed> {
        None
    }
}

/// An observer that keeps nothing (a library caller that only wants the
/// report).
#[derive(Debug, Default)]
pub struct Quiet;

impl loop_core::Observer for Quiet {
    fn on_event(&mut self, _event: &loop_protocol::Event) {}
}

impl Observer for Quiet {
    fn note(&mut self, _line: &str) {}
}
