//! Minimal, dependency-free time parsing for the three formats the rules
//! meet: RFC 3339 (`--now`, Azure `se=`), the SigV4 basic format
//! (`X-Amz-Date: 20260101T000000Z`) and a bare date (`se=2026-01-01`).
//! Times are Unix seconds; the clock itself is always an input.

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn num(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` or a bare `YYYY-MM-DD` (midnight UTC).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let s = s.trim();
    let date = s.get(0..10)?;
    let (y, mo, d) = (num(date.get(0..4)?)?, num(date.get(5..7)?)?, num(date.get(8..10)?)?);
    if date.as_bytes().get(4) != Some(&b'-') || date.as_bytes().get(7) != Some(&b'-') {
        return None;
    }
    if s.len() == 10 {
        return civil(y, mo, d, 0, 0, 0);
    }
    let rest = s.get(10..)?;
    let sep = rest.as_bytes().first()?;
    if !matches!(sep, b'T' | b't' | b' ') {
        return None;
    }
    let clock = rest.get(1..9)?;
    let (h, mi, sec) = (num(clock.get(0..2)?)?, num(clock.get(3..5)?)?, num(clock.get(6..8)?)?);
    let mut tz = rest.get(9..)?;
    if let Some(frac) = tz.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        tz = &frac[digits..];
    }
    let offset = match tz {
        "Z" | "z" => 0,
        _ => {
            let sign = match tz.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if tz.len() != 6 || tz.as_bytes().get(3) != Some(&b':') {
                return None;
            }
            sign * (num(tz.get(1..3)?)? * 3600 + num(tz.get(4..6)?)? * 60)
        }
    };
    Some(civil(y, mo, d, h, mi, sec)? - offset)
}

/// Parses the SigV4 basic format `YYYYMMDDTHHMMSSZ`.
pub fn parse_amz_date(s: &str) -> Option<i64> {
    if s.len() != 16 || s.as_bytes().get(8) != Some(&b'T') || !s.ends_with('Z') {
        return None;
    }
    civil(
        num(s.get(0..4)?)?,
        num(s.get(4..6)?)?,
        num(s.get(6..8)?)?,
        num(s.get(9..11)?)?,
        num(s.get(11..13)?)?,
        num(s.get(13..15)?)?,
    )
}

/// Formats Unix seconds as RFC 3339 UTC (for messages).
pub fn format_rfc3339(t: i64) -> String {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    // civil_from_days
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs % 3600 / 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-29T15:00:00Z"), parse_amz_date("20261129T150000Z"));
        assert_eq!(parse_rfc3339("2026-11-29T16:00:00+01:00"), parse_rfc3339("2026-11-29T15:00:00.123Z"));
        assert_eq!(parse_rfc3339("2026-11-29"), parse_rfc3339("2026-11-29T00:00:00Z"));
        assert_eq!(format_rfc3339(parse_rfc3339("2024-02-29T23:59:59Z").unwrap_or(0)), "2024-02-29T23:59:59Z");
        for bad in ["", "2026-13-01T00:00:00Z", "2026-11-29T15:00:00", "yesterday", "2026-11-29T15:00:00+0100"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(parse_amz_date("20261129T150000"), None);
    }
}
