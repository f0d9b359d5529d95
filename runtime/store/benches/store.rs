//! Session store costs (SPEC §14: resume of a 10,000-message session ≤ 200 ms,
//! listing 1,000 sessions ≤ 100 ms; the durable write is part of the ≤ 3 ms
//! per-turn overhead).
//!
//! - `append_flush_2KB`: one typical 2 KB message written with `put_message`
//!   and made durable with `flush` (fsync), as the agent does before each
//!   model call; `append_2KB` is the write alone.
//! - `load_history_10k`: `load_history` of a session of 10,000 messages of
//!   about 2 KB each (20 MB of JSON) on an open store; `open_and_load_10k`
//!   adds opening the database, as a fresh `troupe resume` does.
//! - `list_sessions_1k`: `list_sessions` with 1,000 sessions of 10 messages.
//!
//! The database lives in a temporary directory on the machine's disk. Results
//! go to `docs/performance.md`, never into assertions.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};
use troupe_store::{NewSession, Store};

/// Size of a typical message in bytes of content.
const MESSAGE_BYTES: usize = 2_000;
/// Messages of the resumed session.
const HISTORY_MESSAGES: u64 = 10_000;
/// Sessions of the listing.
const LISTED_SESSIONS: usize = 1_000;
/// Messages of each listed session.
const MESSAGES_PER_LISTED_SESSION: u64 = 10;

/// Text that looks like source code and prose, cut to length.
const FILLER: &str = "fn handle(&mut self, msg: Message) -> Result<(), Error> {\n    \
    // \"quoted\" text, unicode café 東京 and a backslash \\ for escapes\n    \
    self.state.apply(msg)?;\n}\n";

fn filler(bytes: usize) -> String {
    FILLER.chars().cycle().take(bytes).collect()
}

/// Message `i` of a conversation of about [`MESSAGE_BYTES`] each: user text,
/// assistant text with a tool call, tool result with file contents.
fn message(i: u64) -> Message {
    match i % 3 {
        0 => Message::user_text(filler(MESSAGE_BYTES)),
        1 => Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: filler(MESSAGE_BYTES - 100),
                },
                ContentBlock::ToolCall(ToolCall {
                    id: format!("toolu_{i:020}"),
                    name: "read_file".into(),
                    input: format!(r#"{{"path":"src/module_{i}.rs","offset":1,"limit":200}}"#),
                }),
            ],
        },
        _ => Message::tool_results(vec![ToolResult::text(
            format!("toolu_{:020}", i - 1),
            filler(MESSAGE_BYTES),
            false,
        )]),
    }
}

fn session(id: &str) -> NewSession {
    NewSession {
        id: id.into(),
        cwd: "/work/repo".into(),
        provider: "claude".into(),
        model: "claude-sonnet-4-5".into(),
        parent: None,
        agent_path: None,
        run_id: None,
        fork_of: None,
    }
}

fn fail(what: &str, error: impl std::fmt::Display) -> ! {
    panic!("{what}: {error}")
}

fn store_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("store");
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));

    // Append (+ flush) one message per iteration.
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
    let store = Store::open(dir.path()).unwrap_or_else(|e| fail("open", e));
    store
        .create_session(&session("append"))
        .unwrap_or_else(|e| fail("create", e));
    let sample = message(1);
    let json_len = serde_json::to_vec(&sample).map(|v| v.len()).unwrap_or(0);
    eprintln!("typical message: {json_len} bytes of JSON");
    let mut next = 0u64;
    group.bench_function("append_flush_2KB", |b| {
        b.iter(|| {
            store
                .put_message("append", next, black_box(&sample))
                .unwrap_or_else(|e| fail("put", e));
            store.flush().unwrap_or_else(|e| fail("flush", e));
            next += 1;
        })
    });
    group.bench_function("append_2KB", |b| {
        b.iter(|| {
            store
                .put_message("append", next, black_box(&sample))
                .unwrap_or_else(|e| fail("put", e));
            next += 1;
        })
    });
    drop(store);
    drop(dir);

    // Resume of a 10,000-message session.
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
    {
        let store = Store::open(dir.path()).unwrap_or_else(|e| fail("open", e));
        store
            .create_session(&session("big"))
            .unwrap_or_else(|e| fail("create", e));
        for i in 0..HISTORY_MESSAGES {
            store
                .put_message("big", i, &message(i))
                .unwrap_or_else(|e| fail("put", e));
        }
        store.flush().unwrap_or_else(|e| fail("flush", e));
    }
    {
        let store = Store::open(dir.path()).unwrap_or_else(|e| fail("open", e));
        let loaded = store
            .load_history("big")
            .unwrap_or_else(|e| fail("load", e));
        assert_eq!(loaded.messages.len() as u64, HISTORY_MESSAGES);
        group.bench_function("load_history_10k", |b| {
            b.iter(|| {
                black_box(
                    store
                        .load_history("big")
                        .unwrap_or_else(|e| fail("load", e)),
                )
            })
        });
    }
    group.bench_function("open_and_load_10k", |b| {
        b.iter(|| {
            let store = Store::open(dir.path()).unwrap_or_else(|e| fail("open", e));
            black_box(
                store
                    .load_history("big")
                    .unwrap_or_else(|e| fail("load", e)),
            )
        })
    });
    drop(dir);

    // Listing 1,000 sessions.
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
    let store = Store::open(dir.path()).unwrap_or_else(|e| fail("open", e));
    for n in 0..LISTED_SESSIONS {
        let id = format!("session-{n:04}");
        store
            .create_session(&session(&id))
            .unwrap_or_else(|e| fail("create", e));
        for i in 0..MESSAGES_PER_LISTED_SESSION {
            store
                .put_message(&id, i, &message(i))
                .unwrap_or_else(|e| fail("put", e));
        }
    }
    store.flush().unwrap_or_else(|e| fail("flush", e));
    assert_eq!(
        store.list_sessions().map(|l| l.len()).unwrap_or(0),
        LISTED_SESSIONS
    );
    group.bench_function("list_sessions_1k", |b| {
        b.iter(|| black_box(store.list_sessions().unwrap_or_else(|e| fail("list", e))))
    });
    group.finish();
}

criterion_group!(benches, store_benches);
criterion_main!(benches);
