from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest


def product(request: HttpRequest) -> dict[str, Any]:
    """Lets every page say when the offline demo model, not Claude, is answering."""
    return {"demo_model": settings.DEMO_MODEL}
