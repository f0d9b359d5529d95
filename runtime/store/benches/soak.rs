//! The store soak: one store written the way a busy daemon writes it, for a
//! bounded time, to show that no write hangs and how many bytes a run costs
//! (`docs/performance.md`, "The store under sustained writes").
//!
//! Sixteen workers each play one run after another against one open store:
//! a ten-turn run saves its messages through the writer thread
//! ([`Store::commit`], waiting for "durable" as an agent does), a pending
//! tool result before each tool message, the run's events (iteration, text
//! deltas, tool start and end, usage) and spans straight into their trees
//! as the event log and span writer do, and the run record at its start
//! and end. Every fifth run is a fork of a 1,000-message parent; every
//! third run compacts (a ledger entry and a marker). A retention pass runs
//! every few seconds under `--max-bytes`.
//!
//! It fails (exit 1) when a write takes longer than 1 s while the disk
//! itself answered, and stops with exit 2 when nothing has been written for
//! 30 s (a hang). Beside the workers a probe writes 4 KiB into a file of its
//! own in the same directory and syncs it every 50 ms: a slow write during
//! which one of the probe's syncs took 250 ms or more is the machine's
//! stall (a busy disk or CPU), not the store's, and is reported, not
//! failed. At the end it prints the write latencies, the probe's, what
//! each tree holds, the size on disk and the bytes per run and per message.
//!
//! `cargo bench -p troupe-store --bench soak -- --seconds 600` (CI runs it
//! for 60 s; `--workers N`, `--max-bytes N`, `--dir PATH` to keep the store).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use troupe_protocol::events::{EventKind, RunEvent, RunStatus};
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult, Usage};
use troupe_store::{
    CompactionMarker, ForkBase, LedgerEntry, NewSession, Retention, RunRecord, RunState, Store,
    StoreError,
};

/// A write slower than this fails the soak.
const SLOW_WRITE: Duration = Duration::from_secs(1);
/// A probe sync this slow means the machine itself stalled.
const STALLED_PROBE: Duration = Duration::from_millis(250);
/// How often the probe writes and syncs.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// No write at all for this long is a hang.
const HANG: Duration = Duration::from_secs(30);
/// Turns of each run.
const TURNS: u64 = 10;
/// Messages of the parent every fifth run forks.
const PARENT_MESSAGES: u64 = 1_000;
/// Text deltas of each answer (a model streams a few words at a time).
const DELTAS_PER_TURN: usize = 24;
/// How long after its end a run's events are compacted here.
const COMPACT_AFTER: Duration = Duration::from_secs(30);
/// How often the retention pass runs.
const RETENTION_EVERY: Duration = Duration::from_secs(5);

/// What the command line asks for.
struct Options {
    seconds: u64,
    workers: usize,
    max_bytes: Option<u64>,
    dir: Option<std::path::PathBuf>,
}

fn options() -> Options {
    let mut options = Options {
        seconds: 600,
        workers: 16,
        max_bytes: None,
        dir: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--seconds" => options.seconds = value().parse().unwrap_or(options.seconds),
            "--workers" => options.workers = value().parse().unwrap_or(options.workers),
            "--max-bytes" => options.max_bytes = value().parse().ok(),
            "--dir" => options.dir = Some(value().into()),
            // `cargo bench` passes `--bench`; anything else is ignored too.
            _ => {}
        }
    }
    options
}

/// Latencies of one kind of write, in microseconds.
#[derive(Default)]
struct Latencies {
    samples: Vec<u32>,
}

impl Latencies {
    fn add(&mut self, took: Duration) {
        self.samples
            .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
    }

    fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
    }

    fn line(&mut self, name: &str) -> String {
        self.samples.sort_unstable();
        let at = |q: f64| {
            let n = self.samples.len();
            if n == 0 {
                return 0.0;
            }
            let i = ((n as f64 - 1.0) * q).round() as usize;
            f64::from(self.samples[i]) / 1000.0
        };
        format!(
            "{name:<28} {:>9} writes  p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  max {:>8.2} ms",
            self.samples.len(),
            at(0.5),
            at(0.99),
            at(0.999),
            at(1.0)
        )
    }
}

/// What every worker shares.
struct Shared {
    store: Store,
    started: Instant,
    progress: AtomicU64,
    slow: AtomicU64,
    /// Each slow write: when it began and how long it took.
    slow_writes: Mutex<Vec<Window>>,
    /// Each of the probe's syncs: when it began and how long it took.
    probes: Mutex<Vec<Window>>,
    stop: AtomicBool,
    runs: AtomicU64,
    messages: AtomicU64,
    running: Mutex<HashSet<String>>,
}

