//! Byte sizes and durations as people type them: `16KiB`, `2MiB`, `100MB`, `5ms`, `250us`.
//!
//! Binary (`KiB`, `MiB`, `GiB`, `K`, `M`, `G`) and decimal (`kB`, `KB`, `MB`, `GB`) suffixes are both
//! accepted; a bare number is bytes (or, for durations, an error: the unit must be said).

use std::fmt;
use std::time::Duration;

/// Why a size or duration could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?}: {reason}")]
pub struct ParseError {
    pub input: String,
    pub reason: &'static str,
}

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let digits: String = s[..end].chars().filter(|&c| c != '_').collect();
    let value: f64 = digits.parse().ok()?;
    Some((value, s[end..].trim()))
}

/// Parses a byte size such as `16KiB`, `2MiB`, `100MB`, `4096`.
pub fn parse_bytes(input: &str) -> Result<u64, ParseError> {
    let err = |reason| ParseError {
        input: input.to_string(),
        reason,
    };
    let (value, unit) =
        split_number(input).ok_or_else(|| err("expected a number such as 16KiB"))?;
    let multiplier: u64 = match unit {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "kiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        "G" | "g" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(err("unknown unit (use B, KiB, MiB, GiB, kB, MB, GB)")),
    };
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(err("too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(err("not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Parses a duration such as `5ms`, `250us`, `1.5s`, `100ns`, `2m`.
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    let err = |reason| ParseError {
        input: input.to_string(),
        reason,
    };
    let (value, unit) = split_number(input).ok_or_else(|| err("expected a number such as 5ms"))?;
    let nanos_per_unit: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "" => return Err(err("missing unit (use ns, us, ms, s or min)")),
        _ => return Err(err("unknown unit (use ns, us, ms, s or min)")),
    };
    let nanos = value * nanos_per_unit;
    if !nanos.is_finite() || nanos > u64::MAX as f64 {
        return Err(err("too large"));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// Displays a byte count with a binary unit: `16 KiB`, `2.0 MiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else if value.fract() == 0.0 {
            write!(f, "{} {}", value as u64, UNITS[unit])
        } else {
            write!(f, "{:.1} {}", value, UNITS[unit])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_sizes() {
        assert_eq!(parse_bytes("16KiB").unwrap(), 16 * 1024);
        assert_eq!(parse_bytes("2MiB").unwrap(), 2 * 1024 * 1024);
        assert_eq!(parse_bytes("100MB").unwrap(), 100_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_bytes("1_000").unwrap(), 1000);
    }

    #[test]
    fn rejects_bad_sizes() {
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("KiB").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("1.3B").is_err());
        assert!(parse_bytes("99999999999999999999TiB").is_err());
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5 fortnights").is_err());
    }

    #[test]
    fn displays_sizes() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(16 * 1024).to_string(), "16 KiB");
        assert_eq!(Bytes(3 * 1024 * 1024 / 2).to_string(), "1.5 MiB");
    }
}
