//! The programs a replica's wrapper and guard run (`launch::WRAPPER`, `launch::GUARD`):
//! the shell and the few commands they use besides its built-ins. The agent looks for them
//! on the `PATH` its replicas get before it starts, and refuses to start without them: a
//! container image holding `sh` alone ran every job, but without `mv` no exit code was ever
//! recorded (a replica whose end the agent saw through `/proc` first was reported killed,
//! exit 137), and without `sleep` every replica's lease watchdog spun on a CPU.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Every external program the wrapper and the guard run. `kill`, `printf`, `read`, `trap`
/// and `true` are built into every POSIX shell.
pub const NEEDED: [&str; 4] = ["sh", "sleep", "mv", "cat"];

/// Where `name` is found on `path` (a `PATH` value): the first executable file of that name.
pub fn find(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// The programs of [`NEEDED`] that `path` lacks, in that order.
pub fn missing(path: &OsStr) -> Vec<&'static str> {
    NEEDED.into_iter().filter(|name| find(name, path).is_none()).collect()
}

/// Refuses a `PATH` (the agent's, which its replicas get) that lacks any program of
/// [`NEEDED`], naming each one missing and the `PATH` searched.
pub fn check(path: Option<&OsStr>) -> Result<(), String> {
    let path = path.unwrap_or_default();
    let gone = missing(path);
    if gone.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the agent runs every replica under a wrapper that needs {}; not found on PATH ({}): {} \
         (install them, e.g. coreutils, or set PATH)",
        NEEDED.join(", "),
        path.to_string_lossy(),
        gone.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_lacking_a_needed_program_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let host = std::env::var_os("PATH").unwrap();
        for name in ["sh", "cat"] {
            std::os::unix::fs::symlink(find(name, &host).unwrap(), dir.path().join(name)).unwrap();
        }
        // Not executable: not found.
        std::fs::write(dir.path().join("mv"), "").unwrap();
        let e = check(Some(dir.path().as_os_str())).unwrap_err();
        assert!(
            e.contains("not found on PATH") && e.ends_with(": sleep, mv (install them, e.g. coreutils, or set PATH)"),
            "{e}"
        );
        assert!(e.contains(&dir.path().display().to_string()), "names the PATH searched: {e}");
        assert!(check(None).unwrap_err().contains("sh, sleep, mv, cat (install"), "no PATH at all lacks them all");
        assert_eq!(check(Some(&host)), Ok(()), "this host has them");
    }
}
