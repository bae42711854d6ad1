//! A network model: one configured endpoint speaking one dialect, with
//! retries, accounting and strict parsing of what comes back.

use crate::actions::{self, ActionError};
use crate::http::{HttpRequest, Transport};
use crate::retry::{Jitter, RetryPolicy, Sleeper, parse_retry_after};
use crate::wire::{WireError, WireReply, WireRequest, error_message};
use crate::{Model, ToolChoice, ToolProtocol};
use loop_protocol::{
    CallLimits, Context, ModelInfo, ModelReply, Price, ToolCall, Turn, Usage,
    context::estimate_tokens,
};
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

/// Which wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI-compatible Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Dialect {
    /// The spec prefix (`openai`, `anthropic`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
        }
    }
}

/// An API key: never printed, never recorded.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a key.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The key itself, for the one header that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// One endpoint's configuration.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Wire format.
    pub dialect: Dialect,
    /// Provider-side model name.
    pub model: String,
    /// Base URL (`…/v1` for OpenAI-compatible servers).
    pub base_url: String,
    /// API key, if the endpoint needs one.
    pub api_key: Option<Secret>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Completion tokens asked for when the budget allows.
    pub max_output_tokens: u64,
    /// The model's context window; the context is compacted to fit.
    pub context_tokens: u64,
    /// Native tool calling or the JSON action protocol.
    pub tool_protocol: ToolProtocol,
    /// Tool choice (native only).
    pub tool_choice: ToolChoice,
    /// Stream answers.
    pub stream: bool,
    /// It takes images (the configuration says so: `images: true`).
    pub images: bool,
    /// Prices, if known.
    pub price: Option<Price>,
    /// Retries.
    pub retry: RetryPolicy,
    /// Extra system prompt for this role (e.g. the checker's).
    pub role_prompt: Option<String>,
    /// The role it plays (`maker`, `checker`), for provenance.
    pub role: String,
    /// The request field that caps the completion: OpenAI's own API wants
    /// `max_completion_tokens` (its newer models refuse `max_tokens`); other
    /// OpenAI-compatible servers take `max_tokens`. Anthropic's is fixed.
    pub max_tokens_field: String,
    /// Connect, read and whole-call timeouts.
    pub timeouts: crate::http::Timeouts,
}

impl EndpointConfig {
    /// Defaults for `dialect` and `model` (base URL from the usual place).
    pub fn new(dialect: Dialect, model: impl Into<String>) -> Self {
        EndpointConfig {
            dialect,
            model: model.into(),
            base_url: match dialect {
                Dialect::OpenAi => "https://api.openai.com/v1".into(),
                Dialect::Anthropic => "https://api.anthropic.com".into(),
            },
            api_key: None,
            temperature: None,
            max_output_tokens: 4096,
            context_tokens: 128_000,
            tool_protocol: ToolProtocol::Native,
            tool_choice: ToolChoice::Auto,
            stream: true,
            images: false,
            price: None,
            retry: RetryPolicy::default(),
            role_prompt: None,
            role: "maker".into(),
            max_tokens_field: "max_tokens".into(),
            timeouts: crate::http::Timeouts::default(),
        }
    }

    fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match self.dialect {
            Dialect::OpenAi => format!("{base}/chat/completions"),
            Dialect::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
            Dialect::Anthropic => format!("{base}/v1/messages"),
        }
    }

    /// The settings that shape answers, for provenance (no key).
    pub fn parameters(&self) -> serde_json::Value {
        json!({
            "role": self.role,
            "base_url": self.base_url,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
            "context_tokens": self.context_tokens,
            "tool_protocol": match self.tool_protocol { ToolProtocol::Native => "native", ToolProtocol::Json => "json" },
            "tool_choice": match &self.tool_choice {
                ToolChoice::Auto => "auto".to_string(),
                ToolChoice::Required => "required".to_string(),
                ToolChoice::Tool(t) => format!("tool:{t}"),
            },
            "stream": self.stream,
            "call_timeout_secs": self.timeouts.call.as_secs(),
            "price_per_mtok": self.price.map(|p| json!([p.input_per_mtok, p.cached_input_per_mtok, p.output_per_mtok])),
            "role_prompt_sha256": self.role_prompt.as_ref().map(|p| loop_protocol::hash::sha256_hex(p.as_bytes())),
        })
    }
}

