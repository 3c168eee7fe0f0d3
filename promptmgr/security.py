"""The Content-Security-Policy header (django-csp), set on the event loop.

django-csp's middleware is a ``MiddlewareMixin``, which under ASGI runs both of its steps
in a thread; they only build a string, so they run inline like Django's own middleware
here (``core.middleware.InlineMixin``). The policy is ``CONTENT_SECURITY_POLICY`` in
settings: scripts and styles from this origin only, so no inline script or handler runs.
"""

from __future__ import annotations

from csp.middleware import CSPMiddleware as _CSPMiddleware

from core.middleware import InlineMixin


class CSPMiddleware(InlineMixin, _CSPMiddleware):
    pass
