//! Experiment output: aligned Markdown tables, JSON files, and figures formatted like the papers'.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("encoding JSON for {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Align {
    #[default]
    Left,
    /// For numbers, so their digits line up (`---:` in Markdown).
    Right,
}

/// A table of strings rendered as GitHub Markdown with aligned columns.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    aligns: Vec<Align>,
    rows: Vec<Vec<String>>,
}

/// Markdown's narrowest delimiter cell (`---`).
const COLUMN_WIDTH_MIN: usize = 3;

impl Table {
    /// A table with these column headers, every column left-aligned.
    pub fn new(headers: Vec<String>) -> Table {
        Table {
            aligns: vec![Align::Left; headers.len()],
            headers,
            rows: Vec::new(),
        }
    }

    /// Sets how `column` lines up; a column that does not exist is ignored.
    pub fn set_align(&mut self, column: usize, align: Align) -> &mut Table {
        if let Some(a) = self.aligns.get_mut(column) {
            *a = align;
        }
        self
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    pub fn headers(&self) -> &[String] {
        &self.headers
    }

    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as GitHub Markdown, every column padded to its widest cell so the text lines
    /// up too. `|` in a cell is escaped and a line break becomes a space.
    pub fn to_markdown(&self) -> String {
        let cell = |s: &str| s.replace('|', "\\|").replace(['\r', '\n'], " ");
        let headers: Vec<String> = self.headers.iter().map(|h| cell(h)).collect();
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|c| cell(c)).collect())
            .collect();
        let mut widths: Vec<usize> = vec![COLUMN_WIDTH_MIN; headers.len()];
        for line in std::iter::once(&headers).chain(&rows) {
            for (w, c) in widths.iter_mut().zip(line) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .zip(&self.aligns)
                .map(|((c, &w), align)| {
                    let pad = " ".repeat(w.saturating_sub(c.chars().count()));
                    match align {
                        Align::Left => format!("{c}{pad}"),
                        Align::Right => format!("{pad}{c}"),
                    }
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = line(&headers);
        let rule: Vec<String> = widths
            .iter()
            .zip(&self.aligns)
            .map(|(&w, align)| match align {
                Align::Left => "-".repeat(w + 2),
                Align::Right => format!("{}:", "-".repeat(w + 1)),
            })
            .collect();
        out.push_str(&format!("|{}|\n", rule.join("|")));
        for row in &rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// Writes `value` as pretty JSON to `path`, creating its parent directories. The file is
/// written beside `path` and renamed over it, so a reader never sees half a report.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), ReportError> {
    let write_err = |source| ReportError::Write {
        path: path.to_path_buf(),
        source,
    };
    let text = serde_json::to_string_pretty(value).map_err(|source| ReportError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(write_err)?;
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let written =
        std::fs::write(&partial, text + "\n").and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.map_err(write_err)
}

/// One of an issue's targets, checked against a run's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// The targets as a Markdown table (`target | measured | met`), `NO` standing out where missed.
pub fn targets_markdown(targets: &[TargetCheck]) -> String {
    let mut table = Table::new(vec!["target".into(), "measured".into(), "met".into()]);
    for t in targets {
        table.push(vec![
            t.target.clone(),
            t.measured.clone(),
            if t.met { "yes" } else { "NO" }.into(),
        ]);
    }
    table.to_markdown()
}

/// Microseconds as the papers print them: whole numbers with thousands separators (`4,454`),
/// one decimal below 10 µs (`3.2`), `-` for a value that is not a number.
pub fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        return "-".to_string();
    }
    let sign = if us < 0.0 { "-" } else { "" };
    let magnitude = us.abs();
    if magnitude < 10.0 {
        return format!("{sign}{magnitude:.1}");
    }
    let digits = (magnitude.round() as u64).to_string();
    let mut out = sign.to_string();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_are_aligned_and_escaped() {
        let mut t = Table::new(vec!["case".into(), "max".into()]);
        t.push(vec!["NONE".into(), "4,454".into()]);
        t.push(vec!["a|b".into()]);
        t.push(vec!["two\nlines".into(), "1".into(), "dropped".into()]);
        let md = t.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines,
            [
                "| case      | max   |",
                "|-----------|-------|",
                "| NONE      | 4,454 |",
                "| a\\|b      |       |",
                "| two lines | 1     |",
            ]
        );
        assert_eq!(t.len(), 3);
        assert_eq!(t.rows()[1], ["a|b", ""]);
    }

    #[test]
    fn right_aligned_columns_line_up_their_digits() {
        let mut t = Table::new(vec!["case".into(), "max (µs)".into(), "n".into()]);
        t.set_align(1, Align::Right).set_align(9, Align::Right);
        t.push(vec!["NONE".into(), "4,454".into(), "x".into()]);
        t.push(vec!["tailbound".into(), "309".into(), "y".into()]);
        let md = t.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines,
            [
                "| case      | max (µs) | n   |",
                "|-----------|---------:|-----|",
                "| NONE      |    4,454 | x   |",
                "| tailbound |      309 | y   |",
            ]
        );
    }

    #[test]
    fn a_table_without_rows_still_renders() {
        let t = Table::new(vec!["a".into()]);
        assert!(t.is_empty());
        assert_eq!(t.to_markdown(), "| a   |\n|-----|\n");
    }

    #[test]
    fn microseconds_are_formatted_like_the_paper() {
        assert_eq!(fmt_us(4454.2), "4,454");
        assert_eq!(fmt_us(121_756.0), "121,756");
        assert_eq!(fmt_us(309.0), "309");
        assert_eq!(fmt_us(999.6), "1,000");
        assert_eq!(fmt_us(1_000_000.0), "1,000,000");
        assert_eq!(fmt_us(3.25), "3.2");
        assert_eq!(fmt_us(0.0), "0.0");
        assert_eq!(fmt_us(-4454.0), "-4,454");
        assert_eq!(fmt_us(f64::NAN), "-");
        assert_eq!(fmt_us(f64::INFINITY), "-");
    }

    #[test]
    fn json_round_trips_and_creates_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/out.json");
        let value = serde_json::json!({"experiment": "record", "cases": [1, 2]});
        write_json(&path, &value).unwrap();
        let back: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, value);
        // A summary survives the trip exactly.
        let summary = crate::stats::LatencySummary {
            count: 3,
            min_us: 1.5,
            mean_us: 2.0,
            p50_us: 2.0,
            p99_us: 2.5,
            p999_us: 2.5,
            p9999_us: 2.5,
            max_us: 2.5,
            deadline_misses: 1,
        };
        write_json(&path, &summary).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let back: crate::stats::LatencySummary = serde_json::from_str(&text).unwrap();
        assert_eq!(back, summary);
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
        let err = write_json(Path::new("/proc/version/x.json"), &value).unwrap_err();
        assert!(err.to_string().contains("/proc/version/x.json"), "{err}");
    }
}
