//! A private network for the cluster's processes, so that links between them can be cut:
//! every process (a replica, an agent) runs in its own Linux network namespace with its own
//! address, plugged into a bridge that lives in one more namespace (the switch). The harness
//! stays in the machine's namespace and reaches the bridge through a veth of its own (the
//! "host"). Links are cut by dropping frames in the switch (an nftables bridge table), so a
//! cut is silent, as a real one: packets vanish, connections hang until their timeouts.
//!
//! The switch is a namespace of its own, not a bridge of the machine's, because on a machine
//! with Docker bridged frames pass through the machine's iptables `FORWARD` chain, whose
//! policy there is DROP.
//!
//! A network holds a [`Slot`] (`slot`), so that networks made at once by several processes
//! never share a subnet or a name: its subnet is the slot's /28, its names start with
//! `bcs<slot>`. A [`Net`] removes what it made when dropped (also when the run panics), and
//! a new one first removes what carries the number of a slot no one holds (left by a run
//! killed before its cleanup); a live run holds its slot, so nothing of it is removed. Needs
//! root, `ip` (iproute2) and `nft` (nftables); [`preflight`] names what is missing.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use crate::slot::{SLOTS, Slot};

/// Label of the harness's own end of the network (clients, the fault watcher).
pub const HOST: &str = "host";
/// The network addresses come from 198.18.0.0/15 (RFC 2544, for tests of network devices),
/// one /28 per slot: the host, the bridge's spare, up to 13 processes.
const BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const SUBNET_SIZE: u32 = 16;
/// Processes one network holds: a /28 less the network, broadcast and host addresses.
pub const MAX_MEMBERS: usize = 13;
/// Names of ours are `bcs<slot>-sw` (the switch), `bcs<slot>-<i>` (a process), `bcs<slot>h`
/// (the host's veth): 15 bytes at most, a link name's limit.
const PREFIX: &str = "bcs";

/// A network fault between labelled ends, in force until replaced.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// Frames from `from` to `to` are dropped (one direction).
    Drop { from: String, to: String },
    /// `percent` of the frames from or to `who` are dropped, at random.
    Loss { who: String, percent: u32 },
}

/// Both directions between every end of `a` and every end of `b`.
pub fn cut_between(a: &[String], b: &[String]) -> Vec<Rule> {
    let mut rules = one_way(a, b);
    rules.extend(one_way(b, a));
    rules
}

/// From every end of `from` to every end of `to`.
pub fn one_way(from: &[String], to: &[String]) -> Vec<Rule> {
    from.iter()
        .flat_map(|f| to.iter().filter(move |t| *t != f).map(move |t| Rule::Drop { from: f.clone(), to: t.clone() }))
        .collect()
}

/// Why partitions cannot be made here, naming what is missing; `None` when they can.
pub fn preflight() -> Option<String> {
    // SAFETY: geteuid(2) reads the calling process's effective user id; no memory involved.
    if unsafe { libc::geteuid() } != 0 {
        return Some("network partitions need root (network namespaces, veth pairs, nftables); run as root or pass --no-partitions".into());
    }
    let tools = [
        ("ip", &["netns", "list"][..], "iproute2"),
        ("nft", &["--version"][..], "nftables"),
        ("nsenter", &["--version"][..], "util-linux"),
    ];
    for (tool, args, package) in tools {
        match Command::new(tool).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status() {
            Ok(s) if s.success() => {}
            Ok(s) => {
                return Some(format!(
                    "network partitions need `{tool} {}`, which failed ({s}); or pass --no-partitions",
                    args.join(" ")
                ));
            }
            Err(e) => {
                return Some(format!(
                    "network partitions need `{tool}` (Debian package {package}): {e}; install it or pass --no-partitions"
                ));
            }
        }
    }
    None
}

/// The private network of one run. Dropping it removes its namespaces and links.
pub struct Net {
    tag: String,
    /// Held while the network exists; declared last, so released after `drop` removed it.
    addrs: BTreeMap<String, Ipv4Addr>,
    namespaces: BTreeMap<String, String>,
    slot: Slot,
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args, None)
}

