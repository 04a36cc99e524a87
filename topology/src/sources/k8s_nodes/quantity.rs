//! Kubernetes resource quantities (`500m`, `1.5Gi`, `12E6`) held exactly and converted with rounding down.
//!
//! A quantity is a decimal number with an optional suffix: a decimal SI prefix (`n u m k M G T P E`, or
//! none), a binary one (`Ki` to `Ei`) or a decimal exponent (`e3`, `E-2`). `1E` is therefore one exa,
//! while `1E6` is a million. The value is kept as `significand × 10^exp10 × 1024^pow1024` so that
//! `0.1Gi` or `1.5` never pass through a float: floats would turn `0.3` cores into 299 millicores.

/// A quantity that cannot be used, with the text it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the quantity grammar.
    #[error("{text:?} is not a quantity ({reason})")]
    Syntax {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Capacities cannot be negative.
    #[error("{text:?} is negative")]
    Negative {
        /// The text as given.
        text: String,
    },
    /// The value does not fit in 64 bits in the unit asked for.
    #[error("{text:?} is too large")]
    TooLarge {
        /// The text as given.
        text: String,
    },
    /// A whole number was needed (a count of devices) and the value has a fraction.
    #[error("{text:?} is not a whole number")]
    NotWhole {
        /// The text as given.
        text: String,
    },
}

/// A non-negative quantity, exactly as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    /// Digits without trailing zeros (those moved into `exp10`); zero for the value zero.
    significand: u128,
    exp10: i64,
    pow1024: u32,
}

/// More significant digits than a `u128` holds; no real capacity comes near this.
const MAX_DIGITS: usize = 38;

/// Parses a quantity such as `16`, `500m`, `0.5`, `1.5Gi`, `1e3` or `128974848Ki`.
pub fn parse_quantity(text: &str) -> Result<Quantity, QuantityError> {
    let syntax = |reason: &str| QuantityError::Syntax { text: text.to_string(), reason: reason.to_string() };
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
        None => return Err(syntax("empty")),
    };
    let number_len = unsigned.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return Err(syntax("more than one decimal point"));
    }
    if whole.is_empty() && fraction.is_empty() {
        return Err(syntax("no digits"));
    }
    let digits = whole.bytes().chain(fraction.bytes()).skip_while(|&b| b == b'0');
    let mut significand: u128 = 0;
    for (count, digit) in digits.enumerate() {
        if count >= MAX_DIGITS {
            return Err(syntax("too many digits"));
        }
        significand = significand * 10 + u128::from(digit - b'0');
    }
    let (suffix_exp10, pow1024) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        _ => match suffix.strip_prefix(['e', 'E']) {
            Some(exponent) => (parse_exponent(exponent).ok_or_else(|| syntax("bad exponent"))?, 0),
            None => return Err(syntax(&format!("unknown suffix {suffix:?}"))),
        },
    };
    if negative && significand != 0 {
        return Err(QuantityError::Negative { text: text.to_string() });
    }
    if significand == 0 {
        return Ok(Quantity { significand: 0, exp10: 0, pow1024: 0 });
    }
    let mut exp10 = suffix_exp10 - fraction.len() as i64;
    while significand.is_multiple_of(10) {
        significand /= 10;
        exp10 += 1;
    }
    Ok(Quantity { significand, exp10, pow1024 })
}

/// A signed decimal integer; exponents past a few hundred already overflow every unit, so the bound
/// only keeps the arithmetic below from overflowing.
fn parse_exponent(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i64>().ok().filter(|e| e.abs() <= 1_000_000)
}

impl Quantity {
    /// The value in thousandths (millicores for `cpu`), rounded down; `None` when it exceeds `u64`.
    pub fn millis(&self) -> Option<u64> {
        self.scaled(3, 0).map(|(value, _)| value)
    }

    /// The value divided by 2^20 (MiB for `memory`), rounded down; `None` when it exceeds `u64`.
    pub fn mebibytes(&self) -> Option<u64> {
        self.scaled(0, -20).map(|(value, _)| value)
    }

    /// The value as an integer (a device count), or `None` when it has a fraction or exceeds `u64`.
    pub fn whole(&self) -> Option<u64> {
        self.scaled(0, 0).filter(|&(_, exact)| exact).map(|(value, _)| value)
    }

