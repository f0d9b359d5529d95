#!/usr/bin/env bash
# Builds the release binary and runs every whole-runtime benchmark of
# tests/benches (the performance targets), printing their figures. Record them in
# docs/performance.md (the summary table and the bench's own section) with the
# machine, date and load average.
#
# Usage: tests/benches/run-all.sh [BENCH...]   (default: all eight)
# Environment: TROUPE_BENCH_SAMPLES, TROUPE_BENCH_TURNS, TROUPE_BENCH_AGENTS,
# TROUPE_BENCH_ROUNDS, TROUPE_BENCH_GIT_FILES, TROUPE_BENCH_SUBAGENTS,
# TROUPE_BENCH_FORK_SAMPLES, TROUPE_BENCH_FLOOD_SAMPLES override the defaults
# of the benches that read them; TROUPE_BENCH_KINDS selects kinds of the binary
# bench by name and TROUPE_BENCH_JSON=FILE makes it append its figures to FILE
# as JSON (see tests/benches/binary.rs). To compare two revisions with the
# binary bench, use tests/benches/compare.sh BASE_REV [ROUNDS]. The runtime's
# own benches (SSE parsing, grep vs rg, store, telemetry micro-bench, fork) are
# run with `cargo bench -p troupe-<crate>` in their crates (grep vs rg through
# runtime/tools/benches/grep_vs_rg.sh).
set -euo pipefail

cd "$(dirname "$0")/../.."

benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
    benches=(binary agent_turn tracing_turn read_only_batch idle_agents agent_tree daemon mcp)
fi

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
echo "== $(rustc --version)"

# The binary bench spawns target/release/troupe.
cargo build --release -p troupe-cli
# Build every bench first, so compiling does not overlap with measuring.
cargo bench -p troupe-tests --no-run $(printf -- '--bench %s ' "${benches[@]}")

for bench in "${benches[@]}"; do
    echo
    echo "== cargo bench -p troupe-tests --bench ${bench} (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    cargo bench -p troupe-tests --bench "${bench}"
done
