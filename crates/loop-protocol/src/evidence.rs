//! Evidence: what verification observed, check by check.

use crate::contract::Check;
use crate::path::RelPath;
use serde::{Deserialize, Serialize};

/// A captured output stream: its size and digest over every byte, plus a
/// bounded excerpt (head and tail) for people and models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEvidence {
    /// Total bytes the command wrote.
    pub bytes: u64,
    /// SHA-256 of all of them.
    pub sha256: String,
    /// Head and tail, lossily decoded as UTF-8.
    pub excerpt: String,
    /// Whether the excerpt leaves bytes out.
    pub truncated: bool,
}

/// The isolation a command actually ran under: reported, never assumed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Isolation {
    /// Own process group, killed as a whole.
    pub process_group: bool,
    /// Own PID namespace (with a fresh `/proc`).
    pub pid_namespace: bool,
    /// Own mount namespace (protected paths bound read-only).
    #[serde(default)]
    pub mount_namespace: bool,
    /// Own user namespace.
    #[serde(default)]
    pub user_namespace: bool,
    /// Own IPC namespace: SysV objects and POSIX message queues are the
    /// command's own and end with it.
    #[serde(default)]
    pub ipc_namespace: bool,
    /// Own cgroup namespace: the host's cgroup layout is not named.
    #[serde(default)]
    pub cgroup_namespace: bool,
    /// A new session with no controlling terminal (and `TIOCSTI` refused
    /// where seccomp is on): nothing can be typed into a terminal.
    #[serde(default)]
    pub no_terminal: bool,
    /// The command ran on a pseudo-terminal the runtime made for it and
    /// alone reads (it asked for a terminal); `no_terminal` still holds:
    /// the caller's terminal is never given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runtime_terminal: bool,
    /// Every capability given up (bounding set empty, uid 0 not special):
    /// the command holds no privilege, root's included.
    #[serde(default)]
    pub no_capabilities: bool,
    /// The size of the command's disk (a tmpfs holding its `/tmp` and its
    /// layer over the workspace), in MiB, when it has one; without, what it
    /// writes is bounded per file only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// Landlock filesystem rules (ABI version), if enforced.
    pub landlock_abi: Option<u32>,
    /// A seccomp filter was installed.
    pub seccomp: bool,
    /// `none` (own network namespace, loopback only) or `host`.
    pub network: String,
    /// Resource limits set (e.g. `core=0`, `nofile=1024`).
    pub rlimits: Vec<String>,
    /// A memory cgroup limited the command.
    pub memory_cgroup: bool,
    /// A pids cgroup limited the command's processes.
    #[serde(default)]
    pub pids_cgroup: bool,
    /// The environment was reduced to an allow-list.
    pub env_scrubbed: bool,
    /// Anything the sandbox wants a reader to know (what was not available).
    pub notes: Vec<String>,
    /// Every connection the command asked the runtime's egress proxy for,
    /// allowed or refused (`network` is `proxy` then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressAttempt>,
}

/// What started a task besides a person at a front end: a webhook
/// delivery, verified, or a schedule. Recorded in the ledger's genesis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRecord {
    /// The trigger's name in the Loopfile.
    pub name: String,
    /// `webhook` or `cron`.
    pub kind: String,
    /// The delivery's id (replays of it are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    /// The sender's event name, when it says one (`X-GitHub-Event`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// SHA-256 of the delivery's body, as signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
    /// How it was authenticated (`hmac-sha256`, `github`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_by: Option<String>,
    /// When it arrived (RFC 3339).
    pub at: String,
    /// The GitHub issue or pull request that asked for the task (a
    /// trigger with `github:`), where its outcome is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GithubOrigin>,
    /// The chat (Slack or Telegram) the task was asked from, where its
    /// progress is posted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<ChatOrigin>,
}

/// Where in a chat a task was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatOrigin {
    /// `slack` or `telegram`.
    pub kind: String,
    /// The channel's or chat's id.
    pub chat: String,
    /// Who asked (their user id).
    pub sender: String,
}

