"""The cached question of a run (what the runner's idle read shows as a card) is dropped
only while it is still the answered one: a newer question cached meanwhile stays."""

from __future__ import annotations

import pytest

from askuser import live

pytestmark = pytest.mark.unit


async def test_clearing_an_answered_question_drops_it_from_the_cache() -> None:
    await live.question_cache_put(7, {"question_id": "q-1", "questions": []}, ttl=60)

    await live.question_cache_clear(7, "q-1")

    assert await live.question_cache_get(7) is None


async def test_clearing_an_older_question_leaves_the_newer_one_cached() -> None:
    newer = {"question_id": "q-2", "questions": [{"question": "Which?"}]}
    await live.question_cache_put(7, newer, ttl=60)

    await live.question_cache_clear(7, "q-1")

    assert await live.question_cache_get(7) == newer


async def test_clearing_when_nothing_is_cached_does_nothing() -> None:
    await live.question_cache_clear(7, "q-1")

    assert await live.question_cache_get(7) is None
