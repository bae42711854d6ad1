//! The routes: each checks its caller's token and scope, finds the task
//! only among those the caller may see (else 404, whether or not it
//! exists), and does its work through the runtime on a blocking thread.

use crate::service::{
    Answer, Confirm, NewTask, approve_task, blocking, change_set_of, confirm_draft, create_task,
    diff_body, project_relative, receipt_check, receipt_of, recorded, standing_now, visible,
};
use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use loop_runtime::Runtime;
use loop_runtime::Scope;
use loop_runtime::views::{
    AnswerBody, AnswerFields, AnsweredBody, CancelBody, CreatedBody, DraftBody, EventsBody,
    HealthBody, HookBody, ReadyBody, ResumedBody, SettledBody, TaskBody, TasksBody, VerifyBody,
};
use serde::Deserialize;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The documented routes: (method, path, scope needed), for tests and
/// tools that walk them.
pub fn route_table() -> Vec<(&'static str, &'static str, Option<&'static str>)> {
    crate::openapi::ROUTES
        .iter()
        .map(|r| (r.method, r.path, r.scope))
        .collect()
}

pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/", get(console_page))
        .route("/console.js", get(console_script))
        .route("/console.css", get(console_style))
        .route("/healthz", get(healthz))
        .route("/auth/providers", get(crate::signin::providers))
        .route("/auth/github", get(crate::signin::begin))
        .route("/auth/github/callback", get(crate::signin::callback))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .route(
            "/api/v1/tasks",
            get(list)
                .post(create)
                .layer(axum::extract::DefaultBodyLimit::max(
                    crate::submissions::MAX_API_INPUT_BYTES * 4 / 3 + (2 << 20),
                )),
        )
        .route("/api/v1/tasks/{id}", get(one))
        .route("/api/v1/tasks/{id}/events", get(events))
        .route("/api/v1/tasks/{id}/stream", get(stream))
        .route("/api/v1/tasks/{id}/cancel", post(cancel))
        .route("/api/v1/tasks/{id}/approve", post(approve))
        .route("/api/v1/tasks/{id}/resume", post(resume))
        .route("/api/v1/tasks/{id}/receipt", get(receipt))
        .route("/api/v1/tasks/{id}/verify", get(verify))
        .route("/api/v1/tasks/{id}/diff", get(diff))
        .route("/api/v1/tasks/{id}/files/{*path}", get(produced_file))
        .route("/api/v1/tasks/{id}/evidence/{sha256}", get(evidence_file))
        .route("/api/v1/tasks/{id}/apply", post(apply))
        .route("/api/v1/tasks/{id}/undo", post(undo))
        .route("/api/v1/tasks/{id}/discard", post(discard))
        .route("/api/v1/skills", get(skills_list))
        .route("/api/v1/memory", get(memory_list).post(memory_add))
        .route("/api/v1/memory/{id}", get(memory_show))
        .route("/api/v1/memory/{id}/approve", post(memory_approve))
        .route("/api/v1/memory/{id}/forget", post(memory_forget))
        .route("/api/v1/hooks/{name}", post(hook))
        .route("/api/v1/drafts/{id}", get(draft_view))
        .route("/api/v1/drafts/{id}/confirm", post(draft_confirm))
}

/// A body that may be left out (its defaults then), read after the
/// caller is known: a bad one is a 400 in the API's own shape.
fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("the body: {e}")))
}

