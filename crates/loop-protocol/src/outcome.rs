//! How a task ends. `Verified` can only be built from evidence that covers
//! every criterion of the locked contract.

use crate::contract::Contract;
use crate::evidence::VerificationReport;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Model turns.
    Steps,
    /// Tokens.
    Tokens,
    /// Wall-clock time.
    Time,
    /// Money.
    Cost,
}

impl LimitKind {
    /// Every limit.
    pub const ALL: [LimitKind; 4] = [
        LimitKind::Steps,
        LimitKind::Tokens,
        LimitKind::Time,
        LimitKind::Cost,
    ];
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitKind::Steps => "steps",
            LimitKind::Tokens => "tokens",
            LimitKind::Time => "time",
            LimitKind::Cost => "cost",
        })
    }
}

/// Proof that a verification report covers and passes the whole locked
/// contract. The only way to make one is [`Acceptance::establish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptance {
    contract_sha256: String,
    manifest_root: String,
    attempt: u32,
}

/// Why a report does not accept the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The contract no longer hashes to the locked value.
    #[error("the contract changed after it was locked (locked {locked}, now {now})")]
    ContractChanged {
        /// Hash at lock time.
        locked: String,
        /// Hash now.
        now: String,
    },
    /// The report was made against a different contract.
    #[error("the report checked contract {report}, not the locked {locked}")]
    WrongContract {
        /// Locked hash.
        locked: String,
        /// The report's.
        report: String,
    },
    /// Protected paths changed since the task started.
    #[error("protected paths changed: {}", .0.join(", "))]
    ProtectedChanged(Vec<String>),
    /// Criteria without passing evidence.
    #[error("criteria not passing: {}", .0.join(", "))]
    CriteriaFailing(Vec<String>),
    /// Required artifacts that are missing.
    #[error("required artifacts missing: {}", .0.join(", "))]
    ArtifactsMissing(Vec<String>),
}

impl Acceptance {
    /// Accept `report` for `contract` only if the contract still hashes to
    /// `locked_sha256`, the report was made for it, every criterion has
    /// evidence for every one of its checks and all passed, and every
    /// required artifact is present with a hash.
    pub fn establish(
        contract: &Contract,
        locked_sha256: &str,
        report: &VerificationReport,
    ) -> Result<Acceptance, Rejection> {
        let now = contract.sha256().unwrap_or_default();
        if now != locked_sha256 {
            return Err(Rejection::ContractChanged {
                locked: locked_sha256.to_string(),
                now,
            });
        }
        if report.contract_sha256 != locked_sha256 {
            return Err(Rejection::WrongContract {
                locked: locked_sha256.to_string(),
                report: report.contract_sha256.clone(),
            });
        }
        if !report.protected_violations.is_empty() {
            return Err(Rejection::ProtectedChanged(
                report.protected_violations.clone(),
            ));
        }
        let failing: Vec<String> = contract
            .criteria
            .iter()
            .filter(|criterion| {
                let Some(ev) = report.criteria.iter().find(|e| e.id == criterion.id) else {
                    return true;
                };
                let covered = ev.checks.len() == criterion.checks.len()
                    && ev
                        .checks
                        .iter()
                        .zip(&criterion.checks)
                        .all(|(e, c)| e.passed && &e.check == c && e.criterion == criterion.id);
                !(ev.passed && covered)
            })
            .map(|c| c.id.clone())
            .collect();
        if !failing.is_empty() {
            return Err(Rejection::CriteriaFailing(failing));
        }
        let missing: Vec<String> = contract
            .artifacts
            .iter()
            .filter(|a| {
                !report
                    .artifacts
                    .iter()
                    .any(|e| &e.path == *a && e.present && e.sha256.is_some())
            })
            .map(|a| a.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Rejection::ArtifactsMissing(missing));
        }
        Ok(Acceptance {
            contract_sha256: locked_sha256.to_string(),
            manifest_root: report.manifest_root.clone(),
            attempt: report.attempt,
        })
    }

    /// The accepted contract's hash.
    pub fn contract_sha256(&self) -> &str {
        &self.contract_sha256
    }

    /// The Merkle root of the accepted workspace.
    pub fn manifest_root(&self) -> &str {
        &self.manifest_root
    }

    /// Which verification attempt accepted.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every criterion passed on fresh snapshots.
    Verified(Acceptance),
    /// Verification kept rejecting the result.
    Failed,
    /// No progress: the model stalled.
    Lost,
    /// A budget ran out.
    LimitReached(LimitKind),
    /// A person or signal stopped it.
    Cancelled,
    /// The runtime could not go on.
    Error,
}

/// The outcome's kind, as written in ledgers and receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// See [`Outcome::Verified`].
    Verified,
    /// See [`Outcome::Failed`].
    Failed,
    /// See [`Outcome::Lost`].
    Lost,
    /// See [`Outcome::LimitReached`].
    LimitReached,
    /// See [`Outcome::Cancelled`].
    Cancelled,
    /// See [`Outcome::Error`].
    Error,
}

