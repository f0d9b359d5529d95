#!/usr/bin/env bash
# Compares the whole-binary bench (tests/benches/binary.rs) between a base
# revision and the working tree.
#
# Builds BASE_REV's `troupe` in release in a temporary git worktree (removed at
# the end) with its own target directory, builds the working tree's `troupe`
# and the bench (from the working tree) in release, copies the three
# executables aside, then runs the bench with each binary in turn, ROUNDS times
# (default 3; the base first in odd rounds, the new binary first in even
# ones), each run appending its figures to a JSON file (TROUPE_BENCH_JSON).
# Prints a table: per figure, the median of the base's samples and of the new
# binary's (all rounds pooled), the ratio new/base of those medians, and the
# lowest and highest ratio of one round's medians (the spread over rounds).
#
# Usage: tests/benches/compare.sh BASE_REV [ROUNDS]
# Environment:
#   COMPARE_TARGET_DIR    where the base is built, its worktree made and the
#                         results kept (default target/compare, relative to
#                         the repository root); reused, so later builds of a
#                         base are incremental
#   TROUPE_BENCH_KINDS    kinds the bench runs (default
#                         trivial,commands,true_unconfined,true_confined,ten_read_file_turns)
#   TROUPE_BENCH_SAMPLES  runs of each kind per round (the bench's default
#                         unless set)
#   COMPARE_FIGURES=all   every figure of the kinds run, not only the main ones
#   CARGO_TARGET_DIR      target directory of the working tree's builds
set -euo pipefail

usage() {
    echo "usage: $0 BASE_REV [ROUNDS]" >&2
    exit 2
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
base_rev=$1
rounds=${2:-3}
case $rounds in
    '' | *[!0-9]* | 0*)
        echo "compare.sh: ROUNDS must be a positive integer, got '$rounds'" >&2
        exit 2
        ;;
esac

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

if ! base_commit=$(git rev-parse --verify --quiet --end-of-options "${base_rev}^{commit}"); then
    echo "compare.sh: '$base_rev' is not a revision of the repository at $root" >&2
    exit 2
fi

