//! The PostgreSQL backend: the same tables as SQLite from the same
//! migrations, for `loop serve` and `loop worker` processes on several
//! machines sharing one store.
//!
//! - **A pool.** Connections are kept and reused, at most
//!   `LOOP_STORE_POOL` (16) at once per process; a caller past that waits.
//! - **Recovery.** A connection that breaks (the server restarted, a
//!   backend was terminated, the network blinked) is dropped and the
//!   operation tried again on a fresh one for up to 30 s. Every operation
//!   is written so that running it twice after a commit whose answer was
//!   lost gives the same answer: an entry already stored with the same
//!   hash is the one offered; a claim already ours is ours; a delivery
//!   taken at the same instant is ours.
//! - **Claims across machines.** A claim is one `UPDATE … WHERE …
//!   RETURNING`: free, already ours, or a lease whose heartbeat is older
//!   than the lease. A dead owner frees the task at once only where its
//!   pid can be looked up (the same host and pid namespace).
//! - **Blocking.** The client blocks (on a runtime of its own): call it
//!   from ordinary threads, or `spawn_blocking` in async code, never on an
//!   async executor's thread.
//! - **Told, not polled.** A cancel, an approval or answer, and a reopen
//!   send `NOTIFY loop_task` with the task id in their transaction; one
//!   listening connection per process wakes [`Store::wait_for`] callers.

use crate::{
    Approval, ApprovalStatus, Claim, DraftRecord, Kept, LedgerEntry, MIGRATIONS, Owner, Store,
    StoreError, StoredState, TaskFile, TaskRecord, TokenRecord,
};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Row};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a broken connection is retried before the operation fails.
const RETRY_FOR: Duration = Duration::from_secs(30);
/// The channel changes are announced on.
const CHANNEL: &str = "loop_task";
/// The advisory lock migrations take (any constant of our own).
const MIGRATION_LOCK: i64 = 0x6c6f_6f70_0001;

/// A PostgreSQL store.
pub struct PgStore {
    /// The URL without its password.
    shown: String,
    config: postgres::Config,
    /// The TLS connector when the URL asks for an encrypted link.
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    pool: Mutex<Pool>,
    freed: Condvar,
    max: usize,
    changes: Arc<Changes>,
    listening: OnceLock<()>,
}

struct Pool {
    idle: Vec<Client>,
    out: usize,
}

/// What the listening connection has heard.
#[derive(Default)]
struct Changes {
    state: Mutex<Heard>,
    cv: Condvar,
}

#[derive(Default)]
struct Heard {
    /// Per task, how many notifications arrived.
    per_task: HashMap<String, u64>,
    /// Bumped when notifications may have been missed (the listener
    /// reconnected): every waiter looks.
    epoch: u64,
    /// A listener is connected.
    live: bool,
}

/// An operation's failure: the database's (maybe retried) or ours.
enum Fail {
    Pg(postgres::Error),
    Store(StoreError),
}

impl From<postgres::Error> for Fail {
    fn from(e: postgres::Error) -> Self {
        Fail::Pg(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

/// Whether a failure is the connection's, so a fresh one may succeed.
fn transient(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let c = code.code();
        return c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "40001" | "40P01");
    }
    // A certificate that does not verify will not on the next try either.
    if tls_refusal(e) {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether `e` is the TLS layer refusing the server (its certificate, its
/// name, the handshake), somewhere in its chain.
fn tls_refusal(e: &postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let inner_tls = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|i| i.is::<rustls::Error>());
        if s.is::<rustls::Error>() || inner_tls {
            return true;
        }
        source = s.source();
    }
    false
}

/// `e` and what caused it, down its chain (a TLS handshake's "error
/// performing TLS handshake" says nothing without the certificate's
/// problem under it).
fn with_causes(e: &postgres::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let said = s.to_string();
        if !out.contains(&said) {
            out.push_str(": ");
            out.push_str(&said);
        }
        source = s.source();
    }
    out
}

/// `url` without a password.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    match auth {
        Some(a) => {
            let user = a.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => format!("{scheme}://{host}"),
    }
    .split('?')
    .next()
    .unwrap_or_default()
    .to_string()
}

impl PgStore {
    /// Keep a record of `kind` ([`Kept::upsert`]): whether it was written.
    fn upsert_kept(
        &self,
        kind: Kept,
        held: bool,
        [id, owner, project, body, holder]: [&str; 5],
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let sql = kind.upsert(held, |n| format!("${n}"));
        self.run(|c| {
            let n = c.execute(&sql, &[&id, &owner, &project, &body, &holder, &ms(now_ms)])?;
            Ok(n == 1)
        })
    }

    /// The store at `url`, one per URL in this process (its pool and its
    /// listener are shared by every caller).
    pub fn shared(url: &str) -> Result<Arc<PgStore>, StoreError> {
        static OPEN: OnceLock<Mutex<HashMap<String, Arc<PgStore>>>> = OnceLock::new();
        let open = OPEN.get_or_init(Default::default);
        let mut map = open.lock().map_err(|_| StoreError::Db {
            path: redact(url),
            message: "the store table's lock was poisoned".into(),
        })?;
        if let Some(s) = map.get(url) {
            return Ok(s.clone());
        }
        let store = Arc::new(PgStore::connect(url)?);
        map.insert(url.to_string(), store.clone());
        Ok(store)
    }

