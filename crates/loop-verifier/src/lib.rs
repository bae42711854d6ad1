//! # loop-verifier
//!
//! Acceptance lives here, and only here. [`SnapshotVerifier::verify`] seals
//! the task workspace (a read-only, hashed copy the model cannot reach),
//! runs each `run` check through the sandbox on its own fresh view of the
//! seal, evaluates file checks against the seal through the path jail,
//! hashes the required artifacts, and confirms the seal is still intact
//! afterwards. The report is evidence; whether it accepts the contract is
//! decided by [`Acceptance::establish`](loop_protocol::Acceptance::establish).

use loop_protocol::hash::canonical_json;
use loop_protocol::observation::head_tail;
use loop_protocol::{
    ArtifactEvidence, Check, CheckEvidence, Contract, CriterionEvidence, Isolation, RunCheck,
    StreamEvidence, TestTally, VerificationReport,
};
use loop_sandbox::{ExecRequest, ExecResult, Settings};
use loop_workspace::{Intent, Jail, Manifest, Protected, Sealed, SnapshotMethod, remove_tree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod integrity;
mod page;
pub mod tally;

/// Bytes of output kept per stream for matching (every byte is hashed).
const MATCH_BYTES: usize = 1024 * 1024;
/// Bytes of output kept per stream in the evidence excerpt.
const EXCERPT_BYTES: usize = 4096;

/// The verifier could not run at all (not: a check failed).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Sealing or making a view failed.
    #[error("cannot prepare snapshot: {0}")]
    Snapshot(std::io::Error),
    /// The sealed tree changed while checks ran.
    #[error("the sealed workspace changed during verification (expected root {0})")]
    SealBroken(String),
}

/// Seals a workspace and runs checks on fresh snapshots of it.
pub struct SnapshotVerifier {
    workspace: PathBuf,
    scratch: PathBuf,
    last_sealed: Option<Sealed>,
    guard: Option<(Manifest, Protected)>,
    sandbox: Settings,
    baseline: Option<(VerificationReport, bool)>,
    /// Where each check's start and result go as they happen.
    live: Option<loop_protocol::LiveFeed>,
    /// What the workspace's root `.git` must be (the bytes of a
    /// worktree's pointer, or absent), when it is guarded.
    root_git: Option<Option<Vec<u8>>>,
    /// New test files the task is asked to write (see
    /// [`SnapshotVerifier::with_new_tests`]).
    new_tests: Vec<String>,
    /// Run checks already run on the workspace at this root (see
    /// [`SnapshotVerifier::reusing`]).
    known: Option<(String, Vec<CheckEvidence>, Option<Isolation>)>,
    /// Build outputs the project's own checks made of the untouched
    /// workspace (see [`SnapshotVerifier::with_builds`]): where they are
    /// kept, and the commands whose baseline runs fill it.
    builds: Option<(PathBuf, BTreeSet<String>)>,
    /// Checks build Go with their cache at [`GO_CACHE`] in their view (see
    /// [`SnapshotVerifier::with_go_cache`]).
    go_cache: bool,
    /// A file whose time is when the workspace was made (see
    /// [`SnapshotVerifier::with_settled`]).
    settled: Option<PathBuf>,
}

/// Where a check's Go build cache is, in its view of the workspace: kept
/// from the project's own check on the untouched workspace like any build
/// directory (see [`SnapshotVerifier::with_builds`]). A name the runtime
/// keeps: a workspace that holds it fails every check, since what is
/// there would be taken for the project's own build.
pub const GO_CACHE: &str = ".loop-go-cache";

impl SnapshotVerifier {
    /// Verify `workspace`, keeping seals and views under `scratch`
    /// (outside the workspace).
    pub fn new(workspace: &Path, scratch: &Path) -> Self {
        SnapshotVerifier {
            workspace: workspace.to_path_buf(),
            scratch: scratch.to_path_buf(),
            last_sealed: None,
            guard: None,
            sandbox: Settings::default(),
            baseline: None,
            live: None,
            root_git: None,
            new_tests: Vec::new(),
            known: None,
            builds: None,
            go_cache: false,
            settled: None,
        }
    }

    /// `stamp`'s modification time is when the workspace was made and
    /// its files given their times (the checkout's, for those it holds
    /// unchanged). Before checks that build on earlier outputs (kept
    /// builds, a copy-on-write share such as the user's `target/`, the Go
    /// cache), every file whose status changed since is dated now: a task
    /// that changed a file and dated it back cannot have the check take an
    /// older output for it. No stamp: every file is dated now.
    pub fn with_settled(mut self, stamp: &Path) -> Self {
        self.settled = Some(stamp.to_path_buf());
        self
    }

    /// Whether checks build on outputs older than the workspace's files.
    fn builds_on_earlier_outputs(&self) -> bool {
        self.go_cache
            || !self.below().is_empty()
            || self
                .sandbox
                .shares
                .iter()
                .any(|s| matches!(s.access, loop_sandbox::ShareAccess::Overlay { .. }))
    }

    /// Point each check's Go build cache (`GOCACHE`) at [`GO_CACHE`] in its
    /// view: the baseline run of the project's own check fills it, later
    /// checks reuse what it compiled (kept with [`SnapshotVerifier::with_builds`]).
    /// A workspace that already holds that name (the task made it) fails
    /// every run check: a cache the task wrote would answer for the build.
    pub fn with_go_cache(mut self) -> Self {
        self.go_cache = true;
        self
    }

    /// Share build outputs into checks, so that a check builds only what
    /// the task changed: a baseline run (attempt 0, the untouched
    /// workspace) of a check whose command is one of `from` (the project's
    /// own build and test commands, never a model's) keeps the top-level
    /// directories it made that the workspace does not have (`target/`, a
    /// CMake build directory) in `dir`, with their times; every check on
    /// an overlay then sees `dir` under the workspace, read-only: what the
    /// workspace holds wins, and nothing a check writes reaches `dir`.
    /// Build tools that judge by times (Cargo, make, CMake) rebuild what is
    /// newer than those outputs: the task's changes.
    pub fn with_builds(mut self, dir: &Path, from: impl IntoIterator<Item = String>) -> Self {
        self.builds = Some((dir.to_path_buf(), from.into_iter().collect()));
        self
    }

    /// The kept build outputs a check's overlay shows under the workspace:
    /// none while the workspace has a top-level entry of a name kept there
    /// (the task made it: merged, what it put there would mix with the
    /// project's own outputs; without them the check builds afresh).
    #[allow(clippy::disallowed_methods)] // lstat of the runtime's own directory beside the workspace
    fn below(&self) -> Vec<PathBuf> {
        let Some((dir, _)) = &self.builds else {
            return Vec::new();
        };
        let Ok(items) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let names: Vec<std::ffi::OsString> = items.flatten().map(|e| e.file_name()).collect();
        let clashes = names
            .iter()
            .any(|n| std::fs::symlink_metadata(self.workspace.join(n)).is_ok());
        if names.is_empty() || clashes {
            return Vec::new();
        }
        vec![dir.clone()]
    }

