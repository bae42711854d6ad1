//! `loop mcp`: Loop Engine as a Model Context Protocol server, over stdio
//! (`loop mcp`) and streamable HTTP (`/mcp` under `loop serve`, behind the
//! API's bearer tokens), on the official SDK (`rmcp`).
//!
//! Another agent delegates "do X until these checks pass, and prove it":
//! the tools are the API's operations, done by the same code (a task
//! started here is the API's task: the same store, pool, drafts, owner
//! rules and receipts). Resources are each task's receipt, ledger and
//! change set. `run_task` and `task_status` with `wait` send a progress
//! notification per recorded event until the task ends or waits for a
//! person.

use crate::service::{self, Answer, Confirm, NewTask};
use crate::{ApiError, AppState};
use loop_runtime::views::{
    AnswerBody, AnswerFields, AnsweredBody, ApiFailure, DraftBody, ErrorBody, EventsBody,
    RecordedBody, VerifyBody, WaitedBody,
};
use loop_runtime::{Caller, Scope};
use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The MCP server: the API's state, and who the caller is when the
/// transport says nothing of it (stdio: the person who started `loop mcp`).
#[derive(Clone)]
pub struct LoopMcp {
    state: AppState,
    local: Option<Caller>,
}

impl LoopMcp {
    /// Over stdio: the local user, with every right the command line has.
    pub fn local(state: AppState) -> Self {
        LoopMcp {
            state,
            local: Some(Caller {
                owner: "mcp".into(),
                scope: Scope::Admin,
                token_id: "stdio".into(),
            }),
        }
    }

    /// Over HTTP: each request's caller is the one its bearer token names
    /// (put on the request by [`authenticate`]).
    pub fn remote(state: AppState) -> Self {
        LoopMcp { state, local: None }
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>, need: Scope) -> Result<Caller, McpError> {
        let caller = match &self.local {
            Some(c) => c.clone(),
            None => ctx
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Caller>())
                .cloned()
                .ok_or_else(|| McpError::invalid_request("no authenticated caller", None))?,
        };
        if caller.scope < need {
            return Err(McpError::invalid_request(
                format!(
                    "this needs a `{}` token; this one is `{}`",
                    need.as_str(),
                    caller.scope.as_str()
                ),
                None,
            ));
        }
        Ok(caller)
    }
}

/// The longest a `wait` may last.
const MAX_WAIT_SECS: u64 = 3600;

