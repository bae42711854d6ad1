//! # loop-store
//!
//! Durable task state behind one trait, [`Store`]: tasks, their ledger
//! entries (the hash chain, committed in transactions that group what
//! one step records: a tool call's intent is always committed before the
//! call runs), claims (a compare-and-set, so a task never runs twice
//! at once), cancel requests, pending approvals and questions, receipts and
//! change sets.
//!
//! The embedded backend is SQLite at `PROJECT/.loop/loop.db`: WAL,
//! `synchronous=FULL`, a `busy_timeout`, and versioned migrations. Several
//! `loop` processes on one project (two runs, a `logs --follow`, a `cancel`)
//! share it; writers take the lock up front (`BEGIN IMMEDIATE`), so none of
//! them sees "database is locked" while another commits.
//!
//! The server backend is PostgreSQL ([`PgStore`], `postgres://…`): the
//! same tables from the same migrations ([`MIGRATIONS`]: plain tables,
//! text and 64-bit integer columns, JSON kept as text), a pool of
//! connections, each ledger entry and its state change in one
//! transaction, claims as a compare-and-set on a lease that works across
//! machines, and `LISTEN/NOTIFY` so a cancel or an answer reaches the
//! process that runs the task at once. [`open_url`] opens either.

pub mod postgres;
pub mod queue;
pub mod sqlite;
mod tls;

pub use postgres::PgStore;
pub use queue::{DeadLetter, Delivery, Depth, QueueError, QueueOptions, RedisQueue};
pub use sqlite::{SqliteStore, answering};

use std::sync::Arc;
use std::time::Duration;

/// Migrations, in order, for every backend: the n-th brings a store to
/// schema version n. Written in the SQL both engines read the same way
/// (`BIGINT` is SQLite's INTEGER; PostgreSQL's INTEGER is 32 bits, too
/// small for milliseconds).
pub const MIGRATIONS: &[&str] = &[
    // 1: tasks, the ledger, approvals and questions, receipts and change sets.
    "CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        outcome TEXT,
        reason TEXT,
        contract_sha256 TEXT NOT NULL,
        request TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        owner TEXT,
        cancel_requested BIGINT NOT NULL DEFAULT 0
     );
     CREATE TABLE entries (
        task_id TEXT NOT NULL REFERENCES tasks(id),
        seq BIGINT NOT NULL,
        prev TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        at TEXT NOT NULL,
        hash TEXT NOT NULL,
        PRIMARY KEY (task_id, seq)
     );
     CREATE TABLE approvals (
        task_id TEXT NOT NULL REFERENCES tasks(id),
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        status TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        decided_ms BIGINT,
        PRIMARY KEY (task_id, id)
     );
     CREATE TABLE receipts (
        task_id TEXT PRIMARY KEY REFERENCES tasks(id),
        path TEXT NOT NULL,
        change_set TEXT NOT NULL,
        created_ms BIGINT NOT NULL
     );
     CREATE INDEX tasks_by_state ON tasks(state);",
    // 2: the API's bearer tokens, by the SHA-256 of the token (the token
    // itself is shown once and never stored).
    "CREATE TABLE tokens (
        sha256 TEXT PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        owner TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        revoked_ms BIGINT
     );",
    // 3: webhook deliveries taken, so none is taken twice.
    "CREATE TABLE deliveries (
        trigger TEXT NOT NULL,
        id TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        PRIMARY KEY (trigger, id)
     );",
    // 4: what a task's workspace needs to be rebuilt on another machine:
    // its files (how it was made, its baseline, its state now) and the
    // contents they name, kept once by SHA-256.
    "CREATE TABLE task_files (
        task_id TEXT NOT NULL,
        name TEXT NOT NULL,
        body TEXT NOT NULL,
        updated_ms BIGINT NOT NULL,
        PRIMARY KEY (task_id, name)
     );
     CREATE TABLE blobs (
        task_id TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        bytes BYTEA NOT NULL,
        PRIMARY KEY (task_id, sha256)
     );",
    // 5: contracts drafted over the API, waiting for their person's answer
    // (they outlive the server that drafted them), by project.
    "CREATE TABLE drafts (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        project TEXT NOT NULL,
        body TEXT NOT NULL,
        updated_ms BIGINT NOT NULL
     );
     CREATE INDEX drafts_by_project ON drafts(project);",
    // 6: tasks asked for over the API and answered, not yet prepared: kept
    // before the answer, so a server that dies before preparing them
    // leaves them to the next one (and their refusals to be read).
    "CREATE TABLE submissions (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        project TEXT NOT NULL,
        body TEXT NOT NULL,
        updated_ms BIGINT NOT NULL
     );
     CREATE INDEX submissions_by_project ON submissions(project);",
    // 7: who holds a kept record (the server process preparing a
    // submission), so one server takes it over from another only by a
    // conditional write, and the holder renews all of its records in one.
    "ALTER TABLE drafts ADD COLUMN holder TEXT NOT NULL DEFAULT '';
     ALTER TABLE submissions ADD COLUMN holder TEXT NOT NULL DEFAULT '';",
    // 8: memory: short notes for later tasks of a project (and owner),
    // each with where it came from; searched by each engine's own
    // full-text search (SQLite FTS5, PostgreSQL text search: see
    // MEMORY_INDEX in each backend).
    "CREATE TABLE notes (
        id TEXT PRIMARY KEY,
        project TEXT NOT NULL,
        owner TEXT NOT NULL,
        text TEXT NOT NULL,
        words TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL
     );
     CREATE INDEX notes_by_project ON notes(project);",
    // 9: the task that delegated a task (its parent), so a task's children
    // are found by an index, not by reading every task's request. Rows
    // written before it are filled in as each engine migrates.
    "ALTER TABLE tasks ADD COLUMN parent TEXT;
     CREATE INDEX tasks_by_parent ON tasks(parent);",
];

