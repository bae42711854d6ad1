//! The ledger: an append-only JSON Lines file in which every entry's hash
//! covers the previous entry's hash and its own canonical content.
//!
//! An entry: `{seq, prev, kind, payload, at}`; its `hash` is SHA-256 over the
//! RFC 8785 canonical JSON of exactly those five fields. The genesis entry
//! (`seq` 0, `prev` all zeros) is a `task_started` event that binds the
//! chain to the task id and the locked contract hash. Each append is
//! flushed and fsynced before it returns, unless the ledger is a copy of
//! one kept durably elsewhere ([`FileLedger::defer_sync`]: the runtime's
//! store), which is synced once, before a receipt names it.

use loop_protocol::Event;
#[cfg(test)]
use loop_protocol::hash::canonical_sha256;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The `prev` of the genesis entry.
pub const GENESIS_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hashed part of an entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryBody {
    /// Position, from 0.
    pub seq: u64,
    /// Hash of the previous entry.
    pub prev: String,
    /// Event kind.
    pub kind: String,
    /// Event payload.
    pub payload: serde_json::Value,
    /// RFC 3339 UTC time of recording.
    pub at: String,
}

use loop_protocol::LedgerEntry;

/// The hashed part of an entry, borrowed: what the fast hash is held to.
#[cfg(test)]
#[derive(Serialize)]
struct EntryBodyRef<'a> {
    seq: u64,
    prev: &'a str,
    kind: &'a str,
    payload: &'a serde_json::Value,
    at: &'a str,
}

/// The part of `e` its hash covers.
#[cfg(test)]
fn body(e: &LedgerEntry) -> EntryBodyRef<'_> {
    EntryBodyRef {
        seq: e.seq,
        prev: &e.prev,
        kind: &e.kind,
        payload: &e.payload,
        at: &e.at,
    }
}

/// The hash of `e`'s body (its five fields but `hash`), as
/// `canonical_sha256` of the body gives it,
/// written straight into the hasher: its members in canonical order (`at`,
/// `kind`, `payload`, `prev`, `seq`) and the payload by
/// [`loop_protocol::hash::write_canonical_value`] (no sorted copies).
fn body_sha256(e: &LedgerEntry) -> Result<String, loop_protocol::hash::CanonicalError> {
    use loop_protocol::hash::{CanonicalError, CanonicalHasher, write_canonical_value};
    let mut h = CanonicalHasher::default();
    let w = h.writer();
    let io = |e: std::io::Error| CanonicalError(serde_json::Error::io(e));
    let text = |w: &mut _, s: &str| serde_json::to_writer(w, s).map_err(CanonicalError);
    w.write_all(b"{\"at\":").map_err(io)?;
    text(&mut *w, &e.at)?;
    w.write_all(b",\"kind\":").map_err(io)?;
    text(&mut *w, &e.kind)?;
    w.write_all(b",\"payload\":").map_err(io)?;
    write_canonical_value(w, &e.payload)?;
    w.write_all(b",\"prev\":").map_err(io)?;
    text(&mut *w, &e.prev)?;
    w.write_all(b",\"seq\":").map_err(io)?;
    loop_protocol::hash::write_canonical_number(w, Some(e.seq as f64))?;
    w.write_all(b"}").map_err(io)?;
    h.finish_hex()
}

/// A ledger failure.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Filesystem.
    #[error("ledger {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// An event could not be encoded.
    #[error("cannot encode ledger entry: {0}")]
    Encode(String),
}

/// Why a ledger line could not be read as an entry (the chain breaks
/// there).
struct Unreadable(String);

/// An append-only ledger file.
pub struct FileLedger {
    path: PathBuf,
    file: std::fs::File,
    next_seq: u64,
    head: String,
    /// Each entry is synced as it is written (else: on [`FileLedger::sync`]).
    sync_each: bool,
}

