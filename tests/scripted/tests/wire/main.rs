//! End-to-end tests of the scripted model server over loopback HTTP with a real
//! reqwest client and a real SSE parser (eventsource-stream).

mod aborts;
mod faults;
mod invariants;
mod rendering;
mod routing;
mod support;
