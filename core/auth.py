"""Django's ``ModelBackend``, with a signed-in request's user loaded by SQL compiled once.

Every signed-in request loads its user right after its session, in front of everything
else (a person's answer or decision, an event stream starting). Django's
``UserModel._default_manager.get(pk=...)`` spends most of that load compiling the query:
0.29 ms against 0.09 ms for the same query compiled once (``core.prepared``; SQLite, 2
cores, idle; more than that on the request's thread after a pause). Logging in, password
checks and permissions stay Django's own.

``AUTHENTICATION_BACKENDS`` names this class, and a session stores the path of the
backend that logged it in: migration ``core.0002`` moves the sessions of Django's backend
to this one (and back), so nobody is signed out by the switch.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import backends, get_user_model

from core.prepared import PreparedGet

DJANGO_BACKEND = "django.contrib.auth.backends.ModelBackend"
BACKEND = "core.auth.ModelBackend"

_UserModel = get_user_model()
_user_by_pk: PreparedGet[Any] = PreparedGet(
    lambda: _UserModel._default_manager.all(), _UserModel._meta.pk.name, placeholder=0
)


class ModelBackend(backends.ModelBackend):
    def get_user(self, user_id: Any) -> Any:
        # As Django's: None for an unknown or inactive user.
        try:
            user = _user_by_pk.get(user_id)
        except _UserModel.DoesNotExist:
            return None
        return user if self.user_can_authenticate(user) else None
