//! Decision-quality figures of a run (docs/trace.md): per queue, how long jobs waited (all
//! their time Pending, after requeues too) by gang size, the GPU time the queue used, its preemptions, the GPU
//! time lost since the last checkpoint when its jobs were stopped, and the longest wait;
//! plus the time series `--report` draws.

use std::collections::BTreeMap;

use baton_model::name::Name;
use serde::Serialize;

use crate::output::Secs;

/// Samples kept for the time series; past it, every other sample is dropped and the spacing
/// between samples doubles, so memory stays bounded on any trace.
pub const MAX_SAMPLES: usize = 20_000;

/// One job as the statistics see it.
#[derive(Debug, Clone)]
pub struct JobRec {
    pub queue: usize,
    /// GPUs it holds in all, in thousandths (a fraction of a shared GPU is below 1000).
    pub gpus_milli: u64,
    pub submit_ms: u64,
    pub first_start_ms: Option<u64>,
    /// It ran to its end (Succeeded or Failed).
    pub ended: bool,
    /// Time spent Pending that is over: from submission to the first start, and from each
    /// requeue (a stop that sends it back to Pending) to the next start.
    pub waited_ms: u64,
    /// Pending since then, if it is Pending now.
    pub pending_since_ms: Option<u64>,
}

impl JobRec {
    /// A job just submitted at `submit_ms` (Pending from then).
    pub fn submitted(queue: usize, gpus_milli: u64, submit_ms: u64) -> JobRec {
        JobRec {
            queue,
            gpus_milli,
            submit_ms,
            first_start_ms: None,
            ended: false,
            waited_ms: 0,
            pending_since_ms: Some(submit_ms),
        }
    }

    /// Its wait (docs/trace.md): all its time Pending, a wait still going on counted up to
    /// `end_ms`.
    pub fn wait_ms(&self, end_ms: u64) -> u64 {
        self.waited_ms + self.pending_since_ms.map_or(0, |since| end_ms.saturating_sub(since))
    }

    /// It became Pending (`true`) or stopped being Pending at `now_ms`.
    pub fn set_pending(&mut self, pending: bool, now_ms: u64) {
        match (self.pending_since_ms, pending) {
            (None, true) => self.pending_since_ms = Some(now_ms),
            (Some(since), false) => {
                self.waited_ms += now_ms.saturating_sub(since);
                self.pending_since_ms = None;
            }
            _ => {}
        }
    }
}

/// The queues' state at one instant (GPUs in use and jobs pending, by queue index).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    pub used_gpus: Vec<u64>,
    pub pending: Vec<u64>,
}

/// One preemption: when, who lost their GPUs and to whom (the usage chart marks each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    pub at_ms: u64,
    pub victim: Name,
    /// The victim's queue index.
    pub queue: usize,
    pub by: Name,
    /// The preemptor's queue index, if the preemptor is still known.
    pub by_queue: Option<usize>,
}

/// What the engine accumulates while it runs.
#[derive(Debug, Clone, Default)]
pub struct Collector {
    pub queues: Vec<Name>,
    pub jobs: BTreeMap<u64, JobRec>,
    pub used_gpu_ms: Vec<u128>,
    pub preemptions: Vec<u64>,
    /// Every preemption, in order.
    pub preempted: Vec<Preemption>,
    pub lost_gpu_ms: Vec<u128>,
    pub samples: Vec<Sample>,
    /// Smallest spacing between two kept samples; doubles when the samples are thinned.
    pub sample_every_ms: u64,
}

impl Collector {
    pub fn new(queues: Vec<Name>) -> Collector {
        let n = queues.len();
        Collector {
            queues,
            used_gpu_ms: vec![0; n],
            preemptions: vec![0; n],
            lost_gpu_ms: vec![0; n],
            ..Collector::default()
        }
    }

