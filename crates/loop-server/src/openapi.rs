//! The OpenAPI 3.1 document, generated from the route table below — the
//! same table a test walks to check every route answers as described.

use serde_json::{Map, Value, json};

/// One route: method, path, what it does, the scope it needs (none for the
/// probes), the request body's schema, the response's.
pub(crate) struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    pub scope: Option<&'static str>,
    pub body: Option<fn() -> Value>,
    pub response: fn() -> Value,
    pub ok: u16,
}

fn obj(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}

fn any_object() -> Value {
    json!({"type": "object"})
}

fn ok_object() -> Value {
    obj(json!({"ok": {"type": "boolean"}}), &["ok"])
}

fn ready() -> Value {
    obj(json!({"ready": {"type": "boolean"}}), &["ready"])
}

fn text() -> Value {
    json!({"type": "string"})
}

/// One server-sent event: its id (the event's position in the ledger),
/// its kind, and the event as JSON.
fn sse_event() -> Value {
    obj(
        json!({"id": {"type": "string"}, "event": {"type": "string"}, "data": {"type": "string"}}),
        &["event", "data"],
    )
}

fn new_task() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["instruction"],
        "properties": {
            "instruction": {"type": "string"},
            "checks": {"type": "array", "items": {"type": "string"}},
            "artifacts": {"type": "array", "items": {"type": "string"}},
            "contract": {"type": ["string", "null"], "description": "a contract in YAML"},
            "model": {"type": ["string", "null"]},
            "max_steps": {"type": ["integer", "null"], "minimum": 1, "maximum": 4294967295u64},
            "max_tokens": {"type": ["integer", "null"], "minimum": 1},
            "budget_usd": {"type": ["number", "null"], "minimum": 0},
            "timeout_secs": {"type": ["integer", "null"], "minimum": 1, "maximum": 604800},
            "inputs": {"type": "array", "maxItems": 16, "description": "files given with the task, put in its workspace as inputs/NAME (16 MiB together; a multipart upload's `input` parts are the same)",
                "items": {"type": "object", "additionalProperties": false, "required": ["name", "content_base64"],
                    "properties": {"name": {"type": "string", "description": "a plain file name"},
                        "content_base64": {"type": "string", "contentEncoding": "base64"}}}},
            "skills": {"type": "array", "maxItems": 8, "uniqueItems": true, "items": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"}, "description": "skills the task uses (GET /api/v1/skills), each verified and narrowed to what the project gives a task; a skill alone (an empty instruction) runs its contract template"}
        }
    })
}

/// A route's request body, as OpenAPI says it (a new task's also as a
/// multipart upload with the files given with it).
fn request_body(r: &Route) -> Option<Value> {
    let body = r.body?;
    let media = if r.path.starts_with("/api/v1/hooks/") {
        "application/octet-stream"
    } else {
        "application/json"
    };
    let mut content = json!({media: {"schema": body()}});
    if r.method == "post" && r.path == "/api/v1/tasks" {
        // Files given with the task, uploaded beside it.
        content["multipart/form-data"] = json!({"schema": {
            "type": "object", "required": ["task"],
            "properties": {
                "task": body(),
                "input": {"type": "array", "maxItems": 16, "items": bytes(),
                    "description": "files given with the task (each part's file name its name)"}
            }},
            "encoding": {"task": {"contentType": "application/json"}}});
    }
    Some(json!({"required": r.path == "/api/v1/tasks", "content": content}))
}

fn bytes() -> Value {
    json!({"type": "string", "format": "binary"})
}

fn created() -> Value {
    let mut v = obj(
        json!({"id": {"type": "string"}, "events": {"type": "string"},
            "state": {"type": "string", "enum": ["queued"],
                "description": "present when the task was kept and answered before its preparation (always, unless the request said `Prefer: wait=N`): its status then says how the preparation goes (`queued`, `preparing`, `refused` with `error`, `cancelled` (by a person, before its preparation), then the task's own)"},
            "status": {"type": "string"}}),
        &["id", "events"],
    );
    v["description"] = json!(
        "the task, kept in the store before this answer; with `Prefer: wait=N` (at most 20 s) the answer waits for its preparation: then 201 once it is stored and started, or the refusal its preparation ended with"
    );
    v
}

