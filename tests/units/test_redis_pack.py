"""``core.redis.pack`` (hiredis, in C) sends the same bytes as redis-py's own packer, for
the commands the per-delta paths send: JSON with any Unicode, empty strings, integers."""

from __future__ import annotations

import json
import random

import pytest
import redis.asyncio as aredis

from core import events
from core.redis import pack

pytestmark = pytest.mark.unit


def redis_py_packs(*args: str | int) -> bytes:
    return b"".join(aredis.Connection().pack_command(*args))


def random_text(rng: random.Random) -> str:
    alphabet = 'ab \n\r\t"\\$*:é€😀\u2028\x00' + "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(8))
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))


def test_an_append_and_a_stream_read_are_packed_byte_for_byte_as_redis_py_packs_them() -> None:
    rng = random.Random(19)
    for _ in range(500):
        args = [
            part
            for _event in range(rng.randrange(1, 4))
            for part in (random_text(rng), json.dumps({"text": random_text(rng)}, ensure_ascii=False))
        ]
        append: tuple[str | int, ...] = (
            "EVAL",
            events._APPEND_LUA,
            2,
            "pm:{run:1}:events",
            "pm:{run:1}:seq",
            *args,
        )
        keys = [f"pm:x:{{run:{rng.randrange(10**6)}}}:events" for _ in range(rng.randrange(1, 60))]
        read: tuple[str | int, ...] = (
            "XREAD",
            "COUNT",
            500,
            "BLOCK",
            10_000,
            "STREAMS",
            *keys,
            *[f"0-{rng.randrange(10**9)}" for _ in keys],
        )
        for command in (append, read):
            assert pack(*command) == redis_py_packs(*command)
