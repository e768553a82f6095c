//! Usage over time and per-user limits (decisions.md section 12).
//!
//! Each (queue, user) pair has an account: what its jobs hold now (`held`, derived from the
//! running jobs) and, while a half-life is set, its decayed resource-seconds as of the last
//! command that changed what it holds. A resource-second used at time s counts
//! 2^(-(t - s) / half_life) at time t, so between two changes, with `r` units held, the
//! value moves from `v` to `v * d + r * h / ln 2 * (1 - d)`, `d` being the decay over the
//! gap and `h` the half-life in seconds: exact for continuous decay, computed only when
//! the holding changes or someone asks.
//!
//! Every replica must compute the same bits: the decay is computed with additions and
//! multiplications only (IEEE-754 gives those one answer everywhere; a platform's `exp2`
//! need not), and the times are the commands' committed times.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::name::Name;
use crate::quantity::units_per_one;
use crate::resources::{GPU, Resources};

/// The shortest half-life accepted: shorter ones forget usage between two cycles.
pub const MIN_HALF_LIFE_MS: u64 = 60_000;
/// The longest: ten years (Slurm's sites use days to weeks).
pub const MAX_HALF_LIFE_MS: u64 = 10 * 365 * 86_400_000;
/// Weights are kept in thousandths (`0.25` is 250).
pub const WEIGHT_UNITS: u64 = 1_000;
/// The largest weight of one resource (1,000, in thousandths).
pub const MAX_WEIGHT_MILLI: u64 = 1_000_000;
/// Resources one weight list may name.
pub const MAX_WEIGHTS: usize = 32;
/// An idle account whose every resource has decayed below this many resource-seconds is
/// forgotten (at a Tick): it could no longer decide an order.
pub const FORGET_BELOW: f64 = 1e-3;
/// Accounts kept at most: one per queue and user with jobs. Beyond it, an idle account is
/// dropped first (the one decayed furthest); see [`Usage::bound`].
pub const MAX_ACCOUNTS: usize = 100_000;

/// The settings of section 12, changed with `baton cluster set`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageSettings {
    /// `None`: no usage history (the default), and the order ignores usage.
    pub half_life_ms: Option<u64>,
    /// Weight per resource in thousandths; resources not named weigh 0. Empty: `gpu` 1.
    pub weights_milli: BTreeMap<String, u64>,
}

impl UsageSettings {
    /// Refuses settings out of bounds, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(h) = self.half_life_ms
            && !(MIN_HALF_LIFE_MS..=MAX_HALF_LIFE_MS).contains(&h)
        {
            return Err(format!(
                "usage_half_life must be from {} s to {} s (or off), not {} s",
                MIN_HALF_LIFE_MS / 1000,
                MAX_HALF_LIFE_MS / 1000,
                h / 1000
            ));
        }
        if self.weights_milli.len() > MAX_WEIGHTS {
            return Err(format!("usage_weights may name at most {MAX_WEIGHTS} resources"));
        }
        for (name, w) in &self.weights_milli {
            crate::resources::validate_resource_name(name).map_err(|e| format!("usage_weights: {e}"))?;
            if *w > MAX_WEIGHT_MILLI {
                return Err(format!(
                    "usage_weights: {name} weighs at most {}, not {}",
                    MAX_WEIGHT_MILLI / WEIGHT_UNITS,
                    weight_text(*w)
                ));
            }
        }
        Ok(())
    }

    /// The weight of each resource in thousandths, the default (`gpu` 1) when none is set.
    pub fn weights(&self) -> BTreeMap<String, u64> {
        if self.weights_milli.is_empty() {
            return BTreeMap::from([(GPU.to_string(), WEIGHT_UNITS)]);
        }
        self.weights_milli.clone()
    }
}

