//! An endpoint that lies: usage counts that are negative, fractional, huge
//! or quoted; an answer far larger than `max_tokens` allows without
//! streaming; a redirect to somewhere else. Served over real HTTP on
//! 127.0.0.1.
#![allow(clippy::disallowed_methods)] // tests make and read their own fixtures
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Canned, FakeSleeper, serve};
use loop_models::Model;
use loop_models::provider::{Dialect, EndpointConfig, HttpModel, Secret};
use loop_models::retry::RetryPolicy;
use loop_protocol::{CallLimits, Context, ModelReply, ToolSpec};
use serde_json::json;
use std::time::Duration;

fn context() -> Context {
    let tools = vec![ToolSpec {
        effect: Default::default(),
        name: "finish".into(),
        description: "finish".into(),
        parameters: json!({"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}),
    }];
    Context::new("SYSTEM".into(), tools, "say done")
}

fn model(url: &str) -> HttpModel {
    model_with(url, |_| ())
}

/// [`model`], its configuration changed by `change` first.
fn model_with(url: &str, change: impl FnOnce(&mut EndpointConfig)) -> HttpModel {
    let mut cfg = EndpointConfig::new(Dialect::OpenAi, "m");
    cfg.base_url = url.to_string();
    cfg.api_key = Some(Secret::new("sk-test-key"));
    cfg.stream = false;
    cfg.retry = RetryPolicy {
        max_attempts: 1,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(1),
    };
    change(&mut cfg);
    HttpModel::new(
        cfg,
        Box::new(loop_models::http::UreqTransport::new(Default::default())),
        Box::new(FakeSleeper::default()),
    )
}

fn answer(usage: serde_json::Value) -> Canned {
    let body = json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "finish", "arguments": "{\"summary\":\"done\"}"}}]},
            "finish_reason": "tool_calls"}],
        "usage": usage,
    });
    Canned::json(200, &body.to_string())
}

#[test]
fn lying_usage_is_treated_as_absent_and_estimated_never_as_zero() {
    for lie in [
        json!({"prompt_tokens": -1000000, "completion_tokens": 5}),
        json!({"prompt_tokens": 1e30, "completion_tokens": 5}),
        json!({"prompt_tokens": "9999999", "completion_tokens": 5}),
        json!({"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": -3}}),
    ] {
        let server = serve(vec![answer(lie.clone())]);
        let mut m = model(&format!("{}/v1", server.url));
        let reply = m.next_turn(
            &context(),
            CallLimits {
                max_output_tokens: 64,
                time_left_ms: None,
            },
        );
        let ModelReply::Turn(t) = reply else {
            panic!("{lie}: {reply:?}");
        };
        assert!(t.usage.estimated, "{lie}: flagged as estimated");
        assert!(
            t.usage.input_tokens > 0,
            "{lie}: charged the estimated prompt, not 0"
        );
    }
    // An honest report is taken as it is.
    let server = serve(vec![answer(
        json!({"prompt_tokens": 10, "completion_tokens": 5}),
    )]);
    let mut m = model(&format!("{}/v1", server.url));
    let ModelReply::Turn(t) = m.next_turn(
        &context(),
        CallLimits {
            max_output_tokens: 64,
            time_left_ms: None,
        },
    ) else {
        panic!("no turn");
    };
    assert!(!t.usage.estimated);
    assert_eq!((t.usage.input_tokens, t.usage.output_tokens), (10, 5));
}

#[test]
fn an_answer_far_past_max_tokens_is_cut_off_without_streaming_too() {
    let huge = "x".repeat(3 * 1024 * 1024);
    let body = json!({
        "id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": huge}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    });
    let server = serve(vec![Canned::json(200, &body.to_string())]);
    let mut m = model(&format!("{}/v1", server.url));
    let reply = m.next_turn(
        &context(),
        CallLimits {
            max_output_tokens: 64,
            time_left_ms: None,
        },
    );
    let ModelReply::Malformed { error, .. } = reply else {
        panic!("{reply:?}");
    };
    assert!(
        error.contains("max_tokens") || error.contains("64"),
        "{error}"
    );
}

#[test]
fn a_redirect_is_not_followed() {
    let elsewhere = serve(vec![answer(
        json!({"prompt_tokens": 10, "completion_tokens": 5}),
    )]);
    let mut redirect = Canned::json(302, "{}");
    redirect.headers.push((
        "location".into(),
        format!("{}/v1/chat/completions", elsewhere.url),
    ));
    let server = serve(vec![redirect]);
    let mut m = model(&format!("{}/v1", server.url));
    let reply = m.next_turn(
        &context(),
        CallLimits {
            max_output_tokens: 64,
            time_left_ms: None,
        },
    );
    let ModelReply::Unavailable { error, .. } = reply else {
        panic!("a redirect's target passed for the model: {reply:?}");
    };
    assert!(error.contains("302"), "{error}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        elsewhere.received.lock().unwrap().is_empty(),
        "nothing went to the redirect's target"
    );
}