impl FileLedger {
    /// Create a new ledger at `path` (it must not exist).
    #[allow(clippy::disallowed_methods)] // the runtime's own ledger file in its task directory
    pub fn create(path: &Path) -> Result<FileLedger, LedgerError> {
        let io = |source| LedgerError::Io {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        Ok(FileLedger {
            path: path.to_path_buf(),
            file,
            next_seq: 0,
            head: GENESIS_PREV.to_string(),
            sync_each: true,
        })
    }

    /// Continue the chain whose entries so far are `entries` (from the
    /// store, which is authoritative): the file is rewritten to exactly those
    /// entries (atomically), then appended to. The links are checked first.
    #[allow(clippy::disallowed_methods)] // the runtime's own ledger file in its task directory
    pub fn continue_from(path: &Path, entries: &[LedgerEntry]) -> Result<FileLedger, LedgerError> {
        let head = linked(entries, "stored entry")?;
        let io = |source| LedgerError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut text = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut text, e).map_err(|x| LedgerError::Encode(x.to_string()))?;
            text.push(b'\n');
        }
        let tmp = path.with_extension("jsonl.tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&text).map_err(io)?;
            f.sync_data().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io)?;
        Ok(FileLedger {
            path: path.to_path_buf(),
            file,
            next_seq: entries.len() as u64,
            head,
            sync_each: true,
        })
    }

    /// Stop syncing each entry as it is written: for a copy of a ledger
    /// kept durably elsewhere (the runtime's store, from which this file is
    /// rewritten on resume). [`FileLedger::sync`] makes it durable.
    pub fn defer_sync(&mut self) {
        self.sync_each = false;
    }

    /// Make every entry written so far durable.
    pub fn sync(&mut self) -> Result<(), LedgerError> {
        self.file.sync_data().map_err(|source| LedgerError::Io {
            path: self.path.display().to_string(),
            source,
        })
    }

    /// The entry that would come next for `event` at `unix_ms` (not yet written).
    pub fn next_entry(&self, event: &Event, unix_ms: u64) -> Result<LedgerEntry, LedgerError> {
        seal_entry(self.next_seq, &self.head, event, unix_ms)
    }

    /// Append an event recorded at `unix_ms`; durable when this returns.
    pub fn append(&mut self, event: &Event, unix_ms: u64) -> Result<LedgerEntry, LedgerError> {
        let entry = self.next_entry(event, unix_ms)?;
        self.write(entry)
    }

    /// Write an entry made by [`FileLedger::next_entry`]; durable when this
    /// returns (unless syncs are deferred).
    pub fn write(&mut self, entry: LedgerEntry) -> Result<LedgerEntry, LedgerError> {
        if entry.seq != self.next_seq || entry.prev != self.head {
            return Err(LedgerError::Encode(format!(
                "entry {} does not follow entry {}",
                entry.seq,
                self.next_seq as i64 - 1
            )));
        }
        let mut line =
            serde_json::to_vec(&entry).map_err(|e| LedgerError::Encode(e.to_string()))?;
        line.push(b'\n');
        let io = |source| LedgerError::Io {
            path: self.path.display().to_string(),
            source,
        };
        self.file.write_all(&line).map_err(io)?;
        if self.sync_each {
            self.file.sync_data().map_err(io)?;
        }
        self.next_seq += 1;
        self.head = entry.hash.clone();
        Ok(entry)
    }

    /// Every entry written so far, read back from the file, each link and
    /// hash checked and the last one this ledger's head: what a store that
    /// lost the tail of its record is given back
    /// (`StoreLedger`'s write-back in the runtime).
    #[allow(clippy::disallowed_methods)] // the runtime's own ledger file in its task directory
    pub fn written(&mut self) -> Result<Vec<LedgerEntry>, LedgerError> {
        let io = |source| LedgerError::Io {
            path: self.path.display().to_string(),
            source,
        };
        self.file.flush().map_err(io)?;
        let text = std::fs::read(&self.path).map_err(io)?;
        let mut entries = Vec::with_capacity(self.next_seq as usize);
        for (n, line) in text.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let e: LedgerEntry = serde_json::from_slice(line).map_err(|x| {
                LedgerError::Encode(format!("{} line {}: {x}", self.path.display(), n + 1))
            })?;
            entries.push(e);
        }
        let head = linked(&entries, "entry")?;
        if entries.len() as u64 != self.next_seq || head != self.head {
            return Err(LedgerError::Encode(format!(
                "{} holds {} entries ending at {head}, not the {} written ending at {}",
                self.path.display(),
                entries.len(),
                self.next_seq,
                self.head
            )));
        }
        Ok(entries)
    }

    /// Hash of the last entry.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.next_seq
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.next_seq == 0
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The head of `entries` when each is at its place from the genesis, links
/// to the one before and hashes to its own hash; else which one does not
/// (`what` names them for the message).
fn linked(entries: &[LedgerEntry], what: &str) -> Result<String, LedgerError> {
    let mut head = GENESIS_PREV.to_string();
    for (i, e) in entries.iter().enumerate() {
        let hash = body_sha256(e).map_err(|x| LedgerError::Encode(x.to_string()))?;
        if e.seq != i as u64 || e.prev != head || e.hash != hash {
            return Err(LedgerError::Encode(format!(
                "{what} {i} does not continue the chain (seq {}, prev or hash mismatch)",
                e.seq
            )));
        }
        head = e.hash.clone();
    }
    Ok(head)
}

