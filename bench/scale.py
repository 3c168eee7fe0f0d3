"""Scale: many idle SSE watchers and many streaming runs on one machine, one worker and two.

Run: ``.venv/bin/python bench/scale.py`` (about three minutes on 2 cores).

A private stack (``bench/harness.py``: uvicorn, Redis, SQLite) whose runs start
``bench/fake_cli.py`` as the CLI: it replays what the real CLI prints (recorded, with
``--include-partial-messages`` and the stream-json input) at a model's pace, at a few MB
and next to no CPU, so the 280 MB and the busy CPU of 50 real CLIs do not hide the app's
own costs. Each text delta carries the CLOCK_MONOTONIC time the fake CLI wrote its line,
so this process (on the same machine) reads each delta's latency off its text.

Figures, each beside its target:

1. *Idle*: the resident size of the app's own processes (the uvicorn worker and its
   Markdown render process and warm ask-user server, if they run; not the CLIs) once a few
   runs have warmed it up and it has settled: ``--settle`` seconds, by default until the
   render process that the warm-up's long replies started and the warm ask-user server
   that its runs started have ended (``markdown.RENDER_IDLE_SECONDS`` without a long reply,
   ``ASK_USER_WARM_IDLE_SECONDS`` without an ask-user run; later phases, whose idle figures
   are not reported, settle for the render process only).
2. *One run at a real pace*: ``--rate`` deltas a second, one SSE client; the server's CPU
   time (the app's processes' CPU clocks, as ``cpu_ns`` reads them) per delta delivered,
   over the run's streaming window. Beside it, the machine's floors at that pace: the CPU
   per line of a bare uvloop relay, pipe to socket (``bench/relay_floor.py``), which no
   server that sends each delta as it comes can beat; and of the same relay passing each
   line through Redis as the app's events go (appended, read back by an ``XREAD`` tail,
   ``--via xread``), which no server of this design (runs in workers, web processes
   streaming from Redis) can beat.
3. *Load*, with one worker and then two (uvicorn ``--workers 2``: two processes sharing
   Redis and the database): ``--watchers`` idle SSE clients spread over ``--quiet-runs``
   live runs that print nothing (runs waiting on their user), and ``--runs`` runs streaming
   at ``--rate`` deltas a second, each read by one SSE client here. Measured over a
   window of ``--window`` seconds once every run streams: delta latency at the client
   (fake CLI's write -> SSE arrival), p50 and p99; event-loop lag, as the response time of
   the app's lightest endpoint (``/_internal/identity``, answered on the event loop
   without Django) probed every 50 ms on a fresh connection; the server's CPU per delta;
   the deltas per second delivered against those asked for; the app's resident size.
   Beside the CPU, the floors for that load: one relay process relaying ``--runs`` such
   streams at once (``relay_floor.py --streams``), bare and through Redis (appends that
   wait go together, one ``XREAD`` over every stream), sharing its wake-ups among the
   streams as a loaded server can.

The clients are raw asyncio sockets (no HTTP library), so that 550 streams in this
process take as little as possible of the CPUs the app is measured on; all of this
process's CPU time is printed too. A benchmark reports; it does not assert.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import app_client, harness, relay_floor  # noqa: E402
from bench.report import fmt, percentile, table, verdict  # noqa: E402
from bench.stream_passes import sched_ns  # noqa: E402
from promptmgr.markdown import RENDER_IDLE_SECONDS  # noqa: E402

FAKE_CLI = Path(__file__).resolve().parent / "fake_cli.py"
TARGET_P99_MS = 50.0
TARGET_CPU_PER_DELTA_MS = 0.1
TARGET_IDLE_RSS_MIB = 100.0
STAMP = re.compile(rb"\[(\d{6,})\] ")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
PROBE_EVERY = 0.05
START_TIMEOUT = 60.0


# --- The app's processes ---------------------------------------------------------------------


def _children_of() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


SANDBOX = "run sandbox"


def _kind(pid: int, parent_kind: str) -> str:
    text = _cmdline(pid)
    if not text:
        return "gone"
    program = Path(text.split(b" ", 1)[0].decode(errors="replace")).name
    if parent_kind == SANDBOX or program == "bwrap" or b"promptmgr.egress" in text:
        return SANDBOX
    if b"fake_cli.py" in text:
        return "cli"
    if b"guardian.py" in text:
        return "guardian"
    if b"uvicorn" in text:
        return "uvicorn supervisor" if b"--workers" in text else "uvicorn worker"
    if b"promptmgr.markdown" in text:
        return "render process"
    if b"mcp_server.warm" in text:
        return "warm ask-user server"
    if b"resource_tracker" in text:
        return "resource tracker"
    if b"spawn_main" in text:
        # uvicorn's supervisor spawns its workers with multiprocessing.
        return "uvicorn worker" if parent_kind == "uvicorn supervisor" else "spawned process"
    return Path(text.split(b" ", 1)[0].decode(errors="replace")).name or "?"


def process_kinds(root: int) -> dict[int, str]:
    """The processes under ``root`` (uvicorn's), by kind: the app's own and the runs'
    sandboxes (bubblewrap, what it holds, and the egress proxy beside it:
    ``promptmgr.run_sandbox``), not the CLIs, their guardians or anything they start."""
    children = _children_of()
    found: dict[int, str] = {}
    frontier = [(root, "")]
    while frontier:
        pid, parent_kind = frontier.pop()
        kind = _kind(pid, parent_kind)
        if kind in ("cli", "guardian", "gone"):
            continue  # a run's process tree, not the app
        found[pid] = kind
        frontier += [(child, kind) for child in children.get(pid, [])]
    return found


def app_processes(root: int) -> dict[int, str]:
    """The app's own processes under ``root``, by kind: ``process_kinds`` without the runs'
    sandboxes, which are part of a run, as its CLI is."""
    return {pid: kind for pid, kind in process_kinds(root).items() if kind != SANDBOX}


def worker_pids(root: int) -> list[int]:
    """The uvicorn worker processes under ``root``."""
    return [pid for pid, kind in app_processes(root).items() if kind == "uvicorn worker"]


def rss_split(root: int) -> tuple[float, float]:
    """Resident MiB of the app's own processes and of the runs' sandboxes, from one walk."""
    app = sandboxes = 0.0
    for pid, kind in process_kinds(root).items():
        if kind == SANDBOX:
            sandboxes += rss_mib(pid)
        else:
            app += rss_mib(pid)
    return app, sandboxes


# Time for this process to read what its own pauses (a collection, a walk of /proc) held back.
CLIENT_SETTLE_S = 0.2


@contextlib.contextmanager
def measuring_quietly() -> Iterator[None]:
    """No garbage collection in this process while it times deltas: its 550 streams' objects
    made a full collection take ~100 ms, which every stream's next delta waited for and
    which this process, not the server, had added. Collected before and after instead
    (the one before is followed by ``CLIENT_SETTLE_S`` before the window opens)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


def cpu_ns(pid: int) -> int:
    """The CPU time of the process (all its threads, those gone included), in nanoseconds;
    0 once it is gone. Read off its CPU clock (clock_getcpuclockid's id, ``(~pid << 3) | 2``):
    the scheduler's own count. The clock-tick counts of ``/proc/PID/stat`` charge a whole tick
    (4 ms at HZ=250, reported in 10 ms) to whoever runs when one fires: a process at rest
    that wakes on timers read 2-12 ms of CPU a second from them, 2.4-2.6 ms from this."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)
    except OSError:
        return 0


def rss_mib(pid: int) -> float:
    try:
        resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError):
        return 0.0
    return resident * PAGE_KIB / 1024


@dataclass
class CpuMark:
    ns: dict[int, int]
    at: float

    @classmethod
    def now(cls, root: int) -> CpuMark:
        return cls({pid: cpu_ns(pid) for pid in app_processes(root)}, time.monotonic())

    def seconds_until(self, later: CpuMark) -> float:
        """CPU seconds the processes of both marks used between them (new ones from zero)."""
        used = sum(t - self.ns.get(pid, 0) for pid, t in later.ns.items())
        return used / 1e9


def own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


# --- Raw HTTP/1.1 and SSE clients -------------------------------------------------------------


@dataclass
class Endpoint:
    port: int
    cookie: str
    csrf: str


async def _connect(ep: Endpoint, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", ep.port, limit=1 << 20)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {ep.cookie}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        writer.close()
        raise RuntimeError(f"GET {path}: HTTP {status.decode()}")
    if b"transfer-encoding: chunked" not in head.lower():
        writer.close()
        raise RuntimeError(f"GET {path}: expected a chunked body")
    return reader, writer


class Dechunk:
    """HTTP/1.1 chunked transfer coding, fed as bytes arrive."""

    def __init__(self) -> None:
        self.buffer = b""
        self.ended = False

    def feed(self, data: bytes) -> bytes:
        self.buffer += data
        out = bytearray()
        while True:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self.buffer[:line_end].split(b";", 1)[0], 16)
            if size == 0:
                self.ended = True
                break
            start = line_end + 2
            if len(self.buffer) < start + size + 2:
                break
            out += self.buffer[start : start + size]
            self.buffer = self.buffer[start + size + 2 :]
        return bytes(out)


@dataclass
class Stream:
    """One SSE client reading a streaming run: each delta's latency, as it arrives."""

    url: str
    latencies: list[tuple[int, float]] = field(default_factory=list)  # (arrival ns, ms)
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # the CLI's session arrived
    done: bool = False
    status: str = ""

    async def read(self, ep: Endpoint) -> None:
        reader, writer = await _connect(ep, self.url)
        self.opened.set()
        chunks, pending = Dechunk(), b""
        try:
            while not self.done:
                data = await reader.read(1 << 16)
                arrived = harness.now_ns()
                if not data:
                    break
                *blocks, pending = (pending + chunks.feed(data)).split(b"\n\n")
                for block in blocks:
                    if block.startswith(b"id: ") and b"\nevent: text_delta\n" in block:
                        for stamp in STAMP.findall(block):
                            self.latencies.append((arrived, (arrived - int(stamp)) / 1e6))
                    elif b"\nevent: session\n" in block:
                        self.ready.set()
                    elif b"\nevent: done\n" in block:
                        self.status = json.loads(block.split(b"\ndata: ", 1)[1]).get("status", "")
                        self.done = True
                if chunks.ended:
                    break
        finally:
            writer.close()


async def watch(ep: Endpoint, url: str, opened: asyncio.Event) -> int:
    """An idle SSE client: read until ``done`` (or the end), keep nothing; returns bytes read."""
    reader, writer = await _connect(ep, url)
    opened.set()
    total, tail = 0, b""
    try:
        while data := await reader.read(1 << 16):
            total += len(data)
            if b"event: done" in tail + data:
                break
            tail = data[-16:]
    finally:
        writer.close()
    return total


async def probe(port: int, stop: asyncio.Event, samples: list[float]) -> None:
    """The app's lightest answer, on a fresh connection (so either worker answers), every
    ``PROBE_EVERY`` seconds: how long a request waits for a busy event loop."""
    request = b"GET /_internal/identity HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    while not stop.is_set():
        started = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await reader.read()  # to the end: the server closes after the answer
            writer.close()
            samples.append((time.perf_counter() - started) * 1e3)
        except OSError:
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PROBE_EVERY)


