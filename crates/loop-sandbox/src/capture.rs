//! Bounded capture of an output stream: the first and last bytes are kept,
//! every byte is counted and hashed.

use loop_protocol::StreamEvidence;
use loop_protocol::hash::Sha256Stream;
use std::collections::VecDeque;
use std::io::Read;

/// A captured stream.
#[derive(Debug, Clone, Default)]
pub struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
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

    /// Head and tail as text, with a marker where bytes were left out.
    pub fn excerpt(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        if !self.truncated() && self.tail.is_empty() {
            return head.into_owned();
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        if self.truncated() {
            let omitted = self.total - (self.head.len() + self.tail.len()) as u64;
            format!(
                "{head}\n[… omitted {omitted} of {} bytes …]\n{tail}",
                self.total
            )
        } else {
            format!("{head}{tail}")
        }
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
        let head_max = max / 2;
        let tail_max = max - head_max;
        let mut head = Vec::with_capacity(head_max.min(64 * 1024));
        let mut tail = VecDeque::new();
        let mut total = 0u64;
        let mut hasher = Sha256Stream::default();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let chunk = &buf[..n];
            hasher.update(chunk);
            total += n as u64;
            let room = head_max - head.len();
            let (to_head, rest) = chunk.split_at(room.min(chunk.len()));
            head.extend_from_slice(to_head);
            for &b in rest {
                if tail.len() == tail_max {
                    tail.pop_front();
                }
                tail.push_back(b);
            }
        }
        Captured {
            head,
            tail,
            total,
            sha256: hasher.finish_hex(),
        }
    }
}

#[cfg(test)]
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
        assert!(ex.ends_with("99999\n"));
        assert!(ex.contains("omitted"));
        assert!(ex.len() < 1100);
    }

    #[test]
    fn short_output_is_kept_whole() {
        let c = Captured::read_all(&b"hello\n"[..], 1000);
        assert_eq!(c.excerpt(), "hello\n");
        assert!(!c.truncated());
    }
}
