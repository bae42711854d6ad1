//! The Anthropic client against recorded exchanges in the wire format of
//! Anthropic's public Messages API documentation, served over real HTTP on
//! 127.0.0.1: tool_use and tool_result blocks, streaming events, usage,
//! error bodies, a 429 with Retry-After and an overloaded 529.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures

mod common;

use common::{Canned, FakeSleeper, fixture, serve};
use loop_models::provider::{Dialect, EndpointConfig, HttpModel, Secret};
use loop_models::retry::RetryPolicy;
use loop_models::{Fallback, Model, Recorder, ReplayModel, ToolChoice};
use loop_protocol::{CallLimits, Context, ModelReply, Observation, Price, ToolCall, ToolSpec};
use serde_json::json;
use std::time::Duration;

fn tools() -> Vec<ToolSpec> {
    let spec = |name: &str, props: serde_json::Value, required: &[&str]| ToolSpec {
        effect: Default::default(),
        name: name.into(),
        description: format!("the {name} tool"),
        parameters: json!({"type": "object", "properties": props, "required": required}),
    };
    vec![
        spec(
            "write_file",
            json!({"path": {"type": "string"}, "content": {"type": "string"}}),
            &["path", "content"],
        ),
        spec(
            "run_command",
            json!({"command": {"type": "string"}}),
            &["command"],
        ),
        spec(
            "finish",
            json!({"summary": {"type": "string"}}),
            &["summary"],
        ),
    ]
}

/// A context with one earlier turn and its result, so the request shows
/// tool_use and tool_result blocks.
fn context() -> Context {
    let mut c = Context::new("SYSTEM PROMPT".into(), tools(), "write hello.txt");
    c.push_turn(
        Some("look first".into()),
        vec![ToolCall {
            id: "toolu_prev".into(),
            tool: "run_command".into(),
            args: json!({"command": "ls"}),
        }],
    );
    c.push_observation(&Observation::ok(
        "toolu_prev",
        "run_command",
        "README.md\n",
        false,
    ));
    c.push_feedback("verification rejected: hello.txt missing".into());
    c
}

fn model(url: &str, stream: bool, sleeper: &FakeSleeper) -> HttpModel {
    let mut cfg = EndpointConfig::new(Dialect::Anthropic, "claude-sonnet-4-20250514");
    cfg.base_url = url.to_string();
    cfg.api_key = Some(Secret::new("sk-ant-test-key"));
    cfg.stream = stream;
    cfg.temperature = Some(0.2);
    cfg.price = Some(Price {
        input_per_mtok: 3.0,
        cached_input_per_mtok: 0.3,
        output_per_mtok: 15.0,
    });
    cfg.retry = RetryPolicy {
        max_attempts: 3,
        base: Duration::from_millis(200),
        cap: Duration::from_secs(30),
    };
    HttpModel::new(
        cfg,
        Box::new(loop_models::http::UreqTransport::new(Default::default())),
        Box::new(sleeper.clone()),
    )
}

const LIMITS: CallLimits = CallLimits {
    max_output_tokens: 777,
    time_left_ms: None,
};

#[test]
fn a_tool_use_answer_becomes_a_turn_with_reported_usage_and_cost() {
    let server = serve(vec![Canned::json(200, &fixture("anthropic/tool_use.json"))]);
    let sleeper = FakeSleeper::default();
    let mut m = model(&server.url, false, &sleeper);
    let ModelReply::Turn(t) = m.next_turn(&context(), LIMITS) else {
        panic!("expected a turn");
    };
    assert_eq!(t.calls.len(), 1);
    assert_eq!(t.calls[0].id, "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(t.calls[0].tool, "write_file");
    assert_eq!(
        t.calls[0].args,
        json!({"path": "hello.txt", "content": "hello\n"})
    );
    assert_eq!(
        t.thought.as_deref(),
        Some("I'll write the file with the requested content.")
    );
    // input = uncached 1200 + cache reads 800.
    assert_eq!(
        (
            t.usage.input_tokens,
            t.usage.cached_input_tokens,
            t.usage.output_tokens
        ),
        (2000, 800, 57)
    );
    assert!(!t.usage.estimated);
    assert_eq!(t.usage.attempts, 1);
    let want_cost = (1200.0 * 3.0 + 800.0 * 0.3 + 57.0 * 15.0) / 1e6;
    assert!(
        (t.usage.cost_usd - want_cost).abs() < 1e-12,
        "{}",
        t.usage.cost_usd
    );

    // The request, as the API documents it.
    let r = server.received.lock().unwrap()[0].clone();
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-ant-test-key"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    let b = &r.body;
    assert_eq!(b["model"], "claude-sonnet-4-20250514");
    assert_eq!(b["max_tokens"], 777, "clamped to the call limit");
    assert_eq!(b["system"], "SYSTEM PROMPT");
    assert_eq!(b["temperature"], 0.2);
    assert_eq!(
        b["tools"][0]["input_schema"]["required"],
        json!(["path", "content"])
    );
    assert_eq!(b["tool_choice"], json!({"type": "auto"}));
    let msgs = b["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        3,
        "user, assistant, user (roles alternate): {msgs:?}"
    );
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_prev", "name": "run_command", "input": {"command": "ls"}})
    );
    // The tool result comes first in the next user message, then the feedback.
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], "toolu_prev");
    assert_eq!(msgs[2]["content"][1]["type"], "text");
}

