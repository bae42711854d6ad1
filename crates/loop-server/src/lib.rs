//! # loop-server
//!
//! `loop serve`: an HTTP API over the runtime library. A task started here
//! is submitted and run by [`loop_runtime::Runtime`] exactly as one started
//! from the command line (the same store, ledger, receipt), on a thread of
//! its own — the Director never runs on the async executor. Every route
//! but `/healthz` and `/readyz` needs a bearer token (`loop tokens
//! create`); a task belongs to the token owner that created it and is
//! invisible (404) to other owners, unless the token's scope is `admin`.
//!
//! Live events are server-sent events read from the store, so a task run
//! by the CLI in another process streams the same way (`Last-Event-ID`
//! resumes). SIGTERM or Ctrl-C stops accepting, and the process ends:
//! tasks it was running are left interrupted, and the next `loop serve`
//! (or `loop resume`) takes them up where their record stops.

mod api;
mod drafts;
mod feed;
mod listing;
pub mod mcp;
mod openapi;
mod pool;
mod prestart;
mod service;
mod signin;
mod submissions;
pub mod worker;

pub use api::route_table;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use loop_runtime::Runtime;
use loop_runtime::{Caller, Scope};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The project whose tasks are served.
    pub project: PathBuf,
    /// Where to listen (127.0.0.1 unless told otherwise).
    pub addr: SocketAddr,
    /// Requests a token may make per minute.
    pub rate_per_minute: u32,
    /// Tasks run at once (the rest wait their turn).
    pub jobs: usize,
    /// Hand tasks to `loop worker` processes through this queue (URL and
    /// settings) instead of running them here.
    pub queue: Option<(String, loop_store::QueueOptions)>,
    /// Take up, besides the interrupted tasks an earlier server ran, those
    /// the command line started (`loop run` killed or stopped).
    pub adopt_cli_tasks: bool,
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    runtime: Runtime,
    limits: Arc<Mutex<HashMap<String, (Instant, u32)>>>,
    rate_per_minute: u32,
    /// Unauthenticated failures per peer address (a fixed-size table).
    failures: Arc<Mutex<PeerFailures>>,
    metrics: Arc<Metrics>,
    /// The last readiness probe (a sandboxed `true`), kept 30 s so the
    /// unauthenticated probe cannot be made to spawn processes at will.
    ready: Arc<Mutex<Option<(Instant, loop_runtime::views::ReadyBody)>>>,
    /// Contracts drafted from an instruction, waiting for their answer.
    drafts: drafts::Drafts,
    /// The watched tasks' events, read once for all their watchers.
    hub: feed::Hub,
    /// The tasks this server runs.
    pool: pool::Pool,
    /// What each task has used, kept while its record does not change.
    tallies: api::Tallies,
    /// The MCP sessions open over HTTP, by token (capped).
    mcp_sessions: Arc<Mutex<mcp::Sessions>>,
    /// New tasks' preparations: at most `jobs` at once.
    prestart: Arc<prestart::Prestart>,
    /// Interrupted tasks the command line started are taken up too.
    adopt_cli_tasks: bool,
    /// GitHub sign-ins under way.
    sign_ins: signin::Attempts,
    /// Multipart uploads being read, by owner (each may hold up to its
    /// 22 MiB in memory until it is whole).
    uploads: Arc<Mutex<HashMap<String, usize>>>,
}

/// One multipart upload's place while it is read ([`AppState::upload`]),
/// given back when dropped.
pub(crate) struct Upload {
    uploads: Arc<Mutex<HashMap<String, usize>>>,
    owner: String,
}

impl Upload {
    /// Uploads one owner may have being read at once.
    pub(crate) const PER_OWNER: usize = 4;
    /// Uploads the server reads at once.
    pub(crate) const IN_ALL: usize = 16;

