//! Quantities of a resource in the Kubernetes notation: `8`, `500m`, `2.5`, `512Gi`, `1.5Gi`,
//! `3G`, `1e3`.
//!
//! Every quantity is held exactly as a whole number of the resource's smallest unit: CPUs in
//! thousandths (`500m` is 500, `2` is 2000), memory and storage in bytes, GPUs and any other
//! resource in whole units. A quantity that is not a whole number of that unit (`0.0001`
//! CPUs, half a GPU, half a byte) is refused, naming the resource and the value: a GPU
//! scheduler that rounds would hand out something nobody asked for.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "bad quantity {0:?}: expected a number such as 8, 2.5 or 1e3, optionally with a suffix (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei)"
    )]
    Syntax(String),
    #[error("bad quantity {0:?}: quantities may not be negative")]
    Negative(String),
    #[error(
        "bad quantity {text:?} for {resource}: {resource} is counted in {unit}, and this is not a whole number of them"
    )]
    Fraction { text: String, resource: String, unit: &'static str },
    #[error(
        "bad quantity {0:?} for gpu: a request of 1 GPU or more is whole GPUs; a fraction of one shared GPU is more than 0 and less than 1 (0.5 or 500m)"
    )]
    WholeGpus(String),
    #[error("bad quantity {0:?}: it is too large or has too many digits")]
    TooLarge(String),
}

/// The largest quantity held, in the resource's smallest unit: far beyond any real node.
pub const MAX_QUANTITY: u64 = 1 << 62;
/// Digits in a quantity's number, and the size of its exponent: bounds on the arithmetic.
const MAX_DIGITS: usize = 30;
const MAX_EXPONENT: i32 = 40;

/// The resource whose smallest unit is a thousandth (Kubernetes' millicores).
pub const CPU: &str = "cpu";

/// How many of its smallest units make one of the resource.
pub fn units_per_one(resource: &str) -> u64 {
    if resource == CPU { 1000 } else { 1 }
}

fn unit_name(resource: &str) -> &'static str {
    if resource == CPU {
        "thousandths (1m)"
    } else if is_byte_resource(resource) {
        "whole bytes"
    } else {
        "whole units"
    }
}

/// A suffix's factor as 2^binary * 10^decimal.
const SUFFIXES: &[(&str, u32, i32)] = &[
    ("Ki", 10, 0),
    ("Mi", 20, 0),
    ("Gi", 30, 0),
    ("Ti", 40, 0),
    ("Pi", 50, 0),
    ("Ei", 60, 0),
    ("n", 0, -9),
    ("u", 0, -6),
    ("m", 0, -3),
    ("k", 0, 3),
    ("M", 0, 6),
    ("G", 0, 9),
    ("T", 0, 12),
    ("P", 0, 15),
    ("E", 0, 18),
];

/// Parses a quantity of `resource` into its smallest units (see the module doc).
pub fn parse_quantity(resource: &str, text: &str) -> Result<u64, QuantityError> {
    parse_scaled(resource, text, units_per_one(resource), unit_name(resource))
}

/// Parses a request of GPUs into thousandths of a GPU (decisions.md section 11): more than
/// 0 and less than 1 (`0.5`, `500m`) shares one GPU; 1 or more must be whole GPUs.
pub fn parse_gpu_request(text: &str) -> Result<u64, QuantityError> {
    let milli = parse_scaled(crate::resources::GPU, text, 1000, "thousandths of a GPU")?;
    if milli >= 1000 && milli % 1000 != 0 {
        return Err(QuantityError::WholeGpus(text.to_string()));
    }
    Ok(milli)
}

/// Parses an amount in thousandths of a unit (`1.5` is 1500, `500m` is 500), for amounts
/// that may be fractions, such as GPUs held in all (`0.5` of one shared GPU, three times).
pub fn parse_thousandths(resource: &str, text: &str) -> Result<u64, QuantityError> {
    parse_scaled(resource, text, 1000, "thousandths")
}

fn parse_scaled(resource: &str, text: &str, per_one: u64, unit: &'static str) -> Result<u64, QuantityError> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(QuantityError::Negative(text.to_string()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let syntax = || QuantityError::Syntax(text.to_string());
    let (number, binary, decimal) = split_suffix(s).ok_or_else(syntax)?;
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |d: &str| d.bytes().all(|c| c.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty()) || !digits_ok(int_part) || !digits_ok(frac_part) {
        return Err(syntax());
    }
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    if digits.len() > MAX_DIGITS {
        return Err(QuantityError::TooLarge(text.to_string()));
    }
    let mantissa: u128 = digits.parse().map_err(|_| syntax())?;
    // value = mantissa * 2^binary * 10^(decimal - frac digits) * units_per_one, exactly.
    let exp10 = decimal - frac_part.len() as i32;
    let too_large = || QuantityError::TooLarge(text.to_string());
    let mut num = mantissa.checked_mul(u128::from(per_one)).ok_or_else(too_large)?;
    num = num.checked_mul(1u128 << binary).ok_or_else(too_large)?;
    if exp10 >= 0 {
        let factor = 10u128.checked_pow(exp10 as u32).ok_or_else(too_large)?;
        num = num.checked_mul(factor).ok_or_else(too_large)?;
    } else {
        let den = 10u128.checked_pow(exp10.unsigned_abs());
        match den {
            Some(d) if num % d == 0 => num /= d,
            // A denominator too large to hold is larger than any numerator: a fraction.
            _ => {
                return Err(QuantityError::Fraction { text: text.to_string(), resource: resource.to_string(), unit });
            }
        }
    }
    if num > u128::from(MAX_QUANTITY) {
        return Err(too_large());
    }
    Ok(num as u64)
}

