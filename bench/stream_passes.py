"""One scripted reply read by one consumer: the CLI's stdout directly, or the app's SSE stream.

Also the ``/bin/sh`` shim the app and the baseline both start as the CLI, which switches
``cli_tee.py`` on for the runs that measure per-line latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import app_client, harness
from promptmgr.processes import lower_priority

TEE = Path(__file__).resolve().parent / "cli_tee.py"
PASS_TIMEOUT = 90  # seconds; keeps the whole benchmark bounded if something hangs
TOKEN_CHARS = 7  # "<NNNNN>": one token per text delta the CLI prints


@dataclass
class Direct:
    """How the runner would start the CLI: argv, env, working directory and CPU priority."""

    command: list[str]
    env: dict[str, str]
    cwd: Path
    nice: int


@dataclass
class Pass:
    """One reply read by one consumer."""

    start_ns: int
    end_ns: int = 0
    nbytes: int = 0
    cpu_busy: float = float("nan")  # share of the machine's CPU time in use during the pass
    cpu_stolen: float = float("nan")  # share of it the hypervisor gave to other machines
    app_on_cpu_s: float = float("nan")  # the app's worker: time on a CPU during the pass
    app_runq_s: float = float("nan")  # and time ready to run but waiting for a CPU
    deltas: list[tuple[int, bytes]] = field(default_factory=list)  # (arrival ns, token or b"")

    @property
    def wall_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def window_s(self) -> float:
        return (self.deltas[-1][0] - self.deltas[0][0]) / 1e9 if len(self.deltas) > 1 else float("nan")

    @property
    def head_s(self) -> float:
        """Start to the first text delta at the consumer: Claude's first word."""
        return (self.deltas[0][0] - self.start_ns) / 1e9 if self.deltas else float("nan")

    @property
    def tail_s(self) -> float:
        return (self.end_ns - self.deltas[-1][0]) / 1e9 if self.deltas else float("nan")


def tokens_script(count: int, pace_ms: float = 0) -> str:
    text = "".join(f"<{i:05d}>" for i in range(count))
    return app_client.script_prompt([{"text": text, "chunk_chars": TOKEN_CHARS, "pace_ms": pace_ms}])


def repeat_script(count: int) -> str:
    return app_client.script_prompt(
        [{"text": "abcdefg", "repeat": count, "chunk_chars": TOKEN_CHARS, "pace_ms": 0}]
    )


def write_shim(tmp: Path, real_cli: str) -> tuple[Path, Path]:
    """The CLI seen by the app and the direct baseline; ``flag`` switches the tee on per run."""
    flag = tmp / "tee-target"
    flag.write_text("")
    shim = tmp / "bin" / "claude"
    shim.parent.mkdir()
    q = shlex.quote
    shim.write_text(
        "#!/bin/sh\n"
        f"if [ -s {q(str(flag))} ]; then\n"
        f'  exec {q(harness.PYTHON)} {q(str(TEE))} "$(cat {q(str(flag))})" {q(real_cli)} "$@"\n'
        "fi\n"
        f'exec {q(real_cli)} "$@"\n'
    )
    shim.chmod(0o755)
    return shim, flag


def read_stamps(path: Path) -> dict[bytes, int]:
    stamps: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            token, ns = line.split()
            stamps[token] = int(ns)
    return stamps


def latencies_ms(run: Pass, stamps: dict[bytes, int]) -> list[float]:
    return [(ts - stamps[token]) / 1e6 for ts, token in run.deltas if token in stamps]