    /// A place among `uploads` for one of `owner`'s, if there is one.
    fn take(uploads: &Arc<Mutex<HashMap<String, usize>>>, owner: &str) -> Option<Upload> {
        let mut all = uploads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let everyone: usize = all.values().sum();
        let theirs = all.get(owner).copied().unwrap_or(0);
        if theirs >= Upload::PER_OWNER || everyone >= Upload::IN_ALL {
            return None;
        }
        *all.entry(owner.to_string()).or_default() += 1;
        Some(Upload {
            uploads: uploads.clone(),
            owner: owner.to_string(),
        })
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        let mut all = self
            .uploads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = all.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                all.remove(&self.owner);
            }
        }
    }
}

/// Unauthenticated failures (a webhook name nobody configured, a signature
/// that does not hold) per peer address, in a table of at most
/// [`PeerFailures::CAP`] addresses: a peer past its allowance in the
/// current minute is answered 429 before any work. Nothing else an
/// unauthenticated request sends (a name, a header) is kept.
#[derive(Debug, Default)]
pub(crate) struct PeerFailures {
    by_peer: HashMap<std::net::IpAddr, (Instant, u32)>,
}

impl PeerFailures {
    /// Addresses kept at most.
    pub(crate) const CAP: usize = 4096;

    /// Whether `peer` has had more than `allowed` failures this minute.
    pub(crate) fn blocked(&self, peer: std::net::IpAddr, allowed: u32) -> bool {
        self.by_peer
            .get(&peer)
            .is_some_and(|(at, n)| at.elapsed() < Duration::from_secs(60) && *n > allowed)
    }

    /// Count a failure of `peer`.
    pub(crate) fn fail(&mut self, peer: std::net::IpAddr) {
        let now = Instant::now();
        if self.by_peer.len() >= Self::CAP && !self.by_peer.contains_key(&peer) {
            self.by_peer
                .retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(60));
            if self.by_peer.len() >= Self::CAP {
                // Full of peers failing right now: the oldest window goes.
                if let Some(oldest) = self
                    .by_peer
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| *k)
                {
                    self.by_peer.remove(&oldest);
                }
            }
        }
        let slot = self.by_peer.entry(peer).or_insert((now, 0));
        if now.duration_since(slot.0) >= Duration::from_secs(60) {
            *slot = (now, 0);
        }
        slot.1 = slot.1.saturating_add(1);
    }

    /// Addresses held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_peer.len()
    }
}

/// Counters `/metrics` reports beside what the store says.
#[derive(Debug, Default)]
struct Metrics {
    requests: AtomicU64,
    refused: AtomicU64,
    tasks_started: AtomicU64,
    sse_clients: AtomicU64,
}

impl AppState {
    /// The state for `runtime`'s project, running at most `jobs` tasks at
    /// once.
    pub fn new(runtime: Runtime, rate_per_minute: u32, jobs: usize) -> AppState {
        Self::with_pool(runtime, rate_per_minute, jobs, |rt, hub| {
            pool::Pool::new(rt, hub, jobs)
        })
    }

    /// The state of a server that hands its tasks to the workers of
    /// `queue` (budget extensions still run here, at most `jobs` at once).
    pub fn with_queue(
        runtime: Runtime,
        rate_per_minute: u32,
        jobs: usize,
        queue: loop_store::RedisQueue,
    ) -> AppState {
        Self::with_pool(runtime, rate_per_minute, jobs, |rt, hub| {
            pool::Pool::with_queue(rt, hub, jobs, queue)
        })
    }

    fn with_pool(
        runtime: Runtime,
        rate_per_minute: u32,
        jobs: usize,
        pool: impl FnOnce(Runtime, feed::Hub) -> pool::Pool,
    ) -> AppState {
        let hub = feed::Hub::default();
        let kept_drafts = drafts::Drafts::kept_in(runtime.clone());
        AppState {
            pool: pool(runtime.clone(), hub.clone()),
            hub,
            tallies: Arc::default(),
            runtime,
            limits: Arc::default(),
            rate_per_minute,
            failures: Arc::default(),
            metrics: Arc::default(),
            ready: Arc::default(),
            drafts: kept_drafts,
            mcp_sessions: Arc::default(),
            prestart: Arc::new(prestart::Prestart::new(jobs)),
            adopt_cli_tasks: false,
            sign_ins: Arc::default(),
            uploads: Arc::default(),
        }
    }

