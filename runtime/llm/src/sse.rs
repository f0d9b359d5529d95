//! Server-Sent Events framing shared by the adapters, and the generic stream that
//! turns a response body into [`StreamEvent`]s.
//!
//! This module owns the byte-level SSE rules (WHATWG "event stream
//! interpretation": lines end in CRLF, LF or CR; a leading BOM is dropped; `data:`
//! loses one leading space; several `data:` lines join with `\n`; a blank line
//! dispatches the event; comments start with `:`) and the loop that feeds parsed
//! events to a protocol decoder. It knows no provider's JSON: `anthropic` and
//! `openai` implement `WireDecoder` for their event payloads. It does no HTTP,
//! no retries and no timing; `http` wraps it with those.
//!
//! Memory is bounded: a line (and the data of one event) longer than
//! `MAX_LINE_BYTES` fails the stream with [`SseError::LineTooLong`].
//!
//! Parsing is linear in the size of the body whatever the chunking: every byte is
//! scanned for a line end once, consumed bytes are dropped only when new bytes
//! arrive and only the unparsed tail is moved, and the event buffers are reused,
//! so a steady stream of events allocates nothing in this layer.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::stream::Fuse;
use futures::{Stream, StreamExt};

use super::{ProviderError, ProviderErrorKind, StreamEvent};

/// UTF-8 byte order mark, dropped at the very start of a stream (WHATWG SSE).
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// A line of the stream (and the data of one event) may hold at most this
/// many bytes (16 MiB): a provider that never sends a line end cannot grow
/// memory without limit; past it the stream fails with a provider error.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Longest excerpt of offending input quoted in an error message.
pub(crate) const EXCERPT_CHARS: usize = 120;

/// A malformed event stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line of the stream is not valid UTF-8.
    #[error("line {line} of the event stream is not valid UTF-8 ({source})")]
    InvalidUtf8 {
        /// 1-based line number in the stream.
        line: u64,
        /// The decoding error.
        source: std::str::Utf8Error,
    },
    /// A line, or the data of one event, is longer than the cap.
    #[error(
        "line {line} of the event stream is longer than {limit} bytes without a line end; \
         the provider's response is not a valid event stream"
    )]
    LineTooLong {
        /// 1-based line number in the stream.
        line: u64,
        /// The cap (`MAX_LINE_BYTES` unless set otherwise).
        limit: usize,
    },
}

/// One dispatched event, borrowed from the parser until the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field, or `message` when the event named none.
    pub event: &'a str,
    /// The `data:` lines joined with `\n`.
    pub data: &'a str,
}

/// Incremental SSE parser: push byte chunks in, pull events out.
///
/// ```
/// use troupe_llm::sse::SseParser;
/// let mut parser = SseParser::new();
/// parser.push(b"event: ping\ndata: {\"type\"");
/// assert!(parser.next_event().unwrap().is_none());
/// parser.push(b": \"ping\"}\n\n");
/// let event = parser.next_event().unwrap().unwrap();
/// assert_eq!((event.event, event.data), ("ping", "{\"type\": \"ping\"}"));
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    /// Received bytes not yet consumed; `buf[pos..]` is unparsed.
    buf: Vec<u8>,
    /// Start of the first unparsed line in `buf`.
    pos: usize,
    /// Where the search for the next line end resumes (never before `pos`), so a
    /// long line arriving in many chunks is scanned once.
    scan: usize,
    /// The previous line ended in CR: an LF right after it belongs to that line end.
    skip_lf: bool,
    /// Whether the BOM check at the start of the stream is done.
    started: bool,
    /// Event type buffer of the event being built.
    event: String,
    /// Data buffer of the event being built.
    data: String,
    /// Whether the event being built has at least one `data` field.
    has_data: bool,
    /// The buffers hold a dispatched event that must be cleared before reuse.
    dispatched: bool,
    /// Lines consumed so far (for error messages).
    lines: u64,
    /// Longest line (and event data) accepted; 0 means [`MAX_LINE_BYTES`].
    line_limit: usize,
}

impl SseParser {
    /// An empty parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser accepting lines of at most `limit` bytes (tests use small
    /// limits; streams use `MAX_LINE_BYTES`).
    pub fn with_line_limit(limit: usize) -> Self {
        Self {
            line_limit: limit.max(1),
            ..Self::default()
        }
    }

    fn line_limit(&self) -> usize {
        if self.line_limit == 0 {
            MAX_LINE_BYTES
        } else {
            self.line_limit
        }
    }