compare_dir=${COMPARE_TARGET_DIR:-target/compare}
case $compare_dir in
    /*) ;;
    *) compare_dir=$root/$compare_dir ;;
esac
mkdir -p "$compare_dir"
base_tree=$compare_dir/base-worktree
results=$compare_dir/results-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$results"
kinds=${TROUPE_BENCH_KINDS:-trivial,commands,true_unconfined,true_confined,ten_read_file_turns}

remove_base_tree() {
    if [ -e "$base_tree" ]; then
        git -C "$root" worktree remove --force "$base_tree" 2>/dev/null || rm -rf "$base_tree"
    fi
    git -C "$root" worktree prune
}
trap remove_base_tree EXIT

# Reads cargo's JSON messages on stdin and prints the executable of the target
# named $1.
executable_of() {
    python3 "$root/tests/benches/executable_of.py" "$1"
}

head_label="$(git rev-parse --short HEAD)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    head_label="$head_label with uncommitted changes"
fi
echo "== base: $base_rev ($(git rev-parse --short "$base_commit")); new: the working tree (HEAD $head_label)"
echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== results in $results"

echo "== building the base in $base_tree (target directory $compare_dir/base-target)"
remove_base_tree
git worktree add --detach --quiet "$base_tree" "$base_commit"
base_built=$(cd "$base_tree" &&
    CARGO_TARGET_DIR="$compare_dir/base-target" \
        cargo build --release -p troupe-cli --message-format=json-render-diagnostics |
    executable_of troupe)
cp "$base_built" "$results/troupe-base"
remove_base_tree

echo "== building the working tree"
new_built=$(cargo build --release -p troupe-cli --message-format=json-render-diagnostics |
    executable_of troupe)
cp "$new_built" "$results/troupe-new"

echo "== building the bench"
bench_built=$(cargo bench -p troupe-tests --bench binary --no-run \
    --message-format=json-render-diagnostics | executable_of binary)
cp "$bench_built" "$results/binary-bench"

for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
    for side in $order; do
        echo "== round $round of $rounds, $side binary (load average $(cut -d' ' -f1-3 /proc/loadavg))"
        log=$results/$side-$round.log
        if ! TROUPE_BIN="$results/troupe-$side" \
            TROUPE_BENCH_KINDS="$kinds" \
            TROUPE_BENCH_JSON="$results/$side-$round.jsonl" \
            "$results/binary-bench" --bench >"$log" 2>&1; then
            echo "compare.sh: the bench failed with the $side binary in round $round; the end of $log:" >&2
            tail -n 20 "$log" >&2
            exit 1
        fi
    done
done

echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 - "$results" "$rounds" <<'PY'
import json
import os
import statistics
import sys

results, rounds = sys.argv[1], int(sys.argv[2])

# The main figures, in the order printed: (kind, figure, row title).
MAIN = [
    ("ten_read_file_turns", "turn_ms", "per-turn time, ten `read_file` turns (ms)"),
    ("trivial", "to_first_request_ms", "start → first request, `troupe run x` (ms)"),
    ("trivial", "last_request_to_exit_ms", "last request → exit, `troupe run x` (ms)"),
    ("trivial", "peak_rss_mib", "peak RSS, `troupe run x` (MiB)"),
    ("ten_read_file_turns", "peak_rss_mib", "peak RSS, ten `read_file` turns (MiB)"),
    ("commands", "gaps_ms", "command gaps, four `sleep 0.3`, sandboxed (ms)"),
    ("commands", "gaps_before_commands_ms", "command gaps: the parts before the commands (ms)"),
    ("commands", "gap_before_first_command_ms", "command gaps: the part before the first command (ms)"),
    ("commands", "gaps_after_commands_ms", "command gaps: the parts after the commands (ms)"),
    ("true_unconfined", "spawn_to_exit_ms", "ten `true` calls, sandbox off, spawn → exit (ms)"),
    ("true_confined", "spawn_to_exit_ms", "ten `true` calls, sandboxed, spawn → exit (ms)"),
    ("true_confined", "confined_over_unconfined", "confined / unconfined, spawn → exit (ratio)"),
    ("ten_read_file_turns", "request_bytes", "bytes per run, ten `read_file` turns"),
    ("commands", "request_bytes", "bytes per run, four commands"),
]


def load(side):
    """One dict per round: (kind, figure) -> the figure's JSON object."""
    per_round = []
    for round_number in range(1, rounds + 1):
        figures = {}
        with open(os.path.join(results, f"{side}-{round_number}.jsonl")) as lines:
            for line in lines:
                record = json.loads(line)
                for key, figure in record["figures"].items():
                    figures[(record["kind"], key)] = figure
        per_round.append(figures)
    return per_round


def number(value):
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio(new, base):
    return new / base if base else float("nan")


base, new = load("base"), load("new")
present = [key for key in base[0] if all(key in r for r in base + new)]
if os.environ.get("COMPARE_FIGURES") == "all":
    rows = [(kind, key, f"{kind}: {base[0][(kind, key)]['title']}") for kind, key in present]
else:
    rows = [row for row in MAIN if (row[0], row[1]) in present]
if not rows:
    sys.exit("compare.sh: the two binaries have no figure in common")

print("| figure | base median | new median | new/base | new/base per round (min–max) |")
print("|---|---|---|---|---|")
for kind, key, title in rows:
    pooled = {
        side: statistics.median(
            sample for r in rounds_of for sample in r[(kind, key)]["samples"]
        )
        for side, rounds_of in (("base", base), ("new", new))
    }
    per_round = [
        ratio(n[(kind, key)]["median"], b[(kind, key)]["median"]) for b, n in zip(base, new)
    ]
    print(
        f"| {title} | {number(pooled['base'])} | {number(pooled['new'])} "
        f"| {ratio(pooled['new'], pooled['base']):.3f} "
        f"| {min(per_round):.3f}–{max(per_round):.3f} |"
    )
PY
