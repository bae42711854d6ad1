//! The work before a task starts — its workspace made, its checks run on
//! the untouched workspace and on an empty one — is bounded by `--jobs`,
//! like the tasks themselves, and never outlives what the request was
//! told. A new task's id is chosen first; the request waits for the
//! preparation a while (a prompt one answers 201 as before) and otherwise
//! answers 202 with that id and `"state": "queued"`. Until the store holds
//! the task, its status is answered from here: `queued` (waiting for a
//! place), `preparing`, or `refused` with the error the request would have
//! had. So an answer names exactly the task it made, or the refusal.

use crate::ApiError;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a request waits for its task's preparation before it answers
/// `queued` (well inside the 60 s a request may take).
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// Entries kept at most; past that, the oldest settled ones go first.
const KEEP: usize = 4096;

/// How long a refusal stays to be read.
pub(crate) const REFUSAL_KEPT: Duration = Duration::from_secs(3600);

/// Tasks one owner may have waiting for their preparation here at once;
/// past that a new one is answered 429 (each waiting one holds its request
/// in memory and in the store).
pub(crate) const WAITING_PER_OWNER: usize = 1024;

/// The kind of a refusal that is a person's cancel before the preparation.
pub(crate) const CANCELLED: &str = "cancelled";

/// Where a task not yet in the store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Waiting for one of the `--jobs` places.
    Queued,
    /// Being prepared.
    Preparing,
    /// Its preparation failed: the status, kind and message the request
    /// would have been answered with (kind [`CANCELLED`]: a person
    /// cancelled it before it was prepared).
    Refused(u16, String, String),
}

impl State {
    /// As the API says it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Preparing => "preparing",
            State::Refused(_, kind, _) if kind == CANCELLED => CANCELLED,
            State::Refused(..) => "refused",
        }
    }
}

/// What [`Prestart::reserve`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reserved {
    /// The id is this task's now.
    Yes,
    /// Another entry has the id (draw again).
    Taken,
    /// The owner has [`WAITING_PER_OWNER`] tasks waiting already.
    Full,
}

/// What [`Prestart::cancel`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cancel {
    /// Not here (stored, or never asked for).
    Absent,
    /// It was waiting: it is cancelled and will not be prepared.
    Now,
    /// It is being prepared: it is cancelled once stored.
    OnceStored,
    /// Its preparation ended before (refused, or cancelled already).
    Settled,
}

/// An error kind as the API names it (a kept refusal's, read back).
pub(crate) fn kind_name(kind: &str) -> &'static str {
    [
        "usage",
        "conflict",
        "unavailable",
        "internal",
        "forbidden",
        "not_found",
        CANCELLED,
    ]
    .into_iter()
    .find(|k| *k == kind)
    .unwrap_or("refused")
}

#[derive(Debug)]
struct Entry {
    owner: String,
    state: State,
    since: Instant,
    /// Cancel it as soon as the store holds it.
    cancel_once_stored: bool,
}

/// The preparations of this server.
#[derive(Debug)]
pub(crate) struct Prestart {
    /// One permit per place (`--jobs`).
    pub(crate) gate: tokio::sync::Semaphore,
    /// How long a request waits for its preparation ([`ANSWER_WITHIN`]).
    pub(crate) answer_within: Duration,
    /// This server's name as the holder of the submissions it keeps
    /// (random, one per server).
    pub(crate) holder: String,
    pending: Mutex<BTreeMap<String, Entry>>,
}

