//! The operator's health-check program (`--health-check CMD`, like Slurm's
//! HealthCheckProgram or an NHC script), run by `sh -c` every interval with a bound on its
//! time. Exit 0: healthy. Anything else fails the GPUs its output names, one line each, as
//! `gpu N: what is wrong`; a failure that names none fails every GPU of the node. When the
//! operator allows it (`--health-check-clears`), a check that passes again clears the
//! GPUs it had failed; otherwise a person does (`baton gpu healthy`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;

use super::Recorder;

/// Output read from one run; the rest is ignored.
const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Longest message kept per GPU.
const MAX_MESSAGE_BYTES: usize = 400;

#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// The command line, given to `sh -c`.
    pub command: String,
    pub interval_ms: u64,
    /// A run longer than this fails every GPU ("timed out").
    pub timeout_ms: u64,
    /// A passing run clears what earlier runs found.
    pub clears: bool,
}

impl HealthCheck {
    /// Runs the check every interval until the task is dropped.
    pub async fn run(self, recorder: Arc<Recorder>) {
        let mut failing: BTreeMap<u32, String> = BTreeMap::new();
        loop {
            let found = self.once(recorder.gpus()).await;
            for (gpu, error) in &found {
                if failing.get(gpu) != Some(error) {
                    recorder.fault(*gpu, error, true);
                }
            }
            if self.clears {
                for gpu in failing.keys().filter(|g| !found.contains_key(g)) {
                    recorder.passed(*gpu);
                }
            }
            failing = found;
            tokio::time::sleep(Duration::from_millis(self.interval_ms)).await;
        }
    }

    /// One run: the GPUs it fails, with why.
    pub async fn once(&self, gpus: u32) -> BTreeMap<u32, String> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(&self.command).stdin(std::process::Stdio::null()).kill_on_drop(true);
        let run = tokio::time::timeout(Duration::from_millis(self.timeout_ms), cmd.output()).await;
        let (code, text) = match run {
            Err(_) => return every(gpus, &format!("health check timed out after {} ms", self.timeout_ms)),
            Ok(Err(e)) => return every(gpus, &format!("health check could not run: {e}")),
            Ok(Ok(out)) => {
                let mut bytes = out.stdout;
                bytes.extend_from_slice(&out.stderr);
                bytes.truncate(MAX_OUTPUT_BYTES);
                (out.status.code(), String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        if code == Some(0) {
            return BTreeMap::new();
        }
        let named = parse(&text, gpus);
        if !named.is_empty() {
            return named;
        }
        let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
        let how = match code {
            Some(c) => format!("exit code {c}"),
            None => "killed by a signal".into(),
        };
        let why = if first.is_empty() { how } else { format!("{how}: {}", clip(first)) };
        every(gpus, &format!("health check failed ({why})"))
    }
}

/// `gpu N: message` lines naming GPUs this node has; the first message per GPU is kept.
pub fn parse(text: &str, gpus: u32) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("gpu ") else { continue };
        let Some((index, message)) = rest.split_once(':') else { continue };
        let Ok(gpu) = index.trim().parse::<u32>() else { continue };
        if gpu < gpus {
            out.entry(gpu).or_insert_with(|| format!("health check: {}", clip(message.trim())));
        }
    }
    out
}

fn every(gpus: u32, why: &str) -> BTreeMap<u32, String> {
    (0..gpus).map(|g| (g, why.to_string())).collect()
}

fn clip(s: &str) -> &str {
    if s.len() <= MAX_MESSAGE_BYTES {
        return s;
    }
    let mut cut = MAX_MESSAGE_BYTES;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(command: &str) -> HealthCheck {
        HealthCheck { command: command.into(), interval_ms: 1_000, timeout_ms: 2_000, clears: false }
    }

    #[test]
    fn lines_name_the_gpus_that_failed() {
        let got = parse("ok\ngpu 2: row remap failed\ngpu 9: not here\ngpu 2: again\n gpu 0 : hot\n", 8);
        let want: BTreeMap<u32, String> =
            [(0, "health check: hot".into()), (2, "health check: row remap failed".into())].into();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_run_passes_fails_named_gpus_or_fails_all_of_them() {
        assert!(check("true").once(4).await.is_empty());
        let named = check("echo 'gpu 1: dcgmi diag level 1 failed'; exit 3").once(4).await;
        assert_eq!(named.keys().copied().collect::<Vec<_>>(), vec![1]);
        let all = check("echo 'nvidia-smi not found' >&2; exit 127").once(2).await;
        assert_eq!(all.len(), 2);
        assert_eq!(all[&0], "health check failed (exit code 127: nvidia-smi not found)");
        let slow = HealthCheck { timeout_ms: 100, ..check("sleep 5") }.once(1).await;
        assert!(slow[&0].contains("timed out"), "{slow:?}");
    }
}
