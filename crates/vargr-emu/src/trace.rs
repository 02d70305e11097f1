//! Recorded link conditions, replayed by time.
//!
//! Longcut's second mode replays latency and bandwidth measured on a real WAN (by NWS or
//! EventSpace) so an experiment sees the same variation every run. A [`Trace`] is a list
//! of `(time, latency, bandwidth)` rows replayed as a **step function**: a row holds from
//! its time until the next row's.
//!
//! Past the last row the trace **loops** by default ([`TraceEnd::Loop`]): experiments are
//! often longer than the recording, and holding the last sample would quietly turn the
//! rest of the run into a constant link. The loop period is the last row's time plus the
//! gap before it, so a trace sampled every second for 60 rows repeats every 60 s.
//! [`TraceEnd::Hold`] keeps the last row instead.
//!
//! # File format
//!
//! ```text
//! # time   latency   bandwidth      <- '#' starts a comment; blank lines are ignored
//! 0s       18ms      3mbit
//! 1.5      18.4      2.9            <- bare numbers: seconds, milliseconds, Mbit/s
//! 3s       20ms      unlimited
//! ```
//!
//! Fields are separated by whitespace and/or commas, so CSV works, and a first line of
//! words (`time,latency,bandwidth`) is taken as a header. Times must increase; they are
//! shifted so the first row is at zero, so absolute Unix timestamps (as NWS writes them)
//! work unchanged. The bare units follow the seed's tables (latency in ms, bandwidth in
//! Mbit/s); any field may instead carry an explicit unit.

use std::path::Path;
use std::time::Duration;

use crate::error::EmuError;
use crate::units::{parse_bandwidth_or_bare, parse_duration_or_bare};

/// One sample of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRow {
    /// When this row starts, relative to the first row.
    pub at: Duration,
    /// One-way latency from this time on.
    pub latency: Duration,
    /// Bandwidth in bits per second from this time on; `None` is unlimited.
    pub bandwidth_bits_per_s: Option<u64>,
}

/// What a trace does after its last row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceEnd {
    /// Start again from the first row (the default).
    #[default]
    Loop,
    /// Keep the last row's values forever.
    Hold,
}

/// A validated, non-empty trace (see the [module docs](self) for format and replay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    rows: Vec<TraceRow>,
    end: TraceEnd,
    period: Duration,
}

impl Trace {
    /// Builds a trace from rows whose times strictly increase; times are shifted so the
    /// first row is at zero. `origin` names the source in errors.
    pub fn from_rows(mut rows: Vec<TraceRow>, origin: &str) -> Result<Trace, EmuError> {
        let Some(first) = rows.first().map(|r| r.at) else {
            return Err(EmuError::Trace {
                origin: origin.to_string(),
                line: 0,
                message: "the trace has no rows".into(),
            });
        };
        for (i, pair) in rows.windows(2).enumerate() {
            if pair[1].at <= pair[0].at {
                return Err(EmuError::Trace {
                    origin: origin.to_string(),
                    line: 0,
                    message: format!(
                        "row {} at {:?} does not come after row {} at {:?}",
                        i + 2,
                        pair[1].at,
                        i + 1,
                        pair[0].at
                    ),
                });
            }
        }
        for r in &mut rows {
            r.at -= first;
        }
        let n = rows.len();
        let period = if n >= 2 {
            rows[n - 1].at + (rows[n - 1].at - rows[n - 2].at)
        } else {
            Duration::ZERO
        };
        Ok(Trace {
            rows,
            end: TraceEnd::Loop,
            period,
        })
    }

