"""The orphaned-run sweep leaves no Redis connection open behind it.

A worker's Redis connections at rest must not depend on its history: the sweep looks a run
up in Redis only when the run is active and not supervised here (a queued one, say), so a
connection it kept stayed open in some workers and not in others. Real Redis and database.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.redis import get_redis, key_prefix
from promptmgr.models import Run, RunStatus
from promptmgr.recovery import recover_orphaned_runs
from tests.helpers import make_run

pytestmark = pytest.mark.unit


def test_a_sweep_that_looked_up_a_queued_run_in_redis_leaves_no_connection_open(alice: Any) -> None:
    run = make_run(owner=alice, status=RunStatus.QUEUED)  # no worker here supervises it
    pool: Any = get_redis().connection_pool

    assert recover_orphaned_runs() == []

    # Queued a moment ago: within its grace, left alone, after asking Redis who owns it.
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED
    assert pool._created_connections == 1
    assert [c for c in pool._available_connections if c.is_connected] == []


def test_the_command_after_a_sweep_connects_again(alice: Any, redis_client: Any) -> None:
    make_run(owner=alice, status=RunStatus.QUEUED)
    recover_orphaned_runs()

    get_redis().set(f"{key_prefix()}:after-sweep", "1", ex=5)

    assert redis_client.get(f"{key_prefix()}:after-sweep") == "1"
