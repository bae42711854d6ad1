//! How a receipt's contract came to be: written by a person, or drafted
//! by a model, judged by the critic (and a checker model, when one was
//! configured) and confirmed by a person or `--accept-contract`; and which
//! of its checks a person kept although they pass on an empty workspace.
//! Read from the signed statement and the ledger's first entry, so it
//! holds exactly as far as the receipt does.

use loop_protocol::LedgerEntry;
use loop_protocol::{Check, Contract, DraftingRecord};

/// The contract's provenance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ContractProvenance {
    /// `written`, `drafted`, or `delegated` (a child task's: its parent's
    /// model wrote it).
    pub how: &'static str,
    /// The parent task, for a child task's contract.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delegated_by: Option<String>,
    /// The drafting model, when drafted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drafted_by: Option<String>,
    /// Proposals the critic judged (the model's and a person's edits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposals: Option<usize>,
    /// Whether the checker model approved the draft that was locked.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub checker_approved: bool,
    /// Who locked the draft (`--accept-contract`, `terminal`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed_by: Option<String>,
    /// The checker model the task ran with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checker: Option<String>,
    /// Paths that decide a check's verdict which the task was allowed to
    /// write (`judge_may_change`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub judge_may_change: Vec<String>,
    /// Checks kept though they pass on an empty workspace
    /// (`criterion #n: command`).
    pub allowed_vacuous: Vec<String>,
}

impl ContractProvenance {
    /// From the receipt's contract and its ledger's entries (the first
    /// one, `task_started`, says how the contract was drafted).
    pub fn of(contract: &Contract, entries: &[LedgerEntry]) -> Self {
        let started = entries
            .first()
            .filter(|e| e.kind == "task_started")
            .map(|e| &e.payload);
        let drafting: Option<DraftingRecord> = started
            .and_then(|p| p.get("drafting"))
            .filter(|d| !d.is_null())
            .and_then(|d| serde_json::from_value(d.clone()).ok());
        let checker = started
            .and_then(|p| p.get("checker"))
            .and_then(|c| c.get("name"))
            .and_then(|n| n.as_str())
            .map(str::to_string);
        let allowed_vacuous = contract
            .criteria
            .iter()
            .flat_map(|c| {
                c.checks
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, k)| match k {
                        Check::Run(r) if r.allow_vacuous => {
                            Some(format!("{} #{}: `{}`", c.id, i + 1, r.command))
                        }
                        _ => None,
                    })
            })
            .collect();
        Self {
            delegated_by: None,
            how: if drafting.is_some() {
                "drafted"
            } else {
                "written"
            },
            drafted_by: drafting.as_ref().map(|d| d.model.name.clone()),
            proposals: drafting.as_ref().map(|d| d.attempts.len()),
            checker_approved: drafting.as_ref().is_some_and(|d| {
                d.attempts
                    .iter()
                    .rev()
                    .find(|a| a.accepted)
                    .is_some_and(|a| a.checker.as_deref() == Some("approve"))
            }),
            confirmed_by: drafting.map(|d| d.confirmed_by),
            checker,
            judge_may_change: contract.judge_may_change.clone(),
            allowed_vacuous,
        }
    }
}

impl ContractProvenance {
    /// For a child task (its predicate's `delegation`): the contract is
    /// its parent's model's, within the authority the parent granted, and
    /// no person confirmed it.
    pub fn with_delegation(
        mut self,
        delegation: Option<&loop_protocol::delegation::DelegatedFrom>,
    ) -> Self {
        if let Some(d) = delegation {
            self.how = "delegated";
            self.delegated_by = Some(d.parent.clone());
        }
        self
    }
}

impl std::fmt::Display for ContractProvenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = &self.delegated_by {
            write!(
                f,
                "delegated by task {p}: written by its model within the authority it granted, confirmed by no person"
            )?;
        } else {
            self.how_drafted(f)?;
        }
        self.rest(f)
    }
}

impl ContractProvenance {
    fn how_drafted(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.drafted_by {
            Some(m) => write!(
                f,
                "drafted by {m}, accepted by the critic{} after {} proposal(s), confirmed by {}",
                if self.checker_approved {
                    " and the checker"
                } else {
                    ""
                },
                self.proposals.unwrap_or_default(),
                self.confirmed_by.as_deref().unwrap_or("?")
            )?,
            None => write!(f, "written (not drafted)")?,
        }
        Ok(())
    }

    fn rest(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = &self.checker {
            write!(f, "; checker {c}")?;
        }
        if !self.judge_may_change.is_empty() {
            write!(
                f,
                "; the task was allowed to write its judge (judge_may_change): {}",
                self.judge_may_change.join(", ")
            )?;
        }
        if !self.allowed_vacuous.is_empty() {
            write!(
                f,
                "; {} check(s) pass on an empty workspace and were kept by a person (allow_vacuous): {}",
                self.allowed_vacuous.len(),
                self.allowed_vacuous.join(", ")
            )?;
        }
        Ok(())
    }
}