/// A weight in thousandths as a decimal: 1500 is "1.5".
pub fn weight_text(milli: u64) -> String {
    let (whole, frac) = (milli / WEIGHT_UNITS, milli % WEIGHT_UNITS);
    if frac == 0 { whole.to_string() } else { format!("{whole}.{frac:03}").trim_end_matches('0').to_string() }
}

/// Parses a weight: a decimal with at most three decimals ("1", "0.25").
pub fn parse_weight(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a weight: a decimal from 0 to 1000 with at most 3 decimals");
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || frac.len() > 3 || !(whole.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    let frac: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<3}").parse().map_err(|_| bad())? };
    let milli = whole.checked_mul(WEIGHT_UNITS).and_then(|w| w.checked_add(frac)).ok_or_else(bad)?;
    if milli > MAX_WEIGHT_MILLI {
        return Err(bad());
    }
    Ok(milli)
}

/// 2^(-elapsed / half_life), from additions and multiplications only (see the module doc).
pub fn decay(elapsed_ms: u64, half_life_ms: u64) -> f64 {
    assert!(half_life_ms > 0, "a half-life is positive");
    let halvings = elapsed_ms / half_life_ms;
    if halvings > 1022 {
        return 0.0;
    }
    // The fraction of a half-life left, as an exact ratio of integers below 2^53.
    let rest = (elapsed_ms % half_life_ms) as f64 / half_life_ms as f64;
    let whole = f64::from_bits((1023 - halvings) << 52);
    whole * exp_neg(rest * std::f64::consts::LN_2)
}

/// e^(-y) for y in [0, ln 2], by its Taylor series (30 terms: the last is below 1e-40).
fn exp_neg(y: f64) -> f64 {
    debug_assert!((0.0..=std::f64::consts::LN_2).contains(&y));
    let (mut sum, mut term) = (1.0f64, 1.0f64);
    for k in 1..30 {
        term = term * -y / k as f64;
        sum += term;
    }
    sum
}

/// One (queue, user) pair's decayed usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Account {
    /// The time `value` is as of.
    pub as_of_ms: u64,
    /// Decayed resource-seconds per resource at `as_of_ms`, in the resource's smallest
    /// units (GPUs, thousandths of CPUs, bytes), as the ledger counts them.
    pub value: BTreeMap<String, f64>,
}

impl Account {
    /// The value at `now_ms` with `held` held since `as_of_ms`.
    fn at(&self, held: Option<&Resources>, now_ms: u64, half_life_ms: u64) -> BTreeMap<String, f64> {
        let d = decay(now_ms.saturating_sub(self.as_of_ms), half_life_ms);
        // Seconds of use one unit held all along is worth: h / ln 2 * (1 - d).
        let full = half_life_ms as f64 / 1000.0 / std::f64::consts::LN_2 * (1.0 - d);
        let mut out: BTreeMap<String, f64> = self.value.iter().map(|(k, v)| (k.clone(), v * d)).collect();
        for (k, q) in held.into_iter().flat_map(|h| h.iter()) {
            *out.entry(k.to_string()).or_insert(0.0) += q as f64 * full;
        }
        out
    }
}

/// The key of an account: (queue, user).
pub type AccountKey = (Name, String);

/// Section 12's replicated part: settings, accounts and the per-user limits; what each
/// pair holds now is derived from the running jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    settings: UsageSettings,
    accounts: BTreeMap<AccountKey, Account>,
    /// `max_per_user` per queue: resources one user's jobs in it may hold at once.
    limits: BTreeMap<Name, Resources>,
    /// Derived, never stored: what each pair's running jobs hold.
    held: BTreeMap<AccountKey, Resources>,
}

/// What a snapshot stores of [`Usage`].
pub type StoredUsage = (UsageSettings, BTreeMap<AccountKey, Account>, BTreeMap<Name, Resources>);

impl Usage {
    pub fn is_empty(&self) -> bool {
        self.settings == UsageSettings::default() && self.accounts.is_empty() && self.limits.is_empty()
    }

