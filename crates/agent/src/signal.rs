//! Signal names and delivery to a replica's process group.

use baton_proto::DEFAULT_CHECKPOINT_SIGNAL;

/// Parses "SIGTERM", "TERM", "sigusr1", or a number; empty means the default checkpoint
/// signal ([`DEFAULT_CHECKPOINT_SIGNAL`], the model's one definition of it).
pub fn parse_signal(name: &str) -> Result<i32, String> {
    let s = name.trim();
    let s = if s.is_empty() { DEFAULT_CHECKPOINT_SIGNAL } else { s };
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

/// The default checkpoint signal's number: what a replica is asked to checkpoint with when
/// its assignment names no signal, or one this agent does not know.
pub fn default_signal() -> i32 {
    parse_signal(DEFAULT_CHECKPOINT_SIGNAL).expect("the default checkpoint signal is a known name")
}

/// The signal that asks a replica to checkpoint and the name it is known by (what the
/// replica is told): `name`, or the default when it is empty; an unknown name is an error
/// (the caller falls back to the default and says so).
pub fn checkpoint_signal(name: &str) -> Result<(i32, String), String> {
    let sig = parse_signal(name)?;
    let name = name.trim();
    Ok((sig, if name.is_empty() { DEFAULT_CHECKPOINT_SIGNAL } else { name }.to_string()))
}

/// Sends `sig` to every process of group `pgid`. A group that is gone is not an error.
pub fn signal_group(pgid: u32, sig: i32) {
    // A negative pid addresses the process group.
    send(pgid, -(pgid as i32), sig);
}

/// Sends `sig` to the one process `pid`.
pub fn signal_process(pid: u32, sig: i32) {
    send(pid, pid as i32, sig);
}

/// kill(2) of `to` (`id`, the pid or group it names), except of pids 0 and 1: kill(-1) or kill(0)
/// would hit far more than the replica. A target already gone is not an error.
fn send(id: u32, to: i32, sig: i32) {
    if id <= 1 {
        return;
    }
    // SAFETY: kill has no memory effects.
    let rc = unsafe { libc::kill(to, sig) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(to, sig, "cannot signal: {err}");
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

    #[test]
    fn an_empty_name_is_the_models_default_signal() {
        let default = parse_signal(DEFAULT_CHECKPOINT_SIGNAL).unwrap();
        assert_eq!(parse_signal(""), Ok(default));
        assert_eq!(parse_signal("  "), Ok(default));
        assert_eq!(default_signal(), default);
        assert_eq!(checkpoint_signal(""), Ok((default, DEFAULT_CHECKPOINT_SIGNAL.to_string())));
        assert_eq!(checkpoint_signal("usr1"), Ok((libc::SIGUSR1, "usr1".to_string())));
        assert!(checkpoint_signal("SIGBOGUS").is_err());
    }
}
