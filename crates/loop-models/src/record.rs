//! `--record FILE` and `--model replay:FILE`.
//!
//! A recording is JSON Lines: a header naming the model, then one line per
//! model call with the SHA-256 of the context the runtime asked about, the
//! reply it got, and the HTTP exchanges behind it — every string passed
//! through a redactor first, and no key ever present. Each line is flushed
//! as it is written, so a crash keeps what was recorded.
//!
//! Replay answers each call with the recorded reply, but only if the runtime
//! asks exactly what was recorded (same context hash, same position). A
//! diverging replay stops with an error naming the exchange; it never
//! improvises.

use crate::{Model, WireExchange};
use loop_protocol::{CallLimits, Context, ModelInfo, ModelReply, Price, Turn, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// The format version written in the header.
pub const RECORDING_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Header {
    loop_recording: u32,
    model: ModelInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RecordedReply {
    Turn(Turn),
    Malformed {
        error: String,
        excerpt: String,
        usage: Usage,
    },
    Unavailable {
        error: String,
        usage: Usage,
    },
    NothingMore {
        reason: String,
    },
}

impl RecordedReply {
    fn of(r: &ModelReply) -> Self {
        match r.clone() {
            ModelReply::Turn(t) => RecordedReply::Turn(t),
            ModelReply::Malformed {
                error,
                excerpt,
                usage,
            } => RecordedReply::Malformed {
                error,
                excerpt,
                usage,
            },
            ModelReply::Unavailable { error, usage } => RecordedReply::Unavailable { error, usage },
            ModelReply::NothingMore { reason } => RecordedReply::NothingMore { reason },
        }
    }
    fn into_reply(self) -> ModelReply {
        match self {
            RecordedReply::Turn(t) => ModelReply::Turn(t),
            RecordedReply::Malformed {
                error,
                excerpt,
                usage,
            } => ModelReply::Malformed {
                error,
                excerpt,
                usage,
            },
            RecordedReply::Unavailable { error, usage } => ModelReply::Unavailable { error, usage },
            RecordedReply::NothingMore { reason } => ModelReply::NothingMore { reason },
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Exchange {
    n: u32,
    context_sha256: String,
    max_output_tokens: u64,
    reply: RecordedReply,
    #[serde(default)]
    http: Vec<HttpRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct HttpRecord {
    request: Value,
    status: u16,
    response: String,
}

/// Redacts secrets from recorded text.
pub type Redactor = Box<dyn Fn(&str) -> String + Send>;

/// Wraps a provider and writes every exchange to a file.
pub struct Recorder {
    inner: Box<dyn Model + Send>,
    file: std::fs::File,
    redact: Redactor,
    n: u32,
    error: Option<String>,
}

/// A recording or replay that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// File trouble.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// Not a recording.
    #[error("{path}:{line}: {message}")]
    Format {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

fn redact_value(v: &mut Value, redact: &dyn Fn(&str) -> String) {
    match v {
        Value::String(s) => *s = redact(s),
        Value::Array(a) => a.iter_mut().for_each(|x| redact_value(x, redact)),
        Value::Object(o) => o.values_mut().for_each(|x| redact_value(x, redact)),
        _ => {}
    }
}

impl Recorder {
    /// Record `inner` into `path` (created or truncated).
    #[allow(clippy::disallowed_methods)] // a recording file the person named
    pub fn create(
        inner: Box<dyn Model + Send>,
        path: &Path,
        redact: Redactor,
    ) -> Result<Self, RecordError> {
        let io = |e: std::io::Error| RecordError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let mut file = std::fs::File::create(path).map_err(io)?;
        let header = Header {
            loop_recording: RECORDING_VERSION,
            model: inner.info(),
        };
        let mut line = serde_json::to_value(&header).map_err(|e| io(std::io::Error::other(e)))?;
        redact_value(&mut line, &redact);
        writeln!(file, "{line}").map_err(io)?;
        file.sync_data().map_err(io)?;
        Ok(Recorder {
            inner,
            file,
            redact,
            n: 0,
            error: None,
        })
    }

    fn write(
        &mut self,
        context: &Context,
        limits: CallLimits,
        reply: &ModelReply,
        http: Vec<WireExchange>,
    ) {
        self.n += 1;
        let ex = Exchange {
            n: self.n,
            context_sha256: context.sha256().unwrap_or_default(),
            max_output_tokens: limits.max_output_tokens,
            reply: RecordedReply::of(reply),
            http: http
                .into_iter()
                .map(|h| HttpRecord {
                    request: h.request,
                    status: h.status,
                    response: h.response,
                })
                .collect(),
        };
        let result = serde_json::to_value(&ex)
            .map_err(std::io::Error::other)
            .and_then(|mut v| {
                redact_value(&mut v, &self.redact);
                writeln!(self.file, "{v}")?;
                self.file.flush()
            });
        if let Err(e) = result {
            self.error.get_or_insert(e.to_string());
        }
    }
}

impl Model for Recorder {
    fn info(&self) -> ModelInfo {
        self.inner.info()
    }
    fn next_turn(&mut self, context: &Context, limits: CallLimits) -> ModelReply {
        if let Some(e) = &self.error {
            return ModelReply::Unavailable {
                error: format!("the recording cannot be written: {e}"),
                usage: Usage::default(),
            };
        }
        let reply = self.inner.next_turn(context, limits);
        let http = self.inner.take_exchanges();
        self.write(context, limits, &reply, http);
        reply
    }
    fn price(&self) -> Option<Price> {
        self.inner.price()
    }
    fn max_output_tokens(&self) -> u64 {
        self.inner.max_output_tokens()
    }
    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }
    fn estimate_prompt_tokens(&self, context: &Context) -> u64 {
        self.inner.estimate_prompt_tokens(context)
    }
    fn resume_at(&mut self, turns: u32) {
        self.inner.resume_at(turns);
    }
    fn set_live(&mut self, feed: Option<loop_protocol::LiveFeed>) {
        self.inner.set_live(feed);
    }
    fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.inner.set_cancel(flag);
    }
}

/// Plays a recording back.
pub struct ReplayModel {
    path: String,
    info: ModelInfo,
    exchanges: Vec<Exchange>,
    next: usize,
}

impl ReplayModel {
    /// Load a recording.
    #[allow(clippy::disallowed_methods)] // a recording a person named on the command line
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| RecordError::Io {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let fmt = |line: usize, message: String| RecordError::Format {
            path: shown.clone(),
            line,
            message,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines
            .next()
            .ok_or_else(|| fmt(1, "empty file, not a recording".into()))?;
        let header: Header = serde_json::from_str(first)
            .map_err(|e| fmt(1, format!("not a recording header ({e})")))?;
        if header.loop_recording != RECORDING_VERSION {
            return Err(fmt(
                1,
                format!(
                    "recording version {} (this build reads {RECORDING_VERSION})",
                    header.loop_recording
                ),
            ));
        }
        let mut exchanges = Vec::new();
        for (i, line) in lines {
            let ex: Exchange = serde_json::from_str(line)
                .map_err(|e| fmt(i + 1, format!("not an exchange ({e})")))?;
            if ex.n as usize != exchanges.len() + 1 {
                return Err(fmt(
                    i + 1,
                    format!(
                        "exchange {} out of order (expected {})",
                        ex.n,
                        exchanges.len() + 1
                    ),
                ));
            }
            exchanges.push(ex);
        }
        let mut info = header.model;
        info.parameters = Some(serde_json::json!({
            "replayed": {"provider": info.provider, "name": info.name, "parameters": info.parameters}
        }));
        info.provider = "replay".into();
        info.name = shown.clone();
        info.source_sha256 = Some(loop_protocol::hash::sha256_hex(text.as_bytes()));
        Ok(ReplayModel {
            path: shown,
            info,
            exchanges,
            next: 0,
        })
    }

    /// Exchanges in the recording.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// True when the recording holds no exchange.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }
}

impl Model for ReplayModel {
    fn info(&self) -> ModelInfo {
        self.info.clone()
    }
    fn resume_at(&mut self, turns: u32) {
        self.next = turns as usize;
    }
    fn next_turn(&mut self, context: &Context, _limits: CallLimits) -> ModelReply {
        let n = self.next + 1;
        let Some(ex) = self.exchanges.get(self.next) else {
            return ModelReply::Unavailable {
                error: format!(
                    "replay diverged: the runtime asked for exchange {n}, but {} holds only {}",
                    self.path,
                    self.exchanges.len()
                ),
                usage: Usage::default(),
            };
        };
        let asked = context.sha256().unwrap_or_default();
        if asked != ex.context_sha256 {
            return ModelReply::Unavailable {
                error: format!(
                    "replay diverged at exchange {n} of {}: the runtime's context (sha256 {}) is not the recorded one ({})",
                    self.path,
                    &asked[..asked.len().min(16)],
                    &ex.context_sha256[..ex.context_sha256.len().min(16)]
                ),
                usage: Usage::default(),
            };
        }
        self.next += 1;
        ex.reply.clone().into_reply()
    }
}
