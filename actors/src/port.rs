//! How a child actor reports to whoever started it without knowing its
//! message type: a [`Port`] is a callback the parent builds around its own
//! mailbox (a cast of its message), and the child only calls it. An executor
//! reports its tool's output, a compactor its summary, an agent what happens
//! in the run's tree, a run its end — and no actor module imports its
//! parent's messages.

use std::sync::Arc;

/// Where a child's reports of type `T` go.
pub(crate) struct Port<T>(Arc<dyn Fn(T) -> bool + Send + Sync>);

impl<T> Port<T> {
    /// A port that hands each report to `deliver`, which says whether the
    /// receiver took it (false: it is gone).
    pub(crate) fn new(deliver: impl Fn(T) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(deliver))
    }

    /// Reports `value`; false when the receiver is gone.
    pub(crate) fn send(&self, value: T) -> bool {
        (self.0)(value)
    }
}

impl<T> Clone for Port<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn reports_reach_the_receiver_and_a_closed_one_says_so() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let port = Port::new(move |n: u32| {
            sink.lock().unwrap().push(n);
            n < 10
        });
        let copy = port.clone();
        assert!(port.send(1));
        assert!(copy.send(2));
        assert!(!port.send(10), "the receiver refused it");
        assert_eq!(*got.lock().unwrap(), [1, 2, 10]);
    }
}
