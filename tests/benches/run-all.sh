#!/usr/bin/env bash
# Builds the release binary and runs every whole-runtime benchmark of
# tests/benches (SPEC §14), printing their figures. Record them in
# docs/performance.md under "Agent loop and runtime" with the machine and date.
#
# Usage: tests/benches/run-all.sh [BENCH...]   (default: all four)
# Environment: TROUPE_BENCH_SAMPLES, TROUPE_BENCH_TURNS, TROUPE_BENCH_AGENTS
# override the defaults of the benches that read them.
set -euo pipefail

cd "$(dirname "$0")/../.."

benches=("$@")
if [ ${#benches[@]} -eq 0 ]; then
    benches=(binary agent_turn read_only_batch idle_agents)
fi

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
echo "== $(rustc --version)"

# The binary bench spawns target/release/troupe.
cargo build --release -p troupe-cli
# Build every bench first, so compiling does not overlap with measuring.
cargo bench -p troupe-tests --no-run $(printf -- '--bench %s ' "${benches[@]}")

for bench in "${benches[@]}"; do
    echo
    echo "== cargo bench -p troupe-tests --bench ${bench}"
    cargo bench -p troupe-tests --bench "${bench}"
done
