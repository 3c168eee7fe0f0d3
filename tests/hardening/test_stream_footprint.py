"""300 SSE clients over 10 runs, then all gone: the worker returns to its idle footprint.

The load is ``bench/streams_footprint.py`` itself (the app under uvicorn as its own
process, the scripted model, the bundled CLI, Redis): the figures it prints are the ones
asserted here, so the test and the benchmark cannot drift apart. About two minutes: the
crowd comes twice, to tell what streams keep from an allocator's high-water mark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.streams_footprint import SECOND_CROWD_RSS_MIB, TOLERANCE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

REPO = Path(__file__).resolve().parents[2]


def test_300_streams_over_10_runs_leave_no_thread_fd_memory_or_redis_connection_behind(
    redis_url: str,
) -> None:
    completed = subprocess.run(
        [sys.executable, "bench/streams_footprint.py", "--streams", "300", "--runs", "10", "--json"],
        cwd=REPO,
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=450,
    )
    print(completed.stdout)
    assert completed.returncode == 0, completed.stderr[-3000:]
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    idle, peak, after, again = figures["idle"], figures["peak"], figures["after"], figures["after_again"]

    # Every client read its run to "done" (the benchmark fails otherwise), a few dozen events each.
    assert figures["events_received"] >= 300 * 10
    # While 300 clients are connected: no thread and no Redis connection per client, and
    # none held per run either (the runs' control messages come through one subscription,
    # their events through one appends connection and one shared reader). What the
    # allowance of 3 a run covers is the pool's surplus for a few seconds after a burst:
    # the crowd's catch-up reads (8 at most at once) and the runs' own commands.
    assert peak["threads"] <= idle["threads"] + 2
    assert peak["redis_connections"] <= idle["redis_connections"] + 3 * figures["runs"]
    # The runs' control messages: one subscription for all of them, none once they ended.
    assert (idle["redis_subscriptions"], peak["redis_subscriptions"]) == (0, 1)
    # All gone: threads, file descriptors and Redis connections back within 10% of idle
    # (the connections by client name in the message: which part of the worker kept one).
    for name in ("threads", "fds", "redis_connections", "redis_subscriptions"):
        for left in (after, again):
            assert left[name] <= idle[name] * (1 + TOLERANCE), (
                name,
                idle[name],
                left[name],
                idle["redis_clients"],
                left["redis_clients"],
            )
    # The resident size, which the web server gives back because it runs with
    # PYTHONMALLOC=malloc (docs/design-notes.md, "Open streams cost no thread"): within 10% of
    # idle once the first crowd has gone, and nothing kept per stream: a second crowd of
    # 300 adds (next to) nothing to what the first left; 43 KB kept per stream would add 13 MiB.
    assert after["rss_mib"] <= idle["rss_mib"] * (1 + TOLERANCE), (idle["rss_mib"], after["rss_mib"])
    assert again["rss_mib"] <= after["rss_mib"] + SECOND_CROWD_RSS_MIB, (after["rss_mib"], again["rss_mib"])
