//! The progress detector: is the loop getting anywhere? It keys on content
//! — what was asked, what came back, and the workspace's Merkle root — never
//! on command names, so legitimate polling (a build log that grows, tests
//! re-run after each edit) is not flagged. The first time a pattern appears
//! the model is nudged (the pattern named in an observation); if it appears
//! again the task stops as `lost`, the pattern named in the ledger.

use loop_protocol::hash::canonical_sha256;
use loop_protocol::{Observation, ObservationStatus, ToolCall};
use std::collections::{BTreeSet, HashSet};

/// Thresholds (the Loopfile's `progress`; defaults follow proven agent runtimes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProgressConfig {
    /// The same action with the same observation this many times running.
    pub repeat_same: usize,
    /// The same action failing this many times running.
    pub repeat_failing: usize,
    /// A-B-A-B alternation over this many steps.
    pub alternation: usize,
    /// Read-only explorations of new targets with no workspace change.
    pub read_only: usize,
    /// Steps in a row with no new evidence (no change, nothing new observed).
    pub no_evidence: usize,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        ProgressConfig {
            repeat_same: 4,
            repeat_failing: 3,
            alternation: 6,
            read_only: 8,
            no_evidence: 10,
        }
    }
}

/// What the detector says after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StallVerdict {
    /// Progress, or nothing to say.
    Ok,
    /// A pattern appeared for the first time: tell the model.
    Nudge(String),
    /// The pattern appeared again after a nudge: stop, `lost`.
    Stop(String),
}

#[derive(Debug, Clone)]
struct StepRecord {
    action: String,
    observation: String,
    failed: bool,
    read_only: bool,
    root: String,
    new_evidence: bool,
}

/// Tools that only read.
fn reads_only(tool: &str) -> bool {
    loop_protocol::ToolName::from_name(tool).is_some_and(loop_protocol::ToolName::reads_only)
}

/// Watches steps and names stalls.
#[derive(Debug, Default)]
pub struct ProgressDetector {
    config: ProgressConfig,
    steps: Vec<StepRecord>,
    seen_observations: HashSet<String>,
    nudged: BTreeSet<&'static str>,
    rejected_root: Option<String>,
    /// The workspace root after the last step (kept across a nudge, which
    /// clears the window but not what the workspace was).
    last_root: Option<String>,
}

fn failed(o: &Observation) -> bool {
    match &o.status {
        ObservationStatus::Ok => {
            // run_command reports "exit N …" first; a non-zero exit is a failure.
            o.tool == loop_protocol::ToolName::RunCommand.as_str()
                && o.content
                    .strip_prefix("exit ")
                    .and_then(|r| r.split_whitespace().next())
                    .is_some_and(|code| code != "0")
                || o.content.starts_with("timed out")
        }
        ObservationStatus::Refused { .. } | ObservationStatus::Error => true,
    }
}

impl ProgressDetector {
    /// A detector with `config`.
    pub fn new(config: ProgressConfig) -> Self {
        ProgressDetector {
            config,
            ..Default::default()
        }
    }

    /// Verification rejected the work in the workspace with Merkle root `root`.
    pub fn rejected_at(&mut self, root: &str) {
        self.rejected_root = Some(root.to_string());
    }

    /// Before verifying a `finish` claim: a claim on exactly the workspace
    /// verification already rejected is a stall.
    pub fn claim(&mut self, root: &str) -> StallVerdict {
        if self.rejected_root.as_deref() == Some(root) {
            return self.flag(
                loop_protocol::ToolName::Finish.as_str(),
                "`finish` claimed again on the unchanged workspace that verification rejected",
            );
        }
        StallVerdict::Ok
    }

    /// Record a malformed answer at `step`: the same error again and again
    /// is the same failing action.
    pub fn malformed(&mut self, step: u32, error: &str, root: &str) -> StallVerdict {
        let call = ToolCall {
            id: format!("malformed-{step}"),
            tool: "<malformed answer>".into(),
            args: serde_json::Value::String(error.to_string()),
        };
        let obs = Observation::error(&call.id, &call.tool, error);
        self.step(&[call], &[obs], root)
    }

