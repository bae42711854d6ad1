//! An instruction alone, over HTTP: the runtime drafts the contract and its
//! critic judges it (exactly as `loop run "…"` does), then the drafted
//! contract waits here for the person's answer — accept, an edited text
//! (judged again), or reject — and the task starts on acceptance, its
//! drafting (who confirmed it included) in its ledger's genesis.

use loop_runtime::draft::ContractReview;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a drafted contract waits for its answer.
const WAIT: Duration = Duration::from_secs(30 * 60);

/// Where a draft stands.
#[derive(Debug, Clone, Serialize)]
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
    /// Where the person's answer goes, while one is awaited.
    answer: Option<Sender<ContractReview>>,
}

/// The drafts of this server.
pub type Drafts = Arc<Mutex<HashMap<String, Draft>>>;

fn lock(d: &Drafts) -> std::sync::MutexGuard<'_, HashMap<String, Draft>> {
    d.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Begin a draft for `owner`.
pub fn begin(drafts: &Drafts, id: &str, owner: &str) {
    lock(drafts).insert(
        id.to_string(),
        Draft {
            owner: owner.to_string(),
            state: DraftState::Drafting,
            notes: Vec::new(),
            answer: None,
        },
    );
}

/// Set where draft `id` stands.
pub fn set(drafts: &Drafts, id: &str, state: DraftState) {
    if let Some(d) = lock(drafts).get_mut(id) {
        d.state = state;
        d.answer = None;
    }
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

/// Give draft `id` its answer; whether one was awaited.
pub fn answer(
    drafts: &Drafts,
    id: &str,
    owner: &str,
    admin: bool,
    review: ContractReview,
) -> Option<bool> {
    let mut all = lock(drafts);
    let d = all.get_mut(id)?;
    if !(admin || d.owner == owner) {
        return None;
    }
    Some(match d.answer.take() {
        Some(tx) => {
            d.state = DraftState::Drafting;
            tx.send(review).is_ok()
        }
        None => false,
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
        rx.recv_timeout(WAIT).unwrap_or(ContractReview::Unanswered)
    }

    fn reviewer(&self) -> String {
        self.who.clone()
    }
}
