//! `web_fetch` through the real `troupe` binary and the scripted model
//! server, against pages served on loopback. Every run allows the host
//! `127.0.0.1` by a `WebFetch(domain:127.0.0.1)` rule in the user's config,
//! so what decides is the address check: a private address is refused
//! unless the user's `[web] allow_private` names it (with its port), a
//! redirect from an allowed address into one that is not is refused at that
//! hop, and a 50 MiB body is refused as too large while the process's peak
//! memory stays bounded. Without the rule a host asks, once when the answer
//! is "always".

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;
use troupe_scripted::{Fault, Script, ScriptedServer, text, tool_call};

use crate::support::{Env, describe, run, run_measured, run_on_terminal, stop_daemon};

/// One tool call adds at most this much to the process's peak resident set.
const FETCH_MEMORY_BOUND_KIB: u64 = 64 * 1024;

/// Bytes of the huge body (50 MiB).
const HUGE: usize = 50 * 1024 * 1024;

const PAGE: &str = r#"<!doctype html><html><head><title>Loopback page</title>
<script>window.secretTracker = "trackPageview";</script><style>p { color: red }</style></head>
<body><nav class="menu"><a href="/">Site navigation home</a> <a href="/about">About us</a></nav>
<main><article><h1>Served on loopback</h1>
<p>This page is long enough to be taken as the main content of the page, and it links to
<a href="https://docs.example.org/guide.html">the guide</a> from inside its first paragraph,
with more words after the link so that the paragraph scores as content rather than noise.</p>
<p>A second paragraph adds some ordinary text about nothing in particular, so that the article
is clearly the largest block of writing on the page and the navigation is left out.</p>
</article></main><footer>Footer of the page</footer></body></html>"#;

/// Serves `/page.html`, `/huge` (50 MiB, streamed) and `/escape` (a
/// redirect to `escape_to`) on a loopback port.
async fn serve(escape_to: String) -> SocketAddr {
    serve_counting(escape_to).await.0
}

/// [`serve`], also counting the requests for `/page.html`.
async fn serve_counting(escape_to: String) -> (SocketAddr, Arc<AtomicUsize>) {
    let pages = Arc::new(AtomicUsize::new(0));
    let counted = pages.clone();
    let app = Router::new()
        .route(
            "/page.html",
            get(move || async move {
                counted.fetch_add(1, Ordering::SeqCst);
                ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE)
            }),
        )
        .route(
            "/huge",
            get(|| async {
                let chunk = Bytes::from(vec![b'a'; 64 * 1024]);
                let chunks = HUGE / chunk.len();
                let stream = futures::stream::iter(
                    std::iter::repeat_n(chunk, chunks).map(Ok::<_, io::Error>),
                );
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    Body::from_stream(stream),
                )
            }),
        )
        .route(
            "/escape",
            get(move || async move {
                (StatusCode::FOUND, [(header::LOCATION, escape_to)]).into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, pages)
}

/// The user's config: the host allowed by rule, and `allow_private` as given.
fn user_config(allow_private: &[SocketAddr]) -> String {
    let pairs: Vec<String> = allow_private.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[permissions]\nallow = [\"WebFetch(domain:127.0.0.1)\"]\n\n[web]\nallow_private = [{}]\n",
        pairs.join(", ")
    )
}

/// Runs one `web_fetch` of `url` with the user's config `config`; returns
/// the tool result the model got (text, is_error).
async fn fetch_once(url: &str, config: &str) -> (String, bool) {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("web_fetch", json!({ "url": url })))
            .then(text("fetched")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.write_user_config(config);
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "fetch the page"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let result = server.requests()[1]
        .tool_results()
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("no tool result: {}", describe(&output)));
    (result.content, result.is_error)
}

#[tokio::test]
async fn a_loopback_page_is_refused_by_default_naming_private_addresses() {
    let addr = serve(String::new()).await;
    let (content, is_error) =
        fetch_once(&format!("http://{addr}/page.html"), &user_config(&[])).await;
    assert!(is_error, "{content}");
    assert!(
        content.contains("127.0.0.1 is a loopback address")
            && content.contains("private")
            && content.contains(&format!("allow_private = [\"{addr}\"]")),
        "{content}"
    );
}

#[tokio::test]
async fn an_address_the_user_allows_returns_the_page_as_markdown() {
    let addr = serve(String::new()).await;
    let (content, is_error) =
        fetch_once(&format!("http://{addr}/page.html"), &user_config(&[addr])).await;
    assert!(!is_error, "{content}");
    assert!(content.contains("# Served on loopback"), "{content}");
    assert!(
        content.contains("[the guide](https://docs.example.org/guide.html)"),
        "{content}"
    );
    for gone in [
        "trackPageview",
        "Site navigation",
        "color: red",
        "Footer of the page",
    ] {
        assert!(!content.contains(gone), "{gone}: {content}");
    }
    assert!(
        content.starts_with("<untrusted-data source=\"web page http://127.0.0.1:"),
        "{content}"
    );
}