    /// Connect to `url` (a pool of its own) and bring the schema up to
    /// date.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let shown = redact(url);
        // TLS settings first (ours: every encrypted link is verified).
        let tls =
            crate::tls::postgres(url).map_err(|crate::tls::TlsSetup(message)| StoreError::Db {
                path: shown.clone(),
                message,
            })?;
        let mut config: postgres::Config = tls.url.parse().map_err(|e| StoreError::Db {
            path: shown.clone(),
            message: format!("not a PostgreSQL URL: {e}"),
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.application_name("loop");
        // A connection whose peer went away (a failover, a cut network)
        // fails within seconds instead of hanging on a half-open socket.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(5));
        config.keepalives_interval(Duration::from_secs(2));
        config.keepalives_retries(3);
        config.tcp_user_timeout(Duration::from_secs(10));
        // The password is not written where the URL is (a Loopfile is
        // committed): PGPASSWORD gives it, as to psql.
        if config.get_password().is_none()
            && let Some(p) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty())
        {
            config.password(p.as_encoded_bytes());
        }
        let max = std::env::var("LOOP_STORE_POOL")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(16);
        let store = PgStore {
            shown,
            config,
            tls: tls.connector,
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                out: 0,
            }),
            freed: Condvar::new(),
            max,
            changes: Arc::default(),
            listening: OnceLock::new(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Db {
            path: self.shown.clone(),
            message: e.to_string(),
        }
    }

    fn pg_err(&self, e: &postgres::Error) -> StoreError {
        // The database's own words (its message and detail), not only
        // "db error".
        let message = match e.as_db_error() {
            Some(db) => match db.detail() {
                Some(d) => format!("{} ({d})", db.message()),
                None => db.message().to_string(),
            },
            None => with_causes(e),
        };
        self.err(message)
    }

    /// Take a connection from the pool (waiting while all are out), or
    /// make one.
    fn take(&self) -> Result<Client, Fail> {
        let mut pool = self
            .pool
            .lock()
            .map_err(|_| Fail::Store(self.err("the pool's lock was poisoned")))?;
        loop {
            if let Some(c) = pool.idle.pop() {
                if c.is_closed() {
                    continue;
                }
                pool.out += 1;
                return Ok(c);
            }
            if pool.out < self.max {
                pool.out += 1;
                drop(pool);
                return match connect(&self.config, self.tls.as_ref()) {
                    Ok(c) => Ok(c),
                    Err(e) => {
                        self.put_back(None);
                        Err(Fail::Pg(e))
                    }
                };
            }
            pool = self
                .freed
                .wait(pool)
                .map_err(|_| Fail::Store(self.err("the pool's lock was poisoned")))?;
        }
    }