    /// Appends a chunk of the body. Consumed bytes are dropped first, moving only
    /// the unparsed tail (which arrived after the last complete line).
    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.scan -= self.pos;
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, or `None` when more bytes are needed. The event
    /// borrows the parser until the next call.
    pub fn next_event(&mut self) -> Result<Option<SseEvent<'_>>, SseError> {
        self.reset_if_dispatched();
        if !self.started {
            if self.buf.len() < BOM.len() && BOM.starts_with(&self.buf) {
                return Ok(None);
            }
            self.started = true;
            if self.buf.starts_with(BOM) {
                self.pos = BOM.len();
                self.scan = self.pos;
            }
        }
        while let Some((start, end)) = self.next_line() {
            if end - start > self.line_limit() {
                return Err(self.too_long(self.lines));
            }
            if self.process_line(start, end)? {
                return Ok(Some(self.dispatched_event()));
            }
            if self.data.len() > self.line_limit() {
                return Err(self.too_long(self.lines));
            }
        }
        // An unfinished line is held until its end arrives: not past the cap.
        if self.buf.len() - self.pos > self.line_limit() {
            return Err(self.too_long(self.lines + 1));
        }
        Ok(None)
    }

    /// The cap was passed: the stream cannot go on, and the buffered bytes
    /// are released.
    fn too_long(&mut self, line: u64) -> SseError {
        self.buf = Vec::new();
        self.data = String::new();
        self.pos = 0;
        self.scan = 0;
        SseError::LineTooLong {
            line,
            limit: self.line_limit(),
        }
    }

    /// The body ended. A final event whose lines were all complete is dispatched
    /// even without the closing blank line (servers that end with `data: [DONE]\n`);
    /// an unterminated last line is a truncated line and is dropped.
    pub fn finish(&mut self) -> Result<Option<SseEvent<'_>>, SseError> {
        self.reset_if_dispatched();
        self.buf.clear();
        self.pos = 0;
        self.scan = 0;
        if self.has_data {
            self.dispatched = true;
            return Ok(Some(self.dispatched_event()));
        }
        Ok(None)
    }

    fn reset_if_dispatched(&mut self) {
        if self.dispatched {
            self.dispatched = false;
            self.event.clear();
            self.data.clear();
            self.has_data = false;
        }
    }

    fn dispatched_event(&self) -> SseEvent<'_> {
        let event = if self.event.is_empty() {
            "message"
        } else {
            self.event.as_str()
        };
        SseEvent {
            event,
            data: &self.data,
        }
    }

    /// Finds the next complete line, returning its byte range in `buf` and
    /// consuming it with its terminator.
    fn next_line(&mut self) -> Option<(usize, usize)> {
        if self.skip_lf && self.pos < self.buf.len() {
            if self.buf[self.pos] == b'\n' {
                self.pos += 1;
                self.scan = self.scan.max(self.pos);
            }
            self.skip_lf = false;
        }
        let offset = self.buf[self.scan..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r');
        match offset {
            None => {
                self.scan = self.buf.len();
                None
            }
            Some(offset) => {
                let end = self.scan + offset;
                let start = self.pos;
                if self.buf[end] == b'\r' {
                    if end + 1 < self.buf.len() {
                        self.pos = if self.buf[end + 1] == b'\n' {
                            end + 2
                        } else {
                            end + 1
                        };
                    } else {
                        self.pos = end + 1;
                        self.skip_lf = true;
                    }
                } else {
                    self.pos = end + 1;
                }
                self.scan = self.pos;
                self.lines += 1;
                Some((start, end))
            }
        }
    }

    /// Applies one line to the event being built; true when it dispatched one.
    fn process_line(&mut self, start: usize, end: usize) -> Result<bool, SseError> {
        let line =
            std::str::from_utf8(&self.buf[start..end]).map_err(|source| SseError::InvalidUtf8 {
                line: self.lines,
                source,
            })?;
        if line.is_empty() {
            if self.has_data {
                self.dispatched = true;
                return Ok(true);
            }
            self.event.clear();
            return Ok(false);
        }
        if line.starts_with(':') {
            return Ok(false);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` matter to reconnecting browsers only; other
            // fields are ignored by the standard.
            _ => {}
        }
        Ok(false)
    }
}

/// Whether a protocol decoder expects more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// The response is still going.
    Continue,
    /// The response is complete (`message_stop`, `[DONE]`).
    Finished,
}

/// A protocol's event decoder: turns SSE events into stream events.
pub(crate) trait WireDecoder: Send + Unpin + 'static {
    /// Handles one SSE event, queueing what it yields. An `Err` ends the stream
    /// after the queued events.
    fn on_event(
        &mut self,
        event: SseEvent<'_>,
        out: &mut VecDeque<StreamEvent>,
    ) -> Result<Progress, ProviderError>;

    /// The body ended before [`Progress::Finished`]: queue the closing events of
    /// a complete response or report the stream as broken.
    fn on_end(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), ProviderError>;
}

/// A body byte stream as the decoders take it: transport failures are already
/// [`ProviderError`]s (idle timeout, connection reset).
pub(crate) type ByteStream = futures::stream::BoxStream<'static, Result<Bytes, ProviderError>>;

/// Where the decode stream is.
enum State {
    /// Reading the body.
    Reading,
    /// The response is complete: bytes already received are drained (so the
    /// connection can be reused), but nothing more is waited for.
    Draining,
    /// Nothing more to yield after the queue.
    Ended,
}

/// Decodes a body into stream events with a protocol decoder.
pub(crate) struct DecodeStream<D> {
    provider: String,
    body: Fuse<ByteStream>,
    parser: SseParser,
    decoder: D,
    queue: VecDeque<StreamEvent>,
    error: Option<ProviderError>,
    state: State,
}

/// Decodes an SSE body with `decoder` into stream events: what each adapter's
/// public `decode_sse` does (no HTTP involved; errors of `bytes` pass through).
pub(crate) fn decode_body<D: WireDecoder>(
    provider: &str,
    bytes: impl Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
    decoder: D,
) -> super::EventStream {
    Box::pin(DecodeStream::new(provider, bytes.boxed(), decoder))
}

impl<D: WireDecoder> DecodeStream<D> {
    /// A stream decoding `body` with `decoder`.
    pub(crate) fn new(provider: &str, body: ByteStream, decoder: D) -> Self {
        Self {
            provider: provider.to_string(),
            body: body.fuse(),
            parser: SseParser::new(),
            decoder,
            queue: VecDeque::new(),
            error: None,
            state: State::Reading,
        }
    }

    /// Feeds every complete event of the parser to the decoder.
    fn drain_parser(&mut self, at_end: bool) {
        loop {
            let next = if at_end {
                self.parser.finish()
            } else {
                self.parser.next_event()
            };
            let event = match next {
                Ok(Some(event)) => event,
                Ok(None) => return,
                Err(err) => {
                    self.fail(ProviderError::new(
                        &self.provider,
                        ProviderErrorKind::MalformedResponse,
                        format!("malformed event stream: {err}"),
                    ));
                    return;
                }
            };
            match self.decoder.on_event(event, &mut self.queue) {
                Ok(Progress::Continue) => {}
                Ok(Progress::Finished) => {
                    self.state = State::Draining;
                    return;
                }
                Err(err) => {
                    self.fail(err);
                    return;
                }
            }
            if at_end {
                return;
            }
        }
    }

    fn fail(&mut self, err: ProviderError) {
        self.error = Some(err);
        self.state = State::Ended;
    }
}

impl<D: WireDecoder> Stream for DecodeStream<D> {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.queue.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if let Some(err) = this.error.take() {
                return Poll::Ready(Some(Err(err)));
            }
            match this.state {
                State::Ended => return Poll::Ready(None),
                State::Draining => match this.body.poll_next_unpin(cx) {
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(_))) | Poll::Ready(None) | Poll::Pending => {
                        this.state = State::Ended;
                    }
                },
                State::Reading => match this.body.poll_next_unpin(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(chunk))) => {
                        this.parser.push(&chunk);
                        this.drain_parser(false);
                    }
                    Poll::Ready(Some(Err(err))) => this.fail(err),
                    Poll::Ready(None) => {
                        this.drain_parser(true);
                        let open = matches!(this.state, State::Reading);
                        // The body is over: never poll it again.
                        this.state = State::Ended;
                        if open && let Err(err) = this.decoder.on_end(&mut this.queue) {
                            this.error = Some(err);
                        }
                    }
                },
            }
        }
    }
}

/// At most [`EXCERPT_CHARS`] characters of `text`, whitespace runs collapsed, for
/// error messages.
pub(crate) fn excerpt(text: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in text.split_whitespace() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars() {
            if chars >= EXCERPT_CHARS {
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]]) -> Result<Vec<(String, String)>, SseError> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk);
            while let Some(event) = parser.next_event()? {
                out.push((event.event.to_string(), event.data.to_string()));
            }
        }
        if let Some(event) = parser.finish()? {
            out.push((event.event.to_string(), event.data.to_string()));
        }
        Ok(out)
    }

    fn pair(event: &str, data: &str) -> (String, String) {
        (event.to_string(), data.to_string())
    }

    #[test]
    fn parses_whatwg_examples() {
        let events = collect(&[b"data: YHOO\ndata: +2\ndata: 10\n\n"]).unwrap();
        assert_eq!(events, vec![pair("message", "YHOO\n+2\n10")]);

        let events = collect(&[
            b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                pair("message", "first event"),
                pair("message", "second event"),
                pair("message", " third event"),
            ]
        );

        let events = collect(&[b"data\n\ndata\ndata\n\ndata:"]).unwrap();
        assert_eq!(events, vec![pair("message", ""), pair("message", "\n")]);
    }

    #[test]
    fn every_line_ending_and_every_split_point_gives_the_same_events() {
        let text = "\u{feff}event: a\r\ndata: x\r\n\r\nevent: b\rdata: y\r\rdata: é€😀\n\n";
        let expected = vec![pair("a", "x"), pair("b", "y"), pair("message", "é€😀")];
        let bytes = text.as_bytes();
        assert_eq!(collect(&[bytes]).unwrap(), expected);
        for split in 0..=bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(collect(&[a, b]).unwrap(), expected, "split at {split}");
        }
        let single: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(collect(&single).unwrap(), expected);
    }

    #[test]
    fn event_type_resets_after_dispatch_and_after_empty_events() {
        let events =
            collect(&[b"event: a\n\ndata: 1\n\nevent: b\ndata: 2\n\ndata: 3\n\n"]).unwrap();
        assert_eq!(
            events,
            vec![pair("message", "1"), pair("b", "2"), pair("message", "3")]
        );
    }

    #[test]
    fn final_event_without_blank_line_is_kept_but_a_cut_line_is_not() {
        assert_eq!(
            collect(&[b"data: [DONE]\n"]).unwrap(),
            vec![pair("message", "[DONE]")]
        );
        assert_eq!(collect(&[b"data: {\"type\":\"mess"]).unwrap(), vec![]);
    }

    #[test]
    fn invalid_utf8_is_an_error_not_a_panic() {
        let err = collect(&[b"data: ok\n\ndata: \xff\xfe\n\n"]).unwrap_err();
        assert!(
            matches!(err, SseError::InvalidUtf8 { line: 3, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_long_line_in_many_chunks_is_scanned_once() {
        let mut parser = SseParser::new();
        parser.push(b"data: ");
        for _ in 0..1000 {
            parser.push(b"abcdefgh");
            assert!(parser.next_event().unwrap().is_none());
            assert_eq!(parser.scan, parser.buf.len());
        }
        parser.push(b"\n\n");
        let event = parser.next_event().unwrap().unwrap();
        assert_eq!(event.data.len(), 8000);
    }

    #[test]
    fn excerpt_collapses_whitespace_and_truncates() {
        assert_eq!(
            excerpt("  <html>\n  <body>  Bad\tGateway "),
            "<html> <body> Bad Gateway"
        );
        let long = "x".repeat(500);
        let short = excerpt(&long);
        assert_eq!(short.chars().count(), EXCERPT_CHARS + 1);
        assert!(short.ends_with('…'));
    }
    #[test]
    fn a_line_past_the_cap_fails_and_frees_its_bytes() {
        let mut parser = SseParser::with_line_limit(12);
        parser.push(b"data: 12345");
        assert_eq!(parser.next_event().unwrap(), None);
        parser.push(b"67890");
        let err = parser.next_event().unwrap_err();
        assert_eq!(err, SseError::LineTooLong { line: 1, limit: 12 });
        assert!(err.to_string().contains("longer than 12 bytes"));
        assert_eq!(parser.buf.capacity(), 0);
        // A complete line over the cap, and lines within it.
        let mut parser = SseParser::with_line_limit(12);
        parser.push(b"data: 1\n\ndata: 123456789\n\n");
        assert_eq!(parser.next_event().unwrap().unwrap().data, "1");
        assert!(matches!(
            parser.next_event(),
            Err(SseError::LineTooLong { line: 3, .. })
        ));
    }

    #[test]
    fn event_data_past_the_cap_fails_too() {
        let mut parser = SseParser::with_line_limit(10);
        parser.push(b"data: 1234\ndata: 1234\ndata: 1234\n");
        assert!(matches!(
            parser.next_event(),
            Err(SseError::LineTooLong { .. })
        ));
    }

    #[tokio::test]
    async fn a_provider_that_never_ends_a_line_gets_a_clear_error() {
        use futures::StreamExt;
        // An endless body without a line end: without the cap this would
        // grow memory until the process dies.
        let chunk = Bytes::from(vec![b'a'; 64 * 1024]);
        let endless = futures::stream::iter(std::iter::once(Ok(Bytes::from_static(b"data: "))))
            .chain(futures::stream::repeat_with(move || Ok(chunk.clone())));
        let mut events = crate::anthropic::decode_sse("hostile", endless);
        let mut error = None;
        while let Some(item) = events.next().await {
            if let Err(err) = item {
                error = Some(err);
                break;
            }
        }
        let error = error.expect("the stream fails");
        assert_eq!(error.kind, ProviderErrorKind::MalformedResponse);
        assert!(
            error.to_string().contains(&format!(
                "line 1 of the event stream is longer than {MAX_LINE_BYTES} bytes"
            )),
            "{error}"
        );
    }
}
