//! Trace-context propagation (DESIGN principle 5): how a parent span travels
//! across actor messages, tasks and child processes so that one run is one
//! trace. Owns the conversions between `tracing` spans, OpenTelemetry contexts
//! and W3C `traceparent` strings; creates no spans of its own.
//!
//! **Inside the process a message carries a [`tracing::Span`]**, not an
//! [`opentelemetry::Context`]:
//! - the [`super::genai`] helpers take the parent as `&Span`, so a handler
//!   creates its child span directly from the message, with the exact parent,
//!   whatever span happens to be current on the actor's thread;
//! - the child is linked on both sides: the OpenTelemetry parent id *and* the
//!   `tracing` parent (log lines inside the child show the parent's fields);
//! - a handle keeps its span open, so a parent always ends after the children it
//!   started (an owner drops its handles when its step ends; a message must not
//!   be kept beyond the step that sent it);
//! - it costs one reference-count increment and works the same when telemetry
//!   is off (`Span::none()`).
//!
//! An [`opentelemetry::Context`] would only carry the OpenTelemetry half, and it
//! can be attached to a span only before that span starts. It is the right type
//! at the edges, where a context arrives from outside the process: a
//! `traceparent` from a daemon client or from the `TRACEPARENT` environment
//! variable is turned into a context with `context_from_traceparent` and set
//! as the remote parent of the run's root span with [`set_remote_parent`].
//! Going out, [`traceparent_of`] / [`current_traceparent`] give the string for a
//! child process's `TRACEPARENT` (hooks, stdio MCP servers) or an HTTP header.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Environment variable a child process gets the parent's `traceparent` in
/// (the convention of OpenTelemetry's environment-carrier proposal and of
/// tools such as `otel-cli`).
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// The W3C header / carrier key.
pub(crate) const TRACEPARENT_HEADER: &str = "traceparent";

/// The OpenTelemetry context of a span (empty when telemetry is off or the span
/// is disabled). Starts the span's OpenTelemetry side if it was not yet started.
pub(crate) fn context_of(span: &Span) -> Context {
    span.context()
}

/// The W3C `traceparent` of a span, or `None` when the span has no valid
/// OpenTelemetry context (telemetry off, span disabled).
pub fn traceparent_of(span: &Span) -> Option<String> {
    traceparent_of_context(&context_of(span))
}

/// The W3C `traceparent` of the current span, for a child process's
/// `TRACEPARENT_ENV`.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&Span::current())
}

/// The W3C `traceparent` of an OpenTelemetry context.
pub(crate) fn traceparent_of_context(cx: &Context) -> Option<String> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove(TRACEPARENT_HEADER)
}

/// Parses a W3C `traceparent` into a context whose span is the remote parent,
/// or `None` when the text is not a valid `traceparent`.
pub(crate) fn context_from_traceparent(traceparent: &str) -> Option<Context> {
    let mut carrier: HashMap<String, String> = HashMap::new();
    carrier.insert(
        TRACEPARENT_HEADER.to_string(),
        traceparent.trim().to_string(),
    );
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Why a remote parent could not be attached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropagationError {
    /// The text is not a W3C `traceparent`.
    #[error("not a valid W3C traceparent: {0:?}")]
    InvalidTraceparent(String),
    /// The span already started (a child exists or it was entered), or telemetry is off.
    #[error("cannot set the parent of this span: {0}")]
    NotAttached(String),
}

/// Makes the span described by `traceparent` the parent of `span` (a root span
/// that was just created and not yet entered), so a run started by an outside
/// caller continues the caller's trace.
pub fn set_remote_parent(span: &Span, traceparent: &str) -> Result<(), PropagationError> {
    let cx = context_from_traceparent(traceparent)
        .ok_or_else(|| PropagationError::InvalidTraceparent(traceparent.to_string()))?;
    span.set_parent(cx)
        .map_err(|err| PropagationError::NotAttached(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trips_through_a_context() {
        let cx = context_from_traceparent(TP).unwrap();
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote());
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(traceparent_of_context(&cx).as_deref(), Some(TP));
    }

    #[test]
    fn invalid_traceparents_are_rejected() {
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        ] {
            assert!(context_from_traceparent(bad).is_none(), "{bad}");
        }
        assert_eq!(traceparent_of_context(&Context::new()), None);
    }

    #[test]
    fn without_a_subscriber_there_is_no_traceparent() {
        assert_eq!(traceparent_of(&Span::none()), None);
        assert_eq!(current_traceparent(), None);
        assert!(matches!(
            set_remote_parent(&Span::none(), "garbage"),
            Err(PropagationError::InvalidTraceparent(_))
        ));
        assert!(matches!(
            set_remote_parent(&Span::none(), TP),
            Err(PropagationError::NotAttached(_))
        ));
    }
}
