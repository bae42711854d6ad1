//! Receipts: an in-toto Statement v1 about the task's artifacts and ledger,
//! in a DSSE envelope. This build writes the envelope unsigned (an empty
//! `signatures` list) and says so when verifying; Ed25519 signatures slot
//! into the same envelope over the same PAE bytes.

use crate::keys::{KeyPair, PublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use loop_protocol::LedgerEntry;
use loop_protocol::hash::{canonical_json, canonical_sha256, sha256_hex};
use loop_protocol::{
    BudgetUse, Contract, Isolation, Limits, ModelInfo, OutcomeRecord, RelPath, RuntimeInfo,
    VerificationReport,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The DSSE payload type of an in-toto Statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// This project's predicate type (versioned).
pub const PREDICATE_TYPE: &str = "https://loop-engine.dev/attestation/receipt/v0.1";

/// A DSSE envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// `application/vnd.in-toto+json`.
    pub payload_type: String,
    /// Base64 of the canonical Statement.
    pub payload: String,
    /// Signatures over PAE(payloadType, payload).
    pub signatures: Vec<Signature>,
}

/// One DSSE signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    /// Key id.
    pub keyid: String,
    /// Base64 signature.
    pub sig: String,
}

/// DSSE pre-authentication encoding: `DSSEv1 SP len(type) SP type SP len(body) SP body`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// An in-toto Statement v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// Artifacts and the ledger, with digests.
    pub subject: Vec<Subject>,
    /// [`PREDICATE_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// What happened.
    pub predicate: Predicate,
}

/// A subject: a named file and its digests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    /// File name (artifact path, or the ledger file name).
    pub name: String,
    /// `{"sha256": hex}`.
    pub digest: BTreeMap<String, String>,
}

/// A file changed by the task, against the baseline (one type across the
/// runtime).
pub use loop_protocol::FileChange as Change;

/// What the task changed: the files, the base it started from, and the
/// unified diff shipped beside the receipt (`<task>.changes.patch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSetRecord {
    /// The git commit the task's worktree started from, if any.
    pub base_commit: Option<String>,
    /// Changed files.
    pub files: Vec<Change>,
    /// The patch file's name beside the receipt.
    pub patch: String,
    /// Its SHA-256.
    pub patch_sha256: String,
    /// The SHA-256 of the patch before secrets in it were redacted (when
    /// any were): what was really changed stays identified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unredacted_patch_sha256: Option<String>,
}

/// A dependency environment the task shared read-only (a venv,
/// `node_modules`): where, and the content digest it was verified against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedEnvironment {
    /// Its path in the project and in the workspace, `/`-separated.
    pub path: String,
    /// The Merkle root of its content (links and modes included).
    pub sha256: String,
    /// Regular files in it.
    pub files: u64,
    /// Shared copy-on-write (build outputs: the task's and each check's
    /// writes landed in layers of their own), not read-only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overlay: bool,
    /// Where its content lives, relative to the project, when not at
    /// `path` (the layer a setup step made: `.loop/layers/KEY/tree/.venv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Set when the environment changed while the task ran (someone
    /// outside the task changed it): its root at the end. The result was
    /// verified against one of the two, and the receipt cannot say which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_to: Option<String>,
}

impl SharedEnvironment {
    /// Where its content lives, relative to the project.
    pub fn content_path(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.path)
    }
}

/// The egress allow-lists a task ran with and what crossed them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkReport {
    /// Hosts commands could reach (presets expanded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Hosts setup steps could reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// Hosts checks could reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// Names the runtime pinned to an address (`[host, "ip:port"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolve: Vec<(String, String)>,
    /// Attempts the proxy let through.
    pub allowed: u64,
    /// Attempts it refused.
    pub refused: u64,
    /// Every attempt, with the ledger entry that records it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<RecordedEgress>,
}

/// One egress attempt as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedEgress {
    /// The ledger entry (`seq`) holding it.
    pub seq: u64,
    /// Who asked: `run_command <call id>`, `check <criterion>#<index>`,
    /// `setup <index>`.
    pub by: String,
    /// The attempt.
    #[serde(flatten)]
    pub attempt: loop_protocol::EgressAttempt,
}

impl NetworkReport {
    /// The report of a ledger (JSON Lines): the attempts of its command
    /// observations, setup steps and verifications, under the lists (and
    /// pins) of `lists`; `None` when no list was set and nothing was
    /// attempted.
    pub fn from_ledger(ledger: &[u8], lists: NetworkReport) -> Option<NetworkReport> {
        let mut r = NetworkReport {
            allowed: 0,
            refused: 0,
            attempts: Vec::new(),
            ..lists
        };
        for line in ledger.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(entry) = serde_json::from_slice::<loop_protocol::LedgerEntry>(line) else {
                continue;
            };
            let Ok(event) = loop_protocol::Event::from_kind_payload(&entry.kind, &entry.payload)
            else {
                continue;
            };
            let mut found: Vec<(String, loop_protocol::EgressAttempt)> = Vec::new();
            match event {
                loop_protocol::Event::Observed { observation, .. } => {
                    let by = format!("{} {}", observation.tool, observation.call_id);
                    let attempts = observation.egress.map(|b| *b).unwrap_or_default();
                    found.extend(attempts.into_iter().map(|a| (by.clone(), a)));
                }
                loop_protocol::Event::Verified { report, .. } => {
                    for c in report.criteria {
                        for check in c.checks {
                            let by = format!("check {}#{}", check.criterion, check.index);
                            found.extend(check.egress.into_iter().map(|a| (by.clone(), a)));
                        }
                    }
                }
                loop_protocol::Event::TaskStarted {
                    setup: Some(setup), ..
                } => {
                    for (i, step) in setup.steps.into_iter().enumerate() {
                        let by = format!("setup {}", i + 1);
                        found.extend(step.egress.into_iter().map(|a| (by.clone(), a)));
                    }
                }
                _ => {}
            }
            for (by, attempt) in found {
                if attempt.allowed {
                    r.allowed += 1;
                } else {
                    r.refused += 1;
                }
                r.attempts.push(RecordedEgress {
                    seq: entry.seq,
                    by,
                    attempt,
                });
            }
        }
        let nothing = r.commands.is_empty()
            && r.setup.is_empty()
            && r.checks.is_empty()
            && r.attempts.is_empty();
        (!nothing).then_some(r)
    }
}

