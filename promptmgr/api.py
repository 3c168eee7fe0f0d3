"""The one NinjaAPI of the project: it gathers each app's router under ``/api/``."""

from __future__ import annotations

import logging

import redis
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.security import django_auth

from askuser.api import router as askuser_router
from promptmgr.projects_api import router as projects_router
from promptmgr.runs_api import router as runs_router

# Session auth enforces CSRF on unsafe methods; the relay endpoints override it with
# their bearer-token auth.
api = NinjaAPI(title="PromptManager API", version="1", auth=django_auth, urls_namespace="api")
api.add_router("/projects", projects_router, tags=["projects"])
api.add_router("/", runs_router, tags=["runs"])
api.add_router("/askuser", askuser_router, tags=["ask-user"])

logger = logging.getLogger(__name__)
MSG_REDIS_DOWN = "The live service (Redis) is unreachable; nothing was changed. Try again shortly."


@api.exception_handler(redis.RedisError)
def redis_unavailable(request: HttpRequest, exc: redis.RedisError) -> HttpResponse:
    # A clear 503 instead of a 500: the request can simply be retried once Redis is back.
    logger.error("Redis unavailable during %s %s: %s", request.method, request.path, exc)
    return api.create_response(request, {"detail": MSG_REDIS_DOWN}, status=503)
