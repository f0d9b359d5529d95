//! What starting a fork costs before its first model call (SPEC §14: fork
//! spawn latency ≤ 1 ms for a 1,000-message parent; SPEC §7: a fork starts
//! from a deep copy of its parent's history).
//!
//! - `plan_child_fork_1000`: `plan_child` of a fork call on a parent history
//!   of 1,000 realistic messages (1–2 KB each: user text, assistant text with
//!   a `read_file` call, its result) plus the prompt and the response holding
//!   the call — the deep copy, the placeholder results and the task;
//!   `clone_1000` is the bare `to_vec` of the same history for comparison, and
//!   `plan_child_role` a role child's plan (its history is only its task).
//! - `save_fork_copy_1000`: what the fork's first save does with that copy,
//!   on a fresh sled store in a temporary directory (opened outside the
//!   timing): `create_session`, `put_message` of every message of the copy,
//!   one `flush` (fsync); `encode_fork_copy_1000` is the JSON encoding of
//!   those messages alone; `sled_batch_fork_copy_1000` writes the same
//!   encoded messages straight to a fresh sled tree as one batch and flushes
//!   (sled configured as the store configures it), an estimate of writing the
//!   copy in one batch instead of one transaction per message.
//!
//! With `TROUPE_FORK_STRESS=N` the binary runs no benchmark: it writes N fork
//! copies one after the other into one store (or straight into sled, one
//! transaction per message or one batch per copy) and reports when the
//! database stops making progress (see `stress`).
//!
//! Results go to `docs/performance.md`, never into assertions.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group};
use troupe_agent::AgentSpec;
use troupe_agent::agent_tool::AgentCallArgs;
use troupe_agent::roles::RoleSet;
use troupe_agent::subagent::plan_child;
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};
use troupe_store::{NewSession, Store};

/// Messages of the parent's history before the prompt that leads to the fork.
const PARENT_MESSAGES: usize = 1_000;
/// The session store's sled page cache (`runtime/store/src/lib.rs`).
const STORE_CACHE_BYTES: u64 = 32 * 1024 * 1024;
/// The session store's background flush period, in ms (same file).
const STORE_BACKGROUND_FLUSH_MS: u64 = 500;
/// Id of the `agent` call that starts the fork.
const FORK_CALL_ID: &str = "toolu_fork_000001";

/// Text that looks like source code and prose.
const FILLER: &str = "fn handle(&mut self, msg: Message) -> Result<(), Error> {\n    \
    // \"quoted\" text, unicode café 東京 and a backslash \\ for escapes\n    \
    self.state.apply(msg)?;\n}\n";

fn filler(chars: usize, seed: usize) -> String {
    let mut out = format!("[{seed}] ");
    out.extend(FILLER.chars().cycle().take(chars));
    out
}

/// Message `i` of a conversation of `len` messages of 1–2 KB.
fn history_message(i: usize, len: usize) -> Message {
    if i == 0 {
        return Message::user_text(filler(1_200, i));
    }
    if i == len - 1 {
        return Message::assistant_text(filler(1_000, i));
    }
    if i % 2 == 1 {
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: filler(900, i),
                },
                ContentBlock::ToolCall(ToolCall {
                    id: format!("toolu_hist_{i:06}"),
                    name: "read_file".into(),
                    input: format!(r#"{{"path":"src/module_{i}.rs"}}"#),
                }),
            ],
        }
    } else {
        Message::tool_results(vec![ToolResult::text(
            format!("toolu_hist_{:06}", i - 1),
            filler(1_700, i),
            false,
        )])
    }
}

/// The parent's history when it calls `agent`: 1,000 messages, the prompt,
/// and the response holding the fork call.
fn parent_at_call() -> Vec<Message> {
    let mut history: Vec<Message> = (0..PARENT_MESSAGES)
        .map(|i| history_message(i, PARENT_MESSAGES))
        .collect();
    history.push(Message::user_text("Now check the parser in a fork."));
    history.push(Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::Text {
                text: "Forking a worker for the parser.".into(),
            },
            ContentBlock::ToolCall(ToolCall {
                id: FORK_CALL_ID.into(),
                name: "agent".into(),
                input: r#"{"description":"check the parser","prompt":"check the parser module","fork":true}"#.into(),
            }),
        ],
    });
    history
}

fn args(fork: bool) -> AgentCallArgs {
    AgentCallArgs {
        description: "check the parser".into(),
        prompt: "check the parser module".into(),
        role: (!fork).then(|| "general".to_string()),
        fork,
    }
}

fn fail(what: &str, error: impl std::fmt::Display) -> ! {
    panic!("{what}: {error}")
}

