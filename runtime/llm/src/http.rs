//! HTTP plumbing shared by the adapters: the per-provider `reqwest` client, the
//! reading of error responses and rate-limit headers, and the streaming call that
//! sends a request, retries it per [`RetryPolicy`] while nothing was delivered
//! (yielding a `StreamEvent::Retrying` before each wait), applies the idle
//! timeout to every wait, and decodes the body.
//!
//! It knows HTTP and the retry rules but no provider's JSON: an adapter supplies a
//! `Wire` (its SSE decoder and its error-envelope parser) and the request body
//! bytes. Dropping the returned stream drops the in-flight response, which aborts
//! the connection; no task outlives the stream.

use std::sync::{Arc, Once};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::retry::{RetryPolicy, Retrying};
use super::sse::{ByteStream, DecodeStream, WireDecoder, excerpt};
use super::{ChatRequest, EventStream, ProviderError, ProviderErrorKind, StreamEvent};
use troupe_config::ResolvedProvider;

/// Time allowed to open a TCP (and TLS) connection to the provider.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an unused keep-alive connection stays in the pool.
pub(crate) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// TCP keep-alive probe interval, so a silently dead peer is noticed.
pub(crate) const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Most bytes of an error response body that are read.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// `User-Agent` of every request.
pub(crate) const USER_AGENT: &str = concat!("troupe/", env!("CARGO_PKG_VERSION"));

/// Milliseconds to wait before retrying (non-standard, sent by Anthropic and OpenAI).
pub(crate) const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
/// Seconds (or an HTTP-date) to wait before retrying (RFC 9110).
pub(crate) const RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");
/// The server's own retry decision, `true` or `false`.
pub(crate) const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
/// Anthropic's request id header.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
/// OpenAI's (and most compatible servers') request id header.
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Installs ring as the process's rustls crypto provider, once. reqwest is built
/// without a provider of its own; an already installed provider is kept.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err means another provider is already installed, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Builds the HTTP client of one provider: keep-alive pool, connect timeout, no
/// overall request timeout (streams last minutes; the idle timeout guards them).
pub fn build_client(provider: &str, url: &reqwest::Url) -> Result<reqwest::Client, ProviderError> {
    install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_keepalive(TCP_KEEPALIVE)
        .user_agent(USER_AGENT);
    if url.scheme() == "http" {
        // A plain-HTTP endpoint (a local server) needs no trust store: skip
        // reading the system's root certificates, a few ms of every start.
        builder = builder.tls_certs_only(Vec::new());
    }
    builder.build().map_err(|err| {
        ProviderError::new(
            provider,
            ProviderErrorKind::Configuration,
            format!("cannot build the HTTP client: {}", error_chain(&err)),
        )
    })
}

/// The delay a response asks for: `retry-after-ms` first, then `retry-after` as
/// seconds or as an HTTP-date (relative to `now`). Unparsable or negative values
/// are ignored.
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    if let Some(ms) = header_str(headers, &RETRY_AFTER_MS).and_then(parse_non_negative) {
        return Duration::try_from_secs_f64(ms / 1_000.0).ok();
    }
    let value = header_str(headers, &RETRY_AFTER)?;
    if let Some(secs) = parse_non_negative(value) {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let date = DateTime::parse_from_rfc2822(value).ok()?;
    let delta = date.with_timezone(&Utc) - now;
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

/// The `x-should-retry` header, when it says `true` or `false`.
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match header_str(headers, &X_SHOULD_RETRY)? {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The provider's request id (`request-id`, else `x-request-id`).
pub(crate) fn request_id(headers: &HeaderMap) -> Option<String> {
    header_str(headers, &REQUEST_ID)
        .or_else(|| header_str(headers, &X_REQUEST_ID))
        .map(str::to_string)
}

fn header_str<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
}

fn parse_non_negative(text: &str) -> Option<f64> {
    text.parse::<f64>()
        .ok()
        .filter(|value| value.is_finite() && *value >= 0.0)
}

/// Whether an HTTP status is a success (2xx).
pub(crate) fn is_success(status: u16) -> bool {
    reqwest::StatusCode::from_u16(status).is_ok_and(|code| code.is_success())
}

/// The error kind an HTTP status means when the body says nothing more specific.
pub(crate) fn status_kind(status: u16) -> ProviderErrorKind {
    match status {
        401 | 403 => ProviderErrorKind::Authentication,
        402 => ProviderErrorKind::Quota,
        // A request over the size limit needs the same remedy as an over-long
        // prompt: make the history smaller.
        413 => ProviderErrorKind::PromptTooLong,
        429 => ProviderErrorKind::RateLimited,
        529 => ProviderErrorKind::Overloaded,
        400..=499 => ProviderErrorKind::InvalidRequest,
        500..=599 => ProviderErrorKind::Server,
        _ => ProviderErrorKind::MalformedResponse,
    }
}

/// Where the key of a provider comes from, for the advice of an
/// authentication error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySource {
    /// The provider entry's name (`[providers.NAME]`).
    pub provider: String,
    /// The environment variable `api_key_env` names.
    pub api_key_env: String,
    /// True when a key was sent with the request.
    pub key_sent: bool,
}

