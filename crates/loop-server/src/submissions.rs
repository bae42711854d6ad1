//! A task asked for over the API is kept in the store before it is
//! answered, and prepared after: the answer is never waiting on the
//! pre-start checks, and a server that dies between the answer and the
//! task's preparation leaves the task it named to the next server, which
//! prepares it then (or keeps its refusal to be read). Once the task is in
//! the store its submission is forgotten.
//!
//! A submission is kept as the request came (its body, who asked, through
//! which front end) with the server process that holds it. The holder
//! renews its hold every [`RENEW`]; another server (the next one here, or
//! a peer sharing the store) takes a submission over only once its holder
//! is gone or its hold lapsed ([`HOLD`]), and only by a conditional write,
//! so two servers never both prepare it.

use crate::{ApiError, AppState, blocking};
use loop_runtime::OnPrompt;
use loop_runtime::{Caller, Scope, Via};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A new task: an instruction with its checks (or a contract in YAML).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTask {
    instruction: String,
    #[serde(default)]
    checks: Vec<String>,
    #[serde(default)]
    artifacts: Vec<String>,
    /// A contract in YAML (its instruction is replaced by `instruction`).
    contract: Option<String>,
    /// `openai:MODEL`, `anthropic:MODEL`, or `scripted:PATH` / `replay:PATH`
    /// with a path inside the project (default: the Loopfile's maker).
    model: Option<String>,
    max_steps: Option<u32>,
    max_tokens: Option<u64>,
    budget_usd: Option<f64>,
    timeout_secs: Option<u64>,
    /// Keep checks that pass on an empty workspace (refused otherwise),
    /// each marked `allow_vacuous` in the locked contract.
    #[serde(default)]
    allow_vacuous: bool,
    /// Files given with the task (a multipart upload's `input` parts, or
    /// given here): put in its workspace as `inputs/NAME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) inputs: Vec<GivenFile>,
    /// Skills the task uses (`GET /api/v1/skills` lists them): each
    /// verified and narrowed as `loop run --skill` does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    skills: Vec<String>,
}

/// A file given with a task over the API: its name and its content in
/// base64 (RFC 4648, with padding).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GivenFile {
    pub(crate) name: String,
    pub(crate) content_base64: String,
}

/// Files a task may be given over the API, and what they may add up to
/// (a multipart upload's body is bounded a little above it).
pub(crate) const MAX_API_INPUTS: usize = 16;
pub(crate) const MAX_API_INPUT_BYTES: usize = 16 * 1024 * 1024;

