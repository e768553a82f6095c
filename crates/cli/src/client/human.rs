//! Values for people: durations in and out (`30s`, `2m`, `3m12s`), UTC timestamps
//! (`2026-11-22T10:00:01.234Z`) and resource amounts (`gpu 8, memory 512Gi`); the words of
//! the API's enums in flags (`--state running`, `--ordering StrictFIFO`).

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use baton_model::quantity::Human;
use baton_proto::words::Word;

/// The longest duration a flag accepts: a week, as the model bounds durations.
pub const MAX_DURATION_MS: u64 = baton_model::limits::MAX_DURATION_MS;

/// Parses `500ms`, `30s`, `2m`, `1h30m`, `1d`, or a bare number of seconds (`45`, `1.5`).
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    bounded(duration_ms(text)?, text, MAX_DURATION_MS)
}

/// `--time-limit`: a duration up to the model's bound on time limits (a year), longer than
/// other durations because training runs last weeks.
pub fn parse_time_limit_ms(text: &str) -> Result<u64, String> {
    bounded(duration_ms(text)?, text, baton_model::limits::MAX_TIME_LIMIT_MS)
}

fn duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("bad duration {text:?}: expected e.g. 30s, 2m, 1h30m, 500ms or a number of seconds");
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = t.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(bad());
        }
        // `as` saturates: a huge number of seconds becomes u64::MAX and is refused as too long.
        return Ok((secs * 1000.0).round() as u64);
    }
    let mut total: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = n.checked_mul(unit_ms).and_then(|v| total.checked_add(v)).ok_or_else(bad)?;
    }
    Ok(total)
}

/// docs/policy.md section 9's `reserve_after`: a duration, or `never` (no reservations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveAfter(pub Option<u64>);

pub fn parse_reserve_after(text: &str) -> Result<ReserveAfter, String> {
    if text.trim() == "never" {
        return Ok(ReserveAfter(None));
    }
    parse_duration_ms(text).map(|ms| ReserveAfter(Some(ms))).map_err(|e| format!("{e}, or never"))
}

/// How `cluster info` shows `reserve_after`.
pub fn reserve_after_text(ms: Option<u64>) -> String {
    ms.map_or_else(|| "never".to_string(), span)
}

fn bounded(ms: u64, text: &str, max_ms: u64) -> Result<u64, String> {
    if ms > max_ms {
        let days = 86_400_000;
        let max = if max_ms % days == 0 { format!("{}d", max_ms / days) } else { span(max_ms) };
        return Err(format!("duration {text:?} is longer than the longest allowed, {max}"));
    }
    Ok(ms)
}

/// A span for a table: `850ms`, `42s`, `3m12s`, `5h03m`, `2d04h`.
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// How long ago `at_ms` was, for tables; `-` when unset.
pub fn age(at_ms: u64, now_ms: u64) -> String {
    if at_ms == 0 { "-".into() } else { span(now_ms.saturating_sub(at_ms)) }
}

/// `2026-11-22T10:00:01.234Z` (UTC, milliseconds).
pub fn timestamp(at_ms: u64) -> String {
    let secs = at_ms / 1000;
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let day_s = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        day_s / 3600,
        (day_s % 3600) / 60,
        day_s % 60,
        at_ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's algorithm), so no date crate is needed for one format.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `now`, `+DURATION` from `now_ms`, or a UTC time `YYYY-MM-DDTHH:MM[:SS[.mmm]]Z`.
pub fn parse_instant_ms(text: &str, now_ms: u64) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(d) = t.strip_prefix('+') {
        return Ok(now_ms.saturating_add(parse_duration_ms(d)?));
    }
    utc_ms(t).ok_or_else(|| format!("{t:?} is not a UTC time (2026-12-01T02:00:00Z), +DURATION (+2h) or now"))
}