/// The parent a task's stored request names (`delegation.from.parent`):
/// what the `parent` column holds (a task id never holds a NUL, which no
/// PostgreSQL text can).
pub fn parent_of(request: &serde_json::Value) -> Option<&str> {
    request["delegation"]["from"]["parent"]
        .as_str()
        .filter(|p| !p.contains('\0'))
}

/// The words a note is found by: its text's and its `about`'s, each a
/// run of letters or digits, lower-cased (both engines index these, so
/// both find the same notes for the same words).
pub fn note_words(text: &str, about: &[String]) -> Vec<String> {
    std::iter::once(text)
        .chain(about.iter().map(String::as_str))
        .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
        .filter(|w| !w.is_empty() && w.chars().count() <= 64)
        .map(str::to_lowercase)
        .collect()
}

impl Note {
    /// A note from its stored columns, as both backends read them (`body`
    /// and `status` as text; a body that cannot be read is empty, a status
    /// no build writes is quarantined).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_columns(
        id: String,
        project: String,
        owner: String,
        text: String,
        (body, status): (&str, &str),
        created_ms: i64,
        updated_ms: i64,
    ) -> Note {
        let body: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        Note {
            id,
            project,
            owner,
            text,
            about: serde_json::from_value(body["about"].clone()).unwrap_or_default(),
            body,
            status: NoteStatus::parse(status).unwrap_or(NoteStatus::Quarantined),
            created_ms: created_ms.max(0) as u64,
            updated_ms: updated_ms.max(0) as u64,
        }
    }
}

/// What a note is good for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteStatus {
    /// Given to later tasks (its task ended verified, a person wrote it,
    /// or a person approved it).
    Usable,
    /// Kept, but given to no task until a person approves it (its task
    /// did not end verified).
    Quarantined,
    /// Forgotten: given to no task again.
    Forgotten,
}