/// Fire the Loopfile's scheduled triggers, checked every 15 s (each
/// minute fires once, whatever the number of servers: the store keeps it).
pub(crate) async fn schedules(state: AppState) {
    let mut since = loop_core::Clock::now_ms(&loop_core::SystemClock).saturating_sub(60_000);
    loop {
        let rt = state.runtime.clone();
        let now = loop_core::Clock::now_ms(&loop_core::SystemClock);
        let from = since;
        match tokio::task::spawn_blocking(move || rt.fire_schedules(from, now)).await {
            Ok(Ok(ids)) => {
                // Only a check that ran moves on: minutes a failed one
                // (an unreadable Loopfile) missed are looked at again.
                since = now;
                for id in ids {
                    state.metrics.tasks_started.fetch_add(1, Ordering::Relaxed);
                    state.pool.start(id, None);
                }
            }
            Ok(Err(e)) => tracing::warn!("scheduled triggers: {}", e.message),
            Err(e) => tracing::warn!("scheduled triggers: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
}

/// Take up the API's tasks an earlier server left interrupted.
/// Take up the interrupted tasks an earlier server ran (they have an
/// owner), and those the command line started when told to adopt them:
/// how many were taken up, and how many of the command line's were left.
pub(crate) fn resume_interrupted(state: &AppState) -> (usize, usize) {
    let tasks = match state.runtime.tasks() {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("interrupted tasks cannot be listed, none taken up: {e}");
            return (0, 0);
        }
    };
    let (mut taken, mut left) = (0, 0);
    // A child is resumed by its parent (which finds it by its call), never
    // on its own: it would run twice, its questions not its parent's.
    for t in tasks
        .into_iter()
        .filter(|t| t.interrupted && t.parent.is_none())
    {
        if t.owner.is_some() || state.adopt_cli_tasks {
            taken += 1;
            state.pool.start(t.id, None);
        } else {
            left += 1;
        }
    }
    (taken, left)
}

/// What the console's files may do: load only themselves, talk only to
/// this server; no inline script, no frames, no plugins.
const CONSOLE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// One of the console's embedded files (no data in it: the data comes
/// from the API, with the person's token).
fn console_file(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (axum::http::header::CONTENT_TYPE, kind),
            (axum::http::header::CONTENT_SECURITY_POLICY, CONSOLE_POLICY),
            (axum::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (axum::http::header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

async fn console_page() -> Response {
    console_file(
        "text/html; charset=utf-8",
        include_str!("../console/index.html"),
    )
}

async fn console_script() -> Response {
    console_file(
        "text/javascript; charset=utf-8",
        include_str!("../console/console.js"),
    )
}

async fn console_style() -> Response {
    console_file(
        "text/css; charset=utf-8",
        include_str!("../console/console.css"),
    )
}

async fn healthz() -> Json<HealthBody> {
    Json(HealthBody { ok: true })
}

/// Ready: the store answers and the sandbox can run a command (probed at
/// most every 30 s; no path or error detail is shown without a token).
#[allow(clippy::disallowed_methods)] // the server's own state directory
async fn readyz(State(s): State<AppState>) -> Response {
    let cached = s
        .ready
        .lock()
        .ok()
        .and_then(|r| *r)
        .filter(|(at, _)| at.elapsed() < Duration::from_secs(30))
        .map(|(_, v)| v);
    let verdict = match cached {
        Some(v) => v,
        None => {
            let rt = s.runtime.clone();
            let probed = blocking(move || {
                let store = rt.tasks().is_ok();
                // An empty directory of its own: what else lies in the temp
                // directory is none of the probe's business.
                let dir = std::env::temp_dir().join(format!("loop-ready-{}", std::process::id()));
                let _ = std::fs::create_dir_all(&dir);
                let sandbox = loop_runtime::exec(&loop_runtime::ExecOptions {
                    egress: None,
                    command: vec!["true".into()],
                    workspace: dir,
                    protect: Vec::new(),
                    net: loop_sandbox::Net::None,
                    mem_mb: None,
                    cpu_secs: None,
                    fsize_mb: None,
                    disk_mb: None,
                    timeout: Duration::from_secs(10),
                    max_output: 4096,
                    isolation: loop_sandbox::IsolationLevel::Required,
                    overlay: false,
                    layers: loop_sandbox::Layers::default(),
                    repeat: 1,
                    pause: Duration::ZERO,
                    terminal: false,
                })
                .is_ok_and(|r| r.exit_code == Some(0));
                Ok(ReadyBody {
                    ready: store && sandbox,
                    store,
                    sandbox,
                })
            })
            .await;
            let v = probed.unwrap_or(ReadyBody {
                ready: false,
                store: false,
                sandbox: false,
            });
            if let Ok(mut r) = s.ready.lock() {
                *r = Some((std::time::Instant::now(), v));
            }
            v
        }
    };
    let status = if verdict.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(verdict)).into_response()
}

async fn openapi(State(s): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    s.caller(&headers, Scope::Read).await?;
    Ok(Json(crate::openapi::document()))
}

async fn create(
    State(s): State<AppState>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Result<(StatusCode, Json<CreatedBody>), ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    // An upload is read whole before it is judged: only so many at once.
    let upload = match is_multipart(&headers) {
        true => Some(s.upload(&caller.owner).ok_or_else(|| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "{} uploads of {} (or {} in all) are being read already; send this one once they are in",
                    crate::Upload::PER_OWNER,
                    caller.owner,
                    crate::Upload::IN_ALL
                ),
            )
        })?),
        false => None,
    };
    let body = new_task_of(&headers, request).await?;
    drop(upload);
    let wait = preferred_wait(&headers, s.prestart.answer_within);
    let created = create_task(&s, caller, body, loop_runtime::Via::Http, wait).await?;
    Ok((created.status(), Json(created.body())))
}

/// Whether the request says it is a multipart upload.
fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// A new task from its request: a JSON body, or a multipart form whose
/// `task` part is that JSON and whose `input` parts are files given with
/// it (each part's file name its name).
async fn new_task_of(
    headers: &HeaderMap,
    request: axum::extract::Request,
) -> Result<NewTask, ApiError> {
    use axum::extract::FromRequest;
    if !is_multipart(headers) {
        // A JSON body keeps the 1 MiB every other body has: said at once
        // when its length says more, and cut off when it grows past it.
        let too_large = || {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "a JSON body is at most 1 MiB: give files as a multipart upload".to_string(),
            )
        };
        let declared = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > 1 << 20) {
            return Err(too_large());
        }
        let body = axum::body::to_bytes(request.into_body(), 1 << 20)
            .await
            .map_err(|_| too_large())?;
        return serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the body is not a new task: {e}")));
    }
    let bad = |e: axum::extract::multipart::MultipartError| {
        ApiError::bad_request(format!("the upload cannot be read: {e}"))
    };
    let mut form = axum::extract::Multipart::from_request(request, &())
        .await
        .map_err(|e| ApiError::bad_request(format!("the upload cannot be read: {e}")))?;
    let mut task: Option<NewTask> = None;
    let mut files = Vec::new();
    while let Some(field) = form.next_field().await.map_err(bad)? {
        match field.name().unwrap_or("") {
            "task" => {
                if task.is_some() {
                    return Err(ApiError::bad_request(
                        "the upload has two `task` parts: give the new task once".to_string(),
                    ));
                }
                let text = field.bytes().await.map_err(bad)?;
                if text.len() > 1 << 20 {
                    return Err(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_large",
                        "the `task` part is at most 1 MiB, as a JSON body is".to_string(),
                    ));
                }
                task = Some(serde_json::from_slice(&text).map_err(|e| {
                    ApiError::bad_request(format!("the `task` part is not a new task: {e}"))
                })?);
            }
            "input" => {
                let name = field.file_name().unwrap_or("").to_string();
                if files.len() >= crate::submissions::MAX_API_INPUTS {
                    return Err(ApiError::bad_request(format!(
                        "more than {} input files: a task takes at most that many over the API",
                        crate::submissions::MAX_API_INPUTS
                    )));
                }
                let bytes = field.bytes().await.map_err(bad)?;
                files.push(crate::submissions::GivenFile::new(name, &bytes));
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "an upload has a `task` part and `input` files, not {other:?}"
                )));
            }
        }
    }
    let mut task = task.ok_or_else(|| {
        ApiError::bad_request("the upload has no `task` part (the new task as JSON)".to_string())
    })?;
    task.inputs.extend(files);
    Ok(task)
}

