//! Layer-1 cost per turn: [`Ledger::plan`] before a model call, on histories
//! of 500, 1,000 and 2,000 messages whose results are all decided already,
//! plus one new turn (a call and a tool message of 4 results of 2 KB) to
//! decide. The cost should follow the new messages, not the history.
//! Results go to `docs/performance.md`, never into assertions.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use troupe_agent::compact::offload::Ledger;
use troupe_protocol::model::{ContentBlock, Message, Role, ToolCall, ToolResult};

/// Results of one tool message.
const RESULTS_PER_TURN: usize = 4;
/// Bytes of one result.
const RESULT_BYTES: usize = 2_000;

/// One turn: the assistant's calls and their results (two messages).
fn turn(n: usize) -> [Message; 2] {
    let calls = (0..RESULTS_PER_TURN)
        .map(|i| {
            ContentBlock::ToolCall(ToolCall {
                id: format!("c{n}-{i}"),
                name: "read_file".into(),
                input: "{}".into(),
            })
        })
        .collect();
    let results = (0..RESULTS_PER_TURN)
        .map(|i| ToolResult::text(format!("c{n}-{i}"), "r".repeat(RESULT_BYTES), false))
        .collect();
    [
        Message {
            role: Role::Assistant,
            content: calls,
        },
        Message::tool_results(results),
    ]
}

fn history(messages: usize) -> Vec<Message> {
    (0..messages / 2).flat_map(turn).collect()
}

fn plan_per_turn(c: &mut Criterion) {
    let mut group = c.benchmark_group("offload_plan_per_turn");
    group.measurement_time(Duration::from_secs(3));
    for size in [500, 1_000, 2_000] {
        let mut messages = history(size);
        let mut decided = Ledger::default();
        decided.plan(&messages);
        messages.extend(turn(size));
        group.bench_with_input(
            BenchmarkId::from_parameter(size),
            &messages,
            |b, messages| {
                b.iter_batched(
                    || decided.clone(),
                    // The ledger is returned, so dropping it is not measured.
                    |mut ledger| {
                        let plan = ledger.plan(black_box(messages));
                        (ledger, plan)
                    },
                    criterion::BatchSize::SmallInput,
                )
            },
        );
    }
    group.finish();
}

criterion_group!(benches, plan_per_turn);
criterion_main!(benches);