impl KeySource {
    /// The key source of a resolved provider.
    pub(crate) fn of(config: &ResolvedProvider) -> Self {
        Self {
            provider: config.name.clone(),
            api_key_env: config.api_key_env.clone(),
            key_sent: config.api_key.is_some(),
        }
    }
}

/// An authentication error (401/403) says which variable holds the key and
/// which provider entry names it, ahead of the server's own message; other
/// errors are returned as they are.
pub(crate) fn with_key_advice(error: ProviderError, key: &KeySource) -> ProviderError {
    if error.kind != ProviderErrorKind::Authentication {
        return error;
    }
    let status = error
        .status
        .map(|status| format!(" ({status})"))
        .unwrap_or_default();
    let what = if key.key_sent {
        format!(
            "the provider rejected the key{status}: check {}",
            key.api_key_env
        )
    } else {
        format!(
            "the provider asked for a key{status} and none was sent: set {}",
            key.api_key_env
        )
    };
    let message = format!(
        "{what}, read by [providers.{}] api_key_env. The server said: {}",
        key.provider, error.message
    );
    ProviderError { message, ..error }
}

/// Message fragments that say the prompt exceeded the context window, matched
/// (case-insensitively) only after the structured fields gave no answer.
pub(crate) const PROMPT_TOO_LONG_PHRASES: [&str; 5] = [
    "prompt is too long",
    "context length",
    "context window",
    "exceed context limit",
    "input tokens exceed",
];

/// SPEC §2: message-text fallback of the prompt-too-long detection, for 400/413.
pub(crate) fn is_prompt_too_long_text(status: Option<u16>, message: &str) -> bool {
    if !matches!(status, Some(400) | Some(413) | None) {
        return false;
    }
    let lower = message.to_ascii_lowercase();
    PROMPT_TOO_LONG_PHRASES
        .iter()
        .any(|phrase| lower.contains(phrase))
}

/// An error response as the adapters see it.
#[derive(Debug, Clone)]
pub(crate) struct ErrorResponse {
    /// HTTP status.
    pub status: u16,
    /// The body (at most [`MAX_ERROR_BODY_BYTES`], lossily decoded).
    pub body: String,
    /// The request id header.
    pub request_id: Option<String>,
    /// The delay the headers asked for.
    pub retry_after: Option<Duration>,
}

impl ErrorResponse {
    /// An error whose kind comes from the status alone, for bodies that are not
    /// the provider's JSON error envelope (proxies, gateways, HTML pages).
    pub(crate) fn unstructured(&self, provider: &str) -> ProviderError {
        let body = excerpt(&self.body);
        let message = if body.is_empty() {
            format!("HTTP {} with an empty body", self.status)
        } else if serde_json::from_str::<serde_json::Value>(&self.body).is_ok() {
            format!(
                "HTTP {} with an unrecognised error body: {body}",
                self.status
            )
        } else {
            format!("HTTP {} with a non-JSON body: {body}", self.status)
        };
        self.error(provider, status_kind(self.status), message)
    }

