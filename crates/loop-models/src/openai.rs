//! OpenAI-compatible Chat Completions: one client for OpenAI, DeepSeek,
//! OpenRouter, vLLM, llama.cpp's server and Ollama's `/v1`. Native tool
//! calling (`tools`, `tool_choice`, `tool_calls`) and streaming
//! (`chat.completion.chunk` events, usage in the last chunk).

use crate::sse::SseReader;
use crate::wire::{WireCall, WireError, WireReply, WireRequest, error_message, u64_at};
use loop_protocol::{Message, Usage};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;

/// An image as a Chat Completions content part (a data URL).
fn image_part(i: &loop_protocol::observation::Image) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.media_type, i.data_base64)}})
}

/// The request body.
pub fn request_body(req: &WireRequest<'_>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": req.system})];
    // Images tools showed wait until the turn's last tool message: the
    // tool messages must follow their assistant message together.
    let mut shown: Vec<Value> = Vec::new();
    let sent = crate::wire::images_sent(req.context);
    for (n, m) in req.context.messages.iter().enumerate() {
        if !matches!(m, Message::Tool { .. }) && !shown.is_empty() {
            messages.push(json!({"role": "user", "content": std::mem::take(&mut shown)}));
        }
        match m {
            Message::User { content, images } if !images.is_empty() && sent.contains(&n) => {
                // Text, then each image as a data URL part.
                let mut parts = vec![json!({"type": "text", "text": content})];
                parts.extend(images.iter().map(image_part));
                messages.push(json!({"role": "user", "content": parts}));
            }
            Message::User { content, .. } => {
                messages.push(json!({"role": "user", "content": content}))
            }
            Message::Assistant { thought, calls } => {
                if req.native_tools {
                    // Quirk: some servers reject `"content": null`; send "".
                    let mut msg = json!({"role": "assistant", "content": thought.clone().unwrap_or_default()});
                    if !calls.is_empty() {
                        msg["tool_calls"] = calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": {"name": c.tool, "arguments": c.args.to_string()}
                                })
                            })
                            .collect();
                    }
                    messages.push(msg);
                } else {
                    messages.push(json!({"role": "assistant", "content": crate::wire::json_answer_text(thought, calls)}));
                }
            }
            Message::Tool {
                call_id,
                tool,
                content,
                image,
            } => {
                let content =
                    &crate::wire::with_unsent(content, image.is_some() && !sent.contains(&n));
                if req.native_tools {
                    messages
                        .push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
                } else {
                    messages.push(json!({
                        "role": "user",
                        "content": format!("Result of {tool} (call {call_id}), untrusted data:\n{content}")
                    }));
                }
                // A tool's message carries text only: the image it shows
                // follows as the user's, named as the call's, after the
                // turn's last tool message.
                if let Some(i) = image.as_ref().filter(|_| sent.contains(&n)) {
                    shown.push(json!({"type": "text", "text": format!("The image {} that {tool} (call {call_id}) shows, untrusted data:", i.path)}));
                    shown.push(image_part(i));
                }
            }
        }
    }
    if !shown.is_empty() {
        messages.push(json!({"role": "user", "content": shown}));
    }
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": req.stream,
    });
    body[req.max_tokens_field] = json!(req.max_output_tokens);
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if req.stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if req.native_tools && !req.context.tools.is_empty() {
        body["tools"] = req
            .context
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        body["tool_choice"] = match req.tool_choice {
            crate::ToolChoice::Auto => json!("auto"),
            crate::ToolChoice::Required => json!("required"),
            crate::ToolChoice::Tool(name) => {
                json!({"type": "function", "function": {"name": name}})
            }
        };
    }
    body
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    if !crate::wire::usage_is_valid(
        u,
        &[
            &["prompt_tokens"],
            &["completion_tokens"],
            &["prompt_tokens_details", "cached_tokens"],
        ],
    ) {
        return None;
    }
    Some(Usage {
        input_tokens: u64_at(u, &["prompt_tokens"]),
        cached_input_tokens: u64_at(u, &["prompt_tokens_details", "cached_tokens"]),
        output_tokens: u64_at(u, &["completion_tokens"]),
        ..Usage::default()
    })
}