impl Outcome {
    /// The serialisable record of this outcome.
    pub fn record(&self, reason: impl Into<String>) -> OutcomeRecord {
        let (kind, limit) = match self {
            Outcome::Verified(_) => (OutcomeKind::Verified, None),
            Outcome::Failed => (OutcomeKind::Failed, None),
            Outcome::Lost => (OutcomeKind::Lost, None),
            Outcome::LimitReached(k) => (OutcomeKind::LimitReached, Some(*k)),
            Outcome::Cancelled => (OutcomeKind::Cancelled, None),
            Outcome::Error => (OutcomeKind::Error, None),
        };
        OutcomeRecord {
            kind,
            limit,
            reason: reason.into(),
        }
    }

    /// Whether the task is verified.
    pub fn is_verified(&self) -> bool {
        matches!(self, Outcome::Verified(_))
    }

    /// An outcome that needs no evidence, from its recorded kind. A
    /// recorded `verified` is not one: it is re-established from its
    /// evidence with [`Acceptance::establish`], so here it is an error.
    pub fn unverified(kind: OutcomeKind, limit: Option<LimitKind>) -> Outcome {
        match kind {
            OutcomeKind::Failed => Outcome::Failed,
            OutcomeKind::Lost => Outcome::Lost,
            OutcomeKind::LimitReached => Outcome::LimitReached(limit.unwrap_or(LimitKind::Steps)),
            OutcomeKind::Cancelled => Outcome::Cancelled,
            OutcomeKind::Verified | OutcomeKind::Error => Outcome::Error,
        }
    }
}

/// An outcome as recorded: kind, limit and reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeRecord {
    /// The kind.
    pub kind: OutcomeKind,
    /// For `limit_reached`, which limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitKind>,
    /// Why, in a sentence.
    pub reason: String,
}

impl OutcomeKind {
    /// Every kind.
    pub const ALL: [OutcomeKind; 6] = [
        OutcomeKind::Verified,
        OutcomeKind::Failed,
        OutcomeKind::Lost,
        OutcomeKind::LimitReached,
        OutcomeKind::Cancelled,
        OutcomeKind::Error,
    ];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            OutcomeKind::Verified => "verified",
            OutcomeKind::Failed => "failed",
            OutcomeKind::Lost => "lost",
            OutcomeKind::LimitReached => "limit_reached",
            OutcomeKind::Cancelled => "cancelled",
            OutcomeKind::Error => "error",
        }
    }

    /// The kind of an outcome as [`OutcomeRecord`]'s `Display` writes it
    /// (`verified`, `limit_reached{tokens}`).
    pub fn of_recorded(text: &str) -> Option<OutcomeKind> {
        let name = text.split('{').next().unwrap_or(text);
        OutcomeKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl OutcomeRecord {
    /// Read back `"{record}: {reason}"`, the reason of the transition into
    /// `terminal` (written before the `finished` entry, so it is what a task
    /// that stopped between the two left).
    pub fn of_terminal_transition(text: &str) -> Option<OutcomeRecord> {
        let (record, reason) = text.split_once(": ")?;
        let OutcomeName { kind, limit } = OutcomeName::parse(record)?;
        if (kind == OutcomeKind::LimitReached) != limit.is_some() {
            return None;
        }
        Some(OutcomeRecord {
            kind,
            limit,
            reason: reason.to_string(),
        })
    }
}

impl fmt::Display for OutcomeRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.name().fmt(f)
    }
}

/// An outcome's name, as a store and a listing keep it: its kind and, for
/// `limit_reached`, which limit (`verified`, `limit_reached{tokens}`).
/// Written and read as that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OutcomeName {
    /// The kind.
    pub kind: OutcomeKind,
    /// For `limit_reached`, which limit.
    pub limit: Option<LimitKind>,
}

impl OutcomeName {
    /// Read back what [`OutcomeName`]'s `Display` writes (`None`: not an
    /// outcome's name).
    pub fn parse(text: &str) -> Option<OutcomeName> {
        let (name, limit) = match text.split_once('{') {
            Some((name, rest)) => {
                let limit = rest.strip_suffix('}')?;
                let limit = LimitKind::ALL
                    .into_iter()
                    .find(|l| l.to_string() == limit)?;
                (name, Some(limit))
            }
            None => (text, None),
        };
        let kind = OutcomeKind::ALL.into_iter().find(|k| k.name() == name)?;
        (limit.is_none() || kind == OutcomeKind::LimitReached)
            .then_some(OutcomeName { kind, limit })
    }
}

impl OutcomeRecord {
    /// Its name (kind and limit, no reason).
    pub fn name(&self) -> OutcomeName {
        OutcomeName {
            kind: self.kind,
            limit: self.limit,
        }
    }
}

impl OutcomeName {
    /// The name as text (`verified`, `limit_reached{tokens}`).
    pub fn as_str(&self) -> &'static str {
        match (self.kind, self.limit) {
            (OutcomeKind::LimitReached, Some(LimitKind::Steps)) => "limit_reached{steps}",
            (OutcomeKind::LimitReached, Some(LimitKind::Tokens)) => "limit_reached{tokens}",
            (OutcomeKind::LimitReached, Some(LimitKind::Time)) => "limit_reached{time}",
            (OutcomeKind::LimitReached, Some(LimitKind::Cost)) => "limit_reached{cost}",
            (kind, _) => kind.name(),
        }
    }
}

