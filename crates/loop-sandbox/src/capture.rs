//! Bounded capture of an output stream: the first and last bytes are kept
//! in fixed buffers, every byte is counted and hashed, memory stays flat
//! whatever the command writes.

use crate::redact::redact;
use loop_protocol::StreamEvidence;
use loop_protocol::hash::Sha256Stream;
use std::io::Read;

/// A captured stream.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    head: Vec<u8>,
    /// Ring buffer of the last bytes; `tail_start` is the oldest byte once full.
    tail: Vec<u8>,
    tail_start: usize,
    tail_max: usize,
    total: u64,
    sha256: String,
}

impl Captured {
    /// Total bytes written by the command.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// SHA-256 of every byte.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Whether bytes between head and tail were dropped.
    pub fn truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// Bytes left out of the excerpt.
    pub fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    fn tail_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.tail.len());
        v.extend_from_slice(&self.tail[self.tail_start..]);
        v.extend_from_slice(&self.tail[..self.tail_start]);
        v
    }

    /// Head and tail as text, secrets redacted, with an explicit
    /// `[… N bytes omitted …]` marker where bytes were left out.
    pub fn excerpt(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail_bytes = self.tail_bytes();
        let tail = String::from_utf8_lossy(&tail_bytes);
        let text = if self.truncated() {
            format!("{head}\n[… {} bytes omitted …]\n{tail}", self.omitted())
        } else {
            format!("{head}{tail}")
        };
        redact(&text)
    }

    /// Whether [`Captured::excerpt`] is exactly the bytes the command
    /// wrote: nothing left out, nothing replaced (bytes that are not
    /// UTF-8) and nothing redacted.
    pub fn excerpt_is_exact(&self) -> bool {
        if self.truncated() {
            return false;
        }
        let mut all = self.head.clone();
        all.extend_from_slice(&self.tail_bytes());
        self.excerpt().as_bytes() == all.as_slice()
    }

    /// As evidence for a receipt.
    pub fn evidence(&self) -> StreamEvidence {
        StreamEvidence {
            bytes: self.total,
            sha256: self.sha256.clone(),
            excerpt: self.excerpt(),
            truncated: self.truncated(),
        }
    }

    /// Read `reader` to its end, keeping at most `max` bytes (half head, half tail).
    pub fn read_all(mut reader: impl Read, max: usize) -> Captured {
        let mut c = Capturing::new(max);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => c.feed(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        c.finish()
    }

    fn push_tail(&mut self, mut bytes: &[u8]) {
        if self.tail_max == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_max {
            bytes = &bytes[bytes.len() - self.tail_max..];
            self.tail.clear();
            self.tail.extend_from_slice(bytes);
            self.tail_start = 0;
            return;
        }
        // Fill up, then overwrite the oldest bytes in place.
        let fill = (self.tail_max - self.tail.len()).min(bytes.len());
        self.tail.extend_from_slice(&bytes[..fill]);
        let mut rest = &bytes[fill..];
        while !rest.is_empty() {
            let end = (self.tail_start + rest.len()).min(self.tail_max);
            let n = end - self.tail_start;
            self.tail[self.tail_start..end].copy_from_slice(&rest[..n]);
            self.tail_start = end % self.tail_max;
            rest = &rest[n..];
        }
    }
}

/// A stream being captured, fed its bytes as they come.
pub(crate) struct Capturing {
    c: Captured,
    hasher: Sha256Stream,
    head_max: usize,
}

impl Capturing {
    /// Keep at most `max` bytes (half head, half tail).
    pub(crate) fn new(max: usize) -> Capturing {
        let head_max = max / 2;
        Capturing {
            c: Captured {
                head: Vec::with_capacity(head_max.min(64 * 1024)),
                tail: Vec::new(),
                tail_start: 0,
                tail_max: max - head_max,
                total: 0,
                sha256: String::new(),
            },
            hasher: Sha256Stream::default(),
            head_max,
        }
    }

    /// The next bytes of the stream.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
        self.c.total += chunk.len() as u64;
        let room = self.head_max - self.c.head.len();
        let (to_head, rest) = chunk.split_at(room.min(chunk.len()));
        self.c.head.extend_from_slice(to_head);
        self.c.push_tail(rest);
    }

    /// What was captured.
    pub(crate) fn finish(mut self) -> Captured {
        self.c.sha256 = self.hasher.finish_hex();
        self.c
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_and_hashes_everything() {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let c = Captured::read_all(&data[..], 1000);
        assert_eq!(c.total(), data.len() as u64);
        assert_eq!(c.sha256(), loop_protocol::hash::sha256_hex(&data));
        assert!(c.truncated());
        let ex = c.excerpt();
        assert!(ex.starts_with("0\n1\n2\n"));
        assert!(ex.ends_with("99999\n"), "{}", &ex[ex.len() - 40..]);
        assert!(ex.contains(&format!("[… {} bytes omitted …]", data.len() - 1000)));
        assert!(ex.len() < 1100);
    }

    #[test]
    fn the_tail_ring_is_exact_across_uneven_chunks() {
        struct Chunky<'a>(&'a [u8], usize);
        impl Read for Chunky<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.1.min(self.0.len()).min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                self.1 = self.1 % 7 + 3;
                Ok(n)
            }
        }
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let c = Captured::read_all(Chunky(&data, 5), 100);
        assert_eq!(c.tail_bytes(), data[data.len() - 50..].to_vec());
        assert_eq!(c.head, data[..50].to_vec());
    }

    #[test]
    fn short_output_is_kept_whole() {
        let c = Captured::read_all(&b"hello\n"[..], 1000);
        assert_eq!(c.excerpt(), "hello\n");
        assert!(!c.truncated());
        assert!(c.excerpt_is_exact());
    }

    /// The excerpt is said to be exact only when it is the bytes written:
    /// not when some were left out, replaced (not UTF-8) or redacted.
    #[test]
    fn an_excerpt_is_exact_only_when_it_is_the_bytes_written() {
        let text = "naïve — ok\n".repeat(10);
        assert!(Captured::read_all(text.as_bytes(), 1000).excerpt_is_exact());
        assert!(!Captured::read_all(text.as_bytes(), 20).excerpt_is_exact());
        let binary = b"\x00\x01\xff\xfe\x80abc\n";
        assert!(!Captured::read_all(&binary[..], 1000).excerpt_is_exact());
        let secret = b"token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB\n";
        let c = Captured::read_all(&secret[..], 1000);
        assert!(!c.excerpt().contains("ghp_0123"), "{}", c.excerpt());
        assert!(!c.excerpt_is_exact());
    }
}
