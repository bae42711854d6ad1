//! The embedded SQLite backend.

use crate::{Approval, ApprovalStatus, Claim, Owner, Store, StoreError, StoredEntry, TaskRecord};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Migrations, in order; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    // 1: tasks, the ledger, approvals and questions, receipts and change sets.
    "CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        outcome TEXT,
        reason TEXT,
        contract_sha256 TEXT NOT NULL,
        request TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        owner TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0
     );
     CREATE TABLE entries (
        task_id TEXT NOT NULL REFERENCES tasks(id),
        seq INTEGER NOT NULL,
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
        created_ms INTEGER NOT NULL,
        decided_ms INTEGER,
        PRIMARY KEY (task_id, id)
     );
     CREATE TABLE receipts (
        task_id TEXT PRIMARY KEY REFERENCES tasks(id),
        path TEXT NOT NULL,
        change_set TEXT NOT NULL,
        created_ms INTEGER NOT NULL
     );
     CREATE INDEX tasks_by_state ON tasks(state);",
    // 2: the API's bearer tokens, by the SHA-256 of the token (the token
    // itself is shown once and never stored).
    "CREATE TABLE tokens (
        sha256 TEXT PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        owner TEXT NOT NULL,
        scope TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        revoked_ms INTEGER
     );",
    // 3: webhook deliveries taken, so none is taken twice.
    "CREATE TABLE deliveries (
        trigger TEXT NOT NULL,
        id TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        PRIMARY KEY (trigger, id)
     );",
];

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