    /// `floor(self × 10^pow10 × 2^pow2)` and whether nothing was rounded away.
    fn scaled(&self, pow10: i64, pow2: i64) -> Option<(u64, bool)> {
        if self.significand == 0 {
            return Some((0, true));
        }
        // 10^a × 2^b = 5^a × 2^(a+b): every factor multiplies in before anything divides out, so the
        // division below rounds exactly once.
        let fives = self.exp10 + pow10;
        let twos = fives + pow2 + 10 * i64::from(self.pow1024);
        let mut x = self.significand;
        if fives > 0 {
            x = x.checked_mul(5u128.checked_pow(u32::try_from(fives).ok()?)?)?;
        }
        if twos > 0 {
            let shift = u32::try_from(twos).ok().filter(|&s| s < x.leading_zeros())?;
            x <<= shift;
        }
        let mut exact = true;
        if fives < 0 {
            match u32::try_from(-fives).ok().and_then(|e| 5u128.checked_pow(e)) {
                Some(divisor) => {
                    exact &= x.is_multiple_of(divisor);
                    x /= divisor;
                }
                // The divisor exceeds every u128, so it exceeds x too.
                None => (exact, x) = (false, 0),
            }
        }
        if twos < 0 {
            match u32::try_from(-twos).ok().filter(|&s| s < 128) {
                Some(shift) => {
                    exact &= x.trailing_zeros() >= shift;
                    x >>= shift;
                }
                None => (exact, x) = (false, 0),
            }
        }
        Some((u64::try_from(x).ok()?, exact))
    }
}

impl Quantity {
    /// Orders two quantities by value (`1Ki` equals `1024`), exactly: the representations are
    /// brought to a common power of 2 and 5 in a small big-number (values far apart are told
    /// apart by their logarithms first, so absurd exponents never build huge numbers).
    pub fn compare(&self, other: &Quantity) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self.significand == 0, other.significand == 0) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let (a, b) = (self.log2(), other.log2());
        if (a - b).abs() > 2.0 {
            return a.partial_cmp(&b).unwrap_or(Ordering::Equal);
        }
        // value = s × 5^exp10 × 2^(exp10 + 10 × pow1024); divide both by the smaller powers.
        let twos = |q: &Quantity| q.exp10 + 10 * i64::from(q.pow1024);
        let (fives, shift) = (self.exp10.min(other.exp10), twos(self).min(twos(other)));
        let big = |q: &Quantity| Digits::of(q.significand, q.exp10 - fives, twos(q) - shift);
        match (big(self), big(other)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        }
    }

    fn log2(&self) -> f64 {
        (self.significand as f64).log2()
            + self.exp10 as f64 * std::f64::consts::LOG2_10
            + 10.0 * f64::from(self.pow1024)
    }
}

/// A non-negative big number in base 2^32, least significant limb first, without leading zeros.
#[derive(PartialEq, Eq)]
struct Digits(Vec<u32>);

impl Digits {
    /// `s × 5^fives × 2^twos`; `None` past 4096 of either factor (never for values within a factor
    /// of four of each other, which is when this is called).
    fn of(s: u128, fives: i64, twos: i64) -> Option<Digits> {
        if !(0..=4096).contains(&fives) || !(0..=4096).contains(&twos) {
            return None;
        }
        let mut digits = Digits(vec![s as u32, (s >> 32) as u32, (s >> 64) as u32, (s >> 96) as u32]);
        for _ in 0..fives {
            digits.mul_small(5);
        }
        for _ in 0..twos {
            digits.mul_small(2);
        }
        while digits.0.last() == Some(&0) {
            digits.0.pop();
        }
        Some(digits)
    }

    fn mul_small(&mut self, factor: u64) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let product = u64::from(*limb) * factor + carry;
            *limb = product as u32;
            carry = product >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }
}