impl NoteStatus {
    /// Its stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            NoteStatus::Usable => "usable",
            NoteStatus::Quarantined => "quarantined",
            NoteStatus::Forgotten => "forgotten",
        }
    }

    /// The status a stored name names.
    pub fn parse(s: &str) -> Option<NoteStatus> {
        [
            NoteStatus::Usable,
            NoteStatus::Quarantined,
            NoteStatus::Forgotten,
        ]
        .into_iter()
        .find(|n| n.as_str() == s)
    }
}

/// A memory note, as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Note {
    /// Its id (`n-…`).
    pub id: String,
    /// The project it is for (the project's id).
    pub project: String,
    /// Whose it is: an API owner, or empty for the project's (the command
    /// line's).
    pub owner: String,
    /// What it says.
    pub text: String,
    /// What it is about (paths, topics), searched with its text.
    pub about: Vec<String>,
    /// Where it came from and who answered for it (JSON: `source_task`,
    /// `receipt_sha256`, `outcome`, `by`, `approved_by`).
    pub body: serde_json::Value,
    /// What it is good for.
    pub status: NoteStatus,
    /// When it was made (Unix ms).
    pub created_ms: u64,
    /// When it last changed.
    pub updated_ms: u64,
}

/// How many notes a search considers before ranking them: those the
/// engine's own full-text ranking puts first.
pub(crate) const NOTE_CANDIDATES: usize = 256;

/// `found` ranked for `words` the same way whichever engine found them
/// (SQLite's `bm25` and PostgreSQL's `ts_rank` disagree): the most of the
/// distinct words first, then the shorter note (the more specific), then
/// the newer, then by id; at most `limit`.
pub(crate) fn rank_notes(mut found: Vec<Note>, words: &[String], limit: usize) -> Vec<Note> {
    let wanted: std::collections::BTreeSet<String> =
        words.iter().map(|w| w.to_lowercase()).collect();
    let score = |n: &Note| {
        let tokens: std::collections::BTreeSet<String> = std::iter::once(n.text.as_str())
            .chain(n.about.iter().map(String::as_str))
            .flat_map(|t| t.split(|c: char| !c.is_alphanumeric()))
            .filter(|t| !t.is_empty())
            .map(str::to_lowercase)
            .collect();
        let hits = wanted.iter().filter(|w| tokens.contains(*w)).count();
        (hits, tokens.len())
    };
    let mut scored: Vec<((usize, usize), Note)> = found.drain(..).map(|n| (score(&n), n)).collect();
    scored.sort_by(|(a, na), (b, nb)| {
        b.0.cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(nb.created_ms.cmp(&na.created_ms))
            .then(na.id.cmp(&nb.id))
    });
    scored.into_iter().take(limit).map(|(_, n)| n).collect()
}

/// The schema version this build writes.
pub fn schema_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// What the server keeps for a project beyond its tasks, each a JSON body
/// under an id and an owner ([`Store::put_kept`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Contracts drafted over the API, waiting for their person's answer.
    Drafts,
    /// Tasks asked for and answered, not yet prepared (or refused in their
    /// preparation).
    Submissions,
}

impl Kept {
    /// Its table.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Kept::Drafts => "drafts",
            Kept::Submissions => "submissions",
        }
    }

    /// The statement that keeps a record of this kind, its parameters id,
    /// owner, project, body, holder and time (the `n`th written `mark(n)`),
    /// replacing the one kept already: whoever holds it, or (`held`) only
    /// when the same holder or nobody does.
    pub(crate) fn upsert(self, held: bool, mark: fn(usize) -> String) -> String {
        let t = self.table();
        let marks: Vec<String> = (1..=6).map(mark).collect();
        format!(
            "INSERT INTO {t} (id, owner, project, body, holder, updated_ms)
             VALUES ({})
             ON CONFLICT (id) DO UPDATE SET body = excluded.body,
                holder = excluded.holder, updated_ms = excluded.updated_ms{}",
            marks.join(", "),
            if held {
                format!(" WHERE {t}.holder = excluded.holder OR {t}.holder = ''")
            } else {
                String::new()
            }
        )
    }
}