impl Prestart {
    /// At most `jobs` preparations at once.
    pub(crate) fn new(jobs: usize) -> Prestart {
        Prestart {
            gate: tokio::sync::Semaphore::new(jobs.max(1)),
            answer_within: ANSWER_WITHIN,
            holder: loop_protocol::random::hex::<8>()
                .unwrap_or_else(|_| format!("{}-{:?}", std::process::id(), Instant::now())),
            pending: Mutex::default(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, Entry>) -> T) -> T {
        let mut g = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }

    /// Task `id` of `owner` waits for a place.
    pub(crate) fn queued(&self, id: &str, owner: &str) {
        self.with(|m| Self::enter(m, id, owner));
    }

    fn enter(m: &mut BTreeMap<String, Entry>, id: &str, owner: &str) {
        // Settled refusals past their time, then the oldest settled
        // ones while over the cap (waiting ones are bounded by the
        // requests that made them).
        m.retain(|_, e| {
            !(matches!(e.state, State::Refused(..)) && e.since.elapsed() > REFUSAL_KEPT)
        });
        while m.len() >= KEEP {
            let oldest = m
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Refused(..)))
                .min_by_key(|(_, e)| e.since)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    m.remove(&k);
                }
                None => break,
            }
        }
        m.insert(
            id.to_string(),
            Entry {
                owner: owner.to_string(),
                state: State::Queued,
                since: Instant::now(),
                cancel_once_stored: false,
            },
        );
    }

    /// Take `id` for a new task of `owner` (queued), unless an entry has
    /// it already (two ids drawn in the same second can be the same) or
    /// the owner has [`WAITING_PER_OWNER`] tasks waiting.
    pub(crate) fn reserve(&self, id: &str, owner: &str) -> Reserved {
        self.reserve_within(id, owner, WAITING_PER_OWNER)
    }

    fn reserve_within(&self, id: &str, owner: &str, bound: usize) -> Reserved {
        // Looked at and taken under one lock: two requests drawing the
        // same id never both have it.
        self.with(|m| {
            if m.contains_key(id) {
                return Reserved::Taken;
            }
            let waiting = m
                .values()
                .filter(|e| e.owner == owner && !matches!(e.state, State::Refused(..)))
                .count();
            if waiting >= bound {
                return Reserved::Full;
            }
            Self::enter(m, id, owner);
            Reserved::Yes
        })
    }

    /// A person cancels task `id` before the store holds it.
    pub(crate) fn cancel(&self, id: &str) -> Cancel {
        self.with(|m| {
            let Some(e) = m.get_mut(id) else {
                return Cancel::Absent;
            };
            match e.state {
                State::Queued => {
                    e.state = State::Refused(
                        409,
                        CANCELLED.into(),
                        format!("task {id} was cancelled before its preparation"),
                    );
                    e.since = Instant::now();
                    Cancel::Now
                }
                State::Preparing => {
                    e.cancel_once_stored = true;
                    Cancel::OnceStored
                }
                State::Refused(..) => Cancel::Settled,
            }
        })
    }

    /// Task `id` is in the store now (its status is the store's): whether
    /// a person cancelled it while it was being prepared (looked at and
    /// forgotten under one lock, so no cancel falls between).
    pub(crate) fn take_stored(&self, id: &str) -> bool {
        self.with(|m| m.remove(id).is_some_and(|e| e.cancel_once_stored))
    }

    /// Task `id` is being prepared, unless it was cancelled (`false`).
    pub(crate) fn preparing(&self, id: &str) -> bool {
        self.with(|m| match m.get_mut(id) {
            Some(e) if e.state == State::Queued => {
                e.state = State::Preparing;
                true
            }
            _ => false,
        })
    }

    /// Task `id` is in the store now: its status is the store's.
    pub(crate) fn stored(&self, id: &str) {
        self.with(|m| m.remove(id));
    }

    /// Task `id`'s preparation failed with `e`.
    pub(crate) fn refused(&self, id: &str, e: &ApiError) {
        self.with(|m| {
            if let Some(entry) = m.get_mut(id) {
                entry.state =
                    State::Refused(e.status.as_u16(), e.kind.to_string(), e.message.clone());
                entry.since = Instant::now();
            }
        });
    }

    /// Task `id` of `owner` was refused `age` ago, as an earlier server
    /// kept it.
    pub(crate) fn kept_refusal(
        &self,
        id: &str,
        owner: &str,
        status: u16,
        kind: String,
        message: String,
        age: Duration,
    ) {
        self.queued(id, owner);
        self.with(|m| {
            if let Some(e) = m.get_mut(id) {
                e.state = State::Refused(status, kind, message);
                e.since = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
            }
        });
    }

    /// Where task `id` of `owner` (or any owner, for `None`) is, if it is
    /// here.
    pub(crate) fn state(&self, id: &str, owner: Option<&str>) -> Option<State> {
        self.with(|m| {
            m.get(id)
                .filter(|e| owner.is_none_or(|o| o == e.owner))
                .map(|e| e.state.clone())
        })
    }

    /// Preparations waiting or running.
    pub(crate) fn in_flight(&self) -> usize {
        self.with(|m| {
            m.values()
                .filter(|e| !matches!(e.state, State::Refused(..)))
                .count()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_waits_for_a_bounded_number_of_preparations() {
        let p = Prestart::new(1);
        assert_eq!(p.reserve_within("a", "alice", 2), Reserved::Yes);
        assert_eq!(p.reserve_within("a", "bob", 2), Reserved::Taken);
        assert_eq!(p.reserve_within("b", "alice", 2), Reserved::Yes);
        assert_eq!(p.reserve_within("c", "alice", 2), Reserved::Full);
        // Another owner is not held back by alice's.
        assert_eq!(p.reserve_within("c", "bob", 2), Reserved::Yes);
        // A settled one no longer counts.
        assert!(p.preparing("a"));
        p.stored("a");
        assert_eq!(p.cancel("b"), Cancel::Now);
        assert_eq!(p.reserve_within("d", "alice", 2), Reserved::Yes);
        assert_eq!(p.reserve_within("e", "alice", 2), Reserved::Yes);
        assert_eq!(p.reserve_within("f", "alice", 2), Reserved::Full);
    }

    #[test]
    fn a_cancelled_task_is_never_prepared_and_one_being_prepared_is_cancelled_once_stored() {
        let p = Prestart::new(1);
        assert_eq!(p.reserve("q", "o"), Reserved::Yes);
        assert_eq!(p.cancel("q"), Cancel::Now);
        assert!(!p.preparing("q"), "a cancelled task is not prepared");
        let st = p.state("q", Some("o")).unwrap();
        assert_eq!(st.name(), "cancelled");
        assert_eq!(p.cancel("q"), Cancel::Settled);
        assert_eq!(p.reserve("r", "o"), Reserved::Yes);
        assert!(p.preparing("r"));
        assert_eq!(p.cancel("r"), Cancel::OnceStored);
        assert_eq!(p.state("r", None), Some(State::Preparing));
        assert!(p.take_stored("r"), "stored, and to be cancelled");
        assert_eq!(p.state("r", None), None);
        assert_eq!(p.cancel("nothing"), Cancel::Absent);
    }
}
