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

use loop_runtime::ContractReview;
use loop_runtime::Runtime;
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
    /// The skills its task uses (resolved and narrowed again when a later
    /// server starts it).
    pub skills: Vec<String>,
    /// Where the person's answer goes, while one is awaited here.
    answer: Option<Sender<ContractReview>>,
    /// Kept by an earlier server: an answer starts the task from here,
    /// until this time (ms since the epoch) has passed.
    restored: Option<u64>,
    /// When its contract was proposed.
    proposed_ms: Option<u64>,
    /// Asked for on GitHub: where (only an answer given there is one).
    asked_on: Option<AskedOn>,
    /// Who gave the answer that confirmed it (the genesis says so).
    answered_by: Option<String>,
}

/// Where a draft was asked for by a trigger (GitHub's): the place an
/// answer must come from, and what its task is started with once a later
/// server takes the draft up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AskedOn {
    /// `TRIGGER OWNER/NAME#N`.
    pub on: String,
    /// The trigger's record (the task's genesis).
    pub trigger: loop_protocol::TriggerRecord,
    /// The commit the task starts from (a pull request's head).
    #[serde(default)]
    pub base_commit: Option<String>,
}

/// A draft an earlier server kept, answered here: what its task starts
/// from.
pub struct Restored {
    /// The contract to judge and lock (the person's edit, if they sent one).
    pub contract: String,
    /// The instruction.
    pub instruction: String,
    /// The model asked for.
    pub model: Option<String>,
    /// The skills its task uses.
    pub skills: Vec<String>,
    /// Whose draft it is.
    pub owner: String,
    /// Where a trigger asked for it, when one did.
    pub asked_on: Option<AskedOn>,
    /// Who answered.
    pub who: String,
}

/// Who answers a draft.
pub enum Answerer<'a> {
    /// A caller of the API: its owner's drafts (an admin's: all).
    Owner {
        /// The caller's owner.
        owner: &'a str,
        /// The caller is an admin.
        admin: bool,
        /// Who they are, as the genesis says who confirmed.
        who: String,
    },
    /// A reply where the draft was asked for.
    Asked(&'a loop_runtime::DraftAnswer),
}

/// A draft as the store keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    #[serde(flatten)]
    state: DraftState,
    notes: Vec<String>,
    instruction: String,
    model: Option<String>,
    /// The server process that holds it, renewed every minute while it
    /// waits: another server takes it over only once that one is gone.
    #[serde(default)]
    holder: Option<loop_store::Owner>,
    /// When its contract was proposed (its answer's wait counts from then).
    #[serde(default)]
    proposed_ms: Option<u64>,
    /// Asked for on GitHub: where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    asked_on: Option<AskedOn>,
    /// The skills its task uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    skills: Vec<String>,
}

/// How often a waiting draft's holder renews its hold.
const RENEW: Duration = Duration::from_secs(60);

/// How long a hold lasts without renewal (another machine's server).
const HOLD: Duration = Duration::from_secs(180);

/// This server process, as it holds the drafts it keeps.
pub(crate) fn this_server() -> loop_store::Owner {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let token = TOKEN.get_or_init(|| {
        loop_protocol::random::hex::<8>().unwrap_or_else(|_| format!("{}", std::process::id()))
    });
    loop_store::Owner::this_process(
        token.clone(),
        loop_core::Clock::now_ms(&loop_core::SystemClock),
    )
}

/// The drafts of this server, and where they are kept.
#[derive(Clone, Default)]
pub struct Drafts {
    all: Arc<Mutex<HashMap<String, Draft>>>,
    keep: Option<Runtime>,
    /// The token this server holds its drafts by ([`this_server`]'s, but
    /// in tests that play two servers in one process).
    token: Option<Arc<str>>,
}

impl Drafts {
    /// Drafts kept in `runtime`'s store.
    pub fn kept_in(runtime: Runtime) -> Drafts {
        Drafts {
            all: Arc::default(),
            keep: Some(runtime),
            token: None,
        }
    }

    /// This server, as it holds its drafts.
    fn me(&self) -> loop_store::Owner {
        match &self.token {
            Some(t) => loop_store::Owner {
                token: t.to_string(),
                ..this_server()
            },
            None => this_server(),
        }
    }
}

