//! The HTTP boundary: one POST, a status, headers, and a body to read as it
//! arrives. Behind a trait so the wire clients can be driven by a real
//! server on 127.0.0.1 in tests and by `ureq` in production alike.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

/// One request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// Absolute URL.
    pub url: String,
    /// Headers (secrets included; never logged or recorded).
    pub headers: Vec<(String, String)>,
    /// JSON body.
    pub body: Vec<u8>,
    /// Give up at this instant (what is left of the task's time).
    pub deadline: Option<Instant>,
    /// Give up within a fraction of a second once this is set (cancel, SIGTERM).
    pub cancel: Option<Arc<AtomicBool>>,
}

impl HttpRequest {
    /// Why the caller should stop waiting now, if it should.
    fn stop_reason(&self) -> Option<&'static str> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
        {
            return Some("the task was cancelled");
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some("the task's time is up");
        }
        None
    }
}

/// One response, its body not yet read.
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body, read incrementally (server-sent events arrive over time).
    pub body: Box<dyn Read + Send>,
}

impl HttpResponse {
    /// The first header called `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A failure below HTTP: nothing came back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Could not connect (refused, unreachable, DNS).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// A connect or read timeout.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The connection broke mid-way.
    #[error("i/o error: {0}")]
    Io(String),
    /// The caller stopped waiting (cancelled, or out of time): not retried.
    #[error("stopped: {0}")]
    Stopped(String),
}

impl TransportError {
    /// True when the request may have reached the provider (and been billed).
    pub fn maybe_processed(&self) -> bool {
        !matches!(self, TransportError::Connect(_))
    }
}

/// How often a waiting caller looks at its cancel flag and deadline.
const POLL: Duration = Duration::from_millis(100);

/// A response body fed by the worker thread, chunk by chunk; reading it
/// stops within [`POLL`] of a cancel or the deadline, whatever the server
/// does (keep-alive comments forever, or silence).
struct ChannelBody {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    buf: Vec<u8>,
    pos: usize,
    req: HttpRequest,
}

impl Read for ChannelBody {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.pos < self.buf.len() {
                let n = out.len().min(self.buf.len() - self.pos);
                out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            // Not `Interrupted`: readers retry that one, forever.
            if let Some(why) = self.req.stop_reason() {
                return Err(std::io::Error::other(why));
            }
            match self.rx.recv_timeout(POLL) {
                Ok(Ok(chunk)) => {
                    self.buf = chunk;
                    self.pos = 0;
                }
                // (Wrapped: the body's own error may be `Interrupted`,
                // which readers retry; the worker has stopped, so a retry
                // would read an end the body never had.)
                Ok(Err(e)) => return Err(std::io::Error::other(e)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(0),
            }
        }
    }
}

/// What the worker sends first: the status and headers, or why not.
type Head = Result<(u16, Vec<(String, String)>), TransportError>;

fn pump(mut body: impl Read, tx: &SyncSender<std::io::Result<Vec<u8>>>) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match body.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                if tx.send(Ok(chunk[..n].to_vec())).is_err() {
                    // The caller stopped listening: stop reading.
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }
}

/// Sends requests.
pub trait Transport: Send {
    /// POST `req`; any HTTP status is a response, not an error.
    fn post(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError>;
}

/// Timeouts for the real transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing the connection.
    pub connect: Duration,
    /// Waiting for any single read (the first byte, or the next event of a stream).
    pub read: Duration,
    /// The whole call, streamed body included (a server that never stops is cut).
    pub call: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(120),
            call: Duration::from_secs(600),
        }
    }
}

/// The production transport: `ureq` with rustls.
pub struct UreqTransport {
    agent: ureq::Agent,
}

impl UreqTransport {
    /// A transport with these timeouts.
    pub fn new(timeouts: Timeouts) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // A redirect would turn the POST into a GET to wherever the
            // endpoint points, whose answer would pass for the model's.
            .max_redirects(0)
            .timeout_connect(Some(timeouts.connect))
            .timeout_recv_response(Some(timeouts.read))
            .timeout_per_read(Some(timeouts.read))
            .timeout_global(Some(timeouts.call))
            .build();
        UreqTransport {
            agent: config.into(),
        }
    }
}

impl Transport for UreqTransport {
    /// The request runs on a worker thread; this thread waits for it in
    /// steps of [`POLL`], so a cancel or the task's deadline stops the wait
    /// at once, however the server behaves. A worker left behind ends with
    /// its own timeouts.
    fn post(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let agent = self.agent.clone();
        let (head_tx, head_rx) = std::sync::mpsc::sync_channel::<Head>(1);
        let (body_tx, body_rx) = std::sync::mpsc::sync_channel(16);
        let url = req.url.clone();
        let headers = req.headers.clone();
        let payload = req.body.clone();
        std::thread::spawn(move || {
            let mut builder = agent.post(&url);
            for (k, v) in &headers {
                builder = builder.header(k.as_str(), v.as_str());
            }
            match builder.send(&payload[..]) {
                Err(e) => {
                    let _ = head_tx.send(Err(classify(e)));
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    let headers = response
                        .headers()
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.as_str().to_ascii_lowercase(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect();
                    if head_tx.send(Ok((status, headers))).is_ok() {
                        pump(response.into_body().into_reader(), &body_tx);
                    }
                }
            }
        });
        let (status, headers) = loop {
            if let Some(why) = req.stop_reason() {
                return Err(TransportError::Stopped(why.into()));
            }
            match head_rx.recv_timeout(POLL) {
                Ok(head) => break head?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Io("the request's worker ended".into()));
                }
            }
        };
        Ok(HttpResponse {
            status,
            headers,
            body: Box::new(ChannelBody {
                rx: body_rx,
                buf: Vec::new(),
                pos: 0,
                req: req.clone(),
            }),
        })
    }
}

/// The resolver's words for a name it cannot resolve (glibc, musl, macOS).
fn is_lookup_failure(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "failed to lookup address",
        "name or service not known",
        "nodename nor servname",
        "temporary failure in name resolution",
        "no address associated",
        "dns",
    ]
    .iter()
    .any(|w| m.contains(w))
}

fn classify(e: ureq::Error) -> TransportError {
    match e {
        ureq::Error::Timeout(t) => TransportError::Timeout(t.to_string()),
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => {
            TransportError::Connect(e.to_string())
        }
        ureq::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => {
                TransportError::Connect(io.to_string())
            }
            // A name that does not resolve: nothing was sent.
            _ if is_lookup_failure(&io.to_string()) => TransportError::Connect(io.to_string()),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                TransportError::Timeout(io.to_string())
            }
            _ => TransportError::Io(io.to_string()),
        },
        other => TransportError::Io(other.to_string()),
    }
}