#[tokio::test]
async fn a_redirect_from_an_allowed_address_to_one_not_allowed_is_refused() {
    let hidden = serve(String::new()).await;
    let front = serve(format!("http://{hidden}/page.html")).await;
    let (content, is_error) =
        fetch_once(&format!("http://{front}/escape"), &user_config(&[front])).await;
    assert!(is_error, "{content}");
    assert!(
        content.contains(&format!("refused http://{hidden}/page.html"))
            && content.contains("loopback"),
        "{content}"
    );
    assert!(!content.contains("Served on loopback"), "{content}");
}

/// Runs a `web_fetch` of `path` and measures the process's peak memory while
/// it waits on its next model request; returns the peak and the result.
async fn measured_fetch(addr: SocketAddr, path: &str) -> (u64, String, bool) {
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call(
                "web_fetch",
                json!({ "url": format!("http://{addr}{path}") }),
            ))
            // Held open: the process waits, alive, while its peak is read.
            .then(Fault::stall_after(0, text("fetched"))),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.write_user_config(&user_config(&[addr]));
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "fetch the page"]);
    let measured = run_measured(command, &server, 2).await;
    let result = server.requests()[1]
        .tool_results()
        .last()
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no tool result; stderr: {}",
                String::from_utf8_lossy(&measured.stderr)
            )
        });
    (measured.peak_kib, result.content, result.is_error)
}

#[tokio::test]
async fn a_50_mib_body_is_refused_as_too_large_with_memory_bounded() {
    let addr = serve(String::new()).await;
    let (baseline, small, small_error) = measured_fetch(addr, "/page.html").await;
    assert!(!small_error, "{small}");
    let (peak, content, is_error) = measured_fetch(addr, "/huge").await;
    assert!(is_error, "{content}");
    assert!(
        content.contains("too large") && content.contains("10 MiB"),
        "{content}"
    );
    let added = peak.saturating_sub(baseline);
    assert!(
        added < FETCH_MEMORY_BOUND_KIB,
        "the 50 MiB fetch peaked at {peak} KiB, {added} KiB above the small fetch's {baseline} KiB"
    );
}

#[tokio::test]
async fn an_unknown_host_asks_once_and_always_allows_it_for_the_session() {
    let addr = serve(String::new()).await;
    let url = format!("http://{addr}/page.html");
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("web_fetch", json!({ "url": url })))
            .then(tool_call("web_fetch", json!({ "url": url })))
            .then(text("fetched twice")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.write_user_config(&format!("[web]\nallow_private = [\"{addr}\"]\n"));
    let mut command = env.command(Some(&server));
    command.args(["run", "fetch the page twice"]);
    // One answer only: a second question would find no answer to read.
    let (code, terminal) = run_on_terminal(command, "a\n").await;
    assert_eq!(code, Some(0), "{terminal}");
    assert_eq!(terminal.matches("Allow? [y]es").count(), 1, "{terminal}");
    assert!(
        terminal.contains("WebFetch(domain:127.0.0.1)"),
        "the prompt names the rule: {terminal}"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{terminal}");
    for request in &requests[1..] {
        let result = request.tool_results().last().cloned().unwrap();
        assert!(
            !result.is_error && result.content.contains("# Served on loopback"),
            "{result:?}\n{terminal}"
        );
    }
}

#[tokio::test]
async fn turned_off_it_is_not_offered() {
    let server = ScriptedServer::start(Script::new().then(text("done")))
        .await
        .unwrap();
    let env = Env::new();
    env.write_user_config("[web]\nenabled = false\n");
    let mut command = env.command(Some(&server));
    command.args(["run", "--json", "hello"]);
    let output = run(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let tools = server.requests()[0].tool_names();
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"web_fetch".to_owned()), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_keeps_fetched_pages_across_runs() {
    let (addr, pages) = serve_counting(String::new()).await;
    let url = format!("http://{addr}/page.html");
    let server = ScriptedServer::start(
        Script::new()
            .then(tool_call("web_fetch", json!({ "url": url })))
            .then(text("first run fetched"))
            .then(tool_call("web_fetch", json!({ "url": url })))
            .then(text("second run fetched")),
    )
    .await
    .unwrap();
    let env = Env::new();
    env.write_user_config(&user_config(&[addr]));
    for prompt in ["fetch it", "fetch it again"] {
        let mut command = env.command(Some(&server));
        command
            .env_remove("TROUPE_NO_DAEMON")
            .env("TROUPE_DAEMON_IDLE_SECS", "60")
            .args(["run", "--json", prompt]);
        let output = run(command).await;
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    }
    stop_daemon(&env.data_dir());
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    for request in [&requests[1], &requests[3]] {
        let result = request.tool_results().last().cloned().unwrap();
        assert!(
            !result.is_error && result.content.contains("# Served on loopback"),
            "{result:?}"
        );
    }
    assert_eq!(
        pages.load(Ordering::SeqCst),
        1,
        "the second run read the cache"
    );
}
