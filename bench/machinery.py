"""The core's performance machinery, each trick (A) against its plain alternative (B), today.

Run: ``.venv/bin/python bench/machinery.py`` (about a minute on 2 cores).

Everything runs in this process under uvloop, as in the app's worker, after loading the
app here: ``django.setup()`` on a private stack's SQLite file (``bench/harness.py``),
``promptmgr.asgi``, the runner (the engines, the SDK), and a login and four pages served
in-process through ASGI. A uvicorn worker serving the same pages is started too, for its
resident size. A and B repetitions alternate (AB, BA, …) so other load hits both alike.

1. Paced reads (``processes.READ_INTERVAL``; B sets it to 0): a child writes 5,000
   stream-json lines, one write each, either as fast as it can or at the rate the
   bundled CLI printed 5,000 scripted deltas here a moment before (measured once, at the
   start). ``ManagedProcess`` reads them; the consumer takes a line and those waiting
   behind it as one batch, parses each and appends the batch to Redis in one round trip,
   as the runner does. Reported: reads of stdout, batches, this process's CPU time from
   the first line to the last, and how long after the child wrote it the last line was
   handled.
2. The 1 MiB stdout pipe (``processes.PIPE_BYTES``; B: the 64 KiB Linux default): the
   child writes on a non-blocking pipe and sums the time it waits for room. 4 MB in
   200-byte lines at once, read paced, then with the event loop also held 20 ms in every
   100 ms; and 5,000 lines at the CLI's rate with the loop held 50 ms in every 250 ms.
3. Spawn: ``ManagedProcess.spawn`` (vfork, pidfd) against uvloop's
   ``asyncio.create_subprocess_exec`` (fork), each starting ``/bin/true`` with three
   pipes in a session of its own: the longest step of the event loop during the spawn,
   seen by a coroutine that yields on every iteration. At the size the app loads to here,
   then with ``--grown-mib`` more resident (fork copies the page tables of every page).
4. The Markdown render process (``markdown.render_markdown_async``; B renders in place): the
   longest gap between the ticks of a 1 ms ticker while a 35 KB dense reply renders; and
   a 300-character text (``INLINE_MAX_CHARS``) through the render process against in place.
5. ``gc.freeze()`` after start-up: one full ``gc.collect()``, frozen against not.
6. The bound of a bare Redis exchange (``core.redis.bare_exchange``, one per append round
   trip and shared read; B bounds the same send and read with ``asyncio.timeout``): this
   process's CPU time per ``PING`` exchange on a ``bare_connection`` to the stack's Redis.
7. Appends by the script's hash (``core.events``' EVALSHA; B sends the script's text with
   every append, EVAL, as before): one-delta appends of two runs per round trip, as a
   loaded worker pipelines them; this process's CPU time per append, and Redis's own
   (its ``INFO cpu``, so anything else on that Redis counts too; A/B alternate).
8. A stream's waits (``lifecycle.Interruptible``, made once per stream; B looks the drain
   up and builds a generator-based context manager for every wait, as before): CPU time
   per wait, with the shutdown check before it, as ``sse.event_stream`` does per batch.
9. A card's load (``core.prepared.PreparedGet``, as a decision loads its permission request
   with its run and project; B: the same compiled SQL and rows, turned into objects as
   Django does for every queryset, its converters and ``select_related`` populators found
   again for each load): CPU time per load.

The notes under the table give each stall's floor: the same ticker with nothing to do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.report import fmt, median, percentile, table  # noqa: E402


def stream_line(size: int) -> bytes:
    """A stream_event text-delta line of the CLI's stream-json, ``size`` bytes with its newline."""

    def line(text: str) -> bytes:
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        return json.dumps(
            {
                "type": "stream_event",
                "event": delta,
                "session_id": "3f0b1a52-9c1e-4a55-8a7e-2f5b0c6d7e81",
                "parent_tool_use_id": None,
                "uuid": "b6a1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d",
            }
        ).encode()

    return line("x" * max(0, size - 1 - len(line(""))))


