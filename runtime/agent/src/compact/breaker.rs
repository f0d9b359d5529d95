//! The circuit breaker of automatic summaries: three failures in a row open
//! it; five turns later it lets one attempt through (half-open), which closes
//! it on success or opens it again on failure. Manual and emergency
//! compactions neither consult nor move it.

/// Consecutive failures that open the breaker.
pub(crate) const FAILURES_TO_OPEN: u32 = 3;
/// Turns after which an open breaker lets one attempt through.
pub(crate) const TURNS_TO_HALF_OPEN: u32 = 5;

/// The breaker's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Breaker {
    failures: u32,
    /// The turn it opened at.
    opened_at: Option<u32>,
}

impl Breaker {
    /// Whether an automatic summary may be tried at `turn`.
    pub(crate) fn allows(&self, turn: u32) -> bool {
        match self.opened_at {
            None => true,
            Some(opened) => turn >= opened + TURNS_TO_HALF_OPEN,
        }
    }

    /// Whether it is open (no automatic summaries until it half-opens).
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.opened_at.is_some()
    }

    /// An automatic summary failed at `turn`.
    pub(crate) fn failed(&mut self, turn: u32) {
        self.failures += 1;
        if self.opened_at.is_some() || self.failures >= FAILURES_TO_OPEN {
            self.opened_at = Some(turn);
        }
    }

    /// An automatic summary worked.
    pub(crate) fn succeeded(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_three_failures_and_half_opens_five_turns_later() {
        let mut breaker = Breaker::default();
        breaker.failed(1);
        breaker.failed(2);
        assert!(breaker.allows(3) && !breaker.is_open());
        breaker.failed(3);
        assert!(breaker.is_open());
        assert!(!breaker.allows(4) && !breaker.allows(7));
        assert!(breaker.allows(8), "half-open after five turns");
        // The half-open attempt fails: open again from that turn.
        breaker.failed(8);
        assert!(!breaker.allows(12) && breaker.allows(13));
        breaker.succeeded();
        assert!(!breaker.is_open() && breaker.allows(13));
        breaker.failed(14);
        assert!(
            !breaker.is_open(),
            "one failure after a success does not open it"
        );
    }
}
