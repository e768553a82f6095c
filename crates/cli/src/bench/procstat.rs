//! A process's CPU time and resident memory, read from Linux's /proc, so that a benchmark
//! can report what the leader replica spent.

/// Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 on Linux).
fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// User plus system CPU seconds of `pid` so far; `None` once it is gone.
pub fn cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|t| t as f64 / ticks_per_s())
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted from the last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, at index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident memory of `pid` in bytes (VmRSS); `None` once it is gone.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss_kib(&status).map(|kib| kib * 1024)
}

fn parse_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_from_the_last_parenthesis() {
        let stat = "42 (baton (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(12));
        assert_eq!(parse_cpu_ticks("42 (short) S 1"), None);
    }

    #[test]
    fn rss_is_read_in_kib() {
        assert_eq!(parse_rss_kib("Name:\tbaton\nVmRSS:\t  2048 kB\n"), Some(2048));
        assert_eq!(parse_rss_kib("Name:\tbaton\n"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(cpu_s(me).is_some());
        assert!(rss_bytes(me).is_some_and(|b| b > 0));
    }
}
