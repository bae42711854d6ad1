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

/// SHA-256 over the canonical JSON of `value`, hashed as it is written
/// (no copy of the canonical text is kept).
pub fn canonical_sha256<T: serde::Serialize>(value: &T) -> Result<String, CanonicalError> {
    let mut w = std::io::BufWriter::with_capacity(4096, HashWriter(Sha256::new()));
    serde_json_canonicalizer::to_writer(value, &mut w).map_err(CanonicalError)?;
    let HashWriter(h) = w
        .into_inner()
        .map_err(|e| CanonicalError(serde_json::Error::io(e.into_error())))?;
    Ok(hex(&h.finalize()))
}

/// Write `value` as RFC 8785 canonical JSON: what [`canonical_json`]
/// writes for it, byte for byte, without building a sorted copy of each
/// object (object members in the order of their names' UTF-16 code
/// units; every number as ECMAScript prints the double it is; strings
/// escaped as JSON's minimum). For hashing many values fast (a ledger's
/// entries); checked against [`canonical_json`] by property tests.
pub fn write_canonical_value<W: std::io::Write>(
    w: &mut W,
    value: &serde_json::Value,
) -> Result<(), CanonicalError> {
    use serde_json::Value;
    let io = |e: std::io::Error| CanonicalError(serde_json::Error::io(e));
    match value {
        Value::Null => w.write_all(b"null").map_err(io),
        Value::Bool(b) => w.write_all(if *b { b"true" } else { b"false" }).map_err(io),
        Value::Number(n) => write_canonical_number(w, n.as_f64()),
        Value::String(s) => serde_json::to_writer(w, s).map_err(CanonicalError),
        Value::Array(items) => {
            w.write_all(b"[").map_err(io)?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",").map_err(io)?;
                }
                write_canonical_value(w, item)?;
            }
            w.write_all(b"]").map_err(io)
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            w.write_all(b"{").map_err(io)?;
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    w.write_all(b",").map_err(io)?;
                }
                serde_json::to_writer(&mut *w, k).map_err(CanonicalError)?;
                w.write_all(b":").map_err(io)?;
                write_canonical_value(w, v)?;
            }
            w.write_all(b"}").map_err(io)
        }
    }
}

/// A number as RFC 8785 writes it: the double it is, printed as
/// ECMAScript does; none for a value that is no finite double.
pub fn write_canonical_number<W: std::io::Write>(
    w: &mut W,
    n: Option<f64>,
) -> Result<(), CanonicalError> {
    match n.filter(|f| f.is_finite()) {
        Some(f) => w
            .write_all(ryu_js::Buffer::new().format_finite(f).as_bytes())
            .map_err(|e| CanonicalError(serde_json::Error::io(e))),
        None => Err(CanonicalError(serde_json::Error::io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "NaN and +/-Infinity are not permitted in JSON",
        )))),
    }
}

/// Where the JSON value at the start of `bytes` ends, if it is written
/// exactly as [`write_canonical_value`] writes what it holds: no
/// whitespace, object members in the UTF-16 order of their names with no
/// name twice, strings escaped as RFC 8785 says (only `"`, `\\` and
/// control characters, these as `\b`, `\t`, `\n`, `\f`, `\r` or lower-case
/// `\u00XX`), and every number an integer of at most 2^53 in magnitude.
/// So its bytes are its canonical form, and can be hashed as they are.
/// `None` is no judgement on the value (a fraction, an exponent, a name
/// with an escape, nesting deeper than 64 all give `None`): decode it and
/// canonicalise it instead.
pub fn canonical_prefix(text: &str) -> Option<usize> {
    let mut s = Scan {
        b: text.as_bytes(),
        i: 0,
    };
    s.value(0)?;
    Some(s.i)
}

