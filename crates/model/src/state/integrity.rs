//! Checks on replicated data that arrives whole (a snapshot from a peer or the disk) before
//! the ledger is built from it: the ledger indexes by these references and would panic on a
//! dangling one, so damaged or forged data is refused with the reference it breaks.

use super::{Data, Reservation};
use crate::alloc::ReplicaAlloc;
use crate::job::Job;
use crate::limits::{MAX_GPUS_PER_NODE, MAX_RESOURCE_KINDS};

impl Data {
    pub(super) fn check(&self) -> Result<(), String> {
        for (name, n) in &self.nodes {
            if *name != n.spec.name {
                return Err(format!("node {name} is recorded under the name {}", n.spec.name));
            }
        }
        for (name, q) in &self.queues {
            if *name != q.name {
                return Err(format!("queue {name} is recorded under the name {}", q.name));
            }
        }
        let kinds: std::collections::BTreeSet<&str> =
            self.nodes.values().flat_map(|n| n.spec.resources.names()).collect();
        // The ledger's vectors hold the GPU kind and at most this many in all.
        if kinds.len() > MAX_RESOURCE_KINDS {
            return Err(format!("{} resource kinds; at most {MAX_RESOURCE_KINDS}", kinds.len()));
        }
        for (id, job) in &self.jobs {
            check_job(*id, job)?;
            // The ledger charges an unfinished job to its queue (`delete_queue` refuses a
            // queue that has one).
            if !job.state.is_finished() && !self.queues.contains_key(&job.spec.queue) {
                return Err(format!("job {id} is in queue {}, which does not exist", job.spec.queue));
            }
        }
        for (name, id) in &self.job_names {
            if self.jobs.get(id).is_none_or(|j| j.spec.name != *name) {
                return Err(format!("job name {name} refers to job {id}, which does not carry it"));
            }
        }
        for (id, r) in &self.reservations {
            self.check_reservation(*id, r)?;
        }
        Ok(())
    }

    /// A completing job exists, its queue too (its ranks are charged to it), and its ranks
    /// name tasks it has.
    pub(super) fn check_completing(&self, completing: &super::Completing) -> Result<(), String> {
        for (id, c) in completing {
            let job = self.jobs.get(id).ok_or(format!("completing job {id} does not exist"))?;
            if !self.queues.contains_key(&job.spec.queue) {
                return Err(format!("completing job {id} is in queue {}, which does not exist", job.spec.queue));
            }
            let ranks: Vec<ReplicaAlloc> = c.ranks.values().cloned().collect();
            check_replicas(*id, job, &ranks)?;
        }
        Ok(())
    }

    fn check_reservation(&self, id: u64, r: &Reservation) -> Result<(), String> {
        let job = self.jobs.get(&id).filter(|_| r.job == id).ok_or(format!("reservation {id} is for no such job"))?;
        check_replicas(id, job, &r.replicas)
    }
}

fn check_job(id: u64, job: &Job) -> Result<(), String> {
    if job.id != id {
        return Err(format!("job {id} is recorded with id {}", job.id));
    }
    check_replicas(id, job, &job.replicas)?;
    for lend in &job.lent_from {
        check_gpus(id, &lend.gpus)?;
    }
    Ok(())
}

fn check_replicas(id: u64, job: &Job, replicas: &[ReplicaAlloc]) -> Result<(), String> {
    for r in replicas {
        if r.task as usize >= job.spec.tasks.len() {
            return Err(format!("job {id} places task {} of {}", r.task, job.spec.tasks.len()));
        }
        check_gpus(id, &r.gpus)?;
    }
    Ok(())
}

fn check_gpus(id: u64, gpus: &[u32]) -> Result<(), String> {
    match gpus.iter().find(|&&g| u64::from(g) >= MAX_GPUS_PER_NODE) {
        Some(g) => Err(format!("job {id} holds GPU {g}; GPU indices are below {MAX_GPUS_PER_NODE}")),
        None => Ok(()),
    }
}
