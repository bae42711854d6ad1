//! The server's typed operations, shared by its two front ends: the HTTP
//! API (`api.rs`) and MCP (`mcp.rs`) translate their requests into these
//! calls and the typed answers into their own bodies. Each finds a task
//! only among those its caller may see; the runtime decides the rest.

use crate::{ApiError, AppState};
use axum::http::StatusCode;
use loop_runtime::ContractReview;
use loop_runtime::views::{CreatedBody, PrestartBody, RefusedBody, StandingBody, TaskBody};
use loop_runtime::{Caller, Scope};
use loop_runtime::{OnPrompt, Runtime};
use serde::Deserialize;
use std::sync::atomic::Ordering;

pub(crate) use crate::blocking;

/// Task `id`, if `caller` may see it; 404 otherwise (an id alone reveals
/// nothing about other owners' tasks).
pub(crate) fn visible(
    rt: &Runtime,
    caller: &Caller,
    id: &str,
) -> Result<loop_runtime::TaskView, ApiError> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(ApiError::not_found("such task"));
    }
    match rt.task(id) {
        // Another project's task on a shared store is not here.
        Ok(t) if caller.may_see(t.owner.as_deref()) && matches!(rt.foreign(id), Ok(None)) => Ok(t),
        // A store that cannot answer is no answer that the task is not
        // there: a server error, not a 404.
        Err(e)
            if matches!(
                e.kind,
                loop_runtime::ErrorKind::Internal | loop_runtime::ErrorKind::Unavailable
            ) =>
        {
            Err(e.into())
        }
        _ => Err(ApiError::not_found(&format!("task {id}"))),
    }
}

pub(crate) use crate::submissions::NewTask;

/// What asking for a task came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Created {
    /// Stored, and started (its id).
    Started(String),
    /// Waiting for a place, or still being prepared: the id the task will
    /// have (its status says how the preparation went).
    Preparing(String),
    /// An instruction alone: its contract is being drafted (the draft's id).
    Drafting(String),
}

impl Created {
    /// The HTTP status that says it.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            // Kept in the store: the task is made (or its refusal is).
            Created::Started(_) | Created::Preparing(_) => StatusCode::CREATED,
            Created::Drafting(_) => StatusCode::ACCEPTED,
        }
    }

    /// The task it will be, if it is a task already.
    pub(crate) fn task(&self) -> Option<&str> {
        match self {
            Created::Started(id) | Created::Preparing(id) => Some(id),
            Created::Drafting(_) => None,
        }
    }

    /// The body that says it (the same for HTTP and MCP).
    pub(crate) fn body(&self) -> CreatedBody {
        match self {
            Created::Started(id) => CreatedBody::started(id),
            Created::Preparing(id) => CreatedBody::preparing(id),
            Created::Drafting(id) => CreatedBody::drafting(id),
        }
    }
}

/// Start a task from `body` for `caller`: 201 with its id once the
/// request is kept (its preparation follows; waited for up to `wait`), or,
/// for an instruction alone, 202 with the draft whose contract waits for
/// an answer.
pub(crate) async fn create_task(
    s: &AppState,
    caller: Caller,
    body: NewTask,
    via: loop_runtime::Via,
    wait: std::time::Duration,
) -> Result<Created, ApiError> {
    // What it answers names no path of the server's disk (a recording
    // that did not parse was named by its absolute path).
    let project = s.runtime.project().to_path_buf();
    create_task_here(s, caller, body, via, wait)
        .await
        .map_err(|mut e| {
            e.message = project_relative(&project, &e.message);
            e
        })
}