impl OutcomeName {
    /// The outcome in words, for a person (`limit reached (steps)`, not
    /// the stored `limit_reached{steps}`).
    pub fn words(&self) -> &'static str {
        match (self.kind, self.limit) {
            (OutcomeKind::LimitReached, Some(LimitKind::Steps)) => "limit reached (steps)",
            (OutcomeKind::LimitReached, Some(LimitKind::Tokens)) => "limit reached (tokens)",
            (OutcomeKind::LimitReached, Some(LimitKind::Time)) => "limit reached (time)",
            (OutcomeKind::LimitReached, Some(LimitKind::Cost)) => "limit reached (cost)",
            (OutcomeKind::LimitReached, None) => "limit reached",
            (kind, _) => kind.name(),
        }
    }
}

/// An outcome's name reads as its text wherever text is wanted (a
/// listing, a comparison with a recorded name).
impl std::ops::Deref for OutcomeName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for OutcomeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for OutcomeName {
    fn eq(&self, other: &str) -> bool {
        OutcomeName::parse(other) == Some(*self)
    }
}

impl PartialEq<&str> for OutcomeName {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl Serialize for OutcomeName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OutcomeName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        OutcomeName::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not an outcome")))
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod names {
    use super::*;

    #[test]
    fn an_outcome_name_reads_back_as_written_and_nothing_else_reads_as_one() {
        let mut names = Vec::new();
        for kind in OutcomeKind::ALL {
            let limits: Vec<Option<LimitKind>> = match kind {
                OutcomeKind::LimitReached => LimitKind::ALL.into_iter().map(Some).collect(),
                _ => vec![None],
            };
            for limit in limits {
                let name = OutcomeName { kind, limit };
                assert_eq!(OutcomeName::parse(&name.to_string()), Some(name));
                assert_eq!(name.as_str(), name.to_string());
                let json = serde_json::to_value(name).unwrap();
                assert_eq!(json, serde_json::json!(name.as_str()));
                assert_eq!(serde_json::from_value::<OutcomeName>(json).unwrap(), name);
                names.push(name.to_string());
            }
        }
        assert_eq!(names.len(), 9, "{names:?}");
        for junk in [
            "",
            "verified{steps}",
            "limit_reached{}",
            "limit_reached{x}",
            "Verified",
            "done",
        ] {
            assert_eq!(OutcomeName::parse(junk), None, "{junk}");
        }
        assert!(serde_json::from_value::<OutcomeName>(serde_json::json!("done")).is_err());
        // Compared with text, as listings and tests read it.
        let tokens = OutcomeName {
            kind: OutcomeKind::LimitReached,
            limit: Some(LimitKind::Tokens),
        };
        assert!(tokens == "limit_reached{tokens}" && tokens != "limit_reached");
    }

    #[test]
    fn recorded_outcomes_read_back_as_their_kind() {
        for k in OutcomeKind::ALL {
            let rec = OutcomeRecord {
                kind: k,
                limit: (k == OutcomeKind::LimitReached).then_some(LimitKind::Tokens),
                reason: "r".into(),
            };
            assert_eq!(OutcomeKind::of_recorded(&rec.to_string()), Some(k), "{rec}");
        }
        assert_eq!(OutcomeKind::of_recorded("limit_reached_soon"), None);
        assert_eq!(
            crate::TaskState::from_name("awaiting_approval"),
            Some(crate::TaskState::AwaitingApproval)
        );
        assert_eq!(crate::TaskState::from_name("Terminal"), None);
    }

    #[test]
    fn a_terminal_transition_reads_back_as_its_record() {
        for k in OutcomeKind::ALL {
            let limits: Vec<Option<LimitKind>> = if k == OutcomeKind::LimitReached {
                LimitKind::ALL.into_iter().map(Some).collect()
            } else {
                vec![None]
            };
            for limit in limits {
                let rec = OutcomeRecord {
                    kind: k,
                    limit,
                    reason: "why: with a colon".into(),
                };
                let text = format!("{rec}: {}", rec.reason);
                assert_eq!(OutcomeRecord::of_terminal_transition(&text), Some(rec));
            }
        }
        for bad in [
            "limit_reached: no limit named",
            "verified{steps}: a limit on a verified end",
            "limit_reached{money}: unknown limit",
            "finished: unknown kind",
            "no separator",
        ] {
            assert_eq!(OutcomeRecord::of_terminal_transition(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tool_names {
    use crate::ToolName;

    #[test]
    fn every_tool_name_reads_back() {
        for t in ToolName::ALL {
            assert_eq!(ToolName::from_name(t.as_str()), Some(t));
        }
        assert_eq!(ToolName::from_name("rm_rf"), None);
        assert!(ToolName::ReadFile.reads_only() && ToolName::ListFiles.reads_only());
        assert!(!ToolName::RunCommand.reads_only());
    }
}