fn task_list() -> Value {
    obj(
        json!({
            "tasks": {"type": "array", "items": obj(json!({
                "id": {"type": "string"},
                "state": {"type": "string"},
                "queued": {"type": "boolean"},
                "outcome_words": {"type": ["string", "null"], "description": "how it ended, in words"},
                "used": any_object()
            }), &["id", "state", "queued", "used"])},
            "next": {"type": ["string", "null"], "description": "pass as `before` for the next page"}
        }),
        &["tasks", "next"],
    )
}

fn task() -> Value {
    obj(
        json!({
            "id": {"type": "string"},
            "state": {"type": "string"},
            "outcome": {"type": ["string", "null"]},
            "outcome_words": {"type": ["string", "null"], "description": "how it ended, in words"},
            "owner": {"type": ["string", "null"]},
            "queued": {"type": "boolean", "description": "waiting for one of the server's places to run"},
            "used": any_object(),
            "approvals": {"type": "array"},
            "apply": {"type": "string"},
            "dead_letter": {"type": "object", "description": "present while the queue has given up on the task: {queue, reason, at_ms}",
                "properties": {"queue": {"type": "string"}, "reason": {"type": "string"}, "at_ms": {"type": "integer"}}},
            "parent": {"type": "string", "description": "present for a child task: the task that delegated it"},
            "children": {"type": "array", "description": "present when the task delegated: each child's id, state, outcome, the paths it may change and what it used (counted in this task's `used` too)",
                "items": obj(json!({"id": {"type": "string"}, "state": {"type": "string"}, "outcome": {"type": ["string", "null"]}, "writable": {"type": "array", "items": {"type": "string"}}, "used": any_object(), "asking": {"type": "array", "items": any_object()}}), &["id", "state", "used"])}
        }),
        &["id", "state", "queued", "used", "approvals", "apply"],
    )
}

fn event_list() -> Value {
    obj(
        json!({"events": {"type": "array", "items": obj(json!({"seq": {"type": "integer"}, "at": {"type": "string", "description": "when it was recorded (RFC 3339)"}, "event": any_object()}), &["seq", "at", "event"])}}),
        &["events"],
    )
}

fn answer() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"deny": {"type": "boolean"}, "message": {"type": ["string", "null"]}, "approval_id": {"type": ["string", "null"]}}
    })
}

fn more() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "add_steps": {"type": ["integer", "null"], "minimum": 0},
            "add_tokens": {"type": ["integer", "null"], "minimum": 0},
            "add_usd": {"type": ["number", "null"], "minimum": 0},
            "add_secs": {"type": ["integer", "null"], "minimum": 0}
        }
    })
}

fn apply_body() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"confirm": {"type": "boolean"}, "trust_host_files": {"type": "boolean"}, "onto_head": {"type": "boolean"}}
    })
}

fn settled() -> Value {
    obj(
        json!({
            "action": {"type": "string"},
            "id": {"type": "string"},
            "result": {"type": "string", "enum": ["done", "nothing_changed", "done_but_differs"]},
            "notes": {"type": "array", "items": {"type": "string"}}
        }),
        &["action", "id", "result", "notes"],
    )
}

