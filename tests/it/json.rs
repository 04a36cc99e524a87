//! A tiny JSON checker and number lookups, so the tests need no serde.

/// Checks that `text` is exactly one well-formed JSON value (RFC 8259), surrounded
/// only by whitespace. The error names the byte offset.
pub fn validate(text: &str) -> Result<(), String> {
    let mut p = Parser { bytes: text.as_bytes(), pos: 0 };
    p.value(0)?;
    p.ws();
    if p.pos == p.bytes.len() { Ok(()) } else { Err(format!("trailing data at byte {}", p.pos)) }
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("expected {what} at byte {}", self.pos))
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn value(&mut self, depth: usize) -> Result<(), String> {
        if depth > 64 {
            return self.fail("shallower nesting");
        }
        self.ws();
        match self.peek() {
            Some(b'{') => self.seq(b'}', depth, true),
            Some(b'[') => self.seq(b']', depth, false),
            Some(b'"') => self.string(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => {
                for word in ["true", "false", "null"] {
                    if self.bytes[self.pos..].starts_with(word.as_bytes()) {
                        self.pos += word.len();
                        return Ok(());
                    }
                }
                self.fail("a value")
            }
        }
    }

    /// An object (`keyed`) or array, the opening bracket not yet consumed.
    fn seq(&mut self, close: u8, depth: usize, keyed: bool) -> Result<(), String> {
        self.pos += 1;
        self.ws();
        if self.eat(close) {
            return Ok(());
        }
        loop {
            if keyed {
                self.ws();
                self.string()?;
                self.ws();
                if !self.eat(b':') {
                    return self.fail("`:`");
                }
            }
            self.value(depth + 1)?;
            self.ws();
            if self.eat(close) {
                return Ok(());
            }
            if !self.eat(b',') {
                return self.fail("`,` or a closing bracket");
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        if !self.eat(b'"') {
            return self.fail("a string");
        }
        loop {
            match self.peek() {
                None => return self.fail("a closing quote"),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.pos += 1,
                        Some(b'u')
                            if self.bytes.len() >= self.pos + 5
                                && self.bytes[self.pos + 1..self.pos + 5].iter().all(u8::is_ascii_hexdigit) =>
                        {
                            self.pos += 5;
                        }
                        _ => return self.fail("an escape"),
                    }
                }
                Some(0..=0x1f) => return self.fail("no control character in a string"),
                Some(_) => self.pos += 1,
            }
        }
    }

    fn number(&mut self) -> Result<(), String> {
        self.eat(b'-');
        let digits = |p: &mut Self| {
            let from = p.pos;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.pos += 1;
            }
            p.pos - from
        };
        let int_start = self.pos;
        let n = digits(self);
        if n == 0 || (n > 1 && self.bytes[int_start] == b'0') {
            return self.fail("a number");
        }
        if self.eat(b'.') && digits(self) == 0 {
            return self.fail("digits after `.`");
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if digits(self) == 0 {
                return self.fail("exponent digits");
            }
        }
        Ok(())
    }
}

/// The number right after the first `"key":` that follows the first occurrence of
/// `anchor` (use `""` to search from the start). Panics with the JSON when absent.
#[track_caller]
pub fn number_after(json: &str, anchor: &str, key: &str) -> f64 {
    let from = json.find(anchor).unwrap_or_else(|| panic!("no {anchor:?} in:\n{json}"));
    let needle = format!("\"{key}\":");
    let at = json[from..].find(&needle).unwrap_or_else(|| panic!("no {needle} after {anchor:?} in:\n{json}"))
        + from
        + needle.len();
    let rest = json[at..].trim_start();
    let end =
        rest.find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))).unwrap_or(rest.len());
    rest[..end].parse().unwrap_or_else(|e| panic!("`{}` after {needle} is not a number: {e}", &rest[..end]))
}

/// The JSON with every line containing one of `keys` (as `"key":`) removed.
pub fn without_keys(json: &str, keys: &[&str]) -> String {
    json.lines()
        .filter(|line| !keys.iter().any(|k| line.contains(&format!("\"{k}\":"))))
        .map(|line| format!("{line}\n"))
        .collect()
}

#[test]
fn the_checker_accepts_json_and_rejects_near_misses() {
    for good in ["{}", "[]", " {\"a\": [1, -2.5, 3e+2, true, null, \"x\\n\\u00e9\"]}\n", "0", "\"\""] {
        assert_eq!(validate(good), Ok(()), "{good}");
    }
    for bad in ["", "{", "{\"a\" 1}", "[1,]", "{\"a\": 1,}", "01", "1.", "[1] x", "\"a\nb\"", "{a: 1}", "tru"] {
        assert!(validate(bad).is_err(), "accepted {bad:?}");
    }
    let j = "{\"q\": {\"mean\": 1.5}, \"jct\": {\"mean\": 2e3}}";
    assert_eq!(number_after(j, "", "mean"), 1.5);
    assert_eq!(number_after(j, "\"jct\"", "mean"), 2000.0);
    assert_eq!(without_keys("{\n\"a\": 1,\n\"b\": 2\n}\n", &["a"]), "{\n\"b\": 2\n}\n");
}