fn utc_ms(t: &str) -> Option<u64> {
    let t = t.strip_suffix('Z').or_else(|| t.strip_suffix('z'))?;
    let (date, time) = t.split_once(['T', 't', ' '])?;
    let mut d = date.split('-');
    let (y, mo, day) = (d.next()?.parse::<i64>().ok()?, d.next()?.parse::<u32>().ok()?, d.next()?.parse::<u32>().ok()?);
    if d.next().is_some() || !(1..=12).contains(&mo) || !(1..=31).contains(&day) {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut p = hms.split(':');
    let h = p.next()?.parse::<u64>().ok()?;
    let m = p.next()?.parse::<u64>().ok()?;
    let s = p.next().map_or(Some(0), |x| x.parse::<u64>().ok())?;
    if p.next().is_some() || h > 23 || m > 59 || s > 59 || frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = if frac.is_empty() { 0 } else { frac.parse::<u64>().ok()? * 10u64.pow(3 - frac.len() as u32) };
    let days = days_from_civil(y, mo, day);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + s;
    Some(secs * 1000 + ms)
}

/// (year, month, day) to days since 1970-01-01, the inverse of `civil_from_days` (H.
/// Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Resource kinds in reading order: gpu, cpu, memory, then the rest by name.
pub fn ordered(amounts: &HashMap<String, u64>) -> Vec<(&str, u64)> {
    let rank = |k: &str| match k {
        "gpu" => 0,
        "cpu" => 1,
        "memory" => 2,
        _ => 3,
    };
    let mut v: Vec<(&str, u64)> = amounts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    v.sort_by(|a, b| (rank(a.0), a.0).cmp(&(rank(b.0), b.0)));
    v
}

/// GPUs of an amounts map in thousandths: its whole `gpu` and the `gpu.milli` of a fraction
/// of a shared GPU beside them.
pub fn gpus_milli(amounts: &HashMap<String, u64>) -> u64 {
    use baton_model::resources::{GPU, GPU_FRACTION};
    let get = |k: &str| amounts.get(k).copied().unwrap_or(0);
    get(GPU).saturating_mul(1000).saturating_add(get(GPU_FRACTION))
}

/// `gpu 8, cpu 64, memory 512Gi`; `gpu 0.5` for a fraction of a shared GPU; `-` when empty.
pub fn resources(amounts: &HashMap<String, u64>) -> String {
    use baton_model::resources::{GPU, GPU_FRACTION};
    let mut folded = amounts.clone();
    if folded.remove(GPU_FRACTION).is_some_and(|f| f > 0) {
        folded.entry(GPU.to_string()).or_insert(0);
    }
    let show = |k: &str, v: u64| match k {
        GPU => baton_model::quantity::thousandths(gpus_milli(amounts)),
        _ => Human { resource: k, value: v }.to_string(),
    };
    let parts: Vec<String> = ordered(&folded).into_iter().map(|(k, v)| format!("{k} {}", show(k, v))).collect();
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

/// One amount, in the resource's best unit.
pub fn amount(resource: &str, value: u64) -> String {
    Human { resource, value }.to_string()
}

/// GPU indices as ranges: `0-3,6`.
pub fn gpu_ranges(gpus: &[u32]) -> String {
    let mut sorted = gpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

/// `n1[0-3] n2[0-7]`: where a job runs; `n3[2:0.5]` for half of a shared GPU 2.
pub fn placements(p: &[baton_proto::v1::Placement]) -> String {
    if p.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = p
        .iter()
        .map(|pl| if pl.gpus.is_empty() { pl.node.clone() } else { format!("{}[{}]", pl.node, placed_gpus(pl)) })
        .collect();
    parts.join(" ")
}

/// A placement's whole GPUs as ranges, then each shared one with the share held.
fn placed_gpus(pl: &baton_proto::v1::Placement) -> String {
    let share = |i: usize| pl.gpu_milli.get(i).copied().unwrap_or(0);
    let whole: Vec<u32> = pl.gpus.iter().enumerate().filter(|&(i, _)| share(i) == 0).map(|(_, &g)| g).collect();
    let mut parts: Vec<String> = if whole.is_empty() { Vec::new() } else { vec![gpu_ranges(&whole)] };
    let shared = pl.gpus.iter().enumerate().filter(|&(i, _)| share(i) > 0);
    parts.extend(shared.map(|(i, g)| format!("{g}:{}", baton_model::quantity::thousandths(u64::from(share(i))))));
    parts.join(",")
}

/// `K=V` strings into a map; a repeated key is an error (a typo is likelier than intent).
pub fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("--env {p:?}: expected KEY=VALUE"))?;
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(format!("--env {p:?}: the name before = must be non-empty, without spaces"));
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("--env {k} is given twice"));
        }
    }
    Ok(out)
}

/// `gpu 8/4, cpu 16/32  (borrowing 4)`: use against a bound per resource, and what exceeds
/// the bound (GPUs unnamed, others named). Resources neither used nor bounded are left out.
pub fn usage(used: Option<&baton_proto::v1::Resources>, bound: Option<&baton_proto::v1::Resources>) -> String {
    let empty = HashMap::new();
    let used = used.map_or(&empty, |r| &r.amounts);
    let bound = bound.map_or(&empty, |r| &r.amounts);
    let mut keys: HashMap<String, u64> = bound.iter().filter(|(_, v)| **v > 0).map(|(k, v)| (k.clone(), *v)).collect();
    for (k, v) in used {
        if *v > 0 {
            keys.entry(k.clone()).or_insert(0);
        }
    }
    if keys.is_empty() {
        return "-".into();
    }
    let mut parts = Vec::new();
    let mut over = Vec::new();
    for (k, _) in ordered(&keys) {
        let u = used.get(k).copied().unwrap_or(0);
        let b = bound.get(k).copied().unwrap_or(0);
        parts.push(format!("{k} {}/{}", amount(k, u), amount(k, b)));
        if u > b {
            over.push(if k == "gpu" { amount(k, u - b) } else { format!("{k} {}", amount(k, u - b)) });
        }
    }
    let mut s = parts.join(", ");
    if !over.is_empty() {
        s.push_str(&format!("  (borrowing {})", over.join(", ")));
    }
    s
}