/// Where on GitHub a task was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubOrigin {
    /// `OWNER/NAME`.
    pub repository: String,
    /// The or pull request's number.
    pub number: u64,
    /// It is a pull request (a comment on one).
    pub pull_request: bool,
    /// Its page.
    pub url: String,
    /// Who asked (the label's author, or the comment's).
    pub sender: String,
    /// The comment that asked, when a comment did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<u64>,
    /// For a pull request: the commit its head was at when it asked (the
    /// commit the task started from), its branch and the repository that
    /// branch is in (another, for a fork's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_sha: Option<String>,
    /// See `head_sha`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_ref: Option<String>,
    /// See `head_sha`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_repository: Option<String>,
    /// The calls made to GitHub before the task started (reading a pull
    /// request's head).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ApiCall>,
    /// Who confirmed its drafted contract, when a later server started it
    /// (the server that drafted it stopped first, and the genesis has no
    /// drafting record of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_by: Option<String>,
}

/// One call made to a platform's API (GitHub's), as records keep it:
/// never what was sent or answered, only their digests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiCall {
    /// `GET`, `POST`.
    pub method: String,
    /// The path under the API's URL.
    pub path: String,
    /// The answer's status (0: no answer).
    pub status: u16,
    /// SHA-256 of the JSON sent, when something was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sha256: Option<String>,
    /// SHA-256 of the answer's body.
    pub response_sha256: String,
}

/// The project's setup steps as a task got them: run in its workspace
/// before the baseline (their outputs then cached as a layer), or taken
/// from the layer an earlier task made with the same steps and lockfiles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupRecord {
    /// The layer's key: SHA-256 over the steps and the key files' contents.
    pub key: String,
    /// The key files (lockfiles), each with its content digest.
    pub keyed_on: Vec<KeyedFile>,
    /// The layer came from an earlier task: no step ran, no network.
    pub reused: bool,
    /// The task whose setup made the layer.
    pub made_by: String,
    /// The workspace path the steps ran in: the layer's absolute paths
    /// (a venv's scripts, an editable install) name it, so every command
    /// of a task using the layer also sees its own workspace there.
    pub built_at: String,
    /// What the steps made, shared read-only from the layer (paths in the
    /// workspace).
    pub outputs: Vec<String>,
    /// Each output's content root when the layer was made (`path`: the
    /// output): a reused layer must still hold exactly that.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_roots: Vec<KeyedFile>,
    /// The toolchains the steps name, as they reported their versions
    /// (part of the key: a new interpreter is a new layer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toolchains: Vec<String>,
    /// The steps as they ran (when this task ran them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<SetupStep>,
}

/// How the task's contract was drafted from its instruction: each
/// proposal and the critic's verdict on it, the project's own checks the
/// baseline judged, and who confirmed the locked contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DraftingRecord {
    /// The model that drafted.
    pub model: crate::action::ModelInfo,
    /// Every proposal, in order.
    pub attempts: Vec<DraftAttempt>,
    /// Who locked the contract: `--accept-contract`, `terminal`, or
    /// `terminal, after editing`.
    pub confirmed_by: String,
    /// The calls made to a platform to show the draft where it was asked
    /// for its answer (GitHub's issue comments).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ApiCall>,
}

/// One drafting proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DraftAttempt {
    /// From 1.
    pub n: u32,
    /// What was proposed: the tool call's arguments, the model's unusable
    /// answer, or a person's edit.
    pub proposal: serde_json::Value,
    /// Whether the critic accepted it.
    pub accepted: bool,
    /// The critic's reasons for rejecting it (each names the criterion or
    /// check), and notes on what it labelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Tokens the call took, when a model made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::action::Usage>,
    /// The checker model's verdict on a draft the critic accepted
    /// (`approve` or `object`; its reasons are among `reasons`), when a
    /// checker is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checker: Option<String>,
    /// Tokens the checker's review of this draft took: the task pays for
    /// it as for the draft itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checker_usage: Option<crate::action::Usage>,
}