# --- Starting and stopping runs -----------------------------------------------------------------


def fake_prompt(**spec: object) -> str:
    return "FAKE: " + json.dumps(spec)


async def start_run(client: object, project_id: int, prompt: str) -> str:
    """``POST`` a run on a connection of its own, so with several workers each can get it."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    response = await client.post(
        f"/api/projects/{project_id}/runs", json={"prompt": prompt}, headers={"Connection": "close"}
    )
    if response.status_code != 201:
        raise RuntimeError(f"starting a run failed: HTTP {response.status_code} {response.text[:300]}")
    return str(response.json()["events_url"])


async def cancel_run(client: object, events_url: str) -> None:
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    await client.post(events_url.removesuffix("/events") + "/cancel", headers={"Connection": "close"})


# --- The phases -------------------------------------------------------------------------------


@dataclass
class Load:
    workers: int
    latencies: list[float]
    latencies_all: list[float]
    lag_ms: list[float]
    deltas: int
    window_s: float
    cpu_s: float
    rss_mib: float
    asked_rate: float
    runs_per_worker: list[int]
    client_cpu_s: float
    failed: int
    runq_s: float = float("nan")  # the workers' time ready to run but waiting for a CPU
    sandboxes_rss_mib: float = 0.0  # the runs' sandboxes (not the app's), at their largest
    window_ns: tuple[int, int] = (0, 0)  # CLOCK_MONOTONIC bounds of the measured window

    @property
    def cpu_per_delta_ms(self) -> float:
        return self.cpu_s / self.deltas * 1e3 if self.deltas else float("nan")


@dataclass
class Single:
    deltas: int
    window_s: float
    cpu_s: float
    latencies: list[float]

    @property
    def cpu_per_delta_ms(self) -> float:
        return self.cpu_s / self.deltas * 1e3 if self.deltas else float("nan")


@dataclass
class Idle:
    rss: dict[str, float]
    cpu_ms_per_s: float = float("nan")  # the app's CPU time at rest, per second

    @property
    def total(self) -> float:
        return sum(self.rss.values())


def idle_footprint(root: int) -> Idle:
    rss: dict[str, float] = {}
    for pid, kind in sorted(app_processes(root).items()):
        rss[kind] = rss.get(kind, 0.0) + rss_mib(pid)
    return Idle(rss)


async def warm_server_started(root: int, timeout: float = 20.0) -> None:
    """Wait until the warm ask-user server has done its imports: its CPU clock stands still."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        warm = [pid for pid, kind in app_processes(root).items() if kind == "warm ask-user server"]
        used = sum(cpu_ns(pid) for pid in warm)
        if warm and used - last < 2_000_000:  # under 2 ms of CPU in the last 200 ms
            return
        last = used
        await asyncio.sleep(0.2)
    raise RuntimeError("the warm ask-user server did not start and settle")