    /// What a snapshot writes, borrowed (it serializes as [`StoredUsage`]).
    pub fn stored(&self) -> (&UsageSettings, &BTreeMap<AccountKey, Account>, &BTreeMap<Name, Resources>) {
        (&self.settings, &self.accounts, &self.limits)
    }

    /// From a snapshot, with `held` derived by the caller from the running jobs.
    pub fn restore(stored: StoredUsage, held: BTreeMap<AccountKey, Resources>) -> Usage {
        let (settings, accounts, limits) = stored;
        Usage { settings, accounts, limits, held }
    }

    pub fn settings(&self) -> &UsageSettings {
        &self.settings
    }

    pub fn limits(&self) -> &BTreeMap<Name, Resources> {
        &self.limits
    }

    pub fn limit(&self, queue: &Name) -> Option<&Resources> {
        self.limits.get(queue)
    }

    pub fn held(&self) -> &BTreeMap<AccountKey, Resources> {
        &self.held
    }

    pub fn held_by(&self, key: &AccountKey) -> Option<&Resources> {
        self.held.get(key)
    }

    pub fn accounts(&self) -> &BTreeMap<AccountKey, Account> {
        &self.accounts
    }

    /// New settings at `now_ms`: values so far are brought to `now_ms` under the old
    /// half-life; turned off, the history is forgotten; turned on, it starts empty now.
    pub fn set_settings(&mut self, s: UsageSettings, now_ms: u64) {
        match (self.settings.half_life_ms, s.half_life_ms) {
            (Some(_), Some(_)) => self.fold_all(now_ms),
            (_, None) => self.accounts.clear(),
            (None, Some(_)) => {
                self.accounts = self
                    .held
                    .keys()
                    .map(|k| (k.clone(), Account { as_of_ms: now_ms, value: BTreeMap::new() }))
                    .collect()
            }
        }
        self.settings = s;
    }

    pub fn set_limit(&mut self, queue: Name, limit: Resources) {
        if limit.is_empty() {
            self.limits.remove(&queue);
        } else {
            self.limits.insert(queue, limit);
        }
    }

    /// A queue is gone: its limit and its accounts go with it (it holds nothing).
    pub fn forget_queue(&mut self, queue: &Name) {
        self.limits.remove(queue);
        self.accounts.retain(|(q, _), _| q != queue);
        debug_assert!(self.held.keys().all(|(q, _)| q != queue), "a deleted queue holds nothing");
    }

    /// A job of `key` started holding `res` at `now_ms`.
    pub fn start(&mut self, key: AccountKey, res: &Resources, now_ms: u64) {
        self.fold(&key, now_ms);
        if !res.is_empty() {
            self.held.entry(key).or_default().add(res);
        }
    }

    /// A job of `key` stopped holding `res` at `now_ms`.
    pub fn stop(&mut self, key: &AccountKey, res: &Resources, now_ms: u64) {
        self.fold(key, now_ms);
        if res.is_empty() {
            return;
        }
        let Some(held) = self.held.get_mut(key) else {
            panic!("{key:?} stops holding {res:?} but holds nothing");
        };
        match held.checked_sub(res) {
            Some(left) => *held = left,
            None => panic!("{key:?} stops holding {res} but holds {held}"),
        }
        if held.is_empty() {
            self.held.remove(key);
            // The hard bound holds between Ticks too; the account just went idle.
            if self.accounts.len() > MAX_ACCOUNTS {
                self.bound(now_ms);
            }
        }
    }

    /// Brings `key`'s value to `now_ms` (while a half-life is set).
    fn fold(&mut self, key: &AccountKey, now_ms: u64) {
        let Some(h) = self.settings.half_life_ms else { return };
        let held = self.held.get(key);
        let acct =
            self.accounts.entry(key.clone()).or_insert_with(|| Account { as_of_ms: now_ms, value: BTreeMap::new() });
        let value = acct.at(held, now_ms, h);
        *acct = Account { as_of_ms: now_ms.max(acct.as_of_ms), value };
    }

