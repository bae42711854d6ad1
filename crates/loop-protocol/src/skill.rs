//! Skills a task uses, as its records keep them: which bundle (its name
//! and digest), who vouched for it (the key that signed it, or none: a
//! project's own pattern), and the capabilities in force once what the
//! skill declared was intersected with the task's authority. A skill can
//! only narrow a task: what it asked beyond the task's authority is listed
//! as dropped, never granted.

use crate::delegation::ExecRule;
use serde::{Deserialize, Serialize};

/// What a skill declares it needs (`capabilities:` in its `SKILL.md`'s
/// front matter); each part, when given, bounds the task that uses it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// The tools it uses (the task is offered no others); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Exec rules it adds: only `prompt` or `forbidden` take effect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exec: Vec<ExecRule>,
    /// Hosts it needs (the task reaches no others); absent: the task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Vec<String>>,
    /// Paths it may change (the task writes nowhere else); absent: the
    /// task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<Vec<String>>,
}

/// A skill a task used, as its ledger's first entry and its receipt hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillRecord {
    /// Its name (the bundle's folder).
    pub name: String,
    /// The Merkle root of its files (`sha256:` hex), as signed.
    pub digest: String,
    /// The key id that signed it; `None`: unsigned, the project's own
    /// (`loop-patterns/NAME/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// What was in force for the task: the skill's asks within the task's
    /// authority.
    pub capabilities: Capabilities,
    /// What it asked beyond the task's authority, each with why it was
    /// dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

impl SkillRecord {
    /// How it is vouched for, for people: `signed by KEYID` or `unsigned,
    /// project-local`.
    pub fn vouched(&self) -> String {
        match &self.signer {
            Some(k) => format!("signed by {k}"),
            None => "unsigned, project-local".into(),
        }
    }
}