/// The tools: (name, description, input schema properties, required, read-only).
fn tool_list() -> Vec<Tool> {
    let id = json!({"type": "string", "description": "the task id"});
    let wait = json!({"type": "boolean", "description": "wait until the task ends or waits for a person, sending a progress notification per recorded event (with a progress token)"});
    let wait_secs = json!({"type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECS, "description": "the longest to wait (default 600)"});
    let tools = [
        (
            "run_task",
            "Start a task: an instruction with acceptance checks (shell commands that must exit 0 on a fresh copy of the result), or a contract in YAML. An instruction alone is drafted into a contract that waits for `answer`. Returns the task id (or the draft id).",
            json!({
                "instruction": {"type": "string"},
                "checks": {"type": "array", "items": {"type": "string"}},
                "artifacts": {"type": "array", "items": {"type": "string"}, "description": "files that must exist at the end"},
                "contract": {"type": "string", "description": "a contract in YAML"},
                "model": {"type": "string", "description": "openai:MODEL, anthropic:MODEL, scripted:PATH or replay:PATH (a path inside the project); default the Loopfile's maker"},
                "max_steps": {"type": "integer", "minimum": 1},
                "max_tokens": {"type": "integer", "minimum": 1},
                "budget_usd": {"type": "number", "minimum": 0},
                "timeout_secs": {"type": "integer", "minimum": 1},
                "allow_vacuous": {"type": "boolean", "description": "keep checks that pass on an empty workspace (they prove nothing about the project, and are refused without this); recorded in the contract"},
                "skills": {"type": "array", "maxItems": 8, "items": {"type": "string"}, "description": "skills the task uses (the `skills` tool lists them), each verified and narrowed to what the project gives a task"},
                "wait": wait,
                "wait_secs": wait_secs,
            }),
            vec!["instruction"],
            false,
        ),
        (
            "task_status",
            "A task's state or outcome, budgets used, approvals and receipt; or a draft's (an id `d-…`): its proposed contract, or the task it started.",
            json!({"id": id, "wait": wait, "wait_secs": wait_secs}),
            vec!["id"],
            true,
        ),
        (
            "task_events",
            "A task's recorded events (its ledger), from event `since` on.",
            json!({"id": id, "since": {"type": "integer", "minimum": 0, "description": "the first event wanted (default 0: all)"}}),
            vec!["id"],
            true,
        ),
        (
            "approve",
            "Answer the question a task waits on (a command under a `prompt` rule, a checkpoint): approve, or deny with a message.",
            json!({
                "id": id,
                "deny": {"type": "boolean"},
                "message": {"type": "string"},
                "approval_id": {"type": "string", "description": "the question answered: the answer counts only if it is still the one waiting"}
            }),
            vec!["id"],
            false,
        ),
        (
            "answer",
            "Answer a drafted contract: accept it (the task starts), send an edited contract (judged again), or reject it.",
            json!({
                "draft": {"type": "string", "description": "the draft id `d-…`"},
                "reject": {"type": "boolean"},
                "contract": {"type": "string", "description": "the edited contract (YAML or JSON)"}
            }),
            vec!["draft"],
            false,
        ),
        (
            "verify_receipt",
            "Check a task's receipt offline: its signature, statement, hash-chained ledger and artifacts.",
            json!({"id": id}),
            vec!["id"],
            true,
        ),
        (
            "diff",
            "A task's change set: from its receipt once it has ended, else its workspace now.",
            json!({"id": id}),
            vec!["id"],
            true,
        ),
        (
            "memory",
            "The project's memory: notes later tasks are given. `list` them (yours and the project's), `show` one, `add` one of yours (text, about), `approve` a quarantined one or `forget` one (id).",
            json!({
                "action": {"enum": ["list", "show", "add", "approve", "forget"]},
                "text": {"type": "string", "description": "the note (add)"},
                "about": {"type": "array", "items": {"type": "string"}, "description": "paths or topics it is about (add)"},
                "id": {"type": "string", "description": "the note (show, approve, forget)"}
            }),
            vec!["action"],
            false,
        ),
        (
            "skills",
            "The skills tasks of this project may use, each judged: signed by a trusted key, the project's own pattern, or why it is refused.",
            json!({}),
            vec![],
            true,
        ),
    ];
    tools
        .into_iter()
        .map(|(name, description, properties, required, read_only)| {
            let schema = json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            });
            let Value::Object(schema) = schema else {
                unreachable!("a schema is an object")
            };
            Tool::new(name, description, Arc::new(schema))
                .with_annotations(ToolAnnotations::new().read_only(read_only))
        })
        .collect()
}

/// The arguments of a call, as an object.
fn args_of(req: &CallToolRequestParams) -> serde_json::Map<String, Value> {
    req.arguments.clone().unwrap_or_default()
}

/// Read `args` as `T` (unknown keys refused, naming them).
fn parse<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: serde_json::Map<String, Value>,
) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ApiError::bad_request(format!("invalid arguments for `{tool}`: {e}")))
}

/// Take the waiting options out of `args`.
fn take_wait(args: &mut serde_json::Map<String, Value>) -> Result<Option<Duration>, ApiError> {
    let wait = match args.remove("wait") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "wait must be true or false, not {other}"
            )));
        }
    };
    let secs = match args.remove("wait_secs") {
        None | Some(Value::Null) => 600,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_WAIT_SECS).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "wait_secs must be a whole number from 1 to {MAX_WAIT_SECS}, not {v}"
                ))
            })?,
    };
    Ok(wait.then(|| Duration::from_secs(secs)))
}

/// A string argument that must be there.
fn required_str(
    tool: &str,
    args: &mut serde_json::Map<String, Value>,
    key: &str,
) -> Result<String, ApiError> {
    match args.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid arguments for `{tool}`: `{key}` must be a string, not {other}"
        ))),
        None => Err(ApiError::bad_request(format!(
            "invalid arguments for `{tool}`: `{key}` is required"
        ))),
    }
}

/// No argument is left that the tool does not take.
fn no_more(tool: &str, args: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    match args.keys().next() {
        Some(k) => Err(ApiError::bad_request(format!(
            "invalid arguments for `{tool}`: unknown argument `{k}`"
        ))),
        None => Ok(()),
    }
}

