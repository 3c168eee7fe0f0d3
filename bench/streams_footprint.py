"""What open SSE streams cost the web worker, and whether it gives it back when they close.

Run: ``.venv/bin/python bench/streams_footprint.py`` (about 90 seconds on 2 cores);
``--json`` prints the figures as one JSON object on the last line (the load test in
``tests/hardening/test_stream_footprint.py`` reads it).

A private stack (``bench/harness.py``): uvicorn serving the app as its own process, the
scripted model, the bundled CLI, Redis. ``--runs`` runs start at once, each a slowly
paced reply (a text delta every ``--pace-ms``), each watched by one client: the warm-up
(what runs leave warm is no cost of streams); the worker's footprint at rest is *idle*.
Then the same runs again, with ``--streams`` SSE clients spread over them, each on a
connection of its own; while all are open the footprint is *peak*. The clients read
until ``done`` and close; once the worker has settled the footprint is *after*, which
should be back within 10% of *idle*. The same crowd once more gives *after_again*: what
streams keep would grow there, an allocator's high-water mark (reached once) would not.

The footprint of the worker process: its threads, open file descriptors and resident
size (``/proc/PID``), and its TCP connections to Redis (its sockets whose peer is the
Redis port, matched by inode in ``/proc/PID/net/tcp``), also counted by the client name
each holds in Redis's ``CLIENT LIST`` (the app runs with ``REDIS_CLIENT_NAMES`` on), and
how many of them hold a subscription.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import redis

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import app_client, harness  # noqa: E402
from bench.report import table  # noqa: E402
from core.redis import IDLE_CLOSE_SECONDS  # noqa: E402

# How close to idle "after" must come back (the acceptance bar).
TOLERANCE = 0.10
# What a second crowd may add to the resident size the first one left (MiB): a stream that
# kept anything would show here (43 KB a stream is 13 MiB for 300; this bound catches 14 KB),
# an allocator's high-water mark, reached once by the first crowd, would not (measured:
# +0.2 to +1.2 MiB).
SECOND_CROWD_RSS_MIB = 4.0
# How long the footprint must hold still to count as settled (``settled``): longer than a
# trim can take to close an idle connection (unused for IDLE_CLOSE_SECONDS, looked at again
# as long after; the Redis pools' and the request threads' database connections alike),
# and the resident size moving less than this meanwhile.
STILL_SECONDS = 2 * IDLE_CLOSE_SECONDS + 1
RSS_STILL_MIB = 0.5


@dataclass(frozen=True)
class Footprint:
    threads: int
    fds: int
    rss_mib: float
    redis_connections: int
    # The same connections by name (CLIENT SETNAME: core.redis.connection_name), so a
    # connection left behind shows which part of the worker holds it.
    redis_clients: dict[str, int]
    # Of those connections, the ones holding a subscription: the runs' control messages
    # come through one per event loop that has a run (``promptmgr.run_control``), not one a run.
    redis_subscriptions: int


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _local_ports_to(pid: int, port: int) -> list[int]:
    """The local ports of the process's established TCP connections whose peer listens on ``port``."""
    inodes = _socket_inodes(pid)
    ports = []
    for table_name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table_name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            established = fields[3] == "01"
            if established and remote_port == port and fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _redis_clients(redis_url: str, local_ports: list[int]) -> tuple[dict[str, int], int]:
    """How many of these connections (by local port) each client name holds, as Redis sees
    them, and how many of them hold a subscription (``SUBSCRIBE`` or ``PSUBSCRIBE``)."""
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        by_port = {int(c["addr"].rsplit(":", 1)[1]): c for c in client.client_list()}
    # A connection Redis has not listed yet (opened this instant) counts as unnamed.
    listed = [by_port.get(port, {}) for port in local_ports]
    names = Counter(c.get("name") or "(unnamed)" for c in listed)
    subscribed = sum(1 for c in listed if int(c.get("sub", 0)) or int(c.get("psub", 0)))
    return dict(sorted(names.items())), subscribed


