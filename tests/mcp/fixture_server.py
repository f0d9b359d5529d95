"""A FastMCP server (Python `mcp` package) the end-to-end tests drive.

Tools:
  barrier_read(id)  readOnlyHint: waits until BARRIER_PARTIES calls are in
                    progress at once (or 20 s pass), then says whether they all
                    met; calls run one after another never meet.
  record(id)        not annotated: counts how many of its calls are in
                    progress at once and reports the highest count seen.
  die()             not annotated: the server exits while the call is open.
  hold(id)          not annotated: writes ID.started in FIXTURE_MARK_DIR, then
                    waits a minute; a call the client cancels writes
                    ID.cancelled there when the cancellation arrives.

With --hostile it also lists a tool whose name is not valid for a model.
With FIXTURE_PIDS_FILE set it starts a grandchild (`sleep`) and writes its own
pid and the grandchild's to that file, so a test can check both are gone.
With FIXTURE_STARTS_FILE set it does the same but appends the line to that
file, so a test can also count how many times the server was started.
"""

import asyncio
import os
import subprocess
import sys

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

BARRIER_PARTIES = 4

mcp = FastMCP("troupe-fixture")
barrier = asyncio.Barrier(BARRIER_PARTIES)
in_flight = 0
max_in_flight = 0


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def barrier_read(id: str) -> str:
    """Read-only: returns once four calls are in progress together."""
    try:
        await asyncio.wait_for(barrier.wait(), timeout=20)
        return f"{id}: met all {BARRIER_PARTIES} calls"
    except asyncio.TimeoutError:
        return f"{id}: alone, the other calls never came"


@mcp.tool()
async def record(id: str) -> str:
    """Counts calls in progress at once."""
    global in_flight, max_in_flight
    in_flight += 1
    max_in_flight = max(max_in_flight, in_flight)
    await asyncio.sleep(0.2)
    in_flight -= 1
    return f"{id}: at most {max_in_flight} in progress at once"


def mark(name: str) -> None:
    marks = os.environ.get("FIXTURE_MARK_DIR")
    if marks:
        with open(os.path.join(marks, name), "w") as f:
            f.write("")


@mcp.tool()
async def hold(id: str) -> str:
    """Waits a minute, unless the call is cancelled."""
    mark(f"{id}.started")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        mark(f"{id}.cancelled")
        raise
    return f"{id}: held a minute"


@mcp.tool()
def die() -> str:
    """Exits the server in the middle of the call."""
    sys.stderr.write("fixture: exiting in the middle of a call\n")
    sys.stderr.flush()
    os._exit(7)


if "--hostile" in sys.argv:

    @mcp.tool(name="bad name!")
    def hostile() -> str:
        """A tool whose name no model accepts."""
        return "never offered"


if __name__ == "__main__":
    pids_file = os.environ.get("FIXTURE_PIDS_FILE")
    starts_file = os.environ.get("FIXTURE_STARTS_FILE")
    if pids_file or starts_file:
        child = subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL)
        line = f"{os.getpid()} {child.pid}\n"
    if pids_file:
        with open(pids_file + ".tmp", "w") as f:
            f.write(line)
        os.rename(pids_file + ".tmp", pids_file)
    if starts_file:
        # One short append per start: whole lines, even from servers started
        # side by side.
        fd = os.open(starts_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, line.encode())
        os.close(fd)
    sys.stderr.write("fixture: ready on stdio\n")
    mcp.run()