    /// Give a connection back (or its place, when it broke).
    fn put_back(&self, client: Option<Client>) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.out = pool.out.saturating_sub(1);
            if let Some(c) = client.filter(|c| !c.is_closed()) {
                pool.idle.push(c);
            }
        }
        self.freed.notify_one();
    }

    /// Run `op` on a pooled connection; a broken connection is replaced
    /// and `op` run again, for up to [`RETRY_FOR`].
    fn run<T>(&self, mut op: impl FnMut(&mut Client) -> Result<T, Fail>) -> Result<T, StoreError> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            let outcome = match self.take() {
                Ok(mut c) => {
                    let r = op(&mut c);
                    let broken = matches!(&r, Err(Fail::Pg(e)) if transient(e));
                    self.put_back((!broken).then_some(c));
                    r
                }
                Err(e) => Err(e),
            };
            match outcome {
                Ok(v) => return Ok(v),
                Err(Fail::Store(e)) => return Err(e),
                Err(Fail::Pg(e)) if transient(&e) && start.elapsed() < RETRY_FOR => {
                    tracing::warn!(
                        "store {}: {e}; trying again on a new connection",
                        self.shown
                    );
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                // Still unreachable after retrying: the store is down, not
                // the request wrong.
                Err(Fail::Pg(e)) if transient(&e) => {
                    return Err(match self.pg_err(&e) {
                        StoreError::Db { path, message } => {
                            StoreError::Unavailable { path, message }
                        }
                        other => other,
                    });
                }
                Err(Fail::Pg(e)) => return Err(self.pg_err(&e)),
            }
        }
    }

    fn migrate(&self) -> Result<(), StoreError> {
        self.run(|c| {
            let mut tx = c.transaction()?;
            // One process migrates at a time; the others wait, then find
            // nothing left to do.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            tx.batch_execute("CREATE TABLE IF NOT EXISTS loop_schema (version BIGINT NOT NULL)")?;
            let version: i64 = match tx.query_opt("SELECT version FROM loop_schema", &[])? {
                Some(r) => r.try_get(0)?,
                None => {
                    tx.execute("INSERT INTO loop_schema (version) VALUES (0)", &[])?;
                    0
                }
            };
            if version > crate::schema_version() {
                return Err(Fail::Store(StoreError::TooNew {
                    path: self.shown.clone(),
                    found: version,
                    supported: crate::schema_version(),
                }));
            }
            for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                tx.batch_execute(m)?;
                // The engine's own index of the notes migration 8 makes.
                if i + 1 == 8 {
                    tx.batch_execute(MEMORY_INDEX)?;
                }
                if i + 1 == 9 {
                    fill_parents(&mut tx)?;
                }
                tx.execute("UPDATE loop_schema SET version = $1", &[&(i as i64 + 1)])?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// The schema version the database is at.
    pub fn stored_version(&self) -> Result<i64, StoreError> {
        self.run(|c| {
            Ok(c.query_one("SELECT version FROM loop_schema", &[])?
                .try_get(0)?)
        })
    }

    /// Whether the listening connection is up (it starts with the first
    /// [`Store::wait_for`]); until it is, waiters poll.
    pub fn listening(&self) -> bool {
        self.listen();
        self.changes.state.lock().is_ok_and(|h| h.live)
    }

    /// Start the listening connection once.
    fn listen(&self) {
        self.listening.get_or_init(|| {
            let changes = self.changes.clone();
            let config = self.config.clone();
            let tls = self.tls.clone();
            let shown = self.shown.clone();
            let spawned = std::thread::Builder::new()
                .name("loop-store-listen".into())
                .spawn(move || listener(&config, tls.as_ref(), &shown, &changes));
            if let Err(e) = spawned {
                tracing::warn!("store {}: cannot listen for changes: {e}", self.shown);
            }
        });
    }
}

/// A connection, encrypted and verified when `tls` is given.
fn connect(
    config: &postgres::Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
) -> Result<Client, postgres::Error> {
    match tls {
        Some(t) => config.connect(t.clone()),
        None => config.connect(NoTls),
    }
}

/// The listening connection's life: connect, `LISTEN`, count each task's
/// notifications; on a broken connection, tell every waiter to look
/// (something may have been missed) and connect again.
fn listener(
    config: &postgres::Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
    shown: &str,
    changes: &Changes,
) {
    let mark = |live: bool| {
        if let Ok(mut h) = changes.state.lock() {
            h.live = live;
            h.epoch += 1;
        }
        changes.cv.notify_all();
    };
    loop {
        let mut client = match connect(config, tls) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("store {shown}: listener cannot connect: {e}");
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")) {
            tracing::debug!("store {shown}: LISTEN failed: {e}");
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        mark(true);
        {
            let mut notes = client.notifications();
            let mut heard = notes.blocking_iter();
            while let Ok(Some(n)) = heard.next() {
                if let Ok(mut h) = changes.state.lock() {
                    if h.per_task.len() > 10_000 {
                        h.per_task.clear();
                        h.epoch += 1;
                    }
                    *h.per_task.entry(n.payload().to_string()).or_default() += 1;
                }
                changes.cv.notify_all();
            }
        }
        mark(false);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A task row's `column` holds a name no build writes.
fn unknown(column: &str, e: crate::UnknownName) -> Fail {
    Fail::Store(StoreError::Db {
        path: "the tasks table".into(),
        message: format!("column {column}: {e}"),
    })
}

/// A row of the task query as a record.
fn task_from(r: &Row) -> Result<TaskRecord, Fail> {
    let request: String = r.try_get("request")?;
    let owner: Option<String> = r.try_get("owner")?;
    Ok(TaskRecord {
        id: r.try_get("id")?,
        state: StoredState::read(r.try_get("state")?).map_err(|e| unknown("state", e))?,
        outcome: crate::read_outcome(r.try_get("outcome")?).map_err(|e| unknown("outcome", e))?,
        reason: r.try_get("reason")?,
        contract_sha256: r.try_get("contract_sha256")?,
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        created_ms: r.try_get::<_, i64>("created_ms")? as u64,
        updated_ms: r.try_get::<_, i64>("updated_ms")? as u64,
        owner: owner.and_then(|o| serde_json::from_str(&o).ok()),
        cancel_requested: r.try_get::<_, i64>("cancel_requested")? != 0,
        receipt: r.try_get("receipt")?,
        entries: r.try_get::<_, i64>("entries")? as u64,
    })
}

fn token_from(r: &Row) -> Result<TokenRecord, postgres::Error> {
    Ok(TokenRecord {
        id: r.try_get(0)?,
        owner: r.try_get(1)?,
        scope: r.try_get(2)?,
        created_ms: r.try_get::<_, i64>(3)? as u64,
        revoked_ms: r.try_get::<_, Option<i64>>(4)?.map(|v| v as u64),
    })
}

const TASK_SELECT: &str = "SELECT t.id, t.state, t.outcome, t.reason, t.contract_sha256, t.request,
    t.created_ms, t.updated_ms, t.owner, t.cancel_requested, r.path AS receipt,
    (SELECT COUNT(*) FROM entries e WHERE e.task_id = t.id) AS entries
    FROM tasks t LEFT JOIN receipts r ON r.task_id = t.id";

fn notify(tx: &mut postgres::Transaction<'_>, task: &str) -> Result<(), postgres::Error> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &task])?;
    Ok(())
}

/// Write `file` of `task` (its contents, the ones it drops, its body) in `tx`.
fn file_in(
    tx: &mut postgres::Transaction<'_>,
    task: &str,
    file: &TaskFile<'_>,
    now_ms: u64,
) -> Result<(), postgres::Error> {
    for (sha, bytes) in file.blobs {
        tx.execute(
            "INSERT INTO blobs (task_id, sha256, bytes) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&task, sha, bytes],
        )?;
    }
    if let Some(keep) = file.keep_only {
        let keep: Vec<&str> = keep
            .iter()
            .chain(file.blobs.iter().map(|(s, _)| s))
            .map(String::as_str)
            .collect();
        tx.execute(
            "DELETE FROM blobs WHERE task_id = $1 AND NOT (sha256 = ANY($2))",
            &[&task, &keep],
        )?;
    }
    tx.execute(
        "INSERT INTO task_files (task_id, name, body, updated_ms) VALUES ($1, $2, $3, $4)
         ON CONFLICT (task_id, name) DO UPDATE SET body = excluded.body, updated_ms = excluded.updated_ms",
        &[&task, &file.name, &file.body, &ms(now_ms)],
    )?;
    Ok(())
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store for PgStore {
    fn describe(&self) -> Result<String, StoreError> {
        let server: String =
            self.run(|c| Ok(c.query_one("SHOW server_version", &[])?.try_get(0)?))?;
        // As the server sees this connection.
        let link: Option<String> = self.run(|c| {
            Ok(c.query_opt(
                "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl",
                &[],
            )?
            .map(|r| r.try_get(0))
            .transpose()?)
        })?;
        let link = match link {
            Some(v) => format!("encrypted ({v}, certificate verified)"),
            None => "unencrypted".to_string(),
        };
        let stored = self.stored_version()?;
        Ok(format!(
            "postgres {} (PostgreSQL {server}, schema {stored}, pool of {}, {link})",
            self.shown, self.max
        ))
    }

    fn tells_of_changes(&self) -> bool {
        true
    }

    fn wait_for(&self, task: &str, timeout: Duration) -> bool {
        self.listen();
        let Ok(h) = self.changes.state.lock() else {
            std::thread::sleep(timeout.min(Duration::from_millis(100)));
            return true;
        };
        if !h.live {
            // No listener yet (or it is reconnecting): poll meanwhile.
            drop(h);
            std::thread::sleep(timeout.min(Duration::from_millis(100)));
            return true;
        }
        let seen = (h.per_task.get(task).copied(), h.epoch);
        match self.changes.cv.wait_timeout_while(h, timeout, |h| {
            (h.per_task.get(task).copied(), h.epoch) == seen
        }) {
            Ok((_, waited)) => !waited.timed_out(),
            Err(_) => true,
        }
    }

    fn create_task(
        &self,
        id: &str,
        contract_sha256: &str,
        request: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let text = request.to_string();
        let parent = crate::parent_of(request);
        self.run(|c| {
            let n = c.execute(
                "INSERT INTO tasks (id, state, contract_sha256, request, created_ms, updated_ms, parent)
                 VALUES ($1, 'pending', $2, $3, $4, $4, $5) ON CONFLICT (id) DO NOTHING",
                &[&id, &contract_sha256, &text, &ms(now_ms), &parent],
            )?;
            if n == 1 {
                return Ok(());
            }
            // Ours, committed before a broken connection lost the answer?
            let same = c
                .query_opt(
                    "SELECT 1 FROM tasks WHERE id = $1 AND contract_sha256 = $2 AND request = $3 AND created_ms = $4",
                    &[&id, &contract_sha256, &text, &ms(now_ms)],
                )?
                .is_some();
            if same {
                Ok(())
            } else {
                Err(Fail::Store(self.err(format!("a task `{id}` exists already"))))
            }
        })
    }

    fn task(&self, id: &str) -> Result<TaskRecord, StoreError> {
        self.run(|c| {
            let row = c.query_opt(&format!("{TASK_SELECT} WHERE t.id = $1"), &[&id])?;
            match row {
                Some(r) => task_from(&r),
                None => Err(Fail::Store(StoreError::NoSuchTask(id.to_string()))),
            }
        })
    }

    fn children(&self, parent: &str) -> Result<Vec<TaskRecord>, StoreError> {
        self.run(|c| {
            let rows = c.query(
                &format!("{TASK_SELECT} WHERE t.parent = $1 ORDER BY t.created_ms, t.id"),
                &[&parent],
            )?;
            rows.iter().map(task_from).collect::<Result<Vec<_>, _>>()
        })
    }

    fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.run(|c| {
            let rows = c.query(
                &format!("{TASK_SELECT} ORDER BY t.created_ms DESC, t.id DESC"),
                &[],
            )?;
            rows.iter().map(task_from).collect::<Result<Vec<_>, _>>()
        })
    }

    /// [`Store::append_all`]; without `durable`, the commit is not waited
    /// for (`synchronous_commit = off` for it: the write-ahead log is
    /// flushed in order, so a later durable commit takes it to the disk).
    fn append_batch(
        &self,
        task: &str,
        entries: &[LedgerEntry],
        state: Option<StoredState>,
        holder: Option<&str>,
        now_ms: u64,
        (durable, file): (bool, Option<&TaskFile<'_>>),
    ) -> Result<(), StoreError> {
        let (Some(first), Some(final_entry)) = (entries.first(), entries.last()) else {
            return Ok(());
        };
        let payloads: Vec<String> = entries.iter().map(|e| e.payload.to_string()).collect();
        let (first_seq, final_seq) = (ms(first.seq), ms(final_entry.seq));
        self.run(|c| {
            let mut tx = c.transaction()?;
            if !durable {
                tx.batch_execute("SET LOCAL synchronous_commit = off")?;
            }
            // The task's row is the chain's lock: appends to one task
            // take turns.
            let Some(row) = tx.query_opt(
                "SELECT owner::jsonb ->> 'token' FROM tasks WHERE id = $1 FOR UPDATE",
                &[&task],
            )?
            else {
                return Err(Fail::Store(StoreError::NoSuchTask(task.to_string())));
            };
            let token: Option<String> = row.try_get(0)?;
            if let Some(h) = holder
                && token.as_deref() != Some(h)
            {
                return Err(Fail::Store(StoreError::NotHolder {
                    task: task.to_string(),
                }));
            }
            let last: i64 = tx
                .query_one(
                    "SELECT COALESCE(MAX(seq), -1) FROM entries WHERE task_id = $1",
                    &[&task],
                )?
                .try_get(0)?;
            if first_seq != last + 1 {
                // The same batch, committed before a broken connection lost
                // the answer, is the one offered.
                let stored = tx.query(
                    "SELECT hash FROM entries WHERE task_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq",
                    &[&task, &first_seq, &final_seq],
                )?;
                let mut same = stored.len() == entries.len();
                for (r, e) in stored.iter().zip(entries) {
                    same &= r.try_get::<_, String>(0)? == e.hash;
                }
                if final_seq == last && same {
                    return Ok(());
                }
                return Err(Fail::Store(StoreError::OutOfSequence {
                    task: task.to_string(),
                    seq: first.seq,
                    last,
                }));
            }
            let insert = tx.prepare(
                "INSERT INTO entries (task_id, seq, prev, kind, payload, at, hash)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )?;
            for (i, (entry, payload)) in entries.iter().zip(&payloads).enumerate() {
                if entry.seq != first.seq + i as u64 {
                    return Err(Fail::Store(StoreError::OutOfSequence {
                        task: task.to_string(),
                        seq: entry.seq,
                        last: (first.seq + i as u64) as i64 - 1,
                    }));
                }
                tx.execute(
                    &insert,
                    &[
                        &task,
                        &ms(entry.seq),
                        &entry.prev,
                        &entry.kind,
                        payload,
                        &entry.at,
                        &entry.hash,
                    ],
                )?;
            }
            match state {
                Some(s) => tx.execute(
                    "UPDATE tasks SET state = $2, updated_ms = $3 WHERE id = $1",
                    &[&task, &s.as_str(), &ms(now_ms)],
                )?,
                None => tx.execute(
                    "UPDATE tasks SET updated_ms = $2 WHERE id = $1",
                    &[&task, &ms(now_ms)],
                )?,
            };
            if let Some(f) = file {
                file_in(&mut tx, task, f, now_ms)?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn entries(&self, task: &str, from_seq: u64) -> Result<Vec<LedgerEntry>, StoreError> {
        self.run(|c| {
            let rows = c.query(
                "SELECT seq, prev, kind, payload, at, hash FROM entries
                 WHERE task_id = $1 AND seq >= $2 ORDER BY seq",
                &[&task, &ms(from_seq)],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let payload: String = r.try_get(3)?;
                out.push(LedgerEntry {
                    seq: r.try_get::<_, i64>(0)? as u64,
                    prev: r.try_get(1)?,
                    kind: r.try_get(2)?,
                    payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                    at: r.try_get(4)?,
                    hash: r.try_get(5)?,
                });
            }
            Ok(out)
        })
    }

    fn claim(
        &self,
        task: &str,
        owner: &Owner,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Claim, StoreError> {
        let json = serde_json::to_string(owner).map_err(|e| self.err(e))?;
        // Free, already ours, its lease lapsed, or (`$5`) still the dead
        // owner we looked at, told by its token (a run's own): one
        // statement, so two claimants never both win. Not by the whole
        // record: a heartbeat the dead owner sent just before it died may
        // land after we looked, and it is no less dead for that.
        // Lease times are the database's clock, never a claimant's: two
        // machines whose clocks disagree still agree on who holds a task.
        let cas = "UPDATE tasks SET owner = jsonb_set($2::text::jsonb, '{heartbeat_ms}', to_jsonb((extract(epoch from clock_timestamp()) * 1000)::bigint))::text,
                updated_ms = $3
             WHERE id = $1 AND state <> 'terminal' AND (
                owner IS NULL
                OR (owner::jsonb ->> 'token') = $4
                OR (owner::jsonb ->> 'heartbeat_ms')::bigint + $6 < (extract(epoch from clock_timestamp()) * 1000)::bigint
                OR (owner::jsonb ->> 'token') = $5)
             RETURNING id";
        self.run(|c| {
            let none: Option<String> = None;
            if c.query_opt(
                cas,
                &[
                    &task,
                    &json,
                    &ms(now_ms),
                    &owner.token,
                    &none,
                    &ms(lease_ms),
                ],
            )?
            .is_some()
            {
                return Ok(Claim::Claimed);
            }
            let Some(row) =
                c.query_opt("SELECT state, owner FROM tasks WHERE id = $1", &[&task])?
            else {
                return Err(Fail::Store(StoreError::NoSuchTask(task.to_string())));
            };
            let state: String = row.try_get(0)?;
            if state == loop_protocol::TaskState::Terminal.name() {
                return Ok(Claim::Terminal);
            }
            let text: Option<String> = row.try_get(1)?;
            let current = text
                .as_deref()
                .and_then(|o| serde_json::from_str::<Owner>(o).ok());
            match current {
                Some(cur) if cur.is_dead() => {
                    let taken = c
                        .query_opt(
                            cas,
                            &[
                                &task,
                                &json,
                                &ms(now_ms),
                                &owner.token,
                                &Some(cur.token.clone()),
                                &ms(lease_ms),
                            ],
                        )?
                        .is_some();
                    if taken {
                        Ok(Claim::Claimed)
                    } else {
                        // Someone else took it in between: theirs.
                        let now: Option<String> = c
                            .query_opt("SELECT owner FROM tasks WHERE id = $1", &[&task])?
                            .map(|r| r.try_get(0))
                            .transpose()?
                            .flatten();
                        match now.and_then(|o| serde_json::from_str::<Owner>(&o).ok()) {
                            Some(o) => Ok(Claim::Held(o)),
                            None => Ok(Claim::Held(cur)),
                        }
                    }
                }
                Some(cur) => Ok(Claim::Held(cur)),
                // An owner that is not one (a damaged record): the claim
                // above would have taken a NULL one; refuse to guess.
                None => Err(Fail::Store(
                    self.err(format!("task {task}: its owner record cannot be read")),
                )),
            }
        })
    }

    fn heartbeat(&self, task: &str, token: &str, _now_ms: u64) -> Result<bool, StoreError> {
        self.run(|c| {
            let n = c.execute(
                "UPDATE tasks SET owner = jsonb_set(owner::jsonb, '{heartbeat_ms}',
                    to_jsonb((extract(epoch from clock_timestamp()) * 1000)::bigint))::text
                 WHERE id = $1 AND (owner::jsonb ->> 'token') = $2",
                &[&task, &token],
            )?;
            Ok(n > 0)
        })
    }

    fn release(&self, task: &str, token: &str) -> Result<(), StoreError> {
        self.run(|c| {
            c.execute(
                "UPDATE tasks SET owner = NULL WHERE id = $1 AND (owner::jsonb ->> 'token') = $2",
                &[&task, &token],
            )?;
            Ok(())
        })
    }

    fn request_cancel(&self, task: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.run(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE tasks SET cancel_requested = 1, updated_ms = $2
                 WHERE id = $1 AND state <> 'terminal'",
                &[&task, &ms(now_ms)],
            )?;
            if n == 0 {
                if tx
                    .query_opt("SELECT 1 FROM tasks WHERE id = $1", &[&task])?
                    .is_none()
                {
                    return Err(Fail::Store(StoreError::NoSuchTask(task.to_string())));
                }
            } else {
                notify(&mut tx, task)?;
            }
            tx.commit()?;
            Ok(n > 0)
        })
    }

    fn finish(
        &self,
        task: &str,
        outcome: loop_protocol::OutcomeName,
        reason: &str,
        receipt: &str,
        change_set: &serde_json::Value,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let change_set = change_set.to_string();
        let outcome = outcome.to_string();
        self.run(|c| {
            let mut tx = c.transaction()?;
            if let Some(h) = holder {
                let row = tx.query_opt(
                    "SELECT owner::jsonb ->> 'token', state FROM tasks WHERE id = $1 FOR UPDATE",
                    &[&task],
                )?;
                let (token, state): (Option<String>, Option<String>) = match &row {
                    Some(r) => (r.try_get(0)?, r.try_get(1)?),
                    None => (None, None),
                };
                if token.as_deref() != Some(h) {
                    // A retry after our end committed (the claim is let go
                    // with it) finds exactly that end: it stands. Any other
                    // end is someone else's, and is not overwritten.
                    let ours = state.as_deref() == Some(StoredState::TERMINAL.as_str())
                        && tx
                            .query_opt(
                                "SELECT 1 FROM tasks t JOIN receipts r ON r.task_id = t.id
                                 WHERE t.id = $1 AND t.outcome = $2 AND r.path = $3",
                                &[&task, &outcome, &receipt],
                            )?
                            .is_some();
                    if ours {
                        return Ok(());
                    }
                    return Err(Fail::Store(StoreError::NotHolder {
                        task: task.to_string(),
                    }));
                }
            }
            tx.execute(
                "UPDATE tasks SET state = 'terminal', outcome = $2, reason = $3, owner = NULL, updated_ms = $4
                 WHERE id = $1",
                &[&task, &outcome, &reason, &ms(now_ms)],
            )?;
            tx.execute(
                "INSERT INTO receipts (task_id, path, change_set, created_ms) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (task_id) DO UPDATE SET path = EXCLUDED.path,
                    change_set = EXCLUDED.change_set, created_ms = EXCLUDED.created_ms",
                &[&task, &receipt, &change_set, &ms(now_ms)],
            )?;
            notify(&mut tx, task)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn reopen(&self, task: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.run(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE tasks SET state = 'ending', outcome = NULL, reason = NULL,
                 cancel_requested = 0, updated_ms = $2 WHERE id = $1 AND state = 'terminal'",
                &[&task, &ms(now_ms)],
            )?;
            if n > 0 {
                notify(&mut tx, task)?;
            }
            tx.commit()?;
            Ok(n > 0)
        })
    }

    fn put_approval(&self, a: &Approval) -> Result<(), StoreError> {
        let payload = a.payload.to_string();
        self.run(|c| {
            let mut tx = c.transaction()?;
            tx.execute(
                "INSERT INTO approvals (task_id, id, kind, payload, status, created_ms, decided_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (task_id, id) DO UPDATE SET kind = EXCLUDED.kind,
                    payload = EXCLUDED.payload, status = EXCLUDED.status,
                    created_ms = EXCLUDED.created_ms, decided_ms = EXCLUDED.decided_ms",
                &[
                    &a.task_id,
                    &a.id,
                    &a.kind,
                    &payload,
                    &a.status.as_str(),
                    &ms(a.created_ms),
                    &a.decided_ms.map(ms),
                ],
            )?;
            notify(&mut tx, &a.task_id)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn decide_approval(&self, a: &Approval) -> Result<bool, StoreError> {
        let payload = a.payload.to_string();
        self.run(|c| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE approvals SET status = $3, payload = $4, decided_ms = $5
                 WHERE task_id = $1 AND id = $2 AND status = 'pending'",
                &[
                    &a.task_id,
                    &a.id,
                    &a.status.as_str(),
                    &payload,
                    &a.decided_ms.map(ms),
                ],
            )?;
            if n == 1 {
                notify(&mut tx, &a.task_id)?;
                tx.commit()?;
                return Ok(true);
            }
            // Decided before: by this very decision, committed before a
            // broken connection lost the answer, or by someone else.
            let same = tx
                .query_opt(
                    "SELECT 1 FROM approvals WHERE task_id = $1 AND id = $2 AND status = $3 AND decided_ms = $4",
                    &[&a.task_id, &a.id, &a.status.as_str(), &a.decided_ms.map(ms)],
                )?
                .is_some();
            Ok(same)
        })
    }

    fn approvals(&self, task: &str) -> Result<Vec<Approval>, StoreError> {
        self.run(|c| {
            let rows = c.query(
                "SELECT task_id, id, kind, payload, status, created_ms, decided_ms
                 FROM approvals WHERE task_id = $1 ORDER BY created_ms, id",
                &[&task],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let payload: String = r.try_get(3)?;
                let status: String = r.try_get(4)?;
                let Some(status) = ApprovalStatus::from_name(&status) else {
                    return Err(Fail::Store(
                        self.err(format!("task {task}: unknown approval status `{status}`")),
                    ));
                };
                out.push(Approval {
                    task_id: r.try_get(0)?,
                    id: r.try_get(1)?,
                    kind: r.try_get(2)?,
                    payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                    status,
                    created_ms: r.try_get::<_, i64>(5)? as u64,
                    decided_ms: r.try_get::<_, Option<i64>>(6)?.map(|d| d as u64),
                });
            }
            Ok(out)
        })
    }

    fn create_token(&self, sha256: &str, record: &TokenRecord) -> Result<(), StoreError> {
        self.run(|c| {
            let n = c.execute(
                "INSERT INTO tokens (sha256, id, owner, scope, created_ms) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
                &[&sha256, &record.id, &record.owner, &record.scope, &ms(record.created_ms)],
            )?;
            if n == 1 {
                return Ok(());
            }
            let ours = c
                .query_opt(
                    "SELECT 1 FROM tokens WHERE sha256 = $1 AND id = $2 AND created_ms = $3",
                    &[&sha256, &record.id, &ms(record.created_ms)],
                )?
                .is_some();
            if ours {
                Ok(())
            } else {
                Err(Fail::Store(self.err(format!("a token `{}` exists already", record.id))))
            }
        })
    }

    fn token(&self, sha256: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.run(|c| {
            let row = c.query_opt(
                "SELECT id, owner, scope, created_ms, revoked_ms FROM tokens WHERE sha256 = $1 AND revoked_ms IS NULL",
                &[&sha256],
            )?;
            Ok(row.as_ref().map(token_from).transpose()?)
        })
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.run(|c| {
            let rows = c.query(
                "SELECT id, owner, scope, created_ms, revoked_ms FROM tokens ORDER BY created_ms DESC, id",
                &[],
            )?;
            Ok(rows.iter().map(token_from).collect::<Result<Vec<_>, _>>()?)
        })
    }

    fn revoke_token(&self, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.run(|c| {
            let n = c.execute(
                "UPDATE tokens SET revoked_ms = $2 WHERE id = $1 AND revoked_ms IS NULL",
                &[&id, &ms(now_ms)],
            )?;
            if n > 0 {
                return Ok(true);
            }
            // Revoked at this very instant: ours, committed before a broken
            // connection lost the answer (the retry finds it revoked).
            let at: Option<Option<i64>> = c
                .query_opt("SELECT revoked_ms FROM tokens WHERE id = $1", &[&id])?
                .map(|r| r.try_get(0))
                .transpose()?;
            Ok(at == Some(Some(ms(now_ms))))
        })
    }

    fn take_delivery(&self, trigger: &str, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.run(|c| {
            let n = c.execute(
                "INSERT INTO deliveries (trigger, id, at_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&trigger, &id, &ms(now_ms)],
            )?;
            if n == 1 {
                return Ok(true);
            }
            // Taken at this very instant: ours, committed before a broken
            // connection lost the answer (a replay comes later).
            let at: Option<i64> = c
                .query_opt(
                    "SELECT at_ms FROM deliveries WHERE trigger = $1 AND id = $2",
                    &[&trigger, &id],
                )?
                .map(|r| r.try_get(0))
                .transpose()?;
            Ok(at == Some(ms(now_ms)))
        })
    }

    fn drop_task_contents(&self, task: &str) -> Result<u64, StoreError> {
        let start = format!("{task}/start");
        self.run(|c| {
            let mut tx = c.transaction()?;
            let freed: i64 = tx
                .query_one(
                    "SELECT COALESCE(SUM(LENGTH(bytes)), 0)::BIGINT FROM blobs WHERE task_id IN ($1, $2)",
                    &[&task, &start],
                )?
                .try_get(0)?;
            tx.execute(
                "DELETE FROM blobs WHERE task_id IN ($1, $2)",
                &[&task, &start],
            )?;
            tx.execute(
                "DELETE FROM task_files WHERE task_id IN ($1, $2)",
                &[&task, &start],
            )?;
            tx.commit()?;
            Ok(freed.max(0) as u64)
        })
    }

    fn put_kept(
        &self,
        kind: Kept,
        id: &str,
        owner: &str,
        project: &str,
        body: &str,
        holder: &str,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.upsert_kept(kind, false, [id, owner, project, body, holder], now_ms)
            .map(|_| ())
    }

    fn put_kept_held(
        &self,
        kind: Kept,
        id: &str,
        owner: &str,
        project: &str,
        body: &str,
        holder: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.upsert_kept(kind, true, [id, owner, project, body, holder], now_ms)
    }

    fn kept(&self, kind: Kept, project: &str) -> Result<Vec<DraftRecord>, StoreError> {
        let sql = format!(
            "SELECT id, owner, body, updated_ms, holder FROM {} WHERE project = $1
             ORDER BY updated_ms, id",
            kind.table()
        );
        self.run(|c| {
            let rows = c.query(&sql, &[&project])?;
            Ok(rows
                .iter()
                .map(kept_record)
                .collect::<Result<Vec<_>, postgres::Error>>()?)
        })
    }

    fn kept_one(&self, kind: Kept, id: &str) -> Result<Option<DraftRecord>, StoreError> {
        let sql = format!(
            "SELECT id, owner, body, updated_ms, holder FROM {} WHERE id = $1",
            kind.table()
        );
        self.run(|c| {
            let row = c.query_opt(&sql, &[&id])?;
            Ok(row.as_ref().map(kept_record).transpose()?)
        })
    }

    fn claim_kept(
        &self,
        kind: Kept,
        id: &str,
        (from, from_ms): (&str, u64),
        to: &str,
        body: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE {} SET holder = $1, body = $2, updated_ms = $3
             WHERE id = $4 AND holder = $5 AND updated_ms = $6",
            kind.table()
        );
        // Never the time it was last written: a claim is a change.
        let now = ms(now_ms.max(from_ms + 1));
        self.run(|c| Ok(c.execute(&sql, &[&to, &body, &now, &id, &from, &ms(from_ms)])? == 1))
    }

    fn renew_kept(&self, kind: Kept, holder: &str, now_ms: u64) -> Result<u64, StoreError> {
        let sql = format!(
            "UPDATE {} SET updated_ms = $1 WHERE holder = $2 AND holder != ''",
            kind.table()
        );
        self.run(|c| Ok(c.execute(&sql, &[&ms(now_ms), &holder])?))
    }

    fn drop_kept(&self, kind: Kept, project: &str, before_ms: u64) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE project = $1 AND updated_ms < $2",
            kind.table()
        );
        self.run(|c| Ok(c.execute(&sql, &[&project, &ms(before_ms)])?))
    }

    fn forget_kept_stored(&self, kind: Kept) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE id IN (SELECT id FROM tasks)",
            kind.table()
        );
        self.run(|c| Ok(c.execute(&sql, &[])?))
    }

    fn put_note(&self, n: &crate::Note) -> Result<(), StoreError> {
        let words = crate::note_words(&n.text, &n.about).join(" ");
        let body = n.body.to_string();
        self.run(|c| {
            c.execute(
                "INSERT INTO notes (id, project, owner, text, words, body, status, created_ms, updated_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (id) DO UPDATE SET text = excluded.text, words = excluded.words,
                    body = excluded.body, status = excluded.status, updated_ms = excluded.updated_ms",
                &[
                    &n.id,
                    &n.project,
                    &n.owner,
                    &n.text,
                    &words,
                    &body,
                    &n.status.as_str(),
                    &ms(n.created_ms),
                    &ms(n.updated_ms),
                ],
            )?;
            Ok(())
        })
    }

    fn notes(&self, project: &str) -> Result<Vec<crate::Note>, StoreError> {
        let sql =
            format!("SELECT {NOTE_COLUMNS} FROM notes WHERE project = $1 ORDER BY created_ms, id");
        self.run(|c| {
            Ok(c.query(&sql, &[&project])?
                .iter()
                .map(note_row)
                .collect::<Result<Vec<_>, _>>()?)
        })
    }

    fn note(&self, id: &str) -> Result<Option<crate::Note>, StoreError> {
        let sql = format!("SELECT {NOTE_COLUMNS} FROM notes WHERE id = $1");
        self.run(|c| {
            Ok(c.query_opt(&sql, &[&id])?
                .as_ref()
                .map(note_row)
                .transpose()?)
        })
    }

    fn search_notes(
        &self,
        project: &str,
        owner: &str,
        words: &[String],
        limit: usize,
    ) -> Result<Vec<crate::Note>, StoreError> {
        // Each word quoted as a lexeme, any of them: nothing a note's words
        // hold is read as an operator.
        let query = words
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', "''").replace('\\', "")))
            .collect::<Vec<_>>()
            .join(" | ");
        if query.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {NOTE_COLUMNS} FROM notes
             WHERE project = $1 AND status = 'usable' AND (owner = '' OR owner = $2)
               AND to_tsvector('simple', words) @@ to_tsquery('simple', $3)
             ORDER BY ts_rank(to_tsvector('simple', words), to_tsquery('simple', $3)) DESC,
                      created_ms DESC, id
             LIMIT $4"
        );
        let candidates = crate::NOTE_CANDIDATES as i64;
        let found = self.run(|c| {
            Ok(c.query(&sql, &[&project, &owner, &query, &candidates])?
                .iter()
                .map(note_row)
                .collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(crate::rank_notes(found, words, limit))
    }

    fn forget_kept(&self, kind: Kept, id: &str) -> Result<bool, StoreError> {
        let sql = format!("DELETE FROM {} WHERE id = $1", kind.table());
        self.run(|c| Ok(c.execute(&sql, &[&id])? > 0))
    }

    fn forget_delivery(&self, trigger: &str, id: &str) -> Result<(), StoreError> {
        self.run(|c| {
            c.execute(
                "DELETE FROM deliveries WHERE trigger = $1 AND id = $2",
                &[&trigger, &id],
            )?;
            Ok(())
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn put_task_file(
        &self,
        task: &str,
        file: &TaskFile<'_>,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.run(|c| {
            let mut tx = c.transaction()?;
            if !file.durable {
                // Not waited for; a later durable commit covers it (the
                // write-ahead log is flushed in order).
                tx.batch_execute("SET LOCAL synchronous_commit = off")?;
            }
            if let Some(h) = holder {
                let token: Option<String> = tx
                    .query_opt(
                        "SELECT owner::jsonb ->> 'token' FROM tasks WHERE id = $1 FOR UPDATE",
                        &[&task],
                    )?
                    .map(|r| r.try_get(0))
                    .transpose()?
                    .flatten();
                if token.as_deref() != Some(h) {
                    return Err(Fail::Store(StoreError::NotHolder {
                        task: task.to_string(),
                    }));
                }
            }
            file_in(&mut tx, task, file, now_ms)?;
            tx.commit()?;
            Ok(())
        })
    }

    fn task_file(&self, task: &str, name: &str) -> Result<Option<String>, StoreError> {
        self.run(|c| {
            Ok(c.query_opt(
                "SELECT body FROM task_files WHERE task_id = $1 AND name = $2",
                &[&task, &name],
            )?
            .map(|r| r.try_get(0))
            .transpose()?)
        })
    }

    fn blob(&self, task: &str, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(|c| {
            Ok(c.query_opt(
                "SELECT bytes FROM blobs WHERE task_id = $1 AND sha256 = $2",
                &[&task, &sha256],
            )?
            .map(|r| r.try_get(0))
            .transpose()?)
        })
    }
}

/// A kept record from its row (`id, owner, body, updated_ms, holder`).
fn kept_record(r: &postgres::Row) -> Result<DraftRecord, postgres::Error> {
    Ok(DraftRecord {
        id: r.try_get(0)?,
        owner: r.try_get(1)?,
        body: r.try_get(2)?,
        updated_ms: r.try_get::<_, i64>(3)?.max(0) as u64,
        holder: r.try_get(4)?,
    })
}

/// Fill in the parents of tasks stored before migration 9 made their
/// column, each read as the store writes it (JSON text; read here, not by
/// a cast to `jsonb`, which refuses some JSON, such as a `\u0000`, and
/// would stop the migration).
fn fill_parents(tx: &mut postgres::Transaction<'_>) -> Result<(), postgres::Error> {
    let rows = tx.query(
        "SELECT id, request FROM tasks WHERE request LIKE '%\"parent\"%'",
        &[],
    )?;
    for row in rows {
        let (id, body): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        let Ok(request) = serde_json::from_str::<serde_json::Value>(&body) else {
            continue;
        };
        if let Some(parent) = crate::parent_of(&request) {
            tx.execute(
                "UPDATE tasks SET parent = $1 WHERE id = $2",
                &[&parent, &id],
            )?;
        }
    }
    Ok(())
}

/// PostgreSQL's full-text index of memory notes (made with migration 8):
/// the `simple` configuration, so its words are the ones SQLite's index
/// holds ([`crate::note_words`]).
pub(crate) const MEMORY_INDEX: &str =
    "CREATE INDEX notes_search ON notes USING gin (to_tsvector('simple', words));";

fn note_row(r: &postgres::Row) -> Result<crate::Note, postgres::Error> {
    let (body, status): (String, String) = (r.try_get("body")?, r.try_get("status")?);
    Ok(crate::Note::from_columns(
        r.try_get("id")?,
        r.try_get("project")?,
        r.try_get("owner")?,
        r.try_get("text")?,
        (&body, &status),
        r.try_get("created_ms")?,
        r.try_get("updated_ms")?,
    ))
}

const NOTE_COLUMNS: &str = "id, project, owner, text, words, body, status, created_ms, updated_ms";

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::redact;

    #[test]
    fn a_shown_url_never_carries_the_password() {
        assert_eq!(
            redact("postgres://loop:s3cret@db.internal:5432/loop?sslmode=disable"),
            "postgres://loop@db.internal:5432/loop"
        );
        assert_eq!(
            redact("postgres://127.0.0.1/loop"),
            "postgres://127.0.0.1/loop"
        );
        assert_eq!(redact("postgres://u:p@ss@h/d"), "postgres://u@h/d");
    }
}
