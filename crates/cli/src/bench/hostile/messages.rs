//! The hostile bench's messages, from a seeded generator: an agent's attach and reports, a
//! user's client calls, each random in its values and, one time in a few, maximal in its
//! sizes (the most a message may hold, and beyond). And the arithmetic of the apply
//! histogram the bench reads from the leader's /metrics.

use std::collections::BTreeMap;

use baton_proto::v1::{
    AttachRequest, Exited, GpuDevice, GpuHealth, JobLogsRequest, JobRef, JobSpec, ListJobsRequest, LogsRequest,
    NodeInfo, Observation, ReportRequest, Resources, Running, Stopped, SubmitRequest, TaskSpec, Unkillable, Unrecorded,
    WatchRequest, observation,
};
use baton_rng::SplitMix64;

use super::Tally;
use crate::client::connect::Api;

/// The most a message may be, sent and received (the replicas' bound).
pub const MAX_MESSAGE_BYTES: usize = baton_proto::MAX_MESSAGE_BYTES;
/// Client calls on one connection before the next replica is dialled.
pub const CALLS_PER_CONNECTION: u32 = 64;
/// Entries of a maximal report: the gateway's bound on each list, and one past it.
const MAX_ENTRIES: u64 = baton_model::limits::MAX_REPORT_RUNNING as u64 + 1;
/// Longest text a hostile field carries.
const MAX_TEXT: u64 = 64 * 1024;
/// A stream a hostile user opens is read this long, then dropped.
const STREAM_READ_MS: u64 = 200;