    /// Whether a baseline run of `run` keeps the build outputs it makes.
    fn keeps_builds(&self, attempt: u32, run: &RunCheck) -> Option<&Path> {
        match &self.builds {
            Some((dir, from)) if attempt == 0 && from.contains(run.command.as_str()) => {
                Some(dir.as_path())
            }
            _ => None,
        }
    }

    /// Take the result of a run check from `earlier` (each run, in this
    /// sandbox, on the workspace whose manifest root is `root`) instead of
    /// running it again, when it is the same check: a task's baseline
    /// after the runs that settled its contract costs nothing more. Used
    /// only if the seal's root is `root`; else every check is run.
    pub fn reusing(mut self, root: String, earlier: &[VerificationReport]) -> Self {
        let earlier: Vec<&VerificationReport> =
            earlier.iter().filter(|r| r.manifest_root == root).collect();
        let checks = earlier
            .iter()
            .flat_map(|r| r.criteria.iter().flat_map(|c| c.checks.iter().cloned()))
            .filter(|e| matches!(e.check, Check::Run(_)))
            .collect();
        let isolation = earlier
            .iter()
            .map(|r| r.isolation.clone())
            .find(|i| *i != Isolation::default());
        self.known = Some((root, checks, isolation));
        self
    }

    /// The new test files the task was asked to write (workspace paths;
    /// see `integrity::new_test_files`): they are a deliverable, never a
    /// judge. A check that passes with them is run again without them:
    /// where tests existed before the task, they must pass as they did (a
    /// new test module may not patch the code under test or the runner);
    /// where the check then fails, its verdict came from the new tests
    /// alone, and its criterion passes only beside another criterion that
    /// held without them.
    pub fn with_new_tests(mut self, paths: Vec<String>) -> Self {
        self.new_tests = paths;
        self
    }

    /// The workspace's root `.git` must hold exactly `expected` (a
    /// worktree's pointer to its repository, as the runtime made it on
    /// this machine), or be absent (`None`): manifests leave it out (it
    /// names a path of the machine), so it is guarded here, while `.git`
    /// is protected.
    pub fn guard_root_git(mut self, expected: Option<Vec<u8>>) -> Self {
        self.root_git = Some(expected);
        self
    }

    /// Say each check's start and result to `feed` as they happen (a
    /// person watching the verification).
    pub fn set_live(&mut self, feed: Option<loop_protocol::LiveFeed>) {
        self.live = feed;
    }

    /// How checks are isolated and cancelled.
    pub fn with_sandbox(mut self, sandbox: Settings) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Reject any seal in which a path matching `protected` differs from
    /// `baseline` — the task's starting content — whatever changed it.
    pub fn guard_protected(mut self, baseline: Manifest, protected: Protected) -> Self {
        self.guard = Some((baseline, protected));
        self
    }

    /// Compare each test check's tally with the one the `baseline` run
    /// (the contract's checks before any change) recorded: a check whose
    /// runner now reports no summary, fewer tests, or (with `names`) no
    /// longer runs tests it ran, fails with the reason (see [`tally`]).
    pub fn compare_with_baseline(mut self, baseline: VerificationReport, names: bool) -> Self {
        self.baseline = Some((baseline, names));
        self
    }

    fn baseline_tally(&self, criterion: &str, index: usize, check: &Check) -> Option<&TestTally> {
        let (report, _) = self.baseline.as_ref()?;
        report
            .criteria
            .iter()
            .find(|c| c.id == criterion)?
            .checks
            .iter()
            .find(|e| e.index == index && &e.check == check)?
            .tests
            .as_ref()
    }

