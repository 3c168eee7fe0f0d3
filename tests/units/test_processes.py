"""The subprocess module: long lines, stderr, paced reading of bursts, its pipes, and reaping the tree."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from promptmgr import processes
from promptmgr.processes import (
    MAX_NICE,
    PIPE_BYTES,
    TIMEOUT,
    Line,
    ManagedProcess,
    ProcessTree,
    group_members,
    live_processes,
)
from tests.helpers import wait_until

pytestmark = pytest.mark.unit


async def spawn(code: str, tmp_path: Path, **kwargs: int) -> ManagedProcess:
    return await ManagedProcess.spawn(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), stdin_data=b"", **kwargs
    )


def open_fds() -> set[tuple[str, str]]:
    """This process's open descriptors with what they point at (pipes have unique names)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor is gone
            found.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
    return found


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


async def test_a_short_wait_after_a_long_one_times_out_on_its_own_deadline(tmp_path: Path) -> None:
    # The reader keeps one timer armed while lines come: a long wait that got its line
    # must not leave a shorter wait after it waiting for the long one's deadline.
    proc = await spawn("import time; print('first', flush=True); time.sleep(5); print('late')", tmp_path)
    assert await proc.next_line(30) == Line(b"first")
    started = time.monotonic()
    assert await proc.next_line(0.2) is TIMEOUT
    assert time.monotonic() - started < 2
    await proc.stop(grace=1)


async def test_a_long_wait_after_a_short_one_is_not_cut_short_by_its_timer(tmp_path: Path) -> None:
    # The short wait's timer is still armed when the long wait starts: it must re-arm
    # for the long one's deadline, not end it early.
    code = "import time; print('first', flush=True); time.sleep(0.6); print('second', flush=True)"
    proc = await spawn(code, tmp_path)
    assert await proc.next_line(0.3) == Line(b"first")
    assert await proc.next_line(10) == Line(b"second")
    await proc.stop()


async def test_a_child_that_outruns_its_reader_waits_and_every_line_arrives_in_order(tmp_path: Path) -> None:
    # Five lines may wait unread; the child prints 2,000, one write each, as fast as it
    # can, and the reader takes them slowly: reading stops and resumes, nothing is lost.
    code = "import os\nfor i in range(2000):\n    os.write(1, b'line %d\\n' % i)\n"
    proc = await spawn(code, tmp_path, queue_size=5)
    taken: list[bytes] = []
    while (item := await proc.next_line(10)) is not None:
        assert isinstance(item, Line)
        taken.append(item.data)
        if len(taken) % 100 == 0:
            await asyncio.sleep(0.01)  # a slow reader: the child meets a full pipe
    assert taken == [b"line %d" % i for i in range(2000)]
    assert await proc.stop() == 0


class _FakeReadTransport(asyncio.ReadTransport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return False


async def test_reading_stops_while_max_lines_wait_and_resumes_once_one_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "READ_INTERVAL", 0.0)  # no pacing: only the limit pauses
    lines = processes.StdoutLines(max_line_bytes=1000, max_lines=3)
    transport = _FakeReadTransport()
    lines.connection_made(transport)

    lines.data_received(b"a\nb\n")
    assert transport.is_reading()
    lines.data_received(b"c\nd\n")
    assert not transport.is_reading()  # four wait, past the three allowed

    assert lines.take() == Line(b"a")
    assert not transport.is_reading()  # three still wait
    assert lines.take() == Line(b"b")
    assert transport.is_reading()
    assert [lines.take(), lines.take(), lines.take()] == [Line(b"c"), Line(b"d"), TIMEOUT]


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
    # The guardian (processes.guarded), the child and the grandchild.
    assert len(group_members(proc.pgid)) == 3
    code_ = await proc.stop(grace=0.5)
    assert code_ < 0
    assert group_members(proc.pgid) == []


def no_proc_scan() -> list[processes.ProcInfo]:
    raise AssertionError("scanned /proc")


