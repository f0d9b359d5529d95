//! The names the cluster uses on the NATS server: streams, subjects, the
//! shared consumer and the buckets.

/// The work-queue stream of submissions.
pub const SUBMISSIONS_STREAM: &str = "TROUPE_SUBMISSIONS";
/// The subject submissions are published on.
pub const SUBMIT_SUBJECT: &str = "troupe.submit";
/// The durable pull consumer every node takes submissions from.
pub const SUBMISSIONS_CONSUMER: &str = "troupe-nodes";
/// The stream that holds every event of every run.
pub const EVENTS_STREAM: &str = "TROUPE_EVENTS";
/// The subjects of [`EVENTS_STREAM`].
pub const EVENTS_SUBJECTS: &str = "troupe.events.>";
/// The stream that holds the sessions of clustered runs.
pub const SESSIONS_STREAM: &str = "TROUPE_SESSIONS";
/// The subjects of [`SESSIONS_STREAM`].
pub const SESSIONS_SUBJECTS: &str = "troupe.session.>";
/// The bucket of nodes: node name → `NodeRecord`.
pub const NODES_BUCKET: &str = "troupe_nodes";
/// The bucket of runs: run id → `ClusterRun`.
pub const RUNS_BUCKET: &str = "troupe_runs";
/// The header that carries the W3C trace context of a submission.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The subject of a run's events.
pub fn events_subject(run_id: &str) -> String {
    format!("troupe.events.{run_id}")
}

/// The subject of a session's writes.
pub fn session_subject(session_id: &str) -> String {
    format!("troupe.session.{session_id}")
}

/// The subject on which the node that runs a run answers actions on it.
pub fn action_subject(run_id: &str) -> String {
    format!("troupe.run.{run_id}.action")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_has_its_own_subjects_under_the_streams() {
        assert_eq!(events_subject("r1"), "troupe.events.r1");
        assert!(events_subject("r1").starts_with(EVENTS_SUBJECTS.trim_end_matches('>')));
        assert_eq!(action_subject("r1"), "troupe.run.r1.action");
        assert_eq!(session_subject("s1"), "troupe.session.s1");
        assert!(session_subject("s1").starts_with(SESSIONS_SUBJECTS.trim_end_matches('>')));
    }
}
