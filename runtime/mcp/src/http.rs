//! The HTTP client a Streamable HTTP MCP server is reached with (SPEC §8,
//! §15): `reqwest`, behind `rmcp`'s client interface, with two differences
//! from a plain client.
//!
//! - Its errors never carry the request's URL. A `reqwest` error prints the
//!   URL it was sending to, query and all, and `rmcp` puts those errors in
//!   the errors it returns and in its own log lines; an MCP URL may hold a
//!   credential, so every error leaves here with the URL taken out.
//! - It follows only same-origin redirects that keep the method and body (307
//!   and 308), at most [`MAX_REDIRECTS`]: a redirect to another origin would
//!   replay the entry's headers to that host.
//!
//! Everything else (limits, SSE, sessions) is `rmcp`'s own client for
//! `reqwest`, called unchanged.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// Most redirects followed for one request.
pub(crate) const MAX_REDIRECTS: usize = 10;

/// The error type of the client.
type HttpError = StreamableHttpError<reqwest::Error>;

/// `reqwest` for MCP servers: URL-free errors, same-origin redirects only.
#[derive(Clone, Debug)]
pub(crate) struct McpHttpClient(reqwest::Client);

impl McpHttpClient {
    /// A client that gives up connecting after `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration) -> Result<Self, reqwest::Error> {
        troupe_llm::http::install_crypto_provider();
        reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .redirect(same_origin_redirects())
            .build()
            .map(Self)
            .map_err(reqwest::Error::without_url)
    }
}

/// The redirect policy: a 307 or 308 to the same origin, at most
/// [`MAX_REDIRECTS`] in a row; any other redirect is returned as the
/// response.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let previous = attempt.previous();
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = previous
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if keeps_body && same_origin && previous.len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// `err` without the URL a `reqwest` error carries.
pub(crate) fn without_url(err: HttpError) -> HttpError {
    match err {
        StreamableHttpError::Client(err) => StreamableHttpError::Client(err.without_url()),
        other => other,
    }
}

impl StreamableHttpClient for McpHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
            .map_err(without_url)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map_err(without_url)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
            .map_err(without_url)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(without_url)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
            .map_err(without_url)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map_err(without_url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_leaves_without_the_url_it_was_sent_to() {
        // A port nothing listens on any more.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/mcp?key=sk-SECRET-1");
        let client = McpHttpClient::new(Duration::from_secs(5)).unwrap();
        let err = client
            .delete_session(url.as_str().into(), "s".into(), None, HashMap::new())
            .await
            .unwrap_err();
        let shown = format!("{err} / {err:?}");
        assert!(!shown.contains("SECRET"), "{shown}");
        let plain = reqwest::Client::new().get(&url).send().await.unwrap_err();
        assert!(
            format!("{plain}").contains("SECRET"),
            "a plain reqwest error names its URL: {plain}"
        );
    }

    #[tokio::test]
    async fn only_same_origin_redirects_that_keep_the_body_are_followed() {
        use axum::http::{HeaderMap, StatusCode, header};
        use axum::routing::{get, post};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let redirect = |status: StatusCode, to: String| {
            move || async move { (status, [(header::LOCATION, to)]) }
        };
        let app = axum::Router::new()
            .route(
                "/elsewhere",
                post(redirect(
                    StatusCode::TEMPORARY_REDIRECT,
                    format!("http://localhost:{port}/landed"),
                )),
            )
            .route(
                "/here",
                post(redirect(StatusCode::PERMANENT_REDIRECT, "/landed".into())),
            )
            .route(
                "/rewritten",
                post(redirect(StatusCode::FOUND, "/landed".into())),
            )
            .route(
                "/loop",
                post(redirect(StatusCode::TEMPORARY_REDIRECT, "/loop".into())),
            )
            .route(
                "/landed",
                post(|headers: HeaderMap| async move {
                    headers
                        .get("x-key")
                        .map(|value| value.to_str().unwrap_or_default().to_owned())
                        .unwrap_or_default()
                })
                .merge(get(|| async { "a GET" })),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = McpHttpClient::new(Duration::from_secs(5)).unwrap().0;
        let post = |path: &str| {
            client
                .post(format!("http://127.0.0.1:{port}{path}"))
                .header("x-key", "secret-header")
                .body("{}")
                .send()
        };
        let to_other_origin = post("/elsewhere").await.unwrap();
        assert_eq!(to_other_origin.status(), StatusCode::TEMPORARY_REDIRECT);
        let same_origin = post("/here").await.unwrap();
        assert_eq!(same_origin.status(), StatusCode::OK);
        assert_eq!(same_origin.text().await.unwrap(), "secret-header");
        let rewritten = post("/rewritten").await.unwrap();
        assert_eq!(rewritten.status(), StatusCode::FOUND);
        let looping = post("/loop").await;
        assert!(
            looping
                .as_ref()
                .is_ok_and(|r| r.status() == StatusCode::TEMPORARY_REDIRECT),
            "{looping:?}"
        );
    }
}