    /// An error of `kind` carrying this response's status, request id and delay.
    pub(crate) fn error(
        &self,
        provider: &str,
        kind: ProviderErrorKind,
        message: impl Into<String>,
    ) -> ProviderError {
        ProviderError::new(provider, kind, message)
            .with_status(self.status)
            .with_request_id(self.request_id.clone())
            .with_retry_after(self.retry_after)
    }
}

/// What an adapter supplies: its endpoint path, headers, request body, SSE
/// decoder and error classification. Everything else of a provider — the
/// client, retries, idle timeout, decoding loop — is shared ([`WireProvider`]).
pub(crate) trait Wire: Send + Sync + 'static {
    /// The SSE event decoder of one response.
    type Decoder: WireDecoder;
    /// Path of the streaming endpoint, appended to the base URL.
    const PATH: &'static str;
    /// A decoder for a response with the given request id header.
    fn decoder(&self, provider: &str, request_id: Option<String>) -> Self::Decoder;
    /// Classifies an error response.
    fn error(&self, provider: &str, response: &ErrorResponse) -> ProviderError;
    /// Adds the protocol's own headers (authentication, version).
    fn add_headers(
        &self,
        config: &ResolvedProvider,
        headers: &mut HeaderMap,
    ) -> Result<(), ProviderError>;
    /// Serialises one request.
    fn request_body(
        &self,
        config: &ResolvedProvider,
        request: &ChatRequest,
    ) -> Result<Vec<u8>, ProviderError>;
}

/// A provider speaking wire protocol `W` over HTTP; the adapters' public
/// provider types wrap one.
pub(crate) struct WireProvider<W> {
    config: ResolvedProvider,
    endpoint: Arc<Endpoint<W>>,
}

impl<W: Wire> WireProvider<W> {
    /// Builds the endpoint (URL, headers, client) for `config`.
    pub(crate) fn new(
        config: &ResolvedProvider,
        retry: RetryPolicy,
        wire: W,
    ) -> Result<Self, ProviderError> {
        let name = &config.name;
        let url = endpoint_url(
            name,
            &format!("{}{}", config.base_url.trim_end_matches('/'), W::PATH),
        )?;
        let mut headers = HeaderMap::new();
        wire.add_headers(config, &mut headers)?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let endpoint = Endpoint {
            provider: name.clone(),
            key: KeySource::of(config),
            client: build_client(name, &url)?,
            url,
            headers,
            idle_timeout: config.idle_timeout,
            retry,
            wire,
        };
        Ok(Self {
            config: config.clone(),
            endpoint: Arc::new(endpoint),
        })
    }

    /// The configured provider name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The model id.
    pub(crate) fn model(&self) -> &str {
        &self.config.model
    }

    /// Builds the body now and returns the streaming call.
    pub(crate) fn stream(&self, request: &ChatRequest) -> EventStream {
        self.stream_body(self.endpoint.wire.request_body(&self.config, request))
    }

    /// The streaming call of a body the adapter built itself (or the error
    /// that kept it from building one).
    pub(crate) fn stream_body(&self, body: Result<Vec<u8>, ProviderError>) -> EventStream {
        match body {
            Ok(body) => stream_call(self.endpoint.clone(), Bytes::from(body)),
            Err(err) => Box::pin(futures::stream::once(async move { Err(err) })),
        }
    }

    /// The resolved configuration.
    pub(crate) fn config(&self) -> &ResolvedProvider {
        &self.config
    }
}

/// Everything needed to send one provider's requests.
pub(crate) struct Endpoint<W> {
    /// Provider name for errors and logs.
    pub provider: String,
    /// Where the key comes from (for authentication errors).
    pub key: KeySource,
    /// The shared client (one keep-alive pool per provider).
    pub client: reqwest::Client,
    /// Full URL of the streaming endpoint.
    pub url: reqwest::Url,
    /// Fixed headers (auth, version, content type).
    pub headers: HeaderMap,
    /// Longest wait for the response or its next chunk.
    pub idle_timeout: Duration,
    /// Retry policy.
    pub retry: RetryPolicy,
    /// The adapter's protocol pieces.
    pub wire: W,
}