/// How long the client asked to wait for its task's preparation
/// (`Prefer: wait=N`, RFC 7240, at most `most`); none unless asked.
fn preferred_wait(headers: &HeaderMap, most: Duration) -> Duration {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k.trim().eq_ignore_ascii_case("wait"))
                .then(|| v.trim().trim_matches('"').parse::<u64>().ok())
                .flatten()
        })
        .map(|secs| Duration::from_secs(secs).min(most))
        .next()
        .unwrap_or(Duration::ZERO)
}

async fn draft_view(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let (state, notes) = crate::service::draft_view(&s, &caller, &id)?;
    Ok(Json(DraftBody {
        state,
        id: &id,
        notes: &notes,
    })
    .into_response())
}

async fn draft_confirm(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    let c: Confirm = optional_body(&body)?;
    confirm_draft(&s, &caller, &id, c)?;
    Ok(Json(AnsweredBody {
        id: &id,
        answered: true,
    })
    .into_response())
}

/// What a task has used, as its record says, and how long its
/// verifications took; kept with the number of entries it was read at.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    entries: u64,
    used: loop_runtime::Used,
    verify_ms: u64,
    verifications: u64,
}

/// Each task's tally, by id: a task's events are read again only when it
/// has recorded more (a list or `/metrics` over thousands of tasks reads
/// only what changed).
pub(crate) type Tallies =
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Tally>>>;

fn tally(rt: &Runtime, tallies: &Tallies, t: &loop_runtime::TaskView) -> Tally {
    let lock = || {
        tallies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some(x) = lock().get(&t.id).filter(|x| x.entries == t.entries) {
        return *x;
    }
    let recorded = rt.events(&t.id, 0).unwrap_or_default();
    let mut x = Tally {
        entries: recorded.len() as u64,
        ..Tally::default()
    };
    let history: Vec<loop_protocol::Event> = recorded.into_iter().map(|r| r.event).collect();
    for e in &history {
        if let loop_protocol::Event::Verified { report, .. } = e {
            x.verify_ms += report.duration_ms;
            x.verifications += 1;
        }
    }
    // Charged as the Director charges them (one definition of a cost).
    if let Ok(b) = loop_core::state::used_by(&history) {
        x.used = loop_runtime::Used {
            steps: u64::from(b.steps),
            tokens: b.tokens,
            verifications: u64::from(b.verifications),
            usd: b.usd,
        };
    }
    lock().insert(t.id.clone(), x);
    x
}

/// Tasks listed at once when the caller does not say.
const PAGE: usize = 100;

async fn list(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Result<Json<TasksBody>, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let limit = match q.get("limit") {
        None => PAGE,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be a whole number from 1 to 1000, not `{v}`"
                ))
            })?,
    };
    let before = q.get("before").cloned();
    let filter = crate::listing::TaskFilter::from_query(&q)?;
    let (rt, tallies, pool) = (s.runtime.clone(), s.tallies.clone(), s.pool.clone());
    blocking(move || {
        let mut seen: Vec<_> = rt
            .tasks()?
            .into_iter()
            .filter(|t| caller.may_see(t.owner.as_deref()))
            .collect();
        if let Some(b) = &before {
            // Newest first: what comes after `before`; an id the caller
            // may not see starts nowhere (it reveals nothing).
            let at = seen
                .iter()
                .position(|t| &t.id == b)
                .ok_or_else(|| ApiError::bad_request(format!("before: no task {b}")))?;
            seen.drain(..=at);
        }
        // (Filtered after the cursor is placed: a page's last task that
        // no longer passes the filters still says where the next starts.)
        seen.retain(|t| filter.admits(t, pool.is_waiting(&t.id)));
        let next = (seen.len() > limit).then(|| seen[limit - 1].id.clone());
        seen.truncate(limit);
        let tasks = seen
            .iter()
            .map(|t| TaskBody {
                task: t.for_remote(rt.project()),
                used: Some(tally(&rt, &tallies, t).used),
                queued: pool.is_waiting(&t.id),
                outcome_words: t.outcome.map(|o| o.words()),
            })
            .collect();
        Ok(Json(TasksBody { tasks, next }))
    })
    .await
}

