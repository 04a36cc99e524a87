//! The `-o table|wide|json|yaml` formats every command prints in: `table` and `wide` for people
//! (kubectl's layout: upper-case headers, columns padded to their widest cell), `json` and
//! `yaml` for scripts.

use clap::ValueEnum;
use serde::Serialize;

/// An output format, as `-o` takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns.
    #[default]
    Table,
    /// More columns.
    Wide,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Columns padded to their widest cell, separated by three spaces, trailing spaces trimmed.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            text.push_str(cell);
            if i + 1 < cells.len() {
                text.push_str(&" ".repeat(widths[i] - cell.chars().count() + 3));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.iter().map(|h| h.to_string()).collect(), &mut out);
    for row in rows {
        line(row.clone(), &mut out);
    }
    out
}

/// `value` as JSON (pretty, with a final newline) or YAML.
pub fn structured<T: Serialize>(value: &T, output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Yaml => serde_saphyr::to_string(value)?,
        _ => serde_json::to_string_pretty(value)? + "\n",
    })
}
