//! The verdict of a chaos run, from what the jobs witnessed and how they ended.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use baton_proto::v1::Job;

pub struct Report {
    pub seconds: u64,
    pub faults: Vec<String>,
    /// Jobs whose submit the cluster acknowledged.
    pub acknowledged: usize,
    pub succeeded: usize,
    /// Jobs that ran more than one attempt (preempted, or requeued).
    pub rerun: usize,
    /// Replica starts that resumed from a checkpoint (first step above 0).
    pub resumed: usize,
    pub starts: usize,
    /// Broken promises; empty for a good run.
    pub violations: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Judges a run: `jobs` is the final state of every job the cluster lists, `acked` the
    /// names it acknowledged, `witness` the directory the workloads recorded into.
    pub fn judge(seconds: u64, faults: Vec<String>, acked: &[String], jobs: &[Job], witness: &Path) -> Report {
        let mut violations: Vec<String> = read_lines(&witness.join("violations"));
        let by_name: BTreeMap<&str, &Job> =
            jobs.iter().filter_map(|j| j.spec.as_ref().map(|s| (s.name.as_str(), j))).collect();
        let mut succeeded = 0;
        for name in acked {
            match by_name.get(name.as_str()) {
                None => violations.push(format!("acknowledged job {name} is lost: the cluster does not list it")),
                Some(j) if j.state == "Succeeded" => succeeded += 1,
                Some(j) => violations.push(format!(
                    "acknowledged job {name} did not succeed: {} after attempt {} ({})",
                    j.state, j.attempt, j.reason
                )),
            }
        }
        let starts = read_lines(&witness.join("starts"));
        let mut seen: BTreeMap<(String, String, String), usize> = BTreeMap::new();
        let mut resumed = 0;
        for line in &starts {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [job, attempt, rank, _node, first, _at_ms] = f[..] else {
                violations.push(format!("unreadable start record {line:?}"));
                continue;
            };
            *seen.entry((job.into(), attempt.into(), rank.into())).or_default() += 1;
            if first.parse::<u64>().is_ok_and(|s| s > 0) {
                resumed += 1;
            }
        }
        for ((job, attempt, rank), n) in &seen {
            if *n > 1 {
                violations.push(format!("{job} attempt {attempt} rank {rank} started {n} times"));
            }
        }
        let rerun = jobs.iter().filter(|j| j.attempt > 1).count();
        // A run that injected nothing or preempted nothing proves nothing.
        if faults.is_empty() {
            violations.push("the run proved nothing: no fault was injected".into());
        }
        if resumed == 0 {
            violations.push("the run proved nothing: no job resumed from a checkpoint".into());
        }
        Report {
            seconds,
            faults,
            acknowledged: acked.len(),
            succeeded,
            rerun,
            resumed,
            starts: starts.len(),
            violations,
        }
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "chaos run of {} s: {} faults", self.seconds, self.faults.len())?;
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        writeln!(
            f,
            "jobs: {} acknowledged, {} succeeded, {} ran more than once; {} replica starts, {} resumed from a checkpoint",
            self.acknowledged, self.succeeded, self.rerun, self.starts, self.resumed
        )?;
        if self.violations.is_empty() {
            writeln!(f, "no violation: every promise held")
        } else {
            writeln!(f, "{} violations:", self.violations.len())?;
            for v in &self.violations {
                writeln!(f, "  {v}")?;
            }
            Ok(())
        }
    }
}