# One write per line, as the CLI does; a line every ``gap`` seconds (busy-waiting), or at once.
BURST_CHILD = """
import os, sys, time
line = {line!r} + b"\\n"
gap = {gap!r}
due = time.monotonic()
for _ in range({count}):
    due += gap
    while gap and time.monotonic() < due:
        pass
    os.write(1, line)
sys.stderr.write(repr(time.monotonic()))
"""
# Like BURST_CHILD, on a non-blocking stdout, summing the time it waits for room in the pipe.
PIPE_CHILD = """
import fcntl, json, os, select, sys, time
line = {line!r} + b"\\n"
gap = {gap!r}
os.set_blocking(1, False)
blocked = 0.0
start = due = time.perf_counter()
for _ in range({count}):
    due += gap
    while gap and time.perf_counter() < due:
        pass
    while True:
        try:
            os.write(1, line)
            break
        except BlockingIOError:
            waited = time.perf_counter()
            select.select([], [1], [])
            blocked += time.perf_counter() - waited
wall = time.perf_counter() - start
size = fcntl.fcntl(1, fcntl.F_GETPIPE_SZ)
sys.stderr.write(json.dumps({{"blocked": blocked, "wall": wall, "pipe": size}}))
"""
BENCH_RUN_ID = 999_999_999  # the runner's appends go to this run's stream, under the stack's key prefix
LINE_TIMEOUT = 30.0  # seconds; a hung child fails the benchmark instead of stalling it


@dataclass
class Compared:
    """One figure, for the trick (A) and the plain alternative (B); lower is better."""

    what: str
    spread: str = "p90"  # or "max", for stalls
    digits: int = 2
    trick: list[float] = field(default_factory=list)
    plain: list[float] = field(default_factory=list)

    def row(self) -> list[str]:
        def spread(values: list[float]) -> float:
            return max(values) if self.spread == "max" else percentile(values, 90)

        trick, plain = median(self.trick), median(self.plain)
        ratio = "A is 0" if trick == 0 and plain > 0 else "n/a" if not trick else f"{plain / trick:.2f}x"
        return [
            self.what,
            str(len(self.trick)),
            self.spread,
            fmt(median(self.trick), self.digits),
            fmt(spread(self.trick), self.digits),
            fmt(median(self.plain), self.digits),
            fmt(spread(self.plain), self.digits),
            ratio,
        ]


HEADERS = ["what", "n", "spread", "trick p50", "trick spread", "plain p50", "plain spread", "plain/trick"]


def spread_text(values: list[float]) -> str:
    return f"p50 {fmt(median(values))} ms, max {fmt(max(values))} ms over {len(values)}"


def alternate(reps: int) -> Iterator[tuple[int, bool]]:
    """(repetition, trick first?): AB, BA, AB, …"""
    for rep in range(reps):
        yield rep, rep % 2 == 0


@contextlib.contextmanager
def patched(module: Any, name: str, value: object) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


async def spawn_python(code: str) -> Any:
    from promptmgr.processes import ManagedProcess

    return await ManagedProcess.spawn(
        [sys.executable, "-I", "-c", code], cwd=Path.cwd(), env=dict(os.environ), stdin_data=b""
    )


@dataclass
class Consumed:
    lines: int = 0
    batches: int = 0
    cpu_s: float = 0.0  # this process, from the first line to the last
    wall_s: float = 0.0
    last_line_at: float = 0.0  # time.monotonic(), CLOCK_MONOTONIC as in the child


