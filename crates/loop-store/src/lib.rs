//! # loop-store
//!
//! Durable task state behind one trait, [`Store`]: tasks, their ledger
//! entries (the hash chain, committed one transaction per entry before the
//! next step begins), claims (a compare-and-set, so a task never runs twice
//! at once), cancel requests, pending approvals and questions, receipts and
//! change sets.
//!
//! The embedded backend is SQLite at `PROJECT/.loop/loop.db`: WAL,
//! `synchronous=FULL`, a `busy_timeout`, and versioned migrations. Several
//! `loop` processes on one project (two runs, a `logs --follow`, a `cancel`)
//! share it; writers take the lock up front (`BEGIN IMMEDIATE`), so none of
//! them sees "database is locked" while another commits.
//!
//! The schema is written for a server backend too (PostgreSQL, a later
//! issue): plain tables, text and integer columns, JSON kept as text.

pub mod sqlite;

pub use sqlite::{SqliteStore, TokenRecord};

use serde::{Deserialize, Serialize};

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused.
    #[error("store {path}: {message}")]
    Db {
        /// The database.
        path: String,
        /// What failed.
        message: String,
    },
    /// No such task.
    #[error("no task `{0}` in this project (loop list shows them)")]
    NoSuchTask(String),
    /// An entry out of sequence (the chain would fork).
    #[error("task {task}: ledger entry {seq} does not follow entry {last} (the chain would fork)")]
    OutOfSequence {
        /// Task.
        task: String,
        /// The entry offered.
        seq: u64,
        /// The last one stored.
        last: i64,
    },
    /// The database was written by a newer build.
    #[error("store {path}: schema version {found} is newer than this build's {supported}")]
    TooNew {
        /// The database.
        path: String,
        /// Its version.
        found: i64,
        /// Ours.
        supported: i64,
    },
}

/// Who runs a task now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// A token unique to this run of the process.
    pub token: String,
    /// Its process id.
    pub pid: u32,
    /// The process's start time (clock ticks since boot), to tell a reused pid.
    pub start_time: u64,
    /// Last heartbeat, ms since the epoch.
    pub heartbeat_ms: u64,
}

impl Owner {
    /// This process, now.
    pub fn this_process(token: String, now_ms: u64) -> Owner {
        let pid = std::process::id();
        Owner {
            token,
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
            heartbeat_ms: now_ms,
        }
    }