/// A project check (declared in the Loopfile's `verification:`, or
/// detected per stack for a drafted contract) and what the untouched
/// workspace said of it: one that held is kept as a regression guard; one
/// that failed already is not blamed on the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCheckRecord {
    /// The stack (`python`, `rust`, `go`, `node`, `cmake`, `make`).
    pub stack: String,
    /// `build`, `test` or `lint`.
    pub kind: String,
    /// The command.
    pub command: String,
    /// Whether it passed on the untouched workspace.
    pub held: bool,
    /// What became of it: `guard` (kept), `in the draft`, or `failing
    /// before the task: not required`.
    pub used: String,
}

/// A file a setup layer is keyed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedFile {
    /// Its path in the workspace.
    pub path: String,
    /// SHA-256 of its content.
    pub sha256: String,
    /// For guidance cut to its kind's budget: how many of its first bytes
    /// the model was shown (absent: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_bytes: Option<u64>,
}

/// One setup step as it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupStep {
    /// The shell command.
    pub command: String,
    /// Exit status, if it exited.
    pub exit_code: Option<i32>,
    /// Terminating signal, if killed.
    pub signal: Option<i32>,
    /// Whether its timeout killed it.
    pub timed_out: bool,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// Captured stdout.
    pub stdout: StreamEvidence,
    /// Captured stderr.
    pub stderr: StreamEvidence,
    /// The connections it asked the egress proxy for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressAttempt>,
}

/// One connection a sandboxed command asked for through the runtime's
/// egress proxy, judged against the allow-list before anything was opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressAttempt {
    /// The host asked for (lower case), as the command named it.
    pub host: String,
    /// The port.
    pub port: u16,
    /// `CONNECT` (a tunnel, e.g. HTTPS) or a plain-HTTP method.
    pub method: String,
    /// Whether the allow-list let it through.
    pub allowed: bool,
    /// The allow-list entry that let it through, or why it was refused
    /// (naming the list).
    pub rule: String,
    /// An allowed connection that could not be opened, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of one check on its own snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckEvidence {
    /// The criterion this check belongs to.
    pub criterion: String,
    /// Position of the check within its criterion.
    pub index: usize,
    /// The check's definition.
    pub check: Check,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed, in one sentence.
    pub failure: Option<String>,
    /// Exit status, for `run` checks that exited.
    pub exit_code: Option<i32>,
    /// Terminating signal, for `run` checks that were killed.
    pub signal: Option<i32>,
    /// Whether the check hit its timeout.
    pub timed_out: bool,
    /// Wall-clock duration.
    pub duration_ms: u64,
    /// Captured stdout (`run` checks).
    pub stdout: Option<StreamEvidence>,
    /// Captured stderr (`run` checks).
    pub stderr: Option<StreamEvidence>,
    /// How the check's fresh snapshot was made (`copy`, `reflink`, `overlay`).
    pub snapshot: String,
    /// Environment the runtime imposed on a `run` check so that its
    /// interpreters find their own libraries and tools before anything in
    /// the workspace (`PATH=…`, `PYTHONSAFEPATH=1`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// What the test runner reported, when its output was recognised:
    /// compared with the baseline run's to catch tests that vanished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestTally>,
    /// The connections the check asked for through the egress proxy (only
    /// when the contract allows a check the network).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressAttempt>,
    /// Not run on its own: the check named here (`criterion#index`) ran
    /// this check's command first, joined with `&&`, and passed, so this
    /// one's command exited 0 on the same snapshot (a build guard whose
    /// command begins the test check's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implied_by: Option<String>,
    /// Not run for this task: the same check ran on the same tree (the
    /// same Merkle root) in the same environments for an earlier task's
    /// baseline, and this is its result (only ever in a baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<ReusedRun>,
}

/// Where a reused baseline result came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReusedRun {
    /// The task whose baseline ran the check.
    pub task_id: String,
    /// That task's receipt, relative to the project.
    pub receipt: String,
    /// When it ran (RFC 3339).
    pub at: String,
}

