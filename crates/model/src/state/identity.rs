//! Applying commands made with a token: the token is checked against the replicated token
//! records at this log index, the command against the token's roles and grants, and the
//! command's events and jobs then name the token's user.

use super::State;
use crate::access::{Subject, TokenHash, TokenSpec, authorize};
use crate::command::{Op, Outcome};
use crate::error::ApplyError;
use crate::event::Event;
use crate::job::JobId;
use crate::name::Name;
use crate::queue::{JobView, Visibility};

impl State {
    /// Once the cluster has tokens, a client command without one is refused, wherever it
    /// came from (the API, a forwarded write, a replayed log entry).
    pub(super) fn check_identity(&self, op: &Op) -> Result<(), ApplyError> {
        if self.actor.is_none() && op.from_client() && self.access.enforced() {
            return Err(ApplyError::Unauthenticated(format!(
                "this cluster requires a token; {} came without one (send `authorization: Bearer TOKEN`, \
                 e.g. set BATON_TOKEN)",
                op.name()
            )));
        }
        Ok(())
    }

    pub(super) fn apply_as(&mut self, token: &TokenHash, op: Op, ev: &mut Vec<Event>) -> Result<Outcome, ApplyError> {
        if matches!(op, Op::As { .. }) || !op.from_client() {
            return Err(ApplyError::invalid("op", format!("As wraps only client commands; {} is not one", op.name())));
        }
        let t = self.access.authenticate(token)?;
        let subject = match &op {
            Op::Cancel { job } | Op::Pause { job } | Op::Resume { job } => self.job_subject(*job),
            Op::CancelArray { array } => self.array_subject(*array),
            _ => None,
        };
        authorize(t, &op, subject)?;
        if let Op::SubmitAfter { spec, after, .. }
        | Op::SubmitArray { spec, after, .. }
        | Op::SubmitElastic { spec, after, .. } = &op
        {
            self.check_dependencies_visible(t, &spec.name, after)?;
        }
        let user = t.spec.user.clone();
        self.actor = Some(user.clone());
        let start = ev.len();
        let outcome = self.dispatch(op, ev);
        self.actor = None;
        // Job events already name the user (`job_event`); queue and node events are named here.
        for e in ev[start..].iter_mut().filter(|e| e.job.is_none()) {
            e.message = by(std::mem::take(&mut e.message), &user);
        }
        outcome
    }

    pub(super) fn add_token(&mut self, hash: TokenHash, spec: TokenSpec) -> Result<(), ApplyError> {
        for q in &spec.queues {
            if !self.d.queues.contains_key(q) {
                return Err(ApplyError::unknown("queue", q));
            }
        }
        self.access.add(hash, spec, self.d.now_ms, self.actor.clone())
    }

    pub(super) fn grant_queue(&mut self, id: &str, queue: Name, granted: bool) -> Result<(), ApplyError> {
        if granted && !self.d.queues.contains_key(&queue) {
            return Err(ApplyError::unknown("queue", &queue));
        }
        self.access.grant(id, queue, granted)
    }

    pub(super) fn grant_queue_admin(&mut self, id: &str, queue: Name, granted: bool) -> Result<(), ApplyError> {
        if granted && !self.d.queues.contains_key(&queue) {
            return Err(ApplyError::unknown("queue", &queue));
        }
        self.access.grant_admin(id, queue, granted)
    }

    /// `message`, naming the user whose command is being applied, if any.
    pub(super) fn by_actor(&self, message: String) -> String {
        match &self.actor {
            Some(u) => by(message, u),
            None => message,
        }
    }
}

fn by(message: String, user: &Name) -> String {
    crate::event::clip_message(format!("{message} (by {user})"))
}

impl State {
    /// What `token` (`None`: no token, `--auth none`) sees of `job`: everything for its
    /// owner, an admin of its queue, operators and admins; for others what the job's queue
    /// shows (docs/security.md, "Who sees which jobs"). The API, the dashboard and the
    /// dependency check ask here, so they agree.
    /// What `token` sees of an array: what it would see of its elements.
    pub fn array_view(&self, token: Option<&crate::access::Token>, a: &crate::array::JobArray) -> JobView {
        self.view_of(token, self.array_subject(a.id).expect("a kept array"))
    }

    pub fn job_view(&self, token: Option<&crate::access::Token>, job: &crate::job::Job) -> JobView {
        self.view_of(token, Subject::of_job(job, self.access.owner(job.id)))
    }

    /// Job `id` (kept) as permissions judge it.
    fn job_subject(&self, id: JobId) -> Option<Subject<'_>> {
        self.d.jobs.get(&id).map(|j| Subject::of_job(j, self.access.owner(id)))
    }

    /// Array `id` (kept) as permissions judge it: as the jobs it makes.
    fn array_subject(&self, id: JobId) -> Option<Subject<'_>> {
        let a = self.array(id)?;
        Some(Subject { name: &a.spec.name, queue: &a.spec.queue, owner: self.access.owner(id) })
    }

    fn view_of(&self, token: Option<&crate::access::Token>, s: Subject) -> JobView {
        let Some(t) = token else {
            return JobView::Private;
        };
        if t.may_see_private(&s) {
            return JobView::Private;
        }
        // An owner whose grant was taken back still sees their job, without its private
        // data (as before visibility existed).
        if s.owner == Some(&t.spec.user) {
            return JobView::Public;
        }
        match self.queue_visibility(s.queue) {
            Visibility::All => JobView::Public,
            Visibility::Names => JobView::Names,
            Visibility::Own => JobView::Hidden,
        }
    }

    /// A user may wait only for jobs they may see: one hidden from them is refused as an
    /// unknown one.
    fn check_dependencies_visible(
        &self,
        t: &crate::access::Token,
        own_name: &Name,
        after: &[crate::after::After],
    ) -> Result<(), ApplyError> {
        for (i, a) in after.iter().enumerate() {
            let id = self.resolve_one(i, own_name, &a.job)?;
            let subject = self.job_subject(id).or_else(|| self.array_subject(id));
            if subject.is_none_or(|s| self.view_of(Some(t), s) == JobView::Hidden) {
                return Err(super::waits::unknown_dependency(i, &a.job));
            }
        }
        Ok(())
    }
}
