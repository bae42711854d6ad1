//! `loop ci-check`: what a reviewer's CI asks of a pull request that says
//! an agent did its work. The receipts it brings (`.loop-receipts/`, the
//! files beside each in `.loop/receipts/`, see docs/ci.md) are
//! read out of git at the head commit, regular files only, and each is
//! verified offline against the keys the *base* commit trusts (its
//! Loopfile's `receipts.trust`, and `--pubkey`): a pull request cannot
//! bring the key that signs its own receipt. Then the change set each
//! receipt signs must be exactly the pull request's diff for the paths it
//! covers (the content and mode each had at the base, and has at the
//! head), every path the diff changes must be covered by one receipt
//! (unless `--allow-uncovered`), and every receipt must record a verified
//! task.
//!
//! Everything read from the pull request is hostile input: a link, a
//! submodule or a name that is no plain path under `.loop-receipts/` is
//! refused by name, a file over 64 MiB is refused before it is read.

use crate::Error;
use loop_protocol::hash::sha256_hex;
use loop_receipt::PublicKey;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a pull request brings its receipts.
pub const RECEIPTS_DIR: &str = ".loop-receipts";

/// The largest file read out of git.
const MAX_BLOB: u64 = 64 << 20;
/// The most read out of git for the receipts in all.
const MAX_RECEIPTS_BYTES: u64 = 256 << 20;

/// What to check.
#[derive(Debug, Clone)]
pub struct CiCheckRequest {
    /// The repository.
    pub project: PathBuf,
    /// The pull request's base (a commit, branch or tag).
    pub base: String,
    /// Its head.
    pub head: String,
    /// More trusted public keys (PEM files), besides the base's.
    pub pubkeys: Vec<PathBuf>,
    /// Paths the diff changes that no receipt covers are said, not failed.
    pub allow_uncovered: bool,
    /// Run each verified receipt's checks again, in the sandbox and with
    /// no model, on the pull request's head tree.
    pub replay: bool,
}

/// One receipt the pull request brings, and what was found of it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CiReceipt {
    /// Its path in the repository.
    pub path: String,
    /// The task it records (when it could be read).
    pub task_id: Option<String>,
    /// Signature, statement, ledger and artifacts hold, by a trusted key.
    pub intact: bool,
    /// It records a verified task.
    pub verified: bool,
    /// The paths its change set covers.
    pub covers: Vec<String>,
    /// The artifacts it attests (shipped beside it as `ID.artifacts/…`).
    pub artifacts: Vec<String>,
    /// Addenda beside it that count for nothing, each with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stray: Vec<String>,
    /// The commit its task began from, when that is not in the pull
    /// request's history (a receipt of work on another tree: its checks
    /// passed there; `--replay` runs them on this one). Said, not failed:
    /// its change is still checked path by path against the diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub began_elsewhere: Option<String>,
    /// With `--replay`: whether its checks passed again on the pull
    /// request's tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
    /// The contract it locked, and its SHA-256 (to replay).
    #[serde(skip)]
    pub contract: Option<(loop_protocol::Contract, String)>,
    /// The task that delegated to it, when it is a child task.
    #[serde(skip)]
    pub parent: Option<String>,
    /// Its direct children, as its own verified tree names them.
    #[serde(skip)]
    pub direct: Vec<String>,
    /// The child tasks below it (at every depth) whose receipts came with
    /// it: checked as its tree, their files its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// What is wrong with it (nothing: it passes).
    pub problems: Vec<String>,
}

/// What `loop ci-check` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CiCheck {
    /// The base commit, resolved.
    pub base: String,
    /// The head commit, resolved.
    pub head: String,
    /// The key ids trusted.
    pub trusted: Vec<String>,
    /// Each receipt.
    pub receipts: Vec<CiReceipt>,
    /// Paths the diff changes that no receipt covers.
    pub uncovered: Vec<String>,
    /// What is wrong beyond single receipts.
    pub problems: Vec<String>,
    /// Every receipt holds, records a verified task and matches the diff,
    /// and nothing is uncovered (or that is allowed).
    pub ok: bool,
}

