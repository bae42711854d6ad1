//! Task ids: their shape, and how a new one is made. Below every other
//! module of the runtime (the error type aside).

use crate::Error;

/// Whether `id` has the shape [`new_task_id`] gives (`t-` and digits,
/// dashes and lower-case hex): safe as a directory name.
pub fn is_task_id(id: &str) -> bool {
    id.len() <= 64
        && id.strip_prefix("t-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b'-' || (b'a'..=b'f').contains(&b))
        })
}

/// A task id: `t-YYYYMMDD-HHMMSS-` and 6 random hex digits.
pub fn new_task_id(now_ms: u64) -> Result<String, Error> {
    let stamp = loop_protocol::time::rfc3339_millis(now_ms);
    let digits: String = stamp
        .chars()
        .filter(|c| c.is_ascii_digit())
        .take(14)
        .collect();
    let rnd = loop_protocol::random::hex::<3>().map_err(Error::from_cause)?;
    Ok(format!(
        "t-{}-{}-{rnd}",
        &digits[..8.min(digits.len())],
        &digits[8.min(digits.len())..],
    ))
}
