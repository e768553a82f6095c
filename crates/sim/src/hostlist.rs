//! Slurm-style host lists: `n[1-4]` is n1 n2 n3 n4, `n[1-2,7]` is n1 n2 n7, `n[01-03]`
//! keeps the zero padding, and several bracket groups multiply.

/// Most names one host list may expand to.
pub const MAX_EXPANSION: usize = 100_000;

pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('[') else {
        return Ok(vec![pattern.to_string()]);
    };
    let close = pattern[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("host list {pattern:?} has an unclosed '['"))?;
    let (head, body, tail) = (&pattern[..open], &pattern[open + 1..close], &pattern[close + 1..]);
    let rest = expand(tail)?;
    let mut out = Vec::new();
    for part in body.split(',') {
        for n in range(part, pattern)? {
            for r in &rest {
                out.push(format!("{head}{n}{r}"));
                if out.len() > MAX_EXPANSION {
                    return Err(format!("host list {pattern:?} expands to more than {MAX_EXPANSION} names"));
                }
            }
        }
    }
    Ok(out)
}

/// Several host lists separated by commas outside brackets (`g[1-4],h7`), in order.
pub fn expand_list(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0usize, 0usize);
    let mut parts = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[from..]);
    for p in parts {
        if p.is_empty() {
            return Err(format!("host list {list:?} has an empty name"));
        }
        out.extend(expand(p)?);
        if out.len() > MAX_EXPANSION {
            return Err(format!("host list {list:?} expands to more than {MAX_EXPANSION} names"));
        }
    }
    Ok(out)
}

fn range(part: &str, pattern: &str) -> Result<Vec<String>, String> {
    let bad = || format!("host list {pattern:?}: {part:?} is not a number or a range like 1-4");
    let (lo, hi) = part.split_once('-').unwrap_or((part, part));
    if lo.is_empty()
        || !lo.bytes().all(|c| c.is_ascii_digit())
        || hi.is_empty()
        || !hi.bytes().all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let width = if lo.starts_with('0') && lo.len() > 1 { lo.len() } else { 0 };
    let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
    if a > b {
        return Err(format!("host list {pattern:?}: range {part:?} goes backwards"));
    }
    if b - a >= MAX_EXPANSION as u64 {
        return Err(format!("host list {pattern:?} expands to more than {MAX_EXPANSION} names"));
    }
    Ok((a..=b).map(|i| format!("{i:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn expands_ranges_lists_padding_and_groups() {
        assert_eq!(expand("n[1-4]").unwrap(), ["n1", "n2", "n3", "n4"]);
        assert_eq!(expand("n[1-2,7]").unwrap(), ["n1", "n2", "n7"]);
        assert_eq!(expand("gpu-[08-10]").unwrap(), ["gpu-08", "gpu-09", "gpu-10"]);
        assert_eq!(expand("r[1-2]n[1-2]").unwrap(), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(expand("linux").unwrap(), ["linux"]);
    }

    #[test]
    fn refuses_malformed_lists() {
        assert!(expand("n[1-").is_err());
        assert!(expand("n[4-1]").is_err());
        assert!(expand("n[a-b]").is_err());
        assert!(expand("n[1-1000000]").is_err());
    }
}