/// One path the diff changes: what it was and is (`None`: absent), as
/// (git mode, blob id).
#[derive(Debug, Clone)]
struct Changed {
    before: Option<(String, String)>,
    after: Option<(String, String)>,
}

/// `git -C project ARGS`: its output, or what it said.
fn git(project: &Path, args: &[&str]) -> Result<Vec<u8>, Error> {
    crate::project::commits::git_output(project, args)
}

/// The commit `rev` names.
fn commit(project: &Path, rev: &str) -> Result<String, Error> {
    if rev.starts_with('-') || rev.is_empty() {
        return Err(Error::usage(format!("`{rev}` is not a revision")));
    }
    let out = git(
        project,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|_| Error::usage(format!("`{rev}` names no commit here")))?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// A blob's bytes, refused past [`MAX_BLOB`] before it is read.
fn blob(project: &Path, id: &str) -> Result<Vec<u8>, Error> {
    let size: u64 = String::from_utf8_lossy(&git(project, &["cat-file", "-s", id])?)
        .trim()
        .parse()
        .unwrap_or(u64::MAX);
    if size > MAX_BLOB {
        return Err(Error::usage(format!(
            "blob {id} is {size} bytes, more than the {MAX_BLOB} read"
        )));
    }
    git(project, &["cat-file", "blob", id])
}

/// The paths the diff from `base` to `head` changes (no rename
/// detection: a rename is a deletion and an addition).
fn diff(project: &Path, base: &str, head: &str) -> Result<BTreeMap<String, Changed>, Error> {
    let raw = git(
        project,
        &[
            "diff",
            "--raw",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            base,
            head,
        ],
    )?;
    let mut out = BTreeMap::new();
    let mut parts = raw.split(|b| *b == 0).filter(|p| !p.is_empty());
    while let (Some(meta), Some(path)) = (parts.next(), parts.next()) {
        let meta = String::from_utf8_lossy(meta);
        let f: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        if f.len() < 5 {
            return Err(Error::internal(format!("git diff said `{meta}`")));
        }
        let side =
            |mode: &str, id: &str| (mode != "000000").then(|| (mode.to_string(), id.to_string()));
        let path = String::from_utf8(path.to_vec()).map_err(|_| {
            Error::usage(format!(
                "the diff changes a path that is not UTF-8: {}",
                String::from_utf8_lossy(path)
            ))
        })?;
        out.insert(
            path,
            Changed {
                before: side(f[0], f[2]),
                after: side(f[1], f[3]),
            },
        );
    }
    Ok(out)
}

/// The keys the base commit's Loopfile trusts (`receipts.trust`: a PEM,
/// or a path in the base commit to one), and those of `pubkeys`.
fn trusted(project: &Path, base: &str, pubkeys: &[PathBuf]) -> Result<Vec<PublicKey>, Error> {
    let mut keys = Vec::new();
    for p in pubkeys {
        keys.extend(crate::ops::receipts::trusted_keys(Some(p))?);
    }
    let Ok(text) = git(project, &["show", &format!("{base}:Loopfile.yaml")]) else {
        return Ok(keys);
    };
    let text = String::from_utf8(text)
        .map_err(|_| Error::usage("the base's Loopfile.yaml is not UTF-8"))?;
    let loopfile = crate::loopfile::Loopfile::parse(&text, &format!("{base}:Loopfile.yaml"))?;
    for entry in &loopfile.receipts_trust {
        let pem = if entry.trim_start().starts_with("-----BEGIN") {
            entry.clone()
        } else {
            let bytes = git(project, &["show", &format!("{base}:{entry}")]).map_err(|_| {
                Error::usage(format!(
                    "receipts.trust: the base commit has no file {entry}"
                ))
            })?;
            String::from_utf8(bytes)
                .map_err(|_| Error::usage(format!("receipts.trust: {entry} is not text")))?
        };
        keys.push(
            PublicKey::parse(&pem)
                .map_err(|e| Error::usage(format!("receipts.trust: {entry}: {e}")))?,
        );
    }
    Ok(keys)
}

/// The receipts the diff adds or changes at the top of
/// `.loop-receipts/` (their names there), and any it brings further down
/// (which are never read: said).
fn brought(changed: &BTreeMap<String, Changed>) -> (Vec<String>, Vec<String>) {
    let mut top = Vec::new();
    let mut deeper = Vec::new();
    for (path, c) in changed {
        let Some(rel) = path.strip_prefix(&format!("{RECEIPTS_DIR}/")) else {
            continue;
        };
        if c.after.is_none() || !rel.ends_with(".receipt.json") {
            continue;
        }
        if rel.contains('/') {
            deeper.push(path.clone());
        } else {
            top.push(rel.to_string());
        }
    }
    (top, deeper)
}

/// The task id a receipt's name says (`ID.receipt.json`).
fn task_of(name: &str) -> &str {
    name.strip_suffix(".receipt.json").unwrap_or(name)
}

/// Write into `into` (as a project's `.loop/receipts`) the head's files
/// under `.loop-receipts/` that belong to the receipts `names` (`ID.*`,
/// `ID.artifacts/…`) or that the diff changes: regular files only.
#[allow(clippy::disallowed_methods)] // a private directory the runtime made
fn materialise(
    project: &Path,
    head: &str,
    into: &Path,
    (names, changed): (&[String], &BTreeMap<String, Changed>),
) -> Result<(), Error> {
    let listing = git(
        project,
        &[
            "ls-tree",
            "-r",
            "-z",
            "--full-tree",
            head,
            "--",
            RECEIPTS_DIR,
        ],
    )?;
    let mut total = 0u64;
    for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let Some((meta, path)) = entry.split_once('\t') else {
            continue;
        };
        let rel = path.strip_prefix(&format!("{RECEIPTS_DIR}/")).unwrap_or("");
        let wanted = changed.contains_key(path)
            || names
                .iter()
                .any(|n| rel.starts_with(&format!("{}.", task_of(n))));
        if !wanted {
            continue;
        }
        let f: Vec<&str> = meta.split(' ').collect();
        let plain = !rel.is_empty()
            && Path::new(rel)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
            && !rel.chars().any(char::is_control);
        if f.len() < 3 || !matches!(f[0], "100644" | "100755") || !plain {
            return Err(Error::usage(format!(
                "{path}: not a regular file with a plain name (mode {}); a receipt's folder holds only files",
                f.first().copied().unwrap_or("?")
            )));
        }
        let bytes = blob(project, f[2])?;
        total += bytes.len() as u64;
        if total > MAX_RECEIPTS_BYTES {
            return Err(Error::usage(format!(
                "the receipts this pull request brings hold more than {MAX_RECEIPTS_BYTES} bytes"
            )));
        }
        let to = into.join(rel);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(Error::from_cause)?;
        }
        std::fs::write(&to, bytes).map_err(Error::from_cause)?;
    }
    Ok(())
}