    #[allow(clippy::disallowed_methods)] // lstat of the workspace's .git (a regular file is read only to compare with what it was)
    fn protected_violations(&self, sealed: &Manifest) -> Vec<String> {
        let Some((baseline, protected)) = &self.guard else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let (Some(expected), Some(rule)) = (&self.root_git, protected.matching(".git")) {
            let path = self.workspace.join(".git");
            let now = match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(None),
                Ok(m) if m.is_file() => std::fs::read(&path).ok().map(Some),
                _ => None,
            };
            if now.as_ref() != Some(expected) {
                out.push(format!(
                    ".git changed: it is not the repository pointer the runtime made (protected by {rule})"
                ));
            }
        }
        for e in &sealed.entries {
            if let Some(rule) = protected.matching(&e.path) {
                match baseline.get(&e.path) {
                    None => out.push(format!("{} added (protected by {rule})", e.path)),
                    Some(b) if b != e => {
                        out.push(format!("{} modified (protected by {rule})", e.path))
                    }
                    Some(_) => {}
                }
            }
        }
        for b in &baseline.entries {
            if let Some(rule) = protected.matching(&b.path)
                && sealed.get(&b.path).is_none()
            {
                out.push(format!("{} deleted (protected by {rule})", b.path));
            }
        }
        // New modules named like the standard library (however they came).
        let is_package = |dir: &str| {
            let init = if dir.is_empty() {
                "__init__.py".to_string()
            } else {
                format!("{dir}/__init__.py")
            };
            sealed.get(&init).is_some()
        };
        for e in &sealed.entries {
            if baseline.get(&e.path).is_none()
                && let Some((lang, module)) = loop_gates::shadow::shadowed(&e.path, &is_package)
            {
                out.push(format!(
                    "{} added (check integrity: it shadows the {lang} standard module `{module}`)",
                    e.path
                ));
            }
        }
        out
    }

    /// Symlinks the task added or changed whose target leaves the
    /// workspace (resolved through the tree's other links): such a link is
    /// never accepted, since apply and everyone who opens the result would
    /// follow it out.
    fn link_violations(&self, dir: &Path, sealed: &Manifest) -> Vec<String> {
        use loop_workspace::untrusted::{Node, Tree, link_stays_inside};
        let Ok(tree) = Tree::open(dir) else {
            return vec!["the sealed workspace cannot be opened to check its links".into()];
        };
        let target_of = |p: &str| match tree.node(p) {
            Ok(Node::Symlink(t)) => Some(t),
            _ => None,
        };
        let baseline = self.guard.as_ref().map(|(b, _)| b);
        let mut out = Vec::new();
        for e in &sealed.entries {
            if e.kind != loop_workspace::EntryKind::Symlink
                || baseline.and_then(|b| b.get(&e.path)) == Some(e)
            {
                continue;
            }
            match target_of(&e.path) {
                Some(t) if link_stays_inside(&e.path, &t, &target_of) => {}
                Some(t) => out.push(format!(
                    "{} is a symlink to {}, which leads outside the workspace",
                    e.path,
                    t.display()
                )),
                None => out.push(format!("{}: the symlink could not be read", e.path)),
            }
        }
        out
    }

    /// The seal of the most recent verification.
    pub fn last_sealed(&self) -> Option<&Sealed> {
        self.last_sealed.as_ref()
    }

    /// One verification pass.
    #[allow(clippy::disallowed_methods)] // the verifier's own fresh snapshot directory
    pub fn verify(
        &mut self,
        contract: &Contract,
        contract_sha256: &str,
        attempt: u32,
    ) -> Result<VerificationReport, VerifyError> {
        let started = Instant::now();
        if tracing::enabled!(tracing::Level::DEBUG) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            tracing::debug!("verify: attempt {attempt} began at {now} ns since the epoch");
        }
        if let Some(old) = self.last_sealed.take() {
            old.discard();
        }
        std::fs::create_dir_all(&self.scratch).map_err(VerifyError::Snapshot)?;
        self.date_changed_files()?;
        // With overlays the quiescent workspace is the seal: checks start at
        // once, and its manifest is hashed alongside them. Otherwise the
        // workspace is copied (and hashed) first. Checks that run no
        // command only read it: no sandbox is started to learn about
        // overlays, and they read it in place unless this process's
        // commands ran where overlays do not work (where a command's
        // leftovers may outlive it, the copy keeps verdict and receipt to
        // the same bytes). In place, its manifest is hashed from the start
        // of the checks and found intact after them.
        let overlay = if runs_commands(contract) {
            loop_sandbox::overlay_available()
        } else {
            loop_sandbox::overlay_known() != Some(false)
        };
        let copied = if overlay {
            None
        } else {
            Some(
                Sealed::create(
                    &self.workspace,
                    &self.scratch.join(format!("sealed-{attempt}")),
                )
                .map_err(VerifyError::Snapshot)?,
            )
        };
        let dir = copied
            .as_ref()
            .map_or_else(|| self.workspace.clone(), |s| s.dir().to_path_buf());
        let (checked, hashed) =
            self.check_while_hashing(contract, attempt, &dir, copied.as_ref(), started, overlay);
        let (criteria, method, isolation) = checked?;
        // Results taken from earlier runs hold only for the workspace they
        // ran on: another seal runs everything.
        let reused = self.known.take();
        if let Some((root, _, _)) = &reused
            && !same_root(root, copied.as_ref(), &hashed)
        {
            if let Some(c) = copied {
                c.discard();
            }
            return self.verify(contract, contract_sha256, attempt);
        }
        let sealed = sealed_from(&self.workspace, copied, hashed)?;
        let artifacts = artifact_evidence(contract, sealed.manifest());
        if !sealed.is_intact().map_err(VerifyError::Snapshot)? {
            return Err(VerifyError::SealBroken(sealed.manifest().root.clone()));
        }
        let report = VerificationReport {
            attempt,
            contract_sha256: contract_sha256.to_string(),
            manifest_root: sealed.manifest().root.clone(),
            files: sealed.manifest().entries.len() as u64,
            snapshot_method: method,
            protected_violations: {
                let mut v = self.protected_violations(sealed.manifest());
                v.extend(self.link_violations(sealed.dir(), sealed.manifest()));
                v
            },
            criteria,
            artifacts,
            isolation: isolation.unwrap_or_default(),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        self.last_sealed = Some(sealed);
        Ok(report)
    }

    /// When checks build on earlier outputs, date now every workspace
    /// file whose status changed since the workspace was made (see
    /// [`SnapshotVerifier::with_settled`]).
    #[allow(clippy::disallowed_methods)] // the settled stamp: the runtime's own file, outside the workspace
    fn date_changed_files(&self) -> Result<(), VerifyError> {
        if let Some(stamp) = &self.settled
            && self.builds_on_earlier_outputs()
        {
            let since = std::fs::metadata(stamp)
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            loop_workspace::fsutil::refresh_times(&self.workspace, since).map_err(|at| {
                VerifyError::Snapshot(std::io::Error::other(format!(
                    "cannot date {} now (a changed file must not pass for one an earlier build made)",
                    at.display()
                )))
            })?;
        }
        Ok(())
    }

    /// Run every check on `dir` (see `run_checks`); on overlays
    /// (`overlay`) the workspace's manifest is hashed alongside, from
    /// when the first check has run.
    fn check_while_hashing(
        &self,
        contract: &Contract,
        attempt: u32,
        dir: &Path,
        copied: Option<&Sealed>,
        started: Instant,
        overlay: bool,
    ) -> (Result<Checked, VerifyError>, Hashed) {
        std::thread::scope(|scope| {
            // Hashing waits until the first check has run: hashing alongside
            // a spawn slows the spawn (a cgroup join waits for the other core).
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let hashing = overlay.then(|| {
                scope.spawn(move || {
                    let _ = wait.recv();
                    Manifest::of(dir)
                })
            });
            let first_done = || {
                let _ = go.send(());
            };
            if !runs_commands(contract) {
                // No spawn to slow: hash alongside from the start.
                first_done();
            }
            let checked = self.run_checks(contract, attempt, dir, copied, started, &first_done);
            first_done();
            (checked, hashing.map(|h| h.join()))
        })
    }
}

/// Whether any of the contract's checks runs a command.
pub fn runs_commands(contract: &Contract) -> bool {
    contract
        .criteria
        .iter()
        .flat_map(|c| c.checks.iter())
        .any(|k| matches!(k, Check::Run(_) | Check::Page(_)))
}

/// The manifest hashed alongside the checks, when the seal is the
/// workspace itself (`None` when it is a copy): the hashing thread's
/// result, and hashing's own.
type Hashed = Option<std::thread::Result<std::io::Result<Manifest>>>;

/// Whether the seal (the copy, or the manifest hashed alongside) has the
/// manifest root `root` that earlier results ran on.
fn same_root(root: &str, copied: Option<&Sealed>, hashed: &Hashed) -> bool {
    match (copied, hashed) {
        (Some(s), _) => s.manifest().root == root,
        (None, Some(Ok(Ok(m)))) => m.root == root,
        _ => false,
    }
}

/// The seal of a pass: the copy, or the workspace in place with the
/// manifest hashed alongside the checks.
fn sealed_from(
    workspace: &Path,
    copied: Option<Sealed>,
    hashed: Hashed,
) -> Result<Sealed, VerifyError> {
    Ok(match (copied, hashed) {
        (Some(s), _) => s,
        (None, Some(Ok(Ok(manifest)))) => Sealed::in_place_with(workspace, manifest),
        (None, Some(Ok(Err(e)))) => return Err(VerifyError::Snapshot(e)),
        (None, _) => {
            return Err(VerifyError::Snapshot(std::io::Error::other(
                "hashing the sealed workspace failed",
            )));
        }
    })
}

/// What the sealed manifest holds of each artifact the contract requires.
fn artifact_evidence(contract: &Contract, manifest: &Manifest) -> Vec<ArtifactEvidence> {
    contract
        .artifacts
        .iter()
        .map(|a| match manifest.get(a.as_str()) {
            Some(e) if e.kind == loop_workspace::EntryKind::File => ArtifactEvidence {
                path: a.clone(),
                present: true,
                sha256: Some(e.sha256.clone()),
                bytes: Some(e.size),
            },
            _ => ArtifactEvidence {
                path: a.clone(),
                present: false,
                sha256: None,
                bytes: None,
            },
        })
        .collect()
}

type Checked = (Vec<CriterionEvidence>, String, Option<Isolation>);

