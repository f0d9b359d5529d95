//! Telemetry settings from the standard OpenTelemetry variables (SPEC §1.2) plus
//! `[telemetry] capture_content` from the config. Pure: the environment is read
//! through a lookup function, so every rule is unit-tested without touching the
//! process environment. Owns no I/O and builds nothing.

use std::fmt;

/// SPEC §1.2: service name when `OTEL_SERVICE_NAME` is unset.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "troupe";

/// Log filter when neither `TROUPE_LOG` nor `RUST_LOG` is set (the CLI's default).
pub(crate) const DEFAULT_LOG_FILTER: &str = "warn";

/// Path appended to `OTEL_EXPORTER_OTLP_ENDPOINT` for http/protobuf export
/// (OTLP exporter specification: the base endpoint gets the signal path).
pub(crate) const TRACES_PATH: &str = "v1/traces";

/// `OTEL_SDK_DISABLED`: `true` (any case) turns export off.
pub(super) const ENV_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// `OTEL_EXPORTER_OTLP_ENDPOINT`: base URL of the collector.
pub(super) const ENV_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: full URL for traces, used as is.
pub(super) const ENV_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` (default) or `grpc`.
pub(super) const ENV_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_SERVICE_NAME`: the `service.name` resource attribute.
pub(super) const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// `TROUPE_LOG`: log filter (env-filter syntax), checked before `RUST_LOG`.
pub(crate) const ENV_TROUPE_LOG: &str = "TROUPE_LOG";
/// `RUST_LOG`: log filter when `TROUPE_LOG` is unset.
pub(crate) const ENV_RUST_LOG: &str = "RUST_LOG";

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// Protobuf over HTTP (`http/protobuf`), the default.
    HttpProtobuf,
    /// gRPC (`grpc`); needs troupe-telemetry's `grpc` feature.
    Grpc,
}

impl OtlpProtocol {
    /// The spelling used by `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::Grpc => "grpc",
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where spans are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpExport {
    /// Transport.
    pub protocol: OtlpProtocol,
    /// The URL requests go to: for http/protobuf the full traces URL
    /// (`…/v1/traces`), for gRPC the collector's address.
    pub endpoint: String,
}

/// Effective telemetry settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// OTLP export, or `None` when no endpoint is set or the SDK is disabled.
    pub export: Option<OtlpExport>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Record prompt and completion content on spans (`[telemetry] capture_content`).
    pub capture_content: bool,
    /// Filter of the stderr log layer (env-filter syntax).
    pub log_filter: String,
}

impl Default for TelemetrySettings {
    /// No export, default service name, no content, `warn` logs.
    fn default() -> Self {
        Self {
            export: None,
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            capture_content: false,
            log_filter: DEFAULT_LOG_FILTER.to_string(),
        }
    }
}

/// A telemetry variable with a value Troupe cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol Troupe does not speak.
    #[error(
        "{ENV_PROTOCOL}={value:?} is not supported: use \"http/protobuf\" (the default) or \"grpc\""
    )]
    UnsupportedProtocol {
        /// The value found.
        value: String,
    },
    /// gRPC was asked for but this build has no gRPC exporter.
    #[error(
        "{ENV_PROTOCOL}=grpc: this build of troupe has no gRPC exporter (build troupe-telemetry with the \
         `grpc` feature), or use http/protobuf: unset {ENV_PROTOCOL} and point the endpoint at the \
         collector's HTTP port (4318)"
    )]
    GrpcNotBuiltIn,
    /// An endpoint variable is not an http(s) URL.
    #[error("{variable}={value:?} is not a valid endpoint: {reason}")]
    InvalidEndpoint {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
}

impl TelemetrySettings {
    /// Reads the settings through `lookup` (a variable name → its value).
    /// Empty values count as unset. `capture_content` is false here; set it from
    /// the config with [`TelemetrySettings::with_capture_content`].
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());

        let service_name = get(ENV_SERVICE_NAME)
            .map(|name| name.trim().to_string())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        let log_filter = log_filter_from_env(&lookup);

        let disabled =
            get(ENV_SDK_DISABLED).is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
        let export = if disabled {
            None
        } else {
            let protocol = match get(ENV_PROTOCOL) {
                None => OtlpProtocol::HttpProtobuf,
                Some(value) => parse_protocol(&value)?,
            };
            resolve_endpoint(protocol, get(ENV_TRACES_ENDPOINT), get(ENV_ENDPOINT))?
                .map(|endpoint| OtlpExport { protocol, endpoint })
        };
        if let Some(OtlpExport {
            protocol: OtlpProtocol::Grpc,
            ..
        }) = export
            && !cfg!(feature = "grpc")
        {
            return Err(SettingsError::GrpcNotBuiltIn);
        }

        Ok(Self {
            export,
            service_name,
            capture_content: false,
            log_filter,
        })
    }

    /// [`TelemetrySettings::from_env`] over the process environment.
    pub fn from_process_env() -> Result<Self, SettingsError> {
        Self::from_env(|name| std::env::var(name).ok())
    }

    /// Sets `capture_content` (from `[telemetry] capture_content`).
    pub fn with_capture_content(mut self, capture_content: bool) -> Self {
        self.capture_content = capture_content;
        self
    }
}

