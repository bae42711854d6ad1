//! A task asked for over the API is kept in the store before it is
//! answered, and prepared after: the answer is never waiting on the
//! pre-start checks, and a server that dies between the answer and the
//! task's preparation leaves the task it named to the next server, which
//! prepares it then (or keeps its refusal to be read). Once the task is in
//! the store its submission is forgotten.
//!
//! A submission is kept as the request came (its body, who asked, through
//! which front end) with the server process that holds it; the next server
//! takes up only those whose holder is gone.

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
            ..Default::default()
        }
    }
}

/// How long a kept submission whose holder is another machine's server
/// is left to it (a preparation waits for a place, then takes seconds).
const HOLD: Duration = Duration::from_secs(600);

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
    /// Its preparation failed: the status, kind and message the request
    /// would have been answered with.
    #[serde(default)]
    refused: Option<(u16, String, String)>,
}

fn via_name(via: Via) -> &'static str {
    match via {
        Via::Mcp => "mcp",
        _ => "http",
    }
}

/// Keep submission `id` (a blocking call).
fn keep(s: &AppState, id: &str, caller: &Caller, via: Via, task: &NewTask) -> Result<(), ApiError> {
    let kept = Kept {
        task: task.clone(),
        token_id: caller.token_id.clone(),
        via: via_name(via).to_string(),
        holder: crate::drafts::this_server(),
        refused: None,
    };
    let body = serde_json::to_value(&kept).map_err(|e| {
        ApiError::from(loop_runtime::Error::internal(format!(
            "task {id}: its request cannot be kept: {e}"
        )))
    })?;
    Ok(s.runtime.keep_submission(id, &caller.owner, &body)?)
}

/// A new task's id for `caller`, drawn again while it names a task this
/// server is making or the store holds (ids drawn in the same second share
/// all but 24 random bits); reserved here until its task is stored.
pub(crate) async fn new_id(s: &AppState, caller: &Caller) -> Result<String, ApiError> {
    for _ in 0..8 {
        let id = s.runtime.new_task_id()?;
        if !s.prestart.reserve(&id, &caller.owner) {
            continue;
        }
        let (rt, tid) = (s.runtime.clone(), id.clone());
        if blocking(move || Ok(rt.task(&tid).is_err())).await? {
            return Ok(id);
        }
        s.prestart.stored(&id);
    }
    Err(ApiError::from(loop_runtime::Error::internal(
        "no free task id after 8 draws",
    )))
}

/// Keep `id` for `caller`, then prepare it when a place frees; `tx` hears
/// how the preparation went. Answered (by the caller) once this returns.
pub(crate) async fn take(
    s: &AppState,
    id: &str,
    caller: &Caller,
    via: Via,
    task: NewTask,
    admitted: loop_runtime::Admitted,
) -> Result<tokio::sync::oneshot::Receiver<Result<String, ApiError>>, ApiError> {
    let (st, tid, who, t) = (s.clone(), id.to_string(), caller.clone(), task);
    if let Err(e) = blocking(move || keep(&st, &tid, &who, via, &t)).await {
        // Not kept: no task was made (the id is free again).
        s.prestart.stored(id);
        return Err(e);
    }
    Ok(prepare(s, id, &caller.owner, admitted))
}

/// Prepare kept submission `id` of `owner` when one of the `--jobs` places
/// frees; the store then holds the task and the submission is forgotten, or
/// the refusal is kept with it.
fn prepare(
    s: &AppState,
    id: &str,
    owner: &str,
    admitted: loop_runtime::Admitted,
) -> tokio::sync::oneshot::Receiver<Result<String, ApiError>> {
    s.prestart.queued(id, owner);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (st, task_id) = (s.clone(), id.to_string());
    tokio::spawn(async move {
        let permit = st.prestart.gate.acquire().await;
        st.prestart.preparing(&task_id);
        let (rt, tid) = (st.runtime.clone(), task_id.clone());
        // Once stored, the submission has done its work: [`sweep`]
        // forgets it with the others (a write each would queue behind
        // every task's ledger for the store's one write lock).
        let r = in_background(&task_id, move || {
            Ok(rt.submit_admitted_as(&tid, admitted, &mut loop_runtime::Quiet)?)
        })
        .await;
        drop(permit);
        let refusal = match &r {
            Ok(_) => {
                st.prestart.stored(&task_id);
                st.metrics.tasks_started.fetch_add(1, Ordering::Relaxed);
                st.pool.start(task_id.clone(), None);
                None
            }
            Err(e) => {
                st.prestart.refused(&task_id, e);
                Some(e.clone())
            }
        };
        if let Some(e) = refusal {
            let (st, tid) = (st.clone(), task_id.clone());
            let _ = blocking(move || {
                keep_refusal(&st, &tid, &e);
                Ok(())
            })
            .await;
        }
        let _ = tx.send(r);
    });
    rx
}

