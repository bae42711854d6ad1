//! Every JSON body a front end says, as types, in one place: the CLI's
//! `--json` lines (`…Line`) and the HTTP API's bodies, which MCP answers
//! too (`…Body`). The front ends fill them from the runtime's results and
//! print or send them. The fields are declared in the order they are said.
//! The CLI's shapes are held by `crates/loop-cli/tests/golden/
//! json-shapes.json`; the API's by the serve and MCP tests and the OpenAPI
//! document.
//!
//! The CLI names a task `task_id` and the API `id` (both as shipped), so
//! the few answers both give are two small types side by side here, filled
//! by one function.

use crate::ops::changes::{DiffSource, Settled};
use crate::ops::query::{TaskStatus, TaskView, Used};
use crate::task::control::Cancelled;
use loop_protocol::OutcomeRecord as Outcome;
use serde::Serialize;
use std::path::Path;

impl Serialize for Settled {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Settled {
    /// As it is said: `done`, `nothing_changed`, `done_but_differs`.
    pub fn name(self) -> &'static str {
        match self {
            Settled::Done => "done",
            Settled::NothingChanged => "nothing_changed",
            Settled::DoneButDiffers => "done_but_differs",
        }
    }
}

impl Serialize for DiffSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match self {
            DiffSource::Receipt(p) => m.serialize_entry("receipt", p)?,
            DiffSource::Workspace(p) => m.serialize_entry("workspace", p)?,
        }
        m.end()
    }
}

/// How a cancel came out, as said: `already_ended`, `ended_here` or
/// `stopped`, and the outcome's name (empty when none is recorded).
pub fn cancel_result(c: &Cancelled) -> (&'static str, String) {
    let named = |o: &Option<loop_protocol::OutcomeName>| o.map(|o| o.to_string());
    match c {
        Cancelled::AlreadyEnded(o) => ("already_ended", named(o).unwrap_or_default()),
        Cancelled::EndedHere(r) => ("ended_here", r.outcome.to_string()),
        Cancelled::Stopped(o, _) => ("stopped", named(o).unwrap_or_default()),
    }
}

// ---------------------------------------------------------------- the CLI

/// `loop run|demo --json`, last line: the receipt of the task.
#[derive(Debug, Serialize)]
pub struct ReceiptLine<'a> {
    /// Always `receipt`.
    pub kind: &'static str,
    /// The task.
    pub task_id: &'a str,
    /// The receipt's path.
    pub path: &'a Path,
    /// The task's workspace (`loop run`; the demo does not say it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<&'a Path>,
    /// How it ended.
    pub outcome: &'a Outcome,
    /// What was noted on the way (`loop run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<&'a [String]>,
}

/// `loop list --json`: one line per task.
#[derive(Debug, Serialize)]
pub struct ListLine<'a> {
    /// The task.
    #[serde(flatten)]
    pub task: &'a TaskView,
    /// What it used (none when its events cannot be read).
    pub used: Option<Used>,
    /// Its branch in the project (`loop/ID`), while there is one.
    pub branch: Option<String>,
}

/// `loop run --queue … --json`: the task went to a queue.
#[derive(Debug, Serialize)]
pub struct SubmittedLine<'a> {
    /// Always `submitted`.
    pub kind: &'static str,
    /// The task.
    pub task_id: &'a str,
    /// The queue's name.
    pub queue: &'a str,
}

/// `loop apply|undo|discard|keys rotate --json`: how the change settled.
#[derive(Debug, Serialize)]
pub struct SettledLine<'a> {
    /// `apply`, `recover`, `undo`, `forget`, `discard` or `rotate`.
    pub action: &'a str,
    /// The task (none for a key rotation).
    pub task_id: Option<&'a str>,
    /// How it settled.
    pub result: Settled,
    /// What was noted on the way.
    pub notes: &'a [String],
}

/// `loop cancel --json`.
#[derive(Debug, Serialize)]
pub struct CancelLine<'a> {
    /// The task.
    pub task_id: &'a str,
    /// See [`cancel_result`].
    pub result: &'static str,
    /// The outcome's name.
    pub outcome: String,
}

/// An approval or checkpoint as it was answered.
#[derive(Debug, Serialize)]
pub struct AnswerFields<'a> {
    /// The question.
    pub approval_id: &'a str,
    /// `approval` or `checkpoint`.
    pub kind: &'a str,
    /// How it stands now.
    pub status: String,
    /// What was asked about.
    pub detail: &'a serde_json::Value,
    /// The rule that asked.
    pub rule: &'a serde_json::Value,
    /// The person's message.
    pub message: Option<&'a str>,
}