/// Budgets granted and used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budgets {
    /// Granted.
    pub granted: Limits,
    /// Used.
    pub used: BudgetUse,
}

/// Who produced the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// This runtime.
    pub runtime: RuntimeInfo,
    /// The model (the maker).
    pub model: ModelInfo,
    /// The checker that reviewed accepted work, if one was configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checker: Option<ModelInfo>,
}

/// Where the ledger is and what it must hash to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRef {
    /// File name beside the receipt.
    pub name: String,
    /// Hash of the last entry.
    pub head: String,
    /// Number of entries.
    pub length: u64,
}

/// The receipt predicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicate {
    /// Task id.
    pub task_id: String,
    /// The locked contract.
    pub contract: Contract,
    /// Its hash.
    pub contract_sha256: String,
    /// How it ended.
    pub outcome: OutcomeRecord,
    /// The last verification's evidence, per criterion and artifact.
    pub verification: Option<VerificationReport>,
    /// The same checks on the workspace before any change: what already
    /// held, so the receipt shows what the work changed.
    #[serde(default)]
    pub baseline: Option<VerificationReport>,
    /// The check-integrity set the task ran under: files that define what
    /// the checks mean, protected like the contract's `protected` globs
    /// (less the contract's `allow_check_changes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_integrity: Vec<loop_protocol::IntegrityRule>,
    /// Required artifacts shipped with the receipt.
    pub artifacts: Vec<RelPath>,
    /// Dependency environments shared read-only, with the digests the
    /// result was verified against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<SharedEnvironment>,
    /// Merkle root of the workspace at the start.
    pub baseline_root: String,
    /// Merkle root of the workspace at the end.
    pub final_root: String,
    /// What changed, against the baseline.
    pub change_set: ChangeSetRecord,
    /// Budgets.
    pub budgets: Budgets,
    /// Runtime and model.
    pub provenance: Provenance,
    /// Isolation the checks actually ran under.
    pub isolation: Option<Isolation>,
    /// The project's setup steps as the task got them (run, or a cached
    /// layer taken), keyed on its lockfiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<loop_protocol::SetupRecord>,
    /// The network the task's commands, setup steps and checks had: the
    /// allow-lists and every connection asked of the egress proxy (absent
    /// when nothing had an allow-list: no network at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkReport>,
    /// The ledger.
    pub ledger: LedgerRef,
    /// When the receipt was made.
    pub created_at: String,
    /// For a child task (see `loop_protocol::delegation`): its parent and
    /// the authority the parent granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegation: Option<loop_protocol::delegation::DelegatedFrom>,
    /// The skills the task used: each bundle's name and digest, who signed
    /// it (none: the project's own pattern), and what of its asks was in
    /// force and what was dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<loop_protocol::skill::SkillRecord>,
}