def zombie_in_a_group_of_its_own() -> subprocess.Popen[bytes]:
    """A child that has exited but was not collected yet: a zombie, leading its own group."""
    child = subprocess.Popen(["true"], start_new_session=True)
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    return child


async def test_the_process_list_reads_odd_command_names_and_leaves_zombies_out(tmp_path: Path) -> None:
    # A command name may hold spaces and parentheses; /proc/PID/stat does not quote it.
    code = (
        "import ctypes, time\n"
        "ctypes.CDLL(None).prctl(15, b'a) b (c', 0, 0, 0)\n"  # PR_SET_NAME
        "print('named', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = await spawn(code, tmp_path)
    zombie = zombie_in_a_group_of_its_own()
    try:
        assert await proc.next_line(10) == Line(b"named")
        found = {p.pid: p for p in live_processes()}
        # proc.pid is the guardian (processes.guarded); the named process is its child.
        [named] = [p for p in found.values() if p.ppid == proc.pid]
        assert Path(f"/proc/{named.pid}/comm").read_text() == "a) b (c\n"
        assert named == processes.ProcInfo(pid=named.pid, ppid=proc.pid, pgid=proc.pid)
        assert found[proc.pid] == processes.ProcInfo(pid=proc.pid, ppid=os.getpid(), pgid=proc.pid)
        assert found[os.getpid()].pgid == os.getpgrp()
        assert zombie.pid not in found
    finally:
        zombie.wait()
        await proc.stop(grace=0.5)


async def test_a_tree_whose_groups_are_all_gone_is_not_alive_without_a_proc_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = await spawn("print('bye')", tmp_path)
    assert await lines_of(proc) == [Line(b"bye")]
    await proc.wait()
    # The normal ending: every group is empty, and the kernel says so without a scan.
    monkeypatch.setattr(processes, "live_processes", no_proc_scan)
    assert not proc.tree.alive()


async def test_a_group_left_with_only_a_zombie_is_not_alive() -> None:
    zombie = zombie_in_a_group_of_its_own()
    try:
        assert processes.group_exists(zombie.pid)  # the kernel still counts it
        assert not ProcessTree(zombie.pid).alive()  # but nothing is left to stop
    finally:
        zombie.wait()
    assert not processes.group_exists(zombie.pid)


async def test_the_quiet_moments_of_a_workers_runs_share_one_proc_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[float] = []

    def counted() -> list[processes.ProcInfo]:
        scans.append(time.monotonic())
        return live_processes()

    monkeypatch.setattr(processes, "live_processes", counted)
    monkeypatch.setattr(processes, "_quiet_scan", None)
    first = await spawn("import time; time.sleep(60)", tmp_path)
    second = await spawn("import time; time.sleep(60)", tmp_path)
    try:
        # Both runs are quiet: each read times out and notes its tree's groups.
        assert await first.next_line(0.05) is TIMEOUT
        assert await second.next_line(0.05) is TIMEOUT
        assert len(scans) == 1
        # Each run's own group is among what it noted, from the shared scan.
        assert first.tree.groups == {first.pgid} and second.tree.groups == {second.pgid}
        monkeypatch.setattr(processes, "QUIET_SCAN_MAX_AGE", 0.0)
        assert await first.next_line(0.05) is TIMEOUT
        assert len(scans) == 2  # older than the limit: scanned again
    finally:
        await first.stop(grace=0.5)
        await second.stop(grace=0.5)


async def test_signalling_a_tree_finds_a_group_started_after_the_shared_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A command in a session of its own, as the CLI starts each Bash command, started
    # after the quiet moment's scan: stopping the run must still stop it.
    code = (
        "import subprocess, sys, time\n"
        "input()\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(processes, "QUIET_SCAN_MAX_AGE", 60.0)
    monkeypatch.setattr(processes, "_quiet_scan", None)
    proc = await ManagedProcess.spawn(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), stdin_data=None
    )
    try:
        assert await proc.next_line(0.2) is TIMEOUT  # the shared scan, before the command
        assert proc.input is not None
        await proc.input.write(b"go\n")
        assert await proc.next_line(10) == Line(b"started")
        assert await proc.next_line(0.05) is TIMEOUT  # noted from the same, older scan
        [command_group] = set(processes.process_tree(proc.pid).values()) - {proc.pgid}
        assert command_group not in proc.tree.groups
    finally:
        await proc.stop(grace=0.5)
    assert group_members(command_group) == []


async def test_a_group_with_a_live_member_is_alive(tmp_path: Path) -> None:
    proc = await spawn("import time; print('up', flush=True); time.sleep(60)", tmp_path)
    try:
        assert await proc.next_line(10) == Line(b"up")
        assert proc.tree.alive()
    finally:
        await proc.stop(grace=0.5)
    assert not proc.tree.alive()


async def test_stopping_again_returns_the_exit_code_without_looking_at_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The supervisor stops the CLI when its output ends and again when the run finishes.
    proc = await spawn("import sys; print('done'); sys.exit(3)", tmp_path)
    assert await lines_of(proc) == [Line(b"done")]
    assert await proc.stop() == 3
    monkeypatch.setattr(processes, "live_processes", no_proc_scan)
    monkeypatch.setattr(processes, "group_exists", lambda _pgid: pytest.fail("looked at the tree"))
    assert await proc.stop() == 3


# Closes its output, then takes a moment to finish (as the CLI does while it saves its
# session); a SIGTERM in that moment is recorded.
FINISHING_CHILD = """
import os, signal, sys, time
def terminated(*_):
    open("ending", "w").write("terminated")
    os._exit(143)
signal.signal(signal.SIGTERM, terminated)
print("last line", flush=True)
os.close(1)
time.sleep(0.5)
open("ending", "w").write("exited by itself")
"""


async def test_a_child_that_closed_its_output_may_finish_without_a_signal(tmp_path: Path) -> None:
    proc = await spawn(FINISHING_CHILD, tmp_path)
    assert await lines_of(proc) == [Line(b"last line")]

    assert await proc.stop() == 0

    assert (tmp_path / "ending").read_text() == "exited by itself"


async def test_a_child_that_closed_its_output_but_lingers_is_terminated_after_the_exit_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "EXIT_GRACE", 0.1)
    proc = await spawn(FINISHING_CHILD, tmp_path)
    assert await lines_of(proc) == [Line(b"last line")]

    assert await proc.stop() == 143

    assert (tmp_path / "ending").read_text() == "terminated"