/// The log filter text: `TROUPE_LOG`, else `RUST_LOG`, else
/// `DEFAULT_LOG_FILTER`; empty values count as unset. Whether it parses is
/// decided where it is used ([`super::log_filter`]).
pub fn log_filter_from_env(lookup: impl Fn(&str) -> Option<String>) -> String {
    let get = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
    get(ENV_TROUPE_LOG)
        .or_else(|| get(ENV_RUST_LOG))
        .unwrap_or_else(|| DEFAULT_LOG_FILTER.to_string())
}

fn parse_protocol(value: &str) -> Result<OtlpProtocol, SettingsError> {
    match value.trim() {
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "grpc" => Ok(OtlpProtocol::Grpc),
        other => Err(SettingsError::UnsupportedProtocol {
            value: other.to_string(),
        }),
    }
}

/// The export URL: the traces variable as is, else the base variable (with
/// [`TRACES_PATH`] appended for http/protobuf), else none (export off).
fn resolve_endpoint(
    protocol: OtlpProtocol,
    traces: Option<String>,
    base: Option<String>,
) -> Result<Option<String>, SettingsError> {
    if let Some(url) = traces {
        let url = url.trim().to_string();
        check_url(ENV_TRACES_ENDPOINT, &url)?;
        return Ok(Some(url));
    }
    let Some(base) = base else {
        return Ok(None);
    };
    let base = base.trim().to_string();
    check_url(ENV_ENDPOINT, &base)?;
    Ok(Some(match protocol {
        OtlpProtocol::HttpProtobuf => append_traces_path(&base),
        OtlpProtocol::Grpc => base,
    }))
}

/// `http://host:4318` → `http://host:4318/v1/traces`; a path already present is
/// kept (`http://host/otel` → `http://host/otel/v1/traces`).
fn append_traces_path(base: &str) -> String {
    format!("{}/{TRACES_PATH}", base.trim_end_matches('/'))
}