impl<W> Endpoint<W> {
    fn idle_error(&self, waiting_for: &str) -> ProviderError {
        ProviderError::new(
            &self.provider,
            ProviderErrorKind::IdleTimeout,
            format!(
                "nothing received for {:.1} s while waiting for {waiting_for} (idle timeout)",
                self.idle_timeout.as_secs_f64()
            ),
        )
    }
}

/// A failed attempt: the error and whether it may be retried when the
/// answer says so (the server's `x-should-retry`; `Some(false)` also for a
/// connection a fixed address refused).
struct Failure {
    error: ProviderError,
    server_hint: Option<bool>,
}

impl From<ProviderError> for Failure {
    fn from(error: ProviderError) -> Self {
        Self {
            error,
            server_hint: None,
        }
    }
}

/// Where a streaming call is.
enum Phase {
    /// About to send (or resend) the request.
    Send,
    /// Yielding the events of a response.
    Streaming(EventStream),
    /// Waiting before the request is sent again.
    Backoff(Duration),
    /// Finished, successfully or not.
    Done,
}

struct Call<W> {
    endpoint: Arc<Endpoint<W>>,
    body: Bytes,
    retries: u32,
    delivered: bool,
    phase: Phase,
}

impl<W: Wire> Call<W> {
    /// The retry after `failure` (counted, and the call set to wait for it),
    /// or `None` to give up. The stream yields the retry as an event, so
    /// people see it as a notice; the log keeps the full error at `info`.
    fn retry(&mut self, failure: &Failure) -> Option<Retrying> {
        let delay = self.endpoint.retry.decide(
            &failure.error,
            self.retries,
            self.delivered,
            failure.server_hint,
            rand::random::<f64>(),
        )?;
        self.retries += 1;
        tracing::info!(
            provider = %self.endpoint.provider,
            retry = self.retries,
            max_retries = self.endpoint.retry.max_retries,
            delay_ms = delay.as_millis() as u64,
            kind = failure.error.kind.as_str(),
            error = %failure.error,
            "model request failed before any output; retrying"
        );
        self.phase = Phase::Backoff(delay);
        Some(Retrying {
            retry: self.retries,
            max_retries: self.endpoint.retry.max_retries,
            kind: failure.error.kind,
            status: failure.error.status,
            delay,
        })
    }
}