impl CheckEvidence {
    /// How the check ended, in a few words for people: its failure (with
    /// the line of its output that says why, when one does) or its exit.
    pub fn status(&self) -> String {
        if let Some(by) = &self.implied_by {
            return format!("exit 0, implied by {by} (which ran this command first)");
        }
        match (self.exit_code, &self.failure) {
            (_, Some(f)) => match self.cause() {
                Some(why) if !self.passed && !f.contains(&why) => format!("{f} — {why}"),
                _ => f.clone(),
            },
            (Some(code), None) => format!("exit {code}"),
            (None, None) => "ok".into(),
        }
    }

    /// The line of a failed run's output that says why it failed: a
    /// Python exception's (a traceback's last line), an errno name
    /// (`EROFS`, `ENOENT`), a compiler's or a runner's `error`, a Rust
    /// panic; stderr first.
    pub fn cause(&self) -> Option<String> {
        if self.passed {
            return None;
        }
        let streams = [&self.stderr, &self.stdout];
        let lines = || {
            streams
                .iter()
                .filter_map(|s| s.as_ref())
                .flat_map(|s| s.excerpt.lines())
                .map(str::trim)
                // pytest marks the lines of a failure's explanation `E`.
                .map(|l| l.strip_prefix("E ").map_or(l, str::trim_start))
        };
        let exception = |l: &str| {
            l.split_once(": ").is_some_and(|(name, _)| {
                !name.is_empty()
                    && !name.contains(' ')
                    && (name.ends_with("Error") || name.ends_with("Exception"))
            })
        };
        let errno = |l: &str| {
            ["EROFS", "ENOENT", "EACCES", "EPERM", "ENOSPC", "EADDRINUSE"]
                .iter()
                .any(|e| l.contains(&format!("{e}:")))
        };
        let error = |l: &str| {
            l.starts_with("error:")
                || l.starts_with("error[")
                || l.starts_with("Error:")
                || l.starts_with("fatal error:")
                || l.contains(": error:")
                || l.contains("panicked at")
        };
        // A traceback's last exception line is the one that ended it.
        let found = lines()
            .rfind(|l| exception(l))
            .or_else(|| lines().find(|l| errno(l)))
            .or_else(|| lines().find(|l| error(l)))?;
        let mut cut: String = found.chars().take(160).collect();
        if cut.len() < found.len() {
            cut.push('…');
        }
        Some(cut)
    }
}

/// A test runner's account of one run, read from its output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestTally {
    /// The runner whose format was recognised (`pytest`, `unittest`,
    /// `cargo`, `go`, `jest`, `node`).
    pub runner: String,
    /// Tests that ran (passed, failed or errored; not skipped).
    pub ran: u64,
    /// Tests reported skipped (or deselected, or expected failures).
    pub skipped: u64,
    /// Names of the tests that ran, when the runner printed them (sorted,
    /// at most [`TestTally::MAX_NAMES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Whether `names` was cut at [`TestTally::MAX_NAMES`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub names_truncated: bool,
}

impl TestTally {
    /// Names kept per check.
    pub const MAX_NAMES: usize = 2000;
}

/// One entry of a task's check-integrity set: files that define what a
/// check means, protected like the contract's own `protected` globs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntegrityRule {
    /// The glob (relative to the workspace).
    pub glob: String,
    /// Why it is in the set (`pytest configuration`, `test files tests#0 runs`).
    pub why: String,
}

/// The checks of one criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionEvidence {
    /// Criterion id.
    pub id: String,
    /// True when every check passed.
    pub passed: bool,
    /// Per check, in contract order.
    pub checks: Vec<CheckEvidence>,
}

/// A required artifact as found in the sealed workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactEvidence {
    /// Workspace-relative path.
    pub path: RelPath,
    /// Whether it exists as a regular file.
    pub present: bool,
    /// SHA-256 of its content.
    pub sha256: Option<String>,
    /// Its size.
    pub bytes: Option<u64>,
}

