//! Human units for durations, bandwidths and sizes, parsed exactly.
//!
//! People write link parameters the way `tc` and papers do (`36ms`, `1.5s`, `100mbit`,
//! `10MB/s`), so the emulator accepts that text and nothing vaguer. Numbers are decimal
//! and parsed without floating point, so `0.1s` is exactly 100 ms and a value printed by
//! [`fmt_duration`] or [`fmt_bandwidth`] parses back to the same number.
//!
//! `mbps`-style units are refused on purpose: `tc` reads them as *bytes* per second while
//! most people mean bits, and a factor-eight mistake in an emulator is silent.

use std::time::Duration;

use crate::error::ParseError;

/// A non-negative decimal `mantissa / 10^scale`, as written.
struct Decimal {
    mantissa: u128,
    scale: u32,
}

impl Decimal {
    /// `self * factor`, rounded to the nearest integer; `None` on overflow.
    fn times(&self, factor: u128) -> Option<u128> {
        let div = 10u128.checked_pow(self.scale)?;
        let product = self.mantissa.checked_mul(factor)?;
        Some((product + div / 2) / div)
    }
}

/// Splits `text` into its leading decimal number and the unit after it.
fn split_number(text: &str) -> Result<(Decimal, &str), String> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    if number.is_empty() {
        return Err(if text.starts_with('-') {
            "negative values are not allowed".into()
        } else {
            "it does not start with a number".into()
        });
    }
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if frac.contains('.') || (int.is_empty() && frac.is_empty()) {
        return Err(format!("{number:?} is not a number"));
    }
    // 30 significant digits keep every product below u128::MAX for our unit factors.
    if int.len() + frac.len() > 30 {
        return Err("too many digits".into());
    }
    let digits = format!("{int}{frac}");
    let mantissa = digits.parse::<u128>().map_err(|e| e.to_string())?;
    Ok((
        Decimal {
            mantissa,
            scale: frac.len() as u32,
        },
        unit.trim_start(),
    ))
}

/// Parses a duration such as `36ms`, `500us`, `1.5s`, `250ns` or `2min`.
///
/// A unit is required: a bare `36` could be seconds or milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, ParseError> {
    let err = |reason: String| ParseError::Duration {
        text: text.to_string(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(err("it is empty".into()));
    }
    let (number, unit) = split_number(trimmed).map_err(err)?;
    let nanos_per_unit: u128 = match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "min" => 60_000_000_000,
        "" => return Err(err("the unit is missing".into())),
        other => return Err(err(format!("unknown unit {other:?}"))),
    };
    duration_from(&number, nanos_per_unit).ok_or_else(|| err("it is too large".into()))
}

fn duration_from(number: &Decimal, nanos_per_unit: u128) -> Option<Duration> {
    let nanos = number.times(nanos_per_unit)?;
    Some(Duration::from_nanos(u64::try_from(nanos).ok()?))
}

/// Parses a size in bytes: `4g`, `512m`, `64k`, `1.5GiB`, `100KB` or plain bytes. Sizes
/// are binary (`k` is 1024), as caches and buffers are counted.
pub fn parse_size(text: &str) -> Result<u64, ParseError> {
    let err = |reason: String| ParseError::Size {
        text: text.to_string(),
        reason,
    };
    let (number, unit) = split_number(text.trim()).map_err(err)?;
    let unit = unit.to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        other => return Err(err(format!("unknown unit {other:?}"))),
    };
    let bytes = number
        .times(1u128 << shift)
        .ok_or_else(|| err("too large".into()))?;
    u64::try_from(bytes).map_err(|_| err("too large".into()))
}

