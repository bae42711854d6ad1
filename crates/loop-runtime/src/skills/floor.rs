//! Rollback protection for signed skills: this machine remembers, for each
//! skill name and signer, the newest signing time it has installed or
//! used (`$LOOP_STATE_DIR/skills-seen.json`). A bundle signed earlier than
//! that, put back in a project (a revert, a hostile commit, an old copy
//! installed again), is refused by name until a person accepts it with
//! `loop skills install --allow-older`. The record only ever rises on its
//! own; it lives in the user's state, out of any project's reach.

use crate::Error;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The record's file in the user's state directory.
const FILE: &str = "skills-seen.json";

fn path() -> PathBuf {
    loop_receipt::state_dir().join(FILE)
}

fn key(name: &str, signer: &str) -> String {
    format!("{signer} {name}")
}

/// The record as kept (an unreadable one is empty: it is only a floor,
/// and a damaged file must not stop every skill).
#[allow(clippy::disallowed_methods)] // the user's own state directory, not a project's
fn read() -> BTreeMap<String, u64> {
    std::fs::read(path())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Write the record whole (a new file put in place: a reader never sees
/// half of one).
#[allow(clippy::disallowed_methods)] // the user's own state directory, not a project's
fn write(seen: &BTreeMap<String, u64>) -> Result<(), Error> {
    let path = path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::from_cause)?;
    }
    let tmp = path.with_extension(format!("json.{}", std::process::id()));
    let text = serde_json::to_vec_pretty(seen).map_err(Error::from_cause)?;
    std::fs::write(&tmp, text).map_err(Error::from_cause)?;
    std::fs::rename(&tmp, &path).map_err(Error::from_cause)
}

/// Why skill `name` signed by `signer` at `signed_at_ms` is older than
/// one this machine has seen, if it is.
pub(crate) fn older(name: &str, signer: &str, signed_at_ms: u64) -> Option<String> {
    let newest = read().get(&key(name, signer)).copied()?;
    (signed_at_ms < newest).then(|| {
        format!(
            "it was signed at {}, before the copy of `{name}` signed by {signer} this machine already took ({}): an older bundle put back; `loop skills install --allow-older` accepts it",
            stamp(signed_at_ms),
            stamp(newest)
        )
    })
}

fn stamp(ms: u64) -> String {
    if ms == 0 {
        "an unknown time (signed before signing times were kept)".into()
    } else {
        loop_protocol::time::rfc3339_millis(ms)
    }
}

/// Remember that skill `name` signed by `signer` at `signed_at_ms` was
/// taken: the floor rises to it (`accept_older`: or is set to it, a
/// person having accepted an older one).
pub(crate) fn took(
    name: &str,
    signer: &str,
    signed_at_ms: u64,
    accept_older: bool,
) -> Result<(), Error> {
    let mut seen = read();
    let k = key(name, signer);
    let now = seen.get(&k).copied().unwrap_or(0);
    let next = if accept_older {
        signed_at_ms
    } else {
        now.max(signed_at_ms)
    };
    if seen.get(&k) == Some(&next) {
        return Ok(());
    }
    seen.insert(k, next);
    write(&seen)
}
