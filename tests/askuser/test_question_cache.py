"""The cached question of a run (what the runner's idle read shows as a card) is dropped
only while it is still the answered one: a newer question cached meanwhile stays.

A new question is cached, marked shown and its card appended in one step
(``live.question_show``), a permission request's card goes with its pending mark
(``live.permission_pending_add``), and an answer's or decision's card update with its
hand-off (``live.answer_push``)."""

from __future__ import annotations

import pytest

from askuser import live
from core import events
from core.redis import get_async_redis

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


def stream(events_read: list[events.Event]) -> list[tuple[int, str, dict[str, object]]]:
    return [(event.id, event.event, event.data) for event in events_read]


async def test_showing_a_question_caches_it_and_appends_its_card_before_what_follows() -> None:
    question = {"question_id": "q-1", "questions": [{"question": "Which?"}]}

    shown = await live.question_show(
        7, question, ttl=60, then=[("run_status", {"status": "waiting_for_user"})]
    )

    assert shown is True
    assert await live.question_cache_get(7) == question
    assert stream(await events.read_events(7, 0)) == [
        (1, "ask_user_question", question),
        (2, "run_status", {"status": "waiting_for_user"}),
    ]
    # The runner's safety net finds it shown and pushes nothing.
    assert await live.question_show(7, question, ttl=60, then=[], cache=False) is False
    assert len(await events.read_events(7, 0)) == 2


async def test_a_question_shown_already_gets_no_second_card_but_what_follows_still_lands() -> None:
    question = {"question_id": "q-1", "questions": []}
    assert await get_async_redis().sadd(live.question_shown_key(7), "q-1") == 1  # shown already

    shown = await live.question_show(
        7, question, ttl=60, then=[("run_status", {"status": "waiting_for_user"})]
    )

    assert shown is False
    assert stream(await events.read_events(7, 0)) == [(1, "run_status", {"status": "waiting_for_user"})]


async def test_a_shown_question_and_its_mark_expire_with_the_ttl_given() -> None:
    await live.question_show(7, {"question_id": "q-1", "questions": []}, ttl=45, then=[])

    client = get_async_redis()
    assert 40 < await client.ttl(live.question_cache_key(7)) <= 45
    assert 40 < await client.ttl(live.question_shown_key(7)) <= 45


async def test_a_permission_requests_pending_mark_and_its_card_land_together() -> None:
    card = {"request_id": "r-1", "kind": "permission"}

    await live.permission_pending_add(7, "r-1", ttl=60, then=[("permission_request", card)])

    assert await live.permissions_pending(7) is True
    assert stream(await events.read_events(7, 0)) == [(1, "permission_request", card)]


async def test_the_safety_net_shows_a_question_cached_on_its_own_once_and_leaves_its_cache_alone() -> None:
    question = {"question_id": "q-1", "questions": []}
    await live.question_cache_put(7, question, ttl=30)

    first = await live.question_show(7, question, ttl=60, then=[], cache=False)
    second = await live.question_show(7, question, ttl=60, then=[], cache=False)

    assert (first, second) == (True, False)
    assert stream(await events.read_events(7, 0)) == [(1, "ask_user_question", question)]
    assert await get_async_redis().ttl(live.question_cache_key(7)) <= 30  # not cached again


async def test_a_permission_requests_pending_mark_takes_the_ttl_given_even_with_no_events() -> None:
    await live.permission_pending_add(7, "r-1", ttl=45, then=[])

    assert await live.permissions_pending(7) is True
    assert 40 < await get_async_redis().ttl(live.pending_permissions_key(7)) <= 45
    assert await events.read_events(7, 0) == []


async def test_a_hand_off_lands_after_the_cards_events_and_replaces_one_not_yet_taken() -> None:
    decided = [("permission_decided", {"request_id": "r-1"}), ("run_status", {"status": "running"})]

    await live.answer_push("r-1", {"result": {"behavior": "deny"}}, ttl=60)
    await live.answer_push("r-1", {"result": {"behavior": "allow"}}, ttl=45, run_events=(7, decided))

    assert stream(await events.read_events(7, 0)) == [
        (1, "permission_decided", {"request_id": "r-1"}),
        (2, "run_status", {"status": "running"}),
    ]
    assert 40 < await get_async_redis().ttl(live.answer_key("r-1")) <= 45
    assert await live.answer_pop("r-1", wait_seconds=0) == {"result": {"behavior": "allow"}}
    assert await live.answer_pop("r-1", wait_seconds=0) is None