/// One verification pass over a sealed workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerificationReport {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The contract hash the verifier checked against.
    pub contract_sha256: String,
    /// Merkle root of the sealed workspace manifest.
    pub manifest_root: String,
    /// Number of files sealed.
    pub files: u64,
    /// How check snapshots were made.
    pub snapshot_method: String,
    /// Per criterion, in contract order.
    pub criteria: Vec<CriterionEvidence>,
    /// Per required artifact.
    pub artifacts: Vec<ArtifactEvidence>,
    /// Protected paths whose content differs from the task's baseline
    /// (however they were changed: a tool, a command, a symlink).
    #[serde(default)]
    pub protected_violations: Vec<String>,
    /// Isolation the checks ran under.
    pub isolation: Isolation,
    /// Wall-clock duration of the whole pass.
    pub duration_ms: u64,
}

impl VerificationReport {
    /// Checks that failed, in order.
    pub fn failing_checks(&self) -> impl Iterator<Item = &CheckEvidence> {
        self.criteria
            .iter()
            .flat_map(|c| c.checks.iter())
            .filter(|c| !c.passed)
    }

    /// Required artifacts that are missing.
    pub fn missing_artifacts(&self) -> impl Iterator<Item = &ArtifactEvidence> {
        self.artifacts.iter().filter(|a| !a.present)
    }

    /// Number of criteria that passed.
    pub fn passed_criteria(&self) -> usize {
        self.criteria.iter().filter(|c| c.passed).count()
    }
}

/// A file a task changed, against its baseline: what the change set, the
/// receipt and `loop apply` all speak of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Path relative to the workspace (and the project).
    pub path: String,
    /// `added`, `modified` or `deleted`.
    pub change: String,
    /// Content hash before (none when added).
    pub before_sha256: Option<String>,
    /// Content hash after (none when deleted).
    pub after_sha256: Option<String>,
    /// git's mode before: `100644`, `100755` or `120000` (a symlink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_mode: Option<String>,
    /// git's mode after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_mode: Option<String>,
}

#[cfg(test)]
mod cause_tests {
    use super::*;

    fn failed(stdout: &str, stderr: &str) -> CheckEvidence {
        let stream = |t: &str| StreamEvidence {
            bytes: t.len() as u64,
            sha256: String::new(),
            excerpt: t.to_string(),
            truncated: false,
        };
        CheckEvidence {
            criterion: "tests".into(),
            index: 0,
            check: serde_json::from_value(serde_json::json!({"kind": "run", "command": "pytest", "expect_exit": 0, "timeout_secs": 60}))
                .unwrap(),
            passed: false,
            failure: Some("exit code 2, expected 0".into()),
            exit_code: Some(2),
            signal: None,
            timed_out: false,
            duration_ms: 1,
            stdout: Some(stream(stdout)),
            stderr: Some(stream(stderr)),
            snapshot: "overlay".into(),
            env: Vec::new(),
            tests: None,
            egress: Vec::new(),
            implied_by: None,
            reused_from: None,
        }
    }

    #[test]
    fn a_failed_checks_status_names_the_line_that_says_why() {
        let py = failed(
            "ERROR collecting tests/test_x.py\nE   ModuleNotFoundError: No module named 'prettytable'\n1 error in 0.1s\n",
            "",
        );
        assert_eq!(
            py.status(),
            "exit code 2, expected 0 — ModuleNotFoundError: No module named 'prettytable'"
        );
        let node = failed(
            " Test Files  3 passed (3)\n",
            "Error: EROFS: read-only file system, open '/w/node_modules/.vite/vitest/results.json'\n",
        );
        assert!(node.status().ends_with("— Error: EROFS: read-only file system, open '/w/node_modules/.vite/vitest/results.json'"), "{}", node.status());
        let cc = failed(
            "",
            "src/a.c:3:5: error: expected ';' before '}' token\nmake: *** [all] Error 1\n",
        );
        assert!(
            cc.status()
                .ends_with("— src/a.c:3:5: error: expected ';' before '}' token"),
            "{}",
            cc.status()
        );
        // Nothing that says why: the exit alone; a passed check: no cause.
        assert_eq!(failed("3 failed\n", "").status(), "exit code 2, expected 0");
        let mut ok = failed("", "Error: odd");
        ok.passed = true;
        ok.failure = None;
        ok.exit_code = Some(0);
        assert_eq!(ok.status(), "exit 0");
    }
}
