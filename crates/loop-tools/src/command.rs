//! `run_command`: the exec policy, the sandbox, and the command's effects
//! merged into the workspace all at once.

use crate::{RunArgs, ToolBox, exec_policy};
use loop_protocol::Observation;
use loop_sandbox::ExecRequest;
use loop_workspace::Manifest;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::time::Duration;

/// What a staged command's effects did to the workspace once merged.
struct Merged {
    /// Whether any path of the workspace changed.
    changed: bool,
    /// The bytes of the files admitted into the workspace.
    bytes: u64,
    /// The paths refused, each with its rule.
    refused: Vec<String>,
}

impl ToolBox {
    /// Run `a.command` in the sandbox (after the exec policy and the task's
    /// write limit let it), then merge its staged effects into the workspace.
    #[allow(clippy::disallowed_methods)] // the command's private scratch directories the runtime made
    pub(crate) fn run_command(&self, id: &str, a: &RunArgs, approved: bool) -> Observation {
        if a.command.trim().is_empty() {
            return Observation::error(id, "run_command", "`command` is empty");
        }
        // The exec policy: the one place a command is allowed to run.
        if let Some(refusal) = self.policy_refusal_of(id, &a.command, approved) {
            return refusal;
        }
        // The task's total of writes: once reached, no command runs.
        if let Some(refusal) = self.write_limit_refusal(id) {
            return refusal;
        }
        let max = self.limits.command_timeout;
        let timeout = a
            .timeout_secs
            .map(Duration::from_secs)
            .unwrap_or(max)
            .min(max);
        let staging = match self.command_staging(id) {
            Ok(staging) => staging,
            Err(o) => return o,
        };
        let before = match &staging {
            Some(_) => None,
            None => Manifest::of(self.jail.root()).ok(),
        };
        let req = self.exec_request(a, staging.as_ref(), timeout);
        let result = match loop_sandbox::run(&req) {
            Ok(r) => r,
            Err(e) => {
                if let Some(s) = &staging {
                    let _ = std::fs::remove_dir_all(s);
                }
                let mut o = Observation::error(id, "run_command", e.to_string());
                o.transient = e.is_transient();
                return o;
            }
        };
        // Staged: the command's effects enter the workspace now, all at once.
        let merged = match (&staging, self.staged_commands()) {
            (Some(s), Some(c)) => match self.merge_staged(id, s, c, &result) {
                Ok(m) => m,
                Err(o) => return o,
            },
            // Written in place (no staging here): what it brought is every
            // file it made or changed, counted whole.
            _ => {
                let after = Manifest::of(self.jail.root()).ok();
                Merged {
                    changed: before.as_ref().map(|m| &m.root) != after.as_ref().map(|m| &m.root),
                    bytes: brought(before.as_ref(), after.as_ref()),
                    refused: Vec::new(),
                }
            }
        };
        // What it wrote counts against the task's total: what its disk held
        // at its end, or (a command with no disk of its own) what it
        // brought into the workspace.
        self.count_written(if staging.is_some() && result.layer.is_some() {
            result.disk_used.max(merged.bytes)
        } else {
            // (Its disk, if any, held only its /tmp: its layer over the
            // workspace was on the host's disk, or it wrote in place.)
            result.disk_used.saturating_add(merged.bytes)
        });
        let content = report(
            &result,
            timeout,
            &merged.refused,
            (self.limits.disk_bytes >> 20, self.limits.write_bytes >> 20),
        );
        let mut o = Observation::ok(id, "run_command", content, merged.changed);
        if !result.isolation.egress.is_empty() {
            o.egress = Some(Box::new(result.isolation.egress));
        }
        o
    }

    /// The refusal of any command once the task's commands have written
    /// their limit (`limits.write_mb`) in all.
    fn write_limit_refusal(&self, id: &str) -> Option<Observation> {
        let written = self.written.load(std::sync::atomic::Ordering::SeqCst);
        if written >= self.limits.write_bytes {
            return Some(Observation::refused(
                id,
                "run_command",
                "limit: write_mb",
                format!(
                    "Refused: the task's commands (its child tasks' with them) have written {} MiB in all, its limit of {} MiB (limits.write_mb); no more commands run. Finish with what the workspace holds.",
                    written >> 20,
                    self.limits.write_bytes >> 20
                ),
            ));
        }
        None
    }

