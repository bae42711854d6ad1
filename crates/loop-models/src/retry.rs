//! Retries: which failures are worth another attempt, and how long to wait.
//! Exponential backoff with full jitter, capped, and `Retry-After` honoured
//! (as seconds or as an HTTP date) when the provider names a time.

use std::time::Duration;

/// How many attempts and how long to wait between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// The first backoff.
    pub base: Duration,
    /// No single wait is longer than this (Retry-After included).
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(60),
        }
    }
}

/// True for statuses worth retrying: 408, 409 (Anthropic's lock conflicts),
/// 429, and every 5xx (529 is Anthropic's "overloaded").
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// Parse a `Retry-After` value: delta-seconds or an IMF-fixdate, relative to
/// `now_unix` seconds.
pub fn parse_retry_after(value: &str, now_unix: u64) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Some(Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(v)?;
    Some(Duration::from_secs(at.saturating_sub(now_unix)))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` → Unix seconds.
fn parse_http_date(v: &str) -> Option<u64> {
    let parts: Vec<&str> = v.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u64 = day.parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as u64
        + 1;
    let year: u64 = year.parse().ok()?;
    let hms: Vec<u64> = time.split(':').filter_map(|p| p.parse().ok()).collect();
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    let days = u64::try_from(loop_protocol::time::days_from_civil(
        year as i64,
        month as u32,
        day as u32,
    ))
    .ok()?;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// A small deterministic generator for jitter (seeded per client).
#[derive(Debug, Clone)]
pub struct Jitter(u64);

impl Jitter {
    /// Seeded; 0 is replaced by a fixed odd constant.
    pub fn new(seed: u64) -> Self {
        Jitter(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// A fraction in [0, 1).
    pub fn next_fraction(&mut self) -> f64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` (attempts count from 1), given
    /// the provider's `Retry-After` if it sent one. Full jitter over the
    /// exponential step; a named time is waited for in full (capped).
    pub fn delay(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        jitter: &mut Jitter,
    ) -> Duration {
        if let Some(ra) = retry_after {
            return ra.min(self.cap);
        }
        let exp = self
            .base
            .saturating_mul(
                1u32.checked_shl(attempt.saturating_sub(1))
                    .unwrap_or(u32::MAX),
            )
            .min(self.cap);
        // Never zero: at least half the step, plus a random share of the rest.
        exp.mul_f64(0.5 + 0.5 * jitter.next_fraction())
    }
}

/// Sleeps between attempts (a fake one in tests records instead).
pub trait Sleeper: Send {
    /// Wait `d`.
    fn sleep(&mut self, d: Duration);
}

/// The real sleeper.
#[derive(Debug, Default)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("7", 0), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 1.5 ", 0),
            Some(Duration::from_millis(1500))
        );
        // RFC 9110's example date is 784111777 in Unix time.
        let at = 784_111_777;
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(at));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", at - 30),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_retry_after("soon", 0), None);
        assert_eq!(parse_retry_after("-3", 0), None);
    }

    #[test]
    fn backoff_grows_is_jittered_capped_and_yields_to_retry_after() {
        let p = RetryPolicy {
            max_attempts: 10,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(2),
        };
        let mut j = Jitter::new(42);
        for attempt in 1..=8u32 {
            let step = Duration::from_millis(100 * (1 << (attempt - 1))).min(p.cap);
            let d = p.delay(attempt, None, &mut j);
            assert!(
                d >= step / 2 && d <= step,
                "attempt {attempt}: {d:?} vs {step:?}"
            );
        }
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(1)), &mut j),
            Duration::from_secs(1)
        );
        assert_eq!(p.delay(1, Some(Duration::from_secs(600)), &mut j), p.cap);
        // Jitter spreads: not every delay for the same attempt is equal.
        let ds: Vec<Duration> = (0..10).map(|_| p.delay(3, None, &mut j)).collect();
        assert!(ds.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn the_retryable_statuses() {
        for s in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 413, 422] {
            assert!(!retryable_status(s), "{s}");
        }
    }
}