pub use loop_protocol::WireExchange;

/// The largest response body read, in bytes.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// A model behind an HTTP endpoint.
pub struct HttpModel {
    cfg: EndpointConfig,
    transport: Box<dyn Transport>,
    sleeper: Box<dyn Sleeper>,
    jitter: Jitter,
    turn: u32,
    exchanges: Vec<WireExchange>,
    /// Reported prompt tokens per estimated token, the most seen (≥ 1).
    calibration: f64,
    /// Set to stop an in-flight call (cancel, SIGTERM).
    cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Where streamed text goes as it arrives (a person watching).
    live: Option<loop_protocol::LiveFeed>,
}

/// The least answer asked for when the prompt fills the model's window
/// (a tool call needs some room).
const MIN_ANSWER_TOKENS: u64 = 64;

impl HttpModel {
    /// A model with this configuration, transport and sleeper.
    pub fn new(
        cfg: EndpointConfig,
        transport: Box<dyn Transport>,
        sleeper: Box<dyn Sleeper>,
    ) -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        HttpModel {
            cfg,
            transport,
            sleeper,
            jitter: Jitter::new(seed),
            turn: 0,
            exchanges: Vec::new(),
            calibration: 1.0,
            cancel: None,
            live: None,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    fn system_prompt(&self, context: &Context) -> String {
        let mut s = context.system.clone();
        if let Some(p) = &self.cfg.role_prompt {
            s.push_str("\n\n");
            s.push_str(p);
        }
        if self.cfg.tool_protocol == ToolProtocol::Json {
            s.push_str(&actions::json_protocol_instructions(&context.tools));
        }
        s
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut h = vec![("content-type".to_string(), "application/json".to_string())];
        match self.cfg.dialect {
            Dialect::OpenAi => {
                if let Some(k) = &self.cfg.api_key {
                    h.push(("authorization".into(), format!("Bearer {}", k.expose())));
                }
            }
            Dialect::Anthropic => {
                if let Some(k) = &self.cfg.api_key {
                    h.push(("x-api-key".into(), k.expose().to_string()));
                }
                h.push((
                    "anthropic-version".into(),
                    crate::anthropic::API_VERSION.into(),
                ));
            }
        }
        if self.cfg.stream {
            h.push(("accept".into(), "text/event-stream".into()));
        }
        h
    }

    /// Stop in-flight calls within a fraction of a second once `cancel` is set.
    pub fn with_cancel(mut self, cancel: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.cancel = Some(cancel);
        self
    }

    fn stopped(&self, deadline: Option<std::time::Instant>) -> Option<&'static str> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
        {
            return Some("the task was cancelled");
        }
        deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
            .then_some("the task's time is up")
    }