/// The commit the pull request's branch left `base` at: its diff is
/// measured from there, so commits the base gained since are not its.
fn fork_point(project: &Path, base: &str, head: &str) -> Result<String, Error> {
    let out = git(project, &["merge-base", base, head]).map_err(|e| {
        Error::usage(format!(
            "{base} and {head} share no history here (a shallow clone needs fetch-depth 0): {}",
            e.message
        ))
    })?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// A `--pubkey` inside the repository's checkout could be the pull
/// request's own (CI checks out its head): refused, naming it.
fn outside_checkout(project: &Path, key: &Path) -> Result<(), Error> {
    let root = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf());
    let key_at = key.canonicalize().unwrap_or_else(|_| key.to_path_buf());
    if key_at.starts_with(&root) {
        return Err(Error::usage(format!(
            "--pubkey {} is inside the repository's checkout, which may be the pull request's own: give a key from outside it (or from the base: `git show BASE:PATH > FILE`), or list it in the base commit's Loopfile under receipts.trust",
            key.display()
        )));
    }
    Ok(())
}

/// Check the pull request from `req.base` to `req.head`.
#[allow(clippy::disallowed_methods)] // a private temporary directory the runtime made
pub fn ci_check(req: &CiCheckRequest) -> Result<CiCheck, Error> {
    let base = commit(&req.project, &req.base)?;
    let head = commit(&req.project, &req.head)?;
    for k in &req.pubkeys {
        outside_checkout(&req.project, k)?;
    }
    let keys = trusted(&req.project, &base, &req.pubkeys)?;
    if keys.is_empty() {
        return Err(Error::usage(
            "no key is trusted: give --pubkey FILE, or list the signing keys in the base commit's Loopfile.yaml under receipts.trust",
        ));
    }
    let from = fork_point(&req.project, &base, &head)?;
    let changed = diff(&req.project, &from, &head)?;
    let (names, deeper) = brought(&changed);
    let dir = std::env::temp_dir()
        .join(loop_sandbox::unique_name("loop-ci-check").map_err(Error::from_cause)?);
    let receipts_dir = dir.join(".loop").join("receipts");
    std::fs::create_dir_all(&receipts_dir).map_err(Error::from_cause)?;
    let result = (|| {
        materialise(&req.project, &head, &receipts_dir, (&names, &changed))?;
        let mut receipts = Vec::new();
        for name in &names {
            let path = format!("{RECEIPTS_DIR}/{name}");
            receipts.push(check_one(
                (&req.project, &head),
                &receipts_dir.join(name),
                path,
                &keys,
                &changed,
            )?);
        }
        Ok::<_, Error>(receipts)
    })();
    let _ = loop_workspace::remove_tree(&dir);
    let mut receipts = trees(result?);
    if req.replay {
        for r in receipts
            .iter_mut()
            .filter(|r| r.verified && r.problems.is_empty())
        {
            let Some(contract) = r.contract.clone() else {
                continue;
            };
            let failed = replay_on_head(&req.project, &head, &contract)?;
            r.replayed = Some(failed.is_empty());
            r.problems.extend(failed);
        }
    }
    let mut check = judge(req, (base, head), &keys, receipts, &changed);
    for d in deeper {
        check.problems.push(format!(
            "{d}: a receipt is read only at the top of {RECEIPTS_DIR}/, so this one is not checked"
        ));
        check.ok = false;
    }
    Ok(check)
}