/// Run `f` (task `id`'s preparation) on a thread of its own at the
/// priority of a task's work ([`crate::pool::as_background_work`]), never
/// on the pool that answers requests.
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
    rx.await.map_err(|e| failed(e.to_string()))?
}

/// Keep why submission `id` was refused beside it (a blocking call).
fn keep_refusal(s: &AppState, id: &str, e: &ApiError) {
    let Ok(records) = s.runtime.kept_submissions(0) else {
        return;
    };
    let Some(r) = records.into_iter().find(|r| r.id == id) else {
        return;
    };
    let Ok(mut kept) = serde_json::from_str::<Kept>(&r.body) else {
        return;
    };
    kept.refused = Some((e.status.as_u16(), e.kind.to_string(), e.message.clone()));
    let kept = serde_json::to_value(&kept);
    if let Err(err) = kept
        .map_err(|x| loop_runtime::Error::internal(x.to_string()))
        .and_then(|body| s.runtime.keep_submission(id, &r.owner, &body))
    {
        tracing::warn!("task {id}: its refusal is not kept: {err}");
    }
}

/// How often the kept submissions whose tasks are stored are forgotten.
const SWEEP: Duration = Duration::from_secs(2);

/// Forget, every [`SWEEP`] while tasks are being made, the kept
/// submissions whose tasks the store holds now: one write for all.
pub(crate) async fn sweep(s: AppState) {
    let mut made = s.metrics.tasks_started.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(SWEEP).await;
        let now = s.metrics.tasks_started.load(Ordering::Relaxed);
        if now == made {
            continue;
        }
        made = now;
        let rt = s.runtime.clone();
        if let Err(e) = blocking(move || Ok(rt.forget_stored_submissions()?)).await {
            tracing::warn!("kept submissions not forgotten: {}", e.message);
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

/// Take up what an earlier server answered and did not prepare: each kept
/// submission whose holder is gone is prepared here (its request taken in
/// again); a refusal is readable for an hour; one whose task is stored is
/// forgotten.
pub(crate) async fn restore(s: &AppState) -> Restored {
    let st = s.clone();
    let found = blocking(move || {
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let records = st
            .runtime
            .kept_submissions(now.saturating_sub(7 * 24 * 3600 * 1000))?;
        let mut open = Vec::new();
        for r in records {
            let Ok(k) = serde_json::from_str::<Kept>(&r.body) else {
                tracing::warn!("task {}: its kept submission cannot be read", r.id);
                continue;
            };
            if st.runtime.task(&r.id).is_ok() {
                let _ = st.runtime.forget_submission(&r.id);
                continue;
            }
            open.push((r.id, r.owner, r.updated_ms, k));
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
    let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
    let me = crate::drafts::this_server();
    for (id, owner, updated_ms, k) in open {
        if let Some((status, kind, message)) = k.refused {
            let age = Duration::from_millis(now.saturating_sub(updated_ms));
            if age > crate::prestart::REFUSAL_KEPT {
                let (rt, tid) = (s.runtime.clone(), id.clone());
                let _ = blocking(move || Ok(rt.forget_submission(&tid)?)).await;
            } else {
                s.prestart
                    .kept_refusal(&id, &owner, status, kind, message, age);
                restored.refused += 1;
            }
            continue;
        }
        // Another live server's, still being prepared there.
        let h = &k.holder;
        if h.token != me.token && !h.is_dead() && !h.expired(HOLD.as_millis() as u64, now) {
            continue;
        }
        redrive(s, &id, owner, k).await;
        restored.prepared += 1;
    }
    restored
}

/// Take kept submission `id` in again and prepare it here.
async fn redrive(s: &AppState, id: &str, owner: String, k: Kept) {
    let caller = Caller {
        owner,
        scope: Scope::Run,
        token_id: k.token_id.clone(),
    };
    let via = if k.via == "mcp" { Via::Mcp } else { Via::Http };
    let (rt, request) = (s.runtime.clone(), k.task.clone().request(&caller, via));
    let (st, tid, who, task) = (s.clone(), id.to_string(), caller.clone(), k.task);
    let admitted = blocking(move || {
        // Held by this server from now on.
        keep(&st, &tid, &who, via, &task)?;
        Ok(rt.admit(request)?)
    })
    .await;
    match admitted {
        Ok(a) => {
            drop(prepare(s, id, &caller.owner, a));
        }
        Err(e) => {
            s.prestart.queued(id, &caller.owner);
            s.prestart.refused(id, &e);
            let (st, tid) = (s.clone(), id.to_string());
            let _ = blocking(move || {
                keep_refusal(&st, &tid, &e);
                Ok(())
            })
            .await;
        }
    }
}