async fn one(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let standing = s
        .as_caller(&headers, Scope::Read, move |s, caller| {
            standing_now(s, &caller, &id)
        })
        .await?;
    Ok(Json(standing.view(s.runtime.project())).into_response())
}

/// Where a listing of events starts.
struct Since {
    since: u64,
}

async fn events(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    // Read here, so a bad value is answered in the API's own shape.
    let q = Since {
        since: match q.get("since") {
            None => 0,
            Some(v) => v.parse().map_err(|_| {
                ApiError::bad_request(format!("since must be a whole number, not `{v}`"))
            })?,
        },
    };
    let recorded = recorded(&s, caller, id, q.since).await?;
    Ok(Json(EventsBody::of(&recorded)).into_response())
}

/// The task's events as server-sent events, from `Last-Event-ID` + 1 on,
/// until it has ended and every event is sent. Every watcher of a task
/// reads from one shared reader of the store (see `feed`), each at its own
/// pace: a slow one slows nobody.
/// How long a task's event stream waits for the task's preparation.
const PREPARING_WAIT: Duration = Duration::from_secs(600);

async fn stream(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    // A task the answer named while it was still being prepared: its
    // stream waits for it (the answer's `events` means what it says), or
    // answers the refusal its preparation ended with.
    let owner = (caller.scope != Scope::Admin).then(|| caller.owner.clone());
    let waited = std::time::Instant::now();
    while let Some(state) = s.prestart.state(&id, owner.as_deref()) {
        match state {
            crate::prestart::State::Refused(status, kind, message) => {
                return Err(ApiError::new(
                    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
                    crate::prestart::kind_name(&kind),
                    message,
                ));
            }
            _ if waited.elapsed() > PREPARING_WAIT => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "preparing",
                    format!("task {id} is still being prepared; its status says when it starts"),
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let rt = s.runtime.clone();
    let check_id = id.clone();
    blocking(move || visible(&rt, &caller, &check_id).map(|_| ())).await?;
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(0, |n| n.saturating_add(1));
    s.metrics.sse_clients.fetch_add(1, Ordering::Relaxed);
    let pool = s.pool.clone();
    let feed = s.hub.feed(
        &s.runtime,
        std::sync::Arc::new(move |id: &str| pool.holds(id)),
        &id,
    );
    let changed = feed.subscribe();
    /// Where one watcher is.
    struct Watcher {
        feed: std::sync::Arc<crate::feed::Feed>,
        changed: tokio::sync::watch::Receiver<u64>,
        next: u64,
        queue: std::collections::VecDeque<SseEvent>,
        done: bool,
    }
    let start = Watcher {
        feed,
        changed,
        next: from,
        queue: std::collections::VecDeque::new(),
        done: false,
    };
    let events = futures_util::stream::unfold(start, |mut w| async move {
        loop {
            if let Some(e) = w.queue.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(e), w));
            }
            if w.done {
                return None;
            }
            // Seen before reading: a change after this wakes the wait below.
            w.changed.borrow_and_update();
            let (batch, standing) = w.feed.read(w.next, 256);
            for f in &batch {
                w.queue.push_back(
                    SseEvent::default()
                        .id(f.seq.to_string())
                        .event(&f.kind)
                        .data(&f.data),
                );
                w.next = f.seq + 1;
            }
            match standing {
                crate::feed::Standing::Over => {
                    w.done = true;
                    w.queue
                        .push_back(SseEvent::default().event("end").data("{}"));
                }
                // The record cannot be read: the stream closes without
                // `end` (the client may come back with Last-Event-ID).
                crate::feed::Standing::Failed => w.done = true,
                crate::feed::Standing::Open => {
                    if batch.is_empty() && w.changed.changed().await.is_err() {
                        return None;
                    }
                }
            }
        }
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

async fn cancel(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    // Not stored yet: cancelled before its preparation (never prepared),
    // or as soon as its preparation has stored it (here, or at the server
    // that keeps it).
    if let Some((result, outcome)) = crate::submissions::cancel(&s, &caller, &id).await? {
        return Ok(Json(CancelBody {
            id: &id,
            result,
            outcome,
        })
        .into_response());
    }
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        let cancelled = rt.cancel(&id, Duration::from_secs(10), &mut loop_runtime::Quiet)?;
        let (result, outcome) = loop_runtime::views::cancel_result(&cancelled);
        Ok(Json(CancelBody {
            id: &id,
            result,
            outcome,
        })
        .into_response())
    })
    .await
}