/// Sends the request once and returns the decoded event stream of a
/// successful response.
async fn attempt<W: Wire>(
    endpoint: Arc<Endpoint<W>>,
    body: Bytes,
    number: u32,
) -> Result<EventStream, Failure> {
    tracing::debug!(provider = %endpoint.provider, attempt = number, "sending model request");
    let send = endpoint
        .client
        .post(endpoint.url.clone())
        .headers(endpoint.headers.clone())
        .body(body)
        .send();
    let mut response = match tokio::time::timeout(endpoint.idle_timeout, send).await {
        Err(_) => return Err(endpoint.idle_error("the response headers").into()),
        Ok(Err(err)) => {
            let error = ProviderError::new(
                &endpoint.provider,
                ProviderErrorKind::Connection,
                format!("request to {} failed: {}", endpoint.url, error_chain(&err)),
            );
            // A loopback or literal address that refuses the connection has
            // nothing listening (a typo'd port, a server not started): no
            // retry will change that, so the person hears of it at once.
            if is_fixed_address(&endpoint.url) && connection_refused(&err) {
                let mut error = error;
                error.message.push_str(
                    "; nothing listens at that address (a loopback or literal address is \
                     not retried: check the provider's `base_url`)",
                );
                return Err(Failure {
                    error,
                    server_hint: Some(false),
                });
            }
            return Err(error.into());
        }
        Ok(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let request_id = request_id(&headers);
    tracing::debug!(provider = %endpoint.provider, status, request_id = ?request_id, "model response");
    let is_json = headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"));
    if response.status().is_success() && !is_json {
        let body = body_stream(endpoint.clone(), response);
        let decoder = endpoint.wire.decoder(&endpoint.provider, request_id);
        return Ok(Box::pin(DecodeStream::new(
            &endpoint.provider,
            body,
            decoder,
        )));
    }
    let body = read_capped(&endpoint, &mut response).await;
    let error_response = ErrorResponse {
        status,
        body,
        request_id,
        retry_after: retry_after(&headers, Utc::now()),
    };
    let error = with_key_advice(
        endpoint.wire.error(&endpoint.provider, &error_response),
        &endpoint.key,
    );
    let error = if !response.status().is_success() {
        error
    } else if error.kind == ProviderErrorKind::MalformedResponse {
        // JSON instead of an event stream and no error envelope: a server that
        // ignored `stream: true`, or a URL that is not a streaming endpoint.
        error_response.error(
            &endpoint.provider,
            ProviderErrorKind::MalformedResponse,
            format!(
                "expected an event stream (text/event-stream) but got JSON; check that \
                     base_url points at a streaming endpoint. Body: {}",
                excerpt(&error_response.body)
            ),
        )
    } else {
        // An error envelope inside a 200: an error of the stream, not of HTTP.
        ProviderError {
            status: None,
            ..error
        }
    };
    Err(Failure {
        error,
        server_hint: should_retry(&headers),
    })
}

/// Reads at most [`MAX_ERROR_BODY_BYTES`] of a body, each wait bounded by the
/// idle timeout; a failure keeps what was read.
async fn read_capped<W>(endpoint: &Endpoint<W>, response: &mut reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout(endpoint.idle_timeout, response.chunk()).await {
            Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

/// The body of a streaming response as a byte stream, each chunk awaited at most
/// the idle timeout.
fn body_stream<W: Send + Sync + 'static>(
    endpoint: Arc<Endpoint<W>>,
    response: reqwest::Response,
) -> ByteStream {
    let state = Some((endpoint, response));
    futures::stream::unfold(state, |state| async move {
        let (endpoint, mut response) = state?;
        match tokio::time::timeout(endpoint.idle_timeout, response.chunk()).await {
            Err(_) => Some((Err(endpoint.idle_error("the next stream chunk")), None)),
            Ok(Ok(Some(chunk))) => Some((Ok(chunk), Some((endpoint, response)))),
            Ok(Ok(None)) => None,
            Ok(Err(err)) => {
                let error = ProviderError::new(
                    &endpoint.provider,
                    ProviderErrorKind::StreamBroken,
                    format!("the response stream broke: {}", error_chain(&err)),
                );
                Some((Err(error), None))
            }
        }
    })
    .boxed()
}

/// Whether an event carries content (delivery ends the right to retry).
fn is_content(event: &StreamEvent) -> bool {
    !matches!(
        event,
        StreamEvent::Metadata(_)
            | StreamEvent::Usage(_)
            | StreamEvent::Stop(_)
            | StreamEvent::Retrying(_)
    )
}

/// Runs one streaming model call: send, retry while nothing was delivered
/// (announcing each retry as [`StreamEvent::Retrying`]), decode. The body is
/// sent as given on every attempt.
pub(crate) fn stream_call<W: Wire>(endpoint: Arc<Endpoint<W>>, body: Bytes) -> EventStream {
    let call = Call {
        endpoint,
        body,
        retries: 0,
        delivered: false,
        phase: Phase::Send,
    };
    futures::stream::unfold(call, |mut call| async move {
        loop {
            match std::mem::replace(&mut call.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Send => {
                    match attempt(call.endpoint.clone(), call.body.clone(), call.retries + 1).await
                    {
                        Ok(events) => call.phase = Phase::Streaming(events),
                        Err(failure) => {
                            return match call.retry(&failure) {
                                Some(retrying) => Some((Ok(StreamEvent::Retrying(retrying)), call)),
                                None => Some((Err(failure.error), call)),
                            };
                        }
                    }
                }
                Phase::Backoff(delay) => {
                    tokio::time::sleep(delay).await;
                    call.phase = Phase::Send;
                }
                Phase::Streaming(mut events) => match events.next().await {
                    Some(Ok(event)) => {
                        call.delivered |= is_content(&event);
                        call.phase = Phase::Streaming(events);
                        return Some((Ok(event), call));
                    }
                    Some(Err(error)) => {
                        drop(events);
                        let failure = Failure::from(error);
                        return match call.retry(&failure) {
                            Some(retrying) => Some((Ok(StreamEvent::Retrying(retrying)), call)),
                            None => Some((Err(failure.error), call)),
                        };
                    }
                    None => return None,
                },
            }
        }
    })
    // Polling again after the end yields `None` instead of a panic.
    .fuse()
    .boxed()
}

/// Builds a header value, reporting which header was invalid.
pub(crate) fn header_value(
    provider: &str,
    name: &str,
    value: &str,
    sensitive: bool,
) -> Result<HeaderValue, ProviderError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| {
        ProviderError::new(
            provider,
            ProviderErrorKind::Configuration,
            format!("the {name} header value contains characters not allowed in HTTP headers"),
        )
    })?;
    value.set_sensitive(sensitive);
    Ok(value)
}

/// Parses the endpoint URL of a provider.
pub(crate) fn endpoint_url(provider: &str, url: &str) -> Result<reqwest::Url, ProviderError> {
    reqwest::Url::parse(url).map_err(|err| {
        ProviderError::new(
            provider,
            ProviderErrorKind::Configuration,
            format!("invalid provider URL {url:?}: {err}; set base_url to e.g. https://host:port"),
        )
    })
}

/// An error and its sources, joined with `: ` (reqwest hides the cause otherwise).
/// True when `url` names a host no name lookup can move: `localhost` or a
/// literal IP address.
fn is_fixed_address(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let lower = host.to_ascii_lowercase();
    host.parse::<std::net::IpAddr>().is_ok()
        || lower == "localhost"
        || lower.ends_with(".localhost")
}

/// True when the connection was refused (an I/O error of that kind in the
/// error's chain).
fn connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = cause.source();
    }
    false
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2015-10-21T07:28:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let h = headers(&[("retry-after-ms", "1500"), ("retry-after", "30")]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_millis(1_500)));
        let h = headers(&[("retry-after-ms", "12.5")]);
        assert_eq!(retry_after(&h, now()), Some(Duration::from_micros(12_500)));
    }

    #[test]
    fn retry_after_seconds_and_http_dates() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")]), now()),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:20 GMT")]),
                now()
            ),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")]),
                now()
            ),
            Some(Duration::ZERO)
        );
        for bad in ["-3", "soon", "NaN", "inf", "1e400"] {
            assert_eq!(
                retry_after(&headers(&[("retry-after", bad)]), now()),
                None,
                "{bad}"
            );
        }
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "x"), ("retry-after", "2")]),
                now()
            ),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(&HeaderMap::new(), now()), None);
    }

    #[test]
    fn only_loopback_names_and_literal_addresses_are_fixed() {
        for (url, fixed) in [
            ("http://127.0.0.1:9/v1", true),
            ("http://[::1]:8080/", true),
            ("https://10.0.0.7/v1", true),
            ("http://localhost:11434", true),
            ("http://api.localhost:3000", true),
            ("https://api.anthropic.com/v1", false),
            ("https://localhost.example.com/", false),
        ] {
            let url = reqwest::Url::parse(url).unwrap();
            assert_eq!(is_fixed_address(&url), fixed, "{url}");
        }
    }

    #[test]
    fn a_refused_connection_is_found_in_the_error_chain() {
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("connect error")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let refused = Wrapper(std::io::ErrorKind::ConnectionRefused.into());
        assert!(connection_refused(&refused));
        let reset = Wrapper(std::io::ErrorKind::ConnectionReset.into());
        assert!(!connection_refused(&reset));
    }

    #[test]
    fn should_retry_and_request_id_headers() {
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "true")])),
            Some(true)
        );
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "false")])),
            Some(false)
        );
        assert_eq!(should_retry(&headers(&[("x-should-retry", "maybe")])), None);
        assert_eq!(
            request_id(&headers(&[
                ("request-id", "req_1"),
                ("x-request-id", "req_2")
            ])),
            Some("req_1".into())
        );
        assert_eq!(
            request_id(&headers(&[("x-request-id", "req_2")])),
            Some("req_2".into())
        );
        assert_eq!(request_id(&HeaderMap::new()), None);
    }

    #[test]
    fn statuses_map_to_kinds() {
        use ProviderErrorKind::*;
        for (status, kind) in [
            (400, InvalidRequest),
            (401, Authentication),
            (403, Authentication),
            (404, InvalidRequest),
            (413, PromptTooLong),
            (429, RateLimited),
            (500, Server),
            (502, Server),
            (529, Overloaded),
            (302, MalformedResponse),
        ] {
            assert_eq!(status_kind(status), kind, "{status}");
        }
    }

    #[test]
    fn authentication_errors_name_the_key_variable_and_the_provider_entry() {
        let key = KeySource {
            provider: "anthropic".into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            key_sent: true,
        };
        let rejected = ProviderError::new(
            "anthropic",
            ProviderErrorKind::Authentication,
            "invalid x-api-key",
        )
        .with_status(401);
        let advised = with_key_advice(rejected.clone(), &key);
        assert_eq!(
            advised.message,
            "the provider rejected the key (401): check ANTHROPIC_API_KEY, read by \
             [providers.anthropic] api_key_env. The server said: invalid x-api-key"
        );
        assert_eq!(
            (advised.kind, advised.status),
            (rejected.kind, rejected.status)
        );
        let unsent = KeySource {
            key_sent: false,
            ..key.clone()
        };
        let forbidden = ProviderError::new("anthropic", ProviderErrorKind::Authentication, "no")
            .with_status(403);
        assert_eq!(
            with_key_advice(forbidden, &unsent).message,
            "the provider asked for a key (403) and none was sent: set ANTHROPIC_API_KEY, read \
             by [providers.anthropic] api_key_env. The server said: no"
        );
        let other =
            ProviderError::new("anthropic", ProviderErrorKind::Server, "boom").with_status(500);
        assert_eq!(with_key_advice(other.clone(), &key), other);
    }

    #[test]
    fn prompt_too_long_text_only_for_400_and_413() {
        assert!(is_prompt_too_long_text(
            Some(400),
            "This model's maximum context length is 4097 tokens."
        ));
        assert!(is_prompt_too_long_text(
            Some(413),
            "Prompt is too long for this endpoint"
        ));
        assert!(is_prompt_too_long_text(
            None,
            "Your input exceeds the context window of this model."
        ));
        assert!(!is_prompt_too_long_text(
            Some(500),
            "maximum context length exceeded"
        ));
        assert!(!is_prompt_too_long_text(
            Some(400),
            "messages: field required"
        ));
    }

    #[test]
    fn unstructured_errors_name_the_status_and_quote_the_body() {
        let response = ErrorResponse {
            status: 502,
            body: "<html>\n<body>Bad Gateway</body>\n</html>".into(),
            request_id: Some("req_9".into()),
            retry_after: Some(Duration::from_secs(1)),
        };
        let err = response.unstructured("claude");
        assert_eq!(err.kind, ProviderErrorKind::Server);
        assert_eq!(err.status, Some(502));
        assert_eq!(err.request_id.as_deref(), Some("req_9"));
        assert_eq!(err.retry_after, Some(Duration::from_secs(1)));
        assert!(err.message.contains("HTTP 502"), "{}", err.message);
        assert!(err.message.contains("non-JSON"), "{}", err.message);
        assert!(
            err.message.contains("<body>Bad Gateway</body>"),
            "{}",
            err.message
        );

        let empty = ErrorResponse {
            body: String::new(),
            status: 401,
            ..response.clone()
        };
        let err = empty.unstructured("claude");
        assert_eq!(err.kind, ProviderErrorKind::Authentication);
        assert!(err.message.contains("empty body"));

        let odd_json = ErrorResponse {
            body: r#"{"detail":"nope"}"#.into(),
            status: 404,
            ..response
        };
        assert!(odd_json.unstructured("c").message.contains("unrecognised"));
    }

    #[test]
    fn client_builds_with_the_ring_provider_repeatedly() {
        let https = reqwest::Url::parse("https://api.anthropic.com/v1/messages").unwrap();
        let http = reqwest::Url::parse("http://127.0.0.1:8080/v1/messages").unwrap();
        assert!(build_client("a", &https).is_ok());
        assert!(build_client("b", &https).is_ok());
        assert!(build_client("c", &http).is_ok());
    }
}
