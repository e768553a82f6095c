//! Constructors for the messages the local tools build most (`baton dev --demo`,
//! `baton bench`, the chaos harness, tests): GPUs as resources, a queue with a GPU quota in
//! the default pool, a one-task GPU job.

use crate::v1::{JobSpec, PoolQuota, Queue, Resources, TaskSpec};

/// `n` GPUs and nothing else.
pub fn gpus(n: u64) -> Resources {
    Resources { amounts: [("gpu".to_string(), n)].into() }
}

/// A queue guaranteed `gpus` GPUs in pool `default`, every other field at its default.
pub fn gpu_queue(name: &str, gpus: u64) -> Queue {
    let quota = PoolQuota { pool: "default".into(), nominal: Some(self::gpus(gpus)), ..Default::default() };
    Queue { name: name.into(), quotas: vec![quota], ..Default::default() }
}

/// A job of one task, `main`: `replicas` replicas of `gpus` GPUs each, running `command`.
pub fn gpu_job(name: &str, queue: &str, class: &str, replicas: u32, gpus: u64, command: Vec<String>) -> JobSpec {
    JobSpec {
        name: name.into(),
        queue: queue.into(),
        priority_class: class.into(),
        tasks: vec![TaskSpec {
            name: "main".into(),
            replicas,
            resources: Some(self::gpus(gpus)),
            pools: vec![],
            min_replicas: None,
        }],
        command,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constructors_fill_what_they_name_and_default_the_rest() {
        let q = gpu_queue("team-a", 8);
        assert_eq!((q.name.as_str(), q.quotas.len(), q.cohort.as_str()), ("team-a", 1, ""));
        assert_eq!(q.quotas[0].pool, "default");
        assert_eq!(q.quotas[0].nominal.as_ref().unwrap().amounts["gpu"], 8);
        let j = gpu_job("j", "team-a", "train", 2, 4, vec!["sh".into()]);
        assert_eq!((j.tasks[0].name.as_str(), j.tasks[0].replicas), ("main", 2));
        assert_eq!(j.tasks[0].resources, Some(gpus(4)));
        assert_eq!((j.priority_class.as_str(), j.grace_ms), ("train", None));
    }
}