    /// Parses trace text (see the [module docs](self)); errors are `origin:line: ...`.
    pub fn parse(text: &str, origin: &str) -> Result<Trace, EmuError> {
        let mut rows: Vec<TraceRow> = Vec::new();
        let mut first_line = true;
        for (index, raw) in text.lines().enumerate() {
            let line_no = index + 1;
            let err = |message: String| EmuError::Trace {
                origin: origin.to_string(),
                line: line_no,
                message,
            };
            let content = raw.split('#').next().unwrap_or("");
            let fields: Vec<&str> = content
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|f| !f.is_empty())
                .collect();
            if fields.is_empty() {
                continue;
            }
            let header = std::mem::replace(&mut first_line, false)
                && fields
                    .iter()
                    .all(|f| f.chars().all(|c| c.is_alphabetic() || c == '_'));
            if header {
                continue;
            }
            if fields.len() != 3 {
                return Err(err(format!(
                    "expected 3 fields (time, latency, bandwidth), found {}",
                    fields.len()
                )));
            }
            let at = parse_duration_or_bare(fields[0], 1_000_000_000)
                .map_err(|e| err(format!("time: {e}")))?;
            let latency = parse_duration_or_bare(fields[1], 1_000_000)
                .map_err(|e| err(format!("latency: {e}")))?;
            let bandwidth_bits_per_s = parse_bandwidth_or_bare(fields[2], 1_000_000)
                .map_err(|e| err(format!("bandwidth: {e}")))?;
            if let Some(prev) = rows.last() {
                if at <= prev.at {
                    return Err(err(format!(
                        "time {} does not come after the previous row's",
                        fields[0]
                    )));
                }
            }
            rows.push(TraceRow {
                at,
                latency,
                bandwidth_bits_per_s,
            });
        }
        Trace::from_rows(rows, origin)
    }

    /// The trace as text in the file format, in bare units (seconds, milliseconds,
    /// Mbit/s) written exactly, so that [`Trace::parse`] reads back the same rows.
    pub fn to_text(&self) -> String {
        let mut out = String::from("# time_s latency_ms bandwidth_mbit\n");
        for r in &self.rows {
            let lat = r.latency.as_nanos();
            let bw = match r.bandwidth_bits_per_s {
                Some(b) => format!("{}.{:06}", b / 1_000_000, b % 1_000_000),
                None => "unlimited".into(),
            };
            out.push_str(&format!(
                "{}.{:09} {}.{:06} {bw}\n",
                r.at.as_secs(),
                r.at.subsec_nanos(),
                lat / 1_000_000,
                lat % 1_000_000
            ));
        }
        out
    }

    /// Reads and parses a trace file.
    pub fn load(path: impl AsRef<Path>) -> Result<Trace, EmuError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| EmuError::TraceIo {
            path: path.display().to_string(),
            source,
        })?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// The same trace with a different end behaviour.
    pub fn with_end(mut self, end: TraceEnd) -> Trace {
        self.end = end;
        self
    }

    /// The rows, first at time zero.
    pub fn rows(&self) -> &[TraceRow] {
        &self.rows
    }

    /// What happens after the last row.
    pub fn end(&self) -> TraceEnd {
        self.end
    }

    /// The loop period (zero for a one-row trace).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The row in force `elapsed` after the start of replay.
    pub fn at(&self, elapsed: Duration) -> &TraceRow {
        let t = match self.end {
            TraceEnd::Loop if !self.period.is_zero() => {
                Duration::from_nanos((elapsed.as_nanos() % self.period.as_nanos()) as u64)
            }
            _ => elapsed,
        };
        // The last row whose time is <= t; the first row is at zero so one always exists.
        let i = self.rows.partition_point(|r| r.at <= t);
        &self.rows[i.saturating_sub(1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
time,latency,bandwidth
# Odense-Aalborg, as in the seed's table IV
100.0, 9.85, 10.08
101.0, 10ms, 9mbit   # explicit units work too
102.5  12    unlimited
";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_and_replays_as_steps() {
        let t = Trace::parse(SAMPLE, "odense.trace").unwrap();
        assert_eq!(t.rows().len(), 3);
        assert_eq!(t.rows()[0].at, Duration::ZERO);
        assert_eq!(t.rows()[0].latency, Duration::from_micros(9_850));
        assert_eq!(t.rows()[0].bandwidth_bits_per_s, Some(10_080_000));
        assert_eq!(t.rows()[2].at, ms(2_500));
        assert_eq!(t.rows()[2].bandwidth_bits_per_s, None);
        // Steps: a row holds until the next one.
        assert_eq!(t.at(ms(999)).latency, Duration::from_micros(9_850));
        assert_eq!(t.at(ms(1_000)).latency, ms(10));
        assert_eq!(t.at(ms(2_499)).latency, ms(10));
        assert_eq!(t.at(ms(2_500)).latency, ms(12));
    }

    #[test]
    fn loops_by_default_or_holds() {
        let t = Trace::parse(SAMPLE, "odense.trace").unwrap();
        // Period: last row (2.5 s) plus the gap before it (1.5 s).
        assert_eq!(t.period(), ms(4_000));
        assert_eq!(t.at(ms(3_999)).latency, ms(12));
        assert_eq!(t.at(ms(4_000)).latency, Duration::from_micros(9_850));
        assert_eq!(t.at(ms(5_000)).latency, ms(10));
        let held = t.with_end(TraceEnd::Hold);
        assert_eq!(held.at(ms(5_000)).latency, ms(12));
        assert_eq!(held.at(Duration::from_secs(1 << 30)).latency, ms(12));
    }

    #[test]
    fn written_text_reads_back_the_same_rows() {
        let t = Trace::parse(SAMPLE, "odense.trace").unwrap();
        assert_eq!(Trace::parse(&t.to_text(), "again").unwrap(), t);
    }

    #[test]
    fn one_row_is_constant() {
        let t = Trace::parse("0 5 100", "x").unwrap();
        assert_eq!(t.at(Duration::from_secs(99)).latency, ms(5));
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            ("0 5 100\n1 5\n", "t:2: expected 3 fields"),
            (
                "0 5 100\n\n1 5x 100\n",
                "t:3: latency: invalid duration \"5x\"",
            ),
            ("0 5 100\n0 5 100\n", "t:2: time 0 does not come after"),
            (
                "0 5 100\n1 5 0\n",
                "t:2: bandwidth: invalid bandwidth \"0\"",
            ),
            ("# only a comment\n", "t:0: the trace has no rows"),
            (
                "0 5 100\nfoo 5 100\n",
                "t:2: time: invalid duration \"foo\"",
            ),
        ];
        for (text, want) in cases {
            let e = Trace::parse(text, "t").unwrap_err().to_string();
            assert!(e.starts_with(want), "got {e:?}, want {want:?}");
        }
    }

    #[test]
    fn missing_file_is_named() {
        let e = Trace::load("/nonexistent/vargr.trace")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/vargr.trace"), "{e}");
    }
}
