//! The embedded SQLite backend.

use crate::{
    Approval, ApprovalStatus, Claim, DraftRecord, Kept, LedgerEntry, MIGRATIONS, Owner, Store,
    StoreError, StoredState, TaskFile, TaskRecord, TokenRecord,
};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

fn row_to_token(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        id: r.get(0)?,
        owner: r.get(1)?,
        scope: r.get(2)?,
        created_ms: r.get::<_, i64>(3)? as u64,
        revoked_ms: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
    })
}

/// SQLite at a path (`PROJECT/.loop/loop.db` by default).
pub struct SqliteStore {
    path: PathBuf,
    /// The database file's identity (device, inode) when it was opened: a
    /// reader is opened by path only while the path still names that file.
    identity: Option<(u64, u64)>,
    /// The one connection that writes (and reads inside its writes).
    conn: Mutex<Connection>,
    /// Connections that only read, kept for the next read: in WAL mode a
    /// read never waits for a write (a status read while tasks append to
    /// their ledgers and sync them), nor for another read.
    readers: Mutex<Vec<Connection>>,
    /// Writers of threads that answer someone ([`answering`]) waiting for
    /// the connection: others let them go first.
    urgent: AtomicUsize,
    /// Where the others wait for that (woken as each urgent one gets in).
    yielding: (Mutex<()>, Condvar),
}

thread_local! {
    static ANSWERING: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with the calling thread's writes to SQLite stores ahead of
/// those of threads doing background work (a server's answer to a request
/// waits for at most the write in progress, not for every task's ledger
/// append queued before it).
pub fn answering<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            ANSWERING.set(self.0);
        }
    }
    let _reset = Reset(ANSWERING.replace(true));
    f()
}

/// How long a background writer lets answering ones go first, at most.
const YIELD_AT_MOST: Duration = Duration::from_millis(500);

/// While another connection writes: try again every half millisecond for
/// up to 30 s. (SQLite's own timeout sleeps up to 100 ms between tries, so
/// a short write elsewhere could cost a waiting request 100 ms or, with
/// writers coming one after another, seconds.)
fn wait_while_busy(tries: i32) -> bool {
    const PAUSE: Duration = Duration::from_micros(500);
    if Duration::from_micros(500) * tries.max(0) as u32 >= Duration::from_secs(30) {
        return false;
    }
    std::thread::sleep(PAUSE);
    true
}

/// Read connections kept open at most (more are opened while reads
/// overlap, and closed after).
const READERS_KEPT: usize = 8;

impl SqliteStore {
    /// Keep a record of `kind` ([`Kept::upsert`]): whether it was written.
    fn upsert_kept(
        &self,
        kind: Kept,
        held: bool,
        [id, owner, project, body, holder]: [&str; 5],
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let sql = kind.upsert(held, |n| format!("?{n}"));
        self.with(|c| {
            let n = c
                .execute(
                    &sql,
                    params![id, owner, project, body, holder, now_ms as i64],
                )
                .map_err(|e| self.err(e))?;
            Ok(n == 1)
        })
    }

    /// Open (creating and migrating as needed). Two processes creating the
    /// database at once can find it busy while the other switches it to WAL
    /// (that switch does not wait on the busy handler): retried for up to
    /// ten seconds.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let start = std::time::Instant::now();
        loop {
            match Self::open_once(path) {
                Err(StoreError::Db { message, .. })
                    if (message.contains("locked") || message.contains("busy"))
                        && start.elapsed() < Duration::from_secs(10) =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }

    /// [`SqliteStore::open`], shared within this process: every opening of
    /// the same database file while one is open gets that one (one
    /// connection that writes, its writes queued in this process rather
    /// than polling SQLite's lock against each other; one set of readers).
    /// A file replaced since (another inode) is opened afresh.
    #[allow(clippy::disallowed_methods)] // the database file's identity only
    pub fn open_shared(path: &Path) -> Result<Arc<SqliteStore>, StoreError> {
        type Open = HashMap<PathBuf, ((u64, u64), Weak<SqliteStore>)>;
        static OPEN: OnceLock<Mutex<Open>> = OnceLock::new();
        let identity = file_identity;
        let open = OPEN.get_or_init(Mutex::default);
        let mut map = open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, (_, w)| w.strong_count() > 0);
        if let (Some(id), Some((kept_id, weak))) = (identity(path), map.get(path))
            && id == *kept_id
            && let Some(store) = weak.upgrade()
        {
            return Ok(store);
        }
        let store = Arc::new(SqliteStore::open(path)?);
        if let Some(id) = identity(path) {
            map.insert(path.to_path_buf(), (id, Arc::downgrade(&store)));
        }
        Ok(store)
    }

