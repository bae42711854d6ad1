//! Ed25519 signing keys. One key pair per user, generated on first use in
//! the runtime's state directory (mode 0600 in a 0700 directory), or given
//! by `LOOP_SIGNING_KEY` (hex seed) / `LOOP_SIGNING_KEY_FILE`. The key id is
//! the SHA-256 of the raw public key, in hex.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use loop_protocol::hash::{hex, sha256_hex};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410), before the 32 key bytes.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// A key failure.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Filesystem.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a key.
    #[error("{0}")]
    Format(String),
}

/// A signing key and its id.
pub struct KeyPair {
    signing: SigningKey,
    keyid: String,
}

/// A public key and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: VerifyingKey,
    /// SHA-256 of the raw key, hex.
    pub keyid: String,
}

fn keyid_of(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())
}

fn parse_hex32(text: &str) -> Option<[u8; 32]> {
    let t = text.trim();
    if t.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in t.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// Refuse `path` when its permission bits give others any of `forbidden`
/// (or it is not its owner's: the process's user, or root).
#[allow(clippy::disallowed_methods)] // the tool's own key directory (its permissions checked here)
fn loose(path: &Path, forbidden: u32) -> Result<(), KeyError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|source| KeyError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let mode = meta.mode() & 0o7777;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(KeyError::Format(format!(
            "{} belongs to user {}, not to this user ({me}): the signing key is not used",
            path.display(),
            meta.uid()
        )));
    }
    if mode & forbidden != 0 {
        return Err(KeyError::Format(format!(
            "{} has mode {mode:04o}, open to others: the signing key is not used (chmod {} {} to keep it to its owner)",
            path.display(),
            if meta.is_dir() { "700" } else { "600" },
            path.display()
        )));
    }
    Ok(())
}

/// Where the runtime keeps its own signing key (when no
/// `LOOP_SIGNING_KEY(_FILE)` names one): `keys/signing.key` in the state
/// directory. Every reader and writer of the key, and every report of
/// where it is (`loop doctor`, `loop audit`), takes it from here.
pub fn signing_key_path() -> PathBuf {
    state_dir().join(KEY_DIR).join(KEY_FILE)
}

/// The directory of [`signing_key_path`] in the state directory.
const KEY_DIR: &str = "keys";
/// The key's file name in it.
const KEY_FILE: &str = "signing.key";

/// The runtime's state directory: `LOOP_STATE_DIR`, else
/// `$XDG_STATE_HOME/loop-engine`, else `~/.local/state/loop-engine`.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LOOP_STATE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("loop-engine");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/state/loop-engine")
}

impl KeyPair {
    /// From a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(&seed);
        let keyid = keyid_of(&signing.verifying_key());
        KeyPair { signing, keyid }
    }

    /// The configured key: `LOOP_SIGNING_KEY`, `LOOP_SIGNING_KEY_FILE`, or
    /// the state directory's key (created on first use).
    pub fn load_or_create() -> Result<KeyPair, KeyError> {
        if let Ok(hex_seed) = std::env::var("LOOP_SIGNING_KEY") {
            let seed = parse_hex32(&hex_seed).ok_or_else(|| {
                KeyError::Format("LOOP_SIGNING_KEY must be 64 hex digits (an Ed25519 seed)".into())
            })?;
            return Ok(KeyPair::from_seed(seed));
        }
        if let Ok(file) = std::env::var("LOOP_SIGNING_KEY_FILE") {
            // A key file kept elsewhere (a mounted secret) may be readable
            // by a group, never writable by anyone but its owner.
            loose(Path::new(&file), 0o022)?;
            return KeyPair::read(Path::new(&file));
        }
        KeyPair::load_or_create_in(&state_dir().join(KEY_DIR))
    }

    /// The key `dir/signing.key`, made if there is none yet. Any number of
    /// first uses at once — threads of one server, several processes —
    /// agree on one key, and no reader sees half of one.
    #[allow(clippy::disallowed_methods)] // the tool's own key directory
    fn load_or_create_in(dir: &Path) -> Result<KeyPair, KeyError> {
        let path = dir.join(KEY_FILE);
        if path.exists() {
            // The tool's own key: its directory and the file are the
            // user's alone, or the key is not used (someone else may have
            // read it, or may swap it).
            loose(dir, 0o022)?;
            loose(&path, 0o077)?;
            return KeyPair::read(&path);
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| KeyError::Io {
                path: dir.display().to_string(),
                source,
            })?;
        let mut seed = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut seed))
            .map_err(|source| KeyError::Io {
                path: "/dev/urandom".into(),
                source,
            })?;
        // Written whole under a name of this call's own (the process id
        // alone is shared by a server's threads), then linked into place:
        // the first link wins and the others read what it linked.
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".signing.key.{}.{call}", std::process::id()));
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |source| KeyError::Io { path: p, source }
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(&tmp))?;
        f.write_all(format!("{}\n", hex(&seed)).as_bytes())
            .map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return KeyPair::read(&path),
            Err(e) => return Err(io(&path)(e)),
        }
        Ok(KeyPair::from_seed(seed))
    }

    /// Retire the state directory's key: keep its public half in
    /// `keys/revoked/<keyid>` and make a new key. Returns (old, new).
    #[allow(clippy::disallowed_methods)] // the tool's own key directory
    pub fn rotate() -> Result<(PublicKey, KeyPair), KeyError> {
        if std::env::var_os("LOOP_SIGNING_KEY").is_some()
            || std::env::var_os("LOOP_SIGNING_KEY_FILE").is_some()
        {
            return Err(KeyError::Format(
                "the signing key comes from LOOP_SIGNING_KEY(_FILE); rotate it where it is kept"
                    .into(),
            ));
        }
        let keys = state_dir().join(KEY_DIR);
        if !keys.join(KEY_FILE).exists() {
            return Err(KeyError::Format(format!(
                "there is no signing key in {} to rotate: nothing was changed (the first run makes one)",
                keys.display()
            )));
        }
        let old = KeyPair::load_or_create()?.public();
        let revoked = keys.join("revoked");
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |source| KeyError::Io { path: p, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&revoked)
            .map_err(io(&revoked))?;
        std::fs::write(revoked.join(&old.keyid), format!("{}\n", old.hex()))
            .map_err(io(&revoked))?;
        std::fs::remove_file(keys.join(KEY_FILE)).map_err(io(&keys))?;
        let new = KeyPair::load_or_create()?;
        Ok((old, new))
    }

    /// Key ids revoked on this machine.
    #[allow(clippy::disallowed_methods)] // the tool's own key directory
    pub fn revoked() -> Vec<String> {
        std::fs::read_dir(state_dir().join("keys/revoked"))
            .map(|items| {
                items
                    .flatten()
                    .map(|i| i.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The configured key if one exists (nothing is created).
    #[allow(clippy::disallowed_methods)] // a key file: the tool's own, or one the person named
    pub fn existing() -> Result<Option<KeyPair>, KeyError> {
        if std::env::var_os("LOOP_SIGNING_KEY").is_some()
            || std::env::var_os("LOOP_SIGNING_KEY_FILE").is_some()
            || signing_key_path().exists()
        {
            return KeyPair::load_or_create().map(Some);
        }
        Ok(None)
    }

    #[allow(clippy::disallowed_methods)] // a key file: the tool's own, or one the person named
    fn read(path: &Path) -> Result<KeyPair, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let seed = parse_hex32(&text).ok_or_else(|| {
            KeyError::Format(format!(
                "{} is not a 64-hex-digit Ed25519 seed",
                path.display()
            ))
        })?;
        Ok(KeyPair::from_seed(seed))
    }

    /// The key id.
    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            key: self.signing.verifying_key(),
            keyid: self.keyid.clone(),
        }
    }

    /// Sign `message`, returning the base64 signature.
    pub fn sign_b64(&self, message: &[u8]) -> String {
        B64.encode(self.signing.sign(message).to_bytes())
    }
}