impl SnapshotVerifier {
    /// The run checks another check of the contract implies, each with
    /// the one that does: a check whose command `B` expects exit 0 and
    /// nothing else, when another's is `B && REST`, expects exit 0, has
    /// no more time and the same terminal, and `REST` holds no other list
    /// operator, group or comment (so that command exits 0 only if `B`,
    /// run first, did). `B` is a plain command line too. Not with new test
    /// files to judge without, nor for a check the baseline counted tests
    /// of, nor in the baseline run (attempt 0), nor for a check asking
    /// more of a test run than the one that would imply it: those are
    /// always run on their own.
    fn implied(
        &self,
        contract: &Contract,
        attempt: u32,
    ) -> std::collections::BTreeMap<(usize, usize), (usize, usize)> {
        let mut out = std::collections::BTreeMap::new();
        // The baseline runs every check on its own: what each counts of
        // tests is what later runs are held to.
        if !self.new_tests.is_empty() || attempt == 0 {
            return out;
        }
        // How much a check asks of a test run: none, a recognised empty
        // run fails, tests must have run.
        let strictness = |n: Option<bool>| match n {
            Some(false) => 0,
            None => 1,
            Some(true) => 2,
        };
        let runs: Vec<((usize, usize), &loop_protocol::RunCheck)> = contract
            .criteria
            .iter()
            .enumerate()
            .flat_map(|(ci, c)| {
                c.checks
                    .iter()
                    .enumerate()
                    .filter_map(move |(ki, k)| match k {
                        Check::Run(r) => Some(((ci, ki), r)),
                        _ => None,
                    })
            })
            .collect();
        let plain = |s: &str| {
            !s.is_empty()
                && !s.contains([
                    '\\', '\'', '"', '#', '`', '(', ')', '{', '}', '\n', '\r', '<', '>', '$',
                ])
                && !s.contains(';')
        };
        for (b_at, b) in &runs {
            let only_exit = b.expect_exit == 0
                && b.expect_stdout.is_none()
                && b.expect_stderr.is_none()
                && b.stdout_matches.is_none()
                && b.nonempty_tests != Some(true)
                && self
                    .baseline_tally(
                        &contract.criteria[b_at.0].id,
                        b_at.1,
                        &Check::Run((*b).clone()),
                    )
                    .is_none();
            if !only_exit
                || !plain(&b.command)
                || b.command.contains('|')
                || b.command.trim() != b.command
            {
                continue;
            }
            let by = runs.iter().find(|(t_at, t)| {
                t_at != b_at
                    && t.expect_exit == 0
                    && t.timeout_secs <= b.timeout_secs
                    && t.terminal == b.terminal
                    && strictness(t.nonempty_tests) >= strictness(b.nonempty_tests)
                    && t.command
                        .strip_prefix(b.command.as_str())
                        .and_then(|r| r.strip_prefix(" && "))
                        .is_some_and(|rest| {
                            let bare = rest.replace("&&", "");
                            plain(rest) && !bare.contains(['|', '&']) && !rest.trim().is_empty()
                        })
            });
            if let Some((t_at, _)) = by
                && !out.contains_key(t_at)
            {
                out.insert(*b_at, *t_at);
            }
        }
        out
    }

    /// Run every check on `dir`: run checks each on a fresh view (an
    /// overlay when `copied` is `None`, else a copy of the sealed copy),
    /// file checks read-only through the jail.
    fn run_checks(
        &self,
        contract: &Contract,
        attempt: u32,
        dir: &Path,
        copied: Option<&Sealed>,
        began: Instant,
        first_done: &dyn Fn(),
    ) -> Result<Checked, VerifyError> {
        let jail = Jail::new(
            dir,
            Protected::new(&[]).map_err(|e| VerifyError::Snapshot(std::io::Error::other(e)))?,
        )
        .map_err(VerifyError::Snapshot)?;
        let mut gathered = Gathered {
            isolation: None,
            method: "sealed-read-only".to_string(),
            self_judged: BTreeSet::new(),
            depends: BTreeSet::new(),
        };
        let live = self.live.as_ref();
        let total: usize = contract.criteria.iter().map(|c| c.checks.len()).sum();
        loop_protocol::live::emit(live, loop_protocol::Live::Verifying { attempt, total });
        // A check another one implies (see `implied`) runs after it, and
        // only if that one failed; results go back to the contract's order.
        let implied = self.implied(contract, attempt);
        let order = check_order(contract, &implied, total);
        let pass = Pass {
            contract,
            attempt,
            dir,
            copied,
            began,
            first_done,
            jail,
            implied,
        };
        let mut results: BTreeMap<(usize, usize), CheckEvidence> = BTreeMap::new();
        for (n, (ci, index)) in order.into_iter().enumerate() {
            let position = n + 1;
            let criterion = &contract.criteria[ci];
            let check = &criterion.checks[index];
            loop_protocol::live::emit(
                live,
                loop_protocol::Live::CheckStarted {
                    index: position,
                    total,
                    criterion: criterion.id.clone(),
                    check: check.describe(),
                },
            );
            let ev = self.check_evidence(&pass, &mut gathered, (ci, index), &results)?;
            loop_protocol::live::emit(
                live,
                loop_protocol::Live::CheckDone {
                    index: position,
                    total,
                    criterion: criterion.id.clone(),
                    passed: ev.passed,
                    status: ev.status(),
                    duration_ms: ev.duration_ms,
                },
            );
            results.insert((ci, index), ev);
        }
        let mut criteria = criteria_evidence(contract, results);
        let held_before = self.held_before();
        judge_self_judged(
            contract,
            &mut criteria,
            (&gathered.self_judged, &gathered.depends),
            &held_before,
        );
        Ok((criteria, gathered.method, gathered.isolation))
    }

    /// The evidence of check `index` of criterion `ci`: the passed check
    /// that implies it vouches for it, an earlier run on the same
    /// workspace is taken over, a run check runs now, and a file check is
    /// read through the jail.
    fn check_evidence(
        &self,
        pass: &Pass,
        gathered: &mut Gathered,
        (ci, index): (usize, usize),
        results: &BTreeMap<(usize, usize), CheckEvidence>,
    ) -> Result<CheckEvidence, VerifyError> {
        let criterion = &pass.contract.criteria[ci];
        let check = &criterion.checks[index];
        let earlier = self.known.as_ref().and_then(|(_, k, _)| {
            k.iter()
                .find(|e| e.check == *check && matches!(check, Check::Run(_)))
        });
        let by = pass
            .implied
            .get(&(ci, index))
            .and_then(|t| results.get(t))
            .filter(|t| t.passed);
        Ok(match (check, earlier) {
            (Check::Run(_), _) if by.is_some() => {
                let t = by.cloned().unwrap_or_else(|| blank("", 0, check, ""));
                let mut ev = blank(&criterion.id, index, check, &t.snapshot);
                ev.passed = true;
                ev.exit_code = Some(0);
                ev.env = t.env.clone();
                ev.implied_by = Some(format!("{}#{}", t.criterion, t.index));
                ev
            }
            (Check::Run(_), Some(e)) => {
                let mut ev = e.clone();
                ev.criterion = criterion.id.clone();
                ev.index = index;
                gathered.method = ev.snapshot.clone();
                gathered.isolation = gathered
                    .isolation
                    .take()
                    .or_else(|| self.known.as_ref().and_then(|(_, _, i)| i.clone()));
                (pass.first_done)();
                ev
            }
            (Check::Run(run), None) => {
                self.run_fresh(pass, gathered, (&criterion.id, index, check, run))?
            }
            (Check::Page(p), _) => {
                let attempt = pass.attempt;
                let scratch = self
                    .scratch
                    .join(format!("view-{attempt}-{}-{index}", criterion.id));
                let view = View::fresh(pass.dir, pass.copied, &scratch)?;
                gathered.method = view.method.name().to_string();
                (pass.first_done)();
                page_check(&criterion.id, index, (check, p), &view, &self.sandbox)
            }
            (_, _) => file_check(&criterion.id, index, check, &pass.jail),
        })
    }

