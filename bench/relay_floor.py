"""The machine's floor for server CPU per streamed delta: the least any streaming server can spend.

Run: ``.venv/bin/python bench/relay_floor.py [--streams N] [--via none|xread|pubsub|all]``
(about ten seconds a floor); ``bench/scale.py`` prints four floors beside its own figures:
bare and through Redis, for one stream and for as many as its load streams at once.

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

With ``--via xread`` each line goes through Redis on its way, as the app's events do
(``_ViaRedis``): the floor of this design, where runs live in workers and web processes
stream from Redis. ``--via pubsub`` reads the lines back by a subscription instead, to
price that alternative to the shared ``XREAD``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The app's own packing and its shared reader's pacing (neither needs Django set up).
from core.events import APPEND_LUA_FUNCTION, _TailHub  # noqa: E402
from core.redis import pack  # noqa: E402

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

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


# Each line appended by the app's own append function (one event a call): its id from the
# run's counter, the entry under that id; with --via pubsub the script also publishes it.
APPEND_CALL = "local first = append_events(KEYS[1], KEYS[2], ARGV, 1)\n"
PUBLISH = "redis.call('PUBLISH', KEYS[3], ARGV[2])\n"


class _Resp:
    """A bare Redis connection: one write per batch of commands, hiredis to parse (as
    ``core.redis.bare_exchange`` on the app's two hot paths)."""

    async def open(self, url: str) -> _Resp:
        import hiredis

        parts = urlsplit(url)
        self.reader, self.writer = await asyncio.open_connection(parts.hostname, parts.port or 6379)
        self.parser = hiredis.Reader()
        database = parts.path.strip("/") or "0"
        self.send(("SELECT", database))
        await self.reply()
        return self

    def send(self, *commands: tuple[str | bytes | int, ...]) -> None:
        self.writer.write(b"".join(pack(*command) for command in commands))

    async def reply(self) -> Any:
        while (got := self.parser.gets()) is False:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("Redis closed the connection")
            self.parser.feed(data)
        return got

    def close(self) -> None:
        self.writer.close()


class _ViaRedis:
    """Lines through Redis as the app's events go: appended (those that wait while a round
    trip is under way go together in the next, as ``core.events._Appender``), and read back
    by one tail for every stream, which writes each to its client: one blocking ``XREAD``
    over all streams (``core.events._TailHub``), or a Pub/Sub subscription."""

    def __init__(self, via: str, url: str, streams: int) -> None:
        self.via, self.url = via, url
        base = f"relay-floor:{uuid.uuid4().hex}"
        self.keys = [(f"{base}:{i}:events", f"{base}:{i}:seq", f"{base}:{i}:channel") for i in range(streams)]
        self.index = {name.encode(): i for i, names in enumerate(self.keys) for name in names}
        self.clients: dict[int, asyncio.StreamWriter] = {}
        self.pending: list[tuple[int, bytes]] = []
        self.waiting: list[asyncio.Future[None]] = []
        self.busy = False
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        publish = PUBLISH if self.via == "pubsub" else ""
        self.appends = await _Resp().open(self.url)
        self.appends.send(("SCRIPT", "LOAD", APPEND_LUA_FUNCTION + APPEND_CALL + publish + "return first\n"))
        self.sha = await self.appends.reply()
        self.tail = await _Resp().open(self.url)
        if self.via == "pubsub":
            self.tail.send(("SUBSCRIBE", *(channel for _e, _s, channel in self.keys)))
            for _ in self.keys:
                await self.tail.reply()
        self.task = asyncio.create_task(self._read_pubsub() if self.via == "pubsub" else self._read_xread())

    async def append(self, stream: int, line: bytes) -> None:
        self.pending.append((stream, line))
        if self.busy:
            waiter = asyncio.get_running_loop().create_future()
            self.waiting.append(waiter)
            await waiter
            return
        self.busy = True
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                waiting, self.waiting = self.waiting, []
                self.appends.send(
                    *(("EVALSHA", self.sha, 3, *self.keys[i], "line", data) for i, data in batch)
                )
                for _ in batch:
                    await self.appends.reply()
                for waiter in waiting:
                    waiter.set_result(None)
        finally:
            self.busy = False

    async def _read_xread(self) -> None:
        loop = asyncio.get_running_loop()
        last = ["0-0"] * len(self.keys)
        while True:
            sent = loop.time()
            names = [events for events, _s, _c in self.keys]
            self.tail.send(("XREAD", "COUNT", 500, "BLOCK", 10_000, "STREAMS", *names, *last))
            for key, entries in await self.tail.reply() or []:
                stream = self.index[key]
                client = self.clients.get(stream)
                for _id, fields in entries:
                    if client is not None:
                        client.write(b"data: " + fields[3] + b"\n")  # event, "line", data, the line
                last[stream] = entries[-1][0].decode()
            # Paced as the app's shared reader is, so that one read takes many streams' lines.
            if loop.time() - sent < _TailHub.READ_INTERVAL:
                await asyncio.sleep(_TailHub.READ_INTERVAL)

    async def _read_pubsub(self) -> None:
        while True:
            _kind, channel, data = await self.tail.reply()
            client = self.clients.get(self.index[channel])
            if client is not None:
                client.write(b"data: " + data + b"\n")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.appends.send(("DEL", *(name for events, seq, _c in self.keys for name in (events, seq))))
        await self.appends.reply()
        self.appends.close()
        self.tail.close()


async def _relay(lines: int, rate: float, streams: int, via: str, redis_url: str) -> float:
    loop = asyncio.get_running_loop()
    ready: list[asyncio.subprocess.Process] = []
    gate = asyncio.Event()
    window: dict[str, float] = {}
    relayed = 0
    done: asyncio.Future[float] = loop.create_future()
    redis = _ViaRedis(via, redis_url, streams) if via != "none" else None
    if redis is not None:
        await redis.start()

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal relayed
        stream = len(ready)
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
        if redis is not None:
            redis.clients[stream] = writer
        if len(ready) == streams:
            gate.set()
        await gate.wait()
        if "start" not in window:
            window["start"], relayed = time.process_time(), 0
        child.stdin.write(b"go\n")
        while line := await child.stdout.readline():
            if redis is None:
                writer.write(b"data: " + line + b"\n")
            else:
                await redis.append(stream, line)
            relayed += 1
        # The window ends with the first stream to end, while all still stream.
        if "end" not in window:
            window["end"], window["relayed"] = time.process_time(), relayed
        await asyncio.sleep(0.1)  # the tail writes the last lines
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
        if redis is not None:
            await redis.stop()


def measure(
    rate: float = 50.0, seconds: float = 6.0, streams: int = 1, via: str = "none", redis_url: str = REDIS_URL
) -> float:
    """CPU ms per line of a bare uvloop relay of ``streams`` streams at ``rate`` lines a
    second each; ``via`` "xread" or "pubsub" passes every line through Redis on the way."""
    import uvloop

    return uvloop.run(_relay(max(10, int(rate * seconds)), rate, streams, via, redis_url))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=50.0, help="lines a second (default 50)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long (default 6)")
    parser.add_argument("--streams", type=int, default=1, help="streams relayed at once (default 1)")
    parser.add_argument(
        "--via",
        choices=["none", "xread", "pubsub", "all"],
        default="none",
        help="pass each line through Redis, tailed by XREAD or Pub/Sub (default none; all: each in turn)",
    )
    parser.add_argument(
        "--redis-url", default=REDIS_URL, help="for --via (default $REDIS_URL or the local Redis)"
    )
    args = parser.parse_args()
    for via in ("none", "xread", "pubsub") if args.via == "all" else (args.via,):
        floor = measure(args.rate, args.seconds, args.streams, via, args.redis_url)
        label = "bare relay" if via == "none" else f"relay through Redis ({via} tail)"
        print(f"{label}, {args.streams} stream(s) at {args.rate:g} lines/s each: {floor:.3f} ms CPU per line")


if __name__ == "__main__":
    main()
