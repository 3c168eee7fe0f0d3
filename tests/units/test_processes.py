"""The subprocess module: long lines, stderr, and reaping the whole process group."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from promptmgr.processes import TIMEOUT, Line, ManagedProcess, group_members


async def spawn(code: str, tmp_path: Path, **kwargs: int) -> ManagedProcess:
    return await ManagedProcess.spawn(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), stdin_data=b"", **kwargs
    )


async def lines_of(proc: ManagedProcess) -> list[Line]:
    out: list[Line] = []
    while (item := await proc.next_line(5)) is not None:
        assert item is not TIMEOUT
        assert isinstance(item, Line)
        out.append(item)
    return out


async def test_lines_of_any_length_arrive_whole(tmp_path: Path) -> None:
    proc = await spawn(
        "import sys; sys.stdout.write('a' * 5_000_000 + '\\nshort\\nlast-no-newline')", tmp_path
    )
    lines = await lines_of(proc)
    assert [len(line.data) for line in lines] == [5_000_000, 5, 15]
    assert not any(line.truncated for line in lines)
    assert await proc.stop() == 0


async def test_a_line_over_the_limit_is_cut_and_flagged_not_a_crash(tmp_path: Path) -> None:
    proc = await spawn("print('b' * 3000); print('after')", tmp_path, max_line_bytes=1000)
    lines = await lines_of(proc)
    assert lines[0] == Line(b"b" * 1000, truncated=True)
    assert lines[1] == Line(b"after")
    await proc.stop()


async def test_a_read_timeout_returns_the_timeout_marker(tmp_path: Path) -> None:
    proc = await spawn("import time; time.sleep(3)", tmp_path)
    assert await proc.next_line(0.1) is TIMEOUT
    await proc.stop(grace=1)


async def test_stderr_is_kept_as_a_tail(tmp_path: Path) -> None:
    proc = await spawn("import sys; sys.stderr.write('x' * 100000 + 'THE END')", tmp_path)
    await lines_of(proc)
    await proc.stop()
    assert proc.stderr_tail(20).endswith("THE END")


async def test_stop_kills_the_whole_group_including_grandchildren(tmp_path: Path) -> None:
    # The child starts a grandchild that ignores SIGTERM, like a stubborn MCP server.
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = await spawn(code, tmp_path)
    assert await proc.next_line(10) == Line(b"started")
    assert len(group_members(proc.pgid)) == 2
    code_ = await proc.stop(grace=0.5)
    assert code_ < 0
    assert group_members(proc.pgid) == []
