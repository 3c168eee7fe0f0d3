"""The streams of a worker share their per-run checks (stream exists, run active)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from promptmgr import sse
from promptmgr.sse import RunEventSource

pytestmark = pytest.mark.unit


class Counted:
    """A check that answers ``answer`` after a moment, counting its calls."""

    def __init__(self, answer: bool = True, *, fail: bool = False) -> None:
        self.answer, self.fail, self.calls = answer, fail, 0

    async def __call__(self) -> bool:
        self.calls += 1
        await asyncio.sleep(0.01)
        if self.fail:
            raise ConnectionError("unreachable")
        return self.answer


async def test_the_watchers_of_a_run_asking_at_one_heartbeat_make_one_database_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def run_is_active(run_id: int) -> bool:
        asked.append(run_id)
        return True

    monkeypatch.setattr(sse, "run_is_active", run_is_active)
    watchers = [RunEventSource(7) for _ in range(50)] + [RunEventSource(8) for _ in range(50)]

    finished = await asyncio.gather(*(w.finished() for w in watchers))

    assert finished == [False] * 100
    assert sorted(asked) == [7, 8]  # one check per run, not one per watcher


async def test_an_answer_serves_only_for_its_max_age(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = sse._SharedChecks(asyncio.get_running_loop())
    check = Counted()
    assert await checks.ask(("active", 1), check)
    assert await checks.ask(("active", 1), check)
    assert check.calls == 1
    monkeypatch.setattr(sse, "SHARED_CHECK_MAX_AGE", 0.0)
    await asyncio.sleep(0.001)
    assert await checks.ask(("active", 1), check)
    assert check.calls == 2


async def test_a_failed_check_is_not_kept() -> None:
    checks = sse._SharedChecks(asyncio.get_running_loop())
    failing = Counted(fail=True)
    with pytest.raises(ConnectionError):
        await checks.ask(("stream", 1), failing)
    working = Counted()
    assert await checks.ask(("stream", 1), working)
    assert working.calls == 1


async def test_a_no_that_may_soon_turn_yes_is_asked_again_but_a_kept_no_is_not() -> None:
    checks = sse._SharedChecks(asyncio.get_running_loop())
    absent = Counted(answer=False)
    assert not await checks.ask(("stream", 1), absent, keep_no=False)
    assert not await checks.ask(("stream", 1), absent, keep_no=False)
    assert absent.calls == 2  # a new run's stream may appear any moment
    ended = Counted(answer=False)
    assert not await checks.ask(("active", 1), ended)
    assert not await checks.ask(("active", 1), ended)
    assert ended.calls == 1


async def test_a_watcher_going_away_does_not_cancel_the_check_the_others_wait_on() -> None:
    checks = sse._SharedChecks(asyncio.get_running_loop())
    check = Counted()
    leaving = asyncio.create_task(checks.ask(("active", 1), check))
    staying = asyncio.create_task(checks.ask(("active", 1), check))
    await asyncio.sleep(0)
    leaving.cancel()
    assert await staying
    assert check.calls == 1
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_check_runs_apart_from_the_request_that_happened_to_start_it() -> None:
    # It outlives that request when its client goes: it must not run in the request's
    # context (a request's thread-sensitive executor is given back when the request ends).
    request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="none")
    seen: list[str] = []

    async def check() -> bool:
        seen.append(request_var.get())
        return True

    request_var.set("the first asker's request")
    assert await sse._SharedChecks(asyncio.get_running_loop()).ask(("active", 1), check)
    assert seen == ["none"]


def test_each_event_loop_of_a_process_waits_on_its_own_checks_only() -> None:
    # Two loops in two threads, as the web server's and the queue worker's: a loop whose
    # call is in flight must not be handed the other loop's answer meanwhile.
    a_started, b_asked = threading.Event(), threading.Event()
    answers: dict[str, object] = {}

    async def on_a() -> None:
        release = asyncio.Event()

        async def slow_yes() -> bool:
            await release.wait()
            return True

        first = asyncio.create_task(sse._shared_checks.get().ask(("active", 9), slow_yes))
        await asyncio.sleep(0.01)
        a_started.set()
        await asyncio.to_thread(b_asked.wait, 10)
        second = asyncio.create_task(sse._shared_checks.get().ask(("active", 9), Counted(answer=False)))
        await asyncio.sleep(0.01)
        release.set()
        answers["a"] = [await first, await second]

    async def on_b() -> None:
        await asyncio.to_thread(a_started.wait, 10)
        answers["b"] = await sse._shared_checks.get().ask(("active", 9), Counted(answer=False))
        b_asked.set()

    threads = [threading.Thread(target=asyncio.run, args=(work(),)) for work in (on_a, on_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert answers == {"a": [True, True], "b": False}