async fn approve(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    let answer: Answer = optional_body(&body)?;
    let (a, message) = approve_task(&s, caller, id.clone(), answer, "the API").await?;
    Ok(Json(AnswerBody {
        id: &id,
        answer: AnswerFields::of(&a, message.as_deref()),
    })
    .into_response())
}

/// The skills tasks of this project may use, each judged (signed by a
/// trusted key, the project's own pattern, or why it is refused).
async fn skills_list(State(s): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    // (Any reader: the skills are the project's, not an owner's.)
    s.caller(&headers, Scope::Read).await?;
    let skills = crate::service::skills_list(&s).await?;
    Ok(Json(serde_json::json!({ "skills": skills })).into_response())
}

/// The project's memory notes the caller may see.
async fn memory_list(State(s): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let notes = crate::service::memory_list(&s, caller).await?;
    Ok(Json(serde_json::json!({ "notes": notes })).into_response())
}

/// A person's note, the caller's own (usable at once).
async fn memory_add(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    let new: crate::service::NewNote = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the body: {e}")))?;
    let n = crate::service::memory_add(&s, caller, new).await?;
    Ok((StatusCode::CREATED, Json(n)).into_response())
}

/// One note the caller may see.
async fn memory_show(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    Ok(Json(crate::service::memory_show(&s, caller, id).await?).into_response())
}

async fn memory_approve(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    Ok(Json(crate::service::memory_settle(&s, caller, id, true).await?).into_response())
}

async fn memory_forget(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    Ok(Json(crate::service::memory_settle(&s, caller, id, false).await?).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct More {
    add_steps: Option<u32>,
    add_tokens: Option<u64>,
    add_usd: Option<f64>,
    add_secs: Option<u64>,
}

async fn resume(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    let more: More = optional_body(&body)?;
    let rt = s.runtime.clone();
    let check = id.clone();
    let extension = (more.add_steps.is_some()
        || more.add_tokens.is_some()
        || more.add_usd.is_some()
        || more.add_secs.is_some())
    .then(|| loop_core::Extension {
        add_steps: more.add_steps.unwrap_or(0),
        add_tokens: more.add_tokens.unwrap_or(0),
        add_usd: more.add_usd.unwrap_or(0.0),
        add_secs: more.add_secs.unwrap_or(0),
    });
    if extension
        .as_ref()
        .is_some_and(|e| !e.add_usd.is_finite() || e.add_usd < 0.0)
    {
        return Err(ApiError::bad_request(
            "add_usd must be a non-negative number",
        ));
    }
    let has_extension = extension.is_some();
    blocking(move || {
        let t = visible(&rt, &caller, &check)?;
        let limited = t
            .outcome
            .is_some_and(|o| o.kind == loop_protocol::OutcomeKind::LimitReached);
        match (has_extension, t.interrupted, limited) {
            (false, true, _) | (true, _, true) => Ok(()),
            (true, _, false) => Err(ApiError::bad_request(format!(
                "task {check} did not end at a limit: there is nothing to extend"
            ))),
            (false, false, _) => Err(ApiError::bad_request(format!(
                "task {check} is not interrupted: there is nothing to resume (give add_* to extend a task that reached a limit)"
            ))),
        }
    })
    .await?;
    s.pool.resume(id.clone(), extension);
    let body = ResumedBody {
        id: &id,
        resumed: true,
    };
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

async fn receipt(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let rt = s.runtime.clone();
    blocking(move || {
        let t = visible(&rt, &caller, &id)?;
        let path = receipt_of(&rt, &t)?;
        let bytes = loop_receipt::read::read_regular(&path, 64 << 20).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("{}: {e}", path.display()),
            )
        })?;
        Ok((
            [
                (
                    axum::http::header::CONTENT_TYPE,
                    "application/json".to_string(),
                ),
                (
                    axum::http::header::CONTENT_DISPOSITION,
                    format!("attachment; filename=\"{id}.receipt.json\""),
                ),
            ],
            bytes,
        )
            .into_response())
    })
    .await
}