async def consume(proc: Any, flush: Callable[[list[bytes]], Awaitable[None]] | None = None) -> Consumed:
    """Take every line as the runner does: a line and those already waiting behind it are
    one batch, parsed line by line and handed to ``flush`` once."""
    from promptmgr.processes import LineTimeout

    done = Consumed()
    cpu0 = wall0 = 0.0
    while (item := await proc.next_line(LINE_TIMEOUT)) is not None:
        if isinstance(item, LineTimeout):
            raise RuntimeError(f"no line for {LINE_TIMEOUT} s: {proc.stderr_tail()}")
        if not done.lines:
            cpu0, wall0 = time.process_time(), time.perf_counter()
        batch = [item.data]
        while not isinstance(ready := proc.ready_line(), LineTimeout) and ready is not None:
            batch.append(ready.data)
        done.last_line_at = time.monotonic()
        done.lines, done.batches = done.lines + len(batch), done.batches + 1
        if flush is not None:
            await flush(batch)
        if ready is None:
            break
    done.cpu_s, done.wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    return done


async def redis_flush(batch: list[bytes]) -> None:
    """The runner's per-batch work: parse each line, append the batch in one round trip."""
    from core import events

    deltas = [json.loads(line)["event"]["delta"]["text"] for line in batch]
    await events.append_events(BENCH_RUN_ID, [("text_delta", {"index": 0, "text": "".join(deltas)})])


def cli_launch(stack: harness.Stack) -> tuple[list[str], dict[str, str], Path]:
    """The runner's argv, environment and working directory for the stack's project."""
    from promptmgr.cli import build_command, child_env, find_claude_cli
    from promptmgr.workspaces import workspace_path

    project = stack.project()
    argv = build_command(cli=find_claude_cli(), project=project)
    return argv, child_env(ask_user_config=None, ask_user_timeout=None), workspace_path(project)


async def cli_line_rate(stack: harness.Stack, count: int) -> tuple[float, int]:
    """(stream_event lines a second, their mean size) of the real CLI printing ``count``
    scripted text deltas at full speed, read unpaced."""
    from asgiref.sync import sync_to_async

    from bench.stream_passes import tokens_script
    from promptmgr import processes

    argv, env, cwd = await sync_to_async(cli_launch)(stack)
    arrivals: list[float] = []
    sizes: list[int] = []
    with patched(processes, "READ_INTERVAL", 0.0):
        proc = await processes.ManagedProcess.spawn(
            argv, cwd=cwd, env=env, stdin_data=tokens_script(count).encode()
        )
        while (item := await proc.next_line(LINE_TIMEOUT)) is not None:
            if isinstance(item, processes.LineTimeout):
                raise RuntimeError(f"the CLI printed nothing for {LINE_TIMEOUT} s: {proc.stderr_tail()}")
            if b'"text_delta"' in item.data:
                arrivals.append(time.perf_counter())
                sizes.append(len(item.data) + 1)
        code = await proc.stop()
    if code != 0 or len(arrivals) < count // 2:
        raise RuntimeError(f"the CLI exited {code} after {len(arrivals)} deltas: {proc.stderr_tail()}")
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]), sum(sizes) // len(sizes)


async def paced_reads(reps: int, count: int, cli_rate: float, line_size: int) -> list[Compared]:
    from promptmgr import processes

    figures: list[Compared] = []
    for scenario, gap in (
        ("as fast as it can", 0.0),
        (f"at the CLI's {cli_rate:,.0f} lines/s", 1 / cli_rate),
    ):
        reads = Compared(f"1 paced reads, {count:,} lines {scenario}: reads", digits=0)
        batches = Compared("  batches (one Redis append each)", digits=0)
        cpu = Compared("  server CPU, first->last line (ms)")
        delay = Compared("  last line: written -> handled (ms)")
        code = BURST_CHILD.format(line=stream_line(line_size), gap=gap, count=count)
        for _rep, trick_first in alternate(reps):
            for trick in (trick_first, not trick_first):
                with patched(processes, "READ_INTERVAL", processes.READ_INTERVAL if trick else 0.0):
                    proc = await spawn_python(code)
                    done = await consume(proc, redis_flush)
                    await proc.stop()
                if done.lines != count:
                    raise RuntimeError(f"read {done.lines} lines of {count}")
                written = float(proc.stderr_tail())
                for figure, value in (
                    (reads, proc.stdout_reads),
                    (batches, done.batches),
                    (cpu, done.cpu_s * 1e3),
                    (delay, (done.last_line_at - written) * 1e3),
                ):
                    (figure.trick if trick else figure.plain).append(value)
        figures += [reads, batches, cpu, delay]
    return figures