/// The receipts as trees: a child task's receipt that came with its
/// parent's (at any depth) is not checked on its own — its change is
/// part of its parent's, merged, and the parent's receipt verifies it as
/// its tree — but is listed with the top receipt, its files that one's.
fn trees(receipts: Vec<CiReceipt>) -> Vec<CiReceipt> {
    // A child only when its parent's receipt, verified, names it as its
    // child: a receipt that merely says it has a parent here is checked
    // on its own like any other.
    let named: BTreeMap<String, Vec<String>> = receipts
        .iter()
        .filter_map(|r| Some((r.task_id.clone()?, r.direct.clone())))
        .collect();
    let parent_of: BTreeMap<String, String> = receipts
        .iter()
        .filter_map(|r| Some((r.task_id.clone()?, r.parent.clone()?)))
        .filter(|(id, p)| named.get(p).is_some_and(|kids| kids.contains(id)))
        .collect();
    let ids: std::collections::BTreeSet<String> =
        receipts.iter().filter_map(|r| r.task_id.clone()).collect();
    let here = |id: &str| ids.contains(id);
    // The top of `id`'s tree among the receipts here (itself if none).
    let top = |id: &str| {
        let mut at = id.to_string();
        for _ in 0..=loop_protocol::delegation::MAX_DEPTH {
            match parent_of.get(&at) {
                Some(p) if here(p) => at = p.clone(),
                _ => break,
            }
        }
        at
    };
    let mut below: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut tops = std::collections::BTreeSet::new();
    for id in &ids {
        let t = top(id);
        // Under a top that is one (never in a loop of receipts naming
        // each other, which are each checked on their own).
        if t != *id && top(&t) == t {
            below.entry(t).or_default().push(id.clone());
        } else {
            tops.insert(id.clone());
        }
    }
    receipts
        .into_iter()
        .filter(|r| r.task_id.as_ref().is_none_or(|id| tops.contains(id)))
        .map(|mut r| {
            if let Some(id) = r.task_id.as_deref() {
                r.children = below.remove(id).unwrap_or_default();
            }
            // A child task's contract is its parent's model's, confirmed
            // by no person: its receipt covers a change only within its
            // parent's verified tree, never alone.
            if let Some(p) = &r.parent {
                r.problems.push(format!(
                    "it records a child task of {p}, whose contract {p}'s model wrote and no person confirmed: a child's receipt counts only with its parent's, verified and naming it"
                ));
            }
            r
        })
        .collect()
}

