//! What the two wire dialects share: the request to build, the reply read
//! back, and the errors in between.

use crate::ToolChoice;
use crate::http::TransportError;
use loop_protocol::{Context, ToolCall, Usage};
use serde_json::Value;
use std::time::Duration;

/// Everything a dialect needs to build one request body.
pub struct WireRequest<'a> {
    /// Provider-side model name.
    pub model: &'a str,
    /// The system prompt (role prompt and, in JSON mode, the protocol included).
    pub system: &'a str,
    /// The (compacted) context.
    pub context: &'a Context,
    /// Completion cap for this call.
    pub max_output_tokens: u64,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Stream the answer.
    pub stream: bool,
    /// Native tool calling (else the JSON action protocol).
    pub native_tools: bool,
    /// Tool choice (native only).
    pub tool_choice: &'a ToolChoice,
    /// The name of the completion cap (`max_tokens`, or OpenAI's newer
    /// `max_completion_tokens`).
    pub max_tokens_field: &'a str,
}

/// One tool call as it came over the wire, arguments still text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireCall {
    /// The provider's id.
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text (unparsed).
    pub arguments: String,
}

/// One answer as it came over the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct WireReply {
    /// Text content.
    pub text: String,
    /// Native tool calls.
    pub calls: Vec<WireCall>,
    /// Provider-reported usage, if any.
    pub usage: Option<Usage>,
    /// Why generation stopped.
    pub stop: Option<String>,
}

/// A failed attempt.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    /// Nothing came back.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// An HTTP error status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status.
        status: u16,
        /// The provider's message (from its error body).
        message: String,
        /// `Retry-After`, if sent.
        retry_after: Option<Duration>,
    },
    /// The stream broke or carried an error event.
    #[error("stream: {0}")]
    Stream(String),
    /// A body that is not what the dialect promises.
    #[error("decode: {0}")]
    Decode(String),
    /// The answer ran far past the `max_tokens` asked for (a server that
    /// ignores it); the stream was cut off rather than paid for.
    #[error("the answer ran past {max_tokens} max_tokens (over {bytes} bytes) and was cut off")]
    Overlong {
        /// The limit asked for.
        max_tokens: u64,
        /// Bytes of answer received when it was cut.
        bytes: usize,
    },
}

/// How many bytes of answer a stream may carry for `max_tokens`: generous
/// (a token is rarely more than 8 bytes), so only a runaway trips it.
pub fn output_byte_cap(max_tokens: u64) -> usize {
    (max_tokens as usize).saturating_mul(8).saturating_add(4096)
}

impl WireError {
    /// Worth another attempt?
    pub fn retryable(&self) -> bool {
        match self {
            WireError::Transport(crate::http::TransportError::Stopped(_)) => false,
            WireError::Transport(_) | WireError::Stream(_) => true,
            WireError::Status { status, .. } => crate::retry::retryable_status(*status),
            WireError::Decode(_) | WireError::Overlong { .. } => false,
        }
    }

    /// Might the provider have processed (and billed) the prompt?
    pub fn maybe_billed(&self) -> bool {
        match self {
            WireError::Transport(t) => t.maybe_processed(),
            WireError::Status { status, .. } => *status >= 500 && *status != 529 && *status != 503,
            WireError::Stream(_) | WireError::Decode(_) | WireError::Overlong { .. } => true,
        }
    }
}

/// The message of an error body in either dialect:
/// `{"error": {"message": ...}}` or `{"type": "error", "error": {"type", "message"}}`.
pub fn error_message(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    if e.is_null() {
        return None;
    }
    let msg = e
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| e.to_string());
    Some(match e.get("type").and_then(Value::as_str) {
        Some(t) => format!("{t}: {msg}"),
        None => msg,
    })
}

/// Decode a non-streaming response body; an error object in a 200 is an error.
pub fn decode_body(body: &str) -> Result<Value, WireError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| WireError::Decode(format!("response is not JSON: {e}")))?;
    if let Some(msg) = error_message(&v) {
        return Err(WireError::Decode(format!("error in a 200 response: {msg}")));
    }
    Ok(v)
}

