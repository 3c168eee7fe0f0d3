"""The ask-user MCP server's own share of an approval, with nothing else on the path.

Run: ``.venv/bin/python bench/mcp_hop.py [--rounds 200]`` (about ten seconds).

This process is both ends the MCP server talks to: the CLI (it speaks MCP over the server's
stdin and stdout) and PromptManager (a bare asyncio HTTP server on loopback answering the
relay endpoints the server calls). Each round calls the ``approve`` tool and times two hops
that are the MCP server's alone:

1. *tools/call in -> relay-permission at the app*: the call's line written to the server's
   stdin until its HTTP request has arrived here (the card path's first hop);
2. *poll-decision reply -> tool result out*: the deciding reply written to the server's
   socket until the tool's result line has been read from its stdout (the decision path's
   last hop before the CLI).

``MCP_HOP_PREFIX`` puts interpreter options before ``-m mcp_server`` (e.g.
``-m cProfile -o /tmp/mcp.prof`` to profile the server).

``bench/approval_latency.py`` measures the same hops inside a real run, among the CLI, the
app and the sandbox; here they are alone, so a change to the MCP server shows in them.
A benchmark reports; it does not assert.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import fmt, percentile, table  # noqa: E402
from core.tool_names import APPROVE_TOOL  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DECIDED = json.dumps(
    {"status": "decided", "result": {"behavior": "allow", "updatedInput": {"command": "date"}}}
).encode()
RELAYED = json.dumps({"request_id": "r-1", "expires_at": "2030-01-01T00:00:00Z", "timeout": 300}).encode()


class Relay:
    """relay-permission answers at once; each poll-decision waits for ``decide``."""

    def __init__(self) -> None:
        self.relayed_at: asyncio.Queue[float] = asyncio.Queue()
        self.polls: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the server closed its kept-alive connection as it ended
            now = time.monotonic()
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if head.startswith(b"POST"):
                self.relayed_at.put_nowait(now)
                self._reply(writer, 201, RELAYED)
            else:
                self.polls.put_nowait(writer)

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(body), body)
        )


async def _rpc(proc: asyncio.subprocess.Process, message: dict[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    await proc.stdin.drain()


async def _line(proc: asyncio.subprocess.Process) -> dict[str, object]:
    assert proc.stdout is not None
    line: dict[str, object] = json.loads(await proc.stdout.readline())
    return line


async def measure(rounds: int) -> tuple[list[float], list[float]]:
    relay = Relay()
    server = await asyncio.start_server(relay.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "ask-user.json"
        config.write_text(
            json.dumps(
                {
                    "apiUrl": f"http://127.0.0.1:{port}",
                    "streamToken": "bench-stream",
                    "relayToken": "bench-relay",
                    "projectId": 1,
                    "timeout": 300,
                }
            )
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *os.environ.get("MCP_HOP_PREFIX", "").split(),
            "-m",
            "mcp_server",
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "ASK_USER_CONFIG": str(config)},
        )
        await _rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "0"},
                },
            },
        )
        await _line(proc)
        await _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        inbound: list[float] = []
        outbound: list[float] = []
        for n in range(1, rounds + 1):
            call = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {
                    "name": APPROVE_TOOL,
                    "arguments": {"tool_name": "Bash", "input": {"command": "date"}, "tool_use_id": f"t{n}"},
                },
            }
            sent = time.monotonic()
            await _rpc(proc, call)
            inbound.append((await relay.relayed_at.get() - sent) * 1e3)
            poll = await relay.polls.get()
            await asyncio.sleep(0.02)  # the server is parked on its poll, as while a person decides
            decided = time.monotonic()
            Relay._reply(poll, 200, DECIDED)
            reply = await _line(proc)
            outbound.append((time.monotonic() - decided) * 1e3)
            assert reply.get("id") == n and "result" in reply, reply
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()
    server.close()
    return inbound, outbound


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    inbound, outbound = asyncio.run(measure(args.rounds))
    rows = [
        [what, str(len(xs)), *(fmt(percentile(xs, p)) for p in (50, 95, 99)), fmt(max(xs))]
        for what, xs in (
            ("tools/call in -> relay-permission at the app", inbound),
            ("poll-decision reply -> tool result out", outbound),
        )
    ]
    print(
        table(
            ["what (milliseconds)", "n", "p50", "p95", "p99", "max"], rows, title="The MCP server's own hops"
        )
    )


if __name__ == "__main__":
    main()
