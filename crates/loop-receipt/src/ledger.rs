//! The ledger: an append-only JSON Lines file in which every entry's hash
//! covers the previous entry's hash and its own canonical content.
//!
//! An entry: `{seq, prev, kind, payload, at}`; its `hash` is SHA-256 over the
//! RFC 8785 canonical JSON of exactly those five fields. Each line is the
//! canonical JSON of the entry with its `hash` (six members), so a
//! verifier hashes a line's own bytes less its `hash` member, decoding
//! nothing; a line in any other form (an older ledger's) is decoded and
//! canonicalised, with the same result. The genesis entry
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
/// `canonical_sha256` of the body gives it, written straight into the
/// hasher (see [`write_entry`]).
fn body_sha256(e: &LedgerEntry) -> Result<String, loop_protocol::hash::CanonicalError> {
    let mut h = loop_protocol::hash::CanonicalHasher::default();
    write_entry(h.writer(), e, None)?;
    h.finish_hex()
}

/// `e` as its ledger line holds it (without the line's end): the
/// canonical JSON of its six members.
fn line_of(e: &LedgerEntry) -> Result<Vec<u8>, LedgerError> {
    let mut line = Vec::with_capacity(256 + e.kind.len());
    write_entry(&mut line, e, Some(&e.hash)).map_err(|x| LedgerError::Encode(x.to_string()))?;
    Ok(line)
}

/// Write `e` as canonical JSON: its members in canonical order (`at`,
/// `hash` when given, `kind`, `payload`, `prev`, `seq`), the payload by
/// [`loop_protocol::hash::write_canonical_value`] (no sorted copies).
/// Without `hash` this is its body, what its hash covers.
fn write_entry<W: Write>(
    w: &mut W,
    e: &LedgerEntry,
    hash: Option<&str>,
) -> Result<(), loop_protocol::hash::CanonicalError> {
    use loop_protocol::hash::{CanonicalError, write_canonical_value};
    let io = |e: std::io::Error| CanonicalError(serde_json::Error::io(e));
    let text = |w: &mut W, s: &str| serde_json::to_writer(w, s).map_err(CanonicalError);
    w.write_all(b"{\"at\":").map_err(io)?;
    text(&mut *w, &e.at)?;
    if let Some(hash) = hash {
        w.write_all(b",\"hash\":").map_err(io)?;
        text(&mut *w, hash)?;
    }
    w.write_all(b",\"kind\":").map_err(io)?;
    text(&mut *w, &e.kind)?;
    w.write_all(b",\"payload\":").map_err(io)?;
    write_canonical_value(w, &e.payload)?;
    w.write_all(b",\"prev\":").map_err(io)?;
    text(&mut *w, &e.prev)?;
    w.write_all(b",\"seq\":").map_err(io)?;
    loop_protocol::hash::write_canonical_number(w, Some(e.seq as f64))?;
    w.write_all(b"}").map_err(io)
}

/// What the chain needs of a line written by [`line_of`], read from its
/// bytes: its place, link, kind and hash, and the hash of its body.
struct Stored<'a> {
    seq: u64,
    prev: &'a str,
    kind: &'a str,
    hash: &'a str,
    body_hash: String,
}

