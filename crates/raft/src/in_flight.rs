//! A count of calls in flight, each counted while its guard lives: the leader rests after a
//! round while client writes wait (its own clients' and those forwarded by other replicas).

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct InFlight {
    count: AtomicUsize,
}

/// One call between its arrival and its answer; counted while it lives.
#[must_use = "the call counts as in flight only while this lives"]
pub struct Counted<'a> {
    of: &'a InFlight,
}

impl InFlight {
    /// Counts one call until the returned guard is dropped (answered, refused or abandoned
    /// by its caller, its future dropped).
    pub fn begin(&self) -> Counted<'_> {
        self.count.fetch_add(1, Ordering::Relaxed);
        Counted { of: self }
    }

    /// Whether any call is in flight now.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        let before = self.of.count.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a call ended that never began");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_until_its_guard_is_dropped_even_when_abandoned() {
        let calls = InFlight::default();
        assert!(!calls.any());
        let one = calls.begin();
        let two = calls.begin();
        assert!(calls.any());
        drop(one);
        assert!(calls.any(), "one of two is still in flight");
        // A caller that gives up drops its future, and with it the guard.
        let abandoned = async move {
            let _two = two;
            std::future::pending::<()>().await;
        };
        drop(abandoned);
        assert!(!calls.any());
    }
}
