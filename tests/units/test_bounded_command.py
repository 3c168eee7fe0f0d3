"""promptmgr.git.command.run_bounded: a child's end is seen through its pidfd when it comes,
its code and output come back, its time limit and ``stop_when`` still stop it, and without
a pidfd it falls back to ``Popen.wait``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from promptmgr.git import command

pytestmark = pytest.mark.unit

ENV = {"PATH": "/usr/bin:/bin"}


def open_pidfds() -> set[str]:
    """This process's open pidfds (other descriptors come and go with other threads)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]":
                found.add(fd)
        except FileNotFoundError:
            pass  # the listing's own descriptor, closed since
    return found


def test_a_finished_command_gives_its_code_and_output_and_leaves_no_pidfd_open(tmp_path: Path) -> None:
    before = open_pidfds()

    result = command.run_bounded(
        ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], cwd=tmp_path, env=ENV, timeout=10
    )

    assert (result.returncode, result.stdout, result.stderr, result.stopped) == (3, b"out\n", b"err\n", None)
    assert open_pidfds() == before


def test_the_exit_watch_sees_the_child_end_and_leaves_the_reaping_to_popen(tmp_path: Path) -> None:
    proc = subprocess.Popen(["/bin/sh", "-c", "read line"], stdin=subprocess.PIPE, cwd=tmp_path)
    watch = command._ExitWatch(proc)
    try:
        assert watch.wait(0.05) is False  # still reading its stdin

        assert proc.stdin is not None
        proc.stdin.close()  # its read ends, and so does it

        assert watch.wait(10) is True
        assert proc.returncode is None  # seen ended, not reaped
        assert proc.wait(timeout=1) == 1
    finally:
        watch.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stop_when_stops_a_running_command(tmp_path: Path) -> None:
    result = command.run_bounded(
        ["/bin/sleep", "30"], cwd=tmp_path, env=ENV, timeout=60, stop_when=lambda: "the project was deleted"
    )

    assert result.stopped == "the project was deleted"
    assert result.returncode == -9


def test_without_a_pidfd_it_waits_as_popen_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)

    done = command.run_bounded(["/bin/sh", "-c", "exit 4"], cwd=tmp_path, env=ENV, timeout=10)
    stopped = command.run_bounded(["/bin/sleep", "30"], cwd=tmp_path, env=ENV, timeout=0.3)

    assert (done.returncode, done.stopped) == (4, None)
    assert stopped.stopped == "time limit of 0.3 s"
