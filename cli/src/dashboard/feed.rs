//! A run's live feed, shared by every run page open on it. One task per
//! run follows the run through the runtime's bounded subscription, folds
//! its events, renders each batch of them once (the transcript's entries,
//! and the state panel when it changed) as ready-made Server-Sent Event
//! frames, and hands the same bytes to every page: the work per event does
//! not grow with the pages open.
//!
//! A batch is the events that arrive within [`BATCH_WINDOW`] of its first
//! one (a page's update waits that long at most), and consecutive text
//! deltas of one agent in it become one piece of text (never shortened: the
//! page ends with the exact text). A run that streams text or runs quick
//! tools makes many events a second; each page then writes a few updates a
//! second whatever their number. Pages take the feed's messages through a bounded broadcast:
//! the feed never waits for a page, and a page that falls more than
//! [`PAGE_BACKLOG`] messages behind is dropped (its stream ends), the
//! run's events never are.
//!
//! A page joins at its own sequence number: it subscribes to the feed
//! first, then renders itself what the store holds from there on, and
//! takes from the feed only what came after.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use tokio::sync::broadcast;
use troupe_actors::EventSubscription;
use troupe_protocol::events::{EventKind, RunEvent};
use troupe_store::RunRecord;

use super::model::RunView;
use super::{DashboardState, KnownCalls, PageError, pages, state_panel, store_problem};

/// How long events are gathered into one update after the first.
pub(crate) const BATCH_WINDOW: Duration = Duration::from_millis(25);

/// The most messages a page may fall behind the feed before it is dropped.
pub(crate) const PAGE_BACKLOG: usize = 256;

/// The most events in one batch.
const MAX_BATCH: usize = 512;

/// How often an idle page gets a comment, so that proxies and browsers
/// keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What the feed sends every page for a batch of events.
#[derive(Debug)]
pub(crate) struct FeedMessage {
    /// The first event's sequence number.
    first: u64,
    /// The last event's sequence number.
    last: u64,
    /// The events, for a page that joined in the middle of the batch.
    events: Vec<RunEvent>,
    /// The state panel, when the batch changed it: an SSE `state` frame.
    state: Option<Bytes>,
    /// The state frame, if any, then the transcript's entries (an SSE
    /// `entry` frame), in one piece: one write for each page.
    frames: Bytes,
}

/// The feeds of the runs pages follow, by run id.
#[derive(Default)]
pub(crate) struct Feeds {
    running: tokio::sync::Mutex<HashMap<String, FeedEntry>>,
}

/// A running feed as pages find it.
struct FeedEntry {
    sender: broadcast::Sender<Arc<FeedMessage>>,
    /// The last catching up rendered for a page, reused by a page joining
    /// from the same point with the store as it was (pages opened together
    /// render it once).
    caught_up: Option<Arc<CatchUp>>,
}

/// What a page joining from `from` renders of the stored events, up to
/// `shown`.
struct CatchUp {
    from: u64,
    shown: u64,
    frames: Bytes,
    view: RunView,
}

/// `html` as one Server-Sent Event named `name`: each line a `data` field
/// (a carriage return, which the format cannot carry, as its character
/// reference). Pure.
pub(crate) fn sse_frame(name: &str, html: &str) -> Bytes {
    let mut frame = String::with_capacity(html.len() + name.len() + 16);
    frame.push_str("event: ");
    frame.push_str(name);
    frame.push('\n');
    for line in html.split('\n') {
        frame.push_str("data: ");
        frame.push_str(&line.replace('\r', "&#13;"));
        frame.push('\n');
    }
    frame.push('\n');
    Bytes::from(frame)
}

/// `frames` in one piece.
fn joined<'a>(frames: impl Iterator<Item = &'a Bytes>) -> Bytes {
    let mut out = Vec::new();
    for frame in frames {
        out.extend_from_slice(frame);
    }
    Bytes::from(out)
}