/// A receipt failure.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    /// Filesystem.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a receipt.
    #[error("{path} is not a Loop Engine receipt: {why}")]
    Format {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ReceiptError + '_ {
    move |source| ReceiptError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Write `statement` as an unsigned DSSE envelope to `path`.
pub fn write_envelope(
    path: &Path,
    statement: &Statement,
    key: Option<&KeyPair>,
) -> Result<(), ReceiptError> {
    let keys: Vec<&KeyPair> = key.into_iter().collect();
    write_dsse(path, statement, &keys)
}

/// Write any in-toto statement as a DSSE envelope, signed by `key`.
#[allow(clippy::disallowed_methods)] // the receipt the runtime signs, written where its caller chose
pub fn write_dsse<T: Serialize>(
    path: &Path,
    statement: &T,
    keys: &[&KeyPair],
) -> Result<(), ReceiptError> {
    let payload = canonical_json(statement).map_err(|e| ReceiptError::Format {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    // DSSE signs the pre-authentication encoding of the raw payload bytes.
    let signatures = keys
        .iter()
        .map(|k| Signature {
            keyid: k.keyid().to_string(),
            sig: k.sign_b64(&pae(PAYLOAD_TYPE, &payload)),
        })
        .collect();
    let env = Envelope {
        payload_type: PAYLOAD_TYPE.into(),
        payload: B64.encode(payload),
        signatures,
    };
    let mut text = serde_json::to_string_pretty(&env).map_err(|e| ReceiptError::Format {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    text.push('\n');
    replace_whole(path, text.as_bytes()).map_err(io_err(path))
}

/// Write `bytes` to `path` as a whole: a new file beside it (made new, so
/// nothing planted at its name is written through), synced, renamed over
/// `path`. A run killed meanwhile leaves the old file or none, never a
/// part: a receipt cut short would be refused by `loop verify`, and would
/// stand in for the store's whole one where the task ended elsewhere.
#[allow(clippy::disallowed_methods)] // the receipt the runtime signs, written where its caller chose
fn replace_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The predicate type of an addendum.
pub const ADDENDUM_TYPE: &str = "https://loop-engine.dev/attestation/addendum/v0.1";

/// A fact learned after a receipt was signed (an apply, an undo), in its
/// own signed statement whose subject is the receipt file: the receipt
/// itself is never re-signed or edited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Addendum {
    /// [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The receipt, by name and digest.
    pub subject: Vec<Subject>,
    /// [`ADDENDUM_TYPE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// What happened.
    pub predicate: AddendumFact,
}

/// The fact an addendum records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddendumFact {
    /// The task.
    pub task_id: String,
    /// `applied`, `undone`, `signing-key-revoked` or `reported`.
    pub event: String,
    /// Where.
    pub project: String,
    /// The change set's patch digest (apply, undo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_sha256: Option<String>,
    /// The key that signed the receipt and is now revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_keyid: Option<String>,
    /// For an apply: every touched path was re-read afterwards and holds
    /// exactly the verified content and mode (`true`), checked, not assumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches_verified: Option<bool>,
    /// Set when the fact was recorded by recovery after an interrupted
    /// apply or undo (`rolled-back` or `completed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
    /// For `reported`: what the task's end was told where it was asked
    /// (GitHub: the pull request and comment made, every call's method,
    /// path, status and digests; never a token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
    /// When (RFC 3339).
    pub at: String,
}

/// Sign and write an addendum about the receipt at `receipt` next to it,
/// as `<task>.addendum-<n>.json`; returns its path.
#[allow(clippy::disallowed_methods)] // existence of addenda names in the receipts directory
pub fn write_addendum(
    receipt: &Path,
    fact: AddendumFact,
    keys: &[&KeyPair],
) -> Result<PathBuf, ReceiptError> {
    let bytes =
        crate::read::read_regular(receipt, crate::read::MAX_READ).map_err(io_err(receipt))?;
    // Named by what its signatures cover (the payload), not the file's
    // bytes: the same envelope saved again another way, or with a junk
    // signature added, is still the receipt this addendum is about.
    let bytes = payload_of(&bytes).unwrap_or(bytes);
    let name = receipt
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = receipt.parent().unwrap_or(Path::new("."));
    let mut n = 1;
    let path = loop {
        let p = dir.join(format!("{}.addendum-{n}.json", fact.task_id));
        if !p.exists() {
            break p;
        }
        n += 1;
    };
    let addendum = Addendum {
        statement_type: STATEMENT_TYPE.into(),
        subject: vec![subject(&name, &bytes)],
        predicate_type: ADDENDUM_TYPE.into(),
        predicate: fact,
    };
    write_dsse(&path, &addendum, keys)?;
    Ok(path)
}

/// How many entries of an `--artifacts` directory are looked at, at most:
/// a directory of millions of names (or a deep chain of them) is reported
/// as not listed in full, never walked for ever.
const MAX_ARTIFACT_ENTRIES: usize = 100_000;

/// Paths under `dir` (relative, `/`-separated) that are not among
/// `attested`: extra files, and every link or special file, named as such
/// (nothing is followed). At most [`MAX_ARTIFACT_ENTRIES`] are looked at;
/// past that, one entry says the rest were not listed (an extra too, so
/// only `--allow-extra` accepts such a directory).
fn unattested(dir: &Path, attested: &std::collections::BTreeSet<String>) -> Vec<String> {
    unattested_within(dir, attested, MAX_ARTIFACT_ENTRIES)
}

#[allow(clippy::disallowed_methods)] // names and lstat only (links reported as links, never followed)
fn unattested_within(
    dir: &Path,
    attested: &std::collections::BTreeSet<String>,
    max: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut cut = false;
    let mut todo = vec![(dir.to_path_buf(), String::new())];
    'walk: while let Some((at, rel)) = todo.pop() {
        let Ok(items) = std::fs::read_dir(&at) else {
            continue;
        };
        for item in items.flatten() {
            seen += 1;
            if seen > max {
                cut = true;
                break 'walk;
            }
            let name = item.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            match std::fs::symlink_metadata(item.path()) {
                Ok(m) if m.file_type().is_symlink() => out.push(format!("{rel} (a link)")),
                Ok(m) if m.is_dir() => todo.push((item.path(), rel)),
                Ok(m) if m.is_file() => {
                    if !attested.contains(&rel) {
                        out.push(rel);
                    }
                }
                _ => out.push(format!("{rel} (not a regular file)")),
            }
        }
    }
    out.sort();
    if cut {
        out.push(format!(
            "(more than {max} entries: the rest of the directory was not looked at)"
        ));
    }
    out
}

/// Key ids that signed addenda beside `receipt` declare revoked: only
/// addenda about this receipt (its digest), signed by a `trusted` key, with
/// the event `signing-key-revoked`. (`loop keys rotate` signs them with the
/// new key and with the revoked key itself, so whoever trusts the old key
/// learns it was revoked.)
pub fn revoked_by_addenda(receipt: &Path, trusted: &[PublicKey]) -> Vec<String> {
    addenda(receipt, trusted).revoked
}

/// What the addenda beside a receipt say (see [`addenda`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Addenda {
    /// Key ids revoked by trusted addenda about this receipt.
    pub revoked: Vec<String>,
    /// Addenda named for this receipt's task that count for nothing, each
    /// with why: not about this receipt (another digest: a re-signed or
    /// replaced receipt, or an addendum moved here), not signed by a
    /// trusted key, or not an addendum at all.
    pub stray: Vec<String>,
}

/// Every addendum beside `receipt` (`TASK.addendum-N.json`), judged.
#[allow(clippy::disallowed_methods)] // names only; each addendum's content is read through read::read_regular
pub fn addenda(receipt: &Path, trusted: &[PublicKey]) -> Addenda {
    let mut out = Addenda::default();
    let (Some(dir), Some(name), Ok(bytes)) = (
        receipt.parent(),
        receipt
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        crate::read::read_regular(receipt, crate::read::MAX_READ),
    ) else {
        return out;
    };
    let Some(task_id) = name.strip_suffix(".receipt.json") else {
        return out;
    };
    // Addenda name the receipt by its payload's digest (older ones by the
    // file's).
    let digests = [
        payload_of(&bytes).map(|p| sha256_hex(&p)),
        Some(sha256_hex(&bytes)),
    ];
    let prefix = format!("{task_id}.addendum-");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|i| i.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with(&prefix) && f.ends_with(".json"))
        .collect();
    names.sort();
    for fname in names {
        let stray = |why: &str| format!("{fname}: {why}");
        let text = match crate::read::read_regular(&dir.join(&fname), crate::read::MAX_READ) {
            Ok(t) => t,
            Err(e) => {
                out.stray
                    .push(stray(&format!("not readable as a file ({e})")));
                continue;
            }
        };
        let Some((env, payload)) = serde_json::from_slice::<Envelope>(&text)
            .ok()
            .and_then(|env| Some((B64.decode(env.payload.as_bytes()).ok()?, env)))
            .map(|(p, e)| (e, p))
        else {
            out.stray.push(stray("not a signed envelope"));
            continue;
        };
        if !matches!(
            check_signatures(&env, &payload, trusted),
            SignatureStatus::Valid { .. }
        ) {
            out.stray
                .push(stray("no trusted signature: it counts for nothing"));
            continue;
        }
        let Ok(add) = serde_json::from_slice::<Addendum>(&payload) else {
            out.stray.push(stray("not an addendum"));
            continue;
        };
        let about_this = add.subject.iter().any(|s| {
            s.digest
                .get("sha256")
                .is_some_and(|d| digests.iter().flatten().any(|x| x == d))
        });
        if !about_this {
            out.stray.push(stray(&format!(
                "about another receipt (its `{}` does not name this one's digest): it counts for nothing here",
                add.predicate.event
            )));
            continue;
        }
        if add.predicate.event == "signing-key-revoked"
            && let Some(k) = add.predicate.revoked_keyid
        {
            out.revoked.push(k);
        }
    }
    out
}