async fn create_task_here(
    s: &AppState,
    caller: Caller,
    body: NewTask,
    via: loop_runtime::Via,
    wait: std::time::Duration,
) -> Result<Created, ApiError> {
    let rt = s.runtime.clone();
    // Files given with it are checked here, for every front end (the API's
    // JSON or upload, MCP's arguments): a file that cannot be decoded is a
    // 400 naming it, never a task started without it.
    crate::submissions::given_inputs(&body.inputs)?;
    let request = body.clone().request(&caller, via);
    let admitted = blocking(move || Ok(rt.admit(request)?)).await?;
    if admitted.is_draft() {
        return start_draft(s, &caller, admitted);
    }
    // The id first; the request is kept, then answered; the preparation
    // waits for one of the `--jobs` places and runs whatever the request's
    // fate (see `prestart` and `submissions`).
    let id = crate::submissions::new_id(s, &caller).await?;
    let rx = crate::submissions::take(s, &id, &caller, via, body, admitted).await?;
    if wait.is_zero() {
        return Ok(Created::Preparing(id));
    }
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(Ok(id))) => Ok(Created::Started(id)),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(_)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("task {id}: its preparation ended without a word"),
        )),
        // Still waiting for a place, or still being prepared: said so,
        // with the id the task will have (its status says how it went).
        Err(_) => Ok(Created::Preparing(id)),
    }
}

/// Draft `draft_id`'s task was submitted (`Ok`: it starts now) or not
/// (the draft ends, saying why).
pub(crate) fn draft_settled(
    (drafts, draft_id): (&crate::drafts::Drafts, &str),
    submitted: Result<String, loop_runtime::Error>,
    metrics: &crate::Metrics,
    pool: &crate::pool::Pool,
    github: Option<(&loop_runtime::GithubAsk, loop_runtime::DraftEnded)>,
) {
    match submitted {
        Ok(task_id) => {
            crate::drafts::set(
                drafts,
                draft_id,
                crate::drafts::DraftState::Started {
                    task_id: task_id.clone(),
                },
            );
            metrics.tasks_started.fetch_add(1, Ordering::Relaxed);
            pool.start(task_id, None);
        }
        Err(e) => {
            // Where it was asked hears that nothing started, and why (not
            // from here once another server took the draft over: it is
            // that server's to tell).
            if let Some((g, why)) = github
                && crate::drafts::held_here(drafts, draft_id)
            {
                crate::drafts::note(drafts, draft_id, &g.post_ended(draft_id, why));
            }
            crate::drafts::set(
                drafts,
                draft_id,
                crate::drafts::DraftState::Ended { reason: e.message },
            )
        }
    }
}

/// An instruction alone: draft its contract on a thread of its own; the
/// person answers through `/api/v1/drafts/{id}`.
fn start_draft(
    s: &AppState,
    caller: &Caller,
    admitted: loop_runtime::Admitted,
) -> Result<Created, ApiError> {
    let who = format!(
        "the API (owner {}, token {})",
        caller.owner, caller.token_id
    );
    draft_on_thread(s, (&caller.owner, who), admitted, None).map(Created::Drafting)
}

/// A GitHub trigger's task whose contract is drafted: posted where it
/// was asked for a person's answer there (a reply comment) or in the
/// console, or locked at once by the trigger's `auto_confirm`. The
/// draft's id.
pub(crate) fn start_github_draft(
    s: &AppState,
    asked: loop_runtime::DraftAsked,
) -> Result<String, ApiError> {
    let loop_runtime::DraftAsked {
        admitted,
        owner,
        ask,
    } = asked;
    let who = format!("the console (owner {owner})");
    draft_on_thread(s, (&owner, who), admitted, Some(ask))
}