def settle_seconds(args: argparse.Namespace) -> float:
    """``--settle``, or until the helpers that end when idle have ended (the app's defaults)."""
    if args.settle is not None:
        return float(args.settle)
    from django.conf import settings

    return max(RENDER_IDLE_SECONDS, settings.ASK_USER_WARM_IDLE_SECONDS) + 2


async def settle(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def warm_up(client: object, ep: Endpoint, project_id: int, workers: int) -> None:
    """A few short runs at once (each worker gets some): imports, connections, caches."""
    urls = [
        await start_run(client, project_id, fake_prompt(deltas=200, rate=400, chars=40))
        for _ in range(2 * workers)
    ]
    streams = [Stream(url) for url in urls]
    await asyncio.wait_for(asyncio.gather(*(s.read(ep) for s in streams)), timeout=START_TIMEOUT)


async def single_run(stack: harness.Stack, client: object, ep: Endpoint, args: argparse.Namespace) -> Single:
    deltas = int(args.rate * args.single_seconds)
    url = await start_run(client, stack.project_id, fake_prompt(deltas=deltas, rate=args.rate))
    stream = Stream(url)
    reader = asyncio.create_task(stream.read(ep))
    # The window: from the first delta to the last, so starting and ending are not in it.
    while not stream.latencies and not reader.done():
        await asyncio.sleep(0.005)
    first, counted = CpuMark.now(stack.app_pid), len(stream.latencies)
    profilers = start_profilers(stack.app_pid, args, "single", args.single_seconds - 1)
    while len(stream.latencies) < deltas and not reader.done():
        await asyncio.sleep(0.005)
    last = CpuMark.now(stack.app_pid)
    for profiler in profilers:
        profiler.wait()
    window = len(stream.latencies) - counted
    await asyncio.wait_for(reader, timeout=START_TIMEOUT)
    return Single(
        deltas=window,
        window_s=last.at - first.at,
        cpu_s=first.seconds_until(last),
        latencies=[ms for _ts, ms in stream.latencies],
    )


async def load(
    stack: harness.Stack, client: object, ep: Endpoint, args: argparse.Namespace, workers: int
) -> Load:
    root = stack.app_pid
    # Idle watchers first: live runs that print nothing, each watched by its share.
    quiet = [
        await start_run(client, stack.project_id, fake_prompt(quiet=True)) for _ in range(args.quiet_runs)
    ]
    opened = [asyncio.Event() for _ in range(args.watchers)]
    watchers = [
        asyncio.create_task(watch(ep, quiet[i % len(quiet)], event)) for i, event in enumerate(opened)
    ]
    await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), timeout=START_TIMEOUT)

    # The streaming runs start one after another and wait at a gate (the fake CLI has
    # printed its session), so that they all stream together once it opens.
    deltas = int(args.rate * args.seconds)
    gate = stack.tmp / f"gate-{workers}"
    streams: list[Stream] = []
    readers = []
    for _ in range(args.runs):
        prompt = fake_prompt(deltas=deltas, rate=args.rate, gate=str(gate))
        stream = Stream(await start_run(client, stack.project_id, prompt))
        streams.append(stream)
        readers.append(asyncio.create_task(stream.read(ep)))
    await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in streams)), timeout=2 * START_TIMEOUT)
    gate.touch()
    deadline = time.monotonic() + START_TIMEOUT
    while not all(s.latencies for s in streams):
        if time.monotonic() > deadline:
            raise RuntimeError("not every run streamed within a minute of the gate")
        await asyncio.sleep(0.01)
    await asyncio.sleep(args.ramp)

    # The window: every run streams, none has ended.
    stop_probe = asyncio.Event()
    lag: list[float] = []
    prober = asyncio.create_task(probe(stack.app_port, stop_probe, lag))
    profilers = start_profilers(root, args, f"{workers}w", args.window)
    workers_now = worker_pids(root)
    runs_per_worker = guardians_per_worker(root)
    with measuring_quietly():
        runq_before = sum(sched_ns(pid)[1] for pid in workers_now)
        first, counts, client_cpu = CpuMark.now(root), [len(s.latencies) for s in streams], own_cpu_s()
        # This loop just walked /proc and collected its garbage (tens of ms each): the deltas
        # those held back are read before the latency window opens, not counted in it.
        await asyncio.sleep(CLIENT_SETTLE_S)
        first_ns = harness.now_ns()
        rss_peak = sandboxes_peak = 0.0
        window_end = time.monotonic() + args.window
        while time.monotonic() < window_end and not any(s.done for s in streams):
            await asyncio.sleep(0.25)
            # A walk of /proc (some 600 processes under this load) takes tens of ms: on
            # this loop it held every stream's next read, and each walk showed up as a
            # 40-50 ms latency spike on every run, the server's p99 in all but name.
            app_rss, sandboxes_rss = await asyncio.to_thread(rss_split, root)
            rss_peak, sandboxes_peak = max(rss_peak, app_rss), max(sandboxes_peak, sandboxes_rss)
        # Deltas held back by this walk are read after last_ns, so out of the window too.
        last, client_cpu = CpuMark.now(root), own_cpu_s() - client_cpu
        runq_s = (sum(sched_ns(pid)[1] for pid in workers_now) - runq_before) / 1e9
        last_ns = harness.now_ns()
    stop_probe.set()
    await prober
    for profiler in profilers:
        await asyncio.to_thread(profiler.wait)
    delivered = sum(len(s.latencies) - c for s, c in zip(streams, counts, strict=True))
    in_window = [ms for s in streams for ts, ms in s.latencies if first_ns <= ts <= last_ns]

    await asyncio.wait_for(asyncio.gather(*readers), timeout=args.seconds + START_TIMEOUT)
    reasons: dict[str, int] = {}
    for stream in (s for s in streams if s.status != "completed"):
        reason = await app_client.run_error(client, stream.url)  # type: ignore[arg-type]
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in reasons.items():
        print(f"  {count} run(s) did not complete: {reason[:300]}", flush=True)
    for url in quiet:
        await cancel_run(client, url)
    await asyncio.wait_for(asyncio.gather(*watchers), timeout=START_TIMEOUT)
    return Load(
        workers=workers,
        latencies=in_window,
        latencies_all=[ms for s in streams for _ts, ms in s.latencies],
        lag_ms=lag,
        deltas=delivered,
        window_s=last.at - first.at,
        cpu_s=first.seconds_until(last),
        rss_mib=rss_peak,
        sandboxes_rss_mib=sandboxes_peak,
        asked_rate=args.rate * args.runs,
        runs_per_worker=runs_per_worker,
        client_cpu_s=client_cpu,
        failed=sum(1 for s in streams if s.status != "completed"),
        runq_s=runq_s,
        window_ns=(first_ns, last_ns),
    )