impl<'a> AnswerFields<'a> {
    /// The fields of answered `a`, with the person's `message`.
    pub fn of(a: &'a loop_store::Approval, message: Option<&'a str>) -> Self {
        AnswerFields {
            approval_id: &a.id,
            kind: &a.kind,
            status: a.status.to_string(),
            detail: &a.payload["detail"],
            rule: &a.payload["rule"],
            message,
        }
    }
}

/// `loop approve|deny --json`.
#[derive(Debug, Serialize)]
pub struct AnswerLine<'a> {
    /// The task.
    pub task_id: &'a str,
    /// The answer.
    #[serde(flatten)]
    pub answer: AnswerFields<'a>,
}

/// `loop keys --json`: the public signing key.
#[derive(Debug, Serialize)]
pub struct KeyLine<'a> {
    /// Its id.
    pub keyid: &'a str,
    /// The raw key, hex.
    pub ed25519: String,
    /// The key as PEM.
    pub pem: String,
}

/// `loop manifest DIR --json`.
#[derive(Debug, Serialize)]
pub struct ManifestLine<'a> {
    /// The Merkle root.
    pub root: &'a str,
    /// Files.
    pub files: usize,
    /// Bytes.
    pub bytes: u64,
    /// The directory.
    pub dir: &'a Path,
}

/// `loop validate FILE --json` of a valid Loopfile.
#[derive(Debug, Serialize)]
pub struct LoopfileValidLine<'a> {
    /// The file.
    pub file: &'a Path,
    /// Always `loopfile`.
    pub kind: &'static str,
    /// Always true (an invalid one is an error).
    pub valid: bool,
    /// The sections it holds.
    pub sections: &'a [&'a str],
}

/// `loop validate FILE --json` of a valid contract.
#[derive(Debug, Serialize)]
pub struct ContractValidLine<'a> {
    /// The file.
    pub file: &'a Path,
    /// Always `contract`.
    pub kind: &'static str,
    /// Always true (an invalid one is an error).
    pub valid: bool,
    /// Criteria.
    pub criteria: usize,
    /// Checks, over every criterion.
    pub checks: usize,
    /// Artifacts.
    pub artifacts: usize,
    /// The contract's SHA-256.
    pub sha256: &'a str,
}

/// `loop completions|man --json`: the generated text under its name.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GeneratedLine {
    /// A completion script.
    Script(String),
    /// The man page.
    Man(String),
}

/// One criterion of `loop replay --json`.
#[derive(Debug, Serialize)]
pub struct ReplayedCriterion<'a> {
    /// The criterion.
    pub id: &'a str,
    /// It passed when recorded.
    pub recorded: bool,
    /// It passed now.
    pub replayed: bool,
}

/// `loop replay --json`.
#[derive(Debug, Serialize)]
pub struct ReplayLine<'a> {
    /// The task.
    pub task_id: &'a str,
    /// Each criterion, then and now.
    pub criteria: Vec<ReplayedCriterion<'a>>,
    /// The outcome the receipt records.
    pub recorded_outcome: &'a Outcome,
    /// The replayed evidence establishes acceptance.
    pub accepted: bool,
    /// Everything came out as recorded.
    pub reproduced: bool,
    /// The replayed verification.
    pub replayed: &'a loop_protocol::VerificationReport,
}

impl<'a> ReplayLine<'a> {
    /// The line of replay `r` of the receipt statement's task.
    pub fn of(r: &'a crate::ops::receipts::Replay) -> Self {
        let p = &r.statement.predicate;
        ReplayLine {
            task_id: &p.task_id,
            criteria: r
                .recorded
                .criteria
                .iter()
                .zip(&r.replayed.criteria)
                .map(|(was, now)| ReplayedCriterion {
                    id: &now.id,
                    recorded: was.passed,
                    replayed: now.passed,
                })
                .collect(),
            recorded_outcome: &p.outcome,
            accepted: r.accepted,
            reproduced: r.reproduced,
            replayed: &r.replayed,
        }
    }
}

