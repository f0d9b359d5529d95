//! Client disconnects during a streamed response are detected and recorded.

use std::time::Duration;

use futures::StreamExt;
use troupe_scripted::{Protocol, Script, ScriptedServer, Turn, text};

use crate::support::{WAIT, ask, events, post};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_client_stream_is_recorded_as_aborted() {
    let reply = text("a slow answer that the client will not wait for").with_chunk_chars(2);
    let script = Script::new()
        .then(Turn::new(reply.clone()).with_chunk_delay(Duration::from_millis(20)))
        .then(Turn::new(reply).with_chunk_delay(Duration::from_millis(20)));
    let server = ScriptedServer::start(script).await.unwrap();
    for protocol in [Protocol::Anthropic, Protocol::OpenAi] {
        let response = post(&server, protocol, &ask(protocol, "x", true)).await;
        let mut stream = response.bytes_stream();
        let first = tokio::time::timeout(WAIT, stream.next()).await.unwrap();
        assert!(first.is_some_and(|piece| piece.is_ok()));
        drop(stream);
    }
    let aborted = server.wait_for_aborted_streams(2, WAIT).await.unwrap();
    assert_eq!(aborted[0].request_index, 0);
    assert_eq!(aborted[1].request_index, 1);
    for abort in &aborted {
        assert!(abort.events_sent >= 1);
        assert!(
            abort.events_sent < 20,
            "the stream was far from its end: {abort:?}"
        );
    }
}

#[tokio::test]
async fn a_fully_read_stream_is_not_aborted() {
    let server = ScriptedServer::start(Script::new().then(text("short")).then(text("short")))
        .await
        .unwrap();
    for protocol in [Protocol::Anthropic, Protocol::OpenAi] {
        let events = events(post(&server, protocol, &ask(protocol, "x", true)).await).await;
        assert!(!events.is_empty());
    }
    let timeout = Duration::from_millis(100);
    assert!(server.wait_for_aborted_streams(1, timeout).await.is_err());
    assert!(server.aborted_streams().is_empty());
}
