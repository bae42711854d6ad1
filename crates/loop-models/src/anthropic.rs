//! Anthropic Messages: `system`, alternating `user`/`assistant` messages of
//! content blocks, `tool_use` / `tool_result`, and the streaming events
//! (`message_start`, `content_block_start`/`_delta`/`_stop`,
//! `message_delta`, `message_stop`, `ping`, `error`).

use crate::sse::SseReader;
use crate::wire::{WireCall, WireError, WireReply, WireRequest, error_message, u64_at};
use loop_protocol::{Message, Usage};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;

/// The API version this client speaks.
pub const API_VERSION: &str = "2023-06-01";

/// An image as a Messages content block (base64 source).
fn image_block(i: &loop_protocol::observation::Image) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data_base64}})
}

/// The request body.
pub fn request_body(req: &WireRequest<'_>) -> Value {
    // Messages must alternate; consecutive same-role blocks are merged, and
    // tool results come first in the user message after the tool uses.
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    let mut push = |role: &str, block: Value| match out.last_mut() {
        Some((r, blocks)) if r == role => blocks.push(block),
        _ => out.push((role.to_string(), vec![block])),
    };
    let sent = crate::wire::images_sent(req.context);
    for (n, m) in req.context.messages.iter().enumerate() {
        let send = sent.contains(&n);
        match m {
            Message::User { content, images } => {
                push("user", json!({"type": "text", "text": content}));
                for i in images.iter().filter(|_| send) {
                    push("user", image_block(i));
                }
            }
            Message::Assistant { thought, calls } => {
                if req.native_tools {
                    if let Some(t) = thought.as_deref().filter(|t| !t.is_empty()) {
                        push("assistant", json!({"type": "text", "text": t}));
                    }
                    for c in calls {
                        push(
                            "assistant",
                            json!({"type": "tool_use", "id": c.id, "name": c.tool, "input": c.args}),
                        );
                    }
                    if calls.is_empty() && thought.as_deref().is_none_or(str::is_empty) {
                        push("assistant", json!({"type": "text", "text": "(no answer)"}));
                    }
                } else {
                    push(
                        "assistant",
                        json!({"type": "text", "text": crate::wire::json_answer_text(thought, calls)}),
                    );
                }
            }
            Message::Tool {
                call_id,
                tool,
                content,
                image,
            } => {
                let content = &crate::wire::with_unsent(content, image.is_some() && !send);
                let is_error = content.starts_with("[error]") || content.starts_with("[refused");
                if req.native_tools {
                    // A tool result holds its image beside its text.
                    let body = match image.as_ref().filter(|_| send) {
                        Some(i) => json!([{"type": "text", "text": content}, image_block(i)]),
                        None => json!(content),
                    };
                    push(
                        "user",
                        json!({"type": "tool_result", "tool_use_id": call_id, "content": body, "is_error": is_error}),
                    );
                } else {
                    push(
                        "user",
                        json!({"type": "text", "text": format!("Result of {tool} (call {call_id}), untrusted data:\n{content}")}),
                    );
                    if let Some(i) = image.as_ref().filter(|_| send) {
                        push("user", image_block(i));
                    }
                }
            }
        }
    }
    let messages: Vec<Value> = out
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_output_tokens,
        "system": req.system,
        "messages": messages,
        "stream": req.stream,
    });
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if req.native_tools && !req.context.tools.is_empty() {
        body["tools"] = req
            .context
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body["tool_choice"] = match req.tool_choice {
            crate::ToolChoice::Auto => json!({"type": "auto"}),
            crate::ToolChoice::Required => json!({"type": "any"}),
            crate::ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
    }
    body
}

/// Whether an Anthropic usage object's counts are plausible.
fn valid(u: &Value) -> bool {
    crate::wire::usage_is_valid(
        u,
        &[
            &["input_tokens"],
            &["output_tokens"],
            &["cache_read_input_tokens"],
            &["cache_creation_input_tokens"],
        ],
    )
}

/// Anthropic reports uncached input separately from cache reads and writes;
/// the runtime's `input_tokens` is all of them.
fn usage_of(u: &Value) -> Usage {
    let uncached = u64_at(u, &["input_tokens"]);
    let cache_read = u64_at(u, &["cache_read_input_tokens"]);
    let cache_write = u64_at(u, &["cache_creation_input_tokens"]);
    Usage {
        input_tokens: uncached + cache_read + cache_write,
        cached_input_tokens: cache_read,
        output_tokens: u64_at(u, &["output_tokens"]),
        ..Usage::default()
    }
}

fn blocks_to_reply(content: &[Value]) -> (String, Vec<WireCall>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in content {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b["text"].as_str().unwrap_or_default()),
            Some("tool_use") => calls.push(WireCall {
                id: b.get("id").and_then(Value::as_str).map(str::to_string),
                name: b["name"].as_str().unwrap_or_default().to_string(),
                arguments: b.get("input").map(Value::to_string).unwrap_or_default(),
            }),
            _ => {}
        }
    }
    (text, calls)
}

