//! Telemetry for the commands that run agents (SPEC §11): logs on stderr with
//! trace ids, OTLP export when the standard `OTEL_*` variables ask for it, and
//! the local span store in the session store, so `troupe trace RUN` works with
//! no collector. Telemetry never stops a run: a bad setting is a warning.

use std::sync::Arc;

use troupe_store::{SpanWriter, Store};
use troupe_telemetry::{
    LogStyle, RunExports, SpanRecord, SpanSink, Telemetry, TelemetryError, TelemetryGuard,
    TelemetrySettings, log_filter_from_env, render_span_tree,
};

/// The telemetry of one command: the pipeline's guard and the span writer.
pub(crate) struct CliTelemetry {
    guard: Option<TelemetryGuard>,
    writer: Arc<SpanWriter>,
    /// Runs exported where their client asked (the daemon's runs).
    runs: RunExports,
    /// The settings the pipeline runs with.
    settings: TelemetrySettings,
}

/// The pipeline of `settings`, with the local span store and the per-run
/// exports, installed as the process's.
fn init(
    settings: &TelemetrySettings,
    writer: Arc<SpanWriter>,
    runs: &RunExports,
    log_style: LogStyle,
) -> Result<TelemetryGuard, TelemetryError> {
    Telemetry::builder(settings)
        .log_style(log_style)
        .local_sink(writer as Arc<dyn SpanSink>)
        .span_processor(runs.clone())
        .build()?
        .install()
}