/// The payload a DSSE envelope's signatures cover, if `bytes` is one.
fn payload_of(bytes: &[u8]) -> Option<Vec<u8>> {
    let env: Envelope = serde_json::from_slice(bytes).ok()?;
    B64.decode(env.payload.as_bytes()).ok()
}

/// The SHA-256 the receipt `envelope` (its bytes, signed or not: nothing
/// is verified here) names for its ledger file, when it names one.
pub fn ledger_digest_named(envelope: &[u8]) -> Option<String> {
    let statement: Statement = serde_json::from_slice(&payload_of(envelope)?).ok()?;
    let name = &statement.predicate.ledger.name;
    statement
        .subject
        .iter()
        .find(|s| &s.name == name)
        .and_then(|s| s.digest.get("sha256").cloned())
}

/// The subject entry for a file's bytes.
pub fn subject(name: &str, bytes: &[u8]) -> Subject {
    Subject {
        name: name.to_string(),
        digest: BTreeMap::from([("sha256".to_string(), sha256_hex(bytes))]),
    }
}

/// Signature status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureStatus {
    /// No signatures in the envelope.
    Unsigned,
    /// A trusted key's signature verifies.
    Valid {
        /// The key id.
        keyid: String,
    },
    /// A trusted key's id is named but its signature does not verify.
    Invalid {
        /// The key id.
        keyid: String,
    },
    /// Signed, but by no key this verification trusts.
    UnknownKey {
        /// The key ids named.
        keyids: Vec<String>,
    },
}

/// What `loop verify` found, layer by layer.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The receipt file.
    pub receipt: PathBuf,
    /// Signature layer.
    pub signature: SignatureStatus,
    /// The statement, when it decoded.
    pub statement: Option<Statement>,
    /// Problems with the statement itself (types, contract hash).
    pub statement_problems: Vec<String>,
    /// Ledger entries that verified.
    pub ledger_entries: u64,
    /// Ledger problems (first break, mismatches with the predicate).
    pub ledger_problems: Vec<String>,
    /// Artifacts checked.
    pub artifacts_checked: usize,
    /// Artifact problems (missing or different).
    pub artifact_problems: Vec<String>,
    /// What the artifacts' directory holds that the receipt does not
    /// attest (extra files, links, anything not a regular file): a
    /// problem unless the verifier is told to accept them.
    pub extra_artifacts: Vec<String>,
    /// The ledger's entries (up to any break), for replay.
    pub entries: crate::ledger::Entries,
    /// The children the ledger records (`delegated`), each checked.
    pub children: Vec<ChildCheck>,
    /// Problems with the receipt tree: a child's receipt missing, changed
    /// since its parent recorded it, not holding, or granted more than
    /// its parent held. Each names the child.
    pub tree_problems: Vec<String>,
}

/// One child of a receipt tree, as its parent's check found it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildCheck {
    /// The child's task id.
    pub task_id: String,
    /// How it ended, as its parent recorded it.
    pub outcome: String,
    /// Its receipt holds, within its parent's authority (with its own
    /// children, at every depth).
    pub holds: bool,
}

impl VerifyReport {
    /// Whether every layer holds.
    pub fn ok(&self) -> bool {
        matches!(self.signature, SignatureStatus::Valid { .. })
            && self.statement.is_some()
            && self.statement_problems.is_empty()
            && self.ledger_problems.is_empty()
            && self.artifact_problems.is_empty()
            && self.tree_problems.is_empty()
    }

    /// Every problem of every layer, one line each (what a parent says of
    /// a child whose receipt does not hold).
    pub fn problems(&self) -> Vec<String> {
        let signature = match &self.signature {
            SignatureStatus::Valid { .. } => None,
            other => Some(format!("signature: {other:?}")),
        };
        signature
            .into_iter()
            .chain(
                self.statement_problems
                    .iter()
                    .map(|p| format!("statement: {p}")),
            )
            .chain(self.ledger_problems.iter().map(|p| format!("ledger: {p}")))
            .chain(
                self.artifact_problems
                    .iter()
                    .map(|p| format!("artifacts: {p}")),
            )
            .chain(self.tree_problems.iter().cloned())
            .collect()
    }
}

/// Verify a receipt offline: decode the envelope and statement, re-hash
/// the contract, check the ledger file's digest and its chain entry by
/// entry against the predicate, and re-hash every artifact in
/// `artifacts_dir` (default: `<task>.artifacts` beside the receipt).
pub fn verify_receipt(
    path: &Path,
    artifacts_dir: Option<&Path>,
    trusted: &[PublicKey],
) -> Result<VerifyReport, ReceiptError> {
    verify_at(path, artifacts_dir, trusted, None, 0)
}