/// Every route the server answers.
pub(crate) const ROUTES: &[Route] = &[
    Route {
        method: "get",
        path: "/",
        summary: "The web console (its data comes from the API, with the person's token)",
        scope: None,
        body: None,
        response: text,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/console.js",
        summary: "The console's script",
        scope: None,
        body: None,
        response: text,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/console.css",
        summary: "The console's style sheet",
        scope: None,
        body: None,
        response: text,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/auth/providers",
        summary: "Which sign-ins the console may offer besides a token (`github`)",
        scope: None,
        body: None,
        response: || obj(json!({"github": {"type": "boolean"}}), &["github"]),
        ok: 200,
    },
    Route {
        method: "get",
        path: "/auth/github",
        summary: "Begin signing in with GitHub (OAuth with PKCE): a redirect to GitHub, the attempt's state also in a cookie; 404 when the Loopfile sets up none",
        scope: None,
        body: None,
        response: any_object,
        ok: 302,
    },
    Route {
        method: "get",
        path: "/auth/github/callback",
        summary: "GitHub sends the person back: the state checked once (against the cookie too), the code exchanged with the PKCE verifier, the login or its team mapped to an owner and scope; a redirect to the console with a session's token in the fragment",
        scope: None,
        body: None,
        response: any_object,
        ok: 302,
    },
    Route {
        method: "get",
        path: "/healthz",
        summary: "The process answers",
        scope: None,
        body: None,
        response: ok_object,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/readyz",
        summary: "The store answers and the sandbox runs a command",
        scope: None,
        body: None,
        response: ready,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/openapi.json",
        summary: "This document",
        scope: Some("read"),
        body: None,
        response: any_object,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/metrics",
        summary: "Prometheus metrics",
        scope: Some("read"),
        body: None,
        response: text,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks",
        summary: "Start a task (an instruction with checks, or a contract)",
        scope: Some("run"),
        body: Some(new_task),
        response: created,
        ok: 201,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks",
        summary: "The tasks the caller may see, newest first, `limit` (default 100) at a time from after `before`",
        scope: Some("read"),
        body: None,
        response: task_list,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}",
        summary: "One task: state or outcome, budgets used, approvals, apply state",
        scope: Some("read"),
        body: None,
        response: task,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/events",
        summary: "The task's recorded events from `since` on",
        scope: Some("read"),
        body: None,
        response: event_list,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/stream",
        summary: "The task's events as server-sent events (Last-Event-ID resumes)",
        scope: Some("read"),
        body: None,
        response: sse_event,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks/{id}/cancel",
        summary: "Stop the task",
        scope: Some("run"),
        body: None,
        response: any_object,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks/{id}/approve",
        summary: "Answer the task's pending approval or checkpoint",
        scope: Some("run"),
        body: Some(answer),
        response: any_object,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks/{id}/resume",
        summary: "Resume an interrupted task, or give one that reached a limit more",
        scope: Some("run"),
        body: Some(more),
        response: any_object,
        ok: 202,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/receipt",
        summary: "The signed receipt (DSSE envelope)",
        scope: Some("read"),
        body: None,
        response: any_object,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/verify",
        summary: "The receipt checked, layer by layer",
        scope: Some("read"),
        body: None,
        response: any_object,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/diff",
        summary: "The change set: from the receipt once ended, else the workspace now",
        scope: Some("read"),
        body: None,
        response: any_object,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/files/{path}",
        summary: "A file the ended task made (an artifact, or a file its change set adds or modifies), as its receipt signs it: the bytes, their SHA-256 in `Digest` and `X-Loop-Sha256`; 404 for a file the receipt does not name, 409 for one that changed since",
        scope: Some("read"),
        body: None,
        response: bytes,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/tasks/{id}/evidence/{sha256}",
        summary: "A screenshot the task's browser kept as evidence (its ledger names it by SHA-256): PNG or JPEG, given only when its content has that digest (also in `Digest` and `X-Loop-Sha256`); 404 when the task keeps none such",
        scope: Some("read"),
        body: None,
        response: bytes,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks/{id}/apply",
        summary: "Apply the verified change set to the project",
        scope: Some("run"),
        body: Some(apply_body),
        response: settled,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks/{id}/undo",
        summary: "Reverse an applied change set exactly",
        scope: Some("run"),
        body: None,
        response: settled,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/tasks/{id}/discard",
        summary: "Drop the task's workspace",
        scope: Some("run"),
        body: None,
        response: settled,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/hooks/{name}",
        summary: "A webhook delivery for a Loopfile trigger (signed with its secret; no bearer token): starts the trigger's task",
        scope: None,
        body: Some(delivery),
        response: delivered,
        ok: 202,
    },
    Route {
        method: "get",
        path: "/api/v1/skills",
        summary: "The skills tasks of this project may use, each judged: signed by a trusted key, the project's own pattern, or why it is refused",
        scope: Some("read"),
        body: None,
        response: skills,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/memory",
        summary: "The project's memory notes the caller may see (an admin: all; others: their own and the project's), each with its status and source",
        scope: Some("read"),
        body: None,
        response: notes,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/memory",
        summary: "Add a note of the caller's for later tasks (usable at once)",
        scope: Some("run"),
        body: Some(new_note),
        response: note,
        ok: 201,
    },
    Route {
        method: "get",
        path: "/api/v1/memory/{id}",
        summary: "One memory note the caller may see (its own or the project's; any with an admin token), with its status and source",
        scope: Some("read"),
        body: None,
        response: note,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/memory/{id}/approve",
        summary: "Approve a quarantined note (the caller's own; any with an admin token)",
        scope: Some("run"),
        body: None,
        response: note,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/memory/{id}/forget",
        summary: "Forget a note: no task is given it again",
        scope: Some("run"),
        body: None,
        response: note,
        ok: 200,
    },
    Route {
        method: "get",
        path: "/api/v1/drafts/{id}",
        summary: "A contract drafted from an instruction alone: drafting, proposed (waiting for the answer), started or ended",
        scope: Some("read"),
        body: None,
        response: draft,
        ok: 200,
    },
    Route {
        method: "post",
        path: "/api/v1/drafts/{id}/confirm",
        summary: "Answer a proposed contract: accept it, send it back edited (judged again), or reject it",
        scope: Some("run"),
        body: Some(confirm),
        response: answered,
        ok: 200,
    },
];