    /// A fresh scratch directory to stage a command's effects in, where
    /// commands are staged (none where they are not).
    fn command_staging(&self, id: &str) -> Result<Option<std::path::PathBuf>, Observation> {
        match self.staged_commands().map(|c| {
            loop_sandbox::unique_name("cmd").map(|n| c.scratch.join(n.trim_start_matches("cmd-")))
        }) {
            None => Ok(None),
            Some(Ok(p)) => Ok(Some(p)),
            Some(Err(e)) => Err(Observation::error(
                id,
                "run_command",
                format!("cannot stage the command: {e}"),
            )),
        }
    }

    /// The sandbox request for `a.command`: staged in `staging` if given,
    /// protected paths read-only, at most `timeout` long.
    fn exec_request(
        &self,
        a: &RunArgs,
        staging: Option<&std::path::PathBuf>,
        timeout: Duration,
    ) -> ExecRequest {
        let mut req = ExecRequest::shell(a.command.clone(), self.jail.root());
        req.overlay_scratch = staging.cloned();
        // Its writes are capped on its own disk while it runs, then kept
        // for the merge below.
        req.keep_writes = true;
        req.workspace = Some(self.jail.root().to_path_buf());
        // Protected paths are read-only to commands too, not only to the file tools.
        req.read_only_paths = self.jail.protected().existing(self.jail.root());
        req.timeout = timeout;
        req.net = self.net;
        req.terminal = a.terminal;
        self.sandbox.apply(&mut req);
        // Nor may its disk hold more than the task may still write (its
        // children's writes counted), rounded up to a MiB: one command
        // passes the total by less than a MiB, never by a whole disk.
        req.limits.disk_cap_mb = Some(self.write_left_mb().max(1));
        req.max_output = self.limits.max_shown_bytes * 2;
        req
    }

    /// Merge what a staged command wrote (under `s`, or on its own disk)
    /// into the workspace, journaled in `c`, refusing what may not enter;
    /// the scratch directory is removed either way.
    #[allow(clippy::disallowed_methods)] // the command's private scratch directories the runtime made
    fn merge_staged(
        &self,
        id: &str,
        s: &std::path::Path,
        c: &crate::CommandStaging,
        result: &loop_sandbox::ExecResult,
    ) -> Result<Merged, Observation> {
        // Protected paths, names no record can show faithfully
        // (control characters) and new modules named like the
        // standard library are refused, each with its rule.
        // On the command's own disk (held by `result.layer`), or,
        // where it had none, under the scratch directory.
        let upper = result
            .layer
            .as_ref()
            .map_or_else(|| s.join("upper"), |l| l.upper());
        if let Some(o) = self.fenced(id, "run_command") {
            let _ = std::fs::remove_dir_all(s);
            return Err(o);
        }
        let admitted = std::cell::Cell::new(0u64);
        let growth = std::cell::Cell::new(0i64);
        let left = Some(self.write_left_mb().max(1) << 20);
        let refuse = |rel: &str| self.effect_refusal(&upper, rel, (&admitted, &growth), left);
        let mut commit = loop_workspace::OverlayCommit::new(&c.journal);
        if !self.sync {
            commit = commit.unsynced();
        }
        let merged = commit.merge(&upper, self.jail.root(), &refuse);
        let _ = std::fs::remove_dir_all(s);
        match merged {
            Ok(m) => {
                self.grown
                    .fetch_add(growth.get(), std::sync::atomic::Ordering::SeqCst);
                Ok(Merged {
                    changed: !m.paths.is_empty(),
                    bytes: admitted.get(),
                    refused: m.refused,
                })
            }
            Err(e) => Err(Observation::error(
                id,
                "run_command",
                format!("the command ran, but its effects could not be committed: {e}"),
            )),
        }
    }