/// A stretch of the soak: from `began` (since the soak started) for `took`.
#[derive(Clone, Copy)]
struct Window {
    began: Duration,
    took: Duration,
}

impl Window {
    fn overlaps(&self, other: &Window) -> bool {
        self.began < other.began + other.took && other.began < self.began + self.took
    }
}

/// One worker's latencies: durable saves through the writer, and direct
/// event and span inserts.
#[derive(Default)]
struct WorkerLatencies {
    saves: Latencies,
    events: Latencies,
    spans: Latencies,
}

fn main() {
    let options = options();
    let kept = options.dir.clone();
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let dir = kept.unwrap_or_else(|| temporary.path().to_path_buf());
    let store = Store::open(&dir).expect("the store opens");
    let parent = "parent-of-forks";
    if store.session(parent).expect("readable").is_none() {
        store
            .create_session(&new_session(parent, None))
            .expect("the parent");
        let history: Vec<_> = (0..PARENT_MESSAGES)
            .map(|i| (i, message(i, 1_500)))
            .collect();
        store
            .put_messages(parent, history.iter().map(|(i, m)| (*i, m)))
            .expect("the parent's history");
        store.flush().expect("flushed");
    }
    let shared = Arc::new(Shared {
        store: store.clone(),
        started: Instant::now(),
        progress: AtomicU64::new(0),
        slow: AtomicU64::new(0),
        slow_writes: Mutex::new(Vec::new()),
        probes: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        runs: AtomicU64::new(0),
        messages: AtomicU64::new(0),
        running: Mutex::new(HashSet::from([parent.to_string()])),
    });
    println!(
        "store soak: {} workers, {} s, store in {}{}",
        options.workers,
        options.seconds,
        dir.display(),
        options
            .max_bytes
            .map(|max| format!(", retention at {max} bytes"))
            .unwrap_or_default()
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(options.seconds);
    let workers: Vec<_> = (0..options.workers)
        .map(|worker| {
            let shared = shared.clone();
            std::thread::spawn(move || work(worker, &shared, deadline))
        })
        .collect();
    let retention = {
        let shared = shared.clone();
        let max_bytes = options.max_bytes;
        std::thread::spawn(move || retain(&shared, max_bytes))
    };
    let probe = {
        let shared = shared.clone();
        let path = dir.join("disk-probe");
        std::thread::spawn(move || probe_disk(&shared, &path))
    };
    watch(&shared, deadline);
    let mut latencies = WorkerLatencies::default();
    for worker in workers {
        let done = worker.join().expect("a worker ends");
        latencies.saves.merge(done.saves);
        latencies.events.merge(done.events);
        latencies.spans.merge(done.spans);
    }
    shared.stop.store(true, Ordering::SeqCst);
    let removed = retention.join().expect("the retention pass ends");
    let mut probe_latencies = probe.join().expect("the probe ends");
    store.flush().expect("flushed");
    let elapsed = started.elapsed();
    let runs = shared.runs.load(Ordering::SeqCst);
    let messages = shared.messages.load(Ordering::SeqCst);
    println!(
        "{runs} runs ({:.1}/s), {messages} messages in {:.0} s; {removed} sessions removed by retention",
        runs as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!("{}", latencies.saves.line("durable save (commit)"));
    println!("{}", latencies.events.line("event insert"));
    println!("{}", latencies.spans.line("span insert"));
    println!("{}", probe_latencies.line("disk probe (4 KiB + sync)"));
    let usage = store.usage().expect("measured");
    for tree in &usage.trees {
        println!(
            "  {:<16} {:>9} records {:>12} bytes",
            tree.tree, tree.records, tree.bytes
        );
    }
    let data = usage.data_bytes();
    let _ = messages;
    let listed = store.list_runs(None).map(|runs| runs.len()).unwrap_or(0) as u64;
    let per = |bytes: u64, n: u64| bytes.checked_div(n).unwrap_or(0);
    println!(
        "data {} bytes, on disk {} bytes ({:.2}x); {} runs kept: {} bytes on disk per run, {} bytes of data per run, {} bytes of data per message",
        data,
        usage.on_disk,
        usage.on_disk as f64 / data.max(1) as f64,
        listed,
        per(usage.on_disk, listed),
        per(data, listed),
        per(usage.trees[1].bytes, usage.trees[1].records),
    );
    let slow_writes = shared.slow_writes.lock().expect("not poisoned").clone();
    let probes = shared.probes.lock().expect("not poisoned").clone();
    let (stalled, own) = machine_stalls(&slow_writes, &probes);
    if !stalled.is_empty() {
        let worst = stalled.iter().map(|w| w.took).max().unwrap_or_default();
        println!(
            "{} writes took longer than {SLOW_WRITE:?} (the slowest {worst:?}), each while a disk probe sync took {STALLED_PROBE:?} or more: the machine stalled",
            stalled.len()
        );
    }
    if !own.is_empty() {
        for write in &own {
            println!(
                "slow write while the disk answered: {:?}, began {:.1} s into the soak",
                write.took,
                write.began.as_secs_f64()
            );
        }
        println!(
            "FAILED: {} writes took longer than {SLOW_WRITE:?} while the disk answered",
            own.len()
        );
        std::process::exit(1);
    }
    println!("ok: no write slower than {SLOW_WRITE:?} while the disk answered, no hang");
}

/// Splits slow writes into those during which the machine itself stalled
/// (a probe sync overlapping the write took [`STALLED_PROBE`] or more) and
/// the store's own.
fn machine_stalls(slow_writes: &[Window], probes: &[Window]) -> (Vec<Window>, Vec<Window>) {
    slow_writes.iter().partition(|write| {
        probes
            .iter()
            .any(|probe| probe.took >= STALLED_PROBE && probe.overlaps(write))
    })
}

/// Writes 4 KiB into a file of its own and syncs it every
/// [`PROBE_EVERY`] until told to stop: how long the disk (and the machine)
/// takes to make a small write durable, beside the store.
fn probe_disk(shared: &Shared, path: &std::path::Path) -> Latencies {
    use std::io::{Seek, SeekFrom, Write};
    let mut latencies = Latencies::default();
    let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
    else {
        println!("the disk probe cannot open {}", path.display());
        return latencies;
    };
    let mut block = vec![0u8; 4096];
    let mut round = 0u8;
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(PROBE_EVERY);
        round = round.wrapping_add(1);
        block.fill(round);
        let began = Instant::now();
        let written = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&block))
            .and_then(|()| file.sync_data());
        if let Err(err) = written {
            println!("the disk probe failed: {err}");
            break;
        }
        let took = began.elapsed();
        latencies.add(took);
        shared.probes.lock().expect("not poisoned").push(Window {
            began: began.duration_since(shared.started),
            took,
        });
    }
    latencies
}