/// A draft or a submission, as stored ([`Store::put_kept`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftRecord {
    /// Its id.
    pub id: String,
    /// Whose it is.
    pub owner: String,
    /// Where it stands (JSON).
    pub body: String,
    /// When it was last written (or renewed by its holder).
    pub updated_ms: u64,
    /// Who holds it (a server process's token), empty for nobody.
    pub holder: String,
}

/// A bearer token of the API, as stored (its hash, never the token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenRecord {
    /// A short public id (for listing and revoking).
    pub id: String,
    /// Who the token acts for: tasks it creates belong to them.
    pub owner: String,
    /// `read`, `run` or `admin`.
    pub scope: String,
    /// When it was made.
    pub created_ms: u64,
    /// When it was revoked, if it was.
    pub revoked_ms: Option<u64>,
}

/// Open the store `url` names: `postgres://…` (or `postgresql://…`) is a
/// PostgreSQL server (one pool per URL in a process, shared by every
/// caller); `sqlite:PATH` or a plain path is an SQLite file.
pub fn open_url(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(PgStore::shared(url)?);
    }
    let path = url.strip_prefix("sqlite:").unwrap_or(url);
    if path.contains("://") {
        return Err(StoreError::Db {
            path: postgres::redact(url),
            message: "not a store this build knows: give postgres://USER@HOST/DB or a path to an SQLite file".into(),
        });
    }
    Ok(Arc::new(SqliteStore::open(std::path::Path::new(path))?))
}

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
    /// The database cannot be reached (down, restarting, the network
    /// gone), still after retrying: try again later.
    #[error("store {path} is unavailable: {message}")]
    Unavailable {
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
    /// The task's claim is no longer the writer's (its lease lapsed and
    /// another runtime took it): nothing was written.
    #[error(
        "task {task}: this runtime no longer holds its claim (another took it over); nothing more is recorded here"
    )]
    NotHolder {
        /// Task.
        task: String,
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

/// Who runs a task now: a lease. Its token is the owner's id; it expires
/// when no heartbeat renews it within the lease. On the machine (and in
/// the pid namespace) that holds it, a dead process frees it at once;
/// elsewhere only the expiry does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// A token unique to this run of the process.
    pub token: String,
    /// Where the process runs: the kernel's boot id and the pid
    /// namespace, so a pid is only looked up where it means something.
    /// Empty in records made before leases crossed machines (taken as
    /// this host).
    #[serde(default)]
    pub host: String,
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
            host: this_host().to_string(),
            pid,
            start_time: process_start_time(pid).unwrap_or(0),
            heartbeat_ms: now_ms,
        }
    }

    /// Is the owning process known to be gone (exited, or its pid
    /// reused)? Only answerable where the pid means something: on another
    /// machine or in another container the answer is no, and the lease's
    /// expiry decides.
    pub fn is_dead(&self) -> bool {
        if !self.is_local() {
            return false;
        }
        match process_start_time(self.pid) {
            None => true,
            Some(t) => self.start_time != 0 && t != self.start_time,
        }
    }
}

impl Owner {
    /// Whether the owner runs where this process does (same kernel boot,
    /// same pid namespace).
    pub fn is_local(&self) -> bool {
        self.host.is_empty() || self.host == this_host()
    }

    /// Whether the lease has lapsed at `now_ms`.
    pub fn expired(&self, lease_ms: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.heartbeat_ms) > lease_ms
    }
}