/// A flag's word as its proto enum, case-insensitively (a clap value parser); a wrong
/// word is refused listing the words (`baton_proto::words` defines them).
/// An event's kind by its word (docs/cli.md); empty for a kind this build does not know.
pub fn event_kind(e: &baton_proto::v1::Event) -> &'static str {
    baton_proto::v1::EventKind::word_of(e.kind)
}

pub fn parse_word<T: Word>(text: &str) -> Result<T, String> {
    T::from_word(text).ok_or_else(|| format!("{text:?} is not one of {}", T::words()))
}

/// `--usage-half-life`: a duration, or `off` (decisions.md section 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HalfLife(pub Option<u64>);

pub fn parse_half_life(text: &str) -> Result<HalfLife, String> {
    if text.trim() == "off" {
        return Ok(HalfLife(None));
    }
    let ms = duration_ms(text).map_err(|e| format!("{e}, or off"))?;
    bounded(ms, text, baton_model::usage::MAX_HALF_LIFE_MS).map(|ms| HalfLife(Some(ms)))
}

/// `--accounting-retention 400d`: how long each replica keeps its records.
pub fn parse_retention_ms(text: &str) -> Result<u64, String> {
    bounded(duration_ms(text)?, text, baton_model::accounting::MAX_RETENTION_MS)
}

/// The longest span `--since 30d` goes back: accounting's longest retention.
const MAX_AGO_MS: u64 = baton_model::accounting::MAX_RETENTION_MS;

/// `--since` and `--until`: a span back from `now_ms` (`7d`, `12h`), a UTC time
/// (`2026-11-01T00:00:00Z`) or `now`; `flag` names the flag in errors.
pub fn parse_time_back_ms(text: &str, now_ms: u64, flag: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(ms) = utc_ms(t) {
        return Ok(ms);
    }
    match duration_ms(t).and_then(|ms| bounded(ms, t, MAX_AGO_MS)) {
        Ok(ms) => Ok(now_ms.saturating_sub(ms)),
        Err(_) => Err(format!(
            "{flag} {text:?}: expected a span back from now (7d, 12h, 90m), a UTC time (2026-11-01T00:00:00Z) or now"
        )),
    }
}

/// `--usage-weights gpu=1,cpu=0.25`: weights in thousandths by resource.
pub fn parse_weights(text: &str) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let mut out = std::collections::BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, w) =
            part.split_once('=').ok_or_else(|| format!("{part:?}: expected RESOURCE=WEIGHT, e.g. gpu=1"))?;
        baton_model::resources::validate_resource_name(name).map_err(|e| e.to_string())?;
        out.insert(name.to_string(), baton_model::usage::parse_weight(w)?);
    }
    if out.is_empty() {
        return Err("give at least one RESOURCE=WEIGHT, e.g. gpu=1".into());
    }
    Ok(out)
}

/// `--max-per-user gpu=8,cpu=64` or `none`: resources in the notation of `--cpu` and
/// `--memory` (`none`: no limit, an empty set).
pub fn parse_resource_list(text: &str) -> Result<baton_model::resources::Resources, String> {
    let mut out = baton_model::resources::Resources::new();
    if text.trim() == "none" {
        return Ok(out);
    }
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, q) =
            part.split_once('=').ok_or_else(|| format!("{part:?}: expected RESOURCE=AMOUNT, e.g. gpu=8"))?;
        baton_model::resources::validate_resource_name(name).map_err(|e| e.to_string())?;
        let v = baton_model::quantity::parse_quantity(name, q).map_err(|e| e.to_string())?;
        out.set(name, v);
    }
    if out.is_empty() {
        return Err("give RESOURCE=AMOUNT pairs (e.g. gpu=8), or none".into());
    }
    Ok(out)
}

