"""Runs the CLI refuses to start fail with the reason, in words a person can act on: a host
where the sandbox cannot start (unless the operator switched it off), and
``bypassPermissions`` under root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from promptmgr import sandbox
from promptmgr.models import Run, RunStatus
from promptmgr.runner import MSG_NO_RESULT, MSG_SPAWN_FAILED
from tests.conftest import LiveServer
from tests.helpers import login_client, make_project, read_sse, script, start_run

pytestmark = pytest.mark.e2e

ROOT_REFUSAL = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"


def path_without_bwrap(directory: Path) -> str:
    """A PATH with every program of the usual one but bubblewrap."""
    directory.mkdir()
    for place in ("/usr/local/bin", "/usr/bin", "/bin"):
        for program in Path(place).iterdir() if Path(place).is_dir() else ():
            if program.name != "bwrap" and not os.path.lexists(directory / program.name):
                (directory / program.name).symlink_to(program)
    return str(directory)


@pytest.fixture
def no_bubblewrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path / "bin"))


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_a_run_on_a_host_without_bubblewrap_is_refused_with_the_reason(
    app_server: LiveServer, alice: Any, no_bubblewrap: None, engine: str
) -> None:
    project = make_project(owner=alice, engine=engine)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "never runs"}))
    events = read_sse(client, started["events_url"])
    expected = MSG_SPAWN_FAILED.format(error=sandbox.MSG_UNAVAILABLE.format(reason="bwrap not installed"))
    assert [e.data["message"] for e in events if e.event == "error"] == [expected]
    run = Run.objects.get(pk=started["run_id"])
    assert (run.status, run.error) == (RunStatus.FAILED, expected)


@pytest.mark.parametrize("engine", ["cli", "sdk"])
def test_a_run_whose_sandbox_network_proxy_cannot_serve_fails_with_the_reason_and_leaves_no_cli(
    app_server: LiveServer, alice: Any, settings: Any, engine: str
) -> None:
    # The egress starts beside the CLI (sandbox.Confinement.serving), so the CLI was already
    # spawned when the egress failed.
    settings.CLAUDE_SANDBOX_EGRESS_ALLOW = ("not-a-network",)  # past the settings' own check
    project = make_project(owner=alice, engine=engine)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "never runs"}))
    events = read_sse(client, started["events_url"])
    reason = "the sandbox's network proxy (promptmgr.egress) is not serving: it exited with code 1"
    expected = MSG_SPAWN_FAILED.format(error=sandbox.MSG_UNAVAILABLE.format(reason=reason))
    assert [e.data["message"] for e in events if e.event == "error"] == [expected]
    run = Run.objects.get(pk=started["run_id"])
    assert (run.status, run.error) == (RunStatus.FAILED, expected)
    assert processes_with_the_runs_temporary_directory(run.pk) == []


def processes_with_the_runs_temporary_directory(run_id: int) -> list[int]:
    """Processes whose command line or environment names the run's temporary directory: its
    CLI (``CLAUDE_CODE_TMPDIR``), its sandbox."""
    mark = f"{sandbox._run_tmp_prefix()}{run_id}-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "cmdline").read_bytes() or mark in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_with_the_sandbox_switched_off_the_same_host_runs(
    app_server: LiveServer, alice: Any, no_bubblewrap: None, settings: Any
) -> None:
    settings.CLAUDE_SANDBOX = False
    project = make_project(owner=alice)
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "ran unconfined"}))
    events = read_sse(client, started["events_url"])
    assert events[-1].data == {"status": "completed"}


def test_bypass_permissions_as_root_fails_with_the_clis_own_reason(
    app_server: LiveServer, alice: Any
) -> None:
    project = make_project(owner=alice, permission_mode="bypassPermissions")
    client = login_client(app_server, "alice", "alice-password")
    started = start_run(client, project.pk, script({"text": "bypassed"}))
    events = read_sse(client, started["events_url"])
    run = Run.objects.get(pk=started["run_id"])
    if os.geteuid() != 0:  # the CLI refuses bypass only to root
        assert run.status == RunStatus.COMPLETED
        return
    assert run.status == RunStatus.FAILED
    assert run.error == f"{MSG_NO_RESULT.format(code=1)}\n{ROOT_REFUSAL}"
    assert [e.data["message"] for e in events if e.event == "error"] == [run.error]
