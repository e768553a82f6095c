//! Who a replica runs as on this node.
//!
//! Each assignment names the Unix user its job runs as (decided and replicated by the
//! leader). The agent resolves that name on this node, checks it against its own
//! configuration, and the launcher drops to it (supplementary groups, group, user) in the
//! child before exec. An agent run with `--run-as-self` runs every job as its own user, as a
//! development setup does.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};

/// Most supplementary groups looked up for one user.
pub const MAX_GROUPS: usize = 1_024;
/// Most entries in `--run-as-allow`.
pub const MAX_ALLOW_ENTRIES: usize = 1_024;
/// Buffer for one passwd or group record (getpwnam_r, getgrnam_r).
const RECORD_BUF_BYTES: usize = 64 * 1024;

/// What the agent's command line says about users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAsPolicy {
    /// Every job runs as the agent's own user (`--run-as-self`).
    AgentUser,
    /// Jobs run as the user they name, if that user is allowed here.
    Users(AllowList),
}

/// `--run-as-allow`: users by name and groups (`%group`: its members, primary or
/// supplementary), and whether uid 0 may run jobs (`--allow-root`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    pub users: BTreeSet<String>,
    pub groups: BTreeSet<String>,
    pub allow_root: bool,
}

/// A resolved user: what the child drops to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, the primary group included.
    pub groups: Vec<u32>,
    pub home: String,
}

/// Why a job cannot run as the user it names; the text goes to the job's stderr log and its
/// events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunAsError {
    #[error(
        "the job names no Unix user (it was submitted without a token), and this agent runs jobs only as the \
         users of its --run-as-allow"
    )]
    NoUser,
    #[error("Unix user {0:?} does not exist on this node")]
    UnknownUser(String),
    #[error("Unix user {0} is not allowed to run jobs on this node (agent flag --run-as-allow)")]
    NotAllowed(String),
    #[error("Unix user {0} has uid 0 (root) and this agent runs without --allow-root")]
    Root(String),
    #[error("{0}")]
    Lookup(String),
}

impl AllowList {
    /// Parses `--run-as-allow` (`alice,bob,%gpu-users`) and checks, as the agent starts, that
    /// every user and group exists here, so a typo is found at once.
    pub fn parse(entries: &[String], allow_root: bool) -> Result<AllowList, String> {
        let mut out = AllowList { allow_root, ..AllowList::default() };
        if entries.len() > MAX_ALLOW_ENTRIES {
            return Err(format!("--run-as-allow: at most {MAX_ALLOW_ENTRIES} entries"));
        }
        for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            match e.strip_prefix('%') {
                Some(g) => {
                    group_id(g)?.ok_or_else(|| format!("--run-as-allow: no group {g:?} on this node"))?;
                    out.groups.insert(g.to_string());
                }
                None => {
                    let who = lookup_user(e)?.ok_or_else(|| format!("--run-as-allow: no user {e:?} on this node"))?;
                    if who.uid == 0 && !allow_root {
                        return Err(format!("--run-as-allow names {e}, which has uid 0; add --allow-root to mean it"));
                    }
                    out.users.insert(e.to_string());
                }
            }
        }
        if out.users.is_empty() && out.groups.is_empty() {
            return Err("--run-as-allow: name at least one user or %group".into());
        }
        Ok(out)
    }

    /// The identity `name` runs as, if this list allows it.
    pub fn check(&self, name: &str) -> Result<Identity, RunAsError> {
        let who = lookup_user(name).map_err(RunAsError::Lookup)?.ok_or_else(|| RunAsError::UnknownUser(name.into()))?;
        if who.uid == 0 && !self.allow_root {
            return Err(RunAsError::Root(name.into()));
        }
        if self.users.contains(name) {
            return Ok(who);
        }
        for g in &self.groups {
            if let Some(gid) = group_id(g).map_err(RunAsError::Lookup)?
                && who.groups.contains(&gid)
            {
                return Ok(who);
            }
        }
        Err(RunAsError::NotAllowed(name.into()))
    }
}

impl RunAsPolicy {
    /// Who the replica of a job naming `user` (empty: none) runs as; `None`: the agent's own
    /// user.
    pub fn resolve(&self, user: &str) -> Result<Option<Identity>, RunAsError> {
        match self {
            RunAsPolicy::AgentUser => Ok(None),
            RunAsPolicy::Users(_) if user.is_empty() => Err(RunAsError::NoUser),
            RunAsPolicy::Users(list) => list.check(user).map(Some),
        }
    }
}

/// The user `name` with its groups, `None` if there is none.
pub fn lookup_user(name: &str) -> Result<Option<Identity>, String> {
    let c_name = CString::new(name).map_err(|_| format!("user name {name:?} has a NUL byte"))?;
    let mut buf = vec![0 as libc::c_char; RECORD_BUF_BYTES];
    // SAFETY: a zeroed passwd is a valid out-parameter; getpwnam_r fills it with pointers into
    // `buf`, which outlives every read of them below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if found.is_null() {
        return if rc == 0 { Ok(None) } else { Err(format!("cannot look up user {name}: error {rc}")) };
    }
    // SAFETY: pw_dir points into `buf` and is NUL-terminated (getpwnam_r succeeded).
    let home = unsafe { CStr::from_ptr(pw.pw_dir) }.to_string_lossy().into_owned();
    let groups = group_list(&c_name, pw.pw_gid)?;
    Ok(Some(Identity { name: name.to_string(), uid: pw.pw_uid, gid: pw.pw_gid, groups, home }))
}