/// `loop tokens create --json`: the token, shown this once.
#[derive(Debug, Serialize)]
pub struct TokenLine<'a> {
    /// The bearer token.
    pub token: &'a str,
    /// Its public id.
    pub id: &'a str,
    /// Whom it acts for.
    pub owner: &'a str,
    /// `read`, `run` or `admin`.
    pub scope: &'a str,
}

/// `loop tokens list --json`.
#[derive(Debug, Serialize)]
pub struct TokensLine<'a> {
    /// Every token the store keeps (never the token itself).
    pub tokens: &'a [loop_store::TokenRecord],
}

/// `loop tokens revoke --json`.
#[derive(Debug, Serialize)]
pub struct RevokedLine<'a> {
    /// The token's id.
    pub id: &'a str,
    /// It was live and is revoked now.
    pub revoked: bool,
}

/// `loop exec --json`: how the sandboxed command ran.
#[derive(Debug, Serialize)]
pub struct ExecLine<'a> {
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// It ran out of time.
    pub timed_out: bool,
    /// How long it ran.
    pub duration_ms: u64,
    /// Its output (an excerpt when long).
    pub stdout: String,
    /// Its errors (an excerpt when long).
    pub stderr: String,
    /// Bytes it wrote to stdout.
    pub stdout_bytes: u64,
    /// Bytes it wrote to stderr.
    pub stderr_bytes: u64,
    /// Either excerpt is cut.
    pub truncated: bool,
    /// What confined it.
    pub isolation: &'a loop_protocol::Isolation,
}

impl<'a> ExecLine<'a> {
    /// The line of `r`.
    pub fn of(r: &'a loop_sandbox::ExecResult) -> Self {
        ExecLine {
            exit_code: r.exit_code,
            signal: r.signal,
            timed_out: r.timed_out,
            duration_ms: u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
            stdout: r.stdout.excerpt(),
            stderr: r.stderr.excerpt(),
            stdout_bytes: r.stdout.total(),
            stderr_bytes: r.stderr.total(),
            truncated: r.stdout.truncated() || r.stderr.truncated(),
            isolation: &r.isolation,
        }
    }
}

/// The ledger part of `loop verify --json`.
#[derive(Debug, Serialize)]
pub struct LedgerChecked<'a> {
    /// Entries read.
    pub entries: u64,
    /// No problem found.
    pub intact: bool,
    /// What is wrong with it.
    pub problems: &'a [String],
}

/// The artifacts part of `loop verify --json`.
#[derive(Debug, Serialize)]
pub struct ArtifactsChecked<'a> {
    /// Artifacts checked.
    pub checked: usize,
    /// What is wrong with them.
    pub problems: &'a [String],
    /// Files beside them the receipt does not name.
    pub extra: &'a [String],
}

/// `loop verify RECEIPT --json`.
#[derive(Debug, Serialize)]
pub struct VerifyLine<'a> {
    /// What the line is, where lines of several kinds are said together
    /// (`loop demo --json`: `verification`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// The receipt.
    pub receipt: String,
    /// The verdict asked for holds.
    pub ok: bool,
    /// The receipt holds (signature, ledger, artifacts).
    pub intact: bool,
    /// And the task was verified.
    pub verified: bool,
    /// Only integrity was asked for.
    pub integrity_only: bool,
    /// The signature, said for a person.
    pub signature: String,
    /// What is wrong with the statement.
    pub statement_problems: &'a [String],
    /// The ledger.
    pub ledger: LedgerChecked<'a>,
    /// The artifacts.
    pub artifacts: ArtifactsChecked<'a>,
    /// How the task ended.
    pub outcome: Option<&'a Outcome>,
    /// Where the contract came from.
    pub contract_provenance: Option<loop_receipt::ContractProvenance>,
    /// Addenda beside the receipt that are not its.
    pub stray_addenda: &'a [String],
    /// The receipt tree: its children (absent when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<ChildrenChecked<'a>>,
}

/// A receipt's children, checked (see `loop_receipt::ChildCheck`).
#[derive(Debug, Serialize)]
pub struct ChildrenChecked<'a> {
    /// Each child the ledger records.
    pub checked: &'a [loop_receipt::ChildCheck],
    /// What does not hold, each naming its child.
    pub problems: &'a [String],
}

impl<'a> ChildrenChecked<'a> {
    /// `report`'s children, when it has any (or a problem with them).
    pub fn of(report: &'a loop_receipt::VerifyReport) -> Option<Self> {
        (!report.children.is_empty() || !report.tree_problems.is_empty()).then_some(
            ChildrenChecked {
                checked: &report.children,
                problems: &report.tree_problems,
            },
        )
    }
}