impl PartialOrd for Digits {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Digits {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

/// Parses a quantity and returns it in thousandths (`cpu` in millicores), rounded down.
pub fn parse_millis(text: &str) -> Result<u64, QuantityError> {
    parse_quantity(text)?.millis().ok_or_else(|| QuantityError::TooLarge { text: text.to_string() })
}

/// Parses a quantity of bytes and returns it in MiB, rounded down.
pub fn parse_mebibytes(text: &str) -> Result<u64, QuantityError> {
    parse_quantity(text)?.mebibytes().ok_or_else(|| QuantityError::TooLarge { text: text.to_string() })
}

/// Parses a quantity that must be a whole number (an extended resource such as `nvidia.com/gpu`).
pub fn parse_whole(text: &str) -> Result<u64, QuantityError> {
    let quantity = parse_quantity(text)?;
    match quantity.whole() {
        Some(value) => Ok(value),
        None if quantity.scaled(0, 0).is_some() => Err(QuantityError::NotWhole { text: text.to_string() }),
        None => Err(QuantityError::TooLarge { text: text.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn cpu_in_millicores() {
        for (text, milli) in [
            ("0", 0),
            ("1", 1000),
            ("500m", 500),
            ("0.5", 500),
            (".5", 500),
            ("5.", 5000),
            ("+2", 2000),
            ("1e3", 1_000_000),
            ("12E6", 12_000_000_000),
            ("1E-3", 1),
            ("2.5k", 2_500_000),
            ("100n", 0),
            ("1500000u", 1500),
            ("1999999n", 1),
            ("0.0005", 0),
            ("95690m", 95_690),
            ("000123.4500", 123_450),
            ("-0", 0),
        ] {
            assert_eq!(parse_millis(text), Ok(milli), "{text}");
        }
    }

    #[test]
    fn memory_in_mebibytes_rounded_down() {
        for (text, mib) in [
            ("1.5Gi", 1536),
            ("1Mi", 1),
            ("1048575", 0),
            ("1048576", 1),
            ("1048577", 1),
            ("1024Ki", 1),
            ("1023Ki", 0),
            ("2Ti", 2 * 1024 * 1024),
            ("0.1Gi", 102),
            ("1G", 953),
            ("1E", 953_674_316_406),
            ("1Ei", 1 << 40),
            ("1e9", 953),
            ("2097152e0", 2),
            ("1587284628Ki", 1_550_082),
        ] {
            assert_eq!(parse_mebibytes(text), Ok(mib), "{text}");
        }
    }

    #[test]
    fn whole_numbers_for_devices() {
        assert_eq!(parse_whole("8"), Ok(8));
        assert_eq!(parse_whole("4000m"), Ok(4));
        assert_eq!(parse_whole("1k"), Ok(1000));
        assert_eq!(parse_whole("1.5"), Err(QuantityError::NotWhole { text: "1.5".into() }));
        assert_eq!(parse_whole("1n"), Err(QuantityError::NotWhole { text: "1n".into() }));
        assert_eq!(parse_whole("1e-400"), Err(QuantityError::NotWhole { text: "1e-400".into() }));
        assert_eq!(parse_whole("20E"), Err(QuantityError::TooLarge { text: "20E".into() }));
    }

    #[test]
    fn malformed_text_is_rejected_with_a_reason() {
        for (text, reason) in [
            ("", "empty"),
            ("Gi", "no digits"),
            (".", "no digits"),
            ("-", "no digits"),
            ("1.2.3", "more than one decimal point"),
            ("12Qi", "unknown suffix \"Qi\""),
            ("1K", "unknown suffix \"K\""),
            ("1ki", "unknown suffix \"ki\""),
            ("1 Gi", "unknown suffix \" Gi\""),
            ("1e", "bad exponent"),
            ("1e+", "bad exponent"),
            ("1e3.5", "bad exponent"),
            ("1E6Gi", "bad exponent"),
            ("1e99999999999", "bad exponent"),
            ("123456789012345678901234567890123456789", "too many digits"),
        ] {
            let err = parse_quantity(text).unwrap_err();
            assert_eq!(err, QuantityError::Syntax { text: text.into(), reason: reason.into() }, "{text}");
        }
        assert_eq!(parse_quantity("-1m"), Err(QuantityError::Negative { text: "-1m".into() }));
        assert_eq!(
            parse_quantity("12Qi").unwrap_err().to_string(),
            "\"12Qi\" is not a quantity (unknown suffix \"Qi\")"
        );
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        assert_eq!(
            parse_millis("18446744073709551615"),
            Err(QuantityError::TooLarge { text: "18446744073709551615".into() })
        );
        assert_eq!(parse_millis("18446744073709551615m"), Ok(u64::MAX));
        assert_eq!(parse_mebibytes("16777216Ei"), Err(QuantityError::TooLarge { text: "16777216Ei".into() }));
        assert_eq!(parse_mebibytes("16777215Ei"), Ok(16_777_215 << 40));
        assert!(parse_mebibytes("1e30").is_err());
        assert!(parse_millis("1e1000").is_err());
        // Tiny values round down to zero instead of failing.
        assert_eq!(parse_millis("1e-1000"), Ok(0));
        assert_eq!(parse_mebibytes("0.000000000000000000000000000000001Ki"), Ok(0));
    }

    #[test]
    fn leading_and_trailing_zeros_do_not_count_against_the_digit_limit() {
        let text = format!("{}5{}m", "0".repeat(60), "0".repeat(10));
        assert_eq!(parse_millis(&text), Ok(50_000_000_000));
        let text = format!("0.{}1E60", "0".repeat(50));
        assert_eq!(parse_millis(&text), Ok(1_000_000_000_000));
    }

    #[test]
    fn quantities_compare_by_value() {
        use std::cmp::Ordering::*;
        let q = |t: &str| parse_quantity(t).unwrap();
        for (a, b, order) in [
            ("1Ki", "1024", Equal),
            ("81559Mi", "80Gi", Less),
            ("80Gi", "85899345920", Equal),
            ("0.5", "500m", Equal),
            ("1G", "1Gi", Less),
            ("1e3", "1k", Equal),
            ("0", "1n", Less),
            ("1E", "1Ei", Less),
            ("1e-1000", "0", Greater),
            ("12", "11.999999999999999999999999", Greater),
        ] {
            assert_eq!(q(a).compare(&q(b)), order, "{a} vs {b}");
            assert_eq!(q(b).compare(&q(a)), order.reverse(), "{b} vs {a}");
        }
    }

    proptest! {
        #[test]
        fn binary_and_milli_suffixes_round_trip(n in any::<u64>(), g in 0..=(u64::MAX >> 10)) {
            prop_assert_eq!(parse_quantity(&format!("{n}Mi")).unwrap().mebibytes(), Some(n));
            prop_assert_eq!(parse_quantity(&format!("{n}m")).unwrap().millis(), Some(n));
            prop_assert_eq!(parse_quantity(&format!("{g}Gi")).unwrap().mebibytes(), Some(g * 1024));
            prop_assert_eq!(parse_quantity(&format!("{n}")).unwrap().whole(), Some(n));
        }

        #[test]
        fn decimal_fractions_are_exact(cores in 0..1_000_000u64, milli in 0..1000u64, pad in 0..5usize) {
            let text = format!("{cores}.{milli:03}{}", "0".repeat(pad));
            prop_assert_eq!(parse_millis(&text), Ok(cores * 1000 + milli));
            // The same value with its point moved into an exponent.
            let text = format!("{}{milli:03}e-3", cores);
            prop_assert_eq!(parse_millis(&text), Ok(cores * 1000 + milli));
        }

        #[test]
        fn compare_agrees_with_exact_integers(a in any::<u64>(), b in any::<u64>(), m in 0..4usize) {
            // a in milli-units, Ki, M and plain units against b in plain units: exact in u128.
            let (suffix, scale_num, scale_den): (&str, u128, u128) = [("m", 1, 1000), ("Ki", 1024, 1), ("M", 1_000_000, 1), ("", 1, 1)][m];
            let left = parse_quantity(&format!("{a}{suffix}")).unwrap();
            let right = parse_quantity(&b.to_string()).unwrap();
            let expected = (u128::from(a) * scale_num).cmp(&(u128::from(b) * scale_den));
            prop_assert_eq!(left.compare(&right), expected);
            prop_assert_eq!(right.compare(&left), expected.reverse());
            let same = parse_quantity(&(u128::from(a) * 1024).to_string()).unwrap();
            let kibi = parse_quantity(&format!("{a}Ki")).unwrap();
            prop_assert!(kibi.compare(&same).is_eq());
        }

        #[test]
        fn bytes_round_down_to_whole_mebibytes(bytes in any::<u64>()) {
            prop_assert_eq!(parse_mebibytes(&bytes.to_string()), Ok(bytes >> 20));
            prop_assert_eq!(parse_mebibytes(&format!("{bytes}e0")), Ok(bytes >> 20));
        }
    }
}
