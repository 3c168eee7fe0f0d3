"""The one NinjaAPI of the project: it gathers each app's router under ``/api/``."""

from __future__ import annotations

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
