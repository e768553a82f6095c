//! What /proc says about a process: its start time (so a reused pid is not mistaken for
//! the replica) and its state letter.

/// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot) and field 3 (state).
pub fn stat(pid: u32) -> Option<(u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // `rest` starts at field 3, so field 22 is index 19.
    let start = fields.get(19)?.parse().ok()?;
    Some((start, state))
}

/// The process's start time, if it exists.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(t, _)| t)
}

/// Whether `pid` is still the process that started at `start` (and not a zombie).
pub fn is_same_process(pid: u32, start: u64) -> bool {
    matches!(stat(pid), Some((t, state)) if t == start && state != 'Z' && state != 'X')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_stat() {
        let me = std::process::id();
        let (start, state) = stat(me).expect("own stat");
        assert!(start > 0);
        assert!(state == 'R' || state == 'S');
        assert!(is_same_process(me, start));
        assert!(!is_same_process(me, start + 1));
    }
}