/// The live fragments of `events` (applied to `view` in order): each
/// event's transcript entry, the lane of an agent first seen, consecutive
/// text deltas of one agent joined into one piece; and whether the state
/// panel changed. Pure but for `view`.
pub(crate) fn live_fragments(view: &mut RunView, events: &[RunEvent]) -> (String, bool) {
    let mut out = String::new();
    let mut changed = false;
    let mut index = 0;
    while index < events.len() {
        let event = &events[index];
        let new_lane = view.lane_of(&event.agent_path).is_none();
        changed |= view.apply(event);
        let mut joined = None;
        if let EventKind::TextDelta { text } = &event.kind {
            let mut text = text.clone();
            while let Some(next) = events.get(index + 1)
                && next.agent_path == event.agent_path
                && let EventKind::TextDelta { text: more } = &next.kind
            {
                changed |= view.apply(next);
                text.push_str(more);
                index += 1;
            }
            joined = Some(RunEvent {
                kind: EventKind::TextDelta { text },
                ..event.clone()
            });
        }
        let entry = pages::transcript_entry(joined.as_ref().unwrap_or(event));
        if let Some(lane) = view.lane_of(&event.agent_path)
            && (new_lane || entry.is_some())
        {
            out.push_str(
                &pages::live_entry(lane, &event.agent_path, new_lane, entry).into_string(),
            );
        }
        index += 1;
    }
    (out, changed)
}

/// The frames of a batch: the state panel (rendered only when it changed)
/// and the entries.
async fn frames(
    state: &DashboardState,
    run: &RunRecord,
    view: &mut RunView,
    known: &mut KnownCalls,
    events: &[RunEvent],
) -> (Option<Bytes>, Option<Bytes>) {
    let (entries, changed) = live_fragments(view, events);
    let panel = if changed {
        let panel = state_panel(state, run, view, known).await.into_string();
        Some(sse_frame("state", &panel))
    } else {
        None
    };
    let entries = (!entries.is_empty()).then(|| sse_frame("entry", &entries));
    (panel, entries)
}

