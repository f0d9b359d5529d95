#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ for SECONDS each (default 60), starting
# from the seed corpora in fuzz/seeds/ (copied from the shared SSE fixtures and
# hand-written examples), the test fixtures some targets read (web_html: the
# saved pages of runtime/tools/tests/fixtures/web/), plus whatever earlier runs
# kept in fuzz/corpus/.
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`); it is
# not part of .ci/run. A crash leaves its input in fuzz/artifacts/TARGET/ and
# stops the script with a non-zero exit: turn the input into a regression test.
#
# Usage: tests/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

cargo +nightly fuzz build --release
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    cp -n "seeds/$target/"* "corpus/$target/" 2>/dev/null || true
    if [ "$target" = web_html ]; then
        cp -n ../runtime/tools/tests/fixtures/web/*.html "corpus/$target/"
    fi
    echo "== $target for ${seconds}s ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    cargo +nightly fuzz run --release "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
done
