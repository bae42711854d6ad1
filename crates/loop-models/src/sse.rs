//! Server-sent events, as the providers stream them: `event:` and `data:`
//! fields, a blank line ends an event, `:` lines are comments. Bounded: a
//! stream larger than the limit is an error, not an allocation.

use std::io::{BufRead, BufReader, Read};

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Why a stream could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// The connection failed mid-stream.
    #[error("stream broke after {bytes} bytes: {message}")]
    Io {
        /// Bytes read before.
        bytes: usize,
        /// The error.
        message: String,
    },
    /// More than the limit.
    #[error("stream exceeds {0} bytes")]
    TooLarge(usize),
}

/// Reads events one at a time.
pub struct SseReader<R: Read> {
    inner: BufReader<R>,
    read: usize,
    limit: usize,
    done: bool,
}

impl<R: Read> SseReader<R> {
    /// Read at most `limit` bytes of stream.
    pub fn new(inner: R, limit: usize) -> Self {
        SseReader {
            inner: BufReader::new(inner),
            read: 0,
            limit,
            done: false,
        }
    }

    /// The next event, or `None` at the end of the stream.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        if self.done {
            return Ok(None);
        }
        let mut event: Option<String> = None;
        let mut data: Vec<String> = Vec::new();
        let mut any_field = false;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = self
                .inner
                .by_ref()
                .take((self.limit - self.read + 1) as u64)
                .read_until(b'\n', &mut line)
                .map_err(|e| SseError::Io {
                    bytes: self.read,
                    message: e.to_string(),
                })?;
            self.read += n;
            if self.read > self.limit {
                return Err(SseError::TooLarge(self.limit));
            }
            if n == 0 {
                self.done = true;
                return Ok(any_field.then(|| SseEvent {
                    event,
                    data: data.join("\n"),
                }));
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                if any_field {
                    return Ok(Some(SseEvent {
                        event,
                        data: data.join("\n"),
                    }));
                }
                continue;
            }
            if text.starts_with(':') {
                continue;
            }
            let (field, value) = match text.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (text, ""),
            };
            match field {
                "event" => {
                    event = Some(value.to_string());
                    any_field = true;
                }
                "data" => {
                    data.push(value.to_string());
                    any_field = true;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn events_fields_comments_and_multiline_data() {
        let src = ": keep-alive\nevent: message_start\ndata: {\"a\":1}\n\ndata: one\r\ndata: two\r\n\r\ndata: [DONE]\n";
        let mut r = SseReader::new(src.as_bytes(), 1 << 20);
        assert_eq!(
            r.next_event().unwrap(),
            Some(SseEvent {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into()
            })
        );
        assert_eq!(r.next_event().unwrap().unwrap().data, "one\ntwo");
        assert_eq!(r.next_event().unwrap().unwrap().data, "[DONE]");
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn a_flood_is_refused_at_the_limit() {
        let src = format!("data: {}\n\n", "x".repeat(10_000));
        let mut r = SseReader::new(src.as_bytes(), 1_000);
        assert_eq!(r.next_event(), Err(SseError::TooLarge(1_000)));
    }
}