/// One line saying what a recorded event was, for a progress message.
fn event_line(r: &loop_runtime::Recorded) -> String {
    use loop_protocol::{Event, ObservationStatus};
    let kind = r.event.kind();
    let detail = match &r.event {
        Event::Transition { to, .. } => Some(to.to_string()),
        Event::Intent { tool, .. } => Some(tool.clone()),
        Event::Observed { observation, .. } => Some(format!(
            "{} {}",
            observation.tool,
            match observation.status {
                ObservationStatus::Ok => "ok",
                ObservationStatus::Refused { .. } => "refused",
                ObservationStatus::Error => "error",
            }
        )),
        Event::ApprovalRequested { detail, .. } => Some(detail.clone()),
        Event::Delegated { child, .. } => Some(format!(
            "child {} {} ({} steps, {} tokens, ${:.4})",
            child.task_id, child.outcome, child.used.steps, child.used.tokens, child.used.usd
        )),
        Event::Verified { accepted, .. } => Some(
            if *accepted {
                "accepted"
            } else {
                "not accepted"
            }
            .to_string(),
        ),
        Event::Finished { outcome, .. } => Some(outcome.kind.name().to_string()),
        _ => None,
    };
    match detail {
        Some(d) => format!("#{} {kind}: {d}", r.seq),
        None => format!("#{} {kind}", r.seq),
    }
}

