//! Arrival times of model requests, as the scripted server sees them: a turn
//! built by [`ArrivalStamps::turn`] records `Instant::now()` when the server
//! admits the request it answers (body received and checked, before the
//! response is rendered). Benchmarks use them to time a client from the
//! server's side, independent of how fast a subscriber drains events.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use troupe_scripted::{Matcher, Response, Turn};

/// Shared arrival times, in admission order.
#[derive(Debug, Clone, Default)]
pub struct ArrivalStamps(Arc<Mutex<Vec<Instant>>>);

impl ArrivalStamps {
    /// No arrivals yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A turn answering any request with `response` that stamps the request's
    /// arrival. The stamp is taken when the server picks this turn, which it
    /// does once per request.
    pub fn turn(&self, response: Response) -> Turn {
        let stamps = self.0.clone();
        Turn::new(response).when(Matcher::predicate("stamps its arrival", move |_| {
            stamps
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Instant::now());
            true
        }))
    }

    /// Every arrival so far.
    pub fn times(&self) -> Vec<Instant> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use troupe_scripted::{Script, ScriptedServer, text};

    use super::*;
    use crate::bench::http::RawHttpClient;

    #[tokio::test]
    async fn one_stamp_per_answered_request() {
        let stamps = ArrivalStamps::new();
        let script = Script::new()
            .then(stamps.turn(text("one")))
            .then(stamps.turn(text("two")));
        let server = ScriptedServer::start(script).await.unwrap();
        let before = Instant::now();
        let mut client = RawHttpClient::connect(server.addr()).await.unwrap();
        let body = br#"{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;
        for _ in 0..2 {
            let response = client.post_json("/v1/messages", body).await.unwrap();
            assert_eq!(response.status, 200);
        }
        let times = stamps.times();
        assert_eq!(times.len(), 2);
        assert!(before <= times[0] && times[0] <= times[1]);
        assert!(server.violations().is_empty());
    }
}