async def test_a_burst_of_lines_is_read_in_gulps_with_every_line_in_order(tmp_path: Path) -> None:
    # One write per line, a line every 0.5 ms, as the Claude CLI prints stream-json at
    # full speed. Read as they come, that would be a read (and a flush to Redis and to
    # every browser) per line; paced, one read takes the lines of READ_INTERVAL.
    code = (
        "import os, time\nfor i in range(300):\n    os.write(1, b'line %d\\n' % i)\n    time.sleep(0.0005)\n"
    )
    proc = await spawn(code, tmp_path)
    lines = await lines_of(proc)
    assert [line.data for line in lines] == [b"line %d" % i for i in range(300)]
    assert proc.stdout_reads < 100, proc.stdout_reads
    assert await proc.stop() == 0


async def test_the_childs_stdout_pipe_is_widened(tmp_path: Path) -> None:
    # A wide pipe lets the CLI keep printing while this worker is busy for a moment.
    proc = await spawn("import fcntl; print(fcntl.fcntl(1, fcntl.F_GETPIPE_SZ))", tmp_path)
    assert await lines_of(proc) == [Line(str(PIPE_BYTES).encode())]
    await proc.stop()


async def test_stopping_leaves_no_file_descriptor_open(tmp_path: Path) -> None:
    before = open_fds()
    # A daemonized grandchild keeps stdout open, so the output does not end with the child;
    # the guardian (a subreaper) inherits it and ends it, and stop() closes the pipe's end.
    grandchild = "import time; time.sleep(30)"
    middle = (
        "import subprocess, sys\n"
        f"print(subprocess.Popen([sys.executable, '-c', {grandchild!r}], start_new_session=True).pid)\n"
    )
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {middle!r}])\nprint('started')\n"
    proc = await spawn(code, tmp_path)
    first = await proc.next_line(10)
    assert isinstance(first, Line)
    daemon = int(first.data)
    try:
        assert await proc.next_line(10) == Line(b"started")
        await proc.stop(grace=1)
        await asyncio.sleep(0)  # let the closed transports release their descriptors
        assert open_fds() - before == set()
        wait_until(lambda: not Path(f"/proc/{daemon}").exists(), timeout=10, what="the daemon to be ended")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)


