"""A private repository over HTTP with an access token: git gets it only through its askpass,
and it appears in no command line, config, log, file or run environment."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from promptmgr.workspaces import workspace_path
from tests.conftest import LiveServer
from tests.helpers import login_client, read_sse, run_workdir, script, start_run, wait_until
from tests.workspaces.git_http import GitHttpServer
from tests.workspaces.support import make_origin

pytestmark = pytest.mark.e2e

TOKEN = "glpat-test-token-5c3f9a1e7d"


class CommandLines:
    """Every process command line seen while it watches (the clone's git, remote helper…)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        line = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
                except OSError:
                    continue
                if line:
                    self.seen.add(line)
            self._stop.wait(0.002)


def _wait_for_workspace(client: Any, project_id: int) -> dict[str, Any]:
    def settled() -> bool:
        return bool(client.get(f"/api/projects/{project_id}").json()["workspace_status"] != "cloning")

    wait_until(settled, timeout=60, what="the clone to end")
    body: dict[str, Any] = client.get(f"/api/projects/{project_id}").json()
    return body


def _files_holding(root: Path, secret: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
            found.append(path)
    return found


def test_a_token_reaches_git_only_through_its_askpass(
    app_server: LiveServer, alice: Any, tmp_path: Path, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.conf import settings as live

    settings.WORKSPACE_GIT_SCHEMES = ("https", "http")
    caplog.set_level(logging.DEBUG, logger="promptmgr")
    make_origin(tmp_path / "repos" / "private.git")
    client = login_client(app_server, "alice", "alice-password")

    with GitHttpServer(tmp_path / "repos", TOKEN, delay=0.3) as server, CommandLines() as lines:
        created = client.post(
            "/api/projects",
            json={"name": "Private", "git_url": f"{server.url}/private.git", "git_token": TOKEN},
        )
        assert created.status_code == 201, created.text
        project = _wait_for_workspace(client, created.json()["id"])

    assert (project["workspace_status"], project["workspace_error"]) == ("ready", "")
    assert server.refused >= 1 and server.authorized  # asked, then answered through askpass
    assert any("git-remote-http" in line or " clone " in line for line in lines.seen)
    assert not [line for line in lines.seen if TOKEN in line]
    root = Path(live.STORAGE_ROOT) / "projects" / str(project["id"])
    config = (root / ".git" / "config").read_text()
    assert f"url = {server.url}/private.git" in config and TOKEN not in config
    assert TOKEN not in caplog.text
    assert _files_holding(Path(live.STORAGE_ROOT), TOKEN.encode()) == []
    assert _files_holding(Path(live.RUN_SECRETS_DIR), TOKEN.encode()) == []

    # Claude's runs never see it either.
    from promptmgr.models import Project
    from tests.helpers import allow_in_workspace

    allow_in_workspace(Project.objects.get(pk=project["id"]), "Bash(env)")
    env = {"tool_use": {"name": "Bash", "input": {"command": "env", "description": "env"}}}
    started = start_run(client, project["id"], script(env, {"text": "ok"}))
    events = read_sse(client, started["events_url"])
    [result] = [e.data["content"] for e in events if e.event == "tool_result"]
    assert "PATH=" in result and TOKEN not in result and "PM_GIT" not in result
    assert (run_workdir(started["run_id"]) / "README.md").exists()
    assert workspace_path(Project.objects.get(pk=project["id"])) == root


def test_a_wrong_token_fails_the_clone_with_a_clear_error_and_no_directory(
    app_server: LiveServer, alice: Any, tmp_path: Path, settings: Any
) -> None:
    settings.WORKSPACE_GIT_SCHEMES = ("https", "http")
    make_origin(tmp_path / "repos" / "private.git")
    client = login_client(app_server, "alice", "alice-password")

    with GitHttpServer(tmp_path / "repos", TOKEN) as server:
        created = client.post(
            "/api/projects",
            json={"name": "Private", "git_url": f"{server.url}/private.git", "git_token": "wrong-token-xyz"},
        )
        project = _wait_for_workspace(client, created.json()["id"])

    assert project["workspace_status"] == "failed"
    assert project["workspace_error"].startswith(f"Could not clone {server.url}/private.git: ")
    assert "Authentication failed" in project["workspace_error"]
    assert "wrong-token-xyz" not in project["workspace_error"]
    projects = Path(settings.STORAGE_ROOT) / "projects"
    assert not projects.exists() or list(projects.iterdir()) == []
    response = start_run_refused(client, project["id"])
    assert (response.status_code, response.json()["code"]) == (409, "workspace_failed")


def start_run_refused(client: Any, project_id: int) -> Any:
    return client.post(f"/api/projects/{project_id}/runs", json={"prompt": "hello"})