    fn fold_all(&mut self, now_ms: u64) {
        let keys: Vec<AccountKey> = self.accounts.keys().cloned().collect();
        for k in keys {
            self.fold(&k, now_ms);
        }
    }

    /// `key`'s decayed resource-seconds per resource at `now_ms` (empty while no half-life
    /// is set), in the resources' smallest units.
    pub fn usage_at(&self, key: &AccountKey, now_ms: u64) -> BTreeMap<String, f64> {
        match (self.settings.half_life_ms, self.accounts.get(key)) {
            (Some(h), Some(a)) => a.at(self.held.get(key), now_ms, h),
            _ => BTreeMap::new(),
        }
    }

    /// Forgets idle accounts decayed below [`FORGET_BELOW`], then the most decayed idle ones
    /// beyond [`MAX_ACCOUNTS`].
    pub fn bound(&mut self, now_ms: u64) {
        let Some(h) = self.settings.half_life_ms else { return };
        let held = &self.held;
        self.accounts.retain(|k, a| {
            held.contains_key(k)
                || a.at(None, now_ms, h).iter().any(|(r, v)| v / units_per_one(r) as f64 >= FORGET_BELOW)
        });
        if self.accounts.len() > MAX_ACCOUNTS {
            let mut idle: Vec<(u64, AccountKey)> = self
                .accounts
                .iter()
                .filter(|(k, _)| !held.contains_key(*k))
                .map(|(k, a)| (a.as_of_ms, k.clone()))
                .collect();
            idle.sort();
            let excess = self.accounts.len() - MAX_ACCOUNTS;
            for (_, k) in idle.into_iter().take(excess) {
                self.accounts.remove(&k);
            }
        }
    }
}

/// Usage per resource weighted into one number, each resource in whole units.
pub fn weighted(usage: &BTreeMap<String, f64>, weights: &BTreeMap<String, u64>) -> f64 {
    let usage = &with_fractions_in_gpu(usage);
    let mut sum = 0.0;
    for (r, w) in weights {
        if let Some(v) = usage.get(r) {
            sum += v / units_per_one(r) as f64 * (*w as f64 / WEIGHT_UNITS as f64);
        }
    }
    sum
}

/// Usage per resource in whole units ("gpu" GPU-seconds, "cpu" CPU-seconds, "memory"
/// byte-seconds).
pub fn in_units(usage: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    with_fractions_in_gpu(usage).iter().map(|(r, v)| (r.clone(), v / units_per_one(r) as f64)).collect()
}