    /// Run a run check now, on its own fresh view: keep the build outputs
    /// a whole baseline run made, and hold a passing check to the check
    /// integrity rules (the same verdict without the task's new test
    /// files, no tests lost since the baseline).
    fn run_fresh(
        &self,
        pass: &Pass,
        gathered: &mut Gathered,
        (criterion, index, check, run): (&str, usize, &Check, &RunCheck),
    ) -> Result<CheckEvidence, VerifyError> {
        let attempt = pass.attempt;
        let scratch = self
            .scratch
            .join(format!("view-{attempt}-{}-{index}", criterion));
        let mut view = View::fresh(pass.dir, pass.copied, &scratch)?;
        view.below = self.below();
        gathered.method = view.method.name().to_string();
        tracing::debug!(
            "verify: check {}#{index} starting {:.3} ms after verification began",
            criterion,
            pass.began.elapsed().as_secs_f64() * 1000.0
        );
        view.go_cache = self.go_cache;
        let keep = self
            .keeps_builds(attempt, run)
            .filter(|_| view.overlay.is_some());
        let (mut ev, iso, layer) = run_check(
            criterion,
            index,
            check,
            run,
            &view,
            (&self.sandbox, keep.is_some()),
        );
        keep_whole_builds(&ev, keep, layer.as_ref(), &scratch, pass.dir);
        drop(layer);
        if ev.passed {
            let second = self.without_new_tests(
                (criterion, index, check, run),
                &view,
                pass.copied,
                &scratch,
            )?;
            gathered.record_without(criterion, second, &mut ev);
        }
        if let Some(base) = self.baseline_tally(criterion, index, check)
            && ev.passed
            && let Some(why) = tally::compare(
                base,
                ev.tests.as_ref(),
                self.baseline.as_ref().is_some_and(|(_, n)| *n),
            )
        {
            ev.passed = false;
            ev.failure = Some(format!("check integrity: {why}"));
        }
        (pass.first_done)();
        let _ = remove_tree(&scratch);
        gathered.isolation = iso.or(gathered.isolation.take());
        Ok(ev)
    }