def start_profilers(
    root: int, args: argparse.Namespace, label: str, seconds: float
) -> list[subprocess.Popen[bytes]]:
    """``--profile PREFIX``: py-spy samples each worker for ``seconds`` (collapsed stacks,
    ``PREFIX-<label>-<pid>.txt``, for flame graphs or ``sort | uniq``)."""
    if not args.profile:
        return []
    py_spy = Path(harness.PYTHON).with_name("py-spy")
    procs = []
    for pid in worker_pids(root):
        out = f"{args.profile}-{label}-{pid}.txt"
        argv = [str(py_spy), "record", "--pid", str(pid), "--duration", str(max(1, int(seconds)))]
        argv += ["--rate", "250", "--format", "raw", "--gil", "--nonblocking", "--output", out]
        argv += ["--native"] if args.profile_native else []
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def guardians_per_worker(root: int) -> list[int]:
    """How many runs each worker process supervises (its guardians)."""
    children = _children_of()
    return [
        sum(1 for child in children.get(pid, []) if b"guardian.py" in _cmdline(child))
        for pid in worker_pids(root)
    ]


async def login_endpoint(stack: harness.Stack) -> tuple[object, Endpoint]:
    client = await app_client.login(stack.app_url)
    return client, Endpoint(
        stack.app_port, app_client.cookie_header(client), client.cookies.get("csrftoken") or ""
    )