/// [`Stored`] of `line` when it is exactly what [`line_of`] writes: the
/// canonical JSON of the six members, its `at`, `hash`, `kind` and `prev`
/// strings without escapes, its payload canonical as
/// [`loop_protocol::hash::canonical_prefix`] judges, its `seq` an integer.
/// Then its body is its bytes less the `hash` member, byte for byte what
/// decoding and canonicalising it would give. `None` for any other line:
/// it is decoded instead (the same verdict, the long way).
fn stored_canonical(line: &[u8]) -> Option<Stored<'_>> {
    let text = std::str::from_utf8(line).ok()?;
    let mut c = Line { b: line, at: 0 };
    c.lit(b"{\"at\":")?;
    c.plain()?;
    let hash_from = c.at;
    c.lit(b",\"hash\":")?;
    let hash = c.plain()?;
    let hash_to = c.at;
    c.lit(b",\"kind\":")?;
    let kind = c.plain()?;
    c.lit(b",\"payload\":")?;
    c.at += loop_protocol::hash::canonical_prefix(text.get(c.at..)?)?;
    c.lit(b",\"prev\":")?;
    let prev = c.plain()?;
    c.lit(b",\"seq\":")?;
    let digits = line.get(c.at..line.len().checked_sub(1)?)?;
    if line.last() != Some(&b'}')
        || digits.is_empty()
        || digits.len() > 15
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits[0] == b'0' && digits.len() > 1)
    {
        return None;
    }
    let seq = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let mut h = loop_protocol::hash::Sha256Stream::default();
    h.update(&line[..hash_from]);
    h.update(&line[hash_to..]);
    Some(Stored {
        seq,
        prev,
        kind,
        hash,
        body_hash: h.finish_hex(),
    })
}

/// The hash a line's stored bytes give its body, when they are read as
/// they stand (for tests).
#[cfg(test)]
pub(crate) fn stored_for_tests(line: &[u8]) -> Option<String> {
    stored_canonical(line).map(|s| s.body_hash)
}

/// A cursor over a ledger line for [`stored_canonical`].
struct Line<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Line<'a> {
    /// Step over `s`, if it is next.
    fn lit(&mut self, s: &[u8]) -> Option<()> {
        self.b[self.at..].starts_with(s).then(|| self.at += s.len())
    }

    /// A string next, without escapes or control characters: its text.
    fn plain(&mut self) -> Option<&'a str> {
        let rest = self.b.get(self.at..)?.strip_prefix(b"\"")?;
        let end = rest.iter().position(|b| *b == b'"')?;
        let text = &rest[..end];
        if text.iter().any(|b| *b == b'\\' || *b < 0x20) {
            return None;
        }
        self.at += end + 2;
        std::str::from_utf8(text).ok()
    }
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
        Self::rewrite(path, entries, line_of)
    }

    /// [`FileLedger::continue_from`], the file's lines in the form earlier
    /// versions wrote (members in the order `seq, prev, kind, payload,
    /// at, hash`): the same entries, the same chain, the bytes a receipt
    /// they signed names (see `loop_runtime`'s receipt brought from the
    /// store).
    pub fn continue_in_older_form(
        path: &Path,
        entries: &[LedgerEntry],
    ) -> Result<FileLedger, LedgerError> {
        Self::rewrite(path, entries, |e| {
            serde_json::to_vec(e).map_err(|x| LedgerError::Encode(x.to_string()))
        })
    }

    #[allow(clippy::disallowed_methods)] // the runtime's own ledger file in its task directory
    fn rewrite(
        path: &Path,
        entries: &[LedgerEntry],
        line: impl Fn(&LedgerEntry) -> Result<Vec<u8>, LedgerError>,
    ) -> Result<FileLedger, LedgerError> {
        let head = linked(entries, "stored entry")?;
        let io = |source| LedgerError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut text = Vec::new();
        for e in entries {
            text.extend(line(e)?);
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
        let mut line = line_of(&entry)?;
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
    pub entries: Entries,
}

impl ChainReport {
    /// Whether every entry verified.
    pub fn intact(&self) -> bool {
        self.broken.is_none()
    }
}

/// A verified ledger's entries (up to any break), each decoded only when
/// asked for: verification itself decodes none that it can check from
/// their stored bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entries {
    data: std::sync::Arc<Vec<u8>>,
    /// Each entry's line in `data`, and its kind.
    lines: Vec<(std::ops::Range<usize>, Box<str>)>,
}

impl Entries {
    /// How many.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The kind of entry `i`.
    pub fn kind(&self, i: usize) -> Option<&str> {
        self.lines.get(i).map(|(_, k)| &**k)
    }

    /// Entry `i`, decoded.
    pub fn get(&self, i: usize) -> Option<LedgerEntry> {
        let (span, _) = self.lines.get(i)?;
        serde_json::from_slice(&self.data[span.clone()]).ok()
    }