impl LoopMcp {
    /// Wait for task `id` to end (or wait for a person, or `limit` to
    /// pass), sending a progress notification per recorded event when the
    /// client gave a progress token; then its status.
    async fn wait_for(
        &self,
        caller: &Caller,
        id: &str,
        limit: Duration,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ApiError> {
        let token = ctx.meta.get_progress_token();
        let deadline = tokio::time::Instant::now() + limit;
        let mut since = 0u64;
        // A task nobody runs for this long (its runtime gone, not queued
        // here) is not waited on further.
        let mut idle_since: Option<tokio::time::Instant> = None;
        loop {
            let events =
                service::recorded(&self.state, caller.clone(), id.to_string(), since).await?;
            let fresh: Vec<_> = events.into_iter().filter(|e| e.seq >= since).collect();
            for e in &fresh {
                // `since` is the first event not yet sent.
                since = e.seq + 1;
                if let Some(t) = &token {
                    let p = ProgressNotificationParam::new(t.clone(), e.seq as f64)
                        .with_message(event_line(e));
                    // A client gone away ends the wait below (cancelled).
                    let _ = ctx.peer.notify_progress(p).await;
                }
            }
            let standing =
                service::standing_of(&self.state, caller.clone(), id.to_string()).await?;
            let status = standing.view(self.state.runtime.project());
            if let Some(why) = standing.settled_or_waiting() {
                // What was recorded between the two reads is sent too.
                let rest =
                    service::recorded(&self.state, caller.clone(), id.to_string(), since).await?;
                for e in &rest {
                    if let Some(t) = &token {
                        let p = ProgressNotificationParam::new(t.clone(), e.seq as f64)
                            .with_message(event_line(e));
                        let _ = ctx.peer.notify_progress(p).await;
                    }
                }
                return said(&WaitedBody {
                    body: status,
                    waited: why,
                });
            }
            let idle = standing.idle();
            let now = tokio::time::Instant::now();
            match (idle, idle_since) {
                (false, _) => idle_since = None,
                (true, None) => idle_since = Some(now),
                (true, Some(t)) if now.duration_since(t) > Duration::from_secs(10) => {
                    return said(&WaitedBody {
                        body: status,
                        waited: "interrupted: no runtime has run it for 10 s (`loop resume`)",
                    });
                }
                (true, Some(_)) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return said(&WaitedBody {
                    body: status,
                    waited: "the wait ran out; the task goes on",
                });
            }
            tokio::select! {
                () = ctx.ct.cancelled() => {
                    return said(&WaitedBody {
                        body: status,
                        waited: "the call was cancelled; the task goes on",
                    });
                }
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    async fn call(
        &self,
        req: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Value, ApiError> {
        let tool = req.name.to_string();
        let mut args = args_of(&req);
        let s = &self.state;
        // What changes something needs `run`, as over REST: a task, an
        // answer, and a memory note added, approved or forgotten.
        let changes_memory = tool == "memory"
            && args
                .get("action")
                .and_then(Value::as_str)
                .is_some_and(|a| matches!(a, "add" | "approve" | "forget"));
        let need = match tool.as_str() {
            "run_task" | "approve" | "answer" => Scope::Run,
            _ if changes_memory => Scope::Run,
            _ => Scope::Read,
        };
        let caller = self.caller(ctx, need).map_err(|e| {
            ApiError::new(axum::http::StatusCode::FORBIDDEN, "forbidden", e.message)
        })?;
        match tool.as_str() {
            "run_task" => {
                let wait = take_wait(&mut args)?;
                let body: NewTask = parse(&tool, args)?;
                let created = service::create_task(
                    s,
                    caller.clone(),
                    body,
                    loop_runtime::Via::Mcp,
                    s.prestart.answer_within,
                )
                .await?;
                match (wait, created.task()) {
                    (Some(limit), Some(id)) => self.wait_for(&caller, id, limit, ctx).await,
                    _ => said(&created.body()),
                }
            }
            "task_status" => {
                let wait = take_wait(&mut args)?;
                let id = required_str(&tool, &mut args, "id")?;
                no_more(&tool, &args)?;
                if id.starts_with("d-") {
                    let (state, notes) = service::draft_view(s, &caller, &id)?;
                    return said(&DraftBody {
                        state,
                        id: &id,
                        notes: &notes,
                    });
                }
                match wait {
                    Some(limit) => self.wait_for(&caller, &id, limit, ctx).await,
                    None => {
                        let standing = service::standing_of(s, caller, id).await?;
                        said(&standing.view(s.runtime.project()))
                    }
                }
            }
            "task_events" => {
                let id = required_str(&tool, &mut args, "id")?;
                let since = match args.remove("since") {
                    None | Some(Value::Null) => 0,
                    Some(v) => v.as_u64().ok_or_else(|| {
                        ApiError::bad_request(format!("since must be a whole number, not {v}"))
                    })?,
                };
                no_more(&tool, &args)?;
                let recorded = service::recorded(s, caller, id, since).await?;
                said(&EventsBody::of(&recorded))
            }
            "approve" => {
                let id = required_str(&tool, &mut args, "id")?;
                let answer: Answer = parse(&tool, args)?;
                let (a, message) =
                    service::approve_task(s, caller, id.clone(), answer, "MCP").await?;
                said(&AnswerBody {
                    id: &id,
                    answer: AnswerFields::of(&a, message.as_deref()),
                })
            }
            "answer" => {
                let draft = required_str(&tool, &mut args, "draft")?;
                let c: Confirm = parse(&tool, args)?;
                service::confirm_draft(s, &caller, &draft, c)?;
                said(&AnsweredBody {
                    id: &draft,
                    answered: true,
                })
            }
            "verify_receipt" => {
                let id = required_str(&tool, &mut args, "id")?;
                no_more(&tool, &args)?;
                let check = service::receipt_check(s, caller, id.clone()).await?;
                said(&VerifyBody::of(&id, &check))
            }
            "diff" => {
                let id = required_str(&tool, &mut args, "id")?;
                no_more(&tool, &args)?;
                let d = service::change_set_of(s, caller, id.clone()).await?;
                said(&service::diff_body(s.runtime.project(), &id, &d))
            }
            "memory" => memory_call(s, caller, &tool, args).await,
            "skills" => {
                no_more(&tool, &args)?;
                said(&json!({"skills": service::skills_list(s).await?}))
            }
            other => Err(ApiError::bad_request(format!(
                "there is no tool `{other}` (run_task, task_status, task_events, approve, answer, verify_receipt, diff, memory, skills)"
            ))),
        }
    }

    /// A resource's text: (MIME type, text).
    async fn resource(&self, caller: Caller, uri: &str) -> Result<(String, String), McpError> {
        let not_found = || {
            McpError::resource_not_found(
                format!("no resource {uri} (loop://tasks/ID/receipt, /ledger or /changes)"),
                None,
            )
        };
        let rest = uri.strip_prefix("loop://tasks/").ok_or_else(not_found)?;
        let (id, what) = rest.split_once('/').ok_or_else(not_found)?;
        let id = id.to_string();
        let internal = |e: ApiError| match e.kind {
            "not_found" => not_found(),
            _ => McpError::internal_error(e.message, None),
        };
        match what {
            "receipt" => {
                let rt = self.state.runtime.clone();
                service::blocking(move || {
                    let t = service::visible(&rt, &caller, &id)?;
                    let path = service::receipt_of(&rt, &t)?;
                    loop_receipt::read::read_regular(&path, 64 << 20)
                        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
                        .map(|text| ("application/json".to_string(), text))
                        .map_err(|e| {
                            ApiError::new(
                                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                                "internal",
                                format!("the receipt of {id}: {e}"),
                            )
                        })
                })
                .await
                .map_err(internal)
            }
            "ledger" => {
                let events = service::recorded(&self.state, caller, id, 0)
                    .await
                    .map_err(internal)?;
                let mut text = String::new();
                for r in events {
                    text.push_str(&said(&RecordedBody::of(&r)).map_err(internal)?.to_string());
                    text.push('\n');
                }
                Ok(("application/x-ndjson".to_string(), text))
            }
            "changes" => {
                let d = service::change_set_of(&self.state, caller, id)
                    .await
                    .map_err(internal)?;
                Ok(("text/x-diff".to_string(), d.change_set.patch))
            }
            _ => Err(not_found()),
        }
    }
}

/// Tasks listed as resources at once (the newest).
const LISTED: usize = 100;

impl ServerHandler for LoopMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("loop-engine", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Loop Engine runs a task until every acceptance check passes on a fresh copy of the result, inside a sandbox, and signs a receipt of it. Start one with run_task (an instruction and checks), follow it with task_status (wait: true streams progress), answer its questions with approve, and check its receipt with verify_receipt.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tool_list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let result = match self.call(request, &context).await {
            Ok(v) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(v);
                r
            }
            Err(e) => {
                // Strings only: it is always said.
                let v = said(&ErrorBody {
                    error: ApiFailure {
                        kind: e.kind,
                        message: &e.message,
                    },
                })
                .unwrap_or_default();
                let mut r = CallToolResult::error(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(v);
                r
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let caller = self.caller(&context, Scope::Read)?;
        let rt = self.state.runtime.clone();
        let tasks = service::blocking(move || {
            let mut seen: Vec<_> = rt
                .tasks()?
                .into_iter()
                .filter(|t| caller.may_see(t.owner.as_deref()))
                .collect();
            seen.truncate(LISTED);
            Ok(seen)
        })
        .await
        .map_err(|e| McpError::internal_error(e.message, None))?;
        let mut out = Vec::new();
        for t in tasks {
            let id = &t.id;
            if t.receipt.is_some() {
                out.push(
                    Resource::new(
                        format!("loop://tasks/{id}/receipt"),
                        format!("{id} receipt"),
                    )
                    .with_mime_type("application/json")
                    .with_description("the signed DSSE/in-toto receipt"),
                );
            }
            out.push(
                Resource::new(format!("loop://tasks/{id}/ledger"), format!("{id} ledger"))
                    .with_mime_type("application/x-ndjson")
                    .with_description("the recorded events, one JSON object a line"),
            );
            out.push(
                Resource::new(
                    format!("loop://tasks/{id}/changes"),
                    format!("{id} changes"),
                )
                .with_mime_type("text/x-diff")
                .with_description("the change set as a unified diff"),
            );
        }
        Ok(ListResourcesResult::with_all_items(out))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let t = |what: &str, mime: &str, description: &str| {
            ResourceTemplate::new(
                format!("loop://tasks/{{id}}/{what}"),
                format!("task {what}"),
            )
            .with_mime_type(mime)
            .with_description(description)
        };
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            t(
                "receipt",
                "application/json",
                "a task's signed DSSE/in-toto receipt",
            ),
            t(
                "ledger",
                "application/x-ndjson",
                "a task's recorded events, one JSON object a line",
            ),
            t(
                "changes",
                "text/x-diff",
                "a task's change set as a unified diff",
            ),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let caller = self.caller(&context, Scope::Read)?;
        let (mime, text) = self.resource(caller, &request.uri).await?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri.clone()).with_mime_type(mime),
        ])
        .into())
    }
}

/// Serve MCP over this process's standard input and output until the
/// client closes it. Nothing else may write to standard output: it is
/// moved to a descriptor of the protocol's own, and descriptor 1 then
/// goes to standard error (where anything a library prints ends up).
pub fn serve_stdio(project: &std::path::Path, jobs: usize) -> Result<(), loop_runtime::Error> {
    use std::os::fd::FromRawFd;
    // SAFETY: dup of our own standard output, then dup2 of standard error
    // over it; both descriptors stay open for the life of the process.
    let protocol_out = unsafe {
        let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            return Err(loop_runtime::Error::internal(format!(
                "cannot set standard output aside: {}",
                std::io::Error::last_os_error()
            )));
        }
        std::fs::File::from_raw_fd(fd)
    };
    let runtime = loop_runtime::Runtime::open(project)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| loop_runtime::Error::internal(format!("the async runtime: {e}")))?;
    let served = rt.block_on(async move {
        use rmcp::ServiceExt;
        // Interrupted tasks are not taken up here: a client that only
        // looks would otherwise start every one of the project's (and end
        // them mid-step when it goes); `loop resume` does that.
        let state = AppState::new(runtime, u32::MAX, jobs);
        let out = tokio::fs::File::from_std(protocol_out);
        let service = LoopMcp::local(state)
            .serve((tokio::io::stdin(), out))
            .await
            .map_err(|e| loop_runtime::Error::internal(format!("MCP over stdio: {e}")))?;
        service
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| loop_runtime::Error::internal(format!("MCP over stdio: {e}")))
    });
    rt.shutdown_background();
    served
}

