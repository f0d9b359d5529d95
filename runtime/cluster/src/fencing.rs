//! The failover decisions as pure functions: whether a node may claim a run
//! delivered to it, and what a refused write means.
//!
//! A node holds a run by two things the server checks: the revision of the
//! run's key in `troupe_runs` (each of its updates names the revision it
//! last wrote) and the last sequence it wrote on the run's subjects (each
//! publish names it). A node that let its lease lapse finds both moved on
//! by the node that claimed the run after it: its next write is refused,
//! and a refusal of that kind means it no longer holds the run.

use troupe_protocol::api::{RunState, RunSummary};

/// What a node does with a submission delivered to it, given the run's
/// record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Claim the run and start it: no node has run it yet.
    Start,
    /// Claim the run and continue it: `from_node` ran it and let its lease
    /// lapse (the queue delivered the submission again).
    TakeOver {
        /// The node that ran it.
        from_node: String,
    },
    /// The run has ended (or its record is gone): the submission is stale
    /// and leaves the queue.
    Drop,
    /// Another node holds the run and the submission was not delivered
    /// again: leave it to the queue, do not run it.
    Leave,
}

/// Whether the node `me`, to which the queue delivered a run's submission
/// for the `deliveries`-th time, may claim it, from the run's record in
/// the cluster (`None`: the cluster holds no record of it).
pub fn claim_decision(record: Option<&RunSummary>, me: &str, deliveries: i64) -> ClaimDecision {
    let Some(record) = record else {
        return ClaimDecision::Drop;
    };
    if record.status != RunState::Running {
        return ClaimDecision::Drop;
    }
    match record.node.as_deref() {
        None => ClaimDecision::Start,
        Some(node) if deliveries > 1 => ClaimDecision::TakeOver {
            from_node: node.to_string(),
        },
        // The first delivery, yet its record names a node: this node
        // restarted under its name before anything was acknowledged, or a
        // record was written by someone else; nobody's lease lapsed.
        Some(node) if node == me => ClaimDecision::TakeOver {
            from_node: node.to_string(),
        },
        Some(_) => ClaimDecision::Leave,
    }
}

/// How a write the server answered with an error is to be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The condition failed: another node wrote since (it claimed the
    /// run). This node no longer holds the run and must stop its copy.
    Fenced,
    /// The server could not be reached or answered otherwise: the write is
    /// lost, but nothing says another node holds the run.
    Unavailable,
}

/// What a failed conditional write means: `wrong_last` is whether the
/// server refused it because the revision or sequence named was not the
/// last one.
pub fn refusal(wrong_last: bool) -> Refusal {
    if wrong_last {
        Refusal::Fenced
    } else {
        Refusal::Unavailable
    }
}

/// What a node whose conditional write was refused does, from who wrote
/// last where it meant to write (`None`: nobody, or a message that does not
/// read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRefusal {
    /// The last write is this node's own (a write whose answer was lost
    /// took effect) or garbage: write again after it.
    WriteAfter,
    /// Another node wrote last: it holds the run; stop.
    Fenced,
}

/// [`AfterRefusal`] for node `me` when `last_writer` wrote last. Garbage is
/// nobody's claim: only a readable write naming another node fences.
pub fn after_refusal(last_writer: Option<&str>, me: &str) -> AfterRefusal {
    match last_writer {
        Some(node) if node != me => AfterRefusal::Fenced,
        _ => AfterRefusal::WriteAfter,
    }
}

/// The sequence number the first event published by a node that took over
/// a run gets: right after the last one the cluster holds. `run_moved` is
/// that event; the run's own events go on from [`first_seq_after_move`].
pub fn moved_event_seq(last_seq: u64) -> u64 {
    last_seq.saturating_add(1)
}

/// The `seq` of the first event the run has on the node that took it over,
/// after `run_moved` (at `moved_seq`).
pub fn first_seq_after_move(moved_seq: u64) -> u64 {
    moved_seq.saturating_add(1)
}

/// Which copy of a session a node continues it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSource {
    /// The node's own store: it holds the session and the cluster holds
    /// nothing newer (or nothing at all).
    Local,
    /// The cluster's copy, read into the node's store first (replacing an
    /// older copy the store holds).
    Cluster,
    /// Neither holds the session.
    Missing,
}