@contextlib.asynccontextmanager
async def busy_loop(busy: float, every: float) -> AsyncIterator[None]:
    """Hold the event loop ``busy`` seconds in every ``every`` seconds."""

    async def hog() -> None:
        while True:
            await asyncio.sleep(every - busy)
            time.sleep(busy)

    task = asyncio.create_task(hog())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wide_pipe(reps: int, cli_rate: float, line_size: int) -> list[Compared]:
    from promptmgr import processes

    fast = PIPE_CHILD.format(line=b"x" * 199, gap=0.0, count=4_000_000 // 200)
    at_cli_rate = PIPE_CHILD.format(line=stream_line(line_size), gap=1 / cli_rate, count=5000)
    scenarios = [
        ("4 MB at once, paced reader", fast, 0.0, 0.1),
        ("4 MB at once, loop also busy 20 ms/100 ms", fast, 0.02, 0.1),
        ("the CLI's rate, loop busy 50 ms/250 ms", at_cli_rate, 0.05, 0.25),
    ]
    figures: list[Compared] = []
    for scenario, code, busy, every in scenarios:
        blocked = Compared(f"2 wide pipe, {scenario}: child blocked (ms)")
        wall = Compared("  child's wall time (ms)")
        for _rep, trick_first in alternate(reps):
            for trick in (trick_first, not trick_first):
                size = processes.PIPE_BYTES if trick else 64 * 1024
                with patched(processes, "PIPE_BYTES", size):
                    proc = await spawn_python(code)
                    async with busy_loop(busy, every) if busy else contextlib.nullcontext():
                        await consume(proc)
                    await proc.stop()
                child = json.loads(proc.stderr_tail())
                if child["pipe"] != size:
                    raise RuntimeError(f"the child's pipe holds {child['pipe']} bytes, not {size}")
                (blocked.trick if trick else blocked.plain).append(child["blocked"] * 1e3)
                (wall.trick if trick else wall.plain).append(child["wall"] * 1e3)
        figures += [blocked, wall]
    return figures


async def longest_stall(work: Callable[[], Awaitable[Any]], *, tick: float) -> tuple[float, Any]:
    """(the longest gap between a ticker's ticks, in seconds, and the result) while ``work()`` runs.

    ``tick`` 0 yields on every loop iteration: the gap is then the longest step the loop
    took; otherwise the ticker sleeps ``tick`` seconds between ticks."""
    running = True
    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while running:
            await asyncio.sleep(tick)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(tick * 3)  # the ticker is ticking
    longest = 0.0
    result = await work()  # started only now, after the reset
    running = False
    await task
    return longest, result


async def timed(work: Awaitable[Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await work
    return time.perf_counter() - start, result


async def spawns(reps: int, notes: list[str]) -> list[Compared]:
    import subprocess

    from promptmgr.processes import ManagedProcess

    def vfork() -> Awaitable[tuple[float, Any]]:
        return timed(ManagedProcess.spawn(["/bin/true"], cwd=Path("/"), env=dict(os.environ), stdin_data=b""))

    def uvloop_fork() -> Awaitable[tuple[float, Any]]:
        pipe = subprocess.PIPE
        exec_ = asyncio.create_subprocess_exec
        return timed(exec_("/bin/true", stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=True))

    resident = f"{rss_mib():.0f} MiB"
    stall = Compared(f"3 spawn /bin/true at {resident} resident: loop blocked (ms)")
    wall = Compared("  spawn call, wall (ms)")
    floor: list[float] = []
    for _rep, trick_first in alternate(reps):
        for trick in (trick_first, not trick_first):
            longest, (wall_s, proc) = await longest_stall(vfork if trick else uvloop_fork, tick=0)
            await (proc.stop() if trick else proc.communicate())
            (stall.trick if trick else stall.plain).append(longest * 1e3)
            (wall.trick if trick else wall.plain).append(wall_s * 1e3)
        floor.append((await longest_stall(lambda: asyncio.sleep(0.001), tick=0))[0] * 1e3)
    notes.append(
        f"3 ({resident}): the loop's longest step over 1 ms with nothing to do: {spread_text(floor)}"
    )
    return [stall, wall]


def dense_markdown(size: int) -> str:
    parts: list[str] = []
    step = 0
    while sum(map(len, parts)) < size:
        parts.append(
            f"## Step {step}\n\n- **bold** and *em* and `code` and a [link](https://example.com/{step})\n"
            f"- ~~old~~ item {step} with <b>raw</b> HTML\n\n```py\nprint({step})\n```\n\n"
            f"| a | b |\n|---|---|\n| {step} | x |\n\n> quoted {step}\n\n"
        )
        step += 1
    return "".join(parts)[:size]


async def markdown_pool(reps: int, short_reps: int, notes: list[str]) -> list[Compared]:
    from promptmgr import markdown

    long_text, short_text = dense_markdown(35 * 1024), dense_markdown(markdown.INLINE_MAX_CHARS)
    await markdown.render_markdown_async(long_text)  # the render process is up and warm

    async def in_place(text: str) -> str:
        return markdown.render_markdown(text)

    async def timed_render(render: Callable[[str], Awaitable[str]]) -> tuple[float, str]:
        return await timed(render(long_text))

    async def pooled(text: str) -> str:
        return await markdown.renderer().render(text)

    stall = Compared("4 Markdown 35 KB: longest loop stall (ms)", spread="max")
    render = Compared("  35 KB render, wall (ms)")
    floor: list[float] = []
    for _rep, trick_first in alternate(reps):
        for trick in (trick_first, not trick_first):
            render_one = markdown.render_markdown_async if trick else in_place
            longest, (wall_s, _html) = await longest_stall(
                functools.partial(timed_render, render_one), tick=0.001
            )
            (stall.trick if trick else stall.plain).append(longest * 1e3)
            (render.trick if trick else render.plain).append(wall_s * 1e3)
        floor.append((await longest_stall(lambda: asyncio.sleep(0.1), tick=0.001))[0] * 1e3)
    notes.append(f"4: the 1 ms ticker's longest gap over 100 ms with nothing to do: {spread_text(floor)}")
    short = Compared(f"  {len(short_text)} chars: render process round trip vs in place (ms)", digits=3)
    for _rep, trick_first in alternate(short_reps):
        for trick in (trick_first, not trick_first):
            start = time.perf_counter()
            await (pooled if trick else in_place)(short_text)
            (short.trick if trick else short.plain).append((time.perf_counter() - start) * 1e3)
    markdown.stop_renderer()
    return [stall, render, short]


def gc_freeze(reps: int) -> list[Compared]:
    collect = Compared("5 full gc.collect() (ms)", digits=3)
    gc.collect()
    for _rep, trick_first in alternate(reps):
        for trick in (trick_first, not trick_first):
            if trick:
                gc.collect()
                gc.freeze()
            start = time.perf_counter()
            gc.collect()
            elapsed = (time.perf_counter() - start) * 1e3
            gc.unfreeze()
            (collect.trick if trick else collect.plain).append(elapsed)
    return [collect]


async def exchange_bound(reps: int, exchanges: int) -> list[Compared]:
    from core import redis as core_redis

    async def under_asyncio_timeout(
        connection: Any, commands: list[list[str]], *, timeout: float
    ) -> list[Any]:
        packed = b"".join(core_redis.pack(*command) for command in commands)
        async with asyncio.timeout(timeout):
            await connection.send_packed_command(packed, check_health=False)
            return [await connection.read_response() for _command in commands]

    cpu = Compared("6 bare Redis exchange, CPU per PING (µs)", digits=1)
    connection = core_redis.bare_connection("machinery")
    ping = [["PING"]]
    try:
        await core_redis.bare_exchange(connection, ping, timeout=LINE_TIMEOUT)  # connected
        for _rep, trick_first in alternate(reps):
            for trick in (trick_first, not trick_first):
                exchange = core_redis.bare_exchange if trick else under_asyncio_timeout
                start = time.process_time()
                for _ in range(exchanges):
                    await exchange(connection, ping, timeout=LINE_TIMEOUT)
                elapsed = (time.process_time() - start) / exchanges * 1e6
                (cpu.trick if trick else cpu.plain).append(elapsed)
    finally:
        await connection.disconnect()
    return [cpu]


async def appends_by_hash(reps: int, appends: int) -> list[Compared]:
    import redis
    from django.conf import settings

    from core import events
    from core import redis as core_redis

    async def by_text(batch: list[tuple[list[str], list[str]]]) -> list[Any]:
        calls = [events._append_call(keys, args, by_text=True) for keys, args in batch]
        return await core_redis.bare_exchange(
            core_redis.append_connection(), calls, timeout=core_redis.SOCKET_TIMEOUT
        )

    server = redis.Redis.from_url(settings.REDIS_URL)

    def redis_cpu() -> float:
        info = server.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    here = Compared("7 append by hash, CPU here per delta (µs)", digits=1)
    there = Compared("7 append by hash, Redis's CPU per delta (µs)", digits=1)
    args = events.append_args([("delta", {"type": "text_delta", "text": "x" * 24})])
    batch = [
        ([events.events_key(run), events.seq_key(run)], args) for run in (BENCH_RUN_ID, BENCH_RUN_ID - 1)
    ]
    await events._append_exchange(batch)  # connected, the script loaded
    for _rep, trick_first in alternate(reps):
        for trick in (trick_first, not trick_first):
            exchange = events._append_exchange if trick else by_text
            start, start_redis = time.process_time(), redis_cpu()
            for _ in range(appends // len(batch)):
                await exchange(batch)
            elapsed, elapsed_redis = time.process_time() - start, redis_cpu() - start_redis
            (here.trick if trick else here.plain).append(elapsed / appends * 1e6)
            (there.trick if trick else there.plain).append(elapsed_redis / appends * 1e6)
        for run in (BENCH_RUN_ID, BENCH_RUN_ID - 1):  # the streams stay small
            server.delete(events.events_key(run))
    server.close()
    return [here, there]


async def stream_waits(reps: int, waits: int) -> list[Compared]:
    from promptmgr import lifecycle

    @contextlib.contextmanager
    def per_wait() -> Iterator[None]:
        drain = lifecycle._drain()
        task = asyncio.current_task()
        assert task is not None
        drain.waiting.add(task)
        try:
            yield
        finally:
            drain.waiting.discard(task)

    cpu = Compared("8 a stream's wait, CPU per wait (µs)", digits=2)
    for _rep, trick_first in alternate(reps):
        for trick in (trick_first, not trick_first):
            start = time.process_time()
            if trick:
                interruptible = lifecycle.Interruptible()
                for _ in range(waits):
                    if interruptible.shutting_down:
                        break
                    with interruptible:
                        pass
            else:
                for _ in range(waits):
                    if lifecycle.shutting_down():
                        break
                    with per_wait():
                        pass
            (cpu.trick if trick else cpu.plain).append((time.process_time() - start) / waits * 1e6)
    return [cpu]


def card_loads(reps: int, loads: int, project_id: int) -> list[Compared]:
    """Item 9: a permission request loaded by ``askuser.models.request_for_decision``, against
    the same query's rows built as Django builds them for every queryset."""
    from django.db import router
    from django.db.models.query import get_related_populators

    from askuser.models import PermissionRequest, request_for_decision
    from promptmgr.models import Conversation, Project, Run, RunStatus

    project = Project.objects.get(pk=project_id)
    conversation = Conversation.objects.create(project=project, user=project.owner)
    run = Run.objects.create(
        conversation=conversation, user=project.owner, prompt="bench", status=RunStatus.RUNNING
    )
    request = PermissionRequest.objects.create(
        run=run, tool_name="Bash", tool_input={"command": "true"}, expires_at=run.created_at
    )

    def per_queryset(request_id: Any) -> Any:
        compiled, rows = request_for_decision._run(request_id, limit=2)
        compiler, alias = compiled.compiler, router.db_for_read(PermissionRequest)
        select, klass_info = compiler.select, compiler.klass_info
        assert klass_info is not None
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        init_list = [column[0].target.attname for column in select[start:end]]
        values = next(iter(compiler.results_iter(results=[rows[:1]])))
        obj = klass_info["model"].from_db(alias, init_list, values[start:end])
        for populator in get_related_populators(klass_info, select, alias):  # type: ignore[call-arg]
            populator.populate(values, obj)
        return obj

    cpu = Compared("9 a card's load with its run and project, CPU per load (µs)", digits=1)
    for _rep, trick_first in alternate(reps):
        for trick in (trick_first, not trick_first):
            load = request_for_decision.get if trick else per_queryset
            assert load(request.request_id).run.conversation.project.pk == project_id
            start = time.process_time()
            for _ in range(loads):
                load(request.request_id)
            (cpu.trick if trick else cpu.plain).append((time.process_time() - start) / loads * 1e6)
    return [cpu]


def rss_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


async def serve_pages(client: Any, project_id: int) -> None:
    for path in ("/projects/", f"/projects/{project_id}/", f"/api/projects/{project_id}"):
        response = await client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: HTTP {response.status_code}")
    response = await client.get(f"/api/projects/{project_id}/conversations")
    if response.status_code != 200:
        raise RuntimeError(f"GET conversations: HTTP {response.status_code}")


async def load_the_app(stack: harness.Stack) -> float:
    """Import and exercise the app here; returns a real worker's resident MiB after the same pages."""
    import httpx

    from bench import app_client

    stack.start_app()
    client = await app_client.login(stack.app_url)
    await serve_pages(client, stack.project_id)
    await client.aclose()
    worker_mib = rss_mib(stack.app_pid)

    from promptmgr import asgi, runner  # noqa: F401  (what a run loads: the engines, the SDK)

    app: Any = asgi.application  # httpx's ASGI types are narrower than the app's own
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as local:
        await local.get("/accounts/login/")
        response = await local.post(
            "/accounts/login/",
            data={
                "username": harness.USERNAME,
                "password": harness.PASSWORD,
                "csrfmiddlewaretoken": local.cookies.get("csrftoken"),
            },
            headers={"Referer": "http://127.0.0.1/accounts/login/"},
        )
        if response.status_code != 302:
            raise RuntimeError(f"in-process login: HTTP {response.status_code}")
        await serve_pages(local, stack.project_id)
    return worker_mib


def load_note() -> str:
    one, five, _ = os.getloadavg()
    cpus = os.cpu_count() or 1
    if one > cpus * 0.75 or five > cpus * 0.75:
        return (
            f"TAKEN UNDER LOAD: load average {one:.2f} (1 min) / {five:.2f} (5 min) on {cpus} CPUs; "
            "A/B alternate so both see it, but the spreads are wider than on an idle machine."
        )
    return f"Machine nearly idle: load average {one:.2f} (1 min) / {five:.2f} (5 min) on {cpus} CPUs."


async def measure(stack: harness.Stack, args: argparse.Namespace, notes: list[str]) -> list[Compared]:
    from asgiref.sync import sync_to_async

    from core.redis import load_instance_uid

    worker_mib = await load_the_app(stack)
    gc.collect()
    print(
        f"  app loaded here: {rss_mib():.0f} MiB resident, {len(gc.get_objects()):,} tracked objects; "
        f"a uvicorn worker after the same pages: {worker_mib:.0f} MiB",
        flush=True,
    )
    freeze = gc_freeze(args.gc_reps)
    print("  5 gc.freeze done", flush=True)
    render = await markdown_pool(args.render_reps, args.short_reps, notes)
    print("  4 Markdown render process done", flush=True)
    await sync_to_async(load_instance_uid)()
    exchange = await exchange_bound(args.exchange_reps, args.exchanges)
    print("  6 exchange bound done", flush=True)
    exchange += await appends_by_hash(args.exchange_reps, args.exchanges)
    print("  7 appends by hash done", flush=True)
    exchange += await stream_waits(args.exchange_reps, args.exchanges * 20)
    print("  8 stream waits done", flush=True)
    exchange += await sync_to_async(card_loads)(args.exchange_reps, args.exchanges, stack.project_id)
    print("  9 card loads done", flush=True)
    rate, line_size = await cli_line_rate(stack, args.lines)
    notes.append(
        f"1: the bundled CLI printed {args.lines:,} scripted deltas at {rate:,.0f} lines/s, {line_size} B each"
    )
    reads = await paced_reads(args.read_reps, args.lines, rate, line_size)
    print("  1 paced reads done", flush=True)
    pipe = await wide_pipe(args.pipe_reps, rate, line_size)
    print("  2 wide pipe done", flush=True)
    # Fork copies the page tables of every resident page: spawn as loaded, then grown.
    spawn = await spawns(args.spawn_reps, notes)
    ballast = b"\x01" * (args.grown_mib * 1024 * 1024)  # written, so every page is resident
    spawn += await spawns(args.spawn_reps, notes)
    del ballast
    print("  3 spawn done", flush=True)
    return [*reads, *pipe, *spawn, *render, *freeze, *exchange]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=5000, help="lines in the paced-reads burst")
    parser.add_argument("--read-reps", type=int, default=12)
    parser.add_argument("--pipe-reps", type=int, default=10)
    parser.add_argument("--spawn-reps", type=int, default=50)
    parser.add_argument("--render-reps", type=int, default=12)
    parser.add_argument("--short-reps", type=int, default=200)
    parser.add_argument("--gc-reps", type=int, default=10)
    parser.add_argument("--exchange-reps", type=int, default=10)
    parser.add_argument("--exchanges", type=int, default=2000, help="PING exchanges per repetition")
    parser.add_argument("--grown-mib", type=int, default=100, help="ballast for the second spawn row")
    args = parser.parse_args()

    import uvloop

    started = time.monotonic()
    print(f"Machinery benchmark on {harness.machine()}; setting up a private stack …", flush=True)
    before = load_note()
    notes: list[str] = []
    with (
        harness.Stack.create(name="machinery", ask_user=False) as stack,
        asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
    ):
        figures = runner.run(measure(stack, args, notes))
    print()
    print(
        table(
            HEADERS,
            [f.row() for f in figures],
            title="Each trick (A) against the plain alternative (B); lower is better",
        )
    )
    print("Notes (the floors were taken under the same load):")
    for note in sorted(notes):
        print(f"  {note}")
    print()
    print(f"Before: {before}")
    print(f"After:  {load_note()}")
    print(
        f"Finished in {time.monotonic() - started:.0f} s. Every process the benchmark started has been stopped."
    )


if __name__ == "__main__":
    main()
