//! End-to-end tests of the scripted model server over loopback HTTP with a real
//! reqwest client and a real SSE parser (eventsource-stream).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod aborts;
mod faults;
mod invariants;
mod rendering;
mod responses;
mod routing;
mod support;