#[test]
fn a_streamed_answer_is_assembled_from_its_events() {
    let server = serve(vec![Canned::sse(&fixture("anthropic/stream_tool_use.sse"))]);
    let sleeper = FakeSleeper::default();
    let mut m = model(&server.url, true, &sleeper);
    let ModelReply::Turn(t) = m.next_turn(&context(), LIMITS) else {
        panic!("expected a turn");
    };
    assert_eq!(t.thought.as_deref(), Some("Running the tests first."));
    assert_eq!(t.calls[0].id, "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(t.calls[0].args, json!({"command": "pytest -q"}));
    assert_eq!((t.usage.input_tokens, t.usage.output_tokens), (472, 89));
    assert_eq!(server.received.lock().unwrap()[0].body["stream"], true);
}

#[test]
fn a_429_waits_as_long_as_retry_after_says_and_is_not_billed() {
    let server = serve(vec![
        Canned::json(429, &fixture("anthropic/rate_limited.json")).header("retry-after", "7"),
        Canned::json(200, &fixture("anthropic/tool_use.json")),
    ]);
    let sleeper = FakeSleeper::default();
    let mut m = model(&server.url, false, &sleeper);
    let ModelReply::Turn(t) = m.next_turn(&context(), LIMITS) else {
        panic!("expected a turn after the retry");
    };
    assert_eq!(*sleeper.0.lock().unwrap(), vec![Duration::from_secs(7)]);
    assert_eq!(t.usage.attempts, 2, "the failed attempt is counted");
    assert_eq!(
        t.usage.input_tokens, 2000,
        "a 429 is not billed: only the reported usage"
    );
    assert!(!t.usage.estimated);
}

#[test]
fn overloaded_529s_back_off_then_give_up_naming_the_error() {
    let server = serve(vec![
        Canned::json(529, &fixture("anthropic/overloaded.json")),
        Canned::json(529, &fixture("anthropic/overloaded.json")),
        Canned::json(529, &fixture("anthropic/overloaded.json")),
    ]);
    let sleeper = FakeSleeper::default();
    let mut m = model(&server.url, false, &sleeper);
    let ModelReply::Unavailable { error, usage } = m.next_turn(&context(), LIMITS) else {
        panic!("expected unavailable");
    };
    assert!(
        error.contains("HTTP 529: overloaded_error: Overloaded"),
        "{error}"
    );
    assert!(error.contains("after 3 attempt(s)"), "{error}");
    assert_eq!(usage.attempts, 3);
    let waits = sleeper.0.lock().unwrap().clone();
    assert_eq!(waits.len(), 2, "no wait after the last attempt");
    assert!(
        waits[0] >= Duration::from_millis(100) && waits[0] <= Duration::from_millis(200),
        "{waits:?}"
    );
    assert!(
        waits[1] >= Duration::from_millis(200) && waits[1] <= Duration::from_millis(400),
        "{waits:?}"
    );
}

#[test]
fn an_error_event_mid_stream_is_retried_and_charged() {
    let server = serve(vec![
        Canned::sse(&fixture("anthropic/stream_overloaded.sse")),
        Canned::sse(&fixture("anthropic/stream_tool_use.sse")),
    ]);
    let sleeper = FakeSleeper::default();
    let mut m = model(&server.url, true, &sleeper);
    let ModelReply::Turn(t) = m.next_turn(&context(), LIMITS) else {
        panic!("expected a turn");
    };
    assert_eq!(t.usage.attempts, 2);
    assert!(
        t.usage.estimated,
        "the broken stream may have been billed: estimated and marked"
    );
    assert!(t.usage.input_tokens > 472);
}

#[test]
fn a_bad_request_is_not_retried() {
    let server = serve(vec![Canned::json(
        400,
        &fixture("anthropic/invalid_request.json"),
    )]);
    let sleeper = FakeSleeper::default();
    let mut m = model(&server.url, false, &sleeper);
    let ModelReply::Unavailable { error, usage } = m.next_turn(&context(), LIMITS) else {
        panic!("expected unavailable");
    };
    assert!(
        error.contains("HTTP 400: invalid_request_error: messages: roles must alternate"),
        "{error}"
    );
    assert_eq!(usage.attempts, 1);
    assert!(sleeper.0.lock().unwrap().is_empty());
}

#[test]
fn a_call_to_an_unknown_tool_is_malformed_not_executed() {
    let body = fixture("anthropic/tool_use.json").replace("\"write_file\"", "\"delete_repo\"");
    let server = serve(vec![Canned::json(200, &body)]);
    let mut m = model(&server.url, false, &FakeSleeper::default());
    let ModelReply::Malformed { error, usage, .. } = m.next_turn(&context(), LIMITS) else {
        panic!("expected malformed");
    };
    assert!(error.contains("unknown tool `delete_repo`"), "{error}");
    assert_eq!(
        usage.input_tokens, 2000,
        "a malformed answer still costs what it cost"
    );
}

#[test]
fn forced_tool_choice_is_sent_in_the_documented_shape() {
    let server = serve(vec![Canned::json(200, &fixture("anthropic/tool_use.json"))]);
    let mut m = model(&server.url, false, &FakeSleeper::default());
    let mut cfg = m.config().clone();
    cfg.tool_choice = ToolChoice::Tool("write_file".into());
    m = HttpModel::new(
        cfg,
        Box::new(loop_models::http::UreqTransport::new(Default::default())),
        Box::new(FakeSleeper::default()),
    );
    let _ = m.next_turn(&context(), LIMITS);
    assert_eq!(
        server.received.lock().unwrap()[0].body["tool_choice"],
        json!({"type": "tool", "name": "write_file"})
    );
}

#[test]
fn a_fallback_serves_when_the_primary_is_down_and_carries_its_cost() {
    let down = serve(vec![
        Canned::json(529, &fixture("anthropic/overloaded.json"));
        3
    ]);
    let up = serve(vec![Canned::json(200, &fixture("anthropic/tool_use.json"))]);
    let sleeper = FakeSleeper::default();
    let mut chain = Fallback::new(vec![
        Box::new(model(&down.url, false, &sleeper)),
        Box::new(model(&up.url, false, &sleeper)),
    ]);
    let ModelReply::Turn(t) = chain.next_turn(&context(), LIMITS) else {
        panic!("expected the fallback to serve");
    };
    assert_eq!(
        t.usage.attempts, 4,
        "three failed attempts, then one that answered"
    );
    assert_eq!(
        t.served_by.as_deref(),
        Some("anthropic:claude-sonnet-4-20250514")
    );
    let info = chain.info();
    assert_eq!(
        info.parameters.unwrap()["fallbacks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_recording_replays_exactly_and_a_divergence_is_named() {
    let server = serve(vec![Canned::json(200, &fixture("anthropic/tool_use.json"))]);
    let dir = std::env::temp_dir().join(format!("loop-rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("session.jsonl");
    let inner = model(&server.url, false, &FakeSleeper::default());
    let mut rec = Recorder::create(
        Box::new(inner),
        &file,
        Box::new(|s: &str| s.replace("hello", "[REDACTED]")),
    )
    .unwrap();
    let ModelReply::Turn(live) = rec.next_turn(&context(), LIMITS) else {
        panic!("expected a turn");
    };
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains("sk-ant-test-key"),
        "the key is never recorded"
    );
    assert!(text.contains("\"status\":200"), "the HTTP exchange is kept");

    // The redactor ran over the recording: the replayed turn carries its output.
    let mut replay = ReplayModel::open(&file).unwrap();
    assert_eq!(replay.len(), 1);
    let ModelReply::Turn(again) = replay.next_turn(&context(), LIMITS) else {
        panic!("expected the recorded turn");
    };
    assert_eq!(again.calls[0].id, live.calls[0].id);
    assert_eq!(again.usage, live.usage);
    assert_eq!(again.calls[0].args["content"], "[REDACTED]\n");

    // Asking past the end, or asking something else, stops with a clear error.
    let ModelReply::Unavailable { error, .. } = replay.next_turn(&context(), LIMITS) else {
        panic!()
    };
    assert!(error.contains("asked for exchange 2, but"), "{error}");
    let mut replay = ReplayModel::open(&file).unwrap();
    let ModelReply::Unavailable { error, .. } =
        replay.next_turn(&Context::new("other".into(), vec![], "x"), LIMITS)
    else {
        panic!()
    };
    assert!(error.contains("replay diverged at exchange 1"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prompt_estimates_learn_from_the_providers_own_counts() {
    // The fixture reports 2000 prompt tokens, far more than the estimate of
    // this small request: later estimates scale up (never down), by at most 4×.
    let server = serve(vec![Canned::json(200, &fixture("anthropic/tool_use.json"))]);
    let mut m = model(&server.url, false, &FakeSleeper::default());
    let ctx = context();
    let before = m.estimate_prompt_tokens(&ctx);
    assert!(before < 2000, "{before}");
    let _ = m.next_turn(&ctx, LIMITS);
    let after = m.estimate_prompt_tokens(&ctx);
    assert!(before * 4 < 2000, "{before}");
    assert!(after as f64 >= before as f64 * 3.9, "{before} → {after}");
}
