"""What ``promptmgr.sandbox`` hands the CLI for one run (the CLI's side: test_sandbox_contract)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

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


def test_a_run_sandboxs_prefix_goes_with_it_and_an_ended_ones_is_swept(workdir: Path) -> None:
    tmpdir = sandbox.run_tmp_open(7)
    held = sandbox.start_run_sandbox(workdir=workdir, tmpdir=tmpdir, path=child_path())
    stale = run_sandbox.prefix_dir() / "run-1-1"  # no process 1 has mount namespace 1
    try:
        stale.write_text("#!/bin/sh\n")
        assert held.prefix_path.exists()
        assert run_sandbox.sweep_stale_prefixes() >= 1
        assert held.prefix_path.exists() and not stale.exists()
    finally:
        held.stop()
        sandbox.run_tmp_close(tmpdir)
    assert not held.prefix_path.exists()
    assert not Path(f"/proc/{held.pid}/ns/mnt").exists()


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
    tmpdir = sandbox.run_tmp_open(11)
    held = sandbox.start_run_sandbox(workdir=workdir, tmpdir=tmpdir, path=child_path())
    try:
        inside = os.readlink(f"/proc/{held.pid}/ns/mnt")
        ran = subprocess.run(
            [str(held.prefix_path), "readlink /proc/self/ns/mnt"],
            cwd=workdir,
            env={"PATH": f"{decoys}:{child_path()}"},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        held.stop()
        sandbox.run_tmp_close(tmpdir)
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
    tmpdir = sandbox.run_tmp_open(12)
    held = sandbox.start_run_sandbox(workdir=workdir, tmpdir=tmpdir, path=f"{tools}:{child_path()}")
    try:
        script = held.prefix_path.read_text()
        ran = subprocess.run(
            [str(held.prefix_path), "echo entered"],
            cwd=workdir,
            env={"PATH": child_path()},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        held.stop()
        sandbox.run_tmp_close(tmpdir)
    assert str(tools) not in script
    assert (ran.returncode, ran.stdout) == (0, "entered\n"), ran.stderr