fn run(tool: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new(tool)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(|e| format!("cannot feed {tool}: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("{tool} did not finish: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{tool} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn output(tool: &str, args: &[&str]) -> String {
    Command::new(tool).args(args).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
}

impl Net {
    /// A network with one namespace per label (at most [`MAX_MEMBERS`]), all plugged into
    /// one switch, every link up.
    pub fn create(labels: &[&str]) -> Result<Net, String> {
        if labels.len() > MAX_MEMBERS {
            return Err(format!("a network holds {MAX_MEMBERS} processes at most, not {}", labels.len()));
        }
        if let Some(missing) = preflight() {
            return Err(missing);
        }
        // A slot whose subnet something else of the machine uses is passed over; what a
        // dead run of a slot left behind is removed first, so its subnet reads as free.
        let slot = Slot::take(|n| {
            remove_leftovers(n);
            subnet_free(subnet(n))
        })?;
        remove_leftovers_of_free_slots(slot.number());
        let base = subnet(slot.number());
        let tag = format!("{PREFIX}{}", slot.number());
        let mut net = Net { tag, addrs: BTreeMap::new(), namespaces: BTreeMap::new(), slot };
        // From here on, a failure drops `net`, which removes what was made.
        net.make_switch(base)?;
        for (i, label) in labels.iter().enumerate() {
            net.plug(i, label, Ipv4Addr::from(base + 2 + i as u32))?;
        }
        net.apply(&[])?;
        Ok(net)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    fn make_switch(&mut self, base: u32) -> Result<(), String> {
        let sw = self.switch();
        let host_if = format!("{}h", self.tag);
        ip(&["netns", "add", &sw])?;
        self.namespaces.insert(sw.clone(), sw.clone());
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        ip(&["link", "add", &host_if, "type", "veth", "peer", "name", "host", "netns", &sw])?;
        ip(&["-n", &sw, "link", "set", "host", "master", "br0", "up"])?;
        let host = Ipv4Addr::from(base + 1);
        ip(&["addr", "add", &format!("{host}/28"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        self.addrs.insert(HOST.into(), host);
        Ok(())
    }

    fn plug(&mut self, i: usize, label: &str, addr: Ipv4Addr) -> Result<(), String> {
        let (sw, ns, port) = (self.switch(), format!("{}-{i}", self.tag), format!("p{i}"));
        ip(&["netns", "add", &ns])?;
        self.namespaces.insert(label.into(), ns.clone());
        ip(&["-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
        ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "addr", "add", &format!("{addr}/28"), "dev", "eth0"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        self.addrs.insert(label.into(), addr);
        Ok(())
    }

    /// The slot the network holds (its subnet and names).
    pub fn slot(&self) -> u32 {
        self.slot.number()
    }

    /// The address of `label` (or of [`HOST`]).
    pub fn addr(&self, label: &str) -> Ipv4Addr {
        self.addrs[label]
    }

    /// The namespace `label` runs in (`/run/netns/<it>`, which `nsenter --net` enters).
    pub fn namespace(&self, label: &str) -> &str {
        &self.namespaces[label]
    }

    /// Puts `rules` in force, replacing the previous ones (`&[]` heals every link).
    pub fn apply(&self, rules: &[Rule]) -> Result<(), String> {
        let script = ruleset(rules, &self.addrs)?;
        run("ip", &["netns", "exec", &self.switch(), "nft", "-f", "-"], Some(&script))
    }
}

/// The switch's nftables script for `rules`: a table `chaos` whose forward chain drops them.
fn ruleset(rules: &[Rule], addrs: &BTreeMap<String, Ipv4Addr>) -> Result<String, String> {
    let addr = |l: &str| addrs.get(l).ok_or_else(|| format!("no process is labelled {l:?} in this network"));
    // Declaring the table first makes the delete succeed on the first run too.
    let mut s = String::from("table bridge chaos\ndelete table bridge chaos\n");
    s.push_str("table bridge chaos {\n  chain cut {\n    type filter hook forward priority 0; policy accept;\n");
    for r in rules {
        match r {
            Rule::Drop { from, to } => {
                s.push_str(&format!("    ip saddr {} ip daddr {} drop\n", addr(from)?, addr(to)?))
            }
            Rule::Loss { who, percent } => {
                let a = addr(who)?;
                // nft compares `numgen random mod 100` with 0-99 only: 100% is a plain drop.
                let draw = if *percent >= 100 { String::new() } else { format!("numgen random mod 100 < {percent} ") };
                for dir in ["saddr", "daddr"] {
                    s.push_str(&format!("    ip {dir} {a} {draw}drop\n"));
                }
            }
        }
    }
    s.push_str("  }\n}\n");
    Ok(s)
}

/// The first address of slot `n`'s /28.
fn subnet(n: u32) -> u32 {
    BASE + n * SUBNET_SIZE
}

/// Whether no address of this machine's namespace falls in the /28 at `base`.
fn subnet_free(base: u32) -> bool {
    let used = output("ip", &["-o", "-4", "addr", "show"]);
    (0..SUBNET_SIZE).all(|h| !used.contains(&format!("inet {}/", Ipv4Addr::from(base + h))))
}

/// The slot a name of ours carries (`bcs<slot>-...` or `bcs<slot>h`).
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[digits.len()..];
    let ours = after.starts_with('-') || after == "h";
    if ours { digits.parse().ok().filter(|n| *n < SLOTS) } else { None }
}

/// Our namespaces and the machine's links of ours, each with its slot.
fn names_of_ours() -> Vec<(u32, bool, String)> {
    let mut names = Vec::new();
    for line in output("ip", &["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if let Some(n) = owner(name) {
            names.push((n, true, name.to_string()));
        }
    }
    for line in output("ip", &["-o", "link", "show"]).lines() {
        let name = line.split(':').nth(1).unwrap_or_default().trim().split('@').next().unwrap_or_default();
        if let Some(n) = owner(name) {
            names.push((n, false, name.to_string()));
        }
    }
    names
}

/// Removes the namespaces and links of slot `n`, which the caller holds: a dead run's.
fn remove_leftovers(n: u32) {
    for (_, is_ns, name) in names_of_ours().into_iter().filter(|(owner, _, _)| *owner == n) {
        let _ = if is_ns { ip(&["netns", "del", &name]) } else { ip(&["link", "del", &name]) };
    }
}

/// Removes what runs killed before their cleanup left behind in slots other than `mine`:
/// only of a slot whose lock can be taken (no live process holds it), while holding it.
fn remove_leftovers_of_free_slots(mine: u32) {
    let slots: std::collections::BTreeSet<u32> =
        names_of_ours().into_iter().map(|(n, _, _)| n).filter(|n| *n != mine).collect();
    for n in slots {
        if let Ok(Some(_held)) = Slot::try_take(n) {
            remove_leftovers(n);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veths in it, and their peers with them.
        let _ = ip(&["link", "del", &format!("{}h", self.tag)]);
        for ns in self.namespaces.values() {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_cut_between_two_groups_drops_both_directions_and_nothing_inside_a_group() {
        let rules = cut_between(&labels(&["r1", "n1"]), &labels(&["r2", "r3"]));
        assert_eq!(rules.len(), 8);
        let drop = |f: &str, t: &str| Rule::Drop { from: f.into(), to: t.into() };
        for r in [drop("r1", "r2"), drop("r2", "r1"), drop("n1", "r3"), drop("r3", "n1")] {
            assert!(rules.contains(&r), "{r:?} missing");
        }
        assert!(!rules.contains(&drop("r1", "n1")));
        assert_eq!(one_way(&labels(&["r1"]), &labels(&["r1", "r2"])), [drop("r1", "r2")], "no cut to itself");
    }

    #[test]
    fn the_ruleset_names_addresses_and_refuses_unknown_labels() {
        let addrs: BTreeMap<String, Ipv4Addr> =
            [("r1".to_string(), Ipv4Addr::new(198, 18, 0, 2)), ("n1".to_string(), Ipv4Addr::new(198, 18, 0, 3))].into();
        let s = ruleset(
            &[Rule::Drop { from: "r1".into(), to: "n1".into() }, Rule::Loss { who: "n1".into(), percent: 30 }],
            &addrs,
        )
        .unwrap();
        assert!(s.contains("ip saddr 198.18.0.2 ip daddr 198.18.0.3 drop"), "{s}");
        assert!(s.contains("ip saddr 198.18.0.3 numgen random mod 100 < 30 drop"), "{s}");
        assert!(s.contains("ip daddr 198.18.0.3 numgen random mod 100 < 30 drop"), "{s}");
        let all = ruleset(&[Rule::Loss { who: "n1".into(), percent: 100 }], &addrs).unwrap();
        assert!(all.contains("ip saddr 198.18.0.3 drop"), "{all}");
        let err = ruleset(&[Rule::Drop { from: "r9".into(), to: "n1".into() }], &addrs).unwrap_err();
        assert!(err.contains("\"r9\""), "{err}");
    }

    #[test]
    fn only_names_of_ours_with_a_slot_are_leftovers_candidates() {
        assert_eq!(owner("bcs12-sw"), Some(12));
        assert_eq!(owner("bcs12-3"), Some(12));
        assert_eq!(owner("bcs12h"), Some(12));
        assert_eq!(owner("bcs12"), None, "nothing after the slot: not ours");
        assert_eq!(owner("bcs12x"), None);
        assert_eq!(owner("bcs4000-sw"), None, "no such slot");
        assert_eq!(owner("bc1234x0-sw"), None, "another naming");
        assert_eq!(owner("bcast"), None);
        assert_eq!(owner("docker0"), None);
    }

    #[test]
    fn slots_have_disjoint_subnets_in_the_test_range() {
        assert_eq!(Ipv4Addr::from(subnet(0)), Ipv4Addr::new(198, 18, 0, 0));
        assert_eq!(Ipv4Addr::from(subnet(1)), Ipv4Addr::new(198, 18, 0, 16));
        let last = Ipv4Addr::from(subnet(SLOTS - 1) + SUBNET_SIZE - 1);
        assert!(last < Ipv4Addr::new(198, 20, 0, 0), "{last} is past 198.18.0.0/15");
    }
}