/// Watches progress until the deadline; exits the process on a hang.
fn watch(shared: &Shared, deadline: Instant) {
    let mut last = shared.progress.load(Ordering::SeqCst);
    let mut since = Instant::now();
    let mut report = Instant::now();
    let report_started = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        let now = shared.progress.load(Ordering::SeqCst);
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() > HANG {
            println!("HANG: no write returned for {HANG:?} after {now} writes");
            std::process::exit(2);
        }
        if report.elapsed() > Duration::from_secs(30) {
            report = Instant::now();
            let (data, on_disk) = shared
                .store
                .usage()
                .map(|usage| (usage.data_bytes(), usage.on_disk))
                .unwrap_or_default();
            println!(
                "  … {:>4} s: {} writes, {} runs, {} slow; data {} MB, on disk {} MB",
                report_started.elapsed().as_secs(),
                now,
                shared.runs.load(Ordering::SeqCst),
                shared.slow.load(Ordering::SeqCst),
                data / 1_000_000,
                on_disk / 1_000_000
            );
        }
    }
}

/// Applies the retention policy every few seconds until told to stop;
/// returns how many sessions it removed.
fn retain(shared: &Shared, max_bytes: Option<u64>) -> usize {
    // A daemon compacts runs ten minutes after they end; in a soak of a few
    // minutes that would compact nothing, so here it is 30 s.
    let policy = Retention {
        max_bytes,
        compact_after: COMPACT_AFTER,
        ..Retention::default()
    };
    let mut removed = 0;
    let mut next = Instant::now() + RETENTION_EVERY;
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + RETENTION_EVERY;
        let in_use = shared.running.lock().expect("not poisoned").clone();
        match shared.store.retain(&policy, chrono::Utc::now(), &in_use) {
            Ok(gone) => {
                removed += gone.len();
                println!(
                    "  retention pass at {:.1} s: {} sessions removed",
                    shared.started.elapsed().as_secs_f64(),
                    gone.len()
                );
            }
            Err(err) => println!("retention failed: {err}"),
        }
    }
    removed
}