/// The user's groups (getgrouplist), the primary one first, at most [`MAX_GROUPS`].
fn group_list(name: &CStr, gid: libc::gid_t) -> Result<Vec<u32>, String> {
    let mut groups = vec![0 as libc::gid_t; MAX_GROUPS];
    let mut n = MAX_GROUPS as libc::c_int;
    // SAFETY: `groups` holds `n` entries; getgrouplist writes at most `n` and sets `n`.
    let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
    if rc < 0 {
        return Err(format!("user {} is in more than {MAX_GROUPS} groups", name.to_string_lossy()));
    }
    groups.truncate(n.max(0) as usize);
    Ok(groups)
}

/// The id of group `name`, `None` if there is none.
fn group_id(name: &str) -> Result<Option<u32>, String> {
    let c_name = CString::new(name).map_err(|_| format!("group name {name:?} has a NUL byte"))?;
    let mut buf = vec![0 as libc::c_char; RECORD_BUF_BYTES];
    // SAFETY: as in `lookup_user`; only gr_gid is read.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    let rc = unsafe { libc::getgrnam_r(c_name.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) };
    if found.is_null() {
        return if rc == 0 { Ok(None) } else { Err(format!("cannot look up group {name}: error {rc}")) };
    }
    Ok(Some(gr.gr_gid))
}

/// Drops the calling process to `who`: supplementary groups, then the group, then the user
/// (in this order: once the uid is not 0, the others can no longer change). Called in the
/// child between fork and exec, so it only makes system calls.
pub fn drop_to(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<()> {
    // SAFETY: setgroups, setgid and setuid are async-signal-safe and read only `groups`,
    // which the parent allocated before the fork.
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Checks that a job running as another user can reach `dir`: every directory from the root
/// down to it must be searchable by others (`o+x`). The agent checks its data and checkpoint
/// directories as it starts, so a private one is named at once rather than by every job
/// failing to write its exit file.
pub fn check_searchable(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for d in dir.ancestors() {
        let mode = std::fs::metadata(d).map_err(|e| format!("{}: {e}", d.display()))?.permissions().mode();
        if mode & 0o001 == 0 {
            return Err(format!(
                "{} (mode {:o}) is not searchable by other users, so jobs running as their users cannot reach {}; \
                 chmod o+x it (e.g. 711) or choose another directory",
                d.display(),
                mode & 0o7777,
                dir.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_directory_on_the_way_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("data");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = check_searchable(&inner).unwrap_err();
        assert!(e.contains(&dir.path().display().to_string()) && e.contains("mode 700"), "{e}");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        check_searchable(&inner).unwrap();
    }

    #[test]
    fn root_is_found_with_uid_0_and_unknown_users_are_none() {
        let root = lookup_user("root").unwrap().unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        assert_eq!(lookup_user("baton-no-such-user-x").unwrap(), None);
    }

    #[test]
    fn the_allow_list_names_unknown_users_and_groups_and_root_needs_allow_root() {
        let e = AllowList::parse(&["baton-no-such-user-x".into()], false).unwrap_err();
        assert!(e.contains("no user \"baton-no-such-user-x\""), "{e}");
        let e = AllowList::parse(&["%baton-no-such-group-x".into()], false).unwrap_err();
        assert!(e.contains("no group \"baton-no-such-group-x\""), "{e}");
        let e = AllowList::parse(&["root".into()], false).unwrap_err();
        assert!(e.contains("uid 0") && e.contains("--allow-root"), "{e}");
        assert!(AllowList::parse(&[], false).unwrap_err().contains("at least one"));
        let list = AllowList::parse(&["root".into()], true).unwrap();
        assert_eq!(list.check("root").unwrap().uid, 0);
    }

    #[test]
    fn a_group_on_the_list_admits_its_members_and_uid_0_needs_allow_root() {
        // root is a member of group root (gid 0) on every Linux system.
        let by_group = AllowList::parse(&["%root".into()], false).unwrap();
        assert_eq!(by_group.check("root").unwrap_err(), RunAsError::Root("root".into()));
        let by_group = AllowList { allow_root: true, ..by_group };
        assert_eq!(by_group.check("root").unwrap().uid, 0);
        assert_eq!(
            by_group.check("baton-no-such-user-x").unwrap_err(),
            RunAsError::UnknownUser("baton-no-such-user-x".into())
        );
    }

    #[test]
    fn an_agent_of_its_own_user_runs_everything_and_a_list_needs_a_name() {
        assert_eq!(RunAsPolicy::AgentUser.resolve("").unwrap(), None);
        assert_eq!(RunAsPolicy::AgentUser.resolve("alice").unwrap(), None);
        let users =
            RunAsPolicy::Users(AllowList { users: ["root".into()].into(), allow_root: true, ..Default::default() });
        assert_eq!(users.resolve("").unwrap_err(), RunAsError::NoUser);
    }
}