/// `loop diff ID --json`.
#[derive(Debug, Serialize)]
pub struct DiffLine<'a, S: Serialize> {
    /// The task.
    pub task_id: &'a str,
    /// Where the change set comes from.
    pub source: &'a DiffSource,
    /// The commit it is based on.
    pub base_commit: &'a Option<String>,
    /// Each file.
    pub files: &'a [loop_workspace::FileChange],
    /// Lines added and removed per file.
    pub stat: S,
    /// The patch's SHA-256.
    pub patch_sha256: &'a str,
    /// The patch (not with `--stat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<&'a str>,
}

/// The change set part of `loop show --json`.
#[derive(Debug, Serialize)]
pub struct ShownChangeSet<'a, S: Serialize> {
    /// Where it comes from.
    pub source: &'a DiffSource,
    /// Each file.
    pub files: &'a [loop_workspace::FileChange],
    /// Lines added and removed per file.
    pub stat: S,
}

/// The receipt part of `loop show --json`.
#[derive(Debug, Serialize)]
pub struct ShownReceipt<'a> {
    /// Its path.
    pub path: &'a Path,
    /// It holds.
    pub intact: bool,
    /// And the task was verified.
    pub verified: bool,
    /// Where the contract came from.
    pub contract_provenance: Option<loop_receipt::ContractProvenance>,
}

/// A part of `loop show --json` that could not be read: why.
#[derive(Debug, Serialize)]
pub struct Unreadable {
    /// What went wrong.
    pub error: String,
}

/// Either a part of `loop show --json`, or why it could not be read.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum OrError<T: Serialize> {
    /// The part.
    Read(T),
    /// Why not.
    Failed(Unreadable),
}

impl<T: Serialize> OrError<T> {
    /// The part could not be read, for `e`.
    pub fn failed(e: impl std::fmt::Display) -> Self {
        OrError::Failed(Unreadable {
            error: e.to_string(),
        })
    }
}

/// `loop show ID --json`.
#[derive(Debug, Serialize)]
pub struct ShowLine<'a, S: Serialize> {
    /// The task.
    pub task: &'a TaskStatus,
    /// Every event recorded.
    pub events: Vec<&'a loop_protocol::Event>,
    /// Its change set.
    pub change_set: OrError<ShownChangeSet<'a, S>>,
    /// Its receipt, once it has one.
    pub receipt: Option<OrError<ShownReceipt<'a>>>,
}

/// What went wrong, as a failing command says it on stderr with `--json`.
#[derive(Debug, Serialize)]
pub struct Failure<'a> {
    /// `usage`, `not_found`, `conflict`, `failed`, …
    pub kind: &'a str,
    /// What went wrong.
    pub message: &'a str,
    /// Where (`file:line:col`), when it is about a file.
    pub location: Option<&'a str>,
    /// What to do.
    pub hint: Option<&'a str>,
}

/// `{"error": …}`: a failing command's stderr with `--json`.
#[derive(Debug, Serialize)]
pub struct ErrorLine<'a> {
    /// What went wrong.
    pub error: Failure<'a>,
}

// ---------------------------------------------------------------- the API

/// `GET /healthz`.
#[derive(Debug, Serialize)]
pub struct HealthBody {
    /// Always true: the server answers.
    pub ok: bool,
}

/// `GET /readyz`: whether the server can take work.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReadyBody {
    /// Both below.
    pub ready: bool,
    /// The store answers.
    pub store: bool,
    /// A sandboxed command runs.
    pub sandbox: bool,
}

/// `POST /api/v1/tasks`: what was made of the request.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum CreatedBody {
    /// A task started (201).
    Started {
        /// The task.
        id: String,
        /// Its event stream.
        events: String,
    },
    /// A task being prepared (202).
    Preparing {
        /// The task it will be.
        id: String,
        /// Always `queued`.
        state: &'static str,
        /// Its status.
        status: String,
        /// Its event stream.
        events: String,
    },
    /// A contract being drafted, waiting for a person's answer (202).
    Drafting {
        /// The draft.
        draft: String,
        /// Its status.
        status: String,
    },
}

impl CreatedBody {
    /// A task started.
    pub fn started(id: &str) -> Self {
        CreatedBody::Started {
            id: id.to_string(),
            events: format!("/api/v1/tasks/{id}/stream"),
        }
    }