    /// Take up, at the start, the interrupted tasks the command line
    /// started as well as the server's own.
    pub fn adopting_cli_tasks(mut self, adopt: bool) -> AppState {
        self.adopt_cli_tasks = adopt;
        self
    }

    /// A new task's request waits `d` for the task's preparation before
    /// it answers 202 `queued` (20 s unless told).
    pub fn answer_within(mut self, d: Duration) -> AppState {
        let mut p = prestart::Prestart::new(self.prestart.gate.available_permits());
        p.answer_within = d;
        self.prestart = Arc::new(p);
        self
    }

    /// Who the request's bearer token acts for, with at least `need`; a
    /// request over its token's rate is refused. The store is asked on a
    /// blocking thread, never on the executor.
    async fn caller(&self, headers: &HeaderMap, need: Scope) -> Result<Caller, ApiError> {
        let token = self.bearer(headers)?;
        let rt = self.runtime.clone();
        let found = blocking(move || Ok(rt.authenticate(&token))).await?;
        self.admit(found, need)
    }

    /// [`AppState::caller`], then `f` for that caller, both on one blocking
    /// thread: a read that needs the store waits for one thread, not two
    /// (under load each wait is a wake-up among the tasks' threads).
    pub(crate) async fn as_caller<T: Send + 'static>(
        &self,
        headers: &HeaderMap,
        need: Scope,
        f: impl FnOnce(&AppState, Caller) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let token = self.bearer(headers)?;
        let s = self.clone();
        blocking(move || {
            let caller = s.admit(s.runtime.authenticate(&token), need)?;
            f(&s, caller)
        })
        .await
    }

    /// The request's bearer token (counted as a request; its absence
    /// refused).
    fn bearer(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let token = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                // The scheme is case-insensitive (RFC 9110).
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(rest)
            })
            .map(str::trim)
            .filter(|t| !t.is_empty() && t.len() <= 256)
            .map(str::to_string);
        token.ok_or_else(|| {
            self.metrics.refused.fetch_add(1, Ordering::Relaxed);
            ApiError::unauthorized(
                "no bearer token: send `Authorization: Bearer TOKEN` (`loop tokens create --owner NAME` makes one)",
            )
        })
    }

    /// The caller a token lookup found, if it has at least `need` and is
    /// within its rate.
    fn admit(
        &self,
        found: Result<Option<Caller>, loop_runtime::Error>,
        need: Scope,
    ) -> Result<Caller, ApiError> {
        let caller = found.map_err(ApiError::from)?.ok_or_else(|| {
            self.metrics.refused.fetch_add(1, Ordering::Relaxed);
            ApiError::unauthorized("the token is not a live token of this project")
        })?;
        if caller.scope < need {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this needs a `{}` token; this one is `{}`",
                    need.as_str(),
                    caller.scope.as_str()
                ),
            ));
        }
        self.check_rate(&caller.token_id)?;
        Ok(caller)
    }

    /// The unauthenticated-failure table.
    /// A place for one of `owner`'s multipart uploads to be read in, or
    /// `None` when the owner has [`Upload::PER_OWNER`] being read or the
    /// server [`Upload::IN_ALL`]: 40 uploads stalled one byte short held
    /// 910 MB for their minute, and nothing bounded how many.
    pub(crate) fn upload(&self, owner: &str) -> Option<Upload> {
        Upload::take(&self.uploads, owner)
    }

    pub(crate) fn peer_failures(&self) -> std::sync::MutexGuard<'_, PeerFailures> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fixed window of one minute per token.
    fn check_rate(&self, token_id: &str) -> Result<(), ApiError> {
        self.check_rate_with(token_id, self.rate_per_minute)
    }

    /// A fixed window of one minute per key, at most `limit` in it.
    fn check_rate_with(&self, token_id: &str, limit: u32) -> Result<(), ApiError> {
        let mut limits = self
            .limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        // Windows that have passed are dropped now and then, so the table
        // holds at most the keys seen in the last minute (webhook names
        // are keys too, and anyone may send those).
        if limits.len() >= 1024 {
            limits.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(60));
        }
        let slot = limits.entry(token_id.to_string()).or_insert((now, 0));
        if now.duration_since(slot.0) >= Duration::from_secs(60) {
            *slot = (now, 0);
        }
        slot.1 += 1;
        if slot.1 > limit {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("more than {limit} requests in a minute with this token"),
            ));
        }
        Ok(())
    }
}