/// The pull request's head tree, `.loop-receipts/` left out, written
/// into `into`.
fn head_tree(project: &Path, head: &str, into: &Path) -> Result<(), Error> {
    // (The CI job's own checkout: bounded only by its disk.)
    crate::project::commits::write_tree(project, head, into, u64::MAX)?;
    let _ = loop_workspace::remove_tree(&into.join(RECEIPTS_DIR));
    Ok(())
}

/// Run a receipt's checks (its locked `contract`) again on the pull
/// request's head tree, in the sandbox with no network and no
/// model: what failed (nothing: all passed).
#[allow(clippy::disallowed_methods)] // a private directory the runtime made
fn replay_on_head(
    project: &Path,
    head: &str,
    (contract, sha): &(loop_protocol::Contract, String),
) -> Result<Vec<String>, Error> {
    let dir = std::env::temp_dir()
        .join(loop_sandbox::unique_name("loop-ci-replay").map_err(Error::from_cause)?);
    let result = (|| {
        let tree = dir.join("tree");
        head_tree(project, head, &tree)?;
        let replayed = loop_verifier::SnapshotVerifier::new(&tree, &dir.join("scratch"))
            .with_sandbox(loop_sandbox::Settings::default())
            .verify(contract, sha, 1)
            .map_err(Error::from_cause)?;
        Ok(replayed
            .criteria
            .iter()
            .filter(|c| !c.passed)
            .map(|c| {
                let why = c
                    .checks
                    .iter()
                    .find(|k| !k.passed)
                    .and_then(|k| k.failure.clone())
                    .unwrap_or_else(|| "failed".into());
                format!(
                    "replayed on the pull request's tree, criterion `{}` fails: {why}",
                    c.id
                )
            })
            .collect())
    })();
    let _ = loop_workspace::remove_tree(&dir);
    result
}

/// The verdict over every receipt and the diff.
fn judge(
    req: &CiCheckRequest,
    (base, head): (String, String),
    keys: &[PublicKey],
    receipts: Vec<CiReceipt>,
    changed: &BTreeMap<String, Changed>,
) -> CiCheck {
    let mut problems = Vec::new();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for r in &receipts {
        for p in &r.covers {
            if let Some(other) = owner.insert(p, &r.path) {
                problems.push(format!(
                    "{p} is covered by two receipts: {other} and {}",
                    r.path
                ));
            }
        }
    }
    // A receipt's own files (receipt, ledger, patch, the artifacts it
    // attests, its addenda) are its; anything else under the folder, as
    // anywhere, needs a receipt that covers it.
    let own = |p: &str| {
        let rel = p.strip_prefix(&format!("{RECEIPTS_DIR}/")).unwrap_or("");
        receipts.iter().any(|r| {
            let Some(id) = r.task_id.as_deref() else {
                return false;
            };
            let tree_file = |id: &str| {
                rel == format!("{id}.receipt.json")
                    || rel == format!("{id}.ledger.jsonl")
                    || rel == format!("{id}.changes.patch")
            };
            tree_file(id)
                || r.children.iter().any(|c| tree_file(c))
                || r.artifacts
                    .iter()
                    .any(|a| rel == format!("{id}.artifacts/{a}"))
                // An addendum only when it is one about this receipt,
                // signed by a trusted key (a stray one needs covering).
                || (rel.starts_with(&format!("{id}.addendum-"))
                    && rel.ends_with(".json")
                    && !rel.contains('/')
                    && !r.stray.iter().any(|x| x.starts_with(&format!("{rel}:"))))
        })
    };
    let uncovered: Vec<String> = changed
        .keys()
        .filter(|p| !owner.contains_key(p.as_str()) && !own(p))
        .cloned()
        .collect();
    if receipts.is_empty() {
        problems.push(format!(
            "the pull request brings no receipt (none added or changed under {RECEIPTS_DIR}/)"
        ));
    }
    if !uncovered.is_empty() && !req.allow_uncovered {
        problems.push(format!(
            "{} changed path(s) no receipt covers (--allow-uncovered accepts them): {}",
            uncovered.len(),
            uncovered.join(", ")
        ));
    }
    let ok = problems.is_empty() && receipts.iter().all(|r| r.problems.is_empty());
    CiCheck {
        base,
        head,
        trusted: keys.iter().map(|k| k.keyid.clone()).collect(),
        receipts,
        uncovered,
        problems,
        ok,
    }
}