    fn attempt(
        &mut self,
        body: &serde_json::Value,
        max_tokens: u64,
        deadline: Option<std::time::Instant>,
    ) -> Result<WireReply, WireError> {
        let req = HttpRequest {
            url: self.cfg.url(),
            headers: self.headers(),
            body: body.to_string().into_bytes(),
            deadline,
            cancel: self.cancel.clone(),
        };
        let resp = match self.transport.post(&req) {
            Ok(r) => r,
            Err(e) => {
                self.keep(body, 0, e.to_string());
                return Err(e.into());
            }
        };
        let status = resp.status;
        let retry_after = resp.header("retry-after").and_then(|v| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            parse_retry_after(v, now)
        });
        let is_stream = resp
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if status != 200 {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(
                &mut std::io::Read::take(resp.body, 64 * 1024),
                &mut text,
            );
            self.keep(body, status, text.clone());
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| error_message(&v))
                .unwrap_or_else(|| text.chars().take(300).collect());
            return Err(WireError::Status {
                status,
                message,
                retry_after,
            });
        }
        if is_stream {
            let tee = Tee::new(resp.body);
            let kept = tee.kept.clone();
            let live = self.live.clone();
            let on_text = move |t: &str| {
                if !t.is_empty() {
                    loop_protocol::live::emit(
                        live.as_ref(),
                        loop_protocol::Live::Text {
                            fragment: t.to_string(),
                        },
                    );
                }
            };
            let r = match self.cfg.dialect {
                Dialect::OpenAi => {
                    crate::openai::parse_stream(Box::new(tee), MAX_BODY, max_tokens, &on_text)
                }
                Dialect::Anthropic => {
                    crate::anthropic::parse_stream(Box::new(tee), MAX_BODY, max_tokens, &on_text)
                }
            };
            let text = kept
                .lock()
                .map(|k| String::from_utf8_lossy(&k).into_owned())
                .unwrap_or_default();
            self.keep(body, status, text);
            r
        } else {
            // Bounded as a stream is: an answer far past `max_tokens` is a
            // runaway (or a hostile endpoint), not something to read whole.
            let cap = crate::wire::output_byte_cap(max_tokens)
                .saturating_add(64 * 1024)
                .min(MAX_BODY);
            let mut text = String::new();
            let read = std::io::Read::read_to_string(
                &mut std::io::Read::take(resp.body, cap as u64 + 1),
                &mut text,
            );
            if text.len() > cap {
                self.keep(
                    body,
                    status,
                    loop_protocol::observation::head_tail(&text, 4096),
                );
                return Err(WireError::Overlong {
                    max_tokens,
                    bytes: text.len(),
                });
            }
            self.keep(body, status, text.clone());
            read.map_err(|e| WireError::Stream(e.to_string()))
                .and_then(|_| match self.cfg.dialect {
                    Dialect::OpenAi => crate::openai::parse_response(&text),
                    Dialect::Anthropic => crate::anthropic::parse_response(&text),
                })
        }
    }

    fn keep(&mut self, request: &serde_json::Value, status: u16, response: String) {
        let mut response = response;
        if let Some(k) = &self.cfg.api_key {
            response = response.replace(k.expose(), "[REDACTED]");
        }
        self.exchanges.push(WireExchange {
            request: request.clone(),
            status,
            response: loop_protocol::observation::head_tail(&response, 256 * 1024),
        });
    }

    /// The request body for `context`, and its size in estimated tokens.
    /// The context is compacted to the model's window (in the runtime's
    /// units, corrected by what this provider's counts showed so far).
    fn body_for(&self, context: &Context, max_output_tokens: u64) -> (serde_json::Value, u64) {
        let window = self
            .cfg
            .context_tokens
            .saturating_sub(self.cfg.max_output_tokens) as f64
            / self.calibration;
        let compacted = context.compacted(window as u64);
        let system = self.system_prompt(&compacted);
        let native = self.cfg.tool_protocol == ToolProtocol::Native;
        let wreq = WireRequest {
            model: &self.cfg.model,
            system: &system,
            context: &compacted,
            max_output_tokens,
            temperature: self.cfg.temperature,
            stream: self.cfg.stream,
            native_tools: native,
            tool_choice: &self.cfg.tool_choice,
            max_tokens_field: match self.cfg.dialect {
                Dialect::OpenAi => &self.cfg.max_tokens_field,
                Dialect::Anthropic => "max_tokens",
            },
        };
        let body = match self.cfg.dialect {
            Dialect::OpenAi => crate::openai::request_body(&wreq),
            Dialect::Anthropic => crate::anthropic::request_body(&wreq),
        };
        let estimate = estimate_tokens(&body.to_string());
        (body, estimate)
    }

    /// Tokens the next call's prompt will take, by the runtime's estimate
    /// scaled to this provider's own counts (with a 10% margin).
    pub fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        let (_, raw) = self.body_for(context, self.cfg.max_output_tokens);
        (raw as f64 * self.calibration * 1.1).ceil() as u64
    }

    /// The call itself: retries, accounting, then strict parsing.
    fn call(&mut self, context: &Context, limits: CallLimits) -> ModelReply {
        self.turn += 1;
        // Only this call's exchanges are kept (for a recorder to take);
        // without one they would pile up, a full request each.
        self.exchanges.clear();
        let (mut body, mut prompt_estimate) = self.body_for(context, limits.max_output_tokens);
        // The prompt and the answer share the model's window: where what
        // cannot be compacted (the instructions, the tools' schemas, the
        // task) leaves less than `max_output_tokens`, the answer asked for
        // is what is left (a server refuses a request past its window).
        let mut limits = limits;
        let prompt = (prompt_estimate as f64 * self.calibration * 1.1).ceil() as u64;
        let room = self.cfg.context_tokens.saturating_sub(prompt);
        if room < limits.max_output_tokens {
            limits.max_output_tokens = room.max(MIN_ANSWER_TOKENS);
            (body, prompt_estimate) = self.body_for(context, limits.max_output_tokens);
        }
        let deadline = limits
            .time_left_ms
            .map(|ms| std::time::Instant::now() + std::time::Duration::from_millis(ms));
        let mut charged = Usage::default();
        let mut attempt = 0;
        let reply = loop {
            attempt += 1;
            match self.attempt(&body, limits.max_output_tokens, deadline) {
                Ok(r) => break r,
                Err(WireError::Overlong { max_tokens, bytes }) => {
                    // The server ignored max_tokens: what it sent is charged as
                    // estimated, and the model is told, not the runtime stopped.
                    let mut usage = Usage {
                        input_tokens: prompt_estimate,
                        output_tokens: (bytes / loop_protocol::context::BYTES_PER_TOKEN) as u64,
                        estimated: true,
                        attempts: 1,
                        ..Usage::default()
                    };
                    usage.absorb(&charged);
                    if let Some(p) = self.cfg.price {
                        usage.cost_usd = p.cost(&usage);
                    }
                    return ModelReply::Malformed {
                        error: WireError::Overlong { max_tokens, bytes }.to_string(),
                        excerpt: String::new(),
                        usage,
                    };
                }
                Err(e) => {
                    // Every attempt is counted; one the provider may have
                    // processed is charged its estimated prompt.
                    charged.absorb(&Usage {
                        input_tokens: if e.maybe_billed() { prompt_estimate } else { 0 },
                        estimated: e.maybe_billed(),
                        attempts: 1,
                        ..Usage::default()
                    });
                    let stopped = self.stopped(deadline);
                    if stopped.is_some() || !e.retryable() || attempt >= self.cfg.retry.max_attempts
                    {
                        if let Some(p) = self.cfg.price {
                            charged.cost_usd = p.cost(&charged);
                        }
                        return ModelReply::Unavailable {
                            error: format!(
                                "{} {}: {e} (after {attempt} attempt(s))",
                                self.cfg.dialect.name(),
                                self.cfg.model
                            ),
                            usage: charged,
                        };
                    }
                    let retry_after = match &e {
                        WireError::Status { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    let wait = self.cfg.retry.delay(attempt, retry_after, &mut self.jitter);
                    tracing::info!(
                        "{} {}: attempt {attempt} failed ({e}); retrying in {} ms",
                        self.cfg.dialect.name(),
                        self.cfg.model,
                        wait.as_millis()
                    );
                    self.sleeper.sleep(wait);
                }
            }
        };
        let mut usage = match reply.usage {
            Some(u) => {
                // Learn how this provider's counts compare with the estimate.
                if prompt_estimate > 0 && u.input_tokens > 0 {
                    let ratio = u.input_tokens as f64 / prompt_estimate as f64;
                    self.calibration = self.calibration.max(ratio).min(4.0);
                }
                Usage { attempts: 1, ..u }
            }
            None => Usage {
                input_tokens: prompt_estimate,
                output_tokens: estimate_tokens(&reply.text)
                    + reply
                        .calls
                        .iter()
                        .map(|c| estimate_tokens(&c.arguments))
                        .sum::<u64>(),
                estimated: true,
                attempts: 1,
                ..Usage::default()
            },
        };
        usage.absorb(&charged);
        if let Some(p) = self.cfg.price {
            usage.cost_usd = p.cost(&usage);
        }
        self.interpret(reply, usage, context)
    }

    fn interpret(&self, reply: WireReply, usage: Usage, context: &Context) -> ModelReply {
        let excerpt = |text: &str| loop_protocol::observation::head_tail(text, 2_000);
        let served_by = Some(format!("{}:{}", self.cfg.dialect.name(), self.cfg.model));
        let thought = Some(reply.text.trim().to_string()).filter(|t| !t.is_empty());
        if self.cfg.tool_protocol == ToolProtocol::Json {
            return match actions::parse_json_answer(&reply.text, &context.tools) {
                Ok(a) => ModelReply::Turn(Turn {
                    thought: a.thought,
                    calls: actions::number_calls(self.turn, a.calls),
                    usage,
                    served_by,
                }),
                Err(e) => malformed(e, excerpt(&reply.text), usage),
            };
        }
        let mut calls = Vec::new();
        for (i, c) in reply.calls.iter().enumerate() {
            match actions::parse_native_call(&context.tools, i, &c.name, &c.arguments) {
                Ok(args) => calls.push(ToolCall {
                    id: c
                        .id
                        .clone()
                        .filter(|id| !id.is_empty())
                        .unwrap_or_else(|| format!("t{}-c{}", self.turn, i + 1)),
                    tool: c.name.clone(),
                    args,
                }),
                Err(e) => {
                    return malformed(e, excerpt(&format!("{}({})", c.name, c.arguments)), usage);
                }
            }
        }
        if calls.len() > actions::MAX_CALLS {
            return malformed(ActionError::TooManyCalls(calls.len()), String::new(), usage);
        }
        ModelReply::Turn(Turn {
            thought,
            calls,
            usage,
            served_by,
        })
    }
}

fn malformed(e: ActionError, excerpt: String, usage: Usage) -> ModelReply {
    ModelReply::Malformed {
        error: e.to_string(),
        excerpt,
        usage,
    }
}

impl Model for HttpModel {
    fn accepts_images(&self) -> bool {
        self.cfg.images
    }
    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: self.cfg.dialect.name().into(),
            name: self.cfg.model.clone(),
            source_sha256: None,
            parameters: Some(self.cfg.parameters()),
        }
    }

    fn next_turn(&mut self, context: &Context, limits: CallLimits) -> ModelReply {
        self.call(context, limits)
    }

    fn price(&self) -> Option<Price> {
        self.cfg.price
    }

    fn max_output_tokens(&self) -> u64 {
        self.cfg.max_output_tokens
    }

    fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        HttpModel::estimate_prompt_tokens(self, context)
    }

    fn take_exchanges(&mut self) -> Vec<WireExchange> {
        std::mem::take(&mut self.exchanges)
    }

    fn set_live(&mut self, feed: Option<loop_protocol::LiveFeed>) {
        self.live = feed;
    }

    fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.cancel = Some(flag);
    }
}

/// Copies what a stream reader passes through, for the record.
struct Tee {
    inner: Box<dyn std::io::Read + Send>,
    kept: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Tee {
    fn new(inner: Box<dyn std::io::Read + Send>) -> Self {
        Tee {
            inner,
            kept: Default::default(),
        }
    }
}

impl std::io::Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Ok(mut k) = self.kept.lock()
            && k.len() < MAX_BODY
        {
            k.extend_from_slice(&buf[..n]);
        }
        Ok(n)
    }
}
