//! SHA-256 digests and canonical (RFC 8785) hashing.

use sha2::{Digest, Sha256};

/// Lower-case hex of a SHA-256 digest of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex encoding.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// Canonical JSON bytes (RFC 8785, JCS) of any serialisable value.
pub fn canonical_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    serde_json_canonicalizer::to_vec(value).map_err(CanonicalError)
}

/// SHA-256 over the canonical JSON of `value`.
pub fn canonical_sha256<T: serde::Serialize>(value: &T) -> Result<String, CanonicalError> {
    Ok(sha256_hex(&canonical_json(value)?))
}

/// A value could not be canonicalised (for example a non-finite number);
/// the serializer's error is kept as the cause.
#[derive(Debug, thiserror::Error)]
#[error("cannot canonicalise value as JSON: {0}")]
pub struct CanonicalError(#[source] pub serde_json::Error);

/// A streaming SHA-256 hasher that reports hex.
#[derive(Default, Clone)]
pub struct Sha256Stream(Sha256);

impl Sha256Stream {
    /// Feed bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// Finish and return lower-case hex.
    pub fn finish_hex(self) -> String {
        hex(&self.0.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_and_abc() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn canonical_json_sorts_keys_and_normalises_numbers() {
        let v = serde_json::json!({"b": 1.0, "a": [true, null, "\u{20ac}"], "c": 1e30});
        let bytes = canonical_json(&v).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "{\"a\":[true,null,\"\u{20ac}\"],\"b\":1,\"c\":1e+30}"
        );
    }
}