    /// A task being prepared.
    pub fn preparing(id: &str) -> Self {
        CreatedBody::Preparing {
            id: id.to_string(),
            state: "queued",
            status: format!("/api/v1/tasks/{id}"),
            events: format!("/api/v1/tasks/{id}/stream"),
        }
    }

    /// A contract being drafted.
    pub fn drafting(id: &str) -> Self {
        CreatedBody::Drafting {
            draft: id.to_string(),
            status: format!("/api/v1/drafts/{id}"),
        }
    }
}

/// `GET /api/v1/drafts/{id}`: the draft where it stands, and its notes.
#[derive(Debug, Serialize)]
pub struct DraftBody<'a, S: Serialize> {
    /// Where it stands.
    #[serde(flatten)]
    pub state: S,
    /// The draft.
    pub id: &'a str,
    /// What was noted on the way.
    pub notes: &'a [String],
}

/// `POST /api/v1/drafts/{id}/answer`.
#[derive(Debug, Serialize)]
pub struct AnsweredBody<'a> {
    /// The draft.
    pub id: &'a str,
    /// Always true.
    pub answered: bool,
}

/// A task as the API shows it: the server's own paths (the receipt's, a
/// scripted model's) relative to the project, its workspace not said.
#[derive(Debug, Serialize)]
pub struct TaskBody<T: Serialize> {
    /// The task.
    #[serde(flatten)]
    pub task: T,
    /// What it used (in a listing; the status says it itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used: Option<Used>,
    /// It waits on this server for one of its places to run.
    pub queued: bool,
    /// How it ended, in words (`limit reached (steps)`), once it has.
    pub outcome_words: Option<&'static str>,
}

impl TaskView {
    /// As said to a remote caller: the receipt's path and a scripted
    /// model's relative to `project` (`PROVIDER:PATH` keeps `PROVIDER:`;
    /// a bare path is made relative whole).
    pub fn for_remote(&self, project: &Path) -> TaskView {
        let mut t = self.clone();
        let relative = |text: &str| {
            Path::new(text)
                .strip_prefix(project)
                .ok()
                .map(|r| r.display().to_string())
        };
        if let Some(r) = t.receipt.as_deref().and_then(relative) {
            t.receipt = Some(r);
        }
        if let Some(model) = t.model.as_deref() {
            t.model = match model.split_once(':') {
                Some((head, path)) => relative(path).map(|r| format!("{head}:{r}")),
                None => relative(model),
            }
            .or(t.model.take());
        }
        t
    }
}

impl TaskStatus {
    /// As said to a remote caller: see [`TaskView::for_remote`]; where its
    /// workspace is on the server's disk is the server's business.
    pub fn for_remote(&self, project: &Path) -> TaskStatus {
        TaskStatus {
            task: self.task.for_remote(project),
            workspace: None,
            ..self.clone()
        }
    }
}

/// A task not stored yet, as the API shows it.
#[derive(Debug, Serialize)]
pub struct PrestartBody<'a> {
    /// The task it will be.
    pub id: &'a str,
    /// How its preparation goes.
    pub state: &'a str,
    /// It waits for a place (false once refused).
    pub queued: bool,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RefusedBody<'a>>,
}

/// Why a task was refused before it was stored.
#[derive(Debug, Serialize)]
pub struct RefusedBody<'a> {
    /// The HTTP status it would have had.
    pub status: u16,
    /// The error's kind.
    pub kind: &'a str,
    /// What was wrong.
    pub message: &'a str,
}

/// `GET /api/v1/tasks`: a page of tasks, newest first.
#[derive(Debug, Serialize)]
pub struct TasksBody {
    /// The tasks.
    pub tasks: Vec<TaskBody<TaskView>>,
    /// Where the next page starts (`before`).
    pub next: Option<String>,
}

/// One recorded event, as the API lists it.
#[derive(Debug, Serialize)]
pub struct RecordedBody<'a> {
    /// Its place in the ledger.
    pub seq: u64,
    /// When.
    pub at: &'a str,
    /// The event.
    pub event: &'a loop_protocol::Event,
}

/// `GET /api/v1/tasks/{id}/events`.
#[derive(Debug, Serialize)]
pub struct EventsBody<'a> {
    /// The events after `since`.
    pub events: Vec<RecordedBody<'a>>,
}