/// Where a node continues a session from: `local_held` whether its store
/// holds the session, `local_at` the sequence of the session's stream its
/// store is known to match (the last write it published or read back;
/// `None` when it does not know, e.g. after a restart), `cluster_last` the
/// sequence of the stream's last write of the session (0: none). The
/// stream's sequence decides; a local copy whose place in the stream is
/// unknown is never replaced, since it may be the newer one.
pub fn session_source(local_held: bool, local_at: Option<u64>, cluster_last: u64) -> SessionSource {
    match (local_held, local_at) {
        (false, _) if cluster_last == 0 => SessionSource::Missing,
        (false, _) => SessionSource::Cluster,
        (true, Some(at)) if cluster_last > at => SessionSource::Cluster,
        (true, _) => SessionSource::Local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_continued_from_the_newer_copy_and_never_from_an_older_one() {
        assert_eq!(session_source(false, None, 0), SessionSource::Missing);
        assert_eq!(session_source(false, None, 7), SessionSource::Cluster);
        assert_eq!(session_source(false, Some(3), 7), SessionSource::Cluster);
        // Another node wrote after this node's copy.
        assert_eq!(session_source(true, Some(3), 7), SessionSource::Cluster);
        // This node wrote last, or wrote what never reached the stream.
        assert_eq!(session_source(true, Some(7), 7), SessionSource::Local);
        assert_eq!(session_source(true, Some(9), 7), SessionSource::Local);
        // Unknown place: the local copy stays.
        assert_eq!(session_source(true, None, 7), SessionSource::Local);
        assert_eq!(session_source(true, None, 0), SessionSource::Local);
        assert_eq!(session_source(true, Some(0), 0), SessionSource::Local);
    }

    fn record(status: RunState, node: Option<&str>) -> RunSummary {
        RunSummary {
            agents: None,
            ended: None,
            node: node.map(str::to_string),
            prompt: "p".into(),
            run_id: "r1".into(),
            session_id: "s1".into(),
            started: "2026-12-04T10:00:00Z".into(),
            status,
            stop_reason: None,
        }
    }

    #[test]
    fn a_run_no_node_took_is_started_by_the_first_node() {
        let waiting = record(RunState::Running, None);
        assert_eq!(claim_decision(Some(&waiting), "b", 1), ClaimDecision::Start);
        // Delivered again before any node claimed it (the first taker died
        // at once): still a start.
        assert_eq!(claim_decision(Some(&waiting), "b", 3), ClaimDecision::Start);
    }

    #[test]
    fn a_run_delivered_again_is_taken_over_from_the_node_that_held_it() {
        let held = record(RunState::Running, Some("a"));
        assert_eq!(
            claim_decision(Some(&held), "b", 2),
            ClaimDecision::TakeOver {
                from_node: "a".into()
            }
        );
        assert_eq!(
            claim_decision(Some(&held), "a", 1),
            ClaimDecision::TakeOver {
                from_node: "a".into()
            }
        );
    }

    #[test]
    fn a_run_held_by_another_node_on_a_first_delivery_is_left_alone() {
        let held = record(RunState::Running, Some("a"));
        assert_eq!(claim_decision(Some(&held), "b", 1), ClaimDecision::Leave);
    }

    #[test]
    fn an_ended_or_unknown_run_is_never_claimed() {
        for status in [
            RunState::Finished,
            RunState::Interrupted,
            RunState::Error,
            RunState::Cancelled,
        ] {
            let ended = record(status, Some("a"));
            assert_eq!(claim_decision(Some(&ended), "b", 2), ClaimDecision::Drop);
        }
        assert_eq!(claim_decision(None, "b", 2), ClaimDecision::Drop);
    }

    #[test]
    fn only_a_failed_condition_fences_a_node() {
        assert_eq!(refusal(true), Refusal::Fenced);
        assert_eq!(refusal(false), Refusal::Unavailable);
    }

    #[test]
    fn only_another_nodes_readable_write_fences_after_a_refusal() {
        assert_eq!(after_refusal(Some("b"), "a"), AfterRefusal::Fenced);
        // A record naming no node is not this node's either.
        assert_eq!(after_refusal(Some(""), "a"), AfterRefusal::Fenced);
        assert_eq!(after_refusal(Some("a"), "a"), AfterRefusal::WriteAfter);
        assert_eq!(after_refusal(None, "a"), AfterRefusal::WriteAfter);
    }

    #[test]
    fn a_moved_run_continues_its_sequence() {
        assert_eq!(moved_event_seq(7), 8);
        // The new node's first own event comes right after run_moved.
        assert_eq!(first_seq_after_move(moved_event_seq(7)), 9);
        assert_eq!(moved_event_seq(u64::MAX), u64::MAX);
    }
}
