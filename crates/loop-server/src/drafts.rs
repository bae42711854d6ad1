//! An instruction alone, over HTTP: the runtime drafts the contract and its
//! critic judges it (exactly as `loop run "…"` does), then the drafted
//! contract waits here for the person's answer — accept, an edited text
//! (judged again), or reject — and the task starts on acceptance, its
//! drafting (who confirmed it included) in its ledger's genesis.
//!
//! Each draft is kept in the project's store as it changes (from the
//! drafting thread, never on the executor), so a draft waiting for its
//! answer outlives the server: the next server shows it, and an answer to
//! it starts the task from the proposed contract, judged again as a
//! contract the person gives (the drafting model's conversation did not
//! outlive the server; its verdicts are in the draft's notes). A draft
//! whose drafting a stop cut short ends, saying so.

use loop_runtime::Runtime;
use loop_runtime::draft::ContractReview;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a drafted contract waits for its answer.
const WAIT: Duration = Duration::from_secs(30 * 60);

/// Where a draft stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DraftState {
    /// The model is drafting, the critic judging.
    Drafting,
    /// The critic accepted this contract; it waits for the person.
    Proposed {
        /// The contract, as JSON text (edit it and send it back, or accept).
        contract: String,
    },
    /// Accepted: the task runs.
    Started {
        /// The task.
        task_id: String,
    },
    /// Rejected by the person, or failed (the critic, the model, the time).
    Ended {
        /// Why.
        reason: String,
    },
}

/// One draft.
#[derive(Debug)]
pub struct Draft {
    /// Whose it is.
    pub owner: String,
    /// Where it stands.
    pub state: DraftState,
    /// What the runtime said while drafting (the critic's verdicts).
    pub notes: Vec<String>,
    /// The instruction.
    pub instruction: String,
    /// The model asked for, if one was.
    pub model: Option<String>,
    /// Where the person's answer goes, while one is awaited here.
    answer: Option<Sender<ContractReview>>,
    /// Kept by an earlier server: an answer starts the task from here.
    restored: bool,
}

/// A draft as the store keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    #[serde(flatten)]
    state: DraftState,
    notes: Vec<String>,
    instruction: String,
    model: Option<String>,
}

/// The drafts of this server, and where they are kept.
#[derive(Clone, Default)]
pub struct Drafts {
    all: Arc<Mutex<HashMap<String, Draft>>>,
    keep: Option<Runtime>,
}

impl Drafts {
    /// Drafts kept in `runtime`'s store.
    pub fn kept_in(runtime: Runtime) -> Drafts {
        Drafts {
            all: Arc::default(),
            keep: Some(runtime),
        }
    }
}

fn lock(d: &Drafts) -> std::sync::MutexGuard<'_, HashMap<String, Draft>> {
    d.all
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write draft `id` as it stands to the store (a blocking call: never on
/// the executor). A failure is logged: the draft still lives here.
pub fn keep(drafts: &Drafts, id: &str) {
    let Some(rt) = &drafts.keep else {
        return;
    };
    let kept = lock(drafts).get(id).map(|d| {
        (
            d.owner.clone(),
            serde_json::to_value(Kept {
                state: d.state.clone(),
                notes: d.notes.clone(),
                instruction: d.instruction.clone(),
                model: d.model.clone(),
            }),
        )
    });
    if let Some((owner, Ok(body))) = kept
        && let Err(e) = rt.keep_draft(id, &owner, &body)
    {
        tracing::warn!("draft {id}: not kept in the store: {e}");
    }
}

/// [`keep`] on a thread of its own (for callers on the executor).
pub fn keep_later(drafts: &Drafts, id: &str) {
    let (drafts, id) = (drafts.clone(), id.to_string());
    let spawned = std::thread::Builder::new()
        .name(format!("keep {id}"))
        .spawn(move || keep(&drafts, &id));
    if let Err(e) = spawned {
        tracing::warn!("a draft's record is not kept: {e}");
    }
}

/// Take up the drafts an earlier server kept (the last day's): those
/// waiting for an answer wait here now (for what is left of their
/// [`WAIT`]); one whose drafting was cut short ends, saying so. How many
/// wait. A blocking call.
pub fn restore(drafts: &Drafts) -> usize {
    let Some(rt) = &drafts.keep else {
        return 0;
    };
    let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
    let records = match rt.kept_drafts(now.saturating_sub(24 * 3600 * 1000)) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("kept drafts cannot be read: {e}");
            return 0;
        }
    };
    let mut waiting = 0;
    for r in records {
        let Ok(k) = serde_json::from_str::<Kept>(&r.body) else {
            tracing::warn!("draft {}: its kept record cannot be read", r.id);
            continue;
        };
        let expired = now.saturating_sub(r.updated_ms) > WAIT.as_millis() as u64;
        let (state, changed) = match k.state {
            DraftState::Drafting => (
                DraftState::Ended {
                    reason: "the server stopped while the contract was being drafted: ask again"
                        .into(),
                },
                true,
            ),
            DraftState::Proposed { .. } if expired => (
                DraftState::Ended {
                    reason: format!("no answer came within {} minutes", WAIT.as_secs() / 60),
                },
                true,
            ),
            other => (other, false),
        };
        if matches!(state, DraftState::Proposed { .. }) {
            waiting += 1;
        }
        lock(drafts).insert(
            r.id.clone(),
            Draft {
                owner: r.owner,
                state,
                notes: k.notes,
                instruction: k.instruction,
                model: k.model,
                answer: None,
                restored: true,
            },
        );
        if changed {
            keep(drafts, &r.id);
        }
    }
    waiting
}