impl GivenFile {
    pub(crate) fn new(name: String, bytes: &[u8]) -> GivenFile {
        use base64::Engine;
        GivenFile {
            name,
            content_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// The files `given`, decoded, or a 400 naming the first that cannot be
/// given over the API (too many, too large together, not base64).
pub(crate) fn given_inputs(given: &[GivenFile]) -> Result<Vec<loop_runtime::InputFile>, ApiError> {
    use base64::Engine;
    if given.len() > MAX_API_INPUTS {
        return Err(ApiError::bad_request(format!(
            "{} input files: a task takes at most {MAX_API_INPUTS} over the API",
            given.len()
        )));
    }
    let mut total = 0usize;
    let mut out = Vec::new();
    for f in given {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(f.content_base64.as_bytes())
            .map_err(|e| {
                ApiError::bad_request(format!("input file {:?}: not base64: {e}", f.name))
            })?;
        total += bytes.len();
        if total > MAX_API_INPUT_BYTES {
            return Err(ApiError::bad_request(format!(
                "the input files add up to more than {MAX_API_INPUT_BYTES} bytes: a task takes at most that over the API"
            )));
        }
        out.push(loop_runtime::InputFile {
            name: f.name.clone(),
            bytes,
        });
    }
    Ok(out)
}

impl NewTask {
    /// The runtime's request for `caller`, through `via`: nobody at a
    /// terminal to ask (approvals wait for an answer), the sandbox's full
    /// isolation, the project's committed files only.
    pub(crate) fn request(
        self,
        caller: &Caller,
        via: loop_runtime::Via,
    ) -> loop_runtime::TaskRequest {
        loop_runtime::TaskRequest {
            instruction: Some(self.instruction),
            contract: match self.contract {
                Some(text) => loop_runtime::ContractInput::Yaml {
                    text,
                    origin: "contract".into(),
                },
                None => loop_runtime::ContractInput::None,
            },
            checks: self.checks,
            artifacts: self.artifacts,
            limits: loop_runtime::LimitOverrides {
                max_steps: self.max_steps,
                max_tokens: self.max_tokens,
                budget_usd: self.budget_usd,
                timeout_secs: self.timeout_secs,
            },
            model: self.model,
            isolation: loop_sandbox::IsolationLevel::Required,
            on_prompt: Some(OnPrompt::Wait),
            allow_vacuous: self.allow_vacuous,
            owner: Some(caller.owner.clone()),
            via,
            // Checked when the request came (`given_inputs`): a kept
            // submission's files decode as they did then.
            inputs: given_inputs(&self.inputs).unwrap_or_default(),
            skills: self.skills,
            ..Default::default()
        }
    }
}

/// How long a submission kept before holds were renewed (no holder named
/// in the store) is left to the server that answered it.
const LEGACY_HOLD: Duration = Duration::from_secs(600);

/// How long a kept submission's hold lasts unless its holder renews it
/// (a holder on another machine, or in another container, cannot be seen
/// to be gone: its lapsed hold says so).
const HOLD: Duration = Duration::from_secs(180);

/// How often a server renews its holds and looks for submissions to take
/// over.
const RENEW: Duration = Duration::from_secs(30);

/// A submission as the store keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    /// The request's body.
    task: NewTask,
    /// The token it came with (its public id).
    token_id: String,
    /// `http` or `mcp`.
    via: String,
    /// The server process that answered it and prepares it.
    holder: loop_store::Owner,
    /// Its preparation failed (or a person cancelled it): the status, kind
    /// and message the request would have been answered with.
    #[serde(default)]
    refused: Option<(u16, String, String)>,
}

fn via_name(via: Via) -> &'static str {
    match via {
        Via::Mcp => "mcp",
        _ => "http",
    }
}

/// Submission `id` as kept, held by server `s` (a JSON body).
fn kept_body(
    s: &AppState,
    id: &str,
    caller: &Caller,
    via: Via,
    task: &NewTask,
) -> Result<serde_json::Value, ApiError> {
    let kept = Kept {
        task: task.clone(),
        token_id: caller.token_id.clone(),
        via: via_name(via).to_string(),
        holder: loop_store::Owner::this_process(
            me(s),
            loop_core::Clock::now_ms(&loop_core::SystemClock),
        ),
        refused: None,
    };
    serde_json::to_value(&kept).map_err(|e| {
        ApiError::from(loop_runtime::Error::internal(format!(
            "task {id}: its request cannot be kept: {e}"
        )))
    })
}

/// Server `s`'s name, as the store names a holder.
fn me(s: &AppState) -> String {
    s.prestart.holder.clone()
}

/// Keep submission `id` (a blocking call).
fn keep(s: &AppState, id: &str, caller: &Caller, via: Via, task: &NewTask) -> Result<(), ApiError> {
    let body = kept_body(s, id, caller, via, task)?;
    Ok(s.runtime
        .keep_submission(id, &caller.owner, &body, &me(s))?)
}

/// A new task's id for `caller`, drawn again while it names a task this
/// server is making, the store holds, or another server keeps (ids drawn
/// in the same second share all but 24 random bits); reserved here until
/// its task is stored. An owner with [`crate::prestart::WAITING_PER_OWNER`]
/// tasks waiting for their preparation is answered 429.
pub(crate) async fn new_id(s: &AppState, caller: &Caller) -> Result<String, ApiError> {
    use crate::prestart::Reserved;
    for _ in 0..8 {
        let id = s.runtime.new_task_id()?;
        match s.prestart.reserve(&id, &caller.owner) {
            Reserved::Yes => {}
            Reserved::Taken => continue,
            Reserved::Full => {
                return Err(ApiError::new(
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!(
                        "{} tasks of {} wait for their preparation already; ask again once some have started",
                        crate::prestart::WAITING_PER_OWNER,
                        caller.owner
                    ),
                ));
            }
        }
        let (rt, tid) = (s.runtime.clone(), id.clone());
        let free =
            blocking(move || Ok(rt.task(&tid).is_err() && rt.kept_submission(&tid)?.is_none()))
                .await;
        match free {
            Ok(true) => return Ok(id),
            Ok(false) => s.prestart.stored(&id),
            Err(e) => {
                s.prestart.stored(&id);
                return Err(e);
            }
        }
    }
    Err(ApiError::from(loop_runtime::Error::internal(
        "no free task id after 8 draws",
    )))
}

/// Keep `id` for `caller`, then prepare it when a place frees; `tx` hears
/// how the preparation went. Answered (by the caller) once this returns.
/// Kept and handed to its preparation on a task of its own: a request
/// dropped meanwhile (its client gone, its time up) leaves neither a kept
/// submission nobody prepares nor a place counted for ever.
pub(crate) async fn take(
    s: &AppState,
    id: &str,
    caller: &Caller,
    via: Via,
    task: NewTask,
    admitted: loop_runtime::Admitted,
) -> Result<tokio::sync::oneshot::Receiver<Result<String, ApiError>>, ApiError> {
    let (st, tid, who) = (s.clone(), id.to_string(), caller.clone());
    let kept = tokio::spawn(async move {
        let (st2, tid2, who2) = (st.clone(), tid.clone(), who.clone());
        if let Err(e) = blocking(move || keep(&st2, &tid2, &who2, via, &task)).await {
            // Not kept: no task was made (the id is free again).
            st.prestart.stored(&tid);
            return Err(e);
        }
        Ok(prepare(&st, &tid, &who.owner, admitted, true))
    });
    kept.await.map_err(|e| {
        ApiError::from(loop_runtime::Error::internal(format!(
            "task {id}: its request was not kept: {e}"
        )))
    })?
}

/// Prepare kept submission `id` of `owner` when one of the `--jobs` places
/// frees (`entered`: it is in [`crate::prestart::Prestart`] already); the
/// store then holds the task and the submission is forgotten, or the
/// refusal is kept with it. A submission cancelled while it waited, or
/// taken over meanwhile by another server, is not prepared here.
fn prepare(
    s: &AppState,
    id: &str,
    owner: &str,
    admitted: loop_runtime::Admitted,
    entered: bool,
) -> tokio::sync::oneshot::Receiver<Result<String, ApiError>> {
    if !entered {
        s.prestart.queued(id, owner);
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (st, task_id) = (s.clone(), id.to_string());
    tokio::spawn(async move {
        let permit = st.prestart.gate.acquire().await;
        if let Some(stop) = still_ours(&st, &task_id).await {
            let _ = tx.send(Err(stop));
            return;
        }
        let (rt, tid) = (st.runtime.clone(), task_id.clone());
        // Once stored, the submission has done its work: [`tend`] forgets
        // it with the others (a write each would queue behind every
        // task's ledger for the store's one write lock).
        let r = in_background(&task_id, move || {
            Ok(rt.submit_admitted_as(&tid, admitted, &mut loop_runtime::Quiet)?)
        })
        .await;
        // Its preparation is over (stored, or refused) before its place is
        // another's: its status never says `preparing` beside the next's.
        match &r {
            Ok(_) => {
                let cancel = st.prestart.take_stored(&task_id);
                drop(permit);
                started(&st, &task_id, cancel).await;
            }
            Err(e) => {
                st.prestart.refused(&task_id, e);
                drop(permit);
                settle(&st, &task_id, e).await;
            }
        }
        let _ = tx.send(r);
    });
    rx
}

/// Whether submission `id`, whose turn came, is still to be prepared here:
/// `None` if so (it is marked as being prepared), or why not.
async fn still_ours(s: &AppState, id: &str) -> Option<ApiError> {
    if !s.prestart.preparing(id) {
        return Some(
            s.prestart
                .state(id, None)
                .and_then(|st| match st {
                    crate::prestart::State::Refused(status, kind, message) => Some(ApiError::new(
                        axum::http::StatusCode::from_u16(status)
                            .unwrap_or(axum::http::StatusCode::CONFLICT),
                        crate::prestart::kind_name(&kind),
                        message,
                    )),
                    _ => None,
                })
                .unwrap_or_else(|| {
                    ApiError::from(loop_runtime::Error::conflict(format!(
                        "task {id} was cancelled before its preparation"
                    )))
                }),
        );
    }
    let (rt, tid) = (s.runtime.clone(), id.to_string());
    let row = blocking(move || Ok(rt.kept_submission(&tid)?)).await;
    let holder = row.map(|r| {
        r.map(|r| {
            // Refused or cancelled through another server meanwhile: said
            // here as it is there.
            let refused = serde_json::from_str::<Kept>(&r.body)
                .ok()
                .and_then(|k| k.refused);
            if let Some((status, kind, message)) = refused {
                s.prestart
                    .kept_refusal(id, &r.owner, status, kind, message, Duration::ZERO);
            }
            r.holder
        })
    });
    match holder {
        Ok(Some(h)) if h == me(s) => None,
        // Unknown (the store did not answer): prepared here, as answered.
        Err(_) => None,
        Ok(_) => {
            // Another server took it over (this one stalled past its
            // hold), or a person cancelled it there, or it is gone: not
            // prepared here.
            if !matches!(
                s.prestart.state(id, None),
                Some(crate::prestart::State::Refused(..))
            ) {
                s.prestart.stored(id);
            }
            Some(ApiError::from(loop_runtime::Error::conflict(format!(
                "task {id} is prepared by another server"
            ))))
        }
    }
}

/// Task `id` is stored: it starts, or is cancelled at once if a person
/// cancelled it while it was being prepared (`cancel`, here; or through
/// another server, which says so in the store).
async fn started(s: &AppState, id: &str, mut cancel: bool) {
    s.metrics.tasks_started.fetch_add(1, Ordering::Relaxed);
    if !cancel {
        let (rt, tid) = (s.runtime.clone(), id.to_string());
        cancel = blocking(move || {
            let r = rt.kept_submission(&tid)?;
            Ok(r.and_then(|r| serde_json::from_str::<Kept>(&r.body).ok())
                .and_then(|k| k.refused)
                .is_some_and(|(_, kind, _)| kind == crate::prestart::CANCELLED))
        })
        .await
        .unwrap_or(false);
    }
    if !cancel {
        s.pool.start(id.to_string(), None);
        return;
    }
    let (rt, tid) = (s.runtime.clone(), id.to_string());
    let cancelled =
        blocking(move || Ok(rt.cancel(&tid, Duration::from_secs(10), &mut loop_runtime::Quiet)?))
            .await;
    if let Err(e) = cancelled {
        tracing::warn!(
            "task {id}: cancelled while prepared, not ended: {}",
            e.message
        );
    }
}

/// Keep why submission `id` was refused (or cancelled) beside it, held by
/// nobody now: whether it was written (if not, [`tend`] tries again).
async fn settle(s: &AppState, id: &str, e: &ApiError) -> bool {
    let (st, tid, e) = (s.clone(), id.to_string(), e.clone());
    blocking(move || Ok(keep_refusal(&st, &tid, &e)))
        .await
        .unwrap_or(false)
}

/// The refusal a cancel before the preparation leaves.
fn cancelled(id: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::CONFLICT,
        crate::prestart::CANCELLED,
        format!("task {id} was cancelled before its preparation"),
    )
}

/// A person (`caller`) cancels task `id` before the store holds it: `None`
/// when it is not waiting for its preparation (here or, kept in the store,
/// at another server); otherwise what the cancel answers (`result`,
/// `outcome`).
pub(crate) async fn cancel(
    s: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<(&'static str, String)>, ApiError> {
    use crate::prestart::Cancel;
    let owner = (caller.scope != Scope::Admin).then_some(caller.owner.as_str());
    if s.prestart.state(id, owner).is_none() {
        return cancel_elsewhere(s, caller, id).await;
    }
    Ok(match s.prestart.cancel(id) {
        Cancel::Absent => None,
        Cancel::Now => {
            // Written conditionally, retried by `tend` if the store did
            // not take it (the task is not prepared here meanwhile).
            settle(s, id, &cancelled(id)).await;
            Some(("ended_here", "cancelled".into()))
        }
        Cancel::OnceStored => Some(("stopped", String::new())),
        Cancel::Settled => Some(("already_ended", String::new())),
    })
}

/// [`cancel`] of a submission another server keeps: its refusal is written
/// in the store (by one conditional write), so its holder never prepares
/// it, or cancels it the moment it is stored.
async fn cancel_elsewhere(
    s: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<(&'static str, String)>, ApiError> {
    let (st, who, tid) = (s.clone(), caller.clone(), id.to_string());
    let done = blocking(move || {
        for _ in 0..5 {
            let Some(r) = st.runtime.kept_submission(&tid)? else {
                return Ok(None);
            };
            // Stored already (its submission not yet forgotten): the
            // task's own cancel.
            if st.runtime.task(&tid).is_ok() {
                return Ok(None);
            }
            if who.scope != Scope::Admin && r.owner != who.owner {
                return Ok(None);
            }
            let Ok(mut k) = serde_json::from_str::<Kept>(&r.body) else {
                return Ok(None);
            };
            if k.refused.is_some() {
                return Ok(Some(("already_ended", String::new(), r.owner)));
            }
            let e = cancelled(&tid);
            k.refused = Some((e.status.as_u16(), e.kind.to_string(), e.message));
            let body = serde_json::to_value(&k)
                .map_err(|x| loop_runtime::Error::internal(x.to_string()))?;
            if st
                .runtime
                .claim_submission(&tid, (&r.holder, r.updated_ms), "", &body)?
            {
                return Ok(Some(("ended_here", "cancelled".to_string(), r.owner)));
            }
        }
        Err(ApiError::from(loop_runtime::Error::conflict(format!(
            "task {tid} changed while it was being cancelled; ask again"
        ))))
    })
    .await?;
    Ok(done.map(|(result, outcome, owner)| {
        let e = cancelled(id);
        s.prestart.kept_refusal(
            id,
            &owner,
            e.status.as_u16(),
            e.kind.to_string(),
            e.message,
            Duration::ZERO,
        );
        (result, outcome)
    }))
}

/// Run `f` (task `id`'s preparation) on a thread of its own at the
/// priority of a task's work ([`crate::pool::as_background_work`]), never
/// on the pool that answers requests. A preparation that panics is
/// answered as the internal error it is.
async fn in_background<T: Send + 'static>(
    id: &str,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("prepare {id}"))
        .spawn(move || {
            crate::pool::as_background_work();
            let _ = tx.send(f());
        });
    let failed = |e: String| {
        ApiError::from(loop_runtime::Error::internal(format!(
            "task {id}: its preparation could not run: {e}"
        )))
    };
    spawned.map_err(|e| failed(e.to_string()))?;
    rx.await
        .map_err(|_| failed("it stopped with a panic (the server's log says where)".into()))?
}

/// Keep why submission `id` was refused beside it, held by nobody (a
/// blocking call): written only while this server holds it (one
/// conditional write, tried again if the hold was renewed between), so a
/// submission another server took over is never overwritten. Whether it
/// was written (or there was nothing to write).
fn keep_refusal(s: &AppState, id: &str, e: &ApiError) -> bool {
    for _ in 0..5 {
        let r = match s.runtime.kept_submission(id) {
            Ok(Some(r)) => r,
            Ok(None) => return true,
            Err(err) => {
                tracing::warn!("task {id}: its refusal is not kept: {err}");
                return false;
            }
        };
        if r.holder != me(s) {
            return true;
        }
        let Ok(mut kept) = serde_json::from_str::<Kept>(&r.body) else {
            return true;
        };
        kept.refused = Some((e.status.as_u16(), e.kind.to_string(), e.message.clone()));
        let written = serde_json::to_value(&kept)
            .map_err(|x| loop_runtime::Error::internal(x.to_string()))
            .and_then(|body| {
                s.runtime
                    .claim_submission(id, (&r.holder, r.updated_ms), "", &body)
            });
        match written {
            Ok(true) => return true,
            Ok(false) => continue,
            Err(err) => {
                tracing::warn!("task {id}: its refusal is not kept: {err}");
                return false;
            }
        }
    }
    false
}

/// How often the kept submissions whose tasks are stored are forgotten.
const SWEEP: Duration = Duration::from_secs(2);

/// Look after the kept submissions while the server runs: forget, every
/// [`SWEEP`] while tasks are being made, those whose tasks the store holds
/// now (one write for all); every [`RENEW`], renew this server's holds
/// (one write) and take over those whose holder is gone.
pub(crate) async fn tend(s: AppState) {
    let mut made = s.metrics.tasks_started.load(Ordering::Relaxed);
    let mut renewed = std::time::Instant::now();
    loop {
        tokio::time::sleep(SWEEP).await;
        let now = s.metrics.tasks_started.load(Ordering::Relaxed);
        if now != made {
            made = now;
            let rt = s.runtime.clone();
            if let Err(e) = blocking(move || Ok(rt.forget_stored_submissions()?)).await {
                tracing::warn!("kept submissions not forgotten: {}", e.message);
            }
        }
        if renewed.elapsed() < RENEW {
            continue;
        }
        renewed = std::time::Instant::now();
        let (rt, holder) = (s.runtime.clone(), me(&s));
        if let Err(e) = blocking(move || Ok(rt.renew_submissions(&holder)?)).await {
            tracing::warn!("kept submissions not renewed: {}", e.message);
        }
        let found = restore(&s).await;
        if found.prepared > 0 {
            tracing::info!(
                "took over {} task(s) answered by a server that is gone",
                found.prepared
            );
        }
    }
}

/// What [`restore`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Submissions taken up again: being prepared here now.
    pub(crate) prepared: usize,
    /// Refusals kept to be read.
    pub(crate) refused: usize,
}

