//! Log lines for people at a terminal: when neither `TROUPE_LOG` nor
//! `RUST_LOG` asks for logs, a warning or an error is one line in the style of
//! Troupe's other messages (`troupe: warning: could not … (err: …)`), without
//! timestamps, levels in capitals, trace ids or span names. Asking for logs
//! with either variable gives the detailed lines instead.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::settings::{ENV_RUST_LOG, ENV_TROUPE_LOG};

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogStyle {
    /// `timestamp LEVEL trace_id=… spans: message fields`: logs someone asked for.
    #[default]
    Detailed,
    /// `troupe: warning: message (field: value)`: one line, nothing else.
    Brief,
}

impl LogStyle {
    /// Brief unless `TROUPE_LOG` or `RUST_LOG` (non-empty) asks for logs.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let asked = [ENV_TROUPE_LOG, ENV_RUST_LOG]
            .into_iter()
            .any(|name| lookup(name).is_some_and(|value| !value.trim().is_empty()));
        if asked { Self::Detailed } else { Self::Brief }
    }
}

/// The word a brief line names a level with.
pub fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "note",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// One brief line: `troupe: LEVEL: message (name: value, …)`, line breaks in
/// the message or the values turned into spaces.
pub fn brief_line(level: Level, message: &str, fields: &[(String, String)]) -> String {
    let flat = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut line = format!("troupe: {}: {}", level_word(level), flat(message));
    if !fields.is_empty() {
        let shown: Vec<String> = fields
            .iter()
            .map(|(name, value)| format!("{name}: {}", flat(value)))
            .collect();
        line.push_str(&format!(" ({})", shown.join(", ")));
    }
    line
}

/// Collects an event's message and fields.
#[derive(Default)]
struct Collected {
    message: String,
    fields: Vec<(String, String)>,
}

impl Visit for Collected {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields
                .push((field.name().to_string(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.fields.push((field.name().to_string(), text));
        }
    }
}

/// The [`LogStyle::Brief`] event format.
#[derive(Debug, Clone, Copy, Default)]
pub struct BriefFormat;

impl<S, N> FormatEvent<S, N> for BriefFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut collected = Collected::default();
        event.record(&mut collected);
        writeln!(
            writer,
            "{}",
            brief_line(
                *event.metadata().level(),
                &collected.message,
                &collected.fields
            )
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_brief_unless_asked_for() {
        let none = |_: &str| None;
        assert_eq!(LogStyle::from_env(none), LogStyle::Brief);
        let empty = |_: &str| Some(" ".to_string());
        assert_eq!(LogStyle::from_env(empty), LogStyle::Brief);
        for name in [ENV_TROUPE_LOG, ENV_RUST_LOG] {
            let asked = |wanted: &str| (wanted == name).then(|| "debug".to_string());
            assert_eq!(LogStyle::from_env(asked), LogStyle::Detailed, "{name}");
        }
    }

    #[test]
    fn a_brief_line_is_one_line_with_its_fields() {
        assert_eq!(
            brief_line(Level::WARN, "could not remove old sessions", &[]),
            "troupe: warning: could not remove old sessions"
        );
        assert_eq!(
            brief_line(
                Level::ERROR,
                "export failed\nbadly",
                &[("err".into(), "connection\nrefused".into())]
            ),
            "troupe: error: export failed badly (err: connection refused)"
        );
    }

    #[test]
    fn events_are_written_as_brief_lines() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let written = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(BriefFormat)
            .with_writer(move || written.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let err = "disk full";
            let span = tracing::warn_span!("inside");
            let _entered = span.enter();
            tracing::warn!(%err, count = 3, "could not save");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "troupe: warning: could not save (err: disk full, count: 3)\n"
        );
    }
}