/// The most tokens one call can plausibly report; anything above is a lie.
pub const MAX_REPORTED_TOKENS: u64 = 100_000_000;

/// Whether every count a usage object reports at `paths` is a plausible
/// non-negative integer. A negative, fractional, huge or quoted count makes
/// the whole report unusable: it is treated as absent (and the call's usage
/// estimated and flagged), never as zero.
pub fn usage_is_valid(u: &Value, paths: &[&[&str]]) -> bool {
    paths.iter().all(|path| {
        let mut cur = u;
        for p in *path {
            match cur.get(p) {
                Some(next) => cur = next,
                None => return true,
            }
        }
        cur.is_null() || cur.as_u64().is_some_and(|n| n <= MAX_REPORTED_TOKENS)
    })
}

/// A non-negative integer at `path`, 0 when absent.
pub fn u64_at(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return 0,
        }
    }
    cur.as_u64().unwrap_or(0)
}

/// How an earlier turn is shown back to a model in the JSON protocol.
pub fn json_answer_text(thought: &Option<String>, calls: &[ToolCall]) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .map(|c| serde_json::json!({"tool": c.tool, "args": c.args}))
        .collect();
    serde_json::json!({"thought": thought, "calls": calls}).to_string()
}

/// Images a request carries at most: the most recent ones (the rest were
/// shown before, and their results say so by their digest; providers cap
/// a request's size and the images in it).
pub const MAX_IMAGES_SENT: usize = 4;

/// A tool result's text, saying so when its image is no longer sent.
pub fn with_unsent(content: &str, unsent: bool) -> String {
    if unsent {
        format!(
            "{content}\n(its image is no longer sent with each request: view it again to see it)"
        )
    } else {
        content.to_string()
    }
}

/// The messages of `context` whose images are sent: the last
/// [`MAX_IMAGES_SENT`] images, counted from the end.
pub fn images_sent(context: &loop_protocol::Context) -> std::collections::BTreeSet<usize> {
    use loop_protocol::Message;
    let mut left = MAX_IMAGES_SENT;
    let mut out = std::collections::BTreeSet::new();
    for (n, m) in context.messages.iter().enumerate().rev() {
        let count = match m {
            Message::User { images, .. } => images.len(),
            Message::Tool { image, .. } => usize::from(image.is_some()),
            Message::Assistant { .. } => 0,
        };
        if count > 0 && count <= left {
            left -= count;
            out.insert(n);
        }
    }
    out
}

#[cfg(test)]
mod image_tests {
    //! An image a tool shows, and one given with the task, reach each
    //! provider in its own shape; a context without one sends none.
    use super::WireRequest;
    use loop_protocol::observation::{Image, Observation};
    use loop_protocol::{Context, ToolCall};
    use serde_json::json;

    fn image() -> Image {
        Image {
            path: "shot.png".into(),
            media_type: "image/png".into(),
            bytes: 8,
            sha256: "ab".repeat(32),
            data_base64: "iVBORw0KGgo=".into(),
        }
    }

    /// A context: the instruction with an image, a `view_image` call and
    /// its result showing another.
    fn context() -> Context {
        let mut c = Context::new(String::new(), vec![], "fix the page");
        if let Some(loop_protocol::Message::User { images, .. }) = c.messages.first_mut() {
            images.push(image());
        }
        c.push_turn(
            None,
            vec![ToolCall {
                id: "c1".into(),
                tool: "view_image".into(),
                args: json!({"path": "shot.png"}),
            }],
        );
        let mut o = Observation::ok("c1", "view_image", "image shot.png: image/png", false);
        o.image = Some(Box::new(image()));
        c.push_observation(&o);
        c
    }

