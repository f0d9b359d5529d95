//! Replays of a finished run's model calls without the agent, to split a
//! run's wall time into parts: [`replay_raw`] sends the recorded request bodies
//! over one bare HTTP connection (the scripted server and the loopback only),
//! [`replay_provider`] sends the same conversation prefixes through the real
//! provider adapter (request building, HTTP client, SSE decoding added). What
//! remains of the run's time is the agent loop, the actors, the event log and
//! the tools.
//!
//! Each replay needs a fresh scripted server with the run's script, so that
//! every request gets the same answer it got during the run.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use troupe_llm::{ChatRequest, Provider};
use troupe_protocol::model::{Message, Role};
use troupe_protocol::model::{SystemPrompt, ToolDefinition};
use troupe_scripted::RecordedRequest;

use super::http::RawHttpClient;

/// A replay that could not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayError(pub String);

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReplayError {}

/// Sends every recorded request, in order, over one keep-alive connection to
/// `addr`, reading each response completely. Returns the time of each
/// round trip (request written to response fully read).
pub async fn replay_raw(
    addr: SocketAddr,
    requests: &[RecordedRequest],
) -> Result<Vec<Duration>, ReplayError> {
    let mut client = RawHttpClient::connect(addr)
        .await
        .map_err(|err| ReplayError(format!("cannot connect to {addr}: {err}")))?;
    let mut times = Vec::with_capacity(requests.len());
    for request in requests {
        let body = serde_json::to_vec(&request.body)
            .map_err(|err| ReplayError(format!("cannot serialise request body: {err}")))?;
        let started = Instant::now();
        let response = client
            .post_json(&request.path, &body)
            .await
            .map_err(|err| ReplayError(format!("request {}: {err}", request.index)))?;
        times.push(started.elapsed());
        if response.status != 200 {
            return Err(ReplayError(format!(
                "request {} answered {}: {}",
                request.index,
                response.status,
                String::from_utf8_lossy(&response.body)
            )));
        }
    }
    Ok(times)
}

/// The conversation prefixes the agent sent during a run whose final history
/// is `history`: one per assistant message, everything before it.
pub fn request_prefixes(history: &[Message]) -> Vec<&[Message]> {
    history
        .iter()
        .enumerate()
        .filter(|(_, message)| message.role == Role::Assistant)
        .map(|(index, _)| &history[..index])
        .collect()
}

/// Sends each request prefix of `history` through `provider` (a fresh
/// adapter pointed at a fresh server with the run's script) and drains the
/// stream. Returns the time of each call (request built to stream ended).
pub async fn replay_provider(
    provider: &dyn Provider,
    system: &SystemPrompt,
    tools: &[ToolDefinition],
    history: &[Message],
) -> Result<Vec<Duration>, ReplayError> {
    let mut times = Vec::new();
    for (call, prefix) in request_prefixes(history).into_iter().enumerate() {
        let started = Instant::now();
        let request = ChatRequest {
            system: system.clone(),
            messages: prefix.to_vec(),
            tools: tools.to_vec(),
            session_id: None,
        };
        let mut stream = provider.stream(&request);
        while let Some(item) = stream.next().await {
            if let Err(err) = item {
                return Err(ReplayError(format!("model call {call}: {err}")));
            }
        }
        times.push(started.elapsed());
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_prefix_per_assistant_message() {
        let history = vec![
            Message::user_text("task"),
            Message::assistant_text("first"),
            Message::user_text("more"),
            Message::assistant_text("second"),
        ];
        let prefixes = request_prefixes(&history);
        assert_eq!(prefixes.len(), 2);
        assert_eq!(prefixes[0].len(), 1);
        assert_eq!(prefixes[1].len(), 3);
        assert!(request_prefixes(&history[..1]).is_empty());
    }
}