/// Draft `admitted`'s contract on a thread of its own, for `owner`; the
/// draft's id.
fn draft_on_thread(
    s: &AppState,
    (owner, who): (&str, String),
    admitted: loop_runtime::Admitted,
    github: Option<loop_runtime::GithubAsk>,
) -> Result<String, ApiError> {
    let rt = s.runtime.clone();
    let id = format!(
        "d-{}",
        loop_protocol::random::hex::<8>()
            .map_err(|e| ApiError::from(loop_runtime::Error::from_cause(e)))?
    );
    let asked_on = github.as_ref().and_then(|g| {
        Some(crate::drafts::AskedOn {
            on: g.asked_on(),
            trigger: admitted.trigger()?.clone(),
            base_commit: admitted.base_commit().map(str::to_string),
        })
    });
    let full = crate::drafts::begin(
        &s.drafts,
        &id,
        (owner, asked_on),
        &admitted.contract().instruction,
        (admitted.model(), admitted.skill_names()),
    );
    if let Err(full) = full {
        let why = match full {
            crate::drafts::Full::Owner(n) => {
                format!(
                    "{owner} has {n} drafts open already (being drafted or waiting for an answer); answer or cancel one, then ask again"
                )
            }
            crate::drafts::Full::Server(n) => {
                format!("this server has {n} drafts open already; ask again once some are answered")
            }
        };
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            why,
        ));
    }
    let drafts = s.drafts.clone();
    let draft_id = id.clone();
    let metrics = s.metrics.clone();
    let pool = s.pool.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("draft {id}"))
        .spawn(move || {
            crate::drafts::keep(&drafts, &draft_id);
            let mut observer =
                crate::drafts::DraftObserver::new(drafts.clone(), draft_id.clone(), who, github);
            let submitted = rt
                .submit_admitted(admitted, &mut observer)
                .map_err(|mut e| {
                    // Why it ended is said without the server's paths.
                    e.message = project_relative(rt.project(), &e.message);
                    e
                });
            let ended = observer.ended();
            let github = observer.github.as_ref().map(|g| (g, ended));
            draft_settled((&drafts, &draft_id), submitted, &metrics, &pool, github);
        });
    if let Err(e) = spawned {
        // Its place among the owner's open drafts is given back.
        crate::drafts::set(
            &s.drafts,
            &id,
            crate::drafts::DraftState::Ended {
                reason: format!("cannot start drafting: {e}"),
            },
        );
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot start drafting: {e}"),
        ));
    }
    Ok(id)
}

/// Where a task stands as `caller` may see it: stored (its status, and
/// whether it waits here for a place to run), or not yet stored (waiting
/// for a place, being prepared, or refused).
#[derive(Debug, Clone)]
pub(crate) enum Standing {
    /// In the store.
    Stored {
        /// Its status.
        status: Box<loop_runtime::TaskStatus>,
        /// It waits here for one of the `--jobs` places.
        queued: bool,
    },
    /// Not stored yet.
    Prestart {
        /// Its id.
        id: String,
        /// How its preparation goes.
        state: crate::prestart::State,
    },
}

impl Standing {
    /// As the API says it (where a workspace is on the server's disk is
    /// the server's business; paths inside the project are relative).
    pub(crate) fn view(&self, project: &std::path::Path) -> StandingBody<'_> {
        match self {
            Standing::Stored { status, queued } => StandingBody::Stored(Box::new(TaskBody {
                task: status.for_remote(project),
                used: None,
                queued: *queued,
                outcome_words: status.task.outcome.map(|o| o.words()),
            })),
            Standing::Prestart { id, state } => StandingBody::Prestart(PrestartBody {
                id,
                state: state.name(),
                queued: !matches!(state, crate::prestart::State::Refused(..)),
                error: match state {
                    crate::prestart::State::Refused(status, kind, message) => Some(RefusedBody {
                        status: *status,
                        kind,
                        message,
                    }),
                    _ => None,
                },
            }),
        }
    }

    /// Whether the task is over, or waits for a person (who will not
    /// answer while a caller waits on it): said why.
    pub(crate) fn settled_or_waiting(&self) -> Option<&'static str> {
        match self {
            Standing::Prestart {
                state: crate::prestart::State::Refused(..),
                ..
            } => Some("refused before it started (see `error`)"),
            Standing::Prestart { .. } => None,
            Standing::Stored { status, .. } => {
                if status.task.outcome.is_some() && !status.task.running {
                    return Some("ended");
                }
                status
                    .approvals
                    .iter()
                    .any(|a| a.status == loop_store::ApprovalStatus::Pending)
                    .then_some("waiting for an answer (`approve`)")
            }
        }
    }

    /// Nobody runs it and it does not wait here for a place.
    pub(crate) fn idle(&self) -> bool {
        matches!(self, Standing::Stored { status, queued: false } if status.task.interrupted)
    }
}

/// Where task `id` stands, as `caller` may see it: what the HTTP API and
/// MCP both read, typed.
pub(crate) async fn standing_of(
    s: &AppState,
    caller: Caller,
    id: String,
) -> Result<Standing, ApiError> {
    let s = s.clone();
    blocking(move || standing_now(&s, &caller, &id)).await
}