/// Begin a draft of `instruction` for `owner`.
pub fn begin(drafts: &Drafts, id: &str, owner: &str, instruction: &str, model: Option<&str>) {
    lock(drafts).insert(
        id.to_string(),
        Draft {
            owner: owner.to_string(),
            state: DraftState::Drafting,
            notes: Vec::new(),
            instruction: instruction.to_string(),
            model: model.map(str::to_string),
            answer: None,
            restored: false,
        },
    );
}

/// Set where draft `id` stands, and keep it (a blocking call).
pub fn set(drafts: &Drafts, id: &str, state: DraftState) {
    if let Some(d) = lock(drafts).get_mut(id) {
        d.state = state;
        d.answer = None;
    }
    keep(drafts, id);
}

/// Draft `id` as its owner may see it: (state, notes).
pub fn view(
    drafts: &Drafts,
    id: &str,
    owner: &str,
    admin: bool,
) -> Option<(DraftState, Vec<String>)> {
    let all = lock(drafts);
    let d = all.get(id)?;
    (admin || d.owner == owner).then(|| (d.state.clone(), d.notes.clone()))
}

/// What became of an answer.
pub enum Answered {
    /// It reached the drafting that awaited it.
    Delivered,
    /// Nothing awaited one.
    NotWaiting,
    /// The draft was kept by an earlier server: the caller starts the task
    /// from its proposed contract (the person's edit, if they sent one).
    Restored {
        /// The contract to judge and lock.
        contract: String,
        /// The instruction.
        instruction: String,
        /// The model asked for.
        model: Option<String>,
        /// Whose draft it is.
        owner: String,
    },
}

/// Give draft `id` its answer (`None`: not the caller's, or no such
/// draft).
pub fn answer(
    drafts: &Drafts,
    id: &str,
    owner: &str,
    admin: bool,
    review: ContractReview,
) -> Option<Answered> {
    let mut all = lock(drafts);
    let d = all.get_mut(id)?;
    if !(admin || d.owner == owner) {
        return None;
    }
    if let (true, DraftState::Proposed { contract }) = (d.restored, &d.state) {
        let answered = match review {
            ContractReview::Accept => Answered::Restored {
                contract: contract.clone(),
                instruction: d.instruction.clone(),
                model: d.model.clone(),
                owner: d.owner.clone(),
            },
            ContractReview::Edited(text) => Answered::Restored {
                contract: text,
                instruction: d.instruction.clone(),
                model: d.model.clone(),
                owner: d.owner.clone(),
            },
            _ => {
                d.state = DraftState::Ended {
                    reason: "rejected".into(),
                };
                drop(all);
                keep_later(drafts, id);
                return Some(Answered::Delivered);
            }
        };
        d.state = DraftState::Drafting;
        return Some(answered);
    }
    Some(match d.answer.take() {
        Some(tx) => {
            d.state = DraftState::Drafting;
            if tx.send(review).is_ok() {
                Answered::Delivered
            } else {
                Answered::NotWaiting
            }
        }
        None => Answered::NotWaiting,
    })
}

/// The observer a drafting task is submitted with: its notes kept, its
/// drafted contract shown (as the draft's state) and its answer awaited.
pub struct DraftObserver {
    /// The drafts.
    pub drafts: Drafts,
    /// This draft.
    pub id: String,
    /// Who it is for (for the drafting record).
    pub who: String,
}

impl loop_core::Observer for DraftObserver {
    fn on_event(&mut self, _event: &loop_protocol::Event) {}
}

impl loop_runtime::Observer for DraftObserver {
    fn note(&mut self, line: &str) {
        if let Some(d) = lock(&self.drafts).get_mut(&self.id) {
            d.notes.push(line.to_string());
        }
    }

    fn review_contract(&mut self, contract: &str, _edit_from: Option<&str>) -> ContractReview {
        // (What "confirm" locks is shown; the console's editor keeps the
        // person's rejected edit on their side.)
        let (tx, rx): (Sender<ContractReview>, Receiver<ContractReview>) =
            std::sync::mpsc::channel();
        if let Some(d) = lock(&self.drafts).get_mut(&self.id) {
            d.state = DraftState::Proposed {
                contract: contract.to_string(),
            };
            d.answer = Some(tx);
        }
        keep(&self.drafts, &self.id);
        rx.recv_timeout(WAIT).unwrap_or(ContractReview::Unanswered)
    }

    fn reviewer(&self) -> String {
        self.who.clone()
    }
}