fn check_url(variable: &'static str, value: &str) -> Result<(), SettingsError> {
    let invalid = |reason: String| SettingsError::InvalidEndpoint {
        variable,
        value: value.to_string(),
        reason,
    };
    let url = reqwest::Url::parse(value).map_err(|err| invalid(err.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "the scheme must be http or https, not {:?}",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("the URL has no host".to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<TelemetrySettings, SettingsError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TelemetrySettings::from_env(|name| map.get(name).cloned())
    }

    #[test]
    fn nothing_set_means_no_export_and_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s, TelemetrySettings::default());
        assert_eq!(s.service_name, "troupe");
        assert_eq!(s.log_filter, "warn");
        assert!(!s.capture_content);
    }

    #[test]
    fn base_endpoint_gets_the_traces_path() {
        for (base, expected) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            (
                "https://otel.example/base",
                "https://otel.example/base/v1/traces",
            ),
        ] {
            let s = settings(&[(ENV_ENDPOINT, base)]).unwrap();
            assert_eq!(
                s.export,
                Some(OtlpExport {
                    protocol: OtlpProtocol::HttpProtobuf,
                    endpoint: expected.to_string()
                }),
                "{base}"
            );
        }
    }

    #[test]
    fn traces_endpoint_is_used_as_is_and_wins() {
        let s = settings(&[
            (ENV_ENDPOINT, "http://base:4318"),
            (ENV_TRACES_ENDPOINT, "http://collector:9999/custom"),
        ])
        .unwrap();
        assert_eq!(s.export.unwrap().endpoint, "http://collector:9999/custom");
    }

    #[test]
    fn explicit_http_protobuf_is_accepted() {
        let s = settings(&[
            (ENV_ENDPOINT, "http://127.0.0.1:4318"),
            (ENV_PROTOCOL, "http/protobuf"),
        ])
        .unwrap();
        assert_eq!(s.export.unwrap().protocol, OtlpProtocol::HttpProtobuf);
    }

    #[test]
    fn disabled_sdk_turns_export_off_in_any_case() {
        for value in ["true", "TRUE", " True "] {
            let s = settings(&[
                (ENV_ENDPOINT, "http://127.0.0.1:4318"),
                (ENV_SDK_DISABLED, value),
            ])
            .unwrap();
            assert_eq!(s.export, None, "{value}");
        }
        let s = settings(&[
            (ENV_ENDPOINT, "http://127.0.0.1:4318"),
            (ENV_SDK_DISABLED, "false"),
        ])
        .unwrap();
        assert!(s.export.is_some());
    }

    #[test]
    fn disabled_sdk_ignores_a_bad_protocol() {
        let s = settings(&[(ENV_SDK_DISABLED, "true"), (ENV_PROTOCOL, "carrier-pigeon")]).unwrap();
        assert_eq!(s.export, None);
    }

    #[test]
    fn empty_values_count_as_unset() {
        let s = settings(&[
            (ENV_ENDPOINT, ""),
            (ENV_TRACES_ENDPOINT, "  "),
            (ENV_SERVICE_NAME, ""),
            (ENV_PROTOCOL, ""),
        ])
        .unwrap();
        assert_eq!(s, TelemetrySettings::default());
    }

    #[test]
    fn service_name_and_log_filter() {
        let s = settings(&[(ENV_SERVICE_NAME, "troupe-ci"), (ENV_RUST_LOG, "debug")]).unwrap();
        assert_eq!(s.service_name, "troupe-ci");
        assert_eq!(s.log_filter, "debug");
        let s = settings(&[(ENV_TROUPE_LOG, "info"), (ENV_RUST_LOG, "debug")]).unwrap();
        assert_eq!(s.log_filter, "info");
        let s = settings(&[(ENV_TROUPE_LOG, " "), (ENV_RUST_LOG, "debug")]).unwrap();
        assert_eq!(s.log_filter, "debug");
        // Any text is taken here; whether it parses is the pipeline's decision.
        let s = settings(&[(ENV_TROUPE_LOG, "foo=[[[")]).unwrap();
        assert_eq!(s.log_filter, "foo=[[[");
    }

    #[test]
    fn unknown_protocol_is_an_error_naming_the_variable() {
        let err = settings(&[
            (ENV_ENDPOINT, "http://127.0.0.1:4318"),
            (ENV_PROTOCOL, "http/json"),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            SettingsError::UnsupportedProtocol {
                value: "http/json".into()
            }
        );
        assert!(err.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"));
    }

    #[cfg(not(feature = "grpc"))]
    #[test]
    fn grpc_without_the_feature_is_a_clear_error() {
        let err = settings(&[
            (ENV_ENDPOINT, "http://127.0.0.1:4317"),
            (ENV_PROTOCOL, "grpc"),
        ])
        .unwrap_err();
        assert_eq!(err, SettingsError::GrpcNotBuiltIn);
        let text = err.to_string();
        assert!(
            text.contains("grpc") && text.contains("http/protobuf"),
            "{text}"
        );
    }

    #[cfg(not(feature = "grpc"))]
    #[test]
    fn grpc_without_an_endpoint_is_simply_off() {
        let s = settings(&[(ENV_PROTOCOL, "grpc")]).unwrap();
        assert_eq!(s.export, None);
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn grpc_endpoint_is_used_without_a_path() {
        let s = settings(&[
            (ENV_ENDPOINT, "http://127.0.0.1:4317"),
            (ENV_PROTOCOL, "grpc"),
        ])
        .unwrap();
        assert_eq!(
            s.export,
            Some(OtlpExport {
                protocol: OtlpProtocol::Grpc,
                endpoint: "http://127.0.0.1:4317".into()
            })
        );
    }

    #[test]
    fn bad_endpoints_are_errors() {
        for (var, value) in [
            (ENV_ENDPOINT, "127.0.0.1:4318"),
            (ENV_ENDPOINT, "ftp://collector"),
            (ENV_TRACES_ENDPOINT, "not a url"),
        ] {
            let err = settings(&[(var, value)]).unwrap_err();
            match &err {
                SettingsError::InvalidEndpoint { variable, .. } => assert_eq!(*variable, var),
                other => panic!("{value}: {other:?}"),
            }
            assert!(err.to_string().contains(var), "{err}");
        }
    }

    #[test]
    fn capture_content_comes_from_config() {
        let s = settings(&[]).unwrap().with_capture_content(true);
        assert!(s.capture_content);
    }
}
