#!/usr/bin/env bash
# Runs the grep-tool-vs-ripgrep benchmark (SPEC §4: grep within 1.5x of rg on a
# tree of at least 20,000 files). Installs ripgrep from the system's package
# registry when it is missing, prints the machine it ran on, then the results.
set -euo pipefail

cd "$(dirname "$0")/../.."

if ! command -v rg >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "ripgrep not found: installing it with apt-get" >&2
        apt-get update -qq
        apt-get install -y -qq ripgrep
    else
        echo "ripgrep not found and apt-get is unavailable: timing the grep tool alone" >&2
    fi
fi

echo "date:    $(date -u +%Y-%m-%dT%H:%MZ)"
echo "cores:   $(nproc)"
echo "cpu:     $(lscpu | sed -n 's/^Model name: *//p' | head -n 1)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg)"
if command -v rg >/dev/null 2>&1; then
    echo "rg:      $(rg --version | sed -n 1p)"
fi
cargo bench -p troupe-tools --bench grep_vs_rg