fn lock(d: &Drafts) -> std::sync::MutexGuard<'_, HashMap<String, Draft>> {
    d.all
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write draft `id` as it stands to the store (a blocking call: never on
/// the executor), held by this server: whether it is still this server's.
/// A draft another server took over while this one's hold lapsed (a
/// pause past [`HOLD`]) is not written over: it is given up here (its
/// answer, if one was awaited, no longer comes here) and `false` is the
/// answer. A store's failure is logged: the draft still lives here.
pub fn keep(drafts: &Drafts, id: &str) -> bool {
    let Some(rt) = &drafts.keep else {
        return true;
    };
    let me = drafts.me();
    let Some((owner, body)) = kept_of(drafts, id, me.clone()) else {
        return lock(drafts).contains_key(id);
    };
    match rt.keep_draft(id, &owner, &body, &me.token) {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(
                "draft {id}: taken over by another server while this one's hold on it lapsed; it is that server's now"
            );
            lock(drafts).remove(id);
            false
        }
        Err(e) => {
            tracing::warn!("draft {id}: not kept in the store: {e}");
            true
        }
    }
}

/// Whether draft `id` is this server's (not given up to another).
pub fn held_here(drafts: &Drafts, id: &str) -> bool {
    lock(drafts).contains_key(id)
}

/// Draft `id` as the store keeps it, held by this server: its owner and
/// its record's body.
fn kept_of(
    drafts: &Drafts,
    id: &str,
    me: loop_store::Owner,
) -> Option<(String, serde_json::Value)> {
    let all = lock(drafts);
    let d = all.get(id)?;
    Some((d.owner.clone(), kept_body(d, me)?))
}

/// Draft `d`'s record's body, held by `me`.
fn kept_body(d: &Draft, me: loop_store::Owner) -> Option<serde_json::Value> {
    serde_json::to_value(Kept {
        state: d.state.clone(),
        notes: d.notes.clone(),
        instruction: d.instruction.clone(),
        model: d.model.clone(),
        holder: Some(me),
        proposed_ms: d.proposed_ms,
        asked_on: d.asked_on.clone(),
        skills: d.skills.clone(),
    })
    .ok()
}

/// [`keep`] on a thread of its own (for callers on the executor).
pub fn keep_later(drafts: &Drafts, id: &str) {
    let (drafts, id) = (drafts.clone(), id.to_string());
    let spawned = std::thread::Builder::new()
        .name(format!("keep {id}"))
        .spawn(move || {
            keep(&drafts, &id);
        });
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
    take_up(drafts, records, now)
}

/// [`restore`] from `records`, as read at `now`. A draft this server
/// acts on (ends, or holds while it waits) is taken in the store by one
/// conditional write, against the record as read: of two servers that
/// read it alike, one takes it and the other leaves it (before, both
/// could end it, and where it was asked heard so twice). One written
/// since it was read is read again and judged again (a holder that wrote
/// its last before it died leaves it to be taken), a few times.
fn take_up(drafts: &Drafts, records: Vec<loop_store::DraftRecord>, now: u64) -> usize {
    let Some(rt) = drafts.keep.clone() else {
        return 0;
    };
    let mut waiting = 0;
    for first in records {
        let mut r = first;
        for _ in 0..3 {
            let Some((draft, ended, act)) = judged(&r, now, &drafts.me().token) else {
                break;
            };
            if act && !taken(&rt, &r, &draft, drafts.me()) {
                match rt.kept_draft(&r.id) {
                    Ok(Some(again)) => {
                        r = again;
                        continue;
                    }
                    _ => break,
                }
            }
            if matches!(draft.state, DraftState::Proposed { .. }) {
                waiting += 1;
            }
            lock(drafts).insert(r.id.clone(), draft);
            if let Some(why) = ended {
                tell_ended(drafts, &r.id, why);
            }
            break;
        }
    }
    if waiting > 0 {
        expire_restored_later(drafts);
    }
    waiting
}