async def phase(
    stack: harness.Stack, args: argparse.Namespace, workers: int, settle_s: float
) -> tuple[Idle, Single | None, Load]:
    client, ep = await login_endpoint(stack)
    try:
        await warm_up(client, ep, stack.project_id, workers)
        await settle(settle_s)
        idle = idle_footprint(stack.app_pid)
        before = CpuMark.now(stack.app_pid)
        await asyncio.sleep(args.idle_seconds)
        after = CpuMark.now(stack.app_pid)
        idle.cpu_ms_per_s = before.seconds_until(after) * 1e3 / (after.at - before.at)
        single = None
        if workers == 1:
            # The settle let the warm ask-user server go; the measured run must not pay for
            # its start (an import of about a second of CPU, once per quiet spell, not per
            # delta: bench/cli_startup.py shows it), so a warm-up run starts it first.
            await warm_up(client, ep, stack.project_id, workers)
            await warm_server_started(stack.app_pid)
            single = await single_run(stack, client, ep, args)
        print(
            f"  {workers} worker(s): {args.runs} runs streaming, {args.watchers} idle watchers …", flush=True
        )
        result = await load(stack, client, ep, args, workers)
    finally:
        import httpx

        assert isinstance(client, httpx.AsyncClient)
        await client.aclose()
    return idle, single, result