/// Parses a bandwidth into bits per second; `None` means unlimited.
///
/// Bits: `bit`, `kbit`, `mbit`, `gbit`, `tbit` (optionally with `/s`, any case, powers of
/// 1000). Bytes: `B/s`, `kB/s` (or `KB/s`), `MB/s`, `GB/s` (powers of 1000) and `KiB/s`,
/// `MiB/s`, `GiB/s` (powers of 1024). `unlimited`, `none` or `inf` mean no limit.
pub fn parse_bandwidth(text: &str) -> Result<Option<u64>, ParseError> {
    let err = |reason: String| ParseError::Bandwidth {
        text: text.to_string(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(err("it is empty".into()));
    }
    if ["unlimited", "none", "inf"]
        .iter()
        .any(|w| trimmed.eq_ignore_ascii_case(w))
    {
        return Ok(None);
    }
    let (number, unit) = split_number(trimmed).map_err(err)?;
    let bits_per_unit = bandwidth_unit(unit).map_err(err)?;
    bandwidth_from(&number, bits_per_unit, err)
}

fn bandwidth_from(
    number: &Decimal,
    bits_per_unit: u128,
    err: impl Fn(String) -> ParseError,
) -> Result<Option<u64>, ParseError> {
    let bits = number
        .times(bits_per_unit)
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| err("it is too large".into()))?;
    if bits == 0 {
        return Err(err(
            "a link cannot carry 0 bits per second; write 'unlimited' for no limit".into(),
        ));
    }
    Ok(Some(bits))
}

fn bandwidth_unit(unit: &str) -> Result<u128, String> {
    // Byte units are case-sensitive: `MB/s` and `Mb/s` differ by a factor of eight.
    let bytes: Option<u128> = match unit {
        "B/s" => Some(1),
        "kB/s" | "KB/s" => Some(1_000),
        "MB/s" => Some(1_000_000),
        "GB/s" => Some(1_000_000_000),
        "KiB/s" => Some(1 << 10),
        "MiB/s" => Some(1 << 20),
        "GiB/s" => Some(1 << 30),
        _ => None,
    };
    if let Some(b) = bytes {
        return Ok(b * 8);
    }
    let lower = unit.to_ascii_lowercase();
    let bits_unit = lower.strip_suffix("/s").unwrap_or(&lower);
    match bits_unit {
        "bit" => Ok(1),
        "kbit" => Ok(1_000),
        "mbit" => Ok(1_000_000),
        "gbit" => Ok(1_000_000_000),
        "tbit" => Ok(1_000_000_000_000),
        "" => Err("the unit is missing".into()),
        _ if lower.ends_with("bps") || lower.ends_with("b/s") => Err(format!(
            "{unit:?} is ambiguous (tc reads it as bytes, most people as bits); \
             write e.g. 'mbit' for megabits or 'MB/s' for megabytes per second"
        )),
        _ => Err(format!("unknown unit {unit:?}")),
    }
}

/// Parses a bare trace-file number in a default unit (seconds, milliseconds, Mbit/s).
pub(crate) fn parse_bare(text: &str, factor: u128) -> Option<u128> {
    match split_number(text) {
        Ok((number, "")) => number.times(factor),
        _ => None,
    }
}

/// Like [`parse_duration`], but a bare number is taken in `nanos_per_unit`.
pub(crate) fn parse_duration_or_bare(
    text: &str,
    nanos_per_unit: u128,
) -> Result<Duration, ParseError> {
    match parse_bare(text, nanos_per_unit) {
        Some(n) => u64::try_from(n)
            .map(Duration::from_nanos)
            .map_err(|_| ParseError::Duration {
                text: text.to_string(),
                reason: "it is too large".into(),
            }),
        None => parse_duration(text),
    }
}

/// Like [`parse_bandwidth`], but a bare number is taken in `bits_per_unit`.
pub(crate) fn parse_bandwidth_or_bare(
    text: &str,
    bits_per_unit: u128,
) -> Result<Option<u64>, ParseError> {
    match split_number(text.trim()) {
        Ok((number, "")) => {
            bandwidth_from(&number, bits_per_unit, |reason| ParseError::Bandwidth {
                text: text.to_string(),
                reason,
            })
        }
        _ => parse_bandwidth(text),
    }
}

/// Formats a duration in the largest unit that represents it exactly (`36ms`, `1500us`).
pub fn fmt_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (unit, per) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if nanos != 0 && nanos % per == 0 {
            return format!("{}{unit}", nanos / per);
        }
    }
    if nanos == 0 {
        "0s".into()
    } else {
        format!("{nanos}ns")
    }
}

