#!/usr/bin/env bash
# Writes cli/link/hot-functions.txt: the functions of the release `troupe`
# that the whole-binary bench's runs execute, which the release build then
# places next to each other (cli/build.rs; docs/performance.md, "Memory of a
# run: the code a run executes, together").
#
# It builds the release `troupe` without the list (TROUPE_NO_FUNCTION_ORDER=1:
# the compiler's own layout) and the binary bench, runs the bench's kinds
# `trivial`, `ten_read_file_turns`, `tools` and `commands` once each with
# every `troupe` process under valgrind's callgrind (which records every
# function executed), and writes the executed functions the executable
# defines in the order the compiler laid them out (callers near their
# callees, as it placed them), with the few functions a command's child
# runs on the runtime's memory before it executes `bash` (callgrind cannot
# follow that child). The next release build links with the list.
# Run it again after a toolchain or dependency update (symbol names carry a
# hash of their crate's build) or when new code joins the run path; a stale
# list only costs memory. Needs valgrind.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
command -v valgrind >/dev/null || {
    echo "hot-functions.sh: valgrind is needed (Debian package valgrind)" >&2
    exit 2
}

executable_of() {
    python3 "$root/tests/benches/executable_of.py" "$1"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== building the release troupe in the compiler's own layout, and the binary bench"
built=$(TROUPE_NO_FUNCTION_ORDER=1 cargo build --release -p troupe-cli \
    --message-format=json-render-diagnostics | executable_of troupe)
troupe=$work/troupe-unordered
cp "$built" "$troupe"
bench=$(cargo bench -p troupe-tests --bench binary --no-run \
    --message-format=json-render-diagnostics | executable_of binary)
cat >"$work/troupe" <<WRAPPER
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.%p" \
    --demangle=no --dump-instr=no --log-file="$work/valgrind.%p" "$troupe" "\$@"
WRAPPER
chmod +x "$work/troupe"

echo "== running the bench's kinds under callgrind"
TROUPE_BIN="$work/troupe" TROUPE_BENCH_KINDS=trivial,ten_read_file_turns,tools,commands \
    TROUPE_BENCH_SAMPLES=1 "$bench" --bench >"$work/bench.log" 2>&1 || {
    echo "hot-functions.sh: the bench failed; its end:" >&2
    tail -n 20 "$work/bench.log" >&2
    exit 1
}

nm --defined-only "$troupe" >"$work/symbols"
nm --defined-only --demangle "$troupe" >"$work/symbols.demangled"
python3 - "$work" "$root/cli/link/hot-functions.txt" <<'PY'
import glob, re, sys
work, out = sys.argv[1], sys.argv[2]
# Each defined function's address: the compiler's layout.
defined = {}
demangled = {}
for line, readable in zip(open(f"{work}/symbols"), open(f"{work}/symbols.demangled")):
    parts = line.split()
    if len(parts) == 3 and parts[1] in "tTwW":
        defined.setdefault(parts[2], int(parts[0], 16))
        demangled.setdefault(parts[2], readable.split(maxsplit=2)[-1].strip())
# What a command's child runs while it shares this process's memory (its
# pages count in the runtime's resident set): callgrind cannot follow that
# child (valgrind offers no `clone3`, so under it commands are forked), so
# these are named here.
SHARED_CHILD = (
    "troupe_process::direct_spawn::child_entry",
    "troupe_process::direct_spawn::child_main",
    "troupe_process::direct_spawn::clone3_on_stack",
    "troupe_process::direct_spawn::run_in_child",
    "troupe_process::os_sandbox::apply::enter_namespaces",
    "troupe_process::os_sandbox::apply::restrict",
)
executed = set()
for path in glob.glob(f"{work}/callgrind.*"):
    for line in open(path, errors="replace"):
        # `fn=(id) name` (and `cfn=` for callees) names a function the first
        # time it appears; `'N` marks a recursion level.
        match = re.match(r"^c?fn=\(\d+\) (.*)$", line.rstrip("\n"))
        if match:
            executed.add(re.sub(r"'\d+$", "", match.group(1)))
executed |= {
    name for name, readable in demangled.items() if readable.startswith(SHARED_CHILD)
}
hot = sorted(executed & defined.keys(), key=lambda name: (defined[name], name))
with open(out, "w") as f:
    f.write("".join(name + "\n" for name in hot))
print(f"== {len(hot)} functions of {len(defined)} written to {out}; "
      "the next release build links with it")
PY