/// The number and its factor (binary exponent, decimal exponent), or `None` for a bad
/// exponent. `1E3` is an exponent; a lone `E` is the exa suffix, as in Kubernetes.
fn split_suffix(s: &str) -> Option<(&str, u32, i32)> {
    if let Some(pos) = s.find(['e', 'E'])
        && pos + 1 < s.len()
    {
        let exp = &s[pos + 1..];
        let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
        if !unsigned.is_empty() && unsigned.len() <= 3 && unsigned.bytes().all(|c| c.is_ascii_digit()) {
            let e: i32 = exp.parse().ok()?;
            return (e.abs() <= MAX_EXPONENT).then_some((&s[..pos], 0, e));
        }
        if !s.ends_with("Ei") {
            return None;
        }
    }
    for &(suffix, binary, decimal) in SUFFIXES {
        if let Some(n) = s.strip_suffix(suffix) {
            return Some((n, binary, decimal));
        }
    }
    Some((s, 0, 0))
}

/// How a resource's quantities read best: bytes get suffixes, the rest plain numbers.
pub fn is_byte_resource(resource: &str) -> bool {
    resource.contains("memory") || resource.contains("storage")
}

/// Formats a quantity for people, in the notation `parse_quantity` reads back exactly:
/// CPUs as `500m` or `2.5`, bytes with the shortest exact suffix (`16Gi`, `1.5Gi`, `3G`),
/// the rest as plain numbers.
pub struct Human<'a> {
    pub resource: &'a str,
    pub value: u64,
}

impl fmt::Display for Human<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.value;
        if self.resource == CPU {
            return match (v / 1000, v % 1000) {
                (whole, 0) => write!(f, "{whole}"),
                (0, milli) => write!(f, "{milli}m"),
                (whole, milli) => write!(f, "{whole}.{}", format!("{milli:03}").trim_end_matches('0')),
            };
        }
        if is_byte_resource(self.resource) && v > 0 {
            return f.write_str(&shortest_bytes(v));
        }
        write!(f, "{v}")
    }
}

/// An amount counted in thousandths, as a decimal: `2`, `0.5`, `1.25`.
pub fn thousandths(v: u64) -> String {
    match (v / 1000, v % 1000) {
        (whole, 0) => whole.to_string(),
        (whole, milli) => format!("{whole}.{}", format!("{milli:03}").trim_end_matches('0')),
    }
}

/// Fraction digits a suffixed byte amount may show (`1.5Gi`, `1.25Ti`); beyond that the
/// next smaller suffix reads better.
const MAX_SHOWN_FRACTION_DIGITS: usize = 3;