    fn open_once(path: &Path) -> Result<SqliteStore, StoreError> {
        let shown = path.display().to_string();
        let db = |e: rusqlite::Error| StoreError::Db {
            path: shown.clone(),
            message: e.to_string(),
        };
        let mut conn = Connection::open(path).map_err(db)?;
        conn.busy_handler(Some(wait_while_busy)).map_err(db)?;
        steady_plans(&conn).map_err(db)?;
        // What SQLite spills to temporary files (a statement's journal in
        // the migrations, a sort) stays in memory: no file for it.
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(db)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(db)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(db)?;
        let store = SqliteStore {
            path: path.to_path_buf(),
            identity: file_identity(path),
            conn: Mutex::new(conn),
            readers: Mutex::new(Vec::new()),
            urgent: AtomicUsize::new(0),
            yielding: (Mutex::new(()), Condvar::new()),
        };
        store.migrate()?;
        Ok(store)
    }

    /// [`Store::append_batch`] on connection `c`.
    fn append_in(
        &self,
        c: &mut Connection,
        task: &str,
        entries: &[LedgerEntry],
        (state, file): (Option<StoredState>, Option<&TaskFile<'_>>),
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let (Some(first), Some(final_entry)) = (entries.first(), entries.last()) else {
            return Ok(());
        };
        {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            if let Some(token) = holder
                && self.owner_in(&tx, task)?.is_none_or(|o| o.token != token)
            {
                return Err(StoreError::NotHolder {
                    task: task.to_string(),
                });
            }
            let last: i64 = tx
                .prepare_cached("SELECT COALESCE(MAX(seq), -1) FROM entries WHERE task_id = ?1")
                .and_then(|mut q| q.query_row([task], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            if first.seq as i64 != last + 1 {
                // The same batch offered again (its last entry's hash
                // covers the chain up to it) is the one stored: as
                // PostgreSQL answers a retry.
                let mut stmt = tx
                    .prepare(
                        "SELECT hash FROM entries WHERE task_id = ?1 AND seq >= ?2 AND seq <= ?3 ORDER BY seq",
                    )
                    .map_err(|e| self.err(e))?;
                let stored: Vec<String> = stmt
                    .query_map(
                        params![task, first.seq as i64, final_entry.seq as i64],
                        |r| r.get(0),
                    )
                    .map_err(|e| self.err(e))?
                    .collect::<Result<_, _>>()
                    .map_err(|e| self.err(e))?;
                let same = stored.len() == entries.len()
                    && stored.iter().zip(entries).all(|(h, e)| *h == e.hash);
                if final_entry.seq as i64 == last && same {
                    return Ok(());
                }
                return Err(StoreError::OutOfSequence {
                    task: task.to_string(),
                    seq: first.seq,
                    last,
                });
            }
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT INTO entries (task_id, seq, prev, kind, payload, at, hash)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )
                    .map_err(|e| self.err(e))?;
                for (i, entry) in entries.iter().enumerate() {
                    if entry.seq != first.seq + i as u64 {
                        return Err(StoreError::OutOfSequence {
                            task: task.to_string(),
                            seq: entry.seq,
                            last: (first.seq + i as u64) as i64 - 1,
                        });
                    }
                    insert
                        .execute(params![
                            task,
                            entry.seq as i64,
                            entry.prev,
                            entry.kind,
                            entry.payload.to_string(),
                            entry.at,
                            entry.hash
                        ])
                        .map_err(|e| self.err(e))?;
                }
            }
            match state {
                Some(s) => tx
                    .prepare_cached("UPDATE tasks SET state = ?2, updated_ms = ?3 WHERE id = ?1")
                    .and_then(|mut q| q.execute(params![task, s.as_str(), now_ms as i64])),
                None => tx
                    .prepare_cached("UPDATE tasks SET updated_ms = ?2 WHERE id = ?1")
                    .and_then(|mut q| q.execute(params![task, now_ms as i64])),
            }
            .map_err(|e| self.err(e))?;
            if let Some(f) = file {
                self.file_in(&tx, task, f, now_ms)?;
            }
            tx.commit().map_err(|e| self.err(e))
        }
    }

    /// [`Store::put_task_file`] on connection `c`.
    fn put_task_file_in(
        &self,
        c: &mut Connection,
        task: &str,
        file: &TaskFile<'_>,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        if let Some(token) = holder
            && self.owner_in(&tx, task)?.is_none_or(|o| o.token != token)
        {
            return Err(StoreError::NotHolder {
                task: task.to_string(),
            });
        }
        self.file_in(&tx, task, file, now_ms)?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// Write `file` of `task` (its contents, the ones it drops, its body) in `tx`.
    fn file_in(
        &self,
        tx: &rusqlite::Transaction<'_>,
        task: &str,
        file: &TaskFile<'_>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT INTO blobs (task_id, sha256, bytes) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                )
                .map_err(|e| self.err(e))?;
            for (sha, bytes) in file.blobs {
                put.execute(params![task, sha, bytes])
                    .map_err(|e| self.err(e))?;
            }
        }
        if let Some(keep) = file.keep_only {
            let keep: std::collections::HashSet<&str> = keep
                .iter()
                .chain(file.blobs.iter().map(|(s, _)| s))
                .map(String::as_str)
                .collect();
            let held: Vec<String> = tx
                .prepare_cached("SELECT sha256 FROM blobs WHERE task_id = ?1")
                .and_then(|mut q| {
                    q.query_map([task], |r| r.get(0))?
                        .collect::<Result<Vec<String>, _>>()
                })
                .map_err(|e| self.err(e))?;
            let mut drop = tx
                .prepare_cached("DELETE FROM blobs WHERE task_id = ?1 AND sha256 = ?2")
                .map_err(|e| self.err(e))?;
            for sha in held.iter().filter(|s| !keep.contains(s.as_str())) {
                drop.execute(params![task, sha]).map_err(|e| self.err(e))?;
            }
        }
        tx.prepare_cached(
            "INSERT INTO task_files (task_id, name, body, updated_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (task_id, name) DO UPDATE SET body = excluded.body, updated_ms = excluded.updated_ms",
        )
        .and_then(|mut q| q.execute(params![task, file.name, file.body, now_ms as i64]))
        .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The task's current owner, read inside `tx`.
    fn owner_in(
        &self,
        tx: &rusqlite::Transaction<'_>,
        task: &str,
    ) -> Result<Option<Owner>, StoreError> {
        let current: Option<String> = tx
            .prepare_cached("SELECT owner FROM tasks WHERE id = ?1")
            .and_then(|mut q| q.query_row([task], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))?
            .flatten();
        Ok(current.and_then(|o| serde_json::from_str::<Owner>(&o).ok()))
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        crate::schema_version()
    }

    fn err(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Db {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let urgent = ANSWERING.get();
        if urgent {
            self.urgent.fetch_add(1, Ordering::SeqCst);
        } else if self.urgent.load(Ordering::SeqCst) > 0 {
            let (lock, cv) = &self.yielding;
            let g = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            drop(
                cv.wait_timeout_while(g, YIELD_AT_MOST, |_| self.urgent.load(Ordering::SeqCst) > 0),
            );
        }
        let guard = self.conn.lock();
        if urgent {
            self.urgent.fetch_sub(1, Ordering::SeqCst);
            let (lock, cv) = &self.yielding;
            drop(
                lock.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            cv.notify_all();
        }
        let mut guard = guard.map_err(|_| StoreError::Db {
            path: self.path.display().to_string(),
            message: "connection lock poisoned".into(),
        })?;
        f(&mut guard)
    }

    /// `f` on a connection that only reads (one kept, or a new one).
    fn read<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let kept = self
            .readers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let mut conn = match kept {
            Some(c) => c,
            // The path names another file now (replaced, or removed): the
            // writing connection still has this store's, and reads there.
            None if self.identity.is_none() || file_identity(&self.path) != self.identity => {
                return self.with(f);
            }
            None => self.open_reader()?,
        };
        let out = f(&mut conn);
        let mut pool = self
            .readers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if pool.len() < READERS_KEPT {
            pool.push(conn);
        }
        out
    }

    /// A connection to this database that cannot write.
    fn open_reader(&self) -> Result<Connection, StoreError> {
        let mut conn = Connection::open(&self.path).map_err(|e| self.err(e))?;
        conn.busy_handler(Some(wait_while_busy))
            .map_err(|e| self.err(e))?;
        steady_plans(&conn).map_err(|e| self.err(e))?;
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(|e| self.err(e))?;
        conn.pragma_update(None, "query_only", true)
            .map_err(|e| self.err(e))?;
        Ok(conn)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        // A store at this build's version (every open but the first) is
        // only read: no write lock is taken to find that out.
        let at = self.with(|c| {
            c.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
                .map_err(|e| self.err(e))
        })?;
        if at == Self::schema_version() {
            return Ok(());
        }
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let version: i64 = tx
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| self.err(e))?;
            if version > Self::schema_version() {
                return Err(StoreError::TooNew {
                    path: self.path.display().to_string(),
                    found: version,
                    supported: Self::schema_version(),
                });
            }
            for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                tx.execute_batch(m).map_err(|e| self.err(e))?;
                // The engine's own index of the notes migration 8 makes.
                if i + 1 == 8 {
                    tx.execute_batch(MEMORY_INDEX).map_err(|e| self.err(e))?;
                }
                if i + 1 == 9 {
                    tx.execute_batch(PARENTS_FILLED).map_err(|e| self.err(e))?;
                    tx.execute_batch(MEMORY_INDEX_AGAIN)
                        .map_err(|e| self.err(e))?;
                }
                tx.pragma_update(None, "user_version", i as i64 + 1)
                    .map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }
}

/// Column `column` of row `r` holds a name no build writes.
fn unknown(r: &rusqlite::Row<'_>, column: &str, e: crate::UnknownName) -> rusqlite::Error {
    let at = r.as_ref().column_index(column).unwrap_or_default();
    rusqlite::Error::FromSqlConversionFailure(at, rusqlite::types::Type::Text, Box::new(e))
}

fn row_to_task(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRecord> {
    let request: String = r.get("request")?;
    let owner: Option<String> = r.get("owner")?;
    Ok(TaskRecord {
        id: r.get("id")?,
        state: StoredState::read(&r.get::<_, String>("state")?)
            .map_err(|e| unknown(r, "state", e))?,
        outcome: crate::read_outcome(r.get("outcome")?).map_err(|e| unknown(r, "outcome", e))?,
        reason: r.get("reason")?,
        contract_sha256: r.get("contract_sha256")?,
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        created_ms: r.get::<_, i64>("created_ms")? as u64,
        updated_ms: r.get::<_, i64>("updated_ms")? as u64,
        owner: owner.and_then(|o| serde_json::from_str(&o).ok()),
        cancel_requested: r.get::<_, i64>("cancel_requested")? != 0,
        receipt: r.get("receipt")?,
        entries: r.get::<_, i64>("entries")? as u64,
    })
}

const TASK_SELECT: &str = "SELECT t.*, r.path AS receipt,
    (SELECT COUNT(*) FROM entries e WHERE e.task_id = t.id) AS entries
    FROM tasks t LEFT JOIN receipts r ON r.task_id = t.id";

impl Store for SqliteStore {
    fn create_task(
        &self,
        id: &str,
        contract_sha256: &str,
        request: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO tasks (id, state, contract_sha256, request, created_ms, updated_ms, parent)
                 VALUES (?1, 'pending', ?2, ?3, ?4, ?4, ?5)",
                params![
                    id,
                    contract_sha256,
                    request.to_string(),
                    now_ms as i64,
                    crate::parent_of(request)
                ],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    fn task(&self, id: &str) -> Result<TaskRecord, StoreError> {
        self.read(|c| {
            c.query_row(&format!("{TASK_SELECT} WHERE t.id = ?1"), [id], row_to_task)
                .optional()
                .map_err(|e| self.err(e))?
                .ok_or_else(|| StoreError::NoSuchTask(id.to_string()))
        })
    }

    fn children(&self, parent: &str) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare(&format!(
                    "{TASK_SELECT} WHERE t.parent = ?1 ORDER BY t.created_ms, t.id"
                ))
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([parent], row_to_task)
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })
    }

    fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare(&format!(
                    "{TASK_SELECT} ORDER BY t.created_ms DESC, t.id DESC"
                ))
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], row_to_task)
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })
    }

    /// [`Store::append_all`]; without `durable`, the commit is not synced
    /// (`synchronous = NORMAL` for it: the write-ahead log keeps it in order,
    /// and the next synced commit takes it to the disk).
    fn append_batch(
        &self,
        task: &str,
        entries: &[LedgerEntry],
        state: Option<StoredState>,
        holder: Option<&str>,
        now_ms: u64,
        (durable, file): (bool, Option<&TaskFile<'_>>),
    ) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.with(|c| {
            if !durable {
                c.execute_batch("PRAGMA synchronous = NORMAL")
                    .map_err(|e| self.err(e))?;
            }
            let done = self.append_in(c, task, entries, (state, file), holder, now_ms);
            if !durable {
                c.execute_batch("PRAGMA synchronous = FULL")
                    .map_err(|e| self.err(e))?;
            }
            done
        })
    }

    fn entries(&self, task: &str, from_seq: u64) -> Result<Vec<LedgerEntry>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare(
                    "SELECT seq, prev, kind, payload, at, hash FROM entries
                     WHERE task_id = ?1 AND seq >= ?2 ORDER BY seq",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                // A `from` past what SQLite's integers hold reads nothing
                // (cast, it wrapped below zero and read everything).
                .query_map(
                    params![task, i64::try_from(from_seq).unwrap_or(i64::MAX)],
                    |r| {
                        let payload: String = r.get(3)?;
                        Ok(LedgerEntry {
                            seq: r.get::<_, i64>(0)? as u64,
                            prev: r.get(1)?,
                            kind: r.get(2)?,
                            payload: serde_json::from_str(&payload)
                                .unwrap_or(serde_json::Value::Null),
                            at: r.get(4)?,
                            hash: r.get(5)?,
                        })
                    },
                )
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })
    }

    fn claim(
        &self,
        task: &str,
        owner: &Owner,
        lease_ms: u64,
        now_ms: u64,
    ) -> Result<Claim, StoreError> {
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let row: Option<(String, Option<String>)> = tx
                .query_row(
                    "SELECT state, owner FROM tasks WHERE id = ?1",
                    [task],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(|e| self.err(e))?;
            let Some((state, current)) = row else {
                return Err(StoreError::NoSuchTask(task.to_string()));
            };
            if state == loop_protocol::TaskState::Terminal.name() {
                return Ok(Claim::Terminal);
            }
            if let Some(cur) = current.and_then(|o| serde_json::from_str::<Owner>(&o).ok()) {
                let expired = now_ms.saturating_sub(cur.heartbeat_ms) > lease_ms;
                if cur.token != owner.token && !cur.is_dead() && !expired {
                    return Ok(Claim::Held(cur));
                }
            }
            let json = serde_json::to_string(owner).unwrap_or_default();
            tx.execute(
                "UPDATE tasks SET owner = ?2, updated_ms = ?3 WHERE id = ?1",
                params![task, json, now_ms as i64],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(Claim::Claimed)
        })
    }

    fn heartbeat(&self, task: &str, token: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let Some(mut owner) = self.owner_in(&tx, task)? else {
                return Ok(false);
            };
            if owner.token != token {
                return Ok(false);
            }
            owner.heartbeat_ms = now_ms;
            tx.execute(
                "UPDATE tasks SET owner = ?2 WHERE id = ?1",
                params![task, serde_json::to_string(&owner).unwrap_or_default()],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(true)
        })
    }

    fn release(&self, task: &str, token: &str) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            if self.owner_in(&tx, task)?.is_some_and(|o| o.token == token) {
                tx.execute("UPDATE tasks SET owner = NULL WHERE id = ?1", [task])
                    .map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }

    fn request_cancel(&self, task: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "UPDATE tasks SET cancel_requested = 1, updated_ms = ?2
                     WHERE id = ?1 AND state != 'terminal'",
                    params![task, now_ms as i64],
                )
                .map_err(|e| self.err(e))?;
            if n == 0 {
                // Either it does not exist or it has ended.
                let exists: Option<i64> = c
                    .query_row("SELECT 1 FROM tasks WHERE id = ?1", [task], |r| r.get(0))
                    .optional()
                    .map_err(|e| self.err(e))?;
                if exists.is_none() {
                    return Err(StoreError::NoSuchTask(task.to_string()));
                }
            }
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
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            if let Some(token) = holder
                && self.owner_in(&tx, task)?.is_none_or(|o| o.token != token)
            {
                return Err(StoreError::NotHolder {
                    task: task.to_string(),
                });
            }
            tx.execute(
                "UPDATE tasks SET state = 'terminal', outcome = ?2, reason = ?3, owner = NULL, updated_ms = ?4
                 WHERE id = ?1",
                params![task, outcome.to_string(), reason, now_ms as i64],
            )
            .map_err(|e| self.err(e))?;
            tx.execute(
                "INSERT OR REPLACE INTO receipts (task_id, path, change_set, created_ms) VALUES (?1, ?2, ?3, ?4)",
                params![task, receipt, change_set.to_string(), now_ms as i64],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))
        })
    }

    fn reopen(&self, task: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "UPDATE tasks SET state = 'ending', outcome = NULL, reason = NULL,
                     cancel_requested = 0, updated_ms = ?2 WHERE id = ?1 AND state = 'terminal'",
                    params![task, now_ms as i64],
                )
                .map_err(|e| self.err(e))?;
            Ok(n > 0)
        })
    }

    fn put_approval(&self, a: &Approval) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO approvals (task_id, id, kind, payload, status, created_ms, decided_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    a.task_id,
                    a.id,
                    a.kind,
                    a.payload.to_string(),
                    a.status.as_str(),
                    a.created_ms as i64,
                    a.decided_ms.map(|d| d as i64)
                ],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    fn decide_approval(&self, a: &Approval) -> Result<bool, StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "UPDATE approvals SET status = ?3, payload = ?4, decided_ms = ?5
                     WHERE task_id = ?1 AND id = ?2 AND status = 'pending'",
                    params![
                        a.task_id,
                        a.id,
                        a.status.as_str(),
                        a.payload.to_string(),
                        a.decided_ms.map(|d| d as i64)
                    ],
                )
                .map_err(|e| self.err(e))?;
            Ok(n == 1)
        })
    }

    fn approvals(&self, task: &str) -> Result<Vec<Approval>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare(
                    "SELECT task_id, id, kind, payload, status, created_ms, decided_ms
                     FROM approvals WHERE task_id = ?1 ORDER BY created_ms, id",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([task], |r| {
                    let payload: String = r.get(3)?;
                    let status: String = r.get(4)?;
                    let status = ApprovalStatus::from_name(&status).ok_or_else(|| {
                        rusqlite::Error::FromSqlConversionFailure(
                            4,
                            rusqlite::types::Type::Text,
                            format!("unknown approval status `{status}`").into(),
                        )
                    })?;
                    Ok(Approval {
                        task_id: r.get(0)?,
                        id: r.get(1)?,
                        kind: r.get(2)?,
                        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                        status,
                        created_ms: r.get::<_, i64>(5)? as u64,
                        decided_ms: r.get::<_, Option<i64>>(6)?.map(|d| d as u64),
                    })
                })
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })
    }

    fn describe(&self) -> Result<String, StoreError> {
        let version = self.read(|c| {
            c.query_row("SELECT sqlite_version()", [], |r| r.get::<_, String>(0))
                .map_err(|e| self.err(e))
        })?;
        Ok(format!(
            "sqlite {} (SQLite {version}, schema {})",
            self.path.display(),
            crate::schema_version()
        ))
    }

    fn wait_for(&self, _task: &str, timeout: Duration) -> bool {
        // SQLite tells nobody of a commit: look again soon.
        std::thread::sleep(timeout.min(Duration::from_millis(100)));
        true
    }

    /// Keep a new token: its SHA-256, a public id, owner and scope.
    fn create_token(&self, sha256: &str, record: &TokenRecord) -> Result<(), StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "INSERT INTO tokens (sha256, id, owner, scope, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT DO NOTHING",
                    params![sha256, record.id, record.owner, record.scope, record.created_ms as i64],
                )
                .map_err(|e| self.err(e))?;
            if n == 1 {
                return Ok(());
            }
            // The same token again (a retry) stands; another is refused.
            let ours: Option<i64> = c
                .query_row(
                    "SELECT 1 FROM tokens WHERE sha256 = ?1 AND id = ?2 AND created_ms = ?3",
                    params![sha256, record.id, record.created_ms as i64],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| self.err(e))?;
            match ours {
                Some(_) => Ok(()),
                None => Err(StoreError::Db {
                    path: self.path.display().to_string(),
                    message: format!("a token `{}` exists already", record.id),
                }),
            }
        })
    }

    /// The live token whose SHA-256 is `sha256`, if any.
    fn token(&self, sha256: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.read(|c| {
            c.query_row(
                "SELECT id, owner, scope, created_ms, revoked_ms FROM tokens WHERE sha256 = ?1 AND revoked_ms IS NULL",
                params![sha256],
                row_to_token,
            )
            .optional()
            .map_err(|e| self.err(e))
        })
    }

    /// Every token, newest first.
    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.read(|c| {
            let mut stmt = c
                .prepare("SELECT id, owner, scope, created_ms, revoked_ms FROM tokens ORDER BY created_ms DESC, id")
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], row_to_token)
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })
    }

    /// Record delivery `id` of trigger `trigger` as taken; `false` when it
    /// was taken before (a replay).
    fn take_delivery(&self, trigger: &str, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "INSERT OR IGNORE INTO deliveries (trigger, id, at_ms) VALUES (?1, ?2, ?3)",
                    params![trigger, id, now_ms as i64],
                )
                .map_err(|e| self.err(e))?;
            Ok(n == 1)
        })
    }

    /// Give delivery `id` of `trigger` back (nothing was started for it).
    fn forget_delivery(&self, trigger: &str, id: &str) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "DELETE FROM deliveries WHERE trigger = ?1 AND id = ?2",
                params![trigger, id],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    fn drop_task_contents(&self, task: &str) -> Result<u64, StoreError> {
        let start = format!("{task}/start");
        self.with(|c| {
            let tx = c.unchecked_transaction().map_err(|e| self.err(e))?;
            let freed: i64 = tx
                .query_row(
                    "SELECT COALESCE(SUM(LENGTH(bytes)), 0) FROM blobs WHERE task_id IN (?1, ?2)",
                    params![task, start],
                    |r| r.get(0),
                )
                .map_err(|e| self.err(e))?;
            tx.execute(
                "DELETE FROM blobs WHERE task_id IN (?1, ?2)",
                params![task, start],
            )
            .map_err(|e| self.err(e))?;
            tx.execute(
                "DELETE FROM task_files WHERE task_id IN (?1, ?2)",
                params![task, start],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
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
            "SELECT id, owner, body, updated_ms, holder FROM {} WHERE project = ?1
             ORDER BY updated_ms, id",
            kind.table()
        );
        self.read(|c| {
            let mut stmt = c.prepare_cached(&sql).map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map(params![project], kept_record)
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(rows)
        })
    }

    fn kept_one(&self, kind: Kept, id: &str) -> Result<Option<DraftRecord>, StoreError> {
        let sql = format!(
            "SELECT id, owner, body, updated_ms, holder FROM {} WHERE id = ?1",
            kind.table()
        );
        self.read(|c| {
            c.query_row(&sql, params![id], kept_record)
                .optional()
                .map_err(|e| self.err(e))
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
            "UPDATE {} SET holder = ?1, body = ?2, updated_ms = ?3
             WHERE id = ?4 AND holder = ?5 AND updated_ms = ?6",
            kind.table()
        );
        // Never the time it was last written: a claim is a change.
        let now = now_ms.max(from_ms + 1) as i64;
        self.with(|c| {
            let n = c
                .execute(&sql, params![to, body, now, id, from, from_ms as i64])
                .map_err(|e| self.err(e))?;
            Ok(n == 1)
        })
    }

    fn renew_kept(&self, kind: Kept, holder: &str, now_ms: u64) -> Result<u64, StoreError> {
        let sql = format!(
            "UPDATE {} SET updated_ms = ?1 WHERE holder = ?2 AND holder != ''",
            kind.table()
        );
        self.with(|c| {
            let n = c
                .execute(&sql, params![now_ms as i64, holder])
                .map_err(|e| self.err(e))?;
            Ok(n as u64)
        })
    }

    fn drop_kept(&self, kind: Kept, project: &str, before_ms: u64) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE project = ?1 AND updated_ms < ?2",
            kind.table()
        );
        self.with(|c| {
            let n = c
                .execute(&sql, params![project, before_ms as i64])
                .map_err(|e| self.err(e))?;
            Ok(n as u64)
        })
    }

    fn forget_kept_stored(&self, kind: Kept) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE id IN (SELECT id FROM tasks)",
            kind.table()
        );
        self.with(|c| {
            let n = c.execute(&sql, []).map_err(|e| self.err(e))?;
            Ok(n as u64)
        })
    }

    fn put_note(&self, n: &crate::Note) -> Result<(), StoreError> {
        let words = crate::note_words(&n.text, &n.about).join(" ");
        let body = n.body.to_string();
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            tx.execute(
                "INSERT INTO notes (id, project, owner, text, words, body, status, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (id) DO UPDATE SET text = excluded.text, words = excluded.words,
                    body = excluded.body, status = excluded.status, updated_ms = excluded.updated_ms",
                params![
                    n.id,
                    n.project,
                    n.owner,
                    n.text,
                    words,
                    body,
                    n.status.as_str(),
                    n.created_ms as i64,
                    n.updated_ms as i64
                ],
            )
            .map_err(|e| self.err(e))?;
            tx.execute("DELETE FROM notes_fts WHERE id = ?1", params![n.id])
                .map_err(|e| self.err(e))?;
            tx.execute(
                "INSERT INTO notes_fts (id, words) VALUES (?1, ?2)",
                params![n.id, words],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))
        })
    }

    fn notes(&self, project: &str) -> Result<Vec<crate::Note>, StoreError> {
        self.read(|c| {
            let mut q = c
                .prepare_cached("SELECT * FROM notes WHERE project = ?1 ORDER BY created_ms, id")
                .map_err(|e| self.err(e))?;
            q.query_map(params![project], note_row)
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))
        })
    }

    fn note(&self, id: &str) -> Result<Option<crate::Note>, StoreError> {
        self.read(|c| {
            c.query_row("SELECT * FROM notes WHERE id = ?1", params![id], note_row)
                .optional()
                .map_err(|e| self.err(e))
        })
    }

    fn search_notes(
        &self,
        project: &str,
        owner: &str,
        words: &[String],
        limit: usize,
    ) -> Result<Vec<crate::Note>, StoreError> {
        if words.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let query = fts_any(words);
        self.read(|c| {
            // No note to find (most projects): the full-text index is not
            // opened for it.
            let any: bool = c
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM notes WHERE project = ?1 AND status = 'usable')",
                )
                .and_then(|mut q| q.query_row([project], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            if !any {
                return Ok(Vec::new());
            }
            let mut q = c
                .prepare_cached(
                    "SELECT n.* FROM notes_fts f JOIN notes n ON n.id = f.id
                     WHERE notes_fts MATCH ?1 AND n.project = ?2 AND n.status = 'usable'
                       AND (n.owner = '' OR n.owner = ?3)
                     ORDER BY bm25(notes_fts), n.created_ms DESC, n.id LIMIT ?4",
                )
                .map_err(|e| self.err(e))?;
            let found = q
                .query_map(
                    params![query, project, owner, crate::NOTE_CANDIDATES as i64],
                    note_row,
                )
                .map_err(|e| self.err(e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.err(e))?;
            Ok(crate::rank_notes(found, words, limit))
        })
    }

    fn forget_kept(&self, kind: Kept, id: &str) -> Result<bool, StoreError> {
        let sql = format!("DELETE FROM {} WHERE id = ?1", kind.table());
        self.with(|c| {
            let n = c.execute(&sql, params![id]).map_err(|e| self.err(e))?;
            Ok(n > 0)
        })
    }

    fn put_task_file(
        &self,
        task: &str,
        file: &TaskFile<'_>,
        holder: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let relaxed = !file.durable;
            if relaxed {
                c.execute_batch("PRAGMA synchronous = NORMAL")
                    .map_err(|e| self.err(e))?;
            }
            let done = self.put_task_file_in(c, task, file, holder, now_ms);
            if relaxed {
                c.execute_batch("PRAGMA synchronous = FULL")
                    .map_err(|e| self.err(e))?;
            }
            done
        })
    }

    fn task_file(&self, task: &str, name: &str) -> Result<Option<String>, StoreError> {
        self.read(|c| {
            c.query_row(
                "SELECT body FROM task_files WHERE task_id = ?1 AND name = ?2",
                params![task, name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
        })
    }

    fn blob(&self, task: &str, sha256: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(|c| {
            c.query_row(
                "SELECT bytes FROM blobs WHERE task_id = ?1 AND sha256 = ?2",
                [task, sha256],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
        })
    }

    /// Revoke the token with public id `id`; `false` when there is none
    /// live.
    fn revoke_token(&self, id: &str, now_ms: u64) -> Result<bool, StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "UPDATE tokens SET revoked_ms = ?2 WHERE id = ?1 AND revoked_ms IS NULL",
                    params![id, now_ms as i64],
                )
                .map_err(|e| self.err(e))?;
            Ok(n > 0)
        })
    }
}

