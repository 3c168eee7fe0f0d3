"""A web worker's start-up and shutdown (the ASGI lifespan), under a real uvicorn."""

from __future__ import annotations

import gc

import pytest

from promptmgr.lifecycle import GC_YOUNG_THRESHOLD
from tests.conftest import LiveServer

pytestmark = pytest.mark.e2e


def test_what_start_up_loaded_is_kept_out_of_full_collections_while_the_app_serves(
    app_server: LiveServer,
) -> None:
    # Everything imported by then (Django, the app, the SDK): the collector skips it, so
    # a full collection no longer stalls the worker's streams for ~100 ms.
    assert gc.get_freeze_count() > 50_000

    app_server.stop()

    # A process that serves the app more than once keeps nothing frozen in between.
    assert gc.get_freeze_count() == 0


def test_the_young_generation_is_collected_less_often_while_the_app_serves(
    app_server: LiveServer,
) -> None:
    default = (700, 10, 10)  # Python's, which the test process has not changed
    # Short-lived objects of the streams are no longer moved on to the older generations,
    # whose collections stalled every stream of the worker.
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *default[1:])

    app_server.stop()

    assert gc.get_threshold() == default