/// The next batch: the next event and what follows within
/// [`BATCH_WINDOW`]. The second value says the run's events ended.
async fn next_batch(subscription: &mut EventSubscription) -> (Vec<RunEvent>, bool) {
    let Some(first) = subscription.recv().await else {
        return (Vec::new(), true);
    };
    let deadline = tokio::time::Instant::now() + BATCH_WINDOW;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        let next = match subscription.recv().now_or_never() {
            Some(next) => next,
            None => match tokio::time::timeout_at(deadline, subscription.recv()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some(event) = next else {
            return (batch, true);
        };
        batch.push(event);
    }
    (batch, false)
}

impl Feeds {
    /// A receiver of run `run`'s feed, started when none runs.
    async fn join(
        self: &Arc<Self>,
        state: &DashboardState,
        run: &RunRecord,
    ) -> Result<broadcast::Receiver<Arc<FeedMessage>>, PageError> {
        let mut running = self.running.lock().await;
        if let Some(entry) = running.get(&run.run_id) {
            return Ok(entry.sender.subscribe());
        }
        let stored = state
            .api
            .store
            .events(&run.run_id, 1)
            .map_err(store_problem)?;
        let view = RunView::of(&stored);
        let subscription = state
            .api
            .runtime
            .subscribe(&run.run_id, view.last_seq.saturating_add(1))
            .await
            .map_err(|err| super::not_found(&err.to_string()))?;
        let (sender, receiver) = broadcast::channel(PAGE_BACKLOG);
        running.insert(
            run.run_id.clone(),
            FeedEntry {
                sender: sender.clone(),
                caught_up: None,
            },
        );
        let feed = Feed {
            feeds: Arc::clone(self),
            state: state.clone(),
            run: run.clone(),
            view,
            sender,
        };
        tokio::spawn(feed.follow(subscription));
        Ok(receiver)
    }
}

impl Feeds {
    /// The catching up a page of run `run` rendered from `from` to
    /// `shown`, if it is the last one rendered.
    async fn catch_up(&self, run: &str, from: u64, shown: u64) -> Option<Arc<CatchUp>> {
        self.running
            .lock()
            .await
            .get(run)?
            .caught_up
            .clone()
            .filter(|catch_up| catch_up.from == from && catch_up.shown == shown)
    }

    /// Keeps `catch_up` as run `run`'s last one, while its feed runs.
    async fn remember(&self, run: &str, catch_up: &Arc<CatchUp>) {
        if let Some(entry) = self.running.lock().await.get_mut(run) {
            entry.caught_up = Some(Arc::clone(catch_up));
        }
    }
}

/// One run's feed task.
struct Feed {
    feeds: Arc<Feeds>,
    state: DashboardState,
    run: RunRecord,
    view: RunView,
    sender: broadcast::Sender<Arc<FeedMessage>>,
}

impl Feed {
    /// Follows the run until its events end or no page is left.
    async fn follow(mut self, mut subscription: EventSubscription) {
        let mut known = KnownCalls::new();
        loop {
            let (events, ended) = next_batch(&mut subscription).await;
            if let (Some(first), Some(last)) = (events.first(), events.last()) {
                let (first, last) = (first.seq, last.seq);
                let (state, entries) =
                    frames(&self.state, &self.run, &mut self.view, &mut known, &events).await;
                if state.is_some() || entries.is_some() {
                    let frames = joined(state.iter().chain(&entries));
                    // No page is there to take it: the check below ends the feed.
                    let _ = self.sender.send(Arc::new(FeedMessage {
                        first,
                        last,
                        events,
                        state,
                        frames,
                    }));
                }
            }
            if ended || self.leave_when_unwatched().await {
                break;
            }
        }
        self.leave().await;
    }

    /// Whether no page follows the feed any more; if so it is out of the
    /// map already (a page joining meanwhile would have found it there).
    async fn leave_when_unwatched(&self) -> bool {
        if self.sender.receiver_count() > 0 {
            return false;
        }
        let mut running = self.feeds.running.lock().await;
        if self.sender.receiver_count() > 0 {
            return false;
        }
        self.remove_from(&mut running);
        true
    }

    fn remove_from(&self, running: &mut HashMap<String, FeedEntry>) {
        if running
            .get(&self.run.run_id)
            .is_some_and(|entry| entry.sender.same_channel(&self.sender))
        {
            running.remove(&self.run.run_id);
        }
    }

    /// Takes the feed out of the map (its pages' streams then end).
    async fn leave(&self) {
        let mut running = self.feeds.running.lock().await;
        self.remove_from(&mut running);
    }
}

/// What a page's stream holds between two frames.
struct PageStream {
    /// Frames to send before the next message.
    queued: std::collections::VecDeque<Bytes>,
    receiver: broadcast::Receiver<Arc<FeedMessage>>,
    /// The last sequence number the page has shown.
    shown: u64,
    /// The run as the page has shown it (used for a message that began
    /// before `shown`).
    view: RunView,
    keep_alive: tokio::time::Interval,
    _open: crate::daemon::idle::StreamGuard,
}

/// A run page's live stream from sequence number `from`: what the store
/// holds from there rendered for this page, then the run's feed.
pub(super) async fn page_stream(
    state: &DashboardState,
    run: &RunRecord,
    from: u64,
) -> Result<Response, PageError> {
    let receiver = state.feeds.join(state, run).await?;
    let stored = state
        .api
        .store
        .events(&run.run_id, 1)
        .map_err(store_problem)?;
    let shown = stored
        .last()
        .map_or(0, |event| event.seq)
        .max(from.saturating_sub(1));
    let catch_up = match state.feeds.catch_up(&run.run_id, from, shown).await {
        Some(catch_up) => catch_up,
        None => {
            let split = stored.partition_point(|event| event.seq < from);
            let mut view = RunView::of(&stored[..split]);
            let (state_frame, entries) = frames(
                state,
                run,
                &mut view,
                &mut KnownCalls::new(),
                &stored[split..],
            )
            .await;
            let catch_up = Arc::new(CatchUp {
                from,
                shown,
                frames: joined(state_frame.iter().chain(&entries)),
                view,
            });
            state.feeds.remember(&run.run_id, &catch_up).await;
            catch_up
        }
    };
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.reset();
    let page = PageStream {
        queued: (!catch_up.frames.is_empty())
            .then(|| catch_up.frames.clone())
            .into_iter()
            .collect(),
        receiver,
        shown,
        view: catch_up.view.clone(),
        keep_alive,
        _open: state.api.activity.stream_opened(),
    };
    let stream = futures::stream::unfold(page, |mut page| async move {
        let frame = page.next_frame().await?;
        Some((Ok::<_, Infallible>(frame), page))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

impl PageStream {
    /// The next frame to write; `None` when the feed ended or left this
    /// page behind.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.queued.pop_front() {
                return Some(frame);
            }
            let message = tokio::select! {
                message = self.receiver.recv() => message,
                _ = self.keep_alive.tick() => return Some(Bytes::from_static(b":\n\n")),
            };
            let message = match message {
                Ok(message) => message,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "a dashboard fell behind its run; its stream ends");
                    return None;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            if message.last <= self.shown {
                continue;
            }
            if message.first > self.shown {
                self.queued.push_back(message.frames.clone());
            } else {
                // Joined in the middle of this batch: the rest of it is
                // rendered for this page alone.
                let rest: Vec<RunEvent> = message
                    .events
                    .iter()
                    .filter(|event| event.seq > self.shown)
                    .cloned()
                    .collect();
                let (entries, _) = live_fragments(&mut self.view, &rest);
                self.queued.extend(message.state.clone());
                if !entries.is_empty() {
                    self.queued.push_back(sse_frame("entry", &entries));
                }
            }
            self.shown = message.last;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::model::test_event as event;

    #[test]
    fn a_frame_carries_each_line_as_data_and_no_carriage_return() {
        assert_eq!(
            &sse_frame("entry", "a\rb\nc")[..],
            b"event: entry\ndata: a&#13;b\ndata: c\n\n"
        );
    }

    #[test]
    fn one_agents_text_deltas_become_one_piece_with_the_exact_text() {
        let text = |seq, agent: &str, text: &str| {
            event(seq, agent, EventKind::TextDelta { text: text.into() })
        };
        let events = vec![
            event(1, "main", EventKind::RunStarted { prompt: "p".into() }),
            text(2, "main", "Hel"),
            text(3, "main", "lo <b>"),
            text(4, "main/fork-1", "other"),
            text(5, "main", " world"),
        ];
        let mut view = RunView::default();
        let (html, changed) = live_fragments(&mut view, &events);
        assert!(changed, "two agents appeared");
        assert_eq!(html.matches("class=\"text\"").count(), 3, "{html}");
        assert!(html.contains(">Hello &lt;b&gt;</span>"), "{html}");
        assert!(html.contains(">other</span>"), "{html}");
        assert!(html.contains("> world</span>"), "{html}");
        assert_eq!(html.matches("beforeend:#lanes").count(), 2, "{html}");
        assert_eq!(view.last_seq, 5);

        // The same events one at a time show the same text.
        let mut one_by_one = RunView::default();
        let pieces: String = events
            .iter()
            .map(|event| live_fragments(&mut one_by_one, std::slice::from_ref(event)).0)
            .collect();
        let texts = |html: &str| -> String {
            html.split("class=\"text\"")
                .skip(1)
                .map(|part| {
                    let start = part.find('>').unwrap() + 1;
                    let end = part.find("</span>").unwrap();
                    part[start..end].to_string()
                })
                .collect()
        };
        assert_eq!(texts(&pieces), texts(&html));
        assert_eq!(one_by_one, view);
    }
}