/// A server that answers with an event stream of keep-alive comments only,
/// for up to 20 s: a per-read timeout never fires.
fn keep_alive_server() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 {
                        return;
                    }
                    if h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; len];
                let _ = reader.read_exact(&mut body);
                let mut out = stream;
                let _ =
                    out.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_secs(20) {
                    if out.write_all(b": keep-alive\n\n").is_err() {
                        return;
                    }
                    let _ = out.flush();
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    url
}

#[test]
fn a_call_held_open_by_keep_alives_ends_with_the_tasks_time() {
    let url = keep_alive_server();
    let mut cfg = EndpointConfig::new(Dialect::OpenAi, "m");
    cfg.base_url = format!("{url}/v1");
    cfg.stream = true;
    cfg.retry = RetryPolicy {
        max_attempts: 4,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(1),
    };
    let mut m = HttpModel::new(
        cfg,
        Box::new(loop_models::http::UreqTransport::new(Default::default())),
        Box::new(FakeSleeper::default()),
    );
    let started = std::time::Instant::now();
    let reply = m.next_turn(
        &context(),
        CallLimits {
            max_output_tokens: 64,
            time_left_ms: Some(1500),
        },
    );
    let took = started.elapsed();
    let ModelReply::Unavailable { error, .. } = reply else {
        panic!("{reply:?}");
    };
    assert!(error.contains("time is up"), "{error}");
    assert!(took < Duration::from_secs(4), "1.5 s left, took {took:?}");
}

#[test]
fn a_cancel_stops_an_in_flight_call_within_a_second() {
    let url = keep_alive_server();
    let mut cfg = EndpointConfig::new(Dialect::OpenAi, "m");
    cfg.base_url = format!("{url}/v1");
    cfg.stream = true;
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut m = HttpModel::new(
        cfg,
        Box::new(loop_models::http::UreqTransport::new(Default::default())),
        Box::new(FakeSleeper::default()),
    )
    .with_cancel(cancel.clone());
    let flag = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let started = std::time::Instant::now();
    let reply = m.next_turn(
        &context(),
        CallLimits {
            max_output_tokens: 64,
            time_left_ms: None,
        },
    );
    let took = started.elapsed();
    let ModelReply::Unavailable { error, .. } = reply else {
        panic!("{reply:?}");
    };
    assert!(error.contains("cancelled"), "{error}");
    assert!(
        took < Duration::from_millis(1500),
        "cancelled at 0.5 s, took {took:?}"
    );
}

/// The tokens a request asked the answer to take, whichever field it used.
fn asked(body: &serde_json::Value) -> u64 {
    body.get("max_completion_tokens")
        .or_else(|| body.get("max_tokens"))
        .and_then(serde_json::Value::as_u64)
        .unwrap()
}

#[test]
fn the_answer_asked_for_fits_the_window_the_prompt_leaves() {
    let server = serve(vec![
        answer(json!({"prompt_tokens": 500, "completion_tokens": 5})),
        answer(json!({"prompt_tokens": 10, "completion_tokens": 5})),
    ]);
    // A window of 1000 tokens and a prompt that cannot be compacted of
    // about 500: the 2048 asked for would overflow it (a server refuses).
    let mut m = model_with(&server.url, |c| {
        c.context_tokens = 1000;
        c.max_output_tokens = 2048;
    });
    let mut big = context();
    big.system = "Follow the rules. ".repeat(110);
    let reply = m.next_turn(
        &big,
        CallLimits {
            max_output_tokens: 2048,
            time_left_ms: None,
        },
    );
    assert!(matches!(reply, ModelReply::Turn { .. }), "{reply:?}");
    let tight = asked(&server.received.lock().unwrap()[0].body);
    assert!((64..1000 - 450).contains(&tight), "asked for {tight}");
    // With room, the answer asked for is the one the limits give.
    let reply = m.next_turn(
        &context(),
        CallLimits {
            max_output_tokens: 300,
            time_left_ms: None,
        },
    );
    assert!(matches!(reply, ModelReply::Turn { .. }), "{reply:?}");
    assert_eq!(asked(&server.received.lock().unwrap()[1].body), 300);
}