/// A cursor over JSON text for [`canonical_prefix`].
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let here = self.peek() == Some(c);
        self.i += usize::from(here);
        here
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        if depth > 64 {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(|_| ()),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    fn word(&mut self, w: &[u8]) -> Option<()> {
        self.b[self.i..].starts_with(w).then(|| self.i += w.len())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        if self.eat(b']') {
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            if !self.eat(b',') {
                return self.eat(b']').then_some(());
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        if self.eat(b'}') {
            return Some(());
        }
        let mut last: Option<&[u8]> = None;
        loop {
            let name = self.string()?;
            // A name with an escape is left to the decoder (its order is
            // that of what it decodes to).
            if name.contains(&b'\\') || last.is_some_and(|l| !utf16_before(l, name)) {
                return None;
            }
            last = Some(name);
            if !self.eat(b':') {
                return None;
            }
            self.value(depth + 1)?;
            if !self.eat(b',') {
                return self.eat(b'}').then_some(());
            }
        }
    }

    /// A string's text between its quotes, if escaped canonically.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        loop {
            match self.peek()? {
                b'"' => {
                    let text = &self.b[start..self.i];
                    self.i += 1;
                    return Some(text);
                }
                b'\\' => match *self.b.get(self.i + 1)? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                    b'u' => {
                        let h = self.b.get(self.i + 2..self.i + 6)?;
                        let low = match h[3] {
                            d @ b'0'..=b'9' => d - b'0',
                            d @ b'a'..=b'f' => d - b'a' + 10,
                            _ => return None,
                        };
                        let code = match (h[0], h[1], h[2]) {
                            (b'0', b'0', b'0') => low,
                            (b'0', b'0', b'1') => 16 + low,
                            _ => return None,
                        };
                        // Those with a short form are written with it.
                        if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                            return None;
                        }
                        self.i += 6;
                    }
                    _ => return None,
                },
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }

    /// An integer as ECMAScript prints it: no leading zero, no `-0`, at
    /// most 2^53 in magnitude (where every integer is a double exactly).
    fn integer(&mut self) -> Option<()> {
        let negative = self.eat(b'-');
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        let digits = &self.b[start..self.i];
        if digits.is_empty()
            || digits.len() > 16
            || (digits[0] == b'0' && (digits.len() > 1 || negative))
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            return None;
        }
        let n = digits
            .iter()
            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        (n <= 1 << 53).then_some(())
    }
}

/// Whether the name `a` sorts before `b` by UTF-16 code units (both
/// valid UTF-8 without escapes).
fn utf16_before(a: &[u8], b: &[u8]) -> bool {
    if a.is_ascii() && b.is_ascii() {
        return a < b;
    }
    match (std::str::from_utf8(a), std::str::from_utf8(b)) {
        (Ok(a), Ok(b)) => a.encode_utf16().lt(b.encode_utf16()),
        _ => false,
    }
}

/// A SHA-256 of what is written through it (buffered), in hex at the end.
pub struct CanonicalHasher(std::io::BufWriter<HashWriter>);

impl Default for CanonicalHasher {
    fn default() -> Self {
        CanonicalHasher(std::io::BufWriter::with_capacity(
            4096,
            HashWriter(Sha256::new()),
        ))
    }
}

impl CanonicalHasher {
    /// Where to write.
    pub fn writer(&mut self) -> &mut impl std::io::Write {
        &mut self.0
    }

    /// The digest of all that was written, in lower-case hex.
    pub fn finish_hex(self) -> Result<String, CanonicalError> {
        let HashWriter(h) = self
            .0
            .into_inner()
            .map_err(|e| CanonicalError(serde_json::Error::io(e.into_error())))?;
        Ok(hex(&h.finalize()))
    }
}