def cpu_jiffies() -> tuple[int, int, int]:
    """(busy, total, stolen) CPU time of the whole machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    steal = fields[7] if len(fields) > 7 else 0  # a virtual CPU's time the host ran others on
    return sum(fields) - idle, sum(fields), steal


def sched_ns(pid: int) -> tuple[int, int]:
    """(on a CPU, ready but waiting for a CPU) in ns, summed over the threads of ``pid``."""
    on_cpu = waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that just ended
            run, wait, _slices = (int(v) for v in (task / "schedstat").read_text().split())
            on_cpu += run
            waiting += wait
    return on_cpu, waiting


async def direct_pass(direct: Direct, prompt: str) -> Pass:
    before = cpu_jiffies()
    async with asyncio.timeout(PASS_TIMEOUT):
        run = await _direct_pass(direct, prompt)
    return _with_cpu(run, before)


async def app_pass(client: httpx.AsyncClient, project_id: int, prompt: str, *, app_pid: int) -> Pass:
    """``app_pid``: the app's worker process, whose scheduling the pass reports."""
    before, sched_before = cpu_jiffies(), sched_ns(app_pid)
    async with asyncio.timeout(PASS_TIMEOUT):
        run = await _app_pass(client, project_id, prompt)
    on_cpu, waiting = sched_ns(app_pid)
    run.app_on_cpu_s = (on_cpu - sched_before[0]) / 1e9
    run.app_runq_s = (waiting - sched_before[1]) / 1e9
    return _with_cpu(run, before)


def _with_cpu(run: Pass, before: tuple[int, int, int]) -> Pass:
    busy, total, stolen = cpu_jiffies()
    if total > before[1]:
        run.cpu_busy = (busy - before[0]) / (total - before[1])
        run.cpu_stolen = (stolen - before[2]) / (total - before[1])
    return run


async def _direct_pass(direct: Direct, prompt: str) -> Pass:
    run = Pass(start_ns=harness.now_ns())
    proc = await asyncio.create_subprocess_exec(
        *direct.command,
        cwd=direct.cwd,
        env=direct.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lower_priority(proc.pid, direct.nice)
    received: list[tuple[int, bytes]] = []
    try:
        stderr = asyncio.create_task(proc.stderr.read())
        proc.stdin.write(prompt.encode())
        await proc.stdin.drain()
        proc.stdin.close()
        while chunk := await proc.stdout.read(256 * 1024):
            received.append((harness.now_ns(), chunk))
        code = await proc.wait()
        run.end_ns = harness.now_ns()
        errors = (await stderr).decode(errors="replace")
    finally:
        # The CLI runs in its own session: on any failure stop its whole group, and reap it.
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    if code != 0:
        raise RuntimeError(f"the CLI exited with {code}: {errors[-2000:]}")
    # Parsing happens after the clock stopped: the baseline reader does nothing but read.
    partial = b""
    for ts, chunk in received:
        run.nbytes += len(chunk)
        *lines, partial = (partial + chunk).split(b"\n")
        for line in lines:
            if b'"text_delta"' in line:
                start = line.find(b'"text":"') + 8
                text = line[start : line.find(b'"', start)]
                run.deltas.append((ts, text[1:-1] if text.startswith(b"<") else b""))
    return run


async def _app_pass(client: httpx.AsyncClient, project_id: int, prompt: str) -> Pass:
    run = Pass(start_ns=harness.now_ns())
    url = await app_client.start_run(client, project_id, prompt)
    status = "?"
    for event in await app_client.sse_record(client, url):
        run.nbytes += event.size
        if event.event == "text_delta":
            # The app merges the deltas of a burst into one event: each CLI delta (one
            # TOKEN_CHARS piece) counts, arriving when the event that carries it arrived.
            text = str(event.data["text"])
            for start in range(0, len(text), TOKEN_CHARS):
                piece = text[start : start + TOKEN_CHARS]
                run.deltas.append((event.ts_ns, piece[1:-1].encode() if piece.startswith("<") else b""))
        elif event.event == "done":
            run.end_ns = event.ts_ns
            status = str(event.data.get("status"))
            break
    if status != "completed":
        raise RuntimeError(f"the run did not complete: {await app_client.run_error(client, url)}")
    return run


def check(run: Pass, expected: int, what: str) -> None:
    if len(run.deltas) != expected:
        raise RuntimeError(f"{what}: {len(run.deltas)} text deltas, expected {expected}")