/// A failure, as the API says it: a status and
/// `{"error":{"kind","message"}}` (the shape of the CLI's `--json`).
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    fn unauthorized(message: &str) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    fn not_found(what: &str) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no {what}"))
    }

    fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "usage", message)
    }
}

impl From<loop_runtime::Error> for ApiError {
    fn from(e: loop_runtime::Error) -> Self {
        match e.kind {
            // (A task the caller named that is not there is found out by
            // `visible` first, as a 404 that reveals nothing.)
            loop_runtime::ErrorKind::Usage | loop_runtime::ErrorKind::NotFound => {
                ApiError::bad_request(e.message)
            }
            loop_runtime::ErrorKind::Conflict => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.message)
            }
            loop_runtime::ErrorKind::Unavailable => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.message)
            }
            loop_runtime::ErrorKind::Internal => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.message)
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = loop_runtime::views::ErrorBody {
            error: loop_runtime::views::ApiFailure {
                kind: self.kind,
                message: &self.message,
            },
        };
        (self.status, axum::Json(body)).into_response()
    }
}

/// Run `f` on a blocking thread (the store, the files, the sandbox), its
/// store writes ahead of the tasks' own (someone waits for the answer).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(|| loop_store::answering(f))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("a worker thread failed: {e}"),
            )
        })?
}

/// The router, over `state`: bodies capped at 1 MiB, and every request
/// but an event stream answered within 60 s.
pub fn router(state: AppState) -> axum::Router {
    // MCP over streamable HTTP, behind the same tokens.
    let mcp = axum::Router::new()
        .fallback_service(mcp::http_service(state.clone()))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            mcp::authenticate,
        ));
    api::routes()
        .nest_service("/mcp", mcp)
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            not_prepared_yet,
        ))
        .layer(axum::middleware::from_fn(time_limit))
        .layer(axum::extract::DefaultBodyLimit::max(1 << 20))
        .layer(axum::middleware::from_fn(no_store))
        .with_state(state)
}

/// A route of a task that was answered but is not stored yet (waiting for
/// its preparation, being prepared, or refused in it) is no 404: the task
/// the answer named exists. It is a 409 saying where its preparation
/// stands, or the refusal its preparation ended with.
async fn not_prepared_yet(
    axum::extract::State(s): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let id = req
        .uri()
        .path()
        .strip_prefix("/api/v1/tasks/")
        .and_then(|rest| rest.split('/').next())
        .filter(|id| !id.is_empty())
        .map(str::to_string);
    let headers = req.headers().clone();
    let r = next.run(req).await;
    let Some(id) =
        id.filter(|id| r.status() == StatusCode::NOT_FOUND && s.prestart.state(id, None).is_some())
    else {
        return r;
    };
    let Ok(caller) = s.caller(&headers, loop_runtime::Scope::Read).await else {
        return r;
    };
    let owner = (caller.scope != loop_runtime::Scope::Admin).then_some(caller.owner.as_str());
    match s.prestart.state(&id, owner) {
        None => r,
        Some(prestart::State::Refused(status, kind, message)) => ApiError::new(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            prestart::kind_name(&kind),
            message,
        )
        .into_response(),
        Some(state) => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "task {id} is {} (its preparation comes first); its status says when it starts",
                state.name()
            ),
        )
        .into_response(),
    }
}

/// Every answer holds task data or a token's view of it: no cache (a
/// browser's, a proxy's) keeps one.
async fn no_store(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut r = next.run(req).await;
    r.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    r
}