fn fork_benches(c: &mut Criterion) {
    let history = parent_at_call();
    let main = AgentSpec::main(25);
    let roles = RoleSet::builtin();
    let json_bytes: usize = history
        .iter()
        .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
        .sum();
    eprintln!(
        "parent history: {} messages, {json_bytes} bytes of JSON",
        history.len()
    );
    let fork_args = args(true);
    let copy = plan_child(&main, &roles, &fork_args, FORK_CALL_ID, &history)
        .unwrap_or_else(|e| fail("plan", e))
        .history;
    eprintln!("fork's copy: {} messages", copy.len());

    let mut group = c.benchmark_group("fork");
    group.sample_size(50);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("plan_child_fork_1000", |b| {
        b.iter_with_large_drop(|| {
            plan_child(
                &main,
                &roles,
                black_box(&fork_args),
                FORK_CALL_ID,
                black_box(&history),
            )
            .unwrap_or_else(|e| fail("plan", e))
        })
    });
    group.bench_function("clone_1000", |b| {
        b.iter_with_large_drop(|| black_box(&history).to_vec())
    });
    let role_args = args(false);
    group.bench_function("plan_child_role", |b| {
        b.iter_with_large_drop(|| {
            plan_child(
                &main,
                &roles,
                black_box(&role_args),
                FORK_CALL_ID,
                black_box(&history),
            )
            .unwrap_or_else(|e| fail("plan", e))
        })
    });
    group.bench_function("encode_fork_copy_1000", |b| {
        b.iter(|| {
            let mut bytes = 0;
            for message in black_box(&copy) {
                bytes += serde_json::to_vec(message)
                    .unwrap_or_else(|e| fail("encode", e))
                    .len();
            }
            bytes
        })
    });
    group.finish();

    // A fresh store per iteration (opened and dropped outside the timing):
    // sustained transactional writes into one store can hang sled (see
    // `stress` below), and a bench must end.
    let mut group = c.benchmark_group("fork_store");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("save_fork_copy_1000", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
                let store = Store::open(dir.path()).unwrap_or_else(|e| fail("open", e));
                (dir, store)
            },
            |(dir, store)| {
                save_copy(&store, "fork-1", &copy);
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("sled_batch_fork_copy_1000", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
                let db = sled_like_store(dir.path());
                let tree = db
                    .open_tree("messages")
                    .unwrap_or_else(|e| fail("sled tree", e));
                (dir, db, tree)
            },
            |(dir, db, tree)| {
                let mut batch = sled::Batch::default();
                for (i, message) in copy.iter().enumerate() {
                    let mut key = b"fork-1".to_vec();
                    key.push(0);
                    key.extend_from_slice(&(i as u64).to_be_bytes());
                    let value = serde_json::to_vec(message).unwrap_or_else(|e| fail("encode", e));
                    batch.insert(key, value);
                }
                tree.apply_batch(batch)
                    .unwrap_or_else(|e| fail("apply_batch", e));
                db.flush().unwrap_or_else(|e| fail("flush", e));
                (dir, db, tree)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// What a fork's first save does with its copy: the child session, every
/// message with `put_message`, one flush.
fn save_copy(store: &Store, id: &str, copy: &[Message]) {
    store
        .create_session(&NewSession {
            id: id.into(),
            cwd: "/work/project".into(),
            provider: "scripted".into(),
            model: "scripted-model".into(),
            parent: Some("parent".into()),
            agent_path: Some("main/fork-1".into()),
            run_id: Some("run".into()),
            fork_of: None,
        })
        .unwrap_or_else(|e| fail("create", e));
    for (i, message) in copy.iter().enumerate() {
        store
            .put_message(id, i as u64, message)
            .unwrap_or_else(|e| fail("put", e));
    }
    store.flush().unwrap_or_else(|e| fail("flush", e));
}

/// How [`stress`] writes each copy.
#[derive(Clone, Copy, Debug)]
enum StressWrite {
    /// The store's way: `create_session`, `put_message` per message (a sled
    /// transaction over the sessions and messages trees each), `flush`.
    Store,
    /// The same transaction per message straight on sled (a metadata record
    /// read and rewritten, the message inserted), then `flush`.
    SledTransaction,
    /// Straight on sled: every message of the copy in one batch, then the
    /// metadata record, then `flush`.
    SledBatch,
}

/// A sled database configured as the store configures its own.
fn sled_like_store(dir: &std::path::Path) -> sled::Db {
    sled::Config::new()
        .path(dir)
        .cache_capacity(STORE_CACHE_BYTES)
        .flush_every_ms(Some(STORE_BACKGROUND_FLUSH_MS))
        .open()
        .unwrap_or_else(|e| fail("sled open", e))
}

/// Not a benchmark: writes `copies` fork copies into ONE database, one
/// after the other, printing the time of each, and stops with exit status 2
/// when one takes longer than [`STRESS_PATIENCE`] (the database hung). Run
/// with `TROUPE_FORK_STRESS=2000 cargo bench -p troupe-agent --bench fork`
/// (`TROUPE_FORK_STRESS_WRITE=store|sled-tx|sled-batch`, default `store`).
fn stress(copies: u64, write: StressWrite) {
    use sled::Transactional;

    let history = parent_at_call();
    let copy = plan_child(
        &AgentSpec::main(25),
        &RoleSet::builtin(),
        &args(true),
        FORK_CALL_ID,
        &history,
    )
    .unwrap_or_else(|e| fail("plan", e))
    .history;
    let encoded: Vec<Vec<u8>> = copy
        .iter()
        .map(|m| serde_json::to_vec(m).unwrap_or_else(|e| fail("encode", e)))
        .collect();
    let dir = tempfile::tempdir().unwrap_or_else(|e| fail("tempdir", e));
    let (store, db) = match write {
        StressWrite::Store => (
            Some(Store::open(dir.path()).unwrap_or_else(|e| fail("open", e))),
            None,
        ),
        _ => (None, Some(sled_like_store(dir.path()))),
    };
    let trees = db.as_ref().map(|db| {
        let tree = |name: &str| db.open_tree(name).unwrap_or_else(|e| fail("tree", e));
        (tree("sessions"), tree("messages"))
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watched = done.clone();
    std::thread::spawn(move || {
        let mut seen = 0;
        loop {
            std::thread::sleep(STRESS_PATIENCE);
            let now = watched.load(std::sync::atomic::Ordering::Relaxed);
            if now == seen {
                eprintln!(
                    "stress ({write:?}): no copy finished in {} s after {now} copies \
                     ({:.0} MB written): the database hung",
                    STRESS_PATIENCE.as_secs(),
                    now as f64 * 1.56
                );
                std::process::exit(2);
            }
            seen = now;
        }
    });
    let meta = vec![b'm'; 400];
    for n in 0..copies {
        let clock = std::time::Instant::now();
        let id = format!("fork-{n:06}");
        let key = |i: usize| {
            let mut key = id.clone().into_bytes();
            key.push(0);
            key.extend_from_slice(&(i as u64).to_be_bytes());
            key
        };
        match (&store, &db, &trees) {
            (Some(store), _, _) => save_copy(store, &id, &copy),
            (None, Some(db), Some((sessions, messages))) => {
                sessions
                    .insert(id.as_bytes(), meta.clone())
                    .unwrap_or_else(|e| fail("insert", e));
                if matches!(write, StressWrite::SledBatch) {
                    let mut batch = sled::Batch::default();
                    for (i, value) in encoded.iter().enumerate() {
                        batch.insert(key(i), value.clone());
                    }
                    messages
                        .apply_batch(batch)
                        .unwrap_or_else(|e| fail("apply_batch", e));
                    sessions
                        .insert(id.as_bytes(), meta.clone())
                        .unwrap_or_else(|e| fail("insert", e));
                } else {
                    for (i, value) in encoded.iter().enumerate() {
                        let key = key(i);
                        (sessions, messages)
                            .transaction(|(s, m)| {
                                let _ = s.get(id.as_bytes())?;
                                s.insert(id.as_bytes(), meta.clone())?;
                                m.insert(key.as_slice(), value.as_slice())?;
                                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
                            })
                            .unwrap_or_else(|e| fail("transaction", format!("{e:?}")));
                    }
                }
                db.flush().unwrap_or_else(|e| fail("flush", e));
            }
            _ => unreachable!("a store or a database is open"),
        }
        done.store(n + 1, std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "stress ({write:?}): copy {n}: {:.1} ms",
            clock.elapsed().as_secs_f64() * 1e3
        );
    }
    eprintln!("stress ({write:?}): {copies} copies written");
}

/// How long [`stress`] waits for one copy before it calls the store hung.
const STRESS_PATIENCE: Duration = Duration::from_secs(20);

fn main() {
    if let Ok(copies) = std::env::var("TROUPE_FORK_STRESS") {
        let copies = copies
            .trim()
            .parse()
            .unwrap_or_else(|e| fail("TROUPE_FORK_STRESS", e));
        let write = match std::env::var("TROUPE_FORK_STRESS_WRITE").as_deref() {
            Err(_) | Ok("store") => StressWrite::Store,
            Ok("sled-tx") => StressWrite::SledTransaction,
            Ok("sled-batch") => StressWrite::SledBatch,
            Ok(other) => fail(
                "TROUPE_FORK_STRESS_WRITE",
                format!("{other:?} is not store, sled-tx or sled-batch"),
            ),
        };
        stress(copies, write);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

criterion_group!(benches, fork_benches);
