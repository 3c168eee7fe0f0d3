"""Files API: browse a conversation's worktree or a project's default branch, download a
worktree as a zip. Owner and members only; everyone else gets 404, and so does any path
that would lead outside the tree (``services/files.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Router, Schema

from core.schemas import errors

from .services import files as files_service

router = Router()


class EntryOut(Schema):
    name: str
    path: str
    type: str  # dir | file | symlink | submodule
    size: int | None


class ListingOut(Schema):
    path: str
    entries: list[EntryOut]
    truncated: bool  # more than 5,000 entries: the first ones, folders first


class FileContentOut(Schema):
    path: str
    size: int
    binary: bool
    truncated: bool  # the file is over 1 MiB; content holds its first MiB
    content: str
    language: str
    html: str  # the content highlighted (Pygments token classes), one span.ln per line


@router.get("/conversations/{conversation_id}/files", response={200: ListingOut, **errors(401, 404, 422)})
def conversation_files(request: HttpRequest, conversation_id: int, path: str = "") -> Any:
    return files_service.conversation_tree(user=request.user, conversation_id=conversation_id).listing(path)


@router.get(
    "/conversations/{conversation_id}/files/content",
    response={200: FileContentOut, **errors(401, 404, 422)},
)
def conversation_file(request: HttpRequest, conversation_id: int, path: str) -> Any:
    return files_service.conversation_tree(user=request.user, conversation_id=conversation_id).content(path)


@router.get("/projects/{project_id}/files", response={200: ListingOut, **errors(401, 404, 422)})
def project_files(request: HttpRequest, project_id: int, path: str = "") -> Any:
    return files_service.project_tree(user=request.user, project_id=project_id).listing(path)


@router.get("/projects/{project_id}/files/content", response={200: FileContentOut, **errors(401, 404, 422)})
def project_file(request: HttpRequest, project_id: int, path: str) -> Any:
    return files_service.project_tree(user=request.user, project_id=project_id).content(path)


async def _in_a_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Each chunk is read and compressed in a thread, so the event loop serves others meanwhile."""
    while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
        yield chunk


@router.get("/conversations/{conversation_id}/files/zip", response={200: None, **errors(401, 404, 422)})
async def conversation_zip(request: HttpRequest, conversation_id: int) -> StreamingHttpResponse:
    tree = await sync_to_async(files_service.conversation_tree)(
        user=request.user, conversation_id=conversation_id
    )
    response = StreamingHttpResponse(_in_a_thread(tree.zip_chunks()), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="conversation-{conversation_id}.zip"'
    return response