    /// Merge changes made elsewhere — a child task's, laid out as an
    /// overlay's upper layer (files and links; a deletion a whiteout),
    /// changing exactly `paths` — into the workspace, journaled, through
    /// the same judgements as a command's effects (protected paths, sizes,
    /// names, the code-policy gate, new modules shadowing the standard
    /// library), all or nothing: if one path is refused, none is merged
    /// and each refused one is named with its rule. Whether anything
    /// changed. The layer is left to its maker.
    pub fn merge_layer(
        &self,
        id: &str,
        tool: &str,
        upper: &std::path::Path,
        paths: &[String],
    ) -> Result<bool, Observation> {
        let Some(c) = self.commands.as_ref() else {
            return Err(Observation::error(
                id,
                tool,
                "changes made elsewhere cannot be merged into this workspace: it has no journal for them",
            ));
        };
        if let Some(o) = self.fenced(id, tool) {
            return Err(o);
        }
        // Judged first, every path, as the merge will judge it.
        let (admitted, growth) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0i64));
        let refused: Vec<String> = paths
            .iter()
            .filter_map(|rel| {
                self.effect_refusal(upper, rel, (&admitted, &growth), None)
                    .map(|why| format!("{rel} ({why})"))
            })
            .collect();
        if !refused.is_empty() {
            return Err(Observation::refused(
                id,
                tool,
                "authority: the changes are refused",
                format!(
                    "Nothing was merged: this workspace's rules refuse {}",
                    refused.join("; ")
                ),
            ));
        }
        let admitted = std::cell::Cell::new(0u64);
        let growth = std::cell::Cell::new(0i64);
        let refuse = |rel: &str| self.effect_refusal(upper, rel, (&admitted, &growth), None);
        let mut commit = loop_workspace::OverlayCommit::new(&c.journal);
        if !self.sync {
            commit = commit.unsynced();
        }
        match commit.merge(upper, self.jail.root(), &refuse) {
            // Judged the same way a moment ago: a refusal now would mean
            // the layer changed under the runtime, which only it writes.
            Ok(m) if m.refused.is_empty() => {
                self.grown
                    .fetch_add(growth.get(), std::sync::atomic::Ordering::SeqCst);
                Ok(!m.paths.is_empty())
            }
            Ok(m) => Err(Observation::error(
                id,
                tool,
                format!(
                    "part of the changes was refused at the merge: {}",
                    m.refused.join("; ")
                ),
            )),
            Err(e) => Err(Observation::error(
                id,
                tool,
                format!("the changes could not be committed: {e}"),
            )),
        }
    }

    /// The exec policy's refusal of `command`, if it refuses it: forbidden,
    /// or needing a person's approval it does not have.
    fn policy_refusal_of(&self, id: &str, command: &str, approved: bool) -> Option<Observation> {
        self.policy_refusal_for(id, "run_command", command, approved)
    }

    /// The exec policy's refusal of `command`, run by `tool`, if it refuses.
    pub(crate) fn policy_refusal_for(
        &self,
        id: &str,
        tool: &str,
        command: &str,
        approved: bool,
    ) -> Option<Observation> {
        let verdict = self.exec_policy.evaluate(command);
        let rule = verdict.rule.clone().unwrap_or_else(|| "default".into());
        let (title, why) = match verdict.decision {
            exec_policy::Decision::Forbidden => (
                format!("exec policy: forbidden ({rule})"),
                "is forbidden by the exec policy",
            ),
            exec_policy::Decision::Prompt if !approved => (
                format!("exec policy: needs approval ({rule})"),
                "needs a person's approval",
            ),
            _ => return None,
        };
        Some(Observation::refused(
            id,
            tool,
            title,
            format!(
                "`{}` {why} (rule `{rule}`); it was not run",
                verdict.command
            ),
        ))
    }

    /// Why one path a command wrote (`rel`, in the staged `upper` layer) may
    /// not enter the workspace, if it may not: protected paths, files over
    /// the size limits (`admitted` counts the command's bytes so far), names
    /// no record can show faithfully, the code-policy gate, and new modules
    /// named like the standard library, each with its rule.
    #[allow(clippy::disallowed_methods)] // lstat only: sizes of the ended command's upper layer and the workspace entries it replaces
    fn effect_refusal(
        &self,
        upper: &std::path::Path,
        rel: &str,
        (admitted, growth): (&std::cell::Cell<u64>, &std::cell::Cell<i64>),
        write_left: Option<u64>,
    ) -> Option<String> {
        if let Some(rule) = self.jail.protected().matching(rel) {
            return Some(format!("protected by {rule}"));
        }
        // Apparent size: a sparse file counts whole, since everything
        // that hashes or diffs it reads every byte.
        if let Ok(m) = std::fs::symlink_metadata(upper.join(rel))
            && m.is_file()
        {
            if m.len() > self.limits.max_file_bytes {
                return Some(format!(
                    "{} bytes, over the per-file limit of {} (limits.max_file_bytes)",
                    m.len(),
                    self.limits.max_file_bytes
                ));
            }
            // All of one command's files together, too.
            let cap = self.limits.max_file_bytes.saturating_mul(4);
            let total = admitted.get().saturating_add(m.len());
            if total > cap {
                return Some(format!(
                    "the command's files would reach {total} bytes, over the per-command total of {cap} (4 × limits.max_file_bytes)"
                ));
            }
            // A command's, no more than the task may still write (where its
            // layer was not on its own disk, nothing else bounded it; a
            // child's change was charged already, as its writes).
            if let Some(left) = write_left
                && total > left
            {
                return Some(format!(
                    "the command's files would reach {total} bytes, over the {} MiB the task may still write (limits.write_mb)",
                    left >> 20
                ));
            }
            // What the task's commands leave, added up over the task, in
            // the blocks it takes (an empty file costs one).
            let before = std::fs::symlink_metadata(self.jail.root().join(rel))
                .ok()
                .map_or(0, |w| entry_cost(&w));
            let delta = entry_cost(&m) - before;
            if let Some(why) = self.over_disk_budget(growth, delta) {
                return Some(why);
            }
            admitted.set(total);
        } else if let Ok(m) = std::fs::symlink_metadata(upper.join(rel)) {
            let now = std::fs::symlink_metadata(self.jail.root().join(rel)).ok();
            let delta = if m.file_type().is_char_device() && m.rdev() == 0 {
                // A deleted entry gives its blocks back.
                -now.map_or(0, |w| entry_cost(&w))
            } else if now.is_none() {
                // A new directory, link or FIFO takes a block (and an
                // inode): a million empty directories are not free.
                entry_cost(&m)
            } else {
                0
            };
            if let Some(why) = self.over_disk_budget(growth, delta) {
                return Some(why);
            }
        }
        if rel.chars().any(char::is_control) {
            return Some("a control character in the name".into());
        }
        // The code-policy gate judges what a command wrote as it judges
        // the file tools' writes.
        if let Some(why) = self.policy_refusal(upper, rel) {
            return Some(why);
        }
        if std::fs::symlink_metadata(self.jail.root().join(rel)).is_err()
            && let Some((lang, module)) = loop_gates::shadow::shadowed(rel, &|d| self.is_package(d))
        {
            return Some(format!(
                "gate: stdlib shadow ({lang} {module}): it would shadow the {lang} standard module `{module}`"
            ));
        }
        None
    }
}