impl<'a> EventsBody<'a> {
    /// The body of `recorded`.
    pub fn of(recorded: &'a [crate::ops::query::Recorded]) -> Self {
        EventsBody {
            events: recorded.iter().map(RecordedBody::of).collect(),
        }
    }
}

impl<'a> RecordedBody<'a> {
    /// The body of `r`.
    pub fn of(r: &'a crate::ops::query::Recorded) -> Self {
        RecordedBody {
            seq: r.seq,
            at: &r.at,
            event: &r.event,
        }
    }
}

/// A task as the API shows it, stored or not yet.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum StandingBody<'a> {
    /// In the store.
    Stored(Box<TaskBody<TaskStatus>>),
    /// Not stored yet.
    Prestart(PrestartBody<'a>),
}

/// A body with why a wait for it ended (MCP's `wait`).
#[derive(Debug, Serialize)]
pub struct WaitedBody<T: Serialize> {
    /// The body.
    #[serde(flatten)]
    pub body: T,
    /// Why the wait ended.
    pub waited: &'static str,
}

/// `POST /api/v1/tasks/{id}/cancel`.
#[derive(Debug, Serialize)]
pub struct CancelBody<'a> {
    /// The task.
    pub id: &'a str,
    /// See [`cancel_result`].
    pub result: &'static str,
    /// The outcome's name.
    pub outcome: String,
}

/// `POST /api/v1/tasks/{id}/approve|deny`.
#[derive(Debug, Serialize)]
pub struct AnswerBody<'a> {
    /// The task.
    pub id: &'a str,
    /// The answer.
    #[serde(flatten)]
    pub answer: AnswerFields<'a>,
}

/// `POST /api/v1/tasks/{id}/resume`.
#[derive(Debug, Serialize)]
pub struct ResumedBody<'a> {
    /// The task.
    pub id: &'a str,
    /// Always true.
    pub resumed: bool,
}

/// The signature part of `GET /api/v1/tasks/{id}/verify`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum SignatureBody<'a> {
    /// It verifies, by this key.
    Valid {
        /// Always true.
        valid: bool,
        /// The key.
        keyid: &'a str,
    },
    /// It does not.
    Invalid {
        /// Always false.
        valid: bool,
        /// Why not.
        status: String,
    },
}

/// The ledger part of `GET /api/v1/tasks/{id}/verify`.
#[derive(Debug, Serialize)]
pub struct LedgerBody<'a> {
    /// Entries read.
    pub entries: u64,
    /// What is wrong with it.
    pub problems: &'a [String],
}

/// The artifacts part of `GET /api/v1/tasks/{id}/verify`.
#[derive(Debug, Serialize)]
pub struct ArtifactsBody<'a> {
    /// Artifacts checked.
    pub checked: usize,
    /// What is wrong with them.
    pub problems: &'a [String],
}

/// `GET /api/v1/tasks/{id}/verify`.
#[derive(Debug, Serialize)]
pub struct VerifyBody<'a> {
    /// The task.
    pub id: &'a str,
    /// The receipt holds.
    pub intact: bool,
    /// And the task was verified.
    pub verified: bool,
    /// The signature.
    pub signature: SignatureBody<'a>,
    /// What is wrong with the statement.
    pub statement_problems: &'a [String],
    /// The ledger.
    pub ledger: LedgerBody<'a>,
    /// The artifacts.
    pub artifacts: ArtifactsBody<'a>,
    /// How the task ended.
    pub outcome: Option<&'a Outcome>,
    /// The receipt tree: its children (absent when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<ChildrenChecked<'a>>,
}

impl<'a> VerifyBody<'a> {
    /// The body of task `id`'s receipt check `c`.
    pub fn of(id: &'a str, c: &'a crate::ops::receipts::ReceiptCheck) -> Self {
        let r = &c.report;
        VerifyBody {
            id,
            intact: c.intact,
            verified: c.verified,
            signature: match &r.signature {
                loop_receipt::SignatureStatus::Valid { keyid } => {
                    SignatureBody::Valid { valid: true, keyid }
                }
                other => SignatureBody::Invalid {
                    valid: false,
                    status: format!("{other:?}"),
                },
            },
            statement_problems: &r.statement_problems,
            ledger: LedgerBody {
                entries: r.ledger_entries,
                problems: &r.ledger_problems,
            },
            artifacts: ArtifactsBody {
                checked: r.artifacts_checked,
                problems: &r.artifact_problems,
            },
            outcome: r.statement.as_ref().map(|s| &s.predicate.outcome),
            children: ChildrenChecked::of(r),
        }
    }
}

