//! SHA-256 digests and canonical (RFC 8785) hashing.

use sha2::{Digest, Sha256};

/// Lower-case hex of a SHA-256 digest of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// HMAC-SHA256 of `message` under `key` (RFC 2104), as webhooks sign.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // RFC 2104: a key longer than the block is hashed first; the key, padded
    // to the 64-byte block, is XORed with the inner and outer pads.
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// Whether `a` and `b` are equal, taking as long whatever differs (for
/// comparing signatures).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Lower-case hex of `bytes`.
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
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
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

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod hmac_tests {
    use super::{constant_time_eq, hex, hmac_sha256};

    #[test]
    fn hmac_sha256_gives_rfc_4231s_answers() {
        // Test cases 1, 2 and 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"abc", b"ab"));
    }
}