fn note() -> Value {
    obj(
        json!({
            "id": {"type": "string"},
            "project": {"type": "string"},
            "owner": {"type": "string"},
            "text": {"type": "string"},
            "about": {"type": "array", "items": {"type": "string"}},
            "body": {"type": "object"},
            "status": {"type": "string", "enum": ["usable", "quarantined", "forgotten"]},
            "created_ms": {"type": "integer"},
            "updated_ms": {"type": "integer"}
        }),
        &[
            "id",
            "project",
            "owner",
            "text",
            "about",
            "body",
            "status",
            "created_ms",
            "updated_ms",
        ],
    )
}

fn skills() -> Value {
    let skill = obj(
        json!({
            "name": {"type": "string"},
            "place": {"type": "string", "enum": ["project", "user", "pattern"]},
            "digest": {"type": ["string", "null"]},
            "state": {"type": "string", "description": "signed by KEY, unsigned, project-local (a pattern), or why it is refused"},
            "usable": {"type": "boolean"},
            "description": {"type": "string"}
        }),
        &["name", "place", "state", "usable"],
    );
    obj(
        json!({"skills": {"type": "array", "items": skill}}),
        &["skills"],
    )
}

fn notes() -> Value {
    obj(
        json!({"notes": {"type": "array", "items": note()}}),
        &["notes"],
    )
}

fn new_note() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 500},
            "about": {"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 8}
        },
        "required": ["text"]
    })
}

fn delivery() -> Value {
    json!({"type": "string", "description": "the webhook's payload, signed with the trigger's secret"})
}

fn delivered() -> Value {
    obj(
        json!({
            "id": {"type": "string", "description": "the task started"},
            "draft": {"type": "string", "description": "the draft whose contract is drafted first (a GitHub trigger without checks)"},
            "trigger": {"type": "string"}
        }),
        &["trigger"],
    )
}

