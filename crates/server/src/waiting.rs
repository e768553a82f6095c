//! Client writes waiting on this replica: what the leader's rest after a round makes room
//! for (`leader::rest_after`).
//!
//! A round's cycle takes a CPU the applies that acknowledge submissions also need. While
//! submissions wait, the leader rests long after each round; while none waits, a long rest
//! only delays the next step of work already decided (a preemptor waits on the round that
//! places it once its victims stopped, then on the one that starts it).

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub(crate) struct ClientWrites {
    waiting: AtomicUsize,
}

/// One client write between its arrival and its answer; counted while it lives.
#[must_use = "the write counts as waiting only while this lives"]
pub(crate) struct Waiting<'a> {
    of: &'a ClientWrites,
}

impl ClientWrites {
    /// Counts one write until the returned guard is dropped (answered, refused or
    /// abandoned by its caller).
    pub(crate) fn begin(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting { of: self }
    }

    /// Whether any client write waits for its answer now.
    pub(crate) fn any(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) > 0
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let before = self.of.waiting.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a client write ended that never began");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waits_until_its_guard_is_dropped_even_when_abandoned() {
        let writes = ClientWrites::default();
        assert!(!writes.any());
        let one = writes.begin();
        let two = writes.begin();
        assert!(writes.any());
        drop(one);
        assert!(writes.any(), "one of two still waits");
        // A caller that gives up drops its future, and with it the guard.
        let abandoned = async move {
            let _two = two;
            std::future::pending::<()>().await;
        };
        drop(abandoned);
        assert!(!writes.any());
    }
}