/// Verify one receipt and match its change set to the diff.
fn check_one(
    (project, head): (&Path, &str),
    file: &Path,
    path: String,
    keys: &[PublicKey],
    changed: &BTreeMap<String, Changed>,
) -> Result<CiReceipt, Error> {
    let check = match crate::ops::receipts::verify_with_keys(file, keys) {
        Ok(c) => c,
        // Not a receipt at all: said of it, under its name in the repository.
        Err(e) => {
            let why = e.message.replace(&file.display().to_string(), &path);
            return Ok(CiReceipt {
                path,
                task_id: None,
                intact: false,
                verified: false,
                covers: Vec::new(),
                artifacts: Vec::new(),
                stray: Vec::new(),
                began_elsewhere: None,
                replayed: None,
                contract: None,
                parent: None,
                direct: Vec::new(),
                children: Vec::new(),
                problems: vec![why],
            });
        }
    };
    let mut problems: Vec<String> = check.report.problems();
    let statement = check.report.statement.clone();
    if check.intact && !check.verified {
        let outcome = statement
            .as_ref()
            .map(|s| s.predicate.outcome.to_string())
            .unwrap_or_default();
        problems.push(format!(
            "it records a task that ended {outcome}, not verified"
        ));
    }
    let mut covers = Vec::new();
    if let Some(s) = &statement {
        for f in &s.predicate.change_set.files {
            covers.push(f.path.clone());
            if let Some(why) = mismatch(project, f, changed.get(&f.path))? {
                problems.push(format!("{}: {why}", f.path));
            }
        }
    }
    let artifacts = statement
        .as_ref()
        .map(|s| {
            s.predicate
                .artifacts
                .iter()
                .map(|a| a.as_str().to_string())
                .collect()
        })
        .unwrap_or_default();
    // Where its task began: in this pull request's history, or not.
    let began_elsewhere = statement
        .as_ref()
        .and_then(|s| s.predicate.change_set.base_commit.clone())
        .filter(|c| {
            // (A commit this clone lacks, a shallow one's, is not said: a
            // rebase is not what that shows.)
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_hexdigit())
                && git(project, &["cat-file", "-e", &format!("{c}^{{commit}}")]).is_ok()
                && git(project, &["merge-base", "--is-ancestor", c, head]).is_err()
        });
    Ok(CiReceipt {
        path,
        artifacts,
        began_elsewhere,
        replayed: None,
        contract: statement.as_ref().map(|s| {
            (
                s.predicate.contract.clone(),
                s.predicate.contract_sha256.clone(),
            )
        }),
        stray: check.stray_addenda.clone(),
        parent: statement
            .as_ref()
            .and_then(|s| s.predicate.delegation.as_ref())
            .map(|d| d.parent.clone()),
        direct: check
            .report
            .children
            .iter()
            .map(|c| c.task_id.clone())
            .collect(),
        children: Vec::new(),
        task_id: statement.map(|s| s.predicate.task_id),
        intact: check.intact,
        verified: check.verified,
        covers,
        problems,
    })
}