def footprint(pid: int, redis_url: str) -> Footprint:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    ports = _local_ports_to(pid, urlparse(redis_url).port or 6379)
    names, subscribed = _redis_clients(redis_url, ports)
    return Footprint(
        threads=int(status["Threads"]),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        rss_mib=round(int(status["VmRSS"].split()[0]) / 1024, 1),
        redis_connections=len(ports),
        redis_clients=names,
        redis_subscriptions=subscribed,
    )


def settled(pid: int, redis_url: str, *, seconds: float = 6.0) -> Footprint:
    """The footprint once it stops moving: closed sockets, ended threads and the worker's
    clean-up after its last stream (a few seconds later) take a moment.

    Stopped means the same counts (and the resident size within ``RSS_STILL_MIB``) for
    ``STILL_SECONDS``: a connection the runs' last clean-up used stays open for up to two
    of the pools' trim periods (``core.redis.IDLE_CLOSE_SECONDS``), and on a busy machine
    that clean-up ends after the first sleep; still for one second, the footprint showed
    that connection as one left behind (4 Redis connections at rest, 5 after a crowd)."""
    time.sleep(seconds)
    last = footprint(pid, redis_url)
    still_since, still_rss = time.monotonic(), last.rss_mib
    deadline = time.monotonic() + seconds * 2 + STILL_SECONDS * 2
    while time.monotonic() < deadline:
        time.sleep(1)
        now = footprint(pid, redis_url)
        counts = (now.threads, now.fds, now.redis_connections)
        if (
            counts != (last.threads, last.fds, last.redis_connections)
            or abs(now.rss_mib - still_rss) > RSS_STILL_MIB
        ):
            still_since, still_rss = time.monotonic(), now.rss_mib
        elif time.monotonic() - still_since >= STILL_SECONDS:
            return now
        last = now
    return last


def paced_script(deltas: int, pace_ms: int) -> str:
    return app_client.script_prompt([{"text": "x", "repeat": deltas, "chunk_chars": 1, "pace_ms": pace_ms}])


async def _read_to_done(app_url: str, cookies: httpx.Cookies, events_url: str, opened: asyncio.Event) -> int:
    """One SSE client on a connection of its own; returns the events it received."""
    async with httpx.AsyncClient(base_url=app_url, cookies=cookies, trust_env=False) as client:
        count = 0
        timeout = httpx.Timeout(120, read=120)
        async with client.stream("GET", events_url, timeout=timeout) as response:
            if response.status_code != 200:
                raise RuntimeError(f"SSE: HTTP {response.status_code}")
            opened.set()
            parser = app_client.SSEParser()
            async for chunk in response.aiter_raw():
                for event in parser.feed(chunk, 0):
                    count += 1
                    if event.event == "done":
                        return count
    raise RuntimeError(f"{events_url} ended without done")


async def _runs_with_streams(
    stack: harness.Stack, client: httpx.AsyncClient, args: argparse.Namespace, *, streams: int
) -> tuple[Footprint, int]:
    """``--runs`` runs at once, ``streams`` clients spread over them, each read to ``done``;
    returns the footprint while all clients were connected, and the events they received."""
    pid = stack.app_pid
    urls = [
        await app_client.start_run(client, stack.project_id, paced_script(args.deltas, args.pace_ms))
        for _ in range(args.runs)
    ]
    opened = [asyncio.Event() for _ in range(streams)]
    readers = [
        asyncio.create_task(_read_to_done(stack.app_url, client.cookies, urls[i % len(urls)], event))
        for i, event in enumerate(opened)
    ]
    await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), timeout=60)
    # Every client is connected and every run streams: the footprint under load.
    await asyncio.sleep(1)
    peak = await asyncio.to_thread(footprint, pid, stack.redis_url)
    return peak, sum(await asyncio.gather(*readers))


