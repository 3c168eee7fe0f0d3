"""The warm ask-user server (``python -m mcp_server.warm``) and its stubs (``python -m
mcp_server`` with ``ASK_USER_WARM``): real processes, a real Unix socket, the mcp client SDK
on the stub's stdio and ``FakeRelay`` behind the served server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers import live_parents
from tests.mcp_server.fake_relay import FakeRelay, answered, waiting

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CALL_TIMEOUT = 30.0
SETTLE_TIMEOUT = 10.0


@dataclass
class Warm:
    socket_path: Path
    process: subprocess.Popen[bytes]

    def children(self) -> list[int]:
        return _children(self.process.pid)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


def _standing_for(stub: subprocess.Popen[bytes]) -> bool:
    """The stub handed its stdio over (and passes its signals on from then)."""
    with contextlib.suppress(FileNotFoundError):
        return os.readlink(f"/proc/{stub.pid}/fd/0") == os.devnull
    return False


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Warm]:
    """A warm server that serves configs under ``tmp_path`` (where ``write_config`` writes),
    started as the app starts it: its socket bound and listening first, handed over as a
    descriptor."""
    directory = Path(tempfile.mkdtemp(prefix="pm-warm-test-"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(directory / "warm.sock"))
    listener.listen(16)
    fd = listener.fileno()
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "mcp_server.warm", "--fd", str(fd)]
        + ["--allowed", str(tmp_path), "--parent", str(os.getpid())],
        pass_fds=(fd,),
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)},
    )
    try:
        yield Warm(directory / "warm.sock", process)
    finally:
        process.kill()
        process.wait()
        listener.close()
        for child in _children_or_none(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        (directory / "warm.sock").unlink(missing_ok=True)
        directory.rmdir()


def _children_or_none(pid: int) -> list[int]:
    try:
        return _children(pid)
    except FileNotFoundError:
        return []


def _stub_env(config: Path | None, warm_socket: Path | None) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "ASK_USER_LOG_LEVEL": "DEBUG"}
    if config is not None:
        env["ASK_USER_CONFIG"] = str(config)
    if warm_socket is not None:
        env["ASK_USER_WARM"] = str(warm_socket)
    return env


@asynccontextmanager
async def stub_client(
    config: Path | None, warm_socket: Path | None, workdir: Path, errlog: Path
) -> AsyncIterator[Client]:
    """``python -P -m mcp_server`` as Claude Code starts it, driven by the mcp client."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-P", "-m", "mcp_server"],
        env=_stub_env(config, warm_socket),
        cwd=workdir,
    )
    with errlog.open("w", encoding="utf-8") as stderr:
        async with Client(
            stdio_client(params, errlog=stderr), mode="legacy", read_timeout_seconds=CALL_TIMEOUT
        ) as client:
            yield client


def _start_stub(config: Path, warm_socket: Path, workdir: Path, *, nice: int = 0) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["nice", "-n", str(nice), sys.executable, "-P", "-m", "mcp_server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_stub_env(config, warm_socket),
        cwd=workdir,
    )