impl SqliteStore {
    /// Keep a new token: its SHA-256, a public id, owner and scope.
    pub fn create_token(&self, sha256: &str, record: &TokenRecord) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO tokens (sha256, id, owner, scope, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![sha256, record.id, record.owner, record.scope, record.created_ms as i64],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    /// The live token whose SHA-256 is `sha256`, if any.
    pub fn token(&self, sha256: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.with(|c| {
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
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.with(|c| {
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
    pub fn take_delivery(&self, trigger: &str, id: &str, now_ms: u64) -> Result<bool, StoreError> {
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
    pub fn forget_delivery(&self, trigger: &str, id: &str) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "DELETE FROM deliveries WHERE trigger = ?1 AND id = ?2",
                params![trigger, id],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    /// Revoke the token with public id `id`; `false` when there is none
    /// live.
    pub fn revoke_token(&self, id: &str, now_ms: u64) -> Result<bool, StoreError> {
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
    conn: Mutex<Connection>,
}

impl SqliteStore {
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

    fn open_once(path: &Path) -> Result<SqliteStore, StoreError> {
        let shown = path.display().to_string();
        let db = |e: rusqlite::Error| StoreError::Db {
            path: shown.clone(),
            message: e.to_string(),
        };
        let conn = Connection::open(path).map_err(db)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(db)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(db)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(db)?;
        let store = SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        };
        store.migrate()?;
        Ok(store)
    }

    /// The task's current owner, read inside `tx`.
    fn owner_in(
        &self,
        tx: &rusqlite::Transaction<'_>,
        task: &str,
    ) -> Result<Option<Owner>, StoreError> {
        let current: Option<String> = tx
            .query_row("SELECT owner FROM tasks WHERE id = ?1", [task], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?
            .flatten();
        Ok(current.and_then(|o| serde_json::from_str::<Owner>(&o).ok()))
    }

    /// The schema version this build writes.
    pub fn schema_version() -> i64 {
        MIGRATIONS.len() as i64
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
        let mut guard = self.conn.lock().map_err(|_| StoreError::Db {
            path: self.path.display().to_string(),
            message: "connection lock poisoned".into(),
        })?;
        f(&mut guard)
    }

    fn migrate(&self) -> Result<(), StoreError> {
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
                tx.pragma_update(None, "user_version", i as i64 + 1)
                    .map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }
}

fn row_to_task(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRecord> {
    let request: String = r.get("request")?;
    let owner: Option<String> = r.get("owner")?;
    Ok(TaskRecord {
        id: r.get("id")?,
        state: r.get("state")?,
        outcome: r.get("outcome")?,
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
                "INSERT INTO tasks (id, state, contract_sha256, request, created_ms, updated_ms)
                 VALUES (?1, 'pending', ?2, ?3, ?4, ?4)",
                params![id, contract_sha256, request.to_string(), now_ms as i64],
            )
            .map_err(|e| self.err(e))?;
            Ok(())
        })
    }

    fn task(&self, id: &str) -> Result<TaskRecord, StoreError> {
        self.with(|c| {
            c.query_row(&format!("{TASK_SELECT} WHERE t.id = ?1"), [id], row_to_task)
                .optional()
                .map_err(|e| self.err(e))?
                .ok_or_else(|| StoreError::NoSuchTask(id.to_string()))
        })
    }

    fn tasks(&self) -> Result<Vec<TaskRecord>, StoreError> {
        self.with(|c| {
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

    fn append(
        &self,
        task: &str,
        entry: &StoredEntry,
        state: Option<&str>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let last: i64 = tx
                .query_row(
                    "SELECT COALESCE(MAX(seq), -1) FROM entries WHERE task_id = ?1",
                    [task],
                    |r| r.get(0),
                )
                .map_err(|e| self.err(e))?;
            if entry.seq as i64 != last + 1 {
                return Err(StoreError::OutOfSequence {
                    task: task.to_string(),
                    seq: entry.seq,
                    last,
                });
            }
            tx.execute(
                "INSERT INTO entries (task_id, seq, prev, kind, payload, at, hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    task,
                    entry.seq as i64,
                    entry.prev,
                    entry.kind,
                    entry.payload.to_string(),
                    entry.at,
                    entry.hash
                ],
            )
            .map_err(|e| self.err(e))?;
            match state {
                Some(s) => tx.execute(
                    "UPDATE tasks SET state = ?2, updated_ms = ?3 WHERE id = ?1",
                    params![task, s, now_ms as i64],
                ),
                None => tx.execute(
                    "UPDATE tasks SET updated_ms = ?2 WHERE id = ?1",
                    params![task, now_ms as i64],
                ),
            }
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))
        })
    }

    fn entries(&self, task: &str, from_seq: u64) -> Result<Vec<StoredEntry>, StoreError> {
        self.with(|c| {
            let mut stmt = c
                .prepare(
                    "SELECT seq, prev, kind, payload, at, hash FROM entries
                     WHERE task_id = ?1 AND seq >= ?2 ORDER BY seq",
                )
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map(params![task, from_seq as i64], |r| {
                    let payload: String = r.get(3)?;
                    Ok(StoredEntry {
                        seq: r.get::<_, i64>(0)? as u64,
                        prev: r.get(1)?,
                        kind: r.get(2)?,
                        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
                        at: r.get(4)?,
                        hash: r.get(5)?,
                    })
                })
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
        outcome: &str,
        reason: &str,
        receipt: &str,
        change_set: &serde_json::Value,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            tx.execute(
                "UPDATE tasks SET state = 'terminal', outcome = ?2, reason = ?3, owner = NULL, updated_ms = ?4
                 WHERE id = ?1",
                params![task, outcome, reason, now_ms as i64],
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

    fn approvals(&self, task: &str) -> Result<Vec<Approval>, StoreError> {
        self.with(|c| {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("loop-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join("loop.db")
    }

    fn entry(seq: u64) -> StoredEntry {
        StoredEntry {
            seq,
            prev: format!("p{seq}"),
            kind: "transition".into(),
            payload: serde_json::json!({"n": seq}),
            at: "2026-11-29T00:00:00.000Z".into(),
            hash: format!("h{seq}"),
        }
    }

    #[test]
    fn tasks_entries_and_states_round_trip_and_the_chain_cannot_fork() {
        let path = tmp("round");
        let s = SqliteStore::open(&path).unwrap();
        s.create_task("t1", "abc", &serde_json::json!({"model": "scripted:x"}), 10)
            .unwrap();
        s.append("t1", &entry(0), Some("planning"), 11).unwrap();
        s.append("t1", &entry(1), None, 12).unwrap();
        let e = s.append("t1", &entry(1), None, 13).unwrap_err();
        assert!(
            e.to_string().contains("entry 1 does not follow entry 1"),
            "{e}"
        );
        assert!(s.append("t1", &entry(5), None, 13).is_err());
        let t = s.task("t1").unwrap();
        assert_eq!(
            (t.state.as_str(), t.entries, t.request["model"].as_str()),
            ("planning", 2, Some("scripted:x"))
        );
        assert_eq!(s.entries("t1", 1).unwrap(), vec![entry(1)]);
        s.finish(
            "t1",
            "verified",
            "ok",
            "/r.json",
            &serde_json::json!({"files": 1}),
            20,
        )
        .unwrap();
        let t = s.task("t1").unwrap();
        assert_eq!(
            (t.state.as_str(), t.outcome.as_deref(), t.receipt.as_deref()),
            ("terminal", Some("verified"), Some("/r.json"))
        );
        assert!(matches!(s.task("nope"), Err(StoreError::NoSuchTask(_))));
        // Reopening keeps everything and does not re-run migrations.
        drop(s);
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.tasks().unwrap().len(), 1);
    }

    #[test]
    fn a_claim_is_exclusive_while_its_owner_lives() {
        let s = SqliteStore::open(&tmp("claim")).unwrap();
        s.create_task("t", "abc", &serde_json::json!({}), 0)
            .unwrap();
        let me = Owner::this_process("me".into(), 1_000);
        assert_eq!(s.claim("t", &me, 60_000, 1_000).unwrap(), Claim::Claimed);
        // Another claimant while we live and our lease holds: refused.
        let other = Owner::this_process("other".into(), 1_500);
        assert!(
            matches!(s.claim("t", &other, 60_000, 1_500).unwrap(), Claim::Held(o) if o.token == "me")
        );
        // Our lease lapses (no heartbeat): it can be taken, and we learn it.
        assert_eq!(
            s.claim("t", &other, 60_000, 70_000).unwrap(),
            Claim::Claimed
        );
        assert!(!s.heartbeat("t", "me", 70_001).unwrap());
        // A dead owner's claim can be taken at once.
        let dead = Owner {
            token: "dead".into(),
            pid: u32::MAX - 1,
            start_time: 1,
            heartbeat_ms: 80_000,
        };
        assert!(dead.is_dead());
        s.release("t", "other").unwrap();
        assert_eq!(s.claim("t", &dead, 60_000, 80_000).unwrap(), Claim::Claimed);
        assert_eq!(s.claim("t", &me, 60_000, 80_001).unwrap(), Claim::Claimed);
        // A cancel is recorded; a terminal task cannot be claimed or cancelled.
        assert!(s.request_cancel("t", 1).unwrap());
        assert!(s.task("t").unwrap().cancel_requested);
        s.finish("t", "cancelled", "asked", "/r", &serde_json::json!({}), 2)
            .unwrap();
        assert_eq!(s.claim("t", &me, 60_000, 3).unwrap(), Claim::Terminal);
        assert!(!s.request_cancel("t", 4).unwrap());
    }

    #[test]
    fn many_processes_may_create_the_database_at_once() {
        for round in 0..5 {
            let path = tmp(&format!("first-open-{round}"));
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let path = path.clone();
                    std::thread::spawn(move || {
                        let s = SqliteStore::open(&path).unwrap();
                        s.create_task(&format!("t{i}"), "x", &serde_json::json!({}), 0)
                            .unwrap();
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(SqliteStore::open(&path).unwrap().tasks().unwrap().len(), 8);
        }
    }

    #[test]
    fn concurrent_writers_from_many_connections_never_see_a_locked_database() {
        let path = tmp("concurrent");
        let s = SqliteStore::open(&path).unwrap();
        for t in 0..4 {
            s.create_task(&format!("t{t}"), "x", &serde_json::json!({}), 0)
                .unwrap();
        }
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let s = SqliteStore::open(&path).unwrap();
                    for seq in 0..200 {
                        s.append(&format!("t{t}"), &entry(seq), None, seq).unwrap();
                        let _ = s.tasks().unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        for t in 0..4 {
            assert_eq!(s.task(&format!("t{t}")).unwrap().entries, 200);
        }
    }
}
