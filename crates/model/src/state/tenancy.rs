//! Who a new job runs as, the per-user and per-queue bounds on jobs, and their settings.

use super::State;
use crate::error::ApplyError;
use crate::event::Event;
use crate::job::JobSpec;
use crate::name::Name;
use crate::tenancy::{TenancySettings, UnixUser};

impl State {
    pub(super) fn set_tenancy(&mut self, s: TenancySettings, _ev: &mut Vec<Event>) -> Result<(), ApplyError> {
        s.validate().map_err(|e| ApplyError::invalid("tenancy", e))?;
        self.tenancy.settings = s;
        Ok(())
    }

    /// The Unix user a new job runs as: the one asked for, or the submitting token's user;
    /// `None` for a submit without either (a cluster without tokens). Refuses `root` unless
    /// the cluster allows it, and a token user whose name is not a Unix user name.
    pub(super) fn resolve_run_as(&self, asked: Option<UnixUser>) -> Result<Option<UnixUser>, ApplyError> {
        match (asked, &self.actor) {
            (Some(u), _) => self.allowed_run_as(u).map(Some),
            (None, Some(actor)) => self.default_run_as(actor).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The Unix user the jobs a token's `user` submits run as when the submit names none:
    /// the user's own name, if it is a Unix user name the cluster lets jobs run as. `whoami`
    /// shows it, so a user learns before submitting what the nodes will run their job as.
    pub fn default_run_as(&self, user: &Name) -> Result<UnixUser, ApplyError> {
        let unix = UnixUser::new(user.as_str()).map_err(|e| {
            ApplyError::invalid(
                "run_as",
                format!(
                    "the job would run as its submitter, but {e}; an operator may submit it with --run-as USER, or \
                     an admin make a token named after the Unix user"
                ),
            )
        })?;
        self.allowed_run_as(unix)
    }

    fn allowed_run_as(&self, u: UnixUser) -> Result<UnixUser, ApplyError> {
        if u.is_root() && !self.tenancy.settings.allow_root_jobs {
            return Err(ApplyError::PermissionDenied(format!(
                "jobs may not run as {u}: the cluster setting allow_root_jobs is off (an admin turns it on with \
                 `baton cluster set --allow-root-jobs true`, and agents need --allow-root)"
            )));
        }
        Ok(u)
    }

    /// Refuses a new job when its user or its queue already holds as many unfinished jobs
    /// as the settings allow, naming the setting and its value.
    pub(super) fn check_job_bounds(&self, spec: &JobSpec) -> Result<(), ApplyError> {
        let s = self.tenancy.settings;
        let counts = &self.ledger.unfinished;
        let of_user = self.actor.as_ref().map_or(0, |u| counts.of_user(u));
        let in_queue = counts.of_queue(&spec.queue);
        if let Some(user) = &self.actor
            && of_user >= s.max_jobs_per_user
        {
            return Err(over("user", user, of_user, "max_jobs_per_user", s.max_jobs_per_user));
        }
        if in_queue >= s.max_jobs_per_queue {
            return Err(over("queue", &spec.queue, in_queue, "max_jobs_per_queue", s.max_jobs_per_queue));
        }
        Ok(())
    }
}

fn over(kind: &str, name: &Name, count: u32, setting: &str, max: u32) -> ApplyError {
    let flag = setting.replace('_', "-");
    ApplyError::Limit(format!(
        "{kind} {name} has {count} unfinished jobs, the cluster's {setting} ({max}); wait for some to finish, or an \
         admin raises it with `baton cluster set --{flag} N`"
    ))
}