impl ToolBox {
    /// Why growing the workspace by `delta` more bytes (after `growth` so
    /// far in this command) would pass the task's disk budget, if it
    /// would; else the growth is counted.
    fn over_disk_budget(&self, growth: &std::cell::Cell<i64>, delta: i64) -> Option<String> {
        let grown = self.grown.load(std::sync::atomic::Ordering::SeqCst);
        let after = grown.saturating_add(growth.get()).saturating_add(delta);
        if delta > 0 && after > self.limits.disk_bytes as i64 {
            return Some(format!(
                "the task's commands would have grown the workspace by {after} bytes, over the task's limit of {} MiB (limits.disk_mb)",
                self.limits.disk_bytes >> 20
            ));
        }
        growth.set(growth.get().saturating_add(delta));
        None
    }
}

/// What an entry of the workspace costs the task's disk budget: its size
/// in 4 KiB blocks, one at least (a directory, a link, an empty file).
fn entry_cost(m: &std::fs::Metadata) -> i64 {
    block_cost(if m.is_file() { m.len() } else { 0 })
}

/// What `size` bytes cost the task's disk budget: whole 4 KiB blocks, one
/// at least (a directory, a link, an empty file take one).
pub fn block_cost(size: u64) -> i64 {
    const BLOCK: u64 = 4096;
    (size.div_ceil(BLOCK).max(1) * BLOCK) as i64
}