/// [`standing_of`], on the calling (blocking) thread.
pub(crate) fn standing_now(s: &AppState, caller: &Caller, id: &str) -> Result<Standing, ApiError> {
    if let Err(e) = visible(&s.runtime, caller, id) {
        return prestart_of(&s.prestart, caller, id).ok_or(e);
    }
    Ok(Standing::Stored {
        status: Box::new(s.runtime.status(id)?),
        queued: s.pool.is_waiting(id),
    })
}

/// Where task `id` stands while it is not stored yet (waiting for a
/// place, being prepared, or refused), if `caller` made it.
fn prestart_of(
    prestart: &crate::prestart::Prestart,
    caller: &Caller,
    id: &str,
) -> Option<Standing> {
    let owner = (caller.scope != Scope::Admin).then_some(caller.owner.as_str());
    let state = prestart.state(id, owner)?;
    Some(Standing::Prestart {
        id: id.to_string(),
        state,
    })
}

/// Task `id`'s recorded events from `since` on, as `caller` may see them
/// (none yet while its preparation runs): what the HTTP API and MCP both
/// read, typed.
pub(crate) async fn recorded(
    s: &AppState,
    caller: Caller,
    id: String,
    since: u64,
) -> Result<Vec<loop_runtime::Recorded>, ApiError> {
    let (rt, prestart) = (s.runtime.clone(), s.prestart.clone());
    blocking(move || {
        if let Err(e) = visible(&rt, &caller, &id) {
            // Not stored yet: no events yet.
            return prestart_of(&prestart, &caller, &id)
                .map(|_| Vec::new())
                .ok_or(e);
        }
        Ok(rt.events(&id, since)?)
    })
    .await
}

/// Task `id`'s change set, as `caller` may see it: what the HTTP API and
/// MCP both read, typed.
pub(crate) async fn change_set_of(
    s: &AppState,
    caller: Caller,
    id: String,
) -> Result<loop_runtime::Diff, ApiError> {
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        Ok(rt.diff(&id)?)
    })
    .await
}

/// Draft `id` as `caller` may see it: where it stands, and its notes.
pub(crate) fn draft_view(
    s: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<(crate::drafts::DraftState, Vec<String>), ApiError> {
    crate::drafts::view(&s.drafts, id, &caller.owner, caller.scope == Scope::Admin)
        .ok_or_else(|| ApiError::not_found(&format!("draft {id}")))
}

/// The person's answer to a drafted contract.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Confirm {
    /// Do not start the task.
    #[serde(default)]
    reject: bool,
    /// Lock this edited contract instead (YAML or JSON; judged again).
    contract: Option<String>,
}

/// `caller`'s answer `c` to draft `id` (given, or its task started).
pub(crate) fn confirm_draft(
    s: &AppState,
    caller: &Caller,
    id: &str,
    c: Confirm,
) -> Result<(), ApiError> {
    // An edit that is no contract is refused here, answered at once: the
    // draft goes on waiting (one the critic refuses is judged where it
    // waits, and its reason joins the draft's notes).
    if let (false, Some(text)) = (c.reject, &c.contract)
        && matches!(
            draft_view(s, caller, id),
            Ok((crate::drafts::DraftState::Proposed { .. }, _))
        )
        && let Err(e) = loop_protocol::Contract::from_yaml(text, "your edit")
    {
        return Err(ApiError::bad_request(format!(
            "draft {id}: the edited contract is refused, and the draft still waits for an answer:\n{e}"
        )));
    }
    let review = match (c.reject, c.contract) {
        (true, _) => ContractReview::Reject,
        (false, Some(text)) => ContractReview::Edited(text),
        (false, None) => ContractReview::Accept,
    };
    use crate::drafts::Answered;
    let by = crate::drafts::Answerer::Owner {
        owner: &caller.owner,
        admin: caller.scope == Scope::Admin,
        who: format!(
            "the API (owner {}, token {})",
            caller.owner, caller.token_id
        ),
    };
    match crate::drafts::answer(&s.drafts, id, by, review) {
        None | Some(Answered::NotHere | Answered::Changed) => {
            Err(ApiError::not_found(&format!("draft {id}")))
        }
        Some(Answered::NotWaiting) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_waiting",
            format!("draft {id} is not waiting for an answer"),
        )),
        Some(Answered::Delivered) => Ok(()),
        Some(Answered::Restored(r)) => start_restored(s, id, *r),
    }
}