impl PublicKey {
    /// Raw key as hex (the form `securesystemslib` takes).
    pub fn hex(&self) -> String {
        hex(self.key.as_bytes())
    }

    /// PEM (SubjectPublicKeyInfo).
    pub fn pem(&self) -> String {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.key.as_bytes());
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            B64.encode(der)
        )
    }

    /// Read a public key from PEM or 64 hex digits.
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        let raw = if let Some(seed) = parse_hex32(text) {
            seed
        } else {
            let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
            let der = B64
                .decode(body.trim())
                .map_err(|e| KeyError::Format(format!("not a PEM public key: {e}")))?;
            if der.len() != 44 || der[..12] != SPKI_PREFIX {
                return Err(KeyError::Format(
                    "not an Ed25519 public key (SubjectPublicKeyInfo)".into(),
                ));
            }
            let mut raw = [0u8; 32];
            raw.copy_from_slice(&der[12..]);
            raw
        };
        let key = VerifyingKey::from_bytes(&raw)
            .map_err(|e| KeyError::Format(format!("invalid Ed25519 key: {e}")))?;
        Ok(PublicKey {
            keyid: keyid_of(&key),
            key,
        })
    }

    /// Whether `sig_b64` is this key's signature of `message`.
    pub fn verifies(&self, message: &[u8], sig_b64: &str) -> bool {
        let Ok(bytes) = B64.decode(sig_b64) else {
            return false;
        };
        let Ok(sig) = Signature::from_slice(&bytes) else {
            return false;
        };
        self.key.verify(message, &sig).is_ok()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn first_uses_on_many_threads_at_once_agree_on_one_key() {
        let dir = std::env::temp_dir().join(format!("loop-keys-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
        let ids: Vec<String> = (0..16)
            .map(|_| {
                let (dir, barrier) = (dir.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    KeyPair::load_or_create_in(&dir.join("keys")).map(|k| k.keyid)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        assert!(ids.iter().all(|k| k == &ids[0]), "{ids:?}");
        let on_disk = KeyPair::read(&dir.join("keys/signing.key")).unwrap();
        assert_eq!(on_disk.keyid, ids[0]);
        // Nothing half-made is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.join("keys"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [std::ffi::OsString::from("signing.key")]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sign_verify_and_round_trip_the_public_key() {
        let k = KeyPair::from_seed([7u8; 32]);
        let sig = k.sign_b64(b"message");
        let p = k.public();
        assert!(p.verifies(b"message", &sig));
        assert!(!p.verifies(b"messagE", &sig));
        assert_eq!(PublicKey::parse(&p.pem()).unwrap(), p);
        assert_eq!(PublicKey::parse(&p.hex()).unwrap(), p);
        assert_eq!(p.keyid, sha256_hex(&parse_hex32(&p.hex()).unwrap()));
        assert!(PublicKey::parse("nonsense").is_err());
    }
}