/// [`verify_receipt`] of a receipt `depth` levels below the one asked
/// for, whose parent granted it `granted` (`None`: the top of the tree).
fn verify_at(
    path: &Path,
    artifacts_dir: Option<&Path>,
    trusted: &[PublicKey],
    granted: Option<&loop_protocol::delegation::Authority>,
    depth: u32,
) -> Result<VerifyReport, ReceiptError> {
    let fmt = |why: String| ReceiptError::Format {
        path: path.display().to_string(),
        why,
    };
    let text = crate::read::read_regular(path, crate::read::MAX_READ).map_err(io_err(path))?;
    let env: Envelope =
        serde_json::from_slice(&text).map_err(|e| fmt(format!("not a DSSE envelope: {e}")))?;
    let mut report = VerifyReport {
        receipt: path.to_path_buf(),
        signature: SignatureStatus::Unsigned,
        statement: None,
        statement_problems: Vec::new(),
        ledger_entries: 0,
        ledger_problems: Vec::new(),
        artifacts_checked: 0,
        artifact_problems: Vec::new(),
        extra_artifacts: Vec::new(),
        entries: Default::default(),
        children: Vec::new(),
        tree_problems: Vec::new(),
    };
    if env.payload_type != PAYLOAD_TYPE {
        report.statement_problems.push(format!(
            "payloadType is {:?}, expected {PAYLOAD_TYPE:?}",
            env.payload_type
        ));
    }
    let payload = match B64.decode(env.payload.as_bytes()) {
        Ok(p) => p,
        Err(e) => {
            report
                .statement_problems
                .push(format!("payload is not base64: {e}"));
            return Ok(report);
        }
    };
    report.signature = check_signatures(&env, &payload, trusted);
    let statement: Statement = match serde_json::from_slice(&payload) {
        Ok(s) => s,
        Err(e) => {
            report
                .statement_problems
                .push(format!("payload is not a receipt statement: {e}"));
            return Ok(report);
        }
    };
    check_statement(&mut report.statement_problems, &statement);
    let dir = path.parent().unwrap_or(Path::new("."));
    check_ledger(&mut report, &statement, dir);
    let default_artifacts = dir.join(format!("{}.artifacts", statement.predicate.task_id));
    let artifacts_dir = artifacts_dir.unwrap_or(&default_artifacts);
    check_artifacts(&mut report, &statement, dir, artifacts_dir);
    check_children(&mut report, &statement, dir, trusted, granted, depth);
    report.statement = Some(statement);
    Ok(report)
}

/// The receipt tree: every child the ledger records (`delegated`) has its
/// receipt beside this one, with the digest recorded, holding (its
/// signature, ledger, artifacts and children, checked the same way), for
/// the task recorded, with a contract and an authority within what this
/// task held. This task's own authority is what its parent granted
/// (`granted`, checked against the receipt's own record of it), else its
/// receipt's record, else its contract's.
fn check_children(
    report: &mut VerifyReport,
    statement: &Statement,
    dir: &Path,
    trusted: &[PublicKey],
    granted: Option<&loop_protocol::delegation::Authority>,
    depth: u32,
) {
    use loop_protocol::delegation::Authority;
    let p = &statement.predicate;
    let recorded = p.delegation.as_ref().map(|d| &d.authority);
    if let (Some(g), Some(r)) = (granted, recorded)
        && g != r
    {
        report
            .tree_problems
            .push("its record of the authority it was granted differs from its parent's".into());
    }
    if granted.is_some() && p.delegation.is_none() {
        report
            .tree_problems
            .push("it does not record the parent that granted it".into());
    }
    let own = granted
        .or(recorded)
        .cloned()
        .unwrap_or_else(|| Authority::of_contract(&p.contract));
    let records = (0..report.entries.len())
        .filter(|i| report.entries.kind(*i) == Some("delegated"))
        .count();
    if records > own.max_children as usize {
        report.tree_problems.push(format!(
            "it records {records} children, more than the {} it may have",
            own.max_children
        ));
    }
    let mut charged = Vec::new();
    let mut turns = Turns::default();
    // What the task had to give: its grant, or for the top task what it
    // was given in the end (a budget extended after it began).
    let budget = if granted.is_none() && recorded.is_none() {
        loop_protocol::delegation::Budget::of(&p.budgets.granted)
    } else {
        own.budget.clone()
    };
    let delegated: Vec<LedgerEntry> = report.entries.of_kind("delegated").collect();
    if delegated.len() != records {
        report
            .tree_problems
            .push("a child record of the ledger cannot be read".into());
    }
    for entry in &delegated {
        let child = match loop_protocol::Event::from_kind_payload(&entry.kind, &entry.payload) {
            Ok(loop_protocol::Event::Delegated { step, child, .. }) => {
                if let Some(why) = turns.grant(step, &child, &budget) {
                    report.tree_problems.push(why);
                }
                child
            }
            _ => {
                report.tree_problems.push(format!(
                    "ledger entry {} is not a readable child record",
                    entry.seq
                ));
                continue;
            }
        };
        let id = &child.task_id;
        let problems = check_child(&child, (p, &own), (dir, trusted), depth);
        charged.push(child.used);
        report.children.push(ChildCheck {
            task_id: id.clone(),
            outcome: child.outcome.clone(),
            holds: problems.is_empty(),
        });
        report
            .tree_problems
            .extend(problems.into_iter().map(|why| format!("child {id}: {why}")));
    }
    // What its children used was charged to it: its own use holds theirs.
    let used = &p.budgets.used;
    let steps: u64 = charged.iter().map(|u| u64::from(u.steps)).sum();
    let tokens: u64 = charged.iter().map(|u| u.tokens).sum();
    let usd: f64 = charged.iter().map(|u| u.usd).sum();
    if steps > u64::from(used.steps) || tokens > used.tokens || usd > used.usd + 1e-9 {
        report.tree_problems.push(format!(
            "its children used {steps} steps, {tokens} tokens, ${usd:.4}, more than its own record of {} steps, {} tokens, ${:.4} holds",
            used.steps, used.tokens, used.usd
        ));
    }
}

