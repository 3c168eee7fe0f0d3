"""Live state is keyed by something that cannot repeat: two databases never share it.

Run ids come from each database's autoincrement, so a re-created database (or a second
deployment) on the same Redis and prefix hands out run 1 again. Each database folds its
own instance id into the key prefix, and a new run starts with no live state of an
earlier run that had its id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.unit

# One life of a database: migrate, make a user, a project and run 1, ask a question in
# it (through the real question store), then report what run 1's live state shows.
LIFE = """
import asyncio, json, sys
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from askuser import live as askuser_live
from askuser.asking import question_create
from core.questions import QuestionSpec
from core import events
from core.redis import key_prefix, load_instance_uid
from promptmgr.models import Conversation, Project, Run

load_instance_uid()
seen_before = [e.event for e in events.read_all_events_sync(1)]
user = User.objects.create_user(sys.argv[1])
project = Project.objects.create(owner=user, name=sys.argv[1])
conversation = Conversation.objects.create(project=project, user=user)
run = Run.objects.create(conversation=conversation, user=user, prompt="p", status="running")
cached_before = asyncio.run(askuser_live.question_cache_get(run.pk))
if sys.argv[2] == "ask":
    asyncio.run(question_create(run_id=run.pk, source="mcp", timeout=300,
        questions=[QuestionSpec(question="Secret plan of " + sys.argv[1] + "?")]))
print(json.dumps({
    "run_id": run.pk,
    "prefix": key_prefix(),
    "events_before": seen_before,
    "question_before": cached_before,
    "events_after": [e.data for e in events.read_all_events_sync(run.pk)],
}))
"""


def _life(tmp_path: Path, database: str, username: str, action: str, redis_url: str, prefix: str) -> Any:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "promptmgr.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / database}",
        "REDIS_URL": redis_url,
        "REDIS_KEY_PREFIX": prefix,
        "VAR_DIR": str(tmp_path / "var"),
    }
    done = subprocess.run(
        [sys.executable, "-c", LIFE, username, action], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_database_on_the_same_redis_and_prefix_sees_nothing_of_the_firsts_run_1(
    tmp_path: Path, redis_url: str, redis_client: Any
) -> None:
    prefix = f"pmtest-instances-{os.getpid()}-{tmp_path.name}"
    try:
        first = _life(tmp_path, "first.sqlite3", "alice", "ask", redis_url, prefix)
        second = _life(tmp_path, "second.sqlite3", "mallory", "look", redis_url, prefix)
    finally:
        for key in redis_client.scan_iter(match=f"{prefix}:*", count=500):
            redis_client.delete(key)

    # The same id, the same Redis, the same configured prefix: only the instance differs.
    assert first["run_id"] == second["run_id"] == 1
    assert first["prefix"] != second["prefix"]
    assert first["prefix"].startswith(f"{prefix}:") and second["prefix"].startswith(f"{prefix}:")
    # The first database's run 1 asked a question; its card and events exist...
    assert [e.get("status") or "question" for e in first["events_after"]] == ["question", "waiting_for_user"]
    # ...and the second database's run 1 shows nothing of them.
    assert second["events_before"] == []
    assert second["question_before"] is None
    assert second["events_after"] == []


def test_a_database_keeps_its_instance_id_across_restarts(tmp_path: Path, redis_url: str) -> None:
    prefix = f"pmtest-restart-{os.getpid()}"
    one = _life(tmp_path, "db.sqlite3", "alice", "look", redis_url, prefix)
    two = _life(tmp_path, "db.sqlite3", "bob", "look", redis_url, prefix)
    assert one["prefix"] == two["prefix"]
    assert (one["run_id"], two["run_id"]) == (1, 2)