    /// Adds a sample unless it comes too soon after the last one; thins when full.
    pub fn sample(&mut self, s: Sample) {
        if let Some(last) = self.samples.last_mut() {
            if last.at_ms == s.at_ms {
                *last = s;
                return;
            }
            if s.at_ms < last.at_ms + self.sample_every_ms {
                return;
            }
        }
        self.samples.push(s);
        if self.samples.len() >= MAX_SAMPLES {
            let kept: Vec<Sample> = self.samples.drain(..).step_by(2).collect();
            self.samples = kept;
            self.sample_every_ms = (self.sample_every_ms * 2).max(1);
        }
    }

    /// The figures of the run, `end_ms` its last instant; `cap_gpu_ms` the GPU time the
    /// cluster had.
    pub fn summarize(&self, end_ms: u64, cap_gpu_ms: u128) -> Vec<QueueStats> {
        let mut waits: Vec<BTreeMap<u64, Vec<u64>>> = vec![BTreeMap::new(); self.queues.len()];
        let mut never = vec![0u64; self.queues.len()];
        let mut longest = vec![0u64; self.queues.len()];
        let mut counts = vec![0u64; self.queues.len()];
        for j in self.jobs.values() {
            let wait = j.wait_ms(end_ms);
            if j.first_start_ms.is_none() {
                never[j.queue] += 1;
            }
            longest[j.queue] = longest[j.queue].max(wait);
            counts[j.queue] += 1;
            waits[j.queue].entry(gang_bucket(j.gpus_milli)).or_default().push(wait);
        }
        let ratio = |used: u128| if cap_gpu_ms == 0 { 0.0 } else { round4(used as f64 / cap_gpu_ms as f64) };
        (0..self.queues.len())
            .map(|q| QueueStats {
                queue: self.queues[q].clone(),
                jobs: counts[q],
                never_started: never[q],
                wait_by_gang: waits[q]
                    .iter_mut()
                    .map(|(&upper, w)| {
                        w.sort_unstable();
                        GangWait {
                            gpus: bucket_label(upper),
                            jobs: w.len() as u64,
                            p50: Secs(percentile(w, 50)),
                            p99: Secs(percentile(w, 99)),
                            max: Secs(*w.last().unwrap_or(&0)),
                        }
                    })
                    .collect(),
                gpu_utilization: ratio(self.used_gpu_ms[q]),
                gpu_hours: round4(self.used_gpu_ms[q] as f64 / 3_600_000.0),
                preemptions: self.preemptions[q],
                lost_gpu_hours: round4(self.lost_gpu_ms[q] as f64 / 3_600_000.0),
                longest_wait: Secs(longest[q]),
            })
            .collect()
    }
}

/// Per queue, as printed by `baton sim trace`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct QueueStats {
    pub queue: Name,
    pub jobs: u64,
    /// Jobs still waiting for their first start when the run ended (their wait runs to the end).
    pub never_started: u64,
    pub wait_by_gang: Vec<GangWait>,
    /// The queue's share of the cluster's GPU time (all queues add up to the cluster's).
    pub gpu_utilization: f64,
    pub gpu_hours: f64,
    pub preemptions: u64,
    /// GPU time run since the last checkpoint by jobs when they were stopped (preempted, at
    /// their time limit or on a lost node).
    pub lost_gpu_hours: f64,
    pub longest_wait: Secs,
}

/// Waits (all time Pending) of jobs of one gang size (total GPUs, by power-of-two bucket).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GangWait {
    pub gpus: String,
    pub jobs: u64,
    pub p50: Secs,
    pub p99: Secs,
    pub max: Secs,
}

/// The bucket of a job of `gpus_milli` thousandths of GPUs, as the most thousandths it
/// holds: 0 for a job of no GPU (MIG slices or CPUs only), 999 for a fraction of one shared
/// GPU, else the smallest power of two of whole GPUs at or above it.
pub fn gang_bucket(gpus_milli: u64) -> u64 {
    match gpus_milli {
        0 => 0,
        1..=999 => 999,
        m => m.div_ceil(1000).next_power_of_two() * 1000,
    }
}

