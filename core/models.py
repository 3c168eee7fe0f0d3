"""The identity of this deployment's database."""

from __future__ import annotations

import uuid

from django.db import models


class Instance(models.Model):
    """One row, made the first time it is needed: a random id for this database.

    Redis keys are built from database ids, which repeat when a database is re-created or
    a second deployment shares the Redis. Folding this id into every key prefix keeps each
    database's live state apart (``core.redis.key_prefix``).
    """

    SINGLETON_PK = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_PK)
    uid = models.UUIDField(default=uuid.uuid4, editable=False, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"instance {self.uid}"