/// Formats bits per second in the largest unit that represents it exactly; `None` is
/// `unlimited`.
pub fn fmt_bandwidth(bits_per_s: Option<u64>) -> String {
    let Some(bits) = bits_per_s else {
        return "unlimited".into();
    };
    for (unit, per) in [
        ("gbit", 1_000_000_000u64),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bits % per == 0 {
            return format!("{}{unit}", bits / per);
        }
    }
    format!("{bits}bit")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_binary_and_bad_ones_say_why() {
        assert_eq!(parse_size("4g").unwrap(), 4 << 30);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("100KB").unwrap(), 100 << 10);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        for bad in ["", "g", "-4g", "4x", "4 parsecs", "99999999999t"] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(e.contains("invalid size"), "{bad}: {e}");
        }
    }
    use proptest::prelude::*;

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("36ms").unwrap(), ms(36));
        assert_eq!(
            parse_duration(" 500us ").unwrap(),
            Duration::from_micros(500)
        );
        assert_eq!(parse_duration("500µs").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("1.5s").unwrap(), ms(1500));
        assert_eq!(parse_duration("0.1s").unwrap(), ms(100));
        assert_eq!(parse_duration(".5ms").unwrap(), Duration::from_micros(500));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert_eq!(
            parse_duration("18.35ms").unwrap(),
            Duration::from_micros(18_350)
        );
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
    }

    #[test]
    fn bad_durations_name_the_text() {
        for (text, why) in [
            ("36", "unit is missing"),
            ("36 parsecs", "unknown unit"),
            ("-3ms", "negative"),
            ("ms", "does not start with a number"),
            ("1.2.3s", "not a number"),
            ("", "empty"),
            ("99999999999999999999s", "too large"),
        ] {
            let e = parse_duration(text).unwrap_err().to_string();
            assert!(e.contains(&format!("{text:?}")), "{e}");
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("100mbit").unwrap(), Some(100_000_000));
        assert_eq!(parse_bandwidth("100Mbit/s").unwrap(), Some(100_000_000));
        assert_eq!(parse_bandwidth("1gbit").unwrap(), Some(1_000_000_000));
        assert_eq!(parse_bandwidth("1.5gbit").unwrap(), Some(1_500_000_000));
        assert_eq!(parse_bandwidth("2.58mbit").unwrap(), Some(2_580_000));
        assert_eq!(parse_bandwidth("10MB/s").unwrap(), Some(80_000_000));
        assert_eq!(parse_bandwidth("1MiB/s").unwrap(), Some(8 << 20));
        assert_eq!(parse_bandwidth("64kbit").unwrap(), Some(64_000));
        assert_eq!(parse_bandwidth("unlimited").unwrap(), None);
        assert_eq!(parse_bandwidth("INF").unwrap(), None);
    }

    #[test]
    fn bad_bandwidths_name_the_text() {
        for (text, why) in [
            ("100mbps", "ambiguous"),
            ("100Mb/s", "ambiguous"),
            ("0mbit", "0 bits"),
            ("100", "unit is missing"),
            ("100 furlongs", "unknown unit"),
            ("fast", "does not start with a number"),
        ] {
            let e = parse_bandwidth(text).unwrap_err().to_string();
            assert!(e.contains(&format!("{text:?}")), "{e}");
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn bare_numbers_in_default_units() {
        assert_eq!(
            parse_duration_or_bare("18.5", 1_000_000).unwrap(),
            Duration::from_micros(18_500)
        );
        assert_eq!(
            parse_duration_or_bare("2s", 1_000_000).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            parse_bandwidth_or_bare("2.5", 1_000_000).unwrap(),
            Some(2_500_000)
        );
        assert_eq!(parse_bandwidth_or_bare("unlimited", 1).unwrap(), None);
    }

    proptest! {
        #[test]
        fn durations_round_trip(nanos in 0u64..u64::MAX / 2) {
            let d = Duration::from_nanos(nanos);
            prop_assert_eq!(parse_duration(&fmt_duration(d)).unwrap(), d);
        }

        #[test]
        fn bandwidths_round_trip(bits in proptest::option::of(1u64..u64::MAX / 2)) {
            prop_assert_eq!(parse_bandwidth(&fmt_bandwidth(bits)).unwrap(), bits);
        }

        #[test]
        fn parsers_never_panic(text in "\\PC{0,16}") {
            let _ = parse_duration(&text);
            let _ = parse_bandwidth(&text);
        }
    }
}
