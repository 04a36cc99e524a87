//! Text as every reader takes it: decoded and normalised the same way whatever the file's
//! origin (a UTF-8 byte-order mark dropped; CRLF and lone CR line ends read as LF; invalid
//! UTF-8 refused with its line and column), YAML parsed under one budget whose refusals are
//! said in trainyard's words, and a multi-document YAML file split at its `---` lines.

use std::borrow::Cow;

use serde::de::DeserializeOwned;

use crate::InputError;

/// The text with a leading byte-order mark dropped and every line ending (CRLF, or a CR alone
/// as old Mac files have) made a LF; borrowed when there was nothing to change.
pub fn normalize(text: &str) -> Cow<'_, str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if !text.contains('\r') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            if chars.peek() == Some(&'\n') {
                chars.next();
            }
            out.push('\n');
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Bytes read from `source_name` as normalised text ([`normalize`]); bytes that are not UTF-8
/// are refused, naming the line and column of the first bad one.
pub fn decode(bytes: Vec<u8>, source_name: &str) -> Result<String, InputError> {
    match String::from_utf8(bytes) {
        Ok(text) => Ok(normalize(&text).into_owned()),
        Err(e) => {
            let bytes = e.as_bytes();
            let at = e.utf8_error().valid_up_to();
            let before = &bytes[..at];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
            Err(InputError::Syntax {
                source_name: source_name.to_string(),
                message: format!(
                    "line {line}, column {column}: byte 0x{:02x} is not UTF-8 (save the file as UTF-8)",
                    bytes[at]
                ),
            })
        }
    }
}

/// The YAML options of every configuration reader: the library's budget, except that one
/// anchor may be used any number of times (`<<: *defaults` on every node of a long list is a
/// common style). Expansion stays bounded by the caps on aliases, events and the copies an
/// alias replays, which a billion-laughs file breaches.
pub fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    if let Some(budget) = options.budget.as_mut() {
        budget.enforce_alias_anchor_ratio = false;
    }
    options
}

/// A YAML document of `source_name` read as `T` under [`yaml_options`] (or `options`), errors
/// in trainyard's words with the line and column.
pub fn yaml_with<T: DeserializeOwned>(
    text: &str,
    source_name: &str,
    options: serde_saphyr::Options,
) -> Result<T, InputError> {
    let text = normalize(text);
    serde_saphyr::from_str_with_options(&text, options).map_err(|e| yaml_error(source_name, &e))
}

/// [`yaml_with`] under [`yaml_options`].
pub fn yaml<T: DeserializeOwned>(text: &str, source_name: &str) -> Result<T, InputError> {
    yaml_with(text, source_name, yaml_options())
}

/// A YAML parser's error as an [`InputError`]: a budget the file breached is said in words,
/// with where it was breached.
pub fn yaml_error(source_name: &str, error: &serde_saphyr::Error) -> InputError {
    // A budget breach comes wrapped: with the snippet it was found at, with the alias it was
    // reached through, or both.
    let mut inner = error;
    loop {
        match inner {
            serde_saphyr::Error::WithSnippet { error, .. } => inner = error,
            #[allow(deprecated)]
            serde_saphyr::Error::AliasError { error, .. } => inner = error,
            _ => break,
        }
    }
    let serde_saphyr::Error::Budget { breach, location } = inner else {
        return InputError::syntax(source_name, error);
    };
    // Where it was found: the outermost location (an alias's use), else the breach's own.
    let location = error.location().unwrap_or(*location);
    use serde_saphyr::budget::BudgetBreach as B;
    let what = match breach {
        B::AliasAnchorRatio { aliases, anchors } => {
            format!("{aliases} aliases of {anchors} anchors expand the document too far")
        }
        B::Aliases { aliases } => format!("more than {aliases} aliases (`*name`)"),
        B::Anchors { anchors } => format!("more than {anchors} anchors (`&name`)"),
        B::Depth { depth } => format!("nesting deeper than {depth} levels"),
        B::Events { events } => format!("more than {events} YAML items"),
        B::Nodes { nodes } => format!("more than {nodes} YAML values (once aliases are expanded)"),
        B::Documents { documents } => format!("more than {documents} documents"),
        other => format!("a YAML size limit breached ({other:?})"),
    };
    let at = match location.line() {
        0 => String::new(),
        line => format!("line {line}, column {}: ", location.column()),
    };
    InputError::syntax(source_name, format!("{at}{what}; the file is refused as too large to read safely"))
}