/// What a task's turns granted its children, in ledger order: each turn's
/// grants came out of what the task had left, so with what its children of
/// earlier turns used they fit in its own budget (what the task itself
/// used is not counted: a bound every honest tree keeps).
#[derive(Default)]
struct Turns {
    turn: Option<u32>,
    /// Granted in this turn: steps, tokens, dollars.
    granted: (u64, u64, f64),
    /// Used by the children of this turn, and of the turns before it.
    used_now: (u64, u64, f64),
    used_before: (u64, u64, f64),
}

impl Turns {
    /// Count `child`, granted in turn `step`; why the turn's grants no
    /// longer fit in `budget`, once they do not.
    fn grant(
        &mut self,
        step: u32,
        child: &loop_protocol::ChildRun,
        budget: &loop_protocol::delegation::Budget,
    ) -> Option<String> {
        if self.turn != Some(step) {
            let (s, t, u) = self.used_now;
            self.used_before = (
                self.used_before.0 + s,
                self.used_before.1 + t,
                self.used_before.2 + u,
            );
            self.used_now = (0, 0, 0.0);
            self.granted = (0, 0, 0.0);
            self.turn = Some(step);
        }
        let g = &child.authority.budget;
        let was_over = self.over(budget);
        self.granted.0 += u64::from(g.max_steps);
        self.granted.1 += g.max_tokens;
        self.granted.2 += g.budget_usd.unwrap_or(0.0);
        self.used_now.0 += u64::from(child.used.steps);
        self.used_now.1 += child.used.tokens;
        self.used_now.2 += child.used.usd;
        match self.over(budget) {
            Some(why) if was_over.is_none() => Some(format!(
                "its turn {step} granted its children {why} (with what earlier children used)"
            )),
            _ => None,
        }
    }

    /// What the turn's grants and the earlier use exceed of `budget`.
    fn over(&self, budget: &loop_protocol::delegation::Budget) -> Option<String> {
        let steps = self.granted.0 + self.used_before.0;
        let tokens = self.granted.1 + self.used_before.1;
        let usd = self.granted.2 + self.used_before.2;
        if steps > u64::from(budget.max_steps) {
            return Some(format!(
                "{steps} steps, more than the {} it had",
                budget.max_steps
            ));
        }
        if tokens > budget.max_tokens {
            return Some(format!(
                "{tokens} tokens, more than the {} it had",
                budget.max_tokens
            ));
        }
        match budget.budget_usd {
            Some(b) if usd > b + 1e-9 => Some(format!("${usd:.4}, more than the ${b:.4} it had")),
            _ => None,
        }
    }
}

/// Every problem of one child `child` of the task `p` describes: its
/// grant, its receipt beside it (read, hashed, verified as a tree of its
/// own), its parent named, its contract and what it used.
fn check_child(
    child: &loop_protocol::ChildRun,
    (p, own): (&Predicate, &loop_protocol::delegation::Authority),
    (dir, trusted): (&Path, &[PublicKey]),
    depth: u32,
) -> Vec<String> {
    use loop_protocol::delegation::{MAX_DEPTH, contract_within, limits_within, within};
    let id = &child.task_id;
    let mut problems: Vec<String> = Vec::new();
    for r in within(&child.authority, own) {
        problems.push(format!("granted more than its parent held: {r}"));
    }
    let plain = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let path = dir.join(format!("{id}.receipt.json"));
    match (&child.receipt_sha256, plain) {
        (_, false) => problems.push("its task id is not a plain name".into()),
        (_, _) if depth + 1 > MAX_DEPTH => problems.push(format!("deeper than {MAX_DEPTH} levels")),
        (None, _) => problems.push("its parent recorded no receipt for it".into()),
        (Some(want), true) => match crate::read::read_regular(&path, crate::read::MAX_READ) {
            Err(e) => problems.push(format!("cannot read {}: {e}", path.display())),
            Ok(bytes) if &sha256_hex(&bytes) != want => problems.push(format!(
                "its receipt's sha256 {} differs from the {want} its parent recorded",
                sha256_hex(&bytes)
            )),
            Ok(_) => match verify_at(&path, None, trusted, Some(&child.authority), depth + 1) {
                Err(e) => problems.push(e.to_string()),
                Ok(r) => {
                    problems.extend(r.problems());
                    match &r.statement {
                        Some(st) if st.predicate.task_id != *id => {
                            problems.push(format!("its receipt is task {}'s", st.predicate.task_id))
                        }
                        Some(st) => {
                            let named = st.predicate.delegation.as_ref().map(|d| &d.parent);
                            if named != Some(&p.task_id) {
                                problems.push(format!(
                                    "its receipt names {} as its parent, not {}",
                                    named.map_or("no task", String::as_str),
                                    p.task_id
                                ));
                            }
                            for why in contract_within(&st.predicate.contract, &child.authority)
                                .into_iter()
                                .chain(limits_within(
                                    &st.predicate.contract.limits,
                                    &p.contract.limits,
                                ))
                            {
                                problems.push(format!(
                                    "its contract claims more than it was granted: {why}"
                                ));
                            }
                            problems.extend(used_differs(&st.predicate.budgets.used, &child.used));
                            let ended = st.predicate.outcome.name().as_str();
                            if ended != child.outcome {
                                problems.push(format!(
                                    "it ended {ended}, its parent recorded {}",
                                    child.outcome
                                ));
                            }
                        }
                        None => {}
                    }
                }
            },
        },
    }
    problems
}