/// How `cluster info` shows usage over time: `off`, or `half-life 7d, weights gpu 1`.
pub fn usage_settings_text(u: &baton_proto::v1::UsageSettings) -> String {
    match u.half_life_ms {
        None | Some(0) => "off".to_string(),
        Some(ms) => {
            let weights: Vec<String> = u
                .weights_milli
                .iter()
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .map(|(k, w)| format!("{k} {}", baton_model::usage::weight_text(*w)))
                .collect();
            format!("half-life {}, weights {}", span(ms), weights.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn since_reads_a_span_back_a_utc_time_or_now_and_names_its_flag() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time_back_ms("7d", now, "--since"), Ok(now - 7 * 86_400_000));
        assert_eq!(parse_time_back_ms("now", now, "--until"), Ok(now));
        assert_eq!(parse_time_back_ms("2026-11-01T00:00:00Z", now, "--since"), Ok(1_793_491_200_000));
        let e = parse_time_back_ms("last tuesday", now, "--since").unwrap_err();
        assert!(e.starts_with("--since \"last tuesday\""), "{e}");
        assert!(parse_time_back_ms("30000d", now, "--until").unwrap_err().starts_with("--until"));
    }
    #[test]
    fn a_time_limit_may_be_as_long_as_the_model_allows_other_durations_a_week() {
        assert_eq!(parse_time_limit_ms("30d"), Ok(30 * 86_400_000));
        assert_eq!(parse_time_limit_ms("365d"), Ok(baton_model::limits::MAX_TIME_LIMIT_MS));
        assert!(parse_time_limit_ms("366d").unwrap_err().contains("longest allowed, 365d"));
        assert!(parse_duration_ms("30d").unwrap_err().contains("longest allowed, 7d"));
        assert!(parse_duration_ms("1e30").unwrap_err().contains("longest allowed"));
    }

    use super::*;

    #[test]
    fn instants_read_utc_relative_and_now_and_round_trip_with_timestamp() {
        let now = 1_764_000_000_000;
        assert_eq!(parse_instant_ms("now", now), Ok(now));
        assert_eq!(parse_instant_ms("+2h", now), Ok(now + 7_200_000));
        for ms in [0, 951_782_400_000, 1_764_979_200_123, 4_102_444_800_000] {
            assert_eq!(parse_instant_ms(&timestamp(ms), now), Ok(ms), "{}", timestamp(ms));
        }
        assert_eq!(parse_instant_ms("2026-12-01T02:00Z", now), Ok(1_796_090_400_000));
        for bad in ["tomorrow", "2026-13-01T00:00:00Z", "2026-12-01T02:00:00", "2026-12-01T25:00:00Z", "+soon"] {
            assert!(parse_instant_ms(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("2m"), Ok(120_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("1.5"), Ok(1_500));
        for bad in ["", "s", "3x", "-1", "1m-2s", "8d"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spans_and_timestamps_read_well() {
        assert_eq!(span(192_000), "3m12s");
        assert_eq!(span(7_380_000), "2h03m");
        assert_eq!(span(450), "450ms");
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        // 2026-11-22T10:00:01.234Z
        assert_eq!(timestamp(1_795_341_601_234), "2026-11-22T10:00:01.234Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn resources_and_gpus_format() {
        // CPUs arrive in thousandths.
        let m = HashMap::from([("memory".to_string(), 512u64 << 30), ("gpu".into(), 8), ("cpu".into(), 64_000)]);
        assert_eq!(resources(&m), "gpu 8, cpu 64, memory 512Gi");
        let m = HashMap::from([("cpu".to_string(), 2500), ("memory".into(), 3 << 29)]);
        assert_eq!(resources(&m), "cpu 2.5, memory 1.5Gi");
        assert_eq!(gpu_ranges(&[3, 0, 1, 2, 6]), "0-3,6");
        let shared =
            baton_proto::v1::Placement { node: "n3".into(), gpus: vec![2, 2, 5], gpu_milli: vec![500, 500, 250] };
        let whole = baton_proto::v1::Placement { node: "n1".into(), gpus: vec![0, 1], gpu_milli: vec![] };
        assert_eq!(placements(&[whole, shared]), "n1[0-1] n3[2:0.5,2:0.5,5:0.25]");
        assert!(parse_env(&["A=1".into(), "A=2".into()]).is_err());
        assert_eq!(parse_env(&["A=x=y".into()]).unwrap()["A"], "x=y");
        let r = |pairs: &[(&str, u64)]| baton_proto::v1::Resources {
            amounts: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        };
        assert_eq!(usage(Some(&r(&[("gpu", 8)])), Some(&r(&[("gpu", 4)]))), "gpu 8/4  (borrowing 4)");
        assert_eq!(usage(None, Some(&r(&[("gpu", 4), ("memory", 1 << 30)]))), "gpu 0/4, memory 0/1Gi");
    }
}