    pub(super) fn request(c: &Context) -> WireRequest<'_> {
        WireRequest {
            model: "m",
            system: "s",
            context: c,
            max_output_tokens: 100,
            temperature: None,
            stream: false,
            native_tools: true,
            tool_choice: &crate::ToolChoice::Auto,
            max_tokens_field: "max_tokens",
        }
    }

    #[test]
    fn openai_gets_image_url_parts_and_anthropic_image_blocks() {
        let c = context();
        let body = crate::openai::request_body(&request(&c));
        let url = "data:image/png;base64,iVBORw0KGgo=";
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs[1]["content"][1]["image_url"]["url"], url, "{body}");
        assert_eq!(msgs[3]["role"], "tool");
        assert_eq!(msgs[4]["role"], "user");
        assert_eq!(msgs[4]["content"][1]["type"], "image_url", "{body}");
        assert_eq!(msgs[4]["content"][1]["image_url"]["url"], url);

        let body = crate::anthropic::request_body(&request(&c));
        let msgs = body["messages"].as_array().unwrap();
        let first = &msgs[0]["content"];
        assert_eq!(first[1]["type"], "image", "{body}");
        assert_eq!(first[1]["source"]["data"], "iVBORw0KGgo=");
        let result = &msgs[2]["content"][0];
        assert_eq!(result["type"], "tool_result", "{body}");
        assert_eq!(result["content"][1]["source"]["media_type"], "image/png");
    }

    #[test]
    fn a_context_rebuilt_from_the_record_sends_no_image_and_says_so() {
        let mut o = Observation::ok("c1", "view_image", "image shot.png: image/png", false);
        o.image = Some(Box::new(image()));
        // What the ledger keeps of it: no bytes.
        let recorded: Observation =
            serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(recorded.image.as_ref().unwrap().sha256, "ab".repeat(32));
        assert!(recorded.image.as_ref().unwrap().data_base64.is_empty());
        let mut c = Context::new(String::new(), vec![], "x");
        c.push_observation(&recorded);
        let body = crate::openai::request_body(&request(&c));
        assert!(!body.to_string().contains("image_url"), "{body}");
        assert!(body.to_string().contains("view it again"), "{body}");
        let plain = Context::new(String::new(), vec![], "x");
        let body = crate::openai::request_body(&request(&plain));
        assert_eq!(body["messages"][1]["content"], "x");
    }
}

#[cfg(test)]
mod image_turn_tests {
    //! Tool messages stay together after their turn, the images after
    //! them; only the most recent images are carried.
    use loop_protocol::observation::{Image, Observation};
    use loop_protocol::{Context, ToolCall};
    use serde_json::json;

    fn image(n: usize) -> Image {
        Image {
            path: format!("s{n}.png"),
            media_type: "image/png".into(),
            bytes: 8,
            sha256: "cd".repeat(32),
            data_base64: format!("AAAA{n}"),
        }
    }

    fn call(id: &str, tool: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            tool: tool.into(),
            args: json!({}),
        }
    }

    fn body(c: &Context) -> serde_json::Value {
        crate::openai::request_body(&super::image_tests::request(c))
    }

    #[test]
    fn a_turn_of_two_calls_keeps_its_tool_messages_together() {
        let mut c = Context::new(String::new(), vec![], "x");
        c.push_turn(
            None,
            vec![call("c1", "view_image"), call("c2", "read_file")],
        );
        let mut o = Observation::ok("c1", "view_image", "image", false);
        o.image = Some(Box::new(image(1)));
        c.push_observation(&o);
        c.push_observation(&Observation::ok("c2", "read_file", "text", false));
        let b = body(&c);
        let roles: Vec<&str> = b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"],
            "{b}"
        );
        assert_eq!(
            b["messages"][5]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAAA1"
        );
    }

    #[test]
    fn only_the_most_recent_images_are_carried() {
        let mut c = Context::new(String::new(), vec![], "x");
        for n in 0..6 {
            let id = format!("c{n}");
            c.push_turn(None, vec![call(&id, "view_image")]);
            let mut o = Observation::ok(&id, "view_image", "image", false);
            o.image = Some(Box::new(image(n)));
            c.push_observation(&o);
        }
        let b = body(&c).to_string();
        assert!(!b.contains("AAAA0") && !b.contains("AAAA1"), "{b}");
        assert_eq!(b.matches("no longer sent").count(), 2, "{b}");
        for n in 2..6 {
            assert!(b.contains(&format!("AAAA{n}")), "{b}");
        }
    }
}