fn draft() -> Value {
    obj(
        json!({
            "id": {"type": "string"},
            "state": {"type": "string", "enum": ["drafting", "proposed", "started", "ended"]},
            "contract": {"type": "string"},
            "task_id": {"type": "string"},
            "reason": {"type": "string"},
            "notes": {"type": "array", "items": {"type": "string"}}
        }),
        &["id", "state", "notes"],
    )
}

fn confirm() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "reject": {"type": "boolean"},
            "contract": {"type": ["string", "null"], "description": "an edited contract (YAML or JSON), judged again"}
        }
    })
}

fn answered() -> Value {
    obj(
        json!({"id": {"type": "string"}, "answered": {"type": "boolean"}}),
        &["id", "answered"],
    )
}

fn error_schema() -> Value {
    obj(
        json!({"error": obj(json!({"kind": {"type": "string"}, "message": {"type": "string"}}), &["kind", "message"])}),
        &["error"],
    )
}

/// A route's operation id: its method and path, as one identifier.
fn operation_id(r: &Route) -> String {
    format!("{}{}", r.method, r.path.replace(['/', '{', '}', '.'], "_"))
}

/// Route `r` as an OpenAPI operation: its parameters, body, responses
/// (links from a new task to its routes) and security.
/// GitHub sign-in's two steps: redirects, and a plain page when refused.
fn sign_in_operation(r: &Route) -> Map<String, Value> {
    let mut op = Map::new();
    op.insert("summary".into(), json!(r.summary));
    op.insert("operationId".into(), json!(operation_id(r)));
    op.insert("security".into(), json!([]));
    let mut responses = Map::new();
    responses.insert(
        "302".into(),
        json!({"description": "to GitHub, or back to the console", "headers": {"Location": {"schema": {"type": "string"}}}}),
    );
    let json_err = json!({"description": "refused", "content": {"application/json": {"schema": error_schema()}}});
    let text_err = json!({"description": "refused, said in a plain page", "content": {"text/plain": {"schema": {"type": "string"}}}});
    if r.path.ends_with("/callback") {
        op.insert(
            "parameters".into(),
            json!(["code", "state", "error"].iter().map(|n| json!({"name": n, "in": "query", "required": false, "schema": {"type": "string"}})).collect::<Vec<_>>()),
        );
        for code in ["400", "403", "500", "502"] {
            responses.insert(code.into(), text_err.clone());
        }
    } else {
        op.insert(
            "parameters".into(),
            json!([{"name": "nonce", "in": "query", "required": true,
                "description": "the console's random word, given back with the token",
                "schema": {"type": "string", "pattern": "^[A-Za-z0-9]{16,64}$"}}]),
        );
        for code in ["400", "404", "429", "500", "503"] {
            responses.insert(code.into(), json_err.clone());
        }
    }
    op.insert("responses".into(), Value::Object(responses));
    op
}