/// This process's host, as [`Owner::host`] records it: the kernel's boot
/// id and the inode of the pid namespace (two containers on one machine
/// share the boot id, not the namespace).
#[allow(clippy::disallowed_methods)] // the kernel's boot id (/proc), not a project file
pub fn this_host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|b| b.trim().to_string())
            .unwrap_or_default();
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ns = ns.trim_start_matches("pid:[").trim_end_matches(']');
        if boot.is_empty() || ns.is_empty() {
            // Where this cannot be told, no other process is taken for
            // one of ours: only leases free tasks.
            let mut r = [0u8; 16];
            let _ = urandom(&mut r);
            let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
            return format!("unknown-{hex}");
        }
        format!("{boot}/{ns}")
    })
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`), if it runs.
/// A zombie (exited, not yet reaped) counts as gone.
#[allow(clippy::disallowed_methods)] // /proc, not a project file
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
    /// Its state (`pending`, `planning`, `acting`, `verifying`, …,
    /// `ending`, `terminal`).
    pub state: StoredState,
    /// How it ended, once terminal.
    pub outcome: Option<loop_protocol::OutcomeName>,
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
        self.state == StoredState::Task(loop_protocol::TaskState::Terminal)
    }

    /// How it ended, once it has.
    pub fn outcome_kind(&self) -> Option<loop_protocol::OutcomeKind> {
        self.outcome.map(|o| o.kind)
    }

    /// Whether no runtime has taken it up yet: stored (submitted to a
    /// queue or a server), never held and nothing recorded of it.
    pub fn never_run(&self) -> bool {
        self.owner.is_none() && self.entries == 0
    }
}

/// A task's state as the store keeps it: the Director's, or `ending`
/// (terminal in its ledger, its receipt not yet kept: still resumable).
/// Written and read as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoredState {
    /// The Director's state.
    Task(loop_protocol::TaskState),
    /// Ended in the ledger; `terminal` once its receipt is kept.
    Ending,
}

impl StoredState {
    /// A task just made.
    pub const PENDING: StoredState = StoredState::Task(loop_protocol::TaskState::Pending);
    /// A task whose receipt is kept.
    pub const TERMINAL: StoredState = StoredState::Task(loop_protocol::TaskState::Terminal);

    /// Its name (`planning`, `ending`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StoredState::Task(t) => t.name(),
            StoredState::Ending => "ending",
        }
    }

    /// The state `name` names.
    pub fn from_name(name: &str) -> Option<StoredState> {
        match name {
            "ending" => Some(StoredState::Ending),
            other => loop_protocol::TaskState::from_name(other).map(StoredState::Task),
        }
    }

    /// The state a stored name names (an error naming it when no build
    /// wrote it).
    pub(crate) fn read(name: &str) -> Result<StoredState, UnknownName> {
        StoredState::from_name(name).ok_or_else(|| UnknownName(format!("state `{name}`")))
    }
}

impl From<loop_protocol::TaskState> for StoredState {
    fn from(s: loop_protocol::TaskState) -> Self {
        StoredState::Task(s)
    }
}

impl std::fmt::Display for StoredState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for StoredState {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for StoredState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for StoredState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StoredState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        StoredState::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("`{name}` is not a task state")))
    }
}

/// A state or outcome in a task's row that no build writes.
#[derive(Debug, thiserror::Error)]
#[error("the store holds an unknown {0}")]
pub struct UnknownName(String);

/// The outcome a stored name names (an error naming it when no build
/// wrote it).
pub(crate) fn read_outcome(
    name: Option<String>,
) -> Result<Option<loop_protocol::OutcomeName>, UnknownName> {
    name.map(|n| {
        loop_protocol::OutcomeName::parse(&n).ok_or_else(|| UnknownName(format!("outcome `{n}`")))
    })
    .transpose()
}

use loop_protocol::LedgerEntry;

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

/// Durable task state, shared by the threads of a process.
pub trait Store: Send + Sync {
    /// Which backend and where, with the server's version when there is
    /// one, and the schema version (for `loop doctor`). Asks the backend,
    /// so it fails when the store cannot be reached.
    fn describe(&self) -> Result<String, StoreError>;
    /// Block until something about `task` may have changed (a cancel
    /// asked, an approval answered, the task reopened), or `timeout`
    /// passes. A backend told of changes (PostgreSQL's NOTIFY) returns
    /// the moment one commits; one that is not (SQLite) returns after a
    /// short poll period, at most `timeout`, and the caller looks.
    /// `true` when the caller should look (word came, or the backend
    /// cannot tell); `false` when the wait ran out with no word.
    fn wait_for(&self, task: &str, timeout: Duration) -> bool;
    /// Whether [`Store::wait_for`] wakes on a change as it commits
    /// (PostgreSQL's notifications); without, it only sleeps, and a waiter
    /// that has other word to wait for waits for that instead.
    fn tells_of_changes(&self) -> bool {
        false
    }
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

    /// The tasks `parent` delegated to (its children, not theirs), in the
    /// order they were made.
    fn children(&self, parent: &str) -> Result<Vec<TaskRecord>, StoreError>;
    /// Append the next ledger entry and, in the same transaction, the task's
    /// new state (when the entry changes it). Refuses an entry whose `seq`
    /// is not the next one, but for the last entry offered again whole
    /// (the same hash): that is a retry whose answer was lost, and it
    /// stands.
    fn append(
        &self,
        task: &str,
        entry: &LedgerEntry,
        state: Option<StoredState>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.append_all(task, std::slice::from_ref(entry), state, None, now_ms)
    }
    /// Append consecutive entries (the next ones) and the task's new state
    /// in one transaction: one commit, one sync, for what a step records
    /// together. A batch whose last entry is already stored with the same
    /// hash is a retry and stands; anything else out of sequence is
    /// refused, and nothing of the batch is kept. With `holder`, only
    /// while the task's claim is that token's: a runtime whose lease was
    /// taken over records nothing more ([`StoreError::NotHolder`]).
    fn append_all(
        &self,
        task: &str,
        entries: &[LedgerEntry],
        state: Option<StoredState>,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.append_batch(task, entries, state, holder, now_ms, (true, None))
    }
    /// [`Store::append_all`], without waiting for the disk: the batch may
    /// be lost with the machine (never with the process) until the next
    /// durable commit, and is never reordered after it. For entries whose
    /// loss a resume makes up for (a step's observation, which the
    /// interrupted call's rules settle).
    fn append_all_lazy(
        &self,
        task: &str,
        entries: &[LedgerEntry],
        state: Option<StoredState>,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.append_batch(task, entries, state, holder, now_ms, (false, None))
    }
    /// [`Store::append_all`] (`durable`) or [`Store::append_all_lazy`],
    /// with, in the same transaction, a task file ([`Store::put_task_file`]:
    /// its `durable` is the batch's).
    #[allow(clippy::too_many_arguments)]
    fn append_batch(
        &self,
        task: &str,
        entries: &[LedgerEntry],
        state: Option<StoredState>,
        holder: Option<&str>,
        now_ms: u64,
        with: (bool, Option<&TaskFile<'_>>),
    ) -> Result<(), StoreError>;
    /// Entries from `from_seq` on, in order.
    fn entries(&self, task: &str, from_seq: u64) -> Result<Vec<LedgerEntry>, StoreError>;
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
    /// Record the end: outcome, reason, receipt path, and the change set;
    /// with `holder`, only while the task's claim is that token's.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        task: &str,
        outcome: loop_protocol::OutcomeName,
        reason: &str,
        receipt: &str,
        change_set: &serde_json::Value,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// Reopen a task that ended (a budget extension): it is no longer
    /// terminal until it ends again. `false` if it was not terminal.
    fn reopen(&self, task: &str, now_ms: u64) -> Result<bool, StoreError>;
    /// Record an approval or question.
    fn put_approval(&self, a: &Approval) -> Result<(), StoreError>;
    /// A task's approvals and questions.
    fn approvals(&self, task: &str) -> Result<Vec<Approval>, StoreError>;
    /// Decide a request: `a`'s status, payload and time are written only
    /// while the stored request is still pending (a compare-and-set, so an
    /// answer and an expiry never both stand). `false` when it was decided
    /// before: nothing is written.
    fn decide_approval(&self, a: &Approval) -> Result<bool, StoreError>;
    /// Keep a new token: its SHA-256, a public id, owner and scope.
    fn create_token(&self, sha256: &str, record: &TokenRecord) -> Result<(), StoreError>;
    /// The live token whose SHA-256 is `sha256`, if any.
    fn token(&self, sha256: &str) -> Result<Option<TokenRecord>, StoreError>;
    /// Every token, newest first.
    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
    /// Revoke the token with public id `id`; `false` when there is none live.
    fn revoke_token(&self, id: &str, now_ms: u64) -> Result<bool, StoreError>;
    /// Record delivery `id` of trigger `trigger` as taken; `false` when it
    /// was taken before (a replay).
    fn take_delivery(&self, trigger: &str, id: &str, now_ms: u64) -> Result<bool, StoreError>;
    /// Give delivery `id` of `trigger` back (nothing was started for it).
    fn forget_delivery(&self, trigger: &str, id: &str) -> Result<(), StoreError>;
    /// Drop what is kept of `task`'s workspace (its files and the contents
    /// they name, its carried-in contents too): once its change set is
    /// applied or discarded, nothing needs it. The bytes of contents freed.
    fn drop_task_contents(&self, task: &str) -> Result<u64, StoreError>;
    /// Keep `id` of `kind` (a draft, a submission): its owner, the project
    /// it is for, where it stands (JSON) and who holds it (empty: nobody).
    /// Written again, it is replaced.
    #[allow(clippy::too_many_arguments)]
    fn put_kept(
        &self,
        kind: Kept,
        id: &str,
        owner: &str,
        project: &str,
        body: &str,
        holder: &str,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// Keep `id` of `kind` as [`Store::put_kept`] does, held by `holder`
    /// (not empty), unless another holder has taken it since: a record
    /// held by someone else is left as it is, and the answer is `false`.
    /// New, held by `holder` already or by nobody, it is written. One
    /// write decides, so a holder whose hold lapsed (paused past it) never
    /// writes over the server that took the record over meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn put_kept_held(
        &self,
        kind: Kept,
        id: &str,
        owner: &str,
        project: &str,
        body: &str,
        holder: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError>;
    /// The records of `kind` kept for `project`, oldest first.
    fn kept(&self, kind: Kept, project: &str) -> Result<Vec<DraftRecord>, StoreError>;
    /// Record `id` of `kind`, if it is kept.
    fn kept_one(&self, kind: Kept, id: &str) -> Result<Option<DraftRecord>, StoreError>;
    /// Take record `id` of `kind` over from `from` (its holder, last
    /// written at `from_ms`, as read) for `to`, writing `body`: `false`
    /// when it is gone, was renewed since, or someone else took it first
    /// (one write decides between two takers).
    #[allow(clippy::too_many_arguments)]
    fn claim_kept(
        &self,
        kind: Kept,
        id: &str,
        from: (&str, u64),
        to: &str,
        body: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError>;
    /// Renew every record of `kind` that `holder` holds (its time is now):
    /// how many.
    fn renew_kept(&self, kind: Kept, holder: &str, now_ms: u64) -> Result<u64, StoreError>;
    /// Drop `project`'s records of `kind` last written before `before_ms`;
    /// how many.
    fn drop_kept(&self, kind: Kept, project: &str, before_ms: u64) -> Result<u64, StoreError>;
    /// Drop the records of `kind` whose id is a stored task's (submissions
    /// whose tasks were made); how many.
    fn forget_kept_stored(&self, kind: Kept) -> Result<u64, StoreError>;
    /// Drop record `id` of `kind`; whether it was there.
    fn forget_kept(&self, kind: Kept, id: &str) -> Result<bool, StoreError>;
    /// Keep memory note `n` (written again, it is replaced), and index it
    /// for [`Store::search_notes`].
    fn put_note(&self, n: &Note) -> Result<(), StoreError>;
    /// `project`'s notes, oldest first (every status).
    fn notes(&self, project: &str) -> Result<Vec<Note>, StoreError>;
    /// Note `id`, if any.
    fn note(&self, id: &str) -> Result<Option<Note>, StoreError>;
    /// `project`'s usable notes for `owner` (and the project's own, owner
    /// empty) that the engine's full-text search finds for any word of
    /// `words`, best first as [`rank_notes`] ranks them (the same on every
    /// engine), at most `limit`.
    fn search_notes(
        &self,
        project: &str,
        owner: &str,
        words: &[String],
        limit: usize,
    ) -> Result<Vec<Note>, StoreError>;
    /// Keep draft `id` (a contract drafted over the API): [`Store::put_kept`].
    fn put_draft(
        &self,
        id: &str,
        owner: &str,
        project: &str,
        body: &str,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.put_kept(Kept::Drafts, id, owner, project, body, "", now_ms)
    }
    /// The drafts kept for `project`, oldest first.
    fn drafts(&self, project: &str) -> Result<Vec<DraftRecord>, StoreError> {
        self.kept(Kept::Drafts, project)
    }
    /// Drop `project`'s drafts last written before `before_ms`; how many.
    fn drop_drafts(&self, project: &str, before_ms: u64) -> Result<u64, StoreError> {
        self.drop_kept(Kept::Drafts, project, before_ms)
    }
    /// Whether runtimes on other machines may share this store, so a task
    /// may move to a machine that does not hold its workspace (its files
    /// are then kept here: [`Store::put_task_file`]).
    fn shared(&self) -> bool {
        false
    }
    /// Keep a file of `task` (written again, it is replaced) and, in the
    /// same transaction, the contents it names; with
    /// [`TaskFile::keep_only`], the task's other contents are dropped. With
    /// `holder`, only while the task's claim is that token's
    /// ([`StoreError::NotHolder`]).
    fn put_task_file(
        &self,
        task: &str,
        file: &TaskFile<'_>,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError>;
    /// File `name` of `task`, if it was kept.
    fn task_file(&self, task: &str, name: &str) -> Result<Option<String>, StoreError>;
    /// The content of `task` whose SHA-256 is `sha256`, if it is kept (the
    /// caller checks the digest: the store is not trusted for it).
    fn blob(&self, task: &str, sha256: &str) -> Result<Option<Vec<u8>>, StoreError>;
}

/// A file the store keeps for a task ([`Store::put_task_file`]).
#[derive(Debug, Clone, Copy)]
pub struct TaskFile<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its text.
    pub body: &'a str,
    /// Contents it names, `(sha256, bytes)`, kept under the task (one kept
    /// already stays).
    pub blobs: &'a [(String, Vec<u8>)],
    /// When set, the task's contents other than these (and `blobs`) are
    /// dropped: what an older state named and this one does not.
    pub keep_only: Option<&'a [String]>,
    /// Whether the commit must be on disk before this returns. A write
    /// that is not may be lost with the machine (never with the process)
    /// until the next one that is: it is never reordered after it.
    pub durable: bool,
}

/// Random bytes from the kernel (for a host id that cannot be read).
#[allow(clippy::disallowed_methods)] // the kernel's random device
fn urandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

#[cfg(test)]
mod state_names {
    use super::*;

    #[test]
    fn a_stored_state_reads_back_as_written_and_an_unknown_one_is_refused() {
        let mut all: Vec<StoredState> = loop_protocol::TaskState::ALL
            .into_iter()
            .map(StoredState::Task)
            .collect();
        all.push(StoredState::Ending);
        for s in all {
            assert_eq!(StoredState::from_name(s.as_str()), Some(s));
            let json = serde_json::to_value(s).unwrap();
            assert_eq!(json, serde_json::json!(s.as_str()));
            assert_eq!(serde_json::from_value::<StoredState>(json).unwrap(), s);
        }
        assert_eq!(StoredState::from_name("ended"), None);
        assert!(StoredState::read("Terminal").is_err());
        assert!(read_outcome(Some("verified{steps}".into())).is_err());
        assert_eq!(read_outcome(None).unwrap(), None);
        assert!(StoredState::TERMINAL == "terminal" && StoredState::Ending == "ending");
    }
}