# --- Report -----------------------------------------------------------------------------------


@dataclass
class Floors:
    """The CPU per line of bare relays (``bench/relay_floor.py``) shaped like the single run
    and like the load: straight from pipe to client, and through Redis as the app's events
    go (appended, read back by one ``XREAD`` tail), which the app's design (runs in workers,
    web processes streaming from Redis) cannot spend less than."""

    single: float
    single_via_redis: float
    load: float
    load_via_redis: float

    @classmethod
    def measure(cls, args: argparse.Namespace, redis_url: str) -> Floors:
        many = {"seconds": 10.0, "streams": args.runs}
        return cls(
            single=relay_floor.measure(args.rate),
            single_via_redis=relay_floor.measure(args.rate, via="xread", redis_url=redis_url),
            load=relay_floor.measure(args.rate, **many),
            load_via_redis=relay_floor.measure(args.rate, via="xread", redis_url=redis_url, **many),
        )


def report(idle: Idle, single: Single, loads: list[Load], floors: Floors, args: argparse.Namespace) -> None:
    print()
    print(
        table(
            ["process", "RSS MiB"],
            [[kind, fmt(mib, 1)] for kind, mib in idle.rss.items()] + [["total", fmt(idle.total, 1)]],
            title="The app's own processes at rest, one worker (after warm-up runs, settled)",
        )
    )
    print()
    rows = []
    for result in loads:
        p50, p99 = percentile(result.latencies, 50), percentile(result.latencies, 99)
        rows.append(
            [
                f"{result.workers} worker{'s' if result.workers > 1 else ''}",
                str(len(result.latencies)),
                fmt(p50),
                fmt(percentile(result.latencies, 95)),
                fmt(p99),
                fmt(max(result.latencies, default=float("nan"))),
                fmt(percentile(result.latencies_all, 99)),
                fmt(percentile(result.lag_ms, 50)),
                fmt(percentile(result.lag_ms, 99)),
                fmt(max(result.lag_ms, default=float("nan"))),
            ]
        )
    print(
        table(
            [
                "load (milliseconds)",
                "deltas",
                "p50",
                "p95",
                "p99",
                "max",
                "p99 whole run",
                "lag p50",
                "lag p99",
                "lag max",
            ],
            rows,
            title=(
                f"Delta latency, fake CLI's write -> SSE client: {args.runs} runs at {args.rate:g} deltas/s, "
                f"{args.watchers} idle watchers on {args.quiet_runs} quiet runs; "
                f"{args.window:g} s window"
            ),
        )
    )
    print(
        "  lag: response time of /_internal/identity (on the event loop, no Django), every 50 ms,\n"
        "       fresh connection; at rest it is about 0.3-0.6 ms here.\n"
        "  p99 whole run: every delta of every run, starting and ending included."
    )
    print()
    print(
        table(
            [
                "load",
                "deltas/s asked",
                "deltas/s delivered",
                "server CPU s",
                "CPU ms/delta",
                "server CPU %",
                "waited for a CPU %",
                "RSS MiB",
                "runs' sandboxes MiB",
                "runs per worker",
                "client CPU %",
                "failed runs",
            ],
            [
                [
                    f"{r.workers} worker{'s' if r.workers > 1 else ''}",
                    fmt(r.asked_rate, 0),
                    fmt(r.deltas / r.window_s, 0),
                    fmt(r.cpu_s, 2),
                    fmt(r.cpu_per_delta_ms, 3),
                    fmt(100 * r.cpu_s / r.window_s, 0),
                    fmt(100 * r.runq_s / r.window_s, 0),
                    fmt(r.rss_mib, 1),
                    fmt(r.sandboxes_rss_mib, 1),
                    "/".join(str(n) for n in r.runs_per_worker),
                    fmt(100 * r.client_cpu_s / r.window_s, 0),
                    str(r.failed),
                ]
                for r in loads
            ],
            title="Server cost under load (the app's processes, their CPU clocks; CLIs excluded)",
        )
    )
    print(
        "  server CPU %: of one CPU (200% is the whole machine). client: this process, all 550 streams.\n"
        "  waited for a CPU %: the workers' threads ready to run while every CPU was busy\n"
        "        (/proc/PID/task/*/schedstat): the machine's share of the latency, not the app's.\n"
        "  RSS: the app's processes at their largest during the window.\n"
        "  runs' sandboxes: each run's bubblewrap sandbox (bwrap, its sleep and socat) and egress\n"
        "        proxy (CLAUDE_SANDBOX_SCOPE=run, the default), at their largest; part of a run, like\n"
        "        its CLI, so counted in neither the app's RSS nor its CPU."
    )
    print()
    target_rows = [
        [
            f"idle RSS of the app's processes <= {TARGET_IDLE_RSS_MIB:g} MiB",
            f"{fmt(idle.total, 1)} MiB",
            verdict(idle.total, TARGET_IDLE_RSS_MIB, inclusive=True),
        ],
        [
            f"server CPU per delta, one run at {args.rate:g}/s <= {TARGET_CPU_PER_DELTA_MS:g} ms",
            f"{fmt(single.cpu_per_delta_ms, 3)} ms ({single.deltas} deltas, {fmt(single.cpu_s, 2)} s)",
            verdict(single.cpu_per_delta_ms, TARGET_CPU_PER_DELTA_MS, inclusive=True),
        ],
        [
            "  of which the app at rest (per delta, at that pace)",
            f"{fmt(idle.cpu_ms_per_s / args.rate, 3)} ms ({fmt(idle.cpu_ms_per_s, 1)} ms of CPU a second)",
            "",
        ],
        [
            "  this machine's floor: a bare relay at that pace",
            f"{fmt(floors.single, 3)} ms (bench/relay_floor.py)",
            "",
        ],
        [
            "  the same relay, each line through Redis (append, XREAD tail)",
            f"{fmt(floors.single_via_redis, 3)} ms (bench/relay_floor.py --via xread)",
            "",
        ],
    ]
    for r in loads:
        label = f"{r.workers} worker{'s' if r.workers > 1 else ''}"
        p99 = percentile(r.latencies, 99)
        target_rows += [
            [
                f"delta latency p99 under load, {label} < {TARGET_P99_MS:g} ms",
                f"{fmt(p99)} ms",
                verdict(p99, TARGET_P99_MS),
            ],
            [
                f"server CPU per delta under load, {label} <= {TARGET_CPU_PER_DELTA_MS:g} ms",
                f"{fmt(r.cpu_per_delta_ms, 3)} ms",
                verdict(r.cpu_per_delta_ms, TARGET_CPU_PER_DELTA_MS, inclusive=True),
            ],
        ]
    if loads:
        target_rows += [
            [
                f"  this machine's floor: a bare relay of {args.runs} streams at {args.rate:g}/s each",
                f"{fmt(floors.load, 3)} ms (bench/relay_floor.py --streams {args.runs})",
                "",
            ],
            [
                "  the same relay, each line through Redis (batched appends, one XREAD tail)",
                f"{fmt(floors.load_via_redis, 3)} ms (--streams {args.runs} --via xread)",
                "",
            ],
        ]
    print(
        table(
            ["target", "measured", "result"],
            target_rows,
            title="Summary (a benchmark reports; it does not assert)",
        )
    )