/// A kept submission as [`restore`] reads it.
struct Open {
    record: loop_store::DraftRecord,
    kept: Result<Kept, serde_json::Error>,
}

/// Take up what a server that is gone answered and did not prepare: each
/// kept submission whose holder is gone (or whose hold lapsed) is taken
/// over and prepared here (its request taken in again); a refusal is
/// readable for an hour; one whose task is stored is forgotten.
pub(crate) async fn restore(s: &AppState) -> Restored {
    let st = s.clone();
    let found = blocking(move || {
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let records = st
            .runtime
            .kept_submissions(now.saturating_sub(7 * 24 * 3600 * 1000))?;
        let mut open = Vec::new();
        for r in records {
            if st.runtime.task(&r.id).is_ok() {
                let _ = st.runtime.forget_submission(&r.id);
                continue;
            }
            let kept = serde_json::from_str::<Kept>(&r.body);
            open.push(Open { record: r, kept });
        }
        Ok(open)
    })
    .await;
    let open = match found {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("kept submissions cannot be read: {}", e.message);
            return Restored::default();
        }
    };
    let mut restored = Restored::default();
    for o in open {
        match take_up(s, o).await {
            TakenUp::Prepared => restored.prepared += 1,
            TakenUp::Refused => restored.refused += 1,
            TakenUp::Left => {}
        }
    }
    restored
}

