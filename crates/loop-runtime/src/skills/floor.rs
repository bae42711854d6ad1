//! Rollback protection for signed skills: this machine remembers, for each
//! project and skill name, the newest signing time it has installed or
//! used (`$LOOP_STATE_DIR/skills-seen.json`), whoever of the project's
//! trusted keys signed it. A bundle signed earlier than that, put back in
//! the project (a revert, a hostile commit, an old copy installed again,
//! a copy signed by another trusted key), is refused by name until a
//! person accepts it with `loop skills install --allow-older`. The record
//! only ever rises on its own, lives in the user's state (out of any
//! project's reach), is changed under a lock, and one that cannot be read
//! refuses every signed skill (rather than forgetting every floor).

use crate::Error;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The record's file in the user's state directory.
const FILE: &str = "skills-seen.json";
/// The lock its writers take.
const LOCK: &str = "skills-seen.lock";

fn path() -> PathBuf {
    loop_receipt::state_dir().join(FILE)
}

/// A floor's key: the project (as the runtime names it) and the name.
fn key(project: &Path, name: &str) -> String {
    format!("{} {name}", project.display())
}

/// The record as kept (none yet: empty); why not, when it cannot be read.
#[allow(clippy::disallowed_methods)] // the user's own state directory, not a project's
fn read() -> Result<BTreeMap<String, u64>, Error> {
    let path = path();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            Error::usage(format!(
                "this machine's record of the skills it took ({}) cannot be read ({e}): every signed skill is refused until it is fixed or removed",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(Error::usage(format!("{}: {e}", path.display()))),
    }
}

/// Why skill `name` of `project`, signed at `signed_at_ms`, is older than
/// one this machine already took there, if it is.
pub(crate) fn older(project: &Path, name: &str, signed_at_ms: u64) -> Option<String> {
    let newest = match read() {
        Ok(seen) => seen.get(&key(project, name)).copied()?,
        Err(why) => return Some(why.message),
    };
    (signed_at_ms < newest).then(|| {
        format!(
            "it was signed at {}, before the copy of `{name}` this machine already took for this project ({}): an older bundle put back; to accept it, remove it and install it again with `loop skills install PATH --allow-older`",
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

/// Remember that skill `name` signed at `signed_at_ms` was taken for
/// `project`: its floor rises to it (`accept_older`: or is set to it, a
/// person having accepted an older one).
#[allow(clippy::disallowed_methods)] // the user's own state directory, not a project's
pub(crate) fn took(
    project: &Path,
    name: &str,
    signed_at_ms: u64,
    accept_older: bool,
) -> Result<(), Error> {
    let path = path();
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(Error::from_cause)?;
    // One writer at a time, across processes and threads.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))
        .map_err(Error::from_cause)?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function owns; released when it
    // is closed at the end of the function.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(Error::from_cause(std::io::Error::last_os_error()));
    }
    let mut seen = read()?;
    let k = key(project, name);
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
    // Written whole to a name of its own, then put in place: a reader
    // never sees half a record.
    let tmp = dir.join(loop_sandbox::unique_name(".skills-seen").map_err(Error::from_cause)?);
    let text = serde_json::to_vec_pretty(&seen).map_err(Error::from_cause)?;
    let written = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &text))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::from_cause(e));
    }
    drop(lock);
    Ok(())
}