/// Usage with a shared GPU's thousandths (`gpu.milli`-seconds) counted as the GPU-seconds
/// they are (decisions.md section 11: a fraction counts exactly).
fn with_fractions_in_gpu(usage: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    use crate::resources::{GPU, GPU_FRACTION};
    let Some(milli) = usage.get(GPU_FRACTION) else { return usage.clone() };
    let mut out = usage.clone();
    out.remove(GPU_FRACTION);
    *out.entry(GPU.to_string()).or_insert(0.0) += milli / 1000.0;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    fn key(q: &str, u: &str) -> AccountKey {
        (Name::lit(q), u.to_string())
    }

    #[test]
    fn decay_halves_per_half_life_and_matches_exp2() {
        assert_eq!(decay(0, HOUR_MS), 1.0);
        assert_eq!(decay(HOUR_MS, HOUR_MS), 0.5);
        assert_eq!(decay(3 * HOUR_MS, HOUR_MS), 0.125);
        for ms in [1, 999, 1_234_567, 3_599_999, 7_777_777, 50 * HOUR_MS + 17] {
            let want = (-(ms as f64) / HOUR_MS as f64).exp2();
            assert!((decay(ms, HOUR_MS) - want).abs() <= want * 1e-14, "{ms}: {} vs {want}", decay(ms, HOUR_MS));
        }
        assert_eq!(decay(2000 * HOUR_MS, HOUR_MS), 0.0);
    }

    #[test]
    fn one_gpu_held_for_a_half_life_counts_h_over_ln2_times_a_half() {
        let mut u = Usage::default();
        u.set_settings(UsageSettings { half_life_ms: Some(HOUR_MS), ..Default::default() }, 0);
        u.start(key("q", "alice"), &Resources::of(&[("gpu", 1)]), 0);
        let v = u.usage_at(&key("q", "alice"), HOUR_MS)["gpu"];
        let want = 3600.0 / std::f64::consts::LN_2 * 0.5;
        assert!((v - want).abs() < 1e-9, "{v} vs {want}");
        // Stopped at one half-life, it halves over the next.
        u.stop(&key("q", "alice"), &Resources::of(&[("gpu", 1)]), HOUR_MS);
        let later = u.usage_at(&key("q", "alice"), 2 * HOUR_MS)["gpu"];
        assert!((later - want / 2.0).abs() < 1e-9);
        assert!(u.held().is_empty());
    }

    #[test]
    fn folding_at_any_instant_gives_the_value_of_folding_once() {
        let h = 7 * 24 * HOUR_MS;
        let mut once = Usage::default();
        once.set_settings(UsageSettings { half_life_ms: Some(h), ..Default::default() }, 0);
        let mut often = once.clone();
        let res = Resources::of(&[("gpu", 4), ("cpu", 8_000)]);
        once.start(key("q", "a"), &res, 0);
        often.start(key("q", "a"), &res, 0);
        for t in 1..=100u64 {
            often.fold(&key("q", "a"), t * 3_600_000);
        }
        let (a, b) = (once.usage_at(&key("q", "a"), 100 * HOUR_MS), often.usage_at(&key("q", "a"), 100 * HOUR_MS));
        for r in ["gpu", "cpu"] {
            assert!((a[r] - b[r]).abs() <= a[r] * 1e-12, "{r}: {} vs {}", a[r], b[r]);
        }
        let w = weighted(&a, &once.settings().weights());
        assert!((w - a["gpu"]).abs() < 1e-9, "gpu weighs 1 and cpu 0 by default");
    }

    #[test]
    fn settings_refuse_what_is_out_of_bounds_naming_it() {
        let short = UsageSettings { half_life_ms: Some(1_000), ..Default::default() };
        assert!(short.validate().unwrap_err().contains("usage_half_life"));
        let heavy = UsageSettings { half_life_ms: None, weights_milli: BTreeMap::from([("gpu".into(), 2_000_000)]) };
        assert!(heavy.validate().unwrap_err().contains("usage_weights: gpu"));
        assert_eq!(parse_weight("0.25"), Ok(250));
        assert_eq!(parse_weight("1"), Ok(1000));
        assert!(parse_weight("1.2345").is_err() && parse_weight("-1").is_err() && parse_weight("x").is_err());
        assert_eq!(weight_text(1500), "1.5");
        assert_eq!(weight_text(2000), "2");
    }

    #[test]
    fn idle_accounts_are_forgotten_once_decayed_and_beyond_the_bound() {
        let mut u = Usage::default();
        u.set_settings(UsageSettings { half_life_ms: Some(HOUR_MS), ..Default::default() }, 0);
        u.start(key("q", "a"), &Resources::of(&[("gpu", 1)]), 0);
        u.stop(&key("q", "a"), &Resources::of(&[("gpu", 1)]), HOUR_MS);
        u.start(key("q", "b"), &Resources::of(&[("gpu", 1)]), 0);
        u.bound(2 * HOUR_MS);
        assert_eq!(u.accounts().len(), 2);
        u.bound(40 * HOUR_MS);
        assert_eq!(u.accounts().keys().cloned().collect::<Vec<_>>(), vec![key("q", "b")], "b still holds a GPU");
    }
}