@pytest.mark.parametrize("server_session", ["its own session", "the root group"])
async def test_the_child_runs_at_a_lower_cpu_priority_than_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_session: str
) -> None:
    own_autogroup = Path("/proc/self/autogroup")
    if server_session == "the root group":
        # A server that never started a session of its own (run directly by init, as a CI
        # runner may be) reads an empty file: its group weighs as nice 0.
        own_autogroup = tmp_path / "autogroup"
        own_autogroup.write_text("")
        monkeypatch.setattr(processes, "SELF_AUTOGROUP", own_autogroup)
    code = (
        "import os, pathlib\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0))\n"
        "autogroup = pathlib.Path('/proc/self/autogroup')\n"
        "print(autogroup.read_text().split()[-1] if autogroup.exists() else 'none')\n"
    )
    proc = await spawn(code, tmp_path, nice=7)
    nice, session_nice = (line.data.decode() for line in await lines_of(proc))
    await proc.stop()
    # Relative to the server's own priority, whatever that is.
    assert int(nice) == min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, 0) + 7)
    # Where the kernel shares CPU time between sessions first, the child's session weighs less too.
    if not Path("/proc/self/autogroup").exists():
        assert session_nice == "none"
    else:
        fields = own_autogroup.read_text().split()  # "/autogroup-7 nice 0", or empty
        assert session_nice == str(min(MAX_NICE, (int(fields[-1]) if fields else 0) + 7))


async def test_a_prompt_larger_than_the_pipe_reaches_the_child_whole(tmp_path: Path) -> None:
    # 3 MB does not fit the pipe: the feed has to wait for the child to read.
    data = bytes(range(256)) * (3 * 4096)
    code = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"
    proc = await ManagedProcess.spawn(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ), stdin_data=data
    )
    assert await lines_of(proc) == [Line(hashlib.sha256(data).hexdigest().encode())]
    assert await proc.stop() == 0


async def test_a_child_that_exits_without_reading_its_input_reports_its_exit(tmp_path: Path) -> None:
    proc = await ManagedProcess.spawn(
        [sys.executable, "-c", "import sys; sys.exit(4)"],
        cwd=tmp_path,
        env=dict(os.environ),
        stdin_data=b"x" * (4 * 1024 * 1024),
    )
    assert await lines_of(proc) == []
    assert await proc.stop() == 4


@pytest.mark.parametrize("exit_heard_by", ["a pidfd", "a waiting thread"])
async def test_the_exit_code_and_a_killing_signal_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_heard_by: str
) -> None:
    if exit_heard_by == "a waiting thread":

        def refused(_pid: int) -> int:
            raise PermissionError("pidfd_open refused by a seccomp profile")

        monkeypatch.setattr(os, "pidfd_open", refused)
    exits = await spawn("import sys; sys.exit(7)", tmp_path)
    assert await asyncio.wait_for(exits.wait(), 10) == 7
    assert exits.proc.returncode == 7

    killed = await spawn("import time; print('up', flush=True); time.sleep(60)", tmp_path)
    assert await killed.next_line(10) == Line(b"up")
    os.kill(killed.pid, signal.SIGKILL)
    assert await asyncio.wait_for(killed.wait(), 10) == -signal.SIGKILL
    for proc in (exits, killed):
        await proc.stop()