/// Starts the process's telemetry with `store` as the local span store. An
/// unusable `OTEL_*` value or an exporter that cannot be set up is one warning
/// and no export; the logs and the local span store work regardless. Log
/// lines look as `log_style` says.
pub(crate) fn start(store: &Store, log_style: LogStyle) -> CliTelemetry {
    let env = |name: &str| std::env::var(name).ok();
    let settings = TelemetrySettings::from_env(env).unwrap_or_else(|err| {
        eprintln!("troupe: telemetry export is off: {err}");
        without_export(&env)
    });
    let writer = Arc::new(SpanWriter::start(store.clone()));
    let runs = RunExports::new();
    let mut settings = settings;
    let guard = match init(&settings, writer.clone(), &runs, log_style) {
        Ok(guard) => Some(guard),
        Err(err @ (TelemetryError::Exporter { .. } | TelemetryError::Settings(_))) => {
            eprintln!("troupe: telemetry export is off: {err}");
            settings = without_export(&env);
            match init(&settings, writer.clone(), &runs, log_style) {
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
    CliTelemetry {
        guard,
        writer,
        runs,
        settings,
    }
}

/// How the log lines of a command run at a terminal look: brief (one line
/// per warning, in Troupe's style) unless `TROUPE_LOG` or `RUST_LOG` asks for
/// logs. The daemon, whose log is a file, keeps detailed lines.
pub(crate) fn terminal_log_style() -> LogStyle {
    LogStyle::from_env(|name| std::env::var(name).ok())
}

/// Settings with export off: only the log filter is taken from `env`.
fn without_export(env: &impl Fn(&str) -> Option<String>) -> TelemetrySettings {
    TelemetrySettings {
        log_filter: log_filter_from_env(env),
        ..TelemetrySettings::default()
    }
}

impl CliTelemetry {
    /// Where spans are exported (OTLP), if anywhere.
    pub(crate) fn otlp_endpoint(&self) -> Option<String> {
        self.settings
            .export
            .as_ref()
            .map(|export| export.endpoint.clone())
    }

    /// The log filter.
    pub(crate) fn log_filter(&self) -> String {
        self.settings.log_filter.clone()
    }

    /// Where runs go whose client asked for an export of its own.
    pub(crate) fn per_run(&self) -> PerRunExport {
        PerRunExport {
            runs: self.runs.clone(),
            own: self.settings.export.clone(),
            log_filter: self.settings.log_filter.clone(),
        }
    }

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

/// How the daemon exports each run where its client asked: the client's
/// `OTEL_*` variables travel with the run, and a run whose client names an
/// endpoint other than the daemon's gets an exporter of its own.
#[derive(Clone)]
pub(crate) struct PerRunExport {
    runs: RunExports,
    /// Where the daemon itself exports.
    own: Option<troupe_telemetry::OtlpExport>,
    /// The daemon's log filter.
    log_filter: String,
}

/// What a run's client asked for, as far as the daemon must act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientExport {
    /// Nothing beyond what the daemon does anyway.
    AsTheDaemon,
    /// An export of the run's own.
    Own(TelemetrySettings),
    /// Settings the daemon cannot use: why (one warning for the client).
    Unusable(String),
}

impl PerRunExport {
    /// What a client with environment `vars` asks for.
    pub(crate) fn wanted(&self, vars: &std::collections::BTreeMap<String, String>) -> ClientExport {
        let lookup = |name: &str| vars.get(name).cloned();
        match TelemetrySettings::from_env(lookup) {
            Ok(settings) => match &settings.export {
                Some(export) if Some(export) != self.own.as_ref() => ClientExport::Own(settings),
                _ => ClientExport::AsTheDaemon,
            },
            Err(err) => {
                ClientExport::Unusable(format!("telemetry export of this run is off: {err}"))
            }
        }
    }

    /// The warning for a client with environment `vars` whose log filter
    /// the daemon does not follow (see [`log_filter_notice`]).
    pub(crate) fn log_notice(
        &self,
        vars: &std::collections::BTreeMap<String, String>,
    ) -> Option<String> {
        let set = |name: &str| vars.get(name).filter(|value| !value.trim().is_empty());
        let asked = set("TROUPE_LOG")
            .map(|value| ("TROUPE_LOG", value.as_str()))
            .or_else(|| set("RUST_LOG").map(|value| ("RUST_LOG", value.as_str())));
        log_filter_notice(asked, &self.log_filter)
    }

    /// Announces a run about to be submitted with an export of its own.
    pub(crate) fn announce_run(&self) {
        self.runs.expect_run();
    }

    /// The announced run was not submitted.
    pub(crate) fn withdraw(&self) {
        self.runs.expected_no_more();
    }

    /// Exports `run_id` as `settings` say; a warning for its client when
    /// that cannot be done.
    pub(crate) fn start(&self, run_id: &str, settings: &TelemetrySettings) -> Option<String> {
        self.runs
            .export_run(run_id, settings)
            .err()
            .map(|err| format!("telemetry export of this run is off: {err}"))
    }
}

/// What a run's client is told when it set a log filter (`variable` =
/// `asked`, from `TROUPE_LOG` or else `RUST_LOG`) that differs from the
/// daemon's (`daemon`): the daemon writes one log for every run, at its own
/// filter, where the client does not see it, so the client's filter cannot
/// be honoured for one run. `None` when the client set none or the same one.
pub(crate) fn log_filter_notice(asked: Option<(&str, &str)>, daemon: &str) -> Option<String> {
    let (variable, asked) = asked?;
    (asked.trim() != daemon.trim()).then(|| {
        format!(
            "{variable}={} does not apply to this run: it runs in the daemon, whose log (filter \
             {:?}) holds every run's lines; to see this run's log here, run it with --no-daemon, \
             or restart the daemon with this filter (`troupe daemon stop`, then run again with \
             {variable} set)",
            asked.trim(),
            daemon.trim()
        )
    })
}

#[cfg(test)]
mod log_notice_tests {
    use super::*;

    #[test]
    fn a_client_filter_other_than_the_daemons_is_one_warning() {
        assert_eq!(log_filter_notice(None, "warn"), None);
        assert_eq!(
            log_filter_notice(Some(("TROUPE_LOG", "warn")), "warn"),
            None
        );
        assert_eq!(
            log_filter_notice(Some(("TROUPE_LOG", " debug ")), "debug"),
            None
        );
        let notice = log_filter_notice(Some(("RUST_LOG", "troupe=debug")), "warn").unwrap();
        assert!(
            notice.starts_with(
                "RUST_LOG=troupe=debug does not apply to this run: it runs in the daemon, whose \
                 log (filter \"warn\")"
            ),
            "{notice}"
        );
        assert!(notice.contains("--no-daemon"), "{notice}");
        assert!(!notice.contains('\n'), "one line: {notice}");
    }
}