/// `0`, `<1`, `1`, `2`, `3-4`, `5-8`, ...: the GPUs the jobs of a bucket hold.
pub fn bucket_label(upper_milli: u64) -> String {
    match upper_milli {
        0 => "0".to_string(),
        999 => "<1".to_string(),
        m if m <= 2000 => (m / 1000).to_string(),
        m => format!("{}-{}", m / 2000 + 1, m / 1000),
    }
}

/// Nearest-rank percentile of sorted values: the smallest value with at least `p`% of the
/// values at or below it.
pub fn percentile(sorted: &[u64], p: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() as u64 * p).div_ceil(100).max(1) as usize;
    sorted[rank - 1]
}

/// What `baton sim trace -o json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    pub cluster: String,
    pub trace: String,
    pub jobs: u64,
    pub summary: crate::output::Summary,
    pub queues: Vec<QueueStats>,
}

/// The readable table of a trace run.
pub fn text(r: &TraceReport) -> String {
    use std::fmt::Write;
    let s = &r.summary;
    let mut out = format!(
        "trace {} on {}: {} jobs, {} finished, end t={}s, GPU utilization {:.2}%, {} preemptions\n",
        r.trace,
        r.cluster,
        r.jobs,
        s.finished,
        s.end,
        s.gpu_utilization * 100.0,
        s.preemptions
    );
    for q in &r.queues {
        let _ = writeln!(
            out,
            "\nqueue {}: {} jobs ({} never started), GPU utilization {:.2}% ({} GPU-h), {} preemptions, \
             {} GPU-h lost since last checkpoint, longest wait {}s",
            q.queue,
            q.jobs,
            q.never_started,
            q.gpu_utilization * 100.0,
            q.gpu_hours,
            q.preemptions,
            q.lost_gpu_hours,
            q.longest_wait
        );
        let _ =
            writeln!(out, "  {:>9} {:>8} {:>12} {:>12} {:>12}", "gpus", "jobs", "wait p50 s", "wait p99 s", "max s");
        for g in &q.wait_by_gang {
            let _ = writeln!(
                out,
                "  {:>9} {:>8} {:>12} {:>12} {:>12}",
                g.gpus,
                g.jobs,
                g.p50.to_string(),
                g.p99.to_string(),
                g.max.to_string()
            );
        }
    }
    out
}

fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 99), percentile(&v, 100)), (50, 99, 100));
        assert_eq!((percentile(&[7], 50), percentile(&[7], 99)), (7, 7));
        assert_eq!(percentile(&[1, 2, 3], 50), 2);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn gang_buckets_are_powers_of_two() {
        let labels: Vec<String> = [1, 2, 3, 4, 5, 8, 9, 64].map(|g| bucket_label(gang_bucket(g * 1000))).to_vec();
        assert_eq!(labels, ["1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "33-64"]);
        // Section 11: fractions of a shared GPU wait in a bucket of their own; 1.5 GPUs in all
        // (three halves) waits with the gangs of 2.
        let labels: Vec<String> = [250, 999, 1500].map(|m| bucket_label(gang_bucket(m))).to_vec();
        assert_eq!(labels, ["<1", "<1", "2"]);
        // A job on MIG slices holds no GPU (section 11): a bucket of its own, first.
        assert_eq!(bucket_label(gang_bucket(0)), "0");
        assert!(gang_bucket(0) < gang_bucket(250) && gang_bucket(250) < gang_bucket(1000));
    }

    #[test]
    fn samples_thin_out_past_the_bound() {
        let mut c = Collector::new(vec![Name::lit("a")]);
        for t in 0..(MAX_SAMPLES as u64 * 3) {
            c.sample(Sample { at_ms: t, used_gpus: vec![t], pending: vec![0] });
        }
        assert!(c.samples.len() < MAX_SAMPLES);
        assert!(c.samples.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
        assert_eq!(c.samples[0].at_ms, 0);
    }
}