/// `req` with its body read whole (at most 1 MiB) within `limit`; else
/// the answer that refuses it (413, or 503 once the limit is over).
pub(crate) async fn body_within(
    req: axum::extract::Request,
    limit: Duration,
) -> Result<axum::extract::Request, Response> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the body is over 1 MiB, or could not be read",
        )
        .into_response()
    };
    // Said at once when its declared length says more, before any of it
    // is read.
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > 1 << 20) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(limit, axum::body::to_bytes(body, 1 << 20)).await {
        Ok(Ok(bytes)) => Ok(axum::extract::Request::from_parts(
            parts,
            axum::body::Body::from(bytes),
        )),
        Ok(Err(_)) => Err(too_large()),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            format!(
                "the request's body took more than {} s",
                limit.as_secs_f64()
            ),
        )
        .into_response()),
    }
}

/// A request that takes more than 60 s is answered 503 (an event stream,
/// which lasts as long as its task, is exempt). Refusals the framework
/// makes itself (a body over the limit, a method a route does not take)
/// are said in the API's own shape too.
async fn time_limit(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    // An event stream lasts as long as its task; an MCP call may wait on
    // one (`wait`), and its session's stream stays open.
    if req.method() == axum::http::Method::GET && req.uri().path().ends_with("/stream") {
        return next.run(req).await;
    }
    if req.uri().path() == "/mcp" {
        // Its answer may last; its body is read within the limit once its
        // caller is known (`mcp::authenticate`).
        return next.run(req).await;
    }
    let r = match tokio::time::timeout(Duration::from_secs(60), next.run(req)).await {
        Ok(r) => r,
        Err(_) => {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                "the request took more than 60 s",
            )
            .into_response();
        }
    };
    let plain = !r
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE if plain => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the body is over 1 MiB",
        )
        .into_response(),
        StatusCode::METHOD_NOT_ALLOWED if plain => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take that method (see /openapi.json)",
        )
        .into_response(),
        _ => r,
    }
}

/// Any path no route serves.
async fn no_route() -> Response {
    ApiError::not_found("such route (see /openapi.json)").into_response()
}

/// How long a connection may take to send a request's head: the first
/// one, and each next one on a kept-alive connection, so a half-sent
/// request and an idle connection both go. Only the time before a head is
/// read counts: a request being answered, an event stream (a keep-alive
/// every 15 s) and a long wait are not cut.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(15);

/// Serve `listener` until SIGTERM or Ctrl-C. Tasks the project has that an
/// earlier server left interrupted are taken up first.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: AppState,
) -> Result<(), loop_runtime::Error> {
    serve_on_with(listener, state, HEAD_TIMEOUT).await
}

/// [`serve_on`] with a request head's time limit of `head_timeout`.
pub async fn serve_on_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    head_timeout: Duration,
) -> Result<(), loop_runtime::Error> {
    // The store is never asked on the executor (a PostgreSQL store's
    // client blocks on a runtime of its own).
    let first = state.clone();
    // Said on standard output, never failing the server when nobody reads
    // it any more (a caller may read only the first line).
    let say = |line: String| {
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), "{line}");
    };
    let drafts = state.drafts.clone();
    match tokio::task::spawn_blocking(move || drafts::restore(&drafts)).await {
        Ok(0) => {}
        Ok(n) => say(format!("{n} drafted contract(s) wait for their answer")),
        Err(e) => tracing::warn!("taking up kept drafts: {e}"),
    }
    // Tasks an earlier server answered and did not prepare (it stopped or
    // died first): prepared here now, before new requests are taken.
    let restored = submissions::restore(&state).await;
    if restored.prepared > 0 {
        say(format!(
            "took up {} task(s) answered but not yet prepared",
            restored.prepared
        ));
    }
    match tokio::task::spawn_blocking(move || api::resume_interrupted(&first)).await {
        Ok((taken, 0)) if taken > 0 => say(format!("took up {taken} interrupted task(s)")),
        Ok((taken, left)) if left > 0 => say(format!(
            "took up {taken} interrupted task(s); left {left} the command line started (`loop resume ID` takes one up, `loop serve --adopt-cli-tasks` all)"
        )),
        Ok(_) => {}
        Err(e) => tracing::warn!("resuming interrupted tasks: {e}"),
    }
    tokio::spawn(api::schedules(state.clone()));
    tokio::spawn(submissions::tend(state.clone()));
    tokio::spawn(give_back_memory());
    let (tx, rx) = tokio::sync::watch::channel(false);
    let app = router(state);
    let accept = accept_loop(listener, app, head_timeout, rx);
    // On the signal, open requests get two seconds; event streams of
    // running tasks would otherwise hold the process up until the tasks end.
    let deadline = async move {
        shutdown().await;
        let _ = tx.send(true);
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    tokio::select! {
        () = accept => Ok(()),
        () = deadline => Ok(()),
    }
}

