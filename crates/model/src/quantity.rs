//! Quantities of a resource: whole units (GPUs, CPUs, bytes), written as `8`, `512Gi`, `3G`.
//!
//! baton counts whole units only. A decimal is accepted when it names a whole number of units
//! (`1.5Gi` is 1610612736 bytes); `0.5` or `500m` are refused, because a GPU scheduler that
//! hands out half a CPU would have to round somewhere, and an operator should see where.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "bad quantity {0:?}: expected a whole number, optionally with a suffix (k, M, G, T, P, Ki, Mi, Gi, Ti, Pi)"
    )]
    Syntax(String),
    #[error("bad quantity {0:?}: quantities may not be negative")]
    Negative(String),
    #[error("bad quantity {0:?}: it is not a whole number of units (fractions such as 0.5 or 500m are not supported)")]
    Fraction(String),
    #[error("bad quantity {0:?}: it is too large")]
    TooLarge(String),
}

const SUFFIXES: &[(&str, u128)] = &[
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("Pi", 1 << 50),
    ("Ei", 1 << 60),
    ("k", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("P", 1_000_000_000_000_000),
    ("E", 1_000_000_000_000_000_000),
    ("m", 0), // milli: always a fraction unless zero; refused with a clear message below
];

/// Parses a quantity. The largest accepted value is 2^62, far beyond any real node.
pub fn parse_quantity(text: &str) -> Result<u64, QuantityError> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(QuantityError::Negative(text.to_string()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let (number, multiplier) = split_suffix(s);
    if multiplier == 0 {
        return Err(QuantityError::Fraction(text.to_string()));
    }
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    let digits_ok = |d: &str| d.bytes().all(|c| c.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty()) || !digits_ok(int_part) || !digits_ok(frac_part) {
        return Err(QuantityError::Syntax(text.to_string()));
    }
    if int_part.len() + frac_part.len() > 30 {
        return Err(QuantityError::TooLarge(text.to_string()));
    }
    let mantissa: u128 = format!("{int_part}{frac_part}").parse().unwrap_or(0);
    let scale = 10u128.pow(frac_part.len() as u32);
    let scaled = mantissa.checked_mul(multiplier).ok_or_else(|| QuantityError::TooLarge(text.to_string()))?;
    if scaled % scale != 0 {
        return Err(QuantityError::Fraction(text.to_string()));
    }
    let value = scaled / scale;
    if value > (1u128 << 62) {
        return Err(QuantityError::TooLarge(text.to_string()));
    }
    Ok(value as u64)
}

fn split_suffix(s: &str) -> (&str, u128) {
    for (suffix, mult) in SUFFIXES {
        if let Some(n) = s.strip_suffix(suffix) {
            return (n, *mult);
        }
    }
    (s, 1)
}

/// How a resource's quantities read best: bytes get binary suffixes, the rest plain numbers.
pub fn is_byte_resource(resource: &str) -> bool {
    resource.contains("memory") || resource.contains("storage")
}

/// Formats a quantity for people: `16Gi` for byte resources that divide evenly, else digits.
pub struct Human<'a> {
    pub resource: &'a str,
    pub value: u64,
}

impl fmt::Display for Human<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if is_byte_resource(self.resource) && self.value > 0 {
            for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
                if self.value % (1u64 << shift) == 0 {
                    return write!(f, "{}{}", self.value >> shift, suffix);
                }
            }
        }
        write!(f, "{}", self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed() {
        assert_eq!(parse_quantity("8"), Ok(8));
        assert_eq!(parse_quantity("512Gi"), Ok(512 << 30));
        assert_eq!(parse_quantity("3G"), Ok(3_000_000_000));
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity("2.0"), Ok(2));
        assert_eq!(parse_quantity("0"), Ok(0));
    }

    #[test]
    fn refuses_bad_input_with_the_reason() {
        assert!(matches!(parse_quantity("4x"), Err(QuantityError::Syntax(_))));
        assert!(matches!(parse_quantity(""), Err(QuantityError::Syntax(_))));
        assert!(matches!(parse_quantity("."), Err(QuantityError::Syntax(_))));
        assert!(matches!(parse_quantity("-1"), Err(QuantityError::Negative(_))));
        assert!(matches!(parse_quantity("0.5"), Err(QuantityError::Fraction(_))));
        assert!(matches!(parse_quantity("500m"), Err(QuantityError::Fraction(_))));
        assert!(matches!(parse_quantity("99999999999Ei"), Err(QuantityError::TooLarge(_))));
        let msg = parse_quantity("4x").unwrap_err().to_string();
        assert!(msg.contains("\"4x\""), "{msg}");
    }

    #[test]
    fn formats_bytes_with_binary_suffixes() {
        let h = |r, v| Human { resource: r, value: v }.to_string();
        assert_eq!(h("memory", 16 << 30), "16Gi");
        assert_eq!(h("memory", 3_000_000_000), "3000000000");
        assert_eq!(h("cpu", 1024), "1024");
    }
}