    /// The criteria that passed at the baseline, before the task.
    fn held_before(&self) -> BTreeSet<String> {
        self.baseline
            .as_ref()
            .map(|(b, _)| {
                b.criteria
                    .iter()
                    .filter(|c| c.passed)
                    .map(|c| c.id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Run a passing check again without the task's new test files (see
    /// [`SnapshotVerifier::with_new_tests`]) and say what that shows.
    #[allow(clippy::disallowed_methods)] // lstat only: which new test files are in the view
    fn without_new_tests(
        &self,
        (criterion, index, check, run): (&str, usize, &Check, &RunCheck),
        view: &View,
        copied: Option<&Sealed>,
        scratch: &Path,
    ) -> Result<Without, VerifyError> {
        let present: Vec<&String> = self
            .new_tests
            .iter()
            .filter(|p| std::fs::symlink_metadata(view.dir.join(p.as_str())).is_ok())
            .collect();
        if present.is_empty() {
            return Ok(Without::NotRun);
        }
        let mut second_scratch = scratch.as_os_str().to_owned();
        second_scratch.push("-without-new-tests");
        let second_scratch = PathBuf::from(second_scratch);
        let mut second_view = View::fresh(&view.dir, copied, &second_scratch)?;
        second_view.below = view.below.clone();
        second_view.go_cache = view.go_cache;
        // The files go first, inside the check's own view (an overlay or a
        // fresh copy): the sealed workspace never changes.
        let quoted: Vec<String> = present
            .iter()
            .map(|p| format!("'{}'", p.replace('\'', "'\\''")))
            .collect();
        let without = RunCheck {
            command: format!(
                "rm -rf -- {} || exit 125\n{}",
                quoted.join(" "),
                run.command
            ),
            ..run.clone()
        };
        let (ev, _, _) = run_check(
            criterion,
            index,
            check,
            &without,
            &second_view,
            (&self.sandbox, false),
        );
        let _ = remove_tree(&second_scratch);
        let names = present
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let base = self.baseline_tally(criterion, index, check);
        let existing = base.is_some_and(|b| b.ran > 0);
        let lost = base.and_then(|b| {
            tally::compare(
                b,
                ev.tests.as_ref(),
                self.baseline.as_ref().is_some_and(|(_, n)| *n),
            )
        });
        // What the runner says failed without them (a check can also
        // fail for what is not a test: a coverage floor, an expected
        // output naming the new tests; that is no sign the old ones changed).
        let failed = tally::failures(&format!(
            "{}\n{}",
            ev.stdout.as_ref().map_or("", |s| s.excerpt.as_str()),
            ev.stderr.as_ref().map_or("", |s| s.excerpt.as_str())
        ));
        Ok(match (ev.passed, existing, lost) {
            (true, _, None) => Without::Held,
            (true, _, Some(why)) | (false, true, Some(why)) => Without::Changed(format!(
                "without the new test files the task wrote ({names}) the tests that existed before run differently: {why}; a new test file may not change how the existing tests run"
            )),
            (false, true, None) if failed == Some(0) => Without::Held,
            (false, true, None) => Without::Changed(format!(
                "without the new test files the task wrote ({names}) the tests that existed before fail ({}): a new test file may not change how the existing tests run",
                match failed {
                    Some(n) => format!("{n} failed"),
                    None => ev.failure.unwrap_or_else(|| "failed".into()),
                }
            )),
            (false, false, _) => Without::SelfJudged,
        })
    }
}

/// What every check of one verification pass runs with.
struct Pass<'a> {
    contract: &'a Contract,
    attempt: u32,
    /// The sealed workspace the checks see.
    dir: &'a Path,
    /// The sealed copy, when the seal is one (else views are overlays).
    copied: Option<&'a Sealed>,
    /// When the verification began.
    began: Instant,
    /// Called once a check has run (hashing waits for it).
    first_done: &'a dyn Fn(),
    /// File checks read the sealed workspace through it.
    jail: Jail,
    /// The run checks another check implies, each with the one that does.
    implied: BTreeMap<(usize, usize), (usize, usize)>,
}

/// What the checks of a pass have shown beside their own evidence.
struct Gathered {
    /// The isolation the sandbox gave a run check.
    isolation: Option<Isolation>,
    /// How the latest view was made.
    method: String,
    /// Criteria with a check whose verdict came from the task's new test
    /// files alone.
    self_judged: BTreeSet<String>,
    /// Criteria with any check that needed them.
    depends: BTreeSet<String>,
}

impl Gathered {
    /// Record what running `criterion`'s passing check without the task's
    /// new test files showed; a changed result fails `ev`.
    fn record_without(&mut self, criterion: &str, second: Without, ev: &mut CheckEvidence) {
        if !matches!(second, Without::NotRun | Without::Held) {
            self.depends.insert(criterion.to_string());
        }
        match second {
            Without::NotRun | Without::Held => {}
            Without::SelfJudged => {
                self.self_judged.insert(criterion.to_string());
            }
            Without::Changed(why) => {
                ev.passed = false;
                ev.failure = Some(format!("check integrity: {why}"));
            }
        }
    }
}

/// The order checks run in: the contract's, except that a check another
/// one implies (see `implied`) comes right after the one that does.
fn check_order(
    contract: &Contract,
    implied: &BTreeMap<(usize, usize), (usize, usize)>,
    total: usize,
) -> Vec<(usize, usize)> {
    let mut order: Vec<(usize, usize)> = Vec::with_capacity(total);
    for (ci, criterion) in contract.criteria.iter().enumerate() {
        for ki in 0..criterion.checks.len() {
            if !implied.contains_key(&(ci, ki)) {
                order.push((ci, ki));
            }
        }
    }
    let mut i = 0;
    while i < order.len() {
        let at = order[i];
        let after: Vec<(usize, usize)> = implied
            .iter()
            .filter(|(_, by)| **by == at)
            .map(|(b, _)| *b)
            .collect();
        for (n, b) in after.into_iter().enumerate() {
            order.insert(i + 1 + n, b);
        }
        i += 1;
    }
    order
}

/// Each criterion's evidence, its checks back in the contract's order.
fn criteria_evidence(
    contract: &Contract,
    mut results: BTreeMap<(usize, usize), CheckEvidence>,
) -> Vec<CriterionEvidence> {
    let mut criteria = Vec::new();
    for (ci, criterion) in contract.criteria.iter().enumerate() {
        let checks: Vec<CheckEvidence> = (0..criterion.checks.len())
            .filter_map(|ki| results.remove(&(ci, ki)))
            .collect();
        criteria.push(CriterionEvidence {
            id: criterion.id.clone(),
            passed: checks.iter().all(|c| c.passed),
            checks,
        });
    }
    criteria
}

/// Keep the build outputs a baseline run wrote (see [`keep_builds`]) in
/// `keep`, when it is given and the run ended by itself: a build cut short
/// (a timeout, a signal, a full disk) leaves outputs that would fail
/// honest work later.
fn keep_whole_builds(
    ev: &CheckEvidence,
    keep: Option<&Path>,
    layer: Option<&loop_sandbox::Layer>,
    scratch: &Path,
    dir: &Path,
) {
    let whole = !ev.timed_out
        && ev.signal.is_none()
        && ev.exit_code.is_some()
        && !ev
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("could not start"));
    if let Some(kept) = keep.filter(|_| whole) {
        let upper = layer
            .map(|l| l.upper())
            .unwrap_or_else(|| scratch.join("upper"));
        if let Err(e) = keep_builds(&upper, dir, kept) {
            tracing::debug!("verify: build outputs not kept: {e}");
        }
    }
}

/// What running a check without the task's new test files showed.
enum Without {
    /// No new test file was there.
    NotRun,
    /// It passed as before: its verdict does not rest on them.
    Held,
    /// It passed only with them, and no test existed before: its verdict
    /// rests on tests the task wrote.
    SelfJudged,
    /// The tests that existed before ran differently without them.
    Changed(String),
}

/// A criterion whose verdict rests on the task's own new tests passes only
/// beside another (not a guard) that passed with a `run` check, needed no
/// new test file and did not already pass before the task (`held_before`):
/// tests the task wrote show their own quality, never alone the behaviour
/// the instruction asks for.
fn judge_self_judged(
    contract: &Contract,
    criteria: &mut [CriterionEvidence],
    (self_judged, depends): (&BTreeSet<String>, &BTreeSet<String>),
    held_before: &BTreeSet<String>,
) {
    if self_judged.is_empty() {
        return;
    }
    let independent = contract.criteria.iter().any(|k| {
        !k.guard
            && !depends.contains(&k.id)
            && !held_before.contains(&k.id)
            && k.checks.iter().any(|c| matches!(c, Check::Run(_)))
            && criteria.iter().any(|c| c.id == k.id && c.passed)
    });
    if independent {
        return;
    }
    for c in criteria.iter_mut().filter(|c| self_judged.contains(&c.id)) {
        c.passed = false;
        for ev in c.checks.iter_mut().filter(|e| e.passed) {
            ev.passed = false;
            ev.failure = Some(
                "judged only by tests the task wrote: without them this check fails, and no other criterion judges the behaviour with a check the task cannot change".into(),
            );
        }
    }
}

fn blank(criterion: &str, index: usize, check: &Check, snapshot: &str) -> CheckEvidence {
    CheckEvidence {
        criterion: criterion.to_string(),
        index,
        check: check.clone(),
        passed: false,
        failure: None,
        exit_code: None,
        signal: None,
        timed_out: false,
        duration_ms: 0,
        stdout: None,
        stderr: None,
        snapshot: snapshot.to_string(),
        env: Vec::new(),
        tests: None,
        egress: Vec::new(),
        implied_by: None,
        reused_from: None,
    }
}

/// Phrases test runners print when they ran nothing.
const EMPTY_TEST_RUN: &str = r"(?im)(\bRan 0 tests?\b|\bcollected 0 items\b|\brunning 0 tests?\b|\bno tests ran\b|\b0 tests? (run|ran|executed)\b)";

/// Where a check runs: a directory, seen directly (a copy) or through an
/// overlay whose upper layer lives in `overlay`.
struct View {
    dir: PathBuf,
    overlay: Option<PathBuf>,
    method: SnapshotMethod,
    /// Kept build outputs shown under the workspace in its overlay.
    below: Vec<PathBuf>,
    /// Go's build cache at [`GO_CACHE`] in the view.
    go_cache: bool,
}

impl View {
    /// A fresh view of the sealed workspace for one check: an overlay of
    /// `dir` whose upper layer lives in `scratch`, or, where the seal is a
    /// copy, a fresh copy of it at `scratch`.
    fn fresh(dir: &Path, copied: Option<&Sealed>, scratch: &Path) -> Result<View, VerifyError> {
        Ok(match copied {
            None => View {
                dir: dir.to_path_buf(),
                overlay: Some(scratch.to_path_buf()),
                method: SnapshotMethod::Overlay,
                below: Vec::new(),
                go_cache: false,
            },
            Some(sealed) => View {
                dir: scratch.to_path_buf(),
                overlay: None,
                method: sealed.fresh_view(scratch).map_err(VerifyError::Snapshot)?,
                below: Vec::new(),
                go_cache: false,
            },
        })
    }
}

/// Run one check on its view; with `keep`, what it wrote over the
/// workspace comes back too (while the layer is held).
fn run_check(
    criterion: &str,
    index: usize,
    check: &Check,
    run: &RunCheck,
    view: &View,
    (sandbox, keep): (&Settings, bool),
) -> (
    CheckEvidence,
    Option<Isolation>,
    Option<loop_sandbox::Layer>,
) {
    let mut ev = blank(criterion, index, check, view.method.name());
    let mut req = ExecRequest::shell(run.command.clone(), &view.dir);
    if view.go_cache {
        #[allow(clippy::disallowed_methods)] // lstat of the sealed workspace's top level
        let planted = std::fs::symlink_metadata(view.dir.join(GO_CACHE)).is_ok();
        if planted {
            ev.failure = Some(format!(
                "the workspace holds `{GO_CACHE}`, the name of the checks' Go build cache: a task may not make it (remove it)"
            ));
            return (ev, None, None);
        }
        req.env.push((
            "GOCACHE".into(),
            view.dir.join(GO_CACHE).to_string_lossy().into_owned(),
        ));
    }
    req.overlay_scratch = view.overlay.clone();
    req.overlay_below = view.below.clone();
    req.keep_writes = keep && view.overlay.is_some();
    req.workspace = Some(view.dir.clone());
    req.check = true;
    // A check that needs a terminal gets one of the runtime's (never the
    // caller's): see `loop_sandbox::pty`.
    req.terminal = run.terminal;
    req.timeout = Duration::from_secs(run.timeout_secs);
    // After the check's own timeout: the task's deadline caps it.
    sandbox.apply(&mut req);
    req.max_output = MATCH_BYTES;
    let result = match loop_sandbox::run(&req) {
        Ok(r) => r,
        Err(e) => {
            ev.failure = Some(format!("the command could not start: {e}"));
            return (ev, None, None);
        }
    };
    ev.exit_code = result.exit_code;
    ev.signal = result.signal;
    ev.timed_out = result.timed_out;
    ev.duration_ms = result.duration.as_millis() as u64;
    ev.stdout = Some(stream(&result.stdout));
    ev.stderr = Some(stream(&result.stderr));
    ev.env = result.env_imposed.clone();
    // What the verifier gave the check beside them (the Go build cache's place).
    ev.env.extend(
        req.env
            .iter()
            .filter(|(k, _)| k == "GOCACHE" && view.go_cache)
            .map(|(k, v)| format!("{k}={v}")),
    );
    ev.egress = result.isolation.egress.clone();
    ev.tests = tally::read(&format!(
        "{}\n{}",
        result.stdout.excerpt(),
        result.stderr.excerpt()
    ));
    ev.failure = judge(run, &result);
    ev.passed = ev.failure.is_none();
    let layer = result.layer.clone();
    (ev, Some(result.isolation), layer)
}

/// The top-level directories a check's build outputs are kept from:
/// Cargo's `target`, the usual CMake and Meson build directories (the
/// detected check's `build-loop`), and the checks' Go cache. Nothing else
/// a baseline run writes is kept (snapshots recorded from the unfixed
/// code, a test runner's last-failed list, compiled tests of sources a
/// task may delete would all change what a later check means).
pub fn kept_build_dir(name: &str) -> bool {
    matches!(
        name,
        "target" | "build" | "build-loop" | "_build" | GO_CACHE
    ) || name.starts_with("cmake-build-")
}

/// Keep in `kept` the build directories ([`kept_build_dir`]) a baseline
/// check wrote in its layer over `workspace` (`upper`) that the workspace
/// itself does not have: build outputs of the untouched project, copied
/// with their modification times (build tools judge by them). Links,
/// files and directories already kept are left; each directory is copied
/// aside and renamed into place, so a half copy is never used.
#[allow(clippy::disallowed_methods)] // the runtime's own directory beside the workspace, written from a layer read with links as links
fn keep_builds(upper: &Path, workspace: &Path, kept: &Path) -> std::io::Result<()> {
    let Ok(items) = std::fs::read_dir(upper) else {
        return Ok(());
    };
    for item in items.flatten() {
        let name = item.file_name();
        let plain = name.to_str().is_some_and(kept_build_dir);
        let dir = std::fs::symlink_metadata(item.path()).is_ok_and(|m| m.is_dir());
        if !plain
            || !dir
            || std::fs::symlink_metadata(workspace.join(&name)).is_ok()
            || std::fs::symlink_metadata(kept.join(&name)).is_ok()
        {
            continue;
        }
        std::fs::create_dir_all(kept)?;
        let aside = kept.join(format!(".loop-kept-{}", name.to_string_lossy()));
        let _ = remove_tree(&aside);
        let copied = loop_workspace::copy_tree(&item.path(), &aside, &|_| false, false)
            .and_then(|_| loop_workspace::fsutil::copy_times(&item.path(), &aside))
            .and_then(|_| std::fs::rename(&aside, kept.join(&name)));
        if copied.is_err() {
            let _ = remove_tree(&aside);
        }
        copied?;
    }
    Ok(())
}

fn stream(c: &loop_sandbox::Captured) -> StreamEvidence {
    let full = c.excerpt();
    let excerpt = head_tail(&full, EXCERPT_BYTES);
    StreamEvidence {
        bytes: c.total(),
        sha256: c.sha256().to_string(),
        truncated: c.truncated() || excerpt.len() != full.len(),
        excerpt,
    }
}

/// Why a run check failed, or `None` when it passed.
fn judge(run: &RunCheck, r: &ExecResult) -> Option<String> {
    if r.cancelled {
        return Some("cancelled".into());
    }
    if r.timed_out {
        return Some(format!("timed out after {} s", run.timeout_secs));
    }
    match (r.exit_code, r.signal) {
        (Some(c), _) if c != run.expect_exit => {
            return Some(format!("exit code {c}, expected {}", run.expect_exit));
        }
        (None, Some(s)) => return Some(format!("killed by signal {s}")),
        (None, None) => return Some("ended without an exit status".into()),
        _ => {}
    }
    let stdout = r.stdout.excerpt();
    let stderr = r.stderr.excerpt();
    let partial = |c: &loop_sandbox::Captured| {
        if c.truncated() {
            " (output was longer than the matched window)"
        } else {
            ""
        }
    };
    if let Some(want) = &run.expect_stdout
        && !stdout.contains(want.as_str())
    {
        return Some(format!(
            "stdout does not contain {want:?}{}",
            partial(&r.stdout)
        ));
    }
    if let Some(want) = &run.expect_stderr
        && !stderr.contains(want.as_str())
    {
        return Some(format!(
            "stderr does not contain {want:?}{}",
            partial(&r.stderr)
        ));
    }
    if let Some(pattern) = &run.stdout_matches {
        match regex::Regex::new(pattern) {
            Ok(re) if re.is_match(&stdout) => {}
            Ok(_) => return Some(format!("stdout does not match /{pattern}/")),
            Err(e) => return Some(format!("invalid regex /{pattern}/: {e}")),
        }
    }
    if run.nonempty_tests.is_none()
        && let Some(t) = tally::read(&format!("{stdout}\n{stderr}"))
        && t.ran == 0
    {
        // By default a runner that says it ran nothing did not pass
        // (`nonempty_tests: false` in the contract allows it, recorded).
        return Some(format!(
            "no tests ran ({} reported none run): an empty test run is not a pass (a contract that means it says `nonempty_tests: false`)",
            t.runner
        ));
    }
    if run.nonempty_tests == Some(true) {
        // A runner's own account comes first: `cargo test` says "running 0
        // tests" for each target without tests, beside the ones that ran.
        match tally::read(&format!("{stdout}\n{stderr}")) {
            Some(t) if t.ran > 0 => {}
            Some(t) => {
                return Some(format!(
                    "no tests ran ({} reported none run): an empty test run is not a pass",
                    t.runner
                ));
            }
            None => {
                let empty = regex::Regex::new(EMPTY_TEST_RUN).ok()?;
                let found = empty.find(&stdout).or_else(|| empty.find(&stderr));
                if let Some(m) = found {
                    return Some(format!(
                        "no tests ran ({:?}): an empty test run is not a pass",
                        m.as_str()
                    ));
                }
                // Nothing shows tests ran: that is no proof they did.
                return Some(
                    "no test runner's summary was recognised (pytest, unittest, cargo test, nextest, go test -v, Jest, Vitest, Mocha, TAP, node --test, CTest), so nothing shows tests ran; nonempty_tests needs one".into(),
                );
            }
        }
    }
    None
}

fn file_check(criterion: &str, index: usize, check: &Check, jail: &Jail) -> CheckEvidence {
    let started = Instant::now();
    let mut ev = blank(criterion, index, check, "sealed-read-only");
    ev.failure = file_failure(check, jail);
    ev.passed = ev.failure.is_none();
    ev.duration_ms = started.elapsed().as_millis() as u64;
    ev
}

#[allow(clippy::disallowed_methods)] // a path the jail resolved beneath the sealed view (regular files only, checked first)
fn file_failure(check: &Check, jail: &Jail) -> Option<String> {
    let Some(path) = check.file() else {
        return Some("not a file check".into());
    };
    let full = match jail.resolve(path.as_str(), Intent::Read) {
        Ok((_, full)) => full,
        Err(e) => return Some(e.to_string()),
    };
    if !full.is_file() {
        return Some(format!("{path} does not exist as a regular file"));
    }
    if matches!(check, Check::FileExists { .. }) {
        return None;
    }
    if check.is_document() {
        return document_failure(check, path.as_str(), &full);
    }
    let text = match std::fs::read(&full) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => return Some(format!("cannot read {path}: {e}")),
    };
    match check {
        Check::FileContains { text: want, .. } => {
            (!text.contains(want.as_str())).then(|| format!("{path} does not contain {want:?}"))
        }
        Check::FileMatches { regex, .. } => match regex::Regex::new(regex) {
            Ok(re) if re.is_match(&text) => None,
            Ok(_) => Some(format!("{path} does not match /{regex}/")),
            Err(e) => Some(format!("invalid regex /{regex}/: {e}")),
        },
        Check::JsonEquals { pointer, value, .. } => {
            let doc: serde_json::Value = match serde_json::from_str(&text) {
                Ok(d) => d,
                Err(e) => return Some(format!("{path} is not valid JSON: {e}")),
            };
            let Some(found) = doc.pointer(pointer) else {
                return Some(format!("{path} has no value at {pointer:?}"));
            };
            // Compare canonical forms, so 1 and 1.0 are equal as in JSON.
            let same = match (canonical_json(found), canonical_json(value)) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            };
            (!same).then(|| format!("{path} at {pointer:?} is {found}, expected {value}"))
        }
        _ => None,
    }
}

