"""The machine's floor for server CPU per streamed delta: the least any streaming server can spend.

Run: ``.venv/bin/python bench/relay_floor.py [--streams N]`` (about ten seconds);
``bench/scale.py`` prints both floors beside its own figures: one stream, and as many as
its load streams at once.

A bare relay, in the shape of the app's per-delta path with everything of the app taken
out: under uvloop (the app's event loop), a child process prints one short line every
1/``--rate`` seconds; the relay reads each line from the pipe the moment it comes and
writes it to a TCP client in another process, as an SSE server does. The figure is the
relay process's CPU time (``time.process_time``) per line. It is mostly what waking a
sleeping process costs on this machine (the scheduler, the VM's exits, the socket's
wake-up of the reader), which the app pays at least once per delta at a model's pace.

With ``--streams N`` the one relay process relays N such streams at once (N writer
processes, N connections to one reader process), all started together at a gate; the
window runs from the gate to the first stream's end. Many streams share the relay's
wake-ups, so their floor per line is far lower: what a loaded server need not exceed.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

WRITER = (
    "import sys, time\n"
    "n, pause = int(sys.argv[1]), float(sys.argv[2])\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
    "for _ in range(n):\n"
    "    sys.stdout.write('x' * 60 + '\\n'); sys.stdout.flush(); time.sleep(pause)\n"
)
READER = (
    "import selectors, socket, sys\n"
    "port, count = int(sys.argv[1]), int(sys.argv[2])\n"
    "selector = selectors.DefaultSelector()\n"
    "for _ in range(count):\n"
    "    selector.register(socket.create_connection(('127.0.0.1', port)), selectors.EVENT_READ)\n"
    "while selector.get_map():\n"
    "    for key, _ in selector.select():\n"
    "        if not key.fileobj.recv(65536):\n"
    "            selector.unregister(key.fileobj); key.fileobj.close()\n"
)


async def _relay(lines: int, rate: float, streams: int) -> float:
    loop = asyncio.get_running_loop()
    ready: list[asyncio.subprocess.Process] = []
    gate = asyncio.Event()
    window: dict[str, float] = {}
    relayed = 0
    done: asyncio.Future[float] = loop.create_future()

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal relayed
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WRITER,
            str(lines),
            str(1 / rate),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert child.stdin is not None and child.stdout is not None
        await child.stdout.readline()  # ready: every stream starts at the gate, start-up not in the window
        ready.append(child)
        if len(ready) == streams:
            gate.set()
        await gate.wait()
        if "start" not in window:
            window["start"], relayed = time.process_time(), 0
        child.stdin.write(b"go\n")
        while line := await child.stdout.readline():
            writer.write(b"data: " + line + b"\n")
            relayed += 1
        # The window ends with the first stream to end, while all still stream.
        if "end" not in window:
            window["end"], window["relayed"] = time.process_time(), relayed
        writer.close()
        await child.wait()
        if len(ready) == streams and all(c.returncode is not None for c in ready) and not done.done():
            done.set_result((window["end"] - window["start"]) / window["relayed"] * 1e3)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=max(100, streams))
    port = server.sockets[0].getsockname()[1]
    reader = await asyncio.create_subprocess_exec(sys.executable, "-c", READER, str(port), str(streams))
    try:
        return await done
    finally:
        server.close()
        await reader.wait()


def measure(rate: float = 50.0, seconds: float = 6.0, streams: int = 1) -> float:
    """CPU ms per line of a bare uvloop relay of ``streams`` streams at ``rate`` lines a
    second each."""
    import uvloop

    return uvloop.run(_relay(max(10, int(rate * seconds)), rate, streams))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=50.0, help="lines a second (default 50)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long (default 6)")
    parser.add_argument("--streams", type=int, default=1, help="streams relayed at once (default 1)")
    args = parser.parse_args()
    floor = measure(args.rate, args.seconds, args.streams)
    print(
        f"bare relay floor, {args.streams} stream(s) at {args.rate:g} lines/s each: {floor:.3f} ms CPU per line"
    )


if __name__ == "__main__":
    main()