/// What [`take_up`] did with one kept submission.
enum TakenUp {
    Prepared,
    Refused,
    Left,
}

/// Take up one kept submission (see [`restore`]).
async fn take_up(s: &AppState, o: Open) -> TakenUp {
    let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
    let Open { record: r, kept } = o;
    let known = s.prestart.state(&r.id, None).is_some();
    let k = match kept {
        Ok(k) => k,
        Err(why) => {
            // Shown as the refusal it is, not lost without a word.
            if !known {
                tracing::warn!("task {}: its kept submission cannot be read: {why}", r.id);
                s.prestart.kept_refusal(
                    &r.id,
                    &r.owner,
                    500,
                    "internal".into(),
                    format!("task {}: its kept request cannot be read: {why}", r.id),
                    Duration::ZERO,
                );
            }
            return TakenUp::Refused;
        }
    };
    if let Some((status, kind, message)) = k.refused {
        let age = Duration::from_millis(now.saturating_sub(r.updated_ms));
        if age > crate::prestart::REFUSAL_KEPT {
            let (rt, tid) = (s.runtime.clone(), r.id.clone());
            let _ = blocking(move || Ok(rt.forget_submission(&tid)?)).await;
            return TakenUp::Left;
        }
        if !known {
            s.prestart
                .kept_refusal(&r.id, &r.owner, status, kind, message, age);
        }
        return TakenUp::Refused;
    }
    if known {
        // Refused or cancelled here, and not yet said so in the store (the
        // write did not go through): said again.
        if let Some(crate::prestart::State::Refused(status, kind, message)) =
            s.prestart.state(&r.id, None)
            && r.holder == me(s)
        {
            let e = ApiError::new(
                axum::http::StatusCode::from_u16(status)
                    .unwrap_or(axum::http::StatusCode::BAD_REQUEST),
                crate::prestart::kind_name(&kind),
                message,
            );
            settle(s, &r.id, &e).await;
        }
        return TakenUp::Left;
    }
    // Another server's, still held: left to it. A record from before holds
    // were renewed (no holder named) keeps its holder's first lease.
    let h = &k.holder;
    let lapsed = if r.holder.is_empty() {
        h.expired(LEGACY_HOLD.as_millis() as u64, now)
    } else {
        now.saturating_sub(r.updated_ms) > HOLD.as_millis() as u64
    };
    if r.holder != me(s) && !h.is_dead() && !lapsed {
        return TakenUp::Left;
    }
    // Gone, lapsed, or held by this server but taken up by nobody here (a
    // takeover that failed half-way): prepared here.
    if redrive(s, &r.id, r.owner, (&r.holder, r.updated_ms), k).await {
        TakenUp::Prepared
    } else {
        TakenUp::Left
    }
}