@dataclass
class Results:
    idle: Footprint
    peak: Footprint
    after: Footprint
    # After the same crowd once more: what streams keep grows here, a high-water mark does not.
    after_again: Footprint
    streams: int
    runs: int
    events_received: int
    seconds: float


async def measure(stack: harness.Stack, args: argparse.Namespace) -> Results:
    pid = stack.app_pid
    client = await app_client.login(stack.app_url)
    try:
        # Warm-up: the same runs, each watched by one client. What runs leave warm (the
        # CLI's spawn path, the Markdown renderer, SQLite's page cache, executor threads)
        # is no cost of the streams, so it belongs to the idle footprint.
        await _runs_with_streams(stack, client, args, streams=args.runs)
        idle = await asyncio.to_thread(settled, pid, stack.redis_url)
        started = time.monotonic()
        peak, received = await _runs_with_streams(stack, client, args, streams=args.streams)
        seconds = time.monotonic() - started
        after = await asyncio.to_thread(settled, pid, stack.redis_url)
        await _runs_with_streams(stack, client, args, streams=args.streams)
        after_again = await asyncio.to_thread(settled, pid, stack.redis_url)
    finally:
        await client.aclose()
    return Results(idle, peak, after, after_again, args.streams, args.runs, received, seconds)


def within(after: float, idle: float) -> bool:
    return after <= idle * (1 + TOLERANCE)


def report(results: Results) -> None:
    grown = results.after_again.rss_mib - results.after.rss_mib
    verdict = "ok" if grown <= SECOND_CROWD_RSS_MIB else "OVER"
    print(
        f"A second crowd added {grown:+.1f} MiB of resident size (at most {SECOND_CROWD_RSS_MIB}: {verdict})."
    )
    rows = []
    for name in ("threads", "fds", "rss_mib", "redis_connections", "redis_subscriptions"):
        idle, peak, after, again = (
            getattr(getattr(results, k), name) for k in ("idle", "peak", "after", "after_again")
        )
        change = (after - idle) / idle if idle else 0.0
        rows.append(
            [
                name,
                str(idle),
                str(peak),
                str(after),
                f"{change * 100:+.1f}%",
                "ok" if within(after, idle) else "OVER",
                str(again),
            ]
        )
    for label, left in (
        ("idle", results.idle),
        (f"{results.streams} streams open", results.peak),
        ("all closed", results.after),
        ("again", results.after_again),
    ):
        print(f"Redis connections {label}: {left.redis_clients}")
    print(
        table(
            [
                "worker",
                "idle",
                f"{results.streams} streams open",
                "all closed",
                "after vs idle",
                "within 10%",
                "after a second crowd",
            ],
            rows,
            title=(
                f"{results.streams} SSE clients over {results.runs} runs, "
                f"{results.events_received} events received in {results.seconds:.1f} s"
            ),
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=300, help="SSE clients at once (default 300)")
    parser.add_argument("--runs", type=int, default=10, help="runs they watch, started at once (default 10)")
    parser.add_argument("--deltas", type=int, default=60, help="text deltas per run (default 60)")
    parser.add_argument(
        "--pace-ms", type=int, default=250, help="model pause before each delta (default 250)"
    )
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON on the last line")
    args = parser.parse_args()

    print(f"SSE stream footprint on {harness.machine()}; setting up a private stack …", flush=True)
    with harness.Stack.create(name="footprint", ask_user=False) as stack:
        stack.start_app(
            {
                "RUNS_PER_USER": str(args.runs),
                "RUNS_GLOBAL": str(max(args.runs, 20)),
                # Connections named by client, for the count by name (core.redis).
                "REDIS_CLIENT_NAMES": "1",
            }
        )
        results = asyncio.run(measure(stack, args))
    report(results)
    if args.json:
        print(json.dumps(asdict(results)))


if __name__ == "__main__":
    main()