/// What a reply comment's answer did.
pub(crate) enum Replied {
    /// It answered the draft: how.
    Answered(String),
    /// It answered nothing: why.
    Unanswered(String),
}

/// A reply comment's answer `a` to a drafted contract: what it did, or
/// why it answered nothing.
pub(crate) fn answer_from_github(s: &AppState, a: &loop_runtime::DraftAnswer) -> Replied {
    use crate::drafts::Answered;
    let review = if a.accept {
        ContractReview::Accept
    } else {
        ContractReview::Reject
    };
    let id = &a.draft;
    let done = if a.accept { "confirmed" } else { "rejected" };
    match crate::drafts::answer(&s.drafts, id, crate::drafts::Answerer::Asked(a), review) {
        None | Some(Answered::NotHere) => {
            Replied::Unanswered(format!("no draft {id} was asked for here"))
        }
        Some(Answered::Changed) => Replied::Unanswered(format!(
            "draft {id}'s contract changed since the one this answer names: read it again and answer it"
        )),
        Some(Answered::NotWaiting) => {
            Replied::Unanswered(format!("draft {id} is not waiting for an answer"))
        }
        Some(Answered::Delivered) => Replied::Answered(format!("draft {id} {done}")),
        Some(Answered::Restored(r)) => match start_restored(s, id, *r) {
            Ok(()) => Replied::Answered(format!("draft {id} {done}")),
            Err(e) => Replied::Unanswered(e.message),
        },
    }
}

/// Start the task of draft `id`, kept by an earlier server and answered
/// now: its proposed contract (or the person's edit) is judged again as a
/// contract the person gives, on a thread of its own; the draft says how
/// it went.
fn start_restored(
    s: &AppState,
    id: &str,
    restored: crate::drafts::Restored,
) -> Result<(), ApiError> {
    let crate::drafts::Restored {
        contract,
        instruction,
        model,
        skills,
        owner,
        asked_on,
        who,
    } = restored;
    let (rt, drafts, pool, metrics) = (
        s.runtime.clone(),
        s.drafts.clone(),
        s.pool.clone(),
        s.metrics.clone(),
    );
    let draft_id = id.to_string();
    let spawned = std::thread::Builder::new()
        .name(format!("draft {id}"))
        .spawn(move || {
            // Taken over by another server while this one's hold lapsed:
            // it is that server's to start (once answered there).
            if !crate::drafts::keep(&drafts, &draft_id) {
                return;
            }
            // Where a trigger asked still hears it if nothing starts.
            let ask = asked_on.as_ref().and_then(|a| rt.github_ask(&a.trigger));
            let submitted = (|| {
                let mut c = loop_protocol::Contract::from_yaml(&contract, "the drafted contract")
                    .map_err(|e| loop_runtime::Error::usage(e.to_string()))?;
                c.instruction = instruction;
                // The project's checks are added again as guards, as for
                // any contract a person gives.
                c.criteria
                    .retain(|k| !k.id.starts_with("stack-") && !k.id.starts_with("project-"));
                let mut observer = crate::drafts::DraftObserver::new(
                    drafts.clone(),
                    draft_id.clone(),
                    who.clone(),
                    None,
                );
                // A trigger's draft keeps what the trigger recorded, the
                // commit it was asked on, and (no drafting record being
                // made now) who confirmed it.
                let (trigger, base_commit, via) = match asked_on {
                    Some(mut a) => {
                        if let Some(g) = a.trigger.github.as_mut() {
                            g.confirmed_by = Some(who);
                        }
                        (Some(a.trigger), a.base_commit, loop_runtime::Via::Trigger)
                    }
                    None => (None, None, loop_runtime::Via::Http),
                };
                rt.submit(
                    loop_runtime::TaskRequest {
                        contract: loop_runtime::ContractInput::Given(Box::new(c)),
                        model,
                        isolation: loop_sandbox::IsolationLevel::Required,
                        on_prompt: Some(OnPrompt::Wait),
                        owner: Some(owner),
                        trigger,
                        base_commit,
                        via,
                        // Resolved and narrowed again, as they were.
                        skills,
                        ..Default::default()
                    },
                    &mut observer,
                )
            })();
            let github = ask
                .as_ref()
                .map(|g| (g, loop_runtime::DraftEnded::NotDrafted));
            draft_settled((&drafts, &draft_id), submitted, &metrics, &pool, github);
        });
    spawned.map(|_| ()).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot start draft {id}'s task: {e}"),
        )
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Answer {
    #[serde(default)]
    deny: bool,
    message: Option<String>,
    /// The question answered: when given, the answer counts only if this
    /// is the one still pending (a click never answers a newer question).
    approval_id: Option<String>,
}