/// The streamable HTTP service at `/mcp`, over `state` (each request
/// authenticated by [`authenticate`] first).
pub fn http_service(
    state: AppState,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    LoopMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    // Every request needs a bearer token (which a page that rebinds a
    // name to this server cannot send), so the Host header is not
    // limited to loopback names: a server behind its own name works.
    let config = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
        .disable_allowed_hosts();
    // A session idle past the limit goes, here as in the table the caps
    // are counted in.
    let sessions =
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default();
    let mut sessions = sessions;
    sessions.session_config.keep_alive = Some(Sessions::IDLE);
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(LoopMcp::remote(state.clone())),
        std::sync::Arc::new(sessions),
        config,
    )
}

/// The MCP sessions open over HTTP: each made by a token's `initialize`,
/// used since, and gone once closed (`DELETE`) or idle past
/// [`Sessions::IDLE`]. A token may hold [`Sessions::PER_TOKEN`] at once and
/// the server [`Sessions::TOTAL`]; past either, `initialize` is a 429.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Session id → (token id, last use).
    open: std::collections::HashMap<String, (String, std::time::Instant)>,
}

impl Sessions {
    /// Sessions one token may hold at once.
    pub(crate) const PER_TOKEN: usize = 16;
    /// Sessions the server holds at once.
    pub(crate) const TOTAL: usize = 256;
    /// A session unused this long is closed.
    pub(crate) const IDLE: std::time::Duration = std::time::Duration::from_secs(120);