/// A `page` check on its own fresh view: the project's server and a
/// headless Chromium started together in the check's sandbox (see
/// `page.rs`), the page read until it shows what the check requires.
fn page_check(
    criterion: &str,
    index: usize,
    (check, p): (&Check, &loop_protocol::contract::PageCheck),
    view: &View,
    sandbox: &Settings,
) -> CheckEvidence {
    let started = Instant::now();
    let mut ev = blank(criterion, index, check, view.method.name());
    let mut req = ExecRequest::shell(String::new(), &view.dir);
    req.overlay_scratch = view.overlay.clone();
    req.overlay_below = view.below.clone();
    req.workspace = Some(view.dir.clone());
    req.check = true;
    req.timeout = Duration::from_secs(p.timeout_secs);
    sandbox.apply(&mut req);
    let proxy = req.egress.is_some() && matches!(req.net, loop_sandbox::Net::None);
    req.program = loop_sandbox::Program::Shell(page::command(p, proxy));
    let deadline = started + Duration::from_secs(p.timeout_secs);
    let mut browser = match loop_sandbox::spawn(&req) {
        Ok(s) => loop_sandbox::devtools::Browser::new(s),
        Err(e) => {
            ev.failure = Some(format!("the server and the browser could not start: {e}"));
            return ev;
        }
    };
    let read = page::read_page(&mut browser, p, deadline);
    let said = browser.session().stderr_tail();
    browser.stop();
    ev.duration_ms = started.elapsed().as_millis() as u64;
    ev.failure = match read {
        Ok(seen) => {
            let shown = format!(
                "title: {}\n{}",
                seen.title,
                loop_protocol::observation::head_tail(&seen.text, 4096)
            );
            ev.stdout = Some(loop_protocol::StreamEvidence {
                bytes: shown.len() as u64,
                sha256: loop_protocol::hash::sha256_hex(shown.as_bytes()),
                truncated: false,
                excerpt: shown,
            });
            page::shows(p, &seen).map(|why| format!("the page {} {why}", p.path))
        }
        Err(e) => {
            ev.timed_out = e.timed_out();
            let tail = said
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            Some(format!(
                "the page {} could not be read: {e}{}",
                p.path,
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(" (the browser said: {tail})")
                }
            ))
        }
    };
    ev.passed = ev.failure.is_none();
    ev
}

/// Why a document check fails on the file at `full` (a regular file the
/// jail resolved in the sealed view): read within the documents' bounds,
/// in a child process of its own (see `loop_documents::bounded`).
#[allow(clippy::disallowed_methods)] // a path the jail resolved beneath the sealed view (a regular file, checked first)
fn document_failure(check: &Check, path: &str, full: &std::path::Path) -> Option<String> {
    let Some(format) = loop_documents::Format::of(path) else {
        return Some(format!(
            "{path} is not a document a {} check reads (csv, tsv, xlsx, xlsm, xls, xlsb, ods, docx, pdf)",
            check.kind()
        ));
    };
    let size = std::fs::metadata(full).map(|m| m.len()).unwrap_or(0);
    if size > loop_documents::MAX_BYTES {
        return Some(format!(
            "{path} is {size} bytes, more than the {} a document check reads",
            loop_documents::MAX_BYTES
        ));
    }
    let bytes = match std::fs::read(full) {
        Ok(b) => b,
        Err(e) => return Some(format!("cannot read {path}: {e}")),
    };
    match loop_documents::bounded::read(format, path, &bytes) {
        Ok(doc) => loop_documents::judge(check, &doc),
        Err(e) => Some(e.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests;