/// Parse a non-streaming response body.
pub fn parse_response(body: &str) -> Result<WireReply, WireError> {
    let v = crate::wire::decode_body(body)?;
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| WireError::Decode("response has no `content` list".into()))?;
    let (text, calls) = blocks_to_reply(content);
    Ok(WireReply {
        text,
        calls,
        usage: v.get("usage").filter(|u| valid(u)).map(usage_of),
        stop: v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// What a stream has said so far: its content blocks (each with the
/// partial JSON of a tool use's input), its usage and its stop reason.
#[derive(Default)]
struct StreamState {
    blocks: BTreeMap<u64, (Value, String)>,
    usage: Option<Usage>,
    /// One implausible count makes the whole report unusable (estimated).
    lied: bool,
    stop: Option<String>,
}

impl StreamState {
    /// `message_start`: the usage reported so far.
    fn message_start(&mut self, v: &Value) {
        if let Some(u) = v["message"].get("usage") {
            self.lied |= !valid(u);
            self.usage = Some(usage_of(u));
        }
    }

    /// `content_block_start`: a new block at its index.
    fn content_block_start(&mut self, v: &Value) {
        let index = v["index"].as_u64().unwrap_or(self.blocks.len() as u64);
        self.blocks
            .insert(index, (v["content_block"].clone(), String::new()));
    }

    /// `content_block_delta`: text appended to a block (and shown), or a
    /// piece of a tool use's input JSON.
    fn content_block_delta(&mut self, v: &Value, on_text: &dyn Fn(&str)) -> Result<(), WireError> {
        let index = v["index"].as_u64().unwrap_or(0);
        let Some((block, partial)) = self.blocks.get_mut(&index) else {
            return Err(WireError::Stream(format!(
                "delta for unknown content block {index}"
            )));
        };
        let d = &v["delta"];
        match d.get("type").and_then(Value::as_str) {
            Some("text_delta") => {
                on_text(d["text"].as_str().unwrap_or_default());
                let t = format!(
                    "{}{}",
                    block["text"].as_str().unwrap_or_default(),
                    d["text"].as_str().unwrap_or_default()
                );
                block["text"] = Value::String(t);
            }
            Some("input_json_delta") => {
                partial.push_str(d["partial_json"].as_str().unwrap_or_default())
            }
            _ => {}
        }
        Ok(())
    }

    /// `message_delta`: the stop reason and the usage as updated.
    fn message_delta(&mut self, v: &Value) {
        if let Some(r) = v["delta"].get("stop_reason").and_then(Value::as_str) {
            self.stop = Some(r.to_string());
        }
        if let Some(u) = v.get("usage") {
            self.lied |= !valid(u);
            // Output tokens here are cumulative; input may be restated.
            let mut total = self.usage.unwrap_or_default();
            total.output_tokens = u64_at(u, &["output_tokens"]);
            if u.get("input_tokens").is_some() {
                let restated = usage_of(u);
                total.input_tokens = restated.input_tokens;
                total.cached_input_tokens = restated.cached_input_tokens;
            }
            self.usage = Some(total);
        }
    }

    /// The bytes of output the blocks hold so far.
    fn bytes(&self) -> usize {
        self.blocks
            .values()
            .map(|(b, partial)| partial.len() + b["text"].as_str().map_or(0, str::len))
            .sum()
    }

    /// The reply a finished stream gave.
    fn into_reply(self) -> WireReply {
        let usage = if self.lied { None } else { self.usage };
        let content: Vec<Value> = self
            .blocks
            .into_values()
            .map(|(mut block, partial)| {
                if block.get("type").and_then(Value::as_str) == Some("tool_use")
                    && !partial.is_empty()
                {
                    // Left as text when it does not parse: the action parser names the error.
                    block["input"] =
                        serde_json::from_str(&partial).unwrap_or(Value::String(partial));
                }
                block
            })
            .collect();
        let (text, mut calls) = blocks_to_reply(&content);
        for c in &mut calls {
            // A string `input` is raw partial JSON that failed to parse: pass it on verbatim.
            if let Ok(Value::String(raw)) = serde_json::from_str::<Value>(&c.arguments) {
                c.arguments = raw;
            }
        }
        WireReply {
            text,
            calls,
            usage,
            stop: self.stop,
        }
    }
}

/// Read a streamed response: one state machine over the event stream, its
/// states (text, tool-use input, usage) kept together so none is lost.
pub fn parse_stream(
    body: Box<dyn Read + Send>,
    limit: usize,
    max_tokens: u64,
    on_text: &dyn Fn(&str),
) -> Result<WireReply, WireError> {
    let cap = crate::wire::output_byte_cap(max_tokens);
    let mut sse = SseReader::new(body, limit);
    let mut state = StreamState::default();
    let mut finished = false;
    while let Some(ev) = sse
        .next_event()
        .map_err(|e| WireError::Stream(e.to_string()))?
    {
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| WireError::Decode(format!("stream event is not JSON: {e}")))?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "message_start" => state.message_start(&v),
            "content_block_start" => state.content_block_start(&v),
            "content_block_delta" => state.content_block_delta(&v, on_text)?,
            "message_delta" => state.message_delta(&v),
            "message_stop" => {
                finished = true;
                break;
            }
            "error" => {
                let msg = error_message(&v).unwrap_or_else(|| ev.data.clone());
                return Err(WireError::Stream(format!("error event: {msg}")));
            }
            _ => {} // ping and future event types
        }
        let bytes = state.bytes();
        if bytes > cap {
            return Err(WireError::Overlong { max_tokens, bytes });
        }
    }
    if !finished {
        return Err(WireError::Stream("stream ended before message_stop".into()));
    }
    Ok(state.into_reply())
}
