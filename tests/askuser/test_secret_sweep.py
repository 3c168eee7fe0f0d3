"""The start-up sweep removes the ask-user secrets of runs that ended, and only those."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from askuser.runtime import sweep_stale_secrets
from promptmgr.models import Run, RunStatus
from tests.helpers import make_run

pytestmark = [pytest.mark.django_db, pytest.mark.unit]


def secrets_dir_of(run: Run) -> Path:
    directory = Path(settings.RUN_SECRETS_DIR) / f"run-{run.pk}-0badc0de"
    directory.mkdir(mode=0o700, parents=True)
    (directory / "ask-user.json").write_text("{}")
    return directory


def test_secrets_of_ended_or_unknown_runs_go_and_a_live_runs_stay_however_old(alice: Any) -> None:
    live_run = make_run(owner=alice, status=RunStatus.WAITING_FOR_USER)
    ended_run = make_run(owner=alice, status=RunStatus.COMPLETED)
    kept, gone = secrets_dir_of(live_run), secrets_dir_of(ended_run)
    unknown = Path(settings.RUN_SECRETS_DIR) / "run-999999-0badc0de"
    unknown.mkdir(mode=0o700)
    # A live run may be hours old (RUN_MAX_DURATION), older than any fixed age limit.
    old = 1_000_000_000
    os.utime(kept, (old, old))

    assert sweep_stale_secrets() == 2
    assert kept.exists() and (kept / "ask-user.json").exists()
    assert not gone.exists() and not unknown.exists()