/// What this server makes of kept record `r` at `now`: the draft as it
/// stands here, why it ends (if it ends here), and whether this server
/// acts on it (ends it, or holds it while it waits: only once it is
/// taken); `None` for a record that cannot be read, or a draft another
/// live server holds.
fn judged(
    r: &loop_store::DraftRecord,
    now: u64,
    me: &str,
) -> Option<(Draft, Option<loop_runtime::DraftEnded>, bool)> {
    let Ok(k) = serde_json::from_str::<Kept>(&r.body) else {
        tracing::warn!("draft {}: its kept record cannot be read", r.id);
        return None;
    };
    // A draft another server still holds (drafting, or waiting for its
    // answer there) stays that server's.
    let open = matches!(k.state, DraftState::Drafting | DraftState::Proposed { .. });
    if open
        && let Some(h) = &k.holder
        && h.token != me
        && !h.is_dead()
        && !h.expired(HOLD.as_millis() as u64, now)
    {
        return None;
    }
    let proposed = k.proposed_ms.unwrap_or(r.updated_ms);
    let expired = now.saturating_sub(proposed) > WAIT.as_millis() as u64;
    let (state, ended) = match k.state {
        DraftState::Drafting => (
            DraftState::Ended {
                reason: "the server stopped while the contract was being drafted: ask again".into(),
            },
            Some(loop_runtime::DraftEnded::Interrupted),
        ),
        DraftState::Proposed { .. } if expired => (
            DraftState::Ended {
                reason: format!("no answer came within {} minutes", WAIT.as_secs() / 60),
            },
            Some(loop_runtime::DraftEnded::Unanswered),
        ),
        other => (other, None),
    };
    let draft = Draft {
        owner: r.owner.clone(),
        state,
        notes: k.notes,
        instruction: k.instruction,
        model: k.model,
        skills: k.skills,
        answer: None,
        restored: Some(proposed.saturating_add(WAIT.as_millis() as u64)),
        proposed_ms: k.proposed_ms,
        asked_on: k.asked_on,
        answered_by: None,
    };
    Some((draft, ended, open))
}

/// Take draft `r.id` (to stand as `d`, held by `me`) from the record `r`
/// as read: whether no other server wrote it since (a failure to ask is a
/// no).
fn taken(rt: &Runtime, r: &loop_store::DraftRecord, d: &Draft, me: loop_store::Owner) -> bool {
    let token = me.token.clone();
    let Some(body) = kept_body(d, me) else {
        return false;
    };
    match rt.claim_draft(&r.id, (&r.holder, r.updated_ms), &token, &body) {
        Ok(true) => true,
        Ok(false) => {
            tracing::info!("draft {}: written since it was read; read again", r.id);
            false
        }
        Err(e) => {
            tracing::warn!("draft {}: not taken up, the store refused: {e}", r.id);
            false
        }
    }
}