/// Accept and serve connections on `listener` for ever: the server's own
/// loop (axum's has no timer, so no limit on a request head). Each
/// connection is HTTP/1 whose request heads must come within
/// `head_timeout`, its peer's address given to the handlers as
/// `ConnectInfo`; once `stop` turns true, each finishes what it answers.
pub(crate) async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    head_timeout: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: wait, then go on.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let inner = hyper_util::service::TowerToHyperService::new(app.clone());
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                hyper::service::Service::call(&inner, req.map(axum::body::Body::new))
            });
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(head_timeout);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            // (The watch's guard is dropped at once: it is not `Send`.)
            let stopped = async move {
                let _ = stop.wait_for(|stop| *stop).await.map(|_| ());
            };
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stopped => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// Every 10 s, hand the memory the allocator keeps after freeing back to
/// the system. Tasks are prepared and run on many threads; glibc keeps what
/// each thread's arena freed, and a server that had taken 10,000 tasks was
/// seen holding 450 MiB of it (docs/benchmark-history.md).
async fn give_back_memory() {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        let _ = tokio::task::spawn_blocking(|| {
            // SAFETY: malloc_trim only returns free memory to the system.
            unsafe { libc::malloc_trim(0) }
        })
        .await;
    }
}

/// SIGTERM or Ctrl-C.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// `loop serve`: bind, say where, serve until told to stop. Returns when
/// the server has stopped (the caller ends the process: tasks still
/// running are left interrupted, to be resumed).
pub fn serve(opts: &ServeOptions) -> Result<(), loop_runtime::Error> {
    let runtime = Runtime::open(&opts.project)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| loop_runtime::Error::internal(format!("the async runtime: {e}")))?;
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(opts.addr)
            .await
            .map_err(|e| {
                loop_runtime::Error::usage(format!("cannot listen on {}: {e}", opts.addr))
            })?;
        let local = listener
            .local_addr()
            .map_err(|e| loop_runtime::Error::internal(e.to_string()))?;
        // One line (a caller may read only the first): where, and where
        // tasks go.
        let (state, queued) = match &opts.queue {
            Some((url, qopts)) => {
                let queue = loop_store::RedisQueue::open(url, qopts.clone())
                    .map_err(|e| loop_runtime::Error::usage(e.to_string()))?;
                let to = format!("; tasks go to the workers' queue `{}` at {}", qopts.name, queue.url());
                (AppState::with_queue(runtime.clone(), opts.rate_per_minute, opts.jobs, queue), to)
            }
            None => (AppState::new(runtime.clone(), opts.rate_per_minute, opts.jobs), String::new()),
        };
        let state = state.adopting_cli_tasks(opts.adopt_cli_tasks);
        println!(
            "serving {} at http://{local} (API /api/v1, OpenAPI /openapi.json){queued}; Ctrl-C stops",
            runtime.project().display()
        );
        serve_on(listener, state).await
    });
    // Blocking work still in progress (a baseline, a cancel waiting) is
    // not waited for: the process ends, its tasks stay resumable.
    rt.shutdown_background();
    served
}

/// Before the unit tests' `main` (one thread, the environment not yet
/// read): the runtime's state and its tasks' workspaces, for the tests
/// that run tasks in this process, go under the temp directory (this
/// process's own, removed at its exit), never the person's
/// `~/.local/state`.
#[cfg(test)]
mod own_state {
    #[used]
    #[unsafe(link_section = ".init_array")]
    static OWN_STATE: extern "C" fn() = own_state;