/// One worker: runs, one after another, until the deadline.
fn work(worker: usize, shared: &Shared, deadline: Instant) -> WorkerLatencies {
    let mut latencies = WorkerLatencies::default();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let session = format!("s{worker:02}-{n:08}");
        let run_id = format!("r{worker:02}-{n:08}");
        shared
            .running
            .lock()
            .expect("not poisoned")
            .insert(session.clone());
        play_run(shared, &mut latencies, &session, &run_id, n);
        shared
            .running
            .lock()
            .expect("not poisoned")
            .remove(&session);
        shared.runs.fetch_add(1, Ordering::SeqCst);
    }
    latencies
}

/// One ten-turn run of `session`.
fn play_run(shared: &Shared, latencies: &mut WorkerLatencies, session: &str, run_id: &str, n: u64) {
    let store = &shared.store;
    let fork = n.is_multiple_of(5);
    let first = if fork { PARENT_MESSAGES } else { 0 };
    let mut new = new_session(session, None);
    if fork {
        new.fork_of = Some(ForkBase {
            session: "parent-of-forks".into(),
            len: PARENT_MESSAGES,
        });
    }
    let mut record = RunRecord {
        run_id: run_id.to_string(),
        session_id: session.to_string(),
        prompt: "soak the store".into(),
        status: RunState::Running,
        stop_reason: None,
        started: chrono::Utc::now(),
        ended: None,
        pid: std::process::id(),
        history: None,
    };
    let opening = record.clone();
    let prompt = Message::user_text("soak the store: read the files and fix the bug");
    save(shared, latencies, move |store| {
        store.create_session(&new)?;
        store.put_run(&opening)?;
        store.put_message(&new.id, first, &prompt)
    });
    let mut seq = 0u64;
    let mut event = |kind: EventKind, latencies: &mut WorkerLatencies| {
        seq += 1;
        let event = RunEvent {
            seq,
            run_id: run_id.to_string(),
            session_id: session.to_string(),
            agent_path: "main".into(),
            ts: chrono::Utc::now().to_rfc3339(),
            kind,
        };
        let began = Instant::now();
        store.append_event(&event).expect("an event is stored");
        took(shared, &mut latencies.events, began);
    };
    event(
        EventKind::RunStarted {
            prompt: "soak the store".into(),
        },
        latencies,
    );
    let mut index = first + 1;
    for turn in 0..TURNS {
        event(EventKind::Iteration { n: turn as u32 + 1 }, latencies);
        for d in 0..DELTAS_PER_TURN {
            event(
                EventKind::TextDelta {
                    text: format!("word{d} and more "),
                },
                latencies,
            );
        }
        let call_id = format!("toolu_{run_id}_{turn}");
        let answer = assistant(&call_id, turn);
        save_message(shared, latencies, session, index, answer);
        index += 1;
        event(
            EventKind::ToolStarted {
                call_id: call_id.clone(),
                name: "read_file".into(),
                args_preview: format!("{{\"path\":\"src/module_{turn}.rs\"}}"),
                target: Some(format!("src/module_{turn}.rs")),
            },
            latencies,
        );
        pause(n + turn);
        let result = ToolResult::text(call_id.clone(), filler(1_800), false);
        let pending = result.clone();
        save(shared, latencies, {
            let session = session.to_string();
            move |store| store.put_pending_result(&session, &pending)
        });
        event(
            EventKind::ToolFinished {
                call_id: call_id.clone(),
                name: "read_file".into(),
                is_error: false,
                output_preview: "fn handle(&mut self…".into(),
                output_lines: 40,
                duration_ms: 3,
            },
            latencies,
        );
        let results = Message::tool_results(vec![result]);
        let at = index;
        save(shared, latencies, {
            let session = session.to_string();
            move |store| {
                store.put_message(&session, at, &results)?;
                store.clear_pending_results(&session)
            }
        });
        index += 1;
        event(
            EventKind::Usage {
                input: 2_000 + turn * 900,
                output: 120,
                cache_read: 0,
                cache_write: 0,
            },
            latencies,
        );
        for span in ["chat", "execute_tool", "turn"] {
            let value = serde_json::json!({
                "name": format!("{span} {turn}"),
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                "parent": "00f067aa0ba902b7",
                "start_ns": 1_700_000_000_000_000_000u64,
                "end_ns": 1_700_000_000_300_000_000u64,
                "attributes": {
                    "gen_ai.provider.name": "anthropic",
                    "gen_ai.request.model": "claude-sonnet-4-5",
                    "gen_ai.usage.input_tokens": 2_000 + turn * 900,
                    "gen_ai.usage.output_tokens": 120,
                    "troupe.agent.path": "main",
                }
            });
            let began = Instant::now();
            store
                .put_span(run_id, &format!("{span}-{turn:02}"), &value)
                .expect("a span is stored");
            took(shared, &mut latencies.spans, began);
        }
        pause(n + turn + 1);
    }
    if n.is_multiple_of(3) {
        let entry = LedgerEntry {
            call_id: format!("toolu_{run_id}_0"),
            replaced: true,
            spill_path: None,
            original_bytes: 1_800,
        };
        let marker = CompactionMarker {
            first_kept: index - 4,
            summary: vec![Message::user_text(filler(2_000))],
            created: chrono::Utc::now(),
            before_tokens: 12_000,
            after_tokens: 3_000,
        };
        save(shared, latencies, {
            let session = session.to_string();
            move |store| {
                store.put_ledger_entry(&session, &entry)?;
                store.put_marker(&session, &marker)
            }
        });
    }
    let answer = Message {
        role: Role::Assistant,
        content: vec![ContentBlock::Text {
            text: "The bug is fixed.".into(),
        }],
    };
    save_message(shared, latencies, session, index, answer);
    index += 1;
    event(
        EventKind::RunFinished {
            status: RunStatus::Finished,
            stop_reason: "end_turn".into(),
            final_text: "The bug is fixed.".into(),
            usage_total: Usage::default(),
        },
        latencies,
    );
    record.status = RunState::Ended(RunStatus::Finished);
    record.ended = Some(chrono::Utc::now());
    save(shared, latencies, move |store| store.put_run(&record));

    shared.messages.fetch_add(index - first, Ordering::SeqCst);
}