def print_gc_log(directory: Path, workers: int, window_ns: tuple[int, int]) -> None:
    """``--gc-log``: each app process's garbage collections, by generation, in all and in
    the measured window (each collection's start is stamped on CLOCK_MONOTONIC)."""
    rows = []
    start, end = window_ns
    for path in sorted(directory.glob("gc-*.txt")):
        by_generation: dict[int, list[tuple[float, bool]]] = {}
        for line in path.read_text().splitlines():
            gen, ms, _collected, at = line.split()
            by_generation.setdefault(int(gen), []).append((float(ms), start <= int(at) <= end))
        for generation, times in sorted(by_generation.items()):
            inside = [ms for ms, in_window in times if in_window]
            rows.append(
                [
                    f"pid {path.stem[3:]} gen {generation}",
                    str(len(times)),
                    fmt(sum(ms for ms, _ in times), 0),
                    fmt(max(ms for ms, _ in times), 1),
                    str(len(inside)),
                    fmt(sum(inside), 0),
                    fmt(max(inside), 1) if inside else "-",
                ]
            )
        path.unlink()
    print(
        table(
            [
                "process, generation",
                "collections",
                "total ms",
                "longest ms",
                "in window",
                "window ms",
                "window longest",
            ],
            rows,
            title=f"Garbage collections, {workers} worker(s) (wall clock)",
        )
    )