/// Where a child's receipt and its parent's record of what it used
/// disagree (the parent was charged what its record says).
fn used_differs(
    receipt: &loop_protocol::BudgetUse,
    recorded: &loop_protocol::BudgetUse,
) -> Option<String> {
    let same = receipt.steps == recorded.steps
        && receipt.tokens == recorded.tokens
        && receipt.model_calls == recorded.model_calls
        && (receipt.usd - recorded.usd).abs() < 1e-9;
    (!same).then(|| {
        format!(
            "its receipt says it used {} steps, {} tokens, {} model calls, ${:.4}; its parent recorded {} steps, {} tokens, {} model calls, ${:.4}",
            receipt.steps,
            receipt.tokens,
            receipt.model_calls,
            receipt.usd,
            recorded.steps,
            recorded.tokens,
            recorded.model_calls,
            recorded.usd
        )
    })
}

/// The statement layer: its types, the contract's hash, and an outcome of
/// `verified` that the recorded verification establishes.
fn check_statement(problems: &mut Vec<String>, statement: &Statement) {
    if statement.statement_type != STATEMENT_TYPE {
        problems.push(format!("_type is {:?}", statement.statement_type));
    }
    if statement.predicate_type != PREDICATE_TYPE {
        problems.push(format!(
            "predicateType {:?} is not understood by this build",
            statement.predicate_type
        ));
    }
    let p = &statement.predicate;
    match canonical_sha256(&p.contract) {
        Ok(h) if h == p.contract_sha256 => {}
        Ok(h) => problems.push(format!(
            "the contract hashes to {h}, not the recorded {}",
            p.contract_sha256
        )),
        Err(e) => problems.push(e.to_string()),
    }
    // The outcome follows from the evidence: a signature over `verified`
    // is not enough, the last verification it records must have passed
    // every criterion.
    if p.outcome.kind == loop_protocol::OutcomeKind::Verified {
        match &p.verification {
            None => problems
                .push("the outcome says verified, but the receipt records no verification".into()),
            // The same rule the runtime accepts by: every criterion of the
            // contract covered and passed, its artifacts there, nothing
            // protected changed, the report about this contract.
            Some(v) => {
                if let Err(why) =
                    loop_protocol::Acceptance::establish(&p.contract, &p.contract_sha256, v)
                {
                    problems.push(format!(
                        "the outcome says verified, but the recorded verification does not establish it: {why}"
                    ));
                }
            }
        }
    }
}

/// The artifact layer: re-hash every subject but the ledger (the change
/// set's patch beside the receipt, the rest in `artifacts_dir`), then
/// list what `artifacts_dir` holds that the receipt does not attest.
#[allow(clippy::disallowed_methods)] // whether the artifacts directory a person named is there
fn check_artifacts(
    report: &mut VerifyReport,
    statement: &Statement,
    dir: &Path,
    artifacts_dir: &Path,
) {
    let p = &statement.predicate;
    for s in statement.subject.iter().filter(|s| s.name != p.ledger.name) {
        report.artifacts_checked += 1;
        let want = s.digest.get("sha256").cloned().unwrap_or_default();
        let rel = match RelPath::parse(&s.name) {
            Ok(r) => r,
            Err(e) => {
                report.artifact_problems.push(format!("{}: {e}", s.name));
                continue;
            }
        };
        // The change set's patch lies beside the receipt; artifacts in their directory.
        let location = if s.name == p.change_set.patch && !s.name.contains('/') {
            dir.join(&s.name)
        } else {
            artifacts_dir.join(rel.as_str())
        };
        let read = match crate::read::link_on_the_way(artifacts_dir, Path::new(rel.as_str())) {
            Some(link) if location.starts_with(artifacts_dir) => Err(std::io::Error::other(
                format!("{link}: no artifact is read through a link"),
            )),
            _ => crate::read::read_regular(&location, crate::read::MAX_READ),
        };
        match read {
            Ok(bytes) => {
                let got = sha256_hex(&bytes);
                if got != want {
                    report.artifact_problems.push(format!(
                        "{} differs (sha256 {got}, receipt says {want})",
                        s.name
                    ));
                }
            }
            Err(e) => report.artifact_problems.push(format!(
                "{} cannot be read from {}: {e}",
                s.name,
                artifacts_dir.display()
            )),
        }
    }
    if artifacts_dir.is_dir() {
        let attested: std::collections::BTreeSet<String> = statement
            .subject
            .iter()
            .filter(|s| s.name != p.ledger.name && s.name != p.change_set.patch)
            .map(|s| s.name.clone())
            .collect();
        report.extra_artifacts = unattested(artifacts_dir, &attested);
    }
}

/// The signature layer: valid if a trusted key signed PAE(type, payload).
fn check_signatures(env: &Envelope, payload: &[u8], trusted: &[PublicKey]) -> SignatureStatus {
    if env.signatures.is_empty() {
        return SignatureStatus::Unsigned;
    }
    let message = pae(&env.payload_type, payload);
    // As DSSE says: any valid signature by a trusted key accepts the
    // envelope (a garbage signature put before it, under the same key
    // id, takes nothing away); none valid, a trusted key's bad one says
    // invalid.
    let mut invalid = None;
    for sig in &env.signatures {
        for key in trusted.iter().filter(|k| k.keyid == sig.keyid) {
            if key.verifies(&message, &sig.sig) {
                return SignatureStatus::Valid {
                    keyid: sig.keyid.clone(),
                };
            }
            invalid.get_or_insert_with(|| sig.keyid.clone());
        }
    }
    match invalid {
        Some(keyid) => SignatureStatus::Invalid { keyid },
        None => SignatureStatus::UnknownKey {
            keyids: env.signatures.iter().map(|s| s.keyid.clone()).collect(),
        },
    }
}