pub struct Gen {
    rng: SplitMix64,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { rng: SplitMix64::new(seed) }
    }

    /// A value that is one time in four the largest of its type, else small.
    fn num(&mut self, small: u64) -> u64 {
        match self.rng.below(4) {
            0 => u64::MAX,
            _ => self.rng.below(small.max(1)),
        }
    }

    /// The term an agent says it has seen: mostly none, now and then one above any leader's
    /// (which a leader refuses as deposing it, and must not step down for).
    fn term(&mut self) -> u64 {
        if self.rng.chance(10) { self.num(1_000) } else { 0 }
    }

    fn num32(&mut self, small: u64) -> u32 {
        self.num(small).min(u64::from(u32::MAX)) as u32
    }

    /// Text of a random length (sometimes maximal), of random characters: for a field of
    /// its own.
    fn text(&mut self) -> String {
        let len = if self.rng.chance(10) { MAX_TEXT } else { self.rng.below(40) };
        self.chars(len)
    }

    /// Short text of random characters: for the entries of a list, which may be maximal in
    /// number (a maximal list of maximal texts would be far past any message bound).
    fn word(&mut self) -> String {
        let len = self.rng.below(40);
        self.chars(len)
    }

    fn chars(&mut self, len: u64) -> String {
        (0..len).map(|_| char::from_u32(self.rng.range(1, 0x2FF) as u32).unwrap_or('x')).collect()
    }

    /// How many entries a list gets: sometimes the bound and one more.
    fn count(&mut self) -> u64 {
        if self.rng.chance(15) { MAX_ENTRIES } else { self.rng.below(20) }
    }

    /// Node `evil`: three times in four a node as an agent would declare it (8 GPUs), else
    /// with random resources, GPUs, labels and addresses.
    pub fn attach(&mut self) -> AttachRequest {
        let node = if self.rng.chance(75) {
            NodeInfo {
                name: "evil".into(),
                pool: "default".into(),
                resources: [("gpu".to_string(), 8), ("cpu".to_string(), 64)].into(),
                gpus: (0..8).map(|i| GpuDevice { index: i, healthy: true, ..Default::default() }).collect(),
                ..Default::default()
            }
        } else {
            let gpus =
                (0..self.rng.below(70)).map(|i| GpuDevice { index: i as u32, healthy: true, ..Default::default() });
            NodeInfo {
                name: "evil".into(),
                pool: if self.rng.chance(80) { "default".into() } else { self.text() },
                rack: String::new(),
                labels: (0..self.rng.below(10)).map(|i| (format!("k{i}"), self.word())).collect(),
                resources: [("gpu".to_string(), self.num(8)), ("cpu".to_string(), self.num(64))].into(),
                gpus: gpus.collect(),
                agent_addr: self.text(),
                domains: (0..self.rng.below(9)).map(|_| (self.word(), self.text())).collect(),
            }
        };
        AttachRequest { node: Some(node), term_seen: self.term() }
    }

    /// A report of node `evil` (now and then of another node): random replicas it claims to
    /// run and random observations of random jobs.
    pub fn report(&mut self) -> ReportRequest {
        let node = if self.rng.chance(95) { "evil".to_string() } else { "node-1".to_string() };
        let running = (0..self.count())
            .map(|_| Running {
                job_id: self.num(1_000),
                attempt: self.num32(5),
                task: self.num32(3),
                replica: self.num32(8),
                rank: self.num32(8),
                phase: self.rng.below(5) as i32,
            })
            .collect();
        let observations = (0..self.count()).map(|_| self.observation()).collect();
        ReportRequest { node, term_seen: self.term(), running, observations, awaiting_state_index: self.num(1_000) }
    }

    fn observation(&mut self) -> Observation {
        let (job_id, attempt, rank) = (self.num(1_000), self.num32(5), self.num32(8));
        let what = match self.rng.below(6) {
            0 => observation::What::Exited(Exited {
                job_id,
                attempt,
                rank,
                exit_code: self.rng.next_u64() as i32,
                reason: self.word(),
            }),
            1 => observation::What::Stopped(Stopped {
                job_id,
                attempt,
                rank,
                checkpointed: self.rng.chance(50),
                cause: self.rng.below(8) as i32,
                ..Default::default()
            }),
            2 => observation::What::Checkpointed(baton_proto::v1::Checkpointed { job_id, attempt, rank }),
            3 => observation::What::Unkillable(Unkillable { job_id, attempt, rank, reason: self.word() }),
            4 => observation::What::Unrecorded(Unrecorded { job_id, attempt, rank, reason: self.word() }),
            _ => observation::What::Gpu(GpuHealth {
                gpu: self.num32(16),
                healthy: self.rng.chance(50),
                error: self.word(),
                by_check: self.rng.chance(50),
            }),
        };
        Observation { what: Some(what) }
    }

    /// A job spec: half the time one that may be taken (a short job of the hostile queue,
    /// now and then with a long command and environment), else random names, sizes and
    /// resources, now and then maximal.
    fn spec(&mut self) -> JobSpec {
        if self.rng.chance(50) {
            let gpus = self.rng.below(3);
            let mut spec = baton_proto::make::gpu_job(
                &format!("m{}", self.rng.below(100_000)),
                super::HOSTILE_QUEUE,
                "",
                1,
                gpus,
                vec!["sleep".into(), "1".into()],
            );
            if self.rng.chance(20) {
                spec.command.extend((0..1_000).map(|_| self.word()));
                spec.env = (0..100).map(|i| (format!("V{i}"), self.word())).collect();
            }
            return spec;
        }
        self.random_spec()
    }

    fn random_spec(&mut self) -> JobSpec {
        let tasks = (0..self.count().min(300))
            .map(|_| TaskSpec {
                name: self.word(),
                replicas: self.num32(4),
                resources: Some(Resources { amounts: [("gpu".to_string(), self.num(4))].into() }),
                pools: (0..self.rng.below(3)).map(|_| self.word()).collect(),
                min_replicas: None,
            })
            .collect();
        JobSpec {
            name: if self.rng.chance(70) { format!("m{}", self.rng.below(10_000)) } else { self.text() },
            queue: if self.rng.chance(80) { super::HOSTILE_QUEUE.into() } else { self.text() },
            tasks,
            pools: (0..self.count().min(1_000)).map(|_| self.word()).collect(),
            command: (0..self.count().min(10_000)).map(|_| self.word()).collect(),
            env: (0..self.count().min(1_000)).map(|_| (self.word(), self.word())).collect(),
            grace_ms: Some(self.num(60_000)),
            min_runtime_ms: self.num(60_000),
            ..Default::default()
        }
    }

    /// One random client call as mallory, its outcome counted.
    pub async fn client_call(&mut self, c: &mut Api, tally: &Tally) {
        let job = JobRef { id: self.num(1_000), name: self.text() };
        match self.rng.below(7) {
            0 | 1 => {
                let req = SubmitRequest { spec: Some(self.spec()), request_id: self.text(), ..Default::default() };
                tally.count(&c.submit(req).await);
            }
            2 => {
                let req = ListJobsRequest {
                    page_size: self.num32(1_000),
                    page_token: self.text(),
                    states: (0..self.rng.below(20)).map(|_| self.rng.next_u64() as i32).collect(),
                    ..Default::default()
                };
                tally.count(&c.list_jobs(req).await);
            }
            3 => tally.count(&c.get_job(job).await),
            4 => tally.count(&c.cancel_job(job).await),
            5 => {
                let r = c.watch(WatchRequest { job: self.text(), replay: self.rng.chance(50) }).await;
                tally.count(&r);
                if let Ok(s) = r {
                    read_a_while(s.into_inner()).await;
                }
            }
            _ => {
                let logs = LogsRequest { job: self.text(), job_id: self.num(1_000), ..Default::default() };
                let r = c.job_logs(JobLogsRequest { node: self.text(), logs: Some(logs) }).await;
                tally.count(&r);
                if let Ok(s) = r {
                    read_a_while(s.into_inner()).await;
                }
            }
        }
    }
}