/// `caller`'s answer to the question task `id` waits on; `via` says
/// through what it came (recorded with who gave it). The question as
/// answered, and the person's message.
pub(crate) async fn approve_task(
    s: &AppState,
    caller: Caller,
    id: String,
    answer: Answer,
    via: &'static str,
) -> Result<(loop_store::Approval, Option<String>), ApiError> {
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        let by = format!("{via} (owner {}, token {})", caller.owner, caller.token_id);
        // A question named that is no longer the one waiting (answered or
        // expired, even meanwhile) is the runtime's conflict: a 409.
        let a = match &answer.approval_id {
            Some(want) => {
                rt.answer_request(&id, want, !answer.deny, answer.message.as_deref(), &by)?
            }
            None => rt.answer_as(&id, !answer.deny, answer.message.as_deref(), &by)?,
        };
        Ok((a, answer.message))
    })
    .await
}

/// The task's receipt in this project's `.loop/receipts` (brought from a
/// shared store when the task ended elsewhere), once it has one. The path
/// the store records is never read: on a shared store it is another
/// machine's, and anything a store says is not trusted as a path here.
pub(crate) fn receipt_of(
    rt: &Runtime,
    t: &loop_runtime::TaskView,
) -> Result<std::path::PathBuf, ApiError> {
    if t.receipt.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_yet",
            "no receipt yet: the task has not ended",
        ));
    }
    rt.receipt_path(&t.id).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_here",
            format!(
                "task {}'s receipt is not in this project's .loop/receipts, and the store keeps none",
                t.id
            ),
        )
    })
}

/// Task `id`'s receipt checked offline, as `caller` may see it.
pub(crate) async fn receipt_check(
    s: &AppState,
    caller: Caller,
    id: String,
) -> Result<loop_runtime::ReceiptCheck, ApiError> {
    let rt = s.runtime.clone();
    blocking(move || {
        let t = visible(&rt, &caller, &id)?;
        let path = receipt_of(&rt, &t)?;
        Ok(loop_runtime::verify_receipt(&path, None, None)?)
    })
    .await
}

/// `text` with the project's absolute path taken out of it (paths inside
/// it said relative to the project): a response does not map the
/// server's disk.
pub(crate) fn project_relative(project: &std::path::Path, text: &str) -> String {
    let root = project.display().to_string();
    let mut text = text.replace(&format!("{root}/"), "").replace(&root, ".");
    // Task workspaces are outside the project, under the server's home.
    if let Ok(ws) = loop_runtime::workspaces_root() {
        let canonical = ws.canonicalize().unwrap_or_else(|_| ws.clone());
        for r in [canonical, ws] {
            let r = r.display().to_string();
            text = text.replace(&r, "<workspaces>");
        }
    }
    text
}