@pytest.mark.asyncio
async def test_a_stub_is_served_by_a_forked_server_that_relays_the_users_answer(
    tmp_path: Path, warm: Warm, relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    relay.poll_replies = [waiting(), answered(["Postgres"])]
    workdir = tmp_path / "workspace"
    workdir.mkdir()

    async with stub_client(
        write_config(relay.url), warm.socket_path, workdir, tmp_path / "err.log"
    ) as client:
        [served] = warm.children()
        tools = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool(
            "ask_user",
            {"question": "Which database?", "options": [{"label": "Postgres"}, {"label": "SQLite"}]},
        )
        # The served child took the stub's working directory and environment.
        assert Path(os.readlink(f"/proc/{served}/cwd")) == workdir

    assert tools == {"ask_user", "approve"}
    assert result.is_error is False
    assert [getattr(block, "text", None) for block in result.content] == ["User selected: Postgres"]
    assert relay.requests_to("/relay-question")[0].json()["question"] == "Which database?"
    # The client closed the stub's stdin: the served child ended and was reaped.
    await asyncio.to_thread(_wait_until, lambda: not warm.children(), "the served child is reaped")
    assert "serving here" not in (tmp_path / "err.log").read_text(encoding="utf-8")


def test_a_stub_killed_outright_takes_its_served_server_with_it(
    tmp_path: Path, warm: Warm, write_config: Callable[..., Path]
) -> None:
    stub = _start_stub(write_config(), warm.socket_path, tmp_path)
    _wait_until(lambda: len(warm.children()) == 1, "the warm server serves the stub")
    [served] = warm.children()

    stub.kill()
    stub.wait()

    _wait_until(lambda: served not in live_parents(), "the served child is gone")
    _wait_until(lambda: not warm.children(), "the served child is reaped")
    assert warm.process.poll() is None  # the warm server serves on


def test_a_stub_passes_sigterm_on_and_ends_with_its_servers_exit_code(
    tmp_path: Path, warm: Warm, write_config: Callable[..., Path]
) -> None:
    stub = _start_stub(write_config(), warm.socket_path, tmp_path)
    _wait_until(lambda: _standing_for(stub), "the warm server serves the stub")
    [served] = warm.children()

    stub.send_signal(signal.SIGTERM)

    assert stub.wait(SETTLE_TIMEOUT) == 128 + signal.SIGTERM
    assert served not in live_parents()


def test_a_served_server_runs_at_its_stubs_priority_and_ends_with_its_stdin(
    tmp_path: Path, warm: Warm, write_config: Callable[..., Path]
) -> None:
    stub = _start_stub(write_config(), warm.socket_path, tmp_path, nice=7)
    _wait_until(lambda: len(warm.children()) == 1, "the warm server serves the stub")
    [served] = warm.children()
    # The CLI's priority, which its MCP server had as the CLI's child, not the warm server's.
    stub_nice = os.getpriority(os.PRIO_PROCESS, stub.pid)
    assert stub_nice == os.getpriority(os.PRIO_PROCESS, 0) + 7
    _wait_until(
        lambda: os.getpriority(os.PRIO_PROCESS, served) == stub_nice, "the child takes the stub's nice"
    )
    assert os.getsid(served) == served  # a session of its own, apart from the warm server's
    assert stub.stdin is not None

    stub.stdin.close()

    assert stub.wait(SETTLE_TIMEOUT) == 0
    _wait_until(lambda: not warm.children(), "the served child is reaped")


@pytest.mark.asyncio
async def test_a_config_outside_the_allowed_directory_is_refused_and_served_in_place(
    tmp_path: Path, warm: Warm, relay: FakeRelay, write_config: Callable[..., Path]
) -> None:
    outside = Path(tempfile.mkdtemp(prefix="pm-warm-outside-"))
    config = outside / "ask-user.json"
    config.write_bytes(write_config(relay.url).read_bytes())
    relay.poll_replies = [answered(["Yes"])]
    errlog = tmp_path / "err.log"
    try:
        async with stub_client(config, warm.socket_path, tmp_path, errlog) as client:
            children = warm.children()
            result = await client.call_tool("ask_user", {"question": "Proceed?"})
    finally:
        config.unlink()
        outside.rmdir()

    assert children == []
    assert [getattr(block, "text", None) for block in result.content] == ["User selected: Yes"]
    assert "did not serve this run (refused no run config of this app); serving here" in errlog.read_text(
        encoding="utf-8"
    )


@pytest.mark.asyncio
async def test_without_a_warm_server_at_the_socket_the_stub_serves_in_place(
    tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    errlog = tmp_path / "err.log"
    async with stub_client(write_config(), tmp_path / "no-such.sock", tmp_path, errlog) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}

    assert tools == {"ask_user", "approve"}
    assert "did not answer" in errlog.read_text(encoding="utf-8")


def test_a_stopped_warm_server_takes_no_new_stub_and_exits_once_its_served_runs_end(
    tmp_path: Path, warm: Warm, write_config: Callable[..., Path]
) -> None:
    stub = _start_stub(write_config(), warm.socket_path, tmp_path)
    _wait_until(lambda: len(warm.children()) == 1, "the warm server serves the stub")

    warm.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert warm.process.poll() is None  # a run it serves keeps its server
    assert stub.stdin is not None
    stub.stdin.close()

    assert stub.wait(SETTLE_TIMEOUT) == 0
    assert warm.process.wait(SETTLE_TIMEOUT) == 0


def test_a_request_from_a_process_that_is_not_a_stub_is_refused(tmp_path: Path, warm: Warm) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(SETTLE_TIMEOUT)
        client.connect(str(warm.socket_path))
        client.sendall(b"\x00\x00\x00\x02{}")
        reply = client.recv(256)

    assert reply == b"refused expected stdin, stdout and stderr\n"
    assert warm.children() == []
