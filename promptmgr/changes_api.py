"""Changes API: what a run changed (``GET /api/runs/{run_id}/changes``) and undoing it
(``POST /api/runs/{run_id}/revert``). Owner and members only; everyone else gets 404."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema

from core.schemas import errors

from .models import Run
from .services import changes as changes_service

router = Router()


class ChangedFileOut(Schema):
    path: str
    status: str  # added | modified | deleted
    additions: int
    deletions: int
    binary: bool = False
    collapsed: str | None = None  # binary | lockfile | large: the card folds these away


class ChangesOut(Schema):
    run_id: int
    files: list[ChangedFileOut]
    diff: str  # a unified diff (of ``path`` only when given), cut at 2 MiB
    html: str  # the same diff highlighted (token classes), empty past 512 KiB
    truncated: bool
    reverted_at: datetime | None


class RevertOut(Schema):
    run_id: int
    reverted_at: datetime | None
    files: list[ChangedFileOut]


@router.get("/runs/{run_id}/changes", response={200: ChangesOut, **errors(401, 404, 409, 410, 422)})
def run_changes(request: HttpRequest, run_id: int, path: str | None = None, diff: bool = True) -> Any:
    # A sync view: under ASGI it runs in a thread, so git never holds up the event loop.
    return changes_service.run_changes(user=request.user, run_id=run_id, path=path, with_diff=diff)


@router.post("/runs/{run_id}/revert", response={200: RevertOut, **errors(401, 403, 404, 409, 410, 422)})
def revert_run(request: HttpRequest, run_id: int) -> Any:
    run: Run = changes_service.run_revert(user=request.user, run_id=run_id)
    return {"run_id": run.pk, "reverted_at": run.reverted_at, "files": run.changed_files}