/// What tools print when a name does not resolve or a host cannot be
/// reached (glibc, curl, Python, Node, Go, Rust's resolvers, pip).
const NO_NETWORK: &[&str] = &[
    "Temporary failure in name resolution",
    "Name or service not known",
    "Could not resolve host",
    "getaddrinfo ENOTFOUND",
    "getaddrinfo EAI_AGAIN",
    "Network is unreachable",
    "dial tcp: lookup",
    "failed to lookup address information",
    "Failed to establish a new connection",
    "No address associated with hostname",
];

/// The bytes of the files `after` holds that `before` did not hold as
/// they are (new or changed), whole.
fn brought(before: Option<&Manifest>, after: Option<&Manifest>) -> u64 {
    let (Some(before), Some(after)) = (before, after) else {
        return 0;
    };
    let had: std::collections::HashMap<&str, &str> = before
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.sha256.as_str()))
        .collect();
    after
        .entries
        .iter()
        .filter(|e| had.get(e.path.as_str()) != Some(&e.sha256.as_str()))
        .fold(0u64, |n, e| n.saturating_add(e.size))
}

/// What the model is shown of a command: how it ended, its output, and
/// what of its effects was refused.
/// `limits`: the task's `disk_mb` and `write_mb`, to name the one that
/// sized the command's disk.
fn report(
    result: &loop_sandbox::ExecResult,
    timeout: Duration,
    refused: &[String],
    (disk_mb, write_mb): (u64, u64),
) -> String {
    let status = match (result.exit_code, result.signal, result.timed_out) {
        _ if result.cancelled => "cancelled; the command's process tree was killed".to_string(),
        (_, _, true) => format!("timed out after {} s and was killed", timeout.as_secs()),
        (Some(c), _, _) => format!("exit {c}"),
        (None, Some(s), _) => format!("killed by signal {s}"),
        _ => "ended".to_string(),
    };
    let mut content = format!("{status} ({:.2} s)\n", result.duration.as_secs_f64());
    // A write refused for space (the disk filled, or one `fallocate`
    // asked for more than was left) names the limit behind it.
    let no_space = |c: &loop_sandbox::Captured| c.excerpt().contains("No space left on device");
    if let Some(mb) = result.isolation.disk_mb
        && (result.disk_full || no_space(&result.stdout) || no_space(&result.stderr))
    {
        let most = if mb < disk_mb {
            format!(
                "{mb} MiB, what is left of the task's limit of {write_mb} MiB on what its commands write in all (limits.write_mb)"
            )
        } else {
            format!("the task's limit of {mb} MiB (limits.disk_mb)")
        };
        content.push_str(&format!(
            "--- disk ---\nthe command's writes (its /tmp and its changes to the workspace together) may not exceed {most}; what went past it failed with \"No space left on device\"\n"
        ));
    }
    // A name that did not resolve, or a host not reached, in a sandbox
    // without the network names the setting that gives it.
    let offline = |c: &loop_sandbox::Captured| {
        let text = c.excerpt();
        NO_NETWORK.iter().any(|sign| text.contains(sign))
    };
    if result.isolation.network != "host" && (offline(&result.stdout) || offline(&result.stderr)) {
        content.push_str(
            "--- network ---\nthe command runs without the network: a host it needs must be listed in the Loopfile's `network.allow` (setup steps: `network.setup`); every other connection fails as above\n",
        );
    }
    for (name, c) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if c.total() > 0 {
            content.push_str(&format!("--- {name} ---\n{}\n", c.excerpt()));
        }
    }
    if !refused.is_empty() {
        content.push_str(&format!(
            "--- not applied (refused) ---\n{}\n",
            refused.join("\n")
        ));
    }
    if !result.not_kept.is_empty() {
        content.push_str(&format!(
            "--- shared environments: writes not kept ---\n{}\n",
            result.not_kept.join("\n")
        ));
    }
    // The network, as the runtime's proxy saw it: a refusal names its list.
    if !result.isolation.egress.is_empty() {
        content.push_str("--- network (through the runtime's proxy) ---\n");
        for a in &result.isolation.egress {
            let verdict = match (a.allowed, &a.error) {
                (true, None) => format!("allowed by `{}`", a.rule),
                (true, Some(e)) => format!("allowed by `{}`, but {e}", a.rule),
                (false, _) => a.rule.clone(),
            };
            content.push_str(&format!("{} {}:{}: {verdict}\n", a.method, a.host, a.port));
        }
    }
    content
}