    fn state() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("loop-server-state-{}", std::process::id()))
    }

    extern "C" fn own_state() {
        // SAFETY: called from `.init_array`, before `main` and so before
        // any thread exists or anything reads the environment; `gone` is
        // a function that lives as long as the process.
        unsafe {
            std::env::set_var("LOOP_STATE_DIR", state());
            // The workspaces beside it, whatever the person set.
            std::env::remove_var("LOOP_WORKSPACES_DIR");
            libc::atexit(gone);
        }
    }

    #[allow(clippy::disallowed_methods)] // the tests' own state, no project's
    extern "C" fn gone() {
        let state = state();
        let _ = std::fs::remove_dir_all(state.with_file_name(format!(
            "loop-server-state-{}-workspaces",
            std::process::id()
        )));
        let _ = std::fs::remove_dir_all(state);
    }
}

#[cfg(test)]
mod peer_failures {
    use super::PeerFailures;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[test]
    fn a_peer_past_its_allowance_is_blocked_and_the_table_never_outgrows_its_cap() {
        let mut f = PeerFailures::default();
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        for _ in 0..3 {
            f.fail(a);
        }
        assert!(!f.blocked(a, 3));
        f.fail(a);
        assert!(f.blocked(a, 3));
        assert!(!f.blocked(b, 3), "another address is not blocked");
        for i in 0..(PeerFailures::CAP as u128 + 500) {
            f.fail(IpAddr::V6(Ipv6Addr::from(i)));
        }
        assert!(f.len() <= PeerFailures::CAP, "{}", f.len());
    }
}

#[cfg(test)]
mod bodies {
    use super::body_within;
    use std::time::Duration;

    /// An MCP request's body that never ends is refused once its limit is
    /// over (it held its connection for good); one sent whole passes on
    /// with its bytes; one over 1 MiB is a 413.
    #[test]
    fn a_body_is_read_within_its_limit_or_refused() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let never = axum::body::Body::from_stream(futures_util::stream::pending::<
                Result<axum::body::Bytes, std::io::Error>,
            >());
            let req = axum::extract::Request::post("/mcp").body(never).unwrap();
            let started = std::time::Instant::now();
            let refused = body_within(req, Duration::from_millis(200))
                .await
                .unwrap_err();
            assert_eq!(
                refused.status(),
                axum::http::StatusCode::SERVICE_UNAVAILABLE
            );
            assert!(started.elapsed() < Duration::from_secs(5));
            let whole = axum::extract::Request::post("/mcp")
                .body(axum::body::Body::from("{\"jsonrpc\":\"2.0\"}"))
                .unwrap();
            let read = body_within(whole, Duration::from_millis(200))
                .await
                .unwrap();
            let bytes = axum::body::to_bytes(read.into_body(), 1 << 20)
                .await
                .unwrap();
            assert_eq!(&bytes[..], b"{\"jsonrpc\":\"2.0\"}");
            let large = axum::extract::Request::post("/mcp")
                .body(axum::body::Body::from(vec![b' '; (1 << 20) + 1]))
                .unwrap();
            let refused = body_within(large, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert_eq!(refused.status(), axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        });
    }
}

#[cfg(test)]
mod uploads {
    use super::Upload;

    /// Uploads being read are bounded per owner and in all; a finished
    /// one (dropped) gives its place back.
    #[test]
    fn uploads_being_read_are_bounded_per_owner_and_in_all() {
        let table = std::sync::Arc::default();
        let alice: Vec<Upload> = (0..Upload::PER_OWNER)
            .map(|_| Upload::take(&table, "alice").unwrap())
            .collect();
        assert!(Upload::take(&table, "alice").is_none());
        let others: Vec<Upload> = (0..Upload::IN_ALL - Upload::PER_OWNER)
            .map(|i| Upload::take(&table, &format!("o{}", i % 3)).unwrap())
            .collect();
        assert!(Upload::take(&table, "bob").is_none(), "the server's bound");
        drop(alice);
        assert!(Upload::take(&table, "alice").is_some());
        drop(others);
        assert!(table.lock().unwrap().is_empty(), "every place given back");
    }
}