    fn forget_idle(&mut self) {
        self.open.retain(|_, (_, at)| at.elapsed() < Self::IDLE);
    }

    /// Why `token` may not open another session now, if it may not.
    /// Session `id` used by `token` (closed, with `closing`): `false`,
    /// and nothing changed, when it is not one this token opened (or it is
    /// gone). Another owner's token that knew an id could send into the
    /// session, read its stream and close it.
    fn used_by(&mut self, id: &str, token: &str, closing: bool) -> bool {
        match self.open.get_mut(id) {
            Some(entry) if entry.0 == token => {
                if closing {
                    self.open.remove(id);
                } else {
                    entry.1 = std::time::Instant::now();
                }
                true
            }
            _ => false,
        }
    }

    fn refuse(&mut self, token: &str) -> Option<String> {
        self.forget_idle();
        let mine = self.open.values().filter(|(t, _)| t == token).count();
        if mine >= Self::PER_TOKEN {
            return Some(format!(
                "this token holds {mine} MCP sessions, the most it may (close one with DELETE /mcp, or let one idle {} s)",
                Self::IDLE.as_secs()
            ));
        }
        (self.open.len() >= Self::TOTAL).then(|| {
            format!(
                "the server holds {} MCP sessions, the most it may; try again later",
                Self::TOTAL
            )
        })
    }
}

/// The largest body `/mcp` reads, as every other route.
const MAX_BODY: u64 = 1 << 20;