/// Make entry `seq` after `prev` for `event` at `unix_ms`.
pub fn seal_entry(
    seq: u64,
    prev: &str,
    event: &Event,
    unix_ms: u64,
) -> Result<LedgerEntry, LedgerError> {
    let (kind, payload) = event
        .to_kind_payload()
        .map_err(|e| LedgerError::Encode(e.to_string()))?;
    let mut entry = LedgerEntry {
        seq,
        prev: prev.to_string(),
        kind,
        payload,
        at: loop_protocol::time::rfc3339_millis(unix_ms),
        hash: String::new(),
    };
    entry.hash = body_sha256(&entry).map_err(|e| LedgerError::Encode(e.to_string()))?;
    Ok(entry)
}

/// The result of checking a ledger entry by entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainReport {
    /// Entries read that verified.
    pub intact_entries: u64,
    /// Hash of the last verified entry.
    pub head: String,
    /// The first broken entry and why.
    pub broken: Option<(u64, String)>,
    /// The entries, for replay and cross-checks (up to the break).
    pub entries: Vec<LedgerEntry>,
}

impl ChainReport {
    /// Whether every entry verified.
    pub fn intact(&self) -> bool {
        self.broken.is_none()
    }
}

/// Verify a ledger file entry by entry.
pub fn verify_chain(path: &Path) -> Result<ChainReport, LedgerError> {
    let data = crate::read::read_regular(path, crate::read::MAX_READ).map_err(|source| {
        LedgerError::Io {
            path: path.display().to_string(),
            source,
        }
    })?;
    Ok(verify_chain_bytes(&data))
}

/// [`verify_chain`] over a ledger's bytes already read.
pub fn verify_chain_bytes(data: &[u8]) -> ChainReport {
    let mut lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    // Parsing and hashing each entry is independent work: spread it over
    // the cores, then walk the chain in order.
    let parse = |line: &[u8]| -> Result<(LedgerEntry, String), Unreadable> {
        let entry: LedgerEntry = serde_json::from_slice(line)
            .map_err(|e| Unreadable(format!("not a ledger entry: {e}")))?;
        let hash = body_sha256(&entry).map_err(|e| Unreadable(e.to_string()))?;
        Ok((entry, hash))
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let chunk = lines.len().div_ceil(workers).max(1);
    let parsed: Vec<Result<(LedgerEntry, String), Unreadable>> = std::thread::scope(|scope| {
        let handles: Vec<_> = lines
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(|l| parse(l)).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![Err(Unreadable("a verification thread failed".into()))]
                })
            })
            .collect()
    });
    let mut report = ChainReport {
        intact_entries: 0,
        head: GENESIS_PREV.to_string(),
        broken: None,
        entries: Vec::with_capacity(parsed.len()),
    };
    for (i, item) in parsed.into_iter().enumerate() {
        let i = i as u64;
        let (entry, recomputed) = match item {
            Ok(pair) => pair,
            Err(Unreadable(why)) => {
                report.broken = Some((i, why));
                break;
            }
        };
        if entry.seq != i {
            report.broken = Some((
                i,
                format!("sequence number {} where {i} was expected", entry.seq),
            ));
            break;
        }
        if entry.prev != report.head {
            report.broken = Some((
                i,
                "its `prev` does not match the previous entry's hash".into(),
            ));
            break;
        }
        if recomputed != entry.hash {
            report.broken = Some((i, "its content does not match its hash".into()));
            break;
        }
        if i == 0 && entry.kind != "task_started" {
            report.broken = Some((0, "the genesis entry is not `task_started`".into()));
            break;
        }
        report.head = entry.hash.clone();
        report.intact_entries += 1;
        report.entries.push(entry);
    }
    if report.broken.is_none() && report.intact_entries == 0 {
        report.broken = Some((0, "the ledger is empty".into()));
    }
    report
}

#[cfg(test)]
mod body_hash_tests {
    use super::*;

    #[test]
    fn the_fast_body_hash_is_the_canonical_hash_of_the_body() {
        let payloads = [
            serde_json::json!({}),
            serde_json::json!({"z": 1, "a": [1.5, -0.0, 1e21, 12345678901234567890u64], "é": "\u{1}\"\\/"}),
            serde_json::json!({"\u{10000}": null, "\u{e000}": true, "b": {"y": "x", "x": "y"}}),
        ];
        for (i, payload) in payloads.into_iter().enumerate() {
            let e = LedgerEntry {
                seq: [0, 7, u64::MAX][i],
                prev: GENESIS_PREV.into(),
                kind: "kind\n\u{7f}".into(),
                payload,
                at: "2026-12-04T00:00:00Z".into(),
                hash: String::new(),
            };
            assert_eq!(
                body_sha256(&e).unwrap(),
                canonical_sha256(&body(&e)).unwrap()
            );
        }
    }
}