async fn verify(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let check = receipt_check(&s, caller, id.clone()).await?;
    Ok(Json(VerifyBody::of(&id, &check)).into_response())
}

/// A file the task made, as its receipt signs it: the bytes, with their
/// SHA-256 in `Digest` (RFC 3230) and `X-Loop-Sha256`, as an attachment.
async fn produced_file(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((id, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        let f = rt.produced_file(&id, &path).map_err(|e| match e.kind {
            // The task is the caller's (`visible`): the file is what is not there.
            loop_runtime::ErrorKind::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.message)
            }
            _ => ApiError::from(e),
        })?;
        // The name a browser saves it as: its last part, quoted safely.
        let name: String = path
            .rsplit('/')
            .next()
            .unwrap_or("file")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ok(file_response(
            f,
            "application/octet-stream",
            format!("attachment; filename=\"{name}\""),
        ))
    })
    .await
}

/// A file's bytes with their SHA-256 in `Digest` and `X-Loop-Sha256`.
fn file_response(f: loop_runtime::ProducedFile, media: &str, disposition: String) -> Response {
    let digest = {
        use base64::Engine;
        let raw: Vec<u8> = (0..f.sha256.len() / 2)
            .filter_map(|i| u8::from_str_radix(&f.sha256[2 * i..2 * i + 2], 16).ok())
            .collect();
        format!(
            "sha-256={}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    };
    (
        [
            (axum::http::header::CONTENT_TYPE, media.to_string()),
            (axum::http::header::CONTENT_DISPOSITION, disposition),
            (axum::http::HeaderName::from_static("digest"), digest),
            (
                axum::http::HeaderName::from_static("x-loop-sha256"),
                f.sha256,
            ),
        ],
        f.bytes,
    )
        .into_response()
}

/// A screenshot the task's browser kept as evidence, by its SHA-256.
async fn evidence_file(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((id, sha256)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        let (f, media) = rt.evidence_file(&id, &sha256).map_err(|e| match e.kind {
            loop_runtime::ErrorKind::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", e.message)
            }
            _ => ApiError::from(e),
        })?;
        let name = format!("{}.{}", f.sha256, media.trim_start_matches("image/"));
        Ok(file_response(
            f,
            media,
            format!("inline; filename=\"{name}\""),
        ))
    })
    .await
}

async fn diff(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let d = change_set_of(&s, caller, id.clone()).await?;
    Ok(Json(diff_body(s.runtime.project(), &id, &d)).into_response())
}

/// An observer that keeps the notes (what apply, undo and discard say).
#[derive(Default)]
struct Notes(Vec<String>);

impl loop_core::Observer for Notes {
    fn on_event(&mut self, _event: &loop_protocol::Event) {}
}

impl loop_runtime::Observer for Notes {
    fn note(&mut self, line: &str) {
        self.0.push(line.to_string());
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApplyBody {
    /// A person reviewed the change (the Loopfile's `before_apply`).
    #[serde(default)]
    confirm: bool,
    /// Consent to files that would run code on the host.
    #[serde(default)]
    trust_host_files: bool,
    /// Apply on the project's HEAD where it moved since the task began,
    /// when every file the change touches is as it was then.
    #[serde(default)]
    onto_head: bool,
}

fn settled(
    project: &std::path::Path,
    action: &str,
    id: &str,
    s: loop_runtime::Settled,
    notes: Notes,
) -> Response {
    let notes: Vec<String> = notes
        .0
        .iter()
        .map(|n| project_relative(project, n))
        .collect();
    Json(SettledBody {
        action,
        id,
        result: s,
        notes,
    })
    .into_response()
}

async fn apply(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    let body: ApplyBody = optional_body(&body)?;
    // Files that would run code on the server's host come in only with an
    // administrator's consent.
    if body.trust_host_files && caller.scope < Scope::Admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "trust_host_files needs an `admin` token",
        ));
    }
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        let mut notes = Notes::default();
        let consent = loop_runtime::ApplyConsent {
            confirmed: body.confirm,
            trust_host_files: body.trust_host_files,
            onto_head: body.onto_head,
        };
        let r = rt.apply(&id, consent, &mut notes)?;
        Ok(settled(rt.project(), "apply", &id, r, notes))
    })
    .await
}

async fn undo(
    s: State<AppState>,
    headers: HeaderMap,
    id: Path<String>,
) -> Result<Response, ApiError> {
    settle(s, headers, id, "undo", Runtime::undo).await
}

async fn discard(
    s: State<AppState>,
    headers: HeaderMap,
    id: Path<String>,
) -> Result<Response, ApiError> {
    settle(s, headers, id, "discard", Runtime::discard).await
}