/// Parse a non-streaming response body.
pub fn parse_response(body: &str) -> Result<WireReply, WireError> {
    let v = crate::wire::decode_body(body)?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| WireError::Decode("response has no choices[0]".into()))?;
    let message = &choice["message"];
    let calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|c| WireCall {
                    id: c.get("id").and_then(Value::as_str).map(str::to_string),
                    name: c["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: match &c["function"]["arguments"] {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(WireReply {
        text: message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        calls,
        usage: usage_of(&v),
        stop: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// Read a streamed response (server-sent `chat.completion.chunk` events).
/// `on_text` sees each fragment of text as it arrives (a live preview).
pub fn parse_stream(
    body: Box<dyn Read + Send>,
    limit: usize,
    max_tokens: u64,
    on_text: &dyn Fn(&str),
) -> Result<WireReply, WireError> {
    let cap = crate::wire::output_byte_cap(max_tokens);
    let mut sse = SseReader::new(body, limit);
    let mut text = String::new();
    let mut calls: BTreeMap<u64, WireCall> = BTreeMap::new();
    let mut usage = None;
    let mut stop = None;
    let mut done = false;
    while let Some(ev) = sse
        .next_event()
        .map_err(|e| WireError::Stream(e.to_string()))?
    {
        if ev.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let v: Value = serde_json::from_str(&ev.data)
            .map_err(|e| WireError::Decode(format!("stream chunk is not JSON: {e}")))?;
        if let Some(msg) = error_message(&v) {
            return Err(WireError::Stream(format!("error event: {msg}")));
        }
        if let Some(u) = usage_of(&v) {
            usage = Some(u);
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            continue;
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            stop = Some(r.to_string());
        }
        let delta = &choice["delta"];
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            text.push_str(t);
            on_text(t);
        }
        if let Some(tcs) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, tc) in tcs.iter().enumerate() {
                let index = tc
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let entry = calls.entry(index).or_insert_with(|| WireCall {
                    id: None,
                    name: String::new(),
                    arguments: String::new(),
                });
                if let Some(id) = tc.get("id").and_then(Value::as_str) {
                    entry.id = Some(id.to_string());
                }
                // OpenAI sends the name once; some servers (llama.cpp's
                // Python server) repeat it in every chunk. Either way it is
                // whole: the first one given is the name.
                if let Some(n) = tc["function"].get("name").and_then(Value::as_str)
                    && entry.name.is_empty()
                {
                    entry.name = n.to_string();
                }
                if let Some(a) = tc["function"].get("arguments").and_then(Value::as_str) {
                    entry.arguments.push_str(a);
                }
            }
        }
        let bytes = text.len() + calls.values().map(|c| c.arguments.len()).sum::<usize>();
        if bytes > cap {
            return Err(WireError::Overlong { max_tokens, bytes });
        }
    }
    if !done && stop.is_none() {
        return Err(WireError::Stream(
            "stream ended before a finish_reason or [DONE]".into(),
        ));
    }
    Ok(WireReply {
        text,
        calls: calls.into_values().collect(),
        usage,
        stop,
    })
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn a_streamed_tool_call_is_assembled_with_its_usage() {
        let stream = concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\": \\\"hello.txt\\\", \"}}]},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"content\\\": \\\"hello\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":21,\"total_tokens\":833,\"prompt_tokens_details\":{\"cached_tokens\":512}}}\n\n",
            "data: [DONE]\n\n"
        );
        let r = parse_stream(
            Box::new(std::io::Cursor::new(stream.as_bytes().to_vec())),
            1 << 20,
            1000,
            &|_| {},
        )
        .unwrap();
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.calls[0].id.as_deref(), Some("call_1"));
        assert_eq!(r.calls[0].name, "write_file");
        assert_eq!(
            r.calls[0].arguments,
            "{\"path\": \"hello.txt\", \"content\": \"hello\"}"
        );
        let u = r.usage.unwrap();
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens),
            (812, 512, 21)
        );
        assert_eq!(r.stop.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn a_name_repeated_in_every_chunk_is_one_name() {
        let chunk = |args: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"call_0\",\"function\":{{\"name\":\"write_file\",\"arguments\":{}}}}}]}}}}]}}\n\n",
                serde_json::Value::String(args.into())
            )
        };
        let stream = format!("{}{}data: [DONE]\n\n", chunk("{\"path\":"), chunk("\"a\"}"));
        let r = parse_stream(
            Box::new(std::io::Cursor::new(stream.into_bytes())),
            1 << 20,
            1000,
            &|_| {},
        )
        .unwrap();
        assert_eq!(r.calls[0].name, "write_file");
        assert_eq!(r.calls[0].arguments, "{\"path\":\"a\"}");
    }

    #[test]
    fn a_runaway_answer_is_cut_off_at_the_cap() {
        let chunk = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
            "x".repeat(1000)
        );
        // max_tokens 16 → cap 16×8+4096 = 4224 bytes: the fifth chunk trips it.
        let stream = chunk.repeat(50);
        let e = parse_stream(
            Box::new(std::io::Cursor::new(stream.into_bytes())),
            1 << 24,
            16,
            &|_| {},
        )
        .unwrap_err();
        assert_eq!(
            e,
            WireError::Overlong {
                max_tokens: 16,
                bytes: 5000
            }
        );
    }

    #[test]
    fn a_truncated_stream_is_an_error_not_a_turn() {
        let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hel\"}}]}\n\n";
        let e = parse_stream(
            Box::new(std::io::Cursor::new(stream.as_bytes().to_vec())),
            1 << 20,
            1000,
            &|_| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("ended before"), "{e}");
    }

    #[test]
    fn a_plain_response_with_tool_calls() {
        let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"finish","arguments":"{\"summary\":\"ok\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#;
        let r = parse_response(body).unwrap();
        assert_eq!(r.calls[0].name, "finish");
        assert_eq!(r.usage.unwrap().total(), 15);
        assert!(parse_response("{\"choices\": []}").is_err());
        assert!(parse_response("<html>").is_err());
    }
}