fn operation(r: &Route) -> Map<String, Value> {
    if r.path.starts_with("/auth/github") {
        return sign_in_operation(r);
    }
    let mut op = Map::new();
    op.insert("summary".into(), json!(r.summary));
    op.insert("operationId".into(), json!(operation_id(r)));
    if r.path.contains("{name}") {
        op.insert(
            "parameters".into(),
            json!([{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}]),
        );
    }
    if r.method == "get" && r.path == "/api/v1/tasks" {
        op.insert(
            "parameters".into(),
            json!([
                {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                {"name": "before", "in": "query", "required": false, "schema": {"type": "string"}},
                {"name": "state", "in": "query", "required": false, "description": "only tasks that stand so", "schema": {"type": "string", "enum": ["running", "waiting", "interrupted", "queued", "ended"]}},
                {"name": "outcome", "in": "query", "required": false, "description": "only tasks that ended so", "schema": {"type": "string", "enum": ["verified", "failed", "lost", "limit_reached", "cancelled", "error"]}},
                {"name": "owner", "in": "query", "required": false, "description": "only this owner's tasks (`-`: the command line's, which have none)", "schema": {"type": "string"}},
                {"name": "q", "in": "query", "required": false, "description": "only tasks whose id, instruction or reason holds this text (any case)", "schema": {"type": "string"}}
            ]),
        );
    }
    if r.path.contains("{id}") {
        let mut params = vec![
            json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}),
        ];
        if r.path.ends_with("/{sha256}") {
            params.push(json!({"name": "sha256", "in": "path", "required": true,
                "description": "the screenshot's SHA-256, as the ledger records it",
                "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}));
        }
        if r.path.ends_with("/{path}") {
            params.push(json!({"name": "path", "in": "path", "required": true,
                "description": "the file's path in the workspace (slashes and all)", "schema": {"type": "string"}}));
        }
        if r.path.ends_with("/events") {
            params.push(json!({"name": "since", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0}}));
        }
        if r.path.ends_with("/stream") {
            params.push(json!({"name": "Last-Event-ID", "in": "header", "required": false, "schema": {"type": "string"}}));
        }
        op.insert("parameters".into(), Value::Array(params));
    }
    if let Some(body) = request_body(r) {
        op.insert("requestBody".into(), body);
    }
    let media = match r.path {
        p if p.ends_with("/stream") => "text/event-stream",
        p if p.contains("/files/") => "application/octet-stream",
        p if p.contains("/evidence/") => "image/*",
        "/metrics" => "text/plain",
        "/" => "text/html",
        "/console.js" => "text/javascript",
        "/console.css" => "text/css",
        _ => "application/json",
    };
    let mut responses = Map::new();
    let mut done = json!({"description": "done", "content": {media: {"schema": (r.response)()}}});
    // The id a new task gets leads to every route of that task (tools
    // that walk the API, such as Schemathesis's stateful phase, follow
    // these links).
    if r.method == "post" && r.path == "/api/v1/tasks" {
        let links: Map<String, Value> = ROUTES
            .iter()
            .filter(|t| t.path.contains("{id}"))
            .map(|t| {
                (
                    operation_id(t),
                    json!({"operationId": operation_id(t), "parameters": {"id": "$response.body#/id"}}),
                )
            })
            .collect();
        done["links"] = Value::Object(links);
    }
    responses.insert(r.ok.to_string(), done);
    if r.path.starts_with("/api/v1/hooks/") {
        responses.insert(
            "200".into(),
            json!({"description": "authentic, and nothing to do (GitHub's ping)",
                "content": {"application/json": {"schema": any_object()}}}),
        );
    }
    if r.method == "post" && r.path == "/api/v1/tasks" {
        responses.insert(
            "202".into(),
            json!({"description": "an instruction alone: its contract is being drafted (`draft`)",
                "content": {"application/json": {"schema": obj(
                    json!({"draft": {"type": "string"}, "id": {"type": "string"},
                        "state": {"type": "string"}, "status": {"type": "string"},
                        "events": {"type": "string"}}),
                    &["status"])}}}),
        );
    }
    let err = json!({"description": "refused", "content": {"application/json": {"schema": error_schema()}}});
    for code in ["400", "404", "409", "413", "429", "500", "503"] {
        responses.insert(code.into(), err.clone());
    }
    if r.scope.is_some() {
        responses.insert("401".into(), err.clone());
        responses.insert("403".into(), err.clone());
        op.insert("security".into(), json!([{"bearer": []}]));
        op.insert("x-scope".into(), json!(r.scope));
    } else {
        op.insert("security".into(), json!([]));
        if r.path.starts_with("/api/v1/hooks/") {
            responses.insert("401".into(), err.clone());
        }
    }
    op.insert("responses".into(), Value::Object(responses));
    op
}

/// The OpenAPI 3.1 document.
pub(crate) fn document() -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let op = operation(r);
        let entry = paths
            .entry(r.path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(r.method.to_string(), Value::Object(op));
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Loop Engine",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Tasks that stop only on evidence: start, watch, steer and settle them. Every route but /healthz and /readyz takes `Authorization: Bearer TOKEN` (`loop tokens create`)."
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    })
}