    /// The first entry.
    pub fn first(&self) -> Option<LedgerEntry> {
        self.get(0)
    }

    /// The last entry.
    pub fn last(&self) -> Option<LedgerEntry> {
        self.get(self.len().checked_sub(1)?)
    }

    /// Every entry of `kind`, decoded, in order.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = LedgerEntry> + 'a {
        (0..self.len())
            .filter(move |i| self.kind(*i) == Some(kind))
            .filter_map(|i| self.get(i))
    }

    /// Every entry, decoded, in order.
    pub fn to_vec(&self) -> Vec<LedgerEntry> {
        (0..self.len()).filter_map(|i| self.get(i)).collect()
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
    Ok(verify_chain_bytes(data))
}

/// What the chain needs of one line, however it was read.
struct Checked {
    seq: u64,
    prev: String,
    kind: Box<str>,
    hash: String,
    recomputed: String,
}

/// One line checked: from its stored canonical bytes when it is in the
/// form the ledger writes, else decoded and its body canonicalised.
fn check_line(line: &[u8]) -> Result<Checked, Unreadable> {
    if let Some(s) = stored_canonical(line) {
        return Ok(Checked {
            seq: s.seq,
            prev: s.prev.to_string(),
            kind: s.kind.into(),
            hash: s.hash.to_string(),
            recomputed: s.body_hash,
        });
    }
    let entry: LedgerEntry =
        serde_json::from_slice(line).map_err(|e| Unreadable(format!("not a ledger entry: {e}")))?;
    let recomputed = body_sha256(&entry).map_err(|e| Unreadable(e.to_string()))?;
    Ok(Checked {
        seq: entry.seq,
        prev: entry.prev,
        kind: entry.kind.into(),
        hash: entry.hash,
        recomputed,
    })
}

/// [`verify_chain`] over a ledger's bytes already read.
pub fn verify_chain_bytes(data: Vec<u8>) -> ChainReport {
    let mut lines: Vec<std::ops::Range<usize>> = Vec::new();
    let mut from = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            lines.push(from..i);
            from = i + 1;
        }
    }
    if from < data.len() {
        lines.push(from..data.len());
    }
    // Each line is checked on its own: spread them over the cores, then
    // walk the chain in order.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let chunk = lines.len().div_ceil(workers).max(1);
    let checked: Vec<Result<Checked, Unreadable>> = std::thread::scope(|scope| {
        let handles: Vec<_> = lines
            .chunks(chunk)
            .map(|part| {
                let data = &data;
                scope.spawn(move || {
                    part.iter()
                        .map(|r| check_line(&data[r.clone()]))
                        .collect::<Vec<_>>()
                })
            })
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
        entries: Entries::default(),
    };
    let mut kept = Vec::with_capacity(checked.len());
    for ((i, item), span) in checked.into_iter().enumerate().zip(lines) {
        let i = i as u64;
        let c = match item {
            Ok(c) => c,
            Err(Unreadable(why)) => {
                report.broken = Some((i, why));
                break;
            }
        };
        if c.seq != i {
            report.broken = Some((
                i,
                format!("sequence number {} where {i} was expected", c.seq),
            ));
            break;
        }
        if c.prev != report.head {
            report.broken = Some((
                i,
                "its `prev` does not match the previous entry's hash".into(),
            ));
            break;
        }
        if c.recomputed != c.hash {
            report.broken = Some((i, "its content does not match its hash".into()));
            break;
        }
        if i == 0 && &*c.kind != "task_started" {
            report.broken = Some((0, "the genesis entry is not `task_started`".into()));
            break;
        }
        report.head = c.hash;
        report.intact_entries += 1;
        kept.push((span, c.kind));
    }
    if report.broken.is_none() && report.intact_entries == 0 {
        report.broken = Some((0, "the ledger is empty".into()));
    }
    report.entries = Entries {
        data: std::sync::Arc::new(data),
        lines: kept,
    };
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