/// Where a trigger asked for draft `id` hears that it started no task,
/// and why (a call to GitHub, on a thread of its own); what was posted is
/// noted on the draft and kept. Nothing for a draft no trigger asked for.
fn tell_ended(drafts: &Drafts, id: &str, why: loop_runtime::DraftEnded) {
    let Some(rt) = drafts.keep.clone() else {
        return;
    };
    let asked = lock(drafts)
        .get(id)
        .and_then(|d| d.asked_on.as_ref())
        .map(|a| a.trigger.clone());
    let Some(trigger) = asked else {
        return;
    };
    // The Loopfile is read, and GitHub called, off the caller's thread
    // (an API handler's may be the executor's).
    let (drafts, draft) = (drafts.clone(), id.to_string());
    let spawned = std::thread::Builder::new()
        .name(format!("ended {id}"))
        .spawn(move || {
            if let Some(ask) = rt.github_ask(&trigger) {
                note(&drafts, &draft, &ask.post_ended(&draft, why));
                keep(&drafts, &draft);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("draft {id}: where it was asked is not told it ended: {e}");
    }
}

/// End the restored drafts whose wait is over, unanswered (and tell
/// where they were asked); the time until the next one's wait ends, if
/// one still waits.
fn expire_restored(drafts: &Drafts, now: u64) -> Option<u64> {
    let mut ended = Vec::new();
    let mut next = None::<u64>;
    for (id, d) in lock(drafts).iter_mut() {
        let (Some(until), DraftState::Proposed { .. }) = (d.restored, &d.state) else {
            continue;
        };
        if now > until {
            d.state = DraftState::Ended {
                reason: format!("no answer came within {} minutes", WAIT.as_secs() / 60),
            };
            ended.push(id.clone());
        } else {
            next = Some(next.map_or(until - now, |n| n.min(until - now)));
        }
    }
    for id in ended {
        keep(drafts, &id);
        tell_ended(drafts, &id, loop_runtime::DraftEnded::Unanswered);
    }
    next
}

/// Renew this server's hold on the restored drafts that still wait.
fn renew_restored(drafts: &Drafts) {
    let waiting: Vec<String> = lock(drafts)
        .iter()
        .filter(|(_, d)| d.restored.is_some() && matches!(d.state, DraftState::Proposed { .. }))
        .map(|(id, _)| id.clone())
        .collect();
    for id in waiting {
        keep(drafts, &id);
    }
}

/// Watch the restored drafts' waits on a thread of its own until none
/// waits: a restored draft nobody answers ends when its wait does, as a
/// draft drafted here does, and where it was asked hears so; meanwhile
/// this server's hold on them is renewed every [`RENEW`].
fn expire_restored_later(drafts: &Drafts) {
    let drafts = drafts.clone();
    let spawned = std::thread::Builder::new()
        .name("restored drafts".into())
        .spawn(move || {
            let mut renewed = std::time::Instant::now();
            loop {
                let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
                let Some(left) = expire_restored(&drafts, now) else {
                    return;
                };
                if renewed.elapsed() >= RENEW {
                    renew_restored(&drafts);
                    renewed = std::time::Instant::now();
                }
                std::thread::sleep(Duration::from_millis(left.saturating_add(1)).min(RENEW));
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("restored drafts' waits are not watched: {e}");
    }
}

/// Begin a draft of `instruction` for `owner` (asked for where
/// `asked_on` says, when a trigger asked).
pub fn begin(
    drafts: &Drafts,
    id: &str,
    (owner, asked_on): (&str, Option<AskedOn>),
    instruction: &str,
    (model, skills): (Option<&str>, Vec<String>),
) -> Result<(), Full> {
    let mut all = lock(drafts);
    // Counted and taken under one lock: two requests at once cannot both
    // take the last place.
    let open = |d: &&Draft| matches!(d.state, DraftState::Drafting | DraftState::Proposed { .. });
    let everyone = all.values().filter(open).count();
    let theirs = all
        .values()
        .filter(open)
        .filter(|d| d.owner == owner)
        .count();
    if theirs >= OPEN_PER_OWNER {
        return Err(Full::Owner(OPEN_PER_OWNER));
    }
    if everyone >= OPEN_IN_ALL {
        return Err(Full::Server(OPEN_IN_ALL));
    }
    all.insert(
        id.to_string(),
        Draft {
            owner: owner.to_string(),
            state: DraftState::Drafting,
            notes: Vec::new(),
            instruction: instruction.to_string(),
            model: model.map(str::to_string),
            skills,
            answer: None,
            restored: None,
            proposed_ms: None,
            asked_on,
            answered_by: None,
        },
    );
    Ok(())
}

/// Drafts one owner may have open (being drafted, or proposed and
/// waiting for an answer) at once: each holds a thread and its memory for
/// up to [`WAIT`]; past that a new one is answered 429 (500 posted by one
/// token held 500 threads and 190 MB).
pub const OPEN_PER_OWNER: usize = 32;

/// Drafts open on this server at once, whoever's.
pub const OPEN_IN_ALL: usize = 256;

/// Why [`begin`] refused: the owner's open drafts, or the server's, are
/// at their bound.
#[derive(Debug, PartialEq)]
pub enum Full {
    /// The owner has this many open.
    Owner(usize),
    /// The server has this many open.
    Server(usize),
}

/// Note `line` on draft `id`.
pub fn note(drafts: &Drafts, id: &str, line: &str) {
    if let Some(d) = lock(drafts).get_mut(id) {
        d.notes.push(line.to_string());
    }
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
    Restored(Box<Restored>),
    /// It was asked for somewhere else than where this answer was given.
    NotHere,
    /// The answer names another contract than the one proposed now.
    Changed,
}

/// Give draft `id` its answer (`None`: not the caller's, or no such
/// draft).
pub fn answer(
    drafts: &Drafts,
    id: &str,
    by: Answerer<'_>,
    review: ContractReview,
) -> Option<Answered> {
    let mut all = lock(drafts);
    let d = all.get_mut(id)?;
    let who = match by {
        Answerer::Owner { owner, admin, who } => {
            if !(admin || d.owner == owner) {
                return None;
            }
            who
        }
        // Only where the draft was asked for (its trigger, repository
        // and number): a draft's id alone answers nothing. And only the
        // contract its author read (an edit made since is read again).
        Answerer::Asked(a) => {
            if d.asked_on.as_ref().is_none_or(|o| o.on != a.asked_on) {
                return Some(Answered::NotHere);
            }
            if let DraftState::Proposed { contract } = &d.state
                && loop_runtime::contract_digest(contract) != a.digest
            {
                return Some(Answered::Changed);
            }
            a.who.clone()
        }
    };
    if let (Some(until), DraftState::Proposed { contract }) = (d.restored, &d.state) {
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        if now > until {
            d.state = DraftState::Ended {
                reason: format!("no answer came within {} minutes", WAIT.as_secs() / 60),
            };
            drop(all);
            keep_later(drafts, id);
            tell_ended(drafts, id, loop_runtime::DraftEnded::Unanswered);
            return Some(Answered::NotWaiting);
        }
        let contract = match review {
            ContractReview::Accept => contract.clone(),
            ContractReview::Edited(text) => text,
            _ => {
                d.state = DraftState::Ended {
                    reason: "rejected".into(),
                };
                drop(all);
                keep_later(drafts, id);
                tell_ended(drafts, id, loop_runtime::DraftEnded::Rejected);
                return Some(Answered::Delivered);
            }
        };
        let answered = Answered::Restored(Box::new(Restored {
            contract,
            instruction: d.instruction.clone(),
            model: d.model.clone(),
            skills: d.skills.clone(),
            owner: d.owner.clone(),
            asked_on: d.asked_on.clone(),
            who,
        }));
        d.state = DraftState::Drafting;
        return Some(answered);
    }
    Some(match d.answer.take() {
        Some(tx) => {
            d.state = DraftState::Drafting;
            d.answered_by = Some(who);
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
    /// Asked for on GitHub: the draft is posted there for its answer (or
    /// locked at once, when the trigger says `auto_confirm`).
    pub github: Option<loop_runtime::GithubAsk>,
    /// The contract last posted there (shown again only once it changed).
    pub posted: Option<String>,
    /// How the person's answer ended it, when it did (rejected, or none
    /// in time).
    pub ended: Option<loop_runtime::DraftEnded>,
    /// The calls made to show it where it was asked.
    pub calls: Vec<loop_protocol::evidence::ApiCall>,
}

impl DraftObserver {
    /// An observer of draft `id` for `who` (asked for on `github`).
    pub fn new(
        drafts: Drafts,
        id: String,
        who: String,
        github: Option<loop_runtime::GithubAsk>,
    ) -> DraftObserver {
        DraftObserver {
            drafts,
            id,
            who,
            github,
            posted: None,
            ended: None,
            calls: Vec::new(),
        }
    }

    /// Why its task did not start, as the issue is told.
    pub fn ended(&self) -> loop_runtime::DraftEnded {
        self.ended.unwrap_or(loop_runtime::DraftEnded::NotDrafted)
    }
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
        // The trigger's own `auto_confirm` locks what the critic accepted.
        if let Some(g) = self.github.as_ref().filter(|g| g.auto_confirm()) {
            let by = format!("the trigger `{}` (auto_confirm)", g.trigger());
            if let Some(d) = lock(&self.drafts).get_mut(&self.id) {
                d.notes.push(format!("confirmed by {by}"));
                d.answered_by = Some(by);
            }
            return ContractReview::Accept;
        }
        // (What "confirm" locks is shown; the console's editor keeps the
        // person's rejected edit on their side.)
        let (tx, rx): (Sender<ContractReview>, Receiver<ContractReview>) =
            std::sync::mpsc::channel();
        if let Some(d) = lock(&self.drafts).get_mut(&self.id) {
            d.state = DraftState::Proposed {
                contract: contract.to_string(),
            };
            d.answer = Some(tx);
            d.proposed_ms = Some(loop_core::Clock::now_ms(&loop_core::SystemClock));
        }
        // Shown where it was asked, with how to answer there.
        if let Some(g) = &self.github
            && self.posted.as_deref() != Some(contract)
        {
            let (said, calls) = g.post_draft(&self.id, contract);
            note(&self.drafts, &self.id, &said);
            self.calls.extend(calls);
            self.posted = Some(contract.to_string());
        }
        keep(&self.drafts, &self.id);
        // Waiting, the hold is renewed (another server takes the draft
        // over only once this one is gone).
        let since = std::time::Instant::now();
        loop {
            let left = WAIT.saturating_sub(since.elapsed());
            if left.is_zero() {
                self.ended = Some(loop_runtime::DraftEnded::Unanswered);
                return ContractReview::Unanswered;
            }
            let review = match rx.recv_timeout(left.min(RENEW)) {
                Ok(review) => review,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    keep(&self.drafts, &self.id);
                    continue;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => ContractReview::Unanswered,
            };
            self.ended = match review {
                ContractReview::Reject => Some(loop_runtime::DraftEnded::Rejected),
                ContractReview::Unanswered => Some(loop_runtime::DraftEnded::Unanswered),
                _ => None,
            };
            return review;
        }
    }

    fn review_calls(&self) -> Vec<loop_protocol::evidence::ApiCall> {
        self.calls.clone()
    }

    fn reviewer(&self) -> String {
        lock(&self.drafts)
            .get(&self.id)
            .and_then(|d| d.answered_by.clone())
            .unwrap_or_else(|| self.who.clone())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, clippy::unwrap_used)] // tests make and read their own fixtures
mod tests {
    use super::*;

    /// An owner's open drafts are bounded, and the server's: past the
    /// bound a new one is refused (nothing is kept for it); one that
    /// started or ended frees its place; another owner still has theirs.
    #[test]
    fn open_drafts_are_bounded_per_owner_and_in_all() {
        let drafts = Drafts::default();
        let b = |id: &str, owner: &str| begin(&drafts, id, (owner, None), "x", (None, Vec::new()));
        for i in 0..OPEN_PER_OWNER {
            b(&format!("d-a{i}"), "alice").unwrap();
        }
        assert_eq!(b("d-over", "alice"), Err(Full::Owner(OPEN_PER_OWNER)));
        assert!(!lock(&drafts).contains_key("d-over"));
        b("d-bob", "bob").unwrap();
        set(&drafts, "d-a0", DraftState::Ended { reason: "x".into() });
        b("d-again", "alice").unwrap();
        let mut i = 0;
        while lock(&drafts).len() < OPEN_IN_ALL + 1 {
            b(&format!("d-o{i}"), &format!("owner-{i}")).unwrap();
            i += 1;
        }
        assert_eq!(b("d-last", "carol"), Err(Full::Server(OPEN_IN_ALL)));
    }

    /// A restored draft nobody answers ends when its wait does (before,
    /// it waited unanswered forever, and where it was asked heard
    /// nothing); one whose wait goes on is left, and the watcher is told
    /// when to look again.
    #[test]
    fn a_restored_draft_ends_unanswered_when_its_wait_does() {
        let drafts = Drafts::default();
        for (id, until) in [("d-over", 1_000), ("d-later", 5_000), ("d-here", 0)] {
            begin(&drafts, id, ("alice", None), "do it", (None, Vec::new())).unwrap();
            let mut all = lock(&drafts);
            let d = all.get_mut(id).unwrap();
            d.state = DraftState::Proposed {
                contract: "{}".into(),
            };
            // d-here was drafted by this server: its own drafting thread
            // ends it, not the watcher.
            d.restored = (until > 0).then_some(until);
        }
        assert_eq!(expire_restored(&drafts, 2_000), Some(3_000));
        let state = |id: &str| lock(&drafts).get(id).unwrap().state.clone();
        assert!(
            matches!(state("d-over"), DraftState::Ended { reason } if reason == "no answer came within 30 minutes")
        );
        assert!(matches!(state("d-later"), DraftState::Proposed { .. }));
        assert!(matches!(state("d-here"), DraftState::Proposed { .. }));
        assert_eq!(expire_restored(&drafts, 6_000), None);
        assert!(matches!(state("d-later"), DraftState::Ended { .. }));
        assert!(matches!(state("d-here"), DraftState::Proposed { .. }));
    }

    /// A server takes up only the drafts no live server holds: one whose
    /// holder died here, or whose hold on another machine lapsed; never
    /// one a live server (here or elsewhere) still waits on.
    #[test]
    fn a_server_takes_over_only_drafts_whose_holder_is_gone() {
        let dir = std::env::temp_dir().join(format!("loop-drafts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = Runtime::open(&dir).unwrap();
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let held = |holder: loop_store::Owner| {
            serde_json::to_value(Kept {
                state: DraftState::Proposed {
                    contract: "{}".into(),
                },
                notes: Vec::new(),
                instruction: "do it".into(),
                model: None,
                holder: Some(holder),
                proposed_ms: Some(now),
                asked_on: None,
                skills: Vec::new(),
            })
            .unwrap()
        };
        let live_here = loop_store::Owner::this_process("another-server".into(), now);
        let dead_here = loop_store::Owner {
            token: "gone".into(),
            pid: u32::MAX - 1,
            start_time: 1,
            ..live_here.clone()
        };
        let elsewhere = |heartbeat_ms: u64| loop_store::Owner {
            token: "far".into(),
            host: "another-machine".into(),
            heartbeat_ms,
            ..live_here.clone()
        };
        for (id, holder) in [
            ("d-live", live_here.clone()),
            ("d-dead", dead_here),
            ("d-lapsed", elsewhere(now - 10 * 60 * 1000)),
            ("d-far", elsewhere(now)),
        ] {
            let token = holder.token.clone();
            assert!(rt.keep_draft(id, "alice", &held(holder), &token).unwrap());
        }
        let drafts = Drafts::kept_in(rt);
        assert_eq!(restore(&drafts), 2);
        let mut taken: Vec<String> = lock(&drafts).keys().cloned().collect();
        taken.sort();
        assert_eq!(taken, ["d-dead", "d-lapsed"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two servers that read the kept drafts alike (both started after
    /// the server that held them died) each act on a draft only if the
    /// store's one conditional write gives it to them: a draft whose
    /// drafting was cut short ends once, a waiting one is held by one
    /// server; the other, finding each record written since it read it,
    /// reads it again: the ended one it only shows, the waiting one, held
    /// by a live server, it leaves (before, each ended the first, and
    /// where it was asked heard so twice). A record its dead holder wrote
    /// once more after it was read is read again and taken.
    #[test]
    fn of_two_servers_that_read_a_draft_alike_one_takes_it_up() {
        let dir = std::env::temp_dir().join(format!("loop-drafts-two-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = Runtime::open(&dir).unwrap();
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let dead = loop_store::Owner {
            token: "gone".into(),
            pid: u32::MAX - 1,
            start_time: 1,
            ..loop_store::Owner::this_process("gone".into(), now)
        };
        let kept = |state: DraftState| {
            serde_json::to_value(Kept {
                state,
                notes: Vec::new(),
                instruction: "do it".into(),
                model: None,
                holder: Some(dead.clone()),
                proposed_ms: Some(now),
                asked_on: None,
                skills: Vec::new(),
            })
            .unwrap()
        };
        let waiting = || DraftState::Proposed {
            contract: "{}".into(),
        };
        assert!(
            rt.keep_draft("d-cut", "alice", &kept(DraftState::Drafting), "gone")
                .unwrap()
        );
        assert!(
            rt.keep_draft("d-wait", "alice", &kept(waiting()), "gone")
                .unwrap()
        );
        let read = rt.kept_drafts(0).unwrap();
        assert_eq!(read.len(), 2);
        let server = |token: &str| Drafts {
            token: Some(token.into()),
            ..Drafts::kept_in(Runtime::open(&dir).unwrap())
        };
        let (first, second) = (server("first"), server("second"));
        assert_eq!(take_up(&first, read.clone(), now), 1, "d-wait waits");
        assert_eq!(take_up(&second, read, now), 0);
        let mut taken: Vec<String> = lock(&first).keys().cloned().collect();
        taken.sort();
        assert_eq!(taken, ["d-cut", "d-wait"]);
        // The second shows the ended draft as the first left it, and holds
        // nothing.
        let seen: Vec<String> = lock(&second).keys().cloned().collect();
        assert_eq!(seen, ["d-cut"], "the second server took a draft too");
        assert!(matches!(
            &lock(&second)["d-cut"].state,
            DraftState::Ended { reason } if reason.contains("ask again")
        ));
        let stored = |id: &str| -> Kept {
            let r = rt.kept_draft(id).unwrap().unwrap();
            serde_json::from_str(&r.body).unwrap()
        };
        assert!(matches!(stored("d-cut").state, DraftState::Ended { .. }));
        for id in ["d-cut", "d-wait"] {
            assert_eq!(stored(id).holder.map(|h| h.token).as_deref(), Some("first"));
        }
        // Written by its dead holder once more after it was read: read
        // again, and taken.
        assert!(
            rt.keep_draft("d-late", "alice", &kept(waiting()), "gone")
                .unwrap()
        );
        let read = rt.kept_drafts(0).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(
            rt.keep_draft("d-late", "alice", &kept(waiting()), "gone")
                .unwrap()
        );
        let third = server("third");
        let late: Vec<_> = read.into_iter().filter(|r| r.id == "d-late").collect();
        assert_eq!(take_up(&third, late, now), 1);
        assert_eq!(
            stored("d-late").holder.map(|h| h.token).as_deref(),
            Some("third")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A server paused past its hold (its draft taken over meanwhile by a
    /// server that started then) never writes over the new holder when it
    /// wakes: its next keep finds the draft taken, and it gives the draft
    /// up (before, its renewal wrote itself back as the holder, and both
    /// servers waited on the draft, each ready to start its task). Its own
    /// renewals, while nobody took the draft, are written.
    #[test]
    fn a_server_whose_hold_lapsed_gives_its_draft_up_rather_than_write_over_it() {
        let dir = std::env::temp_dir().join(format!("loop-drafts-lapsed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = Runtime::open(&dir).unwrap();
        let server = |token: &str| Drafts {
            token: Some(token.into()),
            ..Drafts::kept_in(Runtime::open(&dir).unwrap())
        };
        let (first, second) = (server("first"), server("second"));
        let (tx, rx) = std::sync::mpsc::channel();
        begin(&first, "d", ("alice", None), "do it", (None, Vec::new())).unwrap();
        if let Some(d) = lock(&first).get_mut("d") {
            d.state = DraftState::Proposed {
                contract: "{}".into(),
            };
            d.answer = Some(tx);
        }
        let stored = || {
            let r = rt.kept_draft("d").unwrap().unwrap();
            let k: Kept = serde_json::from_str(&r.body).unwrap();
            (r.holder, k.holder.map(|h| h.token), r.updated_ms)
        };
        // Its own keeps, while the draft is its own, are written.
        assert!(keep(&first, "d"));
        let (_, _, was) = stored();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(keep(&first, "d"), "its own renewal");
        let (column, holder, at) = stored();
        assert_eq!(
            (column.as_str(), holder.as_deref()),
            ("first", Some("first"))
        );
        assert!(at > was, "renewed");
        assert!(held_here(&first, "d"));
        // Read past the first server's hold (it paused): the second takes it.
        let later = loop_core::Clock::now_ms(&loop_core::SystemClock) + HOLD.as_millis() as u64 + 1;
        assert_eq!(take_up(&second, rt.kept_drafts(0).unwrap(), later), 1);
        assert_eq!(
            stored().0,
            "second",
            "the store's holder is the server that took it"
        );
        // The first wakes and renews: refused, the draft given up here,
        // the answer it awaited no longer coming here.
        assert!(!keep(&first, "d"));
        let (column, holder, _) = stored();
        assert_eq!(
            (column.as_str(), holder.as_deref()),
            ("second", Some("second")),
            "written over by the server whose hold lapsed"
        );
        assert!(!held_here(&first, "d"));
        assert!(matches!(
            rx.recv_timeout(std::time::Duration::from_millis(100)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        ));
        assert!(held_here(&second, "d"));
        assert!(keep(&second, "d"), "the new holder's renewal");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
