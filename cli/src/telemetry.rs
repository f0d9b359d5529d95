//! Telemetry for the commands that run agents (SPEC §11): logs on stderr with
//! trace ids, OTLP export when the standard `OTEL_*` variables ask for it, and
//! the local span store in the session store, so `troupe trace RUN` works with
//! no collector. Telemetry never stops a run: a bad setting is a warning.

use std::sync::Arc;

use troupe_store::{SpanWriter, Store};
use troupe_telemetry::{
    SpanRecord, TelemetryError, TelemetryGuard, TelemetrySettings, init, log_filter_from_env,
    render_span_tree,
};

/// The telemetry of one command: the pipeline's guard and the span writer.
pub(crate) struct CliTelemetry {
    guard: Option<TelemetryGuard>,
    writer: Arc<SpanWriter>,
}

/// Starts the process's telemetry with `store` as the local span store. An
/// unusable `OTEL_*` value or an exporter that cannot be set up is one warning
/// and no export; the logs and the local span store work regardless.
pub(crate) fn start(store: &Store) -> CliTelemetry {
    let env = |name: &str| std::env::var(name).ok();
    let settings = TelemetrySettings::from_env(env).unwrap_or_else(|err| {
        eprintln!("troupe: telemetry export is off: {err}");
        without_export(&env)
    });
    let writer = Arc::new(SpanWriter::start(store.clone()));
    let guard = match init(&settings, Some(writer.clone())) {
        Ok(guard) => Some(guard),
        Err(err @ (TelemetryError::Exporter { .. } | TelemetryError::Settings(_))) => {
            eprintln!("troupe: telemetry export is off: {err}");
            match init(&without_export(&env), Some(writer.clone())) {
                Ok(guard) => Some(guard),
                Err(err) => {
                    eprintln!("troupe: telemetry is off: {err}");
                    None
                }
            }
        }
        Err(err) => {
            eprintln!("troupe: telemetry is off: {err}");
            None
        }
    };
    CliTelemetry { guard, writer }
}

/// Settings with export off: only the log filter is taken from `env`.
fn without_export(env: &impl Fn(&str) -> Option<String>) -> TelemetrySettings {
    TelemetrySettings {
        log_filter: log_filter_from_env(env),
        ..TelemetrySettings::default()
    }
}

impl CliTelemetry {
    /// Waits until every span that ended so far is in the store.
    pub(crate) fn sync_spans(&self) {
        self.writer.sync();
    }

    /// At exit: flushes export within the guard's bound, writes the last
    /// spans and flushes the store.
    pub(crate) fn stop(self) {
        if let Some(mut guard) = self.guard
            && let Err(err) = guard.shutdown()
        {
            tracing::warn!(%err, "telemetry did not flush in time");
        }
        self.writer.close();
    }
}

/// The span tree of `run_id` from the store, or `None` when nothing was kept.
pub(crate) fn span_tree(store: &Store, run_id: &str) -> Result<Option<String>, String> {
    let values = store.spans(run_id).map_err(|err| err.to_string())?;
    let records: Vec<SpanRecord> = values
        .into_iter()
        .filter_map(|value| match serde_json::from_value(value) {
            Ok(record) => Some(record),
            Err(err) => {
                tracing::warn!(%err, "an unreadable span record was skipped");
                None
            }
        })
        .collect();
    if records.is_empty() {
        return Ok(None);
    }
    Ok(Some(render_span_tree(&records)))
}