/// Bytes written are hashed.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
    use proptest::prelude::*;

    /// Names and texts that sort differently by bytes and by UTF-16 (a
    /// character above U+FFFF against one in U+E000–U+FFFF), escapes,
    /// controls and plain ASCII.
    fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just('a'),
                Just('b'),
                Just('"'),
                Just('\\'),
                Just('/'),
                Just('\n'),
                Just('\u{1}'),
                Just('\u{7f}'),
                Just('é'),
                Just('\u{e9c0}'),
                Just('\u{ffff}'),
                Just('\u{1f600}'),
                Just('\u{10000}'),
            ],
            0..5,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    fn value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e21f64..1e21).prop_map(Value::from),
            prop_oneof![Just(1e-7), Just(1e21), Just(-0.0), Just(5e-324), Just(0.1)]
                .prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                proptest::collection::vec((text(), inner), 0..6)
                    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_fast_canonical_writer_writes_what_the_canonicalizer_does(v in value()) {
            let mut fast = Vec::new();
            write_canonical_value(&mut fast, &v).unwrap();
            prop_assert_eq!(String::from_utf8(fast).unwrap(), String::from_utf8(canonical_json(&v).unwrap()).unwrap());
            let mut h = CanonicalHasher::default();
            write_canonical_value(h.writer(), &v).unwrap();
            prop_assert_eq!(h.finish_hex().unwrap(), canonical_sha256(&v).unwrap());
        }
    }

    /// JSON texts of `v` that may or may not be canonical: as serde
    /// writes it (members in insertion order, its own number forms),
    /// pretty, canonical, and canonical with one byte changed.
    fn texts(v: &serde_json::Value, at: usize, byte: u8) -> Vec<Vec<u8>> {
        let canonical = canonical_json(v).unwrap();
        let mut changed = canonical.clone();
        let i = at % changed.len();
        changed[i] = byte;
        vec![
            serde_json::to_vec(v).unwrap(),
            serde_json::to_vec_pretty(v).unwrap(),
            canonical,
            changed,
        ]
    }

    proptest! {
        /// What `canonical_prefix` accepts is canonical: decoded and
        /// canonicalised, it is the same bytes (so hashing them as they
        /// are is hashing the canonical form).
        #[test]
        fn what_canonical_prefix_accepts_is_its_own_canonical_form(
            v in value(), at in any::<usize>(), byte in prop_oneof![Just(b' '), Just(b'0'), Just(b'\\'), Just(b'u'), Just(b'"'), Just(b'e'), Just(b','), any::<u8>()],
        ) {
            for t in texts(&v, at, byte) {
                let Ok(text) = std::str::from_utf8(&t) else { continue };
                if canonical_prefix(text) == Some(t.len()) {
                    let decoded: serde_json::Value = serde_json::from_slice(&t).unwrap();
                    let mut again = Vec::new();
                    write_canonical_value(&mut again, &decoded).unwrap();
                    prop_assert_eq!(String::from_utf8(again).unwrap(), text);
                }
            }
            // And the canonical form of anything is accepted whole or not
            // at all.
            let c = canonical_json(&v).unwrap();
            if let Some(n) = canonical_prefix(std::str::from_utf8(&c).unwrap()) {
                prop_assert_eq!(n, c.len());
            }
        }
    }

    #[test]
    fn canonical_prefix_takes_what_ledger_payloads_hold_and_leaves_the_rest() {
        let ok = [
            "{\"a\":[true,false,null],\"b\":-12,\"c\":\"x\\\"\\\\\\n\\u001f\u{7f}\",\"n\":9007199254740992}",
            "{\"a\":1,\"\u{e9}\":2,\"\u{1f600}\":3,\"\u{ff61}\":4}",
            "[]",
            "{}",
            "0",
        ];
        for t in ok {
            assert_eq!(canonical_prefix(t), Some(t.len()), "{t}");
        }
        for t in [
            r#"{"b":1,"a":2}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"a": 1}"#,
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":01}"#,
            r#"{"a":9007199254740993}"#,
            r#"{"a":"\u0041"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u001F"}"#,
            "{\"a\":\"\n\"}",
            r#"{"\u00e9":1}"#,
            r#"{"a":tru}"#,
            r#"{"a":1"#,
        ] {
            assert_eq!(canonical_prefix(t), None, "{t}");
        }
        // U+FF61 sorts before U+1F600 by bytes, after it by UTF-16.
        assert_eq!(canonical_prefix("{\"\u{ff61}\":1,\"\u{1f600}\":2}"), None);
    }

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
