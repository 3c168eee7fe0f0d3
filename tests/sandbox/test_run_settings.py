"""What ``promptmgr.sandbox`` hands the CLI for one run (the CLI's side: test_sandbox_contract)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from core import files
from promptmgr import run_sandbox, sandbox
from promptmgr.cli import child_path

pytestmark = pytest.mark.unit


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = Path(settings.STORAGE_ROOT) / "worktrees" / "7" / "3"
    path.mkdir(parents=True)
    return path


def test_whole_regions_are_denied_and_only_the_working_directory_is_allowed_back(workdir: Path) -> None:
    confined = sandbox.run_settings(workdir=workdir)["sandbox"]
    denied = confined["filesystem"]["denyRead"]
    for region in ("/tmp", str(Path.home()), str(settings.BASE_DIR), os.path.realpath(settings.STORAGE_ROOT)):
        assert region in denied
    assert os.path.realpath(settings.RUN_SECRETS_DIR) in denied
    assert confined["filesystem"]["allowRead"] == [str(workdir.resolve())]
    assert confined["filesystem"]["allowWrite"] == [str(workdir.resolve())]
    assert confined["failIfUnavailable"] is True
    assert confined["allowUnsandboxedCommands"] is False
    # Bash keeps asking: an approval still means something, the sandbox bounds what it can do.
    assert confined["autoAllowBashIfSandboxed"] is False


def test_the_file_tools_are_blocked_outside_the_working_directory_and_denied_the_private_places(
    workdir: Path,
) -> None:
    permissions = sandbox.run_settings(workdir=workdir)["permissions"]
    assert permissions["blockReadsOutsideWorkingDirectories"] is True
    assert permissions["blockWritesOutsideWorkingDirectories"] is True
    secrets = os.path.realpath(settings.RUN_SECRETS_DIR)
    home = os.path.realpath(Path(settings.STORAGE_ROOT) / "claude-home")
    for tool in ("Read", "Grep", "Glob", "Edit", "Write", "NotebookEdit"):
        assert f"{tool}(/{secrets}/**)" in permissions["deny"]
        assert f"{tool}(/{home}/**)" in permissions["deny"]


def test_the_database_file_is_denied_as_a_file(workdir: Path, settings: Any, tmp_path: Path) -> None:
    # SQLite whichever database the suite runs on (make test runs the unit tests on PostgreSQL too).
    database = tmp_path / "db.sqlite3"
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)}
    settings.DATABASES = {"default": {**settings.DATABASES["default"], **sqlite}}
    run = sandbox.run_settings(workdir=workdir)
    assert str(database) in run["sandbox"]["filesystem"]["denyRead"]
    assert f"Read(/{database})" in run["permissions"]["deny"]
    assert f"Read(/{database}-wal)" in run["permissions"]["deny"]


def test_a_postgresql_database_has_no_file_to_deny(settings: Any) -> None:
    postgresql = {"ENGINE": "django.db.backends.postgresql", "NAME": "promptmanager"}
    settings.DATABASES = {"default": {**settings.DATABASES["default"], **postgresql}}
    assert sandbox.database_files() == []


def test_a_private_place_that_holds_the_working_directory_gets_no_deny_rule(
    settings: Any, tmp_path: Path
) -> None:
    settings.RUN_SECRETS_DIR = tmp_path / "odd"
    inside = tmp_path / "odd" / "work"
    inside.mkdir(parents=True)
    assert not [rule for rule in sandbox.file_tool_denials(inside.resolve()) if "/odd/" in rule]


def test_a_worktrees_git_directories_are_readable(workdir: Path, tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repository),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
        check=True,
    )
    workdir.rmdir()
    subprocess.run(["git", "-C", str(repository), "worktree", "add", "-q", str(workdir)], check=True)
    allowed = sandbox.run_settings(workdir=workdir)["sandbox"]["filesystem"]["allowRead"]
    assert allowed == [
        str(workdir.resolve()),
        str((repository / ".git" / "worktrees" / workdir.name).resolve()),
        str((repository / ".git").resolve()),
    ]


def test_switched_off_there_are_no_sandbox_settings(workdir: Path, settings: Any) -> None:
    assert json.loads(sandbox.settings_argument(workdir=workdir) or "{}")["sandbox"]["enabled"] is True
    settings.CLAUDE_SANDBOX = False
    assert sandbox.settings_argument(workdir=workdir) is None


def test_a_host_without_the_tools_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(sandbox.SandboxUnavailable) as refused:
        sandbox.check_available(str(tmp_path))
    assert str(refused.value) == sandbox.MSG_UNAVAILABLE.format(reason="bwrap and socat not installed")
    assert "CLAUDE_SANDBOX=off" in str(refused.value)


def test_each_run_gets_a_short_private_temporary_directory_and_stale_ones_are_swept() -> None:
    first, second = sandbox.run_tmp_open(5), sandbox.run_tmp_open(6)
    try:
        assert first.stat().st_mode & 0o777 == 0o700
        # The CLI puts sockets below it; past the AF_UNIX limit it would fall back to a shared one.
        assert len(f"{first}/claude-{os.getuid()}/{'x' * 40}.sock") < 104
        assert sandbox.sweep_stale_run_tmp(active={6}) == 1
        assert not first.exists() and second.exists()
    finally:
        sandbox.run_tmp_close(first)
        sandbox.run_tmp_close(second)


@contextlib.contextmanager
def opened_sandbox(run_id: int, workdir: Path, path: str) -> Iterator[run_sandbox.RunSandbox]:
    """Run ``run_id``'s sandbox, started and its prefix in place (as ``sandbox.confine`` has
    it); stopped, and its temporary directory gone, on the way out."""
    tmpdir = sandbox.run_tmp_open(run_id)
    try:
        held = sandbox.start_run_sandbox(
            workdir=workdir, tmpdir=tmpdir, path=path, prefix_path=run_sandbox.prefix_path(run_id)
        )
        try:
            held.open()
            yield held
        finally:
            held.stop()
    finally:
        sandbox.run_tmp_close(tmpdir)


def test_a_run_sandboxs_prefix_goes_with_it_and_those_of_ended_sandboxes_are_swept(
    workdir: Path, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path / "var"  # this test's own: it counts what the sweep removes
    directory = run_sandbox.prefix_dir()
    with opened_sandbox(7, workdir, child_path()) as held:
        # A crashed worker's runs: one whose sandbox ended (its first process, PID 1 here,
        # never had the marker), one from before prefixes named their sandbox's check, and
        # one whose sandbox never started, pending for longer than any command waits.
        ended = directory / "run-1-0123"
        run_sandbox.write_prefix(ended, held.script.replace(f"/proc/{held.pid}/", "/proc/1/"))
        unnamed = directory / "run-2-4567"
        run_sandbox.write_prefix(unnamed, "#!/bin/sh\n")
        abandoned = directory / "run-3-89ab"
        run_sandbox.write_pending_prefix(abandoned, trusted_command="true", sleep="/bin/sleep")
        long_ago = time.time() - run_sandbox.PENDING_LIMIT - 1
        os.utime(run_sandbox.pending_flag(abandoned), (long_ago, long_ago))
        # A run whose sandbox is starting now.
        starting = directory / "run-4-cdef"
        run_sandbox.write_pending_prefix(starting, trusted_command="true", sleep="/bin/sleep")
        # A script a killed worker staged and never moved into place, and one being
        # written now.
        left = directory / f".run-5-0123.left{files.STAGED_SUFFIX}"
        left.write_text("#!/bin/sh\n")
        long_ago = time.time() - run_sandbox.STAGED_LIMIT - 1
        os.utime(left, (long_ago, long_ago))
        writing = directory / f".{starting.name}.writing{files.STAGED_SUFFIX}"
        writing.write_text("#!/bin/sh\n")

        assert run_sandbox.sweep_stale_prefixes() == 4
        assert sorted(path.name for path in directory.iterdir()) == sorted(
            [held.prefix_path.name, starting.name, run_sandbox.pending_flag(starting).name, writing.name]
        )
    assert not held.prefix_path.exists()
    assert not Path(f"/proc/{held.pid}/ns/mnt").exists()


def test_a_prefix_whose_write_fails_leaves_neither_a_script_nor_a_staged_file(
    settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    path = run_sandbox.prefix_path(9)
    run_sandbox.write_prefix(path, "#!/bin/sh\necho before\n")
    with pytest.raises(UnicodeEncodeError):
        run_sandbox.write_prefix(path, "#!/bin/sh\necho \ud800\n")  # cannot be written
    assert sorted(entry.name for entry in path.parent.iterdir()) == [path.name]
    assert path.read_text() == "#!/bin/sh\necho before\n"


def test_in_the_run_scope_the_clis_sandbox_is_off_and_the_prefix_is_pinned_in_the_flag_layer(
    workdir: Path, settings: Any
) -> None:
    settings.CLAUDE_SANDBOX_SCOPE = "run"
    confinement = sandbox._confine(8, workdir, child_path())
    try:
        assert confinement.sandbox is not None
        prefix = str(confinement.sandbox.prefix_path)
        assert confinement.env == {"CLAUDE_CODE_SHELL_PREFIX": prefix}
        assert confinement.settings is not None
        assert json.loads(confinement.settings) == {
            "sandbox": {"enabled": False},
            "env": {"CLAUDE_CODE_SHELL_PREFIX": prefix},
            "permissions": sandbox.file_tool_permissions(workdir),
        }
    finally:
        confinement.close()
    assert not confinement.tmpdir.exists()
    assert not Path(prefix).exists()


def test_a_run_ends_its_confinement_off_the_event_loop(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Removing what a run left in its temporary directory can take long: on the event loop,
    # it would hold every other stream of the worker.
    confinement = sandbox.run_scope_confinement(run_id=9, workdir=workdir, path=child_path())
    assert confinement.sandbox is not None
    prefix = confinement.sandbox.prefix_path
    closed_in: list[threading.Thread] = []
    remove = sandbox.run_tmp_close

    def remove_noting_the_thread(path: Path) -> None:
        closed_in.append(threading.current_thread())
        remove(path)

    monkeypatch.setattr(sandbox, "run_tmp_close", remove_noting_the_thread)

    async def end_run() -> threading.Thread:
        await confinement.aclose()
        return threading.current_thread()

    loop_thread = asyncio.run(end_run())

    assert len(closed_in) == 1
    assert closed_in[0] is not loop_thread
    assert not confinement.tmpdir.exists()
    assert not prefix.exists()


def test_the_ask_user_server_the_workspace_registers_is_the_one_command_line_let_out(settings: Any) -> None:
    from promptmgr.workspaces import mcp_server_entry

    settings.ASK_USER_MCP_COMMAND = [
        "/opt/py/bin/python",
        "-P",
        "tee.py",
        "@flag",
        "/opt/py/bin/python",
        "-m",
        "x",
    ]
    assert mcp_server_entry() == {
        "type": "stdio",
        "command": "/opt/py/bin/python",
        "args": ["-P", "tee.py", "@flag", "/opt/py/bin/python", "-m", "x"],
    }
    # As the CLI hands a stdio server's command line to the shell prefix.
    assert sandbox.trusted_command() == "/opt/py/bin/python -P tee.py @flag /opt/py/bin/python -m x"


@pytest.mark.parametrize("raw", ["python -m mcp_server", "[]", '["python", 3]', '[""]'])
def test_an_ask_user_command_that_is_not_a_json_list_of_strings_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from promptmgr.settings import envcommand

    monkeypatch.setenv("ASK_USER_MCP_COMMAND", raw)
    with pytest.raises(ImproperlyConfigured, match="ASK_USER_MCP_COMMAND must be a JSON list"):
        envcommand("ASK_USER_MCP_COMMAND", ["python"])


def test_a_commands_path_cannot_choose_the_programs_that_enter_the_sandbox(workdir: Path) -> None:
    # A command's PATH is the CLI's, which a workspace's own settings (`env`) can set: a
    # `nsenter` found there would run outside the sandbox, a `setpriv` inside it with every
    # capability of its namespaces. These decoys sit in the working directory, as a
    # repository's own files would, and say so if they ever run.
    decoys = workdir / "bin"
    decoys.mkdir()
    for name in ("nsenter", "setpriv"):
        decoy = decoys / name
        decoy.write_text(f"#!/bin/sh\ntouch {workdir}/{name}-ran\nexit 1\n")
        decoy.chmod(0o755)
    with opened_sandbox(11, workdir, child_path()) as held:
        inside = os.readlink(f"/proc/{held.pid}/ns/mnt")
        ran = subprocess.run(
            [str(held.prefix_path), "readlink /proc/self/ns/mnt"],
            cwd=workdir,
            env={"PATH": f"{decoys}:{child_path()}"},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == inside
    assert inside != os.readlink("/proc/self/ns/mnt")
    assert sorted(path.name for path in workdir.glob("*-ran")) == []


def test_the_sandbox_enters_through_a_setpriv_it_shows_not_one_it_hides(workdir: Path) -> None:
    # setpriv runs inside the sandbox: one found first on the server's PATH but in a place
    # the sandbox hides (here the app's storage) would be missing there for every command.
    tools = Path(settings.STORAGE_ROOT) / "tools"
    tools.mkdir()
    shutil.copy2(str(shutil.which("setpriv", path=child_path())), tools / "setpriv")
    with opened_sandbox(12, workdir, f"{tools}:{child_path()}") as held:
        script = held.prefix_path.read_text()
        ran = subprocess.run(
            [str(held.prefix_path), "echo entered"],
            cwd=workdir,
            env={"PATH": child_path()},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert str(tools) not in script
    assert (ran.returncode, ran.stdout) == (0, "entered\n"), ran.stderr


@pytest.fixture
def harmless_trusted_command(settings: Any) -> str:
    """The one command line the prefix lets out, made one that only says it ran outside."""
    settings.ASK_USER_MCP_COMMAND = ["/bin/echo", "outside"]
    return sandbox.trusted_command()


def prefixed(prefix: Path, command: str, *, workdir: Path, path: str) -> subprocess.Popen[str]:
    """``command`` as the CLI starts it through the run's shell prefix, in the run's
    working directory (the one directory of the host the sandbox shows writable)."""
    return subprocess.Popen(
        [str(prefix), command],
        cwd=workdir,
        env={"PATH": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_command_started_while_the_run_sandbox_starts_waits_and_then_runs_inside_it(
    workdir: Path, harmless_trusted_command: str
) -> None:
    # The CLI is spawned before its run's sandbox has started (``sandbox.confine``):
    # a hook or a workspace's MCP server it starts then must not run before the sandbox
    # can take it, nor outside it. The decoys, on the command's PATH, say so if they run.
    decoys = workdir / "bin"
    decoys.mkdir()
    for name in ("sleep", "nsenter", "setpriv"):
        decoy = decoys / name
        decoy.write_text(f"#!/bin/sh\ntouch {workdir}/{name}-ran\nexit 1\n")
        decoy.chmod(0o755)
    command_path = f"{decoys}:{child_path()}"
    confinement = sandbox._run_scope_reserved(run_id=14, workdir=workdir, path=child_path(), pending=True)
    assert confinement.prefix_path is not None
    try:
        waiting = prefixed(
            confinement.prefix_path, "readlink /proc/self/ns/mnt", workdir=workdir, path=command_path
        )
        # The ask-user server's command line does not wait: the CLI connects it first.
        outside = prefixed(
            confinement.prefix_path, harmless_trusted_command, workdir=workdir, path=command_path
        )
        assert outside.communicate(timeout=10) == ("outside\n", "")

        confinement.sandbox = sandbox.start_run_sandbox(
            workdir=workdir, tmpdir=confinement.tmpdir, path=child_path(), prefix_path=confinement.prefix_path
        )
        # Started is not open: the run's start snapshot may still be under way.
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=0.5)
        confinement.sandbox.open()
        out, err = waiting.communicate(timeout=10)
        inside = os.readlink(f"/proc/{confinement.sandbox.pid}/ns/mnt")
    finally:
        confinement.close()
    assert (waiting.returncode, out.strip()) == (0, inside), err
    assert inside != os.readlink("/proc/self/ns/mnt")
    assert sorted(path.name for path in workdir.glob("*-ran")) == []
    assert not confinement.prefix_path.exists()
    assert not run_sandbox.pending_flag(confinement.prefix_path).exists()


def test_a_command_waiting_for_a_sandbox_that_never_opened_ends_with_its_run(
    workdir: Path, harmless_trusted_command: str
) -> None:
    confinement = sandbox._run_scope_reserved(run_id=15, workdir=workdir, path=child_path(), pending=True)
    assert confinement.prefix_path is not None
    waiting = prefixed(confinement.prefix_path, f"touch {workdir}/ran", workdir=workdir, path=child_path())
    with pytest.raises(subprocess.TimeoutExpired):
        waiting.wait(timeout=0.5)
    # The run fails (its sandbox could not start) or is cancelled while its sandbox starts.
    confinement.close()
    _out, err = waiting.communicate(timeout=10)
    assert (waiting.returncode, err.strip()) == (126, run_sandbox.MSG_ENDED)
    assert not (workdir / "ran").exists()


def test_a_confinement_closed_while_its_sandbox_starts_ends_the_sandbox_too(workdir: Path) -> None:
    # A run cancelled, or whose CLI could not spawn, while its sandbox still started.
    async def start_and_close() -> run_sandbox.RunSandbox:
        confinement = await sandbox.confine(run_id=16, workdir=workdir, path=child_path())
        starting = confinement.starting
        assert starting is not None and not starting.done()
        await confinement.aclose()
        held: run_sandbox.RunSandbox = starting.result()
        return held

    held = asyncio.run(start_and_close())
    assert not Path(f"/proc/{held.pid}/ns/mnt").exists()
    assert not held.prefix_path.exists()
    assert held.egress is None