/// Every MCP request over HTTP needs a bearer token, as the API's routes
/// do: its caller goes with the request to the tools.
pub async fn authenticate(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    // The MCP specification asks a server to validate `Origin`: a page of
    // another origin (a rebound name included) is refused; clients that
    // are no browser send none.
    if let Some(origin) = req.headers().get(axum::http::header::ORIGIN) {
        let host = req
            .headers()
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, h)| h.trim_end_matches('/'));
        if origin_host.is_none() || origin_host != host {
            return ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden_origin",
                "this origin may not call /mcp (only the server's own, or a client that sends none)",
            )
            .into_response();
        }
    }
    // One body limit for the whole server (1 MiB), /mcp included.
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "the body is over 1 MiB",
        )
        .into_response();
    }
    let (parts, body) = req.into_parts();
    let req = axum::extract::Request::from_parts(
        parts,
        axum::body::Body::new(http_body_util::Limited::new(body, MAX_BODY as usize)),
    );
    let caller = match state.caller(req.headers(), Scope::Read).await {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    // What it is sent is read within the server's limit for a request
    // (its answer may last, as a stream): a body that never ended held
    // its connection for good (50 were still open after five minutes).
    let mut req = match crate::body_within(req, std::time::Duration::from_secs(60)).await {
        Ok(req) => req,
        Err(refused) => return refused,
    };
    // Sessions are counted by token: a new one (no session id) within the
    // caps, an old one's use noted, a closed one forgotten.
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let closing = req.method() == axum::http::Method::DELETE;
    let token = caller.token_id.clone();
    if let Ok(mut open) = state.mcp_sessions.lock() {
        match &session {
            None => {
                if let Some(why) = open.refuse(&token) {
                    return ApiError::new(
                        axum::http::StatusCode::TOO_MANY_REQUESTS,
                        "too_many_sessions",
                        why,
                    )
                    .into_response();
                }
            }
            Some(id) => {
                if !open.used_by(id, &token, closing) {
                    return ApiError::not_found(&format!("MCP session {id} (of this token)"))
                        .into_response();
                }
            }
        }
    }
    req.extensions_mut().insert(caller);
    let resp = next.run(req).await;
    if session.is_none()
        && let Some(id) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        && let Ok(mut open) = state.mcp_sessions.lock()
    {
        open.open
            .insert(id.to_string(), (token, std::time::Instant::now()));
    }
    resp
}

/// `body` as MCP's structured content (a path that is not UTF-8 is an
/// error that says so).
fn said<T: serde::Serialize>(body: &T) -> Result<Value, ApiError> {
    serde_json::to_value(body).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the answer cannot be said as JSON: {e}"),
        )
    })
}

/// The `memory` tool: list, show, add, approve or forget a note.
async fn memory_call(
    s: &AppState,
    caller: Caller,
    tool: &str,
    mut args: serde_json::Map<String, Value>,
) -> Result<Value, ApiError> {
    let action = required_str(tool, &mut args, "action")?;
    match action.as_str() {
        "list" => {
            no_more(tool, &args)?;
            said(&json!({"notes": service::memory_list(s, caller).await?}))
        }
        "add" => {
            let new: service::NewNote = parse(tool, args)?;
            said(&service::memory_add(s, caller, new).await?)
        }
        "show" => {
            let id = required_str(tool, &mut args, "id")?;
            no_more(tool, &args)?;
            said(&service::memory_show(s, caller, id).await?)
        }
        "approve" | "forget" => {
            let id = required_str(tool, &mut args, "id")?;
            no_more(tool, &args)?;
            said(&service::memory_settle(s, caller, id, action == "approve").await?)
        }
        other => Err(ApiError::bad_request(format!(
            "`{other}` is not an action of `memory` (list, show, add, approve, forget)"
        ))),
    }
}

#[cfg(test)]
mod sessions {
    use super::Sessions;

    /// A session is used, and closed, only by the token that opened it;
    /// another token (another owner's, that knew the id) is refused and
    /// changes nothing.
    #[test]
    fn a_session_is_used_and_closed_only_by_its_own_token() {
        let mut s = Sessions::default();
        s.open.insert(
            "s-1".into(),
            ("alice-token".into(), std::time::Instant::now()),
        );
        assert!(!s.used_by("s-1", "mallory-token", false));
        assert!(!s.used_by("s-1", "mallory-token", true));
        assert!(s.open.contains_key("s-1"), "not closed by another");
        assert!(!s.used_by("s-unknown", "alice-token", false));
        assert!(s.used_by("s-1", "alice-token", false));
        assert!(s.used_by("s-1", "alice-token", true));
        assert!(!s.open.contains_key("s-1"), "closed by its own");
    }
}
