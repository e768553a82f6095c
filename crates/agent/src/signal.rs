//! Signal names and delivery to a replica's process group.

/// Parses "SIGTERM", "TERM", "sigusr1", or a number; empty means SIGTERM (the default
/// checkpoint signal).
pub fn parse_signal(name: &str) -> Result<i32, String> {
    let s = name.trim();
    if s.is_empty() {
        return Ok(libc::SIGTERM);
    }
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) { Ok(n) } else { Err(format!("signal {s}: out of range")) };
    }
    let upper = s.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let sig = match bare {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "ALRM" => libc::SIGALRM,
        "KILL" => libc::SIGKILL,
        "XCPU" => libc::SIGXCPU,
        "PWR" => libc::SIGPWR,
        "WINCH" => libc::SIGWINCH,
        _ => return Err(format!("unknown signal {s:?} (use a name like SIGTERM or SIGUSR1)")),
    };
    Ok(sig)
}

/// Sends `sig` to every process of group `pgid`. A group that is gone is not an error.
pub fn signal_group(pgid: u32, sig: i32) {
    if pgid <= 1 {
        // kill(-1) or kill(0) would hit far more than the replica.
        return;
    }
    // SAFETY: kill has no memory effects; a negative pid addresses the process group.
    let rc = unsafe { libc::kill(-(pgid as i32), sig) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, sig, "cannot signal process group: {err}");
        }
    }
}

/// Whether any process of group `pgid` still exists.
pub fn group_alive(pgid: u32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks existence and permission.
    let rc = unsafe { libc::kill(-(pgid as i32), 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_and_without_prefix() {
        assert_eq!(parse_signal("SIGUSR1"), Ok(libc::SIGUSR1));
        assert_eq!(parse_signal("usr1"), Ok(libc::SIGUSR1));
        assert_eq!(parse_signal(""), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("15"), Ok(15));
        assert!(parse_signal("SIGBOGUS").unwrap_err().contains("SIGBOGUS"));
        assert!(parse_signal("99").is_err());
    }
}
