//! A node's agent: every `BEAT_MS` it beats to every replica with what it observed, and
//! acts on the newest grant of the highest term it has seen. It starts a rank only under a
//! valid lease, stops a rank within its grace (checkpointed if the checkpoint fits in it),
//! kills ranks the directive no longer names, and re-sends each observation until a leader
//! says it is committed. The node's watchdog (`Truth::watchdog`) stops every process once
//! the lease runs out, whether the agent runs or not.
//!
//! Its processes and lease live in its journal (`truth::Journal`): a restarted agent finds
//! them again, as the real one does.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_model::command::Observed;
use turmoil::net::UdpSocket;

use crate::timing::BEAT_MS;
use crate::truth::{Devices, Rank, Shared};
use crate::wire::{self, Act, Beat, Grant, Work};

/// Beats whose send time an agent remembers (a grant for an older one is ignored).
const MAX_BEATS_REMEMBERED: usize = 64;
/// Observations waiting for a commit; beyond it the oldest are dropped (the leader then
/// learns of the rank from the directive's next round: it stops naming it, or the node is
/// declared lost).
const MAX_PENDING: usize = 1_024;

struct Agent {
    node: String,
    boot: u64,
    seq: u64,
    sent_ms: BTreeMap<u64, u64>,
    /// Observations not yet committed, each with the first beat that carried it.
    pending: Vec<(u64, Observed)>,
    max_term: u64,
    /// Ranks being stopped: when the stop completes and whether it checkpointed.
    stopping: BTreeMap<Rank, (u64, bool)>,
}

/// The agent of `node`, beating to `replicas` (host names).
pub async fn run(node: String, replicas: Vec<String>, truth: Shared) -> turmoil::Result {
    let sock = UdpSocket::bind(("0.0.0.0", wire::AGENT_PORT)).await?;
    let boot = {
        let mut t = truth.lock();
        let j = t.journals.entry(node.clone()).or_default();
        j.boots += 1;
        j.boots
    };
    truth.record(format!("{node} agent starts (boot {boot})"));
    let mut a = Agent {
        node,
        boot,
        seq: 0,
        sent_ms: BTreeMap::new(),
        pending: Vec::new(),
        max_term: 0,
        stopping: BTreeMap::new(),
    };
    let mut buf = vec![0u8; wire::MAX_DATAGRAM_BYTES];
    loop {
        let until = tokio::time::Instant::now() + Duration::from_millis(BEAT_MS);
        while let Ok(got) = tokio::time::timeout_at(until, sock.recv_from(&mut buf)).await {
            let (n, _) = got?;
            if let Some(g) = wire::decode::<Grant>(&buf[..n]) {
                a.on_grant(&truth, g);
            }
        }
        a.tick(&truth);
        a.beat(&sock, &replicas).await;
    }
}

impl Agent {
    fn observe(&mut self, o: Observed) {
        if self.pending.len() == MAX_PENDING {
            self.pending.remove(0);
        }
        self.pending.push((u64::MAX, o));
    }

    fn on_grant(&mut self, truth: &Shared, g: Grant) {
        if g.boot != self.boot || g.term < self.max_term {
            return;
        }
        let Some(&sent) = self.sent_ms.get(&g.seq) else { return };
        self.max_term = g.term;
        self.pending.retain(|(first, _)| *first > g.acked_seq);
        let now = crate::now_ms();
        let lease_until = {
            let mut t = truth.lock();
            let j = t.journals.entry(self.node.clone()).or_default();
            j.lease_until_ms = j.lease_until_ms.max(sent + g.lease_ms);
            j.lease_until_ms
        };
        if now < lease_until {
            self.act(truth, &g.work, now);
        }
    }

