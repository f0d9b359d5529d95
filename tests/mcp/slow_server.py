"""A minimal MCP server over stdio (Python standard library only) that needs
a set time before it serves: the MCP benchmarks' server (tests/benches/mcp.rs).

It sleeps SLOW_MCP_READY_SECS (default 0.75) before reading its first
message, then appends `time.monotonic()` (CLOCK_MONOTONIC, in seconds) to
SLOW_MCP_READY_FILE when that is set, so a benchmark can tell "server ready"
from the time its client needed on top.

Speaks newline-delimited JSON-RPC 2.0: initialize (echoing the client's
protocol version), ping, tools/list, tools/call, and ignores notifications.
One tool:
  work(ms, tag?)  readOnlyHint: sleeps `ms` milliseconds (`tag` is ignored)
                  and answers "worked MS ms in US us": US is the time the
                  server spent in the call, from reading the request to just
                  before writing the answer.

With SLOW_MCP_PID_FILE set it writes its pid there once it serves; with
SLOW_MCP_LINGER_SECS set it sleeps that long after its input ends before it
exits, like a server that does not end with its input.
"""

import json
import os
import sys
import time

TOOL = {
    "name": "work",
    "description": "Sleeps for `ms` milliseconds.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "ms": {"type": "integer", "minimum": 0},
            "tag": {"type": "string", "description": "Ignored."},
        },
        "required": ["ms"],
    },
    "annotations": {"readOnlyHint": True},
}


def answer(message_id, result=None, error=None):
    reply = {"jsonrpc": "2.0", "id": message_id}
    if error is not None:
        reply["error"] = error
    else:
        reply["result"] = result
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def call(params, received):
    ms = int(params.get("arguments", {}).get("ms", 0))
    if ms > 0:
        time.sleep(ms / 1000)
    spent_us = int((time.monotonic() - received) * 1_000_000)
    return {
        "content": [{"type": "text", "text": f"worked {ms} ms in {spent_us} us"}],
        "isError": False,
    }


def main():
    time.sleep(float(os.environ.get("SLOW_MCP_READY_SECS", "0.75")))
    ready_file = os.environ.get("SLOW_MCP_READY_FILE")
    if ready_file:
        fd = os.open(ready_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{time.monotonic():.6f}\n".encode())
        os.close(fd)
    pid_file = os.environ.get("SLOW_MCP_PID_FILE")
    if pid_file:
        with open(pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    for line in sys.stdin:
        received = time.monotonic()
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message or method is None:
            continue  # a notification, or an answer to nothing we asked
        params = message.get("params") or {}
        if method == "initialize":
            answer(
                message["id"],
                {
                    "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "troupe-slow", "version": "1.0.0"},
                },
            )
        elif method == "ping":
            answer(message["id"], {})
        elif method == "tools/list":
            answer(message["id"], {"tools": [TOOL]})
        elif method == "tools/call":
            answer(message["id"], call(params, received))
        else:
            answer(message["id"], error={"code": -32601, "message": f"no method {method}"})
    time.sleep(float(os.environ.get("SLOW_MCP_LINGER_SECS", "0")))


if __name__ == "__main__":
    main()