/// A kept statement keeps its plan. SQLite's build here may plan from a
/// bound value (`SQLITE_ENABLE_STAT4`): such a statement (the last `seq`
/// of a task's entries, every append) is compiled again each time it is
/// bound. The store never gathers the statistics that would use the value,
/// so the plan cannot change: the query planner's stability guarantee
/// keeps it.
fn steady_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(drop)
}

/// A file's device and inode, if it is there.
#[allow(clippy::disallowed_methods)] // the database file's identity only
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A kept record from its row (`id, owner, body, updated_ms, holder`).
fn kept_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<DraftRecord> {
    Ok(DraftRecord {
        id: r.get(0)?,
        owner: r.get(1)?,
        body: r.get(2)?,
        updated_ms: r.get::<_, i64>(3)? as u64,
        holder: r.get(4)?,
    })
}

/// The parents of tasks stored before migration 9 made their column (as
/// `parent_of` reads them: text, no NUL in it).
const PARENTS_FILLED: &str =
    "UPDATE tasks SET parent = json_extract(request, '$.delegation.from.parent')
     WHERE json_valid(request) AND json_type(request, '$.delegation.from.parent') = 'text'
       AND instr(json_extract(request, '$.delegation.from.parent'), char(0)) = 0;";

/// SQLite's full-text index of memory notes (made with migration 8, made
/// again with migration 9): diacritics kept, as PostgreSQL's `simple`
/// configuration keeps them, so both engines find the same notes for the
/// same words (`café` is not `cafe` in either).
pub(crate) const MEMORY_INDEX: &str = "CREATE VIRTUAL TABLE notes_fts USING fts5(id UNINDEXED, words, tokenize = 'unicode61 remove_diacritics 0');";

/// Migration 9's remaking of the notes' index, every note in it again.
const MEMORY_INDEX_AGAIN: &str = "DROP TABLE IF EXISTS notes_fts;
     CREATE VIRTUAL TABLE notes_fts USING fts5(id UNINDEXED, words, tokenize = 'unicode61 remove_diacritics 0');
     INSERT INTO notes_fts (id, words) SELECT id, words FROM notes;";

fn note_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<crate::Note> {
    let (body, status): (String, String) = (r.get("body")?, r.get("status")?);
    Ok(crate::Note::from_columns(
        r.get("id")?,
        r.get("project")?,
        r.get("owner")?,
        r.get("text")?,
        (&body, &status),
        r.get("created_ms")?,
        r.get("updated_ms")?,
    ))
}

/// An FTS5 query that matches any of `words` (each quoted: no operator a
/// note's words could smuggle in).
fn fts_any(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" OR ")
}
