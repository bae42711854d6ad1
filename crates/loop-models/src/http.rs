//! The HTTP boundary: one POST, a status, headers, and a body to read as it
//! arrives. Behind a trait so the wire clients can be driven by a real
//! server on 127.0.0.1 in tests and by `ureq` in production alike.

use std::io::Read;
use std::time::Duration;

/// One request.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// Absolute URL.
    pub url: String,
    /// Headers (secrets included; never logged or recorded).
    pub headers: Vec<(String, String)>,
    /// JSON body.
    pub body: Vec<u8>,
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
}

impl TransportError {
    /// True when the request may have reached the provider (and been billed).
    pub fn maybe_processed(&self) -> bool {
        !matches!(self, TransportError::Connect(_))
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
    fn post(&self, req: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let mut builder = self.agent.post(&req.url);
        for (k, v) in &req.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let response = builder.send(&req.body[..]).map_err(classify)?;
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
        let body = response.into_body().into_reader();
        Ok(HttpResponse {
            status,
            headers,
            body: Box::new(body),
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
