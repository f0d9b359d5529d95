//! The cluster's decisions as pure functions: whether a node has room for
//! another run, when a heartbeat is stale, how often leases are renewed.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How many more runs a node with `capacity` runs now `running` may take.
pub fn free_slots(capacity: u32, running: usize) -> u32 {
    let running = u32::try_from(running).unwrap_or(u32::MAX);
    capacity.saturating_sub(running)
}

/// Whether a node may take another run: not draining, and below its
/// capacity.
pub fn may_take(capacity: u32, running: usize, draining: bool) -> bool {
    !draining && free_slots(capacity, running) > 0
}

/// How often a node renews what it holds (its runs' in-progress
/// acknowledgements and its heartbeat): three times per lease.
pub fn renewal_period(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(100))
}

/// Whether a heartbeat written `at` (RFC 3339) is stale `now`: older than
/// the lease, or unreadable (a record nobody can vouch for).
pub fn heartbeat_stale(at: &str, now: DateTime<Utc>, lease: Duration) -> bool {
    let Ok(at) = DateTime::parse_from_rfc3339(at) else {
        return true;
    };
    let age = now.signed_duration_since(at.with_timezone(&Utc));
    chrono::Duration::from_std(lease).is_ok_and(|lease| age > lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_takes_runs_only_below_its_capacity_and_while_not_draining() {
        assert_eq!(free_slots(4, 0), 4);
        assert_eq!(free_slots(4, 3), 1);
        assert_eq!(free_slots(4, 4), 0);
        assert_eq!(free_slots(2, 9), 0);
        assert!(may_take(2, 1, false));
        assert!(!may_take(2, 2, false));
        assert!(!may_take(2, 0, true));
    }

    #[test]
    fn leases_are_renewed_three_times_per_lease() {
        assert_eq!(
            renewal_period(Duration::from_secs(15)),
            Duration::from_secs(5)
        );
        assert_eq!(renewal_period(Duration::ZERO), Duration::from_millis(100));
    }

    #[test]
    fn a_heartbeat_older_than_the_lease_or_unreadable_is_stale() {
        let now = DateTime::parse_from_rfc3339("2026-12-04T10:00:20Z")
            .unwrap()
            .with_timezone(&Utc);
        let lease = Duration::from_secs(15);
        assert!(!heartbeat_stale("2026-12-04T10:00:10Z", now, lease));
        assert!(!heartbeat_stale("2026-12-04T10:00:05Z", now, lease));
        assert!(heartbeat_stale("2026-12-04T10:00:04Z", now, lease));
        assert!(heartbeat_stale("yesterday", now, lease));
        // A clock ahead of ours is not stale.
        assert!(!heartbeat_stale("2026-12-04T10:01:00Z", now, lease));
    }
}
