//! The dates and times the rules read, parsed with the `time` crate (strict:
//! an impossible date such as 30 February is an error, never the next valid
//! day), and the one place the system clock is read.
//!
//! Times are Unix seconds. The decision core never reads the clock: each
//! shell calls [`system_now`] once per request and passes the result in, an
//! error included, so a broken clock denies what depends on it instead of
//! turning into 1970.

use time::{
    format_description::{well_known::Rfc3339, BorrowedFormatItem},
    macros::format_description,
    Date, OffsetDateTime, PrimitiveDateTime, Time,
};

/// A date or time that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not {expected}: {reason}")]
pub struct TimeError {
    value: String,
    expected: &'static str,
    reason: String,
}

impl TimeError {
    fn new(value: &str, expected: &'static str, reason: impl std::fmt::Display) -> Self {
        Self { value: value.to_string(), expected, reason: reason.to_string() }
    }
}

/// The system clock could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the system clock could not be read ({0})")]
pub struct ClockError(pub &'static str);

/// The current time of a request: read once by the shell, an error included.
pub type Now = Result<i64, ClockError>;

/// Reads the system clock (the shells' one clock read per request).
pub fn system_now() -> Now {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| ClockError("it reads a time before 1970"))?;
    i64::try_from(since_epoch.as_secs()).map_err(|_| ClockError("it reads a time past the year 292 billion"))
}

/// RFC 3339: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (`--now`, `format: date-time`).
pub fn parse_rfc3339(s: &str) -> Result<i64, TimeError> {
    OffsetDateTime::parse(s, &Rfc3339)
        .map(OffsetDateTime::unix_timestamp)
        .map_err(|e| TimeError::new(s, "an RFC 3339 date-time", e))
}

/// `[year][month][day]T[hour][minute][second]Z`, with its `T` cut from a
/// literal no other crate holds: the macro's own `b"T"` is merged with
/// regex-syntax's Unicode value `T`, in a 64 KiB window of the Kubewarden
/// module's data that nothing else a presigned-URL check reads (issue #35;
/// `schema::keyword` says more). `amz_date_is_the_macros_description`
/// checks it is the macro's description item for item.
const AMZ_DATE: &[BorrowedFormatItem<'static>] = {
    use time::format_description::{modifier, Component};
    const T: &str = "T(X-Amz-Date)".split_at(1).0;
    &[
        BorrowedFormatItem::Component(Component::CalendarYearFullStandardRange(
            modifier::CalendarYearFullStandardRange::default(),
        )),
        BorrowedFormatItem::Component(Component::MonthNumerical(modifier::MonthNumerical::default())),
        BorrowedFormatItem::Component(Component::Day(modifier::Day::default())),
        BorrowedFormatItem::StringLiteral(T),
        BorrowedFormatItem::Component(Component::Hour24(modifier::Hour24::default())),
        BorrowedFormatItem::Component(Component::Minute(modifier::Minute::default())),
        BorrowedFormatItem::Component(Component::Second(modifier::Second::default())),
        BorrowedFormatItem::StringLiteral("Z"),
    ]
};

/// The SigV4 basic format `YYYYMMDDTHHMMSSZ` (`X-Amz-Date`, `X-Goog-Date`).
pub fn parse_amz_date(s: &str) -> Result<i64, TimeError> {
    PrimitiveDateTime::parse(s, AMZ_DATE)
        .map(|dt| dt.assume_utc().unix_timestamp())
        .map_err(|e| TimeError::new(s, "a SigV4 date (YYYYMMDDTHHMMSSZ)", e))
}