/// Undo or discard task `id`'s change set (`how`), as its owner.
async fn settle(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    action: &'static str,
    how: fn(
        &Runtime,
        &str,
        &mut dyn loop_runtime::Observer,
    ) -> Result<loop_runtime::Settled, loop_runtime::Error>,
) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Run).await?;
    let rt = s.runtime.clone();
    blocking(move || {
        visible(&rt, &caller, &id)?;
        let mut notes = Notes::default();
        let r = how(&rt, &id, &mut notes)?;
        Ok(settled(rt.project(), action, &id, r, notes))
    })
    .await
}

/// A webhook delivery for the Loopfile's trigger `name`: no bearer token
/// (the sender signs the body with the trigger's secret instead); a
/// delivery taken is a task started, a replay is refused.
async fn hook(
    State(s): State<AppState>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    s.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let peer = peer.ip();
    // A peer that keeps failing is answered before any work; what it
    // sends is never a key of any table.
    let allowed = s.rate_per_minute.saturating_mul(4).max(100);
    if s.peer_failures().blocked(peer, allowed) {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many failed deliveries from this address in a minute",
        ));
    }
    let fail = |s: &AppState| s.peer_failures().fail(peer);
    let slack = headers.contains_key("x-slack-signature");
    // A trigger's name is short and plain (the Loopfile's rule); anything
    // else is no trigger, answered without looking further.
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        fail(&s);
        return Err(ApiError::not_found("webhook trigger"));
    }
    let rt = s.runtime.clone();
    let rates = s.clone();
    let lookup: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.as_str().to_ascii_lowercase(),
                v.to_str().ok()?.to_string(),
            ))
        })
        .collect();
    let hook_name = name.clone();
    let taken = blocking(move || {
        let header = |k: &str| lookup.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        // What went wrong inside is for the server's log, not for whoever
        // sent the request.
        // A trigger takes at most --rate deliveries a minute, counted only
        // once a delivery proved authentic.
        // And one sender (a GitHub login) at most a quarter of that: one
        // person cannot use up the trigger for everyone.
        let key = format!("hook:{hook_name}");
        let per_sender = (rates.rate_per_minute / 4).max(1);
        let mut admit = |sender: Option<&str>| {
            let mine = sender.is_none_or(|who| {
                rates
                    .check_rate_with(&format!("{key}:from:{who}"), per_sender)
                    .is_ok()
            });
            mine && rates.check_rate(&key).is_ok()
        };
        rt.take_delivery(&hook_name, &header, &body, &mut admit)
            .map_err(|e| {
                tracing::warn!("webhook `{hook_name}`: {}", e.message);
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "misconfigured",
                    "this trigger cannot take deliveries now (see the server's log)",
                )
            })
    })
    .await?;
    hook_answer(&s, &name, slack, taken, fail)
}

/// What a delivery's sender is told: a task started (202, or 200 for
/// Slack), nothing to do or a person's answer taken (200), or why not.
fn hook_answer(
    s: &AppState,
    name: &str,
    slack: bool,
    taken: Result<loop_runtime::Taken, loop_runtime::Refusal>,
    fail: impl Fn(&AppState),
) -> Result<Response, ApiError> {
    use loop_runtime::{Refusal, Taken};
    let s = s.clone();
    let name = name.to_string();
    match taken {
        Ok(Taken::Draft(asked)) => {
            let draft = crate::service::start_github_draft(&s, *asked)?;
            let body = HookBody::Drafting {
                draft: &draft,
                trigger: &name,
            };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
        Ok(Taken::Answer(a)) => {
            // An answer that answers nothing is said back, and starts
            // nothing.
            let said = crate::service::answer_from_github(&s, &a);
            let body = match &said {
                crate::service::Replied::Answered(did) => HookBody::Answered {
                    answered: did,
                    trigger: &name,
                },
                crate::service::Replied::Unanswered(why) => HookBody::Ignored {
                    ignored: why,
                    trigger: &name,
                },
            };
            Ok((StatusCode::OK, Json(body)).into_response())
        }
        Ok(Taken::Task(id)) => {
            s.metrics.tasks_started.fetch_add(1, Ordering::Relaxed);
            s.pool.start(id.clone(), None);
            let body = HookBody::Taken {
                id: &id,
                trigger: &name,
            };
            // Slack takes a command only with a 200 (anything else is a
            // failure to the person who typed it).
            let status = if slack {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            Ok((status, Json(body)).into_response())
        }
        Err(Refusal::Unknown) => {
            fail(&s);
            Err(ApiError::not_found(&format!("webhook trigger `{name}`")))
        }
        Err(Refusal::Unauthenticated(why)) => {
            fail(&s);
            s.metrics.refused.fetch_add(1, Ordering::Relaxed);
            Err(ApiError::unauthorized(&why))
        }
        Err(Refusal::RateLimited) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "trigger `{name}` took {} deliveries this minute",
                s.rate_per_minute
            ),
        )),
        Err(Refusal::Replayed(d)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "replayed",
            format!("delivery {d} was taken before"),
        )),
        Err(Refusal::Misconfigured(why)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "misconfigured",
            why,
        )),
        Err(Refusal::Ignored(what)) => {
            let body = HookBody::Ignored {
                ignored: &what,
                trigger: &name,
            };
            Ok((StatusCode::OK, Json(body)).into_response())
        }
        Err(Refusal::Answered(what)) => {
            let body = HookBody::Answered {
                answered: &what,
                trigger: &name,
            };
            Ok((StatusCode::OK, Json(body)).into_response())
        }
    }
}