/// Task `id`'s change set `d` as the API and MCP say it: where it comes
/// from relative to the project (a workspace under `<workspaces>`).
pub(crate) fn diff_body<'a>(
    project: &std::path::Path,
    id: &'a str,
    d: &'a loop_runtime::Diff,
) -> loop_runtime::views::DiffBody<'a> {
    use loop_runtime::DiffSource;
    let relative = |p: &std::path::Path| {
        std::path::PathBuf::from(project_relative(project, &p.display().to_string()))
    };
    loop_runtime::views::DiffBody {
        id,
        source: match &d.source {
            DiffSource::Receipt(p) => DiffSource::Receipt(relative(p)),
            DiffSource::Workspace(p) => DiffSource::Workspace(relative(p)),
        },
        base_commit: &d.change_set.base_commit,
        files: &d.change_set.files,
        patch: &d.change_set.patch,
        patch_sha256: &d.change_set.patch_sha256,
    }
}

/// A note a person adds (the API's body, MCP's arguments).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewNote {
    text: String,
    #[serde(default)]
    about: Vec<String>,
}

/// Every skill the project can see, each judged.
pub(crate) async fn skills_list(s: &AppState) -> Result<Vec<loop_runtime::ListedSkill>, ApiError> {
    let rt = s.runtime.clone();
    crate::blocking(move || {
        let mut listed = loop_runtime::list_skills(rt.project())?;
        // Where the server keeps things on its disk is its business: the
        // project's paths are said relative to it, the user's skills as
        // such.
        let project = format!("{}/", rt.project().display());
        let user = format!("{}/", loop_runtime::skills_user_dir().display());
        for k in &mut listed {
            k.state = k.state.replace(&project, "").replace(&user, "your skills/");
        }
        Ok(listed)
    })
    .await
}

/// The project's memory notes `caller` may see: an admin's, all; any
/// other's, their own and the project's.
pub(crate) async fn memory_list(
    s: &AppState,
    caller: Caller,
) -> Result<Vec<loop_store::Note>, ApiError> {
    let rt = s.runtime.clone();
    crate::blocking(move || {
        let owner = (caller.scope != Scope::Admin).then_some(caller.owner.as_str());
        Ok(loop_runtime::list_notes(rt.project(), false, owner)?)
    })
    .await
}

/// A note of `caller`'s, usable at once.
pub(crate) async fn memory_add(
    s: &AppState,
    caller: Caller,
    new: NewNote,
) -> Result<loop_store::Note, ApiError> {
    let rt = s.runtime.clone();
    crate::blocking(move || {
        let by = format!("the API (owner {})", caller.owner);
        Ok(loop_runtime::add_note(
            rt.project(),
            &new.text,
            &new.about,
            Some(&caller.owner),
            &by,
        )?)
    })
    .await
}

/// Note `id`, if the caller may see it (their own or the project's; any
/// with `admin`): else not found.
pub(crate) async fn memory_show(
    s: &AppState,
    caller: Caller,
    id: String,
) -> Result<loop_store::Note, ApiError> {
    let rt = s.runtime.clone();
    crate::blocking(move || seen_note(rt.project(), &caller, &id)).await
}

/// Note `id` as `caller` may see it: one they may not see is not there
/// for them (404).
fn seen_note(
    project: &std::path::Path,
    caller: &Caller,
    id: &str,
) -> Result<loop_store::Note, ApiError> {
    let seen = (caller.scope != Scope::Admin).then_some(caller.owner.as_str());
    loop_runtime::show_note(project, id, seen).map_err(|e| match e.kind {
        loop_runtime::ErrorKind::NotFound => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", e.message)
        }
        _ => e.into(),
    })
}

/// Approve (or forget) note `id`: the caller's own, or any with `admin`.
pub(crate) async fn memory_settle(
    s: &AppState,
    caller: Caller,
    id: String,
    approve: bool,
) -> Result<loop_store::Note, ApiError> {
    let rt = s.runtime.clone();
    crate::blocking(move || {
        let admin = caller.scope == Scope::Admin;
        let n = seen_note(rt.project(), &caller, &id)?;
        if !admin && n.owner != caller.owner {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("note {id} is the project's: only an admin token may answer for it"),
            ));
        }
        let by = format!("the API (owner {})", caller.owner);
        let owner = Some(n.owner.as_str());
        Ok(if approve {
            loop_runtime::approve_note(rt.project(), &id, owner, &by)?
        } else {
            loop_runtime::forget_note(rt.project(), &id, owner, &by)?
        })
    })
    .await
}