/// The documents of a multi-document YAML text (already normalised), each with the line it
/// starts at (its `---` line, or 1 for the first without one); a document is separated by a line that is `---` (possibly followed by a space
/// and content) and ends early at a `...` line. Documents holding only comments and blank
/// lines are left out.
pub fn yaml_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut ended = false;
    let mut push = |start: usize, body: &mut String| {
        if !body.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            docs.push((start, std::mem::take(body)));
        }
        body.clear();
    };
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let marker = line.trim_end();
        if marker == "---" || marker.starts_with("--- ") {
            push(start, &mut current);
            start = number;
            ended = false;
            // Content on the marker line (`--- {a: 1}`) belongs to the document.
            let rest = marker.strip_prefix("---").unwrap_or("").trim_start();
            if !rest.is_empty() {
                current.push_str(rest);
                current.push('\n');
            }
            continue;
        }
        if marker == "..." {
            ended = true;
            continue;
        }
        if ended {
            // Only comments may follow a document's end before the next `---`.
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    push(start, &mut current);
    docs
}

/// The objects of a multi-document YAML text, each with the line its document starts at (see
/// [`yaml_documents`]); a `List` stands for its items. Errors name `source_name` and the line
/// of the document.
pub fn yaml_objects(text: &str, source_name: &str) -> Result<Vec<(usize, serde_json::Value)>, InputError> {
    use serde_json::Value;
    let mut objects = Vec::new();
    for (line, body) in yaml_documents(&normalize(text)) {
        let value: Value = yaml(&body, &format!("{source_name} (document from line {line})"))?;
        match value.get("items").and_then(Value::as_array) {
            Some(items) if value.get("kind").and_then(Value::as_str) == Some("List") => {
                objects.extend(items.iter().map(|item| (line, item.clone())))
            }
            _ => objects.push((line, value)),
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_ending_reads_as_lf_and_the_bom_goes() {
        assert_eq!(normalize("\u{feff}a\r\nb\rc\n"), "a\nb\nc\n");
        assert!(matches!(normalize("a\nb"), Cow::Borrowed(_)));
    }

    #[test]
    fn invalid_utf8_is_refused_with_its_line_and_column() {
        let e = decode(b"ok: 1\nname: ab\xffc\n".to_vec(), "x.yaml").unwrap_err().to_string();
        assert!(e.contains("x.yaml") && e.contains("line 2, column 9") && e.contains("0xff"), "{e}");
    }

    #[test]
    fn documents_split_at_marker_lines_only() {
        let docs = yaml_documents("# head\n---\na: 1\n---\n# only a comment\n--- {b: 2}\nc: ---x\n...\n# tail\n");
        assert_eq!(docs, vec![(2, "a: 1\n".to_string()), (6, "{b: 2}\nc: ---x\n".to_string())]);
    }

    #[test]
    fn one_anchor_may_be_used_a_hundred_times() {
        let mut text = String::from("defaults: &d {gpus: 8}\nnodes:\n");
        for _ in 0..100 {
            text.push_str("  - <<: *d\n");
        }
        let value: serde_json::Value = yaml(&text, "c.yaml").expect("ordinary anchor reuse");
        assert_eq!(value["nodes"].as_array().map(Vec::len), Some(100));
    }

    #[test]
    fn a_billion_laughs_is_refused_in_words() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        let mut prev = 'a';
        for name in 'b'..='k' {
            text.push_str(&format!("{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
            prev = name;
        }
        let e = yaml::<serde_json::Value>(&text, "bomb.yaml").unwrap_err().to_string();
        assert!(e.starts_with("bomb.yaml: ") && e.contains("too large to read safely"), "{e}");
        assert!(!e.contains("budget breached"), "{e}");
    }
}