def write_shim(tmp: Path) -> Path:
    """The CLI the app starts: the fake, on this interpreter, without site-packages."""
    shim = tmp / "bin" / "claude"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(
        f'#!/bin/sh\nexec {shlex.quote(harness.PYTHON)} -I -S {shlex.quote(str(FAKE_CLI))} "$@"\n'
    )
    shim.chmod(0o755)
    return shim


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50, help="runs streaming at once (default 50)")
    parser.add_argument("--watchers", type=int, default=500, help="idle SSE clients (default 500)")
    parser.add_argument("--quiet-runs", type=int, default=10, help="silent live runs they watch (default 10)")
    parser.add_argument(
        "--rate", type=float, default=50.0, help="text deltas per second per run (default 50)"
    )
    parser.add_argument(
        "--seconds", type=float, default=25.0, help="each streaming run's length (default 25)"
    )
    parser.add_argument(
        "--window", type=float, default=15.0, help="the measured window, seconds (default 15)"
    )
    parser.add_argument(
        "--single-seconds", type=float, default=8.0, help="the single run's length (default 8)"
    )
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="seconds the CPU at rest is measured")
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds from the gate to the window")
    parser.add_argument(
        "--settle",
        type=float,
        default=None,
        help=(
            "seconds to settle before idle RSS (default: until the render process and the warm "
            "ask-user server have exited)"
        ),
    )
    parser.add_argument("--workers", default="1,2", help="worker counts to measure (default 1,2)")
    parser.add_argument("--profile", default="", help="py-spy each worker over the window into PREFIX-*.txt")
    parser.add_argument("--gc-log", action="store_true", help="time the app's garbage collections")
    parser.add_argument("--profile-native", action="store_true", help="with C frames (py-spy --native)")
    args = parser.parse_args()
    if args.profile and not Path(harness.PYTHON).with_name("py-spy").exists():
        parser.error(
            "--profile needs py-spy, which the project does not install: .venv/bin/pip install py-spy"
        )

    started = time.monotonic()
    print(f"Scale benchmark on {harness.machine()}; setting up a private stack …", flush=True)
    loads: list[Load] = []
    idle: Idle | None = None
    single: Single | None = None
    with harness.Stack.create(name="scale", ask_user=True) as stack:
        shim = write_shim(stack.tmp)
        caps = str(2 * (args.runs + args.quiet_runs) + 10)
        env = {"CLAUDE_CLI_PATH": str(shim), "RUNS_PER_USER": caps, "RUNS_GLOBAL": caps}
        if args.gc_log:
            env["PYTHONPATH"] = str(Path(__file__).resolve().parent / "gclog")
            env["PM_GC_LOG_DIR"] = str(stack.tmp)
        for workers in (int(w) for w in args.workers.split(",")):
            stack.start_app(env, workers=workers)

            def all_up(count: int = workers) -> bool:
                return len(guardians_per_worker(stack.app_pid)) == count

            harness.wait_until(all_up, timeout=60, what="the workers")
            try:
                first_idle, first_single, result = asyncio.run(
                    phase(
                        stack,
                        args,
                        workers,
                        settle_seconds(args) if idle is None else RENDER_IDLE_SECONDS + 2,
                    )
                )
            finally:
                stack.stop_app()
            if args.gc_log:
                print_gc_log(stack.tmp, workers, result.window_ns)
            idle = idle or first_idle
            single = single or first_single
            loads.append(result)
        print(
            "  the machine's floors: a bare relay and one through Redis, one stream and as many as the load …",
            flush=True,
        )
        floors = Floors.measure(args, stack.redis_url)
    assert idle is not None
    if single is None:
        single = Single(0, float("nan"), float("nan"), [])
    report(idle, single, loads, floors, args)
    print(f"\nFinished in {time.monotonic() - started:.0f} s on {harness.machine()}.")
    print("Every process the benchmark started has been stopped.")


if __name__ == "__main__":
    main()