/// How the pull request's change to a path differs from what the receipt
/// signs (`None`: it is exactly that).
fn mismatch(
    project: &Path,
    f: &loop_protocol::FileChange,
    got: Option<&Changed>,
) -> Result<Option<String>, Error> {
    let Some(got) = got else {
        return Ok(Some(
            "the receipt changes it, the pull request does not".into(),
        ));
    };
    let side = |which: &str,
                want_sha: Option<&String>,
                want_mode: Option<&String>,
                have: &Option<(String, String)>|
     -> Result<Option<String>, Error> {
        Ok(match (want_sha, have) {
            (None, None) => None,
            (None, Some(_)) => Some(format!(
                "the receipt says it is absent {which}, the pull request has it"
            )),
            (Some(_), None) => Some(format!(
                "the receipt says it is present {which}, the pull request has none"
            )),
            (Some(want), Some((mode, id))) => {
                let sha = sha256_hex(&blob(project, id)?);
                if sha != *want {
                    Some(format!(
                        "its content {which} is {sha}, the receipt signs {want}"
                    ))
                } else if want_mode.map(String::as_str).unwrap_or("100644") != mode {
                    // (A receipt that records no mode signs a plain file.)
                    Some(format!(
                        "its mode {which} is {mode}, the receipt signs {}",
                        want_mode.map(String::as_str).unwrap_or("100644")
                    ))
                } else {
                    None
                }
            }
        })
    };
    if let Some(why) = side(
        "at the base",
        f.before_sha256.as_ref(),
        f.before_mode.as_ref(),
        &got.before,
    )? {
        return Ok(Some(why));
    }
    side(
        "at the head",
        f.after_sha256.as_ref(),
        f.after_mode.as_ref(),
        &got.after,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(id: &str, parent: Option<&str>, direct: &[&str]) -> CiReceipt {
        CiReceipt {
            path: format!("{RECEIPTS_DIR}/{id}.receipt.json"),
            task_id: Some(id.into()),
            intact: true,
            verified: true,
            covers: Vec::new(),
            artifacts: Vec::new(),
            stray: Vec::new(),
            began_elsewhere: None,
            replayed: None,
            contract: None,
            parent: parent.map(str::to_string),
            direct: direct.iter().map(|d| d.to_string()).collect(),
            children: Vec::new(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn a_child_is_its_parents_only_when_the_parents_tree_names_it() {
        let got = trees(vec![
            receipt("p", None, &["c"]),
            receipt("c", Some("p"), &["g"]),
            receipt("g", Some("c"), &[]),
            // Says it is p's child; p's verified tree does not name it.
            receipt("sneaky", Some("p"), &[]),
            // Two that name each other: neither is under the other.
            receipt("x", Some("y"), &["y"]),
            receipt("y", Some("x"), &["x"]),
            // Its parent's receipt did not come with it.
            receipt("orphan", Some("elsewhere"), &[]),
        ]);
        let tops: Vec<(&str, Vec<String>)> = got
            .iter()
            .map(|r| (r.task_id.as_deref().unwrap(), r.children.clone()))
            .collect();
        assert_eq!(
            tops,
            [
                ("p", vec!["c".to_string(), "g".to_string()]),
                ("sneaky", vec![]),
                ("x", vec![]),
                ("y", vec![]),
                ("orphan", vec![]),
            ]
        );
        // A child checked alone counts for nothing: its contract is a
        // model's; the whole tree under its parent is fine.
        for r in &got {
            let alone = r.parent.is_some();
            assert_eq!(
                r.problems
                    .iter()
                    .any(|p| p.contains("counts only with its parent's")),
                alone,
                "{:?}: {:?}",
                r.task_id,
                r.problems
            );
        }
    }
}