    /// Record one step (its calls and observations, and the workspace root
    /// after it) and judge.
    pub fn step(
        &mut self,
        calls: &[ToolCall],
        observations: &[Observation],
        root: &str,
    ) -> StallVerdict {
        let action = canonical_sha256(
            &calls
                .iter()
                .map(|c| (c.tool.as_str(), &c.args))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default();
        let observation = canonical_sha256(
            &observations
                .iter()
                .map(|o| (o.tool.as_str(), &o.status, o.content.as_str()))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_default();
        let changed = self.last_root.as_deref() != Some(root);
        self.last_root = Some(root.to_string());
        let new_observation = self.seen_observations.insert(observation.clone());
        self.steps.push(StepRecord {
            action,
            observation,
            failed: observations.iter().any(failed),
            read_only: !calls.is_empty() && calls.iter().all(|c| reads_only(&c.tool)),
            root: root.to_string(),
            new_evidence: changed || new_observation,
        });
        self.judge()
    }

    fn tail(&self, n: usize) -> Option<&[StepRecord]> {
        (n > 0 && self.steps.len() >= n).then(|| &self.steps[self.steps.len() - n..])
    }

    fn judge(&mut self) -> StallVerdict {
        let c = self.config.clone();
        if let Some(t) = self.tail(c.repeat_same)
            && t.iter()
                .all(|s| s.action == t[0].action && s.observation == t[0].observation)
        {
            return self.flag(
                "repeat",
                &format!(
                    "the same action returned the same observation {} times running",
                    c.repeat_same
                ),
            );
        }
        if let Some(t) = self.tail(c.repeat_failing)
            && t.iter().all(|s| s.action == t[0].action && s.failed)
        {
            return self.flag(
                "failing",
                &format!("the same action failed {} times running", c.repeat_failing),
            );
        }
        if let Some(t) = self.tail(c.alternation) {
            let (a, b) = (&t[0].action, &t[1].action);
            if a != b
                && t.iter()
                    .enumerate()
                    .all(|(i, s)| &s.action == if i % 2 == 0 { a } else { b })
            {
                return self.flag(
                    "alternation",
                    &format!(
                        "two actions alternating (A-B-A-B) over {} steps",
                        c.alternation
                    ),
                );
            }
        }
        if let Some(t) = self.tail(c.read_only)
            && t.iter().all(|s| s.read_only && s.root == t[0].root)
        {
            return self.flag(
                "exploring",
                &format!(
                    "{} read-only explorations with no change to the workspace",
                    c.read_only
                ),
            );
        }
        if let Some(t) = self.tail(c.no_evidence)
            && t.iter().all(|s| !s.new_evidence)
        {
            return self.flag(
                "no-evidence",
                &format!(
                    "{} steps with no new evidence (no change, nothing new observed)",
                    c.no_evidence
                ),
            );
        }
        StallVerdict::Ok
    }

    fn flag(&mut self, kind: &'static str, pattern: &str) -> StallVerdict {
        if self.nudged.insert(kind) {
            // The window starts again after a nudge, so a stop needs the pattern anew.
            self.steps.clear();
            StallVerdict::Nudge(pattern.to_string())
        } else {
            StallVerdict::Stop(pattern.to_string())
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use serde_json::json;

    fn call(tool: &str, args: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            tool: tool.into(),
            args,
        }
    }

    fn ok(tool: &str, content: &str) -> Observation {
        Observation::ok("c", tool, content, false)
    }

    #[test]
    fn the_same_action_and_observation_four_times_nudges_then_stops() {
        let mut d = ProgressDetector::default();
        let c = [call("run_command", json!({"command": "ls"}))];
        let o = [ok("run_command", "exit 0 (0.01 s)\nsame")];
        for _ in 0..3 {
            assert_eq!(d.step(&c, &o, "r"), StallVerdict::Ok);
        }
        assert!(
            matches!(d.step(&c, &o, "r"), StallVerdict::Nudge(p) if p.contains("same observation 4 times"))
        );
        for _ in 0..3 {
            assert_eq!(d.step(&c, &o, "r"), StallVerdict::Ok);
        }
        assert!(matches!(d.step(&c, &o, "r"), StallVerdict::Stop(_)));
    }

    #[test]
    fn the_same_failing_action_three_times_is_flagged() {
        let mut d = ProgressDetector::default();
        let c = [call("run_command", json!({"command": "make"}))];
        for i in 0..2 {
            let o = [ok("run_command", &format!("exit 2 (0.1 s)\nerror at {i}"))];
            assert_eq!(d.step(&c, &o, "r"), StallVerdict::Ok);
        }
        let o = [ok("run_command", "exit 2 (0.1 s)\nerror at 9")];
        assert!(
            matches!(d.step(&c, &o, "r"), StallVerdict::Nudge(p) if p.contains("failed 3 times"))
        );
        // After the nudge, three more of the same is a stop.
        let o = [ok("run_command", "exit 2 (0.1 s)\nerror again")];
        assert_eq!(d.step(&c, &o, "r"), StallVerdict::Ok);
        assert_eq!(d.step(&c, &o, "r"), StallVerdict::Ok);
        assert!(
            matches!(d.step(&c, &o, "r"), StallVerdict::Stop(p) if p.contains("failed 3 times"))
        );
    }

    #[test]
    fn steps_with_no_new_evidence_are_flagged_then_stopped() {
        // Different commands each time (so no repeat), all answering what
        // was already seen, and nothing changing.
        let mut d = ProgressDetector::default();
        let seen = [ok("run_command", "exit 0 (0.01 s)\nnothing new")];
        let _ = d.step(
            &[call("run_command", json!({"command": "true"}))],
            &seen,
            "r",
        );
        let mut verdicts = Vec::new();
        for i in 0..20 {
            let c = [call(
                "run_command",
                json!({"command": format!("echo {i} >/dev/null")}),
            )];
            verdicts.push(d.step(&c, &seen, "r"));
        }
        let nudge = verdicts
            .iter()
            .position(|v| matches!(v, StallVerdict::Nudge(p) if p.contains("no new evidence")));
        let stop = verdicts
            .iter()
            .position(|v| matches!(v, StallVerdict::Stop(p) if p.contains("no new evidence")));
        assert_eq!(
            nudge,
            Some(9),
            "the tenth step without evidence: {verdicts:?}"
        );
        assert_eq!(stop, Some(19), "ten more after the nudge: {verdicts:?}");
    }

    #[test]
    fn thresholds_come_from_the_configuration() {
        let mut d = ProgressDetector::new(ProgressConfig {
            repeat_failing: 5,
            ..ProgressConfig::default()
        });
        let c = [call("run_command", json!({"command": "make"}))];
        let mut verdicts = Vec::new();
        for i in 0..5 {
            let o = [ok("run_command", &format!("exit 2 (0.1 s)\nerror {i}"))];
            verdicts.push(d.step(&c, &o, "r"));
        }
        assert_eq!(
            &verdicts[..4],
            &[
                StallVerdict::Ok,
                StallVerdict::Ok,
                StallVerdict::Ok,
                StallVerdict::Ok
            ]
        );
        assert!(matches!(&verdicts[4], StallVerdict::Nudge(p) if p.contains("failed 5 times")));
    }

    #[test]
    fn alternation_is_flagged() {
        let mut d = ProgressDetector::default();
        let a = [call("write_file", json!({"path": "x", "content": "1"}))];
        let b = [call("write_file", json!({"path": "x", "content": "2"}))];
        let mut last = StallVerdict::Ok;
        for i in 0..6 {
            let (c, root) = if i % 2 == 0 { (&a, "r1") } else { (&b, "r2") };
            last = d.step(c, &[ok("write_file", &format!("replaced x {i}"))], root);
        }
        assert!(matches!(&last, StallVerdict::Nudge(p) if p.contains("A-B-A-B")));
        for i in 6..12 {
            let (c, root) = if i % 2 == 0 { (&a, "r1") } else { (&b, "r2") };
            last = d.step(c, &[ok("write_file", &format!("replaced x {i}"))], root);
        }
        assert!(matches!(last, StallVerdict::Stop(p) if p.contains("A-B-A-B")));
    }

    #[test]
    fn reading_new_files_forever_without_changing_anything_is_flagged() {
        let mut d = ProgressDetector::default();
        let mut last = StallVerdict::Ok;
        for i in 0..8 {
            let c = [call("read_file", json!({"path": format!("f{i}")}))];
            last = d.step(&c, &[ok("read_file", &format!("content {i}"))], "r");
        }
        assert!(matches!(&last, StallVerdict::Nudge(p) if p.contains("read-only explorations")));
        for i in 8..16 {
            let c = [call("read_file", json!({"path": format!("f{i}")}))];
            last = d.step(&c, &[ok("read_file", &format!("content {i}"))], "r");
        }
        assert!(matches!(last, StallVerdict::Stop(p) if p.contains("read-only explorations")));
    }

    #[test]
    fn polling_a_growing_log_and_rerunning_tests_after_edits_are_not_flagged() {
        let mut d = ProgressDetector::default();
        let poll = [call("run_command", json!({"command": "tail build.log"}))];
        for i in 0..20 {
            let o = [ok("run_command", &format!("exit 0 (0.01 s)\nline {i}"))];
            assert_eq!(d.step(&poll, &o, "r"), StallVerdict::Ok, "poll {i}");
        }
        let mut d = ProgressDetector::default();
        let test = [call("run_command", json!({"command": "pytest"}))];
        for i in 0..12 {
            let edit = [call(
                "edit_file",
                json!({"path": "a.py", "old": format!("{i}"), "new": format!("{}", i + 1)}),
            )];
            assert_eq!(
                d.step(&edit, &[ok("edit_file", "edited")], &format!("root{i}")),
                StallVerdict::Ok
            );
            let o = [ok("run_command", "exit 1 (0.3 s)\n1 failed")];
            assert_eq!(
                d.step(&test, &o, &format!("root{i}")),
                StallVerdict::Ok,
                "re-run {i}"
            );
        }
    }

    #[test]
    fn finish_on_the_rejected_workspace_is_flagged() {
        let mut d = ProgressDetector::default();
        d.rejected_at("r1");
        assert_eq!(d.claim("r2"), StallVerdict::Ok);
        assert!(
            matches!(d.claim("r1"), StallVerdict::Nudge(p) if p.contains("unchanged workspace"))
        );
        assert!(matches!(d.claim("r1"), StallVerdict::Stop(_)));
    }
}