/// Prometheus text: tasks by state and outcome, what they used, the
/// verifications' time, and the server's own counters.
async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let caller = s.caller(&headers, Scope::Read).await?;
    let admin = caller.scope >= Scope::Admin;
    let rt = s.runtime.clone();
    let m = s.metrics.clone();
    let tallies = s.tallies.clone();
    let (queued, running) = s.pool.counts();
    let preparing = s.prestart.in_flight();
    let watched = s.hub.readers();
    let pool = s.pool.clone();
    let text = blocking(move || {
        let mut by_state: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
        let (mut steps, mut tokens, mut usd) = (0u64, 0u64, 0f64);
        let (mut verify_ms, mut verifications) = (0u64, 0u64);
        for t in rt.tasks()?.into_iter().filter(|t| caller.may_see(t.owner.as_deref())) {
            let outcome = t.outcome.map_or("", |o| o.kind.name());
            *by_state
                .entry((t.state.as_str(), outcome))
                .or_default() += 1;
            let x = tally(&rt, &tallies, &t);
            steps += x.used.steps;
            tokens += x.used.tokens;
            usd += x.used.usd;
            verify_ms += x.verify_ms;
            verifications += x.verifications;
        }
        let mut out = String::new();
        out.push_str("# HELP loop_tasks Tasks by state and outcome.\n# TYPE loop_tasks gauge\n");
        for ((state, outcome), n) in &by_state {
            out.push_str(&format!(
                "loop_tasks{{state=\"{state}\",outcome=\"{outcome}\"}} {n}\n"
            ));
        }
        out.push_str(&format!(
            "# HELP loop_steps_total Model turns charged.\n# TYPE loop_steps_total counter\nloop_steps_total {steps}\n\
             # HELP loop_tokens_total Tokens charged.\n# TYPE loop_tokens_total counter\nloop_tokens_total {tokens}\n\
             # HELP loop_usd_total Dollars charged.\n# TYPE loop_usd_total counter\nloop_usd_total {usd}\n\
             # HELP loop_verification_seconds Time verification passes took.\n# TYPE loop_verification_seconds summary\n\
             loop_verification_seconds_sum {}\nloop_verification_seconds_count {verifications}\n",
            verify_ms as f64 / 1000.0,
        ));
        // The server's own figures count every owner's activity: an
        // `admin` token's only.
        if !admin {
            return Ok(out);
        }
        out.push_str(&format!(
            "# HELP loop_http_requests_total Authenticated-route requests.\n# TYPE loop_http_requests_total counter\nloop_http_requests_total {}\n\
             # HELP loop_http_refused_total Requests refused for want of a valid token.\n# TYPE loop_http_refused_total counter\nloop_http_refused_total {}\n\
             # HELP loop_api_tasks_started_total Tasks started through the API.\n# TYPE loop_api_tasks_started_total counter\nloop_api_tasks_started_total {}\n\
             # HELP loop_sse_clients_total Event streams opened.\n# TYPE loop_sse_clients_total counter\nloop_sse_clients_total {}\n\
             # HELP loop_server_tasks_waiting Tasks waiting for a place to run here.\n# TYPE loop_server_tasks_waiting gauge\nloop_server_tasks_waiting {queued}\n\
             # HELP loop_server_tasks_running Tasks running here now.\n# TYPE loop_server_tasks_running gauge\nloop_server_tasks_running {running}\n\
             # HELP loop_server_tasks_preparing New tasks waiting for a place to be prepared, or being prepared (at most --jobs at once).\n# TYPE loop_server_tasks_preparing gauge\nloop_server_tasks_preparing {preparing}\n\
             # HELP loop_server_event_readers Readers of the store feeding event streams (one per watched task).\n# TYPE loop_server_event_readers gauge\nloop_server_event_readers {watched}\n",
            m.requests.load(Ordering::Relaxed),
            m.refused.load(Ordering::Relaxed),
            m.tasks_started.load(Ordering::Relaxed),
            m.sse_clients.load(Ordering::Relaxed),
        ));
        if let Some(d) = pool.shared().and_then(|q| q.depth().ok()) {
            out.push_str(&format!(
                "# HELP loop_queue_depth Messages in the workers' queue, by where they stand.\n# TYPE loop_queue_depth gauge\nloop_queue_depth{{state=\"waiting\"}} {}\nloop_queue_depth{{state=\"pending\"}} {}\nloop_queue_depth{{state=\"dead\"}} {}\n",
                d.waiting, d.pending, d.dead
            ));
        }
        Ok(out)
    })
    .await?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response())
}
