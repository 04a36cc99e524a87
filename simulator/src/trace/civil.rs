//! Calendar arithmetic for the Philly timestamps (`YYYY-MM-DD HH:MM:SS`, UTC, proleptic Gregorian).

/// Seconds from 0001-01-01 00:00:00 to the Unix epoch; adding it makes every
/// accepted timestamp non-negative.
pub(crate) const SECONDS_FROM_YEAR_1_TO_UNIX: i64 = 62_135_596_800;

/// Days from 1970-01-01 to the given date (negative before), valid for any
/// year of the proleptic Gregorian calendar (H. Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // [0, 399]
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 }; // March = 0
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses `YYYY-MM-DD HH:MM:SS` (a `T` is also accepted between date and
/// time) into seconds since the Unix epoch, checking every range: year
/// 0001-9999, real calendar days (leap years included), hours 00-23,
/// minutes and seconds 00-59.
pub(crate) fn parse_timestamp(text: &str) -> Result<i64, String> {
    let bad = || format!("expected a timestamp like \"2017-10-09 07:01:55\" (YYYY-MM-DD HH:MM:SS), found {text:?}");
    let b = text.as_bytes();
    if b.len() != 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b' ' | b'T') || b[13] != b':' || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        b[from..to].iter().try_fold(0u32, |acc, &c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
    };
    let fields = (num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19));
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = fields else {
        return Err(bad());
    };
    let year = i64::from(year);
    if year == 0 {
        return Err(format!("year 0000 is out of range in {text:?}"));
    }
    if !(1..=12).contains(&month) {
        return Err(format!("month {month:02} is out of range in {text:?}"));
    }
    let days = days_in_month(year, month);
    if day == 0 || day > days {
        return Err(format!("day {day:02} is out of range for {year:04}-{month:02} ({days} days) in {text:?}"));
    }
    if hour > 23 {
        return Err(format!("hour {hour:02} is out of range in {text:?}"));
    }
    if minute > 59 {
        return Err(format!("minute {minute:02} is out of range in {text:?}"));
    }
    if second > 59 {
        return Err(format!("second {second:02} is out of range in {text:?}"));
    }
    let clock = i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Ok(days_from_civil(year, month, day) * 86_400 + clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_epoch_values() {
        // Reference values from `date -u -d '<text>' +%s`.
        for (text, epoch) in [
            ("1970-01-01 00:00:00", 0),
            ("2017-09-04 10:30:41", 1_504_521_041),
            ("2017-12-22 08:02:11", 1_513_929_731),
            ("2000-02-29 23:59:59", 951_868_799),
            ("1969-12-31 23:59:59", -1),
            ("0001-01-01 00:00:00", -SECONDS_FROM_YEAR_1_TO_UNIX),
            ("9999-12-31 23:59:59", 253_402_300_799),
            ("2017-10-09T07:01:55", 1_507_532_515),
        ] {
            assert_eq!(parse_timestamp(text), Ok(epoch), "{text}");
        }
    }

    #[test]
    fn invalid_dates_and_times_are_rejected() {
        assert_eq!(
            parse_timestamp("2017-02-30 10:00:00"),
            Err("day 30 is out of range for 2017-02 (28 days) in \"2017-02-30 10:00:00\"".to_string())
        );
        assert_eq!(
            parse_timestamp("2017-10-09 25:00:00"),
            Err("hour 25 is out of range in \"2017-10-09 25:00:00\"".to_string())
        );
        assert!(parse_timestamp("1900-02-29 00:00:00").unwrap_err().starts_with("day 29"));
        assert!(parse_timestamp("2017-13-01 00:00:00").unwrap_err().starts_with("month 13"));
        assert!(parse_timestamp("2017-04-31 00:00:00").unwrap_err().starts_with("day 31"));
        assert!(parse_timestamp("2017-04-00 00:00:00").unwrap_err().starts_with("day 00"));
        assert!(parse_timestamp("2017-04-01 00:60:00").unwrap_err().starts_with("minute 60"));
        assert!(parse_timestamp("2017-04-01 00:00:60").unwrap_err().starts_with("second 60"));
        assert!(parse_timestamp("0000-01-01 00:00:00").unwrap_err().starts_with("year 0000"));
        for text in [
            "",
            "2017-10-09",
            "2017-10-09 7:01:55",
            "2017/10/09 07:01:55",
            "2017-1x-09 07:01:55",
            "2017-10-09 07:01:55Z",
        ] {
            assert!(parse_timestamp(text).unwrap_err().starts_with("expected a timestamp"), "{text}");
        }
    }
}