/// Reads a stream for [`STREAM_READ_MS`], then drops it.
async fn read_a_while<T>(mut s: tonic::Streaming<T>) {
    let within = std::time::Duration::from_millis(STREAM_READ_MS);
    let _ = tokio::time::timeout(within, async { while let Ok(Some(_)) = s.message().await {} }).await;
}

/// Histogram `name` of a Prometheus text exposition, every label set added up: its
/// cumulative count by bucket bound, in nanoseconds (`+Inf` as `u64::MAX`).
pub fn histogram(text: &str, name: &str) -> BTreeMap<u64, f64> {
    let mut out = BTreeMap::new();
    let prefix = format!("{name}_bucket{{");
    for line in text.lines().filter(|l| l.starts_with(&prefix)) {
        let Some((labels, value)) = line.rsplit_once(' ') else { continue };
        let Some(le) = labels.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else { continue };
        let bound = match le {
            "+Inf" => u64::MAX,
            s => s.parse::<f64>().map_or(u64::MAX, |v| (v * 1e9).round() as u64),
        };
        *out.entry(bound).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// `after` minus `before`, bucket by bucket: what was observed in between.
pub fn difference(after: &BTreeMap<u64, f64>, before: &BTreeMap<u64, f64>) -> BTreeMap<u64, f64> {
    after.iter().map(|(b, n)| (*b, n - before.get(b).copied().unwrap_or(0.0))).collect()
}

/// The bound of the first bucket holding quantile `q` of a cumulative histogram: the value
/// is at most that. `None` when it is empty.
pub fn quantile_bound(h: &BTreeMap<u64, f64>, q: f64) -> Option<u64> {
    let total = h.values().copied().fold(0.0, f64::max);
    if total <= 0.0 {
        return None;
    }
    h.iter().find(|(_, n)| **n >= total * q).map(|(b, _)| *b)
}

/// `N applies, p50 <= .. ms, p99 <= .. ms` of a cumulative histogram.
pub fn quantiles_line(h: &BTreeMap<u64, f64>) -> String {
    let total = h.values().copied().fold(0.0, f64::max);
    let at = |q| match quantile_bound(h, q) {
        Some(u64::MAX) => "above every bucket".to_string(),
        Some(ns) => format!("<= {:.3} ms", ns as f64 / 1e6),
        None => "-".to_string(),
    };
    format!("{total:.0} applies, p50 {}, p99 {}, p99.9 {}", at(0.5), at(0.99), at(0.999))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE baton_apply_seconds histogram\n\
        baton_apply_seconds_bucket{kind=\"Submit\",le=\"0.001\"} 90\n\
        baton_apply_seconds_bucket{kind=\"Submit\",le=\"0.004\"} 99\n\
        baton_apply_seconds_bucket{kind=\"Submit\",le=\"+Inf\"} 100\n\
        baton_apply_seconds_bucket{kind=\"Tick\",le=\"0.001\"} 10\n\
        baton_apply_seconds_bucket{kind=\"Tick\",le=\"0.004\"} 10\n\
        baton_apply_seconds_bucket{kind=\"Tick\",le=\"+Inf\"} 10\n";

    #[test]
    fn the_buckets_of_every_kind_add_up_and_quantiles_take_the_bucket_bound() {
        let h = histogram(TEXT, "baton_apply_seconds");
        assert_eq!(h, BTreeMap::from([(1_000_000, 100.0), (4_000_000, 109.0), (u64::MAX, 110.0)]));
        assert_eq!(quantile_bound(&h, 0.5), Some(1_000_000));
        assert_eq!(quantile_bound(&h, 0.99), Some(4_000_000));
        assert_eq!(quantile_bound(&h, 1.0), Some(u64::MAX));
        let before = BTreeMap::from([(1_000_000, 100.0), (4_000_000, 100.0), (u64::MAX, 100.0)]);
        let window = difference(&h, &before);
        assert_eq!(quantile_bound(&window, 0.5), Some(4_000_000), "the window holds only the slower ones");
        assert_eq!(quantile_bound(&BTreeMap::new(), 0.5), None);
    }

    #[test]
    fn the_same_seed_makes_the_same_messages() {
        let (mut a, mut b) = (Gen::new(7), Gen::new(7));
        for _ in 0..20 {
            assert_eq!(a.report(), b.report());
            assert_eq!(a.attach(), b.attach());
        }
    }
}