/// `GET /api/v1/tasks/{id}/diff`.
#[derive(Debug, Serialize)]
pub struct DiffBody<'a> {
    /// The task.
    pub id: &'a str,
    /// Where the change set comes from (relative to the project; a
    /// workspace's under `<workspaces>`).
    pub source: DiffSource,
    /// The commit it is based on.
    pub base_commit: &'a Option<String>,
    /// Each file.
    pub files: &'a [loop_workspace::FileChange],
    /// The patch.
    pub patch: &'a str,
    /// The patch's SHA-256.
    pub patch_sha256: &'a str,
}

/// `POST /api/v1/tasks/{id}/apply|undo|discard`.
#[derive(Debug, Serialize)]
pub struct SettledBody<'a> {
    /// `apply`, `undo` or `discard`.
    pub action: &'a str,
    /// The task.
    pub id: &'a str,
    /// How it settled.
    pub result: Settled,
    /// What was noted on the way.
    pub notes: Vec<String>,
}

/// `POST /hooks/{name}`: a delivery taken (202) or ignored (200).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum HookBody<'a> {
    /// It started a task.
    Taken {
        /// The task.
        id: &'a str,
        /// The trigger.
        trigger: &'a str,
    },
    /// It asked for a task whose contract is drafted first: the draft,
    /// posted where it was asked for its answer.
    Drafting {
        /// The draft (`GET /api/v1/drafts/{id}`).
        draft: &'a str,
        /// The trigger.
        trigger: &'a str,
    },
    /// It asked for nothing this trigger does.
    Ignored {
        /// What it was.
        ignored: &'a str,
        /// The trigger.
        trigger: &'a str,
    },
    /// A person's answer (a chat's button), taken.
    Answered {
        /// What it did.
        answered: &'a str,
        /// The trigger.
        trigger: &'a str,
    },
}

/// An API error: `{"error": {"kind", "message"}}`.
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    /// What went wrong.
    pub error: ApiFailure<'a>,
}

/// What went wrong, as the API says it.
#[derive(Debug, Serialize)]
pub struct ApiFailure<'a> {
    /// A stable name: `not_found`, `conflict`, `bad_request`, …
    pub kind: &'a str,
    /// What went wrong.
    pub message: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(model: Option<&str>, receipt: Option<&str>) -> TaskView {
        TaskView {
            id: "t-1".into(),
            state: loop_store::StoredState::PENDING,
            outcome: None,
            reason: None,
            running: false,
            interrupted: false,
            owner_pid: None,
            cancel_requested: false,
            instruction: None,
            model: model.map(str::to_string),
            contract_sha256: String::new(),
            entries: 0,
            created: String::new(),
            updated: String::new(),
            receipt: receipt.map(str::to_string),
            owner: None,
            parent: None,
            liveness: crate::Liveness::Over,
            waiting: false,
        }
    }

    #[test]
    fn a_remote_caller_sees_paths_inside_the_project_relative_and_others_as_they_are() {
        let project = Path::new("/srv/p");
        let cases = [
            // (model, receipt) → as a remote caller sees them
            (
                (
                    Some("scripted:/srv/p/m.yaml"),
                    Some("/srv/p/.loop/receipts/t-1.json"),
                ),
                (Some("scripted:m.yaml"), Some(".loop/receipts/t-1.json")),
            ),
            // A bare path is made relative whole.
            ((Some("/srv/p/m.yaml"), None), (Some("m.yaml"), None)),
            // Outside the project, or no path at all: as it is.
            (
                (
                    Some("scripted:/elsewhere/m.yaml"),
                    Some("/elsewhere/r.json"),
                ),
                (
                    Some("scripted:/elsewhere/m.yaml"),
                    Some("/elsewhere/r.json"),
                ),
            ),
            ((Some("openai:gpt-x"), None), (Some("openai:gpt-x"), None)),
            ((None, None), (None, None)),
        ];
        for ((model, receipt), (want_model, want_receipt)) in cases {
            let seen = task(model, receipt).for_remote(project);
            assert_eq!(seen.model.as_deref(), want_model, "{model:?}");
            assert_eq!(seen.receipt.as_deref(), want_receipt, "{receipt:?}");
        }
    }
}