/// Take kept submission `id` over from `holder` (its holder and when it
/// was last written, as read) and prepare it here: `false` when another
/// server took it first, or it was renewed since. A request whose token
/// was revoked since is refused, not prepared.
async fn redrive(s: &AppState, id: &str, owner: String, holder: (&str, u64), k: Kept) -> bool {
    let caller = Caller {
        owner,
        scope: Scope::Run,
        token_id: k.token_id.clone(),
    };
    let via = if k.via == "mcp" { Via::Mcp } else { Via::Http };
    let (rt, request) = (s.runtime.clone(), k.task.clone().request(&caller, via));
    let (st, tid, who, task, from) = (
        s.clone(),
        id.to_string(),
        caller.clone(),
        k.task,
        (holder.0.to_string(), holder.1),
    );
    let claimed = blocking(move || {
        let body = kept_body(&st, &tid, &who, via, &task)?;
        if !st
            .runtime
            .claim_submission(&tid, (&from.0, from.1), &me(&st), &body)?
        {
            return Ok(None);
        }
        // Held by this server from now on: asked again as it was.
        let live = st
            .runtime
            .tokens()?
            .into_iter()
            .any(|t| t.id == who.token_id && t.revoked_ms.is_none());
        if !live {
            return Ok(Some(Err(ApiError::unauthorized(&format!(
                "task {tid}: the token it was asked for with (id {}) was revoked before its preparation",
                who.token_id
            )))));
        }
        Ok(Some(rt.admit(request).map_err(ApiError::from)))
    })
    .await;
    let admitted = match claimed {
        Ok(None) => return false,
        Ok(Some(a)) => a,
        // The store did not answer: left as it is, for the next round.
        Err(e) => {
            tracing::warn!("task {id}: its kept submission not taken up: {}", e.message);
            return false;
        }
    };
    s.prestart.queued(id, &caller.owner);
    match admitted {
        Ok(a) => drop(prepare(s, id, &caller.owner, a, true)),
        Err(e) => {
            s.prestart.refused(id, &e);
            settle(s, id, &e).await;
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, clippy::unwrap_used)] // tests make and read their own fixtures
mod tests {
    use super::*;
    use loop_runtime::Runtime;

    const SCRIPT: &str = "turns:
  - calls:
      - {tool: write_file, args: {path: hello.txt, content: \"hello\\n\"}}
  - calls:
      - {tool: finish, args: {summary: done}}
";

    /// A server takes over only the submissions no live server holds (one
    /// whose holder died here, or whose hold lapsed), each by a
    /// conditional write: two servers looking at once prepare each one
    /// once. A request whose token was revoked meanwhile is refused, not
    /// prepared.
    #[test]
    fn a_submission_is_taken_over_once_and_only_from_a_holder_that_is_gone() {
        let dir = std::env::temp_dir().join(format!("loop-submissions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("script.yaml"), SCRIPT).unwrap();
        let rt = Runtime::open(&dir).unwrap();
        let live = rt.create_token("alice", Scope::Run).unwrap().record.id;
        let revoked = rt.create_token("alice", Scope::Run).unwrap().record.id;
        assert!(rt.revoke_token(&revoked).unwrap());
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let live_here = loop_store::Owner::this_process("another-server".into(), now);
        let dead_here = loop_store::Owner {
            token: "gone".into(),
            pid: u32::MAX - 1,
            start_time: 1,
            ..live_here.clone()
        };
        let elsewhere = |token: &str| loop_store::Owner {
            token: token.into(),
            host: "another-machine".into(),
            ..live_here.clone()
        };
        let task: NewTask = serde_json::from_value(serde_json::json!({
            "instruction": "write hello",
            "checks": ["grep -q hello hello.txt"],
            "model": "scripted:script.yaml",
        }))
        .unwrap();
        let keep_as = |id: &str, holder: loop_store::Owner, column: &str, token_id: &str| {
            let kept = Kept {
                task: task.clone(),
                token_id: token_id.into(),
                via: "http".into(),
                holder: holder.clone(),
                refused: None,
            };
            let body = serde_json::to_value(&kept).unwrap();
            rt.keep_submission(id, "alice", &body, column).unwrap();
        };
        let keep = |id: &str, holder: loop_store::Owner, token_id: &str| {
            keep_as(id, holder.clone(), &holder.token, token_id)
        };
        let mut ids: Vec<String> = (0..8).map(|_| rt.new_task_id().unwrap()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 8, "{ids:?}");
        let [
            s_live,
            s_far,
            s_lapsed,
            s_dead,
            s_revoked,
            s_orphan,
            s_old,
            s_young,
        ] = [0, 1, 2, 3, 4, 5, 6, 7].map(|n| ids[n].as_str());
        let (a, b) = (
            AppState::new(rt.clone(), 1000, 2),
            AppState::new(Runtime::open(&dir).unwrap(), 1000, 2),
        );
        // Held by server `a` itself, which lost track of it (a takeover
        // that failed half-way): `a` takes it up again.
        keep(
            s_orphan,
            loop_store::Owner::this_process(me(&a), now),
            &live,
        );
        // Kept before holds were renewed (no holder in the store): its
        // holder's first lease decides.
        let old = loop_store::Owner {
            heartbeat_ms: now - LEGACY_HOLD.as_millis() as u64 - 60_000,
            ..elsewhere("old")
        };
        keep_as(s_old, old, "", &live);
        keep_as(s_young, elsewhere("young"), "", &live);
        keep(s_live, live_here.clone(), &live);
        keep(s_far, elsewhere("far"), &live);
        keep(s_lapsed, elsewhere("lapsed"), &live);
        keep(s_dead, dead_here, &live);
        keep(s_revoked, elsewhere("lapsed-too"), &revoked);
        // Their holders last renewed their holds long ago.
        let store = loop_runtime::open_store(rt.project()).unwrap();
        let long_ago = now - HOLD.as_millis() as u64 - 60_000;
        for holder in ["lapsed", "lapsed-too"] {
            store
                .renew_kept(loop_store::Kept::Submissions, holder, long_ago)
                .unwrap();
        }
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (ra, rb) = tokio.block_on(async { tokio::join!(restore(&a), restore(&b)) });
        assert_eq!(
            ra.prepared + rb.prepared,
            5,
            "taken over once each (lapsed, dead, revoked, orphan, old): {ra:?} {rb:?}"
        );
        let holder = |id: &str| rt.kept_submission(id).unwrap().map(|r| r.holder);
        assert_eq!(holder(s_live).as_deref(), Some("another-server"));
        assert_eq!(holder(s_far).as_deref(), Some("far"));
        assert_eq!(holder(s_young).as_deref(), Some(""));
        // Taken over and prepared: stored, then forgotten.
        for id in [s_lapsed, s_dead, s_orphan, s_old] {
            let t0 = std::time::Instant::now();
            while rt.task(id).is_err() {
                let seen = (a.prestart.state(id, None), b.prestart.state(id, None));
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "{id} never stored: {seen:?}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The revoked token's: refused with the reason, held by nobody.
        let refused = |s: &AppState| s.prestart.state(s_revoked, None);
        let t0 = std::time::Instant::now();
        let state = loop {
            if let Some(st @ crate::prestart::State::Refused(..)) = refused(&a).or(refused(&b)) {
                break st;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "never refused");
            std::thread::sleep(Duration::from_millis(20));
        };
        let crate::prestart::State::Refused(status, _, message) = state else {
            unreachable!()
        };
        assert_eq!(status, 401, "{message}");
        assert!(message.contains("was revoked"), "{message}");
        let t0 = std::time::Instant::now();
        while holder(s_revoked).as_deref() != Some("") {
            assert!(t0.elapsed() < Duration::from_secs(30), "refusal never kept");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(rt.task(s_revoked).is_err(), "never prepared");
        // Nothing more to take: a second look leaves everything.
        let again = tokio.block_on(restore(&a));
        assert_eq!(again.prepared, 0, "{again:?}");
        drop(tokio);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
