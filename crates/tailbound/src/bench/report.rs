//! Experiment output: aligned Markdown tables, JSON files, and figures formatted like the papers'.

use std::io;
use std::path::Path;

use serde::Serialize;

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("encoding JSON for {path}: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A table of strings rendered as GitHub Markdown with aligned columns.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: Vec<String>) -> Table {
        Table {
            headers,
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn to_markdown(&self) -> String {
        let cell = |s: &str| s.replace('|', "\\|");
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .map(|h| cell(h).chars().count())
            .collect();
        for row in &self.rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell(c).chars().count()).max(3);
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, &w)| {
                    let c = cell(c);
                    let pad = w.saturating_sub(c.chars().count());
                    format!("{c}{}", " ".repeat(pad))
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = line(&self.headers);
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// Writes `value` as pretty JSON to `path`, creating its parent directories.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), ReportError> {
    let name = path.display().to_string();
    let text = serde_json::to_string_pretty(value).map_err(|source| ReportError::Json {
        path: name.clone(),
        source,
    })?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| ReportError::Write {
            path: name.clone(),
            source,
        })?;
    }
    std::fs::write(path, text + "\n").map_err(|source| ReportError::Write { path: name, source })
}

/// Microseconds as the papers print them: whole numbers with thousands separators (`4,454`), one
/// decimal below 10 µs.
pub fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        return "-".to_string();
    }
    if us < 10.0 {
        return format!("{us:.1}");
    }
    let whole = us.round() as u64;
    let digits = whole.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
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
        let md = t.to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], "| case | max   |");
        assert_eq!(lines[1], "|------|-------|");
        assert_eq!(lines[2], "| NONE | 4,454 |");
        assert_eq!(lines[3], "| a\\|b |       |");
        assert!(lines
            .iter()
            .all(|l| l.chars().count() == lines[0].chars().count()));
    }

    #[test]
    fn microseconds_are_formatted_like_the_paper() {
        assert_eq!(fmt_us(4454.2), "4,454");
        assert_eq!(fmt_us(121_756.0), "121,756");
        assert_eq!(fmt_us(309.0), "309");
        assert_eq!(fmt_us(1_000_000.0), "1,000,000");
        assert_eq!(fmt_us(3.25), "3.2");
        assert_eq!(fmt_us(f64::NAN), "-");
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
        let err = write_json(Path::new("/proc/version/x.json"), &value).unwrap_err();
        assert!(err.to_string().contains("/proc/version/x.json"), "{err}");
    }
}
