//! Timestamps as RFC 3339 UTC strings, without a date library.

/// Format milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_millis(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let ms = unix_ms % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.mmm]Z` (as [`rfc3339_millis`] writes it)
/// back to milliseconds since the Unix epoch.
pub fn parse_rfc3339_millis(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, ms) = match time.split_once('.') {
        Some((hms, frac)) => (hms, frac.get(..3)?.parse::<u64>().ok()?),
        None => (time, 0),
    };
    let mut t = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (h, mi, sec) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(y, m as u32, day as u32)).ok()?;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1000) + ms)
}

/// (year, month, day) to days since 1970-01-01, proleptic Gregorian (the
/// inverse of `civil_from_days`, Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's well-known algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests make and read their own fixtures
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_formats() {
        for ms in [0, 951_782_400_123, 1_795_959_352_999, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339_millis(&rfc3339_millis(ms)), Some(ms));
        }
        assert_eq!(parse_rfc3339_millis("2026-13-01T00:00:00.000Z"), None);
        assert_eq!(parse_rfc3339_millis("yesterday"), None);
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(
            rfc3339_millis(1_795_950_000_000),
            "2026-11-29T11:00:00.000Z"
        );
    }
}