    /// Brings the node's processes to what `work` says.
    fn act(&mut self, truth: &Shared, work: &[Work], now: u64) {
        let named: BTreeMap<Rank, &Work> =
            work.iter().map(|w| (Rank { job: w.job, attempt: w.attempt, rank: w.rank }, w)).collect();
        let mut t = truth.lock();
        // Each process, and whether it is suspended, as the grant found them.
        let running: BTreeMap<Rank, bool> =
            t.journals.entry(self.node.clone()).or_default().processes.iter().map(|(r, p)| (*r, p.suspended)).collect();
        for r in running.keys().filter(|r| !named.contains_key(r)) {
            t.end(now, &self.node, *r, "not in the directive: killed");
            self.stopping.remove(r);
        }
        for (r, w) in named {
            let ended = t.journals.get(&self.node).is_some_and(|j| j.ended.contains(&r));
            match (w.act, running.get(&r).copied()) {
                (Act::Run, Some(true)) => {
                    if let Some(p) = t.journals.get_mut(&self.node).and_then(|j| j.processes.get_mut(&r)) {
                        p.suspended = false;
                    }
                    t.history.record(now, format!("{} resumes {r}", self.node));
                }
                (Act::Run, None) if !ended => {
                    let work_ms = t.work.get(&w.name).map_or(30_000, |x| x.work_ms);
                    let devices = Devices { gpus: &w.gpus, gpu_milli: w.gpu_milli, slices: w.slices };
                    t.start(now, &self.node, r, devices, w.memory_bytes, now + work_ms);
                }
                (Act::Stop, Some(_)) if !self.stopping.contains_key(&r) => {
                    let ckpt = t.work.get(&w.name).map_or(1_000, |x| x.checkpoint_ms);
                    self.stopping.insert(r, (now + ckpt.min(w.grace_ms), ckpt <= w.grace_ms));
                }
                (Act::Stop, None) if !ended => {
                    // Never ran here: reported stopped so its GPUs are freed.
                    t.journals.entry(self.node.clone()).or_default().ended.insert(r);
                    self.observe(Observed::Stopped {
                        job: r.job,
                        attempt: r.attempt,
                        rank: r.rank,
                        checkpointed: false,
                    });
                }
                (Act::Suspend, Some(false)) => {
                    if let Some(p) = t.journals.get_mut(&self.node).and_then(|j| j.processes.get_mut(&r)) {
                        p.suspended = true;
                    }
                    t.suspensions += 1;
                    t.history.record(now, format!("{} suspends {r}", self.node));
                    // Named as the real agent names it (a leader before it sends 0).
                    self.observe(match w.suspension_by {
                        0 => Observed::Stopped { job: r.job, attempt: r.attempt, rank: r.rank, checkpointed: false },
                        by => Observed::Suspended {
                            job: r.job,
                            attempt: r.attempt,
                            rank: r.rank,
                            by,
                            requested_ms: w.suspension_ms,
                        },
                    });
                }
                _ => {}
            }
        }
    }

    /// Exits, completed stops, and what the watchdog stopped.
    fn tick(&mut self, truth: &Shared) {
        let now = crate::now_ms();
        let mut t = truth.lock();
        let journal = t.journals.entry(self.node.clone()).or_default();
        let lapsed = std::mem::take(&mut journal.unreported);
        let processes = journal.processes.clone();
        for o in lapsed {
            self.observe(o);
        }
        self.stopping.retain(|r, _| processes.contains_key(r));
        for (r, p) in &processes {
            if let Some(&(_, checkpointed)) = self.stopping.get(r).filter(|(done, _)| *done <= now) {
                t.end(now, &self.node, *r, if checkpointed { "stopped, checkpointed" } else { "stopped" });
                self.stopping.remove(r);
                self.observe(Observed::Stopped { job: r.job, attempt: r.attempt, rank: r.rank, checkpointed });
            } else if !p.suspended && p.exits_ms <= now && !self.stopping.contains_key(r) {
                t.end(now, &self.node, *r, "exited 0");
                self.observe(Observed::Exited { job: r.job, attempt: r.attempt, rank: r.rank, exit_code: 0 });
            }
        }
    }

    async fn beat(&mut self, sock: &UdpSocket, replicas: &[String]) {
        self.seq += 1;
        let seq = self.seq;
        self.sent_ms.insert(seq, crate::now_ms());
        while self.sent_ms.len() > MAX_BEATS_REMEMBERED {
            self.sent_ms.pop_first();
        }
        for (first, _) in self.pending.iter_mut().take(wire::MAX_OBSERVATIONS) {
            *first = (*first).min(seq);
        }
        let observations = self.pending.iter().take(wire::MAX_OBSERVATIONS).map(|(_, o)| o.clone()).collect();
        let bytes = wire::encode(&Beat { node: self.node.clone(), boot: self.boot, seq, observations });
        for r in replicas {
            // A send to an unreachable host is a lost datagram, as on a real network.
            let _ = sock.send_to(&bytes, (r.as_str(), wire::LEADER_PORT)).await;
        }
    }
}