    /// Is the owning process gone (exited, or its pid reused)?
    pub fn is_dead(&self) -> bool {
        match process_start_time(self.pid) {
            None => true,
            Some(t) => self.start_time != 0 && t != self.start_time,
        }
    }
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`), if it runs.
/// A zombie (exited, not yet reaped) counts as gone.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field 22 is fields[19].
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Task id.
    pub id: String,
    /// Its state (`pending`, `planning`, `acting`, `verifying`, `terminal`).
    pub state: String,
    /// The outcome kind once terminal.
    pub outcome: Option<String>,
    /// The outcome's reason.
    pub reason: Option<String>,
    /// Locked contract hash.
    pub contract_sha256: String,
    /// How to run it again: contract, model, flags, workspace (JSON).
    pub request: serde_json::Value,
    /// Created, ms since the epoch.
    pub created_ms: u64,
    /// Last change, ms since the epoch.
    pub updated_ms: u64,
    /// Who runs it now, if anyone.
    pub owner: Option<Owner>,
    /// A cancel was asked for.
    pub cancel_requested: bool,
    /// The receipt, once written.
    pub receipt: Option<String>,
    /// Ledger entries so far.
    pub entries: u64,
}

impl TaskRecord {
    /// Whether the task has ended.
    pub fn is_terminal(&self) -> bool {
        loop_protocol::TaskState::from_name(&self.state) == Some(loop_protocol::TaskState::Terminal)
    }

    /// How it ended, once it has.
    pub fn outcome_kind(&self) -> Option<loop_protocol::OutcomeKind> {
        self.outcome
            .as_deref()
            .and_then(loop_protocol::OutcomeKind::of_recorded)
    }
}

/// A ledger entry as the store keeps it (one type across the runtime).
pub use loop_protocol::LedgerEntry as StoredEntry;

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// It is ours now.
    Claimed,
    /// Someone alive holds it.
    Held(Owner),
    /// It has ended.
    Terminal,
}

/// A pending approval or question (issue 8 fills these in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// Task.
    pub task_id: String,
    /// Its id within the task.
    pub id: String,
    /// `approval` or `question`.
    pub kind: String,
    /// What is asked (JSON).
    pub payload: serde_json::Value,
    /// Pending, or how it was answered.
    pub status: ApprovalStatus,
    /// Asked, ms since the epoch.
    pub created_ms: u64,
    /// Decided, ms since the epoch.
    pub decided_ms: Option<u64>,
}

/// Where an approval or checkpoint request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Nobody has answered yet.
    Pending,
    /// Yes (go on).
    Approved,
    /// No (stop).
    Denied,
    /// Nobody answered in time: a no.
    Expired,
}

impl ApprovalStatus {
    /// Every status.
    pub const ALL: [ApprovalStatus; 4] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
    ];

    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
        }
    }

    /// The status stored as `name`.
    pub fn from_name(name: &str) -> Option<ApprovalStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The answer it records, once there is one.
    pub fn decision(self) -> Option<loop_protocol::ApprovalDecision> {
        use loop_protocol::ApprovalDecision as D;
        match self {
            ApprovalStatus::Pending => None,
            ApprovalStatus::Approved => Some(D::Approved),
            ApprovalStatus::Denied => Some(D::Denied),
            ApprovalStatus::Expired => Some(D::Expired),
        }
    }

    /// Answered yes or no by a person.
    pub fn answered(approve: bool) -> ApprovalStatus {
        if approve {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Denied
        }
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Durable task state.
pub trait Store: Send {
    /// Record a new task (state `pending`, unowned).
    fn create_task(
        &self,
        id: &str,
        contract_sha256: &str,
        request: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// One task.
    fn task(&self, id: &str) -> Result<TaskRecord, StoreError>;
    /// Every task, newest first.
    fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError>;
    /// Append the next ledger entry and, in the same transaction, the task's
    /// new state (when the entry changes it). Refuses an entry whose `seq`
    /// is not the next one.
    fn append(
        &self,
        task: &str,
        entry: &StoredEntry,
        state: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// Entries from `from_seq` on, in order.
    fn entries(&self, task: &str, from_seq: u64) -> Result<Vec<StoredEntry>, StoreError>;
    /// Take the task if nobody alive holds it (compare-and-set).
    fn claim(
        &self,
        task: &str,
        owner: &Owner,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Claim, StoreError>;
    /// Renew our claim; `false` when it is no longer ours.
    fn heartbeat(&self, task: &str, token: &str, now_ms: u64) -> Result<bool, StoreError>;
    /// Let go of the task.
    fn release(&self, task: &str, token: &str) -> Result<(), StoreError>;
    /// Ask a running task to stop; `false` when it has already ended.
    fn request_cancel(&self, task: &str, now_ms: u64) -> Result<bool, StoreError>;
    /// Record the end: outcome, reason, receipt path, and the change set.
    fn finish(
        &self,
        task: &str,
        outcome: &str,
        reason: &str,
        receipt: &str,
        change_set: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// Reopen a task that ended (a budget extension): it is no longer
    /// terminal until it ends again. `false` if it was not terminal.
    fn reopen(&self, task: &str, now_ms: u64) -> Result<bool, StoreError>;
    /// Record an approval or question.
    fn put_approval(&self, a: &Approval) -> Result<(), StoreError>;
    /// A task's approvals and questions.
    fn approvals(&self, task: &str) -> Result<Vec<Approval>, StoreError>;
}
