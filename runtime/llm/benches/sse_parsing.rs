//! SSE parsing and text accumulation throughput (SPEC §14: linear in the response
//! size, at least 50 MB/s).
//!
//! Synthesises Anthropic Messages streams of 1 MB and 10 MB made of text deltas of
//! 20–60 bytes (with the escapes real text has), feeds them in 16 KiB chunks (a
//! typical network read) through the real decoder, and accumulates the answer
//! with `ResponseAccumulator`. The 10 MB stream is also fed as a single chunk, to
//! show that chunking does not change the cost. Results go to
//! `docs/performance.md`, never into assertions.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use troupe_llm::{ProviderError, ResponseAccumulator, anthropic};

const MB: usize = 1_000_000;
/// Size of one body chunk, as a network read would deliver it.
const CHUNK: usize = 16 * 1024;
/// Shortest and longest text delta, in bytes of text.
const DELTA_MIN: usize = 20;
const DELTA_MAX: usize = 60;

/// Words the deltas are cut from; the quote, backslash and newline make the JSON
/// carry escapes as real model text does.
const TEXT: &str = "The quick brown fox jumps over the lazy dog. \"Quoted\" text,\n\
code like `fn main() { println!(\"hi\\n\"); }` and some unicode: café, 東京, 🚀.\n";

/// Escapes `text` as a JSON string body.
fn json_escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// An Anthropic stream of at least `target` bytes, and the text it carries.
fn synthesise(target: usize) -> (String, usize) {
    let mut body = String::with_capacity(target + 1024);
    body.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1200,\"output_tokens\":1}}}\n\n");
    body.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    let chars: Vec<char> = TEXT.chars().collect();
    let mut at = 0;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut text_len = 0;
    while body.len() < target {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let want = DELTA_MIN + (seed as usize) % (DELTA_MAX - DELTA_MIN + 1);
        let mut delta = String::new();
        while delta.len() < want {
            delta.push(chars[at % chars.len()]);
            at += 1;
        }
        text_len += delta.len();
        body.push_str("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"");
        json_escape(&delta, &mut body);
        body.push_str("\"}}\n\n");
    }
    body.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    body.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":250000}}\n\n");
    body.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    (body, text_len)
}

fn chunks(body: &Bytes, size: usize) -> Vec<Bytes> {
    (0..body.len())
        .step_by(size)
        .map(|start| body.slice(start..(start + size).min(body.len())))
        .collect()
}

/// Decodes and accumulates one stream; returns the answer's length.
fn decode(chunks: &[Bytes]) -> usize {
    let items: Vec<Result<Bytes, ProviderError>> = chunks.iter().cloned().map(Ok).collect();
    let stream = anthropic::decode_sse("bench", futures::stream::iter(items));
    let acc = futures::executor::block_on(stream.fold(
        ResponseAccumulator::new(),
        |mut acc, event| async move {
            if let Ok(event) = event {
                acc.push(&event);
            }
            acc
        },
    ));
    acc.into_message().text().len()
}

fn sse_parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_parsing");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    for (label, size, chunk) in [
        ("1MB", MB, CHUNK),
        ("10MB", 10 * MB, CHUNK),
        ("10MB_one_chunk", 10 * MB, usize::MAX),
    ] {
        let (body, text_len) = synthesise(size);
        let body = Bytes::from(body);
        let chunks = chunks(&body, chunk.min(body.len()));
        // Correctness guard outside the timing: every byte of text arrives.
        assert_eq!(decode(&chunks), text_len);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("anthropic_decode_accumulate", label),
            &chunks,
            |b, chunks| b.iter(|| black_box(decode(black_box(chunks)))),
        );
    }
    group.finish();
}

criterion_group!(benches, sse_parsing);
criterion_main!(benches);
