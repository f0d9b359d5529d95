//! Troupe nodes sharing runs through NATS JetStream.
//!
//! A node connects with [`Cluster::connect`], which creates (or checks) what
//! the cluster needs on the server: the work-queue stream of submissions and
//! the one durable pull consumer every node shares, the stream that holds
//! every event of every run, and the key-value buckets of nodes and runs
//! ([`names`]). From then on the node hands runs to the queue
//! ([`Cluster::submit`]), takes them one at a time while it has room
//! ([`Cluster::take`], a [`Taken`] kept in progress until acknowledged),
//! publishes the events of the runs it runs ([`Cluster::publish_event`]),
//! keeps the runs' records ([`Cluster::put_run`]) and its own heartbeat
//! ([`Cluster::heartbeat`]), reads any run's events ([`Cluster::events`])
//! and routes an action to the node that runs a run ([`Cluster::request_action`],
//! answered through [`Cluster::serve_actions`]).
//!
//! A node holds each run it runs by conditional writes
//! ([`Cluster::put_run_held`], [`Cluster::publish_event_held`],
//! [`Cluster::publish_session`]): the run's session goes to a stream of its
//! own, from which another node reads it back ([`Cluster::stored_session`])
//! when it takes the run over; a write refused on its condition means
//! another node holds the run ([`fencing`]).
//!
//! Every message is a versioned type of [`troupe_protocol::cluster`]; a
//! message that does not read as one is logged and dropped, never acted on.
//! The decisions (room to take a run, a stale heartbeat, masking a URL's
//! secret, which variables of a client's environment are secrets) are the
//! pure functions of [`rules`], [`settings`] and [`environment`].

// Product code never unwraps: errors are values (tests may).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

pub mod control;
pub mod environment;
mod error;
mod failover;
pub mod fencing;
pub mod names;
mod node;
pub mod replicas;
pub mod rules;
pub mod settings;
pub mod workspace;

pub use error::ClusterError;
pub use failover::{HeldWriteError, StoredSession};
pub use node::{
    ACTION_TIMEOUT, ActionRequest, ActionRequests, Cluster, NODE_RECORD_AGE, RETENTION, RunEvents,
    Taken,
};
pub use settings::ClusterSettings;