const SAS_DATE: &[BorrowedFormatItem<'static>] = format_description!("[year]-[month]-[day]");
const SAS_MINUTES: &[BorrowedFormatItem<'static>] = format_description!("[year]-[month]-[day]T[hour]:[minute]Z");

/// An Azure SAS time (`se`, `st`): the ISO 8601 UTC forms Azure accepts,
/// `YYYY-MM-DD`, `YYYY-MM-DDThh:mmZ` and `YYYY-MM-DDThh:mm:ss[.frac]Z`.
pub fn parse_sas_time(s: &str) -> Result<i64, TimeError> {
    const EXPECTED: &str = "an Azure SAS time (YYYY-MM-DD, YYYY-MM-DDThh:mmZ or YYYY-MM-DDThh:mm:ssZ)";
    if let Ok(t) = parse_rfc3339(s) {
        return Ok(t);
    }
    let parsed = match s.len() {
        10 => Date::parse(s, SAS_DATE).map(|d| PrimitiveDateTime::new(d, Time::MIDNIGHT)),
        _ => PrimitiveDateTime::parse(s, SAS_MINUTES),
    };
    parsed.map(|dt| dt.assume_utc().unix_timestamp()).map_err(|e| TimeError::new(s, EXPECTED, e))
}

/// A SigV2 `Expires`: Unix seconds, digits only.
pub fn parse_unix_seconds(s: &str) -> Result<i64, TimeError> {
    const EXPECTED: &str = "Unix seconds";
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TimeError::new(s, EXPECTED, "only the digits 0-9 are allowed"));
    }
    let t: i64 = s.parse().map_err(|e| TimeError::new(s, EXPECTED, e))?;
    OffsetDateTime::from_unix_timestamp(t).map_err(|e| TimeError::new(s, EXPECTED, e))?;
    Ok(t)
}

/// Formats Unix seconds as RFC 3339 UTC (for messages); a time outside
/// years 0-9999 is shown as Unix seconds.
pub fn format_rfc3339(t: i64) -> String {
    OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|dt| dt.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{t} (Unix seconds)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_date_is_the_macros_description() {
        let written: &[BorrowedFormatItem<'static>] = format_description!("[year][month][day]T[hour][minute][second]Z");
        assert_eq!(AMZ_DATE, written);
        for s in
            ["20261206T131500Z", "20260230T000000Z", "20261206t131500Z", "2026-12-06T13:15:00Z", "20261206T131500", ""]
        {
            let ours = PrimitiveDateTime::parse(s, AMZ_DATE).map_err(|e| e.to_string());
            assert_eq!(ours, PrimitiveDateTime::parse(s, written).map_err(|e| e.to_string()), "{s}");
        }
        assert_eq!(parse_amz_date("20261206T131500Z"), Ok(1_796_562_900));
    }

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_rfc3339("2026-11-29T15:00:00Z"), parse_amz_date("20261129T150000Z"));
        assert_eq!(parse_rfc3339("2026-11-29T16:00:00+01:00"), parse_rfc3339("2026-11-29T15:00:00Z"));
        assert_eq!(parse_rfc3339("2026-11-29T15:00:00.123Z"), parse_rfc3339("2026-11-29T15:00:00Z"));
        assert_eq!(format_rfc3339(parse_rfc3339("2024-02-29T23:59:59Z").unwrap_or(0)), "2024-02-29T23:59:59Z");
        for bad in ["", "2026-13-01T00:00:00Z", "2026-11-29T15:00:00", "yesterday", "2026-11-29T15:00:00+0100"] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
        assert!(parse_amz_date("20261129T150000").is_err());
        assert!(parse_unix_seconds("-1").is_err() && parse_unix_seconds("1e9").is_err());
        assert_eq!(parse_unix_seconds("1764428700"), Ok(1_764_428_700));
    }

    #[test]
    fn impossible_dates_are_errors_not_the_next_day() {
        assert!(parse_rfc3339("2027-02-30T00:00:00Z").is_err());
        assert!(parse_amz_date("20270230T000000Z").is_err());
        assert!(parse_sas_time("2027-02-30").is_err());
        assert!(parse_sas_time("2027-02-29T10:00Z").is_err(), "2027 is not a leap year");
        assert!(parse_amz_date("20261129T250000Z").is_err());
    }

    #[test]
    fn sas_forms() {
        let midnight = parse_rfc3339("2026-11-29T00:00:00Z");
        assert_eq!(parse_sas_time("2026-11-29"), midnight);
        assert_eq!(parse_sas_time("2026-11-29T00:00Z"), midnight);
        assert_eq!(parse_sas_time("2026-11-29T00:00:00Z"), midnight);
        assert!(parse_sas_time("2026-11-29T00:00").is_err());
    }

    #[test]
    fn the_system_clock_reads() {
        assert!(system_now().is_ok_and(|t| t > 1_700_000_000));
    }
}