/// The shortest exact way to write `v` bytes: plain, or with a suffix and at most a few
/// fraction digits. Ties go to binary suffixes, the usual unit of memory.
fn shortest_bytes(v: u64) -> String {
    let mut best = v.to_string();
    let binary = (1..=6u32).rev().map(|i| (["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i as usize - 1], 1u128 << (10 * i)));
    let decimal = (1..=6u32).rev().map(|i| (["k", "M", "G", "T", "P", "E"][i as usize - 1], 10u128.pow(3 * i)));
    for (suffix, factor) in binary.chain(decimal) {
        if let Some(s) = exact_decimal(u128::from(v), factor)
            && s.len() + suffix.len() < best.len()
        {
            best = format!("{s}{suffix}");
        }
    }
    best
}

/// `v / factor` written exactly with at most `MAX_SHOWN_FRACTION_DIGITS` fraction digits, if
/// it is at least 1 and can be.
fn exact_decimal(v: u128, factor: u128) -> Option<String> {
    let (whole, mut rest) = (v / factor, v % factor);
    if whole == 0 {
        return None;
    }
    let mut frac = String::new();
    while rest != 0 {
        if frac.len() == MAX_SHOWN_FRACTION_DIGITS {
            return None;
        }
        rest *= 10;
        frac.push(char::from(b'0' + (rest / factor) as u8));
        rest %= factor;
    }
    Some(if frac.is_empty() { whole.to_string() } else { format!("{whole}.{frac}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(resource: &str, text: &str) -> Result<u64, QuantityError> {
        parse_quantity(resource, text)
    }

    #[test]
    fn parses_plain_and_suffixed() {
        assert_eq!(q("gpu", "8"), Ok(8));
        assert_eq!(q("memory", "512Gi"), Ok(512 << 30));
        assert_eq!(q("memory", "3G"), Ok(3_000_000_000));
        assert_eq!(q("memory", "1G"), Ok(1_000_000_000));
        assert_eq!(q("memory", "1.5Gi"), Ok(3 << 29));
        assert_eq!(q("gpu", "2.0"), Ok(2));
        assert_eq!(q("gpu", "0"), Ok(0));
        assert_eq!(q("gpu", "+4"), Ok(4));
    }

    #[test]
    fn cpus_are_held_in_thousandths() {
        assert_eq!(q("cpu", "500m"), Ok(500));
        assert_eq!(q("cpu", "2.5"), Ok(2500));
        assert_eq!(q("cpu", "2"), Ok(2000));
        assert_eq!(q("cpu", ".5"), Ok(500));
        assert_eq!(q("cpu", "1."), Ok(1000));
        assert_eq!(q("cpu", "0.001"), Ok(1));
        assert_eq!(q("cpu", "1e-3"), Ok(1));
        assert_eq!(q("cpu", "1k"), Ok(1_000_000));
    }

    #[test]
    fn exponents_and_the_exa_suffix() {
        assert_eq!(q("gpu", "1e3"), Ok(1000));
        assert_eq!(q("gpu", "1E3"), Ok(1000));
        assert_eq!(q("gpu", "1.5e1"), Ok(15));
        assert_eq!(q("gpu", "1e+2"), Ok(100));
        assert_eq!(q("memory", "1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(q("memory", "2Ei"), Ok(2 << 60));
        assert_eq!(q("memory", "12e-1"), Err(frac("12e-1", "memory", "whole bytes")));
    }

    fn frac(text: &str, resource: &str, unit: &'static str) -> QuantityError {
        QuantityError::Fraction { text: text.into(), resource: resource.into(), unit }
    }

    #[test]
    fn refuses_what_has_no_exact_value_naming_resource_and_value() {
        assert_eq!(q("gpu", "0.5"), Err(frac("0.5", "gpu", "whole units")));
        assert_eq!(q("gpu", "500m"), Err(frac("500m", "gpu", "whole units")));
        assert_eq!(q("cpu", "0.0001"), Err(frac("0.0001", "cpu", "thousandths (1m)")));
        assert_eq!(q("cpu", "1n"), Err(frac("1n", "cpu", "thousandths (1m)")));
        assert_eq!(q("cpu", "1e-40"), Err(frac("1e-40", "cpu", "thousandths (1m)")));
        let msg = q("gpu", "0.5").unwrap_err().to_string();
        assert!(msg.contains("\"0.5\"") && msg.contains("gpu"), "{msg}");
        let msg = q("cpu", "0.0001").unwrap_err().to_string();
        assert!(msg.contains("\"0.0001\"") && msg.contains("for cpu"), "{msg}");
    }

    #[test]
    fn refuses_bad_input_with_the_reason() {
        for bad in ["4x", "", ".", "1e", "e3", "1e3.5", "1e1000", "1..2", "Gi", "1 Gi", "--1"] {
            assert!(matches!(q("gpu", bad), Err(QuantityError::Syntax(_) | QuantityError::Negative(_))), "{bad}");
        }
        assert!(matches!(q("gpu", "-1"), Err(QuantityError::Negative(_))));
        assert!(matches!(q("gpu", "99999999999Ei"), Err(QuantityError::TooLarge(_))));
        assert!(matches!(q("gpu", "1e40"), Err(QuantityError::TooLarge(_))));
        let msg = q("gpu", "4x").unwrap_err().to_string();
        assert!(msg.contains("\"4x\""), "{msg}");
    }

    #[test]
    fn formats_for_people() {
        let h = |r, v| Human { resource: r, value: v }.to_string();
        assert_eq!(h("memory", 16 << 30), "16Gi");
        assert_eq!(h("memory", 3 << 29), "1.5Gi");
        assert_eq!(h("memory", 3_000_000_000), "3G");
        assert_eq!(h("memory", 1000), "1k");
        assert_eq!(h("memory", 1023), "1023");
        assert_eq!(h("cpu", 500), "500m");
        assert_eq!(h("cpu", 2500), "2.5");
        assert_eq!(h("cpu", 1001), "1.001");
        assert_eq!(h("cpu", 64_000), "64");
        assert_eq!(h("gpu", 1024), "1024");
    }

    fn resource() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("cpu"), Just("memory"), Just("gpu"), Just("example.com/fpga")]
    }

    proptest! {
        #[test]
        fn what_is_shown_reads_back_exactly(resource in resource(), value in 0..=MAX_QUANTITY) {
            let shown = Human { resource, value }.to_string();
            prop_assert_eq!(parse_quantity(resource, &shown), Ok(value), "shown as {}", shown);
        }

        #[test]
        fn round_numbers_read_back_exactly(resource in resource(), base in 0u64..5000, shift in 0u32..50) {
            let value = (base << shift).min(MAX_QUANTITY);
            let shown = Human { resource, value }.to_string();
            prop_assert_eq!(parse_quantity(resource, &shown), Ok(value), "shown as {}", shown);
        }
    }
}