fn check_ledger(report: &mut VerifyReport, statement: &Statement, dir: &Path) {
    let p = &statement.predicate;
    let problems = &mut report.ledger_problems;
    let ledger_path = dir.join(&p.ledger.name);
    if p.ledger.name.contains('/') || p.ledger.name.contains("..") {
        problems.push(format!(
            "ledger name {:?} is not a plain file name",
            p.ledger.name
        ));
        return;
    }
    // Read once: its digest and its chain are of the same bytes.
    let read = crate::read::read_regular(&ledger_path, crate::read::MAX_READ);
    match statement.subject.iter().find(|s| s.name == p.ledger.name) {
        None => problems.push("the ledger is not a subject of the statement".into()),
        Some(s) => match &read {
            Ok(bytes) => {
                let got = sha256_hex(bytes);
                if Some(&got) != s.digest.get("sha256") {
                    problems.push(format!(
                        "the ledger file's sha256 {got} differs from the receipt's"
                    ));
                }
            }
            Err(e) => {
                problems.push(format!("cannot read {}: {e}", ledger_path.display()));
                return;
            }
        },
    }
    let bytes = match read {
        Ok(b) => b,
        Err(source) => {
            problems.push(
                crate::ledger::LedgerError::Io {
                    path: ledger_path.display().to_string(),
                    source,
                }
                .to_string(),
            );
            return;
        }
    };
    let chain = crate::ledger::verify_chain_bytes(bytes);
    report.ledger_entries = chain.intact_entries;
    if let Some((n, why)) = &chain.broken {
        problems.push(format!("broken at entry {n}: {why}"));
    } else {
        if chain.intact_entries != p.ledger.length {
            problems.push(format!(
                "{} entries, the receipt says {}",
                chain.intact_entries, p.ledger.length
            ));
        }
        if chain.head != p.ledger.head {
            problems.push(format!(
                "head {} differs from the receipt's {}",
                chain.head, p.ledger.head
            ));
        }
        let genesis = chain.entries.first();
        if genesis.is_none() {
            problems.push("the genesis entry cannot be read".into());
        }
        if let Some(genesis) = genesis {
            let task = genesis.payload.get("task_id").and_then(|v| v.as_str());
            let contract = genesis
                .payload
                .get("contract_sha256")
                .and_then(|v| v.as_str());
            if task != Some(p.task_id.as_str()) || contract != Some(p.contract_sha256.as_str()) {
                problems.push("the genesis entry is bound to another task or contract".into());
            }
        }
        let last = chain
            .entries
            .last()
            .and_then(|e| loop_protocol::Event::from_kind_payload(&e.kind, &e.payload).ok());
        match last {
            Some(loop_protocol::Event::Finished { outcome, .. }) => {
                if outcome != p.outcome {
                    problems.push("the ledger's final outcome differs from the receipt's".into());
                }
            }
            _ => problems.push("the ledger does not end with a `finished` entry".into()),
        }
    }
    report.entries = chain.entries;
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_nothing_planted_beside_it_is_written_through() {
        let dir = std::env::temp_dir().join(format!("loop-whole-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t-1.receipt.json");
        std::fs::write(&path, "old").unwrap();
        // A link planted at the temporary name, pointing outside.
        let outside = dir.join("outside");
        std::fs::write(&outside, "untouched").unwrap();
        let tmp = dir.join(format!(".t-1.receipt.json.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&outside, &tmp).unwrap();
        replace_whole(&path, b"new whole").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new whole");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["outside", "t-1.receipt.json"],
            "nothing left beside it"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pae_matches_the_dsse_spec_example() {
        // From the DSSE protocol document: PAE("http://example.com/HelloWorld", "hello world").
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // the test's own scratch directory
    fn an_artifacts_directory_too_big_to_list_is_reported_not_walked_for_ever() {
        let dir = std::env::temp_dir().join(format!("loop-extras-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("deep/er")).unwrap();
        for n in 0..6 {
            std::fs::write(dir.join(format!("deep/er/f{n}")), "x").unwrap();
        }
        std::fs::write(dir.join("kept.txt"), "x").unwrap();
        let attested: std::collections::BTreeSet<String> = ["kept.txt".to_string()].into();
        // Within the bound: every extra named, the attested file not.
        let all = unattested_within(&dir, &attested, 100);
        assert_eq!(all.len(), 6, "{all:?}");
        assert!(all.iter().all(|e| e.starts_with("deep/er/f")), "{all:?}");
        // Past it: the walk stops, and says so as an extra of its own.
        let cut = unattested_within(&dir, &attested, 4);
        assert!(cut.len() <= 4, "{cut:?}");
        assert_eq!(
            cut.last().map(String::as_str),
            Some("(more than 4 entries: the rest of the directory was not looked at)")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A task's receipt being assembled: each file it covers (the artifacts,
/// the change set, the ledger) becomes a subject as it is shipped; then
/// the predicate is given and the statement signed. The statement's
/// types, and the artifact list matching the shipped artifacts, are kept
/// here, once.
#[derive(Debug, Default)]
pub struct ReceiptBuilder {
    subjects: Vec<Subject>,
    artifacts: Vec<RelPath>,
}

impl ReceiptBuilder {
    /// Nothing shipped yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A required artifact was shipped with these bytes.
    pub fn artifact(&mut self, path: &RelPath, bytes: &[u8]) {
        self.subjects.push(subject(path.as_str(), bytes));
        self.artifacts.push(path.clone());
    }

    /// Another file the receipt covers (the ledger, the change set), by
    /// its name beside the receipt.
    pub fn file(&mut self, name: &str, bytes: &[u8]) {
        self.subjects.push(subject(name, bytes));
    }

    /// The statement over `predicate`, whose artifact list becomes the
    /// artifacts shipped.
    pub fn statement(self, mut predicate: Predicate) -> Statement {
        predicate.artifacts = self.artifacts;
        Statement {
            statement_type: STATEMENT_TYPE.into(),
            subject: self.subjects,
            predicate_type: PREDICATE_TYPE.into(),
            predicate,
        }
    }

    /// Write the statement over `predicate` to `path`, signed by `key`.
    pub fn write_signed(
        self,
        predicate: Predicate,
        path: &Path,
        key: &KeyPair,
    ) -> Result<Statement, ReceiptError> {
        let statement = self.statement(predicate);
        write_envelope(path, &statement, Some(key))?;
        Ok(statement)
    }
}
