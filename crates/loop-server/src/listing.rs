//! Which tasks a listing shows: `GET /api/v1/tasks`'s filters (by where a
//! task stands, how it ended, whose it is, and text in it), read from the
//! query and applied to each task the caller may see.

use crate::ApiError;
use loop_protocol::{OutcomeKind, TaskState};
use loop_runtime::TaskView;
use loop_store::StoredState;
use std::collections::HashMap;

/// Where a task stands, as a person filters by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// A process runs it and it does not wait for a person.
    Running,
    /// It waits for a person's approval or answer.
    Waiting,
    /// Not over, and nobody runs it.
    Interrupted,
    /// It waits on this server for a place to run.
    Queued,
    /// Over (it has an outcome).
    Ended,
}

impl Standing {
    const ALL: [(&'static str, Standing); 5] = [
        ("running", Standing::Running),
        ("waiting", Standing::Waiting),
        ("interrupted", Standing::Interrupted),
        ("queued", Standing::Queued),
        ("ended", Standing::Ended),
    ];

    fn of(t: &TaskView, queued: bool) -> Standing {
        let waiting = matches!(
            t.state,
            StoredState::Task(TaskState::AwaitingApproval | TaskState::AwaitingInput)
        );
        if t.outcome.is_some() {
            Standing::Ended
        } else if queued {
            Standing::Queued
        } else if t.interrupted {
            Standing::Interrupted
        } else if waiting {
            Standing::Waiting
        } else {
            Standing::Running
        }
    }
}

/// A listing's filters; each one given narrows it.
#[derive(Debug, Default)]
pub(crate) struct TaskFilter {
    standing: Option<Standing>,
    outcome: Option<OutcomeKind>,
    /// `Some(None)`: the tasks of no owner (the command line's).
    owner: Option<Option<String>>,
    /// Lower-cased.
    text: Option<String>,
}

impl TaskFilter {
    /// The filters in a query (`state`, `outcome`, `owner`, `q`); an
    /// unknown state or outcome is refused, naming the ones there are.
    pub(crate) fn from_query(q: &HashMap<String, String>) -> Result<TaskFilter, ApiError> {
        let given = |k: &str| q.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        // (A state or outcome given empty is none of them: refused.)
        let named = |k: &str| q.get(k).map(String::as_str);
        let standing = match named("state") {
            None => None,
            Some(v) => Some(
                Standing::ALL
                    .iter()
                    .find(|(name, _)| *name == v)
                    .map(|(_, s)| *s)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "state: no state `{v}` (one of {})",
                            Standing::ALL.map(|(n, _)| n).join(", ")
                        ))
                    })?,
            ),
        };
        let outcome = match named("outcome") {
            None => None,
            Some(v) => Some(
                OutcomeKind::ALL
                    .into_iter()
                    .find(|k| k.name() == v)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "outcome: no outcome `{v}` (one of {})",
                            OutcomeKind::ALL.map(|k| k.name()).join(", ")
                        ))
                    })?,
            ),
        };
        Ok(TaskFilter {
            standing,
            outcome,
            owner: given("owner").map(|o| (o != "-").then(|| o.to_string())),
            text: given("q").map(str::to_lowercase),
        })
    }

    /// Whether task `t` (`queued` on this server) passes every filter.
    pub(crate) fn admits(&self, t: &TaskView, queued: bool) -> bool {
        if self.standing.is_some_and(|s| Standing::of(t, queued) != s) {
            return false;
        }
        if let Some(k) = self.outcome
            && t.outcome.is_none_or(|o| o.kind != k)
        {
            return false;
        }
        if let Some(owner) = &self.owner
            && t.owner != *owner
        {
            return false;
        }
        if let Some(text) = &self.text {
            let found = |s: Option<&str>| s.is_some_and(|s| s.to_lowercase().contains(text));
            if !(found(Some(&t.id))
                || found(t.instruction.as_deref())
                || found(t.reason.as_deref()))
            {
                return false;
            }
        }
        true
    }
}