/// A short pause between writes, 1 to 4 ms, as a model and a tool take.
fn pause(seed: u64) {
    std::thread::sleep(Duration::from_millis(1 + seed % 4));
}

/// Makes `message` durable as message `index` of `session` ([`save`]).
fn save_message(
    shared: &Shared,
    latencies: &mut WorkerLatencies,
    session: &str,
    index: u64,
    message: Message,
) {
    let session = session.to_string();
    save(shared, latencies, move |store| {
        store.put_message(&session, index, &message)
    });
}

/// Hands `write` to the writer and waits until it is durable.
fn save(
    shared: &Shared,
    latencies: &mut WorkerLatencies,
    write: impl FnOnce(&Store) -> Result<(), StoreError> + Send + 'static,
) {
    let (done, durable) = mpsc::channel();
    let began = Instant::now();
    shared.store.commit(write, move |outcome| {
        let _ = done.send(outcome);
    });
    durable
        .recv()
        .expect("the writer answers")
        .expect("the write succeeds");
    took(shared, &mut latencies.saves, began);
}

/// Records a write's latency and progress.
fn took(shared: &Shared, latencies: &mut Latencies, began: Instant) {
    let took = began.elapsed();
    latencies.add(took);
    shared.progress.fetch_add(1, Ordering::SeqCst);
    if took > SLOW_WRITE {
        shared.slow.fetch_add(1, Ordering::SeqCst);
        shared
            .slow_writes
            .lock()
            .expect("not poisoned")
            .push(Window {
                began: began.duration_since(shared.started),
                took,
            });
        println!(
            "slow write: {took:?}, ended {:.1} s into the soak",
            shared.started.elapsed().as_secs_f64()
        );
    }
}

fn new_session(id: &str, parent: Option<&str>) -> NewSession {
    NewSession {
        id: id.into(),
        cwd: "/work/project".into(),
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        parent: parent.map(str::to_string),
        agent_path: None,
        run_id: None,
        fork_of: None,
    }
}

/// Text that looks like source code, cut to `bytes`.
fn filler(bytes: usize) -> String {
    "fn handle(&mut self, msg: Message) -> Result<(), Error> {\n    self.state.apply(msg)?;\n}\n"
        .chars()
        .cycle()
        .take(bytes)
        .collect()
}

/// An answer with text and one `read_file` call.
fn assistant(call_id: &str, turn: u64) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::Text { text: filler(300) },
            ContentBlock::ToolCall(ToolCall {
                id: call_id.to_string(),
                name: "read_file".into(),
                input: format!(r#"{{"path":"src/module_{turn}.rs"}}"#),
            }),
        ],
    }
}

/// Message `i` of the parent's history, about `bytes` long.
fn message(i: u64, bytes: usize) -> Message {
    if i.is_multiple_of(2) {
        Message::user_text(filler(bytes))
    } else {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text {
                text: filler(bytes),
            }],
        }
    }
}
